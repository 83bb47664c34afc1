//===- braid.cpp - The braid command ---------------------------------------===//
//
// braid view PLAN -o FILE.html
//
// Draws the plan's optimizer step as a self-contained HTML page: one
// swimlane per pipeline stage along the predicted time
// (compiler/ScheduleView.h).
//
// braid train JOB.textproto [--dp N] [--tp N] [--sp] [--data PREFIX] [--steps N] [--seed N]
//                           [--data-order ORDER] [--init-from HF_DIR]
//                           [--log-every N] [--metrics-out FILE]
//
// Compiles the job to a plan (as braidc --emit=plan does), prepares the data
// on first use (data.corpus tokenized into data.path), and runs the plan on
// this machine (as braid-run does; under mpirun, one braid-run per rank, when
// the plan is for several ranks).
//
//===----------------------------------------------------------------------===//

#include "compiler/Compile.h"
#include "compiler/PlanExport.h"
#include "compiler/Registration.h"
#include "compiler/ScheduleView.h"
#include "frontends/ModelBuilder.h"
#include "frontends/Spec.h"
#include "runtime/data/Preprocess.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/PlanLoader.h"

#include "mlir/IR/DialectRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <map>
#include <unistd.h>
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
  llvm::errs() << "usage: braid train JOB.textproto [--dp N] [--tp N] [--sp] [--fuse-mlp] [--pp N] [--schedule S] [--stage-layers A,B,..] [--recompute none|selective|full|auto] [--memory-budget BYTES] [--zero 0|1|2|3] "
               << exec::kTrainerFlagsUsage
               << "\n"
               << "       braid view PLAN -o FILE.html\n";
  return error.empty() ? 0 : 2;
}

/// braid view PLAN -o FILE.html: the plan's schedule as an HTML page.
int view(int argc, char **argv) {
  std::string planPath, outPath;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-o" || arg == "--output") {
      if (i + 1 == argc)
        return usage(arg + " needs a value (the HTML file to write)");
      outPath = argv[++i];
    } else if (arg.rfind("-o=", 0) == 0 || arg.rfind("--output=", 0) == 0) {
      outPath = arg.substr(arg.find('=') + 1);
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage("unknown flag " + arg +
                   " for braid view (expected -o FILE.html)");
    } else if (!planPath.empty()) {
      return usage("more than one plan: " + planPath + " and " + arg);
    } else {
      planPath = arg;
    }
  }
  if (planPath.empty())
    return usage("no plan file given (braid view PLAN -o FILE.html)");
  if (outPath.empty())
    return usage("no output file given, expected -o FILE.html");
  absl::StatusOr<plan::Plan> plan = plan::LoadPlanFile(planPath);
  if (!plan.ok())
    return fail(std::string(plan.status().message()));
  ScheduleViewOptions options;
  options.source = llvm::sys::path::filename(planPath).str();
  llvm::Expected<std::string> page = renderScheduleView(*plan, options);
  if (!page)
    return fail(planPath + ": " + llvm::toString(page.takeError()));
  std::error_code ec;
  llvm::raw_fd_ostream os(outPath, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return fail("cannot write " + outPath + ": " + ec.message());
  os << *page;
  os.close();
  if (os.has_error()) {
    std::string message = os.error().message();
    os.clear_error();
    return fail("cannot write " + outPath + ": " + message);
  }
  return 0;
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

/// Runs the plan's ranks: mpirun starts braid-run (from this program's
/// directory) once per rank on this machine, each rank with its share of the
/// cores. Returns mpirun's exit code.
int launchRanks(const plan::Plan &plan, const std::string &dataPrefix,
                const std::vector<std::string> &flags, const char *argv0) {
  int64_t world = plan::WorldSize(plan);
  llvm::ErrorOr<std::string> mpirun = llvm::sys::findProgramByName("mpirun");
  if (!mpirun)
    return fail("the plan is for " + std::to_string(world) +
                " ranks and mpirun is not on the PATH (scripts/setup.sh "
                "installs Open MPI)");
  std::string self = llvm::sys::fs::getMainExecutable(
      argv0, reinterpret_cast<void *>(&launchRanks));
  llvm::SmallString<256> runner(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(runner, "braid-run");
  if (!llvm::sys::fs::can_execute(runner))
    return fail("no braid-run next to braid (" + std::string(runner) + ")");
  llvm::SmallString<256> planPath;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile(
          "braid-train", "plan", planPath))
    return fail("cannot create a temporary plan file: " + ec.message());
  if (absl::Status s = plan::WritePlanFile(plan, std::string(planPath)); !s.ok())
    return fail(std::string(s.message()));
  std::vector<std::string> args = {*mpirun, "-np", std::to_string(world),
                                   // More ranks than cores on a small
                                   // machine; ranks share cores unpinned.
                                   "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0)
    args.push_back("--allow-run-as-root");
  args.insert(args.end(), {std::string(runner), std::string(planPath), "--data",
                           dataPrefix});
  args.insert(args.end(), flags.begin(), flags.end());
  std::cout << "braid: starting " << world << " ranks: mpirun -np " << world
            << " braid-run ..." << std::endl;
  std::vector<llvm::StringRef> refs(args.begin(), args.end());
  std::string error;
  int rc = llvm::sys::ExecuteAndWait(*mpirun, refs, std::nullopt, {}, 0, 0,
                                     &error);
  llvm::sys::fs::remove(planPath);
  if (rc < 0)
    return fail("cannot run mpirun: " + error);
  return rc;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage("no command (try: braid train JOB.textproto or braid view "
                 "PLAN -o FILE.html)");
  std::string command = argv[1];
  if (command == "--help" || command == "-h")
    return usage("");
  if (command == "view")
    return view(argc, argv);
  if (command != "train")
    return usage("unknown command '" + command + "'");
  std::string jobPath;
  exec::TrainerOptions options;
  options.log = &std::cout;
  // The trainer's flags as given, for braid-run when mpirun starts the ranks.
  std::vector<std::string> forwarded;
  std::map<std::string, int64_t> mesh; // --dp, --tp, --pp
  bool sequenceParallel = false;        // --sp
  bool fuseMlp = false;                 // --fuse-mlp
  std::string schedule;             // --schedule
  std::string recompute;            // --recompute
  int64_t memoryBudget = 0;         // --memory-budget
  int zero = -1;                    // --zero
  std::vector<int64_t> stageLayers;     // --stage-layers
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (!jobPath.empty())
        return usage("more than one job: " + jobPath + " and " + arg);
      jobPath = arg;
      continue;
    }
    if (arg == "--sp") { // a switch: sequence parallelism over tp
      sequenceParallel = true;
      continue;
    }
    if (arg == "--fuse-mlp") { // a switch: one gate/up projection
      fuseMlp = true;
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
    if (arg == "--schedule") {
      schedule = value;
      continue;
    }
    if (arg == "--recompute") {
      recompute = value;
      continue;
    }
    if (arg == "--memory-budget") {
      char *end = nullptr;
      long long n = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1)
        return usage("--memory-budget=" + value +
                     " is not a positive number of bytes");
      memoryBudget = n;
      continue;
    }
    if (arg == "--stage-layers") {
      stageLayers.clear();
      for (llvm::StringRef part : llvm::split(value, ',')) {
        int64_t n = 0;
        if (part.trim().getAsInteger(10, n) || n < 1)
          return usage("--stage-layers=" + value +
                       " is not a list of positive layer counts");
        stageLayers.push_back(n);
      }
      continue;
    }
    if (arg == "--zero") {
      if (value != "0" && value != "1" && value != "2" && value != "3")
        return usage("--zero=" + value + " is not a ZeRO stage (0, 1, 2, 3)");
      zero = std::stoi(value);
      continue;
    }
    if (arg == "--dp" || arg == "--tp" || arg == "--pp") {
      char *end = nullptr;
      long long n = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1)
        return usage(arg + "=" + value + " is not a positive integer");
      mesh[arg.substr(2)] = n;
      continue;
    }
    absl::StatusOr<bool> known = exec::ParseTrainerFlag(arg, value, &options);
    if (!known.ok())
      return usage(std::string(known.status().message()));
    if (!*known)
      return usage("unknown flag " + arg);
    if (arg != "--data")
      forwarded.push_back(arg + "=" + value);
  }
  if (jobPath.empty())
    return usage("no job file given");

  llvm::Expected<spec::JobSpec> job = loadJobFile(jobPath);
  if (!job)
    return fail(llvm::toString(job.takeError()));
  if (sequenceParallel)
    job->mutable_parallel()->set_sp(true);
  if (fuseMlp)
    job->mutable_model()->set_fuse_mlp(true);
  if (!schedule.empty())
    job->mutable_parallel()->set_schedule(schedule);
  if (!recompute.empty())
    job->mutable_parallel()->set_recompute(recompute);
  if (memoryBudget > 0)
    job->mutable_parallel()->set_memory_budget_bytes(memoryBudget);
  if (zero >= 0)
    job->mutable_parallel()->set_zero(zero);
  if (!stageLayers.empty()) {
    job->mutable_parallel()->clear_stage_layers();
    for (int64_t n : stageLayers)
      job->mutable_parallel()->add_stage_layers(n);
  }
  for (auto [axis, n] : mesh) {
    spec::ParallelSpec *p = job->mutable_parallel();
    if (axis == "dp")
      p->set_dp(n);
    else if (axis == "tp")
      p->set_tp(n);
    else
      p->set_pp(n);
  }
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
  compile.parallel = *parallel;
  if (llvm::Error error = runPhases(*module, compile))
    return fail(llvm::toString(std::move(error)));
  llvm::Expected<plan::Plan> plan = exportPlan(*module);
  if (!plan)
    return fail(llvm::toString(plan.takeError()));
  plan->mutable_training()->MergeFrom(
      trainingSettings(*config, *train, *parallel, job->data()));
  std::cout << "braid: " << config->source << ", " << plan->buffers_size()
            << " buffers in a " << plan->arena_bytes() << "-byte arena"
            << (plan->pipeline().stages_size() > 1 ? " (the largest stage's)"
                                                    : "")
            << std::endl;

  // Data, then training.
  std::string prefix = options.dataPrefix.empty() ? job->data().path()
                                                  : options.dataPrefix;
  if (prefix.empty())
    return fail("no data: set data.path in the job or give --data PREFIX");
  if (int rc = prepareData(job->data(), prefix))
    return rc;
  options.dataPrefix = prefix;
  if (plan::WorldSize(*plan) > 1)
    return launchRanks(*plan, prefix, forwarded, argv[0]);
  if (absl::Status s = exec::Train(*plan, options); !s.ok())
    return fail(std::string(s.message()));
  return 0;
}
