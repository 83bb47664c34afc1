//===- PlanOverlapParamGather.cpp - Gathers in the next forward -----------===//
//
// Implements `plan-overlap-param-gather` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANOVERLAPPARAMGATHER
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid::plan_ir;
namespace plan = braid::plan;

namespace {

struct PlanOverlapParamGatherPass
    : public braid::plan_ir::impl::PlanOverlapParamGatherBase<
          PlanOverlapParamGatherPass> {
  using PlanOverlapParamGatherBase::PlanOverlapParamGatherBase;
  void runOnOperation() override;
};

void PlanOverlapParamGatherPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (microBatches < 0) {
    module.emitError("plan-overlap-param-gather: micro-batches is ")
        << static_cast<int64_t>(microBatches)
        << ", expected 1 or more (0: unknown)";
    return signalPassFailure();
  }
  if (!enabled || microBatches == 0 || !getStages(module).empty())
    return;
  SymbolTable symbols(module);
  auto micro = symbols.lookup<FuncOp>(kMicroStepFunc);
  auto update = symbols.lookup<FuncOp>(kUpdateFunc);
  if (!micro || !update)
    return;
  for (StringRef name : {kFirstMicroStepFunc, kGatherParamsFunc})
    if (symbols.lookup(name)) {
      module.emitError("plan-overlap-param-gather: the module already has @")
          << name;
      return signalPassFailure();
    }
  // Each bucket's views that are parameters.
  llvm::DenseMap<StringRef, SmallVector<StringRef>> paramViews;
  llvm::DenseMap<StringRef, StringRef> bucketOf;
  for (BufferOp buffer : module.getOps<BufferOp>())
    if (std::optional<StringRef> parent = buffer.getViewOf()) {
      bucketOf[buffer.getSymName()] = *parent;
      if (buffer.getRole() == "parameter")
        paramViews[*parent].push_back(buffer.getSymName());
    }
  // The gathers update may give up: in place, over a group, of a bucket of
  // parameters that no later kernel of update touches (through a view or
  // itself).
  SmallVector<KernelOp> gathers;
  llvm::DenseSet<StringRef> touchedAfter;
  SmallVector<KernelOp> kernels(update.getBody().getOps<KernelOp>());
  for (KernelOp kernel : llvm::reverse(kernels)) {
    bool async = bool(kernel.getParams().get("async"));
    if (kernel.is(plan::KernelId::ALL_GATHER) && kernel.getGroup() && !async &&
        kernel.getInputs().size() == 1 &&
        kernel.getInputs() == kernel.getOutputs()) {
      StringRef flat = bufferName(kernel.getInputs()[0]);
      auto bucket = symbols.lookup<BufferOp>(flat);
      if (bucket && bucket.getRole() == "bucket" && paramViews.count(flat) &&
          !touchedAfter.contains(flat))
        gathers.insert(gathers.begin(), kernel);
    }
    for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
      for (Attribute ref : list) {
        touchedAfter.insert(bufferName(ref));
        if (auto it = bucketOf.find(bufferName(ref)); it != bucketOf.end())
          touchedAfter.insert(it->second);
      }
  }
  if (gathers.empty())
    return;

  // The first micro-batch's function, copied.
  auto last = symbols.lookup<FuncOp>(kLastMicroStepFunc);
  FuncOp source = microBatches == 1 && last ? last : micro;
  OpBuilder b(module.getContext());
  b.setInsertionPointAfter(source);
  auto first = cast<FuncOp>(b.clone(*source.getOperation()));
  first.setSymName(kFirstMicroStepFunc);
  symbols.insert(first);

  // Each gather's first use there.
  SmallVector<KernelOp> body(first.getBody().getOps<KernelOp>());
  auto firstUse = [&](StringRef flat) -> KernelOp {
    for (KernelOp kernel : body)
      for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
        for (Attribute ref : list) {
          StringRef name = bufferName(ref);
          if (name == flat || bucketOf.lookup(name) == flat)
            return kernel;
        }
    return KernelOp();
  };
  struct Moved {
    KernelOp gather, use;
    int64_t at;
  };
  SmallVector<Moved> moved;
  llvm::DenseMap<Operation *, int64_t> index;
  for (auto [i, kernel] : llvm::enumerate(body))
    index[kernel] = int64_t(i);
  for (KernelOp gather : gathers) {
    KernelOp use = firstUse(bufferName(gather.getInputs()[0]));
    moved.push_back({gather, use, use ? index[use] : int64_t(body.size())});
  }
  llvm::stable_sort(moved,
                    [](const Moved &x, const Moved &y) { return x.at < y.at; });

  // gather_params: the gathers at once, after update.
  b.setInsertionPointAfter(update);
  auto gatherAll = b.create<FuncOp>(update.getLoc(), kGatherParamsFunc);
  gatherAll.getBody().emplaceBlock();
  symbols.insert(gatherAll);

  OpBuilder at(module.getContext());
  at.setInsertionPointToStart(&first.getBody().front());
  for (Moved &m : moved) {
    KernelOp g = m.gather;
    StringRef why = g.getProvenance().value_or("zero: the parameters");
    NamedAttrList params(g.getParams());
    params.set("async", at.getI64IntegerAttr(1));
    at.create<KernelOp>(
        g.getLoc(), g.getKernelAttr(), g.getInputsAttr(), g.getOutputsAttr(),
        params.getDictionary(module.getContext()),
        at.getStringAttr(why + " (started at the step's first micro-batch, "
                               "overlapping the forward before their first "
                               "use)"),
        g.getGroupAttr(), g.getRankAxisAttr());
  }
  for (Moved &m : moved) {
    OpBuilder wait(module.getContext());
    if (m.use)
      wait.setInsertionPoint(m.use);
    else
      wait.setInsertionPointToEnd(&first.getBody().front());
    StringRef why = m.gather.getProvenance().value_or("zero: the parameters");
    wait.create<KernelOp>(
        m.gather.getLoc(), plan::KernelId::WAIT, m.gather.getInputsAttr(),
        wait.getArrayAttr({}), wait.getDictionaryAttr({}),
        wait.getStringAttr(why + ": gathered"), ArrayAttr(), StringAttr());
  }
  OpBuilder into(module.getContext());
  into.setInsertionPointToEnd(&gatherAll.getBody().front());
  for (KernelOp g : gathers) {
    into.clone(*g.getOperation());
    g.erase();
  }
}

} // namespace
