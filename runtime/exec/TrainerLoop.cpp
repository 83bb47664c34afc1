//===- TrainerLoop.cpp - The steps of a run -------------------------------===//
//
// RunSteps (TrainerInternal.h): for each step of the run, the learning rate,
// the micro-batches' samples and one step of the plan (RunStep or
// RunPipelineStep); then the step's line (--log-every), its metrics
// (--metrics-out), its record and its checkpoint (--save).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TrainerInternal.h"

#include "runtime/common/Format.h"

#include "runtime/exec/LossScaler.h"
#include "runtime/exec/Preemption.h"
#include "runtime/ckpt/Checkpoint.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

namespace braid::exec::trainer {
namespace {

/// The line for people of an evaluation of `split` ("validation", "test")
/// after step `step`, and its metrics fields ("valid"/"test" `_loss` and
/// `_ppl`).
std::string evaluationLine(const char *split, int64_t step, double loss,
                           int64_t samples) {
  return absl::StrFormat(
      "%s loss at step %d: %.6f  perplexity %.3f  (%d samples)\n", split, step,
      loss, std::exp(loss), samples);
}
std::string evaluationFields(const char *key, double loss) {
  return absl::StrFormat(", \"%s_loss\": %.9g, \"%s_ppl\": %.9g", key, loss,
                         key, std::exp(loss));
}

} // namespace

absl::Status GatherParams(TrainingRun &run) {
  const std::string &fn = run.t.step().gather_params();
  if (fn.empty())
    return absl::OkStatus();
  absl::Status s = run.backend->Run(fn, {run.seed, 0, 0});
  if (!s.ok())
    return absl::Status(
        s.code(), absl::StrCat("gathering the parameters: ", s.message()));
  return s;
}

absl::Status RunSteps(TrainingRun &run, std::vector<StepRecord> *records) {
  const plan::Plan &plan = run.plan;
  const TrainerOptions &options = run.options;
  const plan::Training &t = run.t;
  const int64_t steps = run.steps, batch = run.batch, seq = run.seq,
                micros = run.micros, globalBatch = run.globalBatch,
                firstStep = run.firstStep;
  const uint64_t seed = run.seed;
  const double slowTimeout = run.slowTimeout;
  const bool pipelined = run.pipelined;
  const DataShare share = run.share;
  const RunState &resumed = run.resumed;
  const cpu::LrSchedule &schedule = *run.schedule;
  const LoopBuffers &buffers = run.buffers;
  const int lr = buffers.lr, step = buffers.step, gradNorm = buffers.gradNorm;
  Backend &e = *run.backend;
  Trace *trace = run.trace.get();
  common::OutputFile *metrics = run.metrics.get();
  std::vector<double> &stepTimes = run.stepTimes;

  // The arena's bytes after a step: this rank's allocation (the plan's
  // prediction) and what the run has touched of it (the operating system's
  // count), each the largest over the job's ranks.
  std::vector<std::string> allAxes(plan.mesh().axes().begin(),
                                   plan.mesh().axes().end());
  bool severalRanks = options.comm && plan::WorldSize(plan) > 1;
  auto arenaBytes = [&](double bytes[2]) -> absl::Status {
    int64_t touched = e.TouchedArenaBytes();
    if (touched < 0)
      return absl::InternalError(
          absl::StrCat("cannot count the arena's touched pages (mincore): ",
                       std::strerror(errno)));
    bytes[0] = double(e.ArenaBytes());
    bytes[1] = double(touched);
    if (!severalRanks)
      return absl::OkStatus();
    std::string group = absl::StrJoin(allAxes, ",");
    return tracedCommunication(
        e.trace(), "ALL_REDUCE",
        "braid-run: the arena's predicted and touched bytes, the largest "
        "over the ranks",
        group.c_str(), [&] {
          return options.comm->AllReduce(allAxes, bytes, 2, plan::F64,
                                         Reduction::kMax);
        });
  };
  auto start = std::chrono::steady_clock::now();
  // fp16: the loss scale (LossScaler.h), applied through the backend; a
  // resumed run continues the scaler it saved.
  std::optional<LossScaler> scaler;
  if (t.has_loss_scaling()) {
    scaler.emplace(t.loss_scaling());
    if (resumed.lossScaler)
      scaler->Restore(*resumed.lossScaler);
  }
  // A checkpoint after step `s` (or of the state loaded, at `s` = the
  // first step - 1, when there is nothing to train).
  auto save = [&](int64_t s) -> absl::Status {
    if (options.comm) {
      options.comm->SetTimeout(slowTimeout);
      options.comm->SetWaitContext(s, "checkpoint save");
    }
    if (absl::Status st = GatherParams(run); !st.ok())
      return st;
    RunState state;
    if (scaler)
      state.lossScaler = scaler->state();
    state.step = s;
    state.consumedSamples =
        resumed.consumedSamples + (s - resumed.step) * globalBatch;
    state.plannedSteps = steps;
    state.globalBatch = globalBatch;
    state.seed = seed;
    state.dataOrder = run.order;
    state.lineage = run.lineage;
    absl::StatusOr<SaveReport> saved =
        SaveCheckpoint(e, options.save, state, options.keepLast);
    if (!saved.ok())
      return absl::Status(saved.status().code(),
                          absl::StrCat("saving the checkpoint of step ", s,
                                       " in ", options.save, ": ",
                                       saved.status().message()));
    if (options.log)
      *options.log << absl::StrFormat(
          "checkpoint: step %d saved to %s (%s in %.2f s, %s/s)\n", s,
          saved->dir, common::FormatBytes(int64_t(saved->bytes)), saved->seconds,
          common::FormatBytes(int64_t(saved->bytes /
                                      std::max(saved->seconds, 1e-9))));
    return absl::OkStatus();
  };
  if (firstStep > steps && !options.save.empty())
    if (absl::Status st = save(resumed.step); !st.ok())
      return st;
  // Nothing to train, and validation asked for: the weights loaded (or
  // initialised) are evaluated, as Megatron's --skip-train does.
  if (firstStep > steps && run.validSamples) {
    std::string line = absl::StrFormat("{\"step\": %d", resumed.step);
    for (auto [samples, iters, split, key] :
         {std::tuple<const data::BlendedSamples *, int64_t, const char *,
                     const char *>{&*run.validSamples, run.evalIters,
                                   "validation", "valid"},
          {run.testSamples ? &*run.testSamples : nullptr, run.testIters, "test",
           "test"}}) {
      if (!samples)
        continue;
      absl::StatusOr<double> loss = Evaluate(run, *samples, iters, resumed.step);
      if (!loss.ok())
        return loss.status();
      if (options.log)
        *options.log << evaluationLine(split, resumed.step, *loss,
                                       iters * globalBatch);
      line += evaluationFields(key, *loss);
    }
    if (metrics)
      if (absl::Status st = metrics->Write(line + "}\n");
          !st.ok() || !(st = metrics->Flush()).ok())
        return absl::Status(st.code(),
                            absl::StrCat("--metrics-out: ", st.message()));
  }
  for (int64_t s = firstStep; s <= steps; ++s) {
    auto stepStart = std::chrono::steady_clock::now();
    if (options.comm) {
      options.comm->SetTimeout(s == firstStep ? slowTimeout
                                              : options.collectiveTimeout);
      options.comm->SetWaitContext(s, "");
    }
    if (scaler)
      e.SetLossScale(scaler->scale());
    // The update this step makes: steps skipped for overflow made none, so
    // AdamW's bias correction and the schedule count only the others (as
    // Megatron's optimizer and scheduler do).
    const int64_t update = s - (scaler ? scaler->skipped() : 0);
    double rate = schedule.lrForUpdate(update);
    for (auto [id, values] :
         {std::pair<int, std::vector<double>>{lr, {rate}},
          {step, {double(update)}}})
      if (absl::Status st = writeEveryCopy(e, id, values); !st.ok())
        return st;
    // Micro-batch m of step s on data-parallel rank d holds the samples that
    // follow those of the earlier micro-batches, ranks and steps: the global
    // order of samples does not depend on the dp degree (nor on pipeline
    // stages).
    const uint64_t batchStart =
        uint64_t(resumed.consumedSamples + (s - firstStep) * globalBatch);
    // Each model chunk's data inputs (one set without them).
    const std::vector<FeedInputs> chunkInputs =
        pipelined ? feedingChunks(e, plan.pipeline().stages(int(run.stage)),
                                  run.stage)
                  : std::vector<FeedInputs>{run.buffers.inputs()};
    auto feed = [&](int64_t m, int64_t slot, int64_t chunk) -> absl::Status {
      return FeedSamples(run, *run.samples,
                         batchStart + uint64_t(share.rank * micros * batch +
                                               m * batch),
                         slot, chunkInputs[size_t(chunk)]);
    };
    // Instruction data: each micro-batch's share of the global batch's
    // counted tokens (every rank counts the whole batch: no collective).
    std::vector<double> weights;
    if (run.instruction) {
      absl::StatusOr<std::vector<double>> w =
          TokenLossWeights(run, *run.samples, batchStart, 1);
      if (!w.ok())
        return w.status();
      weights = std::move(*w);
    }
    absl::StatusOr<double> stepLoss =
        pipelined ? RunPipelineStep(e, seed, s, feed, weights)
                  : RunStep(e, seed, s,
                            [&](int64_t m) { return feed(m, 0, 0); }, weights);
    if (!stepLoss.ok())
      return stepLoss.status();
    absl::StatusOr<std::vector<double>> normValue = e.Read(gradNorm);
    if (!normValue.ok())
      return normValue.status();
    double lossValue = *stepLoss, norm = (*normValue)[0];
    const double lossScale = e.LossScale();
    if (scaler) {
      // A non-finite norm: the gradients overflowed and the update skipped
      // the step (every rank sees the same norm).
      scaler->Update(std::isfinite(norm));
      if (!std::isfinite(norm) && options.log)
        *options.log << absl::StrFormat(
            "step %d: the gradients overflowed at loss scale %g: step "
            "skipped, the scale is now %g\n",
            s, lossScale, scaler->scale());
    }
    auto now = std::chrono::steady_clock::now();
    double stepTime = std::chrono::duration<double>(now - stepStart).count();
    double elapsed = std::chrono::duration<double>(now - start).count();
    if (!std::isfinite(lossValue))
      return absl::InternalError(absl::StrCat("step ", s, ": the loss is ", lossValue));
    if (trace)
      trace->Add(absl::StrCat("step ", s), TracePhase::kStep,
                 TraceThread::kStep, stepStart, now,
                 absl::StrFormat("\"step\": %d, \"loss\": %.9g", s, lossValue));
    stepTimes.push_back(stepTime);
    // The first step touches the arena's pages for the first time and warms
    // the caches: the profile keeps the steps after it (when there are any).
    if (s == firstStep && steps > firstStep)
      e.ResetProfile();
    double tokensPerS = double(globalBatch * seq) / std::max(stepTime, 1e-9);
    double memory[2];
    if (absl::Status st = arenaBytes(memory); !st.ok())
      return st;
    // Validation every eval_interval steps and after the last; the test
    // split after the last.
    double validLoss = std::nan(""), testLoss = std::nan("");
    const bool lastStep = s == steps;
    if (run.validSamples &&
        (s % run.evalInterval == 0 || lastStep)) {
      absl::StatusOr<double> v =
          Evaluate(run, *run.validSamples, run.evalIters, s);
      if (!v.ok())
        return v.status();
      validLoss = *v;
      if (lastStep && run.testSamples) {
        absl::StatusOr<double> tl =
            Evaluate(run, *run.testSamples, run.testIters, s);
        if (!tl.ok())
          return tl.status();
        testLoss = *tl;
      }
    }
    // Model FLOPs utilization, where the plan knows the device's peak.
    const double mfu =
        t.device_peak_flops() > 0 && t.model_flops_per_step() > 0
            ? t.model_flops_per_step() /
                  (std::max(stepTime, 1e-9) * double(plan::WorldSize(plan)) *
                   t.device_peak_flops())
            : std::nan("");
    if (records) {
      records->push_back({s, lossValue, rate, norm, stepTime,
                          int64_t(memory[0]), int64_t(memory[1])});
      records->back().validLoss = validLoss;
    }
    if (options.log && (s % std::max<int64_t>(options.logEvery, 1) == 0 || s == steps))
      *options.log << absl::StrFormat(
          "step %*d/%d  loss %.4f  lr %.3e  grad norm %.3f  %.0f tokens/s%s  "
          "elapsed %.1fs  eta %.1fs\n",
          int(std::to_string(steps).size()), s, steps, lossValue, rate, norm,
          tokensPerS,
          std::isnan(mfu) ? "" : absl::StrFormat("  MFU %.3g%%", 100 * mfu),
          elapsed,
          elapsed / double(s - firstStep + 1) * double(steps - s));
    if (options.log && !std::isnan(validLoss))
      *options.log << evaluationLine("validation", s, validLoss,
                                     run.evalIters * globalBatch);
    if (options.log && !std::isnan(testLoss))
      *options.log << evaluationLine("test", s, testLoss,
                                     run.testIters * globalBatch);
    // A step skipped for overflow has no gradient norm: JSON's null (JSON
    // has no NaN), and "skipped".
    if (metrics) {
      std::string extra;
      if (!std::isnan(mfu))
        absl::StrAppendFormat(&extra, ", \"mfu\": %.6f", mfu);
      if (!std::isnan(validLoss))
        extra += evaluationFields("valid", validLoss);
      if (!std::isnan(testLoss))
        extra += evaluationFields("test", testLoss);
      if (!std::isfinite(norm))
        extra += ", \"skipped\": true";
      if (absl::Status st = metrics->Write(absl::StrFormat(
          "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %s, "
          "\"tokens\": %d, \"step_time_s\": %.6f, \"tokens_per_s\": %.3f, "
          "\"predicted_mem_bytes\": %d, \"peak_mem_bytes\": %d, "
          "\"loss_scale\": %.9g%s}\n",
          s, lossValue, rate,
          std::isfinite(norm) ? absl::StrFormat("%.9g", norm) : "null",
          globalBatch * seq, stepTime, tokensPerS, int64_t(memory[0]),
          int64_t(memory[1]), lossScale, extra));
          !st.ok() || !(st = metrics->Flush()).ok())
        return absl::Status(st.code(),
                            absl::StrCat("--metrics-out: ", st.message()));
    }
    if (TensorBoardWriter *tb = run.tensorboard.get()) {
      std::vector<std::pair<std::string, double>> scalars = {
          {"train/loss", lossValue},
          {"train/learning_rate", rate},
          {"train/grad_norm", norm},
          {"train/loss_scale", lossScale},
          {"train/tokens_per_s", tokensPerS},
          {"train/step_time_s", stepTime},
          {"memory/predicted_bytes", memory[0]},
          {"memory/touched_bytes", memory[1]}};
      if (!std::isnan(mfu))
        scalars.push_back({"train/mfu", mfu});
      if (!std::isnan(validLoss)) {
        scalars.push_back({"validation/loss", validLoss});
        scalars.push_back({"validation/perplexity", std::exp(validLoss)});
      }
      if (!std::isnan(testLoss)) {
        scalars.push_back({"test/loss", testLoss});
        scalars.push_back({"test/perplexity", std::exp(testLoss)});
      }
      if (absl::Status st = tb->AddScalars(s, scalars);
          !st.ok() || !(st = tb->Flush()).ok())
        return absl::Status(st.code(),
                            absl::StrCat("--tensorboard-dir: ", st.message()));
    }
    const bool saved = !options.save.empty() &&
                       ((options.saveEvery > 0 && s % options.saveEvery == 0) ||
                        s == steps);
    if (saved)
      if (absl::Status st = save(s); !st.ok())
        return st;
    if (lastStep)
      break;
    // Stopping early: a signal (on any rank), the time limit or the
    // interval. The ranks agree on it, so that all stop after this step.
    double stop[2] = {double(PendingStopSignal()),
                      options.exitDurationMins > 0 &&
                              elapsed >= options.exitDurationMins * 60
                          ? 1.0
                          : 0.0};
    if (severalRanks) {
      std::string group = absl::StrJoin(allAxes, ",");
      if (absl::Status st = tracedCommunication(
              e.trace(), "ALL_REDUCE",
              "braid-run: whether any rank stops after this step",
              group.c_str(), [&] {
                return options.comm->AllReduce(allAxes, stop, 2, plan::F64,
                                               Reduction::kMax);
              });
          !st.ok())
        return st;
    }
    std::string why =
        stop[0] != 0 ? absl::StrCat(StopSignalName(int(stop[0])), " received")
        : stop[1] != 0
            ? absl::StrCat("--exit-duration-in-mins ", options.exitDurationMins,
                           " reached")
        : options.exitInterval > 0 && s % options.exitInterval == 0
            ? absl::StrCat("--exit-interval ", options.exitInterval)
            : "";
    if (why.empty())
      continue;
    run.stoppedAfter = s;
    run.stopReason = why;
    if (options.save.empty()) {
      if (options.log)
        *options.log << "stopped after step " << s << " (" << why
                     << "): nothing saved, the run has no --save" << std::endl;
      break;
    }
    if (!saved) {
      // Not over another run's checkpoint of this step (the save root was
      // checked only for the steps the run planned to save).
      for (const ckpt::ListedCheckpoint &c :
           ckpt::ListCheckpointLineages(options.save))
        if (c.step == s && c.lineage != run.lineage && !options.overwrite)
          return absl::FailedPreconditionError(absl::StrCat(
              "stopped after step ", s, " (", why, ") but ", options.save,
              " holds another run's checkpoint of step ", s,
              ", which this run does not replace without --overwrite: "
              "nothing saved"));
      if (absl::Status st = save(s); !st.ok())
        return st;
    }
    // Flushed at once: a launcher that was told to end the job (mpirun,
    // srun) may kill the ranks soon after they save.
    if (options.log)
      *options.log << "stopped after step " << s << " (" << why
                   << "): the checkpoint of step " << s << " is in "
                   << options.save << "; resume with --load " << options.save
                   << std::endl;
    break;
  }
  return absl::OkStatus();
}

} // namespace braid::exec::trainer
