//===- Philox.h - Counter-based random numbers ------------------*- C++ -*-===//
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11): a keyed bijection of a 128-bit counter. Random numbers are a pure
// function of (key, counter), so any rank can produce the numbers of any
// element without generating the ones before it. That is what makes dropout
// masks independent of how a tensor is sharded: the counter is the element's
// global index, the key the seed, and the remaining counter words the step
// and the op. SAMPLE's draws (samplingUniform) are keyed by the generation's
// seed at the drawn token's position and the row.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_PHILOX_H
#define BRAID_RUNTIME_CPU_PHILOX_H

#include <array>
#include <cstdint>

// The CUDA kernels draw the same numbers (nvcc with
// --expt-relaxed-constexpr, for std::array's members on the device).
#if defined(__CUDACC__)
#define BRAID_HOST_DEVICE __host__ __device__
#else
#define BRAID_HOST_DEVICE
#endif

namespace braid::cpu {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

/// Ten rounds of Philox4x32 on `counter` under `key`.
BRAID_HOST_DEVICE inline PhiloxCounter philox4x32(PhiloxCounter counter,
                                                  PhiloxKey key) {
  constexpr uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kMul0) * counter[0];
    uint64_t p1 = uint64_t(kMul1) * counter[2];
    counter = {uint32_t(p1 >> 32) ^ counter[1] ^ key[0], uint32_t(p1),
               uint32_t(p0 >> 32) ^ counter[3] ^ key[1], uint32_t(p0)};
    key = {key[0] + kWeyl0, key[1] + kWeyl1};
  }
  return counter;
}

/// A uniform number in [0, 1) from 32 random bits (24 significant bits, so
/// float and double kernels draw the same masks).
BRAID_HOST_DEVICE inline double uniformFromBits(uint32_t bits) {
  return double(bits >> 8) * (1.0 / 16777216.0);
}

/// Whether dropout at `rate` keeps element `index` of a tensor (its index in
/// the whole, unsharded tensor) under the run's seed, the step and the op:
/// one Philox call gives four words, so elements 4i .. 4i+3 share a counter.
BRAID_HOST_DEVICE inline bool dropoutKeepsElement(uint64_t index, double rate,
                                                  uint64_t seed, uint32_t step,
                                                  uint32_t op) {
  PhiloxCounter counter = {uint32_t(index >> 2), uint32_t(index >> 34), step,
                           op};
  PhiloxCounter bits =
      philox4x32(counter, {uint32_t(seed), uint32_t(seed >> 32)});
  return uniformFromBits(bits[index & 3]) >= rate;
}

/// The counter's last word in a draw of SAMPLE ("SAMP"), which keeps its
/// numbers apart from dropout's (whose last word is an op's number).
inline constexpr uint32_t kSamplingStream = 0x53414D50;

/// 53 random bits for drawing row `row`'s token at `counter` (the drawn
/// token's position) under `seed`: Philox4x32 keyed by the seed's low and
/// high words, at counter {counter, row, 0, kSamplingStream}; 27 bits of
/// word 0 above 26 bits of word 1.
BRAID_HOST_DEVICE inline uint64_t samplingBits(uint64_t seed, uint32_t counter,
                                               uint32_t row) {
  PhiloxCounter bits = philox4x32({counter, row, 0, kSamplingStream},
                                  {uint32_t(seed), uint32_t(seed >> 32)});
  return (uint64_t(bits[0] >> 5) << 26) | uint64_t(bits[1] >> 6);
}

/// The uniform number in [0, 1) of that draw: samplingBits / 2^53.
BRAID_HOST_DEVICE inline double samplingUniform(uint64_t seed, uint32_t counter,
                                                uint32_t row) {
  return double(samplingBits(seed, counter, row)) * (1.0 / 9007199254740992.0);
}

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_PHILOX_H
