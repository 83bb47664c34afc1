//===- Kernels.cpp - CPU kernels of the `model` ops -----------------------===//
//
// Plain loops over contiguous rows (the compiler vectorises the inner ones);
// matrix products go to BLAS. Reductions accumulate in double so that the
// float kernels agree with the double reference to float precision.
//
// Threads: the outer loops run on OpenMP threads over units whose outputs are
// disjoint (rows, (batch, head) pairs, column blocks, fixed element blocks,
// the blocks of a product's output that gemmCut cuts by its shape alone), and
// every unit runs the serial code on its own. No floating-point sum is
// split between threads: sums over rows (parameter gradients) are taken by
// column blocks, each adding its rows in order, and the loss adds per-row
// values in row order afterwards. So the results are bit-identical whatever
// the number of threads, and identical to the single-threaded kernels.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include "runtime/cpu/Blas.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/VectorLoops.h"
#include "runtime/cpu/Philox.h"

#include <cblas.h>
#include <cstring>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace braid::cpu {
namespace {

/// The fixed cut of a product's output into blocks, each computed by one
/// single-threaded BLAS call: it depends on the shape only, never on the
/// thread count, so every element is computed by the same call with the
/// same operands whatever the threads. The larger of the output's two sides
/// is cut (a block along the rows repacks the whole right-hand matrix, one
/// along the columns the left-hand one), into a power of two of blocks (at
/// most kMaxGemmBlocks), so that any power-of-two thread count up to that
/// many gets equal shares: blocks of at least kMinGemmBlock, which keeps the
/// repacking small, or of kSmallGemmBlock where that leaves fewer than
/// kFewGemmBlocks (small products, which would otherwise run on one or two
/// threads). GPT-2-small's shape on 2 cores (bench/cpu_train.sh): the
/// products at 0.98 of OpenBLAS threading them itself, and the step 0.92x
/// that of blocks of 128 (whose products took about 3 % longer).
constexpr int64_t kMinGemmBlock = 256;
constexpr int64_t kSmallGemmBlock = 128;
constexpr int64_t kFewGemmBlocks = 4;
constexpr int64_t kMaxGemmBlocks = 64;
constexpr int64_t kGemmBlockAlign = 16;

struct GemmCut {
  bool alongRows; // the blocks are rows of the output (else columns)
  int64_t block;  // rows (columns) per block, the last one shorter
  int64_t count;
  GemmCut(int64_t m, int64_t n) : alongRows(m >= n) {
    int64_t side = alongRows ? m : n;
    auto blocksOf = [&](int64_t minBlock) {
      int64_t blocks = 1;
      while (blocks < kMaxGemmBlocks && side / (blocks * 2) >= minBlock)
        blocks *= 2;
      return blocks;
    };
    int64_t blocks = blocksOf(kMinGemmBlock);
    if (blocks < kFewGemmBlocks)
      blocks = std::min(kFewGemmBlocks, blocksOf(kSmallGemmBlock));
    block = (side + blocks - 1) / blocks;
    block = std::max<int64_t>(
        kGemmBlockAlign,
        (block + kGemmBlockAlign - 1) / kGemmBlockAlign * kGemmBlockAlign);
    count = std::max<int64_t>(1, (side + block - 1) / block);
  }
};

/// Runs f(begin, end) on the blocks of the cut, on the OpenMP threads.
/// Every call runs on one thread (Blas.h): the blocks' inside an active
/// parallel region, a single block's under a OneBlasThread.
template <typename F>
void forEachGemmBlock(const GemmCut &cut, int64_t side, F &&f) {
  runBlasOnOneThread();
  if (cut.count == 1) {
    OneBlasThread one;
    f(0, side);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < cut.count; ++i)
    f(i * cut.block, std::min(side, (i + 1) * cut.block));
}

/// The BLAS calls of one element type.
struct SBlas {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m,
                   int64_t n, int64_t k, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c,
                   int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
                ldc);
  }
  static void gemv(CBLAS_TRANSPOSE t, int64_t rows, int64_t cols,
                   const float *a, int64_t lda, const float *x, float beta,
                   float *y) {
    cblas_sgemv(CblasRowMajor, t, rows, cols, 1.0f, a, lda, x, 1, beta, y, 1);
  }
};
struct DBlas {
  static void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m,
                   int64_t n, int64_t k, const double *a, int64_t lda,
                   const double *b, int64_t ldb, double beta, double *c,
                   int64_t ldc) {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c,
                ldc);
  }
  static void gemv(CBLAS_TRANSPOSE t, int64_t rows, int64_t cols,
                   const double *a, int64_t lda, const double *x, double beta,
                   double *y) {
    cblas_dgemv(CblasRowMajor, t, rows, cols, 1.0, a, lda, x, 1, beta, y, 1);
  }
};

/// c[m, n] = op(a)[m, k] · op(b)[k, n] + beta · c, row-major, cut as above.
///
/// One row times a matrix is a matrix-vector product: OpenBLAS's GEMM
/// would copy (pack) the whole matrix for that one row first, which is most
/// of a decode step's time (bench/generate_cpu.sh measured 79 % of it in the
/// packing). GEMV reads the matrix once; its outputs are cut like a GEMM's
/// columns, and each output is one dot product in one call.
template <typename Blas, typename T>
void gemmCut(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
             int64_t k, const T *a, int64_t lda, const T *b, int64_t ldb,
             T beta, T *c, int64_t ldc) {
  // Where rows (columns) [i0, i1) of op(x) start in x.
  auto rowsOf = [](CBLAS_TRANSPOSE t, const T *x, int64_t ld, int64_t i0) {
    return t == CblasNoTrans ? x + i0 * ld : x + i0;
  };
  auto colsOf = [](CBLAS_TRANSPOSE t, const T *x, int64_t ld, int64_t j0) {
    return t == CblasNoTrans ? x + j0 : x + j0 * ld;
  };
  if (m == 1 && ta == CblasNoTrans) {
    // c[1, n] = a[1, k] · op(b): b is [n, k] (Trans) or [k, n].
    GemmCut cut(1, n);
    forEachGemmBlock(cut, n, [&](int64_t j0, int64_t j1) {
      if (tb == CblasTrans)
        Blas::gemv(CblasNoTrans, j1 - j0, k, b + j0 * ldb, ldb, a, beta,
                   c + j0);
      else
        Blas::gemv(CblasTrans, k, j1 - j0, b + j0, ldb, a, beta, c + j0);
    });
    return;
  }
  GemmCut cut(m, n);
  if (cut.alongRows)
    forEachGemmBlock(cut, m, [&](int64_t i0, int64_t i1) {
      Blas::gemm(ta, tb, i1 - i0, n, k, rowsOf(ta, a, lda, i0), lda, b, ldb,
                 beta, c + i0 * ldc, ldc);
    });
  else
    forEachGemmBlock(cut, n, [&](int64_t j0, int64_t j1) {
      Blas::gemm(ta, tb, m, j1 - j0, k, a, lda, colsOf(tb, b, ldb, j0), ldb,
                 beta, c + j0, ldc);
    });
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
          int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
  gemmCut<SBlas>(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
          int64_t k, const double *a, int64_t lda, const double *b,
          int64_t ldb, double beta, double *c, int64_t ldc) {
  gemmCut<DBlas>(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

constexpr double kSqrt2OverPi = 0.7978845608028654; // sqrt(2 / pi)
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327; // 1 / sqrt(2 pi)

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// Runs f(i, len) on the stretches of [i0, i1) that stay inside one row of
/// `cols` elements (i is the element's index in the rows × cols layout), so
/// that f's loop over len elements is contiguous and vectorises.
template <typename F>
void forRowStretches(int64_t i0, int64_t i1, int64_t cols, F &&f) {
  for (int64_t i = i0; i < i1;) {
    int64_t len = std::min(i1 - i, cols - i % cols);
    f(i, len);
    i += len;
  }
}

} // namespace

//===-- Threads -----------------------------------------------------------===//

void setNumThreads(int n) {
  // Read before the first change, this is what n <= 0 goes back to.
  // OpenBLAS stays on one thread: gemmCut splits the products between the
  // OpenMP threads.
  static const int ompDefault = omp_get_max_threads();
  runBlasOnOneThread();
  omp_set_num_threads(n > 0 ? n : ompDefault);
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
                [&](int64_t r, int64_t c) { return double(dy[r * s.out + c]); });
}

//===-- Normalisation -----------------------------------------------------===//

namespace {
/// 1 / sqrt(mean(x²) + eps) of one row.
template <typename T> double rmsInverse(const T *xr, int64_t d, double eps) {
  double sum = laneSum(d, [&](int64_t c) { return double(xr[c]) * xr[c]; });
  return 1.0 / std::sqrt(sum / d + eps);
}

/// The mean and 1 / sqrt(variance + eps) of one row.
template <typename T>
void meanAndInverse(const T *xr, int64_t d, double eps, double &mu,
                    double &inv) {
  mu = laneSum(d, [&](int64_t c) { return double(xr[c]); }) / d;
  double var = laneSum(d, [&](int64_t c) {
    double t = xr[c] - mu;
    return t * t;
  });
  inv = 1.0 / std::sqrt(var / d + eps);
}
} // namespace

template <typename T>
void rmsNormForward(const T *x, const T *w, int64_t rows, int64_t d, double eps,
                    T *y, T *rstd) {
  parallelFor(rows, rows * d, [&](int64_t r) {
    const T *xr = x + r * d;
    double inv = rmsInverse(xr, d, eps);
    rstd[r] = T(inv);
    for (int64_t c = 0; c < d; ++c)
      y[r * d + c] = T(xr[c] * inv * w[c]);
  });
}

template <typename T>
void rmsNormStats(const T *x, int64_t rows, int64_t d, double eps, T *rstd) {
  parallelFor(rows, rows * d,
              [&](int64_t r) { rstd[r] = T(rmsInverse(x + r * d, d, eps)); });
}

template <typename T>
void rmsNormBackward(const T *x, const T *w, const T *rstd, const T *dy,
                     int64_t rows, int64_t d, T *dx, T *dw) {
  // y = x·r·w with r = (mean(x²) + eps)^(-1/2):
  // dx = r·(w·dy) - x·r³·mean(x·w·dy).
  // One pass by blocks of rows: each chunk of rows adds its terms of dw,
  // then writes its dx (after, so that dx may share dy's or x's buffer).
  columnSumsByRowBlocks(
      rows, d, {dw}, 2 * d, [&](int64_t r0, int64_t r1, double *part) {
        for (int64_t lo = r0; lo < r1; lo += kRowBlock) {
          const int64_t hi = std::min(r1, lo + kRowBlock);
          for (int64_t r = lo; r < hi; ++r) {
            const T *xr = x + r * d, *gr = dy + r * d;
            double inv = rstd[r];
            for (int64_t c = 0; c < d; ++c)
              part[c] += double(gr[c]) * xr[c] * inv;
          }
          for (int64_t r = lo; r < hi; ++r) {
            const T *xr = x + r * d, *gr = dy + r * d;
            double inv = rstd[r];
            double dot = laneSum(
                d, [&](int64_t c) { return double(xr[c]) * w[c] * gr[c]; });
            double k = inv * inv * inv * dot / d;
            for (int64_t c = 0; c < d; ++c)
              dx[r * d + c] = T(inv * w[c] * gr[c] - xr[c] * k);
          }
        }
      });
}

template <typename T>
void layerNormForward(const T *x, const T *w, const T *b, int64_t rows,
                      int64_t d, double eps, T *y, T *mean, T *rstd) {
  parallelFor(rows, rows * d, [&](int64_t r) {
    const T *xr = x + r * d;
    double mu, inv;
    meanAndInverse(xr, d, eps, mu, inv);
    mean[r] = T(mu);
    rstd[r] = T(inv);
    for (int64_t c = 0; c < d; ++c)
      y[r * d + c] = T((xr[c] - mu) * inv * w[c] + b[c]);
  });
}

template <typename T>
void layerNormStats(const T *x, int64_t rows, int64_t d, double eps, T *mean,
                    T *rstd) {
  parallelFor(rows, rows * d, [&](int64_t r) {
    double mu, inv;
    meanAndInverse(x + r * d, d, eps, mu, inv);
    mean[r] = T(mu);
    rstd[r] = T(inv);
  });
}

template <typename T>
void layerNormBackward(const T *x, const T *w, const T *mean, const T *rstd,
                       const T *dy, int64_t rows, int64_t d, T *dx, T *dw,
                       T *db) {
  // With xhat = (x - mu)·r and g = w·dy:
  // dx = r·(g - mean(g) - xhat·mean(g·xhat)).
  // One pass by blocks of rows: each chunk of rows adds its terms of dw and
  // db, then writes its dx (after, so that dx may share dy's or x's buffer).
  columnSumsByRowBlocks(
      rows, d, {dw, db}, 3 * d, [&](int64_t r0, int64_t r1, double *part) {
        double *pw = part, *pb = part + d;
        for (int64_t lo = r0; lo < r1; lo += kRowBlock) {
          const int64_t hi = std::min(r1, lo + kRowBlock);
          for (int64_t r = lo; r < hi; ++r) {
            const T *xr = x + r * d, *gr = dy + r * d;
            double mu = mean[r], inv = rstd[r];
            for (int64_t c = 0; c < d; ++c) {
              pw[c] += gr[c] * ((xr[c] - mu) * inv);
              pb[c] += gr[c];
            }
          }
          for (int64_t r = lo; r < hi; ++r) {
            const T *xr = x + r * d, *gr = dy + r * d;
            double mu = mean[r], inv = rstd[r];
            double sumG =
                laneSum(d, [&](int64_t c) { return double(w[c]) * gr[c]; }) /
                d;
            double sumGX = laneSum(d, [&](int64_t c) {
                             return double(w[c]) * gr[c] * ((xr[c] - mu) * inv);
                           }) /
                           d;
            for (int64_t c = 0; c < d; ++c) {
              double xhat = (xr[c] - mu) * inv;
              dx[r * d + c] =
                  T(inv * (double(w[c]) * gr[c] - sumG - xhat * sumGX));
            }
          }
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
  int64_t half = headDim / 2, width = heads * headDim, rows = batch * seq;
  std::vector<double> invFreq(half);
  for (int64_t i = 0; i < half; ++i)
    invFreq[i] = std::pow(theta, -2.0 * i / headDim);
  auto angles = [&](int64_t p, double *cosines, double *sines) {
    for (int64_t i = 0; i < half; ++i) {
      double angle = p * invFreq[i];
      cosines[i] = std::cos(angle);
      sines[i] = sign * std::sin(angle);
    }
  };
  // The cosines and sines by position, computed once for the rows that
  // share a position (every sequence of the batch) where the positions are
  // no more than the rows: training's [0, seq), a prompt's. Otherwise (a
  // decode step's few rows far into the cache) per row. The same values
  // either way.
  int64_t lowest = 0, count = seq;
  if (positions) {
    auto [lo, hi] = std::minmax_element(positions, positions + rows);
    lowest = rows ? *lo : 0;
    count = rows ? int64_t(*hi) + 1 : 0;
  }
  const bool table = lowest >= 0 && count <= rows;
  std::vector<double> cosTable, sinTable;
  if (table) {
    cosTable.resize(count * half);
    sinTable.resize(count * half);
    parallelFor(count, count * half * kTranscendentalCost, [&](int64_t p) {
      angles(p, cosTable.data() + p * half, sinTable.data() + p * half);
    });
  }
  // One unit per (batch, position) row; its angles serve every head.
  auto rowBody = [&](int64_t row) {
    int64_t p = positions ? int64_t(positions[row]) : row % seq;
    std::vector<double> own;
    const double *cosines, *sines;
    if (table) {
      cosines = cosTable.data() + p * half;
      sines = sinTable.data() + p * half;
    } else {
      own.resize(2 * half);
      angles(p, own.data(), own.data() + half);
      cosines = own.data();
      sines = own.data() + half;
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
  parallelFor(rows, rows * (width + (table ? 0 : half * kTranscendentalCost)),
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

//===-- Elementwise -------------------------------------------------------===//

// SwiGLU over rows of `cols` outputs whose gate and up rows are `stride`
// apart (stride = cols: separate tensors seen as one row; 2·cols: packed
// [gate | up] rows, up at +cols).
template <typename T>
void swigluRows(const T *gate, const T *up, int64_t rows, int64_t cols,
                int64_t stride, T *y) {
  auto block = [&](int64_t i0, int64_t i1) {
    forRowStretches(i0, i1, cols, [&](int64_t i, int64_t len) {
      int64_t at = i / cols * stride + i % cols;
      const T *g = gate + at, *u = up + at;
      T *out = y + i;
      if constexpr (std::is_same_v<T, float>)
        swigluLoop(g, u, len, out);
      else
        for (int64_t k = 0; k < len; ++k)
          out[k] = g[k] * sigmoid(g[k]) * u[k];
    });
  };
  parallelBlocks(rows * cols, kElementBlock, kTranscendentalCost, block);
}

template <typename T>
void swigluRowsBackward(const T *gate, const T *up, const T *dy, int64_t rows,
                        int64_t cols, int64_t stride, T *dgate, T *dup) {
  auto block = [&](int64_t i0, int64_t i1) {
    forRowStretches(i0, i1, cols, [&](int64_t i, int64_t len) {
      int64_t at = i / cols * stride + i % cols;
      const T *g = gate + at, *u = up + at, *d = dy + i;
      T *dg = dgate + at, *du = dup + at;
      if constexpr (std::is_same_v<T, float>) {
        swigluGradLoop(g, u, d, len, dg, du);
      } else {
        for (int64_t k = 0; k < len; ++k) {
          T sg = sigmoid(g[k]);
          du[k] = d[k] * g[k] * sg;
          dg[k] = d[k] * u[k] * sg * (T(1) + g[k] * (T(1) - sg));
        }
      }
    });
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

// GeLU in float (VectorLoops.h) uses 1 + tanh, 1 - tanh^2 and 1 + erf in
// FastMath's tail-accurate forms: computed as 1 + tanh(u) they cancel to 0
// where the true values are below float's resolution near 1 (x < -5 or
// so), and the gradient there is lost (the double kernels need no such
// care).
template <typename T>
void geluForward(const T *x, int64_t n, bool tanhApprox, T *y) {
  const T a = T(kSqrt2OverPi), b = T(0.044715), r = T(kInvSqrt2);
  auto block = [&](int64_t i0, int64_t i1) {
    if constexpr (std::is_same_v<T, float>) {
      geluLoop(x + i0, i1 - i0, tanhApprox, y + i0);
    } else {
      if (tanhApprox)
        for (int64_t i = i0; i < i1; ++i) {
          T v = x[i];
          y[i] = T(0.5) * v * (T(1) + std::tanh(a * (v + b * v * v * v)));
        }
      else
        for (int64_t i = i0; i < i1; ++i) {
          T v = x[i];
          y[i] = T(0.5) * v * (T(1) + std::erf(v * r));
        }
    }
  };
  parallelBlocks(n, kElementBlock, kTranscendentalCost, block);
}

template <typename T>
void geluBackward(const T *x, const T *dy, int64_t n, bool tanhApprox, T *dx) {
  const T a = T(kSqrt2OverPi), b = T(0.044715), r = T(kInvSqrt2),
          density = T(kInvSqrt2Pi);
  auto block = [&](int64_t i0, int64_t i1) {
    if constexpr (std::is_same_v<T, float>) {
      geluGradLoop(x + i0, dy + i0, i1 - i0, tanhApprox, dx + i0);
    } else {
      if (tanhApprox)
        for (int64_t i = i0; i < i1; ++i) {
          T v = x[i];
          T t = std::tanh(a * (v + b * v * v * v));
          T du = a * (T(1) + T(3) * b * v * v);
          dx[i] = dy[i] *
                  (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
        }
      else
        for (int64_t i = i0; i < i1; ++i) {
          T v = x[i];
          dx[i] = dy[i] * (T(0.5) * (T(1) + std::erf(v * r)) +
                           v * density * std::exp(T(-0.5) * v * v));
        }
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

template <typename T>
void addForward(const T *a, const T *b, int64_t n, T *y) {
  parallelBlocks(n, kElementBlock, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      y[i] = a[i] + b[i];
  });
}

void zeroFill(void *p, int64_t bytes) {
  char *at = static_cast<char *>(p);
#if defined(__x86_64__)
  if (bytes > kStreamingZeroBytes) {
    // The 16-byte-aligned middle by SSE2's streaming stores (every x86-64
    // has them; wider ones do not move memory faster), the ends by memset.
    int64_t head = (16 - int64_t(reinterpret_cast<uintptr_t>(at) & 15)) & 15;
    std::memset(at, 0, size_t(head));
    int64_t vectors = (bytes - head) / 16;
    char *middle = at + head;
    parallelBlocks(vectors, kElementBlock * 4, 1, [&](int64_t v0, int64_t v1) {
      const __m128i zero = _mm_setzero_si128();
      for (int64_t v = v0; v < v1; ++v)
        _mm_stream_si128(reinterpret_cast<__m128i *>(middle) + v, zero);
    });
    _mm_sfence(); // the stores are weakly ordered: done before the next kernel
    int64_t done = head + vectors * 16;
    std::memset(at + done, 0, size_t(bytes - done));
    return;
  }
#endif
  std::memset(at, 0, size_t(bytes));
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
    double m, sum = 0;
    if constexpr (std::is_same_v<T, float>) {
      float rowMax;
      maxAndSumExp(row, vocab, rowMax, sum);
      m = rowMax;
    } else {
      m = *std::max_element(row, row + vocab);
      for (int64_t c = 0; c < vocab; ++c)
        sum += std::exp(row[c] - m);
    }
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
    softmaxTimes(logits + r * vocab, vocab, lse[r], scale, g);
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
  template void rmsNormStats<T>(const T *, int64_t, int64_t, double, T *);      \
  template void layerNormStats<T>(const T *, int64_t, int64_t, double, T *,    \
                                  T *);                                        \
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
  template void swigluForward<T>(const T *, const T *, int64_t, T *);          \
  template void swigluPackedForward<T>(const T *, int64_t, int64_t, T *);     \
  template void swigluPackedBackward<T>(const T *, const T *, int64_t,        \
                                        int64_t, T *);                        \
  template void swigluBackward<T>(const T *, const T *, const T *, int64_t,    \
                                  T *, T *);                                   \
  template void geluForward<T>(const T *, int64_t, bool, T *);                 \
  template void geluBackward<T>(const T *, const T *, int64_t, bool, T *);     \
  template void scaleForward<T>(const T *, int64_t, double, T *);              \
  template void addForward<T>(const T *, const T *, int64_t, T *);             \
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
