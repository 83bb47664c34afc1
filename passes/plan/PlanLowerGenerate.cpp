//===- PlanLowerGenerate.cpp - Inference graphs to prefill and decode -----===//
//
// The part of `plan-lower` (see Passes.td) for an inference graph
// (frontends/ModelBuilder.h, buildGenerateModule): one model function whose
// ops each carry the plan function they run in (model.phase). Both
// functions read the parameters and extend the same caches, so the caches
// are buffers of their own role, kept between calls like the parameters,
// and ATTENTION_CACHED writes them in place. Nothing else is shared: each
// function has its own activations, which plan-memory may overlap since
// the two never run at once.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Lowering.h"

using namespace mlir;
using namespace braid;
using namespace braid::plan_ir;
using namespace braid::plan_ir::lowering;

LogicalResult Lowering::runGenerate() {
  b.setInsertionPointToEnd(module.getBody());
  FuncOp prefill = newFunc(kPrefillFunc);
  FuncOp decode = newFunc(kDecodeFunc);
  FuncOp reorder = newFunc(kReorderFunc);
  // Scoring (a graph built with it): the log-probabilities of given tokens.
  FuncOp score;
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator())
    if (auto phase = op.getAttrOfType<StringAttr>(
            model::ModelDialect::kPhaseAttrName);
        phase && phase.getValue() == kScoreFunc) {
      score = newFunc(kScoreFunc);
      break;
    }
  firstFunc = prefill;
  for (BlockArgument arg : func.getArguments())
    if (failed(argBuffer(arg)))
      return failure();
  Block &entry = func.getBody().front();
  for (Operation &op : entry.without_terminator()) {
    auto phase = op.getAttrOfType<StringAttr>(model::ModelDialect::kPhaseAttrName);
    // A collective model-shard inserted runs where the value it reduces or
    // gathers is made.
    if (!phase && isa<model::AllReduceOp, model::AllGatherOp>(op))
      if (Operation *def = op.getOperand(0).getDefiningOp()) {
        phase = def->getAttrOfType<StringAttr>(
            model::ModelDialect::kPhaseAttrName);
        if (phase)
          op.setAttr(model::ModelDialect::kPhaseAttrName, phase);
      }
    if (!phase ||
        !llvm::is_contained({kPrefillFunc, kDecodeFunc, kReorderFunc,
                             kScoreFunc},
                            phase.getValue()))
      return op.emitOpError("of an inference graph must have ")
             << model::ModelDialect::kPhaseAttrName << " \"" << kPrefillFunc
             << "\", \"" << kDecodeFunc << "\", \"" << kReorderFunc << "\" or \""
             << kScoreFunc << "\"";
    FuncOp fn = phase.getValue() == kPrefillFunc  ? prefill
                : phase.getValue() == kDecodeFunc ? decode
                : phase.getValue() == kScoreFunc  ? score
                                                  : reorder;
    b.setInsertionPointToEnd(&fn.getBody().front());
    if (failed(lowerOp(&op, phase.getValue())))
      return failure();
  }
  // The results the host reads: named as the graph names them.
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto name = func.getResultAttrOfType<StringAttr>(
        i, model::ModelDialect::kResultAttrName);
    BufferOp buffer = buffers.lookup(v);
    if (!name || !buffer)
      return ret.emitError("result ")
             << i << " of an inference graph must be a computed value with "
             << model::ModelDialect::kResultAttrName;
    // A cache updated in place is already named.
    if (buffer.getRole() == "activation")
      buffer.setName(name.getValue());
  }
  func.erase();
  return success();
}
