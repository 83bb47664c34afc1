//===- InitTest.cpp - Seeded initial weights ------------------------------===//

#include "runtime/exec/Init.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace braid::exec;

namespace {

void moments(const std::vector<float> &v, double &mean, double &std) {
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
  }
  mean = s / v.size();
  std = std::sqrt(s2 / v.size() - mean * mean);
}

TEST(Init, NormalWeightsHaveTheConfiguredMoments) {
  const size_t n = 200000;
  std::vector<float> w(n);
  InitConfig c{42, 0.02, 12, true};
  ASSERT_TRUE(initParameter("transformer.h.0.mlp.c_fc.weight", 2, c, 0, n,
                            w.data()).ok());
  double mean, std;
  moments(w, mean, std);
  // The sample mean of n normals has standard error std/sqrt(n) ~ 4.5e-5;
  // the sample std has ~ std/sqrt(2n) ~ 3.2e-5: allow 5 standard errors.
  EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(double(n)));
  EXPECT_NEAR(std, 0.02, 5 * 0.02 / std::sqrt(2.0 * n));
  // Fourth moment of a normal is 3 std^4: a uniform would give 1.8.
  double m4 = 0;
  for (float x : w)
    m4 += std::pow(double(x), 4);
  EXPECT_NEAR(m4 / n / std::pow(std, 4), 3.0, 0.1);
}

TEST(Init, Gpt2ResidualProjectionsAreScaled) {
  InitConfig c{1, 0.02, 12, true};
  EXPECT_DOUBLE_EQ(initStd("transformer.h.3.attn.c_proj.weight", 2, c),
                   0.02 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(initStd("transformer.h.3.mlp.c_proj.weight", 2, c),
                   0.02 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(initStd("transformer.h.3.attn.c_attn.weight", 2, c), 0.02);
  c.scaledResidual = false; // LLaMA: plain normal everywhere
  EXPECT_DOUBLE_EQ(initStd("transformer.h.3.attn.c_proj.weight", 2, c), 0.02);
}

TEST(Init, NormsAreOneAndBiasesZero) {
  InitConfig c;
  std::vector<float> v(8, -5.0f);
  ASSERT_TRUE(initParameter("model.layers.0.input_layernorm.weight", 1, c, 0, 8,
                            v.data()).ok());
  for (float x : v)
    EXPECT_EQ(x, 1.0f);
  ASSERT_TRUE(initParameter("transformer.ln_f.weight", 1, c, 0, 8, v.data()).ok());
  for (float x : v)
    EXPECT_EQ(x, 1.0f);
  ASSERT_TRUE(initParameter("transformer.h.0.attn.c_attn.bias", 1, c, 0, 8,
                            v.data()).ok());
  for (float x : v)
    EXPECT_EQ(x, 0.0f);
}

TEST(Init, ValuesDependOnSeedAndNameButNotOnSharding) {
  InitConfig c{7, 0.02, 2, false};
  std::vector<float> whole(1000), a(1000), b(1000);
  ASSERT_TRUE(initParameter("w", 2, c, 0, 1000, whole.data()).ok());
  ASSERT_TRUE(initParameter("w", 2, c, 0, 1000, a.data()).ok());
  EXPECT_EQ(whole, a); // deterministic
  // Two shards at odd offsets reproduce the whole.
  std::vector<float> s1(333), s2(667);
  ASSERT_TRUE(initParameter("w", 2, c, 0, 333, s1.data()).ok());
  ASSERT_TRUE(initParameter("w", 2, c, 333, 667, s2.data()).ok());
  for (size_t i = 0; i < 333; ++i)
    EXPECT_EQ(s1[i], whole[i]);
  for (size_t i = 0; i < 667; ++i)
    EXPECT_EQ(s2[i], whole[333 + i]);
  ASSERT_TRUE(initParameter("v", 2, c, 0, 1000, b.data()).ok());
  EXPECT_NE(whole, b); // another parameter, another stream
  c.seed = 8;
  ASSERT_TRUE(initParameter("w", 2, c, 0, 1000, b.data()).ok());
  EXPECT_NE(whole, b); // another seed
}

TEST(Init, ALargeTensorSplitOverThreadsIsItsSlices) {
  // 3 Mi + 5 elements from an odd offset: split over the machine's cores
  // (1 Mi elements or more a thread), each value that of a slice small
  // enough for one thread, so the split changes nothing.
  InitConfig c{11, 0.02, 2, false};
  const uint64_t n = (uint64_t(3) << 20) + 5, offset = 7;
  std::vector<float> whole(n);
  ASSERT_TRUE(initParameter("big", 2, c, offset, n, whole.data()).ok());
  const uint64_t slice = 4099;
  std::vector<float> part(slice);
  for (uint64_t at = 0; at < n; at += slice) {
    const uint64_t len = std::min(slice, n - at);
    ASSERT_TRUE(
        initParameter("big", 2, c, offset + at, len, part.data()).ok());
    for (uint64_t i = 0; i < len; ++i)
      ASSERT_EQ(part[i], whole[at + i]) << "element " << at + i;
  }
}

// A fused gate_up_proj starts as gate_proj's rows over up_proj's, in any
// slice: the fused model starts from the weights of the model without.
TEST(Init, FusedMlpProjectionIsGateOverUp) {
  InitConfig c{7, 0.02, 2, false};
  const int64_t f = 6, h = 5, n = f * h;
  std::vector<float> gate(n), up(n), fused(2 * n);
  ASSERT_TRUE(initParameter("model.layers.1.mlp.gate_proj.weight", 2, c, 0, n,
                            gate.data()).ok());
  ASSERT_TRUE(initParameter("model.layers.1.mlp.up_proj.weight", 2, c, 0, n,
                            up.data()).ok());
  const std::vector<int64_t> shape = {2 * f, h};
  ASSERT_TRUE(initParameterOfShape("model.layers.1.mlp.gate_up_proj.weight",
                                   shape, c, 0, 2 * n, fused.data()).ok());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(fused[i], gate[i]);
    EXPECT_EQ(fused[n + i], up[i]);
  }
  // A slice across the boundary between the halves.
  std::vector<float> slice(9);
  ASSERT_TRUE(initParameterOfShape("model.layers.1.mlp.gate_up_proj.weight",
                                   shape, c, n - 4, 9, slice.data()).ok());
  for (int64_t i = 0; i < 9; ++i)
    EXPECT_EQ(slice[i], fused[n - 4 + i]);
  // Any other parameter is initParameter's.
  std::vector<float> other(n);
  ASSERT_TRUE(initParameterOfShape("model.layers.1.mlp.gate_proj.weight",
                                   {f, h}, c, 0, n, other.data()).ok());
  EXPECT_EQ(other, gate);
}

// LoRA's B starts at zero, wherever the slice: the adapted model starts as
// its base.
TEST(Init, LoraBIsZero) {
  InitConfig c{3, 0.02, 2, false};
  const std::vector<int64_t> shape = {64, 8}; // [out, r]
  std::vector<float> b(64 * 8, -5.0f);
  const char *name = "model.layers.0.self_attn.q_proj.lora_B.weight";
  ASSERT_TRUE(
      initParameterOfShape(name, shape, c, 0, b.size(), b.data()).ok());
  for (float x : b)
    EXPECT_EQ(x, 0.0f);
  std::vector<float> slice(7, -5.0f);
  ASSERT_TRUE(initParameterOfShape("transformer.h.1.attn.c_attn.lora_B.weight",
                                   shape, c, 101, 7, slice.data())
                  .ok());
  for (float x : slice)
    EXPECT_EQ(x, 0.0f);
}

// LoRA's A [r, in] is PEFT's kaiming_uniform_(a = sqrt(5)): uniform in
// [-1/sqrt(in), 1/sqrt(in)], whose mean is 0, variance bound^2 / 3 and
// fourth moment over the variance squared 9/5 (a normal's is 3).
TEST(Init, LoraAIsUniformWithinOneOverSqrtIn) {
  InitConfig c{42, 0.02, 2, false};
  const int64_t r = 64, in = 1024; // the bound depends on in, not on r
  const std::vector<int64_t> shape = {r, in};
  const size_t n = r * in;
  const double bound = 1.0 / std::sqrt(double(in)); // 1/32
  std::vector<float> a(n);
  const char *name = "model.layers.0.self_attn.v_proj.lora_A.weight";
  ASSERT_TRUE(initParameterOfShape(name, shape, c, 0, n, a.data()).ok());
  double lo = 0, hi = 0, s = 0, s2 = 0, s4 = 0;
  for (float x : a) {
    EXPECT_LE(std::fabs(x), float(bound));
    lo = std::min(lo, double(x));
    hi = std::max(hi, double(x));
    s += x;
    s2 += double(x) * x;
    s4 += std::pow(double(x), 4);
  }
  // Both ends of the interval are reached: the chance that none of n
  // uniforms falls within bound / 1000 of an end is (1 - 1/2000)^n, about
  // 6e-15 for n = 65536.
  EXPECT_LT(lo, -0.999 * bound);
  EXPECT_GT(hi, 0.999 * bound);
  const double mean = s / n, var = s2 / n - mean * mean;
  const double m4 = s4 / n;
  // Standard errors for n uniforms on [-b, b], whose moments are
  // E[x^2] = b^2/3, E[x^4] = b^4/5, E[x^6] = b^6/7, E[x^8] = b^8/9: the
  // mean's sqrt(b^2/3 / n) = b / sqrt(3n) (~7e-5 here); the second moment's
  // sqrt((b^4/5 - b^4/9) / n) = 0.298 b^2 / sqrt(n), relative to b^2/3
  // 0.894 / sqrt(n) (0.35%); the ratio m4 / m2^2's, by the delta method
  // (gradient 9, -10.8 in m4, m2 for b = 1; Var x^4 = 16/225, Var x^2 =
  // 4/45, Cov = 8/105), sqrt(1.317 / n) = 1.15 / sqrt(n) (0.45%). Allow 5
  // standard errors: a normal of the same variance would give 3 for the
  // ratio, a bound of 1/sqrt(r) a variance 16 times larger.
  EXPECT_NEAR(mean, 0.0, 5 * bound / std::sqrt(3.0 * n));
  EXPECT_NEAR(var / (bound * bound / 3), 1.0, 5 * 0.894 / std::sqrt(double(n)));
  EXPECT_NEAR(m4 / (var * var), 9.0 / 5.0, 5 * 1.15 / std::sqrt(double(n)));
}

// A's values depend on the seed and the name, not on how it is sliced.
TEST(Init, LoraAIsSeededAndSliceIndependent) {
  InitConfig c{7, 0.02, 2, false};
  const std::vector<int64_t> shape = {4, 250};
  const char *name = "model.layers.1.self_attn.q_proj.lora_A.weight";
  std::vector<float> whole(1000), again(1000), other(1000);
  ASSERT_TRUE(initParameterOfShape(name, shape, c, 0, 1000, whole.data()).ok());
  ASSERT_TRUE(initParameterOfShape(name, shape, c, 0, 1000, again.data()).ok());
  EXPECT_EQ(whole, again); // deterministic
  // Two pieces at an odd offset reproduce the whole.
  std::vector<float> s1(333), s2(667);
  ASSERT_TRUE(initParameterOfShape(name, shape, c, 0, 333, s1.data()).ok());
  ASSERT_TRUE(initParameterOfShape(name, shape, c, 333, 667, s2.data()).ok());
  for (size_t i = 0; i < 333; ++i)
    EXPECT_EQ(s1[i], whole[i]);
  for (size_t i = 0; i < 667; ++i)
    EXPECT_EQ(s2[i], whole[333 + i]);
  // Another layer's adapter of the same shape: another stream.
  const char *layer0 = "model.layers.0.self_attn.q_proj.lora_A.weight";
  ASSERT_TRUE(
      initParameterOfShape(layer0, shape, c, 0, 1000, other.data()).ok());
  EXPECT_NE(whole, other);
  c.seed = 8;
  ASSERT_TRUE(initParameterOfShape(name, shape, c, 0, 1000, other.data()).ok());
  EXPECT_NE(whole, other); // another seed
}

// A's bound needs its input width: a shape that is not [r, in >= 1] is
// refused, as is a slice with nowhere to go.
TEST(Init, LoraARefusesAShapeWithoutInputs) {
  InitConfig c{7, 0.02, 2, false};
  float x;
  EXPECT_FALSE(initParameterOfShape("q_proj.lora_A.weight", {8}, c, 0, 1, &x)
                   .ok());
  EXPECT_FALSE(initParameterOfShape("q_proj.lora_A.weight", {8, 0}, c, 0, 1, &x)
                   .ok());
  EXPECT_FALSE(initParameterOfShape("q_proj.lora_B.weight", {8, 2}, c, 0, 1,
                                    nullptr)
                   .ok());
}

// The adapters are the two matrices model-lora names, nothing else.
TEST(Init, IsLoraAdapterNamesTheAdapterMatrices) {
  EXPECT_TRUE(IsLoraAdapter("model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(IsLoraAdapter("transformer.h.3.attn.c_attn.lora_B.weight"));
  EXPECT_FALSE(IsLoraAdapter("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(IsLoraAdapter("model.layers.0.self_attn.q_proj.lora_A.bias"));
  EXPECT_FALSE(IsLoraAdapter("model.layers.0.self_attn.q_proj.lora_A"));
  EXPECT_FALSE(IsLoraAdapter("lora_A.weights"));
}

TEST(Init, RefusesBadConfigs) {
  float x;
  EXPECT_FALSE(initParameter("w", 2, InitConfig{0, 0.0, 1, false}, 0, 1, &x).ok());
  EXPECT_FALSE(initParameter("w", 2, InitConfig{0, 0.02, 0, false}, 0, 1, &x).ok());
  EXPECT_FALSE(initParameter("w", 2, InitConfig{}, 0, 1, nullptr).ok());
}

} // namespace

#include "runtime/plan/Shards.h"

namespace {

// A column-split weight and a fused [Q | K | V] bias, initialised slice by
// slice through their shard runs (as the trainer does on each rank): the
// slices hold exactly the whole tensor's values at their global places.
TEST(Init, ShardSlicesHoldTheWholeTensorsValues) {
  using namespace braid;
  InitConfig c{11, 0.02, 2, false};
  plan::Mesh mesh;
  mesh.add_axes("tp");
  mesh.add_sizes(4);
  struct Case {
    const char *name;
    std::vector<int64_t> local;
    int dim;
    std::vector<int64_t> blocks;
  };
  for (const Case &k : {Case{"w", {6, 5}, 1, {}},
                        Case{"transformer.h.0.attn.c_attn.weight", {3, 12}, 1, {16, 16, 16}}}) {
    plan::Buffer b;
    b.set_name(k.name);
    for (int64_t d : k.local)
      b.add_shape(d);
    b.mutable_shard()->set_axis("tp");
    b.mutable_shard()->set_dim(k.dim);
    for (int64_t x : k.blocks)
      b.mutable_shard()->add_blocks(x);
    int64_t local = 1, global = 1;
    for (int64_t d : k.local)
      local *= d;
    for (int64_t d : plan::GlobalShape(b, mesh))
      global *= d;
    std::vector<float> whole(global);
    ASSERT_TRUE(initParameter(k.name, 2, c, 0, global, whole.data()).ok());
    for (int64_t t = 0; t < 4; ++t) {
      std::vector<float> slice(local);
      for (const plan::ShardRun &r : plan::ShardRuns(b, mesh, t))
        ASSERT_TRUE(initParameter(k.name, 2, c, r.global, r.length,
                                  slice.data() + r.local)
                        .ok());
      for (const plan::ShardRun &r : plan::ShardRuns(b, mesh, t))
        for (int64_t i = 0; i < r.length; ++i)
          ASSERT_EQ(slice[r.local + i], whole[r.global + i]) << k.name << " rank " << t;
    }
  }
}

} // namespace
