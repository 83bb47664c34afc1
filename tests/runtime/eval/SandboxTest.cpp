//===- SandboxTest.cpp - Containment of sandboxed programs ----------------===//
//
// Each case runs a Python program in the sandbox and then checks, from the
// host, that it stayed contained: the files it tried to write do not exist,
// the host's listener saw no connection, no process of it is left in /proc,
// the run ended within its limits. A machine that cannot make the sandbox
// (no bwrap, user namespaces refused) skips them, with bwrap's reason; any
// other failure to run is an error.
//
//===----------------------------------------------------------------------===//

#include "runtime/eval/Sandbox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <arpa/inet.h>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace braid::eval {
namespace {

using Clock = std::chrono::steady_clock;

/// Runs `expr` (a StatusOr<SandboxResult>) into `name`; skips the test when
/// the sandbox cannot be made here, fails it on any other error.
#define RUN_OR_SKIP(name, expr)                                                \
  auto name##OrError = (expr);                                                 \
  if (absl::IsFailedPrecondition(name##OrError.status()))                      \
    GTEST_SKIP() << name##OrError.status();                                    \
  ASSERT_TRUE(name##OrError.ok()) << name##OrError.status();                   \
  const SandboxResult &name = *name##OrError

constexpr const char *kPython = "/usr/bin/python3";

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool exists(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

/// A name no earlier run used.
std::string uniqueName(const std::string &what) {
  static int counter = 0;
  return what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(++counter) + "-" +
         std::to_string(Clock::now().time_since_epoch().count());
}

/// The number of processes whose command line contains `marker`.
int processesWith(const std::string &marker) {
  int count = 0;
  DIR *proc = ::opendir("/proc");
  if (!proc)
    return -1;
  while (struct dirent *entry = ::readdir(proc)) {
    std::string name = entry->d_name;
    if (name.empty() ||
        !std::all_of(name.begin(), name.end(),
                     [](unsigned char c) { return std::isdigit(c); }))
      continue;
    std::ifstream in("/proc/" + name + "/cmdline", std::ios::binary);
    std::stringstream cmdline;
    cmdline << in.rdbuf();
    if (cmdline.str().find(marker) != std::string::npos)
      ++count;
  }
  ::closedir(proc);
  return count;
}

class SandboxTest : public ::testing::Test {
protected:
  void SetUp() override {
    // Made once here, so that the first run's probe is not timed by a case.
    absl::Status available = CheckSandbox();
    if (absl::IsFailedPrecondition(available))
      GTEST_SKIP() << available;
    ASSERT_TRUE(available.ok()) << available;
  }
};

TEST_F(SandboxTest, PassingProgramExitsZeroWithItsOutput) {
  RUN_OR_SKIP(result, RunPython("import sys\n"
                                "print(sum(range(10)))\n"
                                "sys.stderr.write('note\\n')\n",
                                SandboxLimits()));
  EXPECT_EQ(result.exitCode, 0);
  EXPECT_EQ(result.signal, 0);
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.stdoutText, "45\n");
  EXPECT_EQ(result.stderrText, "note\n");
}

TEST_F(SandboxTest, StandardInputReachesTheProgram) {
  RUN_OR_SKIP(result,
              RunSandboxed({kPython, "-I", "-S", "-c",
                            "import sys; print(sys.stdin.read()[::-1])"},
                           "abc", SandboxLimits()));
  EXPECT_EQ(result.exitCode, 0) << result.stderrText;
  EXPECT_EQ(result.stdoutText, "cba\n");
}

TEST_F(SandboxTest, FailingAssertIsANonzeroExit) {
  RUN_OR_SKIP(result, RunPython("assert 1 + 1 == 3\n", SandboxLimits()));
  // An uncaught exception ends Python with status 1.
  EXPECT_EQ(result.exitCode, 1);
  EXPECT_EQ(result.signal, 0);
  EXPECT_FALSE(result.timedOut);
  EXPECT_NE(result.stderrText.find("AssertionError"), std::string::npos)
      << result.stderrText;
}

TEST_F(SandboxTest, OutputIsTruncatedWithoutBlockingTheProgram) {
  // A megabyte on each stream, interleaved: far past a pipe's buffer.
  RUN_OR_SKIP(result, RunPython("import sys\n"
                                "for _ in range(256):\n"
                                "    sys.stdout.write('o' * 4096)\n"
                                "    sys.stderr.write('e' * 4096)\n",
                                SandboxLimits()));
  EXPECT_EQ(result.exitCode, 0);
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.stdoutText, std::string(kSandboxOutputLimit, 'o'));
  EXPECT_EQ(result.stderrText, std::string(kSandboxOutputLimit, 'e'));
}

TEST_F(SandboxTest, WritesOutsideFailAndLeaveNothingOnTheHost) {
  // A directory of the host that anyone may write: only the sandbox keeps
  // the program out of it.
  char pattern[] = "/tmp/braid-sandbox-host-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  std::string hostDir = pattern;
  ASSERT_EQ(::chmod(hostDir.c_str(), 0777), 0);
  const char *home = std::getenv("HOME");
  std::string name = uniqueName("braid-sandbox-escape");
  std::vector<std::string> targets = {
      "/etc/" + name, "/usr/" + name,
      std::string(home && *home ? home : "/root") + "/" + name, "/work/" + name,
      hostDir + "/" + name};
  std::string program = "import os\n"
                        "for path in [";
  for (const std::string &target : targets)
    program += "'" + target + "', ";
  program += "]:\n"
             "    try:\n"
             "        with open(path, 'w') as f:\n"
             "            f.write('escaped')\n"
             "        print('wrote', path)\n"
             "    except OSError:\n"
             "        print('blocked', path)\n"
             // The working directory is the one writable place of its own.
             "with open('own', 'w') as f:\n"
             "    f.write('x')\n"
             "print('cwd', os.getcwd())\n";
  RUN_OR_SKIP(result, RunPython(program, SandboxLimits()));
  EXPECT_EQ(result.exitCode, 0) << result.stderrText;
  for (const std::string &target : targets) {
    EXPECT_NE(result.stdoutText.find("blocked " + target + "\n"),
              std::string::npos)
        << result.stdoutText;
    EXPECT_FALSE(exists(target)) << target;
    ::unlink(target.c_str());
  }
  EXPECT_NE(result.stdoutText.find(std::string("cwd ") + kSandboxWorkDirectory +
                                   "\n"),
            std::string::npos)
      << result.stdoutText;
  ::rmdir(hostDir.c_str());
}

TEST_F(SandboxTest, HostFilesOutsideTheBindsAreInvisible) {
  // One file in the directory the test runs in (the build tree, under
  // /work here) and one in the host's /tmp, both readable by anyone.
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  std::vector<std::string> secrets = {
      std::string(cwd) + "/" + uniqueName("braid-sandbox-secret"),
      "/tmp/" + uniqueName("braid-sandbox-secret")};
  for (const std::string &path : secrets) {
    std::ofstream(path) << "host secret";
    ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  }
  std::string program = "for path in [";
  for (const std::string &path : secrets)
    program += "'" + path + "', ";
  program += "]:\n"
             "    try:\n"
             "        print('read', path, open(path).read())\n"
             "    except OSError:\n"
             "        print('missing', path)\n";
  RUN_OR_SKIP(result, RunPython(program, SandboxLimits()));
  for (const std::string &path : secrets)
    ::unlink(path.c_str());
  EXPECT_EQ(result.exitCode, 0) << result.stderrText;
  for (const std::string &path : secrets)
    EXPECT_NE(result.stdoutText.find("missing " + path + "\n"),
              std::string::npos)
        << result.stdoutText;
  EXPECT_EQ(result.stdoutText.find("host secret"), std::string::npos);
}

TEST_F(SandboxTest, ForkBombEndsWithinTheWallLimitAndLeavesNoProcess) {
  SandboxLimits limits;
  limits.wallSeconds = 3;
  limits.processes = 16;
  // The marker is an argument of every process of the bomb (a fork keeps
  // the command line), and of bwrap's.
  std::string marker = uniqueName("braid-sandbox-forkbomb");
  std::vector<std::string> argv = {kPython,
                                   "-I",
                                   "-S",
                                   "-c",
                                   "import os\n"
                                   "while True:\n"
                                   "    try:\n"
                                   "        os.fork()\n"
                                   "    except OSError:\n"
                                   "        pass\n",
                                   marker};
  absl::StatusOr<SandboxResult> run;
  std::atomic<bool> done{false};
  Clock::time_point start = Clock::now();
  std::thread runner([&] {
    run = RunSandboxed(argv, "", limits);
    done = true;
  });
  // While it runs, the scan of /proc finds the bomb (so that finding
  // nothing afterwards means something), never more of it than the limit
  // allows: the sandbox's init and the forks, plus bwrap outside.
  int most = 0;
  while (!done) {
    most = std::max(most, processesWith(marker));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  runner.join();
  double seconds = secondsSince(start);
  if (absl::IsFailedPrecondition(run.status()))
    GTEST_SKIP() << run.status();
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_GT(most, 0);
  EXPECT_LE(most, limits.processes + 1);
  EXPECT_TRUE(run->timedOut);
  EXPECT_LT(seconds, limits.wallSeconds + 3) << seconds;
  EXPECT_EQ(processesWith(marker), 0);
}

TEST_F(SandboxTest, ProcessLimitCountsTheSandboxsProcesses) {
  SandboxLimits limits;
  limits.processes = 8;
  RUN_OR_SKIP(result, RunPython("import os\n"
                                "r, w = os.pipe()\n"
                                "count = 0\n"
                                "for _ in range(50):\n"
                                "    try:\n"
                                "        pid = os.fork()\n"
                                "    except OSError:\n"
                                "        break\n"
                                "    if pid == 0:\n"
                                "        os.close(w)\n"
                                "        os.read(r, 1)\n"
                                "        os._exit(0)\n"
                                "    count += 1\n"
                                "os.close(w)\n"
                                "print(count)\n",
                                limits));
  EXPECT_EQ(result.exitCode, 0) << result.stderrText;
  // RLIMIT_NPROC counts the sandbox's init and the program: the rest of the
  // limit is what the program can fork, though the test runs as root.
  EXPECT_EQ(result.stdoutText, std::to_string(limits.processes - 2) + "\n");
}

TEST_F(SandboxTest, NoConnectionReachesAHostListener) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      ::bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof(address)),
      0);
  ASSERT_EQ(::listen(listener, 8), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(
      ::getsockname(listener, reinterpret_cast<sockaddr *>(&address), &length),
      0);
  int port = ntohs(address.sin_port);
  RUN_OR_SKIP(result, RunPython("import socket\n"
                                "s = socket.socket()\n"
                                "s.settimeout(2)\n"
                                "try:\n"
                                "    s.connect(('127.0.0.1', " +
                                    std::to_string(port) +
                                    "))\n"
                                    "    print('connected')\n"
                                    "except OSError as e:\n"
                                    "    print('failed', e.errno)\n",
                                SandboxLimits()));
  EXPECT_EQ(result.exitCode, 0) << result.stderrText;
  EXPECT_EQ(result.stdoutText.rfind("failed", 0), 0u) << result.stdoutText;
  ASSERT_EQ(::fcntl(listener, F_SETFL, O_NONBLOCK), 0);
  int accepted = ::accept(listener, nullptr, nullptr);
  int err = errno;
  EXPECT_LT(accepted, 0);
  EXPECT_EQ(err, EAGAIN);
  ::close(listener);
}

TEST_F(SandboxTest, SleepIsKilledAtTheWallLimit) {
  SandboxLimits limits;
  limits.wallSeconds = 1.5;
  Clock::time_point start = Clock::now();
  RUN_OR_SKIP(result, RunPython("import time\ntime.sleep(1e9)\n", limits));
  double seconds = secondsSince(start);
  EXPECT_TRUE(result.timedOut);
  EXPECT_EQ(result.signal, SIGKILL);
  EXPECT_GE(seconds, limits.wallSeconds);
  EXPECT_LT(seconds, limits.wallSeconds + 2) << seconds;
}

TEST_F(SandboxTest, MemoryLimitRefusesFourGiB) {
  SandboxLimits limits;
  limits.memoryBytes = int64_t(512) << 20;
  // Within the limit, an allocation works (the limit leaves Python room).
  RUN_OR_SKIP(small,
              RunPython("b = bytearray(64 << 20)\nprint(len(b))\n", limits));
  EXPECT_EQ(small.exitCode, 0) << small.stderrText;
  EXPECT_EQ(small.stdoutText, std::to_string(64 << 20) + "\n");
  RUN_OR_SKIP(large, RunPython("b = bytearray(4 << 30)\n", limits));
  EXPECT_EQ(large.exitCode, 1);
  EXPECT_FALSE(large.timedOut);
  EXPECT_NE(large.stderrText.find("MemoryError"), std::string::npos)
      << large.stderrText;
}

TEST_F(SandboxTest, CpuSpinIsKilledByTheCpuLimit) {
  SandboxLimits limits;
  limits.cpuSeconds = 1;
  limits.wallSeconds = 30;
  Clock::time_point start = Clock::now();
  RUN_OR_SKIP(result, RunPython("while True:\n    pass\n", limits));
  double seconds = secondsSince(start);
  EXPECT_FALSE(result.timedOut);
  // SIGXCPU at the soft limit; SIGKILL at the hard one, a second later.
  EXPECT_TRUE(result.signal == SIGXCPU || result.signal == SIGKILL)
      << result.signal;
  EXPECT_EQ(result.exitCode, -1);
  EXPECT_LT(seconds, limits.wallSeconds / 2) << seconds;
}

TEST(SandboxSetupTest, MissingBwrapIsAFailedPrecondition) {
  absl::Status status = CheckSandbox("/nonexistent/bin/bwrap");
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("bubblewrap"), std::string::npos) << status;
}

TEST(SandboxSetupTest, InterpreterMustBeVisibleInTheSandbox) {
  auto result =
      RunPython("print(1)\n", SandboxLimits(), "/root/.local/bin/python3");
  EXPECT_TRUE(absl::IsInvalidArgument(result.status())) << result.status();
}

TEST(SandboxSetupTest, LimitsAreChecked) {
  SandboxLimits limits;
  limits.processes = 1;
  auto result = RunPython("print(1)\n", limits);
  EXPECT_TRUE(absl::IsInvalidArgument(result.status())) << result.status();
  // Times past a day (infinite ones, and ones whose nanoseconds would not
  // fit the clock) are refused before anything runs, as are NaN and 0.
  for (double seconds : {std::numeric_limits<double>::infinity(), 1e11,
                         kMaxSandboxSeconds + 1, std::nan(""), 0.0}) {
    for (bool wall : {true, false}) {
      SandboxLimits timed;
      (wall ? timed.wallSeconds : timed.cpuSeconds) = seconds;
      auto refused = RunPython("print(1)\n", timed);
      EXPECT_TRUE(absl::IsInvalidArgument(refused.status()))
          << seconds << " " << wall << ": " << refused.status();
    }
  }
}

} // namespace
} // namespace braid::eval
