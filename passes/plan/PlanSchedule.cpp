//===- PlanSchedule.cpp - Pipeline schedules of the stages ----------------===//
//
// Implements `plan-schedule` (see Passes.td). The orders themselves come
// from compiler/Schedule.h, which also predicts their timelines.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "compiler/Schedule.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>
#include <map>

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANSCHEDULE
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid;
using namespace braid::plan_ir;

namespace {

struct PlanSchedulePass
    : public braid::plan_ir::impl::PlanScheduleBase<PlanSchedulePass> {
  using PlanScheduleBase::PlanScheduleBase;
  void runOnOperation() override;
};

void PlanSchedulePass::runOnOperation() {
  ModuleOp module = getOperation();
  SmallVector<StageOp> stages = getStages(module);
  if (stages.empty())
    return;
  int64_t p = stages.size();
  for (auto [i, stage] : llvm::enumerate(stages))
    if (int64_t(stage.getIndex()) != int64_t(i)) {
      stage.emitOpError("stages must be numbered 0 to ")
          << p - 1 << " once each, found " << stage.getIndex();
      return signalPassFailure();
    }
  llvm::Expected<pipeline::Scheme> parsed = pipeline::parseScheme(scheme);
  if (!parsed) {
    module.emitError("plan-schedule: ") << llvm::toString(parsed.takeError());
    return signalPassFailure();
  }
  // Model chunks per rank (the interleaved schedule's virtual stages).
  int64_t v = 1;
  for (StageOp stage : stages) {
    int64_t chunks = 1 + (stage.getChunks() ? stage.getChunks()->size() : 0);
    if (stage.getIndex() > 0 && chunks != v) {
      stage.emitOpError("has ") << chunks << " model chunks but stage 0 has "
                                << v;
      return signalPassFailure();
    }
    v = chunks;
  }
  llvm::Expected<pipeline::Schedules> schedules =
      pipeline::makeSchedule(*parsed, p, microBatches, v);
  if (!schedules) {
    module.emitError("plan-schedule: ") << llvm::toString(schedules.takeError());
    return signalPassFailure();
  }
  OpBuilder b(module.getContext());
  SymbolTable symbols(module);
  module->setAttr("plan.schedule",
                  b.getStringAttr(pipeline::schemeName(*parsed)));
  for (auto [stage, steps] : llvm::zip(stages, *schedules)) {
    // Each chunk has slots of its own: a micro-batch takes the lowest free
    // slot of chunk k at its forward on chunk k and gives it back after its
    // last backward call there, so a chunk's slotted buffers have one copy
    // per micro-batch in flight on that chunk, not on the rank.
    std::map<std::pair<int64_t, int64_t>, int64_t> slotOf;
    auto call = [&](char kind, const pipeline::Step &step, int64_t slot) {
      std::string text = kind + std::to_string(step.microBatch);
      if (v > 1 && step.chunk > 0)
        text += "." + std::to_string(step.chunk);
      return b.getStringAttr(text + ":" + std::to_string(slot));
    };
    SmallVector<SmallVector<bool>> busy(v);
    SmallVector<Attribute> order;
    for (const pipeline::Step &step : steps) {
      SmallVector<bool> &pool = busy[step.chunk];
      if (step.work == pipeline::Work::Forward) {
        auto free = llvm::find(pool, false);
        int64_t slot = free - pool.begin();
        if (free == pool.end())
          pool.push_back(true);
        else
          *free = true;
        slotOf[{step.microBatch, step.chunk}] = slot;
        order.push_back(call('F', step, slot));
      } else {
        bool weight = step.work == pipeline::Work::BackwardWeight;
        bool split = weight || step.work == pipeline::Work::BackwardInput;
        if (split && !stage.getBackwardWeight()) {
          stage.emitOpError("the ")
              << scheme << " schedule splits backward work, which needs the "
              << "stage's backward_weight (plan-lower split-backward)";
          return signalPassFailure();
        }
        if (!split && stage.getBackwardWeight()) {
          stage.emitOpError("has a backward_weight, which the ")
              << scheme << " schedule does not run";
          return signalPassFailure();
        }
        int64_t slot = slotOf[{step.microBatch, step.chunk}];
        // The slot holds the micro-batch until its last backward call.
        if (weight || !split)
          pool[slot] = false;
        order.push_back(call(weight ? 'W' : 'B', step, slot));
      }
    }
    SmallVector<int64_t> pools;
    for (const SmallVector<bool> &pool : busy)
      pools.push_back(std::max<int64_t>(pool.size(), 1));
    int64_t slots = *std::max_element(pools.begin(), pools.end());
    stage.setSlotsAttr(b.getI64IntegerAttr(slots));
    if (v > 1)
      stage.setChunkSlotsAttr(b.getDenseI64ArrayAttr(pools));
    stage.setScheduleAttr(b.getArrayAttr(order));

    // A slotted buffer is the chunk's whose calls name it.
    SmallVector<SmallVector<StringRef, 3>> calls(1);
    for (std::optional<StringRef> fn :
         {std::optional<StringRef>(stage.getForward()),
          std::optional<StringRef>(stage.getBackward()),
          stage.getBackwardWeight()})
      if (fn)
        calls[0].push_back(*fn);
    if (std::optional<ArrayAttr> chunks = stage.getChunks())
      for (Attribute chunk : *chunks) {
        calls.emplace_back();
        for (NamedAttribute fn : cast<DictionaryAttr>(chunk))
          if (auto ref = dyn_cast<FlatSymbolRefAttr>(fn.getValue()))
            calls.back().push_back(ref.getValue());
      }
    llvm::DenseMap<StringRef, int64_t> chunkOf;
    for (auto [k, names] : llvm::enumerate(calls))
      for (StringRef name : names) {
        auto fn = symbols.lookup<FuncOp>(name);
        if (!fn)
          continue;
        for (KernelOp kernel : fn.getBody().getOps<KernelOp>())
          for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
            for (Attribute ref : list) {
              StringRef buffer =
                  cast<SymbolRefAttr>(ref).getRootReference().getValue();
              auto [it, inserted] = chunkOf.try_emplace(buffer, int64_t(k));
              if (inserted || it->second == int64_t(k))
                continue;
              auto op = symbols.lookup<BufferOp>(buffer);
              if (op && op.getSlots()) {
                op.emitOpError("is kept for a micro-batch by chunks ")
                    << it->second << " and " << k << " of stage "
                    << stage.getIndex()
                    << ", but each chunk has slots of its own";
                return signalPassFailure();
              }
            }
      }
    // A slotted buffer that no call names gets the stage's slots.
    for (BufferOp buffer : module.getOps<BufferOp>())
      if (buffer.getStage() == std::optional<int64_t>(stage.getIndex()) &&
          buffer.getSlots()) {
        auto it = chunkOf.find(buffer.getSymName());
        buffer.setSlotsAttr(b.getI64IntegerAttr(
            it == chunkOf.end() ? slots : pools[it->second]));
      }
  }
}

} // namespace
