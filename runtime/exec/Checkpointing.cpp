//===- Checkpointing.cpp - Saving and loading a run's state ---------------===//

#include "runtime/exec/Checkpointing.h"

#include "runtime/ckpt/Checkpoint.h"
#include "runtime/ckpt/ModelIdentity.h"
#include "runtime/exec/Init.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Shards.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/statvfs.h>
#include <unistd.h>

namespace braid::exec {
namespace {

namespace fs = std::filesystem;

int axisIndex(const plan::Mesh &mesh, absl::string_view axis) {
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) == axis)
      return i;
  return -1;
}

int64_t coordinate(const plan::Mesh &mesh, const std::vector<int64_t> &coords,
                   absl::string_view axis) {
  int a = axisIndex(mesh, axis);
  return a < 0 || a >= int(coords.size()) ? 0 : coords[a];
}

int64_t numel(const plan::Buffer &b) {
  int64_t n = 1;
  for (int64_t d : b.shape())
    n *= d;
  return n;
}

const plan::Function *findFunction(const plan::Plan &plan,
                                   absl::string_view name) {
  for (const plan::Function &fn : plan.functions())
    if (fn.name() == name)
      return &fn;
  return nullptr;
}

/// The stage of the rank at `coords` (0 without a pipeline).
int64_t stageOf(const plan::Plan &plan, const std::vector<int64_t> &coords) {
  if (plan.pipeline().stages_size() == 0)
    return 0;
  return coordinate(plan.mesh(), coords, "pp");
}

/// A parameter's name is saved by the lowest pipeline stage that holds it
/// (a weight tied across stages is one tensor).
std::map<std::string, int64_t> lowestStages(const plan::Plan &plan) {
  std::map<std::string, int64_t> lowest;
  for (const plan::Buffer &b : plan.buffers())
    if (b.role() == plan::PARAMETER && b.block_of() == 0 && !b.name().empty()) {
      auto [it, fresh] = lowest.emplace(b.name(), b.stage());
      if (!fresh)
        it->second = std::min<int64_t>(it->second, b.stage());
    }
  return lowest;
}

/// One piece a rank writes: a run of a holding.
struct WritePiece {
  std::string name, state, key;
  int64_t coordinate, begin, end;
  int buffer;
  int64_t bufferOffset;
};

/// The pieces the rank at `coords` writes: each holding of its stage's
/// parameters that this stage saves, cut into equal parts among the ranks
/// that hold it alike (the mesh axes other than pp, the parameter's shard
/// axis and, for ZeRO's blocks, dp).
absl::StatusOr<std::vector<WritePiece>>
piecesOf(const plan::Plan &plan, const std::vector<int64_t> &coords,
         const std::map<std::string, int64_t> &lowest) {
  absl::StatusOr<std::vector<Holding>> holdings = Holdings(plan, coords);
  if (!holdings.ok())
    return holdings.status();
  const plan::Mesh &mesh = plan.mesh();
  int64_t stage = stageOf(plan, coords);
  std::vector<WritePiece> pieces;
  for (const Holding &h : *holdings) {
    if (lowest.at(h.name) != stage)
      continue;
    const plan::Buffer &p = plan.buffers(h.param);
    std::string shardAxis = p.has_shard() ? p.shard().axis() : "";
    int64_t group = 1, place = 0;
    for (int a = 0; a < mesh.axes_size(); ++a) {
      const std::string &axis = mesh.axes(a);
      if (axis == "pp" || axis == shardAxis || (h.partitioned && axis == "dp"))
        continue;
      place = place * mesh.sizes(a) + coords[a];
      group *= mesh.sizes(a);
    }
    int64_t length = h.end - h.begin;
    int64_t lo = h.begin + length * place / group;
    int64_t hi = h.begin + length * (place + 1) / group;
    if (lo >= hi)
      continue;
    int64_t c = shardAxis.empty() ? 0 : coordinate(mesh, coords, shardAxis);
    pieces.push_back({h.name, h.state,
                      absl::StrCat(h.state, "/", h.name, "@", c, "[", lo, ":",
                                   hi, "]"),
                      c, lo, hi, h.buffer, h.bufferOffset + (lo - h.begin)});
  }
  return pieces;
}

/// Every rank's view of whether all ranks succeeded: the number of ranks
/// whose `mine` is an error. The ranks that succeeded report that another
/// failed; `what` says at what.
absl::Status agree(Backend &e, absl::Status mine, absl::string_view what) {
  Communicator *comm = e.communicator();
  if (!comm || plan::WorldSize(e.plan()) <= 1)
    return mine;
  std::vector<std::string> axes(e.plan().mesh().axes().begin(),
                                e.plan().mesh().axes().end());
  double failed = mine.ok() ? 0 : 1;
  if (absl::Status s = comm->AllReduce(axes, &failed, 1, plan::F64); !s.ok())
    return s;
  if (!mine.ok())
    return mine;
  if (failed > 0)
    return absl::AbortedError(absl::StrCat(
        int64_t(failed), " other rank(s) failed ", what,
        " (their errors say why)"));
  return absl::OkStatus();
}

/// The plan's parameters (with `frozen`, also those the step does not
/// update): name -> (global shape, a buffer holding it).
std::map<std::string, std::pair<std::vector<int64_t>, int>>
parametersOf(const plan::Plan &plan, bool frozen) {
  std::map<std::string, std::pair<std::vector<int64_t>, int>> out;
  std::map<std::string, int64_t> lowest = lowestStages(plan);
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const plan::Buffer &b = plan.buffers(i);
    if (b.role() != plan::PARAMETER || b.block_of() != 0 || b.name().empty() ||
        b.stage() != lowest[b.name()] || out.count(b.name()) ||
        (b.frozen() && !frozen))
      continue;
    out[b.name()] = {plan::GlobalShape(b, plan.mesh()), i};
  }
  return out;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string layoutOf(const plan::Mesh &mesh) {
  std::vector<std::string> parts;
  for (int a = 0; a < mesh.axes_size(); ++a)
    parts.push_back(absl::StrCat(mesh.axes(a), " ", mesh.sizes(a)));
  return absl::StrJoin(parts, " x ");
}

} // namespace

absl::StatusOr<std::vector<Holding>>
Holdings(const plan::Plan &plan, const std::vector<int64_t> &coords) {
  int64_t stage = stageOf(plan, coords);
  int64_t d = coordinate(plan.mesh(), coords, "dp");
  std::string update = plan.pipeline().stages_size()
                           ? plan.pipeline().stages(int(stage)).update()
                           : plan.training().step().update();
  std::vector<Holding> out;
  if (update.empty())
    return out;
  const plan::Function *fn = findFunction(plan, update);
  if (!fn)
    return absl::InvalidArgumentError(
        absl::StrCat("the plan has no update function '", update, "'"));
  auto bad = [&](int i, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "function '", update, "' instruction ", i, " (ADAMW): ", why,
        ": checkpoints cannot follow this update"));
  };
  for (int i = 0; i < fn->body_size(); ++i) {
    const plan::Instruction &inst = fn->body(i);
    if (inst.kernel() != plan::ADAMW)
      continue;
    if (inst.inputs_size() < 4)
      return bad(i, "fewer than 4 inputs");
    int p = inst.inputs(0), m = inst.inputs(2), v = inst.inputs(3);
    // Mixed precision: ADAMW updates the f32 master weights (its first
    // input) and rounds them into the parameter (its fourth output); the
    // masters are what is saved as the parameter's values.
    const bool masters = inst.outputs_size() >= 4;
    const int named = masters ? inst.outputs(3) : p;
    const plan::Buffer &pb = plan.buffers(named);
    int64_t blockSize = numel(plan.buffers(m));
    if (numel(plan.buffers(v)) != blockSize)
      return bad(i, "its moments differ in size");
    int flat = -1;
    bool zero3 = pb.block_of() > 0;
    if (zero3)
      flat = pb.block_of() - 1;
    else if (inst.rank_axis() == "dp")
      flat = named; // fp32's parameters, or mixed precision's rounded copy
    if (flat < 0) {
      // A parameter of its own, its moments (and masters) beside it.
      if (pb.role() != plan::PARAMETER || pb.name().empty())
        return bad(i, absl::StrCat("its parameter '", pb.name(),
                                   "' is no named parameter"));
      int64_t n = numel(pb);
      if (blockSize != n || numel(plan.buffers(p)) != n)
        return bad(i, "its moments, masters and parameter differ in size");
      for (auto [state, buffer] : {std::pair<const char *, int>{"param", p},
                                   {"exp_avg", m},
                                   {"exp_avg_sq", v}})
        out.push_back({pb.name(), state, named, buffer, 0, 0, n, false});
      continue;
    }
    // ZeRO: a flat bucket whose members are views; the rank's moments (and
    // with ZeRO-3 its parameters, with mixed precision its f32 masters) are
    // block d of it. With ZeRO-3 in mixed precision the rank's block of the
    // rounded parameters is the masters' rounding, which a load sets again
    // from them (Trainer's weightsFromMasters).
    int64_t base = d * blockSize;
    std::vector<int> members;
    for (int j = 0; j < plan.buffers_size(); ++j) {
      const plan::Buffer &b = plan.buffers(j);
      if (b.role() == plan::PARAMETER && !b.name().empty() &&
          b.view_of() == flat + 1 && b.block_of() == 0 &&
          b.stage() == stage)
        members.push_back(j);
    }
    std::sort(members.begin(), members.end(), [&](int a, int b) {
      return plan.buffers(a).view_offset() < plan.buffers(b).view_offset();
    });
    if (members.empty())
      return bad(i, "its flat bucket has no parameters");
    for (int j : members) {
      const plan::Buffer &b = plan.buffers(j);
      int64_t off = b.view_offset() / plan::DTypeBytes(b.dtype());
      int64_t n = numel(b);
      // ZeRO-1/2 in fp32: every dp rank holds the whole parameter.
      if (!zero3 && !masters)
        out.push_back({b.name(), "param", j, j, 0, 0, n, false});
      int64_t lo = std::max(off, base), hi = std::min(off + n, base + blockSize);
      if (lo >= hi)
        continue;
      if (zero3 || masters)
        out.push_back({b.name(), "param", j, p, lo - base, lo - off, hi - off,
                       true});
      out.push_back({b.name(), "exp_avg", j, m, lo - base, lo - off, hi - off,
                     true});
      out.push_back({b.name(), "exp_avg_sq", j, v, lo - base, lo - off,
                     hi - off, true});
    }
  }
  return out;
}

bool IsBraidCheckpoint(const std::string &dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / ckpt::kManifestFile, ec) ||
         fs::is_regular_file(fs::path(dir) / ckpt::kLatestFile, ec);
}

absl::StatusOr<int64_t> CheckpointBytes(const plan::Plan &plan) {
  std::map<std::string, int64_t> lowest = lowestStages(plan);
  int64_t bytes = 0;
  for (int64_t r = 0; r < plan::WorldSize(plan); ++r) {
    absl::StatusOr<std::vector<WritePiece>> pieces =
        piecesOf(plan, plan::MeshCoordinates(plan.mesh(), r), lowest);
    if (!pieces.ok())
      return pieces.status();
    for (const WritePiece &w : *pieces)
      bytes += (w.end - w.begin) * int64_t(sizeof(float));
  }
  return bytes;
}

absl::StatusOr<std::unique_ptr<ckpt::RootLock>>
PrepareSaveRoot(Backend &e, const SaveIntent &intent, std::ostream *log) {
  Communicator *comm = e.communicator();
  int64_t rank = comm ? comm->Rank() : 0;
  std::unique_ptr<ckpt::RootLock> lock;
  absl::Status mine = [&]() -> absl::Status {
    if (rank != 0)
      return absl::OkStatus();
    const std::string &root = intent.root;
    absl::StatusOr<std::unique_ptr<ckpt::RootLock>> locked =
        ckpt::RootLock::Acquire(root);
    if (!locked.ok())
      return locked.status();
    lock = std::move(*locked);
    // Writing: a file made and removed, as a save's temporaries are.
    const std::string probe =
        (fs::path(root) / absl::StrCat(".write-test-", ::getpid())).string();
    {
      std::FILE *f = std::fopen(probe.c_str(), "wb");
      bool ok = f && std::fputs("braid", f) >= 0;
      int err = errno;
      if (f)
        ok = std::fclose(f) == 0 && ok;
      std::remove(probe.c_str());
      if (!ok)
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot write into the checkpoint root ", root, ": ",
            std::strerror(err)));
    }
    // Room for one checkpoint.
    absl::StatusOr<int64_t> needed = CheckpointBytes(e.plan());
    if (!needed.ok())
      return needed.status();
    struct statvfs fsStats;
    if (::statvfs(root.c_str(), &fsStats) == 0) {
      int64_t available = int64_t(fsStats.f_bavail) * int64_t(fsStats.f_frsize);
      if (available < *needed)
        return absl::ResourceExhaustedError(absl::StrCat(
            "the checkpoint root ", root, " has ", available,
            " bytes free, less than one checkpoint of this plan needs (",
            *needed, " bytes: the parameters and their AdamW moments in F32)"));
    }
    // Step directories the run's saves would replace.
    std::vector<std::string> others, own;
    for (const ckpt::ListedCheckpoint &c : ckpt::ListCheckpointLineages(root)) {
      if (!intent.savesStep || !intent.savesStep(c.step))
        continue;
      std::string name = ckpt::StepDirName(c.step);
      if (c.readable && c.lineage == intent.lineage && !c.lineage.empty())
        own.push_back(name);
      else
        others.push_back(absl::StrCat(
            name, !c.readable    ? " (its manifest does not read)"
                  : c.lineage.empty() ? " (of a run that recorded no lineage)"
                                      : absl::StrCat(" (lineage ", c.lineage, ")")));
    }
    if (!others.empty() && !intent.overwrite) {
      std::vector<std::string> shown(
          others.begin(), others.begin() + std::min<size_t>(others.size(), 5));
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint root ", root, " holds ", others.size(),
          " checkpoint(s) of another run at steps this run saves: ",
          absl::StrJoin(shown, ", "),
          others.size() > 5 ? absl::StrCat(" and ", others.size() - 5, " more")
                            : "",
          "; this run (lineage ", intent.lineage,
          ") would replace them: give --overwrite to replace them, or "
          "another --save directory"));
    }
    if (log && !own.empty())
      *log << "note: " << root << " holds " << absl::StrJoin(own, ", ")
           << " of this run's lineage from an earlier run, which this run's "
              "saves replace\n";
    if (log && !others.empty())
      *log << "note: --overwrite: this run's saves replace "
           << absl::StrJoin(others, ", ") << " in " << root << "\n";
    return absl::OkStatus();
  }();
  if (absl::Status s = agree(e, mine, "to prepare the checkpoint root");
      !s.ok())
    return absl::Status(s.code(), absl::StrCat("--save ", intent.root, ": ",
                                               s.message()));
  return lock;
}

absl::StatusOr<SaveReport> SaveCheckpoint(Backend &e, const std::string &root,
                                          const RunState &state,
                                          int64_t keepLast) {
  auto start = std::chrono::steady_clock::now();
  const plan::Plan &plan = e.plan();
  Communicator *comm = e.communicator();
  int64_t world = plan::WorldSize(plan);
  int64_t rank = comm ? comm->Rank() : 0;
  std::vector<int64_t> coords =
      comm ? comm->Coordinates() : plan::MeshCoordinates(plan.mesh(), 0);
  std::map<std::string, int64_t> lowest = lowestStages(plan);
  const std::string tmp = ckpt::TempDirOf(root, state.step);

  // Every rank's pieces (rank 0 lists them all in the manifest).
  std::vector<std::vector<WritePiece>> all(world);
  for (int64_t r = 0; r < world; ++r) {
    absl::StatusOr<std::vector<WritePiece>> pieces =
        piecesOf(plan, plan::MeshCoordinates(plan.mesh(), r), lowest);
    if (!pieces.ok())
      return pieces.status();
    all[r] = std::move(*pieces);
  }
  size_t most = 0;
  for (const auto &pieces : all)
    most = std::max(most, pieces.size());

  if (absl::Status s = agree(
          e, rank == 0 ? ckpt::PrepareTempDir(root, state.step)
                       : absl::OkStatus(),
          "to prepare the checkpoint directory");
      !s.ok())
    return s;

  // This rank's file.
  const std::vector<WritePiece> &mine = all[rank];
  std::vector<double> report(3 + most, 0.0); // ok, crc, bytes, piece crcs
  absl::Status wrote = [&]() -> absl::Status {
    std::vector<ckpt::TensorToWrite> tensors;
    // Each buffer's bytes taken once (a device backend copies them).
    std::map<int, absl::Span<uint8_t>> taken;
    for (size_t k = 0; k < mine.size(); ++k) {
      const WritePiece &w = mine[k];
      if (plan.buffers(w.buffer).dtype() != plan::F32)
        return absl::UnimplementedError(absl::StrCat(
            "parameter ", w.name, ": checkpoints hold F32 buffers only"));
      auto it = taken.find(w.buffer);
      if (it == taken.end()) {
        absl::StatusOr<absl::Span<uint8_t>> bytes = e.Bytes(w.buffer);
        if (!bytes.ok())
          return bytes.status();
        it = taken.emplace(w.buffer, *bytes).first;
      }
      const absl::Span<uint8_t> *bytes = &it->second;
      absl::Span<const uint8_t> data = bytes->subspan(
          size_t(w.bufferOffset) * sizeof(float),
          size_t(w.end - w.begin) * sizeof(float));
      tensors.push_back({w.key, ckpt::Dtype::kF32, {w.end - w.begin}, data});
      report[3 + k] = double(ckpt::Crc32(data));
    }
    ckpt::WrittenFile written;
    if (absl::Status s = ckpt::WriteSafetensors(
            (fs::path(tmp) / ckpt::RankFileName(rank)).string(), tensors,
            {{"format", ckpt::kCheckpointFormat},
             {"rank", absl::StrCat(rank)},
             {"step", absl::StrCat(state.step)}},
            &written);
        !s.ok())
      return s;
    for (const auto &[buffer, bytes] : taken)
      if (absl::Status s = e.ReleaseBytes(buffer, /*written=*/false); !s.ok())
        return s;
    report[0] = 1;
    report[1] = double(written.crc32);
    report[2] = double(written.bytes);
    return absl::OkStatus();
  }();
  std::vector<double> reports(world * report.size());
  if (comm && world > 1) {
    std::vector<std::string> axes(plan.mesh().axes().begin(),
                                  plan.mesh().axes().end());
    if (absl::Status s = comm->AllGather(axes, report.data(), reports.data(),
                                         int64_t(report.size()), plan::F64);
        !s.ok())
      return s;
  } else {
    reports = report;
  }
  if (!wrote.ok())
    return wrote;
  for (int64_t r = 0; r < world; ++r)
    if (reports[r * report.size()] != 1)
      return absl::AbortedError(absl::StrCat(
          "rank ", r, " failed to write its checkpoint file (its error says "
                      "why); ", tmp, " is incomplete and not used"));

  // Rank 0: the manifest, then the commit.
  int64_t totalBytes = 0;
  for (int64_t r = 0; r < world; ++r)
    totalBytes += int64_t(reports[r * report.size() + 2]);
  absl::Status committed = absl::OkStatus();
  if (rank == 0) {
    ckpt::Manifest m;
    m.set_format(ckpt::kCheckpointFormat);
    m.set_version(ckpt::kCheckpointVersion);
    m.set_step(state.step);
    m.set_consumed_samples(state.consumedSamples);
    m.set_seed(state.seed);
    m.set_planned_steps(state.plannedSteps);
    m.set_global_batch_size(state.globalBatch);
    m.set_data_order(state.dataOrder);
    if (state.lossScaler) {
      ckpt::LossScaler *ls = m.mutable_loss_scaler();
      ls->set_scale(state.lossScaler->scale);
      ls->set_growth_tracker(state.lossScaler->growthTracker);
      ls->set_hysteresis_tracker(state.lossScaler->hysteresisTracker);
      ls->set_skipped_steps(state.lossScaler->skipped);
    }
    m.set_model_spec(plan.training().model_spec());
    plan::Training training = plan.training();
    training.clear_model_spec();
    google::protobuf::TextFormat::PrintToString(training,
                                                m.mutable_training());
    for (int a = 0; a < plan.mesh().axes_size(); ++a) {
      m.mutable_mesh()->add_axes(plan.mesh().axes(a));
      m.mutable_mesh()->add_sizes(plan.mesh().sizes(a));
    }
    m.set_layout(layoutOf(plan.mesh()));
    std::map<std::string, ckpt::Tensor *> tensors;
    // A LoRA run's checkpoint: its adapters (and modules to save), not the
    // frozen base, which a resumed run loads from the base model again.
    for (const auto &[name, entry] : parametersOf(plan, /*frozen=*/false)) {
      ckpt::Tensor *t = m.add_tensors();
      const plan::Buffer &b = plan.buffers(entry.second);
      t->set_name(name);
      for (int64_t dim : entry.first)
        t->add_shape(dim);
      t->set_dtype("F32");
      if (b.has_shard()) {
        t->mutable_sharding()->set_axis(b.shard().axis());
        t->mutable_sharding()->set_dim(b.shard().dim());
        for (int64_t block : b.shard().blocks())
          t->mutable_sharding()->add_blocks(block);
      }
      tensors[name] = t;
    }
    for (int64_t r = 0; r < world; ++r) {
      const double *rep = &reports[r * report.size()];
      ckpt::File *f = m.add_files();
      f->set_name(ckpt::RankFileName(r));
      f->set_rank(r);
      f->set_bytes(int64_t(rep[2]));
      f->set_crc32(ckpt::CrcHex(uint32_t(rep[1])));
      for (size_t k = 0; k < all[r].size(); ++k) {
        const WritePiece &w = all[r][k];
        ckpt::Piece *p = tensors.at(w.name)->add_pieces();
        p->set_state(w.state);
        p->set_coordinate(w.coordinate);
        p->set_begin(w.begin);
        p->set_end(w.end);
        p->set_file(f->name());
        p->set_key(w.key);
        p->set_crc32(ckpt::CrcHex(uint32_t(rep[3 + k])));
      }
    }
    m.set_lineage(state.lineage);
    committed = ckpt::WriteManifest(tmp, m);
    if (committed.ok())
      committed = ckpt::CommitCheckpoint(root, state.step);
    if (committed.ok() && keepLast > 0)
      committed =
          ckpt::PruneCheckpoints(root, keepLast, state.lineage, state.step);
  }
  if (absl::Status s = agree(e, committed, "to commit the checkpoint");
      !s.ok())
    return s;
  SaveReport out;
  out.dir = (fs::path(root) / ckpt::StepDirName(state.step)).string();
  out.bytes = totalBytes;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              start)
                    .count();
  return out;
}

absl::StatusOr<RunState> LoadCheckpoint(Backend &e, const std::string &dir,
                                        bool optimizer,
                                        const ModelCheck &check) {
  const plan::Plan &plan = e.plan();
  Communicator *comm = e.communicator();
  std::vector<int64_t> coords =
      comm ? comm->Coordinates() : plan::MeshCoordinates(plan.mesh(), 0);
  RunState state;
  absl::Status loaded = [&]() -> absl::Status {
    absl::StatusOr<std::string> resolved = ckpt::ResolveCheckpoint(dir);
    if (!resolved.ok())
      return resolved.status();
    absl::StatusOr<std::unique_ptr<ckpt::CheckpointReader>> reader =
        ckpt::CheckpointReader::Open(*resolved);
    if (!reader.ok())
      return reader.status();
    const ckpt::Manifest &m = (*reader)->manifest();
    // The same model: field by field (tensors of the same shapes may be of
    // another model: other heads, another RoPE theta, another eps), ...
    std::vector<std::string> notes;
    if (absl::Status s = ckpt::CheckCheckpointModel(
            absl::StrCat("checkpoint ", *resolved), m.model_spec(),
            plan.training().model_spec(), check.allowModelChange, &notes);
        !s.ok())
      return s;
    if (check.log)
      for (const std::string &note : notes)
        *check.log << note << "\n";
    // ... and every parameter, by name and global shape.
    std::vector<std::string> missing, extra, shapes;
    auto params = parametersOf(plan, /*frozen=*/true);
    std::set<std::string> absent;
    for (const auto &[name, entry] : params) {
      const ckpt::Tensor *t = (*reader)->Find(name);
      if (!t && ((check.adaptersMayBeAbsent && IsLoraAdapter(name)) ||
                 (check.frozenMayBeAbsent &&
                  plan.buffers(entry.second).frozen()))) {
        absent.insert(name);
        continue;
      }
      if (!t) {
        missing.push_back(name);
        continue;
      }
      std::vector<int64_t> saved(t->shape().begin(), t->shape().end());
      if (saved != entry.first)
        shapes.push_back(absl::StrCat(name, " is ", shapeString(saved),
                                      " there but ", shapeString(entry.first),
                                      " here"));
    }
    for (const ckpt::Tensor &t : m.tensors())
      if (!params.count(t.name()))
        extra.push_back(t.name());
    if (!missing.empty() || !extra.empty() || !shapes.empty()) {
      auto list = [](const std::vector<std::string> &v) {
        std::vector<std::string> shown(v.begin(),
                                       v.begin() + std::min<size_t>(v.size(), 5));
        return absl::StrCat(absl::StrJoin(shown, ", "),
                            v.size() > 5 ? absl::StrCat(" (and ", v.size() - 5,
                                                        " more)")
                                         : "");
      };
      std::vector<std::string> parts;
      if (!missing.empty())
        parts.push_back(absl::StrCat("it lacks ", missing.size(),
                                     " of this model's parameters: ",
                                     list(missing)));
      if (!extra.empty())
        parts.push_back(absl::StrCat("it has ", extra.size(),
                                     " tensors this model does not: ",
                                     list(extra)));
      if (!shapes.empty())
        parts.push_back(absl::StrCat("shapes differ: ", list(shapes)));
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", *resolved, " is of another model: ",
          absl::StrJoin(parts, "; ")));
    }
    absl::StatusOr<std::vector<Holding>> holdings = Holdings(plan, coords);
    if (!holdings.ok())
      return holdings.status();
    // Each buffer's bytes taken once and released (written) once all its
    // holdings are read (a device backend copies them in and back).
    std::map<int, absl::Span<uint8_t>> taken;
    for (const Holding &h : *holdings) {
      if ((!optimizer && h.state != "param") || absent.count(h.name))
        continue;
      const plan::Buffer &p = plan.buffers(h.param);
      if (plan.buffers(h.buffer).dtype() != plan::F32)
        return absl::UnimplementedError(absl::StrCat(
            "parameter ", h.name, ": checkpoints load into F32 buffers only"));
      auto it = taken.find(h.buffer);
      if (it == taken.end()) {
        absl::StatusOr<absl::Span<uint8_t>> bytes = e.Bytes(h.buffer);
        if (!bytes.ok())
          return bytes.status();
        it = taken.emplace(h.buffer, *bytes).first;
      }
      float *dst = reinterpret_cast<float *>(it->second.data()) + h.bufferOffset;
      int64_t c = p.has_shard() ? coordinate(plan.mesh(), coords,
                                             p.shard().axis())
                                : 0;
      for (const plan::ShardRun &run : plan::ShardRuns(p, plan.mesh(), c)) {
        int64_t lo = std::max(h.begin, run.local);
        int64_t hi = std::min(h.end, run.local + run.length);
        if (lo >= hi)
          continue;
        if (absl::Status s = (*reader)->Read(h.name, h.state,
                                             run.global + (lo - run.local),
                                             hi - lo, dst + (lo - h.begin));
            !s.ok())
          return s;
      }
    }
    for (const auto &[buffer, bytes] : taken)
      if (absl::Status s = e.ReleaseBytes(buffer, /*written=*/true); !s.ok())
        return s;
    // A stage's copy of a weight another stage updates (an embedding tied
    // across pipeline stages: the last stage receives it after each update)
    // has no holding here, but the first step's forward reads it: its
    // values come from the checkpoint too.
    std::set<int> held;
    for (const Holding &h : *holdings)
      held.insert(h.param);
    for (int id = 0; id < plan.buffers_size(); ++id) {
      const plan::Buffer &p = plan.buffers(id);
      if (p.role() != plan::PARAMETER || p.name().empty() ||
          p.block_of() > 0 || p.view_of() > 0 || held.count(id) ||
          p.stage() != stageOf(plan, coords) || !params.count(p.name()) ||
          absent.count(p.name()))
        continue;
      std::vector<float> values(size_t(numel(p)));
      int64_t c = p.has_shard() ? coordinate(plan.mesh(), coords,
                                             p.shard().axis())
                                : 0;
      for (const plan::ShardRun &run : plan::ShardRuns(p, plan.mesh(), c))
        if (absl::Status s = (*reader)->Read(p.name(), "param", run.global,
                                             run.length,
                                             values.data() + run.local);
            !s.ok())
          return s;
      if (absl::Status s =
              e.Write(id, std::vector<double>(values.begin(), values.end()));
          !s.ok())
        return s;
    }
    state.step = m.step();
    state.consumedSamples = m.consumed_samples();
    state.plannedSteps = m.planned_steps();
    state.globalBatch = m.global_batch_size();
    state.seed = m.seed();
    state.dataOrder = m.data_order();
    state.lineage = m.lineage();
    state.absentParameters.assign(absent.begin(), absent.end());
    if (m.has_loss_scaler())
      state.lossScaler = LossScaler::State{
          m.loss_scaler().scale(), m.loss_scaler().growth_tracker(),
          m.loss_scaler().hysteresis_tracker(),
          m.loss_scaler().skipped_steps()};
    return absl::OkStatus();
  }();
  if (absl::Status s = agree(e, loaded, "to load the checkpoint"); !s.ok())
    return s;
  return state;
}

} // namespace braid::exec
