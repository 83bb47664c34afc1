//===- KernelHandlers.cpp - One handler per kernel of a plan --------------===//
//
// The CUDA executor's kernels: for each row of runtime/plan/Kernels.def a
// handler run_NAME<T>, which launches the kernel library's kernels (or
// cuBLASLt's product, or the communicator) on the executor's stream for one
// instruction in dtype T, and, where its kernel needs them, what Create
// prepares for it (need<K>: workspaces, token-id checks, GEMM algorithms)
// and what Create refuses (refusal<K>); the shapes they launch with are
// decoded as the CPU executor's are (exec::ExecutorBase). The tables that
// dispatch to them are generated from Kernels.def at the end of the file: a
// row without a handler here does not compile. Kernels that differ only in
// direction (ROPE and ROPE_GRAD, SEND and RECV, ...) share a helper taking a
// bool.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Executor.h"

#include "runtime/common/Status.h"

#include "runtime/cuda/Attention.h"
#include "runtime/cuda/Check.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/Generation.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/plan/KernelParams.h"
#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace braid::cuda {
namespace {

using plan::Buffer;
using plan::Instruction;


absl::Status launched(cudaError_t e, const Instruction &inst) {
  if (e == cudaSuccess)
    return absl::OkStatus();
  return absl::InternalError(absl::StrCat(plan::Kernel_Name(inst.kernel()),
                                          ": ", cudaGetErrorString(e)));
}

/// ROPE (`forward`) and ROPE_GRAD of x [batch, seq, heads x head_dim]; with
/// `positions` (their second input: packed documents), ROPE_AT's rotation
/// or its transpose at them.
template <typename T>
cudaError_t rope(const Instruction &inst, const Buffer &x, const T *in,
                 bool forward, T *out, cudaStream_t st,
                 const int32_t *positions = nullptr) {
  const plan::RopeParams p = plan::DecodeRope(inst);
  if (positions)
    return (forward ? ropeAtForward<T> : ropeAtBackward<T>)(
        in, positions, x.shape(0), x.shape(1), x.shape(2) / p.headDim,
        p.headDim, p.theta, out, st);
  auto f = forward ? ropeForward<T> : ropeBackward<T>;
  return f(in, x.shape(0), x.shape(1), x.shape(2) / p.headDim, p.headDim,
           p.theta, out, st);
}

} // namespace

/// An instruction's operands in dtype T (wide ones f32, ids i32), copy
/// `slot` of each buffer, and the stream its kernels run on.
template <typename T> struct Executor::Call {
  const Executor &e;
  const Instruction &inst;
  int64_t slot;
  cudaStream_t st;

  const Buffer &in(int i) const { return e.plan_.buffers(inst.inputs(i)); }
  const Buffer &out(int i) const { return e.plan_.buffers(inst.outputs(i)); }
  const T *x(int i) const {
    return static_cast<const T *>(e.address(inst.inputs(i), slot));
  }
  T *y(int i) const {
    return static_cast<T *>(e.address(inst.outputs(i), slot));
  }
  const float *xf(int i) const {
    return static_cast<const float *>(e.address(inst.inputs(i), slot));
  }
  float *yf(int i) const {
    return static_cast<float *>(e.address(inst.outputs(i), slot));
  }
  const int32_t *ids(int i) const {
    return static_cast<const int32_t *>(e.address(inst.inputs(i), slot));
  }
  /// A slice along the instruction's rank_axis: its first index, the rank's
  /// coordinate x the stride attribute (validated by the loader), or 0.
  int64_t sliceStart(const char *strideAttr) const {
    return e.sliceStart(inst, strideAttr);
  }
  int64_t vocabStart() const { return sliceStart("vocab_start_stride"); }
};

// What Create prepares and refuses: nothing, unless specialised beside a
// handler below.
template <plan::Kernel K> void Executor::need(const Instruction &, Needs &) {}
template <plan::Kernel K> std::string Executor::refusal(const Instruction &) {
  return "";
}

void Executor::needTokenIds(const Instruction &inst, const Buffer &table,
                            bool embedding, Needs &needs) {
  // Token ids index tables on the device, where nothing checks them: Write
  // checks them against the smallest table that reads them.
  int64_t vocab = embedding ? table.shape(0) : plan::LastDim(table);
  // A slice of the vocabulary: the ids are global.
  if (embedding ? !inst.rank_axis().empty()
                : plan::HasSliceStride(inst, "vocab_start_stride"))
    vocab *= plan::AxisSize(plan_.mesh(), inst.rank_axis());
  IdCheck &check = idChecks_[inst.inputs(1)];
  check.vocab = check.vocab ? std::min(check.vocab, vocab) : vocab;
  if (!embedding) {
    check.ignore = plan::DecodeCrossEntropy(inst).ignoreIndex;
    check.ignorable = true;
    needs.statRows = std::max(needs.statRows, plan::RowsOf(table));
  }
}

absl::Status Executor::copyInputs(const Instruction &inst, int64_t slot) {
  for (int i = 0; i < inst.outputs_size(); ++i)
    if (inst.inputs(i) != inst.outputs(i))
      BRAID_RETURN_IF_ERROR(
          launched(cudaMemcpyAsync(address(inst.outputs(i), slot),
                                   address(inst.inputs(i), slot),
                                   size_t(bytes_[inst.outputs(i)]),
                                   cudaMemcpyDeviceToDevice, stream_),
                   inst));
  return absl::OkStatus();
}

//===- Embeddings ---------------------------------------------------------===//

// With a rank_axis the table is this rank's rows of the vocabulary, from
// vocabStart(); the ids are global.
template <typename T> auto Executor::run_EMBEDDING(const Call<T> &c) {
  return launched(embeddingForwardRange(c.x(0), c.ids(1),
                                        plan::NumElements(c.in(1)),
                                        plan::LastDim(c.in(0)), c.vocabStart(),
                                        c.in(0).shape(0), c.y(0), c.st),
                  c.inst);
}
template <>
void Executor::need<plan::EMBEDDING>(const Instruction &inst, Needs &needs) {
  needTokenIds(inst, plan_.buffers(inst.inputs(0)), /*embedding=*/true, needs);
}

template <typename T> auto Executor::run_EMBEDDING_GRAD(const Call<T> &c) {
  return launched(
      embeddingBackwardRange(c.x(0), c.ids(1), plan::NumElements(c.in(1)),
                             plan::LastDim(c.out(0)), c.vocabStart(),
                             c.out(0).shape(0), c.yf(0), c.st),
      c.inst);
}
template <>
void Executor::need<plan::EMBEDDING_GRAD>(const Instruction &inst,
                                          Needs &needs) {
  needTokenIds(inst, plan_.buffers(inst.outputs(0)), /*embedding=*/true, needs);
}

// out or dy [batch, s, hidden] are positions [start, start + s) of the
// table: start is 0, or with a rank_axis (sequence parallel) the rank's
// coordinate x seq_start_stride. With at_positions (packed documents) the
// ids [batch, S] hold every row's position, the whole sequence's: rows
// [start, start + s) of it are this rank's.
template <typename T> auto Executor::run_POSITION_EMBEDDING(const Call<T> &c) {
  const int64_t start = c.sliceStart("seq_start_stride");
  const int64_t hidden = plan::LastDim(c.out(0));
  if (plan::DecodePositionEmbedding(c.inst).atPositions)
    return launched(positionEmbeddingAtForward(
                        c.x(0), c.ids(1), c.out(0).shape(0), c.out(0).shape(1),
                        c.in(1).shape(1), start, hidden, c.y(0), c.st),
                    c.inst);
  return launched(positionEmbeddingForward(c.x(0) + start * hidden,
                                           c.out(0).shape(0), c.out(0).shape(1),
                                           hidden, c.y(0), c.st),
                  c.inst);
}
template <>
void Executor::need<plan::POSITION_EMBEDDING>(const Instruction &inst,
                                              Needs &) {
  // Positions index the table on the device, where nothing checks them:
  // Write checks them against its rows, as token ids against a vocabulary.
  if (!plan::DecodePositionEmbedding(inst).atPositions)
    return;
  const int64_t rows = plan_.buffers(inst.inputs(0)).shape(0);
  IdCheck &check = idChecks_[inst.inputs(1)];
  check.vocab = check.vocab ? std::min(check.vocab, rows) : rows;
}
template <typename T>
auto Executor::run_POSITION_EMBEDDING_GRAD(const Call<T> &c) {
  const int64_t start = c.sliceStart("seq_start_stride");
  const int64_t hidden = plan::LastDim(c.in(0));
  if (c.inst.inputs_size() == 2)
    return launched(positionEmbeddingAtBackward(
                        c.x(0), c.ids(1), c.in(0).shape(0), c.in(0).shape(1),
                        c.in(1).shape(1), start, hidden, c.yf(0), c.st),
                    c.inst);
  return launched(positionEmbeddingBackward(c.x(0), c.in(0).shape(0),
                                            c.in(0).shape(1), hidden,
                                            c.yf(0) + start * hidden, c.st),
                  c.inst);
}
template <>
void Executor::need<plan::POSITION_EMBEDDING_GRAD>(const Instruction &inst,
                                                   Needs &) {
  // As the forward's: the positions index dtable's rows.
  if (inst.inputs_size() != 2)
    return;
  const int64_t rows = plan_.buffers(inst.outputs(0)).shape(0);
  IdCheck &check = idChecks_[inst.inputs(1)];
  check.vocab = check.vocab ? std::min(check.vocab, rows) : rows;
}

//===- Linear layers (cuBLASLt, its algorithms chosen at Create) ----------===//

template <typename T> auto Executor::run_LINEAR(const Call<T> &c) {
  return gemm_->LinearForward(c.x(0), c.x(1),
                              c.inst.inputs_size() == 3 ? c.x(2) : nullptr,
                              linearForwardShape(c.inst), c.y(0), c.st);
}
template <>
void Executor::need<plan::LINEAR>(const Instruction &inst, Needs &needs) {
  needs.gemms.push_back({linearForwardShape(inst), inst.inputs_size() == 3});
}

template <typename T> auto Executor::run_LINEAR_GRAD_INPUT(const Call<T> &c) {
  return gemm_->LinearBackward<T>(nullptr, c.x(1), c.x(0),
                                  linearGradInputShape(c.inst), c.y(0), nullptr,
                                  nullptr, c.st);
}
template <>
void Executor::need<plan::LINEAR_GRAD_INPUT>(const Instruction &inst,
                                             Needs &needs) {
  needs.gemms.push_back({linearGradInputShape(inst), false});
}

template <typename T> auto Executor::run_LINEAR_GRAD_WEIGHT(const Call<T> &c) {
  return gemm_->LinearBackward<T>(c.x(0), nullptr, c.x(1),
                                  linearGradWeightShape(c.inst), nullptr,
                                  c.yf(0), nullptr, c.st);
}
template <>
void Executor::need<plan::LINEAR_GRAD_WEIGHT>(const Instruction &inst,
                                              Needs &needs) {
  needs.gemms.push_back({linearGradWeightShape(inst), false});
}

template <typename T> auto Executor::run_BIAS_GRAD(const Call<T> &c) {
  return launched(addColumnSums(c.x(0), plan::RowsOf(c.in(0)),
                                plan::LastDim(c.in(0)), c.yf(0), c.st),
                  c.inst);
}

//===- Norms: their rows' statistics in rowStats_ -------------------------===//

template <typename T> auto Executor::run_RMS_NORM(const Call<T> &c) {
  return launched(rmsNormForward(c.x(0), c.x(1), plan::RowsOf(c.in(0)),
                                 plan::LastDim(c.in(0)),
                                 plan::DecodeNorm(c.inst).eps, c.y(0),
                                 rowStats_, c.st),
                  c.inst);
}
template <>
void Executor::need<plan::RMS_NORM>(const Instruction &inst, Needs &needs) {
  needs.statRows =
      std::max(needs.statRows, plan::RowsOf(plan_.buffers(inst.inputs(0))));
}

template <typename T> auto Executor::run_RMS_NORM_GRAD(const Call<T> &c) {
  int64_t rows = plan::RowsOf(c.in(0)), d = plan::LastDim(c.in(0));
  double eps = plan::DecodeNorm(c.inst).eps;
  BRAID_RETURN_IF_ERROR(launched(
      rmsNormStatistics(c.x(0), rows, d, eps, rowStats_, c.st), c.inst));
  return launched(rmsNormBackward(c.x(0), c.x(1), rowStats_, c.x(2), rows, d,
                                  c.y(0), c.yf(1), c.st),
                  c.inst);
}
template <>
void Executor::need<plan::RMS_NORM_GRAD>(const Instruction &inst,
                                         Needs &needs) {
  needs.statRows =
      std::max(needs.statRows, plan::RowsOf(plan_.buffers(inst.inputs(0))));
}

template <typename T> auto Executor::run_LAYER_NORM(const Call<T> &c) {
  int64_t rows = plan::RowsOf(c.in(0));
  return launched(layerNormForward(c.x(0), c.x(1), c.x(2), rows,
                                   plan::LastDim(c.in(0)),
                                   plan::DecodeNorm(c.inst).eps, c.y(0),
                                   rowStats_, rowStats_ + rows, c.st),
                  c.inst);
}
template <>
void Executor::need<plan::LAYER_NORM>(const Instruction &inst, Needs &needs) {
  needs.statRows =
      std::max(needs.statRows, plan::RowsOf(plan_.buffers(inst.inputs(0))));
}

template <typename T> auto Executor::run_LAYER_NORM_GRAD(const Call<T> &c) {
  int64_t rows = plan::RowsOf(c.in(0)), d = plan::LastDim(c.in(0));
  double eps = plan::DecodeNorm(c.inst).eps;
  float *mean = rowStats_, *rstd = rowStats_ + rows;
  BRAID_RETURN_IF_ERROR(launched(
      layerNormStatistics(c.x(0), rows, d, eps, mean, rstd, c.st), c.inst));
  return launched(layerNormBackward(c.x(0), c.x(1), mean, rstd, c.x(2), rows, d,
                                    c.y(0), c.yf(1), c.yf(2), c.st),
                  c.inst);
}
template <>
void Executor::need<plan::LAYER_NORM_GRAD>(const Instruction &inst,
                                           Needs &needs) {
  needs.statRows =
      std::max(needs.statRows, plan::RowsOf(plan_.buffers(inst.inputs(0))));
}

//===- Attention ----------------------------------------------------------===//

template <typename T> auto Executor::run_ROPE(const Call<T> &c) {
  return launched(rope(c.inst, c.in(0), c.x(0), /*forward=*/true, c.y(0), c.st,
                       c.inst.inputs_size() == 2 ? c.ids(1) : nullptr),
                  c.inst);
}
template <typename T> auto Executor::run_ROPE_GRAD(const Call<T> &c) {
  return launched(rope(c.inst, c.in(0), c.x(0), /*forward=*/false, c.y(0), c.st,
                       c.inst.inputs_size() == 2 ? c.ids(1) : nullptr),
                  c.inst);
}

namespace {

template <typename T> constexpr bool kTensorCoreType =
    std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
template <typename T> CudnnAttention::Type cudnnType() {
  return std::is_same_v<T, bf16> ? CudnnAttention::Type::BF16
                                 : CudnnAttention::Type::F16;
}

/// Braid's forward: on tensor cores where the kernels take the shape (bf16
/// and fp16, head dimensions 64 and 128), else in float on CUDA cores.
template <typename T>
cudaError_t ownAttentionForward(const T *q, const T *k, const T *v,
                                const cpu::AttentionShape &s, T *out,
                                float *lse, cudaStream_t st) {
  if constexpr (kTensorCoreType<T>)
    if (attentionForwardOnTensorCores(q, k, v, out, s))
      return attentionForwardTensorCores(q, k, v, s, out, lse, st);
  return attentionForward(q, k, v, s, out, lse, st);
}

/// Braid's backward, the same way; `rows` is its workspace.
template <typename T>
cudaError_t ownAttentionBackward(const T *q, const T *k, const T *v,
                                 const T *out, const float *lse, const T *dout,
                                 const cpu::AttentionShape &s, T *dq, T *dk,
                                 T *dv, float *rows, cudaStream_t st) {
  if constexpr (kTensorCoreType<T>)
    if (attentionBackwardOnTensorCores(q, k, v, out, dout, dq, dk, dv, s))
      return attentionBackwardTensorCores(q, k, v, out, lse, dout, s, dq, dk,
                                          dv, rows, st);
  return attentionBackward(q, k, v, out, lse, dout, s, dq, dk, dv, rows, st);
}

} // namespace

Executor::AttentionKey Executor::attentionKey(const cpu::AttentionShape &s) {
  return {s.batch,  s.seq,        s.heads,       s.kvHeads,
          s.headDim, s.scale,     s.causal,      s.headOffset,
          s.kvHeadOffset};
}

const Executor::AttentionChoice *
Executor::attentionChoice(const cpu::AttentionShape &s) const {
  if (attentionChoices_.empty() || s.positions || s.alibi)
    return nullptr;
  auto it = attentionChoices_.find(attentionKey(s));
  return it == attentionChoices_.end() ? nullptr : &it->second;
}

// (q, k, v[, positions]) -> (out, lse); with documents (packed documents)
// the positions, the last input, are read on the device.
template <typename T> auto Executor::run_ATTENTION(const Call<T> &c) {
  cpu::AttentionShape s = attentionShape(c.inst);
  if (c.inst.outputs_size() < 2)
    return absl::FailedPreconditionError(
        "ATTENTION keeps no log-sum-exp (recompile the plan)");
  if (plan::DecodeAttention(c.inst).documents)
    s.positions = c.ids(c.inst.inputs_size() - 1);
  if constexpr (kTensorCoreType<T>)
    if (const AttentionChoice *choice = attentionChoice(s);
        choice && choice->cudnnForward)
      return cudnn_->Forward(c.x(0), c.x(1), c.x(2), s, cudnnType<T>(), c.y(0),
                             c.yf(1), cudnnWorkspace_, c.st);
  return launched(ownAttentionForward(c.x(0), c.x(1), c.x(2), s, c.y(0),
                                      c.yf(1), c.st),
                  c.inst);
}
template <>
void Executor::need<plan::ATTENTION>(const Instruction &inst, Needs &needs) {
  if (!plan::DecodeAttention(inst).documents)
    needs.attentions.push_back({attentionShape(inst), false});
}

// (q, k, v, out, dout, lse[, positions]) -> (dq, dk, dv), its rows in
// attentionRows_; positions with documents.
template <typename T> auto Executor::run_ATTENTION_GRAD(const Call<T> &c) {
  cpu::AttentionShape s = attentionShape(c.inst);
  if (plan::DecodeAttention(c.inst).documents)
    s.positions = c.ids(6);
  if constexpr (kTensorCoreType<T>)
    if (const AttentionChoice *choice = attentionChoice(s);
        choice && choice->cudnnBackward)
      return cudnn_->Backward(c.x(0), c.x(1), c.x(2), c.x(3), c.xf(5), c.x(4),
                              s, cudnnType<T>(), c.y(0), c.y(1), c.y(2),
                              cudnnWorkspace_, c.st);
  return launched(ownAttentionBackward(c.x(0), c.x(1), c.x(2), c.x(3), c.xf(5),
                                       c.x(4), s, c.y(0), c.y(1), c.y(2),
                                       attentionRows_, c.st),
                  c.inst);
}
template <>
void Executor::need<plan::ATTENTION_GRAD>(const Instruction &inst,
                                          Needs &needs) {
  needs.attentionRows = std::max(
      needs.attentionRows,
      attentionBackwardWorkspaceBytes(attentionShape(inst),
                                      /*tensorCores=*/compute_ != plan::F32) /
          int64_t(sizeof(float)));
  if (!plan::DecodeAttention(inst).documents)
    needs.attentions.push_back({attentionShape(inst), true});
}
template <>
std::string Executor::refusal<plan::ATTENTION_GRAD>(const Instruction &inst) {
  // With documents the positions follow the log-sum-exp: 7 inputs.
  const int needed = plan::DecodeAttention(inst).documents ? 7 : 6;
  return inst.inputs_size() < needed ? "ATTENTION_GRAD without the forward's "
                                       "log-sum-exp (recompile the plan)"
                                     : "";
}

namespace {

/// "b8 s2048 h16/4 d128 causal": an attention shape in a note.
std::string describe(const cpu::AttentionShape &s) {
  return absl::StrFormat("b%d s%d h%d/%d d%d%s", s.batch, s.seq, s.heads,
                         s.kvHeads, s.headDim, s.causal ? " causal" : "");
}

absl::Status launchStatus(cudaError_t e, const char *what) {
  return e == cudaSuccess ? absl::OkStatus()
                          : absl::InternalError(absl::StrCat(
                                what, ": ", cudaGetErrorString(e)));
}

/// Milliseconds per call of `launch` on `stream`: two calls to warm up,
/// then the mean of five, timed by events.
template <typename Launch>
absl::StatusOr<double> timeCalls(Launch &&launch, cudaStream_t stream) {
  for (int i = 0; i < 2; ++i)
    BRAID_RETURN_IF_ERROR(launch());
  cudaEvent_t start = nullptr, stop = nullptr;
  BRAID_CUDA_CHECK(cudaEventCreate(&start));
  if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
    cudaEventDestroy(start);
    return launchStatus(e, "cudaEventCreate");
  }
  constexpr int kCalls = 5;
  absl::Status status = launchStatus(cudaEventRecord(start, stream), "event");
  for (int i = 0; i < kCalls && status.ok(); ++i)
    status = launch();
  if (status.ok())
    status = launchStatus(cudaEventRecord(stop, stream), "event");
  if (status.ok())
    status = launchStatus(cudaEventSynchronize(stop), "event");
  float ms = 0;
  if (status.ok())
    status = launchStatus(cudaEventElapsedTime(&ms, start, stop), "event");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!status.ok())
    return status;
  return double(ms) / kCalls;
}

} // namespace

absl::Status Executor::prepareAttention(const Needs &needs) {
  // fp32 attention runs Braid's exact kernels.
  if ((compute_ != plan::BF16 && compute_ != plan::F16) ||
      needs.attentions.empty())
    return absl::OkStatus();
  const char *env = std::getenv("BRAID_ATTENTION");
  const std::string mode = env && *env ? env : "auto";
  if (mode != "auto" && mode != "braid" && mode != "cudnn")
    return absl::InvalidArgumentError(absl::StrCat(
        "BRAID_ATTENTION is 'auto', 'braid' or 'cudnn', not '", mode, "'"));
  if (mode == "braid") {
    notes_.push_back("attention: Braid's kernels (BRAID_ATTENTION=braid)");
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<CudnnAttention>> cudnn =
      CudnnAttention::Create();
  if (!cudnn.ok()) {
    if (mode == "cudnn")
      return absl::FailedPreconditionError(absl::StrCat(
          "BRAID_ATTENTION=cudnn: ", cudnn.status().message()));
    notes_.push_back(absl::StrCat("attention: Braid's kernels (no cuDNN: ",
                                  cudnn.status().message(), ")"));
    return absl::OkStatus();
  }
  const CudnnAttention::Type type = compute_ == plan::BF16
                                        ? CudnnAttention::Type::BF16
                                        : CudnnAttention::Type::F16;
  const char *typeName = compute_ == plan::BF16 ? "bf16" : "fp16";
  // Each shape once, with the directions the plan runs it in.
  struct Unit {
    cpu::AttentionShape shape{};
    bool forward = false, backward = false;
    std::string why; // why cuDNN does not run it, if it does not
  };
  std::map<AttentionKey, Unit> units;
  for (const auto &[shape, backward] : needs.attentions) {
    Unit &u = units[attentionKey(shape)];
    u.shape = shape;
    (backward ? u.backward : u.forward) = true;
  }
  int64_t workspace = 0;
  for (auto &[key, u] : units) {
    u.why = CudnnAttentionRefusal(u.shape);
    for (bool backward : {false, true}) {
      if (!u.why.empty() || !(backward ? u.backward : u.forward))
        continue;
      absl::StatusOr<int64_t> bytes = (*cudnn)->Prepare(u.shape, type, backward);
      if (!bytes.ok())
        u.why = std::string(bytes.status().message());
      else
        workspace = std::max(workspace, *bytes);
    }
    if (!u.why.empty() && mode == "cudnn")
      return absl::FailedPreconditionError(
          absl::StrCat("BRAID_ATTENTION=cudnn: attention ", describe(u.shape),
                       ": ", u.why));
  }
  if (workspace > 0) {
    if (cudaError_t err = cudaMalloc(&cudnnWorkspace_, size_t(workspace));
        err != cudaSuccess) {
      cudnnWorkspace_ = nullptr;
      std::string why = absl::StrCat("cannot allocate its workspace of ",
                                     workspace, " bytes: ",
                                     cudaGetErrorString(err));
      if (mode == "cudnn")
        return absl::ResourceExhaustedError(
            absl::StrCat("BRAID_ATTENTION=cudnn: ", why));
      notes_.push_back(absl::StrCat("attention: Braid's kernels (cuDNN ", why,
                                    ")"));
      return absl::OkStatus();
    }
    workspaceBytes_ += workspace;
  }
  cudnn_ = std::move(*cudnn);
  const std::string version = cudnn_->Version();
  for (auto &[key, u] : units) {
    const cpu::AttentionShape &s = u.shape;
    std::string head =
        absl::StrCat("attention ", describe(s), " ", typeName, ": ");
    if (!u.why.empty()) {
      notes_.push_back(absl::StrCat(head, "Braid's kernels (", version, ": ",
                                    u.why, ")"));
      continue;
    }
    AttentionChoice &choice = attentionChoices_[key];
    if (mode == "cudnn") {
      choice = {u.forward, u.backward};
      notes_.push_back(
          absl::StrCat(head, version, " (BRAID_ATTENTION=cudnn)"));
      continue;
    }
    // Both candidates on the arena's bytes (what they compute there is
    // overwritten: Create zeroes the arena after).
    const int64_t qBytes = s.batch * s.seq * s.heads * s.headDim * 2,
                  kvBytes = s.batch * s.seq * s.kvHeads * s.headDim * 2,
                  lseBytes = s.batch * s.heads * s.seq * 4;
    int64_t offset = 0;
    auto carve = [&](int64_t bytes) {
      uint8_t *p = arena_ + offset;
      offset += (bytes + 255) / 256 * 256;
      return static_cast<void *>(p);
    };
    void *q = carve(qBytes), *k = carve(kvBytes), *v = carve(kvBytes),
         *out = carve(qBytes), *dout = carve(qBytes), *dq = carve(qBytes),
         *dk = carve(kvBytes), *dv = carve(kvBytes);
    float *lse = static_cast<float *>(carve(lseBytes));
    if (offset > arenaBytes_) {
      notes_.push_back(absl::StrCat(
          head, "Braid's kernels (not timed: one call's operands, ", offset,
          " bytes, exceed the arena)"));
      continue;
    }
    auto own = [&](bool backward) -> absl::Status {
      if (type == CudnnAttention::Type::BF16) {
        using E = bf16;
        return backward
                   ? launchStatus(
                         ownAttentionBackward(
                             (E *)q, (E *)k, (E *)v, (E *)out, lse, (E *)dout,
                             s, (E *)dq, (E *)dk, (E *)dv, attentionRows_,
                             stream_),
                         "attention backward")
                   : launchStatus(ownAttentionForward((E *)q, (E *)k, (E *)v,
                                                      s, (E *)out, lse, stream_),
                                  "attention");
      }
      using E = f16;
      return backward
                 ? launchStatus(ownAttentionBackward(
                                    (E *)q, (E *)k, (E *)v, (E *)out, lse,
                                    (E *)dout, s, (E *)dq, (E *)dk, (E *)dv,
                                    attentionRows_, stream_),
                                "attention backward")
                 : launchStatus(ownAttentionForward((E *)q, (E *)k, (E *)v, s,
                                                    (E *)out, lse, stream_),
                                "attention");
    };
    auto viaCudnn = [&](bool backward) -> absl::Status {
      return backward ? cudnn_->Backward(q, k, v, out, lse, dout, s, type, dq,
                                         dk, dv, cudnnWorkspace_, stream_)
                      : cudnn_->Forward(q, k, v, s, type, out, lse,
                                        cudnnWorkspace_, stream_);
    };
    std::vector<std::string> parts;
    for (bool backward : {false, true}) {
      if (!(backward ? u.backward : u.forward))
        continue;
      absl::StatusOr<double> braidMs =
          timeCalls([&] { return own(backward); }, stream_);
      if (!braidMs.ok())
        return braidMs.status();
      absl::StatusOr<double> cudnnMs =
          timeCalls([&] { return viaCudnn(backward); }, stream_);
      const char *direction = backward ? "backward" : "forward";
      if (!cudnnMs.ok()) {
        // A cuDNN that cannot run what it built: Braid's, and the error said.
        (void)cudaGetLastError();
        BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
        parts.push_back(absl::StrFormat("%s Braid's %.3f ms (%s failed: %s)",
                                        direction, *braidMs, version,
                                        cudnnMs.status().message()));
        continue;
      }
      const bool useCudnn = *cudnnMs < *braidMs;
      (backward ? choice.cudnnBackward : choice.cudnnForward) = useCudnn;
      parts.push_back(absl::StrFormat(
          "%s %s (%s %.3f ms, Braid's %.3f ms)", direction,
          useCudnn ? version : std::string("Braid's"), version, *cudnnMs,
          *braidMs));
    }
    notes_.push_back(absl::StrCat(head, absl::StrJoin(parts, "; ")));
  }
  return absl::OkStatus();
}

template <typename T> auto Executor::run_QKV_SPLIT(const Call<T> &c) {
  return launched(qkvSplitForward(c.x(0), qkvShape(c.inst, c.in(0)), c.y(0),
                                  c.y(1), c.y(2), c.st),
                  c.inst);
}
template <typename T> auto Executor::run_QKV_CONCAT(const Call<T> &c) {
  return launched(qkvSplitBackward(c.x(0), c.x(1), c.x(2),
                                   qkvShape(c.inst, c.out(0)), c.y(0), c.st),
                  c.inst);
}

//===- Elementwise --------------------------------------------------------===//

template <typename T> auto Executor::run_SWIGLU(const Call<T> &c) {
  if (c.inst.inputs_size() == 1) // packed [gate | up]
    return launched(swigluPackedForward(c.x(0), plan::RowsOf(c.out(0)),
                                        plan::LastDim(c.out(0)), c.y(0), c.st),
                    c.inst);
  return launched(
      swigluForward(c.x(0), c.x(1), plan::NumElements(c.in(0)), c.y(0), c.st),
      c.inst);
}
template <typename T> auto Executor::run_SWIGLU_GRAD(const Call<T> &c) {
  if (c.inst.inputs_size() == 2) // packed [gate | up], dy
    return launched(swigluPackedBackward(c.x(0), c.x(1), plan::RowsOf(c.in(1)),
                                         plan::LastDim(c.in(1)), c.y(0), c.st),
                    c.inst);
  return launched(swigluBackward(c.x(0), c.x(1), c.x(2),
                                 plan::NumElements(c.in(0)), c.y(0), c.y(1),
                                 c.st),
                  c.inst);
}

template <typename T> auto Executor::run_GELU(const Call<T> &c) {
  return launched(geluForward(c.x(0), plan::NumElements(c.in(0)),
                              plan::DecodeGelu(c.inst).tanh, c.y(0), c.st),
                  c.inst);
}
template <typename T> auto Executor::run_GELU_GRAD(const Call<T> &c) {
  return launched(geluBackward(c.x(0), c.x(1), plan::NumElements(c.in(0)),
                               plan::DecodeGelu(c.inst).tanh, c.y(0), c.st),
                  c.inst);
}

template <typename T> auto Executor::run_ADD(const Call<T> &c) {
  return launched(
      add(c.x(0), c.x(1), plan::NumElements(c.out(0)), c.y(0), c.st), c.inst);
}

template <typename T> auto Executor::run_SCALE(const Call<T> &c) {
  return launched(scaleVector(c.x(0), plan::DecodeScale(c.inst).scale,
                              plan::NumElements(c.in(0)), c.y(0), c.st),
                  c.inst);
}

template <typename T> auto Executor::run_DROPOUT(const Call<T> &c) {
  // Rows from the micro-batch's first sample, which the call's values hold
  // (so 0 here); sequence parallel, the rank's slice of each sample.
  const plan::DropoutParams p = plan::DecodeDropout(c.inst);
  return launched(dropoutForward(c.x(0), dropoutIndexing(c.inst, 0), p.rate,
                                 p.rngId, callValues_, c.y(0), c.st),
                  c.inst);
}

template <typename T> auto Executor::run_ZERO(const Call<T> &c) {
  return launched(
      cudaMemsetAsync(c.y(0), 0, size_t(bytes_[c.inst.outputs(0)]), c.st),
      c.inst);
}

template <typename T> auto Executor::run_COPY(const Call<T> &c) {
  // With a rank_axis x goes to this rank's block of y (ZeRO-3: the rank's
  // parameters into the flat buffer they are gathered in).
  if (c.inst.rank_axis().empty())
    return copyInputs(c.inst, c.slot);
  int64_t n = bytes_[c.inst.inputs(0)];
  return launched(cudaMemcpyAsync(reinterpret_cast<uint8_t *>(c.y(0)) +
                                      rankCoordinate(c.inst) * n,
                                  c.x(0), size_t(n), cudaMemcpyDeviceToDevice,
                                  c.st),
                  c.inst);
}

//===- Cross-entropy: the loss's terms in lossTerms_ ----------------------===//

template <typename T> auto Executor::run_CROSS_ENTROPY(const Call<T> &c) {
  // The log-sum-exp: the plan's buffer when it keeps one (the second
  // output), otherwise rowStats_ (computed again in backward).
  return launched(
      crossEntropyForward(c.x(0), c.ids(1), plan::RowsOf(c.in(0)),
                          plan::LastDim(c.in(0)),
                          plan::DecodeCrossEntropy(c.inst).ignoreIndex,
                          c.inst.outputs_size() == 2 ? c.yf(1) : rowStats_,
                          lossTerms_, c.yf(0), counted_, c.st),
      c.inst);
}
template <>
void Executor::need<plan::CROSS_ENTROPY>(const Instruction &inst,
                                         Needs &needs) {
  needTokenIds(inst, plan_.buffers(inst.inputs(0)), /*embedding=*/false, needs);
}

template <typename T> auto Executor::run_CROSS_ENTROPY_GRAD(const Call<T> &c) {
  // The log-sum-exp: the fourth input when the plan keeps one, otherwise
  // computed again. The count of rows is computed again either way.
  int64_t vocab = plan::LastDim(c.in(0)), rows = plan::RowsOf(c.in(0));
  int64_t ignore = plan::DecodeCrossEntropy(c.inst).ignoreIndex;
  const float *lse = rowStats_;
  if (c.inst.inputs_size() == 4) {
    lse = c.xf(3);
    BRAID_RETURN_IF_ERROR(
        launched(countTargets(c.ids(1), rows, ignore, counted_, c.st), c.inst));
  } else {
    BRAID_RETURN_IF_ERROR(launched(
        crossEntropyForward(c.x(0), c.ids(1), rows, vocab, ignore, rowStats_,
                            lossTerms_, lossScratch_, counted_, c.st),
        c.inst));
  }
  // With a kept log-sum-exp on a slice of the vocabulary, the global one of
  // CROSS_ENTROPY_FINISH and the slice's first id.
  return launched(crossEntropyBackward(c.x(0), c.ids(1), lse, c.xf(2), rows,
                                       vocab, ignore, counted_, c.y(0), c.st,
                                       c.vocabStart()),
                  c.inst);
}
template <>
void Executor::need<plan::CROSS_ENTROPY_GRAD>(const Instruction &inst,
                                              Needs &needs) {
  needTokenIds(inst, plan_.buffers(inst.inputs(0)), /*embedding=*/false, needs);
}

template <typename T> auto Executor::run_CROSS_ENTROPY_MAX(const Call<T> &c) {
  return launched(crossEntropyRowMax(c.x(0), plan::RowsOf(c.in(0)),
                                     plan::LastDim(c.in(0)), c.y(0), c.st),
                  c.inst);
}

template <typename T>
auto Executor::run_CROSS_ENTROPY_PARTIAL(const Call<T> &c) {
  return launched(
      crossEntropyPartial(c.x(0), c.ids(1), c.x(2), plan::RowsOf(c.in(0)),
                          plan::LastDim(c.in(0)), c.vocabStart(),
                          plan::DecodeCrossEntropy(c.inst).ignoreIndex, c.yf(0),
                          c.st),
      c.inst);
}
template <>
void Executor::need<plan::CROSS_ENTROPY_PARTIAL>(const Instruction &inst,
                                                 Needs &needs) {
  needTokenIds(inst, plan_.buffers(inst.inputs(0)), /*embedding=*/false, needs);
}

// (summed, global max, targets) -> (loss, lse), the same on every rank.
template <typename T>
auto Executor::run_CROSS_ENTROPY_FINISH(const Call<T> &c) {
  return launched(
      crossEntropyFinish(c.xf(0), c.x(1), c.ids(2), plan::NumElements(c.in(1)),
                         plan::DecodeCrossEntropy(c.inst).ignoreIndex, c.yf(1),
                         lossTerms_, c.yf(0), counted_, c.st),
      c.inst);
}
template <>
void Executor::need<plan::CROSS_ENTROPY_FINISH>(const Instruction &inst,
                                                Needs &needs) {
  needs.statRows = std::max(needs.statRows,
                            plan::NumElements(plan_.buffers(inst.inputs(1))));
}

//===- The optimizer ------------------------------------------------------===//

template <typename T> auto Executor::run_GRAD_NORM(const Call<T> &c) {
  // Over a group's ranks the first split_inputs gradients are this rank's
  // slices, the others replicated on `copies` ranks of the group: each rank
  // adds its slices' squares (sumSquares_[0]) and its share of the
  // replicated ones' (sumSquares_[1]), and the group's sum of those is the
  // squared norm. Without a group every input counts once.
  const Instruction &inst = c.inst;
  const plan::GradNormParams p = plan::DecodeGradNorm(inst);
  const bool grouped = inst.group_size() > 0;
  const int64_t ranks = plan::GroupSize(plan_, inst);
  const int64_t split = grouped ? p.splitInputs : inst.inputs_size();
  if (grouped && ranks > 1 && !comm_)
    return absl::FailedPreconditionError(absl::StrCat(
        "a gradient norm over ", ranks, " ranks needs the job's other ranks"));
  BRAID_RETURN_IF_ERROR(launched(
      cudaMemsetAsync(sumSquares_, 0, 2 * sizeof(double), c.st), inst));
  for (int i = 0; i < inst.inputs_size(); ++i)
    BRAID_RETURN_IF_ERROR(
        launched(gradSumOfSquares(c.xf(i), plan::NumElements(c.in(i)),
                                  sumSquares_ + (i < split ? 0 : 1), c.st),
                 inst));
  if (grouped) {
    double share =
        1.0 / double(p.replicatedCopies ? p.replicatedCopies : ranks);
    BRAID_RETURN_IF_ERROR(
        launched(addScaled(sumSquares_ + 1, share, sumSquares_, c.st), inst));
    if (ranks > 1) {
      BRAID_RETURN_IF_ERROR(beforeCommunication());
      std::vector<std::string> group(inst.group().begin(), inst.group().end());
      BRAID_RETURN_IF_ERROR(comm_->AllReduce(group, sumSquares_, 1, plan::F64,
                                             exec::Reduction::kSum));
    }
  }
  // Unscaled by the loss scale (fp16: Backend::SetLossScale), which the
  // call's values hold.
  return launched(
      gradClip(sumSquares_, p.maxNorm, c.yf(0), c.yf(1), callValues_, c.st),
      inst);
}

template <typename T> auto Executor::run_ADAMW(const Call<T> &c) {
  const Instruction &inst = c.inst;
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
  if (c.in(4).dtype() != plan::F32 || c.in(5).dtype() != plan::I64)
    return absl::InvalidArgumentError(
        "ADAMW: the learning rate must be f32 and the step i64");
  // With a rank_axis (ZeRO) the gradient and moments are this rank's block
  // of the flat parameters: block c of the axis' ranks. A buffer of all the
  // blocks (fp32's parameters, mixed precision's low-precision copy) is
  // updated at block c; mixed precision's masters hold only this rank's
  // block.
  int64_t n = plan::NumElements(c.in(2));
  auto block = [&](int output) {
    return plan::NumElements(c.out(output)) > n ? rankCoordinate(inst) * n : 0;
  };
  const plan::AdamWParams adamw = plan::DecodeAdamW(inst);
  T *copy = nullptr;
  if (inst.outputs_size() == 4)
    copy = c.y(3) + block(3);
  else if (compute_ != plan::F32)
    return absl::FailedPreconditionError(
        "ADAMW of a mixed-precision plan without master weights");
  return launched(
      adamwStep<T>(
          c.yf(0) + block(0), c.xf(1), c.yf(1), c.yf(2), n, c.xf(4),
          adamw.beta1, adamw.beta2, adamw.eps, adamw.weightDecay,
          static_cast<const int64_t *>(address(inst.inputs(5), c.slot)),
          c.xf(6), copy, c.st),
      inst);
}

//===- Generation ---------------------------------------------------------===//

// Positions and indices are read on the device, which cannot refuse one out
// of its range (the CPU executor does): the kernels skip such a row's cache
// write and write zeros for its output row (Generation.h).

template <typename T> auto Executor::run_ROPE_AT(const Call<T> &c) {
  const plan::RopeParams p = plan::DecodeRope(c.inst);
  const Buffer &x = c.in(0);
  return launched(ropeAtForward(c.x(0), c.ids(1), x.shape(0), x.shape(1),
                                x.shape(2) / p.headDim, p.headDim, p.theta,
                                c.y(0), c.st),
                  c.inst);
}

// (q, k, v, positions, cache_k, cache_v) -> (out, cache_k, cache_v), the
// caches in place (outputs 1 and 2 are inputs 4 and 5).
template <typename T> auto Executor::run_ATTENTION_CACHED(const Call<T> &c) {
  cpu::AttentionShape s = attentionShape(c.inst);
  if (s.headDim > kMaxCachedAttentionHeadDim)
    return absl::UnimplementedError(
        absl::StrCat("ATTENTION_CACHED: heads of ", s.headDim,
                     " dimensions, more than the CUDA kernel's ",
                     kMaxCachedAttentionHeadDim));
  return launched(attentionCachedForward(c.x(0), c.x(1), c.x(2), c.ids(3), s,
                                         c.in(4).shape(1), c.y(1), c.y(2),
                                         c.y(0), cachedAttention_, c.st),
                  c.inst);
}
template <>
void Executor::need<plan::ATTENTION_CACHED>(const Instruction &inst,
                                            Needs &needs) {
  needs.cachedAttentionBytes = std::max(
      needs.cachedAttentionBytes,
      attentionCachedWorkspaceBytes(attentionShape(inst),
                                    plan_.buffers(inst.inputs(4)).shape(1)));
}

template <typename T> auto Executor::run_TAKE_ROWS(const Call<T> &c) {
  const Buffer &x = c.in(0);
  return launched(takeRows(c.x(0), c.ids(1), x.shape(0), x.shape(1), x.shape(2),
                           c.y(0), c.st),
                  c.inst);
}

// (logits, settings F32 whatever T, seed, counter) -> ids. The settings are
// read on the device, as the host last wrote them.
// With candidate ids (input 4), the columns are those tokens.
template <typename T> auto Executor::run_SAMPLE(const Call<T> &c) {
  Candidates<T> from;
  if (c.inst.inputs_size() == 5) {
    from.ids = c.ids(4);
    from.vocabSize = plan::DecodeSample(c.inst).vocabSize;
  }
  return launched(
      sampleTokens(
          c.x(0), c.in(0).shape(0), plan::LastDim(c.in(0)),
          plan::DecodeSample(c.inst).vocabSize, c.xf(1), c.ids(2), c.ids(3),
          static_cast<int32_t *>(address(c.inst.outputs(0), c.slot)), c.st,
          from),
      c.inst);
}

namespace {

/// `run` on the logits `x` typed as their own dtype (F32, BF16 or F16),
/// whatever the instruction's: beam search's and the candidates' kernels
/// read them so.
template <typename Run>
absl::Status withLogits(const Buffer &logits, const void *x,
                        const char *kernel, Run run) {
  switch (logits.dtype()) {
  case plan::F32:
    return run(static_cast<const float *>(x));
  case plan::BF16:
    return run(static_cast<const bf16 *>(x));
  case plan::F16:
    return run(static_cast<const f16 *>(x));
  default:
    return absl::UnimplementedError(
        absl::StrCat(kernel, " of ", plan::DType_Name(logits.dtype()),
                     " logits runs on the CPU backend"));
  }
}

} // namespace

// (logits [B, 1, V]) -> (values [B, K] F32, ids [B, K]). The logits are
// read in their own dtype: T is the instruction's (values' F32 in an F32
// plan, the plan's BF16 or F16 in a mixed-precision one), whatever theirs.
template <typename T> auto Executor::run_TOP_LOGPROBS(const Call<T> &c) {
  const Buffer &logits = c.in(0);
  const int64_t k = c.out(0).shape(1);
  if (k > kMaxTopLogprobs)
    return absl::UnimplementedError(absl::StrCat("TOP_LOGPROBS: ", k,
                                                 " ids per row, more than the "
                                                 "CUDA kernel's ",
                                                 kMaxTopLogprobs));
  auto run = [&](const auto *x) {
    using U = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    // With candidate ids and the ranks' lse (inputs 1 and 2).
    Candidates<U> from;
    if (c.inst.inputs_size() == 3) {
      from.ids = c.ids(1);
      from.vocabSize = plan::DecodeSample(c.inst).vocabSize;
      from.lse = static_cast<const U *>(address(c.inst.inputs(2), c.slot));
      from.lseCount = plan::LastDim(c.in(2));
    }
    return launched(
        topLogprobs(x, logits.shape(0), plan::LastDim(logits),
                    // The attribute vocab_size, SAMPLE's.
                    plan::DecodeSample(c.inst).vocabSize, k, c.yf(0),
                    static_cast<int32_t *>(address(c.inst.outputs(1), c.slot)),
                    c.st, from, topLogprobs_),
        c.inst);
  };
  return withLogits(logits, address(c.inst.inputs(0), c.slot),
                    "TOP_LOGPROBS", run);
}
template <>
void Executor::need<plan::TOP_LOGPROBS>(const Instruction &inst,
                                        Needs &needs) {
  // Rows over the whole vocabulary are split over blocks (without
  // candidate ids: those are a few per rank).
  if (inst.inputs_size() == 3)
    return;
  const plan::Buffer &logits = plan_.buffers(inst.inputs(0));
  needs.topLogprobsBytes = std::max(
      needs.topLogprobsBytes,
      topLogprobsWorkspaceBytes(logits.shape(0),
                                plan::DecodeSample(inst).vocabSize,
                                plan_.buffers(inst.outputs(0)).shape(1)));
}

// (logits [B, T, V], targets [B, T]) -> (logprobs [B, T] F32, greedy [B, T]
// I32), the logits read in their own dtype.
template <typename T> auto Executor::run_TOKEN_LOGPROBS(const Call<T> &c) {
  const Buffer &logits = c.in(0);
  const int64_t columns = plan::LastDim(logits);
  const int64_t rows = plan::NumElements(logits) / std::max<int64_t>(columns, 1);
  auto run = [&](const auto *x) {
    return launched(
        tokenLogprobs(x, c.ids(1), rows, columns,
                      plan::DecodeSample(c.inst).vocabSize, c.yf(0),
                      static_cast<int32_t *>(address(c.inst.outputs(1), c.slot)),
                      c.st),
        c.inst);
  };
  return withLogits(logits, address(c.inst.inputs(0), c.slot),
                    "TOKEN_LOGPROBS", run);
}
template <>
void Executor::need<plan::TOKEN_LOGPROBS>(const Instruction &inst,
                                          Needs &needs) {
  // The targets are ids of the vocabulary, or -100 (not asked): checked
  // when written, as token ids are (nothing on the device checks them).
  (void)needs;
  const int64_t vocab = plan::DecodeSample(inst).vocabSize;
  IdCheck &check = idChecks_[inst.inputs(1)];
  check.vocab = check.vocab ? std::min(check.vocab, vocab) : vocab;
  check.ignore = -100;
  check.ignorable = true;
}

// (logits [B, T, V] of the rank's columns, targets [B, T]) -> partial
// [B, T, 4] F32.
template <typename T>
auto Executor::run_TOKEN_LOGPROBS_PARTIAL(const Call<T> &c) {
  const Buffer &logits = c.in(0);
  const int64_t columns = plan::LastDim(logits);
  const int64_t rows = plan::NumElements(logits) / std::max<int64_t>(columns, 1);
  auto run = [&](const auto *x) {
    return launched(tokenLogprobsPartial(x, c.ids(1), rows, columns,
                                         c.vocabStart(),
                                         plan::DecodeSample(c.inst).vocabSize,
                                         c.yf(0), c.st),
                    c.inst);
  };
  return withLogits(logits, address(c.inst.inputs(0), c.slot),
                    "TOKEN_LOGPROBS_PARTIAL", run);
}
template <>
void Executor::need<plan::TOKEN_LOGPROBS_PARTIAL>(const Instruction &inst,
                                                  Needs &needs) {
  // The targets: as TOKEN_LOGPROBS's.
  need<plan::TOKEN_LOGPROBS>(inst, needs);
}

// (gathered [B, T, 4 G] F32, targets [B, T]) -> (logprobs, greedy).
template <typename T>
auto Executor::run_TOKEN_LOGPROBS_FINISH(const Call<T> &c) {
  const int64_t slices = plan::LastDim(c.in(0)) / 4;
  return launched(
      tokenLogprobsFinish(
          c.xf(0), c.ids(1), plan::NumElements(c.in(1)), slices, c.yf(0),
          static_cast<int32_t *>(address(c.inst.outputs(1), c.slot)), c.st),
      c.inst);
}

// (logits [B, 1, V]) -> (values [B, 1, K], ids [B, K], lse [B, 1, 1]) in the
// logits' dtype, whatever T; the rank's columns start at vocab_start_stride
// x its coordinate.
template <typename T> auto Executor::run_TOP_CANDIDATES(const Call<T> &c) {
  const Buffer &logits = c.in(0);
  const int64_t k = c.out(1).shape(1);
  if (k > kMaxTopLogprobs)
    return absl::UnimplementedError(absl::StrCat(
        "TOP_CANDIDATES: ", k, " tokens per row, more than the CUDA kernel's ",
        kMaxTopLogprobs));
  const int64_t start = c.inst.rank_axis().empty() ? 0 : c.vocabStart();
  auto run = [&](const auto *x) {
    using U = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    return launched(
        topCandidates(
            x, logits.shape(0), plan::LastDim(logits), start,
            plan::DecodeSample(c.inst).vocabSize, k,
            static_cast<U *>(address(c.inst.outputs(0), c.slot)),
            static_cast<int32_t *>(address(c.inst.outputs(1), c.slot)),
            static_cast<U *>(address(c.inst.outputs(2), c.slot)), c.st),
        c.inst);
  };
  return withLogits(logits, address(c.inst.inputs(0), c.slot),
                    "TOP_CANDIDATES", run);
}

// (x [B, ...], parents [B]) -> x in place, as bytes whatever T. Every row is
// read before any is written: x is copied into collectiveScratch_, which
// need<REORDER_ROWS> sizes at Create (so that a call allocates nothing and
// can be captured in a graph). The collectives use that scratch only within
// their own instruction, on the same stream, so the two never overlap.
// Parents are read on the device: a row whose parent is outside [0, B) is
// left as it was (the device cannot refuse it; the CPU executor does).
template <typename T> auto Executor::run_REORDER_ROWS(const Call<T> &c) {
  const int64_t rows = c.in(0).shape(0), bytes = bytes_[c.inst.inputs(0)];
  return launched(reorderRows(address(c.inst.outputs(0), c.slot), c.ids(1),
                              rows, rows ? bytes / rows : 0, collectiveScratch_,
                              c.st),
                  c.inst);
}
template <>
void Executor::need<plan::REORDER_ROWS>(const Instruction &inst, Needs &needs) {
  needs.collectiveBytes =
      std::max(needs.collectiveBytes, bytes_[inst.inputs(0)]);
}

//===- Communication (ExecutorCommunication.cpp), whatever T --------------===//

template <typename T> auto Executor::run_ALL_REDUCE(const Call<T> &c) {
  return runAllReduce(c.inst, c.slot);
}
template <typename T> auto Executor::run_ALL_GATHER(const Call<T> &c) {
  return runGatherScatter(c.inst, c.slot, /*gather=*/true);
}
template <>
void Executor::need<plan::ALL_GATHER>(const Instruction &inst, Needs &needs) {
  needs.collectiveBytes = std::max(
      needs.collectiveBytes, collectiveScratchBytes(inst, /*gather=*/true));
}
template <typename T> auto Executor::run_REDUCE_SCATTER(const Call<T> &c) {
  return runGatherScatter(c.inst, c.slot, /*gather=*/false);
}
template <>
void Executor::need<plan::REDUCE_SCATTER>(const Instruction &inst,
                                          Needs &needs) {
  needs.collectiveBytes = std::max(
      needs.collectiveBytes, collectiveScratchBytes(inst, /*gather=*/false));
}
template <typename T> auto Executor::run_SEND(const Call<T> &c) {
  return runPointToPoint(c.inst, c.slot, /*send=*/true);
}
template <typename T> auto Executor::run_RECV(const Call<T> &c) {
  return runPointToPoint(c.inst, c.slot, /*send=*/false);
}
// The stream waits for the collectives started on the buffers a WAIT names
// (only a communicator on streams starts them; others complete each
// collective before its instruction returns).
template <typename T> auto Executor::run_WAIT(const Call<T> &c) {
  return finishInFlight(&c.inst);
}

//===- The tables, indexed by plan::KernelIndex ---------------------------===//

template <typename T>
absl::Status Executor::runTyped(const Instruction &inst, int64_t slot) {
  using Handler = absl::Status (Executor::*)(const Call<T> &);
  static constexpr Handler kHandlers[] = {
#define BRAID_KERNEL(NAME, ...) &Executor::run_##NAME<T>,
#include "runtime/plan/Kernels.def"
  };
  return (this->*kHandlers[plan::KernelIndex(inst.kernel())])(
      Call<T>{*this, inst, slot, stream_});
}

absl::Status Executor::runInstruction(const Instruction &inst,
                                      plan::DType dtype, int64_t slot) {
  // The instruction's dtype (runtime/plan/InstructionDType.h): BF16 and F16
  // run as such, F32 as float, and so does an instruction whose dtype is
  // none (a SEND of ids, a ZERO of an integer buffer: bytes whatever T).
  switch (dtype) {
  case plan::BF16:
    return runTyped<bf16>(inst, slot);
  case plan::F16:
    return runTyped<f16>(inst, slot);
  default:
    return runTyped<float>(inst, slot);
  }
}

void Executor::gatherNeeds(const Instruction &inst, Needs &needs) {
  using Need = void (Executor::*)(const Instruction &, Needs &);
  static constexpr Need kNeeds[] = {
#define BRAID_KERNEL(NAME, ...) &Executor::need<plan::NAME>,
#include "runtime/plan/Kernels.def"
  };
  (this->*kNeeds[plan::KernelIndex(inst.kernel())])(inst, needs);
}

std::string Executor::refusal(const Instruction &inst) {
  using Refusal = std::string (*)(const Instruction &);
  static constexpr Refusal kRefusals[] = {
#define BRAID_KERNEL(NAME, ...) &Executor::refusal<plan::NAME>,
#include "runtime/plan/Kernels.def"
  };
  return kRefusals[plan::KernelIndex(inst.kernel())](inst);
}

} // namespace braid::cuda
