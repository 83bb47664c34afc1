//===- KernelParams.h - A kernel's attributes, typed ------------*- C++ -*-===//
//
// The attributes of a plan instruction as the kernels read them: one struct
// and one decoder per kind of kernel, so that the attributes' names (and
// their defaults when optional) are written once for the work counter and
// both executors. The decoders read instructions the loader validated
// (runtime/plan/KernelChecks.cpp): a required attribute is there and in
// range; an optional one takes its default when absent.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_KERNELPARAMS_H
#define BRAID_RUNTIME_PLAN_KERNELPARAMS_H

#include "runtime/plan/plan.pb.h"

#include <cstdint>

namespace braid::plan {

/// LINEAR, LINEAR_GRAD_INPUT, LINEAR_GRAD_WEIGHT.
struct LinearParams {
  bool transposeW = false; ///< the weight is [out, in]
  double biasScale = 1.0;  ///< LINEAR's bias times this (row-parallel: 1/tp)
};
LinearParams DecodeLinear(const Instruction &inst);

/// RMS_NORM, LAYER_NORM and their gradients.
struct NormParams {
  double eps = 0;
};
NormParams DecodeNorm(const Instruction &inst);

/// POSITION_EMBEDDING (table, ids) and POSITION_EMBEDDING_GRAD (dy[, ids]):
/// with `at_positions` (packed documents) the ids, [batch, seq] over the
/// whole sequence, are the rows' positions in their documents; otherwise
/// rows take their places in the sequence (the forward's ids give only the
/// shape).
struct PositionEmbeddingParams {
  bool atPositions = false;
};
PositionEmbeddingParams DecodePositionEmbedding(const Instruction &inst);

/// ROPE, ROPE_GRAD, ROPE_AT. ROPE_GRAD with a second input rotates back at
/// those positions (ROPE_AT's transpose: packed documents).
struct RopeParams {
  int64_t headDim = 0;
  double theta = 0;
};
RopeParams DecodeRope(const Instruction &inst);

/// ATTENTION, ATTENTION_GRAD, ATTENTION_CACHED (always causal: its keys
/// are the cache's positions up to the query's). With a slice of the heads (rank_axis), the
/// global counts and the strides of the rank's first query and kv head.
struct AttentionParams {
  int64_t heads = 1, kvHeads = 1;
  double scale = 0;
  bool causal = false, alibi = false;
  /// Packed documents (causal only): the last input is the tokens'
  /// positions in their documents, [batch, seq] int32, and a query sees the
  /// keys of its document up to itself (cpu::AttentionShape::positions).
  /// ATTENTION_GRAD's log-sum-exp, when kept, is then its sixth input and
  /// the positions its seventh.
  bool documents = false;
  bool sliced = false;
  int64_t globalHeads = 0, globalKvHeads = 0;
  int64_t headOffsetStride = 0, kvHeadOffsetStride = 0;
};
AttentionParams DecodeAttention(const Instruction &inst);

/// SAMPLE.
struct SampleParams {
  int64_t vocabSize = 0; ///< ids at or above it are the vocabulary's padding
};
SampleParams DecodeSample(const Instruction &inst);

/// QKV_SPLIT, QKV_CONCAT.
struct QkvParams {
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  bool perHead = false; ///< [q k v] per head rather than [q | k | v]
};
QkvParams DecodeQkv(const Instruction &inst);

/// GELU, GELU_GRAD.
struct GeluParams {
  bool tanh = false;
};
GeluParams DecodeGelu(const Instruction &inst);

/// DROPOUT.
struct DropoutParams {
  double rate = 0;
  uint32_t rngId = 0;
  /// With a rank_axis: x is the rank's slice of its last dimension (not of
  /// each sample's elements, as under sequence parallelism).
  bool featureSplit = false;
};
DropoutParams DecodeDropout(const Instruction &inst);

/// SCALE: y = x · scale (required, finite and nonzero).
struct ScaleParams {
  double scale = 0;
};
ScaleParams DecodeScale(const Instruction &inst);

/// The cross-entropy kernels (CROSS_ENTROPY_MAX has no ignore_index).
struct CrossEntropyParams {
  int64_t ignoreIndex = -100;
};
CrossEntropyParams DecodeCrossEntropy(const Instruction &inst);

/// GRAD_NORM. `replicatedCopies` is 0 when the attribute is absent (the
/// group's size then).
struct GradNormParams {
  double maxNorm = 0;
  int64_t splitInputs = 0;
  int64_t replicatedCopies = 0;
};
GradNormParams DecodeGradNorm(const Instruction &inst);

/// ADAMW.
struct AdamWParams {
  double beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0;
};
AdamWParams DecodeAdamW(const Instruction &inst);

/// ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER.
struct CollectiveParams {
  int64_t dim = 0;    ///< ALL_GATHER's and REDUCE_SCATTER's dimension
  bool max = false;   ///< ALL_REDUCE of maxima rather than sums
  bool async = false; ///< only started here; a WAIT finishes it
};
CollectiveParams DecodeCollective(const Instruction &inst);

/// SEND, RECV: the peer's offset along the rank_axis.
int64_t DecodePeer(const Instruction &inst);

/// A `*_stride` attribute (vocab_start_stride, seq_start_stride,
/// col_offset_stride, ...): the offset of the rank's slice per coordinate
/// along the rank_axis, 0 when absent.
int64_t SliceStride(const Instruction &inst, const char *strideAttr);
/// Whether the instruction has the attribute `strideAttr`.
bool HasSliceStride(const Instruction &inst, const char *strideAttr);

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_KERNELPARAMS_H
