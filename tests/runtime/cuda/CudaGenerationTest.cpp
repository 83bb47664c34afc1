//===- CudaGenerationTest.cpp - Generation's CUDA kernels vs the CPU's ----===//
//
// ROPE_AT, ATTENTION_CACHED, TAKE_ROWS, SAMPLE, TOP_LOGPROBS,
// TOP_CANDIDATES and REORDER_ROWS on the device (runtime/cuda/Generation.h,
// Kernels.h) on the same inputs as their CPU counterparts
// (runtime/cpu/Generation.h), which are the reference (and are tested
// against the definitions in tests/runtime/cpu). Inputs are rounded to T
// first and the CPU runs in float on them: outputs within T's tolerance
// (CudaTestUtil.h), the caches' and rows' copies exact, SAMPLE's ids
// identical, greedy and sampled, with and without top-k and top-p, and
// TOP_LOGPROBS' ids identical (ties among the rounded logits included) with
// their log-probabilities within float's; the same for SAMPLE and
// TOP_LOGPROBS on gathered candidates, and TOP_CANDIDATES' values and ids
// identical. Then, on the device alone, the candidates' promise: a row
// split over ranks, each rank's TOP_CANDIDATES gathered, draws and ranks
// what the whole row does. ROPE_GRAD at positions (ropeAtBackward) is
// checked against the definition too. Part of the kernel tests' binary;
// without a device every test skips.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Generation.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Sampling.h"
#include "runtime/cuda/Generation.h"
#include "runtime/cuda/Kernels.h"

#include "CudaTestUtil.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
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

TYPED_TEST(CudaGeneration, RopeAtBackward) {
  using T = TypeParam;
  // ROPE_GRAD at positions (packed documents): the inverse rotation,
  // against the definition (the pair (k, k + half) turned back by angle
  // position · theta^(-2k/headDim), in double) and the CPU's; and the
  // forward then the backward gives back the input.
  for (int64_t headDim : {64, 12}) {
    SCOPED_TRACE(testing::Message() << "head dimension " << headDim);
    const int64_t batch = 2, seq = 6, heads = 3, half = headDim / 2;
    const int64_t n = batch * seq * heads * headDim;
    const double theta = 10000.0;
    std::vector<float> dy = rounded<T>(randomValues(n, 2));
    std::vector<int32_t> positions = {0, 1, 2, 0, 1, 2999, 0, 0, 1, 2, 3, 4};
    std::vector<float> want(n), cpu(n);
    for (int64_t row = 0; row < batch * seq; ++row)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t k = 0; k < half; ++k) {
          const double angle = double(positions[row]) *
                               std::pow(theta, -2.0 * double(k) / headDim);
          const int64_t at = (row * heads + h) * headDim + k;
          const double y1 = dy[at], y2 = dy[at + half];
          want[at] = float(y1 * std::cos(angle) + y2 * std::sin(angle));
          want[at + half] = float(y2 * std::cos(angle) - y1 * std::sin(angle));
        }
    cpu::ropeAtBackward(dy.data(), positions.data(), batch, seq, heads, headDim,
                        theta, cpu.data());
    Device<T> gdy(as<T>(dy)), gdx(n), gy(n), gback(n);
    Device<int32_t> gpositions(positions);
    ASSERT_EQ(cuda::ropeAtBackward(gdy.get(), gpositions.get(), batch, seq,
                                   heads, headDim, theta, gdx.get(), nullptr),
              cudaSuccess);
    const double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
    expectClose(gdx.host(), want, rel, abs, "dx");
    expectClose(gdx.host(), cpu, rel, abs, "dx against the CPU's");
    ASSERT_EQ(cuda::ropeAtForward(gdy.get(), gpositions.get(), batch, seq,
                                  heads, headDim, theta, gy.get(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::ropeAtBackward(gy.get(), gpositions.get(), batch, seq,
                                   heads, headDim, theta, gback.get(), nullptr),
              cudaSuccess);
    // Two roundings to T apart, each of values as large as the pair's.
    double largest = 0;
    for (float x : dy)
      largest = std::max(largest, double(std::abs(x)));
    expectClose(gback.host(), dy, rel, 2 * rel * largest + abs,
                "forward then backward");
  }
}

TYPED_TEST(CudaGeneration, AttentionCached) {
  using T = TypeParam;
  // GQA (4 heads on 2 kv heads) with ALiBi. A prefill chunk of 5: sequence
  // 0 at positions 0..4 of an empty cache, sequence 1 at 200..204 after
  // earlier calls filled 0..199 (so its queries see more keys than a
  // block's chunk of 128); then a decode step; then a position outside the
  // cache (zeros, no write); then a chunk of 128 queries (1024 (row, head)
  // pairs: one range of keys each, where the steps before split the keys
  // into 4 ranges of 64). Head dimensions 16 and 80 (lanes with no column,
  // with two), 128, and 300 (the one-block kernel).
  const int64_t batch = 2, heads = 4, kvHeads = 2, cacheLen = 256;
  for (int64_t d : {16, 80, 128, 300}) {
    SCOPED_TRACE(testing::Message() << "head dimension " << d);
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
    std::vector<int32_t> chunk;
    for (int32_t b = 0; b < 2; ++b)
      for (int32_t t = 0; t < 128; ++t)
        chunk.push_back(b * 100 + 7 + t);
    uint32_t seed = 10;
    for (const Step &step :
         {Step{5, {0, 1, 2, 3, 4, 200, 201, 202, 203, 204}}, Step{1, {5, 205}},
          Step{1, {-1, 256}}, Step{2, {6, 6, 255, 255}}, Step{128, chunk}}) {
      SCOPED_TRACE(testing::Message() << "positions of sequence 1 from "
                                      << step.positions[step.queries]);
      s.seq = step.queries;
      const int64_t splits = cuda::attentionCachedSplits(s, cacheLen);
      EXPECT_EQ(splits, d > 256 ? 0 : step.queries == 128 ? 1 : 4);
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
      const int64_t bytes = cuda::attentionCachedWorkspaceBytes(s, cacheLen);
      EXPECT_EQ(bytes, splits > 1 ? rows * heads * splits * (d + 2) * 4 : 0);
      Device<float> workspace(size_t(std::max<int64_t>(bytes / 4, 1)));
      ASSERT_EQ(cuda::attentionCachedForward(
                    gq.get(), gk.get(), gv.get(), gpositions.get(), s,
                    cacheLen, gcacheK.get(), gcacheV.get(), gout.get(),
                    bytes > 0 ? workspace.get() : nullptr, nullptr),
                cudaSuccess);
      expectClose(gout.host(), out, rel, abs, "out");
      expectClose(gcacheK.host(), cacheK, 0, 0, "cache_k");
      expectClose(gcacheV.host(), cacheV, 0, 0, "cache_v");
    }
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
  // With a workspace, rows of many candidates split over blocks: the same.
  const int64_t bytes =
      cuda::topLogprobsWorkspaceBytes(rows, candidates, k);
  EXPECT_EQ(bytes > 0, cuda::topLogprobsSlices(rows, candidates, k) > 1);
  if (bytes == 0)
    return;
  SCOPED_TRACE(testing::Message()
               << cuda::topLogprobsSlices(rows, candidates, k) << " slices");
  Device<uint8_t> workspace(bytes);
  Device<float> svalues(rows * k);
  Device<int32_t> sids(rows * k);
  ASSERT_EQ(cuda::topLogprobs(glogits.get(), rows, vocab, candidates, k,
                              svalues.get(), sids.get(), nullptr, {},
                              workspace.get()),
            cudaSuccess);
  EXPECT_EQ(sids.host(), ids);
  expectClose(svalues.host(), values, 2e-6, 2e-6, "sliced values");
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
  // A wide vocabulary: many passes of the block over each row (split over
  // 40 slices with a workspace).
  std::vector<float> wide = rounded<T>(randomValues(2 * 40000, 41, 2.0f));
  expectTopLogprobsOfCpu<T>(wide, 2, 40000, 40000, 16);
  // Rows of 5000 candidates padded to 5100, split over 2 to 5 slices with
  // a workspace: ties across slices (row 2 flat: the lowest ids, from the
  // first slice; row 4 equal large logits in every slice), a slice of
  // -infinity only (row 5's first 2500), k up to a slice's width.
  {
    const int64_t wrows = 6, wvocab = 5100, wcandidates = 5000;
    std::vector<float> x = randomValues(wrows * wvocab, 42, 3.0f);
    for (int64_t r = 0; r < wrows; ++r)
      for (int64_t i = 0; i < wvocab; ++i) {
        float &v = x[r * wvocab + i];
        if (i >= wcandidates)
          v = 50.0f;
        else if (r == 2)
          v = 0.5f;
        else if (r == 4)
          v = i % 97 == 5 ? 8.0f + float(i % 3) : -1.0f;
        else if (r == 5 && i < 2500)
          v = -INFINITY;
      }
    x = rounded<T>(x);
    for (int64_t k : {1, 3, 64, 300, 1000})
      expectTopLogprobsOfCpu<T>(x, wrows, wvocab, wcandidates, k);
  }
}

/// Scoring's test rows: 5 rows of `vocab` ids padded to `columns` (the
/// padding large: never counted), rounded to T; row 1 asks nothing, row 3's
/// largest logit is tied between ids 7 and 900 (the lower is the greedy
/// one) and asks for 900, row 4 asks for its argmax.
template <typename T>
void scoringCase(int64_t rows, int64_t columns, int64_t vocab, uint32_t seed,
                 std::vector<float> &logits, std::vector<int32_t> &targets) {
  logits = randomValues(rows * columns, seed, 3.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = vocab; i < columns; ++i)
      logits[r * columns + i] = 50.0f;
  logits[3 * columns + 7] = logits[3 * columns + 900] = 12.0f;
  logits = rounded<T>(logits);
  int64_t argmax4 = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[4 * columns + i] > logits[4 * columns + argmax4])
      argmax4 = i;
  targets = {17, -100, 999, 900, int32_t(argmax4)};
}

TYPED_TEST(CudaGeneration, TokenLogprobsAreTheCpus) {
  using T = TypeParam;
  // 5 rows of 1000 ids padded to 1100 (the padding large: never counted);
  // row 1 asks nothing, row 3's largest logit is tied between ids 7 and
  // 900 (the lower is the greedy one), row 4 asks for its argmax.
  const int64_t rows = 5, columns = 1100, vocab = 1000;
  std::vector<float> logits;
  std::vector<int32_t> targets;
  scoringCase<T>(rows, columns, vocab, 43, logits, targets);
  std::vector<float> logprobs(rows);
  std::vector<int32_t> greedy(rows);
  cpu::tokenLogprobs(logits.data(), targets.data(), rows, columns, vocab,
                     logprobs.data(), greedy.data());
  Device<T> glogits(as<T>(logits));
  Device<int32_t> gtargets(targets);
  Device<float> glogprobs(std::vector<float>(rows, 7.0f));
  Device<int32_t> ggreedy(std::vector<int32_t>(rows, 7));
  ASSERT_EQ(cuda::tokenLogprobs(glogits.get(), gtargets.get(), rows, columns,
                                vocab, glogprobs.get(), ggreedy.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(ggreedy.host(), greedy);
  EXPECT_EQ(greedy, (std::vector<int32_t>{greedy[0], 0, greedy[2], 0, 1}));
  expectClose(glogprobs.host(), logprobs, 2e-6, 2e-6, "logprobs");
  EXPECT_EQ(glogprobs.host()[1], 0.0f);
}

TYPED_TEST(CudaGeneration, TokenLogprobsOverSlicesAreTheCpus) {
  using T = TypeParam;
  // As above, the 1100 columns in 2 slices of 550 (ids 550 and on in the
  // second, 100 of its columns padding): each slice's partials against the
  // CPU's on the same logits, then the gathered partials finished, against
  // the CPU's finish of the CPU's partials.
  const int64_t rows = 5, width = 550, slices = 2, vocab = 1000;
  const int64_t columns = slices * width;
  std::vector<float> logits;
  std::vector<int32_t> targets;
  scoringCase<T>(rows, columns, vocab, 44, logits, targets);
  Device<int32_t> gtargets(targets);
  std::vector<float> gathered(rows * 4 * slices), gpuGathered(gathered.size());
  for (int64_t g = 0; g < slices; ++g) {
    std::vector<float> slice(rows * width), partial(rows * 4);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c)
        slice[r * width + c] = logits[r * columns + g * width + c];
    cpu::tokenLogprobsPartial(slice.data(), targets.data(), rows, width,
                              g * width, vocab, partial.data());
    Device<T> gslice(as<T>(slice));
    Device<float> gpartial(std::vector<float>(rows * 4, 7.0f));
    ASSERT_EQ(cuda::tokenLogprobsPartial(gslice.get(), gtargets.get(), rows,
                                         width, g * width, vocab,
                                         gpartial.get(), nullptr),
              cudaSuccess);
    std::vector<float> got = gpartial.host();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < 4; ++i) {
        gathered[r * 4 * slices + 4 * g + i] = partial[r * 4 + i];
        gpuGathered[r * 4 * slices + 4 * g + i] = got[r * 4 + i];
      }
  }
  // The maxima, target logits and ids exactly; the sums within float's
  // rounding of a sum in another order.
  for (size_t i = 0; i < gathered.size(); ++i) {
    if (i % 4 == 1)
      EXPECT_NEAR(gpuGathered[i], gathered[i], 2e-6 * gathered[i]) << i;
    else
      EXPECT_EQ(gpuGathered[i], gathered[i]) << i;
  }
  std::vector<float> logprobs(rows);
  std::vector<int32_t> greedy(rows);
  cpu::tokenLogprobsFinish(gathered.data(), targets.data(), rows, slices,
                           logprobs.data(), greedy.data());
  Device<float> ggathered(gathered);
  Device<float> glogprobs(std::vector<float>(rows, 7.0f));
  Device<int32_t> ggreedy(std::vector<int32_t>(rows, 7));
  ASSERT_EQ(cuda::tokenLogprobsFinish(ggathered.get(), gtargets.get(), rows,
                                      slices, glogprobs.get(), ggreedy.get(),
                                      nullptr),
            cudaSuccess);
  EXPECT_EQ(ggreedy.host(), greedy);
  EXPECT_EQ(greedy[1], 0);
  EXPECT_EQ(greedy[3], 0); // 900 ties with 7, the lower id
  EXPECT_EQ(greedy[4], 1);
  expectClose(glogprobs.host(), logprobs, 1e-6, 1e-6, "logprobs");
}

/// The elements of a T vector as floats (exactly).
template <typename T> std::vector<float> floats(const std::vector<T> &v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = toFloat(v[i]);
  return out;
}

/// As expectClose where `want` is finite; where it is infinite, `got` equal
/// to it.
template <typename G>
void expectCloseOrInfinite(const std::vector<G> &got,
                           const std::vector<float> &want, double rel,
                           double abs, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::vector<float> finiteGot = floats(got), finiteWant = want;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::isinf(want[i])) {
      EXPECT_EQ(finiteGot[i], want[i]) << what << ": element " << i;
      finiteGot[i] = finiteWant[i] = 0;
    }
  expectClose(finiteGot, finiteWant, rel, abs, what);
}

/// TOP_CANDIDATES of `logits` [rows, cols] (already rounded to T) on the
/// device and on the CPU: the same values and ids, bit for bit, and lse
/// within T's rounding of the CPU's (float's for float).
template <typename T>
void expectTopCandidatesOfCpu(const std::vector<float> &logits, int64_t rows,
                              int64_t cols, int64_t vocabStart,
                              int64_t vocabSize, int64_t k) {
  SCOPED_TRACE(testing::Message()
               << rows << " rows of " << cols << " columns from " << vocabStart
               << " of " << vocabSize << ", k " << k);
  std::vector<float> values(rows * k), lse(rows);
  std::vector<int32_t> ids(rows * k);
  cpu::topCandidates(logits.data(), rows, cols, vocabStart, vocabSize, k,
                     values.data(), ids.data(), lse.data());
  Device<T> glogits(as<T>(logits)), gvalues(rows * k), glse(rows);
  Device<int32_t> gids(rows * k);
  ASSERT_EQ(cuda::topCandidates(glogits.get(), rows, cols, vocabStart,
                                vocabSize, k, gvalues.get(), gids.get(),
                                glse.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(gids.host(), ids);
  EXPECT_EQ(floats(gvalues.host()), values);
  const bool isFloat = std::is_same_v<T, float>;
  expectCloseOrInfinite(glse.host(), lse,
                        isFloat ? 1e-6 : relativeTolerance<T>(),
                        isFloat ? 1e-6 : absoluteTolerance<T>(), "lse");
}

TYPED_TEST(CudaGeneration, TopCandidatesAreTheCpus) {
  using T = TypeParam;
  // A rank's 300 columns from token 700 of a vocabulary of 950: columns 250
  // and up are padding (their logits large: never candidates). Rounded to
  // T (ties among them, bf16 most); row 1 all equal (the lowest ids), row 2
  // five values over and over, row 3 every valid logit -inf (lse -inf, the
  // lowest ids), row 4 a few large logits over a flat rest.
  const int64_t rows = 6, cols = 300, vocabStart = 700, vocabSize = 950;
  std::vector<float> logits = randomValues(rows * cols, 60, 3.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) {
      float &x = logits[r * cols + i];
      if (vocabStart + i >= vocabSize)
        x = 50.0f;
      else if (r == 1)
        x = 0.5f;
      else if (r == 2)
        x = float(i % 5) - 2.0f;
      else if (r == 3)
        x = -INFINITY;
      else if (r == 4)
        x = i % 37 == 3 ? 6.0f + float(i % 2) : -1.0f;
    }
  logits = rounded<T>(logits);
  for (int64_t k : {1, 16, 64, 250})
    expectTopCandidatesOfCpu<T>(logits, rows, cols, vocabStart, vocabSize, k);
  // Fewer valid columns than k (the rest -inf and kNoCandidate), and none
  // (the rank wholly past the vocabulary: lse -inf).
  expectTopCandidatesOfCpu<T>(logits, rows, cols, vocabStart, vocabStart + 10,
                              16);
  expectTopCandidatesOfCpu<T>(logits, rows, cols, vocabStart, vocabStart, 16);
  expectTopCandidatesOfCpu<T>(logits, rows, cols, vocabStart, 600, 4);
  // A wide rank: many passes of the block over each row.
  std::vector<float> wide = rounded<T>(randomValues(2 * 40000, 61, 2.0f));
  expectTopCandidatesOfCpu<T>(wide, 2, 40000, 80000, 200000, 64);
}

/// Gathered candidates: rows of `vocab` columns, each a token of a
/// vocabulary of `vocabSize` (distinct, in no order of the columns) or, for
/// a few, kNoCandidate with a logit of -inf; and each row's `lseCount`
/// log-sum-exps. Rounded to T.
struct GatheredCandidates {
  std::vector<float> logits;
  std::vector<int32_t> ids;
  std::vector<float> lse;
};

template <typename T>
GatheredCandidates gatheredCandidates(int64_t rows, int64_t vocab,
                                      int64_t vocabSize, int64_t lseCount,
                                      uint32_t seed) {
  GatheredCandidates g;
  g.logits = randomValues(rows * vocab, seed, 3.0f);
  g.lse = randomValues(rows * lseCount, seed + 1, 2.0f);
  for (float &l : g.lse)
    l += 8.0f;
  g.lse[lseCount] = -INFINITY; // a rank of row 1 without a valid column
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(vocabSize);
  std::iota(tokens.begin(), tokens.end(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::shuffle(tokens.begin(), tokens.end(), rng);
    for (int64_t i = 0; i < vocab; ++i) {
      float &x = g.logits[r * vocab + i];
      int32_t id = tokens[i];
      if (i % 13 == 12) {
        x = -INFINITY;
        id = cpu::kNoCandidate;
      } else if (r == 1 && i % 5 == 0) {
        x = 9.5f; // ties at the top, their ids in no order
      } else if (r == 2 && i % 3 == 0) {
        x = 1.0f; // ties within
      }
      g.ids.push_back(id);
    }
  }
  g.logits = rounded<T>(g.logits);
  g.lse = rounded<T>(g.lse);
  return g;
}

TYPED_TEST(CudaGeneration, CandidatesDrawAndRankAsTheCpu) {
  using T = TypeParam;
  // 8 rows of 64 candidates (4 ranks' 16) and 3 of 2048 (4 ranks' 512)
  // from a vocabulary of 5000.
  const int64_t vocabSize = 5000, lseCount = 4;
  std::vector<int32_t> seed = {0x2468ace, 77};
  for (int64_t rows : {8, 3}) {
    const int64_t vocab = rows == 8 ? 64 : 2048;
    SCOPED_TRACE(testing::Message()
                 << rows << " rows of " << vocab << " candidates");
    GatheredCandidates g =
        gatheredCandidates<T>(rows, vocab, vocabSize, lseCount, 70);
    std::vector<int32_t> counters(rows);
    for (int64_t r = 0; r < rows; ++r)
      counters[r] = int32_t(50 + 7 * r);
    Device<T> glogits(as<T>(g.logits)), glse(as<T>(g.lse));
    Device<int32_t> gcandidates(g.ids), gcounters(counters), gseed(seed);
    const cpu::Candidates<float> from{g.ids.data(), vocabSize, g.lse.data(),
                                      lseCount};
    const cuda::Candidates<T> gfrom{gcandidates.get(), vocabSize, glse.get(),
                                    lseCount};
    for (std::vector<float> settings : {std::vector<float>{0, 0, 1},
                                        {1, 8, 1},
                                        {0.6f, 30, 1},
                                        {1, 16, 0.8f},
                                        {1.5f, 40, 0.5f},
                                        {1, 3, 0.7f},
                                        {1, 0, 0.9f},
                                        {1, 0, 1}}) {
      SCOPED_TRACE(testing::Message()
                   << "temperature " << settings[0] << ", top_k " << settings[1]
                   << ", top_p " << settings[2]);
      std::vector<int32_t> ids(rows);
      cpu::sampleTokens(g.logits.data(), rows, vocab, vocab, settings.data(),
                        cpu::samplingSeed(seed[0], seed[1]), counters.data(),
                        ids.data(), from);
      Device<float> gsettings(settings);
      Device<int32_t> gids(rows);
      ASSERT_EQ(cuda::sampleTokens(glogits.get(), rows, vocab, vocab,
                                   gsettings.get(), gseed.get(),
                                   gcounters.get(), gids.get(), nullptr, gfrom),
                cudaSuccess);
      EXPECT_EQ(gids.host(), ids);
      for (int32_t id : ids)
        EXPECT_TRUE(std::find(g.ids.begin(), g.ids.end(), id) != g.ids.end())
            << id << " is no candidate";
    }
    // k up to every column: the kNoCandidate slots last, -inf (the k-th
    // among them, equal, at vocab - 2).
    for (int64_t k : {int64_t(1), int64_t(8), vocab - 2, vocab}) {
      SCOPED_TRACE(testing::Message() << "top logprobs, k " << k);
      std::vector<float> values(rows * k);
      std::vector<int32_t> ids(rows * k);
      cpu::topLogprobs(g.logits.data(), rows, vocab, vocab, k, values.data(),
                       ids.data(), from);
      Device<float> gvalues(rows * k);
      Device<int32_t> gids(rows * k);
      ASSERT_EQ(cuda::topLogprobs(glogits.get(), rows, vocab, vocab, k,
                                  gvalues.get(), gids.get(), nullptr, gfrom),
                cudaSuccess);
      EXPECT_EQ(gids.host(), ids);
      expectCloseOrInfinite(gvalues.host(), values, 2e-6, 2e-6, "values");
    }
  }
}

TYPED_TEST(CudaGeneration, RanksCandidatesDrawAsTheWholeRow) {
  using T = TypeParam;
  // Rows of a vocabulary of 998 padded to 1000 (the padding's logits large:
  // never drawn), split over 4 ranks of 250 columns (the last with the 2
  // padding columns); each rank's 16 best (TOP_CANDIDATES) gathered into
  // 64 candidates. SAMPLE on them, greedy or with top_k in [1, 16] (and
  // top-p), draws the whole row's id; TOP_LOGPROBS of up to 16 ranks the
  // whole row's ids with its log-probabilities. Only the device: no CPU
  // reference, the whole row's draw is the candidates'.
  const int64_t rows = 48, padded = 1000, vocabSize = 998, ranks = 4;
  const int64_t cols = padded / ranks, k = 16, gathered = ranks * k;
  const bool isFloat = std::is_same_v<T, float>;
  int64_t draws = 0, notTheArgmax = 0, exceptions = 0;
  for (uint32_t trial = 0; trial < 4; ++trial) {
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    std::vector<float> logits =
        randomValues(rows * padded, 80 + trial, 2.0f + float(trial));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = vocabSize; i < padded; ++i)
        logits[r * padded + i] = 50.0f;
    logits = rounded<T>(logits);
    // Each rank's slice of the rows, its candidates, gathered.
    std::vector<T> values(rows * gathered), lse(rows * ranks);
    std::vector<int32_t> candidateIds(rows * gathered);
    for (int64_t rank = 0; rank < ranks; ++rank) {
      std::vector<float> slice(rows * cols);
      for (int64_t r = 0; r < rows; ++r)
        std::copy_n(logits.begin() + r * padded + rank * cols, cols,
                    slice.begin() + r * cols);
      Device<T> gslice(as<T>(slice)), gvalues(rows * k), glse(rows);
      Device<int32_t> gids(rows * k);
      ASSERT_EQ(cuda::topCandidates(gslice.get(), rows, cols, rank * cols,
                                    vocabSize, k, gvalues.get(), gids.get(),
                                    glse.get(), nullptr),
                cudaSuccess);
      std::vector<T> v = gvalues.host(), l = glse.host();
      std::vector<int32_t> ids = gids.host();
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(v.begin() + r * k, k,
                    values.begin() + r * gathered + rank * k);
        std::copy_n(ids.begin() + r * k, k,
                    candidateIds.begin() + r * gathered + rank * k);
        lse[r * ranks + rank] = l[r];
      }
    }
    Device<T> glogits(as<T>(logits)), gvalues(values), glse(lse);
    Device<int32_t> gcandidates(candidateIds);
    const cuda::Candidates<T> from{gcandidates.get(), vocabSize, glse.get(),
                                   ranks};
    std::vector<int32_t> counters(rows), seed = {int32_t(trial * 1000 + 1), 3};
    for (int64_t r = 0; r < rows; ++r)
      counters[r] = int32_t(r * 11 + trial);
    Device<int32_t> gcounters(counters), gseed(seed);
    std::vector<int32_t> greedy;
    for (std::vector<float> settings : {std::vector<float>{0, 0, 1},
                                        {1, 16, 1},
                                        {0.7f, 5, 1},
                                        {1, 16, 0.9f},
                                        {1.5f, 8, 0.6f},
                                        {2, 1, 1},
                                        {1, 12, 0.999f}}) {
      SCOPED_TRACE(testing::Message()
                   << "temperature " << settings[0] << ", top_k " << settings[1]
                   << ", top_p " << settings[2]);
      Device<float> gsettings(settings);
      Device<int32_t> gwhole(rows), gdrawn(rows);
      ASSERT_EQ(cuda::sampleTokens(glogits.get(), rows, padded, vocabSize,
                                   gsettings.get(), gseed.get(),
                                   gcounters.get(), gwhole.get(), nullptr),
                cudaSuccess);
      ASSERT_EQ(cuda::sampleTokens(
                    gvalues.get(), rows, gathered, gathered, gsettings.get(),
                    gseed.get(), gcounters.get(), gdrawn.get(), nullptr, from),
                cudaSuccess);
      std::vector<int32_t> whole = gwhole.host(), drawn = gdrawn.host();
      const int64_t topK = int64_t(settings[1]);
      for (int64_t r = 0; r < rows; ++r) {
        // The exception the candidates' promise names: a tie at the whole
        // row's top_k-th largest logit (the z's order) spreading past a
        // rank's k candidates.
        if (topK > 0) {
          std::vector<float> row(logits.begin() + r * padded,
                                 logits.begin() + r * padded + vocabSize);
          std::nth_element(row.begin(), row.begin() + (topK - 1), row.end(),
                           std::greater<float>());
          const float least = row[topK - 1];
          bool spreads = false;
          for (int64_t rank = 0; rank < ranks; ++rank) {
            int64_t atLeast = 0;
            for (int64_t i = rank * cols;
                 i < std::min((rank + 1) * cols, vocabSize); ++i)
              atLeast += logits[r * padded + i] >= least;
            spreads |= atLeast > k;
          }
          if (spreads) {
            ++exceptions;
            continue;
          }
        }
        EXPECT_EQ(drawn[r], whole[r]) << "row " << r;
        ++draws;
        if (settings[0] == 0)
          continue;
        notTheArgmax += whole[r] != greedy[r];
      }
      if (settings[0] == 0)
        greedy = whole;
    }
    // TOP_LOGPROBS of the 16 best, and of 5: the whole row's ids, its
    // values within the rounding of the ranks' lse to T.
    for (int64_t best : {int64_t(5), k}) {
      std::vector<float> wholeValues, candidateValues;
      std::vector<int32_t> wholeIds, gatheredIds;
      Device<float> gwv(rows * best), gcv(rows * best);
      Device<int32_t> gwi(rows * best), gci(rows * best);
      ASSERT_EQ(cuda::topLogprobs(glogits.get(), rows, padded, vocabSize, best,
                                  gwv.get(), gwi.get(), nullptr),
                cudaSuccess);
      ASSERT_EQ(cuda::topLogprobs(gvalues.get(), rows, gathered, gathered, best,
                                  gcv.get(), gci.get(), nullptr, from),
                cudaSuccess);
      EXPECT_EQ(gci.host(), gwi.host()) << "top logprobs of " << best;
      double largestLse = 0;
      for (T l : lse)
        largestLse = std::max(largestLse, std::abs(double(toFloat(l))));
      expectClose(gcv.host(), gwv.host(), isFloat ? 1e-6 : 0,
                  isFloat ? 1e-6 : relativeTolerance<T>() * largestLse,
                  "top logprobs' values");
    }
  }
  // The comparisons were many, drawn (not the argmax), and the exceptions
  // few.
  EXPECT_GE(draws, 4 * rows * 6);
  EXPECT_GE(notTheArgmax, draws / 10);
  EXPECT_LE(exceptions, draws / 20);
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
