//===- PlanDialect.h - The `plan` dialect -----------------------*- C++ -*-===//

#ifndef BRAID_DIALECTS_PLAN_PLANDIALECT_H
#define BRAID_DIALECTS_PLAN_PLANDIALECT_H

#include "runtime/plan/KernelFlags.h"

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

/// The buffer a kernel's input or output refers to (`@b3`: "b3").
inline llvm::StringRef bufferName(mlir::Attribute ref) {
  return llvm::cast<mlir::SymbolRefAttr>(ref).getRootReference().getValue();
}

/// The pipeline stages of a plan module, by index (empty without a
/// pipeline).
llvm::SmallVector<StageOp> getStages(mlir::ModuleOp module);

/// One call of a stage's schedule, `"B3.1:2@fn"`: its kind ('F', 'B' or
/// 'W'), micro-batch 3, model chunk 1, slot 2, and the function it names of
/// its own (empty when it runs its chunk's).
struct ScheduleCall {
  char kind = '?';
  int64_t microBatch = 0, chunk = 0, slot = 0;
  llvm::StringRef function;
};
/// Parses a call of StageOp's `schedule`; failure when it is malformed (the
/// kind is not checked).
mlir::FailureOr<ScheduleCall> parseScheduleCall(llvm::StringRef text);
/// The function `call` runs on `stage`: its own, or its chunk's of its
/// kind; none when the stage lacks it (a chunk it does not have, a W
/// without backward_weight).
std::optional<llvm::StringRef> functionOfCall(StageOp stage,
                                              const ScheduleCall &call);

} // namespace braid::plan_ir

#endif // BRAID_DIALECTS_PLAN_PLANDIALECT_H
