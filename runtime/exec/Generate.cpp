//===- Generate.cpp - Running an inference plan ---------------------------===//
//
// The weights are loaded by the trainer's InitialiseWeights (a Hugging Face
// directory or a Braid checkpoint of any layout, checked against the
// plan's model), so a model trains and generates from one loader.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Generate.h"

#include "runtime/cpu/Generation.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/TrainerInternal.h"
#include "runtime/plan/Mesh.h"
#include "runtime/plan/KernelParams.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <cmath>

namespace braid::exec {

struct Generator::State {
  State(const plan::Plan &p) : plan(p), run(plan, options) {}
  plan::Plan plan;
  TrainerOptions options;
  trainer::TrainingRun run;
  // The buffers the host writes and reads (plan.proto's Generation).
  int prefillTokens = -1, prefillPositions = -1, prefillLast = -1;
  int decodeTokens = -1, decodePositions = -1;
  int sampling = -1, seed = -1, drawPositions = -1;
  int prefillIds = -1, decodeIds = -1, prefillLogits = -1, decodeLogits = -1;
  // Beam search's: each function's candidates, and the parents.
  int topLogprobs[2] = {-1, -1}, topIds[2] = {-1, -1}, beamParents = -1;
  // Scoring's (a plan with Generation.score).
  int scoreTokens = -1, scorePositions = -1, scoreTargets = -1;
  int scoreLogprobs = -1, scoreGreedy = -1;
};

Generator::Generator(std::unique_ptr<State> state) : state(std::move(state)) {}
Generator::~Generator() = default;

const plan::Generation &Generator::generation() const {
  return state->plan.generation();
}

LogitsCallback LogitsWriter(std::ostream &out) {
  return [&out](const std::string &function,
                const std::vector<double> &values) {
    out << function;
    for (double v : values)
      out << ' ' << v;
    out << '\n';
  };
}

absl::StatusOr<std::unique_ptr<Generator>>
Generator::Create(const plan::Plan &plan, const GeneratorOptions &options) {
  if (!plan.has_generation())
    return absl::InvalidArgumentError(
        "the plan is a training plan, not an inference plan: compile it with "
        "braidc --mode generate");
  if (plan::WorldSize(plan) > 1 && !options.comm)
    return absl::FailedPreconditionError(absl::StrCat(
        "the inference plan is for ", plan::WorldSize(plan),
        " ranks: start it with mpirun -np ", plan::WorldSize(plan),
        " braid-run ..."));
  auto state = std::make_unique<State>(plan);
  State &s = *state;
  TrainerOptions &o = s.options;
  o.device = options.device;
  o.backend = options.backend;
  o.initFrom = options.weights;
  o.allowModelChange = options.allowModelChange;
  o.log = options.log;
  o.comm = options.comm;
  if (!o.backend)
    if (absl::Status c = Executor::CheckRunsOnCpu(s.plan); !c.ok())
      return c;
  trainer::TrainingRun &run = s.run;
  run.seed = s.plan.training().seed();
  absl::StatusOr<std::unique_ptr<Backend>> created =
      o.backend ? o.backend(s.plan, o.comm)
                : absl::StatusOr<std::unique_ptr<Backend>>(
                      Executor::Create(s.plan, o.comm));
  if (!created.ok())
    return created.status();
  run.backend = std::move(*created);
  run.stage = 0;
  if (absl::Status w = trainer::InitialiseWeights(run); !w.ok())
    return w;
  Backend &e = *run.backend;
  struct Named {
    const char *name;
    int *id;
  };
  for (const Named &n : std::initializer_list<Named>{
           {"prefill_tokens", &s.prefillTokens},
           {"prefill_positions", &s.prefillPositions},
           {"prefill_last", &s.prefillLast},
           {"decode_tokens", &s.decodeTokens},
           {"decode_positions", &s.decodePositions},
           {"sampling", &s.sampling},
           {"seed", &s.seed},
           {"draw_positions", &s.drawPositions},
           {"prefill_ids", &s.prefillIds},
           {"decode_ids", &s.decodeIds},
           {"prefill_logits", &s.prefillLogits},
           {"decode_logits", &s.decodeLogits},
           {"prefill_top_logprobs", &s.topLogprobs[0]},
           {"prefill_top_ids", &s.topIds[0]},
           {"decode_top_logprobs", &s.topLogprobs[1]},
           {"decode_top_ids", &s.topIds[1]},
           {"beam_parents", &s.beamParents}}) {
    absl::StatusOr<int> id = trainer::need(e, n.name);
    if (!id.ok())
      return id.status();
    *n.id = *id;
  }
  if (!plan.generation().score().empty())
    for (const Named &n : std::initializer_list<Named>{
             {"score_tokens", &s.scoreTokens},
             {"score_positions", &s.scorePositions},
             {"score_targets", &s.scoreTargets},
             {"score_logprobs", &s.scoreLogprobs},
             {"score_greedy", &s.scoreGreedy}}) {
      absl::StatusOr<int> id = trainer::need(e, n.name);
      if (!id.ok())
        return id.status();
      *n.id = *id;
    }
  return std::unique_ptr<Generator>(new Generator(std::move(state)));
}

absl::StatusOr<std::vector<Generator::ScoreResult>>
Generator::Score(const std::vector<ScoreRequest> &requests,
                 const std::function<void(int64_t, int64_t)> &onBatch,
                 bool sharePrefixes) {
  State &s = *state;
  const plan::Generation &g = generation();
  if (g.score().empty())
    return absl::InvalidArgumentError(
        "the inference plan does not score: compile it with braidc --mode "
        "generate --score (generate.score)");
  const int64_t batch = g.max_batch(), seqLen = g.max_seq_len(),
                chunk = g.prefill_chunk(), vocab = g.vocab_size();
  const int64_t n = int64_t(requests.size());
  // Each request's tokens, context then continuation, and where its
  // continuation starts; checked before anything runs.
  std::vector<std::vector<int32_t>> sequences(static_cast<size_t>(n));
  std::vector<int64_t> firstScored(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const ScoreRequest &q = requests[size_t(r)];
    if (q.continuation.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("request ", r, " has an empty continuation"));
    if (q.context.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", r, " has an empty context: ", kEmptyContextWhy));
    std::vector<int32_t> &all = sequences[size_t(r)];
    all = q.context;
    all.insert(all.end(), q.continuation.begin(), q.continuation.end());
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i] < 0 || all[i] >= vocab)
        return absl::InvalidArgumentError(
            absl::StrCat("request ", r, ": token ", i, " is id ", all[i],
                         ", outside the vocabulary of ", vocab));
    // The inputs are every token but the last: at most max_seq_len of
    // them; the earliest go (the harness truncates on the left).
    int64_t drop = std::max<int64_t>(0, int64_t(all.size()) - 1 - seqLen);
    all.erase(all.begin(), all.begin() + drop);
    firstScored[size_t(r)] =
        std::max<int64_t>(1, int64_t(q.context.size()) - drop);
  }
  std::vector<ScoreResult> out(static_cast<size_t>(n));
  Backend &e = *s.run.backend;
  int64_t scored = 0;
  // Requests that share a context (a multiple-choice item's options), whole
  // (not truncated): their context is computed once (scoreShared).
  std::vector<std::vector<int64_t>> groups;
  std::vector<bool> inGroup(static_cast<size_t>(n), false);
  if (sharePrefixes) {
    std::map<std::vector<int32_t>, size_t> groupOf;
    for (int64_t r = 0; r < n; ++r) {
      const ScoreRequest &q = requests[size_t(r)];
      if (q.context.empty() ||
          int64_t(q.context.size() + q.continuation.size()) - 1 > seqLen)
        continue;
      auto [it, added] = groupOf.try_emplace(q.context, groups.size());
      if (added)
        groups.emplace_back();
      groups[it->second].push_back(r);
      inGroup[size_t(r)] = true;
    }
    if (absl::Status st = scoreShared(requests, groups, out, [&](int64_t d) {
          if (onBatch)
            onBatch(scored += d, n);
        });
        !st.ok())
      return st;
  }
  // The others, each whole through the score function: the longest first,
  // so that each batch's rows are of about one length.
  std::vector<int64_t> order;
  for (int64_t r = 0; r < n; ++r)
    if (!inGroup[size_t(r)])
      order.push_back(r);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return sequences[size_t(a)].size() > sequences[size_t(b)].size();
  });
  const int64_t left = int64_t(order.size());
  std::vector<double> tokens(batch * chunk), positions(batch * chunk),
      targets(batch * chunk);
  for (int64_t first = 0; first < left; first += batch) {
    const int64_t rows = std::min(batch, left - first);
    // Inputs are tokens [0, len - 1); position t predicts token t + 1.
    int64_t inputs = 0;
    for (int64_t b = 0; b < rows; ++b)
      inputs = std::max<int64_t>(
          inputs, int64_t(sequences[size_t(order[first + b])].size()) - 1);
    for (int64_t c = 0; c * chunk < inputs; ++c) {
      for (int64_t b = 0; b < batch; ++b) {
        const std::vector<int32_t> *seq =
            b < rows ? &sequences[size_t(order[first + b])] : nullptr;
        const int64_t len = seq ? int64_t(seq->size()) : 0;
        const int64_t from = b < rows ? firstScored[size_t(order[first + b])]
                                      : 0;
        for (int64_t j = 0; j < chunk; ++j) {
          const int64_t at = c * chunk + j;
          const bool real = at + 1 < len;
          // Padding (past a row's tokens, or a row without a request)
          // goes at positions nothing real reads afterwards.
          tokens[b * chunk + j] = real ? (*seq)[size_t(at)] : 0;
          positions[b * chunk + j] = double(std::min(at, seqLen - 1));
          targets[b * chunk + j] =
              real && at + 1 >= from ? (*seq)[size_t(at + 1)] : -100;
        }
      }
      if (absl::Status c = scoreCall(tokens, positions, targets); !c.ok())
        return c;
      absl::StatusOr<std::vector<double>> logprobs = e.Read(s.scoreLogprobs);
      if (!logprobs.ok())
        return logprobs.status();
      absl::StatusOr<std::vector<double>> greedy = e.Read(s.scoreGreedy);
      if (!greedy.ok())
        return greedy.status();
      for (int64_t b = 0; b < rows; ++b) {
        ScoreResult &result = out[size_t(order[first + b])];
        for (int64_t j = 0; j < chunk; ++j)
          if (targets[b * chunk + j] >= 0) {
            result.logprob += (*logprobs)[b * chunk + j];
            result.greedy = result.greedy && (*greedy)[b * chunk + j] != 0;
          }
      }
    }
    scored += rows;
    if (onBatch)
      onBatch(scored, n);
  }
  return out;
}

absl::Status Generator::scoreCall(const std::vector<double> &tokens,
                                  const std::vector<double> &positions,
                                  const std::vector<double> &targets) {
  State &s = *state;
  Backend &e = *s.run.backend;
  for (auto [id, values] :
       {std::pair<int, const std::vector<double> *>{s.scoreTokens, &tokens},
        {s.scorePositions, &positions},
        {s.scoreTargets, &targets}})
    if (absl::Status w = e.Write(id, *values); !w.ok())
      return w;
  return e.Run(generation().score(), StepContext{});
}

absl::Status
Generator::scoreShared(const std::vector<ScoreRequest> &requests,
                       const std::vector<std::vector<int64_t>> &groups,
                       std::vector<ScoreResult> &out,
                       const std::function<void(int64_t)> &onDone) {
  State &s = *state;
  Backend &e = *s.run.backend;
  const plan::Generation &g = generation();
  const int64_t batch = g.max_batch(), seqLen = g.max_seq_len(),
                chunk = g.prefill_chunk();
  // The model's vocabulary, over which the log-probabilities are taken
  // (the score function's; the draw's may be a tokenizer's, smaller).
  int64_t vocab = 0;
  for (const plan::Function &fn : s.plan.functions())
    if (fn.name() == g.score())
      for (const plan::Instruction &inst : fn.body())
        if (inst.kernel() == plan::TOKEN_LOGPROBS ||
            inst.kernel() == plan::TOKEN_LOGPROBS_PARTIAL) // under tp
          vocab = plan::DecodeSample(inst).vocabSize;
  if (vocab < 1)
    return absl::InternalError("the score function has no TOKEN_LOGPROBS");
  // decode draws a token it is not asked for: greedily.
  if (absl::Status w = e.Write(s.sampling, std::vector<double>{0, 0, 1});
      !w.ok())
    return w;
  if (absl::Status w = e.Write(s.seed, std::vector<double>{0, 0}); !w.ok())
    return w;
  const int64_t groupCount = int64_t(groups.size());
  std::vector<double> tokens(batch * chunk), positions(batch * chunk),
      targets(batch * chunk, -100.0);
  for (int64_t first = 0; first < groupCount; first += batch) {
    const int64_t rows = std::min(batch, groupCount - first);
    auto contextOf = [&](int64_t b) -> const std::vector<int32_t> & {
      return requests[size_t(groups[size_t(first + b)].front())].context;
    };
    // 1. Each row's context but its last token into its cache, through the
    // score function asking for nothing.
    int64_t longest = 0;
    for (int64_t b = 0; b < rows; ++b)
      longest = std::max<int64_t>(longest, int64_t(contextOf(b).size()) - 1);
    for (int64_t c = 0; c * chunk < longest; ++c) {
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = b < rows ? int64_t(contextOf(b).size()) - 1 : 0;
        for (int64_t j = 0; j < chunk; ++j) {
          const int64_t at = c * chunk + j;
          tokens[b * chunk + j] = at < len ? contextOf(b)[size_t(at)] : 0;
          positions[b * chunk + j] = double(std::min(at, seqLen - 1));
        }
      }
      if (absl::Status c = scoreCall(tokens, positions, targets); !c.ok())
        return c;
    }
    // 2. Each continuation a token at a time through decode, from the
    // context's last token at the positions after the context: an option
    // rewrites only those positions, which the next one rewrites again. A
    // row's steps: (request, token) for each of its options' tokens.
    std::vector<std::vector<std::pair<int64_t, int64_t>>> steps(
        static_cast<size_t>(rows));
    size_t most = 0;
    for (int64_t b = 0; b < rows; ++b) {
      for (int64_t r : groups[size_t(first + b)])
        for (size_t j = 0; j < requests[size_t(r)].continuation.size(); ++j)
          steps[size_t(b)].push_back({r, int64_t(j)});
      most = std::max(most, steps[size_t(b)].size());
    }
    std::vector<double> one(batch), at(batch);
    for (size_t t = 0; t < most; ++t) {
      for (int64_t b = 0; b < batch; ++b) {
        if (b >= rows || t >= steps[size_t(b)].size()) {
          // Nothing: a position past every real one of the row.
          one[b] = 0;
          at[b] = double(seqLen - 1);
          continue;
        }
        auto [r, j] = steps[size_t(b)][t];
        const ScoreRequest &q = requests[size_t(r)];
        one[b] = j == 0 ? q.context.back() : q.continuation[size_t(j - 1)];
        at[b] = double(int64_t(q.context.size()) - 1 + j);
      }
      if (absl::Status d = decodeCall(one, at); !d.ok())
        return d;
      absl::StatusOr<std::vector<double>> logits = wholeLogits(s.decodeLogits);
      if (!logits.ok())
        return logits.status();
      const int64_t columns = int64_t(logits->size()) / batch;
      for (int64_t b = 0; b < rows; ++b) {
        if (t >= steps[size_t(b)].size())
          continue;
        auto [r, j] = steps[size_t(b)][t];
        const int32_t target = requests[size_t(r)].continuation[size_t(j)];
        const double *x = logits->data() + b * columns;
        // log_softmax over the vocabulary, in double; the most likely id
        // the first of the largest.
        int64_t best = 0;
        double m = x[0];
        for (int64_t i = 1; i < vocab; ++i)
          if (x[i] > m) {
            m = x[i];
            best = i;
          }
        double sum = 0;
        for (int64_t i = 0; i < vocab; ++i)
          sum += std::exp(x[i] - m);
        ScoreResult &result = out[size_t(r)];
        result.logprob += x[target] - m - std::log(sum);
        result.greedy = result.greedy && best == int64_t(target);
      }
    }
    int64_t done = 0;
    for (int64_t b = 0; b < rows; ++b)
      done += int64_t(groups[size_t(first + b)].size());
    onDone(done);
  }
  return absl::OkStatus();
}

namespace {
/// An end-of-sequence id the model can never produce is a mistake in the
/// flags or the tokenizer, not a run that never stops early.
absl::Status checkEosIds(const std::vector<int32_t> &eosIds, int64_t vocab) {
  for (int32_t id : eosIds)
    if (id < 0 || id >= vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          "end-of-sequence id ", id, " is outside the model's ", vocab,
          " ids"));
  return absl::OkStatus();
}
} // namespace

absl::Status Generator::CheckSampling(const SamplingOptions &sampling) {
  // The plan's SAMPLE takes both in float: what float rounds to inf or 0
  // is out of range too.
  if (!(sampling.temperature >= 0) ||
      !std::isfinite(float(sampling.temperature)))
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature ", sampling.temperature,
        " must be >= 0 and finite in float (0: greedy)"));
  if (sampling.topK < 0 || sampling.topK > (int64_t(1) << 24))
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k ", sampling.topK, " must be in [0, 2^24] (0: no limit)"));
  if (!(float(sampling.topP) > 0 && sampling.topP <= 1))
    return absl::InvalidArgumentError(absl::StrCat(
        "top_p ", sampling.topP,
        " must be in (0, 1] and above 0 in float (1: no limit)"));
  return absl::OkStatus();
}

bool Generator::needsWholeLogits(const SamplingOptions &sampling) const {
  const plan::Generation &g = generation();
  if (g.draw_candidates() == 0 || !(sampling.temperature > 0))
    return false;
  // Every column of a rank is a candidate: nothing is left out.
  const plan::Buffer &logits = state->plan.buffers(state->prefillLogits);
  if (g.draw_candidates() >= plan::LastDim(logits))
    return false;
  return !(sampling.topK >= 1 && sampling.topK <= g.draw_candidates());
}

absl::StatusOr<std::vector<double>> Generator::wholeLogits(int id) {
  State &s = *state;
  absl::StatusOr<std::vector<double>> local = s.run.backend->Read(id);
  const plan::Generation &g = generation();
  if (!local.ok() || g.logits_axis().empty())
    return local;
  // [B, 1, V / R] on each of the R ranks along the axis, gathered rank by
  // rank, then each row's blocks side by side.
  const int64_t ranks = plan::AxisSize(s.plan.mesh(), g.logits_axis());
  const int64_t rows = g.max_batch();
  const int64_t cols = int64_t(local->size()) / rows;
  std::vector<double> gathered(local->size() * size_t(ranks));
  if (ranks > 1) {
    if (!s.options.comm)
      return absl::FailedPreconditionError(
          "the logits are split over the ranks, and no communicator joins "
          "them");
    if (absl::Status a = s.options.comm->AllGather(
            {g.logits_axis()}, local->data(), gathered.data(),
            int64_t(local->size()), plan::F64);
        !a.ok())
      return a;
  } else {
    gathered = *local;
  }
  std::vector<double> whole(gathered.size());
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t b = 0; b < rows; ++b)
      std::copy_n(gathered.begin() + (r * rows + b) * cols, cols,
                  whole.begin() + (b * ranks + r) * cols);
  return whole;
}

absl::StatusOr<std::vector<double>>
Generator::drawFromLogits(const std::vector<double> &whole,
                          const SamplingOptions &sampling) {
  State &s = *state;
  const plan::Generation &g = generation();
  absl::StatusOr<std::vector<double>> counters =
      s.run.backend->Read(s.drawPositions);
  if (!counters.ok())
    return counters.status();
  const int64_t rows = g.max_batch();
  const int64_t vocab = int64_t(whole.size()) / rows;
  // The plan's F32 settings and I32 seed words, as SAMPLE reads them.
  const float settings[3] = {float(sampling.temperature),
                             float(sampling.topK), float(sampling.topP)};
  std::vector<int32_t> at(counters->begin(), counters->end()), ids(rows);
  cpu::sampleTokens(whole.data(), rows, vocab, g.vocab_size(), settings,
                    sampling.seed, at.data(), ids.data());
  return std::vector<double>(ids.begin(), ids.end());
}

absl::Status
Generator::prefillChunk(const std::vector<std::vector<int32_t>> &prompts,
                        int64_t c, const std::vector<int64_t> &start) {
  // A row whose prompt ended in an earlier chunk (or a row without a
  // prompt) writes padding past its tokens, at positions decode overwrites
  // before anything reads them.
  State &s = *state;
  Backend &e = *s.run.backend;
  const plan::Generation &g = generation();
  const int64_t batch = g.max_batch(), seqLen = g.max_seq_len(),
                chunk = g.prefill_chunk(), n = int64_t(prompts.size());
  std::vector<double> tokens(batch * chunk), positions(batch * chunk),
      last(batch), draws(batch);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int32_t> *p = b < n ? &prompts[b] : nullptr;
    int64_t len = p ? int64_t(p->size()) : 0;
    int64_t first = b < int64_t(start.size()) ? start[b] : 0;
    for (int64_t j = 0; j < chunk; ++j) {
      int64_t at = c * chunk + j;
      tokens[b * chunk + j] = at < len ? (*p)[at] : 0;
      positions[b * chunk + j] = double(std::min(first + at, seqLen - 1));
    }
    bool endsHere = len > 0 && (len - 1) / chunk == c;
    last[b] = endsHere ? double((len - 1) % chunk) : 0;
    draws[b] = double(std::min(first + len, seqLen - 1));
  }
  for (auto [id, values] :
       {std::pair<int, const std::vector<double> *>{s.prefillTokens, &tokens},
        {s.prefillPositions, &positions},
        {s.prefillLast, &last},
        {s.drawPositions, &draws}})
    if (absl::Status w = e.Write(id, *values); !w.ok())
      return w;
  auto began = std::chrono::steady_clock::now();
  if (absl::Status r = e.Run(g.prefill(), StepContext{}); !r.ok())
    return r;
  // Waits for the call (the ids are what the host reads next).
  if (absl::StatusOr<std::vector<double>> ids = e.Read(s.prefillIds);
      !ids.ok())
    return ids.status();
  timings.prefillSeconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
          .count();
  ++timings.prefillCalls;
  return absl::OkStatus();
}

Backend &Generator::backend() { return *state->run.backend; }

absl::Status Generator::decodeCall(const std::vector<double> &tokens,
                                   const std::vector<double> &positions) {
  State &s = *state;
  Backend &e = *s.run.backend;
  const plan::Generation &g = generation();
  std::vector<double> draws(positions.size());
  for (size_t b = 0; b < positions.size(); ++b)
    draws[b] = std::min<double>(positions[b] + 1, double(g.max_seq_len() - 1));
  for (auto [id, values] :
       {std::pair<int, const std::vector<double> *>{s.decodeTokens, &tokens},
        {s.decodePositions, &positions},
        {s.drawPositions, &draws}})
    if (absl::Status w = e.Write(id, *values); !w.ok())
      return w;
  auto start = std::chrono::steady_clock::now();
  if (absl::Status r = e.Run(g.decode(), StepContext{}); !r.ok())
    return r;
  if (absl::StatusOr<std::vector<double>> ids = e.Read(s.decodeIds);
      !ids.ok())
    return ids.status();
  timings.decodeSeconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ++timings.decodeCalls;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Completion>>
Generator::Generate(const std::vector<std::vector<int32_t>> &prompts,
                    int64_t maxNewTokens, const SamplingOptions &sampling,
                    const std::vector<int32_t> &eosIds,
                    const TokenCallback &onToken,
                    const LogitsCallback &onLogits,
                    const std::vector<int64_t> &continueAt) {
  State &s = *state;
  Backend &e = *s.run.backend;
  const plan::Generation &g = generation();
  const int64_t batch = g.max_batch(), seqLen = g.max_seq_len(),
                chunk = g.prefill_chunk();
  const int64_t n = int64_t(prompts.size());
  if (n < 1 || n > batch)
    return absl::InvalidArgumentError(absl::StrCat(
        n, " prompts: the plan generates for 1 to ", batch,
        " at once (generate.max_batch)"));
  if (maxNewTokens < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens ", maxNewTokens, " must be at least 1"));
  if (absl::Status c = CheckSampling(sampling); !c.ok())
    return c;
  if (absl::Status c = checkEosIds(eosIds, g.vocab_size()); !c.ok())
    return c;
  int64_t longest = 0;
  std::vector<int64_t> start(batch, 0);
  if (!continueAt.empty() && int64_t(continueAt.size()) != n)
    return absl::InvalidArgumentError(absl::StrCat(
        continueAt.size(), " cached lengths for ", n, " prompts"));
  for (int64_t b = 0; b < int64_t(continueAt.size()); ++b) {
    if (continueAt[b] < 0 || continueAt[b] > seqLen - 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", b, " continues at position ", continueAt[b],
          ", outside the cache's [0, ", seqLen - 1, "]"));
    start[b] = continueAt[b];
  }
  for (int64_t b = 0; b < n; ++b) {
    const std::vector<int32_t> &p = prompts[b];
    if (p.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("prompt ", b, " has no tokens"));
    if (start[b] + int64_t(p.size()) > seqLen - 1)
      return absl::InvalidArgumentError(
          start[b] == 0
              ? absl::StrCat("prompt ", b, " has ", p.size(),
                             " tokens; the plan's cache holds ", seqLen,
                             " positions (generate.max_seq_len), so a prompt "
                             "may have at most ",
                             seqLen - 1)
              : absl::StrCat("prompt ", b, " has ", p.size(),
                             " tokens after the ", start[b],
                             " in the cache; the cache holds ", seqLen,
                             " positions (generate.max_seq_len)"));
    for (int32_t id : p)
      if (id < 0 || id >= g.vocab_size())
        return absl::InvalidArgumentError(absl::StrCat(
            "prompt ", b, " has token id ", id, ", outside the model's ",
            g.vocab_size(), " ids"));
    longest = std::max<int64_t>(longest, int64_t(p.size()));
  }

  // The draws' settings, for both functions.
  if (absl::Status w = e.Write(
          s.sampling, std::vector<double>{sampling.temperature,
                                          double(sampling.topK),
                                          sampling.topP});
      !w.ok())
    return w;
  // The seed's words as int32 values (the buffer is I32).
  if (absl::Status w = e.Write(
          s.seed, std::vector<double>{
                      double(int32_t(uint32_t(sampling.seed))),
                      double(int32_t(uint32_t(sampling.seed >> 32)))});
      !w.ok())
    return w;

  timings = Timings();
  std::vector<Completion> out(n);
  std::vector<int64_t> length(batch, 1); // tokens in each row's cache
  std::vector<bool> done(batch, true);
  for (int64_t b = 0; b < n; ++b) {
    length[b] = start[b] + int64_t(prompts[b].size());
    done[b] = false;
  }
  std::vector<int32_t> next(batch, 0);
  // Under tp the draw takes each rank's best tokens; settings those cannot
  // serve (a temperature with top_k 0 or above them, so top-p alone) draw
  // here, from the whole logits, as SAMPLE does.
  const bool hostDraw = needsWholeLogits(sampling);
  // The ids a call drew (read from `ids`), after the logits of the whole
  // vocabulary went to onLogits (or to the draw here).
  auto drawn = [&](int ids, int logits, const char *function)
      -> absl::StatusOr<std::vector<double>> {
    if (!onLogits && !hostDraw)
      return e.Read(ids);
    absl::StatusOr<std::vector<double>> whole = wholeLogits(logits);
    if (!whole.ok())
      return whole.status();
    if (onLogits)
      onLogits(function, *whole);
    if (!hostDraw)
      return e.Read(ids);
    return drawFromLogits(*whole, sampling);
  };
  // Takes row b's new token: stops the row at EOS, at the limit, when the
  // caller says so, or when its cache has no position left for another.
  auto take = [&](int64_t b, int32_t token) {
    Completion &c = out[b];
    c.tokens.push_back(token);
    bool stop = onToken && onToken(b, token);
    if (std::find(eosIds.begin(), eosIds.end(), token) != eosIds.end())
      c.finish = "eos";
    else if (stop)
      c.finish = "stop";
    else if (int64_t(c.tokens.size()) >= maxNewTokens)
      c.finish = "length";
    else if (length[b] + 1 >= seqLen)
      c.finish = "context";
    done[b] = !c.finish.empty();
  };

  // Prefill: the prompts a chunk at a time.
  const int64_t chunks = (longest + chunk - 1) / chunk;
  for (int64_t c = 0; c < chunks; ++c) {
    if (absl::Status r = prefillChunk(prompts, c, start); !r.ok())
      return r;
    absl::StatusOr<std::vector<double>> ids =
        drawn(s.prefillIds, s.prefillLogits, "prefill");
    if (!ids.ok())
      return ids.status();
    for (int64_t b = 0; b < n; ++b)
      if ((int64_t(prompts[b].size()) - 1) / chunk == c) {
        next[b] = int32_t((*ids)[b]);
        take(b, next[b]);
      }
  }

  // Decode: each unfinished row's newest token at its position, and the
  // next one drawn for the position after it.
  std::vector<double> one(batch), at(batch);
  while (std::any_of(done.begin(), done.begin() + n,
                     [](bool d) { return !d; })) {
    for (int64_t b = 0; b < batch; ++b) {
      one[b] = done[b] ? 0 : next[b];
      at[b] = double(std::min(length[b], seqLen - 1));
    }
    if (absl::Status r = decodeCall(one, at); !r.ok())
      return r;
    absl::StatusOr<std::vector<double>> ids =
        drawn(s.decodeIds, s.decodeLogits, "decode");
    if (!ids.ok())
      return ids.status();
    for (int64_t b = 0; b < n; ++b) {
      if (done[b])
        continue;
      ++length[b];
      next[b] = int32_t((*ids)[b]);
      take(b, next[b]);
    }
  }
  return out;
}

absl::StatusOr<Completion>
Generator::BeamSearch(const std::vector<int32_t> &prompt, int64_t maxNewTokens,
                      const BeamOptions &beam,
                      const std::vector<int32_t> &eosIds) {
  State &s = *state;
  Backend &e = *s.run.backend;
  const plan::Generation &g = generation();
  const int64_t batch = g.max_batch(), seqLen = g.max_seq_len();
  const int64_t width = beam.width;
  if (width < 1 || width > batch)
    return absl::InvalidArgumentError(absl::StrCat(
        "beam width ", width, " must be in [1, ", batch,
        "]: the beams are rows of the plan's batch (generate.max_batch)"));
  if (maxNewTokens < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens ", maxNewTokens, " must be at least 1"));
  if (!std::isfinite(beam.lengthPenalty))
    return absl::InvalidArgumentError("the length penalty must be finite");
  if (absl::Status c = checkEosIds(eosIds, g.vocab_size()); !c.ok())
    return c;
  const int64_t promptLen = int64_t(prompt.size());
  if (promptLen < 1 || promptLen > seqLen - 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt has ", promptLen, " tokens; the plan's cache holds ",
        seqLen, " positions, so a prompt may have 1 to ", seqLen - 1));
  for (int32_t id : prompt)
    if (id < 0 || id >= g.vocab_size())
      return absl::InvalidArgumentError(absl::StrCat(
          "the prompt has token id ", id, ", outside the model's ",
          g.vocab_size(), " ids"));
  absl::StatusOr<std::vector<double>> probe = e.Read(s.topIds[0]);
  if (!probe.ok())
    return probe.status();
  const int64_t perRow = int64_t(probe->size()) / batch;
  // Hugging Face's candidates per step: max(2, 1 + end ids) x beams, which
  // each row's best must hold.
  const int64_t wanted =
      std::max<int64_t>(2, 1 + int64_t(eosIds.size())) * width;
  if (wanted > perRow)
    return absl::InvalidArgumentError(absl::StrCat(
        "beam width ", width, " with ", eosIds.size(),
        " end-of-sequence ids needs ", wanted,
        " candidates per beam; the plan keeps ", perRow,
        " (3 x max_batch, at most the vocabulary)"));
  timings = Timings();
  // The cache holds at most seqLen tokens of a beam: the last one drawn is
  // never fed back, so a beam may reach seqLen + 1 tokens, and the search
  // is cut there.
  const int64_t maxLength = std::min(promptLen + maxNewTokens, seqLen + 1);
  const bool cut = maxLength < promptLen + maxNewTokens;

  // The functions draw too (greedily here; beam search reads the
  // candidates instead).
  if (absl::Status w = e.Write(s.sampling, std::vector<double>{0, 0, 1});
      !w.ok())
    return w;
  if (absl::Status w = e.Write(s.seed, std::vector<double>{0, 0}); !w.ok())
    return w;
  // Every beam's row holds the prompt; the first step expands beam 0 alone
  // (the others start at -1e9).
  std::vector<std::vector<int32_t>> rows(width, prompt);
  const int64_t chunk = g.prefill_chunk();
  for (int64_t c = 0; c * chunk < promptLen; ++c)
    if (absl::Status r = prefillChunk(rows, c, {}); !r.ok())
      return r;
  int top = 0; // the function whose candidates are read next (0: prefill)

  struct Hypothesis {
    double score;
    std::vector<int32_t> tokens;
    bool onEos;
  };
  std::vector<Hypothesis> kept;
  double worst = 1e9;
  auto add = [&](const std::vector<int32_t> &tokens, double sumLogprobs,
                 int64_t generated, bool onEos) {
    double score =
        sumLogprobs / std::pow(double(generated), beam.lengthPenalty);
    if (int64_t(kept.size()) < width || score > worst) {
      kept.push_back({score, tokens, onEos});
      if (int64_t(kept.size()) > width) {
        // The worst goes (ties: the earlier added); the next worst is the
        // bar.
        std::vector<std::pair<double, size_t>> ranked;
        for (size_t i = 0; i < kept.size(); ++i)
          ranked.push_back({kept[i].score, i});
        std::sort(ranked.begin(), ranked.end());
        kept.erase(kept.begin() + ranked[0].second);
        worst = ranked[1].first;
      } else {
        worst = std::min(score, worst);
      }
    }
  };
  auto isEos = [&](int32_t token) {
    return std::find(eosIds.begin(), eosIds.end(), token) != eosIds.end();
  };

  std::vector<std::vector<int32_t>> beams(width);
  std::vector<double> scores(width, -1e9);
  scores[0] = 0;
  bool done = false;
  int64_t length = promptLen; // tokens of each beam so far
  while (length < maxLength) {
    absl::StatusOr<std::vector<double>> values = e.Read(s.topLogprobs[top]);
    if (!values.ok())
      return values.status();
    absl::StatusOr<std::vector<double>> ids = e.Read(s.topIds[top]);
    if (!ids.ok())
      return ids.status();
    struct Candidate {
      double score;
      int64_t beam;
      int32_t token;
    };
    std::vector<Candidate> candidates;
    for (int64_t b = 0; b < width; ++b)
      for (int64_t j = 0; j < perRow; ++j)
        candidates.push_back({scores[b] + (*values)[b * perRow + j], b,
                              int32_t((*ids)[b * perRow + j])});
    // Best first; ties to the lower beam, then the lower token.
    std::sort(candidates.begin(), candidates.end(),
              [](const Candidate &x, const Candidate &y) {
                if (x.score != y.score)
                  return x.score > y.score;
                if (x.beam != y.beam)
                  return x.beam < y.beam;
                return x.token < y.token;
              });
    candidates.resize(size_t(wanted));
    const int64_t generated = length + 1 - promptLen;
    std::vector<Candidate> next;
    for (size_t rank = 0; rank < candidates.size(); ++rank) {
      const Candidate &c = candidates[rank];
      if (isEos(c.token)) {
        if (int64_t(rank) < width)
          add(beams[c.beam], c.score, generated, true);
      } else {
        next.push_back(c);
      }
      if (int64_t(next.size()) == width)
        break;
    }
    // Done when the beams cannot beat what is kept (early_stopping false:
    // the step's best candidate as the bound).
    if (int64_t(kept.size()) >= width)
      done = beam.earlyStopping ||
             worst >= candidates[0].score /
                          std::pow(double(generated), beam.lengthPenalty);
    std::vector<std::vector<int32_t>> grown;
    std::vector<double> parents(batch), tokens(batch, 0), positions(batch);
    for (int64_t b = 0; b < batch; ++b)
      parents[b] = double(b);
    for (int64_t b = 0; b < width; ++b) {
      grown.push_back(beams[next[b].beam]);
      grown.back().push_back(next[b].token);
      scores[b] = next[b].score;
      parents[b] = double(next[b].beam);
      tokens[b] = next[b].token;
    }
    beams = std::move(grown);
    ++length;
    if (done || length >= maxLength)
      break;
    // Each beam's row takes its parent's cache, then its new token.
    if (absl::Status w = e.Write(s.beamParents, parents); !w.ok())
      return w;
    if (absl::Status r = e.Run(g.reorder(), StepContext{}); !r.ok())
      return r;
    for (int64_t b = 0; b < batch; ++b)
      positions[b] = double(std::min(length - 1, seqLen - 1));
    if (absl::Status r = decodeCall(tokens, positions); !r.ok())
      return r;
    top = 1;
  }
  if (!done)
    for (int64_t b = 0; b < width; ++b)
      add(beams[b], scores[b], int64_t(beams[b].size()), false);
  // The best: the last of the kept sorted by score (stable: among equal
  // scores, the one added last).
  std::vector<size_t> order(kept.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return kept[x].score < kept[y].score;
  });
  const Hypothesis &best = kept[order.back()];
  Completion out;
  out.tokens = best.tokens;
  if (best.onEos && !eosIds.empty()) {
    out.tokens.push_back(eosIds.front());
    out.finish = "eos";
  } else {
    out.finish = cut && int64_t(best.tokens.size()) + promptLen >= maxLength
                     ? "context"
                     : "length";
  }
  return out;
}

} // namespace braid::exec
