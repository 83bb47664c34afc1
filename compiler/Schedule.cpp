//===- Schedule.cpp - Pipeline schedules and their timeline ---------------===//

#include "compiler/Schedule.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>

using namespace braid;
using namespace braid::pipeline;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

struct SchemeInfo {
  Scheme scheme;
  const char *name;
};

constexpr SchemeInfo kSchemes[] = {
    {Scheme::GPipe, "gpipe"},
    {Scheme::OneFOneB, "1f1b"},
    {Scheme::Interleaved, "interleaved"},
    {Scheme::ZeroBubbleH1, "zb-h1"},
};

/// One entry of a 1F1B order: the forward or the backward of a micro-batch.
struct Pass {
  bool forward;
  int64_t microBatch;
};

/// Rank r's order of forwards and backwards in PipeDream-flush 1F1B
/// (Megatron's forward_backward_pipelining_without_interleaving):
/// min(p - r - 1, m) warm-up forwards, then one forward and one backward
/// while forwards remain, then the remaining backwards.
std::vector<Pass> oneFOneBOrder(int64_t p, int64_t m, int64_t r) {
  const int64_t warmup = std::min(p - r - 1, m);
  const int64_t steady = m - warmup;
  std::vector<Pass> order;
  order.reserve(2 * m);
  for (int64_t i = 0; i < warmup; ++i)
    order.push_back({true, i});
  for (int64_t j = 0; j < steady; ++j) {
    order.push_back({true, warmup + j});
    order.push_back({false, j});
  }
  for (int64_t j = steady; j < m; ++j)
    order.push_back({false, j});
  return order;
}

std::vector<Step> gpipe(int64_t m) {
  std::vector<Step> steps;
  steps.reserve(2 * m);
  for (int64_t i = 0; i < m; ++i)
    steps.push_back({Work::Forward, i, 0});
  for (int64_t i = 0; i < m; ++i)
    steps.push_back({Work::Backward, i, 0});
  return steps;
}

std::vector<Step> oneFOneB(int64_t p, int64_t m, int64_t r) {
  std::vector<Step> steps;
  steps.reserve(2 * m);
  for (const Pass &pass : oneFOneBOrder(p, m, r))
    steps.push_back(
        {pass.forward ? Work::Forward : Work::Backward, pass.microBatch, 0});
  return steps;
}

/// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", section 2.1): the
/// forwards and input gradients (B) in 1F1B's order, so the in-flight
/// micro-batches are 1F1B's; each W right after its B, except that rank r
/// defers the W of its first r micro-batches to after its last B, where
/// 1F1B leaves rank r a cooldown bubble of r backwards while the gradients
/// travel back to rank 0.
std::vector<Step> zeroBubbleH1(int64_t p, int64_t m, int64_t r) {
  const int64_t deferred = std::min(r, m);
  std::vector<Step> steps;
  steps.reserve(3 * m);
  for (const Pass &pass : oneFOneBOrder(p, m, r)) {
    if (pass.forward) {
      steps.push_back({Work::Forward, pass.microBatch, 0});
      continue;
    }
    steps.push_back({Work::BackwardInput, pass.microBatch, 0});
    if (pass.microBatch >= deferred)
      steps.push_back({Work::BackwardWeight, pass.microBatch, 0});
  }
  for (int64_t i = 0; i < deferred; ++i)
    steps.push_back({Work::BackwardWeight, i, 0});
  return steps;
}

/// Megatron's forward_backward_pipelining_with_interleaving for rank r: the
/// k-th forward (of m * v) runs micro-batch (k / (p v)) p + k % p on chunk
/// (k % (p v)) / p, the k-th backward the same micro-batch on the chunks in
/// reverse order; (p - r - 1) * 2 + (v - 1) * p warm-up forwards (at most
/// m * v), then one forward and one backward, then the remaining backwards.
std::vector<Step> interleaved(int64_t p, int64_t m, int64_t v, int64_t r) {
  const int64_t total = m * v;
  const int64_t group = p * v;
  auto microBatch = [&](int64_t k) { return (k / group) * p + k % p; };
  auto forward = [&](int64_t k) -> Step {
    return {Work::Forward, microBatch(k), (k % group) / p};
  };
  auto backward = [&](int64_t k) -> Step {
    return {Work::Backward, microBatch(k), v - 1 - (k % group) / p};
  };
  const int64_t warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  const int64_t steady = total - warmup;
  std::vector<Step> steps;
  steps.reserve(2 * total);
  for (int64_t k = 0; k < warmup; ++k)
    steps.push_back(forward(k));
  for (int64_t k = 0; k < steady; ++k) {
    steps.push_back(forward(warmup + k));
    steps.push_back(backward(k));
  }
  for (int64_t k = steady; k < total; ++k)
    steps.push_back(backward(k));
  return steps;
}

bool isInputGradient(Work work) {
  return work == Work::Backward || work == Work::BackwardInput;
}

//===----------------------------------------------------------------------===//
// Costs
//===----------------------------------------------------------------------===//

using Table = std::vector<std::vector<double>>;

/// `time` as printf's %g writes it.
std::string formatTime(double time) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", time);
  return buffer;
}

Table filled(int64_t p, int64_t v, double value) {
  return Table(p, std::vector<double>(v, value));
}

/// Checks that `table` is p x v of finite non-negative times (or empty, when
/// `required` is false).
llvm::Error checkTable(const Table &table, llvm::StringRef name, int64_t p,
                       int64_t v, bool required) {
  if (table.empty() && !required)
    return llvm::Error::success();
  if (static_cast<int64_t>(table.size()) != p)
    return error("costs." + name + " has " + llvm::Twine(table.size()) +
                 " rows, expected one per rank (p = " + llvm::Twine(p) + ")");
  for (int64_t r = 0; r < p; ++r) {
    if (static_cast<int64_t>(table[r].size()) != v)
      return error("costs." + name + "[" + llvm::Twine(r) + "] has " +
                   llvm::Twine(table[r].size()) +
                   " entries, expected one per chunk (v = " + llvm::Twine(v) +
                   ")");
    for (int64_t k = 0; k < v; ++k)
      if (!std::isfinite(table[r][k]) || table[r][k] < 0)
        return error("costs." + name + "[" + llvm::Twine(r) + "][" +
                     llvm::Twine(k) + "] = " + formatTime(table[r][k]) +
                     ", expected a finite time >= 0");
  }
  return llvm::Error::success();
}

/// The duration of each kind of work, indexed by Work, rank and local chunk.
struct Durations {
  Table of[4];

  double operator()(int64_t r, const Step &step) const {
    return of[static_cast<int>(step.work)][r][step.chunk];
  }
};

llvm::Expected<Durations> resolveCosts(const Costs &costs, int64_t p,
                                       int64_t v) {
  if (llvm::Error e = checkTable(costs.forward, "forward", p, v, true))
    return std::move(e);
  if (llvm::Error e = checkTable(costs.backward, "backward", p, v, false))
    return std::move(e);
  if (llvm::Error e =
          checkTable(costs.backwardInput, "backwardInput", p, v, false))
    return std::move(e);
  if (llvm::Error e =
          checkTable(costs.backwardWeight, "backwardWeight", p, v, false))
    return std::move(e);
  if (!std::isfinite(costs.transfer) || costs.transfer < 0)
    return error("costs.transfer = " + formatTime(costs.transfer) +
                 ", expected a finite time >= 0");
  const bool hasInput = !costs.backwardInput.empty();
  const bool hasWeight = !costs.backwardWeight.empty();
  if (costs.backward.empty() && !(hasInput && hasWeight))
    return error("costs.backward is empty and costs.backwardInput or "
                 "costs.backwardWeight is too, expected the backward or both "
                 "of its halves");

  Durations d;
  d.of[static_cast<int>(Work::Forward)] = costs.forward;
  Table &backward = d.of[static_cast<int>(Work::Backward)];
  Table &input = d.of[static_cast<int>(Work::BackwardInput)];
  Table &weight = d.of[static_cast<int>(Work::BackwardWeight)];
  backward = input = weight = filled(p, v, 0);
  for (int64_t r = 0; r < p; ++r) {
    for (int64_t k = 0; k < v; ++k) {
      double b = costs.backward.empty()
                     ? costs.backwardInput[r][k] + costs.backwardWeight[r][k]
                     : costs.backward[r][k];
      double in, w;
      if (hasInput && hasWeight) {
        in = costs.backwardInput[r][k];
        w = costs.backwardWeight[r][k];
      } else if (hasInput || hasWeight) {
        double given =
            hasInput ? costs.backwardInput[r][k] : costs.backwardWeight[r][k];
        if (given > b)
          return error(llvm::Twine("costs.") +
                       (hasInput ? "backwardInput" : "backwardWeight") + "[" +
                       llvm::Twine(r) + "][" + llvm::Twine(k) +
                       "] = " + formatTime(given) +
                       " is more than costs.backward[" + llvm::Twine(r) + "][" +
                       llvm::Twine(k) + "] = " + formatTime(b) +
                       ", expected a part of the backward");
        (hasInput ? in : w) = given;
        (hasInput ? w : in) = b - given;
      } else {
        in = w = b / 2;
      }
      backward[r][k] = b;
      input[r][k] = in;
      weight[r][k] = w;
    }
  }
  return d;
}

//===----------------------------------------------------------------------===//
// Checking a schedule
//===----------------------------------------------------------------------===//

/// What a rank's schedule holds for one micro-batch on one local chunk.
struct Seen {
  bool forward = false, backward = false, input = false, weight = false;
};

std::string at(int64_t r, size_t s, const Step &step) {
  return ("rank " + llvm::Twine(r) + " step " + llvm::Twine(s) + " (" +
          describe(step) + ")")
      .str();
}

/// Checks rank r's schedule: every step in range, every micro-batch's
/// forward and backward on every local chunk exactly once, in order. Sets
/// `split[k][i]` when micro-batch i's backward on local chunk k is split.
llvm::Error checkRank(const std::vector<Step> &steps, int64_t r, int64_t m,
                      int64_t v, std::vector<std::vector<bool>> &split) {
  std::vector<std::vector<Seen>> seen(v, std::vector<Seen>(m));
  for (auto [s, step] : llvm::enumerate(steps)) {
    if (step.microBatch < 0 || step.microBatch >= m)
      return error(at(r, s, step) + ": micro-batch " +
                   llvm::Twine(step.microBatch) +
                   " is out of range, expected 0.." + llvm::Twine(m - 1));
    if (step.chunk < 0 || step.chunk >= v)
      return error(at(r, s, step) + ": chunk " + llvm::Twine(step.chunk) +
                   " is out of range, expected 0.." + llvm::Twine(v - 1));
    Seen &state = seen[step.chunk][step.microBatch];
    auto repeated = [&]() { return error(at(r, s, step) + " is repeated"); };
    auto mixed = [&]() {
      return error(at(r, s, step) +
                   " mixes a whole backward with a split one (backward-input "
                   "and backward-weight) for the same micro-batch and chunk");
    };
    auto before = [&](llvm::StringRef what) {
      return error(at(r, s, step) + " comes before the " + what +
                   " of micro-batch " + llvm::Twine(step.microBatch) +
                   " on chunk " + llvm::Twine(step.chunk));
    };
    switch (step.work) {
    case Work::Forward:
      if (state.forward)
        return repeated();
      state.forward = true;
      break;
    case Work::Backward:
      if (state.backward)
        return repeated();
      if (state.input || state.weight)
        return mixed();
      if (!state.forward)
        return before("forward");
      state.backward = true;
      break;
    case Work::BackwardInput:
      if (state.input)
        return repeated();
      if (state.backward)
        return mixed();
      if (!state.forward)
        return before("forward");
      state.input = true;
      break;
    case Work::BackwardWeight:
      if (state.weight)
        return repeated();
      if (state.backward)
        return mixed();
      if (!state.input)
        return before("backward-input");
      state.weight = true;
      break;
    }
  }
  for (int64_t k = 0; k < v; ++k) {
    for (int64_t i = 0; i < m; ++i) {
      const Seen &state = seen[k][i];
      auto missing = [&](Work work) {
        return error("rank " + llvm::Twine(r) + " schedule misses the " +
                     describe({work, i, k}));
      };
      if (!state.forward)
        return missing(Work::Forward);
      if (!state.backward && !state.input)
        return missing(Work::Backward);
      if (state.input && !state.weight)
        return missing(Work::BackwardWeight);
      split[k][i] = state.input;
    }
  }
  return llvm::Error::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

llvm::StringRef pipeline::workName(Work work) {
  switch (work) {
  case Work::Forward:
    return "forward";
  case Work::Backward:
    return "backward";
  case Work::BackwardInput:
    return "backward-input";
  case Work::BackwardWeight:
    return "backward-weight";
  }
  llvm_unreachable("unknown work");
}

std::string pipeline::describe(const Step &step) {
  return (workName(step.work) + " of micro-batch " +
          llvm::Twine(step.microBatch) + " on chunk " + llvm::Twine(step.chunk))
      .str();
}

llvm::Expected<Scheme> pipeline::parseScheme(llvm::StringRef name) {
  for (const SchemeInfo &info : kSchemes)
    if (name == info.name)
      return info.scheme;
  std::string known;
  llvm::raw_string_ostream os(known);
  llvm::interleaveComma(kSchemes, os,
                        [&](const SchemeInfo &info) { os << info.name; });
  return error("unknown pipeline schedule '" + name + "', expected one of " +
               known);
}

llvm::StringRef pipeline::schemeName(Scheme scheme) {
  for (const SchemeInfo &info : kSchemes)
    if (info.scheme == scheme)
      return info.name;
  llvm_unreachable("unknown scheme");
}

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

llvm::Expected<Schedules> pipeline::makeSchedule(Scheme scheme, int64_t p,
                                                 int64_t m, int64_t v) {
  llvm::StringRef name = schemeName(scheme);
  if (p < 1)
    return error("pipeline ranks p = " + llvm::Twine(p) +
                 ", expected at least 1");
  if (m < 1)
    return error("micro-batches m = " + llvm::Twine(m) +
                 ", expected at least 1");
  if (v < 1)
    return error("chunks per rank v = " + llvm::Twine(v) +
                 ", expected at least 1");
  if (scheme == Scheme::Interleaved) {
    if (v < 2)
      return error("the interleaved schedule has v = " + llvm::Twine(v) +
                   " chunks per rank, expected at least 2 (use 1f1b for one)");
    if (m % p != 0)
      return error("the interleaved schedule has m = " + llvm::Twine(m) +
                   " micro-batches for p = " + llvm::Twine(p) +
                   " ranks, expected a multiple of p (Megatron's rule: the "
                   "micro-batches go through the chunks in groups of p)");
  } else if (v != 1) {
    return error("the " + name + " schedule has v = " + llvm::Twine(v) +
                 " chunks per rank, expected 1 (use interleaved for virtual "
                 "chunks)");
  }

  Schedules schedules(p);
  for (int64_t r = 0; r < p; ++r) {
    switch (scheme) {
    case Scheme::GPipe:
      schedules[r] = gpipe(m);
      break;
    case Scheme::OneFOneB:
      schedules[r] = oneFOneB(p, m, r);
      break;
    case Scheme::Interleaved:
      schedules[r] = interleaved(p, m, v, r);
      break;
    case Scheme::ZeroBubbleH1:
      schedules[r] = zeroBubbleH1(p, m, r);
      break;
    }
  }
  return schedules;
}

//===----------------------------------------------------------------------===//
// Costs
//===----------------------------------------------------------------------===//

Costs Costs::uniform(int64_t p, int64_t v, double f, double b) {
  return uniformSplit(p, v, f, b / 2, b / 2);
}

Costs Costs::uniformSplit(int64_t p, int64_t v, double f, double bInput,
                          double bWeight) {
  Costs costs;
  costs.forward = filled(p, v, f);
  costs.backward = filled(p, v, bInput + bWeight);
  costs.backwardInput = filled(p, v, bInput);
  costs.backwardWeight = filled(p, v, bWeight);
  return costs;
}

//===----------------------------------------------------------------------===//
// Simulation
//===----------------------------------------------------------------------===//

llvm::Expected<Timeline> pipeline::simulate(const Schedules &schedules,
                                            int64_t p, int64_t m, int64_t v,
                                            const Costs &costs) {
  if (p < 1 || m < 1 || v < 1)
    return error("p = " + llvm::Twine(p) + ", m = " + llvm::Twine(m) +
                 ", v = " + llvm::Twine(v) + ", expected each at least 1");
  if (static_cast<int64_t>(schedules.size()) != p)
    return error(
        "got " + llvm::Twine(schedules.size()) +
        " rank schedules, expected one per rank (p = " + llvm::Twine(p) + ")");
  llvm::Expected<Durations> durations = resolveCosts(costs, p, v);
  if (!durations)
    return durations.takeError();

  // split[r][k][i]: rank r splits micro-batch i's backward on local chunk k.
  std::vector<std::vector<std::vector<bool>>> split(
      p, std::vector<std::vector<bool>>(v, std::vector<bool>(m)));
  for (int64_t r = 0; r < p; ++r)
    if (llvm::Error e = checkRank(schedules[r], r, m, v, split[r]))
      return std::move(e);

  // Global chunk c is rank c % p's local chunk c / p.
  const int64_t chunks = p * v;
  auto global = [&](int64_t r, int64_t k) { return k * p + r; };
  auto rankOf = [&](int64_t c) { return c % p; };
  auto localOf = [&](int64_t c) { return c / p; };
  // When the forward and the input gradient of micro-batch i on global chunk
  // c end; negative until they have run.
  std::vector<double> forwardEnd(chunks * m, -1), gradientEnd(chunks * m, -1);
  auto index = [&](int64_t c, int64_t i) { return c * m + i; };

  /// A step a step waits on: its global chunk and whether it is a forward.
  struct Dependency {
    int64_t chunk;
    bool forward;
  };
  // The steps `step` of rank r waits on (besides the rank's earlier steps).
  auto dependencies = [&](int64_t r, const Step &step) {
    llvm::SmallVector<Dependency, 2> deps;
    const int64_t c = global(r, step.chunk);
    switch (step.work) {
    case Work::Forward:
      if (c > 0)
        deps.push_back({c - 1, true});
      break;
    case Work::Backward:
    case Work::BackwardInput:
      deps.push_back({c, true});
      if (c + 1 < chunks)
        deps.push_back({c + 1, false});
      break;
    case Work::BackwardWeight:
      // Its own B, earlier on the same rank (checkRank).
      break;
    }
    return deps;
  };

  Timeline timeline;
  timeline.ranks.resize(p);
  timeline.busy.assign(p, 0);
  std::vector<size_t> next(p, 0);
  std::vector<double> rankFree(p, 0);
  std::deque<int64_t> queue;
  std::vector<bool> queued(p, true);
  for (int64_t r = 0; r < p; ++r)
    queue.push_back(r);
  auto wake = [&](int64_t r) {
    if (!queued[r]) {
      queued[r] = true;
      queue.push_back(r);
    }
  };
  while (!queue.empty()) {
    const int64_t r = queue.front();
    queue.pop_front();
    queued[r] = false;
    const std::vector<Step> &steps = schedules[r];
    for (; next[r] < steps.size(); ++next[r]) {
      const Step &step = steps[next[r]];
      const int64_t c = global(r, step.chunk);
      double ready = rankFree[r];
      bool blocked = false;
      for (const Dependency &dep : dependencies(r, step)) {
        double end =
            (dep.forward ? forwardEnd
                         : gradientEnd)[index(dep.chunk, step.microBatch)];
        if (end < 0) {
          blocked = true;
          break;
        }
        if (rankOf(dep.chunk) != r)
          end += costs.transfer;
        ready = std::max(ready, end);
      }
      if (blocked)
        break;
      const double duration = (*durations)(r, step);
      const double end = ready + duration;
      timeline.ranks[r].push_back({step, ready, end});
      timeline.busy[r] += duration;
      rankFree[r] = end;
      if (step.work == Work::Forward) {
        forwardEnd[index(c, step.microBatch)] = end;
        if (c + 1 < chunks)
          wake(rankOf(c + 1));
      } else if (isInputGradient(step.work)) {
        gradientEnd[index(c, step.microBatch)] = end;
        if (c > 0)
          wake(rankOf(c - 1));
      }
    }
  }

  // Ranks left with steps wait on each other.
  std::string stuck;
  for (int64_t r = 0; r < p; ++r) {
    if (next[r] == schedules[r].size())
      continue;
    const Step &step = schedules[r][next[r]];
    for (const Dependency &dep : dependencies(r, step)) {
      if ((dep.forward ? forwardEnd
                       : gradientEnd)[index(dep.chunk, step.microBatch)] >= 0)
        continue;
      const int64_t depRank = rankOf(dep.chunk), depLocal = localOf(dep.chunk);
      Work work = dep.forward ? Work::Forward
                  : split[depRank][depLocal][step.microBatch]
                      ? Work::BackwardInput
                      : Work::Backward;
      if (!stuck.empty())
        stuck += "; ";
      stuck += at(r, next[r], step) + " waits for rank " +
               std::to_string(depRank) + "'s " +
               describe({work, step.microBatch, depLocal});
      break;
    }
  }
  if (!stuck.empty())
    return error("the pipeline schedules deadlock: " + stuck);

  for (int64_t r = 0; r < p; ++r)
    for (const Interval &interval : timeline.ranks[r])
      timeline.stepTime = std::max(timeline.stepTime, interval.end);
  timeline.bubble.assign(p, 0);
  timeline.peakInFlight.assign(p, 0);
  for (int64_t r = 0; r < p; ++r) {
    if (timeline.stepTime > 0)
      timeline.bubble[r] = 1 - timeline.busy[r] / timeline.stepTime;
    int64_t inFlight = 0;
    for (const Step &step : schedules[r]) {
      if (step.work == Work::Forward)
        timeline.peakInFlight[r] =
            std::max(timeline.peakInFlight[r], ++inFlight);
      else if (isInputGradient(step.work))
        --inFlight;
    }
  }
  return timeline;
}
