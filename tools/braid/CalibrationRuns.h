//===- CalibrationRuns.h - braid calibrate's runs under mpirun --*- C++ -*-===//
//
// The CalibrationRunner (compiler/Calibrate.h) of `braid calibrate`: each
// calibration model compiled in-process, its plan written to a work
// directory, and braid-run started on it under mpirun, once per rank on
// this machine (--profile-out for a model's kernels and steps,
// --bench-collectives for the link).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TOOLS_BRAID_CALIBRATIONRUNS_H
#define BRAID_TOOLS_BRAID_CALIBRATIONRUNS_H

#include "compiler/Calibrate.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <string>

namespace braid {

/// Compiles a job to its plan (as braidc --emit=plan does).
using CompileJob =
    std::function<llvm::Expected<plan::Plan>(const spec::JobSpec &)>;

/// braid calibrate's runs (calibration::CalibrationRunner): each model
/// compiled in-process as braidc --emit=plan compiles it, its plan written
/// to the work directory, and braid-run started on it under mpirun (one
/// process per rank), with a line on stdout as each run starts.
class MpiCalibrationRunner : public calibration::CalibrationRunner {
public:
  /// Compiles with `compile`; runs `runner` (braid-run) under `mpirun`,
  /// with its files in the directory `work`; each line on stdout ends with
  /// `elapsed()` seconds.
  MpiCalibrationRunner(CompileJob compile, std::string mpirun,
                       std::string runner, llvm::StringRef work,
                       std::function<double()> elapsed)
      : compileJob(std::move(compile)), mpirun(std::move(mpirun)),
        runner(std::move(runner)), work(work.str()),
        elapsed(std::move(elapsed)) {}

  llvm::Expected<plan::Plan> compile(const spec::JobSpec &job) override {
    return compileJob(job);
  }

  /// Writes the plan to the work directory.
  llvm::Error keepPlan(int model, int64_t ranks,
                       const plan::Plan &plan) override;

  /// Runs braid-run under mpirun, its output in the work directory; the
  /// profile or collectives' times it wrote.
  llvm::Expected<calibration::RunOutput>
  run(const calibration::CalibrationRun &run) override;

  /// The path of `name` in the work directory.
  std::string file(const std::string &name) const;

private:
  std::string planPath(int model, int64_t ranks) const;

  CompileJob compileJob;
  std::string mpirun, runner, work;
  std::function<double()> elapsed;
};

} // namespace braid

#endif // BRAID_TOOLS_BRAID_CALIBRATIONRUNS_H
