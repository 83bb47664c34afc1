//===- CostModelPricer.cpp - A kernel's and a function's seconds ----------===//
//
// Pricer: a compute kernel's seconds (calibrated rates, else the roofline)
// and a communication's (ring or tree over the link class its group spans);
// priceFunction: one function's run on one rank, asynchronous collectives
// on a second stream.
//
//===----------------------------------------------------------------------===//

#include "compiler/CostModelInternal.h"

#include "compiler/CalibrationFit.h"
#include "compiler/CostModel.h"
#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Work.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace braid::costmodel {

namespace {

/// The FLOPs of one of the matrix products of `inst` (a kernel with
/// plan::HasMatrixProducts), `w` its work: what sets the product's
/// efficiency on the roofline. A kernel's products are all of one size:
/// a linear's one product (its bias, 2 FLOPs per element of y, left out);
/// attention's q·kᵀ and p·v and, in the backward, the recomputed q·kᵀ,
/// dout·vᵀ and the products of dq, dk and dv (and the forward's again
/// without its log-sum-exp), each of 2·d FLOPs per score, taken over all
/// (batch, head) problems at once (a batched product: the GPU runs the
/// problems together, so their sum is the size it sees).
double productFlops(const plan::Plan &plan, const plan::Instruction &inst,
                    const plan::Work &w) {
  switch (inst.kernel()) {
  case plan::LINEAR:
    if (inst.inputs_size() == 3)
      return w.flops -
             2 * double(plan::NumElements(plan.buffers(inst.outputs(0))));
    return w.flops;
  case plan::ATTENTION:
  case plan::ATTENTION_CACHED:
    return w.flops / 2; // 4·d per score: two products
  case plan::ATTENTION_GRAD: {
    // Half the forward's FLOPs on the same q, k and v (its first inputs).
    plan::Instruction forward = inst;
    forward.set_kernel(plan::ATTENTION);
    if (forward.inputs_size() > 3)
      forward.mutable_inputs()->Truncate(3);
    return plan::InstructionWork(plan, forward).flops / 2;
  }
  default:
    return w.flops;
  }
}

/// The points [first, last) (not empty, ascending flops) at `flops`: linear
/// in log(flops) between the two points around it, the first or last
/// point's beyond them.
template <typename It> double pointsAt(It first, It last, double flops) {
  if (flops <= first->flops())
    return first->efficiency();
  It back = std::prev(last);
  if (flops >= back->flops())
    return back->efficiency();
  It b = std::next(first);
  while (b->flops() < flops)
    ++b;
  // a->flops() < flops <= b->flops().
  It a = std::prev(b);
  double share = std::log(flops / a->flops()) / std::log(b->flops() / a->flops());
  return a->efficiency() + share * (b->efficiency() - a->efficiency());
}

/// `curve` (not empty) at `flops`, as pointsAt.
double
curveAt(const google::protobuf::RepeatedPtrField<spec::MatmulEfficiency> &curve,
        double flops) {
  return pointsAt(curve.begin(), curve.end(), flops);
}

} // namespace

Pricer::Pricer(const plan::Plan &plan, const spec::Cluster &cluster,
               double busyRanks)
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
            std::abs(std::log(double(calibration->ranks_per_node()) / sharing)))
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

double Pricer::compute(const plan::Instruction &inst) const {
  plan::Work w = plan::InstructionWork(plan, inst);
  if (rates) {
    const spec::KernelRate *rate =
        calibration::findRate(*rates, plan::Kernel_Name(inst.kernel()));
    if (!rate)
      rate = calibration::findRate(*rates, calibration::kDefaultRate);
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
  // Fused bf16/f16 attention at its measured efficiency by size (a GPU
  // calibration's attention curves), where the cluster has one.
  const bool fused = low && w.headDim > 0 &&
                     (inst.kernel() == plan::ATTENTION ||
                      inst.kernel() == plan::ATTENTION_GRAD);
  const double attention =
      fused ? attentionEfficiency(cluster, w.headDim, w.flops,
                                  inst.kernel() == plan::ATTENTION_GRAD)
            : 0.0;
  // Otherwise each product at the efficiency of its size (the cluster's
  // matmul curve for its precision); a kernel's products share one size,
  // and its other FLOPs (a bias) are priced with them.
  if (attention > 0 && peak > 0)
    t = w.flops / (peak * attention);
  else if (plan::HasMatrixProducts(inst.kernel()) && peak > 0)
    t = w.flops /
        (peak * matmulEfficiency(cluster, productFlops(plan, inst, w), low));
  if (cluster.memory_bandwidth() > 0)
    t = std::max(t, w.bytes / (cluster.memory_bandwidth() *
                               efficiency(cluster.vector_efficiency(), 0.7)));
  return cluster.kernel_overhead_s() + t;
}

double Pricer::communicate(const plan::Instruction &inst,
                           const std::vector<int64_t> &coords) const {
  plan::Work w = plan::InstructionWork(plan, inst);
  std::vector<std::string> axes(inst.group().begin(), inst.group().end());
  if (plan::IsPointToPoint(inst.kernel()))
    axes = {inst.rank_axis()};
  const spec::LinkClass &link = linkOf(axes, coords);
  double bw = link.bandwidth() > 0 ? link.bandwidth() : 1e30;
  double n = double(std::max<int64_t>(w.groupSize, 1));
  // A collective's wait for its group inside a step (calibrated): for
  // each peer, since ranks that share cores reach it one after another.
  double wait = calibration ? calibration->collective_wait_s() * (n - 1) : 0.0;
  switch (w.pattern) {
  case plan::CommPattern::kAllReduce:
    if (n <= 1)
      return 0;
    // GRAD_NORM's one-number sum waits only for what its own kernel
    // computes: the calibrated wait is the collectives'.
    return allReduce(link, n, w.messageBytes) +
           (plan::IsCommunication(inst.kernel()) ? wait : 0.0);
  case plan::CommPattern::kAllGather:
    if (n <= 1)
      return 0;
    return (n - 1) * w.messageBytes / bw + (n - 1) * link.latency() + wait;
  case plan::CommPattern::kReduceScatter:
    if (n <= 1)
      return 0;
    return (n - 1) / n * w.messageBytes / bw + (n - 1) * link.latency() + wait;
  case plan::CommPattern::kTransfer:
  case plan::CommPattern::kNone:
    break;
  }
  return link.latency() + w.messageBytes / bw;
}

double Pricer::allReduce(const spec::LinkClass &link, double n, double bytes) {
  double bw = link.bandwidth() > 0 ? link.bandwidth() : 1e30;
  double ring = 2 * (n - 1) / n * bytes / bw + 2 * (n - 1) * link.latency();
  if (!link.tree_all_reduce())
    return ring;
  double depth = std::ceil(std::log2(n));
  double tree = 2 * bytes / bw + 2 * depth * link.latency();
  return std::min(ring, tree);
}

int64_t Pricer::groupSize(const plan::Instruction &inst) const {
  int64_t ranks = 1;
  for (const std::string &axis : inst.group())
    ranks *= plan::AxisSize(plan.mesh(), axis);
  return ranks;
}

const spec::LinkClass &
Pricer::linkOf(const std::vector<std::string> &axes,
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

namespace {

/// plan-lower's mark on a kernel that recomputes a forward value
/// (model-recompute's clones).
constexpr llvm::StringLiteral kRecomputedSuffix = " (recomputed)";

std::string axesLabel(const plan::Instruction &inst) {
  if (plan::IsPointToPoint(inst.kernel()))
    return inst.rank_axis();
  return llvm::join(inst.group().begin(), inst.group().end(), ",");
}

} // namespace

FunctionTime priceFunction(const Pricer &pricer, const plan::Function &fn,
                           const std::vector<int64_t> &coords,
                           SyncClock *sync) {
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
    const plan::KernelInfo &info = plan::KernelInfoOf(k);
    if (info.has(plan::kFinishes)) {
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
    if (info.has(plan::kPointToPoint)) {
      // Placed by the schedule's simulation (Costs::transfer).
      t.transfer = std::max(t.transfer, pricer.communicate(inst, coords));
      continue;
    }
    bool comm = plan::IsCommunicationTime(inst);
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
    if (!info.has(plan::kCommunication)) { // its sums, then the all-reduce
      double c = pricer.compute(inst);
      now += c;
      clock.clock += c;
      t.compute += c;
      t.kernels[k] += c;
    }
    double d = pricer.communicate(inst, coords);
    bool grouped = pricer.groupSize(inst) > 1;
    if (plan::IsCollective(k) && grouped) {
      // Its group drifted apart over the compute since it last met.
      double gap = clock.gap(SyncClock::axesOf(inst));
      d += pricer.gapShare() * gap;
      t.gaps += gap;
      t.collectivePeers += double(pricer.groupSize(inst) - 1);
      t.collectiveSeconds += d;
    }
    if (grouped)
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

} // namespace braid::costmodel

double braid::matmulEfficiency(const spec::Cluster &cluster, double flops,
                               bool lowPrecision) {
  double constant =
      cluster.matmul_efficiency() > 0 ? cluster.matmul_efficiency() : 0.6;
  if (lowPrecision)
    return cluster.matmul_curve().empty()
               ? constant
               : costmodel::curveAt(cluster.matmul_curve(), flops);
  if (!cluster.matmul_curve_fp32().empty())
    return costmodel::curveAt(cluster.matmul_curve_fp32(), flops);
  if (cluster.matmul_curve().empty() || !(cluster.peak_flops_fp32() > 0))
    return constant;
  // No faster than the same product in bf16 (the bf16 curve's FLOP/s over
  // the fp32 peak): a small product's time is the GPU's latency whatever
  // its precision, which a constant fp32 efficiency would leave out.
  double bf16 = costmodel::curveAt(cluster.matmul_curve(), flops) *
                cluster.peak_flops_bf16();
  return std::min(constant, bf16 / cluster.peak_flops_fp32());
}

double braid::attentionEfficiency(const spec::Cluster &cluster,
                                  int64_t headDim, double flops,
                                  bool backward) {
  const auto &curve =
      backward ? cluster.attention_grad_curve() : cluster.attention_curve();
  if (curve.empty() || headDim < 1)
    return 0.0;
  // The nearest head dimension by ratio (points ascend by head_dim, so the
  // smaller of two as near comes first and stays).
  int64_t nearest = curve[0].head_dim();
  for (const spec::AttentionEfficiency &p : curve)
    if (std::abs(std::log(double(p.head_dim()) / double(headDim))) <
        std::abs(std::log(double(nearest) / double(headDim))))
      nearest = p.head_dim();
  auto first = std::find_if(curve.begin(), curve.end(), [&](const auto &p) {
    return p.head_dim() == nearest;
  });
  auto last = std::find_if(first, curve.end(), [&](const auto &p) {
    return p.head_dim() != nearest;
  });
  return costmodel::pointsAt(first, last, flops);
}
