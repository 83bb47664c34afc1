//===- KernelGradTest.cpp - CPU kernels against finite differences --------===//
//
// For every op, in double: the backward kernel's gradients of
// L = sum(forward(inputs) * r), r random, must match central finite
// differences of L to 1e-6 relative, for every element of every input. The
// float kernels must match the double ones to float precision.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Philox.h"

#include "TestData.h"

#include "gtest/gtest.h"

#include <cmath>
#include <functional>
#include <random>
#include <vector>

using namespace braid::cpu;

namespace {

using Vec = std::vector<double>;

Vec randomVec(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  Vec v(n);
  for (double &x : v)
    x = dist(gen);
  return v;
}

double dot(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

/// Compares `analytic` with central differences of `loss` in every element of
/// `x`; returns the largest relative error.
double gradError(Vec &x, const Vec &analytic, const std::function<double()> &loss) {
  const double eps = 1e-6;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + eps;
    double up = loss();
    x[i] = saved - eps;
    double down = loss();
    x[i] = saved;
    double numeric = (up - down) / (2 * eps);
    double denom = std::max({std::fabs(numeric), std::fabs(analytic[i]), 1e-3});
    worst = std::max(worst, std::fabs(numeric - analytic[i]) / denom);
  }
  return worst;
}

constexpr double kTol = 1e-6;

TEST(KernelGrad, Linear) {
  for (bool transposeW : {false, true}) {
    LinearShape s{6, 5, 4, transposeW};
    Vec x = randomVec(30, 1), w = randomVec(20, 2), b = randomVec(4, 3),
        r = randomVec(24, 4), y(24);
    auto loss = [&] {
      linearForward(x.data(), w.data(), b.data(), s, y.data());
      return dot(y, r);
    };
    Vec dx(30), dw(20, 0.0), db(4, 0.0);
    linearBackward(x.data(), w.data(), r.data(), s, dx.data(), dw.data(),
                   db.data());
    EXPECT_LT(gradError(x, dx, loss), kTol) << "dx, transposeW " << transposeW;
    EXPECT_LT(gradError(w, dw, loss), kTol) << "dw, transposeW " << transposeW;
    EXPECT_LT(gradError(b, db, loss), kTol) << "dbias";
    // Parameter gradients accumulate: a second backward doubles them.
    Vec dw2 = dw;
    linearBackward<double>(x.data(), w.data(), r.data(), s, nullptr,
                           dw2.data(), nullptr);
    for (size_t i = 0; i < dw.size(); ++i)
      EXPECT_DOUBLE_EQ(dw2[i], 2 * dw[i]);
  }
}

TEST(KernelGrad, Embedding) {
  const int64_t vocab = 7, hidden = 3, rows = 5;
  std::vector<int32_t> ids = {1, 4, 1, 6, 0};
  Vec table = randomVec(vocab * hidden, 5), r = randomVec(rows * hidden, 6),
      y(rows * hidden);
  auto loss = [&] {
    embeddingForward(table.data(), ids.data(), rows, hidden, y.data());
    return dot(y, r);
  };
  Vec dtable(vocab * hidden, 0.0);
  embeddingBackward(r.data(), ids.data(), rows, hidden, dtable.data());
  EXPECT_LT(gradError(table, dtable, loss), kTol);
}

TEST(KernelGrad, PositionEmbedding) {
  const int64_t batch = 2, seq = 3, hidden = 4, positions = 5;
  Vec table = randomVec(positions * hidden, 7), r = randomVec(24, 8), y(24);
  auto loss = [&] {
    positionEmbeddingForward(table.data(), batch, seq, hidden, y.data());
    return dot(y, r);
  };
  Vec dtable(positions * hidden, 0.0);
  positionEmbeddingBackward(r.data(), batch, seq, hidden, dtable.data());
  EXPECT_LT(gradError(table, dtable, loss), kTol);
}

TEST(KernelGrad, RmsNorm) {
  const int64_t rows = 4, d = 6;
  Vec x = randomVec(24, 9), w = randomVec(6, 10), r = randomVec(24, 11),
      y(24), rstd(rows);
  auto loss = [&] {
    rmsNormForward(x.data(), w.data(), rows, d, 1e-5, y.data(), rstd.data());
    return dot(y, r);
  };
  loss();
  Vec dx(24), dw(6, 0.0);
  rmsNormBackward(x.data(), w.data(), rstd.data(), r.data(), rows, d, dx.data(),
                  dw.data());
  EXPECT_LT(gradError(x, dx, loss), kTol);
  EXPECT_LT(gradError(w, dw, loss), kTol);
}

TEST(KernelGrad, LayerNorm) {
  const int64_t rows = 4, d = 6;
  Vec x = randomVec(24, 12), w = randomVec(6, 13), b = randomVec(6, 14),
      r = randomVec(24, 15), y(24), mean(rows), rstd(rows);
  auto loss = [&] {
    layerNormForward(x.data(), w.data(), b.data(), rows, d, 1e-5, y.data(),
                     mean.data(), rstd.data());
    return dot(y, r);
  };
  loss();
  Vec dx(24), dw(6, 0.0), db(6, 0.0);
  layerNormBackward(x.data(), w.data(), mean.data(), rstd.data(), r.data(),
                    rows, d, dx.data(), dw.data(), db.data());
  EXPECT_LT(gradError(x, dx, loss), kTol);
  EXPECT_LT(gradError(w, dw, loss), kTol);
  EXPECT_LT(gradError(b, db, loss), kTol);
}

TEST(KernelGrad, Rope) {
  const int64_t batch = 2, seq = 3, heads = 2, headDim = 4;
  const int64_t n = batch * seq * heads * headDim;
  Vec x = randomVec(n, 16), r = randomVec(n, 17), y(n);
  auto loss = [&] {
    ropeForward(x.data(), batch, seq, heads, headDim, 10000.0, y.data());
    return dot(y, r);
  };
  Vec dx(n);
  ropeBackward(r.data(), batch, seq, heads, headDim, 10000.0, dx.data());
  EXPECT_LT(gradError(x, dx, loss), kTol);
  // Position 0 is not rotated; the rotation preserves each pair's norm.
  ropeForward(x.data(), batch, seq, heads, headDim, 10000.0, y.data());
  for (int64_t c = 0; c < heads * headDim; ++c)
    EXPECT_DOUBLE_EQ(y[c], x[c]);
  int64_t base = heads * headDim; // batch 0, position 1, head 0
  EXPECT_NEAR(y[base] * y[base] + y[base + 2] * y[base + 2],
              x[base] * x[base] + x[base + 2] * x[base + 2], 1e-12);
}

void checkAttention(const AttentionShape &s, uint32_t seed) {
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  Vec q = randomVec(qn, seed), k = randomVec(kvn, seed + 1),
      v = randomVec(kvn, seed + 2), r = randomVec(qn, seed + 3), out(qn),
      lse(s.batch * s.heads * s.seq);
  auto loss = [&] {
    attentionForward(q.data(), k.data(), v.data(), s, out.data(), lse.data());
    return dot(out, r);
  };
  loss();
  Vec dq(qn), dk(kvn), dv(kvn);
  attentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                    r.data(), s, dq.data(), dk.data(), dv.data());
  EXPECT_LT(gradError(q, dq, loss), kTol);
  EXPECT_LT(gradError(k, dk, loss), kTol);
  EXPECT_LT(gradError(v, dv, loss), kTol);
}

TEST(KernelGrad, AttentionCausal) {
  checkAttention({2, 5, 2, 2, 4, 0.5, true, false}, 20);
}
TEST(KernelGrad, AttentionGroupedQuery) {
  checkAttention({1, 4, 4, 2, 3, 0.6, true, false}, 30);
}
TEST(KernelGrad, AttentionAlibi) {
  checkAttention({1, 4, 3, 3, 2, 0.7, true, true}, 40);
}
TEST(KernelGrad, AttentionNonCausal) {
  checkAttention({1, 3, 2, 1, 2, 0.5, false, false}, 50);
}

TEST(Attention, CausalFirstRowCopiesTheFirstValue) {
  // Query 0 sees only key 0, so its output is v_0 whatever the scores.
  AttentionShape s{1, 3, 1, 1, 2, 1.0, true, false};
  Vec q = randomVec(6, 60), k = randomVec(6, 61), v = randomVec(6, 62),
      out(6), lse(3);
  attentionForward(q.data(), k.data(), v.data(), s, out.data(), lse.data());
  EXPECT_NEAR(out[0], v[0], 1e-15);
  EXPECT_NEAR(out[1], v[1], 1e-15);
}

TEST(Attention, AlibiSlopesFollowThePaper) {
  double slopes[12];
  alibiSlopes(8, slopes); // 2^-1, 2^-2, ..., 2^-8
  for (int i = 0; i < 8; ++i)
    EXPECT_DOUBLE_EQ(slopes[i], std::pow(2.0, -(i + 1)));
  alibiSlopes(12, slopes); // 8 as above, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
  for (int j = 0; j < 4; ++j)
    EXPECT_DOUBLE_EQ(slopes[8 + j], std::pow(2.0, -0.5 - j));
}

TEST(KernelGrad, Swiglu) {
  Vec g = randomVec(10, 70, 3.0), u = randomVec(10, 71), r = randomVec(10, 72),
      y(10);
  auto loss = [&] {
    swigluForward(g.data(), u.data(), 10, y.data());
    return dot(y, r);
  };
  Vec dg(10), du(10);
  swigluBackward(g.data(), u.data(), r.data(), 10, dg.data(), du.data());
  EXPECT_LT(gradError(g, dg, loss), kTol);
  EXPECT_LT(gradError(u, du, loss), kTol);
}

// Packed [gate | up] rows: the same values as the separate kernels on the
// rows' halves, and a gradient that matches finite differences.
TEST(KernelGrad, SwigluPacked) {
  const int64_t rows = 3, f = 4;
  Vec x = randomVec(rows * 2 * f, 73, 3.0), r = randomVec(rows * f, 74),
      y(rows * f);
  Vec gate(rows * f), up(rows * f), ySeparate(rows * f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < f; ++c) {
      gate[i * f + c] = x[i * 2 * f + c];
      up[i * f + c] = x[i * 2 * f + f + c];
    }
  swigluPackedForward(x.data(), rows, f, y.data());
  swigluForward(gate.data(), up.data(), rows * f, ySeparate.data());
  EXPECT_EQ(y, ySeparate);
  auto loss = [&] {
    swigluPackedForward(x.data(), rows, f, y.data());
    return dot(y, r);
  };
  Vec dx(rows * 2 * f), dg(rows * f), du(rows * f);
  swigluPackedBackward(x.data(), r.data(), rows, f, dx.data());
  EXPECT_LT(gradError(x, dx, loss), kTol);
  swigluBackward(gate.data(), up.data(), r.data(), rows * f, dg.data(),
                 du.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < f; ++c) {
      EXPECT_EQ(dx[i * 2 * f + c], dg[i * f + c]);
      EXPECT_EQ(dx[i * 2 * f + f + c], du[i * f + c]);
    }
}

TEST(KernelGrad, Gelu) {
  for (bool tanhApprox : {false, true}) {
    Vec x = randomVec(12, 80, 3.0), r = randomVec(12, 81), y(12);
    auto loss = [&] {
      geluForward(x.data(), 12, tanhApprox, y.data());
      return dot(y, r);
    };
    Vec dx(12);
    geluBackward(x.data(), r.data(), 12, tanhApprox, dx.data());
    EXPECT_LT(gradError(x, dx, loss), kTol) << "tanh " << tanhApprox;
  }
}

TEST(KernelGrad, Scale) {
  // The definition: y = x · scale, exactly (one double product each).
  const double factor = -0.375;
  Vec x = randomVec(10, 85, 3.0), r = randomVec(10, 86), y(10);
  scaleForward(x.data(), 10, factor, y.data());
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(y[i], x[i] * factor) << i;
  // Its gradient is the same kernel on the output gradient.
  auto loss = [&] {
    scaleForward(x.data(), 10, factor, y.data());
    return dot(y, r);
  };
  Vec dx(10);
  scaleForward(r.data(), 10, factor, dx.data());
  EXPECT_LT(gradError(x, dx, loss), kTol);
  // In place, and in float: the double product rounded once.
  std::vector<float> xf(x.begin(), x.end());
  scaleForward(xf.data(), 10, factor, xf.data());
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(xf[i], float(double(float(x[i])) * factor)) << i;
  // Many blocks of elements (and threads), the last one partial.
  Vec big = randomVec(50001, 87), scaled(big.size());
  scaleForward(big.data(), int64_t(big.size()), factor, scaled.data());
  for (size_t i = 0; i < big.size(); ++i)
    ASSERT_EQ(scaled[i], big[i] * factor) << i;
}

TEST(KernelGrad, QkvSplit) {
  for (bool perHead : {false, true}) {
    QkvShape s{3, 2, perHead ? 2 : 1, 2, perHead};
    int64_t qCols = 4, kvCols = s.kvHeads * 2, width = qCols + 2 * kvCols;
    Vec qkv = randomVec(3 * width, 90), rq = randomVec(3 * qCols, 91),
        rk = randomVec(3 * kvCols, 92), rv = randomVec(3 * kvCols, 93),
        q(3 * qCols), k(3 * kvCols), v(3 * kvCols);
    auto loss = [&] {
      qkvSplitForward(qkv.data(), s, q.data(), k.data(), v.data());
      return dot(q, rq) + dot(k, rk) + dot(v, rv);
    };
    Vec dqkv(3 * width);
    qkvSplitBackward(rq.data(), rk.data(), rv.data(), s, dqkv.data());
    EXPECT_LT(gradError(qkv, dqkv, loss), kTol);
    // Layout: per head, head 1's k is columns [8, 10); grouped, k starts at 4.
    qkvSplitForward(qkv.data(), s, q.data(), k.data(), v.data());
    if (perHead)
      EXPECT_EQ(k[2], qkv[8]);
    else
      EXPECT_EQ(k[0], qkv[4]);
  }
}

TEST(KernelGrad, CrossEntropy) {
  const int64_t rows = 5, vocab = 7;
  std::vector<int32_t> targets = {3, -100, 0, 6, 2};
  Vec logits = randomVec(rows * vocab, 100, 2.0), lse(rows);
  int64_t counted = 0;
  auto loss = [&] {
    return crossEntropyForward(logits.data(), targets.data(), rows, vocab,
                               -100, lse.data(), &counted);
  };
  double value = loss();
  EXPECT_EQ(counted, 4);
  // Independent reference for one row: -log softmax(row)[target].
  double ref = 0;
  for (int64_t r : {0, 2, 3, 4}) {
    double sum = 0;
    for (int64_t c = 0; c < vocab; ++c)
      sum += std::exp(logits[r * vocab + c]);
    ref += std::log(sum) - logits[r * vocab + targets[r]];
  }
  EXPECT_NEAR(value, ref / 4, 1e-12);
  Vec dlogits(rows * vocab);
  crossEntropyBackward(logits.data(), targets.data(), lse.data(), 1.0, rows,
                       vocab, -100, counted, dlogits.data());
  EXPECT_LT(gradError(logits, dlogits, loss), kTol);
  for (int64_t c = 0; c < vocab; ++c)
    EXPECT_EQ(dlogits[vocab + c], 0.0); // the ignored row
}

TEST(Kernels, FloatMatchesDouble) {
  AttentionShape s{1, 6, 4, 2, 8, 0.35, true, true};
  const int64_t qn = 6 * 4 * 8, kvn = 6 * 2 * 8;
  Vec q = randomVec(qn, 110), k = randomVec(kvn, 111), v = randomVec(kvn, 112);
  Vec out(qn), lse(24);
  attentionForward(q.data(), k.data(), v.data(), s, out.data(), lse.data());
  std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()),
      vf(v.begin(), v.end()), outf(qn), lsef(24);
  attentionForward(qf.data(), kf.data(), vf.data(), s, outf.data(), lsef.data());
  for (int64_t i = 0; i < qn; ++i)
    EXPECT_NEAR(outf[i], out[i], 1e-5 * std::max(1.0, std::fabs(out[i])));
}

/// The largest |got - want| over the largest |want|.
double relativeError(const std::vector<float> &got, const Vec &want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

/// Runs the float kernels (blocked, single-precision GEMMs) and the double
/// ones on the same inputs, rounded to float, and expects every output to
/// agree to float precision.
///
/// The tolerance: every float output is a sum of at most N = 1200 terms (a
/// row's keys, the head dimension, or for dk and dv the group's query rows)
/// whose factors carry a relative error of a few u = 2^-24 (float rounding,
/// expFast's 2^-22, lse rounded to float). Rounding errors of random sign
/// grow like sqrt(N) u = 2e-6 of the terms' magnitude, which at unit-scale
/// inputs is within a few times the largest output's (ds's terms cancel in
/// dq and dk). 1e-5 of the largest magnitude allows that; a wrong mask, bias
/// or block edge is off by orders of magnitude more.
void expectFloatMatchesDouble(AttentionShape s, uint32_t seed,
                              const std::vector<int32_t> &positions = {}) {
  s.positions = positions.empty() ? nullptr : positions.data();
  const int64_t qn = s.batch * s.seq * s.heads * s.headDim;
  const int64_t kvn = s.batch * s.seq * s.kvHeads * s.headDim;
  const int64_t rows = s.batch * s.heads * s.seq;
  Vec q = randomVec(qn, seed), k = randomVec(kvn, seed + 1),
      v = randomVec(kvn, seed + 2), dout = randomVec(qn, seed + 3);
  // The inputs as float, and the double kernels' inputs equal to them.
  auto toFloat = [](Vec &x) {
    std::vector<float> f(x.begin(), x.end());
    x.assign(f.begin(), f.end());
    return f;
  };
  std::vector<float> qf = toFloat(q), kf = toFloat(k), vf = toFloat(v),
                     doutf = toFloat(dout);

  Vec out(qn), lse(rows), dq(qn), dk(kvn), dv(kvn);
  attentionForward(q.data(), k.data(), v.data(), s, out.data(), lse.data());
  attentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                    dout.data(), s, dq.data(), dk.data(), dv.data());
  // Outputs start as garbage: the kernels overwrite them.
  std::vector<float> outf(qn, 9.0f), lsef(rows, 9.0f), dqf(qn, 9.0f),
      dkf(kvn, 9.0f), dvf(kvn, 9.0f);
  attentionForward(qf.data(), kf.data(), vf.data(), s, outf.data(),
                   lsef.data());
  attentionBackward(qf.data(), kf.data(), vf.data(), outf.data(), lsef.data(),
                    doutf.data(), s, dqf.data(), dkf.data(), dvf.data());

  constexpr double kFloatTol = 1e-5;
  EXPECT_LT(relativeError(outf, out), kFloatTol) << "out";
  EXPECT_LT(relativeError(lsef, lse), kFloatTol) << "lse";
  EXPECT_LT(relativeError(dqf, dq), kFloatTol) << "dq";
  EXPECT_LT(relativeError(dkf, dk), kFloatTol) << "dk";
  EXPECT_LT(relativeError(dvf, dv), kFloatTol) << "dv";
}

// Query blocks are 64 rows up to seq 512, 128 above: every sequence below
// has several, the last one partial.
TEST(Kernels, BlockedFloatAttentionMatchesDouble) {
  // Causal GQA (two q heads per kv head) with ALiBi.
  expectFloatMatchesDouble({2, 150, 4, 2, 16, 0.25, true, true}, 120);
  // Full attention, a head dimension that is no multiple of the vectors.
  expectFloatMatchesDouble({1, 130, 3, 3, 20, 0.2, false, false}, 130);
  // Full attention with GQA and ALiBi.
  expectFloatMatchesDouble({1, 100, 4, 1, 8, 0.35, false, true}, 140);
  // Blocks of 128 rows, causal and full.
  expectFloatMatchesDouble({1, 600, 2, 1, 8, 0.3, true, true}, 180);
  expectFloatMatchesDouble({1, 530, 1, 1, 8, 0.3, false, false}, 190);
}

TEST(Kernels, BlockedFloatAttentionMatchesDoubleOnPackedDocuments) {
  // Documents that start inside query blocks, one shorter than a block and
  // one longer, one that starts in the last (partial) block.
  std::vector<int32_t> positions =
      braid::test::packedPositions({{37, 80, 50, 33}, {130, 61, 9}});
  ASSERT_EQ(positions.size(), 2u * 200);
  expectFloatMatchesDouble({2, 200, 4, 2, 16, 0.25, true, true}, 150,
                           positions);
  expectFloatMatchesDouble({2, 200, 2, 2, 12, 0.3, true, false}, 160,
                           positions);
}

TEST(Kernels, BlockedFloatAttentionMatchesDoubleOnAHeadSlice) {
  // Tensor parallelism: q heads [4, 8) of 8 and kv heads [2, 4) of 4, ALiBi
  // with the global heads' slopes.
  AttentionShape s{1, 90, 4, 2, 16, 0.25, true, true};
  s.headOffset = 4;
  s.kvHeadOffset = 2;
  s.globalHeads = 8;
  s.globalKvHeads = 4;
  expectFloatMatchesDouble(s, 170);
}

} // namespace

namespace {

// Known-answer vectors of Philox4x32-10 published with Random123
// (kat_vectors): counter, key -> output.
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                       {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                       {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Dropout, MaskDoesNotDependOnSharding) {
  const int64_t rows = 6, cols = 10;
  const DropoutKey key{1234, 7, 3};
  Vec x = randomVec(rows * cols, 120), whole(rows * cols);
  dropoutForward(x.data(), {rows, cols, cols, 0, 0}, 0.3, key, whole.data());
  // Two column shards (tensor parallel) and two row shards (data/sequence
  // parallel), each computed on its own, give the same elements.
  for (int64_t part = 0; part < 2; ++part) {
    Vec colShard(rows * 5), out(rows * 5);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < 5; ++c)
        colShard[r * 5 + c] = x[r * cols + part * 5 + c];
    dropoutForward(colShard.data(), {rows, 5, cols, 0, part * 5}, 0.3, key,
                   out.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < 5; ++c)
        EXPECT_EQ(out[r * 5 + c], whole[r * cols + part * 5 + c]);
    Vec rowShard(x.begin() + part * 3 * cols, x.begin() + (part + 1) * 3 * cols);
    Vec out2(3 * cols);
    dropoutForward(rowShard.data(), {3, cols, cols, part * 3, 0}, 0.3, key,
                   out2.data());
    for (int64_t i = 0; i < 3 * cols; ++i)
      EXPECT_EQ(out2[i], whole[part * 3 * cols + i]);
  }
}

TEST(Dropout, DropsTheRateAndScalesTheRest) {
  const int64_t n = 200000;
  const double rate = 0.1;
  Vec x(n, 1.0), y(n);
  dropoutForward(x.data(), {1, n, n, 0, 0}, rate, {99, 0, 0}, y.data());
  int64_t dropped = 0;
  for (double v : y) {
    if (v == 0)
      ++dropped;
    else
      EXPECT_DOUBLE_EQ(v, 1.0 / (1.0 - rate));
  }
  // Binomial(n, 0.1): standard deviation sqrt(n p (1-p)) ~ 134; allow 5.
  EXPECT_NEAR(double(dropped), rate * n, 5 * std::sqrt(n * rate * (1 - rate)));
  // Another step or op draws another mask.
  Vec z(n);
  dropoutForward(x.data(), {1, n, n, 0, 0}, rate, {99, 1, 0}, z.data());
  EXPECT_NE(y, z);
}

TEST(KernelGrad, Dropout) {
  const int64_t rows = 3, cols = 8;
  const DropoutKey key{5, 2, 9};
  Vec x = randomVec(24, 130), r = randomVec(24, 131), y(24);
  auto loss = [&] {
    dropoutForward(x.data(), {rows, cols, cols, 0, 0}, 0.25, key, y.data());
    return dot(y, r);
  };
  Vec dx(24);
  dropoutBackward(r.data(), {rows, cols, cols, 0, 0}, 0.25, key, dx.data());
  EXPECT_LT(gradError(x, dx, loss), kTol);
}

} // namespace
