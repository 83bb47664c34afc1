//===- Generation.h - CPU kernels of generation with a KV cache -*- C++ -*-===//
//
// The kernels an inference plan (plan.proto's Generation) adds to the
// forward's: attention against a cache of every position's keys and values
// (ATTENTION_CACHED), the row of each sequence whose logits are drawn from
// (TAKE_ROWS), the draw (SAMPLE), and beam search's most likely next tokens
// (TOP_LOGPROBS) and reordering of the caches (REORDER_ROWS). The rotation
// at given positions (ROPE_AT) is ropeAtForward in Kernels.h, ROPE's own
// loop. B sequences, T new positions each per call, a cache of S positions
// per sequence. Conventions as in Kernels.h: raw row-major buffers, T float
// or double, OpenMP over units with disjoint outputs, so that the results
// are bit-identical whatever the number of threads.
//
// Positions, indices and parents outside their ranges are the executor's
// to refuse (it names the instruction); given one anyway, the kernels do
// what the CUDA kernels do, which cannot refuse: skip the row's cache write
// and write zeros for its output, or for REORDER_ROWS leave the row as it
// was.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_GENERATION_H
#define BRAID_RUNTIME_CPU_GENERATION_H

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Sampling.h"

#include "absl/status/status.h"

#include <cstdint>

namespace braid::cpu {

/// ATTENTION_CACHED: q [B, T, heads · d], k and v [B, T, kvHeads · d],
/// positions [B, T], caches [B, cacheLen, kvHeads · d] updated in place, out
/// [B, T, heads · d]; `s` as ATTENTION's with s.seq = T (s.causal unused:
/// the keys are always the cache's positions up to the query's).
///
/// First every row (b, t) of k and v is written into the caches at position
/// p = positions[b, t] (rows in order of t, so a position given twice keeps
/// the later row); only then does any query read. Query (b, t), head h,
/// attends to the cache's positions j in [0, p] of its kv head (GQA and
/// head slices as AttentionShape::kvHeadOf):
///   out = Σ_j softmax_j(scale · q · cacheK[b, j] - slope_h · (p - j))
///             · cacheV[b, j]
/// with ALiBi's slope_h (alibiSlopes, of head headOffset + h) when s.alibi,
/// else no bias. So a prompt's chunk attends to itself (causally) and to
/// what earlier calls wrote; the positions below p that no call wrote are
/// the caller's to have filled. Positions outside [0, cacheLen): no write,
/// out's row zeros.
template <typename T>
void attentionCachedForward(const T *q, const T *k, const T *v,
                            const int32_t *positions, const AttentionShape &s,
                            int64_t cacheLen, T *cacheK, T *cacheV, T *out);

/// TAKE_ROWS: y[b, 0, :] = x[b, index[b], :] for x [batch, seq, cols], y
/// [batch, 1, cols]. An index outside [0, seq): y's row zeros.
template <typename T>
void takeRows(const T *x, const int32_t *index, int64_t batch, int64_t seq,
              int64_t cols, T *y);

/// SAMPLE's settings {temperature, top_k, top_p}: InvalidArgument, naming
/// the setting, unless temperature is finite and >= 0 (0: greedy), top_k
/// finite and >= 0 (0: every candidate) and top_p in (0, 1] (1: every
/// token).
absl::Status validateSamplingSettings(const float *settings);

/// SAMPLE: ids[b] = the next token of row b of logits [rows, vocab], whose
/// first `candidates` columns are the vocabulary (the rest is padding,
/// never drawn). With settings {temperature, top_k, top_p} (validated; read
/// as cpu::samplingRule reads them), Hugging Face's logits processors in
/// their order:
///  - temperature 0: the argmax of the candidates, ties the lowest id; done.
///  - z = logits / temperature, in double.
///  - top_k in (0, candidates): keep the tokens whose z is at least the k-th
///    largest (ties kept, as TopKLogitsWarper).
///  - top_p < 1: the kept tokens least likely first (ascending z, equal z by
///    descending id) with their cumulative probability; drop those at most
///    1 - top_p, never the most likely (TopPLogitsWarper with
///    min_tokens_to_keep 1).
///  - the draw: u = samplingUniform(seed, counters[b], b) (Philox.h); the
///    kept tokens most likely first (descending z, equal z by ascending id);
///    the first whose cumulative probability exceeds u times the kept total.
/// The probabilities are the integer weights of Sampling.h
/// (exp(z - max z) scaled by 2^samplingWeightShift(candidates) and
/// truncated), so that the CUDA kernel draws the same ids; a row whose
/// weights are all 0 (infinite or NaN logits) takes the argmax of z.
///
/// With `from.ids`, every column of a row is a candidate (`candidates` is
/// `vocab`) whose id is from.ids' (the ids order ties and are what ids[b]
/// gets), and from.vocabSize stands for `candidates` in top_k's limit and
/// the weights' scale. When the candidates hold the whole vocabulary's k
/// best tokens of a row (TOP_CANDIDATES' on every rank, gathered) and
/// top_k is in [1, k], or the temperature is 0, the id is the one the
/// whole row gives: the truncations keep the same tokens, with the same
/// weights, in the same order. (A tie at the k-th largest z that spreads
/// past a rank's k candidates is the exception: the whole row keeps every
/// tied token.)
template <typename T>
void sampleTokens(const T *logits, int64_t rows, int64_t vocab,
                  int64_t candidates, const float *settings, uint64_t seed,
                  const int32_t *counters, int32_t *ids,
                  const Candidates<T> &from = {});

/// TOP_LOGPROBS: for each row r of logits [rows, vocab], whose first
/// `candidates` columns are the vocabulary (the rest is padding, never
/// chosen), the k ids (1 <= k <= candidates) of the largest
/// log-probabilities
///   log_softmax(x)_i = x_i - m - log(sum_{j < candidates} exp(x_j - m)),
///   m = max_{j < candidates} x_j,
/// most likely first, equal logits by ascending id: ids[r, j] for j < k,
/// and values[r, j] their log-probabilities, the normaliser in double and
/// the value rounded to float. log_softmax increases with the logit, so
/// the ids are ranked by the logits themselves, in the order samplingKey
/// gives doubles (-0 equals +0; a NaN has a place, so that the CUDA kernel
/// ranks the same ids); a row with an infinite or NaN logit has NaN or
/// infinite values.
///
/// With `from.ids` and `from.lse`, every column is a candidate with
/// from.ids' id (ids[r, j] gets it; ties by it), and the normaliser is
/// the log-sum-exp of the row's from.lseCount values of from.lse (each a
/// rank's log sum exp over its columns): L = M + log(sum_j exp(lse_j -
/// M)), M their maximum, in double; values[r, j] = float(x - L).
template <typename T>
void topLogprobs(const T *logits, int64_t rows, int64_t vocab,
                 int64_t candidates, int64_t k, float *values, int32_t *ids,
                 const Candidates<T> &from = {});

/// TOKEN_LOGPROBS: for each row r of logits [rows, columns] with
/// targets[r] >= 0, logprobs[r] = x[targets[r]] - (m + log(sum exp(x -
/// m))) over the first `vocab` columns (m their maximum), in double
/// rounded to float, and greedy[r] = 1 when targets[r] is the first column
/// of the largest logit (the order TOP_LOGPROBS ranks ids in: samplingKey,
/// ties by the lower id), else 0; both 0 where targets[r] < 0. The targets
/// are below `vocab` (the executor checks).
template <typename T>
void tokenLogprobs(const T *logits, const int32_t *targets, int64_t rows,
                   int64_t columns, int64_t vocab, float *logprobs,
                   int32_t *greedy);

/// TOKEN_LOGPROBS_PARTIAL: for each row r of logits [rows, columns], the
/// columns of one rank's slice of the vocabulary (column j is id vocabStart
/// + j; those at or above `vocab` are padding), over the slice's valid
/// columns: partial[r, 0] = m, their largest logit (the first most likely,
/// as tokenLogprobs ranks: samplingKey), partial[r, 1] = sum exp(x - m) (in
/// double), partial[r, 2] = the target's logit where the target is one of
/// them, else 0, partial[r, 3] = the id of that first most likely column;
/// with no valid column, -infinity, 0, 0 and -1. P is float, or double
/// for double logits.
template <typename T, typename P>
void tokenLogprobsPartial(const T *logits, const int32_t *targets,
                          int64_t rows, int64_t columns, int64_t vocabStart,
                          int64_t vocab, P *partial);

/// TOKEN_LOGPROBS_FINISH: tokenLogprobs' results from the partials of the
/// vocabulary's `slices` slices, gathered per row in the vocabulary's order
/// (gathered [rows, 4 · slices]): the log-sum-exp of the slices' (m, sum),
/// the target's logit the slices' sum (one holds it), greedy 1 where the
/// target is the first slice's most likely id among those whose m is the
/// largest (samplingKey). Both 0 where targets[r] < 0.
template <typename P>
void tokenLogprobsFinish(const P *gathered, const int32_t *targets,
                         int64_t rows, int64_t slices, float *logprobs,
                         int32_t *greedy);

/// TOP_CANDIDATES: for each row r of logits [rows, cols], the rank's
/// columns of the vocabulary (column j is token vocabStart + j; those at
/// or above vocabSize are padding, never a candidate), the k best tokens
/// in the order SAMPLE and TOP_LOGPROBS rank them (descending samplingKey
/// of the logit, equal logits by ascending id): values[r, i] the logit
/// (T, unchanged) and ids[r, i] the token, for i below the count of valid
/// columns; after them -infinity and kNoCandidate. lse[r] = m + log(sum
/// exp(x - m)) over the valid columns (m their maximum), in double rounded
/// to T; -infinity when there are none. Gathered over the ranks, the
/// candidates hold the whole row's k best tokens (each rank's share of
/// them is among its own k best) and the lse values its normaliser.
template <typename T>
void topCandidates(const T *logits, int64_t rows, int64_t cols,
                   int64_t vocabStart, int64_t vocabSize, int64_t k,
                   T *values, int32_t *ids, T *lse);

/// REORDER_ROWS: row b of x [rows, cols] becomes the old row parents[b],
/// every row at once (a parent may be taken by several rows, or by none),
/// through `scratch` of rows · cols elements, which it overwrites. A parent
/// outside [0, rows): row b stays as it was.
template <typename T>
void reorderRows(T *x, const int32_t *parents, int64_t rows, int64_t cols,
                 T *scratch);

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_GENERATION_H
