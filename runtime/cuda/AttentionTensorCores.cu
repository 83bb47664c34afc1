//===- AttentionTensorCores.cu - Attention on tensor cores ----------------===//
//
// FlashAttention-2's forward for bf16 and fp16 (E) with the warp-level
// tensor-core product mma.sync.m16n8k16 (E inputs, float accumulators;
// sm_80 and later). A block of 4 warps takes 64 query rows of one (batch,
// head), 16 per warp (the default tiling; others below), and streams the
// keys and values through shared memory in tiles of 64 rows:
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
// masked out. Tiles reach shared memory through cp.async into two buffers:
// the next tile's copy runs while the block computes on this one. Causal
// blocks over query rows take their row blocks last first (the longest
// first). The log-sum-exp is written in float, in natural units, as the
// CUDA-core kernel (Attention.cu) and the CPU's are.
//
// Backward (FlashAttention-2's): D_i = dout_i · out_i per query row first,
// then the dk and dv kernel over key rows: a block of 4 warps holds 64 keys
// (16 per warp) and their values in shared memory and streams the query
// tiles of every query head of its kv head; per tile, Sᵀ = K Qᵀ and dPᵀ =
// V doutᵀ, Pᵀ = exp(Sᵀ scale + bias - lse), dSᵀ = Pᵀ (dPᵀ - D) scale, then
// dv += Pᵀ dout and dk += dSᵀ Q, the accumulators again becoming the A
// fragments (rounded to bf16). dq either
//
// - in the same kernel (the default): dSᵀ through shared memory, read back
//   transposed as dS, dq += dS K added to float accumulators by 8-byte
//   atomics, rounded to E by a last kernel (five products per score), or
// - by a kernel of its own over query rows (one writer per element, no
//   atomics): 64 queries per block with their output gradients, streaming
//   key tiles: S and dP again, dq += dS K (seven products per score).
//
// Causal tiles wholly above the diagonal are skipped throughout, and with
// packed documents (Attention.h) the key tiles before a query block's first
// document and the query tiles whose documents start after a key block.
//
// Tilings (kForwardTilings, kBackwardTilings; braid-attention-bench times
// them): the forward with 32 query rows per warp (each K and V fragment
// feeding two products) and 32 keys per tile; the backward with 32 query
// rows per tile and with dq apart. On an H100 at the 1B benchmark's shape
// (batch 16, 2048 positions, 16 heads of 128, causal) the defaults measured
// 162 TFLOP/s forward (32 rows per warp: 150 with 64 keys, 164 with 32)
// and 129 backward (dq apart: 102; before the 8-byte atomics, dq by
// atomics measured the same as apart).
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

/// Both element types (bf16, fp16) are 16 bits.
constexpr size_t kElementBytes = 2;

struct TcParams {
  int64_t seq, heads, kvHeads;
  float scaleLog2; // the scale, times log2(e)
  float scale;
  bool causal, alibi;
  int64_t headOffset, allHeads, allKvHeads, kvHeadOffset;
  const int32_t *positions; // packed documents (device), or null

  /// Query i of sequence b's first key (AttentionShape::firstKey), 0
  /// without documents or past the sequence's end (and for a position past
  /// i, so that no key before the sequence is read).
  __device__ int64_t firstKey(int64_t b, int64_t i) const {
    if (!positions || i >= seq)
      return 0;
    const int64_t first = i - positions[b * seq + i];
    return first > 0 ? first : 0;
  }
  __device__ int64_t kvHeadOf(int64_t h) const {
    return (headOffset + h) / (allHeads / allKvHeads) - kvHeadOffset;
  }
  /// ALiBi's slope of local head h (as cpu::alibiSlopes), 0 without.
  __device__ float slope(int64_t h) const {
    return alibi ? alibiSlope(allHeads, headOffset + h) : 0.0f;
  }
};

/// Starts this thread's part of copying rows [row0, row0 + Rows) of a
/// [seq, stride] matrix of E (D columns from `src`) into `dst` (pitch P),
/// 16 bytes at a time, with cp.async: rows past `seq` become zeros. The
/// copy is complete after the cpAsyncWait of its group and a barrier.
template <int D, int Rows = kTcKeys, int Threads = kTcWarps * 32, typename E>
__device__ __forceinline__ void
loadRowsAsync(const E *src, int64_t stride, int64_t row0, int64_t seq, E *dst) {
  constexpr int P = pitchOf<D>();
  constexpr int kVectors = D / 8; // 16-byte vectors per row
  for (int idx = threadIdx.x; idx < Rows * kVectors; idx += Threads) {
    const int r = idx / kVectors, c = (idx % kVectors) * 8;
    const bool valid = row0 + r < seq;
    cpAsync<16>(dst + r * P + c, valid ? src + (row0 + r) * stride + c : src,
              valid);
  }
}

/// The row block a block of a causal kernel over query rows takes: the
/// last first, since rows further on see more keys (the longest blocks
/// start first and the short ones fill the tail).
__device__ __forceinline__ int64_t queryRowBlock(bool causal) {
  return causal ? int64_t(gridDim.x) - 1 - int64_t(blockIdx.x)
                : int64_t(blockIdx.x);
}

/// Whether every pair of query rows [row0, row0 + rows) and keys [key0,
/// key0 + keys) of sequence b is inside the sequence, the causal triangle
/// and the query's document, with no ALiBi bias: such a tile's
/// probabilities need no mask. (The last row's document starts last.)
__device__ __forceinline__ bool unmaskedTile(const TcParams &p, int64_t b,
                                             int64_t row0, int64_t rows,
                                             int64_t key0, int64_t keys) {
  return !p.alibi && row0 + rows <= p.seq && key0 + keys <= p.seq &&
         (!p.causal || key0 + keys - 1 <= row0) &&
         p.firstKey(b, row0 + rows - 1) <= key0;
}

/// The forward's tilings (Attention.h's attentionForwardTilings): each of
/// a block's 4 warps takes MT tiles of 16 query rows, and keys stream in
/// tiles of NK. With MT 1 a warp holds its query rows in registers; with
/// MT 2 it reads them from shared memory at each product (too few
/// registers for both), but every K and V fragment it loads feeds two
/// products.
struct ForwardTiling {
  int rowTiles, keys;
};
constexpr ForwardTiling kForwardTilings[] = {{1, 64}, {2, 64}, {2, 32}};
constexpr int kForwardTilingCount =
    int(sizeof(kForwardTilings) / sizeof(kForwardTilings[0]));

/// The forward's shared memory: the block's query rows, and two buffers of
/// a key tile and a value tile (one filled while the other is read).
template <int D, int MT, int NK> constexpr size_t forwardSharedBytes() {
  return size_t(16 * MT * kTcWarps + 4 * NK) * pitchOf<D>() * kElementBytes;
}

template <typename E, int D, int MT, int NK>
__global__ void __launch_bounds__(kTcWarps * 32)
    attentionForwardTcKernel(const E *q, const E *k, const E *v, TcParams p,
                             E *out, float *lse) {
  constexpr int P = pitchOf<D>();
  constexpr int kRows = 16 * MT * kTcWarps; // query rows per block
  constexpr int kSteps = D / 16;   // k-steps of Q Kᵀ
  constexpr int kDimTiles = D / 8; // n-tiles of P V
  constexpr int kKeyTiles = NK / 8; // n-tiles of Q Kᵀ
  constexpr bool kQueryInRegisters = MT == 1;
  static_assert(NK % 16 == 0, "key tiles are k-steps of 16");
  BRAID_DYNAMIC_SHARED(unsigned char, shared);
  E *qs = reinterpret_cast<E *>(shared);
  E *tiles = qs + kRows * P; // buffer s: keys at 2s, values at 2s + 1

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int quadRow = lane >> 2, quadCol = lane & 3;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = p.kvHeadOf(h);
  const int64_t qStride = p.heads * D, kvStride = p.kvHeads * D;
  const E *qb = q + b * p.seq * qStride + h * D;
  const E *kb = k + b * p.seq * kvStride + g * D;
  const E *vb = v + b * p.seq * kvStride + g * D;
  const int64_t rowBase = queryRowBlock(p.causal) * kRows;
  // The warp's first row; this thread's rows are, in its m-th tile of 16,
  // quadRow and quadRow + 8.
  const int64_t warpRow = rowBase + warp * 16 * MT;
  auto rowOf = [&](int m, int r) { return warpRow + m * 16 + quadRow + 8 * r; };
  const float slopeLog2 = p.slope(h) * kLog2e;
  const int64_t keyEnd =
      p.causal ? (rowBase + kRows < p.seq ? rowBase + kRows : p.seq) : p.seq;
  const int64_t keyTiles = (keyEnd + NK - 1) / NK;
  // Packed documents: the tiles before the block's first document are
  // skipped (its first row's, the earliest), and where a tile starts before
  // the block's last document (its last row's), the keys before each row's
  // first are masked.
  const int64_t firstTile = p.firstKey(b, rowBase) / NK;
  const int64_t lastFirst =
      p.firstKey(b, (rowBase + kRows < p.seq ? rowBase + kRows : p.seq) - 1);
  int64_t rowFirst[MT][2]; // this thread's rows' first keys
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      rowFirst[mt][r] = p.firstKey(b, rowOf(mt, r));
  // Key tile t (and its values) into buffer t % 2.
  auto loadTile = [&](int64_t t) {
    E *ks = tiles + (t & 1) * 2 * NK * P;
    loadRowsAsync<D, NK>(kb, kvStride, t * NK, p.seq, ks);
    loadRowsAsync<D, NK>(vb, kvStride, t * NK, p.seq, ks + NK * P);
  };

  // The query rows, then the first tile, each a group of copies.
  loadRowsAsync<D, kRows>(qb, qStride, rowBase, p.seq, qs);
  cpAsyncCommit();
  if (firstTile < keyTiles)
    loadTile(firstTile);
  cpAsyncCommit();
  cpAsyncWait<1>();
  __syncthreads();
  // The warp's query rows as A fragments: for every k-step in registers
  // (MT 1), or read at each k-step.
  const E *warpQ = qs + warp * 16 * MT * P;
  auto queryFragment = [&](uint32_t(&a)[4], int m, int kk) {
    ldmatrixX4(a,
               warpQ + (m * 16 + (lane & 15)) * P + kk * 16 + (lane >> 4) * 8);
  };
  uint32_t qa[kQueryInRegisters ? kSteps : 1][4];
  if constexpr (kQueryInRegisters) {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
      queryFragment(qa[kk], 0, kk);
  }

  float o[MT][kDimTiles][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int t = 0; t < kDimTiles; ++t)
      o[mt][t][0] = o[mt][t][1] = o[mt][t][2] = o[mt][t][3] = 0;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0;
  }

  for (int64_t tile = firstTile; tile < keyTiles; ++tile) {
    // The next tile's copy runs while this one is computed.
    if (tile + 1 < keyTiles)
      loadTile(tile + 1);
    cpAsyncCommit();
    cpAsyncWait<1>(); // this tile's group
    __syncthreads();
    const int64_t j0 = tile * NK;
    const E *ks = tiles + (tile & 1) * 2 * NK * P;
    const E *vs = ks + NK * P;

    // S = Q Kᵀ over the tile's NK keys: NK / 8 tiles of 16 x 8 per m-tile.
    float s[MT][kKeyTiles][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
        s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      uint32_t a[MT][4];
      if constexpr (kQueryInRegisters) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          a[0][e] = qa[kk][e];
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          queryFragment(a[mt], mt, kk);
      }
#pragma unroll
      for (int n = 0; n < kKeyTiles; n += 2) {
        // Keys n*8 .. n*8+15, dims kk*16 .. kk*16+15: the B fragments of
        // key tiles n and n + 1.
        uint32_t kf[4];
        const int key = n * 8 + (lane & 7) + ((lane >> 4) << 3);
        const int dim = kk * 16 + ((lane >> 3) & 1) * 8;
        ldmatrixX4(kf, ks + key * P + dim);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<E>(s[mt][n], a[mt], kf[0], kf[1]);
          mma16816<E>(s[mt][n + 1], a[mt], kf[2], kf[3]);
        }
      }
    }

    // Scores in the base-2 domain, masked; the rows' new maxima.
    const bool unmasked = unmaskedTile(p, b, rowBase, kRows, j0, NK);
    const bool edge = j0 + NK > p.seq || (p.causal && j0 + NK - 1 > rowBase);
    const bool documentEdge = j0 < lastFirst;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float tileMax[2] = {-INFINITY, -INFINITY};
      if (unmasked) {
        // Inside the sequence and the causal triangle, no bias: the scores.
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[mt][n][e] *= p.scaleLog2;
            tileMax[e >> 1] = fmaxf(tileMax[e >> 1], s[mt][n][e]);
          }
      } else {
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t i = rowOf(mt, e >> 1);
            const int64_t j = j0 + n * 8 + quadCol * 2 + (e & 1);
            float x = s[mt][n][e] * p.scaleLog2 - slopeLog2 * float(i - j);
            if ((edge && (j >= p.seq || (p.causal && j > i))) ||
                (documentEdge && j < rowFirst[mt][e >> 1]))
              x = -INFINITY;
            s[mt][n][e] = x;
            tileMax[e >> 1] = fmaxf(tileMax[e >> 1], x);
          }
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
        const float mNew = fmaxf(m[mt][r], tileMax[r]);
        // A row with nothing unmasked yet keeps 0 as its base (no -inf -
        // -inf).
        base[r] = mNew == -INFINITY ? 0.0f : mNew;
        correction[r] = exp2f(m[mt][r] - base[r]);
        m[mt][r] = mNew;
        l[mt][r] *= correction[r];
      }
#pragma unroll
      for (int t = 0; t < kDimTiles; ++t) {
        o[mt][t][0] *= correction[0];
        o[mt][t][1] *= correction[0];
        o[mt][t][2] *= correction[1];
        o[mt][t][3] *= correction[1];
      }
      // P, summed per thread (the quad's sums combine at the end).
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pe = exp2f(s[mt][n][e] - base[e >> 1]);
          s[mt][n][e] = pe;
          l[mt][e >> 1] += pe;
        }
    }

    // O += P V: key k-steps of 16 (accumulator tiles 2ks and 2ks + 1 make
    // the A fragment), head-dimension tiles of 8 in pairs.
#pragma unroll
    for (int ks16 = 0; ks16 < NK / 16; ++ks16) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = packPair<E>(s[mt][2 * ks16][0], s[mt][2 * ks16][1]);
        pa[mt][1] = packPair<E>(s[mt][2 * ks16][2], s[mt][2 * ks16][3]);
        pa[mt][2] = packPair<E>(s[mt][2 * ks16 + 1][0], s[mt][2 * ks16 + 1][1]);
        pa[mt][3] = packPair<E>(s[mt][2 * ks16 + 1][2], s[mt][2 * ks16 + 1][3]);
      }
#pragma unroll
      for (int t = 0; t < kDimTiles; t += 2) {
        uint32_t vf[4];
        const int key = ks16 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const int dim = t * 8 + (lane >> 4) * 8;
        ldmatrixX4Trans(vf, vs + key * P + dim);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<E>(o[mt][t], pa[mt], vf[0], vf[1]);
          mma16816<E>(o[mt][t + 1], pa[mt], vf[2], vf[3]);
        }
      }
    }
    __syncthreads(); // this tile's buffer is read no more: the one after
                     // the next may fill it
  }
  cpAsyncWait<0>(); // (only empty groups are left)

  // The rows' sums over their quad, then out = O / l and the log-sum-exp.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int64_t i = rowOf(mt, r);
      if (i >= p.seq)
        continue;
      const float inv = 1.0f / sum;
      E *oi = out + b * p.seq * qStride + h * D + i * qStride;
#pragma unroll
      for (int t = 0; t < kDimTiles; ++t)
        storePair(oi + t * 8 + quadCol * 2, o[mt][t][2 * r] * inv,
                  o[mt][t][2 * r + 1] * inv);
      if (quadCol == 0)
        lse[(b * p.heads + h) * p.seq + i] = (m[mt][r] + log2f(sum)) * kLn2;
    }
}

//===-- Backward ----------------------------------------------------------===//

/// Sets every accumulator of `acc` to 0.
template <int N> __device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[n][e] = 0;
}

/// The probability of query i for key j from the raw score q·k: exp(score
/// scale + ALiBi's bias - lse), in the base-2 domain (`lseLog2` is the
/// row's log-sum-exp times log2 e); 0 where the pair is masked (`first`:
/// query i's first key).
__device__ __forceinline__ float probability(float score, const TcParams &p,
                                             float slopeLog2, int64_t i,
                                             int64_t j, float lseLog2,
                                             int64_t first) {
  const bool valid =
      i < p.seq && j < p.seq && (!p.causal || j <= i) && j >= first;
  return valid ? exp2f(score * p.scaleLog2 - slopeLog2 * float(i - j) - lseLog2)
               : 0.0f;
}

/// acc[n] (n < NT: 16 x 8 tiles) += A Bᵀ over D: A the warp's 16 rows at
/// `a` and B the tile's 8 NT rows at `b`, both [row][dim] in shared memory
/// (pitch P): scores against a tile's rows (S = Q Kᵀ, dP = dout Vᵀ, and the
/// transposed ones of the key side).
template <int D, int NT, typename E>
__device__ __forceinline__ void rowProducts(float (&acc)[NT][4], const E *a,
                                            const E *b, int lane) {
  constexpr int P = pitchOf<D>();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[4];
    ldmatrixX4(af, a + (lane & 15) * P + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t bf[4];
      ldmatrixX4(bf, b + (n * 8 + (lane & 7) + ((lane >> 4) << 3)) * P +
                         kk * 16 + ((lane >> 3) & 1) * 8);
      mma16816<E>(acc[n], af, bf[0], bf[1]);
      mma16816<E>(acc[n + 1], af, bf[2], bf[3]);
    }
  }
}

/// acc[t] (t < D / 8: the warp's 16 x D) += X B: X (16 x 16 KS) the
/// accumulators of rowProducts, rounded to bf16 as A fragments, B the 16 KS
/// rows at `b` ([row][dim], pitch P, loaded transposed).
template <int D, int KS, typename E>
__device__ __forceinline__ void accumulateTimesRows(float (&acc)[D / 8][4],
                                                   const float (&x)[2 * KS][4],
                                                   const E *b, int lane) {
  constexpr int P = pitchOf<D>();
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    uint32_t xa[4];
    xa[0] = packPair<E>(x[2 * ks][0], x[2 * ks][1]);
    xa[1] = packPair<E>(x[2 * ks][2], x[2 * ks][3]);
    xa[2] = packPair<E>(x[2 * ks + 1][0], x[2 * ks + 1][1]);
    xa[3] = packPair<E>(x[2 * ks + 1][2], x[2 * ks + 1][3]);
#pragma unroll
    for (int t = 0; t < D / 8; t += 2) {
      uint32_t bf[4];
      ldmatrixX4Trans(bf, b + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) *
                                  P +
                              t * 8 + (lane >> 4) * 8);
      mma16816<E>(acc[t], xa, bf[0], bf[1]);
      mma16816<E>(acc[t + 1], xa, bf[2], bf[3]);
    }
  }
}

/// Writes the warp's 16 x D accumulators to rows `row0` and `row0` + 8 (this
/// thread's) of a [seq, stride] bf16 matrix at `dst`, rows past `seq` left.
template <int D, typename E>
__device__ __forceinline__ void storeRows(const float (&acc)[D / 8][4], E *dst,
                                          int64_t stride, int64_t row0,
                                          int64_t seq, int quadCol) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + 8 * r;
    if (i >= seq)
      continue;
#pragma unroll
    for (int t = 0; t < D / 8; ++t)
      storePair(dst + i * stride + t * 8 + quadCol * 2, acc[t][2 * r],
                acc[t][2 * r + 1]);
  }
}

/// D_i = dout_i · out_i for every query row and head (one warp a row), into
/// rowDots [batch, heads, seq].
template <typename E, int D>
__global__ void __launch_bounds__(kTcWarps * 32)
    rowDotsTcKernel(const E *out, const E *dout, int64_t rows, int64_t seq,
                    int64_t heads, float *rowDots) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kTcWarps + (threadIdx.x >> 5);
  if (r >= rows)
    return; // the whole warp
  float sum = 0;
  for (int d = lane * 2; d < D; d += 64) {
    const float2 o = loadPair(out + r * D + d);
    const float2 g = loadPair(dout + r * D + d);
    sum += o.x * g.x + o.y * g.y;
  }
  sum = warpSum(sum);
  // r runs over [batch, seq, heads].
  const int64_t h = r % heads, i = (r / heads) % seq, b = r / heads / seq;
  if (lane == 0)
    rowDots[(b * heads + h) * seq + i] = sum;
}

/// The pitch, in E, of the dk and dv kernel's dSᵀ tile ([key][query], QT
/// queries): 8 more than QT, as pitchOf's.
template <int QT> constexpr int dsPitchOf() { return QT + 8; }

/// The dk and dv kernel's shared memory: its keys and values, two buffers
/// of a query tile and its output gradients, their statistics, and with
/// DQ the tile's dSᵀ.
template <int D, int W, int QT, bool DQ> constexpr size_t gradKvSharedBytes() {
  return size_t(2 * 16 * W + 4 * QT) * pitchOf<D>() * kElementBytes +
         4 * QT * sizeof(float) +
         (DQ ? size_t(16 * W) * dsPitchOf<QT>() * kElementBytes : 0);
}

/// dk and dv for 16 W keys of one kv head (W warps; see the file comment),
/// query tiles of QT rows: the keys and values stay in shared memory while the
/// query tiles of every query head of the kv head (the rows, their output
/// gradients, log-sum-exps and D) stream through two buffers, one filled
/// while the other is read. With DQ, the block also adds its keys' part of
/// dq, dS K, to the float accumulators `dqAccum` ([batch, seq, heads · D],
/// zeros before) by atomics (FlashAttention-2's backward): dSᵀ goes through
/// shared memory, where the block's warps read it as dS, 16 query rows by
/// 32 dimensions at a time.
template <typename E, int D, int W, int QT, bool DQ>
__global__ void __launch_bounds__(W * 32)
    attentionGradKvTcKernel(const E *q, const E *k, const E *v,
                            const float *lse, const E *dout,
                            const float *rowDots, TcParams p, E *dk, E *dv,
                            float *dqAccum) {
  constexpr int P = pitchOf<D>();
  constexpr int NT = QT / 8, DT = D / 8;
  constexpr int PQ = dsPitchOf<QT>();
  BRAID_DYNAMIC_SHARED(unsigned char, shared);
  E *ks = reinterpret_cast<E *>(shared);
  constexpr int kKeys = 16 * W; // keys per block
  E *vs = ks + kKeys * P;
  E *tiles = vs + kKeys * P; // buffer s: rows at 2s, gradients at 2s + 1
  float *stats = reinterpret_cast<float *>(tiles + 4 * QT * P);
  // buffer s: log-sum-exps at 2s, D at 2s + 1 (QT each)
  E *dsT = reinterpret_cast<E *>(stats + 4 * QT); // [key][query], with DQ

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int quadRow = lane >> 2, quadCol = lane & 3;
  const int64_t b = blockIdx.z, g = blockIdx.y;
  const int64_t qStride = p.heads * D, kvStride = p.kvHeads * D;
  const int64_t kvAt = b * p.seq * kvStride + g * D;
  const int64_t keyBase = int64_t(blockIdx.x) * kKeys;
  const int64_t key0 = keyBase + warp * 16 + quadRow; // and key0 + 8

  // This kv head's query heads among the shard's (cpu::attentionBackward).
  const int64_t group = p.allHeads / p.allKvHeads;
  const int64_t firstHead = (p.kvHeadOffset + g) * group - p.headOffset;
  const int64_t first = firstHead > 0 ? firstHead : 0;
  const int64_t last =
      firstHead + group < p.heads ? firstHead + group : p.heads;
  // Causal: no query before the block's first key sees it.
  const int64_t queryStart = p.causal ? keyBase / QT * QT : 0;
  // Packed documents: nor a query whose document starts after the block's
  // last key, nor any later one: the tiles up to the first whose first
  // query's does.
  const int64_t lastKey =
      (keyBase + kKeys < p.seq ? keyBase + kKeys : p.seq) - 1;
  int64_t tilesPerHead = (p.seq - queryStart + QT - 1) / QT;
  if (p.positions)
    for (int64_t t = 0; t < tilesPerHead; ++t)
      if (p.firstKey(b, queryStart + t * QT) > lastKey) {
        tilesPerHead = t;
        break;
      }
  const int64_t queryTiles = last > first ? (last - first) * tilesPerHead : 0;
  // Query tile t: its head and first row.
  auto headOf = [&](int64_t t) { return first + t / tilesPerHead; };
  auto rowOf = [&](int64_t t) { return queryStart + t % tilesPerHead * QT; };
  auto loadTile = [&](int64_t t) {
    const int64_t h = headOf(t), i0 = rowOf(t);
    const int64_t qAt = b * p.seq * qStride + h * D;
    const int64_t statAt = (b * p.heads + h) * p.seq;
    E *qs = tiles + (t & 1) * 2 * QT * P;
    loadRowsAsync<D, QT, W * 32>(q + qAt, qStride, i0, p.seq, qs);
    loadRowsAsync<D, QT, W * 32>(dout + qAt, qStride, i0, p.seq, qs + QT * P);
    if (threadIdx.x < QT) {
      const int64_t i = i0 + threadIdx.x;
      const bool valid = i < p.seq;
      float *st = stats + (t & 1) * 2 * QT;
      cpAsync<4>(st + threadIdx.x, valid ? lse + statAt + i : lse, valid);
      cpAsync<4>(st + QT + threadIdx.x, valid ? rowDots + statAt + i : rowDots,
               valid);
    }
  };
  loadRowsAsync<D, kKeys, W * 32>(k + kvAt, kvStride, keyBase, p.seq, ks);
  loadRowsAsync<D, kKeys, W * 32>(v + kvAt, kvStride, keyBase, p.seq, vs);
  if (queryTiles > 0)
    loadTile(0);
  cpAsyncCommit();

  float dkAcc[DT][4], dvAcc[DT][4];
  zero(dkAcc);
  zero(dvAcc);
  for (int64_t tile = 0; tile < queryTiles; ++tile) {
    if (tile + 1 < queryTiles)
      loadTile(tile + 1);
    cpAsyncCommit();
    cpAsyncWait<1>(); // this tile's group (the first: with the keys)
    __syncthreads();
    const int64_t h = headOf(tile), i0 = rowOf(tile);
    const float slopeLog2 = p.slope(h) * kLog2e;
    const E *qs = tiles + (tile & 1) * 2 * QT * P;
    const E *gs = qs + QT * P;
    const float *lseTile = stats + (tile & 1) * 2 * QT;
    const float *dotTile = lseTile + QT;

    float st[NT][4], dpt[NT][4];
    zero(st);
    zero(dpt);
    rowProducts<D, NT>(st, ks + warp * 16 * P, qs, lane);
    rowProducts<D, NT>(dpt, vs + warp * 16 * P, gs, lane);
    // Pᵀ and dSᵀ: element (key j, query i).
    if (unmaskedTile(p, b, i0, QT, keyBase, kKeys)) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int iq = n * 8 + quadCol * 2 + (e & 1);
          const float pe =
              exp2f(st[n][e] * p.scaleLog2 - lseTile[iq] * kLog2e);
          st[n][e] = pe;
          dpt[n][e] = pe * (dpt[n][e] - dotTile[iq]) * p.scale;
        }
    } else {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = key0 + (e >> 1) * 8;
          const int iq = n * 8 + quadCol * 2 + (e & 1);
          const float pe =
              probability(st[n][e], p, slopeLog2, i0 + iq, j,
                          lseTile[iq] * kLog2e, p.firstKey(b, i0 + iq));
          st[n][e] = pe;
          dpt[n][e] = pe * (dpt[n][e] - dotTile[iq]) * p.scale;
        }
    }
    accumulateTimesRows<D, QT / 16>(dvAcc, st, gs, lane);
    if constexpr (DQ) {
      // The warp's 16 rows of dSᵀ, rounded to E as dk's operand is.
      E *rows = dsT + warp * 16 * PQ;
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t pair = packPair<E>(dpt[n][2 * r], dpt[n][2 * r + 1]);
          memcpy(rows + (quadRow + 8 * r) * PQ + n * 8 + quadCol * 2, &pair,
                 sizeof(pair));
        }
    }
    accumulateTimesRows<D, QT / 16>(dkAcc, dpt, qs, lane);
    if constexpr (DQ) {
      __syncthreads(); // every warp's rows of dSᵀ are in
      // dq[i0 + row] += dS K over the block's keys: items of 16 query rows
      // by 32 dimensions, spread over the warps.
      constexpr int kChunks = D / 32;
      float *dqHead = dqAccum + b * p.seq * qStride + h * D;
      for (int item = warp; item < QT / 16 * kChunks; item += W) {
        const int rt = item / kChunks, c = item % kChunks;
        float acc[4][4];
        zero(acc);
#pragma unroll
        for (int kk = 0; kk < W; ++kk) {
          // dS's rows rt*16.. by keys kk*16..: dSᵀ's rows, transposed.
          uint32_t a[4];
          ldmatrixX4Trans(
              a, dsT + (kk * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * PQ +
                     rt * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int t = 0; t < 4; t += 2) {
            uint32_t bf[4];
            ldmatrixX4Trans(
                bf, ks + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P +
                        c * 32 + t * 8 + (lane >> 4) * 8);
            mma16816<E>(acc[t], a, bf[0], bf[1]);
            mma16816<E>(acc[t + 1], a, bf[2], bf[3]);
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int64_t i = i0 + rt * 16 + quadRow + 8 * r;
          if (i >= p.seq)
            continue;
          float *row = dqHead + i * qStride + c * 32 + quadCol * 2;
#pragma unroll
          for (int t = 0; t < 4; ++t)
            atomicAddPair(row + t * 8, acc[t][2 * r], acc[t][2 * r + 1]);
        }
      }
    }
    __syncthreads(); // this tile's buffers are read no more
  }
  // Without query tiles (no query head of this kv head in the shard) the
  // keys' copy is still waited for.
  cpAsyncWait<0>();
  storeRows<D>(dkAcc, dk + kvAt, kvStride, key0, p.seq, quadCol);
  storeRows<D>(dvAcc, dv + kvAt, kvStride, key0, p.seq, quadCol);
}

/// dq for 64 query rows of one head (see the file comment): the rows and
/// their output gradients stay in shared memory while key tiles (with their
/// values) stream through two buffers, one filled while the other is read.
template <typename E, int D>
__global__ void __launch_bounds__(kTcWarps * 32)
    attentionGradQueryTcKernel(const E *q, const E *k, const E *v,
                               const float *lse, const E *dout,
                               const float *rowDots, TcParams p, E *dq) {
  constexpr int P = pitchOf<D>();
  constexpr int NT = kTcKeys / 8, DT = D / 8;
  BRAID_DYNAMIC_SHARED(unsigned char, shared);
  E *qs = reinterpret_cast<E *>(shared);
  E *gs = qs + kTcRows * P;
  E *tiles = gs + kTcRows * P; // buffer s: keys at 2s, values at 2s + 1

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int quadRow = lane >> 2, quadCol = lane & 3;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = p.kvHeadOf(h);
  const int64_t qStride = p.heads * D, kvStride = p.kvHeads * D;
  const int64_t qAt = b * p.seq * qStride + h * D;
  const int64_t kvAt = b * p.seq * kvStride + g * D;
  const int64_t rowBase = queryRowBlock(p.causal) * kTcRows;
  const int64_t row0 = rowBase + warp * 16 + quadRow; // and row0 + 8
  const int64_t statAt = (b * p.heads + h) * p.seq;
  const float slopeLog2 = p.slope(h) * kLog2e;
  const int64_t keyEnd =
      p.causal ? (rowBase + kTcRows < p.seq ? rowBase + kTcRows : p.seq)
               : p.seq;
  const int64_t keyTiles = (keyEnd + kTcKeys - 1) / kTcKeys;
  // Packed documents: the tiles before the block's first row's document
  // are skipped (as the forward's).
  const int64_t firstTile = p.firstKey(b, rowBase) / kTcKeys;
  auto loadTile = [&](int64_t t) {
    E *ks = tiles + (t & 1) * 2 * kTcKeys * P;
    loadRowsAsync<D>(k + kvAt, kvStride, t * kTcKeys, p.seq, ks);
    loadRowsAsync<D>(v + kvAt, kvStride, t * kTcKeys, p.seq, ks + kTcKeys * P);
  };
  loadRowsAsync<D, kTcRows>(q + qAt, qStride, rowBase, p.seq, qs);
  loadRowsAsync<D, kTcRows>(dout + qAt, qStride, rowBase, p.seq, gs);
  if (firstTile < keyTiles)
    loadTile(firstTile);
  cpAsyncCommit();
  float lseRow[2], dotRow[2];
  int64_t rowFirst[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + 8 * r;
    lseRow[r] = i < p.seq ? lse[statAt + i] * kLog2e : 0.0f;
    dotRow[r] = i < p.seq ? rowDots[statAt + i] : 0.0f;
    rowFirst[r] = p.firstKey(b, i);
  }

  float dqAcc[DT][4];
  zero(dqAcc);
  for (int64_t tile = firstTile; tile < keyTiles; ++tile) {
    if (tile + 1 < keyTiles)
      loadTile(tile + 1);
    cpAsyncCommit();
    cpAsyncWait<1>(); // this tile's group (the first: with the rows)
    __syncthreads();
    const int64_t j0 = tile * kTcKeys;
    const E *ks = tiles + (tile & 1) * 2 * kTcKeys * P;
    const E *vs = ks + kTcKeys * P;
    float s[NT][4], dp[NT][4];
    zero(s);
    zero(dp);
    rowProducts<D, NT>(s, qs + warp * 16 * P, ks, lane);
    rowProducts<D, NT>(dp, gs + warp * 16 * P, vs, lane);
    // dS: element (query i, key j).
    if (unmaskedTile(p, b, rowBase, kTcRows, j0, kTcKeys)) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pe = exp2f(s[n][e] * p.scaleLog2 - lseRow[e >> 1]);
          s[n][e] = pe * (dp[n][e] - dotRow[e >> 1]) * p.scale;
        }
    } else {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t i = row0 + (e >> 1) * 8;
          const int64_t j = j0 + n * 8 + quadCol * 2 + (e & 1);
          const float pe = probability(s[n][e], p, slopeLog2, i, j,
                                       lseRow[e >> 1], rowFirst[e >> 1]);
          s[n][e] = pe * (dp[n][e] - dotRow[e >> 1]) * p.scale;
        }
    }
    accumulateTimesRows<D, kTcKeys / 16>(dqAcc, s, ks, lane);
    __syncthreads(); // this tile's buffer is read no more
  }
  cpAsyncWait<0>(); // (only empty groups are left)
  storeRows<D>(dqAcc, dq + qAt, qStride, row0, p.seq, quadCol);
}

TcParams paramsOf(const AttentionShape &s) {
  return {
      s.seq,          s.heads,        s.kvHeads,      float(s.scale) * kLog2e,
      float(s.scale), s.causal,       s.alibi,        s.headOffset,
      s.allHeads(),   s.allKvHeads(), s.kvHeadOffset, s.positions};
}

/// Lets `kernel` have `bytes` of dynamic shared memory (beyond the default
/// 48 KiB up to the device's limit).
template <typename Kernel>
cudaError_t allowShared(Kernel kernel, size_t bytes) {
  return cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

template <typename E, int D, int MT, int NK>
cudaError_t launchTc(const E *q, const E *k, const E *v,
                     const AttentionShape &s, E *out, float *lse,
                     cudaStream_t stream) {
  constexpr int kRows = 16 * MT * kTcWarps;
  const size_t bytes = forwardSharedBytes<D, MT, NK>();
  if (cudaError_t e =
          allowShared(attentionForwardTcKernel<E, D, MT, NK>, bytes);
      e != cudaSuccess)
    return e;
  const TcParams p = paramsOf(s);
  dim3 grid(unsigned((s.seq + kRows - 1) / kRows), unsigned(s.heads),
            unsigned(s.batch));
  BRAID_LAUNCH(grid, kTcWarps * 32, bytes, stream,
               attentionForwardTcKernel<E, D, MT, NK>)
  (q, k, v, p, out, lse);
  return cudaGetLastError();
}

/// The forward of head dimension D with tiling kForwardTilings[tiling].
template <typename E, int D>
cudaError_t launchTiled(const E *q, const E *k, const E *v,
                        const AttentionShape &s, E *out, float *lse,
                        cudaStream_t stream, int tiling) {
  static_assert(kForwardTilingCount == 3, "a launch per tiling");
  constexpr ForwardTiling t0 = kForwardTilings[0], t1 = kForwardTilings[1],
                          t2 = kForwardTilings[2];
  switch (tiling) {
  case 0:
    return launchTc<E, D, t0.rowTiles, t0.keys>(q, k, v, s, out, lse, stream);
  case 1:
    return launchTc<E, D, t1.rowTiles, t1.keys>(q, k, v, s, out, lse, stream);
  case 2:
    return launchTc<E, D, t2.rowTiles, t2.keys>(q, k, v, s, out, lse, stream);
  default:
    return cudaErrorInvalidValue;
  }
}

/// The backward's tilings (Attention.h's attentionBackwardTilings): the dk
/// and dv kernel's warps (16 keys each), its query tile at head dimension
/// 128 (at 64 it is 64 rows), and whether it adds dq up by atomics (else
/// the dq kernel computes dq, with one writer per element).
struct BackwardTiling {
  int kvWarps, queryTile128;
  bool dqByAtomics;
};
constexpr BackwardTiling kBackwardTilings[] = {
    {4, 64, true}, {4, 32, true}, {4, 64, false}, {4, 32, false}};
constexpr int kBackwardTilingCount =
    int(sizeof(kBackwardTilings) / sizeof(kBackwardTilings[0]));

/// dq = accum, rounded to E.
template <typename E>
__global__ void roundGradKernel(const float *accum, int64_t n, E *dq) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dq[i] = E(accum[i]);
}

template <typename E, int D, int W, int QT, bool DQ>
cudaError_t launchBackwardTc(const E *q, const E *k, const E *v, const E *out,
                             const float *lse, const E *dout,
                             const AttentionShape &s, E *dq, E *dk, E *dv,
                             float *workspace, cudaStream_t stream) {
  constexpr size_t P = pitchOf<D>();
  const TcParams p = paramsOf(s);
  const int64_t rows = s.batch * s.seq * s.heads;
  float *rowDots = workspace;
  // With DQ, dq's float accumulators follow D, 16-byte aligned (Attention.cu's
  // workspace).
  float *dqAccum = DQ ? workspace + (rows + 3) / 4 * 4 : nullptr;
  const int64_t qn = rows * D;
  if constexpr (DQ)
    if (cudaError_t e =
            cudaMemsetAsync(dqAccum, 0, size_t(qn) * sizeof(float), stream);
        e != cudaSuccess)
      return e;
  BRAID_LAUNCH(unsigned((rows + kTcWarps - 1) / kTcWarps), kTcWarps * 32, 0,
               stream, rowDotsTcKernel<E, D>)(out, dout, rows, s.seq, s.heads,
                                           rowDots);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return e;

  if constexpr (!DQ) {
    const size_t queryBytes = (2 * kTcRows + 4 * kTcKeys) * P * kElementBytes;
    if (cudaError_t e =
            allowShared(attentionGradQueryTcKernel<E, D>, queryBytes);
        e != cudaSuccess)
      return e;
    BRAID_LAUNCH(dim3(unsigned((s.seq + kTcRows - 1) / kTcRows),
                      unsigned(s.heads), unsigned(s.batch)),
                 kTcWarps * 32, queryBytes, stream,
                 attentionGradQueryTcKernel<E, D>)
    (q, k, v, lse, dout, rowDots, p, dq);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }

  constexpr int kKeys = 16 * W;
  const size_t kvBytes = gradKvSharedBytes<D, W, QT, DQ>();
  if (cudaError_t e =
          allowShared(attentionGradKvTcKernel<E, D, W, QT, DQ>, kvBytes);
      e != cudaSuccess)
    return e;
  BRAID_LAUNCH(dim3(unsigned((s.seq + kKeys - 1) / kKeys), unsigned(s.kvHeads),
                    unsigned(s.batch)),
               W * 32, kvBytes, stream,
               attentionGradKvTcKernel<E, D, W, QT, DQ>)
  (q, k, v, lse, dout, rowDots, p, dk, dv, dqAccum);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return e;
  if constexpr (DQ) {
    constexpr unsigned kThreads = 256;
    const int64_t blocks = (qn + kThreads - 1) / kThreads;
    BRAID_LAUNCH(unsigned(blocks < 65536 ? blocks : 65536), kThreads, 0, stream,
                 roundGradKernel<E>)
    (dqAccum, qn, dq);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

/// The backward of head dimension D with tiling kBackwardTilings[tiling].
template <typename E, int D>
cudaError_t launchBackwardTiled(const E *q, const E *k, const E *v,
                                const E *out, const float *lse, const E *dout,
                                const AttentionShape &s, E *dq, E *dk, E *dv,
                                float *workspace, cudaStream_t stream,
                                int tiling) {
  static_assert(kBackwardTilingCount == 4, "a launch per tiling");
  constexpr BackwardTiling t0 = kBackwardTilings[0], t1 = kBackwardTilings[1],
                           t2 = kBackwardTilings[2], t3 = kBackwardTilings[3];
  constexpr int q0 = D == 64 ? 64 : t0.queryTile128,
                q1 = D == 64 ? 64 : t1.queryTile128,
                q2 = D == 64 ? 64 : t2.queryTile128,
                q3 = D == 64 ? 64 : t3.queryTile128;
  switch (tiling) {
  case 0:
    return launchBackwardTc<E, D, t0.kvWarps, q0, t0.dqByAtomics>(
        q, k, v, out, lse, dout, s, dq, dk, dv, workspace, stream);
  case 1:
    return launchBackwardTc<E, D, t1.kvWarps, q1, t1.dqByAtomics>(
        q, k, v, out, lse, dout, s, dq, dk, dv, workspace, stream);
  case 2:
    return launchBackwardTc<E, D, t2.kvWarps, q2, t2.dqByAtomics>(
        q, k, v, out, lse, dout, s, dq, dk, dv, workspace, stream);
  case 3:
    return launchBackwardTc<E, D, t3.kvWarps, q3, t3.dqByAtomics>(
        q, k, v, out, lse, dout, s, dq, dk, dv, workspace, stream);
  default:
    return cudaErrorInvalidValue;
  }
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

namespace {

template <typename E>
cudaError_t forwardTensorCores(const E *q, const E *k, const E *v,
                               const AttentionShape &s, E *out, float *lse,
                               cudaStream_t stream, int tiling) {
  if (!attentionForwardOnTensorCores(q, k, v, out, s))
    return cudaErrorInvalidValue;
  if (s.headDim == 64)
    return launchTiled<E, 64>(q, k, v, s, out, lse, stream, tiling);
  return launchTiled<E, 128>(q, k, v, s, out, lse, stream, tiling);
}

template <typename E>
cudaError_t backwardTensorCores(const E *q, const E *k, const E *v,
                                const E *out, const float *lse, const E *dout,
                                const AttentionShape &s, E *dq, E *dk, E *dv,
                                float *workspace, cudaStream_t stream,
                                int tiling) {
  if (!attentionBackwardOnTensorCores(q, k, v, out, dout, dq, dk, dv, s))
    return cudaErrorInvalidValue;
  if (s.headDim == 64)
    return launchBackwardTiled<E, 64>(q, k, v, out, lse, dout, s, dq, dk, dv,
                                      workspace, stream, tiling);
  return launchBackwardTiled<E, 128>(q, k, v, out, lse, dout, s, dq, dk, dv,
                                     workspace, stream, tiling);
}

} // namespace

cudaError_t attentionForwardTensorCores(const __nv_bfloat16 *q,
                                        const __nv_bfloat16 *k,
                                        const __nv_bfloat16 *v,
                                        const AttentionShape &s,
                                        __nv_bfloat16 *out, float *lse,
                                        cudaStream_t stream, int tiling) {
  return forwardTensorCores(q, k, v, s, out, lse, stream, tiling);
}

cudaError_t attentionForwardTensorCores(const __half *q, const __half *k,
                                        const __half *v,
                                        const AttentionShape &s, __half *out,
                                        float *lse, cudaStream_t stream,
                                        int tiling) {
  return forwardTensorCores(q, k, v, s, out, lse, stream, tiling);
}

std::vector<AttentionForwardTiling> attentionForwardTilings() {
  std::vector<AttentionForwardTiling> tilings;
  for (const ForwardTiling &t : kForwardTilings)
    tilings.push_back({16 * t.rowTiles, t.keys});
  return tilings;
}

std::vector<AttentionBackwardTiling> attentionBackwardTilings() {
  std::vector<AttentionBackwardTiling> tilings;
  for (const BackwardTiling &t : kBackwardTilings)
    tilings.push_back({16 * t.kvWarps, t.queryTile128, t.dqByAtomics});
  return tilings;
}

bool attentionBackwardOnTensorCores(const void *q, const void *k,
                                    const void *v, const void *out,
                                    const void *dout, const void *dq,
                                    const void *dk, const void *dv,
                                    const AttentionShape &s) {
  return attentionForwardOnTensorCores(q, k, v, out, s) && aligned16(dout) &&
         aligned16(dq) && aligned16(dk) && aligned16(dv) &&
         s.allKvHeads() > 0 && s.allHeads() % s.allKvHeads() == 0;
}

cudaError_t attentionBackwardTensorCores(
    const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
    const __nv_bfloat16 *out, const float *lse, const __nv_bfloat16 *dout,
    const AttentionShape &s, __nv_bfloat16 *dq, __nv_bfloat16 *dk,
    __nv_bfloat16 *dv, float *workspace, cudaStream_t stream, int tiling) {
  return backwardTensorCores(q, k, v, out, lse, dout, s, dq, dk, dv, workspace,
                             stream, tiling);
}

cudaError_t attentionBackwardTensorCores(
    const __half *q, const __half *k, const __half *v, const __half *out,
    const float *lse, const __half *dout, const AttentionShape &s, __half *dq,
    __half *dk, __half *dv, float *workspace, cudaStream_t stream, int tiling) {
  return backwardTensorCores(q, k, v, out, lse, dout, s, dq, dk, dv, workspace,
                             stream, tiling);
}

} // namespace braid::cuda
