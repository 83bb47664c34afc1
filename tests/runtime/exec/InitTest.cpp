//===- InitTest.cpp - Seeded initial weights ------------------------------===//

#include "runtime/exec/Init.h"

#include "gtest/gtest.h"

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
