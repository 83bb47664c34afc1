//===- ModelGradients.cpp - Vector-Jacobian products of forward ops -------===//
//
// GradientOpInterface for every forward op: the backward ops that compute
// its operands' gradients from its results' gradients (docs/Rationale-
// Training.md has the table). Gradients have the types of the values they
// are gradients of.
//
//===----------------------------------------------------------------------===//

#include "dialects/model/ModelDialect.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace braid::model;

LogicalResult EmbeddingOp::buildGradients(OpBuilder &b, ValueRange dy,
                                          SmallVectorImpl<Value> &grads) {
  grads.assign(2, Value());
  grads[0] = b.create<EmbeddingGradOp>(getLoc(), getTable().getType(), dy[0],
                                       getIds(), getVocabAxisAttr());
  return success();
}

LogicalResult PositionEmbeddingOp::buildGradients(OpBuilder &b, ValueRange dy,
                                                  SmallVectorImpl<Value> &grads) {
  grads.assign(getNumOperands(), Value());
  grads[0] = b.create<PositionEmbeddingGradOp>(getLoc(), getTable().getType(),
                                               dy[0], getPositions(),
                                               getSeqAxisAttr());
  return success();
}

LogicalResult LinearOp::buildGradients(OpBuilder &b, ValueRange dy,
                                       SmallVectorImpl<Value> &grads) {
  grads.assign(getNumOperands(), Value());
  grads[0] = b.create<LinearGradInputOp>(getLoc(), getX().getType(), dy[0],
                                         getWeight(), getTransposeW());
  grads[1] = b.create<LinearGradWeightOp>(getLoc(), getWeight().getType(),
                                          getX(), dy[0], getTransposeW());
  if (Value bias = getBias())
    grads[2] = b.create<BiasGradOp>(getLoc(), bias.getType(), dy[0]);
  return success();
}

LogicalResult AttentionOp::buildGradients(OpBuilder &b, ValueRange dy,
                                          SmallVectorImpl<Value> &grads) {
  // Attention dropout needs the forward mask in backward; the runtime does
  // not draw it yet, so a graph with it is refused rather than mistrained.
  if (getDropout().convertToDouble() != 0)
    return emitOpError("attention dropout (")
           << getDropout().convertToDouble()
           << ") cannot be differentiated yet; set model.attention_dropout "
              "to 0";
  grads.assign(getNumOperands(), Value());
  auto grad = b.create<AttentionGradOp>(
      getLoc(), TypeRange{getQ().getType(), getK().getType(), getV().getType()},
      getQ(), getK(), getV(), getResult(), dy[0], getPositions(),
      getNumHeadsAttr(),
      getNumKvHeadsAttr(), getScaleAttr(), getCausalAttr(), getAlibiAttr(),
      getDropoutAttr(), getHeadAxisAttr(), getGlobalHeadsAttr(),
      getGlobalKvHeadsAttr());
  llvm::copy(grad.getResults(), grads.begin());
  return success();
}

LogicalResult QkvSplitOp::buildGradients(OpBuilder &b, ValueRange dy,
                                         SmallVectorImpl<Value> &grads) {
  grads.assign(1, b.create<QkvConcatOp>(getLoc(), getQkv().getType(), dy[0],
                                        dy[1], dy[2], getNumHeadsAttr(),
                                        getNumKvHeadsAttr(), getHeadDimAttr(),
                                        getLayoutAttr()));
  return success();
}

LogicalResult RmsNormOp::buildGradients(OpBuilder &b, ValueRange dy,
                                        SmallVectorImpl<Value> &grads) {
  auto grad = b.create<RmsNormGradOp>(
      getLoc(), TypeRange{getX().getType(), getWeight().getType()}, getX(),
      getWeight(), dy[0], getEpsAttr());
  grads.assign(grad.getResults().begin(), grad.getResults().end());
  return success();
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &b, ValueRange dy,
                                          SmallVectorImpl<Value> &grads) {
  auto grad = b.create<LayerNormGradOp>(
      getLoc(),
      TypeRange{getX().getType(), getWeight().getType(), getBias().getType()},
      getX(), getWeight(), dy[0], getEpsAttr());
  grads.assign(grad.getResults().begin(), grad.getResults().end());
  return success();
}

LogicalResult RopeOp::buildGradients(OpBuilder &b, ValueRange dy,
                                     SmallVectorImpl<Value> &grads) {
  grads.assign(getNumOperands(), Value());
  grads[0] = b.create<RopeGradOp>(getLoc(), getX().getType(), dy[0],
                                  getPositions(), getHeadDimAttr(),
                                  getThetaAttr());
  return success();
}

LogicalResult SwigluOp::buildGradients(OpBuilder &b, ValueRange dy,
                                       SmallVectorImpl<Value> &grads) {
  SmallVector<Type, 2> types = {getGate().getType()};
  if (getUp())
    types.push_back(getUp().getType());
  auto grad = b.create<SwigluGradOp>(getLoc(), types, getGate(), getUp(),
                                     dy[0]);
  grads.assign(grad.getResults().begin(), grad.getResults().end());
  return success();
}

LogicalResult GeluOp::buildGradients(OpBuilder &b, ValueRange dy,
                                     SmallVectorImpl<Value> &grads) {
  grads.assign(1, b.create<GeluGradOp>(getLoc(), getX().getType(), getX(),
                                       dy[0], getTanhAttr()));
  return success();
}

LogicalResult AddOp::buildGradients(OpBuilder &, ValueRange dy,
                                    SmallVectorImpl<Value> &grads) {
  // The gradient flows unchanged to both operands.
  grads.assign(2, dy[0]);
  return success();
}

LogicalResult ScaleOp::buildGradients(OpBuilder &b, ValueRange dy,
                                      SmallVectorImpl<Value> &grads) {
  // Linear: dx = dy · scale, the same op on the output gradient.
  grads.assign(1, b.create<ScaleOp>(getLoc(), dy[0].getType(), dy[0],
                                    getScaleAttr()));
  return success();
}

LogicalResult DropoutOp::buildGradients(OpBuilder &b, ValueRange dy,
                                        SmallVectorImpl<Value> &grads) {
  // The same mask and scale, drawn again from the same key.
  auto grad = b.create<DropoutOp>(getLoc(), dy[0].getType(), dy[0],
                                  getRateAttr(), getRngIdAttr(),
                                  getSeqAxisAttr(), getFeatureAxisAttr());
  grads.assign(1, grad);
  return success();
}

LogicalResult CrossEntropyOp::buildGradients(OpBuilder &b, ValueRange dy,
                                             SmallVectorImpl<Value> &grads) {
  grads.assign(2, Value());
  grads[0] = b.create<CrossEntropyGradOp>(getLoc(), getLogits().getType(),
                                          getLogits(), getTargets(), dy[0],
                                          /*lse=*/Value(), getIgnoreIndexAttr(),
                                          /*vocab_axis=*/StringAttr());
  return success();
}
