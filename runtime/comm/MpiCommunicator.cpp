//===- MpiCommunicator.cpp - Collectives on MPI ---------------------------===//

#include "runtime/comm/MpiCommunicator.h"

#include <cstring>
#include <map>
#include <memory>

#include "runtime/comm/Slurm.h"
#include "runtime/common/Float16.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <set>
#include <thread>
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

absl::StatusOr<Call> prepare(void *comm, plan::DType dtype) {
  absl::StatusOr<MPI_Datatype> type = mpiType(dtype);
  if (!type.ok())
    return type.status();
  return Call{static_cast<MPI_Comm>(comm), *type};
}

/// MPI_Test of `request`, for MpiCommunicator::await.
auto tested(MPI_Request &request) {
  return [&request](int *done) {
    return MPI_Test(&request, done, MPI_STATUS_IGNORE);
  };
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// A wait polls as MPI_Wait does (MPI_Test, which moves the nonblocking
/// collectives along, over and over) for kSpinSeconds, long enough for a
/// small collective on shared memory, then sleeps kSleepNs between polls.
/// Not sched_yield: a rank that yields is scheduled again at once where more
/// ranks than cores share a machine, and 8 ranks on 2 cores trained a
/// 20-step tiny-llama in 8.0 s with a second of yielding, 3.3 s without.
constexpr double kSpinSeconds = 2e-4;
constexpr int64_t kSleepNs = 50'000;
/// How often a rank in a wait with a deadline answers the others' questions,
/// and how late an answer from a rank that was in a wait all along may come
/// before that rank is taken not to have run (stopped).
constexpr double kAnswerSeconds = 0.02, kLateAnswerSeconds = 0.5;
/// The watchdog's messages on a group's duplicate communicator: a rank whose
/// wait timed out asks (its own report), the others answer (theirs).
constexpr int kAskTag = 1, kAnswerTag = 2;

/// What a rank waits in, as the watchdog sends it to another rank (a
/// fixed layout of bytes: the ranks of a job run one build).
struct Report {
  /// The collective's number on its group (1-based), 0 for messages.
  int64_t number = 0;
  int64_t step = 0;
  /// Seconds in the wait so far.
  double waited = 0;
  /// The longest time, in seconds, the answering rank did not run (between
  /// two of its polls) in that wait so far.
  double stalled = 0;
  /// The world rank of the peer of a message, or -1.
  int32_t peer = -1;
  char kind[28] = {};
  /// The group's axes (GroupKey).
  char group[64] = {};
  char what[96] = {};
};

void copyText(char *to, size_t size, absl::string_view text) {
  size_t n = std::min(size - 1, text.size());
  std::memcpy(to, text.data(), n);
  to[n] = '\0';
}

std::string axesText(absl::string_view key) {
  return absl::StrCat("'", key, "'");
}

/// "rank 2" or "ranks 0, 3".
std::string ranksText(const std::vector<int> &ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ", "));
}

/// "all-gather over 'tp' (collective 4 on its group) at step 3 (what)" for
/// the report of another rank.
std::string describe(const Report &r) {
  std::string where =
      r.number > 0
          ? absl::StrCat(r.kind, " over ", axesText(r.group), " (collective ",
                         r.number, " on its group)")
          : absl::StrCat(r.kind,
                         r.peer >= 0 ? absl::StrCat(" rank ", r.peer)
                                     : std::string(" several ranks"),
                         " along ", axesText(r.group));
  absl::StrAppend(&where, " at step ", r.step);
  if (r.what[0])
    absl::StrAppend(&where, " (", r.what, ")");
  absl::StrAppend(&where, absl::StrFormat(" for %.1f s", r.waited));
  return where;
}

} // namespace

struct MpiCommunicator::Waiting {
  /// What it is, for people: "all-reduce", "receive from", ...
  const char *kind;
  /// The MPI call polled, for its errors.
  const char *call;
  Group *group;
  /// The collective's number on the group (1-based), 0 for messages.
  int64_t number = 0;
  /// The places in the group waited for (a message's peer); empty: every
  /// other rank of the group.
  std::vector<int> peers;

  Report report(double waited, int64_t step, const std::string &what) const {
    Report r;
    r.number = number;
    r.step = step;
    r.waited = waited;
    r.peer = number == 0 && peers.size() == 1 ? group->worldRanks[peers[0]] : -1;
    copyText(r.kind, sizeof r.kind, kind);
    copyText(r.group, sizeof r.group, group->key);
    copyText(r.what, sizeof r.what, what);
    return r;
  }
};

struct MpiCommunicator::Requests {
  std::vector<MPI_Request> requests;
  /// Per request of a send: its group and the receiver's place in it.
  std::vector<std::pair<Group *, int>> receivers;
  /// The copies the sends read until WaitSends.
  std::vector<std::unique_ptr<char[]>> copies;
  /// Started collectives by handle.
  struct Started {
    MPI_Request request;
    Waiting waiting;
  };
  std::map<int64_t, Started> byHandle;
};

struct MpiCommunicator::Answers {
  /// Answers not yet known to have left, oldest first.
  std::deque<std::pair<std::unique_ptr<Report>, MPI_Request>> pending;
  /// The question of the wait that timed out (sent to its peers).
  std::unique_ptr<Report> ask;
};

MpiCommunicator::MpiCommunicator()
    : pendingSends_(new Requests), started_(new Requests),
      answers_(new Answers) {}

void MpiCommunicator::SetWaitContext(int64_t step, absl::string_view what) {
  step_ = step;
  what_ = std::string(what);
}

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
  // srun's own SLURM_PROCID does not count: without PMI (srun --mpi=none)
  // MPI_Init cannot join the tasks into one job. srun --mpi=pmix sets
  // PMIX_RANK, --mpi=pmi2 PMI_SIZE.
  return envOf({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) != nullptr;
}

int64_t LocalRanks() {
  const char *v = envOf({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  int64_t n = v ? std::atoll(v) : 1;
  // Under srun (PMIx sets neither variable): the step's tasks on this node.
  const char *perNode = std::getenv("SLURM_STEP_TASKS_PER_NODE");
  const char *node = std::getenv("SLURM_NODEID");
  if (!v && InSlurmStep() && perNode && node)
    if (absl::StatusOr<int64_t> tasks =
            SlurmTasksOnNode(perNode, std::atoll(node));
        tasks.ok())
      n = *tasks;
  return std::max<int64_t>(n, 1);
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>>
MpiCommunicator::Create(const plan::Plan &plan) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Every all-reduce here is nonblocking and in place, for which Open
    // MPI's libnbc picks a binomial tree: 2.4x the time of the blocking
    // MPI_Allreduce for 1 to 16 MB on 2 ranks. Rabenseifner's (a
    // reduce-scatter, then an all-gather) matches or beats the blocking one
    // at every size on 2 and 4 ranks: the default unless the environment
    // names another (other MPIs ignore the variable).
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*replace=*/0);
    MPI_Init(nullptr, nullptr);
  }
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
        ") but the job has ", size, ": start it with ",
        InSlurmStep() && !std::getenv("OMPI_COMM_WORLD_SIZE") ? "srun -n "
                                                              : "mpirun -np ",
        world));
  c->coords_ = plan::MeshCoordinates(plan.mesh(), rank);
  // Every group the plan uses, in one order on every rank (the plan is the
  // same everywhere), since creating a communicator is collective.
  for (const std::vector<std::string> &axes : plan::CommunicationGroups(plan))
    if (absl::Status s = c->addGroup(axes); !s.ok())
      return s;
  // And the group of every rank, whose barrier precedes the creation of a
  // group later (which has no deadline of its own).
  std::vector<std::string> all(plan.mesh().axes().begin(),
                               plan.mesh().axes().end());
  if (!c->groups_.count(plan::GroupKey(all)))
    if (absl::Status s = c->addGroup(all); !s.ok())
      return s;
  return c;
}

absl::Status MpiCommunicator::addGroup(const std::vector<std::string> &axes) {
  // The ranks of a group share a colour; their world rank orders them.
  int64_t color = plan::GroupColor(mesh_, coords_, axes);
  std::string key = plan::GroupKey(axes);
  MPI_Comm comm, watch;
  if (int rc = MPI_Comm_split(MPI_COMM_WORLD, int(color), int(rank_), &comm);
      rc != MPI_SUCCESS)
    return mpiError(rc, absl::StrCat("creating the group {", key, "}"));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  // The watchdog's side channel: its messages never meet the group's own.
  if (int rc = MPI_Comm_dup(comm, &watch); rc != MPI_SUCCESS)
    return mpiError(rc, absl::StrCat("duplicating the group {", key, "}"));
  MPI_Comm_set_errhandler(watch, MPI_ERRORS_RETURN);
  auto g = std::make_unique<Group>();
  g->key = key;
  g->comm = comm;
  g->watch = watch;
  int size = 0;
  MPI_Comm_size(comm, &size);
  MPI_Group local, world;
  MPI_Comm_group(comm, &local);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> places(size);
  for (int i = 0; i < size; ++i)
    places[i] = i;
  g->worldRanks.resize(size);
  MPI_Group_translate_ranks(local, size, places.data(), world,
                            g->worldRanks.data());
  MPI_Group_free(&local);
  MPI_Group_free(&world);
  groups_[key] = std::move(g);
  return absl::OkStatus();
}

MpiCommunicator::~MpiCommunicator() {
  // Sends and collectives still in flight read memory their owner is about
  // to free. (After a timeout they may never complete: left as they are.)
  if (failed_.ok()) {
    (void)WaitSends();
    for (auto &[handle, started] : started_->byHandle)
      MPI_Wait(&started.request, MPI_STATUS_IGNORE);
  }
  for (auto &[key, group] : groups_)
    for (void *comm : {group->comm, group->watch}) {
      MPI_Comm c = static_cast<MPI_Comm>(comm);
      MPI_Comm_free(&c);
    }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

absl::StatusOr<MpiCommunicator::Group *>
MpiCommunicator::group(absl::Span<const std::string> axes) {
  std::vector<std::string> list(axes.begin(), axes.end());
  auto it = groups_.find(plan::GroupKey(list));
  if (it == groups_.end()) {
    // A group the plan's instructions do not name (the trainer's own
    // gathers): created now, which every rank does at the same point. The
    // creation (MPI_Comm_split) blocks with no deadline: a barrier with one
    // over every rank comes first.
    std::vector<std::string> all(mesh_.axes().begin(), mesh_.axes().end());
    Group *world = groups_.at(plan::GroupKey(all)).get();
    if (!failed_.ok())
      return failed_;
    MPI_Request request;
    if (int rc = MPI_Ibarrier(static_cast<MPI_Comm>(world->comm), &request);
        rc != MPI_SUCCESS)
      return mpiError(rc, "MPI_Ibarrier");
    if (absl::Status s = await(Waiting{"barrier", "MPI_Ibarrier", world,
                                       ++world->collectives, {}},
                               tested(request));
        !s.ok())
      return s;
    if (absl::Status s = addGroup(list); !s.ok())
      return s;
    it = groups_.find(plan::GroupKey(list));
  }
  return it->second.get();
}

template <typename Poll>
absl::Status MpiCommunicator::await(const Waiting &w, Poll test) {
  if (!failed_.ok())
    return failed_;
  int done = 0;
  if (int rc = test(&done); rc != MPI_SUCCESS)
    return mpiError(rc, w.call);
  if (done)
    return absl::OkStatus();
  const double start = now();
  waiting_ = &w;
  waitingSince_ = start;
  waitingStalled_ = 0;
  double answered = start;
  // The longest time between two polls: a rank stopped (SIGSTOP, a
  // debugger) or starved of a core inside the wait did not run for it.
  double polled = start, stalled = 0;
  absl::Status result;
  for (;;) {
    if (int rc = test(&done); rc != MPI_SUCCESS) {
      result = mpiError(rc, w.call);
      break;
    }
    if (done)
      break;
    double t = now(), waited = t - start;
    stalled = std::max(stalled, t - polled);
    waitingStalled_ = stalled;
    polled = t;
    if (waited < kSpinSeconds)
      continue;
    if (timeout_ > 0) {
      if (t - answered >= kAnswerSeconds) {
        answerPeers();
        answered = t;
      }
      if (waited >= timeout_) {
        result = failed_ = timedOut(w, waited, stalled);
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(kSleepNs));
  }
  waiting_ = nullptr;
  return result;
}

void MpiCommunicator::answerPeers() {
  auto &pending = answers_->pending;
  while (!pending.empty()) {
    int done = 0;
    MPI_Test(&pending.front().second, &done, MPI_STATUS_IGNORE);
    if (!done)
      break;
    pending.pop_front();
  }
  if (!waiting_)
    return;
  for (auto &[key, g] : groups_) {
    MPI_Comm watch = static_cast<MPI_Comm>(g->watch);
    for (;;) {
      int asked = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, watch, &asked, &status) !=
              MPI_SUCCESS ||
          !asked)
        break;
      Report question;
      if (MPI_Recv(&question, sizeof question, MPI_BYTE, status.MPI_SOURCE,
                   kAskTag, watch, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        break;
      auto answer = std::make_unique<Report>(
          waiting_->report(now() - waitingSince_, step_, what_));
      answer->stalled = waitingStalled_;
      MPI_Request request;
      if (MPI_Isend(answer.get(), sizeof(Report), MPI_BYTE, status.MPI_SOURCE,
                    kAnswerTag, watch, &request) == MPI_SUCCESS)
        pending.emplace_back(std::move(answer), request);
    }
  }
}

absl::Status MpiCommunicator::timedOut(const Waiting &w, double waited,
                                       double stalled) {
  Group &g = *w.group;
  MPI_Comm watch = static_cast<MPI_Comm>(g.watch);
  int place = 0;
  MPI_Comm_rank(static_cast<MPI_Comm>(g.comm), &place);
  std::vector<int> peers = w.peers;
  if (peers.empty())
    for (int p = 0; p < int(g.worldRanks.size()); ++p)
      if (p != place)
        peers.push_back(p);
  // Ask every peer waited for, and wait a while for their answers (or their
  // own questions, from those whose waits time out too): a peer that is in
  // any wait answers within kAnswerSeconds.
  answers_->ask = std::make_unique<Report>(w.report(waited, step_, what_));
  size_t n = peers.size();
  std::vector<MPI_Request> asks(n, MPI_REQUEST_NULL),
      replies(n, MPI_REQUEST_NULL);
  std::vector<Report> theirs(n);
  std::vector<bool> heard(n, false);
  // Seconds from the question to each answer.
  std::vector<double> after(n, 0);
  const double asked = now();
  for (size_t i = 0; i < n; ++i) {
    MPI_Isend(answers_->ask.get(), sizeof(Report), MPI_BYTE, peers[i], kAskTag,
              watch, &asks[i]);
    MPI_Irecv(&theirs[i], sizeof(Report), MPI_BYTE, peers[i], MPI_ANY_TAG,
              watch, &replies[i]);
  }
  const double window = std::clamp(timeout_ / 2, 1.0, 5.0);
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < n; ++i)
      if (!heard[i]) {
        int done = 0;
        MPI_Test(&replies[i], &done, MPI_STATUS_IGNORE);
        heard[i] = done != 0;
        after[i] = now() - asked;
        all = all && heard[i];
      }
    if (all || now() - asked >= window)
      break;
    answerPeers();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!heard[i]) {
      MPI_Cancel(&replies[i]);
      MPI_Status status;
      MPI_Wait(&replies[i], &status);
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      heard[i] = !cancelled;
      after[i] = now() - asked;
    }
    // The question stays in answers_ while it may still be on its way.
    MPI_Request_free(&asks[i]);
  }

  std::string message = absl::StrFormat("collective timeout: waited %.1f s in ",
                                        waited);
  if (w.number > 0)
    absl::StrAppend(&message, w.kind, " over ", axesText(g.key),
                    " (collective ", w.number, " on the group of ranks ",
                    absl::StrJoin(g.worldRanks, ","), ")");
  else {
    std::vector<int> to;
    for (int p : peers)
      to.push_back(g.worldRanks[p]);
    absl::StrAppend(&message, w.kind, " ", ranksText(to), " along ",
                    axesText(g.key));
  }
  absl::StrAppend(&message, " at step ", step_);
  if (!what_.empty())
    absl::StrAppend(&message, " (", what_, ")");
  // This rank itself did not run for most of the wait (resumed after a stop,
  // as the launcher does to end a job): the others' states say who was
  // where, yet this rank's own late arrival is the likelier cause.
  if (stalled > kLateAnswerSeconds)
    absl::StrAppend(
        &message,
        absl::StrFormat("; this rank did not run for %.1f s of the wait "
                        "(stopped or starved of a core)",
                        stalled));
  std::vector<int> absent, same;
  std::vector<std::string> late, elsewhere;
  for (size_t i = 0; i < n; ++i) {
    int rank = g.worldRanks[peers[i]];
    const Report &r = theirs[i];
    if (!heard[i])
      absent.push_back(rank);
    else if (after[i] > kLateAnswerSeconds && r.waited > after[i])
      // In a wait since before the question, yet silent for longer than a
      // polling rank is: it did not run (stopped, then resumed, as the
      // launcher does to end a job; or starved of a core).
      late.push_back(absl::StrFormat(
          "rank %d had not arrived (it answered %.1f s late, from %s: "
          "stopped or starved there)",
          rank, after[i], describe(r)));
    else if (r.stalled > kLateAnswerSeconds)
      // Answered at once, from a wait it had not run in for a while: stopped
      // inside it and resumed since (as the launcher does to end a job).
      late.push_back(absl::StrFormat(
          "rank %d had arrived, in %s, but did not run for %.1f s of that wait "
          "(stopped or starved of a core)",
          rank, describe(r), r.stalled));
    else if (w.number > 0 && r.number == w.number &&
             absl::string_view(r.group) == g.key &&
             absl::string_view(r.kind) == w.kind)
      same.push_back(rank);
    else
      elsewhere.push_back(
          absl::StrCat("rank ", rank, " was waiting in ", describe(r)));
  }
  if (!absent.empty())
    absl::StrAppend(
        &message, "; ", ranksText(absent), " had not arrived (no answer in ",
        absl::StrFormat("%.1f", window),
        " s: stopped, or busy outside communication)");
  for (const std::string &l : late)
    absl::StrAppend(&message, "; ", l);
  if (!same.empty())
    absl::StrAppend(&message, "; ", ranksText(same),
                    same.size() == 1 ? " was" : " were",
                    " waiting in the same collective");
  for (const std::string &e : elsewhere)
    absl::StrAppend(&message, "; ", e);
  return absl::DeadlineExceededError(message);
}

/// An all-gather's type, which any dtype of the plan may be (it moves
/// elements and sums none: the draw's I32 ids too); `in` becomes
/// MPI_IN_PLACE when it is this rank's block of `out` (in place).
static absl::StatusOr<Call> prepareGather(void *comm, const void *&in,
                                          void *out, int64_t count,
                                          plan::DType dtype) {
  absl::StatusOr<MPI_Datatype> type = messageType(dtype);
  if (!type.ok())
    return type.status();
  absl::StatusOr<Call> call = Call{static_cast<MPI_Comm>(comm), *type};
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
  // Started and waited for: the wait is the watchdog's (Wait).
  absl::StatusOr<int64_t> handle = StartAllGather(axes, in, out, count, dtype);
  if (!handle.ok())
    return handle.status();
  return Wait(*handle);
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
  absl::StatusOr<Group *> g = group(axes);
  if (!g.ok())
    return g.status();
  absl::StatusOr<Call> call = prepare((*g)->comm, dtype);
  if (!call.ok())
    return call.status();
  if (absl::Status s = checkScatterCount(countPerRank); !s.ok())
    return s;
  if (!failed_.ok())
    return failed_;
  MPI_Request request;
  if (int rc = MPI_Ireduce_scatter_block(
          in, out, int(countPerRank), call->type,
          mpiOp(call->type, exec::Reduction::kSum), call->comm, &request);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Ireduce_scatter_block");
  int64_t handle = nextHandle_++;
  started_->byHandle.emplace(
      handle, Requests::Started{request,
                                Waiting{"reduce-scatter", "MPI_Wait", *g,
                                        ++(*g)->collectives, {}}});
  return handle;
}

absl::StatusOr<int64_t>
MpiCommunicator::StartAllGather(absl::Span<const std::string> axes,
                                const void *in, void *out, int64_t count,
                                plan::DType dtype) {
  absl::StatusOr<Group *> g = group(axes);
  if (!g.ok())
    return g.status();
  absl::StatusOr<Call> call = prepareGather((*g)->comm, in, out, count, dtype);
  if (!call.ok())
    return call.status();
  if (!failed_.ok())
    return failed_;
  MPI_Request request;
  if (int rc = MPI_Iallgather(in, int(count), call->type, out, int(count),
                              call->type, call->comm, &request);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Iallgather");
  int64_t handle = nextHandle_++;
  started_->byHandle.emplace(
      handle, Requests::Started{request,
                                Waiting{"all-gather", "MPI_Wait", *g,
                                        ++(*g)->collectives, {}}});
  return handle;
}

absl::StatusOr<int64_t>
MpiCommunicator::StartAllReduce(absl::Span<const std::string> axes, void *data,
                                int64_t count, plan::DType dtype) {
  absl::StatusOr<Group *> g = group(axes);
  if (!g.ok())
    return g.status();
  absl::StatusOr<Call> call = prepare((*g)->comm, dtype);
  if (!call.ok())
    return call.status();
  // One request per call: a larger buffer is refused, not cut in pieces.
  if (count > (int64_t(1) << 30))
    return absl::UnimplementedError(
        absl::StrCat("an all-reduce in flight of ", count,
                     " elements (MPI takes at most 2^30 in one request)"));
  if (!failed_.ok())
    return failed_;
  MPI_Request request;
  if (int rc = MPI_Iallreduce(MPI_IN_PLACE, data, int(count), call->type,
                              mpiOp(call->type, exec::Reduction::kSum),
                              call->comm, &request);
      rc != MPI_SUCCESS)
    return mpiError(rc, "MPI_Iallreduce");
  int64_t handle = nextHandle_++;
  started_->byHandle.emplace(
      handle, Requests::Started{request,
                                Waiting{"all-reduce", "MPI_Wait", *g,
                                        ++(*g)->collectives, {}}});
  return handle;
}

absl::StatusOr<bool> MpiCommunicator::Test(int64_t handle) {
  auto it = started_->byHandle.find(handle);
  if (it == started_->byHandle.end())
    return true;
  if (!failed_.ok())
    return failed_;
  int done = 0;
  if (int rc = MPI_Test(&it->second.request, &done, MPI_STATUS_IGNORE);
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
  absl::Status s = await(it->second.waiting, tested(it->second.request));
  // A request that timed out stays (it may never complete); the error ends
  // the job.
  if (s.ok() || !absl::IsDeadlineExceeded(s))
    started_->byHandle.erase(it);
  return s;
}

absl::Status MpiCommunicator::ReduceScatter(absl::Span<const std::string> axes,
                                            const void *in, void *out,
                                            int64_t countPerRank,
                                            plan::DType dtype) {
  absl::StatusOr<int64_t> handle =
      StartReduceScatter(axes, in, out, countPerRank, dtype);
  if (!handle.ok())
    return handle.status();
  return Wait(*handle);
}

absl::Status MpiCommunicator::AllReduce(absl::Span<const std::string> axes,
                                        void *data, int64_t count,
                                        plan::DType dtype, exec::Reduction op) {
  absl::StatusOr<Group *> g = group(axes);
  if (!g.ok())
    return g.status();
  absl::StatusOr<Call> call = prepare((*g)->comm, dtype);
  if (!call.ok())
    return call.status();
  // MPI counts are int: large buffers go in pieces.
  const int64_t kMaxCount = int64_t(1) << 30;
  char *p = static_cast<char *>(data);
  int64_t bytes = plan::DTypeBytes(dtype);
  for (int64_t done = 0; done < count; done += kMaxCount) {
    if (!failed_.ok())
      return failed_;
    int n = int(std::min(kMaxCount, count - done));
    MPI_Request request;
    if (int rc = MPI_Iallreduce(MPI_IN_PLACE, p + done * bytes, n, call->type,
                                mpiOp(call->type, op), call->comm, &request);
        rc != MPI_SUCCESS)
      return mpiError(rc, "MPI_Iallreduce");
    if (absl::Status s = await(Waiting{"all-reduce", "MPI_Iallreduce", *g,
                                       ++(*g)->collectives, {}},
                               tested(request));
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<MpiCommunicator::Group *, int>>
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
  absl::StatusOr<Group *> g = group({std::string(axis)});
  if (!g.ok())
    return g.status();
  // The axis' communicator orders its ranks by world rank, that is by their
  // coordinate along the axis.
  return std::make_pair(*g, int(mine + peerOffset));
}

absl::Status MpiCommunicator::Send(absl::string_view axis, int64_t peerOffset,
                                   const void *data, int64_t count,
                                   plan::DType dtype) {
  absl::StatusOr<std::pair<Group *, int>> to = peer(axis, peerOffset, "a send");
  if (!to.ok())
    return to.status();
  absl::StatusOr<MPI_Datatype> type = messageType(dtype);
  if (!type.ok())
    return type.status();
  if (!failed_.ok())
    return failed_;
  MPI_Comm comm = static_cast<MPI_Comm>(to->first->comm);
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
    pendingSends_->receivers.push_back(*to);
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Recv(absl::string_view axis, int64_t peerOffset,
                                   void *data, int64_t count,
                                   plan::DType dtype) {
  absl::StatusOr<std::pair<Group *, int>> from =
      peer(axis, peerOffset, "a receive");
  if (!from.ok())
    return from.status();
  absl::StatusOr<MPI_Datatype> type = messageType(dtype);
  if (!type.ok())
    return type.status();
  MPI_Comm comm = static_cast<MPI_Comm>(from->first->comm);
  char *p = static_cast<char *>(data);
  int64_t bytes = plan::DTypeBytes(dtype);
  Waiting w{"receive from", "MPI_Iprobe", from->first, 0, {from->second}};
  for (int64_t done = 0; done == 0 || done < count; done += kMaxMessageCount) {
    int n = int(std::min(kMaxMessageCount, count - done));
    // The message's size first, so that one of another size is reported as
    // such (and left where it is) rather than as MPI's truncation error or a
    // short read. The receive then takes that message: the first from the
    // peer.
    MPI_Status status;
    w.call = "MPI_Iprobe";
    if (absl::Status s = await(w,
                               [&](int *arrived) {
                                 return MPI_Iprobe(from->second, 0, comm,
                                                   arrived, &status);
                               });
        !s.ok())
      return s;
    int got = 0;
    MPI_Get_count(&status, *type, &got);
    if (got != n)
      return absl::InvalidArgumentError(absl::StrCat(
          "the message from offset ", peerOffset, " along '", axis, "' holds ",
          got == MPI_UNDEFINED ? std::string("a partial element count")
                               : absl::StrCat(got, " elements"),
          " of ", plan::DType_Name(dtype), ", expected ", n,
          " (the ranks' plans disagree)"));
    MPI_Request request;
    if (int rc = MPI_Irecv(p + done * bytes, n, *type, from->second, 0, comm,
                           &request);
        rc != MPI_SUCCESS)
      return mpiError(rc, "MPI_Irecv");
    w.call = "MPI_Irecv";
    if (absl::Status s = await(w, tested(request)); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::WaitSends() {
  std::vector<MPI_Request> &requests = pendingSends_->requests;
  if (requests.empty())
    return absl::OkStatus();
  // The peers of the sends not yet complete, when the wait times out: those
  // of the first one's group (a stage sends along one axis).
  Waiting w{"sends to", "MPI_Test", pendingSends_->receivers[0].first, 0, {}};
  absl::Status s = await(w, [&](int *done) {
    // Each request by itself: a complete one becomes MPI_REQUEST_NULL, so
    // that the others name the peers still waited for.
    *done = 1;
    w.peers.clear();
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL)
        continue;
      int sent = 0;
      if (int rc = MPI_Test(&requests[i], &sent, MPI_STATUS_IGNORE);
          rc != MPI_SUCCESS)
        return rc;
      if (sent)
        continue;
      *done = 0;
      auto [g, place] = pendingSends_->receivers[i];
      if (g == w.group &&
          std::find(w.peers.begin(), w.peers.end(), place) == w.peers.end())
        w.peers.push_back(place);
    }
    return MPI_SUCCESS;
  });
  if (!s.ok() && absl::IsDeadlineExceeded(s))
    return s; // the copies stay: the sends may still read them
  requests.clear();
  pendingSends_->receivers.clear();
  pendingSends_->copies.clear();
  return s;
}

void MpiCommunicator::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

} // namespace braid::comm
