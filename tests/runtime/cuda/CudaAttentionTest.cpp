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
// Packed documents (AttentionShape::positions) against a reference written
// here from the definition: per document, plain causal softmax attention
// in double on that document's rows alone (its backward reading the output
// as stored), with the same tolerances; and with one document per sequence
// the kernels' results are exactly those without positions.
//
// Without a CUDA device every test skips.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/Attention.h"
#include "runtime/cuda/CudnnAttention.h"

#include "CudaTestUtil.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <string>
#include <type_traits>
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

/// Random inputs rounded to E (seeds seed .. seed + 3) and the CPU's
/// forward and backward on them, the backward reading the output as stored
/// in E.
struct AttentionCase {
  std::vector<float> q, k, v, dout, out, lse, storedOut, dq, dk, dv;
};
template <typename E>
AttentionCase attentionCase(const cpu::AttentionShape &s, uint32_t seed) {
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  AttentionCase c;
  c.q = rounded<E>(randomValues(qn, seed));
  c.k = rounded<E>(randomValues(kvn, seed + 1));
  c.v = rounded<E>(randomValues(kvn, seed + 2));
  c.dout = rounded<E>(randomValues(qn, seed + 3));
  c.out.resize(qn);
  c.lse.resize(rows);
  c.dq.resize(qn);
  c.dk.resize(kvn);
  c.dv.resize(kvn);
  cpu::attentionForward(c.q.data(), c.k.data(), c.v.data(), s, c.out.data(),
                        c.lse.data());
  c.storedOut = rounded<E>(c.out);
  cpu::attentionBackward(c.q.data(), c.k.data(), c.v.data(),
                         c.storedOut.data(), c.lse.data(), c.dout.data(), s,
                         c.dq.data(), c.dk.data(), c.dv.data());
  return c;
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
  const AttentionCase c = attentionCase<E>(s, 41);
  const std::vector<float> &q = c.q, &k = c.k, &v = c.v, &dout = c.dout,
                           &lse = c.lse, &storedOut = c.storedOut, &dq = c.dq,
                           &dk = c.dk, &dv = c.dv;
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

//===-- cuDNN's fused attention ------------------------------------------===//

/// cuDNN's forward and backward (CudnnAttention.h) against the CPU on the
/// same E inputs, with the tensor-core kernels' tolerances: out, the
/// log-sum-exp (the same quantity as Braid's, so either forward feeds
/// either backward), and dq, dk, dv from the CPU's stored output and
/// log-sum-exp.
template <typename E>
void compareCudnn(cuda::CudnnAttention &cudnn, const cpu::AttentionShape &s) {
  SCOPED_TRACE("cuDNN: batch " + std::to_string(s.batch) + " seq " +
               std::to_string(s.seq) + " heads " + std::to_string(s.heads) +
               "/" + std::to_string(s.kvHeads) + " headDim " +
               std::to_string(s.headDim) + (s.causal ? " causal" : ""));
  const auto type = std::is_same_v<E, bf16> ? cuda::CudnnAttention::Type::BF16
                                            : cuda::CudnnAttention::Type::F16;
  ASSERT_EQ(cuda::CudnnAttentionRefusal(s), "");
  absl::StatusOr<int64_t> forwardBytes = cudnn.Prepare(s, type, false);
  ASSERT_TRUE(forwardBytes.ok()) << forwardBytes.status();
  absl::StatusOr<int64_t> backwardBytes = cudnn.Prepare(s, type, true);
  ASSERT_TRUE(backwardBytes.ok()) << backwardBytes.status();
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  const AttentionCase c = attentionCase<E>(s, 51);
  const std::vector<float> &q = c.q, &k = c.k, &v = c.v, &dout = c.dout,
                           &out = c.out, &lse = c.lse,
                           &storedOut = c.storedOut, &dq = c.dq, &dk = c.dk,
                           &dv = c.dv;
  Device<uint8_t> workspace(
      std::max<int64_t>({*forwardBytes, *backwardBytes, 1}));
  Device<E> gq(as<E>(q)), gk(as<E>(k)), gv(as<E>(v)), gout(qn),
      gstored(as<E>(storedOut)), gdout(as<E>(dout)),
      gdq(as<E>(randomValues(qn, 55))), gdk(as<E>(randomValues(kvn, 56))),
      gdv(as<E>(randomValues(kvn, 57)));
  Device<float> glse(rows), cpuLse(lse);
  absl::Status st = cudnn.Forward(gq.get(), gk.get(), gv.get(), s, type,
                                  gout.get(), glse.get(), workspace.get(),
                                  nullptr);
  ASSERT_TRUE(st.ok()) << st;
  const double rel = relativeTolerance<E>();
  expectClose(gout.host(), out, rel, largest(out) * rel, "out");
  expectClose(glse.host(), lse, 1e-5, 1e-5, "lse");
  st = cudnn.Backward(gq.get(), gk.get(), gv.get(), gstored.get(),
                      cpuLse.get(), gdout.get(), s, type, gdq.get(), gdk.get(),
                      gdv.get(), workspace.get(), nullptr);
  ASSERT_TRUE(st.ok()) << st;
  // dq, dk and dv were filled with noise first: they are overwritten.
  expectClose(gdq.host(), dq, rel, largest(dq) * rel, "dq");
  expectClose(gdk.host(), dk, rel, largest(dk) * rel, "dk");
  expectClose(gdv.host(), dv, rel, largest(dv) * rel, "dv");
}

TEST(CudnnAttentionShapes, WhatItTakes) {
  // The shapes the executor keeps on Braid's kernels, each named.
  EXPECT_EQ(cuda::CudnnAttentionRefusal(shape(1, 64, 4, 4, 64, true)), "");
  EXPECT_EQ(cuda::CudnnAttentionRefusal(shape(1, 64, 8, 2, 128, true)), "");
  EXPECT_EQ(cuda::CudnnAttentionRefusal(shape(1, 64, 4, 4, 64, true, true)),
            "ALiBi");
  EXPECT_NE(cuda::CudnnAttentionRefusal(shape(1, 64, 4, 4, 160, true)), "");
  EXPECT_NE(cuda::CudnnAttentionRefusal(shape(1, 64, 4, 4, 36, true)), "");
  cpu::AttentionShape packed = shape(1, 64, 4, 4, 64, true);
  const int32_t positions[1] = {0};
  packed.positions = positions;
  EXPECT_EQ(cuda::CudnnAttentionRefusal(packed), "packed documents");
  // A shard whose one kv head serves query heads 2-3 of 8 (kv head 1 of
  // 4): local query head h is on local kv head 0 = h / 2, taken. Query
  // heads 1-2 of 4 over both kv heads: head 0 (global 1) on kv head 0,
  // head 1 (global 2) on kv head 1, which is h / 1, taken; the same
  // counted as one kv head is not cuDNN's h / 2.
  cpu::AttentionShape shard = shape(1, 64, 2, 1, 64, true);
  shard.globalHeads = 8;
  shard.globalKvHeads = 4;
  shard.headOffset = 2;
  shard.kvHeadOffset = 1;
  EXPECT_EQ(cuda::CudnnAttentionRefusal(shard), "");
  cpu::AttentionShape odd = shape(1, 64, 2, 2, 64, true);
  odd.globalHeads = 4;
  odd.globalKvHeads = 2;
  odd.headOffset = 1;
  odd.kvHeadOffset = 0;
  EXPECT_EQ(cuda::CudnnAttentionRefusal(odd), "");
  odd.kvHeads = 1;
  EXPECT_NE(cuda::CudnnAttentionRefusal(odd), "");
}

TYPED_TEST(CudaTensorCores, Cudnn) {
  using E = TypeParam;
  absl::StatusOr<std::unique_ptr<cuda::CudnnAttention>> cudnn =
      cuda::CudnnAttention::Create();
  if (!cudnn.ok())
    GTEST_SKIP() << cudnn.status().message();
  std::printf("%s\n", (*cudnn)->Version().c_str());
  // As the tensor-core kernels' shapes: sequences inside one tile, across
  // several and ending inside one; causal and not; grouped queries.
  compareCudnn<E>(**cudnn, shape(2, 77, 4, 4, 64, true));
  compareCudnn<E>(**cudnn, shape(1, 40, 2, 2, 64, false));
  compareCudnn<E>(**cudnn, shape(1, 130, 6, 3, 64, true));
  compareCudnn<E>(**cudnn, shape(1, 100, 6, 6, 128, false));
  compareCudnn<E>(**cudnn, shape(2, 200, 4, 2, 128, true));
  compareCudnn<E>(**cudnn, shape(1, 256, 8, 1, 128, true));
  // Preparing a shape cuDNN is not given is refused, naming why.
  absl::StatusOr<int64_t> alibi =
      (*cudnn)->Prepare(shape(1, 64, 4, 4, 64, true, true),
                        std::is_same_v<E, bf16>
                            ? cuda::CudnnAttention::Type::BF16
                            : cuda::CudnnAttention::Type::F16,
                        false);
  ASSERT_FALSE(alibi.ok());
  EXPECT_NE(alibi.status().message().find("ALiBi"), std::string::npos);
}

//===-- Packed documents -------------------------------------------------===//

/// The positions of sequences packed with documents of `lengths` (one list
/// per sequence, summing to its length): 0, 1, ... from each document's
/// first row.
std::vector<int32_t>
packedPositions(const std::vector<std::vector<int64_t>> &lengths) {
  std::vector<int32_t> positions;
  for (const std::vector<int64_t> &sequence : lengths)
    for (int64_t n : sequence)
      for (int64_t p = 0; p < n; ++p)
        positions.push_back(int32_t(p));
  return positions;
}

/// One document per sequence: plain causal attention.
std::vector<std::vector<int64_t>> wholeSequences(const cpu::AttentionShape &s) {
  return std::vector<std::vector<int64_t>>(size_t(s.batch), {s.seq});
}

/// Attention over packed documents from the definition, in double: for
/// each sequence b, document [d0, d1) (a row at position 0 starts one) and
/// query head h (kv head h / (heads / kvHeads)), plain causal softmax
/// attention of the document's rows alone, rows and keys numbered from
/// d0. Forward: out and lse. Backward (with `dout` and the output `out` as
/// the kernel reads it): P = softmax(q kᵀ scale), dP = dout vᵀ, D_i = dout_i
/// · out_i, dS = P (dP - D), dq = dS k scale, dk = dSᵀ q scale, dv = Pᵀ dout.
struct DocumentReference {
  const cpu::AttentionShape &s;
  const std::vector<int32_t> &positions;
  const std::vector<float> &q, &k, &v;

  int64_t group() const { return s.heads / s.kvHeads; }
  double qAt(int64_t b, int64_t i, int64_t h, int64_t c) const {
    return q[((b * s.seq + i) * s.heads + h) * s.headDim + c];
  }
  int64_t kvIndex(int64_t b, int64_t j, int64_t h, int64_t c) const {
    return ((b * s.seq + j) * s.kvHeads + h / group()) * s.headDim + c;
  }
  /// Each document of sequence b: [d0, d1).
  std::vector<std::pair<int64_t, int64_t>> documents(int64_t b) const {
    std::vector<std::pair<int64_t, int64_t>> docs;
    for (int64_t i = 0; i < s.seq; ++i)
      if (positions[b * s.seq + i] == 0)
        docs.push_back({i, i + 1});
      else
        docs.back().second = i + 1;
    return docs;
  }
  /// The probabilities of query i (row d0 + i) over keys d0 .. d0 + i of
  /// its document, and their log-sum-exp.
  std::vector<double> probabilities(int64_t b, int64_t h, int64_t d0, int64_t i,
                                    double &lse) const {
    std::vector<double> score(size_t(i + 1));
    double m = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < s.headDim; ++c)
        dot += qAt(b, d0 + i, h, c) * k[kvIndex(b, d0 + j, h, c)];
      score[j] = dot * s.scale;
      m = std::max(m, score[j]);
    }
    double sum = 0;
    for (double x : score)
      sum += std::exp(x - m);
    lse = m + std::log(sum);
    for (double &x : score)
      x = std::exp(x - lse);
    return score;
  }

  void forward(std::vector<float> &out, std::vector<float> &lse) const {
    out.assign(q.size(), 0.0f);
    lse.assign(size_t(s.batch * s.heads * s.seq), 0.0f);
    for (int64_t b = 0; b < s.batch; ++b)
      for (auto [d0, d1] : documents(b))
        for (int64_t h = 0; h < s.heads; ++h)
          for (int64_t i = 0; i < d1 - d0; ++i) {
            double l;
            std::vector<double> p = probabilities(b, h, d0, i, l);
            lse[(b * s.heads + h) * s.seq + d0 + i] = float(l);
            for (int64_t c = 0; c < s.headDim; ++c) {
              double sum = 0;
              for (int64_t j = 0; j <= i; ++j)
                sum += p[j] * v[kvIndex(b, d0 + j, h, c)];
              out[((b * s.seq + d0 + i) * s.heads + h) * s.headDim + c] =
                  float(sum);
            }
          }
  }

  void backward(const std::vector<float> &out, const std::vector<float> &dout,
                std::vector<float> &dq, std::vector<float> &dk,
                std::vector<float> &dv) const {
    std::vector<double> gq(q.size(), 0.0), gk(k.size(), 0.0), gv(v.size(), 0.0);
    for (int64_t b = 0; b < s.batch; ++b)
      for (auto [d0, d1] : documents(b))
        for (int64_t h = 0; h < s.heads; ++h)
          for (int64_t i = 0; i < d1 - d0; ++i) {
            double l;
            std::vector<double> p = probabilities(b, h, d0, i, l);
            const int64_t row =
                ((b * s.seq + d0 + i) * s.heads + h) * s.headDim;
            double rowDot = 0;
            for (int64_t c = 0; c < s.headDim; ++c)
              rowDot += double(dout[row + c]) * out[row + c];
            for (int64_t j = 0; j <= i; ++j) {
              double dp = 0;
              for (int64_t c = 0; c < s.headDim; ++c)
                dp += double(dout[row + c]) * v[kvIndex(b, d0 + j, h, c)];
              const double ds = p[j] * (dp - rowDot) * s.scale;
              for (int64_t c = 0; c < s.headDim; ++c) {
                const int64_t kv = kvIndex(b, d0 + j, h, c);
                gq[row + c] += ds * k[kv];
                gk[kv] += ds * q[row + c];
                gv[kv] += p[j] * dout[row + c];
              }
            }
          }
    dq.assign(gq.begin(), gq.end());
    dk.assign(gk.begin(), gk.end());
    dv.assign(gv.begin(), gv.end());
  }
};

std::string documentsName(const std::vector<std::vector<int64_t>> &lengths) {
  std::string name = "documents";
  for (const std::vector<int64_t> &sequence : lengths) {
    name += " [";
    for (int64_t n : sequence)
      name += " " + std::to_string(n);
    name += " ]";
  }
  return name;
}

/// The CUDA-core kernels on packed documents of `lengths` against the
/// reference.
template <typename T>
void compareDocuments(cpu::AttentionShape s,
                      const std::vector<std::vector<int64_t>> &lengths) {
  SCOPED_TRACE("batch " + std::to_string(s.batch) + " seq " +
               std::to_string(s.seq) + " heads " + std::to_string(s.heads) +
               "/" + std::to_string(s.kvHeads) + " headDim " +
               std::to_string(s.headDim) + ", " + documentsName(lengths));
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  const std::vector<int32_t> positions = packedPositions(lengths);
  ASSERT_EQ(int64_t(positions.size()), s.batch * s.seq);
  std::vector<float> q = rounded<T>(randomValues(qn, 51)),
                     k = rounded<T>(randomValues(kvn, 52)),
                     v = rounded<T>(randomValues(kvn, 53)),
                     dout = rounded<T>(randomValues(qn, 54));
  const DocumentReference reference{s, positions, q, k, v};
  std::vector<float> out, lse, dq, dk, dv;
  reference.forward(out, lse);
  // The kernel's backward reads the output as stored (in T).
  reference.backward(rounded<T>(out), dout, dq, dk, dv);

  Device<int32_t> gpositions(positions);
  s.positions = gpositions.get();
  Device<T> gq(as<T>(q)), gk(as<T>(k)), gv(as<T>(v)), gdout(as<T>(dout)),
      gout(as<T>(randomValues(qn, 55))), gdq(as<T>(randomValues(qn, 56))),
      gdk(as<T>(randomValues(kvn, 57))), gdv(as<T>(randomValues(kvn, 58)));
  Device<float> glse(randomValues(rows, 59)),
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
  // Every output was filled with noise first: each element is written.
  const double rel = relativeTolerance<T>();
  expectClose(gout.host(), out, rel, rel * largest(out), "out");
  expectClose(glse.host(), lse, 1e-5, 1e-6, "lse");
  expectClose(gdq.host(), dq, rel, rel * largest(dq), "dq");
  expectClose(gdk.host(), dk, rel, rel * largest(dk), "dk");
  expectClose(gdv.host(), dv, rel, rel * largest(dv), "dv");
}

/// `got` and `want` bit for bit.
template <typename T>
void expectSame(const std::vector<T> &got, const std::vector<T> &want,
                const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << toFloat(got[i])
                    << " with positions, " << toFloat(want[i]) << " without";
      return;
    }
}

/// The outputs of the forward and the backward, from the device.
template <typename T> struct AttentionResults {
  std::vector<T> out, dq, dk, dv;
  std::vector<float> lse;
};

/// Runs the CUDA-core forward and backward on `s` (with its positions, if
/// any) on fixed inputs.
template <typename T>
AttentionResults<T> runAttention(const cpu::AttentionShape &s) {
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  Device<T> gq(as<T>(randomValues(qn, 61))), gk(as<T>(randomValues(kvn, 62))),
      gv(as<T>(randomValues(kvn, 63))), gdout(as<T>(randomValues(qn, 64))),
      gout(qn), gdq(qn), gdk(kvn), gdv(kvn);
  Device<float> glse(rows),
      workspace(cuda::attentionBackwardWorkspaceBytes(s, false) /
                sizeof(float));
  EXPECT_EQ(cuda::attentionForward(gq.get(), gk.get(), gv.get(), s, gout.get(),
                                   glse.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(cuda::attentionBackward(gq.get(), gk.get(), gv.get(), gout.get(),
                                    glse.get(), gdout.get(), s, gdq.get(),
                                    gdk.get(), gdv.get(), workspace.get(),
                                    nullptr),
            cudaSuccess);
  return {gout.host(), gdq.host(), gdk.host(), gdv.host(), glse.host()};
}

/// With one document per sequence the CUDA-core kernels compute exactly
/// what they do without positions.
template <typename T> void compareWholeDocuments(const cpu::AttentionShape &s) {
  SCOPED_TRACE("one document per sequence: batch " + std::to_string(s.batch) +
               " seq " + std::to_string(s.seq) + " headDim " +
               std::to_string(s.headDim));
  const AttentionResults<T> plain = runAttention<T>(s);
  Device<int32_t> gpositions(packedPositions(wholeSequences(s)));
  cpu::AttentionShape withPositions = s;
  withPositions.positions = gpositions.get();
  const AttentionResults<T> packed = runAttention<T>(withPositions);
  expectSame(packed.out, plain.out, "out");
  expectSame(packed.lse, plain.lse, "lse");
  expectSame(packed.dq, plain.dq, "dq");
  expectSame(packed.dk, plain.dk, "dk");
  expectSame(packed.dv, plain.dv, "dv");
}

TYPED_TEST(CudaAttention, PackedDocuments) {
  // Tiles of 32 keys, blocks of 16 rows. Documents of one row, documents
  // crossing tiles and blocks, blocks whose first row's document starts
  // tiles later (skipped key tiles), key blocks whose later query tiles
  // see none of their keys (skipped query tiles); grouped queries.
  compareDocuments<TypeParam>(shape(2, 100, 4, 2, 16, true),
                              {{1, 40, 5, 1, 53}, {3, 70, 1, 26}});
  // One whole sequence (plain causal) beside documents ending on tile and
  // block boundaries; a head dimension between multiples of 32.
  compareDocuments<TypeParam>(shape(2, 77, 3, 1, 40, true),
                              {{77}, {16, 16, 32, 1, 1, 11}});
  // Rows that are documents of their own (each query sees itself alone)
  // around one of 3 rows (whose gradients are not all zeros).
  std::vector<int64_t> singles(16, 1);
  singles.push_back(3);
  singles.insert(singles.end(), 16, 1);
  compareDocuments<TypeParam>(shape(1, 35, 2, 2, 32, true), {singles});
}

TYPED_TEST(CudaAttention, OneDocumentIsNoPositions) {
  compareWholeDocuments<TypeParam>(shape(2, 77, 4, 2, 16, true));
  compareWholeDocuments<TypeParam>(shape(1, 45, 2, 1, 40, true));
}

/// The tensor-core forward (every tiling) and backward (every tiling) on
/// packed documents of `lengths` against the reference: the forward on
/// the inputs, the backward on the reference's output as stored in E and
/// its log-sum-exp.
template <typename E>
void compareDocumentsTensorCores(
    cpu::AttentionShape s, const std::vector<std::vector<int64_t>> &lengths) {
  SCOPED_TRACE("tensor cores: batch " + std::to_string(s.batch) + " seq " +
               std::to_string(s.seq) + " heads " + std::to_string(s.heads) +
               "/" + std::to_string(s.kvHeads) + " headDim " +
               std::to_string(s.headDim) + ", " + documentsName(lengths));
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  const std::vector<int32_t> positions = packedPositions(lengths);
  ASSERT_EQ(int64_t(positions.size()), s.batch * s.seq);
  std::vector<float> q = rounded<E>(randomValues(qn, 71)),
                     k = rounded<E>(randomValues(kvn, 72)),
                     v = rounded<E>(randomValues(kvn, 73)),
                     dout = rounded<E>(randomValues(qn, 74));
  const DocumentReference reference{s, positions, q, k, v};
  std::vector<float> out, lse, dq, dk, dv;
  reference.forward(out, lse);
  const std::vector<float> storedOut = rounded<E>(out);
  reference.backward(storedOut, dout, dq, dk, dv);

  Device<int32_t> gpositions(positions);
  s.positions = gpositions.get();
  Device<E> gq(as<E>(q)), gk(as<E>(k)), gv(as<E>(v)), gdout(as<E>(dout)),
      gstored(as<E>(storedOut));
  Device<float> greferenceLse(lse),
      workspace(cuda::attentionBackwardWorkspaceBytes(s) / sizeof(float));
  const double rel = relativeTolerance<E>();
  for (int tiling = 0; tiling < int(cuda::attentionForwardTilings().size());
       ++tiling) {
    SCOPED_TRACE("forward tiling " + std::to_string(tiling));
    Device<E> gout(as<E>(randomValues(qn, 75)));
    Device<float> glse(randomValues(rows, 76));
    ASSERT_TRUE(cuda::attentionForwardOnTensorCores(gq.get(), gk.get(),
                                                    gv.get(), gout.get(), s));
    ASSERT_EQ(cuda::attentionForwardTensorCores(gq.get(), gk.get(), gv.get(), s,
                                                gout.get(), glse.get(), nullptr,
                                                tiling),
              cudaSuccess);
    expectClose(gout.host(), out, rel, rel * largest(out), "out");
    expectClose(glse.host(), lse, 1e-5, 1e-5, "lse");
  }
  for (int tiling = 0; tiling < int(cuda::attentionBackwardTilings().size());
       ++tiling) {
    SCOPED_TRACE("backward tiling " + std::to_string(tiling));
    Device<E> gdq(as<E>(randomValues(qn, 77))),
        gdk(as<E>(randomValues(kvn, 78))), gdv(as<E>(randomValues(kvn, 79)));
    ASSERT_TRUE(cuda::attentionBackwardOnTensorCores(
        gq.get(), gk.get(), gv.get(), gstored.get(), gdout.get(), gdq.get(),
        gdk.get(), gdv.get(), s));
    ASSERT_EQ(cuda::attentionBackwardTensorCores(
                  gq.get(), gk.get(), gv.get(), gstored.get(),
                  greferenceLse.get(), gdout.get(), s, gdq.get(), gdk.get(),
                  gdv.get(), workspace.get(), nullptr, tiling),
              cudaSuccess);
    expectClose(gdq.host(), dq, rel, rel * largest(dq), "dq");
    expectClose(gdk.host(), dk, rel, rel * largest(dk), "dk");
    expectClose(gdv.host(), dv, rel, rel * largest(dv), "dv");
  }
}

/// With one document per sequence the tensor-core kernels (every tiling)
/// compute exactly what they do without positions; dq exactly where one
/// writer computes each element (by atomics its sums' order is the
/// device's).
template <typename E>
void compareWholeDocumentsTensorCores(const cpu::AttentionShape &s) {
  SCOPED_TRACE("tensor cores, one document per sequence: batch " +
               std::to_string(s.batch) + " seq " + std::to_string(s.seq) +
               " headDim " + std::to_string(s.headDim));
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  Device<int32_t> gpositions(packedPositions(wholeSequences(s)));
  cpu::AttentionShape withPositions = s;
  withPositions.positions = gpositions.get();
  Device<E> gq(as<E>(randomValues(qn, 81))), gk(as<E>(randomValues(kvn, 82))),
      gv(as<E>(randomValues(kvn, 83))), gdout(as<E>(randomValues(qn, 84)));
  Device<float> workspace(cuda::attentionBackwardWorkspaceBytes(s) /
                          sizeof(float));
  for (int tiling = 0; tiling < int(cuda::attentionForwardTilings().size());
       ++tiling) {
    SCOPED_TRACE("forward tiling " + std::to_string(tiling));
    Device<E> plainOut(qn), packedOut(qn);
    Device<float> plainLse(rows), packedLse(rows);
    ASSERT_EQ(cuda::attentionForwardTensorCores(gq.get(), gk.get(), gv.get(), s,
                                                plainOut.get(), plainLse.get(),
                                                nullptr, tiling),
              cudaSuccess);
    ASSERT_EQ(cuda::attentionForwardTensorCores(
                  gq.get(), gk.get(), gv.get(), withPositions, packedOut.get(),
                  packedLse.get(), nullptr, tiling),
              cudaSuccess);
    expectSame(packedOut.host(), plainOut.host(), "out");
    expectSame(packedLse.host(), plainLse.host(), "lse");
  }
  // The backward on the forward's results (the default tiling's).
  Device<E> gout(qn);
  Device<float> glse(rows);
  ASSERT_EQ(cuda::attentionForwardTensorCores(gq.get(), gk.get(), gv.get(), s,
                                              gout.get(), glse.get(), nullptr),
            cudaSuccess);
  const std::vector<cuda::AttentionBackwardTiling> tilings =
      cuda::attentionBackwardTilings();
  for (int tiling = 0; tiling < int(tilings.size()); ++tiling) {
    SCOPED_TRACE("backward tiling " + std::to_string(tiling));
    Device<E> plainDq(qn), plainDk(kvn), plainDv(kvn), packedDq(qn),
        packedDk(kvn), packedDv(kvn);
    ASSERT_EQ(cuda::attentionBackwardTensorCores(
                  gq.get(), gk.get(), gv.get(), gout.get(), glse.get(),
                  gdout.get(), s, plainDq.get(), plainDk.get(), plainDv.get(),
                  workspace.get(), nullptr, tiling),
              cudaSuccess);
    ASSERT_EQ(cuda::attentionBackwardTensorCores(
                  gq.get(), gk.get(), gv.get(), gout.get(), glse.get(),
                  gdout.get(), withPositions, packedDq.get(), packedDk.get(),
                  packedDv.get(), workspace.get(), nullptr, tiling),
              cudaSuccess);
    if (!tilings[tiling].dqByAtomics)
      expectSame(packedDq.host(), plainDq.host(), "dq");
    expectSame(packedDk.host(), plainDk.host(), "dk");
    expectSame(packedDv.host(), plainDv.host(), "dv");
  }
}

TYPED_TEST(CudaTensorCores, PackedDocuments) {
  using E = TypeParam;
  // Blocks of 64 and 128 query rows, key tiles of 32 and 64, dk and dv
  // blocks of 64 keys with query tiles of 32 and 64: documents of one row,
  // documents on and across those boundaries, rows whose documents start
  // tiles later; one whole sequence (plain causal); grouped queries.
  compareDocumentsTensorCores<E>(shape(2, 130, 6, 3, 64, true),
                                 {{5, 60, 1, 64}, {130}});
  compareDocumentsTensorCores<E>(shape(2, 200, 4, 2, 128, true),
                                 {{1, 63, 64, 1, 71}, {100, 33, 1, 1, 65}});
}

TYPED_TEST(CudaTensorCores, OneDocumentIsNoPositions) {
  compareWholeDocumentsTensorCores<TypeParam>(shape(2, 130, 4, 2, 64, true));
  compareWholeDocumentsTensorCores<TypeParam>(shape(1, 100, 2, 1, 128, true));
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
