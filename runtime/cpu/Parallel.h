//===- Parallel.h - The CPU kernels' deterministic threading helpers ------===//
//
// Private to runtime/cpu (the kernels' .cpp files include it; Kernels.h does
// not). The loops these helpers run are split into units whose outputs are
// disjoint, and every unit runs the serial code on its own. Where a sum is
// split (column sums over many rows: columnSumsByRowBlocks), the cut depends
// on the shape alone and the parts are added in a fixed order. So the
// kernels' results are bit-identical whatever the number of threads.
// Including files must be compiled with OpenMP.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_PARALLEL_H
#define BRAID_RUNTIME_CPU_PARALLEL_H

#include <algorithm>
#include <initializer_list>
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
/// Loops down columns (an embedding table's rows of gradient, the last step
/// of columnSumsByRowBlocks) go by blocks of this many columns: wide enough
/// for the inner loop to vectorise, narrow enough to give every thread
/// blocks at hidden sizes.
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

/// Column sums over rows go by blocks of rows: each block of consecutive rows
/// adds its terms into partial sums of its own (in double, rows in order),
/// and the blocks' partial sums are then added up in block order. A block
/// has at least this many rows, and there are at most kMaxRowBlocks blocks.
/// The cut depends on the row count alone, so the sums have the same bits on
/// any number of threads. Going along rows (rather than down columns) reads
/// each input once, in order, and lets a kernel do the rest of its work on
/// the same rows while they are in the cache (the norms' backward).
inline constexpr int64_t kRowBlock = 32;
inline constexpr int64_t kMaxRowBlocks = 32;

/// The rows per block of columnSumsByRowBlocks for `rows` rows.
inline int64_t rowBlockSize(int64_t rows) {
  return std::max(kRowBlock, (rows + kMaxRowBlocks - 1) / kMaxRowBlocks);
}

/// For each of the `sums` column sums: dst[s][c] += the sum over every row
/// of that sum's term at column c < cols. block(r0, r1, part) is run on every
/// block of rows [r0, r1), in parallel, and adds its rows' terms of sum s, in
/// row order, into part[s * cols + c] (zeroed before; doubles); it may also
/// write outputs of its own rows alone. The blocks' sums are added in block
/// order and rounded once to T into dst. `costPerRow` weighs a row for the
/// threshold of parallelFor.
template <typename T, typename F>
void columnSumsByRowBlocks(int64_t rows, int64_t cols,
                           std::initializer_list<T *> dst, int64_t costPerRow,
                           F &&block) {
  const int64_t sums = int64_t(dst.size());
  const int64_t size = rowBlockSize(rows);
  const int64_t blocks = (rows + size - 1) / size;
  std::vector<double> part(size_t(blocks * sums * cols), 0.0);
  parallelFor(blocks, rows * costPerRow, [&](int64_t b) {
    block(b * size, std::min(rows, (b + 1) * size),
          part.data() + b * sums * cols);
  });
  const std::vector<T *> out(dst);
  parallelBlocks(cols, kColumnBlock, blocks * sums,
                 [&](int64_t c0, int64_t c1) {
                   for (int64_t s = 0; s < sums; ++s)
                     for (int64_t c = c0; c < c1; ++c) {
                       double total = 0;
                       for (int64_t b = 0; b < blocks; ++b)
                         total += part[(b * sums + s) * cols + c];
                       out[s][c] = T(out[s][c] + total);
                     }
                 });
}

/// dst[c] += the sum of term(r, c) (a double) over every row r, for every
/// column c < cols, by columnSumsByRowBlocks.
template <typename T, typename F>
void sumRowsInto(int64_t rows, int64_t cols, T *dst, F &&term) {
  columnSumsByRowBlocks(rows, cols, {dst}, cols,
                        [&](int64_t r0, int64_t r1, double *part) {
                          for (int64_t r = r0; r < r1; ++r)
                            for (int64_t c = 0; c < cols; ++c)
                              part[c] += term(r, c);
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
