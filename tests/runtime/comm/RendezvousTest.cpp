//===- RendezvousTest.cpp - The ranks' meeting without MPI ----------------===//
//
// Ranks are threads of this process, meeting on a port of the loopback
// interface that was free when the test began.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Rendezvous.h"

#include "tests/runtime/comm/FreePort.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace braid::comm;

namespace {

RendezvousConfig config(int64_t rank, int64_t world, int port,
                        double timeout = 30) {
  RendezvousConfig c;
  c.rank = rank;
  c.worldSize = world;
  c.port = port;
  c.timeoutSeconds = timeout;
  return c;
}

TEST(Rendezvous, EveryRankGetsRankZerosBytes) {
  // 1 MiB with every byte value, more than one send moves at once.
  std::string payload(1 << 20, '\0');
  for (size_t i = 0; i < payload.size(); ++i)
    payload[i] = char(i * 7 + i / 256);
  const int port = braid::testutil::FreePort(), world = 5;
  std::vector<std::string> got(world);
  std::vector<absl::Status> status(world);
  std::vector<std::thread> ranks;
  // The others start first: they wait for rank 0 to listen.
  for (int r = world - 1; r >= 0; --r)
    ranks.emplace_back([&, r] {
      got[r] = r == 0 ? payload : "not yet";
      status[r] = RendezvousBroadcast(config(r, world, port), "job", got[r]);
    });
  for (std::thread &t : ranks)
    t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_TRUE(got[r] == payload) << "rank " << r;
  }
}

TEST(Rendezvous, RefusesARankOfAnotherJob) {
  const int port = braid::testutil::FreePort();
  absl::Status zero, stranger;
  std::string bytes = "id", theirs;
  std::thread rank0([&] {
    zero = RendezvousBroadcast(config(0, 2, port, 2), "job a", bytes);
  });
  stranger = RendezvousBroadcast(config(1, 2, port, 2), "job b", theirs);
  rank0.join();
  EXPECT_EQ(stranger.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stranger.message().find("runs 'job a' over 2 ranks, not 'job b'"),
            std::string::npos)
      << stranger;
  // Rank 0 waited for its real rank 1, which never came.
  EXPECT_EQ(zero.code(), absl::StatusCode::kDeadlineExceeded) << zero;
  EXPECT_NE(zero.message().find("the job's 1 other ranks (0 joined)"),
            std::string::npos)
      << zero;
}

TEST(Rendezvous, RefusesATakenRank) {
  // Rank 1 joins twice; rank 2 never comes, so rank 0 and the first rank 1
  // time out.
  const int port = braid::testutil::FreePort();
  std::string bytes = "id", first, second;
  absl::Status zero, one, again;
  std::thread rank0([&] {
    zero = RendezvousBroadcast(config(0, 3, port, 2), "job", bytes);
  });
  std::thread rank1([&] {
    one = RendezvousBroadcast(config(1, 3, port, 2), "job", first);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  again = RendezvousBroadcast(config(1, 3, port, 2), "job", second);
  rank0.join();
  rank1.join();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_NE(again.message().find("rank 1 is taken by another process"),
            std::string::npos)
      << again;
  EXPECT_EQ(zero.code(), absl::StatusCode::kDeadlineExceeded) << zero;
  EXPECT_FALSE(one.ok());
}

TEST(Rendezvous, NamesTheAddressItCannotReach) {
  RendezvousConfig c = config(1, 2, braid::testutil::FreePort(), 0.3);
  std::string bytes;
  absl::Status s = RendezvousBroadcast(c, "job", bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 1 joining rank 0 at 127.0.0.1:" +
                             std::to_string(c.port) + ": not reached"),
            std::string::npos)
      << s;
}

TEST(Rendezvous, OneRankNeedsNobody) {
  std::string bytes = "same";
  EXPECT_TRUE(RendezvousBroadcast(config(0, 1, 1), "job", bytes).ok());
  EXPECT_EQ(bytes, "same");
}

/// Sets the rendezvous variables for one test, restoring none (each test
/// sets what it reads).
void setEnv(const char *name, const char *value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}

TEST(Rendezvous, ReadsTheEnvironment) {
  for (const char *v :
       {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "PMI_RANK", "PMI_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "BRAID_RENDEZVOUS_TIMEOUT", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_STEPID"})
    setEnv(v, nullptr);
  absl::StatusOr<RendezvousConfig> c = RendezvousFromEnvironment();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("RANK is not set"), std::string::npos)
      << c.status();
  setEnv("RANK", "3");
  setEnv("WORLD_SIZE", "4");
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 3);
  EXPECT_EQ(c->worldSize, 4);
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->port, 29500);
  EXPECT_EQ(c->localRank, 0);
  setEnv("LOCAL_RANK", "2");
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->localRank, 2);
  setEnv("LOCAL_RANK", nullptr);
  setEnv("MASTER_ADDR", "node7");
  setEnv("MASTER_PORT", "1234");
  setEnv("BRAID_RENDEZVOUS_TIMEOUT", "2.5");
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "node7");
  EXPECT_EQ(c->port, 1234);
  EXPECT_EQ(c->timeoutSeconds, 2.5);
  // mpirun's variables when RANK and WORLD_SIZE are not set.
  setEnv("RANK", nullptr);
  setEnv("WORLD_SIZE", nullptr);
  setEnv("OMPI_COMM_WORLD_RANK", "1");
  setEnv("OMPI_COMM_WORLD_SIZE", "2");
  c = RendezvousFromEnvironment();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->worldSize, 2);
  // Bad values name their variable.
  auto expectError = [](const char *text) {
    absl::StatusOr<RendezvousConfig> bad = RendezvousFromEnvironment();
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(text), std::string::npos)
        << bad.status();
  };
  setEnv("OMPI_COMM_WORLD_RANK", "2");
  expectError("OMPI_COMM_WORLD_RANK='2' is not an integer in [0, 1]");
  setEnv("OMPI_COMM_WORLD_RANK", "1");
  setEnv("LOCAL_RANK", "5");
  expectError("LOCAL_RANK='5' is not an integer in [0, 1]");
  setEnv("LOCAL_RANK", nullptr);
  setEnv("MASTER_PORT", "70000");
  expectError("MASTER_PORT='70000' is not an integer in [1, 65535]");
  setEnv("MASTER_PORT", "1234");
  setEnv("BRAID_RENDEZVOUS_TIMEOUT", "-1");
  expectError("BRAID_RENDEZVOUS_TIMEOUT='-1' is not a positive number");
  for (const char *v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "MASTER_ADDR", "MASTER_PORT",
                        "BRAID_RENDEZVOUS_TIMEOUT"})
    setEnv(v, nullptr);
}

} // namespace
