//===- Mesh.h - Ranks as a grid: coordinates, groups, places ----*- C++ -*-===//
//
// The arithmetic of a plan's mesh (plan.proto's Mesh: axes major to minor)
// that the loader, the executors, the communicators and the compiler share.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_MESH_H
#define BRAID_RUNTIME_PLAN_MESH_H

#include "runtime/plan/plan.pb.h"

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::plan {

/// The number of ranks the plan is for: the product of its mesh sizes.
int64_t WorldSize(const Plan &plan);

/// The coordinates of `rank` along each axis of `mesh` (axes major to minor).
std::vector<int64_t> MeshCoordinates(const Mesh &mesh, int64_t rank);

/// The size of mesh axis `axis`, or 1 when the mesh has no such axis.
int64_t AxisSize(const Mesh &mesh, absl::string_view axis);

/// The number of ranks in the group of collective `inst`: the product of
/// the sizes of the mesh axes it names (1 without any).
int64_t GroupSize(const Plan &plan, const Instruction &inst);

/// "dp 2 x tp 4": the mesh's axes and sizes, for messages.
std::string DescribeMesh(const Mesh &mesh);

/// A group of mesh axes as communicators key it: the names sorted, joined
/// by commas.
std::string GroupKey(std::vector<std::string> axes);

/// The groups a communicator of `plan` needs, in one order on every rank
/// (creating a group is collective): every group of mesh axes the plan's
/// collectives name, in the order they first appear, then each single axis
/// (the pipeline's messages and the trainer's own collectives use those;
/// ranks of different stages reach them at different points of their
/// programs, so none can be created later).
std::vector<std::vector<std::string>> CommunicationGroups(const Plan &plan);

/// The colour of the group along `axes` of the rank at `coords`: the ranks
/// sharing their coordinates along every other axis share it.
int64_t GroupColor(const Mesh &mesh, absl::Span<const int64_t> coords,
                   const std::vector<std::string> &axes);

/// OK when `coords` name a rank of `mesh` (one coordinate per axis, each
/// inside it); otherwise an error naming both. Executors check their
/// communicator's coordinates with it: rank-dependent offsets (a slice of
/// the vocabulary, of the heads) are only checked inside the mesh.
absl::Status CheckMeshCoordinates(const Mesh &mesh,
                                  absl::Span<const int64_t> coords);

/// The coordinate along `axis` in `coords` (0 when the mesh has no such
/// axis, or `coords` none for it).
int64_t AxisCoordinate(const Mesh &mesh, absl::Span<const int64_t> coords,
                       absl::string_view axis);

/// The place, in the group of collective `inst`, of the rank at `coords`:
/// row-major over the group's axes, as communicators order their ranks.
int64_t GroupPlace(const Plan &plan, const Instruction &inst,
                   absl::Span<const int64_t> coords);

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_MESH_H
