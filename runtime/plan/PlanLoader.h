//===- PlanLoader.h - Reading, writing and validating plan files -*- C++ -*-===//
//
// Implemented in PlanFile.cpp (the frame), PlanValidation.cpp (ValidatePlan),
// KernelChecks.cpp (each kernel's operands) and Mesh.cpp (Mesh.h, included
// here: the mesh arithmetic the compiler shares).
//
// A plan file is a frame around the serialized Plan (plan.proto):
//
//   bytes 0-7    magic "BRAIDPLN"
//   bytes 8-15   payload length, uint64 little-endian
//   bytes 16-19  CRC-32 (IEEE) of the payload, uint32 little-endian
//   bytes 20-    the payload: a serialized braid.plan.Plan
//
// The frame exists because a Protobuf message cut at a field boundary still
// parses: without the length and checksum, a truncated plan could load as a
// different, shorter program.
//
// Validation guarantees what the executor relies on to never touch memory
// outside the arena: every buffer lies inside it (with pipeline stages,
// inside its stage's arena, Stage.arena_bytes, which is all its ranks
// allocate), every instruction names existing buffers, and every kernel's
// operands have the shapes, dtypes and attributes the kernel derives its
// extents from.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_PLANLOADER_H
#define BRAID_RUNTIME_PLAN_PLANLOADER_H

#include "runtime/plan/Mesh.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::plan {

/// The most payload bytes a plan file may hold (1 GiB; the largest plans the
/// tests and examples compile are a few MB). The loader reads a file's
/// 20-byte header first and refuses a larger payload, or a file whose size
/// differs from what its header says, before reading the payload.
inline constexpr int64_t kMaxPlanPayloadBytes = int64_t(1) << 30;

/// The frame around `plan` (see above).
std::string SerializePlanFile(const Plan &plan);

/// Writes the framed plan to `path` (common::OutputFile: through a synced
/// temporary and a rename, so a crash never leaves a half-written plan under
/// that name; a device such as /dev/null is written in place).
absl::Status WritePlanFile(const Plan &plan, const std::string &path);

/// Unframes, parses and validates the bytes of a plan file. `source` names
/// the file in error messages.
absl::StatusOr<Plan> ParsePlanFile(absl::string_view bytes,
                                   absl::string_view source);

/// Reads `path` and parses it as above: the header first, the payload only
/// when the header is a plan's and within kMaxPlanPayloadBytes.
absl::StatusOr<Plan> LoadPlanFile(const std::string &path);

/// The checks of ParsePlanFile on an in-memory plan.
absl::Status ValidatePlan(const Plan &plan);

/// The elements of one copy of a buffer: the product of its shape.
int64_t NumElements(const Buffer &b);

/// The size of a buffer's last dimension (1 for a scalar).
inline int64_t LastDim(const Buffer &b) {
  return b.shape_size() ? b.shape(b.shape_size() - 1) : 1;
}

/// The rows of a buffer viewed as [rows, its last dimension].
inline int64_t RowsOf(const Buffer &b) {
  return NumElements(b) / (LastDim(b) > 0 ? LastDim(b) : 1);
}

/// An instruction's integer or float attribute `name`, which the loader has
/// checked is there.
inline int64_t IntAttr(const Instruction &inst, const std::string &name) {
  return inst.int_attrs().at(name);
}
inline double FloatAttr(const Instruction &inst, const std::string &name) {
  return inst.float_attrs().at(name);
}

/// The function a step without a pipeline runs for its micro-batch `m` of
/// `micros`: first_micro_step for the first when the plan has it (with one
/// micro-batch, the last too), else last_micro_step for the last when the
/// plan has it, else micro_step.
const std::string &MicroStepFunction(const StepFunctions &fns, int64_t m,
                                     int64_t micros);

/// OK when buffer `id` lies in the arena of the rank that runs pipeline
/// stage `stage` (every buffer, without stages); otherwise an error naming
/// the buffer's stage.
absl::Status CheckBufferOnStage(const Plan &plan, int id, int64_t stage);

/// Bytes of one element of `dtype` (0 for an unknown dtype).
int64_t DTypeBytes(DType dtype);

/// CRC-32 (IEEE 802.3, the polynomial of zlib and PNG) of `data`.
uint32_t Crc32(absl::string_view data);

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_PLANLOADER_H
