//===- ScheduleTest.cpp - Pipeline schedules and their timeline -----------===//
//
// The simulated bubbles must equal the closed forms of the papers: with
// uniform stages and no transfer time, GPipe and 1F1B idle every rank
// (p - 1)/(m + p - 1) of the step, which lasts (m + p - 1)(f + b) (Narayanan
// et al., "Efficient Large-Scale Language Model Training on GPU Clusters");
// the interleaved schedule with v chunks per rank idles (p - 1)/(v m + p - 1)
// (same paper, bubble (p - 1)/v of the chunk-sized work); ZB-H1 with
// F = B = W idles (p - 1) F, a third of 1F1B's (p - 1)(F + B + W) (Qi et
// al., "Zero Bubble Pipeline Parallelism", section 2.1).
//
//===----------------------------------------------------------------------===//

#include "compiler/Schedule.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <map>
#include <tuple>

using namespace braid::pipeline;

namespace {

Schedules schedule(Scheme scheme, int64_t p, int64_t m, int64_t v = 1) {
  llvm::Expected<Schedules> s = makeSchedule(scheme, p, m, v);
  if (!s) {
    ADD_FAILURE() << llvm::toString(s.takeError());
    return {};
  }
  return std::move(*s);
}

Timeline run(const Schedules &schedules, int64_t p, int64_t m, int64_t v,
             const Costs &costs) {
  llvm::Expected<Timeline> t = simulate(schedules, p, m, v, costs);
  if (!t) {
    ADD_FAILURE() << llvm::toString(t.takeError());
    return {};
  }
  return std::move(*t);
}

/// The message of the error `simulate` returns, or "" when it succeeds.
std::string simulateError(const Schedules &schedules, int64_t p, int64_t m,
                          int64_t v = 1) {
  llvm::Expected<Timeline> t =
      simulate(schedules, p, m, v, Costs::uniform(p, v, 1, 2));
  if (t)
    return "";
  return llvm::toString(t.takeError());
}

std::string makeError(Scheme scheme, int64_t p, int64_t m, int64_t v) {
  llvm::Expected<Schedules> s = makeSchedule(scheme, p, m, v);
  if (s)
    return "";
  return llvm::toString(s.takeError());
}

Step F(int64_t i, int64_t k = 0) { return {Work::Forward, i, k}; }
Step B(int64_t i, int64_t k = 0) { return {Work::Backward, i, k}; }
Step Bi(int64_t i, int64_t k = 0) { return {Work::BackwardInput, i, k}; }
Step Bw(int64_t i, int64_t k = 0) { return {Work::BackwardWeight, i, k}; }

const std::pair<double, double> kForwardBackward[] = {
    {1, 2}, {1.5, 1}, {2, 2}, {0.7, 1.3}};

//===----------------------------------------------------------------------===//
// Bubbles against the closed forms
//===----------------------------------------------------------------------===//

TEST(PipelineBubble, GPipeAndOneFOneBMatchTheClosedForm) {
  const std::pair<int64_t, int64_t> cases[] = {{1, 1}, {1, 4}, {2, 1}, {2, 5},
                                               {4, 2}, {4, 4}, {4, 8}, {3, 7},
                                               {8, 3}, {8, 8}, {8, 32}};
  for (Scheme scheme : {Scheme::GPipe, Scheme::OneFOneB}) {
    for (auto [p, m] : cases) {
      for (auto [f, b] : kForwardBackward) {
        SCOPED_TRACE(std::string(schemeName(scheme)) +
                     " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " f=" + std::to_string(f) + " b=" + std::to_string(b));
        Timeline t =
            run(schedule(scheme, p, m), p, m, 1, Costs::uniform(p, 1, f, b));
        ASSERT_EQ(t.bubble.size(), static_cast<size_t>(p));
        EXPECT_NEAR(t.stepTime, (m + p - 1) * (f + b),
                    1e-9 * (m + p) * (f + b));
        const double expected = double(p - 1) / double(m + p - 1);
        for (int64_t r = 0; r < p; ++r) {
          EXPECT_NEAR(t.bubble[r], expected, 1e-12) << "rank " << r;
          EXPECT_NEAR(t.busy[r], m * (f + b), 1e-9 * m * (f + b));
        }
      }
    }
  }
}

TEST(PipelineBubble, InterleavedMatchesTheClosedForm) {
  // (p, v, m), m a multiple of p.
  const std::tuple<int64_t, int64_t, int64_t> cases[] = {
      {1, 2, 3}, {2, 2, 2},  {2, 2, 4}, {2, 3, 6}, {4, 2, 4},  {4, 2, 8},
      {4, 3, 8}, {4, 4, 16}, {3, 4, 6}, {8, 2, 8}, {8, 2, 16}, {8, 3, 24}};
  for (auto [p, v, m] : cases) {
    for (auto [f, b] : kForwardBackward) {
      SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) +
                   " m=" + std::to_string(m) + " f=" + std::to_string(f) +
                   " b=" + std::to_string(b));
      Timeline t = run(schedule(Scheme::Interleaved, p, m, v), p, m, v,
                       Costs::uniform(p, v, f / v, b / v));
      // The ideal time m (f + b) plus the bubble (p - 1)(f + b) / v.
      EXPECT_NEAR(t.stepTime, (m + double(p - 1) / v) * (f + b),
                  1e-9 * (m + p) * (f + b));
      const double expected = double(p - 1) / double(v * m + p - 1);
      for (int64_t r = 0; r < p; ++r)
        EXPECT_NEAR(t.bubble[r], expected, 1e-12) << "rank " << r;
    }
  }
}

TEST(PipelineBubble, InterleavedIsSmallerThanOneFOneB) {
  const int64_t p = 4, m = 8;
  Timeline plain = run(schedule(Scheme::OneFOneB, p, m), p, m, 1,
                       Costs::uniform(p, 1, 1, 2));
  for (int64_t v : {2, 4}) {
    Timeline t = run(schedule(Scheme::Interleaved, p, m, v), p, m, v,
                     Costs::uniform(p, v, 1.0 / v, 2.0 / v));
    for (int64_t r = 0; r < p; ++r)
      EXPECT_NEAR(t.idle(r), plain.idle(r) / v, 1e-9);
  }
}

TEST(PipelineBubble, ZeroBubbleH1IsAThirdOfOneFOneB) {
  const std::pair<int64_t, int64_t> cases[] = {
      {1, 3}, {2, 2},  {2, 5}, {3, 3},  {3, 7},   {4, 4},
      {4, 8}, {4, 13}, {8, 8}, {8, 24}, {16, 16}, {16, 64}};
  for (auto [p, m] : cases) {
    for (double f : {1.0, 0.5, 3.0}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                   " f=" + std::to_string(f));
      // F = B = W = f; 1F1B's backward is B + W.
      Timeline zb = run(schedule(Scheme::ZeroBubbleH1, p, m), p, m, 1,
                        Costs::uniformSplit(p, 1, f, f, f));
      Timeline plain = run(schedule(Scheme::OneFOneB, p, m), p, m, 1,
                           Costs::uniform(p, 1, f, 2 * f));
      const double eps = 1e-9 * m * f;
      // Qi et al.: the bubble (p - 1)(F + B - W) against 1F1B's
      // (p - 1)(F + B + W), on every rank.
      EXPECT_NEAR(zb.stepTime, 3 * m * f + (p - 1) * f, eps);
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_NEAR(plain.idle(r), 3 * (p - 1) * f, eps) << "rank " << r;
        EXPECT_LE(zb.idle(r), plain.idle(r) / 3 + eps) << "rank " << r;
        EXPECT_NEAR(zb.bubble[r], double(p - 1) / double(3 * m + p - 1), 1e-12)
            << "rank " << r;
      }
      // The same activations in flight as 1F1B.
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(zb.peakInFlight[r], std::min(p - r, m)) << "rank " << r;
        EXPECT_EQ(zb.peakInFlight[r], plain.peakInFlight[r]) << "rank " << r;
      }
    }
  }
}

TEST(PipelineBubble, ZeroBubbleH1NeverLosesToOneFOneBWithFewMicroBatches) {
  for (auto [p, m] : {std::pair<int64_t, int64_t>{4, 1}, {4, 2}, {8, 5}}) {
    Timeline zb = run(schedule(Scheme::ZeroBubbleH1, p, m), p, m, 1,
                      Costs::uniformSplit(p, 1, 1, 1, 1));
    Timeline plain = run(schedule(Scheme::OneFOneB, p, m), p, m, 1,
                         Costs::uniform(p, 1, 1, 2));
    EXPECT_LE(zb.stepTime, plain.stepTime + 1e-9) << "p=" << p << " m=" << m;
    for (int64_t r = 0; r < p; ++r)
      EXPECT_EQ(zb.peakInFlight[r], std::min(p - r, m));
  }
}

//===----------------------------------------------------------------------===//
// Activations in flight
//===----------------------------------------------------------------------===//

TEST(PipelineMemory, PeakInFlight) {
  const std::pair<int64_t, int64_t> cases[] = {{1, 1}, {2, 1}, {4, 2}, {4, 4},
                                               {4, 9}, {8, 3}, {8, 16}};
  for (auto [p, m] : cases) {
    Timeline gpipe =
        run(schedule(Scheme::GPipe, p, m), p, m, 1, Costs::uniform(p, 1, 1, 2));
    Timeline ofob = run(schedule(Scheme::OneFOneB, p, m), p, m, 1,
                        Costs::uniform(p, 1, 1, 2));
    for (int64_t r = 0; r < p; ++r) {
      EXPECT_EQ(gpipe.peakInFlight[r], m) << "p=" << p << " m=" << m;
      EXPECT_EQ(ofob.peakInFlight[r], std::min(p - r, m))
          << "p=" << p << " m=" << m << " rank " << r;
    }
  }
}

TEST(PipelineMemory, InterleavedWarmUpBoundsTheChunksInFlight) {
  // Megatron's warm-up of (p - r - 1) * 2 + (v - 1) * p forwards, then one
  // more before the first backward: that many (micro-batch, chunk) pairs.
  const int64_t p = 4, v = 2, m = 8;
  Timeline t = run(schedule(Scheme::Interleaved, p, m, v), p, m, v,
                   Costs::uniform(p, v, 0.5, 1));
  for (int64_t r = 0; r < p; ++r)
    EXPECT_EQ(t.peakInFlight[r],
              std::min((p - r - 1) * 2 + (v - 1) * p + 1, m * v))
        << "rank " << r;
}

//===----------------------------------------------------------------------===//
// The schedules themselves
//===----------------------------------------------------------------------===//

/// Each rank runs every (micro-batch, chunk)'s forward and backward exactly
/// once, the forward first; split backwards run B before W.
void expectWellFormed(const Schedules &schedules, int64_t p, int64_t m,
                      int64_t v, bool split) {
  ASSERT_EQ(schedules.size(), static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) {
    std::map<std::pair<int64_t, int64_t>, std::vector<Work>> works;
    for (const Step &step : schedules[r]) {
      ASSERT_GE(step.microBatch, 0);
      ASSERT_LT(step.microBatch, m);
      ASSERT_GE(step.chunk, 0);
      ASSERT_LT(step.chunk, v);
      works[{step.microBatch, step.chunk}].push_back(step.work);
    }
    ASSERT_EQ(works.size(), static_cast<size_t>(m * v)) << "rank " << r;
    std::vector<Work> expected =
        split ? std::vector<Work>{Work::Forward, Work::BackwardInput,
                                  Work::BackwardWeight}
              : std::vector<Work>{Work::Forward, Work::Backward};
    for (const auto &[key, list] : works)
      EXPECT_EQ(list, expected) << "rank " << r << " micro-batch " << key.first
                                << " chunk " << key.second;
  }
}

TEST(PipelineSchedule, EveryStepOnceForwardFirst) {
  for (auto [p, m] : {std::pair<int64_t, int64_t>{1, 1},
                      {1, 5},
                      {2, 1},
                      {3, 2},
                      {4, 4},
                      {4, 10},
                      {8, 3},
                      {8, 20}}) {
    SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
    expectWellFormed(schedule(Scheme::GPipe, p, m), p, m, 1, false);
    expectWellFormed(schedule(Scheme::OneFOneB, p, m), p, m, 1, false);
    expectWellFormed(schedule(Scheme::ZeroBubbleH1, p, m), p, m, 1, true);
  }
  for (auto [p, v, m] : {std::tuple<int64_t, int64_t, int64_t>{1, 2, 1},
                         {2, 2, 2},
                         {2, 3, 6},
                         {4, 2, 4},
                         {4, 4, 12}}) {
    SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) +
                 " m=" + std::to_string(m));
    expectWellFormed(schedule(Scheme::Interleaved, p, m, v), p, m, v, false);
  }
}

TEST(PipelineSchedule, OneFOneBOrder) {
  // p = 3, m = 4: rank r warms up with min(p - r - 1, m) forwards.
  Schedules s = schedule(Scheme::OneFOneB, 3, 4);
  EXPECT_EQ(s[0], (std::vector<Step>{F(0), F(1), F(2), B(0), F(3), B(1), B(2),
                                     B(3)}));
  EXPECT_EQ(s[1], (std::vector<Step>{F(0), F(1), B(0), F(2), B(1), F(3), B(2),
                                     B(3)}));
  EXPECT_EQ(s[2], (std::vector<Step>{F(0), B(0), F(1), B(1), F(2), B(2), F(3),
                                     B(3)}));
}

TEST(PipelineSchedule, InterleavedOrderIsMegatrons) {
  // p = 2, v = 2, m = 4. The k-th forward runs micro-batch (k / 4) * 2 + k % 2
  // on chunk (k % 4) / 2; the k-th backward the same micro-batch on chunk
  // 1 - (k % 4) / 2. Rank 1 warms up with (2 - 1 - 1) * 2 + (2 - 1) * 2 = 2
  // forwards, rank 0 with 4.
  Schedules s = schedule(Scheme::Interleaved, 2, 4, 2);
  EXPECT_EQ(s[1], (std::vector<Step>{F(0, 0), F(1, 0),                   //
                                     F(0, 1), B(0, 1), F(1, 1), B(1, 1), //
                                     F(2, 0), B(0, 0), F(3, 0), B(1, 0), //
                                     F(2, 1), B(2, 1), F(3, 1), B(3, 1), //
                                     B(2, 0), B(3, 0)}));
  EXPECT_EQ(s[0], (std::vector<Step>{F(0, 0), F(1, 0), F(0, 1), F(1, 1), //
                                     F(2, 0), B(0, 1), F(3, 0), B(1, 1), //
                                     F(2, 1), B(0, 0), F(3, 1), B(1, 0), //
                                     B(2, 1), B(3, 1), B(2, 0), B(3, 0)}));
}

TEST(PipelineSchedule, ZeroBubbleH1DefersTheFirstWsOfLaterRanks) {
  // 1F1B's order with B then W, rank r moving the W of micro-batches
  // 0..r-1 after its last B.
  Schedules s = schedule(Scheme::ZeroBubbleH1, 2, 3);
  EXPECT_EQ(s[0], (std::vector<Step>{F(0), F(1), Bi(0), Bw(0), F(2), Bi(1),
                                     Bw(1), Bi(2), Bw(2)}));
  EXPECT_EQ(s[1], (std::vector<Step>{F(0), Bi(0), F(1), Bi(1), Bw(1), F(2),
                                     Bi(2), Bw(2), Bw(0)}));
}

TEST(PipelineSchedule, RejectsBadParameters) {
  EXPECT_EQ(makeError(Scheme::OneFOneB, 0, 4, 1),
            "pipeline ranks p = 0, expected at least 1");
  EXPECT_EQ(makeError(Scheme::OneFOneB, 2, 0, 1),
            "micro-batches m = 0, expected at least 1");
  EXPECT_EQ(makeError(Scheme::Interleaved, 2, 4, 0),
            "chunks per rank v = 0, expected at least 1");
  EXPECT_EQ(makeError(Scheme::OneFOneB, 2, 4, 2),
            "the 1f1b schedule has v = 2 chunks per rank, expected 1 (use "
            "interleaved for virtual chunks)");
  EXPECT_NE(makeError(Scheme::GPipe, 2, 4, 2), "");
  EXPECT_NE(makeError(Scheme::ZeroBubbleH1, 2, 4, 3), "");
  EXPECT_EQ(makeError(Scheme::Interleaved, 2, 4, 1),
            "the interleaved schedule has v = 1 chunks per rank, expected at "
            "least 2 (use 1f1b for one)");
  std::string notMultiple = makeError(Scheme::Interleaved, 4, 6, 2);
  EXPECT_NE(notMultiple.find("m = 6 micro-batches for p = 4 ranks, expected "
                             "a multiple of p"),
            std::string::npos)
      << notMultiple;
}

TEST(PipelineSchedule, SchemeNames) {
  for (Scheme scheme : {Scheme::GPipe, Scheme::OneFOneB, Scheme::Interleaved,
                        Scheme::ZeroBubbleH1}) {
    llvm::Expected<Scheme> parsed = parseScheme(schemeName(scheme));
    ASSERT_TRUE(static_cast<bool>(parsed))
        << llvm::toString(parsed.takeError());
    EXPECT_EQ(*parsed, scheme);
  }
  EXPECT_EQ(schemeName(Scheme::OneFOneB), "1f1b");
  EXPECT_EQ(schemeName(Scheme::ZeroBubbleH1), "zb-h1");
  llvm::Expected<Scheme> bad = parseScheme("zb-h2");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "unknown pipeline schedule 'zb-h2', expected one of gpipe, 1f1b, "
            "interleaved, zb-h1");
}

//===----------------------------------------------------------------------===//
// Timelines
//===----------------------------------------------------------------------===//

TEST(PipelineTimeline, UnevenStagesAreBoundByTheSlowest) {
  const int64_t p = 4;
  const std::vector<double> forward = {1, 3, 0.5, 2};
  Costs costs;
  for (double f : forward) {
    costs.forward.push_back({f});
    costs.backward.push_back({2 * f});
  }
  const double slowest = 3 + 6;
  for (int64_t m : {1, 2, 4, 8, 16}) {
    Timeline t = run(schedule(Scheme::OneFOneB, p, m), p, m, 1, costs);
    EXPECT_GE(t.stepTime, m * slowest - 1e-9) << "m=" << m;
    // And at least the one micro-batch's trip through every stage and back.
    EXPECT_GE(t.stepTime, 3 * (1 + 3 + 0.5 + 2) - 1e-9) << "m=" << m;
    for (int64_t r = 0; r < p; ++r)
      EXPECT_NEAR(t.busy[r], m * 3 * forward[r], 1e-9);
  }
}

TEST(PipelineTimeline, TransfersOnTheCriticalPath) {
  // One micro-batch goes down the p ranks and back: p (f + b) of work and
  // 2 (p - 1) transfers.
  for (Scheme scheme : {Scheme::GPipe, Scheme::OneFOneB}) {
    for (int64_t p : {1, 2, 5}) {
      Costs costs = Costs::uniform(p, 1, 1, 2);
      costs.transfer = 0.25;
      Timeline t = run(schedule(scheme, p, 1), p, 1, 1, costs);
      EXPECT_NEAR(t.stepTime, p * 3 + 2 * (p - 1) * 0.25, 1e-12);
    }
  }
  // Chunks of one rank pass their activations without a transfer.
  Costs costs = Costs::uniform(1, 3, 1, 2);
  costs.transfer = 10;
  Timeline t = run(schedule(Scheme::Interleaved, 1, 1, 3), 1, 1, 3, costs);
  EXPECT_NEAR(t.stepTime, 9, 1e-12);
}

TEST(PipelineTimeline, StepsRunInOrderAsEarlyAsTheyCan) {
  // p = 2, m = 2, 1F1B, f = 1, b = 2:
  //   rank 0: F0 [0,1) F1 [1,2) B0 [4,6) B1 [7,9)
  //   rank 1: F0 [1,2) B0 [2,4) F1 [4,5) B1 [5,7)
  const int64_t p = 2, m = 2;
  Timeline t = run(schedule(Scheme::OneFOneB, p, m), p, m, 1,
                   Costs::uniform(p, 1, 1, 2));
  auto check = [&](int64_t r,
                   const std::vector<std::pair<double, double>> &at) {
    ASSERT_EQ(t.ranks[r].size(), at.size());
    for (size_t s = 0; s < at.size(); ++s) {
      EXPECT_DOUBLE_EQ(t.ranks[r][s].start, at[s].first) << r << " " << s;
      EXPECT_DOUBLE_EQ(t.ranks[r][s].end, at[s].second) << r << " " << s;
    }
  };
  check(0, {{0, 1}, {1, 2}, {4, 6}, {7, 9}});
  check(1, {{1, 2}, {2, 4}, {4, 5}, {5, 7}});
  EXPECT_DOUBLE_EQ(t.stepTime, 9);
}

TEST(PipelineTimeline, RejectsADeadlock) {
  // Rank 0 runs micro-batch 0 forward and then waits for its backward from
  // rank 1; rank 1 first waits for micro-batch 1's forward, which rank 0
  // only runs after that backward.
  Schedules s = {{F(0), B(0), F(1), B(1)}, {F(1), F(0), B(0), B(1)}};
  std::string message = simulateError(s, 2, 2);
  EXPECT_EQ(message,
            "the pipeline schedules deadlock: rank 0 step 1 (backward of "
            "micro-batch 0 on chunk 0) waits for rank 1's backward of "
            "micro-batch 0 on chunk 0; rank 1 step 0 (forward of micro-batch "
            "1 on chunk 0) waits for rank 0's forward of micro-batch 1 on "
            "chunk 0");
}

TEST(PipelineTimeline, RejectsADeadlockOfSplitBackwards) {
  // Rank 1 runs its B0 only after the forward of micro-batch 1, which rank
  // 0 only sends after it got B0's gradient.
  Schedules s = {{F(0), Bi(0), F(1), Bw(0), Bi(1), Bw(1)},
                 {F(0), F(1), Bi(0), Bw(0), Bi(1), Bw(1)}};
  std::string message = simulateError(s, 2, 2);
  EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 step 1 (backward-input of micro-batch 0 on "
                         "chunk 0) waits for rank 1's backward-input of "
                         "micro-batch 0 on chunk 0"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 1 step 1 (forward of micro-batch 1 on chunk 0) "
                         "waits for rank 0's forward of micro-batch 1"),
            std::string::npos)
      << message;
}

TEST(PipelineTimeline, RejectsMalformedSchedules) {
  Schedules good = schedule(Scheme::OneFOneB, 2, 2);
  EXPECT_EQ(simulateError(good, 2, 2), "");

  Schedules backwardFirst = good;
  backwardFirst[0] = {B(0), F(0), F(1), B(1)};
  EXPECT_EQ(simulateError(backwardFirst, 2, 2),
            "rank 0 step 0 (backward of micro-batch 0 on chunk 0) comes "
            "before the forward of micro-batch 0 on chunk 0");

  Schedules repeated = good;
  repeated[1] = {F(0), B(0), F(0), B(1)};
  EXPECT_EQ(simulateError(repeated, 2, 2),
            "rank 1 step 2 (forward of micro-batch 0 on chunk 0) is repeated");

  Schedules missing = good;
  missing[1] = {F(0), B(0), F(1)};
  EXPECT_EQ(simulateError(missing, 2, 2),
            "rank 1 schedule misses the backward of micro-batch 1 on chunk 0");

  Schedules outOfRange = good;
  outOfRange[0].push_back(F(2));
  EXPECT_EQ(simulateError(outOfRange, 2, 2),
            "rank 0 step 4 (forward of micro-batch 2 on chunk 0): micro-batch "
            "2 is out of range, expected 0..1");

  Schedules badChunk = good;
  badChunk[0][0].chunk = 1;
  EXPECT_EQ(simulateError(badChunk, 2, 2),
            "rank 0 step 0 (forward of micro-batch 0 on chunk 1): chunk 1 is "
            "out of range, expected 0..0");

  Schedules weightFirst = {{F(0), Bw(0), Bi(0)}, {F(0), Bi(0), Bw(0)}};
  EXPECT_EQ(simulateError(weightFirst, 2, 1),
            "rank 0 step 1 (backward-weight of micro-batch 0 on chunk 0) comes "
            "before the backward-input of micro-batch 0 on chunk 0");

  Schedules noWeight = {{F(0), Bi(0)}, {F(0), Bi(0), Bw(0)}};
  EXPECT_EQ(simulateError(noWeight, 2, 1),
            "rank 0 schedule misses the backward-weight of micro-batch 0 on "
            "chunk 0");

  Schedules mixed = {{F(0), B(0), Bw(0)}, {F(0), B(0)}};
  EXPECT_NE(simulateError(mixed, 2, 1).find("mixes a whole backward"),
            std::string::npos);

  EXPECT_EQ(simulateError({good[0]}, 2, 2),
            "got 1 rank schedules, expected one per rank (p = 2)");
}

TEST(PipelineTimeline, RejectsCostsOfTheWrongShape) {
  Schedules s = schedule(Scheme::OneFOneB, 2, 2);
  Costs costs = Costs::uniform(2, 1, 1, 2);
  costs.forward.pop_back();
  llvm::Expected<Timeline> t = simulate(s, 2, 2, 1, costs);
  ASSERT_FALSE(static_cast<bool>(t));
  EXPECT_EQ(llvm::toString(t.takeError()),
            "costs.forward has 1 rows, expected one per rank (p = 2)");

  Costs negative = Costs::uniform(2, 1, 1, 2);
  negative.backward[1][0] = -1;
  t = simulate(s, 2, 2, 1, negative);
  ASSERT_FALSE(static_cast<bool>(t));
  EXPECT_EQ(llvm::toString(t.takeError()),
            "costs.backward[1][0] = -1, expected a finite time >= 0");

  Costs noBackward;
  noBackward.forward = {{1}, {1}};
  t = simulate(s, 2, 2, 1, noBackward);
  ASSERT_FALSE(static_cast<bool>(t));
  llvm::consumeError(t.takeError());
}

TEST(PipelineTimeline, SplitCostsDefaultToHalvesOfTheBackward) {
  // Only `backward` given: B and W take half each; only B given: W is the
  // rest.
  const int64_t p = 1, m = 1;
  Schedules s = schedule(Scheme::ZeroBubbleH1, p, m);
  Costs costs;
  costs.forward = {{1}};
  costs.backward = {{4}};
  Timeline t = run(s, p, m, 1, costs);
  ASSERT_EQ(t.ranks[0].size(), 3u);
  EXPECT_DOUBLE_EQ(t.ranks[0][1].end - t.ranks[0][1].start, 2);
  EXPECT_DOUBLE_EQ(t.ranks[0][2].end - t.ranks[0][2].start, 2);
  costs.backwardInput = {{3}};
  t = run(s, p, m, 1, costs);
  EXPECT_DOUBLE_EQ(t.ranks[0][1].end - t.ranks[0][1].start, 3);
  EXPECT_DOUBLE_EQ(t.ranks[0][2].end - t.ranks[0][2].start, 1);
  EXPECT_DOUBLE_EQ(t.stepTime, 5);
}

} // namespace
