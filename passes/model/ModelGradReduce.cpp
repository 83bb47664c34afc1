//===- ModelGradReduce.cpp - The gradients summed over the mesh -----------===//
//
// Implements `model-grad-reduce` (see Passes.td): the sums of the gradients
// the optimizer reads, over dp and, for those that model-shard's tensor
// parallelism left partial (model.sharding with `partial = {"tp"}` on the
// op that makes them), over tp, in buckets, before the optimizer.
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace braid::model {
#define GEN_PASS_DEF_MODELGRADREDUCE
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {


struct ModelGradReducePass
    : public braid::model::impl::ModelGradReduceBase<ModelGradReducePass> {
  using ModelGradReduceBase::ModelGradReduceBase;
  void runOnOperation() override;
};

int64_t bytesOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
}

/// The model.sharding model-shard stated for `v`, the result of an op (a
/// single sharding, or one per result), or null.
ShardingAttr shardingOf(Value v) {
  auto result = dyn_cast<OpResult>(v);
  if (!result)
    return {};
  Attribute attr = result.getOwner()->getAttr(ModelDialect::kShardingAttrName);
  if (auto list = dyn_cast_or_null<ArrayAttr>(attr))
    return result.getResultNumber() < list.size()
               ? dyn_cast<ShardingAttr>(list[result.getResultNumber()])
               : ShardingAttr();
  return dyn_cast_or_null<ShardingAttr>(attr);
}

void ModelGradReducePass::runOnOperation() {
  ModuleOp module = getOperation();
  if (bucketBytes < 1) {
    module.emitError("model-grad-reduce: bucket-bytes = ")
        << int64_t(bucketBytes) << " must be at least 1";
    return signalPassFailure();
  }
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func || func.isExternal()) {
    module.emitError("model-grad-reduce needs a func.func @train_step (run "
                     "model-shard first)");
    return signalPassFailure();
  }
  auto mesh = module.lookupSymbol<MeshOp>(kMeshName);
  if (!mesh) {
    module.emitError("model-grad-reduce needs the model.mesh @")
        << kMeshName << " that model-shard declares";
    return signalPassFailure();
  }
  int64_t dp = mesh.getAxisSize("dp").value_or(1);
  MLIRContext *ctx = module.getContext();
  auto meshRef = FlatSymbolRefAttr::get(ctx, kMeshName);
  OpBuilder b(ctx);

  // The gradients the optimizer reads, in the order backward makes them.
  Block &entry = func.getBody().front();
  auto norms = entry.getOps<GradNormOp>();
  if (norms.empty()) {
    func.emitError("model-grad-reduce needs the optimizer's model.grad_norm");
    return signalPassFailure();
  }
  GradNormOp norm = *norms.begin();
  SmallVector<AdamWOp> updates(entry.getOps<AdamWOp>());
  SmallVector<unsigned> order(updates.size());
  for (unsigned i = 0; i < order.size(); ++i)
    order[i] = i;
  auto producer = [&](unsigned i) {
    Operation *def = updates[i].getGrad().getDefiningOp();
    return def ? entry.findAncestorOpInBlock(*def) : nullptr;
  };
  llvm::stable_sort(order, [&](unsigned x, unsigned y) {
    Operation *a = producer(x), *c = producer(y);
    return a && c && a != c && a->isBeforeInBlock(c);
  });

  // Each gradient is summed over dp, and over tp when tensor parallelism
  // left it partial.
  DenseSet<Operation *> partialOverTp;
  SetVector<Operation *> marked;
  for (AdamWOp update : updates)
    if (ShardingAttr sharding = shardingOf(update.getGrad())) {
      marked.insert(update.getGrad().getDefiningOp());
      if (llvm::is_contained(
              sharding.getPartial().getAsValueRange<StringAttr>(), kTp))
        partialOverTp.insert(update);
    }
  auto axesOf = [&](AdamWOp update) {
    SmallVector<StringRef> axes;
    if (dp > 1)
      axes.push_back("dp");
    if (partialOverTp.contains(update))
      axes.push_back(kTp);
    return axes;
  };

  // Buckets of at most bucketBytes (a larger gradient alone) of gradients
  // summed over the same axes, each reduced just before the optimizer. The
  // reasons name model-shard, which made these sums before they were a
  // pass of their own (they become the kernels' provenance in the plan).
  b.setInsertionPoint(norm);
  auto paramName = [&](AdamWOp update) -> std::string {
    auto arg = dyn_cast<BlockArgument>(update.getParam());
    StringAttr name = arg ? func.getArgAttrOfType<StringAttr>(
                                arg.getArgNumber(), ModelDialect::kParamAttrName)
                          : StringAttr();
    return name ? name.getValue().str() : std::string("?");
  };
  for (SmallVector<StringRef> axes :
       {SmallVector<StringRef>{"dp"}, SmallVector<StringRef>{"dp", kTp},
        SmallVector<StringRef>{kTp}}) {
    SmallVector<unsigned> group;
    for (unsigned i : order)
      if (axesOf(updates[i]) == axes)
        group.push_back(i);
    std::string what = axes.size() == 2 ? "data- and tensor-parallel"
                       : axes[0] == "dp" ? "data-parallel"
                                         : "tensor-parallel";
    size_t begin = 0;
    while (begin < group.size()) {
      size_t end = begin;
      int64_t bytes = 0;
      while (end < group.size() &&
             (end == begin ||
              bytes + bytesOf(updates[group[end]].getGrad()) <= bucketBytes))
        bytes += bytesOf(updates[group[end++]].getGrad());
      SmallVector<Value> grads;
      SmallVector<Location> locs;
      for (size_t k = begin; k < end; ++k) {
        grads.push_back(updates[group[k]].getGrad());
        locs.push_back(grads.back().getLoc());
      }
      std::string reason = "model-shard: " + what + " sum of the gradient";
      reason += end - begin > 1 ? "s of " : " of ";
      reason += paramName(updates[group[begin]]);
      if (end - begin > 1)
        reason += " .. " + paramName(updates[group[end - 1]]) + " (" +
                  std::to_string(end - begin) + " tensors, " +
                  std::to_string(bytes) + " bytes)";
      if (llvm::is_contained(axes, kTp))
        reason += "; partial over tp: replicated, used by split computations";
      auto reduce = b.create<AllReduceOp>(
          b.getFusedLoc(locs), ValueRange(grads).getTypes(), grads, meshRef,
          b.getStrArrayAttr(axes), b.getStringAttr(reason), UnitAttr());
      // The optimizer (norm and update) reads the sums.
      for (auto [grad, sum] : llvm::zip(grads, reduce.getResults()))
        grad.replaceUsesWithIf(sum, [&](OpOperand &use) {
          return isa<GradNormOp, AdamWOp>(use.getOwner());
        });
      begin = end;
    }
  }

  // The sums are made: the marks, read, go.
  for (Operation *op : marked)
    op->removeAttr(ModelDialect::kShardingAttrName);
}

} // namespace
