//===- WatchdogMpiTest.cpp - Waits with a deadline on a 2 x 2 mesh --------===//
//
// Run by CTest under `mpirun -np 4`, one test per job (--gtest_filter): a
// wait that times out leaves the communicator failed, as it leaves a job
// that is then aborted. Ranks 0..3 are (dp, tp) = (0,0), (0,1), (1,0),
// (1,1). A rank that is to stay away from a wait blocks in plain MPI on
// MPI_COMM_WORLD (not answering the watchdog, as a stopped rank would not)
// until the waiting ranks have checked their errors; then it completes what
// they started, so that the job ends cleanly. The verdict is gathered in
// plain MPI too.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/MpiCommunicator.h"
#include "tests/runtime/comm/MpiTestMain.h"

#include "gtest/gtest.h"

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <thread>
#include <vector>

#include <unistd.h>

using namespace braid;

namespace {

std::unique_ptr<comm::MpiCommunicator> theComm;

plan::Plan meshPlan() {
  plan::Plan plan;
  plan.set_version(plan::SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("dp");
  plan.mutable_mesh()->add_sizes(2);
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(2);
  return plan;
}

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

/// The deadline in these tests, and what a timed-out wait may take beyond
/// it: the watchdog's questions (at most clamp(timeout / 2, 1, 5) = 1 s)
/// and scheduling on an oversubscribed machine.
constexpr double kTimeout = 1.0, kSlack = 1.0 + 1.5;

/// Blocks in plain MPI until `from` says go (a rank that stays away).
void awaitGo(int from) {
  int token = 0;
  MPI_Recv(&token, 1, MPI_INT, from, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}
void sayGo(int to) {
  int token = 1;
  MPI_Send(&token, 1, MPI_INT, to, 99, MPI_COMM_WORLD);
}

// Rank 2 never comes to an all-reduce over the whole mesh: the three others
// wait a second, then name the collective, its group and step, rank 2 as
// not arrived and each other as waiting in the same collective.
TEST(Watchdog, NamesTheRankThatDidNotArrive) {
  int64_t r = theComm->Rank();
  // Written by the all-reduce until it completes, after the test.
  static double x;
  x = double(r + 1);
  if (r == 2) {
    for (int from : {0, 1, 3})
      awaitGo(from);
    theComm->SetTimeout(0);
    ASSERT_TRUE(theComm->AllReduce({"dp", "tp"}, &x, 1, plan::F64).ok());
    EXPECT_EQ(x, 10.0);
    return;
  }
  theComm->SetTimeout(kTimeout);
  theComm->SetWaitContext(7, "the test's sum");
  auto start = std::chrono::steady_clock::now();
  absl::Status s = theComm->AllReduce({"dp", "tp"}, &x, 1, plan::F64);
  double waited = seconds(start);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  std::string m(s.message());
  EXPECT_GE(waited, kTimeout);
  EXPECT_LE(waited, kTimeout + kSlack);
  EXPECT_NE(m.find("collective timeout: waited 1."), std::string::npos) << m;
  EXPECT_NE(m.find("in all-reduce over 'dp,tp' (collective 1 on the group of "
                   "ranks 0,1,2,3) at step 7 (the test's sum)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("; rank 2 had not arrived"), std::string::npos) << m;
  std::string others = r == 0 ? "ranks 1, 3" : r == 1 ? "ranks 0, 3" : "ranks 0, 1";
  EXPECT_NE(m.find("; " + others + " were waiting in the same collective"),
            std::string::npos)
      << m;
  // Later waits fail at once with the same error.
  start = std::chrono::steady_clock::now();
  double y = 1;
  EXPECT_EQ(theComm->AllReduce({"tp"}, &y, 1, plan::F64), s);
  EXPECT_LT(seconds(start), 0.5);
  sayGo(2);
}

// Rank 0 waits for an all-reduce over dp (with rank 2) started earlier;
// rank 2 is in another one, over tp, for which rank 3 does not come. Rank 0
// names what rank 2 waits in; rank 2, whose deadline is longer, answers it
// and completes both once rank 3 comes.
TEST(Watchdog, NamesWhatAnotherRankWaitsIn) {
  int64_t r = theComm->Rank();
  static float x;
  x = float(r + 1);
  if (r == 0) {
    theComm->SetTimeout(kTimeout);
    theComm->SetWaitContext(3, "");
    absl::StatusOr<int64_t> h = theComm->StartAllReduce({"dp"}, &x, 1, plan::F32);
    ASSERT_TRUE(h.ok()) << h.status();
    auto start = std::chrono::steady_clock::now();
    absl::Status s = theComm->Wait(*h);
    double waited = seconds(start);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    std::string m(s.message());
    EXPECT_GE(waited, kTimeout);
    EXPECT_LE(waited, kTimeout + kSlack);
    EXPECT_NE(m.find("in all-reduce over 'dp' (collective 1 on the group of "
                     "ranks 0,2) at step 3;"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("; rank 2 was waiting in all-reduce over 'tp' (collective "
                     "1 on its group) at step 5 (elsewhere) for 1."),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find("not arrived"), std::string::npos) << m;
    sayGo(3);
  } else if (r == 2) {
    theComm->SetTimeout(60);
    theComm->SetWaitContext(5, "elsewhere");
    static float y;
    y = 1;
    ASSERT_TRUE(theComm->AllReduce({"tp"}, &y, 1, plan::F32).ok());
    EXPECT_EQ(y, 2.0f);
    ASSERT_TRUE(theComm->AllReduce({"dp"}, &x, 1, plan::F32).ok());
    EXPECT_EQ(x, 4.0f);
  } else if (r == 3) {
    awaitGo(0);
    static float y;
    y = 1;
    ASSERT_TRUE(theComm->AllReduce({"tp"}, &y, 1, plan::F32).ok());
    EXPECT_EQ(y, 2.0f);
  }
}

/// Rank 2's process id, on every rank (a collective: every rank calls it).
int rank2Pid() {
  int pid = int(getpid());
  std::vector<int> pids(4);
  MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  return pids[2];
}

/// Rank 3's part: once rank 2 says go (and is in its wait 0.3 s later),
/// stops it (SIGSTOP) and resumes it (SIGCONT, as mpirun does before it
/// ends a job's ranks) `resume` seconds after this call.
void stopRank2(int pid, int resume) {
  auto start = std::chrono::steady_clock::now();
  awaitGo(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  std::this_thread::sleep_until(start + std::chrono::seconds(resume));
  ASSERT_EQ(kill(pid, SIGCONT), 0);
}

// Rank 2 is stopped (SIGSTOP, by rank 3) while it waits in an all-reduce
// over tp, and resumed (SIGCONT, as mpirun does before it ends a job's
// ranks) while rank 0, whose all-reduce over dp timed out, waits for its
// answer: the answer comes late from a wait that began before the
// question, so rank 2 is named as not arrived, with where it was stopped.
TEST(Watchdog, NamesAStoppedRankThatAnswersLate) {
  int64_t r = theComm->Rank();
  const int rank2 = rank2Pid();
  static float x, y;
  x = float(r + 1);
  y = 1;
  if (r == 0) {
    // Asked at 4 s, answered once rank 2 runs again at 5 s; the window is
    // 2 s.
    theComm->SetTimeout(4);
    theComm->SetWaitContext(9, "");
    absl::Status s = theComm->AllReduce({"dp"}, &x, 1, plan::F32);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    std::string m(s.message());
    EXPECT_NE(m.find("; rank 2 had not arrived (it answered "), std::string::npos)
        << m;
    EXPECT_NE(m.find(" late, from all-reduce over 'tp' (collective 1 on its "
                     "group) at step 8 (stopped here) for "),
              std::string::npos)
        << m;
    sayGo(3);
  } else if (r == 2) {
    theComm->SetTimeout(60);
    theComm->SetWaitContext(8, "stopped here");
    sayGo(3);
    ASSERT_TRUE(theComm->AllReduce({"tp"}, &y, 1, plan::F32).ok());
    EXPECT_EQ(y, 2.0f);
    ASSERT_TRUE(theComm->AllReduce({"dp"}, &x, 1, plan::F32).ok());
    EXPECT_EQ(x, 4.0f);
  } else if (r == 3) {
    stopRank2(rank2, 5);
    awaitGo(0);
    ASSERT_TRUE(theComm->AllReduce({"tp"}, &y, 1, plan::F32).ok());
    EXPECT_EQ(y, 2.0f);
  }
}

// Rank 2 is stopped (by rank 3) 0.3 s into its all-reduce over tp and
// resumed at 2 s; at 4 s rank 0's all-reduce over dp (with rank 2) times
// out. Rank 2 then answers at once, from its wait over tp, yet it is the
// cause: its answer says it did not run for most of that wait.
TEST(Watchdog, NamesARankStoppedInItsWaitAndResumed) {
  int64_t r = theComm->Rank();
  const int rank2 = rank2Pid();
  static float x, y;
  x = float(r + 1);
  y = 1;
  if (r == 0) {
    theComm->SetTimeout(4);
    theComm->SetWaitContext(11, "");
    absl::Status s = theComm->AllReduce({"dp"}, &x, 1, plan::F32);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    std::string m(s.message());
    const std::string said =
        "; rank 2 had arrived, in all-reduce over 'tp' (collective 1 on its "
        "group) at step 10 (stopped here) for ";
    // EXPECT, not ASSERT: rank 3 waits for the go below.
    size_t at = m.find(said);
    EXPECT_NE(at, std::string::npos) << m;
    const std::string ran = "but did not run for ";
    size_t stalled = at == std::string::npos ? at : m.find(ran, at);
    EXPECT_NE(stalled, std::string::npos) << m;
    // Stopped from 0.3 s to 2 s.
    if (stalled != std::string::npos) {
      EXPECT_GE(std::stod(m.substr(stalled + ran.size())), 1.2) << m;
    }
    sayGo(3);
  } else if (r == 2) {
    theComm->SetTimeout(60);
    theComm->SetWaitContext(10, "stopped here");
    sayGo(3);
    ASSERT_TRUE(theComm->AllReduce({"tp"}, &y, 1, plan::F32).ok());
    EXPECT_EQ(y, 2.0f);
    ASSERT_TRUE(theComm->AllReduce({"dp"}, &x, 1, plan::F32).ok());
    EXPECT_EQ(x, 4.0f);
  } else if (r == 3) {
    stopRank2(rank2, 2);
    awaitGo(0);
    ASSERT_TRUE(theComm->AllReduce({"tp"}, &y, 1, plan::F32).ok());
    EXPECT_EQ(y, 2.0f);
  }
}

// Rank 2 waits in an all-reduce over tp with a 2 s deadline, is stopped
// (SIGSTOP, by rank 3) 0.3 s in and resumed at 4 s: its wait has then passed
// the deadline, and its error says that it did not run for most of it (as
// mpirun resumes a stopped rank before it ends the job), besides rank 3,
// which stays away, as not arrived.
TEST(Watchdog, SaysThatItDidNotRunInItsOwnWait) {
  int64_t r = theComm->Rank();
  const int rank2 = rank2Pid();
  static float y;
  y = 1;
  if (r == 2) {
    theComm->SetTimeout(2);
    theComm->SetWaitContext(5, "");
    sayGo(3);
    absl::Status s = theComm->AllReduce({"tp"}, &y, 1, plan::F32);
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    std::string m(s.message());
    const std::string said = "; this rank did not run for ";
    size_t at = m.find(said);
    ASSERT_NE(at, std::string::npos) << m;
    // Stopped from 0.3 s to 4 s.
    EXPECT_GE(std::stod(m.substr(at + said.size())), 3.0) << m;
    EXPECT_NE(m.find(" s of the wait (stopped or starved of a core)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("; rank 3 had not arrived"), std::string::npos) << m;
    sayGo(3);
  } else if (r == 3) {
    stopRank2(rank2, 4);
    awaitGo(2);
    theComm->SetTimeout(0);
    ASSERT_TRUE(theComm->AllReduce({"tp"}, &y, 1, plan::F32).ok());
    EXPECT_EQ(y, 2.0f);
  }
}

// Rank 1 waits for a message from rank 0 (offset -1 along tp), which rank
// 0 never sends.
TEST(Watchdog, NamesTheSenderThatDidNotArrive) {
  int64_t r = theComm->Rank();
  if (r == 0)
    awaitGo(1);
  if (r != 1)
    return;
  theComm->SetTimeout(kTimeout);
  theComm->SetWaitContext(2, "");
  double x = 0;
  auto start = std::chrono::steady_clock::now();
  absl::Status s = theComm->Recv("tp", -1, &x, 1, plan::F64);
  double waited = seconds(start);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_GE(waited, kTimeout);
  EXPECT_LE(waited, kTimeout + kSlack);
  std::string m(s.message());
  EXPECT_NE(m.find("in receive from rank 0 along 'tp' at step 2; rank 0 had "
                   "not arrived"),
            std::string::npos)
      << m;
  sayGo(0);
}

// Rank 0 waits for its message to rank 2 (offset 1 along dp) to leave;
// rank 2 does not take it. The message is large enough (1 MiB) to wait for
// its receiver rather than leave from a buffer.
TEST(Watchdog, NamesTheReceiverThatDidNotArrive) {
  int64_t r = theComm->Rank();
  constexpr int64_t kCount = 1 << 18;
  if (r == 2) {
    awaitGo(0);
    std::vector<float> in(kCount);
    ASSERT_TRUE(theComm->Recv("dp", -1, in.data(), kCount, plan::F32).ok());
    EXPECT_EQ(in[kCount - 1], 7.0f);
    return;
  }
  if (r != 0)
    return;
  theComm->SetTimeout(kTimeout);
  theComm->SetWaitContext(4, "");
  std::vector<float> out(kCount, 7.0f);
  ASSERT_TRUE(theComm->Send("dp", 1, out.data(), kCount, plan::F32).ok());
  auto start = std::chrono::steady_clock::now();
  absl::Status s = theComm->WaitSends();
  double waited = seconds(start);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_GE(waited, kTimeout);
  EXPECT_LE(waited, kTimeout + kSlack);
  std::string m(s.message());
  EXPECT_NE(m.find("in sends to rank 2 along 'dp' at step 4; rank 2 had not "
                   "arrived"),
            std::string::npos)
      << m;
  sayGo(2);
}

// A rank that comes late, but within the deadline, is waited for: the sum
// is complete and nothing fails.
TEST(Watchdog, WaitsForALateRankWithinTheDeadline) {
  int64_t r = theComm->Rank();
  theComm->SetTimeout(5);
  if (r == 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::vector<double> x = {double(r + 1)};
  absl::Status s = theComm->AllReduce({"dp", "tp"}, x.data(), 1, plan::F64);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(x[0], 10.0);
  absl::StatusOr<int64_t> h =
      theComm->StartAllReduce({"dp"}, x.data(), 1, plan::F64);
  ASSERT_TRUE(h.ok()) << h.status();
  if (r == 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(theComm->Wait(*h).ok());
  EXPECT_EQ(x[0], 20.0);
}

} // namespace

int main(int argc, char **argv) {
  return braid::comm_test::RunMpiTests(argc, argv, meshPlan(), theComm);
}
