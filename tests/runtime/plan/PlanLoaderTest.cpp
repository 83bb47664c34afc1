//===- PlanLoaderTest.cpp - The plan file's frame and validation ----------===//

#include "runtime/plan/PlanLoader.h"

#include "PlanBuilders.h"

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"

#include <limits>
#include <string>
#include <tuple>
#include <vector>

using namespace braid::plan;
using namespace braid::plan::testing;

namespace {



/// A valid two-instruction plan: y = x·Wᵀ, loss = cross_entropy(y, t).
Plan validPlan() {
  Plan plan;
  plan.set_version(SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("dp");
  plan.mutable_mesh()->add_sizes(1);
  int64_t offset = 0;
  auto buffer = [&](const char *name, DType dtype, std::vector<int64_t> shape,
                    BufferRole role) {
    return addBuffer(plan, offset, name, dtype, shape, role);
  };
  int x = buffer("x", F32, {2, 3, 8}, ACTIVATION);
  int w = buffer("w", F32, {16, 8}, PARAMETER);
  int y = buffer("y", F32, {2, 3, 16}, ACTIVATION);
  int t = buffer("t", I32, {2, 3}, INPUT);
  int loss = buffer("loss", F32, {}, ACTIVATION);
  plan.set_arena_bytes(offset);
  Function *fn = plan.add_functions();
  fn->set_name("forward");
  Instruction *lin = fn->add_body();
  lin->set_kernel(LINEAR);
  lin->add_inputs(x);
  lin->add_inputs(w);
  lin->add_outputs(y);
  (*lin->mutable_int_attrs())["transpose_w"] = 1;
  lin->set_provenance("model.linear at lm_head");
  Instruction *ce = fn->add_body();
  ce->set_kernel(CROSS_ENTROPY);
  ce->add_inputs(y);
  ce->add_inputs(t);
  ce->add_outputs(loss);
  (*ce->mutable_int_attrs())["ignore_index"] = -100;
  return plan;
}

std::string errorOf(const Plan &plan) {
  absl::StatusOr<Plan> parsed = ParsePlanFile(SerializePlanFile(plan), "p.plan");
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(PlanFile, RoundTrips) {
  Plan plan = validPlan();
  absl::StatusOr<Plan> parsed = ParsePlanFile(SerializePlanFile(plan), "p.plan");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->SerializeAsString(), plan.SerializeAsString());
  EXPECT_EQ(WorldSize(*parsed), 1);
}

TEST(PlanFile, BytesDoNotDependOnTheOrderOfAttributes) {
  // Attributes are maps: the file lists them by key, however they were set.
  Plan forward = validPlan(), backward = validPlan();
  Instruction *a = forward.mutable_functions(0)->mutable_body(0);
  Instruction *b = backward.mutable_functions(0)->mutable_body(0);
  a->mutable_int_attrs()->clear();
  b->mutable_int_attrs()->clear();
  std::vector<std::string> keys;
  for (int i = 0; i < 64; ++i)
    keys.push_back("k" + std::to_string(i * 7919 % 1000));
  for (size_t i = 0; i < keys.size(); ++i) {
    (*a->mutable_int_attrs())[keys[i]] = int64_t(i);
    (*b->mutable_int_attrs())[keys[keys.size() - 1 - i]] =
        int64_t(keys.size() - 1 - i);
  }
  std::string bytes = SerializePlanFile(forward);
  EXPECT_EQ(bytes, SerializePlanFile(backward));
  // Keys ascend in the payload: "k0" (i = 0) comes before "k919" (i = 1).
  EXPECT_LT(bytes.find("k0"), bytes.find("k919"));
}

TEST(PlanFile, Crc32IsZlibs) {
  // The standard check value of CRC-32/ISO-HDLC.
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
}

TEST(PlanFile, EveryTruncationIsRefused) {
  std::string bytes = SerializePlanFile(validPlan());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<Plan> parsed = ParsePlanFile(bytes.substr(0, n), "p.plan");
    ASSERT_FALSE(parsed.ok()) << "prefix of " << n << " bytes was accepted";
    if (n >= 20) {
      EXPECT_NE(parsed.status().message().find("truncated"), absl::string_view::npos)
          << parsed.status();
    }
  }
}

TEST(PlanFile, CorruptionIsRefused) {
  std::string bytes = SerializePlanFile(validPlan());
  bytes[bytes.size() / 2] ^= 0x40;
  absl::StatusOr<Plan> parsed = ParsePlanFile(bytes, "p.plan");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("checksum"), absl::string_view::npos);
  EXPECT_NE(ParsePlanFile("not a plan at all, clearly", "x.plan")
                .status()
                .message()
                .find("not a Braid plan file"),
            absl::string_view::npos);
}

TEST(PlanValidation, WrongVersion) {
  Plan plan = validPlan();
  plan.set_version(SchemaVersion(7));
  EXPECT_NE(errorOf(plan).find("plan schema version 7 is not the version 1"),
            std::string::npos)
      << errorOf(plan);
}

TEST(PlanValidation, OffsetsLeavingTheArena) {
  Plan plan = validPlan();
  plan.mutable_buffers(2)->set_offset(plan.arena_bytes() - 4);
  EXPECT_NE(errorOf(plan).find("buffer 2 ('y') occupies bytes"), std::string::npos)
      << errorOf(plan);
  plan = validPlan();
  plan.mutable_buffers(0)->set_offset(-8);
  EXPECT_NE(errorOf(plan).find("leave the arena"), std::string::npos);
  plan = validPlan();
  plan.mutable_buffers(1)->set_shape(0, int64_t(1) << 40);
  EXPECT_NE(errorOf(plan).find("buffer 1 ('w')"), std::string::npos) << errorOf(plan);
}

TEST(PlanValidation, InstructionContracts) {
  Plan plan = validPlan();
  plan.mutable_functions(0)->mutable_body(0)->set_inputs(1, 99);
  EXPECT_NE(errorOf(plan).find("input buffer 99 does not exist"), std::string::npos)
      << errorOf(plan);
  plan = validPlan();
  (*plan.mutable_functions(0)->mutable_body(0)->mutable_int_attrs())["transpose_w"] = 0;
  EXPECT_NE(errorOf(plan).find("does not match the weight's 16 inputs"),
            std::string::npos)
      << errorOf(plan);
  plan = validPlan();
  plan.mutable_functions(0)->mutable_body(1)->set_kernel(Kernel(200));
  EXPECT_NE(errorOf(plan).find("unknown kernel 200"), std::string::npos)
      << errorOf(plan);
  plan = validPlan();
  plan.mutable_functions(0)->mutable_body(1)->mutable_int_attrs()->clear();
  EXPECT_NE(errorOf(plan).find("lacks the integer attribute 'ignore_index'"),
            std::string::npos)
      << errorOf(plan);
  plan = validPlan();
  plan.mutable_buffers(3)->set_dtype(F32); // targets must be I32
  EXPECT_NE(errorOf(plan).find("must be I32"), std::string::npos) << errorOf(plan);
  plan = validPlan();
  plan.mutable_mesh()->set_sizes(0, 0);
  EXPECT_NE(errorOf(plan).find("mesh axis 'dp' has size 0"), std::string::npos)
      << errorOf(plan);
}

// The training section: the step loop's sizes and the step functions.
TEST(PlanValidation, TrainingSection) {
  auto withTraining = [] {
    Plan plan = validPlan();
    Training *t = plan.mutable_training();
    t->set_steps(10);
    t->set_micro_batch_size(2);
    t->set_seq_length(3);
    t->set_micro_batches(4);
    t->mutable_step()->set_micro_step("forward");
    return plan;
  };
  EXPECT_EQ(errorOf(withTraining()), "");
  Plan plan = withTraining();
  plan.mutable_training()->set_micro_batches(0);
  EXPECT_EQ(errorOf(plan),
            "p.plan: training.micro_batches = 0 must be in [1, 2^40]");
  plan = withTraining();
  plan.mutable_training()->set_steps(-3);
  EXPECT_EQ(errorOf(plan), "p.plan: training.steps = -3 must be in [1, 2^40]");
  plan = withTraining();
  plan.mutable_training()->mutable_step()->set_update("update");
  EXPECT_EQ(errorOf(plan), "p.plan: training.step.update names function "
                           "'update', which the plan does not have");
  plan = withTraining();
  plan.mutable_training()->mutable_step()->clear_micro_step();
  EXPECT_EQ(errorOf(plan), "p.plan: training.step.micro_step names no function");
  plan = withTraining();
  plan.mutable_training()->mutable_step()->set_last_micro_step("last");
  EXPECT_EQ(errorOf(plan), "p.plan: training.step.last_micro_step names "
                           "function 'last', which the plan does not have");
  plan.mutable_training()->mutable_step()->set_last_micro_step("forward");
  EXPECT_EQ(errorOf(plan), "");
  plan.mutable_training()->mutable_step()->set_first_micro_step("first");
  EXPECT_EQ(errorOf(plan), "p.plan: training.step.first_micro_step names "
                           "function 'first', which the plan does not have");
  plan.mutable_training()->mutable_step()->set_first_micro_step("forward");
  plan.mutable_training()->mutable_step()->set_gather_params("gather");
  EXPECT_EQ(errorOf(plan), "p.plan: training.step.gather_params names "
                           "function 'gather', which the plan does not have");
  plan.mutable_training()->mutable_step()->set_gather_params("forward");
  EXPECT_EQ(errorOf(plan), "");
}

// Which function a step without a pipeline runs for each micro-batch: the
// first's and the last's own when the plan has them (the first's when one
// micro-batch is both), micro_step otherwise.
TEST(PlanValidation, MicroStepFunctionOfEachMicroBatch) {
  StepFunctions fns;
  fns.set_micro_step("m");
  auto calls = [&](int64_t micros) {
    std::string out;
    for (int64_t i = 0; i < micros; ++i)
      out += (i ? " " : "") + MicroStepFunction(fns, i, micros);
    return out;
  };
  EXPECT_EQ(calls(3), "m m m");
  fns.set_last_micro_step("l");
  EXPECT_EQ(calls(3), "m m l");
  EXPECT_EQ(calls(1), "l");
  fns.set_first_micro_step("f");
  EXPECT_EQ(calls(3), "f m l");
  EXPECT_EQ(calls(2), "f l");
  EXPECT_EQ(calls(1), "f");
  fns.clear_last_micro_step();
  EXPECT_EQ(calls(3), "f m m");
}

// ALL_REDUCE: operands pair with results, and its group is made of distinct
// axes of the mesh; no other kernel names a group.
TEST(PlanValidation, Collectives) {
  auto withAllReduce = [] {
    Plan plan = validPlan();
    plan.mutable_mesh()->set_sizes(0, 2);
    Instruction *ar = plan.mutable_functions(0)->add_body();
    ar->set_kernel(ALL_REDUCE);
    ar->add_inputs(1); // w, in place
    ar->add_outputs(1);
    ar->add_group("dp");
    ar->set_provenance("data-parallel sum");
    return plan;
  };
  EXPECT_EQ(errorOf(withAllReduce()), "");
  Plan plan = withAllReduce();
  plan.mutable_functions(0)->mutable_body(2)->set_group(0, "tp");
  EXPECT_NE(errorOf(plan).find("group axis 'tp' is not an axis of the mesh"),
            std::string::npos)
      << errorOf(plan);
  plan = withAllReduce();
  plan.mutable_functions(0)->mutable_body(2)->add_group("dp");
  EXPECT_NE(errorOf(plan).find("group axis 'dp' is repeated"), std::string::npos)
      << errorOf(plan);
  plan = withAllReduce();
  plan.mutable_functions(0)->mutable_body(2)->clear_group();
  EXPECT_NE(errorOf(plan).find("names no group"), std::string::npos)
      << errorOf(plan);
  plan = withAllReduce();
  plan.mutable_functions(0)->mutable_body(2)->set_outputs(0, 2); // y: [2,3,16]
  EXPECT_NE(errorOf(plan).find("result 'y' is [2, 3, 16], expected [16, 8]"),
            std::string::npos)
      << errorOf(plan);
  plan = withAllReduce();
  plan.mutable_functions(0)->mutable_body(2)->add_inputs(0);
  EXPECT_NE(errorOf(plan).find("has 2 inputs and 1 outputs"), std::string::npos)
      << errorOf(plan);
  // In flight (async): a sum in place only.
  plan = withAllReduce();
  (*plan.mutable_functions(0)->mutable_body(2)->mutable_int_attrs())["async"] =
      1;
  EXPECT_EQ(errorOf(plan), "");
  (*plan.mutable_functions(0)->mutable_body(2)->mutable_int_attrs())["async"] =
      3;
  EXPECT_NE(errorOf(plan).find("attribute 'async' = 3 is outside [0, 1]"),
            std::string::npos)
      << errorOf(plan);
  plan = withAllReduce();
  (*plan.mutable_functions(0)->mutable_body(2)->mutable_int_attrs())["async"] =
      1;
  (*plan.mutable_functions(0)->mutable_body(2)->mutable_int_attrs())["max"] = 1;
  EXPECT_NE(
      errorOf(plan).find("an all-reduce of maxima has no async attribute"),
      std::string::npos)
      << errorOf(plan);
  plan = withAllReduce();
  {
    // w into a buffer of its shape: out of place.
    int64_t offset = plan.arena_bytes();
    int w2 = addBuffer(plan, offset, "w2", F32, {16, 8}, ACTIVATION);
    plan.set_arena_bytes(offset);
    Instruction *ar = plan.mutable_functions(0)->mutable_body(2);
    (*ar->mutable_int_attrs())["async"] = 1;
    ar->set_outputs(0, w2);
  }
  EXPECT_NE(errorOf(plan).find("x0 'w' and its result 'w2' differ: only an "
                               "all-reduce in place has an async attribute"),
            std::string::npos)
      << errorOf(plan);
  plan = validPlan();
  plan.mutable_functions(0)->mutable_body(0)->add_group("dp");
  EXPECT_NE(errorOf(plan).find("names a group but is not a collective"),
            std::string::npos)
      << errorOf(plan);
}

// Attention on a slice of the heads: the slices of every rank along its
// rank_axis stay inside the global heads and hold the kv heads their query
// heads use.
TEST(PlanValidation, AttentionHeadSlices) {
  // 8 query and 2 kv heads over tp = 4: 2 query heads per rank, kv heads
  // replicated; q [1, 3, 2·4], k and v [1, 3, 2·4].
  auto sliced = [] {
    Plan plan;
    plan.set_version(SCHEMA_VERSION_CURRENT);
    plan.mutable_mesh()->add_axes("tp");
    plan.mutable_mesh()->add_sizes(4);
    int64_t offset = 0;
    for (const char *name : {"q", "k", "v", "out"}) {
      Buffer *b = plan.add_buffers();
      b->set_name(name);
      b->set_dtype(F32);
      for (int64_t d : {1, 3, 8})
        b->add_shape(d);
      b->set_offset(offset);
      b->set_role(ACTIVATION);
      offset += 96;
    }
    plan.set_arena_bytes(offset);
    Function *fn = plan.add_functions();
    fn->set_name("f");
    Instruction *a = fn->add_body();
    a->set_kernel(ATTENTION);
    for (int i : {0, 1, 2})
      a->add_inputs(i);
    a->add_outputs(3);
    a->set_rank_axis("tp");
    auto &ints = *a->mutable_int_attrs();
    ints["heads"] = 2;
    ints["kv_heads"] = 2;
    ints["causal"] = 1;
    ints["alibi"] = 0;
    ints["global_heads"] = 8;
    ints["global_kv_heads"] = 2;
    ints["head_offset_stride"] = 2;
    ints["kv_head_offset_stride"] = 0;
    (*a->mutable_float_attrs())["scale"] = 0.5;
    return plan;
  };
  EXPECT_EQ(errorOf(sliced()), "");
  Plan plan = sliced();
  plan.mutable_functions(0)->mutable_body(0)->set_rank_axis("pp");
  EXPECT_NE(errorOf(plan).find("rank_axis 'pp' is not an axis of the mesh"),
            std::string::npos)
      << errorOf(plan);
  plan = sliced();
  (*plan.mutable_functions(0)->mutable_body(0)->mutable_int_attrs())
      ["head_offset_stride"] = 3;
  EXPECT_NE(errorOf(plan).find("the heads of rank 3 along 'tp' leave the 8 "
                               "query or 2 kv heads"),
            std::string::npos)
      << errorOf(plan);
  // With 4 kv heads (2 query heads each) every rank holding kv heads 0-1:
  // rank 2's query heads 4-5 use kv head 2.
  plan = sliced();
  (*plan.mutable_functions(0)->mutable_body(0)->mutable_int_attrs())
      ["global_kv_heads"] = 4;
  EXPECT_NE(errorOf(plan).find("the query heads of rank 2 along 'tp' use kv "
                               "heads the rank does not hold"),
            std::string::npos)
      << errorOf(plan);
  plan = sliced();
  (*plan.mutable_functions(0)->mutable_body(0)->mutable_int_attrs())
      ["global_kv_heads"] = 3;
  EXPECT_NE(errorOf(plan).find("global_heads = 8 is not a multiple of "
                               "global_kv_heads = 3"),
            std::string::npos)
      << errorOf(plan);
}

/// A valid plan of the tensor-parallel kernels on a (dp 1, tp 2) mesh, each
/// rank holding 4 vocabulary columns (logits) and 4 table rows.
Plan vocabParallelPlan() {
  Plan plan;
  plan.set_version(SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("dp");
  plan.mutable_mesh()->add_sizes(1);
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(2);
  int64_t offset = 0;
  auto buffer = [&](const char *name, DType dtype, std::vector<int64_t> shape,
                    BufferRole role) {
    return addBuffer(plan, offset, name, dtype, shape, role);
  };
  int logits = buffer("logits", F32, {2, 3, 4}, ACTIVATION);   // 0
  int targets = buffer("targets", I32, {2, 3}, INPUT);         // 1
  int rowMax = buffer("row_max", F32, {2, 3}, WORKSPACE);      // 2
  int partial = buffer("partial", F32, {2, 3, 2}, WORKSPACE);  // 3
  int loss = buffer("loss", F32, {}, ACTIVATION);              // 4
  int lse = buffer("lse", F32, {2, 3}, WORKSPACE);             // 5
  int dloss = buffer("dloss", F32, {}, INPUT);                 // 6
  int dlogits = buffer("dlogits", F32, {2, 3, 4}, ACTIVATION); // 7
  int table = buffer("table", F32, {4, 8}, PARAMETER);         // 8
  int emb = buffer("emb", F32, {2, 3, 8}, ACTIVATION);         // 9
  int grad = buffer("grad", F32, {5}, GRADIENT);               // 10
  int norm = buffer("norm", F32, {}, WORKSPACE);               // 11
  int scale = buffer("scale", F32, {}, WORKSPACE);             // 12
  plan.set_arena_bytes(offset);
  Function *fn = plan.add_functions();
  fn->set_name("f");
  auto add = [&](Kernel kernel, std::vector<int> ins, std::vector<int> outs) {
    return addInstruction(fn, kernel, ins, outs);
  };
  auto slice = [](Instruction *inst) {
    inst->set_rank_axis("tp");
    (*inst->mutable_int_attrs())["vocab_start_stride"] = 4;
    return inst;
  };
  auto ignore = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["ignore_index"] = -100;
    return inst;
  };
  add(CROSS_ENTROPY_MAX, {logits}, {rowMax});                           // 0
  slice(ignore(add(CROSS_ENTROPY_PARTIAL, {logits, targets, rowMax},
                   {partial})));                                        // 1
  ignore(add(CROSS_ENTROPY_FINISH, {partial, rowMax, targets},
             {loss, lse}));                                             // 2
  slice(ignore(add(CROSS_ENTROPY_GRAD, {logits, targets, dloss, lse},
                   {dlogits})));                                        // 3
  slice(add(EMBEDDING, {table, targets}, {emb}));                       // 4
  slice(add(EMBEDDING_GRAD, {emb, targets}, {table}));                  // 5
  Instruction *gn = add(GRAD_NORM, {grad, dlogits}, {norm, scale});     // 6
  gn->add_group("tp");
  (*gn->mutable_int_attrs())["split_inputs"] = 1;
  (*gn->mutable_float_attrs())["max_norm"] = 1.0;
  return plan;
}

Instruction *bodyOf(Plan &plan, int i) {
  return plan.mutable_functions(0)->mutable_body(i);
}

#define EXPECT_REFUSED(plan, text)                                             \
  EXPECT_NE(errorOf(plan).find(text), std::string::npos)                       \
      << "error: '" << errorOf(plan) << "'"

// The vocabulary-parallel cross-entropy kernels: arity, the shapes of the
// rows' values, the slice of the vocabulary.
TEST(PlanValidation, VocabParallelCrossEntropy) {
  EXPECT_EQ(errorOf(vocabParallelPlan()), "");
  Plan plan = vocabParallelPlan();
  bodyOf(plan, 0)->add_inputs(1);
  EXPECT_REFUSED(plan, "(CROSS_ENTROPY_MAX): has 2 inputs and 1 outputs; the "
                       "kernel takes 1 inputs and 1 outputs");
  plan = vocabParallelPlan();
  bodyOf(plan, 0)->set_outputs(0, 3);
  EXPECT_REFUSED(plan, "row_max 'partial' is [2, 3, 2], expected [2, 3]");
  plan = vocabParallelPlan();
  plan.mutable_buffers(0)->set_shape(2, 0);
  EXPECT_REFUSED(plan, "logits 'logits' [2, 3, 0] have no vocabulary columns, "
                       "expected at least 1");
  plan = vocabParallelPlan();
  plan.mutable_buffers(0)->clear_shape();
  plan.mutable_buffers(0)->add_shape(4);
  EXPECT_REFUSED(plan, "logits 'logits' has rank 1, expected at least 2");

  // CROSS_ENTROPY_PARTIAL.
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->set_outputs(0, 2);
  EXPECT_REFUSED(plan, "partial 'row_max' is [2, 3], expected [2, 3, 2]");
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->set_inputs(2, 4);
  EXPECT_REFUSED(plan, "global_max 'loss' is [], expected [2, 3]");
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->set_inputs(1, 2); // F32 targets
  EXPECT_REFUSED(plan, "operand 'row_max' must be I32, found F32");
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->mutable_int_attrs()->erase("ignore_index");
  EXPECT_REFUSED(plan, "lacks the integer attribute 'ignore_index'");
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->set_rank_axis("pp");
  EXPECT_REFUSED(plan, "rank_axis 'pp' is not an axis of the mesh");
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->mutable_int_attrs()->erase("vocab_start_stride");
  EXPECT_REFUSED(plan, "(CROSS_ENTROPY_PARTIAL): lacks the integer attribute "
                       "'vocab_start_stride'");
  plan = vocabParallelPlan();
  (*bodyOf(plan, 1)->mutable_int_attrs())["vocab_start_stride"] = 5;
  EXPECT_REFUSED(plan, "vocab_start_stride = 5 puts the 4 columns of rank 1 "
                       "along 'tp' past the global vocabulary of 8 (expected "
                       "a stride of at most 4)");
  plan = vocabParallelPlan();
  (*bodyOf(plan, 1)->mutable_int_attrs())["vocab_start_stride"] = -4;
  EXPECT_REFUSED(plan, "attribute 'vocab_start_stride' = -4 is outside [0, ");
  // Without a rank_axis there is one slice, the whole vocabulary: the stride
  // is optional and any stride >= 0 is harmless.
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->clear_rank_axis();
  bodyOf(plan, 1)->mutable_int_attrs()->erase("vocab_start_stride");
  EXPECT_EQ(errorOf(plan), "");
  // A rank_axis of one rank: the stride is required but never leaves.
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->set_rank_axis("dp");
  (*bodyOf(plan, 1)->mutable_int_attrs())["vocab_start_stride"] = 100;
  EXPECT_EQ(errorOf(plan), "");

  // CROSS_ENTROPY_FINISH.
  plan = vocabParallelPlan();
  bodyOf(plan, 2)->set_outputs(0, 5);
  EXPECT_REFUSED(plan, "loss 'lse' is [2, 3], expected []");
  plan = vocabParallelPlan();
  bodyOf(plan, 2)->set_outputs(1, 4);
  EXPECT_REFUSED(plan, "lse 'loss' is [], expected [2, 3]");
  plan = vocabParallelPlan();
  bodyOf(plan, 2)->set_inputs(0, 2);
  EXPECT_REFUSED(plan, "summed 'row_max' is [2, 3], expected [2, 3, 2]");
  plan = vocabParallelPlan();
  bodyOf(plan, 2)->set_inputs(1, 4);
  EXPECT_REFUSED(plan, "global_max 'loss' has rank 0, expected at least 1");
  plan = vocabParallelPlan();
  bodyOf(plan, 2)->mutable_outputs()->RemoveLast();
  EXPECT_REFUSED(plan, "has 3 inputs and 1 outputs; the kernel takes 3 inputs "
                       "and 2 outputs");
  plan = vocabParallelPlan();
  bodyOf(plan, 2)->set_inputs(2, 5); // F32 targets
  EXPECT_REFUSED(plan, "operand 'lse' must be I32, found F32");

  // CROSS_ENTROPY_GRAD with the global lse.
  plan = vocabParallelPlan();
  bodyOf(plan, 3)->set_inputs(3, 3);
  EXPECT_REFUSED(plan, "lse 'partial' is [2, 3, 2], expected [2, 3]");
  plan = vocabParallelPlan();
  bodyOf(plan, 3)->add_inputs(5);
  EXPECT_REFUSED(plan, "has 5 inputs and 1 outputs; the kernel takes 3-4 "
                       "inputs and 1 outputs");
  plan = vocabParallelPlan();
  (*bodyOf(plan, 3)->mutable_int_attrs())["vocab_start_stride"] = 7;
  EXPECT_REFUSED(plan, "(CROSS_ENTROPY_GRAD): vocab_start_stride = 7 puts");
  plan = vocabParallelPlan();
  bodyOf(plan, 3)->mutable_inputs()->RemoveLast(); // 3 inputs, sliced
  EXPECT_REFUSED(plan, "has vocab_start_stride but no lse input");
  plan = vocabParallelPlan();
  bodyOf(plan, 3)->mutable_inputs()->RemoveLast();
  bodyOf(plan, 3)->clear_rank_axis();
  bodyOf(plan, 3)->mutable_int_attrs()->erase("vocab_start_stride");
  EXPECT_EQ(errorOf(plan), ""); // the whole-row gradient, as before

  // No kernel but ALL_REDUCE and GRAD_NORM names a group.
  plan = vocabParallelPlan();
  bodyOf(plan, 1)->add_group("tp");
  EXPECT_REFUSED(plan, "(CROSS_ENTROPY_PARTIAL): names a group but is not a "
                       "collective");
}

// EMBEDDING and EMBEDDING_GRAD on a slice of the table's rows.
TEST(PlanValidation, EmbeddingVocabSlices) {
  for (int i : {4, 5}) {
    Plan plan = vocabParallelPlan();
    bodyOf(plan, i)->mutable_int_attrs()->erase("vocab_start_stride");
    EXPECT_REFUSED(plan, "lacks the integer attribute 'vocab_start_stride'");
    plan = vocabParallelPlan();
    (*bodyOf(plan, i)->mutable_int_attrs())["vocab_start_stride"] = 6;
    EXPECT_REFUSED(plan, "vocab_start_stride = 6 puts the 4 rows of rank 1 "
                         "along 'tp' past the global vocabulary of 8");
    plan = vocabParallelPlan();
    bodyOf(plan, i)->set_rank_axis("sp");
    EXPECT_REFUSED(plan, "rank_axis 'sp' is not an axis of the mesh");
    // Overlapping slices are allowed; they stay inside the vocabulary.
    plan = vocabParallelPlan();
    (*bodyOf(plan, i)->mutable_int_attrs())["vocab_start_stride"] = 2;
    EXPECT_EQ(errorOf(plan), "");
  }
  // The global vocabulary must fit in int64: 2^47 rows of nothing on each of
  // 2^20 ranks do not.
  Plan plan;
  plan.set_version(SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(int64_t(1) << 20);
  for (auto [name, dtype, shape] :
       {std::tuple<const char *, DType, std::vector<int64_t>>{
            "table", F32, {int64_t(1) << 47, 0}},
        {"ids", I32, {1}},
        {"out", F32, {1, 0}}}) {
    Buffer *b = plan.add_buffers();
    b->set_name(name);
    b->set_dtype(dtype);
    for (int64_t d : shape)
      b->add_shape(d);
    b->set_role(ACTIVATION);
  }
  plan.set_arena_bytes(4);
  Instruction *emb = plan.add_functions()->add_body();
  plan.mutable_functions(0)->set_name("f");
  emb->set_kernel(EMBEDDING);
  emb->add_inputs(0);
  emb->add_inputs(1);
  emb->add_outputs(2);
  emb->set_rank_axis("tp");
  (*emb->mutable_int_attrs())["vocab_start_stride"] = int64_t(1) << 47;
  EXPECT_REFUSED(plan, "the global vocabulary of 1048576 ranks x "
                       "140737488355328 rows does not fit in int64");
}

// GRAD_NORM over a group: split_inputs is required and at most the number of
// gradients; the group's axes are the mesh's.
TEST(PlanValidation, GradNormGroup) {
  Plan plan = vocabParallelPlan();
  (*bodyOf(plan, 6)->mutable_int_attrs())["split_inputs"] = 3;
  EXPECT_REFUSED(plan, "(GRAD_NORM): attribute 'split_inputs' = 3 is outside "
                       "[0, 2]");
  plan = vocabParallelPlan();
  (*bodyOf(plan, 6)->mutable_int_attrs())["split_inputs"] = -1;
  EXPECT_REFUSED(plan, "attribute 'split_inputs' = -1 is outside [0, 2]");
  plan = vocabParallelPlan();
  bodyOf(plan, 6)->mutable_int_attrs()->erase("split_inputs");
  EXPECT_REFUSED(plan, "lacks the integer attribute 'split_inputs'");
  plan = vocabParallelPlan();
  bodyOf(plan, 6)->set_group(0, "pp");
  EXPECT_REFUSED(plan, "group axis 'pp' is not an axis of the mesh");
  plan = vocabParallelPlan();
  bodyOf(plan, 6)->add_group("tp");
  EXPECT_REFUSED(plan, "group axis 'tp' is repeated");
  for (int64_t split : {0, 2}) {
    plan = vocabParallelPlan();
    (*bodyOf(plan, 6)->mutable_int_attrs())["split_inputs"] = split;
    EXPECT_EQ(errorOf(plan), "");
  }
  // Without a group the norm is local, as before; split_inputs may stay
  // (in range), since every input is then this rank's alone.
  plan = vocabParallelPlan();
  bodyOf(plan, 6)->clear_group();
  EXPECT_EQ(errorOf(plan), "");
  bodyOf(plan, 6)->mutable_int_attrs()->erase("split_inputs");
  EXPECT_EQ(errorOf(plan), "");
  (*bodyOf(plan, 6)->mutable_int_attrs())["split_inputs"] = 9;
  EXPECT_REFUSED(plan, "attribute 'split_inputs' = 9 is outside [0, 2]");
}

/// A valid plan of the sequence-parallel kernels on a (dp 1, tp 2) mesh: the
/// sequence of 6 positions split in two halves of 3.
Plan sequenceParallelPlan() {
  Plan plan;
  plan.set_version(SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("dp");
  plan.mutable_mesh()->add_sizes(1);
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(2);
  int64_t offset = 0;
  auto buffer = [&](const char *name, DType dtype, std::vector<int64_t> shape,
                    BufferRole role) {
    return addBuffer(plan, offset, name, dtype, shape, role);
  };
  int x = buffer("x", F32, {2, 3, 4}, ACTIVATION);             // 0
  int y = buffer("y", F32, {2, 6, 4}, ACTIVATION);             // 1
  int z = buffer("z", F32, {2, 3, 4}, ACTIVATION);             // 2
  int table = buffer("table", F32, {8, 4}, PARAMETER);         // 3
  int ids = buffer("ids", I32, {2, 6}, INPUT);                 // 4
  int pos = buffer("pos", F32, {2, 3, 4}, ACTIVATION);         // 5
  int dtable = buffer("dtable", F32, {8, 4}, GRADIENT);        // 6
  int dropped = buffer("dropped", F32, {2, 3, 4}, ACTIVATION); // 7
  buffer("scalar", F32, {}, WORKSPACE);                        // 8
  buffer("wide", F64, {2, 6, 4}, ACTIVATION);                  // 9
  plan.set_arena_bytes(offset);
  Function *fn = plan.add_functions();
  fn->set_name("f");
  auto add = [&](Kernel kernel, std::vector<int> ins, std::vector<int> outs) {
    return addInstruction(fn, kernel, ins, outs);
  };
  Instruction *gather = add(ALL_GATHER, {x}, {y}); // 0
  gather->add_group("tp");
  (*gather->mutable_int_attrs())["dim"] = 1;
  Instruction *scatter = add(REDUCE_SCATTER, {y}, {z}); // 1
  scatter->add_group("tp");
  (*scatter->mutable_int_attrs())["dim"] = 1;
  Instruction *pe = add(POSITION_EMBEDDING, {table, ids}, {pos}); // 2
  pe->set_rank_axis("tp");
  (*pe->mutable_int_attrs())["seq_start_stride"] = 3;
  Instruction *peg = add(POSITION_EMBEDDING_GRAD, {pos}, {dtable}); // 3
  peg->set_rank_axis("tp");
  (*peg->mutable_int_attrs())["seq_start_stride"] = 3;
  Instruction *drop = add(DROPOUT, {x}, {dropped}); // 4
  drop->set_rank_axis("tp");
  (*drop->mutable_int_attrs())["col_offset_stride"] = 12;
  (*drop->mutable_int_attrs())["rng_id"] = 1;
  (*drop->mutable_float_attrs())["rate"] = 0.1;
  return plan;
}

// ALL_GATHER and REDUCE_SCATTER: one input, one output of another buffer,
// the same dtype, a dim inside x's rank, shapes that differ by the group's
// size along dim, and a group of mesh axes.
TEST(PlanValidation, GatherAndScatter) {
  EXPECT_EQ(errorOf(sequenceParallelPlan()), "");
  for (int i : {0, 1}) {
    SCOPED_TRACE(i ? "REDUCE_SCATTER" : "ALL_GATHER");
    const char *kernel = i ? "(REDUCE_SCATTER): " : "(ALL_GATHER): ";
    Plan plan = sequenceParallelPlan();
    bodyOf(plan, i)->mutable_int_attrs()->erase("dim");
    EXPECT_REFUSED(plan, absl::StrCat(kernel, "lacks the integer attribute "
                                              "'dim'"));
    plan = sequenceParallelPlan();
    (*bodyOf(plan, i)->mutable_int_attrs())["dim"] = 3;
    EXPECT_REFUSED(plan, "attribute 'dim' = 3 is outside [0, 2]");
    plan = sequenceParallelPlan();
    (*bodyOf(plan, i)->mutable_int_attrs())["dim"] = -1;
    EXPECT_REFUSED(plan, "attribute 'dim' = -1 is outside [0, 2]");
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->clear_group();
    EXPECT_REFUSED(plan, absl::StrCat(kernel, "names no group (the mesh axes "
                                              "it communicates along)"));
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->set_group(0, "sp");
    EXPECT_REFUSED(plan, "group axis 'sp' is not an axis of the mesh");
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->add_group("tp");
    EXPECT_REFUSED(plan, "group axis 'tp' is repeated");
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->add_inputs(0);
    EXPECT_REFUSED(plan, absl::StrCat(kernel, "has 2 inputs and 1 outputs; the "
                                              "kernel takes 1 inputs and 1 "
                                              "outputs"));
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->set_outputs(0, bodyOf(plan, i)->inputs(0));
    EXPECT_REFUSED(plan, absl::StrCat(kernel, "x and y are both buffer '",
                                      i ? "y" : "x",
                                      "': only an all-gather of a "
                                      "one-dimensional buffer runs in place"));
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->set_inputs(0, 8);
    EXPECT_REFUSED(plan, "x 'scalar' has rank 0, expected at least 1");
    // I32 ids gather into I32 only; a reduce-scatter sums floats.
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->set_inputs(0, 4);
    EXPECT_REFUSED(plan, i == 0 ? "x 'ids' is I32 and y 'y' F32: an "
                                  "all-gather keeps the dtype"
                                : "operand 'ids' must be a float type, found "
                                  "I32");
  }
  // Shapes: the gathered dimension is the group's size times x's.
  Plan plan = sequenceParallelPlan();
  (*bodyOf(plan, 0)->mutable_int_attrs())["dim"] = 2;
  EXPECT_REFUSED(plan, "(ALL_GATHER): y 'y' is [2, 6, 4], expected [2, 3, 8]");
  plan = sequenceParallelPlan();
  plan.mutable_mesh()->set_sizes(1, 3);
  EXPECT_REFUSED(plan, "(ALL_GATHER): y 'y' is [2, 6, 4], expected [2, 9, 4]");
  plan = sequenceParallelPlan();
  bodyOf(plan, 0)->set_outputs(0, 9); // F64
  EXPECT_REFUSED(plan, "(ALL_GATHER): operands mix F32 and F64");
  // A group over both axes counts both sizes (1 x 2).
  plan = sequenceParallelPlan();
  bodyOf(plan, 0)->add_group("dp");
  EXPECT_EQ(errorOf(plan), "");
  // Scattered: x's dimension splits evenly over the group into y's.
  plan = sequenceParallelPlan();
  (*bodyOf(plan, 1)->mutable_int_attrs())["dim"] = 2;
  EXPECT_REFUSED(plan,
                 "(REDUCE_SCATTER): y 'z' is [2, 3, 4], expected [2, 6, 2]");
  plan = sequenceParallelPlan();
  plan.mutable_mesh()->set_sizes(1, 4);
  bodyOf(plan, 0)->set_group(0, "dp"); // a copy of x into z
  bodyOf(plan, 0)->set_outputs(0, 2);
  EXPECT_REFUSED(plan, "(REDUCE_SCATTER): x 'y' [2, 6, 4] has 6 elements along "
                       "dimension 1, which do not split evenly over the "
                       "group's 4 ranks");
  plan = sequenceParallelPlan();
  bodyOf(plan, 1)->set_inputs(0, 9); // F64
  EXPECT_REFUSED(plan, "(REDUCE_SCATTER): operands mix F64 and F32");
  plan = sequenceParallelPlan();
  bodyOf(plan, 1)->set_outputs(0, 0); // x, also [2, 3, 4]: allowed
  EXPECT_EQ(errorOf(plan), "");
  // On a group of one rank both are copies: the shapes are equal.
  plan = sequenceParallelPlan();
  bodyOf(plan, 0)->set_group(0, "dp");
  bodyOf(plan, 0)->set_outputs(0, 2);
  bodyOf(plan, 1)->set_group(0, "dp");
  bodyOf(plan, 1)->set_inputs(0, 2);
  bodyOf(plan, 1)->set_outputs(0, 0);
  EXPECT_EQ(errorOf(plan), "");

  // The gathered size must fit in int64: 2^47 elements on 2^20 ranks do not.
  plan = Plan();
  plan.set_version(SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("sp");
  plan.mutable_mesh()->add_sizes(int64_t(1) << 20);
  for (const char *name : {"x", "y"}) {
    Buffer *b = plan.add_buffers();
    b->set_name(name);
    b->set_dtype(F32);
    b->add_shape(int64_t(1) << 47);
    b->set_role(ACTIVATION);
  }
  plan.set_arena_bytes(int64_t(1) << 49);
  plan.add_functions()->set_name("f");
  Instruction *gather = plan.mutable_functions(0)->add_body();
  gather->set_kernel(ALL_GATHER);
  gather->add_inputs(0);
  gather->add_outputs(1);
  gather->add_group("sp");
  (*gather->mutable_int_attrs())["dim"] = 0;
  EXPECT_REFUSED(plan, "x 'x' [140737488355328] gathered over 1048576 ranks "
                       "along dimension 0 does not fit in int64");
  // ... and so must a dropout's sample over them.
  gather->set_kernel(DROPOUT);
  gather->clear_group();
  gather->mutable_int_attrs()->clear();
  (*gather->mutable_int_attrs())["rng_id"] = 0;
  (*gather->mutable_int_attrs())["col_offset_stride"] = 0;
  (*gather->mutable_float_attrs())["rate"] = 0.5;
  gather->set_rank_axis("sp");
  plan.mutable_buffers(0)->add_shape(1);
  plan.mutable_buffers(1)->add_shape(1);
  plan.mutable_buffers(0)->set_shape(0, 1);
  plan.mutable_buffers(0)->set_shape(1, int64_t(1) << 47);
  plan.mutable_buffers(1)->set_shape(0, 1);
  plan.mutable_buffers(1)->set_shape(1, int64_t(1) << 47);
  EXPECT_REFUSED(plan, "(DROPOUT): the 1048576 ranks along 'sp' x "
                       "140737488355328 elements per sample do not fit in "
                       "int64");
}

// POSITION_EMBEDDING and its gradient on a slice of the sequence: the
// stride is required with a rank_axis and keeps every rank's positions
// inside the table (and, forward, inside the tokens' sequence).
/// A valid plan of ZeRO's kernels on a (dp 2, tp 1) mesh: a flat bucket of 8
/// parameters, each rank's block of 4 (gradient, moments), an async
/// reduce-scatter finished by a WAIT, AdamW on the block, an all-gather in
/// place.
Plan zeroPlan() {
  Plan plan;
  plan.set_version(SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("dp");
  plan.mutable_mesh()->add_sizes(2);
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(1);
  int64_t offset = 0;
  auto buffer = [&](const char *name, DType dtype, std::vector<int64_t> shape,
                    BufferRole role) {
    return addBuffer(plan, offset, name, dtype, shape, role);
  };
  int params = buffer("params", F32, {8}, BUCKET);          // 0
  int grads = buffer("grads", F32, {8}, BUCKET);            // 1
  int block = buffer("block", F32, {4}, ACTIVATION);        // 2
  int m = buffer("m", F32, {4}, OPTIMIZER_STATE);           // 3
  int v = buffer("v", F32, {4}, OPTIMIZER_STATE);           // 4
  int lr = buffer("lr", F32, {}, INPUT);                    // 5
  int step = buffer("step", I64, {}, INPUT);                // 6
  int scale = buffer("scale", F32, {}, ACTIVATION);         // 7
  int w = buffer("w", F32, {2, 2}, PARAMETER);              // 8: a view
  plan.mutable_buffers(w)->set_view_of(params + 1);
  plan.mutable_buffers(w)->set_view_offset(8);
  plan.mutable_buffers(w)->set_offset(plan.buffers(params).offset() + 8);
  int kept = buffer("kept", F32, {4}, PARAMETER);           // 9: a block
  plan.mutable_buffers(kept)->set_block_of(params + 1);
  plan.set_arena_bytes(offset);
  Function *fn = plan.add_functions();
  fn->set_name("f");
  auto add = [&](Kernel kernel, std::vector<int> ins, std::vector<int> outs) {
    return addInstruction(fn, kernel, ins, outs);
  };
  Instruction *scatter = add(REDUCE_SCATTER, {grads}, {block}); // 0
  scatter->add_group("dp");
  (*scatter->mutable_int_attrs())["dim"] = 0;
  (*scatter->mutable_int_attrs())["async"] = 1;
  add(WAIT, {grads, block}, {}); // 1
  Instruction *adamw =
      add(ADAMW, {params, block, m, v, lr, step, scale}, {params, m, v}); // 2
  adamw->set_rank_axis("dp");
  for (const char *attr : {"beta1", "beta2", "eps", "weight_decay"})
    (*adamw->mutable_float_attrs())[attr] = 0.01;
  Instruction *gather = add(ALL_GATHER, {params}, {params}); // 3
  gather->add_group("dp");
  (*gather->mutable_int_attrs())["dim"] = 0;
  add(COPY, {kept}, {params})->set_rank_axis("dp"); // 4
  return plan;
}

/// A plan being built by hand: the current version, a mesh of one "dp"
/// rank, and buffers appended one after the other.
struct HandPlan {
  Plan plan;
  int64_t offset = 0;
  HandPlan() {
    plan.set_version(SCHEMA_VERSION_CURRENT);
    plan.mutable_mesh()->add_axes("dp");
    plan.mutable_mesh()->add_sizes(1);
  }
  int buffer(const char *name, DType dtype, const std::vector<int64_t> &shape,
             BufferRole role) {
    return addBuffer(plan, offset, name, dtype, shape, role);
  }
};

// The log-sum-exp attention keeps for its backward: [batch, local heads,
// queries], of the activations' dtype or F32 beside BF16 ones.
TEST(PlanValidation, AttentionLogSumExp) {
  auto plan = [](DType dtype, std::vector<int64_t> lseShape, DType lseType) {
    HandPlan hand;
    int q = hand.buffer("q", dtype, {1, 3, 8}, ACTIVATION);
    int k = hand.buffer("k", dtype, {1, 3, 4}, ACTIVATION);
    int v = hand.buffer("v", dtype, {1, 3, 4}, ACTIVATION);
    int out = hand.buffer("out", dtype, {1, 3, 8}, ACTIVATION);
    int lse = hand.buffer("lse", lseType, lseShape, ACTIVATION);
    int dout = hand.buffer("dout", dtype, {1, 3, 8}, ACTIVATION);
    int dq = hand.buffer("dq", dtype, {1, 3, 8}, ACTIVATION);
    int dk = hand.buffer("dk", dtype, {1, 3, 4}, ACTIVATION);
    int dv = hand.buffer("dv", dtype, {1, 3, 4}, ACTIVATION);
    hand.plan.set_arena_bytes(hand.offset);
    Function *fn = hand.plan.add_functions();
    fn->set_name("f");
    for (Instruction *inst :
         {addInstruction(fn, ATTENTION, {q, k, v}, {out, lse}),
          addInstruction(fn, ATTENTION_GRAD, {q, k, v, out, dout, lse},
                         {dq, dk, dv})}) {
      auto &ints = *inst->mutable_int_attrs();
      ints["heads"] = 2;
      ints["kv_heads"] = 1;
      ints["causal"] = 1;
      ints["alibi"] = 0;
      (*inst->mutable_float_attrs())["scale"] = 0.5;
    }
    return std::move(hand.plan);
  };
  EXPECT_EQ(errorOf(plan(F32, {1, 2, 3}, F32)), "");
  EXPECT_EQ(errorOf(plan(BF16, {1, 2, 3}, F32)), "");
  EXPECT_REFUSED(plan(F32, {1, 3, 2}, F32),
                 "(ATTENTION): lse 'lse' is [1, 3, 2], expected [1, 2, 3]");
  EXPECT_REFUSED(plan(F64, {1, 2, 3}, F32),
                 "(ATTENTION): operand 'lse' is F32, expected F64");
}

// Cross-entropy's kept log-sum-exp: one per row of the targets.
TEST(PlanValidation, CrossEntropyLogSumExp) {
  auto plan = [](std::vector<int64_t> lseShape, DType lseType) {
    HandPlan hand;
    int logits = hand.buffer("logits", BF16, {2, 3, 8}, ACTIVATION);
    int targets = hand.buffer("targets", I32, {2, 3}, INPUT);
    int loss = hand.buffer("loss", F32, {}, ACTIVATION);
    int lse = hand.buffer("lse", lseType, lseShape, ACTIVATION);
    hand.plan.set_arena_bytes(hand.offset);
    Function *fn = hand.plan.add_functions();
    fn->set_name("f");
    (*addInstruction(fn, CROSS_ENTROPY, {logits, targets}, {loss, lse})
          ->mutable_int_attrs())["ignore_index"] = -100;
    return std::move(hand.plan);
  };
  EXPECT_EQ(errorOf(plan({2, 3}, F32)), "");
  EXPECT_REFUSED(plan({6}, F32),
                 "(CROSS_ENTROPY): lse 'lse' is [6], expected [2, 3]");
  EXPECT_REFUSED(plan({2, 3}, F64), "(CROSS_ENTROPY): operand 'lse' is F64, "
                                    "expected BF16 or F32 (mixed precision)");
}

/// A mixed-precision step of one linear: bf16 weights and activations, the
/// weight gradient and the optimizer's state (master weights, moments) f32.
Plan mixedPrecisionPlan(DType low = BF16) {
  HandPlan hand;
  auto buffer = [&](const char *name, DType dtype, std::vector<int64_t> shape,
                    BufferRole role) {
    return hand.buffer(name, dtype, shape, role);
  };
  Plan &plan = hand.plan;
  int x = buffer("x", low, {4, 3}, INPUT);                       // 0
  int w = buffer("w", low, {3, 2}, PARAMETER);                   // 1
  int y = buffer("y", low, {4, 2}, ACTIVATION);                  // 2
  int dw = buffer("dw", F32, {3, 2}, GRADIENT);                  // 3
  int master = buffer("master:w", F32, {3, 2}, OPTIMIZER_STATE); // 4
  int m = buffer("m", F32, {3, 2}, OPTIMIZER_STATE);             // 5
  int v = buffer("v", F32, {3, 2}, OPTIMIZER_STATE);             // 6
  int lr = buffer("lr", F32, {}, INPUT);                         // 7
  int step = buffer("step", I64, {}, INPUT);                     // 8
  int scale = buffer("scale", F32, {}, ACTIVATION);              // 9
  plan.set_arena_bytes(hand.offset);
  Function *fn = plan.add_functions();
  fn->set_name("f");
  auto add = [&](Kernel kernel, std::vector<int> ins, std::vector<int> outs) {
    return addInstruction(fn, kernel, ins, outs);
  };
  (*add(LINEAR, {x, w}, {y})->mutable_int_attrs())["transpose_w"] = 0; // 0
  (*add(LINEAR_GRAD_WEIGHT, {x, y}, {dw})->mutable_int_attrs())["transpose_w"] =
      0; // 1
  Instruction *adamw =
      add(ADAMW, {master, dw, m, v, lr, step, scale}, {master, m, v, w}); // 2
  for (const char *attr : {"beta1", "beta2", "eps", "weight_decay"})
    (*adamw->mutable_float_attrs())[attr] = 0.01;
  return std::move(plan);
}

// Mixed precision: a parameter gradient may be F32 where the kernel computes
// in BF16 or F16 (but no other dtype); AdamW updates F32 master weights and
// rounds them into a fourth output, the BF16 or F16 weights.
TEST(PlanValidation, MixedPrecision) {
  EXPECT_EQ(errorOf(mixedPrecisionPlan()), "");
  EXPECT_EQ(errorOf(mixedPrecisionPlan(F16)), "");
  Plan plan = mixedPrecisionPlan();
  plan.mutable_buffers(3)->set_dtype(F64);
  EXPECT_REFUSED(plan, "(LINEAR_GRAD_WEIGHT): operand 'dw' is F64, expected "
                       "BF16 or F32 (mixed precision)");
  // Only the gradient may be wider: the weights may not.
  plan = mixedPrecisionPlan();
  plan.mutable_buffers(1)->set_dtype(F32);
  EXPECT_REFUSED(plan, "(LINEAR): operands mix BF16 and F32");
  // In an F64 kernel an F32 gradient is no mixed precision.
  plan = mixedPrecisionPlan();
  for (int b : {0, 1, 2})
    plan.mutable_buffers(b)->set_dtype(F64);
  EXPECT_REFUSED(plan,
                 "(LINEAR_GRAD_WEIGHT): operand 'dw' is F32, expected F64");
  plan = mixedPrecisionPlan();
  plan.mutable_buffers(1)->set_dtype(F32);
  plan.mutable_buffers(0)->set_dtype(F32);
  plan.mutable_buffers(2)->set_dtype(F32);
  EXPECT_REFUSED(plan, "(ADAMW): the master weights 'master:w' are F32 and "
                       "their copy 'w' F32: mixed precision keeps F32 masters "
                       "of BF16 or F16 weights");
  plan = mixedPrecisionPlan();
  plan.mutable_buffers(5)->set_dtype(BF16);
  EXPECT_REFUSED(plan, "(ADAMW): gradient or moment 'm' is BF16, expected F32");
  plan = mixedPrecisionPlan();
  bodyOf(plan, 2)->add_outputs(1);
  EXPECT_REFUSED(plan, "(ADAMW): has 7 inputs and 5 outputs; the kernel takes "
                       "7 inputs and 3-4 outputs");
}

// ZeRO: async only on a reduce-scatter and 0 or 1; a WAIT names buffers
// and makes none; AdamW with a rank_axis updates its rank's block of flat
// parameters; an all-gather in place is of a flat buffer that splits evenly.
TEST(PlanValidation, ZeroKernels) {
  EXPECT_EQ(errorOf(zeroPlan()), "");
  Plan plan = zeroPlan();
  (*bodyOf(plan, 0)->mutable_int_attrs())["async"] = 2;
  EXPECT_REFUSED(plan, "attribute 'async' = 2 is outside [0, 1]");
  plan = zeroPlan();
  (*bodyOf(plan, 3)->mutable_int_attrs())["async"] = 1; // in place: allowed
  EXPECT_EQ(errorOf(plan), "");
  plan = sequenceParallelPlan();
  (*bodyOf(plan, 0)->mutable_int_attrs())["async"] = 1;
  EXPECT_REFUSED(plan,
                 "(ALL_GATHER): only an all-gather in place has an async attribute");
  plan = zeroPlan();
  bodyOf(plan, 1)->clear_inputs();
  EXPECT_REFUSED(plan, "(WAIT): has 0 inputs and 0 outputs");
  plan = zeroPlan();
  bodyOf(plan, 1)->add_outputs(2);
  EXPECT_REFUSED(plan, "(WAIT): has 2 inputs and 1 outputs");
  plan = zeroPlan();
  plan.mutable_buffers(3)->set_shape(0, 3); // m of 3: not a block of 8
  EXPECT_REFUSED(plan, "(ADAMW): gradient or moment 'block' is [4], expected [3]");
  plan = zeroPlan();
  plan.mutable_buffers(1)->set_shape(0, 4); // gradients of 4 in blocks of 2
  for (int b : {2, 3, 4})
    plan.mutable_buffers(b)->set_shape(0, 2); // 2 x 2 != 8 parameters
  EXPECT_REFUSED(plan, "(ADAMW): parameters 'params' [8] are not 2 blocks of "
                       "the moments 'm' [2] (one per rank of 'dp')");
  // Views and blocks.
  plan = zeroPlan();
  plan.mutable_buffers(8)->set_view_of(9);
  EXPECT_REFUSED(plan, "buffer 8 ('w') has view_of = 9 and block_of = 0: each "
                       "is 0 or 1 + the index of another buffer of the 10");
  plan = zeroPlan();
  plan.mutable_buffers(8)->set_offset(plan.buffers(8).offset() + 4);
  EXPECT_REFUSED(plan, "buffer 8 ('w') is a view of buffer 0 ('params', 32 "
                       "bytes at 0) at 8 bytes in, but occupies 16 bytes at 12");
  plan = zeroPlan();
  plan.mutable_buffers(8)->set_view_offset(20);
  plan.mutable_buffers(8)->set_offset(20);
  EXPECT_REFUSED(plan, "at 20 bytes in, but occupies 16 bytes at 20 (expected "
                       "inside it");
  plan = zeroPlan();
  plan.mutable_buffers(8)->set_view_of(0);
  EXPECT_REFUSED(plan, "buffer 8 ('w') has a view_offset but is not a view");
  plan = zeroPlan();
  plan.mutable_buffers(9)->set_shape(0, 3);
  EXPECT_REFUSED(plan, "buffer 9 ('kept') is a block of buffer 0 ('params' [8]) "
                       "but is [3] (expected one-dimensional parameters, 1/dp "
                       "of it)");
  plan = zeroPlan();
  plan.mutable_buffers(9)->set_role(OPTIMIZER_STATE);
  EXPECT_REFUSED(plan, "buffer 9 ('kept') is a block of buffer 0");
  // COPY: into the rank's block of y with a rank_axis, else the same shape.
  plan = zeroPlan();
  bodyOf(plan, 4)->clear_rank_axis();
  EXPECT_REFUSED(plan, "(COPY): y 'params' is [8], expected [4]");
  plan = zeroPlan();
  bodyOf(plan, 4)->set_inputs(0, 8);
  EXPECT_REFUSED(plan, "(COPY): y 'params' [8] is not 2 blocks of x 'w' [2, 2] "
                       "(one per rank of 'dp')");
  plan = zeroPlan();
  plan.mutable_mesh()->set_sizes(0, 3);
  plan.mutable_buffers(9)->clear_block_of();
  plan.mutable_functions(0)->mutable_body()->DeleteSubrange(0, 3);
  plan.mutable_functions(0)->mutable_body()->RemoveLast();
  EXPECT_REFUSED(plan, "(ALL_GATHER): x 'params' [8] does not split evenly over "
                       "the group's 3 ranks");
}

// ZeRO with mixed precision: AdamW on this rank's block of F32 masters
// writes its block of the whole flat BF16 weights.
TEST(PlanValidation, ZeroMixedPrecision) {
  auto mixed = [] {
    Plan plan = zeroPlan();
    int64_t offset = plan.arena_bytes();
    int weights = addBuffer(plan, offset, "weights", BF16, {8}, BUCKET); // 10
    int master = addBuffer(plan, offset, "master", F32, {4}, OPTIMIZER_STATE);
    plan.set_arena_bytes(offset);
    Instruction *adamw = bodyOf(plan, 2);
    adamw->set_inputs(0, master);
    adamw->set_outputs(0, master);
    adamw->add_outputs(weights);
    return plan;
  };
  EXPECT_EQ(errorOf(mixed()), "");
  Plan plan = mixed();
  plan.mutable_buffers(10)->set_shape(0, 6);
  EXPECT_REFUSED(plan,
                 "(ADAMW): the weights 'weights' [6] are not 2 blocks of "
                 "the master weights 'master' [4] (one per rank of 'dp')");
}

TEST(PlanValidation, PositionEmbeddingSequenceSlices) {
  for (int i : {2, 3}) {
    SCOPED_TRACE(i == 2 ? "POSITION_EMBEDDING" : "POSITION_EMBEDDING_GRAD");
    Plan plan = sequenceParallelPlan();
    bodyOf(plan, i)->mutable_int_attrs()->erase("seq_start_stride");
    EXPECT_REFUSED(plan, "lacks the integer attribute 'seq_start_stride'");
    plan = sequenceParallelPlan();
    (*bodyOf(plan, i)->mutable_int_attrs())["seq_start_stride"] = -3;
    EXPECT_REFUSED(plan, "attribute 'seq_start_stride' = -3 is outside [0, ");
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->set_rank_axis("sp");
    EXPECT_REFUSED(plan, "rank_axis 'sp' is not an axis of the mesh");
    plan = sequenceParallelPlan();
    (*bodyOf(plan, i)->mutable_int_attrs())["seq_start_stride"] = 6;
    EXPECT_REFUSED(plan, "seq_start_stride = 6 puts the 3 positions of rank 1 "
                         "along 'tp' past the position table's 8 rows "
                         "(expected a stride of at most 5)");
    // A rank_axis of one rank: the stride is required but never leaves.
    plan = sequenceParallelPlan();
    bodyOf(plan, i)->set_rank_axis("dp");
    (*bodyOf(plan, i)->mutable_int_attrs())["seq_start_stride"] = 100;
    EXPECT_EQ(errorOf(plan), "");
    // Overlapping slices stay inside the table.
    plan = sequenceParallelPlan();
    (*bodyOf(plan, i)->mutable_int_attrs())["seq_start_stride"] = 1;
    EXPECT_EQ(errorOf(plan), "");
  }
  // Forward: the slice stays inside the tokens' sequence too, and holds at
  // most its positions.
  Plan plan = sequenceParallelPlan();
  (*bodyOf(plan, 2)->mutable_int_attrs())["seq_start_stride"] = 4;
  EXPECT_REFUSED(plan, "(POSITION_EMBEDDING): seq_start_stride = 4 puts the 3 "
                       "positions of rank 1 along 'tp' past the tokens' "
                       "sequence of 6 (expected a stride of at most 3)");
  plan = sequenceParallelPlan();
  plan.mutable_buffers(4)->set_shape(1, 4); // ids [2, 4]
  bodyOf(plan, 2)->set_outputs(0, 1);       // out [2, 6, 4]
  (*bodyOf(plan, 2)->mutable_int_attrs())["seq_start_stride"] = 0;
  EXPECT_REFUSED(plan, "(POSITION_EMBEDDING): the 6 positions of a rank exceed "
                       "the tokens' sequence of 4");
  plan = sequenceParallelPlan();
  plan.mutable_buffers(3)->set_shape(0, 5); // table [5, 4]
  EXPECT_REFUSED(plan, "(POSITION_EMBEDDING): seq_start_stride = 3 puts the 3 "
                       "positions of rank 1 along 'tp' past the position "
                       "table's 5 rows (expected a stride of at most 2)");
  plan = sequenceParallelPlan();
  bodyOf(plan, 2)->set_outputs(0, 3);
  EXPECT_REFUSED(plan, "out 'table' has rank 2, expected 3");
  plan = sequenceParallelPlan();
  plan.mutable_buffers(4)->set_shape(0, 1); // ids [1, 6]
  EXPECT_REFUSED(plan, "out 'pos' is [2, 3, 4], expected [1, 3, 4]");
  // Without a rank_axis, out is the whole sequence, as before.
  plan = sequenceParallelPlan();
  bodyOf(plan, 2)->clear_rank_axis();
  EXPECT_REFUSED(plan, "out 'pos' is [2, 3, 4], expected [2, 6, 4]");
  bodyOf(plan, 2)->set_outputs(0, 1);
  EXPECT_EQ(errorOf(plan), ""); // an unused stride is harmless
  (*bodyOf(plan, 2)->mutable_int_attrs())["seq_start_stride"] = -1;
  EXPECT_REFUSED(plan, "attribute 'seq_start_stride' = -1 is outside [0, ");
  bodyOf(plan, 2)->mutable_int_attrs()->clear();
  plan.mutable_buffers(3)->set_shape(0, 5);
  EXPECT_REFUSED(plan, "the sequence is longer than the position table");

  // Gradient: dy's hidden size is the table's; without a rank_axis dy's
  // positions fit in the table.
  plan = sequenceParallelPlan();
  plan.mutable_buffers(6)->set_shape(1, 3); // dtable [8, 3]
  EXPECT_REFUSED(plan, "(POSITION_EMBEDDING_GRAD): dy 'pos' [2, 3, 4] does not "
                       "fit the position table [8, 3] (expected its last "
                       "dimension to be the table's 3)");
  plan = sequenceParallelPlan();
  bodyOf(plan, 3)->clear_rank_axis();
  bodyOf(plan, 3)->set_inputs(0, 1);        // dy [2, 6, 4]
  plan.mutable_buffers(6)->set_shape(0, 5); // dtable [5, 4]
  EXPECT_REFUSED(plan, "(POSITION_EMBEDDING_GRAD): dy 'y' [2, 6, 4] has more "
                       "positions than the position table [5, 4]");
  plan.mutable_buffers(6)->set_shape(0, 6);
  EXPECT_EQ(errorOf(plan), "");
}

// DROPOUT on a slice of each sample: col_offset_stride is required with a
// rank_axis and keeps every rank's elements inside the sample.
TEST(PlanValidation, DropoutSampleSlices) {
  Plan plan = sequenceParallelPlan();
  bodyOf(plan, 4)->mutable_int_attrs()->erase("col_offset_stride");
  EXPECT_REFUSED(plan, "(DROPOUT): lacks the integer attribute "
                       "'col_offset_stride'");
  plan = sequenceParallelPlan();
  (*bodyOf(plan, 4)->mutable_int_attrs())["col_offset_stride"] = 13;
  EXPECT_REFUSED(plan, "(DROPOUT): col_offset_stride = 13 puts the 12 elements "
                       "per sample of rank 1 along 'tp' past the sample's 24 "
                       "elements (expected a stride of at most 12)");
  plan = sequenceParallelPlan();
  (*bodyOf(plan, 4)->mutable_int_attrs())["col_offset_stride"] = -12;
  EXPECT_REFUSED(plan, "attribute 'col_offset_stride' = -12 is outside [0, ");
  plan = sequenceParallelPlan();
  bodyOf(plan, 4)->set_rank_axis("sp");
  EXPECT_REFUSED(plan, "(DROPOUT): rank_axis 'sp' is not an axis of the mesh");
  plan = sequenceParallelPlan();
  bodyOf(plan, 4)->add_group("tp");
  EXPECT_REFUSED(plan, "(DROPOUT): names a group but is not a collective");
  // A smaller stride (overlapping slices) stays inside; without a rank_axis
  // the stride is not needed.
  plan = sequenceParallelPlan();
  (*bodyOf(plan, 4)->mutable_int_attrs())["col_offset_stride"] = 5;
  EXPECT_EQ(errorOf(plan), "");
  plan = sequenceParallelPlan();
  bodyOf(plan, 4)->clear_rank_axis();
  bodyOf(plan, 4)->mutable_int_attrs()->erase("col_offset_stride");
  EXPECT_EQ(errorOf(plan), "");
  // A scalar is one sample of one element.
  plan = sequenceParallelPlan();
  bodyOf(plan, 4)->set_inputs(0, 8);
  bodyOf(plan, 4)->set_outputs(0, 8);
  (*bodyOf(plan, 4)->mutable_int_attrs())["col_offset_stride"] = 2;
  EXPECT_REFUSED(plan, "col_offset_stride = 2 puts the 1 elements per sample "
                       "of rank 1 along 'tp' past the sample's 2 elements");
}

TEST(PlanFile, WritesAndLoads) {
  std::string path = ::testing::TempDir() + "/braid-plan-test.plan";
  ASSERT_TRUE(WritePlanFile(validPlan(), path).ok());
  absl::StatusOr<Plan> loaded = LoadPlanFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(LoadPlanFile(path + ".missing").ok());
}

} // namespace

namespace {

/// SWIGLU and SWIGLU_GRAD on a packed [gate | up] operand (rows of 2 x 4).
Plan packedSwigluPlan() {
  Plan plan;
  plan.set_version(SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("dp");
  plan.mutable_mesh()->add_sizes(1);
  int64_t offset = 0;
  int x = addBuffer(plan, offset, "gate_up", F32, {2, 3, 8}, ACTIVATION);
  int y = addBuffer(plan, offset, "y", F32, {2, 3, 4}, ACTIVATION);
  int dy = addBuffer(plan, offset, "dy", F32, {2, 3, 4}, ACTIVATION);
  int dx = addBuffer(plan, offset, "dgate_up", F32, {2, 3, 8}, ACTIVATION);
  addBuffer(plan, offset, "odd", F32, {2, 3, 7}, ACTIVATION);
  plan.set_arena_bytes(offset);
  Function *fn = plan.add_functions();
  fn->set_name("f");
  addInstruction(fn, SWIGLU, {x}, {y});
  addInstruction(fn, SWIGLU_GRAD, {x, dy}, {dx});
  return plan;
}

} // namespace

TEST(PlanValidation, PackedSwiglu) {
  EXPECT_EQ(errorOf(packedSwigluPlan()), "");
  Plan plan = packedSwigluPlan();
  bodyOf(plan, 0)->set_outputs(0, 3); // a result as wide as the operand
  EXPECT_REFUSED(plan, "(SWIGLU): result 'dgate_up' is [2, 3, 8], expected "
                       "[2, 3, 4]");
  plan = packedSwigluPlan();
  bodyOf(plan, 0)->set_inputs(0, 4);
  EXPECT_REFUSED(plan, "packed [gate | up] operand 'odd' is [2, 3, 7]: its "
                       "last dimension is odd");
  plan = packedSwigluPlan();
  bodyOf(plan, 1)->set_inputs(1, 0); // dy as wide as the operand
  EXPECT_REFUSED(plan, "(SWIGLU_GRAD): dy 'gate_up' is [2, 3, 8], expected "
                       "[2, 3, 4]");
  plan = packedSwigluPlan();
  bodyOf(plan, 1)->add_outputs(3);
  EXPECT_REFUSED(plan, "(SWIGLU_GRAD): has 2 inputs and 2 outputs; the kernel "
                       "takes 2 inputs and 1 outputs");
  plan = packedSwigluPlan();
  bodyOf(plan, 1)->set_outputs(0, 1);
  EXPECT_REFUSED(plan, "result 'y' is [2, 3, 4], expected [2, 3, 8]");
}

namespace {

/// Generation's kernels on two sequences of three new tokens: ROPE_AT of
/// x, ATTENTION_CACHED against caches of 8 positions (2 heads of 4 on one
/// kv head), TAKE_ROWS of each sequence's last row, SAMPLE of 12 logits
/// (the first 10 the vocabulary).
Plan generationKernelsPlan() {
  HandPlan hand;
  int x = hand.buffer("x", F32, {2, 3, 8}, ACTIVATION);
  int positions = hand.buffer("positions", I32, {2, 3}, INPUT);
  int q = hand.buffer("q", F32, {2, 3, 8}, ACTIVATION);
  int k = hand.buffer("k", F32, {2, 3, 4}, ACTIVATION);
  int v = hand.buffer("v", F32, {2, 3, 4}, ACTIVATION);
  int cacheK = hand.buffer("cache_k", F32, {2, 8, 4}, KV_CACHE);
  int cacheV = hand.buffer("cache_v", F32, {2, 8, 4}, KV_CACHE);
  int out = hand.buffer("out", F32, {2, 3, 8}, ACTIVATION);
  int last = hand.buffer("last", I32, {2}, INPUT);
  int rows = hand.buffer("rows", F32, {2, 1, 8}, ACTIVATION);
  int logits = hand.buffer("logits", F32, {2, 1, 12}, ACTIVATION);
  int sampling = hand.buffer("sampling", F32, {3}, INPUT);
  int seed = hand.buffer("seed", I32, {2}, INPUT);
  int draws = hand.buffer("draw_positions", I32, {2}, INPUT);
  int ids = hand.buffer("ids", I32, {2}, ACTIVATION);
  hand.buffer("wrong", I32, {2, 1}, INPUT); // 15: a shape none of them takes
  hand.plan.set_arena_bytes(hand.offset);
  Function *fn = hand.plan.add_functions();
  fn->set_name("decode");
  Instruction *rope = addInstruction(fn, ROPE_AT, {x, positions}, {q});
  (*rope->mutable_int_attrs())["head_dim"] = 4;
  (*rope->mutable_float_attrs())["theta"] = 10000;
  Instruction *attention =
      addInstruction(fn, ATTENTION_CACHED, {q, k, v, positions, cacheK, cacheV},
                     {out, cacheK, cacheV});
  auto &ints = *attention->mutable_int_attrs();
  ints["heads"] = 2;
  ints["kv_heads"] = 1;
  ints["alibi"] = 1;
  (*attention->mutable_float_attrs())["scale"] = 0.5;
  addInstruction(fn, TAKE_ROWS, {out, last}, {rows});
  (*addInstruction(fn, SAMPLE, {logits, sampling, seed, draws}, {ids})
        ->mutable_int_attrs())["vocab_size"] = 10;
  return std::move(hand.plan);
}

} // namespace

// One refusal of each of generation's kernel checks.
TEST(PlanValidation, GenerationKernels) {
  EXPECT_EQ(errorOf(generationKernelsPlan()), "");
  Plan plan = generationKernelsPlan();
  bodyOf(plan, 0)->set_inputs(1, 15);
  EXPECT_REFUSED(plan,
                 "(ROPE_AT): positions 'wrong' is [2, 1], expected [2, 3]");
  plan = generationKernelsPlan();
  bodyOf(plan, 1)->set_outputs(1, 6); // the value cache as cache_k's result
  EXPECT_REFUSED(plan, "(ATTENTION_CACHED): outputs 1 and 2 must be the "
                       "caches, inputs 4 and 5");
  plan = generationKernelsPlan();
  bodyOf(plan, 2)->set_inputs(1, 15);
  EXPECT_REFUSED(plan, "(TAKE_ROWS): index 'wrong' is [2, 1], expected [2]");
  plan = generationKernelsPlan();
  (*bodyOf(plan, 3)->mutable_int_attrs())["vocab_size"] = 13;
  EXPECT_REFUSED(plan, "(SAMPLE): attribute 'vocab_size' = 13 is outside "
                       "[1, 12]");
}

namespace {

/// Beam search's kernels on two beams: TOP_LOGPROBS of 12 logits (the
/// first 10 the vocabulary), 3 candidates per beam, and REORDER_ROWS of a
/// cache of 8 positions.
Plan beamSearchKernelsPlan() {
  HandPlan hand;
  int logits = hand.buffer("logits", F32, {2, 1, 12}, ACTIVATION);
  int values = hand.buffer("top_logprobs", F32, {2, 3}, ACTIVATION);
  int ids = hand.buffer("top_ids", I32, {2, 3}, ACTIVATION);
  int cache = hand.buffer("cache_k", F32, {2, 8, 4}, KV_CACHE);
  int parents = hand.buffer("beam_parents", I32, {2}, INPUT);
  hand.buffer("cache_v", F32, {2, 8, 4}, KV_CACHE); // 5: another cache
  hand.plan.set_arena_bytes(hand.offset);
  Function *fn = hand.plan.add_functions();
  fn->set_name("decode");
  (*addInstruction(fn, TOP_LOGPROBS, {logits}, {values, ids})
        ->mutable_int_attrs())["vocab_size"] = 10;
  Function *reorder = hand.plan.add_functions();
  reorder->set_name("reorder");
  addInstruction(reorder, REORDER_ROWS, {cache, parents}, {cache});
  return std::move(hand.plan);
}

} // namespace

// TOP_LOGPROBS keeps at most vocab_size candidates; REORDER_ROWS reorders
// its x in place.
TEST(PlanValidation, BeamSearchKernels) {
  EXPECT_EQ(errorOf(beamSearchKernelsPlan()), "");
  Plan plan = beamSearchKernelsPlan();
  (*bodyOf(plan, 0)->mutable_int_attrs())["vocab_size"] = 2;
  EXPECT_REFUSED(plan, "(TOP_LOGPROBS): K = 3 candidates per row must be in "
                       "[1, vocab_size = 2]");
  plan = beamSearchKernelsPlan();
  plan.mutable_functions(1)->mutable_body(0)->set_outputs(0, 5);
  EXPECT_REFUSED(plan, "(REORDER_ROWS): the output must be x, input 0");
}

namespace {

/// The draw over tp 2 from the ranks' candidates: TOP_CANDIDATES of each
/// rank's 8 columns of 16 (ids from 8 x its coordinate, 14 valid), 3 per
/// rank, the three gathered along "tp" (ids as I32), then SAMPLE and
/// TOP_LOGPROBS from the 6 gathered.
Plan candidateDrawPlan() {
  HandPlan hand;
  hand.plan.mutable_mesh()->add_axes("tp");
  hand.plan.mutable_mesh()->add_sizes(2);
  int logits = hand.buffer("logits", F32, {2, 1, 8}, ACTIVATION);
  int values = hand.buffer("values", F32, {2, 1, 3}, ACTIVATION);
  int ids = hand.buffer("ids", I32, {2, 3}, ACTIVATION);
  int lse = hand.buffer("lse", F32, {2, 1, 1}, ACTIVATION);
  int allValues = hand.buffer("all_values", F32, {2, 1, 6}, ACTIVATION);
  int allIds = hand.buffer("all_ids", I32, {2, 6}, ACTIVATION);
  int allLse = hand.buffer("all_lse", F32, {2, 1, 2}, ACTIVATION);
  int sampling = hand.buffer("sampling", F32, {3}, INPUT);
  int seed = hand.buffer("seed", I32, {2}, INPUT);
  int draws = hand.buffer("draw_positions", I32, {2}, INPUT);
  int next = hand.buffer("next", I32, {2}, ACTIVATION);
  int top = hand.buffer("top_logprobs", F32, {2, 4}, ACTIVATION);
  int topIds = hand.buffer("top_ids", I32, {2, 4}, ACTIVATION);
  hand.plan.set_arena_bytes(hand.offset);
  Function *fn = hand.plan.add_functions();
  fn->set_name("decode");
  Instruction *candidates =
      addInstruction(fn, TOP_CANDIDATES, {logits}, {values, ids, lse});
  (*candidates->mutable_int_attrs())["k"] = 3;
  (*candidates->mutable_int_attrs())["vocab_size"] = 14;
  (*candidates->mutable_int_attrs())["vocab_start_stride"] = 8;
  candidates->set_rank_axis("tp");
  for (auto [in, out, dim] : {std::tuple<int, int, int>{values, allValues, 2},
                              {ids, allIds, 1},
                              {lse, allLse, 2}}) {
    Instruction *gather = addInstruction(fn, ALL_GATHER, {in}, {out});
    gather->add_group("tp");
    (*gather->mutable_int_attrs())["dim"] = dim;
  }
  (*addInstruction(fn, SAMPLE, {allValues, sampling, seed, draws, allIds},
                   {next})
        ->mutable_int_attrs())["vocab_size"] = 14;
  (*addInstruction(fn, TOP_LOGPROBS, {allValues, allIds, allLse},
                   {top, topIds})
        ->mutable_int_attrs())["vocab_size"] = 14;
  return std::move(hand.plan);
}

} // namespace

// The candidate draw's checks: TOP_CANDIDATES' outputs and slice, an I32
// all-gather that keeps its dtype, and SAMPLE's and TOP_LOGPROBS' candidate
// operands.
TEST(PlanValidation, CandidateDrawKernels) {
  EXPECT_EQ(errorOf(candidateDrawPlan()), "");
  Plan plan = candidateDrawPlan();
  (*bodyOf(plan, 0)->mutable_int_attrs())["vocab_start_stride"] = 9;
  EXPECT_REFUSED(plan, "(TOP_CANDIDATES): vocab_start_stride = 9 puts the 8 "
                       "columns of rank 1 along 'tp' past the global "
                       "vocabulary of 16");
  plan = candidateDrawPlan();
  bodyOf(plan, 0)->set_outputs(0, 4); // values as all_values [2, 1, 6]
  EXPECT_REFUSED(plan, "(TOP_CANDIDATES): values 'all_values' is [2, 1, 6], "
                       "expected [2, 1, 3]");
  plan = candidateDrawPlan();
  bodyOf(plan, 0)->set_outputs(1, 3); // ids as the F32 lse
  EXPECT_REFUSED(plan, "(TOP_CANDIDATES): ids 'lse' must be I32, found F32");
  plan = candidateDrawPlan();
  bodyOf(plan, 2)->set_outputs(0, 4); // I32 ids gathered into F32 values
  EXPECT_REFUSED(plan, "(ALL_GATHER): x 'ids' is I32 and y 'all_values' F32: "
                       "an all-gather keeps the dtype");
  plan = candidateDrawPlan();
  bodyOf(plan, 4)->set_inputs(4, 2); // ids of one rank: [2, 3]
  EXPECT_REFUSED(plan, "(SAMPLE): candidate ids 'ids' is [2, 3], expected "
                       "[2, 6]");
  plan = candidateDrawPlan();
  bodyOf(plan, 5)->mutable_inputs()->RemoveLast();
  EXPECT_REFUSED(plan, "(TOP_LOGPROBS): takes candidate ids without the "
                       "ranks' lse");
  plan = candidateDrawPlan();
  bodyOf(plan, 5)->set_inputs(2, 1); // lse as one rank's values [2, 1, 3]
  EXPECT_EQ(errorOf(plan), "");
  bodyOf(plan, 5)->set_inputs(2, 5); // lse as the ids [2, 6]
  EXPECT_REFUSED(plan, "(TOP_LOGPROBS): lse 'all_ids' has rank 2, expected 3");
}

namespace {

/// SCALE of an activation by a LoRA adapter's alpha / rank, into another.
Plan scalePlan() {
  HandPlan hand;
  int x = hand.buffer("x", F32, {2, 3, 4}, ACTIVATION);
  int y = hand.buffer("y", F32, {2, 3, 4}, ACTIVATION);
  hand.buffer("wide", F32, {2, 3, 8}, ACTIVATION);   // 2
  hand.buffer("half", BF16, {2, 3, 4}, ACTIVATION);  // 3
  hand.plan.set_arena_bytes(hand.offset);
  Function *fn = hand.plan.add_functions();
  fn->set_name("forward");
  (*addInstruction(fn, SCALE, {x}, {y})->mutable_float_attrs())["scale"] =
      2.0;
  return std::move(hand.plan);
}

} // namespace

// SCALE: an elementwise kernel whose factor is present, finite and nonzero.
TEST(PlanValidation, ScaleKernel) {
  EXPECT_EQ(errorOf(scalePlan()), "");
  Plan plan = scalePlan();
  (*bodyOf(plan, 0)->mutable_float_attrs())["scale"] = -0.125;
  EXPECT_EQ(errorOf(plan), "");
  bodyOf(plan, 0)->mutable_float_attrs()->clear();
  EXPECT_REFUSED(plan, "(SCALE): lacks the float attribute 'scale'");
  plan = scalePlan();
  (*bodyOf(plan, 0)->mutable_float_attrs())["scale"] = 0.0;
  EXPECT_REFUSED(plan, "(SCALE): attribute 'scale' = 0 must be finite and "
                       "nonzero");
  plan = scalePlan();
  (*bodyOf(plan, 0)->mutable_float_attrs())["scale"] =
      std::numeric_limits<double>::infinity();
  EXPECT_REFUSED(plan, "(SCALE): attribute 'scale' = inf must be finite and "
                       "nonzero");
  plan = scalePlan();
  (*bodyOf(plan, 0)->mutable_float_attrs())["scale"] =
      std::numeric_limits<double>::quiet_NaN();
  EXPECT_REFUSED(plan, "(SCALE): attribute 'scale' = nan must be finite and "
                       "nonzero");
  plan = scalePlan();
  bodyOf(plan, 0)->set_outputs(0, 2);
  EXPECT_REFUSED(plan, "(SCALE): result 'wide' is [2, 3, 8], expected "
                       "[2, 3, 4]");
  plan = scalePlan();
  bodyOf(plan, 0)->set_outputs(0, 3);
  EXPECT_REFUSED(plan, "(SCALE): operands mix F32 and BF16");
  plan = scalePlan();
  bodyOf(plan, 0)->add_inputs(1);
  EXPECT_REFUSED(plan, "(SCALE): has 2 inputs and 1 outputs; the kernel "
                       "takes 1 inputs and 1 outputs");
}
