//===- ModelVerifyForward.cpp - The forward phase's contract --------------===//
//
// Implements `model-verify-forward`: checks F1-F6 of the contract stated in
// Passes.td on the frontend's output, so that every later pass can rely on it.
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

namespace braid::model {
#define GEN_PASS_DEF_MODELVERIFYFORWARD
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

struct ModelVerifyForwardPass
    : public braid::model::impl::ModelVerifyForwardBase<ModelVerifyForwardPass> {
  void runOnOperation() override {
    if (failed(verifyModule(getOperation())))
      signalPassFailure();
  }

  static LogicalResult verifyModule(ModuleOp module);
  static LogicalResult verifyArguments(func::FuncOp func);
  static LogicalResult verifyBody(func::FuncOp func);
};

LogicalResult ModelVerifyForwardPass::verifyModule(ModuleOp module) {
  // F1: exactly one function, @forward, besides meshes.
  func::FuncOp forward;
  for (Operation &op : module.getBody()->getOperations()) {
    if (isa<MeshOp>(op))
      continue;
    auto func = dyn_cast<func::FuncOp>(op);
    if (!func)
      return op.emitError("the forward module may hold only model.mesh and "
                          "func.func @forward, found ")
             << op.getName();
    if (func.getSymName() != "forward" || forward || func.isExternal())
      return func.emitError("the forward module must hold exactly one "
                            "function, @forward, with a body; found @")
             << func.getSymName()
             << (func.isExternal() ? " without a body" : "");
    forward = func;
  }
  if (!forward)
    return module.emitError("the forward module has no func.func @forward");
  if (failed(verifyArguments(forward)))
    return failure();
  // F3: one result, the rank-0 float loss.
  ArrayRef<Type> results = forward.getFunctionType().getResults();
  auto loss = results.size() == 1 ? dyn_cast<RankedTensorType>(results[0])
                                  : RankedTensorType();
  if (!loss || loss.getRank() != 0 || !isa<FloatType>(loss.getElementType()))
    return forward.emitError("@forward must return one rank-0 float loss, "
                             "found ")
           << forward.getFunctionType();
  return verifyBody(forward);
}

LogicalResult ModelVerifyForwardPass::verifyArguments(func::FuncOp func) {
  // F2: parameters with unique names; one tokens and one targets input.
  llvm::StringSet<> names;
  BlockArgument tokens, targets, positions;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto param = func.getArgAttrOfType<StringAttr>(i, ModelDialect::kParamAttrName);
    auto input = func.getArgAttrOfType<StringAttr>(i, ModelDialect::kInputAttrName);
    if (bool(param) == bool(input))
      return func.emitError("argument ")
             << i << " must carry exactly one of model.param and model.input";
    if (param) {
      if (!names.insert(param.getValue()).second)
        return func.emitError("parameter \"")
               << param.getValue() << "\" is an argument more than once";
      // F6: every parameter is used.
      if (arg.use_empty())
        return func.emitError("parameter \"")
               << param.getValue() << "\" (argument " << i << ") is unused";
      continue;
    }
    StringRef name = input.getValue();
    if (name != "tokens" && name != "targets" && name != "positions")
      return func.emitError("argument ")
             << i << " is the unknown input \"" << name
             << "\" (the inputs are tokens, targets and positions)";
    BlockArgument &slot =
        name == "tokens" ? tokens : name == "targets" ? targets : positions;
    if (slot)
      return func.emitError("more than one argument is the \"")
             << input.getValue() << "\" input";
    slot = arg;
  }
  if (!tokens || !targets)
    return func.emitError("@forward needs one \"tokens\" and one \"targets\" "
                          "input");
  auto tokenType = dyn_cast<RankedTensorType>(tokens.getType());
  auto targetType = dyn_cast<RankedTensorType>(targets.getType());
  if (!tokenType || !targetType || tokenType.getRank() != 2 ||
      !isa<IntegerType>(tokenType.getElementType()) ||
      !isa<IntegerType>(targetType.getElementType()) ||
      tokenType.getShape() != targetType.getShape())
    return func.emitError("tokens and targets must be integer tensors of one "
                          "shape [batch, seq], found ")
           << tokens.getType() << " and " << targets.getType();
  if (positions && positions.getType() != tokens.getType())
    return func.emitError("the positions input must have the tokens' type ")
           << tokens.getType() << ", found " << positions.getType();
  return success();
}

LogicalResult ModelVerifyForwardPass::verifyBody(func::FuncOp func) {
  // F5: only model ops and the final return.
  WalkResult walk = func.getBody().walk([&](Operation *op) {
    if (isa<func::ReturnOp>(op) && op->getParentOp() == func)
      return WalkResult::advance();
    // Ops of unregistered dialects have no Dialect object.
    if (!op->getDialect() || !isa<ModelDialect>(op->getDialect())) {
      op->emitError("the forward graph may hold only model ops, found ")
          << op->getName();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // F4: layers in order 0, 1, ..., each fed by the previous one.
  int64_t expected = 0;
  LayerOp previous;
  for (auto layer : func.getBody().getOps<LayerOp>()) {
    if (layer.getIndexAttr().getInt() != expected)
      return layer.emitError("layer index is ")
             << layer.getIndexAttr().getInt() << " but layer " << expected
             << " comes next in program order";
    if (previous && (layer.getInputs().empty() ||
                     previous.getNumResults() == 0 ||
                     layer.getInputs().front() != previous.getResult(0))) {
      InFlightDiagnostic diag =
          layer.emitError("layer ")
          << expected << " must take the previous layer's result as its "
          << "first operand";
      diag.attachNote(previous.getLoc()) << "previous layer";
      return diag;
    }
    previous = layer;
    ++expected;
  }
  return success();
}

} // namespace
