//===- Preemption.cpp - Stopping a run early, with a checkpoint -----------===//

#include "runtime/exec/Preemption.h"

#include "absl/strings/str_cat.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

namespace braid::exec {
namespace {

// Written by the handler: a lock-free atomic is async-signal-safe.
std::atomic<int> pendingSignal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void onStopSignal(int signal) {
  int none = 0;
  // The first signal is the one reported; later ones change nothing.
  pendingSignal.compare_exchange_strong(none, signal);
}

} // namespace

absl::Status InstallStopHandlers() {
  static std::once_flag once;
  static absl::Status installed;
  std::call_once(once, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_handler = onStopSignal;
    sigemptyset(&action.sa_mask);
    // Blocking calls (reads, MPI's polls) resume after the handler.
    action.sa_flags = SA_RESTART;
    for (int signal : {SIGTERM, SIGINT})
      if (sigaction(signal, &action, nullptr) != 0) {
        installed = absl::InternalError(
            absl::StrCat("cannot handle ", StopSignalName(signal), ": ",
                         std::strerror(errno)));
        return;
      }
  });
  return installed;
}

int PendingStopSignal() { return pendingSignal.load(); }

void ClearStopSignal() { pendingSignal.store(0); }

const char *StopSignalName(int signal) {
  switch (signal) {
  case SIGTERM:
    return "SIGTERM";
  case SIGINT:
    return "SIGINT";
  default:
    return "a signal";
  }
}

} // namespace braid::exec
