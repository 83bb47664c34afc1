//===- Attention.cu - Exact attention on CUDA, forward and backward -------===//
//
// One block of 4 warps takes 16 rows (query rows in forward and in dq, key
// rows in dk/dv), 4 per warp, for one (batch, head). The other side (keys
// and values, or queries and output gradients) streams through shared
// memory in tiles of 32 rows, one per lane: lane j computes the dot
// products of its row of the tile with the warp's current row (the tile's
// rows padded to headDim + 1 floats, so the 32 lanes read 32 banks), the
// warp combines the tile's 32 scores with shuffles, and each lane keeps the
// accumulators of the head dimensions lane, lane + 32, ... in registers.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Attention.h"

#include "runtime/cuda/DeviceMath.cuh"

#include <algorithm>
#include <cmath>

namespace braid::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;
constexpr int kTile = 32;
constexpr unsigned kFull = 0xffffffffu;

__host__ __device__ __forceinline__ int64_t lesser(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__host__ __device__ __forceinline__ int64_t greater(int64_t a, int64_t b) {
  return a > b ? a : b;
}

/// AttentionShape on the device.
struct Params {
  int64_t batch, seq, heads, kvHeads, headDim;
  float scale;
  bool causal, alibi;
  int64_t headOffset, kvHeadOffset, allHeads, allKvHeads;
  const int32_t *positions; // packed documents (device), or null

  static Params of(const AttentionShape &s) {
    return {s.batch,      s.seq,          s.heads,      s.kvHeads,
            s.headDim,    float(s.scale), s.causal,     s.alibi,
            s.headOffset, s.kvHeadOffset, s.allHeads(), s.allKvHeads(),
            s.positions};
  }
  /// Query i of sequence b's first key (AttentionShape::firstKey): 0
  /// without documents. i < seq. A position past i reads as 0, so that no
  /// key before the sequence is read.
  __device__ int64_t firstKey(int64_t b, int64_t i) const {
    return positions ? greater(0, i - positions[b * seq + i]) : 0;
  }
  /// The first key tile (of kTile keys) a block of queries from row0 (<
  /// seq) visits: the tile of its first query's first key, the block's
  /// least (the first keys never decrease along a sequence).
  __device__ int64_t firstKeyTile(int64_t b, int64_t row0) const {
    return firstKey(b, row0) / kTile * kTile;
  }
  __device__ int64_t kvHeadOf(int64_t h) const {
    return (headOffset + h) / (allHeads / allKvHeads) - kvHeadOffset;
  }
  /// ALiBi's slope of local head h (cpu::alibiSlopes of the global head);
  /// 0 without ALiBi.
  __device__ float slope(int64_t h) const {
    return alibi ? alibiSlope(allHeads, headOffset + h) : 0.0f;
  }
};

/// Copies rows [row0, row0 + n) of a [seq, stride] matrix at `src` (headDim
/// columns from its start) into `dst` as float, `pitch` floats per row;
/// rows n..kTile-1 become zeros.
template <typename T>
__device__ void loadTile(const T *src, int64_t stride, int64_t row0, int n,
                         int headDim, float *dst, int pitch) {
  for (int idx = threadIdx.x; idx < kTile * headDim; idx += blockDim.x) {
    int r = idx / headDim, c = idx % headDim;
    dst[r * pitch + c] = r < n ? toFloat(src[(row0 + r) * stride + c]) : 0.0f;
  }
}

/// Σ_c a[c] · b[c] over headDim columns.
__device__ __forceinline__ float dot(const float *a, const float *b,
                                     int headDim) {
  float sum = 0;
  for (int c = 0; c < headDim; ++c)
    sum = fmaf(a[c], b[c], sum);
  return sum;
}

/// Writes a row held across the warp (lane holds columns lane, lane + 32,
/// ...) to `row` in shared memory.
template <int C>
__device__ __forceinline__ void stageRow(const float (&values)[C], float *row,
                                         int lane, int hd) {
#pragma unroll
  for (int t = 0; t < C; ++t)
    if (lane + 32 * t < hd)
      row[lane + 32 * t] = values[t];
}

//===-- Forward -----------------------------------------------------------===//

template <typename T, int C>
__global__ void __launch_bounds__(kWarps * 32)
    attentionForwardKernel(const T *q, const T *k, const T *v, Params p, T *out,
                           float *lse) {
  BRAID_DYNAMIC_SHARED(float, smem);
  const int hd = int(p.headDim), pitch = hd + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float *ks = smem;                         // [kTile][pitch]
  float *vs = ks + kTile * pitch;           // [kTile][hd]
  float *row = vs + kTile * hd + warp * hd; // the warp's query row
  const int64_t b = blockIdx.z, h = blockIdx.y, g = p.kvHeadOf(h);
  const int64_t qStride = p.heads * hd, kvStride = p.kvHeads * hd;
  const T *qb = q + b * p.seq * qStride + h * hd;
  const T *kb = k + b * p.seq * kvStride + g * hd;
  const T *vb = v + b * p.seq * kvStride + g * hd;
  const int64_t rowBase = int64_t(blockIdx.x) * kBlockRows;
  const float slope = p.slope(h);

  float qr[kRowsPerWarp][C], acc[kRowsPerWarp][C], m[kRowsPerWarp],
      l[kRowsPerWarp];
  int64_t first[kRowsPerWarp]; // the rows' first keys
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    int64_t i = rowBase + warp * kRowsPerWarp + r;
#pragma unroll
    for (int t = 0; t < C; ++t) {
      int d = lane + 32 * t;
      qr[r][t] = i < p.seq && d < hd ? toFloat(qb[i * qStride + d]) : 0.0f;
      acc[r][t] = 0;
    }
    m[r] = -INFINITY;
    l[r] = 0;
    first[r] = i < p.seq ? p.firstKey(b, i) : 0;
  }
  const int64_t keyEnd = p.causal ? lesser(p.seq, rowBase + kBlockRows) : p.seq;
  // Packed documents: the tiles before the block's first document are
  // skipped.
  for (int64_t j0 = p.firstKeyTile(b, rowBase); j0 < keyEnd; j0 += kTile) {
    const int n = int(lesser(kTile, keyEnd - j0));
    __syncthreads(); // the previous tile is no longer read
    loadTile(kb, kvStride, j0, n, hd, ks, pitch);
    loadTile(vb, kvStride, j0, n, hd, vs, hd);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = rowBase + warp * kRowsPerWarp + r;
      if (i >= p.seq)
        continue; // warp-uniform: the rows past the end
      stageRow(qr[r], row, lane, hd);
      __syncwarp();
      const int64_t j = j0 + lane;
      const bool valid = lane < n && (!p.causal || j <= i) && j >= first[r];
      float score = -INFINITY;
      if (valid)
        score =
            dot(row, ks + lane * pitch, hd) * p.scale - slope * float(i - j);
      const float tileMax = warpMax(score);
      if (tileMax != -INFINITY) { // the same on every lane
        const float mNew = fmaxf(m[r], tileMax);
        const float correction = expf(m[r] - mNew);
        const float pj = valid ? expf(score - mNew) : 0.0f;
        l[r] = l[r] * correction + warpSum(pj);
#pragma unroll
        for (int t = 0; t < C; ++t)
          acc[r][t] *= correction;
        for (int jj = 0; jj < n; ++jj) {
          const float pb = __shfl_sync(kFull, pj, jj);
#pragma unroll
          for (int t = 0; t < C; ++t)
            if (lane + 32 * t < hd)
              acc[r][t] = fmaf(pb, vs[jj * hd + lane + 32 * t], acc[r][t]);
        }
        m[r] = mNew;
      }
      __syncwarp(); // `row` is rewritten for the next row
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = rowBase + warp * kRowsPerWarp + r;
    if (i >= p.seq)
      continue;
    T *oi = out + b * p.seq * qStride + h * hd + i * qStride;
#pragma unroll
    for (int t = 0; t < C; ++t)
      if (lane + 32 * t < hd)
        oi[lane + 32 * t] = fromFloat<T>(acc[r][t] / l[r]);
    if (lane == 0)
      lse[(b * p.heads + h) * p.seq + i] = m[r] + logf(l[r]);
  }
}

//===-- Backward: dq (and D) over query rows ------------------------------===//

template <typename T, int C>
__global__ void __launch_bounds__(kWarps * 32)
    attentionGradQueryKernel(const T *q, const T *k, const T *v, const T *out,
                             const float *lse, const T *dout, Params p, T *dq,
                             float *rowDots) {
  BRAID_DYNAMIC_SHARED(float, smem);
  const int hd = int(p.headDim), pitch = hd + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float *ks = smem;               // [kTile][pitch]
  float *vs = ks + kTile * pitch; // [kTile][pitch]
  float *qRow = vs + kTile * pitch + warp * 2 * hd;
  float *gRow = qRow + hd;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = p.kvHeadOf(h);
  const int64_t qStride = p.heads * hd, kvStride = p.kvHeads * hd;
  const int64_t qAt = b * p.seq * qStride + h * hd;
  const T *kb = k + b * p.seq * kvStride + g * hd;
  const T *vb = v + b * p.seq * kvStride + g * hd;
  const int64_t rowBase = int64_t(blockIdx.x) * kBlockRows;
  const float slope = p.slope(h);

  float qr[kRowsPerWarp][C], gr[kRowsPerWarp][C], acc[kRowsPerWarp][C];
  float rowLse[kRowsPerWarp], rowDot[kRowsPerWarp];
  int64_t first[kRowsPerWarp]; // the rows' first keys
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = rowBase + warp * kRowsPerWarp + r;
    float d = 0;
#pragma unroll
    for (int t = 0; t < C; ++t) {
      const int c = lane + 32 * t;
      const bool in = i < p.seq && c < hd;
      const int64_t at = qAt + i * qStride + c;
      qr[r][t] = in ? toFloat(q[at]) : 0.0f;
      gr[r][t] = in ? toFloat(dout[at]) : 0.0f;
      d = fmaf(gr[r][t], in ? toFloat(out[at]) : 0.0f, d);
      acc[r][t] = 0;
    }
    // D_i = dout_i · out_i, which dk/dv read back.
    rowDot[r] = warpSum(d);
    rowLse[r] = i < p.seq ? lse[(b * p.heads + h) * p.seq + i] : 0.0f;
    first[r] = i < p.seq ? p.firstKey(b, i) : 0;
    if (i < p.seq && lane == 0)
      rowDots[(b * p.heads + h) * p.seq + i] = rowDot[r];
  }
  const int64_t keyEnd = p.causal ? lesser(p.seq, rowBase + kBlockRows) : p.seq;
  for (int64_t j0 = p.firstKeyTile(b, rowBase); j0 < keyEnd; j0 += kTile) {
    const int n = int(lesser(kTile, keyEnd - j0));
    __syncthreads();
    loadTile(kb, kvStride, j0, n, hd, ks, pitch);
    loadTile(vb, kvStride, j0, n, hd, vs, pitch);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = rowBase + warp * kRowsPerWarp + r;
      if (i >= p.seq)
        continue;
      stageRow(qr[r], qRow, lane, hd);
      stageRow(gr[r], gRow, lane, hd);
      __syncwarp();
      const int64_t j = j0 + lane;
      float ds = 0;
      if (lane < n && (!p.causal || j <= i) && j >= first[r]) {
        const float s =
            dot(qRow, ks + lane * pitch, hd) * p.scale - slope * float(i - j);
        const float pj = expf(s - rowLse[r]);
        const float dp = dot(gRow, vs + lane * pitch, hd);
        ds = pj * (dp - rowDot[r]) * p.scale;
      }
      for (int jj = 0; jj < n; ++jj) {
        const float db = __shfl_sync(kFull, ds, jj);
#pragma unroll
        for (int t = 0; t < C; ++t)
          if (lane + 32 * t < hd)
            acc[r][t] = fmaf(db, ks[jj * pitch + lane + 32 * t], acc[r][t]);
      }
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = rowBase + warp * kRowsPerWarp + r;
    if (i >= p.seq)
      continue;
#pragma unroll
    for (int t = 0; t < C; ++t)
      if (lane + 32 * t < hd)
        dq[qAt + i * qStride + lane + 32 * t] = fromFloat<T>(acc[r][t]);
  }
}

//===-- Backward: dk and dv over key rows ---------------------------------===//

template <typename T, int C>
__global__ void __launch_bounds__(kWarps * 32)
    attentionGradKeyValueKernel(const T *q, const T *k, const T *v,
                                const float *lse, const T *dout,
                                const float *rowDots, Params p, T *dk, T *dv) {
  BRAID_DYNAMIC_SHARED(float, smem);
  const int hd = int(p.headDim), pitch = hd + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float *qs = smem;               // [kTile][pitch]
  float *gs = qs + kTile * pitch; // [kTile][pitch]
  float *lseTile = gs + kTile * pitch;
  float *dotTile = lseTile + kTile;
  float *kRow = dotTile + kTile + warp * 2 * hd;
  float *vRow = kRow + hd;
  const int64_t b = blockIdx.z, g = blockIdx.y;
  const int64_t qStride = p.heads * hd, kvStride = p.kvHeads * hd;
  const int64_t kvAt = b * p.seq * kvStride + g * hd;
  const int64_t rowBase = int64_t(blockIdx.x) * kBlockRows;

  float kr[kRowsPerWarp][C], vr[kRowsPerWarp][C], dkAcc[kRowsPerWarp][C],
      dvAcc[kRowsPerWarp][C];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t j = rowBase + warp * kRowsPerWarp + r;
#pragma unroll
    for (int t = 0; t < C; ++t) {
      const int c = lane + 32 * t;
      const bool in = j < p.seq && c < hd;
      kr[r][t] = in ? toFloat(k[kvAt + j * kvStride + c]) : 0.0f;
      vr[r][t] = in ? toFloat(v[kvAt + j * kvStride + c]) : 0.0f;
      dkAcc[r][t] = dvAcc[r][t] = 0;
    }
  }
  // This kv head's query heads among the shard's (cpu::attentionBackward).
  const int64_t group = p.allHeads / p.allKvHeads;
  const int64_t first = greater(0, (p.kvHeadOffset + g) * group - p.headOffset);
  const int64_t last =
      lesser(p.heads, (p.kvHeadOffset + g + 1) * group - p.headOffset);
  // Causal: no query before the block's first key sees it.
  const int64_t queryStart = p.causal ? rowBase / kTile * kTile : 0;
  // Packed documents: nor a query whose document starts after the block's
  // last key (nor any later one).
  const int64_t lastKey = lesser(p.seq, rowBase + kBlockRows) - 1;
  for (int64_t h = first; h < last; ++h) {
    const float slope = p.slope(h);
    const int64_t qAt = b * p.seq * qStride + h * hd;
    const int64_t statAt = (b * p.heads + h) * p.seq;
    for (int64_t i0 = queryStart; i0 < p.seq; i0 += kTile) {
      if (p.firstKey(b, i0) > lastKey)
        break; // the same for the whole block
      const int n = int(lesser(kTile, p.seq - i0));
      // This lane's query's first key.
      const int64_t laneFirst = lane < n ? p.firstKey(b, i0 + lane) : 0;
      __syncthreads();
      loadTile(q + qAt, qStride, i0, n, hd, qs, pitch);
      loadTile(dout + qAt, qStride, i0, n, hd, gs, pitch);
      if (threadIdx.x < kTile) {
        lseTile[threadIdx.x] =
            threadIdx.x < n ? lse[statAt + i0 + threadIdx.x] : 0.0f;
        dotTile[threadIdx.x] =
            threadIdx.x < n ? rowDots[statAt + i0 + threadIdx.x] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int64_t j = rowBase + warp * kRowsPerWarp + r;
        if (j >= p.seq)
          continue;
        stageRow(kr[r], kRow, lane, hd);
        stageRow(vr[r], vRow, lane, hd);
        __syncwarp();
        const int64_t i = i0 + lane;
        float pi = 0, ds = 0;
        if (lane < n && (!p.causal || i >= j) && j >= laneFirst) {
          const float s =
              dot(qs + lane * pitch, kRow, hd) * p.scale - slope * float(i - j);
          pi = expf(s - lseTile[lane]);
          const float dp = dot(gs + lane * pitch, vRow, hd);
          ds = pi * (dp - dotTile[lane]) * p.scale;
        }
        for (int ii = 0; ii < n; ++ii) {
          const float pb = __shfl_sync(kFull, pi, ii);
          const float db = __shfl_sync(kFull, ds, ii);
#pragma unroll
          for (int t = 0; t < C; ++t)
            if (lane + 32 * t < hd) {
              dvAcc[r][t] =
                  fmaf(pb, gs[ii * pitch + lane + 32 * t], dvAcc[r][t]);
              dkAcc[r][t] =
                  fmaf(db, qs[ii * pitch + lane + 32 * t], dkAcc[r][t]);
            }
        }
        __syncwarp();
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t j = rowBase + warp * kRowsPerWarp + r;
    if (j >= p.seq)
      continue;
#pragma unroll
    for (int t = 0; t < C; ++t)
      if (lane + 32 * t < hd) {
        dk[kvAt + j * kvStride + lane + 32 * t] = fromFloat<T>(dkAcc[r][t]);
        dv[kvAt + j * kvStride + lane + 32 * t] = fromFloat<T>(dvAcc[r][t]);
      }
  }
}

//===-- Launching ---------------------------------------------------------===//

/// Launches `kernel` with `bytes` of dynamic shared memory, raising the
/// kernel's limit first where it exceeds the default 48 KiB.
template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, dim3 grid, size_t bytes, cudaStream_t stream,
                   Args... args) {
  if (bytes > 48 * 1024)
    if (cudaError_t e = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
        e != cudaSuccess)
      return e;
  BRAID_LAUNCH(grid, kWarps * 32, bytes, stream, kernel)(args...);
  return cudaGetLastError();
}

/// Whether the shape is one the kernels take (an empty one launches
/// nothing).
cudaError_t check(const AttentionShape &s) {
  if (s.headDim > kMaxAttentionHeadDim || s.batch > 65535 || s.heads > 65535 ||
      s.kvHeads > 65535 || s.allKvHeads() <= 0 ||
      s.allHeads() % s.allKvHeads() != 0)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

bool empty(const AttentionShape &s) {
  return s.batch == 0 || s.seq == 0 || s.heads == 0 || s.headDim == 0;
}

unsigned rowBlocks(int64_t seq) {
  return unsigned((seq + kBlockRows - 1) / kBlockRows);
}

/// The head dimension's chunks of 32, rounded up to a power of two (fewer
/// kernels to compile): 1, 2, 4 or 8.
int chunksOf(int64_t headDim) {
  return headDim <= 32 ? 1 : headDim <= 64 ? 2 : headDim <= 128 ? 4 : 8;
}

template <typename T, int C>
cudaError_t forwardWith(const T *q, const T *k, const T *v,
                        const AttentionShape &s, T *out, float *lse,
                        cudaStream_t stream) {
  const int64_t hd = s.headDim;
  const size_t bytes =
      sizeof(float) * (kTile * (hd + 1) + kTile * hd + kWarps * hd);
  const dim3 grid(rowBlocks(s.seq), unsigned(s.heads), unsigned(s.batch));
  return launch(attentionForwardKernel<T, C>, grid, bytes, stream, q, k, v,
                Params::of(s), out, lse);
}

template <typename T, int C>
cudaError_t backwardWith(const T *q, const T *k, const T *v, const T *out,
                         const float *lse, const T *dout,
                         const AttentionShape &s, T *dq, T *dk, T *dv,
                         float *workspace, cudaStream_t stream) {
  const int64_t hd = s.headDim;
  const Params p = Params::of(s);
  // dq first: it also writes D, which dk and dv read.
  if (s.heads > 0) {
    const size_t bytes =
        sizeof(float) * (2 * kTile * (hd + 1) + kWarps * 2 * hd);
    const dim3 grid(rowBlocks(s.seq), unsigned(s.heads), unsigned(s.batch));
    if (cudaError_t e =
            launch(attentionGradQueryKernel<T, C>, grid, bytes, stream, q, k, v,
                   out, lse, dout, p, dq, workspace);
        e != cudaSuccess)
      return e;
  }
  const size_t bytes =
      sizeof(float) * (2 * kTile * (hd + 1) + 2 * kTile + kWarps * 2 * hd);
  const dim3 grid(rowBlocks(s.seq), unsigned(s.kvHeads), unsigned(s.batch));
  return launch(attentionGradKeyValueKernel<T, C>, grid, bytes, stream, q, k, v,
                lse, dout, static_cast<const float *>(workspace), p, dk, dv);
}

} // namespace

int64_t attentionBackwardWorkspaceBytes(const AttentionShape &s,
                                        bool tensorCores) {
  const int64_t rows = s.batch * s.heads * s.seq;
  if (!tensorCores)
    return rows * int64_t(sizeof(float));
  // D, then dq's accumulators at the next multiple of 4 floats.
  return ((rows + 3) / 4 * 4 + rows * s.headDim) * int64_t(sizeof(float));
}

template <typename T>
cudaError_t attentionForward(const T *q, const T *k, const T *v,
                             const AttentionShape &s, T *out, float *lse,
                             cudaStream_t stream) {
  if (cudaError_t e = check(s); e != cudaSuccess || empty(s))
    return e;
  switch (chunksOf(s.headDim)) {
  case 1:
    return forwardWith<T, 1>(q, k, v, s, out, lse, stream);
  case 2:
    return forwardWith<T, 2>(q, k, v, s, out, lse, stream);
  case 4:
    return forwardWith<T, 4>(q, k, v, s, out, lse, stream);
  default:
    return forwardWith<T, 8>(q, k, v, s, out, lse, stream);
  }
}

template <typename T>
cudaError_t attentionBackward(const T *q, const T *k, const T *v, const T *out,
                              const float *lse, const T *dout,
                              const AttentionShape &s, T *dq, T *dk, T *dv,
                              float *workspace, cudaStream_t stream) {
  if (cudaError_t e = check(s); e != cudaSuccess)
    return e;
  if (s.batch == 0 || s.seq == 0 || s.headDim == 0 || s.kvHeads == 0)
    return cudaSuccess;
  switch (chunksOf(s.headDim)) {
  case 1:
    return backwardWith<T, 1>(q, k, v, out, lse, dout, s, dq, dk, dv, workspace,
                              stream);
  case 2:
    return backwardWith<T, 2>(q, k, v, out, lse, dout, s, dq, dk, dv, workspace,
                              stream);
  case 4:
    return backwardWith<T, 4>(q, k, v, out, lse, dout, s, dq, dk, dv, workspace,
                              stream);
  default:
    return backwardWith<T, 8>(q, k, v, out, lse, dout, s, dq, dk, dv, workspace,
                              stream);
  }
}

#define BRAID_INSTANTIATE_ATTENTION(T)                                         \
  template cudaError_t attentionForward<T>(const T *, const T *, const T *,    \
                                           const AttentionShape &, T *,        \
                                           float *, cudaStream_t);             \
  template cudaError_t attentionBackward<T>(                                   \
      const T *, const T *, const T *, const T *, const float *, const T *,    \
      const AttentionShape &, T *, T *, T *, float *, cudaStream_t);
BRAID_INSTANTIATE_ATTENTION(float)
BRAID_INSTANTIATE_ATTENTION(__nv_bfloat16)
BRAID_INSTANTIATE_ATTENTION(__half)
#undef BRAID_INSTANTIATE_ATTENTION

} // namespace braid::cuda
