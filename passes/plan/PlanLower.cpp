//===- PlanLower.cpp - `model` functions to `plan` programs ---------------===//
//
// Implements `plan-lower` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "dialects/model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANLOWER
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid;
using namespace braid::plan_ir;

namespace {

class Lowering {
public:
  Lowering(ModuleOp module, func::FuncOp func)
      : module(module), func(func), b(module.getContext()) {}

  LogicalResult run();

private:
  BufferOp newBuffer(Value v, StringRef role, StringRef name = {}) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(planFunc);
    auto buffer = b.create<BufferOp>(
        v.getLoc(), b.getStringAttr("b" + std::to_string(counter++)),
        TypeAttr::get(v.getType()), b.getStringAttr(role),
        name.empty() ? StringAttr() : b.getStringAttr(name), IntegerAttr());
    buffers[v] = buffer;
    return buffer;
  }
  FlatSymbolRefAttr ref(Value v) {
    return FlatSymbolRefAttr::get(buffers.lookup(v).getSymNameAttr());
  }
  void kernel(StringRef name, ArrayRef<Value> inputs, ArrayRef<Value> outputs,
              DictionaryAttr params, Location loc, StringRef provenance) {
    SmallVector<Attribute> ins, outs;
    for (Value v : inputs)
      ins.push_back(ref(v));
    for (Value v : outputs)
      outs.push_back(ref(v));
    b.create<KernelOp>(loc, b.getStringAttr(name), b.getArrayAttr(ins),
                       b.getArrayAttr(outs), params,
                       b.getStringAttr(provenance));
  }
  LogicalResult lowerBlock(Block &block, StringRef where);
  LogicalResult lowerOp(Operation *op, StringRef where);
  FailureOr<DictionaryAttr> kernelParams(Operation *op);

  ModuleOp module;
  func::FuncOp func;
  OpBuilder b;
  FuncOp planFunc;
  DenseMap<Value, BufferOp> buffers;
  unsigned counter = 0;
};

/// The kernel parameters of `op`: its inherent attributes, renamed to the
/// plan file's names, flags as 0/1, and flags that are absent as 0.
FailureOr<DictionaryAttr> Lowering::kernelParams(Operation *op) {
  SmallVector<NamedAttribute> params;
  auto add = [&](StringRef name, Attribute value) {
    params.push_back(b.getNamedAttr(name, value));
  };
  if (auto attention = dyn_cast<model::AttentionOp>(op))
    if (attention.getDropout().convertToDouble() != 0)
      return op->emitOpError("attention dropout has no kernel yet");
  if (auto attention = dyn_cast<model::AttentionGradOp>(op))
    if (attention.getDropout().convertToDouble() != 0)
      return op->emitOpError("attention dropout has no kernel yet");
  if (auto dropout = dyn_cast<model::DropoutOp>(op))
    if (!dropout.getRngId())
      return op->emitOpError("needs an rng_id to be lowered");
  for (NamedAttribute attr : op->getAttrDictionary()) {
    StringRef name = attr.getName();
    if (name.starts_with("model.") || name == "dropout")
      continue; // discardable attributes; attention dropout is 0 here
    if (name == "num_heads")
      name = "heads";
    else if (name == "num_kv_heads")
      name = "kv_heads";
    if (name == "layout") {
      add("per_head", b.getI64IntegerAttr(
                          cast<model::QkvLayoutAttr>(attr.getValue()).getValue() ==
                          model::QkvLayout::per_head));
      continue;
    }
    if (isa<UnitAttr>(attr.getValue()))
      add(name, b.getI64IntegerAttr(1));
    else if (isa<IntegerAttr, FloatAttr>(attr.getValue()))
      add(name, attr.getValue());
    else
      return op->emitOpError("attribute ")
             << name << " has no kernel parameter form";
  }
  // Flags default to 0.
  auto flag = [&](StringRef name) {
    for (NamedAttribute p : params)
      if (p.getName() == name)
        return;
    add(name, b.getI64IntegerAttr(0));
  };
  if (isa<model::LinearOp, model::LinearGradInputOp, model::LinearGradWeightOp>(op))
    flag("transpose_w");
  if (isa<model::AttentionOp, model::AttentionGradOp>(op)) {
    flag("causal");
    flag("alibi");
  }
  if (isa<model::GeluOp, model::GeluGradOp>(op))
    flag("tanh");
  return b.getDictionaryAttr(params);
}

LogicalResult Lowering::lowerOp(Operation *op, StringRef where) {
  if (auto layer = dyn_cast<model::LayerOp>(op)) {
    // Inline: the body's arguments are the operands' buffers, the results
    // the yielded values' buffers.
    Block &body = layer.getBody().front();
    for (auto [arg, input] : llvm::zip(body.getArguments(), layer.getInputs()))
      buffers[arg] = buffers.lookup(input);
    std::string name = "layer " + std::to_string(layer.getIndex()) +
                       (layer.getBackward() ? " backward" : "");
    if (failed(lowerBlock(body, name)))
      return failure();
    for (auto [result, yielded] :
         llvm::zip(layer.getResults(), body.getTerminator()->getOperands()))
      buffers[result] = buffers.lookup(yielded);
    return success();
  }
  if (!isa<model::ModelDialect>(op->getDialect()))
    return op->emitOpError("cannot be lowered to a plan kernel");
  FailureOr<DictionaryAttr> params = kernelParams(op);
  if (failed(params))
    return failure();
  std::string kernelName = op->getName().stripDialect().upper();
  std::string provenance =
      (op->getName().getStringRef() + " in " + where).str();
  SmallVector<Value> outputs(op->getResults());
  if (auto adamw = dyn_cast<model::AdamWOp>(op)) {
    // The gradient it consumes is the parameter's gradient buffer: it lives
    // for the whole step (micro-batches accumulate into it).
    BufferOp grad = buffers.lookup(adamw.getGrad());
    BufferOp param = buffers.lookup(adamw.getParam());
    if (grad.getRole() == "activation" && !grad.getName() && param.getName()) {
      grad.setRole("gradient");
      grad.setName(*param.getName());
    }
    // In place: the new parameter and moments are the old buffers.
    buffers[adamw.getNewParam()] = buffers.lookup(adamw.getParam());
    buffers[adamw.getNewM()] = buffers.lookup(adamw.getM());
    buffers[adamw.getNewV()] = buffers.lookup(adamw.getV());
  } else {
    for (Value v : outputs)
      newBuffer(v, "activation");
  }
  // Accumulating kernels start from zero.
  SmallVector<Value> accumulated;
  if (isa<model::EmbeddingGradOp, model::PositionEmbeddingGradOp,
          model::LinearGradWeightOp, model::BiasGradOp>(op))
    accumulated.push_back(op->getResult(0));
  else if (isa<model::RmsNormGradOp, model::LayerNormGradOp>(op))
    llvm::append_range(accumulated, op->getResults().drop_front());
  for (Value v : accumulated)
    kernel("ZERO", {}, {v}, b.getDictionaryAttr({}), op->getLoc(), provenance);
  kernel(kernelName, SmallVector<Value>(op->getOperands()), outputs, *params,
         op->getLoc(), provenance);
  return success();
}

LogicalResult Lowering::lowerBlock(Block &block, StringRef where) {
  for (Operation &op : block.without_terminator())
    if (failed(lowerOp(&op, where)))
      return failure();
  return success();
}

LogicalResult Lowering::run() {
  b.setInsertionPointToEnd(module.getBody());
  planFunc = b.create<FuncOp>(func.getLoc(), func.getSymNameAttr());
  planFunc.getBody().push_back(new Block());

  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (auto p = func.getArgAttrOfType<StringAttr>(i, model::ModelDialect::kParamAttrName))
      newBuffer(arg, "parameter", p.getValue());
    else if (auto s = func.getArgAttrOfType<StringAttr>(i, model::ModelDialect::kOptStateAttrName))
      newBuffer(arg, "optimizer_state", s.getValue());
    else if (auto in = func.getArgAttrOfType<StringAttr>(i, model::ModelDialect::kInputAttrName))
      newBuffer(arg, "input", in.getValue());
    else
      return func.emitError("argument ") << i << " is neither a parameter, "
                                         << "an input nor optimizer state";
  }
  b.setInsertionPointToEnd(&planFunc.getBody().front());
  if (failed(lowerBlock(func.getBody().front(), func.getSymName())))
    return failure();

  // Name the results; gradients become gradient buffers.
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    BufferOp buffer = buffers.lookup(v);
    if (!buffer)
      return ret.emitError("result ") << i << " has no buffer";
    if (buffer.getRole() != "activation")
      continue; // updated in place: already named
    StringRef name;
    if (i == 0) {
      name = "loss";
    } else if (auto g = func.getResultAttrOfType<StringAttr>(
                   i, model::ModelDialect::kGradAttrName)) {
      buffer.setRole("gradient");
      name = g.getValue();
    } else if (i == 1) {
      name = "grad_norm"; // the optimizer phase's second result
    }
    if (!name.empty())
      buffer.setName(name);
  }
  func.erase();
  return success();
}

struct PlanLowerPass : public braid::plan_ir::impl::PlanLowerBase<PlanLowerPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    if (funcs.size() != 1) {
      module.emitError("plan-lower needs exactly one model function, found ")
          << funcs.size();
      return signalPassFailure();
    }
    if (failed(Lowering(module, funcs.front()).run()))
      return signalPassFailure();
    // Meshes and model attributes stay: later passes may read them.
  }
};

} // namespace
