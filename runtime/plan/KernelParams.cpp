//===- KernelParams.cpp - A kernel's attributes, typed --------------------===//

#include "runtime/plan/KernelParams.h"

#include <string>

namespace braid::plan {
namespace {

int64_t intOr(const Instruction &inst, const char *name, int64_t otherwise) {
  auto it = inst.int_attrs().find(name);
  return it == inst.int_attrs().end() ? otherwise : it->second;
}

double floatOr(const Instruction &inst, const char *name, double otherwise) {
  auto it = inst.float_attrs().find(name);
  return it == inst.float_attrs().end() ? otherwise : it->second;
}

} // namespace

LinearParams DecodeLinear(const Instruction &inst) {
  return {intOr(inst, "transpose_w", 0) != 0, floatOr(inst, "bias_scale", 1.0)};
}

NormParams DecodeNorm(const Instruction &inst) {
  return {floatOr(inst, "eps", 0)};
}

RopeParams DecodeRope(const Instruction &inst) {
  return {intOr(inst, "head_dim", 0), floatOr(inst, "theta", 0)};
}

PositionEmbeddingParams DecodePositionEmbedding(const Instruction &inst) {
  return {intOr(inst, "at_positions", 0) != 0};
}

AttentionParams DecodeAttention(const Instruction &inst) {
  AttentionParams p;
  p.heads = intOr(inst, "heads", 1);
  p.kvHeads = intOr(inst, "kv_heads", p.heads);
  p.scale = floatOr(inst, "scale", 0);
  p.causal = intOr(inst, "causal", 0) != 0;
  p.alibi = intOr(inst, "alibi", 0) != 0;
  p.documents = intOr(inst, "documents", 0) != 0;
  p.sliced = inst.int_attrs().count("global_heads") > 0;
  if (p.sliced) {
    p.globalHeads = intOr(inst, "global_heads", 0);
    p.globalKvHeads = intOr(inst, "global_kv_heads", 0);
    p.headOffsetStride = intOr(inst, "head_offset_stride", 0);
    p.kvHeadOffsetStride = intOr(inst, "kv_head_offset_stride", 0);
  }
  return p;
}

SampleParams DecodeSample(const Instruction &inst) {
  return {intOr(inst, "vocab_size", 0)};
}

QkvParams DecodeQkv(const Instruction &inst) {
  return {intOr(inst, "heads", 0), intOr(inst, "kv_heads", 0),
          intOr(inst, "head_dim", 0), intOr(inst, "per_head", 0) != 0};
}

GeluParams DecodeGelu(const Instruction &inst) {
  return {intOr(inst, "tanh", 0) != 0};
}

DropoutParams DecodeDropout(const Instruction &inst) {
  return {floatOr(inst, "rate", 0), uint32_t(intOr(inst, "rng_id", 0)),
          intOr(inst, "feature_split", 0) != 0};
}

ScaleParams DecodeScale(const Instruction &inst) {
  return {floatOr(inst, "scale", 0)};
}

CrossEntropyParams DecodeCrossEntropy(const Instruction &inst) {
  return {intOr(inst, "ignore_index", -100)};
}

GradNormParams DecodeGradNorm(const Instruction &inst) {
  return {floatOr(inst, "max_norm", 0), intOr(inst, "split_inputs", 0),
          intOr(inst, "replicated_copies", 0)};
}

AdamWParams DecodeAdamW(const Instruction &inst) {
  return {floatOr(inst, "beta1", 0), floatOr(inst, "beta2", 0),
          floatOr(inst, "eps", 0), floatOr(inst, "weight_decay", 0)};
}

CollectiveParams DecodeCollective(const Instruction &inst) {
  return {intOr(inst, "dim", 0), intOr(inst, "max", 0) != 0,
          intOr(inst, "async", 0) == 1};
}

int64_t DecodePeer(const Instruction &inst) { return intOr(inst, "peer", 0); }

int64_t SliceStride(const Instruction &inst, const char *strideAttr) {
  return intOr(inst, strideAttr, 0);
}

bool HasSliceStride(const Instruction &inst, const char *strideAttr) {
  return inst.int_attrs().count(strideAttr) > 0;
}

} // namespace braid::plan
