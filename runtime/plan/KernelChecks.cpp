//===- KernelChecks.cpp - Each kernel's operand contract ------------------===//
//
// The checks Kernels.def's rows name; InstructionChecker::check() runs the
// row's after the checks every kernel shares.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/KernelChecks.h"

#include "runtime/plan/PlanLoader.h"

#include <utility>

namespace braid::plan {

namespace {

/// A weight's (inputs, outputs): [in, out], or [out, in] when transposed.
std::pair<int64_t, int64_t> inOut(const Buffer &w, bool transposeW) {
  return transposeW ? std::make_pair(w.shape(1), w.shape(0))
                    : std::make_pair(w.shape(0), w.shape(1));
}

} // namespace

absl::Status InstructionChecker::checkLinear() {
  BRAID_ASSIGN_OR_RETURN(transposeW, intAttr("transpose_w", 0, 1));
  {
    BRAID_RETURN_IF_ERROR(dtypes());
    if (inst.float_attrs().count("bias_scale"))
      BRAID_RETURN_IF_ERROR(floatAttr("bias_scale", 1e-6, 1.0).status());
    BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "x"));
    BRAID_RETURN_IF_ERROR(rank(in(1), 2, "weight"));
    auto [inDim, outDim] = inOut(in(1), transposeW);
    std::vector<int64_t> x(in(0).shape().begin(), in(0).shape().end());
    if (x.back() != inDim)
      return fail(absl::StrCat("x '", in(0).name(), "' ", internal::shapeStr(in(0)),
                               " does not match the weight's ", inDim, " inputs"));
    if (inst.inputs_size() == 3)
      BRAID_RETURN_IF_ERROR(shape(in(2), {outDim}, "bias"));
    x.back() = outDim;
    return shape(out(0), x, "y");
  }
}

absl::Status InstructionChecker::checkLinearGradInput() {
  BRAID_ASSIGN_OR_RETURN(transposeW, intAttr("transpose_w", 0, 1));
  {
    BRAID_RETURN_IF_ERROR(dtypes());
    BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "dy"));
    BRAID_RETURN_IF_ERROR(rank(in(1), 2, "weight"));
    auto [inDim, outDim] = inOut(in(1), transposeW);
    std::vector<int64_t> dy(in(0).shape().begin(), in(0).shape().end());
    if (dy.back() != outDim)
      return fail(absl::StrCat("dy '", in(0).name(), "' ", internal::shapeStr(in(0)),
                               " does not match the weight's ", outDim, " outputs"));
    dy.back() = inDim;
    return shape(out(0), dy, "dx");
  }
}

absl::Status InstructionChecker::checkLinearGradWeight() {
  BRAID_ASSIGN_OR_RETURN(transposeW, intAttr("transpose_w", 0, 1));
  {
    BRAID_RETURN_IF_ERROR(dtypes({}, {2}));
    BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "x"));
    const Buffer &x = in(0), &dy = in(1);
    if (x.shape_size() != dy.shape_size() ||
        !std::equal(x.shape().begin(), x.shape().end() - 1, dy.shape().begin()))
      return fail(absl::StrCat("x ", internal::shapeStr(x), " and dy ", internal::shapeStr(dy),
                               " must agree in every dimension but the last"));
    int64_t inDim = x.shape(x.shape_size() - 1);
    int64_t outDim = dy.shape(dy.shape_size() - 1);
    return shape(out(0),
                 transposeW ? std::vector<int64_t>{outDim, inDim}
                            : std::vector<int64_t>{inDim, outDim},
                 "dw");
  }
}

absl::Status InstructionChecker::checkNorm(bool layerNorm, bool grad) {
  int ins = grad ? 3 : (layerNorm ? 3 : 2);
  int outs = grad ? (layerNorm ? 3 : 2) : 1;
  // The parameter gradients (outputs after dx) may be F32.
  std::set<int> wide;
  for (int i = 1; grad && i < outs; ++i)
    wide.insert(ins + i);
  BRAID_RETURN_IF_ERROR(dtypes({}, wide));
  BRAID_ASSIGN_OR_RETURN(eps, floatAttr("eps", 1e-30, 1.0));
  (void)eps;
  const Buffer &x = in(0);
  BRAID_RETURN_IF_ERROR(minRank(x, 1, "x"));
  int64_t d = x.shape(x.shape_size() - 1);
  BRAID_RETURN_IF_ERROR(shape(in(1), {d}, "weight"));
  if (!grad) {
    if (layerNorm)
      BRAID_RETURN_IF_ERROR(shape(in(2), {d}, "bias"));
    return same(out(0), x, "y");
  }
  BRAID_RETURN_IF_ERROR(same(in(2), x, "dy"));
  BRAID_RETURN_IF_ERROR(same(out(0), x, "dx"));
  for (int i = 1; i < outs; ++i)
    BRAID_RETURN_IF_ERROR(shape(out(i),
                                {in(1).shape().begin(), in(1).shape().end()},
                                "parameter gradient"));
  return absl::OkStatus();
}

absl::Status InstructionChecker::checkRope() {
  // (x[, positions]): packed documents' positions, [batch, seq].
  bool at = inst.inputs_size() == 2;
  BRAID_RETURN_IF_ERROR(at ? dtypes({1}) : dtypes());
  BRAID_RETURN_IF_ERROR(rank(in(0), 3, "x"));
  if (at)
    BRAID_RETURN_IF_ERROR(
        shape(in(1), {in(0).shape(0), in(0).shape(1)}, "positions"));
  BRAID_ASSIGN_OR_RETURN(headDim, intAttr("head_dim", 2, int64_t(1) << 20));
  BRAID_ASSIGN_OR_RETURN(theta, floatAttr("theta", 1e-30, 1e30));
  (void)theta;
  if (headDim % 2 != 0 || in(0).shape(2) % headDim != 0)
    return fail(absl::StrCat("head_dim = ", headDim, " must be even and divide ",
                             in(0).shape(2)));
  return same(out(0), in(0), "y");
}

/// The heads of ATTENTION, ATTENTION_GRAD and ATTENTION_CACHED: kv_heads,
/// alibi and scale, q's columns (in(0)) and, with a slice of the heads
/// (tensor parallelism), the global counts and each rank's heads. Returns
/// kv_heads.
absl::StatusOr<int64_t> InstructionChecker::checkHeads(int64_t heads) {
  const Buffer &q = in(0);
  // A slice of the heads (tensor parallelism) may hold more kv heads than
  // query heads (kv heads replicated); the global counts must then divide.
  bool sliced = inst.int_attrs().count("global_heads") > 0;
  const int64_t kMaxHeads = int64_t(1) << 20;
  BRAID_ASSIGN_OR_RETURN(kvHeads, intAttr("kv_heads", 1, sliced ? kMaxHeads : heads));
  BRAID_ASSIGN_OR_RETURN(alibi, intAttr("alibi", 0, 1));
  BRAID_ASSIGN_OR_RETURN(scale, floatAttr("scale", 1e-30, 1e30));
  (void)alibi;
  (void)scale;
  if ((!sliced && heads % kvHeads != 0) || q.shape(2) % heads != 0)
    return fail(absl::StrCat("heads = ", heads, " and kv_heads = ", kvHeads,
                             " do not divide into q's ", q.shape(2), " columns"));
  if (sliced) {
    BRAID_ASSIGN_OR_RETURN(all, intAttr("global_heads", heads, kMaxHeads));
    BRAID_ASSIGN_OR_RETURN(allKv, intAttr("global_kv_heads", 1, all));
    BRAID_ASSIGN_OR_RETURN(stride, intAttr("head_offset_stride", 0, all));
    BRAID_ASSIGN_OR_RETURN(kvStride, intAttr("kv_head_offset_stride", 0, allKv));
    if (all % allKv != 0)
      return fail(absl::StrCat("global_heads = ", all, " is not a multiple of "
                               "global_kv_heads = ", allKv));
    BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
    int64_t group = all / allKv;
    for (int64_t c = 0; c < ranks; ++c) {
      int64_t first = c * stride, kvFirst = c * kvStride;
      if (first + heads > all || kvFirst + kvHeads > allKv)
        return fail(absl::StrCat("the heads of rank ", c, " along '",
                                 inst.rank_axis(), "' leave the ", all,
                                 " query or ", allKv, " kv heads"));
      if (first / group < kvFirst ||
          (first + heads - 1) / group >= kvFirst + kvHeads)
        return fail(absl::StrCat("the query heads of rank ", c, " along '",
                                 inst.rank_axis(),
                                 "' use kv heads the rank does not hold"));
    }
  }
  return kvHeads;
}

absl::Status InstructionChecker::checkAttention(bool grad) {
  // The forward's log-sum-exp per query row, [batch, heads, queries]: an
  // optional second output of ATTENTION and sixth input of ATTENTION_GRAD
  // (without it, backward computes the forward again); F32 with mixed
  // precision.
  // With documents (packed documents' positions, [batch, seq]) the last
  // input.
  BRAID_ASSIGN_OR_RETURN(documents, optionalFlag("documents"));
  const int docs = documents ? 1 : 0;
  const int inputs = inst.inputs_size();
  bool hasLse =
      grad ? inputs == 6 + docs : inst.outputs_size() == 2;
  if (inputs != (grad ? 5 : 3) + docs + (grad && hasLse ? 1 : 0))
    return fail(absl::StrCat(inputs, " inputs ",
                             documents ? "with" : "without",
                             " documents (positions)"));
  std::set<int> ids;
  if (documents)
    ids.insert(inputs - 1);
  BRAID_RETURN_IF_ERROR(
      hasLse ? dtypes(ids, {grad ? 5 : inputs + 1}) : dtypes(ids));
  const Buffer &q = in(0), &k = in(1), &v = in(2);
  BRAID_RETURN_IF_ERROR(rank(q, 3, "q"));
  BRAID_RETURN_IF_ERROR(rank(k, 3, "k"));
  BRAID_ASSIGN_OR_RETURN(heads, intAttr("heads", 1, int64_t(1) << 20));
  BRAID_ASSIGN_OR_RETURN(kvHeads, checkHeads(heads));
  BRAID_ASSIGN_OR_RETURN(causal, intAttr("causal", 0, 1));
  int64_t headDim = q.shape(2) / heads;
  BRAID_RETURN_IF_ERROR(
      shape(k, {q.shape(0), k.shape(1), kvHeads * headDim}, "k"));
  BRAID_RETURN_IF_ERROR(same(v, k, "v"));
  if (causal && k.shape(1) != q.shape(1))
    return fail("causal attention needs as many keys as queries");
  if (documents && !causal)
    return fail("packed documents (documents = 1) need causal attention");
  if (documents)
    BRAID_RETURN_IF_ERROR(
        shape(in(inputs - 1), {q.shape(0), q.shape(1)}, "positions"));
  if (hasLse)
    BRAID_RETURN_IF_ERROR(
        shape(grad ? in(5) : out(1), {q.shape(0), heads, q.shape(1)}, "lse"));
  if (!grad)
    return same(out(0), q, "out");
  BRAID_RETURN_IF_ERROR(same(in(3), q, "out"));
  BRAID_RETURN_IF_ERROR(same(in(4), q, "dout"));
  BRAID_RETURN_IF_ERROR(same(out(0), q, "dq"));
  BRAID_RETURN_IF_ERROR(same(out(1), k, "dk"));
  return same(out(2), v, "dv");
}

/// SWIGLU (x) -> y and SWIGLU_GRAD (x, dy) -> dx with gate and up packed in
/// x: x's last dimension is [gate | up], twice y's (and dy's).
absl::Status InstructionChecker::checkPackedSwiglu(bool grad) {
  BRAID_RETURN_IF_ERROR(arity(grad ? 2 : 1, grad ? 2 : 1, 1));
  BRAID_RETURN_IF_ERROR(dtypes());
  const Buffer &x = in(0);
  BRAID_RETURN_IF_ERROR(minRank(x, 1, "packed [gate | up] operand"));
  if (x.shape(x.shape_size() - 1) % 2 != 0)
    return fail(absl::StrCat("packed [gate | up] operand '", x.name(), "' is ",
                             internal::shapeStr(x), ": its last dimension is odd"));
  std::vector<int64_t> half(x.shape().begin(), x.shape().end());
  half.back() /= 2;
  if (grad) {
    BRAID_RETURN_IF_ERROR(shape(in(1), half, "dy"));
    return same(out(0), x, "result");
  }
  return shape(out(0), half, "result");
}

absl::Status InstructionChecker::checkQkv(bool split) {
  BRAID_RETURN_IF_ERROR(dtypes());
  BRAID_ASSIGN_OR_RETURN(heads, intAttr("heads", 1, int64_t(1) << 20));
  BRAID_ASSIGN_OR_RETURN(kvHeads, intAttr("kv_heads", 1, heads));
  BRAID_ASSIGN_OR_RETURN(headDim, intAttr("head_dim", 1, int64_t(1) << 20));
  BRAID_ASSIGN_OR_RETURN(perHead, intAttr("per_head", 0, 1));
  if (heads % kvHeads != 0 || (perHead && heads != kvHeads))
    return fail(absl::StrCat("heads = ", heads, " and kv_heads = ", kvHeads,
                             " do not fit the layout"));
  const Buffer &fused = split ? in(0) : out(0);
  BRAID_RETURN_IF_ERROR(rank(fused, 3, "qkv"));
  int64_t b = fused.shape(0), s = fused.shape(1);
  BRAID_RETURN_IF_ERROR(
      shape(fused, {b, s, (heads + 2 * kvHeads) * headDim}, "qkv"));
  for (int i = 0; i < 3; ++i)
    BRAID_RETURN_IF_ERROR(shape(split ? out(i) : in(i),
                                {b, s, (i == 0 ? heads : kvHeads) * headDim},
                                i == 0 ? "q" : i == 1 ? "k" : "v"));
  return absl::OkStatus();
}

absl::Status InstructionChecker::checkGroup(const KernelInfo &info) {
  // Collectives need a group; GRAD_NORM may have one (a norm over shards).
  bool required = info.has(kGroupRequired);
  if (!required && !info.has(kGroupOptional)) {
    if (inst.group_size())
      return fail("names a group but is not a collective");
    return absl::OkStatus();
  }
  if (inst.group_size() == 0) {
    if (required)
      return fail("names no group (the mesh axes it communicates along)");
    return absl::OkStatus();
  }
  std::set<std::string> seen;
  for (const std::string &axis : inst.group()) {
    if (std::find(plan.mesh().axes().begin(), plan.mesh().axes().end(), axis) ==
        plan.mesh().axes().end())
      return fail(absl::StrCat("group axis '", axis, "' is not an axis of the mesh"));
    if (!seen.insert(axis).second)
      return fail(absl::StrCat("group axis '", axis, "' is repeated"));
  }
  return absl::OkStatus();
}

absl::Status InstructionChecker::checkVocabSlice(int64_t local,
                                                 absl::string_view what) const {
  BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
  if (local > INT64_MAX / ranks)
    return fail(absl::StrCat("the global vocabulary of ", ranks, " ranks x ",
                             local, " ", what, " does not fit in int64"));
  if (inst.rank_axis().empty() && !inst.int_attrs().count("vocab_start_stride"))
    return absl::OkStatus();
  BRAID_ASSIGN_OR_RETURN(stride, intAttr("vocab_start_stride", 0, INT64_MAX));
  // The last rank's slice, [(ranks - 1) x stride, + local), is the one that
  // can leave [0, local x ranks): it does exactly when stride > local.
  if (ranks > 1 && stride > local)
    return fail(absl::StrCat("vocab_start_stride = ", stride, " puts the ",
                             local, " ", what, " of rank ", ranks - 1,
                             " along '", inst.rank_axis(),
                             "' past the global vocabulary of ", local * ranks,
                             " (expected a stride of at most ", local, ")"));
  return absl::OkStatus();
}

int64_t InstructionChecker::groupSize() const {
  int64_t ranks = 1;
  for (const std::string &axis : inst.group())
    ranks *= AxisSize(plan.mesh(), axis);
  return ranks;
}

absl::Status
InstructionChecker::checkRankSlice(absl::string_view strideAttr, int64_t local,
                                   absl::string_view what, int64_t limit,
                                   absl::string_view limitWhat) const {
  BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
  if (inst.rank_axis().empty()) {
    // One slice from 0; a stride, if any, is unused.
    if (inst.int_attrs().count(std::string(strideAttr)))
      BRAID_RETURN_IF_ERROR(intAttr(strideAttr, 0, INT64_MAX).status());
  } else {
    BRAID_ASSIGN_OR_RETURN(stride, intAttr(strideAttr, 0, INT64_MAX));
    // The last rank's slice, [(ranks - 1) x stride, + local), ends last; it
    // ends within the limit exactly when stride <= (limit - local) /
    // (ranks - 1), which is computed without overflow.
    if (local <= limit && ranks > 1 && stride > (limit - local) / (ranks - 1))
      return fail(absl::StrCat(strideAttr, " = ", stride, " puts the ", local,
                               " ", what, " of rank ", ranks - 1, " along '",
                               inst.rank_axis(), "' past ", limitWhat,
                               " (expected a stride of at most ",
                               (limit - local) / (ranks - 1), ")"));
  }
  if (local > limit)
    return fail(absl::StrCat("the ", local, " ", what, " of a rank exceed ",
                             limitWhat));
  return absl::OkStatus();
}

absl::Status InstructionChecker::checkGatherScatter(bool gather) {
  if (inst.int_attrs().count("async")) {
    // A reduce-scatter, or an all-gather in place, starts and returns (a
    // WAIT finishes it).
    if (gather && inst.inputs(0) != inst.outputs(0))
      return fail("only an all-gather in place has an async attribute");
    BRAID_RETURN_IF_ERROR(intAttr("async", 0, 1).status());
  }
  // Floats, or for an all-gather also I32 (ids: the draw's candidates).
  if (gather && (in(0).dtype() == I32 || out(0).dtype() == I32)) {
    if (in(0).dtype() != out(0).dtype())
      return fail(absl::StrCat("x '", in(0).name(), "' is ",
                               DType_Name(in(0).dtype()), " and y '",
                               out(0).name(), "' ", DType_Name(out(0).dtype()),
                               ": an all-gather keeps the dtype"));
  } else {
    BRAID_RETURN_IF_ERROR(dtypes());
  }
  const Buffer &x = in(0), &y = out(0);
  if (inst.inputs(0) == inst.outputs(0)) {
    // An all-gather in place (ZeRO's flat parameters): each rank's block of
    // the one-dimensional buffer is already there.
    if (!gather || x.shape_size() != 1)
      return fail(absl::StrCat(
          "x and y are both buffer '", x.name(),
          "': only an all-gather of a one-dimensional buffer runs in place"));
    BRAID_ASSIGN_OR_RETURN(dim, intAttr("dim", 0, 0));
    (void)dim;
    if (x.shape(0) % groupSize() != 0)
      return fail(absl::StrCat("x '", x.name(), "' ", internal::shapeStr(x),
                               " does not split evenly over the group's ",
                               groupSize(), " ranks"));
    return absl::OkStatus();
  }
  BRAID_RETURN_IF_ERROR(minRank(x, 1, "x"));
  BRAID_ASSIGN_OR_RETURN(dim, intAttr("dim", 0, x.shape_size() - 1));
  int64_t ranks = groupSize();
  std::vector<int64_t> want(x.shape().begin(), x.shape().end());
  if (gather) {
    if (want[dim] > INT64_MAX / ranks)
      return fail(absl::StrCat(
          "x '", x.name(), "' ", internal::shapeStr(x), " gathered over ", ranks,
          " ranks along dimension ", dim, " does not fit in int64"));
    want[dim] *= ranks;
  } else if (want[dim] % ranks != 0) {
    return fail(absl::StrCat("x '", x.name(), "' ", internal::shapeStr(x), " has ",
                             want[dim], " elements along dimension ", dim,
                             ", which do not split evenly over the group's ",
                             ranks, " ranks"));
  } else {
    want[dim] /= ranks;
  }
  return shape(y, want, "y");
}

absl::Status InstructionChecker::checkPositionEmbedding(bool grad) {
  bool sliced = !inst.rank_axis().empty();
  // Packed documents: the ids are the rows' positions in their documents.
  BRAID_ASSIGN_OR_RETURN(atPositions, optionalFlag("at_positions"));
  if (grad) {
    // (dy [batch, s, hidden][, positions [batch, seq]]) -> dtable [rows,
    // hidden].
    const bool at = inst.inputs_size() == 2;
    if (at != atPositions)
      return fail("takes the positions as its second input exactly when "
                  "at_positions = 1");
    BRAID_RETURN_IF_ERROR(at ? dtypes({1}, {2}) : dtypes({}, {1}));
    BRAID_RETURN_IF_ERROR(rank(in(0), 3, "dy"));
    BRAID_RETURN_IF_ERROR(rank(out(0), 2, "dtable"));
    const Buffer &dy = in(0), &dtable = out(0);
    if (at) {
      BRAID_RETURN_IF_ERROR(rank(in(1), 2, "positions"));
      if (in(1).shape(0) != dy.shape(0) ||
          (!sliced && in(1).shape(1) != dy.shape(1)))
        return fail(absl::StrCat("positions ", internal::shapeStr(in(1)),
                                 " do not fit dy ", internal::shapeStr(dy)));
      if (sliced)
        BRAID_RETURN_IF_ERROR(checkRankSlice(
            "seq_start_stride", dy.shape(1), "positions", in(1).shape(1),
            absl::StrCat("the positions' sequence of ", in(1).shape(1))));
    }
    if (dy.shape(2) != dtable.shape(1))
      return fail(absl::StrCat("dy '", dy.name(), "' ", internal::shapeStr(dy),
                               " does not fit the position table ",
                               internal::shapeStr(dtable),
                               " (expected its last "
                               "dimension to be the table's ",
                               dtable.shape(1), ")"));
    if (!sliced && dy.shape(1) > dtable.shape(0))
      return fail(absl::StrCat("dy '", dy.name(), "' ", internal::shapeStr(dy),
                               " has more positions than the position table ",
                               internal::shapeStr(dtable)));
    return checkRankSlice(
        "seq_start_stride", dy.shape(1), "positions", dtable.shape(0),
        absl::StrCat("the position table's ", dtable.shape(0), " rows"));
  }
  // (table [rows, hidden], ids [batch, seq]) -> out [batch, s, hidden]: s is
  // seq, or with a rank_axis the rank's slice of the positions.
  BRAID_RETURN_IF_ERROR(dtypes({1}));
  BRAID_RETURN_IF_ERROR(rank(in(0), 2, "table"));
  BRAID_RETURN_IF_ERROR(rank(in(1), 2, "tokens"));
  const Buffer &table = in(0), &ids = in(1), &out0 = out(0);
  if (!sliced) {
    if (ids.shape(1) > table.shape(0))
      return fail("the sequence is longer than the position table");
    BRAID_RETURN_IF_ERROR(checkRankSlice(
        "seq_start_stride", ids.shape(1), "positions", table.shape(0),
        absl::StrCat("the position table's ", table.shape(0), " rows")));
    return shape(out0, {ids.shape(0), ids.shape(1), table.shape(1)}, "out");
  }
  BRAID_RETURN_IF_ERROR(rank(out0, 3, "out"));
  int64_t local = out0.shape(1);
  BRAID_RETURN_IF_ERROR(
      shape(out0, {ids.shape(0), local, table.shape(1)}, "out"));
  BRAID_RETURN_IF_ERROR(checkRankSlice(
      "seq_start_stride", local, "positions", table.shape(0),
      absl::StrCat("the position table's ", table.shape(0), " rows")));
  return checkRankSlice("seq_start_stride", local, "positions", ids.shape(1),
                        absl::StrCat("the tokens' sequence of ", ids.shape(1)));
}

absl::Status InstructionChecker::checkDropoutSlice() {
  // Samples are x's dim 0 (one sample for a scalar); with a rank_axis the
  // rank holds a slice of each sample's elements, or with feature_split of
  // x's last dimension.
  const Buffer &x = in(0);
  int64_t featureSplit = 0;
  if (inst.int_attrs().count("feature_split")) {
    BRAID_ASSIGN_OR_RETURN(split, intAttr("feature_split", 0, 1));
    featureSplit = split;
  }
  if (featureSplit) {
    if (inst.rank_axis().empty() || x.shape_size() < 2)
      return fail("feature_split needs a rank_axis and x of rank >= 2");
    const int64_t last = x.shape(x.shape_size() - 1);
    BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
    return checkRankSlice("col_offset_stride", last,
                          "elements of x's last dimension", last * ranks,
                          absl::StrCat("the last dimension's ", last * ranks,
                                       " elements"));
  }
  int64_t samples = x.shape_size() ? x.shape(0) : 1;
  int64_t perSample = samples ? internal::numel(x) / samples : 0;
  BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
  if (perSample > INT64_MAX / ranks)
    return fail(absl::StrCat("the ", ranks, " ranks along '", inst.rank_axis(),
                             "' x ", perSample,
                             " elements per sample do not "
                             "fit in int64"));
  return checkRankSlice(
      "col_offset_stride", perSample, "elements per sample", perSample * ranks,
      absl::StrCat("the sample's ", perSample * ranks, " elements"));
}

absl::StatusOr<std::vector<int64_t>>
InstructionChecker::checkLogits(std::set<int> ids, std::set<int> wide) {
  // The loss, dloss, lse and the partial sums may be F32 (mixed precision).
  BRAID_RETURN_IF_ERROR(dtypes(ids, wide));
  if (!ids.empty())
    BRAID_RETURN_IF_ERROR(
        intAttr("ignore_index", INT32_MIN, INT32_MAX).status());
  const Buffer &logits = in(0);
  BRAID_RETURN_IF_ERROR(minRank(logits, 2, "logits"));
  int64_t vocab = logits.shape(logits.shape_size() - 1);
  if (vocab < 1)
    return fail(absl::StrCat("logits '", logits.name(), "' ",
                             internal::shapeStr(logits),
                             " have no vocabulary columns, expected at least 1"));
  return std::vector<int64_t>(logits.shape().begin(), logits.shape().end() - 1);
}

absl::Status InstructionChecker::checkCrossEntropy() {
  // A second output: the rows' log-sum-exp, for the gradient.
  BRAID_ASSIGN_OR_RETURN(lead, checkLogits({1}, {2, 3}));
  BRAID_RETURN_IF_ERROR(shape(in(1), lead, "targets"));
  if (inst.outputs_size() == 2)
    BRAID_RETURN_IF_ERROR(shape(out(1), lead, "lse"));
  return shape(out(0), {}, "loss");
}

absl::Status InstructionChecker::checkCrossEntropyGrad() {
  BRAID_ASSIGN_OR_RETURN(lead, checkLogits({1}, {2, 3}));
  const Buffer &logits = in(0);
  BRAID_RETURN_IF_ERROR(shape(in(1), lead, "targets"));
  BRAID_RETURN_IF_ERROR(shape(in(2), {}, "dloss"));
  if (inst.inputs_size() == 4) {
    BRAID_RETURN_IF_ERROR(shape(in(3), lead, "lse"));
    BRAID_RETURN_IF_ERROR(
        checkVocabSlice(logits.shape(logits.shape_size() - 1), "columns"));
  } else if (inst.int_attrs().count("vocab_start_stride")) {
    return fail("has vocab_start_stride but no lse input; a slice of the "
                "vocabulary needs the global log-sum-exp");
  }
  return same(out(0), logits, "dlogits");
}

absl::Status InstructionChecker::checkCrossEntropyMax() {
  BRAID_ASSIGN_OR_RETURN(lead, checkLogits({}, {}));
  return shape(out(0), lead, "row_max");
}

absl::Status InstructionChecker::checkCrossEntropyPartial() {
  BRAID_ASSIGN_OR_RETURN(lead, checkLogits({1}, {3}));
  const Buffer &logits = in(0);
  BRAID_RETURN_IF_ERROR(shape(in(1), lead, "targets"));
  BRAID_RETURN_IF_ERROR(shape(in(2), lead, "global_max"));
  BRAID_RETURN_IF_ERROR(
      checkVocabSlice(logits.shape(logits.shape_size() - 1), "columns"));
  lead.push_back(2);
  return shape(out(0), lead, "partial");
}

absl::Status InstructionChecker::checkCrossEntropyFinish() {
  // (summed, global_max, targets) -> (loss, lse); the rows' shape is
  // global_max's. The sums, loss and lse may be F32 where the logits'
  // global_max is BF16 or F16 (mixed precision).
  BRAID_RETURN_IF_ERROR(dtypes({2}, {0, 3, 4}));
  BRAID_RETURN_IF_ERROR(intAttr("ignore_index", INT32_MIN, INT32_MAX).status());
  const Buffer &globalMax = in(1);
  BRAID_RETURN_IF_ERROR(minRank(globalMax, 1, "global_max"));
  std::vector<int64_t> lead(globalMax.shape().begin(), globalMax.shape().end());
  BRAID_RETURN_IF_ERROR(shape(in(2), lead, "targets"));
  BRAID_RETURN_IF_ERROR(shape(out(1), lead, "lse"));
  BRAID_RETURN_IF_ERROR(shape(out(0), {}, "loss"));
  lead.push_back(2);
  return shape(in(0), lead, "summed");
}

absl::Status InstructionChecker::checkGradNorm() {
  BRAID_RETURN_IF_ERROR(dtypes());
  BRAID_RETURN_IF_ERROR(floatAttr("max_norm", 0.0, 1e30).status());
  // Over a group, the first split_inputs gradients are the ranks' slices and
  // the others are replicated on them (without a group, both are the same).
  if (inst.group_size() || inst.int_attrs().count("split_inputs"))
    BRAID_RETURN_IF_ERROR(
        intAttr("split_inputs", 0, inst.inputs_size()).status());
  // How many ranks of the group hold each replicated input (with pipeline
  // stages in the group, not all of them do); at most the group's size.
  if (inst.int_attrs().count("replicated_copies"))
    BRAID_RETURN_IF_ERROR(
        intAttr("replicated_copies", 1, groupSize()).status());
  BRAID_RETURN_IF_ERROR(shape(out(0), {}, "norm"));
  return shape(out(1), {}, "scale");
}

absl::Status InstructionChecker::checkPointToPoint(bool send) {
  if (inst.rank_axis().empty())
    return fail("names no rank_axis (the mesh axis along which its peer is)");
  BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
  auto it = inst.int_attrs().find("peer");
  if (it == inst.int_attrs().end())
    return fail("lacks the integer attribute 'peer'");
  int64_t peer = it->second;
  if (ranks == 1)
    return fail(absl::StrCat("rank_axis '", inst.rank_axis(),
                             "' has one rank: there is no peer along it"));
  // Neighbours exchange activations and gradients; a tied embedding's first
  // and last stages exchange its gradient and weight.
  if (peer == 0 || peer <= -ranks || peer >= ranks)
    return fail(absl::StrCat("attribute 'peer' = ", peer, " is not a ",
                             "non-zero offset to another of the ", ranks,
                             " ranks along '", inst.rank_axis(), "'"));
  // In a stage's program the coordinate along "pp" is the stage's index, so
  // the peer must be another stage of the pipeline.
  if (stage >= 0 && inst.rank_axis() == "pp" &&
      (stage + peer < 0 || stage + peer >= ranks))
    return fail(absl::StrCat(
        send ? "sends to" : "receives from", " stage ", stage + peer,
        " (peer ", peer > 0 ? "+" : "", peer, " of stage ", stage,
        "), which the pipeline of ", ranks,
        " stages does not have (expected a peer in [0, ", ranks, "))"));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> InstructionChecker::rankAxisSize() const {
  if (inst.rank_axis().empty())
    return int64_t(1);
  for (int i = 0; i < plan.mesh().axes_size(); ++i)
    if (plan.mesh().axes(i) == inst.rank_axis())
      return plan.mesh().sizes(i);
  return fail(absl::StrCat("rank_axis '", inst.rank_axis(),
                           "' is not an axis of the mesh"));
}

absl::Status InstructionChecker::checkEmbedding(bool forward) {
  BRAID_RETURN_IF_ERROR(forward ? dtypes({1}) : dtypes({1}, {2}));
  const Buffer &ids = in(1);
  const Buffer &table = forward ? in(0) : out(0);
  BRAID_RETURN_IF_ERROR(rank(table, 2, "table"));
  BRAID_RETURN_IF_ERROR(checkVocabSlice(table.shape(0), "rows"));
  std::vector<int64_t> rows(ids.shape().begin(), ids.shape().end());
  rows.push_back(table.shape(1));
  return shape(forward ? out(0) : in(0), rows, forward ? "out" : "dy");
}

absl::Status InstructionChecker::checkBiasGrad() {
  BRAID_RETURN_IF_ERROR(dtypes({}, {1}));
  BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "dy"));
  return shape(out(0), {in(0).shape(in(0).shape_size() - 1)}, "db");
}

absl::Status InstructionChecker::checkSwiglu(bool grad) {
  // Packed: [gate | up] in one operand; else gate and up apart, elementwise.
  if (inst.inputs_size() == (grad ? 2 : 1))
    return checkPackedSwiglu(grad);
  BRAID_RETURN_IF_ERROR(arity(grad ? 3 : 2, grad ? 3 : 2, grad ? 2 : 1));
  return checkElementwise(/*tanhAttr=*/false);
}

absl::Status InstructionChecker::checkElementwise(bool tanhAttr) {
  // Every operand has the first input's dtype and shape.
  BRAID_RETURN_IF_ERROR(dtypes());
  if (tanhAttr)
    BRAID_RETURN_IF_ERROR(intAttr("tanh", 0, 1).status());
  for (int i = 1; i < inst.inputs_size(); ++i)
    BRAID_RETURN_IF_ERROR(same(in(i), in(0), "operand"));
  for (int i = 0; i < inst.outputs_size(); ++i)
    BRAID_RETURN_IF_ERROR(same(out(i), in(0), "result"));
  return absl::OkStatus();
}

absl::Status InstructionChecker::checkDropout() {
  BRAID_RETURN_IF_ERROR(dtypes());
  BRAID_RETURN_IF_ERROR(floatAttr("rate", 0.0, 1.0, /*openHigh=*/true).status());
  BRAID_RETURN_IF_ERROR(intAttr("rng_id", 0, INT32_MAX).status());
  BRAID_RETURN_IF_ERROR(checkElementwise(/*tanhAttr=*/false));
  return checkDropoutSlice();
}

/// SCALE (x) -> y: elementwise, times a finite, nonzero float `scale`.
absl::Status InstructionChecker::checkScale() {
  BRAID_RETURN_IF_ERROR(checkElementwise(/*tanhAttr=*/false));
  auto it = inst.float_attrs().find("scale");
  if (it == inst.float_attrs().end())
    return fail("lacks the float attribute 'scale'");
  if (!std::isfinite(it->second) || it->second == 0)
    return fail(absl::StrCat("attribute 'scale' = ", it->second,
                             " must be finite and nonzero"));
  return absl::OkStatus();
}

absl::Status InstructionChecker::checkAllReduce() {
  int n = inst.inputs_size();
  if (inst.outputs_size() != n)
    return fail(absl::StrCat("has ", n, " inputs and ", inst.outputs_size(),
                             " outputs; it needs as many of each, at least one"));
  BRAID_RETURN_IF_ERROR(dtypes());
  if (inst.int_attrs().count("max"))
    BRAID_RETURN_IF_ERROR(intAttr("max", 0, 1).status());
  for (int i = 0; i < n; ++i)
    BRAID_RETURN_IF_ERROR(same(out(i), in(i), "result"));
  if (inst.int_attrs().count("async")) {
    // Started and left in flight (the data-parallel sums of the step's
    // last micro-batch): a sum in place, finished by a WAIT.
    BRAID_ASSIGN_OR_RETURN(async, intAttr("async", 0, 1));
    bool max = inst.int_attrs().count("max") && inst.int_attrs().at("max");
    for (int i = 0; async && i < n; ++i)
      if (inst.inputs(i) != inst.outputs(i))
        return fail(absl::StrCat(
            "x", i, " '", in(i).name(), "' and its result '", out(i).name(),
            "' differ: only an all-reduce in place has an async attribute"));
    if (async && max)
      return fail("an all-reduce of maxima has no async attribute (only "
                  "sums run in flight)");
  }
  return absl::OkStatus();
}

absl::Status InstructionChecker::checkCopy() {
  // With a rank_axis, x goes to the rank's block of y.
  BRAID_RETURN_IF_ERROR(dtypes());
  if (inst.rank_axis().empty())
    return same(out(0), in(0), "y");
  BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
  if (in(0).shape_size() != 1 || out(0).shape_size() != 1 ||
      out(0).shape(0) != in(0).shape(0) * ranks)
    return fail(absl::StrCat("y '", out(0).name(), "' ",
                             internal::shapeStr(out(0)), " is not ", ranks,
                             " blocks of x '", in(0).name(), "' ",
                             internal::shapeStr(in(0)), " (one per rank of '",
                             inst.rank_axis(), "')"));
  return absl::OkStatus();
}

/// ROPE_AT (x [B, T, C], positions [B, T] I32) -> y.
absl::Status InstructionChecker::checkRopeAt() {
  BRAID_RETURN_IF_ERROR(dtypes({1}));
  BRAID_RETURN_IF_ERROR(rank(in(0), 3, "x"));
  BRAID_RETURN_IF_ERROR(
      shape(in(1), {in(0).shape(0), in(0).shape(1)}, "positions"));
  BRAID_ASSIGN_OR_RETURN(headDim, intAttr("head_dim", 2, int64_t(1) << 20));
  BRAID_ASSIGN_OR_RETURN(theta, floatAttr("theta", 1e-30, 1e30));
  (void)theta;
  if (headDim % 2 != 0 || in(0).shape(2) % headDim != 0)
    return fail(absl::StrCat("head_dim = ", headDim, " must be even and divide ",
                             in(0).shape(2)));
  return same(out(0), in(0), "y");
}

/// ATTENTION_CACHED (q, k, v, positions, cache_k, cache_v) -> (out, cache_k,
/// cache_v): the caches are updated in place, so outputs 1 and 2 are inputs
/// 4 and 5.
absl::Status InstructionChecker::checkAttentionCached() {
  BRAID_RETURN_IF_ERROR(dtypes({3}));
  const Buffer &q = in(0), &k = in(1), &cache = in(4);
  BRAID_RETURN_IF_ERROR(rank(q, 3, "q"));
  BRAID_RETURN_IF_ERROR(rank(k, 3, "k"));
  BRAID_RETURN_IF_ERROR(rank(cache, 3, "cache_k"));
  BRAID_ASSIGN_OR_RETURN(heads, intAttr("heads", 1, int64_t(1) << 20));
  BRAID_ASSIGN_OR_RETURN(kvHeads, checkHeads(heads));
  int64_t batch = q.shape(0), queries = q.shape(1);
  int64_t headDim = q.shape(2) / heads;
  BRAID_RETURN_IF_ERROR(shape(k, {batch, queries, kvHeads * headDim}, "k"));
  BRAID_RETURN_IF_ERROR(same(in(2), k, "v"));
  BRAID_RETURN_IF_ERROR(shape(in(3), {batch, queries}, "positions"));
  BRAID_RETURN_IF_ERROR(
      shape(cache, {batch, cache.shape(1), kvHeads * headDim}, "cache_k"));
  if (cache.shape(1) < queries)
    return fail(absl::StrCat("cache_k '", cache.name(), "' holds ",
                             cache.shape(1), " positions, fewer than the ",
                             queries, " written per call"));
  BRAID_RETURN_IF_ERROR(same(in(5), cache, "cache_v"));
  if (inst.outputs(1) != inst.inputs(4) || inst.outputs(2) != inst.inputs(5))
    return fail("outputs 1 and 2 must be the caches, inputs 4 and 5 (they "
                "are updated in place)");
  return same(out(0), q, "out");
}

/// TAKE_ROWS (x [B, T, C], index [B] I32) -> y [B, 1, C].
absl::Status InstructionChecker::checkTakeRows() {
  BRAID_RETURN_IF_ERROR(dtypes({1}));
  BRAID_RETURN_IF_ERROR(rank(in(0), 3, "x"));
  BRAID_RETURN_IF_ERROR(shape(in(1), {in(0).shape(0)}, "index"));
  return shape(out(0), {in(0).shape(0), 1, in(0).shape(2)}, "y");
}

/// SAMPLE (logits [B, 1, V], settings [3] F32, seed [2] I32, counter [B]
/// I32) -> ids [B] I32; attr vocab_size in [1, V]. The settings are F32
/// whatever the logits' dtype (F64 included), so they are checked apart.
absl::Status InstructionChecker::checkSample() {
  const Buffer &logits = in(0);
  BRAID_RETURN_IF_ERROR(drawLogits(logits));
  for (const Buffer *b : {&in(2), &in(3), &out(0)})
    if (b->dtype() != I32)
      return fail(absl::StrCat("operand '", b->name(), "' must be I32, found ",
                               DType_Name(b->dtype())));
  if (in(1).dtype() != F32)
    return fail(absl::StrCat("settings '", in(1).name(), "' is ",
                             DType_Name(in(1).dtype()), ", expected F32"));
  BRAID_RETURN_IF_ERROR(shape(in(1), {3}, "settings"));
  BRAID_RETURN_IF_ERROR(shape(in(2), {2}, "seed"));
  BRAID_RETURN_IF_ERROR(shape(in(3), {logits.shape(0)}, "counter"));
  const bool fromCandidates = inst.inputs_size() == 5;
  BRAID_ASSIGN_OR_RETURN(
      vocab, intAttr("vocab_size", 1,
                     fromCandidates ? INT32_MAX : logits.shape(2)));
  (void)vocab;
  if (fromCandidates)
    BRAID_RETURN_IF_ERROR(candidateIds(in(4), logits));
  return shape(out(0), {logits.shape(0)}, "ids");
}

/// The logits SAMPLE, TOP_LOGPROBS and TOP_CANDIDATES draw from: a float
/// [B, 1, V], one row per sequence.
absl::Status InstructionChecker::drawLogits(const Buffer &logits) const {
  if (!internal::isFloat(logits.dtype()))
    return fail(absl::StrCat("logits '", logits.name(), "' must be a float "
                             "type, found ", DType_Name(logits.dtype())));
  BRAID_RETURN_IF_ERROR(rank(logits, 3, "logits"));
  if (logits.shape(1) != 1)
    return fail(absl::StrCat("logits '", logits.name(), "' is ",
                             internal::shapeStr(logits),
                             ", expected one row per sequence [B, 1, V]"));
  return absl::OkStatus();
}

/// Candidate ids of SAMPLE and TOP_LOGPROBS: [B, V] I32 for logits [B, 1,
/// V].
absl::Status InstructionChecker::candidateIds(const Buffer &ids,
                                              const Buffer &logits) const {
  if (ids.dtype() != I32)
    return fail(absl::StrCat("candidate ids '", ids.name(),
                             "' must be I32, found ", DType_Name(ids.dtype())));
  return shape(ids, {logits.shape(0), logits.shape(2)}, "candidate ids");
}

/// TOP_LOGPROBS (logits [B, 1, V]) -> (values [B, K] F32, ids [B, K] I32);
/// attr vocab_size in [K, V].
absl::Status InstructionChecker::checkTopLogprobs() {
  const Buffer &logits = in(0);
  BRAID_RETURN_IF_ERROR(drawLogits(logits));
  BRAID_RETURN_IF_ERROR(rank(out(0), 2, "values"));
  if (out(0).dtype() != F32 || out(1).dtype() != I32)
    return fail("values must be F32 and ids I32");
  const int64_t k = out(0).shape(1);
  BRAID_RETURN_IF_ERROR(shape(out(0), {logits.shape(0), k}, "values"));
  BRAID_RETURN_IF_ERROR(shape(out(1), {logits.shape(0), k}, "ids"));
  if (inst.inputs_size() == 2)
    return fail("takes candidate ids without the ranks' lse: give both "
                "(inputs 1 and 2) or neither");
  if (inst.inputs_size() == 3) {
    BRAID_RETURN_IF_ERROR(candidateIds(in(1), logits));
    const Buffer &lse = in(2);
    BRAID_RETURN_IF_ERROR(rank(lse, 3, "lse"));
    BRAID_RETURN_IF_ERROR(
        shape(lse, {logits.shape(0), 1, lse.shape(2)}, "lse"));
    if (lse.dtype() != logits.dtype())
      return fail(absl::StrCat("lse '", lse.name(), "' is ",
                               DType_Name(lse.dtype()), ", the logits ",
                               DType_Name(logits.dtype())));
    BRAID_ASSIGN_OR_RETURN(vocab, intAttr("vocab_size", 1, INT32_MAX));
    (void)vocab;
    if (k < 1 || k > logits.shape(2))
      return fail(absl::StrCat("K = ", k, " per row must be in [1, ",
                               logits.shape(2), "], the candidates"));
    return absl::OkStatus();
  }
  BRAID_ASSIGN_OR_RETURN(vocab, intAttr("vocab_size", 1, logits.shape(2)));
  if (k < 1 || k > vocab)
    return fail(absl::StrCat("K = ", k, " candidates per row must be in [1, "
                             "vocab_size = ", vocab, "]"));
  return absl::OkStatus();
}

/// TOKEN_LOGPROBS (logits [B, T, V], targets [B, T] I32) -> (logprobs [B, T]
/// F32, greedy [B, T] I32); attr vocab_size in [1, V].
absl::Status InstructionChecker::checkTokenLogprobs() {
  const Buffer &logits = in(0), &targets = in(1);
  BRAID_RETURN_IF_ERROR(rank(logits, 3, "logits"));
  if (!internal::isFloat(logits.dtype()))
    return fail(absl::StrCat("logits '", logits.name(), "' must be a float "
                             "type, found ", DType_Name(logits.dtype())));
  if (targets.dtype() != I32 || out(0).dtype() != F32 || out(1).dtype() != I32)
    return fail("targets must be I32, logprobs F32 and greedy I32");
  const std::vector<int64_t> rows = {logits.shape(0), logits.shape(1)};
  BRAID_RETURN_IF_ERROR(shape(targets, rows, "targets"));
  BRAID_RETURN_IF_ERROR(shape(out(0), rows, "logprobs"));
  BRAID_RETURN_IF_ERROR(shape(out(1), rows, "greedy"));
  BRAID_ASSIGN_OR_RETURN(vocab, intAttr("vocab_size", 1, logits.shape(2)));
  (void)vocab;
  return absl::OkStatus();
}

/// TOKEN_LOGPROBS_PARTIAL (logits [B, T, V], targets [B, T] I32) -> partial
/// [B, T, 4] (F32; F64 for F64 logits); attr vocab_size in [1, 2^24]; with
/// rank_axis, vocab_start_stride.
absl::Status InstructionChecker::checkTokenLogprobsPartial() {
  const Buffer &logits = in(0), &targets = in(1);
  BRAID_RETURN_IF_ERROR(rank(logits, 3, "logits"));
  if (!internal::isFloat(logits.dtype()))
    return fail(absl::StrCat("logits '", logits.name(), "' must be a float "
                             "type, found ", DType_Name(logits.dtype())));
  // The partials in float, in double for double logits.
  const DType partial = logits.dtype() == F64 ? F64 : F32;
  if (targets.dtype() != I32 || out(0).dtype() != partial)
    return fail(absl::StrCat("targets must be I32 and the partials ",
                             DType_Name(partial)));
  const std::vector<int64_t> rows = {logits.shape(0), logits.shape(1)};
  BRAID_RETURN_IF_ERROR(shape(targets, rows, "targets"));
  BRAID_RETURN_IF_ERROR(shape(out(0), {rows[0], rows[1], 4}, "partial"));
  // Ids travel in the partials: exact in float up to 2^24.
  BRAID_ASSIGN_OR_RETURN(vocab, intAttr("vocab_size", 1, int64_t(1) << 24));
  (void)vocab;
  return checkVocabSlice(logits.shape(2), "columns");
}

/// TOKEN_LOGPROBS_FINISH (gathered [B, T, 4 G] F32 or F64, targets [B, T]
/// I32) ->
/// (logprobs [B, T] F32, greedy [B, T] I32).
absl::Status InstructionChecker::checkTokenLogprobsFinish() {
  const Buffer &gathered = in(0), &targets = in(1);
  BRAID_RETURN_IF_ERROR(rank(gathered, 3, "gathered"));
  if ((gathered.dtype() != F32 && gathered.dtype() != F64) ||
      targets.dtype() != I32 || out(0).dtype() != F32 ||
      out(1).dtype() != I32)
    return fail("the partials must be F32 or F64, logprobs F32, targets and "
                "greedy I32");
  if (gathered.shape(2) < 4 || gathered.shape(2) % 4 != 0)
    return fail(absl::StrCat("gathered '", gathered.name(), "' has ",
                             gathered.shape(2), " columns: 4 per slice"));
  const std::vector<int64_t> rows = {gathered.shape(0), gathered.shape(1)};
  BRAID_RETURN_IF_ERROR(shape(targets, rows, "targets"));
  BRAID_RETURN_IF_ERROR(shape(out(0), rows, "logprobs"));
  return shape(out(1), rows, "greedy");
}

/// TOP_CANDIDATES (logits [B, 1, V]) -> (values [B, 1, K], ids [B, K] I32,
/// lse [B, 1, 1]); attrs k in [1, 2^24], vocab_size >= 1; with rank_axis,
/// vocab_start_stride.
absl::Status InstructionChecker::checkTopCandidates() {
  const Buffer &logits = in(0);
  BRAID_RETURN_IF_ERROR(drawLogits(logits));
  BRAID_ASSIGN_OR_RETURN(k, intAttr("k", 1, int64_t(1) << 24));
  BRAID_ASSIGN_OR_RETURN(vocab, intAttr("vocab_size", 1, INT32_MAX));
  (void)vocab;
  BRAID_RETURN_IF_ERROR(checkVocabSlice(logits.shape(2), "columns"));
  const int64_t batch = logits.shape(0);
  BRAID_RETURN_IF_ERROR(shape(out(0), {batch, 1, k}, "values"));
  BRAID_RETURN_IF_ERROR(shape(out(2), {batch, 1, 1}, "lse"));
  for (int i : {0, 2})
    if (out(i).dtype() != logits.dtype())
      return fail(absl::StrCat("output '", out(i).name(), "' is ",
                               DType_Name(out(i).dtype()), ", the logits ",
                               DType_Name(logits.dtype())));
  if (out(1).dtype() != I32)
    return fail(absl::StrCat("ids '", out(1).name(), "' must be I32, found ",
                             DType_Name(out(1).dtype())));
  return shape(out(1), {batch, k}, "ids");
}

/// REORDER_ROWS (x [B, ...], parents [B] I32) -> x, in place.
absl::Status InstructionChecker::checkReorderRows() {
  BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "x"));
  if (!internal::isFloat(in(0).dtype()))
    return fail(absl::StrCat("x '", in(0).name(), "' must be a float type, "
                             "found ", DType_Name(in(0).dtype())));
  if (in(1).dtype() != I32)
    return fail(absl::StrCat("parents '", in(1).name(), "' must be I32, found ",
                             DType_Name(in(1).dtype())));
  BRAID_RETURN_IF_ERROR(shape(in(1), {in(0).shape(0)}, "parents"));
  if (inst.outputs(0) != inst.inputs(0))
    return fail("the output must be x, input 0 (its rows are reordered in "
                "place)");
  return absl::OkStatus();
}

absl::Status InstructionChecker::checkAdamW() {
  // Mixed precision: a fourth output, the weights the model computes with
  // (BF16 or F16), rounded from the F32 master weights in(0) the update
  // keeps; with a rank_axis (ZeRO) in(0) is this rank's block of the
  // masters and the copy is the whole flat buffer of weights, of which the
  // kernel writes the rank's block.
    const Buffer &p = in(0);
  if (!internal::isFloat(p.dtype()))
    return fail(absl::StrCat("parameter '", p.name(), "' must be a float type"));
  if (inst.outputs_size() == 4) {
    const Buffer &copy = out(3);
    if (p.dtype() != F32 || (copy.dtype() != BF16 && copy.dtype() != F16))
      return fail(absl::StrCat(
          "the master weights '", p.name(), "' are ", DType_Name(p.dtype()),
          " and their copy '", copy.name(), "' ", DType_Name(copy.dtype()),
          ": mixed precision keeps F32 masters of BF16 or F16 weights"));
    for (int i : {1, 2, 3})
      BRAID_RETURN_IF_ERROR(same(in(i), p, "gradient or moment"));
    if (inst.rank_axis().empty())
      BRAID_RETURN_IF_ERROR(
          shape(copy, {p.shape().begin(), p.shape().end()}, "weights"));
    else {
      BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
      if (p.shape_size() != 1 || copy.shape_size() != 1 ||
          copy.shape(0) != p.shape(0) * ranks)
        return fail(absl::StrCat(
            "the weights '", copy.name(), "' ", internal::shapeStr(copy), " are not ",
            ranks, " blocks of the master weights '", p.name(), "' ",
            internal::shapeStr(p), " (one per rank of '", inst.rank_axis(), "')"));
    }
  } else if (inst.rank_axis().empty()) {
    for (int i : {1, 2, 3})
      BRAID_RETURN_IF_ERROR(same(in(i), p, "gradient or moment"));
  } else {
    // ZeRO: the gradient and moments are one-dimensional, this rank's block
    // of the flat parameters, one block per rank of the rank_axis.
    const Buffer &m = in(2);
    BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
    for (int i : {1, 3})
      BRAID_RETURN_IF_ERROR(same(in(i), m, "gradient or moment"));
    if (m.shape_size() != 1 || p.shape_size() != 1 || m.dtype() != p.dtype() ||
        p.shape(0) != m.shape(0) * ranks)
      return fail(absl::StrCat(
          "parameters '", p.name(), "' ", internal::shapeStr(p), " are not ",
          ranks, " blocks of the moments '", m.name(), "' ",
          internal::shapeStr(m), " (one per rank of '", inst.rank_axis(), "')"));
  }
  for (int i : {4, 6}) {
    BRAID_RETURN_IF_ERROR(shape(in(i), {}, i == 4 ? "lr" : "scale"));
    if (in(i).dtype() != p.dtype())
      return fail("lr and scale must have the parameter's dtype");
  }
  BRAID_RETURN_IF_ERROR(shape(in(5), {}, "step"));
  if (in(5).dtype() != I64)
    return fail("step must be I64");
  // The update is in place: the outputs are the parameter and moments.
  if (inst.outputs(0) != inst.inputs(0) || inst.outputs(1) != inst.inputs(2) ||
      inst.outputs(2) != inst.inputs(3))
    return fail("writes its results to other buffers than the parameter and "
                "moments it updates");
  BRAID_RETURN_IF_ERROR(floatAttr("beta1", 0.0, 1.0, true).status());
  BRAID_RETURN_IF_ERROR(floatAttr("beta2", 0.0, 1.0, true).status());
  BRAID_RETURN_IF_ERROR(floatAttr("eps", 1e-30, 1.0).status());
  return floatAttr("weight_decay", 0.0, 1e30).status();
}

absl::Status InstructionChecker::checkArity(const KernelInfo &info) {
  return arity(info.minInputs, info.maxInputs, info.minOutputs,
               info.maxOutputs);
}

absl::Status InstructionChecker::check() {
  const KernelInfo *info = FindKernel(inst.kernel());
  if (!info)
    return fail(absl::StrCat("unknown kernel ", int(inst.kernel())));
  BRAID_RETURN_IF_ERROR(checkGroup(*info));
  BRAID_RETURN_IF_ERROR(rankAxisSize().status());
  BRAID_RETURN_IF_ERROR(checkArity(*info));
  // Each row's CHECK, indexed as Kernels.def's rows.
  using Check = absl::Status (*)(InstructionChecker &c);
  static const Check kChecks[] = {
#define BRAID_KERNEL(NAME, NUMBER, MIN_IN, MAX_IN, MIN_OUT, MAX_OUT,           \
                     ACCUMULATED, FLAGS, CHECK, WORK)                          \
  [](InstructionChecker &c) -> absl::Status { return CHECK; },
#include "runtime/plan/Kernels.def"
  };
  static_assert(sizeof(kChecks) / sizeof(kChecks[0]) > 0);
  return kChecks[KernelIndex(inst.kernel())](*this);
}

absl::Status CheckInstruction(const Plan &plan, const Function &fn, int index,
                              const Instruction &inst, int stage) {
  return InstructionChecker(plan, fn, index, inst, stage).check();
}

} // namespace braid::plan
