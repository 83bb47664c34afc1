//===- Float16.h - IEEE binary16 and bfloat16 on the host -------*- C++ -*-===//
//
// The two 16-bit floating-point formats of the plan (F16, BF16) decoded to
// and encoded from float on the host, where no compiler type is assumed:
// checkpoints read them (Safetensors), and MPI sums and compares them
// (runtime/comm). Encoding rounds to nearest, ties to even, as CUDA's
// __float2half_rn and __float2bfloat16_rn do; NaN stays NaN.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMMON_FLOAT16_H
#define BRAID_RUNTIME_COMMON_FLOAT16_H

#include <cstdint>

namespace braid {

/// Decodes one IEEE binary16 value (sign, 5 exponent bits, 10 mantissa
/// bits), subnormals, infinities and NaNs included; exact.
float halfToFloat(uint16_t bits);
/// Decodes one bfloat16 value (the upper half of a binary32); exact.
float bfloat16ToFloat(uint16_t bits);
/// The binary16 value nearest `v` (ties to even); beyond the largest finite
/// half (65504, and what rounds above it) infinity; subnormals as IEEE
/// rounds them.
uint16_t floatToHalf(float v);
/// The bfloat16 value nearest `v` (ties to even).
uint16_t floatToBfloat16(float v);

} // namespace braid

#endif // BRAID_RUNTIME_COMMON_FLOAT16_H
