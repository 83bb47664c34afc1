//===- KernelChecks.h - Each kernel's operand contract ----------*- C++ -*-===//
//
// The loader's check of one instruction: its group and rank_axis, its
// operand counts from its row of runtime/plan/Kernels.def, then the check
// the row names (the CHECK column, an expression on an InstructionChecker
// `c`). Buffers have been validated before (shapes non-negative, sizes
// inside the arena).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_KERNELCHECKS_H
#define BRAID_RUNTIME_PLAN_KERNELCHECKS_H

#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/PlanInternal.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace braid::plan {

/// Checks instruction `index` of `fn` (the program of pipeline stage
/// `stage`, or -1) against its kernel's contract.
absl::Status CheckInstruction(const Plan &plan, const Function &fn, int index,
                              const Instruction &inst, int stage = -1);

/// Checks one instruction against its kernel's operand contract. Buffers
/// have been validated (shapes non-negative, sizes inside the arena).
class InstructionChecker {
public:
  /// `stage` is the pipeline stage whose program `fn` is, or -1.
  InstructionChecker(const Plan &plan, const Function &fn, int index,
                     const Instruction &inst, int stage = -1)
      : plan(plan), inst(inst), stage(stage),
        where(absl::StrCat("function '", fn.name(), "' instruction ", index,
                           " (", Kernel_Name(inst.kernel()),
                           inst.provenance().empty() ? "" : ", from ",
                           inst.provenance(), "): ")) {}

  /// The instruction's group and rank_axis, its operand counts against its
  /// row of Kernels.def, then the row's check.
  absl::Status check();

private:
  absl::Status fail(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(where, what));
  }

  /// "2", "3-4" or "at least 1" (kMany: no upper bound).
  static std::string count(int min, int max) {
    if (min == max)
      return absl::StrCat(min);
    if (max == kMany)
      return absl::StrCat("at least ", min);
    return absl::StrCat(min, "-", max);
  }
  /// Checks operand counts and that the buffers exist.
  /// minIn..maxIn inputs and `outs` outputs (or up to `maxOuts`).
  absl::Status arity(int minIn, int maxIn, int outs, int maxOuts = 0) {
    maxOuts = std::max(maxOuts, outs);
    if (inst.inputs_size() < minIn || inst.inputs_size() > maxIn ||
        inst.outputs_size() < outs || inst.outputs_size() > maxOuts)
      return fail(
          absl::StrCat("has ", inst.inputs_size(), " inputs and ",
                       inst.outputs_size(), " outputs; the kernel takes ",
                       count(minIn, maxIn), " inputs and ",
                       count(outs, maxOuts), " outputs"));
    for (int32_t id : inst.inputs())
      if (id < 0 || id >= plan.buffers_size())
        return fail(absl::StrCat("input buffer ", id, " does not exist (the plan has ",
                                 plan.buffers_size(), ")"));
    for (int32_t id : inst.outputs())
      if (id < 0 || id >= plan.buffers_size())
        return fail(absl::StrCat("output buffer ", id, " does not exist (the plan has ",
                                 plan.buffers_size(), ")"));
    return absl::OkStatus();
  }
  const Buffer &in(int i) const { return plan.buffers(inst.inputs(i)); }
  const Buffer &out(int i) const { return plan.buffers(inst.outputs(i)); }

  absl::Status rank(const Buffer &b, int r, absl::string_view name) const {
    if (b.shape_size() != r)
      return fail(absl::StrCat(name, " '", b.name(), "' has rank ",
                               b.shape_size(), ", expected ", r));
    return absl::OkStatus();
  }
  absl::Status minRank(const Buffer &b, int r, absl::string_view name) const {
    if (b.shape_size() < r)
      return fail(absl::StrCat(name, " '", b.name(), "' has rank ",
                               b.shape_size(), ", expected at least ", r));
    return absl::OkStatus();
  }
  absl::Status shape(const Buffer &b, const std::vector<int64_t> &want,
                     absl::string_view name) const {
    if (std::vector<int64_t>(b.shape().begin(), b.shape().end()) != want)
      return fail(absl::StrCat(name, " '", b.name(), "' is ", internal::shapeStr(b),
                               ", expected [", absl::StrJoin(want, ", "), "]"));
    return absl::OkStatus();
  }
  absl::Status same(const Buffer &b, const Buffer &like,
                    absl::string_view name) const {
    if (b.dtype() != like.dtype())
      return fail(absl::StrCat(name, " '", b.name(), "' is ", DType_Name(b.dtype()),
                               ", expected ", DType_Name(like.dtype())));
    return shape(b, {like.shape().begin(), like.shape().end()}, name);
  }
  /// All float operands share one dtype T; `ids` lists the operands
  /// (inputs then outputs, numbered together) that are int32. Mixed
  /// precision: the operands in `wide` (parameter gradients, the loss and
  /// its row statistics) may instead be F32 where T is BF16 or F16.
  absl::Status dtypes(std::set<int> ids = {}, std::set<int> wide = {}) const {
    DType floatType = DTYPE_UNSPECIFIED;
    std::vector<const Buffer *> wideOperands;
    int n = 0;
    auto visit = [&](const Buffer &b) -> absl::Status {
      int k = n++;
      if (ids.count(k)) {
        if (b.dtype() != I32)
          return fail(absl::StrCat("operand '", b.name(), "' must be I32, found ",
                                   DType_Name(b.dtype())));
        return absl::OkStatus();
      }
      if (!internal::isFloat(b.dtype()))
        return fail(absl::StrCat("operand '", b.name(), "' must be a float type, found ",
                                 DType_Name(b.dtype())));
      if (wide.count(k)) {
        wideOperands.push_back(&b);
        return absl::OkStatus();
      }
      if (floatType == DTYPE_UNSPECIFIED)
        floatType = b.dtype();
      else if (b.dtype() != floatType)
        return fail(absl::StrCat("operands mix ", DType_Name(floatType), " and ",
                                 DType_Name(b.dtype())));
      return absl::OkStatus();
    };
    for (int i = 0; i < inst.inputs_size(); ++i)
      if (absl::Status s = visit(in(i)); !s.ok())
        return s;
    for (int i = 0; i < inst.outputs_size(); ++i)
      if (absl::Status s = visit(out(i)); !s.ok())
        return s;
    bool low = floatType == BF16 || floatType == F16;
    for (const Buffer *b : wideOperands)
      if (floatType != DTYPE_UNSPECIFIED && b->dtype() != floatType &&
          !(low && b->dtype() == F32))
        return fail(absl::StrCat("operand '", b->name(), "' is ",
                                 DType_Name(b->dtype()), ", expected ",
                                 DType_Name(floatType),
                                 low ? " or F32 (mixed precision)" : ""));
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> intAttr(absl::string_view name, int64_t lo,
                                  int64_t hi) const {
    auto it = inst.int_attrs().find(std::string(name));
    if (it == inst.int_attrs().end())
      return fail(absl::StrCat("lacks the integer attribute '", name, "'"));
    if (it->second < lo || it->second > hi)
      return fail(absl::StrCat("attribute '", name, "' = ", it->second,
                               " is outside [", lo, ", ", hi, "]"));
    return it->second;
  }
  /// An optional 0/1 flag: false when absent.
  absl::StatusOr<bool> optionalFlag(absl::string_view name) const {
    if (!inst.int_attrs().count(std::string(name)))
      return false;
    absl::StatusOr<int64_t> v = intAttr(name, 0, 1);
    if (!v.ok())
      return v.status();
    return *v != 0;
  }
  absl::StatusOr<double> floatAttr(absl::string_view name, double lo,
                                   double hi, bool openHigh = false) const {
    auto it = inst.float_attrs().find(std::string(name));
    if (it == inst.float_attrs().end())
      return fail(absl::StrCat("lacks the float attribute '", name, "'"));
    double v = it->second;
    if (!std::isfinite(v) || v < lo || v > hi || (openHigh && v == hi))
      return fail(absl::StrCat("attribute '", name, "' = ", v, " is outside [",
                               lo, ", ", hi, openHigh ? ")" : "]"));
    return v;
  }

  // The checks Kernels.def's rows name (beyond the operand counts, group
  // and rank_axis, which check() does for every kernel from its row).
  absl::Status checkEmbedding(bool forward);
  absl::Status checkPositionEmbedding(bool grad);
  absl::Status checkLinear();
  absl::Status checkLinearGradInput();
  absl::Status checkLinearGradWeight();
  absl::Status checkBiasGrad();
  absl::Status checkNorm(bool layerNorm, bool grad);
  absl::Status checkRope();
  absl::Status checkAttention(bool grad);
  absl::Status checkQkv(bool split);
  absl::Status checkSwiglu(bool grad);
  absl::Status checkElementwise(bool tanhAttr);
  absl::Status checkDropout();
  absl::Status checkScale();
  absl::Status checkCrossEntropy();
  absl::Status checkCrossEntropyGrad();
  absl::Status checkCrossEntropyMax();
  absl::Status checkCrossEntropyPartial();
  absl::Status checkCrossEntropyFinish();
  absl::Status checkGradNorm();
  absl::Status checkAdamW();
  absl::Status checkAllReduce();
  absl::Status checkGatherScatter(bool gather);
  absl::Status checkPointToPoint(bool send);
  absl::Status checkCopy();
  absl::Status checkRopeAt();
  absl::Status checkAttentionCached();
  absl::Status checkTakeRows();
  absl::Status checkSample();
  absl::Status checkTopLogprobs();
  absl::Status checkTokenLogprobs();
  absl::Status checkTokenLogprobsPartial();
  absl::Status checkTokenLogprobsFinish();
  absl::Status checkTopCandidates();
  absl::Status checkReorderRows();

  /// Checks the operand counts against the kernel's row of Kernels.def.
  absl::Status checkArity(const KernelInfo &info);
  absl::Status checkGroup(const KernelInfo &info);
  absl::Status checkPackedSwiglu(bool grad);
  absl::StatusOr<int64_t> checkHeads(int64_t heads);
  absl::Status checkDropoutSlice();
  /// CROSS_ENTROPY, _GRAD and _PARTIAL: the logits' checks they share;
  /// returns the logits' leading dimensions.
  absl::StatusOr<std::vector<int64_t>> checkLogits(std::set<int> ids,
                                                   std::set<int> wide);
  /// The number of ranks in the instruction's group (validated by
  /// checkGroup): the product of its axes' sizes, 1 without a group.
  int64_t groupSize() const;
  /// The size of the instruction's rank_axis (1 when it has none).
  absl::StatusOr<int64_t> rankAxisSize() const;
  /// A slice of the vocabulary: `local` ids (table rows or logit columns,
  /// named by `what`) per rank of the rank_axis, rank c's starting at c x the
  /// int attribute vocab_start_stride (required with a rank_axis, optional
  /// and unused without). Every rank's slice must stay inside the global
  /// vocabulary of local x axis-size ids, which must fit in int64.
  absl::Status checkVocabSlice(int64_t local, absl::string_view what) const;
  /// The draw's logits: a float [B, 1, V].
  absl::Status drawLogits(const Buffer &logits) const;
  /// SAMPLE's and TOP_LOGPROBS' candidate ids: [B, V] I32 for logits [B, 1,
  /// V].
  absl::Status candidateIds(const Buffer &ids, const Buffer &logits) const;
  /// A slice along the rank_axis of something that is not the vocabulary:
  /// `local` elements (named by `what`) per rank, rank c's starting at c x
  /// the int attribute `strideAttr` (required with a rank_axis, in [0,
  /// INT64_MAX] whenever present). Every rank's slice must end within
  /// `limit` elements (described by `limitWhat`).
  absl::Status checkRankSlice(absl::string_view strideAttr, int64_t local,
                              absl::string_view what, int64_t limit,
                              absl::string_view limitWhat) const;

  const Plan &plan;
  const Instruction &inst;
  int stage;
  std::string where;
};

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_KERNELCHECKS_H
