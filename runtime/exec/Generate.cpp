//===- Generate.cpp - Running an inference plan ---------------------------===//
//
// The weights are loaded by the trainer's InitialiseWeights (a Hugging Face
// directory or a Braid checkpoint of any layout, checked against the
// plan's model), so a model trains and generates from one loader.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Generate.h"

#include "runtime/exec/Executor.h"
#include "runtime/exec/TrainerInternal.h"
#include "runtime/plan/Mesh.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
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
};

Generator::Generator(std::unique_ptr<State> state) : state(std::move(state)) {}
Generator::~Generator() = default;

const plan::Generation &Generator::generation() const {
  return state->plan.generation();
}

absl::StatusOr<std::unique_ptr<Generator>>
Generator::Create(const plan::Plan &plan, const GeneratorOptions &options) {
  if (!plan.has_generation())
    return absl::InvalidArgumentError(
        "the plan is a training plan, not an inference plan: compile it with "
        "braidc --mode generate");
  if (plan::WorldSize(plan) != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "the inference plan is for ", plan::WorldSize(plan),
        " ranks; generation runs on one"));
  auto state = std::make_unique<State>(plan);
  State &s = *state;
  TrainerOptions &o = s.options;
  o.device = options.device;
  o.backend = options.backend;
  o.initFrom = options.weights;
  o.allowModelChange = options.allowModelChange;
  o.log = options.log;
  if (!o.backend)
    if (absl::Status c = Executor::CheckRunsOnCpu(s.plan); !c.ok())
      return c;
  trainer::TrainingRun &run = s.run;
  run.seed = s.plan.training().seed();
  absl::StatusOr<std::unique_ptr<Backend>> created =
      o.backend ? o.backend(s.plan, nullptr)
                : absl::StatusOr<std::unique_ptr<Backend>>(
                      Executor::Create(s.plan, nullptr));
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
           {"decode_logits", &s.decodeLogits}}) {
    absl::StatusOr<int> id = trainer::need(e, n.name);
    if (!id.ok())
      return id.status();
    *n.id = *id;
  }
  return std::unique_ptr<Generator>(new Generator(std::move(state)));
}

absl::Status Generator::CheckSampling(const SamplingOptions &sampling) {
  if (!(sampling.temperature >= 0) || !std::isfinite(sampling.temperature))
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature ", sampling.temperature,
        " must be >= 0 and finite (0: greedy)"));
  if (sampling.topK < 0 || sampling.topK > (int64_t(1) << 24))
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k ", sampling.topK, " must be in [0, 2^24] (0: no limit)"));
  if (!(sampling.topP > 0 && sampling.topP <= 1))
    return absl::InvalidArgumentError(absl::StrCat(
        "top_p ", sampling.topP, " must be in (0, 1] (1: no limit)"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Completion>>
Generator::Generate(const std::vector<std::vector<int32_t>> &prompts,
                    int64_t maxNewTokens, const SamplingOptions &sampling,
                    const std::vector<int32_t> &eosIds,
                    const TokenCallback &onToken,
                    const LogitsCallback &onLogits) {
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
  int64_t longest = 0;
  for (int64_t b = 0; b < n; ++b) {
    const std::vector<int32_t> &p = prompts[b];
    if (p.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("prompt ", b, " has no tokens"));
    if (int64_t(p.size()) > seqLen - 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt ", b, " has ", p.size(),
          " tokens; the plan's cache holds ", seqLen,
          " positions (generate.max_seq_len), so a prompt may have at most ",
          seqLen - 1));
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

  std::vector<Completion> out(n);
  std::vector<int64_t> length(batch, 1); // tokens in each row's cache
  std::vector<bool> done(batch, true);
  for (int64_t b = 0; b < n; ++b) {
    length[b] = int64_t(prompts[b].size());
    done[b] = false;
  }
  std::vector<int32_t> next(batch, 0);
  auto logits = [&](int id, const char *function) -> absl::Status {
    if (!onLogits)
      return absl::OkStatus();
    absl::StatusOr<std::vector<double>> values = e.Read(id);
    if (!values.ok())
      return values.status();
    onLogits(function, *values);
    return absl::OkStatus();
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

  // Prefill: the prompts a chunk at a time. A row whose prompt ended in an
  // earlier chunk (or a row without a prompt) writes padding past its
  // tokens, at positions decode overwrites before anything reads them.
  const int64_t chunks = (longest + chunk - 1) / chunk;
  std::vector<double> tokens(batch * chunk), positions(batch * chunk),
      last(batch), draws(batch);
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<int32_t> *p = b < n ? &prompts[b] : nullptr;
      int64_t len = p ? int64_t(p->size()) : 0;
      for (int64_t j = 0; j < chunk; ++j) {
        int64_t at = c * chunk + j;
        tokens[b * chunk + j] = at < len ? (*p)[at] : 0;
        positions[b * chunk + j] = double(std::min(at, seqLen - 1));
      }
      bool endsHere = len > 0 && (len - 1) / chunk == c;
      last[b] = endsHere ? double((len - 1) % chunk) : 0;
      draws[b] = double(std::min(len, seqLen - 1));
    }
    for (auto [id, values] :
         {std::pair<int, const std::vector<double> *>{s.prefillTokens, &tokens},
          {s.prefillPositions, &positions},
          {s.prefillLast, &last},
          {s.drawPositions, &draws}})
      if (absl::Status w = e.Write(id, *values); !w.ok())
        return w;
    if (absl::Status r = e.Run(g.prefill(), StepContext{}); !r.ok())
      return r;
    absl::StatusOr<std::vector<double>> ids = e.Read(s.prefillIds);
    if (!ids.ok())
      return ids.status();
    if (absl::Status l = logits(s.prefillLogits, "prefill"); !l.ok())
      return l;
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
      int64_t position = std::min(length[b], seqLen - 1);
      one[b] = done[b] ? 0 : next[b];
      at[b] = double(position);
      draws[b] = double(std::min(position + 1, seqLen - 1));
    }
    for (auto [id, values] :
         {std::pair<int, const std::vector<double> *>{s.decodeTokens, &one},
          {s.decodePositions, &at},
          {s.drawPositions, &draws}})
      if (absl::Status w = e.Write(id, *values); !w.ok())
        return w;
    if (absl::Status r = e.Run(g.decode(), StepContext{}); !r.ok())
      return r;
    absl::StatusOr<std::vector<double>> ids = e.Read(s.decodeIds);
    if (!ids.ok())
      return ids.status();
    if (absl::Status l = logits(s.decodeLogits, "decode"); !l.ok())
      return l;
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

} // namespace braid::exec
