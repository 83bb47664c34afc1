//===- AttentionTensorCores.cu - Attention's forward on tensor cores ------===//
//
// FlashAttention-2's forward for bf16 with the warp-level tensor-core
// product mma.sync.m16n8k16 (bf16 inputs, float accumulators; sm_80 and
// later). A block of 4 warps takes 64 query rows of one (batch, head), 16
// per warp, and streams the keys and values through shared memory in tiles
// of 64 rows:
//
// - S = Q Kᵀ: the warp's query rows (16 x headDim, held in registers as the
//   product's A fragments, loaded once with ldmatrix) against the tile's 64
//   keys: 8 products of 16 x 8 per 16 head dimensions; K's rows, stored
//   [key][dim], are the B operand's columns as ldmatrix loads them;
// - the online softmax in the base-2 domain on the accumulators, each
//   thread holding 2 rows x 16 of the tile's 64 columns; a row's maximum
//   and sum combine over the 4 threads of a quad;
// - O += P V: the probabilities, rounded to bf16, are already the A
//   fragments of the next product (two 16 x 8 accumulator tiles make one
//   16 x 16 operand), and V's rows, stored [key][dim], load transposed
//   (ldmatrix.trans) as its B fragments.
//
// Causal tiles above the diagonal are skipped, the diagonal one masked;
// rows and keys past the sequence's end are zeros in shared memory and
// masked out. The log-sum-exp is written in float, in natural units, as the
// CUDA-core kernel (Attention.cu) and the CPU's are.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Attention.h"

#include "runtime/cuda/DeviceMath.cuh"
#include "runtime/cuda/Mma.cuh"

#include <cmath>
#include <cstdint>

namespace braid::cuda {
namespace {

constexpr int kTcWarps = 4;
constexpr int kTcRows = 16 * kTcWarps; // query rows per block
constexpr int kTcKeys = 64;            // keys per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// The shared-memory row pitch of a tile of head dimension D, in bf16: 8
/// more than D, so that ldmatrix's 8 row addresses fall in different banks
/// (and each row stays 16-byte aligned).
template <int D> constexpr int pitchOf() { return D + 8; }

template <int D> constexpr size_t sharedBytes() {
  return size_t(3) * kTcKeys * pitchOf<D>() * sizeof(__nv_bfloat16);
}

struct TcParams {
  int64_t seq, heads, kvHeads;
  float scaleLog2; // the scale, times log2(e)
  bool causal, alibi;
  int64_t headOffset, allHeads, allKvHeads, kvHeadOffset;

  __device__ int64_t kvHeadOf(int64_t h) const {
    return (headOffset + h) / (allHeads / allKvHeads) - kvHeadOffset;
  }
  /// ALiBi's slope of local head h (as cpu::alibiSlopes), 0 without.
  __device__ float slope(int64_t h) const {
    return alibi ? alibiSlope(allHeads, headOffset + h) : 0.0f;
  }
};

/// Copies rows [row0, row0 + kTcKeys) of a [seq, stride] bf16 matrix (D
/// columns from `src`) into `dst` (pitch P), 16 bytes at a time; rows past
/// `seq` become zeros.
template <int D>
__device__ __forceinline__ void loadRows(const __nv_bfloat16 *src,
                                         int64_t stride, int64_t row0,
                                         int64_t seq, __nv_bfloat16 *dst) {
  constexpr int P = pitchOf<D>();
  constexpr int kVectors = D / 8; // 16-byte vectors per row
  for (int idx = threadIdx.x; idx < kTcKeys * kVectors; idx += kTcWarps * 32) {
    const int r = idx / kVectors, c = (idx % kVectors) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row0 + r < seq)
      value = *reinterpret_cast<const uint4 *>(src + (row0 + r) * stride + c);
    *reinterpret_cast<uint4 *>(dst + r * P + c) = value;
  }
}

template <int D>
__global__ void __launch_bounds__(kTcWarps * 32)
    attentionForwardTcKernel(const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                             const __nv_bfloat16 *v, TcParams p,
                             __nv_bfloat16 *out, float *lse) {
  constexpr int P = pitchOf<D>();
  constexpr int kSteps = D / 16;   // k-steps of Q Kᵀ
  constexpr int kDimTiles = D / 8; // n-tiles of P V
  BRAID_DYNAMIC_SHARED(unsigned char, shared);
  __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(shared);
  __nv_bfloat16 *ks = qs + kTcKeys * P;
  __nv_bfloat16 *vs = ks + kTcKeys * P;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int quadRow = lane >> 2, quadCol = lane & 3;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = p.kvHeadOf(h);
  const int64_t qStride = p.heads * D, kvStride = p.kvHeads * D;
  const __nv_bfloat16 *qb = q + b * p.seq * qStride + h * D;
  const __nv_bfloat16 *kb = k + b * p.seq * kvStride + g * D;
  const __nv_bfloat16 *vb = v + b * p.seq * kvStride + g * D;
  const int64_t rowBase = int64_t(blockIdx.x) * kTcRows;
  // This thread's two rows (of the warp's 16): quadRow and quadRow + 8.
  const int64_t row0 = rowBase + warp * 16 + quadRow, row1 = row0 + 8;
  const float slopeLog2 = p.slope(h) * kLog2e;

  // The warp's query rows, as A fragments for every k-step.
  loadRows<D>(qb, qStride, rowBase, p.seq, qs);
  __syncthreads();
  uint32_t qa[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s)
    ldmatrixX4(qa[s], qs + (warp * 16 + (lane & 15)) * P + s * 16 +
                          (lane >> 4) * 8);

  float o[kDimTiles][4];
#pragma unroll
  for (int t = 0; t < kDimTiles; ++t)
    o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};

  const int64_t keyEnd =
      p.causal ? (rowBase + kTcRows < p.seq ? rowBase + kTcRows : p.seq)
               : p.seq;
  for (int64_t j0 = 0; j0 < keyEnd; j0 += kTcKeys) {
    __syncthreads(); // the previous tile is no longer read
    loadRows<D>(kb, kvStride, j0, p.seq, ks);
    loadRows<D>(vb, kvStride, j0, p.seq, vs);
    __syncthreads();

    // S = Q Kᵀ over the tile's 64 keys: 8 tiles of 16 x 8.
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
      for (int n = 0; n < 8; n += 2) {
        // Keys n*8 .. n*8+15, dims kk*16 .. kk*16+15: the B fragments of
        // key tiles n and n + 1.
        uint32_t kf[4];
        const int key = n * 8 + (lane & 7) + ((lane >> 4) << 3);
        const int dim = kk * 16 + ((lane >> 3) & 1) * 8;
        ldmatrixX4(kf, ks + key * P + dim);
        mma16816(s[n], qa[kk], kf[0], kf[1]);
        mma16816(s[n + 1], qa[kk], kf[2], kf[3]);
      }

    // Scores in the base-2 domain, masked; the rows' new maxima.
    const bool edge =
        j0 + kTcKeys > p.seq || (p.causal && j0 + kTcKeys - 1 > rowBase);
    float tileMax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = e < 2 ? row0 : row1;
        const int64_t j = j0 + n * 8 + quadCol * 2 + (e & 1);
        float x = s[n][e] * p.scaleLog2 - slopeLog2 * float(i - j);
        if (edge && (j >= p.seq || (p.causal && j > i)))
          x = -INFINITY;
        s[n][e] = x;
        tileMax[e >> 1] = fmaxf(tileMax[e >> 1], x);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tileMax[r] =
          fmaxf(tileMax[r], __shfl_xor_sync(0xffffffffu, tileMax[r], 1));
      tileMax[r] =
          fmaxf(tileMax[r], __shfl_xor_sync(0xffffffffu, tileMax[r], 2));
    }
    float correction[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mNew = fmaxf(m[r], tileMax[r]);
      // A row with nothing unmasked yet keeps 0 as its base (no -inf - -inf).
      base[r] = mNew == -INFINITY ? 0.0f : mNew;
      correction[r] = exp2f(m[r] - base[r]);
      m[r] = mNew;
      l[r] *= correction[r];
    }
#pragma unroll
    for (int t = 0; t < kDimTiles; ++t) {
      o[t][0] *= correction[0];
      o[t][1] *= correction[0];
      o[t][2] *= correction[1];
      o[t][3] *= correction[1];
    }
    // P, summed per thread (the quad's sums combine at the end).
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = exp2f(s[n][e] - base[e >> 1]);
        s[n][e] = pe;
        l[e >> 1] += pe;
      }

      // O += P V: key k-steps of 16 (accumulator tiles 2ks and 2ks + 1 make
      // the A fragment), head-dimension tiles of 8 in pairs.
#pragma unroll
    for (int ks16 = 0; ks16 < 4; ++ks16) {
      uint32_t pa[4];
      pa[0] = packBf16(s[2 * ks16][0], s[2 * ks16][1]);
      pa[1] = packBf16(s[2 * ks16][2], s[2 * ks16][3]);
      pa[2] = packBf16(s[2 * ks16 + 1][0], s[2 * ks16 + 1][1]);
      pa[3] = packBf16(s[2 * ks16 + 1][2], s[2 * ks16 + 1][3]);
#pragma unroll
      for (int t = 0; t < kDimTiles; t += 2) {
        uint32_t vf[4];
        const int key = ks16 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int dim = t * 8 + (lane >> 4) * 8;
        ldmatrixX4Trans(vf, vs + key * P + dim);
        mma16816(o[t], pa, vf[0], vf[1]);
        mma16816(o[t + 1], pa, vf[2], vf[3]);
      }
    }
  }

  // The rows' sums over their quad, then out = O / l and the log-sum-exp.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = r == 0 ? row0 : row1;
    if (i >= p.seq)
      continue;
    const float inv = 1.0f / l[r];
    __nv_bfloat16 *oi = out + b * p.seq * qStride + h * D + i * qStride;
#pragma unroll
    for (int t = 0; t < kDimTiles; ++t)
      *reinterpret_cast<__nv_bfloat162 *>(oi + t * 8 + quadCol * 2) =
          __floats2bfloat162_rn(o[t][2 * r] * inv, o[t][2 * r + 1] * inv);
    if (quadCol == 0)
      lse[(b * p.heads + h) * p.seq + i] = (m[r] + log2f(l[r])) * kLn2;
  }
}

template <int D>
cudaError_t launchTc(const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                     const __nv_bfloat16 *v, const AttentionShape &s,
                     __nv_bfloat16 *out, float *lse, cudaStream_t stream) {
  const size_t bytes = sharedBytes<D>();
  cudaError_t e = cudaFuncSetAttribute(
      attentionForwardTcKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      int(bytes));
  if (e != cudaSuccess)
    return e;
  TcParams p{
      s.seq,          s.heads,       s.kvHeads,    float(s.scale) * kLog2e,
      s.causal,       s.alibi,       s.headOffset, s.allHeads(),
      s.allKvHeads(), s.kvHeadOffset};
  dim3 grid(unsigned((s.seq + kTcRows - 1) / kTcRows), unsigned(s.heads),
            unsigned(s.batch));
  BRAID_LAUNCH(grid, kTcWarps * 32, bytes, stream, attentionForwardTcKernel<D>)(q, k, v, p, out, lse);
  return cudaGetLastError();
}

bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

} // namespace

bool attentionForwardOnTensorCores(const void *q, const void *k, const void *v,
                                   const void *out, const AttentionShape &s) {
  return (s.headDim == 64 || s.headDim == 128) && s.batch > 0 && s.seq > 0 &&
         s.heads > 0 && s.kvHeads > 0 && aligned16(q) && aligned16(k) &&
         aligned16(v) && aligned16(out);
}

cudaError_t attentionForwardTensorCores(const __nv_bfloat16 *q,
                                        const __nv_bfloat16 *k,
                                        const __nv_bfloat16 *v,
                                        const AttentionShape &s,
                                        __nv_bfloat16 *out, float *lse,
                                        cudaStream_t stream) {
  if (!attentionForwardOnTensorCores(q, k, v, out, s))
    return cudaErrorInvalidValue;
  if (s.headDim == 64)
    return launchTc<64>(q, k, v, s, out, lse, stream);
  return launchTc<128>(q, k, v, s, out, lse, stream);
}

} // namespace braid::cuda
