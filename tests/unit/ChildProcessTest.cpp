//===- ChildProcessTest.cpp - The programs braid starts -------------------===//
//
// tools::RunChild on /bin/sh programs: an exit status, a signal that ends
// the child, one braid receives and passes on, a timeout, output to a file,
// and a program that cannot be run. CheckRanksFitHere against this
// machine's memory.
//
//===----------------------------------------------------------------------===//

#include "tools/braid/ChildProcess.h"

#include "gtest/gtest.h"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace braid::tools {
namespace {

ChildExit run(const std::string &script, const ChildOptions &options = {}) {
  llvm::Expected<ChildExit> ended =
      RunChild({"/bin/sh", "-c", script}, options);
  if (!ended) {
    ADD_FAILURE() << llvm::toString(ended.takeError());
    return {};
  }
  return *ended;
}

TEST(RunChild, ReturnsTheExitStatus) {
  EXPECT_EQ(run("exit 0").code, 0);
  ChildExit e = run("exit 3");
  EXPECT_EQ(e.code, 3);
  EXPECT_EQ(e.forwarded, 0);
  EXPECT_FALSE(e.timedOut);
}

TEST(RunChild, ASignalThatEndsTheChildIs128Plus) {
  EXPECT_EQ(run("kill -KILL $$").code, 128 + SIGKILL);
}

TEST(RunChild, PassesASignalToBraidOnToTheChild) {
  // SIGTERM to this process while the child sleeps: the child ends by it,
  // this process does not, and the result says it was passed on.
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(::getpid(), SIGTERM);
  });
  ChildExit e = run("exec sleep 30");
  sender.join();
  EXPECT_EQ(e.forwarded, SIGTERM);
  EXPECT_EQ(e.code, 128 + SIGTERM);
  // The handlers are this process's own again (default: SIGTERM would end
  // it), checked without raising it.
  struct sigaction now;
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST(RunChild, ATimeoutEndsTheChild) {
  ChildOptions options;
  options.timeoutSeconds = 1;
  ChildExit e = run("exec sleep 30", options);
  EXPECT_TRUE(e.timedOut);
  EXPECT_EQ(e.code, 128 + SIGTERM);
}

TEST(RunChild, WritesItsOutputToTheFileGiven) {
  char path[] = "/tmp/braid-child-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  ChildOptions options;
  options.output = path;
  EXPECT_EQ(run("echo out; echo err >&2; cat", options).code, 0);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  // Both streams, and standard input from /dev/null (cat ends at once).
  EXPECT_EQ(text.str(), "out\nerr\n");
  std::remove(path);
}

TEST(RunChild, AProgramThatCannotRunIsAnErrorNamingIt) {
  llvm::Expected<ChildExit> ended = RunChild({"/no/such/program"});
  ASSERT_FALSE(ended);
  std::string message = llvm::toString(ended.takeError());
  EXPECT_NE(message.find("cannot run /no/such/program"), std::string::npos)
      << message;
  llvm::Expected<ChildExit> none = RunChild({});
  EXPECT_FALSE(bool(none));
  llvm::consumeError(none.takeError());
  ChildOptions options;
  options.output = "/no/such/dir/log";
  ended = RunChild({"/bin/true"}, options);
  ASSERT_FALSE(ended);
  message = llvm::toString(ended.takeError());
  EXPECT_NE(message.find("cannot write /no/such/dir/log"), std::string::npos)
      << message;
}

TEST(CheckRanksFitHere, AWorldBeyondTheMachinesMemoryIsRefused) {
  // Small worlds fit; one rank is never refused (its arena's own mapping
  // says what is wrong).
  for (auto [ranks, arena] : {std::pair<int64_t, int64_t>{4, 1 << 20},
                              {1, int64_t(1) << 62}}) {
    llvm::Error fits = CheckRanksFitHere(ranks, arena, "braid train");
    EXPECT_FALSE(bool(fits)) << ranks;
    llvm::consumeError(std::move(fits));
  }
  llvm::Error e = CheckRanksFitHere(2, machineMemoryBytes(), "braid train");
  ASSERT_TRUE(bool(e));
  std::string message = llvm::toString(std::move(e));
  EXPECT_NE(message.find("braid train starts its 2 ranks on this machine"),
            std::string::npos)
      << message;
}

} // namespace
} // namespace braid::tools
