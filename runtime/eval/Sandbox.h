//===- Sandbox.h - Running untrusted programs -------------------*- C++ -*-===//
//
// `braid eval` scores a model by running the programs it writes (HumanEval's
// completions with their tests). Those programs are untrusted: each one runs
// in a sandbox that it cannot write out of, read the host through, reach the
// network from, or outlive.
//
// The sandbox is Debian's bubblewrap (`bwrap`), not one of our own: it is
// small, maintained, used by Flatpak and by build systems for exactly this
// (an unprivileged process building a throw-away set of namespaces), and it
// fails loudly rather than running a program half-contained. Each run gets:
//
//  - Namespaces (--unshare-all, --unshare-user, --disable-userns): a new
//    network namespace (no network; only a loopback that is down), and new
//    pid, ipc, uts, cgroup, mount and user namespaces; no capabilities
//    (--cap-drop ALL), and no further user namespaces inside.
//  - A file system of its own: the root is an empty tmpfs, read-only once
//    set up; /usr is bound read-only (and /bin, /sbin, /lib, /lib64 are the
//    same symbolic links into it that the host has, or read-only binds
//    where the host has directories); of /etc only what the dynamic loader
//    and the interpreter read (ld.so.cache, ld.so.conf*, localtime,
//    alternatives). A new /proc of the pid namespace and a minimal /dev
//    (read-only, null/zero/random/tty and a small /dev/shm). A fresh /tmp
//    (tmpfs) and the run's own directory, bound read-write at
//    kSandboxWorkDirectory and made the working directory: the only two
//    writable places. No HOME, and a clean environment (PATH only).
//  - --new-session (no terminal to push input into), and --die-with-parent:
//    when bwrap or the process waiting for it dies, the sandbox's init is
//    killed, and with it, by the kernel, every process of its namespace.
//
// Run as the host's root, the child drops to uid/gid 65534 (nobody) before
// starting bwrap (the run's directory is handed to that user): a user
// namespace made by root maps root, which is exempt from RLIMIT_NPROC and
// would keep capabilities over the sandbox's own mounts. (A container's root
// that is an unprivileged user on the host needs no drop.) Unprivileged,
// bwrap needs the kernel to allow unprivileged user namespaces; when bwrap is
// missing or cannot build the namespaces, RunSandboxed returns
// FailedPrecondition naming the cause and the fix. It never runs a program
// unsandboxed.
//
// The limits (SandboxLimits), and the mechanism of each:
//
//  - wallSeconds: the parent waits for the sandbox with a deadline; past it
//    it SIGKILLs bwrap's process group and the sandbox's init (whose death
//    kills the whole pid namespace), and the result is timedOut.
//  - cpuSeconds: RLIMIT_CPU, set in the child before bwrap starts (soft:
//    SIGXCPU at the limit; hard, a second later: SIGKILL). It is counted per
//    process; the wall limit bounds what several processes use together.
//  - memoryBytes: RLIMIT_AS, set likewise: an allocation past it fails (in
//    Python, MemoryError). Also per process: `processes` times it bounds a
//    sandbox's total.
//  - processes: RLIMIT_NPROC, set inside the sandbox by util-linux's prlimit,
//    which then executes the program. The kernel counts it per user and per
//    user namespace, so set there it counts the sandbox's own processes
//    (its init included) rather than all of the host user's. It does not
//    apply to real root (hence the drop to nobody above).
//  - fileBytes: RLIMIT_FSIZE (a write past it fails, SIGXFSZ), and the size
//    of the sandbox's /tmp and /dev/shm. Files in the working directory are
//    each limited, not their number: that directory is on the host's disk
//    for the length of the run (a cgroup or a quota would bound it; this
//    sandbox uses neither).
//  - RLIMIT_CORE is 0: a crash leaves no core file.
//
// Without cgroups, the processes' memory together and the working
// directory's total size are bounded only through the limits above and the
// wall clock.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EVAL_SANDBOX_H
#define BRAID_RUNTIME_EVAL_SANDBOX_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::eval {

/// What one sandboxed run may use (see the file comment for how each limit
/// is enforced).
/// The longest wall-clock or CPU time a sandboxed program may be given: a
/// day (a longer limit is a mistake, and one past ~292 years would not fit
/// the clocks' nanoseconds).
inline constexpr double kMaxSandboxSeconds = 86400;

struct SandboxLimits {
  /// Wall-clock time from start to kill (at most kMaxSandboxSeconds).
  double wallSeconds = 10;
  /// CPU time of each process (at most kMaxSandboxSeconds).
  double cpuSeconds = 10;
  /// Address space of each process.
  int64_t memoryBytes = 1 << 30;
  /// Processes (and threads) at once, the sandbox's init included.
  int64_t processes = 64;
  /// Size of any one file written, and of the sandbox's /tmp.
  int64_t fileBytes = 16 << 20;
};

/// How a sandboxed run ended, and what it printed.
struct SandboxResult {
  /// The program's exit status, or -1 when a signal ended it.
  int exitCode = -1;
  /// The signal that ended the program, or 0 when it exited. bwrap reports
  /// a program killed by signal n as exit status 128 + n (as a shell does),
  /// so a program that itself exits with 129..192 reads as killed.
  int signal = 0;
  /// The wall limit was reached and the sandbox killed.
  bool timedOut = false;
  /// Standard output and error, each truncated to kSandboxOutputLimit bytes
  /// (what is past it is read and dropped, so the program never blocks on
  /// a full pipe).
  std::string stdoutText, stderrText;
};

/// Bytes kept of each of standard output and standard error.
inline constexpr size_t kSandboxOutputLimit = 64 << 10;

/// Where the run's own directory appears inside the sandbox (its working
/// directory).
inline constexpr const char *kSandboxWorkDirectory = "/sandbox";

/// Checks that a sandbox can be made on this machine, by making one that
/// runs /usr/bin/true: OK, or FailedPrecondition naming the cause (bwrap or
/// prlimit missing, namespaces refused, with bwrap's own message) and the
/// fix. `bwrapPath` is the bwrap to use; empty, the one on PATH (or
/// /usr/bin/bwrap), and then a success is remembered for the process.
/// RunSandboxed and RunPython call it first.
absl::Status CheckSandbox(const std::string &bwrapPath = "");

/// Runs `argv` (argv[0] an absolute path inside the sandbox, e.g.
/// /usr/bin/python3) in a new sandbox whose working directory is a fresh,
/// empty temporary directory, removed afterwards; `stdinText` is its
/// standard input. Returns how it ended; FailedPrecondition when the
/// sandbox cannot be made on this machine (bwrap or prlimit missing, user
/// namespaces not allowed), InvalidArgument for an empty argv or bad limits,
/// and Internal for a failing system call of the parent. Blocks the calling
/// thread until the sandbox is gone: when this returns, every process of
/// it has exited (the parent waits on a pidfd of the sandbox's init, whose
/// exit comes after all the others').
absl::StatusOr<SandboxResult> RunSandboxed(const std::vector<std::string> &argv,
                                           const std::string &stdinText,
                                           const SandboxLimits &limits);

/// Whether `interpreter` can run programs in the sandbox: an executable
/// under /usr, /bin, /sbin, /lib or /lib64 (what it sees), given as an
/// absolute path without "..". RunPython checks it first; a caller checks
/// it before the work that leads to the programs.
absl::Status CheckInterpreter(const std::string &interpreter);

/// Writes `program` to program.py in a fresh temporary directory and runs
/// `interpreter -I -S program.py` on it there, through RunSandboxed's
/// sandbox, with no standard input. -I keeps the environment and the user's
/// site-packages out, -S the site module. `interpreter` is an absolute path
/// under /usr, /bin, /sbin, /lib or /lib64 (what the sandbox can see);
/// anything else is InvalidArgument.
absl::StatusOr<SandboxResult>
RunPython(const std::string &program, const SandboxLimits &limits,
          const std::string &interpreter = "/usr/bin/python3");

} // namespace braid::eval

#endif // BRAID_RUNTIME_EVAL_SANDBOX_H
