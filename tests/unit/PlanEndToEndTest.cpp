//===- PlanEndToEndTest.cpp - Compiled plans run on the executor ----------===//
//
// The whole path: braidc's phases down to a plan file, loaded and validated
// as braid-run loads it, run by the executor in its arena. One training step
// (forward, backward, clipping, AdamW) must give what the reference
// evaluator gives on the optimizer phase's IR: the same loss, gradient norm,
// parameters and moments, to round-off (both run the same kernels, but the
// plan reuses memory, so a wrong offset would show).
//
//===----------------------------------------------------------------------===//

#include "ReferenceEvaluator.h"
#include "TestUtil.h"

#include "compiler/Compile.h"
#include "compiler/PlanExport.h"
#include "compiler/Registration.h"
#include "dialects/model/ModelDialect.h"
#include "frontends/ModelBuilder.h"
#include "frontends/TrainConfig.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/PlanLoader.h"

#include "gtest/gtest.h"

#include <map>
#include <random>

using namespace braid;
using namespace braid::test;

namespace {

void checkPlanMatchesIR(spec::JobSpec job) {
  job.mutable_train()->set_precision(spec::FP64);
  job.mutable_data()->set_seq_length(6);
  job.mutable_parallel()->set_micro_batch_size(2);
  job.mutable_train()->set_clip_grad(0.5);
  mlir::MLIRContext context;
  ModelConfig modelConfig;
  auto irModule = compileTo(context, job, Phase::Optimizer, &modelConfig);
  auto planModule = compileTo(context, job, Phase::Plan);
  ASSERT_TRUE(irModule && planModule);
  const ModelConfig *config = &modelConfig;
  auto func = irModule->lookupSymbol<mlir::func::FuncOp>("train_step");
  ASSERT_TRUE(func);

  llvm::Expected<plan::Plan> exported = exportPlan(*planModule);
  ASSERT_TRUE(bool(exported)) << llvm::toString(exported.takeError());
  absl::StatusOr<plan::Plan> loaded =
      plan::ParsePlanFile(plan::SerializePlanFile(*exported), "test.plan");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto executor = exec::Executor::Create(*loaded);
  ASSERT_TRUE(executor.ok()) << executor.status();
  exec::Executor &e = **executor;

  // The same inputs for both: named as the plan names its buffers.
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  std::vector<Buffer> args;
  for (mlir::BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    Buffer b(model::getNumElements(arg.getType()));
    std::string name;
    if (auto p = func.getArgAttrOfType<mlir::StringAttr>(i, model::ModelDialect::kParamAttrName)) {
      name = p.getValue().str();
      for (double &x : b)
        x = u(gen);
    } else if (auto s = func.getArgAttrOfType<mlir::StringAttr>(i, model::ModelDialect::kOptStateAttrName)) {
      name = s.getValue().str();
      for (double &x : b)
        x = std::abs(u(gen)) * 1e-3; // moments of an earlier step
    } else {
      name = func.getArgAttrOfType<mlir::StringAttr>(i, model::ModelDialect::kInputAttrName)
                 .getValue()
                 .str();
      if (name == "loss_grad")
        b[0] = 1.0;
      else if (name == "lr")
        b[0] = 1e-3;
      else if (name == "step")
        b[0] = 3;
      else
        for (size_t k = 0; k < b.size(); ++k)
          b[k] = double((k * 31 + (name == "targets" ? 7 : 3)) % config->vocabSize);
    }
    int id = e.FindBuffer(name);
    ASSERT_GE(id, 0) << "the plan has no buffer " << name;
    ASSERT_TRUE(e.Write(id, b).ok()) << name;
    args.push_back(std::move(b));
  }

  std::string error;
  std::vector<Buffer> expected = evaluate(func, args, error);
  ASSERT_EQ(error, "");
  // zero_grads, micro_step (one micro-batch, inputs written above), update.
  absl::StatusOr<double> ran =
      exec::RunStep(e, 0, 0, [](int64_t) { return absl::OkStatus(); });
  ASSERT_TRUE(ran.ok()) << ran.status();

  auto near = [](const Buffer &a, const Buffer &b, const std::string &what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-12 * std::max(1.0, std::fabs(b[i])))
          << what << " element " << i;
  };
  near(*e.Read(e.FindBuffer("loss")), expected[0], "loss");
  near(*e.Read(e.FindBuffer("grad_norm")), expected[1], "grad_norm");
  for (unsigned r = 2; r < expected.size(); ++r) {
    mlir::StringAttr name = func.getResultAttrOfType<mlir::StringAttr>(
        r, model::ModelDialect::kParamAttrName);
    if (!name)
      name = func.getResultAttrOfType<mlir::StringAttr>(
          r, model::ModelDialect::kOptStateAttrName);
    ASSERT_TRUE(name);
    near(*e.Read(e.FindBuffer(name.getValue().str())), expected[r],
         name.getValue().str());
  }

  // Memory is reused: the arena is smaller than all buffers side by side.
  int64_t total = 0;
  for (const plan::Buffer &b : loaded->buffers()) {
    int64_t n = plan::DTypeBytes(b.dtype());
    for (int64_t d : b.shape())
      n *= d;
    total += n;
  }
  EXPECT_LT(loaded->arena_bytes(), total);
  ::testing::Test::RecordProperty("arena_bytes", std::to_string(loaded->arena_bytes()));
  std::printf("arena %lld bytes for %lld bytes of buffers\n",
              (long long)loaded->arena_bytes(), (long long)total);
}

TEST(PlanEndToEnd, TinyLlamaStepMatchesTheIR) {
  checkPlanMatchesIR(presetJob("tiny-llama"));
}

TEST(PlanEndToEnd, TinyGpt2StepMatchesTheIR) {
  checkPlanMatchesIR(presetJob("tiny-gpt2"));
}

/// The state after one optimizer step of `job`'s plan from fixed parameters,
/// moments and samples: the loss, the gradient norm, then every parameter
/// and moment (by buffer name). `lossScale`: the backend's loss scale
/// (Backend::SetLossScale), which RunStep seeds the backward with.
std::map<std::string, Buffer> stepOnce(spec::JobSpec job, int64_t samples,
                                       double lossScale = 1.0) {
  mlir::MLIRContext context;
  ModelConfig config;
  TrainConfig train;
  ParallelConfig parallel;
  auto module = compileTo(context, job, Phase::Plan, &config, &train, &parallel);
  if (!module)
    return {};
  llvm::Expected<plan::Plan> plan = exportPlan(*module);
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  if (!plan)
    return {};
  plan->mutable_training()->MergeFrom(
      trainingSettings(config, train, parallel, job.data()));
  auto executor = exec::Executor::Create(*plan);
  EXPECT_TRUE(executor.ok()) << executor.status();
  exec::Executor &e = **executor;
  std::map<std::string, Buffer> state;
  for (int id = 0; id < plan->buffers_size(); ++id) {
    const plan::Buffer &b = plan->buffers(id);
    if (b.role() != plan::PARAMETER && b.role() != plan::OPTIMIZER_STATE)
      continue;
    // The same values whatever the plan: seeded by the name.
    std::mt19937 gen(std::hash<std::string>()(b.name()) & 0xffffffff);
    std::uniform_real_distribution<double> u(-0.3, 0.3);
    Buffer v(e.Read(id)->size());
    for (double &x : v)
      x = b.role() == plan::PARAMETER ? u(gen) : std::abs(u(gen)) * 1e-3;
    EXPECT_TRUE(e.Write(id, v).ok());
  }
  EXPECT_TRUE(e.Write(e.FindBuffer("lr"), {1e-3}).ok());
  EXPECT_TRUE(e.Write(e.FindBuffer("step"), {3}).ok());
  int64_t batch = config.microBatchSize, seq = config.seqLength;
  EXPECT_EQ(batch * parallel.microBatches, samples);
  auto feed = [&](int64_t micro) -> absl::Status {
    Buffer tokens(batch * seq), targets(batch * seq);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < seq; ++i) {
        int64_t sample = micro * batch + b, k = sample * seq + i;
        tokens[b * seq + i] = double((k * 31 + 3) % config.vocabSize);
        targets[b * seq + i] = double((k * 17 + 7 * sample) % config.vocabSize);
      }
    if (absl::Status s = e.Write(e.FindBuffer("tokens"), tokens); !s.ok())
      return s;
    return e.Write(e.FindBuffer("targets"), targets);
  };
  e.SetLossScale(lossScale);
  absl::StatusOr<double> loss = exec::RunStep(e, 99, 3, feed);
  EXPECT_TRUE(loss.ok()) << loss.status();
  if (!loss.ok())
    return {};
  state["(loss)"] = {*loss};
  state["(grad_norm)"] = *e.Read(e.FindBuffer("grad_norm"));
  for (int id = 0; id < plan->buffers_size(); ++id) {
    const plan::Buffer &b = plan->buffers(id);
    if (b.role() == plan::PARAMETER || b.role() == plan::OPTIMIZER_STATE)
      state[b.name()] = *e.Read(id);
  }
  return state;
}

/// Gradient accumulation: four micro-batches of one sample make the same
/// step as one micro-batch of four: the same mean loss, gradient norm and
/// updated state, in f64 to round-off. With dropout on, the masks must also
/// be those of the whole batch.
void checkAccumulationMatchesOneBatch(spec::JobSpec job) {
  job.mutable_train()->set_precision(spec::FP64);
  job.mutable_data()->set_seq_length(6);
  job.mutable_train()->set_clip_grad(0.05); // clipping reads the summed grads
  spec::JobSpec whole = job, accumulated = job;
  whole.mutable_parallel()->set_micro_batch_size(4);
  accumulated.mutable_parallel()->set_micro_batch_size(1);
  accumulated.mutable_parallel()->set_global_batch_size(4);
  std::map<std::string, Buffer> a = stepOnce(whole, 4),
                                b = stepOnce(accumulated, 4);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (const auto &[name, expected] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Buffer &got = b.at(name);
    ASSERT_EQ(got.size(), expected.size()) << name;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], expected[i], 1e-12 * std::max(1.0, std::fabs(expected[i])))
          << name << " element " << i;
  }
  // Clipping was active, so it acted on the accumulated gradients.
  EXPECT_GT(a.at("(grad_norm)")[0], 0.05);
}

TEST(PlanEndToEnd, AccumulationMatchesOneBatchTinyLlama) {
  checkAccumulationMatchesOneBatch(presetJob("tiny-llama"));
}

TEST(PlanEndToEnd, AccumulationMatchesOneBatchTinyGpt2WithDropout) {
  // GPT-2 ties the embedding and the output layer: its gradient has two
  // contributions, both accumulated into one buffer.
  spec::JobSpec job = presetJob("tiny-gpt2");
  job.mutable_model()->set_hidden_dropout(0.2);
  job.mutable_model()->set_embedding_dropout(0.1);
  checkAccumulationMatchesOneBatch(job);
}

/// A global batch that whole micro-batches cannot make is refused.
TEST(PlanEndToEnd, LossScaleIsDividedOut) {
  // fp16's loss scaling on the executor: the backward seeded with 1024 times
  // the loss gradient, the update dividing it out (GRAD_NORM's norm and clip
  // scale). A power of two scales every product and sum exactly, so the
  // step is the unscaled one to the bit, clipping included.
  spec::JobSpec job = presetJob("tiny-llama");
  job.mutable_train()->set_precision(spec::FP64);
  job.mutable_data()->set_seq_length(6);
  job.mutable_train()->set_clip_grad(0.05);
  job.mutable_parallel()->set_micro_batch_size(2);
  job.mutable_parallel()->set_global_batch_size(4);
  std::map<std::string, Buffer> plain = stepOnce(job, 4),
                                scaled = stepOnce(job, 4, 1024.0);
  ASSERT_FALSE(plain.empty());
  ASSERT_EQ(plain.size(), scaled.size());
  for (const auto &[name, expected] : plain)
    EXPECT_EQ(scaled.at(name), expected) << name;
  EXPECT_GT(plain.at("(grad_norm)")[0], 0.05); // clipping acted
}

TEST(PlanEndToEnd, GlobalBatchMustDivide) {
  spec::JobSpec job = presetJob("tiny-llama");
  job.mutable_parallel()->set_micro_batch_size(3);
  job.mutable_parallel()->set_global_batch_size(8);
  mlir::MLIRContext context;
  llvm::Expected<ModelConfig> config = resolveModel(job);
  ASSERT_TRUE(bool(config));
  llvm::Expected<ParallelConfig> parallel = resolveParallel(job, *config);
  ASSERT_FALSE(bool(parallel));
  EXPECT_EQ(llvm::toString(parallel.takeError()),
            "parallel.global_batch_size = 8 must be a multiple of "
            "micro_batch_size x dp = 3 x 1 = 3");
}

} // namespace

#include "frontends/HFConfig.h"
#include "runtime/ckpt/Safetensors.h"
#include "runtime/data/IndexedDataset.h"

#include <cstdio>
#include <fstream>

namespace {

// --init-from: a Hugging Face directory written for tiny-llama's plan starts
// the run from its weights (so the first loss no longer depends on the seed),
// and a checkpoint that lacks a tensor is refused naming it.
TEST(PlanEndToEnd, InitFromHuggingFaceCheckpoint) {
  spec::JobSpec job = presetJob("tiny-llama", 8, 2);
  // Samples in file order: the seed then only decides the initial weights.
  job.mutable_data()->set_data_order("sequential");
  mlir::MLIRContext context;
  ModelConfig config;
  TrainConfig train;
  ParallelConfig parallel;
  auto module =
      compileTo(context, job, Phase::Plan, &config, &train, &parallel);
  ASSERT_TRUE(module);
  llvm::Expected<plan::Plan> plan = exportPlan(*module);
  ASSERT_TRUE(bool(plan));
  plan->mutable_training()->MergeFrom(
      trainingSettings(config, train, parallel, job.data()));

  std::string dir = ::testing::TempDir() + "/braid-init-from";
  std::string mkdir = "mkdir -p " + dir;
  ASSERT_EQ(std::system(mkdir.c_str()), 0);
  // A dataset of a repeating byte pattern.
  {
    auto writer = data::IndexedDatasetWriter::Create(dir + "/d", data::DType::kUInt16);
    ASSERT_TRUE(writer.ok());
    std::vector<int64_t> tokens(4000);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = int64_t(i % 97);
    ASSERT_TRUE(writer->AddSequence(tokens).ok());
    ASSERT_TRUE(writer->EndDocument().ok());
    ASSERT_TRUE(writer->Finish().ok());
  }
  // A checkpoint with every parameter of the plan, values 0.01·sin(i).
  std::vector<std::vector<float>> storage;
  std::vector<ckpt::TensorToWrite> tensors;
  std::vector<std::string> names;
  for (const plan::Buffer &b : plan->buffers())
    if (b.role() == plan::PARAMETER) {
      int64_t n = 1;
      for (int64_t d : b.shape())
        n *= d;
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i)
        v[i] = 0.01f * std::sin(float(i)) + (b.shape_size() == 1 ? 1.0f : 0.0f);
      storage.push_back(std::move(v));
      names.push_back(b.name());
      tensors.push_back({b.name(), ckpt::Dtype::kF32,
                         {b.shape().begin(), b.shape().end()},
                         absl::Span<const uint8_t>(
                             reinterpret_cast<const uint8_t *>(storage.back().data()),
                             storage.back().size() * sizeof(float))});
    }
  // Spans must point at the final storage (vector growth moved it).
  for (size_t k = 0; k < tensors.size(); ++k)
    tensors[k].data = absl::Span<const uint8_t>(
        reinterpret_cast<const uint8_t *>(storage[k].data()),
        storage[k].size() * sizeof(float));
  ASSERT_TRUE(ckpt::WriteSafetensors(dir + "/model.safetensors", tensors, {}).ok());
  // Its config.json: the model's own (as braid-ckpt export writes it), which
  // the trainer compares with the plan's model.
  llvm::Expected<std::string> configJson = exportHFConfig(config);
  ASSERT_TRUE(bool(configJson)) << llvm::toString(configJson.takeError());
  std::ofstream(dir + "/config.json") << *configJson;

  auto firstLoss = [&](uint64_t seed, const std::string &initFrom,
                       absl::Status *status) {
    exec::TrainerOptions o;
    o.dataPrefix = dir + "/d";
    o.steps = 1;
    o.seed = seed;
    o.initFrom = initFrom;
    std::vector<exec::StepRecord> records;
    *status = exec::Train(*plan, o, &records);
    return records.empty() ? -1.0 : records[0].loss;
  };
  absl::Status s;
  double a = firstLoss(1, dir, &s);
  ASSERT_TRUE(s.ok()) << s;
  double b = firstLoss(2, dir, &s);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(a, b); // the weights come from the checkpoint, not the seed
  double c = firstLoss(1, "", &s);
  ASSERT_TRUE(s.ok()) << s;
  double d = firstLoss(2, "", &s);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_NE(c, d); // seeded init differs by seed
  EXPECT_NE(a, c);

  // Without one tensor, the load is refused and names it.
  tensors.pop_back();
  ASSERT_TRUE(ckpt::WriteSafetensors(dir + "/model.safetensors", tensors, {}).ok());
  firstLoss(1, dir, &s);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(names.back()), absl::string_view::npos) << s;
}

} // namespace
