//===- Generation.cu - CUDA kernels of generation with a KV cache ---------===//
//
// The cache's writes are one launch and its reads the next, so that every
// write of a call lands before any read. Attention runs one block per
// (sequence, query, head) over that query's keys in chunks of a block's
// width, with an online softmax (a running maximum and sum) in float.
// SAMPLE runs one block per row: the argmax and the kept total by block
// reductions, and each selection (top-k's k-th largest z, top-p's first
// kept token, the drawn token) by radix passes over the tokens' keys, one
// byte per pass: a histogram of the matching tokens' weights (integers,
// added by shared-memory atomics in any order, exactly) picks the byte.
// TOP_LOGPROBS runs one block per row too: its k-th most likely id by the
// same radix selection (every id of weight 1), then the ids at least as
// likely ranked against each other in shared memory. TOP_CANDIDATES ranks
// a rank's valid columns the same way, its lse by block reductions. On
// gathered candidates, SAMPLE and TOP_LOGPROBS key each column by its
// candidate's id instead of its index. REORDER_ROWS copies x into the
// executor's scratch, then every row back from its parent's copy.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Generation.h"

#include "runtime/cpu/Philox.h"
#include "runtime/cpu/Sampling.h"
#include "runtime/cuda/DeviceMath.cuh"

#include <algorithm>
#include <cmath>

namespace braid::cuda {
namespace {

constexpr int kThreads = 256;
/// Attention's block: one key per thread per chunk of keys.
constexpr int kAttentionThreads = 128;
/// SAMPLE's block (a power of two: the argmax reduces by halves).
constexpr int kSampleThreads = 256;


//===-- Attention against the cache ---------------------------------------===//

/// One thread per (sequence, column) of k and v: the sequence's rows in
/// order, so that a position given twice keeps the later row (as the CPU).
template <typename T>
__global__ void cacheWriteKernel(const T *k, const T *v,
                                 const int32_t *positions, int64_t batch,
                                 int64_t queries, int64_t width,
                                 int64_t cacheLen, T *cacheK, T *cacheV) {
  BRAID_GRID_STRIDE(i, batch * width) {
    const int64_t b = i / width, c = i % width;
    for (int64_t t = 0; t < queries; ++t) {
      const int64_t p = positions[b * queries + t];
      // Out of the cache: not written (the device cannot refuse it).
      if (p < 0 || p >= cacheLen)
        continue;
      const int64_t from = (b * queries + t) * width + c;
      cacheK[(b * cacheLen + p) * width + c] = k[from];
      cacheV[(b * cacheLen + p) * width + c] = v[from];
    }
  }
}

/// The kv head of local query head h (its group among the global heads)
/// and its ALiBi slope (0 without ALiBi), as cpu::AttentionShape::kvHeadOf
/// and cpu::alibiSlopes.
__device__ __forceinline__ int64_t cachedKvHead(const cpu::AttentionShape &s,
                                                int64_t h) {
  const int64_t allHeads = s.globalHeads ? s.globalHeads : s.heads;
  const int64_t allKvHeads = s.globalKvHeads ? s.globalKvHeads : s.kvHeads;
  return (s.headOffset + h) / (allHeads / allKvHeads) - s.kvHeadOffset;
}
__device__ __forceinline__ float cachedSlope(const cpu::AttentionShape &s,
                                             int64_t h) {
  const int64_t allHeads = s.globalHeads ? s.globalHeads : s.heads;
  return s.alibi ? alibiSlope(allHeads, s.headOffset + h) : 0.0f;
}

/// One block per (sequence b, query t, head h), its threads one key each
/// per chunk of keys, then one output column each. Dynamic shared memory:
/// the query row, the output row being summed, the chunk's probabilities.
template <typename T>
__global__ void attentionCachedKernel(const T *q, const int32_t *positions,
                                      const T *cacheK, const T *cacheV,
                                      cpu::AttentionShape s, int64_t cacheLen,
                                      T *out) {
  BRAID_DYNAMIC_SHARED(float, dynamic);
  __shared__ float reduce[32];
  const int64_t d = s.headDim, heads = s.heads;
  const int64_t h = int64_t(blockIdx.x) % heads, row = blockIdx.x / heads;
  const int64_t b = row / s.seq;
  const int64_t qStride = heads * d, kvStride = s.kvHeads * d;
  float *qs = dynamic, *acc = dynamic + d, *probs = dynamic + 2 * d;
  T *o = out + row * qStride + h * d;
  const int64_t p = positions[row];
  if (p < 0 || p >= cacheLen) {
    // Out of the cache: zeros (the whole block leaves here).
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
      o[c] = fromFloat<T>(0.0f);
    return;
  }
  const T *qi = q + row * qStride + h * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    qs[c] = toFloat(qi[c]);
    acc[c] = 0.0f;
  }
  __syncthreads();
  const int64_t g = cachedKvHead(s, h);
  const float slope = cachedSlope(s, h);
  const float scale = float(s.scale);
  const T *keys = cacheK + b * cacheLen * kvStride + g * d;
  const T *values = cacheV + b * cacheLen * kvStride + g * d;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = 0; j0 <= p; j0 += blockDim.x) {
    const int64_t j = j0 + threadIdx.x;
    float score = -INFINITY;
    if (j <= p) {
      const T *kj = keys + j * kvStride;
      float dot = 0.0f;
      for (int64_t c = 0; c < d; ++c)
        dot += qs[c] * toFloat(kj[c]);
      score = dot * scale - slope * float(p - j);
    }
    const float mNew = fmaxf(m, blockMax(score, reduce));
    const float alpha = expf(m - mNew); // 0 on the first chunk
    const float weight = j <= p ? expf(score - mNew) : 0.0f;
    probs[threadIdx.x] = weight;
    l = l * alpha + blockSum(weight, reduce); // its barrier shows `probs`
    const int64_t n = std::min<int64_t>(blockDim.x, p - j0 + 1);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      float a = acc[c] * alpha;
      for (int64_t jj = 0; jj < n; ++jj)
        a += probs[jj] * toFloat(values[(j0 + jj) * kvStride + c]);
      acc[c] = a;
    }
    __syncthreads(); // `probs` is rewritten by the next chunk
    m = mNew;
  }
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    o[c] = fromFloat<T>(acc[c] / l);
}

/// The split kernel (flash decoding): the keys of each (row, head) in
/// `splits` contiguous ranges, one block each, its warps taking one key at
/// a time (the key's head dimension across the lanes: loads of a row
/// coalesced, the dot product a warp sum), each warp with its own online
/// softmax, merged in the block. With one range the block writes the
/// output; with several it writes its (max, sum, unnormalised row) to
/// `partials` and attentionSplitCombineKernel merges the ranges in order.
/// Head dimensions up to kSplitMaxHeadDim (8 floats a lane).
constexpr int kSplitWarps = 4;
constexpr int64_t kSplitMaxHeadDim = 256;
constexpr int kSplitPerLane = int(kSplitMaxHeadDim / 32);

template <typename T>
__global__ void attentionSplitKernel(const T *q, const int32_t *positions,
                                     const T *cacheK, const T *cacheV,
                                     cpu::AttentionShape s, int64_t cacheLen,
                                     int64_t splits, T *out, float *partials) {
  __shared__ float qs[kSplitMaxHeadDim];
  __shared__ float warpM[kSplitWarps], warpL[kSplitWarps];
  __shared__ float warpAcc[kSplitWarps][kSplitMaxHeadDim];
  const int64_t d = s.headDim, heads = s.heads;
  const int64_t unit = blockIdx.x, h = unit % heads, row = unit / heads;
  const int64_t b = row / s.seq, split = blockIdx.y;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int64_t qStride = heads * d, kvStride = s.kvHeads * d;
  const int64_t p = positions[row];
  const bool valid = p >= 0 && p < cacheLen;
  const int64_t per = (cacheLen + splits - 1) / splits;
  const int64_t first = split * per;
  const int64_t last = valid ? std::min(first + per, p + 1) : first;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    qs[c] = toFloat(q[row * qStride + h * d + c]);
  __syncthreads();
  const int64_t g = cachedKvHead(s, h);
  const float slope = cachedSlope(s, h);
  const float scale = float(s.scale);
  const T *keys = cacheK + b * cacheLen * kvStride + g * d;
  const T *values = cacheV + b * cacheLen * kvStride + g * d;
  float m = -INFINITY, l = 0.0f;
  float acc[kSplitPerLane];
#pragma unroll
  for (int i = 0; i < kSplitPerLane; ++i)
    acc[i] = 0.0f;
  for (int64_t j = first + warp; j < last; j += kSplitWarps) {
    const T *kj = keys + j * kvStride, *vj = values + j * kvStride;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kSplitPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < d)
        dot += qs[c] * toFloat(kj[c]);
    }
    dot = warpSum(dot);
    const float score = dot * scale - slope * float(p - j);
    const float mNew = fmaxf(m, score);
    const float alpha = expf(m - mNew); // 0 for the warp's first key
    const float weight = expf(score - mNew);
    l = l * alpha + weight;
#pragma unroll
    for (int i = 0; i < kSplitPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < d)
        acc[i] = acc[i] * alpha + weight * toFloat(vj[c]);
    }
    m = mNew;
  }
  if (lane == 0) {
    warpM[warp] = m;
    warpL[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kSplitPerLane; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < d)
      warpAcc[warp][c] = acc[i];
  }
  __syncthreads();
  // The block's range: its warps merged (a warp that saw no key adds 0).
  float top = -INFINITY;
  for (int w = 0; w < kSplitWarps; ++w)
    top = fmaxf(top, warpM[w]);
  float sum = 0.0f;
  for (int w = 0; w < kSplitWarps; ++w)
    if (warpM[w] != -INFINITY)
      sum += warpL[w] * expf(warpM[w] - top);
  float *partial = partials ? partials + (unit * splits + split) * (d + 2)
                            : nullptr;
  T *o = out + row * qStride + h * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kSplitWarps; ++w)
      if (warpM[w] != -INFINITY)
        a += warpAcc[w][c] * expf(warpM[w] - top);
    if (splits == 1)
      o[c] = fromFloat<T>(valid ? a / sum : 0.0f); // out of the cache: 0
    else
      partial[2 + c] = a;
  }
  if (splits > 1 && threadIdx.x == 0) {
    partial[0] = top;
    partial[1] = sum;
  }
}

/// One block per (row, head): the ranges' partial results merged in order.
template <typename T>
__global__ void attentionSplitCombineKernel(const float *partials,
                                            const int32_t *positions,
                                            cpu::AttentionShape s,
                                            int64_t cacheLen, int64_t splits,
                                            T *out) {
  const int64_t d = s.headDim, heads = s.heads;
  const int64_t unit = blockIdx.x, h = unit % heads, row = unit / heads;
  T *o = out + row * heads * d + h * d;
  const int64_t p = positions[row];
  if (p < 0 || p >= cacheLen) {
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
      o[c] = fromFloat<T>(0.0f);
    return;
  }
  const float *part = partials + unit * splits * (d + 2);
  float top = -INFINITY;
  for (int64_t r = 0; r < splits; ++r)
    top = fmaxf(top, part[r * (d + 2)]);
  float sum = 0.0f;
  for (int64_t r = 0; r < splits; ++r)
    if (part[r * (d + 2)] != -INFINITY)
      sum += part[r * (d + 2) + 1] * expf(part[r * (d + 2)] - top);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float a = 0.0f;
    for (int64_t r = 0; r < splits; ++r)
      if (part[r * (d + 2)] != -INFINITY)
        a += part[r * (d + 2) + 2 + c] * expf(part[r * (d + 2)] - top);
    o[c] = fromFloat<T>(a / sum);
  }
}

//===-- Rows --------------------------------------------------------------===//

template <typename T>
__global__ void takeRowsKernel(const T *x, const int32_t *index, int64_t batch,
                               int64_t seq, int64_t cols, T *y) {
  BRAID_GRID_STRIDE(i, batch * cols) {
    const int64_t b = i / cols, c = i % cols, r = index[b];
    // Out of x's rows: zeros (the device cannot refuse it).
    y[i] = r >= 0 && r < seq ? x[(b * seq + r) * cols + c] : fromFloat<T>(0.0f);
  }
}

//===-- Sampling ----------------------------------------------------------===//

/// SAMPLE's shared memory: a radix pass's histogram and its choice, the
/// argmax's halves, the kept total; TOP_LOGPROBS' and TOP_CANDIDATES' counts
/// of the chosen ids above the k-th and equal to it.
struct SampleShared {
  unsigned long long bins[256];
  uint64_t hi[kSampleThreads], lo[kSampleThreads];
  unsigned long long total;
  uint64_t above;
  int chosen;
  unsigned chosenAbove, chosenEqual;
};

/// The double whose cpu::samplingKey is `key` (+0 for zero's).
__device__ double doubleOfKey(uint64_t key) {
  const uint64_t bits = key >> 63 ? key & ~(uint64_t(1) << 63) : ~key;
  double z;
  memcpy(&z, &bits, sizeof(z));
  return z;
}

/// The largest key (hi, lo) of the block's threads' own, returned to every
/// thread.
__device__ void blockMaxKey(uint64_t &hi, uint64_t &lo, SampleShared &sh) {
  const int t = threadIdx.x;
  sh.hi[t] = hi;
  sh.lo[t] = lo;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) {
      const int u = t + half;
      if (sh.hi[u] > sh.hi[t] ||
          (sh.hi[u] == sh.hi[t] && sh.lo[u] > sh.lo[t])) {
        sh.hi[t] = sh.hi[u];
        sh.lo[t] = sh.lo[u];
      }
    }
    __syncthreads();
  }
  hi = sh.hi[0];
  lo = sh.lo[0];
  __syncthreads();
}

/// The sum of every thread's `v` (exact: integers).
__device__ uint64_t blockTotal(uint64_t v, SampleShared &sh) {
  if (threadIdx.x == 0)
    sh.total = 0;
  __syncthreads();
  if (v)
    atomicAdd(&sh.total, (unsigned long long)v);
  __syncthreads();
  uint64_t total = sh.total;
  __syncthreads();
  return total;
}

/// The first token, in descending order of its key (hi, lo) = key(i), at
/// which the cumulative weight(i, hi, lo) exceeds `target`: its key's first
/// `levels` bytes (hi's 8, then lo's low 4) into (hi, lo), and into `above`
/// the weight of the tokens before it. False (on every thread) when the
/// total weight is at most target. Each pass adds the weights of the tokens
/// whose key begins with the bytes chosen so far by their next byte, and
/// takes the byte at which the cumulative weight passes the target.
template <typename Key, typename Weight>
__device__ bool selectFromTop(int64_t n, int levels, uint64_t target, Key key,
                              Weight weight, SampleShared &sh, uint64_t &hi,
                              uint64_t &lo, uint64_t &above) {
  uint64_t hiMask = 0, loMask = 0;
  hi = lo = above = 0;
  for (int level = 0; level < levels; ++level) {
    const bool onHi = level < 8;
    const int shift = onHi ? 56 - 8 * level : 24 - 8 * (level - 8);
    for (int bin = threadIdx.x; bin < 256; bin += blockDim.x)
      sh.bins[bin] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      uint64_t kh, kl;
      key(i, kh, kl);
      if ((kh & hiMask) != hi || (kl & loMask) != lo)
        continue;
      if (uint64_t w = weight(i, kh, kl))
        atomicAdd(&sh.bins[((onHi ? kh : kl) >> shift) & 0xFF],
                  (unsigned long long)w);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t cumulative = above;
      int chosen = -1;
      for (int bin = 255; bin >= 0; --bin) {
        if (cumulative + sh.bins[bin] > target) {
          chosen = bin;
          break;
        }
        cumulative += sh.bins[bin];
      }
      sh.chosen = chosen;
      sh.above = cumulative;
    }
    __syncthreads();
    const int chosen = sh.chosen;
    above = sh.above;
    if (chosen < 0)
      return false;
    if (onHi) {
      hi |= uint64_t(chosen) << shift;
      hiMask |= uint64_t(0xFF) << shift;
    } else {
      lo |= uint64_t(chosen) << shift;
      loMask |= uint64_t(0xFF) << shift;
    }
  }
  return true;
}

/// One block per row (cpu::sampleTokens' steps). With `from.ids`, column i
/// is the token from.ids[row · vocab + i] (its ties ordered by that id, the
/// id drawn), and from.vocabSize scales the rule and the weights.
template <typename T>
__global__ void sampleKernel(const T *logits, int64_t vocab, int64_t n,
                             const float *settings, const int32_t *seedWords,
                             const int32_t *counters, int32_t *ids,
                             Candidates<T> from) {
  __shared__ SampleShared sh;
  const int64_t row = blockIdx.x;
  const T *x = logits + row * vocab;
  const int32_t *rowIds = from.ids ? from.ids + row * vocab : nullptr;
  // Column i's token.
  auto idOf = [&](int64_t i) { return rowIds ? int64_t(rowIds[i]) : i; };
  const int64_t scale = rowIds ? from.vocabSize : n;
  const cpu::SamplingRule rule =
      cpu::samplingRule(settings[0], settings[1], settings[2], scale);
  // The argmax of key(i), ties the lowest id: its id, and its key into
  // `topKey`.
  auto argmax = [&](auto keyOf, uint64_t &topKey) {
    uint64_t hi = 0, lo = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      uint64_t ki = keyOf(i), li = cpu::samplingIdKey(idOf(i));
      if (ki > hi || (ki == hi && li > lo)) {
        hi = ki;
        lo = li;
      }
    }
    blockMaxKey(hi, lo, sh);
    topKey = hi;
    return int64_t(0xFFFFFFFFu - lo);
  };
  uint64_t topKey;
  if (rule.greedy) {
    int64_t top = argmax(
        [&](int64_t i) { return cpu::samplingKey(double(toFloat(x[i]))); },
        topKey);
    if (threadIdx.x == 0)
      ids[row] = int32_t(top);
    return;
  }
  auto zOf = [&](int64_t i) {
    return double(toFloat(x[i])) / rule.temperature;
  };
  const int64_t top =
      argmax([&](int64_t i) { return cpu::samplingKey(zOf(i)); }, topKey);
  // The argmax's z (of a key, whichever column holds it: equal keys are
  // equal z, but for the sign of a zero, which exp(z - zTop) ignores).
  const double zTop = doubleOfKey(topKey);
  uint64_t hi, lo, above;
  // top-k: the k-th largest z (the k-th token by count, most likely first).
  uint64_t least = 0;
  if (rule.topK > 0) {
    selectFromTop(
        n, 8, uint64_t(rule.topK - 1),
        [&](int64_t i, uint64_t &kh, uint64_t &kl) {
          kh = cpu::samplingKey(zOf(i));
          kl = 0;
        },
        [](int64_t, uint64_t, uint64_t) { return uint64_t(1); }, sh, hi, lo,
        above);
    least = hi;
  }
  const int shift = cpu::samplingWeightShift(scale);
  // The weight of token i, whose z key is zk, when top-k keeps it.
  auto weightOf = [&](int64_t i, uint64_t zk) -> uint64_t {
    return zk >= least ? cpu::samplingWeight(zOf(i), zTop, shift) : 0;
  };
  uint64_t mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    mine += weightOf(i, cpu::samplingKey(zOf(i)));
  uint64_t total = blockTotal(mine, sh);
  if (total == 0) {
    if (threadIdx.x == 0)
      ids[row] = int32_t(top);
    return;
  }
  // top-p: the first token kept, least likely first (the keys complemented:
  // ascending z, equal z by descending id, the id itself the low key), is
  // the first at which the cumulative weight exceeds the limit; the tokens
  // before it go. The kept are those whose key (z key, id key) is at least
  // (cutHi, cutLo).
  uint64_t cutHi = 0, cutLo = 0;
  if (rule.topP < 1) {
    uint64_t limit = cpu::samplingTopPLimit(rule.topP, total);
    bool found = selectFromTop(
        n, 12, limit,
        [&](int64_t i, uint64_t &kh, uint64_t &kl) {
          kh = ~cpu::samplingKey(zOf(i));
          kl = uint64_t(idOf(i));
        },
        [&](int64_t i, uint64_t kh, uint64_t) { return weightOf(i, ~kh); }, sh,
        hi, lo, above);
    if (found) {
      cutHi = ~hi;
      cutLo = cpu::samplingIdKey(int64_t(lo));
      total -= above;
    } else {
      // Every token within the limit: the most likely one stays.
      cutHi = cpu::samplingKey(zTop);
      cutLo = cpu::samplingIdKey(top);
      total = cpu::samplingWeight(zTop, zTop, shift);
    }
  }
  const uint64_t target = cpu::samplingTarget(
      cpu::samplingBits(cpu::samplingSeed(seedWords[0], seedWords[1]),
                        uint32_t(counters[row]), uint32_t(row)),
      total);
  selectFromTop(
      n, 12, target,
      [&](int64_t i, uint64_t &kh, uint64_t &kl) {
        kh = cpu::samplingKey(zOf(i));
        kl = cpu::samplingIdKey(idOf(i));
      },
      [&](int64_t i, uint64_t kh, uint64_t kl) -> uint64_t {
        bool kept = kh > cutHi || (kh == cutHi && kl >= cutLo);
        return kept ? weightOf(i, kh) : 0;
      },
      sh, hi, lo, above);
  if (threadIdx.x == 0)
    ids[row] = int32_t(0xFFFFFFFFu - lo);
}

//===-- Beam search -------------------------------------------------------===//

/// The k best of the n columns of x (k at most n) in TOP_LOGPROBS' order:
/// descending logit (cpu::samplingKey's order of doubles, as the CPU ranks
/// them), equal logits by ascending idOf(i). The k-th by radix selection
/// on the keys (every column of weight 1), which also counts the columns
/// before it; those and as many as make k of the columns equal to it (the
/// same logit and id: candidates' duplicates, kNoCandidate's) into
/// `chosen` (their ids) and `chosenLogits` (k each, shared). Then
/// emit(rank, id, logit) for each, its place in the order (ties between
/// duplicates by their slot), from the thread that ranked it.
template <typename T, typename Id, typename Emit>
__device__ void rankBest(const T *x, int64_t n, int64_t k, Id idOf,
                         SampleShared &sh, int32_t *chosen, float *chosenLogits,
                         Emit emit) {
  auto key = [&](int64_t i, uint64_t &kh, uint64_t &kl) {
    kh = cpu::samplingKey(double(toFloat(x[i])));
    kl = cpu::samplingIdKey(idOf(i));
  };
  uint64_t hi, lo, above;
  selectFromTop(
      n, 12, uint64_t(k - 1), key,
      [](int64_t, uint64_t, uint64_t) { return uint64_t(1); }, sh, hi, lo,
      above);
  if (threadIdx.x == 0)
    sh.chosenAbove = sh.chosenEqual = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    uint64_t kh, kl;
    key(i, kh, kl);
    unsigned slot;
    if (kh > hi || (kh == hi && kl > lo))
      slot = atomicAdd(&sh.chosenAbove, 1u); // below `above` <= k - 1
    else if (kh == hi && kl == lo)
      slot = unsigned(above) + atomicAdd(&sh.chosenEqual, 1u);
    else
      continue;
    if (slot < k) {
      chosen[slot] = int32_t(idOf(i));
      chosenLogits[slot] = toFloat(x[i]);
    }
  }
  __syncthreads();
  // Each chosen id's place: the chosen ids before it in the order.
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    const int32_t id = chosen[j];
    const uint64_t kj = cpu::samplingKey(double(chosenLogits[j]));
    int64_t rank = 0;
    for (int64_t other = 0; other < k; ++other) {
      const uint64_t ko = cpu::samplingKey(double(chosenLogits[other]));
      rank += ko > kj || (ko == kj && (chosen[other] < id ||
                                       (chosen[other] == id && other < j)));
    }
    emit(rank, id, chosenLogits[j]);
  }
}

/// log(sum exp(x_i)) over x [n] in double, as the CPU's: m + log(sum
/// exp(x - m)), m the maximum (never a NaN; a NaN makes the sum NaN);
/// -infinity when n is 0 or every x is -infinity.
template <typename T> __device__ double logSumExpOf(const T *x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    if (double(toFloat(x[i])) > m)
      m = double(toFloat(x[i]));
  if (m == -INFINITY)
    return m;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += exp(double(toFloat(x[i])) - m);
  return m + log(sum);
}

/// The softmax normaliser of x [n], to every thread of the block: m its
/// maximum (fmaxf passes over NaN, as the CPU's comparison does) and sum
/// that of exp(x - m), exp in float and summed in double (0 when m is
/// -infinity: no finite column).
template <typename T>
__device__ void blockNormaliser(const T *x, int64_t n, float *reduceMax,
                                double *reduceSum, float &m, double &sum) {
  float mine = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    mine = fmaxf(mine, toFloat(x[i]));
  m = blockMax(mine, reduceMax);
  double partial = 0.0;
  if (m != -INFINITY)
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      partial += double(expf(toFloat(x[i]) - m));
  sum = blockSum(partial, reduceSum);
}

/// The first column of x[0, n) with the largest key (samplingKey: the order
/// TOP_LOGPROBS ranks ids in), by the whole block; every thread gets it.
template <typename T>
__device__ int64_t firstMostLikely(const T *x, int64_t n, SampleShared &sh) {
  // (key, ~column) largest.
  uint64_t hi = 0, lo = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const uint64_t ki = cpu::samplingKey(double(toFloat(x[i])));
    const uint64_t li = cpu::samplingIdKey(i);
    if (ki > hi || (ki == hi && li > lo)) {
      hi = ki;
      lo = li;
    }
  }
  blockMaxKey(hi, lo, sh);
  return int64_t(0xFFFFFFFFu - lo);
}

/// One block per row (cpu::tokenLogprobs' steps), of kSampleThreads
/// threads.
template <typename T>
__global__ void tokenLogprobsKernel(const T *logits, const int32_t *targets,
                                    int64_t columns, int64_t vocab,
                                    float *logprobs, int32_t *greedy) {
  __shared__ SampleShared sh;
  __shared__ float reduceMax[32];
  __shared__ double reduceSum[32];
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  if (target < 0) { // the whole block alike: no barrier is skipped by some
    if (threadIdx.x == 0) {
      logprobs[row] = 0;
      greedy[row] = 0;
    }
    return;
  }
  const T *x = logits + row * columns;
  float m;
  double sum;
  blockNormaliser(x, vocab, reduceMax, reduceSum, m, sum);
  const int64_t best = firstMostLikely(x, vocab, sh);
  if (threadIdx.x == 0) {
    logprobs[row] =
        float((double(toFloat(x[target])) - double(m)) - log(sum));
    greedy[row] = best == int64_t(target) ? 1 : 0;
  }
}

/// One block per row (cpu::tokenLogprobsPartial's steps), of
/// kSampleThreads threads, over the row's `valid` columns.
template <typename T>
__global__ void tokenLogprobsPartialKernel(const T *logits,
                                           const int32_t *targets,
                                           int64_t columns, int64_t valid,
                                           int64_t vocabStart,
                                           float *partial) {
  __shared__ SampleShared sh;
  __shared__ float reduceMax[32];
  __shared__ double reduceSum[32];
  const int64_t row = blockIdx.x;
  float *out = partial + 4 * row;
  if (valid <= 0) {
    if (threadIdx.x == 0) {
      out[0] = -INFINITY;
      out[1] = 0.0f;
      out[2] = 0.0f;
      out[3] = -1.0f;
    }
    return;
  }
  const T *x = logits + row * columns;
  float m;
  double sum;
  blockNormaliser(x, valid, reduceMax, reduceSum, m, sum);
  const int64_t best = firstMostLikely(x, valid, sh);
  if (threadIdx.x == 0) {
    const int64_t target = int64_t(targets[row]) - vocabStart;
    out[0] = toFloat(x[best]);
    out[1] = float(sum);
    out[2] = targets[row] >= 0 && target >= 0 && target < valid
                 ? toFloat(x[target])
                 : 0.0f;
    out[3] = float(vocabStart + best);
  }
}

/// One thread per row (cpu::tokenLogprobsFinish's steps, in double).
__global__ void tokenLogprobsFinishKernel(const float *gathered,
                                          const int32_t *targets, int64_t rows,
                                          int64_t slices, float *logprobs,
                                          int32_t *greedy) {
  BRAID_GRID_STRIDE(r, rows) {
    const float *part = gathered + 4 * slices * r;
    if (targets[r] < 0) {
      logprobs[r] = 0.0f;
      greedy[r] = 0;
      continue;
    }
    int64_t best = -1;
    double m = -INFINITY, logit = 0;
    for (int64_t g = 0; g < slices; ++g) {
      logit += double(part[4 * g + 2]);
      if (part[4 * g + 3] < 0)
        continue;
      if (best < 0 || cpu::samplingKey(double(part[4 * g])) >
                          cpu::samplingKey(double(part[4 * best])))
        best = g;
      m = fmax(m, double(part[4 * g]));
    }
    double sum = 0;
    for (int64_t g = 0; g < slices; ++g)
      if (part[4 * g + 3] >= 0)
        sum += double(part[4 * g + 1]) * exp(double(part[4 * g]) - m);
    logprobs[r] = float(logit - (m + log(sum)));
    greedy[r] = best >= 0 && int64_t(part[4 * best + 3]) == int64_t(targets[r])
                    ? 1
                    : 0;
  }
}

/// One block per row (cpu::topLogprobs' steps), of kSampleThreads threads.
/// Dynamic shared memory: the k chosen ids, then their logits. With
/// `from.ids`, column i is the token from.ids[row · vocab + i] and the
/// normaliser the log-sum-exp of the row's from.lse.
template <typename T>
__global__ void topLogprobsKernel(const T *logits, int64_t vocab, int64_t n,
                                  int64_t k, float *values, int32_t *ids,
                                  Candidates<T> from) {
  __shared__ SampleShared sh;
  __shared__ float reduceMax[32];
  __shared__ double reduceSum[32];
  BRAID_DYNAMIC_SHARED(int32_t, chosen);
  float *chosenLogits = reinterpret_cast<float *>(chosen + k);
  const int64_t row = blockIdx.x;
  const T *x = logits + row * vocab;
  const int32_t *rowIds = from.ids ? from.ids + row * vocab : nullptr;
  // value = float((x - m) - logSum).
  double m, logSum;
  if (rowIds) {
    // The ranks' normalisers combined (by every thread alike): m the
    // log-sum-exp of their lse, as the CPU's.
    m = logSumExpOf(from.lse + row * from.lseCount, from.lseCount);
    logSum = 0;
  } else {
    float mf;
    double sum;
    blockNormaliser(x, n, reduceMax, reduceSum, mf, sum);
    m = double(mf);
    logSum = log(sum);
  }
  rankBest(
      x, n, k, [&](int64_t i) { return rowIds ? int64_t(rowIds[i]) : i; }, sh,
      chosen, chosenLogits,
      [&](int64_t rank, int32_t id, float logit) {
        ids[row * k + rank] = id;
        values[row * k + rank] = float((double(logit) - m) - logSum);
      });
}

/// A slice's k best of row `row` (blockIdx.x), slice blockIdx.y of `slices`
/// over the first n columns: its ids and logits ranked into
/// ids/logits[(row · slices + slice) · k, +k) (past the slice's columns, id
/// INT32_MAX and logit -infinity: after every column), its maximum and
/// sum(exp(x - maximum)) into stats[row · slices + slice] (exp in float,
/// summed in double, as blockNormaliser). Dynamic shared memory as
/// topLogprobsKernel's.
struct SliceStats {
  double sum;
  float max;
};

template <typename T>
__global__ void topLogprobsSliceKernel(const T *logits, int64_t vocab,
                                       int64_t n, int64_t k, int64_t slices,
                                       int32_t *sliceIds, float *sliceLogits,
                                       SliceStats *stats) {
  __shared__ SampleShared sh;
  __shared__ float reduceMax[32];
  __shared__ double reduceSum[32];
  BRAID_DYNAMIC_SHARED(int32_t, chosen);
  float *chosenLogits = reinterpret_cast<float *>(chosen + k);
  const int64_t row = blockIdx.x, slice = blockIdx.y;
  const int64_t width = (n + slices - 1) / slices;
  const int64_t begin = slice * width < n ? slice * width : n;
  const int64_t end = begin + width < n ? begin + width : n;
  const int64_t len = end - begin, kept = len < k ? len : k;
  const T *x = logits + row * vocab + begin;
  const int64_t at = row * slices + slice;
  float m;
  double sum;
  blockNormaliser(x, len, reduceMax, reduceSum, m, sum);
  if (threadIdx.x == 0)
    stats[at] = SliceStats{sum, m};
  int32_t *outIds = sliceIds + at * k;
  float *outLogits = sliceLogits + at * k;
  for (int64_t j = kept + threadIdx.x; j < k; j += blockDim.x) {
    outIds[j] = INT32_MAX;
    outLogits[j] = -INFINITY;
  }
  if (kept == 0)
    return; // the whole block alike
  rankBest(
      x, len, kept, [&](int64_t i) { return begin + i; }, sh, chosen,
      chosenLogits, [&](int64_t rank, int32_t id, float logit) {
        outIds[rank] = id;
        outLogits[rank] = logit;
      });
}

/// One block per row: the slices' candidates ranked (rankBest over
/// slices · k of them) and their sums combined into the row's normaliser.
__global__ void topLogprobsMergeKernel(const int32_t *sliceIds,
                                       const float *sliceLogits,
                                       const SliceStats *stats, int64_t k,
                                       int64_t slices, float *values,
                                       int32_t *ids) {
  __shared__ SampleShared sh;
  BRAID_DYNAMIC_SHARED(int32_t, chosen);
  float *chosenLogits = reinterpret_cast<float *>(chosen + k);
  const int64_t row = blockIdx.x;
  const SliceStats *st = stats + row * slices;
  // Every thread alike: m the largest slice maximum (fmaxf passes over a
  // NaN, as blockNormaliser), sum each slice's scaled to it.
  float mf = -INFINITY;
  for (int64_t g = 0; g < slices; ++g)
    mf = fmaxf(mf, st[g].max);
  double sum = 0;
  if (mf != -INFINITY)
    for (int64_t g = 0; g < slices; ++g)
      if (st[g].max != -INFINITY)
        sum += st[g].sum * exp(double(st[g].max) - double(mf));
  const double m = double(mf), logSum = log(sum);
  const int32_t *rowIds = sliceIds + row * slices * k;
  rankBest(
      sliceLogits + row * slices * k, slices * k, k,
      [&](int64_t i) { return int64_t(rowIds[i]); }, sh, chosen, chosenLogits,
      [&](int64_t rank, int32_t id, float logit) {
        ids[row * k + rank] = id;
        values[row * k + rank] = float((double(logit) - m) - logSum);
      });
}

/// One block per row (cpu::topCandidates' steps), of kSampleThreads
/// threads, over the row's `valid` first columns. Dynamic shared memory: the
/// k chosen ids, then their logits.
template <typename T>
__global__ void
topCandidatesKernel(const T *logits, int64_t cols, int64_t vocabStart,
                    int64_t valid, int64_t k, T *values, int32_t *ids, T *lse) {
  __shared__ SampleShared sh;
  __shared__ float reduceMax[32];
  __shared__ double reduceSum[32];
  BRAID_DYNAMIC_SHARED(int32_t, chosen);
  float *chosenLogits = reinterpret_cast<float *>(chosen + k);
  const int64_t row = blockIdx.x;
  const T *x = logits + row * cols;
  // lse = m + log(sum) over the valid columns.
  float m;
  double sum;
  blockNormaliser(x, valid, reduceMax, reduceSum, m, sum);
  if (threadIdx.x == 0)
    lse[row] = fromFloat<T>(m == -INFINITY ? m : float(double(m) + log(sum)));
  // The k best valid columns (ids vocabStart + j), then the empty slots.
  const int64_t best = std::min(k, valid);
  if (best > 0)
    rankBest(
        x, valid, best, [&](int64_t i) { return vocabStart + i; }, sh, chosen,
        chosenLogits,
        [&](int64_t rank, int32_t id, float) {
          values[row * k + rank] = x[id - vocabStart];
          ids[row * k + rank] = id;
        });
  for (int64_t j = best + threadIdx.x; j < k; j += blockDim.x) {
    values[row * k + j] = fromFloat<T>(-INFINITY);
    ids[row * k + j] = kNoCandidate;
  }
}

/// One thread per word W of x: row b's from the copy of its parent's.
template <typename W>
__global__ void reorderRowsKernel(W *x, const int32_t *parents, int64_t rows,
                                  int64_t rowWords, const W *scratch) {
  BRAID_GRID_STRIDE(i, rows * rowWords) {
    const int64_t b = i / rowWords, c = i % rowWords, p = parents[b];
    // Outside the rows: left as it was (the device cannot refuse it).
    if (p >= 0 && p < rows && p != b)
      x[i] = scratch[p * rowWords + c];
  }
}

template <typename W>
cudaError_t launchReorderRows(void *x, const int32_t *parents, int64_t rows,
                              int64_t rowBytes, const void *scratch,
                              cudaStream_t stream) {
  const int64_t rowWords = rowBytes / int64_t(sizeof(W));
  BRAID_LAUNCH(gridFor(rows * rowWords), kThreads, 0, stream,
               reorderRowsKernel<W>)
  (static_cast<W *>(x), parents, rows, rowWords,
   static_cast<const W *>(scratch));
  return cudaGetLastError();
}

} // namespace

int64_t attentionCachedSplits(const cpu::AttentionShape &s,
                              int64_t cacheLen) {
  if (s.headDim > kSplitMaxHeadDim)
    return 0;
  const int64_t units = s.batch * s.seq * s.heads;
  if (units <= 0 || cacheLen <= 0)
    return 1;
  const int64_t byKeys =
      (cacheLen + kCachedSplitMinKeys - 1) / kCachedSplitMinKeys;
  const int64_t byBlocks = (kCachedSplitBlocks + units - 1) / units;
  return std::max<int64_t>(1, std::min(byKeys, byBlocks));
}

int64_t attentionCachedWorkspaceBytes(const cpu::AttentionShape &s,
                                      int64_t cacheLen) {
  const int64_t splits = attentionCachedSplits(s, cacheLen);
  return splits > 1 ? s.batch * s.seq * s.heads * splits * (s.headDim + 2) *
                          int64_t(sizeof(float))
                    : 0;
}

template <typename T>
cudaError_t attentionCachedForward(const T *q, const T *k, const T *v,
                                   const int32_t *positions,
                                   const cpu::AttentionShape &s,
                                   int64_t cacheLen, T *cacheK, T *cacheV,
                                   T *out, float *workspace,
                                   cudaStream_t stream) {
  const int64_t width = s.kvHeads * s.headDim;
  if (s.batch * s.seq == 0)
    return cudaSuccess;
  if (width > 0) {
    BRAID_LAUNCH(gridFor(s.batch * width), kThreads, 0, stream,
                 cacheWriteKernel<T>)
    (k, v, positions, s.batch, s.seq, width, cacheLen, cacheK, cacheV);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  if (s.heads * s.headDim == 0)
    return cudaSuccess;
  if (const int64_t splits = attentionCachedSplits(s, cacheLen); splits > 0) {
    const int64_t units = s.batch * s.seq * s.heads;
    if (splits > 1 && !workspace)
      return cudaErrorInvalidValue;
    BRAID_LAUNCH(dim3(unsigned(units), unsigned(splits)), 32 * kSplitWarps, 0,
                 stream, attentionSplitKernel<T>)
    (q, positions, cacheK, cacheV, s, cacheLen, splits, out,
     splits > 1 ? workspace : nullptr);
    if (splits == 1)
      return cudaGetLastError();
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
    BRAID_LAUNCH(unsigned(units), 128, 0, stream,
                 attentionSplitCombineKernel<T>)
    (workspace, positions, s, cacheLen, splits, out);
    return cudaGetLastError();
  }
  size_t shared = size_t(2 * s.headDim + kAttentionThreads) * sizeof(float);
  BRAID_LAUNCH(unsigned(s.batch * s.seq * s.heads), kAttentionThreads, shared,
               stream, attentionCachedKernel<T>)
  (q, positions, cacheK, cacheV, s, cacheLen, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t takeRows(const T *x, const int32_t *index, int64_t batch,
                     int64_t seq, int64_t cols, T *y, cudaStream_t stream) {
  if (batch * cols == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(batch * cols), kThreads, 0, stream, takeRowsKernel<T>)
  (x, index, batch, seq, cols, y);
  return cudaGetLastError();
}

template <typename T>
cudaError_t sampleTokens(const T *logits, int64_t rows, int64_t vocab,
                         int64_t candidates, const float *settings,
                         const int32_t *seed, const int32_t *counters,
                         int32_t *ids, cudaStream_t stream,
                         const Candidates<T> &from) {
  const int64_t n = from.ids ? vocab : candidates;
  if (rows == 0 || n == 0)
    return cudaSuccess;
  BRAID_LAUNCH(unsigned(rows), kSampleThreads, 0, stream, sampleKernel<T>)
  (logits, vocab, n, settings, seed, counters, ids, from);
  return cudaGetLastError();
}

template <typename T>
cudaError_t tokenLogprobs(const T *logits, const int32_t *targets,
                          int64_t rows, int64_t columns, int64_t vocab,
                          float *logprobs, int32_t *greedy,
                          cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  BRAID_LAUNCH(unsigned(rows), kSampleThreads, 0, stream,
               tokenLogprobsKernel<T>)
  (logits, targets, columns, vocab, logprobs, greedy);
  return cudaGetLastError();
}

template <typename T>
cudaError_t tokenLogprobsPartial(const T *logits, const int32_t *targets,
                                 int64_t rows, int64_t columns,
                                 int64_t vocabStart, int64_t vocab,
                                 float *partial, cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  const int64_t valid = std::clamp<int64_t>(vocab - vocabStart, 0, columns);
  BRAID_LAUNCH(unsigned(rows), kSampleThreads, 0, stream,
               tokenLogprobsPartialKernel<T>)
  (logits, targets, columns, valid, vocabStart, partial);
  return cudaGetLastError();
}

cudaError_t tokenLogprobsFinish(const float *gathered, const int32_t *targets,
                                int64_t rows, int64_t slices, float *logprobs,
                                int32_t *greedy, cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(rows), kThreads, 0, stream, tokenLogprobsFinishKernel)
  (gathered, targets, rows, slices, logprobs, greedy);
  return cudaGetLastError();
}

int64_t topLogprobsSlices(int64_t rows, int64_t candidates, int64_t k) {
  // Slices of at least 1024 columns and 4 k (each narrows its columns to
  // a quarter or less), as many as make some 512 blocks in all.
  const int64_t width = std::max<int64_t>(1024, 4 * k);
  const int64_t byWidth = (candidates + width - 1) / width;
  const int64_t byBlocks = std::max<int64_t>(1, 512 / std::max<int64_t>(rows, 1));
  return std::max<int64_t>(1, std::min(byWidth, byBlocks));
}

int64_t topLogprobsWorkspaceBytes(int64_t rows, int64_t candidates,
                                  int64_t k) {
  const int64_t slices = topLogprobsSlices(rows, candidates, k);
  if (slices <= 1)
    return 0;
  // The ids, the logits, then the slices' stats (8-byte aligned).
  const int64_t candidateBytes = rows * slices * k * 8;
  return (candidateBytes + 7) / 8 * 8 +
         rows * slices * int64_t(sizeof(SliceStats));
}

template <typename T>
cudaError_t topLogprobs(const T *logits, int64_t rows, int64_t vocab,
                        int64_t candidates, int64_t k, float *values,
                        int32_t *ids, cudaStream_t stream,
                        const Candidates<T> &from, void *workspace) {
  if (rows == 0 || k == 0)
    return cudaSuccess;
  const int64_t slices = topLogprobsSlices(rows, candidates, k);
  if (workspace && !from.ids && slices > 1) {
    const size_t shared = size_t(k) * (sizeof(int32_t) + sizeof(float));
    int32_t *sliceIds = static_cast<int32_t *>(workspace);
    float *sliceLogits =
        reinterpret_cast<float *>(sliceIds + rows * slices * k);
    auto *stats = reinterpret_cast<SliceStats *>(
        static_cast<char *>(workspace) + (rows * slices * k * 8 + 7) / 8 * 8);
    BRAID_LAUNCH(dim3(unsigned(rows), unsigned(slices)), kSampleThreads,
                 shared, stream, topLogprobsSliceKernel<T>)
    (logits, vocab, candidates, k, slices, sliceIds, sliceLogits, stats);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
    BRAID_LAUNCH(unsigned(rows), kSampleThreads, shared, stream,
                 topLogprobsMergeKernel)
    (sliceIds, sliceLogits, stats, k, slices, values, ids);
    return cudaGetLastError();
  }
  BRAID_LAUNCH(unsigned(rows), kSampleThreads,
               size_t(k) * (sizeof(int32_t) + sizeof(float)), stream,
               topLogprobsKernel<T>)
  (logits, vocab, from.ids ? vocab : candidates, k, values, ids, from);
  return cudaGetLastError();
}

template <typename T>
cudaError_t topCandidates(const T *logits, int64_t rows, int64_t cols,
                          int64_t vocabStart, int64_t vocabSize, int64_t k,
                          T *values, int32_t *ids, T *lse,
                          cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  // The row's valid columns: [0, valid).
  const int64_t valid = std::clamp<int64_t>(vocabSize - vocabStart, 0, cols);
  BRAID_LAUNCH(unsigned(rows), kSampleThreads,
               size_t(k) * (sizeof(int32_t) + sizeof(float)), stream,
               topCandidatesKernel<T>)
  (logits, cols, vocabStart, valid, k, values, ids, lse);
  return cudaGetLastError();
}

cudaError_t reorderRows(void *x, const int32_t *parents, int64_t rows,
                        int64_t rowBytes, void *scratch, cudaStream_t stream) {
  if (rows * rowBytes == 0)
    return cudaSuccess;
  if (cudaError_t e = cudaMemcpyAsync(scratch, x, size_t(rows * rowBytes),
                                      cudaMemcpyDeviceToDevice, stream);
      e != cudaSuccess)
    return e;
  // In the widest words that the rows and both addresses are aligned to.
  auto aligned = [&](int64_t bytes) {
    return rowBytes % bytes == 0 &&
           reinterpret_cast<uintptr_t>(x) % bytes == 0 &&
           reinterpret_cast<uintptr_t>(scratch) % bytes == 0;
  };
  if (aligned(16))
    return launchReorderRows<uint4>(x, parents, rows, rowBytes, scratch,
                                    stream);
  if (aligned(4))
    return launchReorderRows<uint32_t>(x, parents, rows, rowBytes, scratch,
                                       stream);
  return launchReorderRows<uint8_t>(x, parents, rows, rowBytes, scratch,
                                    stream);
}

#define BRAID_INSTANTIATE(T)                                                   \
  template cudaError_t attentionCachedForward<T>(                              \
      const T *, const T *, const T *, const int32_t *,                        \
      const cpu::AttentionShape &, int64_t, T *, T *, T *, float *,            \
      cudaStream_t);                                                           \
  template cudaError_t takeRows<T>(const T *, const int32_t *, int64_t,        \
                                   int64_t, int64_t, T *, cudaStream_t);       \
  template cudaError_t sampleTokens<T>(                                        \
      const T *, int64_t, int64_t, int64_t, const float *, const int32_t *,    \
      const int32_t *, int32_t *, cudaStream_t, const Candidates<T> &);        \
  template cudaError_t tokenLogprobsPartial<T>(                                \
      const T *, const int32_t *, int64_t, int64_t, int64_t, int64_t, float *, \
      cudaStream_t);                                                           \
  template cudaError_t tokenLogprobs<T>(const T *, const int32_t *, int64_t,  \
                                        int64_t, int64_t, float *, int32_t *, \
                                        cudaStream_t);                         \
  template cudaError_t topLogprobs<T>(const T *, int64_t, int64_t, int64_t,    \
                                      int64_t, float *, int32_t *,             \
                                      cudaStream_t, const Candidates<T> &,     \
                                      void *);                                 \
  template cudaError_t topCandidates<T>(const T *, int64_t, int64_t, int64_t,  \
                                        int64_t, int64_t, T *, int32_t *, T *, \
                                        cudaStream_t);

BRAID_INSTANTIATE(float)
BRAID_INSTANTIATE(__nv_bfloat16)
BRAID_INSTANTIATE(__half)
#undef BRAID_INSTANTIATE

} // namespace braid::cuda
