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

#include "runtime/plan/plan.pb.h"

#include <cstdint>

namespace braid::plan {

struct Work {
  double flops = 0;
  double bytes = 0;
  /// For collectives and point-to-point transfers: the bytes one rank
  /// contributes (a collective's input, a SEND's message), and the ranks of
  /// its group (1 for a transfer).
  double messageBytes = 0;
  int64_t groupSize = 1;
};

/// The work of `inst` in `plan` (a validated plan).
Work InstructionWork(const Plan &plan, const Instruction &inst);

/// Whether `kernel` moves data between ranks (collectives, SEND, RECV).
/// Not WAIT, which only finishes a collective that its own instruction
/// prices, and not GRAD_NORM, which is communication only with a group: its
/// Work then has groupSize and an 8-byte message.
bool IsCommunication(Kernel kernel);

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_WORK_H
