//===- Attention.h - Exact attention on CUDA, forward and backward -*- C++
//-*-===//
//
// softmax(q kᵀ scale + bias) v per head without the score matrix: keys and
// values are visited in tiles through shared memory with the online softmax
// (a running maximum and sum per query row), and backward rebuilds the
// probabilities from the saved log-sum-exp (Dao et al., FlashAttention 1
// and 2). Causal masking skips every tile above the diagonal; grouped
// queries (GQA), ALiBi and the heads of a tensor-parallel shard are those
// of cpu::AttentionShape, with the CPU kernels' conventions: q, out, dq are
// [batch, seq, heads * headDim], k, v, dk, dv [batch, seq, kvHeads *
// headDim], lse [batch, heads, seq].
//
// These kernels compute in float on CUDA cores, for any T: they are exact
// attention in fp32 mode (where the tensor cores' bf16 inputs would not be)
// and the reference for faster kernels. The log-sum-exp is kept in float
// whatever T (a bf16 one would be off by up to 2^-8 of the exponent).
//
// Backward here is deterministic: dq is one kernel over query rows and dk,
// dv another over key rows (each gathering its group's query heads), so
// every element has one writer and no atomics. Its workspace holds D_i =
// dout_i · out_i for every query row and head (attentionBackwardWorkspaceBytes)
// and, for the tensor-core backward that adds dq up by atomics, a float per
// element of dq.
//
// Packed documents (AttentionShape::positions, a device pointer, with
// causal masking): query i sees keys [i − positions[b, i], i], those of its
// document up to itself. Whole tiles are skipped where no query sees them:
// forward and dq start at the key tile of the query block's first row's
// document (the first keys never decrease along a sequence); dk and dv
// visit the query tiles from the diagonal up to the last whose first query
// still sees one of the block's keys. Boundary tiles are masked element by
// element. Without positions the kernels compute exactly what they did
// without documents, and with one document per sequence the same values.
// Positions are read on the device, where nothing refuses one: a position
// past its row's index reads as one from the sequence's start (no key
// before the sequence is read).
//
// headDim is at most 256. Nothing synchronises with the host or allocates;
// each launcher returns the launch's error.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_ATTENTION_H
#define BRAID_RUNTIME_CUDA_ATTENTION_H

#include "runtime/cpu/Kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace braid::cuda {

using AttentionShape = cpu::AttentionShape;

/// The largest head dimension the kernels take.
constexpr int64_t kMaxAttentionHeadDim = 256;

/// Bytes of the backward's workspace: one float per query row and head
/// (attentionBackward's), then, with `tensorCores`, one per element of dq
/// (attentionBackwardTensorCores' with any tiling).
int64_t attentionBackwardWorkspaceBytes(const AttentionShape &s,
                                        bool tensorCores = true);

/// out = softmax(q kᵀ scale + bias) v; lse[b, h, i] = log Σ_j exp(score).
template <typename T>
cudaError_t attentionForward(const T *q, const T *k, const T *v,
                             const AttentionShape &s, T *out, float *lse,
                             cudaStream_t stream);

/// dq, dk and dv are overwritten (a kv head none of whose query heads are
/// in the shard gets zeros, as on the CPU). `workspace` holds at least
/// attentionBackwardWorkspaceBytes(s, false).
template <typename T>
cudaError_t attentionBackward(const T *q, const T *k, const T *v, const T *out,
                              const float *lse, const T *dout,
                              const AttentionShape &s, T *dq, T *dk, T *dv,
                              float *workspace, cudaStream_t stream);

/// Whether attentionForwardTensorCores takes this shape and these buffers:
/// head dimension 64 or 128 and 16-byte aligned operands.
bool attentionForwardOnTensorCores(const void *q, const void *k, const void *v,
                                   const void *out, const AttentionShape &s);

/// The forward for bf16 (and fp16, below) on tensor cores
/// (AttentionTensorCores.cu: FlashAttention-2's tiling on mma.sync, sm_80
/// and later), same operands and results as attentionForward<bf16> (the
/// probabilities are rounded to bf16 before they multiply V, as
/// FlashAttention's are), with tiling attentionForwardTilings()[tiling]
/// (every tiling computes the same values). Returns cudaErrorInvalidValue
/// where attentionForwardOnTensorCores does not hold or there is no such
/// tiling.
cudaError_t attentionForwardTensorCores(const __nv_bfloat16 *q,
                                        const __nv_bfloat16 *k,
                                        const __nv_bfloat16 *v,
                                        const AttentionShape &s,
                                        __nv_bfloat16 *out, float *lse,
                                        cudaStream_t stream, int tiling = 0);
/// The same for fp16.
cudaError_t attentionForwardTensorCores(const __half *q, const __half *k,
                                        const __half *v,
                                        const AttentionShape &s, __half *out,
                                        float *lse, cudaStream_t stream,
                                        int tiling = 0);

/// A tiling of the tensor-core forward: each warp's query rows and the keys
/// per tile that stream through shared memory.
struct AttentionForwardTiling {
  int rowsPerWarp, keysPerTile;
};
/// The forward's tilings, the default first (AttentionTensorCores.cu's file
/// comment gives each one's rate on an H100).
std::vector<AttentionForwardTiling> attentionForwardTilings();

/// A tiling of the tensor-core backward: the dk and dv kernel's keys per
/// block, its query tile at head dimension 128 (64 rows at 64), and whether
/// that kernel also adds dq up, by float atomics into the workspace
/// (FlashAttention-2's backward: five products per score instead of
/// seven, but dq's sums in no fixed order), or a kernel of its own computes
/// dq with one writer per element.
struct AttentionBackwardTiling {
  int keysPerBlock, queryTile;
  bool dqByAtomics;
  /// The query tile at head dimension `headDim`.
  int queryTileAt(int64_t headDim) const {
    return headDim == 64 ? 64 : queryTile;
  }
};
/// The backward's tilings, the default first, as the forward's.
std::vector<AttentionBackwardTiling> attentionBackwardTilings();

/// Whether attentionBackwardTensorCores takes this shape and these buffers:
/// as the forward, every operand 16-byte aligned.
bool attentionBackwardOnTensorCores(const void *q, const void *k,
                                    const void *v, const void *out,
                                    const void *dout, const void *dq,
                                    const void *dk, const void *dv,
                                    const AttentionShape &s);

/// The backward for bf16 on tensor cores (AttentionTensorCores.cu), same
/// operands, results and workspace as attentionBackward<bf16>; the
/// probabilities and their gradients are rounded to bf16 before they
/// multiply dout, Q and K; with tiling attentionBackwardTilings()[tiling].
/// Returns cudaErrorInvalidValue where attentionBackwardOnTensorCores does
/// not hold or there is no such tiling.
cudaError_t attentionBackwardTensorCores(
    const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
    const __nv_bfloat16 *out, const float *lse, const __nv_bfloat16 *dout,
    const AttentionShape &s, __nv_bfloat16 *dq, __nv_bfloat16 *dk,
    __nv_bfloat16 *dv, float *workspace, cudaStream_t stream, int tiling = 0);
/// The same for fp16.
cudaError_t attentionBackwardTensorCores(const __half *q, const __half *k,
                                         const __half *v, const __half *out,
                                         const float *lse, const __half *dout,
                                         const AttentionShape &s, __half *dq,
                                         __half *dk, __half *dv,
                                         float *workspace, cudaStream_t stream,
                                         int tiling = 0);

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_ATTENTION_H
