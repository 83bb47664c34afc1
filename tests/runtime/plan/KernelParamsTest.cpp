//===- KernelParamsTest.cpp - Typed attributes against the loader --------===//
//
// The decoders read the attributes the loader checks (runtime/plan/
// KernelChecks.cpp), under the names plan.proto's comments give; optional
// ones take their documented defaults.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/KernelParams.h"

#include <gtest/gtest.h>

namespace braid::plan {
namespace {

Instruction with(std::initializer_list<std::pair<const char *, int64_t>> ints,
                 std::initializer_list<std::pair<const char *, double>> floats = {}) {
  Instruction inst;
  for (auto [k, v] : ints)
    (*inst.mutable_int_attrs())[k] = v;
  for (auto [k, v] : floats)
    (*inst.mutable_float_attrs())[k] = v;
  return inst;
}

TEST(KernelParams, Linear) {
  EXPECT_FALSE(DecodeLinear(with({{"transpose_w", 0}})).transposeW);
  EXPECT_TRUE(DecodeLinear(with({{"transpose_w", 1}})).transposeW);
  // Row-parallel: the bias is added once over the ranks.
  EXPECT_EQ(DecodeLinear(with({{"transpose_w", 0}})).biasScale, 1.0);
  EXPECT_EQ(DecodeLinear(with({{"transpose_w", 0}}, {{"bias_scale", 0.25}}))
                .biasScale,
            0.25);
}

TEST(KernelParams, AttentionWholeAndSliced) {
  AttentionParams p = DecodeAttention(
      with({{"heads", 8}, {"kv_heads", 2}, {"causal", 1}, {"alibi", 0}},
           {{"scale", 0.125}}));
  EXPECT_EQ(p.heads, 8);
  EXPECT_EQ(p.kvHeads, 2);
  EXPECT_TRUE(p.causal);
  EXPECT_FALSE(p.alibi);
  EXPECT_EQ(p.scale, 0.125);
  EXPECT_FALSE(p.sliced);
  p = DecodeAttention(with({{"heads", 4},
                            {"kv_heads", 2},
                            {"causal", 0},
                            {"alibi", 1},
                            {"global_heads", 8},
                            {"global_kv_heads", 2},
                            {"head_offset_stride", 4},
                            {"kv_head_offset_stride", 0}},
                           {{"scale", 0.5}}));
  EXPECT_TRUE(p.sliced);
  EXPECT_TRUE(p.alibi);
  EXPECT_EQ(p.globalHeads, 8);
  EXPECT_EQ(p.globalKvHeads, 2);
  EXPECT_EQ(p.headOffsetStride, 4);
  EXPECT_EQ(p.kvHeadOffsetStride, 0);
}

TEST(KernelParams, Elementwise) {
  EXPECT_EQ(DecodeNorm(with({}, {{"eps", 1e-5}})).eps, 1e-5);
  RopeParams r = DecodeRope(with({{"head_dim", 16}}, {{"theta", 10000}}));
  EXPECT_EQ(r.headDim, 16);
  EXPECT_EQ(r.theta, 10000);
  EXPECT_TRUE(DecodeGelu(with({{"tanh", 1}})).tanh);
  EXPECT_FALSE(DecodeGelu(with({{"tanh", 0}})).tanh);
  DropoutParams d = DecodeDropout(with({{"rng_id", 7}}, {{"rate", 0.1}}));
  EXPECT_EQ(d.rate, 0.1);
  EXPECT_EQ(d.rngId, 7u);
  EXPECT_EQ(DecodeScale(with({}, {{"scale", -0.25}})).scale, -0.25);
  QkvParams q = DecodeQkv(
      with({{"heads", 4}, {"kv_heads", 2}, {"head_dim", 8}, {"per_head", 1}}));
  EXPECT_EQ(q.heads, 4);
  EXPECT_EQ(q.kvHeads, 2);
  EXPECT_EQ(q.headDim, 8);
  EXPECT_TRUE(q.perHead);
}

TEST(KernelParams, LossAndOptimizer) {
  EXPECT_EQ(DecodeCrossEntropy(with({{"ignore_index", -1}})).ignoreIndex, -1);
  // CROSS_ENTROPY_MAX has none; Hugging Face's default is the fallback.
  EXPECT_EQ(DecodeCrossEntropy(with({})).ignoreIndex, -100);
  GradNormParams g = DecodeGradNorm(with({{"split_inputs", 3}}, {{"max_norm", 1.0}}));
  EXPECT_EQ(g.maxNorm, 1.0);
  EXPECT_EQ(g.splitInputs, 3);
  EXPECT_EQ(g.replicatedCopies, 0); // absent: the group's size
  EXPECT_EQ(DecodeGradNorm(with({{"replicated_copies", 2}})).replicatedCopies, 2);
  AdamWParams a = DecodeAdamW(with(
      {}, {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}}));
  EXPECT_EQ(a.beta1, 0.9);
  EXPECT_EQ(a.beta2, 0.95);
  EXPECT_EQ(a.eps, 1e-8);
  EXPECT_EQ(a.weightDecay, 0.1);
}

TEST(KernelParams, CommunicationAndSlices) {
  CollectiveParams c = DecodeCollective(with({{"dim", 1}, {"async", 1}}));
  EXPECT_EQ(c.dim, 1);
  EXPECT_TRUE(c.async);
  EXPECT_FALSE(c.max);
  EXPECT_TRUE(DecodeCollective(with({{"max", 1}})).max);
  EXPECT_FALSE(DecodeCollective(with({})).async);
  EXPECT_EQ(DecodePeer(with({{"peer", -1}})), -1);
  Instruction sliced = with({{"vocab_start_stride", 256}});
  EXPECT_TRUE(HasSliceStride(sliced, "vocab_start_stride"));
  EXPECT_EQ(SliceStride(sliced, "vocab_start_stride"), 256);
  EXPECT_FALSE(HasSliceStride(sliced, "seq_start_stride"));
  EXPECT_EQ(SliceStride(sliced, "seq_start_stride"), 0);
}

} // namespace
} // namespace braid::plan
