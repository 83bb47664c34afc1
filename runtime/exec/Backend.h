//===- Backend.h - What the trainer needs of an executor --------*- C++ -*-===//
//
// The interface the step loop (Trainer.h) and checkpoints (Checkpointing.h)
// drive a plan through, whatever runs its kernels: the CPU executor
// (exec::Executor, Executor.h) and the one-GPU executor (cuda::Executor,
// runtime/cuda/Executor.h). A backend holds one rank's arena of the plan's
// size, moves buffers in and out as doubles (converted to and from their
// dtype), and runs the plan's functions.
//
// Everything here is about one rank; the job's other ranks are reached
// through the backend's Communicator (null for a plan of one rank).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_BACKEND_H
#define BRAID_RUNTIME_EXEC_BACKEND_H

#include "runtime/exec/Communicator.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::exec {

class Trace;

/// What keys the randomness of one micro-batch (dropout).
struct StepContext {
  uint64_t seed = 0;
  uint32_t step = 0;
  /// The micro-batch's first sample within the step's global batch: dropout
  /// masks are drawn per element of the whole global batch, so they do not
  /// depend on how it is split into micro-batches and data-parallel ranks.
  int64_t sampleOffset = 0;
};

class Backend {
public:
  virtual ~Backend() = default;

  /// The plan this backend runs, as loaded.
  virtual const plan::Plan &plan() const = 0;
  /// The job's other ranks, or null for a plan of one rank.
  virtual Communicator *communicator() const = 0;
  /// The name of the device the kernels run on ("cpu", "cuda"), for
  /// messages.
  virtual const char *Device() const = 0;

  /// The index of the plan's buffer named `name`, or -1.
  int FindBuffer(absl::string_view name) const {
    for (int i = 0; i < plan().buffers_size(); ++i)
      if (plan().buffers(i).name() == name)
        return i;
    return -1;
  }
  /// The index of the buffer named `name` of pipeline stage `stage`
  /// (Buffer.stage), or -1.
  int FindBuffer(absl::string_view name, int64_t stage) const {
    for (int i = 0; i < plan().buffers_size(); ++i)
      if (plan().buffers(i).name() == name &&
          plan().buffers(i).stage() == stage)
        return i;
    return -1;
  }

  /// Copies `values` into copy `slot` of buffer `id` (converting to its
  /// dtype: rounded to nearest for BF16 and F16); the sizes must match. A
  /// buffer of one copy (slots 0 or 1) has it for every slot. A device
  /// backend may return before the copy is done: it happens in order with
  /// the functions run before and after (`values` may change at once).
  virtual absl::Status Write(int id, absl::Span<const double> values,
                             int64_t slot = 0) = 0;
  /// The contents of copy `slot` of buffer `id`, converted to double, after
  /// everything run so far.
  virtual absl::StatusOr<std::vector<double>> Read(int id,
                                                   int64_t slot = 0) const = 0;
  /// Element 0 of copy `slot` of buffer `id` as it is after everything run
  /// so far, into *out by the next Settle: a device backend enqueues the
  /// copy and returns (the trainer reads each micro-batch's loss so, and
  /// waits for the device once a step). Here: at once, through Read.
  virtual absl::Status ReadLater(int id, double *out, int64_t slot = 0) {
    absl::StatusOr<std::vector<double>> v = Read(id, slot);
    if (!v.ok())
      return v.status();
    if (v->empty())
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", id, " holds no element to read"));
    *out = v->front();
    return absl::OkStatus();
  }
  /// Waits for everything run so far and fills the outputs of ReadLater;
  /// an error inside a kernel is returned here.
  virtual absl::Status Settle() { return absl::OkStatus(); }
  /// The bytes of (the first copy of) buffer `id` in host memory, to read or
  /// write in place (checkpoints), after everything run so far. A backend
  /// whose arena is not in host memory returns a host copy of the buffer,
  /// valid until ReleaseBytes (or the next Bytes) for it.
  virtual absl::StatusOr<absl::Span<uint8_t>> Bytes(int id) = 0;
  /// Ends the use of Bytes(id): with `written`, what was written into it
  /// becomes the buffer's contents. Nothing to do where Bytes is the buffer
  /// itself; a device backend copies its host copy back (when written) and
  /// frees it.
  virtual absl::Status ReleaseBytes(int id, bool written) = 0;

  /// Runs function `name` on slot `slot` of the slotted buffers it names. A
  /// device backend may return before the kernels have run: Read waits for
  /// them, and an error inside one is returned there.
  virtual absl::Status Run(absl::string_view name, const StepContext &context,
                           int64_t slot = 0) = 0;
  /// Waits until the messages of the plan's SENDs have left.
  virtual absl::Status WaitSends() = 0;

  /// The pipeline stage whose program this rank runs (0 without one).
  virtual int64_t Stage() const = 0;

  /// The factor the loss is scaled by in the gradients the micro-steps
  /// produce (the trainer seeds the backward with it through loss_grad:
  /// fp16's loss scaling). GRAD_NORM reports the norm of the gradients
  /// divided by it, and a clip scale that divides by it as well, so that
  /// the update sees the unscaled gradients. 1 unless set.
  void SetLossScale(double scale) { lossScale_ = scale; }
  double LossScale() const { return lossScale_; }

  /// Bytes of this rank's arena: what the plan predicts and the backend
  /// allocated.
  virtual int64_t ArenaBytes() const = 0;
  /// Bytes of the arena in use so far, as the device can tell: on the CPU the
  /// pages the run has touched (the operating system's count), on a GPU the
  /// arena (device memory is committed when it is allocated). -1 when it
  /// cannot be told (errno says why).
  virtual int64_t TouchedArenaBytes() const = 0;
  /// Bytes the backend allocated beyond the arena for its kernels'
  /// workspaces (0 where they are not counted).
  virtual int64_t WorkspaceBytes() const = 0;
  /// What the backend chose at load that a run's first lines should say
  /// (the CUDA executor: which kernels run attention, and why): one line
  /// each, none by default.
  virtual std::vector<std::string> KernelNotes() const { return {}; }
  /// What a run's last lines should say of how it ran (the CUDA executor:
  /// the calls it captured as graphs): one line each, none by default.
  virtual std::vector<std::string> RunNotes() const { return {}; }

  /// What the calls of one kernel kind ran since profiling was enabled (or
  /// last reset): their seconds, their number, and the work they did as
  /// runtime/plan/Work.h counts it.
  struct KernelProfile {
    double seconds = 0;
    int64_t calls = 0;
    double flops = 0;
    double bytes = 0;
  };
  /// Starts (or restarts from zero) timing every kernel Run runs.
  virtual void EnableProfile() = 0;
  /// Zeroes the profile and keeps profiling; nothing while profiling is off.
  virtual void ResetProfile() = 0;
  /// Seconds spent in each kernel kind (indexed by plan::Kernel) since
  /// profiling was enabled or reset; empty while profiling is off.
  virtual const std::vector<double> &Profile() const = 0;
  /// Per kernel kind (indexed by plan::Kernel), as Profile.
  virtual const std::vector<KernelProfile> &KernelProfiles() const = 0;

  /// Records every kernel Run runs into `trace` (null: stops). A backend
  /// that cannot time its kernels on the host's clock answers Unimplemented.
  virtual absl::Status SetTrace(Trace *trace) = 0;
  virtual Trace *trace() const = 0;

protected:
  double lossScale_ = 1.0;
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_BACKEND_H
