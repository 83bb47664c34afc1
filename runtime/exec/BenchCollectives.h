//===- BenchCollectives.h - Times the collectives of a mesh axis -*- C++ -*-===//
//
// `braid-run PLAN --bench-collectives FILE.json`: the times of ALL_REDUCE,
// ALL_GATHER and REDUCE_SCATTER of F32 tensors from 4 KB to 16 MB over one
// mesh axis of the plan ("dp"), for `braid calibrate` to fit the link's
// bandwidth and latency to (the cost model's ring α-β, compiler/CostModel.h).
//
// Each size is timed in batches: warm-up calls, then three batches that
// fill about `secondsPerSize` together, each after a barrier (an all-reduce
// of one double) so that every rank starts it together. A batch's time is
// the slowest rank's (a collective ends for the group when its last rank is
// done); the size's time per call is the fastest batch's, since other work
// on the machine can only slow a batch down.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_BENCHCOLLECTIVES_H
#define BRAID_RUNTIME_EXEC_BENCHCOLLECTIVES_H

#include "runtime/exec/Communicator.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace braid::exec {

struct CollectiveBenchOptions {
  /// The mesh axis whose groups are timed.
  std::string axis = "dp";
  /// Tensor sizes in bytes: `smallest`, x 4, ... up to `largest`.
  int64_t smallestBytes = 4 << 10;
  int64_t largestBytes = 16 << 20;
  /// The time to spend on each size's timed batches (after the warm-up).
  double secondsPerSize = 0.2;
  int64_t warmupCalls = 3;
};

/// Seconds per call by tensor size. The bytes are the whole tensor's: an
/// all-reduce's buffer, an all-gather's output (each rank contributes
/// bytes / ranks), a reduce-scatter's input (each rank keeps bytes / ranks).
struct CollectiveBench {
  int64_t ranks = 0;
  std::vector<std::pair<int64_t, double>> allReduce, allGather, reduceScatter;
};

/// Times the collectives over `options.axis`, of `ranks` ranks, on every
/// rank of the job (each must call it, with the same options). Errors: an
/// axis of fewer than 2 ranks, sizes that are not positive and increasing,
/// a collective that fails.
absl::StatusOr<CollectiveBench>
BenchCollectives(Communicator &comm, int64_t ranks,
                 const CollectiveBenchOptions &options = {});

/// Writes `bench` as one JSON object:
///   {"ranks": n, "dtype": "F32", "all_reduce": [[bytes, seconds], ...],
///    "all_gather": [...], "reduce_scatter": [...]}
void WriteCollectiveBench(const CollectiveBench &bench, std::ostream &out);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_BENCHCOLLECTIVES_H
