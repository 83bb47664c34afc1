//===- Generate.h - Running an inference plan -------------------*- C++ -*-===//
//
// The host's side of generation (braid generate, braid chat): an inference
// plan (plan.proto's Generation, made by braidc --mode generate) run on a
// backend, weights from a Hugging Face directory or a Braid checkpoint.
// Each call of Generate takes up to max_batch prompts of token ids: their
// tokens go into the KV caches a prefill chunk at a time, then decode makes
// one token per sequence per call until every sequence has stopped. Only
// the drawn ids come back from the device (and the logits, when asked
// for).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_GENERATE_H
#define BRAID_RUNTIME_EXEC_GENERATE_H

#include "runtime/exec/Backend.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace braid::exec {

/// How the next token is chosen (the plan's SAMPLE; Hugging Face's
/// generate semantics).
struct SamplingOptions {
  double temperature = 0; ///< 0: the most likely token (greedy)
  int64_t topK = 0;       ///< > 0: only the k most likely tokens
  double topP = 1;        ///< < 1: the smallest set of at least this mass
  uint64_t seed = 0;      ///< the draws' Philox key
};

/// One sequence's tokens after Generate.
struct Completion {
  std::vector<int32_t> tokens; ///< the new tokens, the stop token included
  /// "eos" (the end-of-sequence token), "length" (max_new_tokens), "stop"
  /// (the caller's callback said so) or "context" (the cache is full:
  /// max_seq_len positions).
  std::string finish;
};

/// Told of each new token of sequence `row` as it is drawn; returning true
/// stops that sequence (a stop string).
using TokenCallback = std::function<bool(int64_t row, int32_t token)>;
/// Told of each function call's logits, [max_batch, vocab] (padded), with
/// the function's name: for tests, which compare them with a reference.
using LogitsCallback =
    std::function<void(const std::string &function,
                       const std::vector<double> &logits)>;

/// A LogitsCallback that writes each call's logits to `out` as one line:
/// the function's name, then the values, space-separated (the
/// --logits-out files of braid generate and braid-run).
LogitsCallback LogitsWriter(std::ostream &out);

struct GeneratorOptions {
  /// A Hugging Face directory (config.json + safetensors) or a Braid
  /// checkpoint (or root) whose model is the plan's; empty: the plan's
  /// seeded initial weights.
  std::string weights;
  /// The device's name ("cpu", "cuda") and its backend: null for the CPU
  /// executor, else the factory BackendFor(device) gives (Devices.h).
  std::string device = "cpu";
  BackendFactory backend;
  /// Model fields the checkpoint may differ in (--allow-model-change).
  std::set<std::string> allowModelChange;
  /// Where notes on the loaded weights go; none when null.
  std::ostream *log = nullptr;
  /// The other ranks of a plan split over tensor parallelism (every rank
  /// runs the same calls with the same inputs and draws the same ids);
  /// null for a plan of one rank.
  Communicator *comm = nullptr;
};

class Generator {
public:
  /// The plan's backend with its weights loaded. The plan must be an
  /// inference plan of one rank.
  static absl::StatusOr<std::unique_ptr<Generator>>
  Create(const plan::Plan &plan, const GeneratorOptions &options);
  ~Generator();

  /// The backend running the plan (profiles, kernel notes).
  Backend &backend();

  int64_t maxBatch() const { return generation().max_batch(); }
  int64_t maxSeqLen() const { return generation().max_seq_len(); }
  int64_t vocabSize() const { return generation().vocab_size(); }

  /// Continues each prompt (1 .. max_batch of them, each of 1 ..
  /// max_seq_len - 1 ids below the vocabulary size) by up to
  /// `maxNewTokens` tokens, stopping a sequence at any of `eosIds`, when
  /// `onToken` says so, or when its cache is full. With `continueAt` (one
  /// per prompt), row b's cache keeps its first continueAt[b] positions
  /// from the calls before (a conversation: the tokens Generate returned
  /// were drawn, not yet fed, so the next prompt starts with the last of
  /// them) and its prompt goes at the positions after. Every bad argument is
  /// an InvalidArgument naming it.
  absl::StatusOr<std::vector<Completion>>
  Generate(const std::vector<std::vector<int32_t>> &prompts,
           int64_t maxNewTokens, const SamplingOptions &sampling,
           const std::vector<int32_t> &eosIds = {},
           const TokenCallback &onToken = {},
           const LogitsCallback &onLogits = {},
           const std::vector<int64_t> &continueAt = {});

  /// The wall time of the last Generate's calls: its prefill calls (each
  /// waited for, the ids read back), and its decode calls.
  struct Timings {
    int64_t prefillCalls = 0, decodeCalls = 0;
    double prefillSeconds = 0, decodeSeconds = 0;
  };
  const Timings &lastTimings() const { return timings; }

  /// Beam search's settings (Hugging Face's generate with num_beams).
  struct BeamOptions {
    int64_t width = 1;          ///< beams: rows of the plan's batch
    double lengthPenalty = 1.0; ///< a hypothesis scores sum / length^this
    bool earlyStopping = false; ///< stop once `width` hypotheses are done
  };
  /// Beam search from one prompt, as transformers v4.36 to v4.49 do it
  /// (BeamSearchScorer): each step the best max(2, 1 + end ids) x width
  /// candidates over every beam (their log-probabilities summed), those
  /// ending a sequence (ranked below `width`) kept as hypotheses scored by
  /// sum / generated^length_penalty, the others the next beams; done when
  /// `width` hypotheses are kept and none of the beams can beat the worst
  /// (with earlyStopping, at once). Returns the best hypothesis' new
  /// tokens, its end id included. The beams are rows 0 .. width-1: after
  /// each step the reorder function gives each the cache of its parent.
  absl::StatusOr<Completion> BeamSearch(const std::vector<int32_t> &prompt,
                                        int64_t maxNewTokens,
                                        const BeamOptions &beam,
                                        const std::vector<int32_t> &eosIds);

  /// A log-likelihood request (lm-evaluation-harness's loglikelihood): the
  /// tokens of the context, and those of the continuation it is asked
  /// about (at least one).
  struct ScoreRequest {
    std::vector<int32_t> context, continuation;
  };
  /// Its answer: the sum over the continuation's tokens of log p(token |
  /// every token before it), and whether each of them was the most likely
  /// one (greedy decoding would have produced the continuation).
  struct ScoreResult {
    double logprob = 0;
    bool greedy = true;
  };
  /// Scores `requests` with the plan's scoring function (a plan compiled
  /// with generate.score): the longest first, max_batch rows a call,
  /// prefill_chunk positions a call; a sequence (context and continuation,
  /// less its last token) longer than max_seq_len loses its first tokens
  /// (left truncation, as the harness does). `onBatch(done, total)` is
  /// told of the requests scored after each batch. Results are in the
  /// requests' order. InvalidArgument for a plan without scoring, an empty
  /// context (kEmptyContextWhy) or continuation, or an id outside the
  /// vocabulary.
  ///
  /// With `sharePrefixes`, requests with the same context that fit whole
  /// (a multiple-choice item's options) compute it once: all but its last
  /// token go into a row's cache through the score function, then each
  /// continuation is fed a token at a time through decode from the
  /// context's last token, at the positions after the context, and its
  /// log-probabilities are taken from decode's logits in double (each
  /// option rewrites only the positions after the context). The results
  /// are the same log-likelihoods to float rounding.
  static constexpr char kEmptyContextWhy[] =
      "the continuation's first token has nothing before it to be predicted "
      "from (begin the context with the beginning- or end-of-text id, as "
      "lm-evaluation-harness does)";
  absl::StatusOr<std::vector<ScoreResult>>
  Score(const std::vector<ScoreRequest> &requests,
        const std::function<void(int64_t done, int64_t total)> &onBatch = {},
        bool sharePrefixes = true);

  /// Checks sampling options as SAMPLE needs them: temperature >= 0 and
  /// finite, top_k >= 0, top_p in (0, 1].
  static absl::Status CheckSampling(const SamplingOptions &sampling);

private:
  struct State;
  explicit Generator(std::unique_ptr<State> state);
  const plan::Generation &generation() const;
  /// Writes chunk `c` of the prompts (rows past them padding) and runs
  /// prefill on it.
  absl::Status prefillChunk(const std::vector<std::vector<int32_t>> &prompts,
                            int64_t c, const std::vector<int64_t> &start);
  /// Writes a chunk's tokens, positions and targets ([B, P] each) and runs
  /// the score function on them.
  absl::Status scoreCall(const std::vector<double> &tokens,
                         const std::vector<double> &positions,
                         const std::vector<double> &targets);
  /// Score's requests of `groups` (indices of requests sharing a context),
  /// max_batch groups a batch, into `out`; `onDone` told of the requests
  /// each batch scored.
  absl::Status scoreShared(const std::vector<ScoreRequest> &requests,
                           const std::vector<std::vector<int64_t>> &groups,
                           std::vector<ScoreResult> &out,
                           const std::function<void(int64_t)> &onDone);
  /// Runs decode on each row's token at its position (the draw for the
  /// next position).
  absl::Status decodeCall(const std::vector<double> &tokens,
                          const std::vector<double> &positions);
  /// Whether `sampling` needs the logits of the whole vocabulary, which
  /// the plan's draw from each rank's best tokens does not see
  /// (Plan.generation's draw_candidates): a temperature with top_k 0 or
  /// above the candidates.
  bool needsWholeLogits(const SamplingOptions &sampling) const;
  /// The logits buffer `id` of every rank, [B, 1, V] (gathered over the
  /// logits_axis when they are split).
  absl::StatusOr<std::vector<double>> wholeLogits(int id);
  /// SAMPLE's draw of every row from `whole` [B, 1, V] at the plan's draw
  /// positions (the ids the plan's SAMPLE gives on those logits).
  absl::StatusOr<std::vector<double>>
  drawFromLogits(const std::vector<double> &whole,
                 const SamplingOptions &sampling);
  std::unique_ptr<State> state;
  Timings timings;
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_GENERATE_H
