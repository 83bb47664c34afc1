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
#include <tuple>

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
    // The dtype the weights are exported in, and nothing else changed.
    llvm::Expected<std::string> bf16 = exportHFConfig(config, "bfloat16");
    ASSERT_TRUE(bool(bf16));
    llvm::json::Object ob = parsedObject(*bf16);
    EXPECT_EQ(ob.getString("torch_dtype"), "bfloat16");
    ob["torch_dtype"] = "float32";
    llvm::json::Object fp32 = o;
    EXPECT_EQ(llvm::json::Value(std::move(ob)),
              llvm::json::Value(std::move(fp32)));
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
      EXPECT_EQ(o.getInteger("seq_length"), config.maxSeqLen);
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
  // No position limit in the class (ALiBi): any trained length exports,
  // written where BigScience's configs keep it (seq_length), and reads back.
  for (int64_t length : {128, 4096}) {
    ModelConfig trained = modified(
        "bloom-7b1", [&](auto &m) { m.set_max_seq_len(length); });
    EXPECT_EQ(exportError(trained), "");
    EXPECT_EQ(parsedObject(exported(trained)).getInteger("seq_length"),
              length);
    EXPECT_TRUE(roundTrips(trained));
  }
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

// A job file with a model that names no source: the message names the file
// and what the model lacks (braidc and braid train both check it).
TEST(Errors, JobWithoutModelSourceNamesTheFile) {
  spec::JobSpec job;
  spec::ModelSpec *m = job.mutable_model();
  m->set_num_layers(2);
  m->set_hidden_size(64);
  m->set_num_heads(4);
  m->set_vocab_size(512);
  llvm::Error error = checkModelSource(job, "jobs/no-family.textproto");
  ASSERT_TRUE(bool(error));
  EXPECT_EQ(llvm::toString(std::move(error)),
            "jobs/no-family.textproto: the model names no preset, hf_config "
            "or family; set model.preset, model.hf_config or model.family "
            "(with the inline sizes)");
  m->set_family(spec::LLAMA);
  EXPECT_FALSE(bool(checkModelSource(job, "x")));
  EXPECT_FALSE(bool(checkModelSource(presetJob("tiny-llama"), "x")));
  EXPECT_FALSE(bool(checkModelSource(hfJob("gpt2.json"), "x")));
}

/// resolveTrain's error for `job`, "" when it resolves.
std::string trainError(const spec::JobSpec &job) {
  llvm::Expected<TrainConfig> train = resolveTrain(job);
  return train ? "" : llvm::toString(train.takeError());
}

// Integer fields print as integers, whatever their size; fractional fields
// as the digits a job file would give them.
TEST(Errors, NumbersPrintAsTheJobStatesThem) {
  spec::JobSpec job = presetJob("tiny-llama");
  job.mutable_train()->set_seed(-1);
  EXPECT_EQ(trainError(job), "train.seed = -1 must be >= 0");
  job = presetJob("tiny-llama");
  job.mutable_train()->set_steps(0);
  EXPECT_EQ(trainError(job), "train.steps = 0 must be >= 1");
  job = presetJob("tiny-llama");
  job.mutable_train()->set_warmup_steps(int64_t(1) << 60);
  EXPECT_EQ(trainError(job), "train.warmup_steps = 1152921504606846976 must "
                             "be in [0, steps]");
  job = presetJob("tiny-llama");
  job.mutable_train()->set_precision(spec::FP16);
  job.mutable_train()->set_loss_scale_window(0);
  EXPECT_EQ(trainError(job), "train.loss_scale_window = 0 must be >= 1");
  job = presetJob("tiny-llama");
  job.mutable_train()->set_lr(-0.5);
  EXPECT_EQ(trainError(job), "train.lr = -0.5 must be >= 0");
  job = presetJob("tiny-llama");
  job.mutable_train()->set_adam_beta2(1.25);
  EXPECT_EQ(trainError(job), "train.adam_beta2 = 1.25 must be in [0, 1)");
  job = presetJob("tiny-llama");
  job.mutable_train()->set_adam_eps(0);
  EXPECT_EQ(trainError(job), "train.adam_eps = 0 must be > 0");
  job = presetJob("tiny-llama");
  job.mutable_model()->set_hidden_dropout(1.5);
  EXPECT_EQ(resolveError(job), "model.hidden_dropout = 1.5 must be in [0, 1)");
  job = presetJob("tiny-llama");
  job.mutable_model()->set_norm_eps(-1e-5);
  EXPECT_EQ(resolveError(job), "model.norm_eps = -1e-05 must be > 0");
  // Infinity passed '> 0' and failed only when the weights were drawn.
  job = presetJob("tiny-llama");
  job.mutable_model()->set_init_std(INFINITY);
  EXPECT_EQ(resolveError(job), "model.init_std = inf must be finite and > 0");
  job.mutable_model()->set_init_std(0);
  EXPECT_EQ(resolveError(job), "model.init_std = 0 must be finite and > 0");
}

//===----------------------------------------------------------------------===//
// Fields derived from a field the job replaces
//===----------------------------------------------------------------------===//

/// `config`'s derived field `name`, or nullptr.
const DerivedField *derivedField(const ModelConfig &config,
                                 const std::string &name) {
  for (const DerivedField &d : config.derivedFields)
    if (d.field == name)
      return &d;
  return nullptr;
}

/// The LLaMA reference code's MLP width (Meta's llama/model.py with
/// multiple_of = 256): int(2 * 4h / 3), rounded up to a multiple of 256.
int64_t llamaReferenceFfn(int64_t hidden) {
  int64_t ffn = static_cast<int64_t>(2.0 * (4.0 * hidden) / 3.0);
  return 256 * ((ffn + 255) / 256);
}

// `preset: "bloom-7b1" num_layers: 2 hidden_size: 64` has Bloom's 4h MLP,
// 256 wide, not the preset's 16384.
TEST(DerivedFields, BloomMlpFollowsAReplacedHiddenSize) {
  spec::JobSpec job = presetJob("bloom-7b1", 16);
  job.mutable_model()->set_num_layers(2);
  job.mutable_model()->set_hidden_size(64);
  ModelConfig c = resolved(job);
  EXPECT_EQ(c.ffnHiddenSize, 4 * 64);
  const DerivedField *ffn = derivedField(c, "ffn_hidden_size");
  ASSERT_TRUE(ffn);
  EXPECT_EQ(ffn->value, 256);
  EXPECT_EQ(ffn->rule, "4 * hidden_size");
  EXPECT_EQ(ffn->reason,
            "model.hidden_size = 64 replaces the 4096 of preset \"bloom-7b1\"");
  // The heads were not replaced: the preset's 32 stay, and so do its kv
  // heads, which are not listed as derived.
  EXPECT_EQ(c.numHeads, 32);
  EXPECT_EQ(c.numKvHeads, 32);
  EXPECT_FALSE(derivedField(c, "num_kv_heads"));
  // The compiled MLP is that wide: up and down projections of 64 x 256 with
  // their biases.
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module = compileModel(context, job);
  ASSERT_TRUE(module);
  const int64_t h = 64, ffnWidth = 256;
  const int64_t layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) +
                        (h * ffnWidth + ffnWidth) + (ffnWidth * h + h);
  for (int64_t n : countParameters(*module).perLayer)
    EXPECT_EQ(n, layer);
}

TEST(DerivedFields, LlamaMlpFollowsAReplacedHiddenSize) {
  // The rule is the one LLaMA's presets were made with.
  for (auto [preset, hidden, ffn] :
       {std::tuple<const char *, int64_t, int64_t>{"llama-7b", 4096, 11008},
        {"llama-13b", 5120, 13824},
        {"llama-33b", 6656, 17920},
        {"llama-65b", 8192, 22016}}) {
    EXPECT_EQ(llamaReferenceFfn(hidden), ffn) << preset;
    EXPECT_EQ(familyFfnHiddenSize(spec::LLAMA, hidden), ffn) << preset;
  }
  spec::JobSpec job = presetJob("llama-7b", 16);
  job.mutable_model()->set_hidden_size(1024);
  ModelConfig c = resolved(job);
  // int(2 * 4096 / 3) = 2730, rounded up to 11 * 256.
  EXPECT_EQ(c.ffnHiddenSize, llamaReferenceFfn(1024));
  EXPECT_EQ(c.ffnHiddenSize, 11 * 256);
  const DerivedField *ffn = derivedField(c, "ffn_hidden_size");
  ASSERT_TRUE(ffn);
  EXPECT_EQ(ffn->reason,
            "model.hidden_size = 1024 replaces the 4096 of preset \"llama-7b\"");
  // From a config.json that states intermediate_size: the same.
  job = hfJob("llama2-7b.json");
  job.mutable_model()->set_hidden_size(1024);
  c = resolved(job);
  EXPECT_EQ(c.ffnHiddenSize, llamaReferenceFfn(1024));
  ffn = derivedField(c, "ffn_hidden_size");
  ASSERT_TRUE(ffn);
  EXPECT_TRUE(errorContains(ffn->reason, "model.hidden_size = 1024 replaces "
                                         "the 4096 of config.json "));
}

TEST(DerivedFields, WhatTheJobSetsOrKeepsIsNotDerived) {
  // The job states the preset's own hidden size: nothing is replaced.
  spec::JobSpec job = presetJob("tiny-llama");
  job.mutable_model()->set_hidden_size(64);
  ModelConfig c = resolved(job);
  EXPECT_EQ(c.ffnHiddenSize, 176);
  EXPECT_TRUE(c.derivedFields.empty());
  // An MLP width given with the new hidden size is the job's.
  job = presetJob("bloom-7b1");
  job.mutable_model()->set_hidden_size(64);
  job.mutable_model()->set_ffn_hidden_size(100);
  c = resolved(job);
  EXPECT_EQ(c.ffnHiddenSize, 100);
  EXPECT_FALSE(derivedField(c, "ffn_hidden_size"));
  // Replacing the layers changes nothing derived (llama2-7b keeps 11008).
  job = presetJob("llama2-7b");
  job.mutable_model()->set_num_layers(2);
  c = resolved(job);
  EXPECT_EQ(c.ffnHiddenSize, 11008);
  EXPECT_TRUE(c.derivedFields.empty());
}

TEST(DerivedFields, KvHeadsFollowReplacedHeads) {
  // Multi-head presets: one kv head per query head.
  for (const char *preset : {"bloom-7b1", "gpt2-124m", "llama-7b"}) {
    spec::JobSpec job = presetJob(preset);
    job.mutable_model()->set_num_heads(4);
    ModelConfig c = resolved(job);
    EXPECT_EQ(c.numKvHeads, 4) << preset;
    const DerivedField *kv = derivedField(c, "num_kv_heads");
    ASSERT_TRUE(kv) << preset;
    EXPECT_EQ(kv->value, 4) << preset;
    EXPECT_EQ(kv->rule, "num_heads (one kv head per query head)") << preset;
  }
  // GQA: llama2-70b groups 64 heads into 8 kv heads, 8 query heads each;
  // 32 heads keep the groups of 8: 32 / 8 = 4 kv heads.
  spec::JobSpec job = presetJob("llama2-70b");
  job.mutable_model()->set_num_heads(32);
  ModelConfig c = resolved(job);
  EXPECT_EQ(c.numKvHeads, 32 / (64 / 8));
  const DerivedField *kv = derivedField(c, "num_kv_heads");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->rule, "num_heads / 8 (8 query heads per kv head, as the "
                      "base's)");
  EXPECT_EQ(kv->reason,
            "model.num_heads = 32 replaces the 64 of preset \"llama2-70b\"");
  // 4 heads make no group of 8: refused, naming both fields.
  job.mutable_model()->set_num_heads(4);
  EXPECT_EQ(resolveError(job),
            "model.num_heads = 4 replaces the 64 of preset \"llama2-70b\", "
            "whose 8 kv heads (model.num_kv_heads) cannot be derived for 4 "
            "heads: its groups of 8 query heads per kv head do not divide "
            "them; set model.num_kv_heads in the job");
  // Kv heads the job gives are the job's.
  job.mutable_model()->set_num_kv_heads(2);
  c = resolved(job);
  EXPECT_EQ(c.numKvHeads, 2);
  EXPECT_FALSE(derivedField(c, "num_kv_heads"));
}

TEST(DerivedFields, ReplacedFamilyRederivesTheMlp) {
  // GPT-2 124M as a LLaMA: the MLP is LLaMA's for h = 768, not GPT-2's 4h.
  spec::JobSpec job = presetJob("gpt2-124m");
  job.mutable_model()->set_family(spec::LLAMA);
  ModelConfig c = resolved(job);
  EXPECT_EQ(c.ffnHiddenSize, llamaReferenceFfn(768));
  const DerivedField *ffn = derivedField(c, "ffn_hidden_size");
  ASSERT_TRUE(ffn);
  EXPECT_EQ(ffn->reason,
            "model.family = llama replaces the gpt2 of preset \"gpt2-124m\"");
}

TEST(DerivedFields, StaleFieldsThatCannotBeDerivedAreNamed) {
  // Bloom 7B1's 32 heads do not divide a hidden size of 48.
  spec::JobSpec job = presetJob("bloom-7b1");
  job.mutable_model()->set_hidden_size(48);
  EXPECT_EQ(resolveError(job),
            "model.num_heads = 32 does not divide model.hidden_size = 48; "
            "model.num_heads comes from preset \"bloom-7b1\", made for its "
            "model.hidden_size = 4096, not the job's 48: set model.num_heads "
            "in the job");
  // LLaMA 7B's 32 heads make a head size of 3 from 96: RoPE needs an even one.
  job = presetJob("llama-7b");
  job.mutable_model()->set_hidden_size(96);
  EXPECT_TRUE(errorContains(resolveError(job),
                            "RoPE needs an even head size, but "
                            "model.hidden_size / model.num_heads = 3; "
                            "model.num_heads comes from preset \"llama-7b\""));
  // The same checks without a replaced hidden size name no stale field.
  job = presetJob("tiny-llama");
  job.mutable_model()->set_num_heads(7);
  job.mutable_model()->set_num_kv_heads(7);
  EXPECT_EQ(resolveError(job),
            "model.num_heads = 7 does not divide model.hidden_size = 64");
}

TEST(DerivedFields, DefaultsAreListed) {
  spec::JobSpec job;
  spec::ModelSpec *m = job.mutable_model();
  m->set_family(spec::GPT2);
  m->set_num_layers(2);
  m->set_hidden_size(64);
  m->set_num_heads(4);
  m->set_vocab_size(512);
  ModelConfig c = resolved(job);
  ASSERT_EQ(c.derivedFields.size(), 2u);
  EXPECT_EQ(c.derivedFields[0].field, "num_kv_heads");
  EXPECT_EQ(c.derivedFields[0].value, 4);
  EXPECT_EQ(c.derivedFields[0].reason, "not set");
  EXPECT_EQ(c.derivedFields[1].field, "ffn_hidden_size");
  EXPECT_EQ(c.derivedFields[1].value, 4 * 64);
  EXPECT_EQ(c.derivedFields[1].reason, "not set");
}

//===----------------------------------------------------------------------===//
// Size limits
//===----------------------------------------------------------------------===//

// The limits count the parameters before any IR is built; the count is the
// compiled @forward's, for every preset and for biases, fused MLPs, learned
// positions and padded vocabularies.
TEST(SizeLimits, ParameterCountIsTheCompiledOne) {
  std::vector<spec::JobSpec> jobs;
  for (const std::string &name : presetNames()) {
    spec::JobSpec job = presetJob(name, 16);
    job.mutable_model()->set_num_layers(2);
    jobs.push_back(job);
  }
  spec::JobSpec fused = presetJob("tiny-llama", 16);
  fused.mutable_model()->set_fuse_mlp(true);
  fused.mutable_model()->set_attention_bias(true);
  fused.mutable_model()->set_mlp_bias(true);
  fused.mutable_model()->set_make_vocab_size_divisible_by(384);
  jobs.push_back(fused);
  spec::JobSpec gelu = presetJob("bloom-7b1", 16);
  gelu.mutable_model()->set_num_layers(1);
  gelu.mutable_model()->set_tie_embeddings(false);
  gelu.mutable_model()->set_activation(spec::GELU);
  jobs.push_back(gelu);
  for (const spec::JobSpec &job : jobs) {
    SCOPED_TRACE(job.ShortDebugString());
    ModelConfig c = resolved(job);
    mlir::MLIRContext context;
    mlir::OwningOpRef<mlir::ModuleOp> module = compileModel(context, job);
    ASSERT_TRUE(module);
    EXPECT_EQ(parameterCount(c), countParameters(*module).total);
  }
}

TEST(SizeLimits, LayersOverTheIrBudget) {
  // 2^18 ops at 264 per layer: 992 layers (992 * 264 = 261888 <= 262144 <
  // 993 * 264 = 262152).
  spec::JobSpec job = presetJob("tiny-llama", 16);
  job.mutable_model()->set_num_layers(992);
  EXPECT_EQ(resolveError(job), "");
  for (int64_t layers : {int64_t(993), int64_t(1000000), int64_t(1) << 30}) {
    job.mutable_model()->set_num_layers(layers);
    EXPECT_EQ(resolveError(job),
              "model.num_layers = " + std::to_string(layers) +
                  " is over the compiler's IR budget: about 264 ops per layer "
                  "make " +
                  std::to_string(layers * 264) +
                  " ops, more than 262144 (at most 992 layers) (docs/spec.md, "
                  "\"Size limits\")");
  }
}

TEST(SizeLimits, ParametersAndStateOverInt64) {
  // tiny-llama 2^29 wide: per layer q and o 2^58 each, k and v 2^57 each,
  // so 2 layers hold about 1.5 * 2^60 parameters; at 16 B each that is far
  // over 2^62 B (and over int64).
  spec::JobSpec job = presetJob("tiny-llama", 16);
  job.mutable_model()->set_hidden_size(int64_t(1) << 29);
  job.mutable_model()->set_ffn_hidden_size(176);
  std::string error = resolveError(job);
  EXPECT_TRUE(errorContains(error, "the parameters with their gradients and "
                                   "optimizer state, "));
  EXPECT_TRUE(errorContains(error, "model.hidden_size = 536870912"));
  EXPECT_TRUE(errorContains(error, "x 16 B = more than 2^63 B, are over the "
                                   "limit of 2^62 B"));
  // In bf16: 2 + 4 + 8 + 4 (master) = 18 B per parameter.
  job.mutable_train()->set_precision(spec::BF16);
  EXPECT_TRUE(errorContains(resolveError(job), "x 18 B = "));
  // The derived MLP of that width is over [1, 2^30] first, and says so.
  job = presetJob("tiny-llama", 16);
  job.mutable_model()->set_hidden_size(int64_t(1) << 29);
  EXPECT_TRUE(errorContains(resolveError(job),
                            "model.ffn_hidden_size = 1431655936, derived as "
                            "ceil(2/3 * 4 * hidden_size / 256) * 256 from "
                            "model.hidden_size = 536870912, must be in [1, "
                            "1073741824]"));
  EXPECT_EQ(llamaReferenceFfn(int64_t(1) << 29), 1431655936);
}

TEST(SizeLimits, TensorsOverInt64) {
  // One layer's QKV weight of a 2^30-wide model with 4 heads of 2^28:
  // 2^30 x (4 + 2 * 4) x 2^28 elements.
  spec::JobSpec job;
  spec::ModelSpec *m = job.mutable_model();
  m->set_family(spec::LLAMA);
  m->set_num_layers(1);
  m->set_hidden_size(int64_t(1) << 30);
  m->set_num_heads(4);
  m->set_ffn_hidden_size(16);
  m->set_vocab_size(16);
  job.mutable_data()->set_seq_length(16);
  const int64_t qkv = (int64_t(1) << 30) * 12 * (int64_t(1) << 28);
  EXPECT_TRUE(errorContains(resolveError(job),
                            "a layer's QKV weights, model.hidden_size = "
                            "1073741824 x (model.num_heads = 4 + 2 x "
                            "model.num_kv_heads = 4) x head size 268435456, "
                            "is " + std::to_string(qkv) +
                                " elements of 4 B = more than 2^63 B"));
  // Attention scores: 1 x 4 heads x (2^30)^2 = 2^62 elements.
  job = presetJob("tiny-llama", int64_t(1) << 30);
  EXPECT_TRUE(errorContains(resolveError(job),
                            "a layer's attention scores, "
                            "parallel.micro_batch_size = 1 x model.num_heads "
                            "= 4 x (data.seq_length = 1073741824)^2, is " +
                                std::to_string(int64_t(1) << 62) +
                                " elements of 4 B"));
  // Logits: 2^16 x 2^16 tokens x 2^30 rows = 2^62 elements.
  job = presetJob("tiny-llama", int64_t(1) << 16, int64_t(1) << 16);
  job.mutable_model()->set_vocab_size(int64_t(1) << 30);
  EXPECT_TRUE(errorContains(resolveError(job), "the logits, "));
  EXPECT_TRUE(errorContains(resolveError(job),
                            std::to_string(int64_t(1) << 62) +
                                " elements of 4 B = more than 2^63 B"));
}

TEST(SizeLimits, ForwardFlopsOverInt64) {
  // llama2-70b (about 6.9e10 matrix-product weights) on 2^14 x 4096 = 2^26
  // tokens: 2 * 2^26 * 6.9e10 is about 9.3e18 FLOPs, over 2^62 (4.6e18),
  // while its buffers fit.
  spec::JobSpec job = presetJob("llama2-70b", 4096, int64_t(1) << 14);
  EXPECT_TRUE(errorContains(resolveError(job),
                            "one micro-batch's forward, "
                            "parallel.micro_batch_size = 16384 x "
                            "data.seq_length = 4096 tokens of "));
  EXPECT_TRUE(errorContains(resolveError(job), "FLOPs, over the limit of 2^62"));
  // A 32-fold smaller batch is about 2.9e17 FLOPs: it resolves.
  job = presetJob("llama2-70b", 4096, int64_t(1) << 9);
  EXPECT_EQ(resolveError(job), "");
}

TEST(SizeLimits, ActivationsOfTheMicroBatchesAPipelineKeeps) {
  // tiny-llama on 2^20-token sequences resolves (one micro-batch's
  // activations are about 2e11 B), but a GPipe step of 2^25 micro-batches,
  // each of which it keeps, is over 2^62 B.
  spec::JobSpec job = presetJob("tiny-llama", int64_t(1) << 20);
  ModelConfig model = resolved(job);
  job.mutable_parallel()->set_pp(2);
  job.mutable_parallel()->set_schedule("gpipe");
  job.mutable_parallel()->set_global_batch_size(int64_t(1) << 25);
  llvm::Expected<ParallelConfig> parallel = resolveParallel(job, model);
  ASSERT_FALSE(bool(parallel));
  EXPECT_TRUE(errorContains(
      llvm::toString(parallel.takeError()),
      "the activations of 33554432 micro-batches (parallel.schedule = "
      "\"gpipe\" keeps all of a step's, parallel.global_batch_size / "
      "(parallel.micro_batch_size x parallel.dp)) (parallel.micro_batch_size "
      "= 1 x data.seq_length = 1048576, model.num_layers = 2, "));
  // 1F1B keeps at most pp of them, and no pipeline one.
  job.mutable_parallel()->set_schedule("1f1b");
  EXPECT_TRUE(bool(resolveParallel(job, model)));
  job.mutable_parallel()->clear_schedule();
  job.mutable_parallel()->set_pp(1);
  EXPECT_TRUE(bool(resolveParallel(job, model)));
  // GPipe with fewer micro-batches fits.
  job.mutable_parallel()->set_pp(2);
  job.mutable_parallel()->set_schedule("gpipe");
  job.mutable_parallel()->set_global_batch_size(1024);
  EXPECT_TRUE(bool(resolveParallel(job, model)));
}

TEST(SizeLimits, PublishedModelsAreWellInside) {
  for (auto [preset, seq] : {std::pair<const char *, int64_t>{"bloom-176b", 2048},
                             {"llama2-70b", 4096},
                             {"internlm-65b", 2048}}) {
    spec::JobSpec job = presetJob(preset, seq, 8);
    job.mutable_parallel()->set_global_batch_size(4096);
    job.mutable_train()->set_precision(spec::BF16);
    ModelConfig model = resolved(job);
    EXPECT_TRUE(bool(resolveParallel(job, model))) << preset;
    job.mutable_parallel()->set_pp(10);
    job.mutable_parallel()->set_global_batch_size(8 * 160);
    llvm::Expected<ParallelConfig> pipelined = resolveParallel(job, model);
    EXPECT_TRUE(bool(pipelined))
        << preset << ": " << llvm::toString(pipelined.takeError());
  }
}

// The runtime completes an imported config.json with its class's defaults
// (withHFClassDefaults, frontends/spec/HFImport.h) to compare it with a
// plan's model; those must be the defaults resolveModel gives, for every
// architecture, stated fields or not.
TEST(HFConfig, ClassDefaultsAreTheResolversDefaults) {
  std::vector<std::pair<std::string, std::string>> configs = {
      {"llama-minimal", R"({"architectures": ["LlamaForCausalLM"],
        "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
        "num_hidden_layers": 2, "vocab_size": 512})"},
      {"aquila-minimal", R"({"architectures": ["AquilaForCausalLM"],
        "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
        "num_hidden_layers": 2, "vocab_size": 512})"},
      {"internlm-minimal", R"({"architectures": ["InternLMForCausalLM"],
        "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
        "num_hidden_layers": 2, "vocab_size": 512})"},
      {"baichuan-alibi-minimal", R"({"architectures": ["BaichuanForCausalLM"],
        "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
        "num_hidden_layers": 2, "vocab_size": 512, "model_max_length": 256})"},
      {"gpt2-minimal", R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 64,
        "n_layer": 2, "n_head": 4, "vocab_size": 512, "n_positions": 128})"},
      {"bloom-minimal", R"({"architectures": ["BloomForCausalLM"],
        "hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 512})"},
  };
  for (const std::string &name : hfInputs())
    if (!isMalformedInput(name))
      configs.push_back({name, *readFile(inputPath("hf/" + name))});
  for (const auto &[name, text] : configs) {
    llvm::Expected<spec::ModelSpec> imported = importHFConfigText(text, name);
    ASSERT_TRUE(bool(imported)) << name << ": "
                                << llvm::toString(imported.takeError());
    spec::JobSpec job;
    *job.mutable_model() = *imported;
    job.mutable_model()->clear_hf_config();
    spec::ModelSpec completed = withHFClassDefaults(*imported);
    completed.clear_hf_config();
    spec::ModelSpec fromResolver = inlineModelSpec(resolved(job));
    EXPECT_EQ(completed.DebugString(), fromResolver.DebugString()) << name;
  }
}

} // namespace
