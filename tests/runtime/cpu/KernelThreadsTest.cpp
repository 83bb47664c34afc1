//===- KernelThreadsTest.cpp - CPU kernels on 1 and on 4 threads ----------===//
//
// Every threaded kernel, on inputs large enough to cross its threshold, must
// give bit-identical outputs on 1 and on 4 threads (training asserts
// bit-identical losses across runs and, later, serial-vs-parallel parity).
// Where a reference is cheap the outputs are also checked against a plain
// loop here; the gradients themselves are KernelGradTest's business.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include "TestData.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

using namespace braid::cpu;

namespace {

using braid::test::randomIds;
using braid::test::randomVec;
using braid::test::expectSameOnOneAndFour;
using braid::test::sameBits;


/// Restores the default thread count when a test ends, pass or fail.
class KernelThreads : public ::testing::Test {
protected:
  void TearDown() override { setNumThreads(0); }
};

void noReset() {}

TEST_F(KernelThreads, SetNumThreadsRoundTrips) {
  setNumThreads(0);
  int defaults = numThreads();
  EXPECT_GE(defaults, 1);
  setNumThreads(3);
  EXPECT_EQ(numThreads(), 3);
  setNumThreads(-1);
  EXPECT_EQ(numThreads(), defaults);
}

TEST_F(KernelThreads, Attention) {
  // Causal GQA with ALiBi (two q heads per kv head, so dk/dv gather two
  // heads) and full attention with as many kv heads as heads.
  for (AttentionShape s : {AttentionShape{2, 48, 8, 4, 16, 0.25, true, true},
                           AttentionShape{3, 40, 4, 4, 8, 0.3, false, false}}) {
    const size_t qn = s.batch * s.seq * s.heads * s.headDim;
    const size_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
    auto q = randomVec<float>(qn, 1), k = randomVec<float>(kvn, 2),
         v = randomVec<float>(kvn, 3), dout = randomVec<float>(qn, 4);
    std::vector<float> out(qn), lse(s.batch * s.heads * s.seq), dq(qn),
        dk(kvn, 7.0f), dv(kvn, 7.0f);
    expectSameOnOneAndFour<float>({&out, &lse, &dq, &dk, &dv}, noReset, [&] {
      attentionForward(q.data(), k.data(), v.data(), s, out.data(), lse.data());
      attentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                        dout.data(), s, dq.data(), dk.data(), dv.data());
    });

    // The forward against a plain softmax in double, head by head.
    std::vector<double> slopes(s.heads);
    alibiSlopes(s.heads, slopes.data());
    int64_t group = s.heads / s.kvHeads;
    double worst = 0;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t i = 0; i < s.seq; ++i) {
          auto qAt = [&](int64_t t, int64_t c) {
            return double(q[((b * s.seq + t) * s.heads + h) * s.headDim + c]);
          };
          auto kvAt = [&](const std::vector<float> &x, int64_t t, int64_t c) {
            return double(
                x[((b * s.seq + t) * s.kvHeads + h / group) * s.headDim + c]);
          };
          int64_t keys = s.causal ? i + 1 : s.seq;
          std::vector<double> p(keys);
          double total = 0;
          for (int64_t j = 0; j < keys; ++j) {
            double score = 0;
            for (int64_t c = 0; c < s.headDim; ++c)
              score += qAt(i, c) * kvAt(k, j, c);
            score = score * s.scale - (s.alibi ? slopes[h] * (i - j) : 0.0);
            p[j] = std::exp(score);
            total += p[j];
          }
          for (int64_t c = 0; c < s.headDim; ++c) {
            double ref = 0;
            for (int64_t j = 0; j < keys; ++j)
              ref += p[j] / total * kvAt(v, j, c);
            double got = out[((b * s.seq + i) * s.heads + h) * s.headDim + c];
            worst = std::max(worst, std::fabs(got - ref));
          }
        }
    EXPECT_LT(worst, 1e-5);
  }
}

/// The float kernels' GEMMs must not be split between threads (OpenBLAS
/// splits one called outside a parallel region, which changes its rounding):
/// a single (batch, head) pair, one unit backward, causal and full, and
/// packed documents starting inside query blocks, each with a partial last
/// block.
TEST_F(KernelThreads, AttentionBlocked) {
  std::vector<int32_t> positions =
      braid::test::packedPositions({{37, 80, 50, 33}, {130, 61, 9}});
  AttentionShape packed{2, 200, 4, 2, 16, 0.25, true, true};
  packed.positions = positions.data();
  // Blocks of 64 rows up to seq 512, 128 above.
  for (AttentionShape s :
       {AttentionShape{1, 300, 1, 1, 32, 0.2, true, true},
        AttentionShape{1, 260, 1, 1, 24, 0.2, false, false},
        AttentionShape{1, 600, 1, 1, 16, 0.2, true, false}, packed}) {
    // Above Parallel.h's kMinParallelWork, so that these are not left to the
    // serial path of a kernel with a work threshold.
    ASSERT_GE(s.batch * s.heads * s.seq * s.seq * s.headDim, int64_t(1) << 15);
    const size_t qn = s.batch * s.seq * s.heads * s.headDim;
    const size_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
    auto q = randomVec<float>(qn, 21), k = randomVec<float>(kvn, 22),
         v = randomVec<float>(kvn, 23), dout = randomVec<float>(qn, 24);
    std::vector<float> out(qn), lse(s.batch * s.heads * s.seq), dq(qn), dk(kvn),
        dv(kvn);
    auto reset = [&] {
      for (std::vector<float> *x : {&out, &lse, &dq, &dk, &dv})
        std::fill(x->begin(), x->end(), 7.0f);
    };
    expectSameOnOneAndFour<float>({&out, &lse, &dq, &dk, &dv}, reset, [&] {
      attentionForward(q.data(), k.data(), v.data(), s, out.data(), lse.data());
      attentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                        dout.data(), s, dq.data(), dk.data(), dv.data());
    });
  }
}

TEST_F(KernelThreads, AttentionDouble) {
  AttentionShape s{2, 32, 6, 2, 8, 0.35, true, false};
  const size_t qn = s.batch * s.seq * s.heads * s.headDim;
  const size_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  auto q = randomVec<double>(qn, 5), k = randomVec<double>(kvn, 6),
       v = randomVec<double>(kvn, 7), dout = randomVec<double>(qn, 8);
  std::vector<double> out(qn), lse(s.batch * s.heads * s.seq), dq(qn), dk(kvn),
      dv(kvn);
  expectSameOnOneAndFour<double>({&out, &lse, &dq, &dk, &dv}, noReset, [&] {
    attentionForward(q.data(), k.data(), v.data(), s, out.data(), lse.data());
    attentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                      dout.data(), s, dq.data(), dk.data(), dv.data());
  });
}

/// The loss is a sum over rows: in double, any change of its order would
/// show in the last bits.
template <typename T> void checkCrossEntropy() {
  const int64_t rows = 96, vocab = 1000;
  auto logits = randomVec<T>(rows * vocab, 10, 4.0);
  std::vector<int32_t> targets = randomIds(rows, vocab, 11);
  for (int64_t r = 0; r < rows; r += 7)
    targets[r] = -100;
  std::vector<T> lse(rows), loss(1), dlogits(rows * vocab);
  int64_t counted = 0;
  expectSameOnOneAndFour<T>({&lse, &loss, &dlogits}, noReset, [&] {
    loss[0] = crossEntropyForward(logits.data(), targets.data(), rows, vocab,
                                  -100, lse.data(), &counted);
    crossEntropyBackward(logits.data(), targets.data(), lse.data(), T(1.5),
                         rows, vocab, -100, counted, dlogits.data());
  });
  // Against -log softmax[target] averaged over the counted rows.
  double ref = 0;
  int64_t refCounted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == -100)
      continue;
    double sum = 0;
    for (int64_t c = 0; c < vocab; ++c)
      sum += std::exp(double(logits[r * vocab + c]));
    ref += std::log(sum) - logits[r * vocab + targets[r]];
    ++refCounted;
  }
  EXPECT_EQ(counted, refCounted);
  EXPECT_NEAR(loss[0], ref / refCounted, 1e-5);
  // In place (plan-lower gives the gradient the logits' buffer when nothing
  // reads them after it): the same bits as into a buffer of its own.
  std::vector<T> inPlace = logits;
  expectSameOnOneAndFour<T>({&inPlace}, [&] { inPlace = logits; }, [&] {
    crossEntropyBackward(inPlace.data(), targets.data(), lse.data(), T(1.5),
                         rows, vocab, -100, counted, inPlace.data());
  });
  EXPECT_TRUE(braid::test::sameBits(inPlace, dlogits));
}

TEST_F(KernelThreads, CrossEntropy) {
  checkCrossEntropy<float>();
  checkCrossEntropy<double>();
}

/// zeroFill clears exactly its bytes, at any alignment and length, on
/// either side of the size from which it streams past the cache.
TEST_F(KernelThreads, ZeroFillClearsExactlyItsBytes) {
  const int64_t big = kStreamingZeroBytes;
  for (int threads : {1, 4}) {
    setNumThreads(threads);
    for (int64_t bytes :
         {int64_t(0), int64_t(1), int64_t(17), big - 1, big, big + 37,
          3 * big + 5}) {
      for (int64_t offset : {0, 1, 8, 15}) {
        std::vector<unsigned char> buffer(size_t(bytes + 64), 0xab);
        zeroFill(buffer.data() + offset, bytes);
        int64_t wrong = 0;
        for (int64_t i = 0; i < int64_t(buffer.size()); ++i) {
          bool inside = i >= offset && i < offset + bytes;
          wrong += buffer[size_t(i)] != (inside ? 0 : 0xab);
        }
        EXPECT_EQ(wrong, 0) << bytes << " bytes at offset " << offset
                            << " on " << threads << " threads";
      }
    }
  }
}

TEST_F(KernelThreads, RmsNorm) {
  // rows not a multiple of the row block, d not of the column block.
  const int64_t rows = 100, d = 700;
  auto x = randomVec<float>(rows * d, 20), w = randomVec<float>(d, 21),
       dy = randomVec<float>(rows * d, 22), dwStart = randomVec<float>(d, 23);
  std::vector<float> y(rows * d), rstd(rows), dx(rows * d), dw;
  expectSameOnOneAndFour<float>(
      {&y, &rstd, &dx, &dw}, [&] { dw = dwStart; },
      [&] {
        rmsNormForward(x.data(), w.data(), rows, d, 1e-5, y.data(),
                       rstd.data());
        rmsNormBackward(x.data(), w.data(), rstd.data(), dy.data(), rows, d,
                        dx.data(), dw.data());
      });
  // dw + the sum of dy·x·rstd over the rows, rounded once (the kernel sums
  // in double): within a float's rounding of the sum in long double.
  for (int64_t c = 0; c < d; ++c) {
    long double ref = dwStart[c];
    for (int64_t r = 0; r < rows; ++r)
      ref += (long double)dy[r * d + c] * x[r * d + c] * rstd[r];
    EXPECT_FLOAT_EQ(dw[c], float(ref)) << "column " << c;
  }
}

TEST_F(KernelThreads, LayerNorm) {
  const int64_t rows = 100, d = 700;
  auto x = randomVec<float>(rows * d, 30), w = randomVec<float>(d, 31),
       b = randomVec<float>(d, 32), dy = randomVec<float>(rows * d, 33),
       dwStart = randomVec<float>(d, 34), dbStart = randomVec<float>(d, 35);
  std::vector<float> y(rows * d), mean(rows), rstd(rows), dx(rows * d), dw, db;
  expectSameOnOneAndFour<float>(
      {&y, &mean, &rstd, &dx, &dw, &db},
      [&] {
        dw = dwStart;
        db = dbStart;
      },
      [&] {
        layerNormForward(x.data(), w.data(), b.data(), rows, d, 1e-5, y.data(),
                         mean.data(), rstd.data());
        layerNormBackward(x.data(), w.data(), mean.data(), rstd.data(),
                          dy.data(), rows, d, dx.data(), dw.data(), db.data());
      });
  for (int64_t c = 0; c < d; ++c) {
    long double ref = dbStart[c];
    for (int64_t r = 0; r < rows; ++r)
      ref += dy[r * d + c];
    EXPECT_FLOAT_EQ(db[c], float(ref)) << "column " << c;
  }
}

TEST_F(KernelThreads, Rope) {
  const int64_t batch = 2, seq = 64, heads = 8, headDim = 32;
  const int64_t n = batch * seq * heads * headDim;
  auto x = randomVec<float>(n, 40), dy = randomVec<float>(n, 41);
  std::vector<float> y(n), dx(n);
  expectSameOnOneAndFour<float>({&y, &dx}, noReset, [&] {
    ropeForward(x.data(), batch, seq, heads, headDim, 10000.0, y.data());
    ropeBackward(dy.data(), batch, seq, heads, headDim, 10000.0, dx.data());
  });
  // Batch 1, position 5, head 3, pair 2 against the rotation written out.
  int64_t p = 5, i = 2, at = ((1 * seq + p) * heads + 3) * headDim;
  double angle = p * std::pow(10000.0, -2.0 * i / headDim);
  double x1 = x[at + i], x2 = x[at + i + headDim / 2];
  EXPECT_NEAR(y[at + i], x1 * std::cos(angle) - x2 * std::sin(angle), 1e-6);
  EXPECT_NEAR(y[at + i + headDim / 2],
              x2 * std::cos(angle) + x1 * std::sin(angle), 1e-6);
}

TEST_F(KernelThreads, SwigluAndGelu) {
  const int64_t n = 100003; // not a multiple of the element block
  auto a = randomVec<float>(n, 50, 4.0), u = randomVec<float>(n, 51),
       dy = randomVec<float>(n, 52);
  std::vector<float> y(n), da(n), du(n), g(n), gt(n), dg(n), dgt(n);
  auto kernels = [&] {
    swigluForward(a.data(), u.data(), n, y.data());
    swigluBackward(a.data(), u.data(), dy.data(), n, da.data(), du.data());
    geluForward(a.data(), n, false, g.data());
    geluForward(a.data(), n, true, gt.data());
    geluBackward(a.data(), dy.data(), n, false, dg.data());
    geluBackward(a.data(), dy.data(), n, true, dgt.data());
  };
  expectSameOnOneAndFour<float>({&y, &da, &du, &g, &gt, &dg, &dgt}, noReset,
                                kernels);
  for (int64_t i : {int64_t(0), int64_t(4096), n - 1}) {
    double v = a[i];
    EXPECT_NEAR(y[i], v / (1 + std::exp(-v)) * u[i], 1e-5);
    EXPECT_NEAR(g[i], 0.5 * v * std::erfc(-v / std::sqrt(2.0)), 1e-5);
  }
  // In place over either input (Kernels.def's kOverwritesInput flags): the
  // same bits as into a buffer of its own.
  for (bool tanhApprox : {false, true}) {
    const std::vector<float> &expected = tanhApprox ? dgt : dg;
    std::vector<float> overX = a, overDy = dy;
    geluBackward(overX.data(), dy.data(), n, tanhApprox, overX.data());
    geluBackward(a.data(), overDy.data(), n, tanhApprox, overDy.data());
    EXPECT_TRUE(sameBits(overX, expected)) << "over x, tanh " << tanhApprox;
    EXPECT_TRUE(sameBits(overDy, expected)) << "over dy, tanh " << tanhApprox;
  }
}

/// ADD into a buffer of its own and over either input (Kernels.def's
/// kOverwritesInput flags).
TEST_F(KernelThreads, AddInPlace) {
  const int64_t n = 100003;
  auto a = randomVec<float>(n, 53), b = randomVec<float>(n, 54);
  std::vector<float> sum(n), overA, overB;
  expectSameOnOneAndFour<float>({&sum, &overA, &overB}, noReset, [&] {
    overA = a;
    overB = b;
    addForward(a.data(), b.data(), n, sum.data());
    addForward(overA.data(), b.data(), n, overA.data());
    addForward(a.data(), overB.data(), n, overB.data());
  });
  for (int64_t i : {int64_t(0), int64_t(4096), n - 1})
    EXPECT_EQ(sum[i], a[i] + b[i]);
  EXPECT_TRUE(sameBits(overA, sum));
  EXPECT_TRUE(sameBits(overB, sum));
}

TEST_F(KernelThreads, Dropout) {
  // One long row (split into blocks) and many short ones.
  for (GlobalIndexing at : {GlobalIndexing{1, 50000, 50000, 0, 0},
                            GlobalIndexing{300, 200, 400, 7, 100}}) {
    const int64_t n = at.rows * at.cols;
    const DropoutKey key{42, 3, 1};
    auto x = randomVec<float>(n, 60);
    std::vector<float> y(n), dx(n);
    expectSameOnOneAndFour<float>({&y, &dx}, noReset, [&] {
      dropoutForward(x.data(), at, 0.2, key, y.data());
      dropoutBackward(x.data(), at, 0.2, key, dx.data());
    });
    for (int64_t r = 0; r < at.rows; ++r)
      for (int64_t c = 0; c < at.cols; c += 37) {
        uint64_t global =
            uint64_t(at.rowOffset + r) * at.globalCols + at.colOffset + c;
        float ref = dropoutKeeps(global, 0.2, key)
                        ? float(x[r * at.cols + c] * (1.0 / (1.0 - 0.2)))
                        : 0.0f;
        EXPECT_EQ(y[r * at.cols + c], ref);
      }
  }
}

TEST_F(KernelThreads, Embeddings) {
  const int64_t vocab = 50, batch = 4, seq = 64, hidden = 200;
  const int64_t rows = batch * seq;
  auto table = randomVec<float>(vocab * hidden, 70),
       pos = randomVec<float>(seq * hidden, 71),
       dout = randomVec<float>(rows * hidden, 72),
       dtableStart = randomVec<float>(vocab * hidden, 73),
       dposStart = randomVec<float>(seq * hidden, 74);
  std::vector<int32_t> ids = randomIds(rows, vocab, 75); // many repeats
  std::vector<float> out(rows * hidden), posOut(rows * hidden), dtable, dpos;
  expectSameOnOneAndFour<float>(
      {&out, &posOut, &dtable, &dpos},
      [&] {
        dtable = dtableStart;
        dpos = dposStart;
      },
      [&] {
        embeddingForward(table.data(), ids.data(), rows, hidden, out.data());
        embeddingBackward(dout.data(), ids.data(), rows, hidden, dtable.data());
        positionEmbeddingForward(pos.data(), batch, seq, hidden, posOut.data());
        positionEmbeddingBackward(dout.data(), batch, seq, hidden, dpos.data());
      });
  std::vector<float> refTable = dtableStart, refPos = dposStart;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < hidden; ++c) {
      EXPECT_EQ(out[r * hidden + c], table[ids[r] * hidden + c]);
      EXPECT_EQ(posOut[r * hidden + c], pos[(r % seq) * hidden + c]);
      refTable[ids[r] * hidden + c] += dout[r * hidden + c];
      refPos[(r % seq) * hidden + c] += dout[r * hidden + c];
    }
  EXPECT_TRUE(sameBits(dtable, refTable));
  EXPECT_TRUE(sameBits(dpos, refPos));
}

TEST_F(KernelThreads, LinearBiasAndItsGradient) {
  // The bias add and the bias gradient are the kernels' own loops (the
  // products are OpenBLAS's): dx and dw are left out.
  LinearShape s{256, 64, 300, true};
  auto x = randomVec<float>(s.rows * s.in, 80),
       w = randomVec<float>(s.out * s.in, 81),
       bias = randomVec<float>(s.out, 82),
       dy = randomVec<float>(s.rows * s.out, 83),
       dbStart = randomVec<float>(s.out, 84);
  std::vector<float> y(s.rows * s.out), db;
  expectSameOnOneAndFour<float>(
      {&db}, [&] { db = dbStart; },
      [&] {
        linearForward(x.data(), w.data(), bias.data(), s, y.data());
        linearBackward<float>(x.data(), w.data(), dy.data(), s, nullptr,
                              nullptr, db.data());
      });
  // db[c] + the sum over the rows, rounded once (the rows' sums are taken
  // in double): within a float's rounding of the sum in long double.
  for (int64_t c = 0; c < s.out; ++c) {
    long double ref = dbStart[c];
    for (int64_t r = 0; r < s.rows; ++r)
      ref += dy[r * s.out + c];
    EXPECT_FLOAT_EQ(db[c], float(ref)) << "column " << c;
  }
}

/// The matrix products are cut into blocks by their shape alone, each block
/// one single-threaded BLAS call, so that no thread count changes which call
/// computes an element (OpenBLAS splitting a product between its threads
/// does: the elements at its cuts take other kernels). Shapes large enough
/// for OpenBLAS to thread: cut along the rows, along the columns, [out, in]
/// and [in, out] weights, with partial last blocks; one row (the GEMV path).
/// The products are also checked against a plain loop in double, so that a
/// block put in the wrong place fails too.
TEST_F(KernelThreads, LinearProducts) {
  for (LinearShape s : {LinearShape{600, 200, 900, true},
                        LinearShape{300, 250, 1100, false},
                        LinearShape{1, 700, 1300, true},
                        LinearShape{1, 600, 1500, false}}) {
    SCOPED_TRACE(testing::Message() << "rows " << s.rows << " in " << s.in
                                    << " out " << s.out << " [out, in] "
                                    << s.transposeW);
    auto x = randomVec<float>(s.rows * s.in, 110),
         w = randomVec<float>(s.out * s.in, 111),
         dy = randomVec<float>(s.rows * s.out, 112),
         dwStart = randomVec<float>(s.out * s.in, 113);
    std::vector<float> y(s.rows * s.out), dx(s.rows * s.in), dw;
    std::vector<std::vector<float>> first;
    for (int threads : {1, 2, 3, 4}) {
      setNumThreads(threads);
      std::fill(y.begin(), y.end(), 7.0f);
      std::fill(dx.begin(), dx.end(), 7.0f);
      dw = dwStart;
      linearForward<float>(x.data(), w.data(), nullptr, s, y.data());
      linearBackward<float>(x.data(), w.data(), dy.data(), s, dx.data(),
                            dw.data(), nullptr);
      if (first.empty()) {
        first = {y, dx, dw};
        continue;
      }
      EXPECT_TRUE(sameBits(first[0], y)) << "y on " << threads << " threads";
      EXPECT_TRUE(sameBits(first[1], dx)) << "dx on " << threads << " threads";
      EXPECT_TRUE(sameBits(first[2], dw)) << "dw on " << threads << " threads";
    }
    // w[o][i] whichever way it is stored.
    auto wAt = [&](int64_t o, int64_t i) {
      return double(s.transposeW ? w[o * s.in + i] : w[i * s.out + o]);
    };
    double worstY = 0, worstDx = 0, worstDw = 0;
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t o = 0; o < s.out; ++o) {
        double ref = 0;
        for (int64_t i = 0; i < s.in; ++i)
          ref += double(x[r * s.in + i]) * wAt(o, i);
        worstY = std::max(worstY, std::fabs(ref - y[r * s.out + o]));
      }
      for (int64_t i = 0; i < s.in; ++i) {
        double ref = 0;
        for (int64_t o = 0; o < s.out; ++o)
          ref += double(dy[r * s.out + o]) * wAt(o, i);
        worstDx = std::max(worstDx, std::fabs(ref - dx[r * s.in + i]));
      }
    }
    for (int64_t o = 0; o < s.out; ++o)
      for (int64_t i = 0; i < s.in; ++i) {
        int64_t at = s.transposeW ? o * s.in + i : i * s.out + o;
        double ref = dwStart[at];
        for (int64_t r = 0; r < s.rows; ++r)
          ref += double(dy[r * s.out + o]) * x[r * s.in + i];
        worstDw = std::max(worstDw, std::fabs(ref - dw[at]));
      }
    // Terms of size about 0.25 (randomVec draws from [-1, 1]): float
    // rounding of sums of up to 1300 of them stays far below 1e-3.
    EXPECT_LT(worstY, 1e-3);
    EXPECT_LT(worstDx, 1e-3);
    EXPECT_LT(worstDw, 1e-3);
  }
}

TEST_F(KernelThreads, QkvSplit) {
  for (bool perHead : {false, true}) {
    QkvShape s{256, 4, perHead ? 4 : 2, 16, perHead};
    int64_t qCols = s.heads * s.headDim, kvCols = s.kvHeads * s.headDim;
    int64_t width = qCols + 2 * kvCols;
    auto qkv = randomVec<float>(s.rows * width, 90);
    std::vector<float> q(s.rows * qCols), k(s.rows * kvCols),
        v(s.rows * kvCols), back(s.rows * width);
    expectSameOnOneAndFour<float>({&q, &k, &v, &back}, noReset, [&] {
      qkvSplitForward(qkv.data(), s, q.data(), k.data(), v.data());
      qkvSplitBackward(q.data(), k.data(), v.data(), s, back.data());
    });
    EXPECT_TRUE(sameBits(back, qkv)) << "perHead " << perHead;
  }
}

} // namespace
