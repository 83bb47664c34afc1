//===- braid-run.cpp - Runs a plan ----------------------------------------===//
//
// braid-run job.plan [--data PREFIX] [--steps N] [--seed N]
//                    [--data-order ORDER] [--init-from HF_DIR]
//                    [--threads N] [--log-every N] [--metrics-out FILE]
//                    [--save-params FILE] [--trace FILE.json] [--profile]
//                    [--profile-out FILE.json] [--device cpu|cuda]
//                    [--cuda-graphs on|off] [--collective-timeout SECONDS]
// mpirun -np N braid-run job.plan --bench-collectives FILE.json
//
// --device cuda runs the kernels on the GPU (runtime/cuda/Executor.h, a
// build with the CUDA backend; --cuda-graphs off launches each kernel
// rather than replaying the functions as captured graphs), cpu (the
// default) on the CPU.
//
// --collective-timeout (default 300 s, 0: none) is the longest a rank waits
// for the others in a collective or message (3 x that until the first step
// ends and in checkpoint saves): past it the rank names the collective and
// the ranks that had not arrived, and the job ends (exit 1 on every rank).
//
// The second form trains nothing: it times the collectives over the plan's
// "dp" axis (runtime/exec/BenchCollectives.h) and rank 0 writes them to
// FILE.json, for `braid calibrate`.
//
// A runtime tool: it links no LLVM. Bad command lines exit 2, failures 1.
//
//===----------------------------------------------------------------------===//

#ifdef BRAID_HAVE_MPI
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/comm/Slurm.h"
#endif
#include "runtime/common/OutputFile.h"
#include "runtime/cpu/Blas.h"
#include "runtime/exec/BenchCollectives.h"
#include "runtime/exec/Devices.h"
#include "runtime/exec/GenerateCommand.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <unistd.h>

namespace {

/// Writes `line` and a newline to stderr in one write(2).
void writeLine(std::string line) {
  line += "\n";
  std::cerr.flush();
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(2, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    done += size_t(n);
  }
}

int usage(const std::string &error) {
  if (!error.empty())
    writeLine(absl::StrCat("braid-run: error: ", error));
  std::cerr << "usage: braid-run PLAN " << braid::exec::kTrainerFlagsUsage
            << " [--profile]\n"
            << "       mpirun -np N braid-run PLAN --bench-collectives "
               "FILE.json\n"
            << "       braid-run GENERATE_PLAN "
            << braid::exec::kGenerateFlagsUsage << "\n";
  return error.empty() ? 0 : 2;
}

#ifdef BRAID_HAVE_MPI
/// --bench-collectives: times the collectives over "dp" on every rank; rank
/// 0 writes them to `path`. Returns the exit code.
int benchCollectives(braid::comm::MpiCommunicator &comm,
                     const braid::plan::Plan &plan, const std::string &path) {
  // Rank 0 opens the file first, so that one it cannot write ends the job
  // before the minutes of timing.
  braid::common::OutputStream out;
  if (comm.Rank() == 0)
    if (absl::Status s = out.Open(path); !s.ok()) {
      writeLine(absl::StrCat("braid-run: error: ", s.message()));
      comm.Abort(1);
    }
  absl::StatusOr<braid::exec::CollectiveBench> bench =
      braid::exec::BenchCollectives(comm,
                                    braid::plan::AxisSize(plan.mesh(), "dp"));
  if (!bench.ok()) {
    writeLine(absl::StrCat("braid-run: error: rank ", comm.Rank(), ": ",
                           bench.status().message()));
    comm.Abort(1);
  }
  if (comm.Rank() != 0)
    return 0;
  braid::exec::WriteCollectiveBench(*bench, out);
  if (absl::Status s = out.Commit(); !s.ok()) {
    writeLine(absl::StrCat("braid-run: error: ", s.message()));
    return 1;
  }
  std::cout << "collectives: " << bench->ranks << " ranks over 'dp', "
            << bench->allReduce.size() << " sizes each, in " << path << "\n";
  return 0;
}
#endif // BRAID_HAVE_MPI

} // namespace

int main(int argc, char **argv) {
  // OpenBLAS's kernels for this CPU, where the library does not know it
  // (may start this program again; before MPI and any thread).
  braid::cpu::useNativeBlasKernels(argv);
  // An inference plan (braidc --mode generate) takes generation's flags;
  // split over tp, its ranks are an MPI job's.
  if (argc >= 2 && argv[1][0] != '-') {
    absl::StatusOr<braid::plan::Plan> plan =
        braid::plan::LoadPlanFile(argv[1]);
    if (plan.ok() && plan->has_generation()) {
      braid::exec::Communicator *jobComm = nullptr;
#ifdef BRAID_HAVE_MPI
      std::unique_ptr<braid::comm::MpiCommunicator> comm;
      if (braid::plan::WorldSize(*plan) > 1 && braid::comm::LaunchedByMpi()) {
        absl::StatusOr<std::unique_ptr<braid::comm::MpiCommunicator>> created =
            braid::comm::MpiCommunicator::Create(*plan);
        if (!created.ok()) {
          writeLine(absl::StrCat("braid-run: error: ",
                                 created.status().message()));
          return 1;
        }
        comm = std::move(*created);
        jobComm = comm.get();
      }
#endif
      int rc = braid::exec::RunGenerateCommand(
          *plan, std::vector<std::string>(argv + 2, argv + argc),
          [](const std::string &device) {
            return braid::exec::BackendFor(device);
          },
          jobComm, std::cout, std::cerr);
      if (rc != 0 && jobComm)
        jobComm->Abort(rc);
      return rc;
    }
  }
  std::string planPath;
  std::string benchOut; // --bench-collectives
  braid::exec::TrainerOptions options;
  options.log = &std::cout;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      return usage(""), 0;
    if (arg == "--profile") {
      options.profile = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (!planPath.empty())
        return usage("more than one plan: " + planPath + " and " + arg);
      planPath = arg;
      continue;
    }
    std::string value;
    size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg != "--bench-collectives" &&
               !braid::exec::IsTrainerFlag(arg)) {
      return usage("unknown flag " + arg);
    } else if (braid::exec::IsTrainerSwitch(arg)) {
      value = "";
    } else {
      if (i + 1 >= argc)
        return usage(arg + " needs a value");
      value = argv[++i];
    }
    if (arg == "--bench-collectives") {
      if (value.empty())
        return usage("--bench-collectives= names no file (expected "
                     "--bench-collectives FILE.json)");
      benchOut = value;
      continue;
    }
    absl::StatusOr<bool> known =
        braid::exec::ParseTrainerFlag(arg, value, &options);
    if (!known.ok())
      return usage(std::string(known.status().message()));
    if (!*known)
      return usage("unknown flag " + arg);
  }
  if (planPath.empty())
    return usage("no plan file given");
  absl::StatusOr<braid::exec::BackendFactory> backend =
      braid::exec::BackendFor(options.device, options.cudaGraphs);
  if (!backend.ok()) {
    writeLine(
        absl::StrCat("braid-run: error: ", backend.status().message()));
    return 1;
  }
  options.backend = std::move(*backend);
  absl::StatusOr<braid::plan::Plan> plan = braid::plan::LoadPlanFile(planPath);
  if (!plan.ok()) {
    writeLine(absl::StrCat("braid-run: error: ", plan.status().message()));
    return 1;
  }
  if (!benchOut.empty() && braid::plan::AxisSize(plan->mesh(), "dp") < 2) {
    writeLine(absl::StrCat(
        "braid-run: error: --bench-collectives times the collectives over "
        "the plan's 'dp' axis, which has ",
        braid::plan::AxisSize(plan->mesh(), "dp"),
        " rank: compile the plan with dp >= 2"));
    return 1;
  }
  // A plan for several ranks on GPUs: its ranks talk through NCCL, and meet
  // through the environment's rendezvous (RANK, WORLD_SIZE, MASTER_ADDR,
  // MASTER_PORT, or mpirun's rank and size). A job that mpirun started,
  // without RANK and WORLD_SIZE of its own, gets NCCL's id through MPI
  // (no MASTER_ADDR or MASTER_PORT needed) when this braid-run has MPI.
  std::unique_ptr<braid::exec::Communicator> deviceComm;
  braid::exec::Communicator *jobComm = nullptr;
  if (options.device == "cuda" && braid::plan::WorldSize(*plan) > 1 &&
      benchOut.empty()) {
    braid::comm::RootBroadcast broadcast;
#ifdef BRAID_HAVE_MPI
    if (braid::comm::LaunchedByMpi() &&
        !(std::getenv("RANK") && std::getenv("WORLD_SIZE")))
      broadcast = braid::comm::MpiBroadcastFromRoot;
#endif
    absl::StatusOr<std::unique_ptr<braid::exec::Communicator>> created =
        braid::exec::CommunicatorFor(options.device, *plan, broadcast);
    if (!created.ok()) {
      writeLine(
          absl::StrCat("braid-run: error: ", created.status().message()));
      return 1;
    }
    deviceComm = std::move(*created);
    jobComm = deviceComm.get();
  }
#ifdef BRAID_HAVE_MPI
  // Otherwise a plan for several ranks runs as one rank of an MPI job; so
  // does a one-rank plan that mpirun started (it then checks the job's
  // size).
  std::unique_ptr<braid::comm::MpiCommunicator> comm;
  if (!jobComm &&
      (braid::plan::WorldSize(*plan) > 1 || braid::comm::LaunchedByMpi())) {
    if (!braid::comm::LaunchedByMpi()) {
      // A task srun started without a PMI that MPI can join (--mpi=none,
      // or pmi2 with Open MPI): docs/slurm.md.
      writeLine(absl::StrCat(
          "braid-run: error: the plan is for ", braid::plan::WorldSize(*plan),
          " ranks: start it with mpirun -np ", braid::plan::WorldSize(*plan),
          " braid-run ... (braid train does)",
          braid::comm::InSlurmStep()
              ? absl::StrCat(", or with srun --mpi=pmix -n ",
                             braid::plan::WorldSize(*plan),
                             " (this srun task has no PMIx for MPI to join)")
              : ""));
      return 1;
    }
    absl::StatusOr<std::unique_ptr<braid::comm::MpiCommunicator>> created =
        braid::comm::MpiCommunicator::Create(*plan);
    if (!created.ok()) {
      writeLine(
          absl::StrCat("braid-run: error: ", created.status().message()));
      return 1;
    }
    comm = std::move(*created);
    if (!benchOut.empty()) {
      comm->SetTimeout(options.collectiveTimeout);
      return benchCollectives(*comm, *plan, benchOut);
    }
    jobComm = comm.get();
    // Ranks sharing a node share its cores.
    if (options.threads == 0)
      options.threads = std::max<int64_t>(
          1, int64_t(std::thread::hardware_concurrency()) /
                 braid::comm::LocalRanks());
  }
#else
  if (!jobComm &&
      (braid::plan::WorldSize(*plan) > 1 || !benchOut.empty())) {
    writeLine(absl::StrCat(
        "braid-run: error: ",
        benchOut.empty()
            ? absl::StrCat("the plan is for ", braid::plan::WorldSize(*plan),
                           " ranks on the CPU")
            : std::string("--bench-collectives"),
        ": this braid-run was built without MPI (BRAID_WITH_MPI=OFF)"));
    return 1;
  }
#endif
  if (jobComm) {
    options.comm = jobComm;
    // Rank 0 speaks for the job. (Every rank profiles for --profile-out:
    // rank 0 gathers their profiles.)
    if (jobComm->Rank() != 0) {
      options.log = nullptr;
      options.metricsOut.clear();
      options.profile = false;
    }
  }
  absl::Status status = braid::exec::Train(*plan, options);
  if (!status.ok()) {
    std::string rank;
    if (jobComm)
      rank = "rank " + std::to_string(jobComm->Rank()) + ": ";
    // One write of the whole line: the ranks of a job share stderr, and a
    // line written in pieces interleaves with the others' pieces.
    writeLine(std::string("braid-run: error: ") + rank +
              std::string(status.message()));
    // The other ranks may be waiting for this one in a collective.
    if (jobComm)
      jobComm->Abort(1);
    return 1;
  }
  return 0;
}
