//===- AutodiffTest.cpp - model-autodiff against finite differences -------===//
//
// Whole models in f64, and small graphs of the ops no model family uses
// yet: the gradients @train_step returns (model-autodiff's output,
// evaluated on the CPU kernels) must match central finite differences of
// its loss, to 1e-6 relative, for elements of every parameter.
//
//===----------------------------------------------------------------------===//

#include "ReferenceEvaluator.h"
#include "TestUtil.h"

#include "compiler/Compile.h"
#include "compiler/Registration.h"
#include "dialects/model/ModelDialect.h"
#include "frontends/ModelBuilder.h"
#include "frontends/TrainConfig.h"
#include "passes/model/Passes.h"
#include "runtime/cpu/Optimizer.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include "gtest/gtest.h"

#include <cmath>
#include <functional>
#include <cstdio>
#include <random>

using namespace braid;
using namespace braid::test;

namespace {

/// Compares the gradients `func` (an f64 @train_step) returns with central
/// finite differences of its loss, with token ids below `vocabSize`.
void checkTrainStepGradients(mlir::func::FuncOp func, int64_t vocabSize) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<Buffer> args;
  std::vector<unsigned> params;
  for (mlir::BlockArgument arg : func.getArguments()) {
    int64_t n = model::getNumElements(arg.getType());
    Buffer b(n);
    auto param = func.getArgAttrOfType<mlir::StringAttr>(
        arg.getArgNumber(), model::ModelDialect::kParamAttrName);
    auto input = func.getArgAttrOfType<mlir::StringAttr>(
        arg.getArgNumber(), model::ModelDialect::kInputAttrName);
    bool frozen = bool(func.getArgAttr(arg.getArgNumber(),
                                       model::ModelDialect::kFrozenAttrName));
    if (param) {
      // Norm weights near 1, everything else small: a well-conditioned net.
      bool norm = param.getValue().contains("norm") ||
                  param.getValue().contains("ln_") ||
                  param.getValue().contains("layernorm");
      bool bias = param.getValue().ends_with(".bias");
      for (double &x : b)
        x = norm && !bias ? 1.0 + 0.2 * uniform(gen) : 0.3 * uniform(gen);
      // A frozen parameter gets no gradient (its loss still depends on it).
      if (!frozen)
        params.push_back(arg.getArgNumber());
    } else if (input.getValue() == "loss_grad") {
      b[0] = 1.0;
    } else {
      for (double &x : b)
        x = std::floor((uniform(gen) + 1.0) / 2.0 * vocabSize * 0.999);
      if (input.getValue() == "targets")
        b[1] = -100; // one ignored position
    }
    args.push_back(std::move(b));
  }

  std::string error;
  std::vector<Buffer> results = evaluate(func, args, error);
  ASSERT_EQ(error, "");
  ASSERT_EQ(results.size(), params.size() + 1);
  auto loss = [&]() {
    std::string e;
    return evaluate(func, args, e)[0][0];
  };
  // A cross-entropy: finite and positive.
  EXPECT_TRUE(std::isfinite(results[0][0]) && results[0][0] > 0)
      << results[0][0];

  // 1e-5: truncation error (eps^2 times the third derivative) and round-off
  // (1e-16 |L| / eps) both stay near 1e-10, far below the tolerance.
  const double eps = 1e-5;
  double worst = 0;
  for (auto [i, argIndex] : llvm::enumerate(params)) {
    Buffer &p = args[argIndex];
    const Buffer &grad = results[i + 1];
    ASSERT_EQ(grad.size(), p.size());
    // Six elements spread over the tensor, first and last included.
    for (int k = 0; k < 6; ++k) {
      size_t j = (p.size() - 1) * k / 5;
      double saved = p[j];
      p[j] = saved + eps;
      double up = loss();
      p[j] = saved - eps;
      double down = loss();
      p[j] = saved;
      double numeric = (up - down) / (2 * eps);
      double denom = std::max({std::fabs(numeric), std::fabs(grad[j]), 1e-3});
      double rel = std::fabs(numeric - grad[j]) / denom;
      worst = std::max(worst, rel);
      EXPECT_LT(rel, 1e-6) << "parameter argument " << argIndex << " element "
                           << j << ": autodiff " << grad[j] << ", numeric "
                           << numeric;
    }
  }
  ::testing::Test::RecordProperty("largest_relative_error", std::to_string(worst));
  std::printf("largest relative error: %.3g\n", worst);
}

/// Compiles `job` in f64 (2 sequences of 5 tokens) to the autodiff phase
/// and calls `check` with its @train_step and the model's vocabulary.
void withTrainStep(
    spec::JobSpec job,
    const std::function<void(mlir::func::FuncOp, int64_t)> &check) {
  job.mutable_train()->set_precision(spec::FP64);
  job.mutable_data()->set_seq_length(5);
  job.mutable_parallel()->set_micro_batch_size(2);
  mlir::MLIRContext context;
  ModelConfig modelConfig;
  auto module = compileTo(context, job, Phase::Autodiff, &modelConfig);
  ASSERT_TRUE(module);
  auto func = module->lookupSymbol<mlir::func::FuncOp>("train_step");
  ASSERT_TRUE(func);
  check(func, modelConfig.vocabSize);
}

void checkGradients(spec::JobSpec job) {
  withTrainStep(std::move(job), checkTrainStepGradients);
}

/// `job` with LoRA adapters on `targets` (and `save` trained whole), the
/// rest frozen: the adapters' (nonzero B: the test sets every parameter)
/// and the saved modules' gradients against finite differences, and no
/// gradient for a frozen parameter.
void checkLoraGradients(spec::JobSpec job,
                        std::initializer_list<const char *> targets,
                        std::initializer_list<const char *> save) {
  spec::LoraSpec *lora = job.mutable_lora();
  lora->set_rank(3);
  lora->set_alpha(5);
  for (const char *t : targets)
    lora->add_target_modules(t);
  for (const char *m : save)
    lora->add_modules_to_save(m);
  withTrainStep(std::move(job), [&](mlir::func::FuncOp func, int64_t vocab) {
  // The gradients are the adapters' and the saved modules', by name.
  size_t adapters = 0, frozen = 0, grads = 0;
  for (mlir::BlockArgument arg : func.getArguments()) {
    auto name = func.getArgAttrOfType<mlir::StringAttr>(
        arg.getArgNumber(), model::ModelDialect::kParamAttrName);
    if (!name)
      continue;
    bool isFrozen = bool(func.getArgAttr(arg.getArgNumber(),
                                         model::ModelDialect::kFrozenAttrName));
    bool adapter = name.getValue().contains(".lora_");
    adapters += adapter;
    frozen += isFrozen;
    EXPECT_EQ(isFrozen, !adapter && llvm::none_of(save, [&](const char *m) {
                          return name.getValue().contains(m);
                        }))
        << name.getValue().str();
  }
  for (unsigned i = 1; i < func.getNumResults(); ++i) {
    auto grad = func.getResultAttrOfType<mlir::StringAttr>(
        i, model::ModelDialect::kGradAttrName);
    ASSERT_TRUE(grad);
    grads += 1;
  }
  EXPECT_GT(adapters, 0u);
  EXPECT_GT(frozen, 0u);
  EXPECT_EQ(grads, func.getNumArguments() - frozen -
                       /*tokens, targets, loss_grad*/ 3);
  // No weight gradient of a frozen linear: one per adapter matrix and per
  // saved linear weight.
  size_t weightGrads = 0;
  func.walk([&](model::LinearGradWeightOp) { ++weightGrads; });
  EXPECT_LE(weightGrads, grads);
  checkTrainStepGradients(func, vocab);
  });
}

TEST(Autodiff, LoraOnTinyLlamaMatchesFiniteDifferences) {
  checkLoraGradients(presetJob("tiny-llama"),
                     {"q_proj", "v_proj", "o_proj", "down_proj"}, {"lm_head"});
}

TEST(Autodiff, LoraOnTinyGpt2MatchesFiniteDifferences) {
  // Conv1D bases ([in, out]) with nn.Linear adapters; the fused c_attn.
  checkLoraGradients(presetJob("tiny-gpt2"), {"c_attn", "c_proj", "c_fc"},
                     {});
}

TEST(Autodiff, TinyLlamaMatchesFiniteDifferences) {
  checkGradients(presetJob("tiny-llama"));
}

TEST(Autodiff, TinyGpt2MatchesFiniteDifferences) {
  checkGradients(presetJob("tiny-gpt2"));
}

TEST(Autodiff, BloomStyleMatchesFiniteDifferences) {
  // ALiBi, per-head fused QKV, embedding LayerNorm, tied output.
  spec::JobSpec job;
  spec::ModelSpec *m = job.mutable_model();
  m->set_family(spec::BLOOM);
  m->set_num_layers(2);
  m->set_hidden_size(32);
  m->set_num_heads(4);
  m->set_vocab_size(96);
  checkGradients(job);
}

TEST(Autodiff, BaichuanStyleMatchesFiniteDifferences) {
  // W_pack (grouped fused QKV, nn.Linear layout) with ALiBi and SwiGLU.
  spec::JobSpec job;
  spec::ModelSpec *m = job.mutable_model();
  m->set_family(spec::BAICHUAN);
  m->set_num_layers(2);
  m->set_hidden_size(32);
  m->set_num_heads(4);
  m->set_ffn_hidden_size(48);
  m->set_vocab_size(96);
  m->set_position_embedding(spec::ALIBI);
  checkGradients(job);
}

TEST(Autodiff, ScaleMatchesFiniteDifferences) {
  // A LoRA-style branch beside the residual stream, in f64:
  // r = h + up(scale(down(h), 1.5)), h a lookup of the tied table.
  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  mlir::OpBuilder b(&context);
  mlir::Location loc = b.getUnknownLoc();
  mlir::Type f64 = b.getF64Type(), i32 = b.getI32Type();
  auto tensor = [](llvm::ArrayRef<int64_t> shape, mlir::Type element) {
    return mlir::RankedTensorType::get(shape, element);
  };
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  auto forward = mlir::func::FuncOp::create(
      loc, "forward",
      b.getFunctionType({tensor({8, 4}, f64), tensor({2, 4}, f64),
                         tensor({4, 2}, f64), tensor({2, 5}, i32),
                         tensor({2, 5}, i32)},
                        {tensor({}, f64)}));
  module->push_back(forward);
  const char *params[] = {"wte", "down", "up"};
  for (auto [i, name] : llvm::enumerate(params))
    forward.setArgAttr(i, model::ModelDialect::kParamAttrName,
                       b.getStringAttr(name));
  forward.setArgAttr(3, model::ModelDialect::kInputAttrName,
                     b.getStringAttr("tokens"));
  forward.setArgAttr(4, model::ModelDialect::kInputAttrName,
                     b.getStringAttr("targets"));
  mlir::Block *entry = forward.addEntryBlock();
  b.setInsertionPointToStart(entry);
  mlir::Value wte = entry->getArgument(0), down = entry->getArgument(1),
              up = entry->getArgument(2), tokens = entry->getArgument(3),
              targets = entry->getArgument(4);
  mlir::Value h = b.create<model::EmbeddingOp>(loc, wte, tokens);
  mlir::Value a = b.create<model::LinearOp>(loc, h, down, mlir::Value(),
                                            /*transposeW=*/true);
  mlir::Value scaled = b.create<model::ScaleOp>(loc, a, 1.5);
  mlir::Value u = b.create<model::LinearOp>(loc, scaled, up, mlir::Value(),
                                            /*transposeW=*/true);
  mlir::Value r = b.create<model::AddOp>(loc, h, u);
  mlir::Value logits = b.create<model::LinearOp>(loc, r, wte, mlir::Value(),
                                                 /*transposeW=*/true);
  auto loss = b.create<model::CrossEntropyOp>(loc, logits, targets, -100);
  b.create<mlir::func::ReturnOp>(loc, loss.getLoss());
  ASSERT_TRUE(mlir::succeeded(mlir::verify(*module)));

  mlir::PassManager pm(&context);
  pm.addPass(model::createModelAutodiff());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  auto func = module->lookupSymbol<mlir::func::FuncOp>("train_step");
  ASSERT_TRUE(func);
  int scales = 0;
  func.walk([&](model::ScaleOp) { ++scales; });
  EXPECT_EQ(scales, 2); // the forward's, and its gradient's
  checkTrainStepGradients(func, 8);
}

TEST(Autodiff, AttentionDropoutIsRefused) {
  spec::JobSpec job = presetJob("tiny-gpt2");
  job.mutable_model()->set_attention_dropout(0.1);
  mlir::MLIRContext context;
  mlir::DialectRegistry registry;
  registerDialects(registry);
  context.appendDialectRegistry(registry);
  llvm::Expected<ModelConfig> config = resolveModel(job);
  ASSERT_TRUE(bool(config));
  auto module = buildForwardModule(context, *config);
  CompileOptions options;
  options.compileTo = Phase::Autodiff;
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str();
    return mlir::success();
  });
  llvm::Error error = runPhases(*module, options);
  EXPECT_TRUE(bool(error));
  llvm::consumeError(std::move(error));
  EXPECT_NE(diagnostics.find("attention dropout"), std::string::npos)
      << diagnostics;
}

} // namespace

namespace {

// The optimizer phase appends clipping and AdamW: evaluated, its new
// parameters must equal AdamW applied by hand (runtime/cpu/Optimizer.h) to
// the gradients of the autodiff phase, with the clipping scale computed from
// their global norm.
TEST(Optimizer, UpdatesEqualAdamWOnTheAutodiffGradients) {
  spec::JobSpec job = presetJob("tiny-llama", 5, 2);
  job.mutable_train()->set_precision(spec::FP64);
  job.mutable_train()->set_clip_grad(0.5); // small enough to clip
  mlir::MLIRContext context;
  ModelConfig modelConfig;
  TrainConfig trainConfig;
  auto gradsModule = compileTo(context, job, Phase::Autodiff);
  auto stepModule =
      compileTo(context, job, Phase::Optimizer, &modelConfig, &trainConfig);
  ASSERT_TRUE(gradsModule && stepModule);
  const ModelConfig *config = &modelConfig;
  const TrainConfig *train = &trainConfig;
  auto gradsFn = gradsModule->lookupSymbol<mlir::func::FuncOp>("train_step");
  auto stepFn = stepModule->lookupSymbol<mlir::func::FuncOp>("train_step");

  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  std::vector<Buffer> args;
  size_t numParams = 0;
  for (mlir::BlockArgument arg : gradsFn.getArguments()) {
    Buffer b(model::getNumElements(arg.getType()));
    auto input = gradsFn.getArgAttrOfType<mlir::StringAttr>(
        arg.getArgNumber(), model::ModelDialect::kInputAttrName);
    if (!input) {
      for (double &x : b)
        x = u(gen);
      ++numParams;
    } else if (input.getValue() == "loss_grad") {
      b[0] = 1.0;
    } else {
      for (size_t i = 0; i < b.size(); ++i)
        b[i] = double((i * 37 + 11) % config->vocabSize);
    }
    args.push_back(std::move(b));
  }
  std::string error;
  std::vector<Buffer> grads = evaluate(gradsFn, args, error);
  ASSERT_EQ(error, "");

  // The step's extra arguments: zero moments, lr, step 1.
  std::vector<Buffer> stepArgs = args;
  for (size_t i = 0; i < 2 * numParams; ++i)
    stepArgs.push_back(Buffer(args[i % numParams].size(), 0.0));
  const double lr = 1e-3;
  stepArgs.push_back({lr});
  stepArgs.push_back({1.0});
  std::vector<Buffer> results = evaluate(stepFn, stepArgs, error);
  ASSERT_EQ(error, "");
  ASSERT_EQ(results.size(), 2 + 3 * numParams);
  EXPECT_EQ(results[0], grads[0]); // the same loss

  std::vector<cpu::GradView<double>> views;
  for (size_t i = 0; i < numParams; ++i)
    views.push_back({grads[i + 1].data(), int64_t(grads[i + 1].size())});
  double norm = *cpu::globalGradNorm<double>(views);
  EXPECT_DOUBLE_EQ(results[1][0], norm);
  cpu::GradClip clip = *cpu::computeGradClip(norm, 0.5);
  ASSERT_TRUE(clip.clipped) << "the test wants clipping to happen";
  for (size_t i = 0; i < numParams; ++i) {
    Buffer p = args[i], m(p.size(), 0.0), v(p.size(), 0.0);
    cpu::AdamWConfig c;
    c.beta1 = train->adamBeta1;
    c.beta2 = train->adamBeta2;
    c.eps = train->adamEps;
    // Rank-1 tensors (norm weights) are not decayed.
    auto type = mlir::cast<mlir::RankedTensorType>(
        gradsFn.getArgument(i).getType());
    c.weightDecay = type.getRank() >= 2 ? train->weightDecay : 0.0;
    ASSERT_TRUE(cpu::adamwStep<double>(p.data(), grads[i + 1].data(), m.data(),
                                       v.data(), p.size(), c, lr, 1, clip.scale)
                    .ok());
    EXPECT_EQ(results[2 + i], p) << "parameter " << i;
    EXPECT_EQ(results[2 + numParams + i], m) << "exp_avg " << i;
    EXPECT_EQ(results[2 + 2 * numParams + i], v) << "exp_avg_sq " << i;
  }
}

} // namespace
