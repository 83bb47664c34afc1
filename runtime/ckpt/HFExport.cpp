//===- HFExport.cpp - Hugging Face weight files as people ship them -------===//

#include "runtime/ckpt/HFExport.h"

#include "runtime/common/Float16.h"
#include "runtime/common/JsonString.h"
#include "runtime/common/OutputFile.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

namespace braid::ckpt {

namespace fs = std::filesystem;

absl::StatusOr<int64_t> ParseShardSize(absl::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "a shard size of '", text,
        "': expected bytes (5000000000) or an integer with a unit: KB, MB, "
        "GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), as "
        "max_shard_size \"5GB\""));
  };
  struct Unit {
    const char *suffix;
    int64_t scale;
  };
  // The longer suffixes first: "GIB" before "B"-less forms.
  static constexpr Unit kUnits[] = {
      {"GIB", int64_t(1) << 30}, {"MIB", int64_t(1) << 20},
      {"KIB", int64_t(1) << 10}, {"GB", 1000000000},
      {"MB", 1000000},           {"KB", 1000}};
  const std::string upper = absl::AsciiStrToUpper(text);
  int64_t scale = 1;
  absl::string_view digits = text;
  bool bits = false;
  for (const Unit &u : kUnits)
    if (absl::EndsWith(upper, u.suffix)) {
      scale = u.scale;
      digits = text.substr(0, text.size() - std::strlen(u.suffix));
      // transformers: a lowercase final "b" of the decimal units is bits.
      bits = std::strlen(u.suffix) == 2 && absl::EndsWith(text, "b");
      break;
    }
  int64_t n = 0;
  if (digits.empty() || !absl::SimpleAtoi(digits, &n) || n < 1 ||
      n > std::numeric_limits<int64_t>::max() / scale)
    return bad();
  int64_t bytes = n * scale / (bits ? 8 : 1);
  if (bytes < 1)
    return bad();
  return bytes;
}

absl::StatusOr<ExportDtype> ParseExportDtype(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "fp32" || lower == "float32")
    return ExportDtype{Dtype::kF32, "float32"};
  if (lower == "bf16" || lower == "bfloat16")
    return ExportDtype{Dtype::kBF16, "bfloat16"};
  if (lower == "fp16" || lower == "float16")
    return ExportDtype{Dtype::kF16, "float16"};
  return absl::InvalidArgumentError(absl::StrCat(
      "--dtype ", name, ": expected fp32, bf16 or fp16 (or float32, "
                        "bfloat16, float16)"));
}

absl::StatusOr<std::vector<uint8_t>>
ConvertForExport(absl::Span<const float> values, Dtype dtype,
                 absl::string_view tensor) {
  std::vector<uint8_t> bytes;
  if (dtype == Dtype::kF32) {
    bytes.resize(values.size() * sizeof(float));
    if (!values.empty())
      std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  if (dtype != Dtype::kBF16 && dtype != Dtype::kF16)
    return absl::InvalidArgumentError(
        "an export writes float32, bfloat16 or float16");
  bytes.resize(values.size() * 2);
  float largest = 0;
  bool overflow = false;
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    uint16_t h = dtype == Dtype::kBF16 ? floatToBfloat16(v) : floatToHalf(v);
    if (dtype == Dtype::kF16 && std::isfinite(v)) {
      largest = std::max(largest, std::fabs(v));
      overflow |= std::isinf(halfToFloat(h));
    }
    // Little-endian, as safetensors stores them.
    bytes[2 * i] = uint8_t(h & 0xFF);
    bytes[2 * i + 1] = uint8_t(h >> 8);
  }
  if (overflow)
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s has values up to %g, beyond float16's largest 65504 (they "
        "would be infinite): export it with --dtype bf16 or fp32",
        std::string(tensor), largest));
  return bytes;
}

std::vector<std::vector<size_t>> PlanShards(absl::Span<const int64_t> bytes,
                                            int64_t maxBytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t size = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > maxBytes) {
      shards.push_back({i});
      continue;
    }
    if (!current.empty() && size + bytes[i] > maxBytes) {
      shards.push_back(std::move(current));
      current.clear();
      size = 0;
    }
    current.push_back(i);
    size += bytes[i];
  }
  if (!current.empty() || shards.empty())
    shards.push_back(std::move(current));
  return shards;
}

absl::Status WriteHFWeights(const std::string &dir,
                            absl::Span<const TensorToWrite> tensors,
                            int64_t maxBytes, std::vector<std::string> *files) {
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const TensorToWrite &t : tensors) {
    bytes.push_back(int64_t(t.data.size()));
    total += int64_t(t.data.size());
  }
  const std::vector<std::vector<size_t>> shards = PlanShards(bytes, maxBytes);
  if (shards.size() == 1) {
    const std::string name = "model.safetensors";
    if (absl::Status s = WriteSafetensors((fs::path(dir) / name).string(),
                                          tensors, metadata);
        !s.ok())
      return s;
    if (files)
      files->push_back(name);
    return absl::OkStatus();
  }
  std::map<std::string, std::string> weightMap;
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name =
        absl::StrFormat("model-%05d-of-%05d.safetensors", k + 1, shards.size());
    std::vector<TensorToWrite> shard;
    for (size_t i : shards[k]) {
      shard.push_back(tensors[i]);
      weightMap[tensors[i].name] = name;
    }
    if (absl::Status s =
            WriteSafetensors((fs::path(dir) / name).string(), shard, metadata);
        !s.ok())
      return s;
    if (files)
      files->push_back(name);
  }
  // json.dumps(index, indent=2, sort_keys=True) + "\n" (the same JSON; a
  // non-ASCII name is written in UTF-8 where Python's ensure_ascii writes
  // \u escapes).
  std::string index = absl::StrCat("{\n  \"metadata\": {\n    \"total_size\": ",
                                   total, "\n  },\n  \"weight_map\": {\n");
  size_t n = 0;
  for (const auto &[tensor, file] : weightMap)
    absl::StrAppend(&index, "    ", common::JsonString(tensor), ": ",
                    common::JsonString(file),
                    ++n < weightMap.size() ? ",\n" : "\n");
  absl::StrAppend(&index, "  }\n}\n");
  const std::string name = "model.safetensors.index.json";
  if (absl::Status s =
          common::WriteOutputFile((fs::path(dir) / name).string(), index);
      !s.ok())
    return s;
  if (files)
    files->push_back(name);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>>
FindTokenizerFiles(const std::string &source) {
  static constexpr const char *kFiles[] = {
      "tokenizer.model",         "tokenizer.json",    "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json", "vocab.json",
      "merges.txt"};
  std::error_code ec;
  std::vector<std::string> found;
  if (fs::is_directory(source, ec)) {
    for (const char *name : kFiles)
      if (fs::is_regular_file(fs::path(source) / name, ec))
        found.push_back((fs::path(source) / name).string());
    if (found.empty())
      return absl::NotFoundError(absl::StrCat(
          "tokenizer directory ", source,
          " has none of tokenizer.model, tokenizer.json, vocab.json + "
          "merges.txt (or their configs)"));
  } else if (fs::is_regular_file(source, ec)) {
    found.push_back(source);
  } else {
    return absl::NotFoundError(
        absl::StrCat("no tokenizer file or directory ", source));
  }
  return found;
}

absl::Status CopyTokenizer(const std::string &source, const std::string &dir,
                           std::vector<std::string> *files) {
  absl::StatusOr<std::vector<std::string>> found = FindTokenizerFiles(source);
  if (!found.ok())
    return found.status();
  std::error_code ec;
  for (const fs::path from : *found) {
    const fs::path to = fs::path(dir) / from.filename();
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return absl::InternalError(absl::StrCat("cannot copy ", from.string(),
                                              " to ", to.string(), ": ",
                                              ec.message()));
    if (files)
      files->push_back(from.filename().string());
  }
  return absl::OkStatus();
}

} // namespace braid::ckpt
