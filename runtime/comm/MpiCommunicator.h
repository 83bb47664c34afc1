//===- MpiCommunicator.h - Collectives on MPI -------------------*- C++ -*-===//
//
// The CPU backend's communication: one MPI communicator per group the plan's
// collectives name (a set of mesh axes) and per mesh axis, split from
// MPI_COMM_WORLD once, at start-up, in the same order on every rank. The
// point-to-point messages between pipeline stages travel on the
// communicator of their one axis, whose rank c is the rank at coordinate c
// along it.
//
// Every wait has a deadline (SetTimeout): collectives start in their
// nonblocking form and the rank polls them (MPI_Test: a spin for 1 ms, then
// yielding the core between polls, then, after 1 s, sleeping 200 us between
// them) until they complete or the deadline passes. Each group also has a
// duplicate communicator, the watchdog's side channel: a rank whose wait
// times out asks the ranks it waited for what they are doing (its report:
// the collective, its number on the group, the step), and every rank that
// is itself polling a wait answers (as NCCL's watchdog and PyTorch's flight
// recorder do). Ranks that do not answer within a few seconds, or answer
// late from a wait they were in all along (stopped, then resumed), are
// named as not arrived.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMM_MPICOMMUNICATOR_H
#define BRAID_RUNTIME_COMM_MPICOMMUNICATOR_H

#include "runtime/exec/Communicator.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace braid::comm {

/// Whether this process was started by an MPI launcher (mpirun, srun with
/// PMI: --mpi=pmix or pmi2): then it must join the job even when the plan
/// is for one rank.
bool LaunchedByMpi();

/// The ranks that run on this node (the launcher's local size; under srun,
/// the step's tasks on this node), or 1.
int64_t LocalRanks();

/// comm::RootBroadcast over MPI (NCCL's bootstrap in a job mpirun started):
/// joins the MPI job if this process has not (MPI_Init; MPI_Finalize at
/// exit), then MPI_COMM_WORLD's rank 0 gives `bytes` to every rank. Rank 0's
/// `tag` goes along: a rank whose own tag differs (another plan's job) gets
/// an error naming both.
absl::Status MpiBroadcastFromRoot(const std::string &tag, std::string &bytes);

class MpiCommunicator : public exec::Communicator {
public:
  /// Joins the MPI job (MPI_Init) and checks that it has as many ranks as the
  /// plan's mesh, then creates the communicator of every group the plan's
  /// collectives use.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>>
  Create(const plan::Plan &plan);
  ~MpiCommunicator() override;

  int64_t Rank() const override { return rank_; }
  const std::vector<int64_t> &Coordinates() const override { return coords_; }
  absl::Status AllReduce(absl::Span<const std::string> axes, void *data,
                         int64_t count, plan::DType dtype,
                         exec::Reduction op = exec::Reduction::kSum) override;
  absl::Status AllGather(absl::Span<const std::string> axes, const void *in,
                         void *out, int64_t count, plan::DType dtype) override;
  /// Sums F32, F64, BF16 or F16 (MPI_Reduce_scatter_block: the order of the
  /// sum is MPI's, the same on every run of the same job; the 16-bit formats
  /// add two values at a time in float, rounding each sum to the format).
  absl::Status ReduceScatter(absl::Span<const std::string> axes, const void *in,
                             void *out, int64_t countPerRank,
                             plan::DType dtype) override;
  /// MPI_Isend on the axis' communicator, one tag for every message (so they
  /// arrive in order); the request is kept until WaitSends.
  absl::Status Send(absl::string_view axis, int64_t peerOffset,
                    const void *data, int64_t count,
                    plan::DType dtype) override;
  /// MPI_Recv; a message of another size than `count` is an error.
  absl::Status Recv(absl::string_view axis, int64_t peerOffset, void *data,
                    int64_t count, plan::DType dtype) override;
  /// MPI_Waitall on the requests of every Send since the last call.
  absl::Status WaitSends() override;
  absl::StatusOr<int64_t>
  StartReduceScatter(absl::Span<const std::string> axes, const void *in,
                     void *out, int64_t countPerRank,
                     plan::DType dtype) override;
  absl::StatusOr<int64_t> StartAllGather(absl::Span<const std::string> axes,
                                         const void *in, void *out,
                                         int64_t count,
                                         plan::DType dtype) override;
  /// MPI_Iallreduce in place, of at most 2^30 elements.
  absl::StatusOr<int64_t> StartAllReduce(absl::Span<const std::string> axes,
                                         void *data, int64_t count,
                                         plan::DType dtype) override;
  absl::StatusOr<bool> Test(int64_t handle) override;
  absl::Status Wait(int64_t handle) override;

  /// The deadline of each wait, in seconds (0, the default: none). A wait
  /// past it asks the peers it waited for what they do (for at most
  /// clamp(seconds / 2, 1, 5) seconds) and returns a DeadlineExceededError
  /// that names the collective, its group, the step and each peer: not
  /// arrived (no answer), waiting in the same collective, or waiting in
  /// another one. Later waits return the same error at once.
  void SetTimeout(double seconds) override { timeout_ = seconds; }
  void SetWaitContext(int64_t step, absl::string_view what) override;

  /// Ends every rank of the job with `code`, so that none of them waits
  /// forever in a collective for this one (after an error here).
  [[noreturn]] void Abort(int code) override;

private:
  /// A group's communicators (MPI_Comms, kept out of this header like every
  /// MPI type): the collectives' and the watchdog's, its ranks' world ranks
  /// in its order and the number of collectives started on it.
  struct Group {
    std::string key;
    void *comm = nullptr;
    void *watch = nullptr;
    std::vector<int> worldRanks;
    int64_t collectives = 0;
  };
  /// What a wait waits for (defined in MpiCommunicator.cpp).
  struct Waiting;

  MpiCommunicator();
  absl::Status addGroup(const std::vector<std::string> &axes);
  /// The group along `axes`.
  absl::StatusOr<Group *> group(absl::Span<const std::string> axes);
  /// The group of `axis` and the peer's rank in it.
  absl::StatusOr<std::pair<Group *, int>> peer(absl::string_view axis,
                                               int64_t peerOffset,
                                               absl::string_view what);
  /// Polls `test` (an MPI_Test of the wait `w`) until it reports done, the
  /// deadline passes (then the watchdog's report) or MPI fails.
  template <typename Poll> absl::Status await(const Waiting &w, Poll test);
  /// Answers the other ranks' questions on every watchdog communicator.
  void answerPeers();
  /// The error of `w` after `waited` seconds, with what its peers answer;
  /// `stalled` is the longest time this rank did not poll in the wait.
  absl::Status timedOut(const Waiting &w, double waited, double stalled);

  plan::Mesh mesh_;
  int64_t rank_ = 0;
  std::vector<int64_t> coords_;
  /// Groups by the sorted, comma-joined axes of their group.
  std::map<std::string, std::unique_ptr<Group>> groups_;
  /// The requests of the sends not yet waited for.
  struct Requests;
  std::unique_ptr<Requests> pendingSends_;
  /// Collectives started and not yet found complete, by handle.
  std::unique_ptr<Requests> started_;
  int64_t nextHandle_ = 0;

  double timeout_ = 0;
  int64_t step_ = 0;
  std::string what_;
  /// The wait being polled (for the answers to other ranks) and when it
  /// began.
  const Waiting *waiting_ = nullptr;
  double waitingSince_ = 0;
  /// The longest time this rank did not poll in that wait so far (told to
  /// the peers that ask: a rank stopped inside its wait, then resumed, is in
  /// it when asked, yet was the cause).
  double waitingStalled_ = 0;
  /// The first wait that timed out: every later wait fails with it.
  absl::Status failed_;
  /// Answers on their way to the ranks that asked (their buffers).
  struct Answers;
  std::unique_ptr<Answers> answers_;
};

} // namespace braid::comm

#endif // BRAID_RUNTIME_COMM_MPICOMMUNICATOR_H
