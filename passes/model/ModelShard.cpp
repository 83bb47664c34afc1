//===- ModelShard.cpp - The training step of one rank of a mesh -----------===//
//
// Implements `model-shard` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace braid::model {
#define GEN_PASS_DEF_MODELSHARD
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

constexpr llvm::StringLiteral kMeshName = "mesh";

struct ModelShardPass : public braid::model::impl::ModelShardBase<ModelShardPass> {
  using ModelShardBase::ModelShardBase;
  void runOnOperation() override;
};

int64_t bytesOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
}

void ModelShardPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (dp < 1 || tp < 1) {
    module.emitError("model-shard: dp = ")
        << int64_t(dp) << " and tp = " << int64_t(tp)
                                           << " must be at least 1";
    return signalPassFailure();
  }
  if (tp > 1) {
    module.emitError("model-shard: tensor parallelism (tp = ")
        << int64_t(tp) << ") is not supported yet";
    return signalPassFailure();
  }
  if (bucketBytes < 1) {
    module.emitError("model-shard: bucket-bytes = ")
        << int64_t(bucketBytes) << " must be at least 1";
    return signalPassFailure();
  }
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func || func.isExternal()) {
    module.emitError("model-shard needs a func.func @train_step (run "
                     "model-optimizer first)");
    return signalPassFailure();
  }
  if (module.lookupSymbol(kMeshName)) {
    module.emitError("model-shard: the module already has a symbol @")
        << kMeshName;
    return signalPassFailure();
  }
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  b.setInsertionPointToStart(module.getBody());
  b.create<MeshOp>(module.getLoc(), b.getStringAttr(kMeshName),
                   b.getStrArrayAttr({"dp", "tp"}),
                   b.getDenseI64ArrayAttr({dp, tp}));
  auto meshRef = FlatSymbolRefAttr::get(ctx, kMeshName);

  // The batch dimension of the data inputs is split along dp.
  Block &entry = func.getBody().front();
  for (BlockArgument arg : entry.getArguments()) {
    auto input = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                   ModelDialect::kInputAttrName);
    if (!input || (input.getValue() != "tokens" && input.getValue() != "targets"))
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
    dims[0] = b.getStrArrayAttr({"dp"});
    func.setArgAttr(arg.getArgNumber(), ModelDialect::kShardingAttrName,
                    ShardingAttr::get(ctx, meshRef, b.getArrayAttr(dims),
                                      b.getArrayAttr({})));
  }
  if (dp == 1)
    return;

  // The gradients the optimizer reads, in the order backward makes them.
  auto norms = entry.getOps<GradNormOp>();
  if (norms.empty()) {
    func.emitError("model-shard needs the optimizer's model.grad_norm");
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

  // Buckets of at most bucketBytes (a larger gradient alone), each reduced
  // just before the optimizer.
  b.setInsertionPoint(norm);
  auto paramName = [&](AdamWOp update) -> std::string {
    auto arg = dyn_cast<BlockArgument>(update.getParam());
    StringAttr name = arg ? func.getArgAttrOfType<StringAttr>(
                                arg.getArgNumber(), ModelDialect::kParamAttrName)
                          : StringAttr();
    return name ? name.getValue().str() : std::string("?");
  };
  size_t begin = 0;
  while (begin < order.size()) {
    size_t end = begin;
    int64_t bytes = 0;
    while (end < order.size() &&
           (end == begin ||
            bytes + bytesOf(updates[order[end]].getGrad()) <= bucketBytes))
      bytes += bytesOf(updates[order[end++]].getGrad());
    SmallVector<Value> grads;
    SmallVector<Location> locs;
    for (size_t k = begin; k < end; ++k) {
      grads.push_back(updates[order[k]].getGrad());
      locs.push_back(grads.back().getLoc());
    }
    std::string reason = "model-shard: data-parallel sum of the gradient";
    reason += end - begin > 1 ? "s of " : " of ";
    reason += paramName(updates[order[begin]]);
    if (end - begin > 1)
      reason += " .. " + paramName(updates[order[end - 1]]) + " (" +
                std::to_string(end - begin) + " tensors, " +
                std::to_string(bytes) + " bytes)";
    auto reduce = b.create<AllReduceOp>(
        b.getFusedLoc(locs), ValueRange(grads).getTypes(), grads, meshRef,
        b.getStrArrayAttr({"dp"}), b.getStringAttr(reason));
    // The optimizer (norm and update) reads the sums.
    for (auto [grad, sum] : llvm::zip(grads, reduce.getResults()))
      grad.replaceUsesWithIf(sum, [&](OpOperand &use) {
        return isa<GradNormOp, AdamWOp>(use.getOwner());
      });
    begin = end;
  }
}

} // namespace
