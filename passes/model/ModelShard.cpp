//===- ModelShard.cpp - The training step of one rank of a mesh -----------===//
//
// Implements `model-shard` (see Passes.td): tensor parallelism first (the
// local program of a tp rank: shapes, attributes and tp collectives), then
// data parallelism (the gradient sums over dp, and over tp for the gradients
// tensor parallelism leaves partial).
//
// Tensor parallelism follows Megatron's policy, decided on the graph rather
// than on parameter names (docs/Rationale-Parallelism.md). Every value gets a
// layout over `tp`: replicated, split along one dimension (possibly made of
// blocks, each split evenly: a fused [Q | K | V]), or partial (each rank holds
// a term of a sum). Parameters are decided at their first use: an embedding
// table is split by vocabulary rows; a linear whose input is replicated is
// column-parallel (its weight split on the output dimension), unless it makes
// the keys or values of an attention whose kv heads do not divide by tp (then
// it is replicated); a linear whose input is split is row-parallel. Every
// other op's layout follows from its operands'. Partial sums made in the
// forward (row-parallel linear, vocab-parallel embedding) are all-reduced at
// once, as Megatron's RowParallelLinear does; those of the backward
// (input gradients of column-parallel linears, ...) where a consumer needs
// the whole value, so that the sum of the Q, K and V (or gate and up)
// contributions is reduced once.
//
// With sequence parallelism the whole values between blocks become sequence
// slices (a split of dimension 1): the forward's partial sums are
// reduce-scattered into them, and ops that need whole values all-gather
// them first.
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace braid::model {
#define GEN_PASS_DEF_MODELSHARD
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

constexpr llvm::StringLiteral kMeshName = "mesh";
constexpr llvm::StringLiteral kTp = "tp";

struct ModelShardPass : public braid::model::impl::ModelShardBase<ModelShardPass> {
  using ModelShardBase::ModelShardBase;
  void runOnOperation() override;
};

int64_t bytesOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
}

/// How a value is laid out over the ranks of `tp`.
struct Layout {
  enum Kind { Replicated, Split, Partial } kind = Replicated;
  /// Split: the dimension split over tp.
  int64_t dim = 0;
  /// Split: the global sizes of the blocks the dimension is made of (empty:
  /// one block).
  SmallVector<int64_t> blocks;
  /// Partial: what made the partial sums, for the reason of their all-reduce.
  std::string why;

  static Layout split(int64_t dim, ArrayRef<int64_t> blocks = {}) {
    Layout l;
    l.kind = Split;
    l.dim = dim;
    l.blocks.assign(blocks.begin(), blocks.end());
    return l;
  }
  static Layout partial(StringRef why) {
    Layout l;
    l.kind = Partial;
    l.why = why.str();
    return l;
  }
  bool isSplit() const { return kind == Split; }
  bool isPartial() const { return kind == Partial; }
  bool isReplicated() const { return kind == Replicated; }
  bool sameAs(const Layout &o) const {
    return kind == o.kind && (kind != Split || (dim == o.dim && blocks == o.blocks));
  }
};

/// The local program of a tensor-parallel rank (see the file comment).
class TensorParallel {
public:
  TensorParallel(func::FuncOp func, int64_t tp, bool sp)
      : func(func), tp(tp), sp(sp), b(func.getContext()),
        mesh(FlatSymbolRefAttr::get(func.getContext(), kMeshName)) {}

  LogicalResult run();

  /// The layout of a gradient the optimizer reads (after run()).
  const Layout &layoutOf(Value v) { return layouts[v]; }

private:
  LogicalResult visitBlock(Block &block);
  LogicalResult visit(Operation *op);
  LogicalResult visitLinear(LinearOp op);
  LogicalResult visitCrossEntropy(CrossEntropyOp op);
  LogicalResult visitCrossEntropyGrad(CrossEntropyGradOp op);
  LogicalResult visitAttention(Operation *op, Value k, ValueRange kvResults);
  LogicalResult visitOptimizer(Operation *op);
  LogicalResult visitRowwise(Operation *op);

  /// The parameter argument of `func` that `v` is (directly or as a layer's
  /// block argument), or null.
  BlockArgument paramOf(Value v) const { return params.lookup(v); }
  bool undecided(Value v) const {
    BlockArgument p = paramOf(v);
    return p && !decided.contains(p);
  }
  /// Fixes the layout of the parameter `v` stands for, and the types of its
  /// argument and of every layer argument bound to it.
  LogicalResult decide(Value v, Layout layout, Operation *at);
  /// `type` with the dimension `layout` splits divided by tp.
  FailureOr<Type> localType(Type type, const Layout &layout, Operation *at,
                            StringRef what);
  /// Gives `v` (whose type is still the global one) its layout and local type.
  LogicalResult setLayout(Value v, Layout layout, Operation *at);
  /// True when `v` is split along the sequence (sequence parallelism): a
  /// `[batch, seq, ...]` activation split on dimension 1.
  bool isSeq(Value v) {
    Layout l = layouts.lookup(v);
    return sp && l.isSplit() && l.dim == 1 &&
           cast<RankedTensorType>(v.getType()).getRank() >= 3;
  }
  /// The whole value of `v` for `user`, collected just before it (and
  /// reused by later users in the same block): partial sums all-reduced,
  /// sequence slices all-gathered. Other values are returned as they are.
  Value whole(Value v, Operation *user);
  /// `v` as this rank's sequence slice for `user`: partial sums
  /// reduce-scattered. Other values are returned as they are.
  Value seqSlice(Value v, Operation *user);
  /// Replaces the operands of `op` that are partial sums or sequence slices
  /// by their whole values.
  void resolveOperands(Operation *op);
  /// Sums the partial result of a forward op right after it: an all-reduce,
  /// or with sequence parallelism a reduce-scatter into sequence slices.
  void reduceNow(Value v, Operation *op);
  AllReduceOp createAllReduce(Location loc, Value v, StringRef reason,
                              bool max = false);
  Value createSliceCollective(Location loc, Value v, bool gather,
                              StringRef reason);
  std::string paramName(Value v);
  LogicalResult unsupported(Operation *op, const Twine &why) {
    return op->emitOpError("cannot be split over tp = ") << tp << ": " << why;
  }

  func::FuncOp func;
  int64_t tp;
  bool sp;
  OpBuilder b;
  FlatSymbolRefAttr mesh;
  DenseMap<Value, Layout> layouts;
  /// Values that stand for a parameter argument: the argument itself and
  /// the layer block arguments bound to it.
  DenseMap<Value, BlockArgument> params;
  DenseMap<BlockArgument, SmallVector<Value>> bound;
  DenseSet<BlockArgument> decided;
  /// The global log-sum-exp of each vocab-parallel loss, by logits.
  DenseMap<Value, Value> lseOf;
  /// The whole value and the sequence slice of values already resolved.
  DenseMap<Value, Value> wholeOf, sliceOf;
};

std::string TensorParallel::paramName(Value v) {
  BlockArgument p = paramOf(v);
  if (!p)
    return "?";
  auto name = func.getArgAttrOfType<StringAttr>(p.getArgNumber(),
                                                ModelDialect::kParamAttrName);
  return name ? name.getValue().str() : "?";
}

FailureOr<Type> TensorParallel::localType(Type type, const Layout &layout,
                                          Operation *at, StringRef what) {
  if (!layout.isSplit())
    return type;
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  int64_t &d = shape[layout.dim];
  SmallVector<int64_t> blocks(layout.blocks);
  if (blocks.empty())
    blocks.push_back(d);
  int64_t total = 0;
  for (int64_t block : blocks) {
    if (block % tp != 0)
      return at->emitOpError("cannot split ")
             << what << " " << tensor << " over tp = " << tp << ": dimension "
             << layout.dim << (blocks.size() > 1 ? " has a block of " : " is ")
             << block << ", not a multiple of " << tp;
    total += block;
  }
  if (total != d)
    return at->emitOpError("blocks of ") << what << " do not add up to " << d;
  d /= tp;
  return Type(RankedTensorType::get(shape, tensor.getElementType()));
}

LogicalResult TensorParallel::setLayout(Value v, Layout layout,
                                        Operation *at) {
  FailureOr<Type> type = localType(v.getType(), layout, at, "its value");
  if (failed(type))
    return failure();
  v.setType(*type);
  layouts[v] = layout;
  return success();
}

LogicalResult TensorParallel::decide(Value v, Layout layout,
                                     Operation *at) {
  BlockArgument p = paramOf(v);
  if (decided.contains(p)) {
    if (!layouts.lookup(p).sameAs(layout))
      return unsupported(at, "parameter " + paramName(v) +
                                 " is used with two different splits");
    return success();
  }
  FailureOr<Type> type =
      localType(p.getType(), layout, at, "parameter " + paramName(v));
  if (failed(type))
    return failure();
  decided.insert(p);
  for (Value use : bound[p]) {
    use.setType(*type);
    layouts[use] = layout;
  }
  return success();
}

AllReduceOp TensorParallel::createAllReduce(Location loc, Value v,
                                            StringRef reason, bool max) {
  auto reduce = b.create<AllReduceOp>(loc, TypeRange{v.getType()},
                                      ValueRange{v}, mesh,
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
  shape[1] = gather ? shape[1] * tp : shape[1] / tp;
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  auto axes = b.getStrArrayAttr({kTp});
  Value r;
  if (gather)
    r = b.create<AllGatherOp>(loc, resultType, v, mesh, axes,
                              b.getI64IntegerAttr(1), b.getStringAttr(reason));
  else
    r = b.create<ReduceScatterOp>(loc, resultType, v, mesh, axes,
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
      sp ? createSliceCollective(op->getLoc(), v, /*gather=*/false,
                                 "model-shard: sequence-parallel sum of the " +
                                     why + ", each rank keeping its sequence "
                                           "slice")
         : createAllReduce(op->getLoc(), v,
                           "model-shard: tensor-parallel sum of the " + why)
               .getResult(0);
  v.replaceAllUsesExcept(sum, sum.getDefiningOp());
}

/// True when `v` (through rope) is the keys or values of an attention whose
/// Whether `l` is split as a packed [gate | up]: two blocks of one size.
bool isGateUp(const Layout &l) {
  return l.isSplit() && l.blocks.size() == 2 && l.blocks[0] == l.blocks[1];
}

/// kv heads do not divide by `tp`, which then keeps them whole on every rank.
bool feedsReplicatedKv(Value v, int64_t tp) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (auto rope = dyn_cast<RopeOp>(user)) {
      if (feedsReplicatedKv(rope.getResult(), tp))
        return true;
    } else if (auto attention = dyn_cast<AttentionOp>(user)) {
      if (use.getOperandNumber() > 0 &&
          attention.getNumKvHeadsAttr().getInt() % tp != 0)
        return true;
    }
  }
  return false;
}

LogicalResult TensorParallel::visitLinear(LinearOp op) {
  resolveOperands(op);
  int64_t outAxis = op.getTransposeW() ? 0 : 1, inAxis = 1 - outAxis;
  Value w = op.getWeight(), bias = op.getBias();
  Layout x = layouts[op.getX()];
  Value y = op.getResult();
  if (x.isReplicated()) {
    // Column-parallel, unless the weight is whole or must stay whole.
    Layout weight;
    if (undecided(w)) {
      if (!feedsReplicatedKv(y, tp)) {
        SmallVector<int64_t> blocks;
        if (y.hasOneUse())
          if (auto split = dyn_cast<QkvSplitOp>(*y.getUsers().begin())) {
            int64_t hd = split.getHeadDimAttr().getInt();
            int64_t kv = split.getNumKvHeadsAttr().getInt();
            if (kv % tp != 0)
              return unsupported(op, "the fused QKV projection " +
                                         paramName(w) + " has " +
                                         Twine(kv) + " kv heads");
            if (split.getLayout() == QkvLayout::grouped)
              blocks = {split.getNumHeadsAttr().getInt() * hd, kv * hd,
                        kv * hd};
          }
        for (Operation *user : y.getUsers())
          if (auto swiglu = dyn_cast<SwigluOp>(user);
              swiglu && swiglu.isPacked()) {
            // A fused gate/up projection (its output is also kept for the
            // backward): each rank takes its columns of the gate block and
            // of the up block.
            int64_t f =
                cast<RankedTensorType>(swiglu.getType()).getShape().back();
            blocks = {f, f};
          }
        weight = Layout::split(outAxis, blocks);
      }
      if (failed(decide(w, weight, op)))
        return failure();
    }
    weight = layouts[w];
    if (weight.isReplicated()) {
      if (bias && undecided(bias) && failed(decide(bias, Layout(), op)))
        return failure();
      return setLayout(y, Layout(), op);
    }
    if (!weight.isSplit() || weight.dim != outAxis)
      return unsupported(op, "weight " + paramName(w) +
                                 " is split on its input dimension but x is "
                                 "whole");
    Layout column = Layout::split(0, weight.blocks);
    if (bias && failed(decide(bias, column, op)))
      return failure();
    Layout result = Layout::split(
        cast<RankedTensorType>(y.getType()).getRank() - 1, weight.blocks);
    return setLayout(y, result, op);
  }
  if (x.isSplit() &&
      x.dim == cast<RankedTensorType>(op.getX().getType()).getRank() - 1) {
    // Row-parallel: partial sums; each rank adds 1/tp of the bias.
    if (undecided(w) &&
        failed(decide(w, Layout::split(inAxis, x.blocks), op)))
      return failure();
    Layout weight = layouts[w];
    if (!weight.isSplit() || weight.dim != inAxis || weight.blocks != x.blocks)
      return unsupported(op, "x is split on its last dimension but weight " +
                                 paramName(w) +
                                 " is not split the same way on its input "
                                 "dimension");
    if (bias) {
      if (undecided(bias) && failed(decide(bias, Layout(), op)))
        return failure();
      op.setBiasScaleAttr(b.getF64FloatAttr(1.0 / double(tp)));
    }
    if (failed(setLayout(y, Layout::partial(
                                "row-parallel model.linear outputs (" +
                                paramName(w) + " split on its input dimension)"),
                         op)))
      return failure();
    reduceNow(y, op);
    return success();
  }
  return unsupported(op, "x is split on a dimension other than its last");
}

LogicalResult TensorParallel::visitCrossEntropy(CrossEntropyOp op) {
  resolveOperands(op);
  Value logits = op.getLogits();
  Layout l = layouts[logits];
  auto type = cast<RankedTensorType>(logits.getType());
  if (l.isReplicated())
    return setLayout(op.getLoss(), Layout(), op);
  if (!l.isSplit() || l.dim != type.getRank() - 1 || !l.blocks.empty())
    return unsupported(op, "the logits are split on a dimension other than "
                           "the vocabulary");
  // Vocab-parallel: no rank holds whole rows of logits.
  b.setInsertionPoint(op);
  Location loc = op.getLoc();
  auto rows = RankedTensorType::get(type.getShape().drop_back(),
                                    type.getElementType());
  auto localMax = b.create<CrossEntropyMaxOp>(loc, rows, logits);
  Value rowMax =
      createAllReduce(loc, localMax,
                      "model-shard: vocab-parallel cross-entropy, the row "
                      "maxima of the logits over the vocabulary slices",
                      /*max=*/true)
          .getResult(0);
  SmallVector<int64_t> pairShape(type.getShape());
  pairShape.back() = 2;
  // The partials in the loss's element type (f32 for bf16 logits): sums of
  // exponentials in bf16 would keep 8 bits.
  Type lossElement = cast<ShapedType>(op.getLoss().getType()).getElementType();
  auto partial = b.create<CrossEntropyPartialOp>(
      loc, RankedTensorType::get(pairShape, lossElement), logits,
      op.getTargets(), rowMax, op.getIgnoreIndexAttr(), b.getStringAttr(kTp));
  Value sums =
      createAllReduce(loc, partial,
                      "model-shard: vocab-parallel cross-entropy, the sums of "
                      "exponentials and the target logits over the vocabulary "
                      "slices")
          .getResult(0);
  Type lossType = op.getLoss().getType();
  auto finish = b.create<CrossEntropyFinishOp>(
      loc, TypeRange{lossType, RankedTensorType::get(
                                   rows.getShape(),
                                   cast<ShapedType>(lossType).getElementType())},
      sums, rowMax, op.getTargets(), op.getIgnoreIndexAttr());
  for (Value v : {localMax.getResult(), partial.getResult(),
                  finish.getLoss(), finish.getLse()})
    layouts[v] = Layout();
  lseOf[logits] = finish.getLse();
  op.getLoss().replaceAllUsesWith(finish.getLoss());
  op.erase();
  return success();
}

LogicalResult TensorParallel::visitCrossEntropyGrad(CrossEntropyGradOp op) {
  resolveOperands(op);
  Layout l = layouts[op.getLogits()];
  if (l.isReplicated())
    return setLayout(op.getDlogits(), Layout(), op);
  Value lse = lseOf.lookup(op.getLogits());
  if (!lse)
    return unsupported(op, "its logits have no vocab-parallel loss before it");
  b.setInsertionPoint(op);
  auto grad = b.create<CrossEntropyGradOp>(
      op.getLoc(), op.getLogits().getType(), op.getLogits(), op.getTargets(),
      op.getDloss(), lse, op.getIgnoreIndexAttr(), b.getStringAttr(kTp));
  layouts[grad.getResult()] = l;
  op.getResult().replaceAllUsesWith(grad.getResult());
  op.erase();
  return success();
}

/// The local attributes of an attention (or its gradient) whose query heads
/// are split: `kvSplit` says whether its kv heads are too.
template <typename OpT>
void setHeadSlice(OpT op, int64_t tp, bool kvSplit, OpBuilder &b) {
  int64_t heads = op.getNumHeadsAttr().getInt();
  int64_t kvHeads = op.getNumKvHeadsAttr().getInt();
  op.setNumHeadsAttr(b.getI64IntegerAttr(heads / tp));
  op.setNumKvHeadsAttr(b.getI64IntegerAttr(kvSplit ? kvHeads / tp : kvHeads));
  op.setHeadAxisAttr(b.getStringAttr(kTp));
  op.setGlobalHeadsAttr(b.getI64IntegerAttr(heads));
  op.setGlobalKvHeadsAttr(b.getI64IntegerAttr(kvHeads));
}

LogicalResult TensorParallel::visitAttention(Operation *op, Value k,
                                             ValueRange kvResults) {
  resolveOperands(op);
  Value q = op->getOperand(0);
  Layout lq = layouts[q], lk = layouts[k];
  auto qType = cast<RankedTensorType>(q.getType());
  if (lq.isReplicated() && lk.isReplicated()) {
    for (Value r : op->getResults())
      if (failed(setLayout(r, Layout(), op)))
        return failure();
    return success();
  }
  int64_t last = qType.getRank() - 1;
  if (!lq.isSplit() || lq.dim != last || lk.isPartial() ||
      (lk.isSplit() && lk.dim != last))
    return unsupported(op, "q must be split by heads, and k and v split by "
                           "heads or whole");
  int64_t heads = op->getAttrOfType<IntegerAttr>("num_heads").getInt();
  if (heads % tp != 0)
    return unsupported(op, Twine(heads) + " heads");
  bool kvSplit = lk.isSplit();
  if (auto fwd = dyn_cast<AttentionOp>(op))
    setHeadSlice(fwd, tp, kvSplit, b);
  else
    setHeadSlice(cast<AttentionGradOp>(op), tp, kvSplit, b);
  Layout byHeads = Layout::split(last);
  if (failed(setLayout(op->getResult(0), byHeads, op)))
    return failure();
  for (Value r : kvResults)
    if (failed(setLayout(r,
                         kvSplit ? byHeads
                                 : Layout::partial(
                                       "model.attention_grad key/value "
                                       "gradients (kv heads replicated over "
                                       "tp, each rank has its query heads' "
                                       "terms)"),
                         op)))
      return failure();
  return success();
}

LogicalResult TensorParallel::visitOptimizer(Operation *op) {
  // Gradients stay partial here: the step's reductions sum them (with dp).
  if (auto norm = dyn_cast<GradNormOp>(op)) {
    SmallVector<bool> replicated;
    bool anySplit = false;
    for (Value g : norm.getGrads()) {
      replicated.push_back(!layouts[g].isSplit());
      anySplit |= layouts[g].isSplit();
    }
    if (anySplit) {
      norm.setMeshAttr(mesh);
      norm.setAxesAttr(b.getStrArrayAttr({kTp}));
      norm.setReplicatedAttr(b.getDenseBoolArrayAttr(replicated));
    }
    for (Value r : op->getResults())
      layouts[r] = Layout();
    return success();
  }
  auto adamw = cast<AdamWOp>(op);
  Layout l = layouts[adamw.getParam()];
  if (l.isPartial())
    return unsupported(op, "the parameter is partial");
  Layout g = layouts[adamw.getGrad()];
  if (!g.isPartial() && !g.sameAs(l))
    return unsupported(op, "the gradient of " + paramName(adamw.getParam()) +
                               " is not split as the parameter");
  for (Value state : {adamw.getM(), adamw.getV()}) {
    auto arg = dyn_cast<BlockArgument>(state);
    if (!arg || arg.getOwner()->getParentOp() != func)
      return unsupported(op, "the moments are not arguments of the step");
    if (failed(setLayout(arg, l, op)))
      return failure();
  }
  for (Value r : op->getResults())
    if (failed(setLayout(r, l, op)))
      return failure();
  return success();
}

LogicalResult TensorParallel::visit(Operation *op) {
  if (isa<AllReduceOp>(op))
    return success(); // inserted by this pass
  if (auto layer = dyn_cast<LayerOp>(op)) {
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
  if (isa<YieldOp, func::ReturnOp>(op))
    return success();
  // Parameters read in any other role than a linear's weight or an
  // embedding's table stay whole.
  if (!isa<LinearOp, EmbeddingOp>(op))
    for (Value operand : op->getOperands())
      if (undecided(operand) && failed(decide(operand, Layout(), op)))
        return failure();

  if (auto linear = dyn_cast<LinearOp>(op))
    return visitLinear(linear);
  if (auto ce = dyn_cast<CrossEntropyOp>(op))
    return visitCrossEntropy(ce);
  if (auto ceg = dyn_cast<CrossEntropyGradOp>(op))
    return visitCrossEntropyGrad(ceg);
  if (auto attention = dyn_cast<AttentionOp>(op))
    return visitAttention(op, attention.getK(), {});
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    return visitAttention(op, grad.getK(), {grad.getDk(), grad.getDv()});
  if (isa<GradNormOp, AdamWOp>(op))
    return visitOptimizer(op);

  if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
    Value table = embedding.getTable();
    if (undecided(table) && failed(decide(table, Layout::split(0), op)))
      return failure();
    Layout t = layouts[table];
    if (t.isReplicated())
      return setLayout(embedding.getResult(), Layout(), op);
    if (!t.isSplit() || t.dim != 0 || !t.blocks.empty())
      return unsupported(op, "the table is not split by vocabulary rows");
    embedding.setVocabAxisAttr(b.getStringAttr(kTp));
    if (failed(setLayout(embedding.getResult(),
                         Layout::partial("vocab-parallel model.embedding "
                                         "lookups (each rank has the rows of "
                                         "its vocabulary slice)"),
                         op)))
      return failure();
    reduceNow(embedding.getResult(), op);
    return success();
  }
  if (auto grad = dyn_cast<EmbeddingGradOp>(op)) {
    resolveOperands(op);
    grad.setVocabAxisAttr(b.getStringAttr(kTp));
    return setLayout(grad.getResult(), Layout::split(0), op);
  }
  if (auto grad = dyn_cast<LinearGradInputOp>(op)) {
    Layout w = layouts[grad.getWeight()];
    int64_t outAxis = grad.getTransposeW() ? 0 : 1;
    int64_t last = cast<RankedTensorType>(grad.getDy().getType()).getRank() - 1;
    if (w.isSplit() && w.dim == outAxis) {
      Layout dy = layouts[grad.getDy()];
      if (!dy.isSplit() || dy.dim != last)
        return unsupported(op, "dy must be split as the column-parallel "
                               "weight's outputs");
      return setLayout(grad.getResult(),
                       Layout::partial("model.linear_grad_input input "
                                       "gradients of the column-parallel " +
                                       paramName(grad.getWeight())),
                       op);
    }
    if (w.isSplit()) {
      resolveOperands(op);
      return setLayout(grad.getResult(), Layout::split(last, w.blocks), op);
    }
    // A whole weight: linear in dy, so a partial dy gives a partial dx.
    Layout dy = layouts[grad.getDy()];
    if (dy.isSplit())
      return unsupported(op, "dy is split but the weight is whole");
    return setLayout(grad.getResult(), dy, op);
  }
  if (auto grad = dyn_cast<LinearGradWeightOp>(op)) {
    if (isSeq(grad.getX())) // the saved input of a column-parallel linear
      grad.getXMutable().set(whole(grad.getX(), op));
    Layout x = layouts[grad.getX()], dy = layouts[grad.getDy()];
    int64_t outAxis = grad.getTransposeW() ? 0 : 1, inAxis = 1 - outAxis;
    if (x.isPartial())
      return unsupported(op, "x is partial");
    if (x.isReplicated())
      return setLayout(grad.getResult(),
                       dy.isSplit() ? Layout::split(outAxis, dy.blocks) : dy,
                       op);
    grad.getDyMutable().set(whole(grad.getDy(), op));
    if (!layouts[grad.getDy()].isReplicated())
      return unsupported(op, "x and dy are both split");
    return setLayout(grad.getResult(), Layout::split(inAxis, x.blocks), op);
  }
  if (auto grad = dyn_cast<BiasGradOp>(op)) {
    Layout dy = layouts[grad.getDy()];
    if (isSeq(grad.getDy()))
      return setLayout(grad.getResult(),
                       Layout::partial("model.bias_grad gradients of this "
                                       "rank's sequence slice"),
                       op);
    return setLayout(grad.getResult(),
                     dy.isSplit() ? Layout::split(0, dy.blocks) : dy, op);
  }
  if (isa<RopeOp, RopeGradOp>(op)) { // linear, and per head
    Layout l = layouts[op->getOperand(0)];
    return setLayout(op->getResult(0), l, op);
  }
  if (auto add = dyn_cast<AddOp>(op)) {
    Layout l = layouts[add.getLhs()], r = layouts[add.getRhs()];
    if (l.isPartial() && r.isPartial()) // a sum of partial sums
      return setLayout(add.getResult(),
                       Layout::partial(l.why == r.why ? l.why
                                                      : l.why + " plus " + r.why),
                       op);
    if (isSeq(add.getLhs()) || isSeq(add.getRhs()))
      for (OpOperand &operand : op->getOpOperands())
        operand.set(seqSlice(operand.get(), op));
    else
      resolveOperands(op);
    Layout l2 = layouts[add.getLhs()], r2 = layouts[add.getRhs()];
    if (!l2.sameAs(r2))
      return unsupported(op, "its operands are split differently");
    return setLayout(add.getResult(), l2, op);
  }
  if (auto split = dyn_cast<QkvSplitOp>(op)) {
    Layout l = layouts[split.getQkv()];
    if (l.isSplit()) {
      int64_t heads = split.getNumHeadsAttr().getInt();
      int64_t kv = split.getNumKvHeadsAttr().getInt();
      if (heads % tp != 0 || kv % tp != 0)
        return unsupported(op, Twine(heads) + " heads and " + Twine(kv) +
                                   " kv heads");
      split.setNumHeadsAttr(b.getI64IntegerAttr(heads / tp));
      split.setNumKvHeadsAttr(b.getI64IntegerAttr(kv / tp));
      Layout byHeads = Layout::split(l.dim);
      for (Value r : op->getResults())
        if (failed(setLayout(r, byHeads, op)))
          return failure();
      return success();
    }
  }
  if (auto concat = dyn_cast<QkvConcatOp>(op)) {
    Layout l = layouts[concat.getQ()];
    if (l.isSplit()) {
      resolveOperands(op);
      int64_t heads = concat.getNumHeadsAttr().getInt();
      int64_t kv = concat.getNumKvHeadsAttr().getInt();
      int64_t hd = concat.getHeadDimAttr().getInt();
      SmallVector<int64_t> blocks;
      if (concat.getLayout() == QkvLayout::grouped)
        blocks = {heads * hd, kv * hd, kv * hd};
      concat.setNumHeadsAttr(b.getI64IntegerAttr(heads / tp));
      concat.setNumKvHeadsAttr(b.getI64IntegerAttr(kv / tp));
      return setLayout(concat.getResult(), Layout::split(l.dim, blocks), op);
    }
  }
  if (auto swiglu = dyn_cast<SwigluOp>(op); swiglu && swiglu.isPacked()) {
    // [gate | up] split as two blocks: each rank's slice is its gate
    // columns then its up columns, and the result is split plainly.
    resolveOperands(op);
    Layout l = layouts[swiglu.getGate()];
    if (l.isSplit()) {
      int64_t last = cast<RankedTensorType>(swiglu.getType()).getRank() - 1;
      if (l.dim != last || !isGateUp(l))
        return unsupported(op, "its packed [gate | up] operand is not split "
                               "as two blocks of its last dimension");
      return setLayout(swiglu.getResult(), Layout::split(last), op);
    }
    return setLayout(swiglu.getResult(), l, op);
  }
  if (auto grad = dyn_cast<SwigluGradOp>(op); grad && !grad.getUp()) {
    resolveOperands(op);
    Layout x = layouts[grad.getGate()], dy = layouts[grad.getDy()];
    if (x.isReplicated() && dy.isReplicated())
      return setLayout(grad.getDgate(), x, op);
    // (dy's type is already this rank's.)
    int64_t last = cast<RankedTensorType>(grad.getDy().getType()).getRank() - 1;
    if (!x.isSplit() || x.dim != last || !isGateUp(x) ||
        !dy.sameAs(Layout::split(last)))
      return unsupported(op, "its packed [gate | up] operand and dy are not "
                             "split alike over the last dimension");
    return setLayout(grad.getDgate(), x, op);
  }
  if (isa<SwigluOp, SwigluGradOp, GeluOp, GeluGradOp, QkvSplitOp, QkvConcatOp>(
          op)) {
    // Elementwise (or per head): nonlinear, so on whole values or on one
    // split shared by every operand.
    resolveOperands(op);
    Layout l = layouts[op->getOperand(0)];
    for (Value operand : op->getOperands())
      if (!layouts[operand].sameAs(l))
        return unsupported(op, "its operands are split differently");
    Layout out = l;
    for (Value r : op->getResults())
      if (failed(setLayout(r, out, op)))
        return failure();
    return success();
  }
  if (isa<DropoutOp, RmsNormOp, LayerNormOp, RmsNormGradOp, LayerNormGradOp,
          PositionEmbeddingOp, PositionEmbeddingGradOp>(op))
    return visitRowwise(op);
  if (isa<CrossEntropyMaxOp, CrossEntropyPartialOp, CrossEntropyFinishOp>(op)) {
    // These need whole values: a norm reduces over the hidden dimension,
    // and dropout's mask is keyed by the element's global index.
    resolveOperands(op);
    for (Value operand : op->getOperands())
      if (layouts[operand].isSplit())
        return unsupported(op, "it needs whole operands");
    for (Value r : op->getResults())
      if (failed(setLayout(r, Layout(), op)))
        return failure();
    return success();
  }
  return unsupported(op, "model-shard has no tensor-parallel rule for it");
}

/// Ops that work row by row over whole rows (norms, dropout, position
/// embeddings): on whole values, or with sequence parallelism on sequence
/// slices, whose parameter gradients are then partial over tp.
LogicalResult TensorParallel::visitRowwise(Operation *op) {
  auto activations = [&]() -> SmallVector<unsigned> {
    if (isa<RmsNormGradOp, LayerNormGradOp>(op))
      return {0, 2};
    if (isa<PositionEmbeddingOp>(op))
      return {};
    return {0};
  }();
  // The sequence slices when the input is one (always, under sp, but for
  // the position table, which is read for this rank's positions).
  bool sliced = isa<PositionEmbeddingOp>(op)
                    ? sp
                    : isSeq(op->getOperand(0)) ||
                          (sp && isa<PositionEmbeddingGradOp>(op) &&
                           layouts[op->getOperand(0)].isPartial());
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    OpOperand &operand = op->getOpOperand(i);
    bool activation = llvm::is_contained(activations, i);
    operand.set(sliced && activation ? seqSlice(operand.get(), op)
                                     : whole(operand.get(), op));
    if (sliced && activation && !isSeq(operand.get()))
      return unsupported(op, "it mixes sequence slices and whole values");
    if (!(sliced && activation) && layouts[operand.get()].isSplit())
      return unsupported(op, "it needs whole operands");
  }
  if (sliced) {
    StringAttr axis = b.getStringAttr(kTp);
    if (auto dropout = dyn_cast<DropoutOp>(op))
      dropout.setSeqAxisAttr(axis);
    else if (auto pos = dyn_cast<PositionEmbeddingOp>(op))
      pos.setSeqAxisAttr(axis);
    else if (auto pos = dyn_cast<PositionEmbeddingGradOp>(op))
      pos.setSeqAxisAttr(axis);
  }
  for (Value r : op->getResults()) {
    auto type = cast<RankedTensorType>(r.getType());
    Layout l;
    if (sliced && (type.getRank() >= 3 || isa<PositionEmbeddingOp>(op)))
      l = Layout::split(1); // an activation slice
    else if (sliced)
      l = Layout::partial(op->getName().getStringRef().str() +
                          " parameter gradients of this rank's sequence "
                          "slice");
    if (failed(setLayout(r, l, op)))
      return failure();
  }
  return success();
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
  // The signature, and the shardings of the split arguments.
  MLIRContext *ctx = func.getContext();
  for (BlockArgument arg : entry.getArguments()) {
    const Layout &l = layouts[arg];
    if (!l.isSplit())
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
    dims[l.dim] = b.getStrArrayAttr({kTp});
    func.setArgAttr(arg.getArgNumber(), ModelDialect::kShardingAttrName,
                    ShardingAttr::get(ctx, mesh, b.getArrayAttr(dims),
                                      b.getArrayAttr({})));
    if (!l.blocks.empty())
      func.setArgAttr(arg.getArgNumber(), ModelDialect::kShardBlocksAttrName,
                      b.getDenseI64ArrayAttr(l.blocks));
  }
  func.setType(FunctionType::get(ctx, entry.getArgumentTypes(),
                                 entry.getTerminator()->getOperandTypes()));
  return success();
}

void ModelShardPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (dp < 1 || tp < 1) {
    module.emitError("model-shard: dp = ")
        << int64_t(dp) << " and tp = " << int64_t(tp)
                                           << " must be at least 1";
    return signalPassFailure();
  }
  if (bucketBytes < 1) {
    module.emitError("model-shard: bucket-bytes = ")
        << int64_t(bucketBytes) << " must be at least 1";
    return signalPassFailure();
  }
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func || func.isExternal()) {
    module.emitError("model-shard needs a func.func @train_step (run "
                     "model-optimizer first)");
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

  // The batch dimension of the data inputs is split along dp.
  Block &entry = func.getBody().front();
  for (BlockArgument arg : entry.getArguments()) {
    auto input = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                   ModelDialect::kInputAttrName);
    if (!input || (input.getValue() != "tokens" && input.getValue() != "targets"))
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
    dims[0] = b.getStrArrayAttr({"dp"});
    func.setArgAttr(arg.getArgNumber(), ModelDialect::kShardingAttrName,
                    ShardingAttr::get(ctx, meshRef, b.getArrayAttr(dims),
                                      b.getArrayAttr({})));
  }

  if (sp && tp < 2) {
    module.emitError("model-shard: sequence parallelism splits the sequence "
                     "over tp, which needs tp > 1 (tp = ")
        << int64_t(tp) << ")";
    return signalPassFailure();
  }
  std::optional<TensorParallel> tensorParallel;
  if (tp > 1) {
    tensorParallel.emplace(func, tp, sp);
    if (failed(tensorParallel->run()))
      return signalPassFailure();
  }

  // The gradients the optimizer reads, in the order backward makes them.
  auto norms = entry.getOps<GradNormOp>();
  if (norms.empty()) {
    func.emitError("model-shard needs the optimizer's model.grad_norm");
    return signalPassFailure();
  }
  GradNormOp norm = *norms.begin();
  SmallVector<AdamWOp> updates(entry.getOps<AdamWOp>());
  SmallVector<unsigned> order(updates.size());
  for (unsigned i = 0; i < order.size(); ++i)
    order[i] = i;
  auto producer = [&](unsigned i) {
    Operation *def = updates[i].getGrad().getDefiningOp();
    return def ? entry.findAncestorOpInBlock(*def) : nullptr;
  };
  llvm::stable_sort(order, [&](unsigned x, unsigned y) {
    Operation *a = producer(x), *c = producer(y);
    return a && c && a != c && a->isBeforeInBlock(c);
  });

  // Each gradient is summed over dp, and over tp when tensor parallelism
  // left it partial (a replicated parameter used by split computations).
  auto axesOf = [&](AdamWOp update) {
    SmallVector<StringRef> axes;
    if (dp > 1)
      axes.push_back("dp");
    if (tensorParallel &&
        tensorParallel->layoutOf(update.getGrad()).isPartial())
      axes.push_back(kTp);
    return axes;
  };

  // Buckets of at most bucketBytes (a larger gradient alone) of gradients
  // summed over the same axes, each reduced just before the optimizer.
  b.setInsertionPoint(norm);
  auto paramName = [&](AdamWOp update) -> std::string {
    auto arg = dyn_cast<BlockArgument>(update.getParam());
    StringAttr name = arg ? func.getArgAttrOfType<StringAttr>(
                                arg.getArgNumber(), ModelDialect::kParamAttrName)
                          : StringAttr();
    return name ? name.getValue().str() : std::string("?");
  };
  for (SmallVector<StringRef> axes :
       {SmallVector<StringRef>{"dp"}, SmallVector<StringRef>{"dp", kTp},
        SmallVector<StringRef>{kTp}}) {
    SmallVector<unsigned> group;
    for (unsigned i : order)
      if (axesOf(updates[i]) == axes)
        group.push_back(i);
    std::string what = axes.size() == 2 ? "data- and tensor-parallel"
                       : axes[0] == "dp" ? "data-parallel"
                                         : "tensor-parallel";
    size_t begin = 0;
    while (begin < group.size()) {
      size_t end = begin;
      int64_t bytes = 0;
      while (end < group.size() &&
             (end == begin ||
              bytes + bytesOf(updates[group[end]].getGrad()) <= bucketBytes))
        bytes += bytesOf(updates[group[end++]].getGrad());
      SmallVector<Value> grads;
      SmallVector<Location> locs;
      for (size_t k = begin; k < end; ++k) {
        grads.push_back(updates[group[k]].getGrad());
        locs.push_back(grads.back().getLoc());
      }
      std::string reason = "model-shard: " + what + " sum of the gradient";
      reason += end - begin > 1 ? "s of " : " of ";
      reason += paramName(updates[group[begin]]);
      if (end - begin > 1)
        reason += " .. " + paramName(updates[group[end - 1]]) + " (" +
                  std::to_string(end - begin) + " tensors, " +
                  std::to_string(bytes) + " bytes)";
      if (llvm::is_contained(axes, kTp))
        reason += "; partial over tp: replicated, used by split computations";
      auto reduce = b.create<AllReduceOp>(
          b.getFusedLoc(locs), ValueRange(grads).getTypes(), grads, meshRef,
          b.getStrArrayAttr(axes), b.getStringAttr(reason), UnitAttr());
      // The optimizer (norm and update) reads the sums.
      for (auto [grad, sum] : llvm::zip(grads, reduce.getResults()))
        grad.replaceUsesWithIf(sum, [&](OpOperand &use) {
          return isa<GradNormOp, AdamWOp>(use.getOwner());
        });
      begin = end;
    }
  }
}

} // namespace
