//===- TrainerSetup.cpp - A run made ready to train -----------------------===//
//
// SetUpRun (the options checked, the output files opened, the watchdog and
// the backend) and PrepareSteps (the data, the save root, the learning-rate
// schedule, the loop's buffers, the metrics file and the trace), the phases
// of Train before and after its initial weights (TrainerInternal.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TrainerInternal.h"

#include "runtime/exec/Preemption.h"

#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>

namespace braid::exec::trainer {

absl::Status SetUpRun(TrainingRun &run) {
  const plan::Plan &plan = run.plan;
  const TrainerOptions &options = run.options;
  const plan::Training &t = run.t;
  if (options.device != "cpu" && !options.backend)
    return absl::UnimplementedError(absl::StrCat(
        "no backend for --device ", options.device,
        " was given to the trainer (runtime/exec/Devices.h makes one)"));
  // The CPU executor refuses what it cannot run before the data is opened.
  if (!options.backend)
    if (absl::Status s = Executor::CheckRunsOnCpu(plan); !s.ok())
      return s;
  if (plan.has_generation())
    return absl::InvalidArgumentError(
        "the plan is an inference plan (braidc --mode generate): braid "
        "generate runs it; braid-run trains");
  run.steps = options.steps.value_or(t.steps());
  run.seed = options.seed.value_or(t.seed());
  run.dataPath = options.dataPrefix.empty() ? t.data_path()
                                            : options.dataPrefix;
  const int64_t steps = run.steps;
  const bool evaluates =
      options.evalInterval.value_or(t.eval_interval()) > 0;
  if (steps < 0 || (steps == 0 && options.save.empty() &&
                    options.saveParams.empty() && !evaluates))
    return absl::InvalidArgumentError(absl::StrCat(
        "steps = ", steps,
        " must be >= 1 (0 only to convert or evaluate: with --save, "
        "--save-params or --eval-interval)"));
  if ((options.saveEvery > 0 || options.keepLast > 0) && options.save.empty())
    return absl::InvalidArgumentError(
        "--save-every and --keep-last need --save DIR");
  // Both only for a LoRA run (frozen parameters): its checkpoints hold
  // the adapters, --init-from the base they adapt.
  bool frozen = false;
  for (const plan::Buffer &b : run.plan.buffers())
    frozen = frozen || (b.role() == plan::PARAMETER && b.frozen());
  if (!options.loraLoad.empty() && !t.has_lora())
    return absl::InvalidArgumentError(absl::StrCat(
        "--lora-load ", options.loraLoad,
        ": the plan has no LoRA adapters to load them into (its job has no "
        "lora section)"));
  if (!options.loraLoad.empty() && !options.load.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--lora-load ", options.loraLoad, " starts a run from adapters and "
        "--load ", options.load, " resumes one (with its own): give one of "
        "them"));
  if (!options.load.empty() && !options.initFrom.empty() && !frozen)
    return absl::InvalidArgumentError(absl::StrCat(
        "--load ", options.load, " resumes a run and --init-from ",
        options.initFrom, " starts one: give one of them (both only for a "
        "LoRA run: its base model and its adapters)"));
  if (!options.allowModelChange.empty() && options.load.empty() &&
      options.initFrom.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--allow-model-change ",
        absl::StrJoin(options.allowModelChange, ","),
        " applies to the checkpoint of --load or --init-from, and neither is "
        "given"));
  if (run.dataPath.empty() && t.data_blend_size() == 0 && steps > 0)
    return absl::InvalidArgumentError(
        "no data: give --data PREFIX (a .bin/.idx pair) or data.path in the job");
  // SIGTERM and SIGINT stop the run after the current step, with a
  // checkpoint (Preemption.h).
  if (absl::Status s = InstallStopHandlers(); !s.ok())
    return s;
  if (options.threads > 0)
    cpu::setNumThreads(int(std::min<int64_t>(options.threads, kMaxThreads)));
  if (plan::WorldSize(plan) > 1 && !options.comm)
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan is for ", plan::WorldSize(plan),
        " ranks: start it with mpirun -np ", plan::WorldSize(plan),
        " braid-run ... (braid train does)"));
  run.pipelined = plan.pipeline().stages_size() > 0;
  if (!run.pipelined && plan::AxisSize(plan.mesh(), "pp") > 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "the mesh has an axis 'pp' of ", plan::AxisSize(plan.mesh(), "pp"),
        " ranks but the plan has no pipeline stages for them"));
  // The trace file, opened now by rank 0 (which writes every rank's
  // events), so that one it cannot write fails the run before it trains.
  run.writer = !options.comm || options.comm->Rank() == 0;
  // Both are put in place when the run ends well (common::OutputStream): a
  // failed run leaves an old file as it was.
  if (!options.trace.empty()) {
    if (run.writer)
      if (absl::Status s = run.traceFile.Open(options.trace); !s.ok())
        return absl::Status(s.code(),
                            absl::StrCat("--trace: ", s.message()));
    run.trace = std::make_unique<Trace>();
  }
  // Likewise the profile, which rank 0 writes for every rank.
  if (!options.profileOut.empty() && run.writer)
    if (absl::Status s = run.profileFile.Open(options.profileOut); !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("--profile-out: ", s.message()));
  // The watchdog (Communicator::SetTimeout): each wait for other ranks has
  // --collective-timeout, 3 x that before the first step ends (start-up, a
  // checkpoint's load, the first step, which touches the arena's pages) and
  // in each checkpoint save.
  run.slowTimeout = 3 * options.collectiveTimeout;
  if (options.comm) {
    options.comm->SetTimeout(run.slowTimeout);
    options.comm->SetWaitContext(0, "start-up, before the first step");
  }
  absl::StatusOr<std::unique_ptr<Backend>> created =
      options.backend ? options.backend(plan, options.comm)
                      : absl::StatusOr<std::unique_ptr<Backend>>(
                            Executor::Create(plan, options.comm));
  if (!created.ok())
    return created.status();
  run.backend = std::move(*created);
  run.stage = StageOf(*run.backend);
  // What the backend chose at load (the CUDA executor: attention's kernels).
  if (options.log)
    for (const std::string &note : run.backend->KernelNotes())
      *options.log << "kernels: " << note << "\n";
  return absl::OkStatus();
}

absl::Status PrepareSteps(TrainingRun &run) {
  const plan::Plan &plan = run.plan;
  const TrainerOptions &options = run.options;
  const plan::Training &t = run.t;
  const int64_t steps = run.steps, stage = run.stage;
  const uint64_t seed = run.seed;
  const bool pipelined = run.pipelined;
  Backend &e = *run.backend;
  const RunState &resumed = run.resumed;
  int64_t &batch = run.batch, &seq = run.seq, &micros = run.micros;
  int64_t &globalBatch = run.globalBatch, &firstStep = run.firstStep;
  DataShare &share = run.share;
  std::string &order = run.order;
  // Data: the run continues the data order where the resumed run left it.
  batch = t.micro_batch_size();
  seq = t.seq_length();
  micros = std::max<int64_t>(t.micro_batches(), 1);
  share = DataShareOf(e);
  globalBatch = batch * micros * share.ranks;
  firstStep = resumed.step + 1;
  order = options.dataOrder.empty() ? t.data_order() : options.dataOrder;
  if (order.empty())
    order = "shuffled";
  if (order != "shuffled" && order != "sequential")
    return absl::InvalidArgumentError(absl::StrCat(
        "data order \"", order, "\" is not one of shuffled, sequential"));
  // The run's lineage: the resumed checkpoint's, or a new one. The save
  // root is readied now (created, locked, writable, room for a checkpoint,
  // no other run's checkpoints where this one saves), before any step.
  run.lineage = !options.load.empty() && !resumed.lineage.empty()
                    ? resumed.lineage
                    : ckpt::NewLineage();
  if (!options.save.empty()) {
    SaveIntent intent;
    intent.root = options.save;
    intent.lineage = run.lineage;
    intent.overwrite = options.overwrite;
    const int64_t saveEvery = options.saveEvery, lastStep = steps,
                  resumedStep = resumed.step;
    intent.savesStep = [=](int64_t s) {
      if (firstStep > lastStep) // nothing to train: the state loaded
        return s == resumedStep;
      return s >= firstStep && s <= lastStep &&
             ((saveEvery > 0 && s % saveEvery == 0) || s == lastStep);
    };
    absl::StatusOr<std::unique_ptr<ckpt::RootLock>> prepared =
        PrepareSaveRoot(e, intent, options.log);
    if (!prepared.ok())
      return prepared.status();
    run.saveLock = std::move(*prepared);
  }
  if (!options.load.empty() && !resumed.dataOrder.empty() &&
      resumed.dataOrder != order && options.log)
    *options.log << "note: the saving run read its data " << resumed.dataOrder
                 << " and this one reads it " << order << "\n";
  if (absl::Status s = PrepareData(run); !s.ok())
    return s;

  // The schedule.
  cpu::LrScheduleConfig lrConfig;
  lrConfig.lr = t.lr();
  lrConfig.minLr = t.min_lr();
  lrConfig.warmupSteps = t.warmup_steps();
  lrConfig.decaySteps = std::max<int64_t>(steps, 1); // (0 steps: nothing to train)
  absl::StatusOr<cpu::LrDecayStyle> style =
      cpu::parseLrDecayStyle(t.lr_decay().empty() ? "constant" : t.lr_decay());
  if (!style.ok())
    return style.status();
  lrConfig.style = *style;
  // The schedule decays over the run's steps: a warmup longer than the run
  // would never reach the peak (cpu::LrSchedule refuses it in its own
  // terms; say it in the run's).
  if (*style != cpu::LrDecayStyle::kConstant && steps > 0 &&
      firstStep <= steps && lrConfig.warmupSteps > steps)
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan warms the learning rate up over ", lrConfig.warmupSteps,
        " steps (train.warmup_steps) and then decays it (", t.lr_decay(),
        ") until the run's last step, but the run has only ", steps,
        " steps: give --steps ", lrConfig.warmupSteps,
        " or more, or compile with fewer warmup steps"));
  absl::StatusOr<cpu::LrSchedule> schedule = cpu::LrSchedule::create(lrConfig);
  if (!schedule.ok())
    return schedule.status();
  run.schedule.emplace(std::move(*schedule));

  // The buffers the loop writes and reads: the plan's, or with a pipeline
  // the stage's (tokens and targets where the stage has them).
  LoopBuffers &buffers = run.buffers;
  {
    auto find = [&](const char *name, bool required) -> absl::StatusOr<int> {
      if (!pipelined)
        return need(e, name);
      if (!required)
        return e.FindBuffer(name, stage);
      return needInStage(e, name, stage);
    };
    for (auto [id, name, required] :
         {std::tuple<int *, const char *, bool>{&buffers.tokens, "tokens",
                                                false},
          {&buffers.targets, "targets", false},
          {&buffers.lr, "lr", true},
          {&buffers.step, "step", true},
          {&buffers.gradNorm, "grad_norm", true}}) {
      absl::StatusOr<int> found = find(name, required);
      if (!found.ok())
        return found.status();
      *id = *found;
    }
  }
  // A packed plan's positions: on every stage that has layers.
  buffers.positions = pipelined ? e.FindBuffer("positions", stage)
                                : e.FindBuffer("positions");
  if (t.data_packed() && !pipelined && buffers.positions < 0)
    return absl::InvalidArgumentError(
        "the plan packs conversations (data.pack) but has no \"positions\" "
        "input: compile it again");

  // The metrics, one JSON line a step, written in place and flushed after
  // each line (tools follow the file as it grows); a failed write (a full
  // disk) ends the run with an error naming the file.
  if (!options.metricsOut.empty()) {
    common::OutputFile::Options inPlace;
    inPlace.inPlace = true;
    absl::StatusOr<std::unique_ptr<common::OutputFile>> opened =
        common::OutputFile::Open(options.metricsOut, inPlace);
    if (!opened.ok())
      return absl::Status(opened.status().code(),
                          absl::StrCat("--metrics-out: ",
                                       opened.status().message()));
    run.metrics = std::move(*opened);
  }
  // The parameters are written after the last step: a path that cannot be
  // written fails the run before the first.
  if (!options.saveParams.empty() && run.writer)
    if (absl::Status s = common::CheckWritable(options.saveParams); !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("--save-params: ", s.message()));
  // TensorBoard's events, by rank 0; a resumed run marks where it restarts,
  // so that TensorBoard drops what an earlier file holds from there on.
  if (!options.tensorboardDir.empty() && run.writer) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> opened =
        TensorBoardWriter::Open(options.tensorboardDir);
    if (!opened.ok())
      return absl::Status(opened.status().code(),
                          absl::StrCat("--tensorboard-dir: ",
                                       opened.status().message()));
    run.tensorboard = std::move(*opened);
    if (absl::Status s = run.tensorboard->AddSessionStart(run.firstStep);
        !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("--tensorboard-dir: ", s.message()));
  }
  if (options.profile || !options.profileOut.empty())
    e.EnableProfile();
  if (Trace *trace = run.trace.get()) {
    if (absl::Status s = e.SetTrace(trace); !s.ok())
      return s;
    // A barrier: every rank's clock starts when the last one gets here, so
    // that the ranks' timelines line up (to the all-reduce's latency).
    if (options.comm && plan::WorldSize(plan) > 1) {
      std::vector<std::string> axes(plan.mesh().axes().begin(),
                                    plan.mesh().axes().end());
      double one = 1;
      if (absl::Status s = options.comm->AllReduce(axes, &one, 1, plan::F64);
          !s.ok())
        return s;
    }
    trace->Start();
  }
  return absl::OkStatus();
}

} // namespace braid::exec::trainer
