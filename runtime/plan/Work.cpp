//===- Work.cpp - The work of a plan instruction --------------------------===//
//
// Each kernel's formula is the WORK column of its row in Kernels.def, an
// expression on the WorkCounter below. FLOPs are those of the CPU kernels (runtime/cpu) as the executor calls
// them (runtime/exec/Executor.cpp), so that a rate calibrated on the CPU
// backend divides the work the kernel really did. Matrix products are
// 2·m·n·k. Element-wise kernels count the arithmetic of one element of their
// loop body, a transcendental (exp, erf, tanh, sqrt) as one FLOP; per-row
// terms (a norm's square root, a softmax row's log) are left out, being a
// 1/d fraction of the per-element ones.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Work.h"

#include "runtime/plan/KernelParams.h"
#include "runtime/plan/KernelRegistry.h"
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

/// The work of one instruction, as Kernels.def's WORK expressions state
/// it. Every method sets the FLOPs (and for communication the message) of
/// `work`, whose bytes are already the operands'.
class WorkCounter {
public:
  WorkCounter(const Plan &plan, const Instruction &inst, Work &work)
      : plan(plan), inst(inst), work(work) {}

  /// The instruction's last input, for perInputElement.
  static constexpr int kLastInput = -1;

  int inputs() const { return inst.inputs_size(); }
  const Instruction &instruction() const { return inst; }

  /// Copies (of rows, of columns) and zeroing: no arithmetic.
  void none() {}
  /// `perElement` FLOPs for each element of input `i`.
  void perInputElement(int i, double perElement) {
    work.flops = perElement * numel(in(i == kLastInput ? inputs() - 1 : i));
  }
  /// `perElement` FLOPs for each element of output `i`.
  void perOutputElement(int i, double perElement) {
    work.flops = perElement * numel(out(i));
  }

  void linear() {
    // y [rows, out] = x [rows, in] · W, then y += bias · bias_scale (a
    // multiply and an add per element of y).
    bool t = DecodeLinear(inst).transposeW;
    double inDim = dimOf(in(1), t ? 1 : 0), outDim = dimOf(in(1), t ? 0 : 1);
    double rows = rowsOf(in(0), inDim);
    work.flops = 2 * rows * inDim * outDim;
    if (inputs() == 3)
      work.flops += 2 * rows * outDim;
  }
  void linearGradInput() {
    // dx [rows, in] = dy [rows, out] · Wᵀ.
    double outDim = lastDim(in(0)), inDim = lastDim(out(0));
    work.flops = 2 * rowsOf(in(0), outDim) * inDim * outDim;
  }
  void linearGradWeight() {
    // dW [in, out] += xᵀ · dy over the rows (the accumulation is the GEMM's
    // beta = 1, in·out adds, left out as GEMM counts are).
    double inDim = lastDim(in(0)), outDim = lastDim(in(1));
    work.flops = 2 * rowsOf(in(0), inDim) * inDim * outDim;
  }

  void attentionCached() {
    // q [batch, queries, heads · d] against a cache of [batch, positions,
    // kv_heads · d]: q·k and p·v (4d) per score, as if each query saw every
    // position (at most that many).
    const Buffer &q = in(0);
    AttentionParams p = DecodeAttention(inst);
    double heads = double(std::max<int64_t>(p.heads, 1));
    double d = dimOf(q, 2) / heads;
    work.flops = 4 * d * heads * dimOf(q, 0) * dimOf(q, 1) * dimOf(in(4), 1);
  }

  void attention(bool grad) {
    // q [batch, seq, heads · d] holds the heads this rank computes (`heads`
    // is the local count with tensor parallelism); k [batch, keys, kv_heads ·
    // d]. Per score: q·k (2d) and p·v (2d); the softmax (a few FLOPs per
    // score, against 4d) is left out, as attention FLOP counts do.
    const Buffer &q = in(0);
    AttentionParams p = DecodeAttention(inst);
    double heads = double(std::max<int64_t>(p.heads, 1));
    double batch = dimOf(q, 0), queries = dimOf(q, 1), d = dimOf(q, 2) / heads,
           keys = dimOf(in(1), 1);
    work.headDim = int64_t(d);
    work.flops = AttentionFlops(batch, heads, queries, keys, d, p.causal, grad);
    // Without the forward's log-sum-exp (a plan that keeps none: five
    // inputs) the executor first reruns the whole forward to get it.
    if (grad && inputs() < 6 + (p.documents ? 1 : 0))
      work.flops +=
          AttentionFlops(batch, heads, queries, keys, d, p.causal, false);
  }

  void gradNorm() {
    // g² and its sum per element of every gradient; with a group, the ranks'
    // sums meet in an all-reduce of one F64.
    double elements = 0;
    for (int i = 0; i < inputs(); ++i)
      elements += numel(in(i));
    work.flops = 2 * elements;
    if (inst.group_size() > 0) {
      work.pattern = CommPattern::kAllReduce;
      work.messageBytes = 8;
      work.groupSize = groupRanks(plan, inst);
    }
  }
  void adamw() {
    // Per element (runtime/cpu/Optimizer.cpp, adamwUpdate): g = grad · scale
    // (1), m = β1·m + (1-β1)·g (3), v = β2·v + (1-β2)·g² (4), the decay p ·
    // (1 - lr·wd) (1), p - stepSize · m / (√v · c + eps) (6). With a
    // rank_axis (ZeRO) the elements are the block's (m's), and only the
    // rank's block of the flat parameters is read and written.
    double n = numel(in(2));
    work.flops = 15 * n;
    if (!inst.rank_axis().empty())
      work.bytes -= sizeInBytes(in(0)) - n * DTypeBytes(in(0).dtype());
  }

  // Data movement: 0 FLOPs (a reduction's adds are the network's time, not
  // the ALU's).
  void copy() {
    // With a rank_axis, x goes into one block of y, x's size: the rest of y
    // is not touched.
    if (!inst.rank_axis().empty())
      work.bytes = 2 * sizeInBytes(in(0));
  }
  void wait() { work.bytes = 0; }
  void send() {
    work.pattern = CommPattern::kTransfer;
    work.messageBytes = sizeInBytes(in(0));
  }
  void recv() {
    work.pattern = CommPattern::kTransfer;
    work.messageBytes = sizeInBytes(out(0));
  }
  void allReduce() {
    // Every input is reduced; the same message whether in place or not.
    work.pattern = CommPattern::kAllReduce;
    for (int i = 0; i < inputs(); ++i)
      work.messageBytes += sizeInBytes(in(i));
    work.groupSize = groupRanks(plan, inst);
  }
  void allGather() {
    // The rank's block: x, or in place (ZeRO's flat parameters) its share of
    // the one buffer.
    work.pattern = CommPattern::kAllGather;
    work.groupSize = groupRanks(plan, inst);
    work.messageBytes = sizeInBytes(in(0));
    if (inst.outputs_size() == 1 && inputs() == 1 &&
        inst.inputs(0) == inst.outputs(0))
      work.messageBytes /= double(std::max<int64_t>(work.groupSize, 1));
  }
  void reduceScatter() {
    // The whole tensor before the scatter.
    work.pattern = CommPattern::kReduceScatter;
    work.groupSize = groupRanks(plan, inst);
    work.messageBytes = sizeInBytes(in(0));
  }

private:
  const Buffer &in(int i) const {
    return i >= 0 && i < inst.inputs_size() ? bufferAt(plan, inst.inputs(i))
                                            : emptyBuffer();
  }
  const Buffer &out(int i) const {
    return i >= 0 && i < inst.outputs_size() ? bufferAt(plan, inst.outputs(i))
                                             : emptyBuffer();
  }

  const Plan &plan;
  const Instruction &inst;
  Work &work;
};

} // namespace

Work InstructionWork(const Plan &plan, const Instruction &inst) {
  // A kernel without a row (unspecified, or from a newer plan): no work.
  if (!FindKernel(inst.kernel()))
    return {};
  Work work;
  work.bytes = operandBytes(plan, inst);
  WorkCounter counter(plan, inst, work);
  using Count = void (*)(WorkCounter &w);
  static const Count kCounts[] = {
#define BRAID_KERNEL(NAME, NUMBER, MIN_IN, MAX_IN, MIN_OUT, MAX_OUT,           \
                     ACCUMULATED, FLAGS, CHECK, WORK)                          \
  [](WorkCounter &w) { WORK; },
#include "runtime/plan/Kernels.def"
  };
  kCounts[KernelIndex(inst.kernel())](counter);
  return work;
}

double AttentionFlops(double batch, double heads, double queries, double keys,
                      double headDim, bool causal, bool backward) {
  const double scores =
      batch * heads * attentionScores(queries, keys, causal);
  if (!backward)
    return 4 * headDim * scores;
  return 10 * headDim * scores + 2 * headDim * batch * heads * queries;
}

} // namespace braid::plan
