//===- Passes.h - Passes on the `model` dialect -----------------*- C++ -*-===//

#ifndef BRAID_PASSES_MODEL_PASSES_H
#define BRAID_PASSES_MODEL_PASSES_H

#include "dialects/model/ModelDialect.h"
#include "mlir/Pass/Pass.h"

namespace braid::model {

/// The mesh model-shard declares, and its tensor-parallel axis, which
/// model-grad-reduce reads back.
inline constexpr llvm::StringLiteral kMeshName = "mesh";
inline constexpr llvm::StringLiteral kTp = "tp";

#define GEN_PASS_DECL
#include "passes/model/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/model/Passes.h.inc"

} // namespace braid::model

#endif // BRAID_PASSES_MODEL_PASSES_H
