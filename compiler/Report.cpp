//===- Report.cpp - The compile report ------------------------------------===//

#include "compiler/Report.h"

#include "compiler/Schedule.h"
#include "dialects/model/ModelDialect.h"
#include "dialects/plan/PlanDialect.h"
#include "passes/plan/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

#include <limits>
#include <map>

using namespace mlir;
using namespace braid;
using namespace braid::model;

namespace {
func::FuncOp getForward(ModuleOp module) {
  return module.lookupSymbol<func::FuncOp>("forward");
}

/// True when `value` is an argument of `func` marked model.param.
bool isParam(func::FuncOp func, Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  return arg && arg.getOwner()->getParentOp() == func.getOperation() &&
         func.getArgAttr(arg.getArgNumber(), ModelDialect::kParamAttrName);
}
} // namespace

ParameterCount braid::countParameters(ModuleOp module) {
  ParameterCount count;
  func::FuncOp func = getForward(module);
  if (!func)
    return count;
  for (BlockArgument arg : func.getArguments())
    if (isParam(func, arg))
      count.total += getNumElements(arg.getType());
  int64_t inLayers = 0;
  for (auto layer : func.getBody().getOps<LayerOp>()) {
    llvm::DenseSet<Value> seen;
    int64_t n = 0;
    for (Value input : layer.getInputs())
      if (isParam(func, input) && seen.insert(input).second)
        n += getNumElements(input.getType());
    count.perLayer.push_back(n);
    inLayers += n;
  }
  count.outsideLayers = count.total - inLayers;
  llvm::DenseSet<Value> tables;
  func.walk([&](Operation *op) {
    Value table;
    if (auto e = dyn_cast<EmbeddingOp>(op))
      table = e.getTable();
    else if (auto p = dyn_cast<PositionEmbeddingOp>(op))
      table = p.getTable();
    if (table && isParam(func, table) && tables.insert(table).second)
      count.embedding += getNumElements(table.getType());
  });
  return count;
}

FlopCount braid::countFlops(ModuleOp module) {
  FlopCount count;
  func::FuncOp func = getForward(module);
  if (!func)
    return count;
  // Costs saturate at INT64_MAX; so do their sums.
  auto add = [](int64_t &sum, int64_t value) {
    if (__builtin_add_overflow(sum, value, &sum))
      sum = std::numeric_limits<int64_t>::max();
  };
  func.walk([&](CostOpInterface op) {
    add(count.forwardMatmul, op.getMatmulFlops());
    add(count.forwardVector, op.getVectorFlops());
    if (isa<AttentionOp>(op.getOperation()))
      add(count.attentionMatmul, op.getMatmulFlops());
  });
  for (BlockArgument arg : func.getArguments())
    if (auto input = func.getArgAttrOfType<StringAttr>(
            arg.getArgNumber(), ModelDialect::kInputAttrName))
      if (input.getValue() == "tokens")
        count.tokens = getNumElements(arg.getType());
  return count;
}

llvm::json::Object braid::recomputeReport(ModuleOp module,
                                          int64_t microBatches) {
  llvm::json::Object out;
  auto layers = module->getAttrOfType<ArrayAttr>("model.recompute");
  if (!layers)
    return out;
  auto strings = [](DictionaryAttr d, StringRef key) {
    llvm::json::Array list;
    if (auto a = d.getAs<ArrayAttr>(key))
      for (Attribute s : a)
        list.push_back(cast<StringAttr>(s).getValue().str());
    return list;
  };
  llvm::json::Array list;
  double flops = 0;
  int64_t kept = 0, saved = 0;
  for (Attribute attr : layers) {
    auto d = cast<DictionaryAttr>(attr);
    auto integer = [&](StringRef key) {
      return d.getAs<IntegerAttr>(key).getInt();
    };
    double f = d.getAs<FloatAttr>("recompute_flops").getValueAsDouble();
    flops += f;
    kept += integer("input_bytes") + integer("kept_bytes");
    saved += integer("input_bytes") + integer("saved_bytes");
    list.push_back(llvm::json::Object{
        {"layer", integer("layer")},
        {"choice", d.getAs<StringAttr>("choice").getValue().str()},
        {"input_bytes", integer("input_bytes")},
        {"kept_bytes", integer("kept_bytes")},
        {"activation_bytes", integer("input_bytes") + integer("kept_bytes")},
        {"without_recompute_bytes",
         integer("input_bytes") + integer("saved_bytes")},
        {"recompute_flops", f},
        {"kept", strings(d, "kept")},
        {"recomputed", strings(d, "recomputed")},
    });
  }
  out["layers"] = std::move(list);
  out["activation_bytes_per_micro_batch"] = kept;
  out["without_recompute_bytes_per_micro_batch"] = saved;
  out["recompute_flops_per_micro_batch"] = flops;
  out["recompute_flops_per_step"] = flops * double(microBatches);
  if (auto budget = module->getAttrOfType<DictionaryAttr>("model.recompute_budget")) {
    llvm::json::Object search;
    for (NamedAttribute entry : budget)
      search[entry.getName().getValue()] =
          cast<IntegerAttr>(entry.getValue()).getInt();
    out["budget_search"] = std::move(search);
  }
  return out;
}

llvm::json::Object braid::planMemoryReport(ModuleOp module) {
  // A bucket's bytes are its members': each view lies in one, so count the
  // buckets by their members' role and leave the views out.
  llvm::StringMap<std::string> bucketRole;
  SmallVector<Operation *> buffers;
  for (Operation &op : module.getBody()->getOperations())
    if (op.getName().getStringRef() == "plan.buffer")
      buffers.push_back(&op);
  auto roleOf = [](Operation *op) {
    return cast<StringAttr>(op->getAttr("role")).getValue().str();
  };
  for (Operation *op : buffers)
    if (auto parent = op->getAttrOfType<FlatSymbolRefAttr>("view_of"))
      bucketRole[parent.getValue()] = roleOf(op);
  auto bytesOf = [](Operation *op) {
    auto type = cast<RankedTensorType>(cast<TypeAttr>(op->getAttr("type")).getValue());
    int64_t slots = 1;
    if (auto s = op->getAttrOfType<IntegerAttr>("slots"))
      slots = std::max<int64_t>(s.getInt(), 1);
    return type.getNumElements() * getElementBytes(type.getElementType()) * slots;
  };
  // Parameters some ADAMW of the rank updates (directly or in a bucket);
  // the others are copies another stage updates (a tied embedding). With
  // mixed precision ADAMW updates master weights and writes the parameters
  // as its fourth output.
  llvm::StringSet<> updated;
  const bool inference = module->hasAttr("model.generate");
  module.walk([&](Operation *op) {
    if (op->getName().getStringRef() != "plan.kernel" ||
        cast<StringAttr>(op->getAttr("kernel")).getValue() != "ADAMW")
      return;
    auto inputs = op->getAttrOfType<ArrayAttr>("inputs");
    auto outputs = op->getAttrOfType<ArrayAttr>("outputs");
    Attribute weights = outputs && outputs.size() == 4 ? outputs[3]
                        : inputs && !inputs.empty()    ? inputs[0]
                                                       : Attribute();
    if (weights)
      updated.insert(
          cast<SymbolRefAttr>(weights).getRootReference().getValue());
  });
  // Gradients kept whole for the step: not views of a temporary (ZeRO-2
  // reduce-scatters those in backward and keeps a block), by parameter name.
  llvm::StringMap<Operation *> bySymbol;
  for (Operation *op : buffers)
    bySymbol[cast<StringAttr>(op->getAttr("sym_name")).getValue()] = op;
  std::map<int64_t, llvm::StringSet<>> wholeGradients;
  for (Operation *op : buffers) {
    auto name = op->getAttrOfType<StringAttr>("name");
    if (roleOf(op) != "gradient" || !name)
      continue;
    auto parent = op->getAttrOfType<FlatSymbolRefAttr>("view_of");
    if (parent && roleOf(bySymbol.lookup(parent.getValue())) != "bucket")
      continue;
    int64_t stage = 0;
    if (auto s = op->getAttrOfType<IntegerAttr>("stage"))
      stage = s.getInt();
    wholeGradients[stage].insert(name.getValue());
  }
  std::map<int64_t, int64_t> whole;
  std::map<int64_t, llvm::StringSet<>> counted;
  // ZeRO-3: updating a block updates the flat parameters it is a block of.
  for (Operation *op : buffers)
    if (auto whole = op->getAttrOfType<FlatSymbolRefAttr>("block_of"))
      if (updated.contains(cast<StringAttr>(op->getAttr("sym_name")).getValue()))
        updated.insert(whole.getValue());
  // Frozen parameters (plan.buffer's `frozen`: a LoRA run's base weights).
  std::map<int64_t, int64_t> frozen, frozenBytes;
  std::map<std::string, int64_t> bytes;
  std::map<int64_t, int64_t> copies;
  // Per pipeline rank: the persistent bytes by role and the parameters held.
  std::map<int64_t, std::map<std::string, int64_t>> persistent;
  std::map<int64_t, int64_t> parameters;
  // What plan-memory places for the whole run (every role but activation,
  // named results, what a micro-batch keeps across calls), 64-byte aligned
  // as it places them: the arena's base; temporaries live above it.
  std::map<int64_t, int64_t> wholeRun, kept;
  for (Operation *op : buffers) {
    if (op->getAttr("view_of"))
      continue;
    int64_t stage = 0;
    if (auto s = op->getAttrOfType<IntegerAttr>("stage"))
      stage = s.getInt();
    bool slotted = bool(op->getAttr("slots"));
    if (roleOf(op) != "activation" || op->getAttr("name") || slotted)
      wholeRun[stage] += (bytesOf(op) + 63) / 64 * 64;
    if (slotted)
      kept[stage] += bytesOf(op);
  }
  std::map<int64_t, int64_t> rankArena;
  for (Operation &op : module.getBody()->getOperations())
    if (op.getName().getStringRef() == "plan.stage")
      if (auto a = op.getAttrOfType<IntegerAttr>("plan.arena_bytes"))
        rankArena[cast<IntegerAttr>(op.getAttr("index")).getInt()] = a.getInt();
  if (rankArena.empty())
    if (auto a = module->getAttrOfType<IntegerAttr>("plan.arena_bytes"))
      rankArena[0] = a.getInt();
  for (Operation *op : buffers) {
    if (op->getAttr("view_of") && roleOf(op) != "parameter")
      continue;
    int64_t stage = 0;
    if (auto s = op->getAttrOfType<IntegerAttr>("stage"))
      stage = s.getInt();
    if (roleOf(op) == "parameter" && !op->getAttr("block_of")) {
      auto type = cast<RankedTensorType>(cast<TypeAttr>(op->getAttr("type")).getValue());
      // Once per name: ZeRO-3 gathers a parameter into a copy per use.
      auto name = op->getAttrOfType<StringAttr>("name");
      if (name && !counted[stage].insert(name.getValue()).second)
        continue;
      parameters[stage] += type.getNumElements();
      if (auto name = op->getAttrOfType<StringAttr>("name");
          name && wholeGradients[stage].contains(name.getValue()))
        whole[stage] += type.getNumElements();
      StringRef self = cast<StringAttr>(op->getAttr("sym_name")).getValue();
      auto parent = op->getAttrOfType<FlatSymbolRefAttr>("view_of");
      const bool isFrozen = !inference && op->getAttr("frozen");
      if (isFrozen) {
        frozen[stage] += type.getNumElements();
        frozenBytes[stage] += bytesOf(op);
      }
      // An inference plan updates no parameter, here or elsewhere.
      if (!inference && !isFrozen && !updated.contains(self) &&
          !(parent && updated.contains(parent.getValue())))
        copies[stage] += type.getNumElements();
      if (op->getAttr("view_of"))
        continue;
    }
    std::string role = roleOf(op);
    if (role == "bucket") {
      auto it = bucketRole.find(cast<StringAttr>(op->getAttr("sym_name")).getValue());
      if (it == bucketRole.end())
        continue;
      role = it->second;
    }
    bytes[role] += bytesOf(op);
    if (role == "parameter" || role == "gradient" ||
        role == "optimizer_state" || role == "kv_cache")
      persistent[stage][role] += bytesOf(op);
  }
  llvm::json::Object byRole;
  for (auto &[role, n] : bytes)
    byRole[role] = n;
  llvm::json::Array ranks;
  for (auto &[stage, roles] : persistent) {
    llvm::json::Object entry{{"pipeline_rank", stage},
                             {"parameters", parameters[stage]},
                             {"parameters_updated_elsewhere", copies[stage]},
                             {"parameters_with_whole_gradients", whole[stage]}};
    int64_t total = 0;
    for (auto &[role, n] : roles) {
      entry[role + "_bytes"] = n;
      total += n;
    }
    entry["persistent_bytes"] = total;
    // The rank's arena, parted: persistent, kept activations (one copy per
    // micro-batch in flight), the rest of what lives the whole run (inputs,
    // named results, alignment), and the temporaries' peak above it.
    entry["arena_bytes"] = rankArena[stage];
    entry["kept_activation_bytes"] = kept[stage];
    entry["other_whole_run_bytes"] = wholeRun[stage] - total - kept[stage];
    entry["temporary_peak_bytes"] = rankArena[stage] - wholeRun[stage];
    entry["persistent_bytes_per_parameter"] =
        parameters[stage] ? double(total) / double(parameters[stage]) : 0.0;
    // Frozen parameters (no rank updates them: a LoRA run's base) hold only
    // their weights; the trainable ones their gradients and optimizer state
    // too.
    if (!inference) {
      const int64_t trainable = parameters[stage] - frozen[stage];
      entry["trainable_parameters"] = trainable;
      entry["frozen_parameters"] = frozen[stage];
      entry["trainable_bytes_per_parameter"] =
          trainable ? double(total - frozenBytes[stage]) / double(trainable)
                    : 0.0;
      entry["frozen_bytes_per_parameter"] =
          frozen[stage] ? double(frozenBytes[stage]) / double(frozen[stage])
                        : 0.0;
    }
    ranks.push_back(std::move(entry));
  }
  auto arena = module->getAttrOfType<IntegerAttr>("plan.arena_bytes");
  // Evaluation (plan-eval's forward-only copies) runs in the step's arena:
  // it allocates nothing more, and touches the arena up to the end of the
  // highest buffer its functions name.
  llvm::StringMap<Operation *> byName;
  for (Operation *op : buffers)
    byName[cast<StringAttr>(op->getAttr("sym_name")).getValue()] = op;
  llvm::json::Array evalFunctions;
  int64_t evalTouched = 0;
  for (plan_ir::FuncOp fn : module.getOps<plan_ir::FuncOp>()) {
    if (!fn->hasAttr("plan.eval_of"))
      continue;
    evalFunctions.push_back(fn.getSymName().str());
    fn.walk([&](Operation *op) {
      for (StringRef list : {"inputs", "outputs"})
        if (auto refs = op->getAttrOfType<ArrayAttr>(list))
          for (Attribute ref : refs) {
            Operation *b = byName.lookup(
                cast<SymbolRefAttr>(ref).getRootReference().getValue());
            auto offset = b ? b->getAttrOfType<IntegerAttr>("offset")
                            : IntegerAttr();
            if (!offset)
              continue;
            int64_t slots = 1;
            if (auto n = b->getAttrOfType<IntegerAttr>("slots"))
              slots = n.getInt();
            evalTouched =
                std::max(evalTouched, offset.getInt() + bytesOf(b) * slots);
          }
    });
  }
  return llvm::json::Object{
      {"arena_bytes", arena ? arena.getInt() : 0},
      {"buffer_bytes_by_role", std::move(byRole)},
      {"persistent_by_rank", std::move(ranks)},
      {"evaluation",
       llvm::json::Object{{"functions", std::move(evalFunctions)},
                          {"arena_bytes", arena ? arena.getInt() : 0},
                          {"touched_bytes", evalTouched}}}};
}

/// How many times a step calls each function that runs per micro-batch:
/// micro_step, first_micro_step and last_micro_step without a pipeline, and the
/// functions of the stages' schedule calls (their chunk's, or the call's own
/// after an
/// `@`), and plan-eval's copies (0). Functions run once a step (zero_grads,
/// update) are not listed.
static llvm::StringMap<int64_t> callsPerStep(ModuleOp module,
                                             int64_t microBatches) {
  llvm::StringMap<int64_t> calls;
  bool pipelined = false;
  for (plan_ir::StageOp stage : module.getOps<plan_ir::StageOp>()) {
    pipelined = true;
    std::optional<ArrayAttr> schedule = stage.getSchedule();
    for (Attribute attr : schedule ? *schedule : ArrayAttr()) {
      FailureOr<plan_ir::ScheduleCall> call =
          plan_ir::parseScheduleCall(cast<StringAttr>(attr).getValue());
      if (failed(call))
        continue; // plan-verify refuses it
      if (std::optional<StringRef> fn = plan_ir::functionOfCall(stage, *call))
        ++calls[*fn];
    }
  }
  // plan-eval's forward-only copies run outside the steps.
  for (plan_ir::FuncOp fn : module.getOps<plan_ir::FuncOp>())
    if (fn->hasAttr("plan.eval_of"))
      calls[fn.getSymName()] = 0;
  if (!pipelined) {
    // As braid-run picks them (plan::MicroStepFunction); gather_params
    // runs outside the steps.
    bool first = false, last = false;
    for (plan_ir::FuncOp fn : module.getOps<plan_ir::FuncOp>()) {
      first |= fn.getSymName() == plan_ir::kFirstMicroStepFunc;
      last |= fn.getSymName() == plan_ir::kLastMicroStepFunc;
    }
    for (StringRef fn :
         {plan_ir::kMicroStepFunc, plan_ir::kFirstMicroStepFunc,
          plan_ir::kLastMicroStepFunc, plan_ir::kGatherParamsFunc})
      calls[fn] = 0;
    for (int64_t m = 0; m < microBatches; ++m)
      ++calls[m == 0 && first                 ? plan_ir::kFirstMicroStepFunc
              : m + 1 == microBatches && last ? plan_ir::kLastMicroStepFunc
                                              : plan_ir::kMicroStepFunc];
  }
  return calls;
}

/// The communication of the functions `inStage` picks (a pipeline stage's,
/// or all of a plan without stages).
static llvm::json::Object
communicationOf(ModuleOp module, int64_t microBatches,
                llvm::function_ref<bool(StringRef fn)> inStage) {
  // Bytes each rank contributes per step, by collective kind and group: a
  // collective counts once per call of its function in a step (micro_step
  // once per micro-batch but the first and last where first_micro_step and
  // last_micro_step run instead, gather_params never; a
  // stage's functions once per call of its schedule), the others once.
  // Point-to-point sends count as "send" along their axis.
  std::map<std::string, std::map<std::string, int64_t>> bytes;
  llvm::StringMap<Operation *> buffers;
  for (Operation &op : module.getBody()->getOperations())
    if (op.getName().getStringRef() == "plan.buffer")
      buffers[cast<StringAttr>(op.getAttr("sym_name")).getValue()] = &op;
  llvm::StringMap<int64_t> calls = callsPerStep(module, microBatches);
  module.walk([&](Operation *op) {
    if (op->getName().getStringRef() != "plan.kernel")
      return;
    StringRef fn;
    if (auto name = op->getParentOp()->getAttrOfType<StringAttr>("sym_name"))
      fn = name.getValue();
    if (!inStage(fn))
      return;
    std::string kind =
        StringRef(cast<StringAttr>(op->getAttr("kernel")).getValue()).lower();
    std::string axes;
    if (auto group = op->getAttrOfType<ArrayAttr>("group")) {
      for (Attribute axis : group)
        axes += (axes.empty() ? "" : ",") +
                cast<StringAttr>(axis).getValue().str();
    } else if (kind == "send") {
      axes = op->getAttrOfType<StringAttr>("rank_axis").getValue().str();
    } else {
      return;
    }
    auto called = calls.find(fn);
    int64_t times = called == calls.end() ? 1 : called->second;
    if (kind == "grad_norm") {
      // The norm sums one double per rank: its inputs stay local.
      bytes[kind][axes] += 8 * times;
      return;
    }
    int64_t n = 0;
    for (Attribute ref : op->getAttrOfType<ArrayAttr>("inputs")) {
      Operation *buffer =
          buffers.lookup(cast<SymbolRefAttr>(ref).getRootReference().getValue());
      auto type = cast<RankedTensorType>(
          cast<TypeAttr>(buffer->getAttr("type")).getValue());
      n += type.getNumElements() * getElementBytes(type.getElementType());
    }
    bytes[kind][axes] += n * times;
  });
  llvm::json::Object out;
  for (auto &[kind, byGroup] : bytes) {
    llvm::json::Object groups;
    for (auto &[axes, n] : byGroup)
      groups[axes] = n;
    out[kind] = std::move(groups);
  }
  return out;
}

llvm::json::Object braid::planCommunicationReport(ModuleOp module,
                                                  int64_t microBatches) {
  SmallVector<std::string> stages;
  module.walk([&](Operation *op) {
    if (op->getName().getStringRef() == "plan.stage")
      stages.push_back("stage" +
                       std::to_string(op->getAttrOfType<IntegerAttr>("index")
                                          .getInt()));
  });
  if (stages.empty())
    return communicationOf(module, microBatches,
                           [](StringRef) { return true; });
  // With pipeline stages the ranks of each stage communicate differently.
  llvm::json::Object out;
  for (const std::string &stage : stages)
    out[stage] = communicationOf(module, microBatches, [&](StringRef fn) {
      return fn.starts_with(stage + "_");
    });
  return out;
}

llvm::json::Object braid::planPipelineReport(ModuleOp module,
                                             int64_t microBatches) {
  auto costs = module->getAttrOfType<ArrayAttr>("model.pipeline");
  SmallVector<Operation *> stages;
  module.walk([&](Operation *op) {
    if (op->getName().getStringRef() == "plan.stage")
      stages.push_back(op);
  });
  llvm::json::Object out;
  // With the interleaved schedule each rank holds v chunks: the model's
  // stage c is rank c % p's chunk c / p.
  if (!costs || stages.empty() || costs.size() % stages.size() != 0)
    return out;
  int64_t v = costs.size() / stages.size();
  std::string scheme;
  if (auto s = module->getAttrOfType<StringAttr>("plan.schedule"))
    scheme = s.getValue().str();
  out["schedule"] = scheme;
  out["micro_batches"] = microBatches;
  int64_t p = stages.size();
  // The cost model: a stage's forward is a third of its FLOPs, the backward
  // two thirds (the matrix products' input and weight gradients).
  pipeline::Costs model;
  llvm::json::Array stageList;
  std::map<int64_t, int64_t> paramBytes;
  for (Operation &op : module.getBody()->getOperations())
    if (op.getName().getStringRef() == "plan.buffer" &&
        cast<StringAttr>(op.getAttr("role")).getValue() == "parameter") {
      auto type = cast<RankedTensorType>(
          cast<TypeAttr>(op.getAttr("type")).getValue());
      auto stage = op.getAttrOfType<IntegerAttr>("stage");
      paramBytes[stage ? stage.getInt() : 0] +=
          type.getNumElements() * getElementBytes(type.getElementType());
    }
  model.forward.assign(p, std::vector<double>(v, 0));
  model.backward.assign(p, std::vector<double>(v, 0));
  for (int64_t c = 0; c < int64_t(costs.size()); ++c) {
    int64_t s = c % p, k = c / p;
    auto info = cast<DictionaryAttr>(costs[c]);
    double flops = cast<FloatAttr>(info.get("flops")).getValueAsDouble();
    double recompute = 0;
    if (auto r = info.getAs<FloatAttr>("recompute_flops"))
      recompute = r.getValueAsDouble();
    model.forward[s][k] = flops / 3;
    model.backward[s][k] = 2 * flops / 3 + recompute;
    // The chunk's own slots (each chunk of a rank has its own).
    auto slots = stages[s]->getAttrOfType<IntegerAttr>("slots");
    int64_t chunkSlots = slots ? slots.getInt() : 1;
    if (auto pools = stages[s]->getAttrOfType<DenseI64ArrayAttr>("chunk_slots"))
      if (k < int64_t(pools.size()))
        chunkSlots = pools[k];
    auto arena = stages[s]->getAttrOfType<IntegerAttr>("plan.arena_bytes");
    llvm::json::Object entry{
        {"stage", s},
        {"first_layer", cast<IntegerAttr>(info.get("first_layer")).getInt()},
        {"num_layers", cast<IntegerAttr>(info.get("num_layers")).getInt()},
        {"flops_per_micro_batch", flops},
        {"recompute_flops_per_micro_batch", recompute},
        {"parameter_bytes", paramBytes[s]},
        {"slots", chunkSlots},
        {"rank_arena_bytes", arena ? arena.getInt() : 0},
    };
    if (v > 1)
      entry["chunk"] = k;
    stageList.push_back(std::move(entry));
  }
  out["stages"] = std::move(stageList);
  llvm::Expected<pipeline::Scheme> parsed = pipeline::parseScheme(scheme);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return out;
  }
  llvm::Expected<pipeline::Schedules> schedules =
      pipeline::makeSchedule(*parsed, p, microBatches, v);
  if (!schedules) {
    llvm::consumeError(schedules.takeError());
    return out;
  }
  llvm::Expected<pipeline::Timeline> timeline =
      pipeline::simulate(*schedules, p, microBatches, v, model);
  if (!timeline) {
    out["predicted"] = llvm::toString(timeline.takeError());
    return out;
  }
  llvm::json::Array bubble, peak, busy;
  for (int64_t s = 0; s < p; ++s) {
    bubble.push_back(timeline->bubble[s]);
    peak.push_back(timeline->peakInFlight[s]);
    busy.push_back(timeline->busy[s]);
  }
  out["predicted"] = llvm::json::Object{
      {"unit", "FLOP of work (uncalibrated; forward 1/3, backward 2/3 of a "
               "stage's FLOPs, plus what its backward recomputes)"},
      {"step_time", timeline->stepTime},
      {"busy_time", std::move(busy)},
      {"bubble_fraction", std::move(bubble)},
      {"peak_in_flight_micro_batches", std::move(peak)},
  };
  return out;
}

llvm::json::Value braid::buildReport(ModuleOp module,
                                     const ModelConfig &c) {

  ParameterCount params = countParameters(module);
  FlopCount flops = countFlops(module);
  llvm::json::Array perLayer;
  for (int64_t n : params.perLayer)
    perLayer.push_back(n);
  double perToken = flops.trainingPerToken();
  double attentionPerToken =
      flops.tokens ? 3.0 * flops.attentionMatmul / flops.tokens : 0.0;
  // The fields the resolver derived from others (ModelConfig.h).
  llvm::json::Array derived;
  for (const DerivedField &d : c.derivedFields)
    derived.push_back(llvm::json::Object{{"field", d.field},
                                         {"value", d.value},
                                         {"rule", d.rule},
                                         {"reason", d.reason}});
  return llvm::json::Object{
      {"model",
       llvm::json::Object{
           {"source", c.source},
           {"family", familyName(c.family)},
           {"num_layers", c.numLayers},
           {"hidden_size", c.hiddenSize},
           {"num_heads", c.numHeads},
           {"num_kv_heads", c.numKvHeads},
           {"head_dim", c.headDim},
           {"ffn_hidden_size", c.ffnHiddenSize},
           {"vocab_size", c.vocabSize},
           {"padded_vocab_size", c.paddedVocabSize},
           {"max_seq_len", c.maxSeqLen},
           {"norm", normName(c.norm)},
           {"norm_eps", c.normEps},
           {"activation", activationName(c.activation)},
           {"position_embedding", positionName(c.positionEmbedding)},
           {"rope_theta", c.ropeTheta},
           {"tie_embeddings", c.tieEmbeddings},
           {"attention_bias", c.attentionBias},
           {"mlp_bias", c.mlpBias},
           {"embedding_norm", c.embeddingNorm},
           {"fused_qkv", c.fusedQkv()},
           {"fuse_mlp", c.fuseMlp},
           {"init_std", c.initStd},
           {"hidden_dropout", c.hiddenDropout},
           {"attention_dropout", c.attentionDropout},
           {"embedding_dropout", c.embeddingDropout},
           {"derived_fields", std::move(derived)},
       }},
      {"batch",
       llvm::json::Object{
           {"micro_batch_size", c.microBatchSize},
           {"seq_length", c.seqLength},
           {"tokens", flops.tokens},
           {"dtype", dtypeName(c.dtype)},
       }},
      {"parameters",
       llvm::json::Object{
           {"total", params.total},
           {"embedding", params.embedding},
           {"outside_layers", params.outsideLayers},
           {"per_layer", std::move(perLayer)},
           {"non_embedding", params.total - params.embedding},
       }},
      {"flops",
       llvm::json::Object{
           {"forward_matmul", flops.forwardMatmul},
           {"forward_vector", flops.forwardVector},
           {"forward_attention_matmul", flops.attentionMatmul},
           {"training_per_token", perToken},
           {"training_per_token_attention", attentionPerToken},
           {"training_per_step", perToken * flops.tokens},
           {"formula", "training_per_token = 3 * forward_matmul / tokens = "
                       "6 * N_matmul + 6 * L * (s + 1) * h_attn, causal (docs/report.md)"},
       }},
  };
}
