//===- Calibrate.cpp - braid calibrate's experiment ----------------------===//

#include "compiler/Calibrate.h"

#include "compiler/CostModel.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <limits>

using namespace braid;
using namespace braid::calibration;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string formatRate(const spec::KernelRate &r) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (r.flops_per_s() > 0)
    os << llvm::format("%.2f GFLOP/s", r.flops_per_s() / 1e9);
  if (r.flops_per_s() > 0 && r.bytes_per_s() > 0)
    os << ", ";
  if (r.bytes_per_s() > 0)
    os << llvm::format("%.2f GB/s", r.bytes_per_s() / 1e9);
  return out;
}

/// Parses a run's output with `parse`; an error names its source.
template <typename T, typename Parse>
llvm::Expected<T> parseOutput(const RunOutput &output, Parse parse) {
  llvm::Expected<T> parsed = parse(output.text);
  if (!parsed)
    return error(output.source + ": " + llvm::toString(parsed.takeError()));
  return parsed;
}

} // namespace

CalibrationRunner::~CalibrationRunner() = default;

bool calibration::runsOn(const CalibrationModel &model, int64_t ranks) {
  return ranks % (model.tp * model.pp) == 0;
}

spec::JobSpec calibration::calibrationJob(const CalibrationModel &model,
                                          int64_t ranks) {
  spec::JobSpec job;
  spec::ModelSpec *m = job.mutable_model();
  m->set_preset("tiny-llama");
  m->set_num_layers(2);
  m->set_hidden_size(model.hidden);
  m->set_num_heads(model.heads);
  m->set_num_kv_heads(model.heads);
  m->set_ffn_hidden_size(model.ffn);
  m->set_vocab_size(257); // the byte tokenizer's: 256 bytes and EOD
  // Padded to split by tp.
  m->set_make_vocab_size_divisible_by(model.tp);
  m->set_max_seq_len(model.seq);
  spec::ParallelSpec *p = job.mutable_parallel();
  int64_t dp = ranks / (model.tp * model.pp);
  p->set_dp(dp);
  if (model.tp > 1) {
    p->set_tp(model.tp);
    p->set_sp(true);
  }
  if (model.pp > 1)
    p->set_pp(model.pp);
  p->set_micro_batch_size(model.microBatch);
  p->set_global_batch_size(model.microBatch * model.microBatches * dp);
  job.mutable_data()->set_seq_length(model.seq);
  job.mutable_train()->set_seed(1);
  return job;
}

llvm::Error calibration::checkOptions(const CalibrateOptions &options) {
  if (options.rankCounts.empty())
    return error("a calibration needs at least one rank count");
  for (size_t i = 0; i < options.rankCounts.size(); ++i) {
    if (options.rankCounts[i] < 1)
      return error("rank count " + llvm::Twine(options.rankCounts[i]) +
                   " is not positive");
    if (i > 0 && options.rankCounts[i] <= options.rankCounts[i - 1])
      return error("the rank counts are not ascending and distinct (" +
                   llvm::Twine(options.rankCounts[i - 1]) + " before " +
                   llvm::Twine(options.rankCounts[i]) + ")");
  }
  if (options.threads < 0)
    return error("threads per rank " + llvm::Twine(options.threads) +
                 " is negative (0: the cores shared out)");
  if (options.steps < 2)
    return error("steps " + llvm::Twine(options.steps) +
                 " is below 2 (the first step warms up and is not measured)");
  if (options.repeats < 1)
    return error("repeats " + llvm::Twine(options.repeats) +
                 " is not positive");
  if (options.cores < 1)
    return error("the machine's cores " + llvm::Twine(options.cores) +
                 " are not positive");
  return llvm::Error::success();
}

int64_t calibration::threadsPerRank(const CalibrateOptions &options,
                                    int64_t ranks) {
  // Ranks share the cores, as braid-run shares them by default.
  return options.threads > 0
             ? options.threads
             : std::max<int64_t>(options.cores / std::max<int64_t>(ranks, 1),
                                 1);
}

std::vector<CalibrationRun>
calibration::calibrationRuns(const CalibrateOptions &options) {
  std::vector<CalibrationRun> runs;
  for (int64_t round = 1; round <= options.repeats; ++round)
    for (int64_t n : options.rankCounts) {
      CalibrationRun run;
      run.ranks = n;
      run.threads = threadsPerRank(options, n);
      run.steps = options.steps;
      run.round = round;
      run.rounds = options.repeats;
      for (int k = 0; k < kCalibrationModelCount; ++k) {
        if (!runsOn(kCalibrationModels[k], n))
          continue;
        run.kind = CalibrationRun::kProfile;
        run.model = k;
        runs.push_back(run);
      }
      if (n < 2)
        continue;
      run.kind = CalibrationRun::kCollectives;
      run.model = kMidModel;
      runs.push_back(run);
    }
  return runs;
}

llvm::Expected<std::vector<RankCalibration>>
calibration::measure(const CalibrateOptions &options,
                     CalibrationRunner &runner) {
  if (llvm::Error e = checkOptions(options))
    return std::move(e);
  std::vector<RankCalibration> measured;
  for (int64_t n : options.rankCounts) {
    RankCalibration &c = measured.emplace_back();
    c.ranks = n;
    c.threads = threadsPerRank(options, n);
    for (int k = 0; k < kCalibrationModelCount; ++k) {
      const CalibrationModel &model = kCalibrationModels[k];
      if (!runsOn(model, n))
        continue;
      llvm::Expected<plan::Plan> plan = runner.compile(calibrationJob(model, n));
      if (!plan)
        return error("compiling the " + std::string(model.name) +
                     " calibration model for " + std::to_string(n) +
                     " ranks: " + llvm::toString(plan.takeError()));
      c.plans[k] = *plan;
      if (llvm::Error e = runner.keepPlan(k, n, *plan))
        return std::move(e);
    }
  }
  for (const CalibrationRun &run : calibrationRuns(options)) {
    RankCalibration &c =
        measured[size_t(std::find(options.rankCounts.begin(),
                                  options.rankCounts.end(), run.ranks) -
                        options.rankCounts.begin())];
    llvm::Expected<RunOutput> output = runner.run(run);
    if (!output)
      return output.takeError();
    if (run.kind == CalibrationRun::kCollectives) {
      auto bench =
          parseOutput<std::pair<int64_t, std::vector<std::pair<double, double>>>>(
              *output, parseAllReduceBench);
      if (!bench)
        return bench.takeError();
      c.benchRanks = bench->first;
      c.benches.push_back(std::move(bench->second));
      continue;
    }
    llvm::Expected<KernelSamples> samples =
        parseOutput<KernelSamples>(*output, parseProfile);
    if (!samples)
      return samples.takeError();
    llvm::Expected<std::vector<double>> times =
        parseOutput<std::vector<double>>(*output, parseStepTimes);
    if (!times)
      return times.takeError();
    int k = run.model;
    c.runs[k].push_back(std::move(*samples));
    c.profiledSteps[k] = int64_t(times->size());
    c.stepTimes[k].insert(c.stepTimes[k].end(), times->begin(), times->end());
  }
  return measured;
}

llvm::Error calibration::fitRates(std::vector<RankCalibration> &measured) {
  for (RankCalibration &c : measured) {
    const int64_t n = c.ranks;
    for (int k = 0; k < kCalibrationModelCount; ++k)
      c.samples[k] = medianRun(c.runs[k]);
    c.rates = fitKernelRates(c.samples[kSmallModel], c.samples[kMidModel]);
    // The calls of every run; but in the tensor-parallel and pipeline runs
    // GRAD_NORM's all-reduce over the stages or shards waits for them (for
    // the last stage's backward), which is no time of its own calls.
    std::vector<KernelSamples> calls;
    for (int k = 0; k < kCalibrationModelCount; ++k) {
      if (c.stepTimes[k].empty())
        continue;
      calls.push_back(c.samples[k]);
      if (kCalibrationModels[k].tp > 1 || kCalibrationModels[k].pp > 1)
        calls.back().erase("GRAD_NORM");
    }
    std::vector<const KernelSamples *> runs;
    for (const KernelSamples &run : calls)
      runs.push_back(&run);
    addCallTimes(c.rates, runs);
    if (c.rates.empty())
      return error("the profiles of " + std::to_string(n) +
                   " ranks hold no kernel to fit a rate to");
    if (c.benches.empty())
      continue;
    auto bench = medianBench(c.benches);
    if (!bench)
      return error("the all-reduce times of " + std::to_string(n) +
                   " ranks: " + llvm::toString(bench.takeError()));
    llvm::Expected<spec::LinkClass> link =
        fitAllReduceLink(c.benchRanks, *bench);
    if (!link)
      return error("fitting the link of " + std::to_string(n) +
                   " ranks: " + llvm::toString(link.takeError()));
    c.link = *link;
    c.linkSizes = bench->size();
  }
  return llvm::Error::success();
}

llvm::Expected<spec::Cluster>
calibration::fitCluster(llvm::ArrayRef<RankCalibration> measured,
                        const CalibrateOptions &options) {
  if (measured.empty())
    return error("no rank count was measured: there is nothing to fit a "
                 "cluster to");
  // The cluster: one node of as many devices (ranks) as the most measured;
  // the peaks are the best rates of the fewest ranks (the least sharing).
  const RankCalibration &fewest = measured.front();
  const RankCalibration &most = measured.back();
  spec::Cluster cluster;
  cluster.set_name("local-cpu");
  cluster.set_nodes(1);
  cluster.set_devices_per_node(most.ranks);
  cluster.set_memory_bytes(options.memoryBytes / most.ranks);
  double bestFlops = 0, bestBytes = 0, overhead = 0;
  for (const spec::KernelRate &r : fewest.rates) {
    if (isDefaultRate(r)) {
      overhead = r.overhead_s();
      continue;
    }
    bestFlops = std::max(bestFlops, r.flops_per_s());
    bestBytes = std::max(bestBytes, r.bytes_per_s());
  }
  cluster.set_peak_flops_fp32(bestFlops);
  // The CPU kernels compute in float32 whatever the plan's dtype.
  cluster.set_peak_flops_bf16(bestFlops);
  cluster.set_memory_bandwidth(bestBytes);
  // The peaks are measured kernel rates already, not data-sheet numbers.
  cluster.set_matmul_efficiency(1);
  cluster.set_vector_efficiency(1);
  cluster.set_kernel_overhead_s(overhead);
  if (most.link)
    *cluster.mutable_intra_node() = *most.link;
  for (const RankCalibration &c : measured) {
    spec::Calibration *cal = cluster.add_calibrations();
    cal->set_ranks_per_node(c.ranks);
    cal->set_threads_per_rank(c.threads);
    cal->set_cores(options.cores);
    for (const spec::KernelRate &r : c.rates)
      *cal->add_kernels() = r;
    if (c.link)
      *cal->mutable_intra_node() = *c.link;
    // The least of the models' (their data feeds differ little; the larger
    // models' collectives wait longer for the slowest rank).
    double stepOverhead = std::numeric_limits<double>::infinity();
    for (int k = 0; k < kCalibrationModelCount; ++k)
      if (!c.stepTimes[k].empty())
        stepOverhead =
            std::min(stepOverhead,
                     fitStepOverhead(c.samples[k], c.stepTimes[k],
                                     double(c.profiledSteps[k])));
    cal->set_step_overhead_s(stepOverhead);
  }
  // The collectives' waits, per call and per second of compute since their
  // group met: the tensor-parallel run's steps (many collectives, short
  // gaps) and the data-parallel runs' (few, after a whole backward) against
  // their priced steps on this very cluster (both waits still 0).
  for (size_t i = 0; i < measured.size(); ++i) {
    const RankCalibration &c = measured[i];
    std::vector<WaitRun> runs;
    for (int k = 0; k < kCalibrationModelCount; ++k) {
      if (c.stepTimes[k].empty() || k == kPipelineModel || c.ranks < 2)
        continue;
      llvm::Expected<StepPrediction> priced = predictStep(c.plans[k], cluster);
      if (!priced)
        return error("pricing the " + std::string(kCalibrationModels[k].name) +
                     " calibration model: " +
                     llvm::toString(priced.takeError()));
      runs.push_back({median(c.stepTimes[k]), priced->stepTime,
                      priced->collectivePeers, priced->collectiveGaps});
    }
    CollectiveWaits waits = fitCollectiveWaits(runs);
    cluster.mutable_calibrations(int(i))->set_collective_wait_s(waits.wait);
    cluster.mutable_calibrations(int(i))->set_collective_gap_share(
        waits.gapShare);
  }
  // A waiting rank's share of a core: the pipeline run's measured step
  // against its priced step as the share moves (after the collectives'
  // wait, which its data-parallel all-reduce pays).
  for (size_t i = 0; i < measured.size(); ++i) {
    const RankCalibration &c = measured[i];
    if (c.stepTimes[kPipelineModel].empty())
      continue;
    spec::Calibration *cal = cluster.mutable_calibrations(int(i));
    llvm::Expected<double> share = fitWaitingShare(
        [&](double s) -> llvm::Expected<double> {
          cal->set_waiting_core_share(s);
          llvm::Expected<StepPrediction> priced =
              predictStep(c.plans[kPipelineModel], cluster);
          if (!priced)
            return priced.takeError();
          return priced->stepTime;
        },
        median(c.stepTimes[kPipelineModel]));
    if (!share)
      return error("pricing the pipeline calibration model: " +
                   llvm::toString(share.takeError()));
    cal->set_waiting_core_share(*share);
  }
  return cluster;
}

llvm::Expected<std::string>
calibration::clusterFileText(const spec::Cluster &cluster,
                             const CalibrateOptions &options) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(cluster, &text))
    return error("cannot print the cluster description");
  return "# This machine's CPU ranks as `braid calibrate --ranks " +
         llvm::join(llvm::map_range(options.rankCounts,
                                    [](int64_t n) { return std::to_string(n); }),
                    ",") +
         " --steps " + std::to_string(options.steps) +
         (options.repeats > 1 ? " --repeats " + std::to_string(options.repeats)
                              : "") +
         "` measured them\n# (frontends/spec/cluster.proto; braidc --cluster "
         "FILE reads it).\n" +
         text;
}

llvm::Error calibration::printSummary(llvm::raw_ostream &os,
                                      llvm::ArrayRef<RankCalibration> measured,
                                      const spec::Cluster &cluster) {
  if (size_t(cluster.calibrations_size()) != measured.size())
    return error("the cluster has " + llvm::Twine(cluster.calibrations_size()) +
                 " calibrations for " + llvm::Twine(measured.size()) +
                 " rank counts measured (expected one each)");
  for (size_t i = 0; i < measured.size(); ++i) {
    const RankCalibration &c = measured[i];
    const spec::Calibration &cal = cluster.calibrations(int(i));
    os << llvm::formatv("\n{0} rank{1} x {2} thread{3}\n", c.ranks,
                        c.ranks == 1 ? "" : "s", c.threads,
                        c.threads == 1 ? "" : "s");
    os << llvm::formatv("  {0,-22} {1,-26} {2,12} {3,14}\n", "kernel", "rate",
                        "overhead", "mid s/step");
    const KernelSamples &mid = c.samples[kMidModel];
    double measuredSteps =
        double(std::max<int64_t>(c.profiledSteps[kMidModel], 1));
    for (const spec::KernelRate &r : c.rates) {
      auto it = mid.find(r.kernel());
      std::string perStep =
          it == mid.end()
              ? std::string("")
              : llvm::formatv("{0:f5}", it->second.seconds / measuredSteps)
                    .str();
      os << llvm::formatv("  {0,-22} {1,-26} {2,9:f2} us {3,14}\n",
                          r.kernel(), formatRate(r), r.overhead_s() * 1e6,
                          perStep);
    }
    if (c.link)
      os << llvm::formatv("  {0,-22} {1,-26} {2,9:f2} us   (all-reduce, {3} "
                          "sizes)\n",
                          "link",
                          llvm::formatv("{0:f3} GB/s", c.link->bandwidth() / 1e9)
                              .str(),
                          c.link->latency() * 1e6, c.linkSizes);
    if (double wait = cal.collective_wait_s(); wait > 0)
      os << llvm::formatv("  {0,-22} {1,-26} {2,9:f2} us   (per collective "
                          "in a step and peer in its group)\n",
                          "collective wait", "", wait * 1e6);
    if (double share = cal.collective_gap_share(); share > 0)
      os << llvm::formatv("  {0,-22} {1,-26:f3}      (of the compute since "
                          "the group met)\n",
                          "collective gap wait", share);
    if (c.ranks > 1 && !c.stepTimes[kPipelineModel].empty())
      os << llvm::formatv("  {0,-22} {1,-26:f2}      (of a core, as a share "
                          "of a computing rank's)\n",
                          "waiting rank's core", cal.waiting_core_share());
    for (int k = 0; k < kCalibrationModelCount; ++k) {
      if (c.stepTimes[k].empty())
        continue;
      llvm::Expected<StepPrediction> predicted =
          predictStep(c.plans[k], cluster);
      if (!predicted)
        return error(std::string("predicting the ") +
                     kCalibrationModels[k].name + " model's step: " +
                     llvm::toString(predicted.takeError()));
      double step = median(c.stepTimes[k]);
      os << llvm::formatv("  step of the {0,-9} model: measured {1:f4} s, "
                          "predicted {2:f4} s ({3:+f1} %)\n",
                          kCalibrationModels[k].name, step,
                          predicted->stepTime,
                          step > 0 ? 100 * (predicted->stepTime - step) / step
                                   : 0.0);
    }
  }
  return llvm::Error::success();
}
