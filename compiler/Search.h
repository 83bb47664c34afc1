//===- Search.h - The fastest layout that fits ------------------*- C++ -*-===//
//
// braidc --auto: enumerates the layouts of a job on a cluster — tp within a
// node and dividing the heads, pp up to the layers (stages balanced by
// FLOPs, so of unequal layers where pp does not divide them), vpp where the
// stage's layers split into equal chunks of two or more, dp from the rest and
// dividing the global batch, sp with tp, every micro-batch size that divides
// the batch, the pipeline schedules — and for each climbs a ladder of recompute
// (none, selective, full) and ZeRO stages (0-3 with dp), cheapest in time
// first: each rung that a cheap bound does not rule out (its parameters,
// gradients and optimizer state alone exceed a device's memory) is evaluated —
// its peak arena (plan-memory's) and step time (the cost model's) read off two
// compiles of proxies with fewer layers per pipeline chunk, or from a whole
// compile when the chunks hold few layers — until one fits. The best that
// fit are then compiled whole (their numbers replace the estimates), and
// the fastest wins.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_SEARCH_H
#define BRAID_COMPILER_SEARCH_H

#include "compiler/CostModel.h"
#include "frontends/spec/braid_spec.pb.h"
#include "frontends/spec/cluster.pb.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace braid {

struct Candidate {
  /// The layout, as a job's parallel fields.
  spec::ParallelSpec parallel;
  /// "tp 2 x pp 2 x dp 2, sp, mb 1, 1f1b, selective, zero 1".
  std::string layout;
  /// Compiled, fits and priced.
  bool feasible = false;
  /// Why not: out of memory by how much, indivisible, a compile error.
  std::string rejected;
  /// Compiled: the largest rank's arena, and the prediction.
  int64_t peakBytes = 0;
  /// Compiled whole (its numbers exact), or estimated from proxies of
  /// fewer layers (compiler/Search.cpp).
  bool compiled = false;
  bool estimated = false;
  /// A candidate estimated first, then compiled whole: the estimate.
  int64_t estimatedPeakBytes = 0;
  double estimatedStepTime = 0;
  StepPrediction prediction;
  double tokensPerS = 0, tflopsPerDevice = 0, mfu = 0;
  /// Its structure (tp, pp, dp, vpp, micro-batch, schedule, sp) and its
  /// rung on that structure's memory ladder (recompute, ZeRO).
  int64_t structure = 0, rung = 0;
};

struct SearchOptions {
  spec::Cluster cluster;
  /// Most candidates to compile (the cheapest by the memory bound first);
  /// 0: all.
  int64_t maxCompiles = 0;
  /// Estimate candidates from proxies of fewer layers (whole compiles
  /// otherwise).
  bool proxies = true;
  /// How many of the best estimated candidates to compile whole (and, of
  /// those with selective or full recompute, to try with recompute auto).
  int64_t confirm = 1;
  bool recomputeAuto = true;
  /// Try pipelines whose stages balance memory rather than FLOPs, for the
  /// best that had to recompute or shard more to fit.
  bool unevenStages = true;
  /// Threads that evaluate candidates (0: one per hardware thread). The
  /// result does not depend on it.
  int64_t threads = 0;
};

/// Every layout of `job` (its model, train, data; its parallel section
/// gives the global batch size and is otherwise replaced) on the cluster,
/// the feasible first, fastest first; then those rejected.
llvm::Expected<std::vector<Candidate>>
searchLayouts(const spec::JobSpec &job, const SearchOptions &options,
              mlir::MLIRContext &context);

/// A table of the first `top` candidates (and how many more there were).
std::string candidateTable(const std::vector<Candidate> &candidates,
                           int64_t top);

} // namespace braid

#endif // BRAID_COMPILER_SEARCH_H
