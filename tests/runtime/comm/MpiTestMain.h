//===- MpiTestMain.h - The main of a GoogleTest binary run under mpirun ---===//
//
// Each MPI test binary is one job: every rank makes the communicator of
// `plan` (a plan for 4 ranks joins only a job of 4), runs the tests, and
// the ranks agree on one verdict in plain MPI (not through the communicator,
// which fails every wait once one of its waits has timed out): one failing
// rank fails them all.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TESTS_RUNTIME_COMM_MPITESTMAIN_H
#define BRAID_TESTS_RUNTIME_COMM_MPITESTMAIN_H

#include "runtime/comm/MpiCommunicator.h"

#include "gtest/gtest.h"

// The C API only: mpi.h would otherwise pull in Open MPI's C++ bindings.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

namespace braid::comm_test {

inline int RunMpiTests(int argc, char **argv, const plan::Plan &plan,
                       std::unique_ptr<comm::MpiCommunicator> &comm) {
  ::testing::InitGoogleTest(&argc, argv);
  absl::StatusOr<std::unique_ptr<comm::MpiCommunicator>> created =
      comm::MpiCommunicator::Create(plan);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(created.status().message()).c_str());
    return 1;
  }
  comm = std::move(*created);
  int failed = RUN_ALL_TESTS() != 0, anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  comm.reset(); // finalizes MPI
  return anyFailed ? 1 : 0;
}

} // namespace braid::comm_test

#endif // BRAID_TESTS_RUNTIME_COMM_MPITESTMAIN_H
