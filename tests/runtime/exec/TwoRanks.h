//===- TwoRanks.h - Two ranks of a job on two threads -----------*- C++ -*-===//
//
// A fake communicator for the executor tests: two ranks of a mesh with one
// axis of size 2 run as two executors on two threads of one process. Their
// collectives meet in a shared exchange; their point-to-point messages go
// through its mailboxes, one per receiving rank, in the order they were
// sent. Like MPI's, a Send does not wait for its receiver, and its data is
// read later: when the sender next calls the communicator (a Recv, a
// collective or WaitSends), so that an executor that wrote a buffer before
// waiting for its send would send the new bytes.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TESTS_RUNTIME_EXEC_TWORANKS_H
#define BRAID_TESTS_RUNTIME_EXEC_TWORANKS_H

#include "runtime/exec/Communicator.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace braid::exec_test {

/// Where the collectives of two ranks running on two threads meet: each call
/// waits (at most 30 s) for the other rank's matching call, and both leave
/// with both ranks' values, from which each computes its result (the sum or
/// maximum of an all-reduce, the concatenation of an all-gather, its block
/// of the sum of a reduce-scatter). Values travel as doubles, so sums of two
/// floats are rounded once, as a sum of two floats is.
class PairExchange {
public:
  using Both = std::array<std::vector<double>, 2>;

  /// Both ranks' `mine`, rank 0's first; the two calls must describe
  /// themselves by the same `what`.
  absl::StatusOr<Both> meet(int rank, std::vector<double> mine,
                            const std::string &what) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    if (!cv_.wait_until(lock, deadline, [&] { return !distributing_; }))
      return absl::DeadlineExceededError("the previous collective never ended");
    values_[rank] = std::move(mine);
    what_[rank] = what;
    if (++arrived_ == 2) {
      distributing_ = true;
      cv_.notify_all();
    } else if (!cv_.wait_until(lock, deadline, [&] { return distributing_; })) {
      return absl::DeadlineExceededError("the other rank never joined");
    }
    std::string first = what_[0], second = what_[1];
    Both both = {values_[0], values_[1]};
    if (++left_ == 2) {
      arrived_ = left_ = 0;
      distributing_ = false;
      cv_.notify_all();
    }
    if (first != second)
      return absl::InvalidArgumentError(absl::StrCat(
          "the ranks' collectives differ: ", first, " and ", second));
    return both;
  }

  absl::Status reduce(int rank, void *data, int64_t count, plan::DType dtype,
                      exec::Reduction op) {
    bool max = op == exec::Reduction::kMax;
    absl::StatusOr<Both> both =
        meet(rank, load(data, count, dtype),
             absl::StrCat(max ? "max" : "sum", " of ", count));
    if (!both.ok())
      return both.status();
    std::vector<double> result(count);
    for (int64_t i = 0; i < count; ++i)
      result[i] = max ? std::max((*both)[0][i], (*both)[1][i])
                      : (*both)[0][i] + (*both)[1][i];
    return store(result, data, dtype);
  }
  absl::Status gather(int rank, const void *in, void *out, int64_t count,
                      plan::DType dtype) {
    absl::StatusOr<Both> both = meet(rank, load(in, count, dtype),
                                     absl::StrCat("all-gather of ", count));
    if (!both.ok())
      return both.status();
    std::vector<double> result = (*both)[0];
    result.insert(result.end(), (*both)[1].begin(), (*both)[1].end());
    return store(result, out, dtype);
  }
  absl::Status reduceScatter(int rank, const void *in, void *out,
                             int64_t countPerRank, plan::DType dtype) {
    absl::StatusOr<Both> both =
        meet(rank, load(in, 2 * countPerRank, dtype),
             absl::StrCat("reduce-scatter of ", countPerRank));
    if (!both.ok())
      return both.status();
    std::vector<double> result(countPerRank);
    for (int64_t i = 0; i < countPerRank; ++i)
      result[i] = (*both)[0][rank * countPerRank + i] +
                  (*both)[1][rank * countPerRank + i];
    return store(result, out, dtype);
  }

  /// A point-to-point message: its bytes, as the sender's buffer held them
  /// when the exchange took them.
  struct Message {
    std::string bytes;
    int64_t count;
    plan::DType dtype;
  };
  /// Puts `message` in rank `to`'s mailbox.
  void post(int to, Message message) {
    std::lock_guard<std::mutex> lock(mutex_);
    mailbox_[to].push_back(std::move(message));
    cv_.notify_all();
  }
  /// The oldest message in rank `rank`'s mailbox, waiting (at most 30 s) for
  /// one.
  absl::StatusOr<Message> take(int rank) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    if (!cv_.wait_until(lock, deadline, [&] { return !mailbox_[rank].empty(); }))
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", rank, " waited for a message that never came"));
    Message message = std::move(mailbox_[rank].front());
    mailbox_[rank].pop_front();
    return message;
  }

private:
  static std::vector<double> load(const void *data, int64_t count,
                                  plan::DType dtype) {
    std::vector<double> v(count);
    for (int64_t i = 0; i < count; ++i)
      v[i] = dtype == plan::F32 ? double(static_cast<const float *>(data)[i])
                                : static_cast<const double *>(data)[i];
    return v;
  }
  static absl::Status store(const std::vector<double> &v, void *data,
                            plan::DType dtype) {
    if (dtype != plan::F32 && dtype != plan::F64)
      return absl::UnimplementedError("the exchange takes F32 and F64");
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype == plan::F32)
        static_cast<float *>(data)[i] = float(v[i]);
      else
        static_cast<double *>(data)[i] = v[i];
    }
    return absl::OkStatus();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<double> values_[2];
  std::string what_[2];
  int arrived_ = 0, left_ = 0;
  bool distributing_ = false;
  std::deque<Message> mailbox_[2];
};

/// One rank of a mesh with a single axis of size 2 ("tp", "pp", ...; the
/// axis' name is not checked).
class PairCommunicator : public exec::Communicator {
public:
  struct Call {
    std::vector<std::string> axes;
    int64_t count;
    plan::DType dtype;
    exec::Reduction op;
    /// "all-reduce", "all-gather" or "reduce-scatter".
    std::string kind = "all-reduce";
  };
  PairCommunicator(PairExchange &exchange, int rank)
      : exchange(exchange), rank(rank), coords{rank} {}
  int64_t Rank() const override { return rank; }
  const std::vector<int64_t> &Coordinates() const override { return coords; }
  absl::Status AllReduce(absl::Span<const std::string> axes, void *data,
                         int64_t count, plan::DType dtype,
                         exec::Reduction op) override {
    calls.push_back({{axes.begin(), axes.end()}, count, dtype, op});
    return exchange.reduce(rank, data, count, dtype, op);
  }
  absl::Status AllGather(absl::Span<const std::string> axes, const void *in,
                         void *out, int64_t count, plan::DType dtype) override {
    calls.push_back({{axes.begin(), axes.end()},
                     count,
                     dtype,
                     exec::Reduction::kSum,
                     "all-gather"});
    return exchange.gather(rank, in, out, count, dtype);
  }
  absl::Status ReduceScatter(absl::Span<const std::string> axes, const void *in,
                             void *out, int64_t countPerRank,
                             plan::DType dtype) override {
    calls.push_back({{axes.begin(), axes.end()},
                     countPerRank,
                     dtype,
                     exec::Reduction::kSum,
                     "reduce-scatter"});
    return exchange.reduceScatter(rank, in, out, countPerRank, dtype);
  }

  /// Posts a copy of the message (the contract: the caller may write the
  /// bytes at once).
  absl::Status Send(absl::string_view axis, int64_t peerOffset,
                    const void *data, int64_t count,
                    plan::DType dtype) override {
    absl::StatusOr<int> to = peer(axis, peerOffset);
    if (!to.ok())
      return to.status();
    ++sends;
    const char *p = static_cast<const char *>(data);
    exchange.post(*to, {std::string(p, p + count * plan::DTypeBytes(dtype)),
                        count, dtype});
    return absl::OkStatus();
  }
  absl::Status Recv(absl::string_view axis, int64_t peerOffset, void *data,
                    int64_t count, plan::DType dtype) override {
    absl::StatusOr<int> from = peer(axis, peerOffset);
    if (!from.ok())
      return from.status();
    ++receives;
    absl::StatusOr<PairExchange::Message> message = exchange.take(rank);
    if (!message.ok())
      return message.status();
    if (message->count != count || message->dtype != dtype)
      return absl::InvalidArgumentError(absl::StrCat(
          "the message holds ", message->count, " elements of ",
          plan::DType_Name(message->dtype), ", expected ", count, " of ",
          plan::DType_Name(dtype)));
    std::memcpy(data, message->bytes.data(), message->bytes.size());
    return absl::OkStatus();
  }
  absl::Status WaitSends() override {
    ++waits;
    return absl::OkStatus();
  }

  PairExchange &exchange;
  int rank;
  std::vector<int64_t> coords;
  std::vector<Call> calls;
  int sends = 0, receives = 0, waits = 0;

private:
  absl::StatusOr<int> peer(absl::string_view axis, int64_t offset) const {
    if (rank + offset < 0 || rank + offset > 1)
      return absl::OutOfRangeError(absl::StrCat(
          "no rank at offset ", offset, " along '", axis, "' from rank ", rank,
          " of 2"));
    return int(rank + offset);
  }
};

/// Two executors of the same plan, ranks 0 and 1.
struct TwoRanks {
  PairExchange exchange;
  PairCommunicator comm0{exchange, 0}, comm1{exchange, 1};
  std::unique_ptr<exec::Executor> rank[2];

  /// Loads `plan` through the file format, as braid-run would.
  absl::Status create(const plan::Plan &plan) {
    absl::StatusOr<plan::Plan> loaded =
        plan::ParsePlanFile(plan::SerializePlanFile(plan), "tp.plan");
    if (!loaded.ok())
      return loaded.status();
    for (int r = 0; r < 2; ++r) {
      auto e = exec::Executor::Create(*loaded, r ? &comm1 : &comm0);
      if (!e.ok())
        return e.status();
      rank[r] = std::move(*e);
    }
    return absl::OkStatus();
  }
  /// Runs function `name` on both ranks at once (rank 1 on another thread).
  std::pair<absl::Status, absl::Status>
  run(const char *name, const exec::StepContext &context = {}) {
    absl::Status second;
    std::thread other([&] { second = rank[1]->Run(name, context); });
    absl::Status first = rank[0]->Run(name, context);
    other.join();
    return {first, second};
  }
};

} // namespace braid::exec_test

#endif // BRAID_TESTS_RUNTIME_EXEC_TWORANKS_H
