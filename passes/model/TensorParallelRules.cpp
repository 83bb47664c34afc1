//===- TensorParallelRules.cpp - Per-op tensor-parallel rules -------------===//
//
// The rules of `model-shard`'s tensor parallelism, one per `model` op (or
// family of ops), attached to the ops as external models of
// TensorParallelOpInterface. Megatron's policy, decided on the graph rather
// than on parameter names (docs/Rationale-Parallelism.md): a parameter is
// decided at its first use: an embedding table is split by vocabulary rows;
// a linear whose input is whole is column-parallel (its weight split on the
// output dimension), unless it makes the keys or values of an attention
// whose kv heads do not divide by tp (then it stays whole); a linear whose
// input is split is row-parallel. Every other op's layout follows from its
// operands'. Partial sums made in the forward (row-parallel linear,
// vocab-parallel embedding) are all-reduced at once, as Megatron's
// RowParallelLinear does; those of the backward (input gradients of
// column-parallel linears, ...) where a consumer needs the whole value, so
// that the sum of the Q, K and V (or gate and up) contributions is reduced
// once.
//
//===----------------------------------------------------------------------===//

#include "passes/model/TensorParallelRules.h"
#include "passes/model/TensorParallel.h"

#include "mlir/IR/DialectRegistry.h"

#include <optional>

#include "passes/model/TensorParallelRules.cpp.inc"

using namespace mlir;
using namespace braid::model;

namespace {

constexpr llvm::StringLiteral kTp = "tp";

/// True when `v` (through rope) is the keys or values of an attention whose
/// kv heads do not divide by `tp`, which then keeps them whole on every rank.
bool feedsReplicatedKv(Value v, int64_t tp) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (isa<RopeOp, RopeAtOp>(user)) {
      if (feedsReplicatedKv(user->getResult(0), tp))
        return true;
    } else if (auto attention = dyn_cast<AttentionOp>(user)) {
      if (use.getOperandNumber() > 0 &&
          attention.getNumKvHeadsAttr().getInt() % tp != 0)
        return true;
    } else if (auto cached = dyn_cast<AttentionCachedOp>(user)) {
      if ((use.getOperandNumber() == 1 || use.getOperandNumber() == 2) &&
          cached.getNumKvHeadsAttr().getInt() % tp != 0)
        return true;
    }
  }
  return false;
}

/// What a linear's output feeds: its result, or with a LoRA adapter beside
/// it (model-lora) the sum of both.
Value throughAdapter(Value y) {
  if (y.hasOneUse())
    if (auto sum = dyn_cast<AddOp>(*y.getUsers().begin()))
      if (auto part = sum->getAttrOfType<StringAttr>("model.lora");
          part && part.getValue() == "sum")
        return sum.getResult();
  return y;
}

/// A LoRA adapter's linear (model-lora's "A" down or "B" up projection),
/// split as its base is: a column-parallel base's adapter keeps A whole (on
/// the sequence slice under sp) and splits B on its output as the base's
/// weight (the same blocks), so the adapter's output is split as the
/// base's; a row-parallel base's splits A
/// on its input, as its x is, and the r-wide partial sums are reduced
/// there (the smallest place), B then whole, on a sequence slice under sp
/// as the base's reduced output is. Returns failure() with a diagnostic,
/// or success() once the rule has set the result's layout; std::nullopt
/// when the ordinary rule applies.
std::optional<LogicalResult> adapterLinear(LinearOp op, TensorParallel &e) {
  auto part = op->getAttrOfType<StringAttr>("model.lora");
  if (!part)
    return std::nullopt;
  Value w = op.getWeight();
  int64_t outAxis = op.getTransposeW() ? 0 : 1;
  int64_t last = cast<RankedTensorType>(op.getX().getType()).getRank() - 1;
  if (part.getValue() == "A") {
    Layout x = e.layout(op.getX());
    if (x.isSplit() && x.dim == last)
      return std::nullopt; // row-parallel, as its base
    // Whole: every rank computes the r-wide down projection, under sp on
    // its sequence slice (a per-token product; B gathers the r-wide result,
    // not the h-wide input).
    if (e.undecided(w) && failed(e.decide(w, Layout(), op)))
      return failure();
    if (e.isSeq(op.getX()))
      return e.setLayout(op.getResult(), e.layout(op.getX()), op);
    return std::nullopt;
  }
  // B: as the base's output, the other operand of the sum.
  Value out = op.getResult();
  if (!out.hasOneUse())
    return e.unsupported(op, "a LoRA up projection feeds one sum");
  auto sum = dyn_cast<AddOp>(*out.getUsers().begin());
  if (!sum)
    return e.unsupported(op, "a LoRA up projection feeds its sum");
  Value base = sum.getLhs() == out ? sum.getRhs() : sum.getLhs();
  Layout b = e.layout(base);
  if (b.isSplit() && b.dim == last) {
    if (e.undecided(w) &&
        failed(e.decide(w, Layout::split(outAxis, b.blocks), op)))
      return failure();
    return std::nullopt; // column-parallel, x whole
  }
  if (e.undecided(w) && failed(e.decide(w, Layout(), op)))
    return failure();
  if (e.isSeq(op.getX()) && e.isSeq(base))
    // A per-token product with a whole weight: on the sequence slice.
    return e.setLayout(op.getResult(), e.layout(op.getX()), op);
  return std::nullopt;
}

LogicalResult linear(LinearOp op, TensorParallel &e) {
  if (std::optional<LogicalResult> adapter = adapterLinear(op, e))
    return *adapter;
  e.resolveOperands(op);
  int64_t tp = e.tp();
  int64_t outAxis = op.getTransposeW() ? 0 : 1, inAxis = 1 - outAxis;
  Value w = op.getWeight(), bias = op.getBias();
  Layout x = e.layout(op.getX());
  Value y = op.getResult();
  // What the output feeds, past an adapter's sum.
  Value feeds = throughAdapter(y);
  if (x.isReplicated()) {
    // Column-parallel, unless the weight is whole or must stay whole.
    Layout weight;
    if (e.undecided(w)) {
      if (!feedsReplicatedKv(feeds, tp)) {
        SmallVector<int64_t> blocks;
        if (feeds.hasOneUse())
          if (auto split = dyn_cast<QkvSplitOp>(*feeds.getUsers().begin())) {
            int64_t hd = split.getHeadDimAttr().getInt();
            int64_t kv = split.getNumKvHeadsAttr().getInt();
            if (kv % tp != 0)
              return e.unsupported(op, "the fused QKV projection " +
                                           e.paramName(w) + " has " +
                                           Twine(kv) + " kv heads");
            if (split.getLayout() == QkvLayout::grouped)
              blocks = {split.getNumHeadsAttr().getInt() * hd, kv * hd,
                        kv * hd};
          }
        for (Operation *user : feeds.getUsers())
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
      if (failed(e.decide(w, weight, op)))
        return failure();
    }
    weight = e.layout(w);
    if (weight.isReplicated()) {
      if (bias && e.undecided(bias) && failed(e.decide(bias, Layout(), op)))
        return failure();
      return e.setLayout(y, Layout(), op);
    }
    if (!weight.isSplit() || weight.dim != outAxis)
      return e.unsupported(op, "weight " + e.paramName(w) +
                                   " is split on its input dimension but x is "
                                   "whole");
    Layout column = Layout::split(0, weight.blocks);
    if (bias && failed(e.decide(bias, column, op)))
      return failure();
    Layout result = Layout::split(
        cast<RankedTensorType>(y.getType()).getRank() - 1, weight.blocks);
    return e.setLayout(y, result, op);
  }
  if (x.isSplit() &&
      x.dim == cast<RankedTensorType>(op.getX().getType()).getRank() - 1) {
    // Row-parallel: partial sums; each rank adds 1/tp of the bias.
    if (e.undecided(w) &&
        failed(e.decide(w, Layout::split(inAxis, x.blocks), op)))
      return failure();
    Layout weight = e.layout(w);
    if (!weight.isSplit() || weight.dim != inAxis || weight.blocks != x.blocks)
      return e.unsupported(op, "x is split on its last dimension but weight " +
                                   e.paramName(w) +
                                   " is not split the same way on its input "
                                   "dimension");
    if (bias) {
      if (e.undecided(bias) && failed(e.decide(bias, Layout(), op)))
        return failure();
      op.setBiasScaleAttr(e.builder().getF64FloatAttr(1.0 / double(tp)));
    }
    if (failed(e.setLayout(
            y,
            Layout::partial("row-parallel model.linear outputs (" +
                            e.paramName(w) + " split on its input dimension)"),
            op)))
      return failure();
    e.reduceNow(y, op);
    return success();
  }
  return e.unsupported(op, "x is split on a dimension other than its last");
}

LogicalResult embedding(EmbeddingOp op, TensorParallel &e) {
  Value table = op.getTable();
  if (e.undecided(table) && failed(e.decide(table, Layout::split(0), op)))
    return failure();
  Layout t = e.layout(table);
  if (t.isReplicated())
    return e.setLayout(op.getResult(), Layout(), op);
  if (!t.isSplit() || t.dim != 0 || !t.blocks.empty())
    return e.unsupported(op, "the table is not split by vocabulary rows");
  op.setVocabAxisAttr(e.builder().getStringAttr(kTp));
  if (failed(e.setLayout(op.getResult(),
                         Layout::partial("vocab-parallel model.embedding "
                                         "lookups (each rank has the rows of "
                                         "its vocabulary slice)"),
                         op)))
    return failure();
  e.reduceNow(op.getResult(), op);
  return success();
}

LogicalResult crossEntropy(CrossEntropyOp op, TensorParallel &e) {
  e.resolveOperands(op);
  Value logits = op.getLogits();
  Layout l = e.layout(logits);
  auto type = cast<RankedTensorType>(logits.getType());
  if (l.isReplicated())
    return e.setLayout(op.getLoss(), Layout(), op);
  if (!l.isSplit() || l.dim != type.getRank() - 1 || !l.blocks.empty())
    return e.unsupported(op, "the logits are split on a dimension other than "
                             "the vocabulary");
  // Vocab-parallel: no rank holds whole rows of logits.
  OpBuilder &b = e.builder();
  b.setInsertionPoint(op);
  Location loc = op.getLoc();
  auto rows = RankedTensorType::get(type.getShape().drop_back(),
                                    type.getElementType());
  auto localMax = b.create<CrossEntropyMaxOp>(loc, rows, logits);
  Value rowMax =
      e.createAllReduce(loc, localMax,
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
      e.createAllReduce(loc, partial,
                        "model-shard: vocab-parallel cross-entropy, the sums "
                        "of exponentials and the target logits over the "
                        "vocabulary slices")
          .getResult(0);
  Type lossType = op.getLoss().getType();
  auto finish = b.create<CrossEntropyFinishOp>(
      loc,
      TypeRange{lossType,
                RankedTensorType::get(
                    rows.getShape(),
                    cast<ShapedType>(lossType).getElementType())},
      sums, rowMax, op.getTargets(), op.getIgnoreIndexAttr());
  for (Value v : {localMax.getResult(), partial.getResult(), finish.getLoss(),
                  finish.getLse()})
    e.record(v, Layout());
  e.setLossLse(logits, finish.getLse());
  op.getLoss().replaceAllUsesWith(finish.getLoss());
  op.erase();
  return success();
}

LogicalResult crossEntropyGrad(CrossEntropyGradOp op, TensorParallel &e) {
  e.resolveOperands(op);
  Layout l = e.layout(op.getLogits());
  if (l.isReplicated())
    return e.setLayout(op.getDlogits(), Layout(), op);
  Value lse = e.lossLse(op.getLogits());
  if (!lse)
    return e.unsupported(op,
                         "its logits have no vocab-parallel loss before it");
  OpBuilder &b = e.builder();
  b.setInsertionPoint(op);
  auto grad = b.create<CrossEntropyGradOp>(
      op.getLoc(), op.getLogits().getType(), op.getLogits(), op.getTargets(),
      op.getDloss(), lse, op.getIgnoreIndexAttr(), b.getStringAttr(kTp));
  e.record(grad.getResult(), l);
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

/// Attention and its gradient: on a slice of the query heads, and of the kv
/// heads when k and v are split too (else their gradients are partial).
template <typename OpT>
LogicalResult attention(OpT op, Value k, ValueRange kvResults,
                        TensorParallel &e) {
  e.resolveOperands(op);
  Value q = op->getOperand(0);
  Layout lq = e.layout(q), lk = e.layout(k);
  auto qType = cast<RankedTensorType>(q.getType());
  if (lq.isReplicated() && lk.isReplicated()) {
    for (Value r : op->getResults())
      if (failed(e.setLayout(r, Layout(), op)))
        return failure();
    return success();
  }
  int64_t last = qType.getRank() - 1;
  if (!lq.isSplit() || lq.dim != last || lk.isPartial() ||
      (lk.isSplit() && lk.dim != last))
    return e.unsupported(op, "q must be split by heads, and k and v split by "
                             "heads or whole");
  int64_t heads = op.getNumHeadsAttr().getInt();
  if (heads % e.tp() != 0)
    return e.unsupported(op, Twine(heads) + " heads");
  bool kvSplit = lk.isSplit();
  setHeadSlice(op, e.tp(), kvSplit, e.builder());
  Layout byHeads = Layout::split(last);
  if (failed(e.setLayout(op->getResult(0), byHeads, op)))
    return failure();
  for (Value r : kvResults)
    if (failed(e.setLayout(
            r,
            kvSplit ? byHeads
                    : Layout::partial("model.attention_grad key/value "
                                      "gradients (kv heads replicated over "
                                      "tp, each rank has its query heads' "
                                      "terms)"),
            op)))
      return failure();
  return success();
}

LogicalResult attentionForward(AttentionOp op, TensorParallel &e) {
  return attention(op, op.getK(), {}, e);
}

LogicalResult attentionGrad(AttentionGradOp op, TensorParallel &e) {
  return attention(op, op.getK(), {op.getDk(), op.getDv()}, e);
}

/// Attention over the KV cache: as attention, and the caches (arguments of
/// the inference graph, shared by prefill's and decode's attention) hold
/// the rank's kv heads, or all of them when k and v are whole.
LogicalResult attentionCached(AttentionCachedOp op, TensorParallel &e) {
  if (failed(attention(op, op.getK(), {}, e)))
    return failure();
  Layout kv = e.layout(op.getK());
  if (kv.isPartial())
    return e.unsupported(op, "k and v are partial sums");
  for (auto [cache, updated] :
       {std::pair<Value, Value>{op.getCacheK(), op.getNewCacheK()},
        {op.getCacheV(), op.getNewCacheV()}}) {
    Layout now = e.layout(cache);
    if (now.isSplit() || (kv.isReplicated() && now.isReplicated())) {
      if (!now.sameAs(kv))
        return e.unsupported(op, "a cache is used with two different splits");
    } else if (failed(e.setLayout(cache, kv, op))) {
      return failure();
    }
    if (failed(e.setLayout(updated, kv, op)))
      return failure();
  }
  return success();
}

LogicalResult wholeOperands(Operation *op, TensorParallel &e);

/// The draws of an inference graph under tp, whose vocabulary-parallel
/// output layer leaves the logits split by vocabulary: no rank gathers the
/// whole logits. Each rank takes its best k tokens and its log-sum-exp
/// (model.top_candidates), the ranks' candidates are gathered (three small
/// all-gathers, shared by the draw and beam search's candidates), and
/// model.sample and model.top_logprobs run on them: the same ids as on the
/// whole logits for greedy decoding, top_k <= k and beam search (whose k is
/// at most the candidates'). k is the inference graph's draw_candidates
/// (model.generate; none: beam search's k), at least beam search's k, at
/// most the rank's columns.
/// The logits the host reads stay split: the runtime gathers them only when
/// asked (runtime/exec/Generate.cpp).
LogicalResult drawFromCandidates(Operation *op, TensorParallel &e) {
  Value logits = op->getOperand(0);
  Layout l = e.layout(logits);
  auto type = cast<RankedTensorType>(logits.getType());
  const int64_t lastDim = type.getRank() - 1;
  if (!l.isSplit() || l.dim != lastDim || !l.blocks.empty())
    return wholeOperands(op, e);
  // The candidates of these logits: made by the first draw that needs them.
  TopCandidatesOp candidates;
  for (Operation *user : logits.getUsers())
    if (auto c = dyn_cast<TopCandidatesOp>(user))
      candidates = c;
  OpBuilder &b = e.builder();
  if (!candidates) {
    int64_t k = 0;
    if (auto generate = op->getParentOfType<ModuleOp>()
                            ->getAttrOfType<DictionaryAttr>("model.generate"))
      if (auto m = generate.getAs<IntegerAttr>("draw_candidates"))
        k = m.getInt();
    int64_t vocabSize = 0;
    for (Operation *user : logits.getUsers()) {
      if (auto top = dyn_cast<TopLogprobsOp>(user)) {
        k = std::max<int64_t>(k, top.getK());
        vocabSize = top.getVocabSize();
      } else if (auto sample = dyn_cast<SampleOp>(user)) {
        vocabSize = sample.getVocabSize();
      }
    }
    k = std::clamp<int64_t>(k, 1, type.getDimSize(lastDim));
    // What the plan tells the host (Plan.generation): the logits it reads
    // are split, and the draw takes k tokens per rank.
    ModuleOp module = op->getParentOfType<ModuleOp>();
    NamedAttrList generate(
        module->getAttrOfType<DictionaryAttr>("model.generate"));
    generate.set("logits_axis", b.getStringAttr(kTp));
    generate.set("candidates_per_rank", b.getI64IntegerAttr(k));
    module->setAttr("model.generate", generate.getDictionary(b.getContext()));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfterValue(logits);
    candidates = b.create<TopCandidatesOp>(op->getLoc(), logits, k, vocabSize);
    candidates.setVocabAxisAttr(b.getStringAttr(kTp));
    Attribute phase = op->getAttr(ModelDialect::kPhaseAttrName);
    if (phase)
      candidates->setAttr(ModelDialect::kPhaseAttrName, phase);
    // Each rank's block of the gathered candidates.
    e.record(candidates.getValues(), Layout::split(2));
    e.record(candidates.getIds(), Layout::split(1));
    e.record(candidates.getLse(), Layout::split(2));
    for (auto [value, dim, what] :
         {std::tuple<Value, int64_t, const char *>{
              candidates.getValues(), 2, "logits"},
          {candidates.getIds(), 1, "ids"},
          {candidates.getLse(), 2, "log-sum-exps"}}) {
      auto t = cast<RankedTensorType>(value.getType());
      SmallVector<int64_t> shape(t.getShape());
      shape[dim] *= e.tp();
      auto gathered = b.create<AllGatherOp>(
          op->getLoc(), RankedTensorType::get(shape, t.getElementType()), value,
          e.mesh(), b.getStrArrayAttr({kTp}), b.getI64IntegerAttr(dim),
          b.getStringAttr(std::string("model-shard: the ranks' best tokens' ") +
                          what + ", gathered for the draw"));
      if (phase)
        gathered->setAttr(ModelDialect::kPhaseAttrName, phase);
      e.record(gathered.getResult(), Layout());
    }
  }
  // The gathered candidates: the users of the three all-gathers.
  auto gatheredOf = [&](Value v) -> Value {
    for (Operation *user : v.getUsers())
      if (auto g = dyn_cast<AllGatherOp>(user))
        return g.getResult();
    return Value();
  };
  Value values = gatheredOf(candidates.getValues());
  Value ids = gatheredOf(candidates.getIds());
  Value lse = gatheredOf(candidates.getLse());
  op->setOperand(0, values);
  if (auto sample = dyn_cast<SampleOp>(op))
    sample.getCandidateIdsMutable().append(ids);
  else
    cast<TopLogprobsOp>(op).getCandidatesMutable().append({ids, lse});
  return wholeOperands(op, e);
}

/// Scoring's log-probabilities under tp, whose vocabulary-parallel output
/// layer leaves the logits split by vocabulary: each rank reduces its slice
/// of every row to four numbers (model.token_logprobs_partial: its maximum,
/// sum of exponentials, the target's logit if it holds it, its most likely
/// id), the ranks' partials are gathered, and model.token_logprobs_finish
/// combines them on every rank. The logits never travel: a chunk of B x P
/// rows moves 16 bytes a row and rank instead of its vocabulary's logits.
LogicalResult tokenLogprobs(TokenLogprobsOp op, TensorParallel &e) {
  e.resolveOperands(op);
  Value logits = op.getLogits();
  Layout l = e.layout(logits);
  auto type = cast<RankedTensorType>(logits.getType());
  const int64_t last = type.getRank() - 1;
  if (!l.isSplit() || l.dim != last || !l.blocks.empty())
    return wholeOperands(op, e);
  OpBuilder &b = e.builder();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  Location loc = op->getLoc();
  Attribute phase = op->getAttr(ModelDialect::kPhaseAttrName);
  auto inPhase = [&](Operation *created) {
    if (phase)
      created->setAttr(ModelDialect::kPhaseAttrName, phase);
  };
  Type element = type.getElementType().isF64() ? Type(b.getF64Type())
                                               : Type(b.getF32Type());
  const int64_t batch = type.getDimSize(0), seq = type.getDimSize(1);
  auto partial = b.create<TokenLogprobsPartialOp>(
      loc, RankedTensorType::get({batch, seq, 4}, element), logits,
      op.getTargets(), op.getVocabSizeAttr(), b.getStringAttr(kTp));
  inPhase(partial);
  auto gathered = b.create<AllGatherOp>(
      loc, RankedTensorType::get({batch, seq, 4 * e.tp()}, element),
      partial.getResult(), e.mesh(), b.getStrArrayAttr({kTp}),
      b.getI64IntegerAttr(2),
      b.getStringAttr("model-shard: scoring's partial log-sum-exps of the "
                      "vocabulary slices, gathered"));
  inPhase(gathered);
  auto finish = b.create<TokenLogprobsFinishOp>(
      loc, TypeRange{op.getLogprobs().getType(), op.getGreedy().getType()},
      gathered.getResult(), op.getTargets());
  inPhase(finish);
  for (Value v : {Value(partial.getResult()), Value(gathered.getResult()),
                  Value(finish.getLogprobs()), Value(finish.getGreedy())})
    e.record(v, Layout());
  op.getLogprobs().replaceAllUsesWith(finish.getLogprobs());
  op.getGreedy().replaceAllUsesWith(finish.getGreedy());
  op.erase();
  return success();
}

LogicalResult gradNorm(GradNormOp norm, TensorParallel &e) {
  // Gradients stay partial here: the step's reductions sum them (with dp).
  SmallVector<bool> replicated;
  bool anySplit = false;
  for (Value g : norm.getGrads()) {
    replicated.push_back(!e.layout(g).isSplit());
    anySplit |= e.layout(g).isSplit();
  }
  if (anySplit) {
    OpBuilder &b = e.builder();
    norm.setMeshAttr(e.mesh());
    norm.setAxesAttr(b.getStrArrayAttr({kTp}));
    norm.setReplicatedAttr(b.getDenseBoolArrayAttr(replicated));
  }
  for (Value r : norm->getResults())
    e.record(r, Layout());
  return success();
}

LogicalResult adamw(AdamWOp op, TensorParallel &e) {
  Layout l = e.layout(op.getParam());
  if (l.isPartial())
    return e.unsupported(op, "the parameter is partial");
  Layout g = e.layout(op.getGrad());
  if (!g.isPartial() && !g.sameAs(l))
    return e.unsupported(op, "the gradient of " + e.paramName(op.getParam()) +
                                 " is not split as the parameter");
  for (Value state : {op.getM(), op.getV()}) {
    auto arg = dyn_cast<BlockArgument>(state);
    if (!arg || arg.getOwner()->getParentOp() != e.function())
      return e.unsupported(op, "the moments are not arguments of the step");
    if (failed(e.setLayout(arg, l, op)))
      return failure();
  }
  for (Value r : op->getResults())
    if (failed(e.setLayout(r, l, op)))
      return failure();
  return success();
}

LogicalResult embeddingGrad(EmbeddingGradOp op, TensorParallel &e) {
  e.resolveOperands(op);
  op.setVocabAxisAttr(e.builder().getStringAttr(kTp));
  return e.setLayout(op.getResult(), Layout::split(0), op);
}

LogicalResult linearGradInput(LinearGradInputOp op, TensorParallel &e) {
  Layout w = e.layout(op.getWeight());
  int64_t outAxis = op.getTransposeW() ? 0 : 1;
  int64_t last = cast<RankedTensorType>(op.getDy().getType()).getRank() - 1;
  if (w.isSplit() && w.dim == outAxis) {
    Layout dy = e.layout(op.getDy());
    if (!dy.isSplit() || dy.dim != last)
      return e.unsupported(op, "dy must be split as the column-parallel "
                               "weight's outputs");
    return e.setLayout(op.getResult(),
                       Layout::partial("model.linear_grad_input input "
                                       "gradients of the column-parallel " +
                                       e.paramName(op.getWeight())),
                       op);
  }
  if (w.isSplit()) {
    e.resolveOperands(op);
    return e.setLayout(op.getResult(), Layout::split(last, w.blocks), op);
  }
  // A whole weight: linear in dy, so a partial dy gives a partial dx, and
  // a sequence slice of dy (per token) the slice of dx.
  Layout dy = e.layout(op.getDy());
  if (e.isSeq(op.getDy()))
    return e.setLayout(op.getResult(), dy, op);
  if (dy.isSplit())
    return e.unsupported(op, "dy is split but the weight is whole");
  return e.setLayout(op.getResult(), dy, op);
}

LogicalResult linearGradWeight(LinearGradWeightOp op, TensorParallel &e) {
  // A whole weight applied to sequence slices (a LoRA up projection beside
  // a row-parallel base under sp): each rank sums its tokens' products.
  if (e.isSeq(op.getX()) && e.isSeq(op.getDy()))
    return e.setLayout(op.getResult(),
                       Layout::partial("model.linear_grad_weight gradients of "
                                       "this rank's sequence slice"),
                       op);
  if (e.isSeq(op.getX())) // the saved input of a column-parallel linear
    op.getXMutable().set(e.whole(op.getX(), op));
  Layout x = e.layout(op.getX()), dy = e.layout(op.getDy());
  int64_t outAxis = op.getTransposeW() ? 0 : 1, inAxis = 1 - outAxis;
  if (x.isPartial())
    return e.unsupported(op, "x is partial");
  if (x.isReplicated())
    return e.setLayout(op.getResult(),
                       dy.isSplit() ? Layout::split(outAxis, dy.blocks) : dy,
                       op);
  op.getDyMutable().set(e.whole(op.getDy(), op));
  if (!e.layout(op.getDy()).isReplicated())
    return e.unsupported(op, "x and dy are both split");
  return e.setLayout(op.getResult(), Layout::split(inAxis, x.blocks), op);
}

LogicalResult biasGrad(BiasGradOp op, TensorParallel &e) {
  Layout dy = e.layout(op.getDy());
  if (e.isSeq(op.getDy()))
    return e.setLayout(op.getResult(),
                       Layout::partial("model.bias_grad gradients of this "
                                       "rank's sequence slice"),
                       op);
  return e.setLayout(op.getResult(),
                     dy.isSplit() ? Layout::split(0, dy.blocks) : dy, op);
}

/// Rope and its gradient: linear, and per head; scale: linear, and per
/// element. The result keeps the operand's layout, whole, split or partial:
/// the terms of a partial sum times a constant are the terms of the product,
/// so a partial x is reduced where a consumer needs it whole, not here.
LogicalResult perHead(Operation *op, TensorParallel &e) {
  return e.setLayout(op->getResult(0), e.layout(op->getOperand(0)), op);
}

LogicalResult add(AddOp op, TensorParallel &e) {
  Layout l = e.layout(op.getLhs()), r = e.layout(op.getRhs());
  if (l.isPartial() && r.isPartial()) // a sum of partial sums
    return e.setLayout(
        op.getResult(),
        Layout::partial(l.why == r.why ? l.why : l.why + " plus " + r.why), op);
  if (e.isSeq(op.getLhs()) || e.isSeq(op.getRhs()))
    for (OpOperand &operand : op->getOpOperands())
      operand.set(e.seqSlice(operand.get(), op));
  else
    e.resolveOperands(op);
  Layout l2 = e.layout(op.getLhs()), r2 = e.layout(op.getRhs());
  if (!l2.sameAs(r2))
    return e.unsupported(op, "its operands are split differently");
  return e.setLayout(op.getResult(), l2, op);
}

/// Elementwise (or per head) ops: nonlinear, so on whole values or on one
/// split shared by every operand.
LogicalResult elementwise(Operation *op, TensorParallel &e) {
  e.resolveOperands(op);
  Layout l = e.layout(op->getOperand(0));
  for (Value operand : op->getOperands())
    if (!e.layout(operand).sameAs(l))
      return e.unsupported(op, "its operands are split differently");
  for (Value r : op->getResults())
    if (failed(e.setLayout(r, l, op)))
      return failure();
  return success();
}

LogicalResult qkvSplit(QkvSplitOp op, TensorParallel &e) {
  Layout l = e.layout(op.getQkv());
  if (!l.isSplit())
    return elementwise(op, e);
  int64_t tp = e.tp();
  int64_t heads = op.getNumHeadsAttr().getInt();
  int64_t kv = op.getNumKvHeadsAttr().getInt();
  if (heads % tp != 0 || kv % tp != 0)
    return e.unsupported(op, Twine(heads) + " heads and " + Twine(kv) +
                                 " kv heads");
  OpBuilder &b = e.builder();
  op.setNumHeadsAttr(b.getI64IntegerAttr(heads / tp));
  op.setNumKvHeadsAttr(b.getI64IntegerAttr(kv / tp));
  Layout byHeads = Layout::split(l.dim);
  for (Value r : op->getResults())
    if (failed(e.setLayout(r, byHeads, op)))
      return failure();
  return success();
}

LogicalResult qkvConcat(QkvConcatOp op, TensorParallel &e) {
  Layout l = e.layout(op.getQ());
  if (!l.isSplit())
    return elementwise(op, e);
  e.resolveOperands(op);
  int64_t tp = e.tp();
  int64_t heads = op.getNumHeadsAttr().getInt();
  int64_t kv = op.getNumKvHeadsAttr().getInt();
  int64_t hd = op.getHeadDimAttr().getInt();
  SmallVector<int64_t> blocks;
  if (op.getLayout() == QkvLayout::grouped)
    blocks = {heads * hd, kv * hd, kv * hd};
  OpBuilder &b = e.builder();
  op.setNumHeadsAttr(b.getI64IntegerAttr(heads / tp));
  op.setNumKvHeadsAttr(b.getI64IntegerAttr(kv / tp));
  return e.setLayout(op.getResult(), Layout::split(l.dim, blocks), op);
}

LogicalResult swiglu(SwigluOp op, TensorParallel &e) {
  if (!op.isPacked())
    return elementwise(op, e);
  // [gate | up] split as two blocks: each rank's slice is its gate columns
  // then its up columns, and the result is split plainly.
  e.resolveOperands(op);
  Layout l = e.layout(op.getGate());
  if (l.isSplit()) {
    int64_t last = cast<RankedTensorType>(op.getType()).getRank() - 1;
    if (l.dim != last || !isGateUp(l))
      return e.unsupported(op, "its packed [gate | up] operand is not split "
                               "as two blocks of its last dimension");
    return e.setLayout(op.getResult(), Layout::split(last), op);
  }
  return e.setLayout(op.getResult(), l, op);
}

LogicalResult swigluGrad(SwigluGradOp op, TensorParallel &e) {
  if (op.getUp())
    return elementwise(op, e);
  e.resolveOperands(op);
  Layout x = e.layout(op.getGate()), dy = e.layout(op.getDy());
  if (x.isReplicated() && dy.isReplicated())
    return e.setLayout(op.getDgate(), x, op);
  // (dy's type is already this rank's.)
  int64_t last = cast<RankedTensorType>(op.getDy().getType()).getRank() - 1;
  if (!x.isSplit() || x.dim != last || !isGateUp(x) ||
      !dy.sameAs(Layout::split(last)))
    return e.unsupported(op, "its packed [gate | up] operand and dy are not "
                             "split alike over the last dimension");
  return e.setLayout(op.getDgate(), x, op);
}

/// Ops that work row by row over whole rows (norms, dropout, position
/// embeddings): on whole values, or with sequence parallelism on sequence
/// slices, whose parameter gradients are then partial over tp.
LogicalResult rowwise(Operation *op, TensorParallel &e) {
  auto activations = [&]() -> SmallVector<unsigned> {
    if (isa<RmsNormGradOp, LayerNormGradOp>(op))
      return {0, 2};
    if (isa<PositionEmbeddingOp>(op))
      return {};
    return {0};
  }();
  // The sequence slices when the input is one (always, under sp, but for
  // the position table, which is read for this rank's positions).
  // Dropout of a value split on its last dimension (a LoRA adapter's input
  // beside a row-parallel linear, and its gradient): on the slice, each
  // element masked as its place in the whole tensor (feature_axis).
  if (auto dropout = dyn_cast<DropoutOp>(op)) {
    Layout x = e.layout(dropout.getX());
    int64_t last = cast<RankedTensorType>(dropout.getX().getType()).getRank() - 1;
    if (x.isSplit() && x.dim == last && last >= 1 && x.blocks.empty() &&
        !e.isSeq(dropout.getX())) {
      dropout.setFeatureAxisAttr(e.builder().getStringAttr(kTp));
      return e.setLayout(dropout.getResult(), x, op);
    }
  }
  bool sp = e.sp();
  // (Under sp a partial activation reaching a dropout, the gradient of a
  // LoRA adapter's input beside a column-parallel linear, is reduce-
  // scattered to the slices its forward ran on.)
  bool sliced = isa<PositionEmbeddingOp>(op)
                    ? sp
                    : e.isSeq(op->getOperand(0)) ||
                          (sp && isa<PositionEmbeddingGradOp>(op) &&
                           e.layout(op->getOperand(0)).isPartial()) ||
                          (sp && isa<DropoutOp>(op) &&
                           e.layout(op->getOperand(0)).isPartial() &&
                           cast<RankedTensorType>(op->getOperand(0).getType())
                                   .getRank() >= 3);
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    OpOperand &operand = op->getOpOperand(i);
    bool activation = llvm::is_contained(activations, i);
    operand.set(sliced && activation ? e.seqSlice(operand.get(), op)
                                     : e.whole(operand.get(), op));
    if (sliced && activation && !e.isSeq(operand.get()))
      return e.unsupported(op, "it mixes sequence slices and whole values");
    if (!(sliced && activation) && e.layout(operand.get()).isSplit())
      return e.unsupported(op, "it needs whole operands");
  }
  if (sliced) {
    StringAttr axis = e.builder().getStringAttr(kTp);
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
    if (failed(e.setLayout(r, l, op)))
      return failure();
  }
  return success();
}

/// The parts of the vocab-parallel loss: on whole values.
LogicalResult wholeOperands(Operation *op, TensorParallel &e) {
  e.resolveOperands(op);
  for (Value operand : op->getOperands())
    if (e.layout(operand).isSplit())
      return e.unsupported(op, "it needs whole operands");
  for (Value r : op->getResults())
    if (failed(e.setLayout(r, Layout(), op)))
      return failure();
  return success();
}

/// The external model of `OpT` whose rule is `Rule` (a function of `OpT`
/// or of Operation *), deciding its parameters when `Decides`.
template <typename OpT, auto Rule, bool Decides = false>
struct RuleModel : public TensorParallelOpInterface::ExternalModel<
                       RuleModel<OpT, Rule, Decides>, OpT> {
  LogicalResult shardOverTp(Operation *op, TensorParallel &engine) const {
    return Rule(cast<OpT>(op), engine);
  }
  bool decidesParameters(Operation *) const { return Decides; }
};

/// Attaches `Rule` to each of `Ops`.
template <auto Rule, typename... Ops>
void attachRule(MLIRContext &ctx) {
  (Ops::template attachInterface<RuleModel<Ops, Rule>>(ctx), ...);
}

} // namespace

void braid::model::registerTensorParallelRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, ModelDialect *) {
    LinearOp::attachInterface<RuleModel<LinearOp, linear, true>>(*ctx);
    EmbeddingOp::attachInterface<RuleModel<EmbeddingOp, embedding, true>>(
        *ctx);
    attachRule<crossEntropy, CrossEntropyOp>(*ctx);
    attachRule<crossEntropyGrad, CrossEntropyGradOp>(*ctx);
    attachRule<attentionForward, AttentionOp>(*ctx);
    attachRule<attentionGrad, AttentionGradOp>(*ctx);
    attachRule<gradNorm, GradNormOp>(*ctx);
    attachRule<adamw, AdamWOp>(*ctx);
    attachRule<embeddingGrad, EmbeddingGradOp>(*ctx);
    attachRule<linearGradInput, LinearGradInputOp>(*ctx);
    attachRule<linearGradWeight, LinearGradWeightOp>(*ctx);
    attachRule<biasGrad, BiasGradOp>(*ctx);
    attachRule<perHead, RopeOp, RopeGradOp, RopeAtOp, ReorderRowsOp, ScaleOp>(
        *ctx);
    attachRule<attentionCached, AttentionCachedOp>(*ctx);
    attachRule<drawFromCandidates, SampleOp, TopLogprobsOp>(*ctx);
    attachRule<tokenLogprobs, TokenLogprobsOp>(*ctx);
    attachRule<rowwise, TakeRowsOp>(*ctx);
    attachRule<add, AddOp>(*ctx);
    attachRule<qkvSplit, QkvSplitOp>(*ctx);
    attachRule<qkvConcat, QkvConcatOp>(*ctx);
    attachRule<swiglu, SwigluOp>(*ctx);
    attachRule<swigluGrad, SwigluGradOp>(*ctx);
    attachRule<elementwise, GeluOp, GeluGradOp>(*ctx);
    attachRule<rowwise, DropoutOp, RmsNormOp, LayerNormOp, RmsNormGradOp,
               LayerNormGradOp, PositionEmbeddingOp, PositionEmbeddingGradOp>(
        *ctx);
    attachRule<wholeOperands, CrossEntropyMaxOp, CrossEntropyPartialOp,
               CrossEntropyFinishOp>(*ctx);
  });
}
