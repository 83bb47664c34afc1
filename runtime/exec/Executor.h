//===- Executor.h - Runs the functions of a plan on the CPU -----*- C++ -*-===//
//
// The executor owns one arena per rank, allocated once at the size the plan
// states for the rank (its pipeline stage's Stage.arena_bytes, or
// Plan.arena_bytes without a pipeline), and runs a plan function by calling
// one CPU kernel per instruction on arena addresses. Every size a kernel uses
// is derived from buffer shapes that the plan loader has validated, so a plan
// that loads cannot make the executor touch memory outside the arena; the
// buffers of other pipeline stages, which lie outside it, are refused.
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
#include "runtime/exec/Trace.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace braid::exec {

/// The CPU backend (Backend.h).
class Executor : public Backend {
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

  const plan::Plan &plan() const override { return plan_; }
  Communicator *communicator() const override { return comm_; }
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
  /// names (which must have that slot).
  absl::Status Run(absl::string_view name, const StepContext &context,
                   int64_t slot = 0) override;

  /// Waits until the messages of the plan's SENDs have left; nothing to do
  /// without a communicator.
  absl::Status WaitSends() override;

  /// The pipeline stage whose program this rank runs: its coordinate along
  /// the mesh axis "pp" (0 without a pipeline or without a communicator).
  int64_t Stage() const override { return stage_; }

  /// Bytes of this rank's arena: what the plan predicts and the executor
  /// allocated (the stage's Stage.arena_bytes with a pipeline, else
  /// Plan.arena_bytes).
  int64_t ArenaBytes() const override { return arenaBytes_; }
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

  /// Starts (or restarts from zero) timing every kernel Run runs. The work
  /// of each instruction is computed here, once, not per call.
  void EnableProfile() override;
  /// Zeroes the profile and keeps profiling (after a warm-up step); nothing
  /// while profiling is off.
  void ResetProfile() override;
  /// Seconds spent in each kernel since profiling was enabled or reset
  /// (indexed by plan::Kernel); empty while profiling is off.
  const std::vector<double> &Profile() const override { return profile_; }
  /// Per kernel kind (indexed by plan::Kernel), as Profile; empty while
  /// profiling is off.
  const std::vector<KernelProfile> &KernelProfiles() const override {
    return kernelProfiles_;
  }

  /// Records every kernel that Run runs into `trace` (null: stops), in the
  /// part of the step its function computes: the step's zero_grads and
  /// update, a stage's forward and backward, and in micro_step (or any other
  /// function) forward until the first gradient kernel, backward from it.
  absl::Status SetTrace(Trace *trace) override;
  Trace *trace() const override { return trace_; }

private:
  explicit Executor(plan::Plan plan) : plan_(std::move(plan)) {}
  /// Whether buffer `id` is in this rank's arena: every buffer without a
  /// pipeline, the stage's own with one.
  absl::Status checkOwned(int id) const;
  template <typename T>
  absl::Status runInstruction(const plan::Instruction &inst,
                              const StepContext &context, int64_t slot);
  /// SEND and RECV, whatever the dtype.
  absl::Status runPointToPoint(const plan::Instruction &inst, int64_t slot);
  /// Copy `slot` of buffer `id` (a validated slot, or any for one copy).
  void *address(int id, int64_t slot) const {
    const plan::Buffer &b = plan_.buffers(id);
    return arena_ + b.offset() + (b.slots() >= 2 ? slot * bytes_[id] : 0);
  }
  /// Whether `slot` is a copy of buffer `id`: any slot >= 0 of a buffer of
  /// one copy, [0, slots) of a slotted one.
  absl::Status checkSlot(int id, int64_t slot) const;
  /// Moves the collectives in flight along, noting those that completed.
  absl::Status pollInFlight();
  /// Finishes the collectives in flight on the buffers `wait` names (all of
  /// them when null), tracing each from its start to its completion.
  absl::Status finishInFlight(const plan::Instruction *wait);
  /// This rank's place in the group of a collective instruction, in the
  /// communicator's order (row-major over the group's axes).
  int64_t groupPlace(const plan::Instruction &inst) const;
  /// This rank's coordinate along the instruction's rank_axis (0 without
  /// one, or without other ranks).
  int64_t rankCoordinate(const plan::Instruction &inst) const;

  plan::Plan plan_;
  /// Collectives started (REDUCE_SCATTER with async) and not yet finished.
  struct InFlight {
    int64_t handle;
    std::vector<int32_t> buffers; // the buffers it reads and writes
    const plan::Instruction *inst;
    std::chrono::steady_clock::time_point start, end;
    TracePhase phase;
    bool done; // completed (end set), not yet finished by a WAIT
  };
  std::vector<InFlight> inFlight_;
  /// The trace phase of the instruction running.
  TracePhase currentPhase_ = TracePhase::kStep;
  /// The rank's arena: `mapped_` bytes mapped at `arena_` (at least one page
  /// even for an empty arena), of which the first arenaBytes_ are the plan's.
  uint8_t *arena_ = nullptr;
  int64_t arenaBytes_ = 0;
  size_t mapped_ = 0;
  int64_t stage_ = 0;
  /// Bytes of one copy of each buffer.
  std::vector<int64_t> bytes_;
  Communicator *comm_ = nullptr;
  std::vector<double> profile_;
  std::vector<KernelProfile> kernelProfiles_;
  /// With a profile: the FLOPs and bytes of each instruction of each
  /// function (plan::InstructionWork), by function and instruction index.
  std::vector<std::vector<std::pair<double, double>>> work_;
  Trace *trace_ = nullptr;
  /// With a trace: the phase of each instruction of each function.
  std::vector<std::vector<TracePhase>> tracePhases_;
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_EXECUTOR_H
