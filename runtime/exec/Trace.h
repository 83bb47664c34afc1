//===- Trace.h - The measured timeline of a run -----------------*- C++ -*-===//
//
// With --trace FILE.json, the trainer and the executor record when each
// step, each call of a plan function and each kernel began and ended on
// this rank, and rank 0 writes every rank's events in Chrome's trace event
// format (the JSON object form), which chrome://tracing and Perfetto
// (ui.perfetto.dev) open: one process per rank, named by its mesh
// coordinates; complete ("X") events in microseconds since the common start
// (every rank takes it after a barrier just before the first step); the
// threads "step", "calls", "compute" and "communication", so that
// collectives and point-to-point messages stand apart from the kernels that
// compute; a category ("cat") and a colour ("cname") per part of the step.
//
// Nothing is timed without a trace.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_TRACE_H
#define BRAID_RUNTIME_EXEC_TRACE_H

#include "runtime/exec/Communicator.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace braid::exec {

/// The part of a step an event belongs to: its category ("cat"), one of
/// "step", "data", "zero_grads", "forward", "backward", "micro_step" (a call
/// that runs forward and backward), "update" and "communication".
enum class TracePhase : uint8_t {
  kStep,
  kData,
  kZeroGrads,
  kForward,
  kBackward,
  kMicroStep,
  kUpdate,
  kCommunication,
};

/// The category of `phase` ("forward", ...).
const char *TracePhaseName(TracePhase phase);

/// The timelines of a rank (its Chrome "threads", in this order).
enum class TraceThread : uint8_t { kStep, kCalls, kCompute, kCommunication };

// An instruction for which plan::IsCommunicationTime holds (it moves data
// between ranks, finishes a collective, or is GRAD_NORM over a group) is
// drawn on the thread "communication", in the category "communication".

/// The part of the step each instruction of each of `plan`'s functions
/// computes (indexed by function, then instruction): the step functions'
/// and the pipeline's roles (zero_grads, forward, backward, update); a
/// function without a role (one-rank micro_step) is forward until its first
/// gradient kernel and backward from there, with its ADAMW in the update.
std::vector<std::vector<TracePhase>> KernelPhases(const plan::Plan &plan);

/// The events of one rank.
class Trace {
public:
  using Clock = std::chrono::steady_clock;

  /// The events' times count from now, or from the last Start().
  Trace() : start_(Clock::now()) {}
  void Start() { start_ = Clock::now(); }
  static Clock::time_point Now() { return Clock::now(); }

  /// A step, a call of a function, or the trainer's own waits: `args` holds
  /// the members of a JSON object ("\"micro_batch\": 3"), or nothing.
  void Add(std::string name, TracePhase phase, TraceThread thread,
           Clock::time_point begin, Clock::time_point end,
           std::string args = "");
  /// A kernel, named by its kernel, with its provenance as args (and a
  /// collective's group, a message's axis and peer): `phase` is the part of
  /// the step its function computes; a communication kernel goes to the
  /// thread and category "communication" whatever its phase. `inst` must
  /// outlive the trace (an instruction of the executor's plan).
  void AddKernel(const plan::Instruction &inst, TracePhase phase,
                 Clock::time_point begin, Clock::time_point end);

  size_t size() const { return events_.size(); }

  /// This rank's events, as trace event objects separated by ",\n", after
  /// the metadata events that name its process (`processName`, Chrome
  /// process `rank`) and its threads.
  std::string EventsJson(int64_t rank, absl::string_view processName) const;

private:
  struct Event {
    std::string name; // empty for a kernel: its kernel's name
    const plan::Instruction *inst = nullptr;
    TracePhase phase;
    TraceThread thread;
    int64_t beginNs, durationNs;
    std::string args;
  };
  Clock::time_point start_;
  std::vector<Event> events_;
};

/// The name of this rank's process: "rank R (pp p, dp d, tp t)", its
/// coordinates along the mesh's axes pp, dp and tp (0 along those the mesh
/// lacks) and then any other axis of the mesh; rank 0 without `comm`.
std::string TraceProcessName(const plan::Mesh &mesh, const Communicator *comm);

/// The same name for rank `rank` at `coordinates` (one per mesh axis, in its
/// order; missing ones are 0), for a rank that reports on the others.
std::string RankName(const plan::Mesh &mesh, int64_t rank,
                     absl::Span<const int64_t> coordinates);

/// Every rank of the job calls it once, at the same point: gathers the
/// ranks' events to rank 0 (with `comm`, over every axis of `mesh`) and
/// writes on `out` (rank 0's; null on the others) the trace file
/// {"traceEvents": [...], "displayTimeUnit": "ms"} with every rank's events.
absl::Status WriteTrace(const Trace &trace, const plan::Mesh &mesh,
                        Communicator *comm, std::ostream *out);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_TRACE_H
