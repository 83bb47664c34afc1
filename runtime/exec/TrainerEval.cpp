//===- TrainerEval.cpp - The validation and test loss ---------------------===//
//
// Evaluate (TrainerInternal.h): the mean loss of the first eval_iters global
// batches of a split, computed by the plan's forward-only functions
// (plan-eval's copies: no dropout, no gradients, in the step's arena).
//
// The samples of a global batch are divided over the data-parallel ranks and
// micro-batches as a training step divides them, and the loss is summed
// over the micro-batches, the pipeline stages (the last stage's) and the
// data-parallel ranks in the same order, so every layout computes the same
// mean of the same per-micro-batch losses (instruction data: the same
// per-token mean, each micro-batch weighted by its counted tokens).
//
// With pipeline stages, every rank runs the micro-batches one after the
// other, each through its model chunks in order, on slot 0, and waits for
// its sends after each call: a micro-batch's activations go stage to stage
// (and, with chunks, from the last stage back to the first) before the next
// one overwrites the slot, and every rank runs the same sequence of calls,
// so each receive meets its send.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TrainerInternal.h"

#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"

#include <string>
#include <vector>

namespace braid::exec::trainer {

absl::Status FeedSamples(TrainingRun &run, const data::BlendedSamples &samples,
                         uint64_t first, int64_t slot, const FeedInputs &to) {
  const FeedInputs &buffers = to;
  if (!buffers.any())
    return absl::OkStatus();
  const int64_t batch = run.batch, seq = run.seq;
  std::vector<int32_t> sample, positions;
  std::vector<uint8_t> mask;
  std::vector<double> tokenValues(size_t(batch * seq)),
      targetValues(size_t(batch * seq)), positionValues;
  if (run.packed)
    positionValues.resize(size_t(batch * seq));
  for (int64_t b = 0; b < batch; ++b) {
    // Instruction data: a target counts where the mask marks the token
    // (packed: never the first token of the next conversation, whose mask
    // value is 0).
    if (absl::Status s = samples.GetSample(first + uint64_t(b), &sample,
                                           run.instruction ? &mask : nullptr,
                                           run.packed ? &positions : nullptr);
        !s.ok())
      return s;
    for (int64_t i = 0; i < seq; ++i) {
      tokenValues[size_t(b * seq + i)] = sample[size_t(i)];
      targetValues[size_t(b * seq + i)] =
          !run.instruction || mask[size_t(i + 1)] ? sample[size_t(i + 1)]
                                                  : kIgnoredTarget;
      if (run.packed)
        positionValues[size_t(b * seq + i)] = positions[size_t(i)];
    }
  }
  Backend &e = *run.backend;
  if (buffers.positions >= 0)
    if (absl::Status s = e.Write(buffers.positions, positionValues, slot);
        !s.ok())
      return s;
  if (buffers.tokens >= 0)
    if (absl::Status s = e.Write(buffers.tokens, tokenValues, slot); !s.ok())
      return s;
  if (buffers.targets >= 0)
    if (absl::Status s = e.Write(buffers.targets, targetValues, slot); !s.ok())
      return s;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>>
CountTargets(const TrainingRun &run, const data::BlendedSamples &samples,
             uint64_t first, int64_t microBatches) {
  const int64_t batch = run.batch, seq = run.seq;
  std::vector<int64_t> counts(size_t(microBatches), 0);
  std::vector<int32_t> sample;
  std::vector<uint8_t> mask;
  for (int64_t m = 0; m < microBatches; ++m)
    for (int64_t b = 0; b < batch; ++b) {
      if (absl::Status s = samples.GetSample(
              first + uint64_t(m * batch + b), &sample, &mask);
          !s.ok())
        return s;
      // The targets are tokens 1 .. seq of the sample.
      for (int64_t i = 1; i <= seq; ++i)
        counts[size_t(m)] += mask[size_t(i)];
    }
  return counts;
}

absl::StatusOr<std::vector<double>>
TokenLossWeights(const TrainingRun &run, const data::BlendedSamples &samples,
                 uint64_t first, int64_t globalBatches) {
  const int64_t micros = run.micros, ranks = run.share.ranks;
  absl::StatusOr<std::vector<int64_t>> counts =
      CountTargets(run, samples, first, globalBatches * micros * ranks);
  if (!counts.ok())
    return counts.status();
  int64_t total = 0;
  for (int64_t n : *counts)
    total += n;
  std::vector<double> weights(size_t(globalBatches * micros), 0.0);
  if (total == 0)
    return weights;
  for (int64_t g = 0; g < globalBatches; ++g)
    for (int64_t m = 0; m < micros; ++m)
      weights[size_t(g * micros + m)] =
          double((*counts)[size_t((g * ranks + run.share.rank) * micros + m)]) /
          double(total);
  return weights;
}

bool HasEvalFunctions(const plan::Plan &plan) {
  if (plan.pipeline().stages_size() == 0)
    return !plan.training().step().eval_step().empty();
  for (const plan::Stage &stage : plan.pipeline().stages())
    if (stage.eval_forward().empty())
      return false;
  return true;
}

absl::StatusOr<double> Evaluate(TrainingRun &run,
                                const data::BlendedSamples &samples,
                                int64_t iters, int64_t step) {
  Backend &e = *run.backend;
  const plan::Plan &plan = run.plan;
  if (!HasEvalFunctions(plan))
    return absl::FailedPreconditionError(
        "the plan has no forward-only functions to evaluate with (compiled "
        "by a braidc without plan-eval): compile it again");
  // ZeRO's parameters are whole only after their gather.
  if (absl::Status s = GatherParams(run); !s.ok())
    return s;
  const int64_t micros = run.micros, batch = run.batch;
  const DataShare share = run.share;
  const int64_t stages = plan.pipeline().stages_size();
  const int64_t stage = run.stage;
  const bool last = stages == 0 || stage == stages - 1;
  int loss = -1;
  if (last) {
    absl::StatusOr<int> id =
        stages ? needInStage(e, "loss", stage) : need(e, "loss");
    if (!id.ok())
      return id.status();
    loss = *id;
  }
  // The functions a micro-batch runs, chunk by chunk, and which of them
  // read the tokens and targets (without a pipeline: eval_step, which does).
  std::vector<std::string> functions;
  std::vector<FeedInputs> feeds = {run.buffers.inputs()};
  if (stages == 0) {
    functions = {plan.training().step().eval_step()};
  } else {
    const plan::Stage &program = plan.pipeline().stages(int(stage));
    functions.push_back(program.eval_forward());
    for (const plan::Chunk &chunk : program.chunks())
      functions.push_back(chunk.eval_forward());
    feeds = feedingChunks(e, program, stage);
  }
  const uint64_t globalBatch = uint64_t(run.globalBatch);
  std::vector<double> losses(size_t(iters * micros), 0.0);
  // Instruction data: the mean over every counted token of the iterations.
  std::vector<double> weights;
  if (run.instruction) {
    absl::StatusOr<std::vector<double>> w =
        TokenLossWeights(run, samples, 0, iters);
    if (!w.ok())
      return w.status();
    weights = std::move(*w);
  }
  bool settled = false;
  auto settle = [&] {
    settled = true;
    return e.Settle();
  };
  absl::Status failed;
  for (int64_t it = 0; it < iters && failed.ok(); ++it)
    for (int64_t m = 0; m < micros && failed.ok(); ++m) {
      const uint64_t first = uint64_t(it) * globalBatch +
                             uint64_t(share.rank * micros * batch + m * batch);
      for (size_t c = 0; c < functions.size() && failed.ok(); ++c) {
        if (feeds[c].any())
          failed = FeedSamples(run, samples, first, 0, feeds[c]);
        if (failed.ok())
          failed = e.Run(functions[c], {run.seed, uint32_t(step), int64_t(first)}, 0);
        if (failed.ok())
          failed = e.WaitSends();
      }
      if (failed.ok() && last)
        failed = e.ReadLater(loss, &losses[size_t(it * micros + m)], 0);
    }
  if (!failed.ok()) {
    if (!settled)
      (void)settle();
    return absl::Status(failed.code(), absl::StrCat("evaluating after step ",
                                                    step, ": ",
                                                    failed.message()));
  }
  if (absl::Status s = settle(); !s.ok())
    return s;
  double sum = 0;
  for (size_t k = 0; k < losses.size(); ++k)
    sum += weights.empty() ? losses[k] : weights[k] * losses[k];
  for (auto [axis, ranks] : {std::pair<const char *, int64_t>{"pp", stages},
                             {"dp", share.ranks}}) {
    if (ranks <= 1)
      continue;
    std::string why = absl::StrCat("braid-run: the evaluation loss over ", axis);
    if (absl::Status s = tracedCommunication(
            e.trace(), "ALL_REDUCE", why.c_str(), axis,
            [&] {
              return e.communicator()->AllReduce({axis}, &sum, 1, plan::F64);
            });
        !s.ok())
      return s;
  }
  return weights.empty() ? sum / double(iters * micros * share.ranks) : sum;
}

} // namespace braid::exec::trainer
