//===- TestUtil.cpp - Helpers shared by the unit tests --------------------===//

#include "TestUtil.h"

#include "compiler/Compile.h"
#include "compiler/PlanExport.h"
#include "compiler/Registration.h"
#include "frontends/ModelBuilder.h"

#include "mlir/IR/DialectRegistry.h"
#include "gtest/gtest.h"

using namespace braid;

spec::JobSpec test::presetJob(const std::string &preset, int64_t seqLength,
                              int64_t microBatch) {
  spec::JobSpec job;
  job.mutable_model()->set_preset(preset);
  job.mutable_data()->set_seq_length(seqLength);
  job.mutable_parallel()->set_micro_batch_size(microBatch);
  return job;
}

std::string test::inputPath(const std::string &relative) {
  return std::string(BRAID_TEST_INPUTS) + "/" + relative;
}

mlir::OwningOpRef<mlir::ModuleOp>
test::compileTo(mlir::MLIRContext &context, const spec::JobSpec &job,
                Phase phase, ModelConfig *configOut, TrainConfig *trainOut,
                ParallelConfig *parallelOut) {
  mlir::DialectRegistry registry;
  registerDialects(registry);
  context.appendDialectRegistry(registry);
  llvm::Expected<ModelConfig> config = resolveModel(job);
  if (!config) {
    ADD_FAILURE() << "resolve failed: " << llvm::toString(config.takeError());
    return nullptr;
  }
  llvm::Expected<TrainConfig> train = resolveTrain(job);
  if (!train) {
    ADD_FAILURE() << "resolve failed: " << llvm::toString(train.takeError());
    return nullptr;
  }
  llvm::Expected<ParallelConfig> parallel = resolveParallel(job, *config);
  if (!parallel) {
    ADD_FAILURE() << "resolve failed: " << llvm::toString(parallel.takeError());
    return nullptr;
  }
  mlir::OwningOpRef<mlir::ModuleOp> module = buildForwardModule(context, *config);
  CompileOptions options;
  options.compileTo = phase;
  options.train = *train;
  options.parallel = *parallel;
  if (llvm::Error error = runPhases(*module, options)) {
    ADD_FAILURE() << "compile failed: " << llvm::toString(std::move(error));
    return nullptr;
  }
  if (configOut)
    *configOut = *config;
  if (trainOut)
    *trainOut = *train;
  if (parallelOut)
    *parallelOut = *parallel;
  return module;
}

mlir::OwningOpRef<mlir::ModuleOp>
test::compileModel(mlir::MLIRContext &context, const spec::JobSpec &job,
                   ModelConfig *config) {
  return compileTo(context, job, Phase::Model, config);
}

std::string test::resolveError(const spec::JobSpec &job) {
  llvm::Expected<ModelConfig> config = resolveModel(job);
  if (config)
    return "";
  return llvm::toString(config.takeError());
}

plan::Plan test::compilePlan(const spec::JobSpec &job) {
  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry);
  ModelConfig config;
  TrainConfig train;
  ParallelConfig parallel;
  auto module = compileTo(context, job, Phase::Plan, &config, &train, &parallel);
  llvm::Expected<plan::Plan> plan = exportPlan(*module);
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  if (!plan)
    return plan::Plan();
  plan->mutable_training()->MergeFrom(
      trainingSettings(config, train, parallel, job.data()));
  return *plan;
}
