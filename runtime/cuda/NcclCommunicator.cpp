//===- NcclCommunicator.cpp - The plan's communication on NCCL ------------===//

#include "runtime/cuda/NcclCommunicator.h"

#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <set>

namespace braid::cuda {
namespace {

ncclComm_t asComm(void *c) { return static_cast<ncclComm_t>(c); }

absl::Status ncclError(ncclResult_t r, ncclComm_t comm, absl::string_view what) {
  if (r == ncclSuccess)
    return absl::OkStatus();
  const char *detail = comm ? ncclGetLastError(comm) : nullptr;
  return absl::InternalError(absl::StrCat(
      what, " failed: ", ncclGetErrorString(r),
      detail && *detail ? absl::StrCat(" (", detail, ")") : std::string()));
}

absl::Status cudaError(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess)
    return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, " failed: ", cudaGetErrorString(e)));
}

/// Whether `p` is memory NCCL cannot read: host memory, pageable or pinned
/// (the trainer's own values), rather than the device's.
bool isHost(const void *p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError(); // unknown to CUDA: the host's
    return true;
  }
  return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}

absl::StatusOr<ncclDataType_t> ncclType(plan::DType dtype) {
  switch (dtype) {
  case plan::F32:
    return ncclFloat32;
  case plan::F64:
    return ncclFloat64;
  case plan::BF16:
    return ncclBfloat16;
  case plan::F16:
    return ncclFloat16;
  case plan::I32:
    return ncclInt32;
  case plan::I64:
    return ncclInt64;
  default:
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL has no type for dtype ", int(dtype)));
  }
}

} // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::Create(const plan::Plan &plan,
                         const comm::RendezvousConfig &rendezvous,
                         const comm::RootBroadcast &broadcast) {
  int64_t world = plan::WorldSize(plan);
  if (rendezvous.worldSize != world)
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan is for ", world, " ranks (", plan::DescribeMesh(plan.mesh()),
        ") but the job has ", rendezvous.worldSize,
        " (WORLD_SIZE, or mpirun -np)"));
  // One GPU per rank: the node's GPU of this rank's local place.
  int devices = 0;
  if (absl::Status s = cudaError(cudaGetDeviceCount(&devices),
                                 "counting the node's GPUs");
      !s.ok())
    return s;
  if (rendezvous.localRank >= devices)
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rendezvous.rank, " is rank ", rendezvous.localRank,
        " of its node (LOCAL_RANK) but the node has ", devices,
        " GPUs: start at most one rank per GPU"));
  if (absl::Status s = cudaError(cudaSetDevice(int(rendezvous.localRank)),
                                 "selecting the rank's GPU");
      !s.ok())
    return s;
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->mesh_ = plan.mesh();
  c->rank_ = rendezvous.rank;
  c->coords_ = plan::MeshCoordinates(plan.mesh(), rendezvous.rank);
  // NCCL's id from rank 0 to all; the tag keeps ranks of another plan out.
  ncclUniqueId id{};
  if (c->rank_ == 0)
    if (absl::Status s = ncclError(ncclGetUniqueId(&id), nullptr,
                                   "ncclGetUniqueId");
        !s.ok())
      return s;
  std::string bytes(id.internal, sizeof(id.internal));
  std::string tag = absl::StrCat("braid nccl ", plan::WorldSize(plan), " ",
                                 absl::StrJoin(plan.mesh().axes(), "x"));
  if (absl::Status s = broadcast
                           ? broadcast(tag, bytes)
                           : comm::RendezvousBroadcast(rendezvous, tag, bytes);
      !s.ok())
    return s;
  if (bytes.size() != sizeof(id.internal))
    return absl::InternalError(absl::StrCat(
        "the rendezvous gave ", bytes.size(), " bytes of NCCL's id, not ",
        sizeof(id.internal)));
  std::copy(bytes.begin(), bytes.end(), id.internal);
  ncclComm_t worldComm = nullptr;
  if (absl::Status s = ncclError(
          ncclCommInitRank(&worldComm, int(world), id, int(c->rank_)), nullptr,
          absl::StrCat("joining the job's ", world, " ranks (ncclCommInitRank)"));
      !s.ok())
    return s;
  c->world_ = worldComm;
  // Every group the plan uses, in one order on every rank (the plan is the
  // same everywhere), since a split is collective; then each axis' two
  // directions of messages.
  for (const std::vector<std::string> &axes : plan::CommunicationGroups(plan))
    if (absl::Status s = c->addGroup(axes); !s.ok())
      return s;
  for (const std::string &axis : plan.mesh().axes())
    for (auto *direction : {&c->upward_, &c->downward_}) {
      absl::StatusOr<void *> g = c->group({axis});
      if (!g.ok())
        return g.status();
      ncclComm_t split = nullptr;
      if (absl::Status s = ncclError(
              ncclCommSplit(asComm(*g), 0, int(c->rank_), &split, nullptr),
              asComm(*g), absl::StrCat("splitting the messages along '", axis,
                                       "' (ncclCommSplit)"));
          !s.ok())
        return s;
      (*direction)[axis] = split;
    }
  if (absl::Status s = cudaError(
          cudaStreamCreateWithFlags(&c->sendStream_, cudaStreamNonBlocking),
          "creating the stream of sends");
      !s.ok())
    return s;
  if (absl::Status s = cudaError(cudaStreamCreateWithFlags(
                                     &c->collectiveStream_,
                                     cudaStreamNonBlocking),
                                 "creating the stream of collectives");
      !s.ok())
    return s;
  if (absl::Status s = cudaError(
          cudaEventCreateWithFlags(&c->ordered_, cudaEventDisableTiming),
          "creating an event");
      !s.ok())
    return s;
  return c;
}

absl::Status NcclCommunicator::addGroup(const std::vector<std::string> &axes) {
  // The ranks of a group share a colour; their world rank orders them.
  int64_t color = plan::GroupColor(mesh_, coords_, axes);
  ncclComm_t split = nullptr;
  if (absl::Status s = ncclError(
          ncclCommSplit(asComm(world_), int(color), int(rank_), &split,
                        nullptr),
          asComm(world_),
          absl::StrCat("creating the group {", plan::GroupKey(axes),
                       "} (ncclCommSplit)"));
      !s.ok())
    return s;
  groups_[plan::GroupKey(axes)] = split;
  return absl::OkStatus();
}

NcclCommunicator::~NcclCommunicator() {
  // Work still enqueued reads buffers their owner is about to free.
  if (stream_)
    cudaStreamSynchronize(stream_);
  if (sendStream_) {
    cudaStreamSynchronize(sendStream_);
    cudaStreamDestroy(sendStream_);
  }
  if (collectiveStream_) {
    cudaStreamSynchronize(collectiveStream_);
    cudaStreamDestroy(collectiveStream_);
  }
  for (auto &[handle, event] : started_)
    cudaEventDestroy(event);
  for (void *p : hostSends_)
    cudaFree(p);
  if (staging_)
    cudaFree(staging_);
  for (cudaEvent_t event : freeEvents_)
    cudaEventDestroy(event);
  if (ordered_)
    cudaEventDestroy(ordered_);
  for (auto *comms : {&upward_, &downward_, &groups_})
    for (auto &[key, comm] : *comms)
      ncclCommDestroy(asComm(comm));
  if (world_)
    ncclCommDestroy(asComm(world_));
}

void NcclCommunicator::Abort(int code) {
  for (auto *comms : {&upward_, &downward_, &groups_})
    for (auto &[key, comm] : *comms)
      ncclCommAbort(asComm(comm));
  if (world_)
    ncclCommAbort(asComm(world_));
  std::_Exit(code);
}

absl::Status NcclCommunicator::SetStream(cudaStream_t stream) {
  stream_ = stream;
  return absl::OkStatus();
}

absl::StatusOr<void *>
NcclCommunicator::group(absl::Span<const std::string> axes) {
  std::vector<std::string> list(axes.begin(), axes.end());
  auto it = groups_.find(plan::GroupKey(list));
  if (it == groups_.end()) {
    // A group the plan's instructions do not name (the trainer's own): made
    // now, which every rank does at the same point.
    if (absl::Status s = addGroup(list); !s.ok())
      return s;
    it = groups_.find(plan::GroupKey(list));
  }
  return it->second;
}

absl::StatusOr<std::pair<void *, int>>
NcclCommunicator::call(absl::Span<const std::string> axes, plan::DType dtype) {
  absl::StatusOr<void *> g = group(axes);
  if (!g.ok())
    return g.status();
  absl::StatusOr<ncclDataType_t> type = ncclType(dtype);
  if (!type.ok())
    return type.status();
  return std::make_pair(*g, int(*type));
}

absl::StatusOr<uint8_t *> NcclCommunicator::staging(size_t bytes) {
  if (bytes <= stagingBytes_)
    return staging_;
  if (staging_) {
    if (absl::Status s = cudaError(cudaStreamSynchronize(stream_),
                                   "growing the staging of host buffers");
        !s.ok())
      return s;
    cudaFree(staging_);
    staging_ = nullptr;
    stagingBytes_ = 0;
  }
  if (absl::Status s = cudaError(cudaMalloc(&staging_, bytes),
                                 "allocating the staging of host buffers");
      !s.ok())
    return s;
  stagingBytes_ = bytes;
  return staging_;
}

absl::Status NcclCommunicator::AllReduce(absl::Span<const std::string> axes,
                                         void *data, int64_t count,
                                         plan::DType dtype,
                                         exec::Reduction op) {
  absl::StatusOr<std::pair<void *, int>> c = call(axes, dtype);
  if (!c.ok())
    return c.status();
  ncclComm_t comm = asComm(c->first);
  const ncclRedOp_t redOp =
      op == exec::Reduction::kMax ? ncclMax : ncclSum;
  if (!isHost(data))
    return ncclError(ncclAllReduce(data, data, size_t(count),
                                   ncclDataType_t(c->second), redOp, comm,
                                   stream_),
                     comm, "ncclAllReduce");
  // The host's values: through the staging, waited for.
  const size_t bytes = size_t(count * plan::DTypeBytes(dtype));
  absl::StatusOr<uint8_t *> stage = staging(bytes);
  if (!stage.ok())
    return stage.status();
  if (absl::Status s = cudaError(cudaMemcpyAsync(*stage, data, bytes,
                                                 cudaMemcpyHostToDevice,
                                                 stream_),
                                 "staging a host buffer");
      !s.ok())
    return s;
  if (absl::Status s = ncclError(
          ncclAllReduce(*stage, *stage, size_t(count),
                        ncclDataType_t(c->second), redOp, comm, stream_),
          comm, "ncclAllReduce");
      !s.ok())
    return s;
  if (absl::Status s = cudaError(cudaMemcpyAsync(data, *stage, bytes,
                                                 cudaMemcpyDeviceToHost,
                                                 stream_),
                                 "copying a staged buffer back");
      !s.ok())
    return s;
  return cudaError(cudaStreamSynchronize(stream_), "ncclAllReduce");
}

absl::Status NcclCommunicator::AllGather(absl::Span<const std::string> axes,
                                         const void *in, void *out,
                                         int64_t count, plan::DType dtype) {
  absl::StatusOr<std::pair<void *, int>> c = call(axes, dtype);
  if (!c.ok())
    return c.status();
  ncclComm_t comm = asComm(c->first);
  // In place when `in` is this rank's block of `out`, which NCCL takes.
  if (!isHost(in) && !isHost(out))
    return ncclError(ncclAllGather(in, out, size_t(count),
                                   ncclDataType_t(c->second), comm, stream_),
                     comm, "ncclAllGather");
  // The host's values: gathered in place in the staging, waited for.
  int ranks = 0, place = 0;
  ncclCommCount(comm, &ranks);
  ncclCommUserRank(comm, &place);
  const size_t bytes = size_t(count * plan::DTypeBytes(dtype));
  absl::StatusOr<uint8_t *> stage = staging(bytes * size_t(ranks));
  if (!stage.ok())
    return stage.status();
  uint8_t *own = *stage + size_t(place) * bytes;
  for (absl::Status s :
       {cudaError(cudaMemcpyAsync(own, in, bytes, cudaMemcpyDefault, stream_),
                  "staging a host buffer"),
        ncclError(ncclAllGather(own, *stage, size_t(count),
                                ncclDataType_t(c->second), comm, stream_),
                  comm, "ncclAllGather"),
        cudaError(cudaMemcpyAsync(out, *stage, bytes * size_t(ranks),
                                  cudaMemcpyDefault, stream_),
                  "copying a staged buffer back"),
        cudaError(cudaStreamSynchronize(stream_), "ncclAllGather")})
    if (!s.ok())
      return s;
  return absl::OkStatus();
}

absl::Status NcclCommunicator::ReduceScatter(absl::Span<const std::string> axes,
                                             const void *in, void *out,
                                             int64_t countPerRank,
                                             plan::DType dtype) {
  absl::StatusOr<std::pair<void *, int>> c = call(axes, dtype);
  if (!c.ok())
    return c.status();
  ncclComm_t comm = asComm(c->first);
  if (!isHost(in) && !isHost(out))
    return ncclError(ncclReduceScatter(in, out, size_t(countPerRank),
                                       ncclDataType_t(c->second), ncclSum,
                                       comm, stream_),
                     comm, "ncclReduceScatter");
  // The host's values: the operand, then the result, in the staging.
  int ranks = 0;
  ncclCommCount(comm, &ranks);
  const size_t bytes = size_t(countPerRank * plan::DTypeBytes(dtype));
  absl::StatusOr<uint8_t *> stage = staging(bytes * size_t(ranks + 1));
  if (!stage.ok())
    return stage.status();
  uint8_t *result = *stage + bytes * size_t(ranks);
  for (absl::Status s :
       {cudaError(cudaMemcpyAsync(*stage, in, bytes * size_t(ranks),
                                  cudaMemcpyDefault, stream_),
                  "staging a host buffer"),
        ncclError(ncclReduceScatter(*stage, result, size_t(countPerRank),
                                    ncclDataType_t(c->second), ncclSum, comm,
                                    stream_),
                  comm, "ncclReduceScatter"),
        cudaError(cudaMemcpyAsync(out, result, bytes, cudaMemcpyDefault,
                                  stream_),
                  "copying a staged buffer back"),
        cudaError(cudaStreamSynchronize(stream_), "ncclReduceScatter")})
    if (!s.ok())
      return s;
  return absl::OkStatus();
}

absl::StatusOr<std::pair<void *, int>>
NcclCommunicator::peer(absl::string_view axis, int64_t peerOffset, bool send) {
  const char *what = send ? "a send" : "a receive";
  int index = -1;
  for (int i = 0; i < mesh_.axes_size(); ++i)
    if (mesh_.axes(i) == axis)
      index = i;
  if (index < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " along '", axis, "', which is not a mesh axis"));
  int64_t size = mesh_.sizes(index), mine = coords_[index];
  if (peerOffset == 0 || mine + peerOffset < 0 || mine + peerOffset >= size)
    return absl::OutOfRangeError(absl::StrCat(
        what, " at offset ", peerOffset, " along '", axis,
        "' from coordinate ", mine, ": there is no such rank (the axis has ",
        size, ", expected a peer in [0, ", size, ") other than this one)"));
  // A message towards a higher coordinate travels on the axis' upward
  // communicator, whose rank c is coordinate c.
  bool upward = send == (peerOffset > 0);
  void *comm = (upward ? upward_ : downward_).at(std::string(axis));
  return std::make_pair(comm, int(mine + peerOffset));
}

absl::Status NcclCommunicator::Send(absl::string_view axis, int64_t peerOffset,
                                    const void *data, int64_t count,
                                    plan::DType dtype) {
  absl::StatusOr<std::pair<void *, int>> to = peer(axis, peerOffset, true);
  if (!to.ok())
    return to.status();
  absl::StatusOr<ncclDataType_t> type = ncclType(dtype);
  if (!type.ok())
    return type.status();
  // The host's values: a device copy of them, which the send reads until
  // WaitSends.
  if (isHost(data)) {
    const size_t bytes = size_t(count * plan::DTypeBytes(dtype));
    void *copy = nullptr;
    if (absl::Status s = cudaError(cudaMalloc(&copy, std::max<size_t>(bytes, 1)),
                                   "staging a host message");
        !s.ok())
      return s;
    hostSends_.push_back(copy);
    if (absl::Status s = cudaError(
            cudaMemcpyAsync(copy, data, bytes, cudaMemcpyHostToDevice, stream_),
            "staging a host message");
        !s.ok())
      return s;
    data = copy;
  }
  // After what the compute stream has enqueued (the message's bytes), on
  // the stream of sends.
  if (absl::Status s = cudaError(cudaEventRecord(ordered_, stream_),
                                 "ordering a send");
      !s.ok())
    return s;
  if (absl::Status s = cudaError(cudaStreamWaitEvent(sendStream_, ordered_, 0),
                                 "ordering a send");
      !s.ok())
    return s;
  return ncclError(ncclSend(data, size_t(count), *type, to->second,
                            asComm(to->first), sendStream_),
                   asComm(to->first), "ncclSend");
}

absl::Status NcclCommunicator::Recv(absl::string_view axis, int64_t peerOffset,
                                    void *data, int64_t count,
                                    plan::DType dtype) {
  absl::StatusOr<std::pair<void *, int>> from = peer(axis, peerOffset, false);
  if (!from.ok())
    return from.status();
  absl::StatusOr<ncclDataType_t> type = ncclType(dtype);
  if (!type.ok())
    return type.status();
  if (!isHost(data))
    return ncclError(ncclRecv(data, size_t(count), *type, from->second,
                              asComm(from->first), stream_),
                     asComm(from->first), "ncclRecv");
  // Into the host's memory: through the staging, waited for.
  const size_t bytes = size_t(count * plan::DTypeBytes(dtype));
  absl::StatusOr<uint8_t *> stage = staging(std::max<size_t>(bytes, 1));
  if (!stage.ok())
    return stage.status();
  for (absl::Status s :
       {ncclError(ncclRecv(*stage, size_t(count), *type, from->second,
                           asComm(from->first), stream_),
                  asComm(from->first), "ncclRecv"),
        cudaError(cudaMemcpyAsync(data, *stage, bytes, cudaMemcpyDeviceToHost,
                                  stream_),
                  "copying a staged message back"),
        cudaError(cudaStreamSynchronize(stream_), "ncclRecv")})
    if (!s.ok())
      return s;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NcclCommunicator::startOnCollectiveStream() {
  if (absl::Status s = cudaError(cudaEventRecord(ordered_, stream_),
                                 "ordering a collective");
      !s.ok())
    return s;
  if (absl::Status s =
          cudaError(cudaStreamWaitEvent(collectiveStream_, ordered_, 0),
                    "ordering a collective");
      !s.ok())
    return s;
  cudaEvent_t done = nullptr;
  if (!freeEvents_.empty()) {
    done = freeEvents_.back();
    freeEvents_.pop_back();
  } else if (absl::Status s = cudaError(
                 cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                 "creating an event");
             !s.ok()) {
    return s;
  }
  started_[nextHandle_] = done;
  return nextHandle_++;
}

absl::StatusOr<int64_t>
NcclCommunicator::started(absl::StatusOr<int64_t> handle,
                          absl::Status enqueued) {
  if (!handle.ok())
    return handle.status();
  cudaEvent_t done = started_.at(*handle);
  if (!enqueued.ok()) {
    started_.erase(*handle);
    freeEvents_.push_back(done);
    return enqueued;
  }
  if (absl::Status s = cudaError(cudaEventRecord(done, collectiveStream_),
                                 "recording a collective");
      !s.ok())
    return s;
  return *handle;
}

absl::StatusOr<int64_t> NcclCommunicator::startCollective(
    absl::Span<const std::string> axes, plan::DType dtype,
    absl::FunctionRef<absl::Status(void *comm, int type)> enqueue) {
  absl::StatusOr<std::pair<void *, int>> c = call(axes, dtype);
  if (!c.ok())
    return c.status();
  absl::StatusOr<int64_t> handle = startOnCollectiveStream();
  if (!handle.ok())
    return handle;
  return started(handle, enqueue(c->first, c->second));
}

absl::StatusOr<int64_t>
NcclCommunicator::StartReduceScatter(absl::Span<const std::string> axes,
                                     const void *in, void *out,
                                     int64_t countPerRank, plan::DType dtype) {
  return startCollective(axes, dtype, [&](void *group, int type) {
    ncclComm_t comm = asComm(group);
    return ncclError(ncclReduceScatter(in, out, size_t(countPerRank),
                                       ncclDataType_t(type), ncclSum, comm,
                                       collectiveStream_),
                     comm, "ncclReduceScatter");
  });
}

absl::StatusOr<int64_t>
NcclCommunicator::StartAllGather(absl::Span<const std::string> axes,
                                 const void *in, void *out, int64_t count,
                                 plan::DType dtype) {
  return startCollective(axes, dtype, [&](void *group, int type) {
    ncclComm_t comm = asComm(group);
    return ncclError(ncclAllGather(in, out, size_t(count), ncclDataType_t(type),
                                   comm, collectiveStream_),
                     comm, "ncclAllGather");
  });
}

absl::StatusOr<int64_t>
NcclCommunicator::StartAllReduce(absl::Span<const std::string> axes, void *data,
                                 int64_t count, plan::DType dtype) {
  if (isHost(data)) {
    if (absl::Status s = AllReduce(axes, data, count, dtype); !s.ok())
      return s;
    return -1;
  }
  return startCollective(axes, dtype, [&](void *group, int type) {
    ncclComm_t comm = asComm(group);
    return ncclError(ncclAllReduce(data, data, size_t(count),
                                   ncclDataType_t(type), ncclSum, comm,
                                   collectiveStream_),
                     comm, "ncclAllReduce");
  });
}

absl::StatusOr<bool> NcclCommunicator::Test(int64_t handle) {
  auto it = started_.find(handle);
  if (it == started_.end())
    return true;
  cudaError_t e = cudaEventQuery(it->second);
  if (e == cudaErrorNotReady)
    return false;
  if (absl::Status s = cudaError(e, "testing a collective"); !s.ok())
    return s;
  return true;
}

absl::Status NcclCommunicator::Wait(int64_t handle) {
  auto it = started_.find(handle);
  if (it == started_.end())
    return absl::OkStatus();
  cudaEvent_t done = it->second;
  started_.erase(it);
  freeEvents_.push_back(done);
  return cudaError(cudaStreamWaitEvent(stream_, done, 0),
                   "waiting for a collective");
}

absl::Status NcclCommunicator::RecordSendsDone(cudaEvent_t event) {
  return cudaError(cudaEventRecord(event, sendStream_), "recording sends");
}

absl::Status NcclCommunicator::WaitSends() {
  if (!hostSends_.empty()) {
    // The host's messages have left once the stream of sends has run.
    if (absl::Status s = cudaError(cudaStreamSynchronize(sendStream_),
                                   "waiting for sends");
        !s.ok())
      return s;
    for (void *p : hostSends_)
      cudaFree(p);
    hostSends_.clear();
  }
  if (absl::Status s =
          cudaError(cudaEventRecord(ordered_, sendStream_), "waiting for sends");
      !s.ok())
    return s;
  return cudaError(cudaStreamWaitEvent(stream_, ordered_, 0),
                   "waiting for sends");
}

} // namespace braid::cuda
