//===- Trainer.cpp - The step loop of braid-run ---------------------------===//

#include "runtime/exec/Trainer.h"

#include "runtime/common/OutputFile.h"

#include "runtime/exec/Checkpointing.h"

#include "runtime/ckpt/HFCheckpoint.h"
#include "runtime/ckpt/ModelIdentity.h"
#include "runtime/ckpt/Safetensors.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/data/GptSamples.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/exec/Checkpointing.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Init.h"
#include "runtime/exec/LossScaler.h"
#include "runtime/exec/Trace.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Shards.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

namespace braid::exec {
namespace {

int64_t numel(const plan::Buffer &b) {
  int64_t n = 1;
  for (int64_t d : b.shape())
    n *= d;
  return n;
}

absl::StatusOr<int> need(const Backend &e, const char *name) {
  int id = e.FindBuffer(name);
  if (id < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("the plan has no '", name, "' buffer to train with"));
  return id;
}

/// The buffer named `name` of pipeline stage `stage`.
absl::StatusOr<int> needInStage(const Backend &e, const char *name,
                                int64_t stage) {
  int id = e.FindBuffer(name, stage);
  if (id < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline stage ", stage, " has no '", name,
                     "' buffer to train with"));
  return id;
}

/// Writes `values` into every copy of buffer `id` (one, or one per slot).
absl::Status writeEveryCopy(Backend &e, int id,
                            absl::Span<const double> values) {
  int64_t copies = std::max<int64_t>(e.plan().buffers(id).slots(), 1);
  for (int64_t k = 0; k < copies; ++k)
    if (absl::Status s = e.Write(id, values, k); !s.ok())
      return s;
  return absl::OkStatus();
}

/// The index of mesh axis `axis`, or -1.
int axisIndex(const plan::Mesh &mesh, absl::string_view axis) {
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) == axis)
      return i;
  return -1;
}

/// This rank's coordinate along the axis `b` is split over (0 when whole).
int64_t shardCoordinate(const Backend &e, const plan::Buffer &b) {
  if (!b.has_shard() || !e.communicator())
    return 0;
  const plan::Mesh &mesh = e.plan().mesh();
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) == b.shard().axis())
      return e.communicator()->Coordinates()[i];
  return 0;
}

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

/// This rank's coordinate along mesh axis `axis` (0 without it, or without
/// other ranks).
int64_t coordinateAlong(const Backend &e, absl::string_view axis) {
  int a = axisIndex(e.plan().mesh(), axis);
  Communicator *comm = e.communicator();
  return a < 0 || !comm ? 0 : comm->Coordinates()[a];
}

/// This rank's coordinate along "dp" (0 without one).
int64_t dpCoordinate(const Backend &e) { return coordinateAlong(e, "dp"); }

/// Writes parameter buffer `id` (its values on this rank), into its ZeRO-3
/// block when it has one.
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

/// Reads parameter buffer `id` (its values on this rank), from every
/// data-parallel rank's ZeRO-3 block when it has one (a collective over dp:
/// every rank reads the same parameters in the same order).
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

/// Mixed precision: calls `f(inst, master, weights)` once for each ADAMW of
/// this rank's stage that updates F32 master weights (its first input) and
/// rounds them into the weights (its fourth output); stops at an error.
template <typename F>
absl::Status forEachMaster(const plan::Plan &plan, int64_t stage, F f) {
  std::set<int> done;
  for (const plan::Function &fn : plan.functions())
    for (const plan::Instruction &inst : fn.body()) {
      if (inst.kernel() != plan::ADAMW || inst.outputs_size() < 4)
        continue;
      int master = inst.inputs(0), weights = inst.outputs(3);
      if (plan.buffers(master).stage() != stage || !done.insert(master).second)
        continue;
      if (absl::Status s = f(inst, master, weights); !s.ok())
        return s;
    }
  return absl::OkStatus();
}

/// Mixed precision: sets each F32 master copy of this rank's stage to the
/// weights it is rounded into (with a rank_axis, the rank's block of the
/// flat weights), once the weights hold their initial values. The masters
/// start as the BF16 (or F16) weights widened, as Megatron's do.
absl::Status initMasterWeights(Backend &e, int64_t stage) {
  const plan::Plan &plan = e.plan();
  return forEachMaster(plan, stage, [&](const plan::Instruction &inst,
                                        int master, int weights) {
    absl::StatusOr<std::vector<double>> values = e.Read(weights);
    if (!values.ok())
      return values.status();
    int64_t n = numel(plan.buffers(master));
    int64_t first = inst.rank_axis().empty()
                        ? 0
                        : coordinateAlong(e, inst.rank_axis()) * n;
    if (first + n > int64_t(values->size()))
      return absl::InvalidArgumentError(absl::StrCat(
          "the master weights '", plan.buffers(master).name(), "' (", n,
          " elements from ", first, ") lie outside the weights '",
          plan.buffers(weights).name(), "' (", values->size(), ")"));
    return e.Write(master,
                   absl::MakeConstSpan(values->data() + first, size_t(n)));
  });
}

/// Mixed precision, after a checkpoint loaded the f32 master weights of this
/// rank's stage: sets the weights each is rounded into from them, as the
/// update does. Masters sharded over a rank_axis (ZeRO) are this rank's
/// block of the flat weights, which every rank of the axis holds whole: the
/// blocks are gathered over the axis first.
absl::Status weightsFromMasters(Backend &e, int64_t stage) {
  const plan::Plan &plan = e.plan();
  return forEachMaster(plan, stage, [&](const plan::Instruction &inst,
                                        int master, int weights) {
    absl::StatusOr<std::vector<double>> values = e.Read(master);
    if (!values.ok())
      return values.status();
    if (inst.rank_axis().empty())
      return e.Write(weights, *values);
    int64_t n = int64_t(values->size());
    int64_t ranks = plan::AxisSize(plan.mesh(), inst.rank_axis());
    if (numel(plan.buffers(weights)) != n * ranks)
      return absl::InvalidArgumentError(absl::StrCat(
          "the master weights '", plan.buffers(master).name(), "' (", n,
          " elements on each of ", ranks, " ranks along '", inst.rank_axis(),
          "') do not make up the weights '", plan.buffers(weights).name(),
          "' (", numel(plan.buffers(weights)), ")"));
    std::vector<double> all(size_t(n * ranks));
    if (ranks > 1) {
      Communicator *comm = e.communicator();
      if (!comm)
        return absl::FailedPreconditionError(absl::StrCat(
            "the master weights '", plan.buffers(master).name(),
            "' are on the ranks along '", inst.rank_axis(),
            "': run the plan under mpirun"));
      if (absl::Status s = comm->AllGather({inst.rank_axis()}, values->data(),
                                           all.data(), n, plan::F64);
          !s.ok())
        return s;
    } else {
      all = *values;
    }
    return e.Write(weights, all);
  });
}

/// Writes every parameter of the plan, whole and as float32, to a
/// safetensors file. Every rank must call it: the slices of split parameters
/// are gathered onto every rank of their stage; with pipeline stages, the
/// first rank of each later stage (its other coordinates 0) sends its whole
/// parameters to rank 0 along "pp", in the plan's order of buffers, which
/// every rank knows. Rank 0 writes. A name that several buffers hold (a
/// weight tied across stages) is written once, from the first of them.
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

/// Records, with a trace, the call of `function` that began at `begin`: named
/// `label`, or "label mb M" for a micro-batch `micro` >= 0, with args its
/// micro-batch, its `slot` (when >= 0) and the function.
void traceCall(Trace *trace, const std::string &function, TracePhase phase,
               const char *label, int64_t micro, int64_t slot,
               Trace::Clock::time_point begin) {
  if (!trace)
    return;
  std::string name = label, args;
  if (micro >= 0) {
    absl::StrAppend(&name, " mb ", micro);
    absl::StrAppend(&args, "\"micro_batch\": ", micro, ", ");
  }
  if (slot >= 0)
    absl::StrAppend(&args, "\"slot\": ", slot, ", ");
  absl::StrAppend(&args, "\"function\": ", TraceQuote(function));
  trace->Add(std::move(name), phase, TraceThread::kCalls, begin, Trace::Now(),
             std::move(args));
}

/// Feeds micro-batch `micro` (into `slot`, when >= 0) and, with a trace,
/// records it as "data mb M".
template <typename Feed>
absl::Status tracedFeed(Trace *trace, int64_t micro, int64_t slot,
                        const Feed &feed) {
  if (!trace)
    return feed();
  Trace::Clock::time_point begin = Trace::Now();
  absl::Status s = feed();
  std::string args = absl::StrCat("\"micro_batch\": ", micro);
  if (slot >= 0)
    absl::StrAppend(&args, ", \"slot\": ", slot);
  trace->Add(absl::StrCat("data mb ", micro), TracePhase::kData,
             TraceThread::kCalls, begin, Trace::Now(), std::move(args));
  return s;
}

/// The trainer's own communication, `name` (ALL_REDUCE, WAIT_SENDS): runs
/// `op` and, with a trace, records it with `why` as its provenance.
template <typename Op>
absl::Status tracedCommunication(Trace *trace, const char *name,
                                 const char *why, const char *group,
                                 const Op &op) {
  if (!trace)
    return op();
  Trace::Clock::time_point begin = Trace::Now();
  absl::Status s = op();
  std::string args = absl::StrCat("\"provenance\": ", TraceQuote(why));
  if (*group)
    absl::StrAppend(&args, ", \"group\": ", TraceQuote(group));
  trace->Add(name, TracePhase::kCommunication, TraceThread::kCommunication,
             begin, Trace::Now(), std::move(args));
  return s;
}

/// Every rank's arena, predicted (what the rank allocated, as the plan sized
/// it) and touched (the operating system's count of the pages the run used),
/// gathered onto rank 0, which writes one line per rank to `log`.
absl::Status reportMemory(const Backend &e, std::ostream *log) {
  const plan::Plan &plan = e.plan();
  Communicator *comm = e.communicator();
  int64_t ranks = plan::WorldSize(plan);
  int64_t touched = e.TouchedArenaBytes();
  if (touched < 0)
    return absl::InternalError(
        absl::StrCat("cannot count the arena's touched pages (mincore): ",
                     std::strerror(errno)));
  std::vector<double> mine = {double(e.ArenaBytes()), double(touched),
                              double(e.WorkspaceBytes())};
  const int64_t fields = int64_t(mine.size());
  std::vector<double> all = mine;
  if (comm && ranks > 1) {
    std::vector<std::string> axes(plan.mesh().axes().begin(),
                                  plan.mesh().axes().end());
    all.resize(fields * ranks);
    if (absl::Status s =
            comm->AllGather(axes, mine.data(), all.data(), fields, plan::F64);
        !s.ok())
      return absl::Status(s.code(), absl::StrCat("gathering the ranks' arena "
                                                 "bytes: ",
                                                 s.message()));
  } else {
    ranks = 1;
  }
  if (!log)
    return absl::OkStatus();
  // The all-gather over every axis orders the ranks row-major over the
  // mesh's axes: place r is rank r.
  // A GPU's arena is committed when it is allocated: its count is the
  // allocation, not pages touched.
  const char *used = std::string(e.Device()) == "cpu" ? "touched" : "allocated";
  for (int64_t r = 0; r < ranks; ++r) {
    const double *f = &all[size_t(r * fields)];
    int64_t predicted = int64_t(f[0]), arena = int64_t(f[1]),
            workspaces = int64_t(f[2]);
    *log << absl::StrFormat(
        "memory: %s: predicted %d B, %s %d B (%s)%s\n",
        RankName(plan.mesh(), r, plan::MeshCoordinates(plan.mesh(), r)),
        predicted, used, arena,
        predicted > 0 ? absl::StrFormat("%.2f %%", 100.0 * double(arena) /
                                                       double(predicted))
                      : std::string("nothing predicted"),
        workspaces > 0
            ? absl::StrFormat(", and %d B of the kernels' workspaces",
                              workspaces)
            : std::string());
  }
  return absl::OkStatus();
}

/// The kernel profile of every rank (Backend::KernelProfiles), gathered
/// onto rank 0, which writes it to `out` (null on the other ranks) with the
/// step times `stepTimes` (rank 0's, of the profiled steps) as one JSON
/// object:
///   {"world_size": W, "threads": T, "steps": N, "step_time_s": [...],
///    "ranks": [{"rank": r, "kernels": {"LINEAR": {"seconds": s,
///    "calls": c, "flops": f, "bytes": b}, ...}}, ...]}
/// with only the kernels a rank called. Every rank must call it.
absl::Status writeProfile(const Backend &e,
                          const std::vector<double> &stepTimes,
                          Communicator *comm, std::ostream *out) {
  const plan::Plan &plan = e.plan();
  const std::vector<Backend::KernelProfile> &profile = e.KernelProfiles();
  constexpr int kFields = 4;
  const int kinds = plan::Kernel_ARRAYSIZE;
  std::vector<double> mine(kinds * kFields, 0.0);
  for (int k = 0; k < int(profile.size()) && k < kinds; ++k) {
    mine[k * kFields + 0] = profile[k].seconds;
    mine[k * kFields + 1] = double(profile[k].calls);
    mine[k * kFields + 2] = profile[k].flops;
    mine[k * kFields + 3] = profile[k].bytes;
  }
  int64_t ranks = plan::WorldSize(plan);
  std::vector<double> all = mine;
  if (comm && ranks > 1) {
    // Over every axis, in the mesh's order: place r is rank r.
    std::vector<std::string> axes(plan.mesh().axes().begin(),
                                  plan.mesh().axes().end());
    all.resize(size_t(ranks) * mine.size());
    if (absl::Status s = comm->AllGather(axes, mine.data(), all.data(),
                                         int64_t(mine.size()), plan::F64);
        !s.ok())
      return absl::Status(s.code(), absl::StrCat("gathering the ranks' "
                                                 "profiles: ",
                                                 s.message()));
  } else {
    ranks = 1;
  }
  if (!out)
    return absl::OkStatus();
  std::string json = absl::StrFormat(
      "{\"world_size\": %d, \"threads\": %d, \"steps\": %d, "
      "\"step_time_s\": [%s],\n \"ranks\": [",
      ranks, cpu::numThreads(), int64_t(stepTimes.size()),
      absl::StrJoin(stepTimes, ", ", [](std::string *o, double t) {
        absl::StrAppend(o, absl::StrFormat("%.9g", t));
      }));
  for (int64_t r = 0; r < ranks; ++r) {
    absl::StrAppend(&json, r ? ",\n  " : "\n  ", "{\"rank\": ", r,
                    ", \"kernels\": {");
    bool first = true;
    for (int k = 0; k < kinds; ++k) {
      const double *f = &all[size_t(r) * mine.size() + size_t(k) * kFields];
      if (f[1] <= 0 || !plan::Kernel_IsValid(k))
        continue;
      absl::StrAppend(
          &json, first ? "" : ", ",
          absl::StrFormat("\"%s\": {\"seconds\": %.9g, \"calls\": %d, "
                          "\"flops\": %.9g, \"bytes\": %.9g}",
                          plan::Kernel_Name(plan::Kernel(k)), f[0],
                          int64_t(f[1]), f[2], f[3]));
      first = false;
    }
    absl::StrAppend(&json, "}}");
  }
  absl::StrAppend(&json, "\n]}\n");
  *out << json;
  out->flush();
  if (!*out)
    return absl::InternalError("the file cannot be written");
  return absl::OkStatus();
}

/// Per model chunk of stage `stage` (`program`): whether its FORWARDs feed
/// the micro-batch's tokens and targets. Each chunk has slots of its own
/// (Stage.chunk_slots), so only the chunk whose calls read them writes them;
/// another chunk's slot k is not theirs. With one chunk, every FORWARD feeds.
std::vector<bool> feedingChunks(const Backend &e, const plan::Stage &program,
                                int64_t stage) {
  std::vector<bool> feeds(1 + program.chunks_size(),
                          program.chunks_size() == 0);
  if (program.chunks_size() == 0)
    return feeds;
  std::set<int> inputs;
  for (const char *name : {"tokens", "targets"})
    if (int id = e.FindBuffer(name, stage); id >= 0)
      inputs.insert(id);
  for (int k = 0; k <= program.chunks_size(); ++k) {
    const plan::Chunk *chunk = k ? &program.chunks(k - 1) : nullptr;
    std::set<std::string> calls =
        chunk ? std::set<std::string>{chunk->forward(), chunk->backward(),
                                      chunk->backward_weight()}
              : std::set<std::string>{program.forward(), program.backward(),
                                      program.backward_weight()};
    for (const plan::Function &fn : e.plan().functions())
      if (calls.count(fn.name()))
        for (const plan::Instruction &inst : fn.body())
          for (const auto *ids : {&inst.inputs(), &inst.outputs()})
            for (int32_t id : *ids)
              if (inputs.count(id))
                feeds[k] = true;
  }
  return feeds;
}

} // namespace

const char kTrainerFlagsUsage[] =
    "[--data PREFIX] [--steps N] [--seed N] [--data-order shuffled|sequential] "
    "[--init-from HF_DIR|CHECKPOINT] [--load CHECKPOINT] "
    "[--allow-model-change FIELD[,FIELD]] [--save DIR] "
    "[--save-every N] [--keep-last K] [--overwrite] [--threads N] [--log-every N] "
    "[--metrics-out FILE] [--save-params FILE.safetensors] [--trace FILE.json] "
    "[--profile-out FILE.json] [--device cpu|cuda] [--cuda-graphs on|off] "
    "[--collective-timeout SECONDS]";

absl::StatusOr<bool> ParseTrainerFlag(const std::string &flag,
                                      const std::string &value,
                                      TrainerOptions *options) {
  if (flag == "--data") {
    options->dataPrefix = value;
  } else if (flag == "--init-from") {
    options->initFrom = value;
  } else if (flag == "--allow-model-change") {
    // Repeatable, or a comma-separated list.
    std::vector<std::string> fields = absl::StrSplit(value, ',');
    for (const std::string &field : fields) {
      if (field.empty())
        return absl::InvalidArgumentError(absl::StrCat(
            "--allow-model-change=", value,
            " names no field (expected --allow-model-change FIELD[,FIELD])"));
      if (absl::Status s = ckpt::CheckAllowableModelChange(field); !s.ok())
        return s;
      options->allowModelChange.insert(field);
    }
  } else if (flag == "--load" || flag == "--save") {
    if (value.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "= names no directory"));
    (flag == "--load" ? options->load : options->save) = value;
  } else if (flag == "--overwrite") {
    if (value != "" && value != "true" && value != "false")
      return absl::InvalidArgumentError(absl::StrCat(
          "--overwrite=", value, " is not one of true, false (or --overwrite "
          "alone)"));
    options->overwrite = value != "false";
  } else if (flag == "--metrics-out") {
    options->metricsOut = value;
  } else if (flag == "--save-params") {
    options->saveParams = value;
  } else if (flag == "--trace") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--trace= names no file (expected --trace FILE.json)");
    options->trace = value;
  } else if (flag == "--profile-out") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--profile-out= names no file (expected --profile-out FILE.json)");
    options->profileOut = value;
  } else if (flag == "--device") {
    if (value != "cpu" && value != "cuda")
      return absl::InvalidArgumentError(
          absl::StrCat("--device=", value, " is not one of cpu, cuda"));
    options->device = value;
  } else if (flag == "--cuda-graphs") {
    if (value != "on" && value != "off")
      return absl::InvalidArgumentError(
          absl::StrCat("--cuda-graphs=", value, " is not one of on, off"));
    options->cudaGraphs = value == "on";
  } else if (flag == "--collective-timeout") {
    char *end = nullptr;
    errno = 0;
    double seconds = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(seconds) ||
        seconds < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--collective-timeout=", value,
          " is not a non-negative number of seconds (0: no deadline)"));
    options->collectiveTimeout = seconds;
  } else if (flag == "--data-order") {
    if (value != "shuffled" && value != "sequential")
      return absl::InvalidArgumentError(absl::StrCat(
          "--data-order=", value, " is not one of shuffled, sequential"));
    options->dataOrder = value;
  } else if (flag == "--steps" || flag == "--seed" || flag == "--log-every" ||
             flag == "--threads" || flag == "--save-every" ||
             flag == "--keep-last") {
    // --steps 0 saves what it loads or initialises, without training.
    bool nonNegative = flag == "--seed" || flag == "--steps";
    char *end = nullptr;
    errno = 0;
    long long n = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno != 0 || n < (nonNegative ? 0 : 1))
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "=", value, " is not a ",
                       nonNegative ? "non-negative" : "positive", " integer"));
    if (flag == "--steps")
      options->steps = n;
    else if (flag == "--seed")
      options->seed = uint64_t(n);
    else if (flag == "--threads")
      options->threads = n;
    else if (flag == "--save-every")
      options->saveEvery = n;
    else if (flag == "--keep-last")
      options->keepLast = n;
    else
      options->logEvery = n;
  } else {
    return false;
  }
  return true;
}

bool IsTrainerFlag(const std::string &flag) {
  // ParseTrainerFlag knows the flags: an unknown one is (false), a known one
  // true or an error about the (empty) value.
  TrainerOptions scratch;
  absl::StatusOr<bool> known = ParseTrainerFlag(flag, "", &scratch);
  return !known.ok() || *known;
}

bool IsTrainerSwitch(const std::string &flag) { return flag == "--overwrite"; }

DataShare DataShareOf(const Backend &e) {
  const plan::Mesh &mesh = e.plan().mesh();
  DataShare share;
  share.ranks = plan::AxisSize(mesh, "dp");
  if (Communicator *comm = e.communicator())
    for (int i = 0; i < mesh.axes_size(); ++i)
      if (mesh.axes(i) == "dp")
        share.rank = comm->Coordinates()[i];
  return share;
}

/// This rank's share of the batch, refused when the plan splits it over
/// ranks this process cannot reach.
static absl::StatusOr<DataShare> RunnableDataShare(const Backend &e) {
  DataShare share = DataShareOf(e);
  if (share.ranks > 1 && !e.communicator())
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan splits the batch over ", share.ranks,
        " data-parallel ranks: run it under mpirun"));
  return share;
}

int64_t StageOf(const Backend &e) { return e.Stage(); }

namespace {
/// Settles the backend (ReadLater's outputs are written there) when a step
/// ends early, with an error, before the outputs go out of scope.
struct SettleOnExit {
  Backend &e;
  bool settled = false;
  ~SettleOnExit() {
    if (!settled)
      (void)e.Settle();
  }
};
} // namespace

absl::StatusOr<double> RunStep(Backend &e, uint64_t seed, int64_t step,
                               const FeedMicroBatch &feed) {
  if (int stages = e.plan().pipeline().stages_size())
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan has a pipeline of ", stages,
        " stages, whose steps RunPipelineStep runs (not RunStep)"));
  const plan::Training &t = e.plan().training();
  const plan::StepFunctions &fns = t.step();
  int64_t micros = std::max<int64_t>(t.micro_batches(), 1);
  absl::StatusOr<DataShare> share = RunnableDataShare(e);
  if (!share.ok())
    return share.status();
  // This rank's samples start at its slice of the global batch.
  int64_t firstSample = share->rank * micros * t.micro_batch_size();
  absl::StatusOr<int> lossGrad = need(e, "loss_grad"), loss = need(e, "loss");
  for (const auto *s : {&lossGrad, &loss})
    if (!s->ok())
      return s->status();
  Trace *trace = e.trace();
  // With a trace, the call is "label" or, for micro >= 0, "label mb micro".
  auto run = [&](const std::string &function, int64_t micro, TracePhase phase,
                 const char *label) -> absl::Status {
    Trace::Clock::time_point begin;
    if (trace)
      begin = Trace::Now();
    absl::Status s =
        e.Run(function, {seed, uint32_t(step),
                         firstSample + std::max<int64_t>(micro, 0) *
                                           t.micro_batch_size()});
    traceCall(trace, function, phase, label, micro, -1, begin);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("step ", step, ": ", s.message()));
    return s;
  };
  if (!fns.zero_grads().empty())
    if (absl::Status s =
            run(fns.zero_grads(), -1, TracePhase::kZeroGrads, "zero_grads");
        !s.ok())
      return s;
  // The mean over the step's micro-batches, times the loss scale (fp16).
  if (absl::Status s = e.Write(*lossGrad, {e.LossScale() /
                                           double(micros * share->ranks)});
      !s.ok())
    return s;
  // Each micro-batch's loss, read once the step has run (a device backend
  // enqueues the reads: the host waits for it once a step, in Settle).
  std::vector<double> losses(size_t(micros), 0.0);
  SettleOnExit settle{e};
  for (int64_t m = 0; m < micros; ++m) {
    if (absl::Status s = tracedFeed(trace, m, -1, [&] { return feed(m); });
        !s.ok())
      return s;
    // The first micro-batch gathers ZeRO's parameters as it goes, the last
    // starts the gradients' sums, when the plan has functions for them (the
    // trace's call is a micro_step either way; its "function" tells which).
    if (absl::Status s = run(plan::MicroStepFunction(fns, m, micros), m,
                             TracePhase::kMicroStep, "micro_step");
        !s.ok())
      return s;
    if (absl::Status s = e.ReadLater(*loss, &losses[size_t(m)]); !s.ok())
      return s;
  }
  // Sends of the step (a plan without stages rarely has any) end with it.
  if (absl::Status s = e.WaitSends(); !s.ok())
    return s;
  if (!fns.update().empty())
    if (absl::Status s = run(fns.update(), -1, TracePhase::kUpdate, "update");
        !s.ok())
      return s;
  settle.settled = true;
  if (absl::Status s = e.Settle(); !s.ok())
    return absl::Status(s.code(),
                        absl::StrCat("step ", step, ": ", s.message()));
  double sum = 0;
  for (double l : losses)
    sum += l;
  if (share->ranks > 1)
    if (absl::Status s = tracedCommunication(
            trace, "ALL_REDUCE", "braid-run: the step's loss over dp", "dp",
            [&] {
              return e.communicator()->AllReduce({"dp"}, &sum, 1, plan::F64);
            });
        !s.ok())
      return s;
  return sum / double(micros * share->ranks);
}

absl::StatusOr<double> RunPipelineStep(Backend &e, uint64_t seed, int64_t step,
                                       const FeedSlot &feed) {
  const plan::Plan &plan = e.plan();
  const plan::Training &t = plan.training();
  int64_t stages = plan.pipeline().stages_size();
  if (stages == 0)
    return absl::FailedPreconditionError(
        "the plan has no pipeline stages: RunStep runs its steps");
  int64_t micros = std::max<int64_t>(t.micro_batches(), 1);
  absl::StatusOr<DataShare> share = RunnableDataShare(e);
  if (!share.ok())
    return share.status();
  if (stages > 1 && !e.communicator())
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan's pipeline has ", stages,
        " stages, one per rank along 'pp': run it under mpirun"));
  int64_t stage = StageOf(e);
  const plan::Stage &program = plan.pipeline().stages(int(stage));
  bool last = stage == stages - 1;
  int64_t firstSample = share->rank * micros * t.micro_batch_size();
  int loss = -1;
  if (last) {
    absl::StatusOr<int> lossGrad = needInStage(e, "loss_grad", stage),
                        lossId = needInStage(e, "loss", stage);
    for (const auto *s : {&lossGrad, &lossId})
      if (!s->ok())
        return s->status();
    loss = *lossId;
    if (absl::Status s = writeEveryCopy(
            e, *lossGrad, {e.LossScale() / double(micros * share->ranks)});
        !s.ok())
      return s;
  }
  Trace *trace = e.trace();
  // With a trace, the call is "label" or, for micro >= 0, "label mb micro"
  // on `slot`.
  auto run = [&](const std::string &function, int64_t micro, int64_t slot,
                 TracePhase phase, const char *label) -> absl::Status {
    Trace::Clock::time_point begin;
    if (trace)
      begin = Trace::Now();
    absl::Status s = e.Run(
        function,
        {seed, uint32_t(step),
         firstSample + std::max<int64_t>(micro, 0) * t.micro_batch_size()},
        std::max<int64_t>(slot, 0));
    traceCall(trace, function, phase, label, micro, slot, begin);
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("step ", step, ", stage ",
                                                 stage, ": ", s.message()));
    return s;
  };
  if (!program.zero_grads().empty())
    if (absl::Status s = run(program.zero_grads(), -1, -1,
                             TracePhase::kZeroGrads, "zero_grads");
        !s.ok())
      return s;
  // The last stage's losses, one a micro-batch, read once the step has run.
  std::vector<double> losses(size_t(micros), 0.0);
  SettleOnExit settle{e};
  // The functions of the calls' model chunk (the interleaved schedule's
  // further chunks are Stage.chunks; the loader checked the indices), or
  // the call's own (a chunk's last backward that starts the gradients'
  // sums).
  auto functionOf = [&](const plan::ScheduleStep &call) -> const std::string & {
    if (!call.function().empty())
      return call.function();
    if (call.chunk() == 0)
      return call.kind() == plan::ScheduleStep::FORWARD    ? program.forward()
             : call.kind() == plan::ScheduleStep::BACKWARD ? program.backward()
                                                           : program.backward_weight();
    const plan::Chunk &chunk = program.chunks(int(call.chunk() - 1));
    return call.kind() == plan::ScheduleStep::FORWARD    ? chunk.forward()
           : call.kind() == plan::ScheduleStep::BACKWARD ? chunk.backward()
                                                         : chunk.backward_weight();
  };
  const int64_t lastChunk = program.chunks_size();
  const std::vector<bool> feeds = feedingChunks(e, program, stage);
  for (const plan::ScheduleStep &call : program.schedule()) {
    int64_t m = call.micro_batch(), slot = call.slot();
    if (call.kind() == plan::ScheduleStep::BACKWARD) {
      if (absl::Status s = run(functionOf(call), m, slot,
                               TracePhase::kBackward, "backward");
          !s.ok())
        return s;
      continue;
    }
    if (call.kind() == plan::ScheduleStep::BACKWARD_WEIGHT) {
      if (absl::Status s = run(functionOf(call), m, slot,
                               TracePhase::kBackward, "backward_weight");
          !s.ok())
        return s;
      continue;
    }
    if (feeds[call.chunk()])
      if (absl::Status s =
              tracedFeed(trace, m, slot, [&] { return feed(m, slot); });
          !s.ok())
        return s;
    if (absl::Status s =
            run(functionOf(call), m, slot, TracePhase::kForward, "forward");
        !s.ok())
      return s;
    // The loss is the last stage's last chunk's.
    if (last && call.chunk() == lastChunk) {
      if (m < 0 || m >= micros)
        return absl::InternalError(
            absl::StrCat("stage ", stage, "'s schedule calls micro-batch ", m,
                         " of ", micros));
      if (absl::Status s =
              e.ReadLater(loss, &losses[size_t(m)], std::max<int64_t>(slot, 0));
          !s.ok())
        return s;
    }
  }
  // The update writes parameters that sends may still read (and the next
  // step's activations, buffers of this step's sends).
  if (absl::Status s = tracedCommunication(
          trace, "WAIT_SENDS",
          "braid-run: the stage's sends end before its update", "",
          [&] { return e.WaitSends(); });
      !s.ok())
    return s;
  if (!program.update().empty())
    if (absl::Status s =
            run(program.update(), -1, -1, TracePhase::kUpdate, "update");
        !s.ok())
      return s;
  settle.settled = true;
  if (absl::Status s = e.Settle(); !s.ok())
    return absl::Status(s.code(), absl::StrCat("step ", step, ", stage ", stage,
                                               ": ", s.message()));
  double sum = 0;
  for (double l : losses)
    sum += l;
  // The last stage's sum, over the stages, then over the data-parallel ranks.
  for (auto [axis, ranks] :
       {std::pair<const char *, int64_t>{"pp", stages}, {"dp", share->ranks}}) {
    if (ranks <= 1)
      continue;
    std::string why = absl::StrCat("braid-run: the step's loss over ", axis);
    if (absl::Status s = tracedCommunication(
            trace, "ALL_REDUCE", why.c_str(), axis,
            [&] {
              return e.communicator()->AllReduce({axis}, &sum, 1, plan::F64);
            });
        !s.ok())
      return s;
  }
  return sum / double(micros * share->ranks);
}

absl::Status Train(const plan::Plan &plan, const TrainerOptions &options,
                   std::vector<StepRecord> *records) {
  if (options.device != "cpu" && !options.backend)
    return absl::UnimplementedError(absl::StrCat(
        "no backend for --device ", options.device,
        " was given to the trainer (runtime/exec/Devices.h makes one)"));
  // The CPU executor refuses what it cannot run before the data is opened.
  if (!options.backend)
    if (absl::Status s = Executor::CheckRunsOnCpu(plan); !s.ok())
      return s;
  const plan::Training &t = plan.training();
  int64_t steps = options.steps.value_or(t.steps());
  uint64_t seed = options.seed.value_or(t.seed());
  std::string dataPath = options.dataPrefix.empty() ? t.data_path()
                                                    : options.dataPrefix;
  if (steps < 0 || (steps == 0 && options.save.empty() &&
                    options.saveParams.empty()))
    return absl::InvalidArgumentError(absl::StrCat(
        "steps = ", steps,
        " must be >= 1 (0 only to convert: with --save or --save-params)"));
  if ((options.saveEvery > 0 || options.keepLast > 0) && options.save.empty())
    return absl::InvalidArgumentError(
        "--save-every and --keep-last need --save DIR");
  if (!options.load.empty() && !options.initFrom.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--load ", options.load, " resumes a run and --init-from ",
        options.initFrom, " starts one: give one of them"));
  if (!options.allowModelChange.empty() && options.load.empty() &&
      options.initFrom.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--allow-model-change ",
        absl::StrJoin(options.allowModelChange, ","),
        " applies to the checkpoint of --load or --init-from, and neither is "
        "given"));
  if (dataPath.empty() && steps > 0)
    return absl::InvalidArgumentError(
        "no data: give --data PREFIX (a .bin/.idx pair) or data.path in the job");
  if (options.threads > 0)
    cpu::setNumThreads(int(std::min<int64_t>(options.threads, 1 << 12)));
  if (plan::WorldSize(plan) > 1 && !options.comm)
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan is for ", plan::WorldSize(plan),
        " ranks: start it with mpirun -np ", plan::WorldSize(plan),
        " braid-run ... (braid train does)"));
  bool pipelined = plan.pipeline().stages_size() > 0;
  if (!pipelined && plan::AxisSize(plan.mesh(), "pp") > 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "the mesh has an axis 'pp' of ", plan::AxisSize(plan.mesh(), "pp"),
        " ranks but the plan has no pipeline stages for them"));
  // The trace file, opened now by rank 0 (which writes every rank's
  // events), so that one it cannot write fails the run before it trains.
  bool writer = !options.comm || options.comm->Rank() == 0;
  std::ofstream traceFile;
  std::unique_ptr<Trace> trace;
  if (!options.trace.empty()) {
    if (writer) {
      errno = 0;
      traceFile.open(options.trace, std::ios::trunc);
      if (!traceFile)
        return absl::FailedPreconditionError(
            absl::StrCat("cannot write the trace to ", options.trace, ": ",
                         errno ? std::strerror(errno) : "cannot open it"));
    }
    trace = std::make_unique<Trace>();
  }
  // Likewise the profile, which rank 0 writes for every rank.
  std::ofstream profileFile;
  if (!options.profileOut.empty() && writer) {
    errno = 0;
    profileFile.open(options.profileOut, std::ios::trunc);
    if (!profileFile)
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write the profile to ", options.profileOut,
                       ": ", errno ? std::strerror(errno) : "cannot open it"));
  }
  // The watchdog (Communicator::SetTimeout): each wait for other ranks has
  // --collective-timeout, 3 x that before the first step ends (start-up, a
  // checkpoint's load, the first step, which touches the arena's pages) and
  // in each checkpoint save.
  const double slowTimeout = 3 * options.collectiveTimeout;
  if (options.comm) {
    options.comm->SetTimeout(slowTimeout);
    options.comm->SetWaitContext(0, "start-up, before the first step");
  }
  absl::StatusOr<std::unique_ptr<Backend>> created =
      options.backend ? options.backend(plan, options.comm)
                      : absl::StatusOr<std::unique_ptr<Backend>>(
                            Executor::Create(plan, options.comm));
  if (!created.ok())
    return created.status();
  Backend &e = **created;
  // The rank's pipeline stage (0 without one): it holds, initialises and
  // loads only that stage's buffers.
  int64_t stage = StageOf(e);

  // Initial weights: a run to resume (--load), a checkpoint of any layout
  // (--init-from a Braid checkpoint: its parameters only), a Hugging Face
  // checkpoint, or the family's seeded scheme.
  RunState resumed;
  bool fromCheckpoint = !options.load.empty() ||
                        (!options.initFrom.empty() &&
                         IsBraidCheckpoint(options.initFrom));
  if (fromCheckpoint) {
    bool resume = !options.load.empty();
    absl::StatusOr<RunState> loaded = LoadCheckpoint(
        e, resume ? options.load : options.initFrom, /*optimizer=*/resume,
        ModelCheck{options.allowModelChange, options.log});
    if (!loaded.ok())
      return loaded.status();
    if (resume) {
      resumed = *loaded;
      if (options.seed && *options.seed != resumed.seed)
        return absl::InvalidArgumentError(absl::StrCat(
            "--seed ", *options.seed, ": the run in ", options.load,
            " has seed ", resumed.seed,
            " (resuming keeps its seed: dropout and the data order)"));
      seed = resumed.seed;
      if (resumed.step > steps)
        return absl::InvalidArgumentError(absl::StrCat(
            "the checkpoint in ", options.load, " is at step ", resumed.step,
            ", past this run's ", steps, " steps"));
      if (options.log) {
        *options.log << "resumed from " << options.load << " at step "
                     << resumed.step << " (" << resumed.consumedSamples
                     << " samples consumed)\n";
        if (resumed.plannedSteps != steps)
          *options.log << "note: the saving run planned " << resumed.plannedSteps
                       << " steps and this one " << steps
                       << ": the learning-rate schedule differs from it\n";
      }
    }
  } else if (!options.initFrom.empty()) {
    absl::StatusOr<ckpt::HFCheckpoint> checkpoint =
        ckpt::OpenHFCheckpoint(options.initFrom);
    if (!checkpoint.ok())
      return checkpoint.status();
    // Its config.json, read as braidc reads one, must describe the plan's
    // model: tensors of the plan's shapes may be of another one.
    std::vector<std::string> notes;
    if (absl::Status s = ckpt::CheckHFModel(*checkpoint, t.model_spec(),
                                            options.allowModelChange, &notes);
        !s.ok())
      return s;
    if (options.log)
      for (const std::string &note : notes)
        *options.log << note << "\n";
    // Every parameter of the plan is expected, once by name (a weight tied
    // across stages is one tensor), so that the checkpoint is checked whole
    // on every rank; the rank keeps those of its stage, and reads the others
    // into one scratch buffer.
    std::vector<ckpt::ParamSpec> specs;
    std::vector<std::vector<int>> owners; // the rank's buffers of each spec
    std::map<std::string, size_t> byName;
    for (int i = 0; i < plan.buffers_size(); ++i) {
      const plan::Buffer &b = plan.buffers(i);
      if (b.role() != plan::PARAMETER || b.block_of() > 0)
        continue; // a ZeRO-3 block is written through its parameters
      std::vector<int64_t> shape = plan::GlobalShape(b, plan.mesh());
      auto [it, fresh] = byName.emplace(b.name(), specs.size());
      if (fresh) {
        specs.push_back({b.name(), shape});
        owners.emplace_back();
      } else if (specs[it->second].shape != shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the plan's parameters named '", b.name(), "' have the shapes ",
            ckpt::shapeToString(specs[it->second].shape), " and ",
            ckpt::shapeToString(shape), " (expected one tensor)"));
      }
      if (b.stage() == stage)
        owners[it->second].push_back(i);
    }
    std::vector<std::vector<float>> values(specs.size());
    std::vector<float> scratch;
    for (size_t k = 0; k < specs.size(); ++k) {
      int64_t n = 1;
      for (int64_t d : specs[k].shape)
        n *= d;
      if (owners[k].empty())
        scratch.resize(std::max<size_t>(scratch.size(), size_t(n)));
      else
        values[k].resize(n);
    }
    if (absl::Status s = ckpt::LoadParameters(
            *checkpoint, specs,
            [&](size_t k) {
              return owners[k].empty() ? scratch.data() : values[k].data();
            });
        !s.ok())
      return s;
    // Each rank keeps its slice of the whole tensors.
    for (size_t k = 0; k < specs.size(); ++k)
      for (int id : owners[k]) {
        const plan::Buffer &b = plan.buffers(id);
        std::vector<double> local(numel(b));
        for (const plan::ShardRun &run :
             plan::ShardRuns(b, plan.mesh(), shardCoordinate(e, b)))
          std::copy_n(values[k].begin() + run.global, run.length,
                      local.begin() + run.local);
        if (absl::Status s = writeParameter(e, id, local); !s.ok())
          return s;
      }
  }
  InitConfig init{seed, t.init_std() > 0 ? t.init_std() : 0.02,
                  std::max<int64_t>(t.num_layers(), 1), t.scaled_residual_init()};
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const plan::Buffer &b = plan.buffers(i);
    if (b.role() != plan::PARAMETER || b.block_of() > 0 ||
        b.stage() != stage || !options.initFrom.empty() || fromCheckpoint)
      continue;
    // Values by global element index: a slice holds what the whole tensor
    // holds there.
    std::vector<float> values(numel(b));
    const std::vector<int64_t> shape = plan::GlobalShape(b, plan.mesh());
    for (const plan::ShardRun &run :
         plan::ShardRuns(b, plan.mesh(), shardCoordinate(e, b)))
      if (absl::Status s = initParameterOfShape(
              b.name(), shape, init,
              uint64_t(run.global), uint64_t(run.length),
              values.data() + run.local);
          !s.ok())
        return s;
    if (absl::Status s = writeParameter(
            e, i, std::vector<double>(values.begin(), values.end()));
        !s.ok())
      return s;
  }

  // Mixed precision: the masters of weights that were just set; or, from a
  // Braid checkpoint (which holds the masters as the parameters' values),
  // the weights rounded from the masters it loaded.
  if (absl::Status s = fromCheckpoint ? weightsFromMasters(e, stage)
                                      : initMasterWeights(e, stage);
      !s.ok())
    return s;

  // Data: the run continues the data order where the resumed run left it.
  int64_t batch = t.micro_batch_size(), seq = t.seq_length();
  int64_t micros = std::max<int64_t>(t.micro_batches(), 1);
  DataShare share = DataShareOf(e);
  int64_t globalBatch = batch * micros * share.ranks;
  int64_t firstStep = resumed.step + 1;
  std::string order = options.dataOrder.empty() ? t.data_order() : options.dataOrder;
  if (order.empty())
    order = "shuffled";
  if (order != "shuffled" && order != "sequential")
    return absl::InvalidArgumentError(absl::StrCat(
        "data order \"", order, "\" is not one of shuffled, sequential"));
  // The run's lineage: the resumed checkpoint's, or a new one. The save
  // root is readied now (created, locked, writable, room for a checkpoint,
  // no other run's checkpoints where this one saves), before any step.
  const std::string lineage = !options.load.empty() && !resumed.lineage.empty()
                                  ? resumed.lineage
                                  : ckpt::NewLineage();
  std::unique_ptr<ckpt::RootLock> saveLock;
  if (!options.save.empty()) {
    SaveIntent intent;
    intent.root = options.save;
    intent.lineage = lineage;
    intent.overwrite = options.overwrite;
    const int64_t saveEvery = options.saveEvery, lastStep = steps,
                  resumedStep = resumed.step;
    intent.savesStep = [=](int64_t s) {
      if (firstStep > lastStep) // nothing to train: the state loaded
        return s == resumedStep;
      return s >= firstStep && s <= lastStep &&
             ((saveEvery > 0 && s % saveEvery == 0) || s == lastStep);
    };
    absl::StatusOr<std::unique_ptr<ckpt::RootLock>> prepared =
        PrepareSaveRoot(e, intent, options.log);
    if (!prepared.ok())
      return prepared.status();
    saveLock = std::move(*prepared);
  }
  if (!options.load.empty() && !resumed.dataOrder.empty() &&
      resumed.dataOrder != order && options.log)
    *options.log << "note: the saving run read its data " << resumed.dataOrder
                 << " and this one reads it " << order << "\n";
  std::optional<data::IndexedDataset> dataset;
  std::optional<data::GptSamples> samples;
  if (firstStep <= steps) {
    absl::StatusOr<data::IndexedDataset> opened =
        data::IndexedDataset::Open(dataPath);
    if (!opened.ok())
      return opened.status();
    dataset.emplace(std::move(*opened));
    data::GptSampleOptions sampleOptions;
    sampleOptions.seqLength = seq;
    sampleOptions.numSamples = uint64_t(resumed.consumedSamples +
                                        (steps - resumed.step) * globalBatch);
    sampleOptions.seed = seed;
    sampleOptions.order = order == "sequential" ? data::SampleOrder::kSequential
                                                : data::SampleOrder::kShuffled;
    absl::StatusOr<data::GptSamples> created =
        data::GptSamples::Create(&*dataset, sampleOptions);
    if (!created.ok())
      return created.status();
    // A dataset shorter than one global batch would fill each batch with
    // the same text again (the next epochs): refused rather than trained
    // on copies.
    const uint64_t batchTokens = uint64_t(globalBatch) * uint64_t(seq) + 1;
    if (dataset->numTokens() < batchTokens)
      return absl::InvalidArgumentError(absl::StrCat(
          dataPath, ": the dataset holds ", dataset->numTokens(),
          " tokens, fewer than one global batch reads (", globalBatch,
          " samples of ", seq, " tokens, ", batchTokens,
          " tokens): every batch would repeat the same text; give more "
          "data, or a smaller batch or sequence length"));
    samples.emplace(std::move(*created));
  }

  // The schedule.
  cpu::LrScheduleConfig lrConfig;
  lrConfig.lr = t.lr();
  lrConfig.minLr = t.min_lr();
  lrConfig.warmupSteps = t.warmup_steps();
  lrConfig.decaySteps = std::max<int64_t>(steps, 1); // (0 steps: nothing to train)
  absl::StatusOr<cpu::LrDecayStyle> style =
      cpu::parseLrDecayStyle(t.lr_decay().empty() ? "constant" : t.lr_decay());
  if (!style.ok())
    return style.status();
  lrConfig.style = *style;
  // The schedule decays over the run's steps: a warmup longer than the run
  // would never reach the peak (cpu::LrSchedule refuses it in its own
  // terms; say it in the run's).
  if (*style != cpu::LrDecayStyle::kConstant && steps > 0 &&
      lrConfig.warmupSteps > steps)
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan warms the learning rate up over ", lrConfig.warmupSteps,
        " steps (train.warmup_steps) and then decays it (", t.lr_decay(),
        ") until the run's last step, but the run has only ", steps,
        " steps: give --steps ", lrConfig.warmupSteps,
        " or more, or compile with fewer warmup steps"));
  absl::StatusOr<cpu::LrSchedule> schedule = cpu::LrSchedule::create(lrConfig);
  if (!schedule.ok())
    return schedule.status();

  // The buffers the loop writes and reads: the plan's, or with a pipeline
  // the stage's (tokens and targets where the stage has them).
  int tokens = -1, targets = -1, lr = -1, step = -1, gradNorm = -1;
  {
    auto find = [&](const char *name, bool required) -> absl::StatusOr<int> {
      if (!pipelined)
        return need(e, name);
      if (!required)
        return e.FindBuffer(name, stage);
      return needInStage(e, name, stage);
    };
    for (auto [id, name, required] :
         {std::tuple<int *, const char *, bool>{&tokens, "tokens", false},
          {&targets, "targets", false},
          {&lr, "lr", true},
          {&step, "step", true},
          {&gradNorm, "grad_norm", true}}) {
      absl::StatusOr<int> found = find(name, required);
      if (!found.ok())
        return found.status();
      *id = *found;
    }
  }

  // The metrics, one JSON line a step, written in place and flushed after
  // each line (tools follow the file as it grows); a failed write (a full
  // disk) ends the run with an error naming the file.
  std::unique_ptr<common::OutputFile> metrics;
  if (!options.metricsOut.empty()) {
    common::OutputFile::Options inPlace;
    inPlace.inPlace = true;
    absl::StatusOr<std::unique_ptr<common::OutputFile>> opened =
        common::OutputFile::Open(options.metricsOut, inPlace);
    if (!opened.ok())
      return absl::Status(opened.status().code(),
                          absl::StrCat("--metrics-out: ",
                                       opened.status().message()));
    metrics = std::move(*opened);
  }
  if (options.profile || !options.profileOut.empty())
    e.EnableProfile();
  if (trace) {
    if (absl::Status s = e.SetTrace(trace.get()); !s.ok())
      return s;
    // A barrier: every rank's clock starts when the last one gets here, so
    // that the ranks' timelines line up (to the all-reduce's latency).
    if (options.comm && plan::WorldSize(plan) > 1) {
      std::vector<std::string> axes(plan.mesh().axes().begin(),
                                    plan.mesh().axes().end());
      double one = 1;
      if (absl::Status s = options.comm->AllReduce(axes, &one, 1, plan::F64);
          !s.ok())
        return s;
    }
    trace->Start();
  }
  // The arena's bytes after a step: this rank's allocation (the plan's
  // prediction) and what the run has touched of it (the operating system's
  // count), each the largest over the job's ranks.
  std::vector<std::string> allAxes(plan.mesh().axes().begin(),
                                   plan.mesh().axes().end());
  bool severalRanks = options.comm && plan::WorldSize(plan) > 1;
  auto arenaBytes = [&](double bytes[2]) -> absl::Status {
    int64_t touched = e.TouchedArenaBytes();
    if (touched < 0)
      return absl::InternalError(
          absl::StrCat("cannot count the arena's touched pages (mincore): ",
                       std::strerror(errno)));
    bytes[0] = double(e.ArenaBytes());
    bytes[1] = double(touched);
    if (!severalRanks)
      return absl::OkStatus();
    std::string group = absl::StrJoin(allAxes, ",");
    return tracedCommunication(
        e.trace(), "ALL_REDUCE",
        "braid-run: the arena's predicted and touched bytes, the largest "
        "over the ranks",
        group.c_str(), [&] {
          return options.comm->AllReduce(allAxes, bytes, 2, plan::F64,
                                         Reduction::kMax);
        });
  };
  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> sample;
  std::vector<double> tokenValues(batch * seq), targetValues(batch * seq);
  // fp16: the loss scale (LossScaler.h), applied through the backend; a
  // resumed run continues the scaler it saved.
  std::optional<LossScaler> scaler;
  if (t.has_loss_scaling()) {
    scaler.emplace(t.loss_scaling());
    if (resumed.lossScaler)
      scaler->Restore(*resumed.lossScaler);
  }
  // ZeRO's parameters that the plan gathers in the next step's first
  // micro-batch (gather_params) are whole on every rank only after it.
  auto gatherParams = [&]() -> absl::Status {
    const std::string &fn = t.step().gather_params();
    if (fn.empty())
      return absl::OkStatus();
    absl::Status s = e.Run(fn, {seed, 0, 0});
    if (!s.ok())
      return absl::Status(
          s.code(), absl::StrCat("gathering the parameters: ", s.message()));
    return s;
  };
  // A checkpoint after step `s` (or of the state loaded, at `s` = the
  // first step - 1, when there is nothing to train).
  auto save = [&](int64_t s) -> absl::Status {
    if (options.comm) {
      options.comm->SetTimeout(slowTimeout);
      options.comm->SetWaitContext(s, "checkpoint save");
    }
    if (absl::Status st = gatherParams(); !st.ok())
      return st;
    RunState state;
    if (scaler)
      state.lossScaler = scaler->state();
    state.step = s;
    state.consumedSamples =
        resumed.consumedSamples + (s - resumed.step) * globalBatch;
    state.plannedSteps = steps;
    state.globalBatch = globalBatch;
    state.seed = seed;
    state.dataOrder = order;
    state.lineage = lineage;
    absl::StatusOr<SaveReport> saved =
        SaveCheckpoint(e, options.save, state, options.keepLast);
    if (!saved.ok())
      return absl::Status(saved.status().code(),
                          absl::StrCat("saving the checkpoint of step ", s,
                                       " in ", options.save, ": ",
                                       saved.status().message()));
    if (options.log)
      *options.log << absl::StrFormat(
          "checkpoint: step %d saved to %s (%.1f MB in %.2f s, %.0f MB/s)\n",
          s, saved->dir, saved->bytes / 1e6, saved->seconds,
          saved->bytes / 1e6 / std::max(saved->seconds, 1e-9));
    return absl::OkStatus();
  };
  if (firstStep > steps && !options.save.empty())
    if (absl::Status st = save(resumed.step); !st.ok())
      return st;
  std::vector<double> stepTimes;
  for (int64_t s = firstStep; s <= steps; ++s) {
    auto stepStart = std::chrono::steady_clock::now();
    if (options.comm) {
      options.comm->SetTimeout(s == firstStep ? slowTimeout
                                              : options.collectiveTimeout);
      options.comm->SetWaitContext(s, "");
    }
    if (scaler)
      e.SetLossScale(scaler->scale());
    // The update this step makes: steps skipped for overflow made none, so
    // AdamW's bias correction and the schedule count only the others (as
    // Megatron's optimizer and scheduler do).
    const int64_t update = s - (scaler ? scaler->skipped() : 0);
    double rate = schedule->lrForUpdate(update);
    for (auto [id, values] :
         {std::pair<int, std::vector<double>>{lr, {rate}},
          {step, {double(update)}}})
      if (absl::Status st = writeEveryCopy(e, id, values); !st.ok())
        return st;
    // Micro-batch m of step s on data-parallel rank d holds the samples that
    // follow those of the earlier micro-batches, ranks and steps: the global
    // order of samples does not depend on the dp degree (nor on pipeline
    // stages).
    auto fill = [&](int64_t m) -> absl::Status {
      for (int64_t b = 0; b < batch; ++b) {
        uint64_t index = uint64_t(resumed.consumedSamples +
                                  (s - firstStep) * globalBatch +
                                  share.rank * micros * batch + m * batch + b);
        if (absl::Status st = samples->GetSample(index, &sample); !st.ok())
          return st;
        for (int64_t i = 0; i < seq; ++i) {
          tokenValues[b * seq + i] = sample[i];
          targetValues[b * seq + i] = sample[i + 1];
        }
      }
      return absl::OkStatus();
    };
    // Into copy `slot` of the buffers that exist (both, without a pipeline).
    auto feed = [&](int64_t m, int64_t slot) -> absl::Status {
      if (tokens < 0 && targets < 0)
        return absl::OkStatus();
      if (absl::Status st = fill(m); !st.ok())
        return st;
      if (tokens >= 0)
        if (absl::Status st = e.Write(tokens, tokenValues, slot); !st.ok())
          return st;
      if (targets >= 0)
        if (absl::Status st = e.Write(targets, targetValues, slot); !st.ok())
          return st;
      return absl::OkStatus();
    };
    absl::StatusOr<double> stepLoss =
        pipelined ? RunPipelineStep(e, seed, s, feed)
                  : RunStep(e, seed, s,
                            [&](int64_t m) { return feed(m, 0); });
    if (!stepLoss.ok())
      return stepLoss.status();
    absl::StatusOr<std::vector<double>> normValue = e.Read(gradNorm);
    if (!normValue.ok())
      return normValue.status();
    double lossValue = *stepLoss, norm = (*normValue)[0];
    const double lossScale = e.LossScale();
    if (scaler) {
      // A non-finite norm: the gradients overflowed and the update skipped
      // the step (every rank sees the same norm).
      scaler->Update(std::isfinite(norm));
      if (!std::isfinite(norm) && options.log)
        *options.log << absl::StrFormat(
            "step %d: the gradients overflowed at loss scale %g: step "
            "skipped, the scale is now %g\n",
            s, lossScale, scaler->scale());
    }
    auto now = std::chrono::steady_clock::now();
    double stepTime = std::chrono::duration<double>(now - stepStart).count();
    double elapsed = std::chrono::duration<double>(now - start).count();
    if (!std::isfinite(lossValue))
      return absl::InternalError(absl::StrCat("step ", s, ": the loss is ", lossValue));
    if (trace)
      trace->Add(absl::StrCat("step ", s), TracePhase::kStep,
                 TraceThread::kStep, stepStart, now,
                 absl::StrFormat("\"step\": %d, \"loss\": %.9g", s, lossValue));
    stepTimes.push_back(stepTime);
    // The first step touches the arena's pages for the first time and warms
    // the caches: the profile keeps the steps after it (when there are any).
    if (s == firstStep && steps > firstStep)
      e.ResetProfile();
    double tokensPerS = double(globalBatch * seq) / std::max(stepTime, 1e-9);
    double memory[2];
    if (absl::Status st = arenaBytes(memory); !st.ok())
      return st;
    if (records)
      records->push_back({s, lossValue, rate, norm, stepTime,
                          int64_t(memory[0]), int64_t(memory[1])});
    if (options.log && (s % std::max<int64_t>(options.logEvery, 1) == 0 || s == steps))
      *options.log << absl::StrFormat(
          "step %*d/%d  loss %.4f  lr %.3e  grad norm %.3f  %.0f tokens/s  "
          "elapsed %.1fs  eta %.1fs\n",
          int(std::to_string(steps).size()), s, steps, lossValue, rate, norm,
          tokensPerS, elapsed,
          elapsed / double(s - firstStep + 1) * double(steps - s));
    // A step skipped for overflow has no gradient norm: JSON's null (JSON
    // has no NaN), and "skipped".
    if (metrics)
      if (absl::Status st = metrics->Write(absl::StrFormat(
          "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %s, "
          "\"tokens\": %d, \"step_time_s\": %.6f, \"tokens_per_s\": %.3f, "
          "\"predicted_mem_bytes\": %d, \"peak_mem_bytes\": %d, "
          "\"loss_scale\": %.9g%s}\n",
          s, lossValue, rate,
          std::isfinite(norm) ? absl::StrFormat("%.9g", norm) : "null",
          globalBatch * seq, stepTime, tokensPerS, int64_t(memory[0]),
          int64_t(memory[1]), lossScale,
          std::isfinite(norm) ? "" : ", \"skipped\": true"));
          !st.ok() || !(st = metrics->Flush()).ok())
        return absl::Status(st.code(),
                            absl::StrCat("--metrics-out: ", st.message()));
    if (!options.save.empty() &&
        ((options.saveEvery > 0 && s % options.saveEvery == 0) || s == steps))
      if (absl::Status st = save(s); !st.ok())
        return st;
  }
  if (trace) {
    (void)e.SetTrace(nullptr); // stopping cannot fail
    if (absl::Status s = WriteTrace(*trace, plan.mesh(), options.comm,
                                    writer ? &traceFile : nullptr);
        !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("writing the trace to ", options.trace,
                                       ": ", s.message()));
    if (options.log)
      *options.log << "trace: " << options.trace
                   << " (open it in ui.perfetto.dev or chrome://tracing)\n";
  }
  if (metrics)
    if (absl::Status s = metrics->Commit(); !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("--metrics-out: ", s.message()));
  if (absl::Status s = gatherParams(); !s.ok())
    return s;
  if (!options.saveParams.empty())
    if (absl::Status s = saveParameters(e, options.saveParams); !s.ok())
      return s;
  // Measured against predicted: the median step after the first (which
  // pays for first touches of the arena and warm-up).
  if (options.log && t.predicted_step_time_s() > 0 && !stepTimes.empty()) {
    std::vector<double> steady(stepTimes.begin() + (stepTimes.size() > 1),
                               stepTimes.end());
    std::sort(steady.begin(), steady.end());
    double measured = steady[steady.size() / 2];
    double predicted = t.predicted_step_time_s();
    *options.log << absl::StrFormat(
        "step time: measured %.4g s (median of %d steps), predicted %.4g s on "
        "%s (%+.1f %%)\n",
        measured, int(steady.size()), predicted, t.predicted_cluster(),
        100 * (predicted - measured) / measured);
  }
  if (absl::Status s = reportMemory(e, options.log); !s.ok())
    return s;
  if (!options.profileOut.empty()) {
    std::vector<double> measured(stepTimes.begin() + (stepTimes.size() > 1),
                                 stepTimes.end());
    if (absl::Status s = writeProfile(e, measured, options.comm,
                                      writer ? &profileFile : nullptr);
        !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("writing the profile to ",
                                       options.profileOut, ": ", s.message()));
    if (options.log)
      *options.log << absl::StrFormat(
          "profile: %s (kernels of every rank over %d step%s)\n",
          options.profileOut, int64_t(measured.size()),
          measured.size() == 1 ? "" : "s");
  }
  if (options.profile && options.log) {
    const std::vector<double> &p = e.Profile();
    double total = 0, gemm = 0;
    for (int k = 0; k < int(p.size()); ++k) {
      total += p[k];
      if (k == plan::LINEAR || k == plan::LINEAR_GRAD_INPUT ||
          k == plan::LINEAR_GRAD_WEIGHT)
        gemm += p[k];
    }
    int64_t profiled = int64_t(stepTimes.size()) - (stepTimes.size() > 1);
    *options.log << absl::StrFormat(
        "profile: %.3f s in kernels over %d step%s%s, GEMM %.1f %%\n", total,
        profiled, profiled == 1 ? "" : "s",
        stepTimes.size() > 1 ? " (the first left out)" : "",
        total > 0 ? 100 * gemm / total : 0.0);
    std::vector<std::pair<double, int>> order;
    for (int k = 0; k < int(p.size()); ++k)
      if (p[k] > 0)
        order.push_back({p[k], k});
    std::sort(order.rbegin(), order.rend());
    for (auto [seconds, k] : order)
      *options.log << absl::StrFormat("  %-24s %8.3f s  %5.1f %%\n",
                                      plan::Kernel_Name(plan::Kernel(k)),
                                      seconds, 100 * seconds / total);
  }
  return absl::OkStatus();
}

} // namespace braid::exec
