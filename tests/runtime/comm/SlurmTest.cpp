//===- SlurmTest.cpp - Ranks that srun started ----------------------------===//
//
// Slurm's hostlist and tasks-per-node syntax (the expected names written
// out by hand from Slurm's documentation), the rendezvous read from the
// variables srun gives each task, and 4 processes meeting through them.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Slurm.h"
#include "runtime/comm/Rendezvous.h"

#include "tests/runtime/comm/FreePort.h"

#include "gtest/gtest.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace braid::comm;

namespace {

using Names = std::vector<std::string>;

Names expand(const char *hostlist) {
  absl::StatusOr<Names> hosts = ExpandSlurmHostlist(hostlist);
  EXPECT_TRUE(hosts.ok()) << hostlist << ": " << hosts.status();
  return hosts.ok() ? *hosts : Names{};
}

void expectError(const char *hostlist, const std::string &text,
                 int64_t maxHosts = 1 << 20) {
  absl::StatusOr<Names> hosts = ExpandSlurmHostlist(hostlist, maxHosts);
  ASSERT_FALSE(hosts.ok()) << hostlist << " gave " << hosts->size() << " hosts";
  EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hosts.status().message().find(text), std::string::npos)
      << hostlist << ": " << hosts.status();
}

TEST(SlurmHostlist, ExpandsRangesAndLists) {
  EXPECT_EQ(expand("node[01-04,07]"),
            (Names{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand("gpu7"), (Names{"gpu7"}));
  EXPECT_EQ(expand("gpu-a[3]"), (Names{"gpu-a3"}));
  EXPECT_EQ(expand("a[1-2],b,c[05-06]"),
            (Names{"a1", "a2", "b", "c05", "c06"}));
  // Empty entries are skipped, as Slurm does.
  EXPECT_EQ(expand("a,,b,"), (Names{"a", "b"}));
  // Text after a bracket follows each name.
  EXPECT_EQ(expand("n[9-10]-ib"), (Names{"n9-ib", "n10-ib"}));
}

TEST(SlurmHostlist, WritesNumbersAsWideAsTheFirst) {
  EXPECT_EQ(expand("n[8-10]"), (Names{"n8", "n9", "n10"}));
  EXPECT_EQ(expand("n[08-10]"), (Names{"n08", "n09", "n10"}));
  EXPECT_EQ(expand("n[008-010]"), (Names{"n008", "n009", "n010"}));
  EXPECT_EQ(expand("n[0099-0101]"), (Names{"n0099", "n0100", "n0101"}));
  // "1" is one digit wide: 10 is written as it is.
  EXPECT_EQ(expand("n[1-010]").size(), 10u);
  EXPECT_EQ(expand("n[1-010]").back(), "n10");
}

TEST(SlurmHostlist, CombinesSeveralBrackets) {
  EXPECT_EQ(expand("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(
      expand("rack[0-1]_blade[7,9]"),
      (Names{"rack0_blade7", "rack0_blade9", "rack1_blade7", "rack1_blade9"}));
}

TEST(SlurmHostlist, NamesWhatIsWrong) {
  expectError("", "names no host");
  expectError(",", "names no host");
  expectError("n[1-2", "has an unclosed bracket");
  expectError("n1-2]", "closes a bracket it did not open");
  expectError("n[[1]]", "has a bracket inside a bracket");
  expectError("n[3-1]", "the hostlist entry 'n[3-1]' has the range '3-1', "
                        "which ends before it starts");
  expectError("n[a-b]", "has the range 'a-b' (expected N or N-M");
  expectError("n[]", "has the range ''");
  expectError("n[1-]", "has the range '1-'");
  expectError("n[-2]", "has the range '-2'");
  expectError("n[1,,2]", "has the range ''");
  expectError("n[0-2000000]", "names more than 1048576 hosts");
  expectError("n[0-999999999999999999]", "names more than");
  expectError("a[1-2],b[1-2]",
              "the hostlist entry 'b[1-2]' brings the "
              "hostlist past 3 hosts",
              /*maxHosts=*/3);
  expectError("r[0-999]n[0-9999]", "names more than");
}

TEST(SlurmTasksPerNode, CountsEachNodesTasks) {
  EXPECT_EQ(*SlurmTasksOnNode("4", 0), 4);
  EXPECT_EQ(*SlurmTasksOnNode("4(x2),2", 0), 4);
  EXPECT_EQ(*SlurmTasksOnNode("4(x2),2", 1), 4);
  EXPECT_EQ(*SlurmTasksOnNode("4(x2),2", 2), 2);
  EXPECT_EQ(*SlurmTasksOnNode("1,3(x3),8", 4), 8);
  absl::StatusOr<int64_t> past = SlurmTasksOnNode("4(x2),2", 3);
  EXPECT_EQ(past.status().message(),
            "the tasks per node '4(x2),2' lists 3 nodes, not node 3");
  for (const char *bad : {"", "x", "4(x0)", "4(2)", "4(x2", "-1", "4(x2),"}) {
    absl::StatusOr<int64_t> t = SlurmTasksOnNode(bad, 0);
    EXPECT_FALSE(t.ok()) << "'" << bad << "' gave " << *t;
  }
  EXPECT_NE(SlurmTasksOnNode("4(2)", 0).status().message().find(
                "has '4(2)' (expected a count C or C(xK)"),
            std::string::npos);
}

/// Every variable the rendezvous reads, unset.
void clearEnvironment() {
  for (const char *v :
       {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "PMI_RANK", "PMI_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "BRAID_RENDEZVOUS_TIMEOUT", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
        "SLURM_NODELIST", "SLURM_STEP_NODELIST", "SLURM_STEP_ID",
        "SLURM_STEPID"})
    unsetenv(v);
}

TEST(SlurmRendezvous, ReadsWhatSrunSets) {
  clearEnvironment();
  // sbatch's batch script has these too, but is no task of a step.
  setenv("SLURM_PROCID", "2", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NODELIST", "gpu[07-08]", 1);
  absl::StatusOr<RendezvousConfig> c = RendezvousFromEnvironment();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("RANK is not set"), std::string::npos)
      << c.status();
  // A task of a step.
  setenv("SLURM_STEP_ID", "0", 1);
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->worldSize, 4);
  EXPECT_EQ(c->localRank, 1);
  EXPECT_EQ(c->host, "gpu07");
  EXPECT_EQ(c->port, 29500);
  // The step's first node before the job's.
  setenv("SLURM_STEP_NODELIST", "gpu[08-09]", 1);
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "gpu08");
  setenv("MASTER_ADDR", "head", 1);
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "head");
  unsetenv("MASTER_ADDR");
  // Older Slurm names the step SLURM_STEPID.
  unsetenv("SLURM_STEP_ID");
  setenv("SLURM_STEPID", "3", 1);
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 2);

  // A launcher's own variables come first (mpirun started inside the
  // allocation: its ranks inherit their node's SLURM_*), and then the
  // address is not Slurm's.
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 5);
  EXPECT_EQ(c->worldSize, 8);
  EXPECT_EQ(c->localRank, 3);
  EXPECT_EQ(c->host, "127.0.0.1");
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->worldSize, 2);
  EXPECT_EQ(c->host, "127.0.0.1");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");

  // Bad values name their variable.
  auto expectBad = [](const char *text) {
    absl::StatusOr<RendezvousConfig> bad = RendezvousFromEnvironment();
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(text), std::string::npos)
        << bad.status();
  };
  setenv("SLURM_PROCID", "4", 1);
  expectBad("SLURM_PROCID='4' is not an integer in [0, 3]");
  setenv("SLURM_PROCID", "2", 1);
  setenv("SLURM_NTASKS", "four", 1);
  expectBad("SLURM_NTASKS='four' is not an integer");
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "9", 1);
  expectBad("SLURM_LOCALID='9' is not an integer in [0, 3]");
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_STEP_NODELIST", "gpu[09-08]", 1);
  expectBad("SLURM_STEP_NODELIST: the hostlist entry 'gpu[09-08]' has the "
            "range '09-08', which ends before it starts");
  clearEnvironment();
}

TEST(SlurmRendezvous, FourTasksMeetThroughSrunsVariables) {
  clearEnvironment();
  const int world = 4, port = braid::testutil::FreePort();
  const std::string payload = "rank 0's bytes for the job";
  std::vector<pid_t> tasks;
  // Each task a process of its own, with its own environment, as srun
  // starts them; the last first, so that the others wait for rank 0.
  for (int r = world - 1; r >= 0; --r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid > 0) {
      tasks.push_back(pid);
      continue;
    }
    std::string rank = std::to_string(r), local = std::to_string(r % 2);
    setenv("SLURM_PROCID", rank.c_str(), 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", local.c_str(), 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_STEP_NODELIST", "localhost,node[2-4]", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("BRAID_RENDEZVOUS_TIMEOUT", "30", 1);
    absl::StatusOr<RendezvousConfig> c = RendezvousFromEnvironment();
    if (!c.ok()) {
      std::fprintf(stderr, "task %d: %s\n", r,
                   std::string(c.status().message()).c_str());
      _exit(2);
    }
    if (c->rank != r || c->worldSize != world || c->localRank != r % 2 ||
        c->host != "localhost" || c->port != port) {
      std::fprintf(stderr, "task %d: rank %lld of %lld, local %lld, %s:%d\n", r,
                   (long long)c->rank, (long long)c->worldSize,
                   (long long)c->localRank, c->host.c_str(), c->port);
      _exit(3);
    }
    std::string bytes = r == 0 ? payload : "not yet";
    absl::Status s = RendezvousBroadcast(*c, "slurm job", bytes);
    if (!s.ok()) {
      std::fprintf(stderr, "task %d: %s\n", r,
                   std::string(s.message()).c_str());
      _exit(4);
    }
    _exit(bytes == payload ? 0 : 5);
  }
  for (pid_t pid : tasks) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a task ended with status " << status
        << " (2: no rendezvous, 3: the wrong one, 4: it failed, 5: other "
           "bytes)";
  }
}

} // namespace
