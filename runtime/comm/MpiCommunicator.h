//===- MpiCommunicator.h - Collectives on MPI -------------------*- C++ -*-===//
//
// The CPU backend's communication: one MPI communicator per group the plan's
// collectives name (a set of mesh axes) and per mesh axis, split from
// MPI_COMM_WORLD once, at start-up, in the same order on every rank. The
// point-to-point messages between pipeline stages travel on the
// communicator of their one axis, whose rank c is the rank at coordinate c
// along it.
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
/// PMI): then it must join the job even when the plan is for one rank.
bool LaunchedByMpi();

/// The ranks that run on this node (the launcher's local size), or 1.
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

  /// Ends every rank of the job with `code`, so that none of them waits
  /// forever in a collective for this one (after an error here).
  [[noreturn]] void Abort(int code) override;

private:
  MpiCommunicator();
  absl::Status addGroup(const std::vector<std::string> &axes);
  /// The communicator of the group along `axes` (an MPI_Comm).
  absl::StatusOr<void *> group(absl::Span<const std::string> axes);
  /// The communicator of `axis` and the peer's rank in it.
  absl::StatusOr<std::pair<void *, int>> peer(absl::string_view axis,
                                              int64_t peerOffset,
                                              absl::string_view what);

  plan::Mesh mesh_;
  int64_t rank_ = 0;
  std::vector<int64_t> coords_;
  /// Communicators by the sorted, comma-joined axes of their group.
  std::map<std::string, void *> groups_;
  /// The requests of the sends not yet waited for (MPI_Requests, kept out
  /// of this header like every MPI type).
  struct Requests;
  std::unique_ptr<Requests> pendingSends_;
  /// Collectives started and not yet found complete, by handle.
  std::unique_ptr<Requests> started_;
  int64_t nextHandle_ = 0;
};

} // namespace braid::comm

#endif // BRAID_RUNTIME_COMM_MPICOMMUNICATOR_H
