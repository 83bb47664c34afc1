//===- FastMathTest.cpp - The float transcendental functions' accuracy ----===//
//
// Each of runtime/cpu/FastMath.h's functions against the double library
// function on a sweep of the floats of its range (every 64th float's bit
// pattern, so every binade, both signs), and at the edges: the error bounds
// the header states.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/FastMath.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

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

TEST(FastMath, ExpRelativeError) {
  double worst = 0;
  sweep(-86.0f, 88.72f, [&](float x) {
    double ref = std::exp(double(x));
    worst = std::max(worst, std::fabs(expFast(x) - ref) / ref);
  });
  EXPECT_LT(worst, std::ldexp(1.0, -22));
}

TEST(FastMath, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
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

TEST(FastMath, SigmoidRelativeError) {
  double worst = 0;
  sweep(-86.0f, 86.0f, [&](float x) {
    double ref = 1.0 / (1.0 + std::exp(-double(x)));
    worst = std::max(worst, std::fabs(sigmoidFast(x) - ref) / ref);
  });
  EXPECT_LT(worst, std::ldexp(1.0, -21));
  EXPECT_EQ(sigmoidFast(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(sigmoidFast(std::numeric_limits<float>::infinity()), 1.0f);
}

TEST(FastMath, TanhTermsRelativeError) {
  double worstPlus = 0, worstMinus = 0;
  sweep(-40.0f, 40.0f, [&](float x) {
    float plus, minus2;
    tanhTermsFast(x, plus, minus2);
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

TEST(FastMath, OnePlusErfRelativeError) {
  // Relative to 2^-21 (1 + x^2): in the tail the float rounding of x^2 in
  // exp(-x^2 + ...) alone is x^2 2^-24 of the result. Down to erfc(9) =
  // 4e-37, still a normal float.
  double worst = 0;
  sweep(-9.0f, 9.0f, [&](float x) {
    double ref = x < 0 ? std::erfc(-double(x)) : 1 + std::erf(double(x));
    double bound = std::ldexp(1.0, -21) * (1 + double(x) * x);
    worst = std::max(worst, std::fabs(onePlusErfFast(x) - ref) / ref / bound);
  });
  EXPECT_LT(worst, 1.0);
}

} // namespace
