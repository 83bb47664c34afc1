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

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

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

std::string show(int64_t v) { return std::to_string(v); }
std::string show(bool v) { return v ? "true" : "false"; }
std::string show(const std::string &v) { return v; }
std::string show(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", v);
  return buffer;
}

/// Every architecture field of ModelConfig (all but source and the batch
/// shape: microBatchSize, seqLength, dtype), compared one by one; the failure
/// names each field that differs.
::testing::AssertionResult sameArchitecture(const ModelConfig &want,
                                            const ModelConfig &got) {
  std::string diff;
  auto field = [&](const char *name, auto a, auto b) {
    if (!(a == b))
      diff +=
          std::string(name) + ": want " + show(a) + ", got " + show(b) + "; ";
  };
  field("family", familyName(want.family), familyName(got.family));
  field("numLayers", want.numLayers, got.numLayers);
  field("hiddenSize", want.hiddenSize, got.hiddenSize);
  field("numHeads", want.numHeads, got.numHeads);
  field("numKvHeads", want.numKvHeads, got.numKvHeads);
  field("headDim", want.headDim, got.headDim);
  field("ffnHiddenSize", want.ffnHiddenSize, got.ffnHiddenSize);
  field("vocabSize", want.vocabSize, got.vocabSize);
  field("paddedVocabSize", want.paddedVocabSize, got.paddedVocabSize);
  field("maxSeqLen", want.maxSeqLen, got.maxSeqLen);
  field("norm", normName(want.norm), normName(got.norm));
  field("normEps", want.normEps, got.normEps);
  field("activation", activationName(want.activation),
        activationName(got.activation));
  field("positionEmbedding", positionName(want.positionEmbedding),
        positionName(got.positionEmbedding));
  field("ropeTheta", want.ropeTheta, got.ropeTheta);
  field("tieEmbeddings", want.tieEmbeddings, got.tieEmbeddings);
  field("attentionBias", want.attentionBias, got.attentionBias);
  field("mlpBias", want.mlpBias, got.mlpBias);
  field("embeddingNorm", want.embeddingNorm, got.embeddingNorm);
  field("fuseMlp", want.fuseMlp, got.fuseMlp);
  field("initStd", want.initStd, got.initStd);
  field("hiddenDropout", want.hiddenDropout, got.hiddenDropout);
  field("attentionDropout", want.attentionDropout, got.attentionDropout);
  field("embeddingDropout", want.embeddingDropout, got.embeddingDropout);
  if (diff.empty())
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diff;
}

/// `job`'s model, which must resolve.
ModelConfig resolved(const spec::JobSpec &job) {
  llvm::Expected<ModelConfig> config = resolveModel(job);
  if (!config) {
    ADD_FAILURE() << "resolve failed: " << llvm::toString(config.takeError());
    return ModelConfig();
  }
  return *config;
}

/// The config.json text of `config`, which must export.
std::string exported(const ModelConfig &config) {
  llvm::Expected<std::string> text = exportHFConfig(config);
  if (!text) {
    ADD_FAILURE() << "export failed: " << llvm::toString(text.takeError());
    return "";
  }
  return *text;
}

/// The message of exportHFConfig's error for `config`, "" when it exports.
std::string exportError(const ModelConfig &config) {
  llvm::Expected<std::string> text = exportHFConfig(config);
  return text ? "" : llvm::toString(text.takeError());
}

/// `config` exported, imported back from the text and resolved.
llvm::Expected<ModelConfig> roundTrip(const ModelConfig &config) {
  llvm::Expected<std::string> text = exportHFConfig(config);
  if (!text)
    return text.takeError();
  llvm::Expected<spec::ModelSpec> imported =
      importHFConfigText(*text, "exported.json");
  if (!imported)
    return imported.takeError();
  spec::JobSpec job;
  *job.mutable_model() = *imported;
  // Resolved as inline fields: a set hf_config would be read as a path.
  job.mutable_model()->clear_hf_config();
  return resolveModel(job);
}

/// `config` after the round trip, with exportHFConfig's two documented
/// changes: vocab_size is the padded vocabulary (the checkpoint's rows), and
/// a fused MLP is written as the unfused one.
ModelConfig expectedAfterExport(ModelConfig config) {
  config.vocabSize = config.paddedVocabSize;
  config.fuseMlp = false;
  return config;
}

::testing::AssertionResult roundTrips(const ModelConfig &config) {
  llvm::Expected<ModelConfig> back = roundTrip(config);
  if (!back)
    return ::testing::AssertionFailure()
           << "round trip failed: " << llvm::toString(back.takeError());
  return sameArchitecture(expectedAfterExport(config), *back);
}

llvm::json::Object parsedObject(const std::string &text) {
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(text);
  if (!value) {
    ADD_FAILURE() << "not JSON: " << llvm::toString(value.takeError());
    return {};
  }
  if (!value->getAsObject()) {
    ADD_FAILURE() << "not a JSON object: " << text;
    return {};
  }
  return *value->getAsObject();
}

/// The config.json inputs under tests/lit/Inputs/hf, by file name.
std::vector<std::string> hfInputs() {
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(inputPath("hf"), ec), end;
       it != end && !ec; it.increment(ec))
    if (llvm::sys::path::extension(it->path()) == ".json")
      names.push_back(llvm::sys::path::filename(it->path()).str());
  EXPECT_FALSE(ec) << ec.message();
  std::sort(names.begin(), names.end());
  return names;
}

/// The inputs that exist to test import errors.
bool isMalformedInput(const std::string &name) {
  static const std::set<std::string> malformed = {
      "missing-field.json", "truncated.json", "unknown-arch.json",
      "wrong-type.json"};
  return malformed.count(name) != 0;
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

TEST(HFExport, EveryPresetRoundTrips) {
  std::set<spec::Family> families;
  for (const std::string &name : presetNames()) {
    ModelConfig config = resolved(presetJob(name));
    EXPECT_TRUE(roundTrips(config)) << name;
    families.insert(config.family);
  }
  // The presets cover every family, so every exporter is exercised.
  EXPECT_EQ(families.size(), 6u);
}

TEST(HFExport, EveryConfigJsonInputRoundTrips) {
  int roundTripped = 0;
  for (const std::string &name : hfInputs()) {
    if (isMalformedInput(name)) {
      EXPECT_NE(resolveError(hfJob(name)), "") << name;
      continue;
    }
    ModelConfig config = resolved(hfJob(name));
    EXPECT_TRUE(roundTrips(config)) << name;
    ++roundTripped;
  }
  EXPECT_GE(roundTripped, 7);
}

// Where the export and a released config.json both have a key, they agree:
// the export is in the layout Hugging Face's classes use.
TEST(HFExport, AgreesWithTheReleasedConfigJsons) {
  for (const std::string &name : hfInputs()) {
    if (isMalformedInput(name))
      continue;
    llvm::Expected<std::string> released = readFile(inputPath("hf/" + name));
    ASSERT_TRUE(bool(released)) << llvm::toString(released.takeError());
    llvm::json::Object want = parsedObject(*released);
    llvm::json::Object got = parsedObject(exported(resolved(hfJob(name))));
    int common = 0;
    for (const auto &[key, value] : want) {
      const llvm::json::Value *ours = got.get(key);
      // torch_dtype is the release's storage choice; Braid writes fp32.
      if (!ours || key == "torch_dtype")
        continue;
      ++common;
      if (key == "architectures") {
        // Baichuan's 7B release spells its class BaiChuanForCausalLM.
        std::optional<llvm::StringRef> a =
            (*value.getAsArray())[0].getAsString();
        std::optional<llvm::StringRef> b =
            (*ours->getAsArray())[0].getAsString();
        ASSERT_TRUE(a && b) << name;
        EXPECT_TRUE(a->equals_insensitive(*b))
            << name << ": " << a->str() << " vs " << b->str();
        continue;
      }
      EXPECT_EQ(value, *ours)
          << name << ": key " << llvm::StringRef(key).str() << ": released "
          << llvm::formatv("{0}", value).str() << ", exported "
          << llvm::formatv("{0}", *ours).str();
    }
    EXPECT_GE(common, 8) << name;
  }
}

TEST(HFExport, LayoutOfEachFamily) {
  struct Case {
    const char *preset, *architecture, *modelType;
  };
  for (Case c : {Case{"tiny-llama", "LlamaForCausalLM", "llama"},
                 Case{"aquila-7b", "AquilaForCausalLM", "aquila"},
                 Case{"internlm-7b", "InternLMForCausalLM", "internlm"},
                 Case{"baichuan-7b", "BaichuanForCausalLM", "baichuan"},
                 Case{"baichuan2-13b", "BaichuanForCausalLM", "baichuan"},
                 Case{"tiny-gpt2", "GPT2LMHeadModel", "gpt2"},
                 Case{"bloom-7b1", "BloomForCausalLM", "bloom"}}) {
    SCOPED_TRACE(c.preset);
    ModelConfig config = resolved(presetJob(c.preset));
    std::string text = exported(config);
    ASSERT_FALSE(text.empty());
    // A JSON object, 2-space indent, keys sorted, trailing newline.
    EXPECT_EQ(text.substr(0, 4), "{\n  ");
    EXPECT_EQ(text.substr(text.size() - 2), "}\n");
    std::vector<std::string> keys;
    llvm::StringRef rest(text);
    while (!rest.empty()) {
      auto [line, next] = rest.split('\n');
      rest = next;
      if (line.starts_with("  \"") && !line.starts_with("   "))
        keys.push_back(line.drop_front(3).split('"').first.str());
    }
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
    llvm::json::Object o = parsedObject(text);
    EXPECT_EQ(keys.size(), o.size());
    const llvm::json::Array *architectures = o.getArray("architectures");
    ASSERT_TRUE(architectures && architectures->size() == 1);
    EXPECT_EQ((*architectures)[0].getAsString(), c.architecture);
    EXPECT_EQ(o.getString("model_type"), c.modelType);
    EXPECT_EQ(o.getString("torch_dtype"), "float32");
    EXPECT_EQ(o.getInteger("vocab_size"), config.paddedVocabSize);
    switch (config.family) {
    case spec::GPT2:
      EXPECT_EQ(o.getInteger("n_embd"), config.hiddenSize);
      EXPECT_EQ(o.getInteger("n_inner"), config.ffnHiddenSize);
      EXPECT_EQ(o.getInteger("n_positions"), config.maxSeqLen);
      EXPECT_FALSE(o.get("hidden_act"));
      break;
    case spec::BLOOM:
      EXPECT_EQ(o.getInteger("hidden_size"), config.hiddenSize);
      EXPECT_FALSE(o.get("max_position_embeddings") || o.get("n_positions"));
      break;
    default:
      EXPECT_EQ(o.getString("hidden_act"), "silu");
      EXPECT_EQ(o.getInteger("num_key_value_heads"), config.numKvHeads);
      // InternLM's class has `bias` for the attention biases and no others.
      EXPECT_EQ(o.getBoolean("bias").has_value(),
                config.family == spec::INTERNLM);
      EXPECT_EQ(o.getBoolean("attention_bias").has_value(),
                config.family != spec::INTERNLM);
      // Baichuan's 13B (ALiBi) releases state only model_max_length; import
      // reads max_position_embeddings as the 7B (RoPE) layout.
      bool alibi = config.positionEmbedding == spec::ALIBI;
      EXPECT_EQ(
          o.getInteger(alibi ? "model_max_length" : "max_position_embeddings"),
          config.maxSeqLen);
      EXPECT_FALSE(
          o.get(alibi ? "max_position_embeddings" : "model_max_length"));
      EXPECT_EQ(o.get("rope_theta") != nullptr, !alibi);
      break;
    }
  }
}

// Python's json module writes a float as its repr: the shortest digits that
// read back, and integral values with ".0".
TEST(HFExport, FloatsAreWrittenAsPythonWritesThem) {
  ModelConfig config = resolved(presetJob("llama2-7b"));
  ASSERT_EQ(config.normEps, 1e-5);
  ASSERT_EQ(config.ropeTheta, 10000.0);
  ASSERT_EQ(config.initStd, 0.02);
  std::string text = exported(config);
  EXPECT_NE(text.find("\"rms_norm_eps\": 1e-05,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"rope_theta\": 10000.0,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"initializer_range\": 0.02,"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\"attention_dropout\": 0.0,"), std::string::npos)
      << text;
  for (auto [value, python] : {std::pair<double, const char *>{5e5, "500000.0"},
                               {1.5e-6, "1.5e-06"},
                               {1.0 / 3, "0.3333333333333333"},
                               {1e16, "1e+16"},
                               {123.25, "123.25"},
                               {0.0001, "0.0001"}}) {
    config.ropeTheta = value;
    std::string text = exported(config);
    EXPECT_NE(text.find("\"rope_theta\": " + std::string(python) + ","),
              std::string::npos)
        << text;
    EXPECT_TRUE(roundTrips(config)) << python;
  }
}

// Fields away from the presets' values, each read back.
TEST(HFExport, NonDefaultFieldsRoundTrip) {
  spec::JobSpec llama = presetJob("tiny-llama");
  spec::ModelSpec *m = llama.mutable_model();
  m->set_num_kv_heads(1);
  m->set_max_seq_len(256);
  m->set_norm_eps(1e-6);
  m->set_rope_theta(500000);
  m->set_tie_embeddings(true);
  m->set_attention_bias(true);
  m->set_mlp_bias(true);
  m->set_init_std(0.01);
  m->set_attention_dropout(0.1);
  EXPECT_TRUE(roundTrips(resolved(llama)));

  spec::JobSpec internlm = presetJob("internlm-7b");
  internlm.mutable_model()->set_attention_bias(false);
  EXPECT_TRUE(roundTrips(resolved(internlm)));

  spec::JobSpec aquila = presetJob("aquila-7b");
  aquila.mutable_model()->set_num_kv_heads(8);
  aquila.mutable_model()->set_attention_bias(true);
  EXPECT_TRUE(roundTrips(resolved(aquila)));

  // An ALiBi Baichuan writes rope_theta only when it is not the default.
  spec::JobSpec baichuan = presetJob("baichuan-13b");
  baichuan.mutable_model()->set_rope_theta(20000);
  EXPECT_TRUE(roundTrips(resolved(baichuan)));

  spec::JobSpec gpt2 = presetJob("tiny-gpt2");
  m = gpt2.mutable_model();
  m->set_activation(spec::GELU);
  m->set_tie_embeddings(false);
  m->set_ffn_hidden_size(96);
  m->set_norm_eps(1e-6);
  m->set_init_std(0.03);
  m->set_hidden_dropout(0.2);
  m->set_attention_dropout(0.3);
  m->set_embedding_dropout(0.05);
  EXPECT_TRUE(roundTrips(resolved(gpt2)));

  spec::JobSpec bloom = presetJob("bloom-7b1");
  m = bloom.mutable_model();
  m->set_tie_embeddings(false);
  m->set_hidden_dropout(0.1);
  m->set_attention_dropout(0.2);
  m->set_norm_eps(1e-6);
  EXPECT_TRUE(roundTrips(resolved(bloom)));
}

// vocab_size is the rows of the embedding, which a padded vocabulary grows.
TEST(HFExport, PaddedVocabularyIsWrittenAsTheEmbeddingRows) {
  for (const char *preset : {"tiny-llama", "tiny-gpt2", "bloom-7b1"}) {
    spec::JobSpec job = presetJob(preset);
    job.mutable_model()->set_vocab_size(500);
    job.mutable_model()->set_make_vocab_size_divisible_by(128);
    ModelConfig config = resolved(job);
    ASSERT_EQ(config.vocabSize, 500);
    ASSERT_EQ(config.paddedVocabSize, 512);
    llvm::json::Object o = parsedObject(exported(config));
    EXPECT_EQ(o.getInteger("vocab_size"), config.paddedVocabSize) << preset;
    llvm::Expected<ModelConfig> back = roundTrip(config);
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(back->vocabSize, config.paddedVocabSize) << preset;
    EXPECT_EQ(back->paddedVocabSize, config.paddedVocabSize) << preset;
    EXPECT_TRUE(roundTrips(config)) << preset;
  }
}

// A fused MLP is the same model as the unfused one, whose checkpoint layout
// (gate_proj, up_proj) is the only one the classes load.
TEST(HFExport, FusedMlpIsWrittenAsTheUnfusedModel) {
  for (const char *preset : {"tiny-llama", "baichuan-13b", "internlm-7b"}) {
    spec::JobSpec job = presetJob(preset);
    ModelConfig unfused = resolved(job);
    job.mutable_model()->set_fuse_mlp(true);
    ModelConfig fused = resolved(job);
    ASSERT_TRUE(fused.fuseMlp);
    EXPECT_EQ(exported(fused), exported(unfused)) << preset;
    EXPECT_TRUE(roundTrips(fused)) << preset;
  }
}

TEST(HFExport, RefusesWhatTheClassCannotExpress) {
  auto modified = [](const char *preset,
                     const std::function<void(spec::ModelSpec &)> &change) {
    spec::JobSpec job = presetJob(preset);
    change(*job.mutable_model());
    return resolved(job);
  };

  // LLaMA-like classes.
  EXPECT_EQ(exportError(modified(
                "tiny-llama", [](auto &m) { m.set_norm(spec::LAYER_NORM); })),
            "model.norm = layer_norm cannot be expressed by LlamaForCausalLM: "
            "its only norm is RMSNorm (rms_norm_eps)");
  EXPECT_EQ(exportError(modified(
                "tiny-llama", [](auto &m) { m.set_activation(spec::GELU); })),
            "model.activation = gelu cannot be expressed by LlamaForCausalLM: "
            "its only MLP is SwiGLU (hidden_act \"silu\")");
  EXPECT_EQ(
      exportError(modified(
          "aquila-7b", [](auto &m) { m.set_position_embedding(spec::ALIBI); })),
      "model.position_embedding = alibi cannot be expressed by "
      "AquilaForCausalLM: its only position embedding is RoPE");
  EXPECT_EQ(exportError(modified(
                "baichuan-7b",
                [](auto &m) { m.set_position_embedding(spec::LEARNED); })),
            "model.position_embedding = learned cannot be expressed by "
            "BaichuanForCausalLM: it has RoPE (the 7B layout, "
            "max_position_embeddings) or ALiBi (the 13B layout, "
            "model_max_length) only");
  EXPECT_EQ(exportError(
                modified("internlm-7b", [](auto &m) { m.set_mlp_bias(true); })),
            "model.mlp_bias = true cannot be expressed by InternLMForCausalLM: "
            "its `bias` puts biases on the attention projections only");
  EXPECT_EQ(exportError(modified("tiny-llama",
                                 [](auto &m) { m.set_embedding_norm(true); })),
            "model.embedding_norm = true cannot be expressed by "
            "LlamaForCausalLM: it has no norm after the embedding");
  EXPECT_EQ(exportError(modified("tiny-llama",
                                 [](auto &m) { m.set_hidden_dropout(0.25); })),
            "model.hidden_dropout = 0.25 cannot be expressed by "
            "LlamaForCausalLM: it has no residual dropout (only "
            "attention_dropout)");
  EXPECT_EQ(exportError(modified(
                "internlm-7b", [](auto &m) { m.set_embedding_dropout(0.5); })),
            "model.embedding_dropout = 0.5 cannot be expressed by "
            "InternLMForCausalLM: it has no embedding dropout");

  // GPT-2.
  ModelConfig gqa =
      modified("tiny-gpt2", [](auto &m) { m.set_num_kv_heads(2); });
  EXPECT_EQ(exportError(gqa),
            "model.num_kv_heads = 2 cannot be expressed by GPT2LMHeadModel: "
            "it has one key/value head per query head (n_head = " +
                std::to_string(gqa.numHeads) + ")");
  EXPECT_EQ(exportError(modified("tiny-gpt2",
                                 [](auto &m) { m.set_norm(spec::RMS_NORM); })),
            "model.norm = rms_norm cannot be expressed by GPT2LMHeadModel: its "
            "only norm is LayerNorm (layer_norm_epsilon)");
  // resolveModel refuses SwiGLU for GPT-2; a hand-made config still gets a
  // clear refusal.
  ModelConfig swiglu = resolved(presetJob("tiny-gpt2"));
  swiglu.activation = spec::SWIGLU;
  EXPECT_EQ(exportError(swiglu),
            "model.activation = swiglu cannot be expressed by "
            "GPT2LMHeadModel: its activation_function is gelu_new "
            "(gelu_tanh) or gelu");
  EXPECT_EQ(
      exportError(modified(
          "tiny-gpt2", [](auto &m) { m.set_position_embedding(spec::ROPE); })),
      "model.position_embedding = rope cannot be expressed by "
      "GPT2LMHeadModel: its only position embedding is learned "
      "(n_positions)");
  EXPECT_EQ(exportError(modified("tiny-gpt2",
                                 [](auto &m) { m.set_rope_theta(500000); })),
            "model.rope_theta = 500000.0 cannot be expressed by "
            "GPT2LMHeadModel: it has no RoPE, so only the default 10000.0 "
            "reads back");
  EXPECT_EQ(exportError(modified("tiny-gpt2",
                                 [](auto &m) { m.set_attention_bias(false); })),
            "model.attention_bias = false cannot be expressed by "
            "GPT2LMHeadModel: its attention projections always have biases");
  EXPECT_EQ(exportError(
                modified("tiny-gpt2", [](auto &m) { m.set_mlp_bias(false); })),
            "model.mlp_bias = false cannot be expressed by GPT2LMHeadModel: "
            "its MLP projections always have biases");
  EXPECT_EQ(exportError(modified("tiny-gpt2",
                                 [](auto &m) { m.set_embedding_norm(true); })),
            "model.embedding_norm = true cannot be expressed by "
            "GPT2LMHeadModel: it has no norm after the embedding");

  // Bloom.
  ModelConfig bloomGqa = resolved(presetJob("bloom-7b1"));
  bloomGqa.numKvHeads = bloomGqa.numHeads / 4;
  EXPECT_EQ(exportError(bloomGqa),
            "model.num_kv_heads = " + std::to_string(bloomGqa.numKvHeads) +
                " cannot be expressed by BloomForCausalLM: it has one "
                "key/value head per query head (n_head = " +
                std::to_string(bloomGqa.numHeads) + ")");
  ModelConfig narrow =
      modified("bloom-7b1", [](auto &m) { m.set_ffn_hidden_size(10000); });
  EXPECT_EQ(exportError(narrow),
            "model.ffn_hidden_size = 10000 cannot be expressed by "
            "BloomForCausalLM: its MLP width is always 4 * hidden_size = " +
                std::to_string(4 * narrow.hiddenSize));
  EXPECT_EQ(exportError(modified("bloom-7b1",
                                 [](auto &m) { m.set_max_seq_len(4096); })),
            "model.max_seq_len = 4096 cannot be expressed by "
            "BloomForCausalLM: it has no position limit (ALiBi), so only the "
            "default 2048 reads back");
  EXPECT_EQ(exportError(modified("bloom-7b1",
                                 [](auto &m) { m.set_norm(spec::RMS_NORM); })),
            "model.norm = rms_norm cannot be expressed by BloomForCausalLM: "
            "its only norm is LayerNorm (layer_norm_epsilon)");
  EXPECT_EQ(exportError(modified(
                "bloom-7b1", [](auto &m) { m.set_activation(spec::GELU); })),
            "model.activation = gelu cannot be expressed by BloomForCausalLM: "
            "its only activation is bloom_gelu (gelu_tanh)");
  EXPECT_EQ(
      exportError(modified(
          "bloom-7b1", [](auto &m) { m.set_position_embedding(spec::ROPE); })),
      "model.position_embedding = rope cannot be expressed by "
      "BloomForCausalLM: its only position embedding is ALiBi");
  EXPECT_EQ(exportError(
                modified("bloom-7b1", [](auto &m) { m.set_rope_theta(1e6); })),
            "model.rope_theta = 1000000.0 cannot be expressed by "
            "BloomForCausalLM: it has no RoPE, so only the default 10000.0 "
            "reads back");
  EXPECT_EQ(exportError(modified("bloom-7b1",
                                 [](auto &m) { m.set_attention_bias(false); })),
            "model.attention_bias = false cannot be expressed by "
            "BloomForCausalLM: its attention projections always have biases");
  EXPECT_EQ(exportError(
                modified("bloom-7b1", [](auto &m) { m.set_mlp_bias(false); })),
            "model.mlp_bias = false cannot be expressed by BloomForCausalLM: "
            "its MLP projections always have biases");
  EXPECT_EQ(exportError(modified("bloom-7b1",
                                 [](auto &m) { m.set_embedding_norm(false); })),
            "model.embedding_norm = false cannot be expressed by "
            "BloomForCausalLM: it always has a LayerNorm after the embedding "
            "(word_embeddings_layernorm)");
  EXPECT_EQ(exportError(modified(
                "bloom-7b1", [](auto &m) { m.set_embedding_dropout(0.1); })),
            "model.embedding_dropout = 0.1 cannot be expressed by "
            "BloomForCausalLM: it has no embedding dropout");

  // What JSON cannot hold, and a config with no family.
  EXPECT_EQ(exportError(modified("tiny-llama",
                                 [](auto &m) { m.set_norm_eps(INFINITY); })),
            "model.norm_eps = inf cannot be written to a config.json: JSON "
            "has no infinity or NaN");
  EXPECT_EQ(exportError(ModelConfig()),
            "model.family = unspecified has no Hugging Face model class");
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
