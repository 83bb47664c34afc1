//===- PackedDocumentsTest.cpp - Kernels on packed documents --------------===//
//
// Several documents packed in one sequence (Megatron's reset_position_ids
// and reset_attention_mask): each token's position in its document restarts
// at 0 where the document starts, attention stays inside the document, and
// position encodings read the positions. The references below are written
// from those definitions, one document at a time, in double: softmax
// attention and its gradients (dS = P ∘ (dP − rowsum(dP ∘ P))), the rotary
// angles pos · theta^(-2i/d) of the rotate-half convention, and table rows.
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

/// Positions of `batch` sequences of `seq` tokens holding documents of the
/// given lengths, one list per sequence (summing to seq).
std::vector<int32_t> positionsOf(const std::vector<std::vector<int>> &docs,
                                 int64_t seq) {
  std::vector<int32_t> p;
  for (const std::vector<int> &lengths : docs) {
    int64_t total = 0;
    for (int len : lengths) {
      for (int t = 0; t < len; ++t)
        p.push_back(t);
      total += len;
    }
    EXPECT_EQ(total, seq);
  }
  return p;
}

/// `n` values uniform in [-1, 1) from `gen`.
Vec randomValues(std::mt19937 &gen, int64_t n) {
  std::uniform_real_distribution<double> u(-1, 1);
  Vec x(n);
  for (double &e : x)
    e = u(gen);
  return x;
}

/// ALiBi slopes of Press et al. for `heads` (a power of two here).
double slopeOf(int64_t h, int64_t heads) {
  return std::pow(2.0, -8.0 * double(h + 1) / double(heads));
}

/// Causal attention of one document (rows [start, start + len) of sequence
/// b) for query head h, and its gradients added into dq, dk, dv.
struct Reference {
  int64_t seq, heads, kvHeads, d;
  double scale;
  bool alibi;
  const Vec &q, &k, &v, &dout;
  Vec out, dq, dk, dv;

  Reference(int64_t batch, int64_t seq, int64_t heads, int64_t kvHeads,
            int64_t d, double scale, bool alibi, const Vec &q, const Vec &k,
            const Vec &v, const Vec &dout)
      : seq(seq), heads(heads), kvHeads(kvHeads), d(d), scale(scale),
        alibi(alibi), q(q), k(k), v(v), dout(dout),
        out(batch * seq * heads * d, 0.0), dq(out.size(), 0.0),
        dk(batch * seq * kvHeads * d, 0.0), dv(dk.size(), 0.0) {}

  double &at(Vec &m, int64_t b, int64_t t, int64_t head, int64_t nh,
             int64_t c) {
    return m[((b * seq + t) * nh + head) * d + c];
  }
  double get(const Vec &m, int64_t b, int64_t t, int64_t head, int64_t nh,
             int64_t c) const {
    return m[((b * seq + t) * nh + head) * d + c];
  }

  void document(int64_t b, int64_t start, int64_t len) {
    for (int64_t h = 0; h < heads; ++h) {
      int64_t g = h / (heads / kvHeads);
      double slope = alibi ? slopeOf(h, heads) : 0.0;
      // P[i][j] over the document's local indices, j <= i.
      std::vector<Vec> p(len, Vec(len, 0.0)), dp(len, Vec(len, 0.0));
      for (int64_t i = 0; i < len; ++i) {
        double m = -INFINITY;
        Vec s(len, 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += get(q, b, start + i, h, heads, c) *
                   get(k, b, start + j, g, kvHeads, c);
          s[j] = dot * scale - slope * double(i - j);
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j)
          sum += std::exp(s[j] - m);
        for (int64_t j = 0; j <= i; ++j)
          p[i][j] = std::exp(s[j] - m) / sum;
        for (int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j)
            o += p[i][j] * get(v, b, start + j, g, kvHeads, c);
          at(out, b, start + i, h, heads, c) = o;
        }
      }
      for (int64_t i = 0; i < len; ++i) {
        double row = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t c = 0; c < d; ++c)
            dp[i][j] += get(dout, b, start + i, h, heads, c) *
                        get(v, b, start + j, g, kvHeads, c);
          row += dp[i][j] * p[i][j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          double ds = p[i][j] * (dp[i][j] - row) * scale;
          for (int64_t c = 0; c < d; ++c) {
            at(dq, b, start + i, h, heads, c) +=
                ds * get(k, b, start + j, g, kvHeads, c);
            at(dk, b, start + j, g, kvHeads, c) +=
                ds * get(q, b, start + i, h, heads, c);
            at(dv, b, start + j, g, kvHeads, c) +=
                p[i][j] * get(dout, b, start + i, h, heads, c);
          }
        }
      }
    }
  }
};

void expectNear(const Vec &got, const Vec &want, const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-12) << what << " element " << i;
}

void checkAttention(const std::vector<std::vector<int>> &docs, int64_t seq,
                    int64_t heads, int64_t kvHeads, bool alibi) {
  const int64_t batch = int64_t(docs.size()), d = 3;
  std::mt19937 gen(unsigned(seq * 31 + heads * 7 + kvHeads + alibi));
  auto random = [&](int64_t n) { return randomValues(gen, n); };
  const int64_t rows = batch * seq;
  Vec q = random(rows * heads * d), k = random(rows * kvHeads * d),
      v = random(rows * kvHeads * d), dout = random(rows * heads * d);
  std::vector<int32_t> positions = positionsOf(docs, seq);
  AttentionShape s{batch, seq, heads, kvHeads, d, 0.7, true, alibi};
  s.positions = positions.data();
  Vec out(q.size()), lse(batch * heads * seq), dq(q.size()), dk(k.size()),
      dv(v.size());
  attentionForward(q.data(), k.data(), v.data(), s, out.data(), lse.data());
  attentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                    dout.data(), s, dq.data(), dk.data(), dv.data());

  Reference ref(batch, seq, heads, kvHeads, d, 0.7, alibi, q, k, v, dout);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = 0;
    for (int len : docs[size_t(b)]) {
      ref.document(b, start, len);
      start += len;
    }
  }
  expectNear(out, ref.out, "out");
  expectNear(dq, ref.dq, "dq");
  expectNear(dk, ref.dk, "dk");
  expectNear(dv, ref.dv, "dv");
}

TEST(PackedDocuments, AttentionStaysInsideEachDocument) {
  checkAttention({{4, 1, 6}, {11}}, 11, 4, 2, /*alibi=*/false);
  checkAttention({{1, 1, 1, 8}, {5, 6}}, 11, 2, 1, /*alibi=*/false);
  checkAttention({{3, 7, 1}, {2, 9}}, 11, 4, 4, /*alibi=*/true);
}

TEST(PackedDocuments, OneDocumentIsPlainCausalAttention) {
  // Positions 0 .. seq-1 (one document) give the kernels' own causal
  // attention without positions, bit for bit.
  const int64_t batch = 2, seq = 9, heads = 4, kvHeads = 2, d = 5;
  std::mt19937 gen(5);
  auto random = [&](int64_t n) { return randomValues(gen, n); };
  Vec q = random(batch * seq * heads * d), k = random(batch * seq * kvHeads * d),
      v = random(k.size()), dout = random(q.size());
  std::vector<int32_t> positions = positionsOf({{9}, {9}}, seq);
  Vec outs[2], dqs[2], dks[2], dvs[2];
  for (int with = 0; with < 2; ++with) {
    AttentionShape s{batch, seq, heads, kvHeads, d, 0.4, true, true};
    if (with)
      s.positions = positions.data();
    Vec lse(batch * heads * seq);
    outs[with].resize(q.size());
    dqs[with].resize(q.size());
    dks[with].resize(k.size());
    dvs[with].resize(v.size());
    attentionForward(q.data(), k.data(), v.data(), s, outs[with].data(),
                     lse.data());
    attentionBackward(q.data(), k.data(), v.data(), outs[with].data(),
                      lse.data(), dout.data(), s, dqs[with].data(),
                      dks[with].data(), dvs[with].data());
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(dqs[0], dqs[1]);
  EXPECT_EQ(dks[0], dks[1]);
  EXPECT_EQ(dvs[0], dvs[1]);
}

TEST(PackedDocuments, RopeAtPositionsAndItsTranspose) {
  const int64_t batch = 2, seq = 7, heads = 2, d = 6;
  const double theta = 10000;
  std::vector<int32_t> positions = positionsOf({{3, 4}, {1, 6}}, seq);
  std::mt19937 gen(11);
  Vec x = randomValues(gen, batch * seq * heads * d);
  Vec y(x.size()), back(x.size());
  ropeAtForward(x.data(), positions.data(), batch, seq, heads, d, theta,
                y.data());
  ropeAtBackward(y.data(), positions.data(), batch, seq, heads, d, theta,
                 back.data());
  for (int64_t r = 0; r < batch * seq; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d / 2; ++i) {
        double angle = positions[size_t(r)] * std::pow(theta, -2.0 * i / d);
        int64_t a = (r * heads + h) * d + i, b = a + d / 2;
        EXPECT_NEAR(y[a], x[a] * std::cos(angle) - x[b] * std::sin(angle),
                    1e-14);
        EXPECT_NEAR(y[b], x[b] * std::cos(angle) + x[a] * std::sin(angle),
                    1e-14);
      }
  // The transpose of a rotation is its inverse.
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(back[i], x[i], 1e-14);
}

TEST(PackedDocuments, PositionTableRowsAtPositions) {
  // Rows [offset, offset + local) of sequences of 6 positions: a sequence-
  // parallel rank's slice.
  const int64_t batch = 2, seqWhole = 6, local = 3, offset = 3, hidden = 2;
  std::vector<int32_t> positions = positionsOf({{2, 4}, {5, 1}}, seqWhole);
  Vec table(8 * hidden);
  for (size_t i = 0; i < table.size(); ++i)
    table[i] = double(i) + 0.25;
  Vec out(batch * local * hidden);
  positionEmbeddingAtForward(table.data(), positions.data(), batch, local,
                             seqWhole, offset, hidden, out.data());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < local; ++s)
      for (int64_t c = 0; c < hidden; ++c)
        EXPECT_EQ(out[(b * local + s) * hidden + c],
                  table[positions[b * seqWhole + offset + s] * hidden + c]);
  Vec dy(out.size()), dtable(table.size(), 1.0), want(table.size(), 1.0);
  for (size_t i = 0; i < dy.size(); ++i)
    dy[i] = 0.5 * double(i) - 1;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < local; ++s)
      for (int64_t c = 0; c < hidden; ++c)
        want[positions[b * seqWhole + offset + s] * hidden + c] +=
            dy[(b * local + s) * hidden + c];
  positionEmbeddingAtBackward(dy.data(), positions.data(), batch, local,
                              seqWhole, offset, hidden, dtable.data());
  EXPECT_EQ(dtable, want);
}

} // namespace
