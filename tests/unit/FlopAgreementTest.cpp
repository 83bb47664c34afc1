//===- FlopAgreementTest.cpp - One FLOP count per kernel ------------------===//
//
// docs/report.md, "One FLOP convention": a kernel's FLOPs are its row's WORK
// formula in runtime/plan/Kernels.def. Four places count them: the `model`
// ops' CostOpInterface (the report, recompute and pipeline balancing), the
// work counter (plan::InstructionWork: calibration), the cost model
// (compiler/CostModelPricer.cpp) and the schedule view
// (compiler/ScheduleView.cpp).
// For models that use every computing kernel, each kernel's FLOPs over a
// step are computed each way and must be equal.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "compiler/CostModel.h"
#include "compiler/Generate.h"
#include "compiler/Registration.h"
#include "compiler/ScheduleView.h"
#include "dialects/model/ModelDialect.h"
#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Work.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <google/protobuf/text_format.h>

#include "gtest/gtest.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

using namespace braid;
using namespace braid::test;

namespace {

using PerKernel = std::map<std::string, double>;

/// The FLOPs of the `model` ops of one step, by the kernel each lowers to
/// (plan-lower's op -> kernel contract).
PerKernel modelFlops(mlir::ModuleOp module) {
  PerKernel flops;
  module.walk([&](model::CostOpInterface op) {
    auto lowered = mlir::dyn_cast<model::PlanKernelOpInterface>(op.getOperation());
    ASSERT_TRUE(lowered) << op->getName().getStringRef().str()
                         << " names no plan kernel";
    std::string kernel = lowered.getPlanKernelName().str();
    EXPECT_NE(plan::FindKernel(kernel), nullptr) << kernel;
    flops[kernel] += double(op.getMatmulFlops()) + double(op.getVectorFlops());
  });
  return flops;
}

/// Every instruction of the plan: the schedule view counts a kernel whose
/// FLOPs are matrix products as the work counter does, and no other.
void checkViewAgainstWork(const plan::Plan &p) {
  for (const plan::Function &fn : p.functions())
    for (const plan::Instruction &inst : fn.body()) {
      SCOPED_TRACE(plan::Kernel_Name(inst.kernel()));
      double work = plan::InstructionWork(p, inst).flops;
      EXPECT_EQ(matmulFlops(p, inst),
                plan::HasMatrixProducts(inst.kernel()) ? work : 0.0);
      // ADD is left out of the sums below (see there): its count is its
      // operand's elements, as model.add's.
      if (inst.kernel() == plan::ADD) {
        EXPECT_EQ(work, double(plan::NumElements(p.buffers(inst.outputs(0)))));
      }
    }
}

/// The cost model's seconds by kernel on a cluster whose every kernel does
/// one FLOP a second with no overhead, and whose links take no time: the
/// FLOPs of each kernel's calls over the step, as the work counter counts
/// them.
PerKernel costModelFlops(const plan::Plan &p) {
  llvm::Expected<spec::Cluster> cluster = loadCluster("dgx-h100");
  EXPECT_TRUE(bool(cluster)) << llvm::toString(cluster.takeError());
  if (!cluster)
    return {};
  spec::Calibration *c = cluster->add_calibrations();
  c->set_ranks_per_node(
      std::min<int64_t>(plan::WorldSize(p), cluster->devices_per_node()));
  spec::KernelRate *rate = c->add_kernels();
  rate->set_kernel("default");
  rate->set_flops_per_s(1);
  c->mutable_intra_node()->set_bandwidth(1e300);
  c->mutable_intra_node()->set_latency(0);
  llvm::Expected<StepPrediction> step = predictStep(p, *cluster);
  EXPECT_TRUE(bool(step)) << llvm::toString(step.takeError());
  if (!step)
    return {};
  return step->kernels;
}

struct Case {
  const char *name;
  const char *preset;
  const char *modelFields;
  const char *parallelFields;
  /// The job's lora section, when not empty.
  const char *loraFields = "";
};

class FlopAgreement : public ::testing::TestWithParam<Case> {};

TEST_P(FlopAgreement, EveryCounterGivesEachKernelTheSameFlops) {
  const Case &c = GetParam();
  spec::JobSpec j = presetJob(c.preset, 32, 2);
  ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(
      c.modelFields, j.mutable_model()));
  ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(
      c.parallelFields, j.mutable_parallel()));
  if (*c.loraFields)
    ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(
        c.loraFields, j.mutable_lora()));
  // The rank's step in the `model` dialect (sharded, before plan-lower).
  mlir::MLIRContext context;
  auto module = compileTo(context, j, Phase::Recompute);
  ASSERT_TRUE(module);
  PerKernel model = modelFlops(*module);
  plan::Plan p = compilePlan(j);
  ASSERT_GT(p.functions_size(), 0);
  checkViewAgainstWork(p);
  PerKernel priced = costModelFlops(p);

  // Kernel by kernel over the step: the `model` ops' costs and the cost
  // model's FLOPs (the work counter's, times the calls). ADD is the one
  // kernel whose calls are not the ops': plan-lower turns the model.add ops
  // that sum a gradient's contributions into accumulation (kernels that add
  // into the gradient's buffer, or ADD kernels of their own).
  int computing = 0;
  std::set<std::string> kernels;
  for (const auto &[kernel, flops] : model)
    kernels.insert(kernel);
  for (const auto &[kernel, seconds] : priced)
    kernels.insert(kernel);
  for (const std::string &kernel : kernels) {
    SCOPED_TRACE(kernel);
    const plan::KernelInfo *info = plan::FindKernel(kernel);
    ASSERT_NE(info, nullptr);
    if (info->kernel == plan::ADD)
      continue;
    // Collectives count no FLOPs; their priced time is the link's.
    if (info->has(plan::kCommunication)) {
      EXPECT_EQ(model[kernel], 0);
      continue;
    }
    if (model[kernel] > 0)
      ++computing;
    EXPECT_EQ(model[kernel], priced[kernel]);
  }
  EXPECT_GE(computing, 10);
}

INSTANTIATE_TEST_SUITE_P(
    Models, FlopAgreement,
    ::testing::Values(
        // RMSNorm, RoPE, causal GQA attention, SwiGLU, dropout.
        Case{"LlamaSerial", "tiny-llama", "hidden_dropout: 0.1", ""},
        // LayerNorm, learned positions, biases, tanh GeLU, a tied head.
        Case{"Gpt2Serial", "tiny-gpt2",
             "hidden_dropout: 0.1 embedding_dropout: 0.1", ""},
        // The vocabulary-parallel loss, head slices, a packed SwiGLU.
        Case{"LlamaTensorParallel", "tiny-llama", "fuse_mlp: true",
             "tp: 2 micro_batch_size: 2"},
        // Sequence parallelism's gathers and scatters, sliced dropout.
        Case{"Gpt2SequenceParallel", "tiny-gpt2", "hidden_dropout: 0.1",
             "tp: 2 sp: true micro_batch_size: 2"},
        // LoRA adapters (model.scale, frozen weights without weight
        // gradients) beside column- and row-parallel bases, with sp.
        Case{"LlamaLoraSequenceParallel", "tiny-llama", "",
             "tp: 2 sp: true micro_batch_size: 2",
             "rank: 4 alpha: 8 target_modules: 'q_proj' target_modules: "
             "'v_proj' target_modules: 'o_proj' target_modules: 'down_proj'"}),
    [](const ::testing::TestParamInfo<Case> &info) {
      return std::string(info.param.name);
    });

/// Inference plans (braidc --mode generate): each kernel's FLOPs over the
/// prefill, decode and reorder functions, the `model` ops' costs against
/// the work counter's. Each op lowers to one instruction (no gradient to
/// accumulate, nothing recomputed), so the sums agree kernel by kernel.
/// At tp 2 the draw takes each rank's candidates (TOP_CANDIDATES) and
/// scoring each rank's partials (TOKEN_LOGPROBS_PARTIAL, _FINISH).
TEST(FlopAgreementInference, ModelOpsCostWhatTheirInstructionsDo) {
  for (int64_t tp : {1, 2}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    spec::JobSpec j = presetJob("tiny-llama", 32, 2);
    j.mutable_parallel()->set_tp(tp);
    j.mutable_generate()->set_max_batch(3);
    j.mutable_generate()->set_max_seq_len(40);
    j.mutable_generate()->set_prefill_chunk(8);
    j.mutable_generate()->set_draw_candidates(16);
    j.mutable_generate()->set_score(true);
    llvm::Expected<ModelConfig> config = resolveModel(j);
    ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
    llvm::Expected<GenerateConfig> g = resolveGenerate(j, *config);
    ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
    llvm::Expected<ParallelConfig> parallel = resolveParallel(j, *config);
    ASSERT_TRUE(bool(parallel)) << llvm::toString(parallel.takeError());
    llvm::Expected<TrainConfig> train = resolveTrain(j);
    ASSERT_TRUE(bool(train)) << llvm::toString(train.takeError());
    // The rank's inference graph in the `model` dialect (sharded).
    // The dialects with their tensor-parallel rules, as braidc has them.
    mlir::DialectRegistry registry;
    registerDialects(registry);
    mlir::MLIRContext context(registry), planContext(registry);
    mlir::OwningOpRef<mlir::ModuleOp> module =
        buildGenerateModule(context, *config, *g);
    CompileOptions options;
    options.compileTo = Phase::Shard;
    options.generate = true;
    options.train = *train;
    options.parallel = *parallel;
    llvm::Error phases = runPhases(*module, options);
    ASSERT_FALSE(bool(phases)) << llvm::toString(std::move(phases));
    PerKernel model = modelFlops(*module);

    llvm::Expected<GeneratePlan> compiled = compileGeneratePlan(planContext, j);
    ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
    const plan::Plan &p = compiled->plan;
    PerKernel work;
    for (const plan::Function &fn : p.functions())
      for (const plan::Instruction &inst : fn.body())
        work[plan::Kernel_Name(inst.kernel())] +=
            plan::InstructionWork(p, inst).flops;
    checkViewAgainstWork(p);

    std::set<std::string> kernels;
    for (const auto &[kernel, flops] : model)
      kernels.insert(kernel);
    for (const auto &[kernel, flops] : work)
      kernels.insert(kernel);
    int computing = 0;
    for (const std::string &kernel : kernels) {
      SCOPED_TRACE(kernel);
      const plan::KernelInfo *info = plan::FindKernel(kernel);
      ASSERT_NE(info, nullptr);
      if (info->has(plan::kCommunication)) {
        EXPECT_EQ(model[kernel], 0);
        continue;
      }
      computing += model[kernel] > 0;
      EXPECT_EQ(model[kernel], work[kernel]);
    }
    // Linear, RMSNorm, SwiGLU, RoPE at positions, cached attention, the
    // draw and beam search's candidates, scoring's log-probabilities (and
    // at tp 2 the ranks' own candidates and scoring's partials and finish).
    EXPECT_GE(computing, tp == 1 ? 9 : 11);
    EXPECT_EQ(model.count("TOP_CANDIDATES") > 0, tp == 2);
    EXPECT_EQ(model["TOKEN_LOGPROBS"] > 0, tp == 1);
    EXPECT_EQ(model["TOKEN_LOGPROBS_PARTIAL"] > 0, tp == 2);
    EXPECT_EQ(model["TOKEN_LOGPROBS_FINISH"] > 0, tp == 2);
  }
}

} // namespace
