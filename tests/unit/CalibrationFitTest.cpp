//===- CalibrationFitTest.cpp - braid calibrate's fits --------------------===//
//
// Measurements made from known rates, overheads and links must give them
// back; degenerate and noisy ones must fall back as documented rather than
// give negative or infinite speeds.
//
//===----------------------------------------------------------------------===//

#include "compiler/CalibrationFit.h"

#include "gtest/gtest.h"

using namespace braid;
using namespace braid::calibration;

namespace {

/// calls x overhead + work / rate.
double seconds(double calls, double work, double rate, double overhead) {
  return calls * overhead + work / rate;
}

/// A kernel rate with these measured calls (work, seconds), in order.
spec::KernelRate
measuredCalls(std::initializer_list<std::pair<double, double>> calls) {
  spec::KernelRate rate;
  for (auto [work, seconds] : calls) {
    spec::KernelRate::CallTime *call = rate.add_calls();
    call->set_work(work);
    call->set_seconds(seconds);
  }
  return rate;
}

const spec::KernelRate *find(const std::vector<spec::KernelRate> &rates,
                             const std::string &kernel) {
  for (const spec::KernelRate &r : rates)
    if (r.kernel() == kernel)
      return &r;
  return nullptr;
}

TEST(CalibrationFit, RateAndOverheadOfTwoRuns) {
  // 30 calls of 1e6 FLOPs, then 30 calls of 2.7e7 (a larger model), at
  // 5e10 FLOP/s and 4 us a call.
  RateFit fit = fitRate(30, 3e7, seconds(30, 3e7, 5e10, 4e-6), 30, 8.1e8,
                        seconds(30, 8.1e8, 5e10, 4e-6));
  EXPECT_TRUE(fit.solved);
  EXPECT_NEAR(fit.rate, 5e10, 5e10 * 1e-9);
  EXPECT_NEAR(fit.overhead, 4e-6, 1e-15);
  // Different numbers of calls (more micro-batches in one run) too.
  fit = fitRate(10, 1e6, seconds(10, 1e6, 2e9, 1e-5), 40, 9e7,
                seconds(40, 9e7, 2e9, 1e-5));
  EXPECT_TRUE(fit.solved);
  EXPECT_NEAR(fit.rate, 2e9, 2e9 * 1e-9);
  EXPECT_NEAR(fit.overhead, 1e-5, 1e-14);
}

TEST(CalibrationFit, DegenerateFallsBackToTheMidRun) {
  // Each call does the same work in both runs: the split is undetermined.
  RateFit fit = fitRate(10, 1e6, 1e-3, 20, 2e6, 2.2e-3);
  EXPECT_FALSE(fit.solved);
  EXPECT_EQ(fit.overhead, 0);
  EXPECT_DOUBLE_EQ(fit.rate, 2e6 / 2.2e-3);
  // Times that shrink as the work grows: a negative rate, refused.
  fit = fitRate(10, 1e6, 2e-3, 10, 1e8, 1e-3);
  EXPECT_FALSE(fit.solved);
  EXPECT_EQ(fit.overhead, 0);
  EXPECT_DOUBLE_EQ(fit.rate, 1e8 / 1e-3);
  // Times that grow faster than the work: a negative overhead, clamped.
  fit = fitRate(10, 1e6, 1e-4, 10, 1e7, 1e-2);
  EXPECT_FALSE(fit.solved);
  EXPECT_EQ(fit.overhead, 0);
  EXPECT_DOUBLE_EQ(fit.rate, 1e7 / 1e-2);
  // Nothing measured: no rate.
  EXPECT_EQ(fitRate(0, 1, 1, 1, 1, 1).rate, 0);
  EXPECT_EQ(fitRate(1, 1, 1, 1, 1, 0).rate, 0);
}

TEST(CalibrationFit, KernelRatesAndDefault) {
  KernelSamples small, mid;
  // A matrix kernel (FLOP/s), two element-wise kernels (B/s), a collective
  // (not a kernel rate) and one called once (folded into "default").
  small["LINEAR"] = {seconds(30, 3e7, 4e10, 2e-6), 30, 3e7, 1e6};
  mid["LINEAR"] = {seconds(30, 8e8, 4e10, 2e-6), 30, 8e8, 9e6};
  small["RMS_NORM"] = {seconds(10, 4e5, 3e9, 1e-6), 10, 1e5, 4e5};
  mid["RMS_NORM"] = {seconds(10, 4e6, 3e9, 1e-6), 10, 1e6, 4e6};
  small["ADD"] = {seconds(20, 1e6, 5e9, 5e-7), 20, 1e5, 1e6};
  mid["ADD"] = {seconds(20, 1.2e7, 5e9, 5e-7), 20, 1e6, 1.2e7};
  small["ALL_REDUCE"] = {1e-3, 2, 0, 1e6};
  mid["ALL_REDUCE"] = {5e-3, 2, 0, 1e7};
  small["CROSS_ENTROPY"] = {seconds(1, 1e5, 3e9, 1e-6), 1, 4e5, 1e5};
  mid["CROSS_ENTROPY"] = {seconds(1, 1e6, 3e9, 1e-6), 1, 4e6, 1e6};
  std::vector<spec::KernelRate> rates = fitKernelRates(small, mid);
  ASSERT_EQ(rates.size(), 4u) << "LINEAR, RMS_NORM, ADD, default";
  const spec::KernelRate *linear = find(rates, "LINEAR");
  ASSERT_TRUE(linear);
  EXPECT_NEAR(linear->flops_per_s(), 4e10, 4e10 * 1e-9);
  EXPECT_EQ(linear->bytes_per_s(), 0);
  EXPECT_NEAR(linear->overhead_s(), 2e-6, 1e-15);
  const spec::KernelRate *norm = find(rates, "RMS_NORM");
  ASSERT_TRUE(norm);
  EXPECT_EQ(norm->flops_per_s(), 0);
  EXPECT_NEAR(norm->bytes_per_s(), 3e9, 3e9 * 1e-9);
  EXPECT_NEAR(norm->overhead_s(), 1e-6, 1e-15);
  EXPECT_FALSE(find(rates, "ALL_REDUCE"));
  EXPECT_FALSE(find(rates, "CROSS_ENTROPY"));
  const spec::KernelRate *fallback = find(rates, "default");
  ASSERT_TRUE(fallback);
  // One matrix kernel: its rate. The element-wise ones pooled: a rate
  // between theirs (3e9 and 5e9 B/s), a positive overhead.
  EXPECT_NEAR(fallback->flops_per_s(), 4e10, 4e10 * 1e-9);
  EXPECT_GT(fallback->bytes_per_s(), 3e9);
  EXPECT_LT(fallback->bytes_per_s(), 5e9);
  EXPECT_GT(fallback->overhead_s(), 0);
  // Kernels of one run only get no rate of their own.
  mid.erase("RMS_NORM");
  EXPECT_FALSE(find(fitKernelRates(small, mid), "RMS_NORM"));
}

TEST(CalibrationFit, CallTimesOfEveryRun) {
  // LINEAR in three runs: 30 calls of 1e6 FLOPs in 30 ms (1 ms a call), 60
  // calls of 5e5 in 36 ms (0.6 ms), 10 calls of 4e6 in 25 ms (2.5 ms); a
  // fourth run with the same work per call as the first, at 1.2 ms a call,
  // is averaged with it (1.1 ms). RMS_NORM's calls count bytes; a run that
  // called it once says nothing; "default" gets no calls.
  KernelSamples a, b, c, d;
  a["LINEAR"] = {0.030, 30, 3e7, 1e5};
  b["LINEAR"] = {0.036, 60, 3e7, 1e5};
  c["LINEAR"] = {0.025, 10, 4e7, 1e5};
  d["LINEAR"] = {0.036, 30, 3e7, 1e5};
  a["RMS_NORM"] = {0.002, 10, 1e5, 4e5};
  b["RMS_NORM"] = {0.003, 10, 1e5, 8e5};
  c["RMS_NORM"] = {0.001, 1, 1e5, 4e6};
  std::vector<spec::KernelRate> rates(3);
  rates[0].set_kernel("LINEAR");
  rates[1].set_kernel("RMS_NORM");
  rates[2].set_kernel("default");
  addCallTimes(rates, {&a, &b, &c, &d});
  ASSERT_EQ(rates[0].calls_size(), 3);
  EXPECT_DOUBLE_EQ(rates[0].calls(0).work(), 5e5);
  EXPECT_DOUBLE_EQ(rates[0].calls(0).seconds(), 0.6e-3);
  EXPECT_DOUBLE_EQ(rates[0].calls(1).work(), 1e6);
  EXPECT_DOUBLE_EQ(rates[0].calls(1).seconds(), 1.1e-3);
  EXPECT_DOUBLE_EQ(rates[0].calls(2).work(), 4e6);
  EXPECT_DOUBLE_EQ(rates[0].calls(2).seconds(), 2.5e-3);
  ASSERT_EQ(rates[1].calls_size(), 2);
  EXPECT_DOUBLE_EQ(rates[1].calls(0).work(), 4e4);
  EXPECT_DOUBLE_EQ(rates[1].calls(0).seconds(), 2e-4);
  EXPECT_DOUBLE_EQ(rates[1].calls(1).work(), 8e4);
  EXPECT_DOUBLE_EQ(rates[1].calls(1).seconds(), 3e-4);
  EXPECT_EQ(rates[2].calls_size(), 0);
}

TEST(CalibrationFit, InterpolatesBetweenMeasuredCalls) {
  // Calls of 1e6, 2e6 and 8e6 measured at 1, 1.5 and 3 ms.
  spec::KernelRate rate =
      measuredCalls({{1e6, 1e-3}, {2e6, 1.5e-3}, {8e6, 3e-3}});
  // At a measured call, its time; between two, on the line through them.
  EXPECT_DOUBLE_EQ(interpolateCall(rate, 2e6), 1.5e-3);
  EXPECT_DOUBLE_EQ(interpolateCall(rate, 1.5e6), 1.25e-3);
  EXPECT_DOUBLE_EQ(interpolateCall(rate, 4e6), 1.5e-3 + 2e6 * 1.5e-3 / 6e6);
  // Below the calls, along the first two (0.5 ms a 1e6): 0.75 ms at 5e5.
  EXPECT_DOUBLE_EQ(interpolateCall(rate, 5e5), 0.75e-3);
  // Above them, along the last two: 16e6 is 8e6 past 8e6, 2 ms more.
  EXPECT_DOUBLE_EQ(interpolateCall(rate, 16e6), 5e-3);
  // Where the first line reaches no time (its intercept is 0.5 ms, so it
  // never does here; one steeper than proportional does): 1e6 at 1 ms and
  // 2e6 at 4 ms give -1 ms at 0; at 2e5, 1 ms x 0.2 in proportion.
  spec::KernelRate steep = measuredCalls({{1e6, 1e-3}, {2e6, 4e-3}});
  EXPECT_DOUBLE_EQ(interpolateCall(steep, 2e5), 0.2e-3);
  // A segment that falls with the work (1e6 at 4 ms, 2e6 at 1 ms): below
  // the calls no slower than the smallest, 4 ms (not 5.5 ms at 5e5), above
  // them no faster than the largest, 1 ms (not 0 at 2 1/3 e6 and below
  // beyond), between them on the line.
  spec::KernelRate falling = measuredCalls({{1e6, 4e-3}, {2e6, 1e-3}});
  EXPECT_DOUBLE_EQ(interpolateCall(falling, 5e5), 4e-3);
  EXPECT_DOUBLE_EQ(interpolateCall(falling, 1.5e6), 2.5e-3);
  EXPECT_DOUBLE_EQ(interpolateCall(falling, 3e6), 1e-3);
  // Fewer than two calls: nothing to interpolate.
  steep.mutable_calls()->RemoveLast();
  EXPECT_EQ(interpolateCall(steep, 1e6), -1);
}

TEST(CalibrationFit, AllReduceLink) {
  // 4 ranks at 2 GB/s and 20 us per ring step: 4 KB .. 16 MB.
  std::vector<std::pair<double, double>> points;
  for (double bytes = 4096; bytes <= 16 << 20; bytes *= 4)
    points.push_back({bytes, 2 * 3.0 / 4 * bytes / 2e9 + 2 * 3 * 20e-6});
  llvm::Expected<spec::LinkClass> link = fitAllReduceLink(4, points);
  ASSERT_TRUE(bool(link)) << llvm::toString(link.takeError());
  EXPECT_NEAR(link->bandwidth(), 2e9, 2e9 * 1e-6);
  EXPECT_NEAR(link->latency(), 20e-6, 1e-12);

  // Times below what the bandwidth alone allows at small sizes: the
  // latency would be negative; it is 0 and the bandwidth refitted.
  points = {{4096, 1e-7}, {1 << 20, 1e-3}, {16 << 20, 1.6e-2}};
  link = fitAllReduceLink(2, points);
  ASSERT_TRUE(bool(link)) << llvm::toString(link.takeError());
  EXPECT_EQ(link->latency(), 0);
  EXPECT_GT(link->bandwidth(), 0);
}

TEST(CalibrationFit, AllReduceLinkErrors) {
  auto message = [](llvm::Expected<spec::LinkClass> link) {
    return link ? std::string("no error") : llvm::toString(link.takeError());
  };
  EXPECT_EQ(message(fitAllReduceLink(1, {{1, 1}, {2, 2}})),
            "an all-reduce of 1 rank(s) moves nothing: a link needs at least "
            "2 ranks");
  EXPECT_EQ(message(fitAllReduceLink(2, {{4096, 1e-5}})),
            "fitting a link's bandwidth and latency needs all-reduce times of "
            "at least 2 sizes, not 1");
  EXPECT_EQ(message(fitAllReduceLink(2, {{4096, 1e-5}, {4096, 2e-5}})),
            "the all-reduce times are all of one size: fitting a bandwidth "
            "and a latency needs at least 2 sizes");
  // Times that shrink with the size (noise): the largest size alone gives
  // the bandwidth, 2 (n-1)/n x 2^20 bytes in 1e-5 s, and no latency.
  llvm::Expected<spec::LinkClass> noisy =
      fitAllReduceLink(2, {{4096, 1e-3}, {1 << 20, 1e-5}});
  ASSERT_TRUE(bool(noisy)) << llvm::toString(noisy.takeError());
  EXPECT_DOUBLE_EQ(noisy->bandwidth(), double(1 << 20) / 1e-5);
  EXPECT_EQ(noisy->latency(), 0);
  EXPECT_NE(message(fitAllReduceLink(2, {{4096, 0}, {1 << 20, 1e-5}}))
                .find("must be positive"),
            std::string::npos);
}

TEST(CalibrationFit, ParseProfileMeansOverRanks) {
  llvm::Expected<KernelSamples> samples = parseProfile(
      R"({"world_size": 2, "steps": 2, "step_time_s": [0.5, 0.25],
          "ranks": [
            {"rank": 0, "kernels": {"LINEAR": {"seconds": 1, "calls": 4,
                                               "flops": 100, "bytes": 10}}},
            {"rank": 1, "kernels": {"LINEAR": {"seconds": 3, "calls": 4,
                                               "flops": 100, "bytes": 10},
                                    "ADD": {"seconds": 2, "calls": 2,
                                            "flops": 1, "bytes": 8}}}]})");
  ASSERT_TRUE(bool(samples)) << llvm::toString(samples.takeError());
  EXPECT_EQ((*samples)["LINEAR"].seconds, 2);
  EXPECT_EQ((*samples)["LINEAR"].calls, 4);
  EXPECT_EQ((*samples)["ADD"].seconds, 1);
  EXPECT_EQ((*samples)["ADD"].bytes, 4);

  llvm::Expected<std::vector<double>> times =
      parseStepTimes(R"({"step_time_s": [0.5, 0.25], "ranks": []})");
  ASSERT_TRUE(bool(times)) << llvm::toString(times.takeError());
  EXPECT_EQ(*times, (std::vector<double>{0.5, 0.25}));

  auto error = [](auto value) {
    return value ? std::string("no error") : llvm::toString(value.takeError());
  };
  EXPECT_EQ(error(parseProfile("[1]")), "the profile is not a JSON object");
  EXPECT_EQ(error(parseProfile(R"({"ranks": []})")),
            "the profile has no \"ranks\" (an array of each rank's kernels)");
  EXPECT_EQ(error(parseProfile(
                R"({"ranks": [{"kernels": {"ADD": {"seconds": 1}}}]})")),
            "kernel ADD of rank 0 of the profile has no non-negative \"calls\"");
  EXPECT_NE(error(parseProfile("{")).find("the profile is not JSON"),
            std::string::npos);
}

TEST(CalibrationFit, ParseAllReduceBench) {
  auto bench = parseAllReduceBench(
      R"({"ranks": 2, "dtype": "F32", "all_reduce": [[4096, 1e-5],
          [16384, 2e-5]], "all_gather": [], "reduce_scatter": []})");
  ASSERT_TRUE(bool(bench)) << llvm::toString(bench.takeError());
  EXPECT_EQ(bench->first, 2);
  ASSERT_EQ(bench->second.size(), 2u);
  EXPECT_EQ(bench->second[1].first, 16384);
  EXPECT_EQ(bench->second[1].second, 2e-5);
  auto missing = parseAllReduceBench(R"({"ranks": 2})");
  ASSERT_FALSE(bool(missing));
  EXPECT_EQ(llvm::toString(missing.takeError()),
            "the collectives' times have no \"all_reduce\" array");
}

TEST(CalibrationFit, StepOverheadIsTheMedianStepLessTheKernels) {
  // 3 profiled steps of 10, 12 and 30 ms (median 12 ms); the kernels took
  // 21 ms over them, 7 ms a step: 5 ms a step outside them.
  KernelSamples samples;
  samples["LINEAR"].seconds = 0.015;
  samples["ADD"].seconds = 0.006;
  EXPECT_NEAR(fitStepOverhead(samples, {0.010, 0.030, 0.012}), 0.005, 1e-12);
  // Kernels longer than the median step (noise): no negative overhead.
  samples["LINEAR"].seconds = 0.100;
  EXPECT_EQ(fitStepOverhead(samples, {0.010, 0.030, 0.012}), 0);
  EXPECT_EQ(fitStepOverhead(samples, {}), 0);
  // Two rounds of 3 steps each, the samples of one round (21 ms over its
  // 3 steps): the median of the 6 steps, 12 ms, less 7 ms.
  samples["LINEAR"].seconds = 0.015;
  EXPECT_NEAR(
      fitStepOverhead(samples, {0.010, 0.030, 0.012, 0.011, 0.012, 0.013}, 3),
      0.005, 1e-12);
}

TEST(CalibrationFit, MedianOfRepeatedRuns) {
  // Three rounds of one model: LINEAR took 3, 1 and 2 s (the median round
  // is the third, with its own calls and work); ADD ran in two rounds only:
  // the lower middle of two.
  KernelSamples a, b, c;
  a["LINEAR"] = {3, 10, 100, 0};
  b["LINEAR"] = {1, 10, 100, 0};
  c["LINEAR"] = {2, 11, 110, 0};
  a["ADD"] = {0.5, 4, 0, 40};
  c["ADD"] = {0.25, 4, 0, 40};
  KernelSamples median = medianRun({a, b, c});
  ASSERT_EQ(median.size(), 2u);
  EXPECT_EQ(median["LINEAR"].seconds, 2);
  EXPECT_EQ(median["LINEAR"].calls, 11);
  EXPECT_EQ(median["LINEAR"].flops, 110);
  EXPECT_EQ(median["ADD"].seconds, 0.25);
  EXPECT_TRUE(medianRun({}).empty());

  // The benchmarks: size by size.
  std::vector<std::pair<double, double>> x = {{1024, 3e-5}, {4096, 9e-5}},
                                         y = {{1024, 1e-5}, {4096, 7e-5}},
                                         z = {{1024, 2e-5}, {4096, 8e-5}};
  auto bench = medianBench({x, y, z});
  ASSERT_TRUE(bool(bench)) << llvm::toString(bench.takeError());
  ASSERT_EQ(bench->size(), 2u);
  EXPECT_EQ((*bench)[0], std::make_pair(1024.0, 2e-5));
  EXPECT_EQ((*bench)[1], std::make_pair(4096.0, 8e-5));
  auto shorter = medianBench({x, {{1024, 1e-5}}});
  ASSERT_FALSE(bool(shorter));
  EXPECT_EQ(llvm::toString(shorter.takeError()),
            "the repeated all-reduce benchmarks measured different sizes (2 "
            "and 1 sizes)");
  auto none = medianBench({});
  ASSERT_FALSE(bool(none));
  EXPECT_EQ(llvm::toString(none.takeError()),
            "no all-reduce benchmark to take the median of");
}

TEST(CalibrationFit, CollectiveWaitsSeparateCallsFromGaps) {
  // Two runs made from wait 0.2 ms per collective and peer and a quarter of
  // the gaps: a tensor-parallel one (40 collectives of one peer after 8 ms
  // of gaps: 8 + 2 = 10 ms beyond its priced 20 ms) and a data-parallel one
  // (2 peers after 40 ms: 0.4 + 10 ms beyond 50 ms). The fit finds both.
  CollectiveWaits w = fitCollectiveWaits(
      {{0.030, 0.020, 40, 0.008}, {0.0604, 0.050, 2, 0.040}});
  EXPECT_NEAR(w.wait, 2e-4, 1e-12);
  EXPECT_NEAR(w.gapShare, 0.25, 1e-9);
  // One run alone cannot tell them apart: the least-squares answer of the
  // single run is met exactly by one of them (wait 0.25 ms x 40 = 10 ms).
  w = fitCollectiveWaits({{0.030, 0.020, 40, 0}});
  EXPECT_NEAR(w.wait, 2.5e-4, 1e-12);
  EXPECT_EQ(w.gapShare, 0);
  // Steps priced above the measured ones: no negative waits.
  w = fitCollectiveWaits({{0.006, 0.010, 20, 0.004}, {0.05, 0.06, 2, 0.04}});
  EXPECT_EQ(w.wait, 0);
  EXPECT_EQ(w.gapShare, 0);
  // A data-parallel run slower than priced and a tensor-parallel run priced
  // right: the free solution would make the wait negative; the gap share
  // alone is kept (the dp run's 10 ms over its 40 ms of gaps, less what the
  // tp run's 8 ms of gaps then overprice, by least squares).
  w = fitCollectiveWaits({{0.020, 0.020, 40, 0.008}, {0.060, 0.050, 2, 0.040}});
  EXPECT_EQ(w.wait, 0);
  EXPECT_GT(w.gapShare, 0);
  EXPECT_LT(w.gapShare, 0.25);
  // Runs with neither peers nor gaps, or no step, are left out.
  w = fitCollectiveWaits({{0.030, 0.020, 0, 0}, {0, 0.01, 4, 0.01}});
  EXPECT_EQ(w.wait, 0);
  EXPECT_EQ(w.gapShare, 0);
}

TEST(CalibrationFit, WaitingShareInvertsThePricedStep) {
  // A priced step of 10 + 10 share ms: a measured 17.5 ms is share 0.75.
  int calls = 0;
  auto step = [&](double share) -> llvm::Expected<double> {
    ++calls;
    return 0.010 + 0.010 * share;
  };
  llvm::Expected<double> share = fitWaitingShare(step, 0.0175);
  ASSERT_TRUE(bool(share)) << llvm::toString(share.takeError());
  EXPECT_NEAR(*share, 0.75, 1e-8);
  EXPECT_LE(calls, 40);
  // Beyond either end: the end.
  EXPECT_EQ(*fitWaitingShare(step, 0.008), 0);
  EXPECT_EQ(*fitWaitingShare(step, 0.030), 1);
  // A step the share does not move: 0, whatever was measured.
  auto flat = [](double) -> llvm::Expected<double> { return 0.010; };
  EXPECT_EQ(*fitWaitingShare(flat, 0.030), 0);
  // The pricing's error comes back.
  auto failing = [](double) -> llvm::Expected<double> {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no such function");
  };
  llvm::Expected<double> failed = fitWaitingShare(failing, 0.010);
  ASSERT_FALSE(bool(failed));
  EXPECT_EQ(llvm::toString(failed.takeError()), "no such function");
}

} // namespace
