//===- AutodiffTest.cpp - model-autodiff against finite differences -------===//
//
// Whole models in f64: the gradients @train_step returns (model-autodiff's
// output, evaluated on the CPU kernels) must match central finite
// differences of its loss, to 1e-6 relative, for elements of every
// parameter.
//
//===----------------------------------------------------------------------===//

#include "ReferenceEvaluator.h"
#include "TestUtil.h"

#include "compiler/Compile.h"
#include "compiler/Registration.h"
#include "dialects/model/ModelDialect.h"
#include "frontends/ModelBuilder.h"
#include "frontends/TrainConfig.h"
#include "runtime/cpu/Optimizer.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <random>

using namespace braid;
using namespace braid::test;

namespace {

void checkGradients(spec::JobSpec job) {
  job.mutable_train()->set_precision(spec::FP64);
  job.mutable_data()->set_seq_length(5);
  job.mutable_parallel()->set_micro_batch_size(2);
  mlir::MLIRContext context;
  ModelConfig modelConfig;
  auto module = compileTo(context, job, Phase::Autodiff, &modelConfig);
  ASSERT_TRUE(module);
  const ModelConfig *config = &modelConfig;
  auto func = module->lookupSymbol<mlir::func::FuncOp>("train_step");
  ASSERT_TRUE(func);

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
    if (param) {
      // Norm weights near 1, everything else small: a well-conditioned net.
      bool norm = param.getValue().contains("norm") ||
                  param.getValue().contains("ln_") ||
                  param.getValue().contains("layernorm");
      bool bias = param.getValue().ends_with(".bias");
      for (double &x : b)
        x = norm && !bias ? 1.0 + 0.2 * uniform(gen) : 0.3 * uniform(gen);
      params.push_back(arg.getArgNumber());
    } else if (input.getValue() == "loss_grad") {
      b[0] = 1.0;
    } else {
      for (double &x : b)
        x = std::floor((uniform(gen) + 1.0) / 2.0 * config->vocabSize * 0.999);
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
