//===- TrainerInternal.h - The parts of Train() -----------------*- C++ -*-===//
//
// Train() (Trainer.h) in its phases, each in a file of its own, and the
// state they share (TrainingRun):
//
//   SetUpRun           TrainerSetup.cpp   the options checked, the trace and
//                                         profile files opened, the watchdog,
//                                         the backend
//   InitialiseWeights  TrainerInit.cpp    --load, --init-from (a Braid or
//                                         Hugging Face checkpoint) or the
//                                         seeded scheme; the master weights
//   PrepareSteps       TrainerSetup.cpp   the data (PrepareData,
//                                         TrainerData.cpp), the save root, the
//                                         learning-rate schedule, the loop's
//                                         buffers, the metrics and TensorBoard
//                                         files, the trace
//   RunSteps           TrainerLoop.cpp    the steps, their lines and
//                                         checkpoints, the evaluations
//                                         (TrainerEval.cpp), stopping early
//   FinishRun          TrainerReport.cpp  the trace, the parameters
//                                         (--save-params) and the reports
//
// Train calls them in this order; each reads what the ones before it set.
// The step functions (RunStep, RunPipelineStep) are in TrainerStep.cpp,
// the flags in TrainerFlags.cpp, the parameters' ZeRO-3 homes in
// TrainerParameters.cpp. Only the trainer's files include this header.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_TRAINERINTERNAL_H
#define BRAID_RUNTIME_EXEC_TRAINERINTERNAL_H

#include "runtime/common/JsonString.h"
#include "runtime/common/OutputFile.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/data/BlendedSamples.h"
#include "runtime/data/GptSamples.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/exec/Checkpointing.h"
#include "runtime/exec/TensorBoard.h"
#include "runtime/exec/Trace.h"
#include "runtime/exec/Trainer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace braid::exec::trainer {

/// The buffers the step loop writes and reads (-1: the rank has none).
/// The data buffers a call reads: ids, -1 for those it does not.
struct FeedInputs {
  int tokens = -1, targets = -1, positions = -1;
  bool any() const { return tokens >= 0 || targets >= 0 || positions >= 0; }
};

struct LoopBuffers {
  int tokens = -1, targets = -1, lr = -1, step = -1, gradNorm = -1;
  /// Packed documents: each token's position in its conversation.
  int positions = -1;
  /// The inputs of the step's (or, with a pipeline, the stage's first
  /// chunk's) calls.
  FeedInputs inputs() const { return {tokens, targets, positions}; }
};

/// One call of Train: its inputs, and what each phase sets for the later
/// ones. The members are in the order the phases set them, so that they are
/// destroyed in the reverse one (the backend before the trace it records
/// into, the samples before their dataset).
struct TrainingRun {
  TrainingRun(const plan::Plan &plan, const TrainerOptions &options)
      : plan(plan), options(options), t(plan.training()) {}

  const plan::Plan &plan;
  const TrainerOptions &options;
  const plan::Training &t;

  // SetUpRun.
  int64_t steps = 0;            ///< options.steps, or the plan's
  uint64_t seed = 0;            ///< options.seed, the plan's, or the resumed
  std::string dataPath;         ///< options.dataPrefix, or the plan's
  bool pipelined = false;       ///< whether the plan has pipeline stages
  bool writer = true;           ///< rank 0 (or no communicator)
  common::OutputStream traceFile; ///< rank 0's, with --trace
  std::unique_ptr<Trace> trace; ///< every rank's, with --trace
  common::OutputStream profileFile; ///< rank 0's, with --profile-out
  /// The watchdog's deadline before the first step ends and in saves.
  double slowTimeout = 0;
  std::unique_ptr<Backend> backend;
  /// The rank's pipeline stage (0 without one): it holds, initialises and
  /// loads only that stage's buffers.
  int64_t stage = 0;

  // InitialiseWeights.
  RunState resumed;            ///< the run --load resumes (step 0 without)
  bool fromCheckpoint = false; ///< whether a Braid checkpoint was loaded

  // PrepareSteps.
  int64_t batch = 0, seq = 0, micros = 1;
  /// Instruction data (--is-instruction-dataset, or the plan's
  /// data_instruction): a conversation per sample, the loss over its mask.
  bool instruction = false;
  /// Packed conversations (the plan's data_packed): samples of the
  /// kPacked layout, their positions fed to the "positions" input.
  bool packed = false;
  DataShare share;
  int64_t globalBatch = 0; ///< samples per step, over every dp rank
  int64_t firstStep = 1;
  std::string order; ///< the data order: shuffled or sequential
  std::string lineage;
  std::unique_ptr<ckpt::RootLock> saveLock;
  /// The datasets (one, or a blend's), each where it stays: the samples
  /// point into them.
  std::vector<std::unique_ptr<data::IndexedDataset>> datasets;
  /// The training split's samples, and the validation and test splits'
  /// (when the run evaluates and the split has documents).
  std::optional<data::BlendedSamples> samples, validSamples, testSamples;
  /// Validation every evalInterval steps (0: never), over evalIters global
  /// batches.
  int64_t evalInterval = 0, evalIters = 0;
  /// The global batches of the test split evaluated at the end: evalIters,
  /// or fewer when the split holds fewer.
  int64_t testIters = 0;
  /// rank 0's, with --tensorboard-dir.
  std::unique_ptr<TensorBoardWriter> tensorboard;
  std::optional<cpu::LrSchedule> schedule;
  LoopBuffers buffers;
  std::unique_ptr<common::OutputFile> metrics;

  // RunSteps: the step times, as measured; the step after which the run
  // stopped early (a signal, --exit-duration-in-mins, --exit-interval: 0
  // when it did not) and why.
  std::vector<double> stepTimes;
  int64_t stoppedAfter = 0;
  std::string stopReason;
};

absl::Status SetUpRun(TrainingRun &run);
/// The data of PrepareSteps (TrainerData.cpp): the datasets (data_path or
/// data_blend), checked against the model's vocabulary, split (data_split)
/// into the training samples and, when the run evaluates, the validation
/// and test samples.
absl::Status PrepareData(TrainingRun &run);
absl::Status InitialiseWeights(TrainingRun &run);
absl::Status PrepareSteps(TrainingRun &run);
/// Appends each step's record to `records` when given.
absl::Status RunSteps(TrainingRun &run, std::vector<StepRecord> *records);
absl::Status FinishRun(TrainingRun &run);

// Evaluation (TrainerEval.cpp).

/// Writes the micro-batch of samples first, first + 1, ... of `samples`
/// (micro_batch_size of them) into copy `slot` of the buffers `to` names
/// (tokens, targets, packed documents' positions). Instruction data's targets are kIgnoredTarget
/// where the loss mask is 0.
absl::Status FeedSamples(TrainingRun &run, const data::BlendedSamples &samples,
                         uint64_t first, int64_t slot, const FeedInputs &to);
/// The target a token whose loss does not count gets: the ignore_index of
/// the cross-entropy braidc emits (model.cross_entropy's default).
constexpr int32_t kIgnoredTarget = -100;
/// The targets that count (the loss mask's 1s at tokens 1 .. seq_length of
/// each sample) in each of `microBatches` consecutive micro-batches of
/// micro_batch_size samples from sample `first`.
absl::StatusOr<std::vector<int64_t>>
CountTargets(const TrainingRun &run, const data::BlendedSamples &samples,
             uint64_t first, int64_t microBatches);
/// Instruction data's per-token loss (Megatron's convention): the share of
/// each of this rank's micro-batches in the loss of `globalBatches` global
/// batches from sample `first`, n_m / N, where n_m counts the micro-batch's
/// targets and N those of all the global batches (every dp rank's). Their
/// mean losses weighted so sum to the mean over every counted token, the
/// same in every layout. In the order global batch, then micro-batch; all 0
/// when no target counts.
absl::StatusOr<std::vector<double>>
TokenLossWeights(const TrainingRun &run, const data::BlendedSamples &samples,
                 uint64_t first, int64_t globalBatches);
/// Whether the plan has plan-eval's forward-only functions (every stage's).
bool HasEvalFunctions(const plan::Plan &plan);
/// The mean loss over the first `iters` global batches of `samples`, run by
/// the forward-only functions after step `step`, the same on every rank.
absl::StatusOr<double> Evaluate(TrainingRun &run,
                                const data::BlendedSamples &samples,
                                int64_t iters, int64_t step);

/// ZeRO's parameters that the plan gathers in the next step's first
/// micro-batch (gather_params) are whole on every rank only after it: runs
/// it, when the plan has one.
absl::Status GatherParams(TrainingRun &run);

// Buffers (TrainerStep.cpp).

/// The buffer named `name`; an error naming it when the plan has none.
absl::StatusOr<int> need(const Backend &e, const char *name);
/// The buffer named `name` of pipeline stage `stage`.
absl::StatusOr<int> needInStage(const Backend &e, const char *name,
                                int64_t stage);
/// Per model chunk of pipeline stage `stage` (`program`): the data inputs
/// its calls (and evaluation's copies of them) read, which its forward
/// feeds. Each chunk has slots of its own (Stage.chunk_slots), so only the
/// chunk whose calls read a buffer writes it; another chunk's slot k is not
/// its. With model chunks, each chunk has packed documents' positions of
/// its own ("positions", "positions.chunk1", ...). With one chunk, every
/// forward feeds the stage's inputs.
std::vector<FeedInputs> feedingChunks(const Backend &e,
                                      const plan::Stage &program,
                                      int64_t stage);
/// Writes `values` into every copy of buffer `id` (one, or one per slot).
absl::Status writeEveryCopy(Backend &e, int id,
                            absl::Span<const double> values);

// The mesh and the parameters' homes (TrainerParameters.cpp).

/// The index of mesh axis `axis`, or -1.
int axisIndex(const plan::Mesh &mesh, absl::string_view axis);
/// This rank's coordinate along mesh axis `axis` (0 without it, or without
/// other ranks).
int64_t coordinateAlong(const Backend &e, absl::string_view axis);
/// Writes parameter buffer `id` (its values on this rank), into its ZeRO-3
/// block when it has one.
absl::Status writeParameter(Backend &e, int id,
                            const std::vector<double> &values);
/// Reads parameter buffer `id` (its values on this rank), from every
/// data-parallel rank's ZeRO-3 block when it has one (a collective over dp:
/// every rank reads the same parameters in the same order).
absl::StatusOr<std::vector<double>> readParameter(const Backend &e, int id);
/// Writes every parameter of the plan, whole and as float32, to a
/// safetensors file. Every rank must call it: the slices of split parameters
/// are gathered onto every rank of their stage; with pipeline stages, the
/// first rank of each later stage (its other coordinates 0) sends its whole
/// parameters to rank 0 along "pp", in the plan's order of buffers, which
/// every rank knows. Rank 0 writes. A name that several buffers hold (a
/// weight tied across stages) is written once, from the first of them.
absl::Status saveParameters(const Backend &e, const std::string &path);

/// The trainer's own communication, `name` (ALL_REDUCE, WAIT_SENDS): runs
/// `op` and, with a trace, records it with `why` as its provenance.
template <typename Op>
absl::Status tracedCommunication(Trace *trace, const char *name,
                                 const char *why, const char *group,
                                 const Op &op) {
  if (!trace)
    return op();
  Trace::Clock::time_point begin = Trace::Now();
  absl::Status s = op();
  std::string args = absl::StrCat("\"provenance\": ", common::JsonString(why));
  if (*group)
    absl::StrAppend(&args, ", \"group\": ", common::JsonString(group));
  trace->Add(name, TracePhase::kCommunication, TraceThread::kCommunication,
             begin, Trace::Now(), std::move(args));
  return s;
}

} // namespace braid::exec::trainer

#endif // BRAID_RUNTIME_EXEC_TRAINERINTERNAL_H
