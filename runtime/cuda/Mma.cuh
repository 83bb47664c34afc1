//===- Mma.cuh - Warp-level tensor-core products and their loads -*- CUDA -*-===//
//
// The PTX of the tensor-core kernels behind functions: ldmatrix (8 x 8
// matrices of 16-bit elements from shared memory into the fragments of
// mma.sync) and mma.sync.m16n8k16 with bf16 inputs and float accumulators
// (sm_80 and later). Under the CUDA emulation (emu/Emu.h) the same functions
// gather the warp's fragments on the host, with PTX's layouts.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane l,
// g = l / 4, t = l % 4, each 32-bit register two bf16 (the lower first):
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

/// c += a b for one 16 x 8 tile (a 16 x 16, b 16 x 8; bf16 in, float out).
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1) {
#ifdef BRAID_CUDA_EMULATION
  emu::mmaM16N8K16Bf16(c, a, b0, b1);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/// Two floats as one register of two bf16 (lo in the lower half), rounded
/// to nearest.
__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, sizeof(r));
  return r;
}

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_MMA_CUH
