//===- ModelShard.cpp - The training step of one rank of a mesh -----------===//
//
// Implements `model-shard` (see Passes.td): the mesh, the data inputs split
// along dp, and tensor parallelism, the local program of a tp rank: shapes,
// attributes and tp collectives. The gradients' sums over dp (and over tp
// for those tensor parallelism leaves partial) are `model-grad-reduce`'s,
// which runs next.
//
// Tensor parallelism is made of three parts: the layout lattice
// (Layout.h), the engine that propagates layouts through the step
// (TensorParallel.h), and the rule of each op (TensorParallelRules.cpp,
// attached to the `model` ops as TensorParallelOpInterface).
//
// With sequence parallelism the whole values between blocks become sequence
// slices (a split of dimension 1): the forward's partial sums are
// reduce-scattered into them, and ops that need whole values all-gather
// them first.
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"
#include "passes/model/TensorParallel.h"
#include "passes/model/TensorParallelRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace braid::model {
#define GEN_PASS_DEF_MODELSHARD
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {


struct ModelShardPass : public braid::model::impl::ModelShardBase<ModelShardPass> {
  using ModelShardBase::ModelShardBase;
  void runOnOperation() override;
};

/// Marks the gradients the optimizer reads that tensor parallelism left
/// partial over tp (a replicated parameter used by split computations):
/// the op that makes one states the sharding of its results
/// (`model.sharding`, with `partial = {"tp"}` on those), which
/// model-grad-reduce reads.
void markPartialGradients(func::FuncOp func, TensorParallel &engine) {
  for (auto update : func.getBody().front().getOps<AdamWOp>()) {
    Value grad = update.getGrad();
    Operation *def = grad.getDefiningOp();
    if (!def || !engine.layout(grad).isPartial() ||
        def->hasAttr(ModelDialect::kShardingAttrName))
      continue;
    SmallVector<Attribute> shardings;
    for (Value r : def->getResults()) {
      auto type = dyn_cast<RankedTensorType>(r.getType());
      shardings.push_back(shardingOf(engine.layout(r), engine.mesh(), kTp,
                                     type ? type.getRank() : 0));
    }
    def->setAttr(ModelDialect::kShardingAttrName,
                 shardings.size() == 1
                     ? shardings.front()
                     : ArrayAttr::get(func.getContext(), shardings));
  }
}

void ModelShardPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (dp < 1 || tp < 1) {
    module.emitError("model-shard: dp = ")
        << int64_t(dp) << " and tp = " << int64_t(tp)
                                           << " must be at least 1";
    return signalPassFailure();
  }
  // A training step, or an inference graph (buildGenerateModule), whose
  // prefill, decode and reorder split the same way.
  bool inference = module->hasAttr("model.generate");
  auto func = module.lookupSymbol<func::FuncOp>(inference ? "generate"
                                                          : "train_step");
  if (!func || func.isExternal()) {
    module.emitError(inference
                         ? "model-shard needs the inference graph's "
                           "func.func @generate"
                         : "model-shard needs a func.func @train_step (run "
                           "model-optimizer first)");
    return signalPassFailure();
  }
  if (inference && (dp > 1 || pp > 1 || sp)) {
    module.emitError("model-shard: an inference graph splits over tp only "
                     "(dp = ")
        << int64_t(dp) << ", pp = " << int64_t(pp) << ", sp = " << bool(sp)
        << ")";
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
  if (pp < 1) {
    module.emitError("model-shard: pp = ") << int64_t(pp) << " must be at least 1";
    return signalPassFailure();
  }
  // Pipeline stages are the major axis: a stage's dp x tp ranks neighbour.
  if (pp > 1)
    b.create<MeshOp>(module.getLoc(), b.getStringAttr(kMeshName),
                     b.getStrArrayAttr({"pp", "dp", kTp}),
                     b.getDenseI64ArrayAttr({pp, dp, tp}));
  else
    b.create<MeshOp>(module.getLoc(), b.getStringAttr(kMeshName),
                     b.getStrArrayAttr({"dp", kTp}),
                     b.getDenseI64ArrayAttr({dp, tp}));
  auto meshRef = FlatSymbolRefAttr::get(ctx, kMeshName);

  // The arguments' attributes, set in one go at the end (one at a time,
  // each would copy the whole list).
  Block &entry = func.getBody().front();
  SmallVector<NamedAttrList> argAttrs;
  for (BlockArgument arg : entry.getArguments())
    argAttrs.emplace_back(func.getArgAttrDict(arg.getArgNumber()));
  bool changed = false;

  // The batch dimension of the data inputs is split along dp.
  for (BlockArgument arg : entry.getArguments()) {
    auto input = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                   ModelDialect::kInputAttrName);
    if (!input || (input.getValue() != "tokens" &&
                   input.getValue() != "targets" &&
                   input.getValue() != "positions"))
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
    dims[0] = b.getStrArrayAttr({"dp"});
    argAttrs[arg.getArgNumber()].set(
        ModelDialect::kShardingAttrName,
        ShardingAttr::get(ctx, meshRef, b.getArrayAttr(dims),
                          b.getArrayAttr({})));
    changed = true;
  }

  if (sp && tp < 2) {
    module.emitError("model-shard: sequence parallelism splits the sequence "
                     "over tp, which needs tp > 1 (tp = ")
        << int64_t(tp) << ")";
    return signalPassFailure();
  }
  if (tp > 1) {
    std::optional<RegisteredOperationName> linear =
        RegisteredOperationName::lookup(LinearOp::getOperationName(), ctx);
    if (!linear || !linear->hasInterface<TensorParallelOpInterface>()) {
      module.emitError("model-shard: the tensor-parallel rules of the model "
                       "ops are not registered (braid::model::"
                       "registerTensorParallelRules)");
      return signalPassFailure();
    }
    TensorParallel engine(func, tp, sp, meshRef);
    if (failed(engine.run()))
      return signalPassFailure();
    // The shardings of the split arguments.
    for (BlockArgument arg : entry.getArguments()) {
      Layout l = engine.layout(arg);
      if (!l.isSplit())
        continue;
      NamedAttrList &attrs = argAttrs[arg.getArgNumber()];
      attrs.set(ModelDialect::kShardingAttrName,
                shardingOf(l, meshRef, kTp,
                           cast<RankedTensorType>(arg.getType()).getRank()));
      if (!l.blocks.empty())
        attrs.set(ModelDialect::kShardBlocksAttrName,
                  b.getDenseI64ArrayAttr(l.blocks));
      changed = true;
    }
    markPartialGradients(func, engine);
  }
  if (changed)
    func.setAllArgAttrs(llvm::map_to_vector(
        argAttrs, [&](NamedAttrList &attrs) { return attrs.getDictionary(ctx); }));
}

} // namespace
