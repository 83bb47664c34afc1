//===- PlanOverlapGradReduce.cpp - Sums started in the last backward ------===//
//
// Implements `plan-overlap-grad-reduce` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

#include <algorithm>
#include <string>

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANOVERLAPGRADREDUCE
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid::plan_ir;
namespace plan = braid::plan;

namespace {

/// Calls `touch` with each buffer `kernel` names and, for a view, with the
/// bucket it lies in (touching a view touches its bucket).
void forEachTouched(KernelOp kernel, SymbolTable &symbols,
                    llvm::function_ref<void(StringRef)> touch) {
  for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
    for (Attribute ref : list) {
      touch(bufferName(ref));
      if (auto buffer = symbols.lookup<BufferOp>(bufferName(ref)))
        if (std::optional<StringRef> parent = buffer.getViewOf())
          touch(*parent);
    }
}

/// The buffers the kernels of `fn` name, and the buckets of the views among
/// them.
llvm::DenseSet<StringRef> buffersOf(FuncOp fn, SymbolTable &symbols) {
  llvm::DenseSet<StringRef> out;
  for (KernelOp kernel : fn.getBody().getOps<KernelOp>())
    forEachTouched(kernel, symbols, [&](StringRef name) { out.insert(name); });
  return out;
}

/// The gradients of one of update's sums that move into one function: an
/// in-place all-reduce's gradient buffers, or the bucket a ZeRO-1
/// reduce-scatter reads (whose views are the gradients).
struct Moved {
  KernelOp reduce;
  SmallVector<Attribute> members;
  bool scatter() { return reduce.is(plan::KernelId::REDUCE_SCATTER); }
};

/// The sums `update` may give up: per in-place all-reduce of update (a sum
/// over a group), its whole gradient buffers that no earlier kernel of
/// update touches (nothing between the last backward and update writes a
/// gradient, so their sums may start as soon as the backward is done with
/// them). Buffers with views, views, slotted buffers and maxima stay. And
/// ZeRO-1's reduce-scatters of a bucket of gradients into the rank's block,
/// whole, when no earlier kernel of update touches either (a bucket summed
/// over tp first stays).
SmallVector<Moved> movable(ModuleOp module, FuncOp update,
                           SymbolTable &symbols) {
  llvm::DenseSet<StringRef> parents;
  for (BufferOp buffer : module.getOps<BufferOp>())
    if (std::optional<StringRef> parent = buffer.getViewOf())
      parents.insert(*parent);
  SmallVector<Moved> out;
  llvm::DenseSet<StringRef> touchedBefore;
  auto untouched = [&](ArrayAttr list) {
    return llvm::none_of(list, [&](Attribute ref) {
      return touchedBefore.contains(bufferName(ref));
    });
  };
  for (KernelOp kernel : update.getBody().getOps<KernelOp>()) {
    auto max = kernel.getParams().getAs<IntegerAttr>("max");
    bool async = bool(kernel.getParams().get("async"));
    if (kernel.is(plan::KernelId::ALL_REDUCE) && kernel.getGroup() &&
        kernel.getInputs() == kernel.getOutputs() && !async &&
        !(max && max.getInt() != 0)) {
      Moved sum{kernel, {}};
      for (Attribute ref : kernel.getInputs()) {
        auto buffer = symbols.lookup<BufferOp>(bufferName(ref));
        if (buffer && buffer.getRole() == "gradient" && !buffer.getViewOf() &&
            !buffer.getSlots() && !parents.contains(bufferName(ref)) &&
            !touchedBefore.contains(bufferName(ref)))
          sum.members.push_back(ref);
      }
      if (!sum.members.empty())
        out.push_back(std::move(sum));
    }
    if (kernel.is(plan::KernelId::REDUCE_SCATTER) && kernel.getGroup() && !async &&
        kernel.getInputs().size() == 1 && kernel.getOutputs().size() == 1 &&
        untouched(kernel.getInputs()) && untouched(kernel.getOutputs())) {
      auto bucket = symbols.lookup<BufferOp>(bufferName(kernel.getInputs()[0]));
      auto block = symbols.lookup<BufferOp>(bufferName(kernel.getOutputs()[0]));
      if (bucket && block && bucket.getRole() == "bucket" &&
          parents.contains(bucket.getSymName()) &&
          block.getRole() == "activation" && !block.getName() &&
          !block.getSlots())
        out.push_back({kernel, {kernel.getInputs()[0]}});
    }
    // A view touched (a tied embedding's gradient, to which update adds
    // the other stage's part) touches its bucket.
    forEachTouched(kernel, symbols,
                   [&](StringRef name) { touchedBefore.insert(name); });
  }
  return out;
}

/// Takes `members` out of `reduce` (erased when nothing is left).
void takeOut(KernelOp reduce, ArrayRef<Attribute> members) {
  if (reduce.is(plan::KernelId::REDUCE_SCATTER)) {
    reduce.erase();
    return;
  }
  SmallVector<Attribute> rest;
  for (Attribute ref : reduce.getInputs())
    if (!llvm::is_contained(members, ref))
      rest.push_back(ref);
  if (rest.empty()) {
    reduce.erase();
    return;
  }
  Builder b(reduce.getContext());
  reduce.setInputsAttr(b.getArrayAttr(rest));
  reduce.setOutputsAttr(b.getArrayAttr(rest));
}

/// Starts the sums of `moved` in `fn` (a copy of a function that finishes
/// their gradients): each sum's gradients in the order fn last touches
/// them, cut into buckets of at most `bucketBytes`, each an async in-place
/// ALL_REDUCE right after the last kernel touching one of its gradients;
/// a WAIT per bucket at fn's end, in the order they started. A ZeRO-1
/// reduce-scatter (its bucket is already one) starts, async, right after
/// the last kernel touching one of its bucket's views; its WAIT names the
/// bucket and the block.
void startSums(FuncOp fn, ArrayRef<Moved> moved, int64_t bucketBytes,
               SymbolTable &symbols) {
  SmallVector<KernelOp> kernels(fn.getBody().getOps<KernelOp>());
  llvm::DenseMap<StringRef, int64_t> lastTouch;
  for (auto [i, kernel] : llvm::enumerate(kernels))
    forEachTouched(kernel, symbols,
                   [&](StringRef name) { lastTouch[name] = int64_t(i); });
  auto insertAfter = [&](OpBuilder &b, int64_t at) {
    if (at < 0)
      b.setInsertionPointToStart(&fn.getBody().front());
    else
      b.setInsertionPointAfter(kernels[at]);
  };
  struct Started {
    int64_t at;
    SmallVector<Attribute> members;
    std::string done; // the WAIT's provenance
    Location loc;
  };
  SmallVector<Started> started;
  OpBuilder b(fn.getContext());
  for (Moved sum : moved) {
    KernelOp reduce = sum.reduce; // its getters are not const
    if (sum.scatter()) {
      auto it = lastTouch.find(bufferName(sum.members.front()));
      int64_t at = it == lastTouch.end() ? -1 : it->second;
      insertAfter(b, at);
      NamedAttrList params(reduce.getParams());
      params.set("async", b.getI64IntegerAttr(1));
      std::string what =
          reduce.getProvenance().value_or("zero: gradient sum").str();
      b.create<KernelOp>(
          reduce.getLoc(), reduce.getKernelAttr(), reduce.getInputsAttr(),
          reduce.getOutputsAttr(), params.getDictionary(b.getContext()),
          b.getStringAttr(what + " (started on the step's last micro-batch "
                                 "as soon as these gradients are final, "
                                 "overlapping the rest of its backward)"),
          reduce.getGroupAttr(), reduce.getRankAxisAttr());
      SmallVector<Attribute> both(reduce.getInputs().getValue());
      llvm::append_range(both, reduce.getOutputs().getValue());
      started.push_back(
          {at, std::move(both), what + ": done", reduce.getLoc()});
      continue;
    }
    struct Member {
      Attribute ref;
      int64_t at, bytes;
    };
    SmallVector<Member> members;
    for (Attribute ref : sum.members) {
      auto it = lastTouch.find(bufferName(ref));
      members.push_back({ref, it == lastTouch.end() ? -1 : it->second,
                         symbols.lookup<BufferOp>(bufferName(ref)).getBytes()});
    }
    llvm::stable_sort(
        members, [](const Member &x, const Member &y) { return x.at < y.at; });
    SmallVector<SmallVector<Member>> buckets;
    int64_t bytes = 0;
    for (const Member &m : members) {
      if (buckets.empty() || bytes + m.bytes > bucketBytes) {
        buckets.emplace_back();
        bytes = 0;
      }
      buckets.back().push_back(m);
      bytes += m.bytes;
    }
    StringRef reason = reduce.getProvenance().value_or("gradient sum");
    for (auto [k, bucket] : llvm::enumerate(buckets)) {
      int64_t at = bucket.back().at, total = 0;
      SmallVector<Attribute> refs;
      for (const Member &m : bucket) {
        refs.push_back(m.ref);
        total += m.bytes;
      }
      insertAfter(b, at);
      std::string what =
          (reason + " (bucket " + Twine(k + 1) + " of " +
           Twine(buckets.size()) + ", " + Twine(total) + " bytes)")
              .str();
      b.create<KernelOp>(
          reduce.getLoc(), plan::KernelId::ALL_REDUCE, b.getArrayAttr(refs),
          b.getArrayAttr(refs),
          b.getDictionaryAttr(b.getNamedAttr("async", b.getI64IntegerAttr(1))),
          b.getStringAttr(what + ": started on the step's last micro-batch "
                                 "as soon as these gradients are final, "
                                 "overlapping the rest of its backward"),
          reduce.getGroupAttr(), StringAttr());
      started.push_back(
          {at, std::move(refs), what + " is done", reduce.getLoc()});
    }
  }
  llvm::stable_sort(
      started, [](const Started &x, const Started &y) { return x.at < y.at; });
  b.setInsertionPointToEnd(&fn.getBody().front());
  for (const Started &s : started)
    b.create<KernelOp>(s.loc, plan::KernelId::WAIT,
                       b.getArrayAttr(s.members), b.getArrayAttr({}),
                       b.getDictionaryAttr({}), b.getStringAttr(s.done),
                       ArrayAttr(), StringAttr());
}

/// A copy of `fn` named `name`, placed right after it: the same kernels on
/// the same buffers (and, after plan-memory, the same offsets: the two never
/// run at once).
FuncOp copyOf(FuncOp fn, StringRef name) {
  OpBuilder b(fn.getContext());
  b.setInsertionPointAfter(fn);
  auto copy = cast<FuncOp>(b.clone(*fn.getOperation()));
  copy.setSymName(name);
  return copy;
}

struct PlanOverlapGradReducePass
    : public braid::plan_ir::impl::PlanOverlapGradReduceBase<
          PlanOverlapGradReducePass> {
  using PlanOverlapGradReduceBase::PlanOverlapGradReduceBase;
  void runOnOperation() override;
  /// Without a pipeline: last_micro_step.
  LogicalResult overlapSteps(ModuleOp module, SymbolTable &symbols);
  /// A pipeline stage: its chunks' last backward calls.
  LogicalResult overlapStage(ModuleOp module, StageOp stage,
                             SymbolTable &symbols);
};

LogicalResult PlanOverlapGradReducePass::overlapSteps(ModuleOp module,
                                                      SymbolTable &symbols) {
  auto micro = symbols.lookup<FuncOp>(kMicroStepFunc);
  auto update = symbols.lookup<FuncOp>(kUpdateFunc);
  if (!micro || !update)
    return success();
  if (symbols.lookup(kLastMicroStepFunc))
    return module.emitError(
               "plan-overlap-grad-reduce: the module already has @")
           << kLastMicroStepFunc;
  SmallVector<Moved> moved = movable(module, update, symbols);
  if (moved.empty())
    return success();
  FuncOp last = copyOf(micro, kLastMicroStepFunc);
  symbols.insert(last);
  startSums(last, moved, bucketBytes, symbols);
  for (const Moved &sum : moved)
    takeOut(sum.reduce, sum.members);
  return success();
}

LogicalResult PlanOverlapGradReducePass::overlapStage(ModuleOp module,
                                                      StageOp stage,
                                                      SymbolTable &symbols) {
  std::optional<StringRef> updateName = stage.getUpdate();
  std::optional<ArrayAttr> schedule = stage.getSchedule();
  if (!updateName || !schedule)
    return success();
  auto update = symbols.lookup<FuncOp>(*updateName);
  if (!update)
    return success(); // the verifier names it
  SmallVector<Moved> sums = movable(module, update, symbols);
  if (sums.empty())
    return success();
  // The backward functions of each chunk (B and W), and the index of the
  // schedule's last call of each.
  struct Finisher {
    FuncOp fn;
    int64_t lastCall = -1;
    llvm::DenseSet<StringRef> touched; // the buffers fn names
  };
  llvm::MapVector<std::pair<char, int64_t>, Finisher> finishers;
  for (auto [i, attr] : llvm::enumerate(*schedule)) {
    StringRef text = cast<StringAttr>(attr).getValue();
    FailureOr<ScheduleCall> call = parseScheduleCall(text);
    if (failed(call))
      return stage.emitOpError("schedule call \"") << text << "\" is malformed";
    if (call->kind != 'B' && call->kind != 'W')
      continue;
    if (!call->function.empty())
      return stage.emitOpError("plan-overlap-grad-reduce: schedule call \"")
             << text << "\" already names its function";
    std::optional<StringRef> name = functionOfCall(stage, *call);
    auto fn = name ? symbols.lookup<FuncOp>(*name) : FuncOp();
    if (!fn)
      return stage.emitOpError("schedule call \"")
             << text << "\" names no function of the stage";
    Finisher &f = finishers[{call->kind, call->chunk}];
    if (!f.fn) {
      f.fn = fn;
      f.touched = buffersOf(fn, symbols);
    }
    f.lastCall = int64_t(i);
  }
  // Each gradient's sum starts in the call that is the last to touch it.
  llvm::MapVector<std::pair<char, int64_t>, SmallVector<Moved>> byFinisher;
  for (const Moved &sum : sums)
    for (Attribute ref : sum.members) {
      const std::pair<char, int64_t> *best = nullptr;
      int64_t bestCall = -1;
      for (auto &[key, f] : finishers)
        if (f.lastCall > bestCall && f.touched.contains(bufferName(ref))) {
          best = &key;
          bestCall = f.lastCall;
        }
      if (!best)
        continue; // made elsewhere (another stage's contribution): stays
      SmallVector<Moved> &into = byFinisher[*best];
      if (into.empty() || into.back().reduce != sum.reduce)
        into.push_back({sum.reduce, {}});
      into.back().members.push_back(ref);
    }
  SmallVector<Attribute> calls(schedule->begin(), schedule->end());
  OpBuilder b(module.getContext());
  for (auto &[key, moved] : byFinisher) {
    Finisher &f = finishers.find(key)->second;
    std::string name = (f.fn.getSymName() + "_last").str();
    if (symbols.lookup(name))
      return stage.emitOpError("plan-overlap-grad-reduce: the module already "
                               "has @")
             << name;
    FuncOp last = copyOf(f.fn, name);
    symbols.insert(last);
    startSums(last, moved, bucketBytes, symbols);
    for (const Moved &sum : moved)
      takeOut(sum.reduce, sum.members);
    calls[f.lastCall] = b.getStringAttr(
        cast<StringAttr>(calls[f.lastCall]).getValue() + "@" + name);
  }
  stage.setScheduleAttr(b.getArrayAttr(calls));
  return success();
}

void PlanOverlapGradReducePass::runOnOperation() {
  ModuleOp module = getOperation();
  if (bucketBytes < 0) {
    module.emitError("plan-overlap-grad-reduce: bucket-bytes is ")
        << static_cast<int64_t>(bucketBytes) << ", expected 0 (off) or more";
    return signalPassFailure();
  }
  if (bucketBytes == 0)
    return;
  SymbolTable symbols(module);
  SmallVector<StageOp> stages = getStages(module);
  if (stages.empty()) {
    if (failed(overlapSteps(module, symbols)))
      return signalPassFailure();
    return;
  }
  for (StageOp stage : stages)
    if (failed(overlapStage(module, stage, symbols)))
      return signalPassFailure();
}

} // namespace
