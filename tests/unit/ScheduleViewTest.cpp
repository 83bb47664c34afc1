//===- ScheduleViewTest.cpp - braid view's page ---------------------------===//
//
// A hand-built plan of two pipeline stages (each run by two dp ranks) with
// the same matrix products on both stages, so that the costs are uniform and
// the page's blocks must sit where pipeline::simulate puts uniform steps.
//
//===----------------------------------------------------------------------===//

#include "compiler/ScheduleView.h"

#include "compiler/Schedule.h"
#include "runtime/plan/PlanLoader.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Regex.h"

#include "gtest/gtest.h"

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace braid;

namespace {

constexpr int64_t kRows = 4, kIn = 8, kOut = 8;
constexpr int64_t kMicroBatches = 3;

int32_t addBuffer(plan::Plan &p, const std::string &name,
                  std::vector<int64_t> shape, plan::BufferRole role, int stage,
                  int64_t slots = 0) {
  plan::Buffer *b = p.add_buffers();
  b->set_name(name);
  b->set_dtype(plan::F32);
  int64_t bytes = 4;
  for (int64_t d : shape) {
    b->add_shape(d);
    bytes *= d;
  }
  b->set_role(role);
  b->set_stage(stage);
  b->set_slots(slots);
  // Stages live on different ranks; every buffer gets its own bytes anyway.
  b->set_offset(p.arena_bytes());
  p.set_arena_bytes(p.arena_bytes() + bytes * std::max<int64_t>(slots, 1));
  return p.buffers_size() - 1;
}

plan::Instruction *add(plan::Function *fn, plan::Kernel kernel,
                       std::vector<int32_t> inputs,
                       std::vector<int32_t> outputs) {
  plan::Instruction *inst = fn->add_body();
  inst->set_kernel(kernel);
  for (int32_t i : inputs)
    inst->add_inputs(i);
  for (int32_t o : outputs)
    inst->add_outputs(o);
  return inst;
}

plan::Instruction *pointToPoint(plan::Function *fn, plan::Kernel kernel,
                                int32_t buffer, int peer) {
  plan::Instruction *inst = kernel == plan::SEND
                                ? add(fn, kernel, {buffer}, {})
                                : add(fn, kernel, {}, {buffer});
  (*inst->mutable_int_attrs())["peer"] = peer;
  inst->set_rank_axis("pp");
  return inst;
}

/// Stage s: y = x w forward; dx = dy w^T and dw += x^T dy backward (with
/// `split`, dw in a backward_weight function of its own); the activation
/// goes down and its gradient up. The update clips over the whole pipeline
/// and sums the gradients over dp. Each micro-batch takes the lowest free
/// slot at its forward and frees it after its last backward step.
void addStage(plan::Plan &p, int s, int stages,
              const std::vector<pipeline::Step> &order, bool split = false) {
  int64_t slots = 1, inFlight = 0;
  for (const pipeline::Step &step : order) {
    if (step.work == pipeline::Work::Forward)
      slots = std::max(slots, ++inFlight);
    else if (step.work == (split ? pipeline::Work::BackwardWeight
                                 : pipeline::Work::Backward))
      --inFlight;
  }
  std::string prefix = "stage" + std::to_string(s) + "_";
  int32_t x =
      addBuffer(p, prefix + "x", {kRows, kIn}, plan::ACTIVATION, s, slots);
  int32_t w = addBuffer(p, prefix + "w", {kOut, kIn}, plan::PARAMETER, s);
  int32_t y =
      addBuffer(p, prefix + "y", {kRows, kOut}, plan::ACTIVATION, s, slots);
  int32_t dy =
      addBuffer(p, prefix + "dy", {kRows, kOut}, plan::ACTIVATION, s, slots);
  int32_t dx = addBuffer(p, prefix + "dx", {kRows, kIn}, plan::ACTIVATION, s);
  int32_t dw = addBuffer(p, prefix + "dw", {kOut, kIn}, plan::GRADIENT, s);
  int32_t norm = addBuffer(p, prefix + "norm", {}, plan::WORKSPACE, s);
  int32_t scale = addBuffer(p, prefix + "scale", {}, plan::WORKSPACE, s);

  plan::Function *forward = p.add_functions();
  forward->set_name(prefix + "forward");
  if (s > 0)
    pointToPoint(forward, plan::RECV, x, -1);
  (*add(forward, plan::LINEAR, {x, w}, {y})
        ->mutable_int_attrs())["transpose_w"] = 1;
  if (s + 1 < stages)
    pointToPoint(forward, plan::SEND, y, +1);

  plan::Function *backward = p.add_functions();
  backward->set_name(prefix + "backward");
  if (s + 1 < stages)
    pointToPoint(backward, plan::RECV, dy, +1);
  (*add(backward, plan::LINEAR_GRAD_INPUT, {dy, w}, {dx})
        ->mutable_int_attrs())["transpose_w"] = 1;
  plan::Function *weight = backward;
  if (split) {
    weight = p.add_functions();
    weight->set_name(prefix + "backward_weight");
  }
  (*add(weight, plan::LINEAR_GRAD_WEIGHT, {x, dy}, {dw})
        ->mutable_int_attrs())["transpose_w"] = 1;
  if (s > 0)
    pointToPoint(backward, plan::SEND, dx, -1);

  plan::Function *update = p.add_functions();
  update->set_name(prefix + "update");
  plan::Instruction *reduce = add(update, plan::ALL_REDUCE, {dw}, {dw});
  reduce->add_group("dp");
  plan::Instruction *clip = add(update, plan::GRAD_NORM, {dw}, {norm, scale});
  clip->add_group("pp");
  (*clip->mutable_float_attrs())["max_norm"] = 1;
  (*clip->mutable_int_attrs())["split_inputs"] = 1;

  plan::Stage *stage = p.mutable_pipeline()->add_stages();
  stage->set_first_layer(s);
  stage->set_num_layers(1);
  stage->set_forward(forward->name());
  stage->set_backward(backward->name());
  if (split)
    stage->set_backward_weight(weight->name());
  stage->set_update(update->name());
  stage->set_slots(slots);
  // Its buffers end where the plan's arena now ends.
  stage->set_arena_bytes(p.arena_bytes());
  std::map<int64_t, int64_t> slotOf;
  std::vector<bool> busy(slots, false);
  for (const pipeline::Step &from : order) {
    plan::ScheduleStep *step = stage->add_schedule();
    int64_t i = from.microBatch;
    step->set_micro_batch(i);
    switch (from.work) {
    case pipeline::Work::Forward: {
      step->set_kind(plan::ScheduleStep::FORWARD);
      int64_t slot = 0;
      while (busy[slot])
        ++slot;
      busy[slot] = true;
      slotOf[i] = slot;
      break;
    }
    case pipeline::Work::Backward:
    case pipeline::Work::BackwardInput:
      step->set_kind(plan::ScheduleStep::BACKWARD);
      if (!split)
        busy[slotOf[i]] = false;
      break;
    case pipeline::Work::BackwardWeight:
      step->set_kind(plan::ScheduleStep::BACKWARD_WEIGHT);
      busy[slotOf[i]] = false;
      break;
    }
    step->set_slot(slotOf[i]);
  }
}

/// Two stages, dp 2, three micro-batches in the order of `scheme`.
plan::Plan twoStagePlan(pipeline::Scheme scheme = pipeline::Scheme::OneFOneB) {
  plan::Plan p;
  p.set_version(plan::SCHEMA_VERSION_CURRENT);
  p.mutable_mesh()->add_axes("pp");
  p.mutable_mesh()->add_axes("dp");
  p.mutable_mesh()->add_sizes(2);
  p.mutable_mesh()->add_sizes(2);
  p.mutable_training()->set_steps(1);
  p.mutable_training()->set_micro_batches(kMicroBatches);
  p.mutable_training()->set_micro_batch_size(kRows);
  p.mutable_training()->set_seq_length(1);
  p.mutable_training()->set_num_layers(2);
  p.mutable_pipeline()->set_schedule(pipeline::schemeName(scheme).str());
  llvm::Expected<pipeline::Schedules> order =
      pipeline::makeSchedule(scheme, 2, kMicroBatches, 1);
  if (!order) {
    ADD_FAILURE() << llvm::toString(order.takeError());
    return p;
  }
  bool split = scheme == pipeline::Scheme::ZeroBubbleH1;
  for (int s = 0; s < 2; ++s)
    addStage(p, s, 2, (*order)[s], split);
  return p;
}

/// The plan's own schedules, as simulate takes them.
pipeline::Schedules schedulesOf(const plan::Plan &p) {
  pipeline::Schedules out(p.pipeline().stages_size());
  for (int s = 0; s < p.pipeline().stages_size(); ++s) {
    const plan::Stage &stage = p.pipeline().stages(s);
    bool split = !stage.backward_weight().empty();
    for (const plan::ScheduleStep &step : p.pipeline().stages(s).schedule())
      out[s].push_back({step.kind() == plan::ScheduleStep::FORWARD
                            ? pipeline::Work::Forward
                        : step.kind() == plan::ScheduleStep::BACKWARD
                            ? (split ? pipeline::Work::BackwardInput
                                     : pipeline::Work::Backward)
                            : pipeline::Work::BackwardWeight,
                        step.micro_batch(), 0});
  }
  return out;
}

std::string render(const plan::Plan &p) {
  llvm::Expected<std::string> page = renderScheduleView(p, {"two.plan"});
  if (!page) {
    ADD_FAILURE() << llvm::toString(page.takeError());
    return "";
  }
  return std::move(*page);
}

int count(llvm::StringRef text, llvm::StringRef what) {
  int n = 0;
  for (size_t at = text.find(what); at != llvm::StringRef::npos;
       at = text.find(what, at + what.size()))
    ++n;
  return n;
}

/// A number attribute of the timeline's <svg>.
double svgNumber(llvm::StringRef page, llvm::StringRef attribute) {
  llvm::SmallVector<llvm::StringRef, 2> groups;
  llvm::Regex re("<svg class=\"timeline\"[^>]* " + attribute.str() +
                 "=\"([^\"]+)\"");
  if (!re.match(page, &groups)) {
    ADD_FAILURE() << "no " << attribute.str() << " on the timeline";
    return NAN;
  }
  return std::stod(groups[1].str());
}

struct DrawnBlock {
  std::string kind;
  int stage;
  int64_t microBatch;
  double start, end, x, width;
};

std::vector<DrawnBlock> blocks(llvm::StringRef page) {
  llvm::Regex re("<g class=\"block (forward|backward|weight)\" "
                 "data-stage=\"([0-9]+)\" data-micro-batch=\"([0-9]+)\" "
                 "data-start=\"([^\"]+)\" data-end=\"([^\"]+)\">"
                 "<title>[^<]*</title><rect x=\"([^\"]+)\" y=\"[^\"]+\" "
                 "width=\"([^\"]+)\"");
  std::vector<DrawnBlock> out;
  llvm::SmallVector<llvm::StringRef, 8> g;
  while (re.match(page, &g)) {
    out.push_back({g[1].str(), std::stoi(g[2].str()), std::stoll(g[3].str()),
                   std::stod(g[4].str()), std::stod(g[5].str()),
                   std::stod(g[6].str()), std::stod(g[7].str())});
    page = page.substr(g[0].end() - page.begin());
  }
  return out;
}

TEST(ScheduleView, HandBuiltPlanIsValid) {
  absl::Status s = plan::ValidatePlan(twoStagePlan());
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(ScheduleView, MatmulFlops) {
  plan::Plan p = twoStagePlan();
  const double product = 2.0 * kRows * kIn * kOut;
  std::map<plan::Kernel, double> seen;
  for (const plan::Function &fn : p.functions())
    for (const plan::Instruction &inst : fn.body())
      seen[inst.kernel()] = matmulFlops(p, inst);
  EXPECT_EQ(seen[plan::LINEAR], product);
  EXPECT_EQ(seen[plan::LINEAR_GRAD_INPUT], product);
  EXPECT_EQ(seen[plan::LINEAR_GRAD_WEIGHT], product);
  EXPECT_EQ(seen[plan::SEND], 0);
  EXPECT_EQ(seen[plan::ALL_REDUCE], 0);

  // Attention (one head, not causal): Q K^T and P V, 2 b s_q s_k d each.
  // Backward (docs/report.md): per score 10 d, per query row 2 d, and without
  // the forward's log-sum-exp (these three operands) the forward again.
  int32_t q = addBuffer(p, "q", {2, 16, 64}, plan::ACTIVATION, 0);
  int32_t k = addBuffer(p, "k", {2, 16, 32}, plan::ACTIVATION, 0);
  plan::Instruction attention;
  attention.set_kernel(plan::ATTENTION);
  attention.add_inputs(q);
  attention.add_inputs(k);
  attention.add_inputs(k);
  EXPECT_EQ(matmulFlops(p, attention), 2 * (2.0 * 2 * 16 * 16 * 64));
  attention.set_kernel(plan::ATTENTION_GRAD);
  const double scores = 2.0 * 16 * 16, rows = 2.0 * 16, d = 64;
  EXPECT_EQ(matmulFlops(p, attention),
            10 * d * scores + 2 * d * rows + 4 * d * scores);
  // Operands the plan does not have count nothing.
  attention.set_inputs(1, 9999);
  EXPECT_EQ(matmulFlops(p, attention), 0);
}

TEST(ScheduleView, OneLanePerStageWithItsRanks) {
  std::string page = render(twoStagePlan());
  EXPECT_EQ(count(page, "<g class=\"lane\" data-stage="), 2);
  // pp is the major axis: stage 0 is ranks 0 and 1, stage 1 ranks 2 and 3.
  EXPECT_NE(page.find(">stage 0 \u00b7 ranks 0, 1<"), std::string::npos);
  EXPECT_NE(page.find(">stage 1 \u00b7 ranks 2, 3<"), std::string::npos);
  EXPECT_NE(page.find("Schedule of two.plan"), std::string::npos);
  EXPECT_NE(page.find("pp 2 \u00d7 dp 2 = 4 ranks"), std::string::npos);
  EXPECT_NE(page.find("1f1b, 2 stages"), std::string::npos);
  // No scripts and nothing fetched.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

TEST(ScheduleView, OneBlockPerScheduleStepWithItsMicroBatch) {
  plan::Plan p = twoStagePlan();
  std::string page = render(p);
  std::vector<DrawnBlock> drawn = blocks(page);
  ASSERT_EQ(drawn.size(), size_t(2 * 2 * kMicroBatches));
  std::map<std::tuple<int, std::string, int64_t>, int> seen;
  for (const DrawnBlock &b : drawn)
    ++seen[{b.stage, b.kind, b.microBatch}];
  for (int s = 0; s < 2; ++s)
    for (const plan::ScheduleStep &step : p.pipeline().stages(s).schedule())
      EXPECT_EQ((seen[{s,
                       step.kind() == plan::ScheduleStep::FORWARD ? "forward"
                                                                  : "backward",
                       step.micro_batch()}]),
                1)
          << "stage " << s << " micro-batch " << step.micro_batch();
  // The micro-batch is written inside the block.
  EXPECT_NE(page.find("\" rx=\"2\"/><text "), std::string::npos);
  llvm::Regex number("data-micro-batch=\"2\"[^>]*><title>[^<]*</title>"
                     "<rect [^>]*/><text [^>]*>2</text>");
  EXPECT_TRUE(number.match(page));
}

TEST(ScheduleView, Legend) {
  std::string page = render(twoStagePlan());
  size_t legend = page.find("<div class=\"legend\">");
  ASSERT_NE(legend, std::string::npos);
  llvm::StringRef rest = llvm::StringRef(page).substr(legend);
  rest = rest.substr(0, rest.find("</div>"));
  for (const char *item :
       {"forward", "backward", "update (not timed)", "collective in the update",
        "send", "receive", "idle (the bubble)", "its micro-batch"})
    EXPECT_TRUE(rest.contains(item)) << item;
  // No weight-gradient steps in this plan, so no such entry.
  EXPECT_FALSE(rest.contains("weight gradient"));
}

/// Every block of `page` where `timeline` puts its step: the same times in
/// its data attributes, x and width at the page's pixels per time unit.
void expectBlocksAt(llvm::StringRef page, const pipeline::Timeline &timeline) {
  double x0 = svgNumber(page, "data-x0");
  double scale = svgNumber(page, "data-px-per-unit");
  EXPECT_DOUBLE_EQ(svgNumber(page, "data-step-time"), timeline.stepTime);
  EXPECT_GT(scale, 0);
  std::map<std::tuple<int, std::string, int64_t>, const pipeline::Interval *>
      want;
  size_t steps = 0;
  for (size_t s = 0; s < timeline.ranks.size(); ++s)
    for (const pipeline::Interval &i : timeline.ranks[s]) {
      std::string kind = i.step.work == pipeline::Work::Forward ? "forward"
                         : i.step.work == pipeline::Work::BackwardWeight
                             ? "weight"
                             : "backward";
      want[{int(s), kind, i.step.microBatch}] = &i;
      ++steps;
    }
  std::vector<DrawnBlock> drawn = blocks(page);
  ASSERT_EQ(drawn.size(), steps);
  for (const DrawnBlock &d : drawn) {
    const pipeline::Interval *i = want[{d.stage, d.kind, d.microBatch}];
    ASSERT_NE(i, nullptr);
    SCOPED_TRACE("stage " + std::to_string(d.stage) + " " + d.kind + " " +
                 std::to_string(d.microBatch));
    EXPECT_DOUBLE_EQ(d.start, i->start);
    EXPECT_DOUBLE_EQ(d.end, i->end);
    EXPECT_NEAR(d.x, x0 + i->start * scale, 0.006);
    EXPECT_NEAR(d.width, (i->end - i->start) * scale, 0.006);
  }
}

TEST(ScheduleView, TimesFollowTheSimulation) {
  plan::Plan p = twoStagePlan();
  std::string page = render(p);
  // Uniform costs: a forward is one product, a backward two.
  const double f = 2.0 * kRows * kIn * kOut, b = 2 * f;
  llvm::Expected<pipeline::Timeline> timeline =
      pipeline::simulate(schedulesOf(p), 2, kMicroBatches, 1,
                         pipeline::Costs::uniform(2, 1, f, b));
  ASSERT_TRUE(bool(timeline)) << llvm::toString(timeline.takeError());
  // (m + p - 1)(f + b) with uniform stages.
  EXPECT_DOUBLE_EQ(timeline->stepTime, (kMicroBatches + 1) * (f + b));
  expectBlocksAt(page, *timeline);
  // Each lane's bubble is the simulation's: 1/4 for p = 2, m = 3.
  EXPECT_NE(page.find("bubble 25.0 %"), std::string::npos);
  EXPECT_NE(page.find("(p\u22121)/(m+p\u22121) = 25.0 %"), std::string::npos);
}

TEST(ScheduleView, GPipe) {
  plan::Plan p = twoStagePlan(pipeline::Scheme::GPipe);
  ASSERT_TRUE(plan::ValidatePlan(p).ok()) << plan::ValidatePlan(p).message();
  std::string page = render(p);
  const double f = 2.0 * kRows * kIn * kOut;
  llvm::Expected<pipeline::Timeline> timeline =
      pipeline::simulate(schedulesOf(p), 2, kMicroBatches, 1,
                         pipeline::Costs::uniform(2, 1, f, 2 * f));
  ASSERT_TRUE(bool(timeline)) << llvm::toString(timeline.takeError());
  expectBlocksAt(page, *timeline);
  EXPECT_NE(page.find("gpipe, 2 stages"), std::string::npos);
}

TEST(ScheduleView, SplitBackwardsDrawWeightGradients) {
  plan::Plan p = twoStagePlan(pipeline::Scheme::ZeroBubbleH1);
  ASSERT_TRUE(plan::ValidatePlan(p).ok()) << plan::ValidatePlan(p).message();
  std::string page = render(p);
  // Forward, input gradient and weight gradient: one product each.
  const double f = 2.0 * kRows * kIn * kOut;
  llvm::Expected<pipeline::Timeline> timeline =
      pipeline::simulate(schedulesOf(p), 2, kMicroBatches, 1,
                         pipeline::Costs::uniformSplit(2, 1, f, f, f));
  ASSERT_TRUE(bool(timeline)) << llvm::toString(timeline.takeError());
  expectBlocksAt(page, *timeline);
  EXPECT_EQ(count(page, "<g class=\"block weight\""), 2 * kMicroBatches);
  EXPECT_NE(page.find("weight gradient</span>"), std::string::npos);
  EXPECT_NE(page.find("backward (input gradient)</span>"), std::string::npos);
  EXPECT_NE(page.find("backward-weight of micro-batch 0"), std::string::npos);
  // The gradients go up from the input gradient's block, not the weight's.
  EXPECT_EQ(count(page, "<line class=\"xfer\""), 2 * kMicroBatches);
}

TEST(ScheduleView, TransfersAndUpdate) {
  std::string page = render(twoStagePlan());
  // One arrow down (activations) and one up (gradients) per micro-batch,
  // each from a send to a receive.
  EXPECT_EQ(count(page, "<line class=\"xfer\""), 2 * kMicroBatches);
  EXPECT_EQ(count(page, "marker-start=\"url(#send)\" "
                        "marker-end=\"url(#receive)\""),
            2 * kMicroBatches);
  // An update block per lane, its collectives in its tooltip.
  EXPECT_EQ(count(page, "<g class=\"block update\""), 2);
  EXPECT_NE(page.find("update: stage1_update, 2 instructions\ncollectives: "
                      "ALL_REDUCE over dp\n  GRAD_NORM over pp"),
            std::string::npos);
  EXPECT_EQ(count(page, "<rect class=\"collective\""), 4);
}

TEST(ScheduleView, ACallOfItsOwnFunction) {
  // Stage 0's last backward runs a copy of its backward that also sums the
  // weight gradient over dp: that block's tooltip, and the lane's row,
  // name it and its collective; the other blocks keep the backward's.
  plan::Plan p = twoStagePlan();
  const plan::Function *backward = nullptr;
  for (const plan::Function &fn : p.functions())
    if (fn.name() == "stage0_backward")
      backward = &fn;
  ASSERT_NE(backward, nullptr);
  plan::Function *last = p.add_functions();
  *last = *backward;
  last->set_name("stage0_backward_last");
  int32_t dw = backward->body(backward->body_size() - 1).outputs(0);
  plan::Instruction *sum = add(last, plan::ALL_REDUCE, {dw}, {dw});
  sum->add_group("dp");
  (*sum->mutable_int_attrs())["async"] = 1;
  add(last, plan::WAIT, {dw}, {});
  plan::Stage *stage = p.mutable_pipeline()->mutable_stages(0);
  int lastStep = stage->schedule_size() - 1;
  ASSERT_EQ(stage->schedule(lastStep).kind(), plan::ScheduleStep::BACKWARD);
  stage->mutable_schedule(lastStep)->set_function("stage0_backward_last");
  int64_t m = stage->schedule(lastStep).micro_batch();
  ASSERT_TRUE(plan::ValidatePlan(p).ok()) << plan::ValidatePlan(p).message();
  std::string page = render(p);
  int n = backward->body_size();
  EXPECT_EQ(count(page, "stage0_backward_last: " + std::to_string(n + 2) +
                            " instructions"),
            1);
  EXPECT_EQ(
      count(page, "stage0_backward: " + std::to_string(n) + " instructions"),
      kMicroBatches - 1);
  EXPECT_EQ(count(page, "; in stage0_backward_last (backward of micro-batch " +
                            std::to_string(m) + "): ALL_REDUCE over dp"),
            1);
}

TEST(ScheduleView, PlanWithoutPipelineIsOneLaneOfMicroSteps) {
  plan::Plan p;
  p.set_version(plan::SCHEMA_VERSION_CURRENT);
  p.mutable_mesh()->add_axes("dp");
  p.mutable_mesh()->add_sizes(1);
  p.mutable_training()->set_steps(1);
  p.mutable_training()->set_micro_batches(4);
  p.mutable_training()->set_micro_batch_size(kRows);
  p.mutable_training()->set_seq_length(1);
  int32_t x = addBuffer(p, "x", {kRows, kIn}, plan::ACTIVATION, 0);
  int32_t w = addBuffer(p, "w", {kOut, kIn}, plan::PARAMETER, 0);
  int32_t y = addBuffer(p, "y", {kRows, kOut}, plan::ACTIVATION, 0);
  int32_t dy = addBuffer(p, "loss_grad", {kRows, kOut}, plan::INPUT, 0);
  int32_t dw = addBuffer(p, "dw", {kOut, kIn}, plan::GRADIENT, 0);
  plan::Function *micro = p.add_functions();
  micro->set_name("micro_step");
  (*add(micro, plan::LINEAR, {x, w}, {y})->mutable_int_attrs())["transpose_w"] =
      1;
  (*add(micro, plan::LINEAR_GRAD_WEIGHT, {x, dy}, {dw})
        ->mutable_int_attrs())["transpose_w"] = 1;
  p.mutable_training()->mutable_step()->set_micro_step("micro_step");
  ASSERT_TRUE(plan::ValidatePlan(p).ok()) << plan::ValidatePlan(p).message();

  std::string page = render(p);
  EXPECT_EQ(count(page, "<g class=\"lane\" data-stage="), 1);
  EXPECT_NE(page.find(">micro_step \u00b7 rank 0<"), std::string::npos);
  EXPECT_NE(page.find("no pipeline"), std::string::npos);
  // Forward (up to the first reader of loss_grad), then backward, in turn.
  std::vector<DrawnBlock> drawn = blocks(page);
  ASSERT_EQ(drawn.size(), 8u);
  const double f = 2.0 * kRows * kIn * kOut;
  for (size_t i = 0; i < drawn.size(); ++i) {
    EXPECT_EQ(drawn[i].kind, i % 2 ? "backward" : "forward");
    EXPECT_EQ(drawn[i].microBatch, int64_t(i / 2));
    EXPECT_DOUBLE_EQ(drawn[i].start, f * i);
  }
  EXPECT_DOUBLE_EQ(svgNumber(page, "data-step-time"), 8 * f);
  EXPECT_EQ(count(page, "class=\"xfer\""), 0);
  EXPECT_EQ(count(page, "<g class=\"block update\""), 0);
  EXPECT_EQ(count(page, "last_micro_step"), 0);

  // With the gradient's sum started in the last micro-batch's backward
  // (last_micro_step): that block, and only it, names the function and
  // its collective; the lane's row lists it.
  plan::Function *last = p.add_functions();
  *last = *micro;
  last->set_name("last_micro_step");
  plan::Instruction *sum = add(last, plan::ALL_REDUCE, {dw}, {dw});
  sum->add_group("dp");
  (*sum->mutable_int_attrs())["async"] = 1;
  add(last, plan::WAIT, {dw}, {});
  p.mutable_training()->mutable_step()->set_last_micro_step("last_micro_step");
  ASSERT_TRUE(plan::ValidatePlan(p).ok()) << plan::ValidatePlan(p).message();
  page = render(p);
  EXPECT_EQ(count(page, "last_micro_step (its backward part): 3 instructions"),
            1);
  EXPECT_EQ(count(page, "micro_step (its backward part): 1 instructions"), 3);
  EXPECT_EQ(count(page, "collectives: ALL_REDUCE over dp"), 1);
  EXPECT_EQ(count(page, "; in last_micro_step (backward of micro-batch 3): "
                        "ALL_REDUCE over dp"),
            1);
  EXPECT_EQ(blocks(page).size(), 8u);

  // With a collective on the parameter in the first micro-batch's forward
  // (first_micro_step, as for ZeRO's overlapped gathers, which need a flat
  // bucket): that forward block, and only it, names the function and its
  // collective; its backward part is micro_step's, so that block stays
  // micro_step's.
  plan::Function *first = p.add_functions();
  first->set_name("first_micro_step");
  plan::Instruction *gather = add(first, plan::ALL_REDUCE, {w}, {w});
  gather->add_group("dp");
  (*gather->mutable_int_attrs())["async"] = 1;
  add(first, plan::WAIT, {w}, {});
  for (const plan::Instruction &inst : micro->body())
    *first->add_body() = inst;
  p.mutable_training()->mutable_step()->set_first_micro_step(
      "first_micro_step");
  ASSERT_TRUE(plan::ValidatePlan(p).ok()) << plan::ValidatePlan(p).message();
  page = render(p);
  EXPECT_EQ(count(page, "first_micro_step (its forward part): 3 instructions"),
            1);
  EXPECT_EQ(count(page, "first_micro_step (its backward part)"), 0);
  EXPECT_EQ(count(page, "micro_step (its forward part): 1 instructions"), 3);
  EXPECT_EQ(count(page, "micro_step (its backward part): 1 instructions"), 3);
  EXPECT_EQ(count(page, "; in first_micro_step (forward of micro-batch 0): "
                        "ALL_REDUCE over dp"),
            1);
  EXPECT_EQ(blocks(page).size(), 8u);
}

TEST(ScheduleView, Errors) {
  plan::Plan empty;
  llvm::Expected<std::string> page = renderScheduleView(empty);
  ASSERT_FALSE(bool(page));
  EXPECT_EQ(llvm::toString(page.takeError()),
            "the plan has no pipeline and no training.step.micro_step, "
            "expected one of them to draw");

  plan::Plan p = twoStagePlan();
  p.mutable_pipeline()->mutable_stages(1)->set_backward("nowhere");
  page = renderScheduleView(p);
  ASSERT_FALSE(bool(page));
  EXPECT_EQ(llvm::toString(page.takeError()),
            "pipeline stage 1's backward names function 'nowhere', which the "
            "plan does not have");

  p = twoStagePlan();
  p.mutable_training()->set_micro_batches(int64_t(1) << 20);
  page = renderScheduleView(p);
  ASSERT_FALSE(bool(page));
  EXPECT_EQ(llvm::toString(page.takeError()),
            "the plan's training.micro_batches is 1048576, expected 1 to "
            "16384 (the most the view draws)");

  // Orders that wait on each other forever: simulate's error, named.
  p = twoStagePlan();
  plan::Stage *last = p.mutable_pipeline()->mutable_stages(1);
  last->mutable_schedule()->SwapElements(0, 1);
  page = renderScheduleView(p);
  ASSERT_FALSE(bool(page));
  EXPECT_TRUE(llvm::StringRef(llvm::toString(page.takeError()))
                  .starts_with("cannot simulate the plan's schedule: "));
}

} // namespace
