//===- Search.cpp - The fastest layout that fits --------------------------===//

#include "compiler/Search.h"

#include "compiler/CalibrationFit.h"
#include "compiler/Compile.h"
#include "compiler/PlanExport.h"
#include "compiler/Report.h"
#include "frontends/ModelBuilder.h"
#include "frontends/ParallelConfig.h"
#include "frontends/TrainConfig.h"
#include "passes/model/Partition.h"
#include "runtime/common/Format.h"
#include "runtime/plan/KernelRegistry.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FormatVariadic.h"

#include "llvm/Support/Threading.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

using namespace braid;

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0)
      out.push_back(d);
  return out;
}

std::string layoutName(const spec::ParallelSpec &p) {
  std::string s = llvm::formatv("tp {0} x pp {1} x dp {2}", p.tp(), p.pp(),
                                p.dp());
  if (p.vpp() > 1)
    s += llvm::formatv(" x vpp {0}", p.vpp());
  if (p.sp())
    s += ", sp";
  s += llvm::formatv(", mb {0}", p.micro_batch_size());
  if (p.pp() > 1)
    s += ", " + p.schedule();
  if (p.stage_layers_size()) {
    s += ", stages ";
    for (int i = 0; i < p.stage_layers_size(); ++i)
      s += (i ? "+" : "") + std::to_string(p.stage_layers(i));
  }
  if (p.recompute() != "none")
    s += ", " + p.recompute();
  if (p.zero() > 0)
    s += llvm::formatv(", zero {0}", p.zero());
  return s;
}

/// Bytes per parameter that stay for the whole run: fp32 parameter,
/// gradient and the two AdamW moments, the ZeRO stage sharding them over dp
/// (docs/memory.md).
double persistentBytesPerParameter(int64_t zero, int64_t dp) {
  double d = double(dp);
  switch (zero) {
  case 1: return 8 + 8 / d;
  case 2: return 4 + 12 / d;
  case 3: return 16 / d;
  default: return 16;
  }
}

/// A rough step time, only to order the compiles: the step's model FLOPs
/// (plus what recompute adds) over the devices at the matrix-product rate
/// (the cost model's efficiency for a micro-batch's hidden x hidden / tp
/// product, the attention's output projection), stretched by the
/// schedule's bubble, plus tensor-parallel all-reduces of the activations
/// (4 per layer and micro-batch) and the gradients' data-parallel
/// all-reduce (half again with ZeRO-3's gathers).
double roughStepTime(const spec::ParallelSpec &p, const ModelConfig &model,
                     const spec::Cluster &cluster, int64_t world,
                     int64_t parameters, double flopsPerToken) {
  double tokens = double(p.global_batch_size()) * double(model.seqLength);
  double flops = flopsPerToken * tokens;
  if (p.recompute() == "full")
    flops *= 4.0 / 3.0;
  else if (p.recompute() == "selective")
    flops *= 1.03;
  bool low = model.dtype == spec::BF16 || model.dtype == spec::FP16;
  double hidden = double(model.hiddenSize);
  double product = 2.0 * double(p.micro_batch_size()) *
                   double(model.seqLength) * hidden * hidden /
                   double(std::max<int64_t>(p.tp(), 1));
  double rate = (low ? cluster.peak_flops_bf16() : cluster.peak_flops_fp32()) *
                matmulEfficiency(cluster, product, low);
  int64_t perNode = std::min<int64_t>(world, cluster.devices_per_node());
  for (const spec::Calibration &c : cluster.calibrations())
    if (c.ranks_per_node() == perNode)
      if (const spec::KernelRate *k = calibration::findRate(
              c, plan::KernelInfoOf(plan::LINEAR).name);
          k && k->flops_per_s() > 0)
        rate = k->flops_per_s();
  double compute = flops / double(world) / std::max(rate, 1.0);
  int64_t micro = p.global_batch_size() / p.dp() / p.micro_batch_size();
  double bubble = 0;
  if (p.pp() > 1) {
    double chunks = double(std::max<int64_t>(p.vpp(), 1));
    bubble = double(p.pp() - 1) / (double(micro) * chunks);
    if (p.schedule() == "zb-h1")
      bubble /= 3;
  }
  auto ring = [&](double bytes, int64_t n, bool intra) {
    const spec::LinkClass &link =
        intra ? cluster.intra_node() : cluster.inter_node();
    double bw = link.bandwidth() > 0 ? link.bandwidth() : 1e30;
    return n > 1 ? 2.0 * double(n - 1) / double(n) * bytes / bw +
                       2.0 * double(n - 1) * link.latency()
                 : 0.0;
  };
  double activation = double(p.micro_batch_size()) * double(model.seqLength) *
                      double(model.hiddenSize) * 4;
  double tpComm = 4.0 * double(model.numLayers) / double(p.pp()) *
                  double(micro) * ring(activation, p.tp(), true);
  bool dpIntra = p.tp() * p.pp() * p.dp() <= cluster.devices_per_node();
  double dpComm = ring(4.0 * double(parameters) / double(p.tp() * p.pp()),
                       p.dp(), dpIntra) *
                  (p.zero() == 3 ? 1.5 : 1.0);
  return compute * (1 + bubble) + tpComm + dpComm;
}

/// A rough count of the activations one layer keeps for one micro-batch,
/// only to order the compiles and to propose stage layers: Korthikanti et
/// al.'s s b h (16 e + 2) + a s^2 b (2 e + 1) bytes at e = 4 (fp32),
/// without the attention term with selective recompute and as e s b h with
/// full recompute, over tp with sp (over tp for the attention term anyway).
double roughLayerActivationBytes(const spec::ParallelSpec &p,
                                 const ModelConfig &model) {
  double e = 4, s = double(model.seqLength), b = double(p.micro_batch_size());
  double h = double(model.hiddenSize), a = double(model.numHeads);
  double t = double(p.tp());
  double linear = s * b * h * (16 * e + 2) / (p.sp() ? t : 1);
  double attention = a * s * s * b * (2 * e + 1) / t;
  if (p.recompute() == "selective")
    return linear;
  if (p.recompute() == "full")
    return e * s * b * h / (p.sp() ? t : 1);
  return linear + attention;
}

/// A rough count of the activations a rank keeps: its layers' for as many
/// micro-batches as a 1F1B stage keeps in flight (pp).
double roughActivationBytes(const spec::ParallelSpec &p,
                            const ModelConfig &model) {
  double layers = double(model.numLayers) / double(p.pp());
  int64_t micro = p.global_batch_size() / p.dp() / p.micro_batch_size();
  double inFlight = double(std::min<int64_t>(p.pp(), micro));
  return roughLayerActivationBytes(p, model) * layers * inFlight;
}

/// Layers per pipeline stage that balance the stages' memory rather than
/// their FLOPs (Megatron's and ModelLink's uneven stages, set by hand
/// there): a 1F1B stage s of pp keeps min(pp - s, micro-batches) micro-
/// batches in flight, so the first stages keep the most activations per
/// layer, the first also the embedding and the last the output layer and
/// the logits. Each stage's bytes are roughly affine in its layers; the
/// split of the layers into consecutive runs that minimises the largest
/// stage's bytes is found as the FLOP-balanced one is (Partition.h).
/// The compile that follows gives the exact arenas.
std::vector<int64_t> memoryBalancedStages(const spec::ParallelSpec &p,
                                          const ModelConfig &model,
                                          const ParameterCount &parameters) {
  int64_t pp = p.pp(), n = model.numLayers;
  double perParameter =
      persistentBytesPerParameter(p.zero(), p.dp()) / double(p.tp());
  double layerParameters =
      parameters.perLayer.empty() ? 0 : double(parameters.perLayer.front());
  int64_t micro = p.global_batch_size() / p.dp() / p.micro_batch_size();
  double activation = roughLayerActivationBytes(p, model);
  double embedding = double(parameters.embedding) * perParameter;
  double head = double(parameters.outsideLayers - parameters.embedding +
                       (model.tieEmbeddings ? parameters.embedding : 0)) *
                    perParameter +
                // the logits, f32, vocabulary-parallel (their gradient
                // takes their buffer: plan-lower's cross-entropy in place)
                4.0 * double(p.micro_batch_size()) *
                    double(model.seqLength) * double(model.paddedVocabSize) /
                    double(p.tp());
  auto bytes = [&](int64_t stage, int64_t layers) {
    double inFlight = double(std::min<int64_t>(pp - stage, micro));
    return (stage == 0 ? embedding : 0) + (stage == pp - 1 ? head : 0) +
           double(layers) * (layerParameters * perParameter +
                             inFlight * activation);
  };
  llvm::SmallVector<int64_t> layers = model::balanceStages(
      n, pp, [&](int64_t s, int64_t begin, int64_t end) {
        return bytes(s, end - begin);
      });
  return {layers.begin(), layers.end()};
}

} // namespace

llvm::Expected<std::vector<Candidate>>
braid::searchLayouts(const spec::JobSpec &job, const SearchOptions &options,
                     mlir::MLIRContext &context) {
  const spec::Cluster &cluster = options.cluster;
  int64_t world = cluster.nodes() * cluster.devices_per_node();
  llvm::Expected<ModelConfig> model = resolveModel(job);
  if (!model)
    return model.takeError();
  llvm::Expected<ParallelConfig> given = resolveParallel(job, *model);
  if (!given)
    return given.takeError();
  llvm::Expected<TrainConfig> train = resolveTrain(job);
  if (!train)
    return train.takeError();
  // The global batch is the job's; a job without one trains one sequence
  // per device and step.
  int64_t globalBatch = job.parallel().has_global_batch_size()
                            ? given->globalBatchSize
                            : world;
  ParameterCount parameterCount;
  double flopsPerToken = 0;
  {
    mlir::OwningOpRef<mlir::ModuleOp> forward =
        buildForwardModule(context, *model);
    parameterCount = countParameters(*forward);
    flopsPerToken = countFlops(*forward).trainingPerToken();
  }
  int64_t parameters = parameterCount.total;

  // The layouts: structures (tp, pp, dp, vpp, micro-batch, schedule, sp),
  // each with its memory ladder.
  std::vector<Candidate> all;
  size_t structures = 0;
  for (int64_t tp : divisors(world)) {
    if (tp > cluster.devices_per_node() || model->numHeads % tp != 0)
      continue;
    for (int64_t pp : divisors(world / tp)) {
      // Stages of whole layers: the pipeline partition balances them by
      // their FLOPs (the embedding's and the head's included), so pp need
      // not divide the layers; virtual stages need equal chunks.
      if (pp > model->numLayers)
        continue;
      int64_t dp = world / tp / pp;
      if (globalBatch % dp != 0)
        continue;
      int64_t perRank = globalBatch / dp;
      // Virtual stages: every number of chunks per stage that divides its
      // layers (Megatron's layers per virtual stage), down to two layers a
      // chunk.
      std::vector<int64_t> virtualStages = {1};
      if (pp > 1 && model->numLayers % pp == 0)
        for (int64_t vpp : divisors(model->numLayers / pp))
          if (vpp > 1 && model->numLayers / pp / vpp >= 2)
            virtualStages.push_back(vpp);
      for (int64_t vpp : virtualStages) {
        std::vector<std::string> schedules = {"1f1b"};
        if (pp > 1)
          schedules = vpp > 1 ? std::vector<std::string>{"interleaved"}
                              : std::vector<std::string>{"1f1b", "zb-h1"};
        for (int64_t mb : divisors(perRank)) {
          int64_t micro = perRank / mb;
          if (vpp > 1 && micro % pp != 0)
            continue;
          for (const std::string &schedule : schedules)
            for (bool sp : {false, true}) {
              if (sp && tp == 1)
                continue;
              // The memory ladder: recompute and ZeRO stages from the
              // cheapest in time to the most frugal; the search stops at
              // the first rung whose plan fits.
              std::vector<std::pair<const char *, int64_t>> ladder =
                  dp > 1 ? std::vector<std::pair<const char *, int64_t>>{
                               {"none", 0},      {"none", 1},
                               {"selective", 1}, {"none", 2},
                               {"selective", 2}, {"full", 2},
                               {"selective", 3}, {"full", 3}}
                         : std::vector<std::pair<const char *, int64_t>>{
                               {"none", 0}, {"selective", 0}, {"full", 0}};
              int64_t rung = 0;
              for (auto [recompute, zero] : ladder) {
                  Candidate c;
                  c.structure = int64_t(structures);
                  c.rung = rung++;
                  spec::ParallelSpec &p = c.parallel;
                  p.set_tp(tp);
                  p.set_pp(pp);
                  p.set_dp(dp);
                  p.set_vpp(vpp);
                  p.set_sp(sp);
                  p.set_schedule(schedule);
                  p.set_micro_batch_size(mb);
                  p.set_global_batch_size(globalBatch);
                  p.set_recompute(recompute);
                  p.set_zero(zero);
                  c.layout = layoutName(p);
                  all.push_back(std::move(c));
              }
              ++structures;
            }
        }
      }
    }
  }
  if (all.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("no layout of {0} devices suits the model and the "
                      "global batch of {1}: tp must divide the {2} heads and "
                      "fit a node of {3}, pp the {4} layers, dp the batch",
                      world, globalBatch, model->numHeads,
                      cluster.devices_per_node(), model->numLayers)
            .str());

  // The bound: parameters, gradients and optimizer state alone.
  std::vector<double> bound(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const spec::ParallelSpec &p = all[i].parallel;
    bound[i] = persistentBytesPerParameter(p.zero(), p.dp()) *
               double(parameters) / double(p.tp() * p.pp());
    // (Shown capped at 9e18 B, which an int64_t holds: past every device.)
    if (bound[i] > double(cluster.memory_bytes()))
      all[i].rejected =
          "out of memory: parameters, gradients and optimizer state alone "
          "need at least " +
          common::FormatBytes(int64_t(std::min(bound[i], 9e18))) +
          " per device";
  }
  // The order of compiles: a rough estimate of each rung's step time, so
  // that a cap on compiles spends them on the likeliest winners.
  std::vector<double> estimate(all.size());
  for (size_t i = 0; i < all.size(); ++i)
    estimate[i] = roughStepTime(all[i].parallel, *model, cluster, world,
                                parameters, flopsPerToken);
  std::vector<size_t> order;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].rejected.empty())
      order.push_back(i);
  // Rungs whose rough memory exceeds a device go last (they are still
  // compiled if the cap allows: the estimate is no bound).
  std::vector<bool> likelyFits(all.size());
  for (size_t i = 0; i < all.size(); ++i)
    likelyFits[i] = bound[i] + roughActivationBytes(all[i].parallel, *model) <=
                    double(cluster.memory_bytes());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (likelyFits[a] != likelyFits[b])
      return bool(likelyFits[a]);
    return estimate[a] < estimate[b];
  });

  // Compiles the layout `p` with `layers` transformer layers (the model's
  // own when 0): the plan's largest arena, its predicted step, and its
  // report's throughput for the model's FLOPs per step. A compile error is
  // the candidate's reason (llvm::Error's text).
  struct Evaluation {
    int64_t peak = 0;
    bool recomputesNothing = false;
    StepPrediction prediction;
    plan::Plan plan;
  };
  auto evaluate = [&](mlir::MLIRContext &context, const spec::ParallelSpec &p,
                      int64_t layers) -> llvm::Expected<Evaluation> {
    spec::JobSpec candidateJob = job;
    *candidateJob.mutable_parallel() = p;
    // Diagnostics of a candidate that does not compile become its reason.
    std::string diagnostics;
    mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
      if (diagnostics.empty())
        diagnostics = d.str();
      return mlir::success();
    });
    llvm::Expected<ModelConfig> m = resolveModel(candidateJob);
    if (!m)
      return m.takeError();
    if (layers > 0)
      m->numLayers = layers;
    llvm::Expected<ParallelConfig> parallel = resolveParallel(candidateJob, *m);
    if (!parallel)
      return parallel.takeError();
    parallel->zeroBucketBytes = given->zeroBucketBytes;
    parallel->gradBucketBytes = given->gradBucketBytes;
    parallel->overlapParamGather = given->overlapParamGather;
    mlir::OwningOpRef<mlir::ModuleOp> module = buildForwardModule(context, *m);
    CompileOptions compile;
    compile.compileTo = Phase::Plan;
    compile.train = *train;
    compile.parallel = *parallel;
    // Unverified between passes: the layout picked is compiled again, and
    // verified after every pass, by the caller (braidc); the search only
    // reads each candidate's plan, which exportPlan validates.
    compile.verifyEachPass = false;
    if (llvm::Error e = runPhases(*module, compile))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::toString(std::move(e)) +
              (diagnostics.empty() ? "" : ": " + diagnostics));
    Evaluation out;
    // Recompute auto that fits without recomputing anything.
    if (auto budget = (*module)->getAttrOfType<mlir::DictionaryAttr>(
            "model.recompute_budget")) {
      auto chosen = budget.getAs<mlir::IntegerAttr>("chosen_bytes");
      auto none = budget.getAs<mlir::IntegerAttr>("none_bytes");
      out.recomputesNothing =
          chosen && none && chosen.getInt() == none.getInt();
    }
    llvm::Expected<plan::Plan> plan = exportPlan(*module);
    if (!plan)
      return plan.takeError();
    plan->mutable_training()->MergeFrom(
        trainingSettings(*m, *train, *parallel, candidateJob.data()));
    out.peak = plan->arena_bytes();
    for (const plan::Stage &s : plan->pipeline().stages())
      out.peak = std::max(out.peak, s.arena_bytes());
    llvm::Expected<StepPrediction> prediction = predictStep(*plan, cluster);
    if (!prediction)
      return prediction.takeError();
    out.prediction = std::move(*prediction);
    out.plan = std::move(*plan);
    return out;
  };
  // Fills `c` from an evaluation (exact or extrapolated); true when it fits.
  auto record = [&](Candidate &c, const Evaluation &e) -> bool {
    c.peakBytes = e.peak;
    c.prediction = e.prediction;
    const spec::ParallelSpec &p = c.parallel;
    double perStep = flopsPerToken * double(model->seqLength) *
                     double(p.global_batch_size());
    llvm::json::Object report =
        predictionReport(c.prediction, cluster, e.plan, perStep);
    c.tokensPerS = *report.getNumber("tokens_per_s");
    c.tflopsPerDevice = *report.getNumber("model_tflops_per_device");
    c.mfu = *report.getNumber("mfu");
    c.feasible = false;
    if (e.peak > cluster.memory_bytes()) {
      c.rejected = llvm::formatv(
          "out of memory by {0} ({1} needed, {2} per device)",
          common::FormatBytes(e.peak - cluster.memory_bytes()),
          common::FormatBytes(e.peak),
          common::FormatBytes(cluster.memory_bytes()));
      return false;
    }
    c.rejected.clear();
    c.feasible = true;
    return true;
  };
  // Compiles candidate `c` whole: its exact peak and predicted step.
  auto compileCandidate = [&](Candidate &c,
                              mlir::MLIRContext &context) -> bool {
    llvm::Expected<Evaluation> e = evaluate(context, c.parallel, 0);
    if (!e) {
      c.rejected = llvm::toString(e.takeError());
      c.feasible = false;
      c.peakBytes = 0;
      return false;
    }
    c.compiled = true;
    c.estimated = false;
    if (e->recomputesNothing && c.parallel.recompute() == "auto")
      c.layout = layoutName(c.parallel) + " (recomputes nothing)";
    return record(c, *e);
  };
  // Estimates candidate `c` from two proxies of the same layout with kLow
  // and kHigh layers per pipeline chunk: the layers are alike (embedding and
  // head are fixed), so a plan's predicted step grows by the same amount
  // with each layer a chunk gains, and its arena nearly so (the memory
  // planner's packing and ZeRO's buckets make the growth per layer vary
  // with a short period, which the wide gap between the proxies averages
  // out). The estimate is the line through the proxies'. A model with few
  // layers per chunk is compiled whole.
  constexpr int64_t kLow = 3, kHigh = 7;
  auto estimateCandidate = [&](Candidate &c,
                               mlir::MLIRContext &context) -> bool {
    const spec::ParallelSpec &p = c.parallel;
    int64_t chunks = p.pp() * std::max<int64_t>(p.vpp(), 1);
    // Layers the fullest chunk holds: when pp does not divide the layers,
    // the estimate is that of a model with every stage as full (so it
    // errs slow and large; the best are compiled whole anyway).
    int64_t perChunk = (model->numLayers + chunks - 1) / chunks;
    if (!options.proxies || perChunk <= kLow + kHigh)
      return compileCandidate(c, context);
    llvm::Expected<Evaluation> a = evaluate(context, p, chunks * kLow);
    if (!a) {
      c.rejected = llvm::toString(a.takeError());
      return false;
    }
    llvm::Expected<Evaluation> b = evaluate(context, p, chunks * kHigh);
    if (!b) {
      c.rejected = llvm::toString(b.takeError());
      return false;
    }
    double t = double(perChunk - kLow) / double(kHigh - kLow);
    auto line = [&](double x, double y) { return x + t * (y - x); };
    Evaluation e;
    e.peak = a->peak + int64_t(std::llround(t * double(b->peak - a->peak)));
    StepPrediction &s = e.prediction;
    const StepPrediction &x = a->prediction, &y = b->prediction;
    s.stepTime = line(x.stepTime, y.stepTime);
    s.compute = line(x.compute, y.compute);
    s.recompute = line(x.recompute, y.recompute);
    for (const auto &[axes, seconds] : y.communication)
      s.communication[axes] =
          line(x.communication.count(axes) ? x.communication.at(axes) : 0,
               seconds);
    s.hiddenCommunication = line(x.hiddenCommunication, y.hiddenCommunication);
    s.collectivePeers = line(x.collectivePeers, y.collectivePeers);
    s.collectiveSeconds = line(x.collectiveSeconds, y.collectiveSeconds);
    for (const auto &[kernel, seconds] : y.kernels)
      s.kernels[kernel] =
          line(x.kernels.count(kernel) ? x.kernels.at(kernel) : 0, seconds);
    s.bubble = line(x.bubble, y.bubble);
    s.overhead = line(x.overhead, y.overhead);
    for (size_t i = 0; i < y.stageBusy.size() && i < x.stageBusy.size(); ++i)
      s.stageBusy.push_back(line(x.stageBusy[i], y.stageBusy[i]));
    e.plan = std::move(b->plan);
    c.estimated = true;
    return record(c, e);
  };
  // Compile in that order; within a structure, a rung above the lowest one
  // that fits is no candidate (it only trades time for memory not needed).
  // The evaluations run on worker threads, each with a context of its own
  // (diagnostics are a context's), ahead of a pass down the order that
  // takes their results one by one as a single thread would: whether a
  // candidate counts (a lower rung of its structure fits, the cap) is
  // decided there, so the result does not depend on the number of workers.
  // A batch is the next candidates of the order, up to one per worker, that
  // no lower rung of their structure still undecided could make needless.
  std::vector<int64_t> fittedRung(structures, INT64_MAX);
  int64_t compiles = 0;
  unsigned workers = options.threads > 0
                         ? unsigned(options.threads)
                         : llvm::hardware_concurrency().compute_thread_count();
  workers = std::max(1u, std::min(workers, 16u));
  // Their dialects are loaded here, on this thread, rather than on first
  // use by the workers.
  std::vector<std::unique_ptr<mlir::MLIRContext>> workerContexts;
  if (workers > 1)
    context.loadAllAvailableDialects();
  for (unsigned w = 1; w < workers; ++w) {
    workerContexts.push_back(std::make_unique<mlir::MLIRContext>(
        context.getDialectRegistry(), mlir::MLIRContext::Threading::DISABLED));
    workerContexts.back()->loadAllAvailableDialects();
  }
  auto contextOf = [&](unsigned w) -> mlir::MLIRContext & {
    return w == 0 ? context : *workerContexts[w - 1];
  };
  // Evaluated ahead of the pass: a candidate's evaluated copy and whether
  // it fits, by position in the order.
  std::map<size_t, std::pair<Candidate, bool>> ahead;
  auto evaluateBatch = [&](const std::vector<size_t> &positions) {
    std::vector<std::pair<Candidate, bool>> out;
    for (size_t k : positions)
      out.emplace_back(all[order[k]], false);
    std::vector<std::thread> threads;
    for (size_t w = 1; w < positions.size(); ++w)
      threads.emplace_back([&, w] {
        out[w].second = estimateCandidate(out[w].first, contextOf(unsigned(w)));
      });
    out[0].second = estimateCandidate(out[0].first, contextOf(0));
    for (std::thread &t : threads)
      t.join();
    for (size_t w = 0; w < positions.size(); ++w)
      ahead.emplace(positions[w], std::move(out[w]));
  };
  auto needless = [&](const Candidate &c) {
    return c.rung > fittedRung[c.structure];
  };
  auto capped = [&] {
    return options.maxCompiles > 0 && compiles >= options.maxCompiles;
  };
  for (size_t next = 0; next < order.size();) {
    // The pass: take the candidates decided or evaluated, in order.
    Candidate &c = all[order[next]];
    if (needless(c)) {
      ahead.erase(next); // evaluated in vain, if it was
      ++next;
      continue;
    }
    if (capped()) {
      ahead.erase(next);
      c.rejected = llvm::formatv("not compiled: --auto compiles at most {0} "
                                 "candidates, those of the shortest rough "
                                 "estimate first (this one: {1:F4} s)",
                                 options.maxCompiles, estimate[order[next]]);
      ++next;
      continue;
    }
    if (auto it = ahead.find(next); it != ahead.end()) {
      ++compiles;
      c = std::move(it->second.first);
      if (it->second.second)
        fittedRung[c.structure] = std::min(fittedRung[c.structure], c.rung);
      ahead.erase(it);
      ++next;
      continue;
    }
    // Evaluate ahead: this candidate and the next ones that will count
    // whatever the undecided ones before them turn out to be.
    std::vector<size_t> positions = {next};
    std::set<int64_t> undecided = {c.structure};
    for (const auto &[k, evaluated] : ahead)
      undecided.insert(evaluated.first.structure);
    int64_t counted = compiles + 1 + int64_t(ahead.size());
    for (size_t k = next + 1; k < order.size() && k < next + 256 &&
                              positions.size() < workers;
         ++k) {
      const Candidate &d = all[order[k]];
      if (needless(d) || ahead.count(k))
        continue;
      if (options.maxCompiles > 0 && counted >= options.maxCompiles)
        break;
      if (undecided.insert(d.structure).second) {
        positions.push_back(k);
        ++counted;
      }
    }
    evaluateBatch(positions);
  }

  // Nothing fits and nothing was evaluated (the bound ruled every rung
  // out): the most frugal rung of the structures whose rough memory (the
  // bound and the rough activations) is least, evaluated anyway, tells how
  // much memory would do; the least of them is compiled whole below.
  if (llvm::none_of(all, [](const Candidate &c) { return c.peakBytes > 0; })) {
    std::vector<size_t> frugal;
    for (size_t i = 0; i < all.size(); ++i)
      if (i + 1 == all.size() || all[i + 1].structure != all[i].structure)
        frugal.push_back(i); // the last rung of each structure
    auto rough = [&](size_t i) {
      return bound[i] + roughActivationBytes(all[i].parallel, *model);
    };
    std::stable_sort(frugal.begin(), frugal.end(),
                     [&](size_t a, size_t b) { return rough(a) < rough(b); });
    for (size_t k = 0; k < frugal.size() && k < 8; ++k) {
      Candidate &c = all[frugal[k]];
      c.rejected.clear();
      estimateCandidate(c, context);
    }
  }
  // Rungs above one that fits are not candidates (slower by construction).
  llvm::erase_if(all, [&](const Candidate &c) {
    return c.rung > fittedRung[c.structure];
  });
  for (Candidate &c : all)
    if (!c.feasible && c.rejected.empty())
      c.rejected = "not compiled";

  auto rank = [&] {
    std::stable_sort(all.begin(), all.end(),
                     [](const Candidate &a, const Candidate &b) {
                       if (a.feasible != b.feasible)
                         return a.feasible;
                       if (a.feasible)
                         return a.prediction.stepTime <
                                b.prediction.stepTime;
                       bool aPriced = a.peakBytes > 0;
                       bool bPriced = b.peakBytes > 0;
                       if (aPriced != bPriced)
                         return aPriced;
                       return a.peakBytes < b.peakBytes;
                     });
  };
  // How many of the best are compiled whole (and refined, below).
  int64_t confirm = std::max<int64_t>(options.confirm, 1);
  // A refinement of the best: the first `confirm` that fit and that `takes`
  // accepts (or, `amongBest`, those it accepts among the first `confirm`
  // that fit) are handed to `refine`, whose new candidates (of the same
  // structure and rung) join the others.
  auto refineBest = [&](bool amongBest, auto takes, auto refine) {
    rank();
    std::vector<Candidate> refined;
    int64_t tried = 0;
    for (const Candidate &c : all) {
      if (!c.feasible || tried == confirm)
        break;
      bool taken = takes(c);
      if (taken || amongBest)
        ++tried;
      if (!taken)
        continue;
      if (std::optional<Candidate> r = refine(c))
        refined.push_back(std::move(*r));
    }
    for (Candidate &r : refined)
      all.push_back(std::move(r));
  };
  // Uneven stages: those of the best whose structure is a pipeline of
  // single chunks that had to climb its memory ladder are tried again on
  // the rungs below, cheapest first, with stages whose layers balance their
  // memory instead of their FLOPs (the first stages keep the most
  // micro-batches in flight). Each compiles whole (up to one compile per
  // rung below, which is why only the best are tried); the first that fits
  // is a new candidate.
  if (options.unevenStages)
    refineBest(
        /*amongBest=*/true,
        [](const Candidate &c) {
          const spec::ParallelSpec &p = c.parallel;
          return p.pp() > 1 && p.vpp() <= 1 && c.rung > 0 &&
                 !p.stage_layers_size();
        },
        [&](const Candidate &c) -> std::optional<Candidate> {
          // Every rung below, evaluated or not (past the cap), but those
          // that the bound rules out (no partition fits what the average
          // stage cannot hold).
          std::vector<const Candidate *> lower;
          for (const Candidate &d : all)
            if (d.structure == c.structure && d.rung < c.rung &&
                !d.parallel.stage_layers_size() &&
                persistentBytesPerParameter(d.parallel.zero(),
                                            d.parallel.dp()) *
                        double(parameters) /
                        double(d.parallel.tp() * d.parallel.pp()) <=
                    double(cluster.memory_bytes()))
              lower.push_back(&d);
          llvm::sort(lower, [](const Candidate *x, const Candidate *y) {
            return x->rung < y->rung;
          });
          for (const Candidate *d : lower) {
            Candidate u;
            u.parallel = d->parallel;
            for (int64_t n :
                 memoryBalancedStages(u.parallel, *model, parameterCount))
              u.parallel.add_stage_layers(n);
            u.layout = layoutName(u.parallel);
            u.structure = d->structure;
            u.rung = d->rung;
            if (compileCandidate(u, context))
              return u;
          }
          return std::nullopt;
        });
  // Recompute auto: the best that fit with selective or full recompute are
  // tried again with `auto` at the device's memory as the budget (the
  // compiler's own search: per layer, the least recompute that fits; it
  // compiles whole, so only these few are tried). Each is a new candidate
  // of the same structure and rung; it wins where it recomputes less.
  if (options.recomputeAuto)
    refineBest(
        /*amongBest=*/false,
        [](const Candidate &c) {
          return c.parallel.recompute() == "selective" ||
                 c.parallel.recompute() == "full";
        },
        [&](const Candidate &c) -> std::optional<Candidate> {
          Candidate a;
          a.parallel = c.parallel;
          a.parallel.set_recompute("auto");
          a.parallel.set_memory_budget_bytes(cluster.memory_bytes());
          a.layout = layoutName(a.parallel);
          a.structure = c.structure;
          a.rung = c.rung;
          compileCandidate(a, context);
          return a;
        });
  // The best `confirm` that fit are compiled whole, fastest first: a whole
  // compile replaces the estimate (and keeps it, to show how far it was)
  // and may move the candidate down or out, so the order is taken again.
  // When nothing fits, the least memory any candidate needs is compiled
  // whole, so that the number the error states is exact.
  for (;;) {
    rank();
    Candidate *next = nullptr;
    int64_t seen = 0;
    for (Candidate &c : all) {
      if (seen == confirm || (!c.feasible && seen > 0) ||
          (!c.feasible && c.peakBytes == 0))
        break;
      if (!c.compiled) {
        next = &c;
        break;
      }
      ++seen;
      if (!c.feasible)
        break;
    }
    if (!next)
      break;
    next->estimatedPeakBytes = next->peakBytes;
    next->estimatedStepTime = next->prediction.stepTime;
    compileCandidate(*next, context);
  }
  return all;
}

std::string braid::candidateTable(const std::vector<Candidate> &candidates,
                                  int64_t top) {
  std::string out = llvm::formatv(
      "{0,-4} {1,-68} {2,12} {3,12} {4,10} {5,7} {6,14}  {7}\n", "#",
      "layout", "step (ms)", "tokens/s", "TFLOP/s", "MFU", "peak",
      "compute (of it recompute) / exposed comm / bubble (ms)");
  int64_t shown = 0;
  for (const Candidate &c : candidates) {
    if (shown == top)
      break;
    ++shown;
    if (!c.feasible) {
      out += llvm::formatv("{0,-4} {1,-68} {2}\n", shown, c.layout,
                           "rejected: " + c.rejected);
      continue;
    }
    double exposed = 0;
    for (const auto &[axes, s] : c.prediction.communication)
      exposed += s;
    out += llvm::formatv(
        "{0,-4} {1,-68} {2,12:F3} {3,12:F1} {4,10:F3} {5,7:P1} {6,14}  "
        "{7:F3} ({8:F3}) / {9:F3} / {10:F3}\n",
        shown, c.layout, 1e3 * c.prediction.stepTime, c.tokensPerS,
        c.tflopsPerDevice, c.mfu, common::FormatBytes(c.peakBytes),
        1e3 * c.prediction.compute,
        1e3 * c.prediction.recompute, 1e3 * exposed, 1e3 * c.prediction.bubble);
  }
  if (int64_t(candidates.size()) > shown)
    out += llvm::formatv("... and {0} more\n", candidates.size() - shown);
  return out;
}
