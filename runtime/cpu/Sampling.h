//===- Sampling.h - The arithmetic SAMPLE's kernels share -------*- C++ -*-===//
//
// SAMPLE draws each row's next token (cpu::sampleTokens in Generation.h
// defines it). Its CPU kernel sorts and sums in order; its CUDA kernel
// selects by radix passes over a block's threads, adding in whatever order
// the threads come. For both to draw the same ids from the same logits,
// every sum that decides a token is a sum of integers: a kept token's
// weight exp(z - max z) is scaled by a power of two and truncated to a
// uint64_t (samplingWeight), and integer sums are exact in any order. The
// comparisons are then between integers, or between doubles that both
// compute by the same IEEE operations (the scaled logits, their order).
//
// The truncation drops a token whose probability relative to the most
// likely one is below 2^-shift (2^-44 with 2^18 candidates) and moves the
// others' by as little. Where the device's exp rounds differently from the
// host's (CUDA's is within an ulp), a weight may differ by one unit: a draw
// then differs only if it lands within that unit of a boundary between two
// tokens.
//
// Everything here is a pure function, compiled for the host and, included
// from runtime/cuda, for the device.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_SAMPLING_H
#define BRAID_RUNTIME_CPU_SAMPLING_H

#include "runtime/cpu/Philox.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

namespace braid::cpu {

/// How the three settings {temperature, top_k, top_p} are read, once the
/// host has checked them (validateSamplingSettings): a temperature that is
/// not above 0 (0, or anything else a device cannot refuse) is greedy; a
/// top_k below 1 or at least the candidates keeps every candidate; a top_p
/// outside (0, 1) keeps every token.
struct SamplingRule {
  bool greedy = true;
  double temperature = 0;
  /// 0: no top-k truncation.
  int64_t topK = 0;
  /// 1: no top-p truncation.
  double topP = 1;
};

BRAID_HOST_DEVICE inline SamplingRule
samplingRule(float temperature, float topK, float topP, int64_t candidates) {
  SamplingRule rule;
  rule.greedy = !(temperature > 0);
  rule.temperature = double(temperature);
  // int(top_k), as Python truncates it.
  double k = double(topK);
  rule.topK = k >= 1 && k < double(candidates) ? int64_t(k) : 0;
  rule.topP = topP > 0 && topP < 1 ? double(topP) : 1.0;
  return rule;
}

/// The id of a slot of TOP_CANDIDATES' output that no valid column fills
/// (its value is -infinity): after every id in the order of ties.
constexpr int32_t kNoCandidate = 0x7FFFFFFF;

/// Where SAMPLE and TOP_LOGPROBS draw from each rank's best candidates
/// (tensor parallelism, the vocabulary split over the ranks) instead of a
/// row of the whole vocabulary: column i of a row is the token
/// `ids[row · cols + i]` (kNoCandidate: none, its value -infinity), and
/// `vocabSize` is the whole vocabulary's size, whose scale the draw keeps
/// (samplingRule's and samplingWeightShift's `candidates`), so that it
/// draws the id the whole row would give. TOP_LOGPROBS also takes each
/// rank's log-sum-exp, `lse[row · lseCount + j]`, for the normaliser. The
/// pointers are the kernel's memory: the host's for the CPU's, the
/// device's for the CUDA kernels'. Without `ids` (the default) the columns
/// are the vocabulary's own.
template <typename T> struct Candidates {
  const int32_t *ids = nullptr;
  int64_t vocabSize = 0;
  const T *lse = nullptr;
  int64_t lseCount = 0;
};

/// The generation's seed from its two int32 words {low, high}.
BRAID_HOST_DEVICE inline uint64_t samplingSeed(int32_t low, int32_t high) {
  return uint64_t(uint32_t(low)) | uint64_t(uint32_t(high)) << 32;
}

/// A double's place in the order of doubles as an unsigned integer: a
/// larger value has a larger key, and -0 and +0 have the same one.
BRAID_HOST_DEVICE inline uint64_t samplingKey(double z) {
  if (z == 0)
    z = 0.0;
  uint64_t bits;
  memcpy(&bits, &z, sizeof(bits));
  return bits >> 63 ? ~bits : bits | (uint64_t(1) << 63);
}

/// The low part of a token's key: ordered by descending key, tokens of equal
/// value come by ascending id.
BRAID_HOST_DEVICE inline uint64_t samplingIdKey(int64_t id) {
  return 0xFFFFFFFFu - uint64_t(id);
}

/// The power of two that scales the weights of `candidates` tokens, so that
/// their sum stays at most 2^62.
BRAID_HOST_DEVICE inline int samplingWeightShift(int64_t candidates) {
  int bits = 0;
  while ((int64_t(1) << bits) < candidates)
    ++bits;
  return 62 - bits;
}

/// floor(exp(z - top) · 2^shift) for z <= top, top the largest kept z; 0
/// where that is NaN (infinite logits).
BRAID_HOST_DEVICE inline uint64_t samplingWeight(double z, double top,
                                                 int shift) {
  double e = exp(z - top);
  if (!(e > 0))
    return 0;
  if (e >= 1)
    return uint64_t(1) << shift;
  return uint64_t(e * double(uint64_t(1) << shift));
}

/// top_p's limit on a total kept weight: the tokens, least likely first,
/// whose cumulative weight is at most floor((1 - topP) · total) go (HF's
/// cumulative probability <= 1 - top_p).
BRAID_HOST_DEVICE inline uint64_t samplingTopPLimit(double topP,
                                                    uint64_t total) {
  double limit = (1.0 - topP) * double(total);
  return limit > 0 ? uint64_t(limit) : 0;
}

/// floor(bits · total / 2^53), for bits < 2^53 (samplingBits) and total <
/// 2^63: u · total rounded down, exactly. The draw takes the first token,
/// most likely first, whose cumulative weight exceeds it.
BRAID_HOST_DEVICE inline uint64_t samplingTarget(uint64_t bits,
                                                 uint64_t total) {
  // The 116-bit product from 32-bit halves.
  const uint64_t mask = 0xFFFFFFFFu;
  uint64_t ll = (bits & mask) * (total & mask);
  uint64_t lh = (bits & mask) * (total >> 32);
  uint64_t hl = (bits >> 32) * (total & mask);
  uint64_t hh = (bits >> 32) * (total >> 32);
  uint64_t mid = (ll >> 32) + (lh & mask) + (hl & mask);
  uint64_t lo = (mid << 32) | (ll & mask);
  uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
  return (hi << 11) | (lo >> 53);
}

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_SAMPLING_H
