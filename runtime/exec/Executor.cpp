//===- Executor.cpp - Runs the functions of a plan on the CPU -------------===//

#include "runtime/exec/Executor.h"

#include "runtime/common/Format.h"

#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace braid::exec {
namespace {

using plan::Buffer;
using plan::Instruction;

int64_t (&numel)(const Buffer &) = plan::NumElements;

} // namespace

absl::Status Executor::CheckRunsOnCpu(const plan::Plan &plan) {
  // The CPU kernels compute in f32 or f64; a mixed-precision plan (bf16 or
  // f16 weights and activations) is the CUDA backend's.
  for (const Buffer &b : plan.buffers())
    if (b.dtype() == plan::BF16 || b.dtype() == plan::F16)
      return absl::FailedPreconditionError(absl::StrCat(
          "the plan computes in ", plan::DType_Name(b.dtype()),
          " (mixed precision; buffer '", b.name(),
          "'): the CPU backend runs F32 and F64 plans, and ",
          plan::DType_Name(b.dtype()),
          " needs the CUDA backend (compile with train.precision FP32 to "
          "run here)"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor>>
Executor::Create(plan::Plan plan, Communicator *comm) {
  if (absl::Status s = plan::ValidatePlan(plan); !s.ok())
    return s;
  if (absl::Status s = CheckCoordinates(plan, comm); !s.ok())
    return s;
  if (absl::Status s = CheckRunsOnCpu(plan); !s.ok())
    return s;
  std::unique_ptr<Executor> executor(new Executor(std::move(plan)));
  // The rank's stage, arena size, buffers' bytes and instructions' dtypes.
  executor->placeRank(comm);
  // One anonymous private mapping for the whole run. The kernel gives a
  // page, zeroed, when it is first touched: a buffer read before it is
  // written holds zeros, nothing is touched here, and TouchedArenaBytes
  // counts the pages the run used. No transparent huge pages: one touch
  // would make 2 MiB resident, and the count would be the kernel's
  // allocation grain rather than the run's use.
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  executor->mapped_ =
      std::max<size_t>((size_t(executor->arenaBytes_) + page - 1) / page, 1) *
      page;
  void *arena = mmap(nullptr, executor->mapped_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (arena == MAP_FAILED) {
    int err = errno;
    // Against the machine's memory: the plan's sizes (max_batch,
    // max_seq_len, a beam width compiled as the batch) are what to shrink.
    int64_t machine = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(page);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map the rank's arena of ", executor->arenaBytes_, " bytes (",
        common::FormatBytes(executor->arenaBytes_), "; this machine has ",
        common::FormatBytes(machine), "): ", std::strerror(err),
        ": compile the plan smaller (micro-batch, sequence length, max "
        "batch) or give the rank a larger machine"));
  }
  executor->arena_ = static_cast<uint8_t *>(arena);
#ifdef MADV_NOHUGEPAGE
  (void)madvise(arena, executor->mapped_, MADV_NOHUGEPAGE);
#endif
  return executor;
}

Executor::~Executor() {
  // Messages still leaving: finish them while the communicator is there
  // (and before the arena they may have been sent from goes).
  (void)WaitSends();
  if (arena_)
    munmap(arena_, mapped_);
}

int64_t Executor::TouchedArenaBytes() const {
  // The operating system's count of the arena's pages that are mapped in,
  // which is the pages the run has read or written: it does not look at the
  // plan's offsets, so a buffer planned but never touched, or bytes touched
  // outside any buffer, show up as a difference from ArenaBytes.
  if (arenaBytes_ == 0)
    return 0;
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(mapped_ / page);
  if (mincore(arena_, mapped_, resident.data()) != 0)
    return -1;
  int64_t touched = 0;
  for (size_t i = 0; i < resident.size(); ++i)
    if (resident[i] & 1)
      touched +=
          std::min<int64_t>(int64_t(page), arenaBytes_ - int64_t(i * page));
  return touched;
}

absl::StatusOr<absl::Span<uint8_t>> Executor::Bytes(int id) {
  if (id < 0 || id >= plan_.buffers_size())
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer ", id, " does not exist (the plan has ", plan_.buffers_size(),
        ")"));
  if (absl::Status s = checkOwned(id); !s.ok())
    return s;
  return absl::Span<uint8_t>(static_cast<uint8_t *>(address(id, 0)),
                             size_t(bytes_[id]));
}

absl::Status Executor::checkSlot(int id, int64_t slot) const {
  const Buffer &b = plan_.buffers(id);
  if (!isCopy(id, slot))
    return absl::OutOfRangeError(absl::StrCat(
        "slot ", slot, " is not a copy of buffer '", b.name(), "', which has ",
        b.slots() >= 2 ? absl::StrCat(b.slots(), " slots [0, ", b.slots(), ")")
                       : std::string("one copy for every slot >= 0")));
  return absl::OkStatus();
}

absl::Status Executor::checkCopy(int id, int64_t slot) const {
  if (absl::Status s = checkOwned(id); !s.ok())
    return s;
  return checkSlot(id, slot);
}

absl::Status Executor::Write(int id, absl::Span<const double> values,
                             int64_t slot) {
  if (id < 0 || id >= plan_.buffers_size())
    return absl::OutOfRangeError(absl::StrCat("no buffer ", id));
  const Buffer &b = plan_.buffers(id);
  if (int64_t(values.size()) != numel(b))
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer '", b.name(), "' holds ", numel(b), " elements, not ",
        values.size()));
  if (absl::Status s = checkCopy(id, slot); !s.ok())
    return s;
  void *p = address(id, slot);
  switch (b.dtype()) {
  case plan::F32:
    std::copy(values.begin(), values.end(), static_cast<float *>(p));
    return absl::OkStatus();
  case plan::F64:
    std::copy(values.begin(), values.end(), static_cast<double *>(p));
    return absl::OkStatus();
  case plan::I32:
    std::copy(values.begin(), values.end(), static_cast<int32_t *>(p));
    return absl::OkStatus();
  case plan::I64:
    std::copy(values.begin(), values.end(), static_cast<int64_t *>(p));
    return absl::OkStatus();
  default:
    return absl::UnimplementedError(absl::StrCat(
        "buffer '", b.name(), "': ", plan::DType_Name(b.dtype()),
        " needs the CUDA backend"));
  }
}

absl::StatusOr<std::vector<double>> Executor::Read(int id,
                                                   int64_t slot) const {
  if (id < 0 || id >= plan_.buffers_size())
    return absl::OutOfRangeError(absl::StrCat("no buffer ", id));
  const Buffer &b = plan_.buffers(id);
  if (absl::Status s = checkCopy(id, slot); !s.ok())
    return s;
  std::vector<double> out(numel(b));
  const void *p = address(id, slot);
  switch (b.dtype()) {
  case plan::F32:
    std::copy_n(static_cast<const float *>(p), out.size(), out.begin());
    break;
  case plan::F64:
    std::copy_n(static_cast<const double *>(p), out.size(), out.begin());
    break;
  case plan::I32:
    std::copy_n(static_cast<const int32_t *>(p), out.size(), out.begin());
    break;
  case plan::I64:
    std::copy_n(static_cast<const int64_t *>(p), out.size(), out.begin());
    break;
  default:
    return absl::UnimplementedError(absl::StrCat(
        "buffer '", b.name(), "': ", plan::DType_Name(b.dtype()),
        " needs the CUDA backend"));
  }
  return out;
}

absl::Status Executor::Run(absl::string_view name, const StepContext &context,
                          int64_t slot) {
  absl::StatusOr<int> found = findFunction(name);
  if (!found.ok())
    return found.status();
  const int index = *found;
  const plan::Function *fn = &plan_.functions(index);
  // Every buffer it names is in this rank's arena and has the slot, before
  // anything runs.
  if (absl::Status s = checkFunctionBuffers(index, slot); !s.ok())
    return s;
  // Kernels are timed only for a profile or a trace.
  const bool timed = this->timed();
  for (int i = 0; i < fn->body_size(); ++i) {
    const Instruction &inst = fn->body(i);
    std::chrono::steady_clock::time_point start;
    if (timed)
      start = std::chrono::steady_clock::now();
    size_t started = inFlight_.size();
    currentPhase_ = trace_ ? tracePhase(index, i) : TracePhase::kStep;
    absl::Status s =
        runInstruction(inst, instructionDType(index, i), context, slot);
    bool async = inFlight_.size() > started;
    if (timed) {
      auto end = std::chrono::steady_clock::now();
      if (profiling())
        addProfile(index, i,
                   std::chrono::duration<double>(end - start).count());
      // A collective in flight is traced when it completes.
      if (trace_ && !async)
        trace_->AddKernel(inst, tracePhase(index, i), start, end);
    }
    if (s.ok() && !inFlight_.empty())
      s = pollInFlight();
    if (!s.ok())
      return inFunction(s, name, &inst);
  }
  // A function leaves nothing in flight (plans WAIT before the end).
  if (absl::Status s = finishInFlight(nullptr); !s.ok())
    return inFunction(s, name);
  return absl::OkStatus();
}

void Executor::finishedInFlight(const InFlight &f) {
  if (trace_)
    trace_->AddKernel(*f.inst, f.phase, f.start, f.end);
}

} // namespace braid::exec
