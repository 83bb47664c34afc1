//===- ModelOps.cpp - Ops of the `model` dialect --------------------------===//
//
// For each op: the builder that infers its result types, the verifier (one
// check per item of the op's Constraints list, named by its id), and its cost.
//
//===----------------------------------------------------------------------===//

#include "dialects/model/ModelDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace braid::model;

#define GET_OP_CLASSES
#include "dialects/model/ModelOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {
/// True when two dimension sizes can be equal (either is dynamic, or they are).
bool dimsAgree(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// True when two shapes have one rank and agreeing dimensions.
bool shapesAgree(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  if (a.size() != b.size())
    return false;
  for (auto [x, y] : llvm::zip(a, b))
    if (!dimsAgree(x, y))
      return false;
  return true;
}

/// Prints a shape as `[2, 16, ?]` for error messages.
std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(shape, os, [&](int64_t d) {
    if (ShapedType::isDynamic(d))
      os << "?";
    else
      os << d;
  });
  os << "]";
  return s;
}

/// A copy of `type` with another shape.
RankedTensorType withShape(RankedTensorType type, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, type.getElementType());
}

int64_t numel(Value value) { return getNumElements(value.getType()); }

/// The product of `factors`: 0 when one is unknown (dynamic or 0), and
/// saturated at INT64_MAX rather than overflowing.
int64_t product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f <= 0 || ShapedType::isDynamic(f))
      return 0;
    if (__builtin_mul_overflow(p, f, &p))
      return std::numeric_limits<int64_t>::max();
  }
  return p;
}
} // namespace

static LogicalResult verifyMeshAxes(Operation *op, FlatSymbolRefAttr mesh,
                                    ArrayAttr axes);

/// The size of mesh axis `axis` of the module's `model.mesh`, for an op that
/// works on this rank's slice along it (`what` names the attribute in the
/// error); failure, with the error emitted, when there is no such axis.
static FailureOr<int64_t> verifyMeshAxis(Operation *op, StringRef axis,
                                         StringRef what) {
  auto module = op->getParentOfType<ModuleOp>();
  if (module)
    for (MeshOp mesh : module.getOps<MeshOp>())
      if (std::optional<int64_t> size = mesh.getAxisSize(axis))
        return *size;
  return op->emitOpError(what)
         << " = \"" << axis << "\" is not an axis of the module's model.mesh";
}

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

LogicalResult MeshOp::verify() {
  ArrayAttr axes = getAxes();
  ArrayRef<int64_t> sizes = getSizes();
  // M1: axes and sizes have the same number of entries.
  if (axes.size() != sizes.size())
    return emitOpError("has ") << axes.size() << " axes but " << sizes.size()
                               << " sizes";
  llvm::StringSet<> seen;
  for (auto [axis, size] : llvm::zip(axes, sizes)) {
    StringRef name = cast<StringAttr>(axis).getValue();
    // M2: axis names are non-empty and unique.
    if (name.empty())
      return emitOpError("has an axis with an empty name");
    if (!seen.insert(name).second)
      return emitOpError("has axis \"") << name << "\" more than once";
    // M3: every size is at least 1.
    if (size < 1)
      return emitOpError("axis \"")
             << name << "\" has size " << size << " but sizes must be >= 1";
  }
  return success();
}

std::optional<int64_t> MeshOp::getAxisSize(StringRef name) {
  for (auto [axis, size] : llvm::zip(getAxes(), getSizes()))
    if (cast<StringAttr>(axis).getValue() == name)
      return size;
  return std::nullopt;
}

int64_t MeshOp::getNumRanks() {
  int64_t n = 1;
  for (int64_t size : getSizes())
    n *= size;
  return n;
}

//===----------------------------------------------------------------------===//
// LayerOp
//===----------------------------------------------------------------------===//

void LayerOp::build(OpBuilder &builder, OperationState &state, int64_t index,
                    TypeRange resultTypes, ValueRange inputs) {
  state.addAttribute(getIndexAttrName(state.name),
                     builder.getI64IntegerAttr(index));
  state.addOperands(inputs);
  state.addTypes(resultTypes);
  // `backward`, when wanted, is set by the caller.
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Value input : inputs)
    block->addArgument(input.getType(), input.getLoc());
}

LogicalResult LayerOp::verify() {
  // L1: index is at least 0.
  if (getIndexAttr().getInt() < 0)
    return emitOpError("index is ") << getIndexAttr().getInt()
                                    << " but must be >= 0";
  // L2: one block argument per operand, of the operand's type.
  Block &block = getBody().front();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError("body has ")
           << block.getNumArguments() << " arguments but the layer has "
           << getInputs().size() << " operands";
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip(block.getArgumentTypes(), getInputs()))) {
    auto [argType, input] = pair;
    if (argType != input.getType())
      return emitOpError("body argument ")
             << i << " is " << argType << " but operand " << i << " is "
             << input.getType();
  }
  // L3: the body yields one value per result, of the result's type.
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return emitOpError("body must end with model.yield, found ")
           << block.getTerminator()->getName();
  if (yield.getValues().size() != getNumResults()) {
    InFlightDiagnostic diag = emitOpError("body yields ")
                              << yield.getValues().size()
                              << " values but the layer has "
                              << getNumResults() << " results";
    diag.attachNote(yield.getLoc()) << "yield here";
    return diag;
  }
  for (auto [i, pair] : llvm::enumerate(
           llvm::zip(yield.getValues().getTypes(), getResultTypes()))) {
    auto [yielded, result] = pair;
    if (yielded != result) {
      InFlightDiagnostic diag = emitOpError("body yields ")
                                << yielded << " as value " << i
                                << " but result " << i << " is " << result;
      diag.attachNote(yield.getLoc()) << "yield here";
      return diag;
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp / PositionEmbeddingOp
//===----------------------------------------------------------------------===//

void EmbeddingOp::build(OpBuilder &builder, OperationState &state, Value table,
                        Value ids) {
  auto tableType = cast<RankedTensorType>(table.getType());
  SmallVector<int64_t> shape(cast<ShapedType>(ids.getType()).getShape());
  shape.push_back(tableType.getDimSize(1));
  build(builder, state, withShape(tableType, shape), table, ids,
        /*vocab_axis=*/StringAttr());
}

LogicalResult EmbeddingOp::verify() {
  RankedTensorType table = getTable().getType();
  // E1: the table has rank 2.
  if (table.getRank() != 2)
    return emitOpError("table has rank ") << table.getRank()
                                          << " but must have rank 2";
  // E2: result shape is ids' shape followed by the table's dimension 1.
  SmallVector<int64_t> expected(getIds().getType().getShape());
  expected.push_back(table.getDimSize(1));
  RankedTensorType result = getResult().getType();
  if (!shapesAgree(result.getShape(), expected))
    return emitOpError("result shape is ")
           << shapeStr(result.getShape()) << " but ids and table give "
           << shapeStr(expected);
  // E3: the result's element type is the table's.
  if (result.getElementType() != table.getElementType())
    return emitOpError("result element type ")
           << result.getElementType() << " differs from the table's "
           << table.getElementType();
  // E4: vocab_axis is a mesh axis.
  if (auto axis = getVocabAxis())
    if (failed(verifyMeshAxis(*this, *axis, "vocab_axis")))
      return failure();
  return success();
}

int64_t EmbeddingOp::getVectorFlops() { return 0; }

void PositionEmbeddingOp::build(OpBuilder &builder, OperationState &state,
                                Value table, Value tokens, Value positions) {
  auto tableType = cast<RankedTensorType>(table.getType());
  auto tokenShape = cast<ShapedType>(tokens.getType()).getShape();
  SmallVector<int64_t> shape(tokenShape);
  shape.push_back(tableType.getDimSize(1));
  build(builder, state, withShape(tableType, shape), table, tokens, positions,
        /*seq_axis=*/StringAttr());
}

/// Whether `index` is `[dims...]` (an index tensor of that shape).
static bool indexShaped(Value index, ArrayRef<int64_t> dims) {
  return shapesAgree(cast<RankedTensorType>(index.getType()).getShape(), dims);
}

LogicalResult PositionEmbeddingOp::verify() {
  RankedTensorType table = getTable().getType();
  RankedTensorType tokens = getTokens().getType();
  // PE1: the table has rank 2 and the tokens rank 2.
  if (table.getRank() != 2 || tokens.getRank() != 2)
    return emitOpError("table and tokens must have rank 2, found ranks ")
           << table.getRank() << " and " << tokens.getRank();
  // PE2: the sequence length is at most the number of positions.
  int64_t seq = tokens.getDimSize(1), positions = table.getDimSize(0);
  if (!ShapedType::isDynamic(seq) && !ShapedType::isDynamic(positions) &&
      seq > positions)
    return emitOpError("sequence length ")
           << seq << " exceeds the table's " << positions << " positions";
  // PE4: seq_axis is a mesh axis whose size divides the sequence.
  int64_t local = seq;
  if (auto axis = getSeqAxis()) {
    FailureOr<int64_t> n = verifyMeshAxis(*this, *axis, "seq_axis");
    if (failed(n))
      return failure();
    if (!ShapedType::isDynamic(seq)) {
      if (seq % *n != 0)
        return emitOpError("seq_axis \"")
               << *axis << "\" of " << *n
               << " ranks does not divide the sequence length " << seq;
      local = seq / *n;
    }
  }
  // PE5: positions have the tokens' shape.
  if (Value positions = getPositions())
    if (!indexShaped(positions, tokens.getShape()))
      return emitOpError("positions are ")
             << shapeStr(cast<RankedTensorType>(positions.getType()).getShape())
             << " but must have the tokens' shape "
             << shapeStr(tokens.getShape());
  // PE3: the result is [batch, seq, hidden] of the table's element type.
  SmallVector<int64_t> expected = {tokens.getDimSize(0), local,
                                   table.getDimSize(1)};
  RankedTensorType result = getResult().getType();
  if (!shapesAgree(result.getShape(), expected) ||
      result.getElementType() != table.getElementType())
    return emitOpError("result is ")
           << result << " but must be " << shapeStr(expected) << " of "
           << table.getElementType();
  return success();
}

int64_t PositionEmbeddingOp::getVectorFlops() { return 0; }

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

std::pair<int64_t, int64_t> LinearOp::getWeightInOut() {
  ArrayRef<int64_t> w = getWeight().getType().getShape();
  if (w.size() != 2)
    return {ShapedType::kDynamic, ShapedType::kDynamic};
  return getTransposeW() ? std::make_pair(w[1], w[0])
                         : std::make_pair(w[0], w[1]);
}

void LinearOp::build(OpBuilder &builder, OperationState &state, Value x,
                     Value weight, Value bias, bool transposeW) {
  auto xType = cast<RankedTensorType>(x.getType());
  auto w = cast<ShapedType>(weight.getType()).getShape();
  SmallVector<int64_t> shape(xType.getShape());
  shape.back() = transposeW ? w[0] : w[1];
  build(builder, state, withShape(xType, shape), x, weight, bias, transposeW,
        /*bias_scale=*/FloatAttr());
}

LogicalResult LinearOp::verify() {
  RankedTensorType x = getX().getType(), w = getWeight().getType();
  // LIN1: x has rank >= 1 and the weight rank 2.
  if (x.getRank() < 1 || w.getRank() != 2)
    return emitOpError("x must have rank >= 1 and the weight rank 2, found "
                       "ranks ")
           << x.getRank() << " and " << w.getRank();
  auto [in, out] = getWeightInOut();
  // LIN2: x's last dimension is the weight's input dimension.
  if (!dimsAgree(x.getShape().back(), in))
    return emitOpError("x has ")
           << x.getShape().back() << " columns but the weight "
           << shapeStr(w.getShape()) << " takes " << in << " inputs"
           << (getTransposeW() ? " (transpose_w: weight is [out, in])"
                               : " (weight is [in, out])");
  // LIN3: the bias, when present, is [out].
  if (Value bias = getBias()) {
    auto b = cast<RankedTensorType>(bias.getType());
    if (b.getRank() != 1 || !dimsAgree(b.getDimSize(0), out))
      return emitOpError("bias is ")
             << shapeStr(b.getShape()) << " but the output dimension is "
             << out;
  }
  // LIN4: result is x's shape with the last dimension replaced by out.
  SmallVector<int64_t> expected(x.getShape());
  expected.back() = out;
  RankedTensorType result = getResult().getType();
  if (!shapesAgree(result.getShape(), expected))
    return emitOpError("result shape is ")
           << shapeStr(result.getShape()) << " but must be "
           << shapeStr(expected);
  // LIN5: one element type.
  Type element = x.getElementType();
  for (Value v : getOperation()->getOperands())
    if (cast<ShapedType>(v.getType()).getElementType() != element)
      return emitOpError("operands mix element types ")
             << element << " and " << cast<ShapedType>(v.getType()).getElementType();
  if (result.getElementType() != element)
    return emitOpError("result element type ")
           << result.getElementType() << " differs from x's " << element;
  // LIN6: bias_scale in (0, 1], with a bias.
  if (auto scale = getBiasScale()) {
    double v = scale->convertToDouble();
    if (!(v > 0 && v <= 1))
      return emitOpError("bias_scale is ") << v << " but must be in (0, 1]";
    if (!getBias())
      return emitOpError("has a bias_scale but no bias");
  }
  return success();
}

int64_t LinearOp::getMatmulFlops() {
  auto [in, out] = getWeightInOut();
  int64_t rows = numel(getX()) / std::max<int64_t>(in, 1);
  return product({2, rows, in, out});
}

int64_t LinearOp::getVectorFlops() {
  // y += bias · bias_scale: a multiply and an add per element.
  return getBias() ? product({2, numel(getResult())}) : 0;
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

int64_t AttentionOp::getHeadDim() {
  int64_t heads = getNumHeadsAttr().getInt();
  int64_t cols = getQ().getType().getShape().back();
  if (heads < 1 || ShapedType::isDynamic(cols))
    return ShapedType::kDynamic;
  return cols / heads;
}

void AttentionOp::build(OpBuilder &builder, OperationState &state, Value q,
                        Value k, Value v, int64_t numHeads, int64_t numKvHeads,
                        double scale, bool causal, bool alibi, double dropout,
                        Value positions) {
  build(builder, state, q.getType(), q, k, v, positions,
        builder.getI64IntegerAttr(numHeads),
        builder.getI64IntegerAttr(numKvHeads), builder.getF64FloatAttr(scale),
        causal ? builder.getUnitAttr() : UnitAttr(),
        alibi ? builder.getUnitAttr() : UnitAttr(),
        builder.getF64FloatAttr(dropout), /*head_axis=*/StringAttr(),
        /*global_heads=*/IntegerAttr(), /*global_kv_heads=*/IntegerAttr());
}

/// A1 to A4 of model.attention, shared with model.attention_grad.
/// A6 of model.attention: the slice of the heads along `axis`, when the op
/// has one. Sets `allHeads` and `allKvHeads` to the global counts.
static LogicalResult verifyHeadSlice(Operation *op, int64_t heads,
                                     int64_t kvHeads,
                                     std::optional<StringRef> axis,
                                     std::optional<uint64_t> globalHeads,
                                     std::optional<uint64_t> globalKvHeads,
                                     int64_t &allHeads, int64_t &allKvHeads) {
  allHeads = heads;
  allKvHeads = kvHeads;
  if (!axis && !globalHeads && !globalKvHeads)
    return success();
  if (!axis || !globalHeads || !globalKvHeads)
    return op->emitOpError("head_axis, global_heads and global_kv_heads must "
                           "be given together");
  FailureOr<int64_t> n = verifyMeshAxis(op, *axis, "head_axis");
  if (failed(n))
    return failure();
  allHeads = int64_t(*globalHeads);
  allKvHeads = int64_t(*globalKvHeads);
  if (allHeads != heads * *n)
    return op->emitOpError("global_heads = ")
           << allHeads << " but heads = " << heads << " on each of the " << *n
           << " ranks of \"" << *axis << "\" make " << heads * *n;
  if (allKvHeads != kvHeads * *n && allKvHeads != kvHeads)
    return op->emitOpError("global_kv_heads = ")
           << allKvHeads << " but kv_heads = " << kvHeads
           << " must be split over the " << *n << " ranks of \"" << *axis
           << "\" (" << kvHeads * *n << ") or replicated (" << kvHeads << ")";
  return success();
}

static LogicalResult verifyAttention(Operation *op, RankedTensorType q,
                                     RankedTensorType k, RankedTensorType v,
                                     int64_t heads, int64_t kvHeads,
                                     double scale, double dropout,
                                     bool causal, int64_t allHeads,
                                     int64_t allKvHeads) {
  // A1: rank 3, one batch size, one key/value sequence length (= q's when
  // causal).
  if (q.getRank() != 3 || k.getRank() != 3 || v.getRank() != 3)
    return op->emitOpError("q, k and v must have rank 3, found ranks ")
           << q.getRank() << ", " << k.getRank() << " and " << v.getRank();
  if (!dimsAgree(q.getDimSize(0), k.getDimSize(0)) ||
      !dimsAgree(q.getDimSize(0), v.getDimSize(0)))
    return op->emitOpError("batch sizes differ: q ")
           << q.getDimSize(0) << ", k " << k.getDimSize(0) << ", v "
           << v.getDimSize(0);
  if (!dimsAgree(k.getDimSize(1), v.getDimSize(1)))
    return op->emitOpError("k has ")
           << k.getDimSize(1) << " positions but v has " << v.getDimSize(1);
  if (causal && !dimsAgree(q.getDimSize(1), k.getDimSize(1)))
    return op->emitOpError("causal attention needs as many query positions "
                           "as key positions, found ")
           << q.getDimSize(1) << " and " << k.getDimSize(1);
  // A2: heads >= 1 and kv heads divide heads.
  if (heads < 1 || kvHeads < 1)
    return op->emitOpError("heads = ")
           << heads << " and kv_heads = " << kvHeads << " must be >= 1";
  if (allHeads % allKvHeads != 0)
    return op->emitOpError(allHeads == heads ? "kv_heads = "
                                             : "global_kv_heads = ")
           << allKvHeads << " does not divide "
           << (allHeads == heads ? "heads = " : "global_heads = ") << allHeads;
  // A3: heads divide q's columns; k and v have kv_heads x head_dim columns.
  int64_t qCols = q.getDimSize(2);
  if (!ShapedType::isDynamic(qCols)) {
    if (qCols % heads != 0)
      return op->emitOpError("heads = ")
             << heads << " does not divide q's " << qCols << " columns";
    int64_t headDim = qCols / heads;
    int64_t kvCols = kvHeads * headDim;
    if (!dimsAgree(k.getDimSize(2), kvCols) ||
        !dimsAgree(v.getDimSize(2), kvCols))
      return op->emitOpError("k and v must have kv_heads x head_dim = ")
             << kvHeads << " x " << headDim << " = " << kvCols
             << " columns, found " << k.getDimSize(2) << " and "
             << v.getDimSize(2);
  }
  // A4: scale > 0, dropout in [0, 1).
  if (!(scale > 0))
    return op->emitOpError("scale is ") << scale << " but must be positive";
  if (!(dropout >= 0 && dropout < 1))
    return op->emitOpError("dropout is ")
           << dropout << " but must be in [0, 1)";
  return success();
}

/// A7 of model.attention: positions [batch, seq] of q, causal.
static LogicalResult verifyDocuments(Operation *op, Value positions,
                                     RankedTensorType q, bool causal) {
  if (!positions)
    return success();
  if (!causal)
    return op->emitOpError("packed documents (positions) need causal "
                           "attention");
  if (!indexShaped(positions, {q.getDimSize(0), q.getDimSize(1)}))
    return op->emitOpError("positions are ")
           << shapeStr(cast<RankedTensorType>(positions.getType()).getShape())
           << " but must be [batch, seq] of q, "
           << shapeStr({q.getDimSize(0), q.getDimSize(1)});
  return success();
}

/// True when q, k and v share one element type.
static bool oneElementType(RankedTensorType q, RankedTensorType k,
                           RankedTensorType v) {
  return k.getElementType() == q.getElementType() &&
         v.getElementType() == q.getElementType();
}

LogicalResult AttentionOp::verify() {
  RankedTensorType q = getQ().getType(), k = getK().getType(),
                   v = getV().getType();
  int64_t allHeads, allKvHeads;
  // A6: the slice of the heads.
  if (failed(verifyHeadSlice(*this, getNumHeadsAttr().getInt(),
                             getNumKvHeadsAttr().getInt(), getHeadAxis(),
                             getGlobalHeads(), getGlobalKvHeads(), allHeads,
                             allKvHeads)))
    return failure();
  if (failed(verifyAttention(*this, q, k, v, getNumHeadsAttr().getInt(),
                             getNumKvHeadsAttr().getInt(),
                             getScale().convertToDouble(),
                             getDropout().convertToDouble(), getCausal(),
                             allHeads, allKvHeads)))
    return failure();
  // A7: packed documents.
  if (failed(verifyDocuments(*this, getPositions(), q, getCausal())))
    return failure();
  // A5: result has q's type; one element type.
  if (!oneElementType(q, k, v))
    return emitOpError("q, k and v mix element types ")
           << q.getElementType() << ", " << k.getElementType() << " and "
           << v.getElementType();
  if (getResult().getType() != q)
    return emitOpError("result is ")
           << getResult().getType() << " but must be q's type " << q;
  return success();
}

/// The (query, key) scores attention computes, over the batch and the
/// heads, times `perScore` FLOPs each: with `causal`, query i sees keys [0,
/// i], Sq (Sq + 1) / 2 scores per head, as the kernels compute them
/// (runtime/plan/Kernels.def's ATTENTION row; docs/report.md, "One FLOP
/// convention").
static int64_t attentionCost(Value q, Value k, int64_t heads, bool causal,
                             int64_t perScore) {
  auto qt = cast<RankedTensorType>(q.getType());
  auto kt = cast<RankedTensorType>(k.getType());
  int64_t sq = qt.getDimSize(1);
  if (!causal)
    return product({perScore, qt.getDimSize(0), heads, sq, kt.getDimSize(1)});
  // Sq (Sq + 1) / 2, halving the even factor.
  int64_t a = sq % 2 == 0 ? sq / 2 : sq, b = sq % 2 == 0 ? sq + 1 : (sq + 1) / 2;
  return product({perScore, qt.getDimSize(0), heads, a, b});
}

/// The head size of attention over q [B, Sq, heads · d].
static int64_t headSize(Value q, int64_t heads) {
  return cast<RankedTensorType>(q.getType()).getDimSize(2) /
         std::max<int64_t>(heads, 1);
}

int64_t AttentionOp::getMatmulFlops() {
  // q·kᵀ and p·v: 2d each per score.
  int64_t heads = getNumHeadsAttr().getInt();
  return attentionCost(getQ(), getK(), heads, getCausal(),
                       4 * headSize(getQ(), heads));
}

// The softmax (a few FLOPs per score, against 4d) is not counted, as
// attention FLOP counts do not count it.
int64_t AttentionOp::getVectorFlops() { return 0; }

//===----------------------------------------------------------------------===//
// QkvSplitOp
//===----------------------------------------------------------------------===//

void QkvSplitOp::build(OpBuilder &builder, OperationState &state, Value qkv,
                       int64_t numHeads, int64_t numKvHeads, int64_t headDim,
                       QkvLayout layout) {
  auto type = cast<RankedTensorType>(qkv.getType());
  SmallVector<int64_t> qShape(type.getShape()), kvShape(type.getShape());
  qShape.back() = numHeads * headDim;
  kvShape.back() = numKvHeads * headDim;
  RankedTensorType kv = withShape(type, kvShape);
  build(builder, state, withShape(type, qShape), kv, kv, qkv,
        builder.getI64IntegerAttr(numHeads),
        builder.getI64IntegerAttr(numKvHeads),
        builder.getI64IntegerAttr(headDim),
        QkvLayoutAttr::get(builder.getContext(), layout));
}

/// QS1 to QS3 of model.qkv_split for a fused tensor and its three parts
/// (shared with model.qkv_concat, where the roles are exchanged).
static LogicalResult verifyQkv(Operation *op, RankedTensorType qkv,
                               int64_t heads, int64_t kvHeads, int64_t headDim,
                               QkvLayout layout, Value q, Value k, Value v) {
  // QS2: counts >= 1, kv heads divide heads, per_head has equal counts.
  if (heads < 1 || kvHeads < 1 || headDim < 1)
    return op->emitOpError("heads = ")
           << heads << ", kv_heads = " << kvHeads << " and head_dim = "
           << headDim << " must be >= 1";
  if (heads % kvHeads != 0)
    return op->emitOpError("kv_heads = ")
           << kvHeads << " does not divide heads = " << heads;
  if (layout == QkvLayout::per_head && heads != kvHeads)
    return op->emitOpError("per_head layout needs kv_heads = heads, found ")
           << kvHeads << " and " << heads;
  // QS1: rank 3 with (heads + 2 kv_heads) x head_dim columns.
  int64_t cols = (heads + 2 * kvHeads) * headDim;
  if (qkv.getRank() != 3 || !dimsAgree(qkv.getDimSize(2), cols))
    return op->emitOpError("fused qkv must be [batch, seq, ")
           << cols << "] for (" << heads << " + 2 x " << kvHeads << ") x "
           << headDim << " columns, found " << shapeStr(qkv.getShape());
  // QS3: part shapes and element types.
  SmallVector<int64_t> qShape(qkv.getShape()), kvShape(qkv.getShape());
  qShape.back() = heads * headDim;
  kvShape.back() = kvHeads * headDim;
  auto check = [&](Value part, ArrayRef<int64_t> shape,
                   StringRef name) -> LogicalResult {
    auto type = cast<RankedTensorType>(part.getType());
    if (!shapesAgree(type.getShape(), shape) ||
        type.getElementType() != qkv.getElementType())
      return op->emitOpError() << name << " is " << type << " but must be "
                               << shapeStr(shape) << " of "
                               << qkv.getElementType();
    return success();
  };
  if (failed(check(q, qShape, "q")) || failed(check(k, kvShape, "k")) ||
      failed(check(v, kvShape, "v")))
    return failure();
  // With dynamic batch or sequence in the fused tensor, the parts must still
  // agree with each other.
  auto qs = cast<RankedTensorType>(q.getType()).getShape();
  for (Value part : {k, v}) {
    auto ps = cast<RankedTensorType>(part.getType()).getShape();
    if (!dimsAgree(qs[0], ps[0]) || !dimsAgree(qs[1], ps[1]))
      return op->emitOpError("q ")
             << shapeStr(qs) << " and " << shapeStr(ps)
             << " disagree in batch or sequence length";
  }
  return success();
}

LogicalResult QkvSplitOp::verify() {
  return verifyQkv(*this, getQkv().getType(), getNumHeadsAttr().getInt(),
                   getNumKvHeadsAttr().getInt(), getHeadDimAttr().getInt(),
                   getLayout(), getQ(), getK(), getV());
}

int64_t QkvSplitOp::getVectorFlops() { return 0; }

//===----------------------------------------------------------------------===//
// Norms and RoPE
//===----------------------------------------------------------------------===//

/// Checks that a norm's `param` is `[d]` of x's element type.
static LogicalResult verifyNormParam(Operation *op, RankedTensorType x,
                                     Value param, StringRef name) {
  auto type = cast<RankedTensorType>(param.getType());
  if (type.getRank() != 1 || !dimsAgree(type.getDimSize(0), x.getShape().back()))
    return op->emitOpError() << name << " is " << shapeStr(type.getShape())
                             << " but x's last dimension is "
                             << x.getShape().back();
  if (type.getElementType() != x.getElementType())
    return op->emitOpError() << name << " element type "
                             << type.getElementType() << " differs from x's "
                             << x.getElementType();
  return success();
}

static LogicalResult verifyEps(Operation *op, APFloat eps) {
  if (!(eps.convertToDouble() > 0))
    return op->emitOpError("eps is ")
           << eps.convertToDouble() << " but must be positive";
  return success();
}

/// Checks that `result` has type `expected`; `what` names where the expected
/// type comes from ("x's type"), or is empty.
static LogicalResult verifySameType(Operation *op, Value result, Type expected,
                                    StringRef what) {
  if (result.getType() == expected)
    return success();
  InFlightDiagnostic diag = op->emitOpError("result is ")
                            << result.getType() << " but must be ";
  if (!what.empty())
    diag << what << " ";
  return diag << expected;
}

void RmsNormOp::build(OpBuilder &builder, OperationState &state, Value x,
                      Value weight, double eps) {
  build(builder, state, x.getType(), x, weight, builder.getF64FloatAttr(eps));
}

LogicalResult RmsNormOp::verify() {
  RankedTensorType x = getX().getType();
  // RN1: x has a last dimension d and the weight is [d]; RN3 (element types).
  if (x.getRank() < 1)
    return emitOpError("x must have rank >= 1");
  if (failed(verifyNormParam(*this, x, getWeight(), "weight")))
    return failure();
  // RN2: eps > 0.
  if (failed(verifyEps(*this, getEps())))
    return failure();
  // RN3: the result has x's type.
  return verifySameType(*this, getResult(), x, "x's type");
}

int64_t RmsNormOp::getVectorFlops() { return product({4, numel(getX())}); }

void LayerNormOp::build(OpBuilder &builder, OperationState &state, Value x,
                        Value weight, Value bias, double eps) {
  build(builder, state, x.getType(), x, weight, bias,
        builder.getF64FloatAttr(eps));
}

LogicalResult LayerNormOp::verify() {
  RankedTensorType x = getX().getType();
  // LN1: x has a last dimension d, weight and bias are [d]; LN3 (types).
  if (x.getRank() < 1)
    return emitOpError("x must have rank >= 1");
  if (failed(verifyNormParam(*this, x, getWeight(), "weight")) ||
      failed(verifyNormParam(*this, x, getBias(), "bias")))
    return failure();
  // LN2: eps > 0.
  if (failed(verifyEps(*this, getEps())))
    return failure();
  // LN3: the result has x's type.
  return verifySameType(*this, getResult(), x, "x's type");
}

int64_t LayerNormOp::getVectorFlops() { return product({8, numel(getX())}); }

void RopeOp::build(OpBuilder &builder, OperationState &state, Value x,
                   int64_t headDim, double theta, Value positions) {
  build(builder, state, x.getType(), x, positions,
        builder.getI64IntegerAttr(headDim), builder.getF64FloatAttr(theta));
}

/// R1 to R4 of model.rope (shared with model.rope_grad, whose operand is
/// `dy`; `name` is the operand's name in messages).
static LogicalResult verifyRope(Operation *op, RankedTensorType x,
                                StringRef name, int64_t headDim, double theta,
                                Value result) {
  // R1: rank 3.
  if (x.getRank() != 3)
    return op->emitOpError() << name << " has rank " << x.getRank()
                             << " but must have rank 3";
  // R2: head_dim even, >= 2, divides the last dimension.
  if (headDim < 2 || headDim % 2 != 0)
    return op->emitOpError("head_dim is ")
           << headDim << " but must be even and >= 2";
  int64_t cols = x.getDimSize(2);
  if (!ShapedType::isDynamic(cols) && cols % headDim != 0)
    return op->emitOpError("head_dim = ")
           << headDim << " does not divide " << name << "'s " << cols
           << " columns";
  // R3: theta > 0.
  if (!(theta > 0))
    return op->emitOpError("theta is ") << theta << " but must be positive";
  // R4: the result has x's type.
  return verifySameType(op, result, x, (name + "'s type").str());
}

/// R5 of model.rope: positions [batch, seq] of `x`.
static LogicalResult verifyRopePositions(Operation *op, Value positions,
                                         RankedTensorType x) {
  if (positions && !indexShaped(positions, {x.getDimSize(0), x.getDimSize(1)}))
    return op->emitOpError("positions are ")
           << shapeStr(cast<RankedTensorType>(positions.getType()).getShape())
           << " but must be [batch, seq] of x, "
           << shapeStr({x.getDimSize(0), x.getDimSize(1)});
  return success();
}

LogicalResult RopeOp::verify() {
  if (failed(verifyRope(*this, getX().getType(), "x", getHeadDimAttr().getInt(),
                        getTheta().convertToDouble(), getResult())))
    return failure();
  return verifyRopePositions(*this, getPositions(), getX().getType());
}

int64_t RopeOp::getVectorFlops() { return product({3, numel(getX())}); }

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

/// The type of packed `[gate | up]` with the last dimension halved, or null
/// when it is not a ranked tensor with an even last dimension.
static RankedTensorType unpackedType(Type packed) {
  auto type = dyn_cast<RankedTensorType>(packed);
  if (!type || type.getRank() < 1 || type.getShape().back() % 2 != 0)
    return {};
  SmallVector<int64_t> shape(type.getShape());
  shape.back() /= 2;
  return RankedTensorType::get(shape, type.getElementType());
}

void SwigluOp::build(OpBuilder &builder, OperationState &state, Value gate,
                     Value up) {
  Type result = up ? gate.getType() : Type(unpackedType(gate.getType()));
  build(builder, state, result, gate, up);
}

LogicalResult SwigluOp::verify() {
  if (isPacked()) {
    // SW2: the result is gate's type with the last dimension halved.
    RankedTensorType half = unpackedType(getGate().getType());
    if (!half)
      return emitOpError("packed [gate | up] operand ")
             << getGate().getType() << " needs an even last dimension";
    return verifySameType(*this, getResult(), half,
                          "the packed operand's type halved");
  }
  // SW1: gate, up and the result have one type.
  if (getUp().getType() != getGate().getType())
    return emitOpError("up is ") << getUp().getType() << " but gate is "
                                 << getGate().getType();
  return verifySameType(*this, getResult(), getGate().getType(), "gate's type");
}

int64_t SwigluOp::getVectorFlops() {
  // g · sigmoid(g) · up, sigmoid = 1 / (1 + exp(-g)): 4 + 2 per element.
  return product({6, numel(getResult())});
}

void GeluOp::build(OpBuilder &builder, OperationState &state, Value x,
                   bool tanh) {
  build(builder, state, x.getType(), x,
        tanh ? builder.getUnitAttr() : UnitAttr());
}

LogicalResult GeluOp::verify() {
  // G1: the result has x's type.
  return verifySameType(*this, getResult(), getX().getType(), "x's type");
}

int64_t GeluOp::getVectorFlops() {
  // Exact 0.5 · x · (1 + erf(x / √2)): 5; tanh: 9.
  return product({getTanh() ? 9 : 5, numel(getResult())});
}

void AddOp::build(OpBuilder &builder, OperationState &state, Value lhs,
                  Value rhs) {
  build(builder, state, lhs.getType(), lhs, rhs);
}

LogicalResult AddOp::verify() {
  // AD1: lhs, rhs and the result have one type.
  if (getRhs().getType() != getLhs().getType())
    return emitOpError("rhs is ") << getRhs().getType() << " but lhs is "
                                  << getLhs().getType();
  return verifySameType(*this, getResult(), getLhs().getType(), "lhs's type");
}

int64_t AddOp::getVectorFlops() { return numel(getResult()); }

void ScaleOp::build(OpBuilder &builder, OperationState &state, Value x,
                    double scale) {
  build(builder, state, x.getType(), x, builder.getF64FloatAttr(scale));
}

LogicalResult ScaleOp::verify() {
  // SC1: the result has x's type.
  if (failed(verifySameType(*this, getResult(), getX().getType(), "x's type")))
    return failure();
  // SC2: a finite, nonzero factor (a zero one would cut the gradient).
  double scale = getScale().convertToDouble();
  if (!std::isfinite(scale) || scale == 0)
    return emitOpError("scale is ") << scale << " but must be finite and "
                                       "nonzero";
  return success();
}

int64_t ScaleOp::getVectorFlops() {
  // x · scale: 1 per element.
  return numel(getResult());
}

void DropoutOp::build(OpBuilder &builder, OperationState &state, Value x,
                      double rate, int64_t rngId) {
  build(builder, state, x.getType(), x, builder.getF64FloatAttr(rate),
        builder.getI64IntegerAttr(rngId), /*seq_axis=*/StringAttr(),
        /*feature_axis=*/StringAttr());
}

LogicalResult DropoutOp::verify() {
  // D1: rate in [0, 1).
  double rate = getRate().convertToDouble();
  if (!(rate >= 0 && rate < 1))
    return emitOpError("rate is ") << rate << " but must be in [0, 1)";
  // D2: the result has x's type.
  if (failed(verifySameType(*this, getResult(), getX().getType(), "x's type")))
    return failure();
  // D3: a sequence slice has a sequence and a mesh axis.
  if (auto axis = getSeqAxis()) {
    if (getX().getType().getRank() < 2)
      return emitOpError("seq_axis needs x of rank >= 2, found ")
             << getX().getType();
    if (failed(verifyMeshAxis(*this, *axis, "seq_axis")))
      return failure();
  }
  // D4: a slice of the last dimension: rank >= 2, a mesh axis, not also a
  // sequence slice.
  if (auto axis = getFeatureAxis()) {
    if (getX().getType().getRank() < 2)
      return emitOpError("feature_axis needs x of rank >= 2, found ")
             << getX().getType();
    if (getSeqAxis())
      return emitOpError("has both seq_axis and feature_axis: x is a slice "
                         "of one or the other");
    if (failed(verifyMeshAxis(*this, *axis, "feature_axis")))
      return failure();
  }
  return success();
}

int64_t DropoutOp::getVectorFlops() {
  // x · 1/(1 - rate) where kept (the mask's Philox rounds are integer work).
  return numel(getResult());
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

/// The loss element type for logits of element type `logits`.
static Type lossElementType(Type logits) {
  return logits.isF64() ? logits : Float32Type::get(logits.getContext());
}

void CrossEntropyOp::build(OpBuilder &builder, OperationState &state,
                           Value logits, Value targets, int64_t ignoreIndex) {
  Type element = cast<ShapedType>(logits.getType()).getElementType();
  build(builder, state, RankedTensorType::get({}, lossElementType(element)),
        logits, targets, builder.getI64IntegerAttr(ignoreIndex));
}

/// CE1 of model.cross_entropy (shared with model.cross_entropy_grad).
static LogicalResult verifyLogitsTargets(Operation *op,
                                         RankedTensorType logits,
                                         RankedTensorType targets) {
  if (logits.getRank() < 2)
    return op->emitOpError("logits have rank ")
           << logits.getRank() << " but need rank >= 2";
  if (!shapesAgree(targets.getShape(), logits.getShape().drop_back()))
    return op->emitOpError("targets are ")
           << shapeStr(targets.getShape()) << " but the logits "
           << shapeStr(logits.getShape()) << " need "
           << shapeStr(logits.getShape().drop_back());
  return success();
}

/// The rank-0 loss type for `logits`.
static RankedTensorType lossType(RankedTensorType logits) {
  return RankedTensorType::get({}, lossElementType(logits.getElementType()));
}

LogicalResult CrossEntropyOp::verify() {
  // CE1: logits rank >= 2, targets = logits' shape without the last dim.
  if (failed(verifyLogitsTargets(*this, getLogits().getType(),
                                 getTargets().getType())))
    return failure();
  // CE2: a rank-0 loss of f64 for f64 logits, of f32 otherwise.
  return verifySameType(*this, getLoss(), lossType(getLogits().getType()), "");
}

int64_t CrossEntropyOp::getVectorFlops() { return product({4, numel(getLogits())}); }

/// `type`'s shape without its last dimension, of element type `element`.
static RankedTensorType rowsType(RankedTensorType type, Type element) {
  return RankedTensorType::get(type.getShape().drop_back(), element);
}

/// A shape-and-type check shared by the split cross-entropy's verifiers:
/// `value` must be `expected`.
static LogicalResult verifyIsType(Operation *op, StringRef what, Value value,
                                  RankedTensorType expected) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getElementType() != expected.getElementType() ||
      !shapesAgree(type.getShape(), expected.getShape()))
    return op->emitOpError(what) << " is " << type << " but must be "
                                 << expected;
  return success();
}

LogicalResult CrossEntropyMaxOp::verify() {
  RankedTensorType logits = getLogits().getType();
  // CEM1: rank >= 2; the result is the rows' shape and element type.
  if (logits.getRank() < 2)
    return emitOpError("logits have rank ")
           << logits.getRank() << " but need rank >= 2";
  return verifyIsType(*this, "row_max", getRowMax(),
                      rowsType(logits, logits.getElementType()));
}

int64_t CrossEntropyMaxOp::getVectorFlops() { return numel(getLogits()); }

LogicalResult CrossEntropyPartialOp::verify() {
  RankedTensorType logits = getLogits().getType();
  // CEP1: CE1.
  if (failed(verifyLogitsTargets(*this, logits, getTargets().getType())))
    return failure();
  // CEP2: row_max is the rows' shape and the logits' element type.
  if (failed(verifyIsType(*this, "row_max", getRowMax(),
                          rowsType(logits, logits.getElementType()))))
    return failure();
  // CEP3: the result is [rows..., 2], of the loss's element type.
  SmallVector<int64_t> shape(logits.getShape());
  shape.back() = 2;
  if (failed(verifyIsType(
          *this, "the result", getPartial(),
          RankedTensorType::get(
              shape, lossElementType(logits.getElementType())))))
    return failure();
  // CEP4: vocab_axis is a mesh axis.
  if (auto axis = getVocabAxis())
    if (failed(verifyMeshAxis(*this, *axis, "vocab_axis")))
      return failure();
  return success();
}

int64_t CrossEntropyPartialOp::getVectorFlops() {
  return product({3, numel(getLogits())});
}

LogicalResult CrossEntropyFinishOp::verify() {
  RankedTensorType sums = getSums().getType();
  // CEF1: sums is [rows..., 2]; row_max and targets are [rows...].
  if (sums.getRank() < 2 || !dimsAgree(sums.getShape().back(), 2))
    return emitOpError("sums are ")
           << shapeStr(sums.getShape())
           << " but need rank >= 2 and a last dimension of 2";
  // row_max is in the logits' element type, the sums in its loss type
  // (bf16 logits, f32 sums).
  Type maxElement = getRowMax().getType().getElementType();
  if (failed(verifyIsType(*this, "row_max", getRowMax(),
                          rowsType(sums, maxElement))))
    return failure();
  if (failed(verifyIsType(
          *this, "the sums' tensor", getSums(),
          RankedTensorType::get(sums.getShape(),
                                lossElementType(maxElement)))))
    return failure();
  if (failed(verifyLogitsTargets(*this, sums, getTargets().getType())))
    return failure();
  // CEF2: the loss type, and lse of the rows' shape in it.
  RankedTensorType loss = lossType(sums);
  if (failed(verifyIsType(*this, "the loss", getLoss(), loss)))
    return failure();
  return verifyIsType(*this, "lse", getLse(),
                      rowsType(sums, loss.getElementType()));
}

int64_t CrossEntropyFinishOp::getVectorFlops() {
  // Per row: lse = max + log(sum) (2), lse - target logit (1), the mean (1).
  return product({4, numel(getRowMax())});
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingGradOp::verify() {
  RankedTensorType dy = getDy().getType(), table = getDtable().getType();
  // EG1: the result has rank 2.
  if (table.getRank() != 2)
    return emitOpError("result has rank ")
           << table.getRank() << " but must have rank 2";
  // EG2: dy is the ids' shape followed by the table's dimension 1.
  SmallVector<int64_t> expected(getIds().getType().getShape());
  expected.push_back(table.getDimSize(1));
  if (!shapesAgree(dy.getShape(), expected))
    return emitOpError("dy is ")
           << shapeStr(dy.getShape()) << " but ids and table give "
           << shapeStr(expected);
  // EG3: one element type.
  if (dy.getElementType() != table.getElementType())
    return emitOpError("dy element type ")
           << dy.getElementType() << " differs from the result's "
           << table.getElementType();
  // EG4: vocab_axis is a mesh axis.
  if (auto axis = getVocabAxis())
    if (failed(verifyMeshAxis(*this, *axis, "vocab_axis")))
      return failure();
  return success();
}

int64_t EmbeddingGradOp::getVectorFlops() { return numel(getDy()); }

LogicalResult PositionEmbeddingGradOp::verify() {
  RankedTensorType dy = getDy().getType(), table = getDtable().getType();
  // PEG1: dy rank 3, result rank 2 with dy's last dimension.
  if (dy.getRank() != 3 || table.getRank() != 2 ||
      !dimsAgree(dy.getDimSize(2), table.getDimSize(1)))
    return emitOpError("dy must be [batch, seq, hidden] and the result "
                       "[positions, hidden], found ")
           << shapeStr(dy.getShape()) << " and " << shapeStr(table.getShape());
  // PEG4: seq_axis is a mesh axis; PEG2 counts the whole sequence.
  int64_t seq = dy.getDimSize(1), positions = table.getDimSize(0);
  if (auto axis = getSeqAxis()) {
    FailureOr<int64_t> n = verifyMeshAxis(*this, *axis, "seq_axis");
    if (failed(n))
      return failure();
    if (!ShapedType::isDynamic(seq))
      seq *= *n;
  }
  // PEG2: seq <= positions.
  if (!ShapedType::isDynamic(seq) && !ShapedType::isDynamic(positions) &&
      seq > positions)
    return emitOpError("sequence length ")
           << seq << " exceeds the table's " << positions << " positions";
  // PEG5: positions [batch, whole sequence].
  if (Value positions = getPositions())
    if (!indexShaped(positions, {dy.getDimSize(0), seq}))
      return emitOpError("positions are ")
             << shapeStr(cast<RankedTensorType>(positions.getType()).getShape())
             << " but must be [batch, seq] of the whole sequence, "
             << shapeStr({dy.getDimSize(0), seq});
  // PEG3: one element type.
  if (dy.getElementType() != table.getElementType())
    return emitOpError("dy element type ")
           << dy.getElementType() << " differs from the result's "
           << table.getElementType();
  return success();
}

int64_t PositionEmbeddingGradOp::getVectorFlops() { return numel(getDy()); }

/// The [in, out] dimensions of a weight stored as `w`.
static std::pair<int64_t, int64_t> weightInOut(RankedTensorType w,
                                               bool transposeW) {
  if (w.getRank() != 2)
    return {ShapedType::kDynamic, ShapedType::kDynamic};
  return transposeW ? std::make_pair(w.getDimSize(1), w.getDimSize(0))
                    : std::make_pair(w.getDimSize(0), w.getDimSize(1));
}

LogicalResult LinearGradInputOp::verify() {
  RankedTensorType dy = getDy().getType(), w = getWeight().getType();
  // LGI1: dy rank >= 1, weight rank 2.
  if (dy.getRank() < 1 || w.getRank() != 2)
    return emitOpError("dy must have rank >= 1 and the weight rank 2, found "
                       "ranks ")
           << dy.getRank() << " and " << w.getRank();
  auto [in, out] = weightInOut(w, getTransposeW());
  // LGI2: dy's last dimension is the output dimension.
  if (!dimsAgree(dy.getShape().back(), out))
    return emitOpError("dy has ")
           << dy.getShape().back() << " columns but the weight "
           << shapeStr(w.getShape()) << " has " << out << " outputs";
  // LGI3: dx is dy's shape with the input dimension last.
  SmallVector<int64_t> expected(dy.getShape());
  expected.back() = in;
  RankedTensorType dx = getDx().getType();
  if (!shapesAgree(dx.getShape(), expected))
    return emitOpError("result shape is ")
           << shapeStr(dx.getShape()) << " but must be " << shapeStr(expected);
  // LGI4: one element type.
  if (w.getElementType() != dy.getElementType() ||
      dx.getElementType() != dy.getElementType())
    return emitOpError("dy, weight and result must have one element type, "
                       "found ")
           << dy.getElementType() << ", " << w.getElementType() << " and "
           << dx.getElementType();
  return success();
}

int64_t LinearGradInputOp::getMatmulFlops() {
  auto [in, out] = weightInOut(getWeight().getType(), getTransposeW());
  int64_t rows = numel(getDy()) / std::max<int64_t>(out, 1);
  return product({2, rows, in, out});
}

int64_t LinearGradInputOp::getVectorFlops() { return 0; }

LogicalResult LinearGradWeightOp::verify() {
  RankedTensorType x = getX().getType(), dy = getDy().getType();
  // LGW1: one rank >= 1, agreeing leading dimensions.
  if (x.getRank() < 1)
    return emitOpError("x must have rank >= 1, found rank 0");
  if (x.getRank() != dy.getRank() ||
      !shapesAgree(x.getShape().drop_back(), dy.getShape().drop_back()))
    return emitOpError("x ")
           << shapeStr(x.getShape()) << " and dy " << shapeStr(dy.getShape())
           << " must agree in every dimension but the last";
  // LGW2: the result is the weight's layout of [in, out].
  int64_t in = x.getShape().back(), out = dy.getShape().back();
  SmallVector<int64_t> expected =
      getTransposeW() ? SmallVector<int64_t>{out, in}
                      : SmallVector<int64_t>{in, out};
  RankedTensorType dw = getDweight().getType();
  if (!shapesAgree(dw.getShape(), expected))
    return emitOpError("result shape is ")
           << shapeStr(dw.getShape()) << " but must be " << shapeStr(expected)
           << (getTransposeW() ? " ([out, in])" : " ([in, out])");
  // LGW3: one element type.
  if (dy.getElementType() != x.getElementType() ||
      dw.getElementType() != x.getElementType())
    return emitOpError("x, dy and result must have one element type, found ")
           << x.getElementType() << ", " << dy.getElementType() << " and "
           << dw.getElementType();
  return success();
}

int64_t LinearGradWeightOp::getMatmulFlops() {
  RankedTensorType x = getX().getType(), dy = getDy().getType();
  int64_t in = x.getShape().back();
  int64_t rows = numel(getX()) / std::max<int64_t>(in, 1);
  return product({2, rows, in, dy.getShape().back()});
}

int64_t LinearGradWeightOp::getVectorFlops() { return 0; }

LogicalResult BiasGradOp::verify() {
  RankedTensorType dy = getDy().getType(), db = getDbias().getType();
  // BG1: the result is [d], d dy's last dimension.
  if (dy.getRank() < 1)
    return emitOpError("dy must have rank >= 1, found rank 0");
  if (db.getRank() != 1 ||
      !dimsAgree(db.getDimSize(0), dy.getShape().back()))
    return emitOpError("result must be [d] for dy ")
           << shapeStr(dy.getShape()) << ", found " << shapeStr(db.getShape());
  // BG2: one element type.
  if (db.getElementType() != dy.getElementType())
    return emitOpError("result element type ")
           << db.getElementType() << " differs from dy's "
           << dy.getElementType();
  return success();
}

int64_t BiasGradOp::getVectorFlops() { return numel(getDy()); }

/// RNG1-RNG3 / LNG1-LNG3: the norm's parameter, the types of dy and of the
/// gradients, eps.
static LogicalResult verifyNormGrad(Operation *op, RankedTensorType x,
                                    Value weight, Value dy, ValueRange dx,
                                    ValueRange dparams, APFloat eps) {
  if (x.getRank() < 1)
    return op->emitOpError("x must have rank >= 1");
  if (failed(verifyNormParam(op, x, weight, "weight")))
    return failure();
  if (dy.getType() != x)
    return op->emitOpError("dy is ") << dy.getType() << " but x is " << x;
  for (Value v : dx)
    if (v.getType() != x)
      return op->emitOpError("dx is ") << v.getType() << " but x is " << x;
  for (auto [i, v] : llvm::enumerate(dparams))
    if (v.getType() != weight.getType())
      return op->emitOpError(i == 0 ? "dweight is " : "dbias is ")
             << v.getType() << " but the weight is " << weight.getType();
  return verifyEps(op, eps);
}

LogicalResult RmsNormGradOp::verify() {
  return verifyNormGrad(*this, getX().getType(), getWeight(), getDy(),
                        getDx(), getDweight(), getEps());
}

int64_t RmsNormGradOp::getVectorFlops() {
  // The forward again (4), dw += dy · x · rstd (3), the row's dot (3), dx
  // (4).
  return product({4 + 10, numel(getX())});
}

LogicalResult LayerNormGradOp::verify() {
  return verifyNormGrad(*this, getX().getType(), getWeight(), getDy(),
                        getDx(), ValueRange{getDweight(), getDbias()},
                        getEps());
}

int64_t LayerNormGradOp::getVectorFlops() {
  // The forward again (8), dw (4), db (1), the row sums (6), dx (7).
  return product({8 + 18, numel(getX())});
}

LogicalResult RopeGradOp::verify() {
  if (failed(verifyRope(*this, getDy().getType(), "dy",
                        getHeadDimAttr().getInt(), getTheta().convertToDouble(),
                        getDx())))
    return failure();
  return verifyRopePositions(*this, getPositions(), getDy().getType());
}

int64_t RopeGradOp::getVectorFlops() { return product({3, numel(getDy())}); }

LogicalResult AttentionGradOp::verify() {
  RankedTensorType q = getQ().getType(), k = getK().getType(),
                   v = getV().getType();
  int64_t allHeads, allKvHeads;
  // AG4: the forward op's A6.
  if (failed(verifyHeadSlice(*this, getNumHeadsAttr().getInt(),
                             getNumKvHeadsAttr().getInt(), getHeadAxis(),
                             getGlobalHeads(), getGlobalKvHeads(), allHeads,
                             allKvHeads)))
    return failure();
  // AG1: the forward op's A1-A4.
  if (failed(verifyAttention(*this, q, k, v, getNumHeadsAttr().getInt(),
                             getNumKvHeadsAttr().getInt(),
                             getScale().convertToDouble(),
                             getDropout().convertToDouble(), getCausal(),
                             allHeads, allKvHeads)))
    return failure();
  // AG5: the forward's A7.
  if (failed(verifyDocuments(*this, getPositions(), q, getCausal())))
    return failure();
  // AG2: out and dout have q's type; one element type.
  if (!oneElementType(q, k, v))
    return emitOpError("q, k and v mix element types ")
           << q.getElementType() << ", " << k.getElementType() << " and "
           << v.getElementType();
  if (getOut().getType() != q || getDout().getType() != q)
    return emitOpError("out and dout must have q's type ")
           << q << ", found " << getOut().getType() << " and "
           << getDout().getType();
  // AG3: dq, dk, dv have the types of q, k, v.
  if (getDq().getType() != q || getDk().getType() != k ||
      getDv().getType() != v)
    return emitOpError("dq, dk and dv must have the types of q, k and v, "
                       "found ")
           << getDq().getType() << ", " << getDk().getType() << " and "
           << getDv().getType();
  return success();
}

int64_t AttentionGradOp::getMatmulFlops() {
  // Per score q·k again, dP = dO·v, dQ += dS·k, dK += dSᵀ·q and dV += Pᵀ·dO
  // (10d), and per query row dO·O (2d), with the forward's log-sum-exp
  // (which plan-lower keeps for it).
  int64_t heads = getNumHeadsAttr().getInt(), d = headSize(getQ(), heads);
  auto q = cast<RankedTensorType>(getQ().getType());
  int64_t rows = product({2 * d, q.getDimSize(0), heads, q.getDimSize(1)});
  int64_t scores = attentionCost(getQ(), getK(), heads, getCausal(), 10 * d);
  return scores > std::numeric_limits<int64_t>::max() - rows
             ? std::numeric_limits<int64_t>::max()
             : scores + rows;
}

int64_t AttentionGradOp::getVectorFlops() { return 0; }

LogicalResult QkvConcatOp::verify() {
  return verifyQkv(*this, getQkv().getType(), getNumHeadsAttr().getInt(),
                   getNumKvHeadsAttr().getInt(), getHeadDimAttr().getInt(),
                   getLayout(), getQ(), getK(), getV());
}

int64_t QkvConcatOp::getVectorFlops() { return 0; }

LogicalResult SwigluGradOp::verify() {
  Type type = getGate().getType();
  if (!getUp()) {
    // SWG2: one result of the packed type; dy is it halved.
    if (getDup())
      return emitOpError("with a packed operand has one result, not two");
    RankedTensorType half = unpackedType(type);
    if (!half)
      return emitOpError("packed [gate | up] operand ")
             << type << " needs an even last dimension";
    if (getDy().getType() != half)
      return emitOpError("dy is ") << getDy().getType() << " but must be "
                                   << half;
    return verifySameType(*this, getDgate(), type, "the packed operand's type");
  }
  // SWG1: one type for operands and results.
  if (!getDup())
    return emitOpError("with gate and up apart has two results");
  for (Value v : {getUp(), getDy(), getDgate(), getDup()})
    if (v.getType() != type)
      return emitOpError("operands and results must all be ")
             << type << ", found " << v.getType();
  return success();
}

int64_t SwigluGradOp::getVectorFlops() {
  // Per element of dy: sigmoid (4), dup (2), dgate (6).
  return product({12, numel(getDy())});
}

LogicalResult GeluGradOp::verify() {
  // GG1: x, dy and the result have one type.
  if (getDy().getType() != getX().getType())
    return emitOpError("dy is ") << getDy().getType() << " but x is "
                                 << getX().getType();
  return verifySameType(*this, getDx(), getX().getType(), "x's type");
}

int64_t GeluGradOp::getVectorFlops() {
  // Exact: Φ(x) (4), x · φ(x) (5), their sum and dy · (2); tanh: 19.
  return product({getTanh() ? 19 : 11, numel(getDy())});
}

LogicalResult CrossEntropyGradOp::verify() {
  RankedTensorType logits = getLogits().getType();
  // CEG1: CE1.
  if (failed(verifyLogitsTargets(*this, logits, getTargets().getType())))
    return failure();
  // CEG2: dloss is the loss type.
  if (getDloss().getType() != lossType(logits))
    return emitOpError("dloss is ")
           << getDloss().getType() << " but the loss of these logits is "
           << lossType(logits);
  // CEG3: the result has the logits' type.
  if (failed(verifySameType(*this, getDlogits(), logits, "the logits' type")))
    return failure();
  // CEG4: lse is the rows' shape in the loss's element type.
  if (Value lse = getLse())
    if (failed(verifyIsType(*this, "lse", lse,
                            rowsType(logits, lossElementType(
                                                 logits.getElementType())))))
      return failure();
  // CEG5: vocab_axis is a mesh axis and comes with lse.
  if (auto axis = getVocabAxis()) {
    if (!getLse())
      return emitOpError("vocab_axis needs the global lse operand");
    if (failed(verifyMeshAxis(*this, *axis, "vocab_axis")))
      return failure();
  }
  return success();
}

int64_t CrossEntropyGradOp::getVectorFlops() {
  // exp(x - lse) · scale per logit, with the log-sum-exp of the forward
  // (plan-lower keeps it for the gradient) or the global one.
  return product({3, numel(getLogits())});
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

LogicalResult GradNormOp::verify() {
  // GN1: at least one gradient, one element type.
  if (getGrads().empty())
    return emitOpError("needs at least one gradient");
  Type element = cast<ShapedType>(getGrads()[0].getType()).getElementType();
  for (Value g : getGrads())
    if (cast<ShapedType>(g.getType()).getElementType() != element)
      return emitOpError("gradients mix element types ")
             << element << " and " << cast<ShapedType>(g.getType()).getElementType();
  // GN2: max_norm finite and >= 0.
  double maxNorm = getMaxNorm().convertToDouble();
  if (!(maxNorm >= 0) || std::isinf(maxNorm))
    return emitOpError("max_norm is ") << maxNorm << " but must be finite and >= 0";
  // GN3: mesh, axes and replicated together; one entry per gradient.
  if (!getMesh() && !getAxes() && !getReplicated())
    return success();
  if (!getMesh() || !getAxes() || !getReplicated())
    return emitOpError("mesh, axes and replicated must be given together");
  if (failed(verifyMeshAxes(*this, getMeshAttr(), *getAxes())))
    return failure();
  if (getReplicated()->size() != getGrads().size())
    return emitOpError("replicated has ")
           << getReplicated()->size() << " entries for " << getGrads().size()
           << " gradients";
  return success();
}

int64_t GradNormOp::getVectorFlops() {
  int64_t n = 0;
  for (Value g : getGrads())
    n += product({2, numel(g)});
  return n;
}

LogicalResult AdamWOp::verify() {
  // AW1: one type for parameter, gradient, moments and results.
  Type type = getParam().getType();
  for (Value v : {getGrad(), getM(), getV(), getNewParam(), getNewM(), getNewV()})
    if (v.getType() != type)
      return emitOpError("parameter, gradient, moments and results must all be ")
             << type << ", found " << v.getType();
  // AW2 is the ODS type constraint of lr, step and grad_scale.
  // AW3: hyper-parameter ranges.
  double beta1 = getBeta1().convertToDouble(), beta2 = getBeta2().convertToDouble();
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return emitOpError("beta1 = ") << beta1 << " and beta2 = " << beta2
                                   << " must be in [0, 1)";
  if (!(getEps().convertToDouble() > 0))
    return emitOpError("eps is ") << getEps().convertToDouble()
                                  << " but must be > 0";
  if (!(getWeightDecay().convertToDouble() >= 0))
    return emitOpError("weight_decay is ")
           << getWeightDecay().convertToDouble() << " but must be >= 0";
  return success();
}

int64_t AdamWOp::getVectorFlops() {
  // g · scale (1), m (3), v (4), the decay (1), the step (6).
  return product({15, numel(getParam())});
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// CL2: `mesh` names a model.mesh and `axes` are distinct axes of it.
static LogicalResult verifyMeshAxes(Operation *op, FlatSymbolRefAttr mesh,
                                    ArrayAttr axes) {
  auto meshOp = SymbolTable::lookupNearestSymbolFrom<MeshOp>(op, mesh);
  if (!meshOp)
    return op->emitOpError("mesh ") << mesh << " is not a model.mesh of the module";
  if (axes.empty())
    return op->emitOpError("needs at least one mesh axis");
  llvm::StringSet<> seen;
  for (Attribute axis : axes) {
    StringRef name = cast<StringAttr>(axis).getValue();
    if (!seen.insert(name).second)
      return op->emitOpError("names axis \"") << name << "\" twice";
    if (!meshOp.getAxisSize(name))
      return op->emitOpError("axis \"")
             << name << "\" is not an axis of mesh " << mesh;
  }
  return success();
}

/// CL1 and CL2 for a collective whose results pair with its operands.
static LogicalResult verifyCollective(Operation *op, FlatSymbolRefAttr mesh,
                                      ArrayAttr axes) {
  // CL1: at least one operand; results pair with operands by type.
  if (op->getNumOperands() == 0)
    return op->emitOpError("needs at least one operand");
  if (op->getNumResults() != op->getNumOperands())
    return op->emitOpError("has ")
           << op->getNumResults() << " results for " << op->getNumOperands()
           << " operands";
  for (auto [i, in, out] :
       llvm::enumerate(op->getOperandTypes(), op->getResultTypes()))
    if (in != out)
      return op->emitOpError("result ")
             << i << " is " << out << " but its operand is " << in;
  // CL2: the mesh exists and the axes are distinct axes of it.
  return verifyMeshAxes(op, mesh, axes);
}

LogicalResult AllReduceOp::verify() {
  if (failed(verifyCollective(*this, getMeshAttr(), getAxes())))
    return failure();
  // CL3: a reason.
  if (getReason().empty())
    return emitOpError("needs a reason (why the collective is there)");
  return success();
}

// A reduction's adds are the network's time, not the ALU's: collectives
// count no FLOPs (docs/report.md, "One FLOP convention").
int64_t AllReduceOp::getVectorFlops() { return 0; }

/// CG1 to CG4 (and RS1 to RS4): `whole` is the concatenated shape, `part`
/// one rank's; `gather` names the op's direction in messages.
static LogicalResult verifySliceCollective(Operation *op, FlatSymbolRefAttr mesh,
                                           ArrayAttr axes, int64_t dim,
                                           StringRef reason, bool gather) {
  auto in = cast<RankedTensorType>(op->getOperand(0).getType());
  auto out = cast<RankedTensorType>(op->getResult(0).getType());
  // CG1: one element type and rank; dim a dimension.
  if (in.getElementType() != out.getElementType() ||
      in.getRank() != out.getRank())
    return op->emitOpError("operand ")
           << in << " and result " << out
           << " must have one element type and rank";
  if (dim < 0 || dim >= in.getRank())
    return op->emitOpError("dim = ")
           << dim << " is not a dimension of " << in;
  // CG2: the mesh and its axes.
  if (failed(verifyMeshAxes(op, mesh, axes)))
    return failure();
  auto meshOp = SymbolTable::lookupNearestSymbolFrom<MeshOp>(op, mesh);
  int64_t ranks = 1;
  for (Attribute axis : axes)
    ranks *= *meshOp.getAxisSize(cast<StringAttr>(axis).getValue());
  // CG3: the whole is the part times the group's size along dim.
  RankedTensorType whole = gather ? out : in, part = gather ? in : out;
  SmallVector<int64_t> expected(part.getShape());
  if (!ShapedType::isDynamic(expected[dim]))
    expected[dim] *= ranks;
  if (!shapesAgree(whole.getShape(), expected))
    return op->emitOpError(gather ? "result is " : "operand is ")
           << shapeStr(whole.getShape()) << " but " << ranks
           << " ranks' slices of " << shapeStr(part.getShape())
           << " along dim " << dim << " make " << shapeStr(expected);
  // CG4: a reason.
  if (reason.empty())
    return op->emitOpError("needs a reason (why the collective is there)");
  return success();
}

LogicalResult AllGatherOp::verify() {
  return verifySliceCollective(*this, getMeshAttr(), getAxes(),
                               getDimAttr().getInt(), getReason(),
                               /*gather=*/true);
}

int64_t AllGatherOp::getVectorFlops() { return 0; }

LogicalResult ReduceScatterOp::verify() {
  return verifySliceCollective(*this, getMeshAttr(), getAxes(),
                               getDimAttr().getInt(), getReason(),
                               /*gather=*/false);
}

int64_t ReduceScatterOp::getVectorFlops() { return 0; }

//===----------------------------------------------------------------------===//
// Generation ops (ModelGenerationOps.td)
//===----------------------------------------------------------------------===//

void RopeAtOp::build(OpBuilder &builder, OperationState &state, Value x,
                     Value positions, int64_t headDim, double theta) {
  build(builder, state, x.getType(), x, positions,
        builder.getI64IntegerAttr(headDim), builder.getF64FloatAttr(theta));
}

LogicalResult RopeAtOp::verify() {
  RankedTensorType x = getX().getType();
  // RA2 to RA4 are model.rope's R2 to R4; RA1 adds the positions.
  if (failed(verifyRope(*this, x, "x", getHeadDimAttr().getInt(),
                        getTheta().convertToDouble(), getResult())))
    return failure();
  // RA1: positions [batch, seq].
  if (!indexShaped(getPositions(), {x.getDimSize(0), x.getDimSize(1)}))
    return emitOpError("positions are ")
           << shapeStr(getPositions().getType().getShape())
           << " but must be [batch, seq] of x, "
           << shapeStr({x.getDimSize(0), x.getDimSize(1)});
  return success();
}

int64_t RopeAtOp::getVectorFlops() { return product({3, numel(getX())}); }

void AttentionCachedOp::build(OpBuilder &builder, OperationState &state,
                              Value q, Value k, Value v, Value positions,
                              Value cacheK, Value cacheV, int64_t numHeads,
                              int64_t numKvHeads, double scale, bool alibi) {
  build(builder, state, q.getType(), cacheK.getType(), cacheV.getType(), q, k,
        v, positions, cacheK, cacheV, builder.getI64IntegerAttr(numHeads),
        builder.getI64IntegerAttr(numKvHeads), builder.getF64FloatAttr(scale),
        alibi ? builder.getUnitAttr() : UnitAttr(), StringAttr(), IntegerAttr(),
        IntegerAttr());
}

LogicalResult AttentionCachedOp::verify() {
  RankedTensorType q = getQ().getType(), k = getK().getType(),
                   v = getV().getType(), ck = getCacheK().getType(),
                   cv = getCacheV().getType();
  int64_t heads = getNumHeadsAttr().getInt(),
          kvHeads = getNumKvHeadsAttr().getInt();
  // AC7: the slice of the heads.
  int64_t allHeads, allKvHeads;
  if (failed(verifyHeadSlice(*this, heads, kvHeads, getHeadAxis(),
                             getGlobalHeads(), getGlobalKvHeads(), allHeads,
                             allKvHeads)))
    return failure();
  // AC1 (q, k, v), AC2, AC3 (k, v) and AC5 are model.attention's A1 to A4
  // on the new rows, causal: k and v have q's length.
  if (failed(verifyAttention(*this, q, k, v, heads, kvHeads,
                             getScale().convertToDouble(), /*dropout=*/0,
                             /*causal=*/true, allHeads, allKvHeads)))
    return failure();
  // AC1: the caches and the positions.
  if (ck.getRank() != 3 || !dimsAgree(ck.getDimSize(0), q.getDimSize(0)))
    return emitOpError("cache_k is ")
           << ck << " but must be [batch, cache_len, kv columns] of q's batch";
  if (!indexShaped(getPositions(), {q.getDimSize(0), q.getDimSize(1)}))
    return emitOpError("positions are ")
           << shapeStr(getPositions().getType().getShape())
           << " but must be [batch, seq] of q, "
           << shapeStr({q.getDimSize(0), q.getDimSize(1)});
  // AC3: the caches' columns are k's.
  if (!dimsAgree(ck.getDimSize(2), k.getDimSize(2)))
    return emitOpError("the caches have ")
           << ck.getDimSize(2) << " columns but k has " << k.getDimSize(2);
  // AC4: one cache type, long enough, of q's element type.
  if (cv != ck)
    return emitOpError("cache_v is ") << cv << " but cache_k is " << ck;
  if (!ShapedType::isDynamic(ck.getDimSize(1)) &&
      !ShapedType::isDynamic(q.getDimSize(1)) &&
      ck.getDimSize(1) < q.getDimSize(1))
    return emitOpError("the caches hold ")
           << ck.getDimSize(1) << " positions, fewer than the "
           << q.getDimSize(1) << " written";
  if (!oneElementType(q, k, v) || ck.getElementType() != q.getElementType())
    return emitOpError("q, k, v and the caches mix element types");
  // AC6: the results.
  if (getResult().getType() != q)
    return emitOpError("result is ")
           << getResult().getType() << " but must be q's type " << q;
  if (getNewCacheK().getType() != ck || getNewCacheV().getType() != cv)
    return emitOpError("the new caches must have the caches' type ") << ck;
  return success();
}

int64_t AttentionCachedOp::getMatmulFlops() {
  // q·k and p·v (2d each) per score, as if each query saw the whole cache
  // (the positions are known only at run time): Kernels.def's row.
  auto q = getQ().getType();
  int64_t heads = getNumHeadsAttr().getInt();
  return product({4 * headSize(getQ(), heads), q.getDimSize(0), heads,
                  q.getDimSize(1), getCacheK().getType().getDimSize(1)});
}

int64_t AttentionCachedOp::getVectorFlops() { return 0; }

void TakeRowsOp::build(OpBuilder &builder, OperationState &state, Value x,
                       Value index) {
  auto type = cast<RankedTensorType>(x.getType());
  build(builder, state,
        withShape(type, {type.getDimSize(0), 1, type.getDimSize(2)}), x,
        index);
}

LogicalResult TakeRowsOp::verify() {
  RankedTensorType x = getX().getType();
  // TR1: x of rank 3, index [batch].
  if (x.getRank() != 3)
    return emitOpError("x has rank ") << x.getRank() << " but must have rank 3";
  if (!indexShaped(getIndex(), {x.getDimSize(0)}))
    return emitOpError("index is ")
           << shapeStr(getIndex().getType().getShape())
           << " but must be [batch] of x, [" << x.getDimSize(0) << "]";
  // TR2: [batch, 1, hidden].
  return verifySameType(
      *this, getResult(),
      withShape(x, {x.getDimSize(0), 1, x.getDimSize(2)}), "");
}

int64_t TakeRowsOp::getVectorFlops() { return 0; }

void SampleOp::build(OpBuilder &builder, OperationState &state, Value logits,
                     Value settings, Value seed, Value counter,
                     int64_t vocabSize) {
  auto type = cast<RankedTensorType>(logits.getType());
  build(builder, state,
        RankedTensorType::get({type.getDimSize(0)}, builder.getI32Type()),
        logits, settings, seed, counter, /*candidate_ids=*/Value(),
        builder.getI64IntegerAttr(vocabSize));
}

LogicalResult SampleOp::verify() {
  RankedTensorType logits = getLogits().getType();
  // S1: the operands' shapes.
  if (logits.getRank() != 3 || !dimsAgree(logits.getDimSize(1), 1))
    return emitOpError("logits are ")
           << logits << " but must be [batch, 1, vocab]";
  auto settings = getSettings().getType();
  if (!settings.getElementType().isF32() ||
      !shapesAgree(settings.getShape(), {3}))
    return emitOpError("settings are ") << settings << " but must be 3xf32";
  if (!indexShaped(getSeed(), {2}))
    return emitOpError("seed is ")
           << getSeed().getType() << " but must hold 2 words";
  if (!indexShaped(getCounter(), {logits.getDimSize(0)}))
    return emitOpError("counter is ")
           << getCounter().getType() << " but must be [batch]";
  // S2: vocab_size in [1, vocab], or at least 1 with candidates.
  int64_t vocab = getVocabSizeAttr().getInt();
  if (vocab < 1 || (!getCandidateIds() &&
                    !ShapedType::isDynamic(logits.getDimSize(2)) &&
                    vocab > logits.getDimSize(2)))
    return emitOpError("vocab_size = ")
           << vocab << " must be in [1, "
           << (getCandidateIds() ? std::string("...")
                                 : std::to_string(logits.getDimSize(2)))
           << "]";
  // S3: [batch] of i32.
  auto ids = cast<RankedTensorType>(getIds().getType());
  if (!ids.getElementType().isInteger(32) ||
      !shapesAgree(ids.getShape(), {logits.getDimSize(0)}))
    return emitOpError("ids are ") << ids << " but must be [batch] of i32";
  // S4: a candidate id per column.
  if (Value candidates = getCandidateIds();
      candidates && !indexShaped(candidates, {logits.getDimSize(0),
                                              logits.getDimSize(2)}))
    return emitOpError("candidates are ")
           << candidates.getType() << " but must be [batch, vocab] = ["
           << logits.getDimSize(0) << ", " << logits.getDimSize(2) << "]";
  return success();
}

int64_t SampleOp::getVectorFlops() { return product({4, numel(getLogits())}); }

void TopLogprobsOp::build(OpBuilder &builder, OperationState &state,
                          Value logits, int64_t k, int64_t vocabSize) {
  int64_t batch = cast<RankedTensorType>(logits.getType()).getDimSize(0);
  build(builder, state,
        RankedTensorType::get({batch, k}, builder.getF32Type()),
        RankedTensorType::get({batch, k}, builder.getI32Type()), logits,
        ValueRange(), builder.getI64IntegerAttr(k),
        builder.getI64IntegerAttr(vocabSize));
}

LogicalResult TopLogprobsOp::verify() {
  RankedTensorType logits = getLogits().getType();
  // TL1: [batch, 1, vocab].
  if (logits.getRank() != 3 || !dimsAgree(logits.getDimSize(1), 1))
    return emitOpError("logits are ")
           << logits << " but must be [batch, 1, vocab]";
  // TL4: none, or the candidates' ids and the ranks' log-sum-exps.
  const bool fromCandidates = !getCandidates().empty();
  if (fromCandidates) {
    if (getCandidates().size() != 2)
      return emitOpError("takes ")
             << getCandidates().size()
             << " candidate operands but needs 2 (the ids and the ranks' "
                "log-sum-exps)";
    Value ids = getCandidates()[0];
    auto lse = cast<RankedTensorType>(getCandidates()[1].getType());
    if (!indexShaped(ids, {logits.getDimSize(0), logits.getDimSize(2)}))
      return emitOpError("candidate ids are ")
             << ids.getType() << " but must be [batch, vocab] of i32";
    if (lse.getElementType() != logits.getElementType() ||
        lse.getRank() != 3 ||
        !shapesAgree(lse.getShape().take_front(2),
                     {logits.getDimSize(0), 1}))
      return emitOpError("lse is ")
             << lse << " but must be [batch, 1, ranks] of "
             << logits.getElementType();
  }
  // TL2: k in [1, vocab_size], vocab_size in [1, vocab]; with candidates,
  // k in [1, vocab].
  int64_t k = getKAttr().getInt(), vocab = getVocabSizeAttr().getInt();
  if (vocab < 1 || (!fromCandidates &&
                    !ShapedType::isDynamic(logits.getDimSize(2)) &&
                    vocab > logits.getDimSize(2)))
    return emitOpError("vocab_size = ")
           << vocab << " must be in [1, " << logits.getDimSize(2) << "]";
  int64_t limit = fromCandidates ? logits.getDimSize(2) : vocab;
  if (k < 1 || (!ShapedType::isDynamic(limit) && k > limit))
    return emitOpError("k = ")
           << k << " must be in [1, "
           << (fromCandidates ? "candidates" : "vocab_size") << " = " << limit
           << "]";
  // TL3: [batch, k] of f32 and i32.
  auto values = cast<RankedTensorType>(getLogprobs().getType());
  auto ids = cast<RankedTensorType>(getIds().getType());
  if (!values.getElementType().isF32() || !ids.getElementType().isInteger(32) ||
      !shapesAgree(values.getShape(), {logits.getDimSize(0), k}) ||
      !shapesAgree(ids.getShape(), {logits.getDimSize(0), k}))
    return emitOpError("results are ")
           << values << " and " << ids << " but must be [batch, k] of f32 "
           << "and of i32";
  return success();
}

int64_t TopLogprobsOp::getVectorFlops() {
  return product({4, numel(getLogits())});
}

void TokenLogprobsOp::build(OpBuilder &builder, OperationState &state,
                            Value logits, Value targets, int64_t vocabSize) {
  auto shape = cast<RankedTensorType>(targets.getType()).getShape();
  build(builder, state, RankedTensorType::get(shape, builder.getF32Type()),
        RankedTensorType::get(shape, builder.getI32Type()), logits, targets,
        builder.getI64IntegerAttr(vocabSize));
}

/// Scoring's ops: `targets` is [batch, seq] of `rows` (their first two
/// dimensions; `of` names them) and, with `logprobs`, the results are
/// [batch, seq] of f32 and of i32.
static LogicalResult verifyScoreRows(Operation *op, ArrayRef<int64_t> rows,
                                     Value targets, StringRef of,
                                     Value logprobs = {}, Value greedy = {}) {
  if (cast<RankedTensorType>(targets.getType()).getRank() != 2 ||
      !indexShaped(targets, rows))
    return op->emitOpError("targets are ")
           << targets.getType() << " but must be [batch, seq] of " << of
           << ", " << shapeStr(rows);
  if (!logprobs)
    return success();
  auto f32 = RankedTensorType::get(rows, Float32Type::get(op->getContext()));
  auto i32 =
      RankedTensorType::get(rows, IntegerType::get(op->getContext(), 32));
  auto lp = cast<RankedTensorType>(logprobs.getType());
  auto gr = cast<RankedTensorType>(greedy.getType());
  if (!shapesAgree(lp.getShape(), rows) ||
      lp.getElementType() != f32.getElementType() ||
      !shapesAgree(gr.getShape(), rows) ||
      gr.getElementType() != i32.getElementType())
    return op->emitOpError("results are ")
           << lp << " and " << gr << " but must be " << f32 << " and " << i32;
  return success();
}

LogicalResult TokenLogprobsOp::verify() {
  RankedTensorType logits = getLogits().getType();
  // TK1: logits [batch, seq, vocab], targets [batch, seq].
  if (logits.getRank() != 3)
    return emitOpError("logits are ")
           << logits << " but must be [batch, seq, vocab]";
  SmallVector<int64_t> rows(logits.getShape().take_front(2));
  if (failed(verifyScoreRows(*this, rows, getTargets(), "logits")))
    return failure();
  // TK2: vocab_size in [1, vocab].
  int64_t vocab = getVocabSizeAttr().getInt(), columns = logits.getDimSize(2);
  if (vocab < 1 || (!ShapedType::isDynamic(columns) && vocab > columns))
    return emitOpError("vocab_size = ")
           << vocab << " must be in [1, " << columns << "]";
  // TK3: [batch, seq] of f32 and of i32.
  return verifyScoreRows(*this, rows, getTargets(), "logits", getLogprobs(),
                         getGreedy());
}

int64_t TokenLogprobsOp::getVectorFlops() {
  // A log-sum-exp per row: 4 per logit, as TOP_LOGPROBS's row counts.
  return product({4, numel(getLogits())});
}

LogicalResult TokenLogprobsPartialOp::verify() {
  RankedTensorType logits = getLogits().getType();
  // TKP1: logits [batch, seq, vocab], targets [batch, seq].
  if (logits.getRank() != 3)
    return emitOpError("logits are ")
           << logits << " but must be [batch, seq, vocab]";
  SmallVector<int64_t> rows(logits.getShape().take_front(2));
  if (failed(verifyScoreRows(*this, rows, getTargets(), "logits")))
    return failure();
  // TKP2: vocab_size in [1, 2^24].
  int64_t vocab = getVocabSizeAttr().getInt();
  if (vocab < 1 || vocab > (int64_t(1) << 24))
    return emitOpError("vocab_size = ")
           << vocab << " must be in [1, 2^24] (ids travel as f32)";
  // TKP3: [batch, seq, 4] of f32, f64 for f64 logits.
  Type element = logits.getElementType().isF64()
                     ? Type(Float64Type::get(getContext()))
                     : Type(Float32Type::get(getContext()));
  SmallVector<int64_t> shape = {rows[0], rows[1], 4};
  if (!shapesAgree(getPartial().getType().getShape(), shape) ||
      getPartial().getType().getElementType() != element)
    return emitOpError("the result is ")
           << getPartial().getType() << " but must be "
           << RankedTensorType::get(shape, element);
  // TKP4: vocab_axis is a mesh axis.
  if (auto axis = getVocabAxis())
    if (failed(verifyMeshAxis(*this, *axis, "vocab_axis")))
      return failure();
  return success();
}

int64_t TokenLogprobsPartialOp::getVectorFlops() {
  // A maximum, exp(x - m) and its sum, and a comparison: 4 per logit.
  return product({4, numel(getLogits())});
}

LogicalResult TokenLogprobsFinishOp::verify() {
  RankedTensorType gathered = getGathered().getType();
  // TKF1: [batch, seq, 4·G] of f32 or f64; targets [batch, seq].
  if (gathered.getRank() != 3 ||
      !(gathered.getElementType().isF32() ||
        gathered.getElementType().isF64()) ||
      (!ShapedType::isDynamic(gathered.getDimSize(2)) &&
       (gathered.getDimSize(2) < 4 || gathered.getDimSize(2) % 4 != 0)))
    return emitOpError("the partials are ")
           << gathered << " but must be [batch, seq, 4·slices] of f32 or f64";
  SmallVector<int64_t> rows(gathered.getShape().take_front(2));
  // TKF2: [batch, seq] of f32 and of i32.
  return verifyScoreRows(*this, rows, getTargets(), "the partials",
                         getLogprobs(), getGreedy());
}

int64_t TokenLogprobsFinishOp::getVectorFlops() {
  // Per slice of a row: a maximum, an exp and a multiply-add.
  return product({1, numel(getGathered())});
}

void TopCandidatesOp::build(OpBuilder &builder, OperationState &state,
                            Value logits, int64_t k, int64_t vocabSize) {
  auto type = cast<RankedTensorType>(logits.getType());
  int64_t batch = type.getDimSize(0);
  Type element = type.getElementType();
  build(builder, state, RankedTensorType::get({batch, 1, k}, element),
        RankedTensorType::get({batch, k}, builder.getI32Type()),
        RankedTensorType::get({batch, 1, 1}, element), logits,
        builder.getI64IntegerAttr(k), builder.getI64IntegerAttr(vocabSize),
        /*vocab_axis=*/StringAttr());
}

LogicalResult TopCandidatesOp::verify() {
  RankedTensorType logits = getLogits().getType();
  // TC1: [batch, 1, vocab].
  if (logits.getRank() != 3 || !dimsAgree(logits.getDimSize(1), 1))
    return emitOpError("logits are ")
           << logits << " but must be [batch, 1, vocab]";
  // TC2: k and vocab_size at least 1.
  int64_t k = getKAttr().getInt(), vocab = getVocabSizeAttr().getInt();
  if (k < 1 || vocab < 1)
    return emitOpError("k = ")
           << k << " and vocab_size = " << vocab << " must be at least 1";
  // TC3: the results' shapes.
  int64_t batch = logits.getDimSize(0);
  Type element = logits.getElementType();
  if (failed(verifySameType(*this, getValues(),
                            RankedTensorType::get({batch, 1, k}, element),
                            "(values)")) ||
      failed(verifySameType(*this, getLse(),
                            RankedTensorType::get({batch, 1, 1}, element),
                            "(lse)")))
    return failure();
  if (!indexShaped(getIds(), {batch, k}))
    return emitOpError("ids are ")
           << getIds().getType() << " but must be [batch, k] of i32";
  // TC4: vocab_axis is a mesh axis.
  if (auto axis = getVocabAxis())
    if (failed(verifyMeshAxis(*this, *axis, "vocab_axis")))
      return failure();
  return success();
}

int64_t TopCandidatesOp::getVectorFlops() {
  return product({4, numel(getLogits())});
}

void ReorderRowsOp::build(OpBuilder &builder, OperationState &state, Value x,
                          Value parents) {
  build(builder, state, x.getType(), x, parents);
}

LogicalResult ReorderRowsOp::verify() {
  RankedTensorType x = getX().getType();
  // RR1: rows and parents.
  if (x.getRank() < 1)
    return emitOpError("x must have rank at least 1");
  if (!indexShaped(getParents(), {x.getDimSize(0)}))
    return emitOpError("parents are ")
           << shapeStr(getParents().getType().getShape())
           << " but must be [rows] of x, [" << x.getDimSize(0) << "]";
  // RR2: x's type.
  return verifySameType(*this, getResult(), x, "x's type");
}

int64_t ReorderRowsOp::getVectorFlops() { return 0; }
