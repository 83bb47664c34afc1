//===- Lowering.h - plan-lower's state, shared by its files ----*- C++ -*-===//
//
// The internal interface of `plan-lower` (see Passes.td). One `Lowering`
// turns the module's model function into plan functions:
//
// - PlanLower.cpp: the buffers of values and arguments, the planning of
//   gradient accumulation, the kernel of each op (its parameters, its
//   accumulated results, the log-sum-exp it keeps), and the step without
//   pipeline stages (zero_grads, micro_step, update);
// - PlanLowerPipeline.cpp: a step cut into pipeline stages (each stage's
//   functions, the transfers between stages, shared parameters, slotted
//   buffers) and, for zero-bubble schedules, the split of the weight
//   gradients into backward_weight functions;
// - PlanLowerGenerate.cpp: an inference graph into prefill and decode.
//
// ZeRO is not part of the lowering: `plan-zero` rewrites the update that
// this makes (PlanZero.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_PLAN_LOWERING_H
#define BRAID_PASSES_PLAN_LOWERING_H

#include "passes/plan/Passes.h"

#include "dialects/model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>
#include <string>

namespace braid::plan_ir::lowering {

/// The results of `op` that its kernel adds into rather than overwrites.
llvm::SmallVector<mlir::Value> accumulatedResults(mlir::Operation *op);

/// The optimizer's ops, which run once per step in update.
bool isOptimizerOp(mlir::Operation *op);

/// The pipeline stage of a top-level op of the step (model.stage; -1: the
/// clipping norm, which every stage computes over its own gradients).
int64_t stageOf(mlir::Operation *op);

/// The lowering of one model function (the module's only one).
class Lowering {
public:
  Lowering(mlir::ModuleOp module, mlir::func::FuncOp func, bool splitBackward);

  /// Replaces the model function with the plan's functions.
  mlir::LogicalResult run();

private:
  //===--------------------------------------------------------------------===//
  // Buffers and kernels (PlanLower.cpp)
  //===--------------------------------------------------------------------===//

  /// A new buffer, placed before the functions being made (`firstFunc`).
  BufferOp newBuffer(mlir::Location loc, mlir::Type type, llvm::StringRef role,
                     llvm::StringRef name = {});
  /// The buffer of `v`, recorded as its.
  BufferOp newBuffer(mlir::Value v, llvm::StringRef role,
                     llvm::StringRef name = {}) {
    return buffers[v] = newBuffer(v.getLoc(), storageType(v), role, name);
  }
  /// The buffer of the model function's argument `arg`.
  mlir::LogicalResult argBuffer(mlir::BlockArgument arg);
  /// Marks `buffer` as the slice of a split tensor that the argument `arg`
  /// of the model function is (its model.sharding and model.shard_blocks).
  mlir::LogicalResult setShard(BufferOp buffer, unsigned arg);
  /// Mixed precision (the model computes in bf16 or f16): the parameters'
  /// gradients, what the optimizer sums from them, and its state (moments,
  /// and master weights of which it rounds the model's weights) are kept
  /// in f32. Whether `v` is such a gradient: a parameter gradient kernel's
  /// result, or a sum of them (model.add, model.all_reduce).
  bool isWide(mlir::Value v);
  /// The input whose buffer `op`'s result may take (Kernels.def's
  /// kOverwritesInput flags): an activation of its storage type that this
  /// block made and nothing reads after `op`; none otherwise.
  std::optional<unsigned> overwritableInput(mlir::Operation *op);
  /// The type of `v`'s buffer: f32 elements for a wide value.
  mlir::Type storageType(mlir::Value v) {
    return mixed && isWide(v) ? widen(v.getType()) : v.getType();
  }
  mlir::Type widen(mlir::Type type) const;
  /// The element type of a kept row statistic (a log-sum-exp) of values of
  /// `element`: f32 beside bf16 or f16, else the values' own.
  mlir::Type statisticType(mlir::Type element) const;
  /// Copies a parameter's slicing (shard axis, dimension, blocks) to a
  /// buffer of the same shape (its gradient, its master weights).
  void copySlicing(BufferOp from, BufferOp to);
  /// A kernel at the insertion point.
  void kernel(braid::plan::KernelId kernel, llvm::ArrayRef<BufferOp> inputs,
              llvm::ArrayRef<BufferOp> outputs, mlir::DictionaryAttr params,
              mlir::Location loc, llvm::StringRef provenance,
              mlir::ArrayAttr group = {}, mlir::StringAttr rankAxis = {});
  llvm::SmallVector<BufferOp> buffersOf(mlir::ValueRange values);
  /// A new, empty plan function at the insertion point.
  FuncOp newFunc(llvm::StringRef name);

  //===--------------------------------------------------------------------===//
  // Ops (PlanLower.cpp)
  //===--------------------------------------------------------------------===//

  /// Ops that run once per step, after the last micro-batch: the optimizer
  /// and the data-parallel sums of the gradients it reads.
  bool isUpdateOp(mlir::Operation *op) const {
    return isOptimizerOp(op) || stepReductions.contains(op);
  }
  /// Decides how `v`, a contribution to the gradient held in `grad`, gets
  /// there (see PlanLower.cpp).
  mlir::LogicalResult planAccumulation(mlir::Value v, BufferOp grad, bool top);
  /// The gradients the optimizer of the ops `inStep` reads, each with its
  /// accumulation buffer, their accumulation planned and their ZEROs in
  /// `zeroGrads`.
  mlir::FailureOr<llvm::SmallVector<std::pair<mlir::Value, BufferOp>>>
  planGradients(llvm::function_ref<bool(mlir::Operation *)> inStep,
                FuncOp zeroGrads);
  mlir::LogicalResult lowerBlock(mlir::Block &block, llvm::StringRef where);
  mlir::LogicalResult lowerOp(mlir::Operation *op, llvm::StringRef where);
  mlir::LogicalResult lowerGradNorm(model::GradNormOp op,
                                    llvm::StringRef provenance);
  mlir::FailureOr<mlir::DictionaryAttr> kernelParams(mlir::Operation *op,
                                                     mlir::StringAttr &rankAxis);

  //===--------------------------------------------------------------------===//
  // Pipeline stages (PlanLowerPipeline.cpp)
  //===--------------------------------------------------------------------===//

  /// The step cut into the pipeline stages `stages` (model.pipeline).
  mlir::LogicalResult runPipeline(mlir::ArrayAttr stages);

  //===--------------------------------------------------------------------===//
  // Inference plans (PlanLowerGenerate.cpp)
  //===--------------------------------------------------------------------===//

  /// An inference graph (the module has model.generate): each op into the
  /// function its model.phase names, the caches into kv_cache buffers that
  /// both functions update in place, the results named by model.result.
  mlir::LogicalResult runGenerate();
  /// Zero-bubble split: lowers the weight gradient `op` into `weightFn`.
  mlir::LogicalResult lowerIntoWeightFunction(mlir::Operation *op);
  int64_t rankOf(int64_t virtualStage) const {
    return virtualStage < 0 ? -1 : rankOfStage[virtualStage];
  }

  mlir::ModuleOp module;
  mlir::func::FuncOp func;
  mlir::OpBuilder b;
  /// The first function of those being made; buffers go before it.
  FuncOp firstFunc;
  llvm::DenseMap<mlir::Value, BufferOp> buffers;
  /// Results whose accumulating kernel writes into a gradient buffer.
  llvm::DenseMap<mlir::Value, BufferOp> accumulateInto;
  /// Results added into a gradient buffer by an ADD after their kernel.
  llvm::DenseMap<mlir::Value, BufferOp> addInto;
  /// The `model.add` ops of gradient sums that accumulation replaces.
  llvm::DenseSet<mlir::Operation *> absorbed;
  /// The all-reduces of gradients, run in place on the accumulated buffers.
  llvm::DenseSet<mlir::Operation *> stepReductions;
  /// Numbers the buffers: b0, b1, ...
  unsigned counter = 0;
  bool mixed = false;
  llvm::DenseMap<mlir::Value, bool> wide;
  /// The log-sum-exp buffer kept with each attention output buffer, and
  /// with each cross-entropy's logits (layers pass values to their bodies,
  /// so the buffer, not the value, is the key).
  llvm::DenseMap<mlir::Operation *, BufferOp> lseOf;
  /// With pipeline parallelism, the pipeline rank being lowered (the
  /// buffers' stage), and the rank of each of the model's stages (virtual
  /// stages, with the interleaved schedule).
  std::optional<int64_t> stage;
  llvm::SmallVector<int64_t> rankOfStage;
  /// Zero-bubble schedules: each stage's weight gradients go to their own
  /// function, `weightFn` while a backward is lowered.
  bool splitBackward;
  FuncOp weightFn;
  /// Pipeline: contributions to a parameter's gradient made on another
  /// stage than the one that updates it (a tied embedding's output-layer
  /// half), by value, with the parameter.
  llvm::DenseMap<mlir::Value, mlir::Value> remoteContributions;
  /// The owner stage's gradient buffers that such contributions are added
  /// into, in update.
  llvm::SmallVector<std::pair<mlir::Value, BufferOp>> remoteInto;
};

} // namespace braid::plan_ir::lowering

#endif // BRAID_PASSES_PLAN_LOWERING_H
