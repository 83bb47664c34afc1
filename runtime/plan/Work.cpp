//===- Work.cpp - The work of a plan instruction --------------------------===//
//
// FLOPs are those of the CPU kernels (runtime/cpu) as the executor calls
// them (runtime/exec/Executor.cpp), so that a rate calibrated on the CPU
// backend divides the work the kernel really did. Matrix products are
// 2·m·n·k. Element-wise kernels count the arithmetic of one element of their
// loop body, a transcendental (exp, erf, tanh, sqrt) as one FLOP; per-row
// terms (a norm's square root, a softmax row's log) are left out, being a
// 1/d fraction of the per-element ones.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Work.h"

#include "runtime/plan/PlanLoader.h"

#include <algorithm>
#include <string>
#include <vector>

namespace braid::plan {
namespace {

/// A buffer of no elements, for an index outside the plan: the work of an
/// instruction that a validated plan would not contain is then 0 rather
/// than a crash in the cost model.
const Buffer &emptyBuffer() {
  static const Buffer *const empty = new Buffer();
  return *empty;
}

const Buffer &bufferAt(const Plan &plan, int32_t id) {
  return id >= 0 && id < plan.buffers_size() ? plan.buffers(id) : emptyBuffer();
}

double numel(const Buffer &b) {
  double n = 1;
  for (int64_t d : b.shape())
    n *= double(d);
  return n;
}

/// One copy's bytes: a slotted buffer's copies are used one per call.
double sizeInBytes(const Buffer &b) {
  return numel(b) * double(DTypeBytes(b.dtype()));
}

/// Dimension i of b, or 0 when b has no such dimension.
double dimOf(const Buffer &b, int i) {
  return i >= 0 && i < b.shape_size() ? double(b.shape(i)) : 0;
}

double lastDim(const Buffer &b) { return dimOf(b, b.shape_size() - 1); }

/// The rows of b when its last dimension has `cols` elements.
double rowsOf(const Buffer &b, double cols) {
  return cols > 0 ? numel(b) / cols : 0;
}

int64_t intAttr(const Instruction &inst, const char *name,
                int64_t otherwise = 0) {
  auto it = inst.int_attrs().find(name);
  return it == inst.int_attrs().end() ? otherwise : it->second;
}

int64_t groupRanks(const Plan &plan, const Instruction &inst) {
  int64_t ranks = 1;
  for (const std::string &axis : inst.group())
    ranks *= AxisSize(plan.mesh(), axis);
  return ranks;
}

/// The bytes of the distinct buffers `inst` names (one named as an input
/// and an output is read and written in place: counted once).
double operandBytes(const Plan &plan, const Instruction &inst) {
  std::vector<int32_t> ids(inst.inputs().begin(), inst.inputs().end());
  ids.insert(ids.end(), inst.outputs().begin(), inst.outputs().end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  double bytes = 0;
  for (int32_t id : ids)
    bytes += sizeInBytes(bufferAt(plan, id));
  return bytes;
}

/// Scores (query, key) pairs one (batch, head) problem of attention
/// computes: the CPU kernels visit keys [0, i] for query i when causal
/// (Head::keys in runtime/cpu/Kernels.cpp), so causal attention does half
/// the work (the loader allows causal only with as many keys as queries).
double attentionScores(double queries, double keys, bool causal) {
  return causal ? queries * (queries + 1) / 2 : queries * keys;
}

} // namespace

bool IsCommunication(Kernel kernel) {
  switch (kernel) {
  case ALL_REDUCE:
  case ALL_GATHER:
  case REDUCE_SCATTER:
  case SEND:
  case RECV:
    return true;
  // WAIT only joins a collective started earlier, whose instruction carries
  // the message (counting it here too would price it twice). GRAD_NORM is
  // mostly compute; with a group, its 8-byte all-reduce shows in its Work's
  // messageBytes and groupSize rather than here, since the kernel alone
  // does not say whether it has one.
  case WAIT:
  case GRAD_NORM:
  case KERNEL_UNSPECIFIED:
  case EMBEDDING:
  case EMBEDDING_GRAD:
  case POSITION_EMBEDDING:
  case POSITION_EMBEDDING_GRAD:
  case LINEAR:
  case LINEAR_GRAD_INPUT:
  case LINEAR_GRAD_WEIGHT:
  case BIAS_GRAD:
  case RMS_NORM:
  case RMS_NORM_GRAD:
  case LAYER_NORM:
  case LAYER_NORM_GRAD:
  case ROPE:
  case ROPE_GRAD:
  case ATTENTION:
  case ATTENTION_GRAD:
  case QKV_SPLIT:
  case QKV_CONCAT:
  case SWIGLU:
  case SWIGLU_GRAD:
  case GELU:
  case GELU_GRAD:
  case ADD:
  case DROPOUT:
  case CROSS_ENTROPY:
  case CROSS_ENTROPY_GRAD:
  case ZERO:
  case ADAMW:
  case CROSS_ENTROPY_MAX:
  case CROSS_ENTROPY_PARTIAL:
  case CROSS_ENTROPY_FINISH:
  case COPY:
  case Kernel_INT_MIN_SENTINEL_DO_NOT_USE_:
  case Kernel_INT_MAX_SENTINEL_DO_NOT_USE_:
    return false;
  }
  return false; // a value outside the enum (a newer plan)
}

Work InstructionWork(const Plan &plan, const Instruction &inst) {
  auto in = [&](int i) -> const Buffer & {
    return i < inst.inputs_size() ? bufferAt(plan, inst.inputs(i))
                                  : emptyBuffer();
  };
  auto out = [&](int i) -> const Buffer & {
    return i < inst.outputs_size() ? bufferAt(plan, inst.outputs(i))
                                   : emptyBuffer();
  };
  Work work;
  work.bytes = operandBytes(plan, inst);
  // Every case sets flops (and for communication the message); no default,
  // so that a kernel added to plan.proto without a case here is a -Wswitch
  // warning rather than silently free.
  switch (inst.kernel()) {
  case KERNEL_UNSPECIFIED:
  case Kernel_INT_MIN_SENTINEL_DO_NOT_USE_:
  case Kernel_INT_MAX_SENTINEL_DO_NOT_USE_:
    return {};

  // Copies of rows: no arithmetic.
  case EMBEDDING:
  case POSITION_EMBEDDING:
  case QKV_SPLIT:
  case QKV_CONCAT:
    work.flops = 0;
    return work;
  // dtable[row] += dy[r]: one add per element of dy (with a rank_axis, an
  // upper bound: rows of other ranks' ids are skipped).
  case EMBEDDING_GRAD:
  case POSITION_EMBEDDING_GRAD:
  case BIAS_GRAD:
    work.flops = numel(in(0));
    return work;

  case LINEAR: {
    // y [rows, out] = x [rows, in] · W, then y += bias · bias_scale (a
    // multiply and an add per element of y).
    bool t = intAttr(inst, "transpose_w") != 0;
    double inDim = dimOf(in(1), t ? 1 : 0), outDim = dimOf(in(1), t ? 0 : 1);
    double rows = rowsOf(in(0), inDim);
    work.flops = 2 * rows * inDim * outDim;
    if (inst.inputs_size() == 3)
      work.flops += 2 * rows * outDim;
    return work;
  }
  case LINEAR_GRAD_INPUT: {
    // dx [rows, in] = dy [rows, out] · Wᵀ.
    double outDim = lastDim(in(0)), inDim = lastDim(out(0));
    work.flops = 2 * rowsOf(in(0), outDim) * inDim * outDim;
    return work;
  }
  case LINEAR_GRAD_WEIGHT: {
    // dW [in, out] += xᵀ · dy over the rows (the accumulation is the GEMM's
    // beta = 1, in·out adds, left out as GEMM counts are).
    double inDim = lastDim(in(0)), outDim = lastDim(in(1));
    work.flops = 2 * rowsOf(in(0), inDim) * inDim * outDim;
    return work;
  }

  // RMSNorm forward, per element: x² and its sum (2), x · rstd · w (2).
  case RMS_NORM:
    work.flops = 4 * numel(in(0));
    return work;
  // The executor recomputes the forward (4), then per element: dw += dy · x
  // · rstd (3), the row's dot x · w · dy (3), dx = rstd · w · dy - x · k
  // (4).
  case RMS_NORM_GRAD:
    work.flops = (4 + 10) * numel(in(0));
    return work;
  // LayerNorm forward, per element: the mean's add (1), the variance's
  // subtract, square and add (3), (x - mean) · rstd · w + b (4).
  case LAYER_NORM:
    work.flops = 8 * numel(in(0));
    return work;
  // The executor recomputes the forward (8), then per element: dw += dy ·
  // xhat with xhat = (x - mean) · rstd (4), db += dy (1), the row sums of g
  // = w · dy and g · xhat (6), dx = rstd · (g - mean(g) - xhat · mean(g ·
  // xhat)) with xhat and g again (7).
  case LAYER_NORM_GRAD:
    work.flops = (8 + 18) * numel(in(0));
    return work;
  // A rotation of each pair (x1, x2): x1·cos - x2·sin and x2·cos + x1·sin,
  // 6 FLOPs per two elements; the angles are per position, shared by every
  // head.
  case ROPE:
  case ROPE_GRAD:
    work.flops = 3 * numel(in(0));
    return work;

  case ATTENTION:
  case ATTENTION_GRAD: {
    // q [batch, seq, heads · d] holds the heads this rank computes (`heads`
    // is the local count with tensor parallelism); k [batch, keys, kv_heads ·
    // d]. Per score: q·k (2d) and p·v (2d); the softmax (a few FLOPs per
    // score, against 4d) is left out, as attention FLOP counts do.
    const Buffer &q = in(0);
    double heads = double(std::max<int64_t>(intAttr(inst, "heads", 1), 1));
    double batch = dimOf(q, 0), queries = dimOf(q, 1), d = dimOf(q, 2) / heads;
    double scores =
        batch * heads *
        attentionScores(queries, dimOf(in(1), 1), intAttr(inst, "causal") != 0);
    double forward = 4 * d * scores;
    if (inst.kernel() == ATTENTION) {
      work.flops = forward;
      return work;
    }
    // attentionBackward per score recomputes q·k and takes dout·v, dq +=
    // ds·k, dk += ds·q and dv += p·dout (10d), and per query row dout·out
    // (2d). Without the forward's log-sum-exp (a plan that keeps none: five
    // inputs) the executor first reruns the whole forward to get it.
    work.flops = 10 * d * scores + 2 * d * batch * heads * queries;
    if (inst.inputs_size() < 6)
      work.flops += forward;
    return work;
  }

  // y = g · sigmoid(g) · up with sigmoid = 1 / (1 + exp(-g)): 4 + 2 per
  // element of y (packed or not, y has the elements of one half).
  case SWIGLU:
    work.flops = 6 * numel(out(0));
    return work;
  // Per element of dy: sigmoid (4), dup = dy · g · s (2), dgate = dy · up
  // · s · (1 + g · (1 - s)) (6).
  case SWIGLU_GRAD:
    work.flops = 12 * numel(in(inst.inputs_size() == 2 ? 1 : 2));
    return work;
  // Exact: 0.5 · x · (1 + erf(x / √2)) (5); tanh: 0.5 · x · (1 + tanh(c ·
  // (x + 0.044715 · x³))) (9).
  case GELU:
    work.flops = (intAttr(inst, "tanh") ? 9 : 5) * numel(in(0));
    return work;
  // Exact: Φ(x) (4), x · φ(x) (5), their sum and dy · (2); tanh: u and
  // tanh(u) (6), du (4), 0.5 · (1 + t) + 0.5 · x · (1 - t²) · du (8), dy ·
  // (1).
  case GELU_GRAD:
    work.flops = (intAttr(inst, "tanh") ? 19 : 11) * numel(in(0));
    return work;
  case ADD:
    work.flops = numel(in(0));
    return work;
  // x · 1/(1 - rate) where kept; the mask's Philox rounds are integer work.
  case DROPOUT:
    work.flops = numel(in(0));
    return work;

  // Per logit: the row maximum (a compare), then exp(x - max) and its sum
  // (3).
  case CROSS_ENTROPY:
    work.flops = 4 * numel(in(0));
    return work;
  // With lse: exp(x - lse) · scale (3) per logit. Without, the executor first
  // reruns the forward for the lse (4).
  case CROSS_ENTROPY_GRAD:
    work.flops = (inst.inputs_size() == 4 ? 3 : 4 + 3) * numel(in(0));
    return work;
  case CROSS_ENTROPY_MAX:
    work.flops = numel(in(0));
    return work;
  case CROSS_ENTROPY_PARTIAL:
    work.flops = 3 * numel(in(0));
    return work;
  // Per row: lse = max + log(sum) (2), the term lse - target logit (1) and
  // its share of the mean (1).
  case CROSS_ENTROPY_FINISH:
    work.flops = 4 * numel(in(1));
    return work;

  case GRAD_NORM: {
    // g² and its sum per element of every gradient; with a group, the ranks'
    // sums meet in an all-reduce of one F64.
    double elements = 0;
    for (int i = 0; i < inst.inputs_size(); ++i)
      elements += numel(in(i));
    work.flops = 2 * elements;
    if (inst.group_size() > 0) {
      work.messageBytes = 8;
      work.groupSize = groupRanks(plan, inst);
    }
    return work;
  }
  case ADAMW: {
    // Per element (runtime/cpu/Optimizer.cpp, adamwUpdate): g = grad · scale
    // (1), m = β1·m + (1-β1)·g (3), v = β2·v + (1-β2)·g² (4), the decay p ·
    // (1 - lr·wd) (1), p - stepSize · m / (√v · c + eps) (6). With a
    // rank_axis (ZeRO) the elements are the block's (m's), and only the
    // rank's block of the flat parameters is read and written.
    double n = numel(in(2));
    work.flops = 15 * n;
    if (!inst.rank_axis().empty())
      work.bytes -= sizeInBytes(in(0)) - n * DTypeBytes(in(0).dtype());
    return work;
  }

  // Data movement only: 0 FLOPs (a reduction's adds are the network's time,
  // not the ALU's).
  case ZERO:
    return work;
  case COPY:
    // With a rank_axis, x goes into one block of y, x's size: the rest of y
    // is not touched.
    if (!inst.rank_axis().empty())
      work.bytes = 2 * sizeInBytes(in(0));
    return work;
  case WAIT:
    // Moves nothing itself: the collective it finishes is priced where it
    // started.
    work.bytes = 0;
    return work;
  case SEND:
    work.messageBytes = sizeInBytes(in(0));
    return work;
  case RECV:
    work.messageBytes = sizeInBytes(out(0));
    return work;
  case ALL_REDUCE:
    // Every input is reduced; the same message whether in place or not.
    for (int i = 0; i < inst.inputs_size(); ++i)
      work.messageBytes += sizeInBytes(in(i));
    work.groupSize = groupRanks(plan, inst);
    return work;
  case ALL_GATHER:
    // The rank's block: x, or in place (ZeRO's flat parameters) its share of
    // the one buffer.
    work.groupSize = groupRanks(plan, inst);
    work.messageBytes = sizeInBytes(in(0));
    if (inst.outputs_size() == 1 && inst.inputs_size() == 1 &&
        inst.inputs(0) == inst.outputs(0))
      work.messageBytes /= double(std::max<int64_t>(work.groupSize, 1));
    return work;
  case REDUCE_SCATTER:
    // The whole tensor before the scatter.
    work.groupSize = groupRanks(plan, inst);
    work.messageBytes = sizeInBytes(in(0));
    return work;
  }
  return {}; // a value outside the enum (a newer plan)
}

} // namespace braid::plan
