//===- braid-run.cpp - Runs a plan ----------------------------------------===//
//
// braid-run job.plan [--data PREFIX] [--steps N] [--seed N]
//                    [--data-order ORDER] [--init-from HF_DIR]
//                    [--threads N] [--log-every N] [--metrics-out FILE]
//                    [--save-params FILE] [--trace FILE.json] [--profile]
//
// A runtime tool: it links no LLVM. Bad command lines exit 2, failures 1.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/MpiCommunicator.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/PlanLoader.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

namespace {

int usage(const std::string &error) {
  if (!error.empty())
    std::cerr << "braid-run: error: " << error << "\n";
  std::cerr << "usage: braid-run PLAN " << braid::exec::kTrainerFlagsUsage
            << " [--profile]\n";
  return error.empty() ? 0 : 2;
}

} // namespace

int main(int argc, char **argv) {
  std::string planPath;
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
    } else {
      if (i + 1 >= argc)
        return usage(arg + " needs a value");
      value = argv[++i];
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
  absl::StatusOr<braid::plan::Plan> plan = braid::plan::LoadPlanFile(planPath);
  if (!plan.ok()) {
    std::cerr << "braid-run: error: " << plan.status().message() << "\n";
    return 1;
  }
  // A plan for several ranks runs as one rank of an MPI job; so does a
  // one-rank plan that mpirun started (it then checks the job's size).
  std::unique_ptr<braid::comm::MpiCommunicator> comm;
  if (braid::plan::WorldSize(*plan) > 1 || braid::comm::LaunchedByMpi()) {
    if (!braid::comm::LaunchedByMpi()) {
      std::cerr << "braid-run: error: the plan is for "
                << braid::plan::WorldSize(*plan)
                << " ranks: start it with mpirun -np "
                << braid::plan::WorldSize(*plan)
                << " braid-run ... (braid train does)\n";
      return 1;
    }
    absl::StatusOr<std::unique_ptr<braid::comm::MpiCommunicator>> created =
        braid::comm::MpiCommunicator::Create(*plan);
    if (!created.ok()) {
      std::cerr << "braid-run: error: " << created.status().message() << "\n";
      return 1;
    }
    comm = std::move(*created);
    options.comm = comm.get();
    // Rank 0 speaks for the job.
    if (comm->Rank() != 0) {
      options.log = nullptr;
      options.metricsOut.clear();
      options.profile = false;
    }
    // Ranks sharing a node share its cores.
    if (options.threads == 0)
      options.threads = std::max<int64_t>(
          1, int64_t(std::thread::hardware_concurrency()) /
                 braid::comm::LocalRanks());
  }
  absl::Status status = braid::exec::Train(*plan, options);
  if (!status.ok()) {
    std::cerr << "braid-run: error: "
              << (comm ? "rank " + std::to_string(comm->Rank()) + ": " : "")
              << status.message() << "\n";
    // The other ranks may be waiting for this one in a collective.
    if (comm)
      comm->Abort(1);
    return 1;
  }
  return 0;
}
