//===- VocabParallelTest.cpp - Vocab-parallel kernels vs the full ones ----===//
//
// Simulates tp = 1, 2, 4 ranks in one process, each holding a slice of the
// vocabulary, and runs the collectives the runtime would run between the
// kernels (sum and max, in rank order). The embedding must equal the
// full-table kernels exactly; the loss, lse and logit gradients must equal
// crossEntropyForward/Backward on the full logits to 1e-12 relative in double
// and 1e-6 in float. Each kernel must also be bit-identical on 1 and on 4
// threads.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/VocabParallel.h"

#include "runtime/cpu/Kernels.h"

#include "TestData.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace braid::cpu;

namespace {

using braid::test::randomIds;
using braid::test::randomVec;
using braid::test::expectSameOnOneAndFour;
using braid::test::sameBits;

constexpr int64_t kIgnore = -100;

/// Columns [c0, c0 + n) of the [rows, cols] matrix m, as a [rows, n] matrix.
template <typename T>
std::vector<T> columns(const std::vector<T> &m, int64_t rows, int64_t cols,
                       int64_t c0, int64_t n) {
  std::vector<T> out(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(m.data() + r * cols + c0, n, out.data() + r * n);
  return out;
}

/// The relative tolerance of the comparisons with the full kernels.
template <typename T> constexpr double tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-6;
}

/// |got - want| / |want|.
double relError(double got, double want) {
  return std::fabs(got - want) / std::fabs(want);
}

std::string scientific(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", x);
  return text;
}

template <typename T> class VocabParallel : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(VocabParallel, Types);

//===-- Embedding ---------------------------------------------------------===//

TYPED_TEST(VocabParallel, EmbeddingMatchesTheFullTable) {
  using T = TypeParam;
  for (int64_t vocab : {24, 40}) {
    const int64_t rows = 3 * 16, hidden = 12;
    auto table = randomVec<T>(vocab * hidden, 1),
         dout = randomVec<T>(rows * hidden, 2),
         dtableStart = randomVec<T>(vocab * hidden, 3);
    std::vector<int32_t> ids = randomIds(rows, vocab, 4); // with repeats
    std::vector<T> out(rows * hidden), dtable = dtableStart;
    embeddingForward(table.data(), ids.data(), rows, hidden, out.data());
    embeddingBackward(dout.data(), ids.data(), rows, hidden, dtable.data());

    for (int64_t tp : {1, 2, 4}) {
      const int64_t local = vocab / tp;
      std::vector<T> summed(rows * hidden, T(0)), rankOut(rows * hidden),
          concatenated;
      for (int64_t t = 0; t < tp; ++t) {
        const int64_t start = t * local;
        embeddingForwardRange(table.data() + start * hidden, ids.data(), rows,
                              hidden, start, local, rankOut.data());
        for (size_t i = 0; i < summed.size(); ++i) // the all-reduce
          summed[i] += rankOut[i];
        std::vector<T> slice(dtableStart.begin() + start * hidden,
                             dtableStart.begin() + (start + local) * hidden);
        embeddingBackwardRange(dout.data(), ids.data(), rows, hidden, start,
                               local, slice.data());
        concatenated.insert(concatenated.end(), slice.begin(), slice.end());
      }
      std::string where =
          "vocab " + std::to_string(vocab) + " tp " + std::to_string(tp);
      EXPECT_EQ(summed, out) << where;
      EXPECT_TRUE(sameBits(concatenated, dtable)) << where;
    }
  }
}

TYPED_TEST(VocabParallel, EmbeddingZeroesOtherRanksIds) {
  using T = TypeParam;
  const int64_t hidden = 3;
  std::vector<T> table = {1, 2, 3, 4, 5, 6}; // ids 10 and 11
  std::vector<int32_t> ids = {9, 10, 11, 12, -1};
  std::vector<T> out(ids.size() * hidden, T(7));
  embeddingForwardRange(table.data(), ids.data(), ids.size(), hidden, 10, 2,
                        out.data());
  EXPECT_EQ(out, (std::vector<T>{0, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0}));
  std::vector<T> dtable(6, T(1));
  std::vector<T> dout = {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5};
  embeddingBackwardRange(dout.data(), ids.data(), ids.size(), hidden, 10, 2,
                         dtable.data());
  EXPECT_EQ(dtable, (std::vector<T>{3, 3, 3, 4, 4, 4}));
}

//===-- Cross-entropy -----------------------------------------------------===//

/// What one simulated tp run of the loss gives.
template <typename T> struct CrossEntropyRun {
  T loss;
  int64_t counted;
  std::vector<T> lse, dlogits;
};

/// The vocabulary-parallel loss and gradient on `tp` simulated ranks, with
/// the collectives in rank order, and dlogits the ranks' slices concatenated
/// back into [rows, vocab]. The backward reads `backwardLse` when given,
/// else the lse crossEntropyFinish computed.
template <typename T>
CrossEntropyRun<T>
runVocabParallel(const std::vector<T> &logits,
                 const std::vector<int32_t> &targets, int64_t rows,
                 int64_t vocab, int64_t tp, T dloss,
                 const std::vector<T> *backwardLse = nullptr) {
  const int64_t local = vocab / tp;
  std::vector<std::vector<T>> slices;
  for (int64_t t = 0; t < tp; ++t)
    slices.push_back(columns(logits, rows, vocab, t * local, local));

  std::vector<T> globalMax(rows, -std::numeric_limits<T>::infinity()),
      rankMax(rows);
  for (int64_t t = 0; t < tp; ++t) { // all-reduce(max)
    crossEntropyRowMax(slices[t].data(), rows, local, rankMax.data());
    for (int64_t r = 0; r < rows; ++r)
      globalMax[r] = std::max(globalMax[r], rankMax[r]);
  }
  std::vector<T> summed(2 * rows, T(0)), partial(2 * rows);
  for (int64_t t = 0; t < tp; ++t) { // all-reduce(sum), in rank order
    crossEntropyPartial(slices[t].data(), targets.data(), globalMax.data(),
                        rows, local, t * local, kIgnore, partial.data());
    for (int64_t i = 0; i < 2 * rows; ++i)
      summed[i] += partial[i];
  }
  CrossEntropyRun<T> run;
  run.lse.resize(rows);
  run.loss = crossEntropyFinish(summed.data(), globalMax.data(), targets.data(),
                                rows, kIgnore, run.lse.data(), &run.counted);
  run.dlogits.resize(rows * vocab);
  std::vector<T> rankGrad(rows * local);
  const T *lse = backwardLse ? backwardLse->data() : run.lse.data();
  for (int64_t t = 0; t < tp; ++t) {
    crossEntropyBackwardRange(slices[t].data(), targets.data(), lse, dloss,
                              rows, local, t * local, kIgnore, run.counted,
                              rankGrad.data());
    // In place over the rank's logits (as plan-lower lowers it): the same.
    std::vector<T> inPlace = slices[t];
    crossEntropyBackwardRange(inPlace.data(), targets.data(), lse, dloss, rows,
                              local, t * local, kIgnore, run.counted,
                              inPlace.data());
    EXPECT_TRUE(sameBits(inPlace, rankGrad)) << "rank " << t << " in place";
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(rankGrad.data() + r * local, local,
                  run.dlogits.data() + r * vocab + t * local);
  }
  return run;
}

/// Logits with moderate rows, rows of large values (±50) and rows with one
/// dominant logit (50, or 100, whose exp would overflow a float without the
/// max shift).
template <typename T>
std::vector<T> testLogits(int64_t rows, int64_t vocab, uint32_t seed) {
  auto logits = randomVec<T>(rows * vocab, seed, 3.0);
  auto large = randomVec<T>(rows * vocab, seed + 1, 50.0);
  for (int64_t r = 0; r < rows; ++r) {
    if (r % 4 == 1)
      std::copy_n(large.data() + r * vocab, vocab, logits.data() + r * vocab);
    if (r % 4 == 2) // one logit far above the rest, in some rank's slice
      logits[r * vocab + (r * 7) % vocab] = T(50);
    if (r % 8 == 3)
      logits[r * vocab + (r * 5) % vocab] = T(100);
    if (r % 8 == 7)
      logits[r * vocab + (r * 5) % vocab] = T(-50);
  }
  return logits;
}

TYPED_TEST(VocabParallel, CrossEntropyMatchesTheFullLogits) {
  using T = TypeParam;
  const double tol = tolerance<T>();
  const T dloss = T(1.5);
  double worstLoss = 0, worstLse = 0, worstGrad = 0;
  int64_t lseDiffers = 0;
  for (int64_t vocab : {24, 40}) {
    const int64_t rows = 256;
    auto logits = testLogits<T>(rows, vocab, 10 + vocab);
    std::vector<int32_t> targets = randomIds(rows, vocab, 20 + vocab);
    for (int64_t r = 0; r < rows; r += 5)
      targets[r] = kIgnore;
    // Some targets at the dominant logit, so its gradient is near 0.
    for (int64_t r = 2; r < rows; r += 12)
      if (targets[r] != kIgnore)
        targets[r] = (r * 7) % vocab;

    std::vector<T> lse(rows), dlogits(rows * vocab);
    int64_t counted = 0;
    T loss = crossEntropyForward(logits.data(), targets.data(), rows, vocab,
                                 kIgnore, lse.data(), &counted);
    crossEntropyBackward(logits.data(), targets.data(), lse.data(), dloss, rows,
                         vocab, kIgnore, counted, dlogits.data());
    ASSERT_EQ(counted, rows - (rows + 4) / 5);
    // Every entry of a row's gradient is dloss / counted times a number in
    // [-1, 1]: the scale the gradients are compared on.
    const double unit = std::fabs(double(dloss)) / counted;

    for (int64_t tp : {1, 2, 4}) {
      std::string where =
          "vocab " + std::to_string(vocab) + " tp " + std::to_string(tp);
      CrossEntropyRun<T> run =
          runVocabParallel(logits, targets, rows, vocab, tp, dloss);
      EXPECT_EQ(run.counted, counted) << where;
      double lossErr = relError(run.loss, loss);
      EXPECT_LE(lossErr, tol) << where;
      worstLoss = std::max(worstLoss, lossErr);

      for (int64_t r = 0; r < rows; ++r) {
        const T *want = dlogits.data() + r * vocab;
        const T *got = run.dlogits.data() + r * vocab;
        if (targets[r] == kIgnore) {
          for (int64_t c = 0; c < vocab; ++c)
            EXPECT_EQ(got[c], T(0)) << where << " ignored row " << r;
          continue;
        }
        double e = relError(run.lse[r], lse[r]);
        EXPECT_LE(e, tol) << where << " lse of row " << r;
        worstLse = std::max(worstLse, e);
        // The exponential sum is rounded to T before the ranks add theirs,
        // so in float the lse can land one ulp away from the full kernel's
        // (about 4e-6 at |lse| ~ 50), and every probability of the row then
        // moves by that much relative to the row's scale: the gradient is
        // allowed the lse's shift on top of the tolerance. A row whose lse
        // is the full kernel's must have its gradient bit for bit.
        double lseShift = std::fabs(double(run.lse[r]) - double(lse[r]));
        if (lseShift == 0) {
          EXPECT_EQ(std::memcmp(got, want, vocab * sizeof(T)), 0)
              << where << " dlogits of row " << r;
        } else {
          ++lseDiffers;
        }
        for (int64_t c = 0; c < vocab; ++c) {
          double g = std::fabs(double(got[c]) - double(want[c])) / unit;
          EXPECT_LE(g, tol + lseShift)
              << where << " dlogits[" << r << ", " << c << "]";
          worstGrad = std::max(worstGrad, g);
        }
      }

      // Given the full kernel's lse, the ranks' gradients are its slices.
      CrossEntropyRun<T> sameLse =
          runVocabParallel(logits, targets, rows, vocab, tp, dloss, &lse);
      EXPECT_TRUE(sameBits(sameLse.dlogits, dlogits)) << where;
    }
  }
  // The largest differences, in the XML report (--gtest_output=xml).
  ::testing::Test::RecordProperty("worst_loss_rel", scientific(worstLoss));
  ::testing::Test::RecordProperty("worst_lse_rel", scientific(worstLse));
  ::testing::Test::RecordProperty("worst_dlogits_over_dloss_per_counted",
                                  scientific(worstGrad));
  ::testing::Test::RecordProperty("rows_whose_lse_differs",
                                  std::to_string(lseDiffers));
}

TYPED_TEST(VocabParallel, CrossEntropyWithEveryTargetIgnored) {
  using T = TypeParam;
  const int64_t rows = 4, vocab = 8;
  auto logits = randomVec<T>(rows * vocab, 30, 2.0);
  std::vector<int32_t> targets(rows, int32_t(kIgnore));
  CrossEntropyRun<T> run =
      runVocabParallel(logits, targets, rows, vocab, 2, T(1));
  EXPECT_EQ(run.loss, T(0));
  EXPECT_EQ(run.counted, 0);
  for (T g : run.dlogits)
    EXPECT_EQ(g, T(0));
  for (T l : run.lse)
    EXPECT_TRUE(std::isfinite(l));
}

TYPED_TEST(VocabParallel, CrossEntropyPartialOfAnotherRanksTarget) {
  using T = TypeParam;
  // Rank 1 of 2 over a vocabulary of 6: ids 3..5. Row 0's target is rank
  // 0's, row 1's is ours (id 4), row 2 is ignored.
  std::vector<T> logits = {1, 2, 3, 0, 4, 0, 5, 5, 5};
  std::vector<int32_t> targets = {1, 4, int32_t(kIgnore)};
  std::vector<T> globalMax = {3, 5, 5}, partial(6, T(9));
  crossEntropyPartial(logits.data(), targets.data(), globalMax.data(), 3, 3, 3,
                      kIgnore, partial.data());
  EXPECT_NEAR(partial[0], std::exp(-2.0) + std::exp(-1.0) + 1.0, 1e-6);
  EXPECT_EQ(partial[1], T(0));
  EXPECT_NEAR(partial[2], 2 * std::exp(-5.0) + std::exp(-1.0), 1e-6);
  EXPECT_EQ(partial[3], T(4)); // logits[1, 4 - 3]
  EXPECT_EQ(partial[4], T(0));
  EXPECT_EQ(partial[5], T(0));
}

//===-- Threads -----------------------------------------------------------===//


/// Restores the default thread count when a test ends, pass or fail.
template <typename T> class VocabParallelThreads : public ::testing::Test {
protected:
  void TearDown() override { setNumThreads(0); }
};
TYPED_TEST_SUITE(VocabParallelThreads, Types);

TYPED_TEST(VocabParallelThreads, Embedding) {
  using T = TypeParam;
  // Rank 2 of 4 over a vocabulary of 64 (ids 32..47): about a quarter of
  // the 512 rows are ours, enough to put the backward's 520 columns (not a
  // multiple of the column block) on threads.
  const int64_t vocab = 64, rows = 512, hidden = 520, start = 32, local = 16;
  auto table = randomVec<T>(local * hidden, 40),
       dout = randomVec<T>(rows * hidden, 41),
       dtableStart = randomVec<T>(local * hidden, 42);
  std::vector<int32_t> ids = randomIds(rows, vocab, 43);
  std::vector<T> out(rows * hidden), dtable;
  expectSameOnOneAndFour<T>(
      {&out, &dtable}, [&] { dtable = dtableStart; },
      [&] {
        embeddingForwardRange(table.data(), ids.data(), rows, hidden, start,
                              local, out.data());
        embeddingBackwardRange(dout.data(), ids.data(), rows, hidden, start,
                               local, dtable.data());
      });
}

TYPED_TEST(VocabParallelThreads, CrossEntropy) {
  using T = TypeParam;
  // Rank 1 of 4 over a vocabulary of 256 (ids 64..127); enough rows for
  // the finish (one log per row) to cross the threshold too.
  const int64_t rows = 4608, vocab = 256, start = 64, local = 64;
  auto logits = testLogits<T>(rows, local, 50);
  std::vector<int32_t> targets = randomIds(rows, vocab, 51);
  for (int64_t r = 0; r < rows; r += 7)
    targets[r] = kIgnore;
  std::vector<T> rowMax(rows), globalMax(rows), partial(2 * rows), lse(rows),
      loss(1), dlogits(rows * local);
  // Stand-ins for the summed partials (only the threads are under test
  // here), with a positive exponential sum.
  std::vector<T> summed = randomVec<T>(2 * rows, 52, 1.0);
  for (int64_t r = 0; r < rows; ++r)
    summed[2 * r] = T(1.5) + summed[2 * r];
  std::vector<int64_t> counted(1);
  expectSameOnOneAndFour<T>(
      {&rowMax, &partial, &lse, &loss, &dlogits}, [] {},
      [&] {
        crossEntropyRowMax(logits.data(), rows, local, rowMax.data());
        // Another rank's maximum is larger on some rows.
        for (int64_t r = 0; r < rows; ++r)
          globalMax[r] = rowMax[r] + T(r % 3 == 0 ? 2 : 0);
        crossEntropyPartial(logits.data(), targets.data(), globalMax.data(),
                            rows, local, start, kIgnore, partial.data());
        loss[0] =
            crossEntropyFinish(summed.data(), globalMax.data(), targets.data(),
                               rows, kIgnore, lse.data(), counted.data());
        crossEntropyBackwardRange(logits.data(), targets.data(), lse.data(),
                                  T(0.75), rows, local, start, kIgnore,
                                  counted[0], dlogits.data());
      });
  EXPECT_EQ(counted[0], rows - (rows + 6) / 7);
}

} // namespace
