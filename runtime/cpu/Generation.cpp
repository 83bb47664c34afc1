//===- Generation.cpp - CPU kernels of generation with a KV cache ---------===//
//
// Attention reads the cache as ATTENTION reads its keys: per (batch, head)
// unit, scores and sums in double. SAMPLE follows its definition literally
// (sorts, cumulative sums in order), on the integer weights of Sampling.h
// that make the CUDA kernel's radix selection agree with it exactly.
// TOP_LOGPROBS sorts each row's k most likely ids out of its candidates
// (a partial sort); REORDER_ROWS copies the rows out, then back by parent.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Generation.h"

#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/Philox.h"
#include "runtime/cpu/Sampling.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace braid::cpu {

//===-- Attention against the cache ---------------------------------------===//

template <typename T>
void attentionCachedForward(const T *q, const T *k, const T *v,
                            const int32_t *positions, const AttentionShape &s,
                            int64_t cacheLen, T *cacheK, T *cacheV, T *out) {
  const int64_t batch = s.batch, queries = s.seq, d = s.headDim;
  const int64_t qStride = s.heads * d, kvStride = s.kvHeads * d;
  auto inCache = [&](int64_t p) { return p >= 0 && p < cacheLen; };
  // The writes, all before any read: one unit per sequence, its rows in
  // order (a position given twice keeps the later row).
  parallelFor(batch, batch * queries * kvStride, [&](int64_t b) {
    for (int64_t t = 0; t < queries; ++t) {
      int64_t p = positions[b * queries + t];
      if (!inCache(p))
        continue;
      int64_t from = (b * queries + t) * kvStride;
      int64_t to = (b * cacheLen + p) * kvStride;
      std::copy_n(k + from, kvStride, cacheK + to);
      std::copy_n(v + from, kvStride, cacheV + to);
    }
  });
  std::vector<double> slopes(s.allHeads());
  alibiSlopes(s.allHeads(), slopes.data());
  // The (batch, head) pairs are independent problems, one unit each.
  auto pairBody = [&](int64_t pair) {
    int64_t b = pair / s.heads, h = pair % s.heads;
    int64_t kvOffset = s.kvHeadOf(h) * d;
    double slope = s.alibi ? slopes[s.headOffset + h] : 0.0;
    std::vector<double> scores, acc(d);
    for (int64_t t = 0; t < queries; ++t) {
      int64_t row = b * queries + t, p = positions[row];
      T *o = out + row * qStride + h * d;
      if (!inCache(p)) {
        std::fill_n(o, d, T(0));
        continue;
      }
      const T *qi = q + row * qStride + h * d;
      const T *keys = cacheK + b * cacheLen * kvStride + kvOffset;
      const T *values = cacheV + b * cacheLen * kvStride + kvOffset;
      scores.resize(p + 1);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= p; ++j) {
        const T *kj = keys + j * kvStride;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += double(qi[c]) * kj[c];
        scores[j] = dot * s.scale - slope * (p - j);
        m = std::max(m, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= p; ++j)
        sum += std::exp(scores[j] - m);
      double l = m + std::log(sum);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j <= p; ++j) {
        double weight = std::exp(scores[j] - l);
        const T *vj = values + j * kvStride;
        for (int64_t c = 0; c < d; ++c)
          acc[c] += weight * vj[c];
      }
      for (int64_t c = 0; c < d; ++c)
        o[c] = T(acc[c]);
    }
  };
  parallelFor(batch * s.heads,
              batch * s.heads * queries * cacheLen * std::max<int64_t>(d, 1),
              pairBody);
}

//===-- Rows --------------------------------------------------------------===//

template <typename T>
void takeRows(const T *x, const int32_t *index, int64_t batch, int64_t seq,
              int64_t cols, T *y) {
  parallelFor(batch, batch * cols, [&](int64_t b) {
    int64_t i = index[b];
    if (i < 0 || i >= seq)
      std::fill_n(y + b * cols, cols, T(0));
    else
      std::copy_n(x + (b * seq + i) * cols, cols, y + b * cols);
  });
}

//===-- Sampling ----------------------------------------------------------===//

absl::Status validateSamplingSettings(const float *settings) {
  float temperature = settings[0], topK = settings[1], topP = settings[2];
  if (!(temperature >= 0) || std::isinf(temperature))
    return absl::InvalidArgumentError(
        absl::StrCat("temperature = ", temperature,
                     " must be finite and >= 0 (0: the most likely token)"));
  if (!(topK >= 0) || std::isinf(topK))
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k = ", topK, " must be finite and >= 0 (0: every token)"));
  if (!(topP > 0 && topP <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("top_p = ", topP, " must be in (0, 1] (1: every token)"));
  return absl::OkStatus();
}

namespace {

/// The column of the largest key(i) among [0, n), of equal keys the one
/// of the lowest id(i).
template <typename Key, typename Id>
int64_t argmaxOf(int64_t n, Key key, Id id) {
  int64_t best = 0;
  uint64_t bestKey = key(0);
  int64_t bestId = id(0);
  for (int64_t i = 1; i < n; ++i)
    if (uint64_t ki = key(i);
        ki > bestKey || (ki == bestKey && id(i) < bestId)) {
      best = i;
      bestKey = ki;
      bestId = id(i);
    }
  return best;
}

/// One row's column (Generation.h, sampleTokens): `id(i)` is column i's
/// token, `scale` the vocabulary's size that samplingRule's limit and the
/// weights' shift take.
template <typename T, typename Id>
int64_t sampleRow(const T *logits, int64_t n, const SamplingRule &rule,
                  int64_t scale, Id id, uint64_t seed, uint32_t counter,
                  uint32_t row) {
  if (rule.greedy)
    return argmaxOf(
        n, [&](int64_t i) { return samplingKey(double(logits[i])); }, id);
  std::vector<double> z(n);
  std::vector<uint64_t> key(n);
  for (int64_t i = 0; i < n; ++i) {
    z[i] = double(logits[i]) / rule.temperature;
    key[i] = samplingKey(z[i]);
  }
  const int64_t top = argmaxOf(n, [&](int64_t i) { return key[i]; }, id);
  // top-k: the k-th largest z and every token with at least as much.
  uint64_t least = 0;
  if (rule.topK > 0 && rule.topK <= n) {
    std::vector<uint64_t> sorted = key;
    std::nth_element(sorted.begin(), sorted.begin() + (rule.topK - 1),
                     sorted.end(), std::greater<uint64_t>());
    least = sorted[rule.topK - 1];
  }
  // The kept tokens most likely first, equal z by ascending id.
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i)
    if (key[i] >= least)
      order.push_back(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return key[a] != key[b] ? key[a] > key[b] : id(a) < id(b);
  });
  const int shift = samplingWeightShift(scale);
  std::vector<uint64_t> weight(n, 0);
  uint64_t total = 0;
  for (int64_t i : order) {
    weight[i] = samplingWeight(z[i], z[top], shift);
    total += weight[i];
  }
  // top-p: least likely first, drop while the cumulative weight is at most
  // the limit; never the most likely (order[0]).
  if (rule.topP < 1) {
    uint64_t limit = samplingTopPLimit(rule.topP, total), cumulative = 0;
    for (size_t r = order.size(); r-- > 1;) {
      cumulative += weight[order[r]];
      if (cumulative > limit)
        break;
      total -= weight[order[r]];
      weight[order[r]] = 0;
    }
  }
  if (total == 0)
    return top;
  uint64_t target = samplingTarget(samplingBits(seed, counter, row), total);
  uint64_t cumulative = 0;
  for (int64_t i : order) {
    cumulative += weight[i];
    if (cumulative > target)
      return i;
  }
  return order.back(); // not reached: the cumulative ends at total > target
}

} // namespace

template <typename T>
void sampleTokens(const T *logits, int64_t rows, int64_t vocab,
                  int64_t candidates, const float *settings, uint64_t seed,
                  const int32_t *counters, int32_t *ids,
                  const Candidates<T> &from) {
  const int64_t n = from.ids ? vocab : candidates;
  const int64_t scale = from.ids ? from.vocabSize : candidates;
  SamplingRule rule =
      samplingRule(settings[0], settings[1], settings[2], scale);
  parallelFor(rows, rows * n * kTranscendentalCost, [&](int64_t r) {
    const int32_t *rowIds = from.ids ? from.ids + r * vocab : nullptr;
    auto id = [&](int64_t i) { return rowIds ? int64_t(rowIds[i]) : i; };
    ids[r] = int32_t(id(sampleRow(logits + r * vocab, n, rule, scale, id, seed,
                                  uint32_t(counters[r]), uint32_t(r))));
  });
}

//===-- Beam search -------------------------------------------------------===//

namespace {

/// The k first columns of x [n] by descending logit (samplingKey's order),
/// equal logits by ascending id(i), into order[0, k).
template <typename T, typename Id>
void bestColumns(const T *x, int64_t n, int64_t k, Id id,
                 std::vector<int64_t> &order) {
  std::vector<uint64_t> key(n);
  order.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    key[i] = samplingKey(double(x[i]));
    order[i] = i;
  }
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) {
                      return key[a] != key[b] ? key[a] > key[b]
                                              : id(a) < id(b);
                    });
}

/// log(sum exp(x_i)) over x [n] in double: m + log(sum exp(x - m)), m the
/// maximum (a NaN is never the maximum; it makes the sum NaN); -infinity
/// when n is 0 or every x is -infinity.
template <typename T> double logSumExp(const T *x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i)
    if (double(x[i]) > m)
      m = double(x[i]);
  if (m == -std::numeric_limits<double>::infinity())
    return m;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp(double(x[i]) - m);
  return m + std::log(sum);
}

} // namespace

template <typename T>
void tokenLogprobs(const T *logits, const int32_t *targets, int64_t rows,
                   int64_t columns, int64_t vocab, float *logprobs,
                   int32_t *greedy) {
  parallelFor(rows, rows * vocab * kTranscendentalCost, [&](int64_t r) {
    const int32_t target = targets[r];
    if (target < 0) {
      logprobs[r] = 0;
      greedy[r] = 0;
      return;
    }
    const T *x = logits + r * columns;
    // The first column of the largest logit, ranked as TOP_LOGPROBS ranks.
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (samplingKey(double(x[i])) > samplingKey(double(x[best])))
        best = i;
    logprobs[r] = float(double(x[target]) - logSumExp(x, vocab));
    greedy[r] = best == int64_t(target) ? 1 : 0;
  });
}

template <typename T, typename P>
void tokenLogprobsPartial(const T *logits, const int32_t *targets,
                          int64_t rows, int64_t columns, int64_t vocabStart,
                          int64_t vocab, P *partial) {
  const int64_t valid =
      std::clamp<int64_t>(vocab - vocabStart, 0, columns);
  parallelFor(rows, rows * valid * kTranscendentalCost, [&](int64_t r) {
    const T *x = logits + r * columns;
    P *out = partial + 4 * r;
    if (valid == 0) {
      out[0] = -std::numeric_limits<P>::infinity();
      out[1] = 0;
      out[2] = 0;
      out[3] = -1;
      return;
    }
    int64_t best = 0;
    for (int64_t i = 1; i < valid; ++i)
      if (samplingKey(double(x[i])) > samplingKey(double(x[best])))
        best = i;
    const double m = double(x[best]);
    double sum = 0;
    for (int64_t i = 0; i < valid; ++i)
      sum += std::exp(double(x[i]) - m);
    const int64_t target = int64_t(targets[r]) - vocabStart;
    out[0] = P(m);
    out[1] = P(sum);
    out[2] = targets[r] >= 0 && target >= 0 && target < valid
                 ? P(double(x[target]))
                 : P(0);
    out[3] = P(vocabStart + best);
  });
}

template <typename P>
void tokenLogprobsFinish(const P *gathered, const int32_t *targets,
                         int64_t rows, int64_t slices, float *logprobs,
                         int32_t *greedy) {
  parallelFor(rows, rows * slices * kTranscendentalCost, [&](int64_t r) {
    const P *part = gathered + 4 * slices * r;
    if (targets[r] < 0) {
      logprobs[r] = 0;
      greedy[r] = 0;
      return;
    }
    // The first slice whose most likely logit ranks highest, and the
    // largest logit.
    int64_t best = -1;
    double m = -std::numeric_limits<double>::infinity(), logit = 0;
    for (int64_t g = 0; g < slices; ++g) {
      logit += double(part[4 * g + 2]);
      if (part[4 * g + 3] < 0)
        continue;
      if (best < 0 || samplingKey(double(part[4 * g])) >
                          samplingKey(double(part[4 * best])))
        best = g;
      m = std::max(m, double(part[4 * g]));
    }
    double sum = 0;
    for (int64_t g = 0; g < slices; ++g)
      if (part[4 * g + 3] >= 0)
        sum += double(part[4 * g + 1]) * std::exp(double(part[4 * g]) - m);
    logprobs[r] = float(logit - (m + std::log(sum)));
    greedy[r] =
        best >= 0 && int64_t(part[4 * best + 3]) == int64_t(targets[r]) ? 1
                                                                        : 0;
  });
}

template <typename T>
void topLogprobs(const T *logits, int64_t rows, int64_t vocab,
                 int64_t candidates, int64_t k, float *values, int32_t *ids,
                 const Candidates<T> &from) {
  const int64_t n = from.ids ? vocab : candidates;
  parallelFor(rows, rows * n * kTranscendentalCost, [&](int64_t r) {
    const T *x = logits + r * vocab;
    const int32_t *rowIds = from.ids ? from.ids + r * vocab : nullptr;
    auto id = [&](int64_t i) { return rowIds ? int64_t(rowIds[i]) : i; };
    std::vector<int64_t> order;
    bestColumns(x, n, k, id, order);
    if (from.ids) {
      // The ranks' normalisers combined: the log-sum-exp of their lse.
      const double lse = logSumExp(from.lse + r * from.lseCount, from.lseCount);
      for (int64_t j = 0; j < k; ++j) {
        ids[r * k + j] = int32_t(id(order[j]));
        values[r * k + j] = float(double(x[order[j]]) - lse);
      }
      return;
    }
    // The normaliser, in double: m and log(sum exp(x - m)).
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < candidates; ++i)
      if (double(x[i]) > m)
        m = double(x[i]);
    double sum = 0;
    for (int64_t i = 0; i < candidates; ++i)
      sum += std::exp(double(x[i]) - m);
    const double logSum = std::log(sum);
    for (int64_t j = 0; j < k; ++j) {
      ids[r * k + j] = int32_t(order[j]);
      values[r * k + j] = float((double(x[order[j]]) - m) - logSum);
    }
  });
}

template <typename T>
void topCandidates(const T *logits, int64_t rows, int64_t cols,
                   int64_t vocabStart, int64_t vocabSize, int64_t k,
                   T *values, int32_t *ids, T *lse) {
  // The rank's valid columns: [0, valid).
  const int64_t valid =
      std::clamp<int64_t>(vocabSize - vocabStart, 0, cols);
  parallelFor(rows, rows * valid * kTranscendentalCost, [&](int64_t r) {
    const T *x = logits + r * cols;
    std::vector<int64_t> order;
    const int64_t chosen = std::min(k, valid);
    bestColumns(x, valid, chosen, [&](int64_t i) { return vocabStart + i; },
                order);
    for (int64_t j = 0; j < k; ++j) {
      const bool has = j < chosen;
      values[r * k + j] =
          has ? x[order[j]] : T(-std::numeric_limits<double>::infinity());
      ids[r * k + j] = has ? int32_t(vocabStart + order[j]) : kNoCandidate;
    }
    lse[r] = T(logSumExp(x, valid));
  });
}

template <typename T>
void reorderRows(T *x, const int32_t *parents, int64_t rows, int64_t cols,
                 T *scratch) {
  parallelBlocks(rows * cols, kElementBlock, 1,
                 [&](int64_t begin, int64_t end) {
                   std::copy(x + begin, x + end, scratch + begin);
                 });
  parallelFor(rows, rows * cols, [&](int64_t b) {
    const int64_t p = parents[b];
    // Outside the rows: unchanged (as the CUDA kernel, which cannot refuse
    // it).
    if (p < 0 || p >= rows || p == b)
      return;
    std::copy_n(scratch + p * cols, cols, x + b * cols);
  });
}

//===-- Instantiations ----------------------------------------------------===//

#define BRAID_INSTANTIATE(T)                                                   \
  template void attentionCachedForward<T>(                                     \
      const T *, const T *, const T *, const int32_t *,                        \
      const AttentionShape &, int64_t, T *, T *, T *);                         \
  template void takeRows<T>(const T *, const int32_t *, int64_t, int64_t,      \
                            int64_t, T *);                                     \
  template void sampleTokens<T>(const T *, int64_t, int64_t, int64_t,          \
                                const float *, uint64_t, const int32_t *,      \
                                int32_t *, const Candidates<T> &);             \
  template void tokenLogprobs<T>(const T *, const int32_t *, int64_t, int64_t, \
                                 int64_t, float *, int32_t *);                 \
  template void topLogprobs<T>(const T *, int64_t, int64_t, int64_t, int64_t,  \
                               float *, int32_t *, const Candidates<T> &);     \
  template void topCandidates<T>(const T *, int64_t, int64_t, int64_t,         \
                                 int64_t, int64_t, T *, int32_t *, T *);       \
  template void reorderRows<T>(T *, const int32_t *, int64_t, int64_t, T *);

BRAID_INSTANTIATE(float)
BRAID_INSTANTIATE(double)
#undef BRAID_INSTANTIATE

template void tokenLogprobsPartial<float, float>(const float *,
                                                 const int32_t *, int64_t,
                                                 int64_t, int64_t, int64_t,
                                                 float *);
template void tokenLogprobsPartial<double, double>(const double *,
                                                   const int32_t *, int64_t,
                                                   int64_t, int64_t, int64_t,
                                                   double *);
template void tokenLogprobsFinish<float>(const float *, const int32_t *,
                                         int64_t, int64_t, float *, int32_t *);
template void tokenLogprobsFinish<double>(const double *, const int32_t *,
                                          int64_t, int64_t, float *,
                                          int32_t *);

} // namespace braid::cpu
