//===- Attention.cpp - CPU attention kernels ------------------------------===//
//
// Causal and full attention with GQA, ALiBi and packed documents (Kernels.h,
// AttentionShape), forward and backward.
//
// Double (the reference the float kernels are tested against): plain loops
// accumulating in double, on OpenMP threads over (batch, head) pairs forward
// and (batch, kv head) pairs backward, every unit running the serial code on
// its own (Parallel.h).
//
// Float: blocked over query blocks of 64 or 128 rows (queryBlockRows), as
// FlashAttention but with a block's whole key range at once. A block
// [i0, i1) sees keys [j0, causal ? i1 : seq), j0 its first query's first key
// rounded down to a panel (kTileColumnsAll; the keys before the first are
// masked as another document's); its scores S = scale Q Kᵀ, its output P V
// and, backward, dP = dO Vᵀ, dQ = dS K, dK += dSᵀ Q and dV += Pᵀ dO are
// AttentionTiles.h's products: the head's keys and values are packed once
// per unit, Q, dO, P and dS read in place, and, causal, the products skip
// the terms and scores above the diagonal (bands). Between them, per row:
// the ALiBi bias, the mask (keys of other documents or, causal, after the
// query get probability 0), the softmax with expFast (its loop in
// VectorLoops.h) and its sums in double. A block's S (then P) and dP (then
// dS) are scratch: per thread, block rows × seq floats each, allocated once
// per call and written by every block before it reads them.
//
// Threads: units are (batch, head) pairs forward (the head's blocks in
// order) and (batch, kv head) pairs backward (dK and dV gather the group's
// query heads and blocks, added in order by the unit alone). Every unit runs
// on one thread, its products too, so that nothing depends on the thread
// count: see forEachUnit. Results are bit-identical whatever the number of
// threads.
//
// The products were OpenBLAS's sgemm: on GPT-2-small's shape (batch 4, 12
// heads, seq 256, head dim 64) it spent a fifth of attention's time packing
// operands for each block and computed the masked half of the diagonal
// blocks; the tiles took attention from 0.71 to 0.54 s over two steps
// (bench/cpu_train.sh, 2 AVX2 cores).
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include "runtime/cpu/AttentionTiles.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/VectorLoops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace braid::cpu {

void alibiSlopes(int64_t heads, double *slopes) {
  // The closest power of two below `heads` gets the geometric sequence
  // 2^(-8/p), 2^(-16/p), ...; the remaining heads take every other slope of
  // the sequence for 2p heads (Press et al., as in Bloom).
  int64_t p = 1;
  while (p * 2 <= heads)
    p *= 2;
  double base = std::pow(2.0, -8.0 / p);
  for (int64_t i = 0; i < p; ++i)
    slopes[i] = std::pow(base, i + 1);
  double extra = std::pow(2.0, -4.0 / p);
  for (int64_t j = 0; j < heads - p; ++j)
    slopes[p + j] = std::pow(extra, 2 * j + 1);
}

namespace {
/// The strides and the bias of one (batch, head) attention problem.
struct Head {
  int64_t qStride, kvStride, qOffset, kvOffset;
  double slope;
  int64_t keys(const AttentionShape &s, int64_t i) const {
    return s.causal ? i + 1 : s.seq;
  }
  double bias(int64_t i, int64_t j) const { return -slope * (i - j); }
};

/// `slopes` holds the slopes of all of the attention's global heads.
Head makeHead(const AttentionShape &s, int64_t b, int64_t h,
              const std::vector<double> &slopes) {
  Head head;
  head.qStride = s.heads * s.headDim;
  head.kvStride = s.kvHeads * s.headDim;
  head.qOffset = b * s.seq * head.qStride + h * s.headDim;
  head.kvOffset = b * s.seq * head.kvStride + s.kvHeadOf(h) * s.headDim;
  head.slope = s.alibi ? slopes[s.headOffset + h] : 0.0;
  return head;
}

/// The query heads [first, last) of this rank that use local kv head g
/// (under tensor parallelism a kv head's group may have only some, or none,
/// of its query heads here).
struct KvGroup {
  int64_t first, last;
  KvGroup(const AttentionShape &s, int64_t g) {
    int64_t group = s.allHeads() / s.allKvHeads();
    first = std::max<int64_t>(0, (s.kvHeadOffset + g) * group - s.headOffset);
    last = std::min<int64_t>(s.heads,
                             (s.kvHeadOffset + g + 1) * group - s.headOffset);
  }
};

/// Zeroes kv head g's rows of dk and dv in sequence b.
template <typename T>
void zeroKvRows(const AttentionShape &s, int64_t b, int64_t g, T *dk, T *dv) {
  int64_t kvStride = s.kvHeads * s.headDim;
  for (int64_t j = 0; j < s.seq; ++j) {
    int64_t at = (b * s.seq + j) * kvStride + g * s.headDim;
    std::fill_n(dk + at, s.headDim, T(0));
    std::fill_n(dv + at, s.headDim, T(0));
  }
}

//===-- The float kernels -------------------------------------------------===//

/// Query rows per block of the float kernels. At batch 4, 12 heads, head
/// dim 64, causal, on two threads: up to seq 512, 64 rows were as fast as
/// 128 or faster (backward at 512: 122 against 115 GFLOP/s) and 32 slower;
/// from seq 1024, 128 rows gained 3-5 % (longer GEMMs, while the scores
/// computed above the diagonal matter less).
int64_t queryBlockRows(int64_t seq) { return seq > 512 ? 128 : 64; }

/// Runs body(unit, scratch) for every unit in [0, n), each thread with its
/// own `scratchFloats` floats of scratch (which a unit must write before it
/// reads them).
///
/// A unit runs whole on one thread, products included (AttentionTiles.h
/// has no threads of its own), so its results do not depend on the thread
/// count. Units are large: unlike parallelFor, no work threshold.
template <typename F>
void forEachUnit(int64_t n, int64_t scratchFloats, F &&body) {
#pragma omp parallel if (omp_get_max_threads() > 1)
  {
    std::vector<float> scratch(scratchFloats);
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < n; ++unit)
      body(unit, scratch.data());
  }
}

/// Query block `block` (of `rows` rows) of sequence b: queries [i0, i1) and
/// the keys [j0, jEnd) any of them sees.
struct QueryBlock {
  int64_t i0, i1, j0, jEnd;
  QueryBlock(const AttentionShape &s, int64_t b, int64_t block, int64_t rows)
      : i0(block * rows), i1(std::min(s.seq, i0 + rows)), j0(s.firstKey(b, i0)),
        jEnd(s.causal ? i1 : s.seq) {
    // First keys never decrease along a sequence, so j0 is the first
    // query's; the minimum only keeps malformed positions in bounds.
    for (int64_t i = i0 + 1; i < i1; ++i)
      j0 = std::min(j0, s.firstKey(b, i));
    // The head's keys are packed once, in panels of columns: a block starts
    // at a panel (the keys before its first are masked, as any other
    // document's).
    j0 -= j0 % kTileColumnsAll;
  }
  int rows() const { return int(i1 - i0); }
  int keys() const { return int(jEnd - j0); }
  /// Query i's keys [firstKey(b, i), causal ? i + 1 : seq) as offsets from
  /// j0: the others are masked.
  int lo(const AttentionShape &s, int64_t b, int64_t i) const {
    return int(s.firstKey(b, i) - j0);
  }
  int hi(const AttentionShape &s, int64_t i) const {
    return int((s.causal ? i + 1 : s.seq) - j0);
  }
  /// Causal, the bands of the block's products (AttentionTiles.h): row r's
  /// scores are needed up to key offset hi = r + i0 - j0 + 1, its
  /// probabilities (and dS) are zero from there, and key c's column of them
  /// is zero above row c + j0 - i0. Without causality, none.
  ProductBand scoreBand(const AttentionShape &s) const {
    ProductBand band;
    if (s.causal)
      band.columnsBefore = i0 - j0 + 1;
    return band;
  }
  ProductBand rowTermsBand(const AttentionShape &s) const {
    ProductBand band;
    if (s.causal)
      band.termsBefore = i0 - j0 + 1;
    return band;
  }
  ProductBand columnTermsBand(const AttentionShape &s) const {
    ProductBand band;
    if (s.causal)
      band.termsFrom = j0 - i0;
    return band;
  }
};

/// The sum of x[0, n) in double.
double sumInDouble(const float *x, int n) {
  return laneSum(n, [&](int64_t c) { return double(x[c]); });
}

/// x · y over n elements in double.
double dotInDouble(const float *x, const float *y, int n) {
  return laneSum(n, [&](int64_t c) { return double(x[c]) * y[c]; });
}

/// Adds the ALiBi bias -slope (i - j) to the scores row[lo, hi) of query i,
/// where row[c] is key j0 + c and dist = i - j0; returns their maximum
/// (maxOf: exact in any order).
float addBiasAndMax(float *row, int lo, int hi, int dist, float slope) {
  if (slope != 0.0f)
    for (int c = lo; c < hi; ++c)
      row[c] -= slope * float(dist - c);
  return maxOf(row + lo, hi - lo);
}

/// Zeroes the masked columns of a block's row that its products read:
/// [0, lo), and past the causal end hi the kTileRowsMax - 1 a register tile
/// may take for a neighbouring row (AttentionTiles.h); the products skip the
/// rest of [hi, n).
void zeroMasked(float *row, int lo, int hi, int n) {
  std::fill(row, row + lo, 0.0f);
  std::fill(row + hi, row + std::min<int64_t>(n, hi + kTileRowsMax - 1), 0.0f);
}

/// row[c] = e^(row[c] - shift) on [lo, hi), the masked rest zeroed.
void expOrMask(float *row, int lo, int hi, int n, float shift) {
  expTimes(row + lo, hi - lo, shift, 1.0f, row + lo);
  zeroMasked(row, lo, hi, n);
}

void attentionForwardFloat(const float *q, const float *k, const float *v,
                           const AttentionShape &s, float *out, float *lse) {
  std::vector<double> slopes(s.allHeads());
  alibiSlopes(s.allHeads(), slopes.data());
  const int64_t blockRows = queryBlockRows(s.seq);
  const int64_t blocks = (s.seq + blockRows - 1) / blockRows;
  const int d = int(s.headDim);
  const float scale = float(s.scale);
  const int64_t kPacked = packedFloats(s.seq, d);
  const int64_t vPacked = packedFloats(d, s.seq);
  // A unit is a (batch, head) pair: its keys (transposed) and values packed
  // once, then its query blocks in order.
  auto pairBody = [&](int64_t pair, float *scratch) {
    float *scores = scratch, *kt = scores + blockRows * s.seq,
          *vp = kt + kPacked, *inverse = vp + vPacked;
    int64_t b = pair / s.heads, h = pair % s.heads;
    Head hd = makeHead(s, b, h, slopes);
    packRight(s.seq, d, {k + hd.kvOffset, 1, hd.kvStride}, kt);
    packRight(d, s.seq, {v + hd.kvOffset, hd.kvStride, 1}, vp);
    const float slope = float(hd.slope);
    for (int64_t block = 0; block < blocks; ++block) {
      QueryBlock blk(s, b, block, blockRows);
      const int rows = blk.rows(), keys = blk.keys();
      // scores = scale q kᵀ, rows × keys.
      tileProductPacked(rows, keys, d, scale,
                        {q + hd.qOffset + blk.i0 * hd.qStride, hd.qStride, 1},
                        kt, d, 0, blk.j0, false, scores, keys,
                        blk.scoreBand(s));
      for (int r = 0; r < rows; ++r) {
        int64_t i = blk.i0 + r;
        float *row = scores + int64_t(r) * keys;
        int lo = blk.lo(s, b, i), hi = blk.hi(s, i);
        float m = addBiasAndMax(row, lo, hi, int(i - blk.j0), slope);
        expOrMask(row, lo, hi, keys, m);
        double sum = sumInDouble(row + lo, hi - lo);
        lse[(b * s.heads + h) * s.seq + i] = float(m + std::log(sum));
        inverse[r] = float(1.0 / sum);
      }
      // out = (e v) / sum, straight into the head's rows: the sums divide
      // the rows of the output (d a row) rather than the scores' (keys).
      float *ob = out + hd.qOffset + blk.i0 * hd.qStride;
      tileProductPacked(rows, d, keys, 1.0f, {scores, keys, 1}, vp, s.seq,
                        blk.j0, 0, false, ob, hd.qStride, blk.rowTermsBand(s));
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < d; ++c)
          ob[r * hd.qStride + c] *= inverse[r];
    }
  };
  forEachUnit(s.batch * s.heads,
              blockRows * s.seq + kPacked + vPacked + blockRows, pairBody);
}

void attentionBackwardFloat(const float *q, const float *k, const float *v,
                            const float *out, const float *lse,
                            const float *dout, const AttentionShape &s,
                            float *dq, float *dk, float *dv) {
  std::vector<double> slopes(s.allHeads());
  alibiSlopes(s.allHeads(), slopes.data());
  // The units as in the double kernel: a (batch, kv head) pair taking its q
  // heads and their query blocks in order, dk and dv adding every block's
  // terms in that order (GEMMs with beta 1).
  const int64_t blockRows = queryBlockRows(s.seq);
  const int64_t blocks = (s.seq + blockRows - 1) / blockRows;
  const int d = int(s.headDim);
  const float scale = float(s.scale);
  const int64_t kPacked = packedFloats(s.seq, d);
  const int64_t rowsPacked = packedFloats(d, s.seq);
  auto pairBody = [&](int64_t pair, float *scratch) {
    float *p = scratch, *ds = scratch + blockRows * s.seq;
    // The kv head's keys and values packed once for all of its query heads
    // and blocks: kᵀ and vᵀ (for the scores and dP), k (for dq).
    float *kt = ds + blockRows * s.seq, *vt = kt + kPacked, *kp = vt + kPacked;
    int64_t b = pair / s.kvHeads, g = pair % s.kvHeads;
    zeroKvRows(s, b, g, dk, dv);
    {
      int64_t kvStride = s.kvHeads * s.headDim;
      int64_t at = b * s.seq * kvStride + g * s.headDim;
      packRight(s.seq, d, {k + at, 1, kvStride}, kt);
      packRight(s.seq, d, {v + at, 1, kvStride}, vt);
      packRight(d, s.seq, {k + at, kvStride, 1}, kp);
    }
    KvGroup heads(s, g);
    for (int64_t h = heads.first; h < heads.last; ++h) {
      Head hd = makeHead(s, b, h, slopes);
      const int qld = int(hd.qStride), kvld = int(hd.kvStride);
      const float slope = float(hd.slope);
      for (int64_t block = 0; block < blocks; ++block) {
        QueryBlock blk(s, b, block, blockRows);
        const int rows = blk.rows(), keys = blk.keys();
        int64_t qAt = hd.qOffset + blk.i0 * hd.qStride;
        int64_t kvAt = hd.kvOffset + blk.j0 * hd.kvStride;
        const float *lseb = lse + (b * s.heads + h) * s.seq + blk.i0;
        // p = e^(scale q kᵀ + bias - lse), as forward.
        tileProductPacked(rows, keys, d, scale, {q + qAt, qld, 1}, kt, d, 0,
                          blk.j0, false, p, keys, blk.scoreBand(s));
        for (int r = 0; r < rows; ++r) {
          int64_t i = blk.i0 + r;
          float *row = p + int64_t(r) * keys;
          int lo = blk.lo(s, b, i), hi = blk.hi(s, i);
          addBiasAndMax(row, lo, hi, int(i - blk.j0), slope);
          expOrMask(row, lo, hi, keys, lseb[r]);
        }
        // dp = dout vᵀ; ds = p (dp - D) scale with D_i = dout_i · out_i
        // (= sum_j p_ij dp_ij), in place.
        tileProductPacked(rows, keys, d, 1.0f, {dout + qAt, qld, 1}, vt, d, 0,
                          blk.j0, false, ds, keys, blk.scoreBand(s));
        for (int r = 0; r < rows; ++r) {
          int64_t i = blk.i0 + r;
          float *dsRow = ds + int64_t(r) * keys;
          const float *pRow = p + int64_t(r) * keys;
          int lo = blk.lo(s, b, i), hi = blk.hi(s, i);
          float rowDot = float(dotInDouble(dout + qAt + r * hd.qStride,
                                           out + qAt + r * hd.qStride, d));
          for (int c = lo; c < hi; ++c)
            dsRow[c] = pRow[c] * (dsRow[c] - rowDot) * scale;
          zeroMasked(dsRow, lo, hi, keys);
        }
        // dq = ds k; dk += dsᵀ q; dv += pᵀ dout.
        tileProductPacked(rows, d, keys, 1.0f, {ds, keys, 1}, kp, s.seq,
                          blk.j0, 0, false, dq + qAt, qld, blk.rowTermsBand(s));
        tileProduct(keys, d, rows, 1.0f, {ds, 1, keys}, {q + qAt, qld, 1}, true,
                    dk + kvAt, kvld, blk.columnTermsBand(s));
        tileProduct(keys, d, rows, 1.0f, {p, 1, keys}, {dout + qAt, qld, 1},
                    true, dv + kvAt, kvld, blk.columnTermsBand(s));
      }
    }
  };
  forEachUnit(s.batch * s.kvHeads,
              2 * blockRows * s.seq + 2 * kPacked + rowsPacked, pairBody);
}

} // namespace

template <typename T>
void attentionForward(const T *q, const T *k, const T *v,
                      const AttentionShape &s, T *out, T *lse) {
  if constexpr (std::is_same_v<T, float>) {
    attentionForwardFloat(q, k, v, s, out, lse);
    return;
  }
  std::vector<double> slopes(s.allHeads());
  alibiSlopes(s.allHeads(), slopes.data());
  // The (batch, head) pairs are independent problems, one unit each.
  auto pairBody = [&](int64_t pair) {
    int64_t b = pair / s.heads, h = pair % s.heads;
    std::vector<double> scores(s.seq), acc(s.headDim);
    Head hd = makeHead(s, b, h, slopes);
    for (int64_t i = 0; i < s.seq; ++i) {
      const T *qi = q + hd.qOffset + i * hd.qStride;
      int64_t j0 = s.firstKey(b, i), n = hd.keys(s, i);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = j0; j < n; ++j) {
        const T *kj = k + hd.kvOffset + j * hd.kvStride;
        double dot = 0;
        for (int64_t c = 0; c < s.headDim; ++c)
          dot += double(qi[c]) * kj[c];
        scores[j] = dot * s.scale + hd.bias(i, j);
        m = std::max(m, scores[j]);
      }
      double sum = 0;
      for (int64_t j = j0; j < n; ++j)
        sum += std::exp(scores[j] - m);
      double l = m + std::log(sum);
      lse[(b * s.heads + h) * s.seq + i] = T(l);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = j0; j < n; ++j) {
        double p = std::exp(scores[j] - l);
        const T *vj = v + hd.kvOffset + j * hd.kvStride;
        for (int64_t c = 0; c < s.headDim; ++c)
          acc[c] += p * vj[c];
      }
      T *oi = out + hd.qOffset + i * hd.qStride;
      for (int64_t c = 0; c < s.headDim; ++c)
        oi[c] = T(acc[c]);
    }
  };
  parallelFor(s.batch * s.heads, s.batch * s.heads * s.seq * s.seq * s.headDim,
              pairBody);
}

template <typename T>
void attentionBackward(const T *q, const T *k, const T *v, const T *out,
                       const T *lse, const T *dout, const AttentionShape &s,
                       T *dq, T *dk, T *dv) {
  if constexpr (std::is_same_v<T, float>) {
    attentionBackwardFloat(q, k, v, out, lse, dout, s, dq, dk, dv);
    return;
  }
  std::vector<double> slopes(s.allHeads());
  alibiSlopes(s.allHeads(), slopes.data());
  // dk and dv of a kv head gather the q heads of its group, so the unit is a
  // (batch, kv head) pair taking its q heads in order: each output element
  // has one writer, adding its terms in the serial order. With tensor
  // parallelism a kv head's group may have only some (or none) of its query
  // heads here: its dk and dv are then this rank's part of the sum.
  auto pairBody = [&](int64_t pair) {
    int64_t b = pair / s.kvHeads, g = pair % s.kvHeads;
    zeroKvRows(s, b, g, dk, dv);
    std::vector<double> acc(s.headDim);
    KvGroup heads(s, g);
    for (int64_t h = heads.first; h < heads.last; ++h) {
      Head hd = makeHead(s, b, h, slopes);
      for (int64_t i = 0; i < s.seq; ++i) {
        const T *qi = q + hd.qOffset + i * hd.qStride;
        const T *oi = out + hd.qOffset + i * hd.qStride;
        const T *gi = dout + hd.qOffset + i * hd.qStride;
        double l = lse[(b * s.heads + h) * s.seq + i];
        // D_i = dout_i · out_i = sum_j p_ij (dout_i · v_j).
        double rowDot = 0;
        for (int64_t c = 0; c < s.headDim; ++c)
          rowDot += double(gi[c]) * oi[c];
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = s.firstKey(b, i), n = hd.keys(s, i); j < n; ++j) {
          const T *kj = k + hd.kvOffset + j * hd.kvStride;
          const T *vj = v + hd.kvOffset + j * hd.kvStride;
          double dot = 0, dp = 0;
          for (int64_t c = 0; c < s.headDim; ++c) {
            dot += double(qi[c]) * kj[c];
            dp += double(gi[c]) * vj[c];
          }
          double p = std::exp(dot * s.scale + hd.bias(i, j) - l);
          double ds = p * (dp - rowDot) * s.scale;
          T *dkj = dk + hd.kvOffset + j * hd.kvStride;
          T *dvj = dv + hd.kvOffset + j * hd.kvStride;
          for (int64_t c = 0; c < s.headDim; ++c) {
            acc[c] += ds * kj[c];
            dkj[c] += T(ds * qi[c]);
            dvj[c] += T(p * gi[c]);
          }
        }
        T *dqi = dq + hd.qOffset + i * hd.qStride;
        for (int64_t c = 0; c < s.headDim; ++c)
          dqi[c] = T(acc[c]);
      }
    }
  };
  parallelFor(s.batch * s.kvHeads,
              2 * s.batch * s.heads * s.seq * s.seq * s.headDim, pairBody);
}

template void attentionForward<float>(const float *, const float *,
                                      const float *, const AttentionShape &,
                                      float *, float *);
template void attentionForward<double>(const double *, const double *,
                                       const double *, const AttentionShape &,
                                       double *, double *);
template void attentionBackward<float>(const float *, const float *,
                                       const float *, const float *,
                                       const float *, const float *,
                                       const AttentionShape &, float *, float *,
                                       float *);
template void attentionBackward<double>(const double *, const double *,
                                        const double *, const double *,
                                        const double *, const double *,
                                        const AttentionShape &, double *,
                                        double *, double *);

} // namespace braid::cpu
