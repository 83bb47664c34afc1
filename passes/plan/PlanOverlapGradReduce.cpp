//===- PlanOverlapGradReduce.cpp - Sums started in the last backward ------===//
//
// Implements `plan-overlap-grad-reduce` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <string>

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANOVERLAPGRADREDUCE
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid::plan_ir;

namespace {

StringRef nameOf(Attribute ref) {
  return cast<SymbolRefAttr>(ref).getRootReference().getValue();
}

/// Whether `kernel` names the buffer `name` among its inputs or outputs.
bool touches(KernelOp kernel, StringRef name) {
  for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
    for (Attribute ref : list)
      if (nameOf(ref) == name)
        return true;
  return false;
}

struct PlanOverlapGradReducePass
    : public braid::plan_ir::impl::PlanOverlapGradReduceBase<
          PlanOverlapGradReducePass> {
  using PlanOverlapGradReduceBase::PlanOverlapGradReduceBase;
  void runOnOperation() override;
};

void PlanOverlapGradReducePass::runOnOperation() {
  ModuleOp module = getOperation();
  if (bucketBytes < 0) {
    module.emitError("plan-overlap-grad-reduce: bucket-bytes is ")
        << static_cast<int64_t>(bucketBytes) << ", expected 0 (off) or more";
    return signalPassFailure();
  }
  SymbolTable symbols(module);
  auto micro = symbols.lookup<FuncOp>(kMicroStepFunc);
  auto update = symbols.lookup<FuncOp>(kUpdateFunc);
  // Pipelined plans (stage functions) and plans without an update are left
  // as they are, and so is every plan with the overlap off.
  if (bucketBytes == 0 || !micro || !update)
    return;
  if (symbols.lookup(kLastMicroStepFunc)) {
    module.emitError("plan-overlap-grad-reduce: the module already has @")
        << kLastMicroStepFunc;
    return signalPassFailure();
  }

  // The sums to move: in-place all-reduces of whole gradient buffers that
  // update runs before anything else of it touches those buffers. Nothing
  // between the last micro-batch and update writes a gradient, so the sum
  // may start as soon as the last micro-batch's last write of it is done.
  SmallVector<KernelOp> reductions;
  SmallVector<KernelOp> before;
  for (KernelOp kernel : update.getBody().getOps<KernelOp>()) {
    auto eligible = [&] {
      if (kernel.getKernel() != "ALL_REDUCE" || !kernel.getGroup() ||
          kernel.getInputs() != kernel.getOutputs() ||
          kernel.getParams().get("async"))
        return false;
      if (auto max = kernel.getParams().getAs<IntegerAttr>("max");
          max && max.getInt() != 0)
        return false;
      for (Attribute ref : kernel.getInputs()) {
        auto buffer = symbols.lookup<BufferOp>(nameOf(ref));
        if (!buffer || buffer.getRole() != "gradient" || buffer.getViewOf() ||
            buffer.getSlots())
          return false;
        for (KernelOp earlier : before)
          if (touches(earlier, nameOf(ref)))
            return false;
      }
      return true;
    };
    if (eligible())
      reductions.push_back(kernel);
    before.push_back(kernel);
  }
  if (reductions.empty())
    return;
  // A buffer that is another's bucket (a view's parent) stays where it is.
  for (BufferOp buffer : module.getOps<BufferOp>())
    if (std::optional<StringRef> parent = buffer.getViewOf())
      llvm::erase_if(reductions, [&](KernelOp r) {
        return llvm::any_of(r.getInputs(), [&](Attribute ref) {
          return nameOf(ref) == *parent;
        });
      });
  if (reductions.empty())
    return;

  // The last micro-batch's function: micro_step's kernels over the same
  // buffers (and, after plan-memory, the same offsets: the two never run
  // at once), placed right after it.
  OpBuilder b(module.getContext());
  b.setInsertionPointAfter(micro);
  auto last = cast<FuncOp>(b.clone(*micro.getOperation()));
  last.setSymName(kLastMicroStepFunc);
  SmallVector<KernelOp> kernels(last.getBody().getOps<KernelOp>());
  // The position of the last kernel touching each buffer (-1: none).
  llvm::DenseMap<StringRef, int64_t> lastTouch;
  for (auto [i, kernel] : llvm::enumerate(kernels))
    for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
      for (Attribute ref : list)
        lastTouch[nameOf(ref)] = int64_t(i);

  struct Started {
    int64_t at;
    SmallVector<Attribute> members;
    std::string what;
    Location loc;
  };
  SmallVector<Started> started;
  for (KernelOp reduce : reductions) {
    // The gradients in the order they become final, cut into buckets of at
    // most bucketBytes (a larger gradient is a bucket of its own).
    struct Member {
      Attribute ref;
      int64_t at, bytes;
    };
    SmallVector<Member> members;
    for (Attribute ref : reduce.getInputs()) {
      auto it = lastTouch.find(nameOf(ref));
      members.push_back({ref, it == lastTouch.end() ? -1 : it->second,
                         symbols.lookup<BufferOp>(nameOf(ref)).getBytes()});
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
      if (at < 0)
        b.setInsertionPointToStart(&last.getBody().front());
      else
        b.setInsertionPointAfter(kernels[at]);
      std::string what =
          (reason + " (bucket " + Twine(k + 1) + " of " +
           Twine(buckets.size()) + ", " + Twine(total) + " bytes)")
              .str();
      b.create<KernelOp>(
          reduce.getLoc(), b.getStringAttr("ALL_REDUCE"), b.getArrayAttr(refs),
          b.getArrayAttr(refs),
          b.getDictionaryAttr(b.getNamedAttr("async", b.getI64IntegerAttr(1))),
          b.getStringAttr(what + ": started on the step's last micro-batch "
                                 "as soon as these gradients are final, "
                                 "overlapping the rest of its backward"),
          reduce.getGroupAttr(), StringAttr());
      started.push_back(
          {at, std::move(refs), std::move(what), reduce.getLoc()});
    }
    reduce.erase();
  }
  // Finished at the function's end, in the order they started.
  llvm::stable_sort(
      started, [](const Started &x, const Started &y) { return x.at < y.at; });
  b.setInsertionPointToEnd(&last.getBody().front());
  for (const Started &s : started)
    b.create<KernelOp>(
        s.loc, b.getStringAttr("WAIT"), b.getArrayAttr(s.members),
        b.getArrayAttr({}), b.getDictionaryAttr({}),
        b.getStringAttr(s.what + " is done"), ArrayAttr(), StringAttr());
  if (update.getBody().front().empty())
    update.erase();
}

} // namespace
