//===- Kernels.cpp - CPU kernels of the `model` ops -----------------------===//
//
// Plain loops over contiguous rows (the compiler vectorises the inner ones);
// matrix products go to BLAS. Reductions accumulate in double so that the
// float kernels agree with the double reference to float precision.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include "runtime/cpu/Philox.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace braid::cpu {
namespace {

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
          int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
              ldc);
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
          int64_t k, const double *a, int64_t lda, const double *b,
          int64_t ldb, double beta, double *c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c,
              ldc);
}

constexpr double kSqrt2OverPi = 0.7978845608028654; // sqrt(2 / pi)
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327; // 1 / sqrt(2 pi)

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

} // namespace

//===-- Embeddings --------------------------------------------------------===//

template <typename T>
void embeddingForward(const T *table, const int32_t *ids, int64_t rows,
                      int64_t hidden, T *out) {
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(table + static_cast<int64_t>(ids[r]) * hidden, hidden,
                out + r * hidden);
}

template <typename T>
void embeddingBackward(const T *dout, const int32_t *ids, int64_t rows,
                       int64_t hidden, T *dtable) {
  for (int64_t r = 0; r < rows; ++r) {
    T *row = dtable + static_cast<int64_t>(ids[r]) * hidden;
    const T *g = dout + r * hidden;
    for (int64_t c = 0; c < hidden; ++c)
      row[c] += g[c];
  }
}

template <typename T>
void positionEmbeddingForward(const T *table, int64_t batch, int64_t seq,
                              int64_t hidden, T *out) {
  for (int64_t b = 0; b < batch; ++b)
    std::copy_n(table, seq * hidden, out + b * seq * hidden);
}

template <typename T>
void positionEmbeddingBackward(const T *dout, int64_t batch, int64_t seq,
                               int64_t hidden, T *dtable) {
  for (int64_t b = 0; b < batch; ++b) {
    const T *g = dout + b * seq * hidden;
    for (int64_t i = 0; i < seq * hidden; ++i)
      dtable[i] += g[i];
  }
}

//===-- Matrix products ---------------------------------------------------===//

template <typename T>
void linearForward(const T *x, const T *w, const T *bias, const LinearShape &s,
                   T *y) {
  gemm(CblasNoTrans, s.transposeW ? CblasTrans : CblasNoTrans, s.rows, s.out,
       s.in, x, s.in, w, s.transposeW ? s.in : s.out, T(0), y, s.out);
  if (bias)
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.out; ++c)
        y[r * s.out + c] += bias[c];
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
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.out; ++c)
        dbias[c] += dy[r * s.out + c];
}

//===-- Normalisation -----------------------------------------------------===//

template <typename T>
void rmsNormForward(const T *x, const T *w, int64_t rows, int64_t d, double eps,
                    T *y, T *rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * d;
    double sum = 0;
    for (int64_t c = 0; c < d; ++c)
      sum += double(xr[c]) * xr[c];
    double inv = 1.0 / std::sqrt(sum / d + eps);
    rstd[r] = T(inv);
    for (int64_t c = 0; c < d; ++c)
      y[r * d + c] = T(xr[c] * inv * w[c]);
  }
}

template <typename T>
void rmsNormBackward(const T *x, const T *w, const T *rstd, const T *dy,
                     int64_t rows, int64_t d, T *dx, T *dw) {
  // y = x·r·w with r = (mean(x²) + eps)^(-1/2):
  // dx = r·(w·dy) - x·r³·mean(x·w·dy).
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * d, *gr = dy + r * d;
    double inv = rstd[r], dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      dot += double(xr[c]) * w[c] * gr[c];
      dw[c] += T(gr[c] * xr[c] * inv);
    }
    double k = inv * inv * inv * dot / d;
    for (int64_t c = 0; c < d; ++c)
      dx[r * d + c] = T(inv * w[c] * gr[c] - xr[c] * k);
  }
}

template <typename T>
void layerNormForward(const T *x, const T *w, const T *b, int64_t rows,
                      int64_t d, double eps, T *y, T *mean, T *rstd) {
  for (int64_t r = 0; r < rows; ++r) {
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
  }
}

template <typename T>
void layerNormBackward(const T *x, const T *w, const T *mean, const T *rstd,
                       const T *dy, int64_t rows, int64_t d, T *dx, T *dw,
                       T *db) {
  // With xhat = (x - mu)·r and g = w·dy:
  // dx = r·(g - mean(g) - xhat·mean(g·xhat)).
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * d, *gr = dy + r * d;
    double mu = mean[r], inv = rstd[r], sumG = 0, sumGX = 0;
    for (int64_t c = 0; c < d; ++c) {
      double xhat = (xr[c] - mu) * inv;
      double g = double(w[c]) * gr[c];
      sumG += g;
      sumGX += g * xhat;
      dw[c] += T(gr[c] * xhat);
      db[c] += gr[c];
    }
    sumG /= d;
    sumGX /= d;
    for (int64_t c = 0; c < d; ++c) {
      double xhat = (xr[c] - mu) * inv;
      dx[r * d + c] = T(inv * (double(w[c]) * gr[c] - sumG - xhat * sumGX));
    }
  }
}

//===-- RoPE --------------------------------------------------------------===//

namespace {
/// Rotates every head of x by angle·sign (sign -1 is the inverse rotation).
template <typename T>
void rotate(const T *x, int64_t batch, int64_t seq, int64_t heads,
            int64_t headDim, double theta, double sign, T *y) {
  int64_t half = headDim / 2, width = heads * headDim;
  std::vector<double> invFreq(half);
  for (int64_t i = 0; i < half; ++i)
    invFreq[i] = std::pow(theta, -2.0 * i / headDim);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t p = 0; p < seq; ++p)
      for (int64_t h = 0; h < heads; ++h) {
        int64_t base = (b * seq + p) * width + h * headDim;
        for (int64_t i = 0; i < half; ++i) {
          double angle = p * invFreq[i];
          double c = std::cos(angle), s = sign * std::sin(angle);
          double x1 = x[base + i], x2 = x[base + i + half];
          y[base + i] = T(x1 * c - x2 * s);
          y[base + i + half] = T(x2 * c + x1 * s);
        }
      }
}
} // namespace

template <typename T>
void ropeForward(const T *x, int64_t batch, int64_t seq, int64_t heads,
                 int64_t headDim, double theta, T *y) {
  rotate(x, batch, seq, heads, headDim, theta, 1.0, y);
}

template <typename T>
void ropeBackward(const T *dy, int64_t batch, int64_t seq, int64_t heads,
                  int64_t headDim, double theta, T *dx) {
  rotate(dy, batch, seq, heads, headDim, theta, -1.0, dx);
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

Head makeHead(const AttentionShape &s, int64_t b, int64_t h,
              const std::vector<double> &slopes) {
  int64_t group = s.heads / s.kvHeads;
  Head head;
  head.qStride = s.heads * s.headDim;
  head.kvStride = s.kvHeads * s.headDim;
  head.qOffset = b * s.seq * head.qStride + h * s.headDim;
  head.kvOffset = b * s.seq * head.kvStride + (h / group) * s.headDim;
  head.slope = s.alibi ? slopes[h] : 0.0;
  return head;
}
} // namespace

template <typename T>
void attentionForward(const T *q, const T *k, const T *v,
                      const AttentionShape &s, T *out, T *lse) {
  std::vector<double> slopes(s.heads), scores(s.seq), acc(s.headDim);
  alibiSlopes(s.heads, slopes.data());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      Head hd = makeHead(s, b, h, slopes);
      for (int64_t i = 0; i < s.seq; ++i) {
        const T *qi = q + hd.qOffset + i * hd.qStride;
        int64_t n = hd.keys(s, i);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          const T *kj = k + hd.kvOffset + j * hd.kvStride;
          double dot = 0;
          for (int64_t c = 0; c < s.headDim; ++c)
            dot += double(qi[c]) * kj[c];
          scores[j] = dot * s.scale + hd.bias(i, j);
          m = std::max(m, scores[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j)
          sum += std::exp(scores[j] - m);
        double l = m + std::log(sum);
        lse[(b * s.heads + h) * s.seq + i] = T(l);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          double p = std::exp(scores[j] - l);
          const T *vj = v + hd.kvOffset + j * hd.kvStride;
          for (int64_t c = 0; c < s.headDim; ++c)
            acc[c] += p * vj[c];
        }
        T *oi = out + hd.qOffset + i * hd.qStride;
        for (int64_t c = 0; c < s.headDim; ++c)
          oi[c] = T(acc[c]);
      }
    }
}

template <typename T>
void attentionBackward(const T *q, const T *k, const T *v, const T *out,
                       const T *lse, const T *dout, const AttentionShape &s,
                       T *dq, T *dk, T *dv) {
  std::fill_n(dk, s.batch * s.seq * s.kvHeads * s.headDim, T(0));
  std::fill_n(dv, s.batch * s.seq * s.kvHeads * s.headDim, T(0));
  std::vector<double> slopes(s.heads), acc(s.headDim);
  alibiSlopes(s.heads, slopes.data());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
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
        for (int64_t j = 0, n = hd.keys(s, i); j < n; ++j) {
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
}

//===-- Elementwise -------------------------------------------------------===//

template <typename T>
void swigluForward(const T *gate, const T *up, int64_t n, T *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = T(gate[i] * sigmoid(gate[i]) * up[i]);
}

template <typename T>
void swigluBackward(const T *gate, const T *up, const T *dy, int64_t n,
                    T *dgate, T *dup) {
  for (int64_t i = 0; i < n; ++i) {
    double g = gate[i], sg = sigmoid(g);
    dup[i] = T(dy[i] * g * sg);
    dgate[i] = T(dy[i] * up[i] * sg * (1.0 + g * (1.0 - sg)));
  }
}

template <typename T>
void geluForward(const T *x, int64_t n, bool tanhApprox, T *y) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    y[i] = tanhApprox
               ? T(0.5 * v *
                   (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v))))
               : T(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
  }
}

template <typename T>
void geluBackward(const T *x, const T *dy, int64_t n, bool tanhApprox, T *dx) {
  for (int64_t i = 0; i < n; ++i) {
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
}

//===-- Dropout -----------------------------------------------------------===//

bool dropoutKeeps(uint64_t index, double rate, const DropoutKey &key) {
  // One Philox call gives four words: elements 4i .. 4i+3 share a counter.
  PhiloxCounter counter = {uint32_t(index >> 2), uint32_t(index >> 34),
                           key.step, key.op};
  PhiloxCounter bits =
      philox4x32(counter, {uint32_t(key.seed), uint32_t(key.seed >> 32)});
  return uniformFromBits(bits[index & 3]) >= rate;
}

namespace {
template <typename T>
void applyDropout(const T *in, const GlobalIndexing &at, double rate,
                  const DropoutKey &key, T *out) {
  double scale = 1.0 / (1.0 - rate);
  for (int64_t r = 0; r < at.rows; ++r) {
    uint64_t base = uint64_t(at.rowOffset + r) * at.globalCols + at.colOffset;
    for (int64_t c = 0; c < at.cols; ++c) {
      int64_t i = r * at.cols + c;
      out[i] = dropoutKeeps(base + c, rate, key) ? T(in[i] * scale) : T(0);
    }
  }
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
  for (int64_t r = 0; r < s.rows; ++r)
    forEachQkvColumn(s, [&](int64_t col, int64_t part, int64_t c) {
      outs[part][r * widths[part] + c] = qkv[r * width + col];
    });
}

template <typename T>
void qkvSplitBackward(const T *dq, const T *dk, const T *dv, const QkvShape &s,
                      T *dqkv) {
  int64_t qCols = s.heads * s.headDim, kvCols = s.kvHeads * s.headDim;
  int64_t width = qCols + 2 * kvCols;
  const T *ins[3] = {dq, dk, dv};
  int64_t widths[3] = {qCols, kvCols, kvCols};
  for (int64_t r = 0; r < s.rows; ++r)
    forEachQkvColumn(s, [&](int64_t col, int64_t part, int64_t c) {
      dqkv[r * width + col] = ins[part][r * widths[part] + c];
    });
}

//===-- Loss --------------------------------------------------------------===//

template <typename T>
T crossEntropyForward(const T *logits, const int32_t *targets, int64_t rows,
                      int64_t vocab, int64_t ignoreIndex, T *lse,
                      int64_t *counted) {
  double total = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T *row = logits + r * vocab;
    double m = *std::max_element(row, row + vocab), sum = 0;
    for (int64_t c = 0; c < vocab; ++c)
      sum += std::exp(row[c] - m);
    double l = m + std::log(sum);
    lse[r] = T(l);
    if (targets[r] == ignoreIndex)
      continue;
    total += l - row[targets[r]];
    ++n;
  }
  *counted = n;
  return n ? T(total / n) : T(0);
}

template <typename T>
void crossEntropyBackward(const T *logits, const int32_t *targets,
                          const T *lse, T dloss, int64_t rows, int64_t vocab,
                          int64_t ignoreIndex, int64_t counted, T *dlogits) {
  double scale = counted ? double(dloss) / counted : 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    T *g = dlogits + r * vocab;
    if (targets[r] == ignoreIndex) {
      std::fill_n(g, vocab, T(0));
      continue;
    }
    const T *row = logits + r * vocab;
    for (int64_t c = 0; c < vocab; ++c)
      g[c] = T(std::exp(row[c] - double(lse[r])) * scale);
    g[targets[r]] -= T(scale);
  }
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
  template void attentionForward<T>(const T *, const T *, const T *,           \
                                    const AttentionShape &, T *, T *);         \
  template void attentionBackward<T>(const T *, const T *, const T *,          \
                                     const T *, const T *, const T *,          \
                                     const AttentionShape &, T *, T *, T *);   \
  template void swigluForward<T>(const T *, const T *, int64_t, T *);          \
  template void swigluBackward<T>(const T *, const T *, const T *, int64_t,    \
                                  T *, T *);                                   \
  template void geluForward<T>(const T *, int64_t, bool, T *);                 \
  template void geluBackward<T>(const T *, const T *, int64_t, bool, T *);     \
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
