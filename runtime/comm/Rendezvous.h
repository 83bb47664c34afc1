//===- Rendezvous.h - Where the ranks of a job meet, without MPI -*- C++ -*-===//
//
// The bootstrap of a job that MPI does not connect (NCCL's communicators on
// GPUs): the ranks find each other through the environment torchrun and
// Megatron's launchers set, RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// (or, under mpirun, its own rank and size variables; under srun, the
// task's: Slurm.h). Rank 0 listens on MASTER_ADDR:MASTER_PORT, every other
// rank connects to it, and rank 0 gives them all the same bytes (NCCL's
// unique id). Plain TCP sockets: no MPI, no CUDA. (A job mpirun, or srun
// with PMIx, started, in a build with MPI, hands the bytes over MPI
// instead: braid-run, MpiBroadcastFromRoot.)
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMM_RENDEZVOUS_H
#define BRAID_RUNTIME_COMM_RENDEZVOUS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <string>

namespace braid::comm {

struct RendezvousConfig {
  int64_t rank = 0;
  int64_t worldSize = 1;
  /// This rank's place among the ranks of its node (the GPU it takes).
  int64_t localRank = 0;
  /// Rank 0's address (a name or a numeric IPv4 or IPv6 address) and port.
  std::string host = "127.0.0.1";
  int port = 29500;
  /// How long the ranks wait for each other before giving up.
  double timeoutSeconds = 300;
};

/// The rendezvous of this process from its environment: RANK and
/// WORLD_SIZE (else mpirun's OMPI_COMM_WORLD_RANK and _SIZE, or PMI_RANK and
/// PMI_SIZE, or in a task srun started SLURM_PROCID and SLURM_NTASKS),
/// LOCAL_RANK (else OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
/// SLURM_LOCALID; default 0), MASTER_ADDR (default: where the rank is
/// srun's SLURM_PROCID, the first host of SLURM_STEP_NODELIST, else of
/// SLURM_NODELIST; otherwise 127.0.0.1) and MASTER_PORT (default 29500);
/// BRAID_RENDEZVOUS_TIMEOUT in seconds (default 300). A missing rank
/// or size, or a value that is not a number in range (or a node list that
/// is not a hostlist), is an error naming the variable.
absl::StatusOr<RendezvousConfig> RendezvousFromEnvironment();

/// How a job's rank 0 hands bytes to its other ranks (RendezvousBroadcast's
/// contract): over the TCP rendezvous below, or through MPI when mpirun
/// started the job (MpiBroadcastFromRoot, runtime/comm/MpiCommunicator.h).
using RootBroadcast =
    std::function<absl::Status(const std::string &tag, std::string &bytes)>;

/// Rank 0 gives `bytes` to every other rank of the job: on rank 0 `bytes` is
/// sent, on the others it is replaced by what rank 0 sent. Every rank of the
/// job calls it once with the same `tag` (a rank of another job, or of
/// another call, is refused and named). Returns when every rank has its
/// copy; an error names the rank or address that was not reached within
/// the timeout.
absl::Status RendezvousBroadcast(const RendezvousConfig &config,
                                 const std::string &tag, std::string &bytes);

} // namespace braid::comm

#endif // BRAID_RUNTIME_COMM_RENDEZVOUS_H
