//===- PipelineValidationTest.cpp - Pipeline stages, slots, SEND and RECV -===//
//
// The loader's checks of pipeline parallelism: the "pp" axis of the mesh and
// the stages' functions, buffers of a stage and their slots (inside the
// arena and the stage's own, one per slot of the chunk whose calls name
// them, each chunk with slots of its own), each stage's
// arena, each stage's schedule, the
// point-to-point kernels, and GRAD_NORM's replicated_copies. Every refusal
// names what it found and what it expected.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/PlanLoader.h"

#include "tests/runtime/exec/PlanBuilder.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

using namespace braid::plan;

namespace {

std::string errorOf(const Plan &plan) {
  absl::StatusOr<Plan> parsed =
      ParsePlanFile(SerializePlanFile(plan), "p.plan");
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

#define EXPECT_REFUSED(plan, text)                                             \
  EXPECT_NE(errorOf(plan).find(text), std::string::npos)                       \
      << "error: '" << errorOf(plan) << "'"

void addStep(Stage *stage, ScheduleStep::Kind kind, int64_t micro,
             int64_t slot) {
  ScheduleStep *step = stage->add_schedule();
  step->set_kind(kind);
  step->set_micro_batch(micro);
  step->set_slot(slot);
}

// Buffers, in order:
//   stage 0: 0 x [2, 4] (2 slots), 1 w0 [4, 4], 2 h (2 slots), 3 dh (2
//            slots), 4 dw0;
//   stage 1: 5 h1 [2, 4], 6 dh1, 7 norm [], 8 scale [].
// Functions: 0 s0.forward (LINEAR, SEND +1), 1 s0.backward (RECV +1,
// LINEAR_GRAD_WEIGHT), 2 s1.forward (RECV -1), 3 s1.backward (ADD, SEND -1),
// 4 s1.update (GRAD_NORM over pp). Two micro-batches: stage 0 runs both
// forwards first on slots 0 and 1, stage 1 one micro-batch at a time.
Plan pipelinePlan() {
  braid::exec_test::PlanBuilder b;
  b.plan.mutable_mesh()->set_axes(0, "pp");
  b.plan.mutable_mesh()->set_sizes(0, 2);
  int x = b.buffer("x", F32, {2, 4}, ACTIVATION, 2, 0);
  int w0 = b.buffer("w0", F32, {4, 4}, PARAMETER, 0, 0);
  int h = b.buffer("h", F32, {2, 4}, ACTIVATION, 2, 0);
  int dh = b.buffer("dh", F32, {2, 4}, ACTIVATION, 2, 0);
  int dw0 = b.buffer("dw0", F32, {4, 4}, GRADIENT, 0, 0);
  int h1 = b.buffer("h1", F32, {2, 4}, ACTIVATION, 0, 1);
  int dh1 = b.buffer("dh1", F32, {2, 4}, ACTIVATION, 1, 1);
  int norm = b.buffer("norm", F32, {}, WORKSPACE, 0, 1);
  int scale = b.buffer("scale", F32, {}, WORKSPACE, 0, 1);
  // No padding after the last buffer: the arena ends with it.
  b.plan.set_arena_bytes(b.plan.buffers(scale).offset() + 4);
  int64_t arena0 = b.plan.buffers(h1).offset();
  auto p2p = [](Instruction *inst, int64_t peer) {
    inst->set_rank_axis("pp");
    (*inst->mutable_int_attrs())["peer"] = peer;
  };
  Function *f = b.function("s0.forward");
  (*b.add(f, LINEAR, {x, w0}, {h})->mutable_int_attrs())["transpose_w"] = 0;
  p2p(b.add(f, SEND, {h}, {}), +1);
  f = b.function("s0.backward");
  p2p(b.add(f, RECV, {}, {dh}), +1);
  (*b.add(f, LINEAR_GRAD_WEIGHT, {x, dh}, {dw0})
        ->mutable_int_attrs())["transpose_w"] = 0;
  f = b.function("s1.forward");
  p2p(b.add(f, RECV, {}, {h1}), -1);
  f = b.function("s1.backward");
  b.add(f, ADD, {h1, h1}, {dh1});
  p2p(b.add(f, SEND, {dh1}, {}), -1);
  f = b.function("s1.update");
  Instruction *gn = b.add(f, GRAD_NORM, {dh1}, {norm, scale});
  gn->add_group("pp");
  (*gn->mutable_int_attrs())["split_inputs"] = 1;
  (*gn->mutable_float_attrs())["max_norm"] = 1.0;

  Training *t = b.plan.mutable_training();
  t->set_steps(1);
  t->set_micro_batch_size(2);
  t->set_seq_length(4);
  t->set_micro_batches(2);
  Pipeline *p = b.plan.mutable_pipeline();
  p->set_schedule("gpipe");
  Stage *s0 = p->add_stages();
  s0->set_forward("s0.forward");
  s0->set_backward("s0.backward");
  s0->set_slots(2);
  s0->set_arena_bytes(arena0);
  addStep(s0, ScheduleStep::FORWARD, 0, 0);
  addStep(s0, ScheduleStep::FORWARD, 1, 1);
  addStep(s0, ScheduleStep::BACKWARD, 0, 0);
  addStep(s0, ScheduleStep::BACKWARD, 1, 1);
  Stage *s1 = p->add_stages();
  s1->set_forward("s1.forward");
  s1->set_backward("s1.backward");
  s1->set_update("s1.update");
  s1->set_slots(1);
  // Stage 1's buffers come after stage 0's (they could start at 0).
  s1->set_arena_bytes(b.plan.arena_bytes());
  for (int64_t m : {0, 1}) {
    addStep(s1, ScheduleStep::FORWARD, m, 0);
    addStep(s1, ScheduleStep::BACKWARD, m, 0);
  }
  return b.plan;
}

Instruction *bodyOf(Plan &plan, int fn, int i) {
  return plan.mutable_functions(fn)->mutable_body(i);
}
ScheduleStep *stepOf(Plan &plan, int stage, int i) {
  return plan.mutable_pipeline()->mutable_stages(stage)->mutable_schedule(i);
}

TEST(PipelineValidation, AValidPipeline) {
  Plan plan = pipelinePlan();
  EXPECT_EQ(errorOf(plan), "");
  // Training.step is unused with a pipeline; the plan above has none.
  EXPECT_TRUE(plan.training().step().micro_step().empty());
  // Seeds for the loader's fuzzer (scripts/fuzz-plan.sh), when asked for.
  if (const char *dir = std::getenv("BRAID_FUZZ_SEED_DIR")) {
    std::string framed = SerializePlanFile(plan);
    std::ofstream(std::string(dir) + "/pipeline.plan", std::ios::binary)
        << framed;
    std::ofstream(std::string(dir) + "/pipeline-payload.bin", std::ios::binary)
        << framed.substr(20);
  }
}

// The mesh has one "pp" rank per stage; the stages' functions exist, forward
// and backward are required, and a function is the program of one stage.
TEST(PipelineValidation, MeshAndStageFunctions) {
  Plan plan = pipelinePlan();
  plan.mutable_mesh()->set_axes(0, "dp");
  EXPECT_EQ(errorOf(plan), "p.plan: the pipeline has 2 stages but the mesh "
                           "has no axis 'pp' (expected one of size 2)");
  plan = pipelinePlan();
  plan.mutable_mesh()->set_sizes(0, 3);
  EXPECT_EQ(errorOf(plan), "p.plan: the pipeline has 2 stages but mesh axis "
                           "'pp' has size 3 (expected one rank per stage)");
  plan = pipelinePlan();
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(2);
  EXPECT_EQ(errorOf(plan), ""); // pp x tp
  plan = pipelinePlan();
  plan.clear_training();
  EXPECT_REFUSED(plan, "the pipeline has no training section");
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(1)->clear_forward();
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 1 names no forward function");
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(0)->clear_backward();
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 0 names no backward function");
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(0)->set_update("nope");
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 0's update names function "
                           "'nope', which the plan does not have");
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(1)->set_zero_grads("s0.forward");
  EXPECT_EQ(errorOf(plan),
            "p.plan: function 's0.forward' belongs to pipeline stages 0 and 1 "
            "(a function is the program of one stage)");
  // A backward call may run a function of its stage's own (stage 0's last
  // backward, a copy of s0.backward); not a forward, nor a function of
  // another stage, nor one the plan lacks.
  plan = pipelinePlan();
  {
    Function *last = plan.add_functions();
    *last = plan.functions(1); // s0.backward
    last->set_name("s0.backward_last");
  }
  stepOf(plan, 0, 3)->set_function("s0.backward_last");
  EXPECT_EQ(errorOf(plan), "");
  stepOf(plan, 0, 3)->set_function("s1.backward");
  EXPECT_EQ(errorOf(plan),
            "p.plan: function 's1.backward' belongs to pipeline stages 0 and 1 "
            "(a function is the program of one stage)");
  stepOf(plan, 0, 3)->set_function("nowhere");
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 0's schedule step 3 names "
                           "function 'nowhere', which the plan does not have");
  stepOf(plan, 0, 3)->clear_function();
  stepOf(plan, 0, 0)->set_function("s0.backward_last");
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 0's schedule step 0 names function "
            "'s0.backward_last' but only a BACKWARD or BACKWARD_WEIGHT may run "
            "a function other than its chunk's");
  // The training's micro_batches size the schedules.
  plan = pipelinePlan();
  plan.mutable_training()->set_micro_batches(0);
  EXPECT_EQ(errorOf(plan),
            "p.plan: training.micro_batches = 0 must be in [1, 2^40]");
}

// Buffer.stage names a stage, and a stage's functions name only its buffers.
TEST(PipelineValidation, BuffersOfStages) {
  Plan plan = pipelinePlan();
  plan.mutable_buffers(5)->set_stage(2);
  EXPECT_EQ(errorOf(plan), "p.plan: buffer 5 ('h1') belongs to stage 2, "
                           "outside the pipeline's 2 stages [0, 2)");
  plan = pipelinePlan();
  plan.mutable_buffers(0)->set_stage(-1);
  EXPECT_REFUSED(plan, "buffer 0 ('x') belongs to stage -1, outside");
  plan = pipelinePlan();
  plan.clear_pipeline();
  EXPECT_EQ(errorOf(plan), "p.plan: buffer 5 ('h1') belongs to stage 1 but "
                           "the plan has no pipeline (expected 0)");
  plan = pipelinePlan();
  bodyOf(plan, 2, 0)->set_outputs(0, 2); // stage 1 receives into stage 0's h
  EXPECT_EQ(errorOf(plan),
            "p.plan: function 's1.forward' instruction 0 (RECV, from RECV): "
            "buffer 2 ('h') belongs to stage 0, but the function is the "
            "program of stage 1");
  // A function of no stage may name any buffer.
  plan = pipelinePlan();
  braid::exec_test::PlanBuilder().add(plan.add_functions(), ADD, {0, 5}, {6});
  plan.mutable_functions(5)->set_name("debug");
  EXPECT_EQ(errorOf(plan), "");
}

// Slots: every copy inside the arena, as many as the stage's slots.
TEST(PipelineValidation, Slots) {
  Plan plan = pipelinePlan();
  plan.mutable_buffers(0)->set_slots(-1);
  EXPECT_EQ(errorOf(plan),
            "p.plan: buffer 0 ('x') has slots = -1, expected at least 0");
  plan = pipelinePlan();
  plan.mutable_buffers(8)->set_slots(2);
  int64_t at = plan.buffers(8).offset();
  EXPECT_EQ(errorOf(plan),
            "p.plan: buffer 8 ('scale')'s 2 slots of 4 bytes from byte " +
                std::to_string(at) + " leave the arena of " +
                std::to_string(at + 4) + " bytes");
  // The arena check counts the slots, and cannot overflow.
  plan = pipelinePlan();
  plan.mutable_buffers(0)->set_slots(int64_t(1) << 62);
  EXPECT_REFUSED(plan, "buffer 0 ('x')'s 4611686018427387904 slots of 32 "
                       "bytes from byte 0 leave the arena");
  plan = pipelinePlan();
  plan.mutable_buffers(0)->set_slots(3);
  EXPECT_EQ(errorOf(plan),
            "p.plan: buffer 0 ('x') of stage 0 has 3 slots but the stage has "
            "2 (expected 2 slots, or 0 or 1 for a single copy)");
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(1)->set_slots(0);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 1 has slots = 0, expected at least 1");
  // One copy (slots 0 or 1) is allowed on a stage of any number of slots.
  plan = pipelinePlan();
  plan.mutable_buffers(1)->set_slots(1);
  EXPECT_EQ(errorOf(plan), "");
}

// Each stage's own arena (what its ranks allocate): inside [0, the plan's
// arena], and every copy of every buffer of the stage inside it. Stage 0's
// buffers end at byte 320 (dw0, [256, 320)); dh's two slots are [192, 224)
// and [224, 256).
TEST(PipelineValidation, StageArenas) {
  Plan plan = pipelinePlan();
  ASSERT_EQ(plan.pipeline().stages(0).arena_bytes(), 320);
  int64_t arena = plan.arena_bytes();
  plan.mutable_pipeline()->mutable_stages(1)->set_arena_bytes(-1);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 1 has arena_bytes = -1, outside [0, " +
                std::to_string(arena) +
                "] (the plan's arena_bytes, the largest stage's)");
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(0)->set_arena_bytes(arena + 1);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 0 has arena_bytes = " +
                std::to_string(arena + 1) + ", outside [0, " +
                std::to_string(arena) +
                "] (the plan's arena_bytes, the largest stage's)");
  // A buffer that ends after its stage's arena.
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(0)->set_arena_bytes(319);
  EXPECT_EQ(errorOf(plan),
            "p.plan: buffer 4 ('dw0') of stage 0 occupies bytes [256, 320), "
            "which leave stage 0's arena of 319 bytes");
  // Every slot counts: dh's second copy ends at 256.
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(0)->set_arena_bytes(255);
  EXPECT_EQ(errorOf(plan),
            "p.plan: buffer 3 ('dh') of stage 0 occupies bytes [192, 256) (2 "
            "slots of 32 bytes), which leave stage 0's arena of 255 bytes");
  // A plan whose stages state no arena (one from before Stage.arena_bytes)
  // is refused with a hint, not run in the wrong arena.
  plan = pipelinePlan();
  for (Stage &stage : *plan.mutable_pipeline()->mutable_stages())
    stage.clear_arena_bytes();
  EXPECT_EQ(errorOf(plan),
            "p.plan: buffer 0 ('x') of stage 0 occupies bytes [0, 64) (2 slots "
            "of 32 bytes), which leave stage 0's arena of 0 bytes (the stage "
            "states no arena_bytes: compile the plan again)");
  // A stage may have more than it needs, and the plan's arena more than the
  // largest stage's.
  plan = pipelinePlan();
  plan.set_arena_bytes(arena + 64);
  plan.mutable_pipeline()->mutable_stages(0)->set_arena_bytes(arena + 64);
  EXPECT_EQ(errorOf(plan), "");
}

// Each stage's schedule: a FORWARD then a BACKWARD of every micro-batch, on
// one slot that no other micro-batch holds in between.
TEST(PipelineValidation, Schedules) {
  Plan plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(0)->mutable_schedule()->RemoveLast();
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 0's schedule has 3 steps, expected 4 (a "
            "FORWARD and a BACKWARD for each of the 2 micro-batches)");
  plan = pipelinePlan();
  stepOf(plan, 0, 0)->set_kind(ScheduleStep::KIND_UNSPECIFIED);
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 0's schedule step 0: kind "
                           "0 is not FORWARD or BACKWARD (BACKWARD_WEIGHT "
                           "needs the stage's backward_weight function)");
  plan = pipelinePlan();
  stepOf(plan, 1, 2)->set_micro_batch(2);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 1's schedule step 2: micro-batch 2 is "
            "outside [0, 2) (training.micro_batches = 2)");
  plan = pipelinePlan();
  stepOf(plan, 0, 1)->set_slot(2);
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 0's schedule step 1: slot "
                           "2 is outside the stage's 2 slots [0, 2)");
  plan = pipelinePlan();
  stepOf(plan, 0, 1)->set_slot(-1);
  EXPECT_REFUSED(plan, "step 1: slot -1 is outside the stage's 2 slots");
  plan = pipelinePlan();
  stepOf(plan, 0, 1)->set_micro_batch(0);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 0's schedule step 1: a second FORWARD of "
            "micro-batch 0 (expected one per micro-batch)");
  plan = pipelinePlan();
  stepOf(plan, 1, 3)->set_micro_batch(0);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 1's schedule step 3: a second BACKWARD of "
            "micro-batch 0 (expected one per micro-batch)");
  plan = pipelinePlan();
  stepOf(plan, 1, 0)->set_kind(ScheduleStep::BACKWARD);
  stepOf(plan, 1, 1)->set_kind(ScheduleStep::FORWARD);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 1's schedule step 0: the BACKWARD of "
            "micro-batch 0 comes before its FORWARD");
  plan = pipelinePlan();
  stepOf(plan, 0, 2)->set_slot(1);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 0's schedule step 2: the BACKWARD of "
            "micro-batch 0 uses slot 1 but its FORWARD used slot 0 (expected "
            "the same slot)");
  // Micro-batch 1's FORWARD on the slot micro-batch 0 still holds.
  plan = pipelinePlan();
  stepOf(plan, 0, 1)->set_slot(0);
  stepOf(plan, 0, 3)->set_slot(0);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 0's schedule step 1: the FORWARD of "
            "micro-batch 1 reuses slot 0, which micro-batch 0 holds until its "
            "BACKWARD (expected a free slot)");
  // Any free slot will do: the same order with the slots swapped.
  plan = pipelinePlan();
  stepOf(plan, 0, 0)->set_slot(1);
  stepOf(plan, 0, 1)->set_slot(0);
  stepOf(plan, 0, 2)->set_slot(1);
  stepOf(plan, 0, 3)->set_slot(0);
  EXPECT_EQ(errorOf(plan), "");
  // A slot is free again after its micro-batch's BACKWARD: F0 B0 F1 B1, all
  // on slot 0 (as stage 1 runs them).
  plan = pipelinePlan();
  ScheduleStep forward1 = plan.pipeline().stages(0).schedule(1);
  *stepOf(plan, 0, 1) = plan.pipeline().stages(0).schedule(2); // B0
  *stepOf(plan, 0, 2) = forward1;
  stepOf(plan, 0, 2)->set_slot(0);
  stepOf(plan, 0, 3)->set_slot(0);
  EXPECT_EQ(errorOf(plan), "");
}

// SEND (x) -> () and RECV () -> (y) along a rank_axis, to the next or the
// previous rank, which must exist for the stage that runs them.
TEST(PipelineValidation, SendAndRecv) {
  Plan plan = pipelinePlan();
  bodyOf(plan, 0, 1)->add_outputs(2);
  EXPECT_REFUSED(plan, "function 's0.forward' instruction 1 (SEND, from "
                       "SEND): has 1 inputs and 1 outputs; the kernel takes "
                       "1 inputs and 0 outputs");
  plan = pipelinePlan();
  bodyOf(plan, 2, 0)->add_inputs(5);
  EXPECT_REFUSED(plan, "(RECV, from RECV): has 1 inputs and 1 outputs; the "
                       "kernel takes 0 inputs and 1 outputs");
  plan = pipelinePlan();
  bodyOf(plan, 2, 0)->set_outputs(0, 99);
  EXPECT_REFUSED(plan, "output buffer 99 does not exist");
  plan = pipelinePlan();
  bodyOf(plan, 0, 1)->clear_rank_axis();
  EXPECT_REFUSED(plan, "(SEND, from SEND): names no rank_axis (the mesh axis "
                       "along which its peer is)");
  plan = pipelinePlan();
  bodyOf(plan, 0, 1)->set_rank_axis("zz");
  EXPECT_REFUSED(plan, "rank_axis 'zz' is not an axis of the mesh");
  plan = pipelinePlan();
  bodyOf(plan, 0, 1)->mutable_int_attrs()->erase("peer");
  EXPECT_REFUSED(plan, "(SEND, from SEND): lacks the integer attribute 'peer'");
  for (int64_t peer : {0, 2, -2}) {
    plan = pipelinePlan();
    (*bodyOf(plan, 2, 0)->mutable_int_attrs())["peer"] = peer;
    EXPECT_REFUSED(plan, "(RECV, from RECV): attribute 'peer' = " +
                             std::to_string(peer) +
                             " is not a non-zero offset to another of the 2 "
                             "ranks along 'pp'");
  }
  // The last stage has no next stage, the first no previous one.
  plan = pipelinePlan();
  (*bodyOf(plan, 3, 1)->mutable_int_attrs())["peer"] = 1;
  EXPECT_EQ(errorOf(plan),
            "p.plan: function 's1.backward' instruction 1 (SEND, from SEND): "
            "sends to stage 2 (peer +1 of stage 1), which the pipeline of 2 "
            "stages does not have (expected a peer in [0, 2))");
  plan = pipelinePlan();
  (*bodyOf(plan, 1, 0)->mutable_int_attrs())["peer"] = -1;
  EXPECT_REFUSED(plan, "(RECV, from RECV): receives from stage -1 (peer -1 "
                       "of stage 0), which the pipeline of 2 stages does not "
                       "have");
  // Outside a pipeline the coordinate is unknown: +1 and -1 both load.
  plan = pipelinePlan();
  plan.clear_pipeline();
  plan.clear_training();
  for (Buffer &b : *plan.mutable_buffers())
    b.clear_stage();
  (*bodyOf(plan, 3, 1)->mutable_int_attrs())["peer"] = 1;
  EXPECT_EQ(errorOf(plan), "");
  // ... but an axis of one rank has no peer at all.
  plan.mutable_mesh()->set_sizes(0, 1);
  EXPECT_REFUSED(plan, "(SEND, from SEND): rank_axis 'pp' has one rank: "
                       "there is no peer along it");
  // Point to point has no group.
  plan = pipelinePlan();
  bodyOf(plan, 0, 1)->add_group("pp");
  EXPECT_REFUSED(plan, "(SEND, from SEND): names a group but is not a "
                       "collective");
}

// GRAD_NORM's replicated_copies: at least one, at most the group's ranks.
TEST(PipelineValidation, GradNormReplicatedCopies) {
  Plan plan = pipelinePlan();
  bodyOf(plan, 4, 0)->add_inputs(5); // h1, replicated
  EXPECT_EQ(errorOf(plan), "");
  for (int64_t copies : {1, 2}) {
    (*bodyOf(plan, 4, 0)->mutable_int_attrs())["replicated_copies"] = copies;
    EXPECT_EQ(errorOf(plan), "");
  }
  for (int64_t copies : {0, 3, -1}) {
    (*bodyOf(plan, 4, 0)->mutable_int_attrs())["replicated_copies"] = copies;
    EXPECT_REFUSED(plan, "function 's1.update' instruction 0 (GRAD_NORM, "
                         "from GRAD_NORM): attribute 'replicated_copies' = " +
                             std::to_string(copies) + " is outside [1, 2]");
  }
  // Without a group, only 1.
  bodyOf(plan, 4, 0)->clear_group();
  (*bodyOf(plan, 4, 0)->mutable_int_attrs())["replicated_copies"] = 2;
  EXPECT_REFUSED(plan, "attribute 'replicated_copies' = 2 is outside [1, 1]");
}

} // namespace

// A stage with a backward_weight function (zero-bubble): every micro-batch
// has a FORWARD, a BACKWARD and then a BACKWARD_WEIGHT on one slot, which
// it holds until the BACKWARD_WEIGHT.
TEST(PipelineValidation, SplitBackwardSchedules) {
  // Stage 1 of pipelinePlan() runs F0 B0 F1 B1 on slot 0: give it a weight
  // function (its backward's, for the test) and W steps.
  auto split = [](std::vector<std::pair<ScheduleStep::Kind, int64_t>> order) {
    Plan plan = pipelinePlan();
    Stage *stage = plan.mutable_pipeline()->mutable_stages(1);
    stage->set_backward_weight(stage->backward());
    stage->clear_schedule();
    for (auto [kind, m] : order) {
      ScheduleStep *step = stage->add_schedule();
      step->set_kind(kind);
      step->set_micro_batch(m);
      step->set_slot(0);
    }
    return plan;
  };
  const auto F = ScheduleStep::FORWARD, B = ScheduleStep::BACKWARD,
             W = ScheduleStep::BACKWARD_WEIGHT;
  EXPECT_EQ(errorOf(split({{F, 0}, {B, 0}, {W, 0}, {F, 1}, {B, 1}, {W, 1}})),
            "");
  EXPECT_EQ(errorOf(split({{F, 0}, {B, 0}, {F, 1}, {B, 1}})),
            "p.plan: pipeline stage 1's schedule has 4 steps, expected 6 (a "
            "FORWARD, a BACKWARD and a BACKWARD_WEIGHT for each of the 2 "
            "micro-batches)");
  EXPECT_EQ(errorOf(split({{F, 0}, {W, 0}, {B, 0}, {F, 1}, {B, 1}, {W, 1}})),
            "p.plan: pipeline stage 1's schedule step 1: the BACKWARD_WEIGHT "
            "of micro-batch 0 comes before its BACKWARD");
  // The slot stays held from B0 until W0.
  EXPECT_EQ(errorOf(split({{F, 0}, {B, 0}, {F, 1}, {W, 0}, {B, 1}, {W, 1}})),
            "p.plan: pipeline stage 1's schedule step 2: the FORWARD of "
            "micro-batch 1 reuses slot 0, which micro-batch 0 holds until its "
            "BACKWARD_WEIGHT (expected a free slot)");
  EXPECT_EQ(errorOf(split({{F, 0}, {B, 0}, {W, 0}, {W, 0}, {F, 1}, {B, 1}})),
            "p.plan: pipeline stage 1's schedule step 3: a second "
            "BACKWARD_WEIGHT of micro-batch 0 (expected one per micro-batch)");
  // Without a backward_weight function there are no W steps.
  Plan plan = pipelinePlan();
  stepOf(plan, 1, 1)->set_kind(W);
  EXPECT_REFUSED(plan, "kind 3 is not FORWARD or BACKWARD (BACKWARD_WEIGHT "
                       "needs the stage's backward_weight function)");
}

// Interleaved stages: a step's chunk is one of the stage's, every stage has
// as many chunks, and each chunk's functions exist.
TEST(PipelineValidation, Chunks) {
  Plan plan = pipelinePlan();
  stepOf(plan, 0, 0)->set_chunk(1);
  EXPECT_REFUSED(plan, "pipeline stage 0's schedule step 0: chunk 1 is "
                       "outside the stage's 1 model chunks [0, 1)");
  plan = pipelinePlan();
  Chunk *chunk = plan.mutable_pipeline()->mutable_stages(1)->add_chunks();
  chunk->set_forward(plan.pipeline().stages(1).forward());
  chunk->set_backward(plan.pipeline().stages(1).backward());
  EXPECT_REFUSED(plan, "pipeline stage 1 has 2 model chunks but stage 0 has "
                       "1 (expected the same on every stage)");
  plan = pipelinePlan();
  for (int s = 0; s < 2; ++s) {
    Chunk *c = plan.mutable_pipeline()->mutable_stages(s)->add_chunks();
    c->set_forward("nowhere");
    c->set_backward(plan.pipeline().stages(s).backward());
  }
  EXPECT_REFUSED(plan, "pipeline stage 0's chunk 1's forward names function "
                       "'nowhere', which the plan does not have");
}

namespace {

// Two stages of two model chunks each (the interleaved schedule), two
// micro-batches. Stage s has buffers 3s "a0.s" (chunk 0's, 2 slots), 3s + 1
// "a1.s" (chunk 1's, one copy) and 3s + 2 "w.s" (a workspace); functions
// "sS.forward" and "sS.backward" (chunk 0) and "sS.c1.forward" and
// "sS.c1.backward" (chunk 1), each an ADD of its chunk's buffer into w.
// Each stage runs F0 F1 F0.1 B0.1 F1.1 B1.1 B0 B1: chunk 0 holds both
// micro-batches at once (slots 0 and 1), chunk 1 one at a time (slot 0,
// while micro-batch 0 holds chunk 0's slot 0), so chunk_slots = [2, 1].
Plan interleavedPlan() {
  braid::exec_test::PlanBuilder b;
  b.plan.mutable_mesh()->set_axes(0, "pp");
  b.plan.mutable_mesh()->set_sizes(0, 2);
  Training *t = b.plan.mutable_training();
  t->set_steps(1);
  t->set_micro_batch_size(2);
  t->set_seq_length(4);
  t->set_micro_batches(2);
  Pipeline *p = b.plan.mutable_pipeline();
  p->set_schedule("interleaved");
  for (int s = 0; s < 2; ++s) {
    std::string n = std::to_string(s);
    int a0 = b.buffer(("a0." + n).c_str(), F32, {2, 4}, ACTIVATION, 2, s);
    int a1 = b.buffer(("a1." + n).c_str(), F32, {2, 4}, ACTIVATION, 1, s);
    int w = b.buffer(("w." + n).c_str(), F32, {2, 4}, WORKSPACE, 0, s);
    for (auto [name, a] : {std::pair<std::string, int>{"forward", a0},
                           {"backward", a0},
                           {"c1.forward", a1},
                           {"c1.backward", a1}})
      b.add(b.function(("s" + n + "." + name).c_str()), ADD, {a, a}, {w});
    Stage *stage = p->add_stages();
    stage->set_forward("s" + n + ".forward");
    stage->set_backward("s" + n + ".backward");
    Chunk *chunk = stage->add_chunks();
    chunk->set_forward("s" + n + ".c1.forward");
    chunk->set_backward("s" + n + ".c1.backward");
    stage->set_slots(2);
    stage->add_chunk_slots(2);
    stage->add_chunk_slots(1);
    for (auto [kind, micro, k, slot] :
         {std::tuple<ScheduleStep::Kind, int64_t, int64_t, int64_t>{
              ScheduleStep::FORWARD, 0, 0, 0},
          {ScheduleStep::FORWARD, 1, 0, 1},
          {ScheduleStep::FORWARD, 0, 1, 0},
          {ScheduleStep::BACKWARD, 0, 1, 0},
          {ScheduleStep::FORWARD, 1, 1, 0},
          {ScheduleStep::BACKWARD, 1, 1, 0},
          {ScheduleStep::BACKWARD, 0, 0, 0},
          {ScheduleStep::BACKWARD, 1, 0, 1}}) {
      addStep(stage, kind, micro, slot);
      stage->mutable_schedule(stage->schedule_size() - 1)->set_chunk(k);
    }
  }
  for (int s = 0; s < 2; ++s)
    p->mutable_stages(s)->set_arena_bytes(b.plan.arena_bytes());
  return b.plan;
}

} // namespace

// Each model chunk has slots of its own: chunk_slots gives each chunk's
// count (the stage's slots is the largest), a slotted buffer has the count
// of the one chunk whose calls name it, and a step's slot is below its
// chunk's count and free in its chunk (another chunk's same slot number is
// not the same slot).
TEST(PipelineValidation, ChunkSlots) {
  Plan plan = interleavedPlan();
  EXPECT_EQ(errorOf(plan), "");
  // Each chunk states its count.
  plan = interleavedPlan();
  plan.mutable_pipeline()->mutable_stages(0)->clear_chunk_slots();
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 0 has 2 model chunks but "
                           "0 chunk_slots (expected the slots of each chunk)");
  plan = interleavedPlan();
  plan.mutable_pipeline()->mutable_stages(1)->set_chunk_slots(1, 0);
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 1's chunk 1 has "
                           "chunk_slots = 0, expected at least 1");
  plan = interleavedPlan();
  plan.mutable_pipeline()->mutable_stages(0)->set_slots(3);
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 0 has slots = 3 but the "
                           "largest of its chunk_slots is 2 (expected them "
                           "equal)");
  plan = pipelinePlan();
  plan.mutable_pipeline()->mutable_stages(0)->add_chunk_slots(2);
  EXPECT_EQ(errorOf(plan), ""); // one chunk may state its count
  plan.mutable_pipeline()->mutable_stages(0)->add_chunk_slots(2);
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 0 has one model chunk but "
                           "2 chunk_slots (expected at most one)");
  // A slotted buffer has its chunk's count, not the stage's largest.
  plan = interleavedPlan();
  plan.mutable_pipeline()->mutable_stages(0)->set_chunk_slots(0, 1);
  plan.mutable_pipeline()->mutable_stages(0)->set_chunk_slots(1, 2);
  EXPECT_EQ(errorOf(plan),
            "p.plan: buffer 0 ('a0.0') of stage 0 has 2 slots but chunk 0 of "
            "the stage, whose calls name it, has 1 (expected 1 slots, or 0 or "
            "1 for a single copy)");
  // ... and is named by the calls of one chunk only.
  plan = interleavedPlan();
  bodyOf(plan, 2, 0)->set_inputs(1, 0); // chunk 1's forward reads a0.0
  EXPECT_EQ(errorOf(plan),
            "p.plan: buffer 0 ('a0.0') of stage 0 has 2 slots and is named by "
            "the calls of chunks 0 and 1 (function 's0.c1.forward'), but each "
            "chunk has slots of its own (expected one chunk, or 0 or 1 for a "
            "single copy)");
  // A step's slot is below its chunk's count.
  plan = interleavedPlan();
  stepOf(plan, 1, 2)->set_slot(1);
  stepOf(plan, 1, 3)->set_slot(1);
  EXPECT_EQ(errorOf(plan), "p.plan: pipeline stage 1's schedule step 2: slot "
                           "1 is outside chunk 1's 1 slots [0, 1)");
  // Within a chunk, a held slot is not free.
  plan = interleavedPlan();
  stepOf(plan, 0, 1)->set_slot(0);
  stepOf(plan, 0, 7)->set_slot(0);
  EXPECT_EQ(errorOf(plan),
            "p.plan: pipeline stage 0's schedule step 1: the FORWARD of "
            "micro-batch 1 on chunk 0 reuses slot 0, which micro-batch 0 on "
            "chunk 0 holds until its BACKWARD (expected a free slot)");
}
