//===- Passes.h - Passes producing and planning `plan` IR -------*- C++ -*-===//

#ifndef BRAID_PASSES_PLAN_PASSES_H
#define BRAID_PASSES_PLAN_PASSES_H

#include "dialects/plan/PlanDialect.h"
#include "mlir/Pass/Pass.h"

namespace braid::plan_ir {

/// The functions `plan-lower` makes of a training step: run as zero_grads,
/// micro_step once per micro-batch (gradients accumulate in their buffers),
/// then update.
inline constexpr llvm::StringLiteral kZeroGradsFunc = "zero_grads";
inline constexpr llvm::StringLiteral kMicroStepFunc = "micro_step";
inline constexpr llvm::StringLiteral kUpdateFunc = "update";
/// The step's last micro-batch's function, when `plan-overlap-grad-reduce`
/// starts the gradients' sums in it (run instead of micro_step).
inline constexpr llvm::StringLiteral kLastMicroStepFunc = "last_micro_step";
/// The step's first micro-batch's function, when `plan-overlap-param-gather`
/// gathers the parameters ZeRO's update left in blocks in it (run instead
/// of micro_step, and of last_micro_step with one micro-batch), and the
/// function that gathers them at once (run before anything outside a step
/// reads them).
inline constexpr llvm::StringLiteral kFirstMicroStepFunc = "first_micro_step";
inline constexpr llvm::StringLiteral kGatherParamsFunc = "gather_params";
/// `plan-eval`'s forward-only copy of micro_step: one micro-batch's loss,
/// without dropout or gradients (a pipeline stage's copies of its forward
/// functions are named after them, with "_eval").
inline constexpr llvm::StringLiteral kEvalStepFunc = "eval_step";
/// The functions of an inference plan (an inference graph's ops marked
/// model.phase): a chunk of each sequence's prompt into the KV caches and
/// the next token, and one token of each sequence and the next.
inline constexpr llvm::StringLiteral kPrefillFunc = "prefill";
inline constexpr llvm::StringLiteral kDecodeFunc = "decode";
/// Beam search's: each cache's rows taken from the parent beams.
inline constexpr llvm::StringLiteral kReorderFunc = "reorder";
inline constexpr llvm::StringLiteral kScoreFunc = "score";

#define GEN_PASS_DECL
#include "passes/plan/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/plan/Passes.h.inc"

} // namespace braid::plan_ir

#endif // BRAID_PASSES_PLAN_PASSES_H
