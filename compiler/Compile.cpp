//===- Compile.cpp - The phases of a compile ------------------------------===//

#include "compiler/Compile.h"

#include "dialects/plan/PlanDialect.h"
#include "passes/model/Passes.h"
#include "passes/model/Recompute.h"
#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <set>

using namespace mlir;
using namespace braid;

namespace {

struct PhaseInfo {
  Phase phase;
  const char *name;
  /// Adds the phase's passes to `pm`.
  void (*addPasses)(OpPassManager &pm, const CompileOptions &options);
};

const PhaseInfo kPhases[] = {
    {Phase::Model, "model",
     [](OpPassManager &pm, const CompileOptions &) {
       pm.addPass(model::createModelVerifyForward());
       pm.addPass(model::createModelLora());
     }},
    {Phase::Autodiff, "autodiff",
     [](OpPassManager &pm, const CompileOptions &) {
       pm.addPass(model::createModelAutodiff());
       pm.addPass(model::createModelVerifyTrainStep());
     }},
    {Phase::Optimizer, "optimizer",
     [](OpPassManager &pm, const CompileOptions &options) {
       model::ModelOptimizerOptions o;
       o.beta1 = options.train.adamBeta1;
       o.beta2 = options.train.adamBeta2;
       o.eps = options.train.adamEps;
       o.weightDecay = options.train.weightDecay;
       o.maxGradNorm = options.train.clipGrad;
       pm.addPass(model::createModelOptimizer(o));
     }},
    {Phase::Shard, "shard",
     [](OpPassManager &pm, const CompileOptions &options) {
       model::ModelShardOptions o;
       o.dp = options.parallel.dp;
       o.tp = options.parallel.tp;
       o.sp = options.parallel.sp;
       o.pp = options.parallel.pp;
       pm.addPass(model::createModelShard(o));
       pm.addPass(model::createModelGradReduce());
     }},
    {Phase::Partition, "partition",
     [](OpPassManager &pm, const CompileOptions &options) {
       model::ModelPipelinePartitionOptions o;
       o.pp = options.parallel.pp;
       o.stageLayers = options.parallel.stageLayers;
       o.vpp = options.parallel.vpp;
       pm.addPass(model::createModelPipelinePartition(o));
     }},
    {Phase::Recompute, "recompute",
     [](OpPassManager &pm, const CompileOptions &options) {
       model::ModelRecomputeOptions o;
       o.mode = options.parallel.recompute == "auto" ? "levels"
                                                     : options.parallel.recompute;
       o.levels = options.recomputeLevels;
       pm.addPass(model::createModelRecompute(o));
     }},
    {Phase::Plan, "plan",
     [](OpPassManager &pm, const CompileOptions &options) {
       if (options.generate) {
         // An inference plan: prefill and decode, no step to schedule,
         // shard over dp or evaluate.
         pm.addPass(plan_ir::createPlanLower());
         pm.addPass(plan_ir::createPlanMemory());
         pm.addPass(plan_ir::createPlanVerify());
         return;
       }
       plan_ir::PlanLowerOptions lower;
       lower.splitBackward = options.parallel.schedule == "zb-h1";
       pm.addPass(plan_ir::createPlanLower(lower));
       plan_ir::PlanZeroOptions zero;
       zero.zero = options.parallel.zero;
       zero.bucketBytes = options.parallel.zeroBucketBytes;
       pm.addPass(plan_ir::createPlanZero(zero));
       plan_ir::PlanScheduleOptions o;
       o.scheme = options.parallel.schedule;
       o.microBatches = options.parallel.microBatches;
       pm.addPass(plan_ir::createPlanSchedule(o));
       plan_ir::PlanOverlapGradReduceOptions overlap;
       overlap.bucketBytes = options.parallel.gradBucketBytes;
       pm.addPass(plan_ir::createPlanOverlapGradReduce(overlap));
       plan_ir::PlanOverlapParamGatherOptions gather;
       gather.microBatches = options.parallel.microBatches;
       gather.enabled = options.parallel.overlapParamGather;
       pm.addPass(plan_ir::createPlanOverlapParamGather(gather));
       pm.addPass(plan_ir::createPlanEval());
       pm.addPass(plan_ir::createPlanMemory());
       pm.addPass(plan_ir::createPlanVerify());
     }},
};

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

/// Writes the IR after each pass to `<dir>/NN-<pass flag>.mlir`.
class DumpToDirectory : public PassManager::IRPrinterConfig {
public:
  explicit DumpToDirectory(std::string dir, unsigned first)
      : IRPrinterConfig(/*printModuleScope=*/true), dir(std::move(dir)),
        counter(first) {}

  void printAfterIfEnabled(Pass *pass, Operation *,
                           PrintCallbackFn print) override {
    llvm::SmallString<256> path(dir);
    std::string name = llvm::formatv("{0:2}-{1}.mlir", counter++,
                                     pass->getArgument().str());
    // formatv pads with spaces; file names want zeros.
    std::replace(name.begin(), name.end(), ' ', '0');
    llvm::sys::path::append(path, name);
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec) {
      llvm::errs() << "braidc: cannot write " << path << ": " << ec.message()
                   << "\n";
      return;
    }
    print(os);
  }

private:
  std::string dir;
  unsigned counter;
};

} // namespace

llvm::Expected<Phase> braid::parsePhase(llvm::StringRef name) {
  for (const PhaseInfo &info : kPhases)
    if (name == info.name)
      return info.phase;
  std::string known;
  llvm::raw_string_ostream os(known);
  llvm::interleaveComma(phaseNames(), os);
  return error("--compile-to=" + name + " is not a phase; phases: " + known);
}

std::vector<std::string> braid::phaseNames() {
  std::vector<std::string> names;
  for (const PhaseInfo &info : kPhases)
    names.push_back(info.name);
  return names;
}

namespace {

/// Adds the passes of the phases from `from` to `to` (inclusive) to `pm`;
/// returns how many passes it added.
unsigned addPhases(PassManager &pm, const CompileOptions &options, Phase from,
                   Phase to) {
  unsigned before = pm.size();
  for (const PhaseInfo &info : kPhases) {
    if (info.phase < from)
      continue;
    // An inference graph has no step to differentiate, optimize, cut into
    // stages or recompute: it is split over tp (model-shard alone: no
    // gradients to sum) and its plan is made.
    if (!options.generate || info.phase == Phase::Plan) {
      info.addPasses(pm, options);
    } else if (info.phase == Phase::Shard && options.parallel.tp > 1) {
      model::ModelShardOptions o;
      o.tp = options.parallel.tp;
      pm.addPass(model::createModelShard(o));
    }
    if (info.phase == to)
      break;
  }
  return pm.size() - before;
}

/// Each pipeline rank's arena bytes and slots (micro-batches in flight) in a
/// compiled plan, with model chunks each chunk's (chunk_slots; `slots` is
/// the largest); rank 0 only without a pipeline.
struct RankMemory {
  int64_t arenaBytes = 0, slots = 1;
  std::vector<int64_t> chunkSlots;
};
std::map<int64_t, RankMemory> rankMemory(ModuleOp module) {
  std::map<int64_t, RankMemory> out;
  for (auto stage : module.getOps<plan_ir::StageOp>()) {
    RankMemory &m = out[stage.getIndex()];
    if (auto arena = stage->getAttrOfType<IntegerAttr>("plan.arena_bytes"))
      m.arenaBytes = arena.getInt();
    m.slots = stage.getSlots().value_or(1);
    if (std::optional<ArrayRef<int64_t>> pools = stage.getChunkSlots())
      m.chunkSlots.assign(pools->begin(), pools->end());
  }
  if (out.empty())
    if (auto arena = module->getAttrOfType<IntegerAttr>("plan.arena_bytes"))
      out[0].arenaBytes = arena.getInt();
  return out;
}

/// The refusal of a plan over the budget, naming the rank.
llvm::Error checkBudget(ModuleOp module, const ParallelConfig &parallel) {
  if (parallel.memoryBudgetBytes <= 0)
    return llvm::Error::success();
  for (auto [rank, m] : rankMemory(module))
    if (m.arenaBytes > parallel.memoryBudgetBytes)
      return error(llvm::formatv(
          "the plan needs {0} bytes on pipeline rank {1}, more than "
          "parallel.memory_budget_bytes = {2} (with parallel.recompute = "
          "\"{3}\"); recompute more (--recompute selective | full | auto) or "
          "split the model further",
          m.arenaBytes, rank, parallel.memoryBudgetBytes, parallel.recompute));
  return llvm::Error::success();
}

/// The levels of each layer that fit every rank's arena in the budget with
/// the fewest recompute FLOPs (see runPhases). `module` is partitioned.
llvm::Expected<std::vector<int64_t>>
searchRecompute(ModuleOp module, const CompileOptions &options,
                DictionaryAttr &summary) {
  FailureOr<std::vector<model::LayerRecompute>> layers =
      model::analyzeRecompute(module);
  if (failed(layers))
    return error("recompute: the step's layers cannot be analysed (see the "
                 "diagnostics above)");
  const int64_t budget = options.parallel.memoryBudgetBytes;
  auto compileWith = [&](const std::vector<int64_t> &levels)
      -> llvm::Expected<std::map<int64_t, RankMemory>> {
    OwningOpRef<ModuleOp> clone(cast<ModuleOp>(module->clone()));
    CompileOptions o = options;
    o.recomputeLevels = levels;
    PassManager pm(module->getContext());
    pm.enableVerifier(o.verifyEachPass);
    addPhases(pm, o, Phase::Recompute, Phase::Plan);
    if (failed(pm.run(*clone)))
      return error("recompute auto: compiling a candidate failed (see the "
                   "diagnostics above)");
    return rankMemory(*clone);
  };
  auto largest = [](const std::map<int64_t, RankMemory> &m) {
    int64_t most = 0, at = 0;
    for (auto [rank, r] : m)
      if (r.arenaBytes > most) {
        most = r.arenaBytes;
        at = rank;
      }
    return std::pair(most, at);
  };
  std::vector<int64_t> none(layers->size(), 0), full;
  for (const model::LayerRecompute &l : *layers)
    full.push_back(int64_t(l.levels.size()) - 1);
  llvm::Expected<std::map<int64_t, RankMemory>> atFull = compileWith(full);
  if (!atFull)
    return atFull.takeError();
  llvm::Expected<std::map<int64_t, RankMemory>> atNone = compileWith(none);
  if (!atNone)
    return atNone.takeError();
  auto [fullBytes, fullRank] = largest(*atFull);
  int64_t noneBytes = largest(*atNone).first;
  Builder b(module.getContext());
  auto record = [&](int64_t chosen, int64_t tries) {
    summary = b.getDictionaryAttr(
        {b.getNamedAttr("budget_bytes", b.getI64IntegerAttr(budget)),
         b.getNamedAttr("none_bytes", b.getI64IntegerAttr(noneBytes)),
         b.getNamedAttr("full_bytes", b.getI64IntegerAttr(fullBytes)),
         b.getNamedAttr("chosen_bytes", b.getI64IntegerAttr(chosen)),
         b.getNamedAttr("candidates_compiled", b.getI64IntegerAttr(tries))});
  };
  if (fullBytes > budget)
    return error(llvm::formatv(
        "parallel.memory_budget_bytes = {0}: no recompute choice fits. The "
        "least any choice needs is {1} bytes per device (full recompute, "
        "pipeline rank {2}); without recompute the plan needs {3}",
        budget, fullBytes, fullRank, noneBytes));
  if (noneBytes <= budget) {
    record(noneBytes, 2);
    return none;
  }

  // Each layer's rank, and each rank's room over full recompute.
  std::map<int64_t, int64_t> rankOfStage, chunkOfStage;
  if (auto stages = module->getAttrOfType<ArrayAttr>("model.pipeline"))
    for (auto [c, attr] : llvm::enumerate(stages)) {
      if (auto rank = cast<DictionaryAttr>(attr).getAs<IntegerAttr>("rank"))
        rankOfStage[c] = rank.getInt();
      if (auto chunk = cast<DictionaryAttr>(attr).getAs<IntegerAttr>("chunk"))
        chunkOfStage[c] = chunk.getInt();
    }
  std::map<int64_t, std::vector<size_t>> layersOfRank;
  for (auto [i, l] : llvm::enumerate(*layers))
    layersOfRank[l.stage < 0 ? 0 : rankOfStage[l.stage]].push_back(i);
  std::map<int64_t, int64_t> room;
  for (auto [rank, m] : *atFull)
    room[rank] = budget - m.arenaBytes;

  // Per rank, a multiple-choice knapsack over its layers: a level's weight is
  // what its kept bytes add over full recompute, times the micro-batches the
  // layer's chunk holds at once (its slots); its cost the FLOPs it
  // recomputes. The room is cut
  // into at most 4096 units, weights rounded up.
  std::vector<int64_t> levels = full;
  auto choose = [&](int64_t rank) {
    const std::vector<size_t> &mine = layersOfRank[rank];
    int64_t capacity = std::max<int64_t>(room[rank], 0);
    int64_t unit = std::max<int64_t>(1, (capacity + 4095) / 4096);
    int64_t units = capacity / unit;
    const RankMemory &memory = (*atFull)[rank];
    auto slotsOf = [&](const model::LayerRecompute &l) {
      size_t chunk = l.stage < 0 ? 0 : size_t(chunkOfStage[l.stage]);
      return chunk < memory.chunkSlots.size() ? memory.chunkSlots[chunk]
                                              : memory.slots;
    };
    const double kInf = std::numeric_limits<double>::infinity();
    std::vector<double> cost(units + 1, kInf);
    cost[0] = 0;
    std::vector<std::vector<int64_t>> pick(mine.size(),
                                           std::vector<int64_t>(units + 1, -1));
    for (auto [k, i] : llvm::enumerate(mine)) {
      const model::LayerRecompute &l = (*layers)[i];
      std::vector<double> next(units + 1, kInf);
      for (int64_t c = 0; c <= units; ++c) {
        if (cost[c] == kInf)
          continue;
        for (auto [j, level] : llvm::enumerate(l.levels)) {
          int64_t extra =
              slotsOf(l) * (level.keptBytes - l.levels.back().keptBytes);
          int64_t w = (extra + unit - 1) / unit;
          if (c + w > units || cost[c] + level.flops >= next[c + w])
            continue;
          next[c + w] = cost[c] + level.flops;
          pick[k][c + w] = int64_t(j);
        }
      }
      cost = std::move(next);
    }
    int64_t at = 0;
    for (int64_t c = 1; c <= units; ++c)
      if (cost[c] < cost[at])
        at = c;
    for (size_t k = mine.size(); k-- > 0;) {
      int64_t j = pick[k][at];
      const model::LayerRecompute &l = (*layers)[mine[k]];
      levels[mine[k]] = j;
      int64_t extra =
          slotsOf(l) * (l.levels[j].keptBytes - l.levels.back().keptBytes);
      at -= (extra + unit - 1) / unit;
    }
  };
  // The knapsack counts kept activations as if all were alive at once,
  // with the temporaries of full recompute; the compiled arena peaks at one
  // moment, with its own temporaries. So compile each choice: a rank over
  // the budget loses what it is over from its room, a rank under it gains
  // its slack, and the cheapest choice that fits is kept.
  auto flopsOf = [&](const std::vector<int64_t> &levels) {
    double sum = 0;
    for (auto [i, l] : llvm::enumerate(*layers))
      sum += l.levels[levels[i]].flops;
    return sum;
  };
  std::vector<int64_t> best = full;
  double bestFlops = flopsOf(full);
  int64_t bestBytes = fullBytes;
  std::set<std::vector<int64_t>> seen;
  int tries = 2;
  for (int t = 0; t < 16; ++t) {
    for (auto &[rank, _] : layersOfRank)
      choose(rank);
    if (!seen.insert(levels).second)
      break; // the rooms lead back to a choice already compiled
    llvm::Expected<std::map<int64_t, RankMemory>> got = compileWith(levels);
    if (!got)
      return got.takeError();
    ++tries;
    bool fits = true;
    for (auto [rank, m] : *got)
      fits &= m.arenaBytes <= budget;
    if (fits && flopsOf(levels) < bestFlops) {
      best = levels;
      bestFlops = flopsOf(levels);
      bestBytes = largest(*got).first;
    }
    for (auto [rank, m] : *got)
      room[rank] += budget - m.arenaBytes + (m.arenaBytes > budget ? -64 : 0);
  }
  record(bestBytes, tries);
  return best;
}

} // namespace

llvm::Error braid::runPhases(ModuleOp module, const CompileOptions &options) {
  PassManager pm(module->getContext());
  pm.enableVerifier(options.verifyEachPass);
  if (!options.dumpIrDir.empty()) {
    // MLIR prints IR between passes only when passes do not run in parallel.
    module->getContext()->disableMultithreading();
    if (std::error_code ec =
            llvm::sys::fs::create_directories(options.dumpIrDir))
      return error("--dump-ir-after-all: cannot create " + options.dumpIrDir +
                   ": " + ec.message());
    llvm::SmallString<256> path(options.dumpIrDir);
    llvm::sys::path::append(path, "00-frontend.mlir");
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      return error("--dump-ir-after-all: cannot write " + path + ": " +
                   ec.message());
    module->print(os);
    pm.enableIRPrinting(
        std::make_unique<DumpToDirectory>(options.dumpIrDir, 1));
  }
  bool search = options.parallel.recompute == "auto" &&
                options.recomputeLevels.empty() &&
                options.compileTo >= Phase::Recompute;
  addPhases(pm, options, Phase::Model,
            search ? Phase::Partition : options.compileTo);
  if (failed(pm.run(module)))
    return error("compilation failed (see the diagnostics above)");
  if (search) {
    unsigned done = pm.size();
    DictionaryAttr summary;
    llvm::Expected<std::vector<int64_t>> levels =
        searchRecompute(module, options, summary);
    if (!levels)
      return levels.takeError();
    CompileOptions rest = options;
    rest.recomputeLevels = *levels;
    PassManager after(module->getContext());
    if (!options.dumpIrDir.empty())
      after.enableIRPrinting(
          std::make_unique<DumpToDirectory>(options.dumpIrDir, 1 + done));
    addPhases(after, rest, Phase::Recompute, options.compileTo);
    if (failed(after.run(module)))
      return error("compilation failed (see the diagnostics above)");
    module->setAttr("model.recompute_budget", summary);
  }
  if (options.compileTo == Phase::Plan)
    return checkBudget(module, options.parallel);
  return llvm::Error::success();
}
