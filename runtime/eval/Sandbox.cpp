//===- Sandbox.cpp - Running untrusted programs ---------------------------===//
//
// RunSandboxed forks a child that sets the limits, drops root, and executes
// bwrap; the parent feeds nothing (standard input is an unlinked file) and
// reads standard output, standard error and bwrap's --info-fd through poll
// until they close or the wall limit passes. bwrap's info names the
// sandbox's init (pid 1 of its pid namespace, seen from here): a pidfd on it
// lets the parent kill it and wait until it, and so every process of its
// namespace, is gone.
//
//===----------------------------------------------------------------------===//

#include "runtime/eval/Sandbox.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <initializer_list>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>

namespace braid::eval {
namespace {

using Clock = std::chrono::steady_clock;

/// The user a sandbox started by root runs as (Debian's nobody/nogroup).
constexpr uid_t kSandboxUid = 65534;
constexpr gid_t kSandboxGid = 65534;

/// Sets RLIMIT_NPROC inside the sandbox and executes the program. It must lie
/// under /usr, which the sandbox sees.
constexpr const char *kPrlimit = "/usr/bin/prlimit";

/// How long the sandbox may take to go away once killed.
constexpr auto kKillGrace = std::chrono::seconds(5);

constexpr const char *kInstallHint =
    "install the Debian package bubblewrap (scripts/setup.sh installs it)";
constexpr const char *kNamespaceHint =
    "allow unprivileged user namespaces (sysctl user.max_user_namespaces "
    "above 0; kernel.unprivileged_userns_clone=1 on kernels that have it; "
    "kernel.apparmor_restrict_unprivileged_userns=0 where AppArmor restricts "
    "them)";

absl::Status errnoStatus(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(err)));
}

/// A file descriptor closed when it goes out of scope.
class Fd {
public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd &&other) : fd_(other.release()) {}
  Fd &operator=(Fd &&other) {
    reset(other.release());
    return *this;
  }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = fd;
  }

private:
  int fd_ = -1;
};

absl::Status makePipe(Fd &readEnd, Fd &writeEnd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return errnoStatus("pipe2", errno);
  readEnd.reset(fds[0]);
  writeEnd.reset(fds[1]);
  return absl::OkStatus();
}

/// Removes `path` and everything under it, without following links.
/// Directories are made searchable first: the program may have taken the
/// permissions away (only the sandbox's user, or root, runs this).
void removeTree(const std::string &path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0)
    return;
  if (!S_ISDIR(st.st_mode)) {
    ::unlink(path.c_str());
    return;
  }
  ::chmod(path.c_str(), 0700);
  if (DIR *dir = ::opendir(path.c_str())) {
    std::vector<std::string> names;
    while (struct dirent *entry = ::readdir(dir)) {
      absl::string_view name = entry->d_name;
      if (name != "." && name != "..")
        names.emplace_back(name);
    }
    ::closedir(dir);
    for (const std::string &name : names)
      removeTree(path + "/" + name);
  }
  ::rmdir(path.c_str());
}

/// Whether this process is the host's root: uid 0, mapped to uid 0 by its
/// user namespace (a container's root mapped to an unprivileged host user is
/// not). The sandbox then runs as kSandboxUid instead.
bool runsAsHostRoot() {
  if (::geteuid() != 0)
    return false;
  std::FILE *map = std::fopen("/proc/self/uid_map", "r");
  if (!map)
    return true;
  bool hostRoot = false;
  long long inside, outside, count;
  while (std::fscanf(map, "%lld %lld %lld", &inside, &outside, &count) == 3)
    if (inside <= 0 && 0 < inside + count)
      hostRoot = outside - inside == 0;
  std::fclose(map);
  return hostRoot;
}

/// Gives `path` (or the open `fd` on it, when not -1) to the sandbox's user
/// when the sandbox drops root; nothing otherwise.
absl::Status handToSandboxUser(const std::string &path, int fd) {
  if (!runsAsHostRoot())
    return absl::OkStatus();
  if ((fd >= 0 ? ::fchown(fd, kSandboxUid, kSandboxGid)
               : ::chown(path.c_str(), kSandboxUid, kSandboxGid)) == 0)
    return absl::OkStatus();
  if (errno == EINVAL)
    return absl::FailedPreconditionError(absl::StrCat(
        "run as root, the sandbox runs programs as uid ", kSandboxUid,
        " (nobody), which this user namespace does not map: map it, or run "
        "as an unprivileged user"));
  return errnoStatus(absl::StrCat("chown ", path), errno);
}

/// A fresh directory for one run, handed to the sandbox's user; removed with
/// everything in it when this goes out of scope.
class WorkDirectory {
public:
  static absl::StatusOr<WorkDirectory> Create() {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern =
        absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/braid-sandbox-XXXXXX");
    if (!::mkdtemp(pattern.data()))
      return errnoStatus(absl::StrCat("mkdtemp ", pattern), errno);
    WorkDirectory dir(pattern);
    if (absl::Status s = handToSandboxUser(pattern, -1); !s.ok())
      return s;
    return dir;
  }
  WorkDirectory(WorkDirectory &&other) : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  WorkDirectory(const WorkDirectory &) = delete;
  WorkDirectory &operator=(const WorkDirectory &) = delete;
  WorkDirectory &operator=(WorkDirectory &&) = delete;
  ~WorkDirectory() {
    if (!path_.empty())
      removeTree(path_);
  }
  const std::string &path() const { return path_; }

private:
  explicit WorkDirectory(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

/// `name` found on PATH, then in /usr/bin; empty when neither has it.
std::string findExecutable(const std::string &name) {
  std::vector<std::string> dirs;
  if (const char *path = std::getenv("PATH"))
    dirs = absl::StrSplit(path, ':', absl::SkipEmpty());
  dirs.push_back("/usr/bin");
  for (const std::string &dir : dirs) {
    std::string candidate = absl::StrCat(dir, "/", name);
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  return "";
}

/// bwrap's command line for a run in `workDirectory`, ending with `argv`
/// behind prlimit.
std::vector<std::string> bwrapCommand(const std::string &bwrap,
                                      const std::string &workDirectory,
                                      const std::vector<std::string> &argv,
                                      const SandboxLimits &limits) {
  std::string fileBytes = absl::StrCat(limits.fileBytes);
  std::vector<std::string> cmd = {bwrap};
  auto add = [&cmd](std::initializer_list<std::string> args) {
    cmd.insert(cmd.end(), args);
  };
  add({"--unshare-all", "--unshare-user", "--disable-userns"});
  add({"--die-with-parent", "--new-session", "--cap-drop", "ALL"});
  add({"--hostname", "braid-sandbox"});
  add({"--clearenv", "--setenv", "PATH", "/usr/bin:/bin"});
  add({"--info-fd", "3"});
  add({"--ro-bind", "/usr", "/usr"});
  // The top-level directories that are links into /usr on a merged-/usr
  // system are the same links here; where they are directories, read-only
  // binds.
  for (const char *top :
       {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st;
    if (::lstat(top, &st) != 0)
      continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(top, target, sizeof(target) - 1);
      if (n > 0)
        add({"--symlink", std::string(target, n), top});
    } else if (S_ISDIR(st.st_mode)) {
      add({"--ro-bind", top, top});
    }
  }
  // Of /etc, what the dynamic loader and the interpreter read.
  for (const char *etc :
       {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
        "/etc/localtime", "/etc/alternatives"})
    add({"--ro-bind-try", etc, etc});
  add({"--proc", "/proc"});
  add({"--dev", "/dev"});
  add({"--size", fileBytes, "--tmpfs", "/dev/shm"});
  add({"--remount-ro", "/dev"});
  add({"--size", fileBytes, "--tmpfs", "/tmp"});
  add({"--bind", workDirectory, kSandboxWorkDirectory});
  add({"--chdir", kSandboxWorkDirectory});
  add({"--remount-ro", "/"});
  add({"--", kPrlimit,
       absl::StrCat("--nproc=", limits.processes, ":", limits.processes),
       "--"});
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return cmd;
}

/// Writes `text` to an unlinked temporary file and returns it open at its
/// start: the sandbox's standard input, read at the program's pace without
/// the parent writing into a pipe.
absl::StatusOr<Fd> stdinFile(const std::string &text) {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/braid-sandbox-stdin-XXXXXX");
  Fd fd(::mkostemp(pattern.data(), O_CLOEXEC));
  if (!fd)
    return errnoStatus(absl::StrCat("mkostemp ", pattern), errno);
  ::unlink(pattern.c_str());
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errnoStatus("writing the sandbox's standard input", errno);
    done += n;
  }
  if (::lseek(fd.get(), 0, SEEK_SET) != 0)
    return errnoStatus("lseek", errno);
  return fd;
}

/// What the child reports through its error pipe when it fails before bwrap
/// runs.
struct ChildFailure {
  int step;
  int err;
};

enum ChildStep { kStepFds = 1, kStepLimits, kStepUser, kStepExec };

/// Everything the child needs, prepared before fork: after it, the child
/// only makes async-signal-safe calls.
struct ChildPlan {
  std::vector<char *> argv;
  std::vector<char *> envp;
  int fds[4]; ///< stdin, stdout, stderr, bwrap's info
  int errorFd;
  int maxFd;
  struct rlimit cpu, as, fsize, core;
  bool dropRoot;
};

[[noreturn]] void childFail(const ChildPlan &plan, int step) {
  ChildFailure failure{step, errno};
  ssize_t ignored = ::write(plan.errorFd, &failure, sizeof(failure));
  (void)ignored;
  ::_exit(127);
}

[[noreturn]] void runChild(ChildPlan &plan) {
  ::setpgid(0, 0);
  // A clean signal state: nothing blocked or ignored is passed on.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      ::signal(sig, SIG_DFL);
  // Move the descriptors above the ones they go to, then into place: 0-2
  // the standard streams, 3 bwrap's info, 4 the error pipe (close on exec).
  int moved[5];
  int sources[5] = {plan.fds[0], plan.fds[1], plan.fds[2], plan.fds[3],
                    plan.errorFd};
  for (int i = 0; i < 5; ++i)
    if ((moved[i] = ::fcntl(sources[i], F_DUPFD_CLOEXEC, 10)) < 0)
      childFail(plan, kStepFds);
  for (int i = 0; i < 4; ++i)
    if (::dup2(moved[i], i) < 0)
      childFail(plan, kStepFds);
  if (::dup3(moved[4], 4, O_CLOEXEC) < 0)
    childFail(plan, kStepFds);
  plan.errorFd = 4;
  // Nothing else the parent had open reaches the sandbox.
  bool closed = false;
#ifdef SYS_close_range
  closed = ::syscall(SYS_close_range, 5u, ~0u, 0u) == 0;
#endif
  if (!closed)
    for (int fd = 5; fd <= plan.maxFd; ++fd)
      ::close(fd);
  if (::setrlimit(RLIMIT_CPU, &plan.cpu) != 0 ||
      ::setrlimit(RLIMIT_AS, &plan.as) != 0 ||
      ::setrlimit(RLIMIT_FSIZE, &plan.fsize) != 0 ||
      ::setrlimit(RLIMIT_CORE, &plan.core) != 0)
    childFail(plan, kStepLimits);
  if (plan.dropRoot &&
      (::setgroups(0, nullptr) != 0 || ::setgid(kSandboxGid) != 0 ||
       ::setuid(kSandboxUid) != 0))
    childFail(plan, kStepUser);
  ::execve(plan.argv[0], plan.argv.data(), plan.envp.data());
  childFail(plan, kStepExec);
}

/// The number after `"key":` in bwrap's info JSON, or -1.
int64_t infoNumber(absl::string_view json, absl::string_view key) {
  size_t at = json.find(absl::StrCat("\"", key, "\""));
  if (at == absl::string_view::npos)
    return -1;
  at = json.find(':', at);
  if (at == absl::string_view::npos)
    return -1;
  size_t begin = json.find_first_not_of(" \t\n", at + 1);
  if (begin == absl::string_view::npos)
    return -1;
  size_t end = json.find_first_not_of("0123456789", begin);
  int64_t value;
  if (!absl::SimpleAtoi(json.substr(begin, end - begin), &value))
    return -1;
  return value;
}

/// A pidfd on the sandbox's init, named by bwrap's info; invalid when the
/// info is incomplete or the init is already gone. The pid is checked to
/// still be that init (its pid namespace is the one bwrap reported) after
/// the pidfd is opened, so a reused pid is never taken for it.
Fd openSandboxInit(absl::string_view info) {
  int64_t pid = infoNumber(info, "child-pid");
  int64_t pidNamespace = infoNumber(info, "pid-namespace");
  if (pid <= 0 || pidNamespace <= 0)
    return Fd();
#ifdef SYS_pidfd_open
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd)
    return Fd();
  char link[64];
  ssize_t n = ::readlink(absl::StrCat("/proc/", pid, "/ns/pid").c_str(), link,
                         sizeof(link));
  if (n <= 0 ||
      absl::string_view(link, n) != absl::StrCat("pid:[", pidNamespace, "]"))
    return Fd();
  return pidfd;
#else
  return Fd();
#endif
}

/// Kills the sandbox's init through `pidfd` (the kernel then kills the rest
/// of its pid namespace) and waits, until `deadline`, for it to have exited;
/// its exit comes after every other process of the namespace's.
void killAndAwaitInit(const Fd &pidfd, Clock::time_point deadline) {
  if (!pidfd)
    return;
#ifdef SYS_pidfd_send_signal
  ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
#endif
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0)
      return;
    struct pollfd p = {pidfd.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0 || (n < 0 && errno != EINTR))
      return;
  }
}

int millisUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count() + 1));
}

/// One run of `argv` in a sandbox on `workDirectory` (which the sandbox's
/// user can write).
absl::StatusOr<SandboxResult> runIn(const std::string &bwrap,
                                    const std::string &workDirectory,
                                    const std::vector<std::string> &argv,
                                    const std::string &stdinText,
                                    const SandboxLimits &limits) {
  std::vector<std::string> command =
      bwrapCommand(bwrap, workDirectory, argv, limits);
  auto input = stdinFile(stdinText);
  if (!input.ok())
    return input.status();
  Fd outRead, outWrite, errRead, errWrite, infoRead, infoWrite, failRead,
      failWrite;
  std::pair<Fd *, Fd *> pipes[] = {{&outRead, &outWrite},
                                   {&errRead, &errWrite},
                                   {&infoRead, &infoWrite},
                                   {&failRead, &failWrite}};
  for (auto [readEnd, writeEnd] : pipes)
    if (absl::Status s = makePipe(*readEnd, *writeEnd); !s.ok())
      return s;

  ChildPlan plan;
  for (std::string &arg : command)
    plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  static char envPath[] = "PATH=/usr/bin:/bin";
  plan.envp = {envPath, nullptr};
  plan.fds[0] = input->get();
  plan.fds[1] = outWrite.get();
  plan.fds[2] = errWrite.get();
  plan.fds[3] = infoWrite.get();
  plan.errorFd = failWrite.get();
  struct rlimit files;
  plan.maxFd = ::getrlimit(RLIMIT_NOFILE, &files) == 0 &&
                       files.rlim_cur != RLIM_INFINITY &&
                       files.rlim_cur < (1u << 20)
                   ? static_cast<int>(files.rlim_cur)
                   : (1 << 20);
  rlim_t cpu = static_cast<rlim_t>(std::ceil(limits.cpuSeconds));
  plan.cpu = {cpu, cpu + 1};
  plan.as = {static_cast<rlim_t>(limits.memoryBytes),
             static_cast<rlim_t>(limits.memoryBytes)};
  plan.fsize = {static_cast<rlim_t>(limits.fileBytes),
                static_cast<rlim_t>(limits.fileBytes)};
  plan.core = {0, 0};
  plan.dropRoot = runsAsHostRoot();

  Clock::time_point start = Clock::now();
  Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(limits.wallSeconds));
  pid_t pid = ::fork();
  if (pid < 0)
    return errnoStatus("fork", errno);
  if (pid == 0)
    runChild(plan);
  ::setpgid(pid, pid);
  input->reset();
  outWrite.reset();
  errWrite.reset();
  infoWrite.reset();
  failWrite.reset();

  // The error pipe closes at the exec (or carries why the child failed).
  ChildFailure failure;
  ssize_t got;
  do
    got = ::read(failRead.get(), &failure, sizeof(failure));
  while (got < 0 && errno == EINTR);
  if (got == sizeof(failure)) {
    int status;
    ::waitpid(pid, &status, 0);
    if (failure.step == kStepExec)
      return absl::FailedPreconditionError(
          absl::StrCat("cannot run bubblewrap (", bwrap,
                       "): ", std::strerror(failure.err), "; ", kInstallHint));
    return errnoStatus(failure.step == kStepUser
                           ? "dropping to the sandbox's user"
                       : failure.step == kStepLimits ? "setrlimit"
                                                     : "setting up fds",
                       failure.err);
  }

  SandboxResult result;
  std::string info;
  Fd sandboxInit;
  struct Stream {
    Fd *fd;
    std::string *text;
    size_t limit;
  } streams[3] = {{&outRead, &result.stdoutText, kSandboxOutputLimit},
                  {&errRead, &result.stderrText, kSandboxOutputLimit},
                  {&infoRead, &info, 4096}};
  auto killSandbox = [&] {
    ::kill(-pid, SIGKILL);
    if (!sandboxInit)
      sandboxInit = openSandboxInit(info);
#ifdef SYS_pidfd_send_signal
    if (sandboxInit)
      ::syscall(SYS_pidfd_send_signal, sandboxInit.get(), SIGKILL, nullptr, 0);
#endif
  };
  // An error of the parent's own: the sandbox is killed before it returns.
  auto abandon = [&](absl::string_view what, int err) {
    killSandbox();
    ::waitpid(pid, nullptr, 0);
    killAndAwaitInit(sandboxInit, Clock::now() + kKillGrace);
    return errnoStatus(what, err);
  };

  // Read until every stream is closed (bwrap holds them until it exits, the
  // sandbox's processes until they do) or the wall limit passes; then, once
  // killed, for a grace period at most.
  Clock::time_point readUntil = deadline;
  char buffer[1 << 16];
  for (;;) {
    std::vector<struct pollfd> polled;
    std::vector<Stream *> owners;
    for (Stream &s : streams)
      if (*s.fd) {
        polled.push_back({s.fd->get(), POLLIN, 0});
        owners.push_back(&s);
      }
    if (polled.empty())
      break;
    if (Clock::now() >= readUntil) {
      if (result.timedOut)
        break;
      result.timedOut = true;
      killSandbox();
      readUntil = Clock::now() + kKillGrace;
      continue;
    }
    int n = ::poll(polled.data(), polled.size(), millisUntil(readUntil));
    if (n < 0 && errno != EINTR)
      return abandon("poll", errno);
    for (size_t i = 0; n > 0 && i < polled.size(); ++i) {
      if (!polled[i].revents)
        continue;
      Stream &s = *owners[i];
      ssize_t r = ::read(s.fd->get(), buffer, sizeof(buffer));
      if (r < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (r <= 0) {
        s.fd->reset();
        if (s.fd == &infoRead && !sandboxInit)
          sandboxInit = openSandboxInit(info);
        continue;
      }
      if (s.text->size() < s.limit)
        s.text->append(buffer, std::min<size_t>(r, s.limit - s.text->size()));
      if (s.fd == &infoRead && !sandboxInit &&
          info.find('}') != std::string::npos)
        sandboxInit = openSandboxInit(info);
    }
  }

  // bwrap has closed its streams; it exits with the program (before the
  // wall limit unless killed).
  int status = 0;
  for (;;) {
    siginfo_t exited{};
    if (::waitid(P_PID, pid, &exited, WEXITED | WNOHANG | WNOWAIT) != 0 &&
        errno != EINTR)
      return abandon("waitid", errno);
    if (exited.si_pid == pid)
      break;
    if (Clock::now() >= deadline && !result.timedOut) {
      result.timedOut = true;
      killSandbox();
    }
    struct timespec pause = {0, 2000000};
    ::nanosleep(&pause, nullptr);
  }
  // bwrap is a zombie: its process group cannot have been reused yet.
  ::kill(-pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!sandboxInit)
    sandboxInit = openSandboxInit(info);
  killAndAwaitInit(sandboxInit, Clock::now() + kKillGrace);

  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    if (code > 128 && code < 128 + NSIG)
      result.signal = code - 128;
    else
      result.exitCode = code;
  }
  return result;
}

absl::Status checkLimits(const SandboxLimits &limits) {
  if (!(limits.wallSeconds > 0) || !(limits.cpuSeconds > 0) ||
      !(limits.wallSeconds <= kMaxSandboxSeconds) ||
      !(limits.cpuSeconds <= kMaxSandboxSeconds) || limits.memoryBytes <= 0 ||
      limits.fileBytes <= 0 || limits.processes < 2)
    return absl::InvalidArgumentError(absl::StrCat(
        "sandbox limits: the times must be in (0, ", kMaxSandboxSeconds,
        "] seconds, memory and file size positive, and processes at least 2 "
        "(the sandbox's init counts)"));
  return absl::OkStatus();
}

/// Whether a sandbox was made on this machine once (then the next runs need
/// not probe again).
std::atomic<bool> sandboxWorks{false};

} // namespace

absl::Status CheckSandbox(const std::string &bwrapPath) {
  std::string bwrap = bwrapPath.empty() ? findExecutable("bwrap") : bwrapPath;
  if (bwrap.empty() || ::access(bwrap.c_str(), X_OK) != 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "bubblewrap (bwrap) is not installed",
        bwrap.empty() ? "" : absl::StrCat(" at ", bwrap), ": ", kInstallHint));
  if (::access(kPrlimit, X_OK) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat(kPrlimit, " is missing: install the Debian package "
                               "util-linux"));
  if (bwrapPath.empty() && sandboxWorks.load())
    return absl::OkStatus();
  auto dir = WorkDirectory::Create();
  if (!dir.ok())
    return dir.status();
  SandboxLimits limits;
  limits.wallSeconds = 30;
  auto probe = runIn(bwrap, dir->path(), {"/usr/bin/true"}, "", limits);
  if (!probe.ok())
    return probe.status();
  if (probe->timedOut || probe->exitCode != 0)
    return absl::FailedPreconditionError(
        absl::StrCat("bubblewrap cannot create the sandbox on this machine (",
                     probe->stderrText.empty()
                         ? absl::StrCat("exit status ", probe->exitCode,
                                        ", signal ", probe->signal)
                         : std::string(absl::StripTrailingAsciiWhitespace(
                               probe->stderrText)),
                     "): ", kNamespaceHint));
  if (bwrapPath.empty())
    sandboxWorks.store(true);
  return absl::OkStatus();
}

absl::StatusOr<SandboxResult> RunSandboxed(const std::vector<std::string> &argv,
                                           const std::string &stdinText,
                                           const SandboxLimits &limits) {
  if (argv.empty())
    return absl::InvalidArgumentError("RunSandboxed: empty argv");
  if (absl::Status s = checkLimits(limits); !s.ok())
    return s;
  if (absl::Status s = CheckSandbox(); !s.ok())
    return s;
  auto dir = WorkDirectory::Create();
  if (!dir.ok())
    return dir.status();
  return runIn(findExecutable("bwrap"), dir->path(), argv, stdinText, limits);
}

absl::Status CheckInterpreter(const std::string &interpreter) {
  bool visible = false;
  for (absl::string_view root :
       {"/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/"})
    visible = visible || absl::StartsWith(interpreter, root);
  if (!visible || interpreter.find("/../") != std::string::npos ||
      ::access(interpreter.c_str(), X_OK) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "the interpreter ", interpreter,
        " must be an executable under /usr, /bin, /sbin, /lib or /lib64 "
        "(what the sandbox sees)"));
  return absl::OkStatus();
}

absl::StatusOr<SandboxResult> RunPython(const std::string &program,
                                        const SandboxLimits &limits,
                                        const std::string &interpreter) {
  if (absl::Status s = CheckInterpreter(interpreter); !s.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("RunPython: ", s.message()));
  if (absl::Status s = checkLimits(limits); !s.ok())
    return s;
  if (absl::Status s = CheckSandbox(); !s.ok())
    return s;
  auto dir = WorkDirectory::Create();
  if (!dir.ok())
    return dir.status();
  std::string path = dir->path() + "/program.py";
  {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd)
      return errnoStatus(absl::StrCat("creating ", path), errno);
    for (size_t done = 0; done < program.size();) {
      ssize_t n =
          ::write(fd.get(), program.data() + done, program.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return errnoStatus(absl::StrCat("writing ", path), errno);
      done += n;
    }
    if (absl::Status s = handToSandboxUser(path, fd.get()); !s.ok())
      return s;
  }
  return runIn(findExecutable("bwrap"), dir->path(),
               {interpreter, "-I", "-S",
                absl::StrCat(kSandboxWorkDirectory, "/program.py")},
               "", limits);
}

} // namespace braid::eval
