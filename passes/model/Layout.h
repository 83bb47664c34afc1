//===- Layout.h - How a value lies over the tensor-parallel ranks -*- C++ -*-===//
//
// The lattice of `model-shard`'s tensor parallelism: every value is whole on
// each rank of `tp` (replicated), split along one dimension (possibly made
// of blocks, each split evenly: a fused [Q | K | V]), or partial (each rank
// holds a term of a sum). The per-op rules (TensorParallelRules.cpp) say how
// an op's layouts follow from its operands'.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_MODEL_LAYOUT_H
#define BRAID_PASSES_MODEL_LAYOUT_H

#include "dialects/model/ModelDialect.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace braid::model {

/// How a value is laid out over the ranks of `tp`.
struct Layout {
  enum Kind { Replicated, Split, Partial } kind = Replicated;
  /// Split: the dimension split over tp.
  int64_t dim = 0;
  /// Split: the global sizes of the blocks the dimension is made of (empty:
  /// one block).
  llvm::SmallVector<int64_t> blocks;
  /// Partial: what made the partial sums, for the reason of their all-reduce.
  std::string why;

  static Layout split(int64_t dim, llvm::ArrayRef<int64_t> blocks = {});
  static Layout partial(llvm::StringRef why);
  bool isSplit() const { return kind == Split; }
  bool isPartial() const { return kind == Partial; }
  bool isReplicated() const { return kind == Replicated; }
  /// The same layout (the reasons of partial sums aside).
  bool sameAs(const Layout &o) const {
    return kind == o.kind &&
           (kind != Split || (dim == o.dim && blocks == o.blocks));
  }
};

/// Whether `l` is split as a packed [gate | up]: two blocks of one size.
bool isGateUp(const Layout &l);

/// `type` as one rank of `tp` holds it: the dimension `layout` splits
/// divided by tp. Fails, naming `what` at `at`, when a block of that
/// dimension does not divide by tp.
mlir::FailureOr<mlir::Type> localType(mlir::Type type, const Layout &layout,
                                      int64_t tp, mlir::Operation *at,
                                      llvm::StringRef what);

/// The `#model.sharding` of a tensor of rank `rank` laid out as `layout`
/// over the mesh axis `axis` of `mesh` (blocks are not part of it: see
/// model.shard_blocks).
ShardingAttr shardingOf(const Layout &layout, mlir::FlatSymbolRefAttr mesh,
                        llvm::StringRef axis, int64_t rank);

} // namespace braid::model

#endif // BRAID_PASSES_MODEL_LAYOUT_H
