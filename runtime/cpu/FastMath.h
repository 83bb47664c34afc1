//===- FastMath.h - Float exp, sigmoid, tanh and erf terms that vectorise -===//
//
// Private to runtime/cpu. The float kernels' transcendental functions, written
// without branches or calls so that the compiler vectorises the loops made of
// them (std::exp and friends are calls into libm, one element at a time: in
// double, GeLU and the cross-entropy spent ~10 ns an element in them).
//
// Every function is the same arithmetic on every element, so a loop gives the
// same bits whichever lanes, threads or blocks take an element (and, without
// contracted multiply-adds, whichever instruction set: VectorLoops.h). Accuracy,
// checked against the double library functions by FastMathTest:
//   expFast     relative error below 2^-22 (2 ulp) on [-86, 88.72];
//               exactly 0 below (true values under 4.5e-38, and -inf),
//               +inf above.
//   sigmoidFast relative error below 2^-21.
//   tanhTermsFast 1 + tanh and 1 - tanh^2 with relative error below 2^-20
//               everywhere, tails included (GeLU's terms; 1 + tanh x
//               would cancel to 0 there).
//   onePlusErfFast 1 + erf with relative error below 2^-21 (1 + x^2), tails
//               included (the x^2 term: x^2's own float rounding in exp).
// NaN in gives NaN out.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_FASTMATH_H
#define BRAID_RUNTIME_CPU_FASTMATH_H

#include <cstdint>
#include <cstring>

namespace braid::cpu {

/// e^x in float: x = n ln2 + r with |r| <= ln2 / 2 (Cody and Waite's split
/// of ln2), e^r by Cephes' degree-6 polynomial, 2^n from the exponent bits.
inline float expFast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  // Below e^lo (4.5e-38, near the smallest normal float) the result is 0;
  // above e^hi (FLT_MAX) it is +inf. 2^n is taken as 2 * 2^(n - 1), so
  // that n = 128 (the top of the range) has an exponent field too.
  constexpr float kLo = -86.0f, kHi = 88.7228394f;
  // Round to nearest by adding 1.5 * 2^23 (exact in the default rounding
  // mode; needs no SSE4.1 rounding instruction).
  constexpr float kRound = 12582912.0f;
  float c = x < kLo ? kLo : (x > kHi ? kHi : x);
  float n = (c * kLog2e + kRound) - kRound;
  float r = c - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 126) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale * 2.0f;
  y = x < kLo ? 0.0f : y;
  y = x > kHi ? __builtin_inff() : y;
  return x != x ? x : y;
}

/// 1 / (1 + e^-x).
inline float sigmoidFast(float x) { return 1.0f / (1.0f + expFast(-x)); }

/// 1 + tanh x and 1 - tanh^2 x from e = e^-2|x|: 1 + tanh x = 2e / (1 + e)
/// for x < 0 and 2 / (1 + e) above, 1 - tanh^2 x = 4e / (1 + e)^2. No
/// cancellation: both keep their relative accuracy (below 2^-21) where
/// tanh x is within a rounding of -1 or 1 (GeLU's tails, where 1 + tanhFast
/// would give 0).
inline void tanhTermsFast(float x, float &onePlusTanh, float &oneMinusTanh2) {
  float a = x < 0 ? -x : x;
  float e = expFast(-2.0f * a);
  float d = 1.0f / (1.0f + e);
  onePlusTanh = x < 0 ? 2.0f * e * d : 2.0f * d;
  oneMinusTanh2 = 4.0f * e * d * d;
}

/// 1 + erf x: erfc |x| for x <= -1/2 (relative accuracy in the tail, where
/// 1 + erf x cancels), 1 + erf's Taylor series to x^13 for |x| < 1/2, and
/// 2 - erfc x above; erfc z = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2)
/// (Numerical Recipes' erfcc, fractional error 1.2e-7). All three are
/// computed and one chosen, so the loop has no branch.
inline float onePlusErfFast(float x) {
  float x2 = x * x;
  float s = 1.0f / 9360.0f;
  s = s * x2 - 1.0f / 1320.0f;
  s = s * x2 + 1.0f / 216.0f;
  s = s * x2 - 1.0f / 42.0f;
  s = s * x2 + 1.0f / 10.0f;
  s = s * x2 - 1.0f / 3.0f;
  s = s * x2 + 1.0f;
  float series = 1.0f + 1.12837916709551257f * x * s;
  float z = x < 0 ? -x : x;
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  float erfc = t * expFast(-z * z + p);
  float tail = x < 0 ? erfc : 2.0f - erfc;
  return z < 0.5f ? series : tail;
}

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_FASTMATH_H
