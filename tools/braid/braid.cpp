//===- braid.cpp - The braid command ---------------------------------------===//
//
// braid train JOB.textproto [--data PREFIX] [--steps N] [--seed N]
//                           [--data-order ORDER] [--init-from HF_DIR]
//                           [--log-every N] [--metrics-out FILE]
//
// Compiles the job to a plan (as braidc --emit=plan does), prepares the data
// on first use (data.corpus tokenized into data.path), and runs the plan on
// this machine (as braid-run does).
//
//===----------------------------------------------------------------------===//

#include "compiler/Compile.h"
#include "compiler/PlanExport.h"
#include "compiler/Registration.h"
#include "frontends/ModelBuilder.h"
#include "frontends/Spec.h"
#include "runtime/data/Preprocess.h"
#include "runtime/exec/Trainer.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <iostream>

using namespace braid;

namespace {

int fail(const std::string &message, int code = 1) {
  llvm::errs() << "braid: error: " << message << "\n";
  return code;
}

int usage(const std::string &error) {
  if (!error.empty())
    llvm::errs() << "braid: error: " << error << "\n";
  llvm::errs() << "usage: braid train JOB.textproto " << exec::kTrainerFlagsUsage
               << "\n";
  return error.empty() ? 0 : 2;
}

/// Tokenizes data.corpus into data.path unless the dataset exists.
int prepareData(const spec::DataSpec &data, const std::string &prefix) {
  if (llvm::sys::fs::exists(prefix + ".bin") &&
      llvm::sys::fs::exists(prefix + ".idx"))
    return 0;
  if (data.corpus().empty())
    return fail("no dataset at " + prefix + ".bin/.idx and no data.corpus to "
                "build it from");
  llvm::SmallString<256> dir(prefix);
  llvm::sys::path::remove_filename(dir);
  if (!dir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return fail("cannot create " + std::string(dir) + ": " + ec.message());
  data::PreprocessOptions options;
  options.inputs.assign(data.corpus().begin(), data.corpus().end());
  options.outputPrefix = prefix;
  options.tokenizerModel = data.tokenizer_model();
  options.appendEod = true;
  std::cout << "braid: tokenizing " << options.inputs.size() << " file(s) into "
            << prefix << " (" << (options.tokenizerModel.empty()
                                      ? std::string("bytes")
                                      : options.tokenizerModel)
            << ")" << std::endl;
  data::PreprocessSummary summary;
  if (absl::Status s = data::Preprocess(options, nullptr, &summary); !s.ok())
    return fail(std::string(s.message()));
  std::cout << "braid: " << summary.tokens << " tokens in " << summary.documents
            << " documents" << std::endl;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage("no command (try: braid train JOB.textproto)");
  std::string command = argv[1];
  if (command == "--help" || command == "-h")
    return usage("");
  if (command != "train")
    return usage("unknown command '" + command + "'");
  std::string jobPath;
  exec::TrainerOptions options;
  options.log = &std::cout;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (!jobPath.empty())
        return usage("more than one job: " + jobPath + " and " + arg);
      jobPath = arg;
      continue;
    }
    std::string value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return usage(arg + " needs a value");
    }
    absl::StatusOr<bool> known = exec::ParseTrainerFlag(arg, value, &options);
    if (!known.ok())
      return usage(std::string(known.status().message()));
    if (!*known)
      return usage("unknown flag " + arg);
  }
  if (jobPath.empty())
    return usage("no job file given");

  llvm::Expected<spec::JobSpec> job = loadJobFile(jobPath);
  if (!job)
    return fail(llvm::toString(job.takeError()));
  llvm::Expected<ModelConfig> config = resolveModel(*job);
  if (!config)
    return fail(llvm::toString(config.takeError()));
  llvm::Expected<TrainConfig> train = resolveTrain(*job);
  if (!train)
    return fail(llvm::toString(train.takeError()));
  llvm::Expected<ParallelConfig> parallel = resolveParallel(*job, *config);
  if (!parallel)
    return fail(llvm::toString(parallel.takeError()));

  // Compile.
  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module = buildForwardModule(context, *config);
  CompileOptions compile;
  compile.compileTo = Phase::Plan;
  compile.train = *train;
  if (llvm::Error error = runPhases(*module, compile))
    return fail(llvm::toString(std::move(error)));
  llvm::Expected<plan::Plan> plan = exportPlan(*module);
  if (!plan)
    return fail(llvm::toString(plan.takeError()));
  plan->mutable_training()->MergeFrom(
      trainingSettings(*config, *train, *parallel, job->data()));
  std::cout << "braid: " << config->source << ", " << plan->buffers_size()
            << " buffers in a " << plan->arena_bytes() << "-byte arena"
            << std::endl;

  // Data, then training.
  std::string prefix = options.dataPrefix.empty() ? job->data().path()
                                                  : options.dataPrefix;
  if (prefix.empty())
    return fail("no data: set data.path in the job or give --data PREFIX");
  if (int rc = prepareData(job->data(), prefix))
    return rc;
  options.dataPrefix = prefix;
  if (absl::Status s = exec::Train(*plan, options); !s.ok())
    return fail(std::string(s.message()));
  return 0;
}
