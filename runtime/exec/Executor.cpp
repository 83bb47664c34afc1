//===- Executor.cpp - Runs the functions of a plan on the CPU -------------===//

#include "runtime/exec/Executor.h"

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/cpu/VocabParallel.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Work.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace braid::exec {
namespace {

using plan::Buffer;
using plan::Instruction;

// The loader's accessors, under the short names the kernels' cases use.
int64_t (&numel)(const Buffer &) = plan::NumElements;
int64_t (&intAttr)(const Instruction &, const std::string &) = plan::IntAttr;
double (&floatAttr)(const Instruction &, const std::string &) = plan::FloatAttr;
int64_t last(const Buffer &b) { return b.shape(b.shape_size() - 1); }
int64_t dim(const Buffer &b, int i) { return b.shape(i); }

int64_t (&groupSize)(const plan::Plan &, const Instruction &) =
    plan::GroupSize;

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
  // The slices of rank_axis kernels are offsets by the rank's coordinates,
  // which the loader's checks cover only inside the mesh.
  if (comm)
    if (absl::Status s =
            plan::CheckMeshCoordinates(plan.mesh(), comm->Coordinates());
        !s.ok())
      return s;
  if (absl::Status s = CheckRunsOnCpu(plan); !s.ok())
    return s;
  std::unique_ptr<Executor> executor(new Executor(std::move(plan)));
  executor->comm_ = comm;
  for (const Buffer &b : executor->plan_.buffers())
    executor->bytes_.push_back(numel(b) * plan::DTypeBytes(b.dtype()));
  // The rank's arena: its stage's (the loader checked that the stage's
  // buffers lie inside it), or the plan's.
  const plan::Plan &p = executor->plan_;
  executor->arenaBytes_ = p.arena_bytes();
  if (p.pipeline().stages_size() > 0) {
    if (comm)
      for (int i = 0; i < p.mesh().axes_size(); ++i)
        if (p.mesh().axes(i) == "pp")
          executor->stage_ = comm->Coordinates()[i];
    executor->arenaBytes_ =
        p.pipeline().stages(int(executor->stage_)).arena_bytes();
  }
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
  if (arena == MAP_FAILED)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map the rank's arena of ", executor->arenaBytes_,
                     " bytes: ", std::strerror(errno)));
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

absl::Status Executor::checkOwned(int id) const {
  return plan::CheckBufferOnStage(plan_, id, stage_);
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
  if (slot < 0 || (b.slots() >= 2 && slot >= b.slots()))
    return absl::OutOfRangeError(absl::StrCat(
        "slot ", slot, " is not a copy of buffer '", b.name(), "', which has ",
        b.slots() >= 2 ? absl::StrCat(b.slots(), " slots [0, ", b.slots(), ")")
                       : std::string("one copy for every slot >= 0")));
  return absl::OkStatus();
}

absl::Status Executor::WaitSends() {
  if (!comm_)
    return absl::OkStatus();
  return comm_->WaitSends();
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
  if (absl::Status s = checkOwned(id); !s.ok())
    return s;
  if (absl::Status s = checkSlot(id, slot); !s.ok())
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
  if (absl::Status s = checkOwned(id); !s.ok())
    return s;
  if (absl::Status s = checkSlot(id, slot); !s.ok())
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
  int index = -1;
  for (int i = 0; i < plan_.functions_size(); ++i)
    if (plan_.functions(i).name() == name)
      index = i;
  if (index < 0)
    return absl::NotFoundError(absl::StrCat("the plan has no function '", name, "'"));
  const plan::Function *fn = &plan_.functions(index);
  // Every buffer it names is in this rank's arena and has the slot, before
  // anything runs.
  for (const Instruction &inst : fn->body())
    for (const auto *ids : {&inst.inputs(), &inst.outputs()})
      for (int32_t id : *ids) {
        absl::Status s = checkOwned(id);
        if (s.ok())
          s = checkSlot(id, slot);
        if (!s.ok())
          return absl::Status(s.code(), absl::StrCat("function '", name,
                                                     "': ", s.message()));
      }
  auto execute = [&](const Instruction &inst) -> absl::Status {
    if (inst.kernel() == plan::SEND || inst.kernel() == plan::RECV)
      return runPointToPoint(inst, slot);
    if (inst.kernel() == plan::WAIT)
      return finishInFlight(&inst);
    // The float dtype of the instruction: its first float operand's.
    plan::DType dtype = plan::DTYPE_UNSPECIFIED;
    for (int32_t id : inst.outputs())
      if (plan_.buffers(id).dtype() != plan::I32)
        dtype = plan_.buffers(id).dtype();
    if (dtype == plan::F32)
      return runInstruction<float>(inst, context, slot);
    if (dtype == plan::F64)
      return runInstruction<double>(inst, context, slot);
    return absl::UnimplementedError(absl::StrCat(
        plan::Kernel_Name(inst.kernel()), " on ", plan::DType_Name(dtype),
        " needs the CUDA backend"));
  };
  // Kernels are timed only for a profile or a trace.
  bool timed = !profile_.empty() || trace_;
  for (int i = 0; i < fn->body_size(); ++i) {
    const Instruction &inst = fn->body(i);
    std::chrono::steady_clock::time_point start;
    if (timed)
      start = std::chrono::steady_clock::now();
    size_t started = inFlight_.size();
    currentPhase_ = trace_ ? tracePhases_[index][i] : TracePhase::kStep;
    absl::Status s = execute(inst);
    bool async = inFlight_.size() > started;
    if (timed) {
      auto end = std::chrono::steady_clock::now();
      if (!profile_.empty()) {
        double seconds = std::chrono::duration<double>(end - start).count();
        profile_[inst.kernel()] += seconds;
        KernelProfile &k = kernelProfiles_[inst.kernel()];
        k.seconds += seconds;
        k.calls += 1;
        k.flops += work_[index][i].first;
        k.bytes += work_[index][i].second;
      }
      // A collective in flight is traced when it completes.
      if (trace_ && !async)
        trace_->AddKernel(inst, tracePhases_[index][i], start, end);
    }
    if (s.ok() && !inFlight_.empty())
      s = pollInFlight();
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("function '", name, "', ",
                                                 inst.provenance(), ": ",
                                                 s.message()));
  }
  // A function leaves nothing in flight (plans WAIT before the end).
  if (absl::Status s = finishInFlight(nullptr); !s.ok())
    return absl::Status(s.code(), absl::StrCat("function '", name,
                                               "': ", s.message()));
  return absl::OkStatus();
}

void Executor::EnableProfile() {
  profile_.assign(plan::Kernel_ARRAYSIZE, 0.0);
  kernelProfiles_.assign(plan::Kernel_ARRAYSIZE, KernelProfile());
  // The work of an instruction depends only on the plan, so it is computed
  // once here rather than on every call of a kernel that takes microseconds.
  work_.clear();
  for (const plan::Function &fn : plan_.functions()) {
    std::vector<std::pair<double, double>> &work = work_.emplace_back();
    for (const Instruction &inst : fn.body()) {
      plan::Work w = plan::InstructionWork(plan_, inst);
      work.push_back({w.flops, w.bytes});
    }
  }
}

void Executor::ResetProfile() {
  if (profile_.empty())
    return; // not profiling: nothing to reset, and no work to count with
  profile_.assign(plan::Kernel_ARRAYSIZE, 0.0);
  kernelProfiles_.assign(plan::Kernel_ARRAYSIZE, KernelProfile());
}

absl::Status Executor::pollInFlight() {
  for (InFlight &f : inFlight_) {
    if (f.done)
      continue;
    absl::StatusOr<bool> done = comm_->Test(f.handle);
    if (!done.ok())
      return done.status();
    if (*done) {
      f.done = true;
      f.end = std::chrono::steady_clock::now();
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::finishInFlight(const Instruction *wait) {
  for (auto it = inFlight_.begin(); it != inFlight_.end();) {
    bool named = !wait;
    if (wait)
      for (int32_t id : wait->inputs())
        named |= std::find(it->buffers.begin(), it->buffers.end(), id) != it->buffers.end();
    if (!named) {
      ++it;
      continue;
    }
    if (!it->done) {
      if (absl::Status s = comm_->Wait(it->handle); !s.ok())
        return s;
      it->end = std::chrono::steady_clock::now();
    }
    if (trace_)
      trace_->AddKernel(*it->inst, it->phase, it->start, it->end);
    it = inFlight_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status Executor::SetTrace(Trace *trace) {
  trace_ = trace;
  tracePhases_.clear();
  if (trace)
    tracePhases_ = KernelPhases(plan_);
  return absl::OkStatus();
}

absl::Status Executor::runPointToPoint(const Instruction &inst, int64_t slot) {
  bool send = inst.kernel() == plan::SEND;
  int id = send ? inst.inputs(0) : inst.outputs(0);
  const Buffer &b = plan_.buffers(id);
  int64_t peer = intAttr(inst, "peer");
  if (!comm_)
    return absl::FailedPreconditionError(absl::StrCat(
        send ? "a send to" : "a receive from", " the ",
        peer > 0 ? "next" : "previous", " rank along '", inst.rank_axis(),
        "' needs the job's other ranks (run the plan under mpirun)"));
  void *p = address(id, slot);
  if (!send)
    return comm_->Recv(inst.rank_axis(), peer, p, numel(b), b.dtype());
  // The communicator copies the message: the buffer may be written at once.
  return comm_->Send(inst.rank_axis(), peer, p, numel(b), b.dtype());
}

int64_t Executor::groupPlace(const Instruction &inst) const {
  return plan::GroupPlace(plan_, inst, comm_->Coordinates());
}

int64_t Executor::rankCoordinate(const Instruction &inst) const {
  if (inst.rank_axis().empty() || !comm_)
    return 0;
  return plan::AxisCoordinate(plan_.mesh(), comm_->Coordinates(),
                              inst.rank_axis());
}

template <typename T>
absl::Status Executor::runInstruction(const Instruction &inst,
                                      const StepContext &context,
                                      int64_t slot) {
  auto in = [&](int i) -> const Buffer & { return plan_.buffers(inst.inputs(i)); };
  auto out = [&](int i) -> const Buffer & { return plan_.buffers(inst.outputs(i)); };
  auto x = [&](int i) {
    return static_cast<const T *>(address(inst.inputs(i), slot));
  };
  auto y = [&](int i) { return static_cast<T *>(address(inst.outputs(i), slot)); };
  auto ids = [&](int i) {
    return static_cast<const int32_t *>(address(inst.inputs(i), slot));
  };
  // Token ids index tables: check them against the table before use.
  auto checkIds = [&](int i, int64_t vocab, bool allowIgnore,
                      int64_t ignore) -> absl::Status {
    const int32_t *p = ids(i);
    for (int64_t k = 0, n = numel(in(i)); k < n; ++k)
      if ((p[k] < 0 || p[k] >= vocab) && !(allowIgnore && p[k] == ignore))
        return absl::OutOfRangeError(absl::StrCat(
            "token id ", p[k], " at position ", k, " of '", in(i).name(),
            "' is outside the vocabulary of ", vocab));
    return absl::OkStatus();
  };
  // A slice of the vocabulary (rank_axis and vocab_start_stride, validated by
  // the loader): the first global id this rank holds, and the global
  // vocabulary of `local` ids per rank along the axis.
  auto sliceStart = [&](const char *strideAttr) -> int64_t {
    auto it = inst.int_attrs().find(strideAttr);
    return it == inst.int_attrs().end() ? 0 : rankCoordinate(inst) * it->second;
  };
  auto vocabStart = [&]() { return sliceStart("vocab_start_stride"); };
  auto globalVocab = [&](int64_t local) {
    return local * plan::AxisSize(plan_.mesh(), inst.rank_axis());
  };
  std::vector<T> scratch;
  switch (inst.kernel()) {
  case plan::ZERO:
    std::memset(address(inst.outputs(0), slot), 0,
                numel(out(0)) * plan::DTypeBytes(out(0).dtype()));
    return absl::OkStatus();
  case plan::ALL_REDUCE: {
    int64_t ranks = groupSize(plan_, inst);
    if (!comm_ && ranks > 1)
      return absl::FailedPreconditionError(absl::StrCat(
          "an all-reduce over ", ranks, " ranks needs the job's other ranks "
          "(run the plan under mpirun)"));
    std::vector<std::string> group(inst.group().begin(), inst.group().end());
    bool async =
        inst.int_attrs().count("async") && inst.int_attrs().at("async") == 1;
    for (int i = 0; i < inst.inputs_size(); ++i) {
      int64_t n = numel(out(i));
      if (inst.inputs(i) != inst.outputs(i))
        std::memcpy(y(i), x(i), n * sizeof(T));
      if (ranks > 1 && async) {
        // In place, started here and finished by a WAIT naming the buffer
        // (the gradients' sums of the step's last micro-batch, overlapping
        // the rest of its backward).
        absl::StatusOr<int64_t> handle =
            comm_->StartAllReduce(group, y(i), n, out(i).dtype());
        if (!handle.ok())
          return handle.status();
        inFlight_.push_back({*handle,
                             {inst.outputs(i)},
                             &inst,
                             std::chrono::steady_clock::now(),
                             {},
                             currentPhase_,
                             false});
        continue;
      }
      if (ranks > 1)
        if (absl::Status s = comm_->AllReduce(
                group, y(i), n, out(i).dtype(),
                inst.int_attrs().count("max") && inst.int_attrs().at("max")
                    ? Reduction::kMax
                    : Reduction::kSum);
            !s.ok())
          return s;
    }
    return absl::OkStatus();
  }
  case plan::ALL_GATHER:
  case plan::REDUCE_SCATTER: {
    // Along `dim`, viewed as [outer, n, inner]: each rank holds the slice of
    // `chunk` = n x inner elements per outer row (x gathered, y scattered),
    // the full tensor G blocks of it per row. The communicator's buffers are
    // the ranks' blocks one after the other, so with outer > 1 they are laid
    // out through `scratch`.
    bool gather = inst.kernel() == plan::ALL_GATHER;
    int64_t ranks = groupSize(plan_, inst);
    const Buffer &slice = gather ? in(0) : out(0);
    int64_t along = intAttr(inst, "dim"), outer = 1, chunk = 1;
    for (int i = 0; i < slice.shape_size(); ++i)
      (i < along ? outer : chunk) *= dim(slice, i);
    int64_t count = outer * chunk;
    if (ranks == 1) {
      std::memmove(y(0), x(0), count * sizeof(T));
      return absl::OkStatus();
    }
    if (!comm_)
      return absl::FailedPreconditionError(absl::StrCat(
          gather ? "an all-gather" : "a reduce-scatter", " over ", ranks,
          " ranks needs the job's other ranks (run the plan under mpirun)"));
    std::vector<std::string> group(inst.group().begin(), inst.group().end());
    bool async = inst.int_attrs().count("async") && inst.int_attrs().at("async") == 1;
    if (gather && inst.inputs(0) == inst.outputs(0)) {
      // In place (ZeRO's parameters): this rank's block of the flat buffer
      // is already there, at its place in the group. With async it starts
      // here and a WAIT naming the buffer finishes it (ZeRO-3's prefetch).
      int64_t block = numel(out(0)) / ranks;
      T *own = y(0) + groupPlace(inst) * block;
      if (!async)
        return comm_->AllGather(group, own, y(0), block, out(0).dtype());
      absl::StatusOr<int64_t> handle =
          comm_->StartAllGather(group, own, y(0), block, out(0).dtype());
      if (!handle.ok())
        return handle.status();
      inFlight_.push_back({*handle, {inst.outputs(0)}, &inst,
                           std::chrono::steady_clock::now(), {}, currentPhase_,
                           false});
      return absl::OkStatus();
    }
    // Buffers of a plan may share arena bytes; a collective's in and out
    // must not.
    const char *xb = static_cast<const char *>(address(inst.inputs(0), slot));
    const char *yb = static_cast<const char *>(address(inst.outputs(0), slot));
    int64_t xBytes = numel(in(0)) * int64_t(sizeof(T));
    int64_t yBytes = numel(out(0)) * int64_t(sizeof(T));
    bool overlap = xBytes && yBytes && xb < yb + yBytes && yb < xb + xBytes;
    bool direct = outer == 1 && !overlap;
    if (gather) {
      if (direct)
        return comm_->AllGather(group, x(0), y(0), count, out(0).dtype());
      // scratch [rank][outer][chunk] -> y [outer][rank][chunk].
      scratch.resize(ranks * count);
      if (absl::Status s = comm_->AllGather(group, x(0), scratch.data(), count,
                                            out(0).dtype());
          !s.ok())
        return s;
      T *dst = y(0);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < ranks; ++k)
          std::copy_n(scratch.data() + (k * outer + o) * chunk, chunk,
                      dst + (o * ranks + k) * chunk);
      return absl::OkStatus();
    }
    if (direct && async) {
      // Started here, finished by a WAIT naming x or y (ZeRO-2's buckets,
      // overlapping the rest of backward).
      absl::StatusOr<int64_t> handle = comm_->StartReduceScatter(
          group, x(0), y(0), count, out(0).dtype());
      if (!handle.ok())
        return handle.status();
      inFlight_.push_back({*handle,
                           {inst.inputs(0), inst.outputs(0)},
                           &inst,
                           std::chrono::steady_clock::now(),
                           {},
                           currentPhase_,
                           false});
      return absl::OkStatus();
    }
    if (direct)
      return comm_->ReduceScatter(group, x(0), y(0), count, out(0).dtype());
    // x [outer][rank][chunk] -> scratch [rank][outer][chunk], the blocks
    // ordered by the rank they go to.
    scratch.resize(ranks * count);
    const T *src = x(0);
    for (int64_t k = 0; k < ranks; ++k)
      for (int64_t o = 0; o < outer; ++o)
        std::copy_n(src + (o * ranks + k) * chunk, chunk,
                    scratch.data() + (k * outer + o) * chunk);
    return comm_->ReduceScatter(group, scratch.data(), y(0), count,
                                out(0).dtype());
  }
  case plan::EMBEDDING:
  case plan::EMBEDDING_GRAD: {
    // With a rank_axis the table is this rank's rows of the vocabulary; the
    // ids are global.
    bool forward = inst.kernel() == plan::EMBEDDING;
    const Buffer &table = forward ? in(0) : out(0);
    int64_t local = dim(table, 0), hidden = last(table), rows = numel(in(1));
    if (absl::Status s = checkIds(1, globalVocab(local), false, 0); !s.ok())
      return s;
    if (inst.rank_axis().empty()) {
      if (forward)
        cpu::embeddingForward(x(0), ids(1), rows, hidden, y(0));
      else
        cpu::embeddingBackward(x(0), ids(1), rows, hidden, y(0));
    } else if (forward) {
      cpu::embeddingForwardRange(x(0), ids(1), rows, hidden, vocabStart(),
                                 local, y(0));
    } else {
      cpu::embeddingBackwardRange(x(0), ids(1), rows, hidden, vocabStart(),
                                  local, y(0));
    }
    return absl::OkStatus();
  }
  case plan::POSITION_EMBEDDING:
  case plan::POSITION_EMBEDDING_GRAD: {
    // out or dy [batch, s, hidden] are positions [start, start + s) of the
    // table: start is 0, or with a rank_axis (sequence parallel) the rank's
    // coordinate x seq_start_stride (validated by the loader).
    const Buffer &rows =
        inst.kernel() == plan::POSITION_EMBEDDING ? out(0) : in(0);
    int64_t hidden = last(rows);
    int64_t start =
        inst.rank_axis().empty() ? 0 : sliceStart("seq_start_stride");
    if (inst.kernel() == plan::POSITION_EMBEDDING)
      cpu::positionEmbeddingForward(x(0) + start * hidden, dim(rows, 0),
                                    dim(rows, 1), hidden, y(0));
    else
      cpu::positionEmbeddingBackward(x(0), dim(rows, 0), dim(rows, 1), hidden,
                                     y(0) + start * hidden);
    return absl::OkStatus();
  }
  case plan::LINEAR: {
    bool t = intAttr(inst, "transpose_w");
    int64_t inDim = t ? dim(in(1), 1) : dim(in(1), 0);
    int64_t outDim = t ? dim(in(1), 0) : dim(in(1), 1);
    auto scale = inst.float_attrs().find("bias_scale");
    cpu::linearForward(x(0), x(1), inst.inputs_size() == 3 ? x(2) : nullptr,
                       {numel(in(0)) / std::max<int64_t>(inDim, 1), inDim,
                        outDim, t,
                        scale == inst.float_attrs().end() ? 1.0 : scale->second},
                       y(0));
    return absl::OkStatus();
  }
  case plan::LINEAR_GRAD_INPUT: {
    bool t = intAttr(inst, "transpose_w");
    int64_t outDim = last(in(0)), inDim = last(out(0));
    cpu::linearBackward<T>(nullptr, x(1), x(0),
                           {numel(in(0)) / std::max<int64_t>(outDim, 1), inDim,
                            outDim, t},
                           y(0), nullptr, nullptr);
    return absl::OkStatus();
  }
  case plan::LINEAR_GRAD_WEIGHT: {
    bool t = intAttr(inst, "transpose_w");
    int64_t inDim = last(in(0)), outDim = last(in(1));
    cpu::linearBackward<T>(x(0), nullptr, x(1),
                           {numel(in(0)) / std::max<int64_t>(inDim, 1), inDim,
                            outDim, t},
                           nullptr, y(0), nullptr);
    return absl::OkStatus();
  }
  case plan::BIAS_GRAD: {
    int64_t outDim = last(in(0));
    cpu::linearBackward<T>(nullptr, nullptr, x(0),
                           {numel(in(0)) / std::max<int64_t>(outDim, 1), 0,
                            outDim, false},
                           nullptr, nullptr, y(0));
    return absl::OkStatus();
  }
  case plan::RMS_NORM:
  case plan::RMS_NORM_GRAD: {
    int64_t d = last(in(0)), rows = numel(in(0)) / std::max<int64_t>(d, 1);
    double eps = floatAttr(inst, "eps");
    if (inst.kernel() == plan::RMS_NORM) {
      scratch.resize(rows);
      cpu::rmsNormForward(x(0), x(1), rows, d, eps, y(0), scratch.data());
      return absl::OkStatus();
    }
    // The statistics are recomputed (docs/Rationale-Training.md).
    scratch.resize(rows + numel(in(0)));
    cpu::rmsNormForward(x(0), x(1), rows, d, eps, scratch.data() + rows,
                        scratch.data());
    cpu::rmsNormBackward(x(0), x(1), scratch.data(), x(2), rows, d, y(0), y(1));
    return absl::OkStatus();
  }
  case plan::LAYER_NORM:
  case plan::LAYER_NORM_GRAD: {
    int64_t d = last(in(0)), rows = numel(in(0)) / std::max<int64_t>(d, 1);
    double eps = floatAttr(inst, "eps");
    scratch.assign(2 * rows + numel(in(0)) + d, T(0));
    T *mean = scratch.data(), *rstd = mean + rows, *tmp = rstd + rows,
      *zeros = tmp + numel(in(0));
    if (inst.kernel() == plan::LAYER_NORM) {
      cpu::layerNormForward(x(0), x(1), x(2), rows, d, eps, y(0), mean, rstd);
      return absl::OkStatus();
    }
    cpu::layerNormForward(x(0), x(1), zeros, rows, d, eps, tmp, mean, rstd);
    cpu::layerNormBackward(x(0), x(1), mean, rstd, x(2), rows, d, y(0), y(1),
                           y(2));
    return absl::OkStatus();
  }
  case plan::ROPE:
  case plan::ROPE_GRAD: {
    int64_t hd = intAttr(inst, "head_dim");
    auto f = inst.kernel() == plan::ROPE ? cpu::ropeForward<T>
                                         : cpu::ropeBackward<T>;
    f(x(0), dim(in(0), 0), dim(in(0), 1), dim(in(0), 2) / hd, hd,
      floatAttr(inst, "theta"), y(0));
    return absl::OkStatus();
  }
  case plan::ATTENTION:
  case plan::ATTENTION_GRAD: {
    int64_t heads = intAttr(inst, "heads");
    cpu::AttentionShape s{dim(in(0), 0),          dim(in(0), 1),
                          heads,                  intAttr(inst, "kv_heads"),
                          dim(in(0), 2) / heads,  floatAttr(inst, "scale"),
                          bool(intAttr(inst, "causal")),
                          bool(intAttr(inst, "alibi"))};
    if (inst.int_attrs().count("global_heads")) {
      // This rank's slice of the heads (validated by the loader).
      int64_t c = rankCoordinate(inst);
      s.globalHeads = intAttr(inst, "global_heads");
      s.globalKvHeads = intAttr(inst, "global_kv_heads");
      s.headOffset = c * intAttr(inst, "head_offset_stride");
      s.kvHeadOffset = c * intAttr(inst, "kv_head_offset_stride");
    }
    if (dim(in(1), 1) != s.seq)
      return absl::UnimplementedError(
          "attention with more keys than queries is not implemented on CPU");
    // The log-sum-exp: the plan's buffer when it keeps one (ATTENTION's
    // second output, ATTENTION_GRAD's sixth input); otherwise backward
    // computes the forward again to get it.
    int64_t lseSize = s.batch * s.heads * s.seq;
    if (inst.kernel() == plan::ATTENTION) {
      T *lse = inst.outputs_size() == 2 ? y(1) : nullptr;
      if (!lse) {
        scratch.resize(lseSize);
        lse = scratch.data();
      }
      cpu::attentionForward(x(0), x(1), x(2), s, y(0), lse);
      return absl::OkStatus();
    }
    const T *lse = inst.inputs_size() == 6 ? x(5) : nullptr;
    if (!lse) {
      scratch.resize(lseSize + numel(in(0)));
      cpu::attentionForward(x(0), x(1), x(2), s, scratch.data() + lseSize,
                            scratch.data());
      lse = scratch.data();
    }
    cpu::attentionBackward(x(0), x(1), x(2), x(3), lse, x(4), s, y(0), y(1),
                           y(2));
    return absl::OkStatus();
  }
  case plan::QKV_SPLIT:
  case plan::QKV_CONCAT: {
    const Buffer &fused = inst.kernel() == plan::QKV_SPLIT ? in(0) : out(0);
    cpu::QkvShape s{numel(fused) / std::max<int64_t>(last(fused), 1),
                    intAttr(inst, "heads"), intAttr(inst, "kv_heads"),
                    intAttr(inst, "head_dim"), bool(intAttr(inst, "per_head"))};
    if (inst.kernel() == plan::QKV_SPLIT)
      cpu::qkvSplitForward(x(0), s, y(0), y(1), y(2));
    else
      cpu::qkvSplitBackward(x(0), x(1), x(2), s, y(0));
    return absl::OkStatus();
  }
  case plan::SWIGLU:
    if (inst.inputs_size() == 1) { // packed [gate | up]
      int64_t f = last(out(0));
      cpu::swigluPackedForward(x(0), numel(out(0)) / std::max<int64_t>(f, 1),
                               f, y(0));
    } else {
      cpu::swigluForward(x(0), x(1), numel(in(0)), y(0));
    }
    return absl::OkStatus();
  case plan::SWIGLU_GRAD:
    if (inst.inputs_size() == 2) { // packed [gate | up], dy
      int64_t f = last(in(1));
      cpu::swigluPackedBackward(x(0), x(1),
                                numel(in(1)) / std::max<int64_t>(f, 1), f,
                                y(0));
    } else {
      cpu::swigluBackward(x(0), x(1), x(2), numel(in(0)), y(0), y(1));
    }
    return absl::OkStatus();
  case plan::GELU:
    cpu::geluForward(x(0), numel(in(0)), bool(intAttr(inst, "tanh")), y(0));
    return absl::OkStatus();
  case plan::GELU_GRAD:
    cpu::geluBackward(x(0), x(1), numel(in(0)), bool(intAttr(inst, "tanh")),
                      y(0));
    return absl::OkStatus();
  case plan::ADD: {
    const T *a = x(0), *b = x(1);
    T *c = y(0);
    for (int64_t i = 0, n = numel(in(0)); i < n; ++i)
      c[i] = a[i] + b[i];
    return absl::OkStatus();
  }
  case plan::DROPOUT: {
    // Rows are samples; the micro-batch's rows sit at its samples' place in
    // the global batch. With a rank_axis (sequence parallel) the rank holds
    // a slice of each sample's elements, the axis' ranks the whole sample:
    // its elements start at col_offset_stride x the rank's coordinate.
    int64_t n = numel(in(0)), samples = in(0).shape_size() ? dim(in(0), 0) : 1;
    int64_t perSample = n / std::max<int64_t>(samples, 1);
    cpu::GlobalIndexing at{samples, perSample, perSample, context.sampleOffset,
                           0};
    if (!inst.rank_axis().empty()) {
      at.globalCols =
          perSample * plan::AxisSize(plan_.mesh(), inst.rank_axis());
      at.colOffset = sliceStart("col_offset_stride");
    }
    cpu::dropoutForward(x(0), at, floatAttr(inst, "rate"),
                        {context.seed, context.step,
                         uint32_t(intAttr(inst, "rng_id"))},
                        y(0));
    return absl::OkStatus();
  }
  case plan::CROSS_ENTROPY_MAX: {
    int64_t vocab = last(in(0)), rows = numel(in(0)) / std::max<int64_t>(vocab, 1);
    cpu::crossEntropyRowMax(x(0), rows, vocab, y(0));
    return absl::OkStatus();
  }
  case plan::CROSS_ENTROPY_PARTIAL: {
    int64_t vocab = last(in(0)), rows = numel(in(0)) / std::max<int64_t>(vocab, 1);
    int64_t ignore = intAttr(inst, "ignore_index");
    if (absl::Status s = checkIds(1, globalVocab(vocab), true, ignore); !s.ok())
      return s;
    cpu::crossEntropyPartial(x(0), ids(1), x(2), rows, vocab, vocabStart(),
                             ignore, y(0));
    return absl::OkStatus();
  }
  case plan::CROSS_ENTROPY_FINISH: {
    int64_t counted = 0;
    *y(0) = cpu::crossEntropyFinish(x(0), x(1), ids(2), numel(in(1)),
                                    intAttr(inst, "ignore_index"), y(1),
                                    &counted);
    return absl::OkStatus();
  }
  case plan::CROSS_ENTROPY:
  case plan::CROSS_ENTROPY_GRAD: {
    int64_t vocab = last(in(0)), rows = numel(in(0)) / std::max<int64_t>(vocab, 1);
    int64_t ignore = intAttr(inst, "ignore_index");
    if (inst.inputs_size() == 4) {
      // The gradient from a kept log-sum-exp: the forward's own, or for a
      // vocabulary slice the global one of CROSS_ENTROPY_FINISH; the mean
      // is over the rows that count.
      if (absl::Status s = checkIds(1, globalVocab(vocab), true, ignore);
          !s.ok())
        return s;
      const int32_t *targets = ids(1);
      int64_t counted = 0;
      for (int64_t r = 0; r < rows; ++r)
        counted += targets[r] != ignore;
      cpu::crossEntropyBackwardRange(x(0), targets, x(3), *x(2), rows, vocab,
                                     vocabStart(), ignore, counted, y(0));
      return absl::OkStatus();
    }
    if (absl::Status s = checkIds(1, vocab, true, ignore); !s.ok())
      return s;
    // The rows' log-sum-exp: into the plan's buffer when it keeps one.
    T *lse = inst.outputs_size() == 2 ? y(1) : nullptr;
    if (!lse) {
      scratch.resize(rows);
      lse = scratch.data();
    }
    int64_t counted = 0;
    T loss = cpu::crossEntropyForward(x(0), ids(1), rows, vocab, ignore, lse,
                                      &counted);
    if (inst.kernel() == plan::CROSS_ENTROPY) {
      *y(0) = loss;
      return absl::OkStatus();
    }
    cpu::crossEntropyBackward(x(0), ids(1), lse, *x(2), rows, vocab, ignore,
                              counted, y(0));
    return absl::OkStatus();
  }
  case plan::GRAD_NORM: {
    std::vector<cpu::GradView<T>> grads;
    for (int i = 0; i < inst.inputs_size(); ++i)
      grads.push_back({x(i), numel(in(i))});
    absl::StatusOr<double> norm;
    if (inst.group_size() == 0) {
      norm = cpu::globalGradNorm<T>(grads);
    } else {
      // Over the group's ranks: the first split_inputs gradients are this
      // rank's slices, the others replicated on every rank of the group, so
      // each rank adds its slices' squares and its share of the replicated
      // ones, and the sum of the ranks' values is the squared norm. A NaN or
      // infinity anywhere makes the sum, hence the norm, non-finite.
      int64_t ranks = groupSize(plan_, inst);
      if (!comm_ && ranks > 1)
        return absl::FailedPreconditionError(absl::StrCat(
            "a gradient norm over ", ranks, " ranks needs the job's other "
            "ranks (run the plan under mpirun)"));
      absl::Span<const cpu::GradView<T>> all(grads);
      int64_t split = intAttr(inst, "split_inputs");
      absl::StatusOr<double> splitSum =
          cpu::gradSumOfSquares<T>(all.subspan(0, split));
      if (!splitSum.ok())
        return splitSum.status();
      absl::StatusOr<double> replicatedSum =
          cpu::gradSumOfSquares<T>(all.subspan(split));
      if (!replicatedSum.ok())
        return replicatedSum.status();
      // Each replicated gradient is on `copies` ranks of the group: the
      // group's size, or fewer when the group spans pipeline stages.
      auto copies = inst.int_attrs().find("replicated_copies");
      double sum = *splitSum +
                   *replicatedSum / double(copies == inst.int_attrs().end()
                                               ? ranks
                                               : copies->second);
      if (ranks > 1) {
        std::vector<std::string> group(inst.group().begin(), inst.group().end());
        if (absl::Status s = comm_->AllReduce(group, &sum, 1, plan::F64,
                                              Reduction::kSum);
            !s.ok())
          return s;
      }
      norm = std::sqrt(sum);
    }
    if (!norm.ok())
      return norm.status();
    absl::StatusOr<cpu::GradClip> clip = cpu::computeGradClip(
        *norm, floatAttr(inst, "max_norm"), 1.0 / lossScale_);
    if (!clip.ok())
      return clip.status();
    *y(0) = T(clip->norm);
    *y(1) = T(clip->scale);
    return absl::OkStatus();
  }
  case plan::COPY: {
    // With a rank_axis x goes to this rank's block of y (ZeRO-3: the rank's
    // parameters into the flat buffer they are gathered in).
    int64_t n = numel(in(0));
    int64_t at = inst.rank_axis().empty() ? 0 : rankCoordinate(inst) * n;
    std::memmove(y(0) + at, x(0), n * sizeof(T));
    return absl::OkStatus();
  }
  case plan::ADAMW: {
    cpu::AdamWConfig c;
    c.beta1 = floatAttr(inst, "beta1");
    c.beta2 = floatAttr(inst, "beta2");
    c.eps = floatAttr(inst, "eps");
    c.weightDecay = floatAttr(inst, "weight_decay");
    int64_t step =
        *static_cast<const int64_t *>(address(inst.inputs(5), slot));
    // With a rank_axis (ZeRO) the gradient and moments are this rank's
    // block of the flat parameters: block c of the axis' ranks.
    int64_t n = numel(in(2));
    T *param = y(0) + (inst.rank_axis().empty() ? 0 : rankCoordinate(inst) * n);
    return cpu::adamwStep<T>(param, x(1), y(1), y(2), n, c, *x(4), step, *x(6));
  }
  default:
    return absl::UnimplementedError(
        absl::StrCat("kernel ", plan::Kernel_Name(inst.kernel()),
                     " is not implemented on CPU"));
  }
}

} // namespace braid::exec
