//===- TensorParallel.h - model-shard's propagation of layouts --*- C++ -*-===//
//
// The engine of `model-shard`'s tensor parallelism: it walks the training
// step in program order, inlines the layers' bodies, keeps the layout
// (Layout.h) of every value and the parameters bound to each layer
// argument, and asks each op's rule (TensorParallelOpInterface,
// TensorParallelRules.cpp) for its results' layouts. The rules see it
// through the public methods below: layouts, the parameters' decisions,
// and the collectives that make a value whole or a sequence slice.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_MODEL_TENSORPARALLEL_H
#define BRAID_PASSES_MODEL_TENSORPARALLEL_H

#include "passes/model/Layout.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace braid::model {

/// The local program of a tensor-parallel rank of `@train_step`.
class TensorParallel {
public:
  TensorParallel(mlir::func::FuncOp func, int64_t tp, bool sp,
                 mlir::FlatSymbolRefAttr mesh);

  /// Makes the function the program of one rank of tp: local types,
  /// attributes and tp collectives, and the arguments' shardings.
  mlir::LogicalResult run();

  //===--------------------------------------------------------------------===//
  // What the rules see
  //===--------------------------------------------------------------------===//

  int64_t tp() const { return tpSize; }
  /// Sequence parallelism.
  bool sp() const { return seqParallel; }
  mlir::OpBuilder &builder() { return b; }
  mlir::func::FuncOp function() const { return func; }
  mlir::FlatSymbolRefAttr mesh() const { return meshRef; }

  /// The layout of `v` (replicated until set).
  Layout layout(mlir::Value v) const { return layouts.lookup(v); }
  /// Gives `v` (whose type is still the global one) its layout and local
  /// type.
  mlir::LogicalResult setLayout(mlir::Value v, Layout layout,
                                mlir::Operation *at);
  /// Records the layout of `v`, whose type is already the local one (a value
  /// a rule made).
  void record(mlir::Value v, Layout layout) { layouts[v] = std::move(layout); }

  /// Whether `v` stands for a parameter whose layout is not decided yet.
  bool undecided(mlir::Value v) const {
    mlir::BlockArgument p = paramOf(v);
    return p && !decided.contains(p);
  }
  /// Fixes the layout of the parameter `v` stands for, and the types of its
  /// argument and of every layer argument bound to it.
  mlir::LogicalResult decide(mlir::Value v, Layout layout, mlir::Operation *at);
  /// The name (model.param) of the parameter `v` stands for, or "?".
  std::string paramName(mlir::Value v) const;

  /// True when `v` is split along the sequence (sequence parallelism): a
  /// `[batch, seq, ...]` activation split on dimension 1.
  bool isSeq(mlir::Value v) const;
  /// The whole value of `v` for `user`, collected just before it (and
  /// reused by later users in the same block): partial sums all-reduced,
  /// sequence slices all-gathered. Other values are returned as they are.
  mlir::Value whole(mlir::Value v, mlir::Operation *user);
  /// `v` as this rank's sequence slice for `user`: partial sums
  /// reduce-scattered. Other values are returned as they are.
  mlir::Value seqSlice(mlir::Value v, mlir::Operation *user);
  /// Replaces the operands of `op` that are partial sums or sequence slices
  /// by their whole values.
  void resolveOperands(mlir::Operation *op);
  /// Sums the partial result of a forward op right after it: an all-reduce,
  /// or with sequence parallelism a reduce-scatter into sequence slices.
  void reduceNow(mlir::Value v, mlir::Operation *op);
  /// An all-reduce over tp of `v` at the builder's insertion point (of the
  /// maxima with `max`), its result whole.
  AllReduceOp createAllReduce(mlir::Location loc, mlir::Value v,
                              llvm::StringRef reason, bool max = false);

  /// The global log-sum-exp of the vocab-parallel loss of `logits` (null if
  /// none), and its recording.
  mlir::Value lossLse(mlir::Value logits) const { return lseOf.lookup(logits); }
  void setLossLse(mlir::Value logits, mlir::Value lse) { lseOf[logits] = lse; }

  /// The refusal of an op no rule can split.
  mlir::LogicalResult unsupported(mlir::Operation *op, const llvm::Twine &why);

private:
  mlir::LogicalResult visitBlock(mlir::Block &block);
  mlir::LogicalResult visit(mlir::Operation *op);
  mlir::LogicalResult visitLayer(LayerOp layer);
  /// The parameter argument of the function that `v` is (directly or as a
  /// layer's block argument), or null.
  mlir::BlockArgument paramOf(mlir::Value v) const { return params.lookup(v); }
  mlir::Value createSliceCollective(mlir::Location loc, mlir::Value v,
                                    bool gather, llvm::StringRef reason);

  mlir::func::FuncOp func;
  int64_t tpSize;
  bool seqParallel;
  mlir::OpBuilder b;
  mlir::FlatSymbolRefAttr meshRef;
  llvm::DenseMap<mlir::Value, Layout> layouts;
  /// Values that stand for a parameter argument: the argument itself and
  /// the layer block arguments bound to it.
  llvm::DenseMap<mlir::Value, mlir::BlockArgument> params;
  llvm::DenseMap<mlir::BlockArgument, llvm::SmallVector<mlir::Value>> bound;
  llvm::DenseSet<mlir::BlockArgument> decided;
  /// The global log-sum-exp of each vocab-parallel loss, by logits.
  llvm::DenseMap<mlir::Value, mlir::Value> lseOf;
  /// The whole value and the sequence slice of values already resolved.
  llvm::DenseMap<mlir::Value, mlir::Value> wholeOf, sliceOf;
};

} // namespace braid::model

#endif // BRAID_PASSES_MODEL_TENSORPARALLEL_H
