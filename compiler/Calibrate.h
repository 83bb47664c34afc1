//===- Calibrate.h - braid calibrate's experiment ----------------*- C++ -*-===//
//
// What `braid calibrate` measures, in which order, and how it makes a
// cluster file for the cost model (frontends/spec/cluster.proto) of the
// measurements; the fits themselves are CalibrationFit.h's.
//
// For each number of ranks n, six small LLaMA-shaped models trained
// data-parallel over n ranks (kCalibrationModels: four of them on any n, one
// tensor-parallel over 2 ranks and one in 2 pipeline stages on even n),
// whose kernel profiles (braid-run --profile-out) give each kernel kind's
// rate and per-call overhead and its measured calls at five amounts of
// work, whose tensor-parallel and data-parallel steps give the wait of a
// collective inside a step (per call and per second of compute since its
// group met) and whose pipeline step how much of a core a waiting rank
// takes; for n > 1 the all-reduce times over the n ranks (braid-run
// --bench-collectives), which give the link's bandwidth and latency. With
// several rounds (--repeats), all of it round by round, and the medians
// fitted.
//
// The runs themselves are a CalibrationRunner's: braid calibrate compiles
// the jobs in-process and starts braid-run under mpirun; the unit tests
// give the measurements of known rates and links.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_CALIBRATE_H
#define BRAID_COMPILER_CALIBRATE_H

#include "compiler/CalibrationFit.h"
#include "frontends/spec/braid_spec.pb.h"
#include "frontends/spec/cluster.pb.h"
#include "runtime/plan/plan.pb.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace braid::calibration {

/// One of braid calibrate's models: LLaMA-shaped (the preset tiny-llama's
/// layers), 2 layers, the byte vocabulary. The small one has tiny-llama's
/// sizes; the mid one (4x wider, twice the sequence, twice the micro-batch)
/// makes calls of 4 (the kernels over the fixed vocabulary) to 16
/// (element-wise kernels) to 64 (hidden-by-hidden matrix products) times
/// its work, so that the two runs tell each kernel's per-call overhead from
/// its rate. The small model with micro-batches of 1 and 8
/// measures calls of half and four times the small one's work: the calls
/// that tensor parallelism (narrower) and other micro-batch sizes make of
/// tiny models, where a kernel's time is far from the line through the
/// small and mid calls (CalibrationFit.h, addCallTimes). The fifth,
/// tensor-parallel over 2 ranks with sequence parallelism at micro-batch 1
/// (on even rank counts), measures the narrower calls of tensor parallelism
/// and the wait of collectives inside a step: six small collectives per
/// layer and micro-batch, each of which waits for its peer
/// (Calibration.collective_wait_s); against the data-parallel runs' one
/// all-reduce after a whole backward, it tells that per-call wait from the
/// one that grows with the compute since the group met
/// (collective_gap_share). The pipeline run (2 stages of one layer, 4
/// micro-batches, 1f1b; on even rank counts) has bubbles, in which ranks
/// wait for their peers: its step tells how much of a core a waiting rank
/// still takes (Calibration.waiting_core_share) where ranks share cores.
struct CalibrationModel {
  const char *name;
  int64_t hidden, heads, ffn, seq, microBatch;
  int64_t tp = 1, pp = 1, microBatches = 1;
};
inline constexpr int kCalibrationModelCount = 6;
/// The indices of kCalibrationModels whose runs the fits single out.
inline constexpr int kSmallModel = 0;
inline constexpr int kMidModel = 1;
inline constexpr int kTensorParallelModel = 4;
inline constexpr int kPipelineModel = 5;
inline constexpr CalibrationModel kCalibrationModels[kCalibrationModelCount] =
    {
        {"small", 64, 4, 176, 64, 2},
        {"mid", 256, 4, 704, 128, 4},
        {"small-mb1", 64, 4, 176, 64, 1},
        {"small-mb8", 64, 4, 176, 64, 8},
        {"small-tp2", 64, 4, 176, 64, 1, 2},
        {"small-pp2", 64, 4, 176, 64, 2, 1, 2, 4},
};

/// Whether `model` runs on `ranks` ranks (they divide by its tp x pp).
bool runsOn(const CalibrationModel &model, int64_t ranks);

/// The job of `model` trained over `ranks` ranks: tensor-parallel over its
/// `tp` (with sequence parallelism), in `pp` pipeline stages, data-parallel
/// over the rest, `microBatches` micro-batches per data-parallel rank and
/// step.
spec::JobSpec calibrationJob(const CalibrationModel &model, int64_t ranks);

/// What a calibration measures, and on what machine.
struct CalibrateOptions {
  /// The numbers of ranks to measure: ascending, each at least 1.
  std::vector<int64_t> rankCounts = {1, 2, 4};
  /// Threads per rank; 0: the machine's cores shared out among the ranks.
  int64_t threads = 0;
  /// Steps of each run, at least 2: the first (which touches the arena's
  /// pages first) is not measured.
  int64_t steps = 5;
  /// The rounds, each of every run.
  int64_t repeats = 1;
  /// The machine's cores and memory (the cluster's devices share them).
  int64_t cores = 1;
  int64_t memoryBytes = 0;
};

/// An error naming the first option out of its range, or success.
llvm::Error checkOptions(const CalibrateOptions &options);

/// The threads of each of `ranks` ranks: options.threads, or the cores
/// shared out among them (at least 1).
int64_t threadsPerRank(const CalibrateOptions &options, int64_t ranks);

/// One run of a calibration.
struct CalibrationRun {
  enum Kind {
    kProfile,     ///< braid-run --profile-out of `model`'s plan
    kCollectives, ///< braid-run --bench-collectives, on `model`'s plan
  };
  Kind kind = kProfile;
  int model = kSmallModel; ///< an index of kCalibrationModels
  int64_t ranks = 1, threads = 1, steps = 0;
  int64_t round = 1, rounds = 1; ///< 1-based, of options.repeats
};

/// The runs of a calibration, in the order they are made: round by round
/// (so that a spell of the machine's speed touches one round of each),
/// in each the rank counts in order, for each the profiles of the models
/// that run on it in kCalibrationModels' order, then (for 2 ranks or more)
/// the collectives' benchmark on the mid model's plan.
std::vector<CalibrationRun> calibrationRuns(const CalibrateOptions &options);

/// A run's output: its text, and where it came from (errors name it).
struct RunOutput {
  std::string text;
  std::string source;
};

/// What makes the runs of a calibration.
class CalibrationRunner {
public:
  virtual ~CalibrationRunner();
  /// The plan of a calibration job (braid calibrate compiles it as braidc
  /// --emit=plan does).
  virtual llvm::Expected<plan::Plan> compile(const spec::JobSpec &job) = 0;
  /// Keeps `plan`, of kCalibrationModels[model] over `ranks` ranks, for the
  /// runs on it (braid calibrate writes it to a file). Every plan is
  /// compiled and kept before the first run.
  virtual llvm::Error keepPlan(int model, int64_t ranks,
                               const plan::Plan &plan) = 0;
  /// Makes `run`; returns braid-run's profile (a kProfile run) or its
  /// collectives' times (kCollectives).
  virtual llvm::Expected<RunOutput> run(const CalibrationRun &run) = 0;
};

/// What one number of ranks measured, and what was fitted to it.
struct RankCalibration {
  int64_t ranks = 0, threads = 0;
  /// By kCalibrationModels (absent where the ranks do not divide by the
  /// model's tp x pp: no step times): each round's profile, then (fitRates)
  /// their median (medianRun).
  std::vector<KernelSamples> runs[kCalibrationModelCount];
  KernelSamples samples[kCalibrationModelCount];
  /// Every round's profiled steps, and how many one round profiles (what
  /// a profile's totals are over).
  std::vector<double> stepTimes[kCalibrationModelCount];
  int64_t profiledSteps[kCalibrationModelCount] = {};
  plan::Plan plans[kCalibrationModelCount];
  /// fitRates: the kernels' rates and measured calls.
  std::vector<spec::KernelRate> rates;
  /// Each round's all-reduce (bytes, seconds) over `benchRanks` ranks.
  std::vector<std::vector<std::pair<double, double>>> benches;
  int64_t benchRanks = 0;
  /// fitRates: the link fitted to the benchmarks' medians (of `linkSizes`
  /// sizes), when there are any.
  std::optional<spec::LinkClass> link;
  size_t linkSizes = 0;
};

/// Compiles and keeps every model's plan for every rank count (those that
/// run on it), then makes calibrationRuns(options) with `runner`: one
/// RankCalibration per rank count, in options.rankCounts' order. Errors:
/// options out of range, and those of the runner (a plan that does not
/// compile names its model and ranks) or of an output that does not parse
/// (naming its source).
llvm::Expected<std::vector<RankCalibration>>
measure(const CalibrateOptions &options, CalibrationRunner &runner);

/// Fits each rank count's rates and link: per model the median round
/// (medianRun); the kernels' rates and overheads of the small and mid runs
/// (fitKernelRates) and every run's mean calls (addCallTimes; GRAD_NORM's
/// left out of the tensor-parallel and pipeline runs, where its all-reduce
/// waits for the other shards or stages); the link of the median
/// all-reduce times (fitAllReduceLink). Errors: a rank count whose
/// profiles hold no kernel, benchmarks that do not fit.
llvm::Error fitRates(std::vector<RankCalibration> &measured);

/// The cluster file's cluster, "local-cpu", of fitted measurements: one node
/// of as many devices as the most ranks measured (the machine's memory
/// shared out among them), its peaks the best kernel rates of the fewest
/// ranks (the least sharing) and its link the most ranks'; one calibration
/// per rank count, with its rates, link, step overhead (the least of its
/// models'), collective waits (fitCollectiveWaits: its tensor- and
/// data-parallel steps against their prices on this cluster) and, with a
/// pipeline run, the waiting rank's share of a core (fitWaitingShare).
/// Errors: no measurements, a plan the cost model cannot price.
llvm::Expected<spec::Cluster>
fitCluster(llvm::ArrayRef<RankCalibration> measured,
           const CalibrateOptions &options);

/// The text of the cluster file: a comment naming the flags it was measured
/// with, then `cluster` in text format.
llvm::Expected<std::string> clusterFileText(const spec::Cluster &cluster,
                                            const CalibrateOptions &options);

/// The calibration's summary: per rank count, each kernel's rate, overhead
/// and the mid model's seconds per step in it, the link and the waits that
/// `cluster` (the file as read back) holds, and each model's measured step
/// against the step `cluster` predicts for its plan. Errors: a cluster
/// without one calibration per rank count, a plan the cost model cannot
/// price (what was printed before it stays).
llvm::Error printSummary(llvm::raw_ostream &os,
                         llvm::ArrayRef<RankCalibration> measured,
                         const spec::Cluster &cluster);

} // namespace braid::calibration

#endif // BRAID_COMPILER_CALIBRATE_H
