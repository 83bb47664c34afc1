//===- TrainerStep.cpp - One optimizer step -------------------------------===//
//
// RunStep and RunPipelineStep (Trainer.h): the calls of one optimizer step
// of a plan, without and with pipeline stages, and the data share and stage
// of a rank.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TrainerInternal.h"

#include "runtime/plan/PlanLoader.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace braid::exec {
namespace trainer {

absl::StatusOr<int> need(const Backend &e, const char *name) {
  int id = e.FindBuffer(name);
  if (id < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("the plan has no '", name, "' buffer to train with"));
  return id;
}

absl::StatusOr<int> needInStage(const Backend &e, const char *name,
                                int64_t stage) {
  int id = e.FindBuffer(name, stage);
  if (id < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline stage ", stage, " has no '", name,
                     "' buffer to train with"));
  return id;
}

absl::Status writeEveryCopy(Backend &e, int id,
                            absl::Span<const double> values) {
  int64_t copies = std::max<int64_t>(e.plan().buffers(id).slots(), 1);
  for (int64_t k = 0; k < copies; ++k)
    if (absl::Status s = e.Write(id, values, k); !s.ok())
      return s;
  return absl::OkStatus();
}

std::vector<FeedInputs> feedingChunks(const Backend &e,
                                      const plan::Stage &program,
                                      int64_t stage) {
  std::vector<FeedInputs> feeds(1 + program.chunks_size());
  // The stage's data inputs, by buffer id: which of the three each is.
  std::map<int, int FeedInputs::*> inputs;
  for (int i = 0; i < e.plan().buffers_size(); ++i) {
    const plan::Buffer &b = e.plan().buffers(i);
    if (b.stage() != stage || b.role() != plan::INPUT)
      continue;
    if (b.name() == "tokens")
      inputs[i] = &FeedInputs::tokens;
    else if (b.name() == "targets")
      inputs[i] = &FeedInputs::targets;
    else if (absl::StartsWith(b.name(), "positions"))
      inputs[i] = &FeedInputs::positions;
  }
  if (program.chunks_size() == 0) {
    for (auto [id, field] : inputs)
      feeds[0].*field = id;
    return feeds;
  }
  for (int k = 0; k <= program.chunks_size(); ++k) {
    const plan::Chunk *chunk = k ? &program.chunks(k - 1) : nullptr;
    std::set<std::string> calls =
        chunk ? std::set<std::string>{chunk->forward(), chunk->backward(),
                                      chunk->backward_weight()}
              : std::set<std::string>{program.forward(), program.backward(),
                                      program.backward_weight()};
    for (const plan::Function &fn : e.plan().functions())
      if (calls.count(fn.name()))
        for (const plan::Instruction &inst : fn.body())
          for (const auto *ids : {&inst.inputs(), &inst.outputs()})
            for (int32_t id : *ids)
              if (auto it = inputs.find(id); it != inputs.end())
                feeds[size_t(k)].*(it->second) = id;
  }
  return feeds;
}

} // namespace trainer

namespace {

using trainer::need;
using trainer::needInStage;
using trainer::tracedCommunication;
using trainer::writeEveryCopy;

/// Records, with a trace, the call of `function` that began at `begin`: named
/// `label`, or "label mb M" for a micro-batch `micro` >= 0, with args its
/// micro-batch, its `slot` (when >= 0) and the function.
void traceCall(Trace *trace, const std::string &function, TracePhase phase,
               const char *label, int64_t micro, int64_t slot,
               Trace::Clock::time_point begin) {
  if (!trace)
    return;
  std::string name = label, args;
  if (micro >= 0) {
    absl::StrAppend(&name, " mb ", micro);
    absl::StrAppend(&args, "\"micro_batch\": ", micro, ", ");
  }
  if (slot >= 0)
    absl::StrAppend(&args, "\"slot\": ", slot, ", ");
  absl::StrAppend(&args, "\"function\": ", common::JsonString(function));
  trace->Add(std::move(name), phase, TraceThread::kCalls, begin, Trace::Now(),
             std::move(args));
}

/// Feeds micro-batch `micro` (into `slot`, when >= 0) and, with a trace,
/// records it as "data mb M".
template <typename Feed>
absl::Status tracedFeed(Trace *trace, int64_t micro, int64_t slot,
                        const Feed &feed) {
  if (!trace)
    return feed();
  Trace::Clock::time_point begin = Trace::Now();
  absl::Status s = feed();
  std::string args = absl::StrCat("\"micro_batch\": ", micro);
  if (slot >= 0)
    absl::StrAppend(&args, ", \"slot\": ", slot);
  trace->Add(absl::StrCat("data mb ", micro), TracePhase::kData,
             TraceThread::kCalls, begin, Trace::Now(), std::move(args));
  return s;
}

} // namespace

DataShare DataShareOf(const Backend &e) {
  const plan::Mesh &mesh = e.plan().mesh();
  DataShare share;
  share.ranks = plan::AxisSize(mesh, "dp");
  if (Communicator *comm = e.communicator())
    for (int i = 0; i < mesh.axes_size(); ++i)
      if (mesh.axes(i) == "dp")
        share.rank = comm->Coordinates()[i];
  return share;
}

/// This rank's share of the batch, refused when the plan splits it over
/// ranks this process cannot reach.
static absl::StatusOr<DataShare> RunnableDataShare(const Backend &e) {
  DataShare share = DataShareOf(e);
  if (share.ranks > 1 && !e.communicator())
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan splits the batch over ", share.ranks,
        " data-parallel ranks: run it under mpirun"));
  return share;
}

int64_t StageOf(const Backend &e) { return e.Stage(); }

/// The micro-batches' losses summed, each times its weight when there are
/// weights.
static double weightedSum(const std::vector<double> &losses,
                          absl::Span<const double> weights) {
  double sum = 0;
  for (size_t m = 0; m < losses.size(); ++m)
    sum += weights.empty() ? losses[m] : weights[m] * losses[m];
  return sum;
}

namespace {
/// Settles the backend (ReadLater's outputs are written there) when a step
/// ends early, with an error, before the outputs go out of scope.
struct SettleOnExit {
  Backend &e;
  bool settled = false;
  ~SettleOnExit() {
    if (!settled)
      (void)e.Settle();
  }
};
} // namespace

/// Refuses weights that are not one per micro-batch.
static absl::Status checkLossWeights(absl::Span<const double> weights,
                                     int64_t micros) {
  if (!weights.empty() && int64_t(weights.size()) != micros)
    return absl::InvalidArgumentError(
        absl::StrCat(weights.size(), " loss weights for a step of ", micros,
                     " micro-batches"));
  return absl::OkStatus();
}

absl::StatusOr<double> RunStep(Backend &e, uint64_t seed, int64_t step,
                               const FeedMicroBatch &feed,
                               absl::Span<const double> lossWeights) {
  if (int stages = e.plan().pipeline().stages_size())
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan has a pipeline of ", stages,
        " stages, whose steps RunPipelineStep runs (not RunStep)"));
  const plan::Training &t = e.plan().training();
  const plan::StepFunctions &fns = t.step();
  int64_t micros = std::max<int64_t>(t.micro_batches(), 1);
  absl::StatusOr<DataShare> share = RunnableDataShare(e);
  if (!share.ok())
    return share.status();
  if (absl::Status s = checkLossWeights(lossWeights, micros); !s.ok())
    return s;
  // This rank's samples start at its slice of the global batch.
  int64_t firstSample = share->rank * micros * t.micro_batch_size();
  absl::StatusOr<int> lossGrad = need(e, "loss_grad"), loss = need(e, "loss");
  for (const auto *s : {&lossGrad, &loss})
    if (!s->ok())
      return s->status();
  Trace *trace = e.trace();
  // With a trace, the call is "label" or, for micro >= 0, "label mb micro".
  auto run = [&](const std::string &function, int64_t micro, TracePhase phase,
                 const char *label) -> absl::Status {
    Trace::Clock::time_point begin;
    if (trace)
      begin = Trace::Now();
    absl::Status s =
        e.Run(function, {seed, uint32_t(step),
                         firstSample + std::max<int64_t>(micro, 0) *
                                           t.micro_batch_size()});
    traceCall(trace, function, phase, label, micro, -1, begin);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("step ", step, ": ", s.message()));
    return s;
  };
  if (!fns.zero_grads().empty())
    if (absl::Status s =
            run(fns.zero_grads(), -1, TracePhase::kZeroGrads, "zero_grads");
        !s.ok())
      return s;
  // The mean over the step's micro-batches, times the loss scale (fp16);
  // with weights, each micro-batch's share.
  if (lossWeights.empty())
    if (absl::Status s = e.Write(*lossGrad, {e.LossScale() /
                                             double(micros * share->ranks)});
        !s.ok())
      return s;
  // Each micro-batch's loss, read once the step has run (a device backend
  // enqueues the reads: the host waits for it once a step, in Settle).
  std::vector<double> losses(size_t(micros), 0.0);
  SettleOnExit settle{e};
  for (int64_t m = 0; m < micros; ++m) {
    if (absl::Status s = tracedFeed(trace, m, -1, [&] { return feed(m); });
        !s.ok())
      return s;
    if (!lossWeights.empty())
      if (absl::Status s = e.Write(
              *lossGrad, {e.LossScale() * lossWeights[size_t(m)]});
          !s.ok())
        return s;
    // The first micro-batch gathers ZeRO's parameters as it goes, the last
    // starts the gradients' sums, when the plan has functions for them (the
    // trace's call is a micro_step either way; its "function" tells which).
    if (absl::Status s = run(plan::MicroStepFunction(fns, m, micros), m,
                             TracePhase::kMicroStep, "micro_step");
        !s.ok())
      return s;
    if (absl::Status s = e.ReadLater(*loss, &losses[size_t(m)]); !s.ok())
      return s;
  }
  // Sends of the step (a plan without stages rarely has any) end with it.
  if (absl::Status s = e.WaitSends(); !s.ok())
    return s;
  if (!fns.update().empty())
    if (absl::Status s = run(fns.update(), -1, TracePhase::kUpdate, "update");
        !s.ok())
      return s;
  settle.settled = true;
  if (absl::Status s = e.Settle(); !s.ok())
    return absl::Status(s.code(),
                        absl::StrCat("step ", step, ": ", s.message()));
  double sum = weightedSum(losses, lossWeights);
  if (share->ranks > 1)
    if (absl::Status s = tracedCommunication(
            trace, "ALL_REDUCE", "braid-run: the step's loss over dp", "dp",
            [&] {
              return e.communicator()->AllReduce({"dp"}, &sum, 1, plan::F64);
            });
        !s.ok())
      return s;
  return lossWeights.empty() ? sum / double(micros * share->ranks) : sum;
}

absl::StatusOr<double> RunPipelineStep(Backend &e, uint64_t seed, int64_t step,
                                       const FeedSlot &feed,
                                       absl::Span<const double> lossWeights) {
  const plan::Plan &plan = e.plan();
  const plan::Training &t = plan.training();
  int64_t stages = plan.pipeline().stages_size();
  if (stages == 0)
    return absl::FailedPreconditionError(
        "the plan has no pipeline stages: RunStep runs its steps");
  int64_t micros = std::max<int64_t>(t.micro_batches(), 1);
  absl::StatusOr<DataShare> share = RunnableDataShare(e);
  if (!share.ok())
    return share.status();
  if (stages > 1 && !e.communicator())
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan's pipeline has ", stages,
        " stages, one per rank along 'pp': run it under mpirun"));
  if (absl::Status s = checkLossWeights(lossWeights, micros); !s.ok())
    return s;
  int64_t stage = StageOf(e);
  const plan::Stage &program = plan.pipeline().stages(int(stage));
  bool last = stage == stages - 1;
  int64_t firstSample = share->rank * micros * t.micro_batch_size();
  int loss = -1, lossGrad = -1;
  if (last) {
    absl::StatusOr<int> lossGradId = needInStage(e, "loss_grad", stage),
                        lossId = needInStage(e, "loss", stage);
    for (const auto *s : {&lossGradId, &lossId})
      if (!s->ok())
        return s->status();
    loss = *lossId;
    lossGrad = *lossGradId;
    // With weights, each micro-batch's is written into its slot with its
    // forward (below).
    if (lossWeights.empty())
      if (absl::Status s = writeEveryCopy(
              e, lossGrad, {e.LossScale() / double(micros * share->ranks)});
          !s.ok())
        return s;
  }
  Trace *trace = e.trace();
  // With a trace, the call is "label" or, for micro >= 0, "label mb micro"
  // on `slot`.
  auto run = [&](const std::string &function, int64_t micro, int64_t slot,
                 TracePhase phase, const char *label) -> absl::Status {
    Trace::Clock::time_point begin;
    if (trace)
      begin = Trace::Now();
    absl::Status s = e.Run(
        function,
        {seed, uint32_t(step),
         firstSample + std::max<int64_t>(micro, 0) * t.micro_batch_size()},
        std::max<int64_t>(slot, 0));
    traceCall(trace, function, phase, label, micro, slot, begin);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("step ", step, ", stage ",
                                                 stage, ": ", s.message()));
    return s;
  };
  if (!program.zero_grads().empty())
    if (absl::Status s = run(program.zero_grads(), -1, -1,
                             TracePhase::kZeroGrads, "zero_grads");
        !s.ok())
      return s;
  // The last stage's losses, one a micro-batch, read once the step has run.
  std::vector<double> losses(size_t(micros), 0.0);
  SettleOnExit settle{e};
  // The functions of the calls' model chunk (the interleaved schedule's
  // further chunks are Stage.chunks; the loader checked the indices), or
  // the call's own (a chunk's last backward that starts the gradients'
  // sums).
  auto functionOf = [&](const plan::ScheduleStep &call) -> const std::string & {
    if (!call.function().empty())
      return call.function();
    if (call.chunk() == 0)
      return call.kind() == plan::ScheduleStep::FORWARD    ? program.forward()
             : call.kind() == plan::ScheduleStep::BACKWARD ? program.backward()
                                                           : program.backward_weight();
    const plan::Chunk &chunk = program.chunks(int(call.chunk() - 1));
    return call.kind() == plan::ScheduleStep::FORWARD    ? chunk.forward()
           : call.kind() == plan::ScheduleStep::BACKWARD ? chunk.backward()
                                                         : chunk.backward_weight();
  };
  const int64_t lastChunk = program.chunks_size();
  const std::vector<trainer::FeedInputs> feeds =
      trainer::feedingChunks(e, program, stage);
  for (const plan::ScheduleStep &call : program.schedule()) {
    int64_t m = call.micro_batch(), slot = call.slot();
    if (call.kind() == plan::ScheduleStep::BACKWARD) {
      if (absl::Status s = run(functionOf(call), m, slot,
                               TracePhase::kBackward, "backward");
          !s.ok())
        return s;
      continue;
    }
    if (call.kind() == plan::ScheduleStep::BACKWARD_WEIGHT) {
      if (absl::Status s = run(functionOf(call), m, slot,
                               TracePhase::kBackward, "backward_weight");
          !s.ok())
        return s;
      continue;
    }
    if (feeds[call.chunk()].any())
      if (absl::Status s = tracedFeed(
              trace, m, slot, [&] { return feed(m, slot, call.chunk()); });
          !s.ok())
        return s;
    // The micro-batch's loss gradient, in the slot its backward reads.
    if (last && call.chunk() == lastChunk && !lossWeights.empty()) {
      if (m < 0 || m >= micros)
        return absl::InternalError(
            absl::StrCat("stage ", stage, "'s schedule calls micro-batch ", m,
                         " of ", micros));
      if (absl::Status s =
              e.Write(lossGrad, {e.LossScale() * lossWeights[size_t(m)]},
                      std::max<int64_t>(slot, 0));
          !s.ok())
        return s;
    }
    if (absl::Status s =
            run(functionOf(call), m, slot, TracePhase::kForward, "forward");
        !s.ok())
      return s;
    // The loss is the last stage's last chunk's.
    if (last && call.chunk() == lastChunk) {
      if (m < 0 || m >= micros)
        return absl::InternalError(
            absl::StrCat("stage ", stage, "'s schedule calls micro-batch ", m,
                         " of ", micros));
      if (absl::Status s =
              e.ReadLater(loss, &losses[size_t(m)], std::max<int64_t>(slot, 0));
          !s.ok())
        return s;
    }
  }
  // The update writes parameters that sends may still read (and the next
  // step's activations, buffers of this step's sends).
  if (absl::Status s = tracedCommunication(
          trace, "WAIT_SENDS",
          "braid-run: the stage's sends end before its update", "",
          [&] { return e.WaitSends(); });
      !s.ok())
    return s;
  if (!program.update().empty())
    if (absl::Status s =
            run(program.update(), -1, -1, TracePhase::kUpdate, "update");
        !s.ok())
      return s;
  settle.settled = true;
  if (absl::Status s = e.Settle(); !s.ok())
    return absl::Status(s.code(), absl::StrCat("step ", step, ", stage ", stage,
                                               ": ", s.message()));
  double sum = weightedSum(losses, lossWeights);
  // The last stage's sum, over the stages, then over the data-parallel ranks.
  for (auto [axis, ranks] :
       {std::pair<const char *, int64_t>{"pp", stages}, {"dp", share->ranks}}) {
    if (ranks <= 1)
      continue;
    std::string why = absl::StrCat("braid-run: the step's loss over ", axis);
    if (absl::Status s = tracedCommunication(
            trace, "ALL_REDUCE", why.c_str(), axis,
            [&] {
              return e.communicator()->AllReduce({axis}, &sum, 1, plan::F64);
            });
        !s.ok())
      return s;
  }
  return lossWeights.empty() ? sum / double(micros * share->ranks) : sum;
}

} // namespace braid::exec
