//===- braid.cpp - The braid command
//---------------------------------------===//
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
//
// Measures this machine's CPU ranks and writes a cluster file for the cost
// model (braidc --cluster FILE, frontends/spec/cluster.proto): for each
// number of ranks n, four small LLaMA-shaped models trained data-parallel
// over n ranks, one tensor-parallel over 2 of them and one in 2 pipeline
// stages (braid-run --profile-out), whose kernel times give each kernel
// kind's rate and per-call overhead and its measured calls at five amounts
// of work (compiler/CalibrationFit.h), whose tensor-parallel and
// data-parallel steps give the wait of a collective inside a step (per call
// and per second of compute since its group met) and whose pipeline step how
// much of a core a waiting rank takes; for n > 1 the all-reduce times over the
// n ranks (braid-run --bench-collectives), which give the link's bandwidth and
// latency. With --repeats R, all of it R times round by round, and the
// medians fitted.
//
//===----------------------------------------------------------------------===//

#include "compiler/CalibrationFit.h"
#include "compiler/Compile.h"
#include "compiler/CostModel.h"
#include "compiler/PlanExport.h"
#include "compiler/Registration.h"
#include "compiler/ScheduleView.h"
#include "frontends/ModelBuilder.h"
#include "frontends/Spec.h"
#include "runtime/data/Preprocess.h"
#include "runtime/exec/Devices.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/PlanLoader.h"

#include "mlir/IR/DialectRegistry.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
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
                  "[--steps N] [--repeats R] [--corpus FILE] [-o FILE]\n";
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

//===----------------------------------------------------------------------===//
// braid calibrate
//===----------------------------------------------------------------------===//

/// One of braid calibrate's models: LLaMA-shaped (the preset tiny-llama's
/// layers), 2 layers, the byte vocabulary. The small one has tiny-llama's
/// sizes; the mid one's calls do about 8 (element-wise kernels) to 32
/// (matrix products) times its work, so that the two runs tell each
/// kernel's per-call overhead from its rate. The small model with
/// micro-batches of 1 and 8 measures calls of half and four times the small
/// one's work: the calls that tensor parallelism (narrower) and other
/// micro-batch sizes make of tiny models, where a kernel's time is far from
/// the line through the small and mid calls (CalibrationFit.h,
/// addCallTimes). The last, tensor-parallel over 2 ranks with sequence
/// parallelism at micro-batch 1 (on even rank counts), measures the
/// narrower calls of tensor parallelism and the wait of collectives inside
/// a step: six small collectives per layer and micro-batch, each of which
/// waits for its peer (Calibration.collective_wait_s); against the
/// data-parallel runs' one all-reduce after a whole backward, it tells that
/// per-call wait from the one that grows with the compute since the group
/// met (collective_gap_share). The pipeline run (2
/// stages of one layer, 4 micro-batches, 1f1b) has bubbles, in which ranks
/// wait for their peers: its step tells how much of a core a waiting rank
/// still takes (Calibration.waiting_core_share) where ranks share cores.
struct CalibrationModel {
  const char *name;
  int64_t hidden, heads, ffn, seq, microBatch;
  int64_t tp = 1, pp = 1, microBatches = 1;
};
constexpr int kCalibrationModelCount = 6;
constexpr int kTensorParallelModel = 4;
constexpr int kPipelineModel = 5;
constexpr CalibrationModel kCalibrationModels[kCalibrationModelCount] = {
    {"small", 64, 4, 176, 64, 2},
    {"mid", 256, 4, 704, 128, 4},
    {"small-mb1", 64, 4, 176, 64, 1},
    {"small-mb8", 64, 4, 176, 64, 8},
    {"small-tp2", 64, 4, 176, 64, 1, 2},
    {"small-pp2", 64, 4, 176, 64, 2, 1, 2, 4},
};

/// Whether `model` runs on `ranks` ranks (they divide by its tp x pp).
bool runsOn(const CalibrationModel &model, int64_t ranks) {
  return ranks % (model.tp * model.pp) == 0;
}

/// Seconds a calibration run may take before it counts as hung.
constexpr unsigned kRunTimeoutSeconds = 1800;

/// The job of `model` trained over `ranks` ranks: tensor-parallel over its
/// `tp` (with sequence parallelism), in `pp` pipeline stages, data-parallel
/// over the rest, `microBatches` micro-batches per data-parallel rank and
/// step.
spec::JobSpec calibrationJob(const CalibrationModel &model, int64_t ranks) {
  spec::JobSpec job;
  spec::ModelSpec *m = job.mutable_model();
  m->set_preset("tiny-llama");
  m->set_num_layers(2);
  m->set_hidden_size(model.hidden);
  m->set_num_heads(model.heads);
  m->set_num_kv_heads(model.heads);
  m->set_ffn_hidden_size(model.ffn);
  m->set_vocab_size(257); // the byte tokenizer's: 256 bytes and EOD
  // Padded to split by tp.
  m->set_make_vocab_size_divisible_by(model.tp);
  m->set_max_seq_len(model.seq);
  spec::ParallelSpec *p = job.mutable_parallel();
  int64_t dp = ranks / (model.tp * model.pp);
  p->set_dp(dp);
  if (model.tp > 1) {
    p->set_tp(model.tp);
    p->set_sp(true);
  }
  if (model.pp > 1)
    p->set_pp(model.pp);
  p->set_micro_batch_size(model.microBatch);
  p->set_global_batch_size(model.microBatch * model.microBatches * dp);
  job.mutable_data()->set_seq_length(model.seq);
  job.mutable_train()->set_seed(1);
  return job;
}

/// The last `limit` bytes of the file at `path` (a command's output).
std::string tailOfFile(const std::string &path, size_t limit = 4000) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return "";
  llvm::StringRef text = (*buffer)->getBuffer();
  if (text.size() > limit)
    return "...\n" + text.take_back(limit).str();
  return text.str();
}

/// Runs `args` (args[0] the program) with its output in `logPath`. Errors
/// name the command and show its output.
llvm::Error runLogged(const std::vector<std::string> &args,
                      const std::string &logPath) {
  std::vector<llvm::StringRef> refs(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {
      llvm::StringRef(""), llvm::StringRef(logPath), llvm::StringRef(logPath)};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(args[0], refs, std::nullopt, redirects,
                                     kRunTimeoutSeconds, 0, &message);
  if (rc == 0)
    return llvm::Error::success();
  std::string what =
      rc == -1   ? "could not be started: " + message
      : rc == -2 ? "crashed or ran past " + std::to_string(kRunTimeoutSeconds) +
                       " s" + (message.empty() ? "" : ": " + message)
                 : "exited with " + std::to_string(rc);
  std::string output = tailOfFile(logPath);
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "`" + llvm::join(args, " ") + "` " + what +
          (output.empty() ? std::string(" (no output)")
                          : ", its output:\n" + output));
}

/// The file at `path`, whole; an error naming it.
llvm::Expected<std::string> readFile(const std::string &path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return llvm::createStringError(buffer.getError(), "cannot read " + path +
                                                          ": " +
                                                          buffer.getError()
                                                              .message());
  return (*buffer)->getBuffer().str();
}

/// The machine's memory (MemTotal), in bytes.
int64_t machineMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (meminfo >> key) {
    if (key == "MemTotal:" && meminfo >> kib)
      return kib * 1024;
    meminfo.ignore(1 << 20, '\n');
  }
  // Without /proc (not Linux): the pages the system reports.
  return int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string formatRate(const spec::KernelRate &r) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (r.flops_per_s() > 0)
    os << llvm::format("%.2f GFLOP/s", r.flops_per_s() / 1e9);
  if (r.flops_per_s() > 0 && r.bytes_per_s() > 0)
    os << ", ";
  if (r.bytes_per_s() > 0)
    os << llvm::format("%.2f GB/s", r.bytes_per_s() / 1e9);
  return out;
}

/// What one number of ranks measured.
struct RankCalibration {
  int64_t ranks = 0, threads = 0;
  /// By kCalibrationModels: small, mid, the small one's other
  /// micro-batches, then tensor-parallel and pipeline (absent where the
  /// ranks do not divide by their tp x pp: no step times). Each round's
  /// profile, then their median (calibration::medianRun).
  std::vector<calibration::KernelSamples> runs[kCalibrationModelCount];
  calibration::KernelSamples samples[kCalibrationModelCount];
  /// Every round's profiled steps, and how many one round profiles (what
  /// a profile's totals are over).
  std::vector<double> stepTimes[kCalibrationModelCount];
  int64_t profiledSteps[kCalibrationModelCount] = {};
  plan::Plan plans[kCalibrationModelCount];
  std::vector<spec::KernelRate> rates;
  /// Each round's all-reduce (bytes, seconds) over `benchRanks` ranks.
  std::vector<std::vector<std::pair<double, double>>> benches;
  int64_t benchRanks = 0;
  std::optional<spec::LinkClass> link;
  size_t linkSizes = 0;
};

/// braid calibrate [--ranks 1,2,4] [--threads T] [--steps N] [--repeats R]
/// [--corpus FILE] [-o FILE]: measures this machine's CPU ranks, writes a
/// cluster file.
int calibrate(int argc, char **argv) {
  std::vector<int64_t> rankCounts = {1, 2, 4};
  int64_t threads = 0; // 0: the cores shared out among the ranks
  int64_t steps = 5;
  int64_t repeats = 1;
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
    if (arg != "--ranks" && arg != "--threads" && arg != "--steps" &&
        arg != "--repeats" && arg != "-o" && arg != "--output" &&
        arg != "--corpus")
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
      if (!positive(1, threads))
        return usage("--threads=" + value + " is not a positive integer");
    } else if (arg == "--steps") {
      // The first step is left out (it touches the arena's pages first).
      if (!positive(2, steps))
        return usage("--steps=" + value +
                     " is not an integer >= 2 (the first step warms up and "
                     "is not measured)");
    } else if (arg == "--repeats") {
      if (!positive(1, repeats))
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
  {
    llvm::SmallString<256> dir(outPath);
    llvm::sys::path::remove_filename(dir);
    if (dir.empty())
      dir = ".";
    bool exists = llvm::sys::fs::exists(outPath);
    if (std::error_code ec = llvm::sys::fs::access(
            exists ? llvm::StringRef(outPath) : llvm::StringRef(dir),
            llvm::sys::fs::AccessMode::Write))
      return fail("cannot write " + outPath + ": " +
                  (exists ? "" : std::string(dir) + ": ") + ec.message());
  }

  llvm::SmallString<256> work;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("braid-calibrate", work))
    return fail("cannot create a temporary directory: " + ec.message());
  auto cleanUp = llvm::make_scope_exit(
      [&] { llvm::sys::fs::remove_directories(work); });
  auto file = [&](const std::string &name) {
    llvm::SmallString<256> path(work);
    llvm::sys::path::append(path, name);
    return std::string(path);
  };

  // The data: the corpus as bytes, as braid train tokenizes data.corpus.
  data::PreprocessOptions prep;
  prep.inputs = {corpus};
  prep.outputPrefix = file("data");
  prep.appendEod = true;
  if (absl::Status s = data::Preprocess(prep); !s.ok())
    return fail("tokenizing " + corpus + ": " + std::string(s.message()));

  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry);
  int64_t cores = std::max<int64_t>(std::thread::hardware_concurrency(), 1);
  std::vector<RankCalibration> measured;
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  for (int64_t n : rankCounts) {
    RankCalibration &c = measured.emplace_back();
    c.ranks = n;
    // Ranks share the cores, as braid-run shares them by default.
    c.threads = threads > 0 ? threads : std::max<int64_t>(cores / n, 1);
    for (int k = 0; k < kCalibrationModelCount; ++k) {
      const CalibrationModel &model = kCalibrationModels[k];
      if (!runsOn(model, n))
        continue;
      llvm::Expected<plan::Plan> plan =
          compileJob(calibrationJob(model, n), context);
      if (!plan)
        return fail("compiling the " + std::string(model.name) +
                    " calibration model for " + std::to_string(n) +
                    " ranks: " + llvm::toString(plan.takeError()));
      c.plans[k] = *plan;
      std::string planPath =
          file(std::string(model.name) + "-" + std::to_string(n) + ".plan");
      if (absl::Status s = plan::WritePlanFile(*plan, planPath); !s.ok())
        return fail(std::string(s.message()));
    }
  }
  // Round by round, every rank count and model in each: a spell of the
  // machine's speed touches one round of each, and the medians over the
  // rounds are what the rates are fitted to.
  for (int64_t round = 1; round <= repeats; ++round)
    for (RankCalibration &c : measured) {
      const int64_t n = c.ranks;
      std::string roundTag =
          repeats > 1 ? llvm::formatv(", round {0}/{1}", round, repeats).str()
                      : "";
      std::vector<std::string> mpi = {*mpirun,           "-np",
                                      std::to_string(n), "--oversubscribe",
                                      "--bind-to",       "none"};
      if (geteuid() == 0)
        mpi.push_back("--allow-run-as-root");
      for (int k = 0; k < kCalibrationModelCount; ++k) {
        const CalibrationModel &model = kCalibrationModels[k];
        if (!runsOn(model, n))
          continue;
        std::string tag = std::string(model.name) + "-" + std::to_string(n);
        std::cout << llvm::formatv("braid: calibrating {0} rank{1} x {2} "
                                   "thread{3}: {4} model (hidden {5}, seq "
                                   "{6}), {7} steps{8}  [{9:f1} s]",
                                   n, n == 1 ? "" : "s", c.threads,
                                   c.threads == 1 ? "" : "s", model.name,
                                   model.hidden, model.seq, steps, roundTag,
                                   elapsed())
                         .str()
                  << std::endl;
        std::string profilePath = file(tag + ".profile.json");
        std::vector<std::string> args = mpi;
        args.insert(args.end(),
                    {std::string(runner), file(tag + ".plan"), "--data",
                     file("data"), "--steps", std::to_string(steps),
                     "--threads", std::to_string(c.threads), "--log-every",
                     std::to_string(steps), "--profile-out", profilePath});
        if (llvm::Error e = runLogged(args, file(tag + ".log")))
          return fail(llvm::toString(std::move(e)));
        llvm::Expected<std::string> text = readFile(profilePath);
        if (!text)
          return fail(llvm::toString(text.takeError()));
        llvm::Expected<calibration::KernelSamples> samples =
            calibration::parseProfile(*text);
        if (!samples)
          return fail(profilePath + ": " + llvm::toString(samples.takeError()));
        llvm::Expected<std::vector<double>> times =
            calibration::parseStepTimes(*text);
        if (!times)
          return fail(profilePath + ": " + llvm::toString(times.takeError()));
        c.runs[k].push_back(std::move(*samples));
        c.profiledSteps[k] = int64_t(times->size());
        c.stepTimes[k].insert(c.stepTimes[k].end(), times->begin(),
                              times->end());
      }
      if (n < 2)
        continue;
      std::cout << llvm::formatv("braid: calibrating {0} ranks: all-reduce, "
                                 "all-gather, reduce-scatter{1}  [{2:f1} s]",
                                 n, roundTag, elapsed())
                       .str()
                << std::endl;
      std::string benchPath =
          file("collectives-" + std::to_string(n) + ".json");
      std::vector<std::string> args = mpi;
      args.insert(args.end(), {std::string(runner),
                               file("mid-" + std::to_string(n) + ".plan"),
                               "--bench-collectives", benchPath});
      if (llvm::Error e = runLogged(
              args, file("collectives-" + std::to_string(n) + ".log")))
        return fail(llvm::toString(std::move(e)));
      llvm::Expected<std::string> text = readFile(benchPath);
      if (!text)
        return fail(llvm::toString(text.takeError()));
      auto bench = calibration::parseAllReduceBench(*text);
      if (!bench)
        return fail(benchPath + ": " + llvm::toString(bench.takeError()));
      c.benchRanks = bench->first;
      c.benches.push_back(std::move(bench->second));
    }

  for (RankCalibration &c : measured) {
    const int64_t n = c.ranks;
    for (int k = 0; k < kCalibrationModelCount; ++k)
      c.samples[k] = calibration::medianRun(c.runs[k]);
    c.rates = calibration::fitKernelRates(c.samples[0], c.samples[1]);
    // The calls of every run; but in the tensor-parallel and pipeline runs
    // GRAD_NORM's all-reduce over the stages or shards waits for them (for
    // the last stage's backward), which is no time of its own calls.
    std::vector<calibration::KernelSamples> calls;
    for (int k = 0; k < kCalibrationModelCount; ++k) {
      if (c.stepTimes[k].empty())
        continue;
      calls.push_back(c.samples[k]);
      if (kCalibrationModels[k].tp > 1 || kCalibrationModels[k].pp > 1)
        calls.back().erase("GRAD_NORM");
    }
    std::vector<const calibration::KernelSamples *> runs;
    for (const calibration::KernelSamples &run : calls)
      runs.push_back(&run);
    calibration::addCallTimes(c.rates, runs);
    if (c.rates.empty())
      return fail("the profiles of " + std::to_string(n) +
                  " ranks hold no kernel to fit a rate to");
    if (c.benches.empty())
      continue;
    auto bench = calibration::medianBench(c.benches);
    if (!bench)
      return fail("the all-reduce times of " + std::to_string(n) +
                  " ranks: " + llvm::toString(bench.takeError()));
    llvm::Expected<spec::LinkClass> link =
        calibration::fitAllReduceLink(c.benchRanks, *bench);
    if (!link)
      return fail("fitting the link of " + std::to_string(n) +
                  " ranks: " + llvm::toString(link.takeError()));
    c.link = *link;
    c.linkSizes = bench->size();
  }

  // The cluster: one node of as many devices (ranks) as the most measured;
  // the peaks are the best rates of the fewest ranks (the least sharing).
  const RankCalibration &fewest = measured.front();
  const RankCalibration &most = measured.back();
  spec::Cluster cluster;
  cluster.set_name("local-cpu");
  cluster.set_nodes(1);
  cluster.set_devices_per_node(most.ranks);
  cluster.set_memory_bytes(machineMemoryBytes() / most.ranks);
  double bestFlops = 0, bestBytes = 0, overhead = 0;
  for (const spec::KernelRate &r : fewest.rates) {
    if (r.kernel() == "default") {
      overhead = r.overhead_s();
      continue;
    }
    bestFlops = std::max(bestFlops, r.flops_per_s());
    bestBytes = std::max(bestBytes, r.bytes_per_s());
  }
  cluster.set_peak_flops_fp32(bestFlops);
  // The CPU kernels compute in float32 whatever the plan's dtype.
  cluster.set_peak_flops_bf16(bestFlops);
  cluster.set_memory_bandwidth(bestBytes);
  // The peaks are measured kernel rates already, not data-sheet numbers.
  cluster.set_matmul_efficiency(1);
  cluster.set_vector_efficiency(1);
  cluster.set_kernel_overhead_s(overhead);
  if (most.link)
    *cluster.mutable_intra_node() = *most.link;
  else
    std::cout << "braid: note: no rank count above 1 (--ranks), so no link "
                 "was measured: the file prices communication as free"
              << std::endl;
  for (const RankCalibration &c : measured) {
    spec::Calibration *cal = cluster.add_calibrations();
    cal->set_ranks_per_node(c.ranks);
    cal->set_threads_per_rank(c.threads);
    cal->set_cores(cores);
    for (const spec::KernelRate &r : c.rates)
      *cal->add_kernels() = r;
    if (c.link)
      *cal->mutable_intra_node() = *c.link;
    // The least of the models' (their data feeds differ little; the larger
    // models' collectives wait longer for the slowest rank).
    double stepOverhead = std::numeric_limits<double>::infinity();
    for (int k = 0; k < kCalibrationModelCount; ++k)
      if (!c.stepTimes[k].empty())
        stepOverhead =
            std::min(stepOverhead,
                     calibration::fitStepOverhead(c.samples[k], c.stepTimes[k],
                                                  double(c.profiledSteps[k])));
    cal->set_step_overhead_s(stepOverhead);
  }
  // The collectives' waits, per call and per second of compute since their
  // group met: the tensor-parallel run's steps (many collectives, short
  // gaps) and the data-parallel runs' (few, after a whole backward) against
  // their priced steps on this very cluster (both waits still 0).
  for (size_t i = 0; i < measured.size(); ++i) {
    const RankCalibration &c = measured[i];
    std::vector<calibration::WaitRun> runs;
    for (int k = 0; k < kCalibrationModelCount; ++k) {
      if (c.stepTimes[k].empty() || k == kPipelineModel || c.ranks < 2)
        continue;
      llvm::Expected<StepPrediction> priced = predictStep(c.plans[k], cluster);
      if (!priced)
        return fail(
            "pricing the " + std::string(kCalibrationModels[k].name) +
            " calibration model: " + llvm::toString(priced.takeError()));
      runs.push_back({median(c.stepTimes[k]), priced->stepTime,
                      priced->collectivePeers, priced->collectiveGaps});
    }
    calibration::CollectiveWaits waits = calibration::fitCollectiveWaits(runs);
    cluster.mutable_calibrations(int(i))->set_collective_wait_s(waits.wait);
    cluster.mutable_calibrations(int(i))->set_collective_gap_share(
        waits.gapShare);
  }
  // A waiting rank's share of a core: the pipeline run's measured step
  // against its priced step as the share moves (after the collectives'
  // wait, which its data-parallel all-reduce pays).
  for (size_t i = 0; i < measured.size(); ++i) {
    const RankCalibration &c = measured[i];
    if (c.stepTimes[kPipelineModel].empty())
      continue;
    spec::Calibration *cal = cluster.mutable_calibrations(int(i));
    llvm::Expected<double> share = calibration::fitWaitingShare(
        [&](double s) -> llvm::Expected<double> {
          cal->set_waiting_core_share(s);
          llvm::Expected<StepPrediction> priced =
              predictStep(c.plans[kPipelineModel], cluster);
          if (!priced)
            return priced.takeError();
          return priced->stepTime;
        },
        median(c.stepTimes[kPipelineModel]));
    if (!share)
      return fail("pricing the pipeline calibration model: " +
                  llvm::toString(share.takeError()));
    cal->set_waiting_core_share(*share);
  }

  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(cluster, &text))
    return fail("cannot print the cluster description");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(outPath, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return fail("cannot write " + outPath + ": " + ec.message());
    os << "# This machine's CPU ranks as `braid calibrate --ranks "
       << llvm::join(
              llvm::map_range(rankCounts,
                              [](int64_t n) { return std::to_string(n); }),
              ",")
       << " --steps " << steps
       << (repeats > 1 ? " --repeats " + std::to_string(repeats) : "")
       << "` measured them\n# (frontends/spec/cluster.proto; braidc --cluster "
          "FILE reads it).\n"
       << text;
    os.close();
    if (os.has_error()) {
      std::string message = os.error().message();
      os.clear_error();
      return fail("cannot write " + outPath + ": " + message);
    }
  }

  // The summary, and the cost model's step times with the file against the
  // measured ones (of the very runs it was fitted to: a check of the fit and
  // of what the per-kernel model leaves out, not a prediction).
  llvm::Expected<spec::Cluster> loaded = loadCluster(outPath);
  if (!loaded)
    return fail("the file written does not load: " +
                llvm::toString(loaded.takeError()));
  llvm::raw_ostream &os = llvm::outs();
  for (const RankCalibration &c : measured) {
    os << llvm::formatv("\n{0} rank{1} x {2} thread{3}\n", c.ranks,
                        c.ranks == 1 ? "" : "s", c.threads,
                        c.threads == 1 ? "" : "s");
    os << llvm::formatv("  {0,-22} {1,-26} {2,12} {3,14}\n", "kernel", "rate",
                        "overhead", "mid s/step");
    double measuredSteps = double(std::max<int64_t>(c.profiledSteps[1], 1));
    for (const spec::KernelRate &r : c.rates) {
      auto it = c.samples[1].find(r.kernel());
      std::string perStep =
          it == c.samples[1].end()
              ? std::string("")
              : llvm::formatv("{0:f5}", it->second.seconds / measuredSteps)
                    .str();
      os << llvm::formatv("  {0,-22} {1,-26} {2,9:f2} us {3,14}\n",
                          r.kernel(), formatRate(r), r.overhead_s() * 1e6,
                          perStep);
    }
    if (c.link)
      os << llvm::formatv("  {0,-22} {1,-26} {2,9:f2} us   (all-reduce, {3} "
                          "sizes)\n",
                          "link", llvm::formatv("{0:f3} GB/s", c.link->bandwidth() / 1e9).str(),
                          c.link->latency() * 1e6, c.linkSizes);
    if (double wait =
            loaded->calibrations(int(&c - measured.data())).collective_wait_s();
        wait > 0)
      os << llvm::formatv("  {0,-22} {1,-26} {2,9:f2} us   (per collective "
                          "in a step and peer in its group)\n",
                          "collective wait", "", wait * 1e6);
    if (double share = loaded->calibrations(int(&c - measured.data()))
                           .collective_gap_share();
        share > 0)
      os << llvm::formatv("  {0,-22} {1,-26:f3}      (of the compute since "
                          "the group met)\n",
                          "collective gap wait", share);
    if (c.ranks > 1 && !c.stepTimes[kPipelineModel].empty())
      os << llvm::formatv(
          "  {0,-22} {1,-26:f2}      (of a core, as a share "
          "of a computing rank's)\n",
          "waiting rank's core",
          loaded->calibrations(int(&c - measured.data())).waiting_core_share());
    for (int k = 0; k < kCalibrationModelCount; ++k) {
      if (c.stepTimes[k].empty())
        continue;
      llvm::Expected<StepPrediction> predicted =
          predictStep(c.plans[k], *loaded);
      if (!predicted)
        return fail(std::string("predicting the ") +
                    kCalibrationModels[k].name + " model's step: " +
                    llvm::toString(predicted.takeError()));
      double step = median(c.stepTimes[k]);
      os << llvm::formatv("  step of the {0,-9} model: measured {1:f4} s, "
                          "predicted {2:f4} s ({3:+f1} %)\n",
                          kCalibrationModels[k].name, step,
                          predicted->stepTime,
                          step > 0 ? 100 * (predicted->stepTime - step) / step
                                   : 0.0);
    }
  }
  os << llvm::formatv("\nbraid: wrote {0} (local-cpu: {1} devices of {2:f1} "
                      "GiB, {3:f1} GFLOP/s, {4:f1} GB/s) in {5:f1} s\n",
                      outPath, most.ranks,
                      double(cluster.memory_bytes()) / (1 << 30),
                      bestFlops / 1e9, bestBytes / 1e9, elapsed());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
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
