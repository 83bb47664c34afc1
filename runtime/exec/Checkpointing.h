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

#include "runtime/exec/Backend.h"
#include "runtime/exec/LossScaler.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <optional>
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
};

struct SaveReport {
  std::string dir;         ///< the checkpoint written
  int64_t bytes = 0;       ///< over all ranks' files
  double seconds = 0;      ///< from the first rank's start to the commit
};

/// Writes a checkpoint of the run at `state` under `root` (Checkpoint.h's
/// protocol); every rank of the job calls it. `keepLast` > 0 removes the
/// older checkpoints but that many. Every rank returns the same status.
absl::StatusOr<SaveReport> SaveCheckpoint(Backend &e, const std::string &root,
                                          const RunState &state,
                                          int64_t keepLast);

/// Loads the checkpoint `dir` names (a checkpoint, or a root whose `latest`
/// names one) into the plan's parameters, and with `optimizer` their AdamW
/// moments; returns the saved run state. The checkpoint must hold this
/// model: the same parameter names and global shapes (else InvalidArgument
/// naming the differences). Every rank calls it.
absl::StatusOr<RunState> LoadCheckpoint(Backend &e, const std::string &dir,
                                        bool optimizer);

/// Whether `dir` is a Braid checkpoint or root (rather than, say, a Hugging
/// Face directory).
bool IsBraidCheckpoint(const std::string &dir);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_CHECKPOINTING_H
