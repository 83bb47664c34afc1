//===- CalibrationFit.cpp - Kernel and link rates from measurements -------===//

#include "compiler/CalibrationFit.h"

#include "runtime/plan/KernelRegistry.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace braid;
using namespace braid::calibration;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// `v` as printf's %g writes it (Twine has no doubles).
std::string num(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

/// The work a kernel's rate divides: FLOPs for a matrix product, bytes for
/// the others.
double workOf(llvm::StringRef kernel, const KernelSample &s) {
  return isMatrixKernel(kernel) ? s.flops : s.bytes;
}

void add(KernelSample &into, const KernelSample &s) {
  into.seconds += s.seconds;
  into.calls += s.calls;
  into.flops += s.flops;
  into.bytes += s.bytes;
}

llvm::Expected<llvm::json::Value> parseJson(llvm::StringRef text,
                                            llvm::StringRef what) {
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(text);
  if (!value)
    return error(what + " is not JSON: " + llvm::toString(value.takeError()));
  if (!value->getAsObject())
    return error(what + " is not a JSON object");
  return value;
}

} // namespace

bool calibration::isMatrixKernel(llvm::StringRef kernel) {
  const plan::KernelInfo *info = plan::FindKernel(kernel.str());
  return info && info->has(plan::kMatrixProducts);
}

bool calibration::isCommunicationKernel(llvm::StringRef kernel) {
  const plan::KernelInfo *info = plan::FindKernel(kernel.str());
  return info && (info->has(plan::kCommunication) || info->has(plan::kFinishes));
}

bool calibration::isDefaultRate(const spec::KernelRate &rate) {
  return kDefaultRate == rate.kernel();
}

const spec::KernelRate *calibration::findRate(const spec::Calibration &c,
                                              llvm::StringRef kernel) {
  for (const spec::KernelRate &rate : c.kernels())
    if (kernel == rate.kernel())
      return &rate;
  return nullptr;
}

RateFit calibration::fitRate(double smallCalls, double smallWork,
                             double smallSeconds, double midCalls,
                             double midWork, double midSeconds) {
  for (double v :
       {smallCalls, smallWork, smallSeconds, midCalls, midWork, midSeconds})
    if (!(v > 0) || !std::isfinite(v))
      return {};
  // The mid run's mean speed: its larger calls weigh the overhead least.
  RateFit fallback{midWork / midSeconds, 0, false};
  // smallCalls o + smallWork x = smallSeconds
  // midCalls   o + midWork   x = midSeconds,   x = 1 / rate.
  double det = smallCalls * midWork - midCalls * smallWork;
  double scale = smallCalls * midWork + midCalls * smallWork;
  // Calls that do the same work in both runs say nothing about the split
  // between overhead and rate.
  if (std::abs(det) <= 1e-9 * scale)
    return fallback;
  double overhead = (smallSeconds * midWork - midSeconds * smallWork) / det;
  double inverseRate = (smallCalls * midSeconds - midCalls * smallSeconds) / det;
  // Noise can make either negative (a kernel whose time hardly grows with
  // its work, or grows faster than in proportion): no physical solution.
  if (!(inverseRate > 0) || !(overhead >= 0) || !std::isfinite(overhead) ||
      !std::isfinite(inverseRate))
    return fallback;
  // A rank that shares cores is descheduled now and then inside a kernel:
  // such noise shows up as a per-call overhead that explains most of a
  // small call. An overhead is at most half the small run's mean call; the
  // mid run's calls then give the rate.
  double most = 0.5 * smallSeconds / smallCalls;
  if (overhead > most) {
    overhead = most;
    double left = midSeconds - midCalls * overhead;
    if (!(left > 0))
      return fallback;
    return {midWork / left, overhead, true};
  }
  return {1 / inverseRate, overhead, true};
}

void calibration::addCallTimes(std::vector<spec::KernelRate> &rates,
                               llvm::ArrayRef<const KernelSamples *> runs,
                               double minCalls) {
  for (spec::KernelRate &rate : rates) {
    if (isDefaultRate(rate))
      continue;
    // Work per call -> (seconds per call summed, runs).
    std::map<double, std::pair<double, int>> byWork;
    for (const KernelSamples *run : runs) {
      auto it = run->find(rate.kernel());
      if (it == run->end() || it->second.calls < minCalls)
        continue;
      const KernelSample &s = it->second;
      double work = workOf(rate.kernel(), s) / s.calls;
      if (!(work > 0) || !(s.seconds > 0))
        continue;
      auto &[seconds, count] = byWork[work];
      seconds += s.seconds / s.calls;
      ++count;
    }
    rate.clear_calls();
    for (const auto &[work, sum] : byWork) {
      spec::KernelRate::CallTime *call = rate.add_calls();
      call->set_work(work);
      call->set_seconds(sum.first / sum.second);
    }
  }
}

double calibration::interpolateCall(const spec::KernelRate &rate,
                                    double work) {
  int n = rate.calls_size();
  if (n < 2)
    return -1;
  // The segment around `work`, or the nearest one beyond the calls.
  int hi = 1;
  while (hi < n - 1 && rate.calls(hi).work() < work)
    ++hi;
  const spec::KernelRate::CallTime &a = rate.calls(hi - 1), &b = rate.calls(hi);
  double t = a.seconds() + (work - a.work()) * (b.seconds() - a.seconds()) /
                               (b.work() - a.work());
  // Beyond the calls, a segment that falls with the work (noise) would
  // price less work ever slower and more work ever faster: less work takes
  // at most the smallest call's time, more at least the largest's.
  if (work < rate.calls(0).work())
    t = std::min(t, rate.calls(0).seconds());
  if (work > rate.calls(n - 1).work())
    t = std::max(t, rate.calls(n - 1).seconds());
  if (t > 0 && std::isfinite(t))
    return t;
  // The line gives no time (far below the calls, or a segment that falls
  // with the work, from noise): in proportion to the nearest call.
  const spec::KernelRate::CallTime &near = work >= b.work() ? b : a;
  return near.seconds() * work / near.work();
}

std::vector<spec::KernelRate>
calibration::fitKernelRates(const KernelSamples &small,
                            const KernelSamples &mid, double minCalls) {
  std::vector<spec::KernelRate> rates;
  // The kernels of both runs pooled, matrix products and the others apart,
  // for "default".
  KernelSample matrixSmall, matrixMid, otherSmall, otherMid;
  for (const auto &[name, m] : mid) {
    auto it = small.find(name);
    // Only kernels of both runs: one that ran in one of them would add to
    // one side of the pooled equations only.
    if (isCommunicationKernel(name) || it == small.end())
      continue;
    const KernelSample &s = it->second;
    bool matrix = isMatrixKernel(name);
    add(matrix ? matrixSmall : otherSmall, s);
    add(matrix ? matrixMid : otherMid, m);
    if (s.calls < minCalls || m.calls < minCalls)
      continue;
    RateFit fit = fitRate(s.calls, workOf(name, s), s.seconds, m.calls,
                          workOf(name, m), m.seconds);
    if (!(fit.rate > 0))
      continue;
    spec::KernelRate &rate = rates.emplace_back();
    rate.set_kernel(name);
    if (matrix)
      rate.set_flops_per_s(fit.rate);
    else
      rate.set_bytes_per_s(fit.rate);
    rate.set_overhead_s(fit.overhead);
  }
  RateFit matrix = fitRate(matrixSmall.calls, matrixSmall.flops,
                           matrixSmall.seconds, matrixMid.calls,
                           matrixMid.flops, matrixMid.seconds);
  RateFit other =
      fitRate(otherSmall.calls, otherSmall.bytes, otherSmall.seconds,
              otherMid.calls, otherMid.bytes, otherMid.seconds);
  if (matrix.rate > 0 || other.rate > 0) {
    // Both rates: the cost model takes the larger of the two times, so an
    // unknown kernel is priced by whichever bound it hits.
    spec::KernelRate &rate = rates.emplace_back();
    rate.set_kernel("default");
    rate.set_flops_per_s(matrix.rate);
    rate.set_bytes_per_s(other.rate);
    rate.set_overhead_s(other.rate > 0 ? other.overhead : matrix.overhead);
  }
  return rates;
}

double calibration::fitStepOverhead(const KernelSamples &samples,
                                    const std::vector<double> &stepTimes,
                                    double sampledSteps) {
  if (stepTimes.empty())
    return 0;
  if (!(sampledSteps > 0))
    sampledSteps = double(stepTimes.size());
  std::vector<double> sorted(stepTimes);
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  double kernels = 0;
  for (const auto &[name, s] : samples)
    kernels += s.seconds;
  return std::max(0.0, median - kernels / sampledSteps);
}

llvm::Expected<double> calibration::fitWaitingShare(
    llvm::function_ref<llvm::Expected<double>(double)> stepAt,
    double measuredStep) {
  double low = 0, high = 1;
  llvm::Expected<double> atLow = stepAt(low);
  if (!atLow)
    return atLow.takeError();
  if (!(measuredStep > *atLow))
    return low;
  llvm::Expected<double> atHigh = stepAt(high);
  if (!atHigh)
    return atHigh.takeError();
  // A step the share does not move (ranks with cores to themselves) tells
  // nothing about it.
  if (!(*atHigh > *atLow * (1 + 1e-9)))
    return low;
  if (!(measuredStep < *atHigh))
    return high;
  // 30 halvings: the share to 1e-9, far below what a step's noise tells.
  for (int i = 0; i < 30; ++i) {
    double mid = 0.5 * (low + high);
    llvm::Expected<double> at = stepAt(mid);
    if (!at)
      return at.takeError();
    (*at < measuredStep ? low : high) = mid;
  }
  return 0.5 * (low + high);
}

KernelSamples calibration::medianRun(llvm::ArrayRef<KernelSamples> runs) {
  std::map<std::string, std::vector<KernelSample>> byKernel;
  for (const KernelSamples &run : runs)
    for (const auto &[name, sample] : run)
      byKernel[name].push_back(sample);
  KernelSamples out;
  for (auto &[name, samples] : byKernel) {
    std::sort(samples.begin(), samples.end(),
              [](const KernelSample &a, const KernelSample &b) {
                return a.seconds < b.seconds;
              });
    out[name] = samples[(samples.size() - 1) / 2];
  }
  return out;
}

llvm::Expected<std::vector<std::pair<double, double>>> calibration::medianBench(
    llvm::ArrayRef<std::vector<std::pair<double, double>>> runs) {
  if (runs.empty())
    return error("no all-reduce benchmark to take the median of");
  std::vector<std::pair<double, double>> out = runs.front();
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> seconds;
    for (const auto &run : runs) {
      if (run.size() != out.size() || run[i].first != out[i].first)
        return error("the repeated all-reduce benchmarks measured different "
                     "sizes (" +
                     llvm::Twine(out.size()) + " and " +
                     llvm::Twine(run.size()) + " sizes)");
      seconds.push_back(run[i].second);
    }
    std::sort(seconds.begin(), seconds.end());
    out[i].second = seconds[(seconds.size() - 1) / 2];
  }
  return out;
}

calibration::CollectiveWaits
calibration::fitCollectiveWaits(llvm::ArrayRef<WaitRun> runs) {
  // Rows of relative residuals: (measured - priced) / measured against
  // peers / measured and gaps / measured.
  struct Row {
    double a, b, y;
  };
  std::vector<Row> rows;
  for (const WaitRun &r : runs)
    if (r.measured > 0 && std::isfinite(r.measured) &&
        std::isfinite(r.priced) && r.peers >= 0 && r.gaps >= 0 &&
        r.peers + r.gaps > 0)
      rows.push_back({r.peers / r.measured, r.gaps / r.measured,
                      (r.measured - r.priced) / r.measured});
  auto residual = [&](double wait, double share) {
    double sum = 0;
    for (const Row &r : rows)
      sum +=
          (r.y - wait * r.a - share * r.b) * (r.y - wait * r.a - share * r.b);
    return sum;
  };
  double aa = 0, ab = 0, bb = 0, ay = 0, by = 0;
  for (const Row &r : rows) {
    aa += r.a * r.a;
    ab += r.a * r.b;
    bb += r.b * r.b;
    ay += r.a * r.y;
    by += r.b * r.y;
  }
  // The candidates: both unknowns free, each alone, none; the best that is
  // non-negative.
  std::vector<CollectiveWaits> candidates = {{0, 0}};
  if (aa > 0)
    candidates.push_back({std::max(0.0, ay / aa), 0});
  if (bb > 0)
    candidates.push_back({0, std::max(0.0, by / bb)});
  double det = aa * bb - ab * ab;
  if (det > 1e-12 * std::max(aa * bb, 1e-300)) {
    double wait = (ay * bb - by * ab) / det, share = (aa * by - ab * ay) / det;
    if (wait >= 0 && share >= 0)
      candidates.push_back({wait, share});
  }
  CollectiveWaits best = candidates.front();
  for (const CollectiveWaits &c : candidates)
    if (residual(c.wait, c.gapShare) < residual(best.wait, best.gapShare))
      best = c;
  return best;
}

llvm::Expected<spec::LinkClass> calibration::fitAllReduceLink(
    int64_t ranks, llvm::ArrayRef<std::pair<double, double>> bytesSeconds) {
  if (ranks < 2)
    return error("an all-reduce of " + llvm::Twine(ranks) +
                 " rank(s) moves nothing: a link needs at least 2 ranks");
  if (bytesSeconds.size() < 2)
    return error("fitting a link's bandwidth and latency needs all-reduce "
                 "times of at least 2 sizes, not " +
                 llvm::Twine(bytesSeconds.size()));
  double n = double(ranks);
  // seconds = a x + b y with x = 2 (n-1)/n bytes, y = 2 (n-1): a = 1 /
  // bandwidth, b = latency; each equation weighted by 1 / seconds.
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  for (auto [bytes, seconds] : bytesSeconds) {
    if (!(bytes > 0) || !(seconds > 0) || !std::isfinite(bytes) ||
        !std::isfinite(seconds))
      return error("an all-reduce of " + num(bytes) + " bytes in " +
                   num(seconds) +
                   " s: sizes and times must be positive");
    double w = 1 / (seconds * seconds);
    double x = 2 * (n - 1) / n * bytes, y = 2 * (n - 1);
    sxx += w * x * x;
    sxy += w * x * y;
    syy += w * y * y;
    sxt += w * x * seconds;
    syt += w * y * seconds;
  }
  double det = sxx * syy - sxy * sxy;
  if (!(std::abs(det) > 1e-12 * sxx * syy))
    return error("the all-reduce times are all of one size: fitting a "
                 "bandwidth and a latency needs at least 2 sizes");
  double a = (sxt * syy - syt * sxy) / det;
  double b = (sxx * syt - sxy * sxt) / det;
  if (b < 0) {
    b = 0;
    a = sxt / sxx;
  }
  if (!(a > 0) || !std::isfinite(a)) {
    // Times that do not grow with the size are noise (ranks sharing busy
    // cores): the largest size alone then bounds the bandwidth, with every
    // second of it counted as moving bytes, and no latency.
    auto largest = std::max_element(
        bytesSeconds.begin(), bytesSeconds.end(),
        [](auto l, auto r) { return l.first < r.first; });
    a = largest->second / (2 * (n - 1) / n * largest->first);
    b = 0;
  }
  spec::LinkClass link;
  link.set_bandwidth(1 / a);
  link.set_latency(b);
  return link;
}

llvm::Expected<KernelSamples> calibration::parseProfile(llvm::StringRef json) {
  llvm::Expected<llvm::json::Value> value = parseJson(json, "the profile");
  if (!value)
    return value.takeError();
  const llvm::json::Array *ranks = value->getAsObject()->getArray("ranks");
  if (!ranks || ranks->empty())
    return error("the profile has no \"ranks\" (an array of each rank's "
                 "kernels)");
  KernelSamples mean;
  for (size_t r = 0; r < ranks->size(); ++r) {
    const llvm::json::Object *rank = (*ranks)[r].getAsObject();
    const llvm::json::Object *kernels = rank ? rank->getObject("kernels") : nullptr;
    if (!kernels)
      return error("rank " + llvm::Twine(r) +
                   " of the profile has no \"kernels\" object");
    for (const auto &[name, fields] : *kernels) {
      const llvm::json::Object *k = fields.getAsObject();
      KernelSample sample;
      for (auto [field, into] :
           {std::pair<const char *, double *>{"seconds", &sample.seconds},
            {"calls", &sample.calls},
            {"flops", &sample.flops},
            {"bytes", &sample.bytes}}) {
        std::optional<double> v = k ? k->getNumber(field) : std::nullopt;
        if (!v || *v < 0)
          return error("kernel " + name.str() + " of rank " + llvm::Twine(r) +
                       " of the profile has no non-negative \"" + field +
                       "\"");
        *into = *v;
      }
      add(mean[name.str()], sample);
    }
  }
  for (auto &[name, s] : mean) {
    double count = double(ranks->size());
    s.seconds /= count;
    s.calls /= count;
    s.flops /= count;
    s.bytes /= count;
  }
  return mean;
}

llvm::Expected<std::vector<double>>
calibration::parseStepTimes(llvm::StringRef json) {
  llvm::Expected<llvm::json::Value> value = parseJson(json, "the profile");
  if (!value)
    return value.takeError();
  const llvm::json::Array *times = value->getAsObject()->getArray("step_time_s");
  if (!times)
    return error("the profile has no \"step_time_s\" array");
  std::vector<double> out;
  for (const llvm::json::Value &t : *times) {
    std::optional<double> v = t.getAsNumber();
    if (!v || !(*v > 0))
      return error("the profile's step_time_s holds something other than "
                   "positive seconds");
    out.push_back(*v);
  }
  return out;
}

llvm::Expected<std::pair<int64_t, std::vector<std::pair<double, double>>>>
calibration::parseAllReduceBench(llvm::StringRef json) {
  llvm::Expected<llvm::json::Value> value =
      parseJson(json, "the collectives' times");
  if (!value)
    return value.takeError();
  const llvm::json::Object &o = *value->getAsObject();
  std::optional<int64_t> ranks = o.getInteger("ranks");
  if (!ranks || *ranks < 1)
    return error("the collectives' times have no positive \"ranks\"");
  const llvm::json::Array *points = o.getArray("all_reduce");
  if (!points)
    return error("the collectives' times have no \"all_reduce\" array");
  std::vector<std::pair<double, double>> out;
  for (const llvm::json::Value &p : *points) {
    const llvm::json::Array *pair = p.getAsArray();
    std::optional<double> bytes, seconds;
    if (pair && pair->size() == 2) {
      bytes = (*pair)[0].getAsNumber();
      seconds = (*pair)[1].getAsNumber();
    }
    if (!bytes || !seconds)
      return error("the collectives' all_reduce holds something other than "
                   "[bytes, seconds] pairs");
    out.push_back({*bytes, *seconds});
  }
  return std::make_pair(*ranks, std::move(out));
}
