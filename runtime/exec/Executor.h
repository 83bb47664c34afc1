//===- Executor.h - Runs the functions of a plan on the CPU -----*- C++ -*-===//
//
// The executor owns one arena per rank, allocated once at the size the plan
// states for the rank (its pipeline stage's Stage.arena_bytes, or
// Plan.arena_bytes without a pipeline), and runs a plan function by calling
// one CPU kernel per instruction on arena addresses. Every size a kernel uses
// is derived from buffer shapes that the plan loader has validated, so a plan
// that loads cannot make the executor touch memory outside the arena; the
// buffers of other pipeline stages, which lie outside it, are refused.
// An instruction runs through the table of the kernels' handlers that
// runtime/plan/Kernels.def generates (CpuKernelHandlers.cpp: one row per
// kernel), as float or double by its dtype (plan::InstructionDType).
//
// The arena is an anonymous private mapping: the kernel hands out zeroed
// pages when they are first touched, so nothing is touched at start-up and
// TouchedArenaBytes can count, independently of the plan's offsets, how much
// of the predicted arena the run really used.
//
// A buffer with slots >= 2 (Buffer.slots) has one copy per micro-batch in
// flight on a pipeline stage: a function run on slot k reads and writes copy
// k of such buffers, at offset + k x the buffer's bytes, and the single copy
// of the others. SEND does not wait for its receiver, and the communicator
// sends a copy, so nothing waits before the sent bytes are written again
// (two ranks waiting for each other to receive could deadlock); the trainer
// waits for the messages to leave (WaitSends) before a stage's update.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_EXECUTOR_H
#define BRAID_RUNTIME_EXEC_EXECUTOR_H

#include "runtime/exec/Backend.h"
#include "runtime/exec/Communicator.h"
#include "runtime/exec/ExecutorBase.h"
#include "runtime/exec/Trace.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace braid::exec {

template <typename T> class KernelCall;

/// The CPU backend (Backend.h); what it shares with the CUDA executor
/// (function lookup, buffer checks, profile, trace, coordinates, collectives
/// in flight) is ExecutorBase's.
class Executor : public ExecutorBase {
public:
  ~Executor() override;
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Validates `plan` (as the loader does) and allocates its arena. `comm`
  /// runs the plan's collectives; without one, a collective whose group is a
  /// single rank is a copy and any other is an error.
  static absl::StatusOr<std::unique_ptr<Executor>>
  Create(plan::Plan plan, Communicator *comm = nullptr);
  /// Whether the CPU kernels can run `plan`: F32 and F64 plans, not mixed
  /// precision (BF16 or F16 buffers). Create checks it; so does the trainer,
  /// before it opens data.
  static absl::Status CheckRunsOnCpu(const plan::Plan &plan);

  const char *Device() const override { return "cpu"; }

  /// Copies `values` into copy `slot` of buffer `id` (converting to its
  /// dtype); the sizes must match. The slot is that of a function run on it:
  /// a buffer of one copy (slots 0 or 1) has it for every slot.
  absl::Status Write(int id, absl::Span<const double> values,
                     int64_t slot = 0) override;
  /// The contents of copy `slot` of buffer `id`, converted to double.
  absl::StatusOr<std::vector<double>> Read(int id,
                                           int64_t slot = 0) const override;
  /// The bytes of (the first copy of) buffer `id` in this rank's arena, to
  /// read or write in place (checkpoints); FailedPrecondition for a buffer
  /// of another pipeline stage.
  absl::StatusOr<absl::Span<uint8_t>> Bytes(int id) override;
  /// Nothing to do: Bytes is the buffer.
  absl::Status ReleaseBytes(int id, bool written) override {
    return absl::OkStatus();
  }

  /// Runs function `name` once, on slot `slot` of the slotted buffers it
  /// names (which must have that slot). With a profile or a trace, each
  /// kernel is timed on the host's clock; a collective left in flight is
  /// traced from its start to its completion.
  absl::Status Run(absl::string_view name, const StepContext &context,
                   int64_t slot = 0) override;

  /// Bytes of the arena the run has touched so far, as the operating system
  /// counts them: the arena's resident pages (mincore) times the page size,
  /// the last page counted only up to the arena's end. A page counts once
  /// anything on it has been read or written (a page that is only read maps
  /// the kernel's shared zero page, which costs no memory but is counted
  /// here); pages are never given back, so this is the peak so far. -1 when
  /// the system cannot tell (mincore fails; errno says why).
  int64_t TouchedArenaBytes() const override;
  /// The kernels' scratch is not counted.
  int64_t WorkspaceBytes() const override { return 0; }

private:
  /// The kernels' handlers read the executor through their call.
  template <typename T> friend class KernelCall;

  explicit Executor(plan::Plan plan) : ExecutorBase(std::move(plan)) {}
  /// Runs `inst`, whose dtype is `dtype` (plan::InstructionDType), through
  /// the kernel table (CpuKernelHandlers.cpp): its kernel's handler for
  /// float (F32) or double (F64); transfers and WAIT whatever the dtype.
  absl::Status runInstruction(const plan::Instruction &inst, plan::DType dtype,
                              const StepContext &context, int64_t slot);
  /// Whether `slot` is a copy of buffer `id` (isCopy), naming the buffer's
  /// slots when not.
  absl::Status checkSlot(int id, int64_t slot) const;
  /// checkOwned, then checkSlot.
  absl::Status checkCopy(int id, int64_t slot) const override;
  /// Traces a collective finished by a WAIT from its start to its
  /// completion.
  void finishedInFlight(const InFlight &f) override;

  /// The trace phase of the instruction running.
  TracePhase currentPhase_ = TracePhase::kStep;
  /// `mapped_` bytes mapped at arena_ (at least one page even for an empty
  /// arena), of which the first arenaBytes_ are the plan's.
  size_t mapped_ = 0;
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_EXECUTOR_H
