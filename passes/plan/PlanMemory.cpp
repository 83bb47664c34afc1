//===- PlanMemory.cpp - Static arena offsets ------------------------------===//
//
// Implements `plan-memory` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>
#include <map>

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid::plan_ir;

namespace {

constexpr int64_t kAlign = 64;

int64_t alignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

struct PlanMemoryPass : public braid::plan_ir::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override;
};

/// Where each kernel stands in the program's order, for live ranges.
struct Order {
  DenseMap<Operation *, int64_t> position;
  /// Kernels whose buffers live from an earlier position than theirs.
  DenseMap<Operation *, int64_t> liveFrom;
};

/// The kernels of all functions in order, one position each, but for the
/// copies plan-overlap-grad-reduce and plan-overlap-param-gather make:
/// `last_micro_step` and `first_micro_step` (of `micro_step`; a first that
/// copies last_micro_step matches micro_step too, last's kernels counting as
/// added), a stage's functions that a schedule call names after
/// an `@` (of the function of the call's kind and chunk), and plan-eval's
/// copies (of the function their plan.eval_of names, each kernel at the
/// position of its plan.eval_index there). A copy runs
/// instead of its original, once, so its kernels take their original's
/// positions, and a kernel the copy adds (a collective started early, a
/// WAIT) the position of the original's kernel before it. What such a
/// kernel touches in a stage's copy lives on through the calls after the
/// copy's in the schedule (until update reads a reduce-scatter's block,
/// say), so it lives from the first position of their functions.
FailureOr<Order> orderOf(ModuleOp module) {
  SymbolTable symbols(module);
  DenseMap<Operation *, FuncOp> originalOf;
  DenseMap<Operation *, SmallVector<FuncOp>> followers;
  auto micro = symbols.lookup<FuncOp>(kMicroStepFunc);
  for (StringRef name : {kLastMicroStepFunc, kFirstMicroStepFunc})
    if (auto copy = symbols.lookup<FuncOp>(name); copy && micro)
      originalOf[copy] = micro;
  for (StageOp stage : module.getOps<StageOp>()) {
    std::optional<ArrayAttr> schedule = stage.getSchedule();
    if (!schedule)
      continue;
    SmallVector<ScheduleCall> calls;
    for (Attribute attr : *schedule) {
      FailureOr<ScheduleCall> call =
          parseScheduleCall(cast<StringAttr>(attr).getValue());
      if (failed(call))
        break; // plan-verify names it
      calls.push_back(*call);
    }
    auto fnOf = [&](const ScheduleCall &call) {
      std::optional<StringRef> name = functionOfCall(stage, call);
      return name ? symbols.lookup<FuncOp>(*name) : FuncOp();
    };
    for (auto [i, call] : llvm::enumerate(calls)) {
      if (call.function.empty())
        continue;
      ScheduleCall plain = call;
      plain.function = {};
      FuncOp copy = fnOf(call), original = fnOf(plain);
      if (!copy || !original || copy == original)
        continue;
      originalOf[copy] = original;
      for (const ScheduleCall &later : ArrayRef(calls).drop_front(i + 1))
        if (FuncOp fn = fnOf(later))
          followers[copy].push_back(fn);
    }
  }
  Order order;
  int64_t position = 0;
  DenseMap<Operation *, int64_t> start;
  // plan-eval's copies: each kernel at the position of its original
  // (plan.eval_index in plan.eval_of), after the originals have theirs.
  auto isEvalCopy = [](FuncOp fn) {
    return fn->hasAttrOfType<FlatSymbolRefAttr>("plan.eval_of");
  };
  for (FuncOp fn : module.getOps<FuncOp>()) {
    if (originalOf.count(fn) || isEvalCopy(fn))
      continue;
    start[fn] = position;
    for (KernelOp kernel : fn.getBody().getOps<KernelOp>())
      order.position[kernel] = position++;
  }
  for (FuncOp fn : module.getOps<FuncOp>()) {
    if (!isEvalCopy(fn))
      continue;
    auto original = symbols.lookup<FuncOp>(
        fn->getAttrOfType<FlatSymbolRefAttr>("plan.eval_of").getValue());
    SmallVector<KernelOp> theirs;
    if (original)
      theirs.assign(original.getBody().getOps<KernelOp>().begin(),
                    original.getBody().getOps<KernelOp>().end());
    for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
      auto index = kernel->getAttrOfType<IntegerAttr>("plan.eval_index");
      if (!index || index.getInt() < 0 ||
          index.getInt() >= int64_t(theirs.size()))
        return failure();
      order.position[kernel] = order.position.lookup(theirs[index.getInt()]);
    }
  }
  for (FuncOp fn : module.getOps<FuncOp>()) {
    auto it = originalOf.find(fn);
    if (it == originalOf.end())
      continue;
    FuncOp original = it->second;
    // A copy of a copy (not made) counts as its original's.
    if (auto again = originalOf.find(original); again != originalOf.end())
      original = again->second;
    int64_t from = INT64_MAX;
    for (FuncOp later : followers.lookup(fn)) {
      FuncOp own = originalOf.lookup(later) ? originalOf.lookup(later) : later;
      if (!own.getBody().front().empty())
        from = std::min(from, start.lookup(own));
    }
    SmallVector<KernelOp> theirs(original.getBody().getOps<KernelOp>());
    size_t next = 0;
    int64_t before = start.lookup(original);
    for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
      if (next < theirs.size() &&
          OperationEquivalence::isEquivalentTo(
              kernel, theirs[next], OperationEquivalence::IgnoreLocations)) {
        before = order.position.lookup(theirs[next++]);
        order.position[kernel] = before;
        continue;
      }
      order.position[kernel] = before;
      if (from < before)
        order.liveFrom[kernel] = from;
    }
  }
  return order;
}

/// Places the buffers of one pipeline stage (all of them without a
/// pipeline): returns the arena bytes they need.
int64_t placeStage(ModuleOp module, const Order &order,
                   MutableArrayRef<BufferOp> all) {
  llvm::StringMap<unsigned> index;
  for (auto [i, b] : llvm::enumerate(all))
    index[b.getSymName()] = i;
  // A view lives where its bucket is: its uses are the bucket's, and it is
  // placed with it.
  for (BufferOp b : all)
    if (std::optional<StringRef> parent = b.getViewOf())
      if (auto it = index.find(*parent); it != index.end())
        index[b.getSymName()] = it->second;

  // Live ranges over the kernels of all functions, in order (a stage's
  // functions name only its buffers).
  const int64_t kNever = -1;
  SmallVector<int64_t> first(all.size(), kNever), last(all.size(), kNever);
  for (FuncOp fn : module.getOps<FuncOp>())
    for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
      int64_t at = order.position.lookup(kernel);
      auto from = order.liveFrom.find(kernel);
      int64_t begin = from == order.liveFrom.end() ? at : from->second;
      for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
        for (Attribute ref : list) {
          auto it = index.find(
              cast<SymbolRefAttr>(ref).getRootReference().getValue());
          if (it == index.end())
            continue; // another stage's
          unsigned i = it->second;
          first[i] = first[i] == kNever ? begin : std::min(first[i], begin);
          last[i] = std::max(last[i], at);
        }
    }

  // Whole-program buffers first, one after the other: parameters, state,
  // inputs, named results, and what a stage keeps from a micro-batch's
  // forward to its backward (one copy per slot).
  int64_t offset = 0;
  SmallVector<unsigned> scoped;
  for (auto [i, b] : llvm::enumerate(all)) {
    if (b.getViewOf())
      continue;
    bool persistent = b.getRole() != "activation" || b.getName().has_value() ||
                      b.getSlots().has_value();
    if (persistent || first[i] == kNever) {
      b.setOffset(offset);
      offset = alignUp(offset + b.getBytes() * b.getSlots().value_or(1));
    } else {
      scoped.push_back(i);
    }
  }
  const int64_t base = offset;
  int64_t top = base;

  // The rest by first fit in order of birth; a buffer's space is free once
  // the kernel of its last use has run (not during it).
  llvm::sort(scoped, [&](unsigned a, unsigned c) { return first[a] < first[c]; });
  struct Placed {
    int64_t begin, end, last;
  };
  std::vector<Placed> live;
  for (unsigned i : scoped) {
    llvm::erase_if(live, [&](const Placed &p) { return p.last < first[i]; });
    std::sort(live.begin(), live.end(),
              [](const Placed &a, const Placed &c) { return a.begin < c.begin; });
    int64_t size = alignUp(all[i].getBytes());
    int64_t at = base;
    for (const Placed &p : live) {
      if (p.begin - at >= size)
        break;
      at = std::max(at, p.end);
    }
    all[i].setOffset(at);
    live.push_back({at, at + size, last[i]});
    top = std::max(top, at + size);
  }
  for (BufferOp b : all)
    if (std::optional<StringRef> parent = b.getViewOf())
      b.setOffset(*all[index[*parent]].getOffset() + *b.getViewOffset());
  return top;
}

void PlanMemoryPass::runOnOperation() {
  ModuleOp module = getOperation();
  // Each view lies inside a bucket of its stage.
  SymbolTable symbols(module);
  for (BufferOp b : module.getOps<BufferOp>()) {
    std::optional<StringRef> parent = b.getViewOf();
    if (!parent)
      continue;
    auto bucket = symbols.lookup<BufferOp>(*parent);
    if (!bucket ||
        (bucket.getRole() != "bucket" && bucket.getRole() != "activation") ||
        bucket.getStage() != b.getStage() ||
        int64_t(*b.getViewOffset() + b.getBytes()) >
            int64_t(bucket.getBytes())) {
      b.emitOpError("is a view of @")
          << *parent
          << ", which is not a bucket (or temporary) of its stage it fits in";
      return signalPassFailure();
    }
  }
  // Each pipeline stage's buffers live on its own ranks: one arena each,
  // the plan's the largest.
  std::map<int64_t, SmallVector<BufferOp>> byStage;
  for (BufferOp b : module.getOps<BufferOp>())
    byStage[b.getStage().value_or(0)].push_back(b);
  int64_t arena = 0;
  OpBuilder b(module.getContext());
  std::map<int64_t, int64_t> stageArena;
  FailureOr<Order> order = orderOf(module);
  if (failed(order)) {
    module.emitError("plan-memory: a kernel of a plan-eval copy has no "
                     "plan.eval_index of a kernel of its plan.eval_of");
    return signalPassFailure();
  }
  for (auto &[stage, buffers] : byStage) {
    stageArena[stage] = placeStage(module, *order, buffers);
    arena = std::max(arena, stageArena[stage]);
  }
  // Each pipeline stage's own arena, for the report.
  for (StageOp stage : module.getOps<StageOp>())
    stage->setAttr("plan.arena_bytes",
                   b.getI64IntegerAttr(stageArena[stage.getIndex()]));
  module->setAttr("plan.arena_bytes",
                  OpBuilder(module.getContext()).getI64IntegerAttr(arena));
}

} // namespace
