//===- ShardsTest.cpp - A shard's place in the global tensor --------------===//
//
// The runs of a split buffer, written out by hand for rows, columns and a
// fused [Q | K | V] dimension, and the property that the slices of all ranks
// cover the global tensor exactly once; then the loader's checks of a shard.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Shards.h"

#include "gtest/gtest.h"

#include <tuple>

using namespace braid::plan;

namespace {

Mesh meshOf(int64_t dp, int64_t tp) {
  Mesh mesh;
  mesh.add_axes("dp");
  mesh.add_sizes(dp);
  mesh.add_axes("tp");
  mesh.add_sizes(tp);
  return mesh;
}

Buffer split(std::vector<int64_t> shape, int dim, std::vector<int64_t> blocks = {}) {
  Buffer b;
  b.set_name("w");
  b.set_dtype(F32);
  for (int64_t d : shape)
    b.add_shape(d);
  b.mutable_shard()->set_axis("tp");
  b.mutable_shard()->set_dim(dim);
  for (int64_t k : blocks)
    b.mutable_shard()->add_blocks(k);
  return b;
}

std::vector<std::tuple<int64_t, int64_t, int64_t>> runs(const Buffer &b,
                                                        const Mesh &mesh,
                                                        int64_t coord) {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> out;
  for (const ShardRun &r : ShardRuns(b, mesh, coord))
    out.emplace_back(r.local, r.global, r.length);
  return out;
}

using Runs = std::vector<std::tuple<int64_t, int64_t, int64_t>>;

TEST(Shards, Rows) {
  // A [8, 3] table split by rows over 2 ranks: rank 1 has global rows 4-7.
  Buffer b = split({4, 3}, 0);
  EXPECT_EQ(GlobalShape(b, meshOf(1, 2)), std::vector<int64_t>({8, 3}));
  EXPECT_EQ(runs(b, meshOf(1, 2), 1), Runs({{0, 12, 12}}));
}

TEST(Shards, Columns) {
  // A [2, 6] weight split by columns over 2 ranks: rank 1 has columns 3-5
  // of each row.
  Buffer b = split({2, 3}, 1);
  EXPECT_EQ(GlobalShape(b, meshOf(1, 2)), std::vector<int64_t>({2, 6}));
  EXPECT_EQ(runs(b, meshOf(1, 2), 1), Runs({{0, 3, 3}, {3, 9, 3}}));
}

TEST(Shards, FusedBlocks) {
  // A [1, 12] fused projection [Q | K | V] of 4 columns each over 2 ranks:
  // rank 0 has Q 0-1, K 4-5, V 8-9; rank 1 has Q 2-3, K 6-7, V 10-11.
  Buffer b = split({1, 6}, 1, {4, 4, 4});
  EXPECT_EQ(GlobalShape(b, meshOf(1, 2)), std::vector<int64_t>({1, 12}));
  EXPECT_EQ(runs(b, meshOf(1, 2), 0), Runs({{0, 0, 2}, {2, 4, 2}, {4, 8, 2}}));
  EXPECT_EQ(runs(b, meshOf(1, 2), 1), Runs({{0, 2, 2}, {2, 6, 2}, {4, 10, 2}}));
}

TEST(Shards, UnsplitBufferIsOneRun) {
  Buffer b = split({3, 5}, 0);
  b.clear_shard();
  EXPECT_EQ(runs(b, meshOf(2, 2), 1), Runs({{0, 0, 15}}));
}

// Whatever the split, the slices of all ranks cover every global element
// exactly once, and each rank's runs cover its own elements exactly once.
TEST(Shards, SlicesPartitionTheGlobalTensor) {
  struct Case {
    std::vector<int64_t> local;
    int dim;
    std::vector<int64_t> blocks;
    int64_t tp;
  };
  for (const Case &c : {Case{{3, 4, 5}, 1, {}, 4}, Case{{3, 4, 5}, 2, {}, 2},
                        Case{{6, 4}, 0, {8, 4, 12}, 4}, Case{{2, 7}, 1, {}, 1},
                        Case{{2, 2, 6}, 2, {9, 3, 6}, 3}}) {
    Buffer b = split(c.local, c.dim, c.blocks);
    Mesh mesh = meshOf(2, c.tp);
    int64_t local = 1, global = 1;
    for (int64_t d : c.local)
      local *= d;
    for (int64_t d : GlobalShape(b, mesh))
      global *= d;
    ASSERT_EQ(global, local * c.tp);
    std::vector<int> seen(global, 0);
    for (int64_t t = 0; t < c.tp; ++t) {
      std::vector<int> mine(local, 0);
      for (const ShardRun &r : ShardRuns(b, mesh, t))
        for (int64_t i = 0; i < r.length; ++i) {
          ++mine[r.local + i];
          ++seen[r.global + i];
        }
      for (int count : mine)
        ASSERT_EQ(count, 1);
    }
    for (int count : seen)
      ASSERT_EQ(count, 1);
  }
}

// The loader refuses a shard along an axis the mesh lacks, of a dimension
// the buffer lacks, with blocks that do not split evenly or do not add up.
TEST(Shards, LoaderChecks) {
  auto planWith = [](Buffer b) {
    Plan plan;
    plan.set_version(SCHEMA_VERSION_CURRENT);
    *plan.mutable_mesh() = meshOf(1, 2);
    b.set_offset(0);
    b.set_role(PARAMETER);
    *plan.add_buffers() = b;
    plan.set_arena_bytes(1 << 10);
    return plan;
  };
  EXPECT_TRUE(ValidatePlan(planWith(split({1, 6}, 1, {4, 4, 4}))).ok());
  Buffer b = split({2, 3}, 1);
  b.mutable_shard()->set_axis("pp");
  EXPECT_EQ(ValidatePlan(planWith(b)).message(),
            "buffer 0 ('w') is split along 'pp', which is not a mesh axis");
  EXPECT_EQ(ValidatePlan(planWith(split({2, 3}, 2))).message(),
            "buffer 0 ('w') is split along dimension 2 but has rank 2");
  EXPECT_EQ(ValidatePlan(planWith(split({1, 6}, 1, {5, 4, 3}))).message(),
            "buffer 0 ('w') has a block of 5 that does not split into 2 equal "
            "parts");
  EXPECT_EQ(ValidatePlan(planWith(split({1, 6}, 1, {4, 4}))).message(),
            "buffer 0 ('w')'s blocks make 4 elements per rank along dimension "
            "1, not its 6");
}

} // namespace
