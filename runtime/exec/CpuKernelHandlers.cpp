//===- CpuKernelHandlers.cpp - The CPU executor's kernel table ------------===//
//
// Executor::runInstruction runs an instruction through a table generated
// from runtime/plan/Kernels.def: row i holds run_NAME<T>, the handler of
// kernel plan::KernelAt(i), for the element type T of the instruction's
// dtype (plan::InstructionDType). A row without a handler here does not
// build. A handler reads its operands through a KernelCall: the buffers,
// their addresses in the rank's arena (copy `slot` of slotted buffers), the
// executor's communicator, coordinates and collectives in flight, and the
// instruction's shapes as both executors decode them (ExecutorBase.h).
// Kernels that differ only in direction (EMBEDDING and EMBEDDING_GRAD, ...)
// share a helper taking a bool.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Executor.h"

#include "runtime/cpu/Generation.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/cpu/Sampling.h"
#include "runtime/cpu/VocabParallel.h"
#include "runtime/plan/KernelParams.h"
#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace braid::exec {

using plan::Buffer;
using plan::Instruction;

/// One instruction's call: its operands as T (the instruction's element
/// type), ids and buffers, and what of the executor its kernel uses.
template <typename T> class KernelCall {
public:
  KernelCall(Executor &executor, const Instruction &inst,
             const StepContext &context, int64_t slot)
      : inst(inst), context(context), e_(executor), slot_(slot) {}

  const Instruction &inst;
  const StepContext &context;

  const plan::Plan &plan() const { return e_.plan_; }
  const Buffer &in(int i) const { return e_.plan_.buffers(inst.inputs(i)); }
  const Buffer &out(int i) const { return e_.plan_.buffers(inst.outputs(i)); }
  /// The bytes of buffer `id` that the call reads or writes.
  void *address(int id) const { return e_.address(id, slot_); }
  const T *x(int i) const {
    return static_cast<const T *>(address(inst.inputs(i)));
  }
  T *y(int i) const { return static_cast<T *>(address(inst.outputs(i))); }
  const int32_t *ids(int i) const {
    return static_cast<const int32_t *>(address(inst.inputs(i)));
  }

  /// Token ids index tables: input `i`'s ids, checked against a vocabulary
  /// of `vocab` before use (`ignore` allowed when `allowIgnore`).
  absl::Status checkIds(int i, int64_t vocab, bool allowIgnore,
                        int64_t ignore) const {
    const int32_t *p = ids(i);
    for (int64_t k = 0, n = plan::NumElements(in(i)); k < n; ++k)
      if ((p[k] < 0 || p[k] >= vocab) && !(allowIgnore && p[k] == ignore))
        return absl::OutOfRangeError(absl::StrCat(
            "token id ", p[k], " at position ", k, " of '", in(i).name(),
            "' is outside the vocabulary of ", vocab));
    return absl::OkStatus();
  }
  /// A slice along the rank_axis (validated by the loader): its first
  /// index, the rank's coordinate x the stride attribute, or 0 without it.
  int64_t sliceStart(const char *strideAttr) const {
    return e_.sliceStart(inst, strideAttr);
  }
  /// The first global id of this rank's slice of the vocabulary.
  int64_t vocabStart() const { return sliceStart("vocab_start_stride"); }
  /// The global vocabulary of `local` ids per rank along the rank_axis.
  int64_t globalVocab(int64_t local) const {
    return local * plan::AxisSize(e_.plan_.mesh(), inst.rank_axis());
  }

  /// This rank's coordinate along the rank_axis (0 without one).
  int64_t rankCoordinate() const { return e_.rankCoordinate(inst); }
  /// This rank's place in the instruction's group.
  int64_t groupPlace() const { return e_.groupPlace(inst); }
  int64_t groupSize() const { return plan::GroupSize(e_.plan_, inst); }
  std::vector<std::string> group() const {
    return {inst.group().begin(), inst.group().end()};
  }
  Communicator *comm() const { return e_.comm_; }
  double lossScale() const { return e_.LossScale(); }
  /// Leaves the collective `handle`, started on `buffers`, in flight until
  /// a WAIT naming one of them.
  void inFlight(int64_t handle, std::vector<int32_t> buffers) const {
    e_.startInFlight(handle, std::move(buffers), inst, e_.currentPhase_);
  }
  /// Finishes the collectives in flight on the buffers the call names.
  absl::Status finishInFlight() const { return e_.finishInFlight(&inst); }

  /// The instruction's shapes (ExecutorBase.h).
  cpu::LinearShape linearForwardShape() const {
    return e_.linearForwardShape(inst);
  }
  cpu::LinearShape linearGradInputShape() const {
    return e_.linearGradInputShape(inst);
  }
  cpu::LinearShape linearGradWeightShape() const {
    return e_.linearGradWeightShape(inst);
  }
  cpu::AttentionShape attentionShape() const { return e_.attentionShape(inst); }
  cpu::QkvShape qkvShape(const Buffer &fused) const {
    return ExecutorBase::qkvShape(inst, fused);
  }
  /// DROPOUT's place in the global batch, from the micro-batch's first
  /// sample.
  cpu::GlobalIndexing dropoutIndexing() const {
    return e_.dropoutIndexing(inst, context.sampleOffset);
  }

private:
  Executor &e_;
  int64_t slot_;
};

namespace {

int64_t numel(const Buffer &b) { return plan::NumElements(b); }
int64_t dim(const Buffer &b, int i) { return b.shape(i); }
/// The rows of a buffer of `cols` columns (0 columns: none).
int64_t rowsOf(const Buffer &b, int64_t cols) {
  return numel(b) / std::max<int64_t>(cols, 1);
}

absl::Status needsOtherRanks(const std::string &what) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " needs the job's other ranks (run the plan under mpirun)"));
}

//===- Communication ------------------------------------------------------===//

template <typename T> absl::Status run_ALL_REDUCE(KernelCall<T> &c) {
  const Instruction &inst = c.inst;
  int64_t ranks = c.groupSize();
  if (!c.comm() && ranks > 1)
    return needsOtherRanks(
        absl::StrCat("an all-reduce over ", ranks, " ranks"));
  std::vector<std::string> group = c.group();
  const plan::CollectiveParams params = plan::DecodeCollective(inst);
  for (int i = 0; i < inst.inputs_size(); ++i) {
    int64_t n = numel(c.out(i));
    if (inst.inputs(i) != inst.outputs(i))
      std::memcpy(c.y(i), c.x(i), n * sizeof(T));
    if (ranks > 1 && params.async) {
      // In place, started here and finished by a WAIT naming the buffer
      // (the gradients' sums of the step's last micro-batch, overlapping
      // the rest of its backward).
      absl::StatusOr<int64_t> handle =
          c.comm()->StartAllReduce(group, c.y(i), n, c.out(i).dtype());
      if (!handle.ok())
        return handle.status();
      c.inFlight(*handle, {inst.outputs(i)});
      continue;
    }
    if (ranks > 1)
      if (absl::Status s = c.comm()->AllReduce(
              group, c.y(i), n, c.out(i).dtype(),
              params.max ? Reduction::kMax : Reduction::kSum);
          !s.ok())
        return s;
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status gatherOrScatter(KernelCall<T> &c, bool gather) {
  // Along `dim`, viewed as [outer, n, inner]: each rank holds the slice of
  // `chunk` = n x inner elements per outer row (x gathered, y scattered),
  // the full tensor G blocks of it per row. The communicator's buffers are
  // the ranks' blocks one after the other, so with outer > 1 they are laid
  // out through `scratch`.
  const Instruction &inst = c.inst;
  Communicator *comm = c.comm();
  int64_t ranks = c.groupSize();
  const Buffer &slice = gather ? c.in(0) : c.out(0);
  const plan::CollectiveParams params = plan::DecodeCollective(inst);
  int64_t along = params.dim, outer = 1, chunk = 1;
  for (int i = 0; i < slice.shape_size(); ++i)
    (i < along ? outer : chunk) *= dim(slice, i);
  int64_t count = outer * chunk;
  // Moved as bytes of the buffers' own dtype (an all-gather may move I32
  // ids, whatever T).
  const int64_t element = plan::DTypeBytes(c.out(0).dtype());
  char *y = static_cast<char *>(c.address(inst.outputs(0)));
  const char *x = static_cast<const char *>(c.address(inst.inputs(0)));
  if (ranks == 1) {
    std::memmove(y, x, count * element);
    return absl::OkStatus();
  }
  if (!comm)
    return needsOtherRanks(absl::StrCat(
        gather ? "an all-gather" : "a reduce-scatter", " over ", ranks,
        " ranks"));
  std::vector<std::string> group = c.group();
  bool async = params.async;
  plan::DType dtype = c.out(0).dtype();
  if (gather && inst.inputs(0) == inst.outputs(0)) {
    // In place (ZeRO's parameters): this rank's block of the flat buffer
    // is already there, at its place in the group. With async it starts
    // here and a WAIT naming the buffer finishes it (ZeRO-3's prefetch).
    int64_t block = numel(c.out(0)) / ranks;
    char *own = y + c.groupPlace() * block * element;
    if (!async)
      return comm->AllGather(group, own, y, block, dtype);
    absl::StatusOr<int64_t> handle =
        comm->StartAllGather(group, own, y, block, dtype);
    if (!handle.ok())
      return handle.status();
    c.inFlight(*handle, {inst.outputs(0)});
    return absl::OkStatus();
  }
  // Buffers of a plan may share arena bytes; a collective's in and out
  // must not.
  int64_t xBytes = numel(c.in(0)) * element;
  int64_t yBytes = numel(c.out(0)) * element;
  bool overlap = xBytes && yBytes && x < y + yBytes && y < x + xBytes;
  bool direct = outer == 1 && !overlap;
  std::vector<char> scratch;
  if (gather) {
    if (direct)
      return comm->AllGather(group, x, y, count, dtype);
    // scratch [rank][outer][chunk] -> y [outer][rank][chunk].
    scratch.resize(size_t(ranks * count * element));
    if (absl::Status s = comm->AllGather(group, x, scratch.data(), count, dtype);
        !s.ok())
      return s;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < ranks; ++k)
        std::memcpy(y + (o * ranks + k) * chunk * element,
                    scratch.data() + (k * outer + o) * chunk * element,
                    size_t(chunk * element));
    return absl::OkStatus();
  }
  if (direct && async) {
    // Started here, finished by a WAIT naming x or y (ZeRO-2's buckets,
    // overlapping the rest of backward).
    absl::StatusOr<int64_t> handle =
        comm->StartReduceScatter(group, x, y, count, dtype);
    if (!handle.ok())
      return handle.status();
    c.inFlight(*handle, {inst.inputs(0), inst.outputs(0)});
    return absl::OkStatus();
  }
  if (direct)
    return comm->ReduceScatter(group, x, y, count, dtype);
  // x [outer][rank][chunk] -> scratch [rank][outer][chunk], the blocks
  // ordered by the rank they go to.
  scratch.resize(size_t(ranks * count * element));
  for (int64_t k = 0; k < ranks; ++k)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(scratch.data() + (k * outer + o) * chunk * element,
                  x + (o * ranks + k) * chunk * element,
                  size_t(chunk * element));
  return comm->ReduceScatter(group, scratch.data(), y, count, dtype);
}
template <typename T> absl::Status run_ALL_GATHER(KernelCall<T> &c) {
  return gatherOrScatter(c, /*gather=*/true);
}
template <typename T> absl::Status run_REDUCE_SCATTER(KernelCall<T> &c) {
  return gatherOrScatter(c, /*gather=*/false);
}

/// SEND and RECV move their buffer in its own dtype, whatever T.
template <typename T>
absl::Status pointToPoint(KernelCall<T> &c, bool send) {
  const Instruction &inst = c.inst;
  int id = send ? inst.inputs(0) : inst.outputs(0);
  const Buffer &b = c.plan().buffers(id);
  int64_t peer = plan::DecodePeer(inst);
  if (!c.comm())
    return needsOtherRanks(absl::StrCat(
        send ? "a send to" : "a receive from", " the ",
        peer > 0 ? "next" : "previous", " rank along '", inst.rank_axis(),
        "'"));
  void *p = c.address(id);
  if (!send)
    return c.comm()->Recv(inst.rank_axis(), peer, p, numel(b), b.dtype());
  // The communicator copies the message: the buffer may be written at once.
  return c.comm()->Send(inst.rank_axis(), peer, p, numel(b), b.dtype());
}
template <typename T> absl::Status run_SEND(KernelCall<T> &c) {
  return pointToPoint(c, /*send=*/true);
}
template <typename T> absl::Status run_RECV(KernelCall<T> &c) {
  return pointToPoint(c, /*send=*/false);
}
template <typename T> absl::Status run_WAIT(KernelCall<T> &c) {
  return c.finishInFlight();
}

//===- Copies -------------------------------------------------------------===//

template <typename T> absl::Status run_ZERO(KernelCall<T> &c) {
  cpu::zeroFill(c.address(c.inst.outputs(0)),
                numel(c.out(0)) * plan::DTypeBytes(c.out(0).dtype()));
  return absl::OkStatus();
}

template <typename T> absl::Status run_COPY(KernelCall<T> &c) {
  // With a rank_axis x goes to this rank's block of y (ZeRO-3: the rank's
  // parameters into the flat buffer they are gathered in).
  int64_t n = numel(c.in(0));
  int64_t at = c.inst.rank_axis().empty() ? 0 : c.rankCoordinate() * n;
  std::memmove(c.y(0) + at, c.x(0), n * sizeof(T));
  return absl::OkStatus();
}

template <typename T> absl::Status run_ADD(KernelCall<T> &c) {
  cpu::addForward(c.x(0), c.x(1), numel(c.in(0)), c.y(0));
  return absl::OkStatus();
}

//===- Embeddings ---------------------------------------------------------===//

template <typename T>
absl::Status embedding(KernelCall<T> &c, bool forward) {
  // With a rank_axis the table is this rank's rows of the vocabulary; the
  // ids are global.
  const Buffer &table = forward ? c.in(0) : c.out(0);
  int64_t local = dim(table, 0), hidden = plan::LastDim(table),
          rows = numel(c.in(1));
  if (absl::Status s = c.checkIds(1, c.globalVocab(local), false, 0); !s.ok())
    return s;
  if (c.inst.rank_axis().empty()) {
    if (forward)
      cpu::embeddingForward(c.x(0), c.ids(1), rows, hidden, c.y(0));
    else
      cpu::embeddingBackward(c.x(0), c.ids(1), rows, hidden, c.y(0));
  } else if (forward) {
    cpu::embeddingForwardRange(c.x(0), c.ids(1), rows, hidden, c.vocabStart(),
                               local, c.y(0));
  } else {
    cpu::embeddingBackwardRange(c.x(0), c.ids(1), rows, hidden,
                                c.vocabStart(), local, c.y(0));
  }
  return absl::OkStatus();
}
template <typename T> absl::Status run_EMBEDDING(KernelCall<T> &c) {
  return embedding(c, /*forward=*/true);
}
template <typename T> absl::Status run_EMBEDDING_GRAD(KernelCall<T> &c) {
  return embedding(c, /*forward=*/false);
}

/// Packed documents' positions (input `i`, [batch, seq]): every sequence
/// is documents one after the other, each numbered 0, 1, ... from its
/// start, which is what the kernels that read them rely on.
template <typename T>
absl::Status checkDocuments(const KernelCall<T> &c, int i) {
  const Buffer &b = c.in(i);
  const int32_t *p = c.ids(i);
  const int64_t seq = dim(b, 1);
  for (int64_t k = 0, n = numel(b); k < n; ++k) {
    int64_t t = k % seq;
    if (p[k] != 0 && (t == 0 || p[k] != p[k - 1] + 1))
      return absl::InvalidArgumentError(absl::StrCat(
          "position ", p[k], " of token ", t, " of sequence ", k / seq, " ('",
          b.name(), "') neither starts a document (0) nor follows the ",
          t == 0 ? "sequence's start" : "previous token's position"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status positionEmbedding(KernelCall<T> &c, bool forward) {
  // out or dy [batch, s, hidden] are positions [start, start + s) of the
  // table: start is 0, or with a rank_axis (sequence parallel) the rank's
  // coordinate x seq_start_stride (validated by the loader).
  const Buffer &rows = forward ? c.out(0) : c.in(0);
  int64_t hidden = plan::LastDim(rows);
  int64_t start =
      c.inst.rank_axis().empty() ? 0 : c.sliceStart("seq_start_stride");
  // Packed documents: rows at their positions in their documents, read
  // from the whole sequence's positions at the slice's start.
  if (plan::DecodePositionEmbedding(c.inst).atPositions) {
    if (absl::Status s = checkDocuments(c, 1); !s.ok())
      return s;
    const Buffer &positions = c.in(1);
    if (forward)
      cpu::positionEmbeddingAtForward(c.x(0), c.ids(1), dim(rows, 0),
                                      dim(rows, 1), dim(positions, 1), start,
                                      hidden, c.y(0));
    else
      cpu::positionEmbeddingAtBackward(c.x(0), c.ids(1), dim(rows, 0),
                                       dim(rows, 1), dim(positions, 1), start,
                                       hidden, c.y(0));
    return absl::OkStatus();
  }
  if (forward)
    cpu::positionEmbeddingForward(c.x(0) + start * hidden, dim(rows, 0),
                                  dim(rows, 1), hidden, c.y(0));
  else
    cpu::positionEmbeddingBackward(c.x(0), dim(rows, 0), dim(rows, 1), hidden,
                                   c.y(0) + start * hidden);
  return absl::OkStatus();
}
template <typename T> absl::Status run_POSITION_EMBEDDING(KernelCall<T> &c) {
  return positionEmbedding(c, /*forward=*/true);
}
template <typename T>
absl::Status run_POSITION_EMBEDDING_GRAD(KernelCall<T> &c) {
  return positionEmbedding(c, /*forward=*/false);
}

//===- Linear layers ------------------------------------------------------===//

template <typename T> absl::Status run_LINEAR(KernelCall<T> &c) {
  cpu::linearForward(c.x(0), c.x(1),
                     c.inst.inputs_size() == 3 ? c.x(2) : nullptr,
                     c.linearForwardShape(), c.y(0));
  return absl::OkStatus();
}

template <typename T> absl::Status run_LINEAR_GRAD_INPUT(KernelCall<T> &c) {
  cpu::linearBackward<T>(nullptr, c.x(1), c.x(0), c.linearGradInputShape(),
                         c.y(0), nullptr, nullptr);
  return absl::OkStatus();
}

template <typename T> absl::Status run_LINEAR_GRAD_WEIGHT(KernelCall<T> &c) {
  cpu::linearBackward<T>(c.x(0), nullptr, c.x(1), c.linearGradWeightShape(),
                         nullptr, c.y(0), nullptr);
  return absl::OkStatus();
}

template <typename T> absl::Status run_BIAS_GRAD(KernelCall<T> &c) {
  int64_t outDim = plan::LastDim(c.in(0));
  cpu::linearBackward<T>(nullptr, nullptr, c.x(0),
                         {rowsOf(c.in(0), outDim), 0, outDim, false}, nullptr,
                         nullptr, c.y(0));
  return absl::OkStatus();
}

//===- Normalization and rotary embeddings --------------------------------===//

template <typename T> absl::Status rmsNorm(KernelCall<T> &c, bool grad) {
  int64_t d = plan::LastDim(c.in(0)), rows = rowsOf(c.in(0), d);
  double eps = plan::DecodeNorm(c.inst).eps;
  std::vector<T> scratch;
  if (!grad) {
    scratch.resize(rows);
    cpu::rmsNormForward(c.x(0), c.x(1), rows, d, eps, c.y(0), scratch.data());
    return absl::OkStatus();
  }
  // The statistics are recomputed (docs/Rationale-Training.md).
  scratch.resize(rows);
  cpu::rmsNormStats(c.x(0), rows, d, eps, scratch.data());
  cpu::rmsNormBackward(c.x(0), c.x(1), scratch.data(), c.x(2), rows, d,
                       c.y(0), c.y(1));
  return absl::OkStatus();
}
template <typename T> absl::Status run_RMS_NORM(KernelCall<T> &c) {
  return rmsNorm(c, /*grad=*/false);
}
template <typename T> absl::Status run_RMS_NORM_GRAD(KernelCall<T> &c) {
  return rmsNorm(c, /*grad=*/true);
}

template <typename T> absl::Status layerNorm(KernelCall<T> &c, bool grad) {
  int64_t d = plan::LastDim(c.in(0)), rows = rowsOf(c.in(0), d);
  double eps = plan::DecodeNorm(c.inst).eps;
  std::vector<T> scratch(2 * rows);
  T *mean = scratch.data(), *rstd = mean + rows;
  if (!grad) {
    cpu::layerNormForward(c.x(0), c.x(1), c.x(2), rows, d, eps, c.y(0), mean,
                          rstd);
    return absl::OkStatus();
  }
  // The statistics are recomputed (docs/Rationale-Training.md).
  cpu::layerNormStats(c.x(0), rows, d, eps, mean, rstd);
  cpu::layerNormBackward(c.x(0), c.x(1), mean, rstd, c.x(2), rows, d, c.y(0),
                         c.y(1), c.y(2));
  return absl::OkStatus();
}
template <typename T> absl::Status run_LAYER_NORM(KernelCall<T> &c) {
  return layerNorm(c, /*grad=*/false);
}
template <typename T> absl::Status run_LAYER_NORM_GRAD(KernelCall<T> &c) {
  return layerNorm(c, /*grad=*/true);
}

template <typename T> absl::Status rope(KernelCall<T> &c, bool grad) {
  const plan::RopeParams p = plan::DecodeRope(c.inst);
  if (c.inst.inputs_size() == 2) { // at packed documents' positions
    if (absl::Status s = checkDocuments(c, 1); !s.ok())
      return s;
    auto f = grad ? cpu::ropeAtBackward<T> : cpu::ropeAtForward<T>;
    f(c.x(0), c.ids(1), dim(c.in(0), 0), dim(c.in(0), 1),
      dim(c.in(0), 2) / p.headDim, p.headDim, p.theta, c.y(0));
    return absl::OkStatus();
  }
  auto f = grad ? cpu::ropeBackward<T> : cpu::ropeForward<T>;
  f(c.x(0), dim(c.in(0), 0), dim(c.in(0), 1), dim(c.in(0), 2) / p.headDim,
    p.headDim, p.theta, c.y(0));
  return absl::OkStatus();
}
template <typename T> absl::Status run_ROPE(KernelCall<T> &c) {
  return rope(c, /*grad=*/false);
}
template <typename T> absl::Status run_ROPE_GRAD(KernelCall<T> &c) {
  return rope(c, /*grad=*/true);
}

//===- Attention ----------------------------------------------------------===//

template <typename T> absl::Status attention(KernelCall<T> &c, bool grad) {
  // With global_heads, this rank's slice of the heads.
  cpu::AttentionShape s = c.attentionShape();
  if (dim(c.in(1), 1) != s.seq)
    return absl::UnimplementedError(
        "attention with more keys than queries is not implemented on CPU");
  // Packed documents: their positions are the last input.
  const bool documents = plan::DecodeAttention(c.inst).documents;
  if (documents) {
    const int last = c.inst.inputs_size() - 1;
    if (absl::Status st = checkDocuments(c, last); !st.ok())
      return st;
    s.positions = c.ids(last);
  }
  // The log-sum-exp: the plan's buffer when it keeps one (ATTENTION's
  // second output, ATTENTION_GRAD's sixth input); otherwise backward
  // computes the forward again to get it.
  int64_t lseSize = s.batch * s.heads * s.seq;
  std::vector<T> scratch;
  if (!grad) {
    T *lse = c.inst.outputs_size() == 2 ? c.y(1) : nullptr;
    if (!lse) {
      scratch.resize(lseSize);
      lse = scratch.data();
    }
    cpu::attentionForward(c.x(0), c.x(1), c.x(2), s, c.y(0), lse);
    return absl::OkStatus();
  }
  const T *lse =
      c.inst.inputs_size() == 6 + (documents ? 1 : 0) ? c.x(5) : nullptr;
  if (!lse) {
    scratch.resize(lseSize + numel(c.in(0)));
    cpu::attentionForward(c.x(0), c.x(1), c.x(2), s, scratch.data() + lseSize,
                          scratch.data());
    lse = scratch.data();
  }
  cpu::attentionBackward(c.x(0), c.x(1), c.x(2), c.x(3), lse, c.x(4), s,
                         c.y(0), c.y(1), c.y(2));
  return absl::OkStatus();
}
template <typename T> absl::Status run_ATTENTION(KernelCall<T> &c) {
  return attention(c, /*grad=*/false);
}
template <typename T> absl::Status run_ATTENTION_GRAD(KernelCall<T> &c) {
  return attention(c, /*grad=*/true);
}

template <typename T> absl::Status qkv(KernelCall<T> &c, bool split) {
  cpu::QkvShape s = c.qkvShape(split ? c.in(0) : c.out(0));
  if (split)
    cpu::qkvSplitForward(c.x(0), s, c.y(0), c.y(1), c.y(2));
  else
    cpu::qkvSplitBackward(c.x(0), c.x(1), c.x(2), s, c.y(0));
  return absl::OkStatus();
}
template <typename T> absl::Status run_QKV_SPLIT(KernelCall<T> &c) {
  return qkv(c, /*split=*/true);
}
template <typename T> absl::Status run_QKV_CONCAT(KernelCall<T> &c) {
  return qkv(c, /*split=*/false);
}

//===- Elementwise --------------------------------------------------------===//

template <typename T> absl::Status run_SWIGLU(KernelCall<T> &c) {
  if (c.inst.inputs_size() == 1) { // packed [gate | up]
    int64_t f = plan::LastDim(c.out(0));
    cpu::swigluPackedForward(c.x(0), rowsOf(c.out(0), f), f, c.y(0));
  } else {
    cpu::swigluForward(c.x(0), c.x(1), numel(c.in(0)), c.y(0));
  }
  return absl::OkStatus();
}

template <typename T> absl::Status run_SWIGLU_GRAD(KernelCall<T> &c) {
  if (c.inst.inputs_size() == 2) { // packed [gate | up], dy
    int64_t f = plan::LastDim(c.in(1));
    cpu::swigluPackedBackward(c.x(0), c.x(1), rowsOf(c.in(1), f), f, c.y(0));
  } else {
    cpu::swigluBackward(c.x(0), c.x(1), c.x(2), numel(c.in(0)), c.y(0),
                        c.y(1));
  }
  return absl::OkStatus();
}

template <typename T> absl::Status run_GELU(KernelCall<T> &c) {
  cpu::geluForward(c.x(0), numel(c.in(0)), plan::DecodeGelu(c.inst).tanh,
                   c.y(0));
  return absl::OkStatus();
}

template <typename T> absl::Status run_GELU_GRAD(KernelCall<T> &c) {
  cpu::geluBackward(c.x(0), c.x(1), numel(c.in(0)),
                    plan::DecodeGelu(c.inst).tanh, c.y(0));
  return absl::OkStatus();
}

template <typename T> absl::Status run_SCALE(KernelCall<T> &c) {
  cpu::scaleForward(c.x(0), numel(c.in(0)), plan::DecodeScale(c.inst).scale,
                    c.y(0));
  return absl::OkStatus();
}

template <typename T> absl::Status run_DROPOUT(KernelCall<T> &c) {
  // Rows are samples; the micro-batch's rows sit at its samples' place in
  // the global batch. With a rank_axis (sequence parallel) the rank holds a
  // slice of each sample's elements, the axis' ranks the whole sample: its
  // elements start at col_offset_stride x the rank's coordinate.
  const plan::DropoutParams p = plan::DecodeDropout(c.inst);
  cpu::dropoutForward(c.x(0), c.dropoutIndexing(), p.rate,
                      {c.context.seed, c.context.step, p.rngId}, c.y(0));
  return absl::OkStatus();
}

//===- Cross-entropy ------------------------------------------------------===//

template <typename T> absl::Status crossEntropy(KernelCall<T> &c, bool grad) {
  int64_t vocab = plan::LastDim(c.in(0)), rows = rowsOf(c.in(0), vocab);
  int64_t ignore = plan::DecodeCrossEntropy(c.inst).ignoreIndex;
  if (c.inst.inputs_size() == 4) {
    // The gradient from a kept log-sum-exp: the forward's own, or for a
    // vocabulary slice the global one of CROSS_ENTROPY_FINISH; the mean is
    // over the rows that count.
    if (absl::Status s = c.checkIds(1, c.globalVocab(vocab), true, ignore);
        !s.ok())
      return s;
    const int32_t *targets = c.ids(1);
    int64_t counted = 0;
    for (int64_t r = 0; r < rows; ++r)
      counted += targets[r] != ignore;
    cpu::crossEntropyBackwardRange(c.x(0), targets, c.x(3), *c.x(2), rows,
                                   vocab, c.vocabStart(), ignore, counted,
                                   c.y(0));
    return absl::OkStatus();
  }
  if (absl::Status s = c.checkIds(1, vocab, true, ignore); !s.ok())
    return s;
  // The rows' log-sum-exp: into the plan's buffer when it keeps one.
  std::vector<T> scratch;
  T *lse = c.inst.outputs_size() == 2 ? c.y(1) : nullptr;
  if (!lse) {
    scratch.resize(rows);
    lse = scratch.data();
  }
  int64_t counted = 0;
  T loss = cpu::crossEntropyForward(c.x(0), c.ids(1), rows, vocab, ignore, lse,
                                    &counted);
  if (!grad) {
    *c.y(0) = loss;
    return absl::OkStatus();
  }
  cpu::crossEntropyBackward(c.x(0), c.ids(1), lse, *c.x(2), rows, vocab,
                            ignore, counted, c.y(0));
  return absl::OkStatus();
}
template <typename T> absl::Status run_CROSS_ENTROPY(KernelCall<T> &c) {
  return crossEntropy(c, /*grad=*/false);
}
template <typename T> absl::Status run_CROSS_ENTROPY_GRAD(KernelCall<T> &c) {
  return crossEntropy(c, /*grad=*/true);
}

template <typename T> absl::Status run_CROSS_ENTROPY_MAX(KernelCall<T> &c) {
  int64_t vocab = plan::LastDim(c.in(0)), rows = rowsOf(c.in(0), vocab);
  cpu::crossEntropyRowMax(c.x(0), rows, vocab, c.y(0));
  return absl::OkStatus();
}

template <typename T>
absl::Status run_CROSS_ENTROPY_PARTIAL(KernelCall<T> &c) {
  int64_t vocab = plan::LastDim(c.in(0)), rows = rowsOf(c.in(0), vocab);
  int64_t ignore = plan::DecodeCrossEntropy(c.inst).ignoreIndex;
  if (absl::Status s = c.checkIds(1, c.globalVocab(vocab), true, ignore);
      !s.ok())
    return s;
  cpu::crossEntropyPartial(c.x(0), c.ids(1), c.x(2), rows, vocab,
                           c.vocabStart(), ignore, c.y(0));
  return absl::OkStatus();
}

template <typename T>
absl::Status run_CROSS_ENTROPY_FINISH(KernelCall<T> &c) {
  int64_t counted = 0, ignore = plan::DecodeCrossEntropy(c.inst).ignoreIndex;
  *c.y(0) = cpu::crossEntropyFinish(c.x(0), c.x(1), c.ids(2), numel(c.in(1)),
                                    ignore, c.y(1), &counted);
  return absl::OkStatus();
}

//===- Optimizer ----------------------------------------------------------===//

template <typename T> absl::Status run_GRAD_NORM(KernelCall<T> &c) {
  const Instruction &inst = c.inst;
  std::vector<cpu::GradView<T>> grads;
  for (int i = 0; i < inst.inputs_size(); ++i)
    grads.push_back({c.x(i), numel(c.in(i))});
  absl::StatusOr<double> norm;
  if (inst.group_size() == 0) {
    norm = cpu::globalGradNorm<T>(grads);
  } else {
    // Over the group's ranks: the first split_inputs gradients are this
    // rank's slices, the others replicated on every rank of the group, so
    // each rank adds its slices' squares and its share of the replicated
    // ones, and the sum of the ranks' values is the squared norm. A NaN or
    // infinity anywhere makes the sum, hence the norm, non-finite.
    int64_t ranks = c.groupSize();
    if (!c.comm() && ranks > 1)
      return needsOtherRanks(
          absl::StrCat("a gradient norm over ", ranks, " ranks"));
    absl::Span<const cpu::GradView<T>> all(grads);
    const plan::GradNormParams p = plan::DecodeGradNorm(inst);
    int64_t split = p.splitInputs;
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
    double sum = *splitSum + *replicatedSum / double(p.replicatedCopies
                                                         ? p.replicatedCopies
                                                         : ranks);
    if (ranks > 1)
      if (absl::Status s = c.comm()->AllReduce(c.group(), &sum, 1, plan::F64,
                                               Reduction::kSum);
          !s.ok())
        return s;
    norm = std::sqrt(sum);
  }
  if (!norm.ok())
    return norm.status();
  absl::StatusOr<cpu::GradClip> clip = cpu::computeGradClip(
      *norm, plan::DecodeGradNorm(inst).maxNorm, 1.0 / c.lossScale());
  if (!clip.ok())
    return clip.status();
  *c.y(0) = T(clip->norm);
  *c.y(1) = T(clip->scale);
  return absl::OkStatus();
}

template <typename T> absl::Status run_ADAMW(KernelCall<T> &c) {
  const plan::AdamWParams p = plan::DecodeAdamW(c.inst);
  cpu::AdamWConfig config;
  config.beta1 = p.beta1;
  config.beta2 = p.beta2;
  config.eps = p.eps;
  config.weightDecay = p.weightDecay;
  int64_t step = *static_cast<const int64_t *>(c.address(c.inst.inputs(5)));
  // With a rank_axis (ZeRO) the gradient and moments are this rank's block
  // of the flat parameters: block c of the axis' ranks.
  int64_t n = numel(c.in(2));
  T *param =
      c.y(0) + (c.inst.rank_axis().empty() ? 0 : c.rankCoordinate() * n);
  return cpu::adamwStep<T>(param, c.x(1), c.y(1), c.y(2), n, config, *c.x(4),
                           step, *c.x(6));
}

//===- Generation ---------------------------------------------------------===//

/// The int32 values of input `i` ([sequences] or [sequences, tokens]) in
/// [0, limit); otherwise an InvalidArgument naming the kernel, the row
/// and the value (the CUDA kernels, which cannot refuse, write zeros for
/// such a row, or for REORDER_ROWS leave it as it was).
template <typename T>
absl::Status checkInRange(const KernelCall<T> &c, int i, int64_t limit,
                          const char *what) {
  const Buffer &b = c.in(i);
  const int32_t *values = c.ids(i);
  int64_t perRow = b.shape_size() > 1 ? dim(b, 1) : 1;
  for (int64_t k = 0, n = numel(b); k < n; ++k)
    if (values[k] < 0 || values[k] >= limit)
      return absl::InvalidArgumentError(
          absl::StrCat(plan::Kernel_Name(c.inst.kernel()), ": ", what, " ",
                       values[k], " of row ", k / perRow,
                       perRow > 1 ? absl::StrCat(", token ", k % perRow) : "",
                       " ('", b.name(), "') is outside [0, ", limit, ")"));
  return absl::OkStatus();
}

template <typename T> absl::Status run_ROPE_AT(KernelCall<T> &c) {
  // In a generation plan, positions of its cache; else any position.
  int64_t cache = c.plan().generation().max_seq_len();
  if (absl::Status s = checkInRange(
          c, 1, cache > 0 ? cache : int64_t(INT32_MAX) + 1, "position");
      !s.ok())
    return s;
  const plan::RopeParams p = plan::DecodeRope(c.inst);
  cpu::ropeAtForward(c.x(0), c.ids(1), dim(c.in(0), 0), dim(c.in(0), 1),
                     dim(c.in(0), 2) / p.headDim, p.headDim, p.theta, c.y(0));
  return absl::OkStatus();
}

// (q, k, v, positions, cache_k, cache_v) -> (out, cache_k, cache_v), the
// caches in place (outputs 1 and 2 are inputs 4 and 5).
template <typename T> absl::Status run_ATTENTION_CACHED(KernelCall<T> &c) {
  int64_t cacheLen = dim(c.in(4), 1);
  if (absl::Status s = checkInRange(c, 3, cacheLen, "position"); !s.ok())
    return s;
  cpu::attentionCachedForward(c.x(0), c.x(1), c.x(2), c.ids(3),
                              c.attentionShape(), cacheLen, c.y(1), c.y(2),
                              c.y(0));
  return absl::OkStatus();
}

template <typename T> absl::Status run_TAKE_ROWS(KernelCall<T> &c) {
  int64_t seq = dim(c.in(0), 1);
  if (absl::Status s = checkInRange(c, 1, seq, "index"); !s.ok())
    return s;
  cpu::takeRows(c.x(0), c.ids(1), dim(c.in(0), 0), seq, dim(c.in(0), 2),
                c.y(0));
  return absl::OkStatus();
}

// (logits, settings F32, seed, counter) -> ids.
template <typename T> absl::Status run_SAMPLE(KernelCall<T> &c) {
  const float *settings =
      static_cast<const float *>(c.address(c.inst.inputs(1)));
  if (absl::Status s = cpu::validateSamplingSettings(settings); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("SAMPLE: ", s.message()));
  const int32_t *seed = c.ids(2);
  // With candidate ids (input 4): the columns are those tokens.
  cpu::Candidates<T> from;
  if (c.inst.inputs_size() == 5) {
    from.ids = c.ids(4);
    from.vocabSize = plan::DecodeSample(c.inst).vocabSize;
  }
  cpu::sampleTokens(c.x(0), dim(c.in(0), 0), plan::LastDim(c.in(0)),
                    plan::DecodeSample(c.inst).vocabSize, settings,
                    cpu::samplingSeed(seed[0], seed[1]), c.ids(3),
                    static_cast<int32_t *>(c.address(c.inst.outputs(0))),
                    from);
  return absl::OkStatus();
}

// (logits [B, 1, V]) -> (values [B, K] F32, ids [B, K] I32). The
// instruction's dtype is its first float output's, values' F32, whatever
// the logits' (F64 in an F64 plan): they are read in their own dtype.
template <typename T> absl::Status run_TOP_LOGPROBS(KernelCall<T> &c) {
  const Buffer &logits = c.in(0);
  const int64_t rows = dim(logits, 0), k = dim(c.out(0), 1);
  const int64_t vocab = plan::LastDim(logits);
  // The attribute vocab_size, SAMPLE's (the ids at or above it are padding).
  const int64_t candidates = plan::DecodeSample(c.inst).vocabSize;
  const void *x = c.address(c.inst.inputs(0));
  float *values = static_cast<float *>(c.address(c.inst.outputs(0)));
  int32_t *ids = static_cast<int32_t *>(c.address(c.inst.outputs(1)));
  // With candidate ids and the ranks' lse (inputs 1 and 2).
  auto from = [&](auto *type) {
    using U = std::remove_pointer_t<decltype(type)>;
    cpu::Candidates<U> f;
    if (c.inst.inputs_size() == 3) {
      f.ids = c.ids(1);
      f.vocabSize = candidates;
      f.lse = static_cast<const U *>(c.address(c.inst.inputs(2)));
      f.lseCount = plan::LastDim(c.in(2));
    }
    return f;
  };
  switch (logits.dtype()) {
  case plan::F32:
    cpu::topLogprobs(static_cast<const float *>(x), rows, vocab, candidates, k,
                     values, ids, from(static_cast<float *>(nullptr)));
    return absl::OkStatus();
  case plan::F64:
    cpu::topLogprobs(static_cast<const double *>(x), rows, vocab, candidates, k,
                     values, ids, from(static_cast<double *>(nullptr)));
    return absl::OkStatus();
  default:
    return absl::UnimplementedError(
        absl::StrCat("TOP_LOGPROBS of ", plan::DType_Name(logits.dtype()),
                     " logits needs the CUDA backend"));
  }
}

/// Scoring's logits (input 0, [B, T, columns]) as rows and columns, its
/// vocab_size, and its targets (input 1) checked: ids of the vocabulary, or
/// -100 (not asked).
template <typename T>
absl::Status scoringShape(KernelCall<T> &c, int64_t &rows, int64_t &columns,
                          int64_t &vocab) {
  columns = plan::LastDim(c.in(0));
  rows = numel(c.in(0)) / std::max<int64_t>(columns, 1);
  vocab = plan::DecodeSample(c.inst).vocabSize;
  return c.checkIds(1, vocab, /*allowIgnore=*/true, -100);
}

// (logits [B, T, V], targets [B, T]) -> (logprobs [B, T], greedy [B, T]).
template <typename T> absl::Status run_TOKEN_LOGPROBS(KernelCall<T> &c) {
  const Buffer &logits = c.in(0);
  int64_t rows, columns, vocab;
  if (absl::Status s = scoringShape(c, rows, columns, vocab); !s.ok())
    return s;
  const void *x = c.address(c.inst.inputs(0));
  float *logprobs = static_cast<float *>(c.address(c.inst.outputs(0)));
  int32_t *greedy = static_cast<int32_t *>(c.address(c.inst.outputs(1)));
  switch (logits.dtype()) {
  case plan::F32:
    cpu::tokenLogprobs(static_cast<const float *>(x), c.ids(1), rows, columns,
                       vocab, logprobs, greedy);
    return absl::OkStatus();
  case plan::F64:
    cpu::tokenLogprobs(static_cast<const double *>(x), c.ids(1), rows, columns,
                       vocab, logprobs, greedy);
    return absl::OkStatus();
  default:
    return absl::UnimplementedError(
        absl::StrCat("TOKEN_LOGPROBS of ", plan::DType_Name(logits.dtype()),
                     " logits needs the CUDA backend"));
  }
}

// (logits [B, T, V] of the rank's columns, targets [B, T]) -> partial
// [B, T, 4]; the rank's columns start at vocab_start_stride x its
// coordinate.
template <typename T>
absl::Status run_TOKEN_LOGPROBS_PARTIAL(KernelCall<T> &c) {
  const Buffer &logits = c.in(0);
  int64_t rows, columns, vocab;
  if (absl::Status s = scoringShape(c, rows, columns, vocab); !s.ok())
    return s;
  const void *x = c.address(c.inst.inputs(0));
  void *partial = c.address(c.inst.outputs(0));
  switch (logits.dtype()) {
  case plan::F32:
    cpu::tokenLogprobsPartial(static_cast<const float *>(x), c.ids(1), rows,
                              columns, c.vocabStart(), vocab,
                              static_cast<float *>(partial));
    return absl::OkStatus();
  case plan::F64:
    cpu::tokenLogprobsPartial(static_cast<const double *>(x), c.ids(1), rows,
                              columns, c.vocabStart(), vocab,
                              static_cast<double *>(partial));
    return absl::OkStatus();
  default:
    return absl::UnimplementedError(
        absl::StrCat("TOKEN_LOGPROBS_PARTIAL of ",
                     plan::DType_Name(logits.dtype()),
                     " logits needs the CUDA backend"));
  }
}

// (gathered [B, T, 4 G], targets [B, T]) -> (logprobs [B, T], greedy [B, T]).
template <typename T>
absl::Status run_TOKEN_LOGPROBS_FINISH(KernelCall<T> &c) {
  const Buffer &gathered = c.in(0);
  const int64_t slices = plan::LastDim(gathered) / 4;
  const int64_t rows = numel(c.in(1));
  const void *x = c.address(c.inst.inputs(0));
  float *logprobs = static_cast<float *>(c.address(c.inst.outputs(0)));
  int32_t *greedy = static_cast<int32_t *>(c.address(c.inst.outputs(1)));
  if (gathered.dtype() == plan::F64)
    cpu::tokenLogprobsFinish(static_cast<const double *>(x), c.ids(1), rows,
                             slices, logprobs, greedy);
  else
    cpu::tokenLogprobsFinish(static_cast<const float *>(x), c.ids(1), rows,
                             slices, logprobs, greedy);
  return absl::OkStatus();
}

// (logits [B, 1, V]) -> (values [B, 1, K], ids [B, K], lse [B, 1, 1]); the
// rank's columns start at vocab_start_stride x its coordinate.
template <typename T> absl::Status run_TOP_CANDIDATES(KernelCall<T> &c) {
  const Buffer &logits = c.in(0);
  const int64_t k = dim(c.out(1), 1);
  cpu::topCandidates(c.x(0), dim(logits, 0), plan::LastDim(logits),
                     c.inst.rank_axis().empty() ? 0 : c.vocabStart(),
                     plan::DecodeSample(c.inst).vocabSize, k, c.y(0),
                     static_cast<int32_t *>(c.address(c.inst.outputs(1))),
                     static_cast<T *>(c.address(c.inst.outputs(2))));
  return absl::OkStatus();
}

// (x [B, ...], parents [B]) -> x, in place; T is x's dtype.
template <typename T> absl::Status run_REORDER_ROWS(KernelCall<T> &c) {
  const int64_t rows = dim(c.in(0), 0);
  if (absl::Status s = checkInRange(c, 1, rows, "parent"); !s.ok())
    return s;
  // Every row is read before any is written: through a copy of x.
  std::vector<T> scratch(numel(c.in(0)));
  cpu::reorderRows(c.y(0), c.ids(1), rows, rows ? numel(c.in(0)) / rows : 0,
                   scratch.data());
  return absl::OkStatus();
}

//===- The table ----------------------------------------------------------===//

template <typename T> using Handler = absl::Status (*)(KernelCall<T> &);

/// Row i: the handler of kernel plan::KernelAt(i).
template <typename T>
constexpr Handler<T> kHandlers[] = {
#define BRAID_KERNEL(NAME, ...) &run_##NAME<T>,
#include "runtime/plan/Kernels.def"
};

template <typename T>
absl::Status runRow(int row, Executor &executor, const Instruction &inst,
                    const StepContext &context, int64_t slot) {
  KernelCall<T> call(executor, inst, context, slot);
  return kHandlers<T>[row](call);
}

} // namespace

absl::Status Executor::runInstruction(const Instruction &inst,
                                      plan::DType dtype,
                                      const StepContext &context,
                                      int64_t slot) {
  const int row = plan::KernelIndex(inst.kernel());
  const plan::KernelInfo &kernel = plan::KernelAt(row);
  // Transfers (SEND, RECV), WAIT and ALL_GATHER (of floats, or of the
  // draw's I32 ids) move or finish their buffers in the buffers' own
  // dtypes: they run whatever the instruction's.
  bool anyDType = kernel.has(plan::kPointToPoint) ||
                  kernel.has(plan::kFinishes) ||
                  inst.kernel() == plan::ALL_GATHER;
  if (dtype == plan::F64)
    return runRow<double>(row, *this, inst, context, slot);
  if (dtype == plan::F32 || anyDType)
    return runRow<float>(row, *this, inst, context, slot);
  return absl::UnimplementedError(absl::StrCat(
      kernel.name, " on ", plan::DType_Name(dtype), " needs the CUDA backend"));
}

} // namespace braid::exec
