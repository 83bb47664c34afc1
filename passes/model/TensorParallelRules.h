//===- TensorParallelRules.h - Per-op tensor-parallel rules -----*- C++ -*-===//
//
// TensorParallelOpInterface (TensorParallelRules.td) and the registration of
// its implementations for the `model` ops (TensorParallelRules.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_MODEL_TENSORPARALLELRULES_H
#define BRAID_PASSES_MODEL_TENSORPARALLELRULES_H

#include "dialects/model/ModelDialect.h"

#include "mlir/IR/OpDefinition.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace braid::model {
class TensorParallel;
} // namespace braid::model

#include "passes/model/TensorParallelRules.h.inc"

namespace braid::model {

/// Attaches the tensor-parallel rule of every `model` op that has one (as
/// an external model of TensorParallelOpInterface) when the `model` dialect
/// is loaded. Called with the dialects' registration (braid::
/// registerDialects); model-shard refuses to split over tp without it.
void registerTensorParallelRules(mlir::DialectRegistry &registry);

} // namespace braid::model

#endif // BRAID_PASSES_MODEL_TENSORPARALLELRULES_H
