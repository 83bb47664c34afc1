//===- Kernels.cu - CUDA kernels of the `model` ops -----------------------===//
//
// Row-wise kernels (norms, the loss) run one block per row and reduce in
// shared memory; element-wise ones run a grid-stride loop. Everything
// computes in float (the optimizer and the angles of RoPE in double, as the
// CPU kernels do) and rounds once when it stores T.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Kernels.h"

#include "runtime/cpu/Philox.h"
#include "runtime/cuda/DeviceMath.cuh"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace braid::cuda {
namespace {

constexpr int kThreads = 256;
/// Rows of one block of the column sums (rmsNormBackward's dw).
constexpr int64_t kRowsPerColumnBlock = 64;

//===-- Embeddings --------------------------------------------------------===//

/// Rows whose id is outside [vocabStart, vocabStart + localVocab) belong to
/// another rank's slice of the table (vocabulary parallelism): zeros
/// forward, nothing backward. The whole table is the range [0, INT64_MAX).
__device__ bool inSlice(int64_t id, int64_t vocabStart, int64_t localVocab) {
  return id >= vocabStart && id - vocabStart < localVocab;
}

template <typename T>
__global__ void embeddingForwardKernel(const T *table, const int32_t *ids,
                                       int64_t rows, int64_t hidden,
                                       int64_t vocabStart, int64_t localVocab,
                                       T *out) {
  BRAID_GRID_STRIDE(i, rows * hidden) {
    int64_t r = i / hidden, c = i % hidden, id = ids[r];
    out[i] = inSlice(id, vocabStart, localVocab)
                 ? table[(id - vocabStart) * hidden + c]
                 : fromFloat<T>(0.0f);
  }
}

template <typename T>
__global__ void embeddingBackwardKernel(const T *dout, const int32_t *ids,
                                        int64_t rows, int64_t hidden,
                                        int64_t vocabStart, int64_t localVocab,
                                        float *dtable) {
  BRAID_GRID_STRIDE(i, rows * hidden) {
    int64_t r = i / hidden, c = i % hidden, id = ids[r];
    if (inSlice(id, vocabStart, localVocab))
      atomicAdd(dtable + (id - vocabStart) * hidden + c, toFloat(dout[i]));
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
  BRAID_LAUNCH(blocks, kThreads, 0, stream, columnSumsKernel<Term>)(
      term, rows, cols, sums);
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

/// Row `row`'s position: its place in the sequence, or positions[row]
/// (ROPE_AT) when given.
__device__ __forceinline__ int64_t ropePosition(int64_t row, int64_t seq,
                                                const int32_t *positions) {
  return positions ? int64_t(positions[row]) : row % seq;
}

/// One thread per (row, frequency k): the angle (in double, as the CPU's)
/// once, then the pair (k, k + half) of every head. A warp's lanes take
/// consecutive k, so each head's loads and stores are contiguous.
template <typename T>
__global__ void ropeKernel(const T *x, int64_t rows, int64_t seq, int64_t heads,
                           int64_t headDim, double theta, double sign,
                           const int32_t *positions, T *y) {
  const int64_t half = headDim / 2;
  BRAID_GRID_STRIDE(i, rows * half) {
    const int64_t k = i % half, row = i / half;
    const double angle = double(ropePosition(row, seq, positions)) *
                         pow(theta, -2.0 * double(k) / double(headDim));
    double sd, cd;
    sincos(angle, &sd, &cd);
    const float s = float(sd * sign), c = float(cd);
    const int64_t base = row * heads * headDim + k;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = base + h * headDim;
      const float x1 = toFloat(x[at]), x2 = toFloat(x[at + half]);
      y[at] = fromFloat<T>(x1 * c - x2 * s);
      y[at + half] = fromFloat<T>(x2 * c + x1 * s);
    }
  }
}

//===-- Elementwise -------------------------------------------------------===//

__device__ __forceinline__ float sigmoid(float g) {
  return 1.0f / (1.0f + expf(-g));
}

/// SwiGLU of one element, silu(g)·u, rounded to T.
template <typename T> __device__ __forceinline__ T swigluOf(float g, float u) {
  return fromFloat<T>(g * sigmoid(g) * u);
}

/// Its gradients from dy = d: dgate and dup, rounded to T.
template <typename T>
__device__ __forceinline__ void swigluGradOf(float g, float u, float d,
                                             T &dgate, T &dup) {
  const float sg = sigmoid(g);
  dup = fromFloat<T>(d * g * sg);
  dgate = fromFloat<T>(d * u * sg * (1.0f + g * (1.0f - sg)));
}

/// 16 bytes of T (16 / sizeof(T) elements) in registers, loaded and stored
/// at once (the address 16-byte aligned).
template <typename T> struct Vector16 {
  static constexpr int kSize = 16 / sizeof(T);
  T e[kSize];
  __device__ static Vector16 load(const T *p) {
    Vector16 v;
    const uint4 raw = *reinterpret_cast<const uint4 *>(p);
    memcpy(v.e, &raw, sizeof(raw));
    return v;
  }
  __device__ void store(T *p) const {
    uint4 raw;
    memcpy(&raw, e, sizeof(raw));
    *reinterpret_cast<uint4 *>(p) = raw;
  }
};

/// SwiGLU over `rows` rows of `cols` outputs whose gate and up rows are
/// `stride` apart (swigluPacked: stride 2·cols, up at gate + cols); y and
/// dy are [rows, cols]. Blocks of threads take consecutive columns
/// (blockIdx.x) of the rows blockIdx.y, blockIdx.y + gridDim.y, ...: no
/// index divides.
template <typename T>
__global__ void swigluRowsForwardKernel(const T *gate, const T *up,
                                        int64_t rows, int64_t cols,
                                        int64_t stride, T *y) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t at = r * stride + c;
    y[r * cols + c] = swigluOf<T>(toFloat(gate[at]), toFloat(up[at]));
  }
}

template <typename T>
__global__ void
swigluRowsBackwardKernel(const T *gate, const T *up, const T *dy, int64_t rows,
                         int64_t cols, int64_t stride, T *dgate, T *dup) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols)
    return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t at = r * stride + c;
    swigluGradOf(toFloat(gate[at]), toFloat(up[at]), toFloat(dy[r * cols + c]),
                 dgate[at], dup[at]);
  }
}

/// The grid of the row kernels above: the columns' blocks, and rows up to
/// the grid's limit of 65535 along y.
dim3 rowsGrid(int64_t rows, int64_t cols) {
  return dim3(unsigned((cols + kThreads - 1) / kThreads),
              unsigned(std::min<int64_t>(rows, 65535)));
}

/// The packed row kernels 16 bytes at a time (V = Vector16<T>'s size; f a
/// multiple of V, x, dy and the outputs 16-byte aligned): thread
/// blockIdx.x · blockDim.x + threadIdx.x takes columns [V c, V c + V) of
/// rows blockIdx.y, blockIdx.y + gridDim.y, ...
template <typename T>
__global__ void swigluPackedForwardVectorsKernel(const T *x, int64_t rows,
                                                 int64_t f, T *y) {
  constexpr int V = Vector16<T>::kSize;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= f / V)
    return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T *gate = x + r * 2 * f + c * V;
    const Vector16<T> gv = Vector16<T>::load(gate),
                      uv = Vector16<T>::load(gate + f);
    Vector16<T> yv;
#pragma unroll
    for (int k = 0; k < V; ++k)
      yv.e[k] = swigluOf<T>(toFloat(gv.e[k]), toFloat(uv.e[k]));
    yv.store(y + r * f + c * V);
  }
}

template <typename T>
__global__ void swigluPackedBackwardVectorsKernel(const T *x, const T *dy,
                                                  int64_t rows, int64_t f,
                                                  T *dx) {
  constexpr int V = Vector16<T>::kSize;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= f / V)
    return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t at = r * 2 * f + c * V;
    const Vector16<T> gv = Vector16<T>::load(x + at),
                      uv = Vector16<T>::load(x + at + f),
                      dv = Vector16<T>::load(dy + r * f + c * V);
    Vector16<T> dg, du;
#pragma unroll
    for (int k = 0; k < V; ++k)
      swigluGradOf(toFloat(gv.e[k]), toFloat(uv.e[k]), toFloat(dv.e[k]),
                   dg.e[k], du.e[k]);
    dg.store(dx + at);
    du.store(dx + at + f);
  }
}

/// The grid of the packed vector kernels: the row's vectors in blocks, and
/// up to 4096 rows at a time (a thread takes several rows).
dim3 packedVectorsGrid(int64_t rows, int64_t vectors) {
  return dim3(unsigned((vectors + kThreads - 1) / kThreads),
              unsigned(std::min<int64_t>(rows, 4096)));
}

/// Elementwise SwiGLU of n contiguous elements.
template <typename T>
__global__ void swigluForwardKernel(const T *gate, const T *up, int64_t n,
                                    T *y) {
  BRAID_GRID_STRIDE(i, n) {
    y[i] = swigluOf<T>(toFloat(gate[i]), toFloat(up[i]));
  }
}

template <typename T>
__global__ void swigluBackwardKernel(const T *gate, const T *up, const T *dy,
                                     int64_t n, T *dgate, T *dup) {
  BRAID_GRID_STRIDE(i, n) {
    swigluGradOf(toFloat(gate[i]), toFloat(up[i]), toFloat(dy[i]), dgate[i],
                 dup[i]);
  }
}

/// addKernel 16 bytes at a time (a, b and y 16-byte aligned): `vectors`
/// of Vector16<T>.
template <typename T>
__global__ void addVectorsKernel(const T *a, const T *b, int64_t vectors,
                                 T *y) {
  constexpr int V = Vector16<T>::kSize;
  BRAID_GRID_STRIDE(i, vectors) {
    const Vector16<T> av = Vector16<T>::load(a + i * V),
                      bv = Vector16<T>::load(b + i * V);
    Vector16<T> yv;
#pragma unroll
    for (int k = 0; k < V; ++k)
      yv.e[k] = fromFloat<T>(toFloat(av.e[k]) + toFloat(bv.e[k]));
    yv.store(y + i * V);
  }
}

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// swigluForwardKernel and swigluBackwardKernel 16 bytes at a time (every
/// operand 16-byte aligned): `vectors` of Vector16<T>.
template <typename T>
__global__ void swigluForwardVectorsKernel(const T *gate, const T *up,
                                           int64_t vectors, T *y) {
  constexpr int V = Vector16<T>::kSize;
  BRAID_GRID_STRIDE(i, vectors) {
    const Vector16<T> gv = Vector16<T>::load(gate + i * V),
                      uv = Vector16<T>::load(up + i * V);
    Vector16<T> yv;
#pragma unroll
    for (int k = 0; k < V; ++k)
      yv.e[k] = swigluOf<T>(toFloat(gv.e[k]), toFloat(uv.e[k]));
    yv.store(y + i * V);
  }
}

template <typename T>
__global__ void swigluBackwardVectorsKernel(const T *gate, const T *up,
                                            const T *dy, int64_t vectors,
                                            T *dgate, T *dup) {
  constexpr int V = Vector16<T>::kSize;
  BRAID_GRID_STRIDE(i, vectors) {
    const Vector16<T> gv = Vector16<T>::load(gate + i * V),
                      uv = Vector16<T>::load(up + i * V),
                      dv = Vector16<T>::load(dy + i * V);
    Vector16<T> dg, du;
#pragma unroll
    for (int k = 0; k < V; ++k)
      swigluGradOf(toFloat(gv.e[k]), toFloat(uv.e[k]), toFloat(dv.e[k]),
                   dg.e[k], du.e[k]);
    dg.store(dgate + i * V);
    du.store(dup + i * V);
  }
}

/// The elements of n that 16-byte vectors cover when every pointer is
/// 16-byte aligned (the vector kernels take them; the others the element
/// kernels), else 0.
template <typename T>
int64_t vectorElements(int64_t n, std::initializer_list<const void *> ptrs) {
  for (const void *p : ptrs)
    if (!aligned16(p))
      return 0;
  return n / Vector16<T>::kSize * Vector16<T>::kSize;
}

/// rmsNormForwardKernel and rmsNormInputGradKernel 16 bytes at a time (d a
/// multiple of Vector16<T>'s size, every row 16-byte aligned). dx may be dy
/// or x: each thread reads its vectors before writing them.
template <typename T>
__global__ void rmsNormForwardVectorsKernel(const T *x, const T *w, int64_t d,
                                            float eps, T *y, float *rstd) {
  constexpr int V = Vector16<T>::kSize;
  __shared__ float shared[32];
  const int64_t r = blockIdx.x, vectors = d / V;
  const T *xr = x + r * d;
  float sum = 0;
  for (int64_t c = threadIdx.x; c < vectors; c += blockDim.x) {
    const Vector16<T> xv = Vector16<T>::load(xr + c * V);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float v = toFloat(xv.e[k]);
      sum += v * v;
    }
  }
  sum = blockSum(sum, shared);
  const float inv = 1.0f / sqrtf(sum / float(d) + eps);
  if (threadIdx.x == 0)
    rstd[r] = inv;
  for (int64_t c = threadIdx.x; c < vectors; c += blockDim.x) {
    const Vector16<T> xv = Vector16<T>::load(xr + c * V),
                      wv = Vector16<T>::load(w + c * V);
    Vector16<T> yv;
#pragma unroll
    for (int k = 0; k < V; ++k)
      yv.e[k] = fromFloat<T>(toFloat(xv.e[k]) * inv * toFloat(wv.e[k]));
    yv.store(y + r * d + c * V);
  }
}

template <typename T>
__global__ void rmsNormInputGradVectorsKernel(const T *x, const T *w,
                                              const float *rstd, const T *dy,
                                              int64_t d, T *dx) {
  constexpr int V = Vector16<T>::kSize;
  __shared__ float shared[32];
  const int64_t r = blockIdx.x, vectors = d / V;
  const T *xr = x + r * d, *gr = dy + r * d;
  float dot = 0;
  for (int64_t c = threadIdx.x; c < vectors; c += blockDim.x) {
    const Vector16<T> xv = Vector16<T>::load(xr + c * V),
                      wv = Vector16<T>::load(w + c * V),
                      gv = Vector16<T>::load(gr + c * V);
#pragma unroll
    for (int k = 0; k < V; ++k)
      dot += toFloat(xv.e[k]) * toFloat(wv.e[k]) * toFloat(gv.e[k]);
  }
  dot = blockSum(dot, shared);
  const float inv = rstd[r];
  const float k3 = inv * inv * inv * dot / float(d);
  for (int64_t c = threadIdx.x; c < vectors; c += blockDim.x) {
    const Vector16<T> xv = Vector16<T>::load(xr + c * V),
                      wv = Vector16<T>::load(w + c * V),
                      gv = Vector16<T>::load(gr + c * V);
    Vector16<T> out;
#pragma unroll
    for (int k = 0; k < V; ++k)
      out.e[k] = fromFloat<T>(inv * toFloat(wv.e[k]) * toFloat(gv.e[k]) -
                              toFloat(xv.e[k]) * k3);
    out.store(dx + r * d + c * V);
  }
}

/// RMSNorm's backward in one pass over x and dy: a warp per row (rows
/// blockIdx.x · warps + warp, then a grid's warps further), each lane
/// kPerLane of its 16-byte vectors (lane, lane + 32, ...) held in registers
/// from the dot product to dx, so that x and dy are read once; the weight
/// gradient's terms dy·x·rstd summed over the warp's rows in registers,
/// then over the block's warps in shared memory (`d` floats, dynamic), then
/// added to dw atomically, one add per column and block. No barrier
/// between rows: a multiprocessor has as many rows in flight as warps. dx
/// may be dy or x: each lane writes only what it read.
template <typename T, int kPerLane>
__global__ void rmsNormBackwardRowsKernel(const T *x, const T *w,
                                          const float *rstd, const T *dy,
                                          int64_t rows, int64_t d, T *dx,
                                          float *dw) {
  constexpr int V = Vector16<T>::kSize;
  BRAID_DYNAMIC_SHARED(float, columnSums);
  const int lane = int(threadIdx.x % 32), warps = int(blockDim.x / 32);
  const int64_t vectors = d / V;
  float acc[kPerLane][V];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
#pragma unroll
    for (int e = 0; e < V; ++e)
      acc[j][e] = 0.0f;
  for (int64_t r = int64_t(blockIdx.x) * warps + threadIdx.x / 32; r < rows;
       r += int64_t(gridDim.x) * warps) {
    const T *xr = x + r * d, *gr = dy + r * d;
    Vector16<T> xv[kPerLane], gv[kPerLane];
    float dot = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t c = lane + 32 * j;
      if (c < vectors) {
        xv[j] = Vector16<T>::load(xr + c * V);
        gv[j] = Vector16<T>::load(gr + c * V);
        const Vector16<T> wv = Vector16<T>::load(w + c * V);
#pragma unroll
        for (int e = 0; e < V; ++e)
          dot += toFloat(xv[j].e[e]) * toFloat(wv.e[e]) * toFloat(gv[j].e[e]);
      }
    }
    dot = warpSum(dot);
    const float inv = rstd[r];
    const float k3 = inv * inv * inv * dot / float(d);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t c = lane + 32 * j;
      if (c >= vectors)
        continue;
      const Vector16<T> wv = Vector16<T>::load(w + c * V);
      Vector16<T> out;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float xf = toFloat(xv[j].e[e]), gf = toFloat(gv[j].e[e]);
        out.e[e] = fromFloat<T>(inv * toFloat(wv.e[e]) * gf - xf * k3);
        acc[j][e] += gf * xf * inv;
      }
      out.store(dx + r * d + c * V);
    }
  }
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    columnSums[c] = 0.0f;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t c = lane + 32 * j;
    if (c < vectors)
#pragma unroll
      for (int e = 0; e < V; ++e)
        atomicAdd(columnSums + c * V + e, acc[j][e]);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    atomicAdd(dw + c, columnSums[c]);
}

/// Whether rows of d elements at these (row-0) addresses run 16 bytes at a
/// time: d a multiple of Vector16<T>'s size, so that every row (and a
/// packed row's second half) is as aligned as the first.
template <typename T>
bool rowVectors(int64_t d, std::initializer_list<const void *> ptrs) {
  return d % Vector16<T>::kSize == 0 && vectorElements<T>(d, ptrs) == d;
}

//===-- Bias --------------------------------------------------------------===//

/// fillRandomHalves: splitmix64 of (seed, i), its top 24 bits as a float
/// in [-1, 1), rounded to bf16 (the upper half of the float's bits; a
/// magnitude below 1 keeps the fp16 reading's exponent below 16).
__global__ void fillRandomHalvesKernel(uint16_t *dst, int64_t n,
                                       uint64_t seed) {
  BRAID_GRID_STRIDE(i, n) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + uint64_t(i) + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = float(z >> 40) * 0x1.0p-23f - 1.0f;
    uint32_t bits;
    memcpy(&bits, &u, sizeof(bits));
    dst[i] = uint16_t(bits >> 16);
  }
}

template <typename T>
__global__ void scaleVectorKernel(const T *x, float scale, int64_t n, T *y) {
  BRAID_GRID_STRIDE(i, n) { y[i] = fromFloat<T>(toFloat(x[i]) * scale); }
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
                                           int64_t vocab, int64_t vocabStart,
                                           int64_t ignoreIndex,
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
    g[c] = fromFloat<T>(c + vocabStart == t ? p - scale : p);
  }
}

/// The vocabulary-parallel loss (runtime/cpu/VocabParallel.h), one block
/// per row of this rank's columns.
template <typename T>
__global__ void crossEntropyRowMaxKernel(const T *logits, int64_t vocab,
                                         T *rowMax) {
  __shared__ float shared[32];
  const T *row = logits + int64_t(blockIdx.x) * vocab;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
    m = fmaxf(m, toFloat(row[c]));
  m = blockMax(m, shared);
  if (threadIdx.x == 0)
    rowMax[blockIdx.x] = fromFloat<T>(m); // one of the row's values: exact
}

template <typename T>
__global__ void crossEntropyPartialKernel(const T *logits,
                                          const int32_t *targets,
                                          const T *globalMax, int64_t vocab,
                                          int64_t vocabStart,
                                          int64_t ignoreIndex, float *partial) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x, t = targets[r];
  if (t == ignoreIndex) {
    if (threadIdx.x == 0)
      partial[2 * r] = partial[2 * r + 1] = 0.0f;
    return;
  }
  const T *row = logits + r * vocab;
  const float m = toFloat(globalMax[r]);
  float sum = 0;
  for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x)
    sum += expf(toFloat(row[c]) - m);
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0) {
    partial[2 * r] = sum;
    partial[2 * r + 1] =
        inSlice(t, vocabStart, vocab) ? toFloat(row[t - vocabStart]) : 0.0f;
  }
}

template <typename T>
__global__ void crossEntropyFinishKernel(const float *summed,
                                         const T *globalMax,
                                         const int32_t *targets, int64_t rows,
                                         int64_t ignoreIndex, float *lse,
                                         float *terms) {
  BRAID_GRID_STRIDE(r, rows) {
    const float m = toFloat(globalMax[r]);
    if (targets[r] == ignoreIndex) {
      lse[r] = m; // the partials are 0 here: no log(0)
      terms[r] = 0.0f;
    } else {
      float l = m + logf(summed[2 * r]);
      lse[r] = l;
      terms[r] = l - summed[2 * r + 1];
    }
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

/// AdamW's step constants for one tensor.
struct AdamWStep {
  double lr, beta1, beta2, eps, weightDecay, correction1, sqrtCorrection2;
};

/// The hyper-parameters, with the learning rate and the step's bias
/// corrections from the device's lr[0] and step[0].
struct AdamWConfig {
  double beta1, beta2, eps, weightDecay;
};
__device__ __forceinline__ AdamWStep adamwStepOf(const AdamWConfig &c,
                                                 const float *lr,
                                                 const int64_t *step) {
  const double t = double(step[0]);
  return AdamWStep{double(lr[0]),
                   c.beta1,
                   c.beta2,
                   c.eps,
                   c.weightDecay,
                   1 - pow(c.beta1, t),
                   sqrt(1 - pow(c.beta2, t))};
}

/// The arithmetic of an update: double for fp32 plans (the mode that checks
/// against the CPU, whose update is in double), float for mixed precision
/// (its masters are float; double's division and square root would make
/// the update, a memory-bound kernel, wait on arithmetic).
template <typename T> struct AdamWReal {
  using type = float;
};
template <> struct AdamWReal<float> {
  using type = double;
};

/// An update's constants in R.
template <typename R> struct AdamWConstants {
  R decay, beta1, oneMinusBeta1, beta2, oneMinusBeta2, stepSize,
      sqrtCorrection2, eps;
  __device__ explicit AdamWConstants(const AdamWStep &a)
      : decay(R(a.lr * a.weightDecay)), beta1(R(a.beta1)),
        oneMinusBeta1(R(1 - a.beta1)), beta2(R(a.beta2)),
        oneMinusBeta2(R(1 - a.beta2)), stepSize(R(a.lr / a.correction1)),
        sqrtCorrection2(R(a.sqrtCorrection2)), eps(R(a.eps)) {}
};

/// One element's AdamW step in R: p, m and v updated from the gradient g
/// (already scaled).
template <typename R>
__device__ __forceinline__ void adamwOf(float &param, R g, float &m, float &v,
                                        const AdamWConstants<R> &a) {
  R p = param;
  p -= a.decay * p;
  const R mi = a.beta1 * R(m) + a.oneMinusBeta1 * g;
  const R vi = a.beta2 * R(v) + a.oneMinusBeta2 * g * g;
  p -= a.stepSize * mi / (sqrt(vi) / a.sqrtCorrection2 + a.eps);
  m = float(mi);
  v = float(vi);
  param = float(p);
}

template <typename T>
__global__ void adamwKernel(float *param, const float *grad, float *m, float *v,
                            int64_t n, AdamWConfig c, const float *lr,
                            const int64_t *step, const float *gradScale,
                            T *copy) {
  using R = typename AdamWReal<T>::type;
  const R scale = R(gradScale[0]);
  // A non-finite norm (gradClip's NaN scale) skips the step, as Megatron
  // does: nothing is updated.
  if (!isfinite(gradScale[0]))
    return;
  const AdamWConstants<R> a(adamwStepOf(c, lr, step));
  BRAID_GRID_STRIDE(i, n) {
    float p = param[i], mi = m[i], vi = v[i];
    adamwOf<R>(p, R(grad[i]) * scale, mi, vi, a);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (copy)
      copy[i] = fromFloat<T>(p);
  }
}

/// adamwKernel 16 bytes (4 floats) of each tensor at a time (param, grad, m
/// and v 16-byte aligned; `vectors` of 4 elements), the copy's 4 elements
/// in one store where it is aligned to them.
template <typename T>
__global__ void adamwVectorsKernel(float *param, const float *grad, float *m,
                                   float *v, int64_t vectors, AdamWConfig c,
                                   const float *lr, const int64_t *step,
                                   const float *gradScale, T *copy,
                                   bool copyVectors) {
  using R = typename AdamWReal<T>::type;
  const R scale = R(gradScale[0]);
  if (!isfinite(gradScale[0]))
    return;
  const AdamWConstants<R> a(adamwStepOf(c, lr, step));
  BRAID_GRID_STRIDE(i, vectors) {
    float4 p = reinterpret_cast<const float4 *>(param)[i],
           g = reinterpret_cast<const float4 *>(grad)[i],
           mi = reinterpret_cast<const float4 *>(m)[i],
           vi = reinterpret_cast<const float4 *>(v)[i];
    adamwOf<R>(p.x, R(g.x) * scale, mi.x, vi.x, a);
    adamwOf<R>(p.y, R(g.y) * scale, mi.y, vi.y, a);
    adamwOf<R>(p.z, R(g.z) * scale, mi.z, vi.z, a);
    adamwOf<R>(p.w, R(g.w) * scale, mi.w, vi.w, a);
    reinterpret_cast<float4 *>(m)[i] = mi;
    reinterpret_cast<float4 *>(v)[i] = vi;
    reinterpret_cast<float4 *>(param)[i] = p;
    if (!copy)
      continue;
    struct alignas(4 * sizeof(T)) Four {
      T x[4];
    };
    Four out{{fromFloat<T>(p.x), fromFloat<T>(p.y), fromFloat<T>(p.z),
              fromFloat<T>(p.w)}};
    if (copyVectors) {
      reinterpret_cast<Four *>(copy)[i] = out;
    } else {
      for (int k = 0; k < 4; ++k)
        copy[4 * i + k] = out.x[k];
    }
  }
}

} // namespace

//===-- Launchers ---------------------------------------------------------===//

template <typename T>
cudaError_t embeddingForward(const T *table, const int32_t *ids, int64_t rows,
                             int64_t hidden, T *out, cudaStream_t stream) {
  return embeddingForwardRange(table, ids, rows, hidden, 0, INT64_MAX, out,
                               stream);
}

template <typename T>
cudaError_t embeddingBackward(const T *dout, const int32_t *ids, int64_t rows,
                              int64_t hidden, float *dtable,
                              cudaStream_t stream) {
  return embeddingBackwardRange(dout, ids, rows, hidden, 0, INT64_MAX, dtable,
                                stream);
}

template <typename T>
cudaError_t embeddingForwardRange(const T *table, const int32_t *ids,
                                  int64_t rows, int64_t hidden,
                                  int64_t vocabStart, int64_t localVocab,
                                  T *out, cudaStream_t stream) {
  if (rows * hidden == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(rows * hidden), kThreads, 0, stream,
               embeddingForwardKernel<T>)(table, ids, rows, hidden, vocabStart,
                                          localVocab, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t embeddingBackwardRange(const T *dout, const int32_t *ids,
                                   int64_t rows, int64_t hidden,
                                   int64_t vocabStart, int64_t localVocab,
                                   float *dtable, cudaStream_t stream) {
  if (rows * hidden == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(rows * hidden), kThreads, 0, stream,
               embeddingBackwardKernel<T>)(dout, ids, rows, hidden, vocabStart,
                                           localVocab, dtable);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rmsNormForward(const T *x, const T *w, int64_t rows, int64_t d,
                           double eps, T *y, float *rstd, cudaStream_t stream) {
  if (rows == 0 || d == 0)
    return cudaSuccess;
  if (rowVectors<T>(d, {x, w, y})) {
    BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream,
                 rmsNormForwardVectorsKernel<T>)(x, w, d, float(eps), y, rstd);
    return cudaGetLastError();
  }
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream, rmsNormForwardKernel<T>)(
      x, w, d, float(eps), y, rstd);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rmsNormBackward(const T *x, const T *w, const float *rstd,
                            const T *dy, int64_t rows, int64_t d, T *dx,
                            float *dw, cudaStream_t stream) {
  if (rows == 0 || d == 0)
    return cudaSuccess;
  // Rows of up to 512 16-byte vectors (4096 bf16 columns) in one pass: a
  // warp per row, 1 to 16 vectors a lane.
  constexpr int V = Vector16<T>::kSize;
  const int64_t vectors = d / V;
  if (rowVectors<T>(d, {x, w, dy, dx}) && vectors <= 16 * 32) {
    const int64_t perLane = (vectors + 31) / 32;
    constexpr int kWarps = kThreads / 32;
    // Up to 256 blocks, some two a multiprocessor (more rows: each warp
    // takes several): dw gets at most 256 float adds per column, which
    // keeps its rounding near the column sums'; the column sums' shared
    // memory d floats.
    const unsigned blocks =
        unsigned(std::min<int64_t>((rows + kWarps - 1) / kWarps, 256));
    const size_t shared = size_t(d) * sizeof(float);
    auto launch = [&](auto kernel) {
      BRAID_LAUNCH(blocks, kThreads, shared, stream, kernel)
      (x, w, rstd, dy, rows, d, dx, dw);
      return cudaGetLastError();
    };
    return perLane <= 1   ? launch(rmsNormBackwardRowsKernel<T, 1>)
           : perLane <= 2 ? launch(rmsNormBackwardRowsKernel<T, 2>)
           : perLane <= 4 ? launch(rmsNormBackwardRowsKernel<T, 4>)
           : perLane <= 8 ? launch(rmsNormBackwardRowsKernel<T, 8>)
                          : launch(rmsNormBackwardRowsKernel<T, 16>);
  }
  // dw first: dx may overwrite dy or x.
  if (cudaError_t e = launchColumnSums(RmsNormWeightTerm<T>{x, rstd, dy, d},
                                       rows, d, dw, stream);
      e != cudaSuccess)
    return e;
  if (rowVectors<T>(d, {x, w, dy, dx})) {
    BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream,
                 rmsNormInputGradVectorsKernel<T>)(x, w, rstd, dy, d, dx);
    return cudaGetLastError();
  }
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream, rmsNormInputGradKernel<T>)(x, w, rstd,
                                                                  dy, d, dx);
  return cudaGetLastError();
}

namespace {

/// ropeKernel 16 bytes at a time: one thread per (row, V consecutive
/// frequencies), V = Vector16<T>'s size (half a multiple of V, x and y
/// 16-byte aligned), the same arithmetic per element.
template <typename T>
__global__ void ropeVectorsKernel(const T *x, int64_t rows, int64_t seq,
                                  int64_t heads, int64_t headDim, double theta,
                                  double sign, const int32_t *positions,
                                  int64_t headsPerThread, T *y) {
  constexpr int V = Vector16<T>::kSize;
  const int64_t half = headDim / 2, groups = half / V;
  const int64_t chunks = (heads + headsPerThread - 1) / headsPerThread;
  BRAID_GRID_STRIDE(i, rows * chunks * groups) {
    const int64_t k0 = i % groups * V, chunk = i / groups % chunks,
                  row = i / groups / chunks;
    const double position = double(ropePosition(row, seq, positions));
    float s[V], c[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const double angle =
          position * pow(theta, -2.0 * double(k0 + k) / double(headDim));
      double sd, cd;
      sincos(angle, &sd, &cd);
      s[k] = float(sd * sign);
      c[k] = float(cd);
    }
    const int64_t base = row * heads * headDim + k0,
                  h1 = (chunk + 1) * headsPerThread < heads
                           ? (chunk + 1) * headsPerThread
                           : heads;
    for (int64_t h = chunk * headsPerThread; h < h1; ++h) {
      const int64_t at = base + h * headDim;
      const Vector16<T> v1 = Vector16<T>::load(x + at),
                        v2 = Vector16<T>::load(x + at + half);
      Vector16<T> y1, y2;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float x1 = toFloat(v1.e[k]), x2 = toFloat(v2.e[k]);
        y1.e[k] = fromFloat<T>(x1 * c[k] - x2 * s[k]);
        y2.e[k] = fromFloat<T>(x2 * c[k] + x1 * s[k]);
      }
      y1.store(y + at);
      y2.store(y + at + half);
    }
  }
}

/// Rotates every head of x by angle·sign (sign -1 is the inverse rotation),
/// row (b, s) at position s, or at positions[b · seq + s] when given.
template <typename T>
cudaError_t rotate(const T *x, int64_t batch, int64_t seq, int64_t heads,
                   int64_t headDim, double theta, double sign,
                   const int32_t *positions, T *y, cudaStream_t stream) {
  const int64_t half = headDim / 2, rows = batch * seq;
  if (rows * half == 0 || heads == 0)
    return cudaSuccess;
  constexpr int V = Vector16<T>::kSize;
  if (half % V == 0 && aligned16(x) && aligned16(y)) {
    // A thread per (row, frequencies) rotates every head; with few rows
    // (decode's one per sequence) a thread per head, so that a call is
    // not a handful of threads' loop over the heads (12 us on an H200).
    const int64_t perRow = half / V,
                  headsPerThread = rows * perRow >= 16384 ? heads : 1;
    const int64_t chunks = (heads + headsPerThread - 1) / headsPerThread;
    BRAID_LAUNCH(gridFor(rows * chunks * perRow), kThreads, 0, stream,
                 ropeVectorsKernel<T>)
    (x, rows, seq, heads, headDim, theta, sign, positions, headsPerThread, y);
    return cudaGetLastError();
  }
  BRAID_LAUNCH(gridFor(rows * half), kThreads, 0, stream, ropeKernel<T>)
  (x, rows, seq, heads, headDim, theta, sign, positions, y);
  return cudaGetLastError();
}

} // namespace

template <typename T>
cudaError_t ropeForward(const T *x, int64_t batch, int64_t seq, int64_t heads,
                        int64_t headDim, double theta, T *y,
                        cudaStream_t stream) {
  return rotate(x, batch, seq, heads, headDim, theta, 1.0, nullptr, y, stream);
}

template <typename T>
cudaError_t ropeBackward(const T *dy, int64_t batch, int64_t seq, int64_t heads,
                         int64_t headDim, double theta, T *dx,
                         cudaStream_t stream) {
  return rotate(dy, batch, seq, heads, headDim, theta, -1.0, nullptr, dx,
                stream);
}

template <typename T>
cudaError_t ropeAtForward(const T *x, const int32_t *positions, int64_t batch,
                          int64_t seq, int64_t heads, int64_t headDim,
                          double theta, T *y, cudaStream_t stream) {
  return rotate(x, batch, seq, heads, headDim, theta, 1.0, positions, y,
                stream);
}

template <typename T>
cudaError_t ropeAtBackward(const T *dy, const int32_t *positions, int64_t batch,
                           int64_t seq, int64_t heads, int64_t headDim,
                           double theta, T *dx, cudaStream_t stream) {
  return rotate(dy, batch, seq, heads, headDim, theta, -1.0, positions, dx,
                stream);
}

template <typename T>
cudaError_t swigluForward(const T *gate, const T *up, int64_t n, T *y,
                          cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  const int64_t done = vectorElements<T>(n, {gate, up, y});
  if (done > 0) {
    BRAID_LAUNCH(gridFor(done / Vector16<T>::kSize), kThreads, 0, stream,
                 swigluForwardVectorsKernel<T>)(
        gate, up, done / Vector16<T>::kSize, y);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  if (done == n)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(n - done), kThreads, 0, stream, swigluForwardKernel<T>)(
      gate + done, up + done, n - done, y + done);
  return cudaGetLastError();
}

template <typename T>
cudaError_t swigluBackward(const T *gate, const T *up, const T *dy, int64_t n,
                           T *dgate, T *dup, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  const int64_t done = vectorElements<T>(n, {gate, up, dy, dgate, dup});
  if (done > 0) {
    BRAID_LAUNCH(gridFor(done / Vector16<T>::kSize), kThreads, 0, stream,
                 swigluBackwardVectorsKernel<T>)(
        gate, up, dy, done / Vector16<T>::kSize, dgate, dup);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  if (done == n)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(n - done), kThreads, 0, stream, swigluBackwardKernel<T>)(
      gate + done, up + done, dy + done, n - done, dgate + done, dup + done);
  return cudaGetLastError();
}

template <typename T>
cudaError_t scaleVector(const T *x, double scale, int64_t n, T *y,
                        cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(n), kThreads, 0, stream, scaleVectorKernel<T>)(
      x, float(scale), n, y);
  return cudaGetLastError();
}

cudaError_t fillRandomHalves(void *dst, int64_t halves, uint64_t seed,
                             cudaStream_t stream) {
  if (halves == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(halves), kThreads, 0, stream, fillRandomHalvesKernel)
  (static_cast<uint16_t *>(dst), halves, seed);
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
    BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream, crossEntropyRowKernel<T>)(
        logits, targets, vocab, ignoreIndex, lse, terms);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  BRAID_LAUNCH(1, 1024, 0, stream, crossEntropyMeanKernel)(targets, terms, rows,
                                                 ignoreIndex, loss, counted);
  return cudaGetLastError();
}

template <typename T>
cudaError_t crossEntropyBackward(const T *logits, const int32_t *targets,
                                 const float *lse, const float *dloss,
                                 int64_t rows, int64_t vocab,
                                 int64_t ignoreIndex, const int64_t *counted,
                                 T *dlogits, cudaStream_t stream,
                                 int64_t vocabStart) {
  if (rows == 0 || vocab == 0)
    return cudaSuccess;
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream,
               crossEntropyBackwardKernel<T>)(logits, targets, lse, dloss,
                                              vocab, vocabStart, ignoreIndex,
                                              counted, dlogits);
  return cudaGetLastError();
}

template <typename T>
cudaError_t crossEntropyRowMax(const T *logits, int64_t rows, int64_t vocab,
                               T *rowMax, cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream,
               crossEntropyRowMaxKernel<T>)(logits, vocab, rowMax);
  return cudaGetLastError();
}

template <typename T>
cudaError_t crossEntropyPartial(const T *logits, const int32_t *targets,
                                const T *globalMax, int64_t rows,
                                int64_t vocab, int64_t vocabStart,
                                int64_t ignoreIndex, float *partial,
                                cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream,
               crossEntropyPartialKernel<T>)(logits, targets, globalMax, vocab,
                                             vocabStart, ignoreIndex, partial);
  return cudaGetLastError();
}

template <typename T>
cudaError_t crossEntropyFinish(const float *summed, const T *globalMax,
                               const int32_t *targets, int64_t rows,
                               int64_t ignoreIndex, float *lse, float *terms,
                               float *loss, int64_t *counted,
                               cudaStream_t stream) {
  if (rows > 0) {
    BRAID_LAUNCH(gridFor(rows), kThreads, 0, stream,
                 crossEntropyFinishKernel<T>)(summed, globalMax, targets, rows,
                                              ignoreIndex, lse, terms);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  BRAID_LAUNCH(1, 1024, 0, stream, crossEntropyMeanKernel)(
      targets, terms, rows, ignoreIndex, loss, counted);
  return cudaGetLastError();
}

cudaError_t gradSumOfSquares(const float *grad, int64_t n, double *sumSquares,
                             cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  BRAID_LAUNCH(std::min(gridFor(n), 1024u), kThreads, 0, stream, sumOfSquaresKernel)(
      grad, n, sumSquares);
  return cudaGetLastError();
}

template <typename T>
cudaError_t adamwStep(float *param, const float *grad, float *m, float *v,
                      int64_t n, const float *lr, double beta1, double beta2,
                      double eps, double weightDecay, const int64_t *step,
                      const float *gradScale, T *copy, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  if (!lr || !step)
    return cudaErrorInvalidValue;
  const AdamWConfig a{beta1, beta2, eps, weightDecay};
  // 16 bytes at a time where the tensors allow, the rest element by element.
  const int64_t vectors =
      aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v)
          ? n / 4
          : 0;
  if (vectors > 0) {
    const bool copyVectors =
        copy && reinterpret_cast<uintptr_t>(copy) % (4 * sizeof(T)) == 0;
    BRAID_LAUNCH(gridFor(vectors), kThreads, 0, stream, adamwVectorsKernel<T>)
    (param, grad, m, v, vectors, a, lr, step, gradScale, copy, copyVectors);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  const int64_t done = 4 * vectors;
  if (done == n)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(n - done), kThreads, 0, stream, adamwKernel<T>)
  (param + done, grad + done, m + done, v + done, n - done, a, lr, step,
   gradScale, copy ? copy + done : nullptr);
  return cudaGetLastError();
}

//===-- Position embedding, LayerNorm, GeLU, dropout, fused QKV -----------===//

namespace {

template <typename T>
__global__ void positionEmbeddingForwardKernel(const T *table, int64_t seq,
                                               int64_t hidden, int64_t n,
                                               T *out) {
  BRAID_GRID_STRIDE(i, n) { out[i] = table[i % (seq * hidden)]; }
}

template <typename T>
__global__ void positionEmbeddingBackwardKernel(const T *dout, int64_t batch,
                                                int64_t perSample,
                                                float *dtable) {
  BRAID_GRID_STRIDE(i, perSample) {
    float sum = 0;
    for (int64_t b = 0; b < batch; ++b)
      sum += toFloat(dout[b * perSample + i]);
    dtable[i] += sum;
  }
}

/// Row r = (b, s) of [batch, seq] rows: its position, of the sequence's
/// posStride from `offset`.
__device__ __forceinline__ int64_t positionOf(const int32_t *positions,
                                              int64_t r, int64_t seq,
                                              int64_t posStride,
                                              int64_t offset) {
  return positions[r / seq * posStride + offset + r % seq];
}

template <typename T>
__global__ void
positionEmbeddingAtForwardKernel(const T *table, const int32_t *positions,
                                 int64_t rows, int64_t seq, int64_t posStride,
                                 int64_t offset, int64_t hidden, T *out) {
  BRAID_GRID_STRIDE(i, rows * hidden) {
    const int64_t r = i / hidden, c = i % hidden;
    out[i] =
        table[positionOf(positions, r, seq, posStride, offset) * hidden + c];
  }
}

template <typename T>
__global__ void positionEmbeddingAtBackwardKernel(
    const T *dout, const int32_t *positions, int64_t rows, int64_t seq,
    int64_t posStride, int64_t offset, int64_t hidden, float *dtable) {
  BRAID_GRID_STRIDE(i, rows * hidden) {
    const int64_t r = i / hidden, c = i % hidden;
    atomicAdd(dtable +
                  positionOf(positions, r, seq, posStride, offset) * hidden + c,
              toFloat(dout[i]));
  }
}

/// A row's statistics, on every thread of its block: the mean (0 unless
/// `centred`) and 1 / sqrt(mean((x - mean)²) + eps), the variance from the
/// centred values (two passes, as the CPU kernels).
template <typename T>
__device__ void rowStatistics(const T *xr, int64_t d, float eps, bool centred,
                              float *shared, float &mu, float &inv) {
  mu = 0;
  if (centred) {
    float sum = 0;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
      sum += toFloat(xr[c]);
    mu = blockSum(sum, shared) / float(d);
  }
  float squares = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float v = toFloat(xr[c]) - mu;
    squares += v * v;
  }
  inv = 1.0f / sqrtf(blockSum(squares, shared) / float(d) + eps);
}

template <typename T>
__global__ void layerNormForwardKernel(const T *x, const T *w, const T *b,
                                       int64_t d, float eps, T *y, float *mean,
                                       float *rstd) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * d;
  float mu, inv;
  rowStatistics(xr, d, eps, true, shared, mu, inv);
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = inv;
  }
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
    y[r * d + c] = fromFloat<T>((toFloat(xr[c]) - mu) * inv * toFloat(w[c]) +
                                toFloat(b[c]));
}

/// LayerNorm's weight gradient term, dy·x̂.
template <typename T> struct LayerNormWeightTerm {
  const T *x;
  const float *mean, *rstd;
  const T *dy;
  int64_t d;
  __device__ float operator()(int64_t r, int64_t c) const {
    return toFloat(dy[r * d + c]) * (toFloat(x[r * d + c]) - mean[r]) * rstd[r];
  }
};

template <typename T>
__global__ void layerNormInputGradKernel(const T *x, const T *w,
                                         const float *mean, const float *rstd,
                                         const T *dy, int64_t d, T *dx) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * d, *gr = dy + r * d;
  const float mu = mean[r], inv = rstd[r];
  float sumG = 0, sumGX = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float g = toFloat(w[c]) * toFloat(gr[c]);
    sumG += g;
    sumGX += g * (toFloat(xr[c]) - mu) * inv;
  }
  sumG = blockSum(sumG, shared) / float(d);
  sumGX = blockSum(sumGX, shared) / float(d);
  // Each thread reads its own elements before writing them: dx may be dy
  // or x.
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float xhat = (toFloat(xr[c]) - mu) * inv;
    float g = toFloat(w[c]) * toFloat(gr[c]);
    dx[r * d + c] = fromFloat<T>(inv * (g - sumG - xhat * sumGX));
  }
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <typename T>
__global__ void geluForwardKernel(const T *x, int64_t n, bool tanhApprox,
                                  T *y) {
  BRAID_GRID_STRIDE(i, n) {
    float v = toFloat(x[i]);
    // 1 + tanh(u) = 2 sigmoid(2u) and 1 + erf(z) = erfc(-z): neither
    // cancels where the sum is near 0 (v far below 0).
    y[i] = fromFloat<T>(
        tanhApprox
            ? v / (1.0f + expf(-2.0f * kSqrt2OverPi *
                               (v + 0.044715f * v * v * v)))
            : 0.5f * v * erfcf(-v * kInvSqrt2));
  }
}

template <typename T>
__global__ void geluBackwardKernel(const T *x, const T *dy, int64_t n,
                                   bool tanhApprox, T *dx) {
  BRAID_GRID_STRIDE(i, n) {
    float v = toFloat(x[i]), grad;
    if (tanhApprox) {
      // With s = sigmoid(2u) = (1 + tanh u) / 2: 0.5 (1 + t) = s and
      // 1 - t² = 4 s (1 - s), each factor computed without cancelling.
      float u = kSqrt2OverPi * (v + 0.044715f * v * v * v);
      float du = kSqrt2OverPi * (1.0f + 3 * 0.044715f * v * v);
      float s = 1.0f / (1.0f + expf(-2.0f * u));
      float sc = 1.0f / (1.0f + expf(2.0f * u));
      grad = s + 2.0f * v * s * sc * du;
    } else {
      grad = 0.5f * erfcf(-v * kInvSqrt2) +
             v * kInvSqrt2Pi * expf(-0.5f * v * v);
    }
    dx[i] = fromFloat<T>(toFloat(dy[i]) * grad);
  }
}

template <typename T>
__global__ void addKernel(const T *a, const T *b, int64_t n, T *y) {
  BRAID_GRID_STRIDE(i, n) {
    y[i] = fromFloat<T>(toFloat(a[i]) + toFloat(b[i]));
  }
}

template <typename T>
__global__ void dropoutKernel(const T *in, cpu::GlobalIndexing at, double rate,
                              uint32_t op, const CallValues *call, T *out) {
  const float scale = float(1.0 / (1.0 - rate));
  const cpu::DropoutKey key{call->seed, call->step, op};
  at.rowOffset += call->sampleOffset * at.rowsPerSample;
  BRAID_GRID_STRIDE(i, at.rows * at.cols) {
    const int64_t r = i / at.cols, c = i % at.cols;
    const uint64_t global =
        uint64_t(at.rowOffset + r) * uint64_t(at.globalCols) +
        uint64_t(at.colOffset + c);
    out[i] = cpu::dropoutKeepsElement(global, rate, key.seed, key.step, key.op)
                 ? fromFloat<T>(toFloat(in[i]) * scale)
                 : fromFloat<T>(0.0f);
  }
}

/// Where column `col` of a fused QKV row goes: tensor 0/1/2 (q, k, v) and
/// its column there (cpu's forEachQkvColumn, one column at a time).
__device__ __forceinline__ void qkvColumn(const cpu::QkvShape &s, int64_t col,
                                          int *part, int64_t *to) {
  const int64_t d = s.headDim;
  if (s.perHead) {
    const int64_t h = col / (3 * d), within = col % (3 * d);
    *part = int(within / d);
    *to = h * d + within % d;
    return;
  }
  const int64_t qCols = s.heads * d, kvCols = s.kvHeads * d;
  if (col < qCols) {
    *part = 0;
    *to = col;
  } else if (col < qCols + kvCols) {
    *part = 1;
    *to = col - qCols;
  } else {
    *part = 2;
    *to = col - qCols - kvCols;
  }
}

/// Fused row element i ↔ its element of q, k or v: forward copies from the
/// fused row, backward into it.
template <typename T, bool kForward>
__global__ void qkvKernel(cpu::QkvShape s, const T *fusedIn, T *fusedOut,
                          const T *dq, const T *dk, const T *dv, T *q, T *k,
                          T *v) {
  const int64_t qCols = s.heads * s.headDim, kvCols = s.kvHeads * s.headDim;
  const int64_t width = qCols + 2 * kvCols;
  BRAID_GRID_STRIDE(i, s.rows * width) {
    const int64_t r = i / width;
    int part;
    int64_t c;
    qkvColumn(s, i % width, &part, &c);
    const int64_t cols = part == 0 ? qCols : kvCols;
    const int64_t at = r * cols + c;
    if constexpr (kForward) {
      T *out = part == 0 ? q : part == 1 ? k : v;
      out[at] = fusedIn[i];
    } else {
      const T *in = part == 0 ? dq : part == 1 ? dk : dv;
      fusedOut[i] = in[at];
    }
  }
}

} // namespace

template <typename T>
cudaError_t positionEmbeddingForward(const T *table, int64_t batch, int64_t seq,
                                     int64_t hidden, T *out,
                                     cudaStream_t stream) {
  const int64_t n = batch * seq * hidden;
  if (n == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(n), kThreads, 0, stream, positionEmbeddingForwardKernel<T>)(
      table, seq, hidden, n, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t positionEmbeddingBackward(const T *dout, int64_t batch, int64_t seq,
                                      int64_t hidden, float *dtable,
                                      cudaStream_t stream) {
  const int64_t perSample = seq * hidden;
  if (perSample == 0 || batch == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(perSample), kThreads, 0, stream, positionEmbeddingBackwardKernel<T>)(
      dout, batch, perSample, dtable);
  return cudaGetLastError();
}

template <typename T>
cudaError_t positionEmbeddingAtForward(const T *table, const int32_t *positions,
                                       int64_t batch, int64_t seq,
                                       int64_t posStride, int64_t offset,
                                       int64_t hidden, T *out,
                                       cudaStream_t stream) {
  const int64_t rows = batch * seq;
  if (rows * hidden == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(rows * hidden), kThreads, 0, stream,
               positionEmbeddingAtForwardKernel<T>)
  (table, positions, rows, seq, posStride, offset, hidden, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t positionEmbeddingAtBackward(const T *dout, const int32_t *positions,
                                        int64_t batch, int64_t seq,
                                        int64_t posStride, int64_t offset,
                                        int64_t hidden, float *dtable,
                                        cudaStream_t stream) {
  const int64_t rows = batch * seq;
  if (rows * hidden == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(rows * hidden), kThreads, 0, stream,
               positionEmbeddingAtBackwardKernel<T>)
  (dout, positions, rows, seq, posStride, offset, hidden, dtable);
  return cudaGetLastError();
}

template <typename T>
cudaError_t layerNormForward(const T *x, const T *w, const T *b, int64_t rows,
                             int64_t d, double eps, T *y, float *mean,
                             float *rstd, cudaStream_t stream) {
  if (rows == 0 || d == 0)
    return cudaSuccess;
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream, layerNormForwardKernel<T>)(
      x, w, b, d, float(eps), y, mean, rstd);
  return cudaGetLastError();
}

template <typename T>
cudaError_t layerNormBackward(const T *x, const T *w, const float *mean,
                              const float *rstd, const T *dy, int64_t rows,
                              int64_t d, T *dx, float *dw, float *db,
                              cudaStream_t stream) {
  if (rows == 0 || d == 0)
    return cudaSuccess;
  // dw and db first: dx may overwrite dy or x.
  if (cudaError_t e = launchColumnSums(
          LayerNormWeightTerm<T>{x, mean, rstd, dy, d}, rows, d, dw, stream);
      e != cudaSuccess)
    return e;
  if (cudaError_t e =
          launchColumnSums(ElementTerm<T>{dy, d}, rows, d, db, stream);
      e != cudaSuccess)
    return e;
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream, layerNormInputGradKernel<T>)(
      x, w, mean, rstd, dy, d, dx);
  return cudaGetLastError();
}

template <typename T>
cudaError_t swigluPackedForward(const T *x, int64_t rows, int64_t f, T *y,
                                cudaStream_t stream) {
  if (rows * f == 0)
    return cudaSuccess;
  if (rowVectors<T>(f, {x, y})) {
    BRAID_LAUNCH(packedVectorsGrid(rows, f / Vector16<T>::kSize),
                 kThreads, 0, stream, swigluPackedForwardVectorsKernel<T>)(
        x, rows, f, y);
    return cudaGetLastError();
  }
  BRAID_LAUNCH(rowsGrid(rows, f), kThreads, 0, stream, swigluRowsForwardKernel<T>)(
      x, x + f, rows, f, 2 * f, y);
  return cudaGetLastError();
}

template <typename T>
cudaError_t swigluPackedBackward(const T *x, const T *dy, int64_t rows,
                                 int64_t f, T *dx, cudaStream_t stream) {
  if (rows * f == 0)
    return cudaSuccess;
  if (rowVectors<T>(f, {x, dy, dx})) {
    BRAID_LAUNCH(packedVectorsGrid(rows, f / Vector16<T>::kSize),
                 kThreads, 0, stream, swigluPackedBackwardVectorsKernel<T>)(
        x, dy, rows, f, dx);
    return cudaGetLastError();
  }
  BRAID_LAUNCH(rowsGrid(rows, f), kThreads, 0, stream, swigluRowsBackwardKernel<T>)(
      x, x + f, dy, rows, f, 2 * f, dx, dx + f);
  return cudaGetLastError();
}

template <typename T>
cudaError_t geluForward(const T *x, int64_t n, bool tanhApprox, T *y,
                        cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(n), kThreads, 0, stream, geluForwardKernel<T>)(x, n, tanhApprox, y);
  return cudaGetLastError();
}

template <typename T>
cudaError_t geluBackward(const T *x, const T *dy, int64_t n, bool tanhApprox,
                         T *dx, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(n), kThreads, 0, stream, geluBackwardKernel<T>)(x, dy, n, tanhApprox,
                                                          dx);
  return cudaGetLastError();
}

template <typename T>
cudaError_t add(const T *a, const T *b, int64_t n, T *y, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  // Aligned operands: 16-byte vectors, then the elements after the last.
  const int64_t done = vectorElements<T>(n, {a, b, y});
  if (done > 0) {
    const int64_t vectors = done / Vector16<T>::kSize;
    BRAID_LAUNCH(gridFor(vectors), kThreads, 0, stream, addVectorsKernel<T>)(
        a, b, vectors, y);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  if (done == n)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(n - done), kThreads, 0, stream, addKernel<T>)(
      a + done, b + done, n - done, y + done);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dropoutForward(const T *x, const cpu::GlobalIndexing &at,
                           double rate, uint32_t op, const CallValues *call,
                           T *y, cudaStream_t stream) {
  if (!(rate >= 0 && rate < 1) || !call)
    return cudaErrorInvalidValue;
  if (at.rows * at.cols == 0)
    return cudaSuccess;
  BRAID_LAUNCH(gridFor(at.rows * at.cols), kThreads, 0, stream,
               dropoutKernel<T>)
  (x, at, rate, op, call, y);
  return cudaGetLastError();
}

template <typename T>
cudaError_t dropoutBackward(const T *dy, const cpu::GlobalIndexing &at,
                            double rate, uint32_t op, const CallValues *call,
                            T *dx, cudaStream_t stream) {
  // The same mask and scale: dropout is linear in its input.
  return dropoutForward(dy, at, rate, op, call, dx, stream);
}

template <typename T>
cudaError_t qkvSplitForward(const T *qkv, const cpu::QkvShape &s, T *q, T *k,
                            T *v, cudaStream_t stream) {
  const int64_t n = s.rows * (s.heads + 2 * s.kvHeads) * s.headDim;
  if (n == 0)
    return cudaSuccess;
  if (s.perHead && s.heads != s.kvHeads)
    return cudaErrorInvalidValue;
  BRAID_LAUNCH(gridFor(n), kThreads, 0, stream, qkvKernel<T, true>)(
      s, qkv, nullptr, nullptr, nullptr, nullptr, q, k, v);
  return cudaGetLastError();
}

template <typename T>
cudaError_t qkvSplitBackward(const T *dq, const T *dk, const T *dv,
                             const cpu::QkvShape &s, T *dqkv,
                             cudaStream_t stream) {
  const int64_t n = s.rows * (s.heads + 2 * s.kvHeads) * s.headDim;
  if (n == 0)
    return cudaSuccess;
  if (s.perHead && s.heads != s.kvHeads)
    return cudaErrorInvalidValue;
  BRAID_LAUNCH(gridFor(n), kThreads, 0, stream, qkvKernel<T, false>)(
      s, nullptr, dqkv, dq, dk, dv, nullptr, nullptr, nullptr);
  return cudaGetLastError();
}

//===-- Statistics recomputed for backward, clipping ----------------------===//

namespace {

template <typename T>
__global__ void normStatisticsKernel(const T *x, int64_t d, float eps,
                                     float *mean, float *rstd) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  float mu, inv;
  rowStatistics(x + r * d, d, eps, mean != nullptr, shared, mu, inv);
  if (threadIdx.x == 0) {
    rstd[r] = inv;
    if (mean)
      mean[r] = mu;
  }
}

__global__ void gradClipKernel(const double *sumSquares, double maxNorm,
                               const CallValues *call, float *norm,
                               float *scale) {
  const double preScale = call ? call->lossScaleInverse : 1.0;
  const double n = sqrt(sumSquares[0]) * preScale;
  norm[0] = float(n);
  if (!isfinite(n)) {
    scale[0] = NAN;
    return;
  }
  const double coef = maxNorm / (n + 1e-6);
  scale[0] = float(preScale * (maxNorm > 0 && coef < 1 ? coef : 1.0));
}

} // namespace

template <typename T>
cudaError_t rmsNormStatistics(const T *x, int64_t rows, int64_t d, double eps,
                              float *rstd, cudaStream_t stream) {
  if (rows == 0 || d == 0)
    return cudaSuccess;
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream, normStatisticsKernel<T>)(
      x, d, float(eps), nullptr, rstd);
  return cudaGetLastError();
}

template <typename T>
cudaError_t layerNormStatistics(const T *x, int64_t rows, int64_t d, double eps,
                                float *mean, float *rstd, cudaStream_t stream) {
  if (rows == 0 || d == 0)
    return cudaSuccess;
  BRAID_LAUNCH(unsigned(rows), kThreads, 0, stream, normStatisticsKernel<T>)(
      x, d, float(eps), mean, rstd);
  return cudaGetLastError();
}

namespace {
__global__ void countTargetsKernel(const int32_t *targets, int64_t rows,
                                   int64_t ignoreIndex, int64_t *counted) {
  __shared__ double shared[32];
  double count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    count += targets[r] != ignoreIndex;
  count = blockSum(count, shared);
  if (threadIdx.x == 0)
    counted[0] = int64_t(count);
}
} // namespace

cudaError_t countTargets(const int32_t *targets, int64_t rows,
                         int64_t ignoreIndex, int64_t *counted,
                         cudaStream_t stream) {
  BRAID_LAUNCH(1, kThreads, 0, stream, countTargetsKernel)(targets, rows, ignoreIndex,
                                                 counted);
  return cudaGetLastError();
}

namespace {
__global__ void addScaledKernel(const double *part, double share,
                                double *sum) {
  sum[0] += share * part[0];
}
} // namespace

cudaError_t addScaled(const double *part, double share, double *sum,
                      cudaStream_t stream) {
  BRAID_LAUNCH(1, 1, 0, stream, addScaledKernel)(part, share, sum);
  return cudaGetLastError();
}

cudaError_t gradClip(const double *sumSquares, double maxNorm, float *norm,
                     float *scale, const CallValues *call,
                     cudaStream_t stream) {
  BRAID_LAUNCH(1, 1, 0, stream, gradClipKernel)
  (sumSquares, maxNorm, call, norm, scale);
  return cudaGetLastError();
}

namespace {
__global__ void setCallValuesKernel(CallValues *device, CallValues values) {
  *device = values;
}
} // namespace

cudaError_t setCallValues(CallValues *device, const CallValues &values,
                          cudaStream_t stream) {
  if (!device)
    return cudaErrorInvalidValue;
  BRAID_LAUNCH(1, 1, 0, stream, setCallValuesKernel)(device, values);
  return cudaGetLastError();
}

//===-- Products of a few rows --------------------------------------------===//

namespace {

/// y[r, j] = Σ_i x[r, i] · w[j, i] (+ the bias, scaled and rounded to T as
/// scaleVector rounds it) for the rows r < rows <= R: one warp per output
/// j, its lanes 16 bytes of w's row j apart, the float sum of each lane's
/// share then the warp's shuffles. w is read once, as a copy reads it.
template <typename T, int R>
__global__ void fewRowsLinearKernel(const T *x, const T *w, const T *bias,
                                    float biasScale, int rows, int64_t in,
                                    int64_t out, T *y) {
  constexpr int V = Vector16<T>::kSize;
  const int lane = int(threadIdx.x % 32);
  const int64_t j = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (j >= out) // the whole warp alike: no shuffle misses a lane
    return;
  const int64_t vectors = in / V;
  const T *wj = w + j * in;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    acc[r] = 0.0f;
#pragma unroll 4
  for (int64_t c = lane; c < vectors; c += 32) {
    const Vector16<T> wv = Vector16<T>::load(wj + c * V);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < rows) {
        const Vector16<T> xv = Vector16<T>::load(x + r * in + c * V);
#pragma unroll
        for (int k = 0; k < V; ++k)
          acc[r] = fmaf(toFloat(wv.e[k]), toFloat(xv.e[k]), acc[r]);
      }
  }
  float b = 0.0f;
  if (bias)
    b = biasScale == 1.0f ? toFloat(bias[j])
                          : toFloat(fromFloat<T>(toFloat(bias[j]) * biasScale));
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float sum = warpSum(acc[r]);
    if (lane == 0 && r < rows)
      y[r * out + j] = fromFloat<T>(sum + b);
  }
}

template <typename T, int R>
cudaError_t launchFewRowsLinear(const T *x, const T *w, const T *bias,
                                double biasScale, int rows, int64_t in,
                                int64_t out, T *y, cudaStream_t stream) {
  constexpr int kWarps = kThreads / 32;
  BRAID_LAUNCH(unsigned((out + kWarps - 1) / kWarps), kThreads, 0, stream,
               fewRowsLinearKernel<T, R>)
  (x, w, bias, float(biasScale), rows, in, out, y);
  return cudaGetLastError();
}

} // namespace

template <typename T>
bool fewRowsLinearTakes(const T *x, const T *w, const T *bias,
                        const cpu::LinearShape &s) {
  return !std::is_same_v<T, float> && s.transposeW && s.rows >= 1 &&
         s.rows <= kFewRowsLinearMaxRows && s.in % Vector16<T>::kSize == 0 &&
         aligned16(x) && aligned16(w) && (!bias || aligned16(bias));
}

template <typename T>
cudaError_t fewRowsLinear(const T *x, const T *w, const T *bias,
                          const cpu::LinearShape &s, T *y,
                          cudaStream_t stream) {
  if (s.out == 0)
    return cudaSuccess;
  const int rows = int(s.rows);
  if (rows <= 1)
    return launchFewRowsLinear<T, 1>(x, w, bias, s.biasScale, rows, s.in,
                                     s.out, y, stream);
  if (rows <= 2)
    return launchFewRowsLinear<T, 2>(x, w, bias, s.biasScale, rows, s.in,
                                     s.out, y, stream);
  if (rows <= 4)
    return launchFewRowsLinear<T, 4>(x, w, bias, s.biasScale, rows, s.in,
                                     s.out, y, stream);
  return launchFewRowsLinear<T, 8>(x, w, bias, s.biasScale, rows, s.in, s.out,
                                   y, stream);
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
  template cudaError_t ropeAtForward<T>(const T *, const int32_t *, int64_t,   \
                                        int64_t, int64_t, int64_t, double,     \
                                        T *, cudaStream_t);                    \
  template cudaError_t ropeAtBackward<T>(const T *, const int32_t *, int64_t,  \
                                         int64_t, int64_t, int64_t, double,    \
                                         T *, cudaStream_t);                   \
  template cudaError_t swigluForward<T>(const T *, const T *, int64_t, T *,    \
                                        cudaStream_t);                         \
  template cudaError_t swigluBackward<T>(const T *, const T *, const T *,      \
                                         int64_t, T *, T *, cudaStream_t);     \
  template cudaError_t scaleVector<T>(const T *, double, int64_t, T *,         \
                                      cudaStream_t);                           \
  template cudaError_t addColumnSums<T>(const T *, int64_t, int64_t, float *,  \
                                        cudaStream_t);                         \
  template bool fewRowsLinearTakes<T>(const T *, const T *, const T *,         \
                                      const cpu::LinearShape &);               \
  template cudaError_t fewRowsLinear<T>(const T *, const T *, const T *,       \
                                        const cpu::LinearShape &, T *,         \
                                        cudaStream_t);                         \
  template cudaError_t crossEntropyForward<T>(                                 \
      const T *, const int32_t *, int64_t, int64_t, int64_t, float *, float *, \
      float *, int64_t *, cudaStream_t);                                       \
  template cudaError_t crossEntropyBackward<T>(                                \
      const T *, const int32_t *, const float *, const float *, int64_t,       \
      int64_t, int64_t, const int64_t *, T *, cudaStream_t, int64_t);          \
  template cudaError_t embeddingForwardRange<T>(const T *, const int32_t *,    \
                                                int64_t, int64_t, int64_t,     \
                                                int64_t, T *, cudaStream_t);   \
  template cudaError_t embeddingBackwardRange<T>(                              \
      const T *, const int32_t *, int64_t, int64_t, int64_t, int64_t, float *, \
      cudaStream_t);                                                           \
  template cudaError_t crossEntropyRowMax<T>(const T *, int64_t, int64_t, T *, \
                                             cudaStream_t);                    \
  template cudaError_t crossEntropyPartial<T>(                                 \
      const T *, const int32_t *, const T *, int64_t, int64_t, int64_t,        \
      int64_t, float *, cudaStream_t);                                         \
  template cudaError_t crossEntropyFinish<T>(                                  \
      const float *, const T *, const int32_t *, int64_t, int64_t, float *,    \
      float *, float *, int64_t *, cudaStream_t);                              \
  template cudaError_t adamwStep<T>(float *, const float *, float *, float *,  \
                                    int64_t, const float *, double, double,    \
                                    double, double, const int64_t *,           \
                                    const float *, T *, cudaStream_t);         \
  template cudaError_t positionEmbeddingForward<T>(                            \
      const T *, int64_t, int64_t, int64_t, T *, cudaStream_t);                \
  template cudaError_t positionEmbeddingBackward<T>(                           \
      const T *, int64_t, int64_t, int64_t, float *, cudaStream_t);            \
  template cudaError_t positionEmbeddingAtForward<T>(                          \
      const T *, const int32_t *, int64_t, int64_t, int64_t, int64_t, int64_t, \
      T *, cudaStream_t);                                                      \
  template cudaError_t positionEmbeddingAtBackward<T>(                         \
      const T *, const int32_t *, int64_t, int64_t, int64_t, int64_t, int64_t, \
      float *, cudaStream_t);                                                  \
  template cudaError_t layerNormForward<T>(const T *, const T *, const T *,    \
                                           int64_t, int64_t, double, T *,      \
                                           float *, float *, cudaStream_t);    \
  template cudaError_t layerNormBackward<T>(                                   \
      const T *, const T *, const float *, const float *, const T *, int64_t,  \
      int64_t, T *, float *, float *, cudaStream_t);                           \
  template cudaError_t swigluPackedForward<T>(const T *, int64_t, int64_t,     \
                                              T *, cudaStream_t);              \
  template cudaError_t swigluPackedBackward<T>(const T *, const T *, int64_t,  \
                                               int64_t, T *, cudaStream_t);    \
  template cudaError_t geluForward<T>(const T *, int64_t, bool, T *,           \
                                      cudaStream_t);                           \
  template cudaError_t geluBackward<T>(const T *, const T *, int64_t, bool,    \
                                       T *, cudaStream_t);                     \
  template cudaError_t add<T>(const T *, const T *, int64_t, T *,              \
                              cudaStream_t);                                   \
  template cudaError_t dropoutForward<T>(                                      \
      const T *, const cpu::GlobalIndexing &, double, uint32_t,                \
      const CallValues *, T *, cudaStream_t);                                  \
  template cudaError_t dropoutBackward<T>(                                     \
      const T *, const cpu::GlobalIndexing &, double, uint32_t,                \
      const CallValues *, T *, cudaStream_t);                                  \
  template cudaError_t qkvSplitForward<T>(const T *, const cpu::QkvShape &,    \
                                          T *, T *, T *, cudaStream_t);        \
  template cudaError_t rmsNormStatistics<T>(const T *, int64_t, int64_t,       \
                                            double, float *, cudaStream_t);    \
  template cudaError_t layerNormStatistics<T>(                                 \
      const T *, int64_t, int64_t, double, float *, float *, cudaStream_t);    \
  template cudaError_t qkvSplitBackward<T>(const T *, const T *, const T *,    \
                                           const cpu::QkvShape &, T *,         \
                                           cudaStream_t);

BRAID_INSTANTIATE(float)
BRAID_INSTANTIATE(bf16)
BRAID_INSTANTIATE(f16)

} // namespace braid::cuda
