//===- Shards.h - Where a shard's elements sit in the global tensor -*- C++ -*-===//
//
// A buffer with a `shard` holds one rank's slice of a global tensor
// (plan.proto): along the split dimension, the rank's part of every block.
// Seeded initialisation, checkpoint loading and gathering need, for each
// local element, its row-major index in the global tensor; they get it as
// contiguous runs.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_SHARDS_H
#define BRAID_RUNTIME_PLAN_SHARDS_H

#include "runtime/plan/plan.pb.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace braid::plan {

/// `length` consecutive local elements from `local` are the global elements
/// from `global` (row-major flat indices).
struct ShardRun {
  int64_t local, global, length;
};

/// The global shape of `buffer` (its own shape when it is not a shard), for
/// a plan whose mesh has axis sizes `mesh`.
std::vector<int64_t> GlobalShape(const Buffer &buffer, const Mesh &mesh);

/// The runs that cover `buffer`'s elements in local order, for the rank at
/// coordinate `coordinate` along the shard's axis (one run for a buffer that
/// is not a shard). Expects a validated plan.
std::vector<ShardRun> ShardRuns(const Buffer &buffer, const Mesh &mesh,
                                int64_t coordinate);

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_SHARDS_H
