//===- VocabParallel.h - Vocabulary-parallel embedding and loss (CPU) -----===//
//
// Tensor parallelism splits the embedding table and the output layer's
// logits by vocabulary rows across `tp` ranks: rank t holds the ids
// [vocabStart, vocabStart + localVocab). These are one rank's kernels; the
// runtime runs the collectives between them, and no rank ever holds
// full-vocabulary logits:
//
//   embedding:     embeddingForwardRange, then all-reduce(sum) of `out`;
//                  embeddingBackwardRange on the replicated dout, no
//                  collective (each rank updates only its rows).
//   cross-entropy: crossEntropyRowMax, all-reduce(max) -> globalMax;
//                  crossEntropyPartial, all-reduce(sum) -> summed;
//                  crossEntropyFinish (the loss, lse, counted, identical on
//                  every rank); crossEntropyBackwardRange on the local logits.
//
// Conventions are Kernels.h's: "rows" is the product of the leading
// dimensions, parameter gradients accumulate (+=), activation gradients are
// overwritten, sums are taken in double, and the results are bit-identical
// whatever the number of threads. With tp = 1 (vocabStart 0, the whole
// vocabulary local) the embedding kernels equal embeddingForward/Backward
// bit for bit and the loss equals crossEntropyForward's up to the rounding
// of the exponential sum to T.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_VOCABPARALLEL_H
#define BRAID_RUNTIME_CPU_VOCABPARALLEL_H

#include <cstdint>

namespace braid::cpu {

//===-- Embedding ---------------------------------------------------------===//

/// out[r,:] = table[ids[r] - vocabStart, :] when vocabStart <= ids[r] <
/// vocabStart + localVocab, else 0 (another rank holds that row; the ranks'
/// outputs are summed afterwards). `table` is this rank's [localVocab,
/// hidden] slice; ids may be anything.
template <typename T>
void embeddingForwardRange(const T *table, const int32_t *ids, int64_t rows,
                           int64_t hidden, int64_t vocabStart,
                           int64_t localVocab, T *out);
/// dtable[ids[r] - vocabStart, :] += dout[r, :] for the ids in this rank's
/// range (accumulates, like embeddingBackward); the other rows of dout are
/// skipped. Each table row adds its rows of dout in row order, as
/// embeddingBackward does, so the slices of all ranks concatenated equal
/// embeddingBackward's dtable bit for bit.
template <typename T>
void embeddingBackwardRange(const T *dout, const int32_t *ids, int64_t rows,
                            int64_t hidden, int64_t vocabStart,
                            int64_t localVocab, T *dtable);

//===-- Cross-entropy -----------------------------------------------------===//

/// rowMax[r] = max over this rank's columns of logits[r, :] (the ranks'
/// maxima are then reduced with max). `logits` is [rows, vocab] with `vocab`
/// this rank's number of columns; -infinity when vocab is 0.
template <typename T>
void crossEntropyRowMax(const T *logits, int64_t rows, int64_t vocab,
                        T *rowMax);
/// partial[2r] = sum_c exp(logits[r,c] - globalMax[r]) (accumulated in
/// double, rounded to T once); partial[2r+1] = logits[r, target[r] -
/// vocabStart] when the target is in this rank's range, else 0; both 0 for
/// rows whose target is ignoreIndex. (The ranks' partials are then summed.)
/// `partial` holds 2 * rows values, interleaved so that one all-reduce sums
/// both.
template <typename T>
void crossEntropyPartial(const T *logits, const int32_t *targets,
                         const T *globalMax, int64_t rows, int64_t vocab,
                         int64_t vocabStart, int64_t ignoreIndex, T *partial);
/// From the summed partials: lse[r] = globalMax[r] + log(summed[2r]); returns
/// the mean over rows whose target is not ignoreIndex of lse[r] -
/// summed[2r+1] (0 when none), and their number in *counted. Same
/// conventions as crossEntropyForward: the per-row terms are taken in double
/// and added in row order. On ignored rows (whose partials are 0) lse[r] is
/// set to globalMax[r]; backward does not read it there.
template <typename T>
T crossEntropyFinish(const T *summed, const T *globalMax,
                     const int32_t *targets, int64_t rows, int64_t ignoreIndex,
                     T *lse, int64_t *counted);
/// dlogits[r,c] = dloss * (exp(logits[r,c] - lse[r]) - [c + vocabStart ==
/// target[r]]) / counted; 0 on ignored rows. Same conventions as
/// crossEntropyBackward (dlogits is overwritten; `vocab` is this rank's
/// number of columns).
template <typename T>
void crossEntropyBackwardRange(const T *logits, const int32_t *targets,
                               const T *lse, T dloss, int64_t rows,
                               int64_t vocab, int64_t vocabStart,
                               int64_t ignoreIndex, int64_t counted,
                               T *dlogits);

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_VOCABPARALLEL_H
