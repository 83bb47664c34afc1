//===- Compile.cpp - The phases of a compile ------------------------------===//

#include "compiler/Compile.h"

#include "passes/model/Passes.h"
#include "passes/plan/Passes.h"

#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace braid;

namespace {

struct PhaseInfo {
  Phase phase;
  const char *name;
  /// Adds the phase's passes to `pm`.
  void (*addPasses)(OpPassManager &pm, const CompileOptions &options);
};

const PhaseInfo kPhases[] = {
    {Phase::Model, "model",
     [](OpPassManager &pm, const CompileOptions &) {
       pm.addPass(model::createModelVerifyForward());
     }},
    {Phase::Autodiff, "autodiff",
     [](OpPassManager &pm, const CompileOptions &) {
       pm.addPass(model::createModelAutodiff());
       pm.addPass(model::createModelVerifyTrainStep());
     }},
    {Phase::Optimizer, "optimizer",
     [](OpPassManager &pm, const CompileOptions &options) {
       model::ModelOptimizerOptions o;
       o.beta1 = options.train.adamBeta1;
       o.beta2 = options.train.adamBeta2;
       o.eps = options.train.adamEps;
       o.weightDecay = options.train.weightDecay;
       o.maxGradNorm = options.train.clipGrad;
       pm.addPass(model::createModelOptimizer(o));
     }},
    {Phase::Shard, "shard",
     [](OpPassManager &pm, const CompileOptions &options) {
       model::ModelShardOptions o;
       o.dp = options.parallel.dp;
       o.tp = options.parallel.tp;
       o.sp = options.parallel.sp;
       o.pp = options.parallel.pp;
       pm.addPass(model::createModelShard(o));
     }},
    {Phase::Partition, "partition",
     [](OpPassManager &pm, const CompileOptions &options) {
       model::ModelPipelinePartitionOptions o;
       o.pp = options.parallel.pp;
       o.stageLayers = options.parallel.stageLayers;
       o.vpp = options.parallel.vpp;
       pm.addPass(model::createModelPipelinePartition(o));
     }},
    {Phase::Plan, "plan",
     [](OpPassManager &pm, const CompileOptions &options) {
       plan_ir::PlanLowerOptions lower;
       lower.splitBackward = options.parallel.schedule == "zb-h1";
       pm.addPass(plan_ir::createPlanLower(lower));
       plan_ir::PlanScheduleOptions o;
       o.scheme = options.parallel.schedule;
       o.microBatches = options.parallel.microBatches;
       pm.addPass(plan_ir::createPlanSchedule(o));
       pm.addPass(plan_ir::createPlanMemory());
       pm.addPass(plan_ir::createPlanVerify());
     }},
};

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

/// Writes the IR after each pass to `<dir>/NN-<pass flag>.mlir`.
class DumpToDirectory : public PassManager::IRPrinterConfig {
public:
  explicit DumpToDirectory(std::string dir, unsigned first)
      : IRPrinterConfig(/*printModuleScope=*/true), dir(std::move(dir)),
        counter(first) {}

  void printAfterIfEnabled(Pass *pass, Operation *,
                           PrintCallbackFn print) override {
    llvm::SmallString<256> path(dir);
    std::string name = llvm::formatv("{0:2}-{1}.mlir", counter++,
                                     pass->getArgument().str());
    // formatv pads with spaces; file names want zeros.
    std::replace(name.begin(), name.end(), ' ', '0');
    llvm::sys::path::append(path, name);
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec) {
      llvm::errs() << "braidc: cannot write " << path << ": " << ec.message()
                   << "\n";
      return;
    }
    print(os);
  }

private:
  std::string dir;
  unsigned counter;
};

} // namespace

llvm::Expected<Phase> braid::parsePhase(llvm::StringRef name) {
  for (const PhaseInfo &info : kPhases)
    if (name == info.name)
      return info.phase;
  std::string known;
  llvm::raw_string_ostream os(known);
  llvm::interleaveComma(phaseNames(), os);
  return error("--compile-to=" + name + " is not a phase; phases: " + known);
}

std::vector<std::string> braid::phaseNames() {
  std::vector<std::string> names;
  for (const PhaseInfo &info : kPhases)
    names.push_back(info.name);
  return names;
}

llvm::Error braid::runPhases(ModuleOp module, const CompileOptions &options) {
  PassManager pm(module->getContext());
  if (!options.dumpIrDir.empty()) {
    // MLIR prints IR between passes only when passes do not run in parallel.
    module->getContext()->disableMultithreading();
    if (std::error_code ec =
            llvm::sys::fs::create_directories(options.dumpIrDir))
      return error("--dump-ir-after-all: cannot create " + options.dumpIrDir +
                   ": " + ec.message());
    llvm::SmallString<256> path(options.dumpIrDir);
    llvm::sys::path::append(path, "00-frontend.mlir");
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      return error("--dump-ir-after-all: cannot write " + path + ": " +
                   ec.message());
    module->print(os);
    pm.enableIRPrinting(
        std::make_unique<DumpToDirectory>(options.dumpIrDir, 1));
  }
  for (const PhaseInfo &info : kPhases) {
    info.addPasses(pm, options);
    if (info.phase == options.compileTo)
      break;
  }
  if (failed(pm.run(module)))
    return error("compilation failed (see the diagnostics above)");
  return llvm::Error::success();
}
