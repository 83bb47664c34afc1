//===- CudaAttentionTest.cpp - CUDA attention against the CPU kernel ------===//
//
// runtime/cuda/Attention.h on the same inputs as cpu::attentionForward and
// cpu::attentionBackward (the reference, in double inside): causal and not,
// grouped queries, ALiBi, a tensor-parallel shard of the heads, head
// dimensions below, at and between multiples of 32, and sequences that end
// inside a tile of 32 keys and a block of 16 rows.
//
// Tolerances. fp32: 1e-5 relative, with an absolute floor of 1e-5 of the
// tensor's largest magnitude (the gradients sum terms of both signs, so an
// element near 0 carries the rounding of terms as large as the others).
// bf16: the reference runs in float on the inputs rounded to bf16, and its
// backward reads the forward's output rounded to bf16 as the kernel does;
// what differs is float arithmetic in another order and the one rounding
// of each stored value: 1/128 relative, with a floor of 1/128 of the
// tensor's largest magnitude. The log-sum-exp is float in both: 1e-5
// relative.
//
// Without a CUDA device every test skips.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/Attention.h"

#include "CudaTestUtil.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace braid;
using namespace braid::cudatest;

namespace {

template <typename T> class CudaAttention : public CudaKernels {};
using Types = ::testing::Types<float, bf16, f16>;
TYPED_TEST_SUITE(CudaAttention, Types);

/// The tensor-core kernels' element types.
template <typename E> class CudaTensorCores : public CudaKernels {};
using TensorCoreTypes = ::testing::Types<bf16, f16>;
TYPED_TEST_SUITE(CudaTensorCores, TensorCoreTypes);

double largest(const std::vector<float> &v) {
  double m = 0;
  for (float x : v)
    m = std::max(m, double(std::abs(x)));
  return m;
}

/// Compares forward and backward on one shape.
template <typename T> void compare(const cpu::AttentionShape &s) {
  const std::string name =
      "batch " + std::to_string(s.batch) + " seq " + std::to_string(s.seq) +
      " heads " + std::to_string(s.heads) + "/" + std::to_string(s.kvHeads) +
      " headDim " + std::to_string(s.headDim) + (s.causal ? " causal" : "") +
      (s.alibi ? " alibi" : "") +
      (s.globalHeads ? " shard at " + std::to_string(s.headOffset) : "");
  SCOPED_TRACE(name);
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  std::vector<float> q = rounded<T>(randomValues(qn, 21)),
                     k = rounded<T>(randomValues(kvn, 22)),
                     v = rounded<T>(randomValues(kvn, 23)),
                     dout = rounded<T>(randomValues(qn, 24));
  std::vector<float> out(qn), lse(rows), dq(qn), dk(kvn), dv(kvn);
  cpu::attentionForward(q.data(), k.data(), v.data(), s, out.data(),
                        lse.data());
  // The kernel's backward reads the output as stored (in T).
  std::vector<float> storedOut = rounded<T>(out);
  cpu::attentionBackward(q.data(), k.data(), v.data(), storedOut.data(),
                         lse.data(), dout.data(), s, dq.data(), dk.data(),
                         dv.data());

  Device<T> gq(as<T>(q)), gk(as<T>(k)), gv(as<T>(v)), gdout(as<T>(dout)),
      gout(qn), gdq(qn), gdk(as<T>(randomValues(kvn, 25))),
      gdv(as<T>(randomValues(kvn, 26)));
  Device<float> glse(rows),
      workspace(cuda::attentionBackwardWorkspaceBytes(s, false) /
                sizeof(float));
  ASSERT_EQ(cuda::attentionForward(gq.get(), gk.get(), gv.get(), s, gout.get(),
                                   glse.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::attentionBackward(gq.get(), gk.get(), gv.get(), gout.get(),
                                    glse.get(), gdout.get(), s, gdq.get(),
                                    gdk.get(), gdv.get(), workspace.get(),
                                    nullptr),
            cudaSuccess);
  const double rel = relativeTolerance<T>();
  const double floor = relativeTolerance<T>();
  expectClose(gout.host(), out, rel, floor * largest(out), "out");
  expectClose(glse.host(), lse, 1e-5, 1e-6, "lse");
  expectClose(gdq.host(), dq, rel, floor * largest(dq), "dq");
  // dk and dv were filled with noise first: they are overwritten.
  expectClose(gdk.host(), dk, rel, floor * largest(dk), "dk");
  expectClose(gdv.host(), dv, rel, floor * largest(dv), "dv");
}

cpu::AttentionShape shape(int64_t batch, int64_t seq, int64_t heads,
                          int64_t kvHeads, int64_t headDim, bool causal,
                          bool alibi = false) {
  cpu::AttentionShape s{};
  s.batch = batch;
  s.seq = seq;
  s.heads = heads;
  s.kvHeads = kvHeads;
  s.headDim = headDim;
  s.scale = 1.0 / std::sqrt(double(headDim));
  s.causal = causal;
  s.alibi = alibi;
  return s;
}

TYPED_TEST(CudaAttention, Causal) {
  // 77 keys: three tiles of 32, the last partial; 5 blocks of 16 rows.
  compare<TypeParam>(shape(2, 77, 4, 4, 64, true));
}

TYPED_TEST(CudaAttention, NotCausal) {
  compare<TypeParam>(shape(2, 77, 4, 4, 64, false));
}

TYPED_TEST(CudaAttention, GroupedQueries) {
  // Two query heads per kv head: dk and dv gather both.
  compare<TypeParam>(shape(1, 130, 6, 3, 64, true));
}

TYPED_TEST(CudaAttention, Alibi) {
  // 6 heads: slopes from the sequences for 4 and 8 heads.
  compare<TypeParam>(shape(1, 100, 6, 6, 32, true, true));
}

TYPED_TEST(CudaAttention, HeadDimensions) {
  // Below 32, between multiples, 128 (LLaMA's), the largest.
  for (int64_t headDim : {16, 40, 80, 128, 256})
    compare<TypeParam>(shape(1, 45, 2, 1, headDim, true));
}

TYPED_TEST(CudaAttention, TensorParallelShard) {
  // Query heads 2-3 of 8 and kv head 1 of 4 (replicated kv would be all 4):
  // ALiBi takes the global heads' slopes.
  cpu::AttentionShape s = shape(2, 50, 2, 1, 32, true, true);
  s.globalHeads = 8;
  s.globalKvHeads = 4;
  s.headOffset = 2;
  s.kvHeadOffset = 1;
  compare<TypeParam>(s);
  // A shard holding kv heads none of whose query heads are here: their dk
  // and dv are zeros (this rank's part of the sum).
  cpu::AttentionShape t = shape(1, 40, 2, 2, 32, false);
  t.globalHeads = 4;
  t.globalKvHeads = 2;
  t.headOffset = 0;
  t.kvHeadOffset = 0;
  compare<TypeParam>(t);
}

/// The tensor-core forward (E = bf16 or fp16, head dimension 64 or 128)
/// against the CPU on the same E inputs: out within E's tolerance (the
/// probabilities it rounds to E before they multiply V add at most half a
/// unit in E's last place relative to each term), the log-sum-exp within
/// 1e-5; with the kernel's tiling `tiling`.
template <typename E>
void compareTensorCores(const cpu::AttentionShape &s, int tiling) {
  const cuda::AttentionForwardTiling t =
      cuda::attentionForwardTilings()[tiling];
  SCOPED_TRACE("tiling " + std::to_string(tiling) + " (" +
               std::to_string(t.rowsPerWarp) + " rows per warp, " +
               std::to_string(t.keysPerTile) + " keys per tile)");
  SCOPED_TRACE("seq " + std::to_string(s.seq) + " heads " +
               std::to_string(s.heads) + "/" + std::to_string(s.kvHeads) +
               " headDim " + std::to_string(s.headDim) +
               (s.causal ? " causal" : "") + (s.alibi ? " alibi" : ""));
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  std::vector<float> q = rounded<E>(randomValues(qn, 31)),
                     k = rounded<E>(randomValues(kvn, 32)),
                     v = rounded<E>(randomValues(kvn, 33));
  std::vector<float> out(qn), lse(rows);
  cpu::attentionForward(q.data(), k.data(), v.data(), s, out.data(),
                        lse.data());
  Device<E> gq(as<E>(q)), gk(as<E>(k)), gv(as<E>(v)), gout(qn);
  Device<float> glse(rows);
  ASSERT_TRUE(cuda::attentionForwardOnTensorCores(gq.get(), gk.get(), gv.get(),
                                                  gout.get(), s));
  ASSERT_EQ(cuda::attentionForwardTensorCores(gq.get(), gk.get(), gv.get(), s,
                                              gout.get(), glse.get(), nullptr,
                                              tiling),
            cudaSuccess);
  const double rel = relativeTolerance<E>();
  expectClose(gout.host(), out, rel, largest(out) * rel, "out");
  expectClose(glse.host(), lse, 1e-5, 1e-5, "lse");
}

/// The same with every tiling (they compute the same function).
template <typename E> void compareTensorCores(const cpu::AttentionShape &s) {
  for (int tiling = 0; tiling < int(cuda::attentionForwardTilings().size());
       ++tiling)
    compareTensorCores<E>(s, tiling);
}

/// The tensor-core backward against the CPU's on the same E inputs (the
/// output as stored in E, the CPU's log-sum-exp): dq, dk and dv within E's
/// tolerance of the float kernels' comparison (the probabilities and their
/// gradients, rounded to E as the products' operands, add at most half a
/// unit in E's last place relative to each term).
template <typename E>
void compareTensorCoresBackward(const cpu::AttentionShape &s, int tiling) {
  const cuda::AttentionBackwardTiling t =
      cuda::attentionBackwardTilings()[tiling];
  SCOPED_TRACE("tiling " + std::to_string(tiling) + " (" +
               std::to_string(t.keysPerBlock) + " keys per block, query tile " +
               std::to_string(t.queryTileAt(s.headDim)) +
               (t.dqByAtomics ? ", dq by atomics)" : ")"));
  SCOPED_TRACE("backward: batch " + std::to_string(s.batch) + " seq " +
               std::to_string(s.seq) + " heads " + std::to_string(s.heads) +
               "/" + std::to_string(s.kvHeads) + " headDim " +
               std::to_string(s.headDim) + (s.causal ? " causal" : "") +
               (s.alibi ? " alibi" : "") +
               (s.globalHeads ? " shard at " + std::to_string(s.headOffset)
                              : ""));
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  std::vector<float> q = rounded<E>(randomValues(qn, 41)),
                     k = rounded<E>(randomValues(kvn, 42)),
                     v = rounded<E>(randomValues(kvn, 43)),
                     dout = rounded<E>(randomValues(qn, 44));
  std::vector<float> out(qn), lse(rows), dq(qn), dk(kvn), dv(kvn);
  cpu::attentionForward(q.data(), k.data(), v.data(), s, out.data(),
                        lse.data());
  std::vector<float> storedOut = rounded<E>(out);
  cpu::attentionBackward(q.data(), k.data(), v.data(), storedOut.data(),
                         lse.data(), dout.data(), s, dq.data(), dk.data(),
                         dv.data());
  Device<E> gq(as<E>(q)), gk(as<E>(k)), gv(as<E>(v)), gout(as<E>(storedOut)),
      gdout(as<E>(dout)), gdq(qn), gdk(as<E>(randomValues(kvn, 45))),
      gdv(as<E>(randomValues(kvn, 46)));
  Device<float> glse(lse),
      workspace(cuda::attentionBackwardWorkspaceBytes(s) / sizeof(float));
  ASSERT_TRUE(cuda::attentionBackwardOnTensorCores(
      gq.get(), gk.get(), gv.get(), gout.get(), gdout.get(), gdq.get(),
      gdk.get(), gdv.get(), s));
  ASSERT_EQ(cuda::attentionBackwardTensorCores(
                gq.get(), gk.get(), gv.get(), gout.get(), glse.get(),
                gdout.get(), s, gdq.get(), gdk.get(), gdv.get(),
                workspace.get(), nullptr, tiling),
            cudaSuccess);
  const double rel = relativeTolerance<E>();
  expectClose(gdq.host(), dq, rel, largest(dq) * rel, "dq");
  // dk and dv were filled with noise first: they are overwritten.
  expectClose(gdk.host(), dk, rel, largest(dk) * rel, "dk");
  expectClose(gdv.host(), dv, rel, largest(dv) * rel, "dv");
}

/// The same with every tiling.
template <typename E>
void compareTensorCoresBackward(const cpu::AttentionShape &s) {
  for (int tiling = 0; tiling < int(cuda::attentionBackwardTilings().size());
       ++tiling)
    compareTensorCoresBackward<E>(s, tiling);
}

TYPED_TEST(CudaTensorCores, Backward) {
  using E = TypeParam;
  // As the forward's shapes: blocks of 64 and 128 keys and tiles of 64
  // queries (32 or 64 in dk and dv at head dimension 128), partial and
  // whole.
  compareTensorCoresBackward<E>(shape(2, 77, 4, 4, 64, true));
  compareTensorCoresBackward<E>(shape(1, 40, 2, 2, 64, false));
  compareTensorCoresBackward<E>(shape(1, 130, 6, 3, 64, true));
  compareTensorCoresBackward<E>(shape(1, 100, 6, 6, 128, false, true));
  compareTensorCoresBackward<E>(shape(2, 200, 4, 2, 128, true));
  // A tensor-parallel shard: query heads 2-3 of 8, kv head 1 of 4; and one
  // whose kv heads have no query head here (zeros).
  cpu::AttentionShape s = shape(2, 90, 2, 1, 64, true, true);
  s.globalHeads = 8;
  s.globalKvHeads = 4;
  s.headOffset = 2;
  s.kvHeadOffset = 1;
  compareTensorCoresBackward<E>(s);
  cpu::AttentionShape t = shape(1, 40, 2, 2, 128, false);
  t.globalHeads = 4;
  t.globalKvHeads = 2;
  t.headOffset = 0;
  t.kvHeadOffset = 0;
  compareTensorCoresBackward<E>(t);
}

TYPED_TEST(CudaTensorCores, Forward) {
  using E = TypeParam;
  // Blocks of 64 and 128 rows, tiles of 32 and 64 keys: sequences inside
  // the first tile, across several and ending inside one; causal and not;
  // grouped queries; ALiBi.
  compareTensorCores<E>(shape(2, 77, 4, 4, 64, true));
  compareTensorCores<E>(shape(1, 40, 2, 2, 64, false));
  compareTensorCores<E>(shape(1, 130, 6, 3, 64, true));
  compareTensorCores<E>(shape(1, 100, 6, 6, 128, false, true));
  compareTensorCores<E>(shape(2, 200, 4, 2, 128, true));
  compareTensorCores<E>(shape(1, 256, 2, 1, 128, true, true));
  // A tensor-parallel shard: query heads 2-3 of 8, kv head 1 of 4.
  cpu::AttentionShape s = shape(2, 90, 2, 1, 64, true, true);
  s.globalHeads = 8;
  s.globalKvHeads = 4;
  s.headOffset = 2;
  s.kvHeadOffset = 1;
  compareTensorCores<E>(s);
}

TEST(CudaAttentionShape, TensorCoresTakeHeadDimensions64And128Aligned) {
  // No device needed: shapes and alignment are checked before any launch.
  alignas(16) static char buffer[64];
  const void *ok = buffer, *off = buffer + 2;
  EXPECT_TRUE(cuda::attentionForwardOnTensorCores(ok, ok, ok, ok,
                                                  shape(1, 8, 1, 1, 64, true)));
  EXPECT_TRUE(cuda::attentionForwardOnTensorCores(
      ok, ok, ok, ok, shape(1, 8, 1, 1, 128, false)));
  for (int64_t headDim : {32, 80, 256})
    EXPECT_FALSE(cuda::attentionForwardOnTensorCores(
        ok, ok, ok, ok, shape(1, 8, 1, 1, headDim, true)))
        << headDim;
  EXPECT_FALSE(cuda::attentionForwardOnTensorCores(
      ok, off, ok, ok, shape(1, 8, 1, 1, 64, true)));
  const bf16 *none = nullptr;
  EXPECT_EQ(cuda::attentionForwardTensorCores(none, none, none,
                                              shape(1, 8, 1, 1, 80, true),
                                              nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
  // A tiling past the list's end is refused before anything is launched.
  const bf16 *in = reinterpret_cast<const bf16 *>(buffer);
  bf16 *io = reinterpret_cast<bf16 *>(buffer);
  float *lse = reinterpret_cast<float *>(buffer);
  const int forwardTilings = int(cuda::attentionForwardTilings().size());
  const int backwardTilings = int(cuda::attentionBackwardTilings().size());
  EXPECT_EQ(cuda::attentionForwardTensorCores(in, in, in,
                                              shape(1, 8, 1, 1, 64, true), io,
                                              lse, nullptr, forwardTilings),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::attentionForwardTensorCores(
                in, in, in, shape(1, 8, 1, 1, 64, true), io, lse, nullptr, -1),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::attentionBackwardTensorCores(
                in, in, in, in, lse, in, shape(1, 8, 1, 1, 128, true), io, io,
                io, lse, nullptr, backwardTilings),
            cudaErrorInvalidValue);
}

TEST(CudaAttentionShape, RefusesHeadDimensionsAbove256) {
  // No device needed: the shape is checked before anything is launched.
  cpu::AttentionShape s = shape(1, 8, 1, 1, 512, true);
  EXPECT_EQ(cuda::attentionForward<float>(nullptr, nullptr, nullptr, s, nullptr,
                                          nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::attentionBackward<float>(nullptr, nullptr, nullptr, nullptr,
                                           nullptr, nullptr, s, nullptr,
                                           nullptr, nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
}

} // namespace
