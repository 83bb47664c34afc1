//===- Executor.h - Runs the functions of a plan on the CPU -----*- C++ -*-===//
//
// The executor owns one arena per rank, allocated once at the size the plan
// states, and runs a plan function by calling one CPU kernel per instruction
// on arena addresses. Every size a kernel uses is derived from buffer shapes
// that the plan loader has validated, so a plan that loads cannot make the
// executor touch memory outside the arena.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_EXECUTOR_H
#define BRAID_RUNTIME_EXEC_EXECUTOR_H

#include "runtime/exec/Communicator.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace braid::exec {

/// What keys the randomness of one micro-batch (dropout).
struct StepContext {
  uint64_t seed = 0;
  uint32_t step = 0;
  /// The micro-batch's first sample within the step's global batch: dropout
  /// masks are drawn per element of the whole global batch, so they do not
  /// depend on how it is split into micro-batches and data-parallel ranks.
  int64_t sampleOffset = 0;
};

class Executor {
public:
  /// Validates `plan` (as the loader does) and allocates its arena. `comm`
  /// runs the plan's collectives; without one, a collective whose group is a
  /// single rank is a copy and any other is an error.
  static absl::StatusOr<std::unique_ptr<Executor>>
  Create(plan::Plan plan, Communicator *comm = nullptr);

  const plan::Plan &plan() const { return plan_; }
  Communicator *communicator() const { return comm_; }
  /// The index of the buffer named `name`, or -1.
  int FindBuffer(absl::string_view name) const;

  /// Copies `values` into buffer `id` (converting to its dtype); the sizes
  /// must match.
  absl::Status Write(int id, absl::Span<const double> values);
  /// The contents of buffer `id`, converted to double.
  absl::StatusOr<std::vector<double>> Read(int id) const;

  /// Runs function `name` once.
  absl::Status Run(absl::string_view name, const StepContext &context);

  /// Seconds spent in each kernel since profiling was enabled (indexed by
  /// plan::Kernel); empty while profiling is off.
  void EnableProfile() { profile_.assign(plan::Kernel_ARRAYSIZE, 0.0); }
  const std::vector<double> &Profile() const { return profile_; }

private:
  explicit Executor(plan::Plan plan) : plan_(std::move(plan)) {}
  template <typename T>
  absl::Status runInstruction(const plan::Instruction &inst,
                              const StepContext &context);
  void *address(int id) const { return arena_.get() + plan_.buffers(id).offset(); }
  /// This rank's coordinate along the instruction's rank_axis (0 without
  /// one, or without other ranks).
  int64_t rankCoordinate(const plan::Instruction &inst) const;

  plan::Plan plan_;
  std::unique_ptr<uint8_t[]> arena_;
  Communicator *comm_ = nullptr;
  std::vector<double> profile_;
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_EXECUTOR_H
