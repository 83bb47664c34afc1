//===- ExecutorBase.h - What the CPU and CUDA executors share ---*- C++ -*-===//
//
// The part of an exec::Backend that does not depend on where the kernels
// run, shared by the CPU executor (exec::Executor, Executor.h) and the CUDA
// executor (cuda::Executor, runtime/cuda/Executor.h), which derive from it:
//
//  - the rank's place: its communicator, its mesh coordinates, its pipeline
//    stage, the arena of the stage (or of the plan) and the bytes of each
//    buffer, hence the address of every copy of a buffer in the arena;
//  - a function's lookup by name and the checks of the buffers it names
//    before anything runs (in this rank's arena, with the slot);
//  - the dtype of each instruction (plan::InstructionDType), computed once;
//  - the profile (KernelProfile per kernel kind, each instruction's work
//    from runtime/plan/Work.h computed once) and the trace's phases;
//  - the collectives left in flight (async = 1) until a WAIT finishes them;
//  - what the handlers of both decode from an instruction's attributes
//    (through runtime/plan/KernelParams.h), its buffers and the rank's
//    coordinates: slices along the rank_axis (the *_stride attributes), and
//    the shapes of linear layers, attention, the fused QKV split and
//    dropout.
//
// Each backend keeps its own kernels (its handlers' table), its memory (how
// the arena is allocated, read and written) and how it times a kernel.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_EXECUTORBASE_H
#define BRAID_RUNTIME_EXEC_EXECUTORBASE_H

#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Backend.h"
#include "runtime/exec/Communicator.h"
#include "runtime/exec/Trace.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace braid::exec {

class ExecutorBase : public Backend {
public:
  const plan::Plan &plan() const override { return plan_; }
  Communicator *communicator() const override { return comm_; }

  /// The pipeline stage whose program this rank runs: its coordinate along
  /// the mesh axis "pp" (0 without a pipeline or without a communicator).
  int64_t Stage() const override { return stage_; }
  /// Bytes of this rank's arena: what the plan predicts and the backend
  /// allocated (the stage's Stage.arena_bytes with a pipeline, else
  /// Plan.arena_bytes).
  int64_t ArenaBytes() const override { return arenaBytes_; }

  /// Waits until the messages of the plan's SENDs have left (the
  /// communicator's WaitSends); nothing to do without a communicator.
  absl::Status WaitSends() override;

  /// Starts (or restarts from zero) the profile of every kernel Run runs.
  /// The work of each instruction is computed here, once, not per call.
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
  /// part of the step its function computes (KernelPhases): the step's
  /// zero_grads and update, a stage's forward and backward, and in
  /// micro_step (or any other function) forward until the first gradient
  /// kernel, backward from it.
  absl::Status SetTrace(Trace *trace) override;
  Trace *trace() const override { return trace_; }

protected:
  explicit ExecutorBase(plan::Plan plan) : plan_(std::move(plan)) {}

  /// OK when `comm` (null: none) gives this rank coordinates inside the
  /// plan's mesh: the slices of rank_axis kernels are offsets by them,
  /// which the loader's checks cover only inside the mesh.
  static absl::Status CheckCoordinates(const plan::Plan &plan,
                                       const Communicator *comm);
  /// Places this rank in the (validated) plan, `comm` its communicator
  /// (checked by CheckCoordinates): its stage and arena's size, the bytes of
  /// each buffer, and each instruction's dtype. The backend allocates the
  /// arena (arena_) after.
  void placeRank(Communicator *comm);

  //===--- Functions and buffers ------------------------------------------===//

  /// The index of the plan's function named `name` (the last of that name),
  /// or NotFound.
  absl::StatusOr<int> findFunction(absl::string_view name) const;
  /// OK when every buffer that function `function` names passes checkCopy
  /// with `slot`, checked before anything runs; else the first failure,
  /// naming the function.
  absl::Status checkFunctionBuffers(int function, int64_t slot) const;
  /// `s` (an error) from function `function`, and from its instruction
  /// `inst` when there is one: "function 'NAME', PROVENANCE: ..." or
  /// "function 'NAME': ...".
  static absl::Status inFunction(const absl::Status &s,
                                 absl::string_view function,
                                 const plan::Instruction *inst = nullptr);

  /// Whether buffer `id` (a buffer of the plan) is in this rank's arena:
  /// every buffer without a pipeline, the stage's own with one.
  absl::Status checkOwned(int id) const;
  /// Whether `slot` is a copy of buffer `id`: any slot >= 0 of a buffer of
  /// one copy (slots 0 or 1), [0, slots) of a slotted one.
  bool isCopy(int id, int64_t slot) const;
  /// The backend's check that a function run on `slot` may read and write
  /// buffer `id` (checkOwned and isCopy, with the backend's messages).
  virtual absl::Status checkCopy(int id, int64_t slot) const = 0;
  /// Copy `slot` of buffer `id` in the arena (a checked slot, or any for a
  /// buffer of one copy): at offset + slot x the buffer's bytes.
  void *address(int id, int64_t slot) const {
    const plan::Buffer &b = plan_.buffers(id);
    return arena_ + b.offset() + (b.slots() >= 2 ? slot * bytes_[id] : 0);
  }
  /// The dtype instruction `i` of function `function` computes in
  /// (plan::InstructionDType).
  plan::DType instructionDType(int function, int i) const {
    return dtypes_[size_t(function)][size_t(i)];
  }

  //===--- Profile and trace ----------------------------------------------===//

  bool profiling() const { return !profile_.empty(); }
  /// Whether Run times its kernels: for a profile or a trace.
  bool timed() const { return profiling() || trace_; }
  /// Adds `seconds` of instruction `i` of function `function`, and its
  /// work, to the profile of its kernel (profiling on).
  void addProfile(int function, int i, double seconds);
  /// The part of the step of instruction `i` of function `function` (a
  /// trace on).
  TracePhase tracePhase(int function, int i) const {
    return tracePhases_[size_t(function)][size_t(i)];
  }

  //===--- The rank's coordinates -----------------------------------------===//

  /// This rank's coordinate along mesh axis `axis` (0 without a
  /// communicator).
  int64_t coordinate(absl::string_view axis) const;
  /// This rank's coordinate along the instruction's rank_axis (0 without
  /// one, or without a communicator).
  int64_t rankCoordinate(const plan::Instruction &inst) const;
  /// This rank's place in the group of a collective instruction, in the
  /// communicator's order (row-major over the group's axes); 0 without a
  /// communicator.
  int64_t groupPlace(const plan::Instruction &inst) const;

  //===--- What the handlers decode ---------------------------------------===//

  /// A slice along the instruction's rank_axis (validated by the loader):
  /// its first index, the rank's coordinate x the attribute `strideAttr`,
  /// or 0 when the instruction has no such attribute.
  int64_t sliceStart(const plan::Instruction &inst,
                     const char *strideAttr) const;
  /// LINEAR (x, w[, bias]) -> y, w [in, out] or transposed [out, in].
  cpu::LinearShape linearForwardShape(const plan::Instruction &inst) const;
  /// LINEAR_GRAD_INPUT (dy, w) -> dx.
  cpu::LinearShape linearGradInputShape(const plan::Instruction &inst) const;
  /// LINEAR_GRAD_WEIGHT (x, dy) -> dw.
  cpu::LinearShape linearGradWeightShape(const plan::Instruction &inst) const;
  /// ATTENTION and ATTENTION_GRAD, q [batch, seq, heads x head_dim]; with
  /// global_heads (tensor parallelism) this rank's slice of the heads.
  cpu::AttentionShape attentionShape(const plan::Instruction &inst) const;
  /// QKV_SPLIT's and QKV_CONCAT's layout of the fused buffer `fused`.
  static cpu::QkvShape qkvShape(const plan::Instruction &inst,
                                const plan::Buffer &fused);
  /// Where DROPOUT's input sits in the global batch: its rows are samples,
  /// the first at `rowOffset`; with a rank_axis (sequence parallel) the rank
  /// holds a slice of each sample's elements, the axis' ranks the whole
  /// sample.
  cpu::GlobalIndexing dropoutIndexing(const plan::Instruction &inst,
                                      int64_t rowOffset) const;

  //===--- Collectives in flight ------------------------------------------===//

  /// A collective started (async = 1) and not yet finished: the
  /// communicator's handle, the buffers it reads and writes, the
  /// instruction and its part of the step, and on the host's clock when it
  /// started and (once done) completed.
  struct InFlight {
    int64_t handle;
    std::vector<int32_t> buffers;
    const plan::Instruction *inst;
    TracePhase phase;
    std::chrono::steady_clock::time_point start, end;
    bool done; // completed (end set), not yet finished by a WAIT
  };
  /// Leaves the collective `handle`, started by `inst` on `buffers`, in
  /// flight until a WAIT naming one of them (or the function's end); `phase`
  /// is its part of the step, for a backend that traces it when finished.
  void startInFlight(int64_t handle, std::vector<int32_t> buffers,
                     const plan::Instruction &inst,
                     TracePhase phase = TracePhase::kStep);
  /// Moves the collectives in flight along, noting those that completed.
  absl::Status pollInFlight();
  /// Finishes the collectives in flight on the buffers `wait` names (all of
  /// them when null): waits for each not yet done, then finishedInFlight.
  absl::Status finishInFlight(const plan::Instruction *wait);
  /// What the backend does with a collective once finished: nothing here
  /// (the CPU executor traces it from its start to its completion).
  virtual void finishedInFlight(const InFlight &) {}

  plan::Plan plan_;
  Communicator *comm_ = nullptr;
  int64_t stage_ = 0;
  /// The rank's arena (allocated by the backend) and its size.
  uint8_t *arena_ = nullptr;
  int64_t arenaBytes_ = 0;
  /// Bytes of one copy of each buffer.
  std::vector<int64_t> bytes_;
  /// The plan's low-precision dtype (plan::MixedPrecisionDType: BF16 or
  /// F16, DTYPE_UNSPECIFIED for an F32 or F64 plan).
  plan::DType mixed_ = plan::DTYPE_UNSPECIFIED;
  std::vector<InFlight> inFlight_;
  /// With a trace: the trace, and the phase of each instruction of each
  /// function.
  Trace *trace_ = nullptr;
  std::vector<std::vector<TracePhase>> tracePhases_;
  /// Profiling (empty while off): seconds and work per kernel kind.
  std::vector<double> profile_;
  std::vector<KernelProfile> kernelProfiles_;

private:
  /// The dtype of each instruction of each function, by function and
  /// instruction index.
  std::vector<std::vector<plan::DType>> dtypes_;
  /// With a profile: the FLOPs and bytes of each instruction of each
  /// function (plan::InstructionWork), by function and instruction index.
  std::vector<std::vector<std::pair<double, double>>> work_;
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_EXECUTORBASE_H
