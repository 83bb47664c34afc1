//===- Trainer.h - The step loop of braid-run -------------------*- C++ -*-===//
//
// Runs a plan's training: initial weights (seeded, per family), then for
// each step the micro-batch of GPT samples, the learning rate of the
// schedule and one call of the plan's step function; one line per logged
// step for people and one JSON object per step for tools.
//
// With pipeline parallelism (Plan.pipeline), each rank runs the program of
// its stage (its coordinate along the mesh axis "pp"): zero_grads, the
// stage's schedule of FORWARD and BACKWARD calls on the micro-batches'
// slots, then update; it initialises, loads and holds only its stage's
// parameters.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_TRAINER_H
#define BRAID_RUNTIME_EXEC_TRAINER_H

#include "runtime/exec/Backend.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/status.h"
#include "absl/types/span.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace braid::exec {

/// Makes the backend that runs a plan's rank (Backend.h), given the job's
/// communicator (null for one rank).
using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Backend>>(
    const plan::Plan &, Communicator *)>;

/// The most CPU threads a rank runs (--threads).
inline constexpr int64_t kMaxThreads = 4096;

struct TrainerOptions {
  /// The device the kernels run on (--device): "cpu" or "cuda".
  std::string device = "cpu";
  /// On "cuda": whether the executor replays the plan's functions as
  /// captured CUDA graphs (--cuda-graphs on|off; cuda::Executor::SetGraphs).
  bool cudaGraphs = true;
  /// The backend that runs them: null for the CPU executor
  /// (Executor::Create); for another device, the factory BackendFor(device)
  /// gives (Devices.h).
  BackendFactory backend;
  std::string dataPrefix;             ///< overrides the plan's data_path
  std::optional<int64_t> steps;       ///< overrides the plan's steps
  std::optional<uint64_t> seed;       ///< overrides the plan's seed
  std::string dataOrder;              ///< overrides the plan's data_order
  /// The other ranks of the job, when the plan is for several; null for a
  /// plan of one rank.
  Communicator *comm = nullptr;
  /// The deadline of each wait for other ranks, in seconds
  /// (--collective-timeout; 0: none): a rank that waits longer in a
  /// collective or message ends the run with an error naming it and the
  /// ranks that had not arrived (Communicator::SetTimeout). Waits before the
  /// first step ends (start-up, loading, the first step) and in checkpoint
  /// saves get 3 x this.
  double collectiveTimeout = 300;
  /// A Hugging Face checkpoint directory (config.json + *.safetensors), or
  /// a Braid checkpoint of any layout (its parameters only), to start from
  /// instead of the seeded initialisation.
  std::string initFrom;
  /// A LoRA run's starting adapters (--lora-load): a PEFT adapter directory
  /// or a Braid LoRA checkpoint, instead of the seeded A and zero B.
  std::string loraLoad;
  /// A Braid checkpoint (or checkpoint root) to resume: parameters, AdamW
  /// moments, step, data position and seed (Checkpointing.h).
  std::string load;
  /// Model fields in which the checkpoint of --load or --init-from may
  /// differ from the plan's model (--allow-model-change FIELD[,FIELD],
  /// repeatable): only those ckpt::CheckAllowableModelChange accepts.
  std::set<std::string> allowModelChange;
  /// A checkpoint root to save to: after every `saveEvery` steps (0: only
  /// at the end) and at the end, keeping the newest `keepLast` (0: all).
  std::string save;
  int64_t saveEvery = 0;
  int64_t keepLast = 0;
  /// Replace checkpoints of another run lineage that the root holds at
  /// steps this run saves (--overwrite); without it such a run is refused
  /// before its first step (Checkpointing.h, PrepareSaveRoot).
  bool overwrite = false;
  /// Threads of the CPU kernels and GEMM; 0 keeps the default (every core,
  /// or OMP_NUM_THREADS).
  int64_t threads = 0;
  int64_t logEvery = 1;
  std::string metricsOut;             ///< JSON lines, one per step
  /// When set, the trained parameters are written here at the end, as a
  /// safetensors file of the parameters' names and shapes (by rank 0).
  std::string saveParams;
  std::ostream *log = nullptr;        ///< the human-readable lines
  /// Print, at the end, the share of step time per kernel (to `log`).
  bool profile = false;
  /// When set, every rank's kernel profile (per kernel kind: seconds,
  /// calls, FLOPs and bytes as runtime/plan/Work.h counts them) and the step
  /// times are gathered onto rank 0, which writes them here as one JSON
  /// object (`braid calibrate` reads it). Both leave out the first step when
  /// there are several: it touches the arena's pages for the first time.
  std::string profileOut;
  /// Override the plan's data split (data.split, "969,30,1"), validation
  /// interval and iterations (train.eval_interval, train.eval_iters).
  std::optional<std::string> split;
  /// Overrides the plan's data_instruction (--is-instruction-dataset):
  /// whether the data is instruction data, a conversation per sample and
  /// the loss over its loss mask.
  std::optional<bool> instruction;
  std::optional<int64_t> evalInterval, evalIters;
  /// When set, TensorBoard event files are written here (by rank 0): every
  /// step's scalars (TensorBoard.h).
  std::string tensorboardDir;
  /// Stop, with a checkpoint, once this many minutes have passed since the
  /// run began (checked after each step; 0: never), or after every step
  /// that is a multiple of exitInterval (0: never). SIGTERM and SIGINT stop
  /// the same way (Preemption.h).
  double exitDurationMins = 0;
  int64_t exitInterval = 0;
  /// When set, the measured timeline of the steps (every step, function
  /// call and kernel of every rank) is written here as a Chrome trace
  /// (Trace.h), by rank 0, which opens it before training.
  std::string trace;
};

struct StepRecord {
  int64_t step;
  double loss, lr, gradNorm, stepTimeS;
  /// The arena after the step, the largest over the job's ranks: the bytes
  /// the plan gives a rank (Backend::ArenaBytes) and the bytes the run has
  /// touched (Backend::TouchedArenaBytes: on the CPU, the operating
  /// system's count).
  int64_t predictedMemBytes = 0, peakMemBytes = 0;
  /// The validation loss evaluated after the step (NaN: none was).
  double validLoss = std::numeric_limits<double>::quiet_NaN();
};

/// The flags braid-run and braid train share: --data, --steps, --seed,
/// --data-order, --init-from, --load, --allow-model-change, --save,
/// --save-every, --keep-last,
/// --threads, --log-every, --metrics-out, --save-params, --trace,
/// --profile-out, --device, --collective-timeout, --split, --eval-interval,
/// --eval-iters, --tensorboard-dir, --exit-duration-in-mins, --exit-interval,
/// --is-instruction-dataset, --lora-load. Returns true when `flag`
/// (with its `value`) is one of them and sets it in `options`, false when it
/// is not one of them, and an
/// error naming the flag and value when the value is not allowed.
absl::StatusOr<bool> ParseTrainerFlag(const std::string &flag,
                                      const std::string &value,
                                      TrainerOptions *options);

/// The usage text of those flags.
extern const char kTrainerFlagsUsage[];

/// Whether `flag` is one of the trainer's flags (whatever its value).
bool IsTrainerFlag(const std::string &flag);
/// Whether `flag` is one of the trainer's flags that take no value
/// (--overwrite, --is-instruction-dataset): given alone it means "on"; ParseTrainerFlag takes it with
/// the value "" (or true/false after '=').
bool IsTrainerSwitch(const std::string &flag);

/// Writes the inputs (tokens, targets) of micro-batch `micro` (0-based) of
/// the current step into the executor's buffers.
using FeedMicroBatch = std::function<absl::Status(int64_t micro)>;

/// This rank's share of the global batch: the data-parallel ranks take
/// consecutive slices of it, rank `rank` of `ranks`.
struct DataShare {
  int64_t ranks = 1, rank = 0;
};

/// The share of the rank that runs `executor` (its coordinate along the
/// mesh axis "dp").
DataShare DataShareOf(const Backend &executor);

/// Runs one optimizer step of the plan the executor holds: zero_grads, then
/// for each of the plan's micro-batches `feed` and micro_step (the last one
/// runs last_micro_step instead when the plan has it), then update.
/// The loss gradient is 1 / (micro-batches x data-parallel ranks), so the
/// gradients, summed over micro-batches and ranks, are those of the global
/// batch's mean loss. Returns the step's loss: the mean over the global
/// batch's micro-batches (of every data-parallel rank).
/// With `lossWeights` (one per micro-batch of this rank), micro-batch m's
/// loss gradient is lossWeights[m] instead, and the step's loss the sum
/// over every rank of each micro-batch's loss times its weight: instruction
/// data's per-token loss (TrainerInternal.h's TokenLossWeights). A plan with pipeline
/// stages is refused (RunPipelineStep runs it). With a trace on the executor
/// (Backend::SetTrace), records each call ("zero_grads", "micro_step mb m",
/// "update"), each micro-batch's feed and the loss's all-reduce.
absl::StatusOr<double> RunStep(Backend &executor, uint64_t seed, int64_t step,
                               const FeedMicroBatch &feed,
                               absl::Span<const double> lossWeights = {});

/// The pipeline stage of the rank that runs `executor` (Backend::Stage): its
/// coordinate along the mesh axis "pp" (0 without a pipeline or without
/// other ranks).
int64_t StageOf(const Backend &executor);

/// Writes the inputs of micro-batch `micro` (0-based) of the current step
/// into copy `slot` of the stage's data inputs that model chunk `chunk`
/// (0 without chunks) reads: "tokens", "targets" and packed documents'
/// positions, those it has.
using FeedSlot =
    std::function<absl::Status(int64_t micro, int64_t slot, int64_t chunk)>;

/// Runs one optimizer step of a plan with pipeline stages, as the rank's
/// stage (StageOf): the stage's zero_grads; its schedule, where a FORWARD of
/// micro-batch m on slot k is `feed(m, k)` (with model chunks, only on the
/// chunk whose calls name "tokens" or "targets": each chunk has slots of its
/// own) then the forward function on slot k (on the last stage, then
/// reading the slot's "loss"), and a BACKWARD the
/// backward function on the slot, both with micro-batch m's StepContext as
/// RunStep gives it; then the wait for the stage's sends and its update. The
/// last stage's "loss_grad" (every copy) is 1 / (micro-batches x
/// data-parallel ranks), as in RunStep. Returns the step's loss, the same on
/// every rank: the last stage's sum of the micro-batches' losses, summed
/// over "pp" (the other stages add 0) and then over "dp", divided by
/// micro-batches x data-parallel ranks. With a trace on the executor, records
/// each call ("zero_grads", "forward mb m", "backward mb m", "update"), each
/// feed, the wait for the sends and the loss's all-reduces. `lossWeights`
/// as RunStep's: the last stage writes micro-batch m's loss gradient into
/// the slot of its forward, before the forward.
absl::StatusOr<double> RunPipelineStep(Backend &executor, uint64_t seed,
                                       int64_t step, const FeedSlot &feed,
                                       absl::Span<const double> lossWeights = {});

/// Trains; returns the per-step records through `records` when given. At the
/// end, rank 0 writes to `log` one line per rank of its arena: the bytes
/// predicted (allocated) and touched, e.g. "memory: rank 1 (pp 1, dp 0,
/// tp 0): predicted 1234567 B, touched 1234000 B (99.95 %)".
absl::Status Train(const plan::Plan &plan, const TrainerOptions &options,
                   std::vector<StepRecord> *records = nullptr);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_TRAINER_H
