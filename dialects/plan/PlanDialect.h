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

#endif // BRAID_DIALECTS_PLAN_PLANDIALECT_H
