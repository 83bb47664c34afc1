//===- Shards.cpp - Where a shard's elements sit in the global tensor -----===//

#include "runtime/plan/Shards.h"

#include "runtime/plan/PlanLoader.h"

namespace braid::plan {
namespace {

/// The global sizes of the split dimension's blocks.
std::vector<int64_t> blocksOf(const Buffer &b, int64_t ranks) {
  if (b.shard().blocks_size())
    return {b.shard().blocks().begin(), b.shard().blocks().end()};
  return {b.shape(b.shard().dim()) * ranks};
}

} // namespace

std::vector<int64_t> GlobalShape(const Buffer &b, const Mesh &mesh) {
  std::vector<int64_t> shape(b.shape().begin(), b.shape().end());
  if (b.has_shard()) {
    int64_t ranks = AxisSize(mesh, b.shard().axis());
    int64_t total = 0;
    for (int64_t block : blocksOf(b, ranks))
      total += block;
    shape[b.shard().dim()] = total;
  }
  return shape;
}

std::vector<ShardRun> ShardRuns(const Buffer &b, const Mesh &mesh,
                                int64_t coordinate) {
  int64_t n = 1;
  for (int64_t d : b.shape())
    n *= d;
  if (!b.has_shard())
    return {{0, 0, n}};
  int dim = b.shard().dim();
  int64_t ranks = AxisSize(mesh, b.shard().axis());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i)
    outer *= b.shape(i);
  for (int i = dim + 1; i < b.shape_size(); ++i)
    inner *= b.shape(i);
  std::vector<int64_t> blocks = blocksOf(b, ranks);
  int64_t localDim = b.shape(dim), globalDim = 0;
  for (int64_t block : blocks)
    globalDim += block;
  // For each index of the dimensions before the split one, each block's
  // local part is one contiguous stretch of local and of global elements.
  std::vector<ShardRun> runs;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t localStart = 0, globalStart = 0;
    for (int64_t block : blocks) {
      int64_t part = block / ranks;
      runs.push_back({(o * localDim + localStart) * inner,
                      (o * globalDim + globalStart + coordinate * part) * inner,
                      part * inner});
      localStart += part;
      globalStart += block;
    }
  }
  return runs;
}

} // namespace braid::plan
