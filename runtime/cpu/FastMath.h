//===- FastMath.h - Float exp, sigmoid, tanh and erf terms that vectorise -===//
//
// Private to runtime/cpu. The float kernels' transcendental functions, written
// without branches or calls so that the compiler vectorises the loops made of
// them (std::exp and friends are calls into libm, one element at a time: in
// double, GeLU and the cross-entropy spent ~10 ns an element in them).
//
// Every function is the same arithmetic on every element, so a loop gives the
// same bits whichever lanes, threads or blocks take an element. Each comes in
// two forms: Fused = false, every multiply and add rounded on its own, and
// Fused = true, a multiply followed by an add written mulAdd (one rounding,
// the fused multiply-add of AVX2 and AVX-512 CPUs; off those, libm's fmaf,
// which rounds the same). A form gives the same bits wherever it runs
// (VectorLoops.h: its SSE2 loops run the first, its AVX2 and AVX-512 loops
// the second). Accuracy of both, checked against the double library
// functions by FastMathTest:
//   expFast     relative error below 2^-22 (2 ulp) on [-86, 88.72];
//               exactly 0 below (true values under 4.5e-38, and -inf),
//               +inf above.
//   sigmoidFast relative error below 2^-21.
//   tanhTermsFast 1 + tanh and 1 - tanh^2 with relative error below 2^-20
//               everywhere, tails included (GeLU's gradient's terms; 1 +
//               tanh x would cancel to 0 there).
//   geluTanhFast the tanh GeLU with relative error below 2^-21 (1 + |2u|)
//               where its result is 1e-37 or more in magnitude (the
//               argument 2u's rounding, amplified by exp).
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

/// Always inlined, so that the loops calling them vectorise (and a fused
/// multiply-add inlined into AVX2 or AVX-512 code is one instruction).
#define BRAID_FAST_MATH inline __attribute__((always_inline))

/// a b + c, rounded once when Fused.
template <bool Fused> BRAID_FAST_MATH float mulAdd(float a, float b, float c) {
  if constexpr (Fused)
    return __builtin_fmaf(a, b, c);
  else
    return a * b + c;
}

/// e^x in float: x = n ln2 + r with |r| <= ln2 / 2 (Cody and Waite's split
/// of ln2), e^r by Cephes' degree-6 polynomial, 2^n from the exponent bits.
template <bool Fused = false> BRAID_FAST_MATH float expFast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  // Below e^lo (4.5e-38, near the smallest normal float) the result is 0;
  // above e^hi (FLT_MAX) it is +inf. 2^n is taken as 2 * 2^(n - 1), so
  // that n = 128 (the top of the range) has an exponent field too.
  constexpr float kLo = -86.0f, kHi = 88.7228394f;
  // Round to nearest by adding 1.5 * 2^23 (exact in the default rounding
  // mode; needs no SSE4.1 rounding instruction).
  constexpr float kRound = 12582912.0f;
  // x clamped to [lo, hi], a NaN kept (it then runs through the arithmetic
  // to the result): the constant first, these are one max and one min
  // instruction.
  float c = kLo > x ? kLo : x;
  c = kHi < c ? kHi : c;
  float n = mulAdd<Fused>(c, kLog2e, kRound) - kRound;
  float r = mulAdd<Fused>(-n, kLn2Hi, c);
  r = mulAdd<Fused>(-n, kLn2Lo, r);
  float p = 1.9875691500e-4f;
  p = mulAdd<Fused>(p, r, 1.3981999507e-3f);
  p = mulAdd<Fused>(p, r, 8.3334519073e-3f);
  p = mulAdd<Fused>(p, r, 4.1665795894e-2f);
  p = mulAdd<Fused>(p, r, 1.6666665459e-1f);
  p = mulAdd<Fused>(p, r, 5.0000001201e-1f);
  p = mulAdd<Fused>(p * r, r, r) + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 126) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale * 2.0f;
  y = x < kLo ? 0.0f : y;
  return x > kHi ? __builtin_inff() : y;
}

/// 1 / (1 + e^-x).
template <bool Fused = false> BRAID_FAST_MATH float sigmoidFast(float x) {
  return 1.0f / (1.0f + expFast<Fused>(-x));
}

/// 1 + tanh x and 1 - tanh^2 x from e = e^-2|x|: 1 + tanh x = 2e / (1 + e)
/// for x < 0 and 2 / (1 + e) above, 1 - tanh^2 x = 4e / (1 + e)^2. No
/// cancellation: both keep their relative accuracy (below 2^-21) where
/// tanh x is within a rounding of -1 or 1 (GeLU's tails, where 1 + tanhFast
/// would give 0).
template <bool Fused = false>
BRAID_FAST_MATH void tanhTermsFast(float x, float &onePlusTanh,
                                   float &oneMinusTanh2) {
  float a = x < 0 ? -x : x;
  float e = expFast<Fused>(-2.0f * a);
  float d = 1.0f / (1.0f + e);
  onePlusTanh = x < 0 ? 2.0f * e * d : 2.0f * d;
  oneMinusTanh2 = 4.0f * e * d * d;
}

/// The tanh GeLU, 0.5 x (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3),
/// as x / (1 + e^-2u): 0.5 (1 + tanh u) is the sigmoid of 2u. One exp and
/// one division, and no cancellation for x < 0 (1 + tanh u would lose its
/// digits there). Below x = -10.05 e^-2u overflows and the result is -0 (the
/// true one is under 3e-38 in magnitude); a NaN gives NaN.
template <bool Fused = false> BRAID_FAST_MATH float geluTanhFast(float x) {
  // -2u = x (c1 + c3 x^2), the constants folded in float.
  constexpr float c1 = -2.0f * 0.7978845608028654f;
  constexpr float c3 = c1 * 0.044715f;
  float t = x * mulAdd<Fused>(c3, x * x, c1);
  return x / (1.0f + expFast<Fused>(t));
}

/// 1 + erf x: erfc |x| for x <= -1/2 (relative accuracy in the tail, where
/// 1 + erf x cancels), 1 + erf's Taylor series to x^13 for |x| < 1/2, and
/// 2 - erfc x above; erfc z = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2)
/// (Numerical Recipes' erfcc, fractional error 1.2e-7). All three are
/// computed and one chosen, so the loop has no branch.
template <bool Fused = false> BRAID_FAST_MATH float onePlusErfFast(float x) {
  float x2 = x * x;
  float s = 1.0f / 9360.0f;
  s = mulAdd<Fused>(s, x2, -1.0f / 1320.0f);
  s = mulAdd<Fused>(s, x2, 1.0f / 216.0f);
  s = mulAdd<Fused>(s, x2, -1.0f / 42.0f);
  s = mulAdd<Fused>(s, x2, 1.0f / 10.0f);
  s = mulAdd<Fused>(s, x2, -1.0f / 3.0f);
  s = mulAdd<Fused>(s, x2, 1.0f);
  float series = mulAdd<Fused>(1.12837916709551257f * x, s, 1.0f);
  float z = x < 0 ? -x : x;
  float t = 1.0f / mulAdd<Fused>(0.5f, z, 1.0f);
  float p = 0.17087277f;
  p = mulAdd<Fused>(p, t, -0.82215223f);
  p = mulAdd<Fused>(p, t, 1.48851587f);
  p = mulAdd<Fused>(p, t, -1.13520398f);
  p = mulAdd<Fused>(p, t, 0.27886807f);
  p = mulAdd<Fused>(p, t, -0.18628806f);
  p = mulAdd<Fused>(p, t, 0.09678418f);
  p = mulAdd<Fused>(p, t, 0.37409196f);
  p = mulAdd<Fused>(p, t, 1.00002368f);
  p = mulAdd<Fused>(p, t, -1.26551223f);
  float erfc = t * expFast<Fused>(mulAdd<Fused>(-z, z, p));
  float tail = x < 0 ? erfc : 2.0f - erfc;
  return z < 0.5f ? series : tail;
}

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_FASTMATH_H
