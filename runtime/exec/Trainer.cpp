//===- Trainer.cpp - The step loop of braid-run ---------------------------===//
//
// Train (Trainer.h): its phases, each in a file of its own, run in order on
// the state they share (TrainerInternal.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Trainer.h"

#include "runtime/exec/TrainerInternal.h"

namespace braid::exec {

absl::Status Train(const plan::Plan &plan, const TrainerOptions &options,
                   std::vector<StepRecord> *records) {
  trainer::TrainingRun run(plan, options);
  // The options checked, the trace and profile files opened, the backend.
  if (absl::Status s = trainer::SetUpRun(run); !s.ok())
    return s;
  // Loaded (--load, --init-from) or seeded; then the master weights.
  if (absl::Status s = trainer::InitialiseWeights(run); !s.ok())
    return s;
  // The data, the save root, the schedule, the buffers, metrics and trace.
  if (absl::Status s = trainer::PrepareSteps(run); !s.ok())
    return s;
  if (absl::Status s = trainer::RunSteps(run, records); !s.ok())
    return s;
  // The trace, --save-params, and the reports of time, memory and kernels.
  return trainer::FinishRun(run);
}

} // namespace braid::exec
