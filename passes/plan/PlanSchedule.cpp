//===- PlanSchedule.cpp - Pipeline schedules of the stages ----------------===//
//
// Implements `plan-schedule` (see Passes.td). The orders themselves come
// from compiler/Schedule.h, which also predicts their timelines.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "compiler/Schedule.h"

#include "mlir/IR/Builders.h"

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
    if (stage.getIndex() != int64_t(i)) {
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
  module->setAttr("plan.schedule",
                  b.getStringAttr(pipeline::schemeName(*parsed)));
  for (auto [stage, steps] : llvm::zip(stages, *schedules)) {
    // A micro-batch takes the lowest free slot at its forward and gives it
    // back after its backward.
    // Slots are the rank's, whichever chunk a micro-batch is in.
    std::map<std::pair<int64_t, int64_t>, int64_t> slotOf;
    auto call = [&](char kind, const pipeline::Step &step, int64_t slot) {
      std::string text = kind + std::to_string(step.microBatch);
      if (v > 1 && step.chunk > 0)
        text += "." + std::to_string(step.chunk);
      return b.getStringAttr(text + ":" + std::to_string(slot));
    };
    SmallVector<bool> busy;
    SmallVector<Attribute> order;
    for (const pipeline::Step &step : steps) {
      if (step.work == pipeline::Work::Forward) {
        auto free = llvm::find(busy, false);
        int64_t slot = free - busy.begin();
        if (free == busy.end())
          busy.push_back(true);
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
          busy[slot] = false;
        order.push_back(call(weight ? 'W' : 'B', step, slot));
      }
    }
    int64_t slots = std::max<int64_t>(busy.size(), 1);
    stage.setSlotsAttr(b.getI64IntegerAttr(slots));
    stage.setScheduleAttr(b.getArrayAttr(order));
    for (BufferOp buffer : module.getOps<BufferOp>())
      if (buffer.getStage() == std::optional<int64_t>(stage.getIndex()) &&
          buffer.getSlots())
        buffer.setSlotsAttr(b.getI64IntegerAttr(slots));
  }
}

} // namespace
