//===- PlanEval.cpp - The forward-only functions of evaluation -----------===//
//
// Implements `plan-eval` (see Passes.td): each function that runs a
// micro-batch's forward (micro_step without a pipeline, each stage's and
// chunk's forward with one) gets a copy that computes only what the loss
// and the stage's sends need, with dropout a copy of its input.
//
// The copy is the backward slice of those roots over the function's
// kernels, in their order: walking back from the end, a kernel is kept when
// it writes a buffer still needed (a write that does not add into its
// output ends the need), and what it reads becomes needed. A WAIT is kept
// for the kept asynchronous kernels it finishes, naming only their buffers.
// Each kept kernel records its original's index (`plan.eval_index`), the
// function its original (`plan.eval_of`): plan-memory gives it the
// original's position, so the copy changes no buffer's live range and no
// offset, and the arena the step needs is the arena evaluation needs.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANEVAL
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid::plan_ir;
namespace plan = braid::plan;

namespace {

struct PlanEvalPass : public braid::plan_ir::impl::PlanEvalBase<PlanEvalPass> {
  void runOnOperation() override;
};

StringRef bufferName(Attribute ref) {
  return cast<SymbolRefAttr>(ref).getRootReference().getValue();
}

/// Whether `kernel`'s output `i` adds into what the buffer holds.
bool accumulates(KernelOp kernel, unsigned i) {
  const plan::KernelRow *row = kernel.getKernelRow();
  return row && row->accumulates(int(i));
}

bool isAsync(KernelOp kernel) {
  auto async = kernel.getParams().getAs<IntegerAttr>("async");
  return async && async.getInt() != 0;
}

/// Makes @`name`, the forward-only copy of `fn` (see the file comment):
/// `lossBuffers` are the buffers whose final values it must compute; every
/// SEND is kept too. `viewOf` maps each view to its bucket. Fails, with an error on `fn`, when the copy would
/// compute nothing.
FailureOr<FuncOp> makeEvalCopy(FuncOp fn, StringRef name,
                               const llvm::DenseSet<StringRef> &lossBuffers,
                               const llvm::DenseMap<StringRef, StringRef> &viewOf,
                               SymbolTable &symbols) {
  SmallVector<KernelOp> body(fn.getBody().getOps<KernelOp>());
  SmallVector<bool> keep(body.size(), false);
  // Needs are tracked per whole buffer: a view (ZeRO's parameters in their
  // bucket) stands for its bucket, and a write to a view does not end the
  // need of the bucket's other views.
  auto whole = [&](Attribute ref) {
    StringRef n = bufferName(ref);
    return viewOf.lookup(n).empty() ? n : viewOf.lookup(n);
  };
  auto isView = [&](Attribute ref) {
    return !viewOf.lookup(bufferName(ref)).empty();
  };
  llvm::DenseSet<StringRef> needed(lossBuffers.begin(), lossBuffers.end());
  for (int64_t i = int64_t(body.size()) - 1; i >= 0; --i) {
    KernelOp kernel = body[i];
    if (kernel.is(plan::KernelId::WAIT))
      continue; // kept below, with what it finishes
    bool kept = kernel.is(plan::KernelId::SEND);
    for (Attribute ref : kernel.getOutputs())
      kept |= needed.contains(whole(ref));
    if (!kept)
      continue;
    keep[i] = true;
    for (auto [o, ref] : llvm::enumerate(kernel.getOutputs()))
      if (!accumulates(kernel, unsigned(o)) && !isView(ref))
        needed.erase(whole(ref));
    for (Attribute ref : kernel.getInputs())
      needed.insert(whole(ref));
    for (auto [o, ref] : llvm::enumerate(kernel.getOutputs()))
      if (accumulates(kernel, unsigned(o)) || isView(ref))
        needed.insert(whole(ref));
  }
  // The buffers of the kept kernels still in flight, by the WAITs after
  // them.
  llvm::DenseSet<StringRef> inFlight;
  SmallVector<SmallVector<Attribute>> waitInputs(body.size());
  for (auto [i, kernel] : llvm::enumerate(body)) {
    if (keep[i] && isAsync(kernel)) {
      for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
        for (Attribute ref : list)
          inFlight.insert(whole(ref));
      continue;
    }
    if (!kernel.is(plan::KernelId::WAIT))
      continue;
    for (Attribute ref : kernel.getInputs())
      if (inFlight.contains(whole(ref)))
        waitInputs[i].push_back(ref);
    for (Attribute ref : waitInputs[i])
      inFlight.erase(whole(ref));
    keep[i] = !waitInputs[i].empty();
  }
  if (!llvm::is_contained(keep, true))
    return fn.emitError("plan-eval: @")
           << fn.getSymName()
           << " computes neither the loss nor a send: nothing to evaluate";

  OpBuilder b(fn);
  b.setInsertionPointAfter(fn);
  auto copy = b.create<FuncOp>(fn.getLoc(), name);
  copy.getBody().emplaceBlock();
  copy->setAttr("plan.eval_of", FlatSymbolRefAttr::get(fn.getSymNameAttr()));
  symbols.insert(copy);
  OpBuilder into(copy.getContext());
  into.setInsertionPointToEnd(&copy.getBody().front());
  for (auto [i, kernel] : llvm::enumerate(body)) {
    if (!keep[i])
      continue;
    Operation *made;
    if (kernel.is(plan::KernelId::DROPOUT)) {
      // Evaluation runs without dropout: the output is the input.
      made = into.create<KernelOp>(
          kernel.getLoc(), plan::KernelId::COPY, kernel.getInputsAttr(),
          kernel.getOutputsAttr(), into.getDictionaryAttr({}),
          into.getStringAttr(kernel.getProvenance().value_or("model.dropout") +
                             " (evaluation: no dropout)"),
          ArrayAttr(), StringAttr());
    } else if (kernel.is(plan::KernelId::WAIT)) {
      auto wait = cast<KernelOp>(into.clone(*kernel.getOperation()));
      wait.setInputsAttr(into.getArrayAttr(waitInputs[i]));
      made = wait;
    } else {
      made = into.clone(*kernel.getOperation());
    }
    made->setAttr("plan.eval_index", into.getI64IntegerAttr(int64_t(i)));
  }
  return copy;
}

/// The buffers named "loss" of pipeline stage `stage` (-1: of every stage).
llvm::DenseSet<StringRef> lossBuffers(ModuleOp module, int64_t stage) {
  llvm::DenseSet<StringRef> out;
  for (BufferOp b : module.getOps<BufferOp>())
    if (b.getName() == "loss" &&
        (stage < 0 || int64_t(b.getStage().value_or(0)) == stage))
      out.insert(b.getSymName());
  return out;
}

} // namespace

void PlanEvalPass::runOnOperation() {
  ModuleOp module = getOperation();
  SymbolTable symbols(module);
  llvm::DenseMap<StringRef, StringRef> viewOf;
  for (BufferOp b : module.getOps<BufferOp>())
    if (std::optional<StringRef> parent = b.getViewOf())
      viewOf[b.getSymName()] = *parent;
  auto fail = [&](StringRef name) {
    module.emitError("plan-eval: the module already has @") << name;
    signalPassFailure();
  };
  SmallVector<StageOp> stages = getStages(module);
  if (stages.empty()) {
    auto micro = symbols.lookup<FuncOp>(kMicroStepFunc);
    if (!micro)
      return;
    if (symbols.lookup(kEvalStepFunc))
      return fail(kEvalStepFunc);
    llvm::DenseSet<StringRef> loss = lossBuffers(module, -1);
    if (loss.empty()) {
      micro.emitError("plan-eval: the plan has no buffer named \"loss\"");
      return signalPassFailure();
    }
    if (failed(makeEvalCopy(micro, kEvalStepFunc, loss, viewOf, symbols)))
      return signalPassFailure();
    return;
  }
  for (StageOp stage : stages) {
    llvm::DenseSet<StringRef> loss = lossBuffers(module, stage.getIndex());
    auto copyOf = [&](StringRef forward) -> FailureOr<FlatSymbolRefAttr> {
      std::string name = (forward + "_eval").str();
      if (symbols.lookup(name)) {
        fail(name);
        return failure();
      }
      auto fn = symbols.lookup<FuncOp>(forward);
      if (!fn) {
        stage.emitOpError("plan-eval: names @") << forward << ", not a plan.func";
        return failure();
      }
      FailureOr<FuncOp> copy = makeEvalCopy(fn, name, loss, viewOf, symbols);
      if (failed(copy))
        return failure();
      return FlatSymbolRefAttr::get(copy->getSymNameAttr());
    };
    FailureOr<FlatSymbolRefAttr> own = copyOf(stage.getForward());
    if (failed(own))
      return signalPassFailure();
    stage.setEvalForwardAttr(*own);
    std::optional<ArrayAttr> chunks = stage.getChunks();
    if (!chunks)
      continue;
    SmallVector<Attribute> withEval;
    for (Attribute chunk : *chunks) {
      auto fns = cast<DictionaryAttr>(chunk);
      auto forward = fns.getAs<FlatSymbolRefAttr>("forward");
      if (!forward) {
        stage.emitOpError("plan-eval: a chunk has no forward function");
        return signalPassFailure();
      }
      FailureOr<FlatSymbolRefAttr> eval = copyOf(forward.getValue());
      if (failed(eval))
        return signalPassFailure();
      NamedAttrList list(fns);
      list.set("eval_forward", *eval);
      withEval.push_back(list.getDictionary(module.getContext()));
    }
    stage.setChunksAttr(ArrayAttr::get(module.getContext(), withEval));
  }
}
