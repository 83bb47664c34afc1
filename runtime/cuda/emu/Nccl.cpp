//===- Nccl.cpp - NCCL's API under the CUDA emulation, on MPI -------------===//
//
// The part of NCCL the CUDA backend calls (NcclCommunicator), for its tests
// under the CUDA emulation, where device memory is host memory and a
// stream's work runs when it is enqueued. Each rank is a process of an MPI
// job (mpirun): the world communicator is MPI_COMM_WORLD, a split is
// MPI_Comm_split. What it checks as NCCL does, or should:
//   - every rank of ncclCommInitRank was given the same unique id (rank 0's,
//     which the ranks exchanged themselves: the rendezvous), and the job has
//     as many ranks as the call says;
//   - a receive's count is the send's;
//   - every buffer is device memory (a cudaMalloc allocation of the
//     emulated runtime): NCCL on a GPU cannot read host memory;
//   - only sums and maxima, of the types NCCL has.
// Collectives gather every rank's operand and combine them in rank order,
// in float for BF16 and F16 (rounded after each addition, as a ring of
// 16-bit partial sums would be), so every rank gets the same bits. A send
// is a copy (MPI_Isend), as a send on a stream that nothing waits for: the
// sender goes on. Between ncclGroupStart and ncclGroupEnd operations are
// queued, and run at the end, sends first.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Float16.h"

#include <mpi.h>
#include <nccl.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

// The emulation's check of a stream (runtime/cuda/emu/Emu.h, which this file,
// compiled without the emulation's kernel macros, does not include).
namespace braid::cuda::emu {
void checkStream(cudaStream_t stream, const char *call);
bool captured(cudaStream_t stream, std::function<void()> work);
[[noreturn]] void fail(const char *message);
} // namespace braid::cuda::emu

struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  /// Sends not yet known to have left, with the copies they read.
  struct Send {
    MPI_Request request;
    std::shared_ptr<std::vector<char>> copy;
  };
  std::vector<Send> sends;
  std::string lastError;
};

namespace {

constexpr char kMagic[] = "braid emulated nccl";

/// MPI_Finalize at exit, when this library initialised MPI.
struct MpiSession {
  bool owned = false;
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned && !finalized)
      MPI_Finalize();
  }
};
MpiSession session;

thread_local int groupDepth = 0;
/// An operation and the stream it was enqueued on.
struct Queued {
  std::function<ncclResult_t()> op;
  cudaStream_t stream;
};
thread_local std::vector<Queued> queuedSends, queuedOps;

size_t typeBytes(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8:
  case ncclFloat8e4m3:
  case ncclFloat8e5m2:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  default:
    return 8;
  }
}

bool validType(ncclDataType_t t) { return t >= 0 && t < ncclNumTypes; }

ncclResult_t fail(ncclComm_t comm, ncclResult_t r, std::string why) {
  if (comm)
    comm->lastError = std::move(why);
  return r;
}

/// Whether `bytes` bytes at `p` are device memory (nothing to check for 0).
bool onDevice(const void *p, size_t bytes) {
  if (bytes == 0)
    return true;
  cudaPointerAttributes a;
  return cudaPointerGetAttributes(&a, p) == cudaSuccess &&
         a.type == cudaMemoryTypeDevice &&
         cudaPointerGetAttributes(&a, static_cast<const char *>(p) + bytes -
                                          1) == cudaSuccess &&
         a.type == cudaMemoryTypeDevice;
}

/// ncclInvalidArgument, naming `what`, when a buffer is not device memory.
ncclResult_t checkDevice(ncclComm_t comm, const char *what,
                         std::initializer_list<std::pair<const void *, size_t>>
                             buffers) {
  for (const auto &[p, bytes] : buffers)
    if (!onDevice(p, bytes))
      return fail(comm, ncclInvalidArgument,
                  std::string(what) +
                      ": a buffer is not device memory (NCCL reads and "
                      "writes the GPU's memory only)");
  return ncclSuccess;
}

/// Runs `op` now, or when the graph is launched where `stream` is being
/// captured (an error then stops the program: a graph's launch cannot
/// return it).
ncclResult_t runOrCapture(std::function<ncclResult_t()> op,
                          cudaStream_t stream) {
  if (braid::cuda::emu::captured(stream, [op] {
        if (op() != ncclSuccess)
          braid::cuda::emu::fail("an NCCL operation of a graph failed");
      }))
    return ncclSuccess;
  return op();
}

/// Runs `op` now, or at ncclGroupEnd (sends before everything else).
ncclResult_t enqueue(std::function<ncclResult_t()> op, bool send,
                     cudaStream_t stream) {
  if (groupDepth == 0)
    return runOrCapture(std::move(op), stream);
  (send ? queuedSends : queuedOps).push_back({std::move(op), stream});
  return ncclSuccess;
}

double load(const char *p, ncclDataType_t t) {
  switch (t) {
  case ncclFloat32: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case ncclFloat64: {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case ncclFloat16:
  case ncclBfloat16: {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return t == ncclFloat16 ? braid::halfToFloat(v)
                            : braid::bfloat16ToFloat(v);
  }
  case ncclInt32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case ncclInt64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return double(v);
  }
  default:
    return 0;
  }
}

void store(char *p, ncclDataType_t t, double v) {
  switch (t) {
  case ncclFloat32: {
    float f = float(v);
    std::memcpy(p, &f, 4);
    break;
  }
  case ncclFloat64:
    std::memcpy(p, &v, 8);
    break;
  case ncclFloat16:
  case ncclBfloat16: {
    uint16_t h = t == ncclFloat16 ? braid::floatToHalf(float(v))
                                  : braid::floatToBfloat16(float(v));
    std::memcpy(p, &h, 2);
    break;
  }
  case ncclInt32: {
    int32_t i = int32_t(v);
    std::memcpy(p, &i, 4);
    break;
  }
  case ncclInt64: {
    int64_t i = int64_t(v);
    std::memcpy(p, &i, 8);
    break;
  }
  default:
    break;
  }
}

/// Every rank's `bytes` bytes at `in`, in rank order, into `all`.
ncclResult_t gatherAll(ncclComm_t comm, const void *in, size_t bytes,
                       std::vector<char> &all) {
  all.resize(bytes * size_t(comm->size));
  std::vector<char> mine(static_cast<const char *>(in),
                         static_cast<const char *>(in) + bytes);
  if (bytes > size_t(1) << 30)
    return fail(comm, ncclInvalidUsage, "the emulation moves at most 1 GiB");
  if (MPI_Allgather(mine.data(), int(bytes), MPI_BYTE, all.data(), int(bytes),
                    MPI_BYTE, comm->comm) != MPI_SUCCESS)
    return fail(comm, ncclSystemError, "MPI_Allgather failed");
  return ncclSuccess;
}

/// out[i] = the ranks' elements i combined in rank order.
ncclResult_t reduceAll(ncclComm_t comm, const std::vector<char> &all,
                       size_t count, ncclDataType_t type, ncclRedOp_t op,
                       size_t first, void *out) {
  if (op != ncclSum && op != ncclMax)
    return fail(comm, ncclInvalidArgument,
                "the emulation reduces with ncclSum and ncclMax only");
  if (type != ncclFloat32 && type != ncclFloat64 && type != ncclFloat16 &&
      type != ncclBfloat16 && type != ncclInt32 && type != ncclInt64)
    return fail(comm, ncclInvalidArgument, "unsupported data type");
  const size_t e = typeBytes(type), total = all.size() / size_t(comm->size);
  std::vector<char> result(count * e);
  for (size_t i = 0; i < count; ++i) {
    double acc = load(all.data() + (first + i) * e, type);
    for (int r = 1; r < comm->size; ++r) {
      double v = load(all.data() + size_t(r) * total + (first + i) * e, type);
      acc = op == ncclSum ? acc + v
            : (std::isnan(acc) || std::isnan(v)) ? NAN
                                                 : std::max(acc, v);
      // 16-bit partial sums are rounded as they are formed.
      if (type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat32) {
        char tmp[8];
        store(tmp, type, acc);
        acc = load(tmp, type);
      }
    }
    store(result.data() + i * e, type, acc);
  }
  std::memcpy(out, result.data(), result.size());
  return ncclSuccess;
}

} // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId)
    return ncclInvalidArgument;
  std::memset(uniqueId->internal, 0, sizeof(uniqueId->internal));
  std::memcpy(uniqueId->internal, kMagic, sizeof(kMagic));
  std::random_device rd;
  for (size_t i = 32; i < sizeof(uniqueId->internal); ++i)
    uniqueId->internal[i] = char(rd());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks,
                              ncclUniqueId commId, int rank) {
  if (!comm)
    return ncclInvalidArgument;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_Init(nullptr, nullptr);
    session.owned = true;
  }
  int worldRank = 0, worldSize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  // The emulation's world is MPI's.
  if (nranks != worldSize || rank != worldRank)
    return ncclInvalidUsage;
  if (std::memcmp(commId.internal, kMagic, sizeof(kMagic)) != 0)
    return ncclInvalidArgument;
  // Every rank must hold rank 0's id.
  ncclUniqueId root = commId;
  MPI_Bcast(root.internal, int(sizeof(root.internal)), MPI_BYTE, 0,
            MPI_COMM_WORLD);
  int same = std::memcmp(root.internal, commId.internal,
                         sizeof(root.internal)) == 0;
  int all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all)
    return ncclInvalidUsage;
  auto c = std::make_unique<ncclComm>();
  MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
  c->rank = rank;
  c->size = nranks;
  *comm = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *) {
  if (!comm || !newcomm)
    return ncclInvalidArgument;
  MPI_Comm split = MPI_COMM_NULL;
  if (MPI_Comm_split(comm->comm,
                     color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key,
                     &split) != MPI_SUCCESS)
    return fail(comm, ncclSystemError, "MPI_Comm_split failed");
  if (split == MPI_COMM_NULL) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  auto c = std::make_unique<ncclComm>();
  c->comm = split;
  MPI_Comm_rank(split, &c->rank);
  MPI_Comm_size(split, &c->size);
  *newcomm = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm)
    return ncclSuccess;
  for (ncclComm::Send &send : comm->sends)
    MPI_Wait(&send.request, MPI_STATUS_IGNORE);
  MPI_Comm_free(&comm->comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  // The other ranks may wait in MPI for this one: end the job.
  (void)comm;
  MPI_Abort(MPI_COMM_WORLD, 1);
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  default:
    return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  return comm ? comm->lastError.c_str() : "";
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  if (!comm || !count)
    return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  if (!comm || !rank)
    return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "ncclAllReduce");
  if (!comm || !validType(datatype))
    return ncclInvalidArgument;
  const size_t bytes = count * typeBytes(datatype);
  if (ncclResult_t r = checkDevice(comm, "ncclAllReduce",
                                   {{sendbuff, bytes}, {recvbuff, bytes}});
      r != ncclSuccess)
    return r;
  return enqueue(
      [=]() {
        std::vector<char> all;
        if (ncclResult_t r = gatherAll(comm, sendbuff, bytes, all);
            r != ncclSuccess)
          return r;
        return reduceAll(comm, all, count, datatype, op, 0, recvbuff);
      },
      false, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "ncclReduceScatter");
  if (!comm || !validType(datatype))
    return ncclInvalidArgument;
  const size_t bytes = recvcount * typeBytes(datatype);
  if (ncclResult_t r = checkDevice(
          comm, "ncclReduceScatter",
          {{sendbuff, bytes * size_t(comm->size)}, {recvbuff, bytes}});
      r != ncclSuccess)
    return r;
  return enqueue(
      [=]() {
        std::vector<char> all;
        if (ncclResult_t r = gatherAll(comm, sendbuff,
                                       bytes * size_t(comm->size), all);
            r != ncclSuccess)
          return r;
        return reduceAll(comm, all, recvcount, datatype, op,
                         size_t(comm->rank) * recvcount, recvbuff);
      },
      false, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "ncclAllGather");
  if (!comm || !validType(datatype))
    return ncclInvalidArgument;
  const size_t bytes = sendcount * typeBytes(datatype);
  if (ncclResult_t r = checkDevice(
          comm, "ncclAllGather",
          {{sendbuff, bytes}, {recvbuff, bytes * size_t(comm->size)}});
      r != ncclSuccess)
    return r;
  return enqueue(
      [=]() {
        std::vector<char> all;
        if (ncclResult_t r = gatherAll(comm, sendbuff, bytes, all);
            r != ncclSuccess)
          return r;
        std::memcpy(recvbuff, all.data(), all.size());
        return ncclSuccess;
      },
      false, stream);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "ncclSend");
  if (!comm || !validType(datatype) || peer < 0 || peer >= comm->size)
    return ncclInvalidArgument;
  const size_t bytes = count * typeBytes(datatype);
  if (bytes > size_t(1) << 30)
    return fail(comm, ncclInvalidUsage, "the emulation sends at most 1 GiB");
  if (ncclResult_t r = checkDevice(comm, "ncclSend", {{sendbuff, bytes}});
      r != ncclSuccess)
    return r;
  // The copies of sends that have left are freed.
  for (size_t i = 0; i < comm->sends.size();) {
    int done = 0;
    MPI_Test(&comm->sends[i].request, &done, MPI_STATUS_IGNORE);
    if (done)
      comm->sends.erase(comm->sends.begin() + long(i));
    else
      ++i;
  }
  // The bytes as they are now, which is when a stream would read them.
  auto copy = std::make_shared<std::vector<char>>(
      static_cast<const char *>(sendbuff),
      static_cast<const char *>(sendbuff) + bytes);
  return enqueue(
      [=]() {
        MPI_Request request;
        if (MPI_Isend(copy->data(), int(bytes), MPI_BYTE, peer, 0, comm->comm,
                      &request) != MPI_SUCCESS)
          return fail(comm, ncclSystemError, "MPI_Isend failed");
        comm->sends.push_back({request, copy});
        return ncclSuccess;
      },
      true, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "ncclRecv");
  if (!comm || !validType(datatype) || peer < 0 || peer >= comm->size)
    return ncclInvalidArgument;
  const size_t bytes = count * typeBytes(datatype);
  if (ncclResult_t r = checkDevice(comm, "ncclRecv", {{recvbuff, bytes}});
      r != ncclSuccess)
    return r;
  return enqueue(
      [=]() {
        MPI_Status status;
        if (MPI_Probe(peer, 0, comm->comm, &status) != MPI_SUCCESS)
          return fail(comm, ncclSystemError, "MPI_Probe failed");
        int got = 0;
        MPI_Get_count(&status, MPI_BYTE, &got);
        if (size_t(got) != bytes)
          return fail(comm, ncclInvalidUsage,
                      "a receive of " + std::to_string(bytes) +
                          " bytes matched a send of " + std::to_string(got));
        if (MPI_Recv(recvbuff, got, MPI_BYTE, peer, 0, comm->comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
          return fail(comm, ncclSystemError, "MPI_Recv failed");
        return ncclSuccess;
      },
      false, stream);
}

ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (groupDepth == 0)
    return ncclInvalidUsage;
  if (--groupDepth > 0)
    return ncclSuccess;
  std::vector<Queued> sends, ops;
  sends.swap(queuedSends);
  ops.swap(queuedOps);
  for (auto *list : {&sends, &ops})
    for (Queued &q : *list)
      if (ncclResult_t r = runOrCapture(std::move(q.op), q.stream);
          r != ncclSuccess)
        return r;
  return ncclSuccess;
}

} // extern "C"
