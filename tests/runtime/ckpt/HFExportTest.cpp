//===- HFExportTest.cpp - Hugging Face weight files of an export ----------===//
//
// The shard size as transformers' convert_file_size_to_int reads it, the
// split of huggingface_hub's split_state_dict_into_shards, the index file
// transformers writes, and the dtypes' rounding from their bit layouts.
//
//===----------------------------------------------------------------------===//

#include "runtime/ckpt/HFExport.h"

#include "RawSafetensors.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace braid::ckpt {
namespace {

using testing::TempDir;

TEST(HFExportFiles, ShardSizesAsTransformersReadThem) {
  struct Case {
    const char *text;
    int64_t bytes;
  };
  for (const Case &c : std::initializer_list<Case>{
           {"5GB", 5000000000},
           {"5gB", 5000000000},
           {"5GiB", int64_t(5) << 30},
           {"10MiB", int64_t(10) << 20},
           {"100KB", 100000},
           {"3kib", 3072},
           {"200MB", 200000000},
           {"12345", 12345},
           // A lowercase final b of a decimal unit: bits.
           {"5Gb", 625000000},
           {"8kb", 1000}}) {
    absl::StatusOr<int64_t> got = ParseShardSize(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status();
    EXPECT_EQ(*got, c.bytes) << c.text;
  }
  for (const char *bad : {"", "GB", "1.5GB", "-1GB", "5TB", "0", "0GB", "1b",
                          "99999999999999999999", "9999999999GiB"}) {
    absl::StatusOr<int64_t> got = ParseShardSize(bad);
    EXPECT_FALSE(got.ok()) << "'" << bad << "' gave " << *got;
    if (!got.ok())
      EXPECT_TRUE(absl::StrContains(got.status().message(), "'" +
                                                                std::string(bad) +
                                                                "'"))
          << got.status();
  }
}

TEST(HFExportFiles, ShardsSplitAsHuggingFaceHub) {
  using Shards = std::vector<std::vector<size_t>>;
  // Fill up to the limit; the tensor that would pass it opens the next.
  EXPECT_EQ(PlanShards({2, 2, 2}, 5), (Shards{{0, 1}, {2}}));
  EXPECT_EQ(PlanShards({2, 3, 2}, 5), (Shards{{0, 1}, {2}}));
  EXPECT_EQ(PlanShards({3, 3, 3}, 5), (Shards{{0}, {1}, {2}}));
  // A tensor past the limit is a shard of its own where it comes; the
  // current shard goes on after it.
  EXPECT_EQ(PlanShards({2, 9, 2, 2}, 5), (Shards{{1}, {0, 2}, {3}}));
  EXPECT_EQ(PlanShards({9}, 5), (Shards{{0}}));
  // Everything in one: one shard (model.safetensors).
  EXPECT_EQ(PlanShards({1, 1, 1}, 100), (Shards{{0, 1, 2}}));
  EXPECT_EQ(PlanShards({}, 100), (Shards{{}}));
}

/// The 16-bit values of `bytes` (little-endian).
std::vector<uint16_t> words(const std::vector<uint8_t> &bytes) {
  std::vector<uint16_t> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = uint16_t(bytes[2 * i] | bytes[2 * i + 1] << 8);
  return out;
}

TEST(HFExportFiles, DtypesRoundToNearestEven) {
  // bfloat16 keeps binary32's top 16 bits: 1 + 2^-8 lies halfway between
  // 1 (0x3F80) and 1 + 2^-7 (0x3F81) and goes to the even 0x3F80; 1 + 3 *
  // 2^-8 halfway between 0x3F81 and 0x3F82 goes to 0x3F82; a bit above
  // halfway rounds up.
  const std::vector<float> values = {1.0f, 1.0f + 0x1p-8f,
                                     1.0f + 3 * 0x1p-8f,
                                     1.0f + 0x1p-8f + 0x1p-20f, -2.0f, 0.0f};
  absl::StatusOr<std::vector<uint8_t>> bf16 =
      ConvertForExport(values, Dtype::kBF16, "w");
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(words(*bf16), (std::vector<uint16_t>{0x3F80, 0x3F80, 0x3F82,
                                                 0x3F81, 0xC000, 0x0000}));
  // float16: 1 is 0x3C00 (exponent 15, 10 mantissa bits); 1 + 2^-11 lies
  // halfway to 1 + 2^-10 and goes to the even 0x3C00; 65504 is the largest.
  absl::StatusOr<std::vector<uint8_t>> f16 = ConvertForExport(
      {1.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, -0.5f},
      Dtype::kF16, "w");
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(words(*f16),
            (std::vector<uint16_t>{0x3C00, 0x3C00, 0x3C02, 0x7BFF, 0xB800}));
  // float32: the bytes as they are.
  absl::StatusOr<std::vector<uint8_t>> f32 =
      ConvertForExport(values, Dtype::kF32, "w");
  ASSERT_TRUE(f32.ok());
  ASSERT_EQ(f32->size(), values.size() * 4);
  EXPECT_EQ(std::memcmp(f32->data(), values.data(), f32->size()), 0);
}

TEST(HFExportFiles, Float16RefusesWhatWouldBeInfinite) {
  // 65520 rounds to 65536: past float16's largest, infinite.
  absl::StatusOr<std::vector<uint8_t>> f16 = ConvertForExport(
      {1.0f, -70000.0f, 65520.0f}, Dtype::kF16, "model.norm.weight");
  ASSERT_FALSE(f16.ok());
  EXPECT_TRUE(absl::StrContains(f16.status().message(),
                                "tensor model.norm.weight has values up to "
                                "70000, beyond float16's largest 65504"))
      << f16.status();
  // Infinities and NaNs of the model stay what they are.
  EXPECT_TRUE(ConvertForExport({std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()},
                               Dtype::kF16, "w")
                  .ok());
  EXPECT_FALSE(ParseExportDtype("int8").ok());
  EXPECT_EQ(ParseExportDtype("BF16")->dtype, Dtype::kBF16);
  EXPECT_STREQ(ParseExportDtype("float16")->torchName, "float16");
}

std::string readText(const std::string &path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

TEST(HFExportFiles, ShardedWeightsWithTheirIndex) {
  TempDir dir("hf-export-shards");
  std::vector<float> a(10, 1.5f), b(3, -2.0f), c(6, 0.25f);
  auto tensor = [](const char *name, const std::vector<float> &v) {
    return TensorToWrite{name, Dtype::kF32, {int64_t(v.size())},
                         absl::Span<const uint8_t>(
                             reinterpret_cast<const uint8_t *>(v.data()),
                             v.size() * sizeof(float))};
  };
  // 40, 12 and 24 bytes under a limit of 40: [a], [b, c].
  std::vector<TensorToWrite> tensors = {tensor("z.a", a), tensor("b", b),
                                        tensor("c\"q", c)};
  std::vector<std::string> files;
  ASSERT_TRUE(WriteHFWeights(dir.path(), tensors, 40, &files).ok());
  EXPECT_EQ(files, (std::vector<std::string>{
                       "model-00001-of-00002.safetensors",
                       "model-00002-of-00002.safetensors",
                       "model.safetensors.index.json"}));
  // json.dumps(index, indent=2, sort_keys=True) + "\n".
  EXPECT_EQ(readText(dir.file("model.safetensors.index.json")),
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_size\": 76\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"b\": \"model-00002-of-00002.safetensors\",\n"
            "    \"c\\\"q\": \"model-00002-of-00002.safetensors\",\n"
            "    \"z.a\": \"model-00001-of-00002.safetensors\"\n"
            "  }\n"
            "}\n");
  absl::StatusOr<SafetensorsFile> second =
      SafetensorsFile::Open(dir.file("model-00002-of-00002.safetensors"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->names(), (std::vector<std::string>{"b", "c\"q"}));
  EXPECT_EQ(second->metadata().at("format"), "pt");
  std::vector<float> got(6);
  ASSERT_TRUE(second->ReadAsFloat32("c\"q", absl::MakeSpan(got)).ok());
  EXPECT_EQ(got, c);

  // Under the limit: one model.safetensors, no index.
  TempDir one("hf-export-one");
  files.clear();
  ASSERT_TRUE(WriteHFWeights(one.path(), tensors, 1000, &files).ok());
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors"}));
  EXPECT_FALSE(std::filesystem::exists(one.file("model.safetensors.index.json")));
}

TEST(HFExportFiles, TokenizerFilesAreCopied) {
  TempDir source("hf-export-tokenizer"), out("hf-export-tokenizer-out");
  for (const char *name : {"vocab.json", "merges.txt", "notes.txt"})
    std::ofstream(source.file(name)) << name;
  std::vector<std::string> files;
  ASSERT_TRUE(CopyTokenizer(source.path(), out.path(), &files).ok());
  EXPECT_EQ(files, (std::vector<std::string>{"vocab.json", "merges.txt"}));
  EXPECT_EQ(readText(out.file("merges.txt")), "merges.txt");
  EXPECT_FALSE(std::filesystem::exists(out.file("notes.txt")));
  // A file goes under its own name.
  files.clear();
  ASSERT_TRUE(CopyTokenizer(source.file("notes.txt"), out.path(), &files).ok());
  EXPECT_EQ(files, (std::vector<std::string>{"notes.txt"}));
  // A directory without tokenizer files, and a missing path.
  TempDir empty("hf-export-tokenizer-empty");
  absl::Status none = CopyTokenizer(empty.path(), out.path(), nullptr);
  EXPECT_TRUE(absl::IsNotFound(none)) << none;
  EXPECT_TRUE(absl::StrContains(none.message(), empty.path())) << none;
  EXPECT_TRUE(absl::IsNotFound(
      CopyTokenizer(source.file("missing.model"), out.path(), nullptr)));
}

} // namespace
} // namespace braid::ckpt
