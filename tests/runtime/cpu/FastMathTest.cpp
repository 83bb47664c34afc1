//===- FastMathTest.cpp - The float transcendental functions' accuracy ----===//
//
// Each of runtime/cpu/FastMath.h's functions against the double library
// function on a sweep of the floats of its range (every 64th float's bit
// pattern, so every binade, both signs), and at the edges: the error bounds
// the header states, in both of its forms (unfused; fused, whose fmaf is
// libm's here: the same roundings as the AVX2 loops' instructions).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/FastMath.h"
#include "runtime/cpu/Blas.h"
#include "runtime/cpu/VectorLoops.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace braid::cpu;

namespace {

float fromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

/// Calls f on every 64th float of [lo, hi] (both ends finite).
void sweep(float lo, float hi, const std::function<void(float)> &f) {
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 64) {
    float x = fromBits(uint32_t(bits));
    if (std::isfinite(x) && x >= lo && x <= hi)
      f(x);
  }
  f(lo);
  f(hi);
}

// Each function in the form `fused` says.
float expF(bool fused, float x) {
  return fused ? expFast<true>(x) : expFast<false>(x);
}
float sigmoidF(bool fused, float x) {
  return fused ? sigmoidFast<true>(x) : sigmoidFast<false>(x);
}
void tanhTermsF(bool fused, float x, float &plus, float &minus2) {
  if (fused)
    tanhTermsFast<true>(x, plus, minus2);
  else
    tanhTermsFast<false>(x, plus, minus2);
}
float onePlusErfF(bool fused, float x) {
  return fused ? onePlusErfFast<true>(x) : onePlusErfFast<false>(x);
}

class FastMath : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Forms, FastMath, ::testing::Values(false, true),
                         [](const auto &info) {
                           return info.param ? "Fused" : "Unfused";
                         });

TEST_P(FastMath, ExpRelativeError) {
  double worst = 0;
  sweep(-86.0f, 88.72f, [&](float x) {
    double ref = std::exp(double(x));
    worst = std::max(worst, std::fabs(expF(GetParam(), x) - ref) / ref);
  });
  EXPECT_LT(worst, std::ldexp(1.0, -22));
}

TEST_P(FastMath, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  auto expFast = [](float x) { return expF(GetParam(), x); };
  EXPECT_EQ(expFast(0.0f), 1.0f);
  EXPECT_EQ(expFast(-inf), 0.0f);
  EXPECT_EQ(expFast(-86.5f), 0.0f); // near the smallest normal float
  EXPECT_EQ(expFast(-1000.0f), 0.0f);
  EXPECT_EQ(expFast(inf), inf);
  EXPECT_EQ(expFast(89.0f), inf);
  EXPECT_TRUE(std::isnan(expFast(std::nanf(""))));
  // The largest finite results.
  EXPECT_TRUE(std::isfinite(expFast(88.72f)));
  EXPECT_NEAR(expFast(88.72f) / std::exp(double(88.72f)), 1.0, 3e-7);
}

TEST_P(FastMath, SigmoidRelativeError) {
  auto sigmoidFast = [](float x) { return sigmoidF(GetParam(), x); };
  double worst = 0;
  sweep(-86.0f, 86.0f, [&](float x) {
    double ref = 1.0 / (1.0 + std::exp(-double(x)));
    worst = std::max(worst, std::fabs(sigmoidFast(x) - ref) / ref);
  });
  EXPECT_LT(worst, std::ldexp(1.0, -21));
  EXPECT_EQ(sigmoidFast(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(sigmoidFast(std::numeric_limits<float>::infinity()), 1.0f);
}

TEST_P(FastMath, TanhTermsRelativeError) {
  double worstPlus = 0, worstMinus = 0;
  sweep(-40.0f, 40.0f, [&](float x) {
    float plus, minus2;
    tanhTermsF(GetParam(), x, plus, minus2);
    double t = std::tanh(double(x));
    // 1 + tanh x and 1 - tanh^2 x without cancellation in double either.
    double e = std::exp(-2.0 * std::fabs(double(x)));
    double refPlus = x < 0 ? 2 * e / (1 + e) : 2 / (1 + e);
    double refMinus = 4 * e / ((1 + e) * (1 + e));
    EXPECT_NEAR(refPlus, 1 + t, 1e-15);
    worstPlus = std::max(worstPlus, std::fabs(plus - refPlus) / refPlus);
    worstMinus = std::max(worstMinus, std::fabs(minus2 - refMinus) / refMinus);
  });
  EXPECT_LT(worstPlus, std::ldexp(1.0, -20));
  EXPECT_LT(worstMinus, std::ldexp(1.0, -20));
}

TEST_P(FastMath, GeluTanhRelativeError) {
  auto gelu = [](float x) {
    return GetParam() ? geluTanhFast<true>(x) : geluTanhFast<false>(x);
  };
  // Against x / (1 + e^-2u) in double (0.5 x (1 + tanh u) would cancel in
  // double too), relative to 2^-21 (1 + |2u|): 2u's float rounding grows
  // by exp's factor 2u.
  double worst = 0;
  sweep(-10.0f, 1e6f, [&](float x) {
    double v = x, u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    double ref = v / (1 + std::exp(-2 * u));
    if (std::fabs(ref) < 1e-37)
      return;
    double bound = std::ldexp(1.0, -21) * (1 + std::fabs(2 * u));
    worst = std::max(worst, std::fabs(gelu(x) - ref) / std::fabs(ref) / bound);
  });
  EXPECT_LT(worst, 1.0);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(gelu(0.0f), 0.0f);
  EXPECT_EQ(gelu(-11.0f), 0.0f);
  EXPECT_TRUE(std::signbit(gelu(-11.0f)));
  EXPECT_EQ(gelu(1e30f), 1e30f);
  EXPECT_EQ(gelu(inf), inf);
  EXPECT_TRUE(std::isnan(gelu(std::nanf(""))));
}

TEST_P(FastMath, OnePlusErfRelativeError) {
  // Relative to 2^-21 (1 + x^2): in the tail the float rounding of x^2 in
  // exp(-x^2 + ...) alone is x^2 2^-24 of the result. Down to erfc(9) =
  // 4e-37, still a normal float.
  double worst = 0;
  sweep(-9.0f, 9.0f, [&](float x) {
    double ref = x < 0 ? std::erfc(-double(x)) : 1 + std::erf(double(x));
    double bound = std::ldexp(1.0, -21) * (1 + double(x) * x);
    worst = std::max(worst,
                     std::fabs(onePlusErfF(GetParam(), x) - ref) / ref / bound);
  });
  EXPECT_LT(worst, 1.0);
}

TEST(VectorLoops, SameBitsAsTheScalarFunctions) {
  // Every instruction set this CPU runs (the CI machines have AVX2): its
  // loops against FastMath's functions in the same form, called one
  // element at a time from this file (compiled for the baseline, no
  // multiply-adds but the written ones): the same operations, so the same
  // bits.
  const int64_t n = 100003;
  std::vector<float> x(n), u(n), dy(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = -12.0f + 24.0f * float(i) / float(n) + 1e-3f * float(i % 7);
    u[i] = 0.5f - float(i % 13) / 13.0f;
    dy[i] = 1.0f - float(i % 5) / 2.5f;
  }
  auto sameBits = [](float a, float b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
  };
  const float a = 0.7978845608028654f, b = 0.044715f;
  int tested = 0;
  for (const char *isa : {"sse2", "avx2", "avx512"}) {
    if (!setVectorIsa(isa))
      continue;
    ++tested;
    SCOPED_TRACE(isa);
    const bool fused = vectorLoopsFused();
    EXPECT_EQ(fused, std::string(isa) != "sse2");
    auto mulAddF = [&](float p, float q, float r) {
      return fused ? mulAdd<true>(p, q, r) : mulAdd<false>(p, q, r);
    };
    std::vector<float> y(n), dx(n), y2(n), dg(n), du(n);
    for (bool tanhApprox : {false, true}) {
      geluLoop(x.data(), n, tanhApprox, y.data());
      geluGradLoop(x.data(), dy.data(), n, tanhApprox, dx.data());
      for (int64_t i = 0; i < n; ++i) {
        float v = x[i], want, wantGrad;
        if (tanhApprox) {
          float plus, minus2;
          want = fused ? geluTanhFast<true>(v) : geluTanhFast<false>(v);
          tanhTermsF(fused, a * mulAddF(b * v * v, v, v), plus, minus2);
          float d = a * mulAddF(3.0f * b * v, v, 1.0f);
          wantGrad = dy[i] * mulAddF(0.5f * v * minus2, d, 0.5f * plus);
        } else {
          want = 0.5f * v * onePlusErfF(fused, v * 0.7071067811865476f);
          wantGrad =
              dy[i] *
              mulAddF(v * 0.3989422804014327f, expF(fused, -0.5f * v * v),
                      0.5f * onePlusErfF(fused, v * 0.7071067811865476f));
        }
        ASSERT_TRUE(sameBits(y[i], want)) << "gelu " << tanhApprox << " " << v;
        ASSERT_TRUE(sameBits(dx[i], wantGrad))
            << "gelu grad " << tanhApprox << " " << v;
      }
    }
    swigluLoop(x.data(), u.data(), n, y.data());
    swigluGradLoop(x.data(), u.data(), dy.data(), n, dg.data(), du.data());
    expTimes(x.data(), n, 0.25f, 1.5f, y2.data());
    for (int64_t i = 0; i < n; ++i) {
      float g = x[i], sg = sigmoidF(fused, g);
      ASSERT_TRUE(sameBits(y[i], g * sg * u[i])) << g;
      ASSERT_TRUE(sameBits(du[i], dy[i] * g * sg)) << g;
      ASSERT_TRUE(
          sameBits(dg[i], dy[i] * u[i] * sg * mulAddF(g, 1.0f - sg, 1.0f)))
          << g;
      ASSERT_TRUE(sameBits(y2[i], expF(fused, x[i] - 0.25f) * 1.5f)) << x[i];
    }
    // The max is exact whatever the order.
    float m = -std::numeric_limits<float>::infinity();
    for (float v : x)
      m = std::max(m, v);
    EXPECT_EQ(maxOf(x.data(), n), m);
    EXPECT_EQ(maxOf(x.data(), 0), -std::numeric_limits<float>::infinity());
    // The sum of exponentials against a long double sum of expFast's values
    // (its lanes reorder a double sum: within n double roundings).
    long double ref = 0;
    for (float v : x)
      ref += expF(fused, v - 2.0f);
    EXPECT_NEAR(sumExpShifted(x.data(), n, 2.0f), double(ref),
                1e-15 * n * double(ref));
  }
  setVectorIsa("");
  EXPECT_GE(tested, 1);
}

TEST(VectorLoops, MaxAndSumExpInOneRead) {
  // Rows of several blocks, their max in the first, a middle or the last
  // block (the sum so far rescaled when a block raises it), against the
  // max and a long double sum of e^(x - max) by libm.
  const int64_t n = 3 * kSoftmaxBlock + 100;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = -20.0f + 30.0f * float((i * 7919) % 1000) / 1000.0f;
  for (int64_t at : {int64_t(5), kSoftmaxBlock + 17, n - 3}) {
    SCOPED_TRACE(at);
    std::vector<float> row = x;
    row[at] = 40.0f;
    float m;
    double sum;
    maxAndSumExp(row.data(), n, m, sum);
    EXPECT_EQ(m, 40.0f);
    long double ref = 0;
    for (float v : row)
      ref += std::exp((long double)v - 40.0L);
    EXPECT_NEAR(sum / double(ref), 1.0, 1e-6);
  }
  // One block or less: maxOf's and sumExpShifted's values exactly.
  float m;
  double sum;
  maxAndSumExp(x.data(), 1000, m, sum);
  EXPECT_EQ(m, maxOf(x.data(), 1000));
  EXPECT_EQ(sum, sumExpShifted(x.data(), 1000, m));
  maxAndSumExp(x.data(), 0, m, sum);
  EXPECT_EQ(m, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(sum, 0.0);
}

} // namespace
