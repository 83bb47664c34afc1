//===- GenerationKernelsTest.cpp - Generation's CPU kernels ---------------===//
//
// ROPE_AT, ATTENTION_CACHED, TAKE_ROWS, SAMPLE, TOP_LOGPROBS and
// REORDER_ROWS (runtime/cpu/Generation.h) against references written here
// from the kernels' definitions (plan.proto and Generation.h), in double:
// the rotation formula, a cache written row by row and a softmax per query
// over its positions with ALiBi's slopes (Press et al.), for SAMPLE the
// distribution Hugging Face's temperature, top-k and top-p warpers leave,
// which 20000 draws must fit (a chi-square test), for TOP_LOGPROBS a stable
// sort of the candidates by logit and log_softmax, and for REORDER_ROWS the
// rows gathered from a copy. ROPE_AT is also checked against ROPE itself
// where their positions agree.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Generation.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Philox.h"

#include "TestData.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <vector>

using namespace braid::cpu;
using braid::test::expectSameOnOneAndFour;
using braid::test::randomVec;
using braid::test::sameBits;

namespace {

template <typename T> double tolerance() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-12;
}

template <typename T> class GenerationKernels : public ::testing::Test {
protected:
  void TearDown() override { setNumThreads(0); }
};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GenerationKernels, Types);

//===-- ROPE_AT -----------------------------------------------------------===//

TYPED_TEST(GenerationKernels, RopeAtIsRopeAtTheSequencesPositions) {
  using T = TypeParam;
  const int64_t batch = 2, seq = 5, heads = 3, headDim = 8;
  auto x = randomVec<T>(batch * seq * heads * headDim, 1);
  std::vector<int32_t> positions(batch * seq);
  for (int64_t r = 0; r < batch * seq; ++r)
    positions[r] = int32_t(r % seq);
  std::vector<T> rope(x.size()), at(x.size());
  ropeForward(x.data(), batch, seq, heads, headDim, 10000.0, rope.data());
  ropeAtForward(x.data(), positions.data(), batch, seq, heads, headDim, 10000.0,
                at.data());
  EXPECT_TRUE(sameBits(rope, at));
}

TYPED_TEST(GenerationKernels, RopeAtRotatesByItsPositions) {
  using T = TypeParam;
  const int64_t batch = 2, seq = 3, heads = 2, headDim = 6, half = 3;
  const double theta = 500.0;
  auto x = randomVec<T>(batch * seq * heads * headDim, 2);
  std::vector<int32_t> positions = {7, 0, 4095, 3, 3, 100};
  std::vector<T> y(x.size());
  ropeAtForward(x.data(), positions.data(), batch, seq, heads, headDim, theta,
                y.data());
  // Pair (i, i + half) of each head turned by p · theta^(-2i / headDim).
  for (int64_t r = 0; r < batch * seq; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        int64_t at = (r * heads + h) * headDim + i;
        double angle = positions[r] * std::pow(theta, -2.0 * i / headDim);
        double x1 = x[at], x2 = x[at + half];
        EXPECT_NEAR(y[at], x1 * std::cos(angle) - x2 * std::sin(angle),
                    tolerance<T>());
        EXPECT_NEAR(y[at + half], x2 * std::cos(angle) + x1 * std::sin(angle),
                    tolerance<T>());
      }
  // In place, as an executor may run it.
  std::vector<T> inPlace = x;
  ropeAtForward(inPlace.data(), positions.data(), batch, seq, heads, headDim,
                theta, inPlace.data());
  EXPECT_TRUE(sameBits(inPlace, y));
}

//===-- ATTENTION_CACHED --------------------------------------------------===//

/// ALiBi's slopes of n heads, from the paper: the geometric sequence
/// 2^(-8/n), 2^(-16/n), ... for n a power of two; otherwise that of the
/// largest power of two p below n, then every other slope of 2p's sequence.
std::vector<double> referenceSlopes(int64_t n) {
  auto powerOfTwo = [](int64_t m) {
    std::vector<double> s;
    for (int64_t i = 1; i <= m; ++i)
      s.push_back(std::pow(2.0, -8.0 * i / m));
    return s;
  };
  int64_t p = 1;
  while (p * 2 <= n)
    p *= 2;
  std::vector<double> slopes = powerOfTwo(p), twice = powerOfTwo(2 * p);
  for (int64_t j = 0; int64_t(slopes.size()) < n; j += 2)
    slopes.push_back(twice[j]);
  return slopes;
}

/// The definition, on caches of [batch, cacheLen, kvHeads · d]: the rows
/// written one after the other, then every query against its positions.
template <typename T>
void referenceCached(const std::vector<T> &q, const std::vector<T> &k,
                     const std::vector<T> &v,
                     const std::vector<int32_t> &positions,
                     const AttentionShape &s, int64_t cacheLen,
                     std::vector<T> &cacheK, std::vector<T> &cacheV,
                     std::vector<double> &out) {
  const int64_t d = s.headDim, kvw = s.kvHeads * d, qw = s.heads * d;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t c = 0; c < kvw; ++c) {
        int64_t p = positions[b * s.seq + t];
        cacheK[(b * cacheLen + p) * kvw + c] = k[(b * s.seq + t) * kvw + c];
        cacheV[(b * cacheLen + p) * kvw + c] = v[(b * s.seq + t) * kvw + c];
      }
  std::vector<double> slopes = referenceSlopes(s.heads);
  out.assign(q.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t h = 0; h < s.heads; ++h) {
        int64_t p = positions[b * s.seq + t];
        int64_t g = h / (s.heads / s.kvHeads);
        std::vector<double> e(p + 1);
        double m = -INFINITY;
        for (int64_t j = 0; j <= p; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(q[(b * s.seq + t) * qw + h * d + c]) *
                   double(cacheK[(b * cacheLen + j) * kvw + g * d + c]);
          e[j] = dot * s.scale - (s.alibi ? slopes[h] * (p - j) : 0.0);
          m = std::max(m, e[j]);
        }
        double sum = 0;
        for (double &x : e)
          sum += x = std::exp(x - m);
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j <= p; ++j)
            acc += e[j] / sum *
                   double(cacheV[(b * cacheLen + j) * kvw + g * d + c]);
          out[(b * s.seq + t) * qw + h * d + c] = acc;
        }
      }
}

template <typename T>
void expectNear(const std::vector<T> &got, const std::vector<double> &want,
                double tol, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(double(got[i]), want[i], tol * (1 + std::abs(want[i])))
        << what << " element " << i;
}

// Two sequences with GQA (6 heads in 3 groups, a count that is not a power
// of two for ALiBi): sequence 0 prefills positions 0..3 into an empty
// cache, sequence 1 positions 3..6 after an earlier call wrote 0..2; then
// one decode step each.
TYPED_TEST(GenerationKernels, AttentionCachedPrefillThenDecode) {
  using T = TypeParam;
  const int64_t batch = 2, chunk = 4, heads = 6, kvHeads = 3, d = 8,
                cacheLen = 10;
  const int64_t kvw = kvHeads * d;
  for (bool alibi : {true, false}) {
    SCOPED_TRACE(alibi ? "alibi" : "no bias");
    AttentionShape s{batch, chunk, heads, kvHeads, d, 0.35, true, alibi};
    auto q = randomVec<T>(batch * chunk * heads * d, 3);
    auto k = randomVec<T>(batch * chunk * kvw, 4);
    auto v = randomVec<T>(batch * chunk * kvw, 5);
    // Sequence 1's positions 0..2 from an earlier call; the rest never
    // written (NaN: a read of them would show).
    std::vector<T> cacheK(batch * cacheLen * kvw,
                          std::numeric_limits<T>::quiet_NaN());
    std::vector<T> cacheV = cacheK;
    auto earlierK = randomVec<T>(3 * kvw, 6),
         earlierV = randomVec<T>(3 * kvw, 7);
    std::copy(earlierK.begin(), earlierK.end(),
              cacheK.begin() + cacheLen * kvw);
    std::copy(earlierV.begin(), earlierV.end(),
              cacheV.begin() + cacheLen * kvw);
    std::vector<int32_t> positions = {0, 1, 2, 3, 3, 4, 5, 6};

    std::vector<T> wantK = cacheK, wantV = cacheV;
    std::vector<double> want;
    referenceCached(q, k, v, positions, s, cacheLen, wantK, wantV, want);
    std::vector<T> out(q.size());
    attentionCachedForward(q.data(), k.data(), v.data(), positions.data(), s,
                           cacheLen, cacheK.data(), cacheV.data(), out.data());
    expectNear(out, want, tolerance<T>(), "prefill out");
    EXPECT_TRUE(sameBits(cacheK, wantK));
    EXPECT_TRUE(sameBits(cacheV, wantV));

    // The decode step: one token each, at the next position.
    s.seq = 1;
    auto q1 = randomVec<T>(batch * heads * d, 8);
    auto k1 = randomVec<T>(batch * kvw, 9), v1 = randomVec<T>(batch * kvw, 10);
    std::vector<int32_t> next = {4, 7};
    referenceCached(q1, k1, v1, next, s, cacheLen, wantK, wantV, want);
    std::vector<T> out1(q1.size());
    attentionCachedForward(q1.data(), k1.data(), v1.data(), next.data(), s,
                           cacheLen, cacheK.data(), cacheV.data(), out1.data());
    expectNear(out1, want, tolerance<T>(), "decode out");
    EXPECT_TRUE(sameBits(cacheK, wantK));
    EXPECT_TRUE(sameBits(cacheV, wantV));
  }
}

// A chunk's queries see its own earlier rows (written first) and nothing
// after their position: changing row 2's key and value changes the outputs
// of queries 2 and 3 only.
TYPED_TEST(GenerationKernels, AttentionCachedChunkAttendsToItself) {
  using T = TypeParam;
  const int64_t chunk = 4, heads = 2, d = 4, cacheLen = 6;
  AttentionShape s{1, chunk, heads, 1, d, 0.5, true, true};
  auto q = randomVec<T>(chunk * heads * d, 11);
  auto k = randomVec<T>(chunk * d, 12), v = randomVec<T>(chunk * d, 13);
  std::vector<int32_t> positions = {0, 1, 2, 3};
  auto run = [&](const std::vector<T> &keys, const std::vector<T> &values) {
    std::vector<T> cacheK(cacheLen * d, std::numeric_limits<T>::quiet_NaN());
    std::vector<T> cacheV = cacheK, out(q.size());
    attentionCachedForward(q.data(), keys.data(), values.data(),
                           positions.data(), s, cacheLen, cacheK.data(),
                           cacheV.data(), out.data());
    return out;
  };
  std::vector<T> before = run(k, v);
  for (T x : before)
    EXPECT_TRUE(std::isfinite(double(x)));
  std::vector<T> k2 = k, v2 = v;
  for (int64_t c = 0; c < d; ++c) {
    k2[2 * d + c] += T(1);
    v2[2 * d + c] -= T(2);
  }
  std::vector<T> after = run(k2, v2);
  for (int64_t t = 0; t < chunk; ++t)
    for (int64_t i = 0; i < heads * d; ++i) {
      int64_t at = t * heads * d + i;
      if (t < 2)
        EXPECT_EQ(before[at], after[at]) << "query " << t;
      else
        EXPECT_NE(before[at], after[at]) << "query " << t;
    }
}

// A head slice (tensor parallelism): query heads 2..3 of 4 and kv head 1 of
// 2, each with its global head's slope and kv head.
TYPED_TEST(GenerationKernels, AttentionCachedHeadSlice) {
  using T = TypeParam;
  const int64_t heads = 4, kvHeads = 2, d = 4, chunk = 3, cacheLen = 5;
  AttentionShape whole{1, chunk, heads, kvHeads, d, 0.5, true, true};
  auto q = randomVec<T>(chunk * heads * d, 14);
  auto k = randomVec<T>(chunk * kvHeads * d, 15),
       v = randomVec<T>(chunk * kvHeads * d, 16);
  std::vector<int32_t> positions = {1, 2, 3};
  std::vector<T> cacheK(cacheLen * kvHeads * d, T(0.25)), cacheV = cacheK;
  std::vector<T> wantK = cacheK, wantV = cacheV;
  std::vector<double> want;
  referenceCached(q, k, v, positions, whole, cacheLen, wantK, wantV, want);
  // The slice's buffers: q's heads 2..3, k's and v's kv head 1.
  AttentionShape slice = whole;
  slice.heads = 2;
  slice.kvHeads = 1;
  slice.globalHeads = heads;
  slice.globalKvHeads = kvHeads;
  slice.headOffset = 2;
  slice.kvHeadOffset = 1;
  std::vector<T> qs, ks, vs, cks(cacheLen * d, T(0.25)), cvs = cks;
  for (int64_t t = 0; t < chunk; ++t) {
    qs.insert(qs.end(), q.begin() + (t * heads + 2) * d,
              q.begin() + (t * heads + 4) * d);
    ks.insert(ks.end(), k.begin() + (t * kvHeads + 1) * d,
              k.begin() + (t * kvHeads + 2) * d);
    vs.insert(vs.end(), v.begin() + (t * kvHeads + 1) * d,
              v.begin() + (t * kvHeads + 2) * d);
  }
  std::vector<T> out(qs.size());
  attentionCachedForward(qs.data(), ks.data(), vs.data(), positions.data(),
                         slice, cacheLen, cks.data(), cvs.data(), out.data());
  for (int64_t t = 0; t < chunk; ++t)
    for (int64_t c = 0; c < 2 * d; ++c)
      EXPECT_NEAR(out[t * 2 * d + c], want[(t * heads + 2) * d + c],
                  tolerance<T>() *
                      (1 + std::abs(want[(t * heads + 2) * d + c])));
}

// Positions outside the cache: no write, zeros out (what the device does;
// the executor refuses them first).
TYPED_TEST(GenerationKernels, AttentionCachedOutsideTheCache) {
  using T = TypeParam;
  AttentionShape s{1, 2, 1, 1, 2, 1.0, true, false};
  std::vector<T> q = {1, 2, 3, 4}, k = {5, 6, 7, 8}, v = {9, 10, 11, 12};
  std::vector<T> cacheK(4, T(-1)), cacheV(4, T(-1)), out(4, T(7));
  std::vector<int32_t> positions = {2, 0};
  attentionCachedForward(q.data(), k.data(), v.data(), positions.data(), s, 2,
                         cacheK.data(), cacheV.data(), out.data());
  EXPECT_EQ(cacheK, (std::vector<T>{7, 8, -1, -1}));
  EXPECT_EQ(cacheV, (std::vector<T>{11, 12, -1, -1}));
  EXPECT_EQ(out, (std::vector<T>{0, 0, 11, 12}));
}

TYPED_TEST(GenerationKernels, AttentionCachedSameOnOneAndFourThreads) {
  using T = TypeParam;
  const int64_t batch = 3, chunk = 16, heads = 8, kvHeads = 2, d = 16,
                cacheLen = 64;
  AttentionShape s{batch, chunk, heads, kvHeads, d, 0.25, true, true};
  auto q = randomVec<T>(batch * chunk * heads * d, 17);
  auto k = randomVec<T>(batch * chunk * kvHeads * d, 18);
  auto v = randomVec<T>(batch * chunk * kvHeads * d, 19);
  auto cache0 = randomVec<T>(batch * cacheLen * kvHeads * d, 20);
  std::vector<int32_t> positions(batch * chunk);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < chunk; ++t)
      positions[b * chunk + t] = int32_t(10 * b + t);
  std::vector<T> cacheK, cacheV, out(q.size());
  expectSameOnOneAndFour<T>(
      {&cacheK, &cacheV, &out},
      [&] {
        cacheK = cache0;
        cacheV = cache0;
      },
      [&] {
        attentionCachedForward(q.data(), k.data(), v.data(), positions.data(),
                               s, cacheLen, cacheK.data(), cacheV.data(),
                               out.data());
      });
}

//===-- TAKE_ROWS ---------------------------------------------------------===//

TYPED_TEST(GenerationKernels, TakeRows) {
  using T = TypeParam;
  const int64_t batch = 3, seq = 4, cols = 5;
  auto x = randomVec<T>(batch * seq * cols, 21);
  std::vector<int32_t> index = {3, 0, 2};
  std::vector<T> y(batch * cols);
  takeRows(x.data(), index.data(), batch, seq, cols, y.data());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(y[b * cols + c], x[(b * seq + index[b]) * cols + c]);
  // Outside the rows: zeros.
  std::vector<int32_t> bad = {-1, 4, 1};
  takeRows(x.data(), bad.data(), batch, seq, cols, y.data());
  for (int64_t c = 0; c < cols; ++c) {
    EXPECT_EQ(y[c], T(0));
    EXPECT_EQ(y[cols + c], T(0));
    EXPECT_EQ(y[2 * cols + c], x[(2 * seq + 1) * cols + c]);
  }
}

//===-- SAMPLE ------------------------------------------------------------===//

/// Rows copies of one row of logits, and the ids drawn for them, row r at
/// counter r.
template <typename T>
std::vector<int32_t> drawRows(const std::vector<double> &logits, int64_t rows,
                              int64_t candidates, std::vector<float> settings,
                              uint64_t seed, int32_t firstCounter = 0) {
  const int64_t vocab = int64_t(logits.size());
  std::vector<T> all(rows * vocab);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < vocab; ++i)
      all[r * vocab + i] = T(logits[i]);
  std::vector<int32_t> counters(rows), ids(rows, -1);
  std::iota(counters.begin(), counters.end(), firstCounter);
  sampleTokens(all.data(), rows, vocab, candidates, settings.data(), seed,
               counters.data(), ids.data());
  return ids;
}

/// The distribution Hugging Face's warpers leave (temperature, then top-k
/// keeping ties, then top-p keeping the most likely), from the definition,
/// in double.
std::vector<double> expectedDistribution(const std::vector<double> &logits,
                                         double temperature, int64_t topK,
                                         double topP) {
  const int64_t n = int64_t(logits.size());
  std::vector<double> z(n);
  for (int64_t i = 0; i < n; ++i)
    z[i] = logits[i] / temperature;
  std::vector<bool> kept(n, true);
  if (topK > 0 && topK < n) {
    std::vector<double> sorted = z;
    std::sort(sorted.rbegin(), sorted.rend());
    for (int64_t i = 0; i < n; ++i)
      kept[i] = z[i] >= sorted[topK - 1];
  }
  auto softmax = [&] {
    double m = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; ++i)
      if (kept[i])
        m = std::max(m, z[i]);
    std::vector<double> p(n, 0.0);
    for (int64_t i = 0; i < n; ++i)
      if (kept[i])
        sum += p[i] = std::exp(z[i] - m);
    for (double &x : p)
      x /= sum;
    return p;
  };
  if (topP < 1) {
    std::vector<double> p = softmax();
    std::vector<int64_t> ascending;
    for (int64_t i = 0; i < n; ++i)
      if (kept[i])
        ascending.push_back(i);
    std::sort(ascending.begin(), ascending.end(),
              [&](int64_t a, int64_t b) { return z[a] < z[b]; });
    double cumulative = 0;
    for (size_t r = 0; r + 1 < ascending.size(); ++r) {
      cumulative += p[ascending[r]];
      if (cumulative <= 1 - topP)
        kept[ascending[r]] = false;
    }
  }
  return softmax();
}

/// Pearson's statistic of `counts` against `expected` probabilities, over
/// the tokens expected at all; tokens with probability 0 must never come.
double chiSquare(const std::vector<int32_t> &ids,
                 const std::vector<double> &expected, int *freedom) {
  std::vector<int64_t> counts(expected.size(), 0);
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, int32_t(expected.size()));
    if (id >= 0 && id < int32_t(expected.size()))
      ++counts[id];
  }
  double statistic = 0;
  *freedom = -1;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is truncated away";
      continue;
    }
    double e = expected[i] * double(ids.size());
    statistic += (counts[i] - e) * (counts[i] - e) / e;
    ++*freedom;
  }
  return statistic;
}

/// The 0.999 quantile of the chi-square distribution with 1..7 degrees of
/// freedom (standard tables, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.4).
double chiSquare999(int freedom) {
  static const double kQuantiles[] = {10.828, 13.816, 16.266, 18.467,
                                      20.515, 22.458, 24.322};
  return kQuantiles[freedom - 1];
}

// Eight tokens with probabilities 0.30 .. 0.02 (at temperature 1), not in
// the order of their ids.
const std::vector<double> kEightLogits = {
    std::log(0.10), std::log(0.02), std::log(0.30), std::log(0.07),
    std::log(0.15), std::log(0.04), std::log(0.20), std::log(0.12)};

TYPED_TEST(GenerationKernels, SampleFitsTheTruncatedDistribution) {
  using T = TypeParam;
  struct Case {
    float temperature, topK, topP;
    int freedom; // the kept tokens less one
  };
  // top_k 3: 0.30, 0.20, 0.15. top_p 0.7: the ascending cumulative
  // probabilities 0.02, 0.06, 0.13, 0.23 are at most 0.3, so 0.12 .. 0.30
  // stay. Both: of 0.30, 0.20, 0.15 renormalised, 0.23 goes. Temperature
  // 0.6 alone: all eight, sharpened.
  for (Case c : {Case{1, 3, 1, 2}, Case{1, 0, 0.7f, 3}, Case{1, 3, 0.7f, 1},
                 Case{0.6f, 0, 1, 7}, Case{1.5f, 5, 1, 4}}) {
    SCOPED_TRACE(testing::Message()
                 << "temperature " << c.temperature << ", top_k " << c.topK
                 << ", top_p " << c.topP);
    std::vector<int32_t> ids =
        drawRows<T>(kEightLogits, 20000, 8, {c.temperature, c.topK, c.topP},
                    0x1234567890ull);
    std::vector<double> expected = expectedDistribution(
        kEightLogits, c.temperature, int64_t(c.topK), c.topP);
    int freedom = 0;
    double statistic = chiSquare(ids, expected, &freedom);
    ASSERT_EQ(freedom, c.freedom);
    EXPECT_LT(statistic, chiSquare999(freedom));
  }
}

// top_k keeps every token tied with the k-th largest (TopKLogitsWarper).
TYPED_TEST(GenerationKernels, SampleTopKKeepsTies) {
  using T = TypeParam;
  std::vector<double> logits = {1.0, 3.0, 2.0, 2.0, 0.5};
  std::vector<int32_t> ids = drawRows<T>(logits, 20000, 5, {1, 2, 1}, 99);
  std::vector<double> expected = expectedDistribution(logits, 1, 2, 1);
  EXPECT_GT(expected[2], 0);
  EXPECT_GT(expected[3], 0);
  int freedom = 0;
  double statistic = chiSquare(ids, expected, &freedom);
  ASSERT_EQ(freedom, 2);
  EXPECT_LT(statistic, chiSquare999(freedom));
}

TYPED_TEST(GenerationKernels, SampleGreedyTakesTheLowestOfTies) {
  using T = TypeParam;
  // Padding (ids 6 and 7) above everything: never a candidate.
  std::vector<double> logits = {0.5, 2.0, -1.0, 2.0, 1.9, 2.0, 9.0, 9.0};
  for (int32_t id : drawRows<T>(logits, 4, 6, {0, 0, 1}, 5))
    EXPECT_EQ(id, 1);
  // top_k and top_p do not matter at temperature 0.
  for (int32_t id : drawRows<T>(logits, 4, 6, {0, 3, 0.5f}, 5))
    EXPECT_EQ(id, 1);
}

TYPED_TEST(GenerationKernels, SampleNeverDrawsPadding) {
  using T = TypeParam;
  std::vector<double> logits = {0.1, 0.2, 0.3, 0.4, 0.5, 30.0, 30.0, 30.0};
  std::set<int32_t> seen;
  for (int32_t id : drawRows<T>(logits, 5000, 5, {1, 0, 1}, 77)) {
    EXPECT_LT(id, 5);
    EXPECT_GE(id, 0);
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 5u);
}

TYPED_TEST(GenerationKernels, SampleIsAFunctionOfSeedAndCounter) {
  using T = TypeParam;
  std::vector<double> logits(50);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = std::sin(double(i));
  std::vector<float> settings = {1, 0, 1};
  std::vector<int32_t> a = drawRows<T>(logits, 200, 50, settings, 42);
  EXPECT_EQ(a, drawRows<T>(logits, 200, 50, settings, 42));
  EXPECT_NE(a, drawRows<T>(logits, 200, 50, settings, 43));
  EXPECT_NE(a,
            drawRows<T>(logits, 200, 50, settings, uint64_t(42) | 1ull << 40));
  EXPECT_NE(a, drawRows<T>(logits, 200, 50, settings, 42, /*firstCounter=*/1));
  // Bit-identical on 1 and 4 threads.
  std::vector<int32_t> one, four;
  setNumThreads(1);
  one = drawRows<T>(logits, 2000, 50, {0.7f, 20, 0.9f}, 42);
  setNumThreads(4);
  four = drawRows<T>(logits, 2000, 50, {0.7f, 20, 0.9f}, 42);
  EXPECT_EQ(one, four);
}

//===-- TOKEN_LOGPROBS ----------------------------------------------------===//

/// logprobs and greedy against TOKEN_LOGPROBS' definition on the rows of x
/// [rows, columns], whose first `vocab` columns are the vocabulary: the
/// log-softmax at the target (1e-6 relative) and whether the target is the
/// first largest logit; both 0 for a negative target.
template <typename T>
void expectTokenLogprobsDefinition(const std::vector<T> &x, int64_t rows,
                                   int64_t columns, int64_t vocab,
                                   const std::vector<int32_t> &targets,
                                   const std::vector<float> &logprobs,
                                   const std::vector<int32_t> &greedy) {
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[size_t(r)] < 0) {
      EXPECT_EQ(logprobs[size_t(r)], 0.0f);
      EXPECT_EQ(greedy[size_t(r)], 0);
      continue;
    }
    double sum = 0, best = -INFINITY;
    int64_t argmax = -1;
    for (int64_t c = 0; c < vocab; ++c) {
      double v = double(x[size_t(r * columns + c)]);
      sum += std::exp(v);
      if (v > best) {
        best = v;
        argmax = c;
      }
    }
    double want = double(x[size_t(r * columns + targets[size_t(r)])]) -
                  std::log(sum);
    EXPECT_NEAR(logprobs[size_t(r)], want, 1e-6 * std::max(1.0, -want))
        << "row " << r;
    EXPECT_EQ(greedy[size_t(r)], argmax == targets[size_t(r)] ? 1 : 0)
        << "row " << r;
  }
}

/// The vocabulary-parallel TOKEN_LOGPROBS: each of `slices` slices of
/// `width` columns (ids width · g + column; those at or above `vocab`
/// padding) reduced to its partials, gathered in order, finished; against
/// the definition on the whole row.
template <typename T>
void checkTokenLogprobsOverSlices(int64_t slices, int64_t width,
                                  int64_t vocab) {
  SCOPED_TRACE(testing::Message() << slices << " slices of " << width
                                  << " columns, vocabulary " << vocab);
  const int64_t rows = 6, columns = slices * width;
  std::vector<T> x = randomVec<T>(size_t(rows * columns), 93, 3.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = vocab; c < columns; ++c)
      x[size_t(r * columns + c)] = T(50); // padding: never counts
  // Rows 4 and 5's largest logit is tied between id 1 (slice 0) and the
  // last id (another slice but with one slice): the lower id is the greedy
  // one.
  for (int64_t r : {4, 5})
    x[size_t(r * columns + 1)] = x[size_t(r * columns + vocab - 1)] = T(9);
  const std::vector<int32_t> targets = {3, 0, -100, int32_t(vocab - 1), 1,
                                        int32_t(vocab - 1)};
  std::vector<T> slice(size_t(rows * width));
  std::vector<T> partial(size_t(rows * 4));
  std::vector<T> gathered(size_t(rows * 4 * slices));
  for (int64_t g = 0; g < slices; ++g) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c)
        slice[size_t(r * width + c)] = x[size_t(r * columns + g * width + c)];
    tokenLogprobsPartial(slice.data(), targets.data(), rows, width, g * width,
                         vocab, partial.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < 4; ++i)
        gathered[size_t(r * 4 * slices + 4 * g + i)] =
            partial[size_t(r * 4 + i)];
  }
  std::vector<float> logprobs(rows, -1.0f);
  std::vector<int32_t> greedy(rows, -1);
  tokenLogprobsFinish(gathered.data(), targets.data(), rows, slices,
                      logprobs.data(), greedy.data());
  expectTokenLogprobsDefinition(x, rows, columns, vocab, targets, logprobs,
                                greedy);
  EXPECT_EQ(greedy[4], 1);                     // id 1, the lower of the tie
  EXPECT_EQ(greedy[5], 0);                     // the higher id of the tie
}

TYPED_TEST(GenerationKernels, TokenLogprobsOverSlicesIsTheDefinition) {
  using T = TypeParam;
  checkTokenLogprobsOverSlices<T>(2, 8, 16);  // no padding
  checkTokenLogprobsOverSlices<T>(3, 13, 35); // the last slice part padding
  checkTokenLogprobsOverSlices<T>(3, 13, 25); // the last slice all padding
  checkTokenLogprobsOverSlices<T>(1, 20, 17); // one slice
}

TYPED_TEST(GenerationKernels, TokenLogprobsIsTheDefinition) {
  using T = TypeParam;
  // 6 rows of 10 columns, the first 7 the vocabulary (3 of padding, which
  // must not count however large); row 2 asks nothing; row 4's largest
  // logit is tied between ids 1 and 5.
  const int64_t rows = 6, columns = 10, vocab = 7;
  std::vector<T> x = randomVec<T>(size_t(rows * columns), 91, 3.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = vocab; c < columns; ++c)
      x[size_t(r * columns + c)] = T(50);
  x[4 * columns + 1] = x[4 * columns + 5] = T(9);
  const std::vector<int32_t> targets = {3, 0, -100, 6, 5, 1};
  std::vector<float> logprobs(rows, -1.0f);
  std::vector<int32_t> greedy(rows, -1);
  tokenLogprobs(x.data(), targets.data(), rows, columns, vocab,
                logprobs.data(), greedy.data());
  expectTokenLogprobsDefinition(x, rows, columns, vocab, targets, logprobs,
                                greedy);
  // The tie goes to the lower id: 5 is not greedy, 1 would be.
  EXPECT_EQ(greedy[4], 0);
}

//===-- TOP_LOGPROBS ------------------------------------------------------===//

/// The definition, in double: each row's first `candidates` ids stably
/// sorted by descending logit (equal logits keep ascending ids), the first
/// k of them, and their log_softmax over the candidates,
/// x - m - log(sum exp(x - m)).
template <typename T>
void referenceTopLogprobs(const std::vector<T> &logits, int64_t rows,
                          int64_t vocab, int64_t candidates, int64_t k,
                          std::vector<double> &values,
                          std::vector<int32_t> &ids) {
  values.clear();
  ids.clear();
  for (int64_t r = 0; r < rows; ++r) {
    auto x = [&](int64_t i) { return double(logits[r * vocab + i]); };
    std::vector<int32_t> order(candidates);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return x(a) > x(b); });
    double m = x(order[0]), sum = 0;
    for (int64_t i = 0; i < candidates; ++i)
      sum += std::exp(x(i) - m);
    for (int64_t j = 0; j < k; ++j) {
      ids.push_back(order[j]);
      values.push_back(x(order[j]) - m - std::log(sum));
    }
  }
}

/// topLogprobs' outputs for `logits`.
template <typename T>
void runTopLogprobs(const std::vector<T> &logits, int64_t rows, int64_t vocab,
                    int64_t candidates, int64_t k, std::vector<float> &values,
                    std::vector<int32_t> &ids) {
  values.assign(rows * k, std::numeric_limits<float>::quiet_NaN());
  ids.assign(rows * k, -1);
  topLogprobs(logits.data(), rows, vocab, candidates, k, values.data(),
              ids.data());
}

/// The values as float rounds them: within a few units of float's last
/// place of the double reference.
void expectLogprobs(const std::vector<float> &got,
                    const std::vector<double> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(double(got[i]), want[i], 4e-7 * (1 + std::abs(want[i])))
        << "value " << i;
}

// Rows of random logits (one shifted by 5000, which log_softmax ignores),
// padded with large logits that are never candidates.
TYPED_TEST(GenerationKernels, TopLogprobsIsTheDefinition) {
  using T = TypeParam;
  const int64_t rows = 3, vocab = 24, candidates = 19, k = 6;
  std::vector<T> logits = randomVec<T>(rows * vocab, 40, 4.0);
  for (int64_t i = 0; i < vocab; ++i) {
    logits[vocab + i] += T(5000);
    for (int64_t r = 0; r < rows; ++r)
      if (i >= candidates)
        logits[r * vocab + i] = T(1e4);
  }
  std::vector<double> want;
  std::vector<int32_t> wantIds;
  referenceTopLogprobs(logits, rows, vocab, candidates, k, want, wantIds);
  std::vector<float> values;
  std::vector<int32_t> ids;
  runTopLogprobs(logits, rows, vocab, candidates, k, values, ids);
  EXPECT_EQ(ids, wantIds);
  expectLogprobs(values, want);
  for (int32_t id : ids)
    EXPECT_LT(id, candidates);
}

// Equal logits come by ascending id, -0 and +0 included.
TYPED_TEST(GenerationKernels, TopLogprobsTiesTakeTheLowerId) {
  using T = TypeParam;
  const std::vector<T> logits = {1, 3, 2, 3, T(-0.0), 3, T(0.0), 2, 9};
  // Ids 0..7 the vocabulary, 8 padding: 3 (ids 1, 3, 5), 2 (2, 7), 1 (0),
  // then 0 (4, 6).
  std::vector<float> values;
  std::vector<int32_t> ids;
  runTopLogprobs(logits, 1, 9, 8, 8, values, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 5, 2, 7, 0, 4, 6}));
  std::vector<double> want;
  std::vector<int32_t> wantIds;
  referenceTopLogprobs(logits, 1, 9, 8, 8, want, wantIds);
  expectLogprobs(values, want);
  EXPECT_EQ(values[0], values[1]);
  EXPECT_EQ(values[1], values[2]);
  EXPECT_EQ(values[6], values[7]);
  // Fewer than the tied: the lowest ids of them.
  runTopLogprobs(logits, 1, 9, 8, 2, values, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
}

// K = vocab_size: every candidate, in order; their probabilities sum to 1.
TYPED_TEST(GenerationKernels, TopLogprobsOfTheWholeVocabulary) {
  using T = TypeParam;
  const int64_t rows = 2, vocab = 12, candidates = 10;
  std::vector<T> logits = randomVec<T>(rows * vocab, 41, 3.0);
  std::vector<float> values;
  std::vector<int32_t> ids;
  runTopLogprobs(logits, rows, vocab, candidates, candidates, values, ids);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> row(ids.begin() + r * candidates,
                             ids.begin() + (r + 1) * candidates);
    std::vector<int32_t> sorted = row;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> all(candidates);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all) << "row " << r;
    double total = 0;
    for (int64_t j = 0; j < candidates; ++j) {
      total += std::exp(double(values[r * candidates + j]));
      if (j > 0) {
        EXPECT_LE(values[r * candidates + j], values[r * candidates + j - 1]);
      }
    }
    EXPECT_NEAR(total, 1.0, 1e-6) << "row " << r;
  }
  std::vector<double> want;
  std::vector<int32_t> wantIds;
  referenceTopLogprobs(logits, rows, vocab, candidates, candidates, want,
                       wantIds);
  EXPECT_EQ(ids, wantIds);
  expectLogprobs(values, want);
}

TYPED_TEST(GenerationKernels, TopLogprobsSameOnOneAndFourThreads) {
  using T = TypeParam;
  const int64_t rows = 8, vocab = 5000, k = 12;
  std::vector<T> logits = randomVec<T>(rows * vocab, 42, 5.0);
  std::vector<float> values1, values4;
  std::vector<int32_t> ids1, ids4;
  setNumThreads(1);
  runTopLogprobs(logits, rows, vocab, vocab, k, values1, ids1);
  setNumThreads(4);
  runTopLogprobs(logits, rows, vocab, vocab, k, values4, ids4);
  EXPECT_EQ(ids1, ids4);
  EXPECT_TRUE(sameBits(values1, values4));
  std::vector<double> want;
  std::vector<int32_t> wantIds;
  referenceTopLogprobs(logits, rows, vocab, vocab, k, want, wantIds);
  EXPECT_EQ(ids4, wantIds);
  expectLogprobs(values4, want);
}

//===-- TOP_CANDIDATES and the draw from them -----------------------------===//

/// The definition: the valid columns (token vocabStart + j below
/// vocabSize) stably sorted by descending logit (equal logits keep
/// ascending ids), the first k of them, padded with -inf and kNoCandidate;
/// lse the log of the sum of exp over the valid columns, in long double.
template <typename T>
void referenceCandidates(const std::vector<T> &logits, int64_t rows,
                         int64_t cols, int64_t vocabStart, int64_t vocabSize,
                         int64_t k, std::vector<T> &values,
                         std::vector<int32_t> &ids, std::vector<double> &lse) {
  values.clear();
  ids.clear();
  lse.clear();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> valid;
    for (int64_t j = 0; j < cols; ++j)
      if (vocabStart + j < vocabSize)
        valid.push_back(j);
    std::stable_sort(valid.begin(), valid.end(), [&](int64_t a, int64_t b) {
      return logits[r * cols + a] > logits[r * cols + b];
    });
    long double sum = 0;
    for (int64_t j : valid)
      sum += std::exp((long double)logits[r * cols + j]);
    lse.push_back(valid.empty() ? -INFINITY : double(std::log(sum)));
    for (int64_t i = 0; i < k; ++i) {
      bool has = i < int64_t(valid.size());
      values.push_back(has ? logits[r * cols + valid[i]] : T(-INFINITY));
      ids.push_back(has ? int32_t(vocabStart + valid[i]) : kNoCandidate);
    }
  }
}

template <typename T>
void runCandidates(const std::vector<T> &logits, int64_t rows, int64_t cols,
                   int64_t vocabStart, int64_t vocabSize, int64_t k,
                   std::vector<T> &values, std::vector<int32_t> &ids,
                   std::vector<T> &lse) {
  values.assign(rows * k, T(7));
  ids.assign(rows * k, -1);
  lse.assign(rows, T(7));
  topCandidates(logits.data(), rows, cols, vocabStart, vocabSize, k,
                values.data(), ids.data(), lse.data());
}

// A rank's slice [48, 64) of a vocabulary of 60 (4 padding columns), ties
// included, and a slice with fewer valid columns than k.
TYPED_TEST(GenerationKernels, TopCandidatesIsTheDefinition) {
  using T = TypeParam;
  const int64_t rows = 3, cols = 16, k = 6;
  std::vector<T> logits = randomVec<T>(rows * cols, 50, 3.0);
  logits[3] = logits[9] = logits[1] = T(8); // tied best of row 0
  logits[cols + 14] = T(100);                // padding: never a candidate
  for (auto [start, size] : {std::pair<int64_t, int64_t>{48, 60},
                             {0, 16},
                             {48, 52}, // 4 valid columns < k
                             {64, 60}}) { // none valid
    std::vector<T> values, wantValues, lse;
    std::vector<int32_t> ids, wantIds;
    std::vector<double> wantLse;
    referenceCandidates(logits, rows, cols, start, size, k, wantValues,
                        wantIds, wantLse);
    runCandidates(logits, rows, cols, start, size, k, values, ids, lse);
    EXPECT_EQ(ids, wantIds) << "slice from " << start << " of " << size;
    EXPECT_TRUE(sameBits(values, wantValues))
        << "slice from " << start << " of " << size;
    for (int64_t r = 0; r < rows; ++r) {
      if (std::isinf(wantLse[r]))
        EXPECT_TRUE(std::isinf(double(lse[r])) && lse[r] < 0);
      else
        EXPECT_NEAR(double(lse[r]), wantLse[r],
                    tolerance<T>() * (1 + std::abs(wantLse[r])));
    }
  }
}

/// A row of `vocab` logits split into `ranks` slices as tensor parallelism
/// splits the output layer: each slice's k best candidates and lse, laid
/// side by side as the all-gathers lay them ([ranks · k] and [ranks]).
template <typename T>
void gatheredCandidates(const std::vector<T> &logits, int64_t rows,
                        int64_t padded, int64_t vocab, int64_t ranks,
                        int64_t k, std::vector<T> &values,
                        std::vector<int32_t> &ids, std::vector<T> &lse) {
  const int64_t cols = padded / ranks;
  values.assign(rows * ranks * k, T(0));
  ids.assign(rows * ranks * k, 0);
  lse.assign(rows * ranks, T(0));
  for (int64_t c = 0; c < ranks; ++c) {
    std::vector<T> slice(rows * cols), v, l;
    std::vector<int32_t> i;
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(logits.begin() + r * padded + c * cols, cols,
                  slice.begin() + r * cols);
    runCandidates(slice, rows, cols, c * cols, vocab, k, v, i, l);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(v.begin() + r * k, k, values.begin() + (r * ranks + c) * k);
      std::copy_n(i.begin() + r * k, k, ids.begin() + (r * ranks + c) * k);
      lse[r * ranks + c] = l[r];
    }
  }
}

// The draw from the ranks' gathered candidates gives the whole row's ids:
// greedy, top-k up to the candidates per rank (alone and with top-p), over
// many counters and seeds, 2 and 4 ranks, with padding columns.
TYPED_TEST(GenerationKernels, SampleFromCandidatesIsSampleOfTheWholeRow) {
  using T = TypeParam;
  const int64_t rows = 64, padded = 96, vocab = 90, k = 8;
  std::vector<T> logits = randomVec<T>(rows * padded, 51, 2.5);
  std::vector<int32_t> counters(rows);
  std::iota(counters.begin(), counters.end(), 11);
  for (int64_t ranks : {2, 4}) {
    std::vector<T> values, lse;
    std::vector<int32_t> ids;
    gatheredCandidates(logits, rows, padded, vocab, ranks, k, values, ids,
                       lse);
    for (std::vector<float> settings :
         {std::vector<float>{0, 0, 1}, {1, 1, 1}, {0.7f, 5, 1},
          {1.3f, 8, 1}, {1, 8, 0.6f}, {0.5f, 3, 0.9f}}) {
      for (uint64_t seed : {uint64_t(1), uint64_t(0x9E3779B97F4A7C15)}) {
        std::vector<int32_t> whole(rows, -1), fromCandidates(rows, -2);
        sampleTokens(logits.data(), rows, padded, vocab, settings.data(), seed,
                     counters.data(), whole.data());
        Candidates<T> from;
        from.ids = ids.data();
        from.vocabSize = vocab;
        sampleTokens(values.data(), rows, ranks * k, ranks * k,
                     settings.data(), seed, counters.data(),
                     fromCandidates.data(), from);
        EXPECT_EQ(fromCandidates, whole)
            << ranks << " ranks, settings " << settings[0] << " "
            << settings[1] << " " << settings[2] << ", seed " << seed;
      }
    }
  }
}

// Beam search's candidates from the ranks' candidates: the whole row's ids,
// and log-probabilities that are the definition's (the normaliser from the
// ranks' lse).
TYPED_TEST(GenerationKernels, TopLogprobsFromCandidatesIsTheDefinition) {
  using T = TypeParam;
  const int64_t rows = 4, padded = 40, vocab = 37, k = 6, ranks = 4;
  std::vector<T> logits = randomVec<T>(rows * padded, 52, 4.0);
  logits[5] = logits[17] = T(9); // a tie across two ranks' slices
  std::vector<T> values, lse;
  std::vector<int32_t> ids;
  gatheredCandidates(logits, rows, padded, vocab, ranks, k, values, ids, lse);
  std::vector<double> want;
  std::vector<int32_t> wantIds;
  referenceTopLogprobs(logits, rows, padded, vocab, k, want, wantIds);
  std::vector<float> got(rows * k, NAN);
  std::vector<int32_t> gotIds(rows * k, -1);
  Candidates<T> from;
  from.ids = ids.data();
  from.vocabSize = vocab;
  from.lse = lse.data();
  from.lseCount = ranks;
  topLogprobs(values.data(), rows, ranks * k, ranks * k, k, got.data(),
              gotIds.data(), from);
  EXPECT_EQ(gotIds, wantIds);
  EXPECT_EQ(gotIds[0], 5); // the tie: the lower id first
  EXPECT_EQ(gotIds[1], 17);
  expectLogprobs(got, want);
}

//===-- REORDER_ROWS ------------------------------------------------------===//

/// x [rows, cols] with row b the old row parents[b], from a copy; rows
/// whose parent is outside [0, rows) as they were.
template <typename T>
std::vector<T> referenceReorder(const std::vector<T> &x,
                                const std::vector<int32_t> &parents,
                                int64_t cols) {
  std::vector<T> y = x;
  for (size_t b = 0; b < parents.size(); ++b)
    if (parents[b] >= 0 && parents[b] < int32_t(parents.size()))
      for (int64_t c = 0; c < cols; ++c)
        y[b * cols + c] = x[parents[b] * cols + c];
  return y;
}

TYPED_TEST(GenerationKernels, ReorderRows) {
  using T = TypeParam;
  const int64_t rows = 4, cols = 6;
  const std::vector<T> x = randomVec<T>(rows * cols, 43);
  // Duplicated parents (row 1 dropped), a cycle (a row copy in place, one
  // after another, would spread row 0 everywhere), the identity, and
  // parents outside the rows (left as they were).
  for (std::vector<int32_t> parents : {std::vector<int32_t>{2, 2, 0, 3},
                                       {1, 2, 3, 0},
                                       {0, 1, 2, 3},
                                       {-1, 0, 4, 1}}) {
    SCOPED_TRACE(testing::Message()
                 << "parents " << parents[0] << " " << parents[1] << " "
                 << parents[2] << " " << parents[3]);
    std::vector<T> got = x, scratch(x.size());
    reorderRows(got.data(), parents.data(), rows, cols, scratch.data());
    EXPECT_TRUE(sameBits(got, referenceReorder(x, parents, cols)));
  }
  std::vector<T> same = x, scratch(x.size());
  std::vector<int32_t> identity = {0, 1, 2, 3};
  reorderRows(same.data(), identity.data(), rows, cols, scratch.data());
  EXPECT_TRUE(sameBits(same, x));
}

TYPED_TEST(GenerationKernels, ReorderRowsSameOnOneAndFourThreads) {
  using T = TypeParam;
  const int64_t rows = 6, cols = 20000;
  const std::vector<T> x0 = randomVec<T>(rows * cols, 44);
  std::vector<int32_t> parents = {5, 0, 0, 3, 1, 5};
  std::vector<T> x, scratch(x0.size());
  expectSameOnOneAndFour<T>(
      {&x}, [&] { x = x0; },
      [&] {
        reorderRows(x.data(), parents.data(), rows, cols, scratch.data());
      });
  EXPECT_TRUE(sameBits(x, referenceReorder(x0, parents, cols)));
}

TEST(Sampling, UniformIsPhiloxAtTheDrawsCounter) {
  // u = (bits[0] >> 5 · 2^26 + bits[1] >> 6) / 2^53 of Philox4x32 keyed by
  // the seed's words, at counter {counter, row, 0, "SAMP"}.
  uint64_t seed = 0x0123456789ABCDEFull;
  for (uint32_t counter : {0u, 1u, 77u, 0xFFFFFFFFu})
    for (uint32_t row : {0u, 3u}) {
      PhiloxCounter bits =
          philox4x32({counter, row, 0, 0x53414D50}, {0x89ABCDEF, 0x01234567});
      double want = (double(bits[0] >> 5) * 67108864.0 + double(bits[1] >> 6)) /
                    9007199254740992.0;
      double u = samplingUniform(seed, counter, row);
      EXPECT_EQ(u, want);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
    }
}

TEST(Sampling, BadSettingsAreRefused) {
  struct Bad {
    float temperature, topK, topP;
    const char *setting;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (Bad b : {Bad{-1, 0, 1, "temperature"}, Bad{nan, 0, 1, "temperature"},
                Bad{inf, 0, 1, "temperature"}, Bad{1, -1, 1, "top_k"},
                Bad{1, nan, 1, "top_k"}, Bad{1, 0, 0, "top_p"},
                Bad{1, 0, 1.5f, "top_p"}, Bad{1, 0, -0.5f, "top_p"},
                Bad{1, 0, nan, "top_p"}}) {
    float settings[3] = {b.temperature, b.topK, b.topP};
    absl::Status s = validateSamplingSettings(settings);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.setting;
    EXPECT_NE(std::string(s.message()).find(b.setting), std::string::npos)
        << s.message();
  }
  for (std::vector<float> good :
       {std::vector<float>{0, 0, 1}, {1, 50, 0.9f}, {0.01f, 1, 1e-6f}}) {
    EXPECT_TRUE(validateSamplingSettings(good.data()).ok());
  }
}

} // namespace
