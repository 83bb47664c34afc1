//===- Passes.h - Passes producing and planning `plan` IR -------*- C++ -*-===//

#ifndef BRAID_PASSES_PLAN_PASSES_H
#define BRAID_PASSES_PLAN_PASSES_H

#include "dialects/plan/PlanDialect.h"
#include "mlir/Pass/Pass.h"

namespace braid::plan_ir {

#define GEN_PASS_DECL
#include "passes/plan/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/plan/Passes.h.inc"

} // namespace braid::plan_ir

#endif // BRAID_PASSES_PLAN_PASSES_H
