//===- Kernels.h - CUDA kernels of the `model` ops, forward and backward --===//
//
// The CUDA counterparts of runtime/cpu/Kernels.h and Optimizer.h, on raw
// device buffers (arena addresses), each launched on the stream it is given.
// T is the activations' and weights' type, float (fp32 mode, for checking
// against the CPU kernels) or __nv_bfloat16 (mixed precision); arithmetic is
// in float whatever T, and what mixed precision keeps in fp32 is float
// whatever T: parameter gradients (dtable, dw), the optimizer's master
// weights and moments, the saved row statistics (rstd, lse) and the loss.
// The conventions are the CPU kernels':
//   - "rows" is the product of all leading dimensions (batch x sequence);
//   - backward functions OVERWRITE activation gradients (dx, dgate, ...) and
//     ACCUMULATE (+=) parameter gradients (dw, dtable);
//   - nothing synchronises with the host and nothing allocates: scalars a
//     later kernel needs (the loss, the number of counted rows, the sum of
//     squared gradients) stay in device memory.
// Each launcher returns the launch's error (cudaGetLastError), so a bad
// configuration is reported where it happens; errors inside a kernel
// surface at the stream's next synchronisation.
//
// Parameter gradients sum over rows with float atomics, so their low bits
// depend on the order the GPU adds in (the CPU kernels' do not depend on
// the threads); everything else is computed in a fixed order.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_KERNELS_H
#define BRAID_RUNTIME_CUDA_KERNELS_H

#include "runtime/cpu/Kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

//===-- Embeddings --------------------------------------------------------===//

/// out[r, :] = table[ids[r], :] for r < rows. Ids must be in [0, vocab).
template <typename T>
cudaError_t embeddingForward(const T *table, const int32_t *ids, int64_t rows,
                             int64_t hidden, T *out, cudaStream_t stream);
/// dtable[ids[r], :] += dout[r, :].
template <typename T>
cudaError_t embeddingBackward(const T *dout, const int32_t *ids, int64_t rows,
                              int64_t hidden, float *dtable,
                              cudaStream_t stream);

/// The vocabulary-parallel embedding (runtime/cpu/VocabParallel.h): `table`
/// is this rank's rows [vocabStart, vocabStart + localVocab) of the
/// vocabulary; out[r, :] is the row of ids[r] when it is one of them, else 0
/// (the ranks' outputs are then summed). Ids may be anything.
template <typename T>
cudaError_t embeddingForwardRange(const T *table, const int32_t *ids,
                                  int64_t rows, int64_t hidden,
                                  int64_t vocabStart, int64_t localVocab,
                                  T *out, cudaStream_t stream);
/// dtable[ids[r] - vocabStart, :] += dout[r, :] for the ids of the slice.
template <typename T>
cudaError_t embeddingBackwardRange(const T *dout, const int32_t *ids,
                                   int64_t rows, int64_t hidden,
                                   int64_t vocabStart, int64_t localVocab,
                                   float *dtable, cudaStream_t stream);

/// out[b, s, :] = table[s, :].
template <typename T>
cudaError_t positionEmbeddingForward(const T *table, int64_t batch, int64_t seq,
                                     int64_t hidden, T *out,
                                     cudaStream_t stream);
/// dtable[s, :] += Σ_b dout[b, s, :] (each element summed by one thread, in
/// the order of b).
template <typename T>
cudaError_t positionEmbeddingBackward(const T *dout, int64_t batch, int64_t seq,
                                      int64_t hidden, float *dtable,
                                      cudaStream_t stream);
/// Packed documents (cpu::positionEmbeddingAtForward): out[b, s, :] =
/// table[positions[b · posStride + offset + s], :] for the `seq` rows from
/// `offset` of each sequence of `posStride` positions (a sequence-parallel
/// rank's slice). Positions are read on the device, which cannot refuse
/// one outside the table (the executor checks them when they are written).
template <typename T>
cudaError_t positionEmbeddingAtForward(const T *table, const int32_t *positions,
                                       int64_t batch, int64_t seq,
                                       int64_t posStride, int64_t offset,
                                       int64_t hidden, T *out,
                                       cudaStream_t stream);
/// dtable[positions[b · posStride + offset + s], :] += dout[b, s, :], by
/// float atomics as embeddingBackward's (rows may share a position).
template <typename T>
cudaError_t positionEmbeddingAtBackward(const T *dout, const int32_t *positions,
                                        int64_t batch, int64_t seq,
                                        int64_t posStride, int64_t offset,
                                        int64_t hidden, float *dtable,
                                        cudaStream_t stream);

//===-- Normalisation -----------------------------------------------------===//

/// y = x * rstd * w with rstd[r] = 1 / sqrt(mean(x[r]²) + eps) (saved).
template <typename T>
cudaError_t rmsNormForward(const T *x, const T *w, int64_t rows, int64_t d,
                           double eps, T *y, float *rstd, cudaStream_t stream);
/// dx = rstd·(w·dy) - x·rstd³·mean(x·w·dy); dw += Σ_rows dy·x·rstd.
template <typename T>
cudaError_t rmsNormBackward(const T *x, const T *w, const float *rstd,
                            const T *dy, int64_t rows, int64_t d, T *dx,
                            float *dw, cudaStream_t stream);

/// y = (x - mean) * rstd * w + b; mean and rstd per row (saved, float).
template <typename T>
cudaError_t layerNormForward(const T *x, const T *w, const T *b, int64_t rows,
                             int64_t d, double eps, T *y, float *mean,
                             float *rstd, cudaStream_t stream);
/// dx = rstd·(g - mean(g) - x̂·mean(g·x̂)) with g = w·dy, x̂ = (x - mean)·rstd;
/// dw += Σ_rows dy·x̂, db += Σ_rows dy (both before dx, which may alias dy).
template <typename T>
cudaError_t layerNormBackward(const T *x, const T *w, const float *mean,
                              const float *rstd, const T *dy, int64_t rows,
                              int64_t d, T *dx, float *dw, float *db,
                              cudaStream_t stream);

/// The statistics the norms' backward reads, recomputed from x (the plan
/// keeps none: docs/Rationale-Training.md): rstd per row, and for
/// LayerNorm the mean.
template <typename T>
cudaError_t rmsNormStatistics(const T *x, int64_t rows, int64_t d, double eps,
                              float *rstd, cudaStream_t stream);
template <typename T>
cudaError_t layerNormStatistics(const T *x, int64_t rows, int64_t d, double eps,
                                float *mean, float *rstd, cudaStream_t stream);

//===-- Position encoding -------------------------------------------------===//

/// Rotary embedding of x [batch, seq, heads * headDim], rotate-half pairs
/// (i, i + headDim/2), angle pos * theta^(-2i/headDim) (computed in double:
/// at positions in the thousands a float angle is off by 1e-4).
template <typename T>
cudaError_t ropeForward(const T *x, int64_t batch, int64_t seq, int64_t heads,
                        int64_t headDim, double theta, T *y,
                        cudaStream_t stream);
/// The transpose of the rotation: dx = R(-angle) dy.
template <typename T>
cudaError_t ropeBackward(const T *dy, int64_t batch, int64_t seq, int64_t heads,
                         int64_t headDim, double theta, T *dx,
                         cudaStream_t stream);
/// ROPE_AT (cpu::ropeAtForward): the rotation with row (b, s) at position
/// positions[b · seq + s], read on the device. Any position rotates (the
/// device cannot refuse one outside the generation's cache; the CPU
/// executor does).
template <typename T>
cudaError_t ropeAtForward(const T *x, const int32_t *positions, int64_t batch,
                          int64_t seq, int64_t heads, int64_t headDim,
                          double theta, T *y, cudaStream_t stream);
/// Its transpose (cpu::ropeAtBackward: ROPE_GRAD with positions, packed
/// documents): dx = R(-angle) dy at the same positions.
template <typename T>
cudaError_t ropeAtBackward(const T *dy, const int32_t *positions, int64_t batch,
                           int64_t seq, int64_t heads, int64_t headDim,
                           double theta, T *dx, cudaStream_t stream);

//===-- Elementwise -------------------------------------------------------===//

/// y = silu(gate) * up over n elements.
template <typename T>
cudaError_t swigluForward(const T *gate, const T *up, int64_t n, T *y,
                          cudaStream_t stream);
template <typename T>
cudaError_t swigluBackward(const T *gate, const T *up, const T *dy, int64_t n,
                           T *dgate, T *dup, cudaStream_t stream);

/// SwiGLU on `rows` rows of [gate (f) | up (f)] (a fused gate/up
/// projection): y and dy are rows × f, dx is packed like x.
template <typename T>
cudaError_t swigluPackedForward(const T *x, int64_t rows, int64_t f, T *y,
                                cudaStream_t stream);
template <typename T>
cudaError_t swigluPackedBackward(const T *x, const T *dy, int64_t rows,
                                 int64_t f, T *dx, cudaStream_t stream);

/// GeLU, exact (erf) or with the tanh approximation.
template <typename T>
cudaError_t geluForward(const T *x, int64_t n, bool tanhApprox, T *y,
                        cudaStream_t stream);
template <typename T>
cudaError_t geluBackward(const T *x, const T *dy, int64_t n, bool tanhApprox,
                         T *dx, cudaStream_t stream);

/// y = a + b over n elements (y may be a or b).
template <typename T>
cudaError_t add(const T *a, const T *b, int64_t n, T *y, cudaStream_t stream);

/// What changes from one call of a plan's function to the next, kept in
/// device memory and written (setCallValues) before each call: the run's
/// seed and the step (dropout's key), the micro-batch's first sample within
/// the step's global batch (dropout's rows), and 1 / the loss scale (the
/// gradient norm). A function captured as a CUDA graph replays its kernels
/// with the arguments of its capture, so the kernels read these here rather
/// than take them as arguments.
struct CallValues {
  uint64_t seed = 0;
  int64_t sampleOffset = 0;
  double lossScaleInverse = 1.0;
  uint32_t step = 0;
};
/// *device = values, in stream order (a one-thread kernel: the values
/// travel as its argument, so the host's copy may change at once).
cudaError_t setCallValues(CallValues *device, const CallValues &values,
                          cudaStream_t stream);

/// y = x * keep / (1 - rate), with keep drawn per element of the whole
/// tensor (`at`) from Philox exactly as cpu::dropoutForward draws it, so
/// CPU and GPU runs, and any sharding, drop the same elements. The key is
/// (call->seed, call->step, op), and `at`'s rows count from the
/// micro-batch's first sample: row r is global row call->sampleOffset +
/// at.rowOffset + r.
template <typename T>
cudaError_t dropoutForward(const T *x, const cpu::GlobalIndexing &at,
                           double rate, uint32_t op, const CallValues *call,
                           T *y, cudaStream_t stream);
/// dx = dy * keep / (1 - rate), the mask drawn again.
template <typename T>
cudaError_t dropoutBackward(const T *dy, const cpu::GlobalIndexing &at,
                            double rate, uint32_t op, const CallValues *call,
                            T *dx, cudaStream_t stream);

//===-- Fused QKV ---------------------------------------------------------===//

/// q, k, v from a fused projection's rows, [Q | K | V] or per head [q_h,
/// k_h, v_h] (cpu::QkvShape), and back.
template <typename T>
cudaError_t qkvSplitForward(const T *qkv, const cpu::QkvShape &s, T *q, T *k,
                            T *v, cudaStream_t stream);
template <typename T>
cudaError_t qkvSplitBackward(const T *dq, const T *dk, const T *dv,
                             const cpu::QkvShape &s, T *dqkv,
                             cudaStream_t stream);

//===-- Bias --------------------------------------------------------------===//

/// y[i] = x[i] * scale (rounded to T) for i < n, in float (y may be x): the
/// SCALE kernel (and its gradient), and a linear's scaled bias, which
/// cuBLASLt's bias epilogue then adds (Gemm::LinearForward).
template <typename T>
cudaError_t scaleVector(const T *x, double scale, int64_t n, T *y,
                        cudaStream_t stream);
/// Fills `halves` 16-bit words at `dst` with bf16 values uniform in [-1, 1)
/// from a counter hash of (seed, index): random operands on which to time
/// matrix products (Gemm's tuning). Read as fp16 each is finite and below 2
/// in magnitude, and two of them read as a float are a finite float below
/// 1 in magnitude.
cudaError_t fillRandomHalves(void *dst, int64_t halves, uint64_t seed,
                             cudaStream_t stream);
/// sums[c] += Σ_r x[r, c] (a bias's gradient).
template <typename T>
cudaError_t addColumnSums(const T *x, int64_t rows, int64_t cols, float *sums,
                          cudaStream_t stream);

//===-- Products of a few rows --------------------------------------------===//

/// The most rows fewRowsLinear takes.
constexpr int64_t kFewRowsLinearMaxRows = 8;
/// Whether fewRowsLinear takes this linear: bf16 or fp16, the weight
/// [out, in] (nn.Linear's layout), 1 to kFewRowsLinearMaxRows rows, `in` a
/// multiple of 16 bytes' elements and x, w and the bias 16-byte aligned.
template <typename T>
bool fewRowsLinearTakes(const T *x, const T *w, const T *bias,
                        const cpu::LinearShape &s);
/// y = x Wᵀ (+ bias · biasScale) for a linear fewRowsLinearTakes, as
/// Gemm::LinearForward computes it (float sums, the scaled bias rounded to
/// T first), reading W once at the rate of a copy: generation's decode,
/// whose products of one to a few rows cuBLASLt reads at a third of it.
/// One warp per output column.
template <typename T>
cudaError_t fewRowsLinear(const T *x, const T *w, const T *bias,
                          const cpu::LinearShape &s, T *y,
                          cudaStream_t stream);

//===-- Loss --------------------------------------------------------------===//

/// Per row, lse[r] = logsumexp(logits[r]) (saved for backward); then
/// loss[0] = the mean over rows whose target is not `ignoreIndex` of
/// lse[r] - logits[r, target[r]], and counted[0] = the number of such rows
/// (0 rows counted: loss 0). `terms` (rows floats) is scratch, summed in a
/// fixed order so that the loss does not vary from run to run.
template <typename T>
cudaError_t crossEntropyForward(const T *logits, const int32_t *targets,
                                int64_t rows, int64_t vocab,
                                int64_t ignoreIndex, float *lse, float *terms,
                                float *loss, int64_t *counted,
                                cudaStream_t stream);
/// counted[0] = the number of rows whose target is not `ignoreIndex` (what
/// crossEntropyForward also writes, for a backward whose forward kept its
/// log-sum-exp).
cudaError_t countTargets(const int32_t *targets, int64_t rows,
                         int64_t ignoreIndex, int64_t *counted,
                         cudaStream_t stream);
/// dlogits = dloss[0] * (softmax - onehot) / counted[0] (0 on ignored rows),
/// dloss and counted read on the device. With vocabStart (a vocabulary
/// slice) the logits are columns [vocabStart, vocabStart + vocab) of the
/// whole row, lse the whole row's (crossEntropyFinish) and the targets
/// global ids.
template <typename T>
cudaError_t crossEntropyBackward(const T *logits, const int32_t *targets,
                                 const float *lse, const float *dloss,
                                 int64_t rows, int64_t vocab,
                                 int64_t ignoreIndex, const int64_t *counted,
                                 T *dlogits, cudaStream_t stream,
                                 int64_t vocabStart = 0);

/// The vocabulary-parallel loss (runtime/cpu/VocabParallel.h: the ranks
/// hold columns of the logits, and all-reduce between the steps):
/// rowMax[r] = the maximum of this rank's columns of row r (-inf when
/// vocab is 0);
template <typename T>
cudaError_t crossEntropyRowMax(const T *logits, int64_t rows, int64_t vocab,
                               T *rowMax, cudaStream_t stream);
/// partial[2r] = Σ_c exp(logits[r, c] - globalMax[r]) over this rank's
/// columns, partial[2r + 1] = the target's logit when this rank holds it,
/// else 0; both 0 on ignored rows. In float whatever T (the sums of
/// exponentials would lose all but 8 bits in bf16);
template <typename T>
cudaError_t crossEntropyPartial(const T *logits, const int32_t *targets,
                                const T *globalMax, int64_t rows,
                                int64_t vocab, int64_t vocabStart,
                                int64_t ignoreIndex, float *partial,
                                cudaStream_t stream);
/// from the summed partials: lse[r] = globalMax[r] + log(summed[2r]) (the
/// row's maximum on ignored rows), loss[0] = the mean of lse[r] -
/// summed[2r + 1] over the counted rows, counted[0] their number; `terms`
/// (rows floats) is scratch, as crossEntropyForward's.
template <typename T>
cudaError_t crossEntropyFinish(const float *summed, const T *globalMax,
                               const int32_t *targets, int64_t rows,
                               int64_t ignoreIndex, float *lse, float *terms,
                               float *loss, int64_t *counted,
                               cudaStream_t stream);

//===-- Optimizer ---------------------------------------------------------===//

/// sumSquares[0] += Σ g² over n elements (accumulated in double), the
/// quantity the global gradient norm all-reduces (cpu::gradSumOfSquares).
cudaError_t gradSumOfSquares(const float *grad, int64_t n, double *sumSquares,
                             cudaStream_t stream);

/// sum[0] += share * part[0] (a gradient norm over ranks: this rank's share
/// of the squares of gradients that several ranks hold).
cudaError_t addScaled(const double *part, double share, double *sum,
                      cudaStream_t stream);

/// From sumSquares[0], as cpu::computeGradClip (pre-scale 1): norm[0] =
/// √sum and scale[0] = min(1, maxNorm / (norm + 1e-6)) (1 when maxNorm is
/// 0); a non-finite norm gives scale NaN, which makes adamwStep skip the
/// update. With a pre-scale (call->lossScaleInverse: 1 / the loss scale
/// under fp16; 1 when `call` is null) the gradients summed are the loss's
/// times 1 / pre-scale: norm is of the unscaled gradients and scale
/// unscales as well as clips (as cpu::computeGradClip).
cudaError_t gradClip(const double *sumSquares, double maxNorm, float *norm,
                     float *scale, const CallValues *call, cudaStream_t stream);

/// One AdamW update of n fp32 master weights, as cpu::adamwStep: with
/// g = grad * gradScale[0] (read on the device: clipping is decided there),
///   param ← param − lr·wd·param
///   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
///   param ← param − (lr / (1−β1^t)) · m / (√v / √(1−β2^t) + eps)
/// and, when `copy` is not null, copy ← param rounded to T (the weights the
/// next forward reads). The arithmetic is double for T = float (fp32 plans,
/// as the CPU's), float for bf16 and fp16 (mixed precision: a memory-bound
/// update that double's division and square root would slow). A non-finite gradScale[0] leaves everything as it
/// is (the step is skipped). lr[0] and step[0] are read on the device too
/// (the plan's buffers, which the host writes each step). The caller
/// validates the hyper-parameters (cpu::validateAdamWConfig) and that the
/// step is >= 1.
template <typename T>
cudaError_t adamwStep(float *param, const float *grad, float *m, float *v,
                      int64_t n, const float *lr, double beta1, double beta2,
                      double eps, double weightDecay, const int64_t *step,
                      const float *gradScale, T *copy, cudaStream_t stream);

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_KERNELS_H
