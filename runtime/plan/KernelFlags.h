//===- KernelFlags.h - Kernels.def's names, numbers and flags ---*- C++ -*-===//
//
// The kernels' identifiers and the flags of runtime/plan/Kernels.def's rows.
// Free of Protobuf and LLVM, so that the compiler's dialects and the runtime
// read the same registry.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_KERNELFLAGS_H
#define BRAID_RUNTIME_PLAN_KERNELFLAGS_H

#include <cstddef>
#include <cstdint>

namespace braid::plan {

enum KernelFlag : uint32_t {
  kNoFlags = 0,
  /// Moves data between ranks: a collective (over its `group`) or a
  /// point-to-point transfer (along its `rank_axis`). Its Work carries the
  /// message.
  kCommunication = 1u << 0,
  /// A matrix product on the GEMM library (cuBLASLt on CUDA): LINEAR and
  /// its gradients.
  kMatmul = 1u << 1,
  /// Part of a backward pass (a gradient of a forward kernel).
  kGradient = 1u << 2,
  /// Runs in its operands' dtype (one dtype throughout: sums, zeroing,
  /// copies) rather than the plan's compute dtype.
  kOperandDType = 1u << 3,
  /// May only start (int attr async = 1) and be left in flight for a WAIT.
  kAsync = 1u << 4,
  /// Finishes collectives started on its buffers (WAIT): it moves nothing
  /// itself, but a trace shows it as communication time.
  kFinishes = 1u << 5,
  /// Requires a `group` (the mesh axes its ranks differ along).
  kGroupRequired = 1u << 6,
  /// May have a `group`; it communicates only when it has one (GRAD_NORM's
  /// norm over tensor-parallel shards).
  kGroupOptional = 1u << 7,
  /// Goes to a peer rank along its `rank_axis` (SEND, RECV).
  kPointToPoint = 1u << 8,
  /// Updates parameters: the optimizer step (a trace shows it as "update").
  kOptimizer = 1u << 9,
  /// Its FLOPs are matrix products (GEMMs and attention's q·kᵀ and p·v):
  /// the cost model prices them at the matmul peak, the schedule view
  /// draws its calls by them.
  kMatrixProducts = 1u << 10,
  /// Its output 0 may be written over input 0 (input 1): in every
  /// executor the kernel reads each element of that input before it writes
  /// the same element of the output, and nothing else of the input after.
  /// plan-lower then gives the output the input's buffer when the input is
  /// an activation of the same type that nothing reads after the kernel:
  /// one buffer fewer alive, and its bytes written where they were just
  /// read rather than pulled into the cache a second time.
  kOverwritesInput0 = 1u << 11,
  kOverwritesInput1 = 1u << 12,
};

/// No upper bound on a kernel's operand count.
constexpr int kMany = 2147483647;

/// The outputs a kernel adds into rather than overwrites, as a bit mask
/// over output indices (bit i: output i).
constexpr uint32_t kNoOutputs = 0;
constexpr uint32_t output(int i) { return 1u << i; }

/// A kernel, as Kernels.def names and numbers it (the plan file's `enum
/// Kernel` has the same numbers: runtime/plan/KernelRegistry.cpp).
enum class KernelId : int {
#define BRAID_KERNEL(NAME, NUMBER, ...) NAME = NUMBER,
#include "runtime/plan/Kernels.def"
};

/// A row of Kernels.def, as the compiler reads it (runtime/plan's
/// KernelRegistry adds the plan file's types).
struct KernelRow {
  KernelId id;
  const char *name;
  int minInputs, maxInputs, minOutputs, maxOutputs;
  uint32_t accumulatedOutputs; ///< bit i: output i is added into
  uint32_t flags;              ///< KernelFlag bits

  constexpr bool has(KernelFlag flag) const { return (flags & flag) != 0; }
  constexpr bool accumulates(int output) const {
    return output >= 0 && output < 32 && ((accumulatedOutputs >> output) & 1u);
  }
};

inline constexpr KernelRow kKernelRows[] = {
#define BRAID_KERNEL(NAME, NUMBER, MIN_IN, MAX_IN, MIN_OUT, MAX_OUT,           \
                     ACCUMULATED, FLAGS, CHECK, WORK)                          \
  {KernelId::NAME, #NAME, MIN_IN, MAX_IN, MIN_OUT, MAX_OUT, ACCUMULATED, FLAGS},
#include "runtime/plan/Kernels.def"
};

/// The row of kernel `id`, or nullptr for a number without one.
constexpr const KernelRow *FindKernelRow(KernelId id) {
  for (const KernelRow &row : kKernelRows)
    if (row.id == id)
      return &row;
  return nullptr;
}

/// The row named `name` (`size` characters, not NUL-terminated), or
/// nullptr.
constexpr const KernelRow *FindKernelRow(const char *name, size_t size) {
  for (const KernelRow &row : kKernelRows) {
    size_t i = 0;
    while (i < size && row.name[i] != 0 && row.name[i] == name[i])
      ++i;
    if (i == size && row.name[i] == 0)
      return &row;
  }
  return nullptr;
}

/// The name of kernel `id` ("LINEAR"), or "" for a number without a row.
constexpr const char *KernelIdName(KernelId id) {
  const KernelRow *row = FindKernelRow(id);
  return row ? row->name : "";
}

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_KERNELFLAGS_H
