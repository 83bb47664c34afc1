//===- ModelVerifyTrainStep.cpp - The autodiff phase's contract -----------===//
//
// Implements `model-verify-train-step`: checks T1-T5 of the contract stated
// in Passes.td on the output of model-autodiff.
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallSet.h"

namespace braid::model {
#define GEN_PASS_DEF_MODELVERIFYTRAINSTEP
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

bool isRankZeroFloat(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() == 0 &&
         isa<FloatType>(tensor.getElementType());
}

LogicalResult verifyTrainStep(ModuleOp module) {
  // T1: one function, @train_step, besides meshes.
  func::FuncOp step;
  for (Operation &op : module.getBody()->getOperations()) {
    if (isa<MeshOp>(op))
      continue;
    auto func = dyn_cast<func::FuncOp>(op);
    if (!func || func.getSymName() != "train_step" || step || func.isExternal())
      return op.emitError("the train-step module may hold only model.mesh and "
                          "one func.func @train_step with a body");
    step = func;
  }
  if (!step)
    return module.emitError("the train-step module has no func.func @train_step");

  // T2: parameters and exactly one tokens, targets and loss_grad input.
  SmallVector<BlockArgument> params;
  llvm::SmallSet<StringRef, 3> inputs;
  for (BlockArgument arg : step.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (step.getArgAttr(i, ModelDialect::kParamAttrName)) {
      // A frozen parameter gets no gradient.
      if (!step.getArgAttr(i, ModelDialect::kFrozenAttrName))
        params.push_back(arg);
      continue;
    }
    auto input = step.getArgAttrOfType<StringAttr>(i, ModelDialect::kInputAttrName);
    if (!input || !inputs.insert(input.getValue()).second)
      return step.emitError("argument ")
             << i << " must be a parameter or a distinct data input";
    if (input.getValue() == "loss_grad" && !isRankZeroFloat(arg.getType()))
      return step.emitError("the loss_grad input must be a rank-0 float, found ")
             << arg.getType();
  }
  for (StringRef name : {"tokens", "targets", "loss_grad"})
    if (!inputs.contains(name))
      return step.emitError("@train_step has no \"") << name << "\" input";

  // T3: loss, then one gradient per trainable parameter, in order.
  ArrayRef<Type> results = step.getFunctionType().getResults();
  if (results.size() != params.size() + 1 || !isRankZeroFloat(results[0]))
    return step.emitError("@train_step must return the loss and ")
           << params.size() << " gradients (one per parameter not "
           << "model.frozen), found " << results.size() << " results";
  for (auto [k, param] : llvm::enumerate(params)) {
    unsigned r = k + 1;
    auto grad = step.getResultAttrOfType<StringAttr>(r, ModelDialect::kGradAttrName);
    auto name = step.getArgAttrOfType<StringAttr>(param.getArgNumber(),
                                                  ModelDialect::kParamAttrName);
    if (!grad || grad != name)
      return step.emitError("result ")
             << r << " must be the gradient of \"" << name.getValue() << "\"";
    if (results[r] != param.getType())
      return step.emitError("the gradient of \"")
             << name.getValue() << "\" is " << results[r]
             << " but the parameter is " << param.getType();
  }

  // T4: forward layers ascending, then backward layers descending, paired.
  SmallVector<LayerOp> forward, backward;
  for (auto layer : step.getBody().getOps<LayerOp>()) {
    if (layer.getBackward()) {
      backward.push_back(layer);
      continue;
    }
    if (!backward.empty())
      return layer.emitError("forward layer ")
             << layer.getIndex() << " comes after a backward layer";
    forward.push_back(layer);
  }
  if (forward.size() != backward.size())
    return step.emitError("@train_step has ")
           << forward.size() << " forward and " << backward.size()
           << " backward layers";
  for (size_t i = 0; i < forward.size(); ++i) {
    LayerOp f = forward[i], b = backward[backward.size() - 1 - i];
    if (f.getIndex() != i || b.getIndex() != i)
      return b.emitError("backward layer ")
             << b.getIndex() << " does not pair with forward layer "
             << f.getIndex() << " (expected index " << i << ")";
  }

  // T5: only model ops and the final return.
  WalkResult walk = step.getBody().walk([&](Operation *op) {
    if (isa<func::ReturnOp>(op) && op->getParentOp() == step)
      return WalkResult::advance();
    if (!op->getDialect() || !isa<ModelDialect>(op->getDialect())) {
      op->emitError("the train step may hold only model ops, found ")
          << op->getName();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

struct ModelVerifyTrainStepPass
    : public braid::model::impl::ModelVerifyTrainStepBase<
          ModelVerifyTrainStepPass> {
  void runOnOperation() override {
    if (failed(verifyTrainStep(getOperation())))
      signalPassFailure();
  }
};

} // namespace
