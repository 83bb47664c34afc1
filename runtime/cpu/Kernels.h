//===- Kernels.h - CPU kernels of the `model` ops, forward and backward ---===//
//
// One forward and one backward function per `model` op, on raw row-major
// buffers (the executor passes arena addresses). T is float (training) or
// double (gradient checks). Conventions:
//   - "rows" is the product of all leading dimensions (batch x sequence);
//   - backward functions OVERWRITE activation gradients (dx, dq, ...) and
//     ACCUMULATE (+=) parameter gradients (dw, dbias, dtable), so gradient
//     accumulation over micro-batches needs no extra pass;
//   - whatever a backward needs from its forward beyond the inputs (norm
//     statistics, attention log-sum-exp) is an explicit "saved" buffer;
//   - the kernels' loops run on OpenMP threads, GEMM on OpenBLAS's; the
//     loops' results are bit-identical whatever the number of threads.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_KERNELS_H
#define BRAID_RUNTIME_CPU_KERNELS_H

#include <cstdint>

namespace braid::cpu {

//===-- Threads -----------------------------------------------------------===//

/// Sets how many threads the kernels (OpenMP) and GEMM (OpenBLAS) use, so
/// that ranks sharing a node can split its cores; n <= 0 restores the
/// defaults (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, else every core). The
/// OpenMP count is per calling thread: call it on the thread that runs the
/// kernels. The kernels' own results do not depend on it; GEMM's are
/// OpenBLAS's business (it splits the output, not the sums, so in practice
/// they do not either).
void setNumThreads(int n);
/// The number of threads the kernels called from this thread use.
int numThreads();

//===-- Embeddings --------------------------------------------------------===//

/// out[r, :] = table[ids[r], :] for r < rows. Ids must be in [0, vocab).
template <typename T>
void embeddingForward(const T *table, const int32_t *ids, int64_t rows,
                      int64_t hidden, T *out);
/// dtable[ids[r], :] += dout[r, :].
template <typename T>
void embeddingBackward(const T *dout, const int32_t *ids, int64_t rows,
                       int64_t hidden, T *dtable);

/// out[b, s, :] = table[s, :].
template <typename T>
void positionEmbeddingForward(const T *table, int64_t batch, int64_t seq,
                              int64_t hidden, T *out);
/// dtable[s, :] += sum_b dout[b, s, :].
template <typename T>
void positionEmbeddingBackward(const T *dout, int64_t batch, int64_t seq,
                               int64_t hidden, T *dtable);
/// Packed documents: out[b, s, :] = table[positions[b · posStride + offset +
/// s], :] for the `seq` rows from `offset` of each sequence of `posStride`
/// positions (a sequence-parallel rank's slice); positions in [0, rows of
/// the table).
template <typename T>
void positionEmbeddingAtForward(const T *table, const int32_t *positions,
                                int64_t batch, int64_t seq, int64_t posStride,
                                int64_t offset, int64_t hidden, T *out);
/// dtable[positions[b · posStride + offset + s], :] += dout[b, s, :].
template <typename T>
void positionEmbeddingAtBackward(const T *dout, const int32_t *positions,
                                 int64_t batch, int64_t seq, int64_t posStride,
                                 int64_t offset, int64_t hidden, T *dtable);

//===-- Matrix products ---------------------------------------------------===//

struct LinearShape {
  int64_t rows, in, out;
  /// The weight is stored [out, in] (nn.Linear); otherwise [in, out].
  bool transposeW;
  /// The bias is added times this: a row-parallel linear's tp ranks each add
  /// bias / tp before their partial outputs are summed (exact for a power of
  /// two), so that no separate bias add follows the all-reduce.
  double biasScale = 1.0;
};

/// y = x W (+ bias · biasScale), through BLAS.
template <typename T>
void linearForward(const T *x, const T *w, const T *bias, const LinearShape &s,
                   T *y);
/// dx = dy Wᵀ (overwritten, skipped when null); dw += xᵀ dy (in the weight's
/// layout); dbias += column sums of dy (skipped when null).
template <typename T>
void linearBackward(const T *x, const T *w, const T *dy, const LinearShape &s,
                    T *dx, T *dw, T *dbias);

//===-- Normalisation -----------------------------------------------------===//

/// y = x * rstd * w with rstd[r] = 1 / sqrt(mean(x[r]²) + eps) (saved).
/// The row sums run over Parallel.h's interleaved lanes (laneSum).
template <typename T>
void rmsNormForward(const T *x, const T *w, int64_t rows, int64_t d, double eps,
                    T *y, T *rstd);
/// rmsNormForward's rstd alone, the same bits (the backward recomputes it).
template <typename T>
void rmsNormStats(const T *x, int64_t rows, int64_t d, double eps, T *rstd);
template <typename T>
void rmsNormBackward(const T *x, const T *w, const T *rstd, const T *dy,
                     int64_t rows, int64_t d, T *dx, T *dw);

/// y = (x - mean) * rstd * w + b; mean and rstd per row are saved.
template <typename T>
void layerNormForward(const T *x, const T *w, const T *b, int64_t rows,
                      int64_t d, double eps, T *y, T *mean, T *rstd);
/// layerNormForward's mean and rstd alone, the same bits.
template <typename T>
void layerNormStats(const T *x, int64_t rows, int64_t d, double eps, T *mean,
                    T *rstd);
template <typename T>
void layerNormBackward(const T *x, const T *w, const T *mean, const T *rstd,
                       const T *dy, int64_t rows, int64_t d, T *dx, T *dw,
                       T *db);

//===-- Position encodings and attention ----------------------------------===//

/// Rotary embedding of x [batch, seq, heads * headDim], rotate-half pairs
/// (i, i + headDim/2), angle pos * theta^(-2i/headDim).
template <typename T>
void ropeForward(const T *x, int64_t batch, int64_t seq, int64_t heads,
                 int64_t headDim, double theta, T *y);
/// The transpose of the rotation: dx = R(-angle) dy.
template <typename T>
void ropeBackward(const T *dy, int64_t batch, int64_t seq, int64_t heads,
                  int64_t headDim, double theta, T *dx);
/// ROPE_AT: ropeForward's rotation with row (b, s) at position
/// positions[b · seq + s] rather than s (generation: each sequence's new
/// tokens at their places in it). Any position rotates; the executor
/// refuses those outside the generation's cache.
template <typename T>
void ropeAtForward(const T *x, const int32_t *positions, int64_t batch,
                   int64_t seq, int64_t heads, int64_t headDim, double theta,
                   T *y);
/// Its transpose, ropeBackward's R(-angle) at the same positions (ROPE_GRAD
/// with positions: packed documents).
template <typename T>
void ropeAtBackward(const T *dy, const int32_t *positions, int64_t batch,
                    int64_t seq, int64_t heads, int64_t headDim, double theta,
                    T *dx);

struct AttentionShape {
  int64_t batch, seq, heads, kvHeads, headDim;
  double scale;
  bool causal, alibi;
  /// Tensor parallelism: the buffers hold query heads [headOffset,
  /// headOffset + heads) of globalHeads and kv heads [kvHeadOffset,
  /// kvHeadOffset + kvHeads) of globalKvHeads (every kv head when they are
  /// replicated). Query head g uses kv head g / (globalHeads / globalKvHeads)
  /// and, with ALiBi, the slope of head g among globalHeads. 0 for the global
  /// counts means the buffers hold every head.
  int64_t headOffset = 0, kvHeadOffset = 0, globalHeads = 0, globalKvHeads = 0;
  /// Documents packed in each sequence (causal only): token i of sequence b
  /// is at position positions[b · seq + i] of its document, the documents
  /// contiguous (positions 0, 1, ..., restarting at 0 where a document
  /// starts), and query i sees keys [i − positions[b · seq + i], i], the
  /// ones of its document up to itself. Null: one sequence, keys [0, i].
  /// Since a document's first key i − positions[i] never decreases along a
  /// sequence, kernels skip the key blocks before a query block's first
  /// query's document (and, backward, the query blocks after a key block's
  /// document).
  const int32_t *positions = nullptr;

  /// Query i's first key (0 without documents).
  int64_t firstKey(int64_t b, int64_t i) const {
    return positions ? i - positions[b * seq + i] : 0;
  }

  int64_t allHeads() const { return globalHeads ? globalHeads : heads; }
  int64_t allKvHeads() const { return globalKvHeads ? globalKvHeads : kvHeads; }
  /// The local kv head of local query head h.
  int64_t kvHeadOf(int64_t h) const {
    return (headOffset + h) / (allHeads() / allKvHeads()) - kvHeadOffset;
  }
};

/// ALiBi slopes for `heads` heads (Press et al.; non-powers of two as Bloom).
void alibiSlopes(int64_t heads, double *slopes);

/// out = softmax(q kᵀ scale + bias) v per head; lse [batch, heads, seq]
/// (saved) holds each row's log-sum-exp so backward can rebuild the
/// probabilities without storing them.
template <typename T>
void attentionForward(const T *q, const T *k, const T *v,
                      const AttentionShape &s, T *out, T *lse);
/// dq, dk, dv are overwritten.
template <typename T>
void attentionBackward(const T *q, const T *k, const T *v, const T *out,
                       const T *lse, const T *dout, const AttentionShape &s,
                       T *dq, T *dk, T *dv);

//===-- Elementwise -------------------------------------------------------===//

/// y = silu(gate) * up.
template <typename T>
void swigluForward(const T *gate, const T *up, int64_t n, T *y);
template <typename T>
void swigluBackward(const T *gate, const T *up, const T *dy, int64_t n,
                    T *dgate, T *dup);
/// The same with gate and up packed in one tensor of `rows` rows of
/// [gate (f) | up (f)]: y and dy are rows × f, dx is packed like x.
template <typename T>
void swigluPackedForward(const T *x, int64_t rows, int64_t f, T *y);
template <typename T>
void swigluPackedBackward(const T *x, const T *dy, int64_t rows, int64_t f,
                          T *dx);

/// GeLU, exact (erf) or with the tanh approximation.
template <typename T>
void geluForward(const T *x, int64_t n, bool tanhApprox, T *y);
template <typename T>
void geluBackward(const T *x, const T *dy, int64_t n, bool tanhApprox, T *dx);

/// y = x · scale over n elements (y may be x), rounded once to T. Linear,
/// so it is also its own gradient: dx = dy · scale.
template <typename T>
void scaleForward(const T *x, int64_t n, double scale, T *y);

/// Zeroes `bytes` bytes at p. A buffer larger than kStreamingZeroBytes is
/// written with non-temporal stores, by blocks on the threads: the ZERO
/// kernels clear whole gradients when a step starts, and the backward reads
/// them much later, so pulling each line into the cache first (what a plain
/// store does, and glibc's memset below its non-temporal threshold, hundreds
/// of MiB on large-cache CPUs) doubles the memory traffic for nothing.
inline constexpr int64_t kStreamingZeroBytes = int64_t(1) << 20;
void zeroFill(void *p, int64_t bytes);

/// y = a + b over n elements (y may be a or b): the residual adds and their
/// gradients' sums. On the threads by blocks: a memory-bound loop, which
/// one core does not drive at the memory's speed.
template <typename T>
void addForward(const T *a, const T *b, int64_t n, T *y);

/// Where a (possibly sharded) 2-D view of a tensor sits in the whole tensor:
/// local element (r, c) is global element (rowOffset + r) * globalCols +
/// colOffset + c. A replicated tensor is {rows, cols, cols, 0, 0}.
struct GlobalIndexing {
  int64_t rows, cols, globalCols, rowOffset, colOffset;
  /// Rows per sample: a sample offset (the CUDA call's, added on the
  /// device) moves rowOffset by this many rows (1: a row is a sample; a
  /// tensor split on its last dimension has a row per token).
  int64_t rowsPerSample = 1;
};

/// What keys a dropout mask: the run's seed, the training step and the op
/// (its position in the program), so that every (step, op) draws fresh
/// masks and re-running a step (recompute) draws the same ones.
struct DropoutKey {
  uint64_t seed;
  uint32_t step, op;
};

/// y = x * keep / (1 - rate), keep drawn per global element from Philox.
template <typename T>
void dropoutForward(const T *x, const GlobalIndexing &at, double rate,
                    const DropoutKey &key, T *y);
/// dx = dy * keep / (1 - rate), the mask regenerated rather than stored.
template <typename T>
void dropoutBackward(const T *dy, const GlobalIndexing &at, double rate,
                     const DropoutKey &key, T *dx);
/// Whether global element `index` is kept (exposed for tests).
bool dropoutKeeps(uint64_t index, double rate, const DropoutKey &key);

//===-- Fused QKV ---------------------------------------------------------===//

struct QkvShape {
  int64_t rows, heads, kvHeads, headDim;
  /// Columns per head, [q_h, k_h, v_h] (Bloom); otherwise [Q | K | V].
  bool perHead;
};

template <typename T>
void qkvSplitForward(const T *qkv, const QkvShape &s, T *q, T *k, T *v);
template <typename T>
void qkvSplitBackward(const T *dq, const T *dk, const T *dv, const QkvShape &s,
                      T *dqkv);

//===-- Loss --------------------------------------------------------------===//

/// The mean over rows whose target is not `ignoreIndex` of
/// logsumexp(logits[r]) - logits[r, target[r]]. Returns the loss and the
/// number of counted rows; lse [rows] is saved for backward.
template <typename T>
T crossEntropyForward(const T *logits, const int32_t *targets, int64_t rows,
                      int64_t vocab, int64_t ignoreIndex, T *lse,
                      int64_t *counted);
/// dlogits = dloss * (softmax - onehot) / counted (0 on ignored rows).
template <typename T>
void crossEntropyBackward(const T *logits, const int32_t *targets,
                          const T *lse, T dloss, int64_t rows, int64_t vocab,
                          int64_t ignoreIndex, int64_t counted, T *dlogits);

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_KERNELS_H
