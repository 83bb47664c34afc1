//===- Devices.cpp - The backend of a --device ----------------------------===//

#include "runtime/exec/Devices.h"

#ifdef BRAID_HAVE_CUDA
#include "runtime/cuda/Executor.h"
#endif
#ifdef BRAID_HAVE_NCCL
#include "runtime/comm/Rendezvous.h"
#include "runtime/cuda/NcclCommunicator.h"
#endif

#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"

namespace braid::exec {

bool HaveCudaBackend() {
#ifdef BRAID_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<BackendFactory> BackendFor(const std::string &device,
                                          bool cudaGraphs) {
  if (device == "cpu")
    return BackendFactory();
  if (device == "cuda") {
#ifdef BRAID_HAVE_CUDA
    return BackendFactory(
        [cudaGraphs](const plan::Plan &plan, Communicator *comm)
            -> absl::StatusOr<std::unique_ptr<Backend>> {
          // It refuses a plan for several ranks whose communicator cannot
          // take device memory.
          absl::StatusOr<std::unique_ptr<cuda::Executor>> e =
              cuda::Executor::Create(plan, comm);
          if (!e.ok())
            return e.status();
          (*e)->SetGraphs(cudaGraphs);
          return std::unique_ptr<Backend>(std::move(*e));
        });
#else
    return absl::UnimplementedError(
        "--device cuda: this build has no CUDA backend (configure it where "
        "nvcc is installed: scripts/setup.sh turns BRAID_ENABLE_CUDA on)");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device ", device, " is not one of cpu, cuda"));
}

absl::StatusOr<std::unique_ptr<Communicator>>
CommunicatorFor(const std::string &device, const plan::Plan &plan,
                const comm::RootBroadcast &broadcast) {
  if (device != "cuda")
    return std::unique_ptr<Communicator>();
#ifdef BRAID_HAVE_NCCL
  absl::StatusOr<comm::RendezvousConfig> rendezvous =
      comm::RendezvousFromEnvironment();
  if (!rendezvous.ok())
    return rendezvous.status();
  absl::StatusOr<std::unique_ptr<cuda::NcclCommunicator>> nccl =
      cuda::NcclCommunicator::Create(plan, *rendezvous, broadcast);
  if (!nccl.ok())
    return nccl.status();
  return std::unique_ptr<Communicator>(std::move(*nccl));
#else
  (void)broadcast;
  return absl::UnimplementedError(absl::StrCat(
      "--device cuda over ", plan::WorldSize(plan),
      " ranks: this build has no NCCL communicator",
      HaveCudaBackend() ? " (the CUDA emulation's needs MPI: BRAID_WITH_MPI)"
                        : ""));
#endif
}

} // namespace braid::exec
