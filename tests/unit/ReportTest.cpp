//===- ReportTest.cpp - FLOPs and report contents from the IR -------------===//
//
// The FLOPs the report derives from the ops' costs must equal the closed form
// of docs/report.md: a causal query i sees keys [0, i], s (s + 1) / 2 scores
// per sequence and head, so forward matmul FLOPs = 2 T N_mm + 2 b s (s + 1)
// h_attn L and training FLOPs per token = 6 N_mm + 6 L (s + 1) h_attn.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "compiler/Report.h"

#include "gtest/gtest.h"

using namespace braid;
using namespace braid::test;

namespace {

struct Expected {
  int64_t matmulWeights; // N_mm: every weight that takes part in a matmul
  int64_t layers, hAttn;
};

void checkFlops(const spec::JobSpec &job, const Expected &e) {
  mlir::MLIRContext context;
  ModelConfig config;
  auto module = compileModel(context, job, &config);
  ASSERT_TRUE(module);
  FlopCount flops = countFlops(*module);
  const int64_t b = config.microBatchSize, s = config.seqLength;
  const int64_t tokens = b * s;
  EXPECT_EQ(flops.tokens, tokens);
  EXPECT_EQ(flops.forwardMatmul, 2 * tokens * e.matmulWeights +
                                     2 * b * s * (s + 1) * e.hAttn * e.layers);
  EXPECT_EQ(flops.attentionMatmul, 2 * b * s * (s + 1) * e.hAttn * e.layers);
  EXPECT_DOUBLE_EQ(flops.trainingPerToken(),
                   6.0 * e.matmulWeights + 6.0 * e.layers * (s + 1) * e.hAttn);
  EXPECT_GT(flops.forwardVector, 0);
}

TEST(Flops, Llama2_7bClosedForm) {
  const int64_t h = 4096, ffn = 11008, v = 32000, L = 32;
  checkFlops(presetJob("llama2-7b", 4096),
             {L * (4 * h * h + 3 * h * ffn) + v * h, L, h});
}

TEST(Flops, Llama2_70bGroupedQueryClosedForm) {
  const int64_t h = 8192, kv = 1024, ffn = 28672, v = 32000, L = 80;
  checkFlops(presetJob("llama2-70b", 256, 2),
             {L * (2 * h * h + 2 * h * kv + 3 * h * ffn) + v * h, L, h});
}

TEST(Flops, Gpt2TiedHeadStillCountsItsMatmul) {
  const int64_t h = 768, v = 50257, L = 12;
  // c_attn h x 3h, c_proj h x h, c_fc h x 4h, mlp c_proj 4h x h; the tied
  // output layer multiplies by the v x h embedding.
  checkFlops(presetJob("gpt2-124m", 1024, 4),
             {L * (3 * h * h + h * h + 8 * h * h) + v * h, L, h});
}

TEST(Report, StatesParametersFlopsAndArchitecture) {
  mlir::MLIRContext context;
  ModelConfig config;
  auto module = compileModel(context, presetJob("tiny-gpt2", 32, 2), &config);
  ASSERT_TRUE(module);
  llvm::json::Value report = buildReport(*module, config);
  const llvm::json::Object *root = report.getAsObject();
  ASSERT_TRUE(root);
  const llvm::json::Object *params = root->getObject("parameters");
  ASSERT_TRUE(params);
  // tiny-gpt2: h 64, 2 layers, ffn 256, vocab 512, 128 positions, tied.
  const int64_t h = 64, f = 256, v = 512, p = 128;
  const int64_t layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) +
                        (h * f + f) + (f * h + h);
  EXPECT_EQ(params->getInteger("total"), v * h + p * h + 2 * layer + 2 * h);
  EXPECT_EQ(params->getInteger("embedding"), v * h + p * h);
  const llvm::json::Array *perLayer = params->getArray("per_layer");
  ASSERT_TRUE(perLayer);
  ASSERT_EQ(perLayer->size(), 2u);
  EXPECT_EQ((*perLayer)[0].getAsInteger(), layer);
  const llvm::json::Object *model = root->getObject("model");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->getString("family"), "gpt2");
  EXPECT_EQ(model->getString("position_embedding"), "learned");
  EXPECT_EQ(model->getBoolean("tie_embeddings"), true);
  const llvm::json::Object *flops = root->getObject("flops");
  ASSERT_TRUE(flops);
  EXPECT_TRUE(flops->getNumber("training_per_token").has_value());
}

} // namespace
