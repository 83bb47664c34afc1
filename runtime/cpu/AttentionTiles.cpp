//===- AttentionTiles.cpp - The float attention kernels' matrix products --===//
//
// AttentionTiles.inc three times, for the baseline (SSE2), AVX2 with FMA and
// AVX-512, the one vectorIsa (Blas.h) says: the choice OpenBLAS's kernels
// get, or a test's. Multiply-adds are contracted where the set has them (the
// products are not bit-for-bit across instruction sets; OpenBLAS's are not
// either).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionTiles.h"

#include "runtime/cpu/Blas.h"

#include <vector>

namespace braid::cpu {

namespace tiles_sse2 {
constexpr int kVectorBytes = 16;
constexpr int kTileRows = 4;
#include "runtime/cpu/AttentionTiles.inc"
} // namespace tiles_sse2

#ifdef BRAID_CPU_X86_CLONES
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace tiles_avx2 {
constexpr int kVectorBytes = 32;
constexpr int kTileRows = 6;
#include "runtime/cpu/AttentionTiles.inc"
} // namespace tiles_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
namespace tiles_avx512 {
constexpr int kVectorBytes = 64;
constexpr int kTileRows = 6;
#include "runtime/cpu/AttentionTiles.inc"
} // namespace tiles_avx512
#pragma GCC pop_options
#endif

#ifdef BRAID_CPU_X86_CLONES
static_assert(kTileColumnsAll % tiles_avx512::kTileColumns == 0 &&
              kTileColumnsAll % tiles_avx2::kTileColumns == 0);
#endif
static_assert(kTileColumnsAll % tiles_sse2::kTileColumns == 0);
static_assert(tiles_sse2::kTileRows <= kTileRowsMax);
#ifdef BRAID_CPU_X86_CLONES
static_assert(tiles_avx2::kTileRows <= kTileRowsMax &&
              tiles_avx512::kTileRows <= kTileRowsMax);
#endif

int64_t packedFloats(int64_t n, int64_t k) {
  BRAID_VECTOR_DISPATCH(tiles, return isa::packedFloats(n, k));
}

int64_t tileColumns() {
  BRAID_VECTOR_DISPATCH(tiles, return isa::kTileColumns);
}

void packRight(int64_t n, int64_t k, StridedMatrix b, float *packed) {
  BRAID_VECTOR_DISPATCH(tiles, return isa::packRight(n, k, b, packed));
}

void tileProductPacked(int64_t m, int64_t n, int64_t k, float alpha,
                       StridedMatrix a, const float *packed, int64_t packedK,
                       int64_t firstK, int64_t firstColumn, bool accumulate,
                       float *c, int64_t ldc, const ProductBand &band) {
  if (m <= 0 || n <= 0)
    return;
  BRAID_VECTOR_DISPATCH(
      tiles, return isa::product(
                 m, n, k, alpha, a,
                 packed + firstColumn * packedK + firstK * isa::kTileColumns,
                 packedK, isa::kTileColumns, accumulate, c, ldc, band));
}

void tileProduct(int64_t m, int64_t n, int64_t k, float alpha, StridedMatrix a,
                 StridedMatrix b, bool accumulate, float *c, int64_t ldc,
                 const ProductBand &band) {
  if (m <= 0 || n <= 0)
    return;
  // B read in place where its rows are whole panels.
  if (b.colStride == 1 && n % tileColumns() == 0) {
    BRAID_VECTOR_DISPATCH(tiles, return isa::product(m, n, k, alpha, a, b.p, 1,
                                                     b.rowStride, accumulate, c,
                                                     ldc, band));
  }
  // Else packed: per thread, grown to the largest product.
  thread_local std::vector<float> packed;
  size_t floats = size_t(packedFloats(n, k));
  if (packed.size() < floats)
    packed.resize(floats);
  packRight(n, k, b, packed.data());
  tileProductPacked(m, n, k, alpha, a, packed.data(), k, 0, 0, accumulate, c,
                    ldc, band);
}

} // namespace braid::cpu
