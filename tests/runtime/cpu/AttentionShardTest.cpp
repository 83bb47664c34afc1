//===- AttentionShardTest.cpp - Attention on a rank's heads ---------------===//
//
// Tensor parallelism gives each rank a slice of the query heads, and either
// a slice of the kv heads (when they divide by tp) or all of them. The
// per-rank kernels must reproduce the whole attention: outputs, lse and dq
// of the rank's heads bit for bit (the same arithmetic per head), dk and dv
// of split kv heads bit for bit, and, for replicated kv heads, dk and dv
// whose sum over ranks is the whole gradient. ALiBi slopes are those of the
// global heads.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>
#include <vector>

using namespace braid::cpu;

namespace {

using Vec = std::vector<double>;

/// Columns [c0, c0 + n) of every row of a [rows, cols] matrix.
Vec columns(const Vec &m, int64_t rows, int64_t cols, int64_t c0, int64_t n) {
  Vec out(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c)
      out[r * n + c] = m[r * cols + c0 + c];
  return out;
}

void checkSlices(int64_t heads, int64_t kvHeads, int64_t tp, bool alibi) {
  const int64_t batch = 2, seq = 5, d = 4, rows = batch * seq;
  std::mt19937 gen(heads * 100 + kvHeads * 10 + tp);
  std::uniform_real_distribution<double> u(-1, 1);
  auto random = [&](int64_t n) {
    Vec v(n);
    for (double &x : v)
      x = u(gen);
    return v;
  };
  Vec q = random(rows * heads * d), k = random(rows * kvHeads * d),
      v = random(rows * kvHeads * d), dout = random(rows * heads * d);
  AttentionShape whole{batch, seq, heads, kvHeads, d, 0.5, true, alibi};
  Vec out(q.size()), lse(batch * heads * seq), dq(q.size()), dk(k.size()),
      dv(v.size());
  attentionForward(q.data(), k.data(), v.data(), whole, out.data(), lse.data());
  attentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                    dout.data(), whole, dq.data(), dk.data(), dv.data());

  bool splitKv = kvHeads % tp == 0;
  int64_t lh = heads / tp, lkv = splitKv ? kvHeads / tp : kvHeads;
  Vec dkSum(k.size(), 0.0), dvSum(v.size(), 0.0);
  for (int64_t t = 0; t < tp; ++t) {
    AttentionShape s = whole;
    s.heads = lh;
    s.kvHeads = lkv;
    s.headOffset = t * lh;
    s.kvHeadOffset = splitKv ? t * lkv : 0;
    s.globalHeads = heads;
    s.globalKvHeads = kvHeads;
    Vec ql = columns(q, rows, heads * d, t * lh * d, lh * d);
    Vec gl = columns(dout, rows, heads * d, t * lh * d, lh * d);
    int64_t kc0 = splitKv ? t * lkv * d : 0;
    Vec kl = columns(k, rows, kvHeads * d, kc0, lkv * d);
    Vec vl = columns(v, rows, kvHeads * d, kc0, lkv * d);
    Vec ol(ql.size()), ll(batch * lh * seq), dql(ql.size()), dkl(kl.size()),
        dvl(vl.size());
    attentionForward(ql.data(), kl.data(), vl.data(), s, ol.data(), ll.data());
    attentionBackward(ql.data(), kl.data(), vl.data(), ol.data(), ll.data(),
                      gl.data(), s, dql.data(), dkl.data(), dvl.data());
    EXPECT_EQ(ol, columns(out, rows, heads * d, t * lh * d, lh * d)) << "rank " << t;
    EXPECT_EQ(dql, columns(dq, rows, heads * d, t * lh * d, lh * d)) << "rank " << t;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < lh; ++h)
        for (int64_t i = 0; i < seq; ++i)
          ASSERT_EQ(ll[(b * lh + h) * seq + i],
                    lse[(b * heads + t * lh + h) * seq + i]);
    if (splitKv) {
      EXPECT_EQ(dkl, columns(dk, rows, kvHeads * d, kc0, lkv * d));
      EXPECT_EQ(dvl, columns(dv, rows, kvHeads * d, kc0, lkv * d));
    } else {
      for (size_t i = 0; i < dk.size(); ++i) {
        dkSum[i] += dkl[i];
        dvSum[i] += dvl[i];
      }
    }
  }
  if (!splitKv)
    for (size_t i = 0; i < dk.size(); ++i) {
      ASSERT_NEAR(dkSum[i], dk[i], 1e-12) << i;
      ASSERT_NEAR(dvSum[i], dv[i], 1e-12) << i;
    }
}

TEST(AttentionShards, KvHeadsSplit) {
  checkSlices(8, 4, 2, false);
  checkSlices(8, 4, 4, false);
  checkSlices(8, 8, 8, false);
}

TEST(AttentionShards, KvHeadsReplicated) {
  checkSlices(8, 2, 4, false); // 2 kv heads, 4 ranks: each rank has all kv
  checkSlices(8, 2, 8, false);
  checkSlices(4, 1, 2, false); // multi-query attention
}

TEST(AttentionShards, AlibiSlopesOfTheGlobalHeads) {
  checkSlices(8, 8, 2, true);
  checkSlices(6, 6, 3, true); // not a power of two: Bloom's interleaved slopes
  checkSlices(8, 2, 4, true);
}

} // namespace
