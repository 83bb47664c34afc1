//===- AttentionTiles.cpp - The float attention kernels' matrix products --===//
//
// AttentionTiles.inc three times, for the baseline (SSE2), AVX2 with FMA and
// AVX-512, chosen once by nativeBlasCore (Blas.h), the same choice OpenBLAS's
// kernels get. Multiply-adds are contracted where the set has them (the
// products are not bit-for-bit across instruction sets; OpenBLAS's are not
// either).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionTiles.h"

#include "runtime/cpu/Blas.h"

#include <string>
#include <vector>

namespace braid::cpu {

namespace tiles_sse2 {
constexpr int kVectorBytes = 16;
constexpr int kTileRows = 4;
#include "runtime/cpu/AttentionTiles.inc"
} // namespace tiles_sse2

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BRAID_TILES_X86 1
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

#ifdef BRAID_TILES_X86
static_assert(kTileColumnsAll % tiles_avx512::kTileColumns == 0 &&
              kTileColumnsAll % tiles_avx2::kTileColumns == 0);
#endif
static_assert(kTileColumnsAll % tiles_sse2::kTileColumns == 0);
static_assert(tiles_sse2::kTileRows <= kTileRowsMax);
#ifdef BRAID_TILES_X86
static_assert(tiles_avx2::kTileRows <= kTileRowsMax &&
              tiles_avx512::kTileRows <= kTileRowsMax);
#endif

namespace {
enum class Isa { Sse2, Avx2, Avx512 };

Isa nativeIsa() {
  static const Isa isa = [] {
#ifdef BRAID_TILES_X86
    std::string core = nativeBlasCore();
    if (core == "SkylakeX")
      return Isa::Avx512;
    if (core == "Haswell")
      return Isa::Avx2;
#endif
    return Isa::Sse2;
  }();
  return isa;
}

/// setTileProductIsa's choice, if any.
int isaOverride = -1;

Isa chosenIsa() {
  return isaOverride >= 0 ? Isa(isaOverride) : nativeIsa();
}
} // namespace

bool setTileProductIsa(const char *name) {
  std::string isa = name;
  if (isa.empty()) {
    isaOverride = -1;
    return true;
  }
  Isa wanted;
  if (isa == "sse2")
    wanted = Isa::Sse2;
  else if (isa == "avx2")
    wanted = Isa::Avx2;
  else if (isa == "avx512")
    wanted = Isa::Avx512;
  else
    return false;
  // The native set's predecessors run too.
  if (int(wanted) > int(nativeIsa()))
    return false;
  isaOverride = int(wanted);
  return true;
}

const char *tileProductIsa() {
  switch (chosenIsa()) {
  case Isa::Avx512:
    return "avx512";
  case Isa::Avx2:
    return "avx2";
  case Isa::Sse2:
    break;
  }
  return "sse2";
}

// Calls F with the chosen instruction set's namespace's functions.
#ifdef BRAID_TILES_X86
#define BRAID_TILES_DISPATCH(CALL)                                             \
  switch (chosenIsa()) {                                                       \
  case Isa::Avx512: {                                                          \
    namespace isa = tiles_avx512;                                              \
    CALL;                                                                      \
  }                                                                            \
  case Isa::Avx2: {                                                            \
    namespace isa = tiles_avx2;                                                \
    CALL;                                                                      \
  }                                                                            \
  case Isa::Sse2:                                                              \
    break;                                                                     \
  }                                                                            \
  {                                                                            \
    namespace isa = tiles_sse2;                                                \
    CALL;                                                                      \
  }
#else
#define BRAID_TILES_DISPATCH(CALL)                                             \
  {                                                                            \
    namespace isa = tiles_sse2;                                                \
    CALL;                                                                      \
  }
#endif

int64_t packedFloats(int64_t n, int64_t k) {
  BRAID_TILES_DISPATCH(return isa::packedFloats(n, k))
}

int64_t tileColumns() { BRAID_TILES_DISPATCH(return isa::kTileColumns) }

void packRight(int64_t n, int64_t k, StridedMatrix b, float *packed) {
  BRAID_TILES_DISPATCH(return isa::packRight(n, k, b, packed))
}

void tileProductPacked(int64_t m, int64_t n, int64_t k, float alpha,
                       StridedMatrix a, const float *packed, int64_t packedK,
                       int64_t firstK, int64_t firstColumn, bool accumulate,
                       float *c, int64_t ldc, const ProductBand &band) {
  if (m <= 0 || n <= 0)
    return;
  BRAID_TILES_DISPATCH(return isa::product(
      m, n, k, alpha, a,
      packed + firstColumn * packedK + firstK * isa::kTileColumns, packedK,
      isa::kTileColumns, accumulate, c, ldc, band))
}

void tileProduct(int64_t m, int64_t n, int64_t k, float alpha, StridedMatrix a,
                 StridedMatrix b, bool accumulate, float *c, int64_t ldc,
                 const ProductBand &band) {
  if (m <= 0 || n <= 0)
    return;
  // B read in place where its rows are whole panels.
  if (b.colStride == 1 && n % tileColumns() == 0) {
    BRAID_TILES_DISPATCH(return isa::product(m, n, k, alpha, a, b.p, 1,
                                             b.rowStride, accumulate, c, ldc,
                                             band))
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
