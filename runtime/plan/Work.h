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
};

/// The work of `inst` in `plan` (a validated plan).
Work InstructionWork(const Plan &plan, const Instruction &inst);

/// IsCommunication and the other kinds of kernel: runtime/plan/KernelRegistry.h.

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_WORK_H
