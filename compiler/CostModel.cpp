//===- CostModel.cpp - Predicted step time of a plan on a cluster ---------===//
//
// predictStep: each stage's functions priced (CostModelPricer.cpp), then the
// step: the micro-batches in sequence, or the pipeline's schedule simulated
// (on cores the ranks share too, simulateShared).
//
//===----------------------------------------------------------------------===//

#include "compiler/CostModel.h"
#include "compiler/CostModelInternal.h"

#include "compiler/Schedule.h"
#include "runtime/plan/PlanLoader.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

using namespace braid;
using namespace braid::costmodel;

namespace {

/// Adds `times` x the seconds of `from` (by plan::Kernel) to `into` (by
/// name).
void addKernels(std::map<std::string, double> &into,
                const std::array<double, plan::Kernel_ARRAYSIZE> &from,
                double times) {
  for (int k = 0; k < plan::Kernel_ARRAYSIZE; ++k)
    if (from[k] != 0)
      into[plan::Kernel_Name(plan::Kernel(k))] += times * from[k];
}

const plan::Function *findFunction(const plan::Plan &plan,
                                   const std::string &name) {
  for (const plan::Function &fn : plan.functions())
    if (fn.name() == name)
      return &fn;
  return nullptr;
}

/// The pipeline's schedule run on cores that its ranks share: each of the p
/// stage ranks stands for `copies` ranks of the node (its peers along the
/// other mesh axes, which run in step with it), and while n stage ranks
/// compute and the other p - n wait, each computing one progresses at
/// min(1, capacity / ((n + waiting (p - n)) copies)) of its own speed
/// (`costs` are the times of a rank with a core to itself; `waiting` the
/// share of a core a waiting rank still takes). The dependencies are
/// pipeline::simulate's; the schedules must have passed it. busy[r] is the
/// wall time rank r computed.
llvm::Expected<pipeline::Timeline>
simulateShared(const pipeline::Schedules &schedules, int64_t p, int64_t m,
               int64_t v, const pipeline::Costs &costs, double copies,
               double capacity, double waiting) {
  using pipeline::Work;
  const int64_t chunks = p * v;
  auto global = [&](int64_t r, int64_t k) { return k * p + r; };
  auto rankOf = [&](int64_t c) { return c % p; };
  std::vector<double> forwardEnd(chunks * m, -1), gradientEnd(chunks * m, -1);
  auto duration = [&](int64_t r, const pipeline::Step &step) {
    const auto &table = step.work == Work::Forward ? costs.forward
                        : step.work == Work::Backward ? costs.backward
                        : step.work == Work::BackwardInput
                            ? costs.backwardInput
                            : costs.backwardWeight;
    return table[r][step.chunk];
  };
  // When `step` of rank r may start (its dependencies' ends, plus a
  // transfer from another rank), or -1 while one has not ended.
  auto readyAt = [&](int64_t r, const pipeline::Step &step) {
    const int64_t c = global(r, step.chunk), i = step.microBatch;
    double at = 0;
    auto need = [&](const std::vector<double> &ends, int64_t chunk) {
      double end = ends[chunk * m + i];
      if (end < 0)
        return false;
      at = std::max(at, end + (rankOf(chunk) != r ? costs.transfer : 0.0));
      return true;
    };
    switch (step.work) {
    case Work::Forward:
      if (c > 0 && !need(forwardEnd, c - 1))
        return -1.0;
      break;
    case Work::Backward:
    case Work::BackwardInput:
      if (!need(forwardEnd, c) ||
          (c + 1 < chunks && !need(gradientEnd, c + 1)))
        return -1.0;
      break;
    case Work::BackwardWeight:
      break;
    }
    return at;
  };

  pipeline::Timeline timeline;
  timeline.ranks.resize(p);
  timeline.busy.assign(p, 0);
  std::vector<size_t> next(p, 0);
  std::vector<bool> running(p, false);
  std::vector<double> remaining(p, 0), started(p, 0);
  double now = 0;
  size_t steps = 0, done = 0;
  for (const auto &list : schedules)
    steps += list.size();
  while (done < steps) {
    // Start what may start; note when the next waiting step may.
    double wakeUp = std::numeric_limits<double>::infinity();
    for (int64_t r = 0; r < p; ++r) {
      if (running[r] || next[r] == schedules[r].size())
        continue;
      const pipeline::Step &step = schedules[r][next[r]];
      double at = readyAt(r, step);
      if (at < 0)
        continue;
      if (at > now) {
        wakeUp = std::min(wakeUp, at);
        continue;
      }
      running[r] = true;
      remaining[r] = duration(r, step);
      started[r] = now;
    }
    int64_t n = llvm::count(running, true);
    if (n == 0) {
      if (!std::isfinite(wakeUp))
        return error("the pipeline's schedules deadlock under the cost "
                     "model's simulation");
      now = wakeUp;
      continue;
    }
    double rate = std::min(
        1.0, capacity / ((double(n) + waiting * double(p - n)) * copies));
    double dt = wakeUp - now;
    for (int64_t r = 0; r < p; ++r)
      if (running[r])
        dt = std::min(dt, remaining[r] / rate);
    now += dt;
    for (int64_t r = 0; r < p; ++r) {
      if (!running[r])
        continue;
      remaining[r] -= rate * dt;
      if (remaining[r] > 1e-12 * std::max(1.0, now))
        continue;
      const pipeline::Step &step = schedules[r][next[r]];
      const int64_t c = global(r, step.chunk), i = step.microBatch;
      if (step.work == Work::Forward)
        forwardEnd[c * m + i] = now;
      else if (step.work != Work::BackwardWeight)
        gradientEnd[c * m + i] = now;
      timeline.ranks[r].push_back({step, started[r], now});
      timeline.busy[r] += now - started[r];
      running[r] = false;
      ++next[r];
      ++done;
    }
  }
  timeline.stepTime = now;
  return timeline;
}

/// The step priced with the speeds of `busyRanks` ranks computing at once.
llvm::Expected<StepPrediction> predictWith(const plan::Plan &plan,
                                           const spec::Cluster &cluster,
                                           double busyRanks);

} // namespace

llvm::Expected<StepPrediction> braid::predictStep(const plan::Plan &plan,
                                                  const spec::Cluster &cluster) {
  int64_t world = plan::WorldSize(plan);
  if (world > cluster.nodes() * cluster.devices_per_node())
    return error("the plan has " + llvm::Twine(world) + " ranks but cluster " +
                 cluster.name() + " has " +
                 llvm::Twine(cluster.nodes() * cluster.devices_per_node()) +
                 " devices");
  llvm::Expected<StepPrediction> p = predictWith(plan, cluster, 0);
  if (!p || cluster.calibrations_size() == 0 ||
      Pricer(plan, cluster).sharesCores())
    return p;
  // Calibrated CPU ranks share their node's cores: a rank that waits (a
  // pipeline bubble) leaves them to the others, which then compute at the
  // speed of fewer ranks. A fixed point over the share of ranks computing
  // at once, from the busy times of the stages (each stage has world / pp
  // ranks).
  int64_t perNode = std::min<int64_t>(world, cluster.devices_per_node());
  int64_t stages = std::max<int64_t>(plan.pipeline().stages_size(), 1);
  for (int iteration = 0; iteration < 4; ++iteration) {
    double busy = 0;
    for (double b : p->stageBusy)
      busy += b;
    double share = p->stepTime > 0 ? busy / (p->stepTime * double(stages)) : 1;
    double busyRanks = std::max(1.0, std::min(1.0, share) * double(perNode));
    llvm::Expected<StepPrediction> next = predictWith(plan, cluster, busyRanks);
    if (!next)
      return next.takeError();
    *p = *next;
  }
  return p;
}

namespace {

llvm::Expected<StepPrediction> predictWith(const plan::Plan &plan,
                                           const spec::Cluster &cluster,
                                           double busyRanks) {
  Pricer pricer(plan, cluster, busyRanks);
  // With shared cores, the stages' functions are priced at the speed of a
  // rank with a core to itself and the schedule's simulation shares the
  // cores (simulateShared); outside the schedule every rank computes.
  std::optional<Pricer> alone;
  if (pricer.sharesCores())
    alone.emplace(plan, cluster, pricer.capacity());
  const Pricer &stagePricer = alone ? *alone : pricer;
  const plan::Mesh &mesh = plan.mesh();
  auto coordsOfStage = [&](int64_t stage) {
    std::vector<int64_t> coords(mesh.axes_size(), 0);
    for (int a = 0; a < mesh.axes_size(); ++a)
      if (mesh.axes(a) == "pp")
        coords[a] = stage;
    return coords;
  };
  auto price = [&](const std::string &name, int64_t stage, StepPrediction &into,
                   double times,
                   SyncClock *sync = nullptr) -> llvm::Expected<double> {
    if (name.empty())
      return 0.0;
    const plan::Function *fn = findFunction(plan, name);
    if (!fn)
      return error("the plan names function '" + name + "', which it lacks");
    double from = sync ? sync->clock : 0;
    FunctionTime t = priceFunction(pricer, *fn, coordsOfStage(stage), sync);
    if (sync)
      sync->repeat(from, times);
    into.collectiveGaps += times * t.gaps;
    into.compute += times * t.compute;
    into.recompute += times * t.recompute;
    into.hiddenCommunication += times * t.hidden;
    into.collectivePeers += times * t.collectivePeers;
    into.collectiveSeconds += times * t.collectiveSeconds;
    addKernels(into.kernels, t.kernels, times);
    for (auto &[axes, s] : t.communication)
      into.communication[axes] += times * s;
    return t.total + t.transfer;
  };

  StepPrediction out;
  const plan::Training &training = plan.training();
  int64_t micro = std::max<int64_t>(training.micro_batches(), 1);
  if (plan.pipeline().stages_size() == 0) {
    const plan::StepFunctions &fns = training.step();
    double total = 0;
    // The step's functions run one after the other: the gradients' reduction
    // in update follows every micro-batch's compute, or (last_micro_step)
    // runs beside the last micro-batch's backward, exposed where it ends
    // after it; ZeRO's parameter gathers end update, or (first_micro_step)
    // run beside the first micro-batch's forward.
    SyncClock sync;
    std::vector<std::pair<std::string, double>> calls = {{fns.zero_grads(), 1}};
    for (int64_t m = 0; m < micro; ++m) {
      const std::string &fn = plan::MicroStepFunction(fns, m, micro);
      if (calls.back().first == fn)
        calls.back().second += 1;
      else
        calls.push_back({fn, 1});
    }
    calls.push_back({fns.update(), 1});
    for (auto [name, times] : calls) {
      if (name.empty() || times == 0)
        continue;
      llvm::Expected<double> t = price(name, 0, out, times, &sync);
      if (!t)
        return t.takeError();
      total += times * *t;
    }
    out.overhead = pricer.stepOverhead();
    out.stepTime = total + out.overhead;
    out.stageBusy = {out.stepTime};
    return out;
  }

  // A pipeline: each stage's functions, then the schedule's simulation.
  const plan::Pipeline &pipe = plan.pipeline();
  int64_t p = pipe.stages_size();
  int64_t v = 1 + pipe.stages(0).chunks_size();
  bool split = !pipe.stages(0).backward_weight().empty();
  pipeline::Costs costs;
  costs.forward.assign(p, std::vector<double>(v, 0));
  if (split) {
    costs.backwardInput.assign(p, std::vector<double>(v, 0));
    costs.backwardWeight.assign(p, std::vector<double>(v, 0));
  } else {
    costs.backward.assign(p, std::vector<double>(v, 0));
  }
  std::vector<StepPrediction> perStage(p);
  std::vector<double> fixed(p, 0); // zero_grads + update
  double transfer = 0;
  for (int64_t s = 0; s < p; ++s) {
    const plan::Stage &stage = pipe.stages(s);
    StepPrediction &acc = perStage[s];
    // The stage's compute in the step before its update: what its ranks'
    // data-parallel groups drifted over since they last met.
    SyncClock stageSync;
    for (int64_t k = 0; k < v; ++k) {
      std::string fwd = k == 0 ? stage.forward() : stage.chunks(k - 1).forward();
      std::string bwd = k == 0 ? stage.backward() : stage.chunks(k - 1).backward();
      std::string bw = k == 0 ? stage.backward_weight()
                              : stage.chunks(k - 1).backward_weight();
      for (auto [name, table] :
           {std::pair<std::string, std::vector<std::vector<double>> *>{
                fwd, &costs.forward},
            {bwd, split ? &costs.backwardInput : &costs.backward},
            {bw, split ? &costs.backwardWeight : nullptr}}) {
        if (!table)
          continue;
        const plan::Function *fn = findFunction(plan, name);
        if (!fn)
          return error("stage " + llvm::Twine(s) + " names function '" + name +
                       "', which the plan lacks");
        FunctionTime t = priceFunction(stagePricer, *fn, coordsOfStage(s));
        stageSync.clock += double(micro) * t.compute;
        (*table)[s][k] = t.total;
        transfer = std::max(transfer, t.transfer);
        acc.compute += double(micro) * t.compute;
        acc.recompute += double(micro) * t.recompute;
        acc.hiddenCommunication += double(micro) * t.hidden;
        acc.collectivePeers += double(micro) * t.collectivePeers;
        acc.collectiveSeconds += double(micro) * t.collectiveSeconds;
        acc.collectiveGaps += double(micro) * t.gaps;
        addKernels(acc.kernels, t.kernels, double(micro));
        for (auto &[axes, sec] : t.communication)
          acc.communication[axes] += double(micro) * sec;
      }
    }
    // A call that runs a function of its own (a chunk's last backward,
    // which starts the gradients' sums) in place of one of its chunk's: the
    // difference, the sums' exposed tail, is added after the schedule (as
    // the update is; exact when the call is the stage's last, as without
    // interleaving).
    for (const plan::ScheduleStep &call : stage.schedule()) {
      if (call.function().empty())
        continue;
      const plan::Chunk *chunk =
          call.chunk() ? &stage.chunks(int(call.chunk() - 1)) : nullptr;
      bool weight = call.kind() == plan::ScheduleStep::BACKWARD_WEIGHT;
      const std::string &usual =
          weight ? (chunk ? chunk->backward_weight() : stage.backward_weight())
                 : (chunk ? chunk->backward() : stage.backward());
      const plan::Function *own = findFunction(plan, call.function());
      const plan::Function *instead = findFunction(plan, usual);
      if (!own || !instead)
        return error("stage " + llvm::Twine(s) + " names function '" +
                     (own ? usual : call.function()) +
                     "', which the plan lacks");
      FunctionTime a = priceFunction(stagePricer, *own, coordsOfStage(s));
      FunctionTime b = priceFunction(stagePricer, *instead, coordsOfStage(s));
      fixed[s] += a.total - b.total;
      acc.compute += a.compute - b.compute;
      acc.hiddenCommunication += a.hidden - b.hidden;
      acc.collectivePeers += a.collectivePeers - b.collectivePeers;
      acc.collectiveSeconds += a.collectiveSeconds - b.collectiveSeconds;
      acc.collectiveGaps += a.gaps - b.gaps;
      addKernels(acc.kernels, a.kernels, 1);
      addKernels(acc.kernels, b.kernels, -1);
      for (auto &[axes, sec] : a.communication)
        acc.communication[axes] += sec;
      for (auto &[axes, sec] : b.communication)
        acc.communication[axes] -= sec;
    }
    for (const std::string &name : {stage.zero_grads(), stage.update()}) {
      llvm::Expected<double> t = price(name, s, acc, 1, &stageSync);
      if (!t)
        return t.takeError();
      fixed[s] += *t;
    }
  }
  costs.transfer = transfer;
  // The plan's own order of work on each stage.
  pipeline::Schedules schedules(p);
  for (int64_t s = 0; s < p; ++s)
    for (const plan::ScheduleStep &step : pipe.stages(s).schedule()) {
      pipeline::Work work =
          step.kind() == plan::ScheduleStep::FORWARD ? pipeline::Work::Forward
          : step.kind() == plan::ScheduleStep::BACKWARD_WEIGHT
              ? pipeline::Work::BackwardWeight
          : split ? pipeline::Work::BackwardInput
                  : pipeline::Work::Backward;
      schedules[s].push_back({work, step.micro_batch(), step.chunk()});
    }
  llvm::Expected<pipeline::Timeline> timeline =
      pipeline::simulate(schedules, p, micro, v, costs);
  if (!timeline)
    return timeline.takeError();
  std::vector<double> dedicatedBusy = timeline->busy;
  if (alone) {
    double copies = double(pricer.ranksPerNode) / double(p);
    timeline =
        simulateShared(schedules, p, micro, v, costs, std::max(copies, 1.0),
                       pricer.capacity(), pricer.waitingShare());
    if (!timeline)
      return timeline.takeError();
  }
  int64_t slowest = 0;
  double step = 0;
  for (int64_t s = 0; s < p; ++s) {
    double end = timeline->ranks[s].empty() ? 0 : timeline->ranks[s].back().end;
    double total = end + fixed[s];
    if (total > step) {
      step = total;
      slowest = s;
    }
    out.stageBusy.push_back(timeline->busy[s] + fixed[s]);
  }
  out.overhead = pricer.stepOverhead();
  out.stepTime = step + out.overhead;
  // Shared cores stretch the slowest stage's work by its wall busy time
  // over its own.
  double stretch = 1;
  if (alone && dedicatedBusy[slowest] > 0)
    stretch = timeline->busy[slowest] / dedicatedBusy[slowest];
  StepPrediction &slow = perStage[slowest];
  out.compute = slow.compute * stretch;
  out.recompute = slow.recompute * stretch;
  for (auto &[axes, seconds] : slow.communication)
    seconds *= stretch;
  out.communication = slow.communication;
  out.hiddenCommunication = slow.hiddenCommunication * stretch;
  out.collectivePeers = slow.collectivePeers;
  out.collectiveSeconds = slow.collectiveSeconds;
  out.collectiveGaps = slow.collectiveGaps;
  for (auto &[kernel, seconds] : slow.kernels)
    out.kernels[kernel] = seconds * stretch;
  out.communication["pp"] += double(micro) * 2 * transfer;
  out.bubble = std::max(0.0, step - out.stageBusy[slowest]);
  return out;
}

} // namespace
