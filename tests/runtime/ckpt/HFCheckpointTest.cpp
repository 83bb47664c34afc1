//===- HFCheckpointTest.cpp - Hugging Face checkpoint directories ---------===//
//
// Checkpoint directories are assembled from hand-written safetensors files
// (RawSafetensors.h) and hand-written index/config JSON; the expected floats
// are the values those bytes encode.
//
//===----------------------------------------------------------------------===//

#include "runtime/ckpt/HFCheckpoint.h"

#include "RawSafetensors.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include <map>
#include <string>
#include <vector>

using namespace braid::ckpt;
using namespace braid::ckpt::testing;

namespace {

/// A hand-written F32 tensor entry and its data for one file.
struct RawTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

/// A safetensors file of F32 tensors, laid out in the given order.
std::string f32File(const std::vector<RawTensor> &tensors) {
  std::string header = "{";
  std::string data;
  for (const RawTensor &t : tensors) {
    if (header.size() > 1)
      header += ",";
    std::string shape;
    for (int64_t d : t.shape)
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const size_t begin = data.size();
    data += f32(t.values);
    header += "\"" + t.name + "\":{\"dtype\":\"F32\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(begin) + "," +
              std::to_string(data.size()) + "]}";
  }
  header += "}";
  return rawFile(header, data);
}

class HFCheckpointTest : public ::testing::Test {
protected:
  HFCheckpointTest() : dir_("hf") {
    writeBytes(dir_.file("config.json"),
               R"({"model_type": "llama", "hidden_size": 2})");
  }

  /// Loads `expected` into fresh buffers filled with a sentinel.
  absl::Status load(const std::vector<ParamSpec> &expected) {
    auto ckpt = OpenHFCheckpoint(dir_.path());
    if (!ckpt.ok())
      return ckpt.status();
    buffers_.clear();
    for (const ParamSpec &p : expected) {
      size_t n = 1;
      for (int64_t d : p.shape)
        n *= static_cast<size_t>(d);
      buffers_.emplace_back(n, -999.0f);
    }
    return LoadParameters(*ckpt, expected,
                          [&](size_t i) { return buffers_[i].data(); });
  }
  bool untouched() const {
    for (const auto &b : buffers_)
      for (float v : b)
        if (v != -999.0f)
          return false;
    return true;
  }
  std::string where() const { return "checkpoint " + dir_.path() + ": "; }

  TempDir dir_;
  std::vector<std::vector<float>> buffers_;
};

TEST_F(HFCheckpointTest, LoadsSingleFileWithConversions) {
  // BF16 [2] = {1, -2}, F16 [2] = {1, 2^-24}, F32 [2, 2].
  const std::string header =
      R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("model.norm.weight":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},)"
      R"("lm_head.weight":{"dtype":"F16","shape":[2],"data_offsets":[20,24]},)"
      R"("model.layers.0.self_attn.rotary_emb.inv_freq":{"dtype":"F32","shape":[1],"data_offsets":[24,28]}})";
  writeBytes(dir_.file("model.safetensors"),
             rawFile(header, f32({1, 2, 3, 4}) + bits16({0x3F80, 0xC000}) +
                                 bits16({0x3C00, 0x0001}) + f32({0.5f})));
  // A stray file that model.safetensors takes precedence over.
  writeBytes(dir_.file("other.safetensors"), "garbage");
  ASSERT_TRUE(load({{"model.embed_tokens.weight", {2, 2}},
                    {"model.norm.weight", {2}},
                    {"lm_head.weight", {2}}})
                  .ok());
  EXPECT_EQ(buffers_[0], (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(buffers_[1], (std::vector<float>{1, -2}));
  EXPECT_EQ(buffers_[2], (std::vector<float>{1, 5.9604644775390625e-8f}));

  auto ckpt = OpenHFCheckpoint(dir_.path());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ(ckpt->configJson(), R"({"model_type": "llama", "hidden_size": 2})");
  EXPECT_EQ(ckpt->files().size(), 1u);
}

TEST_F(HFCheckpointTest, LoadsShardsThroughIndex) {
  writeBytes(dir_.file("model-00001-of-00002.safetensors"),
             f32File({{"model.layers.0.mlp.up_proj.weight", {2, 3},
                       {1, 2, 3, 4, 5, 6}},
                      {"model.embed_tokens.weight", {1, 2}, {7, 8}}}));
  writeBytes(dir_.file("model-00002-of-00002.safetensors"),
             f32File({{"model.norm.weight", {2}, {9, 10}}}));
  // Mistral-style leftovers beside the shards are not read.
  writeBytes(dir_.file("consolidated.safetensors"), "garbage");
  writeBytes(dir_.file("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 40},
    "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.mlp.up_proj.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors"
    }})");
  absl::Status s = load({{"model.norm.weight", {2}},
                         {"model.embed_tokens.weight", {1, 2}},
                         {"model.layers.0.mlp.up_proj.weight", {2, 3}}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(buffers_[0], (std::vector<float>{9, 10}));
  EXPECT_EQ(buffers_[1], (std::vector<float>{7, 8}));
  EXPECT_EQ(buffers_[2], (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(HFCheckpointTest, RefusesInconsistentIndex) {
  writeBytes(dir_.file("a.safetensors"), f32File({{"x", {1}, {1}}}));
  writeBytes(dir_.file("b.safetensors"), f32File({{"y", {1}, {2}}}));
  const std::string index = dir_.file("model.safetensors.index.json");
  auto open = [&](const std::string &json) {
    writeBytes(index, json);
    auto ckpt = OpenHFCheckpoint(dir_.path());
    return ckpt.ok() ? std::string() : std::string(ckpt.status().message());
  };
  EXPECT_EQ(open(R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors"}})"),
            index + " maps tensor \"y\" to a.safetensors, which does not hold "
                    "it");
  EXPECT_EQ(open(R"({"weight_map":{"x":"a.safetensors"}})"), "");
  EXPECT_EQ(open(R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})"),
            index + " maps tensor \"y\" to a.safetensors, but it is in " +
                dir_.file("b.safetensors"));
  EXPECT_EQ(open(R"({"weight_map":{"x":"../a.safetensors"}})"),
            index + ": weight_map[\"x\"] is \"../a.safetensors\", not the name "
                    "of a file in the checkpoint directory");
  EXPECT_EQ(open(R"({"metadata":{}})"),
            index + ": no \"weight_map\" object (tensor name -> file name)");
  EXPECT_EQ(open(R"({"weight_map":{"x":"c.safetensors"}})"),
            "cannot open " + dir_.file("c.safetensors") +
                ": No such file or directory (a shard that " + index +
                " names)");
  writeBytes(dir_.file("b.safetensors"),
             f32File({{"y", {1}, {2}}, {"w", {1}, {3}}}));
  EXPECT_EQ(open(R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})"),
            index + " does not list tensor \"w\" of " +
                dir_.file("b.safetensors") + " (an inconsistent index)");
}

TEST_F(HFCheckpointTest, WithoutIndexReadsAllFilesAndRefusesDuplicates) {
  writeBytes(dir_.file("part1.safetensors"), f32File({{"x", {1}, {1}}}));
  writeBytes(dir_.file("part2.safetensors"), f32File({{"y", {2}, {2, 3}}}));
  writeBytes(dir_.file("notes.txt"), "not a weight file");
  ASSERT_TRUE(load({{"x", {1}}, {"y", {2}}}).ok());
  EXPECT_EQ(buffers_[1], (std::vector<float>{2, 3}));
  writeBytes(dir_.file("part3.safetensors"), f32File({{"x", {1}, {5}}}));
  auto ckpt = OpenHFCheckpoint(dir_.path());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().message(),
            where() + "tensor \"x\" is in both " +
                dir_.file("part1.safetensors") + " and " +
                dir_.file("part3.safetensors"));
}

TEST_F(HFCheckpointTest, RefusesBadDirectories) {
  auto ckpt = OpenHFCheckpoint(dir_.file("absent"));
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ckpt.status().message(),
            "checkpoint directory " + dir_.file("absent") + " does not exist");
  ckpt = OpenHFCheckpoint(dir_.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ckpt.status().message(),
            "checkpoint " + dir_.path() +
                " has no weights: no model.safetensors.index.json, no "
                "model.safetensors and no other *.safetensors file");
  writeBytes(dir_.file("model.safetensors"), f32File({{"x", {1}, {1}}}));
  writeBytes(dir_.file("config.json"), "{\"a\": ");
  ckpt = OpenHFCheckpoint(dir_.path());
  EXPECT_TRUE(absl::StartsWith(ckpt.status().message(),
                               dir_.file("config.json") + ": malformed JSON: "))
      << ckpt.status();
  std::filesystem::remove(dir_.file("config.json"));
  ckpt = OpenHFCheckpoint(dir_.path());
  EXPECT_EQ(ckpt.status().message(),
            "checkpoint " + dir_.path() +
                " has no config.json (a Hugging Face checkpoint directory "
                "holds config.json next to its *.safetensors files)");
  writeBytes(dir_.file("config.json"), "{}");
  writeBytes(dir_.file("model.safetensors"), le64(99));
  ckpt = OpenHFCheckpoint(dir_.path());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(HFCheckpointTest, MissingAndExtraTensorsAreNamed) {
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"a", {1}, {1}}, {"extra.one", {1}, {2}},
                      {"extra.two", {1}, {3}}}));
  absl::Status s = load({{"a", {1}}, {"b", {1}}, {"c", {2}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            where() + "the model expects 2 tensors that the checkpoint lacks: "
                      "b, c; the checkpoint holds 2 tensors that the model "
                      "does not expect: extra.one, extra.two");
  EXPECT_TRUE(untouched());
  s = load({{"a", {1}}, {"extra.one", {1}}, {"extra.two", {1}}, {"b", {1}}});
  EXPECT_EQ(s.message(),
            where() + "the model expects 1 tensor that the checkpoint lacks: b");
  s = load({{"a", {1}}});
  EXPECT_EQ(s.message(), where() + "the checkpoint holds 2 tensors that the "
                                   "model does not expect: extra.one, "
                                   "extra.two");

  std::vector<ParamSpec> many = {{"a", {1}}, {"extra.one", {1}},
                                 {"extra.two", {1}}};
  for (int i = 0; i < 12; ++i)
    many.push_back({"m" + std::to_string(i), {1}});
  s = load(many);
  EXPECT_EQ(s.message(), where() + "the model expects 12 tensors that the "
                                   "checkpoint lacks: m0, m1, m2, m3, m4, m5, "
                                   "m6, m7, m8, m9, ... (and 2 more)");
}

TEST_F(HFCheckpointTest, ShapeMismatchesAreNamed) {
  std::vector<float> sixteen(16, 1.0f);
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"model.layers.0.self_attn.q_proj.weight", {4, 4},
                       sixteen},
                      {"model.layers.0.self_attn.k_proj.weight", {2, 4},
                       std::vector<float>(8, 2.0f)},
                      {"model.norm.weight", {4}, {1, 2, 3, 4}}}));
  absl::Status s = load({{"model.layers.0.self_attn.q_proj.weight", {4, 2}},
                         {"model.layers.0.self_attn.k_proj.weight", {2, 4}},
                         {"model.norm.weight", {1, 4}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            where() + "tensor model.layers.0.self_attn.q_proj.weight: "
                      "checkpoint has shape [4, 4] but the model expects "
                      "[4, 2]; tensor model.norm.weight: checkpoint has shape "
                      "[4] but the model expects [1, 4]");
  EXPECT_TRUE(untouched());
}

TEST_F(HFCheckpointTest, RefusesNonFloatParameters) {
  writeBytes(dir_.file("model.safetensors"),
             rawFile(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                     le64(3)));
  absl::Status s = load({{"ids", {1}}});
  EXPECT_EQ(s.message(), where() + "tensor ids: checkpoint stores it as I64, "
                                   "not a float dtype (F16, BF16, F32, F64)");
}

// A weight that is not a number (NaN, infinity; BF16's 0x7FC0 is NaN) is a
// corrupt file, named with the element.
TEST_F(HFCheckpointTest, RefusesNonFiniteWeights) {
  const std::string header =
      R"({"model.norm.weight":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},)"
      R"("model.embed_tokens.weight":{"dtype":"F32","shape":[2],"data_offsets":[6,14]}})";
  writeBytes(dir_.file("model.safetensors"),
             rawFile(header, bits16({0x3F80, 0x3F80, 0x7FC0}) +
                                 f32({1.0f, 2.0f})));
  absl::Status s = load({{"model.embed_tokens.weight", {2}},
                         {"model.norm.weight", {3}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), where() + "tensor \"model.norm.weight\": element 2 "
                                   "is nan (a model's weights are finite "
                                   "numbers)");
  writeBytes(dir_.file("model.safetensors"),
             rawFile(header, bits16({0x3F80, 0x3F80, 0x3F80}) +
                                 f32({1.0f, -INFINITY})));
  s = load({{"model.embed_tokens.weight", {2}}, {"model.norm.weight", {3}}});
  EXPECT_EQ(s.message(), where() + "tensor \"model.embed_tokens.weight\": "
                                   "element 1 is -inf (a model's weights are "
                                   "finite numbers)");
}

// Older GPT-2 checkpoints lack "transformer."; the attention mask buffers are
// ignored; Conv1D weights stay [in, out] (not transposed).
TEST_F(HFCheckpointTest, Gpt2UnprefixedNamesAndBuffers) {
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"wte.weight", {3, 2}, {1, 2, 3, 4, 5, 6}},
                      {"h.0.attn.c_attn.weight", {2, 6},
                       {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
                      {"h.0.attn.bias", {1, 1, 2, 2}, {1, 0, 1, 1}},
                      {"h.0.attn.masked_bias", {}, {-1e4f}},
                      {"lm_head.weight", {3, 2}, {1, 2, 3, 4, 5, 6}}}));
  absl::Status s = load({{"transformer.wte.weight", {3, 2}},
                         {"transformer.h.0.attn.c_attn.weight", {2, 6}}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(buffers_[0], (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(buffers_[1],
            (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  // And the other way round: a prefixed checkpoint, unprefixed model names.
  s = load({{"h.0.attn.c_attn.weight", {6, 2}}, {"wte.weight", {3, 2}}});
  EXPECT_EQ(s.message(), where() + "tensor h.0.attn.c_attn.weight: checkpoint "
                                   "has shape [2, 6] but the model expects "
                                   "[6, 2]");
}

TEST_F(HFCheckpointTest, PrefixedCheckpointUnprefixedModel) {
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"transformer.wte.weight", {1, 2}, {1, 2}},
                      {"transformer.h.0.attn.c_attn.weight", {2, 6},
                       std::vector<float>(12, 3.0f)}}));
  absl::Status s = load({{"h.0.attn.c_attn.weight", {6, 2}},
                         {"wte.weight", {1, 2}}});
  EXPECT_EQ(s.message(),
            where() + "tensor h.0.attn.c_attn.weight (stored as "
                      "transformer.h.0.attn.c_attn.weight): checkpoint has "
                      "shape [2, 6] but the model expects [6, 2]");
}

TEST_F(HFCheckpointTest, TiedEmbeddings) {
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"model.embed_tokens.weight", {2, 2}, {1, 2, 3, 4}},
                      {"lm_head.weight", {2, 2}, {1, 2, 3, 4}},
                      {"model.layers.0.self_attn.rotary_emb.inv_freq", {1},
                       {1}}}));
  absl::Status s = load({{"model.embed_tokens.weight", {2, 2}}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(buffers_[0], (std::vector<float>{1, 2, 3, 4}));
  // An untied model loads lm_head.weight as a parameter.
  s = load({{"model.embed_tokens.weight", {2, 2}}, {"lm_head.weight", {2, 2}}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(buffers_[1], (std::vector<float>{1, 2, 3, 4}));
  // An output layer that differs from the embedding is not dropped silently.
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"model.embed_tokens.weight", {2, 2}, {1, 2, 3, 4}},
                      {"lm_head.weight", {2, 2}, {1, 2, 3, 5}}}));
  s = load({{"model.embed_tokens.weight", {2, 2}}});
  EXPECT_EQ(s.message(),
            where() + "the model ties its output layer to the embedding (it "
                      "has no lm_head.weight), but the checkpoint's "
                      "lm_head.weight is not a copy of the embedding: loading "
                      "would drop the trained output layer (untie the "
                      "embeddings in the model: tie_word_embeddings false)");
  EXPECT_TRUE(untouched());
}

TEST_F(HFCheckpointTest, RefusesBadExpectations) {
  writeBytes(dir_.file("model.safetensors"), f32File({{"a", {1}, {1}}}));
  EXPECT_EQ(load({{"a", {1}}, {"a", {1}}}).message(),
            "the model lists parameter \"a\" twice");
  auto ckpt = OpenHFCheckpoint(dir_.path());
  ASSERT_TRUE(ckpt.ok());
  absl::Status s = LoadParameters(*ckpt, {{"a", {1}}},
                                  [](size_t) -> float * { return nullptr; });
  EXPECT_EQ(s.message(), "no destination (null) for parameter \"a\"");
}

} // namespace

// A SwiGLU MLP loads whichever way the checkpoint stores it: a fused
// gate_up_proj from separate gate_proj and up_proj (their rows stacked), and
// separate projections from a fused one (its halves).
TEST_F(HFCheckpointTest, FusedAndSeparateMlpProjections) {
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"model.layers.0.mlp.gate_proj.weight", {2, 3},
                       {1, 2, 3, 4, 5, 6}},
                      {"model.layers.0.mlp.up_proj.weight", {2, 3},
                       {7, 8, 9, 10, 11, 12}},
                      {"model.layers.1.mlp.gate_up_proj.weight", {4, 2},
                       {1, 2, 3, 4, 5, 6, 7, 8}}}));
  absl::Status s = load({{"model.layers.0.mlp.gate_up_proj.weight", {4, 3}},
                         {"model.layers.1.mlp.gate_proj.weight", {2, 2}},
                         {"model.layers.1.mlp.up_proj.weight", {2, 2}}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(buffers_[0],
            (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(buffers_[1], (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(buffers_[2], (std::vector<float>{5, 6, 7, 8}));
}

TEST_F(HFCheckpointTest, FusedMlpShapeMismatchNamesTheParts) {
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"model.layers.0.mlp.gate_proj.weight", {2, 3},
                       {1, 2, 3, 4, 5, 6}},
                      {"model.layers.0.mlp.up_proj.weight", {1, 3},
                       {7, 8, 9}}}));
  absl::Status s = load({{"model.layers.0.mlp.gate_up_proj.weight", {4, 3}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            where() + "tensor model.layers.0.mlp.gate_up_proj.weight (stored "
                      "as model.layers.0.mlp.gate_proj.weight and "
                      "model.layers.0.mlp.up_proj.weight): checkpoint has "
                      "shape [2, 3] and [1, 3] but the model expects [4, 3]");
  EXPECT_TRUE(untouched());
  // Half of a fused tensor with an odd row count is no projection.
  writeBytes(dir_.file("model.safetensors"),
             f32File({{"model.layers.0.mlp.gate_up_proj.weight", {3, 1},
                       {1, 2, 3}}}));
  s = load({{"model.layers.0.mlp.gate_proj.weight", {1, 1}},
            {"model.layers.0.mlp.up_proj.weight", {1, 1}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(
      s.message(), "tensor model.layers.0.mlp.gate_proj.weight (stored as "
                   "first half of model.layers.0.mlp.gate_up_proj.weight): "
                   "checkpoint has shape [3, 1] but the model expects [1, 1]"))
      << s;
}
