//===- Checkpointing.h - Saving and loading a run's state -------*- C++ -*-===//
//
// What a run saves (runtime/ckpt/Checkpoint.h has the directory format):
// every parameter and its two AdamW moments, as each rank holds them, plus
// the step, the samples consumed, the seed and the schedule. Nothing else
// carries over between steps: gradients are zeroed at each step's start,
// dropout masks and the data order are functions of (seed, step, sample).
//
// Where a rank holds a parameter's values and moments follows from the plan
// alone (Holdings): in the parameter's own buffers; or with ZeRO in the
// rank's block of a flat bucket, which covers part of some parameters. So
// every rank knows what every other rank saves, and rank 0 writes the
// manifest without being told. Data that several ranks hold alike (over dp
// without ZeRO, over tp for parameters tp does not split) is written once,
// each of those ranks writing an equal part of it.
//
// Loading reads, for each element a rank holds in the loading plan, its
// global index, and that index from whichever piece holds it: a checkpoint
// loads into any layout of the same model (resharding), each rank reading
// only what it needs.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_CHECKPOINTING_H
#define BRAID_RUNTIME_EXEC_CHECKPOINTING_H

#include "runtime/ckpt/Checkpoint.h"
#include "runtime/exec/Backend.h"
#include "runtime/exec/LossScaler.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace braid::exec {

/// One state ("param", "exp_avg", "exp_avg_sq") of one parameter, as a rank
/// holds it: elements [begin, end) of the rank's slice of the parameter
/// (buffer `param`: its shard says which slice) are at element
/// `bufferOffset` of buffer `buffer` onwards.
struct Holding {
  std::string name;
  std::string state;
  int param = -1;
  int buffer = -1;
  int64_t bufferOffset = 0;
  int64_t begin = 0, end = 0;
  /// Split over dp (ZeRO): the other dp ranks hold other elements.
  bool partitioned = false;
};

/// What the rank at mesh coordinates `coords` holds of every parameter of
/// its pipeline stage, in a deterministic order. InvalidArgument for a plan
/// whose update it cannot follow (an ADAMW on buffers it does not know).
absl::StatusOr<std::vector<Holding>>
Holdings(const plan::Plan &plan, const std::vector<int64_t> &coords);

/// The run's position, saved with its parameters.
struct RunState {
  int64_t step = 0;             ///< optimizer steps done
  int64_t consumedSamples = 0;  ///< samples of the data order used
  int64_t plannedSteps = 0;     ///< the run's steps (lr schedule)
  int64_t globalBatch = 0;
  uint64_t seed = 0;
  std::string dataOrder;
  /// fp16's loss scaler after `step` (absent without loss scaling).
  std::optional<LossScaler::State> lossScaler;
  /// The run lineage (ckpt::Manifest's lineage): kept from the checkpoint a
  /// run resumes, new (ckpt::NewLineage) for a run from initial weights.
  std::string lineage;
  /// The plan's parameters the checkpoint did not hold and the load left as
  /// they were (LoRA adapters with ModelCheck::adaptersMayBeAbsent, frozen
  /// ones with frozenMayBeAbsent): the caller sets them.
  std::vector<std::string> absentParameters;
};

struct SaveReport {
  std::string dir;         ///< the checkpoint written
  int64_t bytes = 0;       ///< over all ranks' files
  double seconds = 0;      ///< from the first rank's start to the commit
};

/// What a run will save into its checkpoint root (--save).
struct SaveIntent {
  std::string root;
  std::string lineage;            ///< RunState::lineage of the run
  /// Whether the run saves a checkpoint of step `s`.
  std::function<bool(int64_t)> savesStep;
  bool overwrite = false;         ///< --overwrite
};

/// Readies `intent.root` before the run's first step, so that a root that
/// cannot take the run's checkpoints fails it before any compute is spent:
/// rank 0 creates the root, takes its lock (ckpt::RootLock, held by the
/// returned object for the run; the other ranks get null), checks that it
/// can write there and that the file system has room for one checkpoint of
/// the plan (every rank's pieces: parameters and AdamW moments in F32), and
/// that no checkpoint of another lineage sits at a step the run will save
/// (refused naming the steps unless intent.overwrite). Every rank calls it
/// and returns the same status. `log`, when given, hears of checkpoints of
/// the run's own lineage that its saves will replace.
absl::StatusOr<std::unique_ptr<ckpt::RootLock>>
PrepareSaveRoot(Backend &e, const SaveIntent &intent, std::ostream *log);

/// The bytes of one checkpoint of the plan: the pieces every rank writes.
absl::StatusOr<int64_t> CheckpointBytes(const plan::Plan &plan);

/// Writes a checkpoint of the run at `state` under `root` (Checkpoint.h's
/// protocol); every rank of the job calls it. `keepLast` > 0 removes the
/// older checkpoints of the run's lineage but that many
/// (ckpt::PruneCheckpoints). Every rank returns the same status.
absl::StatusOr<SaveReport> SaveCheckpoint(Backend &e, const std::string &root,
                                          const RunState &state,
                                          int64_t keepLast);

/// How a load checks the checkpoint's model against the plan's.
struct ModelCheck {
  /// Model fields allowed to differ (--allow-model-change).
  std::set<std::string> allowModelChange;
  /// Where the notes (accepted differences) and warnings (a model that
  /// cannot be compared) go; none when null.
  std::ostream *log = nullptr;
  /// Whether the plan's LoRA adapters (IsLoraAdapter) may be absent from
  /// the checkpoint, as from the base model a LoRA run starts from.
  bool adaptersMayBeAbsent = false;
  /// Whether the plan's frozen parameters (Buffer.frozen) may be absent, as
  /// from a LoRA run's checkpoint, which holds the adapters alone.
  bool frozenMayBeAbsent = false;
};

/// Loads the checkpoint `dir` names (a checkpoint, or a root whose `latest`
/// names one) into the plan's parameters, and with `optimizer` their AdamW
/// moments; returns the saved run state. The checkpoint must hold this
/// model: first the model its manifest records and the plan's
/// (Training.model_spec) are compared field by field
/// (ckpt::CheckCheckpointModel: heads, kv heads, RoPE theta, norm eps, ...,
/// refused naming each field with both values unless `check.allowModelChange`
/// names it and the change is meaningful; a manifest or plan that does not
/// record its model is compared by its tensors only, with a warning), then
/// the parameters: the same names and global shapes (else InvalidArgument
/// naming the differences). Notes and warnings go to `check.log` when
/// given. Every rank calls it.
absl::StatusOr<RunState> LoadCheckpoint(Backend &e, const std::string &dir,
                                        bool optimizer,
                                        const ModelCheck &check = {});

/// Whether `dir` is a Braid checkpoint or root (rather than, say, a Hugging
/// Face directory).
bool IsBraidCheckpoint(const std::string &dir);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_CHECKPOINTING_H
