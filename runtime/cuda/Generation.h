//===- Generation.h - CUDA kernels of generation with a KV cache *- C++ -*-===//
//
// The CUDA counterparts of runtime/cpu/Generation.h (ROPE_AT's is
// ropeAtForward in Kernels.h): attention against the KV cache, the row of
// each sequence to draw from, the draw, and beam search's most likely
// tokens and reordering of the caches; under tensor parallelism, each
// rank's best candidates, which the draw and the ranking then take in
// place of a whole row. T is float, bf16 or fp16 storage; arithmetic in
// float (the sampling's in double and integers, as the CPU's). Nothing
// synchronises with the host or allocates; each launcher returns the
// launch's error.
//
// Positions, indices and parents are read on the device, where nothing can
// refuse one out of its range (the CPU executor refuses them): the kernels
// skip such a row's cache write and write zeros for its output row, and
// REORDER_ROWS leaves such a row as it was.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_GENERATION_H
#define BRAID_RUNTIME_CUDA_GENERATION_H

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Sampling.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

/// The largest head dimension attentionCachedForward takes (its block keeps
/// the query row and the output row in 48 KiB of shared memory).
constexpr int64_t kMaxCachedAttentionHeadDim = 4096;

/// ATTENTION_CACHED, as cpu::attentionCachedForward: first (one launch) every
/// row (b, t) of k and v into the caches at positions[b, t], the rows of a
/// sequence in order; then each (b, t, head) attends to the cache's
/// positions [0, positions[b, t]] with an online softmax. Head dimensions
/// up to 256: the keys in attentionCachedSplits(s, cacheLen) ranges, one
/// block each (flash decoding: a decode step's few rows still fill the
/// GPU), its warps one key at a time, the ranges merged by a second launch
/// through `workspace` (attentionCachedWorkspaceBytes; null when that is
/// 0). Larger head dimensions: one block per (b, t, head), keys in chunks.
/// `s` as ATTENTION's with s.seq = T; s.headDim at most
/// kMaxCachedAttentionHeadDim.
template <typename T>
cudaError_t attentionCachedForward(const T *q, const T *k, const T *v,
                                   const int32_t *positions,
                                   const cpu::AttentionShape &s,
                                   int64_t cacheLen, T *cacheK, T *cacheV,
                                   T *out, float *workspace,
                                   cudaStream_t stream);

/// The key ranges attentionCachedForward splits each (b, t, head) into: as
/// many as make about kCachedSplitBlocks blocks, each of at least
/// kCachedSplitMinKeys of the cache's positions; 0 for head dimensions
/// above 256 (the one-block kernel).
constexpr int64_t kCachedSplitMinKeys = 64, kCachedSplitBlocks = 1024;
int64_t attentionCachedSplits(const cpu::AttentionShape &s, int64_t cacheLen);
/// Bytes of attentionCachedForward's workspace: the ranges' partial results
/// (max, sum and a row of head dimension floats each) where there are
/// several, else 0.
int64_t attentionCachedWorkspaceBytes(const cpu::AttentionShape &s,
                                      int64_t cacheLen);

/// TAKE_ROWS: y[b, 0, :] = x[b, index[b], :] (zeros for an index outside
/// [0, seq)).
template <typename T>
cudaError_t takeRows(const T *x, const int32_t *index, int64_t batch,
                     int64_t seq, int64_t cols, T *y, cudaStream_t stream);

/// The candidates' empty slot and the candidates' description
/// (runtime/cpu/Sampling.h), with device pointers.
using cpu::Candidates;
using cpu::kNoCandidate;

/// SAMPLE, as cpu::sampleTokens on the same logits (the same ids): one
/// block per row. settings {temperature, top_k, top_p} (f32), seed {low,
/// high} and counters [rows] are read on the device; settings the host
/// would refuse (cpu::validateSamplingSettings) are read as
/// cpu::samplingRule reads them. The kept tokens are found by radix
/// selection on the tokens' keys (no sort): top-k's k-th largest z, top-p's
/// first kept token and the drawn one, each a byte of the key per pass.
/// With `from.ids`, as cpu::sampleTokens' `from`: every column is a
/// candidate, ordered among equal logits by its id, which is what ids[b]
/// gets; from.vocabSize scales the rule and the weights.
template <typename T>
cudaError_t sampleTokens(const T *logits, int64_t rows, int64_t vocab,
                         int64_t candidates, const float *settings,
                         const int32_t *seed, const int32_t *counters,
                         int32_t *ids, cudaStream_t stream,
                         const Candidates<T> &from = {});

/// TOKEN_LOGPROBS, as cpu::tokenLogprobs on the same logits (the same
/// greedy flags; the log-probabilities within float rounding of the CPU's
/// double normaliser): one block per row of logits [rows, columns], of
/// whose columns the first `vocab` are the vocabulary; the maximum and
/// sum(exp(x - max)) by block reductions (exp in float, summed in double),
/// the first column of the largest logit by a block reduction on the keys
/// (samplingKey, ties by the lower column). The targets are below `vocab`
/// or negative (the executor checks).
template <typename T>
cudaError_t tokenLogprobs(const T *logits, const int32_t *targets,
                          int64_t rows, int64_t columns, int64_t vocab,
                          float *logprobs, int32_t *greedy,
                          cudaStream_t stream);

/// TOKEN_LOGPROBS_PARTIAL, as cpu::tokenLogprobsPartial on the same logits
/// (float partials): one block per row.
template <typename T>
cudaError_t tokenLogprobsPartial(const T *logits, const int32_t *targets,
                                 int64_t rows, int64_t columns,
                                 int64_t vocabStart, int64_t vocab,
                                 float *partial, cudaStream_t stream);

/// TOKEN_LOGPROBS_FINISH, as cpu::tokenLogprobsFinish: one thread per row.
cudaError_t tokenLogprobsFinish(const float *gathered, const int32_t *targets,
                                int64_t rows, int64_t slices, float *logprobs,
                                int32_t *greedy, cudaStream_t stream);

/// The most ids per row topLogprobs ranks (its block sorts them in shared
/// memory, 8 bytes each, within a block's 48 KiB).
constexpr int64_t kMaxTopLogprobs = 4096;

/// TOP_LOGPROBS, as cpu::topLogprobs on the same logits (the same ids, in
/// the same order; the values within float rounding of the CPU's double
/// normaliser): one block per row of logits [rows, vocab], of whose columns
/// the first `candidates` are the vocabulary. The maximum and
/// sum(exp(x - max)) by block reductions (exp in float, summed in double);
/// the k-th most likely id by radix selection on the ids' keys (a byte per
/// pass, as SAMPLE's selections); then the k ids at least as likely ranked
/// in shared memory. k in [1, min(candidates, kMaxTopLogprobs)]. With
/// `from.ids` and `from.lse`, as cpu::topLogprobs' `from`: every column is
/// a candidate with its id (ties by it; ids[r, j] gets it), k at most
/// min(vocab, kMaxTopLogprobs), and the normaliser the log-sum-exp of the
/// row's from.lseCount values of from.lse, in double.
///
/// With `workspace` (topLogprobsWorkspaceBytes of it) and no `from.ids`, a
/// row of many columns is split over several blocks: each ranks its slice's
/// k best and its slice's maximum and sum of exponentials, then one block
/// per row ranks those candidates and combines the slices' sums (in
/// double, each scaled by exp(its maximum - the row's)). Decode's row of
/// the whole vocabulary otherwise keeps one of the GPU's multiprocessors
/// busy for most of a token's time.
template <typename T>
cudaError_t topLogprobs(const T *logits, int64_t rows, int64_t vocab,
                        int64_t candidates, int64_t k, float *values,
                        int32_t *ids, cudaStream_t stream,
                        const Candidates<T> &from = {},
                        void *workspace = nullptr);
/// The slices topLogprobs splits each row into (1: one block per row).
int64_t topLogprobsSlices(int64_t rows, int64_t candidates, int64_t k);
/// The bytes of workspace topLogprobs splits rows with (0 where it does
/// not).
int64_t topLogprobsWorkspaceBytes(int64_t rows, int64_t candidates,
                                  int64_t k);

/// TOP_CANDIDATES, as cpu::topCandidates on the same logits (the same
/// values and ids, in the same order; lse within float rounding of the
/// CPU's double sum): one block per row of logits [rows, cols], column j
/// the token vocabStart + j (those at or above vocabSize padding, never a
/// candidate). The k-th best valid column by radix selection on the
/// columns' keys (as topLogprobs), the k best ranked in shared memory;
/// the slots past the valid columns' count -infinity and kNoCandidate.
/// lse[r] = m + log(sum exp(x - m)) over the valid columns (exp in float,
/// summed in double, rounded to T; -infinity when none is valid). k in
/// [0, kMaxTopLogprobs].
template <typename T>
cudaError_t topCandidates(const T *logits, int64_t rows, int64_t cols,
                          int64_t vocabStart, int64_t vocabSize, int64_t k,
                          T *values, int32_t *ids, T *lse, cudaStream_t stream);

/// REORDER_ROWS, as cpu::reorderRows on the bytes of x [rows, rowBytes]
/// (whatever its dtype): x copied into `scratch` (rows · rowBytes bytes,
/// on the stream), then each row b from the copy of row parents[b]. A
/// parent outside [0, rows): row b is left as it was.
cudaError_t reorderRows(void *x, const int32_t *parents, int64_t rows,
                        int64_t rowBytes, void *scratch, cudaStream_t stream);

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_GENERATION_H
