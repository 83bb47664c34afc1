//===- ScheduleView.h - A plan's schedule as an HTML page -------*- C++ -*-===//
//
// `braid view`: the optimizer step of a plan drawn as one swimlane per
// pipeline stage (the ranks whose pp coordinate is the stage's index run the
// same program, so they share a lane), along the time that
// pipeline::simulate (compiler/Schedule.h) predicts for the plan's own
// schedule. Each stage's forward and backward cost what its functions
// compute: the matrix-product FLOPs of their LINEAR, LINEAR_GRAD_* and
// ATTENTION* instructions (or, when some function has none, the number of
// instructions). The page is self-contained: inline SVG and CSS, no scripts,
// nothing fetched from the network.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_SCHEDULEVIEW_H
#define BRAID_COMPILER_SCHEDULEVIEW_H

#include "runtime/plan/plan.pb.h"

#include "llvm/Support/Error.h"

#include <string>

namespace braid {

struct ScheduleViewOptions {
  /// Names the plan in the page's title (its path); may be empty.
  std::string source;
};

/// The FLOPs of `inst` when they are matrix products (kernels flagged
/// kMatrixProducts in runtime/plan/Kernels.def: LINEAR and its gradients,
/// ATTENTION and its gradient), as the work counter counts them
/// (plan::InstructionWork, docs/report.md "One FLOP convention"). 0 for
/// every other kernel, and for operands the plan does not have.
double matmulFlops(const plan::Plan &plan, const plan::Instruction &inst);

/// The page for `plan`, which ValidatePlan accepts. Fails, naming what it
/// found, when the plan has neither a pipeline nor step functions, names a
/// function it does not have, or its schedule cannot be simulated.
llvm::Expected<std::string>
renderScheduleView(const plan::Plan &plan,
                   const ScheduleViewOptions &options = {});

} // namespace braid

#endif // BRAID_COMPILER_SCHEDULEVIEW_H
