//===- ExecutorCommunication.cpp - The CUDA executor's collectives --------===//
//
// The executor's calls of the communicator (Executor.h's file comment): the
// handlers of SEND and RECV, ALL_GATHER and REDUCE_SCATTER (laid out
// through the collective scratch where the ranks' blocks are not
// contiguous) and ALL_REDUCE, and the sends in flight, whose bytes must not
// be written yet. The collectives a WAIT finishes are ExecutorBase's
// (runtime/exec/ExecutorBase.h: startInFlight, finishInFlight).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Executor.h"

#include "runtime/common/Status.h"

#include "runtime/cuda/Check.h"
#include "runtime/cuda/StreamCommunicator.h"
#include "runtime/plan/KernelParams.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <string>
#include <vector>

namespace braid::cuda {

using plan::Buffer;
using plan::Instruction;

int64_t Executor::collectiveScratchBytes(const Instruction &inst,
                                         bool gather) const {
  // An all-gather in place (ZeRO's parameters) needs none; otherwise one
  // for a slice along a dimension other than the first (the ranks' blocks
  // are then not contiguous in the full tensor), or for buffers that share
  // arena bytes (a collective's in and out must not).
  const Buffer &x = plan_.buffers(inst.inputs(0)),
               &y = plan_.buffers(inst.outputs(0));
  if (gather && inst.inputs(0) == inst.outputs(0))
    return 0;
  const Buffer &slice = gather ? x : y;
  int64_t along = plan::DecodeCollective(inst).dim, outer = 1;
  for (int i = 0; i < along && i < slice.shape_size(); ++i)
    outer *= slice.shape(i);
  int64_t xBytes = bytes_[inst.inputs(0)], yBytes = bytes_[inst.outputs(0)];
  bool overlap = x.stage() == y.stage() && xBytes && yBytes &&
                 x.offset() < y.offset() + yBytes &&
                 y.offset() < x.offset() + xBytes;
  if (outer == 1 && !overlap)
    return 0;
  return std::max(xBytes, yBytes);
}

absl::Status Executor::beforeCommunication() {
  // A communicator on streams orders itself after the kernels; any other
  // reads the buffers from the host, once they hold the kernels' results.
  if (!streamComm_)
    BRAID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status Executor::waitForSends(uint8_t *begin, int64_t bytes) {
  for (size_t i = 0; i < pendingSends_.size();) {
    const PendingSend &send = pendingSends_[i];
    if (begin < send.end && send.begin < begin + bytes) {
      BRAID_CUDA_CHECK(cudaStreamWaitEvent(stream_, send.done, 0));
      sendEvents_.push_back(send.done);
      pendingSends_.erase(pendingSends_.begin() + long(i));
    } else {
      ++i;
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::waitForSends(const Instruction &inst, int64_t slot) {
  for (int32_t id : inst.outputs()) {
    if (pendingSends_.empty())
      break;
    BRAID_RETURN_IF_ERROR(
        waitForSends(static_cast<uint8_t *>(address(id, slot)), bytes_[id]));
  }
  return absl::OkStatus();
}

absl::Status Executor::WaitSends() {
  if (!comm_)
    return absl::OkStatus();
  for (const PendingSend &send : pendingSends_)
    sendEvents_.push_back(send.done);
  pendingSends_.clear();
  return ExecutorBase::WaitSends();
}

absl::Status Executor::runPointToPoint(const Instruction &inst, int64_t slot,
                                       bool send) {
  auto at = [&](int id) { return static_cast<uint8_t *>(address(id, slot)); };
  int id = send ? inst.inputs(0) : inst.outputs(0);
  const Buffer &b = plan_.buffers(id);
  int64_t peer = plan::DecodePeer(inst);
  if (!comm_)
    return absl::FailedPreconditionError(
        absl::StrCat(send ? "a send to" : "a receive from", " the ",
                     peer > 0 ? "next" : "previous", " rank along '",
                     inst.rank_axis(), "' needs the job's other ranks"));
  // The communicator reads and writes device memory once the kernels
  // before have run; a send is a copy (the buffer may be written at once).
  BRAID_RETURN_IF_ERROR(beforeCommunication());
  if (!send)
    return comm_->Recv(inst.rank_axis(), peer, at(id), plan::NumElements(b),
                       b.dtype());
  BRAID_RETURN_IF_ERROR(comm_->Send(inst.rank_axis(), peer, at(id),
                                    plan::NumElements(b), b.dtype()));
  if (!streamComm_)
    return absl::OkStatus();
  // On a stream of the communicator's: the bytes must not be written
  // again before the send is done (waitForSends).
  cudaEvent_t done = nullptr;
  if (!sendEvents_.empty()) {
    done = sendEvents_.back();
    sendEvents_.pop_back();
  } else {
    BRAID_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  pendingSends_.push_back({at(id), at(id) + bytes_[id], done});
  return streamComm_->RecordSendsDone(done);
}

absl::Status Executor::runGatherScatter(const Instruction &inst, int64_t slot,
                                        bool gather) {
  // Started here and finished by a WAIT (ZeRO's buckets): on a
  // communicator on streams, which runs it beside the compute stream.
  const plan::CollectiveParams params = plan::DecodeCollective(inst);
  const bool async = streamComm_ && params.async;
  auto at = [&](int id) { return static_cast<uint8_t *>(address(id, slot)); };
  // ALL_GATHER and REDUCE_SCATTER along `dim`, viewed as [outer, n, inner]:
  // each rank holds the slice of `chunk` = n x inner elements per outer row
  // (x gathered, y scattered), the full tensor `ranks` blocks of it per
  // row. The communicator's buffers are the ranks' blocks one after the
  // other, so with outer > 1 (or x and y sharing bytes) they are laid out
  // through the collective scratch, by strided copies on the stream.
  const Buffer &x = plan_.buffers(inst.inputs(0)),
               &y = plan_.buffers(inst.outputs(0));
  const Buffer &slice = gather ? x : y;
  const int64_t ranks = plan::GroupSize(plan_, inst);
  const int64_t element = plan::DTypeBytes(y.dtype());
  int64_t along = params.dim, outer = 1, chunk = 1;
  for (int i = 0; i < slice.shape_size(); ++i)
    (i < along ? outer : chunk) *= slice.shape(i);
  const int64_t count = outer * chunk;
  uint8_t *in = at(inst.inputs(0)), *out = at(inst.outputs(0));
  if (ranks == 1) {
    if (in != out)
      BRAID_CUDA_CHECK(cudaMemcpyAsync(out, in, size_t(count * element),
                                       cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }
  if (!comm_)
    return absl::FailedPreconditionError(
        absl::StrCat(gather ? "an all-gather" : "a reduce-scatter", " over ",
                     ranks, " ranks needs the job's other ranks"));
  std::vector<std::string> group(inst.group().begin(), inst.group().end());
  if (gather && inst.inputs(0) == inst.outputs(0)) {
    // In place (ZeRO's parameters): this rank's block of the flat buffer is
    // already there, at its place in the group.
    int64_t block = plan::NumElements(y) / ranks;
    BRAID_RETURN_IF_ERROR(beforeCommunication());
    uint8_t *own = out + groupPlace(inst) * block * element;
    if (!async)
      return comm_->AllGather(group, own, out, block, y.dtype());
    absl::StatusOr<int64_t> handle =
        comm_->StartAllGather(group, own, out, block, y.dtype());
    if (!handle.ok())
      return handle.status();
    startInFlight(*handle, {inst.outputs(0)}, inst);
    return absl::OkStatus();
  }
  const size_t row = size_t(chunk * element);
  if (collectiveScratchBytes(inst, gather) == 0) {
    BRAID_RETURN_IF_ERROR(beforeCommunication());
    if (gather)
      return comm_->AllGather(group, in, out, count, y.dtype());
    if (!async)
      return comm_->ReduceScatter(group, in, out, count, y.dtype());
    absl::StatusOr<int64_t> handle =
        comm_->StartReduceScatter(group, in, out, count, y.dtype());
    if (!handle.ok())
      return handle.status();
    startInFlight(*handle, {inst.inputs(0), inst.outputs(0)}, inst);
    return absl::OkStatus();
  }
  uint8_t *scratch = collectiveScratch_;
  if (gather) {
    // scratch [rank][outer][chunk] -> y [outer][rank][chunk].
    BRAID_RETURN_IF_ERROR(beforeCommunication());
    if (absl::Status s = comm_->AllGather(group, in, scratch, count, y.dtype());
        !s.ok())
      return s;
    for (int64_t k = 0; k < ranks; ++k)
      BRAID_CUDA_CHECK(
          cudaMemcpy2DAsync(out + k * chunk * element, size_t(ranks) * row,
                            scratch + k * count * element, row, row,
                            size_t(outer), cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }
  // x [outer][rank][chunk] -> scratch [rank][outer][chunk], the blocks
  // ordered by the rank they go to.
  for (int64_t k = 0; k < ranks; ++k)
    BRAID_CUDA_CHECK(cudaMemcpy2DAsync(scratch + k * count * element, row,
                                       in + k * chunk * element,
                                       size_t(ranks) * row, row, size_t(outer),
                                       cudaMemcpyDeviceToDevice, stream_));
  BRAID_RETURN_IF_ERROR(beforeCommunication());
  return comm_->ReduceScatter(group, scratch, out, count, y.dtype());
}

absl::Status Executor::runAllReduce(const Instruction &inst, int64_t slot) {
  // Over the ranks of the group's axes (data parallelism's gradients): the
  // stream's kernels finish first, since the communicator reads the buffers
  // once they hold the sums' inputs.
  auto out = [&](int i) -> const Buffer & {
    return plan_.buffers(inst.outputs(i));
  };
  int64_t ranks = 1;
  for (const std::string &axis : inst.group())
    ranks *= plan::AxisSize(plan_.mesh(), axis);
  if (ranks > 1 && !comm_)
    return absl::FailedPreconditionError(absl::StrCat(
        "an all-reduce over ", ranks, " ranks needs the job's other ranks"));
  std::vector<std::string> group(inst.group().begin(), inst.group().end());
  if (absl::Status s = copyInputs(inst, slot); !s.ok() || ranks == 1)
    return s;
  BRAID_RETURN_IF_ERROR(beforeCommunication());
  const plan::CollectiveParams params = plan::DecodeCollective(inst);
  if (streamComm_ && params.async) {
    // In place on the communicator's stream, beside the compute stream,
    // until a WAIT naming the buffer (the gradients' sums of the step's
    // last micro-batch, overlapping the rest of its backward).
    for (int i = 0; i < inst.outputs_size(); ++i) {
      absl::StatusOr<int64_t> handle =
          comm_->StartAllReduce(group, address(inst.outputs(i), slot),
                                plan::NumElements(out(i)), out(i).dtype());
      if (!handle.ok())
        return handle.status();
      startInFlight(*handle, {inst.outputs(i)}, inst);
    }
    return absl::OkStatus();
  }
  for (int i = 0; i < inst.outputs_size(); ++i)
    BRAID_RETURN_IF_ERROR(comm_->AllReduce(
        group, address(inst.outputs(i), slot), plan::NumElements(out(i)),
        out(i).dtype(),
        params.max ? exec::Reduction::kMax : exec::Reduction::kSum));
  return absl::OkStatus();
}

} // namespace braid::cuda
