//===- ChildProcess.cpp - The programs braid starts: mpirun ---------------===//

#include "tools/braid/ChildProcess.h"

#include "llvm/Support/FormatVariadic.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

int64_t braid::machineMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (meminfo >> key) {
    if (key == "MemTotal:" && meminfo >> kib)
      return kib * 1024;
    meminfo.ignore(1 << 20, '\n');
  }
  // Without /proc (not Linux): the pages the system reports.
  return int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
}

namespace braid::tools {
namespace {

// The child signals go to, and the last signal passed on (0: none). Written
// by RunChild before the handlers are installed and read by them.
volatile sig_atomic_t childPid = 0;
volatile sig_atomic_t forwardedSignal = 0;

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

void forward(int signal) {
  forwardedSignal = signal;
  if (childPid > 0)
    ::kill(pid_t(childPid), signal);
}

llvm::Error failure(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

} // namespace

llvm::Expected<ChildExit> RunChild(const std::vector<std::string> &args,
                                   const ChildOptions &options) {
  if (args.empty())
    return failure("no program to run");
  // Everything the child needs is made before fork: after it, the child
  // calls only what is safe in a copy of a threaded process.
  std::vector<char *> argv;
  for (const std::string &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  int outFd = -1, inFd = -1;
  if (options.output) {
    outFd = ::open(options.output->c_str(),
                   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (outFd < 0)
      return failure("cannot write " + *options.output + ": " +
                     std::strerror(errno));
    inFd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  // A pipe closed on exec tells the parent whether exec failed, and why.
  int status[2];
  if (::pipe2(status, O_CLOEXEC) != 0)
    return failure(std::string("cannot start ") + args[0] + ": " +
                   std::strerror(errno));
  // Handlers first (a signal between fork and their installation would
  // end braid alone); they pass signals on once childPid is set.
  forwardedSignal = 0;
  childPid = 0;
  struct sigaction action = {}, old[3];
  action.sa_handler = forward;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i)
    ::sigaction(kForwarded[i], &action, &old[i]);
  auto restore = [&] {
    childPid = 0;
    for (int i = 0; i < 3; ++i)
      ::sigaction(kForwarded[i], &old[i], nullptr);
  };
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    restore();
    ::close(status[0]);
    ::close(status[1]);
    if (outFd >= 0)
      ::close(outFd);
    if (inFd >= 0)
      ::close(inFd);
    return failure(std::string("cannot start ") + args[0] + ": " +
                   std::strerror(err));
  }
  if (pid == 0) {
    // The child: default signal handling, ended with braid.
    for (int s : kForwarded)
      ::signal(s, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent)
      ::_exit(127);
    if (outFd >= 0) {
      ::dup2(outFd, 1);
      ::dup2(outFd, 2);
      if (inFd >= 0)
        ::dup2(inFd, 0);
    }
    ::execv(argv[0], argv.data());
    int err = errno;
    ssize_t ignored = ::write(status[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  childPid = pid;
  // A signal that came before childPid was set is passed on now.
  if (forwardedSignal)
    ::kill(pid, forwardedSignal);
  ::close(status[1]);
  if (outFd >= 0)
    ::close(outFd);
  if (inFd >= 0)
    ::close(inFd);
  int execError = 0;
  ssize_t got;
  do
    got = ::read(status[0], &execError, sizeof execError);
  while (got < 0 && errno == EINTR);
  ::close(status[0]);

  ChildExit exit;
  int wstatus = 0;
  const auto start = std::chrono::steady_clock::now();
  bool terminated = false;
  for (;;) {
    pid_t done = ::waitpid(pid, &wstatus,
                           options.timeoutSeconds > 0 ? WNOHANG : 0);
    if (done == pid)
      break;
    if (done < 0 && errno != EINTR) {
      int err = errno;
      restore();
      return failure(std::string("waiting for ") + args[0] + ": " +
                     std::strerror(err));
    }
    if (options.timeoutSeconds > 0) {
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      if (!terminated && seconds > options.timeoutSeconds) {
        exit.timedOut = terminated = true;
        ::kill(pid, SIGTERM);
      } else if (terminated && seconds > options.timeoutSeconds + 10.0) {
        ::kill(pid, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  restore();
  if (got == sizeof execError && execError != 0)
    return failure(std::string("cannot run ") + args[0] + ": " +
                   std::strerror(execError));
  exit.forwarded = forwardedSignal;
  if (WIFEXITED(wstatus))
    exit.code = WEXITSTATUS(wstatus);
  else if (WIFSIGNALED(wstatus))
    exit.code = 128 + WTERMSIG(wstatus);
  if (exit.forwarded)
    exit.code = 128 + exit.forwarded;
  return exit;
}

llvm::Error CheckRanksFitHere(int64_t ranks, int64_t arenaBytes,
                              const std::string &what) {
  // Below what a rank takes besides its arena: braid-run's resident set for
  // a plan of 5 MiB measured 220 MiB on one rank (libraries, OpenBLAS's
  // buffers), much of it shared between processes.
  constexpr int64_t kProcessBytes = int64_t(32) << 20;
  const double have = double(machineMemoryBytes());
  if (ranks <= 1 || have <= 0)
    return llvm::Error::success();
  const double need = double(ranks) * double(arenaBytes + kProcessBytes);
  if (need <= have)
    return llvm::Error::success();
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  return failure(llvm::formatv(
      "{0} starts its {1} ranks on this machine, and they need at least "
      "{2:f1} GiB ({3:f1} MiB of arena each and some {4} MiB of their own "
      "process) where the machine has {5:f1} GiB: use fewer ranks, or start "
      "braid-run on several machines (mpirun or srun; docs/slurm.md)",
      what, ranks, need / kGiB, double(arenaBytes) / (1024.0 * 1024),
      kProcessBytes >> 20, have / kGiB));
}

} // namespace braid::tools
