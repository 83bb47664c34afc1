//===- Work.h - The work of a plan instruction ------------------*- C++ -*-===//
//
// How much an instruction computes and moves, from its buffers' shapes and
// attributes: the cost model prices plans with it, and `braid calibrate`
// turns measured kernel times into rates with it. FLOPs count a multiply
// and an add as 2; bytes are those the kernel reads and writes at least
// once (its operands' sizes), not cache traffic.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_WORK_H
#define BRAID_RUNTIME_PLAN_WORK_H

#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/plan.pb.h"

#include <cstdint>

namespace braid::plan {

/// How a communicating instruction's message travels (the cost model
/// prices each pattern with its own formula).
enum class CommPattern { kNone, kTransfer, kAllReduce, kAllGather, kReduceScatter };

struct Work {
  double flops = 0;
  double bytes = 0;
  /// For collectives and point-to-point transfers: the bytes one rank
  /// contributes (a collective's input, a SEND's message), and the ranks of
  /// its group (1 for a transfer).
  double messageBytes = 0;
  int64_t groupSize = 1;
  CommPattern pattern = CommPattern::kNone;
  /// ATTENTION and ATTENTION_GRAD: the head dimension (the cost model's
  /// attention curves are by head dimension); 0 for other kernels.
  int64_t headDim = 0;
};

/// The FLOPs of fused attention over batch · heads problems of `queries`
/// queries, `keys` keys and head dimension d, as attention FLOP counts
/// go: forward, q·k and p·v, 4·d per score; backward (with the forward's
/// log-sum-exp), the recomputed q·k, dout·v, dq, dk and dv, 10·d per score,
/// and dout·out, 2·d per query row. Causal scores are the lower triangle's
/// (queries · (queries + 1) / 2: as many keys as queries), the CPU kernels'
/// work. The softmax's few FLOPs per score are left out.
double AttentionFlops(double batch, double heads, double queries, double keys,
                      double headDim, bool causal, bool backward);

/// The work of `inst` in `plan` (a validated plan).
Work InstructionWork(const Plan &plan, const Instruction &inst);

/// IsCommunication and the other kinds of kernel: runtime/plan/KernelRegistry.h.

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_WORK_H
