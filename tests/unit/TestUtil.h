//===- TestUtil.h - Helpers shared by the unit tests ------------*- C++ -*-===//

#ifndef BRAID_TESTS_UNIT_TESTUTIL_H
#define BRAID_TESTS_UNIT_TESTUTIL_H

#include "compiler/Compile.h"
#include "frontends/ModelConfig.h"
#include "frontends/ParallelConfig.h"
#include "frontends/TrainConfig.h"
#include "runtime/plan/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace braid::test {

/// A job naming only a preset, with a given batch shape.
spec::JobSpec presetJob(const std::string &preset, int64_t seqLength = 128,
                        int64_t microBatch = 1);

/// The path of a file under tests/lit/Inputs.
std::string inputPath(const std::string &relative);

/// Resolves `job`'s model and train sections (which must succeed), builds
/// its forward module and runs the phases up to `phase` (which must succeed)
/// in `context`; the resolved sections go to `config` and `train` when given.
mlir::OwningOpRef<mlir::ModuleOp> compileTo(mlir::MLIRContext &context,
                                            const spec::JobSpec &job,
                                            Phase phase,
                                            ModelConfig *config = nullptr,
                                            TrainConfig *train = nullptr,
                                            ParallelConfig *parallel = nullptr);

/// compileTo the `model` phase.
mlir::OwningOpRef<mlir::ModuleOp> compileModel(mlir::MLIRContext &context,
                                               const spec::JobSpec &job,
                                               ModelConfig *config = nullptr);

/// `job` compiled to its plan file's message (the phases, plan-verify
/// included, must pass), with the training settings a plan file carries.
plan::Plan compilePlan(const spec::JobSpec &job);

/// The message of a resolve error, or "" when `job` resolves.
std::string resolveError(const spec::JobSpec &job);

} // namespace braid::test

#endif // BRAID_TESTS_UNIT_TESTUTIL_H
