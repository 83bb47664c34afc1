//===- StreamCommunicator.h - Communication enqueued on streams -*- C++ -*-===//
//
// An exec::Communicator whose work runs on the GPU, ordered by CUDA streams
// rather than done before its call returns (NCCL): the executor hands it its
// compute stream, and the buffers it names are device memory. Collectives
// and receives are enqueued on that stream, so the kernels after them see
// their results, and the host never waits. Sends are enqueued on a stream
// of the communicator's own, after the work enqueued on the compute stream
// so far, so that a send never holds up the sender's compute (a pipeline
// stage sends its activations and goes on). A sent buffer must then not be
// written until its send is done: the executor records an event after each
// send (RecordSendsDone) and makes its stream wait for it before an
// instruction writes those bytes again. WaitSends makes the compute stream
// wait for every send.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_STREAMCOMMUNICATOR_H
#define BRAID_RUNTIME_CUDA_STREAMCOMMUNICATOR_H

#include "runtime/exec/Communicator.h"

#include <cuda_runtime_api.h>

namespace braid::cuda {

class StreamCommunicator : public exec::Communicator {
public:
  /// The stream collectives and receives are enqueued on, and sends are
  /// ordered after; null when its owner destroys it (the communicator then
  /// waits for it no more).
  virtual absl::Status SetStream(cudaStream_t stream) = 0;
  /// Records `event` after every send enqueued so far.
  virtual absl::Status RecordSendsDone(cudaEvent_t event) = 0;
};

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_STREAMCOMMUNICATOR_H
