//===- Communicator.h - Collectives for the executor ------------*- C++ -*-===//
//
// What the executor needs from the other ranks of a job: the collectives of
// the plan, over groups named by mesh axes, and the point-to-point messages
// between pipeline stages. runtime/comm implements it on MPI (CPU), the CUDA
// backend on NCCL (runtime/cuda/NcclCommunicator.h).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_COMMUNICATOR_H
#define BRAID_RUNTIME_EXEC_COMMUNICATOR_H

#include "runtime/plan/plan.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace braid::exec {

/// How a collective combines the ranks' elements.
enum class Reduction { kSum, kMax };

class Communicator {
public:
  virtual ~Communicator() = default;
  /// This rank's number in the job, 0-based.
  virtual int64_t Rank() const = 0;
  /// This rank's coordinate along each axis of the plan's mesh, in its order.
  virtual const std::vector<int64_t> &Coordinates() const = 0;
  /// Combines `count` elements of `dtype` at `data` by `op`, in place, over
  /// the ranks whose coordinates differ from this rank's only along `axes`.
  virtual absl::Status AllReduce(absl::Span<const std::string> axes,
                                 void *data, int64_t count, plan::DType dtype,
                                 Reduction op = Reduction::kSum) = 0;
  /// Gathers `count` elements of `dtype` from every rank of the group along
  /// `axes` into `out` (group size x count), in the ranks' order along the
  /// axes (row-major over them). `in` may be this rank's own block of `out`
  /// (in place); otherwise they do not overlap.
  virtual absl::Status AllGather(absl::Span<const std::string> axes,
                                 const void *in, void *out, int64_t count,
                                 plan::DType dtype) = 0;
  /// Sums `in` (group size x countPerRank elements of `dtype`) elementwise
  /// over the group along `axes` and leaves in `out` (countPerRank elements)
  /// this rank's block of the sum: block c for the rank at place c in the
  /// order of AllGather. `in` and `out` do not overlap.
  virtual absl::Status ReduceScatter(absl::Span<const std::string> axes,
                                     const void *in, void *out,
                                     int64_t countPerRank,
                                     plan::DType dtype) = 0;

  /// Starts ReduceScatter and returns at once with a handle for Test and
  /// Wait; `in` and `out` stay untouched by the caller until it completes.
  /// The default runs it to completion (handle -1, complete).
  virtual absl::StatusOr<int64_t>
  StartReduceScatter(absl::Span<const std::string> axes, const void *in,
                     void *out, int64_t countPerRank, plan::DType dtype) {
    if (absl::Status s = ReduceScatter(axes, in, out, countPerRank, dtype);
        !s.ok())
      return s;
    return -1;
  }
  /// Starts AllGather (`in` may be this rank's block of `out`) and returns
  /// at once with a handle for Test and Wait, as StartReduceScatter.
  virtual absl::StatusOr<int64_t>
  StartAllGather(absl::Span<const std::string> axes, const void *in, void *out,
                 int64_t count, plan::DType dtype) {
    if (absl::Status s = AllGather(axes, in, out, count, dtype); !s.ok())
      return s;
    return -1;
  }
  /// Starts AllReduce (a sum, in place) and returns at once with a handle
  /// for Test and Wait, as StartReduceScatter; `data` stays untouched by
  /// the caller until it completes.
  virtual absl::StatusOr<int64_t>
  StartAllReduce(absl::Span<const std::string> axes, void *data, int64_t count,
                 plan::DType dtype) {
    if (absl::Status s = AllReduce(axes, data, count, dtype); !s.ok())
      return s;
    return -1;
  }
  /// Whether the collective `handle` has completed (moving it along);
  /// a completed handle is spent.
  virtual absl::StatusOr<bool> Test(int64_t handle) { return true; }
  /// Waits for the collective `handle`; the handle is spent.
  virtual absl::Status Wait(int64_t handle) { return absl::OkStatus(); }

  /// Point to point along one mesh axis: the peer is the rank whose
  /// coordinate along `axis` is this rank's + `peerOffset`, every other
  /// coordinate equal (an error when that coordinate is outside the axis).
  /// Messages between two ranks are received in the order they were sent.
  ///
  /// Starts sending `count` elements of `dtype` at `data` and returns without
  /// waiting for the peer. The message is a copy: `data` may be written as
  /// soon as Send returns. (Waiting for the peer before reusing the bytes
  /// could deadlock two ranks that each wait for the other to receive, as
  /// interleaved pipeline stages do.) WaitSends waits until the messages
  /// have left.
  virtual absl::Status Send(absl::string_view axis, int64_t peerOffset,
                            const void *data, int64_t count,
                            plan::DType dtype) {
    return absl::UnimplementedError(
        "this communicator has no point-to-point messages (Send)");
  }
  /// Receives `count` elements of `dtype` from the peer into `data`, waiting
  /// for them; the peer's message must hold exactly that many.
  virtual absl::Status Recv(absl::string_view axis, int64_t peerOffset,
                            void *data, int64_t count, plan::DType dtype) {
    return absl::UnimplementedError(
        "this communicator has no point-to-point messages (Recv)");
  }
  /// Waits until every Send of this rank has completed (its data may then be
  /// written again).
  virtual absl::Status WaitSends() { return absl::OkStatus(); }

  /// The deadline of every wait (a blocking collective, Wait, Recv,
  /// WaitSends): a wait longer than `seconds` ends with a
  /// DeadlineExceededError naming the collective, its group, the step and
  /// the peers that had not arrived; 0 waits without a deadline. After such
  /// an error the job is to be ended (Abort): later waits fail at once. The
  /// default keeps no deadline (NCCL's communicator).
  virtual void SetTimeout(double seconds) {}
  /// What this rank is doing, for the message of a wait that times out and
  /// for the reports the other ranks ask for then: the training step (0
  /// before the first) and what the waits are for (e.g. "checkpoint save").
  virtual void SetWaitContext(int64_t step, absl::string_view what) {}

  /// Ends every rank of the job with `code`, so that none of them waits
  /// forever in a collective for this one (after an error here). The
  /// default ends this process only.
  [[noreturn]] virtual void Abort(int code) { std::_Exit(code); }
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_COMMUNICATOR_H
