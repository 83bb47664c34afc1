//===- Mesh.cpp - Ranks as a grid: coordinates, groups, places ------------===//

#include "runtime/plan/Mesh.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <string>
#include <vector>

namespace braid::plan {

int64_t WorldSize(const Plan &plan) {
  int64_t n = 1;
  for (int64_t s : plan.mesh().sizes())
    n *= s;
  return n;
}

std::vector<int64_t> MeshCoordinates(const Mesh &mesh, int64_t rank) {
  std::vector<int64_t> coords(mesh.sizes_size());
  for (int i = mesh.sizes_size() - 1; i >= 0; --i) {
    coords[i] = rank % mesh.sizes(i);
    rank /= mesh.sizes(i);
  }
  return coords;
}

std::string DescribeMesh(const Mesh &mesh) {
  std::vector<std::string> axes;
  for (int i = 0; i < mesh.axes_size(); ++i)
    axes.push_back(absl::StrCat(mesh.axes(i), " ", mesh.sizes(i)));
  return absl::StrJoin(axes, " x ");
}

std::string GroupKey(std::vector<std::string> axes) {
  std::sort(axes.begin(), axes.end());
  return absl::StrJoin(axes, ",");
}

std::vector<std::vector<std::string>> CommunicationGroups(const Plan &plan) {
  std::set<std::string> keys;
  std::vector<std::vector<std::string>> groups;
  for (const Function &fn : plan.functions())
    for (const Instruction &inst : fn.body())
      if (inst.group_size()) {
        std::vector<std::string> axes(inst.group().begin(), inst.group().end());
        if (keys.insert(GroupKey(axes)).second)
          groups.push_back(axes);
      }
  for (const std::string &axis : plan.mesh().axes())
    if (keys.insert(GroupKey({axis})).second)
      groups.push_back({axis});
  return groups;
}

int64_t GroupColor(const Mesh &mesh, absl::Span<const int64_t> coords,
                   const std::vector<std::string> &axes) {
  int64_t color = 0;
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (std::find(axes.begin(), axes.end(), mesh.axes(i)) == axes.end())
      color = color * mesh.sizes(i) + coords[i];
  return color;
}

absl::Status CheckMeshCoordinates(const Mesh &mesh,
                                  absl::Span<const int64_t> coords) {
  bool inside = int(coords.size()) == mesh.sizes_size();
  for (int i = 0; inside && i < mesh.sizes_size(); ++i)
    inside = coords[i] >= 0 && coords[i] < mesh.sizes(i);
  if (inside)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the communicator's coordinates (", absl::StrJoin(coords, ", "),
      ") are not a rank of the plan's mesh (sizes ",
      absl::StrJoin(mesh.sizes(), " x "), ")"));
}

int64_t AxisCoordinate(const Mesh &mesh, absl::Span<const int64_t> coords,
                       absl::string_view axis) {
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) == axis && i < int(coords.size()))
      return coords[i];
  return 0;
}

int64_t GroupPlace(const Plan &plan, const Instruction &inst,
                   absl::Span<const int64_t> coords) {
  int64_t place = 0;
  for (const std::string &axis : inst.group())
    place = place * AxisSize(plan.mesh(), axis) +
            AxisCoordinate(plan.mesh(), coords, axis);
  return place;
}

int64_t GroupSize(const Plan &plan, const Instruction &inst) {
  int64_t ranks = 1;
  for (const std::string &axis : inst.group())
    ranks *= AxisSize(plan.mesh(), axis);
  return ranks;
}

int64_t AxisSize(const Mesh &mesh, absl::string_view axis) {
  for (int i = 0; i < mesh.axes_size() && i < mesh.sizes_size(); ++i)
    if (mesh.axes(i) == axis)
      return mesh.sizes(i);
  return 1;
}

} // namespace braid::plan
