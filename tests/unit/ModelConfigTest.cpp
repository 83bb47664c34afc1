//===- ModelConfigTest.cpp - Presets, config.json import, validation ------===//
//
// Parameter counts are read off the compiled IR (the @forward arguments) and
// compared with the counts the models' authors published.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "compiler/Report.h"
#include "frontends/HFConfig.h"
#include "frontends/Presets.h"
#include "frontends/Spec.h"

#include "gtest/gtest.h"

#include <algorithm>

using namespace braid;
using namespace braid::test;

namespace {

int64_t compiledParams(const spec::JobSpec &job) {
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module = compileModel(context, job);
  return module ? countParameters(*module).total : -1;
}

spec::JobSpec hfJob(const std::string &file) {
  spec::JobSpec job;
  job.mutable_model()->set_hf_config(inputPath("hf/" + file));
  job.mutable_data()->set_seq_length(64);
  return job;
}

::testing::AssertionResult errorContains(const std::string &error,
                                         const std::string &needle) {
  if (error.empty())
    return ::testing::AssertionFailure() << "expected an error, got none";
  if (error.find(needle) == std::string::npos)
    return ::testing::AssertionFailure()
           << "error \"" << error << "\" lacks \"" << needle << "\"";
  return ::testing::AssertionSuccess();
}

TEST(Presets, EveryListedModelExists) {
  std::vector<std::string> names = presetNames();
  for (const char *name :
       {"gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1558m", "llama-7b",
        "llama-13b", "llama-33b", "llama-65b", "llama2-7b", "llama2-13b",
        "llama2-34b", "llama2-70b", "bloom-7b1", "bloom-176b", "baichuan-7b",
        "baichuan-13b", "baichuan2-7b", "baichuan2-13b", "internlm-7b",
        "internlm-65b", "aquila-7b", "tiny-gpt2", "tiny-llama"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    EXPECT_EQ(resolveError(presetJob(name)), "") << name;
  }
}

// The published parameter counts (the model cards and papers), unpadded vocab.
TEST(ParameterCount, MatchesPublishedCounts) {
  EXPECT_EQ(compiledParams(presetJob("gpt2-124m")), 124439808);
  EXPECT_EQ(compiledParams(presetJob("llama2-7b")), 6738415616);
  EXPECT_EQ(compiledParams(presetJob("llama2-13b")), 13015864320);
  EXPECT_EQ(compiledParams(presetJob("llama2-70b")), 68976648192);
  EXPECT_EQ(compiledParams(presetJob("bloom-7b1")), 7069016064);
}

TEST(ParameterCount, HFConfigsGiveTheSameModelsAsThePresets) {
  EXPECT_EQ(compiledParams(hfJob("gpt2.json")), 124439808);
  EXPECT_EQ(compiledParams(hfJob("llama2-7b.json")), 6738415616);
  EXPECT_EQ(compiledParams(hfJob("llama2-70b.json")), 68976648192);
  EXPECT_EQ(compiledParams(hfJob("bloom-7b1.json")), 7069016064);
  // Baichuan-13B and InternLM-7B as released: 13.26B and 7.32B.
  EXPECT_EQ(compiledParams(hfJob("baichuan-13b.json")), 13264901120);
  EXPECT_EQ(compiledParams(hfJob("internlm-7b.json")), 7321948160);
}

TEST(ParameterCount, PerLayerIsTheClosedForm) {
  mlir::MLIRContext context;
  auto module = compileModel(context, presetJob("llama2-70b", 64));
  ASSERT_TRUE(module);
  ParameterCount count = countParameters(*module);
  const int64_t h = 8192, kv = 8 * 128, ffn = 28672, v = 32000;
  // q and o: h x h; k and v: h x kv; gate, up, down: h x ffn; two norms.
  const int64_t layer = 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h;
  ASSERT_EQ(count.perLayer.size(), 80u);
  for (int64_t n : count.perLayer)
    EXPECT_EQ(n, layer);
  EXPECT_EQ(count.embedding, v * h);
  EXPECT_EQ(count.outsideLayers, 2 * v * h + h); // embedding, lm_head, norm
}

TEST(ParameterCount, VocabPaddingAddsRows) {
  spec::JobSpec job = presetJob("gpt2-124m");
  job.mutable_model()->set_make_vocab_size_divisible_by(128);
  // 50257 -> 50304 rows of the tied embedding: 47 extra rows of 768.
  EXPECT_EQ(compiledParams(job), 124439808 + 47 * 768);
}

TEST(ModelSpec, InlineFieldsOverrideThePreset) {
  spec::JobSpec job = presetJob("llama2-7b", 64);
  job.mutable_model()->set_num_layers(2);
  const int64_t h = 4096, ffn = 11008, v = 32000;
  EXPECT_EQ(compiledParams(job), 2 * (4 * h * h + 3 * h * ffn + 2 * h) +
                                     2 * v * h + h);
}

TEST(ModelSpec, FamilyDefaults) {
  llvm::Expected<ModelConfig> gpt = resolveModel(presetJob("gpt2-124m"));
  ASSERT_TRUE(bool(gpt));
  EXPECT_EQ(gpt->norm, spec::LAYER_NORM);
  EXPECT_EQ(gpt->activation, spec::GELU_TANH);
  EXPECT_EQ(gpt->positionEmbedding, spec::LEARNED);
  EXPECT_TRUE(gpt->tieEmbeddings && gpt->attentionBias && gpt->mlpBias);
  llvm::Expected<ModelConfig> bloom = resolveModel(presetJob("bloom-7b1"));
  ASSERT_TRUE(bool(bloom));
  EXPECT_EQ(bloom->positionEmbedding, spec::ALIBI);
  EXPECT_TRUE(bloom->embeddingNorm);
  llvm::Expected<ModelConfig> llama = resolveModel(presetJob("llama2-70b"));
  ASSERT_TRUE(bool(llama));
  EXPECT_EQ(llama->norm, spec::RMS_NORM);
  EXPECT_EQ(llama->activation, spec::SWIGLU);
  EXPECT_EQ(llama->positionEmbedding, spec::ROPE);
  EXPECT_EQ(llama->numKvHeads, 8);
  EXPECT_FALSE(llama->tieEmbeddings || llama->attentionBias);
  llvm::Expected<ModelConfig> internlm = resolveModel(presetJob("internlm-7b"));
  ASSERT_TRUE(bool(internlm));
  EXPECT_TRUE(internlm->attentionBias);
  EXPECT_FALSE(internlm->mlpBias);
}

TEST(HFConfig, BaichuanPositionFollowsTheRelease) {
  llvm::Expected<spec::ModelSpec> b7 =
      importHFConfig(inputPath("hf/baichuan-7b.json"));
  ASSERT_TRUE(bool(b7));
  EXPECT_EQ(b7->position_embedding(), spec::ROPE);
  llvm::Expected<spec::ModelSpec> b13 =
      importHFConfig(inputPath("hf/baichuan-13b.json"));
  ASSERT_TRUE(bool(b13));
  EXPECT_EQ(b13->position_embedding(), spec::ALIBI);
  EXPECT_EQ(b13->max_seq_len(), 4096);
}

TEST(HFConfig, GPT2FieldsMapByName) {
  llvm::Expected<spec::ModelSpec> m = importHFConfig(inputPath("hf/gpt2.json"));
  ASSERT_TRUE(bool(m));
  EXPECT_EQ(m->family(), spec::GPT2);
  EXPECT_EQ(m->hidden_size(), 768);
  EXPECT_EQ(m->num_layers(), 12);
  EXPECT_EQ(m->num_heads(), 12);
  EXPECT_EQ(m->max_seq_len(), 1024);
  EXPECT_EQ(m->activation(), spec::GELU_TANH);
  EXPECT_DOUBLE_EQ(m->hidden_dropout(), 0.1);
  EXPECT_FALSE(m->has_ffn_hidden_size()); // n_inner absent: the family's 4h
}

// Every malformed input gets one error that names the field and the value.
TEST(Errors, HeadsNotDividingHidden) {
  spec::JobSpec job = presetJob("tiny-llama");
  job.mutable_model()->set_num_heads(7);
  job.mutable_model()->set_num_kv_heads(7);
  EXPECT_TRUE(errorContains(resolveError(job),
                            "model.num_heads = 7 does not divide "
                            "model.hidden_size = 64"));
}

TEST(Errors, KvHeadsNotDividingHeads) {
  spec::JobSpec job = presetJob("tiny-llama");
  job.mutable_model()->set_num_kv_heads(3);
  EXPECT_TRUE(errorContains(resolveError(job),
                            "model.num_kv_heads = 3 does not divide "
                            "model.num_heads = 4"));
}

TEST(Errors, FuseMlpWithoutSwiglu) {
  spec::JobSpec job = presetJob("tiny-gpt2");
  job.mutable_model()->set_fuse_mlp(true);
  EXPECT_TRUE(errorContains(resolveError(job),
                            "model.fuse_mlp fuses SwiGLU's gate and up "
                            "projections, but model.activation = gelu_tanh "
                            "has one projection"));
  job = presetJob("tiny-llama");
  job.mutable_model()->set_fuse_mlp(true);
  llvm::Expected<ModelConfig> config = resolveModel(job);
  ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
  EXPECT_TRUE(config->fuseMlp);
}

TEST(Errors, UnknownPreset) {
  EXPECT_TRUE(errorContains(resolveError(presetJob("llama3-8b")),
                            "model.preset = \"llama3-8b\" is not a known "
                            "preset; known presets: aquila-7b"));
}

TEST(Errors, UnknownArchitecture) {
  EXPECT_TRUE(errorContains(resolveError(hfJob("unknown-arch.json")),
                            "unknown architecture \"MistralForCausalLM\""));
}

TEST(Errors, MissingRequiredField) {
  EXPECT_TRUE(errorContains(resolveError(hfJob("missing-field.json")),
                            "missing required field \"num_attention_heads\""));
}

TEST(Errors, WrongFieldType) {
  EXPECT_TRUE(errorContains(resolveError(hfJob("wrong-type.json")),
                            "field \"n_embd\" must be an integer, found \"768\""));
}

TEST(Errors, TruncatedConfigJson) {
  EXPECT_TRUE(errorContains(resolveError(hfJob("truncated.json")),
                            "truncated.json: not valid JSON"));
}

TEST(Errors, MissingConfigJson) {
  EXPECT_TRUE(errorContains(resolveError(hfJob("no-such.json")),
                            "cannot read"));
}

TEST(Errors, JobSyntaxError) {
  llvm::Expected<spec::JobSpec> job =
      loadJobFile(inputPath("jobs/syntax-error.textproto"));
  ASSERT_FALSE(bool(job));
  EXPECT_TRUE(errorContains(llvm::toString(job.takeError()),
                            "syntax-error.textproto:3:14: Expected \":\""));
}

TEST(Errors, TruncatedJob) {
  llvm::Expected<spec::JobSpec> job =
      loadJobFile(inputPath("jobs/truncated.textproto"));
  ASSERT_FALSE(bool(job));
  EXPECT_TRUE(errorContains(llvm::toString(job.takeError()),
                            "is it truncated?"));
}

TEST(Errors, PresetAndConfigTogether) {
  spec::JobSpec job = presetJob("tiny-llama");
  job.mutable_model()->set_hf_config(inputPath("hf/gpt2.json"));
  EXPECT_TRUE(errorContains(resolveError(job), "are both set"));
}

TEST(Errors, SequenceLongerThanLearnedPositions) {
  EXPECT_TRUE(errorContains(resolveError(presetJob("gpt2-124m", 2048)),
                            "data.seq_length = 2048 exceeds "
                            "model.max_seq_len = 1024"));
}

TEST(Errors, BloomWithGroupedQueryAttention) {
  spec::JobSpec job = presetJob("bloom-7b1");
  job.mutable_model()->set_num_kv_heads(8);
  EXPECT_TRUE(errorContains(resolveError(job), "per head"));
}

TEST(Errors, SwigluOnGpt2) {
  spec::JobSpec job = presetJob("gpt2-124m");
  job.mutable_model()->set_activation(spec::SWIGLU);
  EXPECT_TRUE(errorContains(resolveError(job), "model.activation = swiglu"));
}

TEST(Errors, NonPositiveSizes) {
  spec::JobSpec job = presetJob("tiny-llama");
  job.mutable_model()->set_num_layers(0);
  EXPECT_TRUE(errorContains(resolveError(job), "model.num_layers = 0 must be in [1, 1073741824]"));
  job = presetJob("tiny-llama");
  job.mutable_data()->set_seq_length(-4);
  EXPECT_TRUE(errorContains(resolveError(job), "data.seq_length = -4"));
  job = presetJob("tiny-llama");
  job.mutable_model()->set_hidden_dropout(1.5);
  EXPECT_TRUE(errorContains(resolveError(job), "model.hidden_dropout = 1.5"));
}

TEST(Errors, NoModelSource) {
  spec::JobSpec job;
  EXPECT_TRUE(errorContains(resolveError(job), "model.family is not set"));
}

} // namespace
