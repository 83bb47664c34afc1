//===- CudaKernelsTest.cpp - CUDA kernels against the CPU kernels ---------===//
//
// Every CUDA kernel of runtime/cuda/Kernels.h on the same inputs as its CPU
// counterpart (runtime/cpu), which is the reference. fp32: within 1e-5
// relative (plus an absolute floor of 1e-6 for values near 0, where the
// GPU's float sums and the CPU's double ones differ by their rounding only).
// bf16: the inputs are rounded to bf16 first and the reference runs in float
// on the rounded inputs, so what is compared is the kernel's arithmetic and
// its one rounding of each stored value: within 1/128 relative (bf16 keeps 8
// significant bits, a rounding is at most 1/256); fp16 likewise within
// 1/1024 (11 bits).
//
// Without a CUDA device every test skips.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/cpu/VocabParallel.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/Kernels.h"

#include "CudaTestUtil.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace braid;
using namespace braid::cudatest;
using cuda::bf16;
using cuda::f16;

namespace {

template <typename T> class CudaKernelsOf : public CudaKernels {};
using Types = ::testing::Types<float, bf16, f16>;
TYPED_TEST_SUITE(CudaKernelsOf, Types);

TYPED_TEST(CudaKernelsOf, RmsNorm) {
  using T = TypeParam;
  // 70 rows of 1000: a row longer than a block and not a multiple of it,
  // more rows than a block of dw's column sums (64), 16-byte vectors of
  // either type; 2100 rows of 40: many blocks of the column sums, rows
  // narrower than a block; 3 rows of 12300: a row many times a block; 5
  // rows of 1002: vectors of neither, element by element. The backward's
  // one pass (a warp per row): 8500 rows of 48, more rows than the grid's
  // warps (each warp takes two); 20 rows of 4096, 16 vectors a lane in bf16
  // and fp16 (fp32's 1024 vectors take the two kernels).
  for (auto [rows, d] : {std::pair<int64_t, int64_t>{70, 1000}, {2100, 40},
                         {3, 12300}, {5, 1002}, {8500, 48}, {20, 4096}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows of " << d);
    std::vector<float> x = rounded<T>(randomValues(rows * d, 1)),
                       w = rounded<T>(randomValues(d, 2, 0.5f)),
                       dy = rounded<T>(randomValues(rows * d, 3));
    std::vector<float> dw0 = randomValues(d, 4);
    std::vector<float> y(rows * d), rstd(rows), dx(rows * d), dw = dw0;
    cpu::rmsNormForward(x.data(), w.data(), rows, d, 1e-5, y.data(),
                        rstd.data());
    cpu::rmsNormBackward(x.data(), w.data(), rstd.data(), dy.data(), rows, d,
                         dx.data(), dw.data());

    Device<T> gx(as<T>(x)), gw(as<T>(w)), gdy(as<T>(dy)), gy(rows * d),
        gdx(rows * d);
    Device<float> grstd(rows), gdw(dw0);
    ASSERT_EQ(cuda::rmsNormForward(gx.get(), gw.get(), rows, d, 1e-5,
                                   gy.get(), grstd.get(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::rmsNormBackward(gx.get(), gw.get(), grstd.get(),
                                    gdy.get(), rows, d, gdx.get(), gdw.get(),
                                    nullptr),
              cudaSuccess);
    double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
    expectClose(gy.host(), y, rel, abs, "y");
    expectClose(grstd.host(), rstd, 1e-5, 1e-6, "rstd");
    expectClose(gdx.host(), dx, rel, abs, "dx");
    // dw is float in both: only the order of its sums differs (the CPU's
    // one after another over the rows: an absolute floor of the rounding
    // of `rows` terms, as the linear's dw).
    const double dwAbs = 1e-5 * std::sqrt(double(rows));
    expectClose(gdw.host(), dw, 1e-5, dwAbs, "dw");
    // In place (dx over dy), as the executor may run it.
    Device<float> gdw2(dw0);
    ASSERT_EQ(cuda::rmsNormBackward(gx.get(), gw.get(), grstd.get(),
                                    gdy.get(), rows, d, gdy.get(), gdw2.get(),
                                    nullptr),
              cudaSuccess);
    expectClose(gdy.host(), dx, rel, abs, "dx over dy");
    expectClose(gdw2.host(), dw, 1e-5, dwAbs, "dw (dx over dy)");
  }
}

TYPED_TEST(CudaKernelsOf, Rope) {
  using T = TypeParam;
  // Positions up to 299, where a float angle would be off by 1e-5; head
  // dimension 64 (16-byte vectors of frequencies, a thread per head at
  // this many rows) and 12 (half of it, 6, a multiple of neither type's
  // vector: element by element); 4200 positions of dimension 64, where a
  // thread rotates every head.
  for (auto [headDim, seq] : {std::pair<int64_t, int64_t>{64, 300},
                              {12, 300}, {64, 4200}}) {
    SCOPED_TRACE(testing::Message()
                 << "head dimension " << headDim << ", " << seq
                 << " positions");
    const int64_t batch = 2, heads = 3;
    const int64_t n = batch * seq * heads * headDim;
    std::vector<float> x = rounded<T>(randomValues(n, 5));
    std::vector<float> y(n), back(n);
    cpu::ropeForward(x.data(), batch, seq, heads, headDim, 10000.0, y.data());
    cpu::ropeBackward(x.data(), batch, seq, heads, headDim, 10000.0,
                      back.data());
    Device<T> gx(as<T>(x)), gy(n), gback(n);
    ASSERT_EQ(cuda::ropeForward(gx.get(), batch, seq, heads, headDim, 10000.0,
                                gy.get(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::ropeBackward(gx.get(), batch, seq, heads, headDim, 10000.0,
                                 gback.get(), nullptr),
              cudaSuccess);
    double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
    expectClose(gy.host(), y, rel, abs, "forward");
    expectClose(gback.host(), back, rel, abs, "backward");
    // In place, as the executor may run it.
    ASSERT_EQ(cuda::ropeForward(gx.get(), batch, seq, heads, headDim, 10000.0,
                                gx.get(), nullptr),
              cudaSuccess);
    expectClose(gx.host(), y, rel, abs, "in place");
  }
}

TYPED_TEST(CudaKernelsOf, Swiglu) {
  using T = TypeParam;
  const int64_t n = 10007;
  std::vector<float> gate = rounded<T>(randomValues(n, 6, 3.0f)),
                     up = rounded<T>(randomValues(n, 7)),
                     dy = rounded<T>(randomValues(n, 8));
  std::vector<float> y(n), dgate(n), dup(n);
  cpu::swigluForward(gate.data(), up.data(), n, y.data());
  cpu::swigluBackward(gate.data(), up.data(), dy.data(), n, dgate.data(),
                      dup.data());
  Device<T> ggate(as<T>(gate)), gup(as<T>(up)), gdy(as<T>(dy)), gy(n),
      gdgate(n), gdup(n);
  ASSERT_EQ(cuda::swigluForward(ggate.get(), gup.get(), n, gy.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::swigluBackward(ggate.get(), gup.get(), gdy.get(), n,
                                 gdgate.get(), gdup.get(), nullptr),
            cudaSuccess);
  double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
  expectClose(gy.host(), y, rel, abs, "y");
  expectClose(gdgate.host(), dgate, rel, abs, "dgate");
  expectClose(gdup.host(), dup, rel, abs, "dup");
}

TYPED_TEST(CudaKernelsOf, Embedding) {
  using T = TypeParam;
  // Ids repeat, so rows add into the same gradient row.
  const int64_t vocab = 50, hidden = 96, rows = 300;
  std::vector<int32_t> ids(rows);
  for (int64_t r = 0; r < rows; ++r)
    ids[r] = int32_t((r * 7) % vocab);
  std::vector<float> table = rounded<T>(randomValues(vocab * hidden, 9)),
                     dout = rounded<T>(randomValues(rows * hidden, 10));
  std::vector<float> out(rows * hidden),
      dtable = randomValues(vocab * hidden, 11);
  std::vector<float> dtable0 = dtable;
  cpu::embeddingForward(table.data(), ids.data(), rows, hidden, out.data());
  cpu::embeddingBackward(dout.data(), ids.data(), rows, hidden, dtable.data());
  Device<T> gtable(as<T>(table)), gdout(as<T>(dout)), gout(rows * hidden);
  Device<int32_t> gids(ids);
  Device<float> gdtable(dtable0);
  ASSERT_EQ(cuda::embeddingForward(gtable.get(), gids.get(), rows, hidden,
                                   gout.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::embeddingBackward(gdout.get(), gids.get(), rows, hidden,
                                    gdtable.get(), nullptr),
            cudaSuccess);
  // A gather is exact; the gradient's sums differ in order only.
  expectClose(gout.host(), out, 0, 0, "out");
  expectClose(gdtable.host(), dtable, 1e-5, 1e-5, "dtable");
}

TYPED_TEST(CudaKernelsOf, CrossEntropy) {
  using T = TypeParam;
  // Rows with the ignored target (-100) count neither in the loss nor in
  // its gradient.
  const int64_t rows = 33, vocab = 5003, ignore = -100;
  std::vector<float> logits = rounded<T>(randomValues(rows * vocab, 12, 2.0f));
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r)
    targets[r] = r % 5 == 3 ? int32_t(ignore) : int32_t((r * 131) % vocab);
  std::vector<float> lse(rows), dlogits(rows * vocab);
  int64_t counted = 0;
  float loss = cpu::crossEntropyForward(logits.data(), targets.data(), rows,
                                        vocab, ignore, lse.data(), &counted);
  cpu::crossEntropyBackward(logits.data(), targets.data(), lse.data(), 0.5f,
                            rows, vocab, ignore, counted, dlogits.data());
  ASSERT_EQ(counted, rows - 6); // rows 3, 8, ..., 28 are ignored

  Device<T> glogits(as<T>(logits)), gdlogits(rows * vocab);
  Device<int32_t> gtargets(targets);
  Device<float> glse(rows), gterms(rows), gloss(1),
      gdloss(std::vector<float>{0.5f});
  Device<int64_t> gcounted(1);
  ASSERT_EQ(cuda::crossEntropyForward(glogits.get(), gtargets.get(), rows,
                                      vocab, ignore, glse.get(), gterms.get(),
                                      gloss.get(), gcounted.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::crossEntropyBackward(
                glogits.get(), gtargets.get(), glse.get(), gdloss.get(), rows,
                vocab, ignore, gcounted.get(), gdlogits.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(gcounted.host()[0], counted);
  // The loss and lse are float in both (from the same rounded logits).
  expectClose(gloss.host(), {loss}, 1e-5, 1e-6, "loss");
  expectClose(glse.host(), lse, 1e-5, 1e-6, "lse");
  expectClose(gdlogits.host(), dlogits, relativeTolerance<T>(), 1e-7,
              "dlogits");
}

TYPED_TEST(CudaKernelsOf, VocabularyParallelEmbedding) {
  using T = TypeParam;
  // The vocabulary of 50 split in slices of 20 (the last one short, 10
  // rows): each slice's output and gradient against the CPU's kernels of
  // the same slice (runtime/cpu/VocabParallel.h), ids from every slice.
  const int64_t vocab = 50, hidden = 72, rows = 130, local = 20;
  std::vector<int32_t> ids(rows);
  for (int64_t r = 0; r < rows; ++r)
    ids[r] = int32_t((r * 11) % vocab);
  for (int64_t start = 0; start < vocab; start += local) {
    SCOPED_TRACE(testing::Message() << "slice from " << start);
    int64_t n = std::min(local, vocab - start);
    std::vector<float> table = rounded<T>(randomValues(n * hidden, 40)),
                       dout = rounded<T>(randomValues(rows * hidden, 41));
    std::vector<float> out(rows * hidden), dtable = randomValues(n * hidden, 42);
    std::vector<float> dtable0 = dtable;
    cpu::embeddingForwardRange(table.data(), ids.data(), rows, hidden, start,
                               n, out.data());
    cpu::embeddingBackwardRange(dout.data(), ids.data(), rows, hidden, start,
                                n, dtable.data());
    Device<T> gtable(as<T>(table)), gdout(as<T>(dout)), gout(rows * hidden);
    Device<int32_t> gids(ids);
    Device<float> gdtable(dtable0);
    ASSERT_EQ(cuda::embeddingForwardRange(gtable.get(), gids.get(), rows,
                                          hidden, start, n, gout.get(),
                                          nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::embeddingBackwardRange(gdout.get(), gids.get(), rows,
                                           hidden, start, n, gdtable.get(),
                                           nullptr),
              cudaSuccess);
    expectClose(gout.host(), out, 0, 0, "out");
    expectClose(gdtable.host(), dtable, 1e-5, 1e-5, "dtable");
  }
}

TYPED_TEST(CudaKernelsOf, VocabularyParallelCrossEntropy) {
  using T = TypeParam;
  // Two slices of a vocabulary of 3001 (1500 and 1501 columns), each
  // rank's logits a copy of its columns. The ranks' partials summed on the
  // host (the all-reduces) must give the whole-row loss, lse and gradient
  // of the CPU's single-rank kernels on the same logits.
  const int64_t rows = 21, vocab = 3001, ignore = -100;
  const int64_t starts[2] = {0, 1500}, widths[2] = {1500, 1501};
  std::vector<float> logits = rounded<T>(randomValues(rows * vocab, 43, 2.0f));
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r)
    targets[r] = r % 7 == 2 ? int32_t(ignore) : int32_t((r * 977) % vocab);
  std::vector<float> lse(rows), dlogits(rows * vocab);
  int64_t counted = 0;
  float loss = cpu::crossEntropyForward(logits.data(), targets.data(), rows,
                                        vocab, ignore, lse.data(), &counted);
  cpu::crossEntropyBackward(logits.data(), targets.data(), lse.data(), 0.5f,
                            rows, vocab, ignore, counted, dlogits.data());
  Device<int32_t> gtargets(targets);
  std::vector<std::unique_ptr<Device<T>>> slices;
  std::vector<float> globalMax(rows, -INFINITY);
  for (int k = 0; k < 2; ++k) {
    std::vector<float> part(rows * widths[k]);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < widths[k]; ++c)
        part[r * widths[k] + c] = logits[r * vocab + starts[k] + c];
    slices.push_back(std::make_unique<Device<T>>(as<T>(part)));
    Device<T> gmax(rows);
    ASSERT_EQ(cuda::crossEntropyRowMax(slices[k]->get(), rows, widths[k],
                                       gmax.get(), nullptr),
              cudaSuccess);
    std::vector<T> m = gmax.host();
    for (int64_t r = 0; r < rows; ++r)
      globalMax[r] = std::max(globalMax[r], toFloat(m[r]));
  }
  for (int64_t r = 0; r < rows; ++r) // the maximum is one of the logits
    EXPECT_EQ(globalMax[r], *std::max_element(&logits[r * vocab],
                                              &logits[(r + 1) * vocab]));
  Device<T> gmax(as<T>(globalMax));
  std::vector<float> summed(2 * rows, 0.0f);
  for (int k = 0; k < 2; ++k) {
    Device<float> gpartial(2 * rows);
    ASSERT_EQ(cuda::crossEntropyPartial(slices[k]->get(), gtargets.get(),
                                        gmax.get(), rows, widths[k], starts[k],
                                        ignore, gpartial.get(), nullptr),
              cudaSuccess);
    std::vector<float> p = gpartial.host();
    for (int64_t i = 0; i < 2 * rows; ++i)
      summed[i] += p[i];
  }
  Device<float> gsummed(summed), glse(rows), gterms(rows), gloss(1),
      gdloss(std::vector<float>{0.5f});
  Device<int64_t> gcounted(1);
  ASSERT_EQ(cuda::crossEntropyFinish(gsummed.get(), gmax.get(), gtargets.get(),
                                     rows, ignore, glse.get(), gterms.get(),
                                     gloss.get(), gcounted.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(gcounted.host()[0], counted);
  expectClose(gloss.host(), {loss}, 1e-5, 1e-6, "loss");
  std::vector<float> gotLse = glse.host();
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] != ignore) {
      EXPECT_NEAR(gotLse[r], lse[r], 1e-5 * std::abs(lse[r]) + 1e-6) << r;
    }
  }
  for (int k = 0; k < 2; ++k) {
    Device<T> gdlogits(rows * widths[k]);
    ASSERT_EQ(cuda::crossEntropyBackward(slices[k]->get(), gtargets.get(),
                                         glse.get(), gdloss.get(), rows,
                                         widths[k], ignore, gcounted.get(),
                                         gdlogits.get(), nullptr, starts[k]),
              cudaSuccess);
    std::vector<float> want(rows * widths[k]);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < widths[k]; ++c)
        want[r * widths[k] + c] = dlogits[r * vocab + starts[k] + c];
    expectClose(gdlogits.host(), want, relativeTolerance<T>(), 1e-7,
                "dlogits");
  }
}

/// A Gemm, tuning on `scratch` where given (else the heuristic's first).
absl::StatusOr<std::unique_ptr<cuda::Gemm>>
gemmTunedIn(Device<float> *scratch) {
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create();
  if (gemm.ok() && scratch)
    (*gemm)->SetTuning(scratch->get(), scratch->size() * sizeof(float),
                       nullptr);
  return gemm;
}

TYPED_TEST(CudaKernelsOf, Linear) {
  using T = TypeParam;
  // Both weight layouts, with no bias, a bias (the epilogue) and a scaled
  // one (the separate kernel); dw and dbias accumulate onto what they held.
  // With the heuristic's first algorithm, and with the fastest of its
  // candidates timed on random operands in a scratch (Gemm::SetTuning).
  const int64_t rows = 77, in = 96, out = 40;
  for (bool tuned : {false, true}) {
    SCOPED_TRACE(tuned ? "tuned" : "the heuristic's first");
    std::vector<float> x = rounded<T>(randomValues(rows * in, 20)),
                       w = rounded<T>(randomValues(in * out, 21, 0.2f)),
                       bias = rounded<T>(randomValues(out, 22)),
                       dy = rounded<T>(randomValues(rows * out, 23)),
                       dw0 = randomValues(in * out, 24),
                       dbias0 = randomValues(out, 25);
    Device<float> scratch(size_t(1) << 18);
    absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm =
        gemmTunedIn(tuned ? &scratch : nullptr);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    // A product's float sums differ in order: an absolute floor of the
    // rounding of k terms.
    double rel = relativeTolerance<T>(), abs = 1e-5 * std::sqrt(double(in));
    for (bool transposeW : {false, true})
      for (double biasScale : {0.0, 1.0, 0.5}) {
        SCOPED_TRACE(testing::Message() << "transposeW " << transposeW
                                        << ", bias scale " << biasScale);
        cpu::LinearShape s{rows, in, out, transposeW, biasScale};
        const float *cpuBias = biasScale > 0 ? bias.data() : nullptr;
        std::vector<float> y(rows * out), dx(rows * in), dw = dw0,
                                                         dbias = dbias0;
        cpu::linearForward(x.data(), w.data(), cpuBias, s, y.data());
        cpu::linearBackward(x.data(), w.data(), dy.data(), s, dx.data(),
                            dw.data(), cpuBias ? dbias.data() : nullptr);

        Device<T> gx(as<T>(x)), gw(as<T>(w)), gbias(as<T>(bias)),
            gdy(as<T>(dy)), gy(rows * out), gdx(rows * in);
        Device<float> gdw(dw0), gdbias(dbias0);
        ASSERT_TRUE((*gemm)->Prepare<T>(s, cpuBias != nullptr).ok());
        absl::Status st = (*gemm)->LinearForward<T>(
            gx.get(), gw.get(), cpuBias ? gbias.get() : nullptr, s, gy.get(),
            nullptr);
        ASSERT_TRUE(st.ok()) << st;
        st = (*gemm)->LinearBackward<T>(
            gx.get(), gw.get(), gdy.get(), s, gdx.get(), gdw.get(),
            cpuBias ? gdbias.get() : nullptr, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        expectClose(gy.host(), y, rel, abs, "y");
        expectClose(gdx.host(), dx, rel, abs, "dx");
        expectClose(gdw.host(), dw, 1e-5, 1e-5 * std::sqrt(double(rows)), "dw");
        expectClose(gdbias.host(), dbias, 1e-5, 1e-5 * std::sqrt(double(rows)),
                    "dbias");
      }
    // Each problem's algorithm was chosen once: per layout, forward with and
    // without the epilogue, the input gradient and the weight gradient.
    EXPECT_EQ((*gemm)->ChosenAlgorithms(), 2u * 4u);
    // Tuned, problems with several candidates were timed (cuBLASLt offers
    // several for these shapes; the emulation three).
    if (tuned)
      EXPECT_GT((*gemm)->TunedProblems(), 0u);
    else
      EXPECT_EQ((*gemm)->TunedProblems(), 0u);
  }
}

TYPED_TEST(CudaKernelsOf, LinearOfFewRows) {
  using T = TypeParam;
  // Products of 1 to 9 rows with the weight [out, in] (decode's): in bf16
  // and fp16 up to kFewRowsLinearMaxRows rows Braid's fewRowsLinear takes
  // them (untimed, and when timed against cuBLASLt whichever is faster);
  // either way y is the CPU's. in 136 is 17 vectors of 8 (a warp's lanes
  // unevenly loaded), 100 not a multiple of 8 (cuBLASLt's).
  for (bool tuned : {false, true})
    for (int64_t in : {int64_t(136), int64_t(100)}) {
      const int64_t out = 45;
      Device<float> scratch(size_t(1) << 18);
      absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm =
          gemmTunedIn(tuned ? &scratch : nullptr);
      ASSERT_TRUE(gemm.ok()) << gemm.status();
      size_t eligible = 0;
      for (int64_t rows : {1, 2, 3, 4, 5, 8, 9})
        for (double biasScale : {0.0, 1.0, 0.5}) {
          SCOPED_TRACE(testing::Message()
                       << (tuned ? "tuned, " : "") << rows << " x " << in
                       << " -> " << out << ", bias scale " << biasScale);
          std::vector<float> x = rounded<T>(randomValues(rows * in, 30 + rows)),
                             w = rounded<T>(randomValues(in * out, 31, 0.2f)),
                             bias = rounded<T>(randomValues(out, 32));
          cpu::LinearShape s{rows, in, out, true, biasScale};
          const float *cpuBias = biasScale > 0 ? bias.data() : nullptr;
          std::vector<float> y(rows * out);
          cpu::linearForward(x.data(), w.data(), cpuBias, s, y.data());
          Device<T> gx(as<T>(x)), gw(as<T>(w)), gbias(as<T>(bias)),
              gy(rows * out);
          const bool takes = cuda::fewRowsLinearTakes<T>(
              gx.get(), gw.get(), cpuBias ? gbias.get() : nullptr, s);
          const bool wanted =
              !std::is_same_v<T, float> && rows <= 8 && in % 8 == 0;
          EXPECT_EQ(takes, wanted);
          eligible += takes && biasScale != 0.5;
          ASSERT_TRUE((*gemm)->Prepare<T>(s, cpuBias != nullptr).ok());
          absl::Status st = (*gemm)->LinearForward<T>(
              gx.get(), gw.get(), cpuBias ? gbias.get() : nullptr, s, gy.get(),
              nullptr);
          ASSERT_TRUE(st.ok()) << st;
          expectClose(gy.host(), y, relativeTolerance<T>(),
                      1e-5 * std::sqrt(double(in)), "y");
          if (takes) {
            // The kernel by itself too, the bias scaled in it.
            Device<T> direct(rows * out);
            ASSERT_EQ(cuda::fewRowsLinear<T>(gx.get(), gw.get(),
                                             cpuBias ? gbias.get() : nullptr,
                                             s, direct.get(), nullptr),
                      cudaSuccess);
            expectClose(direct.host(), y, relativeTolerance<T>(),
                        1e-5 * std::sqrt(double(in)), "fewRowsLinear's y");
          }
        }
      // One note per eligible problem (with and without the bias; the
      // scaled bias is the bias problem's), and untimed every one is
      // Braid's.
      EXPECT_EQ((*gemm)->Notes().size(), eligible);
      if (!tuned)
        EXPECT_EQ((*gemm)->FewRowsProblems(), eligible);
      else
        EXPECT_LE((*gemm)->FewRowsProblems(), eligible);
    }
}

TYPED_TEST(CudaKernelsOf, LinearOnMisalignedViews) {
  using T = TypeParam;
  // Operands one element into their allocations (a parameter's view in a
  // ZeRO bucket is at any element): the algorithm is chosen for the
  // addresses' alignment, and the products match the CPU's.
  const int64_t rows = 33, in = 64, out = 48;
  std::vector<float> x = rounded<T>(randomValues(rows * in, 26)),
                     w = rounded<T>(randomValues(in * out, 27, 0.2f)),
                     dy = rounded<T>(randomValues(rows * out, 28));
  cpu::LinearShape s{rows, in, out, true};
  std::vector<float> y(rows * out), dx(rows * in), dw(in * out, 0.0f);
  cpu::linearForward<float>(x.data(), w.data(), nullptr, s, y.data());
  cpu::linearBackward<float>(x.data(), w.data(), dy.data(), s, dx.data(),
                             dw.data(), nullptr);
  auto shifted = [](const std::vector<float> &v) {
    std::vector<float> out(v.size() + 1, 0.0f);
    std::copy(v.begin(), v.end(), out.begin() + 1);
    return out;
  };
  Device<T> gx(as<T>(shifted(x))), gw(as<T>(shifted(w))),
      gdy(as<T>(shifted(dy))), gy(rows * out + 1), gdx(rows * in + 1);
  Device<float> gdw(std::vector<float>(in * out + 1, 0.0f));
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  ASSERT_TRUE((*gemm)->Prepare<T>(s, false).ok());
  absl::Status st = (*gemm)->LinearForward<T>(
      gx.get() + 1, gw.get() + 1, nullptr, s, gy.get() + 1, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  st = (*gemm)->LinearBackward<T>(gx.get() + 1, gw.get() + 1, gdy.get() + 1, s,
                                  gdx.get() + 1, gdw.get() + 1, nullptr,
                                  nullptr);
  ASSERT_TRUE(st.ok()) << st;
  auto unshift = [](auto v) {
    v.erase(v.begin());
    return v;
  };
  double rel = relativeTolerance<T>(), abs = 1e-5 * std::sqrt(double(in));
  expectClose(unshift(gy.host()), y, rel, abs, "y");
  expectClose(unshift(gdx.host()), dx, rel, abs, "dx");
  expectClose(unshift(gdw.host()), dw, 1e-5, 1e-5 * std::sqrt(double(rows)),
              "dw");
  // Prepare chose for 256-byte alignment; the misaligned calls needed their
  // own algorithms.
  EXPECT_GT((*gemm)->ChosenAlgorithms(), 3u);
}

TEST_F(CudaKernels, GradSumOfSquares) {
  // Two calls add into one sum, in double.
  std::vector<float> a = randomValues(100003, 13), b = randomValues(517, 14);
  double want = 0;
  for (float x : a)
    want += double(x) * x;
  for (float x : b)
    want += double(x) * x;
  Device<float> ga(a), gb(b);
  Device<double> sum(1);
  ASSERT_EQ(
      cuda::gradSumOfSquares(ga.get(), int64_t(a.size()), sum.get(), nullptr),
      cudaSuccess);
  ASSERT_EQ(
      cuda::gradSumOfSquares(gb.get(), int64_t(b.size()), sum.get(), nullptr),
      cudaSuccess);
  EXPECT_NEAR(sum.host()[0], want, 1e-12 * want);
}

TYPED_TEST(CudaKernelsOf, AdamW) {
  using T = TypeParam;
  // Three steps from the same state, gradients scaled by 0.5 (clipping);
  // the copy holds the new weights rounded to T.
  const int64_t n = 4099;
  std::vector<float> param = randomValues(n, 15), m(n, 0.0f), v(n, 0.0f);
  cpu::AdamWConfig config;
  config.beta1 = 0.9;
  config.beta2 = 0.95;
  config.eps = 1e-8;
  config.weightDecay = 0.1;
  Device<float> gparam(param), gm(m), gv(v), gscale(std::vector<float>{0.5f});
  Device<T> gcopy(n);
  // The learning rate and the step are read on the device, as the plan's
  // f32 and i64 buffers hold them; each step's differ.
  for (int64_t step = 1; step <= 3; ++step) {
    const float lr = 3e-4f / float(step);
    std::vector<float> grad = randomValues(n, 100 + uint32_t(step));
    ASSERT_TRUE(cpu::adamwStep(param.data(), grad.data(), m.data(), v.data(), n,
                               config, lr, step, 0.5)
                    .ok());
    Device<float> ggrad(grad), glr(std::vector<float>{lr});
    Device<int64_t> gstep(std::vector<int64_t>{step});
    ASSERT_EQ(cuda::adamwStep(gparam.get(), ggrad.get(), gm.get(), gv.get(), n,
                              glr.get(), config.beta1, config.beta2, config.eps,
                              config.weightDecay, gstep.get(), gscale.get(),
                              gcopy.get(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  // fp32 plans update in double, as the CPU; mixed precision in float,
  // whose rounding of each term (|(1 - beta1) g| up to 0.05, |(1 - beta2)
  // g^2| up to 0.0125, weights near 1) over three steps stays below the
  // absolute floors here.
  const bool inDouble = std::is_same_v<T, float>;
  expectClose(gparam.host(), param, 1e-6, inDouble ? 1e-7 : 5e-7, "param");
  expectClose(gm.host(), m, 1e-6, inDouble ? 1e-9 : 5e-8, "m");
  expectClose(gv.host(), v, 1e-6, inDouble ? 1e-12 : 5e-9, "v");
  expectClose(gcopy.host(), rounded<T>(param), relativeTolerance<T>(), 0,
              "copy");
  // Without the learning rate or the step (the executor checks the step's
  // value, which the host writes).
  Device<int64_t> gstep(std::vector<int64_t>{1});
  EXPECT_EQ(cuda::adamwStep<T>(gparam.get(), gparam.get(), gm.get(), gv.get(),
                               n, nullptr, 0.9, 0.95, 1e-8, 0.1, gstep.get(),
                               gscale.get(), nullptr, nullptr),
            cudaErrorInvalidValue);
}

TYPED_TEST(CudaKernelsOf, LayerNorm) {
  using T = TypeParam;
  // Rows offset from zero, so that the two-pass variance matters.
  const int64_t rows = 70, d = 1000;
  std::vector<float> x = randomValues(rows * d, 31);
  for (float &v : x)
    v += 3.0f;
  x = rounded<T>(x);
  std::vector<float> w = rounded<T>(randomValues(d, 32, 0.5f)),
                     b = rounded<T>(randomValues(d, 33, 0.5f)),
                     dy = rounded<T>(randomValues(rows * d, 34));
  std::vector<float> dw0 = randomValues(d, 35), db0 = randomValues(d, 36);
  std::vector<float> y(rows * d), mean(rows), rstd(rows), dx(rows * d),
      dw = dw0, db = db0;
  cpu::layerNormForward(x.data(), w.data(), b.data(), rows, d, 1e-5, y.data(),
                        mean.data(), rstd.data());
  cpu::layerNormBackward(x.data(), w.data(), mean.data(), rstd.data(),
                         dy.data(), rows, d, dx.data(), dw.data(), db.data());
  Device<T> gx(as<T>(x)), gw(as<T>(w)), gb(as<T>(b)), gdy(as<T>(dy)),
      gy(rows * d), gdx(rows * d);
  Device<float> gmean(rows), grstd(rows), gdw(dw0), gdb(db0);
  ASSERT_EQ(cuda::layerNormForward(gx.get(), gw.get(), gb.get(), rows, d, 1e-5,
                                   gy.get(), gmean.get(), grstd.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::layerNormBackward(gx.get(), gw.get(), gmean.get(),
                                    grstd.get(), gdy.get(), rows, d, gdx.get(),
                                    gdw.get(), gdb.get(), nullptr),
            cudaSuccess);
  double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
  expectClose(gy.host(), y, rel, abs, "y");
  expectClose(gmean.host(), mean, 1e-5, 1e-6, "mean");
  expectClose(grstd.host(), rstd, 1e-5, 1e-6, "rstd");
  expectClose(gdx.host(), dx, rel, abs, "dx");
  expectClose(gdw.host(), dw, 1e-5, 1e-5, "dw");
  expectClose(gdb.host(), db, 1e-5, 1e-5, "db");
}

TYPED_TEST(CudaKernelsOf, PositionEmbedding) {
  using T = TypeParam;
  const int64_t batch = 3, seq = 50, hidden = 96;
  std::vector<float> table = rounded<T>(randomValues(seq * hidden, 37)),
                     dout = rounded<T>(randomValues(batch * seq * hidden, 38));
  std::vector<float> out(batch * seq * hidden),
      dtable0 = randomValues(seq * hidden, 39), dtable = dtable0;
  cpu::positionEmbeddingForward(table.data(), batch, seq, hidden, out.data());
  cpu::positionEmbeddingBackward(dout.data(), batch, seq, hidden,
                                 dtable.data());
  Device<T> gtable(as<T>(table)), gdout(as<T>(dout)), gout(out.size());
  Device<float> gdtable(dtable0);
  ASSERT_EQ(cuda::positionEmbeddingForward(gtable.get(), batch, seq, hidden,
                                           gout.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::positionEmbeddingBackward(gdout.get(), batch, seq, hidden,
                                            gdtable.get(), nullptr),
            cudaSuccess);
  expectClose(gout.host(), out, 0, 0, "out");
  expectClose(gdtable.host(), dtable, 1e-5, 1e-6, "dtable");
}

TYPED_TEST(CudaKernelsOf, PositionEmbeddingAtPositions) {
  using T = TypeParam;
  // Packed documents: sequences of 40 rows whose positions restart where a
  // document starts (rows repeat a position, so gradients add into the
  // same row of the table), a table of 32 rows; the whole sequence, and
  // the second half as a sequence-parallel rank's slice (rows 20-39 of
  // each sequence's positions).
  const int64_t batch = 3, posStride = 40, hidden = 96, tableRows = 32;
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t n : {int64_t(1), 30 - 7 * b, 9 + 7 * b})
      for (int64_t p = 0; p < n; ++p)
        positions.push_back(int32_t(p));
  ASSERT_EQ(int64_t(positions.size()), batch * posStride);
  for (auto [seq, offset] : {std::pair<int64_t, int64_t>{40, 0},
                             std::pair<int64_t, int64_t>{20, 20}}) {
    SCOPED_TRACE(testing::Message() << seq << " rows from " << offset);
    std::vector<float> table = rounded<T>(randomValues(tableRows * hidden, 40)),
                       dout =
                           rounded<T>(randomValues(batch * seq * hidden, 41));
    const std::vector<float> dtable0 = randomValues(tableRows * hidden, 42);
    // The definition: out[b, s] = table[positions[b, offset + s]], and
    // dtable[positions[b, offset + s]] += dout[b, s].
    std::vector<float> out(batch * seq * hidden);
    std::vector<double> dtable(dtable0.begin(), dtable0.end());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t r = 0; r < seq; ++r) {
        const int64_t p = positions[b * posStride + offset + r];
        for (int64_t c = 0; c < hidden; ++c) {
          out[(b * seq + r) * hidden + c] = table[p * hidden + c];
          dtable[p * hidden + c] += dout[(b * seq + r) * hidden + c];
        }
      }
    Device<T> gtable(as<T>(table)), gdout(as<T>(dout)), gout(out.size());
    Device<int32_t> gpositions(positions);
    Device<float> gdtable(dtable0);
    ASSERT_EQ(cuda::positionEmbeddingAtForward(gtable.get(), gpositions.get(),
                                               batch, seq, posStride, offset,
                                               hidden, gout.get(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::positionEmbeddingAtBackward(gdout.get(), gpositions.get(),
                                                batch, seq, posStride, offset,
                                                hidden, gdtable.get(), nullptr),
              cudaSuccess);
    // A gather is exact; the gradient's float sums differ in order only.
    expectClose(gout.host(), out, 0, 0, "out");
    expectClose(gdtable.host(),
                std::vector<float>(dtable.begin(), dtable.end()), 1e-5, 1e-5,
                "dtable");
  }
}

TYPED_TEST(CudaKernelsOf, SwigluPacked) {
  using T = TypeParam;
  // 300 columns: 16-byte vectors of fp32, element by element in 16 bits;
  // 304: vectors of either.
  for (int64_t f : {300, 304}) {
    SCOPED_TRACE(testing::Message() << f << " columns");
    const int64_t rows = 37;
    std::vector<float> x = rounded<T>(randomValues(rows * 2 * f, 40, 2.0f)),
                       dy = rounded<T>(randomValues(rows * f, 41));
    std::vector<float> y(rows * f), dx(rows * 2 * f);
    cpu::swigluPackedForward(x.data(), rows, f, y.data());
    cpu::swigluPackedBackward(x.data(), dy.data(), rows, f, dx.data());
    Device<T> gx(as<T>(x)), gdy(as<T>(dy)), gy(y.size()), gdx(dx.size());
    ASSERT_EQ(cuda::swigluPackedForward(gx.get(), rows, f, gy.get(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::swigluPackedBackward(gx.get(), gdy.get(), rows, f,
                                         gdx.get(), nullptr),
              cudaSuccess);
    double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
    expectClose(gy.host(), y, rel, abs, "y");
    expectClose(gdx.host(), dx, rel, abs, "dx");
  }
}

TYPED_TEST(CudaKernelsOf, Gelu) {
  using T = TypeParam;
  const int64_t n = 10007;
  std::vector<float> x = rounded<T>(randomValues(n, 42, 3.0f)),
                     dy = rounded<T>(randomValues(n, 43));
  for (bool tanhApprox : {false, true}) {
    std::vector<float> y(n), dx(n);
    cpu::geluForward(x.data(), n, tanhApprox, y.data());
    cpu::geluBackward(x.data(), dy.data(), n, tanhApprox, dx.data());
    Device<T> gx(as<T>(x)), gdy(as<T>(dy)), gy(n), gdx(n);
    ASSERT_EQ(cuda::geluForward(gx.get(), n, tanhApprox, gy.get(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::geluBackward(gx.get(), gdy.get(), n, tanhApprox, gdx.get(),
                                 nullptr),
              cudaSuccess);
    double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
    std::string mode = tanhApprox ? " (tanh)" : " (erf)";
    expectClose(gy.host(), y, rel, abs, "y" + mode);
    expectClose(gdx.host(), dx, rel, abs, "dx" + mode);
  }
}

TYPED_TEST(CudaKernelsOf, Add) {
  using T = TypeParam;
  const int64_t n = 5003;
  std::vector<float> a = rounded<T>(randomValues(n, 44)),
                     b = rounded<T>(randomValues(n, 45)), sum(n);
  for (int64_t i = 0; i < n; ++i)
    sum[i] = a[i] + b[i];
  Device<T> ga(as<T>(a)), gb(as<T>(b));
  // In place, into the first operand, as the plan's gradient additions run.
  // n is no multiple of a 16-byte vector: vectors, then the last elements.
  ASSERT_EQ(cuda::add(ga.get(), gb.get(), n, ga.get(), nullptr), cudaSuccess);
  expectClose(ga.host(), sum, relativeTolerance<T>(), 0, "a + b");
  // Operands one element past alignment: element by element.
  Device<T> gc(as<T>(a)), gy(n);
  ASSERT_EQ(cuda::add(gc.get() + 1, gb.get() + 1, n - 1, gy.get() + 1, nullptr),
            cudaSuccess);
  std::vector<T> shifted = gy.host();
  shifted.erase(shifted.begin());
  std::vector<float> want(sum.begin() + 1, sum.end());
  expectClose(shifted, want, relativeTolerance<T>(), 0, "a + b, misaligned");
}

TYPED_TEST(CudaKernelsOf, Scale) {
  using T = TypeParam;
  // alpha / rank of a LoRA adapter (16 / 3: no power of two, so the product
  // is rounded), and a negative factor.
  const int64_t n = 10007;
  std::vector<float> x = rounded<T>(randomValues(n, 47, 3.0f));
  for (double factor : {16.0 / 3.0, -0.375}) {
    SCOPED_TRACE(testing::Message() << "scale " << factor);
    std::vector<float> y(n);
    cpu::scaleForward(x.data(), n, factor, y.data());
    Device<T> gx(as<T>(x)), gy(n);
    ASSERT_EQ(cuda::scaleVector(gx.get(), factor, n, gy.get(), nullptr),
              cudaSuccess);
    double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
    expectClose(gy.host(), y, rel, abs, "y");
    // In place, as the executor may run it.
    ASSERT_EQ(cuda::scaleVector(gx.get(), factor, n, gx.get(), nullptr),
              cudaSuccess);
    expectClose(gx.host(), y, rel, abs, "in place");
  }
}

TYPED_TEST(CudaKernelsOf, DropoutDrawsTheCpuMask) {
  using T = TypeParam;
  // A shard (rows 5.., columns 32..) of a 40 x 160 tensor: the same
  // elements are dropped as on the CPU, exactly.
  cpu::GlobalIndexing at{30, 64, 160, 5, 32};
  cpu::DropoutKey key{0x123456789abcull, 7, 3};
  const double rate = 0.3;
  const int64_t n = at.rows * at.cols;
  std::vector<float> x = rounded<T>(randomValues(n, 46));
  std::vector<float> y(n), dx(n);
  cpu::dropoutForward(x.data(), at, rate, key, y.data());
  cpu::dropoutBackward(x.data(), at, rate, key, dx.data());
  Device<T> gx(as<T>(x)), gy(n), gdx(n);
  // The seed, the step and the micro-batch's first sample (2 of the shard's
  // 5 rows) from the call's values on the device.
  cuda::CallValues values;
  values.seed = key.seed;
  values.step = key.step;
  values.sampleOffset = 2;
  Device<cuda::CallValues> call(1);
  ASSERT_EQ(cuda::setCallValues(call.get(), values, nullptr), cudaSuccess);
  cpu::GlobalIndexing within = at;
  within.rowOffset -= values.sampleOffset;
  ASSERT_EQ(cuda::dropoutForward(gx.get(), within, rate, key.op, call.get(),
                                 gy.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::dropoutBackward(gx.get(), within, rate, key.op, call.get(),
                                  gdx.get(), nullptr),
            cudaSuccess);
  std::vector<T> got = gy.host();
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(toFloat(got[i]) == 0.0f, y[i] == 0.0f) << "element " << i;
    dropped += y[i] == 0.0f;
  }
  EXPECT_GT(dropped, n / 5);
  EXPECT_LT(dropped, n * 2 / 5);
  double rel = relativeTolerance<T>(), abs = absoluteTolerance<T>();
  expectClose(got, y, rel, abs, "y");
  expectClose(gdx.host(), dx, rel, abs, "dx");
  EXPECT_EQ(cuda::dropoutForward(gx.get(), within, 1.0, key.op, call.get(),
                                 gy.get(), nullptr),
            cudaErrorInvalidValue);
}

TYPED_TEST(CudaKernelsOf, QkvSplit) {
  using T = TypeParam;
  // [Q | K | V] with grouped kv heads, and per head (Bloom).
  for (cpu::QkvShape s : {cpu::QkvShape{33, 4, 2, 16, false},
                          cpu::QkvShape{33, 3, 3, 16, true}}) {
    const int64_t qn = s.rows * s.heads * s.headDim,
                  kvn = s.rows * s.kvHeads * s.headDim, n = qn + 2 * kvn;
    std::vector<float> qkv = rounded<T>(randomValues(n, 47));
    std::vector<float> q(qn), k(kvn), v(kvn), back(n);
    cpu::qkvSplitForward(qkv.data(), s, q.data(), k.data(), v.data());
    cpu::qkvSplitBackward(q.data(), k.data(), v.data(), s, back.data());
    Device<T> gqkv(as<T>(qkv)), gq(qn), gk(kvn), gv(kvn), gback(n);
    ASSERT_EQ(cuda::qkvSplitForward(gqkv.get(), s, gq.get(), gk.get(), gv.get(),
                                    nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::qkvSplitBackward(gq.get(), gk.get(), gv.get(), s,
                                     gback.get(), nullptr),
              cudaSuccess);
    std::string layout = s.perHead ? " (per head)" : " ([Q | K | V])";
    expectClose(gq.host(), q, 0, 0, "q" + layout);
    expectClose(gk.host(), k, 0, 0, "k" + layout);
    expectClose(gv.host(), v, 0, 0, "v" + layout);
    expectClose(gback.host(), back, 0, 0, "dqkv" + layout);
  }
}

} // namespace
