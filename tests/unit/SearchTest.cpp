//===- SearchTest.cpp - The layout search against whole compiles ----------===//
//
// braidc --auto estimates most candidates from two proxies of fewer layers.
// These tests run the search on a 24-layer tiny-llama (enough layers per
// pipeline chunk that the proxies are used for pp 1 and 2), once with the
// proxies and once compiling every candidate whole, and compare; and they
// compile each candidate the search reports as compiled on its own, with
// the compiler's plan-verify, to check its peak and step.

#include "compiler/Search.h"

#include "compiler/Registration.h"

#include "TestUtil.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

#include <map>

using namespace braid;
using namespace braid::test;

namespace {

spec::JobSpec job(int64_t layers = 24, bool bf16 = false) {
  spec::JobSpec j = presetJob("tiny-llama", 32);
  j.mutable_model()->set_num_layers(layers);
  if (bf16)
    j.mutable_train()->set_precision(spec::BF16);
  j.mutable_parallel()->set_global_batch_size(8);
  return j;
}

/// One dgx-h100 node cut to 4 devices of `memory` bytes.
spec::Cluster cluster(int64_t memory) {
  llvm::Expected<spec::Cluster> c = loadCluster("dgx-h100", 1);
  EXPECT_TRUE(bool(c)) << llvm::toString(c.takeError());
  c->set_devices_per_node(4);
  c->set_memory_bytes(memory);
  return *c;
}

std::vector<Candidate> search(const spec::Cluster &c, bool proxies,
                              int64_t confirm, int64_t layers = 24,
                              bool bf16 = false, int64_t threads = 0,
                              int64_t maxCompiles = 0) {
  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry);
  SearchOptions options;
  options.cluster = c;
  options.proxies = proxies;
  options.confirm = confirm;
  options.threads = threads;
  options.maxCompiles = maxCompiles;
  llvm::Expected<std::vector<Candidate>> out =
      searchLayouts(job(layers, bf16), options, context);
  EXPECT_TRUE(bool(out)) << llvm::toString(out.takeError());
  return out ? *out : std::vector<Candidate>{};
}

/// The largest arena of the layout compiled on its own (the phases end with
/// plan-verify, which must pass), and its predicted step.
std::pair<int64_t, double> compileAlone(const spec::ParallelSpec &parallel,
                                        const spec::Cluster &c,
                                        int64_t layers = 24,
                                        bool bf16 = false) {
  spec::JobSpec j = job(layers, bf16);
  *j.mutable_parallel() = parallel;
  plan::Plan plan = compilePlan(j);
  int64_t peak = plan.arena_bytes();
  for (const plan::Stage &s : plan.pipeline().stages())
    peak = std::max(peak, s.arena_bytes());
  llvm::Expected<StepPrediction> step = predictStep(plan, c);
  EXPECT_TRUE(bool(step)) << llvm::toString(step.takeError());
  return {peak, step ? step->stepTime : 0.0};
}

TEST(Search, ProxyEstimatesFollowWholeCompiles) {
  spec::Cluster c = cluster(int64_t(80) << 30);
  std::vector<Candidate> estimated = search(c, true, 1);
  std::vector<Candidate> whole = search(c, false, 1);
  std::map<std::string, const Candidate *> byLayout;
  for (const Candidate &w : whole)
    if (w.compiled)
      byLayout[w.layout] = &w;
  int64_t proxied = 0;
  for (const Candidate &e : estimated) {
    if (!e.estimated || e.compiled)
      continue;
    ++proxied;
    ASSERT_TRUE(byLayout.count(e.layout)) << e.layout;
    const Candidate &w = *byLayout[e.layout];
    // Every layer adds the same instructions to its chunk's functions, so
    // the step time is affine in the layers per chunk: exact up to rounding.
    EXPECT_NEAR(e.prediction.stepTime, w.prediction.stepTime,
                1e-9 * w.prediction.stepTime)
        << e.layout;
    EXPECT_NEAR(e.prediction.compute, w.prediction.compute,
                1e-9 * w.prediction.compute)
        << e.layout;
    // The arena: parameters, gradients, optimizer state and kept activations
    // are affine in the layers; the temporaries' packing nearly so.
    EXPECT_NEAR(double(e.peakBytes), double(w.peakBytes),
                0.01 * double(w.peakBytes))
        << e.layout;
  }
  // The proxies were used (pp 1 and 2 have 24 and 12 layers per chunk).
  EXPECT_GT(proxied, 10);
  // Both searches pick the same layout, compiled whole, with the same peak.
  ASSERT_FALSE(estimated.empty());
  ASSERT_FALSE(whole.empty());
  EXPECT_EQ(estimated.front().layout, whole.front().layout);
  EXPECT_TRUE(estimated.front().compiled);
  EXPECT_EQ(estimated.front().peakBytes, whole.front().peakBytes);
}

TEST(Search, TheBestAreCompiledWholeAndVerify) {
  spec::Cluster c = cluster(int64_t(80) << 30);
  std::vector<Candidate> candidates = search(c, true, 4);
  int64_t checked = 0;
  for (const Candidate &cand : candidates) {
    if (!cand.feasible)
      break;
    if (checked == 4)
      break;
    // The first four that fit were compiled whole; alone, each compiles
    // (plan-verify included) to the same arena and step.
    EXPECT_TRUE(cand.compiled) << cand.layout;
    auto [peak, step] = compileAlone(cand.parallel, c);
    EXPECT_EQ(peak, cand.peakBytes) << cand.layout;
    EXPECT_NEAR(step, cand.prediction.stepTime, 1e-12 * step) << cand.layout;
    EXPECT_LE(cand.peakBytes, c.memory_bytes());
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  // Fastest first.
  for (size_t i = 1; i < size_t(checked); ++i)
    EXPECT_LE(candidates[i - 1].prediction.stepTime,
              candidates[i].prediction.stepTime);
}

TEST(Search, NothingFitsStatesTheLeastMemoryExactly) {
  // A device smaller than any layout's arena: the candidate that needs the
  // least is compiled whole, so the number an error states is its arena.
  spec::Cluster c = cluster(100000);
  std::vector<Candidate> candidates = search(c, true, 1);
  ASSERT_FALSE(candidates.empty());
  const Candidate &least = candidates.front();
  EXPECT_FALSE(least.feasible);
  ASSERT_TRUE(least.compiled) << least.rejected;
  EXPECT_GT(least.peakBytes, c.memory_bytes());
  EXPECT_NE(least.rejected.find("out of memory"), std::string::npos)
      << least.rejected;
  EXPECT_EQ(compileAlone(least.parallel, c).first, least.peakBytes);
}

TEST(Search, PipelineStagesOfUnequalLayers) {
  // 25 layers: pp 2 and pp 4 do not divide them; the partition balances
  // the stages by FLOPs, so they are candidates (without virtual stages).
  spec::Cluster c = cluster(int64_t(80) << 30);
  std::vector<Candidate> estimated = search(c, true, 1, 25);
  std::vector<Candidate> whole = search(c, false, 1, 25);
  std::map<std::string, const Candidate *> byLayout;
  for (const Candidate &w : whole)
    if (w.compiled)
      byLayout[w.layout] = &w;
  std::map<int64_t, int64_t> feasibleByPp;
  int64_t proxied = 0;
  for (const Candidate &e : estimated) {
    EXPECT_LE(e.parallel.vpp(), 1) << e.layout;
    if (!e.feasible)
      continue;
    ++feasibleByPp[e.parallel.pp()];
    if (!e.estimated || e.compiled || e.parallel.pp() == 1)
      continue;
    // pp 2 (13 and 12 layers or so) from proxies of 3 and 7 layers a
    // stage: the estimate is of two stages of 13, so it errs slow and
    // large, by less than the one layer it adds.
    ++proxied;
    ASSERT_TRUE(byLayout.count(e.layout)) << e.layout;
    const Candidate &w = *byLayout[e.layout];
    EXPECT_GE(e.prediction.stepTime, w.prediction.stepTime) << e.layout;
    EXPECT_LE(e.prediction.stepTime, w.prediction.stepTime * (1 + 1.0 / 12))
        << e.layout;
    // (Up to the 1 % by which the temporaries' packing departs from a line
    // through the proxies, as above.)
    EXPECT_GE(double(e.peakBytes), 0.99 * double(w.peakBytes)) << e.layout;
    EXPECT_LE(double(e.peakBytes), double(w.peakBytes) * (1 + 1.0 / 12))
        << e.layout;
  }
  EXPECT_GT(feasibleByPp[2], 0);
  EXPECT_GT(feasibleByPp[4], 0);
  EXPECT_GT(proxied, 0);
  // Every pipeline layout compiled whole compiles alone, plan-verify
  // included, to the same arena.
  int64_t checked = 0;
  for (const Candidate &w : whole)
    if (w.compiled && w.feasible && w.parallel.pp() > 1 && checked < 3) {
      EXPECT_EQ(compileAlone(w.parallel, c, 25).first, w.peakBytes) << w.layout;
      ++checked;
    }
  EXPECT_EQ(checked, 3);
}

TEST(Search, MixedPrecisionCandidatesCompileAndVerify) {
  // bf16 (mixed precision) candidates: the best compile alone (plan-verify
  // included) to the same arena and step; their prediction uses the bf16
  // rate, so the pick is faster than the fp32 search's.
  spec::Cluster c = cluster(int64_t(80) << 30);
  std::vector<Candidate> bf16 = search(c, true, 2, 24, true);
  std::vector<Candidate> fp32 = search(c, true, 1, 24, false);
  ASSERT_FALSE(bf16.empty());
  ASSERT_FALSE(fp32.empty());
  int64_t checked = 0;
  for (const Candidate &cand : bf16) {
    if (!cand.feasible || checked == 2)
      break;
    ASSERT_TRUE(cand.compiled) << cand.layout;
    auto [peak, step] = compileAlone(cand.parallel, c, 24, true);
    EXPECT_EQ(peak, cand.peakBytes) << cand.layout;
    EXPECT_NEAR(step, cand.prediction.stepTime, 1e-12 * step) << cand.layout;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  EXPECT_LT(bf16.front().prediction.stepTime, fp32.front().prediction.stepTime);
}

TEST(Search, WorkersDoNotChangeTheResult) {
  // The candidates are evaluated on worker threads ahead of the pass that
  // decides, in order, which count: one worker or three, with a cap on the
  // compiles that cuts the order short and devices small enough that most
  // structures climb their memory ladder, give the same candidates, the
  // same numbers and the same reasons.
  int64_t roomy = search(cluster(int64_t(80) << 30), true, 1).front().peakBytes;
  spec::Cluster c = cluster(roomy * 3 / 4);
  for (int64_t cap : {int64_t(0), int64_t(25)}) {
    std::vector<Candidate> one = search(c, true, 2, 24, false, 1, cap);
    std::vector<Candidate> three = search(c, true, 2, 24, false, 3, cap);
    ASSERT_EQ(one.size(), three.size());
    int64_t evaluated = 0, notCompiled = 0, climbed = 0;
    for (size_t i = 0; i < one.size(); ++i) {
      const Candidate &a = one[i], &b = three[i];
      EXPECT_EQ(a.layout, b.layout) << i;
      EXPECT_EQ(a.feasible, b.feasible) << a.layout;
      EXPECT_EQ(a.rejected, b.rejected) << a.layout;
      EXPECT_EQ(a.peakBytes, b.peakBytes) << a.layout;
      EXPECT_EQ(a.compiled, b.compiled) << a.layout;
      EXPECT_EQ(a.prediction.stepTime, b.prediction.stepTime) << a.layout;
      evaluated += a.peakBytes > 0;
      notCompiled += a.rejected.rfind("not compiled: --auto compiles", 0) == 0;
      climbed += a.feasible && a.rung > 0;
    }
    EXPECT_GT(evaluated, 10);
    EXPECT_GT(climbed, 0);
    if (cap > 0) {
      EXPECT_GT(notCompiled, 0);
    }
  }
}

TEST(Search, UnevenStagesBalanceMemory) {
  // pp 4 with 8 micro-batches of 1: the first stage keeps 4 micro-batches
  // in flight, the last 1. On devices one byte smaller than that layout's
  // FLOP-balanced arena, its structure must climb its memory ladder; the
  // search then tries the rungs below with stages whose layers balance
  // their memory (for the pipelines among the best 64 that fit, here), and
  // such a candidate fits where the same rung with FLOP-balanced stages did
  // not.
  spec::ParallelSpec pipeline;
  pipeline.set_pp(4);
  pipeline.set_dp(1);
  pipeline.set_tp(1);
  pipeline.set_micro_batch_size(1);
  pipeline.set_global_batch_size(8);
  pipeline.set_schedule("1f1b");
  spec::Cluster c = cluster(int64_t(80) << 30);
  int64_t balanced = compileAlone(pipeline, c).first;
  c.set_memory_bytes(balanced - 1);
  std::vector<Candidate> candidates = search(c, true, 64);
  int64_t uneven = 0;
  for (const Candidate &u : candidates) {
    if (!u.parallel.stage_layers_size())
      continue;
    ++uneven;
    ASSERT_TRUE(u.feasible) << u.layout << ": " << u.rejected;
    ASSERT_TRUE(u.compiled) << u.layout;
    EXPECT_LE(u.peakBytes, c.memory_bytes()) << u.layout;
    // Alone, with plan-verify, the same arena and step.
    auto [peak, step] = compileAlone(u.parallel, c);
    EXPECT_EQ(peak, u.peakBytes) << u.layout;
    EXPECT_NEAR(step, u.prediction.stepTime, 1e-12 * step) << u.layout;
    // The first stage, with the most micro-batches in flight, holds fewer
    // layers than the last.
    EXPECT_LT(u.parallel.stage_layers(0),
              u.parallel.stage_layers(u.parallel.stage_layers_size() - 1))
        << u.layout;
    // The same structure and rung with FLOP-balanced stages did not fit.
    bool sibling = false;
    for (const Candidate &d : candidates)
      if (d.structure == u.structure && d.rung == u.rung &&
          !d.parallel.stage_layers_size()) {
        sibling = true;
        EXPECT_FALSE(d.feasible) << d.layout;
        EXPECT_NE(d.rejected.find("out of memory"), std::string::npos)
            << d.layout << ": " << d.rejected;
      }
    EXPECT_TRUE(sibling) << u.layout;
  }
  EXPECT_GT(uneven, 0);
  // Among them, pp 4 with micro-batches of 1 on its cheapest rung.
  bool found = false;
  for (const Candidate &u : candidates)
    found |= u.parallel.stage_layers_size() && u.parallel.pp() == 4 &&
             u.parallel.micro_batch_size() == 1 && u.rung == 0 &&
             u.parallel.schedule() == "1f1b" && u.parallel.dp() == 1;
  EXPECT_TRUE(found);
}

} // namespace

TEST(Search, RecomputeAutoRefinesTheBest) {
  // Devices one byte smaller than the unconstrained pick needs: layouts
  // that recompute now compete; the best of them with selective or full
  // recompute are tried again with recompute auto at the device's memory.
  int64_t roomy = search(cluster(int64_t(80) << 30), true, 1).front().peakBytes;
  spec::Cluster c = cluster(roomy - 1);
  std::vector<Candidate> candidates = search(c, true, 8);
  int64_t autos = 0;
  for (const Candidate &a : candidates) {
    if (a.parallel.recompute() != "auto")
      continue;
    ++autos;
    // Compiled whole (the compiler's own search), within the memory.
    ASSERT_TRUE(a.compiled) << a.layout << ": " << a.rejected;
    ASSERT_TRUE(a.feasible) << a.layout << ": " << a.rejected;
    EXPECT_LE(a.peakBytes, c.memory_bytes()) << a.layout;
    EXPECT_EQ(a.parallel.memory_budget_bytes(), c.memory_bytes());
    // No slower than the same layout with the recompute it refines: auto
    // recomputes, per layer, the least that fits.
    bool sibling = false;
    for (const Candidate &s : candidates) {
      spec::ParallelSpec p = s.parallel;
      if (!s.feasible || (p.recompute() != "selective" && p.recompute() != "full"))
        continue;
      p.set_recompute("auto");
      p.set_memory_budget_bytes(c.memory_bytes());
      if (p.SerializeAsString() != a.parallel.SerializeAsString())
        continue;
      sibling = true;
      EXPECT_LE(a.prediction.stepTime, s.prediction.stepTime * (1 + 1e-12))
          << a.layout << " vs " << s.layout;
    }
    EXPECT_TRUE(sibling) << a.layout;
  }
  EXPECT_GT(autos, 0);
}
