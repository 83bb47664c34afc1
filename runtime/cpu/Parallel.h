//===- Parallel.h - The CPU kernels' deterministic threading helpers ------===//
//
// Private to runtime/cpu (the kernels' .cpp files include it; Kernels.h does
// not). The loops these helpers run are split into units whose outputs are
// disjoint, and every unit runs the serial code on its own: no
// floating-point sum is ever split between threads, so the kernels' results
// are bit-identical whatever the number of threads. Including files must be
// compiled with OpenMP.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_PARALLEL_H
#define BRAID_RUNTIME_CPU_PARALLEL_H

#include <algorithm>
#include <vector>
#include <cstdint>

namespace braid::cpu {

/// Below this much work (about one multiply-add per unit) a loop stays on
/// the calling thread: waking the OpenMP team costs microseconds, more than
/// the loop itself.
inline constexpr int64_t kMinParallelWork = int64_t(1) << 15;
/// Roughly what exp, log, erf, tanh, sin/cos or a Philox draw cost in
/// multiply-adds, to weigh the loops made of them.
inline constexpr int64_t kTranscendentalCost = 8;
/// Elementwise loops are cut into blocks of this many elements. The cut does
/// not depend on the thread count, so which elements take the vectorised body
/// and which the scalar tail never changes either.
inline constexpr int64_t kElementBlock = 4096;
/// Sums over rows are taken by blocks of this many columns, each thread
/// adding all rows of its block in order: wide enough for the inner loop to
/// vectorise, narrow enough to give every thread blocks at hidden sizes.
inline constexpr int64_t kColumnBlock = 32;

/// Runs f(i) for i in [0, n), on the OpenMP threads when `work` is worth it.
/// The iterations must write disjoint outputs; each runs the same code
/// whichever thread takes it.
template <typename F>
void parallelFor(int64_t n, int64_t work, F &&f) {
#pragma omp parallel for schedule(static) if (n > 1 && work >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i)
    f(i);
}

/// Runs f(begin, end) on the consecutive blocks of `block` indices that cover
/// [0, n), in parallel; `costPerIndex` weighs one index for the threshold.
template <typename F>
void parallelBlocks(int64_t n, int64_t block, int64_t costPerIndex, F &&f) {
  int64_t blocks = (n + block - 1) / block;
  parallelFor(blocks, n * costPerIndex,
              [&](int64_t i) { f(i * block, std::min(n, (i + 1) * block)); });
}

/// dst[c] += term(r, c) for every row r in order and every column c < cols:
/// the rows' sum of each column is added in the serial order, whatever the
/// threads. term must return T (the serial code rounds every term to T).
/// A block accumulates in a local array rather than in dst, so that threads
/// do not keep writing the cache lines their neighbours' blocks share.
template <typename T, typename F>
void sumRowsInto(int64_t rows, int64_t cols, T *dst, F &&term) {
  parallelBlocks(cols, kColumnBlock, rows, [&](int64_t c0, int64_t c1) {
    T acc[kColumnBlock];
    std::copy(dst + c0, dst + c1, acc);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c)
        acc[c - c0] += term(r, c);
    std::copy(acc, acc + (c1 - c0), dst + c0);
  });
}

/// sumRowsInto for two sums over the same rows in one pass (each row's
/// inputs read once): dstA[c] += termA(r, c) and dstB[c] += termB(r, c).
template <typename T, typename FA, typename FB>
void sumRowsIntoPair(int64_t rows, int64_t cols, T *dstA, T *dstB, FA &&termA,
                     FB &&termB) {
  parallelBlocks(cols, kColumnBlock, 2 * rows, [&](int64_t c0, int64_t c1) {
    T accA[kColumnBlock], accB[kColumnBlock];
    std::copy(dstA + c0, dstA + c1, accA);
    std::copy(dstB + c0, dstB + c1, accB);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        accA[c - c0] += termA(r, c);
        accB[c - c0] += termB(r, c);
      }
    std::copy(accA, accA + (c1 - c0), dstA + c0);
    std::copy(accB, accB + (c1 - c0), dstB + c0);
  });
}

/// Sums within one unit (a row's mean, a dot product) run over kSumLanes
/// interleaved partial sums in double, added in lane order at the end: a
/// fixed order, so the same bits on any thread, and one the compiler
/// vectorises (a single running sum cannot be reordered without
/// -ffast-math, and each of its additions waits for the one before).
inline constexpr int kSumLanes = 8;

/// The sum of term(c) over c in [0, n), as above; term returns double. The
/// last n % kSumLanes terms go to lanes 0, 1, ...
template <typename F>
double laneSum(int64_t n, F &&term) {
  double part[kSumLanes] = {};
  int64_t c = 0;
  for (; c + kSumLanes <= n; c += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l)
      part[l] += term(c + l);
  for (int l = 0; c < n; ++c, ++l)
    part[l] += term(c);
  double sum = 0;
  for (int l = 0; l < kSumLanes; ++l)
    sum += part[l];
  return sum;
}

/// The mean of terms[r] over the rows whose target is not `ignoreIndex`,
/// summed in row order (so it does not depend on the threads that computed
/// the terms); their number goes to *counted. 0 when no row counts.
inline double meanOverCounted(const std::vector<double> &terms,
                              const int32_t *targets, int64_t ignoreIndex,
                              int64_t *counted) {
  double total = 0;
  int64_t n = 0;
  for (size_t r = 0; r < terms.size(); ++r) {
    if (targets[r] == ignoreIndex)
      continue;
    total += terms[r];
    ++n;
  }
  *counted = n;
  return n ? total / double(n) : 0.0;
}

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_PARALLEL_H
