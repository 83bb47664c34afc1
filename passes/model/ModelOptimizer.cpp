//===- ModelOptimizer.cpp - Clipping and AdamW in the training step -------===//
//
// Implements `model-optimizer` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace braid::model {
#define GEN_PASS_DEF_MODELOPTIMIZER
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

struct ModelOptimizerPass
    : public braid::model::impl::ModelOptimizerBase<ModelOptimizerPass> {
  using ModelOptimizerBase::ModelOptimizerBase;
  void runOnOperation() override;
};

void ModelOptimizerPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func || func.isExternal()) {
    module.emitError("model-optimizer needs a func.func @train_step (run "
                     "model-autodiff first)");
    return signalPassFailure();
  }
  Block &entry = func.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());

  // The parameters it updates: all but the frozen ones.
  SmallVector<BlockArgument> params;
  SmallVector<StringAttr> names;
  for (BlockArgument arg : entry.getArguments())
    if (auto name = func.getArgAttrOfType<StringAttr>(
            arg.getArgNumber(), ModelDialect::kParamAttrName);
        name &&
        !func.getArgAttr(arg.getArgNumber(), ModelDialect::kFrozenAttrName)) {
      params.push_back(arg);
      names.push_back(name);
    }
  if (ret.getNumOperands() != params.size() + 1) {
    func.emitError("@train_step must return the loss and one gradient per "
                   "parameter not model.frozen before model-optimizer");
    return signalPassFailure();
  }
  if (params.empty()) {
    func.emitError("@train_step has no trainable parameters (arguments "
                   "marked model.param and not model.frozen): there is "
                   "nothing to optimize");
    return signalPassFailure();
  }
  SmallVector<Value> grads(ret.getOperands().drop_front());

  OpBuilder b(func.getContext());
  Type paramElement = cast<ShapedType>(params.front().getType()).getElementType();
  // Scalars in f32, or f64 when the model computes in f64.
  Type scalar = RankedTensorType::get(
      {}, paramElement.isF64() ? paramElement : Type(b.getF32Type()));
  Type stepType = RankedTensorType::get({}, b.getI64Type());

  // New arguments: the moments of every parameter, then lr and step,
  // inserted at once (one at a time rebuilds the function type and the
  // argument attributes per argument, quadratic in the parameters).
  SmallVector<unsigned> indices;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<Location> locs;
  auto addArg = [&](Type type, StringRef attrName, StringRef value) {
    indices.push_back(func.getNumArguments());
    types.push_back(type);
    argAttrs.push_back(
        b.getDictionaryAttr(b.getNamedAttr(attrName, b.getStringAttr(value))));
    locs.push_back(func.getLoc());
  };
  for (auto [param, name] : llvm::zip(params, names))
    addArg(param.getType(), ModelDialect::kOptStateAttrName,
           ("exp_avg:" + name.getValue()).str());
  for (auto [param, name] : llvm::zip(params, names))
    addArg(param.getType(), ModelDialect::kOptStateAttrName,
           ("exp_avg_sq:" + name.getValue()).str());
  addArg(scalar, ModelDialect::kInputAttrName, "lr");
  addArg(stepType, ModelDialect::kInputAttrName, "step");
  unsigned first = func.getNumArguments();
  func.insertArguments(indices, types, argAttrs, locs);
  auto added = entry.getArguments().drop_front(first);
  SmallVector<Value> exp(added.take_front(params.size()));
  SmallVector<Value> expSq(
      added.drop_front(params.size()).take_front(params.size()));
  Value lr = added[2 * params.size()];
  Value step = added[2 * params.size() + 1];

  b.setInsertionPoint(ret);
  Location loc = ret.getLoc();
  auto norm = b.create<GradNormOp>(loc, TypeRange{scalar, scalar}, grads,
                                   b.getF64FloatAttr(maxGradNorm),
                                   /*mesh=*/FlatSymbolRefAttr(),
                                   /*axes=*/ArrayAttr(),
                                   /*replicated=*/DenseBoolArrayAttr());
  SmallVector<Value> newParams, newExp, newExpSq;
  for (auto [i, param] : llvm::enumerate(params)) {
    // No decay for biases and norm weights (rank 1), as Megatron.
    double wd = cast<ShapedType>(param.getType()).getRank() >= 2 ? weightDecay
                                                                  : 0.0;
    auto update = b.create<AdamWOp>(
        loc, TypeRange{param.getType(), param.getType(), param.getType()},
        param, grads[i], exp[i], expSq[i], lr, step, norm.getScale(),
        b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
        b.getF64FloatAttr(eps), b.getF64FloatAttr(wd));
    newParams.push_back(update.getNewParam());
    newExp.push_back(update.getNewM());
    newExpSq.push_back(update.getNewV());
  }

  // Results: loss, gradient norm, new parameters, new moments.
  SmallVector<Value> results = {ret.getOperand(0), norm.getNorm()};
  SmallVector<Attribute> attrs = {b.getDictionaryAttr({}),
                                  b.getDictionaryAttr({})};
  auto named = [&](StringRef attr, const std::string &value) {
    return b.getDictionaryAttr(b.getNamedAttr(attr, b.getStringAttr(value)));
  };
  for (auto [v, name] : llvm::zip(newParams, names)) {
    results.push_back(v);
    attrs.push_back(named(ModelDialect::kParamAttrName, name.getValue().str()));
  }
  for (auto [v, name] : llvm::zip(newExp, names)) {
    results.push_back(v);
    attrs.push_back(named(ModelDialect::kOptStateAttrName,
                          "exp_avg:" + name.getValue().str()));
  }
  for (auto [v, name] : llvm::zip(newExpSq, names)) {
    results.push_back(v);
    attrs.push_back(named(ModelDialect::kOptStateAttrName,
                          "exp_avg_sq:" + name.getValue().str()));
  }
  b.create<func::ReturnOp>(loc, results);
  ret.erase();
  func.setFunctionType(b.getFunctionType(entry.getArgumentTypes(),
                                         ValueRange(results).getTypes()));
  func.setAllResultAttrs(attrs);
}

} // namespace
