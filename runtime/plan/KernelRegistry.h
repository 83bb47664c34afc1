//===- KernelRegistry.h - What every plan kernel is -------------*- C++ -*-===//
//
// runtime/plan/Kernels.def expanded into a table: each kernel's name, operand
// counts, accumulated outputs and flags, and the predicates every consumer
// asks (the loader, the work counter, the trace, the cost model, the
// schedule view and both executors), so that none of them keeps its own
// list of kernels.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_KERNELREGISTRY_H
#define BRAID_RUNTIME_PLAN_KERNELREGISTRY_H

#include "runtime/plan/KernelFlags.h"
#include "runtime/plan/plan.pb.h"

#include "absl/strings/string_view.h"

#include <cstdint>
#include <optional>

namespace braid::plan {

/// A row of Kernels.def (KernelFlags.h) with its plan-file kernel.
struct KernelInfo : KernelRow {
  Kernel kernel;
};
/// The number of rows of Kernels.def.
int KernelCount();

/// The row of `kernel`, or nullptr for a value that has none (unspecified,
/// or from a newer plan).
const KernelInfo *FindKernel(Kernel kernel);
/// The row of `kernel`, which must have one.
const KernelInfo &KernelInfoOf(Kernel kernel);
/// The row named `name` (as in plan.proto: "LINEAR"), or nullptr.
const KernelInfo *FindKernel(absl::string_view name);
/// Row `index` of Kernels.def, 0 <= index < KernelCount(): the index the
/// backends' dispatch tables use.
const KernelInfo &KernelAt(int index);
/// The index of `kernel`'s row (which it must have).
int KernelIndex(Kernel kernel);

/// Moves data between ranks (collectives, SEND, RECV). Not WAIT, which
/// only finishes a collective its own instruction prices, and not
/// GRAD_NORM, whose group shows in its Work instead.
bool IsCommunication(Kernel kernel);
/// What a trace shows as communication time: the kernels that move data,
/// WAIT (time spent finishing them), and a kernel that communicates only
/// with a group (GRAD_NORM over tensor-parallel shards) when it has one.
bool IsCommunicationTime(const Instruction &inst);
bool IsPointToPoint(Kernel kernel);
/// A GEMM (kMatmul).
bool IsMatmul(Kernel kernel);
/// Its FLOPs are matrix products (kMatrixProducts).
bool HasMatrixProducts(Kernel kernel);
/// A collective over a group (kGroupRequired): ALL_REDUCE, ALL_GATHER,
/// REDUCE_SCATTER.
bool IsCollective(Kernel kernel);
bool IsGradient(Kernel kernel);
/// Whether output `i` of the kernel is added into rather than overwritten.
bool AccumulatesOutput(Kernel kernel, int i);

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_KERNELREGISTRY_H
