//===- ModelAutodiff.cpp - Reverse-mode differentiation -------------------===//
//
// Implements `model-autodiff` (see Passes.td): @forward becomes @train_step,
// which returns the loss and one gradient per trainable parameter. Ops are
// differentiated through GradientOpInterface, in reverse program order;
// layers are differentiated inside their region and the backward half is
// moved into a `model.layer backward`, the activations it needs becoming
// extra results of the forward layer.
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

#include <map>

namespace braid::model {
#define GEN_PASS_DEF_MODELAUTODIFF
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

/// Gradients of the values of one block, summed as contributions arrive.
class GradientMap {
public:
  explicit GradientMap(OpBuilder &builder) : builder(builder) {}

  Value lookup(Value v) const { return grads.lookup(v); }

  void accumulate(Value v, Value grad, Location loc) {
    Value &slot = grads[v];
    slot = slot ? builder.create<AddOp>(loc, slot, grad).getResult() : grad;
  }

private:
  OpBuilder &builder;
  DenseMap<Value, Value> grads;
};

/// Differentiates the ops of `ops` (in program order) in reverse, reading and
/// adding to `grads`; layers go to `differentiateLayer`.
LogicalResult
differentiateOps(ArrayRef<Operation *> ops, GradientMap &grads,
                 OpBuilder &builder,
                 function_ref<LogicalResult(LayerOp, Value)> differentiateLayer) {
  for (Operation *op : llvm::reverse(ops)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value result : op->getResults()) {
      resultGrads.push_back(grads.lookup(result));
      any |= bool(resultGrads.back());
    }
    if (!any)
      continue; // does not reach the loss
    if (auto layer = dyn_cast<LayerOp>(op)) {
      if (failed(differentiateLayer(layer, resultGrads.front())))
        return failure();
      continue;
    }
    for (auto [i, grad] : llvm::enumerate(resultGrads))
      if (!grad)
        return op->emitOpError("result ")
               << i << " gets no gradient while the others do; "
               << "model-autodiff needs all or none";
    auto differentiable = dyn_cast<GradientOpInterface>(op);
    if (!differentiable)
      return op->emitOpError("has no gradient (GradientOpInterface)");
    SmallVector<Value> operandGrads;
    if (failed(differentiable.buildGradients(builder, resultGrads,
                                             operandGrads)))
      return failure();
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (grad)
        grads.accumulate(operand, grad, op->getLoc());
  }
  return success();
}

/// True for a tensor of integers (token ids, positions): no gradient.
bool isIndexTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<IntegerType>(tensor.getElementType());
}

/// Erases the ops of `block` (not its terminator) whose results nobody
/// reads, last first, so that what fed only them goes too. Model ops have
/// no side effects before model-shard adds collectives.
bool eraseUnread(Block &block) {
  bool erased = false;
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops)) {
    if (isa<LayerOp>(op) || !op->use_empty())
      continue;
    op->erase();
    erased = true;
  }
  return erased;
}

/// `layer` remade with only the results `keep` (in order), its body moved
/// into it and its yield cut to match; the uses of the kept results move to
/// the new layer's.
LayerOp keepResults(LayerOp layer, ArrayRef<unsigned> keep) {
  OpBuilder b(layer);
  SmallVector<Type> types;
  for (unsigned i : keep)
    types.push_back(layer.getResult(i).getType());
  auto kept = b.create<LayerOp>(layer.getLoc(), layer.getIndex(), types,
                                layer.getInputs());
  kept.setBackward(layer.getBackward());
  kept.getBody().takeBody(layer.getBody());
  Operation *yield = kept.getBody().front().getTerminator();
  SmallVector<Value> yielded;
  for (unsigned i : keep)
    yielded.push_back(yield->getOperand(i));
  yield->setOperands(yielded);
  for (auto [k, i] : llvm::enumerate(keep))
    layer.getResult(i).replaceAllUsesWith(kept.getResult(k));
  layer.erase();
  return kept;
}

/// Removes from @train_step what computes only gradients nobody reads:
/// with frozen parameters, their gradients are not returned, so the ops
/// that make them (a frozen linear's weight gradient, a frozen embedding's
/// scatter), the backward layers' results for them (and for an input whose
/// gradient reaches nothing trainable, as layer 0's hidden state below a
/// frozen embedding), and the activations a forward layer saved only for
/// those go. Backward layers keep their operands in the order
/// `model.layer` states, less the saved activations they no longer read.
void pruneUnreadGradients(func::FuncOp func) {
  Block &entry = func.getBody().front();
  for (bool changed = true; changed;) {
    changed = eraseUnread(entry);
    std::map<int64_t, LayerOp> forwards, backwards;
    for (LayerOp layer : llvm::to_vector(entry.getOps<LayerOp>()))
      (layer.getBackward() ? backwards : forwards)[layer.getIndex()] = layer;
    for (auto [index, backward] : backwards) {
      SmallVector<unsigned> keep;
      for (OpResult result : backward->getResults())
        if (!result.use_empty())
          keep.push_back(result.getResultNumber());
      if (keep.size() != backward.getNumResults()) {
        backward = keepResults(backward, keep);
        changed = true;
      }
      changed |= eraseUnread(backward.getBody().front());
      // The saved activations (operands after dy and the forward's
      // operands) the body no longer reads.
      auto fwdIt = forwards.find(index);
      if (fwdIt == forwards.end())
        continue;
      LayerOp forward = fwdIt->second;
      Block &bwdBody = backward.getBody().front();
      const unsigned first = 1 + forward.getInputs().size();
      SmallVector<unsigned> savedKept = {0};
      for (unsigned k = forward.getNumResults(); k-- > 1;) {
        unsigned operand = first + k - 1;
        if (operand < bwdBody.getNumArguments() &&
            bwdBody.getArgument(operand).use_empty()) {
          backward.getInputsMutable().erase(operand);
          bwdBody.eraseArgument(operand);
          changed = true;
        }
      }
      for (unsigned r = 1; r < forward.getNumResults(); ++r)
        if (!forward.getResult(r).use_empty())
          savedKept.push_back(r);
      if (savedKept.size() != forward.getNumResults()) {
        forward = keepResults(forward, savedKept);
        eraseUnread(forward.getBody().front());
        changed = true;
      }
    }
  }
}

struct ModelAutodiffPass
    : public braid::model::impl::ModelAutodiffBase<ModelAutodiffPass> {
  void runOnOperation() override;

  /// Differentiates `layer` given the gradient `dy` of its first result; the
  /// backward layer is built at `outer`'s insertion point and the gradients
  /// of the layer's operands are added to `outerGrads`.
  LogicalResult differentiateLayer(LayerOp layer, Value dy, OpBuilder &outer,
                                   GradientMap &outerGrads);
};

LogicalResult ModelAutodiffPass::differentiateLayer(LayerOp layer, Value dy,
                                                    OpBuilder &outer,
                                                    GradientMap &outerGrads) {
  if (layer.getNumResults() != 1)
    return layer.emitOpError("model-autodiff expects a forward layer with one "
                             "result, found ")
           << layer.getNumResults();
  Block &body = layer.getBody().front();
  Operation *yield = body.getTerminator();
  SmallVector<Operation *> forwardOps;
  for (Operation &op : body.without_terminator())
    forwardOps.push_back(&op);

  // 1. Differentiate inside the forward body, seeded by a temporary block
  // argument standing for dy; the backward ops land before the yield.
  BlockArgument dyArg = body.addArgument(dy.getType(), layer.getLoc());
  OpBuilder inner(yield);
  GradientMap grads(inner);
  grads.accumulate(yield->getOperand(0), dyArg, layer.getLoc());
  auto noNestedLayers = [](LayerOp nested, Value) -> LogicalResult {
    return nested.emitOpError("layers cannot nest");
  };
  if (failed(differentiateOps(forwardOps, grads, inner, noNestedLayers)))
    return failure();
  // Every float operand gets a gradient; index operands (the positions of
  // packed documents) have none, and the backward layer yields nothing for
  // them.
  SmallVector<Value> inputGrads;
  SmallVector<unsigned> differentiable;
  for (unsigned i = 0, e = layer.getInputs().size(); i < e; ++i) {
    Value grad = grads.lookup(body.getArgument(i));
    if (!grad && isIndexTensor(body.getArgument(i).getType()))
      continue;
    if (!grad)
      return layer.emitOpError("operand ")
             << i << " gets no gradient from the layer's body";
    inputGrads.push_back(grad);
    differentiable.push_back(i);
  }

  // 2. The backward ops are those after the forward ones; the forward values
  // they use (other than block arguments) are saved activations.
  llvm::DenseSet<Operation *> forwardSet(forwardOps.begin(), forwardOps.end());
  SmallVector<Operation *> backwardOps;
  for (Operation &op : body.without_terminator())
    if (!forwardSet.contains(&op))
      backwardOps.push_back(&op);
  llvm::SetVector<Value> saved;
  for (Operation *op : backwardOps)
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp(); def && forwardSet.contains(def))
        saved.insert(operand);

  // 3. A new forward layer that also yields the saved activations.
  SmallVector<Type> forwardTypes = {layer.getResult(0).getType()};
  for (Value v : saved)
    forwardTypes.push_back(v.getType());
  OpBuilder before(layer);
  auto forward = before.create<LayerOp>(layer.getLoc(), layer.getIndex(),
                                        forwardTypes, layer.getInputs());
  forward.getBody().takeBody(layer.getBody());
  layer.getResult(0).replaceAllUsesWith(forward.getResult(0));
  layer.erase();

  // 4. The backward layer: operands dy, the forward operands, the saved
  // activations; it yields the gradients of the forward operands.
  SmallVector<Value> backwardInputs = {dy};
  llvm::append_range(backwardInputs, forward.getInputs());
  llvm::append_range(backwardInputs, forward.getResults().drop_front());
  SmallVector<Type> gradTypes;
  for (unsigned i : differentiable)
    gradTypes.push_back(forward.getInputs()[i].getType());
  auto backward = outer.create<LayerOp>(forward.getLoc(), forward.getIndex(),
                                        gradTypes, backwardInputs);
  backward.setBackward(true);
  Block &bwdBody = backward.getBody().front();
  IRMapping map;
  map.map(dyArg, bwdBody.getArgument(0));
  for (unsigned i = 0, e = forward.getInputs().size(); i < e; ++i)
    map.map(body.getArgument(i), bwdBody.getArgument(1 + i));
  for (auto [i, v] : llvm::enumerate(saved))
    map.map(v, bwdBody.getArgument(1 + forward.getInputs().size() + i));
  for (Operation *op : backwardOps) {
    op->moveBefore(&bwdBody, bwdBody.end());
    for (OpOperand &operand : op->getOpOperands())
      if (Value mapped = map.lookupOrNull(operand.get()))
        operand.set(mapped);
  }
  SmallVector<Value> bwdYield;
  for (Value grad : inputGrads)
    bwdYield.push_back(map.lookupOrDefault(grad));
  OpBuilder::atBlockEnd(&bwdBody).create<YieldOp>(forward.getLoc(), bwdYield);

  // 5. The forward body yields the saved activations and loses dy.
  Block &fwdBody = forward.getBody().front();
  Operation *fwdYield = fwdBody.getTerminator();
  SmallVector<Value> yielded = {fwdYield->getOperand(0)};
  llvm::append_range(yielded, saved);
  fwdYield->setOperands(yielded);
  fwdBody.eraseArgument(dyArg.getArgNumber());

  for (auto [i, grad] : llvm::zip(differentiable, backward.getResults()))
    outerGrads.accumulate(forward.getInputs()[i], grad, forward.getLoc());
  return success();
}

void ModelAutodiffPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func || func.isExternal()) {
    module.emitError("model-autodiff needs a func.func @forward with a body");
    return signalPassFailure();
  }
  Block &entry = func.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  Value loss = ret.getOperand(0);

  // The seed of the backward pass: d(result)/d(loss), given by the caller.
  OpBuilder attrs(func.getContext());
  unsigned lossGradIndex = func.getNumArguments();
  func.insertArgument(
      lossGradIndex, loss.getType(),
      attrs.getDictionaryAttr(attrs.getNamedAttr(
          ModelDialect::kInputAttrName, attrs.getStringAttr("loss_grad"))),
      func.getLoc());
  BlockArgument lossGrad = entry.getArgument(lossGradIndex);
  SmallVector<Operation *> ops;
  for (Operation &op : entry.without_terminator())
    ops.push_back(&op);

  OpBuilder builder(ret);
  GradientMap grads(builder);
  grads.accumulate(loss, lossGrad, func.getLoc());
  auto layerFn = [&](LayerOp layer, Value dy) {
    return differentiateLayer(layer, dy, builder, grads);
  };
  if (failed(differentiateOps(ops, grads, builder, layerFn)))
    return signalPassFailure();

  // Results: the loss, then each trainable parameter's gradient in
  // parameter order (a frozen one gets none).
  SmallVector<Value> results = {loss};
  SmallVector<Attribute> resultAttrs = {builder.getDictionaryAttr({})};
  bool frozen = false;
  for (BlockArgument arg : entry.getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  ModelDialect::kParamAttrName);
    if (!name)
      continue;
    if (func.getArgAttr(arg.getArgNumber(), ModelDialect::kFrozenAttrName)) {
      frozen = true;
      continue;
    }
    Value grad = grads.lookup(arg);
    if (!grad) {
      func.emitError("parameter \"")
          << name.getValue() << "\" gets no gradient from the loss";
      return signalPassFailure();
    }
    results.push_back(grad);
    resultAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        ModelDialect::kGradAttrName, name)));
  }
  auto newRet = builder.create<func::ReturnOp>(ret.getLoc(), results);
  ret.erase();
  // (Pruning remakes layers: the return's operands, not `results`, are the
  // values it returns after.)
  if (frozen)
    pruneUnreadGradients(func);

  func.setSymName("train_step");
  func.setFunctionType(builder.getFunctionType(
      entry.getArgumentTypes(), newRet.getOperandTypes()));
  func.setAllResultAttrs(resultAttrs);
}

} // namespace
