//===- LoraAdapters.cpp - LoRA adapters read from PEFT or Braid -----------===//

#include "runtime/ckpt/LoraAdapters.h"

#include "runtime/ckpt/Checkpoint.h"
#include "runtime/ckpt/Safetensors.h"
#include "runtime/common/Json.h"
#include "runtime/plan/plan.pb.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace braid::ckpt {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<LoraAdapters> readPeft(const fs::path &dir) {
  const fs::path config = dir / "adapter_config.json";
  std::ifstream in(config);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  google::protobuf::Struct json;
  if (!in.good() && !in.eof())
    return absl::NotFoundError(absl::StrCat(config.string(), ": cannot read"));
  if (absl::Status s = common::JsonToMessage(text, &json); !s.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(config.string(), ": not a JSON object: ", s.message()));
  const auto &f = json.fields();
  auto number = [&](const char *key) -> std::optional<double> {
    auto it = f.find(key);
    if (it == f.end() || !it->second.has_number_value())
      return std::nullopt;
    return it->second.number_value();
  };
  auto flag = [&](const char *key) {
    auto it = f.find(key);
    return it != f.end() && it->second.has_bool_value() &&
           it->second.bool_value();
  };
  if (auto it = f.find("peft_type");
      it != f.end() && it->second.string_value() != "LORA")
    return absl::InvalidArgumentError(
        absl::StrCat(config.string(), ": peft_type is ",
                     it->second.string_value(), ", not LORA"));
  std::optional<double> r = number("r"), alpha = number("lora_alpha");
  if (!r || *r < 1 || *r != double(int64_t(*r)) || !alpha)
    return absl::InvalidArgumentError(
        absl::StrCat(config.string(), ": expected PEFT's LoRA config with an "
                                      "integer r >= 1 and lora_alpha"));
  for (const char *unsupported : {"use_rslora", "use_dora"})
    if (flag(unsupported))
      return absl::UnimplementedError(
          absl::StrCat(config.string(), ": ", unsupported,
                       " adapters are not read (plain LoRA only)"));
  LoraAdapters out;
  out.rank = int64_t(*r);
  out.alpha = *alpha;
  out.fanInFanOut = flag("fan_in_fan_out");
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::Open((dir / "adapter_model.safetensors").string());
  if (!file.ok())
    return file.status();
  constexpr absl::string_view kPrefix = "base_model.model.";
  for (const std::string &name : file->names()) {
    absl::StatusOr<TensorInfo> info = file->Info(name);
    if (!info.ok())
      return info.status();
    std::vector<double> values(info->numElements);
    if (absl::Status s = file->ReadAsFloat64(name, absl::MakeSpan(values));
        !s.ok())
      return s;
    std::string key =
        absl::StartsWith(name, kPrefix) ? name.substr(kPrefix.size()) : name;
    out.tensors[key] = {info->shape, std::move(values)};
  }
  return out;
}

} // namespace

absl::StatusOr<LoraAdapters> ReadLoraAdapters(const std::string &source) {
  std::error_code ec;
  if (fs::exists(fs::path(source) / "adapter_config.json", ec))
    return readPeft(source);
  absl::StatusOr<std::string> resolved = ResolveCheckpoint(source);
  if (!resolved.ok())
    return absl::NotFoundError(absl::StrCat(
        source, " is neither a PEFT adapter directory (no adapter_config.json) "
                "nor a Braid checkpoint: ",
        resolved.status().message()));
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::Open(*resolved);
  if (!reader.ok())
    return reader.status();
  const Manifest &m = (*reader)->manifest();
  plan::Training training;
  if (!google::protobuf::TextFormat::ParseFromString(m.training(), &training) ||
      !training.has_lora())
    return absl::InvalidArgumentError(absl::StrCat(
        *resolved, " is not a LoRA run's checkpoint (its job had no lora "
                   "section): it holds no adapters"));
  LoraAdapters out;
  out.rank = training.lora().rank();
  out.alpha = training.lora().alpha();
  out.modelSpec = m.model_spec();
  for (const Tensor &t : m.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape())
      n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    if (absl::Status s = (*reader)->Read(t.name(), "param", 0, n, v.data());
        !s.ok())
      return s;
    out.tensors[t.name()] = {std::vector<int64_t>(t.shape().begin(),
                                                  t.shape().end()),
                             std::vector<double>(v.begin(), v.end())};
  }
  return out;
}

} // namespace braid::ckpt
