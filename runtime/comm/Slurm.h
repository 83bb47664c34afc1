//===- Slurm.h - What srun tells the tasks it starts -------------*- C++
//-*-===//
//
// `srun -n N braid-run PLAN` starts N tasks and tells each, in its
// environment, which it is (SLURM_PROCID of SLURM_NTASKS, SLURM_LOCALID on
// its node), the nodes of its step (SLURM_STEP_NODELIST, in Slurm's
// hostlist syntax: "node[01-04,07]") and how many tasks each node runs
// (SLURM_STEP_TASKS_PER_NODE: "4(x2),2"). The rendezvous without MPI
// (Rendezvous.h) and the MPI job's count of ranks per node
// (MpiCommunicator.h) read them through these functions.
//
// Only a task of a job step is a rank: the batch script of sbatch also has
// SLURM_PROCID=0 and SLURM_NTASKS (of the whole job), but no SLURM_STEP_ID,
// and must not wait for N - 1 ranks that nobody started.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMM_SLURM_H
#define BRAID_RUNTIME_COMM_SLURM_H

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::comm {

/// Whether this process is a task that srun started: SLURM_PROCID and the
/// step's id (SLURM_STEP_ID, or SLURM_STEPID of older Slurm) are set.
bool InSlurmStep();

/// The host names of a Slurm hostlist, in its order: comma-separated
/// entries, each a name with ranges in brackets, "node[01-04,07]" ->
/// node01 node02 node03 node04 node07. A range's numbers are as wide as its
/// first number is written ("[08-10]": 08 09 10; "[8-10]": 8 9 10); an
/// entry with several brackets is every combination, the first bracket
/// varying slowest ("r[1-2]n[1-2]": r1n1 r1n2 r2n1 r2n2). Empty entries are
/// skipped, as Slurm does. An unbalanced bracket, a range that is not
/// "N" or "N-M" with N <= M, or more than `maxHosts` names is an error
/// naming the entry.
absl::StatusOr<std::vector<std::string>>
ExpandSlurmHostlist(absl::string_view hostlist, int64_t maxHosts = 1 << 20);

/// The tasks on the step's node `node` (0-based) of a Slurm tasks-per-node
/// list: comma-separated counts, each "C" (one node) or "C(xK)" (K nodes),
/// "4(x2),2" -> 4 4 2. A malformed list, or one with fewer nodes than
/// `node + 1`, is an error.
absl::StatusOr<int64_t> SlurmTasksOnNode(absl::string_view tasksPerNode,
                                         int64_t node);

} // namespace braid::comm

#endif // BRAID_RUNTIME_COMM_SLURM_H
