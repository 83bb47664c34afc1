//===- Mma.cuh - Warp-level tensor-core products and their loads -*- CUDA -*-===//
//
// The PTX of the tensor-core kernels behind functions: ldmatrix (8 x 8
// matrices of 16-bit elements from shared memory into the fragments of
// mma.sync), mma.sync.m16n8k16 with bf16 or fp16 inputs and float
// accumulators, and cp.async's copies into shared memory (sm_80 and
// later). Under the CUDA emulation (emu/Emu.h) the same functions
// gather the warp's fragments on the host, with PTX's layouts.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane l,
// g = l / 4, t = l % 4, each 32-bit register two 16-bit elements (the
// lower first):
//   A (16 x 16, row-major): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..],
//     a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..];
//   B (16 x 8, column-major): b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g];
//   C (16 x 8 floats): c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..].
// ldmatrix: lanes 8i..8i+7 give the addresses of matrix i's 8 rows; lane l
// gets r[i] = M_i[g][2t..2t+1], or with .trans M_i[2t][g] and M_i[2t+1][g].
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_MMA_CUH
#define BRAID_RUNTIME_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace braid::cuda {

/// Four 8 x 8 matrices; `row` is the row this lane addresses (16-byte
/// aligned, in shared memory).
__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], const void *row) {
#ifdef BRAID_CUDA_EMULATION
  emu::ldmatrix(r, 4, row, false);
#else
  const uint32_t addr = uint32_t(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

/// As ldmatrixX4, each matrix transposed.
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4],
                                                const void *row) {
#ifdef BRAID_CUDA_EMULATION
  emu::ldmatrix(r, 4, row, true);
#else
  const uint32_t addr = uint32_t(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, "
               "%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

/// c += a b for one 16 x 8 tile (a 16 x 16, b 16 x 8; E = bf16 or fp16 in,
/// float out).
template <typename E>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void
mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                        uint32_t b1) {
#ifdef BRAID_CUDA_EMULATION
  emu::mmaM16N8K16(c, a, b0, b1, false);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4],
                                                 const uint32_t (&a)[4],
                                                 uint32_t b0, uint32_t b1) {
#ifdef BRAID_CUDA_EMULATION
  emu::mmaM16N8K16(c, a, b0, b1, true);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/// cp.async (sm_80 and later): copies Bytes (4, 8 or 16) from global memory
/// at `src` to shared memory at `dst` (both aligned to Bytes) without the
/// registers, or writes zeros when `valid` is false (src is then not read).
/// The copy completes at a cpAsyncWait that lets its group complete; other
/// threads see it after that wait and a barrier.
template <int Bytes>
__device__ __forceinline__ void cpAsync(void *dst, const void *src,
                                        bool valid) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16,
                "cp.async copies 4, 8 or 16 bytes");
#ifdef BRAID_CUDA_EMULATION
  emu::cpAsync(dst, src, Bytes, valid ? Bytes : 0);
#else
  const uint32_t addr = uint32_t(__cvta_generic_to_shared(dst));
  // 16 bytes bypass L1 (.cg); fewer may only go through it (.ca).
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :
                 : "r"(addr), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
                 :
                 : "r"(addr), "l"(src), "n"(Bytes), "r"(valid ? Bytes : 0)
                 : "memory");
#endif
}

/// Makes this thread's cp.async copies since the last commit one group.
__device__ __forceinline__ void cpAsyncCommit() {
#ifdef BRAID_CUDA_EMULATION
  emu::cpAsyncCommit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most `Pending` of this thread's committed groups are
/// incomplete (the newest ones).
template <int Pending> __device__ __forceinline__ void cpAsyncWait() {
#ifdef BRAID_CUDA_EMULATION
  emu::cpAsyncWait(Pending);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

/// dst[0] += lo and dst[1] += hi, atomically (dst in global memory, 8-byte
/// aligned): one 8-byte reduction on sm_90 and later, two 4-byte ones
/// before.
__device__ __forceinline__ void atomicAddPair(float *dst, float lo, float hi) {
#if defined(BRAID_CUDA_EMULATION) || !defined(__CUDA_ARCH__) ||                \
    __CUDA_ARCH__ < 900
  atomicAdd(dst, lo);
  atomicAdd(dst + 1, hi);
#else
  atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(lo, hi));
#endif
}

/// Two floats as E's pair type (lo first), rounded to nearest.
__device__ __forceinline__ __nv_bfloat162 pairOf(float lo, float hi,
                                                 __nv_bfloat16) {
  return __floats2bfloat162_rn(lo, hi);
}
__device__ __forceinline__ __half2 pairOf(float lo, float hi, __half) {
  return __floats2half2_rn(lo, hi);
}

/// Two floats as one register of two E (lo in the lower half), rounded to
/// nearest: an A fragment's register.
template <typename E>
__device__ __forceinline__ uint32_t packPair(float lo, float hi) {
  auto v = pairOf(lo, hi, E());
  uint32_t r;
  memcpy(&r, &v, sizeof(r));
  return r;
}

/// Stores two floats, rounded to E, at dst[0] and dst[1] (4-byte aligned).
template <typename E>
__device__ __forceinline__ void storePair(E *dst, float lo, float hi) {
  auto v = pairOf(lo, hi, E());
  memcpy(dst, &v, sizeof(v));
}

/// dst[0] and dst[1] as floats (4-byte aligned).
__device__ __forceinline__ float2 loadPair(const __nv_bfloat16 *src) {
  __nv_bfloat162 v;
  memcpy(&v, src, sizeof(v));
  return __bfloat1622float2(v);
}
__device__ __forceinline__ float2 loadPair(const __half *src) {
  __half2 v;
  memcpy(&v, src, sizeof(v));
  return __half22float2(v);
}

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_MMA_CUH
