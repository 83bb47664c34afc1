//===- CostModel.cpp - Predicted step time of a plan on a cluster ---------===//

#include "compiler/CostModel.h"

#include "compiler/CalibrationFit.h"
#include "compiler/Schedule.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Work.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

using namespace braid;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// DGX H100: 8 H100 SXM5 80 GB per node. Peaks from NVIDIA's data sheet
/// (dense bf16 989 TFLOP/s, fp32 67 TFLOP/s, HBM3 3.35 TB/s); links as
/// NCCL's all-reduce bus bandwidth reaches them (NVLink 4: 900 GB/s both
/// ways, about 360 GB/s of bus bandwidth; 8 x 400 Gb/s InfiniBand per node,
/// about 45 GB/s per GPU).
spec::Cluster dgxH100() {
  spec::Cluster c;
  c.set_name("dgx-h100");
  c.set_nodes(1);
  c.set_devices_per_node(8);
  c.set_memory_bytes(int64_t(80 * kGiB));
  c.set_peak_flops_bf16(989e12);
  c.set_peak_flops_fp32(67e12);
  c.set_memory_bandwidth(3.35e12);
  c.mutable_intra_node()->set_bandwidth(360e9);
  c.mutable_intra_node()->set_latency(5e-6);
  c.mutable_inter_node()->set_bandwidth(45e9);
  c.mutable_inter_node()->set_latency(10e-6);
  c.mutable_intra_node()->set_tree_all_reduce(true);
  c.mutable_inter_node()->set_tree_all_reduce(true);
  c.set_matmul_efficiency(0.6);
  c.set_vector_efficiency(0.7);
  c.set_kernel_overhead_s(4e-6);
  return c;
}

/// DGX A100: 8 A100 SXM4 80 GB per node (dense bf16 312 TFLOP/s, fp32
/// 19.5 TFLOP/s, HBM2e 2.04 TB/s; NVLink 3 600 GB/s both ways, about
/// 230 GB/s of bus bandwidth; 8 x 200 Gb/s HDR InfiniBand, about 22 GB/s per
/// GPU).
spec::Cluster dgxA100() {
  spec::Cluster c;
  c.set_name("dgx-a100");
  c.set_nodes(1);
  c.set_devices_per_node(8);
  c.set_memory_bytes(int64_t(80 * kGiB));
  c.set_peak_flops_bf16(312e12);
  c.set_peak_flops_fp32(19.5e12);
  c.set_memory_bandwidth(2.04e12);
  c.mutable_intra_node()->set_bandwidth(230e9);
  c.mutable_intra_node()->set_latency(6e-6);
  c.mutable_inter_node()->set_bandwidth(22e9);
  c.mutable_inter_node()->set_latency(12e-6);
  c.mutable_intra_node()->set_tree_all_reduce(true);
  c.mutable_inter_node()->set_tree_all_reduce(true);
  c.set_matmul_efficiency(0.6);
  c.set_vector_efficiency(0.7);
  c.set_kernel_overhead_s(5e-6);
  return c;
}

bool isMatmul(plan::Kernel k) {
  return k == plan::LINEAR || k == plan::LINEAR_GRAD_INPUT ||
         k == plan::LINEAR_GRAD_WEIGHT || k == plan::ATTENTION ||
         k == plan::ATTENTION_GRAD;
}

/// Prices instructions on one cluster for one plan.
class Pricer {
public:
  /// `busyRanks`: how many of a node's ranks compute at once (they share
  /// its cores when calibrated; 0: all of them).
  Pricer(const plan::Plan &plan, const spec::Cluster &cluster,
         double busyRanks = 0)
      : plan(plan), cluster(cluster) {
    int64_t world = plan::WorldSize(plan);
    int64_t perNode = std::max<int64_t>(cluster.devices_per_node(), 1);
    ranksPerNode = std::min(world, perNode);
    double sharing = busyRanks > 0 ? busyRanks : double(ranksPerNode);
    // Processor sharing, when the calibrations know their node's cores:
    // kernels at the rates of the most ranks that had cores to themselves,
    // slowed by how many more threads compute at once than there are
    // cores; links and the time outside kernels from the calibration of
    // the plan's own ranks per node.
    for (const spec::Calibration &c : cluster.calibrations())
      if (c.cores() > 0 &&
          c.ranks_per_node() * std::max<int64_t>(c.threads_per_rank(), 1) <=
              c.cores() &&
          (!rates || c.ranks_per_node() > rates->ranks_per_node()))
        rates = &c;
    processorSharing = rates != nullptr;
    if (processorSharing)
      sharing = double(ranksPerNode);
    // Otherwise the calibration for as many ranks computing at once (else
    // the nearest, by ratio).
    for (const spec::Calibration &c : cluster.calibrations())
      if (!calibration ||
          std::abs(std::log(double(c.ranks_per_node()) / sharing)) <
              std::abs(std::log(double(calibration->ranks_per_node()) /
                                sharing)))
        calibration = &c;
    if (processorSharing) {
      double threads =
          double(std::max<int64_t>(calibration->threads_per_rank(), 1));
      double busy = busyRanks > 0 ? busyRanks : double(ranksPerNode);
      slowdown = std::max(1.0, busy * threads / double(rates->cores()));
    } else {
      rates = calibration;
    }
  }

  /// Seconds of a compute kernel.
  double compute(const plan::Instruction &inst) const {
    plan::Work w = plan::InstructionWork(plan, inst);
    if (rates) {
      const spec::KernelRate *rate = nullptr, *fallback = nullptr;
      std::string name = plan::Kernel_Name(inst.kernel());
      for (const spec::KernelRate &r : rates->kernels()) {
        if (r.kernel() == name)
          rate = &r;
        if (r.kernel() == "default")
          fallback = &r;
      }
      if (!rate)
        rate = fallback;
      if (rate && rate->calls_size() >= 2) {
        // Measured calls near this one's work (a rate in FLOP/s counts
        // FLOPs).
        double work = rate->flops_per_s() > 0 ? w.flops : w.bytes;
        return slowdown * calibration::interpolateCall(*rate, work);
      }
      if (rate) {
        double t = 0;
        if (rate->flops_per_s() > 0)
          t = std::max(t, w.flops / rate->flops_per_s());
        if (rate->bytes_per_s() > 0)
          t = std::max(t, w.bytes / rate->bytes_per_s());
        return slowdown * (rate->overhead_s() + t);
      }
    }
    bool low = false;
    for (int32_t id : inst.inputs())
      low = low || plan.buffers(id).dtype() == plan::BF16 ||
            plan.buffers(id).dtype() == plan::F16;
    double peak = low ? cluster.peak_flops_bf16() : cluster.peak_flops_fp32();
    double t = 0;
    if (isMatmul(inst.kernel()) && peak > 0)
      t = w.flops / (peak * efficiency(cluster.matmul_efficiency(), 0.6));
    if (cluster.memory_bandwidth() > 0)
      t = std::max(t, w.bytes / (cluster.memory_bandwidth() *
                                 efficiency(cluster.vector_efficiency(), 0.7)));
    return cluster.kernel_overhead_s() + t;
  }

  /// Seconds of a communication instruction run by the rank at `coords`.
  double communicate(const plan::Instruction &inst,
                     const std::vector<int64_t> &coords) const {
    plan::Work w = plan::InstructionWork(plan, inst);
    std::vector<std::string> axes(inst.group().begin(), inst.group().end());
    if (inst.kernel() == plan::SEND || inst.kernel() == plan::RECV)
      axes = {inst.rank_axis()};
    const spec::LinkClass &link = linkOf(axes, coords);
    double bw = link.bandwidth() > 0 ? link.bandwidth() : 1e30;
    double n = double(std::max<int64_t>(w.groupSize, 1));
    // A collective's wait for its group inside a step (calibrated): for
    // each peer, since ranks that share cores reach it one after another.
    double wait =
        calibration ? calibration->collective_wait_s() * (n - 1) : 0.0;
    switch (inst.kernel()) {
    case plan::SEND:
    case plan::RECV:
      return link.latency() + w.messageBytes / bw;
    case plan::ALL_REDUCE:
      if (n <= 1)
        return 0;
      return allReduce(link, n, w.messageBytes) + wait;
    case plan::GRAD_NORM:
      if (n <= 1)
        return 0;
      return allReduce(link, n, w.messageBytes);
    case plan::ALL_GATHER:
      if (n <= 1)
        return 0;
      return (n - 1) * w.messageBytes / bw + (n - 1) * link.latency() + wait;
    case plan::REDUCE_SCATTER:
      if (n <= 1)
        return 0;
      return (n - 1) / n * w.messageBytes / bw + (n - 1) * link.latency() +
             wait;
    default:
      return link.latency() + w.messageBytes / bw;
    }
  }

  /// An all-reduce of `bytes` over `n` ranks: a ring moves 2 (n-1)/n of
  /// them per rank in 2 (n-1) steps; a double binary tree (where the link
  /// allows it) reduces up and broadcasts down, each phase moving the
  /// message once, pipelined, in 2 ceil(log2 n) steps. The cheaper is taken,
  /// as NCCL's tuner does.
  static double allReduce(const spec::LinkClass &link, double n,
                          double bytes) {
    double bw = link.bandwidth() > 0 ? link.bandwidth() : 1e30;
    double ring = 2 * (n - 1) / n * bytes / bw + 2 * (n - 1) * link.latency();
    if (!link.tree_all_reduce())
      return ring;
    double depth = std::ceil(std::log2(n));
    double tree = 2 * bytes / bw + 2 * depth * link.latency();
    return std::min(ring, tree);
  }

  int64_t ranksPerNode = 1;

  /// Whether ranks share the node's cores by processor sharing (the
  /// calibrations know the cores), and how many ranks the cores run at
  /// full speed at once.
  bool sharesCores() const { return processorSharing; }
  double capacity() const {
    return double(rates->cores()) /
           double(std::max<int64_t>(calibration->threads_per_rank(), 1));
  }
  /// How much of a core a waiting rank takes, as a share of a computing
  /// rank's (calibrated; 0: none).
  double waitingShare() const {
    return calibration ? std::clamp(calibration->waiting_core_share(), 0.0, 1.0)
                       : 0.0;
  }

  /// The ranks of a collective's group (1: none to wait for).
  int64_t groupSize(const plan::Instruction &inst) const {
    int64_t ranks = 1;
    for (const std::string &axis : inst.group())
      ranks *= plan::AxisSize(plan.mesh(), axis);
    return ranks;
  }

  /// What a collective waits per second of compute its group ran since it
  /// last synchronised (calibrated; 0: none).
  double gapShare() const {
    return calibration ? std::max(0.0, calibration->collective_gap_share())
                       : 0.0;
  }

  /// Seconds per step outside the plan's kernels (calibrated), or 0.
  double stepOverhead() const {
    return calibration ? calibration->step_overhead_s() : 0.0;
  }

private:
  static double efficiency(double given, double fallback) {
    return given > 0 ? given : fallback;
  }

  /// The link class of a group along `axes` of the rank at `coords`: within
  /// a node when the group's first and last ranks are on one node.
  const spec::LinkClass &linkOf(const std::vector<std::string> &axes,
                                const std::vector<int64_t> &coords) const {
    const plan::Mesh &mesh = plan.mesh();
    int64_t rank = 0, span = 0, stride = 1;
    std::vector<int64_t> strides(mesh.sizes_size());
    for (int a = mesh.sizes_size() - 1; a >= 0; --a) {
      strides[a] = stride;
      stride *= mesh.sizes(a);
    }
    for (int a = 0; a < mesh.axes_size(); ++a) {
      bool in = std::find(axes.begin(), axes.end(), mesh.axes(a)) != axes.end();
      if (in)
        span += (mesh.sizes(a) - 1) * strides[a];
      else
        rank += coords[a] * strides[a];
    }
    int64_t perNode = std::max<int64_t>(cluster.devices_per_node(), 1);
    bool intra = rank / perNode == (rank + span) / perNode;
    if (intra && calibration && calibration->has_intra_node())
      return calibration->intra_node();
    return intra ? cluster.intra_node() : cluster.inter_node();
  }

  const plan::Plan &plan;
  const spec::Cluster &cluster;
  const spec::Calibration *calibration = nullptr;
  /// The calibration whose kernel rates price compute, and the factor
  /// processor sharing slows them by.
  const spec::Calibration *rates = nullptr;
  bool processorSharing = false;
  double slowdown = 1;
};

/// One function's run on one rank.
struct FunctionTime {
  double total = 0, compute = 0, hidden = 0;
  /// Of `compute`: the kernels that recompute a forward value.
  double recompute = 0;
  std::map<std::string, double> communication;
  /// Of the transfers between stages (SEND/RECV): the largest, priced
  /// apart (the schedule's simulation places them).
  double transfer = 0;
  /// The all-reduce, all-gather and reduce-scatter calls and their seconds,
  /// and their gaps (SyncClock::gap).
  double collectivePeers = 0, collectiveSeconds = 0, gaps = 0;
  /// Seconds by kernel kind (indexed by plan::Kernel), SEND and RECV left
  /// out.
  std::array<double, plan::Kernel_ARRAYSIZE> kernels{};
};

/// Adds `times` x the seconds of `from` (by plan::Kernel) to `into` (by
/// name).
void addKernels(std::map<std::string, double> &into,
                const std::array<double, plan::Kernel_ARRAYSIZE> &from,
                double times) {
  for (int k = 0; k < plan::Kernel_ARRAYSIZE; ++k)
    if (from[k] != 0)
      into[plan::Kernel_Name(plan::Kernel(k))] += times * from[k];
}

bool isCollective(plan::Kernel k) {
  return k == plan::ALL_REDUCE || k == plan::ALL_GATHER ||
         k == plan::REDUCE_SCATTER;
}

/// plan-lower's mark on a kernel that recomputes a forward value
/// (model-recompute's clones).
constexpr llvm::StringLiteral kRecomputedSuffix = " (recomputed)";

std::string axesLabel(const plan::Instruction &inst) {
  if (inst.kernel() == plan::SEND || inst.kernel() == plan::RECV)
    return inst.rank_axis();
  return llvm::join(inst.group().begin(), inst.group().end(), ",");
}

/// A rank's compute since each of its groups last synchronised: the
/// step's compute clock, and the clock at each collective's call by its
/// axes. A collective over some axes synchronises the groups over those
/// axes and over any of their subsets.
struct SyncClock {
  double clock = 0;
  std::vector<std::pair<std::vector<std::string>, double>> syncs;

  static std::vector<std::string> axesOf(const plan::Instruction &inst) {
    std::vector<std::string> axes(inst.group().begin(), inst.group().end());
    std::sort(axes.begin(), axes.end());
    return axes;
  }
  /// The compute since the group over `axes` last synchronised (the clock's
  /// start counts as a synchronisation: the step's).
  double gap(const std::vector<std::string> &axes) const {
    double last = 0;
    for (const auto &[over, at] : syncs)
      if (std::includes(over.begin(), over.end(), axes.begin(), axes.end()))
        last = std::max(last, at);
    return clock - last;
  }
  void synced(std::vector<std::string> axes) {
    for (auto &[over, at] : syncs)
      if (over == axes) {
        at = clock;
        return;
      }
    syncs.push_back({std::move(axes), clock});
  }
  /// After a function's single pricing stands for `times` runs: the runs
  /// before the last one add their compute, and what the priced run
  /// synchronised happened in the last.
  void repeat(double from, double times) {
    double delta = (clock - from) * (times - 1);
    if (delta <= 0)
      return;
    for (auto &[over, at] : syncs)
      if (at >= from)
        at += delta;
    clock += delta;
  }
};

/// `sync` carries the rank's compute since its groups synchronised into
/// and out of the function (null: the function starts synchronised).
FunctionTime priceFunction(const Pricer &pricer, const plan::Function &fn,
                           const std::vector<int64_t> &coords,
                           SyncClock *sync = nullptr) {
  SyncClock local;
  SyncClock &clock = sync ? *sync : local;
  FunctionTime t;
  double now = 0, stream = 0;
  // Per buffer of a collective in flight: when it ends, and its axes.
  std::map<int32_t, std::pair<double, std::string>> pending;
  auto expose = [&](double until, const std::string &axes) {
    if (until > now) {
      t.communication[axes] += until - now;
      t.hidden -= until - now;
      now = until;
    }
  };
  for (const plan::Instruction &inst : fn.body()) {
    plan::Kernel k = inst.kernel();
    if (k == plan::WAIT) {
      // The compute stream waits for the collectives on these buffers.
      double until = now;
      std::string axes;
      for (int32_t id : inst.inputs())
        if (auto it = pending.find(id); it != pending.end()) {
          if (it->second.first > until) {
            until = it->second.first;
            axes = it->second.second;
          }
          pending.erase(it);
        }
      expose(until, axes);
      continue;
    }
    if (k == plan::SEND || k == plan::RECV) {
      // Placed by the schedule's simulation (Costs::transfer).
      t.transfer = std::max(t.transfer, pricer.communicate(inst, coords));
      continue;
    }
    bool comm = plan::IsCommunication(k) ||
                (k == plan::GRAD_NORM && inst.group_size() > 0);
    if (!comm) {
      double d = pricer.compute(inst);
      now += d;
      clock.clock += d;
      t.compute += d;
      t.kernels[k] += d;
      if (llvm::StringRef(inst.provenance()).ends_with(kRecomputedSuffix))
        t.recompute += d;
      continue;
    }
    if (k == plan::GRAD_NORM) { // its sums, then the all-reduce
      double c = pricer.compute(inst);
      now += c;
      clock.clock += c;
      t.compute += c;
      t.kernels[k] += c;
    }
    double d = pricer.communicate(inst, coords);
    bool grouped = pricer.groupSize(inst) > 1;
    if (isCollective(k) && grouped) {
      // Its group drifted apart over the compute since it last met.
      double gap = clock.gap(SyncClock::axesOf(inst));
      d += pricer.gapShare() * gap;
      t.gaps += gap;
      t.collectivePeers += double(pricer.groupSize(inst) - 1);
      t.collectiveSeconds += d;
    }
    if (grouped && (isCollective(k) || k == plan::GRAD_NORM))
      clock.synced(SyncClock::axesOf(inst));
    t.kernels[k] += d;
    auto async = inst.int_attrs().find("async");
    if (async != inst.int_attrs().end() && async->second != 0) {
      // On the second stream, after what it already carries.
      stream = std::max(now, stream) + d;
      for (int32_t id : inst.outputs())
        pending[id] = {stream, axesLabel(inst)};
      for (int32_t id : inst.inputs())
        pending[id] = {stream, axesLabel(inst)};
      t.hidden += d;
      continue;
    }
    now += d;
    t.communication[axesLabel(inst)] += d;
  }
  // What is still in flight ends the function.
  for (auto &[id, end] : pending)
    expose(end.first, end.second);
  t.total = now;
  return t;
}

const plan::Function *findFunction(const plan::Plan &plan,
                                   const std::string &name) {
  for (const plan::Function &fn : plan.functions())
    if (fn.name() == name)
      return &fn;
  return nullptr;
}

} // namespace

std::vector<std::string> braid::clusterPresets() {
  return {"dgx-h100", "dgx-a100"};
}

llvm::Expected<spec::Cluster> braid::loadCluster(llvm::StringRef nameOrPath,
                                                 int64_t nodes) {
  spec::Cluster c;
  if (nameOrPath == "dgx-h100") {
    c = dgxH100();
  } else if (nameOrPath == "dgx-a100") {
    c = dgxA100();
  } else {
    auto buffer = llvm::MemoryBuffer::getFile(nameOrPath);
    if (!buffer)
      return error("--cluster " + nameOrPath +
                   " is neither a preset (" +
                   llvm::join(clusterPresets(), ", ") +
                   ") nor a readable cluster file: " +
                   buffer.getError().message());
    if (!google::protobuf::TextFormat::ParseFromString(
            (*buffer)->getBuffer().str(), &c))
      return error(nameOrPath +
                   ": not a cluster description (text format of "
                   "braid.spec.Cluster)");
  }
  if (nodes > 0)
    c.set_nodes(nodes);
  if (c.nodes() < 1 || c.devices_per_node() < 1)
    return error("cluster " + c.name() + ": nodes = " + llvm::Twine(c.nodes()) +
                 " and devices_per_node = " +
                 llvm::Twine(c.devices_per_node()) + " must be >= 1");
  if (c.memory_bytes() < 1)
    return error("cluster " + c.name() + ": memory_bytes must be >= 1");
  return c;
}

namespace {

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

llvm::json::Object braid::predictionReport(const StepPrediction &prediction,
                                           const spec::Cluster &cluster,
                                           const plan::Plan &plan,
                                           double trainingFlopsPerStep) {
  const plan::Training &t = plan.training();
  int64_t world = plan::WorldSize(plan);
  double tokens = double(t.micro_batch_size()) * double(t.seq_length()) *
                  double(std::max<int64_t>(t.micro_batches(), 1)) *
                  double(plan::AxisSize(plan.mesh(), "dp"));
  double step = prediction.stepTime;
  llvm::json::Object comm;
  double exposed = 0;
  for (const auto &[axes, seconds] : prediction.communication) {
    comm[axes.empty() ? "local" : axes] = seconds;
    exposed += seconds;
  }
  llvm::json::Array stages;
  for (double busy : prediction.stageBusy)
    stages.push_back(busy);
  llvm::json::Object kernels;
  for (const auto &[kernel, seconds] : prediction.kernels)
    kernels[kernel] = seconds;
  bool low = false;
  for (const plan::Buffer &b : plan.buffers())
    low = low || (b.role() == plan::PARAMETER &&
                  (b.dtype() == plan::BF16 || b.dtype() == plan::F16));
  double peak = low ? cluster.peak_flops_bf16() : cluster.peak_flops_fp32();
  double perDevice = step > 0 ? trainingFlopsPerStep / step / world : 0;
  return llvm::json::Object{
      {"cluster", cluster.name()},
      {"step_time_s", step},
      {"tokens_per_s", step > 0 ? tokens / step : 0.0},
      {"compute_s", prediction.compute},
      {"recompute_s", prediction.recompute},
      {"exposed_communication_s", std::move(comm)},
      {"exposed_communication_total_s", exposed},
      {"hidden_communication_s", prediction.hiddenCommunication},
      {"bubble_s", prediction.bubble},
      {"step_overhead_s", prediction.overhead},
      {"stage_busy_s", std::move(stages)},
      {"kernel_s", std::move(kernels)},
      {"model_tflops_per_device", perDevice / 1e12},
      {"mfu", peak > 0 ? perDevice / peak : 0.0},
  };
}
