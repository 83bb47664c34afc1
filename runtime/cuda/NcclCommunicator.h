//===- NcclCommunicator.h - The plan's communication on NCCL ----*- C++ -*-===//
//
// The CUDA backend's communication between ranks, one GPU per rank: NCCL's
// collectives and point-to-point messages, enqueued on streams
// (StreamCommunicator.h).
//
// Bootstrap: rank 0 makes NCCL's unique id and gives it to the other ranks
// through the rendezvous (runtime/comm/Rendezvous.h: RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, or mpirun's rank and size), or through MPI
// when mpirun started the job (braid-run in a build with MPI passes
// comm::MpiBroadcastFromRoot), and every rank joins the world communicator
// with it. The world then splits
// (ncclCommSplit, collective over the world, in the same order on every
// rank) into one communicator per group the plan's collectives name and per
// mesh axis, as the MPI communicator does. Point-to-point messages along an
// axis use two more communicators of the axis' ranks, one per direction
// (towards higher or lower coordinates): NCCL runs one communicator's
// operations in the order they were enqueued, so a stage's send to the next
// stage and its receive from it on one communicator could wait for each
// other; in one direction the waits only ever go one way along the axis.
//
// The trainer's own collectives (the loss over the ranks, checkpoints'
// agreement, gathers of split parameters) name host memory, which NCCL
// cannot read: those are staged through device memory of the
// communicator's and waited for before the call returns. Device buffers
// (the plan's) are never staged and never waited for.
//
// Under the CUDA emulation the same code runs against the emulated NCCL
// (runtime/cuda/emu/Nccl.cpp, on MPI: the ranks are started by mpirun).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
#define BRAID_RUNTIME_CUDA_NCCLCOMMUNICATOR_H

#include "runtime/comm/Rendezvous.h"
#include "runtime/cuda/StreamCommunicator.h"
#include "runtime/plan/plan.pb.h"

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace braid::cuda {

class NcclCommunicator : public StreamCommunicator {
public:
  /// Selects the GPU of the rank's place on its node (`localRank`), joins
  /// the job of `rendezvous` (which must have as many ranks as the plan's
  /// mesh) on it, and creates the communicators of every group the plan
  /// uses. The executor then allocates on that GPU. NCCL's id goes from
  /// rank 0 to the others through `broadcast` when given (MPI's), else
  /// through the rendezvous' TCP (comm::RendezvousBroadcast).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>>
  Create(const plan::Plan &plan, const comm::RendezvousConfig &rendezvous,
         const comm::RootBroadcast &broadcast = {});
  ~NcclCommunicator() override;

  int64_t Rank() const override { return rank_; }
  const std::vector<int64_t> &Coordinates() const override { return coords_; }
  /// F32, F64, BF16, F16 (sums and maxima), I32 and I64.
  absl::Status AllReduce(absl::Span<const std::string> axes, void *data,
                         int64_t count, plan::DType dtype,
                         exec::Reduction op = exec::Reduction::kSum) override;
  absl::Status AllGather(absl::Span<const std::string> axes, const void *in,
                         void *out, int64_t count, plan::DType dtype) override;
  absl::Status ReduceScatter(absl::Span<const std::string> axes, const void *in,
                             void *out, int64_t countPerRank,
                             plan::DType dtype) override;
  absl::Status Send(absl::string_view axis, int64_t peerOffset,
                    const void *data, int64_t count,
                    plan::DType dtype) override;
  absl::Status Recv(absl::string_view axis, int64_t peerOffset, void *data,
                    int64_t count, plan::DType dtype) override;
  /// The compute stream waits for every send enqueued so far.
  absl::Status WaitSends() override;
  /// Enqueued on the communicator's stream of collectives, after the work
  /// enqueued on the compute stream so far, so that the compute stream goes
  /// on (ZeRO's buckets overlap the rest of backward); Wait makes the
  /// compute stream wait for it, without the host waiting.
  absl::StatusOr<int64_t>
  StartReduceScatter(absl::Span<const std::string> axes, const void *in,
                     void *out, int64_t countPerRank,
                     plan::DType dtype) override;
  absl::StatusOr<int64_t> StartAllGather(absl::Span<const std::string> axes,
                                         const void *in, void *out,
                                         int64_t count,
                                         plan::DType dtype) override;
  /// In place on device memory (a host buffer is reduced at once, as
  /// AllReduce, handle -1).
  absl::StatusOr<int64_t> StartAllReduce(absl::Span<const std::string> axes,
                                         void *data, int64_t count,
                                         plan::DType dtype) override;
  /// Whether the collective `handle` has run (cudaEventQuery).
  absl::StatusOr<bool> Test(int64_t handle) override;
  absl::Status Wait(int64_t handle) override;

  absl::Status SetStream(cudaStream_t stream) override;
  absl::Status RecordSendsDone(cudaEvent_t event) override;
  [[noreturn]] void Abort(int code) override;

private:
  NcclCommunicator() = default;
  /// Splits the world into the groups along `axes` (collective).
  absl::Status addGroup(const std::vector<std::string> &axes);
  absl::StatusOr<void *> group(absl::Span<const std::string> axes);
  /// The communicator of the group along `axes` and NCCL's type of
  /// `dtype` (an ncclDataType_t).
  absl::StatusOr<std::pair<void *, int>> call(absl::Span<const std::string> axes,
                                              plan::DType dtype);
  /// Device memory of at least `bytes` to stage host buffers through
  /// (grown, never shrunk, outside the plan's steps).
  absl::StatusOr<uint8_t *> staging(size_t bytes);
  /// Orders the stream of collectives after the compute stream's work,
  /// and returns a handle whose event will follow what is enqueued next.
  absl::StatusOr<int64_t> startOnCollectiveStream();
  /// Records the handle's event after what was enqueued since.
  absl::StatusOr<int64_t> started(absl::StatusOr<int64_t> handle,
                                  absl::Status enqueued);
  /// A collective over the group along `axes` started on the stream of
  /// collectives: `enqueue` gets the group's communicator and NCCL's type of
  /// `dtype`, and enqueues on collectiveStream_.
  absl::StatusOr<int64_t> startCollective(
      absl::Span<const std::string> axes, plan::DType dtype,
      absl::FunctionRef<absl::Status(void *comm, int type)> enqueue);
  /// The communicator of messages from this rank towards `peerOffset`
  /// along `axis` (send) or from it (receive), and the peer's rank in it.
  absl::StatusOr<std::pair<void *, int>>
  peer(absl::string_view axis, int64_t peerOffset, bool send);

  plan::Mesh mesh_;
  int64_t rank_ = 0;
  std::vector<int64_t> coords_;
  /// ncclComm_t values (kept out of this header like NCCL's types).
  void *world_ = nullptr;
  std::map<std::string, void *> groups_;
  /// Per axis: the communicators of messages towards higher coordinates
  /// ("+") and towards lower ones ("-").
  std::map<std::string, void *> upward_, downward_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t sendStream_ = nullptr;
  cudaEvent_t ordered_ = nullptr;
  /// The stream of started collectives, their completion events by handle,
  /// and events to reuse.
  cudaStream_t collectiveStream_ = nullptr;
  std::map<int64_t, cudaEvent_t> started_;
  /// The host buffers' staging, and the copies host sends read until
  /// WaitSends.
  uint8_t *staging_ = nullptr;
  size_t stagingBytes_ = 0;
  std::vector<void *> hostSends_;
  std::vector<cudaEvent_t> freeEvents_;
  int64_t nextHandle_ = 0;
};

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
