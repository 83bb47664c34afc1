//===- TrainerInit.cpp - The initial weights of a run ---------------------===//
//
// InitialiseWeights (TrainerInternal.h): a run to resume (--load), a Braid
// checkpoint of any layout or a Hugging Face one (--init-from), or the
// family's seeded scheme; then, with mixed precision, the master weights.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TrainerInternal.h"

#include "runtime/ckpt/HFCheckpoint.h"
#include "runtime/ckpt/LoraAdapters.h"
#include "runtime/ckpt/ModelIdentity.h"
#include "runtime/exec/Init.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Shards.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <map>
#include <set>

namespace braid::exec::trainer {
namespace {

/// The elements of buffer `b` on this rank.
int64_t numel(const plan::Buffer &b) {
  int64_t n = 1;
  for (int64_t d : b.shape())
    n *= d;
  return n;
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

/// Mixed precision: sets each F32 master copy of this rank's stage (those
/// of the weights named in `only`, when given) to the weights it is rounded
/// into (with a rank_axis, the rank's block of the flat weights), once the
/// weights hold their initial values. The masters start as the BF16 (or
/// F16) weights widened, as Megatron's do.
absl::Status initMasterWeights(Backend &e, int64_t stage,
                               const std::set<std::string> *only = nullptr) {
  const plan::Plan &plan = e.plan();
  return forEachMaster(plan, stage, [&](const plan::Instruction &inst,
                                        int master, int weights) {
    if (only && !only->count(plan.buffers(weights).name()))
      return absl::OkStatus();
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

} // namespace

/// Loads the Hugging Face checkpoint --init-from names into the plan's
/// parameters (every rank checks it whole and keeps its stage's slices);
/// LoRA adapters, which a base model does not have, go to `unsourced`.
/// Loads --lora-load's adapters (ckpt::ReadLoraAdapters) into the plan's:
/// every tensor must be a trainable parameter of the plan of its shape (a
/// LoRA matrix, or a module to save's weight), and every adapter matrix of
/// the plan must be there, with the plan's alpha and rank. `loaded`
/// receives the names set.
static absl::Status loadAdapters(TrainingRun &run,
                                 std::set<std::string> &loaded) {
  const plan::Plan &plan = run.plan;
  const std::string &source = run.options.loraLoad;
  Backend &e = *run.backend;
  absl::StatusOr<ckpt::LoraAdapters> adapters =
      ckpt::ReadLoraAdapters(source);
  if (!adapters.ok())
    return absl::Status(adapters.status().code(),
                        absl::StrCat("--lora-load: ",
                                     adapters.status().message()));
  const plan::LoraSettings &lora = run.t.lora();
  if (adapters->rank != lora.rank() || adapters->alpha != lora.alpha())
    return absl::InvalidArgumentError(absl::StrCat(
        "--lora-load ", source, ": its adapters have rank ", adapters->rank,
        " and alpha ", adapters->alpha, ", the plan's rank ", lora.rank(),
        " and alpha ", lora.alpha(), " (adapters of another lora section)"));
  std::map<std::string, std::vector<int>> byName;
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const plan::Buffer &b = plan.buffers(i);
    if (b.role() == plan::PARAMETER && b.block_of() == 0 && !b.frozen())
      byName[b.name()].push_back(i);
  }
  for (const auto &[name, tensor] : adapters->tensors) {
    auto it = byName.find(name);
    if (it == byName.end())
      return absl::InvalidArgumentError(absl::StrCat(
          "--lora-load ", source, ": ", name,
          " is not a trainable parameter of the plan (adapters of another "
          "model, or of other target modules)"));
    for (int id : it->second) {
      const plan::Buffer &b = plan.buffers(id);
      std::vector<int64_t> shape = plan::GlobalShape(b, plan.mesh());
      if (shape != tensor.first)
        return absl::InvalidArgumentError(absl::StrCat(
            "--lora-load ", source, ": ", name, " is ",
            ckpt::shapeToString(tensor.first), " there but ",
            ckpt::shapeToString(shape), " in the plan"));
      if (b.stage() != run.stage)
        continue;
      std::vector<double> local(numel(b));
      for (const plan::ShardRun &piece :
           plan::ShardRuns(b, plan.mesh(), shardCoordinate(e, b)))
        std::copy_n(tensor.second.begin() + piece.global, piece.length,
                    local.begin() + piece.local);
      if (absl::Status s = writeParameter(e, id, local); !s.ok())
        return s;
    }
    loaded.insert(name);
  }
  for (const auto &[name, ids] : byName)
    if (IsLoraAdapter(name) && !loaded.count(name))
      return absl::InvalidArgumentError(absl::StrCat(
          "--lora-load ", source, ": it lacks the plan's ", name,
          " (adapters of other target modules)"));
  if (run.options.log && run.writer)
    *run.options.log << "lora: " << loaded.size() << " tensors from "
                     << source << "\n";
  return absl::OkStatus();
}

static absl::Status loadHuggingFace(TrainingRun &run,
                             std::set<std::string> &unsourced) {
  const plan::Plan &plan = run.plan;
  const TrainerOptions &options = run.options;
  const plan::Training &t = run.t;
  const int64_t stage = run.stage;
  Backend &e = *run.backend;
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
    // A Hugging Face model is a base: LoRA adapters start seeded.
    if (IsLoraAdapter(b.name())) {
      unsourced.insert(b.name());
      continue;
    }
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
      for (const plan::ShardRun &piece :
           plan::ShardRuns(b, plan.mesh(), shardCoordinate(e, b)))
        std::copy_n(values[k].begin() + piece.global, piece.length,
                    local.begin() + piece.local);
      if (absl::Status s = writeParameter(e, id, local); !s.ok())
        return s;
    }
  return absl::OkStatus();
}

absl::Status InitialiseWeights(TrainingRun &run) {
  const plan::Plan &plan = run.plan;
  const TrainerOptions &options = run.options;
  const plan::Training &t = run.t;
  int64_t steps = run.steps;
  const int64_t stage = run.stage;
  Backend &e = *run.backend;
  RunState &resumed = run.resumed;
  // Initial weights: a run to resume (--load), a checkpoint of any layout
  // (--init-from a Braid checkpoint: its parameters only), a Hugging Face
  // checkpoint, or the family's seeded scheme. A LoRA run's checkpoint
  // holds its adapters, not the frozen base: resuming one loads the base
  // from --init-from first.
  const bool resume = !options.load.empty();
  const bool braidBase =
      !options.initFrom.empty() && IsBraidCheckpoint(options.initFrom);
  run.fromCheckpoint = resume || braidBase;
  bool hasFrozen = false;
  for (const plan::Buffer &b : plan.buffers())
    hasFrozen = hasFrozen || (b.role() == plan::PARAMETER && b.frozen());
  if (resume && hasFrozen && options.initFrom.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "--load ", options.load,
        ": the plan freezes its base weights (a LoRA run), which its "
        "checkpoints do not hold: give the base model again with "
        "--init-from"));
  // The parameters the seeded scheme initialises: every one without a
  // source of weights; with one (a LoRA run from its base model), the
  // adapters the source does not hold.
  const bool seeded = !resume && options.initFrom.empty();
  std::set<std::string> unsourced;
  // 1. The base: --init-from, alone or under a resumed LoRA run.
  if (!options.initFrom.empty() && (!resume || hasFrozen)) {
    if (braidBase) {
      ModelCheck check{options.allowModelChange, options.log};
      check.adaptersMayBeAbsent = true;
      absl::StatusOr<RunState> loaded =
          LoadCheckpoint(e, options.initFrom, /*optimizer=*/false, check);
      if (!loaded.ok())
        return loaded.status();
      unsourced.insert(loaded->absentParameters.begin(),
                       loaded->absentParameters.end());
      // Mixed precision: the weights rounded from the masters it loaded
      // (which hold the parameters' values), before the adapters it did
      // not hold are seeded below.
      if (absl::Status s = weightsFromMasters(e, stage); !s.ok())
        return s;
    } else if (absl::Status s = loadHuggingFace(run, unsourced); !s.ok()) {
      return s;
    }
  }
  // 1b. Adapters to start from (--lora-load): they replace the seeded ones.
  std::set<std::string> adaptersLoaded;
  if (!options.loraLoad.empty()) {
    if (absl::Status s = loadAdapters(run, adaptersLoaded); !s.ok())
      return s;
    for (const std::string &name : adaptersLoaded)
      unsourced.erase(name);
  }
  // 2. The run to resume: every parameter it updates, and their moments.
  if (resume) {
    ModelCheck check{options.allowModelChange, options.log};
    check.frozenMayBeAbsent = hasFrozen;
    absl::StatusOr<RunState> loaded =
        LoadCheckpoint(e, options.load, /*optimizer=*/true, check);
    if (!loaded.ok())
      return loaded.status();
    unsourced.clear();
    resumed = *loaded;
    if (options.seed && *options.seed != resumed.seed)
      return absl::InvalidArgumentError(absl::StrCat(
          "--seed ", *options.seed, ": the run in ", options.load,
          " has seed ", resumed.seed,
          " (resuming keeps its seed: dropout and the data order)"));
    run.seed = resumed.seed;
    // --steps 0 with validation: evaluate the loaded weights (Megatron's
    // --skip-train), the run ending where the checkpoint is.
    if (steps == 0 && options.evalInterval.value_or(t.eval_interval()) > 0) {
      run.steps = steps = resumed.step;
      if (options.log)
        *options.log << "--steps 0: evaluating the weights of step "
                     << resumed.step << ", nothing to train\n";
    }
    if (resumed.step > steps)
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint in ", options.load, " is at step ", resumed.step,
          ", past this run's ", steps, " steps"));
    if (options.log) {
      *options.log << "resumed from " << options.load << " at step "
                   << resumed.step << " (" << resumed.consumedSamples
                   << " samples consumed)\n";
      if (resumed.plannedSteps != steps && steps > resumed.step)
        *options.log << "note: the saving run planned " << resumed.plannedSteps
                     << " steps and this one " << steps
                     << ": the learning-rate schedule differs from it\n";
    }
    if (absl::Status s = weightsFromMasters(e, stage); !s.ok())
      return s;
  }
  InitConfig init{run.seed, t.init_std() > 0 ? t.init_std() : 0.02,
                  std::max<int64_t>(t.num_layers(), 1), t.scaled_residual_init()};
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const plan::Buffer &b = plan.buffers(i);
    if (b.role() != plan::PARAMETER || b.block_of() > 0 ||
        b.stage() != stage || !(seeded || unsourced.count(b.name())) ||
        adaptersLoaded.count(b.name()))
      continue;
    // Values by global element index: a slice holds what the whole tensor
    // holds there.
    std::vector<float> values(numel(b));
    const std::vector<int64_t> shape = plan::GlobalShape(b, plan.mesh());
    for (const plan::ShardRun &piece :
         plan::ShardRuns(b, plan.mesh(), shardCoordinate(e, b)))
      if (absl::Status s = initParameterOfShape(
              b.name(), shape, init,
              uint64_t(piece.global), uint64_t(piece.length),
              values.data() + piece.local);
          !s.ok())
        return s;
    if (absl::Status s = writeParameter(
            e, i, std::vector<double>(values.begin(), values.end()));
        !s.ok())
      return s;
  }

  if (!unsourced.empty() && options.log && run.writer)
    *options.log << "lora: " << unsourced.size()
                 << " adapter matrices start from the seeded scheme (A "
                    "uniform in +-1/sqrt(in), B 0), the other parameters from "
                 << options.initFrom << "\n";
  // Mixed precision: the masters of the weights just set (seeded or from a
  // Hugging Face model; after a Braid checkpoint, only the adapters it did
  // not hold).
  if (!run.fromCheckpoint)
    return initMasterWeights(e, stage);
  unsourced.insert(adaptersLoaded.begin(), adaptersLoaded.end());
  return unsourced.empty() ? absl::OkStatus()
                           : initMasterWeights(e, stage, &unsourced);
}

} // namespace braid::exec::trainer
