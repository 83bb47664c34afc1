//===- CostModelInternal.h - What the cost model's files share --*- C++ -*-===//
//
// The cost model (CostModel.h) in its parts, each in a file of its own:
//
//   CostModelClusters.cpp  the presets and loadCluster
//   CostModelPricer.cpp    Pricer (a kernel's and a communication's
//                          seconds) and priceFunction (one function's run
//                          on one rank)
//   CostModel.cpp          predictStep: the step, its pipeline schedule
//                          simulated (on shared cores too)
//   CostModelReport.cpp    predictionReport
//
// Only the cost model's files include this header.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_COSTMODELINTERNAL_H
#define BRAID_COMPILER_COSTMODELINTERNAL_H

#include "frontends/spec/cluster.pb.h"
#include "runtime/plan/plan.pb.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace braid::costmodel {

inline llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Prices instructions on one cluster for one plan.
class Pricer {
public:
  /// `busyRanks`: how many of a node's ranks compute at once (they share
  /// its cores when calibrated; 0: all of them).
  Pricer(const plan::Plan &plan, const spec::Cluster &cluster,
         double busyRanks = 0);

  /// Seconds of a compute kernel.
  double compute(const plan::Instruction &inst) const;

  /// Seconds of a communication instruction run by the rank at `coords`.
  double communicate(const plan::Instruction &inst,
                     const std::vector<int64_t> &coords) const;

  /// An all-reduce of `bytes` over `n` ranks: a ring moves 2 (n-1)/n of
  /// them per rank in 2 (n-1) steps; a double binary tree (where the link
  /// allows it) reduces up and broadcasts down, each phase moving the
  /// message once, pipelined, in 2 ceil(log2 n) steps. The cheaper is taken,
  /// as NCCL's tuner does.
  static double allReduce(const spec::LinkClass &link, double n, double bytes);

  int64_t ranksPerNode = 1;

  /// Whether ranks share the node's cores by processor sharing (the
  /// calibrations know the cores), and how many ranks the cores run at
  /// full speed at once.
  bool sharesCores() const { return processorSharing; }
  double capacity() const {
    return double(rates->cores()) /
           double(std::max<int64_t>(calibration->threads_per_rank(), 1));
  }
  /// How much of a core a waiting rank takes, as a share of a computing
  /// rank's (calibrated; 0: none).
  double waitingShare() const {
    return calibration ? std::clamp(calibration->waiting_core_share(), 0.0, 1.0)
                       : 0.0;
  }

  /// The ranks of a collective's group (1: none to wait for).
  int64_t groupSize(const plan::Instruction &inst) const;

  /// What a collective waits per second of compute its group ran since it
  /// last synchronised (calibrated; 0: none).
  double gapShare() const {
    return calibration ? std::max(0.0, calibration->collective_gap_share())
                       : 0.0;
  }

  /// Seconds per step outside the plan's kernels (calibrated), or 0.
  double stepOverhead() const {
    return calibration ? calibration->step_overhead_s() : 0.0;
  }

private:
  static double efficiency(double given, double fallback) {
    return given > 0 ? given : fallback;
  }

  /// The link class of a group along `axes` of the rank at `coords`: within
  /// a node when the group's first and last ranks are on one node.
  const spec::LinkClass &linkOf(const std::vector<std::string> &axes,
                                const std::vector<int64_t> &coords) const;

  const plan::Plan &plan;
  const spec::Cluster &cluster;
  const spec::Calibration *calibration = nullptr;
  /// The calibration whose kernel rates price compute, and the factor
  /// processor sharing slows them by.
  const spec::Calibration *rates = nullptr;
  bool processorSharing = false;
  double slowdown = 1;
};

/// One function's run on one rank.
struct FunctionTime {
  double total = 0, compute = 0, hidden = 0;
  /// Of `compute`: the kernels that recompute a forward value.
  double recompute = 0;
  std::map<std::string, double> communication;
  /// Of the transfers between stages (SEND/RECV): the largest, priced
  /// apart (the schedule's simulation places them).
  double transfer = 0;
  /// The all-reduce, all-gather and reduce-scatter calls and their seconds,
  /// and their gaps (SyncClock::gap).
  double collectivePeers = 0, collectiveSeconds = 0, gaps = 0;
  /// Seconds by kernel kind (indexed by plan::Kernel), SEND and RECV left
  /// out.
  std::array<double, plan::Kernel_ARRAYSIZE> kernels{};
};

/// A rank's compute since each of its groups last synchronised: the
/// step's compute clock, and the clock at each collective's call by its
/// axes. A collective over some axes synchronises the groups over those
/// axes and over any of their subsets.
struct SyncClock {
  double clock = 0;
  std::vector<std::pair<std::vector<std::string>, double>> syncs;

  static std::vector<std::string> axesOf(const plan::Instruction &inst) {
    std::vector<std::string> axes(inst.group().begin(), inst.group().end());
    std::sort(axes.begin(), axes.end());
    return axes;
  }
  /// The compute since the group over `axes` last synchronised (the clock's
  /// start counts as a synchronisation: the step's).
  double gap(const std::vector<std::string> &axes) const {
    double last = 0;
    for (const auto &[over, at] : syncs)
      if (std::includes(over.begin(), over.end(), axes.begin(), axes.end()))
        last = std::max(last, at);
    return clock - last;
  }
  void synced(std::vector<std::string> axes) {
    for (auto &[over, at] : syncs)
      if (over == axes) {
        at = clock;
        return;
      }
    syncs.push_back({std::move(axes), clock});
  }
  /// After a function's single pricing stands for `times` runs: the runs
  /// before the last one add their compute, and what the priced run
  /// synchronised happened in the last.
  void repeat(double from, double times) {
    double delta = (clock - from) * (times - 1);
    if (delta <= 0)
      return;
    for (auto &[over, at] : syncs)
      if (at >= from)
        at += delta;
    clock += delta;
  }
};

/// `sync` carries the rank's compute since its groups synchronised into
/// and out of the function (null: the function starts synchronised).
FunctionTime priceFunction(const Pricer &pricer, const plan::Function &fn,
                           const std::vector<int64_t> &coords,
                           SyncClock *sync = nullptr);

} // namespace braid::costmodel

#endif // BRAID_COMPILER_COSTMODELINTERNAL_H
