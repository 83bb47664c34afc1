//===- ModelRecompute.cpp - Activation recomputation ----------------------===//
//
// Implements `model-recompute` (see Passes.td) and the analysis of
// Recompute.h.
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"
#include "passes/model/Recompute.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

#include <map>

namespace braid::model {
#define GEN_PASS_DEF_MODELRECOMPUTE
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

constexpr llvm::StringLiteral kRecomputedAttr = "model.recomputed";
constexpr llvm::StringLiteral kRecomputeAttr = "model.recompute";

int64_t bytesOf(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  return shaped.getNumElements() * getElementBytes(shaped.getElementType());
}

bool isCollective(Operation *op) {
  return isa<AllReduceOp, AllGatherOp, ReduceScatterOp>(op);
}

/// A forward layer, its backward layer and what the forward saves.
struct LayerPair {
  mutable LayerOp forward, backward;
  /// The saved values inside the forward body (its yield's operands after
  /// the first), in result order.
  SmallVector<Value> saved;
};

/// The forward ops to clone so that the saved values `dropped` can be made
/// again from the layer's inputs and the saved values still kept, in
/// program order.
SmallVector<Operation *> closureOf(const LayerPair &pair,
                                   ArrayRef<unsigned> dropped) {
  llvm::DenseSet<Value> kept;
  llvm::DenseSet<unsigned> droppedSet(dropped.begin(), dropped.end());
  for (auto [i, v] : llvm::enumerate(pair.saved))
    if (!droppedSet.contains(i))
      kept.insert(v);
  llvm::SetVector<Operation *> needed;
  SmallVector<Value> worklist;
  for (unsigned i : dropped)
    worklist.push_back(pair.saved[i]);
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    if (isa<BlockArgument>(v) || kept.contains(v))
      continue;
    Operation *def = v.getDefiningOp();
    if (!needed.insert(def))
      continue;
    llvm::append_range(worklist, def->getOperands());
  }
  SmallVector<Operation *> ordered;
  for (Operation &op : pair.forward.getBody().front().without_terminator())
    if (needed.contains(&op))
      ordered.push_back(&op);
  return ordered;
}

RecomputeLevel levelOf(const LayerPair &pair, ArrayRef<int64_t> savedBytes,
                       ArrayRef<unsigned> dropped) {
  RecomputeLevel level;
  level.dropped.assign(dropped.begin(), dropped.end());
  llvm::sort(level.dropped);
  llvm::DenseSet<unsigned> droppedSet(dropped.begin(), dropped.end());
  for (auto [i, bytes] : llvm::enumerate(savedBytes))
    if (!droppedSet.contains(i))
      level.keptBytes += bytes;
  for (Operation *op : closureOf(pair, dropped)) {
    if (auto cost = dyn_cast<CostOpInterface>(op)) {
      level.flops += double(cost.getMatmulFlops()) + double(cost.getVectorFlops());
      level.matmul |= cost.getMatmulFlops() > 0;
    }
    level.collective |= isCollective(op);
  }
  return level;
}

/// The forward/backward layer pairs of @train_step, checked against the
/// layout model-autodiff makes.
FailureOr<SmallVector<LayerPair>> layerPairs(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func || func.isExternal()) {
    module.emitError("model-recompute needs func.func @train_step (after "
                     "model-autodiff)");
    return failure();
  }
  std::map<int64_t, LayerOp> forwards, backwards;
  for (auto layer : func.getBody().front().getOps<LayerOp>())
    (layer.getBackward() ? backwards : forwards)[layer.getIndex()] = layer;
  SmallVector<LayerPair> pairs;
  for (auto [index, forward] : forwards) {
    auto it = backwards.find(index);
    if (it == backwards.end())
      continue; // never differentiated: nothing is saved for it
    LayerOp backward = it->second;
    unsigned inputs = forward.getInputs().size();
    unsigned saved = forward.getNumResults() - 1;
    if (backward.getInputs().size() != 1 + inputs + saved) {
      backward.emitOpError("has ")
          << backward.getInputs().size() << " operands; model-recompute "
          << "expects dy, the forward layer's " << inputs
          << " operands and its " << saved << " saved activations";
      return failure();
    }
    for (unsigned i = 0; i < inputs; ++i)
      if (backward.getInputs()[1 + i] != forward.getInputs()[i]) {
        backward.emitOpError("operand ")
            << 1 + i << " is not operand " << i << " of forward layer "
            << index;
        return failure();
      }
    for (unsigned i = 0; i < saved; ++i)
      if (backward.getInputs()[1 + inputs + i] != forward.getResult(1 + i)) {
        backward.emitOpError("operand ")
            << 1 + inputs + i << " is not result " << 1 + i
            << " of forward layer " << index;
        return failure();
      }
    LayerPair pair{forward, backward, {}};
    Operation *yield = forward.getBody().front().getTerminator();
    for (Value v : yield->getOperands().drop_front())
      pair.saved.push_back(v);
    pairs.push_back(pair);
  }
  return pairs;
}

LayerRecompute analyze(const LayerPair &pair, func::FuncOp func) {
  LayerRecompute info;
  info.layer = pair.forward.getIndex();
  if (auto stage = pair.forward->getAttrOfType<IntegerAttr>("model.stage"))
    info.stage = stage.getInt();
  for (Value input : pair.forward.getInputs()) {
    auto arg = dyn_cast<BlockArgument>(input);
    bool param = arg && arg.getOwner() == &func.getBody().front() &&
                 func.getArgAttr(arg.getArgNumber(), ModelDialect::kParamAttrName);
    if (!param)
      info.inputBytes += bytesOf(input.getType());
  }
  for (Value v : pair.saved) {
    int64_t bytes = bytesOf(v.getType());
    // A kept attention output keeps its log-sum-exp with it: plan-lower
    // saves one per batch, head and query for the backward (f32 beside
    // bf16 or f16), in the same buffer's lifetime.
    if (auto attention = v.getDefiningOp<AttentionOp>()) {
      auto q = cast<RankedTensorType>(attention.getQ().getType());
      Type element = q.getElementType();
      int64_t elementBytes = element.isBF16() || element.isF16()
                                 ? 4
                                 : (element.getIntOrFloatBitWidth() + 7) / 8;
      bytes += q.getDimSize(0) * int64_t(attention.getNumHeads()) *
               q.getDimSize(1) * elementBytes;
    }
    info.savedBytes.push_back(bytes);
    Operation *def = v.getDefiningOp();
    info.savedNames.push_back(def ? def->getName().getStringRef().str()
                                  : std::string("argument"));
  }
  // Greedy nested levels: each drops one more value, the one whose
  // recomputation adds the fewest FLOPs per byte freed.
  SmallVector<unsigned> dropped;
  info.levels.push_back(levelOf(pair, info.savedBytes, dropped));
  llvm::DenseSet<unsigned> left;
  for (unsigned i = 0; i < pair.saved.size(); ++i)
    left.insert(i);
  while (!left.empty()) {
    double bestRatio = 0;
    std::optional<unsigned> best;
    RecomputeLevel bestLevel;
    SmallVector<unsigned> order(left.begin(), left.end());
    llvm::sort(order);
    for (unsigned i : order) {
      SmallVector<unsigned> trial = dropped;
      trial.push_back(i);
      RecomputeLevel level = levelOf(pair, info.savedBytes, trial);
      double added = level.flops - info.levels.back().flops;
      double ratio = added / double(std::max<int64_t>(info.savedBytes[i], 1));
      if (!best || ratio < bestRatio) {
        best = i;
        bestRatio = ratio;
        bestLevel = level;
      }
    }
    dropped.push_back(*best);
    left.erase(*best);
    info.levels.push_back(bestLevel);
  }
  // Selective: each value whose recomputation (the others kept) is cheap.
  SmallVector<unsigned> cheap;
  for (unsigned i = 0; i < pair.saved.size(); ++i) {
    RecomputeLevel alone = levelOf(pair, info.savedBytes, {i});
    if (!alone.matmul && !alone.collective)
      cheap.push_back(i);
  }
  info.selective = levelOf(pair, info.savedBytes, cheap);
  return info;
}

/// Rewrites `pair` so that the saved values `dropped` are recomputed at the
/// start of the backward layer; returns the new forward layer.
LayerOp recompute(LayerPair &pair, ArrayRef<unsigned> dropped) {
  if (dropped.empty())
    return pair.forward;
  LayerOp forward = pair.forward, backward = pair.backward;
  unsigned inputs = forward.getInputs().size();
  Block &fwdBody = forward.getBody().front();
  Block &bwdBody = backward.getBody().front();
  llvm::DenseSet<unsigned> droppedSet(dropped.begin(), dropped.end());

  // 1. Clone what makes the dropped values at the start of the backward.
  IRMapping map;
  for (unsigned i = 0; i < inputs; ++i)
    map.map(fwdBody.getArgument(i), bwdBody.getArgument(1 + i));
  for (auto [i, v] : llvm::enumerate(pair.saved))
    if (!droppedSet.contains(i))
      map.map(v, bwdBody.getArgument(1 + inputs + i));
  OpBuilder builder = OpBuilder::atBlockBegin(&bwdBody);
  for (Operation *op : closureOf(pair, dropped)) {
    Operation *clone = builder.clone(*op, map);
    clone->setAttr(kRecomputedAttr, builder.getUnitAttr());
  }

  // 2. The backward reads the clones and loses the dropped operands.
  for (unsigned i = pair.saved.size(); i-- > 0;) {
    if (!droppedSet.contains(i))
      continue;
    BlockArgument arg = bwdBody.getArgument(1 + inputs + i);
    arg.replaceAllUsesWith(map.lookup(pair.saved[i]));
    bwdBody.eraseArgument(arg.getArgNumber());
    backward.getInputsMutable().erase(1 + inputs + i);
  }

  // 3. The forward no longer yields them.
  Operation *yield = fwdBody.getTerminator();
  SmallVector<Value> yielded = {yield->getOperand(0)};
  SmallVector<Type> types = {forward.getResult(0).getType()};
  SmallVector<Value> oldResults = {forward.getResult(0)};
  SmallVector<Value> keptSaved;
  for (auto [i, v] : llvm::enumerate(pair.saved))
    if (!droppedSet.contains(i)) {
      yielded.push_back(v);
      types.push_back(v.getType());
      oldResults.push_back(forward.getResult(1 + i));
      keptSaved.push_back(v);
    }
  yield->setOperands(yielded);
  OpBuilder before(forward);
  auto rebuilt = before.create<LayerOp>(forward.getLoc(), forward.getIndex(),
                                        types, forward.getInputs());
  rebuilt.getBody().takeBody(forward.getBody());
  for (NamedAttribute attr : forward->getDiscardableAttrs())
    rebuilt->setAttr(attr.getName(), attr.getValue());
  for (auto [old, now] : llvm::zip(oldResults, rebuilt.getResults()))
    old.replaceAllUsesWith(now);
  forward.erase();
  pair.forward = rebuilt;
  pair.saved = keptSaved;
  return rebuilt;
}

struct ModelRecomputePass
    : public braid::model::impl::ModelRecomputeBase<ModelRecomputePass> {
  using ModelRecomputeBase::ModelRecomputeBase;
  void runOnOperation() override;
};

void ModelRecomputePass::runOnOperation() {
  ModuleOp module = getOperation();
  if (mode != "none" && mode != "selective" && mode != "full" &&
      mode != "levels") {
    module.emitError("model-recompute: mode \"")
        << mode << "\" is not one of none, selective, full, levels";
    return signalPassFailure();
  }
  FailureOr<SmallVector<LayerPair>> pairs = layerPairs(module);
  if (failed(pairs))
    return signalPassFailure();
  if (mode == "levels" && levels.size() != pairs->size()) {
    module.emitError("model-recompute: levels has ")
        << levels.size() << " entries but the step has " << pairs->size()
        << " differentiated layers";
    return signalPassFailure();
  }
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  Builder b(module.getContext());
  SmallVector<Attribute> report;
  std::map<int64_t, double> flopsByStage;
  for (auto [n, pair] : llvm::enumerate(*pairs)) {
    LayerRecompute info = analyze(pair, func);
    RecomputeLevel chosen = info.levels.front();
    std::string choice = mode;
    if (mode == "selective")
      chosen = info.selective;
    else if (mode == "full")
      chosen = info.levels.back();
    else if (mode == "levels") {
      int64_t level = levels[n];
      if (level < 0 || level >= int64_t(info.levels.size())) {
        pair.forward.emitOpError("model-recompute: level ")
            << level << " is not in [0, " << info.levels.size() << ")";
        return signalPassFailure();
      }
      chosen = info.levels[level];
      choice = "level " + std::to_string(level) + " of " +
               std::to_string(info.levels.size() - 1);
    }
    SmallVector<Attribute> dropped, kept;
    llvm::DenseSet<unsigned> droppedSet(chosen.dropped.begin(),
                                        chosen.dropped.end());
    for (unsigned i = 0; i < info.savedNames.size(); ++i)
      (droppedSet.contains(i) ? dropped : kept)
          .push_back(b.getStringAttr(info.savedNames[i]));
    report.push_back(b.getDictionaryAttr({
        b.getNamedAttr("layer", b.getI64IntegerAttr(info.layer)),
        b.getNamedAttr("choice", b.getStringAttr(choice)),
        b.getNamedAttr("input_bytes", b.getI64IntegerAttr(info.inputBytes)),
        b.getNamedAttr("kept_bytes", b.getI64IntegerAttr(chosen.keptBytes)),
        b.getNamedAttr("saved_bytes",
                       b.getI64IntegerAttr(info.levels.front().keptBytes)),
        b.getNamedAttr("recompute_flops", b.getF64FloatAttr(chosen.flops)),
        b.getNamedAttr("kept", b.getArrayAttr(kept)),
        b.getNamedAttr("recomputed", b.getArrayAttr(dropped)),
    }));
    flopsByStage[info.stage] += chosen.flops;
    recompute(pair, chosen.dropped);
  }
  module->setAttr(kRecomputeAttr, b.getArrayAttr(report));

  // The pipeline's stage costs include what their backward recomputes.
  if (auto stages = module->getAttrOfType<ArrayAttr>("model.pipeline")) {
    SmallVector<Attribute> updated;
    for (auto [s, attr] : llvm::enumerate(stages)) {
      auto info = cast<DictionaryAttr>(attr);
      NamedAttrList entries(info);
      entries.set("recompute_flops",
                  b.getF64FloatAttr(flopsByStage[int64_t(s)]));
      updated.push_back(entries.getDictionary(module.getContext()));
    }
    module->setAttr("model.pipeline", b.getArrayAttr(updated));
  }
}

} // namespace

FailureOr<std::vector<LayerRecompute>>
braid::model::analyzeRecompute(ModuleOp module) {
  FailureOr<SmallVector<LayerPair>> pairs = layerPairs(module);
  if (failed(pairs))
    return failure();
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  std::vector<LayerRecompute> out;
  for (const LayerPair &pair : *pairs)
    out.push_back(analyze(pair, func));
  return out;
}
