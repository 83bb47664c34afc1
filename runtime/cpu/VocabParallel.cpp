//===- VocabParallel.cpp - Vocabulary-parallel embedding and loss (CPU) ---===//
//
// Each kernel runs the same per-row (or per-column-block) code as its
// full-vocabulary counterpart in Kernels.cpp, restricted to this rank's ids,
// so that the only differences from the serial kernels are where the ranks'
// values are combined: the exponential sums, rounded to T before the
// all-reduce adds them. Threads follow Parallel.h: disjoint outputs per unit,
// the loss added in row order after the parallel loop.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/VocabParallel.h"

#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/VectorLoops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace braid::cpu {
namespace {

/// Whether `id` is one of the ids [vocabStart, vocabStart + localVocab).
bool inRange(int64_t id, int64_t vocabStart, int64_t localVocab) {
  return id >= vocabStart && id - vocabStart < localVocab;
}

} // namespace

//===-- Embedding ---------------------------------------------------------===//

template <typename T>
void embeddingForwardRange(const T *table, const int32_t *ids, int64_t rows,
                           int64_t hidden, int64_t vocabStart,
                           int64_t localVocab, T *out) {
  parallelFor(rows, rows * hidden, [&](int64_t r) {
    T *o = out + r * hidden;
    int64_t id = ids[r];
    if (!inRange(id, vocabStart, localVocab)) {
      std::fill_n(o, hidden, T(0));
      return;
    }
    std::copy_n(table + (id - vocabStart) * hidden, hidden, o);
  });
}

template <typename T>
void embeddingBackwardRange(const T *dout, const int32_t *ids, int64_t rows,
                            int64_t hidden, int64_t vocabStart,
                            int64_t localVocab, T *dtable) {
  // The rows whose id is ours, in order, found once rather than once per
  // column block (with tp ranks most rows are another rank's).
  std::vector<int64_t> mine;
  for (int64_t r = 0; r < rows; ++r)
    if (inRange(ids[r], vocabStart, localVocab))
      mine.push_back(r);
  // Rows may share an id, so threads take column blocks (each adding its
  // rows in order) rather than rows, as embeddingBackward does.
  int64_t n = static_cast<int64_t>(mine.size());
  parallelBlocks(hidden, kColumnBlock, n, [&](int64_t c0, int64_t c1) {
    for (int64_t r : mine) {
      T *row = dtable + (static_cast<int64_t>(ids[r]) - vocabStart) * hidden;
      const T *g = dout + r * hidden;
      for (int64_t c = c0; c < c1; ++c)
        row[c] += g[c];
    }
  });
}

//===-- Cross-entropy -----------------------------------------------------===//

template <typename T>
void crossEntropyRowMax(const T *logits, int64_t rows, int64_t vocab,
                        T *rowMax) {
  parallelFor(rows, rows * vocab, [&](int64_t r) {
    const T *row = logits + r * vocab;
    if constexpr (std::is_same_v<T, float>)
      rowMax[r] = maxOf(row, vocab);
    else
      rowMax[r] = vocab ? *std::max_element(row, row + vocab)
                        : -std::numeric_limits<T>::infinity();
  });
}

template <typename T>
void crossEntropyPartial(const T *logits, const int32_t *targets,
                         const T *globalMax, int64_t rows, int64_t vocab,
                         int64_t vocabStart, int64_t ignoreIndex, T *partial) {
  parallelFor(rows, rows * vocab * kTranscendentalCost, [&](int64_t r) {
    int64_t target = targets[r];
    if (target == ignoreIndex) {
      partial[2 * r] = partial[2 * r + 1] = T(0);
      return;
    }
    // As crossEntropyForward: in double, T - double, exp and the sum; in
    // float, VectorLoops' exp summed in double.
    const T *row = logits + r * vocab;
    double m = globalMax[r], sum = 0;
    if constexpr (std::is_same_v<T, float>) {
      sum = sumExpShifted(row, vocab, globalMax[r]);
    } else {
      for (int64_t c = 0; c < vocab; ++c)
        sum += std::exp(row[c] - m);
    }
    partial[2 * r] = T(sum);
    partial[2 * r + 1] =
        inRange(target, vocabStart, vocab) ? row[target - vocabStart] : T(0);
  });
}

template <typename T>
T crossEntropyFinish(const T *summed, const T *globalMax,
                     const int32_t *targets, int64_t rows, int64_t ignoreIndex,
                     T *lse, int64_t *counted) {
  // Rows in parallel, each leaving its loss term in `terms`; the terms are
  // then added in row order, so the sum does not depend on the threads.
  std::vector<double> terms(rows);
  parallelFor(rows, rows * kTranscendentalCost, [&](int64_t r) {
    if (targets[r] == ignoreIndex) {
      lse[r] = globalMax[r]; // the partials are 0 here: no log(0)
      terms[r] = 0.0;
      return;
    }
    double l = double(globalMax[r]) + std::log(double(summed[2 * r]));
    lse[r] = T(l);
    terms[r] = l - double(summed[2 * r + 1]);
  });
  return T(meanOverCounted(terms, targets, ignoreIndex, counted));
}

template <typename T>
void crossEntropyBackwardRange(const T *logits, const int32_t *targets,
                               const T *lse, T dloss, int64_t rows,
                               int64_t vocab, int64_t vocabStart,
                               int64_t ignoreIndex, int64_t counted,
                               T *dlogits) {
  double scale = counted ? double(dloss) / counted : 0.0;
  parallelFor(rows, rows * vocab * kTranscendentalCost, [&](int64_t r) {
    T *g = dlogits + r * vocab;
    int64_t target = targets[r];
    if (target == ignoreIndex) {
      std::fill_n(g, vocab, T(0));
      return;
    }
    softmaxTimes(logits + r * vocab, vocab, lse[r], scale, g);
    if (inRange(target, vocabStart, vocab))
      g[target - vocabStart] -= T(scale);
  });
}

//===-- Instantiations ----------------------------------------------------===//

#define BRAID_INSTANTIATE(T)                                                   \
  template void embeddingForwardRange<T>(const T *, const int32_t *, int64_t,  \
                                         int64_t, int64_t, int64_t, T *);      \
  template void embeddingBackwardRange<T>(const T *, const int32_t *, int64_t, \
                                          int64_t, int64_t, int64_t, T *);     \
  template void crossEntropyRowMax<T>(const T *, int64_t, int64_t, T *);       \
  template void crossEntropyPartial<T>(const T *, const int32_t *, const T *,  \
                                       int64_t, int64_t, int64_t, int64_t,     \
                                       T *);                                   \
  template T crossEntropyFinish<T>(const T *, const T *, const int32_t *,      \
                                   int64_t, int64_t, T *, int64_t *);          \
  template void crossEntropyBackwardRange<T>(const T *, const int32_t *,       \
                                             const T *, T, int64_t, int64_t,   \
                                             int64_t, int64_t, int64_t, T *);

BRAID_INSTANTIATE(float)
BRAID_INSTANTIATE(double)
#undef BRAID_INSTANTIATE

} // namespace braid::cpu
