//===- Zero.h - plan-zero's rewrite of one update function -----*- C++ -*-===//
//
// The internal interface of `plan-zero` (see Passes.td): PlanZero.cpp reads
// the optimizer that plan-lower made and names the buffers; ZeroBuckets.cpp
// makes the buckets and their kernels.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_PLAN_ZERO_H
#define BRAID_PASSES_PLAN_ZERO_H

#include "passes/plan/PlanBuild.h"
#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>

namespace braid::plan_ir::zero {

/// One parameter of the optimizer: its ADAMW's buffers and attributes (ops
/// are handles: a const Member still changes its buffers).
struct Member {
  mutable BufferOp param, grad, m, v, lr, step;
  mlir::DictionaryAttr params;
  mlir::Location loc;
};

/// Parameters that go into buckets together: the same reduction axes,
/// weight decay and replication over the norm's axes.
struct Kind {
  llvm::SmallVector<std::string> axes;
  double decay;
  bool replicated;
  bool operator==(const Kind &o) const {
    return axes == o.axes && decay == o.decay && replicated == o.replicated;
  }
};

/// Gradients reduced and parameters updated together: views of two flat
/// buffers.
struct Bucket {
  const Kind *kind;
  llvm::SmallVector<Member> members;
  BufferOp flatGrad, flatParam, m, v, block, accumulated;
  /// Mixed precision: this rank's block of the f32 master weights.
  BufferOp master;
  /// ZeRO-2: the last kernel writing its gradients, and the first kernel of
  /// its reduction (placed right after it).
  KernelOp last, start;
};

/// ZeRO of one update function (the plan's, or one pipeline stage's).
class ZeroUpdate {
public:
  ZeroUpdate(mlir::ModuleOp module, FuncOp update, FuncOp zeroGradsFn,
             mlir::Operation *firstFunc, std::optional<int64_t> stage,
             int64_t zero, int64_t bucketBytes)
      : module(module), b(module.getContext()), update(update),
        zeroGradsFn(zeroGradsFn), firstFunc(firstFunc), stage(stage),
        zero(zero), bucketBytes(bucketBytes) {}

  mlir::LogicalResult run();

private:
  //===--------------------------------------------------------------------===//
  // PlanZero.cpp
  //===--------------------------------------------------------------------===//

  /// Reads the optimizer of the update, then erases its kernels and the
  /// buffers only they use (the norm's results, the master weights).
  mlir::LogicalResult takeOptimizer();
  /// Gives the buffers made their numbers, and moves later ones up.
  void renumber();
  /// A buffer made by the pass, before the functions of its stage.
  BufferOp newBuffer(mlir::Location loc, mlir::Type type, llvm::StringRef role,
                     llvm::StringRef name = {});
  /// A copy of `view`, right after it, for another flat buffer.
  BufferOp copyView(BufferOp view, BufferOp of);
  /// A kernel at the insertion point.
  void kernel(braid::plan::KernelId kernel, llvm::ArrayRef<BufferOp> inputs,
              llvm::ArrayRef<BufferOp> outputs, mlir::DictionaryAttr params,
              mlir::Location loc, llvm::StringRef provenance,
              mlir::ArrayAttr group = {}, mlir::StringAttr rankAxis = {}) {
    createKernel(b, kernel, inputs, outputs, params, loc, provenance, group,
                 rankAxis);
  }
  /// The buffer a kernel's input or output names (null: one the pass made).
  BufferOp bufferOf(mlir::Attribute ref) const {
    return bySymbol.lookup(bufferName(ref));
  }
  int64_t axisSize(llvm::StringRef axis) const;

  //===--------------------------------------------------------------------===//
  // ZeroBuckets.cpp
  //===--------------------------------------------------------------------===//

  /// Where each kernel is, and which kernels touch each buffer first (per
  /// function) and write it last.
  void indexKernels();
  /// The buckets, in the order their gradients are complete.
  void makeBuckets();
  /// The flat buffers and views of each bucket, and its reduce-scatter:
  /// in update, or (ZeRO-2) right after the backward's last write.
  void reduceBuckets();
  /// The clipping norm over the ranks' blocks; returns the clipping scale.
  BufferOp clipNorm();
  /// ZeRO-3: the rank keeps its block of the parameters, gathered where
  /// they are used; returns that block by flat parameter buffer.
  llvm::DenseMap<mlir::Operation *, BufferOp> gatherParameters();
  /// AdamW on the rank's blocks, then the parameters gathered back.
  void updateBuckets(BufferOp scale,
                     const llvm::DenseMap<mlir::Operation *, BufferOp> &kept);
  /// "first .. last (n tensors)": the parameters of `bucket`.
  static std::string describe(const Bucket &bucket);

  mlir::ModuleOp module;
  mlir::OpBuilder b;
  FuncOp update, zeroGradsFn;
  mlir::Operation *firstFunc;
  std::optional<int64_t> stage;
  int64_t zero, bucketBytes;

  /// The buffers the plan had when the pass began, by name.
  llvm::StringMap<BufferOp> bySymbol;
  /// The optimizer, as takeOptimizer() read it: each kind's members in the
  /// optimizer's order.
  llvm::SmallVector<std::pair<Kind, llvm::SmallVector<Member>>> kinds;
  bool mixed = false;
  mlir::DictionaryAttr normParams;
  mlir::ArrayAttr normGroup;
  std::optional<mlir::Location> normLoc;
  /// The norm's results as plan-lower made them.
  struct Result {
    mlir::Type type;
    mlir::Location loc;
    mlir::StringAttr name;
  };
  llvm::SmallVector<Result> normResults;
  /// Gradients another stage adds to in update.
  llvm::DenseSet<mlir::Operation *> sharedGrads;
  /// Where the optimizer was: its kernels go before this (null: at the end).
  mlir::Operation *insertBefore = nullptr;
  /// The numbers of the buffers erased with the optimizer.
  llvm::SmallVector<int64_t> freed;
  /// The per-parameter moments, erased once the buckets hold them.
  llvm::SmallVector<BufferOp> moments;
  /// The buffers made, in order.
  llvm::SmallVector<BufferOp> made;

  /// indexKernels(): (function, index) of each kernel; the last kernel
  /// writing each buffer; the first kernel of a function touching it.
  llvm::DenseMap<mlir::Operation *, std::pair<int64_t, int64_t>>
      kernelPosition;
  llvm::DenseMap<mlir::Operation *, KernelOp> lastWrite;
  llvm::DenseMap<std::pair<mlir::Operation *, mlir::Operation *>, KernelOp>
      firstTouchOf;
  llvm::SmallVector<Bucket> buckets;
  /// Where update's kernels go.
  mlir::OpBuilder::InsertPoint updateAt;
};

} // namespace braid::plan_ir::zero

#endif // BRAID_PASSES_PLAN_ZERO_H
