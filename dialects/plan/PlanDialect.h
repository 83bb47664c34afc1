//===- PlanDialect.h - The `plan` dialect -----------------------*- C++ -*-===//

#ifndef BRAID_DIALECTS_PLAN_PLANDIALECT_H
#define BRAID_DIALECTS_PLAN_PLANDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"

#include "dialects/plan/PlanDialect.h.inc"

#define GET_OP_CLASSES
#include "dialects/plan/PlanOps.h.inc"

namespace braid::plan_ir {

/// The pipeline stages of a plan module, by index (empty without a
/// pipeline).
llvm::SmallVector<StageOp> getStages(mlir::ModuleOp module);

} // namespace braid::plan_ir

#endif // BRAID_DIALECTS_PLAN_PLANDIALECT_H
