//===- Devices.h - The backend of a --device ---------------------*- C++ -*-===//
//
// Maps the trainer's --device to the factory of its backend (Backend.h):
// "cpu" to null (the trainer's default, the CPU executor), "cuda" to the
// one-GPU executor (runtime/cuda/Executor.h) in a build with the CUDA
// backend. A separate library from BraidExec, so that the CPU runtime does
// not link CUDA: the tools that take --device link this one.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_DEVICES_H
#define BRAID_RUNTIME_EXEC_DEVICES_H

#include "runtime/exec/Trainer.h"

#include "absl/status/statusor.h"

#include <string>

namespace braid::exec {

/// Whether this build has the CUDA backend.
bool HaveCudaBackend();

/// The factory for `device` (null for "cpu"); an error naming the device
/// when this build has no backend for it.
absl::StatusOr<BackendFactory> BackendFor(const std::string &device);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_DEVICES_H
