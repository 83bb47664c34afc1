//===- PlanZero.cpp - The optimizer sharded over the dp ranks -------------===//
//
// Implements `plan-zero` (see Passes.td): rewrites the optimizer that
// plan-lower puts in each update function (the in-place ALL_REDUCEs of the
// accumulated gradients, one GRAD_NORM, one ADAMW per parameter) into
// ZeRO's buckets. This file reads that optimizer and names the buffers;
// ZeroBuckets.cpp makes the buckets and their kernels.
//
// All the pass needs is in that plan: a parameter's kind of bucket is the
// group of the ALL_REDUCE that sums its gradient, the weight decay of its
// ADAMW, and whether GRAD_NORM counts it among its replicated inputs (those
// after `split_inputs`); where a gradient is complete is the last kernel
// that writes it; a gradient another pipeline stage adds to (a tied
// embedding) is the output of an ADD in update before the optimizer.
//
// Buffer names: plan-lower numbers its buffers b0, b1, ... in the order it
// makes them, stage after stage, and the buffers of an update's optimizer
// (the norm's results, the master weights) are the last a stage makes. The
// pass numbers the buffers it makes, in the order it makes them, from the
// first number of those it replaces, and moves the numbers of the buffers
// made after those (the later stages') up to follow its own: the numbers
// stay in the order of making.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Zero.h"

#include "dialects/model/ModelDialect.h"

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANZERO
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid;
using namespace braid::plan_ir;
using namespace braid::plan_ir::zero;

namespace {

/// The number of a buffer named as plan-lower names them (`b12`: 12).
std::optional<int64_t> numberOf(StringRef symbol) {
  int64_t n;
  if (!symbol.consume_front("b") || symbol.empty() ||
      symbol.getAsInteger(10, n) || n < 0)
    return std::nullopt;
  return n;
}

/// A name that no buffer of plan-lower's has, for a buffer made by the pass
/// until renumber() gives it its number.
std::string temporaryName(size_t index) {
  return "plan-zero." + std::to_string(index);
}

} // namespace

BufferOp ZeroUpdate::newBuffer(Location loc, Type type, StringRef role,
                               StringRef name) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(firstFunc);
  made.push_back(createBuffer(b, loc, temporaryName(made.size()), type, role,
                              name, stage));
  return made.back();
}

BufferOp ZeroUpdate::copyView(BufferOp view, BufferOp of) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointAfter(view);
  auto copy = cast<BufferOp>(b.clone(*view));
  copy.setSymNameAttr(b.getStringAttr(temporaryName(made.size())));
  copy.setViewOfAttr(FlatSymbolRefAttr::get(of.getSymNameAttr()));
  made.push_back(copy);
  return copy;
}

int64_t ZeroUpdate::axisSize(StringRef axis) const {
  auto mesh = ModuleOp(module).lookupSymbol<model::MeshOp>("mesh");
  return mesh ? mesh.getAxisSize(axis).value_or(1) : 1;
}

LogicalResult ZeroUpdate::takeOptimizer() {
  StringRef fnName = update.getSymName();
  for (BufferOp buffer : module.getOps<BufferOp>())
    bySymbol[buffer.getSymName()] = buffer;
  SmallVector<KernelOp> optimizer, adamws;
  KernelOp norm;
  for (KernelOp k : update.getBody().getOps<KernelOp>()) {
    if (k.is(plan::KernelId::ALL_REDUCE) || k.is(plan::KernelId::GRAD_NORM) ||
        k.is(plan::KernelId::ADAMW)) {
      optimizer.push_back(k);
      if (k.is(plan::KernelId::ADAMW))
        adamws.push_back(k);
      if (k.is(plan::KernelId::GRAD_NORM)) {
        if (norm)
          return k.emitError("plan-zero: @")
                 << fnName << " has two GRAD_NORM kernels";
        norm = k;
      }
    } else if (optimizer.empty() && k.is(plan::KernelId::ADD) &&
               k.getOutputs().size() == 1) {
      // Another stage's part of a gradient, added before the sums.
      if (BufferOp grad = bufferOf(k.getOutputs()[0]))
        sharedGrads.insert(grad);
    }
  }
  if (!norm)
    return update.emitError("plan-zero: @")
           << fnName << " has no GRAD_NORM: ZeRO clips the gradients over the "
           << "ranks' blocks of them";
  // plan-lower lowers the optimizer's ops in one run.
  DenseSet<Operation *> isOptimizer;
  for (KernelOp k : optimizer)
    isOptimizer.insert(k);
  for (Operation *op = optimizer.front(); op != optimizer.back();
       op = op->getNextNode())
    if (!isOptimizer.contains(op))
      return op->emitError("plan-zero: a kernel in the middle of @")
             << fnName << "'s optimizer (expected plan-lower's update: "
             << "ALL_REDUCE, GRAD_NORM and ADAMW kernels in one run)";
  insertBefore = optimizer.back()->getNextNode();

  // The sums of the gradients: in place, with their mesh axes.
  DenseMap<Operation *, ArrayAttr> reductionOf;
  for (KernelOp k : optimizer) {
    if (!k.is(plan::KernelId::ALL_REDUCE))
      continue;
    if (k.getInputs() != k.getOutputs() || !k.getGroup())
      return k.emitError("plan-zero: an ALL_REDUCE in @")
             << fnName << " that is not a sum of gradients in place over "
             << "mesh axes";
    for (Attribute ref : k.getOutputs())
      reductionOf[bufferOf(ref)] = *k.getGroup();
  }

  // The norm: its replicated inputs come after `split_inputs`.
  normParams = norm.getParams();
  normGroup = norm.getGroup() ? *norm.getGroup() : ArrayAttr();
  normLoc = norm.getLoc();
  if (!normParams.get("max_norm") || norm.getOutputs().size() != 2)
    return norm.emitError("plan-zero: GRAD_NORM without max_norm, or with ")
           << norm.getOutputs().size() << " results instead of 2";
  DenseSet<Operation *> replicated;
  if (auto split = normParams.getAs<IntegerAttr>("split_inputs"))
    for (Attribute ref : norm.getInputs().getValue().drop_front(split.getInt()))
      replicated.insert(bufferOf(ref));

  // Each ADAMW reads (parameter or master weights, gradient, m, v, lr,
  // step, scale) and writes (the same, m, v) or (master, m, v, parameter).
  SmallVector<BufferOp> erased;
  for (KernelOp k : adamws) {
    if (k.getInputs().size() != 7 ||
        (k.getOutputs().size() != 3 && k.getOutputs().size() != 4))
      return k.emitError("plan-zero: an ADAMW that reads ")
             << k.getInputs().size() << " buffers and writes "
             << k.getOutputs().size() << " (expected 7, and 3 or 4)";
    bool hasMaster = k.getOutputs().size() == 4;
    auto input = [&](unsigned i) { return bufferOf(k.getInputs()[i]); };
    Member member{hasMaster ? bufferOf(k.getOutputs()[3]) : input(0),
                  input(1),
                  input(2),
                  input(3),
                  input(4),
                  input(5),
                  k.getParams(),
                  k.getLoc()};
    if (!member.param || !member.grad || !member.m || !member.v)
      return k.emitError("plan-zero: no buffer for the parameter or gradient");
    ArrayAttr axes = reductionOf.lookup(member.grad);
    StringRef paramName = member.param.getName().value_or("?");
    if (!axes || !llvm::is_contained(axes.getAsValueRange<StringAttr>(), "dp"))
      return k.emitError("plan-zero: the gradient of ")
             << paramName << " is not summed over dp: ZeRO shards over the "
             << "data-parallel ranks";
    auto decay = member.params.getAs<FloatAttr>("weight_decay");
    if (!decay)
      return k.emitError("plan-zero: the ADAMW of ")
             << paramName << " has no weight_decay";
    Kind kind;
    for (StringRef a : axes.getAsValueRange<StringAttr>())
      kind.axes.push_back(a.str());
    kind.decay = decay.getValueAsDouble();
    kind.replicated = replicated.contains(member.grad);
    auto *it = llvm::find_if(kinds, [&](auto &k) { return k.first == kind; });
    if (it == kinds.end()) {
      kinds.push_back({kind, {}});
      it = std::prev(kinds.end());
    }
    it->second.push_back(member);
    moments.append({member.m, member.v});
    if (hasMaster) {
      mixed = true;
      erased.push_back(input(0));
    }
  }
  for (Attribute ref : norm.getOutputs()) {
    BufferOp result = bufferOf(ref);
    normResults.push_back({result.getType(), result.getLoc(),
                           result.getNameAttr()});
    erased.push_back(result);
  }

  // The erased buffers must have no use but the optimizer's.
  DenseSet<Operation *> gone(erased.begin(), erased.end());
  for (BufferOp m : moments)
    gone.insert(m);
  for (FuncOp fn : module.getOps<FuncOp>())
    for (KernelOp k : fn.getBody().getOps<KernelOp>())
      if (!isOptimizer.contains(k))
        for (ArrayAttr list : {k.getInputs(), k.getOutputs()})
          for (Attribute ref : list)
            if (BufferOp buffer = bufferOf(ref); buffer && gone.contains(buffer))
              return k.emitError("plan-zero: uses @")
                     << buffer.getSymName() << ", which the optimizer of @"
                     << fnName << " alone should use";
  for (KernelOp k : optimizer)
    k.erase();
  for (BufferOp buffer : erased) {
    if (std::optional<int64_t> n = numberOf(buffer.getSymName()))
      freed.push_back(*n);
    bySymbol.erase(buffer.getSymName());
    buffer.erase();
  }
  return success();
}


void ZeroUpdate::renumber() {
  // The first number of the buffers replaced (past every number when they
  // had none of plan-lower's form).
  int64_t first = 0;
  if (!freed.empty()) {
    first = *llvm::min_element(freed);
  } else {
    for (BufferOp buffer : module.getOps<BufferOp>())
      if (std::optional<int64_t> n = numberOf(buffer.getSymName()))
        first = std::max(first, *n + 1);
  }
  llvm::sort(freed);
  llvm::DenseSet<Operation *> isMade(made.begin(), made.end());
  // A buffer made after those replaced: its number less the replaced ones
  // before it, after the pass's.
  llvm::StringMap<StringAttr> renamed;
  for (BufferOp buffer : module.getOps<BufferOp>()) {
    std::optional<int64_t> n = numberOf(buffer.getSymName());
    if (isMade.contains(buffer) || !n || *n < first)
      continue;
    int64_t before = llvm::lower_bound(freed, *n) - freed.begin();
    renamed[buffer.getSymName()] = b.getStringAttr(
        "b" + std::to_string(*n - before + int64_t(made.size())));
  }
  for (auto [i, buffer] : llvm::enumerate(made))
    renamed[buffer.getSymName()] =
        b.getStringAttr("b" + std::to_string(first + int64_t(i)));

  auto rename = [&](Attribute ref) -> Attribute {
    StringAttr to = renamed.lookup(bufferName(ref));
    return to ? FlatSymbolRefAttr::get(to) : ref;
  };
  auto renameAll = [&](ArrayAttr refs) {
    return b.getArrayAttr(llvm::map_to_vector(refs, rename));
  };
  for (BufferOp buffer : module.getOps<BufferOp>()) {
    if (FlatSymbolRefAttr of = buffer.getViewOfAttr())
      buffer.setViewOfAttr(cast<FlatSymbolRefAttr>(rename(of)));
    if (FlatSymbolRefAttr of = buffer.getBlockOfAttr())
      buffer.setBlockOfAttr(cast<FlatSymbolRefAttr>(rename(of)));
  }
  for (FuncOp fn : module.getOps<FuncOp>())
    for (KernelOp k : fn.getBody().getOps<KernelOp>()) {
      k.setInputsAttr(renameAll(k.getInputs()));
      k.setOutputsAttr(renameAll(k.getOutputs()));
    }
  // Last: the names above are looked up by the old ones.
  for (BufferOp buffer : module.getOps<BufferOp>())
    if (StringAttr to = renamed.lookup(buffer.getSymName()))
      buffer.setSymNameAttr(to);
}

LogicalResult ZeroUpdate::run() {
  if (failed(takeOptimizer()))
    return failure();
  indexKernels();
  makeBuckets();
  reduceBuckets();
  BufferOp scale = clipNorm();
  DenseMap<Operation *, BufferOp> kept = gatherParameters();
  updateBuckets(scale, kept);
  renumber();
  return success();
}

namespace {

struct PlanZeroPass : public braid::plan_ir::impl::PlanZeroBase<PlanZeroPass> {
  using PlanZeroBase::PlanZeroBase;
  void runOnOperation() override;
};

void PlanZeroPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (zero < 0 || zero > 3) {
    module.emitError("plan-zero: zero = ")
        << int64_t(zero) << " is not a ZeRO stage (0: none, 1, 2 or 3)";
    return signalPassFailure();
  }
  if (bucketBytes < 1) {
    module.emitError("plan-zero: bucket-bytes = ")
        << int64_t(bucketBytes) << " must be at least 1";
    return signalPassFailure();
  }
  if (zero == 0)
    return;
  SymbolTable symbols(module);
  SmallVector<StageOp> stages = getStages(module);
  if (stages.empty()) {
    auto update = symbols.lookup<FuncOp>(kUpdateFunc);
    if (!update) {
      module.emitError("plan-zero needs the @")
          << kUpdateFunc << " function of plan-lower";
      return signalPassFailure();
    }
    // plan-lower's buffers lie before its first function.
    auto functions = module.getOps<FuncOp>();
    if (failed(ZeroUpdate(module, update,
                          symbols.lookup<FuncOp>(kZeroGradsFunc),
                          *functions.begin(), std::nullopt, zero, bucketBytes)
                   .run()))
      return signalPassFailure();
    return;
  }
  for (StageOp stage : stages) {
    std::optional<StringRef> updateName = stage.getUpdate();
    auto update =
        updateName ? symbols.lookup<FuncOp>(*updateName) : FuncOp();
    if (!update) {
      stage.emitError("plan-zero: pipeline stage ")
          << stage.getIndex() << " has no update function";
      return signalPassFailure();
    }
    std::optional<StringRef> zeroGradsName = stage.getZeroGrads();
    auto zeroGrads =
        zeroGradsName ? symbols.lookup<FuncOp>(*zeroGradsName) : FuncOp();
    // The stage's buffers lie before its first function.
    Operation *first = zeroGrads ? zeroGrads.getOperation()
                                 : symbols.lookup(stage.getForward());
    if (failed(ZeroUpdate(module, update, zeroGrads, first,
                          int64_t(stage.getIndex()), zero, bucketBytes)
                   .run()))
      return signalPassFailure();
  }
}

} // namespace
