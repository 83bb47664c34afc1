//===- OptimizerTest.cpp - AdamW, clipping and lr schedule ----------------===//
//
// AdamW against a scalar reference written here from the formula of
// torch.optim.AdamW (not from the kernel's factored form), and against
// values derived by hand at step 1 where bias correction makes the update
// exactly lr·g/(|g| + eps). The clip coefficient and the lr schedule are
// checked at hand-computed points; each expected number's derivation is in
// the comment next to it.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Optimizer.h"

#include "gtest/gtest.h"

#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace braid::cpu;

namespace {

template <typename T>
std::vector<T> randomVec(size_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T &x : v)
    x = static_cast<T>(dist(gen));
  return v;
}

/// One AdamW step of one scalar, written as the formula reads:
///   p ← p − lr·wd·p; m ← β1 m + (1−β1) g; v ← β2 v + (1−β2) g²;
///   m̂ = m / (1−β1^t); v̂ = v / (1−β2^t); p ← p − lr·m̂ / (√v̂ + eps).
void referenceAdamW(double &p, double &m, double &v, double g, double lr,
                    double b1, double b2, double eps, double wd, int t) {
  p = p - lr * wd * p;
  m = b1 * m + (1 - b1) * g;
  v = b2 * v + (1 - b2) * g * g;
  double mHat = m / (1 - std::pow(b1, t));
  double vHat = v / (1 - std::pow(b2, t));
  p = p - lr * mHat / (std::sqrt(vHat) + eps);
}

// The lr of each step in the multi-step tests: varies like a schedule so a
// kernel that cached it would be caught.
double lrOfStep(int t) { return 1e-3 * (1.0 + 0.1 * t); }

//===-- AdamW: step 1 by hand ---------------------------------------------===//

TEST(AdamW, FirstStepIsSignOfGradientTimesLr) {
  // At t = 1 from m = v = 0: m = (1−β1) g, v = (1−β2) g², so m̂ = g and
  // v̂ = g² exactly (the bias correction divides the (1−β) back out), and
  // Δp = −lr · g / (|g| + eps), whatever β1 and β2 are. Without bias
  // correction it would be −lr·0.1g/(0.0316|g| + eps) ≈ −3.16·lr·sign(g).
  // With lr = 1e-3, eps = 1e-8, wd = 0:
  //   g =  0.5: Δp = −1e-3 · 0.5 / 0.50000001 = −9.99999980e-4
  //   g = −3.0: Δp = +1e-3 · 3.0 / 3.00000001 = +9.99999997e-4
  //   g =  0  : m = v = 0, Δp = −lr · 0 / (0 + eps) = 0
  AdamWConfig c;
  c.weightDecay = 0.0;
  std::vector<double> p = {1.0, 1.0, 1.0}, g = {0.5, -3.0, 0.0};
  std::vector<double> m(3, 0.0), v(3, 0.0);
  ASSERT_TRUE(
      adamwStep(p.data(), g.data(), m.data(), v.data(), 3, c, 1e-3, 1, 1.0)
          .ok());
  EXPECT_NEAR(p[0], 1.0 - 1e-3 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(p[1], 1.0 + 1e-3 * 3.0 / (3.0 + 1e-8), 1e-15);
  EXPECT_EQ(p[2], 1.0);
  EXPECT_NEAR(p[0], 1.0 - 9.99999980e-4, 1e-12);
  EXPECT_NEAR(p[1], 1.0 + 9.99999997e-4, 1e-12);
  // The moments are stored uncorrected.
  EXPECT_NEAR(m[0], 0.1 * 0.5, 1e-16);
  EXPECT_NEAR(v[1], 0.001 * 9.0, 1e-16);
}

TEST(AdamW, FirstStepWithLargeEpsAndGradScale) {
  // eps large enough to see: g_raw = 2, gradScale = 0.25 → g = 0.5, eps = 0.1,
  // lr = 1e-2: Δp = −1e-2 · 0.5 / (0.5 + 0.1) = −8.3333...e-3.
  AdamWConfig c;
  c.eps = 0.1;
  c.weightDecay = 0.0;
  double p = 1.0, g = 2.0, m = 0.0, v = 0.0;
  ASSERT_TRUE(adamwStep(&p, &g, &m, &v, 1, c, 1e-2, 1, 0.25).ok());
  EXPECT_NEAR(p, 1.0 - 1e-2 / 1.2, 1e-15);
  EXPECT_NEAR(m, 0.1 * 0.5, 1e-16); // the scaled gradient enters the moments
}

TEST(AdamW, FirstStepWeightDecayIsDecoupled) {
  // p0 = 2, g = 0.5, lr = 1e-2, wd = 0.1, eps = 1e-8:
  //   decay:  2 − 1e-2·0.1·2 = 2·(1 − 1e-3) = 1.998
  //   Adam:   −1e-2 · 0.5 / (0.5 + 1e-8) = −9.9999998e-3
  //   p1 = 1.998 − 0.0099999998 = 1.9880000002
  // A parameter with g = 0 only decays: 2 · (1 − 1e-3) = 1.998 (the decay
  // does not go through m and v, which stay 0 — that is "decoupled").
  AdamWConfig c;
  c.weightDecay = 0.1;
  std::vector<double> p = {2.0, 2.0}, g = {0.5, 0.0}, m(2, 0.0), v(2, 0.0);
  ASSERT_TRUE(
      adamwStep(p.data(), g.data(), m.data(), v.data(), 2, c, 1e-2, 1, 1.0)
          .ok());
  EXPECT_NEAR(p[0], 1.9880000002, 1e-12);
  EXPECT_NEAR(p[1], 1.998, 1e-15);
  EXPECT_EQ(m[1], 0.0);
  EXPECT_EQ(v[1], 0.0);
}

//===-- AdamW: several steps against the reference ------------------------===//

TEST(AdamW, MatchesReferenceOverSteps) {
  const int64_t n = 257;
  const int steps = 6;
  for (double wd : {0.0, 0.1}) {
    AdamWConfig c;
    c.beta1 = 0.9;
    c.beta2 = 0.95;
    c.eps = 1e-8;
    c.weightDecay = wd;
    const double gradScale = 0.7;
    std::vector<double> p = randomVec<double>(n, 1, -1, 1), m(n, 0.0),
                        v(n, 0.0);
    std::vector<double> rp = p, rm = m, rv = v;
    for (int t = 1; t <= steps; ++t) {
      std::vector<double> g = randomVec<double>(n, 100 + t, -2, 2);
      ASSERT_TRUE(adamwStep(p.data(), g.data(), m.data(), v.data(), n, c,
                            lrOfStep(t), t, gradScale)
                      .ok());
      for (int64_t i = 0; i < n; ++i)
        referenceAdamW(rp[i], rm[i], rv[i], g[i] * gradScale, lrOfStep(t),
                       c.beta1, c.beta2, c.eps, wd, t);
    }
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(p[i], rp[i], 1e-14) << "wd " << wd << " element " << i;
      EXPECT_NEAR(m[i], rm[i], 1e-15) << "wd " << wd << " element " << i;
      EXPECT_NEAR(v[i], rv[i], 1e-15) << "wd " << wd << " element " << i;
    }
  }
}

TEST(AdamW, FloatAgreesWithDouble) {
  const int64_t n = 1000;
  AdamWConfig c;
  c.weightDecay = 0.05;
  std::vector<double> pd = randomVec<double>(n, 7, -1, 1), md(n, 0.0),
                      vd(n, 0.0);
  std::vector<float> pf(pd.begin(), pd.end()), mf(n, 0.0f), vf(n, 0.0f);
  for (int t = 1; t <= 10; ++t) {
    std::vector<double> gd = randomVec<double>(n, 200 + t, -1, 1);
    std::vector<float> gf(gd.begin(), gd.end());
    ASSERT_TRUE(adamwStep(pd.data(), gd.data(), md.data(), vd.data(), n, c,
                          lrOfStep(t), t, 1.0)
                    .ok());
    ASSERT_TRUE(adamwStep(pf.data(), gf.data(), mf.data(), vf.data(), n, c,
                          lrOfStep(t), t, 1.0)
                    .ok());
  }
  // Parameters of magnitude <= ~1 moved by ~1e-2 in total; the float state
  // is rounded once per step (~6e-8 relative), so 1e-6 absolute is float
  // precision with margin, and far below one step's movement (~1e-3).
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(pf[i], pd[i], 1e-6) << i;
    EXPECT_NEAR(mf[i], md[i], 1e-7) << i;
    EXPECT_NEAR(vf[i], vd[i], 1e-8) << i;
  }
}

// The element loop runs as whichever clone the CPU picks (AVX-512, AVX2 or
// the baseline: Optimizer.cpp), over enough elements for its vector path and
// a tail. Each clone must give the bits of the update computed one element
// at a time in double, in the documented order (decay first; step size
// lr / (1 - beta1^t); denominator sqrt(v) / sqrt(1 - beta2^t) + eps), as
// this test does with plain scalar code. In double, whose results no
// rounding to float hides.
TEST(AdamW, VectorisedLoopGivesTheScalarBits) {
  const int64_t n = 1003;
  AdamWConfig c;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.weightDecay = 0.1;
  const double lr = 3e-3, gradScale = 0.5;
  std::vector<double> p = randomVec<double>(n, 3, -1, 1),
                      m = randomVec<double>(n, 4, -0.1, 0.1),
                      v = randomVec<double>(n, 5, 0, 0.01);
  const std::vector<double> g = randomVec<double>(n, 6, -2, 2);
  std::vector<double> wantP = p, wantM = m, wantV = v;
  const int t = 3;
  const double decay = 1.0 - lr * c.weightDecay;
  const double stepSize = lr / (1.0 - std::pow(c.beta1, double(t)));
  const double invSqrtBc2 = 1.0 / std::sqrt(1.0 - std::pow(c.beta2, double(t)));
  for (int64_t i = 0; i < n; ++i) {
    double gi = double(g[i]) * gradScale;
    double mi = c.beta1 * double(wantM[i]) + (1.0 - c.beta1) * gi;
    double vi = c.beta2 * double(wantV[i]) + (1.0 - c.beta2) * gi * gi;
    wantM[i] = mi;
    wantV[i] = vi;
    double pi = double(wantP[i]) * decay;
    double step = stepSize * mi;
    double denom = std::sqrt(vi) * invSqrtBc2 + c.eps;
    wantP[i] = pi - step / denom;
  }
  ASSERT_TRUE(
      adamwStep(p.data(), g.data(), m.data(), v.data(), n, c, lr, t, gradScale)
          .ok());
  EXPECT_EQ(p, wantP);
  EXPECT_EQ(m, wantM);
  EXPECT_EQ(v, wantV);
}

TEST(AdamW, MultiTensorEqualsPerTensor) {
  AdamWConfig c;
  c.weightDecay = 123.0; // ignored by the multi-tensor call
  const std::vector<int64_t> sizes = {5, 64, 1, 0};
  const std::vector<double> decays = {0.1, 0.0, 0.01, 0.1};
  std::vector<std::vector<float>> p1, g, m1, v1;
  for (size_t k = 0; k < sizes.size(); ++k) {
    p1.push_back(randomVec<float>(sizes[k], 10 + k, -1, 1));
    m1.emplace_back(sizes[k], 0.0f);
    v1.emplace_back(sizes[k], 0.0f);
  }
  auto p2 = p1, m2 = m1, v2 = v1;
  for (int t = 1; t <= 3; ++t) {
    g.clear();
    for (size_t k = 0; k < sizes.size(); ++k)
      g.push_back(randomVec<float>(sizes[k], 50 * t + k, -1, 1));
    std::vector<AdamWTensor<float>> list;
    for (size_t k = 0; k < sizes.size(); ++k) {
      list.push_back({p1[k].data(), g[k].data(), m1[k].data(), v1[k].data(),
                      sizes[k], decays[k]});
      AdamWConfig one = c;
      one.weightDecay = decays[k];
      ASSERT_TRUE(adamwStep(p2[k].data(), g[k].data(), m2[k].data(),
                            v2[k].data(), sizes[k], one, lrOfStep(t), t, 0.5)
                      .ok());
    }
    ASSERT_TRUE(adamwStepMulti<float>(list, c, lrOfStep(t), t, 0.5).ok());
  }
  // The same code on the same inputs: bit-identical, not merely close.
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_EQ(p1[k], p2[k]) << "tensor " << k;
    EXPECT_EQ(m1[k], m2[k]) << "tensor " << k;
    EXPECT_EQ(v1[k], v2[k]) << "tensor " << k;
  }
}

TEST(AdamW, MultiTensorErrorLeavesEverythingUntouched) {
  AdamWConfig c;
  std::vector<double> p0 = {1.0, 2.0}, g0 = {0.5, 0.5}, m0(2, 0.0), v0(2, 0.0);
  std::vector<double> p1 = {3.0}, m1(1, 0.0), v1(1, 0.0);
  // The second entry has no gradient: the first must not be updated either.
  std::vector<AdamWTensor<double>> list = {
      {p0.data(), g0.data(), m0.data(), v0.data(), 2, 0.1},
      {p1.data(), nullptr, m1.data(), v1.data(), 1, 0.1}};
  absl::Status s = adamwStepMulti<double>(list, c, 1e-3, 1, 1.0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 1"), absl::string_view::npos)
      << s.message();
  EXPECT_EQ(p0, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(m0, (std::vector<double>{0.0, 0.0}));
  // A negative per-tensor decay is refused the same way.
  list[1].grad = g0.data();
  list[1].weightDecay = -0.1;
  s = adamwStepMulti<double>(list, c, 1e-3, 1, 1.0);
  EXPECT_NE(s.message().find("weight_decay is -0.1"), absl::string_view::npos)
      << s.message();
  EXPECT_EQ(p0, (std::vector<double>{1.0, 2.0}));
}

TEST(AdamW, RejectsInvalidArguments) {
  AdamWConfig c;
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  auto step = [&](const AdamWConfig &cfg, double lr, int64_t t, double scale) {
    return adamwStep(&p, &g, &m, &v, 1, cfg, lr, t, scale);
  };
  auto expectError = [&](absl::Status s, absl::string_view needle) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << needle;
    EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s.message();
  };
  // Step 0 would divide by 1 − β^0 = 0.
  expectError(step(c, 1e-3, 0, 1.0), "step is 0, expected >= 1");
  // The clip scale of a NaN gradient norm must not reach the parameters.
  expectError(step(c, 1e-3, 1, std::nan("")), "grad_scale is nan");
  expectError(step(c, 1e-3, 1, std::numeric_limits<double>::infinity()),
              "grad_scale is inf");
  expectError(step(c, -1e-3, 1, 1.0), "lr is -0.001");
  AdamWConfig bad = c;
  bad.beta1 = 1.0;
  expectError(step(bad, 1e-3, 1, 1.0), "adam_beta1 is 1, expected [0, 1)");
  bad = c;
  bad.beta2 = std::nan("");
  expectError(step(bad, 1e-3, 1, 1.0), "adam_beta2 is nan");
  bad = c;
  bad.eps = 0.0;
  expectError(step(bad, 1e-3, 1, 1.0), "adam_eps is 0");
  bad = c;
  bad.weightDecay = -1.0;
  expectError(step(bad, 1e-3, 1, 1.0), "weight_decay is -1");
  expectError(adamwStep<float>(&p, nullptr, &m, &v, 1, c, 1e-3, 1, 1.0),
              "grad null");
  expectError(adamwStep<float>(&p, &g, &m, &v, -1, c, 1e-3, 1, 1.0), "n is -1");
  // None of the refused calls wrote anything.
  EXPECT_EQ(p, 1.0f);
  EXPECT_EQ(m, 0.0f);
  EXPECT_EQ(v, 0.0f);
  // Null buffers are fine for an empty tensor.
  EXPECT_TRUE(
      adamwStep<float>(nullptr, nullptr, nullptr, nullptr, 0, c, 1e-3, 1, 1.0)
          .ok());
}

//===-- Gradient norm -----------------------------------------------------===//

TEST(GradNorm, HandComputed) {
  // {3, 4} and {12}: sqrt(9 + 16 + 144) = sqrt(169) = 13.
  std::vector<double> a = {3.0, 4.0}, b = {12.0};
  std::vector<GradView<double>> grads = {{a.data(), 2}, {b.data(), 1}};
  EXPECT_EQ(*gradSumOfSquares<double>(grads), 169.0);
  EXPECT_EQ(*globalGradNorm<double>(grads), 13.0);
  std::vector<float> af = {3.0f, 4.0f}, bf = {12.0f};
  std::vector<GradView<float>> gradsF = {{af.data(), 2}, {bf.data(), 1}};
  EXPECT_EQ(*globalGradNorm<float>(gradsF), 13.0);
  // No elements: norm 0 (an empty list and an empty tensor alike).
  EXPECT_EQ(*globalGradNorm<float>({}), 0.0);
  std::vector<GradView<float>> empty = {{nullptr, 0}};
  EXPECT_EQ(*globalGradNorm<float>(empty), 0.0);
}

TEST(Optimizer, SameBitsOnOneAndFourThreads) {
  // AdamW's element blocks and the norm's block sums on the threads: the
  // same bits whatever their number, on enough elements to go parallel (and
  // a partial last block).
  const int64_t n = 300007;
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> p0(n), g(n), m0(n), v0(n);
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = dist(gen);
    g[i] = dist(gen);
    m0[i] = 0.1f * dist(gen);
    v0[i] = 0.01f * std::fabs(dist(gen));
  }
  auto run = [&](int threads, std::vector<float> &p, std::vector<float> &m,
                 std::vector<float> &v, double &norm) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    p = p0;
    m = m0;
    v = v0;
    std::vector<GradView<float>> grads = {{g.data(), n}};
    norm = *globalGradNorm<float>(grads);
    ASSERT_TRUE(adamwStep(p.data(), g.data(), m.data(), v.data(), n,
                          AdamWConfig{}, 1e-3, 3, 0.5)
                    .ok());
    omp_set_num_threads(saved);
  };
  std::vector<float> p1, m1, v1, p4, m4, v4;
  double norm1 = 0, norm4 = 0;
  run(1, p1, m1, v1, norm1);
  run(4, p4, m4, v4, norm4);
  EXPECT_EQ(norm1, norm4);
  EXPECT_EQ(p1, p4);
  EXPECT_EQ(m1, m4);
  EXPECT_EQ(v1, v4);
  // The norm against a plain sum in long double.
  long double ref = 0;
  for (float x : g)
    ref += (long double)x * x;
  EXPECT_NEAR(norm1, std::sqrt(double(ref)), 1e-12 * std::sqrt(double(ref)));
}

TEST(GradNorm, AccumulatesInDouble) {
  // 2^24 + 1 elements of 1.0f: a float accumulator stops at 2^24 = 16777216
  // (adding 1 no longer changes it); the double sum is exact.
  const int64_t n = (int64_t{1} << 24) + 1;
  std::vector<float> ones(n, 1.0f);
  std::vector<GradView<float>> grads = {{ones.data(), n}};
  EXPECT_EQ(*gradSumOfSquares<float>(grads), 16777217.0);
}

TEST(GradNorm, SplitIntoShardsGivesTheSameNorm) {
  // What a tensor-parallel run computes: per-rank sums of squares, reduced,
  // then the square root.
  std::vector<double> g = randomVec<double>(100, 3, -1, 1);
  std::vector<GradView<double>> whole = {{g.data(), 100}};
  std::vector<GradView<double>> shard0 = {{g.data(), 37}},
                                shard1 = {{g.data() + 37, 63}};
  double reduced =
      *gradSumOfSquares<double>(shard0) + *gradSumOfSquares<double>(shard1);
  EXPECT_NEAR(std::sqrt(reduced), *globalGradNorm<double>(whole), 1e-14);
}

TEST(GradNorm, NonFiniteGradientIsReportedAndBlocksTheStep) {
  std::vector<float> a = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  std::vector<GradView<float>> grads = {{a.data(), 3}};
  double norm = *globalGradNorm<float>(grads);
  EXPECT_TRUE(std::isnan(norm));
  absl::StatusOr<GradClip> clip = computeGradClip(norm, 1.0);
  ASSERT_TRUE(clip.ok()) << clip.status(); // not a usage error: a skipped step
  EXPECT_FALSE(clip->finite);
  EXPECT_TRUE(std::isnan(clip->scale));
  // A loop that forgot to look at the flag gets an error, not NaN weights.
  std::vector<float> p = {1.0f, 1.0f, 1.0f}, m(3, 0.0f), v(3, 0.0f);
  absl::Status s = adamwStep(p.data(), a.data(), m.data(), v.data(), 3,
                             AdamWConfig{}, 1e-3, 1, clip->scale);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(p, (std::vector<float>{1.0f, 1.0f, 1.0f}));

  std::vector<float> b = {std::numeric_limits<float>::infinity(), 0.0f};
  std::vector<GradView<float>> gradsInf = {{b.data(), 2}};
  double normInf = *globalGradNorm<float>(gradsInf);
  EXPECT_TRUE(std::isinf(normInf));
  EXPECT_FALSE(computeGradClip(normInf, 0.0)->finite); // even without clipping
}

TEST(GradNorm, RejectsBadViews) {
  std::vector<GradView<float>> nullData = {{nullptr, 4}};
  EXPECT_EQ(globalGradNorm<float>(nullData).status().code(),
            absl::StatusCode::kInvalidArgument);
  float x = 1.0f;
  std::vector<GradView<float>> negative = {{&x, 1}, {&x, -1}};
  absl::StatusOr<double> r = globalGradNorm<float>(negative);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gradient 1: n is -1"),
            absl::string_view::npos)
      << r.status();
}

//===-- Clip coefficient --------------------------------------------------===//

TEST(GradClip, BelowThresholdIsNotClipped) {
  // norm 0.5, max 1: coef = 1 / 0.500001 ≈ 2 ≥ 1 → scale 1.
  GradClip c = *computeGradClip(0.5, 1.0);
  EXPECT_EQ(c.norm, 0.5);
  EXPECT_EQ(c.scale, 1.0);
  EXPECT_FALSE(c.clipped);
  EXPECT_TRUE(c.finite);
  // A zero gradient: coef = 1 / 1e-6, no division by zero.
  EXPECT_EQ(computeGradClip(0.0, 1.0)->scale, 1.0);
}

TEST(GradClip, AboveThresholdScalesToMaxNorm) {
  // norm 13, max 1: scale = 1 / (13 + 1e-6) = 0.07692307100591...
  GradClip c = *computeGradClip(13.0, 1.0);
  EXPECT_TRUE(c.clipped);
  EXPECT_DOUBLE_EQ(c.scale, 1.0 / (13.0 + 1e-6));
  EXPECT_NEAR(c.scale, 0.0769230710059, 1e-12);
  // The clipped gradient's norm is max·norm/(norm + 1e-6), just under max.
  EXPECT_NEAR(c.norm * c.scale, 1.0, 1e-7);
  EXPECT_LT(c.norm * c.scale, 1.0);
}

TEST(GradClip, NormEqualToMaxIsClippedByTheEpsilon) {
  // coef = 1 / (1 + 1e-6) < 1, so PyTorch and Megatron scale it, slightly.
  GradClip c = *computeGradClip(1.0, 1.0);
  EXPECT_TRUE(c.clipped);
  EXPECT_DOUBLE_EQ(c.scale, 1.0 / (1.0 + 1e-6));
}

TEST(GradClip, ZeroMaxNormDisablesClipping) {
  GradClip c = *computeGradClip(1e6, 0.0);
  EXPECT_EQ(c.scale, 1.0);
  EXPECT_FALSE(c.clipped);
  EXPECT_TRUE(c.finite);
}

TEST(GradClip, PreScaleActsBeforeTheClip) {
  // Gradients summed over 2 micro-batches: raw norm 26, preScale 0.5, so
  // the true gradient's norm is 13; max 1 → scale = 0.5 / (13 + 1e-6).
  GradClip c = *computeGradClip(26.0, 1.0, 0.5);
  EXPECT_EQ(c.norm, 13.0);
  EXPECT_DOUBLE_EQ(c.scale, 0.5 / (13.0 + 1e-6));
  // Below the threshold only the pre-scale remains: raw 1, true 0.5.
  EXPECT_EQ(computeGradClip(1.0, 1.0, 0.5)->scale, 0.5);
}

TEST(GradClip, RejectsBadArguments) {
  EXPECT_NE(
      computeGradClip(1.0, -1.0).status().message().find("clip_grad is -1"),
      absl::string_view::npos);
  EXPECT_FALSE(computeGradClip(-1.0, 1.0).ok());
  EXPECT_FALSE(computeGradClip(1.0, std::nan("")).ok());
  EXPECT_FALSE(computeGradClip(1.0, 1.0, 0.0).ok());
  EXPECT_FALSE(computeGradClip(1.0, 1.0, -2.0).ok());
}

//===-- Learning-rate schedule --------------------------------------------===//

// lr 1e-3, min_lr 1e-4, warmup 10, decay 100, the example of every test
// below: (lr − min_lr) = 9e-4 and the decay phase is 100 − 10 = 90 steps.
LrSchedule makeSchedule(LrDecayStyle style, double initLr = 0.0) {
  LrScheduleConfig c;
  c.lr = 1e-3;
  c.minLr = 1e-4;
  c.initLr = initLr;
  c.warmupSteps = 10;
  c.decaySteps = 100;
  c.style = style;
  absl::StatusOr<LrSchedule> s = LrSchedule::create(c);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

constexpr double kLrTol = 1e-18; // values are ~1e-4..1e-3; 1e-18 is ~1e-14 rel

TEST(LrSchedule, WarmupIsTheSameForEveryStyle) {
  for (LrDecayStyle style : {LrDecayStyle::kConstant, LrDecayStyle::kLinear,
                             LrDecayStyle::kCosine}) {
    LrSchedule s = makeSchedule(style);
    // lr(s) = 1e-3 · s / 10 for s <= 10.
    EXPECT_EQ(s.lrAt(0), 0.0);            // init_lr
    EXPECT_NEAR(s.lrAt(1), 1e-4, kLrTol); // 1e-3 · 1/10
    EXPECT_NEAR(s.lrAt(5), 5e-4, kLrTol); // 1e-3 · 5/10
    EXPECT_EQ(s.lrAt(10), 1e-3);          // 1e-3 · 10/10, the peak
  }
}

TEST(LrSchedule, WarmupFromInitLr) {
  // init_lr 1e-5: lr(5) = 1e-5 + (1e-3 − 1e-5) · 5/10 = 1e-5 + 4.95e-4
  // = 5.05e-4.
  LrSchedule s = makeSchedule(LrDecayStyle::kCosine, 1e-5);
  EXPECT_EQ(s.lrAt(0), 1e-5);
  EXPECT_NEAR(s.lrAt(5), 5.05e-4, kLrTol);
  EXPECT_EQ(s.lrAt(10), 1e-3);
}

TEST(LrSchedule, Constant) {
  LrSchedule s = makeSchedule(LrDecayStyle::kConstant);
  // After warmup: lr, even past decay_steps (min_lr is unused).
  EXPECT_EQ(s.lrAt(11), 1e-3);
  EXPECT_EQ(s.lrAt(55), 1e-3);
  EXPECT_EQ(s.lrAt(200), 1e-3);
}

TEST(LrSchedule, Linear) {
  LrSchedule s = makeSchedule(LrDecayStyle::kLinear);
  // s = 28: r = 18/90 = 0.2, lr = 1e-4 + 9e-4 · 0.8 = 8.2e-4.
  EXPECT_NEAR(s.lrAt(28), 8.2e-4, kLrTol);
  // s = 55: r = 45/90 = 0.5, lr = 1e-4 + 9e-4 · 0.5 = 5.5e-4.
  EXPECT_NEAR(s.lrAt(55), 5.5e-4, kLrTol);
  // s = 100: r = 1, lr = min_lr; after: min_lr.
  EXPECT_NEAR(s.lrAt(100), 1e-4, kLrTol);
  EXPECT_EQ(s.lrAt(101), 1e-4);
  EXPECT_EQ(s.lrAt(200), 1e-4);
}

TEST(LrSchedule, Cosine) {
  LrSchedule s = makeSchedule(LrDecayStyle::kCosine);
  // s = 55: r = 0.5, lr = 1e-4 + 9e-4 · 0.5 · (1 + cos(π/2)) = 1e-4 + 4.5e-4
  // = 5.5e-4 (cos(π/2) is 6e-17 in double, far below the tolerance).
  EXPECT_NEAR(s.lrAt(55), 5.5e-4, kLrTol);
  // s = 28: r = 0.2, cos(π/5) = (1 + √5)/4 = 0.80901699437494742, so
  // coeff = 0.5 · (1 + cos(π/5)) = (5 + √5)/8 = 0.90450849718747371 and
  // lr = 1e-4 + 9e-4 · 0.90450849718747371 = 9.1405764746872634e-4.
  EXPECT_NEAR(s.lrAt(28), 1e-4 + 9e-4 * (5.0 + std::sqrt(5.0)) / 8.0, kLrTol);
  EXPECT_NEAR(s.lrAt(28), 9.1405764746872634e-4, kLrTol);
  // s = 11, one step into decay: r = 1/90, coeff = 0.5 · (1 + cos(π/90))
  // = 0.99969541350954794 → lr = 1e-4 + 9e-4 · 0.99969541... ≈ 9.99726e-4,
  // just under the peak.
  EXPECT_NEAR(s.lrAt(11), 1e-4 + 9e-4 * 0.99969541350954794, kLrTol);
  // s = 100: r = 1, cos(π) = −1, lr = min_lr exactly; after: min_lr.
  EXPECT_NEAR(s.lrAt(100), 1e-4, kLrTol);
  EXPECT_EQ(s.lrAt(101), 1e-4);
  EXPECT_EQ(s.lrAt(200), 1e-4);
}

TEST(LrSchedule, MegatronUpdateNumbering) {
  // Megatron calls scheduler.step(0) at construction and scheduler.step(1)
  // after each successful optimizer.step(), so update t runs at lrAt(t − 1):
  // update 1 at init_lr = 0, update 6 at lrAt(5) = 5e-4, update 11 is the
  // first at the peak.
  LrSchedule s = makeSchedule(LrDecayStyle::kCosine);
  EXPECT_EQ(s.lrForUpdate(1), 0.0);
  EXPECT_NEAR(s.lrForUpdate(6), 5e-4, kLrTol);
  EXPECT_EQ(s.lrForUpdate(11), 1e-3);
  EXPECT_NEAR(s.lrForUpdate(56), 5.5e-4, kLrTol);
  EXPECT_EQ(s.lrAt(-3), s.lrAt(0)); // negative counts read as 0
}

TEST(LrSchedule, NoWarmup) {
  LrScheduleConfig c;
  c.lr = 1e-3;
  c.minLr = 0.0;
  c.warmupSteps = 0;
  c.decaySteps = 4;
  c.style = LrDecayStyle::kLinear;
  LrSchedule s = *LrSchedule::create(c);
  // r = s/4: 1e-3 · (1 − s/4).
  EXPECT_EQ(s.lrAt(0), 1e-3);
  EXPECT_NEAR(s.lrAt(1), 7.5e-4, kLrTol);
  EXPECT_EQ(s.lrAt(4), 0.0);
  EXPECT_EQ(s.lrAt(5), 0.0);
}

TEST(LrSchedule, WarmupEqualToDecayDropsToMinAfterWarmup) {
  LrScheduleConfig c;
  c.lr = 1e-3;
  c.minLr = 1e-4;
  c.warmupSteps = 10;
  c.decaySteps = 10;
  c.style = LrDecayStyle::kCosine;
  LrSchedule s = *LrSchedule::create(c);
  EXPECT_EQ(s.lrAt(10), 1e-3);
  EXPECT_EQ(s.lrAt(11), 1e-4);
}

TEST(LrSchedule, StyleNames) {
  EXPECT_EQ(*parseLrDecayStyle("constant"), LrDecayStyle::kConstant);
  EXPECT_EQ(*parseLrDecayStyle("linear"), LrDecayStyle::kLinear);
  EXPECT_EQ(*parseLrDecayStyle("cosine"), LrDecayStyle::kCosine);
  EXPECT_EQ(lrDecayStyleName(LrDecayStyle::kCosine), "cosine");
  absl::StatusOr<LrDecayStyle> bad = parseLrDecayStyle("WSD");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "lr_decay is \"WSD\", expected one of constant, linear, cosine");
}

TEST(LrSchedule, ConfigErrors) {
  auto base = [] {
    LrScheduleConfig c;
    c.lr = 1e-3;
    c.minLr = 1e-4;
    c.warmupSteps = 10;
    c.decaySteps = 100;
    c.style = LrDecayStyle::kCosine;
    return c;
  };
  auto expectError = [](const LrScheduleConfig &c, absl::string_view message) {
    absl::StatusOr<LrSchedule> s = LrSchedule::create(c);
    ASSERT_FALSE(s.ok()) << message;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.status().message(), message);
  };
  LrScheduleConfig c = base();
  c.minLr = 2e-3;
  expectError(c, "min_lr is 0.002, expected <= lr (0.001)");
  c = base();
  c.minLr = -1e-4;
  expectError(c, "min_lr is -0.0001, expected a finite value >= 0");
  c = base();
  c.lr = std::nan("");
  expectError(c, "lr is nan, expected a finite value >= 0");
  c = base();
  c.initLr = 2e-3;
  expectError(c, "init_lr is 0.002, expected in [0, lr (0.001)]");
  c = base();
  c.warmupSteps = -1;
  expectError(c, "warmup_steps is -1, expected >= 0");
  c = base();
  c.warmupSteps = 101;
  expectError(c, "warmup_steps is 101, expected <= decay_steps (100)");
  c = base();
  c.decaySteps = 0;
  c.warmupSteps = 0;
  c.style = LrDecayStyle::kLinear;
  expectError(c, "decay_steps is 0, expected >= 1 for lr_decay linear");
  // A constant schedule needs no decay length (Megatron would assert here).
  c = base();
  c.style = LrDecayStyle::kConstant;
  c.decaySteps = 0;
  EXPECT_TRUE(LrSchedule::create(c).ok());
  // lr == min_lr and lr == 0 are valid (a flat schedule, a frozen run).
  c = base();
  c.minLr = c.lr;
  EXPECT_TRUE(LrSchedule::create(c).ok());
  c.lr = c.minLr = 0.0;
  EXPECT_TRUE(LrSchedule::create(c).ok());
}

} // namespace
