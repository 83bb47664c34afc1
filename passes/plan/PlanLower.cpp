//===- PlanLower.cpp - `model` functions to `plan` programs ---------------===//
//
// Implements `plan-lower` (see Passes.td): the buffers, the kernel of each
// op, and the step without pipeline stages. Lowering.h says which file
// holds what.
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

#include "passes/plan/Lowering.h"
#include "passes/plan/PlanBuild.h"

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANLOWER
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid;
using namespace braid::plan_ir;
using namespace braid::plan_ir::lowering;

SmallVector<Value> lowering::accumulatedResults(Operation *op) {
  // The outputs of the op's kernel that its row of Kernels.def says it adds
  // into (one result per output).
  SmallVector<Value> out;
  if (auto lowered = dyn_cast<model::PlanKernelOpInterface>(op))
    if (const plan::KernelRow *row =
            plan::FindKernelRow(lowered.getPlanKernel()))
      for (OpResult r : op->getResults())
        if (row->accumulates(r.getResultNumber()))
          out.push_back(r);
  return out;
}

bool lowering::isOptimizerOp(Operation *op) {
  return isa<model::GradNormOp, model::AdamWOp>(op);
}

int64_t lowering::stageOf(Operation *op) {
  auto attr = op->getAttrOfType<IntegerAttr>("model.stage");
  return attr ? attr.getInt() : 0;
}

Lowering::Lowering(ModuleOp module, func::FuncOp func, bool splitBackward)
    : module(module), func(func), b(module.getContext()),
      splitBackward(splitBackward) {
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(),
                        model::ModelDialect::kParamAttrName))
      if (auto t = dyn_cast<ShapedType>(arg.getType()))
        mixed = mixed || t.getElementType().isBF16() ||
                t.getElementType().isF16();
}

BufferOp Lowering::newBuffer(Location loc, Type type, StringRef role,
                             StringRef name) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(firstFunc);
  return createBuffer(b, loc, "b" + std::to_string(counter++), type, role,
                      name, stage);
}

Type Lowering::widen(Type type) const {
  auto shaped = dyn_cast<RankedTensorType>(type);
  return shaped ? shaped.clone(Float32Type::get(type.getContext())) : type;
}

Type Lowering::statisticType(Type element) const {
  return element.isBF16() || element.isF16()
             ? Float32Type::get(element.getContext())
             : element;
}

void Lowering::copySlicing(BufferOp from, BufferOp to) {
  if (!from || !from.getShard())
    return;
  to.setShardAttr(from.getShardAttr());
  to.setDimAttr(from.getDimAttr());
  to.setBlocksAttr(from.getBlocksAttr());
}

void Lowering::kernel(plan::KernelId kernel, ArrayRef<BufferOp> inputs,
                      ArrayRef<BufferOp> outputs, DictionaryAttr params,
                      Location loc, StringRef provenance, ArrayAttr group,
                      StringAttr rankAxis) {
  createKernel(b, kernel, inputs, outputs, params, loc, provenance, group,
               rankAxis);
}

SmallVector<BufferOp> Lowering::buffersOf(ValueRange values) {
  SmallVector<BufferOp> out;
  for (Value v : values)
    out.push_back(buffers.lookup(v));
  return out;
}

FuncOp Lowering::newFunc(StringRef name) {
  auto fn = b.create<FuncOp>(func.getLoc(), b.getStringAttr(name));
  fn.getBody().push_back(new Block());
  return fn;
}

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
  // A slice of the last dimension (dropout on a LoRA adapter's input
  // beside a row-parallel linear): rank c's first column is c times its
  // count.
  if (auto axis = op->getAttrOfType<StringAttr>("feature_axis")) {
    rankAxis = axis;
    add("col_offset_stride", b.getI64IntegerAttr(lastDim(op->getOperand(0))));
    add("feature_split", b.getI64IntegerAttr(1));
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
        name == "vocab_axis" || name == "head_axis" || name == "seq_axis" ||
        name == "feature_axis")
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
  // Packed documents: attention's last input is the positions; the
  // position table is read at them.
  if (isa<model::AttentionOp, model::AttentionGradOp>(op) &&
      op->getOperands().size() > (isa<model::AttentionOp>(op) ? 3u : 5u))
    add("documents", b.getI64IntegerAttr(1));
  if (auto pos = dyn_cast<model::PositionEmbeddingOp>(op); pos &&
      pos.getPositions())
    add("at_positions", b.getI64IntegerAttr(1));
  if (auto pos = dyn_cast<model::PositionEmbeddingGradOp>(op); pos &&
      pos.getPositions())
    add("at_positions", b.getI64IntegerAttr(1));
  if (isa<model::AttentionCachedOp>(op))
    flag("alibi");
  if (isa<model::GeluOp, model::GeluGradOp>(op))
    flag("tanh");
  return b.getDictionaryAttr(params);
}

/// Decides how `v`, a contribution to the gradient held in `grad`, gets
/// there: through the `model.add` ops and layer results that only pass it on,
/// down to the kernels that make it. `top` is the gradient itself, which the
/// optimizer (or the return) reads from `grad`; every other value must have
/// no use but the one that passes it on.
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

std::optional<unsigned> Lowering::overwritableInput(Operation *op) {
  auto lowered = dyn_cast<model::PlanKernelOpInterface>(op);
  if (!lowered || op->getNumResults() != 1)
    return std::nullopt;
  const plan::KernelRow *row = plan::FindKernelRow(lowered.getPlanKernel());
  Value result = op->getResult(0);
  if (!row || accumulateInto.count(result) || addInto.count(result))
    return std::nullopt;
  const plan::KernelFlag flags[] = {plan::kOverwritesInput0,
                                    plan::kOverwritesInput1};
  for (unsigned i = 0; i < 2 && i < op->getNumOperands(); ++i) {
    if (!row->has(flags[i]))
      continue;
    Value in = op->getOperand(i);
    // An activation an op of this block made (not a block argument, whose
    // buffer is its caller's), of the result's storage type.
    Operation *def = in.getDefiningOp();
    BufferOp buffer = buffers.lookup(in);
    if (!def || def->getBlock() != op->getBlock() || !buffer ||
        buffer.getRole() != "activation" || accumulateInto.count(in) ||
        addInto.count(in) || buffer.getType() != storageType(result))
      continue;
    // Read by nothing after the op: every other reader comes before it in
    // the same function (of the same stage, or inference phase; not a
    // weight gradient that split-backward moves later, not the block's
    // terminator, which passes the value on).
    auto phase = [](Operation *o) {
      return o->getAttr(model::ModelDialect::kPhaseAttrName);
    };
    bool dies = llvm::all_of(in.getUsers(), [&](Operation *user) {
      if (user == op)
        return true;
      return user->getBlock() == op->getBlock() &&
             user->isBeforeInBlock(op) &&
             !user->hasTrait<OpTrait::IsTerminator>() &&
             stageOf(user) == stageOf(op) && phase(user) == phase(op) &&
             !(splitBackward && isa<model::LinearGradWeightOp>(user));
    });
    if (dies)
      return i;
  }
  return std::nullopt;
}

LogicalResult Lowering::lowerOp(Operation *op, StringRef where) {
  if (absorbed.contains(op))
    return success();
  if (weightFn && isa<model::LinearGradWeightOp>(op))
    return lowerIntoWeightFunction(op);
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
        kernel(plan::KernelId::ADD, {grad, buffers[result]}, {grad}, b.getDictionaryAttr({}),
               layer.getLoc(), name + " (gradient accumulation)");
    }
    return success();
  }
  // An op of an unregistered dialect has none.
  if (!op->getDialect() || !isa<model::ModelDialect>(op->getDialect()))
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
    kernel(reduce.getPlanKernel(), buffersOf(reduce.getInputs()),
           buffersOf(reduce.getResults()), b.getDictionaryAttr(params),
           op->getLoc(), reduce.getReason(), reduce.getAxes());
    return success();
  }
  if (isa<model::AllGatherOp, model::ReduceScatterOp>(op)) {
    // Sequence parallelism's collectives: a new buffer of the other size.
    newBuffer(op->getResult(0), "activation");
    kernel(cast<model::PlanKernelOpInterface>(op).getPlanKernel(),
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
  auto lowered = dyn_cast<model::PlanKernelOpInterface>(op);
  if (!lowered)
    return op->emitOpError("names no plan kernel to lower to");
  plan::KernelId kernelId = lowered.getPlanKernel();
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
      kernel(kernelId, ins,
             {master, buffers.lookup(adamw.getM()),
              buffers.lookup(adamw.getV()), param},
             *params, op->getLoc(), provenance, ArrayAttr(), rankAxis);
      return success();
    }
  } else if (auto reorder = dyn_cast<model::ReorderRowsOp>(op)) {
    // In place: a cache's rows reordered.
    buffers[reorder.getResult()] = buffers.lookup(reorder.getX());
  } else if (auto cached = dyn_cast<model::AttentionCachedOp>(op)) {
    // The caches are updated in place: the new ones are the old buffers.
    newBuffer(cached.getResult(), "activation");
    buffers[cached.getNewCacheK()] = buffers.lookup(cached.getCacheK());
    buffers[cached.getNewCacheV()] = buffers.lookup(cached.getCacheV());
  } else if (std::optional<unsigned> over = overwritableInput(op)) {
    // In place (Kernels.def's kOverwritesInput): the result takes the
    // buffer of an input that dies here.
    buffers[op->getResult(0)] = buffers.lookup(op->getOperand(*over));
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
      kernel(plan::KernelId::ZERO, {}, {buffers.lookup(v)}, b.getDictionaryAttr({}),
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
    // The log-sum-exp is the sixth input, before packed documents'
    // positions.
    if (BufferOp lse = lseOf.lookup(buffers.lookup(grad.getOut())))
      inputs.insert(inputs.begin() + 5, lse);
  } else if (auto pos = dyn_cast<model::PositionEmbeddingOp>(op);
             pos && pos.getPositions()) {
    // (table, positions): the positions give the shape the tokens gave.
    inputs.erase(inputs.begin() + 1);
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
  kernel(kernelId, inputs, outputs, *params, op->getLoc(), provenance,
         ArrayAttr(), rankAxis);
  for (Value v : op->getResults())
    if (BufferOp grad = addInto.lookup(v))
      kernel(plan::KernelId::ADD, {grad, buffers.lookup(v)}, {grad}, b.getDictionaryAttr({}),
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
  kernel(plan::KernelId::GRAD_NORM, inputs, buffersOf(op->getResults()),
         b.getDictionaryAttr(params), op.getLoc(), provenance, group);
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
  if (auto p = func.getArgAttrOfType<StringAttr>(i, model::ModelDialect::kParamAttrName)) {
    BufferOp param = newBuffer(arg, "parameter", p.getValue());
    if (func.getArgAttr(i, model::ModelDialect::kFrozenAttrName))
      param.setFrozen(true);
    return setShard(param, i);
  }
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
  if (auto cache = func.getArgAttrOfType<StringAttr>(
          i, model::ModelDialect::kCacheAttrName)) {
    // Under tensor parallelism, the rank's kv heads.
    return setShard(newBuffer(arg, "kv_cache", cache.getValue()), i);
  }
  return func.emitError("argument ") << i << " is neither a parameter, "
                                     << "an input, optimizer state nor a "
                                     << "cache";
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
    kernel(plan::KernelId::ZERO, {}, {buffer}, b.getDictionaryAttr({}), grad.getLoc(),
           ("zero_grads: " + *buffer.getName()).str());
  return gradients;
}

LogicalResult Lowering::run() {
  if (module->hasAttr("model.generate"))
    return runGenerate();
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
  for (Operation &op : entry.without_terminator())
    if (isUpdateOp(&op) && failed(lowerOp(&op, func.getSymName())))
      return failure();

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

namespace {

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
    if (failed(Lowering(module, funcs.front(), splitBackward).run()))
      return signalPassFailure();
    // Meshes and model attributes stay: later passes may read them.
  }
};

} // namespace
