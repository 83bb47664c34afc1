//===- Registration.cpp - Dialects and passes of Braid --------------------===//

#include "compiler/Registration.h"

#include "dialects/model/ModelDialect.h"
#include "dialects/plan/PlanDialect.h"
#include "passes/model/Passes.h"
#include "passes/model/TensorParallelRules.h"
#include "passes/plan/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"

void braid::registerDialects(mlir::DialectRegistry &registry) {
  registry.insert<braid::model::ModelDialect, braid::plan_ir::PlanDialect,
                  mlir::func::FuncDialect>();
  braid::model::registerTensorParallelRules(registry);
}

void braid::registerPasses() {
  braid::model::registerModelPasses();
  braid::plan_ir::registerPlanPasses();
}
