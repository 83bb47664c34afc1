//===- PlanExport.h - `plan` IR to the plan file ----------------*- C++ -*-===//

#ifndef BRAID_COMPILER_PLANEXPORT_H
#define BRAID_COMPILER_PLANEXPORT_H

#include "frontends/ModelConfig.h"
#include "frontends/ParallelConfig.h"
#include "frontends/TrainConfig.h"
#include "runtime/plan/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace braid {

/// The plan file's message for a module of the `plan` dialect whose buffers
/// all have offsets (after plan-memory). The result is validated as
/// braid-run would validate it, so a plan braidc writes is one braid-run
/// accepts.
llvm::Expected<plan::Plan> exportPlan(mlir::ModuleOp module);

/// The plan's training settings for a job (braid-run's step loop), all but
/// the step functions, which exportPlan() fills: merge it into the exported
/// plan's `training` (MergeFrom).
plan::Training trainingSettings(const ModelConfig &model,
                                const TrainConfig &train,
                                const ParallelConfig &parallel,
                                const spec::DataSpec &data);

} // namespace braid

#endif // BRAID_COMPILER_PLANEXPORT_H
