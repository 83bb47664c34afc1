//===- CudaGenerationTest.cpp - Generation's CUDA kernels vs the CPU's ----===//
//
// ROPE_AT, ATTENTION_CACHED, TAKE_ROWS, SAMPLE, TOP_LOGPROBS and
// REORDER_ROWS on the device (runtime/cuda/Generation.h, Kernels.h) on the
// same inputs as their CPU counterparts (runtime/cpu/Generation.h), which
// are the reference (and are tested against the definitions in
// tests/runtime/cpu). Inputs are rounded to T first and the CPU runs in
// float on them: outputs within T's tolerance (CudaTestUtil.h), the caches'
// and rows' copies exact, SAMPLE's ids identical, greedy and sampled, with
// and without top-k and top-p, and TOP_LOGPROBS' ids identical (ties
// among the rounded logits included) with their log-probabilities within
// float's. Part of the kernel tests' binary; without a device every test
// skips.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Generation.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Sampling.h"
#include "runtime/cuda/Generation.h"
#include "runtime/cuda/Kernels.h"

#include "CudaTestUtil.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace braid;
using namespace braid::cudatest;

namespace {

template <typename T> class CudaGeneration : public CudaKernels {};
using Types = ::testing::Types<float, bf16, f16>;
TYPED_TEST_SUITE(CudaGeneration, Types);

TYPED_TEST(CudaGeneration, RopeAt) {
  using T = TypeParam;
  // Head dimension 64 (16-byte vectors) and 12 (element by element);
  // positions far apart, up to 4000, where a float angle would be off.
  for (int64_t headDim : {64, 12}) {
    SCOPED_TRACE(testing::Message() << "head dimension " << headDim);
    const int64_t batch = 3, seq = 4, heads = 2;
    const int64_t n = batch * seq * heads * headDim;
    std::vector<float> x = rounded<T>(randomValues(n, 1));
    std::vector<int32_t> positions = {0, 5, 4000, 17, 1,  1,
                                      2, 3, 999,  0,  64, 3000};
    std::vector<float> y(n);
    cpu::ropeAtForward(x.data(), positions.data(), batch, seq, heads, headDim,
                       10000.0, y.data());
    Device<T> gx(as<T>(x)), gy(n);
    Device<int32_t> gpositions(positions);
    ASSERT_EQ(cuda::ropeAtForward(gx.get(), gpositions.get(), batch, seq, heads,
                                  headDim, 10000.0, gy.get(), nullptr),
              cudaSuccess);
    expectClose(gy.host(), y, relativeTolerance<T>(), absoluteTolerance<T>(),
                "y");
  }
}

TYPED_TEST(CudaGeneration, AttentionCached) {
  using T = TypeParam;
  // GQA (4 heads on 2 kv heads) with ALiBi. A prefill chunk of 5: sequence
  // 0 at positions 0..4 of an empty cache, sequence 1 at 200..204 after
  // earlier calls filled 0..199 (so its queries see more keys than a
  // block's chunk of 128); then a decode step; then a position outside the
  // cache (zeros, no write).
  const int64_t batch = 2, heads = 4, kvHeads = 2, d = 16, cacheLen = 256;
  const int64_t kvw = kvHeads * d;
  cpu::AttentionShape s{batch, 5, heads, kvHeads, d, 0.25, true, true};
  std::vector<float> cacheK =
      rounded<T>(randomValues(batch * cacheLen * kvw, 2));
  std::vector<float> cacheV =
      rounded<T>(randomValues(batch * cacheLen * kvw, 3));
  Device<T> gcacheK(as<T>(cacheK)), gcacheV(as<T>(cacheV));
  double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
  if (std::is_same_v<T, float>)
    abs = 1e-5; // sums of 200 float terms against double ones
  struct Step {
    int64_t queries;
    std::vector<int32_t> positions;
  };
  uint32_t seed = 10;
  for (const Step &step :
       {Step{5, {0, 1, 2, 3, 4, 200, 201, 202, 203, 204}}, Step{1, {5, 205}},
        Step{1, {-1, 256}}, Step{2, {6, 6, 255, 255}}}) {
    SCOPED_TRACE(testing::Message() << "positions of sequence 1 from "
                                    << step.positions[step.queries]);
    s.seq = step.queries;
    const int64_t rows = batch * step.queries;
    std::vector<float> q = rounded<T>(randomValues(rows * heads * d, seed++));
    std::vector<float> k = rounded<T>(randomValues(rows * kvw, seed++));
    std::vector<float> v = rounded<T>(randomValues(rows * kvw, seed++));
    std::vector<float> out(rows * heads * d);
    cpu::attentionCachedForward(q.data(), k.data(), v.data(),
                                step.positions.data(), s, cacheLen,
                                cacheK.data(), cacheV.data(), out.data());
    Device<T> gq(as<T>(q)), gk(as<T>(k)), gv(as<T>(v)), gout(out.size());
    Device<int32_t> gpositions(step.positions);
    ASSERT_EQ(cuda::attentionCachedForward(
                  gq.get(), gk.get(), gv.get(), gpositions.get(), s, cacheLen,
                  gcacheK.get(), gcacheV.get(), gout.get(), nullptr),
              cudaSuccess);
    expectClose(gout.host(), out, rel, abs, "out");
    expectClose(gcacheK.host(), cacheK, 0, 0, "cache_k");
    expectClose(gcacheV.host(), cacheV, 0, 0, "cache_v");
  }
}

TYPED_TEST(CudaGeneration, TakeRows) {
  using T = TypeParam;
  const int64_t batch = 4, seq = 6, cols = 100;
  std::vector<float> x = rounded<T>(randomValues(batch * seq * cols, 20));
  std::vector<int32_t> index = {5, 0, 7, 2}; // 7: outside, zeros
  std::vector<float> y(batch * cols);
  cpu::takeRows(x.data(), index.data(), batch, seq, cols, y.data());
  Device<T> gx(as<T>(x)), gy(batch * cols);
  Device<int32_t> gindex(index);
  ASSERT_EQ(cuda::takeRows(gx.get(), gindex.get(), batch, seq, cols, gy.get(),
                           nullptr),
            cudaSuccess);
  expectClose(gy.host(), y, 0, 0, "y");
}

TYPED_TEST(CudaGeneration, SampleDrawsTheCpusIds) {
  using T = TypeParam;
  // 40 rows of a vocabulary of 1000 padded to 1024 (the padding's logits
  // large: never drawn), rounded to T (ties among them, bf16 most); row 3
  // with most logits -inf, row 5 all -inf (the argmax, id 0).
  const int64_t rows = 40, vocab = 1024, candidates = 1000;
  std::vector<float> logits = rounded<T>(randomValues(rows * vocab, 30, 3.0f));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = candidates; i < vocab; ++i)
      logits[r * vocab + i] = 50.0f;
  for (int64_t i = 0; i < candidates; ++i) {
    if (i % 7 != 0)
      logits[3 * vocab + i] = -INFINITY;
    logits[5 * vocab + i] = -INFINITY;
  }
  std::vector<int32_t> counters(rows), seed = {0x1234567, -5};
  for (int64_t r = 0; r < rows; ++r)
    counters[r] = int32_t(1000 + 3 * r);
  Device<T> glogits(as<T>(logits));
  Device<int32_t> gcounters(counters), gseed(seed);
  std::vector<int32_t> greedy;
  for (std::vector<float> settings : {std::vector<float>{0, 0, 1},
                                      {1, 0, 1},
                                      {0.7f, 50, 0.9f},
                                      {1.3f, 0, 0.5f},
                                      {1, 5, 1},
                                      {1, 3, 0.7f},
                                      {2, 999, 0.999f},
                                      {1, 0, 1e-6f},
                                      {0.05f, 0, 1}}) {
    SCOPED_TRACE(testing::Message()
                 << "temperature " << settings[0] << ", top_k " << settings[1]
                 << ", top_p " << settings[2]);
    std::vector<int32_t> ids(rows);
    cpu::sampleTokens(logits.data(), rows, vocab, candidates, settings.data(),
                      cpu::samplingSeed(seed[0], seed[1]), counters.data(),
                      ids.data());
    Device<float> gsettings(settings);
    Device<int32_t> gids(rows);
    ASSERT_EQ(cuda::sampleTokens(glogits.get(), rows, vocab, candidates,
                                 gsettings.get(), gseed.get(), gcounters.get(),
                                 gids.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(gids.host(), ids);
    for (int32_t id : ids)
      EXPECT_LT(id, candidates);
    // Drawn, not the argmax, where the distribution is wide.
    if (settings[0] == 0) {
      greedy = ids;
    } else if (settings[0] >= 1 && settings[2] >= 0.5f) {
      EXPECT_NE(ids, greedy);
    }
  }
}

TYPED_TEST(CudaGeneration, SampleOfAWideVocabulary) {
  using T = TypeParam;
  // 3 rows of 40000 candidates (many passes of the block over a row), with
  // top-p alone, top-k alone, and neither.
  const int64_t rows = 3, vocab = 40000;
  std::vector<float> logits = rounded<T>(randomValues(rows * vocab, 31, 2.0f));
  std::vector<int32_t> counters = {7, 8, 9}, seed = {99, 0};
  Device<T> glogits(as<T>(logits));
  Device<int32_t> gcounters(counters), gseed(seed);
  for (std::vector<float> settings :
       {std::vector<float>{1, 0, 0.8f}, {0.9f, 1000, 1}, {1, 0, 1}}) {
    std::vector<int32_t> ids(rows);
    cpu::sampleTokens(logits.data(), rows, vocab, vocab, settings.data(),
                      cpu::samplingSeed(seed[0], seed[1]), counters.data(),
                      ids.data());
    Device<float> gsettings(settings);
    Device<int32_t> gids(rows);
    ASSERT_EQ(cuda::sampleTokens(glogits.get(), rows, vocab, vocab,
                                 gsettings.get(), gseed.get(), gcounters.get(),
                                 gids.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(gids.host(), ids)
        << "top_k " << settings[1] << ", top_p " << settings[2];
  }
}

/// TOP_LOGPROBS of `logits` [rows, vocab] (already rounded to T) on the
/// device and on the CPU: the same ids, the values within float's
/// tolerance (exp in float on the device, in double on the CPU).
template <typename T>
void expectTopLogprobsOfCpu(const std::vector<float> &logits, int64_t rows,
                            int64_t vocab, int64_t candidates, int64_t k) {
  SCOPED_TRACE(testing::Message()
               << rows << " rows of " << candidates << " candidates, k " << k);
  std::vector<float> values(rows * k);
  std::vector<int32_t> ids(rows * k);
  cpu::topLogprobs(logits.data(), rows, vocab, candidates, k, values.data(),
                   ids.data());
  Device<T> glogits(as<T>(logits));
  Device<float> gvalues(rows * k);
  Device<int32_t> gids(rows * k);
  ASSERT_EQ(cuda::topLogprobs(glogits.get(), rows, vocab, candidates, k,
                              gvalues.get(), gids.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(gids.host(), ids);
  expectClose(gvalues.host(), values, 2e-6, 2e-6, "values");
}

TYPED_TEST(CudaGeneration, TopLogprobsRanksTheCpusIds) {
  using T = TypeParam;
  // 6 rows of 1000 candidates padded to 1100 (the padding's logits large:
  // never chosen), rounded to T (ties among them, bf16 most); row 2 all
  // equal (the lowest ids), row 4 a few large logits over a flat rest.
  const int64_t rows = 6, vocab = 1100, candidates = 1000;
  std::vector<float> logits = randomValues(rows * vocab, 40, 3.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < vocab; ++i) {
      float &x = logits[r * vocab + i];
      if (i >= candidates)
        x = 50.0f;
      else if (r == 2)
        x = 0.5f;
      else if (r == 4)
        x = i % 97 == 5 ? 8.0f + float(i % 3) : -1.0f;
    }
  logits = rounded<T>(logits);
  for (int64_t k : {1, 7, 64, 300, 1000})
    expectTopLogprobsOfCpu<T>(logits, rows, vocab, candidates, k);
  // A wide vocabulary: many passes of the block over each row.
  std::vector<float> wide = rounded<T>(randomValues(2 * 40000, 41, 2.0f));
  expectTopLogprobsOfCpu<T>(wide, 2, 40000, 40000, 16);
}

TYPED_TEST(CudaGeneration, ReorderRows) {
  using T = TypeParam;
  // Rows of 21 elements (bytes, or 4-byte words for float, as the copy
  // goes) and of 64 (16-byte words).
  const int64_t rows = 5;
  for (int64_t cols : {21, 64}) {
    const std::vector<float> x =
        rounded<T>(randomValues(rows * cols, 50 + uint32_t(cols)));
    Device<uint8_t> scratch(rows * cols * sizeof(T));
    // Duplicated parents, a cycle, the identity, and parents outside the
    // rows (left as they were, as on the CPU).
    for (std::vector<int32_t> parents : {std::vector<int32_t>{4, 4, 0, 2, 1},
                                         {1, 2, 3, 4, 0},
                                         {0, 1, 2, 3, 4},
                                         {-1, 0, 9, 3, 3}}) {
      SCOPED_TRACE(testing::Message()
                   << cols << " columns, parents " << parents[0] << " "
                   << parents[1] << " " << parents[2] << " " << parents[3]
                   << " " << parents[4]);
      std::vector<float> want = x, cpuScratch(x.size());
      cpu::reorderRows(want.data(), parents.data(), rows, cols,
                       cpuScratch.data());
      Device<T> gx(as<T>(x));
      Device<int32_t> gparents(parents);
      ASSERT_EQ(cuda::reorderRows(gx.get(), gparents.get(), rows,
                                  cols * int64_t(sizeof(T)), scratch.get(),
                                  nullptr),
                cudaSuccess);
      expectClose(gx.host(), want, 0, 0, "x");
    }
  }
}

} // namespace
