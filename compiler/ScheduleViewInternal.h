//===- ScheduleViewInternal.h - What the view's files share -----*- C++ -*-===//
//
// `braid view` (ScheduleView.h) in its parts, each in a file of its own:
//
//   ScheduleViewReader.cpp  readView: the lanes read off the plan (each
//                           stage's functions, what they cost and which
//                           messages and collectives they hold) and the
//                           plan's own schedule simulated with those costs
//   ScheduleViewWriter.cpp  writePage: the page's text, the timeline drawn
//                           as inline SVG, the lanes' table
//   ScheduleView.cpp        the public functions
//
// Only the view's files include this header.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_SCHEDULEVIEWINTERNAL_H
#define BRAID_COMPILER_SCHEDULEVIEWINTERNAL_H

#include "compiler/Schedule.h"
#include "compiler/ScheduleView.h"
#include "runtime/plan/plan.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace braid::scheduleview {

namespace bp = braid::plan;

inline llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

/// `value` in three digits with an SI prefix and `unit`: "2.95 MFLOP".
std::string quantity(double value, llvm::StringRef unit);

/// Ranks as ranges, "0-3, 8-11"; with more than four ranges, the first three
/// and the count.
std::string rankList(const std::vector<int64_t> &ranks);

/// What a run of instructions of a function costs and communicates.
struct FunctionSummary {
  std::string name;
  int64_t instructions = 0;
  double flops = 0;
  /// Messages sent to and received from the next (+1) and previous (-1)
  /// stage.
  int sendsNext = 0, sendsPrevious = 0, receivesNext = 0, receivesPrevious = 0;
  /// "ALL_REDUCE over dp" -> how many, in order of first appearance.
  std::vector<std::pair<std::string, int>> collectives;
  /// The positions of the collectives among the instructions, in [0, 1).
  std::vector<double> collectivePositions;
};

/// "4 × ALL_REDUCE over tp, GRAD_NORM over pp", or "none".
std::string collectiveList(const FunctionSummary &s,
                           llvm::StringRef separator = ", ");

struct Lane {
  std::string title;          ///< "stage 3 · rank 3"
  std::vector<int64_t> ranks; ///< the ranks that run the lane's program
  std::string layers;         ///< "layer 3"
  int64_t slots = 1;
  FunctionSummary forward, backward, update;
  bool hasUpdate = false;
  /// Calls that run a function of their own, by (kind, micro-batch): the
  /// last backward, which starts the gradients' sums (a stage's
  /// `ScheduleStep.function`, or without a pipeline the backward part of
  /// last_micro_step), and without a pipeline the forward of the first
  /// micro-batch, which gathers ZeRO's parameters (first_micro_step's
  /// forward part, where it differs from micro_step's).
  std::map<std::pair<pipeline::Work, int64_t>, FunctionSummary> ownCalls;
  /// Split backwards (zero-bubble schedules): `backward` is the input
  /// gradient, `weight` the weight gradients, each scheduled on its own.
  bool split = false;
  FunctionSummary weight;
  /// Per schedule step: the slot it uses (0 without a pipeline).
  std::vector<int64_t> stepSlots;
};

struct View {
  bool pipelined = false;
  std::string scheme; ///< the pipeline's schedule name
  int64_t p = 1, m = 1;
  std::vector<Lane> lanes;
  bool flops = true; ///< the cost proxy: matmul FLOPs, else instructions
  pipeline::Schedules schedules;
  pipeline::Timeline timeline;

  llvm::StringRef unit() const { return flops ? "FLOP" : " instructions"; }
  std::string amount(double value) const {
    return flops ? quantity(value, "FLOP")
                 : quantity(value, "") + " instructions";
  }
};

/// The view of `plan`: its lanes and its schedule simulated. Fails,
/// naming what it found, as renderScheduleView does.
llvm::Expected<View> readView(const bp::Plan &plan);

/// The page that draws `view`, read off `plan`.
std::string writePage(const bp::Plan &plan, const View &view,
                      const ScheduleViewOptions &options);

} // namespace braid::scheduleview

#endif // BRAID_COMPILER_SCHEDULEVIEWINTERNAL_H
