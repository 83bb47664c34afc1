//===- Executor.cpp - Runs the functions of a plan on one GPU -------------===//

#include "runtime/cuda/Executor.h"

#include "runtime/cuda/Attention.h"
#include "runtime/cuda/Check.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/StreamCommunicator.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Work.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace braid::cuda {
namespace {

#define BRAID_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    if (absl::Status status_ = (expr); !status_.ok())                          \
      return status_;                                                          \
  } while (0)

using plan::Buffer;
using plan::Instruction;

int64_t last(const Buffer &b) {
  return b.shape_size() ? b.shape(b.shape_size() - 1) : 1;
}
int64_t rowsOf(const Buffer &b) {
  return plan::NumElements(b) / std::max<int64_t>(last(b), 1);
}

absl::Status launched(cudaError_t e, const Instruction &inst) {
  if (e == cudaSuccess)
    return absl::OkStatus();
  return absl::InternalError(absl::StrCat(plan::Kernel_Name(inst.kernel()),
                                          ": ", cudaGetErrorString(e)));
}

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
  for (const plan::Function &fn : plan.functions())
    for (const Instruction &inst : fn.body())
      if (inst.kernel() == plan::ATTENTION_GRAD && inst.inputs_size() < 6)
        return absl::StrCat("function '", fn.name(),
                            "': ATTENTION_GRAD without the forward's "
                            "log-sum-exp (recompile the plan)");
  return "";
}

cpu::AttentionShape attentionShape(const plan::Plan &plan,
                                   const Instruction &inst,
                                   int64_t coordinate = 0) {
  const Buffer &q = plan.buffers(inst.inputs(0));
  int64_t heads = plan::IntAttr(inst, "heads");
  cpu::AttentionShape s{};
  s.batch = q.shape(0);
  s.seq = q.shape(1);
  s.heads = heads;
  s.kvHeads = plan::IntAttr(inst, "kv_heads");
  s.headDim = q.shape(2) / heads;
  s.scale = plan::FloatAttr(inst, "scale");
  s.causal = plan::IntAttr(inst, "causal") != 0;
  s.alibi = plan::IntAttr(inst, "alibi") != 0;
  if (inst.int_attrs().count("global_heads")) {
    // This rank's slice of the heads (tensor parallelism): `coordinate`
    // along the instruction's rank_axis.
    s.globalHeads = plan::IntAttr(inst, "global_heads");
    s.globalKvHeads = plan::IntAttr(inst, "global_kv_heads");
    s.headOffset = coordinate * plan::IntAttr(inst, "head_offset_stride");
    s.kvHeadOffset = coordinate * plan::IntAttr(inst, "kv_head_offset_stride");
  }
  return s;
}

/// The linear layer of a LINEAR, LINEAR_GRAD_INPUT or LINEAR_GRAD_WEIGHT.
cpu::LinearShape linearShapeOf(const plan::Plan &plan,
                               const Instruction &inst) {
  auto in = [&](int i) -> const Buffer & {
    return plan.buffers(inst.inputs(i));
  };
  bool t = plan::IntAttr(inst, "transpose_w") != 0;
  int64_t rows = 0, inDim = 0, outDim = 0;
  switch (inst.kernel()) {
  case plan::LINEAR:
    inDim = t ? in(1).shape(1) : in(1).shape(0);
    outDim = t ? in(1).shape(0) : in(1).shape(1);
    rows = rowsOf(in(0));
    break;
  case plan::LINEAR_GRAD_INPUT:
    outDim = last(in(0));
    inDim = last(plan.buffers(inst.outputs(0)));
    rows = rowsOf(in(0));
    break;
  default: // LINEAR_GRAD_WEIGHT
    inDim = last(in(0));
    outDim = last(in(1));
    rows = rowsOf(in(0));
    break;
  }
  cpu::LinearShape s{rows, inDim, outDim, t};
  auto scale = inst.float_attrs().find("bias_scale");
  if (scale != inst.float_attrs().end())
    s.biasScale = scale->second;
  return s;
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
  for (auto &[call, exec] : graphsByCall_)
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
        static_cast<void *>(attentionRows_), static_cast<void *>(counted_),
        static_cast<void *>(sumSquares_), static_cast<void *>(callValues_),
        static_cast<void *>(collectiveScratch_)})
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
  int devices = 0;
  if (cudaError_t err = cudaGetDeviceCount(&devices);
      err != cudaSuccess || devices == 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device to run the plan on (",
        err != cudaSuccess ? cudaGetErrorString(err) : "none found", ")"));
  std::unique_ptr<Executor> e(new Executor(std::move(plan)));
  e->comm_ = plan::WorldSize(e->plan_) > 1 ? comm : nullptr;
  const plan::Plan &p = e->plan_;
  if (e->comm_)
    if (absl::Status s =
            plan::CheckMeshCoordinates(p.mesh(), e->comm_->Coordinates());
        !s.ok())
      return s;
  // The rank's arena: its pipeline stage's (the loader checked that the
  // stage's buffers lie inside it), or the plan's.
  e->arenaBytes_ = p.arena_bytes();
  if (p.pipeline().stages_size() > 0) {
    e->stage_ = e->coordinate("pp");
    e->arenaBytes_ = p.pipeline().stages(int(e->stage_)).arena_bytes();
  }
  for (const Buffer &b : p.buffers()) {
    e->bytes_.push_back(plan::NumElements(b) * plan::DTypeBytes(b.dtype()));
    if (b.dtype() == plan::BF16 || b.dtype() == plan::F16)
      e->compute_ = b.dtype();
  }
  // The workspaces, from the largest instruction of each kind this rank
  // runs.
  int64_t statRows = 1, attentionRows = 1, collectiveBytes = 0;
  for (const plan::Function &fn : p.functions())
    for (const Instruction &inst : fn.body()) {
      if (!e->runsHere(inst))
        continue;
      switch (inst.kernel()) {
      case plan::RMS_NORM:
      case plan::RMS_NORM_GRAD:
      case plan::LAYER_NORM:
      case plan::LAYER_NORM_GRAD:
        statRows = std::max(statRows, rowsOf(p.buffers(inst.inputs(0))));
        break;
      case plan::EMBEDDING:
      case plan::EMBEDDING_GRAD:
      case plan::CROSS_ENTROPY:
      case plan::CROSS_ENTROPY_GRAD:
      case plan::CROSS_ENTROPY_PARTIAL: {
        // Token ids index tables on the device, where nothing checks them:
        // Write checks them against the smallest table that reads them.
        bool embedding = inst.kernel() == plan::EMBEDDING ||
                         inst.kernel() == plan::EMBEDDING_GRAD;
        const Buffer &table =
            p.buffers(inst.kernel() == plan::EMBEDDING_GRAD ? inst.outputs(0)
                                                            : inst.inputs(0));
        int64_t vocab = embedding ? table.shape(0) : last(table);
        // A slice of the vocabulary: the ids are global.
        if (embedding ? !inst.rank_axis().empty()
                      : inst.int_attrs().count("vocab_start_stride") > 0)
          vocab *= plan::AxisSize(p.mesh(), inst.rank_axis());
        IdCheck &check = e->idChecks_[inst.inputs(1)];
        check.vocab = check.vocab ? std::min(check.vocab, vocab) : vocab;
        if (!embedding) {
          check.ignore = plan::IntAttr(inst, "ignore_index");
          check.ignorable = true;
          statRows = std::max(statRows, rowsOf(table));
        }
        break;
      }
      case plan::CROSS_ENTROPY_FINISH:
        statRows = std::max(statRows, plan::NumElements(p.buffers(inst.inputs(1))));
        break;
      case plan::ATTENTION_GRAD:
        attentionRows = std::max(attentionRows,
                                 attentionBackwardWorkspaceBytes(
                                     attentionShape(p, inst),
                                     /*tensorCores=*/e->compute_ != plan::F32) /
                                     int64_t(sizeof(float)));
        break;
      case plan::ALL_GATHER:
      case plan::REDUCE_SCATTER:
        collectiveBytes =
            std::max(collectiveBytes, e->collectiveScratchBytes(inst));
        break;
      default:
        break;
      }
    }
  // What the run needs on the device, against what it has free: a plan
  // too large for the GPU is refused before anything is allocated, naming
  // both (the plan's arena is exact: docs/memory.md).
  const int64_t workspaces =
      int64_t(sizeof(float)) * (3 * statRows + 1 + attentionRows) +
      int64_t(sizeof(int64_t) + 2 * sizeof(double)) + collectiveBytes +
      Gemm::kWorkspaceBytes;
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
        allocate(&e->collectiveScratch_, collectiveBytes)})
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
  for (const plan::Function &fn : p.functions())
    for (const Instruction &inst : fn.body())
      if (e->runsHere(inst) && (inst.kernel() == plan::LINEAR ||
          inst.kernel() == plan::LINEAR_GRAD_INPUT ||
                                inst.kernel() == plan::LINEAR_GRAD_WEIGHT)) {
        cpu::LinearShape shape = linearShapeOf(p, inst);
        bool bias = inst.kernel() == plan::LINEAR && inst.inputs_size() == 3;
        absl::Status s = e->compute_ == plan::BF16
                             ? e->gemm_->Prepare<bf16>(shape, bias)
                         : e->compute_ == plan::F16
                             ? e->gemm_->Prepare<f16>(shape, bias)
                             : e->gemm_->Prepare<float>(shape, bias);
        if (!s.ok())
          return s;
      }
  e->gemm_->SetTuning(nullptr, 0, nullptr);
  // The arena starts zeroed, as the CPU backend's pages do.
  BRAID_CUDA_CHECK(
      cudaMemsetAsync(e->arena_, 0, size_t(e->arenaBytes_), e->stream_));
  BRAID_CUDA_CHECK(cudaStreamSynchronize(e->stream_));
  return e;
}

absl::StatusOr<absl::Span<uint8_t>> Executor::Bytes(int id) {
  if (absl::Status s = checkOwned(id); !s.ok())
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
  trace_ = nullptr;
  tracePhases_.clear();
  if (!trace)
    return absl::OkStatus();
  BRAID_RETURN_IF_ERROR(createEvents());
  // The stream idle, so that the anchor completes as the host waits for it.
  BRAID_RETURN_IF_ERROR(Synchronize());
  BRAID_RETURN_IF_ERROR(anchorTrace());
  tracePhases_ = exec::KernelPhases(plan_);
  trace_ = trace;
  return absl::OkStatus();
}

void Executor::EnableProfile() {
  profile_.assign(plan::Kernel_ARRAYSIZE, 0.0);
  kernelProfiles_.assign(plan::Kernel_ARRAYSIZE, KernelProfile());
  work_.clear();
  for (const plan::Function &fn : plan_.functions()) {
    std::vector<std::pair<double, double>> &work = work_.emplace_back();
    for (const Instruction &inst : fn.body()) {
      plan::Work w = plan::InstructionWork(plan_, inst);
      work.push_back({w.flops, w.bytes});
    }
  }
  if (!createEvents().ok()) {
    // Without events there is nothing to time with: profiling stays off.
    profile_.clear();
    kernelProfiles_.clear();
  }
}

void Executor::ResetProfile() {
  if (profile_.empty())
    return;
  profile_.assign(plan::Kernel_ARRAYSIZE, 0.0);
  kernelProfiles_.assign(plan::Kernel_ARRAYSIZE, KernelProfile());
}

void *Executor::address(int id, int64_t slot) const {
  const Buffer &b = plan_.buffers(id);
  return arena_ + b.offset() + (b.slots() >= 2 ? slot * bytes_[id] : 0);
}

int64_t Executor::coordinate(absl::string_view axis) const {
  return comm_ ? plan::AxisCoordinate(plan_.mesh(), comm_->Coordinates(), axis)
               : 0;
}

int64_t Executor::rankCoordinate(const Instruction &inst) const {
  return inst.rank_axis().empty() ? 0 : coordinate(inst.rank_axis());
}

int64_t Executor::groupPlace(const Instruction &inst) const {
  return comm_ ? plan::GroupPlace(plan_, inst, comm_->Coordinates()) : 0;
}

bool Executor::runsHere(const Instruction &inst) const {
  if (plan_.pipeline().stages_size() == 0)
    return true;
  int id = inst.outputs_size() ? inst.outputs(0)
           : inst.inputs_size() ? inst.inputs(0)
                                : -1;
  return id < 0 || plan_.buffers(id).stage() == stage_;
}

absl::Status Executor::checkOwned(int id) const {
  if (id < 0 || id >= plan_.buffers_size())
    return absl::OutOfRangeError(absl::StrCat(
        "buffer ", id, " does not exist (the plan has ", plan_.buffers_size(),
        ")"));
  return plan::CheckBufferOnStage(plan_, id, stage_);
}

int64_t Executor::collectiveScratchBytes(const Instruction &inst) const {
  // An all-gather in place (ZeRO's parameters) needs none; otherwise one
  // for a slice along a dimension other than the first (the ranks' blocks
  // are then not contiguous in the full tensor), or for buffers that share
  // arena bytes (a collective's in and out must not).
  bool gather = inst.kernel() == plan::ALL_GATHER;
  const Buffer &x = plan_.buffers(inst.inputs(0)),
               &y = plan_.buffers(inst.outputs(0));
  if (gather && inst.inputs(0) == inst.outputs(0))
    return 0;
  const Buffer &slice = gather ? x : y;
  int64_t along = plan::IntAttr(inst, "dim"), outer = 1;
  for (int i = 0; i < along && i < slice.shape_size(); ++i)
    outer *= slice.shape(i);
  int64_t xBytes = bytes_[inst.inputs(0)], yBytes = bytes_[inst.outputs(0)];
  bool overlap = x.stage() == y.stage() && xBytes && yBytes &&
                 x.offset() < y.offset() + yBytes &&
                 y.offset() < x.offset() + xBytes;
  if (outer == 1 && !overlap)
    return 0;
  return std::max(xBytes, yBytes);
}

absl::Status Executor::beforeCommunication() {
  // A communicator on streams orders itself after the kernels; any other
  // reads the buffers from the host, once they hold the kernels' results.
  if (!streamComm_)
    BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status Executor::waitForSends(uint8_t *begin, int64_t bytes) {
  for (size_t i = 0; i < pendingSends_.size();) {
    const PendingSend &send = pendingSends_[i];
    if (begin < send.end && send.begin < begin + bytes) {
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream_, send.done, 0));
      sendEvents_.push_back(send.done);
      pendingSends_.erase(pendingSends_.begin() + long(i));
    } else {
      ++i;
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::waitForSends(const Instruction &inst, int64_t slot) {
  for (int32_t id : inst.outputs()) {
    if (pendingSends_.empty())
      break;
    BRAID_RETURN_IF_ERROR(waitForSends(
        static_cast<uint8_t *>(address(id, slot)), bytes_[id]));
  }
  return absl::OkStatus();
}

absl::Status Executor::finishInFlight(const Instruction *wait) {
  for (auto it = inFlight_.begin(); it != inFlight_.end();) {
    bool named = !wait;
    if (wait)
      for (int32_t id : wait->inputs())
        named |= std::find(it->buffers.begin(), it->buffers.end(), id) !=
                 it->buffers.end();
    if (!named) {
      ++it;
      continue;
    }
    BRAID_RETURN_IF_ERROR(comm_->Wait(it->handle));
    it = inFlight_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status Executor::WaitSends() {
  if (!comm_)
    return absl::OkStatus();
  for (const PendingSend &send : pendingSends_)
    sendEvents_.push_back(send.done);
  pendingSends_.clear();
  return comm_->WaitSends();
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
  if (absl::Status s = checkOwned(id); !s.ok())
    return s;
  const Buffer &b = plan_.buffers(id);
  if (slot < 0 || (b.slots() >= 2 && slot >= b.slots()))
    return absl::OutOfRangeError(absl::StrCat(
        "slot ", slot, " is not a copy of buffer '", b.name(), "'"));
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
  const plan::Function *fn = nullptr;
  int index = 0;
  for (int f = 0; f < plan_.functions_size(); ++f)
    if (plan_.functions(f).name() == name) {
      fn = &plan_.functions(f);
      index = f;
    }
  if (!fn)
    return absl::NotFoundError(
        absl::StrCat("the plan has no function '", name, "'"));
  bool timed = !profile_.empty() || trace_;
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
    BRAID_CUDA_CHECK(cudaGraphLaunch(graph->second, stream_));
    return absl::OkStatus();
  }
  // Every buffer it names is in this rank's arena and has the slot, before
  // anything runs.
  for (const Instruction &inst : fn->body())
    for (const auto *ids : {&inst.inputs(), &inst.outputs()})
      for (int32_t id : *ids)
        if (absl::Status s = checkCopy(id, slot); !s.ok())
          return absl::Status(
              s.code(), absl::StrCat("function '", name, "': ", s.message()));
  BRAID_CUDA_CHECK(setCallValues(callValues_, values, stream_));
  if (graphed) {
    absl::StatusOr<cudaGraphExec_t> captured = capture(*fn, context, slot);
    if (!captured.ok())
      return captured.status();
    graph = graphsByCall_.emplace(std::make_pair(index, slot), *captured).first;
    BRAID_CUDA_CHECK(cudaGraphLaunch(graph->second, stream_));
    return absl::OkStatus();
  }
  // Traced: no kernel of this call starts before now.
  const exec::Trace::Clock::time_point runBegin =
      trace_ ? exec::Trace::Now() : exec::Trace::Clock::time_point();
  BRAID_RETURN_IF_ERROR(runBody(*fn, context, slot, timed));
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
    if (!profile_.empty()) {
      float ms = 0;
      BRAID_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[size_t(i)],
                                            events_[size_t(i) + 1]));
      double seconds = double(ms) * 1e-3;
      profile_[inst.kernel()] += seconds;
      KernelProfile &k = kernelProfiles_[inst.kernel()];
      k.seconds += seconds;
      k.calls += 1;
      k.flops += work_[size_t(index)][size_t(i)].first;
      k.bytes += work_[size_t(index)][size_t(i)].second;
    }
    if (trace_) {
      // Instruction i ends where i + 1 begins: each event read once.
      absl::StatusOr<exec::Trace::Clock::time_point> end = hostTime(i + 1);
      if (!end.ok())
        return end.status();
      trace_->AddKernel(inst, tracePhases_[size_t(index)][size_t(i)],
                        traceBegin, *end);
      traceBegin = *end;
    }
  }
  // The next function's events count from here: a recent anchor keeps
  // the float milliseconds exact to the microsecond.
  if (trace_)
    BRAID_RETURN_IF_ERROR(anchorTrace());
  return absl::OkStatus();
}

absl::Status Executor::runBody(const plan::Function &fn,
                               const exec::StepContext &context, int64_t slot,
                               bool timed) {
  for (int i = 0; i < fn.body_size(); ++i) {
    const Instruction &inst = fn.body(i);
    if (timed)
      BRAID_CUDA_CHECK(cudaEventRecord(events_[size_t(i)], stream_));
    absl::Status s = waitForSends(inst, slot);
    if (s.ok())
      s = runInstruction(inst, context, slot, uint32_t(i));
    if (!s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("function '", fn.name(), "', ",
                                       inst.provenance(), ": ", s.message()));
  }
  // A function leaves nothing in flight (plans WAIT before its end).
  return finishInFlight(nullptr);
}

bool Executor::graphable(const plan::Function &fn) const {
  if (!graphs_ || (comm_ && !streamComm_) || !pendingSends_.empty())
    return false;
  for (const Instruction &inst : fn.body())
    if (inst.kernel() == plan::SEND || inst.kernel() == plan::RECV)
      return false;
  return true;
}

absl::StatusOr<cudaGraphExec_t>
Executor::capture(const plan::Function &fn, const exec::StepContext &context,
                  int64_t slot) {
  // Thread-local: a call that would synchronize this thread with the
  // stream during the capture fails it, rather than another thread's.
  BRAID_CUDA_CHECK(
      cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  absl::Status body = runBody(fn, context, slot, /*timed=*/false);
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

absl::Status Executor::runCommunication(const Instruction &inst,
                                        int64_t slot) {
  const plan::Kernel kernel = inst.kernel();
  // A WAIT makes the stream wait for the collectives started on the
  // buffers it names (only a communicator on streams starts them; others
  // complete each collective before the instruction returns).
  if (kernel == plan::WAIT)
    return finishInFlight(&inst);
  // Started here and finished by a WAIT (ZeRO's buckets): on a
  // communicator on streams, which runs it beside the compute stream.
  const bool async = streamComm_ && inst.int_attrs().count("async") &&
                     inst.int_attrs().at("async") == 1;
  auto at = [&](int id) { return static_cast<uint8_t *>(address(id, slot)); };
  if (kernel == plan::SEND || kernel == plan::RECV) {
    bool send = kernel == plan::SEND;
    int id = send ? inst.inputs(0) : inst.outputs(0);
    const Buffer &b = plan_.buffers(id);
    int64_t peer = plan::IntAttr(inst, "peer");
    if (!comm_)
      return absl::FailedPreconditionError(absl::StrCat(
          send ? "a send to" : "a receive from", " the ",
          peer > 0 ? "next" : "previous", " rank along '", inst.rank_axis(),
          "' needs the job's other ranks"));
    // The communicator reads and writes device memory once the kernels
    // before have run; a send is a copy (the buffer may be written at once).
    BRAID_RETURN_IF_ERROR(beforeCommunication());
    if (!send)
      return comm_->Recv(inst.rank_axis(), peer, at(id),
                         plan::NumElements(b), b.dtype());
    BRAID_RETURN_IF_ERROR(comm_->Send(inst.rank_axis(), peer, at(id),
                                      plan::NumElements(b), b.dtype()));
    if (!streamComm_)
      return absl::OkStatus();
    // On a stream of the communicator's: the bytes must not be written
    // again before the send is done (waitForSends).
    cudaEvent_t done = nullptr;
    if (!sendEvents_.empty()) {
      done = sendEvents_.back();
      sendEvents_.pop_back();
    } else {
      BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    }
    pendingSends_.push_back({at(id), at(id) + bytes_[id], done});
    return streamComm_->RecordSendsDone(done);
  }
  // ALL_GATHER and REDUCE_SCATTER along `dim`, viewed as [outer, n, inner]:
  // each rank holds the slice of `chunk` = n x inner elements per outer row
  // (x gathered, y scattered), the full tensor `ranks` blocks of it per
  // row. The communicator's buffers are the ranks' blocks one after the
  // other, so with outer > 1 (or x and y sharing bytes) they are laid out
  // through the collective scratch, by strided copies on the stream.
  bool gather = kernel == plan::ALL_GATHER;
  const Buffer &x = plan_.buffers(inst.inputs(0)),
               &y = plan_.buffers(inst.outputs(0));
  const Buffer &slice = gather ? x : y;
  const int64_t ranks = plan::GroupSize(plan_, inst);
  const int64_t element = plan::DTypeBytes(y.dtype());
  int64_t along = plan::IntAttr(inst, "dim"), outer = 1, chunk = 1;
  for (int i = 0; i < slice.shape_size(); ++i)
    (i < along ? outer : chunk) *= slice.shape(i);
  const int64_t count = outer * chunk;
  uint8_t *in = at(inst.inputs(0)), *out = at(inst.outputs(0));
  if (ranks == 1) {
    if (in != out)
      BRAID_CUDA_CHECK(cudaMemcpyAsync(out, in, size_t(count * element),
                                       cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }
  if (!comm_)
    return absl::FailedPreconditionError(absl::StrCat(
        gather ? "an all-gather" : "a reduce-scatter", " over ", ranks,
        " ranks needs the job's other ranks"));
  std::vector<std::string> group(inst.group().begin(), inst.group().end());
  if (gather && inst.inputs(0) == inst.outputs(0)) {
    // In place (ZeRO's parameters): this rank's block of the flat buffer is
    // already there, at its place in the group.
    int64_t block = plan::NumElements(y) / ranks;
    BRAID_RETURN_IF_ERROR(beforeCommunication());
    uint8_t *own = out + groupPlace(inst) * block * element;
    if (!async)
      return comm_->AllGather(group, own, out, block, y.dtype());
    absl::StatusOr<int64_t> handle =
        comm_->StartAllGather(group, own, out, block, y.dtype());
    if (!handle.ok())
      return handle.status();
    inFlight_.push_back({*handle, {inst.outputs(0)}});
    return absl::OkStatus();
  }
  const size_t row = size_t(chunk * element);
  if (collectiveScratchBytes(inst) == 0) {
    BRAID_RETURN_IF_ERROR(beforeCommunication());
    if (gather)
      return comm_->AllGather(group, in, out, count, y.dtype());
    if (!async)
      return comm_->ReduceScatter(group, in, out, count, y.dtype());
    absl::StatusOr<int64_t> handle =
        comm_->StartReduceScatter(group, in, out, count, y.dtype());
    if (!handle.ok())
      return handle.status();
    inFlight_.push_back({*handle, {inst.inputs(0), inst.outputs(0)}});
    return absl::OkStatus();
  }
  uint8_t *scratch = collectiveScratch_;
  if (gather) {
    // scratch [rank][outer][chunk] -> y [outer][rank][chunk].
    BRAID_RETURN_IF_ERROR(beforeCommunication());
    if (absl::Status s = comm_->AllGather(group, in, scratch, count, y.dtype());
        !s.ok())
      return s;
    for (int64_t k = 0; k < ranks; ++k)
      BRAID_CUDA_CHECK(cudaMemcpy2DAsync(
          out + k * chunk * element, size_t(ranks) * row,
          scratch + k * count * element, row, row, size_t(outer),
          cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }
  // x [outer][rank][chunk] -> scratch [rank][outer][chunk], the blocks
  // ordered by the rank they go to.
  for (int64_t k = 0; k < ranks; ++k)
    BRAID_CUDA_CHECK(cudaMemcpy2DAsync(
        scratch + k * count * element, row, in + k * chunk * element,
        size_t(ranks) * row, row, size_t(outer), cudaMemcpyDeviceToDevice,
        stream_));
  BRAID_RETURN_IF_ERROR(beforeCommunication());
  return comm_->ReduceScatter(group, scratch, out, count, y.dtype());
}

absl::Status Executor::runInstruction(const Instruction &inst,
                                      const exec::StepContext &context,
                                      int64_t slot, uint32_t op) {
  switch (inst.kernel()) {
  case plan::SEND:
  case plan::RECV:
  case plan::WAIT:
  case plan::ALL_GATHER:
  case plan::REDUCE_SCATTER:
    return runCommunication(inst, slot);
  default:
    break;
  }
  // Kernels of one dtype throughout (the gradients' sums, zeroing, copies)
  // run in their operands' dtype; the others in the plan's compute dtype,
  // their wide operands (parameter gradients, statistics) f32.
  plan::DType dtype = compute_;
  switch (inst.kernel()) {
  case plan::ZERO:
  case plan::ADD:
  case plan::ALL_REDUCE:
  case plan::COPY:
    dtype = plan_.buffers(inst.outputs(0)).dtype();
    break;
  default:
    break;
  }
  if (dtype == plan::BF16)
    return runTyped<bf16>(inst, context, slot, op);
  if (dtype == plan::F16)
    return runTyped<f16>(inst, context, slot, op);
  return runTyped<float>(inst, context, slot, op);
}

template <typename T>
absl::Status Executor::runTyped(const Instruction &inst,
                                const exec::StepContext &context, int64_t slot,
                                uint32_t op) {
  (void)op;
  auto in = [&](int i) -> const Buffer & {
    return plan_.buffers(inst.inputs(i));
  };
  auto out = [&](int i) -> const Buffer & {
    return plan_.buffers(inst.outputs(i));
  };
  auto x = [&](int i) {
    return static_cast<const T *>(address(inst.inputs(i), slot));
  };
  auto y = [&](int i) {
    return static_cast<T *>(address(inst.outputs(i), slot));
  };
  auto xf = [&](int i) {
    return static_cast<const float *>(address(inst.inputs(i), slot));
  };
  auto yf = [&](int i) {
    return static_cast<float *>(address(inst.outputs(i), slot));
  };
  auto ids = [&](int i) {
    return static_cast<const int32_t *>(address(inst.inputs(i), slot));
  };
  cudaStream_t st = stream_;
  // A slice along the instruction's rank_axis: its first index, the rank's
  // coordinate x the stride attribute (validated by the loader), or 0.
  auto sliceStart = [&](const char *strideAttr) -> int64_t {
    auto it = inst.int_attrs().find(strideAttr);
    return it == inst.int_attrs().end() ? 0 : rankCoordinate(inst) * it->second;
  };
  auto vocabStart = [&]() { return sliceStart("vocab_start_stride"); };
  // Each output that is not its input gets the input's bytes.
  auto copyInputs = [&]() -> absl::Status {
    for (int i = 0; i < inst.outputs_size(); ++i)
      if (inst.inputs(i) != inst.outputs(i))
        if (absl::Status s =
                launched(cudaMemcpyAsync(address(inst.outputs(i), slot),
                                         address(inst.inputs(i), slot),
                                         size_t(bytes_[inst.outputs(i)]),
                                         cudaMemcpyDeviceToDevice, st),
                         inst);
            !s.ok())
          return s;
    return absl::OkStatus();
  };
  switch (inst.kernel()) {
  case plan::ZERO:
    return launched(cudaMemsetAsync(address(inst.outputs(0), slot), 0,
                                    size_t(bytes_[inst.outputs(0)]), st),
                    inst);
  case plan::COPY: {
    // With a rank_axis x goes to this rank's block of y (ZeRO-3: the rank's
    // parameters into the flat buffer they are gathered in).
    if (inst.rank_axis().empty())
      return copyInputs();
    int64_t n = bytes_[inst.inputs(0)];
    return launched(cudaMemcpyAsync(static_cast<uint8_t *>(address(
                                        inst.outputs(0), slot)) +
                                        rankCoordinate(inst) * n,
                                    address(inst.inputs(0), slot), size_t(n),
                                    cudaMemcpyDeviceToDevice, st),
                    inst);
  }
  case plan::ADD:
    return launched(add(x(0), x(1), plan::NumElements(out(0)), y(0), st), inst);
  case plan::EMBEDDING:
    // With a rank_axis the table is this rank's rows of the vocabulary, from
    // vocabStart(); the ids are global.
    return launched(embeddingForwardRange(x(0), ids(1),
                                          plan::NumElements(in(1)), last(in(0)),
                                          vocabStart(), in(0).shape(0), y(0),
                                          st),
                    inst);
  case plan::EMBEDDING_GRAD:
    return launched(embeddingBackwardRange(x(0), ids(1),
                                           plan::NumElements(in(1)),
                                           last(out(0)), vocabStart(),
                                           out(0).shape(0), yf(0), st),
                    inst);
  // out or dy [batch, s, hidden] are positions [start, start + s) of the
  // table: start is 0, or with a rank_axis (sequence parallel) the rank's
  // coordinate x seq_start_stride.
  case plan::POSITION_EMBEDDING:
    return launched(positionEmbeddingForward(
                        x(0) + sliceStart("seq_start_stride") * last(out(0)),
                        out(0).shape(0), out(0).shape(1), last(out(0)), y(0),
                        st),
                    inst);
  case plan::POSITION_EMBEDDING_GRAD:
    return launched(positionEmbeddingBackward(
                        x(0), in(0).shape(0), in(0).shape(1), last(in(0)),
                        yf(0) + sliceStart("seq_start_stride") * last(in(0)),
                        st),
                    inst);
  case plan::LINEAR:
    return gemm_->LinearForward(x(0), x(1),
                                inst.inputs_size() == 3 ? x(2) : nullptr,
                                linearShapeOf(plan_, inst), y(0), st);
  case plan::LINEAR_GRAD_INPUT:
    return gemm_->LinearBackward<T>(nullptr, x(1), x(0),
                                    linearShapeOf(plan_, inst), y(0), nullptr,
                                    nullptr, st);
  case plan::LINEAR_GRAD_WEIGHT:
    return gemm_->LinearBackward<T>(x(0), nullptr, x(1),
                                    linearShapeOf(plan_, inst), nullptr, yf(0),
                                    nullptr, st);
  case plan::BIAS_GRAD:
    return launched(addColumnSums(x(0), rowsOf(in(0)), last(in(0)), yf(0), st),
                    inst);
  case plan::RMS_NORM:
    return launched(rmsNormForward(x(0), x(1), rowsOf(in(0)), last(in(0)),
                                   plan::FloatAttr(inst, "eps"), y(0),
                                   rowStats_, st),
                    inst);
  case plan::RMS_NORM_GRAD: {
    int64_t rows = rowsOf(in(0)), d = last(in(0));
    double eps = plan::FloatAttr(inst, "eps");
    if (absl::Status s = launched(
            rmsNormStatistics(x(0), rows, d, eps, rowStats_, st), inst);
        !s.ok())
      return s;
    return launched(
        rmsNormBackward(x(0), x(1), rowStats_, x(2), rows, d, y(0), yf(1), st),
        inst);
  }
  case plan::LAYER_NORM:
    return launched(layerNormForward(x(0), x(1), x(2), rowsOf(in(0)),
                                     last(in(0)), plan::FloatAttr(inst, "eps"),
                                     y(0), rowStats_, rowStats_ + rowsOf(in(0)),
                                     st),
                    inst);
  case plan::LAYER_NORM_GRAD: {
    int64_t rows = rowsOf(in(0)), d = last(in(0));
    double eps = plan::FloatAttr(inst, "eps");
    float *mean = rowStats_, *rstd = rowStats_ + rows;
    if (absl::Status s = launched(
            layerNormStatistics(x(0), rows, d, eps, mean, rstd, st), inst);
        !s.ok())
      return s;
    return launched(layerNormBackward(x(0), x(1), mean, rstd, x(2), rows, d,
                                      y(0), yf(1), yf(2), st),
                    inst);
  }
  case plan::ROPE:
  case plan::ROPE_GRAD: {
    int64_t hd = plan::IntAttr(inst, "head_dim");
    auto f = inst.kernel() == plan::ROPE ? ropeForward<T> : ropeBackward<T>;
    return launched(f(x(0), in(0).shape(0), in(0).shape(1), in(0).shape(2) / hd,
                      hd, plan::FloatAttr(inst, "theta"), y(0), st),
                    inst);
  }
  case plan::ATTENTION: {
    cpu::AttentionShape s = attentionShape(plan_, inst, rankCoordinate(inst));
    if (inst.outputs_size() < 2)
      return absl::FailedPreconditionError(
          "ATTENTION keeps no log-sum-exp (recompile the plan)");
    // bf16 and fp16 on tensor cores where the kernels take the shape (head
    // dimensions 64 and 128), else in float on CUDA cores.
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
      if (attentionForwardOnTensorCores(x(0), x(1), x(2), y(0), s))
        return launched(
            attentionForwardTensorCores(x(0), x(1), x(2), s, y(0), yf(1), st),
            inst);
    return launched(attentionForward(x(0), x(1), x(2), s, y(0), yf(1), st),
                    inst);
  }
  case plan::ATTENTION_GRAD: {
    cpu::AttentionShape s = attentionShape(plan_, inst, rankCoordinate(inst));
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
      if (attentionBackwardOnTensorCores(x(0), x(1), x(2), x(3), x(4), y(0),
                                         y(1), y(2), s))
        return launched(attentionBackwardTensorCores(
                            x(0), x(1), x(2), x(3), xf(5), x(4), s, y(0), y(1),
                            y(2), attentionRows_, st),
                        inst);
    return launched(attentionBackward(x(0), x(1), x(2), x(3), xf(5), x(4), s,
                                      y(0), y(1), y(2), attentionRows_, st),
                    inst);
  }
  case plan::QKV_SPLIT:
  case plan::QKV_CONCAT: {
    bool split = inst.kernel() == plan::QKV_SPLIT;
    const Buffer &fused = split ? in(0) : out(0);
    cpu::QkvShape s{rowsOf(fused), plan::IntAttr(inst, "heads"),
                    plan::IntAttr(inst, "kv_heads"),
                    plan::IntAttr(inst, "head_dim"),
                    plan::IntAttr(inst, "per_head") != 0};
    if (split)
      return launched(qkvSplitForward(x(0), s, y(0), y(1), y(2), st), inst);
    return launched(qkvSplitBackward(x(0), x(1), x(2), s, y(0), st), inst);
  }
  case plan::SWIGLU:
    if (inst.inputs_size() == 1) // packed [gate | up]
      return launched(
          swigluPackedForward(x(0), rowsOf(out(0)), last(out(0)), y(0), st),
          inst);
    return launched(
        swigluForward(x(0), x(1), plan::NumElements(in(0)), y(0), st), inst);
  case plan::SWIGLU_GRAD:
    if (inst.inputs_size() == 2) // packed [gate | up], dy
      return launched(swigluPackedBackward(x(0), x(1), rowsOf(in(1)),
                                           last(in(1)), y(0), st),
                      inst);
    return launched(swigluBackward(x(0), x(1), x(2), plan::NumElements(in(0)),
                                   y(0), y(1), st),
                    inst);
  case plan::GELU:
    return launched(geluForward(x(0), plan::NumElements(in(0)),
                                plan::IntAttr(inst, "tanh") != 0, y(0), st),
                    inst);
  case plan::GELU_GRAD:
    return launched(geluBackward(x(0), x(1), plan::NumElements(in(0)),
                                 plan::IntAttr(inst, "tanh") != 0, y(0), st),
                    inst);
  case plan::DROPOUT: {
    int64_t n = plan::NumElements(in(0)),
            samples = in(0).shape_size() ? in(0).shape(0) : 1;
    int64_t perSample = n / std::max<int64_t>(samples, 1);
    // Rows from the micro-batch's first sample, which the call's values
    // hold.
    cpu::GlobalIndexing at{samples, perSample, perSample, 0, 0};
    if (!inst.rank_axis().empty()) {
      // Sequence parallel: the rank holds a slice of each sample's elements,
      // the axis' ranks the whole sample.
      at.globalCols =
          perSample * plan::AxisSize(plan_.mesh(), inst.rank_axis());
      at.colOffset = sliceStart("col_offset_stride");
    }
    return launched(dropoutForward(x(0), at, plan::FloatAttr(inst, "rate"),
                                   uint32_t(plan::IntAttr(inst, "rng_id")),
                                   callValues_, y(0), st),
                    inst);
  }
  case plan::CROSS_ENTROPY_MAX:
    return launched(crossEntropyRowMax(x(0), rowsOf(in(0)), last(in(0)), y(0),
                                       st),
                    inst);
  case plan::CROSS_ENTROPY_PARTIAL:
    return launched(crossEntropyPartial(x(0), ids(1), x(2), rowsOf(in(0)),
                                        last(in(0)), vocabStart(),
                                        plan::IntAttr(inst, "ignore_index"),
                                        yf(0), st),
                    inst);
  case plan::CROSS_ENTROPY_FINISH:
    // (summed, global max, targets) -> (loss, lse), the same on every rank.
    return launched(crossEntropyFinish(
                        xf(0), x(1), ids(2), plan::NumElements(in(1)),
                        plan::IntAttr(inst, "ignore_index"), yf(1),
                        lossTerms_, yf(0), counted_, st),
                    inst);
  case plan::CROSS_ENTROPY:
  case plan::CROSS_ENTROPY_GRAD: {
    // The log-sum-exp: the plan's buffer when it keeps one (the forward's
    // second output, the gradient's fourth input); otherwise computed again
    // in backward. The count of rows is computed again either way.
    int64_t vocab = last(in(0)), rows = rowsOf(in(0));
    int64_t ignore = plan::IntAttr(inst, "ignore_index");
    if (inst.kernel() == plan::CROSS_ENTROPY)
      return launched(
          crossEntropyForward(x(0), ids(1), rows, vocab, ignore,
                              inst.outputs_size() == 2 ? yf(1) : rowStats_,
                              lossTerms_, yf(0), counted_, st),
          inst);
    const float *lse = rowStats_;
    if (inst.inputs_size() == 4) {
      lse = xf(3);
      if (absl::Status s =
              launched(countTargets(ids(1), rows, ignore, counted_, st), inst);
          !s.ok())
        return s;
    } else if (absl::Status s =
                   launched(crossEntropyForward(x(0), ids(1), rows, vocab,
                                                ignore, rowStats_, lossTerms_,
                                                lossScratch_, counted_, st),
                            inst);
               !s.ok()) {
      return s;
    }
    // With a kept log-sum-exp on a slice of the vocabulary, the global one
    // of CROSS_ENTROPY_FINISH and the slice's first id.
    return launched(crossEntropyBackward(x(0), ids(1), lse, xf(2), rows, vocab,
                                         ignore, counted_, y(0), st,
                                         vocabStart()),
                    inst);
  }
  case plan::GRAD_NORM: {
    // Over a group's ranks the first split_inputs gradients are this rank's
    // slices, the others replicated on `copies` ranks of the group: each
    // rank adds its slices' squares (sumSquares_[0]) and its share of the
    // replicated ones' (sumSquares_[1]), and the group's sum of those is
    // the squared norm. Without a group every input counts once.
    const bool grouped = inst.group_size() > 0;
    const int64_t ranks = plan::GroupSize(plan_, inst);
    const int64_t split =
        grouped ? plan::IntAttr(inst, "split_inputs") : inst.inputs_size();
    if (grouped && ranks > 1 && !comm_)
      return absl::FailedPreconditionError(absl::StrCat(
          "a gradient norm over ", ranks, " ranks needs the job's other "
          "ranks"));
    if (absl::Status s = launched(
            cudaMemsetAsync(sumSquares_, 0, 2 * sizeof(double), st), inst);
        !s.ok())
      return s;
    for (int i = 0; i < inst.inputs_size(); ++i)
      if (absl::Status s = launched(
              gradSumOfSquares(xf(i), plan::NumElements(in(i)),
                               sumSquares_ + (i < split ? 0 : 1), st),
              inst);
          !s.ok())
        return s;
    if (grouped) {
      auto copies = inst.int_attrs().find("replicated_copies");
      double share = 1.0 / double(copies == inst.int_attrs().end()
                                      ? ranks
                                      : copies->second);
      if (absl::Status s =
              launched(addScaled(sumSquares_ + 1, share, sumSquares_, st),
                       inst);
          !s.ok())
        return s;
      if (ranks > 1) {
        BRAID_RETURN_IF_ERROR(beforeCommunication());
        std::vector<std::string> group(inst.group().begin(),
                                       inst.group().end());
        if (absl::Status s = comm_->AllReduce(group, sumSquares_, 1,
                                              plan::F64, exec::Reduction::kSum);
            !s.ok())
          return s;
      }
    }
    // Unscaled by the loss scale (fp16: Backend::SetLossScale), which the
    // call's values hold.
    return launched(gradClip(sumSquares_, plan::FloatAttr(inst, "max_norm"),
                             yf(0), yf(1), callValues_, st),
                    inst);
  }
  case plan::ALL_REDUCE: {
    // Over the ranks of the group's axes (data parallelism's gradients):
    // the stream's kernels finish first, since the communicator reads the
    // buffers once they hold the sums' inputs.
    int64_t ranks = 1;
    for (const std::string &axis : inst.group())
      ranks *= plan::AxisSize(plan_.mesh(), axis);
    if (ranks > 1 && !comm_)
      return absl::FailedPreconditionError(absl::StrCat(
          "an all-reduce over ", ranks, " ranks needs the job's other ranks"));
    std::vector<std::string> group(inst.group().begin(), inst.group().end());
    if (absl::Status s = copyInputs(); !s.ok() || ranks == 1)
      return s;
    BRAID_RETURN_IF_ERROR(beforeCommunication());
    const bool max =
        inst.int_attrs().count("max") && inst.int_attrs().at("max") != 0;
    if (streamComm_ && inst.int_attrs().count("async") &&
        inst.int_attrs().at("async") == 1) {
      // In place on the communicator's stream, beside the compute stream,
      // until a WAIT naming the buffer (the gradients' sums of the step's
      // last micro-batch, overlapping the rest of its backward).
      for (int i = 0; i < inst.outputs_size(); ++i) {
        absl::StatusOr<int64_t> handle =
            comm_->StartAllReduce(group, address(inst.outputs(i), slot),
                                  plan::NumElements(out(i)), out(i).dtype());
        if (!handle.ok())
          return handle.status();
        inFlight_.push_back({*handle, {inst.outputs(i)}});
      }
      return absl::OkStatus();
    }
    for (int i = 0; i < inst.outputs_size(); ++i)
      if (absl::Status s = comm_->AllReduce(
              group, address(inst.outputs(i), slot),
              plan::NumElements(out(i)), out(i).dtype(),
              max ? exec::Reduction::kMax : exec::Reduction::kSum);
          !s.ok())
        return s;
    return absl::OkStatus();
  }
  case plan::ADAMW: {
    // lr and step are read on the device (a graph replays with the values
    // written since); the host's copies (Write) check them here.
    auto lr = hostScalars_.find(inst.inputs(4));
    auto step = hostScalars_.find(inst.inputs(5));
    if (lr == hostScalars_.end() || step == hostScalars_.end())
      return absl::FailedPreconditionError(
          "ADAMW: the learning rate and the step must be written with Write "
          "before the update runs");
    if (!(step->second >= 1))
      return absl::InvalidArgumentError(
          absl::StrCat("ADAMW: the step is ", step->second, ", not >= 1"));
    if (in(4).dtype() != plan::F32 || in(5).dtype() != plan::I64)
      return absl::InvalidArgumentError(
          "ADAMW: the learning rate must be f32 and the step i64");
    // With a rank_axis (ZeRO) the gradient and moments are this rank's
    // block of the flat parameters: block c of the axis' ranks. A buffer of
    // all the blocks (fp32's parameters, mixed precision's low-precision
    // copy) is updated at block c; mixed precision's masters hold only
    // this rank's block.
    int64_t n = plan::NumElements(in(2));
    auto block = [&](int output) {
      return plan::NumElements(out(output)) > n ? rankCoordinate(inst) * n : 0;
    };
    T *copy = nullptr;
    if (inst.outputs_size() == 4)
      copy = y(3) + block(3);
    else if (compute_ != plan::F32)
      return absl::FailedPreconditionError(
          "ADAMW of a mixed-precision plan without master weights");
    return launched(
        adamwStep<T>(
            yf(0) + block(0), xf(1), yf(1), yf(2), n, xf(4),
            plan::FloatAttr(inst, "beta1"), plan::FloatAttr(inst, "beta2"),
            plan::FloatAttr(inst, "eps"), plan::FloatAttr(inst, "weight_decay"),
            static_cast<const int64_t *>(address(inst.inputs(5), slot)), xf(6),
            copy, st),
        inst);
  }
  default:
    return absl::UnimplementedError(
        absl::StrCat("kernel ", plan::Kernel_Name(inst.kernel()),
                     " is not implemented on CUDA"));
  }
}

} // namespace braid::cuda
