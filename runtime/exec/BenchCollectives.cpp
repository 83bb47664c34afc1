//===- BenchCollectives.cpp - Times the collectives of a mesh axis --------===//

#include "runtime/exec/BenchCollectives.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace braid::exec {
namespace {

using Clock = std::chrono::steady_clock;

enum class Kind { kAllReduce, kAllGather, kReduceScatter };

const char *kindName(Kind kind) {
  switch (kind) {
  case Kind::kAllReduce:
    return "ALL_REDUCE";
  case Kind::kAllGather:
    return "ALL_GATHER";
  case Kind::kReduceScatter:
    return "REDUCE_SCATTER";
  }
  return "?";
}

/// Times one collective of one size over the group along `axis`.
class Timer {
public:
  Timer(Communicator &comm, const CollectiveBenchOptions &options,
        int64_t ranks)
      : comm(comm), options(options), ranks(ranks), axes({options.axis}) {}

  /// Seconds per call of `kind` on a tensor of `bytes` (rounded down to a
  /// multiple of 4 x ranks, at least that); `*used` is the bytes timed.
  absl::StatusOr<double> time(Kind kind, int64_t bytes, int64_t *used) {
    // The per-rank block of the gather and scatter; the all-reduce's buffer
    // is the whole tensor. Zeros: sums of them stay zeros (never infinities
    // or denormals, which could be slower than the data of a real run).
    int64_t block = std::max<int64_t>(bytes / 4 / ranks, 1);
    int64_t whole = block * ranks;
    *used = whole * 4;
    in.assign(size_t(whole), 0.0f);
    out.assign(size_t(whole), 0.0f);
    auto call = [&]() -> absl::Status {
      switch (kind) {
      case Kind::kAllReduce:
        return comm.AllReduce(axes, in.data(), whole, plan::F32);
      case Kind::kAllGather:
        return comm.AllGather(axes, in.data(), out.data(), block, plan::F32);
      case Kind::kReduceScatter:
        return comm.ReduceScatter(axes, in.data(), out.data(), block,
                                  plan::F32);
      }
      return absl::InternalError("unknown collective");
    };
    // A batch runs calls in chunks of 1, 2, 4, ... until the slowest rank
    // has spent its share of the time: every rank learns the slowest time
    // after each chunk (an all-reduce of one double, negligible beside the
    // chunk), so all stop after the same call. A count fixed in advance from
    // a few timed calls could instead run for minutes when the machine is
    // shared (ranks that busy-poll are descheduled for whole time slices).
    auto batch = [&](double seconds, int64_t *calls) -> absl::StatusOr<double> {
      if (absl::Status s = barrier(); !s.ok())
        return s;
      Clock::time_point start = Clock::now();
      *calls = 0;
      for (int64_t chunk = 1;; chunk = std::min<int64_t>(2 * chunk, 1 << 16)) {
        for (int64_t i = 0; i < chunk; ++i)
          if (absl::Status s = call(); !s.ok())
            return s;
        *calls += chunk;
        absl::StatusOr<double> elapsed = slowest(
            std::chrono::duration<double>(Clock::now() - start).count());
        if (!elapsed.ok() || *elapsed >= seconds)
          return elapsed;
      }
    };
    int64_t calls = 0;
    for (int64_t i = 0; i < options.warmupCalls; ++i)
      if (absl::Status s = call(); !s.ok())
        return s;
    // The time is split into batches and the fastest kept: on a machine
    // that other work shares, a batch that it interrupts is only slower.
    double fastest = 0;
    for (int b = 0; b < kBatches; ++b) {
      absl::StatusOr<double> timed =
          batch(options.secondsPerSize / kBatches, &calls);
      if (!timed.ok())
        return timed.status();
      double perCall = *timed / double(calls);
      fastest = b == 0 ? perCall : std::min(fastest, perCall);
    }
    return fastest;
  }

private:
  static constexpr int kBatches = 3;

  absl::Status barrier() {
    double one = 1;
    return comm.AllReduce(axes, &one, 1, plan::F64);
  }
  absl::StatusOr<double> slowest(double seconds) {
    if (absl::Status s =
            comm.AllReduce(axes, &seconds, 1, plan::F64, Reduction::kMax);
        !s.ok())
      return s;
    return seconds;
  }

  Communicator &comm;
  const CollectiveBenchOptions &options;
  int64_t ranks;
  std::vector<std::string> axes;
  std::vector<float> in, out;
};

} // namespace

absl::StatusOr<CollectiveBench>
BenchCollectives(Communicator &comm, int64_t ranks,
                 const CollectiveBenchOptions &options) {
  if (ranks < 2)
    return absl::InvalidArgumentError(absl::StrCat(
        "the mesh axis '", options.axis, "' has ", ranks,
        " rank(s): timing collectives needs a group of at least 2 (compile "
        "the plan with ",
        options.axis, " >= 2)"));
  if (options.smallestBytes < 1 || options.largestBytes < options.smallestBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "collective sizes from ", options.smallestBytes, " to ",
        options.largestBytes, " bytes are not positive and increasing"));
  if (!(options.secondsPerSize > 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "the time per size, ", options.secondsPerSize, " s, is not positive"));
  CollectiveBench bench;
  bench.ranks = ranks;
  Timer timer(comm, options, ranks);
  for (Kind kind : {Kind::kAllReduce, Kind::kAllGather, Kind::kReduceScatter}) {
    auto &series = kind == Kind::kAllReduce   ? bench.allReduce
                   : kind == Kind::kAllGather ? bench.allGather
                                              : bench.reduceScatter;
    for (int64_t bytes = options.smallestBytes; bytes <= options.largestBytes;
         bytes *= 4) {
      int64_t used = 0;
      absl::StatusOr<double> seconds = timer.time(kind, bytes, &used);
      if (!seconds.ok())
        return absl::Status(seconds.status().code(),
                            absl::StrCat(kindName(kind), " of ", bytes,
                                         " bytes over '", options.axis,
                                         "': ", seconds.status().message()));
      series.push_back({used, *seconds});
    }
  }
  return bench;
}

void WriteCollectiveBench(const CollectiveBench &bench, std::ostream &out) {
  auto series = [](const std::vector<std::pair<int64_t, double>> &points) {
    std::string s = "[";
    for (size_t i = 0; i < points.size(); ++i)
      absl::StrAppend(&s, i ? ", " : "",
                      absl::StrFormat("[%d, %.9g]", points[i].first,
                                      points[i].second));
    return s + "]";
  };
  out << absl::StrFormat("{\"ranks\": %d, \"dtype\": \"F32\",\n"
                         " \"all_reduce\": %s,\n"
                         " \"all_gather\": %s,\n"
                         " \"reduce_scatter\": %s}\n",
                         bench.ranks, series(bench.allReduce),
                         series(bench.allGather), series(bench.reduceScatter));
}

} // namespace braid::exec
