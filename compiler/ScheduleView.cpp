//===- ScheduleView.cpp - A plan's schedule as an HTML page ---------------===//
//
// The page is built in three steps: read the lanes off the plan (each
// stage's functions, what they cost and which messages and collectives they
// hold), simulate the plan's own schedule with those costs
// (ScheduleViewReader.cpp), then draw the timeline at a fixed number of
// pixels per time unit, chosen so that the shortest block stays wide enough
// to carry its micro-batch number (ScheduleViewWriter.cpp).
//
//===----------------------------------------------------------------------===//

#include "compiler/ScheduleView.h"
#include "compiler/ScheduleViewInternal.h"

#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/Work.h"

using namespace braid;
namespace bp = braid::plan;

double braid::matmulFlops(const bp::Plan &plan, const bp::Instruction &inst) {
  if (!bp::HasMatrixProducts(inst.kernel()))
    return 0.0;
  for (const auto *ids : {&inst.inputs(), &inst.outputs()})
    for (int32_t id : *ids)
      if (id < 0 || id >= plan.buffers_size())
        return 0.0;
  return bp::InstructionWork(plan, inst).flops;
}

llvm::Expected<std::string>
braid::renderScheduleView(const bp::Plan &plan,
                          const ScheduleViewOptions &options) {
  llvm::Expected<scheduleview::View> view = scheduleview::readView(plan);
  if (!view)
    return view.takeError();
  return scheduleview::writePage(plan, *view, options);
}
