//===- TensorParallel.cpp - model-shard's propagation of layouts ----------===//
//
// The engine of TensorParallel.h: the walk, the parameters' decisions, and
// the collectives that resolve partial sums and sequence slices. What an op
// does with its operands' layouts is its rule's (TensorParallelRules.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/model/TensorParallel.h"
#include "passes/model/TensorParallelRules.h"

using namespace mlir;
using namespace braid::model;

namespace {
constexpr llvm::StringLiteral kTp = "tp";
} // namespace

TensorParallel::TensorParallel(func::FuncOp func, int64_t tp, bool sp,
                               FlatSymbolRefAttr mesh)
    : func(func), tpSize(tp), seqParallel(sp), b(func.getContext()),
      meshRef(mesh) {}

LogicalResult TensorParallel::unsupported(Operation *op, const Twine &why) {
  return op->emitOpError("cannot be split over tp = ") << tpSize << ": " << why;
}

std::string TensorParallel::paramName(Value v) const {
  BlockArgument p = paramOf(v);
  if (!p)
    return "?";
  auto name = func::FuncOp(func).getArgAttrOfType<StringAttr>(
      p.getArgNumber(), ModelDialect::kParamAttrName);
  return name ? name.getValue().str() : "?";
}

LogicalResult TensorParallel::setLayout(Value v, Layout layout, Operation *at) {
  FailureOr<Type> type = localType(v.getType(), layout, tpSize, at, "its value");
  if (failed(type))
    return failure();
  v.setType(*type);
  layouts[v] = layout;
  return success();
}

LogicalResult TensorParallel::decide(Value v, Layout layout, Operation *at) {
  BlockArgument p = paramOf(v);
  if (decided.contains(p)) {
    if (!layouts.lookup(p).sameAs(layout))
      return unsupported(at, "parameter " + paramName(v) +
                                 " is used with two different splits");
    return success();
  }
  FailureOr<Type> type =
      localType(p.getType(), layout, tpSize, at, "parameter " + paramName(v));
  if (failed(type))
    return failure();
  decided.insert(p);
  for (Value use : bound[p]) {
    use.setType(*type);
    layouts[use] = layout;
  }
  return success();
}

bool TensorParallel::isSeq(Value v) const {
  Layout l = layouts.lookup(v);
  return seqParallel && l.isSplit() && l.dim == 1 &&
         cast<RankedTensorType>(v.getType()).getRank() >= 3;
}

AllReduceOp TensorParallel::createAllReduce(Location loc, Value v,
                                            StringRef reason, bool max) {
  auto reduce = b.create<AllReduceOp>(loc, TypeRange{v.getType()},
                                      ValueRange{v}, meshRef,
                                      b.getStrArrayAttr({kTp}),
                                      b.getStringAttr(reason),
                                      max ? b.getUnitAttr() : UnitAttr());
  layouts[reduce.getResult(0)] = Layout();
  return reduce;
}

Value TensorParallel::createSliceCollective(Location loc, Value v, bool gather,
                                            StringRef reason) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[1] = gather ? shape[1] * tpSize : shape[1] / tpSize;
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  auto axes = b.getStrArrayAttr({kTp});
  Value r;
  if (gather)
    r = b.create<AllGatherOp>(loc, resultType, v, meshRef, axes,
                              b.getI64IntegerAttr(1), b.getStringAttr(reason));
  else
    r = b.create<ReduceScatterOp>(loc, resultType, v, meshRef, axes,
                                  b.getI64IntegerAttr(1),
                                  b.getStringAttr(reason));
  layouts[r] = gather ? Layout() : Layout::split(1);
  return r;
}

Value TensorParallel::whole(Value v, Operation *user) {
  Layout l = layouts.lookup(v);
  if (!l.isPartial() && !isSeq(v))
    return v;
  if (Value r = wholeOf.lookup(v))
    if (r.getParentBlock() == user->getBlock())
      return r;
  b.setInsertionPoint(user);
  std::string forUser = ", for " + user->getName().getStringRef().str();
  Value r;
  if (l.isPartial()) {
    r = createAllReduce(v.getLoc(), v,
                        "model-shard: tensor-parallel sum of the partial " +
                            l.why + forUser)
            .getResult(0);
  } else {
    r = createSliceCollective(
        v.getLoc(), v, /*gather=*/true,
        "model-shard: sequence-parallel gather of the sequence slices" +
            forUser);
  }
  wholeOf[v] = r;
  return r;
}

Value TensorParallel::seqSlice(Value v, Operation *user) {
  if (!layouts.lookup(v).isPartial())
    return v;
  if (Value r = sliceOf.lookup(v))
    if (r.getParentBlock() == user->getBlock())
      return r;
  b.setInsertionPoint(user);
  Value r = createSliceCollective(
      v.getLoc(), v, /*gather=*/false,
      "model-shard: sequence-parallel sum of the partial " +
          layouts.lookup(v).why + ", each rank keeping its sequence slice, for " +
          user->getName().getStringRef().str());
  sliceOf[v] = r;
  return r;
}

void TensorParallel::resolveOperands(Operation *op) {
  for (OpOperand &operand : op->getOpOperands())
    operand.set(whole(operand.get(), op));
}

void TensorParallel::reduceNow(Value v, Operation *op) {
  b.setInsertionPointAfter(op);
  std::string why = layouts[v].why;
  Value sum =
      seqParallel
          ? createSliceCollective(op->getLoc(), v, /*gather=*/false,
                                  "model-shard: sequence-parallel sum of the " +
                                      why + ", each rank keeping its sequence "
                                            "slice")
          : createAllReduce(op->getLoc(), v,
                            "model-shard: tensor-parallel sum of the " + why)
                .getResult(0);
  v.replaceAllUsesExcept(sum, sum.getDefiningOp());
}

LogicalResult TensorParallel::visitLayer(LayerOp layer) {
  Block &body = layer.getBody().front();
  for (auto [arg, input] : llvm::zip(body.getArguments(), layer.getInputs())) {
    arg.setType(input.getType());
    // Copied first: inserting arg may grow the map and move input's entry.
    Layout l = layouts.lookup(input);
    layouts[arg] = l;
    if (BlockArgument p = paramOf(input)) {
      params[arg] = p;
      bound[p].push_back(arg);
    }
  }
  if (failed(visitBlock(body)))
    return failure();
  for (auto [result, yielded] :
       llvm::zip(layer.getResults(), body.getTerminator()->getOperands())) {
    result.setType(yielded.getType());
    Layout l = layouts.lookup(yielded);
    layouts[result] = l;
  }
  return success();
}

LogicalResult TensorParallel::visit(Operation *op) {
  if (isa<AllReduceOp>(op))
    return success(); // inserted by this pass
  if (auto layer = dyn_cast<LayerOp>(op))
    return visitLayer(layer);
  if (isa<YieldOp, func::ReturnOp>(op))
    return success();
  auto rule = dyn_cast<TensorParallelOpInterface>(op);
  // Parameters read in any other role than those a rule decides (a linear's
  // weight, an embedding's table) stay whole.
  if (!rule || !rule.decidesParameters())
    for (Value operand : op->getOperands())
      if (undecided(operand) && failed(decide(operand, Layout(), op)))
        return failure();
  if (!rule)
    return unsupported(op, "model-shard has no tensor-parallel rule for it");
  return rule.shardOverTp(*this);
}

LogicalResult TensorParallel::visitBlock(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(block))
    if (failed(visit(&op)))
      return failure();
  return success();
}

LogicalResult TensorParallel::run() {
  Block &entry = func.getBody().front();
  for (BlockArgument arg : entry.getArguments()) {
    layouts[arg] = Layout();
    if (func.getArgAttr(arg.getArgNumber(), ModelDialect::kParamAttrName)) {
      params[arg] = arg;
      bound[arg].push_back(arg);
    }
  }
  if (failed(visitBlock(entry)))
    return failure();
  func.setType(FunctionType::get(func.getContext(), entry.getArgumentTypes(),
                                 entry.getTerminator()->getOperandTypes()));
  return success();
}
