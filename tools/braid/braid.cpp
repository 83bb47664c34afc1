//===- braid.cpp - The braid command ------------------------------------===//
//
// braid view PLAN -o FILE.html
//
// Draws the plan's optimizer step as a self-contained HTML page: one
// swimlane per pipeline stage along the predicted time
// (compiler/ScheduleView.h).
//
// braid train JOB.textproto [--dp N] [--tp N] [--sp] [--data PREFIX] [--steps
// N] [--seed N]
//                           [--data-order ORDER] [--init-from HF_DIR]
//                           [--log-every N] [--metrics-out FILE] [--device
//                           cpu|cuda]
//
// Compiles the job to a plan (as braidc --emit=plan does), prepares the data
// on first use (data.corpus tokenized into data.path), and runs the plan on
// this machine (as braid-run does; under mpirun, one braid-run per rank, when
// the plan is for several ranks).
//
// braid calibrate [--ranks 1,2,4] [--threads T] [--steps N] [--repeats R]
//                 [--corpus FILE] [-o FILE]
// braid calibrate --device cuda --measured FILE [--cluster BASE] [-o FILE]
//
// Measures this machine's CPU ranks and writes a cluster file for the cost
// model (braidc --cluster FILE, frontends/spec/cluster.proto): small models
// trained over each number of ranks (braid-run --profile-out) and, for 2
// ranks or more, the all-reduce times (braid-run --bench-collectives), all
// of it --repeats R times round by round, and the cost model's rates, link
// and waits fitted to the medians. What it measures and fits is
// compiler/Calibrate.h's; the runs under mpirun are CalibrationRuns.h's.
// With --device cuda it measures nothing itself: it applies what
// braid-gpu-calibrate measured on a GPU (its products by size, an
// elementwise kernel's bandwidth, a kernel's call) to the cluster BASE
// (default dgx-h100) and writes the result (clusterFromGpuMeasurement).
//
//===----------------------------------------------------------------------===//

#include "compiler/Calibrate.h"
#include "compiler/Compile.h"
#include "compiler/CostModel.h"
#include "compiler/PlanExport.h"
#include "compiler/Registration.h"
#include "compiler/ScheduleView.h"
#include "frontends/ModelBuilder.h"
#include "frontends/Spec.h"
#include "runtime/common/Format.h"
#include "runtime/common/OutputFile.h"
#include "runtime/cpu/Blas.h"
#include "runtime/data/Preprocess.h"
#include "runtime/exec/Devices.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/PlanLoader.h"
#include "tools/braid/CalibrationRuns.h"
#include "tools/braid/ChildProcess.h"
#include "tools/braid/Eval.h"
#include "tools/braid/Generate.h"

#include "google/protobuf/text_format.h"
#include "mlir/IR/DialectRegistry.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>
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
  llvm::errs() << "usage: braid train JOB.textproto [--dp N] [--tp N] [--sp] "
                  "[--fuse-mlp] [--pp N] [--schedule S] [--stage-layers "
                  "A,B,..] [--recompute none|selective|full|auto] "
                  "[--memory-budget BYTES] [--zero 0|1|2|3] "
               << exec::kTrainerFlagsUsage << "\n"
               << "       braid view PLAN -o FILE.html\n"
               << "       braid calibrate [--ranks 1,2,4] [--threads T] "
                  "[--steps N] [--repeats R] [--corpus FILE] [-o FILE]\n"
               << "       braid calibrate --device cuda --measured FILE "
                  "[--cluster BASE] [-o FILE]\n"
               << kGenerateUsage << kChatUsage << kEvalUsage;
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

/// The plan of `job`, compiled in-process as braidc --emit=plan compiles it;
/// `configOut`, when given, receives the resolved model.
llvm::Expected<plan::Plan> compileJob(const spec::JobSpec &job,
                                      mlir::MLIRContext &context,
                                      ModelConfig *configOut = nullptr) {
  llvm::Expected<ModelConfig> config = resolveModel(job);
  if (!config)
    return config.takeError();
  llvm::Expected<TrainConfig> train = resolveTrain(job);
  if (!train)
    return train.takeError();
  llvm::Expected<ParallelConfig> parallel = resolveParallel(job, *config);
  if (!parallel)
    return parallel.takeError();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      buildForwardModule(context, *config);
  CompileOptions compile;
  compile.compileTo = Phase::Plan;
  compile.train = *train;
  compile.parallel = *parallel;
  if (llvm::Error error = runPhases(*module, compile))
    return std::move(error);
  llvm::Expected<plan::Plan> plan = exportPlan(*module);
  if (!plan)
    return plan.takeError();
  plan->mutable_training()->MergeFrom(
      trainingSettings(*config, *train, *parallel, job.data()));
  if (configOut)
    *configOut = *config;
  return plan;
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
  // Each rank allocates its stage's arena (the plan's without stages).
  int64_t arenaBytes = plan.arena_bytes();
  if (int stages = plan.pipeline().stages_size(); stages > 0) {
    arenaBytes = 0;
    for (const plan::Stage &stage : plan.pipeline().stages())
      arenaBytes += stage.arena_bytes();
    arenaBytes /= stages;
  }
  if (llvm::Error e = tools::CheckRanksFitHere(world, arenaBytes, "braid train"))
    return fail(llvm::toString(std::move(e)));
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
  args.insert(args.end(), {std::string(runner), std::string(planPath)});
  // Without a prefix the plan's blend (data.blend) is the data.
  if (!dataPrefix.empty())
    args.insert(args.end(), {"--data", dataPrefix});
  args.insert(args.end(), flags.begin(), flags.end());
  std::cout << "braid: starting " << world << " ranks: mpirun -np " << world
            << " braid-run ..." << std::endl;
  llvm::Expected<tools::ChildExit> ended = tools::RunChild(args);
  llvm::sys::fs::remove(planPath);
  if (!ended)
    return fail(llvm::toString(ended.takeError()));
  if (ended->forwarded)
    std::cerr << "braid: " << strsignal(ended->forwarded)
              << ": the ranks were stopped\n";
  return ended->code;
}

//===----------------------------------------------------------------------===//
// braid calibrate
//===----------------------------------------------------------------------===//

/// braid calibrate [--ranks 1,2,4] [--threads T] [--steps N] [--repeats R]
/// [--corpus FILE] [-o FILE]: measures this machine's CPU ranks, writes a
/// cluster file.
/// Writes `text` to `path` and loads it back as a cluster file: the cluster,
/// or why it could not be written or does not load.
llvm::Expected<spec::Cluster> writeClusterFile(const std::string &path,
                                               const std::string &text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return llvm::createStringError("cannot write " + path + ": " +
                                   ec.message());
  os << text;
  os.close();
  if (os.has_error()) {
    std::string message = os.error().message();
    os.clear_error();
    return llvm::createStringError("cannot write " + path + ": " + message);
  }
  llvm::Expected<spec::Cluster> loaded = loadCluster(path);
  if (!loaded)
    return llvm::createStringError("the file written does not load: " +
                                   llvm::toString(loaded.takeError()));
  return loaded;
}

/// braid calibrate --device cuda --measured FILE [--cluster BASE] [-o FILE]:
/// braid-gpu-calibrate's measurement of a GPU (FILE) applied to the
/// cluster BASE (a preset or file, default dgx-h100), written as a cluster
/// file (default gpu-measured.textproto).
int calibrateGpu(int argc, char **argv) {
  std::string measuredPath, base = "dgx-h100",
                            outPath = "gpu-measured.textproto";
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg.rfind("-", 0) == 0) {
      if (i + 1 == argc)
        return usage(arg + " needs a value");
      value = argv[++i];
    } else {
      return usage("braid calibrate takes no positional argument (got " + arg +
                   ")");
    }
    if (arg == "--device") {
      if (value != "cuda")
        return usage("--device " + value + " with --measured: the GPU's "
                     "measurement is --device cuda's");
    } else if (arg == "--measured") {
      measuredPath = value;
    } else if (arg == "--cluster") {
      base = value;
    } else if (arg == "-o" || arg == "--output") {
      if (value.empty())
        return usage(arg + "= names no file");
      outPath = value;
    } else {
      return usage("unknown flag " + arg +
                   " for braid calibrate --device cuda (--measured FILE "
                   "[--cluster BASE] [-o FILE])");
    }
  }
  if (measuredPath.empty())
    return usage("braid calibrate --device cuda needs --measured FILE: what "
                 "braid-gpu-calibrate wrote on the GPU machine (the device "
                 "bundle's check.sh calibrate)");
  auto buffer = llvm::MemoryBuffer::getFile(measuredPath);
  if (!buffer)
    return fail("--measured " + measuredPath + ": " +
                buffer.getError().message());
  spec::GpuMeasurement measured;
  if (!google::protobuf::TextFormat::ParseFromString(
          (*buffer)->getBuffer().str(), &measured))
    return fail("--measured " + measuredPath +
                ": not a GPU measurement (text format of "
                "braid.spec.GpuMeasurement, as braid-gpu-calibrate writes)");
  if (measured.bf16().empty() && measured.fp32().empty())
    return fail("--measured " + measuredPath + " holds no product's time");
  llvm::Expected<spec::Cluster> cluster = loadCluster(base);
  if (!cluster)
    return fail(llvm::toString(cluster.takeError()));
  llvm::Expected<spec::Cluster> made =
      clusterFromGpuMeasurement(*cluster, measured);
  if (!made)
    return fail(llvm::toString(made.takeError()));
  std::string text;
  google::protobuf::TextFormat::PrintToString(*made, &text);
  llvm::Expected<spec::Cluster> loaded = writeClusterFile(
      outPath, "# " + base + " with braid-gpu-calibrate's measurement of " +
                   measured.device() + " (" + measuredPath + ")\n" + text);
  if (!loaded)
    return fail(llvm::toString(loaded.takeError()));
  llvm::outs() << "wrote " << outPath << ": " << loaded->name() << ", "
               << loaded->matmul_curve_size() << " bf16 and "
               << loaded->matmul_curve_fp32_size()
               << " fp32 product sizes, "
               << loaded->attention_curve_size() << " attention sizes"
               << ", vector efficiency "
               << llvm::formatv("{0:F3}", loaded->vector_efficiency())
               << ", kernel overhead "
               << llvm::formatv("{0:F2}", loaded->kernel_overhead_s() * 1e6)
               << " us (braidc --cluster " << outPath << ")\n";
  return 0;
}

int calibrate(int argc, char **argv) {
  for (int i = 2; i < argc; ++i) {
    llvm::StringRef arg(argv[i]);
    if (arg == "--measured" || arg.starts_with("--measured=") ||
        arg == "--device=cuda" ||
        (arg == "--device" && i + 1 < argc &&
         llvm::StringRef(argv[i + 1]) == "cuda"))
      return calibrateGpu(argc, argv);
    if (arg == "--device" && i + 1 < argc &&
        llvm::StringRef(argv[i + 1]) != "cpu")
      return usage(std::string("--device ") + argv[i + 1] +
                   " is not one of cpu, cuda");
  }
  // The ranks 1, 2 and 4, 0 threads (the cores shared out among the
  // ranks), 5 steps, 1 round.
  calibration::CalibrateOptions options;
  std::string outPath = "local-cpu.textproto";
  std::string corpus = BRAID_DEFAULT_CORPUS;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg.rfind("-", 0) != 0)
      return usage("braid calibrate takes no positional argument (got " + arg +
                   ")");
    bool inlineValue = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inlineValue = true;
    }
    if (arg == "--device" && value == "cpu")
      continue;
    if (arg != "--ranks" && arg != "--threads" && arg != "--steps" &&
        arg != "--repeats" && arg != "-o" && arg != "--output" &&
        arg != "--corpus" && arg != "--device")
      return usage("unknown flag " + arg + " for braid calibrate");
    if (!inlineValue) {
      if (i + 1 == argc)
        return usage(arg + " needs a value");
      value = argv[++i];
    }
    auto positive = [&](int64_t least, int64_t &out) -> bool {
      long long n = 0;
      if (llvm::StringRef(value).getAsInteger(10, n) || n < least)
        return false;
      out = n;
      return true;
    };
    if (arg == "--ranks") {
      std::vector<int64_t> &rankCounts = options.rankCounts;
      rankCounts.clear();
      std::set<int64_t> seen;
      for (llvm::StringRef part : llvm::split(value, ',')) {
        int64_t n = 0;
        if (part.trim().getAsInteger(10, n) || n < 1)
          return usage("--ranks=" + value +
                       " is not a list of positive rank counts (e.g. 1,2,4)");
        if (!seen.insert(n).second)
          return usage("--ranks=" + value + " names " + std::to_string(n) +
                       " twice");
        rankCounts.push_back(n);
      }
      std::sort(rankCounts.begin(), rankCounts.end());
    } else if (arg == "--threads") {
      if (!positive(1, options.threads))
        return usage("--threads=" + value + " is not a positive integer");
    } else if (arg == "--steps") {
      // The first step is left out (it touches the arena's pages first).
      if (!positive(2, options.steps))
        return usage("--steps=" + value +
                     " is not an integer >= 2 (the first step warms up and "
                     "is not measured)");
    } else if (arg == "--repeats") {
      if (!positive(1, options.repeats))
        return usage("--repeats=" + value + " is not a positive integer");
    } else if (arg == "-o" || arg == "--output") {
      if (value.empty())
        return usage(arg + "= names no file");
      outPath = value;
    } else { // --corpus
      corpus = value;
    }
  }

  // The tools it runs: mpirun and braid-run (next to this program).
  llvm::ErrorOr<std::string> mpirun = llvm::sys::findProgramByName("mpirun");
  if (!mpirun)
    return fail("braid calibrate runs every measurement under mpirun, which is "
                "not on the PATH (scripts/setup.sh installs Open MPI)");
  std::string self = llvm::sys::fs::getMainExecutable(
      argv[0], reinterpret_cast<void *>(&calibrate));
  llvm::SmallString<256> runner(llvm::sys::path::parent_path(self));
  llvm::sys::path::append(runner, "braid-run");
  if (!llvm::sys::fs::can_execute(runner))
    return fail("no braid-run next to braid (" + std::string(runner) + ")");
  if (!llvm::sys::fs::exists(corpus))
    return fail("no corpus at " + corpus +
                ": give --corpus FILE (any text file of some 100 KB)");
  // Fail on an unwritable output now, not after minutes of measuring (and
  // without creating it: a failed calibration leaves no file).
  if (absl::Status s = common::CheckWritable(outPath); !s.ok())
    return fail(std::string(s.message()));

  llvm::SmallString<256> work;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("braid-calibrate", work))
    return fail("cannot create a temporary directory: " + ec.message());
  auto cleanUp = llvm::make_scope_exit(
      [&] { llvm::sys::fs::remove_directories(work); });
  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry);
  // The seconds since the measurements began.
  std::chrono::steady_clock::time_point start;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  MpiCalibrationRunner runs(
      [&](const spec::JobSpec &job) { return compileJob(job, context); },
      *mpirun, std::string(runner), work, elapsed);

  // The data: the corpus as bytes, as braid train tokenizes data.corpus.
  data::PreprocessOptions prep;
  prep.inputs = {corpus};
  prep.outputPrefix = runs.file("data");
  prep.appendEod = true;
  if (absl::Status s = data::Preprocess(prep); !s.ok())
    return fail("tokenizing " + corpus + ": " + std::string(s.message()));

  // The models compiled, the runs made round by round, the rates, links and
  // waits fitted (compiler/Calibrate.h).
  options.cores = std::max<int64_t>(std::thread::hardware_concurrency(), 1);
  options.memoryBytes = machineMemoryBytes();
  start = std::chrono::steady_clock::now();
  llvm::Expected<std::vector<calibration::RankCalibration>> measured =
      calibration::measure(options, runs);
  if (!measured)
    return fail(llvm::toString(measured.takeError()));
  if (llvm::Error e = calibration::fitRates(*measured))
    return fail(llvm::toString(std::move(e)));
  if (!measured->back().link)
    std::cout << "braid: note: no rank count above 1 (--ranks), so no link "
                 "was measured: the file prices communication as free"
              << std::endl;
  llvm::Expected<spec::Cluster> cluster =
      calibration::fitCluster(*measured, options);
  if (!cluster)
    return fail(llvm::toString(cluster.takeError()));
  llvm::Expected<std::string> text =
      calibration::clusterFileText(*cluster, options);
  if (!text)
    return fail(llvm::toString(text.takeError()));
  // The summary, and the cost model's step times with the file against the
  // measured ones (of the very runs it was fitted to: a check of the fit and
  // of what the per-kernel model leaves out, not a prediction).
  llvm::Expected<spec::Cluster> loaded = writeClusterFile(outPath, *text);
  if (!loaded)
    return fail(llvm::toString(loaded.takeError()));
  llvm::raw_ostream &os = llvm::outs();
  if (llvm::Error e = calibration::printSummary(os, *measured, *loaded))
    return fail(llvm::toString(std::move(e)));
  os << llvm::formatv("\nbraid: wrote {0} (local-cpu: {1} devices of {2}, "
                      "{3:f1} GFLOP/s, {4:f1} GB/s) in {5:f1} s\n",
                      outPath, measured->back().ranks,
                      common::FormatBytes(cluster->memory_bytes()),
                      cluster->peak_flops_fp32() / 1e9,
                      cluster->memory_bandwidth() / 1e9, elapsed());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // OpenBLAS's kernels for this CPU, where the library does not know it
  // (may start this program again, before any thread).
  braid::cpu::useNativeBlasKernels(argv);
  if (argc < 2)
    return usage("no command (try: braid train JOB.textproto, braid view "
                 "PLAN -o FILE.html or braid calibrate)");
  std::string command = argv[1];
  if (command == "--help" || command == "-h")
    return usage("");
  if (command == "view")
    return view(argc, argv);
  if (command == "calibrate")
    return calibrate(argc, argv);
  if (command == "generate")
    return generateCommand(argc, argv);
  if (command == "chat")
    return chatCommand(argc, argv);
  if (command == "eval")
    return evalCommand(argc, argv);
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
    static const char *const kOwnFlags[] = {
        "--schedule", "--recompute", "--memory-budget", "--stage-layers",
        "--zero",     "--dp",        "--tp",            "--pp"};
    bool own = std::find(std::begin(kOwnFlags), std::end(kOwnFlags),
                         arg.substr(0, arg.find('='))) != std::end(kOwnFlags);
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (!own && !exec::IsTrainerFlag(arg)) {
      return usage("unknown flag " + arg);
    } else if (exec::IsTrainerSwitch(arg)) {
      value = "";
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
  absl::StatusOr<exec::BackendFactory> backend =
      exec::BackendFor(options.device, options.cudaGraphs);
  if (!backend.ok())
    return fail(std::string(backend.status().message()));
  options.backend = std::move(*backend);

  llvm::Expected<spec::JobSpec> job = loadJobFile(jobPath);
  if (!job)
    return fail(llvm::toString(job.takeError()));
  if (llvm::Error error = checkModelSource(*job, jobPath))
    return fail(llvm::toString(std::move(error)));
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
  // Compile.
  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry);
  ModelConfig config;
  llvm::Expected<plan::Plan> plan = compileJob(*job, context, &config);
  if (!plan)
    return fail(llvm::toString(plan.takeError()));
  std::cout << "braid: " << config.source << ", " << plan->buffers_size()
            << " buffers in a " << common::FormatBytes(plan->arena_bytes())
            << " arena"
            << (plan->pipeline().stages_size() > 1 ? " (the largest stage's)"
                                                    : "")
            << std::endl;

  // Data, then training.
  std::string prefix = options.dataPrefix.empty() ? job->data().path()
                                                  : options.dataPrefix;
  if (prefix.empty() && job->data().blend_size() == 0)
    return fail("no data: set data.path (or data.blend) in the job or give "
                "--data PREFIX");
  // A blend's datasets must exist already: data.corpus builds data.path.
  if (!prefix.empty())
    if (int rc = prepareData(job->data(), prefix))
      return rc;
  options.dataPrefix = prefix;
  if (plan::WorldSize(*plan) > 1)
    return launchRanks(*plan, prefix, forwarded, argv[0]);
  if (absl::Status s = exec::Train(*plan, options); !s.ok())
    return fail(std::string(s.message()));
  return 0;
}
