//===- Kernels.cpp - CPU kernels of the `model` ops -----------------------===//
//
// Plain loops over contiguous rows (the compiler vectorises the inner ones);
// matrix products go to BLAS. Reductions accumulate in double so that the
// float kernels agree with the double reference to float precision.
//
// Threads: the outer loops run on OpenMP threads over units whose outputs are
// disjoint (rows, (batch, head) pairs, column blocks, fixed element blocks),
// and every unit runs the serial code on its own. No floating-point sum is
// split between threads: sums over rows (parameter gradients) are taken by
// column blocks, each adding its rows in order, and the loss adds per-row
// values in row order afterwards. So the results are bit-identical whatever
// the number of threads, and identical to the single-threaded kernels.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/Philox.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace braid::cpu {
namespace {

// One row times a matrix is a matrix-vector product: OpenBLAS's GEMM
// would copy (pack) the whole matrix for that one row first, which is most
// of a decode step's time (bench/generate_cpu.sh measured 79 % of it in the
// packing). GEMV reads the matrix once; each output is one dot product on
// one thread, so the result does not depend on the thread count.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
          int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
  if (m == 1 && ta == CblasNoTrans) {
    // c[1, n] = a[1, k] · op(b): b is [n, k] (Trans) or [k, n].
    if (tb == CblasTrans)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b, ldb, a, 1, beta,
                  c, 1);
    else
      cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, b, ldb, a, 1, beta,
                  c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
              ldc);
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
          int64_t k, const double *a, int64_t lda, const double *b,
          int64_t ldb, double beta, double *c, int64_t ldc) {
  if (m == 1 && ta == CblasNoTrans) {
    if (tb == CblasTrans)
      cblas_dgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0, b, ldb, a, 1, beta,
                  c, 1);
    else
      cblas_dgemv(CblasRowMajor, CblasTrans, k, n, 1.0, b, ldb, a, 1, beta, c,
                  1);
    return;
  }
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c,
              ldc);
}

constexpr double kSqrt2OverPi = 0.7978845608028654; // sqrt(2 / pi)
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327; // 1 / sqrt(2 pi)

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

} // namespace

//===-- Threads -----------------------------------------------------------===//

void setNumThreads(int n) {
  // Read before the first change, these are what n <= 0 goes back to.
  static const int ompDefault = omp_get_max_threads();
  static const int blasDefault = openblas_get_num_threads();
  omp_set_num_threads(n > 0 ? n : ompDefault);
  openblas_set_num_threads(n > 0 ? n : blasDefault);
}

int numThreads() { return omp_get_max_threads(); }

//===-- Embeddings --------------------------------------------------------===//

template <typename T>
void embeddingForward(const T *table, const int32_t *ids, int64_t rows,
                      int64_t hidden, T *out) {
  parallelFor(rows, rows * hidden, [&](int64_t r) {
    std::copy_n(table + static_cast<int64_t>(ids[r]) * hidden, hidden,
                out + r * hidden);
  });
}

template <typename T>
void embeddingBackward(const T *dout, const int32_t *ids, int64_t rows,
                       int64_t hidden, T *dtable) {
  // Rows may share an id, so threads take column blocks (each adding its
  // rows in order) rather than rows.
  parallelBlocks(hidden, kColumnBlock, rows, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) {
      T *row = dtable + static_cast<int64_t>(ids[r]) * hidden;
      const T *g = dout + r * hidden;
      for (int64_t c = c0; c < c1; ++c)
        row[c] += g[c];
    }
  });
}

template <typename T>
void positionEmbeddingForward(const T *table, int64_t batch, int64_t seq,
                              int64_t hidden, T *out) {
  parallelFor(batch * seq, batch * seq * hidden, [&](int64_t r) {
    std::copy_n(table + (r % seq) * hidden, hidden, out + r * hidden);
  });
}

template <typename T>
void positionEmbeddingBackward(const T *dout, int64_t batch, int64_t seq,
                               int64_t hidden, T *dtable) {
  int64_t n = seq * hidden;
  parallelBlocks(n, kElementBlock, batch, [&](int64_t i0, int64_t i1) {
    for (int64_t b = 0; b < batch; ++b) {
      const T *g = dout + b * n;
      for (int64_t i = i0; i < i1; ++i)
        dtable[i] += g[i];
    }
  });
}

template <typename T>
void positionEmbeddingAtForward(const T *table, const int32_t *positions,
                                int64_t batch, int64_t seq, int64_t posStride,
                                int64_t offset, int64_t hidden, T *out) {
  parallelFor(batch * seq, batch * seq * hidden, [&](int64_t r) {
    int64_t at = (r / seq) * posStride + offset + r % seq;
    std::copy_n(table + int64_t(positions[at]) * hidden, hidden,
                out + r * hidden);
  });
}

template <typename T>
void positionEmbeddingAtBackward(const T *dout, const int32_t *positions,
                                 int64_t batch, int64_t seq, int64_t posStride,
                                 int64_t offset, int64_t hidden, T *dtable) {
  // Rows of the table may repeat, so the split is over columns: each
  // element of dtable has one writer, adding its rows in order.
  parallelBlocks(hidden, kColumnBlock, batch * seq, [&](int64_t c0,
                                                         int64_t c1) {
    for (int64_t r = 0; r < batch * seq; ++r) {
      int64_t at = (r / seq) * posStride + offset + r % seq;
      T *row = dtable + int64_t(positions[at]) * hidden;
      const T *g = dout + r * hidden;
      for (int64_t c = c0; c < c1; ++c)
        row[c] += g[c];
    }
  });
}

//===-- Matrix products ---------------------------------------------------===//

template <typename T>
void linearForward(const T *x, const T *w, const T *bias, const LinearShape &s,
                   T *y) {
  gemm(CblasNoTrans, s.transposeW ? CblasTrans : CblasNoTrans, s.rows, s.out,
       s.in, x, s.in, w, s.transposeW ? s.in : s.out, T(0), y, s.out);
  if (bias) {
    T scale = T(s.biasScale);
    parallelFor(s.rows, s.rows * s.out, [&](int64_t r) {
      for (int64_t c = 0; c < s.out; ++c)
        y[r * s.out + c] += bias[c] * scale;
    });
  }
}

template <typename T>
void linearBackward(const T *x, const T *w, const T *dy, const LinearShape &s,
                    T *dx, T *dw, T *dbias) {
  if (dx) // dx = dy · (the effective [in, out] weight)ᵀ
    gemm(CblasNoTrans, s.transposeW ? CblasNoTrans : CblasTrans, s.rows, s.in,
         s.out, dy, s.out, w, s.transposeW ? s.in : s.out, T(0), dx, s.in);
  if (dw) {
    if (s.transposeW) // dW[out, in] += dyᵀ x
      gemm(CblasTrans, CblasNoTrans, s.out, s.in, s.rows, dy, s.out, x, s.in,
           T(1), dw, s.in);
    else // dW[in, out] += xᵀ dy
      gemm(CblasTrans, CblasNoTrans, s.in, s.out, s.rows, x, s.in, dy, s.out,
           T(1), dw, s.out);
  }
  if (dbias)
    sumRowsInto(s.rows, s.out, dbias,
                [&](int64_t r, int64_t c) { return dy[r * s.out + c]; });
}

//===-- Normalisation -----------------------------------------------------===//

template <typename T>
void rmsNormForward(const T *x, const T *w, int64_t rows, int64_t d, double eps,
                    T *y, T *rstd) {
  parallelFor(rows, rows * d, [&](int64_t r) {
    const T *xr = x + r * d;
    double sum = 0;
    for (int64_t c = 0; c < d; ++c)
      sum += double(xr[c]) * xr[c];
    double inv = 1.0 / std::sqrt(sum / d + eps);
    rstd[r] = T(inv);
    for (int64_t c = 0; c < d; ++c)
      y[r * d + c] = T(xr[c] * inv * w[c]);
  });
}

template <typename T>
void rmsNormBackward(const T *x, const T *w, const T *rstd, const T *dy,
                     int64_t rows, int64_t d, T *dx, T *dw) {
  // y = x·r·w with r = (mean(x²) + eps)^(-1/2):
  // dx = r·(w·dy) - x·r³·mean(x·w·dy).
  // dw sums over rows, so it goes by columns; and before dx, so that dx may
  // still share dy's or x's buffer as it could in the one-pass loop.
  sumRowsInto(rows, d, dw, [&](int64_t r, int64_t c) {
    return T(dy[r * d + c] * x[r * d + c] * double(rstd[r]));
  });
  parallelFor(rows, rows * d, [&](int64_t r) {
    const T *xr = x + r * d, *gr = dy + r * d;
    double inv = rstd[r], dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += double(xr[c]) * w[c] * gr[c];
    double k = inv * inv * inv * dot / d;
    for (int64_t c = 0; c < d; ++c)
      dx[r * d + c] = T(inv * w[c] * gr[c] - xr[c] * k);
  });
}

template <typename T>
void layerNormForward(const T *x, const T *w, const T *b, int64_t rows,
                      int64_t d, double eps, T *y, T *mean, T *rstd) {
  parallelFor(rows, rows * d, [&](int64_t r) {
    const T *xr = x + r * d;
    double mu = 0;
    for (int64_t c = 0; c < d; ++c)
      mu += xr[c];
    mu /= d;
    double var = 0;
    for (int64_t c = 0; c < d; ++c)
      var += (xr[c] - mu) * (xr[c] - mu);
    double inv = 1.0 / std::sqrt(var / d + eps);
    mean[r] = T(mu);
    rstd[r] = T(inv);
    for (int64_t c = 0; c < d; ++c)
      y[r * d + c] = T((xr[c] - mu) * inv * w[c] + b[c]);
  });
}

template <typename T>
void layerNormBackward(const T *x, const T *w, const T *mean, const T *rstd,
                       const T *dy, int64_t rows, int64_t d, T *dx, T *dw,
                       T *db) {
  // With xhat = (x - mu)·r and g = w·dy:
  // dx = r·(g - mean(g) - xhat·mean(g·xhat)).
  // dw and db sum over rows, so they go by columns; and before dx, so that
  // dx may still share dy's or x's buffer as it could in the one-pass loop.
  sumRowsInto(rows, d, dw, [&](int64_t r, int64_t c) {
    double xhat = (x[r * d + c] - double(mean[r])) * double(rstd[r]);
    return T(dy[r * d + c] * xhat);
  });
  sumRowsInto(rows, d, db, [&](int64_t r, int64_t c) { return dy[r * d + c]; });
  parallelFor(rows, rows * d, [&](int64_t r) {
    const T *xr = x + r * d, *gr = dy + r * d;
    double mu = mean[r], inv = rstd[r], sumG = 0, sumGX = 0;
    for (int64_t c = 0; c < d; ++c) {
      double xhat = (xr[c] - mu) * inv;
      double g = double(w[c]) * gr[c];
      sumG += g;
      sumGX += g * xhat;
    }
    sumG /= d;
    sumGX /= d;
    for (int64_t c = 0; c < d; ++c) {
      double xhat = (xr[c] - mu) * inv;
      dx[r * d + c] = T(inv * (double(w[c]) * gr[c] - sumG - xhat * sumGX));
    }
  });
}

//===-- RoPE --------------------------------------------------------------===//

namespace {
/// Rotates every head of x by angle·sign (sign -1 is the inverse rotation),
/// row (b, s) at position s, or at positions[b · seq + s] when given.
template <typename T>
void rotate(const T *x, int64_t batch, int64_t seq, int64_t heads,
            int64_t headDim, double theta, double sign,
            const int32_t *positions, T *y) {
  int64_t half = headDim / 2, width = heads * headDim;
  std::vector<double> invFreq(half);
  for (int64_t i = 0; i < half; ++i)
    invFreq[i] = std::pow(theta, -2.0 * i / headDim);
  // One unit per (batch, position) row; its angles serve every head.
  auto rowBody = [&](int64_t row) {
    int64_t p = positions ? int64_t(positions[row]) : row % seq;
    std::vector<double> cosines(half), sines(half);
    for (int64_t i = 0; i < half; ++i) {
      double angle = p * invFreq[i];
      cosines[i] = std::cos(angle);
      sines[i] = sign * std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      int64_t base = row * width + h * headDim;
      for (int64_t i = 0; i < half; ++i) {
        double x1 = x[base + i], x2 = x[base + i + half];
        y[base + i] = T(x1 * cosines[i] - x2 * sines[i]);
        y[base + i + half] = T(x2 * cosines[i] + x1 * sines[i]);
      }
    }
  };
  parallelFor(batch * seq, batch * seq * (width + half * kTranscendentalCost),
              rowBody);
}
} // namespace

template <typename T>
void ropeForward(const T *x, int64_t batch, int64_t seq, int64_t heads,
                 int64_t headDim, double theta, T *y) {
  rotate(x, batch, seq, heads, headDim, theta, 1.0, nullptr, y);
}

template <typename T>
void ropeBackward(const T *dy, int64_t batch, int64_t seq, int64_t heads,
                  int64_t headDim, double theta, T *dx) {
  rotate(dy, batch, seq, heads, headDim, theta, -1.0, nullptr, dx);
}

template <typename T>
void ropeAtForward(const T *x, const int32_t *positions, int64_t batch,
                   int64_t seq, int64_t heads, int64_t headDim, double theta,
                   T *y) {
  rotate(x, batch, seq, heads, headDim, theta, 1.0, positions, y);
}

template <typename T>
void ropeAtBackward(const T *dy, const int32_t *positions, int64_t batch,
                    int64_t seq, int64_t heads, int64_t headDim, double theta,
                    T *dx) {
  rotate(dy, batch, seq, heads, headDim, theta, -1.0, positions, dx);
}

//===-- Attention ---------------------------------------------------------===//

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
} // namespace

template <typename T>
void attentionForward(const T *q, const T *k, const T *v,
                      const AttentionShape &s, T *out, T *lse) {
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
  std::vector<double> slopes(s.allHeads());
  alibiSlopes(s.allHeads(), slopes.data());
  // dk and dv of a kv head gather the q heads of its group, so the unit is a
  // (batch, kv head) pair taking its q heads in order: each output element
  // has one writer, adding its terms in the serial order. With tensor
  // parallelism a kv head's group may have only some (or none) of its query
  // heads here: its dk and dv are then this rank's part of the sum.
  int64_t group = s.allHeads() / s.allKvHeads();
  int64_t kvStride = s.kvHeads * s.headDim;
  auto pairBody = [&](int64_t pair) {
    int64_t b = pair / s.kvHeads, g = pair % s.kvHeads;
    for (int64_t j = 0; j < s.seq; ++j) {
      int64_t at = (b * s.seq + j) * kvStride + g * s.headDim;
      std::fill_n(dk + at, s.headDim, T(0));
      std::fill_n(dv + at, s.headDim, T(0));
    }
    std::vector<double> acc(s.headDim);
    int64_t first =
        std::max<int64_t>(0, (s.kvHeadOffset + g) * group - s.headOffset);
    int64_t last = std::min<int64_t>(
        s.heads, (s.kvHeadOffset + g + 1) * group - s.headOffset);
    for (int64_t h = first; h < last; ++h) {
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

//===-- Elementwise -------------------------------------------------------===//

// SwiGLU over rows of `cols` outputs whose gate and up rows are `stride`
// apart (stride = cols: separate tensors seen as one row; 2·cols: packed
// [gate | up] rows, up at +cols).
template <typename T>
void swigluRows(const T *gate, const T *up, int64_t rows, int64_t cols,
                int64_t stride, T *y) {
  auto block = [&](int64_t i0, int64_t i1) {
    int64_t row = i0 / cols, col = i0 % cols;
    for (int64_t i = i0; i < i1; ++i) {
      int64_t at = row * stride + col;
      y[i] = T(gate[at] * sigmoid(gate[at]) * up[at]);
      if (++col == cols) {
        col = 0;
        ++row;
      }
    }
  };
  parallelBlocks(rows * cols, kElementBlock, kTranscendentalCost, block);
}

template <typename T>
void swigluRowsBackward(const T *gate, const T *up, const T *dy, int64_t rows,
                        int64_t cols, int64_t stride, T *dgate, T *dup) {
  auto block = [&](int64_t i0, int64_t i1) {
    int64_t row = i0 / cols, col = i0 % cols;
    for (int64_t i = i0; i < i1; ++i) {
      int64_t at = row * stride + col;
      double g = gate[at], sg = sigmoid(g);
      dup[at] = T(dy[i] * g * sg);
      dgate[at] = T(dy[i] * up[at] * sg * (1.0 + g * (1.0 - sg)));
      if (++col == cols) {
        col = 0;
        ++row;
      }
    }
  };
  parallelBlocks(rows * cols, kElementBlock, kTranscendentalCost, block);
}

template <typename T>
void swigluForward(const T *gate, const T *up, int64_t n, T *y) {
  swigluRows(gate, up, 1, n, n, y);
}

template <typename T>
void swigluBackward(const T *gate, const T *up, const T *dy, int64_t n,
                    T *dgate, T *dup) {
  swigluRowsBackward(gate, up, dy, 1, n, n, dgate, dup);
}

template <typename T>
void swigluPackedForward(const T *x, int64_t rows, int64_t f, T *y) {
  swigluRows(x, x + f, rows, f, 2 * f, y);
}

template <typename T>
void swigluPackedBackward(const T *x, const T *dy, int64_t rows, int64_t f,
                          T *dx) {
  swigluRowsBackward(x, x + f, dy, rows, f, 2 * f, dx, dx + f);
}

template <typename T>
void geluForward(const T *x, int64_t n, bool tanhApprox, T *y) {
  auto block = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      double v = x[i];
      y[i] =
          tanhApprox
              ? T(0.5 * v *
                  (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v))))
              : T(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
    }
  };
  parallelBlocks(n, kElementBlock, kTranscendentalCost, block);
}

template <typename T>
void geluBackward(const T *x, const T *dy, int64_t n, bool tanhApprox, T *dx) {
  auto block = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      double v = x[i], grad;
      if (tanhApprox) {
        double u = kSqrt2OverPi * (v + 0.044715 * v * v * v);
        double t = std::tanh(u);
        double du = kSqrt2OverPi * (1.0 + 3 * 0.044715 * v * v);
        grad = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
      } else {
        grad = 0.5 * (1.0 + std::erf(v * kInvSqrt2)) +
               v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
      }
      dx[i] = T(dy[i] * grad);
    }
  };
  parallelBlocks(n, kElementBlock, kTranscendentalCost, block);
}

template <typename T>
void scaleForward(const T *x, int64_t n, double scale, T *y) {
  parallelBlocks(n, kElementBlock, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      y[i] = T(x[i] * scale);
  });
}

//===-- Dropout -----------------------------------------------------------===//

bool dropoutKeeps(uint64_t index, double rate, const DropoutKey &key) {
  return dropoutKeepsElement(index, rate, key.seed, key.step, key.op);
}

namespace {
template <typename T>
void applyDropout(const T *in, const GlobalIndexing &at, double rate,
                  const DropoutKey &key, T *out) {
  double scale = 1.0 / (1.0 - rate);
  // Units are blocks of a row, so that a single long row is split too.
  int64_t perRow = (at.cols + kElementBlock - 1) / kElementBlock;
  auto unitBody = [&](int64_t unit) {
    int64_t r = unit / perRow, c0 = (unit % perRow) * kElementBlock;
    int64_t c1 = std::min(at.cols, c0 + kElementBlock);
    uint64_t base = uint64_t(at.rowOffset + r) * at.globalCols + at.colOffset;
    for (int64_t c = c0; c < c1; ++c) {
      int64_t i = r * at.cols + c;
      out[i] = dropoutKeeps(base + c, rate, key) ? T(in[i] * scale) : T(0);
    }
  };
  parallelFor(at.rows * perRow, at.rows * at.cols * kTranscendentalCost,
              unitBody);
}
} // namespace

template <typename T>
void dropoutForward(const T *x, const GlobalIndexing &at, double rate,
                    const DropoutKey &key, T *y) {
  applyDropout(x, at, rate, key, y);
}

template <typename T>
void dropoutBackward(const T *dy, const GlobalIndexing &at, double rate,
                     const DropoutKey &key, T *dx) {
  applyDropout(dy, at, rate, key, dx);
}

//===-- Fused QKV ---------------------------------------------------------===//

namespace {
/// Calls f(column of the fused row, tensor 0/1/2 (q/k/v), column in it) for
/// every column, in the layout's order.
template <typename F>
void forEachQkvColumn(const QkvShape &s, F f) {
  int64_t d = s.headDim;
  if (s.perHead) {
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t part = 0; part < 3; ++part)
        for (int64_t c = 0; c < d; ++c)
          f((h * 3 + part) * d + c, part, h * d + c);
    return;
  }
  int64_t qCols = s.heads * d, kvCols = s.kvHeads * d;
  for (int64_t c = 0; c < qCols; ++c)
    f(c, 0, c);
  for (int64_t c = 0; c < kvCols; ++c) {
    f(qCols + c, 1, c);
    f(qCols + kvCols + c, 2, c);
  }
}
} // namespace

template <typename T>
void qkvSplitForward(const T *qkv, const QkvShape &s, T *q, T *k, T *v) {
  int64_t qCols = s.heads * s.headDim, kvCols = s.kvHeads * s.headDim;
  int64_t width = qCols + 2 * kvCols;
  T *outs[3] = {q, k, v};
  int64_t widths[3] = {qCols, kvCols, kvCols};
  parallelFor(s.rows, s.rows * width, [&](int64_t r) {
    forEachQkvColumn(s, [&](int64_t col, int64_t part, int64_t c) {
      outs[part][r * widths[part] + c] = qkv[r * width + col];
    });
  });
}

template <typename T>
void qkvSplitBackward(const T *dq, const T *dk, const T *dv, const QkvShape &s,
                      T *dqkv) {
  int64_t qCols = s.heads * s.headDim, kvCols = s.kvHeads * s.headDim;
  int64_t width = qCols + 2 * kvCols;
  const T *ins[3] = {dq, dk, dv};
  int64_t widths[3] = {qCols, kvCols, kvCols};
  parallelFor(s.rows, s.rows * width, [&](int64_t r) {
    forEachQkvColumn(s, [&](int64_t col, int64_t part, int64_t c) {
      dqkv[r * width + col] = ins[part][r * widths[part] + c];
    });
  });
}

//===-- Loss --------------------------------------------------------------===//

template <typename T>
T crossEntropyForward(const T *logits, const int32_t *targets, int64_t rows,
                      int64_t vocab, int64_t ignoreIndex, T *lse,
                      int64_t *counted) {
  // Rows in parallel, each leaving its loss term in `terms`; the terms are
  // then added in row order, so the sum does not depend on the threads.
  std::vector<double> terms(rows);
  parallelFor(rows, rows * vocab * kTranscendentalCost, [&](int64_t r) {
    const T *row = logits + r * vocab;
    double m = *std::max_element(row, row + vocab), sum = 0;
    for (int64_t c = 0; c < vocab; ++c)
      sum += std::exp(row[c] - m);
    double l = m + std::log(sum);
    lse[r] = T(l);
    terms[r] = targets[r] == ignoreIndex ? 0.0 : l - row[targets[r]];
  });
  return T(meanOverCounted(terms, targets, ignoreIndex, counted));
}

template <typename T>
void crossEntropyBackward(const T *logits, const int32_t *targets,
                          const T *lse, T dloss, int64_t rows, int64_t vocab,
                          int64_t ignoreIndex, int64_t counted, T *dlogits) {
  double scale = counted ? double(dloss) / counted : 0.0;
  parallelFor(rows, rows * vocab * kTranscendentalCost, [&](int64_t r) {
    T *g = dlogits + r * vocab;
    if (targets[r] == ignoreIndex) {
      std::fill_n(g, vocab, T(0));
      return;
    }
    const T *row = logits + r * vocab;
    for (int64_t c = 0; c < vocab; ++c)
      g[c] = T(std::exp(row[c] - double(lse[r])) * scale);
    g[targets[r]] -= T(scale);
  });
}

//===-- Instantiations ----------------------------------------------------===//

#define BRAID_INSTANTIATE(T)                                                   \
  template void embeddingForward<T>(const T *, const int32_t *, int64_t,       \
                                    int64_t, T *);                             \
  template void embeddingBackward<T>(const T *, const int32_t *, int64_t,      \
                                     int64_t, T *);                            \
  template void positionEmbeddingForward<T>(const T *, int64_t, int64_t,       \
                                            int64_t, T *);                     \
  template void positionEmbeddingBackward<T>(const T *, int64_t, int64_t,      \
                                             int64_t, T *);                    \
  template void linearForward<T>(const T *, const T *, const T *,              \
                                 const LinearShape &, T *);                    \
  template void linearBackward<T>(const T *, const T *, const T *,             \
                                  const LinearShape &, T *, T *, T *);         \
  template void rmsNormForward<T>(const T *, const T *, int64_t, int64_t,      \
                                  double, T *, T *);                           \
  template void rmsNormBackward<T>(const T *, const T *, const T *, const T *, \
                                   int64_t, int64_t, T *, T *);                \
  template void layerNormForward<T>(const T *, const T *, const T *, int64_t,  \
                                    int64_t, double, T *, T *, T *);           \
  template void layerNormBackward<T>(const T *, const T *, const T *,          \
                                     const T *, const T *, int64_t, int64_t,   \
                                     T *, T *, T *);                           \
  template void ropeForward<T>(const T *, int64_t, int64_t, int64_t, int64_t,  \
                               double, T *);                                   \
  template void ropeBackward<T>(const T *, int64_t, int64_t, int64_t, int64_t, \
                                double, T *);                                  \
  template void ropeAtForward<T>(const T *, const int32_t *, int64_t, int64_t, \
                                 int64_t, int64_t, double, T *);               \
  template void ropeAtBackward<T>(const T *, const int32_t *, int64_t,         \
                                  int64_t, int64_t, int64_t, double, T *);     \
  template void positionEmbeddingAtForward<T>(const T *, const int32_t *,      \
                                              int64_t, int64_t, int64_t,       \
                                              int64_t, int64_t, T *);          \
  template void positionEmbeddingAtBackward<T>(const T *, const int32_t *,     \
                                               int64_t, int64_t, int64_t,      \
                                               int64_t, int64_t, T *);         \
  template void attentionForward<T>(const T *, const T *, const T *,           \
                                    const AttentionShape &, T *, T *);         \
  template void attentionBackward<T>(const T *, const T *, const T *,          \
                                     const T *, const T *, const T *,          \
                                     const AttentionShape &, T *, T *, T *);   \
  template void swigluForward<T>(const T *, const T *, int64_t, T *);          \
  template void swigluPackedForward<T>(const T *, int64_t, int64_t, T *);     \
  template void swigluPackedBackward<T>(const T *, const T *, int64_t,        \
                                        int64_t, T *);                        \
  template void swigluBackward<T>(const T *, const T *, const T *, int64_t,    \
                                  T *, T *);                                   \
  template void geluForward<T>(const T *, int64_t, bool, T *);                 \
  template void geluBackward<T>(const T *, const T *, int64_t, bool, T *);     \
  template void scaleForward<T>(const T *, int64_t, double, T *);              \
  template void dropoutForward<T>(const T *, const GlobalIndexing &, double,  \
                                  const DropoutKey &, T *);                    \
  template void dropoutBackward<T>(const T *, const GlobalIndexing &, double, \
                                   const DropoutKey &, T *);                   \
  template void qkvSplitForward<T>(const T *, const QkvShape &, T *, T *,      \
                                   T *);                                       \
  template void qkvSplitBackward<T>(const T *, const T *, const T *,           \
                                    const QkvShape &, T *);                    \
  template T crossEntropyForward<T>(const T *, const int32_t *, int64_t,       \
                                    int64_t, int64_t, T *, int64_t *);         \
  template void crossEntropyBackward<T>(const T *, const int32_t *, const T *, \
                                        T, int64_t, int64_t, int64_t, int64_t, \
                                        T *);

BRAID_INSTANTIATE(float)
BRAID_INSTANTIATE(double)
#undef BRAID_INSTANTIATE

} // namespace braid::cpu
