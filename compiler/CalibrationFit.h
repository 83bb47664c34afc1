//===- CalibrationFit.h - Kernel and link rates from measurements -*- C++ -*-===//
//
// What `braid calibrate` fits to its measurements, as pure functions: the
// cost model's kernel rates (frontends/spec/cluster.proto, KernelRate) from
// the kernel profiles of two models of different sizes (braid-run
// --profile-out), and a link's bandwidth and latency from all-reduce times
// (braid-run --bench-collectives).
//
// A kernel kind's calls take, in the cost model, calls x overhead + work /
// rate in all, the work being FLOPs for the matrix kernels and bytes for the
// others (runtime/plan/Work.h counts both). Two runs whose calls do
// different amounts of work (a small and a mid model) give two such
// equations, which determine the overhead and the rate.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_CALIBRATIONFIT_H
#define BRAID_COMPILER_CALIBRATIONFIT_H

#include "frontends/spec/cluster.pb.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace braid::calibration {

/// The calls of one kernel kind in one run: their seconds, number and work
/// (totals over the profiled steps).
struct KernelSample {
  double seconds = 0;
  double calls = 0;
  double flops = 0;
  double bytes = 0;
};

/// By plan kernel name (LINEAR, ...).
using KernelSamples = std::map<std::string, KernelSample>;

/// Kernels whose FLOPs are matrix products (kMatrixProducts in
/// runtime/plan/Kernels.def: LINEAR and its gradients, ATTENTION and its
/// gradient): their rate is in FLOP/s; the others' in B/s.
bool isMatrixKernel(llvm::StringRef kernel);

/// Kernels that move data between ranks or wait for it (kCommunication or
/// kFinishes: collectives, SEND, RECV, WAIT): the cost model prices them
/// with the link, so they get no kernel rate.
bool isCommunicationKernel(llvm::StringRef kernel);

/// The rate a calibration gives kernels it has no rate of their own for.
inline constexpr llvm::StringLiteral kDefaultRate = "default";
bool isDefaultRate(const spec::KernelRate &rate);

/// The rate calibration `c` has for plan kernel `kernel` (by name), or
/// nullptr.
const spec::KernelRate *findRate(const spec::Calibration &c,
                                 llvm::StringRef kernel);

/// A kernel's fitted speed: seconds of one call = overhead + work / rate.
struct RateFit {
  double rate = 0;
  double overhead = 0;
  /// Whether both equations were solved as they are; false when the fit fell
  /// back to overhead 0 and the mid run's work / seconds (the equations are
  /// degenerate, or their solution has a negative overhead or rate).
  bool solved = false;
};

/// Fits calls x overhead + work / rate = seconds to a small and a mid run
/// (`work` the FLOPs or bytes, as the caller chooses). Both runs must have
/// calls > 0, work > 0 and seconds > 0; otherwise the rate is 0 (unknown).
RateFit fitRate(double smallCalls, double smallWork, double smallSeconds,
                double midCalls, double midWork, double midSeconds);

/// The kernel rates of one calibration: one per compute kernel that both
/// runs called at least `minCalls` times (FLOP/s for matrix kernels, B/s for
/// the others, each with its overhead), then "default" for every other
/// kernel: the FLOP rate of the matrix kernels together, and the byte rate
/// and overhead of the others together.
std::vector<spec::KernelRate> fitKernelRates(const KernelSamples &small,
                                             const KernelSamples &mid,
                                             double minCalls = 2);

/// Adds to each rate of `rates` (but "default") the mean call of every run
/// in `runs` that called its kernel at least `minCalls` times: the work and
/// seconds of one call (KernelRate.calls, ascending by work; runs whose
/// calls do the same work are averaged), so that the cost model
/// interpolates between measured calls.
void addCallTimes(std::vector<spec::KernelRate> &rates,
                  llvm::ArrayRef<const KernelSamples *> runs,
                  double minCalls = 2);

/// The seconds of one call of `work` (FLOPs or bytes, as the rate's calls
/// count it) by the rate's measured calls: interpolated between the two
/// around `work`, extrapolated along the nearest two beyond them (but no
/// slower than the smallest call below it, no faster than the largest above
/// it), and in proportion to the nearest call where that line gives no
/// time. Needs two calls or more (returns -1 otherwise).
double interpolateCall(const spec::KernelRate &rate, double work);

/// Fits the cost model's ring all-reduce, seconds = 2 (n-1)/n x bytes /
/// bandwidth + 2 (n-1) x latency, to (bytes, seconds) measurements of
/// `ranks` ranks, by least squares of the relative errors (the sizes span
/// orders of magnitude: plain least squares would fit the largest alone and
/// leave the latency to its noise). A negative latency is clamped to 0 and
/// the bandwidth refitted; times that do not grow with the size (noise)
/// give the largest size's bandwidth and no latency. Errors: fewer than 2
/// ranks or 2 sizes, a size or time that is not positive.
llvm::Expected<spec::LinkClass>
fitAllReduceLink(int64_t ranks,
                 llvm::ArrayRef<std::pair<double, double>> bytesSeconds);

/// The kernels of a `braid-run --profile-out` file (its text), the mean over
/// its ranks. Errors name what is missing or malformed.
llvm::Expected<KernelSamples> parseProfile(llvm::StringRef json);

/// Seconds per step outside the kernels: the median of `stepTimes` (the
/// profiled steps, of one run or of several rounds) less the kernels'
/// seconds per step in `samples` (their mean over ranks, totals over
/// `sampledSteps` steps; 0: over every step of `stepTimes`), clamped at 0.
/// 0 without step times.
double fitStepOverhead(const KernelSamples &samples,
                       const std::vector<double> &stepTimes,
                       double sampledSteps = 0);

/// One run's step for fitCollectiveWaits: measured, priced by the cost
/// model without either wait, and the peers its collectives wait for and
/// their gaps (StepPrediction::collectivePeers, collectiveGaps).
struct WaitRun {
  double measured = 0, priced = 0, peers = 0, gaps = 0;
};
/// Calibration.collective_wait_s and collective_gap_share.
struct CollectiveWaits {
  double wait = 0, gapShare = 0;
};
/// What the collectives of a step wait for their group beyond their priced
/// time: seconds per collective and peer (`wait`) plus a share of the compute since
/// the group last synchronised (`gapShare`), fitted so that each run's
/// measured step is its priced step + wait x peers + gapShare x gaps,
/// by least squares of the relative residuals, both non-negative (each
/// alone, or none, where the free solution has a negative one). Runs with
/// neither peers nor gaps, or without a measured step, are left out.
///
/// The steps, not the collectives' own measured seconds: ranks that share
/// cores yield them while they wait in a collective (Open MPI yields when
/// oversubscribed), so their peers compute faster than the processor
/// sharing the model assumes, and the collectives' seconds overstate what
/// they add to the step (fitted to them, the tensor-parallel calibration
/// run came out 39 % slow). A tensor-parallel run has many collectives with
/// short gaps, a data-parallel one few after long gaps: together they tell
/// the two apart.
CollectiveWaits fitCollectiveWaits(llvm::ArrayRef<WaitRun> runs);
/// The share of a core a waiting rank takes (Calibration.waiting_core_share)
/// at which a pipeline run's priced step, `stepAt(share)` (nondecreasing in
/// it), equals its measured step `measuredStep`: by bisection over [0, 1];
/// 0 when even 0 prices the step slower than measured or when the share
/// does not move the priced step, 1 when even 1 prices it faster. Errors:
/// those of `stepAt`.
llvm::Expected<double>
fitWaitingShare(llvm::function_ref<llvm::Expected<double>(double)> stepAt,
                double measuredStep);
/// The median of repeated runs of one model (interleaved with other runs,
/// so that a spell of the machine's speed does not set a whole
/// calibration): per kernel, the sample of the run with the median seconds
/// (the lower middle of an even count), among the runs that called it.
KernelSamples medianRun(llvm::ArrayRef<KernelSamples> runs);
/// The median of repeated all-reduce benchmarks, size by size. Errors:
/// no run, or runs that measured different sizes.
llvm::Expected<std::vector<std::pair<double, double>>>
medianBench(llvm::ArrayRef<std::vector<std::pair<double, double>>> runs);
/// The step times of a `braid-run --profile-out` file (rank 0's).
llvm::Expected<std::vector<double>> parseStepTimes(llvm::StringRef json);

/// The ranks and the all-reduce (bytes, seconds) of a `braid-run
/// --bench-collectives` file (its text).
llvm::Expected<std::pair<int64_t, std::vector<std::pair<double, double>>>>
parseAllReduceBench(llvm::StringRef json);

} // namespace braid::calibration

#endif // BRAID_COMPILER_CALIBRATIONFIT_H
