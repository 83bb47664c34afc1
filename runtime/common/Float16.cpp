//===- Float16.cpp - IEEE binary16 and bfloat16 on the host ---------------===//

#include "runtime/common/Float16.h"

#include <cmath>
#include <cstring>

namespace braid {
namespace {

uint32_t bitsOf(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

float fromBits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

} // namespace

float halfToFloat(uint16_t bits) {
  const float sign = (bits & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) // zero or subnormal: mantissa * 2^-24, exact in float
    return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) {
    if (mantissa == 0)
      return sign * INFINITY;
    // Keep the payload and the sign: the float NaN with the same top bits.
    return fromBits((static_cast<uint32_t>(bits & 0x8000) << 16) |
                    0x7f800000u | (static_cast<uint32_t>(mantissa) << 13));
  }
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}

float bfloat16ToFloat(uint16_t bits) {
  return fromBits(static_cast<uint32_t>(bits) << 16);
}

uint16_t floatToBfloat16(float v) {
  uint32_t b = bitsOf(v);
  if (std::isnan(v)) // a quiet NaN with the sign (rounding could carry to inf)
    return static_cast<uint16_t>((b >> 16) | 0x0040);
  // Add half a unit of the kept part, less one unless the kept part is odd:
  // ties go to the even neighbour. A carry into the exponent is correct
  // (the next binade, or infinity).
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

uint16_t floatToHalf(float v) {
  uint32_t b = bitsOf(v);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  if (std::isnan(v))
    return static_cast<uint16_t>(sign | 0x7e00 | ((b >> 13) & 0x3ff));
  const float a = std::fabs(v);
  // 65520 is halfway between 65504 and the next step (65536): it and
  // everything above round to infinity.
  if (a >= 65520.0f)
    return static_cast<uint16_t>(sign | 0x7c00);
  if (a < 6.103515625e-05f) { // below the smallest normal half, 2^-14
    // A multiple of 2^-24: a * 2^24 rounded to the nearest integer, ties to
    // even (nearbyint in the default rounding mode); exact in float.
    float m = std::nearbyint(a * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
  }
  // Normal: drop 13 mantissa bits, rounding to nearest even; a carry into
  // the exponent is correct, and 65504 < a < 65520 stays finite.
  uint32_t m = bitsOf(a);
  m += 0x0fffu + ((m >> 13) & 1u);
  const uint32_t exponent = (m >> 23) - 127 + 15;
  return static_cast<uint16_t>(sign | (exponent << 10) | ((m >> 13) & 0x3ff));
}

} // namespace braid
