//===- CalibrationRuns.cpp - braid calibrate's runs under mpirun ---------===//

#include "tools/braid/CalibrationRuns.h"
#include "tools/braid/ChildProcess.h"

#include "runtime/plan/PlanLoader.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <unistd.h>

using namespace braid;

namespace {

/// Seconds a calibration run may take before it counts as hung.
constexpr unsigned kRunTimeoutSeconds = 1800;

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
  tools::ChildOptions options;
  options.output = logPath;
  options.timeoutSeconds = kRunTimeoutSeconds;
  llvm::Expected<tools::ChildExit> ended = tools::RunChild(args, options);
  if (!ended)
    return ended.takeError();
  if (ended->code == 0)
    return llvm::Error::success();
  std::string what =
      ended->forwarded ? std::string("stopped: ") + strsignal(ended->forwarded)
      : ended->timedOut
          ? "ran past " + std::to_string(kRunTimeoutSeconds) + " s"
      : ended->code > 128
          ? std::string("ended by ") + strsignal(ended->code - 128)
          : "exited with " + std::to_string(ended->code);
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
} // namespace

llvm::Error MpiCalibrationRunner::keepPlan(int model, int64_t ranks,
                                           const plan::Plan &plan) {
  if (llvm::Error e = tools::CheckRanksFitHere(ranks, plan.arena_bytes(),
                                               "braid calibrate --ranks"))
    return e;
  if (absl::Status s = plan::WritePlanFile(plan, planPath(model, ranks));
      !s.ok())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   std::string(s.message()));
  return llvm::Error::success();
}

llvm::Expected<calibration::RunOutput>
MpiCalibrationRunner::run(const calibration::CalibrationRun &run) {
  const int64_t n = run.ranks;
  const calibration::CalibrationModel &model =
      calibration::kCalibrationModels[run.model];
  std::string roundTag =
      run.rounds > 1
          ? llvm::formatv(", round {0}/{1}", run.round, run.rounds).str()
          : "";
  std::vector<std::string> args = {mpirun,            "-np",
                                   std::to_string(n), "--oversubscribe",
                                   "--bind-to",       "none"};
  if (geteuid() == 0)
    args.push_back("--allow-run-as-root");
  std::string outPath, logPath;
  if (run.kind == calibration::CalibrationRun::kProfile) {
    std::string tag = std::string(model.name) + "-" + std::to_string(n);
    std::cout << llvm::formatv("braid: calibrating {0} rank{1} x {2} "
                               "thread{3}: {4} model (hidden {5}, seq "
                               "{6}), {7} steps{8}  [{9:f1} s]",
                               n, n == 1 ? "" : "s", run.threads,
                               run.threads == 1 ? "" : "s", model.name,
                               model.hidden, model.seq, run.steps, roundTag,
                               elapsed())
                     .str()
              << std::endl;
    outPath = file(tag + ".profile.json");
    logPath = file(tag + ".log");
    args.insert(args.end(),
                {runner, planPath(run.model, n), "--data", file("data"),
                 "--steps", std::to_string(run.steps), "--threads",
                 std::to_string(run.threads), "--log-every",
                 std::to_string(run.steps), "--profile-out", outPath});
  } else {
    std::cout << llvm::formatv("braid: calibrating {0} ranks: all-reduce, "
                               "all-gather, reduce-scatter{1}  [{2:f1} s]",
                               n, roundTag, elapsed())
                     .str()
              << std::endl;
    outPath = file("collectives-" + std::to_string(n) + ".json");
    logPath = file("collectives-" + std::to_string(n) + ".log");
    args.insert(args.end(), {runner, planPath(run.model, n),
                             "--bench-collectives", outPath});
  }
  if (llvm::Error e = runLogged(args, logPath))
    return std::move(e);
  llvm::Expected<std::string> text = readFile(outPath);
  if (!text)
    return text.takeError();
  return calibration::RunOutput{std::move(*text), outPath};
}

std::string MpiCalibrationRunner::file(const std::string &name) const {
  llvm::SmallString<256> path(work);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

std::string MpiCalibrationRunner::planPath(int model, int64_t ranks) const {
  return file(std::string(calibration::kCalibrationModels[model].name) + "-" +
              std::to_string(ranks) + ".plan");
}
