//===- PlanLoader.cpp - Reading, writing and validating plan files --------===//

#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/logging.h"
#include "runtime/common/OutputFile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sys/stat.h>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace braid::plan {
namespace {

constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'P', 'L', 'N'};
constexpr size_t kHeaderBytes = 20;

/// Routes protobuf's log lines (why a message did not parse) into a string
/// while it lives, and restores the previous handler after. Protobuf's
/// handler is process-wide: loading a plan is not meant to race with other
/// protobuf parsing.
class ProtobufLogCapture {
public:
  explicit ProtobufLogCapture(std::string *into) {
    target() = into;
    previous_ = google::protobuf::SetLogHandler(&handle);
  }
  ~ProtobufLogCapture() {
    google::protobuf::SetLogHandler(previous_);
    target() = nullptr;
  }

private:
  static std::string *&target() {
    static std::string *into = nullptr;
    return into;
  }
  static void handle(google::protobuf::LogLevel, const char *, int,
                     const std::string &message) {
    if (std::string *into = target()) {
      if (!into->empty())
        into->append("; ");
      into->append(message);
    }
  }
  google::protobuf::LogHandler *previous_;
};
/// Limits far above any real plan that keep every size computation in int64.
constexpr int64_t kMaxArenaBytes = int64_t(1) << 50;
constexpr int64_t kMaxWorldSize = int64_t(1) << 20;
constexpr int kMaxRank = 8;

void putLE(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(char((value >> (8 * i)) & 0xff));
}

uint64_t getLE(absl::string_view in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= uint64_t(uint8_t(in[at + i])) << (8 * i);
  return value;
}

std::string shapeStr(const Buffer &b) {
  return absl::StrCat("[", absl::StrJoin(b.shape(), ", "), "]");
}

bool isFloat(DType d) { return d == F32 || d == F64 || d == BF16 || d == F16; }

/// The element count of a validated buffer.
int64_t numel(const Buffer &b) {
  int64_t n = 1;
  for (int64_t d : b.shape())
    n *= d;
  return n;
}

/// Checks one instruction against its kernel's operand contract. Buffers
/// have been validated (shapes non-negative, sizes inside the arena).
class InstructionChecker {
public:
  /// `stage` is the pipeline stage whose program `fn` is, or -1.
  InstructionChecker(const Plan &plan, const Function &fn, int index,
                     const Instruction &inst, int stage = -1)
      : plan(plan), inst(inst), stage(stage),
        where(absl::StrCat("function '", fn.name(), "' instruction ", index,
                           " (", Kernel_Name(inst.kernel()),
                           inst.provenance().empty() ? "" : ", from ",
                           inst.provenance(), "): ")) {}

  absl::Status check();

private:
  absl::Status fail(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(where, what));
  }

  /// Checks operand counts and fetches the buffers.
  /// minIn..maxIn inputs and `outs` outputs (or up to `maxOuts`).
  absl::Status arity(int minIn, int maxIn, int outs, int maxOuts = 0) {
    maxOuts = std::max(maxOuts, outs);
    if (inst.inputs_size() < minIn || inst.inputs_size() > maxIn ||
        inst.outputs_size() < outs || inst.outputs_size() > maxOuts)
      return fail(
          absl::StrCat("has ", inst.inputs_size(), " inputs and ",
                       inst.outputs_size(), " outputs; the kernel takes ",
                       minIn == maxIn ? absl::StrCat(minIn)
                                      : absl::StrCat(minIn, "-", maxIn),
                       " inputs and ",
                       outs == maxOuts ? absl::StrCat(outs)
                                       : absl::StrCat(outs, "-", maxOuts),
                       " outputs"));
    for (int32_t id : inst.inputs())
      if (id < 0 || id >= plan.buffers_size())
        return fail(absl::StrCat("input buffer ", id, " does not exist (the plan has ",
                                 plan.buffers_size(), ")"));
    for (int32_t id : inst.outputs())
      if (id < 0 || id >= plan.buffers_size())
        return fail(absl::StrCat("output buffer ", id, " does not exist (the plan has ",
                                 plan.buffers_size(), ")"));
    return absl::OkStatus();
  }
  const Buffer &in(int i) const { return plan.buffers(inst.inputs(i)); }
  const Buffer &out(int i) const { return plan.buffers(inst.outputs(i)); }

  absl::Status rank(const Buffer &b, int r, absl::string_view name) const {
    if (b.shape_size() != r)
      return fail(absl::StrCat(name, " '", b.name(), "' has rank ",
                               b.shape_size(), ", expected ", r));
    return absl::OkStatus();
  }
  absl::Status minRank(const Buffer &b, int r, absl::string_view name) const {
    if (b.shape_size() < r)
      return fail(absl::StrCat(name, " '", b.name(), "' has rank ",
                               b.shape_size(), ", expected at least ", r));
    return absl::OkStatus();
  }
  absl::Status shape(const Buffer &b, const std::vector<int64_t> &want,
                     absl::string_view name) const {
    if (std::vector<int64_t>(b.shape().begin(), b.shape().end()) != want)
      return fail(absl::StrCat(name, " '", b.name(), "' is ", shapeStr(b),
                               ", expected [", absl::StrJoin(want, ", "), "]"));
    return absl::OkStatus();
  }
  absl::Status same(const Buffer &b, const Buffer &like,
                    absl::string_view name) const {
    if (b.dtype() != like.dtype())
      return fail(absl::StrCat(name, " '", b.name(), "' is ", DType_Name(b.dtype()),
                               ", expected ", DType_Name(like.dtype())));
    return shape(b, {like.shape().begin(), like.shape().end()}, name);
  }
  /// All float operands share one dtype T; `ids` lists the operands
  /// (inputs then outputs, numbered together) that are int32. Mixed
  /// precision: the operands in `wide` (parameter gradients, the loss and
  /// its row statistics) may instead be F32 where T is BF16 or F16.
  absl::Status dtypes(std::set<int> ids = {}, std::set<int> wide = {}) const {
    DType floatType = DTYPE_UNSPECIFIED;
    std::vector<const Buffer *> wideOperands;
    int n = 0;
    auto visit = [&](const Buffer &b) -> absl::Status {
      int k = n++;
      if (ids.count(k)) {
        if (b.dtype() != I32)
          return fail(absl::StrCat("operand '", b.name(), "' must be I32, found ",
                                   DType_Name(b.dtype())));
        return absl::OkStatus();
      }
      if (!isFloat(b.dtype()))
        return fail(absl::StrCat("operand '", b.name(), "' must be a float type, found ",
                                 DType_Name(b.dtype())));
      if (wide.count(k)) {
        wideOperands.push_back(&b);
        return absl::OkStatus();
      }
      if (floatType == DTYPE_UNSPECIFIED)
        floatType = b.dtype();
      else if (b.dtype() != floatType)
        return fail(absl::StrCat("operands mix ", DType_Name(floatType), " and ",
                                 DType_Name(b.dtype())));
      return absl::OkStatus();
    };
    for (int i = 0; i < inst.inputs_size(); ++i)
      if (absl::Status s = visit(in(i)); !s.ok())
        return s;
    for (int i = 0; i < inst.outputs_size(); ++i)
      if (absl::Status s = visit(out(i)); !s.ok())
        return s;
    bool low = floatType == BF16 || floatType == F16;
    for (const Buffer *b : wideOperands)
      if (floatType != DTYPE_UNSPECIFIED && b->dtype() != floatType &&
          !(low && b->dtype() == F32))
        return fail(absl::StrCat("operand '", b->name(), "' is ",
                                 DType_Name(b->dtype()), ", expected ",
                                 DType_Name(floatType),
                                 low ? " or F32 (mixed precision)" : ""));
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> intAttr(absl::string_view name, int64_t lo,
                                  int64_t hi) const {
    auto it = inst.int_attrs().find(std::string(name));
    if (it == inst.int_attrs().end())
      return fail(absl::StrCat("lacks the integer attribute '", name, "'"));
    if (it->second < lo || it->second > hi)
      return fail(absl::StrCat("attribute '", name, "' = ", it->second,
                               " is outside [", lo, ", ", hi, "]"));
    return it->second;
  }
  absl::StatusOr<double> floatAttr(absl::string_view name, double lo,
                                   double hi, bool openHigh = false) const {
    auto it = inst.float_attrs().find(std::string(name));
    if (it == inst.float_attrs().end())
      return fail(absl::StrCat("lacks the float attribute '", name, "'"));
    double v = it->second;
    if (!std::isfinite(v) || v < lo || v > hi || (openHigh && v == hi))
      return fail(absl::StrCat("attribute '", name, "' = ", v, " is outside [",
                               lo, ", ", hi, openHigh ? ")" : "]"));
    return v;
  }

  absl::Status checkLinearLike();
  absl::Status checkNorm(bool layerNorm, bool grad);
  absl::Status checkRope();
  absl::Status checkAttention(bool grad);
  absl::Status checkQkv(bool split);
  absl::Status checkPackedSwiglu();
  absl::Status checkCrossEntropy();
  absl::Status checkGradNorm();
  absl::Status checkGroup();
  absl::Status checkGatherScatter();
  absl::Status checkPositionEmbedding();
  absl::Status checkDropoutSlice();
  absl::Status checkPointToPoint();
  /// The number of ranks in the instruction's group (validated by
  /// checkGroup): the product of its axes' sizes, 1 without a group.
  int64_t groupSize() const;
  /// The size of the instruction's rank_axis (1 when it has none).
  absl::StatusOr<int64_t> rankAxisSize() const;
  /// A slice of the vocabulary: `local` ids (table rows or logit columns,
  /// named by `what`) per rank of the rank_axis, rank c's starting at c x the
  /// int attribute vocab_start_stride (required with a rank_axis, optional
  /// and unused without). Every rank's slice must stay inside the global
  /// vocabulary of local x axis-size ids, which must fit in int64.
  absl::Status checkVocabSlice(int64_t local, absl::string_view what) const;
  /// A slice along the rank_axis of something that is not the vocabulary:
  /// `local` elements (named by `what`) per rank, rank c's starting at c x
  /// the int attribute `strideAttr` (required with a rank_axis, in [0,
  /// INT64_MAX] whenever present). Every rank's slice must end within
  /// `limit` elements (described by `limitWhat`).
  absl::Status checkRankSlice(absl::string_view strideAttr, int64_t local,
                              absl::string_view what, int64_t limit,
                              absl::string_view limitWhat) const;

  const Plan &plan;
  const Instruction &inst;
  int stage;
  std::string where;
};

#define BRAID_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    if (absl::Status braidStatus = (expr); !braidStatus.ok())                  \
      return braidStatus;                                                      \
  } while (false)

#define BRAID_ASSIGN_OR_RETURN(lhs, expr)                                      \
  auto lhs##OrError = (expr);                                                  \
  if (!lhs##OrError.ok())                                                      \
    return lhs##OrError.status();                                              \
  auto lhs = *lhs##OrError

absl::Status InstructionChecker::checkLinearLike() {
  BRAID_ASSIGN_OR_RETURN(transposeW, intAttr("transpose_w", 0, 1));
  auto inOut = [&](const Buffer &w) {
    return transposeW ? std::make_pair(w.shape(1), w.shape(0))
                      : std::make_pair(w.shape(0), w.shape(1));
  };
  switch (inst.kernel()) {
  case LINEAR: {
    BRAID_RETURN_IF_ERROR(arity(2, 3, 1));
    BRAID_RETURN_IF_ERROR(dtypes());
    if (inst.float_attrs().count("bias_scale"))
      BRAID_RETURN_IF_ERROR(floatAttr("bias_scale", 1e-6, 1.0).status());
    BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "x"));
    BRAID_RETURN_IF_ERROR(rank(in(1), 2, "weight"));
    auto [inDim, outDim] = inOut(in(1));
    std::vector<int64_t> x(in(0).shape().begin(), in(0).shape().end());
    if (x.back() != inDim)
      return fail(absl::StrCat("x '", in(0).name(), "' ", shapeStr(in(0)),
                               " does not match the weight's ", inDim, " inputs"));
    if (inst.inputs_size() == 3)
      BRAID_RETURN_IF_ERROR(shape(in(2), {outDim}, "bias"));
    x.back() = outDim;
    return shape(out(0), x, "y");
  }
  case LINEAR_GRAD_INPUT: {
    BRAID_RETURN_IF_ERROR(arity(2, 2, 1));
    BRAID_RETURN_IF_ERROR(dtypes());
    BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "dy"));
    BRAID_RETURN_IF_ERROR(rank(in(1), 2, "weight"));
    auto [inDim, outDim] = inOut(in(1));
    std::vector<int64_t> dy(in(0).shape().begin(), in(0).shape().end());
    if (dy.back() != outDim)
      return fail(absl::StrCat("dy '", in(0).name(), "' ", shapeStr(in(0)),
                               " does not match the weight's ", outDim, " outputs"));
    dy.back() = inDim;
    return shape(out(0), dy, "dx");
  }
  default: { // LINEAR_GRAD_WEIGHT
    BRAID_RETURN_IF_ERROR(arity(2, 2, 1));
    BRAID_RETURN_IF_ERROR(dtypes({}, {2}));
    BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "x"));
    const Buffer &x = in(0), &dy = in(1);
    if (x.shape_size() != dy.shape_size() ||
        !std::equal(x.shape().begin(), x.shape().end() - 1, dy.shape().begin()))
      return fail(absl::StrCat("x ", shapeStr(x), " and dy ", shapeStr(dy),
                               " must agree in every dimension but the last"));
    int64_t inDim = x.shape(x.shape_size() - 1);
    int64_t outDim = dy.shape(dy.shape_size() - 1);
    return shape(out(0),
                 transposeW ? std::vector<int64_t>{outDim, inDim}
                            : std::vector<int64_t>{inDim, outDim},
                 "dw");
  }
  }
}

absl::Status InstructionChecker::checkNorm(bool layerNorm, bool grad) {
  int ins = grad ? 3 : (layerNorm ? 3 : 2);
  int outs = grad ? (layerNorm ? 3 : 2) : 1;
  BRAID_RETURN_IF_ERROR(arity(ins, ins, outs));
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
  BRAID_RETURN_IF_ERROR(arity(1, 1, 1));
  BRAID_RETURN_IF_ERROR(dtypes());
  BRAID_RETURN_IF_ERROR(rank(in(0), 3, "x"));
  BRAID_ASSIGN_OR_RETURN(headDim, intAttr("head_dim", 2, int64_t(1) << 20));
  BRAID_ASSIGN_OR_RETURN(theta, floatAttr("theta", 1e-30, 1e30));
  (void)theta;
  if (headDim % 2 != 0 || in(0).shape(2) % headDim != 0)
    return fail(absl::StrCat("head_dim = ", headDim, " must be even and divide ",
                             in(0).shape(2)));
  return same(out(0), in(0), "y");
}

absl::Status InstructionChecker::checkAttention(bool grad) {
  // The forward's log-sum-exp per query row, [batch, heads, queries]: an
  // optional second output of ATTENTION and sixth input of ATTENTION_GRAD
  // (without it, backward computes the forward again); F32 with mixed
  // precision.
  BRAID_RETURN_IF_ERROR(grad ? arity(5, 6, 3) : arity(3, 3, 1, 2));
  bool hasLse = grad ? inst.inputs_size() == 6 : inst.outputs_size() == 2;
  BRAID_RETURN_IF_ERROR(hasLse ? dtypes({}, {grad ? 5 : 4}) : dtypes());
  const Buffer &q = in(0), &k = in(1), &v = in(2);
  BRAID_RETURN_IF_ERROR(rank(q, 3, "q"));
  BRAID_RETURN_IF_ERROR(rank(k, 3, "k"));
  // A slice of the heads (tensor parallelism) may hold more kv heads than
  // query heads (kv heads replicated); the global counts must then divide.
  bool sliced = inst.int_attrs().count("global_heads") > 0;
  const int64_t kMaxHeads = int64_t(1) << 20;
  BRAID_ASSIGN_OR_RETURN(heads, intAttr("heads", 1, kMaxHeads));
  BRAID_ASSIGN_OR_RETURN(kvHeads, intAttr("kv_heads", 1, sliced ? kMaxHeads : heads));
  BRAID_ASSIGN_OR_RETURN(causal, intAttr("causal", 0, 1));
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
  int64_t headDim = q.shape(2) / heads;
  BRAID_RETURN_IF_ERROR(
      shape(k, {q.shape(0), k.shape(1), kvHeads * headDim}, "k"));
  BRAID_RETURN_IF_ERROR(same(v, k, "v"));
  if (causal && k.shape(1) != q.shape(1))
    return fail("causal attention needs as many keys as queries");
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
absl::Status InstructionChecker::checkPackedSwiglu() {
  bool grad = inst.kernel() == SWIGLU_GRAD;
  BRAID_RETURN_IF_ERROR(arity(grad ? 2 : 1, grad ? 2 : 1, 1));
  BRAID_RETURN_IF_ERROR(dtypes());
  const Buffer &x = in(0);
  BRAID_RETURN_IF_ERROR(minRank(x, 1, "packed [gate | up] operand"));
  if (x.shape(x.shape_size() - 1) % 2 != 0)
    return fail(absl::StrCat("packed [gate | up] operand '", x.name(), "' is ",
                             shapeStr(x), ": its last dimension is odd"));
  std::vector<int64_t> half(x.shape().begin(), x.shape().end());
  half.back() /= 2;
  if (grad) {
    BRAID_RETURN_IF_ERROR(shape(in(1), half, "dy"));
    return same(out(0), x, "result");
  }
  return shape(out(0), half, "result");
}

absl::Status InstructionChecker::checkQkv(bool split) {
  BRAID_RETURN_IF_ERROR(split ? arity(1, 1, 3) : arity(3, 3, 1));
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

absl::Status InstructionChecker::checkGroup() {
  // ALL_REDUCE, ALL_GATHER and REDUCE_SCATTER need a group; GRAD_NORM may
  // have one (a norm over shards).
  bool required = inst.kernel() == ALL_REDUCE || inst.kernel() == ALL_GATHER ||
                  inst.kernel() == REDUCE_SCATTER;
  if (!required && inst.kernel() != GRAD_NORM) {
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

absl::Status InstructionChecker::checkGatherScatter() {
  bool gather = inst.kernel() == ALL_GATHER;
  BRAID_RETURN_IF_ERROR(arity(1, 1, 1));
  if (inst.int_attrs().count("async")) {
    // A reduce-scatter, or an all-gather in place, starts and returns (a
    // WAIT finishes it).
    if (gather && inst.inputs(0) != inst.outputs(0))
      return fail("only an all-gather in place has an async attribute");
    BRAID_RETURN_IF_ERROR(intAttr("async", 0, 1).status());
  }
  BRAID_RETURN_IF_ERROR(dtypes());
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
      return fail(absl::StrCat("x '", x.name(), "' ", shapeStr(x),
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
          "x '", x.name(), "' ", shapeStr(x), " gathered over ", ranks,
          " ranks along dimension ", dim, " does not fit in int64"));
    want[dim] *= ranks;
  } else if (want[dim] % ranks != 0) {
    return fail(absl::StrCat("x '", x.name(), "' ", shapeStr(x), " has ",
                             want[dim], " elements along dimension ", dim,
                             ", which do not split evenly over the group's ",
                             ranks, " ranks"));
  } else {
    want[dim] /= ranks;
  }
  return shape(y, want, "y");
}

absl::Status InstructionChecker::checkPositionEmbedding() {
  bool sliced = !inst.rank_axis().empty();
  if (inst.kernel() == POSITION_EMBEDDING_GRAD) {
    // (dy [batch, s, hidden]) -> dtable [rows, hidden].
    BRAID_RETURN_IF_ERROR(arity(1, 1, 1));
    BRAID_RETURN_IF_ERROR(dtypes({}, {1}));
    BRAID_RETURN_IF_ERROR(rank(in(0), 3, "dy"));
    BRAID_RETURN_IF_ERROR(rank(out(0), 2, "dtable"));
    const Buffer &dy = in(0), &dtable = out(0);
    if (dy.shape(2) != dtable.shape(1))
      return fail(absl::StrCat("dy '", dy.name(), "' ", shapeStr(dy),
                               " does not fit the position table ",
                               shapeStr(dtable),
                               " (expected its last "
                               "dimension to be the table's ",
                               dtable.shape(1), ")"));
    if (!sliced && dy.shape(1) > dtable.shape(0))
      return fail(absl::StrCat("dy '", dy.name(), "' ", shapeStr(dy),
                               " has more positions than the position table ",
                               shapeStr(dtable)));
    return checkRankSlice(
        "seq_start_stride", dy.shape(1), "positions", dtable.shape(0),
        absl::StrCat("the position table's ", dtable.shape(0), " rows"));
  }
  // (table [rows, hidden], ids [batch, seq]) -> out [batch, s, hidden]: s is
  // seq, or with a rank_axis the rank's slice of the positions.
  BRAID_RETURN_IF_ERROR(arity(2, 2, 1));
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
  // rank holds a slice of each sample's elements.
  const Buffer &x = in(0);
  int64_t samples = x.shape_size() ? x.shape(0) : 1;
  int64_t perSample = samples ? numel(x) / samples : 0;
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

absl::Status InstructionChecker::checkCrossEntropy() {
  Kernel k = inst.kernel();
  switch (k) {
  case CROSS_ENTROPY:
    // A second output: the rows' log-sum-exp, for the gradient.
    BRAID_RETURN_IF_ERROR(arity(2, 2, 1, 2));
    break;
  case CROSS_ENTROPY_GRAD:
    BRAID_RETURN_IF_ERROR(arity(3, 4, 1));
    break;
  case CROSS_ENTROPY_MAX:
    BRAID_RETURN_IF_ERROR(arity(1, 1, 1));
    break;
  default: // CROSS_ENTROPY_PARTIAL, CROSS_ENTROPY_FINISH
    BRAID_RETURN_IF_ERROR(arity(3, 3, k == CROSS_ENTROPY_FINISH ? 2 : 1));
    break;
  }
  if (k == CROSS_ENTROPY_FINISH) {
    // (summed, global_max, targets) -> (loss, lse); the rows' shape is
    // global_max's. The sums, loss and lse may be F32 where the logits'
    // global_max is BF16 or F16 (mixed precision).
    BRAID_RETURN_IF_ERROR(dtypes({2}, {0, 3, 4}));
    BRAID_RETURN_IF_ERROR(
        intAttr("ignore_index", INT32_MIN, INT32_MAX).status());
    const Buffer &globalMax = in(1);
    BRAID_RETURN_IF_ERROR(minRank(globalMax, 1, "global_max"));
    std::vector<int64_t> lead(globalMax.shape().begin(),
                              globalMax.shape().end());
    BRAID_RETURN_IF_ERROR(shape(in(2), lead, "targets"));
    BRAID_RETURN_IF_ERROR(shape(out(1), lead, "lse"));
    BRAID_RETURN_IF_ERROR(shape(out(0), {}, "loss"));
    lead.push_back(2);
    return shape(in(0), lead, "summed");
  }
  // The loss, dloss, lse and the partial sums may be F32 (mixed
  // precision).
  BRAID_RETURN_IF_ERROR(k == CROSS_ENTROPY_MAX    ? dtypes()
                        : k == CROSS_ENTROPY      ? dtypes({1}, {2, 3})
                        : k == CROSS_ENTROPY_GRAD ? dtypes({1}, {2, 3})
                                                  : dtypes({1}, {3}));
  if (k != CROSS_ENTROPY_MAX)
    BRAID_RETURN_IF_ERROR(
        intAttr("ignore_index", INT32_MIN, INT32_MAX).status());
  const Buffer &logits = in(0);
  BRAID_RETURN_IF_ERROR(minRank(logits, 2, "logits"));
  int64_t vocab = logits.shape(logits.shape_size() - 1);
  if (vocab < 1)
    return fail(absl::StrCat("logits '", logits.name(), "' ", shapeStr(logits),
                             " have no vocabulary columns, expected at least 1"));
  std::vector<int64_t> lead(logits.shape().begin(), logits.shape().end() - 1);
  if (k == CROSS_ENTROPY_MAX)
    return shape(out(0), lead, "row_max");
  BRAID_RETURN_IF_ERROR(shape(in(1), lead, "targets"));
  switch (k) {
  case CROSS_ENTROPY:
    if (inst.outputs_size() == 2)
      BRAID_RETURN_IF_ERROR(shape(out(1), lead, "lse"));
    return shape(out(0), {}, "loss");
  case CROSS_ENTROPY_GRAD:
    BRAID_RETURN_IF_ERROR(shape(in(2), {}, "dloss"));
    if (inst.inputs_size() == 4) {
      BRAID_RETURN_IF_ERROR(shape(in(3), lead, "lse"));
      BRAID_RETURN_IF_ERROR(checkVocabSlice(vocab, "columns"));
    } else if (inst.int_attrs().count("vocab_start_stride")) {
      return fail("has vocab_start_stride but no lse input; a slice of the "
                  "vocabulary needs the global log-sum-exp");
    }
    return same(out(0), logits, "dlogits");
  default: // CROSS_ENTROPY_PARTIAL
    BRAID_RETURN_IF_ERROR(shape(in(2), lead, "global_max"));
    BRAID_RETURN_IF_ERROR(checkVocabSlice(vocab, "columns"));
    lead.push_back(2);
    return shape(out(0), lead, "partial");
  }
}

absl::Status InstructionChecker::checkGradNorm() {
  BRAID_RETURN_IF_ERROR(arity(1, 1 << 20, 2));
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

absl::Status InstructionChecker::checkPointToPoint() {
  bool send = inst.kernel() == SEND;
  BRAID_RETURN_IF_ERROR(send ? arity(1, 1, 0) : arity(0, 0, 1));
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

absl::Status InstructionChecker::check() {
  BRAID_RETURN_IF_ERROR(checkGroup());
  BRAID_RETURN_IF_ERROR(rankAxisSize().status());
  switch (inst.kernel()) {
  case EMBEDDING:
  case EMBEDDING_GRAD: {
    BRAID_RETURN_IF_ERROR(arity(2, 2, 1));
    BRAID_RETURN_IF_ERROR(inst.kernel() == EMBEDDING ? dtypes({1})
                                                     : dtypes({1}, {2}));
    const Buffer &ids = in(1);
    const Buffer &table = inst.kernel() == EMBEDDING ? in(0) : out(0);
    BRAID_RETURN_IF_ERROR(rank(table, 2, "table"));
    BRAID_RETURN_IF_ERROR(checkVocabSlice(table.shape(0), "rows"));
    std::vector<int64_t> rows(ids.shape().begin(), ids.shape().end());
    rows.push_back(table.shape(1));
    return shape(inst.kernel() == EMBEDDING ? out(0) : in(0), rows,
                 inst.kernel() == EMBEDDING ? "out" : "dy");
  }
  case POSITION_EMBEDDING:
  case POSITION_EMBEDDING_GRAD:
    return checkPositionEmbedding();
  case LINEAR:
  case LINEAR_GRAD_INPUT:
  case LINEAR_GRAD_WEIGHT:
    return checkLinearLike();
  case BIAS_GRAD:
    BRAID_RETURN_IF_ERROR(arity(1, 1, 1));
    BRAID_RETURN_IF_ERROR(dtypes({}, {1}));
    BRAID_RETURN_IF_ERROR(minRank(in(0), 1, "dy"));
    return shape(out(0), {in(0).shape(in(0).shape_size() - 1)}, "db");
  case RMS_NORM:
    return checkNorm(false, false);
  case RMS_NORM_GRAD:
    return checkNorm(false, true);
  case LAYER_NORM:
    return checkNorm(true, false);
  case LAYER_NORM_GRAD:
    return checkNorm(true, true);
  case ROPE:
  case ROPE_GRAD:
    return checkRope();
  case ATTENTION:
    return checkAttention(false);
  case ATTENTION_GRAD:
    return checkAttention(true);
  case QKV_SPLIT:
    return checkQkv(true);
  case QKV_CONCAT:
    return checkQkv(false);
  case SWIGLU:
  case SWIGLU_GRAD:
    if (inst.inputs_size() == (inst.kernel() == SWIGLU ? 1 : 2))
      return checkPackedSwiglu();
    [[fallthrough]];
  case GELU:
  case GELU_GRAD:
  case ADD:
  case DROPOUT: {
    // Elementwise: every operand has the first input's dtype and shape.
    Kernel k = inst.kernel();
    int ins = k == SWIGLU_GRAD ? 3 : (k == GELU || k == DROPOUT) ? 1 : 2;
    int outs = k == SWIGLU_GRAD ? 2 : 1;
    BRAID_RETURN_IF_ERROR(arity(ins, ins, outs));
    BRAID_RETURN_IF_ERROR(dtypes());
    if (k == GELU || k == GELU_GRAD)
      BRAID_RETURN_IF_ERROR(intAttr("tanh", 0, 1).status());
    if (k == DROPOUT) {
      BRAID_RETURN_IF_ERROR(floatAttr("rate", 0.0, 1.0, /*openHigh=*/true).status());
      BRAID_RETURN_IF_ERROR(intAttr("rng_id", 0, INT32_MAX).status());
    }
    for (int i = 1; i < ins; ++i)
      BRAID_RETURN_IF_ERROR(same(in(i), in(0), "operand"));
    for (int i = 0; i < outs; ++i)
      BRAID_RETURN_IF_ERROR(same(out(i), in(0), "result"));
    if (k == DROPOUT)
      return checkDropoutSlice();
    return absl::OkStatus();
  }
  case CROSS_ENTROPY:
  case CROSS_ENTROPY_GRAD:
  case CROSS_ENTROPY_MAX:
  case CROSS_ENTROPY_PARTIAL:
  case CROSS_ENTROPY_FINISH:
    return checkCrossEntropy();
  case ZERO:
    BRAID_RETURN_IF_ERROR(arity(0, 0, 1));
    return absl::OkStatus();
  case ALL_REDUCE: {
    int n = inst.inputs_size();
    if (n < 1 || inst.outputs_size() != n)
      return fail(absl::StrCat("has ", n, " inputs and ", inst.outputs_size(),
                               " outputs; it needs as many of each, at least one"));
    BRAID_RETURN_IF_ERROR(arity(n, n, n));
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
  case GRAD_NORM:
    return checkGradNorm();
  case ALL_GATHER:
  case REDUCE_SCATTER:
    return checkGatherScatter();
  case SEND:
  case RECV:
    return checkPointToPoint();
  case WAIT:
    // Finishes what was started on its buffers: at least one, no results.
    return arity(1, INT32_MAX, 0);
  case COPY: {
    // With a rank_axis, x goes to the rank's block of y.
    BRAID_RETURN_IF_ERROR(arity(1, 1, 1));
    BRAID_RETURN_IF_ERROR(dtypes());
    if (inst.rank_axis().empty())
      return same(out(0), in(0), "y");
    BRAID_ASSIGN_OR_RETURN(ranks, rankAxisSize());
    if (in(0).shape_size() != 1 ||
        out(0).shape_size() != 1 || out(0).shape(0) != in(0).shape(0) * ranks)
      return fail(absl::StrCat("y '", out(0).name(), "' ", shapeStr(out(0)),
                               " is not ", ranks, " blocks of x '", in(0).name(),
                               "' ", shapeStr(in(0)), " (one per rank of '",
                               inst.rank_axis(), "')"));
    return absl::OkStatus();
  }
  case ADAMW: {
    // Mixed precision: a fourth output, the weights the model computes with
    // (BF16 or F16), rounded from the F32 master weights in(0) the update
    // keeps; with a rank_axis (ZeRO) in(0) is this rank's block of the
    // masters and the copy is the whole flat buffer of weights, of which the
    // kernel writes the rank's block.
    BRAID_RETURN_IF_ERROR(arity(7, 7, 3, 4));
    const Buffer &p = in(0);
    if (!isFloat(p.dtype()))
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
              "the weights '", copy.name(), "' ", shapeStr(copy), " are not ",
              ranks, " blocks of the master weights '", p.name(), "' ",
              shapeStr(p), " (one per rank of '", inst.rank_axis(), "')"));
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
            "parameters '", p.name(), "' ", shapeStr(p), " are not ",
            ranks, " blocks of the moments '", m.name(), "' ",
            shapeStr(m), " (one per rank of '", inst.rank_axis(), "')"));
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
  default:
    return fail(absl::StrCat("unknown kernel ", int(inst.kernel())));
  }
}

} // namespace

int64_t DTypeBytes(DType dtype) {
  switch (dtype) {
  case F32:
  case I32:
    return 4;
  case F64:
  case I64:
    return 8;
  case BF16:
  case F16:
    return 2;
  default:
    return 0;
  }
}

uint32_t Crc32(absl::string_view data) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (char ch : data)
    crc = table[(crc ^ uint8_t(ch)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

int64_t NumElements(const Buffer &b) { return numel(b); }

const std::string &MicroStepFunction(const StepFunctions &fns, int64_t m,
                                     int64_t micros) {
  if (m == 0 && !fns.first_micro_step().empty())
    return fns.first_micro_step();
  if (m + 1 == micros && !fns.last_micro_step().empty())
    return fns.last_micro_step();
  return fns.micro_step();
}

int64_t WorldSize(const Plan &plan) {
  int64_t n = 1;
  for (int64_t s : plan.mesh().sizes())
    n *= s;
  return n;
}

namespace {

/// A shard names an axis of the mesh and a dimension of the buffer, and its
/// blocks, split over the axis, add up to that dimension.
absl::Status validateShard(const Plan &plan, const Buffer &b,
                           const std::string &name) {
  const Shard &s = b.shard();
  int64_t ranks = 0;
  for (int i = 0; i < plan.mesh().axes_size(); ++i)
    if (plan.mesh().axes(i) == s.axis())
      ranks = plan.mesh().sizes(i);
  if (ranks == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is split along '", s.axis(), "', which is not a mesh axis"));
  if (s.dim() < 0 || s.dim() >= b.shape_size())
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is split along dimension ", s.dim(), " but has rank ",
        b.shape_size()));
  int64_t local = 0;
  for (int64_t block : s.blocks()) {
    if (block < 1 || block % ranks != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has a block of ", block, " that does not split into ",
          ranks, " equal parts"));
    local += block / ranks;
  }
  if (s.blocks_size() && local != b.shape(s.dim()))
    return absl::InvalidArgumentError(absl::StrCat(
        name, "'s blocks make ", local, " elements per rank along dimension ",
        s.dim(), ", not its ", b.shape(s.dim())));
  return absl::OkStatus();
}

/// The training section, when there is one: sizes the step loop multiplies
/// and step functions that exist.
absl::Status validateTraining(const Plan &plan,
                              const std::set<std::string> &functions) {
  if (!plan.has_training())
    return absl::OkStatus();
  const Training &t = plan.training();
  for (auto [field, value] :
       {std::pair<const char *, int64_t>{"steps", t.steps()},
        {"micro_batch_size", t.micro_batch_size()},
        {"seq_length", t.seq_length()},
        {"micro_batches", t.micro_batches()}})
    if (value < 1 || value > (int64_t(1) << 40))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.", field, " = ", value, " must be in [1, 2^40]"));
  if (t.micro_batch_size() * t.micro_batches() > (int64_t(1) << 40) ||
      t.micro_batch_size() * t.seq_length() > (int64_t(1) << 40))
    return absl::InvalidArgumentError(
        "training: micro_batch_size x micro_batches x seq_length is too large");
  if (t.has_loss_scaling()) {
    const LossScaling &s = t.loss_scaling();
    auto finite = [](double v) { return std::isfinite(v); };
    if (!(s.static_scale() >= 0) || !finite(s.static_scale()))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.loss_scaling.static_scale = ", s.static_scale(),
          " must be >= 0 and finite (0: dynamic)"));
    if (s.static_scale() == 0 &&
        (!(s.min() > 0) || !(s.initial() >= s.min()) || !finite(s.initial()) ||
         s.window() < 1 || s.hysteresis() < 1))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.loss_scaling: a dynamic scale needs 0 < min <= initial "
          "(finite), window >= 1 and hysteresis >= 1; the plan has min ",
          s.min(), ", initial ", s.initial(), ", window ", s.window(),
          ", hysteresis ", s.hysteresis()));
  }
  // With a pipeline, the stages' functions make the step.
  if (plan.pipeline().stages_size())
    return absl::OkStatus();
  const StepFunctions &step = t.step();
  if (step.micro_step().empty())
    return absl::InvalidArgumentError(
        "training.step.micro_step names no function");
  for (auto [field, name] : {std::pair<const char *, const std::string &>{
                                 "zero_grads", step.zero_grads()},
                             {"micro_step", step.micro_step()},
                             {"last_micro_step", step.last_micro_step()},
                             {"first_micro_step", step.first_micro_step()},
                             {"gather_params", step.gather_params()},
                             {"update", step.update()}})
    if (!name.empty() && !functions.count(name))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.step.", field, " names function '", name,
          "', which the plan does not have"));
  return absl::OkStatus();
}

/// The pipeline's shape: one "pp" rank per stage, stage functions that exist
/// and belong to one stage. Fills `stageOf` with each stage function's stage.
absl::Status validatePipeline(const Plan &plan,
                              const std::set<std::string> &functions,
                              std::map<std::string, int> *stageOf) {
  const Pipeline &p = plan.pipeline();
  int stages = p.stages_size();
  if (stages == 0)
    return absl::OkStatus();
  const Mesh &mesh = plan.mesh();
  auto axis = std::find(mesh.axes().begin(), mesh.axes().end(), "pp");
  if (axis == mesh.axes().end())
    return absl::InvalidArgumentError(absl::StrCat(
        "the pipeline has ", stages, " stages but the mesh has no axis 'pp' "
        "(expected one of size ", stages, ")"));
  int64_t ppSize = mesh.sizes(int(axis - mesh.axes().begin()));
  if (ppSize != stages)
    return absl::InvalidArgumentError(absl::StrCat(
        "the pipeline has ", stages, " stages but mesh axis 'pp' has size ",
        ppSize, " (expected one rank per stage)"));
  if (!plan.has_training())
    return absl::InvalidArgumentError(
        "the pipeline has no training section (its micro_batches size the "
        "stages' schedules)");
  for (int s = 0; s < stages; ++s) {
    const Stage &stage = p.stages(s);
    if (stage.chunks_size() != p.stages(0).chunks_size())
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", s, " has ", stage.chunks_size() + 1,
          " model chunks but stage 0 has ", p.stages(0).chunks_size() + 1,
          " (expected the same on every stage)"));
    std::vector<std::tuple<std::string, const std::string &, bool>> fields{
        {"zero_grads", stage.zero_grads(), false},
        {"forward", stage.forward(), true},
        {"backward", stage.backward(), true},
        {"backward_weight", stage.backward_weight(), false},
        {"update", stage.update(), false}};
    for (int k = 0; k < stage.chunks_size(); ++k) {
      const Chunk &chunk = stage.chunks(k);
      std::string at = absl::StrCat("chunk ", k + 1, "'s ");
      fields.push_back({at + "forward", chunk.forward(), true});
      fields.push_back({at + "backward", chunk.backward(), true});
      // A chunk splits its backward exactly when chunk 0 does.
      fields.push_back({at + "backward_weight", chunk.backward_weight(),
                        !stage.backward_weight().empty()});
      if (stage.backward_weight().empty() != chunk.backward_weight().empty())
        return absl::InvalidArgumentError(absl::StrCat(
            "pipeline stage ", s, "'s chunk ", k + 1,
            stage.backward_weight().empty() ? " has" : " has no",
            " backward_weight function but chunk 0 ",
            stage.backward_weight().empty() ? "has none" : "has one",
            " (expected every chunk to split its backward alike)"));
    }
    // A backward call may run a function of its own (its chunk's last,
    // which starts the gradients' sums): one of the stage's.
    for (int i = 0; i < stage.schedule_size(); ++i) {
      const ScheduleStep &step = stage.schedule(i);
      if (step.function().empty())
        continue;
      if (step.kind() != ScheduleStep::BACKWARD &&
          step.kind() != ScheduleStep::BACKWARD_WEIGHT)
        return absl::InvalidArgumentError(
            absl::StrCat("pipeline stage ", s, "'s schedule step ", i,
                         " names function '", step.function(),
                         "' but only a BACKWARD or BACKWARD_WEIGHT may "
                         "run a function other than its chunk's"));
      fields.push_back(
          {absl::StrCat("schedule step ", i), step.function(), true});
    }
    for (const auto &[field, name, required] : fields) {
      if (name.empty()) {
        if (required)
          return absl::InvalidArgumentError(absl::StrCat(
              "pipeline stage ", s, " names no ", field, " function"));
        continue;
      }
      if (!functions.count(name))
        return absl::InvalidArgumentError(absl::StrCat(
            "pipeline stage ", s, "'s ", field, " names function '", name,
            "', which the plan does not have"));
      auto [it, inserted] = stageOf->emplace(name, s);
      if (!inserted && it->second != s)
        return absl::InvalidArgumentError(absl::StrCat(
            "function '", name, "' belongs to pipeline stages ", it->second,
            " and ", s, " (a function is the program of one stage)"));
    }
  }
  return absl::OkStatus();
}

/// The slots of model chunk `chunk` of `stage` (validated chunk_slots).
int64_t chunkSlots(const Stage &stage, int64_t chunk) {
  return stage.chunk_slots_size() ? stage.chunk_slots(int(chunk))
                                  : stage.slots();
}

/// The functions of model chunk `chunk`'s calls on `stage` (those it has).
std::vector<const std::string *> chunkCalls(const Stage &stage, int chunk) {
  std::vector<const std::string *> out;
  if (chunk == 0) {
    out = {&stage.forward(), &stage.backward(), &stage.backward_weight()};
  } else {
    const Chunk &c = stage.chunks(chunk - 1);
    out = {&c.forward(), &c.backward(), &c.backward_weight()};
  }
  for (const ScheduleStep &step : stage.schedule())
    if (step.chunk() == chunk && !step.function().empty())
      out.push_back(&step.function());
  return out;
}

/// Buffers of the pipeline's stages: a stage's functions name only its
/// buffers; each chunk has its own slots (Stage.chunk_slots), a slotted
/// buffer is named by the calls of one chunk and has one copy per slot of
/// it; every copy lies inside the stage's own arena (Stage.arena_bytes,
/// which is what its ranks allocate). The buffers have been validated
/// against Plan.arena_bytes, so their ends cannot overflow.
absl::Status validateStageBuffers(const Plan &plan,
                                  const std::map<std::string, int> &stageOf) {
  const Pipeline &p = plan.pipeline();
  if (p.stages_size() == 0)
    return absl::OkStatus();
  for (int s = 0; s < p.stages_size(); ++s) {
    const Stage &stage = p.stages(s);
    if (stage.slots() < 1)
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline stage ", s, " has slots = ",
                       stage.slots(), ", expected at least 1"));
    int chunks = 1 + stage.chunks_size();
    if (chunks > 1 && stage.chunk_slots_size() != chunks)
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", s, " has ", chunks, " model chunks but ",
          stage.chunk_slots_size(), " chunk_slots (expected the slots of "
          "each chunk)"));
    if (chunks == 1 && stage.chunk_slots_size() > 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", s, " has one model chunk but ",
          stage.chunk_slots_size(), " chunk_slots (expected at most one)"));
    int64_t most = 0;
    for (int k = 0; k < stage.chunk_slots_size(); ++k) {
      if (stage.chunk_slots(k) < 1)
        return absl::InvalidArgumentError(absl::StrCat(
            "pipeline stage ", s, "'s chunk ", k, " has chunk_slots = ",
            stage.chunk_slots(k), ", expected at least 1"));
      most = std::max(most, stage.chunk_slots(k));
    }
    if (stage.chunk_slots_size() && most != stage.slots())
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", s, " has slots = ", stage.slots(),
          " but the largest of its chunk_slots is ", most,
          " (expected them equal)"));
    int64_t arena = p.stages(s).arena_bytes();
    if (arena < 0 || arena > plan.arena_bytes())
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline stage ", s, " has arena_bytes = ", arena,
                       ", outside [0, ", plan.arena_bytes(),
                       "] (the plan's arena_bytes, the largest stage's)"));
  }
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const Buffer &b = plan.buffers(i);
    const Stage &stage = p.stages(b.stage());
    int64_t bytes = numel(b) * DTypeBytes(b.dtype());
    int64_t copies = std::max<int64_t>(b.slots(), 1);
    int64_t end = b.offset() + bytes * copies;
    if (end > stage.arena_bytes())
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer ", i, " ('", b.name(), "') of stage ", b.stage(),
          " occupies bytes [", b.offset(), ", ", end, ")",
          copies > 1
              ? absl::StrCat(" (", copies, " slots of ", bytes, " bytes)")
              : "",
          ", which leave stage ", b.stage(), "'s arena of ",
          stage.arena_bytes(), " bytes",
          stage.arena_bytes() == 0
              ? " (the stage states no arena_bytes: compile the plan again)"
              : ""));
  }
  for (const Function &fn : plan.functions()) {
    auto it = stageOf.find(fn.name());
    if (it == stageOf.end())
      continue;
    int s = it->second;
    for (int k = 0; k < fn.body_size(); ++k) {
      const Instruction &inst = fn.body(k);
      for (const auto *ids : {&inst.inputs(), &inst.outputs()})
        for (int32_t id : *ids) {
          const Buffer &b = plan.buffers(id);
          if (b.stage() != s)
            return absl::InvalidArgumentError(absl::StrCat(
                "function '", fn.name(), "' instruction ", k, " (",
                Kernel_Name(inst.kernel()),
                inst.provenance().empty() ? "" : ", from ", inst.provenance(),
                "): buffer ", id, " ('", b.name(), "') belongs to stage ",
                b.stage(), ", but the function is the program of stage ", s));
        }
    }
  }
  // The chunk whose calls name each slotted buffer (-1: none).
  std::map<std::string, const Function *> functions;
  for (const Function &fn : plan.functions())
    functions[fn.name()] = &fn;
  std::vector<int> chunkOf(plan.buffers_size(), -1);
  for (int s = 0; s < p.stages_size(); ++s) {
    const Stage &stage = p.stages(s);
    for (int k = 0; k <= stage.chunks_size(); ++k)
      for (const std::string *name : chunkCalls(stage, k)) {
        auto fn = functions.find(*name);
        if (fn == functions.end())
          continue;
        for (const Instruction &inst : fn->second->body())
          for (const auto *ids : {&inst.inputs(), &inst.outputs()})
            for (int32_t id : *ids) {
              const Buffer &b = plan.buffers(id);
              if (b.slots() < 2 || chunkOf[id] == k)
                continue;
              if (chunkOf[id] >= 0)
                return absl::InvalidArgumentError(absl::StrCat(
                    "buffer ", id, " ('", b.name(), "') of stage ", s,
                    " has ", b.slots(), " slots and is named by the calls of "
                    "chunks ", chunkOf[id], " and ", k, " (function '", *name,
                    "'), but each chunk has slots of its own (expected one "
                    "chunk, or 0 or 1 for a single copy)"));
              chunkOf[id] = k;
            }
      }
  }
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const Buffer &b = plan.buffers(i);
    const Stage &stage = p.stages(b.stage());
    int k = chunkOf[i];
    int64_t slots = k >= 0 ? chunkSlots(stage, k) : stage.slots();
    if (b.slots() >= 2 && b.slots() != slots)
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer ", i, " ('", b.name(), "') of stage ", b.stage(), " has ",
          b.slots(), " slots but ",
          k >= 0 && stage.chunks_size()
              ? absl::StrCat("chunk ", k, " of the stage, whose calls name "
                             "it, has ")
              : std::string("the stage has "),
          slots, " (expected ", slots,
          " slots, or 0 or 1 for a single copy)"));
  }
  return absl::OkStatus();
}

/// Each stage's schedule: every micro-batch of the step has one FORWARD,
/// then one BACKWARD (then one BACKWARD_WEIGHT when the stage has a
/// backward_weight function), all on one slot of its chunk (below the
/// chunk's slots), and a slot of a chunk holds one micro-batch at a time
/// (from its FORWARD to its last backward step on the chunk).
/// Training has been validated.
absl::Status validateSchedules(const Plan &plan) {
  const Pipeline &p = plan.pipeline();
  int64_t micros = plan.training().micro_batches();
  for (int s = 0; s < p.stages_size(); ++s) {
    const Stage &stage = p.stages(s);
    bool split = !stage.backward_weight().empty();
    int64_t perMicro = split ? 3 : 2;
    int64_t chunks = 1 + stage.chunks_size();
    std::string where = absl::StrCat("pipeline stage ", s, "'s schedule");
    if (stage.schedule_size() != perMicro * micros * chunks)
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has ", stage.schedule_size(), " steps, expected ",
          perMicro * micros * chunks,
          split ? " (a FORWARD, a BACKWARD and a BACKWARD_WEIGHT"
                : " (a FORWARD and a BACKWARD",
          " for each of the ", micros, " micro-batches",
          chunks > 1 ? absl::StrCat(" on each of the ", chunks, " chunks")
                     : std::string(),
          ")"));
    // Per (micro-batch, chunk), as micro-batch x chunks + chunk; sized by
    // the schedule's length, which is perMicro x micros x chunks.
    std::vector<int64_t> forwardSlot(micros * chunks, -1);
    std::vector<bool> backwardDone(micros * chunks, false),
        weightDone(micros * chunks, false);
    // (chunk, slot) -> micro-batch: each chunk has slots of its own.
    std::map<std::pair<int64_t, int64_t>, int64_t> holder;
    for (int i = 0; i < stage.schedule_size(); ++i) {
      const ScheduleStep &step = stage.schedule(i);
      std::string at = absl::StrCat(where, " step ", i, ": ");
      ScheduleStep::Kind kind = step.kind();
      if (kind != ScheduleStep::FORWARD && kind != ScheduleStep::BACKWARD &&
          !(split && kind == ScheduleStep::BACKWARD_WEIGHT))
        return absl::InvalidArgumentError(absl::StrCat(
            at, "kind ", int(kind),
            split ? " is not FORWARD, BACKWARD or BACKWARD_WEIGHT"
                  : " is not FORWARD or BACKWARD (BACKWARD_WEIGHT needs the "
                    "stage's backward_weight function)"));
      int64_t mb = step.micro_batch(), slot = step.slot();
      if (mb < 0 || mb >= micros)
        return absl::InvalidArgumentError(
            absl::StrCat(at, "micro-batch ", mb, " is outside [0, ", micros,
                         ") (training.micro_batches = ", micros, ")"));
      if (step.chunk() < 0 || step.chunk() >= chunks)
        return absl::InvalidArgumentError(
            absl::StrCat(at, "chunk ", step.chunk(), " is outside the stage's ",
                         chunks, " model chunks [0, ", chunks, ")"));
      int64_t m = mb * chunks + step.chunk();
      // A (micro-batch, chunk) in words.
      auto name = [&](int64_t id) {
        return chunks > 1 ? absl::StrCat(id / chunks, " on chunk ", id % chunks)
                          : absl::StrCat(id);
      };
      int64_t slots = chunkSlots(stage, step.chunk());
      if (slot < 0 || slot >= slots)
        return absl::InvalidArgumentError(absl::StrCat(
            at, "slot ", slot, " is outside ",
            chunks > 1 ? absl::StrCat("chunk ", step.chunk(), "'s ")
                       : std::string("the stage's "),
            slots, " slots [0, ", slots, ")"));
      if (kind == ScheduleStep::FORWARD) {
        if (forwardSlot[m] >= 0)
          return absl::InvalidArgumentError(absl::StrCat(
              at, "a second FORWARD of micro-batch ", name(m),
              " (expected one per micro-batch)"));
        auto held = holder.find({step.chunk(), slot});
        if (held != holder.end())
          return absl::InvalidArgumentError(absl::StrCat(
              at, "the FORWARD of micro-batch ", name(m), " reuses slot ", slot,
              ", which micro-batch ", name(held->second), " holds until its ",
              split ? "BACKWARD_WEIGHT" : "BACKWARD",
              " (expected a free slot)"));
        forwardSlot[m] = slot;
        holder[{step.chunk(), slot}] = m;
        continue;
      }
      bool weight = kind == ScheduleStep::BACKWARD_WEIGHT;
      const char *kindName = weight ? "BACKWARD_WEIGHT" : "BACKWARD";
      if (weight ? weightDone[m] : backwardDone[m])
        return absl::InvalidArgumentError(absl::StrCat(
            at, "a second ", kindName, " of micro-batch ", name(m),
            " (expected one per micro-batch)"));
      if (forwardSlot[m] < 0 || (weight && !backwardDone[m]))
        return absl::InvalidArgumentError(absl::StrCat(
            at, "the ", kindName, " of micro-batch ", name(m), " comes before its ",
            weight ? "BACKWARD" : "FORWARD"));
      if (forwardSlot[m] != slot)
        return absl::InvalidArgumentError(absl::StrCat(
            at, "the ", kindName, " of micro-batch ", name(m), " uses slot ", slot,
            " but its FORWARD used slot ", forwardSlot[m],
            " (expected the same slot)"));
      (weight ? weightDone : backwardDone)[m] = true;
      if (weight || !split)
        holder.erase({step.chunk(), slot});
    }
  }
  return absl::OkStatus();
}

} // namespace

std::vector<int64_t> MeshCoordinates(const Mesh &mesh, int64_t rank) {
  std::vector<int64_t> coords(mesh.sizes_size());
  for (int i = mesh.sizes_size() - 1; i >= 0; --i) {
    coords[i] = rank % mesh.sizes(i);
    rank /= mesh.sizes(i);
  }
  return coords;
}

std::string DescribeMesh(const Mesh &mesh) {
  std::vector<std::string> axes;
  for (int i = 0; i < mesh.axes_size(); ++i)
    axes.push_back(absl::StrCat(mesh.axes(i), " ", mesh.sizes(i)));
  return absl::StrJoin(axes, " x ");
}

std::string GroupKey(std::vector<std::string> axes) {
  std::sort(axes.begin(), axes.end());
  return absl::StrJoin(axes, ",");
}

std::vector<std::vector<std::string>> CommunicationGroups(const Plan &plan) {
  std::set<std::string> keys;
  std::vector<std::vector<std::string>> groups;
  for (const Function &fn : plan.functions())
    for (const Instruction &inst : fn.body())
      if (inst.group_size()) {
        std::vector<std::string> axes(inst.group().begin(), inst.group().end());
        if (keys.insert(GroupKey(axes)).second)
          groups.push_back(axes);
      }
  for (const std::string &axis : plan.mesh().axes())
    if (keys.insert(GroupKey({axis})).second)
      groups.push_back({axis});
  return groups;
}

int64_t GroupColor(const Mesh &mesh, absl::Span<const int64_t> coords,
                   const std::vector<std::string> &axes) {
  int64_t color = 0;
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (std::find(axes.begin(), axes.end(), mesh.axes(i)) == axes.end())
      color = color * mesh.sizes(i) + coords[i];
  return color;
}

absl::Status CheckMeshCoordinates(const Mesh &mesh,
                                  absl::Span<const int64_t> coords) {
  bool inside = int(coords.size()) == mesh.sizes_size();
  for (int i = 0; inside && i < mesh.sizes_size(); ++i)
    inside = coords[i] >= 0 && coords[i] < mesh.sizes(i);
  if (inside)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the communicator's coordinates (", absl::StrJoin(coords, ", "),
      ") are not a rank of the plan's mesh (sizes ",
      absl::StrJoin(mesh.sizes(), " x "), ")"));
}

int64_t AxisCoordinate(const Mesh &mesh, absl::Span<const int64_t> coords,
                       absl::string_view axis) {
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) == axis && i < int(coords.size()))
      return coords[i];
  return 0;
}

int64_t GroupPlace(const Plan &plan, const Instruction &inst,
                   absl::Span<const int64_t> coords) {
  int64_t place = 0;
  for (const std::string &axis : inst.group())
    place = place * AxisSize(plan.mesh(), axis) +
            AxisCoordinate(plan.mesh(), coords, axis);
  return place;
}

absl::Status CheckBufferOnStage(const Plan &plan, int id, int64_t stage) {
  const Buffer &b = plan.buffers(id);
  if (plan.pipeline().stages_size() == 0 || b.stage() == stage)
    return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("buffer '", b.name(), "' belongs to pipeline stage ",
                   b.stage(), ", which other ranks run; this rank runs stage ",
                   stage, " and holds only its arena"));
}

int64_t GroupSize(const Plan &plan, const Instruction &inst) {
  int64_t ranks = 1;
  for (const std::string &axis : inst.group())
    ranks *= AxisSize(plan.mesh(), axis);
  return ranks;
}

int64_t AxisSize(const Mesh &mesh, absl::string_view axis) {
  for (int i = 0; i < mesh.axes_size() && i < mesh.sizes_size(); ++i)
    if (mesh.axes(i) == axis)
      return mesh.sizes(i);
  return 1;
}

absl::Status ValidatePlan(const Plan &plan) {
  if (plan.version() != SCHEMA_VERSION_CURRENT)
    return absl::FailedPreconditionError(absl::StrCat(
        "plan schema version ", int(plan.version()), " is not the version ",
        int(SCHEMA_VERSION_CURRENT), " this braid-run reads; recompile the "
        "plan with the matching braidc"));
  // The mesh: named, unique axes with sizes >= 1.
  const Mesh &mesh = plan.mesh();
  if (mesh.axes_size() != mesh.sizes_size() || mesh.axes_size() == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh has ", mesh.axes_size(), " axes and ", mesh.sizes_size(),
        " sizes; it needs one size per axis and at least one axis"));
  std::set<std::string> axes;
  int64_t world = 1;
  for (int i = 0; i < mesh.axes_size(); ++i) {
    if (mesh.axes(i).empty() || !axes.insert(mesh.axes(i)).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh axis ", i, " ('", mesh.axes(i), "') is empty or repeated"));
    if (mesh.sizes(i) < 1 || mesh.sizes(i) > kMaxWorldSize ||
        world * mesh.sizes(i) > kMaxWorldSize)
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh axis '", mesh.axes(i), "' has size ", mesh.sizes(i),
          "; sizes must be >= 1 and the world at most ", kMaxWorldSize));
    world *= mesh.sizes(i);
  }
  if (plan.arena_bytes() < 0 || plan.arena_bytes() > kMaxArenaBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "arena_bytes = ", plan.arena_bytes(), " is outside [0, ",
        kMaxArenaBytes, "]"));
  // Buffers: known dtype and role, sane shapes, inside the arena (every
  // slot), of a stage of the pipeline.
  int stages = plan.pipeline().stages_size();
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const Buffer &b = plan.buffers(i);
    std::string name = absl::StrCat("buffer ", i, " ('", b.name(), "')");
    if (DTypeBytes(b.dtype()) == 0)
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has unknown dtype ", int(b.dtype())));
    if (!BufferRole_IsValid(b.role()) || b.role() == ROLE_UNSPECIFIED)
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has unknown role ", int(b.role())));
    if (b.shape_size() > kMaxRank)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has rank ", b.shape_size(), "; at most ", kMaxRank));
    int64_t bytes = DTypeBytes(b.dtype());
    for (int64_t d : b.shape()) {
      if (d < 0 || (d > 0 && bytes > kMaxArenaBytes / d))
        return absl::InvalidArgumentError(absl::StrCat(
            name, " has shape ", shapeStr(b), ", which is negative or larger "
            "than any arena"));
      bytes *= d;
    }
    if (b.offset() % DTypeBytes(b.dtype()) != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " starts at byte ", b.offset(), ", which is not a multiple of "
          "its element size ", DTypeBytes(b.dtype())));
    if (b.offset() < 0 || b.offset() > plan.arena_bytes() - bytes)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " occupies bytes [", b.offset(), ", ", b.offset() + bytes,
          ") which leave the arena of ", plan.arena_bytes(), " bytes"));
    // Slots: copy k at offset + k x bytes, every copy inside the arena.
    if (b.slots() < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has slots = ", b.slots(), ", expected at least 0"));
    if (b.slots() >= 2 && bytes > 0 &&
        b.slots() > (plan.arena_bytes() - b.offset()) / bytes)
      return absl::InvalidArgumentError(absl::StrCat(
          name, "'s ", b.slots(), " slots of ", bytes, " bytes from byte ",
          b.offset(), " leave the arena of ", plan.arena_bytes(), " bytes"));
    if (b.stage() < 0 || b.stage() >= std::max(stages, 1))
      return absl::InvalidArgumentError(
          stages ? absl::StrCat(name, " belongs to stage ", b.stage(),
                                ", outside the pipeline's ", stages,
                                " stages [0, ", stages, ")")
                 : absl::StrCat(name, " belongs to stage ", b.stage(),
                                " but the plan has no pipeline (expected 0)"));
    if (b.has_shard())
      if (absl::Status s = validateShard(plan, b, name); !s.ok())
        return s;
  }
  // Views lie inside their bucket, of their stage, at the place they say;
  // a ZeRO-3 block is the dp-th part of a one-dimensional flat buffer.
  auto bytesOf = [&](const Buffer &b) {
    int64_t n = DTypeBytes(b.dtype());
    for (int64_t d : b.shape())
      n *= d;
    return n;
  };
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const Buffer &b = plan.buffers(i);
    std::string name = absl::StrCat("buffer ", i, " ('", b.name(), "')");
    if (b.view_of() < 0 || b.view_of() > plan.buffers_size() ||
        b.view_of() == i + 1 || b.block_of() < 0 ||
        b.block_of() > plan.buffers_size() || b.block_of() == i + 1)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has view_of = ", b.view_of(), " and block_of = ",
          b.block_of(), ": each is 0 or 1 + the index of another buffer of the ",
          plan.buffers_size()));
    if (b.view_of() > 0) {
      const Buffer &parent = plan.buffers(b.view_of() - 1);
      if (b.view_offset() < 0 || b.slots() >= 2 || parent.slots() >= 2 ||
          parent.stage() != b.stage() ||
          b.offset() != parent.offset() + b.view_offset() ||
          b.view_offset() > bytesOf(parent) - bytesOf(b))
        return absl::InvalidArgumentError(absl::StrCat(
            name, " is a view of buffer ", b.view_of() - 1, " ('", parent.name(),
            "', ", bytesOf(parent), " bytes at ", parent.offset(), ") at ",
            b.view_offset(), " bytes in, but occupies ", bytesOf(b),
            " bytes at ", b.offset(),
            " (expected inside it, at its offset + view_offset, one copy, "
            "one stage)"));
    } else if (b.view_offset() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has a view_offset but is not a view"));
    }
    if (b.block_of() > 0) {
      const Buffer &whole = plan.buffers(b.block_of() - 1);
      int64_t dp = AxisSize(plan.mesh(), "dp");
      if (b.role() != PARAMETER || b.shape_size() != 1 ||
          whole.shape_size() != 1 || whole.dtype() != b.dtype() ||
          whole.stage() != b.stage() || dp < 1 ||
          whole.shape(0) != b.shape(0) * dp)
        return absl::InvalidArgumentError(absl::StrCat(
            name, " is a block of buffer ", b.block_of() - 1, " ('",
            whole.name(), "' ", shapeStr(whole), ") but is ", shapeStr(b),
            " (expected one-dimensional parameters, 1/dp of it)"));
    }
  }
  // Functions: unique names; the pipeline's stages; valid instructions,
  // each function of a stage on that stage's buffers.
  std::set<std::string> names;
  for (const Function &fn : plan.functions())
    if (fn.name().empty() || !names.insert(fn.name()).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "function name '", fn.name(), "' is empty or repeated"));
  std::map<std::string, int> stageOf;
  if (absl::Status s = validatePipeline(plan, names, &stageOf); !s.ok())
    return s;
  for (const Function &fn : plan.functions()) {
    auto it = stageOf.find(fn.name());
    int stage = it == stageOf.end() ? -1 : it->second;
    for (int i = 0; i < fn.body_size(); ++i)
      if (absl::Status s =
              InstructionChecker(plan, fn, i, fn.body(i), stage).check();
          !s.ok())
        return s;
  }
  if (absl::Status s = validateStageBuffers(plan, stageOf); !s.ok())
    return s;
  if (absl::Status s = validateTraining(plan, names); !s.ok())
    return s;
  return validateSchedules(plan);
}

std::string SerializePlanFile(const Plan &plan) {
  // Deterministic: map fields (an instruction's attributes) in key order,
  // so that one compile gives the same bytes every time.
  std::string payload;
  {
    google::protobuf::io::StringOutputStream stream(&payload);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    plan.SerializeToCodedStream(&coded);
  }
  std::string out(kMagic, sizeof(kMagic));
  putLE(out, payload.size(), 8);
  putLE(out, Crc32(payload), 4);
  out += payload;
  return out;
}

absl::Status WritePlanFile(const Plan &plan, const std::string &path) {
  std::string bytes = SerializePlanFile(plan);
  if (bytes.size() - kHeaderBytes > uint64_t(kMaxPlanPayloadBytes))
    return absl::ResourceExhaustedError(absl::StrCat(
        "the plan for ", path, " serializes to ", bytes.size() - kHeaderBytes,
        " bytes, more than a plan file may hold (", kMaxPlanPayloadBytes,
        ")"));
  common::OutputFile::Options options;
  options.sync = true;
  return common::WriteOutputFile(path, bytes, options);
}

absl::StatusOr<Plan> ParsePlanFile(absl::string_view bytes,
                                   absl::string_view source) {
  if (bytes.size() < kHeaderBytes ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a Braid plan file (no BRAIDPLN header)"));
  uint64_t length = getLE(bytes, 8, 8);
  uint32_t crc = uint32_t(getLE(bytes, 16, 4));
  if (length > uint64_t(kMaxPlanPayloadBytes))
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the plan file's header says its payload is ", length,
        " bytes, more than a plan file may hold (", kMaxPlanPayloadBytes,
        "): a corrupt header"));
  absl::string_view payload = bytes.substr(kHeaderBytes);
  if (payload.size() != length)
    return absl::DataLossError(absl::StrCat(
        source, ": the plan file holds ", payload.size(),
        " payload bytes but its header says ", length,
        payload.size() < length ? " (the file is truncated)" : ""));
  if (Crc32(payload) != crc)
    return absl::DataLossError(
        absl::StrCat(source, ": the plan's checksum does not match (corrupt file)"));
  Plan plan;
  // Protobuf logs why a message does not parse (a string field that is not
  // UTF-8) to stderr; the reason belongs in the error instead.
  std::string why;
  bool parsed;
  {
    ProtobufLogCapture capture(&why);
    parsed = plan.ParseFromArray(payload.data(), int(payload.size()));
  }
  if (!parsed)
    return absl::DataLossError(absl::StrCat(
        source, ": the payload is not a valid plan message",
        why.empty() ? "" : absl::StrCat(" (", why, ")")));
  if (absl::Status s = ValidatePlan(plan); !s.ok())
    return absl::Status(s.code(), absl::StrCat(source, ": ", s.message()));
  return plan;
}

absl::StatusOr<Plan> LoadPlanFile(const std::string &path) {
  // The header first: its magic and payload size are checked before the
  // payload is read, so that a device, a huge file or a stray non-plan
  // costs 20 bytes of reading rather than all of memory.
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> closer(f, &std::fclose);
  struct stat st;
  if (::fstat(::fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not a plan file"));
  std::string bytes(kHeaderBytes, '\0');
  size_t got = std::fread(bytes.data(), 1, kHeaderBytes, f);
  if (std::ferror(f))
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  bytes.resize(got);
  if (got < kHeaderBytes ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return ParsePlanFile(bytes, path); // names what is wrong
  uint64_t length = getLE(bytes, 8, 8);
  if (length > uint64_t(kMaxPlanPayloadBytes))
    return ParsePlanFile(bytes, path);
  if (S_ISREG(st.st_mode) && uint64_t(st.st_size) != kHeaderBytes + length)
    return absl::DataLossError(absl::StrCat(
        path, ": the plan file holds ", int64_t(st.st_size) - int64_t(kHeaderBytes),
        " payload bytes but its header says ", length,
        uint64_t(st.st_size) < kHeaderBytes + length
            ? " (the file is truncated)"
            : " (bytes follow the plan)"));
  // Up to one byte more than the header promises, so that ParsePlanFile
  // sees a stream that goes on (a pipe, a device) as too long.
  bytes.resize(kHeaderBytes + length + 1);
  got = std::fread(bytes.data() + kHeaderBytes, 1, length + 1, f);
  if (std::ferror(f))
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  bytes.resize(kHeaderBytes + got);
  return ParsePlanFile(bytes, path);
}

} // namespace braid::plan
