//===- Devices.h - The backend of a --device ---------------------*- C++ -*-===//
//
// Maps the trainer's --device to the factory of its backend (Backend.h):
// "cpu" to null (the trainer's default, the CPU executor), "cuda" to the
// CUDA executor (runtime/cuda/Executor.h) in a build with the CUDA backend,
// and a plan of several ranks on it to NCCL's communicator. A separate library from BraidExec, so that the CPU runtime does
// not link CUDA: the tools that take --device link this one.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_DEVICES_H
#define BRAID_RUNTIME_EXEC_DEVICES_H

#include "runtime/comm/Rendezvous.h"
#include "runtime/exec/Communicator.h"
#include "runtime/exec/Trainer.h"

#include "absl/status/statusor.h"

#include <memory>
#include <string>

namespace braid::exec {

/// Whether this build has the CUDA backend.
bool HaveCudaBackend();

/// The factory for `device` (null for "cpu"); an error naming the device
/// when this build has no backend for it. `cudaGraphs`: whether the CUDA
/// executor replays functions as captured graphs (cuda::Executor::SetGraphs).
absl::StatusOr<BackendFactory> BackendFor(const std::string &device,
                                          bool cudaGraphs = true);

/// The communicator between the ranks of a plan for several on `device`:
/// for "cuda" NCCL's (runtime/cuda/NcclCommunicator.h), whose ranks meet
/// through the environment's rendezvous (RANK, WORLD_SIZE, MASTER_ADDR,
/// MASTER_PORT, or mpirun's rank and size: runtime/comm/Rendezvous.h) and
/// get NCCL's id through `broadcast` when given (MPI's, in a job mpirun
/// started), else through the rendezvous' TCP; null for "cpu", whose ranks
/// are an MPI job's (the caller makes that one).
absl::StatusOr<std::unique_ptr<Communicator>>
CommunicatorFor(const std::string &device, const plan::Plan &plan,
                const comm::RootBroadcast &broadcast = {});

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_DEVICES_H
