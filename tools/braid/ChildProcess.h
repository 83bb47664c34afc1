//===- ChildProcess.h - The programs braid starts: mpirun -------*- C++ -*-===//
//
// braid train, calibrate, generate --tp and eval --tp run their ranks under
// mpirun, a child of braid. A signal that ends braid (Ctrl-C, a scheduler's
// SIGTERM, `timeout`) must end the job too: RunChild passes SIGINT, SIGTERM
// and SIGHUP on to the child (mpirun then stops its ranks) and waits for it,
// so that braid removes its temporary files before it exits; and the child
// gets SIGTERM should braid die without a word (SIGKILL).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TOOLS_BRAID_CHILDPROCESS_H
#define BRAID_TOOLS_BRAID_CHILDPROCESS_H

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace braid {

/// The machine's memory (MemTotal), in bytes.
int64_t machineMemoryBytes();

} // namespace braid

namespace braid::tools {

struct ChildOptions {
  /// The child's standard output and error go to this file (created or
  /// truncated), its input from /dev/null; unset, it shares braid's.
  std::optional<std::string> output;
  /// Ended (SIGTERM, then SIGKILL 10 s later) when it runs longer; 0: no
  /// limit.
  unsigned timeoutSeconds = 0;
};

/// How a child ended.
struct ChildExit {
  /// Its exit status; 128 + the signal's number when a signal ended it or
  /// when braid received one and passed it on (braid then exits with it).
  int code = 0;
  /// The signal braid received and passed on (0: none).
  int forwarded = 0;
  /// It ran past ChildOptions::timeoutSeconds.
  bool timedOut = false;
};

/// Runs `args` (args[0] the program's path) and waits for it as above.
/// An error when it cannot be started.
llvm::Expected<ChildExit> RunChild(const std::vector<std::string> &args,
                                   const ChildOptions &options = {});

/// Whether `ranks` processes on this machine, each with an arena of
/// `arenaBytes`, fit in its memory: an error saying how much they need
/// against what it has when they do not (mpirun would start them all and
/// the machine would swap or hang).
llvm::Error CheckRanksFitHere(int64_t ranks, int64_t arenaBytes,
                              const std::string &what);

} // namespace braid::tools

#endif // BRAID_TOOLS_BRAID_CHILDPROCESS_H
