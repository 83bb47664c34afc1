//===- ModelBuilder.h - Model spec to `model` IR ----------------*- C++ -*-===//

#ifndef BRAID_FRONTENDS_MODELBUILDER_H
#define BRAID_FRONTENDS_MODELBUILDER_H

#include "frontends/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace braid {

/// Builds the forward graph of one training step for `config`: a module with
/// `func.func @forward(params..., tokens, targets) -> loss`. Parameters are
/// named (model.param) and shaped as in the family's Hugging Face checkpoint;
/// each transformer layer is one `model.layer`. The module carries the
/// architecture as the `model.config` dictionary.
mlir::OwningOpRef<mlir::ModuleOp> buildForwardModule(mlir::MLIRContext &context,
                                                     const ModelConfig &config);

} // namespace braid

#endif // BRAID_FRONTENDS_MODELBUILDER_H
