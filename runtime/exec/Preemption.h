//===- Preemption.h - Stopping a run early, with a checkpoint --*- C++ -*-===//
//
// A cluster preempts a job with SIGTERM (Slurm, Kubernetes; mpirun passes
// it on to the ranks), a person with SIGINT (Ctrl-C). The trainer does not
// die in the middle of a step: the handler only records the signal, and at
// the end of each step the ranks agree (a max all-reduce of their stop
// requests over the whole job, so that every rank stops after the same
// step, also when the signal reached only one of them), save a checkpoint
// and exit 0. A second signal changes nothing (the run is already
// stopping; the save is atomic, so even a SIGKILL during it leaves the
// previous checkpoints whole and no half one: ckpt/Checkpoint.h).
//
// --exit-duration-in-mins and --exit-interval (Megatron's flags) stop the
// same way at a time or a step.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_PREEMPTION_H
#define BRAID_RUNTIME_EXEC_PREEMPTION_H

#include "absl/status/status.h"

namespace braid::exec {

/// Installs the handlers of SIGTERM and SIGINT (once per process; later
/// calls do nothing): each records its signal and returns. Not the default
/// action any more: a process that installs them must poll
/// PendingStopSignal.
absl::Status InstallStopHandlers();

/// The first stop signal received since InstallStopHandlers (SIGTERM,
/// SIGINT), or 0.
int PendingStopSignal();

/// Forgets a received signal (tests, and a process that trains again).
void ClearStopSignal();

/// "SIGTERM", "SIGINT", or "a signal".
const char *StopSignalName(int signal);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_PREEMPTION_H
