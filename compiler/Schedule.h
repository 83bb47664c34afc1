//===- Schedule.h - Pipeline schedules and their timeline -------*- C++ -*-===//
//
// The order of work of each pipeline rank for one optimizer step (GPipe,
// 1F1B, Megatron's interleaved 1F1B, zero-bubble ZB-H1) and the simulation
// that runs those orders against per-stage costs to predict the step time,
// the bubbles and the activations each rank holds.
//
// p pipeline ranks, m micro-batches per step, v chunks per rank: the layers
// are cut into p * v chunks and global chunk c lives on rank c % p as its
// local chunk c / p (Megatron's interleaved assignment; with v = 1 chunk r is
// rank r). The forward of micro-batch i on chunk c waits for its forward on
// chunk c - 1; its backward on chunk c waits for its forward on c and its
// backward on c + 1. The split schemes cut a backward into B (the input
// gradient, what chunk c - 1 waits for) and W (the weight gradient, which
// waits only for the B of the same micro-batch and chunk).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_SCHEDULE_H
#define BRAID_COMPILER_SCHEDULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::pipeline {

/// One kind of work of a chunk on a micro-batch.
enum class Work {
  Forward,
  Backward,       ///< the whole backward (input and weight gradients)
  BackwardInput,  ///< B: the input gradient, sent to the previous chunk
  BackwardWeight, ///< W: the weight gradient, needed by nothing but the step
};

/// A unit of work of a rank: `work` of micro-batch `microBatch` on the rank's
/// local chunk `chunk` (0..v-1).
struct Step {
  Work work;
  int64_t microBatch;
  int64_t chunk;

  bool operator==(const Step &other) const {
    return work == other.work && microBatch == other.microBatch &&
           chunk == other.chunk;
  }
  bool operator!=(const Step &other) const { return !(*this == other); }
};

/// The name of `work`: "forward", "backward", "backward-input" or
/// "backward-weight".
llvm::StringRef workName(Work work);

/// `step` in words, e.g. "forward of micro-batch 3 on chunk 1".
std::string describe(const Step &step);

enum class Scheme {
  GPipe,        ///< all forwards, then all backwards
  OneFOneB,     ///< PipeDream-flush: warm-up forwards, then 1F1B
  Interleaved,  ///< Megatron's interleaved 1F1B over v >= 2 chunks per rank
  ZeroBubbleH1, ///< 1F1B with backwards split, W deferred into the bubbles
};

/// The scheme named `name`: "gpipe", "1f1b", "interleaved" or "zb-h1"; an
/// error that lists them otherwise.
llvm::Expected<Scheme> parseScheme(llvm::StringRef name);

/// The name parseScheme accepts for `scheme`.
llvm::StringRef schemeName(Scheme scheme);

/// Per-rank orders of work: the result of makeSchedule, the input of
/// simulate. schedules[r] is the list of rank r, in execution order.
using Schedules = std::vector<std::vector<Step>>;

/// The order of work of each rank for one optimizer step of `scheme` with
/// p ranks, m micro-batches and v chunks per rank. GPipe, 1F1B and ZB-H1
/// need v = 1; the interleaved schedule needs v >= 2 and m a multiple of p
/// (Megatron's rule). The split scheme (ZB-H1) emits BackwardInput and
/// BackwardWeight steps, the others Backward steps.
llvm::Expected<Schedules> makeSchedule(Scheme scheme, int64_t p, int64_t m,
                                       int64_t v);

/// The time each kind of work takes, in any time unit, per rank and local
/// chunk: every table that is given is p x v (`table[r][k]`), so uneven
/// stages can be simulated.
struct Costs {
  /// Required.
  std::vector<std::vector<double>> forward;
  /// The whole backward. When empty, it is backwardInput + backwardWeight,
  /// which must then both be given.
  std::vector<std::vector<double>> backward;
  /// The two halves of a backward, for the split schemes. When both are
  /// empty each is half of `backward`; when one is, it is `backward` minus
  /// the other.
  std::vector<std::vector<double>> backwardInput, backwardWeight;
  /// The time of one activation or gradient transfer between consecutive
  /// chunks that live on different ranks (none between chunks of one rank).
  double transfer = 0;

  /// The same costs for every rank and chunk: forward `f`, backward `b`
  /// (split b/2 + b/2).
  static Costs uniform(int64_t p, int64_t v, double f, double b);
  /// The same costs for every rank and chunk, with the backward split into
  /// the input gradient `bInput` and the weight gradient `bWeight`.
  static Costs uniformSplit(int64_t p, int64_t v, double f, double bInput,
                            double bWeight);
};

/// A step and when it ran.
struct Interval {
  Step step;
  double start, end;
};

/// The predicted run of one optimizer step.
struct Timeline {
  /// ranks[r]: rank r's steps in execution order, with their times.
  std::vector<std::vector<Interval>> ranks;
  /// The end of the last work on any rank (the step starts at 0).
  double stepTime = 0;
  /// Per rank: the time it computes (the sum of its steps' durations).
  std::vector<double> busy;
  /// Per rank: the fraction of the step it idles, 1 - busy / stepTime
  /// (0 when stepTime is 0).
  std::vector<double> bubble;
  /// Per rank: the most (micro-batch, chunk) pairs whose forward has run and
  /// whose backward (B, for the split schemes) has not: the activations the
  /// rank holds at its peak, in micro-batches of one chunk.
  std::vector<int64_t> peakInFlight;

  /// The time rank r idles within the step.
  double idle(int64_t r) const { return stepTime - busy[r]; }
};

/// Runs `schedules` (one list per rank, p of them): every rank executes its
/// steps in order, each as early as the rank and the step's dependencies
/// allow. Fails when a schedule is malformed (a step out of range, a forward
/// or a backward of some micro-batch and chunk missing or repeated, a
/// backward before its forward, a weight gradient before its input
/// gradient, Backward mixed with B/W for one micro-batch and chunk), when
/// `costs` do not match p x v, or when the ranks deadlock: the error then
/// names each stuck rank, the step it is at and the step it waits for.
llvm::Expected<Timeline> simulate(const Schedules &schedules, int64_t p,
                                  int64_t m, int64_t v, const Costs &costs);

} // namespace braid::pipeline

#endif // BRAID_COMPILER_SCHEDULE_H
