//===- Executor.cpp - Runs the functions of a plan on one GPU -------------===//

#include "runtime/cuda/Executor.h"

#include "runtime/common/Status.h"

#include "runtime/cuda/Check.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/StreamCommunicator.h"
#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace braid::cuda {
namespace {

using plan::Buffer;
using plan::Instruction;

/// Whether the executor can hand its buffers to `comm`: a communicator on
/// streams (NCCL) takes device memory; under the CUDA emulation device
/// memory is host memory, which any communicator (MPI's) reads.
bool communicatesDeviceMemory(const exec::Communicator *comm) {
#ifdef BRAID_CUDA_EMULATION
  return comm != nullptr;
#else
  return dynamic_cast<const StreamCommunicator *>(comm) != nullptr;
#endif
}

/// What this executor does not run yet (with `comm`, the job's other
/// ranks), or the empty string.
std::string unsupported(const plan::Plan &plan, exec::Communicator *comm) {
  if (plan::WorldSize(plan) > 1 && !communicatesDeviceMemory(comm)) {
    return absl::StrCat("the plan is for ", plan::WorldSize(plan),
                        " ranks and the CUDA executor was given no "
                        "communicator on device memory (NCCL's)");
  }
  for (const Buffer &b : plan.buffers())
    if (b.dtype() == plan::F64)
      return absl::StrCat("buffer '", b.name(), "' is ",
                          plan::DType_Name(b.dtype()),
                          "; the CUDA kernels compute in F32, BF16 and F16");
  return "";
}

template <typename T> T fromDouble(double v);
template <> float fromDouble<float>(double v) { return float(v); }
template <> bf16 fromDouble<bf16>(double v) {
  return __float2bfloat16_rn(float(v));
}
template <> f16 fromDouble<f16>(double v) { return __float2half_rn(float(v)); }
double toDouble(float v) { return v; }
double toDouble(bf16 v) { return __bfloat162float(v); }
double toDouble(f16 v) { return __half2float(v); }

} // namespace

Executor::~Executor() {
  if (stream_)
    cudaStreamSynchronize(stream_);
  for (auto &[call, graphs] : graphsByCall_)
    for (cudaGraphExec_t exec : graphs)
      cudaGraphExecDestroy(exec);
  for (Staging &s : staging_) {
    cudaFreeHost(s.host);
    cudaEventDestroy(s.copied);
  }
  if (readBack_)
    cudaFreeHost(readBack_);
  for (cudaEvent_t event : events_)
    cudaEventDestroy(event);
  if (traceAnchor_)
    cudaEventDestroy(traceAnchor_);
  for (const PendingSend &send : pendingSends_)
    cudaEventDestroy(send.done);
  for (cudaEvent_t event : sendEvents_)
    cudaEventDestroy(event);
  for (void *p :
       {static_cast<void *>(arena_), static_cast<void *>(rowStats_),
        static_cast<void *>(lossTerms_), static_cast<void *>(lossScratch_),
        static_cast<void *>(attentionRows_),
        static_cast<void *>(cachedAttention_), topLogprobs_,
        static_cast<void *>(counted_),
        static_cast<void *>(sumSquares_), static_cast<void *>(callValues_),
        static_cast<void *>(collectiveScratch_), cudnnWorkspace_})
    if (p)
      cudaFree(p);
  if (stream_) {
    // The communicator outlives this executor (braid-run owns it) and
    // must not enqueue on, or wait for, the stream once it is destroyed.
    if (streamComm_)
      (void)streamComm_->SetStream(nullptr);
    cudaStreamDestroy(stream_);
  }
}

absl::StatusOr<std::unique_ptr<Executor>>
Executor::Create(plan::Plan plan, exec::Communicator *comm) {
  if (absl::Status s = plan::ValidatePlan(plan); !s.ok())
    return s;
  if (std::string why = unsupported(plan, comm); !why.empty())
    return absl::UnimplementedError(why);
  // An instruction its kernel's handler cannot run (KernelHandlers.cpp).
  for (const plan::Function &fn : plan.functions())
    for (const Instruction &inst : fn.body())
      if (std::string why = refusal(inst); !why.empty())
        return absl::UnimplementedError(
            absl::StrCat("function '", fn.name(), "': ", why));
  int devices = 0;
  if (cudaError_t err = cudaGetDeviceCount(&devices);
      err != cudaSuccess || devices == 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device to run the plan on (",
        err != cudaSuccess ? cudaGetErrorString(err) : "none found", ")"));
  std::unique_ptr<Executor> e(new Executor(std::move(plan)));
  const plan::Plan &p = e->plan_;
  if (plan::WorldSize(p) <= 1)
    comm = nullptr;
  if (absl::Status s = CheckCoordinates(p, comm); !s.ok())
    return s;
  // The rank's stage, arena size, buffers' bytes and instructions' dtypes.
  e->placeRank(comm);
  if (e->mixed_ != plan::DTYPE_UNSPECIFIED)
    e->compute_ = e->mixed_;
  // The workspaces, from the largest instruction of each kind this rank
  // runs (its kernel's need, KernelHandlers.cpp).
  Needs needs;
  for (const plan::Function &fn : p.functions())
    for (const Instruction &inst : fn.body())
      if (e->runsHere(inst))
        e->gatherNeeds(inst, needs);
  const int64_t statRows = needs.statRows, attentionRows = needs.attentionRows,
                collectiveBytes = needs.collectiveBytes,
                cachedAttentionBytes = needs.cachedAttentionBytes,
                topLogprobsBytes = needs.topLogprobsBytes;
  // What the run needs on the device, against what it has free: a plan
  // too large for the GPU is refused before anything is allocated, naming
  // both (the plan's arena is exact: docs/memory.md).
  const int64_t workspaces =
      int64_t(sizeof(float)) * (3 * statRows + 1 + attentionRows) +
      int64_t(sizeof(int64_t) + 2 * sizeof(double)) + collectiveBytes +
      cachedAttentionBytes + topLogprobsBytes + Gemm::kWorkspaceBytes;
  size_t freeBytes = 0, totalBytes = 0;
  BRAID_CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
  if (e->arenaBytes_ + workspaces > int64_t(freeBytes))
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the plan needs %.3f GB on the GPU (its arena %.3f GB and the "
        "kernels' workspaces %.3f GB) and the device has %.3f GB free of "
        "%.3f GB: compile it for a smaller micro-batch, with recompute or "
        "ZeRO, or over more GPUs (braidc --memory-budget, --auto)",
        double(e->arenaBytes_ + workspaces) / 1e9,
        double(e->arenaBytes_) / 1e9, double(workspaces) / 1e9,
        double(freeBytes) / 1e9, double(totalBytes) / 1e9));
  BRAID_CUDA_CHECK(
      cudaStreamCreateWithFlags(&e->stream_, cudaStreamNonBlocking));
  // A communicator on streams enqueues on the executor's.
  e->streamComm_ = dynamic_cast<StreamCommunicator *>(e->comm_);
  if (e->streamComm_)
    BRAID_RETURN_IF_ERROR(e->streamComm_->SetStream(e->stream_));
  auto allocate = [&](auto **ptr, int64_t bytes) -> absl::Status {
    e->workspaceBytes_ += bytes;
    cudaError_t err = cudaMalloc(reinterpret_cast<void **>(ptr),
                                 size_t(std::max<int64_t>(bytes, 1)));
    if (err != cudaSuccess)
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes,
                       " bytes on the GPU: ", cudaGetErrorString(err)));
    return absl::OkStatus();
  };
  if (absl::Status s = allocate(&e->arena_, e->arenaBytes_); !s.ok())
    return s;
  e->workspaceBytes_ = 0; // the arena is not a workspace
  for (absl::Status s :
       {allocate(&e->rowStats_, 2 * statRows * int64_t(sizeof(float))),
        allocate(&e->lossTerms_, statRows * int64_t(sizeof(float))),
        allocate(&e->lossScratch_, int64_t(sizeof(float))),
        allocate(&e->attentionRows_, attentionRows * int64_t(sizeof(float))),
        allocate(&e->counted_, int64_t(sizeof(int64_t))),
        allocate(&e->sumSquares_, 2 * int64_t(sizeof(double))),
        allocate(&e->callValues_, int64_t(sizeof(CallValues))),
        cudaMallocHost(reinterpret_cast<void **>(&e->readBack_),
                       kReadBackSlots * kReadBackBytes) == cudaSuccess
            ? absl::OkStatus()
            : absl::ResourceExhaustedError(
                  "cannot allocate pinned host memory for the reads of "
                  "losses"),
        allocate(&e->collectiveScratch_, collectiveBytes),
        cachedAttentionBytes > 0
            ? allocate(&e->cachedAttention_, cachedAttentionBytes)
            : absl::OkStatus(),
        topLogprobsBytes > 0 ? allocate(&e->topLogprobs_, topLogprobsBytes)
                             : absl::OkStatus()})
    if (!s.ok())
      return s;
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create();
  if (!gemm.ok())
    return gemm.status();
  e->gemm_ = std::move(*gemm);
  e->workspaceBytes_ += int64_t(Gemm::kWorkspaceBytes);
  // cuBLASLt's algorithms, chosen now rather than in the first step: in
  // bf16 and fp16 the fastest of the heuristic's candidates, timed on
  // random operands in the arena, which nothing holds yet; in fp32 (the mode
  // that checks against the CPU) the heuristic's first, the same every run.
  if (e->compute_ != plan::F32)
    e->gemm_->SetTuning(e->arena_, size_t(e->arenaBytes_), e->stream_);
  for (const auto &[shape, bias] : needs.gemms) {
    absl::Status s =
        e->compute_ == plan::BF16  ? e->gemm_->Prepare<bf16>(shape, bias)
        : e->compute_ == plan::F16 ? e->gemm_->Prepare<f16>(shape, bias)
                                   : e->gemm_->Prepare<float>(shape, bias);
    if (!s.ok())
      return s;
  }
  e->gemm_->SetTuning(nullptr, 0, nullptr);
  for (const std::string &note : e->gemm_->Notes())
    e->notes_.push_back(note);
  // Attention's kernels, Braid's or cuDNN's, timed on the arena's bytes as
  // well.
  if (absl::Status s = e->prepareAttention(needs); !s.ok())
    return s;
  // The arena starts zeroed, as the CPU backend's pages do.
  BRAID_CUDA_CHECK(
      cudaMemsetAsync(e->arena_, 0, size_t(e->arenaBytes_), e->stream_));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(e->stream_));
  return e;
}

absl::StatusOr<absl::Span<uint8_t>> Executor::Bytes(int id) {
  if (absl::Status s = checkExists(id); !s.ok())
    return s;
  std::vector<uint8_t> &host = hostBytes_[id];
  host.resize(size_t(bytes_[id]));
  if (!host.empty()) {
    BRAID_CUDA_CHECK(cudaMemcpyAsync(host.data(), address(id, 0), host.size(),
                                     cudaMemcpyDeviceToHost, stream_));
    BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return absl::MakeSpan(host);
}

absl::Status Executor::ReleaseBytes(int id, bool written) {
  auto it = hostBytes_.find(id);
  if (it == hostBytes_.end())
    return absl::FailedPreconditionError(absl::StrCat(
        "buffer ", id, " was not taken with Bytes before ReleaseBytes"));
  // Freed on every return.
  std::vector<uint8_t> host = std::move(it->second);
  hostBytes_.erase(it);
  if (!written)
    return absl::OkStatus();
  if (!host.empty()) {
    BRAID_CUDA_CHECK(cudaMemcpyAsync(address(id, 0), host.data(), host.size(),
                                     cudaMemcpyHostToDevice, stream_));
    BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // A scalar the host keeps (lr, step) follows its buffer.
  if (auto scalar = hostScalars_.find(id); scalar != hostScalars_.end()) {
    absl::StatusOr<std::vector<double>> values = Read(id);
    if (!values.ok())
      return values.status();
    scalar->second = values->empty() ? 0.0 : (*values)[0];
  }
  return absl::OkStatus();
}

absl::Status Executor::createEvents() {
  size_t longest = 0;
  for (const plan::Function &fn : plan_.functions())
    longest = std::max(longest, size_t(fn.body_size()));
  while (events_.size() < longest + 1) {
    cudaEvent_t event;
    BRAID_CUDA_CHECK(cudaEventCreate(&event));
    events_.push_back(event);
  }
  return absl::OkStatus();
}

absl::Status Executor::anchorTrace() {
  if (!traceAnchor_)
    BRAID_CUDA_CHECK(cudaEventCreate(&traceAnchor_));
  BRAID_CUDA_CHECK(cudaEventRecord(traceAnchor_, stream_));
  BRAID_CUDA_CHECK(cudaEventSynchronize(traceAnchor_));
  anchorTime_ = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

absl::Status Executor::SetTrace(exec::Trace *trace) {
  BRAID_RETURN_IF_ERROR(ExecutorBase::SetTrace(nullptr));
  if (!trace)
    return absl::OkStatus();
  BRAID_RETURN_IF_ERROR(createEvents());
  // The stream idle, so that the anchor completes as the host waits for it.
  BRAID_RETURN_IF_ERROR(Synchronize());
  BRAID_RETURN_IF_ERROR(anchorTrace());
  return ExecutorBase::SetTrace(trace);
}

void Executor::EnableProfile() {
  ExecutorBase::EnableProfile();
  if (!createEvents().ok()) {
    // Without events there is nothing to time with: profiling stays off.
    profile_.clear();
    kernelProfiles_.clear();
  }
}

bool Executor::runsHere(const Instruction &inst) const {
  if (plan_.pipeline().stages_size() == 0)
    return true;
  int id = inst.outputs_size() ? inst.outputs(0)
           : inst.inputs_size() ? inst.inputs(0)
                                : -1;
  return id < 0 || plan_.buffers(id).stage() == stage_;
}

absl::Status Executor::checkExists(int id) const {
  if (id < 0 || id >= plan_.buffers_size())
    return absl::OutOfRangeError(absl::StrCat(
        "buffer ", id, " does not exist (the plan has ", plan_.buffers_size(),
        ")"));
  return checkOwned(id);
}

absl::Status Executor::Synchronize() const {
  BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status Executor::Write(int id, absl::Span<const double> values,
                             int64_t slot) {
  if (absl::Status s = checkCopy(id, slot); !s.ok())
    return s;
  const Buffer &b = plan_.buffers(id);
  if (int64_t(values.size()) != plan::NumElements(b))
    return absl::InvalidArgumentError(
        absl::StrCat("buffer '", b.name(), "' holds ", plan::NumElements(b),
                     " elements, not ", values.size()));
  std::vector<uint8_t> host(size_t(bytes_[id]));
  auto fill = [&](auto *out) {
    using T = std::remove_pointer_t<decltype(out)>;
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16> ||
                    std::is_same_v<T, f16>)
        out[i] = fromDouble<T>(values[i]);
      else
        out[i] = T(values[i]);
    }
  };
  switch (b.dtype()) {
  case plan::F32:
    fill(reinterpret_cast<float *>(host.data()));
    break;
  case plan::BF16:
    fill(reinterpret_cast<bf16 *>(host.data()));
    break;
  case plan::F16:
    fill(reinterpret_cast<f16 *>(host.data()));
    break;
  case plan::I32:
    fill(reinterpret_cast<int32_t *>(host.data()));
    break;
  case plan::I64:
    fill(reinterpret_cast<int64_t *>(host.data()));
    break;
  default:
    return absl::UnimplementedError(
        absl::StrCat("buffer '", b.name(), "': ", plan::DType_Name(b.dtype())));
  }
  if (auto check = idChecks_.find(id); check != idChecks_.end())
    for (size_t i = 0; i < values.size(); ++i) {
      const IdCheck &c = check->second;
      bool ignored = c.ignorable && values[i] == double(c.ignore);
      if (!ignored && !(values[i] >= 0 && values[i] < double(c.vocab)))
        return absl::OutOfRangeError(
            absl::StrCat("token id ", values[i], " at position ", i, " of '",
                         b.name(), "' is outside the vocabulary of ", c.vocab));
    }
  if (values.size() == 1)
    hostScalars_[id] = values[0];
  BRAID_RETURN_IF_ERROR(waitForSends(static_cast<uint8_t *>(address(id, slot)),
                                     bytes_[id]));
  if (host.size() <= kAsyncWriteBytes) {
    // Staged in pinned memory and copied in stream order: the host does
    // not wait (a step's tokens, targets, learning rate and step).
    absl::StatusOr<Staging *> staged = staging(host.size());
    if (!staged.ok())
      return staged.status();
    std::memcpy((*staged)->host, host.data(), host.size());
    BRAID_CUDA_CHECK(cudaMemcpyAsync(address(id, slot), (*staged)->host,
                                     host.size(), cudaMemcpyHostToDevice,
                                     stream_));
    BRAID_CUDA_CHECK(cudaEventRecord((*staged)->copied, stream_));
    return absl::OkStatus();
  }
  BRAID_CUDA_CHECK(cudaMemcpyAsync(address(id, slot), host.data(), host.size(),
                                   cudaMemcpyHostToDevice, stream_));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

namespace {
/// Element i of host bytes of dtype `dtype`, as a double.
double elementAt(const uint8_t *host, size_t i, plan::DType dtype) {
  switch (dtype) {
  case plan::F32:
    return reinterpret_cast<const float *>(host)[i];
  case plan::BF16:
    return toDouble(reinterpret_cast<const bf16 *>(host)[i]);
  case plan::F16:
    return toDouble(reinterpret_cast<const f16 *>(host)[i]);
  case plan::I32:
    return reinterpret_cast<const int32_t *>(host)[i];
  default:
    return double(reinterpret_cast<const int64_t *>(host)[i]);
  }
}
} // namespace

absl::Status Executor::checkCopy(int id, int64_t slot) const {
  if (absl::Status s = checkExists(id); !s.ok())
    return s;
  if (!isCopy(id, slot))
    return absl::OutOfRangeError(absl::StrCat("slot ", slot,
                                              " is not a copy of buffer '",
                                              plan_.buffers(id).name(), "'"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> Executor::Read(int id, int64_t slot) const {
  if (absl::Status s = checkCopy(id, slot); !s.ok())
    return s;
  const Buffer &b = plan_.buffers(id);
  std::vector<uint8_t> host(size_t(bytes_[id]));
  BRAID_CUDA_CHECK(cudaMemcpyAsync(host.data(), address(id, slot), host.size(),
                                   cudaMemcpyDeviceToHost, stream_));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<double> out(size_t(plan::NumElements(b)));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = elementAt(host.data(), i, b.dtype());
  return out;
}

absl::Status Executor::ReadLater(int id, double *out, int64_t slot) {
  if (absl::Status s = checkCopy(id, slot); !s.ok())
    return s;
  const Buffer &b = plan_.buffers(id);
  if (!out || plan::NumElements(b) < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadLater of buffer '", b.name(), "': no element or no output"));
  if (later_.size() == kReadBackSlots)
    BRAID_RETURN_IF_ERROR(Settle());
  const size_t k = later_.size();
  BRAID_CUDA_CHECK(cudaMemcpyAsync(
      readBack_ + k * kReadBackBytes, address(id, slot),
      size_t(plan::DTypeBytes(b.dtype())), cudaMemcpyDeviceToHost, stream_));
  later_.push_back({b.dtype(), out});
  return absl::OkStatus();
}

absl::Status Executor::Settle() {
  BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t k = 0; k < later_.size(); ++k)
    *later_[k].out =
        elementAt(readBack_ + k * kReadBackBytes, 0, later_[k].dtype);
  later_.clear();
  return absl::OkStatus();
}

absl::StatusOr<Executor::Staging *> Executor::staging(size_t bytes) {
  // One whose last copy is done, large enough.
  for (Staging &s : staging_) {
    if (s.bytes < bytes)
      continue;
    cudaError_t done = cudaEventQuery(s.copied);
    if (done == cudaSuccess)
      return &s;
    if (done != cudaErrorNotReady)
      BRAID_CUDA_CHECK(done);
  }
  // Else a new one (the first steps fill the pool: the trainer writes the
  // same buffers every step), or, with the pool full, the first large
  // enough one once its copy is done.
  if (staging_.size() >= kMaxStagings) {
    for (Staging &s : staging_)
      if (s.bytes >= bytes) {
        BRAID_CUDA_CHECK(cudaEventSynchronize(s.copied));
        return &s;
      }
    BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
    Staging &s = staging_.front();
    BRAID_CUDA_CHECK(cudaFreeHost(s.host));
    s.host = nullptr;
    s.bytes = 0;
    BRAID_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void **>(&s.host), bytes));
    s.bytes = bytes;
    return &s;
  }
  Staging s;
  s.bytes = std::max<size_t>(bytes, 4096);
  BRAID_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void **>(&s.host), s.bytes));
  BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
  staging_.push_back(s);
  return &staging_.back();
}

absl::Status Executor::Run(absl::string_view name,
                           const exec::StepContext &context, int64_t slot) {
  absl::StatusOr<int> found = findFunction(name);
  if (!found.ok())
    return found.status();
  const int index = *found;
  const plan::Function *fn = &plan_.functions(index);
  const bool timed = this->timed();
  const bool graphed = !timed && graphable(*fn);
  // What changes from call to call, on the device before the call's
  // kernels (which read it there, replayed from a graph too).
  CallValues values;
  values.seed = context.seed;
  values.sampleOffset = context.sampleOffset;
  values.lossScaleInverse = 1.0 / LossScale();
  values.step = context.step;
  // A call with a graph of its function and slot replays it: its buffers
  // were checked when it was captured.
  auto graph =
      graphed ? graphsByCall_.find({index, slot}) : graphsByCall_.end();
  if (graph != graphsByCall_.end()) {
    BRAID_CUDA_CHECK(setCallValues(callValues_, values, stream_));
    return runGraphed(index, slot, graph->second, /*capturing=*/false);
  }
  // Every buffer it names is in this rank's arena and has the slot, before
  // anything runs.
  BRAID_RETURN_IF_ERROR(checkFunctionBuffers(index, slot));
  BRAID_CUDA_CHECK(setCallValues(callValues_, values, stream_));
  if (graphed) {
    std::vector<cudaGraphExec_t> graphs;
    absl::Status ran = runGraphed(index, slot, graphs, /*capturing=*/true);
    if (!ran.ok()) {
      for (cudaGraphExec_t exec : graphs)
        cudaGraphExecDestroy(exec);
      return ran;
    }
    graphsByCall_.emplace(std::make_pair(index, slot), std::move(graphs));
    return absl::OkStatus();
  }
  // Traced: no kernel of this call starts before now.
  const exec::Trace::Clock::time_point runBegin =
      trace_ ? exec::Trace::Now() : exec::Trace::Clock::time_point();
  BRAID_RETURN_IF_ERROR(runBody(index, context, slot, timed));
  if (!timed)
    return absl::OkStatus();
  // Instruction i ran between events i and i + 1.
  int n = fn->body_size();
  BRAID_CUDA_CHECK(cudaEventRecord(events_[size_t(n)], stream_));
  BRAID_CUDA_CHECK(cudaEventSynchronize(events_[size_t(n)]));
  // ... nor ends after now.
  const exec::Trace::Clock::time_point runEnd = exec::Trace::Now();
  // Event i on the host's clock: the anchor's time and what the GPU counted
  // from the anchor to it. The anchor's time is when the host saw it
  // complete, a little after it did: the estimate is as late, and is kept
  // within the call (between enqueueing its first kernel and seeing its
  // last one end), where the kernels certainly ran.
  auto hostTime = [&](int i) -> absl::StatusOr<exec::Trace::Clock::time_point> {
    float ms = 0;
    BRAID_CUDA_CHECK(
        cudaEventElapsedTime(&ms, traceAnchor_, events_[size_t(i)]));
    exec::Trace::Clock::time_point t =
        anchorTime_ + std::chrono::duration_cast<exec::Trace::Clock::duration>(
                          std::chrono::duration<double, std::milli>(ms));
    return std::clamp(t, runBegin, runEnd);
  };
  exec::Trace::Clock::time_point traceBegin = runBegin;
  if (trace_) {
    absl::StatusOr<exec::Trace::Clock::time_point> first = hostTime(0);
    if (!first.ok())
      return first.status();
    traceBegin = *first;
  }
  for (int i = 0; i < n; ++i) {
    const Instruction &inst = fn->body(i);
    if (profiling()) {
      float ms = 0;
      BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[size_t(i)],
                                            events_[size_t(i) + 1]));
      addProfile(index, i, double(ms) * 1e-3);
    }
    if (trace_) {
      // Instruction i ends where i + 1 begins: each event read once.
      absl::StatusOr<exec::Trace::Clock::time_point> end = hostTime(i + 1);
      if (!end.ok())
        return end.status();
      trace_->AddKernel(inst, tracePhase(index, i), traceBegin, *end);
      traceBegin = *end;
    }
  }
  // The next function's events count from here: a recent anchor keeps
  // the float milliseconds exact to the microsecond.
  if (trace_)
    BRAID_RETURN_IF_ERROR(anchorTrace());
  return absl::OkStatus();
}

absl::Status Executor::runBody(int function, const exec::StepContext &context,
                               int64_t slot, bool timed) {
  const plan::Function &fn = plan_.functions(function);
  BRAID_RETURN_IF_ERROR(runRange(function, 0, fn.body_size(), slot, timed));
  // A function leaves nothing in flight (plans WAIT before its end).
  return finishInFlight(nullptr);
}

absl::Status Executor::runRange(int function, int begin, int end,
                                int64_t slot, bool timed) {
  const plan::Function &fn = plan_.functions(function);
  for (int i = begin; i < end; ++i) {
    const Instruction &inst = fn.body(i);
    if (timed)
      BRAID_CUDA_CHECK(cudaEventRecord(events_[size_t(i)], stream_));
    absl::Status s = waitForSends(inst, slot);
    if (s.ok())
      s = runInstruction(inst, instructionDType(function, i), slot);
    if (!s.ok())
      return inFunction(s, fn.name(), &inst);
  }
  return absl::OkStatus();
}

bool Executor::graphable(const plan::Function &) const {
  return graphs_ && (!comm_ || streamComm_);
}

absl::Status Executor::runGraphed(int function, int64_t slot,
                                  std::vector<cudaGraphExec_t> &graphs,
                                  bool capturing) {
  const plan::Function &fn = plan_.functions(function);
  const int n = fn.body_size();
  size_t next = 0; // graphs' index
  for (int begin = 0; begin <= n;) {
    int end = begin;
    while (end < n && !plan::IsPointToPoint(fn.body(end).kernel()))
      ++end;
    if (end > begin) {
      // The sends in flight whose bytes the run overwrites, waited for
      // outside the graph (a capture cannot wait for an event recorded
      // before it).
      for (int i = begin; i < end; ++i)
        if (absl::Status s = waitForSends(fn.body(i), slot); !s.ok())
          return inFunction(s, fn.name(), &fn.body(i));
      if (capturing) {
        absl::StatusOr<cudaGraphExec_t> made =
            capture(function, begin, end, slot);
        if (!made.ok())
          return made.status();
        graphs.push_back(*made);
      }
      if (next >= graphs.size())
        return absl::InternalError(absl::StrCat(
            "function '", fn.name(), "' has more runs of instructions than "
            "the graphs captured at its first call"));
      BRAID_CUDA_CHECK(cudaGraphLaunch(graphs[next++], stream_));
    }
    if (end < n) {
      // The send or receive itself, enqueued as without graphs.
      const Instruction &inst = fn.body(end);
      absl::Status s = waitForSends(inst, slot);
      if (s.ok())
        s = runInstruction(inst, instructionDType(function, end), slot);
      if (!s.ok())
        return inFunction(s, fn.name(), &inst);
    }
    begin = end + 1;
  }
  return absl::OkStatus();
}

int64_t Executor::PointToPointCallsCaptured() const {
  int64_t calls = 0;
  for (const auto &[call, graphs] : graphsByCall_)
    for (const Instruction &inst : plan_.functions(call.first).body())
      if (plan::IsPointToPoint(inst.kernel())) {
        ++calls;
        break;
      }
  return calls;
}

int64_t Executor::PointToPointGraphs() const {
  int64_t made = 0;
  for (const auto &[call, graphs] : graphsByCall_)
    for (const Instruction &inst : plan_.functions(call.first).body())
      if (plan::IsPointToPoint(inst.kernel())) {
        made += int64_t(graphs.size());
        break;
      }
  return made;
}

std::vector<std::string> Executor::RunNotes() const {
  if (graphsByCall_.empty())
    return {};
  return {absl::StrCat("cuda graphs: ", graphsByCall_.size(),
                       " calls captured (function and slot), ",
                       PointToPointCallsCaptured(),
                       " of them sending or receiving, as ",
                       PointToPointGraphs(),
                       " graphs between their sends and receives")};
}

absl::StatusOr<cudaGraphExec_t> Executor::capture(int function, int begin,
                                                  int end, int64_t slot) {
  const plan::Function &fn = plan_.functions(function);
  // Thread-local: a call that would synchronize this thread with the
  // stream during the capture fails it, rather than another thread's.
  BRAID_CUDA_CHECK(
      cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  // What the run leaves in flight is finished in its graph.
  absl::Status body = runRange(function, begin, end, slot, /*timed=*/false);
  if (body.ok())
    body = finishInFlight(nullptr);
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (!body.ok() || ended != cudaSuccess) {
    if (graph)
      cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    if (!body.ok())
      return body;
    return absl::InternalError(
        absl::StrCat("capturing function '", fn.name(),
                     "' as a CUDA graph: ", cudaGetErrorString(ended),
                     " (braid-run --cuda-graphs off runs it "
                     "without)"));
  }
  cudaGraphExec_t exec = nullptr;
  cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess)
    return absl::InternalError(
        absl::StrCat("instantiating the CUDA graph of function '", fn.name(),
                     "': ", cudaGetErrorString(made)));
  return exec;
}

} // namespace braid::cuda
