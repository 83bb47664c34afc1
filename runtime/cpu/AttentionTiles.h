//===- AttentionTiles.h - The float attention kernels' matrix products ----===//
//
// Private to runtime/cpu. The products inside one attention block (S = Q Kᵀ,
// P V, dP = dO Vᵀ, dS K, dSᵀ Q, Pᵀ dO) are small: 64 or 128 query rows, the
// block's keys, the head dimension. OpenBLAS spends a third of its time on
// them packing both operands and zeroing the result (perf, GPT-2-small's
// shape: its copy routines 20 % of attention, its beta pass 2 %), and
// computes the whole block where causal attention needs about half of the
// diagonal blocks. tileProduct packs the right operand alone, reads the left
// one in place through any two strides, and skips the terms and outputs a
// band says are zero or unneeded.
//
// Register tiles of kTileRows rows by two vectors, compiled three times (the
// CPU's widest: AVX-512, AVX2 with FMA, the baseline's SSE2), the one
// vectorIsa (Blas.h) says. Every output element adds
// its terms in k order, in float, from zero: the same bits on any thread
// count (the caller cuts the work by shape alone), not across instruction
// sets (nor are OpenBLAS's).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_ATTENTIONTILES_H
#define BRAID_RUNTIME_CPU_ATTENTIONTILES_H

#include <cstdint>
#include <limits>

namespace braid::cpu {

/// A matrix read in place: element (r, c) at p[r · rowStride + c · colStride].
struct StridedMatrix {
  const float *p;
  int64_t rowStride, colStride;
  float at(int64_t r, int64_t c) const { return p[r * rowStride + c * colStride]; }
};

/// Which parts of a product are needed, in terms of the output row i
/// (bands of causal attention: with no band, everything).
struct ProductBand {
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max() / 4;
  /// Row i needs its columns j < i + columnsBefore only; the others may be
  /// left as they were or written with any value.
  int64_t columnsBefore = kNone;
  /// A(i, k) is zero for k < i + termsFrom and for k >= i + termsBefore:
  /// those terms are skipped (adding a zero changes no sum).
  int64_t termsFrom = -kNone, termsBefore = kNone;
};

/// C = alpha A B (accumulate: C += alpha A B) for A m × k, B k × n and C
/// m × n with rows ldc apart and contiguous columns. The k terms of every
/// element are added in order, in float, before alpha is applied.
void tileProduct(int64_t m, int64_t n, int64_t k, float alpha, StridedMatrix a,
                 StridedMatrix b, bool accumulate, float *c, int64_t ldc,
                 const ProductBand &band = {});

/// A right operand packed once for many products (a head's keys and values
/// for all of its query blocks): panels of tileColumns() columns.
/// packedFloats(n, k) floats hold n columns of k rows.
int64_t packedFloats(int64_t n, int64_t k);
void packRight(int64_t n, int64_t k, StridedMatrix b, float *packed);
/// The columns of a panel; firstColumn must be a multiple of it (every
/// instruction set's divides kTileColumnsAll).
int64_t tileColumns();
inline constexpr int64_t kTileColumnsAll = 32;
/// The most rows of a register tile (every instruction set's): a row group
/// takes the band of all of its rows, so a band's zero terms must be there
/// (written) up to kTileRowsMax - 1 past a row's own.
inline constexpr int64_t kTileRowsMax = 6;

/// tileProduct with B rows [firstK, firstK + k) and columns [firstColumn,
/// firstColumn + n) of `packed`, packRight's of a matrix of packedK rows.
void tileProductPacked(int64_t m, int64_t n, int64_t k, float alpha,
                       StridedMatrix a, const float *packed, int64_t packedK,
                       int64_t firstK, int64_t firstColumn, bool accumulate,
                       float *c, int64_t ldc, const ProductBand &band = {});

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_ATTENTIONTILES_H
