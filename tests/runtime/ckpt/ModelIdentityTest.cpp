//===- ModelIdentityTest.cpp - Is a checkpoint of the plan's model? -------===//
//
// The models are hand-written ModelSpec texts (tiny-llama's, as a plan
// carries it: every field set) and hand-written config.json files; each
// expected message is spelled out from the two models' fields.
//
//===----------------------------------------------------------------------===//

#include "runtime/ckpt/HFCheckpoint.h"
#include "runtime/ckpt/ModelIdentity.h"

#include "RawSafetensors.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include <google/protobuf/text_format.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

using namespace braid;
using namespace braid::ckpt;
using namespace braid::ckpt::testing;

namespace {

/// tiny-llama, every field set (as compiler/PlanExport.cpp writes a plan's
/// model_spec).
const char kTinyLlama[] = R"(family: LLAMA
num_layers: 2
hidden_size: 64
num_heads: 4
num_kv_heads: 2
ffn_hidden_size: 176
vocab_size: 512
make_vocab_size_divisible_by: 1
max_seq_len: 128
norm: RMS_NORM
norm_eps: 1e-05
activation: SWIGLU
position_embedding: ROPE
rope_theta: 10000
tie_embeddings: false
attention_bias: false
mlp_bias: false
embedding_norm: false
init_std: 0.02
hidden_dropout: 0
attention_dropout: 0
embedding_dropout: 0
fuse_mlp: false
)";

spec::ModelSpec tinyLlama() {
  absl::StatusOr<spec::ModelSpec> m = ParseModelSpec(kTinyLlama, "tiny-llama");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : spec::ModelSpec();
}

std::string text(const spec::ModelSpec &m) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(m, &out);
  return out;
}

/// The message of CheckSameModel of two Braid checkpoints' models.
std::string refusal(const spec::ModelSpec &there, const spec::ModelSpec &here,
                    const std::set<std::string> &allowed = {}) {
  std::vector<std::string> notes;
  absl::Status s = CheckSameModel("checkpoint C", there, here,
                                  ModelOrigin::kBraidCheckpoint, allowed,
                                  &notes);
  EXPECT_TRUE(notes.empty() || !s.ok());
  return s.ok() ? "" : std::string(s.message());
}

// The issue's case: tiny-llama recompiled with 8 heads of 8 and 4 kv heads
// has every tensor of the 4-head model in the same shape, and another RoPE
// theta and norm eps: each differing field is named with both values.
TEST(ModelIdentity, RefusesOtherHeadsThetaAndEps) {
  spec::ModelSpec saved = tinyLlama(), loading = tinyLlama();
  loading.set_num_heads(8);
  loading.set_num_kv_heads(4);
  loading.set_rope_theta(500000);
  loading.set_norm_eps(0.1);
  std::vector<std::string> notes;
  absl::Status s = CheckCheckpointModel("checkpoint ckpt/step-00000010",
                                        text(saved), text(loading), {}, &notes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "checkpoint ckpt/step-00000010 is of another model: num_heads is "
            "4 there but 8 here; num_kv_heads is 2 there but 4 here; head_dim "
            "is 16 there but 8 here; norm_eps is 1e-05 there but 0.1 here; "
            "rope_theta is 10000 there but 500000 here");
  EXPECT_TRUE(notes.empty());
  // The same model loads without a word.
  EXPECT_TRUE(CheckCheckpointModel("checkpoint C", text(saved), text(saved),
                                   {}, &notes)
                  .ok());
  EXPECT_TRUE(notes.empty());
}

// Every architectural field is compared, each refusal naming it, and
// --allow-model-change cannot accept any of them.
TEST(ModelIdentity, EveryArchitecturalFieldIsCompared) {
  struct Change {
    const char *named; // in "NAMED is A there but B here"
    std::function<void(spec::ModelSpec &)> apply;
  };
  const std::vector<Change> changes = {
      {"family is llama there but aquila here",
       [](spec::ModelSpec &m) { m.set_family(spec::AQUILA); }},
      {"num_layers is 2 there but 3 here",
       [](spec::ModelSpec &m) { m.set_num_layers(3); }},
      {"hidden_size is 64 there but 128 here",
       [](spec::ModelSpec &m) { m.set_hidden_size(128); }},
      {"num_kv_heads is 2 there but 4 here",
       [](spec::ModelSpec &m) { m.set_num_kv_heads(4); }},
      {"ffn_hidden_size is 176 there but 192 here",
       [](spec::ModelSpec &m) { m.set_ffn_hidden_size(192); }},
      {"vocab_size is 512 there but 500 here",
       [](spec::ModelSpec &m) { m.set_vocab_size(500); }},
      {"padded_vocab_size is 512 there but 640 here",
       [](spec::ModelSpec &m) { m.set_make_vocab_size_divisible_by(128);
                                m.set_vocab_size(520); }},
      {"norm is rms_norm there but layer_norm here",
       [](spec::ModelSpec &m) { m.set_norm(spec::LAYER_NORM); }},
      {"norm_eps is 1e-05 there but 1e-06 here",
       [](spec::ModelSpec &m) { m.set_norm_eps(1e-6); }},
      {"activation is swiglu there but gelu here",
       [](spec::ModelSpec &m) { m.set_activation(spec::GELU); }},
      {"position_embedding is rope there but alibi here",
       [](spec::ModelSpec &m) { m.set_position_embedding(spec::ALIBI); }},
      {"rope_theta is 10000 there but 1000000 here",
       [](spec::ModelSpec &m) { m.set_rope_theta(1e6); }},
      {"tie_embeddings is false there but true here",
       [](spec::ModelSpec &m) { m.set_tie_embeddings(true); }},
      {"attention_bias is false there but true here",
       [](spec::ModelSpec &m) { m.set_attention_bias(true); }},
      {"mlp_bias is false there but true here",
       [](spec::ModelSpec &m) { m.set_mlp_bias(true); }},
      {"embedding_norm is false there but true here",
       [](spec::ModelSpec &m) { m.set_embedding_norm(true); }},
      {"fuse_mlp is false there but true here",
       [](spec::ModelSpec &m) { m.set_fuse_mlp(true); }},
  };
  for (const Change &c : changes) {
    spec::ModelSpec here = tinyLlama();
    c.apply(here);
    std::string field = std::string(c.named).substr(0, std::string(c.named).find(' '));
    // Even when the run names the field.
    std::string message = refusal(tinyLlama(), here, {field});
    EXPECT_TRUE(absl::StartsWith(message, "checkpoint C is of another model: "))
        << message;
    EXPECT_TRUE(absl::StrContains(message, c.named)) << message;
    EXPECT_FALSE(absl::StrContains(message, "--allow-model-change")) << message;
  }
}

// A Braid checkpoint loads only in the layout it was saved with: a fused
// MLP is refused, saying how to convert it.
TEST(ModelIdentity, FusedMlpSaysHowToConvert) {
  spec::ModelSpec fused = tinyLlama();
  fused.set_fuse_mlp(true);
  EXPECT_EQ(refusal(tinyLlama(), fused),
            "checkpoint C is of another model: fuse_mlp is false there but "
            "true here (a Braid checkpoint loads in the layout it was saved "
            "with (mlp.gate_up_proj, or mlp.gate_proj and mlp.up_proj): "
            "export it (braid-ckpt export CKPT --hf DIR) and --init-from DIR, "
            "which reads either)");
}

// --allow-model-change accepts a dropout, init_std and (RoPE, ALiBi)
// max_seq_len, with a note; without it they are refused, saying so.
TEST(ModelIdentity, AllowModelChangeAcceptsWhatIsMeaningful) {
  spec::ModelSpec saved = tinyLlama(), loading = tinyLlama();
  saved.set_hidden_dropout(0.1);
  EXPECT_EQ(refusal(saved, loading),
            "checkpoint C is of another model: hidden_dropout is 0.1 there "
            "but 0 here (--allow-model-change hidden_dropout would accept "
            "that difference)");
  std::vector<std::string> notes;
  absl::Status s = CheckSameModel("checkpoint C", saved, loading,
                                  ModelOrigin::kBraidCheckpoint,
                                  {"hidden_dropout"}, &notes);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "note: checkpoint C differs from this model in "
                      "hidden_dropout (0.1 there, 0 here), as "
                      "--allow-model-change accepts");

  // Allowing one field does not accept another.
  loading.set_num_heads(8);
  EXPECT_EQ(refusal(saved, loading, {"hidden_dropout"}),
            "checkpoint C is of another model: num_heads is 4 there but 8 "
            "here; head_dim is 16 there but 8 here");
  EXPECT_EQ(refusal(saved, loading),
            "checkpoint C is of another model: num_heads is 4 there but 8 "
            "here; head_dim is 16 there but 8 here; hidden_dropout is 0.1 "
            "there but 0 here (--allow-model-change hidden_dropout would "
            "accept the difference in hidden_dropout, not the others)");

  // init_std, the other dropouts and RoPE's max_seq_len.
  spec::ModelSpec other = tinyLlama();
  other.set_init_std(0.01);
  other.set_attention_dropout(0.2);
  other.set_embedding_dropout(0.3);
  other.set_max_seq_len(4096);
  notes.clear();
  s = CheckSameModel("checkpoint C", tinyLlama(), other,
                     ModelOrigin::kBraidCheckpoint,
                     {"init_std", "attention_dropout", "embedding_dropout",
                      "max_seq_len"},
                     &notes);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "note: checkpoint C differs from this model in max_seq_len (128 "
            "there, 4096 here), init_std (0.02 there, 0.01 here), "
            "attention_dropout (0 there, 0.2 here), embedding_dropout (0 "
            "there, 0.3 here), as --allow-model-change accepts");
}

// Learned positions are a table of max_seq_len rows: another length is
// another model even when the run names the field.
TEST(ModelIdentity, LearnedPositionsKeepTheirLength) {
  spec::ModelSpec gpt = tinyLlama();
  gpt.set_family(spec::GPT2);
  gpt.set_position_embedding(spec::LEARNED);
  spec::ModelSpec longer = gpt;
  longer.set_max_seq_len(256);
  EXPECT_EQ(refusal(gpt, longer, {"max_seq_len"}),
            "checkpoint C is of another model: max_seq_len is 128 there but "
            "256 here (learned positions: the position table has max_seq_len "
            "rows)");
}

TEST(ModelIdentity, FlagNamesOnlyMeaningfulFields) {
  for (const char *field : {"hidden_dropout", "attention_dropout",
                            "embedding_dropout", "init_std", "max_seq_len"})
    EXPECT_TRUE(CheckAllowableModelChange(field).ok()) << field;
  const std::string takes =
      " (it takes hidden_dropout, attention_dropout, embedding_dropout, "
      "init_std and max_seq_len (of a RoPE or ALiBi model))";
  EXPECT_EQ(std::string(CheckAllowableModelChange("num_heads").message()),
            "--allow-model-change num_heads: num_heads is architectural: "
            "weights trained with another num_heads are of another model" +
                takes);
  EXPECT_EQ(std::string(CheckAllowableModelChange("rope_theta").message()),
            "--allow-model-change rope_theta: rope_theta is architectural: "
            "weights trained with another rope_theta are of another model" +
                takes);
  EXPECT_EQ(std::string(CheckAllowableModelChange("head_dim").message()),
            "--allow-model-change head_dim: head_dim follows from hidden_size "
            "and num_heads, which are architectural" +
                takes);
  EXPECT_TRUE(absl::StartsWith(
      CheckAllowableModelChange("fuse_mlp").message(),
      "--allow-model-change fuse_mlp: a Braid checkpoint loads only in the "
      "layout it was saved with"));
  EXPECT_EQ(std::string(CheckAllowableModelChange("dropout").message()),
            "--allow-model-change dropout: no model field has that name" +
                takes);
}

// A checkpoint or a plan that does not record its model cannot be
// compared: a warning, not an error (the tensors are still compared).
TEST(ModelIdentity, UnrecordedModelIsAWarning) {
  std::vector<std::string> notes;
  ASSERT_TRUE(
      CheckCheckpointModel("checkpoint old", "", kTinyLlama, {}, &notes).ok());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "warning: the model of checkpoint old cannot be "
                      "checked: its manifest does not record it (saved before "
                      "checkpoints did); only its parameters' names and "
                      "shapes are compared");
  notes.clear();
  ASSERT_TRUE(
      CheckCheckpointModel("checkpoint new", kTinyLlama, "", {}, &notes).ok());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "warning: the model of checkpoint new cannot be "
                      "checked: the plan does not record its model (compiled "
                      "before plans did); only its parameters' names and "
                      "shapes are compared");
}

TEST(ModelIdentity, MalformedSpecsAreNamed) {
  absl::Status s = CheckCheckpointModel("checkpoint C", "family: LLAMA\nnum_",
                                        kTinyLlama, {}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(
      s.message(), "checkpoint C: the manifest's model_spec is not a "
                   "braid.spec.ModelSpec in text format (line 2:"))
      << s;
  s = CheckCheckpointModel("checkpoint C", "family: LLAMA\nnum_layers: 2\n",
                           kTinyLlama, {}, nullptr);
  EXPECT_EQ(std::string(s.message()), "checkpoint C: the manifest's model_spec does not "
                         "state the model's hidden_size, num_heads, "
                         "vocab_size");
  // A newer writer's field is skipped.
  s = CheckCheckpointModel("checkpoint C",
                           std::string(kTinyLlama) + "rope_scaling_factor: 2\n",
                           kTinyLlama, {}, nullptr);
  EXPECT_TRUE(s.ok()) << s;
}

//===-- Hugging Face config.json ------------------------------------------===//

class HFModelTest : public ::testing::Test {
protected:
  HFModelTest() : dir_("hf-model") {
    // The weights are not read by the check; a directory needs some.
    writeBytes(dir_.file("model.safetensors"),
               rawFile(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                       f32({1.0f})));
  }

  /// CheckHFModel of a directory whose config.json is `config`, against
  /// `plan` (tiny-llama by default).
  absl::Status check(const std::string &config,
                     const std::string &plan = kTinyLlama,
                     const std::set<std::string> &allowed = {}) {
    notes_.clear();
    writeBytes(dir_.file("config.json"), config);
    absl::StatusOr<HFCheckpoint> ckpt = OpenHFCheckpoint(dir_.path());
    if (!ckpt.ok())
      return ckpt.status();
    return CheckHFModel(*ckpt, plan, allowed, &notes_);
  }
  std::string what() const {
    return "checkpoint " + dir_.path() + " (config.json) is of another model: ";
  }

  TempDir dir_;
  std::vector<std::string> notes_;
};

/// tiny-llama's config.json with `extra` fields (JSON members) in place of
/// the ones they name.
std::string llamaConfig(const std::string &heads = "4",
                        const std::string &theta = "10000.0",
                        const std::string &eps = "1e-05") {
  return R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": )" +
         heads + R"(, "num_key_value_heads": 2, "num_hidden_layers": 2,
  "vocab_size": 512, "max_position_embeddings": 128, "rms_norm_eps": )" +
         eps + R"(, "rope_theta": )" + theta +
         R"(, "tie_word_embeddings": false, "hidden_act": "silu"})";
}

TEST_F(HFModelTest, SameModelLoads) {
  absl::Status s = check(llamaConfig());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(notes_.empty());
  // The loader reads fused and unfused projections alike: not compared.
  spec::ModelSpec fused = tinyLlama();
  fused.set_fuse_mlp(true);
  s = check(llamaConfig(), text(fused));
  EXPECT_TRUE(s.ok()) << s;
}

// The issue's config.json: 8 heads, theta 5e5, eps 0.1 for a 4-head model.
TEST_F(HFModelTest, RefusesHeadsThetaAndEps) {
  absl::Status s = check(llamaConfig("8", "500000.0", "0.1"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            what() + "num_heads is 8 there but 4 here; head_dim is 8 there but "
                     "16 here; norm_eps is 0.1 there but 1e-05 here; "
                     "rope_theta is 500000 there but 10000 here");
}

// A config.json that holds only hidden_size is refused by the importer,
// with its own message (no model class).
TEST_F(HFModelTest, RefusesConfigWithoutArchitecture) {
  absl::Status s = check(R"({"hidden_size": 64})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            dir_.file("config.json") +
                ": missing required field \"architectures\" (a list naming "
                "the model class, e.g. [\"LlamaForCausalLM\"])");
  s = check(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})");
  EXPECT_EQ(std::string(s.message()), dir_.file("config.json") +
                             ": missing required field \"intermediate_size\"");
  // Checked even when the plan does not record its model.
  s = check(R"({"hidden_size": 64})", "");
  EXPECT_FALSE(s.ok());
}

// What the file does not state is its class's default (LlamaConfig:
// rope_theta 10000, rms_norm_eps 1e-6, max_position_embeddings 2048 when
// stated nowhere but compared only when stated).
TEST_F(HFModelTest, UnstatedFieldsTakeTheClassDefaults) {
  spec::ModelSpec plan = tinyLlama();
  plan.set_rope_theta(500000);
  absl::Status s = check(R"({"architectures": ["LlamaForCausalLM"],
      "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
      "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512})",
                         text(plan));
  EXPECT_EQ(std::string(s.message()), what() + "norm_eps is 1e-06 there but 1e-05 here; "
                                  "rope_theta is 10000 there but 500000 here");
  // num_key_value_heads unstated: as many as the heads.
  s = check(R"({"architectures": ["LlamaForCausalLM"],
      "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
      "num_hidden_layers": 2, "vocab_size": 512, "rms_norm_eps": 1e-05})");
  EXPECT_EQ(std::string(s.message()), what() + "num_kv_heads is 4 there but 2 here");
}

// Hugging Face's vocab_size counts the embedding's rows: the plan's padded
// vocabulary.
TEST_F(HFModelTest, VocabSizeIsTheEmbeddingRows) {
  spec::ModelSpec padded = tinyLlama();
  padded.set_vocab_size(500);
  padded.set_make_vocab_size_divisible_by(512);
  absl::Status s = check(llamaConfig(), text(padded));
  EXPECT_TRUE(s.ok()) << s;
  padded.set_make_vocab_size_divisible_by(1);
  s = check(llamaConfig(), text(padded));
  EXPECT_EQ(std::string(s.message()), what() + "vocab_size is 512 there but 500 here");
  padded.set_make_vocab_size_divisible_by(128);
  padded.set_vocab_size(520);
  s = check(llamaConfig(), text(padded));
  EXPECT_EQ(std::string(s.message()),
            what() + "vocab_size is 512 there but 640 here (the rows of this "
                     "model's embedding: its 520 padded)");
}

// GPT-2's dropouts, stated in its config.json, may differ with
// --allow-model-change; its learned positions may not.
TEST_F(HFModelTest, Gpt2DropoutsAndPositions) {
  const std::string config = R"({"architectures": ["GPT2LMHeadModel"],
      "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 512,
      "n_positions": 128, "resid_pdrop": 0.1, "attn_pdrop": 0.1,
      "embd_pdrop": 0.1})";
  spec::ModelSpec gpt;
  gpt.set_family(spec::GPT2);
  gpt.set_num_layers(2);
  gpt.set_hidden_size(64);
  gpt.set_num_heads(4);
  gpt.set_num_kv_heads(4);
  gpt.set_ffn_hidden_size(256);
  gpt.set_vocab_size(512);
  gpt.set_make_vocab_size_divisible_by(1);
  gpt.set_max_seq_len(128);
  gpt.set_norm(spec::LAYER_NORM);
  gpt.set_norm_eps(1e-5);
  gpt.set_activation(spec::GELU_TANH);
  gpt.set_position_embedding(spec::LEARNED);
  gpt.set_rope_theta(10000);
  gpt.set_tie_embeddings(true);
  gpt.set_attention_bias(true);
  gpt.set_mlp_bias(true);
  gpt.set_embedding_norm(false);
  gpt.set_init_std(0.02);
  gpt.set_hidden_dropout(0.1);
  gpt.set_attention_dropout(0.1);
  gpt.set_embedding_dropout(0.1);
  gpt.set_fuse_mlp(false);
  absl::Status s = check(config, text(gpt));
  EXPECT_TRUE(s.ok()) << s;

  spec::ModelSpec fineTune = gpt;
  fineTune.set_hidden_dropout(0);
  s = check(config, text(fineTune));
  EXPECT_EQ(std::string(s.message()),
            what() + "hidden_dropout is 0.1 there but 0 here "
                     "(--allow-model-change hidden_dropout would accept that "
                     "difference)");
  s = check(config, text(fineTune), {"hidden_dropout"});
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_TRUE(absl::StrContains(notes_[0], "hidden_dropout (0.1 there, 0 here)"))
      << notes_[0];

  spec::ModelSpec longer = gpt;
  longer.set_max_seq_len(1024);
  s = check(config, text(longer), {"max_seq_len"});
  EXPECT_EQ(std::string(s.message()),
            what() + "max_seq_len is 128 there but 1024 here (learned "
                     "positions: the position table has max_seq_len rows)");
}

// BloomForCausalLM states no position limit: nothing to compare.
TEST_F(HFModelTest, BloomHasNoPositionLimit) {
  spec::ModelSpec bloom;
  bloom.set_family(spec::BLOOM);
  bloom.set_num_layers(2);
  bloom.set_hidden_size(64);
  bloom.set_num_heads(4);
  bloom.set_num_kv_heads(4);
  bloom.set_ffn_hidden_size(256);
  bloom.set_vocab_size(512);
  bloom.set_make_vocab_size_divisible_by(1);
  bloom.set_max_seq_len(4096);
  bloom.set_norm(spec::LAYER_NORM);
  bloom.set_norm_eps(1e-5);
  bloom.set_activation(spec::GELU_TANH);
  bloom.set_position_embedding(spec::ALIBI);
  bloom.set_rope_theta(10000);
  bloom.set_tie_embeddings(true);
  bloom.set_attention_bias(true);
  bloom.set_mlp_bias(true);
  bloom.set_embedding_norm(true);
  bloom.set_init_std(0.02);
  bloom.set_fuse_mlp(false);
  const std::string config = R"({"architectures": ["BloomForCausalLM"],
      "hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 512})";
  absl::Status s = check(config, text(bloom));
  EXPECT_TRUE(s.ok()) << s;
  bloom.set_embedding_norm(false);
  s = check(config, text(bloom));
  EXPECT_EQ(std::string(s.message()), what() + "embedding_norm is true there but false here");
}

TEST_F(HFModelTest, PlanWithoutModelIsAWarning) {
  absl::Status s = check(llamaConfig("8"), "");
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_EQ(notes_[0], "warning: the model of checkpoint " + dir_.path() +
                           " (config.json) cannot be checked: the plan does "
                           "not record its model (compiled before plans did); "
                           "only its parameters' names and shapes are "
                           "compared");
}

} // namespace
