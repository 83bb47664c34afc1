//===- PlanLower.cpp - `model` functions to `plan` programs ---------------===//
//
// Implements `plan-lower` (see Passes.td).
//
// Gradient accumulation is planned before any kernel is emitted: each
// parameter's gradient buffer is the place where every contribution to that
// gradient lands, micro-batch after micro-batch. A contribution made by an
// accumulating kernel (the weight-gradient kernels add into their output)
// writes straight into the gradient buffer, and the `model.add` ops that
// autodiff made to sum contributions (a tied embedding has two) disappear;
// any other contribution is added into the buffer by an ADD after its
// kernel. So the micro-step needs no copy and no extra buffer per parameter,
// and the buffers are zeroed once per step, by `zero_grads`.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "dialects/model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

#include <map>
#include <set>

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANLOWER
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid;
using namespace braid::plan_ir;

namespace {

/// The results of `op` that its kernel adds into rather than overwrites.
SmallVector<Value> accumulatedResults(Operation *op) {
  if (isa<model::EmbeddingGradOp, model::PositionEmbeddingGradOp,
          model::LinearGradWeightOp, model::BiasGradOp>(op))
    return {op->getResult(0)};
  if (isa<model::RmsNormGradOp, model::LayerNormGradOp>(op))
    return SmallVector<Value>(op->getResults().drop_front());
  return {};
}

bool isOptimizerOp(Operation *op) {
  return isa<model::GradNormOp, model::AdamWOp>(op);
}

class Lowering {
public:
  Lowering(ModuleOp module, func::FuncOp func, bool splitBackward, int64_t zero,
           int64_t zeroBucketBytes)
      : module(module), func(func), b(module.getContext()),
        splitBackward(splitBackward), zero(zero),
        zeroBucketBytes(zeroBucketBytes) {
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(),
                          model::ModelDialect::kParamAttrName))
        if (auto t = dyn_cast<ShapedType>(arg.getType()))
          mixed = mixed || t.getElementType().isBF16() ||
                  t.getElementType().isF16();
  }

  LogicalResult run();

private:
  BufferOp newBuffer(Location loc, Type type, StringRef role,
                     StringRef name = {}) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(firstFunc);
    return b.create<BufferOp>(
        loc, b.getStringAttr("b" + std::to_string(counter++)),
        TypeAttr::get(type), b.getStringAttr(role),
        name.empty() ? StringAttr() : b.getStringAttr(name), IntegerAttr(),
        StringAttr(), IntegerAttr(), DenseI64ArrayAttr(),
        stage ? b.getI64IntegerAttr(*stage) : IntegerAttr(), IntegerAttr(),
        FlatSymbolRefAttr(), IntegerAttr(), FlatSymbolRefAttr());
  }
  /// The buffer of the model function's argument `arg`.
  LogicalResult argBuffer(BlockArgument arg);
  /// Marks `buffer` as the slice of a split tensor that the argument `arg`
  /// of the model function is (its model.sharding and model.shard_blocks).
  LogicalResult setShard(BufferOp buffer, unsigned arg);
  BufferOp newBuffer(Value v, StringRef role, StringRef name = {}) {
    return buffers[v] = newBuffer(v.getLoc(), storageType(v), role, name);
  }
  /// Mixed precision (the model computes in bf16 or f16): the parameters'
  /// gradients, what the optimizer sums from them, and its state (moments,
  /// and master weights of which it rounds the model's weights) are kept
  /// in f32. Whether `v` is such a gradient: a parameter gradient kernel's
  /// result, or a sum of them (model.add, model.all_reduce).
  bool isWide(Value v);
  /// The type of `v`'s buffer: f32 elements for a wide value.
  Type storageType(Value v) {
    return mixed && isWide(v) ? widen(v.getType()) : v.getType();
  }
  Type widen(Type type) const {
    auto shaped = dyn_cast<RankedTensorType>(type);
    return shaped ? shaped.clone(Float32Type::get(type.getContext())) : type;
  }
  /// The element type of a kept row statistic (a log-sum-exp) of values of
  /// `element`: f32 beside bf16 or f16, else the values' own.
  Type statisticType(Type element) const {
    return element.isBF16() || element.isF16()
               ? Float32Type::get(element.getContext())
               : element;
  }
  /// Copies a parameter's slicing (shard axis, dimension, blocks) to a
  /// buffer of the same shape (its gradient, its master weights).
  void copySlicing(BufferOp from, BufferOp to) {
    if (!from || !from.getShard())
      return;
    to.setShardAttr(from.getShardAttr());
    to.setDimAttr(from.getDimAttr());
    to.setBlocksAttr(from.getBlocksAttr());
  }
  void kernel(StringRef name, ArrayRef<BufferOp> inputs,
              ArrayRef<BufferOp> outputs, DictionaryAttr params, Location loc,
              StringRef provenance, ArrayAttr group = {},
              StringAttr rankAxis = {}) {
    SmallVector<Attribute> ins, outs;
    for (BufferOp v : inputs)
      ins.push_back(FlatSymbolRefAttr::get(v.getSymNameAttr()));
    for (BufferOp v : outputs)
      outs.push_back(FlatSymbolRefAttr::get(v.getSymNameAttr()));
    b.create<KernelOp>(loc, b.getStringAttr(name), b.getArrayAttr(ins),
                       b.getArrayAttr(outs), params,
                       b.getStringAttr(provenance), group, rankAxis);
  }
  SmallVector<BufferOp> buffersOf(ValueRange values) {
    SmallVector<BufferOp> out;
    for (Value v : values)
      out.push_back(buffers.lookup(v));
    return out;
  }
  FuncOp newFunc(StringRef name) {
    auto fn = b.create<FuncOp>(func.getLoc(), b.getStringAttr(name));
    fn.getBody().push_back(new Block());
    return fn;
  }
  /// Ops that run once per step, after the last micro-batch: the optimizer
  /// and the data-parallel sums of the gradients it reads.
  bool isUpdateOp(Operation *op) const {
    return isOptimizerOp(op) || stepReductions.contains(op);
  }
  LogicalResult planAccumulation(Value v, BufferOp grad, bool top);
  LogicalResult lowerBlock(Block &block, StringRef where);
  LogicalResult runPipeline(ArrayAttr stages);
  /// The gradients the optimizer of the ops `inStep` reads, each with its
  /// accumulation buffer, their accumulation planned and their ZEROs in
  /// `zeroGrads`.
  FailureOr<SmallVector<std::pair<Value, BufferOp>>>
  planGradients(function_ref<bool(Operation *)> inStep, FuncOp zeroGrads);
  LogicalResult lowerOp(Operation *op, StringRef where);
  LogicalResult lowerGradNorm(model::GradNormOp op, StringRef provenance);
  FailureOr<DictionaryAttr> kernelParams(Operation *op, StringAttr &rankAxis);
  /// The optimizer of the ops `inStep` under ZeRO (see Passes.td): buckets,
  /// reduce-scatter, norm, sharded AdamW, all-gather, at the insertion
  /// point (the update function).
  LogicalResult lowerZeroUpdate(function_ref<bool(Operation *)> inStep);

  ModuleOp module;
  func::FuncOp func;
  OpBuilder b;
  FuncOp firstFunc;
  DenseMap<Value, BufferOp> buffers;
  /// Results whose accumulating kernel writes into a gradient buffer.
  DenseMap<Value, BufferOp> accumulateInto;
  /// Results added into a gradient buffer by an ADD after their kernel.
  DenseMap<Value, BufferOp> addInto;
  /// The `model.add` ops of gradient sums that accumulation replaces.
  DenseSet<Operation *> absorbed;
  /// The all-reduces of gradients, run in place on the accumulated buffers.
  DenseSet<Operation *> stepReductions;
  unsigned counter = 0;
  bool mixed = false;
  DenseMap<Value, bool> wide;
  /// The log-sum-exp buffer kept with each attention output buffer, and
  /// with each cross-entropy's logits (layers pass values to their bodies,
  /// so the buffer, not the value, is the key).
  DenseMap<Operation *, BufferOp> lseOf;
  /// With pipeline parallelism, the pipeline rank being lowered (the
  /// buffers' stage), and the rank of each of the model's stages (virtual
  /// stages, with the interleaved schedule).
  std::optional<int64_t> stage;
  SmallVector<int64_t> rankOfStage;
  int64_t rankOf(int64_t virtualStage) const {
    return virtualStage < 0 ? -1 : rankOfStage[virtualStage];
  }
  /// Zero-bubble schedules: each stage's weight gradients go to their own
  /// function, `weightFn` while a backward is lowered.
  bool splitBackward;
  /// ZeRO stage (0: none) and its bucket size.
  int64_t zero, zeroBucketBytes;
  FuncOp weightFn;
  /// Pipeline: contributions to a parameter's gradient made on another
  /// stage than the one that updates it (a tied embedding's output-layer
  /// half), by value, with the parameter.
  DenseMap<Value, Value> remoteContributions;
  /// The owner stage's gradient buffers that such contributions are added
  /// into, in update.
  SmallVector<std::pair<Value, BufferOp>> remoteInto;
};

LogicalResult Lowering::setShard(BufferOp buffer, unsigned arg) {
  auto sharding = func.getArgAttrOfType<model::ShardingAttr>(
      arg, model::ModelDialect::kShardingAttrName);
  if (!sharding)
    return success();
  for (unsigned dim = 0; dim < sharding.getDims().size(); ++dim) {
    SmallVector<StringRef> axes = sharding.getDimAxes(dim);
    if (axes.empty() || axes == ArrayRef<StringRef>{"dp"})
      continue; // the batch of the data inputs: not a slice of a tensor
    if (axes.size() != 1)
      return func.emitError("argument ")
             << arg << " is split over several mesh axes, which the plan "
             << "file cannot state yet";
    buffer.setShardAttr(b.getStringAttr(axes[0]));
    buffer.setDimAttr(b.getI64IntegerAttr(dim));
    if (auto blocks = func.getArgAttrOfType<DenseI64ArrayAttr>(
            arg, model::ModelDialect::kShardBlocksAttrName))
      buffer.setBlocksAttr(blocks);
  }
  return success();
}

bool Lowering::isWide(Value v) {
  if (auto it = wide.find(v); it != wide.end())
    return it->second;
  bool result = false;
  if (Operation *def = v.getDefiningOp()) {
    if (llvm::is_contained(accumulatedResults(def), v))
      result = true;
    else if (isa<model::AddOp>(def))
      result =
          llvm::all_of(def->getOperands(), [&](Value x) { return isWide(x); });
    else if (auto reduce = dyn_cast<model::AllReduceOp>(def))
      result = isWide(reduce.getInputs()[cast<OpResult>(v).getResultNumber()]);
  }
  return wide[v] = result;
}

/// The kernel parameters of `op`: its inherent attributes, renamed to the
/// plan file's names, flags as 0/1, and flags that are absent as 0. An op on
/// one rank's slice of a split value sets `rankAxis` and gets the strides
/// of its slice's offsets.
FailureOr<DictionaryAttr> Lowering::kernelParams(Operation *op,
                                                 StringAttr &rankAxis) {
  SmallVector<NamedAttribute> params;
  auto add = [&](StringRef name, Attribute value) {
    params.push_back(b.getNamedAttr(name, value));
  };
  auto lastDim = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getShape().back();
  };
  // The slice of the vocabulary: rank c's first id is c times its size.
  if (auto axis = op->getAttrOfType<StringAttr>("vocab_axis")) {
    rankAxis = axis;
    int64_t local = 0;
    if (auto e = dyn_cast<model::EmbeddingOp>(op))
      local = e.getTable().getType().getDimSize(0);
    else if (auto e = dyn_cast<model::EmbeddingGradOp>(op))
      local = e.getDtable().getType().getDimSize(0);
    else
      local = lastDim(op->getOperand(0)); // the logits
    add("vocab_start_stride", b.getI64IntegerAttr(local));
  }
  // The slice of the sequence: rank c's first position is c times its
  // length; dropout numbers each sample's elements, so its slice of them
  // starts at c times their count.
  if (auto axis = op->getAttrOfType<StringAttr>("seq_axis")) {
    rankAxis = axis;
    auto local = cast<RankedTensorType>(
        (isa<model::PositionEmbeddingOp>(op) ? op->getResult(0)
                                             : op->getOperand(0))
            .getType());
    if (isa<model::DropoutOp>(op))
      add("col_offset_stride",
          b.getI64IntegerAttr(local.getNumElements() / local.getDimSize(0)));
    else
      add("seq_start_stride", b.getI64IntegerAttr(local.getDimSize(1)));
  }
  // The slice of the heads: rank c's first query head is c times its count,
  // its first kv head too unless they are replicated.
  if (auto axis = op->getAttrOfType<StringAttr>("head_axis")) {
    rankAxis = axis;
    int64_t heads = op->getAttrOfType<IntegerAttr>("num_heads").getInt();
    int64_t kv = op->getAttrOfType<IntegerAttr>("num_kv_heads").getInt();
    int64_t globalKv =
        op->getAttrOfType<IntegerAttr>("global_kv_heads").getInt();
    add("head_offset_stride", b.getI64IntegerAttr(heads));
    add("kv_head_offset_stride", b.getI64IntegerAttr(globalKv == kv ? 0 : kv));
  }
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
    if (name.starts_with("model.") || name == "dropout" ||
        name == "vocab_axis" || name == "head_axis" || name == "seq_axis")
      continue; // discardable attributes; attention dropout is 0 here; the
                // axes became rankAxis
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

/// Decides how `v`, a contribution to the gradient held in `grad`, gets
/// there: through the `model.add` ops and layer results that only pass it on,
/// down to the kernels that make it. `top` is the gradient itself, which the
/// optimizer (or the return) reads from `grad`; every other value must have
/// no use but the one that passes it on.
/// The pipeline stage of a top-level op of the step (model.stage; -1: the
/// clipping norm, which every stage computes over its own gradients).
static int64_t stageOf(Operation *op) {
  auto attr = op->getAttrOfType<IntegerAttr>("model.stage");
  return attr ? attr.getInt() : 0;
}

LogicalResult Lowering::planAccumulation(Value v, BufferOp grad, bool top) {
  if (stage && remoteContributions.count(v) &&
      rankOf(stageOf(v.getDefiningOp())) != *stage) {
    remoteInto.push_back({v, grad}); // received and added in update
    return success();
  }
  Operation *def = v.getDefiningOp();
  if (!def)
    return func.emitError("the gradient of ")
           << *grad.getName() << " is an argument, not computed";
  bool onlyPassedOn =
      top ? llvm::all_of(v.getUsers(),
                         [&](Operation *user) {
                           return isUpdateOp(user) || isa<func::ReturnOp>(user);
                         })
          : v.hasOneUse();
  if (onlyPassedOn) {
    if (auto sum = dyn_cast<model::AddOp>(def)) {
      absorbed.insert(sum);
      for (Value operand : sum->getOperands())
        if (failed(planAccumulation(operand, grad, false)))
          return failure();
      return success();
    }
    if (auto layer = dyn_cast<model::LayerOp>(def)) {
      Value yielded = layer.getBody().front().getTerminator()->getOperand(
          cast<OpResult>(v).getResultNumber());
      if (yielded.hasOneUse() && yielded.getDefiningOp())
        return planAccumulation(yielded, grad, false);
    }
    if (llvm::is_contained(accumulatedResults(def), v) &&
        !accumulateInto.count(v)) {
      accumulateInto[v] = grad;
      return success();
    }
  }
  if (addInto.count(v) || accumulateInto.count(v))
    return def->emitOpError("result is the gradient of two parameters");
  addInto[v] = grad;
  return success();
}

LogicalResult Lowering::lowerOp(Operation *op, StringRef where) {
  if (absorbed.contains(op))
    return success();
  if (weightFn && isa<model::LinearGradWeightOp>(op)) {
    // The weight gradient, which nothing in the pipeline waits for: to the
    // stage's backward_weight function.
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(&weightFn.getBody().front());
    FuncOp saved = weightFn;
    weightFn = FuncOp();
    LogicalResult result = lowerOp(op, saved.getSymName());
    weightFn = saved;
    return result;
  }
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
         llvm::zip(layer.getResults(), body.getTerminator()->getOperands())) {
      buffers[result] = buffers.lookup(yielded);
      if (BufferOp grad = addInto.lookup(result))
        kernel("ADD", {grad, buffers[result]}, {grad}, b.getDictionaryAttr({}),
               layer.getLoc(), name + " (gradient accumulation)");
    }
    return success();
  }
  if (!isa<model::ModelDialect>(op->getDialect()))
    return op->emitOpError("cannot be lowered to a plan kernel");
  if (auto reduce = dyn_cast<model::AllReduceOp>(op)) {
    // A step reduction sums the accumulated gradient buffers in place.
    for (auto [in, out] : llvm::zip(reduce.getInputs(), reduce.getResults()))
      if (stepReductions.contains(op))
        buffers[out] = buffers.lookup(in);
      else
        newBuffer(out, "activation");
    SmallVector<NamedAttribute> params;
    if (reduce.getMax())
      params.push_back(b.getNamedAttr("max", b.getI64IntegerAttr(1)));
    kernel("ALL_REDUCE", buffersOf(reduce.getInputs()),
           buffersOf(reduce.getResults()), b.getDictionaryAttr(params),
           op->getLoc(), reduce.getReason(), reduce.getAxes());
    return success();
  }
  if (isa<model::AllGatherOp, model::ReduceScatterOp>(op)) {
    // Sequence parallelism's collectives: a new buffer of the other size.
    newBuffer(op->getResult(0), "activation");
    kernel(isa<model::AllGatherOp>(op) ? "ALL_GATHER" : "REDUCE_SCATTER",
           buffersOf(op->getOperands()), buffersOf(op->getResults()),
           b.getDictionaryAttr(
               b.getNamedAttr("dim", op->getAttrOfType<IntegerAttr>("dim"))),
           op->getLoc(), op->getAttrOfType<StringAttr>("reason").getValue(),
           op->getAttrOfType<ArrayAttr>("axes"));
    return success();
  }
  std::string provenance =
      (op->getName().getStringRef() + " in " + where).str();
  // model-recompute's clones: the cost model prices them as recomputation.
  if (op->hasAttr("model.recomputed"))
    provenance += " (recomputed)";
  if (auto norm = dyn_cast<model::GradNormOp>(op))
    return lowerGradNorm(norm, provenance);
  StringAttr rankAxis;
  FailureOr<DictionaryAttr> params = kernelParams(op, rankAxis);
  if (failed(params))
    return failure();
  std::string kernelName = op->getName().stripDialect().upper();
  if (auto adamw = dyn_cast<model::AdamWOp>(op)) {
    // In place: the new parameter and moments are the old buffers.
    BufferOp param = buffers.lookup(adamw.getParam());
    buffers[adamw.getNewParam()] = param;
    buffers[adamw.getNewM()] = buffers.lookup(adamw.getM());
    buffers[adamw.getNewV()] = buffers.lookup(adamw.getV());
    if (mixed) {
      // The update runs on f32 master weights, then rounds them into the
      // parameter the model computes with.
      BufferOp master =
          newBuffer(op->getLoc(), widen(param.getType()), "optimizer_state",
                    ("master:" + param.getName().value_or("")).str());
      copySlicing(param, master);
      SmallVector<BufferOp> ins = buffersOf(op->getOperands());
      ins[0] = master;
      kernel(kernelName, ins,
             {master, buffers.lookup(adamw.getM()),
              buffers.lookup(adamw.getV()), param},
             *params, op->getLoc(), provenance, ArrayAttr(), rankAxis);
      return success();
    }
  } else {
    for (Value v : op->getResults())
      if (BufferOp grad = accumulateInto.lookup(v))
        buffers[v] = grad;
      else
        newBuffer(v, "activation");
  }
  // Accumulating kernels start from zero, unless they accumulate a gradient
  // (zeroed once per step by zero_grads).
  for (Value v : accumulatedResults(op))
    if (!accumulateInto.count(v))
      kernel("ZERO", {}, {buffers.lookup(v)}, b.getDictionaryAttr({}),
             op->getLoc(), provenance);
  SmallVector<BufferOp> inputs = buffersOf(op->getOperands()),
                        outputs = buffersOf(op->getResults());
  if (auto attention = dyn_cast<model::AttentionOp>(op)) {
    // Attention keeps each query row's log-sum-exp, [batch, heads, queries]
    // (f32 with mixed precision), for its backward, which otherwise would
    // compute the forward again to rebuild the probabilities.
    auto q = cast<RankedTensorType>(attention.getQ().getType());
    Type element = statisticType(q.getElementType());
    BufferOp lse =
        newBuffer(op->getLoc(),
                  RankedTensorType::get({q.getDimSize(0),
                                         int64_t(attention.getNumHeads()),
                                         q.getDimSize(1)},
                                        element),
                  "activation");
    lseOf[outputs.front()] = lse;
    outputs.push_back(lse);
  } else if (auto grad = dyn_cast<model::AttentionGradOp>(op)) {
    if (BufferOp lse = lseOf.lookup(buffers.lookup(grad.getOut())))
      inputs.push_back(lse);
  } else if (auto loss = dyn_cast<model::CrossEntropyOp>(op)) {
    // Likewise the cross-entropy's log-sum-exp per row (f32 with mixed
    // precision), which its gradient reads as a vocabulary-parallel one
    // reads the global one.
    auto targets = cast<RankedTensorType>(loss.getTargets().getType());
    Type element = statisticType(
        cast<RankedTensorType>(loss.getLogits().getType()).getElementType());
    BufferOp lse = newBuffer(op->getLoc(),
                             RankedTensorType::get(targets.getShape(), element),
                             "activation");
    lseOf[inputs.front()] = lse;
    outputs.push_back(lse);
  } else if (auto grad = dyn_cast<model::CrossEntropyGradOp>(op)) {
    if (!grad.getLse())
      if (BufferOp lse = lseOf.lookup(buffers.lookup(grad.getLogits())))
        inputs.push_back(lse);
  }
  kernel(kernelName, inputs, outputs, *params, op->getLoc(), provenance,
         ArrayAttr(), rankAxis);
  for (Value v : op->getResults())
    if (BufferOp grad = addInto.lookup(v))
      kernel("ADD", {grad, buffers.lookup(v)}, {grad}, b.getDictionaryAttr({}),
             op->getLoc(), provenance + " (gradient accumulation)");
  return success();
}

/// GRAD_NORM: over a mesh, a collective whose group sums the squares of
/// the ranks' shards; its inputs list the split gradients first
/// (`split_inputs` of them), then the replicated ones.
LogicalResult Lowering::lowerGradNorm(model::GradNormOp op,
                                      StringRef provenance) {
  for (Value v : op->getResults())
    newBuffer(v, "activation");
  SmallVector<NamedAttribute> params{
      b.getNamedAttr("max_norm", op.getMaxNormAttr())};
  SmallVector<BufferOp> inputs = buffersOf(op.getGrads());
  SmallVector<bool> replicated(inputs.size(), false);
  if (std::optional<ArrayRef<bool>> r = op.getReplicated())
    replicated.assign(r->begin(), r->end());
  SmallVector<Attribute> axes;
  if (std::optional<ArrayAttr> a = op.getAxes())
    axes.assign(a->begin(), a->end());
  int64_t copies = 1;
  if (auto mesh = module.lookupSymbol<model::MeshOp>("mesh"))
    for (Attribute axis : axes)
      copies *= mesh.getAxisSize(cast<StringAttr>(axis).getValue()).value_or(1);
  if (stage) {
    // A pipeline stage's part: its own gradients (the others' have no
    // buffer here), summed with the other stages' over pp.
    SmallVector<BufferOp> mine;
    SmallVector<bool> mineReplicated;
    for (auto [buffer, isReplicated] : llvm::zip(inputs, replicated))
      if (buffer) {
        mine.push_back(buffer);
        mineReplicated.push_back(isReplicated);
      }
    inputs = mine;
    replicated = mineReplicated;
    axes.insert(axes.begin(), b.getStringAttr("pp"));
    params.push_back(
        b.getNamedAttr("replicated_copies", b.getI64IntegerAttr(copies)));
  }
  ArrayAttr group;
  if (!axes.empty()) {
    SmallVector<BufferOp> split, whole;
    for (auto [buffer, isReplicated] : llvm::zip(inputs, replicated))
      (isReplicated ? whole : split).push_back(buffer);
    params.push_back(
        b.getNamedAttr("split_inputs", b.getI64IntegerAttr(split.size())));
    inputs = split;
    inputs.append(whole);
    group = b.getArrayAttr(axes);
  }
  kernel("GRAD_NORM", inputs, buffersOf(op->getResults()),
         b.getDictionaryAttr(params), op.getLoc(), provenance, group);
  return success();
}

LogicalResult Lowering::lowerZeroUpdate(function_ref<bool(Operation *)> inStep) {
  Block &entry = func.getBody().front();
  auto mesh = module.lookupSymbol<model::MeshOp>("mesh");
  auto sizeOf = [&](StringRef axis) -> int64_t {
    return mesh ? mesh.getAxisSize(axis).value_or(1) : 1;
  };
  const int64_t d = sizeOf("dp");
  auto norms = entry.getOps<model::GradNormOp>();
  if (norms.empty())
    return func.emitError("zero: the step has no model.grad_norm");
  model::GradNormOp norm = *norms.begin();
  DenseMap<Value, bool> replicatedOf;
  std::optional<ArrayRef<bool>> replicated = norm.getReplicated();
  for (auto [i, g] : llvm::enumerate(norm.getGrads()))
    replicatedOf[g] = replicated && i < replicated->size() && (*replicated)[i];

  // The members of each kind of bucket, in the optimizer's order.
  struct Member {
    mutable model::AdamWOp op;
    mutable BufferOp param, grad;
  };
  struct Kind {
    SmallVector<std::string> axes;
    double decay;
    bool replicated;
    bool operator==(const Kind &o) const {
      return axes == o.axes && decay == o.decay && replicated == o.replicated;
    }
  };
  SmallVector<std::pair<Kind, SmallVector<Member>>> kinds;
  for (auto adamw : entry.getOps<model::AdamWOp>()) {
    if (!inStep(adamw))
      continue;
    Value g = adamw.getGrad();
    auto reduce = g.getDefiningOp<model::AllReduceOp>();
    BufferOp param = buffers.lookup(adamw.getParam());
    if (!reduce || !llvm::is_contained(
                       llvm::map_range(reduce.getAxes().getAsRange<StringAttr>(),
                                       [](StringAttr a) { return a.getValue(); }),
                       "dp"))
      return adamw.emitOpError("zero: the gradient of ")
             << param.getName().value_or("?")
             << " is not summed over dp: ZeRO shards over the data-parallel "
                "ranks";
    Kind kind;
    for (StringAttr a : reduce.getAxes().getAsRange<StringAttr>())
      kind.axes.push_back(a.getValue().str());
    kind.decay = adamw.getWeightDecay().convertToDouble();
    kind.replicated = replicatedOf.lookup(g);
    BufferOp grad = buffers.lookup(
        reduce.getInputs()[cast<OpResult>(g).getResultNumber()]);
    if (!param || !grad)
      return adamw.emitOpError("zero: no buffer for the parameter or gradient");
    auto *it = llvm::find_if(kinds, [&](auto &k) { return k.first == kind; });
    if (it == kinds.end()) {
      kinds.push_back({kind, {}});
      it = std::prev(kinds.end());
    }
    it->second.push_back({adamw, param, grad});
  }

  // Where each gradient is complete: the function and kernel that write it
  // last (its micro-batch's backward). With ZeRO-2 its bucket is
  // reduce-scattered right there, once per micro-batch, into a block that
  // accumulates; a gradient that another stage adds to in update (a tied
  // embedding) waits for update as with ZeRO-1.
  llvm::DenseSet<Operation *> sharedGrads;
  for (auto [v, grad] : remoteInto)
    sharedGrads.insert(grad);
  llvm::StringMap<BufferOp> bySymbol;
  for (BufferOp buffer : module.getOps<BufferOp>())
    bySymbol[buffer.getSymName()] = buffer;
  auto bufferOf = [&](Attribute ref) -> Operation * {
    return bySymbol.lookup(cast<SymbolRefAttr>(ref).getRootReference().getValue());
  };
  DenseMap<Operation *, KernelOp> lastWrite;
  DenseMap<Operation *, std::pair<int64_t, int64_t>> kernelPosition;
  // The first kernel of each function that reads or writes a buffer.
  DenseMap<std::pair<Operation *, Operation *>, KernelOp> firstTouchOf;
  for (auto [f, fn] : llvm::enumerate(module.getOps<FuncOp>())) {
    int64_t at = 0;
    for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
      kernelPosition[kernel] = {int64_t(f), at++};
      for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
        for (Attribute ref : list)
          if (Operation *buffer = bufferOf(ref))
            firstTouchOf.try_emplace({fn.getOperation(), buffer}, kernel);
      for (Attribute ref : kernel.getOutputs())
        if (Operation *buffer = bufferOf(ref))
          lastWrite[buffer] = kernel;
    }
  }
  auto early = [&](const Member &member) -> KernelOp {
    if (zero < 2 || sharedGrads.contains(member.grad))
      return KernelOp();
    return lastWrite.lookup(member.grad);
  };

  // Buckets of one kind (and, when reduced in backward, one function), at
  // most zeroBucketBytes (a larger tensor alone), in the order the
  // gradients are complete.
  struct Bucket {
    const Kind *kind;
    SmallVector<Member> members;
    BufferOp flatGrad, flatParam, m, v, block, accumulated;
    /// Mixed precision: this rank's block of the f32 master weights.
    BufferOp master;
    /// ZeRO-2: the last kernel writing its gradients, and the first kernel
    /// of its reduction (placed right after it).
    KernelOp last, start;
  };
  SmallVector<Bucket> buckets;
  for (auto &[kind, members] : kinds) {
    SmallVector<Member> order(members.begin(), members.end());
    // (function, kernel) of the last write; (-1, 0) for update.
    auto position = [&](const Member &m) -> std::pair<int64_t, int64_t> {
      KernelOp k = early(m);
      return k ? kernelPosition.lookup(k) : std::pair<int64_t, int64_t>(-1, 0);
    };
    llvm::stable_sort(order, [&](const Member &a, const Member &c) {
      return position(a) < position(c);
    });
    int64_t bytes = 0;
    for (const Member &member : order) {
      int64_t size = member.grad.getBytes();
      KernelOp mine = early(member);
      Operation *where = mine ? mine->getParentOp() : nullptr;
      if (buckets.empty() || buckets.back().kind != &kind ||
          (buckets.back().last ? buckets.back().last->getParentOp() : nullptr) !=
              where ||
          bytes + size > zeroBucketBytes) {
        buckets.push_back({&kind, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}});
        bytes = 0;
      }
      buckets.back().members.push_back(member);
      if (KernelOp k = early(member);
          k && (!buckets.back().last ||
                buckets.back().last->isBeforeInBlock(k)))
        buckets.back().last = k;
      bytes += size;
    }
  }
  auto describe = [](const Bucket &bucket) {
    std::string s = bucket.members.front().param.getName().value_or("?").str();
    if (bucket.members.size() > 1)
      s += " .. " + bucket.members.back().param.getName().value_or("?").str() +
           " (" + std::to_string(bucket.members.size()) + " tensors)";
    return s;
  };
  StringAttr dpAxis = b.getStringAttr("dp");
  ArrayAttr dpGroup = b.getStrArrayAttr({"dp"});
  auto dim0 = b.getDictionaryAttr(b.getNamedAttr("dim", b.getI64IntegerAttr(0)));
  // Gradients partial over tp are summed over tp first, the whole bucket at
  // once, at the insertion point.
  auto sumOverTp = [&](const Bucket &bucket) {
    if (llvm::is_contained(bucket.kind->axes, "tp"))
      kernel("ALL_REDUCE", {bucket.flatGrad}, {bucket.flatGrad},
             b.getDictionaryAttr({}), bucket.members.front().op.getLoc(),
             "zero: tensor-parallel sum of the gradients of " +
                 describe(bucket) + " (partial over tp)",
             b.getStrArrayAttr({"tp"}));
  };
  OpBuilder::InsertPoint updateAt = b.saveInsertionPoint();
  FuncOp zeroGradsFn = module.lookupSymbol<FuncOp>(
      stage ? "stage" + std::to_string(*stage) + "_zero_grads"
            : std::string(kZeroGradsFunc));
  // zero_grads' kernels that zero one buffer, by that buffer.
  DenseMap<Operation *, SmallVector<KernelOp, 1>> zeroing;
  if (zeroGradsFn)
    for (KernelOp z : zeroGradsFn.getBody().getOps<KernelOp>())
      if (z.getOutputs().size() == 1)
        if (Operation *buffer = bufferOf(z.getOutputs()[0]))
          zeroing[buffer].push_back(z);
  for (auto [k, bucket] : llvm::enumerate(buckets)) {
    Location loc = bucket.members.front().op.getLoc();
    auto gradType = cast<RankedTensorType>(bucket.members.front().grad.getType());
    Type element = gradType.getElementType();
    int64_t elementBytes = (gradType.getElementTypeBitWidth() + 7) / 8;
    // The parameters' own type (with mixed precision, narrower than their
    // f32 gradients).
    auto paramType =
        cast<RankedTensorType>(bucket.members.front().param.getType());
    int64_t paramBytes = (paramType.getElementTypeBitWidth() + 7) / 8;
    int64_t total = 0;
    for (const Member &member : bucket.members)
      total += cast<RankedTensorType>(member.grad.getType()).getNumElements();
    int64_t quantum = d * 16;
    int64_t padded = (total + quantum - 1) / quantum * quantum;
    auto flat = RankedTensorType::get({padded}, element);
    auto shard = RankedTensorType::get({padded / d}, element);
    std::string name = "zero bucket " + std::to_string(k);
    // With ZeRO-2 the flat gradients live through one micro-batch's
    // backward; the rank keeps only its accumulated block.
    bucket.flatGrad = newBuffer(loc, flat, bucket.last ? "activation" : "bucket");
    bucket.flatParam = newBuffer(
        loc, RankedTensorType::get({padded}, paramType.getElementType()),
        "bucket");
    bucket.m = newBuffer(loc, shard, "optimizer_state", "exp_avg:" + name);
    bucket.v = newBuffer(loc, shard, "optimizer_state", "exp_avg_sq:" + name);
    if (mixed)
      bucket.master =
          newBuffer(loc, shard, "optimizer_state", "master:" + name);
    bucket.block = newBuffer(loc, shard, "activation");
    int64_t at = 0;
    for (const Member &member : bucket.members) {
      member.grad.setViewOfAttr(
          FlatSymbolRefAttr::get(bucket.flatGrad.getSymNameAttr()));
      member.grad.setViewOffsetAttr(b.getI64IntegerAttr(at * elementBytes));
      member.param.setViewOfAttr(
          FlatSymbolRefAttr::get(bucket.flatParam.getSymNameAttr()));
      member.param.setViewOffsetAttr(b.getI64IntegerAttr(at * paramBytes));
      at += cast<RankedTensorType>(member.grad.getType()).getNumElements();
    }
    std::string reason =
        "zero: data-parallel sum of the gradients of " + describe(bucket) +
        ", each rank keeping its block of " + std::to_string(padded / d) +
        " of its " + std::to_string(padded) + " elements";
    if (bucket.last) {
      // Zeroed before the micro-batch's first contribution instead of once
      // per step; reduce-scattered as soon as the last one is written.
      // The kernels added for earlier buckets touch only their own new
      // buffers, so the first kernel touching this bucket's gradients is
      // one of the function's original kernels.
      Operation *fn = bucket.last->getParentOp();
      KernelOp firstTouch;
      std::pair<int64_t, int64_t> firstAt;
      for (const Member &member : bucket.members) {
        for (KernelOp z : zeroing.lookup(member.grad))
          z.erase();
        KernelOp k = firstTouchOf.lookup({fn, member.grad});
        if (k && (!firstTouch || kernelPosition.lookup(k) < firstAt)) {
          firstTouch = k;
          firstAt = kernelPosition.lookup(k);
        }
      }
      b.setInsertionPoint(firstTouch);
      kernel("ZERO", {}, {bucket.flatGrad}, b.getDictionaryAttr({}), loc,
             "zero: the gradients of " + describe(bucket) +
                 " start from zero each micro-batch");
      b.setInsertionPointAfter(bucket.last);
      sumOverTp(bucket);
      kernel("REDUCE_SCATTER", {bucket.flatGrad}, {bucket.block},
             b.getDictionaryAttr({b.getNamedAttr("dim", b.getI64IntegerAttr(0)),
                                  b.getNamedAttr("async", b.getI64IntegerAttr(1))}),
             loc,
             reason + " (started as soon as its last gradient is written, "
                      "overlapping the rest of backward)",
             dpGroup);
      bucket.start = cast<KernelOp>(&*std::prev(b.getInsertionPoint()));
      bucket.accumulated = newBuffer(loc, shard, "gradient", "grad:" + name);
      if (zeroGradsFn) {
        b.setInsertionPointToEnd(&zeroGradsFn.getBody().front());
        kernel("ZERO", {}, {bucket.accumulated}, b.getDictionaryAttr({}), loc,
               "zero_grads: " + name);
      }
      continue;
    }
    b.restoreInsertionPoint(updateAt);
    sumOverTp(bucket);
    kernel("REDUCE_SCATTER", {bucket.flatGrad}, {bucket.block}, dim0, loc,
           reason, dpGroup);
    updateAt = b.saveInsertionPoint();
  }
  // ZeRO-2: each bucket's reduce-scatter runs while the backward goes on,
  // until the next bucket of its function is about to start (one in flight
  // at a time, so at most two buckets' flat gradients are alive), or the
  // function's end; then its block accumulates over the micro-batches.
  for (auto [k, bucket] : llvm::enumerate(buckets)) {
    if (!bucket.start)
      continue;
    Operation *fn = bucket.start->getParentOp();
    KernelOp next;
    for (const Bucket &later : ArrayRef(buckets).drop_front(k + 1))
      if (later.start && later.start->getParentOp() == fn &&
          bucket.start->isBeforeInBlock(later.start) &&
          (!next || later.start->isBeforeInBlock(next)))
        next = later.start;
    if (next)
      b.setInsertionPoint(next);
    else
      b.setInsertionPointToEnd(&cast<FuncOp>(fn).getBody().front());
    Location loc = bucket.members.front().op.getLoc();
    kernel("WAIT", {bucket.flatGrad, bucket.block}, {}, b.getDictionaryAttr({}),
           loc, "zero: the reduce-scatter of " + describe(bucket) + " is done");
    kernel("ADD", {bucket.accumulated, bucket.block}, {bucket.accumulated},
           b.getDictionaryAttr({}), loc,
           "zero: accumulate this micro-batch's block of " + describe(bucket));
  }
  b.restoreInsertionPoint(updateAt);
  // What the optimizer reads: the accumulated block (ZeRO-2) or this step's.
  for (Bucket &bucket : buckets)
    if (bucket.accumulated)
      bucket.block = bucket.accumulated;

  // The clipping norm over the ranks' blocks: split over dp (and over the
  // norm's axes unless replicated there), each replicated block counted once.
  SmallVector<BufferOp> split, whole;
  for (const Bucket &bucket : buckets)
    (bucket.kind->replicated ? whole : split).push_back(bucket.block);
  SmallVector<Attribute> group;
  if (stage)
    group.push_back(b.getStringAttr("pp"));
  group.push_back(dpAxis);
  int64_t copies = 1;
  if (std::optional<ArrayAttr> axes = norm.getAxes())
    for (Attribute axis : *axes)
      if (cast<StringAttr>(axis).getValue() != "dp" &&
          cast<StringAttr>(axis).getValue() != "pp") {
        group.push_back(axis);
        copies *= sizeOf(cast<StringAttr>(axis).getValue());
      }
  BufferOp normBuffer = newBuffer(norm.getNorm(), "activation");
  BufferOp scale = newBuffer(norm.getScale(), "activation");
  SmallVector<BufferOp> normInputs = split;
  normInputs.append(whole);
  kernel("GRAD_NORM", normInputs, {normBuffer, scale},
         b.getDictionaryAttr(
             {b.getNamedAttr("max_norm", norm.getMaxNormAttr()),
              b.getNamedAttr("split_inputs", b.getI64IntegerAttr(split.size())),
              b.getNamedAttr("replicated_copies", b.getI64IntegerAttr(copies))}),
         norm.getLoc(),
         "zero: gradient norm over the data-parallel ranks' blocks",
         b.getArrayAttr(group));

  // ZeRO-3: a bucket reduced in backward keeps only its block of the
  // parameters. Each part of a function that reads its parameters (a
  // function's forward and backward halves apart: those of a micro-step are
  // split at the first kernel reading the loss gradient) gathers them
  // first into a temporary flat buffer of its own, whose views stand for
  // the parameters there.
  DenseMap<Operation *, BufferOp> paramBlock;
  struct Gather {
    std::pair<int64_t, int64_t> where; // (function, half)
    KernelOp firstUse;
    BufferOp gathered, block;
    std::string what;
    Location loc;
  };
  SmallVector<Gather> gathers;
  if (zero >= 3) {
    Operation *updateFn = b.getInsertionBlock()->getParentOp();
    BufferOp lossGrad;
    for (auto [v, buffer] : buffers)
      if (buffer.getRole() == "input" && buffer.getName() == "loss_grad")
        lossGrad = buffer;
    // Every kernel outside update that reads or writes each buffer, in
    // program order, with its (function, half). The views made below for a
    // bucket replace only that bucket's parameters, so the users of the
    // other buckets' parameters stay as listed.
    struct Use {
      std::pair<int64_t, int64_t> where;
      int64_t at;
      KernelOp kernel;
    };
    DenseMap<Operation *, SmallVector<Use>> usesOf;
    for (auto [f, fn] : llvm::enumerate(module.getOps<FuncOp>())) {
      if (fn.getOperation() == updateFn)
        continue;
      int64_t half = 0, at = 0;
      for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
        for (Attribute ref : kernel.getInputs())
          if (lossGrad && bufferOf(ref) == lossGrad.getOperation())
            half = 1;
        for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
          for (Attribute ref : list)
            if (Operation *buffer = bufferOf(ref)) {
              SmallVector<Use> &uses = usesOf[buffer];
              if (uses.empty() || uses.back().kernel != kernel)
                uses.push_back({{int64_t(f), half}, at, kernel});
            }
        ++at;
      }
    }
    for (auto [k, bucket] : llvm::enumerate(buckets)) {
      if (!bucket.last)
        continue; // a tied embedding's: whole until update, as ZeRO-1
      Location loc = bucket.members.front().op.getLoc();
      auto shard = RankedTensorType::get(
          cast<RankedTensorType>(bucket.m.getType()).getShape(),
          cast<RankedTensorType>(bucket.flatParam.getType()).getElementType());
      BufferOp blockOfParams = newBuffer(loc, shard, "parameter",
                                         "zero bucket " + std::to_string(k));
      blockOfParams.setBlockOfAttr(
          FlatSymbolRefAttr::get(bucket.flatParam.getSymNameAttr()));
      bucket.flatParam.setRole("activation");
      paramBlock[bucket.flatParam] = blockOfParams;
      // The kernels reading the bucket's parameters, by (function, half),
      // in program order.
      SmallVector<Use> uses;
      for (const Member &member : bucket.members)
        llvm::append_range(uses, usesOf.lookup(member.param));
      llvm::sort(uses, [](const Use &x, const Use &y) {
        return std::tie(x.where.first, x.at) < std::tie(y.where.first, y.at);
      });
      std::map<std::pair<int64_t, int64_t>, SmallVector<KernelOp>> parts;
      for (const Use &use : uses) {
        SmallVector<KernelOp> &part = parts[use.where];
        if (part.empty() || part.back() != use.kernel)
          part.push_back(use.kernel);
      }
      bool firstPart = true;
      for (auto &[where, kernels] : parts) {
        BufferOp gathered = bucket.flatParam;
        DenseMap<Operation *, BufferOp> viewOf;
        if (!firstPart) {
          gathered = newBuffer(loc, bucket.flatParam.getType(), "activation");
          for (const Member &member : bucket.members) {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointAfter(member.param);
            auto copy = cast<BufferOp>(b.clone(*member.param));
            copy.setSymNameAttr(b.getStringAttr("b" + std::to_string(counter++)));
            copy.setViewOfAttr(FlatSymbolRefAttr::get(gathered.getSymNameAttr()));
            viewOf[member.param] = copy;
          }
          for (KernelOp kernel : kernels)
            for (bool outputs : {false, true}) {
              SmallVector<Attribute> refs;
              for (Attribute ref : outputs ? kernel.getOutputs() : kernel.getInputs()) {
                BufferOp to = viewOf.lookup(bufferOf(ref));
                refs.push_back(to ? FlatSymbolRefAttr::get(to.getSymNameAttr()) : ref);
              }
              if (outputs)
                kernel.setOutputsAttr(b.getArrayAttr(refs));
              else
                kernel.setInputsAttr(b.getArrayAttr(refs));
            }
        }
        firstPart = false;
        gathers.push_back({where, kernels.front(), gathered, blockOfParams,
                           describe(bucket), loc});
      }
    }
    // Each part's gather starts (async) where the part before it in its
    // function's half first uses its own parameters, so it runs while that
    // part computes (the first part of a half gathers just before its use);
    // a WAIT finishes it right before its own first use.
    llvm::stable_sort(gathers, [](const Gather &x, const Gather &y) {
      return x.where != y.where ? x.where < y.where
                                : x.firstUse->isBeforeInBlock(y.firstUse);
    });
    for (auto [i, g] : llvm::enumerate(gathers)) {
      KernelOp start = i > 0 && gathers[i - 1].where == g.where
                           ? gathers[i - 1].firstUse
                           : g.firstUse;
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(start);
      kernel("COPY", {g.block}, {g.gathered}, b.getDictionaryAttr({}), g.loc,
             "zero: this rank's block of the parameters " + g.what, ArrayAttr(),
             dpAxis);
      kernel("ALL_GATHER", {g.gathered}, {g.gathered},
             b.getDictionaryAttr({b.getNamedAttr("dim", b.getI64IntegerAttr(0)),
                                  b.getNamedAttr("async", b.getI64IntegerAttr(1))}),
             g.loc,
             "zero: the parameters " + g.what +
                 " from every data-parallel rank (started one part ahead of "
                 "their first use here)",
             dpGroup);
      b.setInsertionPoint(g.firstUse);
      kernel("WAIT", {g.gathered}, {}, b.getDictionaryAttr({}), g.loc,
             "zero: the parameters " + g.what + " are gathered");
    }
  }

  // AdamW on this rank's block, then every rank's blocks gathered back
  // (ZeRO-3: the block is the parameters the rank keeps).
  for (Bucket &bucket : buckets) {
    model::AdamWOp first = bucket.members.front().op;
    StringAttr none;
    FailureOr<DictionaryAttr> params = kernelParams(first, none);
    if (failed(params))
      return failure();
    BufferOp kept = paramBlock.lookup(bucket.flatParam);
    BufferOp target = kept ? kept : bucket.flatParam;
    // Mixed precision: on the rank's block of the f32 masters, rounded
    // into its block of the weights (the kept block, or of the flat ones).
    BufferOp updated = bucket.master ? bucket.master : target;
    SmallVector<BufferOp> outs = {updated, bucket.m, bucket.v};
    if (bucket.master)
      outs.push_back(target);
    kernel("ADAMW",
           {updated, bucket.block, bucket.m, bucket.v,
            buffers.lookup(first.getLr()), buffers.lookup(first.getStep()),
            scale},
           outs, *params, first.getLoc(),
           "zero: AdamW on this rank's block of " + describe(bucket),
           ArrayAttr(), kept ? StringAttr() : dpAxis);
  }
  for (Bucket &bucket : buckets)
    if (!paramBlock.count(bucket.flatParam))
      kernel("ALL_GATHER", {bucket.flatParam}, {bucket.flatParam}, dim0,
             bucket.members.front().op.getLoc(),
             "zero: the updated parameters " + describe(bucket) +
                 " from every data-parallel rank",
             dpGroup);

  // The per-parameter moments are gone; the step's results are the views.
  for (Bucket &bucket : buckets)
    for (const Member &member : bucket.members) {
      for (Value state : {member.op.getM(), member.op.getV()})
        if (BufferOp old = buffers.lookup(state)) {
          buffers.erase(state);
          old.erase();
        }
      buffers[member.op.getNewParam()] = member.param;
      buffers[member.op.getNewM()] = bucket.m;
      buffers[member.op.getNewV()] = bucket.v;
    }
  return success();
}

LogicalResult Lowering::lowerBlock(Block &block, StringRef where) {
  for (Operation &op : block.without_terminator())
    if (failed(lowerOp(&op, where)))
      return failure();
  return success();
}

LogicalResult Lowering::argBuffer(BlockArgument arg) {
  unsigned i = arg.getArgNumber();
  if (auto p = func.getArgAttrOfType<StringAttr>(i, model::ModelDialect::kParamAttrName))
    return setShard(newBuffer(arg, "parameter", p.getValue()), i);
  if (auto s = func.getArgAttrOfType<StringAttr>(
          i, model::ModelDialect::kOptStateAttrName)) {
    // The moments: f32 with mixed precision.
    BufferOp state =
        newBuffer(arg.getLoc(), mixed ? widen(arg.getType()) : arg.getType(),
                  "optimizer_state", s.getValue());
    buffers[arg] = state;
    return setShard(state, i);
  }
  if (auto in = func.getArgAttrOfType<StringAttr>(i, model::ModelDialect::kInputAttrName)) {
    newBuffer(arg, "input", in.getValue());
    return success();
  }
  return func.emitError("argument ") << i << " is neither a parameter, "
                                     << "an input nor optimizer state";
}

FailureOr<SmallVector<std::pair<Value, BufferOp>>>
Lowering::planGradients(function_ref<bool(Operation *)> inStep,
                        FuncOp zeroGrads) {
  Block &entry = func.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  SmallVector<std::pair<Value, BufferOp>> gradients;
  auto addGradient = [&](Value grad, StringRef name, BufferOp param = {}) {
    // Gradients accumulate in f32 with mixed precision.
    BufferOp buffer =
        newBuffer(grad.getLoc(), mixed ? widen(grad.getType()) : grad.getType(),
                  "gradient", name);
    copySlicing(param, buffer);
    gradients.push_back({grad, buffer});
  };
  for (auto adamw : entry.getOps<model::AdamWOp>()) {
    if (!inStep(adamw))
      continue;
    Value grad = adamw.getGrad();
    // Accumulate what is summed across ranks: the sum runs once per step.
    if (auto reduce = grad.getDefiningOp<model::AllReduceOp>()) {
      stepReductions.insert(reduce);
      grad = reduce.getInputs()[cast<OpResult>(grad).getResultNumber()];
    }
    BufferOp param = buffers.lookup(adamw.getParam());
    addGradient(grad, param.getName().value_or(""), param);
  }
  if (gradients.empty() && !stage)
    for (auto [i, v] : llvm::enumerate(ret.getOperands()))
      if (auto g = func.getResultAttrOfType<StringAttr>(
              i, model::ModelDialect::kGradAttrName))
        addGradient(v, g.getValue());
  for (auto [grad, buffer] : gradients)
    if (failed(planAccumulation(grad, buffer, /*top=*/true)))
      return failure();
  b.setInsertionPointToEnd(&zeroGrads.getBody().front());
  for (auto [grad, buffer] : gradients)
    kernel("ZERO", {}, {buffer}, b.getDictionaryAttr({}), grad.getLoc(),
           ("zero_grads: " + *buffer.getName()).str());
  return gradients;
}


/// With pipeline parallelism each stage gets its own functions, over its
/// own buffers: zero_grads, forward (the ops that do not depend on the
/// loss gradient), backward (those that do) and update (the optimizer).
/// A value made on one stage and used on another is sent by the stage that
/// makes it right after its op, and received by the other at the start of
/// its function of the same phase, in the order the values are made, so
/// both ends agree on the order of the messages.
LogicalResult Lowering::runPipeline(ArrayAttr stages) {
  Block &entry = func.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  // Ops that depend on the loss gradient make the backward.
  DenseSet<Value> dependsOnLossGrad;
  for (BlockArgument arg : func.getArguments())
    if (auto in = func.getArgAttrOfType<StringAttr>(
            arg.getArgNumber(), model::ModelDialect::kInputAttrName);
        in && in.getValue() == "loss_grad")
      dependsOnLossGrad.insert(arg);
  DenseSet<Operation *> backward;
  for (Operation &op : entry.without_terminator()) {
    if (isOptimizerOp(&op) || stageOf(&op) < 0)
      continue;
    if (llvm::any_of(op.getOperands(), [&](Value v) {
          return dependsOnLossGrad.contains(v);
        })) {
      backward.insert(&op);
      for (Value r : op.getResults())
        dependsOnLossGrad.insert(r);
    }
  }
  // The stages other than its own that use a value (the optimizer's
  // reading of its stage's gradients is not a transfer).
  // Parameters used on several stages (tied embeddings) are updated by the
  // first stage that uses them (model-pipeline-partition puts their AdamW
  // there). Each other stage accumulates its own contribution to the
  // gradient over the micro-batches, sends it to the owner at the start of
  // update (before any reduction, so the owner's data-parallel sum covers
  // both), and receives the updated parameter at the end; the owner adds the
  // contributions, reduces, clips (counting the parameter once), updates and
  // sends the parameter back.
  for (auto adamw : entry.getOps<model::AdamWOp>()) {
    Value grad = adamw.getGrad();
    if (auto reduce = grad.getDefiningOp<model::AllReduceOp>())
      grad = reduce.getInputs()[cast<OpResult>(grad).getResultNumber()];
    SmallVector<Value> worklist{grad};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      Operation *def = v.getDefiningOp();
      if (auto sum = dyn_cast_or_null<model::AddOp>(def);
          sum && stageOf(sum) == stageOf(adamw)) {
        worklist.append({sum.getLhs(), sum.getRhs()});
        continue;
      }
      if (def && stageOf(def) >= 0 && stageOf(def) != stageOf(adamw))
        remoteContributions[v] = adamw.getParam();
    }
  }
  auto consumers = [&](Value v) {
    std::set<int64_t> out;
    if (remoteContributions.count(v))
      return out; // sent in update, not as a transfer
    for (Operation *user : v.getUsers())
      if (!isa<func::ReturnOp>(user) && !isOptimizerOp(user) &&
          stageOf(user) >= 0)
        out.insert(stageOf(user));
    return out;
  };
  StringAttr pp = b.getStringAttr("pp");

  // The model's stages (virtual stages) by pipeline rank: rank r runs the
  // stages whose "rank" is r, as its chunks 0, 1, ... in order.
  int64_t ranks = 0;
  std::map<int64_t, std::map<int64_t, int64_t>> chunksOfRank;
  rankOfStage.clear();
  for (auto [c, attr] : llvm::enumerate(stages)) {
    auto info = cast<DictionaryAttr>(attr);
    auto rank = info.getAs<IntegerAttr>("rank");
    auto chunk = info.getAs<IntegerAttr>("chunk");
    int64_t r = rank ? rank.getInt() : int64_t(c);
    rankOfStage.push_back(r);
    chunksOfRank[r][chunk ? chunk.getInt() : 0] = c;
    ranks = std::max(ranks, r + 1);
  }

  for (int64_t s = 0; s < ranks; ++s) {
    const std::map<int64_t, int64_t> &myChunks = chunksOfRank[s];
    auto info = cast<DictionaryAttr>(stages[myChunks.begin()->second]);
    stage = s;
    buffers.clear();
    accumulateInto.clear();
    addInto.clear();
    absorbed.clear();
    stepReductions.clear();
    remoteInto.clear();
    auto inStage = [&](Operation *op) { return rankOf(stageOf(op)) == s; };
    auto isUpdate = [&](Operation *op) {
      return isUpdateOp(op) || isa<model::GradNormOp>(op);
    };

    b.setInsertionPointToEnd(module.getBody());
    std::string prefix = "stage" + std::to_string(s) + "_";
    FuncOp zeroGrads = newFunc(prefix + "zero_grads");
    // Each chunk's forward, backward (and weight gradients).
    struct ChunkFns {
      int64_t virtualStage;
      FuncOp forward, backward, weight;
    };
    SmallVector<ChunkFns> chunkFns;
    for (auto [k, c] : myChunks) {
      std::string chunkPrefix =
          k == 0 ? prefix : prefix + "chunk" + std::to_string(k) + "_";
      chunkFns.push_back(
          {c, newFunc(chunkPrefix + "forward"), newFunc(chunkPrefix + "backward"),
           splitBackward ? newFunc(chunkPrefix + "backward_weight") : FuncOp()});
    }
    FuncOp forwardFn = chunkFns.front().forward;
    FuncOp backwardFn = chunkFns.front().backward;
    FuncOp weightFnOfStage = chunkFns.front().weight;
    FuncOp update = newFunc(prefix + "update");
    firstFunc = zeroGrads;

    for (Operation &op : entry.without_terminator())
      if (inStage(&op))
        for (Value operand : op.getOperands())
          if (auto arg = dyn_cast<BlockArgument>(operand);
              arg && arg.getOwner() == &entry && !buffers.count(arg))
            if (failed(argBuffer(arg)))
              return failure();

    FailureOr<SmallVector<std::pair<Value, BufferOp>>> gradients =
        planGradients(inStage, zeroGrads);
    if (failed(gradients))
      return failure();
    // This stage's contributions to parameters another stage updates: a
    // gradient buffer of its own each, zeroed with the others.
    SmallVector<std::tuple<BufferOp, BufferOp, int64_t>> contributions;
    for (auto [v, param] : remoteContributions) {
      if (rankOf(stageOf(v.getDefiningOp())) != s)
        continue;
      BufferOp paramBuffer = buffers.lookup(param);
      if (!paramBuffer)
        return v.getDefiningOp()->emitOpError(
            "contributes to the gradient of a parameter its stage does not "
            "hold");
      BufferOp buffer = newBuffer(v.getLoc(), storageType(v), "gradient",
                                  paramBuffer.getName().value_or(""));
      copySlicing(paramBuffer, buffer);
      if (failed(planAccumulation(v, buffer, /*top=*/false)))
        return failure();
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToEnd(&zeroGrads.getBody().front());
      kernel("ZERO", {}, {buffer}, b.getDictionaryAttr({}), v.getLoc(),
             ("zero_grads: " + *buffer.getName()).str());
      int64_t owner = -1;
      for (auto adamw : entry.getOps<model::AdamWOp>())
        if (adamw.getParam() == param)
          owner = rankOf(stageOf(adamw));
      contributions.push_back({buffer, paramBuffer, owner - s});
    }

    for (ChunkFns chunk : chunkFns)
      for (auto [fn, isBackward] : {std::pair(chunk.forward, false),
                                    std::pair(chunk.backward, true)}) {
        int64_t c = chunk.virtualStage;
        b.setInsertionPointToEnd(&fn.getBody().front());
        auto inPhase = [&](Operation *op) {
          return !isUpdate(op) && backward.contains(op) == isBackward;
        };
        // Receive what other stages make in this phase for this one.
        for (Operation &op : entry.without_terminator()) {
          if (stageOf(&op) == c || !inPhase(&op) || stageOf(&op) < 0)
            continue;
          for (Value r : op.getResults()) {
            if (!consumers(r).count(c))
              continue;
            if (std::abs(stageOf(&op) - c) != 1)
              return op.emitOpError("makes a value that pipeline stage ")
                     << c << " uses, " << std::abs(stageOf(&op) - c)
                     << " stages away: values move between neighbouring "
                     << "stages only";
            BufferOp recv = newBuffer(r, "activation");
            kernel("RECV", {}, {recv},
                   b.getDictionaryAttr(b.getNamedAttr(
                       "peer", b.getI64IntegerAttr(rankOf(stageOf(&op)) - s))),
                   op.getLoc(),
                   "pipeline: " +
                       std::string(isBackward ? "gradient" : "activation") +
                       " from stage " + std::to_string(stageOf(&op)),
                   ArrayAttr(), pp);
          }
        }
        weightFn = isBackward ? chunk.weight : FuncOp();
        for (Operation &op : entry.without_terminator()) {
          if (stageOf(&op) != c || !inPhase(&op))
            continue;
          if (failed(lowerOp(&op, fn.getSymName())))
            return failure();
          for (Value r : op.getResults())
            for (int64_t to : consumers(r)) {
              if (to == c)
                continue;
              kernel("SEND", {buffers.lookup(r)}, {},
                     b.getDictionaryAttr(b.getNamedAttr(
                         "peer", b.getI64IntegerAttr(rankOf(to) - s))),
                     op.getLoc(),
                     "pipeline: " +
                         std::string(isBackward ? "gradient" : "activation") +
                         " to stage " + std::to_string(to),
                     ArrayAttr(), pp);
            }
        }
      }
    weightFn = FuncOp();
    for (auto [grad, buffer] : *gradients)
      buffers[grad] = buffer;
    b.setInsertionPointToEnd(&update.getBody().front());
    auto peerAttr = [&](int64_t peer) {
      return b.getDictionaryAttr(
          b.getNamedAttr("peer", b.getI64IntegerAttr(peer)));
    };
    // Shared parameters: contributions go to their owner first...
    for (auto [buffer, param, peer] : contributions)
      kernel("SEND", {buffer}, {}, peerAttr(peer), buffer.getLoc(),
             "pipeline: this stage's part of the gradient of " +
                 buffer.getName().value_or("").str() + " to stage " +
                 std::to_string(s + peer) + ", which updates it",
             ArrayAttr(), pp);
    // ...which adds them to its own before reducing.
    SmallVector<std::pair<BufferOp, int64_t>> shared;
    for (auto [v, grad] : remoteInto) {
      int64_t from = rankOf(stageOf(v.getDefiningOp()));
      BufferOp part = newBuffer(v.getLoc(), storageType(v), "activation");
      std::string name = grad.getName().value_or("").str();
      kernel("RECV", {}, {part}, peerAttr(from - s), v.getLoc(),
             "pipeline: stage " + std::to_string(from) +
                 "'s part of the gradient of " + name,
             ArrayAttr(), pp);
      kernel("ADD", {grad, part}, {grad}, b.getDictionaryAttr({}), v.getLoc(),
             "pipeline: the gradient of " + name + " from both stages");
      for (auto [param, paramBuffer] : buffers)
        if (remoteContributions.lookup(v) == param)
          shared.push_back({paramBuffer, from});
    }
    if (zero > 0) {
      if (failed(lowerZeroUpdate(inStage)))
        return failure();
    } else {
      for (Operation &op : entry.without_terminator())
        if (isUpdate(&op) && (inStage(&op) || stageOf(&op) < 0) &&
            failed(lowerOp(&op, update.getSymName())))
          return failure();
    }
    // The updated shared parameters go back to the stages that use them.
    for (auto [paramBuffer, to] : shared)
      kernel("SEND", {paramBuffer}, {}, peerAttr(to - s), paramBuffer.getLoc(),
             "pipeline: the updated " + paramBuffer.getName().value_or("").str() +
                 " to stage " + std::to_string(to),
             ArrayAttr(), pp);
    for (auto [buffer, param, peer] : contributions)
      kernel("RECV", {}, {param}, peerAttr(peer), param.getLoc(),
             "pipeline: the updated " + param.getName().value_or("").str() +
                 " from stage " + std::to_string(s + peer),
             ArrayAttr(), pp);

    // The loss and the norm the trainer reads.
    if (BufferOp loss = buffers.lookup(ret.getOperand(0));
        loss && loss.getRole() == "activation")
      loss.setName("loss");
    for (auto norm : entry.getOps<model::GradNormOp>())
      if (BufferOp b = buffers.lookup(norm.getNorm()))
        b.setName("grad_norm");
    // What one of a micro-batch's calls keeps for another (the forward's
    // saved activations, the backward's output gradients for the weight
    // gradients): one copy per micro-batch in flight (plan-schedule sets
    // how many).
    llvm::DenseMap<StringRef, unsigned> callsUsing;
    SmallVector<FuncOp> calls;
    for (ChunkFns chunk : chunkFns)
      calls.append({chunk.forward, chunk.backward, chunk.weight});
    for (FuncOp fn : calls) {
      if (!fn)
        continue;
      llvm::DenseSet<StringRef> used;
      for (KernelOp k : fn.getBody().getOps<KernelOp>())
        for (ArrayAttr list : {k.getInputs(), k.getOutputs()})
          for (Attribute ref : list)
            used.insert(cast<SymbolRefAttr>(ref).getRootReference().getValue());
      for (StringRef name : used)
        ++callsUsing[name];
    }
    for (BufferOp buffer : module.getOps<BufferOp>())
      if (buffer.getStage() == std::optional<int64_t>(s) &&
          (buffer.getRole() == "activation" || buffer.getRole() == "input") &&
          callsUsing.lookup(buffer.getSymName()) >= 2)
        buffer.setSlotsAttr(b.getI64IntegerAttr(1));

    bool hasZero = !zeroGrads.getBody().front().empty();
    bool hasUpdate = !update.getBody().front().empty();
    b.setInsertionPointToEnd(module.getBody());
    // The further chunks' functions (interleaved schedule).
    SmallVector<Attribute> more;
    for (ChunkFns chunk : ArrayRef(chunkFns).drop_front()) {
      SmallVector<NamedAttribute> fns{
          b.getNamedAttr("forward",
                         FlatSymbolRefAttr::get(chunk.forward.getSymNameAttr())),
          b.getNamedAttr("backward", FlatSymbolRefAttr::get(
                                         chunk.backward.getSymNameAttr()))};
      if (chunk.weight)
        fns.push_back(b.getNamedAttr(
            "backward_weight",
            FlatSymbolRefAttr::get(chunk.weight.getSymNameAttr())));
      more.push_back(b.getDictionaryAttr(fns));
    }
    int64_t layersOfRank = 0;
    for (auto [k, c] : myChunks)
      layersOfRank += cast<IntegerAttr>(
                          cast<DictionaryAttr>(stages[c]).get("num_layers"))
                          .getInt();
    auto stageOp = b.create<StageOp>(
        func.getLoc(), b.getI64IntegerAttr(s),
        cast<IntegerAttr>(info.get("first_layer")),
        b.getI64IntegerAttr(layersOfRank),
        hasZero ? FlatSymbolRefAttr::get(zeroGrads.getSymNameAttr())
                : FlatSymbolRefAttr(),
        FlatSymbolRefAttr::get(forwardFn.getSymNameAttr()),
        FlatSymbolRefAttr::get(backwardFn.getSymNameAttr()),
        weightFnOfStage ? FlatSymbolRefAttr::get(weightFnOfStage.getSymNameAttr())
                        : FlatSymbolRefAttr(),
        hasUpdate ? FlatSymbolRefAttr::get(update.getSymNameAttr())
                  : FlatSymbolRefAttr(),
        IntegerAttr(), ArrayAttr(), ArrayAttr(), DenseI64ArrayAttr());
    if (!more.empty())
      stageOp.setChunksAttr(b.getArrayAttr(more));
    if (!hasZero)
      zeroGrads.erase();
    if (!hasUpdate)
      update.erase();
  }
  func.erase();
  return success();
}

LogicalResult Lowering::run() {
  if (auto stages = module->getAttrOfType<ArrayAttr>("model.pipeline");
      stages && stages.size() > 1)
    return runPipeline(stages);
  b.setInsertionPointToEnd(module.getBody());
  FuncOp zeroGrads = newFunc(kZeroGradsFunc);
  FuncOp microStep = newFunc(kMicroStepFunc);
  FuncOp update = newFunc(kUpdateFunc);
  firstFunc = zeroGrads;

  for (BlockArgument arg : func.getArguments())
    if (failed(argBuffer(arg)))
      return failure();

  // The gradients: what AdamW reads after model-optimizer, the results
  // marked model.grad before it. Each gets its accumulation buffer.
  Block &entry = func.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  FailureOr<SmallVector<std::pair<Value, BufferOp>>> gradients =
      planGradients([](Operation *) { return true; }, zeroGrads);
  if (failed(gradients))
    return failure();
  // The micro-step is everything but the optimizer; the update reads the
  // gradients from their buffers.
  b.setInsertionPointToEnd(&microStep.getBody().front());
  for (Operation &op : entry.without_terminator())
    if (!isUpdateOp(&op) && failed(lowerOp(&op, func.getSymName())))
      return failure();
  for (auto [grad, buffer] : *gradients)
    buffers[grad] = buffer;
  b.setInsertionPointToEnd(&update.getBody().front());
  if (zero > 0) {
    if (failed(lowerZeroUpdate([](Operation *) { return true; })))
      return failure();
  } else {
    for (Operation &op : entry.without_terminator())
      if (isUpdateOp(&op) && failed(lowerOp(&op, func.getSymName())))
        return failure();
  }

  // Name the results.
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    BufferOp buffer = buffers.lookup(v);
    if (!buffer)
      return ret.emitError("result ") << i << " has no buffer";
    if (buffer.getRole() != "activation")
      continue; // a gradient, or updated in place: already named
    if (i == 0)
      buffer.setName("loss");
    else if (i == 1 && isa_and_nonnull<model::GradNormOp>(v.getDefiningOp()))
      buffer.setName("grad_norm");
  }
  for (FuncOp fn : {zeroGrads, update})
    if (fn.getBody().front().empty())
      fn.erase();
  func.erase();
  return success();
}

struct PlanLowerPass : public braid::plan_ir::impl::PlanLowerBase<PlanLowerPass> {
  using PlanLowerBase::PlanLowerBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    if (funcs.size() != 1) {
      module.emitError("plan-lower needs exactly one model function, found ")
          << funcs.size();
      return signalPassFailure();
    }
    if (failed(Lowering(module, funcs.front(), splitBackward, zero, zeroBucketBytes).run()))
      return signalPassFailure();
    // Meshes and model attributes stay: later passes may read them.
  }
};

} // namespace
