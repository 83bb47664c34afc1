//===- MpiCommunicator.cpp - Collectives on MPI ---------------------------===//

#include "runtime/comm/MpiCommunicator.h"

#include <cstring>
#include <map>
#include <memory>

#include "runtime/common/Float16.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

namespace braid::comm {
namespace {

const char *envOf(std::initializer_list<const char *> names) {
  for (const char *name : names)
    if (const char *v = std::getenv(name))
      return v;
  return nullptr;
}

absl::Status mpiError(int code, absl::string_view what) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::InternalError(
      absl::StrCat(what, " failed: ", std::string(text, length)));
}

/// The element type of a point-to-point message: any dtype of the plan
/// (half precision as opaque 16-bit words).
absl::StatusOr<MPI_Datatype> messageType(plan::DType dtype) {
  switch (dtype) {
  case plan::F32:
    return MPI_FLOAT;
  case plan::F64:
    return MPI_DOUBLE;
  case plan::I32:
    return MPI_INT32_T;
  case plan::I64:
    return MPI_INT64_T;
  case plan::BF16:
  case plan::F16:
    return MPI_UINT16_T;
  default:
    return absl::InvalidArgumentError(absl::StrCat(
        "a message of unknown dtype ", int(dtype),
        " (expected one of the plan's dtypes)"));
  }
}

/// MPI counts are int: larger messages go in pieces of at most this many
/// elements, in order, which the receiver takes in the same pieces.
constexpr int64_t kMaxMessageCount = int64_t(1) << 30;

/// The 16-bit formats (BF16, F16) as MPI types of their own, so that one
/// user-defined operation tells them apart; created once, after MPI_Init.
MPI_Datatype bf16Type = MPI_DATATYPE_NULL, f16Type = MPI_DATATYPE_NULL;
MPI_Op sum16 = MPI_OP_NULL, max16 = MPI_OP_NULL;

/// inout[i] = combine(in[i], inout[i]) for the 16-bit format of `type`,
/// computed in float and rounded to the format (to nearest even), as a
/// device combining the two halves would.
template <typename Combine>
void reduce16(const void *in, void *inout, int length, MPI_Datatype type,
              Combine combine) {
  const bool bf16 = type == bf16Type;
  const auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < length; ++i) {
    float x = bf16 ? bfloat16ToFloat(a[i]) : halfToFloat(a[i]);
    float y = bf16 ? bfloat16ToFloat(b[i]) : halfToFloat(b[i]);
    float r = combine(x, y);
    b[i] = bf16 ? floatToBfloat16(r) : floatToHalf(r);
  }
}

void sum16Function(void *in, void *inout, int *length, MPI_Datatype *type) {
  reduce16(in, inout, *length, *type, [](float x, float y) { return x + y; });
}

void max16Function(void *in, void *inout, int *length, MPI_Datatype *type) {
  // NaN wins, as it does in a float maximum that propagates it.
  reduce16(in, inout, *length, *type, [](float x, float y) {
    return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y);
  });
}

void createHalfTypes() {
  if (bf16Type != MPI_DATATYPE_NULL)
    return;
  MPI_Type_contiguous(1, MPI_UINT16_T, &bf16Type);
  MPI_Type_commit(&bf16Type);
  MPI_Type_contiguous(1, MPI_UINT16_T, &f16Type);
  MPI_Type_commit(&f16Type);
  MPI_Op_create(&sum16Function, /*commute=*/1, &sum16);
  MPI_Op_create(&max16Function, /*commute=*/1, &max16);
}

absl::StatusOr<MPI_Datatype> mpiType(plan::DType dtype) {
  switch (dtype) {
  case plan::F32:
    return MPI_FLOAT;
  case plan::F64:
    return MPI_DOUBLE;
  case plan::BF16:
    return bf16Type;
  case plan::F16:
    return f16Type;
  default:
    return absl::UnimplementedError(
        absl::StrCat("collectives on ", plan::DType_Name(dtype),
                     " on MPI (expected F32, F64, BF16 or F16)"));
  }
}

/// The MPI operation of a reduction on `type`.
MPI_Op mpiOp(MPI_Datatype type, exec::Reduction op) {
  bool half = type == bf16Type || type == f16Type;
  if (op == exec::Reduction::kMax)
    return half ? max16 : MPI_MAX;
  return half ? sum16 : MPI_SUM;
}

/// The communicator and element type of one collective call.
struct Call {
  MPI_Comm comm;
  MPI_Datatype type;
};

absl::StatusOr<Call> prepare(absl::StatusOr<void *> group, plan::DType dtype) {
  if (!group.ok())
    return group.status();
  absl::StatusOr<MPI_Datatype> type = mpiType(dtype);
  if (!type.ok())
    return type.status();
  return Call{static_cast<MPI_Comm>(*group), *type};
}

} // namespace

struct MpiCommunicator::Requests {
  std::vector<MPI_Request> requests;
  /// The copies the sends read until WaitSends.
  std::vector<std::unique_ptr<char[]>> copies;
  /// Started collectives by handle.
  std::map<int64_t, MPI_Request> byHandle;
};

MpiCommunicator::MpiCommunicator()
    : pendingSends_(new Requests), started_(new Requests) {}

namespace {

/// MPI_Finalize at exit, when MpiBroadcastFromRoot initialised MPI and
/// nothing finalised it since (an MpiCommunicator does on destruction).
struct FinalizeAtExit {
  ~FinalizeAtExit() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized)
      MPI_Finalize();
  }
};

/// Rank 0's `text` on every rank (its length first).
absl::Status broadcastText(std::string &text, const char *what) {
  long long size = (long long)text.size();
  if (MPI_Bcast(&size, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    return absl::UnavailableError(
        absl::StrCat("MPI_Bcast of the size of ", what, " failed"));
  text.resize(size_t(size));
  if (size > 0 && MPI_Bcast(text.data(), int(size), MPI_CHAR, 0,
                            MPI_COMM_WORLD) != MPI_SUCCESS)
    return absl::UnavailableError(
        absl::StrCat("MPI_Bcast of ", what, " failed"));
  return absl::OkStatus();
}

} // namespace

absl::Status MpiBroadcastFromRoot(const std::string &tag, std::string &bytes) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_Init(nullptr, nullptr);
    static FinalizeAtExit finalize;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string rootTag = tag;
  if (absl::Status s = broadcastText(rootTag, "the job's tag"); !s.ok())
    return s;
  if (absl::Status s = broadcastText(bytes, "rank 0's bytes"); !s.ok())
    return s;
  if (rootTag != tag)
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " of the MPI job is '", tag, "' but rank 0 is '",
        rootTag, "': every rank must run the same plan"));
  return absl::OkStatus();
}

bool LaunchedByMpi() {
  return envOf({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) != nullptr;
}

int64_t LocalRanks() {
  const char *v = envOf({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  int64_t n = v ? std::atoll(v) : 1;
  return std::max<int64_t>(n, 1);
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>>
MpiCommunicator::Create(const plan::Plan &plan) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    MPI_Init(nullptr, nullptr);
  // Errors come back as codes, so a failing collective becomes a message
  // (and then an abort of the job) rather than a silent hang.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  createHalfTypes();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator());
  c->mesh_ = plan.mesh();
  c->rank_ = rank;
  int64_t world = plan::WorldSize(plan);
  if (world != size)
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan is for ", world, " ranks (", plan::DescribeMesh(plan.mesh()),
        ") but the job has ", size, ": start it with mpirun -np ", world));
  c->coords_ = plan::MeshCoordinates(plan.mesh(), rank);
  // Every group the plan uses, in one order on every rank (the plan is the
  // same everywhere), since creating a communicator is collective.
  for (const std::vector<std::string> &axes : plan::CommunicationGroups(plan))
    if (absl::Status s = c->addGroup(axes); !s.ok())
      return s;
  return c;
}

absl::Status MpiCommunicator::addGroup(const std::vector<std::string> &axes) {
  // The ranks of a group share a colour; their world rank orders them.
  int64_t color = plan::GroupColor(mesh_, coords_, axes);
  MPI_Comm group;
  if (int rc = MPI_Comm_split(MPI_COMM_WORLD, int(color), int(rank_), &group);
      rc != MPI_SUCCESS)
    return mpiError(rc, absl::StrCat("creating the group {", plan::GroupKey(axes), "}"));
  MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN);
  groups_[plan::GroupKey(axes)] = group;
  return absl::OkStatus();
}

MpiCommunicator::~MpiCommunicator() {
  // Sends and collectives still in flight read memory their owner is about
  // to free.
  (void)WaitSends();
  for (auto &[handle, request] : started_->byHandle)
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  for (auto &[key, group] : groups_) {
    MPI_Comm c = static_cast<MPI_Comm>(group);
    MPI_Comm_free(&c);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

absl::StatusOr<void *>
MpiCommunicator::group(absl::Span<const std::string> axes) {
  std::vector<std::string> list(axes.begin(), axes.end());
  auto it = groups_.find(plan::GroupKey(list));
  if (it == groups_.end()) {
    // A group the plan's instructions do not name (the trainer's own
    // gathers): created now, which every rank does at the same point.
    if (absl::Status s = addGroup(list); !s.ok())
      return s;
    it = groups_.find(plan::GroupKey(list));
  }
  return it->second;
}

/// An all-gather's group and type; `in` becomes MPI_IN_PLACE when it is this
/// rank's block of `out` (in place).
static absl::StatusOr<Call> prepareGather(absl::StatusOr<void *> group,
                                          const void *&in, void *out,
                                          int64_t count, plan::DType dtype) {
  absl::StatusOr<Call> call = prepare(group, dtype);
  if (!call.ok())
    return call.status();
  if (count > (int64_t(1) << 30))
    return absl::UnimplementedError("an all-gather of more than 2^30 elements");
  int place = 0, size = 0;
  MPI_Comm_rank(call->comm, &place);
  MPI_Type_size(call->type, &size);
  if (in == static_cast<const char *>(out) + int64_t(place) * count * size)
    in = MPI_IN_PLACE;
  return call;
}

absl::Status MpiCommunicator::AllGather(absl::Span<const std::string> axes,
                                        const void *in, void *out,
                                        int64_t count, plan::DType dtype) {
  absl::StatusOr<Call> call = prepareGather(group(axes), in, out, count, dtype);
  if (!call.ok())
    return call.status();
  if (int rc = MPI_Allgather(in, int(count), call->type, out, int(count),
                             call->type, call->comm);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Allgather");
  return absl::OkStatus();
}

/// MPI counts are ints: a reduce-scatter moves at most 2^30 per rank here.
static absl::Status checkScatterCount(int64_t countPerRank) {
  if (countPerRank > (int64_t(1) << 30))
    return absl::UnimplementedError(
        absl::StrCat("a reduce-scatter of ", countPerRank,
                     " elements per rank (MPI takes at most 2^30)"));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MpiCommunicator::StartReduceScatter(
    absl::Span<const std::string> axes, const void *in, void *out,
    int64_t countPerRank, plan::DType dtype) {
  absl::StatusOr<Call> call = prepare(group(axes), dtype);
  if (!call.ok())
    return call.status();
  if (absl::Status s = checkScatterCount(countPerRank); !s.ok())
    return s;
  MPI_Request request;
  if (int rc = MPI_Ireduce_scatter_block(in, out, int(countPerRank),
                                         call->type, mpiOp(call->type, exec::Reduction::kSum), call->comm,
                                         &request);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Ireduce_scatter_block");
  int64_t handle = nextHandle_++;
  started_->byHandle[handle] = request;
  return handle;
}

absl::StatusOr<int64_t>
MpiCommunicator::StartAllGather(absl::Span<const std::string> axes,
                                const void *in, void *out, int64_t count,
                                plan::DType dtype) {
  absl::StatusOr<Call> call = prepareGather(group(axes), in, out, count, dtype);
  if (!call.ok())
    return call.status();
  MPI_Request request;
  if (int rc = MPI_Iallgather(in, int(count), call->type, out, int(count),
                              call->type, call->comm, &request);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Iallgather");
  int64_t handle = nextHandle_++;
  started_->byHandle[handle] = request;
  return handle;
}

absl::StatusOr<int64_t>
MpiCommunicator::StartAllReduce(absl::Span<const std::string> axes, void *data,
                                int64_t count, plan::DType dtype) {
  absl::StatusOr<Call> call = prepare(group(axes), dtype);
  if (!call.ok())
    return call.status();
  // One request per call: a larger buffer is refused, not cut in pieces.
  if (count > (int64_t(1) << 30))
    return absl::UnimplementedError(
        absl::StrCat("an all-reduce in flight of ", count,
                     " elements (MPI takes at most 2^30 in one request)"));
  MPI_Request request;
  if (int rc = MPI_Iallreduce(MPI_IN_PLACE, data, int(count), call->type,
                              mpiOp(call->type, exec::Reduction::kSum),
                              call->comm, &request);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Iallreduce");
  int64_t handle = nextHandle_++;
  started_->byHandle[handle] = request;
  return handle;
}

absl::StatusOr<bool> MpiCommunicator::Test(int64_t handle) {
  auto it = started_->byHandle.find(handle);
  if (it == started_->byHandle.end())
    return true;
  int done = 0;
  if (int rc = MPI_Test(&it->second, &done, MPI_STATUS_IGNORE);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Test");
  if (done)
    started_->byHandle.erase(it);
  return done != 0;
}

absl::Status MpiCommunicator::Wait(int64_t handle) {
  auto it = started_->byHandle.find(handle);
  if (it == started_->byHandle.end())
    return absl::OkStatus();
  int rc = MPI_Wait(&it->second, MPI_STATUS_IGNORE);
  started_->byHandle.erase(it);
  if (rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Wait");
  return absl::OkStatus();
}

absl::Status MpiCommunicator::ReduceScatter(absl::Span<const std::string> axes,
                                            const void *in, void *out,
                                            int64_t countPerRank,
                                            plan::DType dtype) {
  absl::StatusOr<Call> call = prepare(group(axes), dtype);
  if (!call.ok())
    return call.status();
  if (absl::Status s = checkScatterCount(countPerRank); !s.ok())
    return s;
  if (int rc = MPI_Reduce_scatter_block(in, out, int(countPerRank), call->type,
                                        mpiOp(call->type, exec::Reduction::kSum),
                                        call->comm);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Reduce_scatter_block");
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllReduce(absl::Span<const std::string> axes,
                                        void *data, int64_t count,
                                        plan::DType dtype, exec::Reduction op) {
  absl::StatusOr<Call> call = prepare(group(axes), dtype);
  if (!call.ok())
    return call.status();
  // MPI counts are int: large buffers go in pieces.
  const int64_t kMaxCount = int64_t(1) << 30;
  char *p = static_cast<char *>(data);
  int64_t bytes = plan::DTypeBytes(dtype);
  for (int64_t done = 0; done < count; done += kMaxCount) {
    int n = int(std::min(kMaxCount, count - done));
    if (int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * bytes, n, call->type,
                               mpiOp(call->type, op),
                               call->comm);
        rc != MPI_SUCCESS)
      return mpiError(rc, "MPI_Allreduce");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<void *, int>>
MpiCommunicator::peer(absl::string_view axis, int64_t peerOffset,
                      absl::string_view what) {
  int index = -1;
  for (int i = 0; i < mesh_.axes_size(); ++i)
    if (mesh_.axes(i) == axis)
      index = i;
  if (index < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " along '", axis, "', which is not a mesh axis"));
  int64_t size = mesh_.sizes(index), mine = coords_[index];
  if (peerOffset < -size || peerOffset > size || mine + peerOffset < 0 ||
      mine + peerOffset >= size)
    return absl::OutOfRangeError(absl::StrCat(
        what, " at offset ", peerOffset, " along '", axis,
        "' from coordinate ", mine, ": there is no such rank (the axis has ",
        size, ", expected a peer in [0, ", size, "))"));
  absl::StatusOr<void *> comm = group({std::string(axis)});
  if (!comm.ok())
    return comm.status();
  // The axis' communicator orders its ranks by world rank, that is by their
  // coordinate along the axis.
  return std::make_pair(*comm, int(mine + peerOffset));
}

absl::Status MpiCommunicator::Send(absl::string_view axis, int64_t peerOffset,
                                   const void *data, int64_t count,
                                   plan::DType dtype) {
  absl::StatusOr<std::pair<void *, int>> to = peer(axis, peerOffset, "a send");
  if (!to.ok())
    return to.status();
  absl::StatusOr<MPI_Datatype> type = messageType(dtype);
  if (!type.ok())
    return type.status();
  MPI_Comm comm = static_cast<MPI_Comm>(to->first);
  int64_t bytes = plan::DTypeBytes(dtype);
  // The message is a copy, so that the caller may write `data` at once.
  auto copy = std::make_unique<char[]>(std::max<int64_t>(count * bytes, 1));
  std::memcpy(copy.get(), data, count * bytes);
  const char *p = copy.get();
  pendingSends_->copies.push_back(std::move(copy));
  // One piece even when empty, so that the receiver's piece matches.
  for (int64_t done = 0; done == 0 || done < count; done += kMaxMessageCount) {
    int n = int(std::min(kMaxMessageCount, count - done));
    MPI_Request request;
    if (int rc = MPI_Isend(p + done * bytes, n, *type, to->second, 0, comm,
                           &request);
        rc != MPI_SUCCESS)
      return mpiError(rc, "MPI_Isend");
    pendingSends_->requests.push_back(request);
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Recv(absl::string_view axis, int64_t peerOffset,
                                   void *data, int64_t count,
                                   plan::DType dtype) {
  absl::StatusOr<std::pair<void *, int>> from =
      peer(axis, peerOffset, "a receive");
  if (!from.ok())
    return from.status();
  absl::StatusOr<MPI_Datatype> type = messageType(dtype);
  if (!type.ok())
    return type.status();
  MPI_Comm comm = static_cast<MPI_Comm>(from->first);
  char *p = static_cast<char *>(data);
  int64_t bytes = plan::DTypeBytes(dtype);
  for (int64_t done = 0; done == 0 || done < count; done += kMaxMessageCount) {
    int n = int(std::min(kMaxMessageCount, count - done));
    // The message's size first, so that one of another size is reported as
    // such rather than as MPI's truncation error or a short read.
    MPI_Status status;
    int got = 0;
    if (int rc = MPI_Probe(from->second, 0, comm, &status); rc != MPI_SUCCESS)
      return mpiError(rc, "MPI_Probe");
    MPI_Get_count(&status, *type, &got);
    if (got != n)
      return absl::InvalidArgumentError(absl::StrCat(
          "the message from offset ", peerOffset, " along '", axis, "' holds ",
          got == MPI_UNDEFINED ? std::string("a partial element count")
                               : absl::StrCat(got, " elements"),
          " of ", plan::DType_Name(dtype), ", expected ", n,
          " (the ranks' plans disagree)"));
    if (int rc = MPI_Recv(p + done * bytes, n, *type, from->second, 0, comm,
                          MPI_STATUS_IGNORE);
        rc != MPI_SUCCESS)
      return mpiError(rc, "MPI_Recv");
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::WaitSends() {
  std::vector<MPI_Request> &requests = pendingSends_->requests;
  if (requests.empty())
    return absl::OkStatus();
  int rc = MPI_Waitall(int(requests.size()), requests.data(),
                       MPI_STATUSES_IGNORE);
  requests.clear();
  pendingSends_->copies.clear();
  if (rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Waitall");
  return absl::OkStatus();
}

void MpiCommunicator::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

} // namespace braid::comm
