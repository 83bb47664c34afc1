//===- Recompute.h - What each layer can recompute --------------*- C++ -*-===//
//
// The analysis behind `model-recompute`, shared with the compiler's memory
// budget search (`--recompute auto`).
//
// A forward layer keeps, for its backward layer, its inputs (the residual
// stream and the parameters) and the values autodiff saved (the layer's
// extra results). Recomputing a saved value means cloning, at the start of
// the backward layer, the forward ops that make it from the inputs and the
// saved values still kept. Each layer offers a nested sequence of choices,
// from keeping every saved value (level 0) to keeping none (the last level,
// Megatron's full recompute), built greedily: each level drops the value that
// costs the fewest recompute FLOPs per byte it frees.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_MODEL_RECOMPUTE_H
#define BRAID_PASSES_MODEL_RECOMPUTE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/SmallVector.h"

#include <string>
#include <vector>

namespace braid::model {

/// One choice for a layer: the saved values it drops (indices into the
/// layer's saved values), what it still keeps, and what recomputing costs.
struct RecomputeLevel {
  llvm::SmallVector<unsigned> dropped;
  /// Bytes of saved values kept per micro-batch (inputs not counted).
  int64_t keptBytes = 0;
  /// FLOPs (matrix and vector) of the forward ops cloned into backward.
  double flops = 0;
  /// Whether recomputing needs a matrix product or a collective.
  bool matmul = false, collective = false;
};

/// A forward layer of @train_step and its choices.
struct LayerRecompute {
  int64_t layer = 0;
  /// Its pipeline stage (model.stage), -1 without a pipeline.
  int64_t stage = -1;
  /// Bytes per micro-batch of its activation inputs (the residual stream),
  /// which the backward reads whatever is recomputed.
  int64_t inputBytes = 0;
  /// What each saved value is (the op that makes it) and its bytes.
  std::vector<std::string> savedNames;
  llvm::SmallVector<int64_t> savedBytes;
  /// Level 0 keeps everything, the last keeps nothing.
  llvm::SmallVector<RecomputeLevel> levels;
  /// The values `selective` drops: those whose recomputation from the
  /// others needs no matrix product and no collective.
  RecomputeLevel selective;
};

/// The forward layers of @train_step (autodiff done) with their choices, in
/// layer order; fails with a diagnostic on a step it does not understand.
mlir::FailureOr<std::vector<LayerRecompute>>
analyzeRecompute(mlir::ModuleOp module);

} // namespace braid::model

#endif // BRAID_PASSES_MODEL_RECOMPUTE_H
