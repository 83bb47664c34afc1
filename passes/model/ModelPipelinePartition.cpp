//===- ModelPipelinePartition.cpp - Pipeline stages of the step -----------===//
//
// Implements `model-pipeline-partition` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/model/Partition.h"
#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <map>

namespace braid::model {
#define GEN_PASS_DEF_MODELPIPELINEPARTITION
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

constexpr llvm::StringLiteral kStageAttr = "model.stage";

struct ModelPipelinePartitionPass
    : public braid::model::impl::ModelPipelinePartitionBase<
          ModelPipelinePartitionPass> {
  using ModelPipelinePartitionBase::ModelPipelinePartitionBase;
  void runOnOperation() override;
};

/// FLOPs of `op` and of everything nested in it.
double flopsOf(Operation *op) {
  double sum = 0;
  op->walk([&](CostOpInterface cost) {
    sum += double(cost.getMatmulFlops()) + double(cost.getVectorFlops());
  });
  return sum;
}

/// The split of `costs` (one per layer) into `stages` runs of consecutive
/// layers that minimises the largest run's cost, the first run also paying
/// `first` and the last `last`.
SmallVector<int64_t> balance(ArrayRef<double> costs, int64_t stages,
                             double first, double last) {
  int64_t n = costs.size();
  SmallVector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  return balanceStages(n, stages, [&](int64_t s, int64_t begin, int64_t end) {
    return prefix[end] - prefix[begin] + (s == 0 ? first : 0) +
           (s == stages - 1 ? last : 0);
  });
}

void ModelPipelinePartitionPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = module.getContext();
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func || func.isExternal()) {
    module.emitError("model-pipeline-partition needs a func.func @train_step "
                     "(run model-shard first)");
    return signalPassFailure();
  }
  if (pp < 1) {
    module.emitError("model-pipeline-partition: pp = ")
        << int64_t(pp) << " must be at least 1";
    return signalPassFailure();
  }
  auto mesh = module.lookupSymbol<MeshOp>("mesh");
  if (pp > 1 && (!mesh || mesh.getAxisSize("pp") != std::optional<int64_t>(pp))) {
    module.emitError("model-pipeline-partition: pp = ")
        << int64_t(pp) << " needs a model.mesh @mesh with an axis \"pp\" of "
        << "that size (run model-shard with pp)";
    return signalPassFailure();
  }
  Block &entry = func.getBody().front();
  SmallVector<LayerOp> forward, backward;
  for (LayerOp layer : entry.getOps<LayerOp>())
    (layer.getBackward() ? backward : forward).push_back(layer);
  int64_t numLayers = forward.size();
  if (vpp < 1) {
    module.emitError("model-pipeline-partition: vpp = ")
        << int64_t(vpp) << " must be at least 1";
    return signalPassFailure();
  }
  // The stages: pp x vpp virtual stages, stage c on rank c % pp.
  const int64_t ranks = pp;
  const int64_t stagesCount = pp * vpp;
  if (stagesCount > numLayers) {
    func.emitError("model-pipeline-partition: pp x vpp = ")
        << stagesCount << " is more than the " << numLayers
        << " layers: each stage needs at least one";
    return signalPassFailure();
  }
  if (pp > numLayers) {
    func.emitError("model-pipeline-partition: pp = ")
        << int64_t(pp) << " is more than the " << numLayers
        << " layers: each stage needs at least one";
    return signalPassFailure();
  }

  // The layers of each stage.
  SmallVector<double> layerCost(numLayers, 0);
  for (LayerOp layer : entry.getOps<LayerOp>())
    layerCost[layer.getIndex()] += flopsOf(layer);
  double firstCost = 0, lastCost = 0;
  {
    bool afterForward = false, afterBackward = false;
    for (Operation &op : entry.without_terminator()) {
      if (auto layer = dyn_cast<LayerOp>(&op)) {
        afterForward =
            !layer.getBackward() && int64_t(layer.getIndex()) == numLayers - 1;
        afterBackward = layer.getBackward() && layer.getIndex() == 0;
        continue;
      }
      if (isa<GradNormOp, AdamWOp, AllReduceOp>(&op) && afterBackward)
        continue; // the optimizer: every stage's own
      (afterForward ? lastCost : firstCost) += flopsOf(&op);
    }
  }
  SmallVector<int64_t> layers(stageLayers.begin(), stageLayers.end());
  if (layers.empty()) {
    layers = balance(layerCost, stagesCount, firstCost, lastCost);
  } else {
    int64_t sum = 0;
    for (int64_t n : layers) {
      if (n < 1) {
        func.emitError("model-pipeline-partition: stage-layers has a stage of ")
            << n << " layers; each needs at least one";
        return signalPassFailure();
      }
      sum += n;
    }
    if (int64_t(layers.size()) != stagesCount || sum != numLayers) {
      func.emitError("model-pipeline-partition: stage-layers lists ")
          << layers.size() << " stages of " << sum << " layers but there are "
          << stagesCount << " stages and " << numLayers << " layers";
      return signalPassFailure();
    }
  }
  SmallVector<int64_t> stageOf(numLayers);
  for (int64_t s = 0, l = 0; s < stagesCount; ++s)
    for (int64_t k = 0; k < layers[s]; ++k)
      stageOf[l++] = s;

  // Every top-level op's stage: layers by index, the optimizer by its
  // parameter, the rest with the layer before it (stage 0 before any).
  OpBuilder b(ctx);
  auto mark = [&](Operation *op, int64_t stage) {
    op->setAttr(kStageAttr, b.getI64IntegerAttr(stage));
  };
  DenseMap<Value, int64_t> paramStage;
  int64_t current = 0;
  SmallVector<AllReduceOp> reductions;
  for (Operation &op : entry.without_terminator()) {
    if (auto layer = dyn_cast<LayerOp>(&op)) {
      current = stageOf[layer.getIndex()];
      mark(&op, current);
    } else if (isa<GradNormOp>(&op)) {
      mark(&op, -1);
      continue;
    } else if (auto adamw = dyn_cast<AdamWOp>(&op)) {
      continue; // below, once every parameter's stage is known
    } else if (auto reduce = dyn_cast<AllReduceOp>(&op);
               reduce && llvm::all_of(reduce->getUsers(), [](Operation *u) {
                 return isa<GradNormOp, AdamWOp>(u);
               })) {
      reductions.push_back(reduce); // a step reduction of gradients
      continue;
    } else {
      mark(&op, current);
    }
    for (Value operand : op.getOperands())
      if (auto arg = dyn_cast<BlockArgument>(operand);
          arg && func.getArgAttr(arg.getArgNumber(),
                                 ModelDialect::kParamAttrName)) {
        // A parameter used on several stages (a tied embedding) is owned,
        // and updated, by the first.
        auto [it, inserted] = paramStage.try_emplace(arg, current);
        it->second = std::min(it->second, current);
      }
  }
  for (AdamWOp adamw : entry.getOps<AdamWOp>())
    mark(adamw, paramStage.lookup(adamw.getParam()));

  // Split each step reduction so that each stays within one stage.
  for (AllReduceOp reduce : reductions) {
    std::map<int64_t, SmallVector<unsigned>> byStage;
    for (unsigned i = 0; i < reduce.getInputs().size(); ++i) {
      int64_t stage = -1;
      for (Operation *user : reduce.getResult(i).getUsers())
        if (auto adamw = dyn_cast<AdamWOp>(user))
          stage = paramStage.lookup(adamw.getParam());
      byStage[stage].push_back(i);
    }
    if (byStage.size() == 1) {
      mark(reduce, byStage.begin()->first);
      continue;
    }
    b.setInsertionPoint(reduce);
    for (auto &[stage, indices] : byStage) {
      SmallVector<Value> inputs;
      for (unsigned i : indices)
        inputs.push_back(reduce.getInputs()[i]);
      auto part = b.create<AllReduceOp>(
          reduce.getLoc(), ValueRange(inputs).getTypes(), inputs,
          reduce.getMeshAttr(), reduce.getAxes(),
          b.getStringAttr(reduce.getReason() + " (pipeline stage " +
                          std::to_string(stage) + "'s part)"),
          reduce.getMaxAttr());
      mark(part, stage);
      for (auto [k, i] : llvm::enumerate(indices))
        reduce.getResult(i).replaceAllUsesWith(part.getResult(k));
    }
    reduce.erase();
  }

  // The stages, for the report and the plan.
  SmallVector<Attribute> stages;
  for (int64_t s = 0, l = 0; s < stagesCount; ++s) {
    double cost =
        (s == 0 ? firstCost : 0) + (s == stagesCount - 1 ? lastCost : 0);
    for (int64_t k = 0; k < layers[s]; ++k)
      cost += layerCost[l + k];
    stages.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("first_layer", b.getI64IntegerAttr(l)),
         b.getNamedAttr("num_layers", b.getI64IntegerAttr(layers[s])),
         b.getNamedAttr("flops", b.getF64FloatAttr(cost)),
         b.getNamedAttr("rank", b.getI64IntegerAttr(s % ranks)),
         b.getNamedAttr("chunk", b.getI64IntegerAttr(s / ranks))}));
    l += layers[s];
  }
  module->setAttr("model.pipeline", b.getArrayAttr(stages));
}

} // namespace
