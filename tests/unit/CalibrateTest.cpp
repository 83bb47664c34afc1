//===- CalibrateTest.cpp - braid calibrate's experiment -------------------===//
//
// The experiment as compiler/Calibrate.h and docs/cost-model.md describe
// it: which models run on which rank counts, their jobs and the calls their
// plans make, the order of the runs; and, with a runner that reports the
// measurements of known kernel rates and a known link, the cluster fitted
// to them.
//
//===----------------------------------------------------------------------===//

#include "compiler/Calibrate.h"

#include "TestUtil.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Work.h"

#include "llvm/Support/FormatVariadic.h"
#include "gtest/gtest.h"

#include <google/protobuf/text_format.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace braid;
using namespace braid::calibration;

namespace {

/// The index of the model named `name` in kCalibrationModels.
int modelIndex(const std::string &name) {
  for (int k = 0; k < kCalibrationModelCount; ++k)
    if (name == kCalibrationModels[k].name)
      return k;
  ADD_FAILURE() << "no calibration model " << name;
  return 0;
}

/// `v` with every digit a double holds.
std::string num(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

const CalibrationModel &model(const std::string &name) {
  return kCalibrationModels[modelIndex(name)];
}

/// The names of the models that run on `ranks` ranks.
std::vector<std::string> modelsOn(int64_t ranks) {
  std::vector<std::string> names;
  for (const CalibrationModel &m : kCalibrationModels)
    if (runsOn(m, ranks))
      names.push_back(m.name);
  return names;
}

TEST(CalibrateDesign, TheParallelModelsRunOnEvenRankCounts) {
  // Four data-parallel models on every rank count; tensor-parallel over 2
  // and 2 pipeline stages on even ones (docs/cost-model.md).
  const std::vector<std::string> dataParallel = {"small", "mid", "small-mb1",
                                                 "small-mb8"};
  std::vector<std::string> all = dataParallel;
  all.push_back("small-tp2");
  all.push_back("small-pp2");
  for (int64_t ranks : {1, 3, 5})
    EXPECT_EQ(modelsOn(ranks), dataParallel) << ranks << " ranks";
  for (int64_t ranks : {2, 4, 6})
    EXPECT_EQ(modelsOn(ranks), all) << ranks << " ranks";
  EXPECT_STREQ(kCalibrationModels[kSmallModel].name, "small");
  EXPECT_STREQ(kCalibrationModels[kMidModel].name, "mid");
  EXPECT_STREQ(kCalibrationModels[kTensorParallelModel].name, "small-tp2");
  EXPECT_STREQ(kCalibrationModels[kPipelineModel].name, "small-pp2");
}

TEST(CalibrateDesign, JobsSplitTheRanksAsDocumented) {
  const int64_t ranks = 4;
  for (const CalibrationModel &m : kCalibrationModels) {
    SCOPED_TRACE(m.name);
    spec::JobSpec job = calibrationJob(m, ranks);
    // LLaMA-shaped, 2 layers, the byte vocabulary.
    EXPECT_EQ(job.model().preset(), "tiny-llama");
    EXPECT_EQ(job.model().num_layers(), 2);
    EXPECT_EQ(job.model().vocab_size(), 257);
    EXPECT_EQ(job.model().hidden_size(), m.hidden);
    EXPECT_EQ(job.model().max_seq_len(), m.seq);
    EXPECT_EQ(job.data().seq_length(), m.seq);
    // tp x pp x dp is the ranks; the global batch is the micro-batch times
    // the micro-batches of each data-parallel rank.
    const spec::ParallelSpec &p = job.parallel();
    int64_t tp = p.tp() > 0 ? p.tp() : 1, pp = p.pp() > 0 ? p.pp() : 1;
    EXPECT_EQ(tp * pp * p.dp(), ranks);
    EXPECT_EQ(p.micro_batch_size(), m.microBatch);
    EXPECT_EQ(p.global_batch_size(), m.microBatch * m.microBatches * p.dp());
    // Sequence parallelism with tensor parallelism, and not without.
    EXPECT_EQ(p.sp(), tp > 1);
  }
  // small: tiny-llama's sizes at micro-batch 2; mid: 4x wider, twice the
  // sequence, micro-batch 4; the small one at micro-batches 1 and 8.
  EXPECT_EQ(model("small").microBatch, 2);
  EXPECT_EQ(model("mid").hidden, 4 * model("small").hidden);
  EXPECT_EQ(model("mid").seq, 2 * model("small").seq);
  EXPECT_EQ(model("mid").microBatch, 4);
  EXPECT_EQ(model("small-mb1").microBatch, 1);
  EXPECT_EQ(model("small-mb8").microBatch, 8);
  // tp 2 at micro-batch 1, dp over the rest; 2 stages of 4 micro-batches of
  // 2, dp over the rest.
  spec::JobSpec tp = calibrationJob(model("small-tp2"), ranks);
  EXPECT_EQ(tp.parallel().tp(), 2);
  EXPECT_EQ(tp.parallel().dp(), 2);
  EXPECT_EQ(tp.parallel().micro_batch_size(), 1);
  spec::JobSpec pp = calibrationJob(model("small-pp2"), ranks);
  EXPECT_EQ(pp.parallel().pp(), 2);
  EXPECT_EQ(pp.parallel().dp(), 2);
  EXPECT_EQ(pp.parallel().micro_batch_size(), 2);
  EXPECT_EQ(pp.parallel().global_batch_size(), 2 * 4 * 2);
}

/// Per compute kernel of `plan`: its calls and their FLOPs and bytes.
std::map<std::string, std::pair<int, plan::Work>>
computeWork(const plan::Plan &plan) {
  std::map<std::string, std::pair<int, plan::Work>> byKernel;
  for (const plan::Function &fn : plan.functions())
    for (const plan::Instruction &inst : fn.body()) {
      std::string name = plan::Kernel_Name(inst.kernel());
      if (isCommunicationKernel(name))
        continue;
      plan::Work w = plan::InstructionWork(plan, inst);
      auto &[calls, total] = byKernel[name];
      ++calls;
      total.flops += w.flops;
      total.bytes += w.bytes;
    }
  return byKernel;
}

/// The work one call of `kernel` does on average: FLOPs for a matrix
/// product, bytes for the others (what its rate divides).
double workPerCall(const std::map<std::string, std::pair<int, plan::Work>> &w,
                   const std::string &kernel) {
  auto it = w.find(kernel);
  if (it == w.end())
    return 0;
  const plan::Work &total = it->second.second;
  return (isMatrixKernel(kernel) ? total.flops : total.bytes) /
         it->second.first;
}

TEST(CalibrateDesign, PlansMakeCallsOfTheDocumentedWork) {
  std::map<std::string, std::map<std::string, std::pair<int, plan::Work>>>
      work;
  for (const char *name : {"small", "mid", "small-mb1", "small-mb8"})
    work[name] = computeWork(test::compilePlan(calibrationJob(model(name), 1)));
  // The small model at micro-batches of 1 and 8: the same calls, of half
  // and four times the small one's tokens; every matrix product's work is
  // in proportion to its tokens.
  for (const char *kernel : {"LINEAR", "LINEAR_GRAD_INPUT",
                             "LINEAR_GRAD_WEIGHT"}) {
    SCOPED_TRACE(kernel);
    double small = workPerCall(work["small"], kernel);
    ASSERT_GT(small, 0);
    EXPECT_EQ(work["small-mb1"][kernel].first, work["small"][kernel].first);
    EXPECT_EQ(work["small-mb8"][kernel].first, work["small"][kernel].first);
    EXPECT_DOUBLE_EQ(workPerCall(work["small-mb1"], kernel), small / 2);
    EXPECT_DOUBLE_EQ(workPerCall(work["small-mb8"], kernel), small * 4);
  }
  // The mid model: 4 times the tokens (twice the sequence, twice the
  // micro-batch) and 4 times the width, so that its calls do at least the
  // tokens' 4 times (those over the fixed vocabulary) and at most 4 x 4^2
  // times (hidden x hidden products) the small one's work: the two runs
  // of every compute kernel tell its overhead from its rate.
  const double tokens = double(model("mid").seq * model("mid").microBatch) /
                        double(model("small").seq * model("small").microBatch);
  const double width = double(model("mid").hidden) / model("small").hidden;
  ASSERT_EQ(tokens, 4);
  ASSERT_EQ(width, 4);
  ASSERT_EQ(work["mid"].size(), work["small"].size());
  for (const auto &[kernel, calls] : work["small"]) {
    SCOPED_TRACE(kernel);
    double small = workPerCall(work["small"], kernel);
    if (small <= 0)
      continue; // no work to divide (a kernel of no FLOPs nor bytes)
    double ratio = workPerCall(work["mid"], kernel) / small;
    EXPECT_GE(ratio, tokens * 0.99);
    EXPECT_LE(ratio, tokens * width * width * 1.01);
  }
  // RMS_NORM reads and writes the tokens' hidden vectors (and its weight):
  // tokens x width.
  EXPECT_NEAR(workPerCall(work["mid"], "RMS_NORM") /
                  workPerCall(work["small"], "RMS_NORM"),
              tokens * width, tokens * width * 0.01);
}

TEST(CalibrateDesign, ParallelPlansHaveTheirMeshAndStages) {
  plan::Plan tp = test::compilePlan(calibrationJob(model("small-tp2"), 2));
  EXPECT_EQ(plan::AxisSize(tp.mesh(), "tp"), 2);
  EXPECT_EQ(plan::WorldSize(tp), 2);
  plan::Plan pp = test::compilePlan(calibrationJob(model("small-pp2"), 4));
  EXPECT_EQ(plan::WorldSize(pp), 4);
  EXPECT_EQ(plan::AxisSize(pp.mesh(), "pp"), 2);
  EXPECT_EQ(plan::AxisSize(pp.mesh(), "dp"), 2);
  EXPECT_EQ(pp.pipeline().schedule(), "1f1b");
  ASSERT_EQ(pp.pipeline().stages_size(), 2);
  for (const plan::Stage &stage : pp.pipeline().stages())
    EXPECT_EQ(stage.num_layers(), 1);
  EXPECT_EQ(pp.training().micro_batches(), 4);
}

/// A run as "kind model ranks threads steps round/rounds".
std::string describe(const CalibrationRun &run) {
  return llvm::formatv("{0} {1} {2} {3} {4} {5}/{6}",
                       run.kind == CalibrationRun::kProfile ? "profile"
                                                            : "collectives",
                       kCalibrationModels[run.model].name, run.ranks,
                       run.threads, run.steps, run.round, run.rounds)
      .str();
}

TEST(CalibrateDesign, RunsRoundByRound) {
  CalibrateOptions options;
  options.rankCounts = {1, 2};
  options.steps = 3;
  options.repeats = 2;
  options.cores = 4;
  std::vector<std::string> runs;
  for (const CalibrationRun &run : calibrationRuns(options))
    runs.push_back(describe(run));
  // Each round: the rank counts in order, for each its models' profiles and
  // then (2 ranks or more) the collectives on the mid model's plan; the
  // cores shared out among the ranks.
  std::vector<std::string> expected;
  for (int round = 1; round <= 2; ++round) {
    std::string r = " 3 " + std::to_string(round) + "/2";
    for (const char *name : {"small", "mid", "small-mb1", "small-mb8"})
      expected.push_back(std::string("profile ") + name + " 1 4" + r);
    for (const char *name : {"small", "mid", "small-mb1", "small-mb8",
                             "small-tp2", "small-pp2"})
      expected.push_back(std::string("profile ") + name + " 2 2" + r);
    expected.push_back("collectives mid 2 2" + r);
  }
  EXPECT_EQ(runs, expected);
}

TEST(CalibrateDesign, ThreadsPerRank) {
  CalibrateOptions options;
  options.cores = 4;
  EXPECT_EQ(threadsPerRank(options, 1), 4);
  EXPECT_EQ(threadsPerRank(options, 2), 2);
  EXPECT_EQ(threadsPerRank(options, 3), 1);
  EXPECT_EQ(threadsPerRank(options, 8), 1); // at least one
  options.threads = 3;                      // given: every rank count's
  EXPECT_EQ(threadsPerRank(options, 1), 3);
  EXPECT_EQ(threadsPerRank(options, 8), 3);
}

TEST(CalibrateDesign, RefusesOptionsOutOfRange) {
  auto refusal = [](void (*change)(CalibrateOptions &)) {
    CalibrateOptions options;
    change(options);
    llvm::Error e = checkOptions(options);
    return e ? llvm::toString(std::move(e)) : std::string();
  };
  EXPECT_EQ(refusal([](CalibrateOptions &) {}), "");
  EXPECT_EQ(refusal([](CalibrateOptions &o) { o.rankCounts.clear(); }),
            "a calibration needs at least one rank count");
  EXPECT_EQ(refusal([](CalibrateOptions &o) { o.rankCounts = {0, 2}; }),
            "rank count 0 is not positive");
  EXPECT_EQ(refusal([](CalibrateOptions &o) { o.rankCounts = {2, 1}; }),
            "the rank counts are not ascending and distinct (2 before 1)");
  EXPECT_EQ(refusal([](CalibrateOptions &o) { o.rankCounts = {2, 2}; }),
            "the rank counts are not ascending and distinct (2 before 2)");
  EXPECT_EQ(refusal([](CalibrateOptions &o) { o.steps = 1; }),
            "steps 1 is below 2 (the first step warms up and is not "
            "measured)");
  EXPECT_EQ(refusal([](CalibrateOptions &o) { o.repeats = 0; }),
            "repeats 0 is not positive");
  EXPECT_EQ(refusal([](CalibrateOptions &o) { o.threads = -1; }),
            "threads per rank -1 is negative (0: the cores shared out)");
  EXPECT_EQ(refusal([](CalibrateOptions &o) { o.cores = 0; }),
            "the machine's cores 0 are not positive");
}

// The known machine of FakeRunner: three compute kernels, a link, a time
// per step outside the kernels.
struct FakeKernel {
  const char *name;
  bool matrix;             ///< FLOPs, or bytes
  double rate, overhead;   ///< on one rank: FLOP/s or B/s; s a call
  double callsPerStep;
};
constexpr FakeKernel kFakeKernels[] = {
    {"LINEAR", true, 4e10, 3e-6, 10},
    {"RMS_NORM", false, 6e9, 2e-6, 5},
    {"GRAD_NORM", false, 3e9, 4e-6, 1},
};
constexpr double kBandwidth = 2e9, kLatency = 5e-6; // B/s, s
constexpr double kStepOverhead = 1e-3;              // s a step, the least

/// The work of one call of `kernel` in a run of `m`: LINEAR 2 x hidden^2
/// x tokens FLOPs, RMS_NORM 8 x hidden x tokens bytes, GRAD_NORM 4 x
/// hidden^2 bytes; tensor parallelism splits each over its ranks, the
/// pipeline splits GRAD_NORM's parameters over its stages.
double fakeWork(const FakeKernel &kernel, const CalibrationModel &m) {
  const double hidden = double(m.hidden), tokens = double(m.seq * m.microBatch);
  std::string name = kernel.name;
  if (name == "LINEAR")
    return 2 * hidden * hidden * tokens / double(m.tp);
  if (name == "RMS_NORM")
    return 8 * hidden * tokens / double(m.tp);
  return 4 * hidden * hidden / double(m.tp * m.pp);
}

/// Reports what a machine of known rates, link and step overhead measures:
/// each run's kernels at the rates over the ranks (which share the
/// machine), but GRAD_NORM 100 times slower in the tensor-parallel and
/// pipeline runs (its all-reduce waits for the other shards or stages);
/// step times with the kernels' seconds and kStepOverhead times one more
/// than the model's index; in round 2 of 3, everything three times slower
/// (the medians leave it out). Records the calls made.
class FakeRunner : public CalibrationRunner {
public:
  std::vector<std::string> calls;
  std::set<std::pair<int, int64_t>> kept;
  std::vector<std::string> runs;

  llvm::Expected<plan::Plan> compile(const spec::JobSpec &job) override {
    calls.push_back("compile");
    return test::compilePlan(job);
  }
  llvm::Error keepPlan(int model, int64_t ranks,
                       const plan::Plan &plan) override {
    calls.push_back("keep");
    EXPECT_EQ(plan::WorldSize(plan), ranks);
    kept.insert({model, ranks});
    return llvm::Error::success();
  }
  llvm::Expected<RunOutput> run(const CalibrationRun &run) override {
    calls.push_back("run");
    runs.push_back(describe(run));
    double slow = run.round == 2 ? 3 : 1;
    std::string source = "run-" + std::to_string(runs.size()) + ".json";
    if (run.kind == CalibrationRun::kCollectives) {
      std::string points;
      for (double bytes : {1e3, 1e4, 1e5, 1e6, 1e7}) {
        double n = double(run.ranks);
        double seconds = 2 * (n - 1) / n * bytes / kBandwidth +
                         2 * (n - 1) * kLatency;
        points += llvm::formatv("{0}[{1}, {2}]", points.empty() ? "" : ", ",
                                num(bytes), num(seconds * slow))
                      .str();
      }
      return RunOutput{llvm::formatv("{{\"ranks\": {0}, \"all_reduce\": [{1}]}",
                                     run.ranks, points)
                           .str(),
                       source};
    }
    const CalibrationModel &m = kCalibrationModels[run.model];
    // Totals over the profiled steps (all but the first).
    const double steps = double(run.steps - 1);
    const bool waits = m.tp > 1 || m.pp > 1;
    std::string kernels;
    double seconds = 0;
    for (const FakeKernel &k : kFakeKernels) {
      double calls = k.callsPerStep * steps, work = calls * fakeWork(k, m);
      double time = calls * k.overhead + work / (k.rate / double(run.ranks));
      if (waits && std::string(k.name) == "GRAD_NORM")
        time *= 100;
      seconds += time;
      kernels += llvm::formatv(
                     "{0}\"{1}\": {{\"seconds\": {2}, \"calls\": {3}, "
                     "\"flops\": {4}, \"bytes\": {5}}",
                     kernels.empty() ? "" : ", ", k.name, num(time * slow),
                     num(calls), num(k.matrix ? work : 0),
                     num(k.matrix ? 0 : work))
                     .str();
    }
    double step = seconds / steps + kStepOverhead * (run.model + 1);
    std::string times;
    for (int s = 0; s < run.steps - 1; ++s)
      times += (s ? ", " : "") + num(step * slow);
    return RunOutput{
        llvm::formatv("{{\"world_size\": {0}, \"threads\": {1}, "
                      "\"steps\": {2}, \"step_time_s\": [{3}], \"ranks\": "
                      "[{{\"rank\": 0, \"kernels\": {{{4}}}]}",
                      run.ranks, run.threads, run.steps - 1, times, kernels)
            .str(),
        source};
  }
};

CalibrateOptions fitOptions() {
  CalibrateOptions options;
  options.rankCounts = {1, 2};
  options.steps = 3;
  options.repeats = 3;
  options.cores = 2;
  options.memoryBytes = int64_t(8) << 30;
  return options;
}

const spec::KernelRate *rateOf(const spec::Calibration &c,
                               const std::string &kernel) {
  for (const spec::KernelRate &r : c.kernels())
    if (r.kernel() == kernel)
      return &r;
  return nullptr;
}

TEST(CalibrateExperiment, FitsTheMachineThatWasMeasured) {
  CalibrateOptions options = fitOptions();
  FakeRunner runner;
  llvm::Expected<std::vector<RankCalibration>> measured =
      measure(options, runner);
  ASSERT_TRUE(bool(measured)) << llvm::toString(measured.takeError());
  // Every plan compiled and kept before the first run; then the runs of
  // calibrationRuns, in order.
  std::vector<std::string> runs;
  for (const CalibrationRun &run : calibrationRuns(options))
    runs.push_back(describe(run));
  EXPECT_EQ(runner.runs, runs);
  size_t plans = 4 + 6; // the models on 1 rank, then on 2
  ASSERT_EQ(runner.calls.size(), 2 * plans + runs.size());
  for (size_t i = 0; i < runner.calls.size(); ++i)
    EXPECT_EQ(runner.calls[i],
              i < 2 * plans ? (i % 2 ? "keep" : "compile") : "run")
        << i;
  EXPECT_EQ(runner.kept.size(), plans);
  EXPECT_TRUE(runner.kept.count({kPipelineModel, 2}));
  EXPECT_FALSE(runner.kept.count({kPipelineModel, 1}));

  ASSERT_EQ(measured->size(), 2u);
  EXPECT_EQ((*measured)[0].ranks, 1);
  EXPECT_EQ((*measured)[0].threads, 2);
  EXPECT_EQ((*measured)[1].threads, 1);
  EXPECT_EQ((*measured)[1].runs[kPipelineModel].size(), 3u); // 3 rounds
  EXPECT_TRUE((*measured)[0].stepTimes[kPipelineModel].empty());

  ASSERT_FALSE(bool(fitRates(*measured)));
  EXPECT_FALSE((*measured)[0].link); // no collectives on 1 rank
  ASSERT_TRUE((*measured)[1].link);
  EXPECT_NEAR((*measured)[1].link->bandwidth(), kBandwidth, kBandwidth * 1e-6);
  EXPECT_NEAR((*measured)[1].link->latency(), kLatency, kLatency * 1e-6);

  llvm::Expected<spec::Cluster> cluster = fitCluster(*measured, options);
  ASSERT_TRUE(bool(cluster)) << llvm::toString(cluster.takeError());
  // One node of the most ranks measured, the memory shared out among them.
  EXPECT_EQ(cluster->name(), "local-cpu");
  EXPECT_EQ(cluster->nodes(), 1);
  EXPECT_EQ(cluster->devices_per_node(), 2);
  EXPECT_EQ(cluster->memory_bytes(), options.memoryBytes / 2);
  // The peaks are the best kernel rates on 1 rank (the median rounds'):
  // LINEAR's FLOPs, RMS_NORM's bytes; the link the most ranks'.
  EXPECT_NEAR(cluster->peak_flops_fp32(), kFakeKernels[0].rate,
              kFakeKernels[0].rate * 1e-6);
  EXPECT_EQ(cluster->peak_flops_bf16(), cluster->peak_flops_fp32());
  EXPECT_NEAR(cluster->memory_bandwidth(), kFakeKernels[1].rate,
              kFakeKernels[1].rate * 1e-6);
  EXPECT_NEAR(cluster->intra_node().bandwidth(), kBandwidth, kBandwidth * 1e-6);
  ASSERT_EQ(cluster->calibrations_size(), 2);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const spec::Calibration &cal = cluster->calibrations(i);
    EXPECT_EQ(cal.ranks_per_node(), i + 1);
    EXPECT_EQ(cal.threads_per_rank(), (*measured)[size_t(i)].threads);
    EXPECT_EQ(cal.cores(), 2);
    EXPECT_EQ(cal.has_intra_node(), i == 1);
    const double shared = i + 1;
    for (const FakeKernel &k : kFakeKernels) {
      SCOPED_TRACE(k.name);
      const spec::KernelRate *rate = rateOf(cal, k.name);
      ASSERT_TRUE(rate);
      // The rate and overhead of the small and mid runs.
      EXPECT_NEAR(k.matrix ? rate->flops_per_s() : rate->bytes_per_s(),
                  k.rate / shared, k.rate * 1e-6);
      EXPECT_NEAR(rate->overhead_s(), k.overhead, 1e-12);
      // A measured call per work of the models that ran, but GRAD_NORM's
      // of the tensor-parallel and pipeline runs.
      std::map<double, double> expected;
      for (const CalibrationModel &m : kCalibrationModels)
        if (runsOn(m, i + 1) &&
            (std::string(k.name) != "GRAD_NORM" || m.tp * m.pp == 1))
          expected[fakeWork(k, m)] =
              k.overhead + fakeWork(k, m) / (k.rate / shared);
      ASSERT_EQ(size_t(rate->calls_size()), expected.size());
      int c = 0;
      for (auto [work, seconds] : expected) {
        EXPECT_DOUBLE_EQ(rate->calls(c).work(), work);
        EXPECT_NEAR(rate->calls(c).seconds(), seconds, seconds * 1e-9);
        ++c;
      }
    }
    // The step outside the kernels: the least of the models' (the small
    // one's).
    EXPECT_NEAR(cal.step_overhead_s(), kStepOverhead, 1e-9);
    EXPECT_GE(cal.collective_wait_s(), 0);
    EXPECT_GE(cal.collective_gap_share(), 0);
    EXPECT_GE(cal.waiting_core_share(), 0);
    EXPECT_LE(cal.waiting_core_share(), 1);
  }

  // The file: a comment naming the flags, then the cluster as text.
  llvm::Expected<std::string> text = clusterFileText(*cluster, options);
  ASSERT_TRUE(bool(text)) << llvm::toString(text.takeError());
  EXPECT_EQ(text->rfind("# This machine's CPU ranks as `braid calibrate "
                        "--ranks 1,2 --steps 3 --repeats 3` measured them\n",
                        0),
            0u);
  spec::Cluster read;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(*text, &read));
  EXPECT_EQ(read.SerializeAsString(), cluster->SerializeAsString());

  // The summary: each rank count's rates, and a line per model it ran.
  std::string summary;
  llvm::raw_string_ostream os(summary);
  ASSERT_FALSE(bool(printSummary(os, *measured, *cluster)));
  EXPECT_NE(summary.find("\n1 rank x 2 threads\n"), std::string::npos);
  EXPECT_NE(summary.find("\n2 ranks x 1 thread\n"), std::string::npos);
  EXPECT_NE(summary.find("  link "), std::string::npos);
  size_t steps = 0;
  for (size_t at = summary.find("step of the "); at != std::string::npos;
       at = summary.find("step of the ", at + 1))
    ++steps;
  EXPECT_EQ(steps, plans);
  EXPECT_NE(summary.find("step of the small-pp2 model: measured"),
            std::string::npos);
}

TEST(CalibrateExperiment, NoLinkWithoutSeveralRanks) {
  CalibrateOptions options = fitOptions();
  options.rankCounts = {1};
  options.repeats = 1;
  FakeRunner runner;
  llvm::Expected<std::vector<RankCalibration>> measured =
      measure(options, runner);
  ASSERT_TRUE(bool(measured)) << llvm::toString(measured.takeError());
  for (const std::string &run : runner.runs)
    EXPECT_EQ(run.rfind("collectives", 0), std::string::npos) << run;
  ASSERT_FALSE(bool(fitRates(*measured)));
  llvm::Expected<spec::Cluster> cluster = fitCluster(*measured, options);
  ASSERT_TRUE(bool(cluster)) << llvm::toString(cluster.takeError());
  EXPECT_FALSE(cluster->has_intra_node());
  EXPECT_EQ(cluster->devices_per_node(), 1);
}

/// A runner whose compile, plan or runs fail, or whose output does not
/// parse, as `failure` says.
class FailingRunner : public FakeRunner {
public:
  explicit FailingRunner(std::string failure) : failure(std::move(failure)) {}
  llvm::Expected<plan::Plan> compile(const spec::JobSpec &job) override {
    if (failure == "compile")
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "no such preset");
    return FakeRunner::compile(job);
  }
  llvm::Expected<RunOutput> run(const CalibrationRun &run) override {
    if (failure == "run")
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "`mpirun ...` exited with 1");
    llvm::Expected<RunOutput> out = FakeRunner::run(run);
    if (out && failure == "profile" && run.kind == CalibrationRun::kProfile)
      out->text = "{\"step_time_s\": [1]}";
    if (out && failure == "bench" && run.kind == CalibrationRun::kCollectives)
      out->text = "{\"ranks\": 2}";
    return out;
  }
  std::string failure;
};

std::string measureError(const std::string &failure) {
  CalibrateOptions options = fitOptions();
  options.repeats = 1;
  FailingRunner runner(failure);
  llvm::Expected<std::vector<RankCalibration>> measured =
      measure(options, runner);
  return measured ? std::string() : llvm::toString(measured.takeError());
}

TEST(CalibrateExperiment, ErrorsNameWhatFailed) {
  EXPECT_EQ(measureError("compile"), "compiling the small calibration model "
                                     "for 1 ranks: no such preset");
  EXPECT_EQ(measureError("run"), "`mpirun ...` exited with 1");
  EXPECT_EQ(measureError("profile"),
            "run-1.json: the profile has no \"ranks\" (an array of each "
            "rank's kernels)");
  // The first collectives run is the 11th: 4 models on 1 rank, 6 on 2.
  EXPECT_EQ(measureError("bench"),
            "run-11.json: the collectives' times have no \"all_reduce\" "
            "array");
  // Options out of range, before anything runs.
  CalibrateOptions options;
  options.steps = 1;
  FakeRunner runner;
  llvm::Expected<std::vector<RankCalibration>> measured =
      measure(options, runner);
  ASSERT_FALSE(bool(measured));
  llvm::consumeError(measured.takeError());
  EXPECT_TRUE(runner.calls.empty());
  // Nothing measured, nothing to fit; a cluster that does not match the
  // measurements, no summary.
  llvm::Expected<spec::Cluster> none = fitCluster({}, options);
  ASSERT_FALSE(bool(none));
  EXPECT_EQ(llvm::toString(none.takeError()),
            "no rank count was measured: there is nothing to fit a cluster "
            "to");
  std::vector<RankCalibration> one(1);
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::Error e = printSummary(os, one, spec::Cluster());
  EXPECT_EQ(llvm::toString(std::move(e)),
            "the cluster has 0 calibrations for 1 rank counts measured "
            "(expected one each)");
}

} // namespace
