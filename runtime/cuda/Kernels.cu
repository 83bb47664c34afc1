//===- Kernels.cu - CUDA kernels of the `model` ops -----------------------===//
//
// Row-wise kernels (norms, the loss) run one block per row and reduce in
// shared memory; element-wise ones run a grid-stride loop. Everything
// computes in float (the optimizer and the angles of RoPE in double, as the
// CPU kernels do) and rounds once when it stores T.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"

#include "runtime/cuda/DeviceMath.cuh"

#include <algorithm>
#include <cmath>

namespace braid::cuda {
namespace {

constexpr int kThreads = 256;
/// Rows of one block of the column sums (rmsNormBackward's dw).
constexpr int64_t kRowsPerColumnBlock = 64;

/// The sum of `v` over the block, returned to every thread. `shared` holds
/// 32 values; the block's size is a multiple of 32. The same threads add in
/// the same order at every launch, so the result does not vary.
template <typename V> __device__ V blockSum(V v, V *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : V(0);
  if (warp == 0)
    v = warpSum(v);
  if (threadIdx.x == 0)
    shared[0] = v;
  __syncthreads();
  V total = shared[0];
  __syncthreads(); // `shared` may be reused at once
  return total;
}

__device__ float blockMax(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpMax(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : -INFINITY;
  if (warp == 0)
    v = warpMax(v);
  if (threadIdx.x == 0)
    shared[0] = v;
  __syncthreads();
  float total = shared[0];
  __syncthreads();
  return total;
}

/// Blocks for a grid-stride loop over n elements.
unsigned gridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(std::min<int64_t>(std::max<int64_t>(blocks, 1), 1 << 20));
}

#define BRAID_GRID_STRIDE(i, n)                                                \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

//===-- Embeddings --------------------------------------------------------===//

template <typename T>
__global__ void embeddingForwardKernel(const T *table, const int32_t *ids,
                                       int64_t rows, int64_t hidden, T *out) {
  BRAID_GRID_STRIDE(i, rows * hidden) {
    int64_t r = i / hidden, c = i % hidden;
    out[i] = table[int64_t(ids[r]) * hidden + c];
  }
}

template <typename T>
__global__ void embeddingBackwardKernel(const T *dout, const int32_t *ids,
                                        int64_t rows, int64_t hidden,
                                        float *dtable) {
  BRAID_GRID_STRIDE(i, rows * hidden) {
    int64_t r = i / hidden, c = i % hidden;
    atomicAdd(dtable + int64_t(ids[r]) * hidden + c, toFloat(dout[i]));
  }
}

//===-- Normalisation -----------------------------------------------------===//

template <typename T>
__global__ void rmsNormForwardKernel(const T *x, const T *w, int64_t d,
                                     float eps, T *y, float *rstd) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * d;
  float sum = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float v = toFloat(xr[c]);
    sum += v * v;
  }
  sum = blockSum(sum, shared);
  float inv = 1.0f / sqrtf(sum / float(d) + eps);
  if (threadIdx.x == 0)
    rstd[r] = inv;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    y[r * d + c] = fromFloat<T>(toFloat(xr[c]) * inv * toFloat(w[c]));
}

/// sums[c] += Σ_r term(r, c): each block adds up a block of rows for a
/// block of columns (coalesced along the columns), then adds its partial
/// sums atomically.
template <typename Term>
__global__ void columnSumsKernel(Term term, int64_t rows, int64_t cols,
                                 float *sums) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  const int64_t r0 = int64_t(blockIdx.y) * kRowsPerColumnBlock;
  const int64_t r1 =
      rows < r0 + kRowsPerColumnBlock ? rows : r0 + kRowsPerColumnBlock;
  float sum = 0;
  for (int64_t r = r0; r < r1; ++r)
    sum += term(r, c);
  atomicAdd(sums + c, sum);
}

template <typename Term>
cudaError_t launchColumnSums(Term term, int64_t rows, int64_t cols, float *sums,
                             cudaStream_t stream) {
  if (rows * cols == 0)
    return cudaSuccess;
  dim3 blocks(unsigned((cols + kThreads - 1) / kThreads),
              unsigned((rows + kRowsPerColumnBlock - 1) / kRowsPerColumnBlock));
  columnSumsKernel<<<blocks, kThreads, 0, stream>>>(term, rows, cols, sums);
  return cudaGetLastError();
}

/// RMSNorm's weight gradient term, dy·x·rstd.
template <typename T> struct RmsNormWeightTerm {
  const T *x;
  const float *rstd;
  const T *dy;
  int64_t d;
  __device__ float operator()(int64_t r, int64_t c) const {
    return toFloat(dy[r * d + c]) * toFloat(x[r * d + c]) * rstd[r];
  }
};

/// The elements of a matrix.
template <typename T> struct ElementTerm {
  const T *x;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const {
    return toFloat(x[r * cols + c]);
  }
};

template <typename T>
__global__ void rmsNormInputGradKernel(const T *x, const T *w,
                                       const float *rstd, const T *dy,
                                       int64_t d, T *dx) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * d, *gr = dy + r * d;
  float dot = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    dot += toFloat(xr[c]) * toFloat(w[c]) * toFloat(gr[c]);
  dot = blockSum(dot, shared);
  const float inv = rstd[r];
  const float k = inv * inv * inv * dot / float(d);
  // Each thread reads its own elements before writing them: dx may be dy
  // or x.
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float xv = toFloat(xr[c]), g = toFloat(gr[c]);
    dx[r * d + c] = fromFloat<T>(inv * toFloat(w[c]) * g - xv * k);
  }
}

//===-- Position encoding -------------------------------------------------===//

template <typename T>
__global__ void ropeKernel(const T *x, int64_t rows, int64_t seq, int64_t heads,
                           int64_t headDim, double theta, double sign, T *y) {
  const int64_t half = headDim / 2;
  BRAID_GRID_STRIDE(i, rows * heads * half) {
    const int64_t k = i % half, h = (i / half) % heads,
                  row = i / (half * heads);
    const double angle =
        double(row % seq) * pow(theta, -2.0 * double(k) / double(headDim));
    double s, c;
    sincos(angle, &s, &c);
    s *= sign;
    const int64_t base = row * heads * headDim + h * headDim;
    const float x1 = toFloat(x[base + k]), x2 = toFloat(x[base + k + half]);
    y[base + k] = fromFloat<T>(float(x1 * c - x2 * s));
    y[base + k + half] = fromFloat<T>(float(x2 * c + x1 * s));
  }
}

//===-- Elementwise -------------------------------------------------------===//

__device__ __forceinline__ float sigmoid(float g) {
  return 1.0f / (1.0f + expf(-g));
}

template <typename T>
__global__ void swigluForwardKernel(const T *gate, const T *up, int64_t n,
                                    T *y) {
  BRAID_GRID_STRIDE(i, n) {
    float g = toFloat(gate[i]);
    y[i] = fromFloat<T>(g * sigmoid(g) * toFloat(up[i]));
  }
}

template <typename T>
__global__ void swigluBackwardKernel(const T *gate, const T *up, const T *dy,
                                     int64_t n, T *dgate, T *dup) {
  BRAID_GRID_STRIDE(i, n) {
    float g = toFloat(gate[i]), u = toFloat(up[i]), d = toFloat(dy[i]);
    float sg = sigmoid(g);
    dup[i] = fromFloat<T>(d * g * sg);
    dgate[i] = fromFloat<T>(d * u * sg * (1.0f + g * (1.0f - sg)));
  }
}

//===-- Bias --------------------------------------------------------------===//

template <typename T>
__global__ void addBiasKernel(const T *bias, float scale, int64_t rows,
                              int64_t cols, T *y) {
  BRAID_GRID_STRIDE(i, rows * cols) {
    y[i] = fromFloat<T>(toFloat(y[i]) + toFloat(bias[i % cols]) * scale);
  }
}

//===-- Loss --------------------------------------------------------------===//

template <typename T>
__global__ void crossEntropyRowKernel(const T *logits, const int32_t *targets,
                                      int64_t vocab, int64_t ignoreIndex,
                                      float *lse, float *terms) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *row = logits + r * vocab;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
    m = fmaxf(m, toFloat(row[c]));
  m = blockMax(m, shared);
  float sum = 0;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
    sum += expf(toFloat(row[c]) - m);
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0) {
    float l = m + logf(sum);
    lse[r] = l;
    int64_t t = targets[r];
    terms[r] = t == ignoreIndex ? 0.0f : l - toFloat(row[t]);
  }
}

/// One block: the mean of the counted rows' terms.
__global__ void crossEntropyMeanKernel(const int32_t *targets,
                                       const float *terms, int64_t rows,
                                       int64_t ignoreIndex, float *loss,
                                       int64_t *counted) {
  __shared__ double shared[32];
  double sum = 0, count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    if (targets[r] != ignoreIndex) {
      sum += terms[r];
      count += 1;
    }
  sum = blockSum(sum, shared);
  count = blockSum(count, shared);
  if (threadIdx.x == 0) {
    counted[0] = int64_t(count);
    loss[0] = count > 0 ? float(sum / count) : 0.0f;
  }
}

template <typename T>
__global__ void crossEntropyBackwardKernel(const T *logits,
                                           const int32_t *targets,
                                           const float *lse, const float *dloss,
                                           int64_t vocab, int64_t ignoreIndex,
                                           const int64_t *counted, T *dlogits) {
  const int64_t r = blockIdx.x;
  const int64_t t = targets[r];
  const T *row = logits + r * vocab;
  T *g = dlogits + r * vocab;
  if (t == ignoreIndex) {
    for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
      g[c] = fromFloat<T>(0.0f);
    return;
  }
  const float scale = counted[0] > 0 ? dloss[0] / float(counted[0]) : 0.0f;
  const float l = lse[r];
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
    float p = expf(toFloat(row[c]) - l) * scale;
    g[c] = fromFloat<T>(c == t ? p - scale : p);
  }
}

//===-- Optimizer ---------------------------------------------------------===//

__global__ void sumOfSquaresKernel(const float *grad, int64_t n,
                                   double *sumSquares) {
  __shared__ double shared[32];
  double sum = 0;
  BRAID_GRID_STRIDE(i, n) {
    double g = grad[i];
    sum += g * g;
  }
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0)
    atomicAdd(sumSquares, sum);
}

template <typename T>
__global__ void adamwKernel(float *param, const float *grad, float *m, float *v,
                            int64_t n, double lr, double beta1, double beta2,
                            double eps, double weightDecay, double correction1,
                            double sqrtCorrection2, const float *gradScale,
                            T *copy) {
  const double scale = gradScale[0];
  BRAID_GRID_STRIDE(i, n) {
    double p = param[i], g = double(grad[i]) * scale;
    p -= lr * weightDecay * p;
    double mi = beta1 * double(m[i]) + (1 - beta1) * g;
    double vi = beta2 * double(v[i]) + (1 - beta2) * g * g;
    p -= (lr / correction1) * mi / (sqrt(vi) / sqrtCorrection2 + eps);
    m[i] = float(mi);
    v[i] = float(vi);
    param[i] = float(p);
    if (copy)
      copy[i] = fromFloat<T>(float(p));
  }
}

} // namespace

//===-- Launchers ---------------------------------------------------------===//

template <typename T>
cudaError_t embeddingForward(const T *table, const int32_t *ids, int64_t rows,
                             int64_t hidden, T *out, cudaStream_t stream) {
  if (rows * hidden == 0)
    return cudaSuccess;
  embeddingForwardKernel<<<gridFor(rows * hidden), kThreads, 0, stream>>>(
      table, ids, rows, hidden, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t embeddingBackward(const T *dout, const int32_t *ids, int64_t rows,
                              int64_t hidden, float *dtable,
                              cudaStream_t stream) {
  if (rows * hidden == 0)
    return cudaSuccess;
  embeddingBackwardKernel<<<gridFor(rows * hidden), kThreads, 0, stream>>>(
      dout, ids, rows, hidden, dtable);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rmsNormForward(const T *x, const T *w, int64_t rows, int64_t d,
                           double eps, T *y, float *rstd, cudaStream_t stream) {
  if (rows == 0 || d == 0)
    return cudaSuccess;
  rmsNormForwardKernel<<<unsigned(rows), kThreads, 0, stream>>>(
      x, w, d, float(eps), y, rstd);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rmsNormBackward(const T *x, const T *w, const float *rstd,
                            const T *dy, int64_t rows, int64_t d, T *dx,
                            float *dw, cudaStream_t stream) {
  if (rows == 0 || d == 0)
    return cudaSuccess;
  // dw first: dx may overwrite dy or x.
  if (cudaError_t e = launchColumnSums(RmsNormWeightTerm<T>{x, rstd, dy, d},
                                       rows, d, dw, stream);
      e != cudaSuccess)
    return e;
  rmsNormInputGradKernel<<<unsigned(rows), kThreads, 0, stream>>>(x, w, rstd,
                                                                  dy, d, dx);
  return cudaGetLastError();
}

namespace {

/// Rotates every head of x by angle·sign (sign -1 is the inverse rotation).
template <typename T>
cudaError_t rotate(const T *x, int64_t batch, int64_t seq, int64_t heads,
                   int64_t headDim, double theta, double sign, T *y,
                   cudaStream_t stream) {
  int64_t n = batch * seq * heads * (headDim / 2);
  if (n == 0)
    return cudaSuccess;
  ropeKernel<<<gridFor(n), kThreads, 0, stream>>>(x, batch * seq, seq, heads,
                                                  headDim, theta, sign, y);
  return cudaGetLastError();
}

} // namespace

template <typename T>
cudaError_t ropeForward(const T *x, int64_t batch, int64_t seq, int64_t heads,
                        int64_t headDim, double theta, T *y,
                        cudaStream_t stream) {
  return rotate(x, batch, seq, heads, headDim, theta, 1.0, y, stream);
}

template <typename T>
cudaError_t ropeBackward(const T *dy, int64_t batch, int64_t seq, int64_t heads,
                         int64_t headDim, double theta, T *dx,
                         cudaStream_t stream) {
  return rotate(dy, batch, seq, heads, headDim, theta, -1.0, dx, stream);
}

template <typename T>
cudaError_t swigluForward(const T *gate, const T *up, int64_t n, T *y,
                          cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  swigluForwardKernel<<<gridFor(n), kThreads, 0, stream>>>(gate, up, n, y);
  return cudaGetLastError();
}

template <typename T>
cudaError_t swigluBackward(const T *gate, const T *up, const T *dy, int64_t n,
                           T *dgate, T *dup, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  swigluBackwardKernel<<<gridFor(n), kThreads, 0, stream>>>(gate, up, dy, n,
                                                            dgate, dup);
  return cudaGetLastError();
}

template <typename T>
cudaError_t addBias(const T *bias, double scale, int64_t rows, int64_t cols,
                    T *y, cudaStream_t stream) {
  if (rows * cols == 0)
    return cudaSuccess;
  addBiasKernel<<<gridFor(rows * cols), kThreads, 0, stream>>>(
      bias, float(scale), rows, cols, y);
  return cudaGetLastError();
}

template <typename T>
cudaError_t addColumnSums(const T *x, int64_t rows, int64_t cols, float *sums,
                          cudaStream_t stream) {
  return launchColumnSums(ElementTerm<T>{x, cols}, rows, cols, sums, stream);
}

template <typename T>
cudaError_t crossEntropyForward(const T *logits, const int32_t *targets,
                                int64_t rows, int64_t vocab,
                                int64_t ignoreIndex, float *lse, float *terms,
                                float *loss, int64_t *counted,
                                cudaStream_t stream) {
  if (rows > 0 && vocab > 0) {
    crossEntropyRowKernel<<<unsigned(rows), kThreads, 0, stream>>>(
        logits, targets, vocab, ignoreIndex, lse, terms);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  crossEntropyMeanKernel<<<1, 1024, 0, stream>>>(targets, terms, rows,
                                                 ignoreIndex, loss, counted);
  return cudaGetLastError();
}

template <typename T>
cudaError_t crossEntropyBackward(const T *logits, const int32_t *targets,
                                 const float *lse, const float *dloss,
                                 int64_t rows, int64_t vocab,
                                 int64_t ignoreIndex, const int64_t *counted,
                                 T *dlogits, cudaStream_t stream) {
  if (rows == 0 || vocab == 0)
    return cudaSuccess;
  crossEntropyBackwardKernel<<<unsigned(rows), kThreads, 0, stream>>>(
      logits, targets, lse, dloss, vocab, ignoreIndex, counted, dlogits);
  return cudaGetLastError();
}

cudaError_t gradSumOfSquares(const float *grad, int64_t n, double *sumSquares,
                             cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  sumOfSquaresKernel<<<std::min(gridFor(n), 1024u), kThreads, 0, stream>>>(
      grad, n, sumSquares);
  return cudaGetLastError();
}

template <typename T>
cudaError_t adamwStep(float *param, const float *grad, float *m, float *v,
                      int64_t n, double lr, double beta1, double beta2,
                      double eps, double weightDecay, int64_t step,
                      const float *gradScale, T *copy, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  if (step < 1)
    return cudaErrorInvalidValue;
  double correction1 = 1 - std::pow(beta1, double(step));
  double sqrtCorrection2 = std::sqrt(1 - std::pow(beta2, double(step)));
  adamwKernel<T><<<gridFor(n), kThreads, 0, stream>>>(
      param, grad, m, v, n, lr, beta1, beta2, eps, weightDecay, correction1,
      sqrtCorrection2, gradScale, copy);
  return cudaGetLastError();
}

//===-- Instantiations ----------------------------------------------------===//

#define BRAID_INSTANTIATE(T)                                                   \
  template cudaError_t embeddingForward<T>(                                    \
      const T *, const int32_t *, int64_t, int64_t, T *, cudaStream_t);        \
  template cudaError_t embeddingBackward<T>(                                   \
      const T *, const int32_t *, int64_t, int64_t, float *, cudaStream_t);    \
  template cudaError_t rmsNormForward<T>(const T *, const T *, int64_t,        \
                                         int64_t, double, T *, float *,        \
                                         cudaStream_t);                        \
  template cudaError_t rmsNormBackward<T>(const T *, const T *, const float *, \
                                          const T *, int64_t, int64_t, T *,    \
                                          float *, cudaStream_t);              \
  template cudaError_t ropeForward<T>(const T *, int64_t, int64_t, int64_t,    \
                                      int64_t, double, T *, cudaStream_t);     \
  template cudaError_t ropeBackward<T>(const T *, int64_t, int64_t, int64_t,   \
                                       int64_t, double, T *, cudaStream_t);    \
  template cudaError_t swigluForward<T>(const T *, const T *, int64_t, T *,    \
                                        cudaStream_t);                         \
  template cudaError_t swigluBackward<T>(const T *, const T *, const T *,      \
                                         int64_t, T *, T *, cudaStream_t);     \
  template cudaError_t addBias<T>(const T *, double, int64_t, int64_t, T *,    \
                                  cudaStream_t);                               \
  template cudaError_t addColumnSums<T>(const T *, int64_t, int64_t, float *,  \
                                        cudaStream_t);                         \
  template cudaError_t crossEntropyForward<T>(                                 \
      const T *, const int32_t *, int64_t, int64_t, int64_t, float *, float *, \
      float *, int64_t *, cudaStream_t);                                       \
  template cudaError_t crossEntropyBackward<T>(                                \
      const T *, const int32_t *, const float *, const float *, int64_t,       \
      int64_t, int64_t, const int64_t *, T *, cudaStream_t);                   \
  template cudaError_t adamwStep<T>(                                           \
      float *, const float *, float *, float *, int64_t, double, double,       \
      double, double, double, int64_t, const float *, T *, cudaStream_t);

BRAID_INSTANTIATE(float)
BRAID_INSTANTIATE(bf16)

} // namespace braid::cuda
