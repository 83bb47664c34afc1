//===- TrainerParameters.cpp - The parameters' values on a rank -----------===//
//
// Writing and reading a parameter's values where this rank holds them (its
// ZeRO-3 block of the flat buffer, when the plan has one), and writing every
// parameter, whole, to a safetensors file (--save-params).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TrainerInternal.h"

#include "runtime/ckpt/Safetensors.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Shards.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <map>
#include <set>

namespace braid::exec::trainer {
namespace {

/// ZeRO-3: where a parameter buffer's elements live on this rank. A view of
/// a flat buffer that has a block (Buffer.block_of) is written and read
/// through the block; a view of a temporary without one is a gathered copy,
/// not the parameter's home. Returns the block's index (-1: none) and the
/// view's first element in the flat buffer.
struct ParameterHome {
  int block = -1;
  int64_t flatOffset = 0;
  bool copy = false; // a gathered copy: nothing to write or read
};
ParameterHome homeOf(const plan::Plan &plan, int id) {
  ParameterHome home;
  const plan::Buffer &b = plan.buffers(id);
  if (b.view_of() <= 0)
    return home;
  int parent = b.view_of() - 1;
  for (int j = 0; j < plan.buffers_size(); ++j)
    if (plan.buffers(j).block_of() == parent + 1)
      home.block = j;
  home.flatOffset = b.view_offset() / plan::DTypeBytes(b.dtype());
  home.copy = home.block < 0 &&
              plan.buffers(parent).role() == plan::ACTIVATION;
  return home;
}

/// This rank's coordinate along "dp" (0 without one).
int64_t dpCoordinate(const Backend &e) { return coordinateAlong(e, "dp"); }

} // namespace

int axisIndex(const plan::Mesh &mesh, absl::string_view axis) {
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) == axis)
      return i;
  return -1;
}

int64_t coordinateAlong(const Backend &e, absl::string_view axis) {
  int a = axisIndex(e.plan().mesh(), axis);
  Communicator *comm = e.communicator();
  return a < 0 || !comm ? 0 : comm->Coordinates()[a];
}

absl::Status writeParameter(Backend &e, int id,
                            const std::vector<double> &values) {
  ParameterHome home = homeOf(e.plan(), id);
  if (home.copy)
    return absl::OkStatus();
  if (home.block < 0)
    return e.Write(id, values);
  absl::StatusOr<std::vector<double>> block = e.Read(home.block);
  if (!block.ok())
    return block.status();
  int64_t n = int64_t(block->size()), first = dpCoordinate(e) * n;
  for (int64_t k = 0; k < int64_t(values.size()); ++k)
    if (int64_t g = home.flatOffset + k; g >= first && g < first + n)
      (*block)[g - first] = values[k];
  return e.Write(home.block, *block);
}

absl::StatusOr<std::vector<double>> readParameter(const Backend &e, int id) {
  ParameterHome home = homeOf(e.plan(), id);
  if (home.block < 0)
    return e.Read(id);
  absl::StatusOr<std::vector<double>> block = e.Read(home.block);
  if (!block.ok())
    return block.status();
  int64_t n = int64_t(block->size());
  int64_t dp = plan::AxisSize(e.plan().mesh(), "dp");
  std::vector<double> flat(n * dp);
  if (dp > 1) {
    Communicator *comm = e.communicator();
    if (!comm)
      return absl::FailedPreconditionError(
          "ZeRO-3 parameters are on the data-parallel ranks: run the plan under "
          "mpirun");
    if (absl::Status s =
            comm->AllGather({"dp"}, block->data(), flat.data(), n, plan::F64);
        !s.ok())
      return s;
  } else {
    flat = *block;
  }
  const plan::Buffer &b = e.plan().buffers(id);
  int64_t count = 1;
  for (int64_t d : b.shape())
    count *= d;
  return std::vector<double>(flat.begin() + home.flatOffset,
                             flat.begin() + home.flatOffset + count);
}

absl::Status saveParameters(const Backend &e, const std::string &path) {
  const plan::Plan &plan = e.plan();
  Communicator *comm = e.communicator();
  int64_t stages = std::max(plan.pipeline().stages_size(), 1);
  int64_t stage = StageOf(e);
  bool writer = !comm || comm->Rank() == 0;
  if (stages > 1 && !comm)
    return absl::FailedPreconditionError(absl::StrCat(
        "the parameters of the pipeline's ", stages,
        " stages are on the job's other ranks (run the plan under mpirun)"));
  std::vector<bool> saved(plan.buffers_size(), false);
  std::set<std::string> names;
  for (int i = 0; i < plan.buffers_size(); ++i)
    saved[i] = plan.buffers(i).role() == plan::PARAMETER &&
               plan.buffers(i).block_of() == 0 &&
               names.insert(plan.buffers(i).name()).second;
  // The whole tensors, by buffer index (the plan's order).
  std::map<int, std::vector<float>> values;
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const plan::Buffer &b = plan.buffers(i);
    if (!saved[i] || b.stage() != stage)
      continue;
    absl::StatusOr<std::vector<double>> read = readParameter(e, i);
    if (!read.ok())
      return read.status();
    std::vector<int64_t> shape = plan::GlobalShape(b, plan.mesh());
    std::vector<double> whole = std::move(*read);
    if (b.has_shard()) {
      int64_t ranks = plan::AxisSize(plan.mesh(), b.shard().axis());
      int64_t n = int64_t(whole.size());
      std::vector<double> all(n * ranks);
      if (ranks > 1) {
        if (!comm)
          return absl::FailedPreconditionError(absl::StrCat(
              "parameter '", b.name(), "' is split over ", ranks,
              " ranks: gathering it needs the job's other ranks"));
        if (absl::Status s = comm->AllGather({b.shard().axis()}, whole.data(),
                                             all.data(), n, plan::F64);
            !s.ok())
          return s;
      } else {
        all = whole;
      }
      int64_t total = 1;
      for (int64_t d : shape)
        total *= d;
      whole.assign(total, 0.0);
      for (int64_t c = 0; c < ranks; ++c)
        for (const plan::ShardRun &run : plan::ShardRuns(b, plan.mesh(), c))
          std::copy_n(all.begin() + c * n + run.local, run.length,
                      whole.begin() + run.global);
    }
    values[i].assign(whole.begin(), whole.end());
  }
  if (stages > 1) {
    const std::vector<int64_t> &coords = comm->Coordinates();
    int pp = axisIndex(plan.mesh(), "pp");
    bool stageHead = true;
    for (int a = 0; a < int(coords.size()); ++a)
      stageHead = stageHead && (a == pp || coords[a] == 0);
    if (stage > 0 && stageHead) {
      for (auto &[i, v] : values)
        if (absl::Status s = comm->Send("pp", -stage, v.data(),
                                        int64_t(v.size()), plan::F32);
            !s.ok())
          return s;
      if (absl::Status s = comm->WaitSends(); !s.ok())
        return s;
    }
    if (writer)
      for (int64_t from = 1; from < stages; ++from)
        for (int i = 0; i < plan.buffers_size(); ++i) {
          const plan::Buffer &b = plan.buffers(i);
          if (!saved[i] || b.stage() != from)
            continue;
          int64_t total = 1;
          for (int64_t d : plan::GlobalShape(b, plan.mesh()))
            total *= d;
          std::vector<float> &v = values[i];
          v.resize(total);
          if (absl::Status s =
                  comm->Recv("pp", from, v.data(), total, plan::F32);
              !s.ok())
            return absl::Status(
                s.code(), absl::StrCat("receiving parameter '", b.name(),
                                       "' from stage ", from, ": ",
                                       s.message()));
        }
  }
  if (!writer)
    return absl::OkStatus();
  std::vector<ckpt::TensorToWrite> tensors;
  for (const auto &[i, v] : values) {
    const plan::Buffer &b = plan.buffers(i);
    tensors.push_back({b.name(), ckpt::Dtype::kF32,
                       plan::GlobalShape(b, plan.mesh()),
                       absl::Span<const uint8_t>(
                           reinterpret_cast<const uint8_t *>(v.data()),
                           v.size() * sizeof(float))});
  }
  return ckpt::WriteSafetensors(path, tensors, {});
}

} // namespace braid::exec::trainer
