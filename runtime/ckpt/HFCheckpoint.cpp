//===- HFCheckpoint.cpp - Hugging Face checkpoint directories -------------===//

#include "runtime/ckpt/HFCheckpoint.h"

#include "frontends/spec/HFImport.h"
#include "runtime/ckpt/ModelIdentity.h"
#include "runtime/common/MappedFile.h"

#include "runtime/common/Json.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <system_error>

namespace braid::ckpt {
namespace {

namespace fs = std::filesystem;
using google::protobuf::Struct;
using google::protobuf::Value;

constexpr size_t kMaxNamesListed = 10;
constexpr absl::string_view kGpt2Prefix = "transformer.";


using common::ParseJsonObject;

bool isRegularFile(const std::string &path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

/// "a, b, c" for the first kMaxNamesListed names, then "(and N more)".
std::string listNames(const std::vector<std::string> &names,
                      absl::string_view separator = ", ") {
  std::vector<std::string> shown(
      names.begin(),
      names.begin() + std::min(names.size(), kMaxNamesListed));
  std::string out = absl::StrJoin(shown, separator);
  if (names.size() > kMaxNamesListed)
    absl::StrAppend(&out, separator, "... (and ", names.size() - kMaxNamesListed,
                    " more)");
  return out;
}

std::string plural(size_t n, absl::string_view word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

/// Whether `name` is a buffer that Hugging Face models save with their
/// parameters but that is no parameter (see LoadParameters).
bool isKnownBuffer(absl::string_view name) {
  return absl::EndsWith(name, "rotary_emb.inv_freq") ||
         absl::EndsWith(name, ".attn.bias") ||
         absl::EndsWith(name, ".attn.masked_bias");
}

} // namespace

//===----------------------------------------------------------------------===//
// HFCheckpoint
//===----------------------------------------------------------------------===//

std::vector<std::string> HFCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(fileIndex_.size());
  for (const auto &entry : fileIndex_)
    out.push_back(entry.first);
  return out;
}

bool HFCheckpoint::contains(absl::string_view name) const {
  return fileIndex_.find(name) != fileIndex_.end();
}

absl::StatusOr<const SafetensorsFile *>
HFCheckpoint::fileOf(absl::string_view name) const {
  auto it = fileIndex_.find(name);
  if (it == fileIndex_.end())
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", dir_, ": no tensor \"", name, "\""));
  return &files_[it->second];
}

absl::StatusOr<HFCheckpoint> OpenHFCheckpoint(const std::string &dir) {
  HFCheckpoint ckpt;
  ckpt.dir_ = dir;
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return absl::NotFoundError(
        absl::StrCat("checkpoint directory ", dir, " does not exist"));
  if (!fs::is_directory(dir, ec))
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", dir, " is not a directory"));
  const fs::path root(dir);

  const std::string configPath = (root / "config.json").string();
  if (!isRegularFile(configPath))
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", dir,
        " has no config.json (a Hugging Face checkpoint directory holds "
        "config.json next to its *.safetensors files)"));
  absl::StatusOr<std::string> config = common::readWholeFile(configPath);
  if (!config.ok())
    return config.status();
  if (absl::StatusOr<Struct> parsed = ParseJsonObject(configPath, *config);
      !parsed.ok())
    return parsed.status();
  ckpt.configJson_ = std::move(*config);

  // Adds the tensors of files_[index] to fileIndex_, refusing one that an
  // earlier file holds too.
  auto addTensors = [&](size_t index) -> absl::Status {
    const SafetensorsFile &file = ckpt.files_[index];
    for (const std::string &name : file.names()) {
      auto [it, inserted] = ckpt.fileIndex_.emplace(name, index);
      if (!inserted)
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint ", dir, ": tensor \"", name, "\" is in both ",
            ckpt.files_[it->second].path(), " and ", file.path()));
    }
    return absl::OkStatus();
  };

  const std::string indexPath =
      (root / "model.safetensors.index.json").string();
  const std::string singlePath = (root / "model.safetensors").string();
  if (isRegularFile(indexPath)) {
    absl::StatusOr<std::string> text = common::readWholeFile(indexPath);
    if (!text.ok())
      return text.status();
    absl::StatusOr<Struct> index = ParseJsonObject(indexPath, *text);
    if (!index.ok())
      return index.status();
    auto weightMap = index->fields().find("weight_map");
    if (weightMap == index->fields().end() ||
        weightMap->second.kind_case() != Value::kStructValue)
      return absl::InvalidArgumentError(absl::StrCat(
          indexPath,
          ": no \"weight_map\" object (tensor name -> file name)"));
    std::map<std::string, std::string> tensorToFile;
    std::set<std::string> fileNames;
    for (const auto &[tensor, file] : weightMap->second.struct_value().fields()) {
      if (file.kind_case() != Value::kStringValue)
        return absl::InvalidArgumentError(
            absl::StrCat(indexPath, ": weight_map[\"", tensor,
                         "\"] is not a string (a file name)"));
      const std::string &name = file.string_value();
      if (name.empty() || name == "." || name == ".." ||
          name.find('/') != std::string::npos ||
          name.find('\\') != std::string::npos ||
          name.find('\0') != std::string::npos)
        return absl::InvalidArgumentError(absl::StrCat(
            indexPath, ": weight_map[\"", tensor, "\"] is \"", name,
            "\", not the name of a file in the checkpoint directory"));
      tensorToFile[tensor] = name;
      fileNames.insert(name);
    }
    for (const std::string &name : fileNames) {
      const std::string path = (root / name).string();
      absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
      if (!file.ok())
        return absl::Status(file.status().code(),
                            absl::StrCat(file.status().message(),
                                         " (a shard that ", indexPath,
                                         " names)"));
      ckpt.files_.push_back(std::move(*file));
      if (absl::Status s = addTensors(ckpt.files_.size() - 1); !s.ok())
        return s;
    }
    // The index and the shards must agree, both ways.
    for (const auto &[tensor, name] : tensorToFile) {
      auto it = ckpt.fileIndex_.find(tensor);
      const std::string path = (root / name).string();
      if (it == ckpt.fileIndex_.end())
        return absl::InvalidArgumentError(
            absl::StrCat(indexPath, " maps tensor \"", tensor, "\" to ", name,
                         ", which does not hold it"));
      if (ckpt.files_[it->second].path() != path)
        return absl::InvalidArgumentError(absl::StrCat(
            indexPath, " maps tensor \"", tensor, "\" to ", name,
            ", but it is in ", ckpt.files_[it->second].path()));
    }
    for (const auto &[tensor, fileIndex] : ckpt.fileIndex_)
      if (tensorToFile.find(tensor) == tensorToFile.end())
        return absl::InvalidArgumentError(absl::StrCat(
            indexPath, " does not list tensor \"", tensor, "\" of ",
            ckpt.files_[fileIndex].path(), " (an inconsistent index)"));
    return ckpt;
  }

  std::vector<std::string> paths;
  if (isRegularFile(singlePath)) {
    paths.push_back(singlePath);
  } else {
    fs::directory_iterator it(root, ec), end;
    if (ec)
      return absl::ErrnoToStatus(ec.value(),
                                 absl::StrCat("cannot list ", dir));
    for (; it != end; it.increment(ec)) {
      if (ec)
        return absl::ErrnoToStatus(ec.value(),
                                   absl::StrCat("cannot list ", dir));
      const fs::path &p = it->path();
      if (p.extension() == ".safetensors" && isRegularFile(p.string()))
        paths.push_back(p.string());
    }
    std::sort(paths.begin(), paths.end());
    if (paths.empty())
      return absl::NotFoundError(absl::StrCat(
          "checkpoint ", dir,
          " has no weights: no model.safetensors.index.json, no "
          "model.safetensors and no other *.safetensors file"));
  }
  for (const std::string &path : paths) {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    if (!file.ok())
      return file.status();
    ckpt.files_.push_back(std::move(*file));
    if (absl::Status s = addTensors(ckpt.files_.size() - 1); !s.ok())
      return s;
  }
  return ckpt;
}

absl::Status CheckHFModel(const HFCheckpoint &checkpoint,
                          const std::string &planModelSpec,
                          const std::set<std::string> &allowed,
                          std::vector<std::string> *notes) {
  const std::string what =
      absl::StrCat("checkpoint ", checkpoint.dir(), " (config.json)");
  absl::StatusOr<spec::ModelSpec> imported = importHFConfigJson(
      checkpoint.configJson(),
      (fs::path(checkpoint.dir()) / "config.json").string());
  if (!imported.ok())
    return imported.status();
  if (planModelSpec.empty()) {
    if (notes)
      notes->push_back(absl::StrCat(
          "warning: the model of ", what,
          " cannot be checked: the plan does not record its model (compiled "
          "before plans did); only its parameters' names and shapes are "
          "compared"));
    return absl::OkStatus();
  }
  absl::StatusOr<spec::ModelSpec> plan =
      ParseModelSpec(planModelSpec, "the plan's model_spec");
  if (!plan.ok())
    return plan.status();
  spec::ModelSpec there = withHFClassDefaults(*imported);
  // A limit the file does not state (BloomForCausalLM has none) is not
  // compared (ModelOrigin::kHFConfig).
  if (!imported->has_max_seq_len())
    there.clear_max_seq_len();
  return CheckSameModel(what, there, *plan, ModelOrigin::kHFConfig, allowed,
                        notes);
}

//===----------------------------------------------------------------------===//
// LoadParameters
//===----------------------------------------------------------------------===//

namespace {

/// Where (part of) a parameter's values are stored: a checkpoint tensor, or
/// row block `part` of `parts` equal blocks of its first dimension.
struct Piece {
  std::string name;
  int64_t part = -1; ///< -1: the whole tensor
  int64_t parts = 1;
};

/// "P" and "S" of a name "P<middle>S", or nullopt.
std::optional<std::pair<std::string, std::string>>
around(absl::string_view name, absl::string_view middle) {
  size_t at = name.rfind(middle);
  if (at == absl::string_view::npos)
    return std::nullopt;
  return std::make_pair(std::string(name.substr(0, at)),
                        std::string(name.substr(at + middle.size())));
}

constexpr absl::string_view kGateUp = "mlp.gate_up_proj.";
constexpr absl::string_view kGate = "mlp.gate_proj.";
constexpr absl::string_view kUp = "mlp.up_proj.";

} // namespace

absl::Status LoadParameters(
    const HFCheckpoint &checkpoint, const std::vector<ParamSpec> &expected,
    const std::function<float *(size_t index)> &destination) {
  const std::string where = absl::StrCat("checkpoint ", checkpoint.dir(), ": ");

  // Where each expected parameter is stored (empty when missing): one
  // tensor of its name, or for a SwiGLU MLP stored the other way, fused
  // gate/up rows from the separate gate and up projections, or a separate
  // projection from its half of the fused one.
  std::vector<std::vector<Piece>> stored(expected.size());
  std::set<std::string, std::less<>> expectedNames;
  std::set<std::string, std::less<>> used;
  std::vector<std::string> missing;
  for (size_t i = 0; i < expected.size(); ++i) {
    const ParamSpec &spec = expected[i];
    if (!expectedNames.insert(spec.name).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "the model lists parameter \"", spec.name, "\" twice"));
    for (int64_t d : spec.shape)
      if (d < 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "the model's parameter \"", spec.name, "\" has shape ",
            shapeToString(spec.shape), " with a negative dimension"));
    std::vector<std::string> candidates = {spec.name};
    if (absl::StartsWith(spec.name, kGpt2Prefix))
      candidates.push_back(
          std::string(absl::StripPrefix(spec.name, kGpt2Prefix)));
    else
      candidates.push_back(absl::StrCat(kGpt2Prefix, spec.name));
    for (const std::string &candidate : candidates)
      if (checkpoint.contains(candidate) && !used.count(candidate)) {
        stored[i] = {Piece{candidate}};
        used.insert(candidate);
        break;
      }
    if (stored[i].empty()) {
      if (auto fused = around(spec.name, kGateUp)) {
        std::string gate = absl::StrCat(fused->first, kGate, fused->second);
        std::string up = absl::StrCat(fused->first, kUp, fused->second);
        if (checkpoint.contains(gate) && checkpoint.contains(up) &&
            !used.count(gate) && !used.count(up)) {
          stored[i] = {Piece{gate}, Piece{up}};
          used.insert(gate);
          used.insert(up);
        }
      } else {
        for (auto [middle, part] : {std::pair{kGate, 0}, std::pair{kUp, 1}})
          if (auto separate = around(spec.name, middle)) {
            std::string name =
                absl::StrCat(separate->first, kGateUp, separate->second);
            if (checkpoint.contains(name)) {
              stored[i] = {Piece{name, part, 2}};
              used.insert(name);
            }
            break;
          }
      }
    }
    if (stored[i].empty())
      missing.push_back(spec.name);
  }

  // Checkpoint tensors that are no parameter.
  std::vector<std::string> extra;
  for (const std::string &name : checkpoint.names()) {
    if (used.count(name))
      continue;
    if (isKnownBuffer(name))
      continue;
    if (name == "lm_head.weight" && !expectedNames.count(name)) {
      // A tied model: ignore the stored copy of the embedding, but only if
      // it is one; an untied output layer would be silently dropped.
      const SafetensorsFile *head = *checkpoint.fileOf(name);
      const TensorInfo headInfo = *head->Info(name);
      const absl::Span<const uint8_t> headBytes = *head->Bytes(name);
      bool tied = false;
      for (size_t i = 0; i < expected.size() && !tied; ++i) {
        if (stored[i].size() != 1 || stored[i][0].part >= 0)
          continue;
        const std::string &storedName = stored[i][0].name;
        const SafetensorsFile *file = *checkpoint.fileOf(storedName);
        const TensorInfo info = *file->Info(storedName);
        if (info.dtype != headInfo.dtype || info.shape != headInfo.shape)
          continue;
        const absl::Span<const uint8_t> bytes = *file->Bytes(storedName);
        tied = bytes.size() == headBytes.size() &&
               (bytes.empty() ||
                std::memcmp(bytes.data(), headBytes.data(), bytes.size()) == 0);
      }
      if (tied)
        continue;
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          "the model ties its output layer to the embedding (it has no "
          "lm_head.weight), but the checkpoint's lm_head.weight is not a copy "
          "of the embedding: loading would drop the trained output layer "
          "(untie the embeddings in the model: tie_word_embeddings false)"));
    }
    extra.push_back(name);
  }
  if (!missing.empty() || !extra.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty())
      parts.push_back(absl::StrCat(
          "the model expects ", plural(missing.size(), "tensor"),
          " that the checkpoint lacks: ", listNames(missing)));
    if (!extra.empty())
      parts.push_back(absl::StrCat(
          "the checkpoint holds ", plural(extra.size(), "tensor"),
          " that the model does not expect: ", listNames(extra)));
    return absl::InvalidArgumentError(
        absl::StrCat(where, absl::StrJoin(parts, "; ")));
  }

  // The shape the pieces make: row blocks stacked on the first dimension.
  std::vector<std::string> mismatches;
  for (size_t i = 0; i < expected.size(); ++i) {
    std::vector<std::string> names, notFloat;
    std::vector<int64_t> shape;
    bool stacks = true;
    for (const Piece &piece : stored[i]) {
      const SafetensorsFile *file = *checkpoint.fileOf(piece.name);
      const TensorInfo info = *file->Info(piece.name);
      std::vector<int64_t> pieceShape = info.shape;
      if (piece.part >= 0) {
        if (pieceShape.empty() || pieceShape[0] % piece.parts != 0) {
          stacks = false;
        } else {
          pieceShape[0] /= piece.parts;
        }
      }
      names.push_back(piece.part < 0
                          ? piece.name
                          : absl::StrCat(piece.part == 0 ? "first" : "second",
                                         " half of ", piece.name));
      if (!isConvertibleToFloat(info.dtype))
        notFloat.push_back(std::string(dtypeName(info.dtype)));
      if (shape.empty()) {
        shape = pieceShape;
      } else if (pieceShape.size() != shape.size() || shape.empty() ||
                 !std::equal(shape.begin() + 1, shape.end(),
                             pieceShape.begin() + 1)) {
        stacks = false;
      } else {
        shape[0] += pieceShape[0];
      }
    }
    const std::string storedAs =
        names.size() == 1 && names[0] == expected[i].name
            ? std::string()
            : absl::StrCat(" (stored as ", absl::StrJoin(names, " and "), ")");
    if (!notFloat.empty()) {
      mismatches.push_back(absl::StrCat(
          "tensor ", expected[i].name, storedAs, ": checkpoint stores it as ",
          absl::StrJoin(notFloat, " and "),
          ", not a float dtype (F16, BF16, F32, F64)"));
    } else if (!stacks || shape != expected[i].shape) {
      std::vector<std::string> shapes;
      for (const Piece &piece : stored[i])
        shapes.push_back(
            shapeToString((*checkpoint.fileOf(piece.name))->Info(piece.name)->shape));
      mismatches.push_back(absl::StrCat(
          "tensor ", expected[i].name, storedAs, ": checkpoint has shape ",
          absl::StrJoin(shapes, " and "), " but the model expects ",
          shapeToString(expected[i].shape)));
    }
  }
  if (!mismatches.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(where, listNames(mismatches, "; ")));

  for (size_t i = 0; i < expected.size(); ++i) {
    int64_t count = 1;
    for (int64_t d : expected[i].shape)
      count *= d;
    float *out = destination(i);
    if (out == nullptr && count > 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "no destination (null) for parameter \"", expected[i].name, "\""));
    int64_t at = 0;
    for (const Piece &piece : stored[i]) {
      const SafetensorsFile *file = *checkpoint.fileOf(piece.name);
      const TensorInfo info = *file->Info(piece.name);
      if (piece.part < 0) {
        if (absl::Status s = file->ReadAsFloat32(
                piece.name, absl::Span<float>(out + at, info.numElements));
            !s.ok())
          return s;
        at += info.numElements;
        continue;
      }
      std::vector<float> whole(info.numElements);
      if (absl::Status s = file->ReadAsFloat32(piece.name, absl::Span<float>(whole));
          !s.ok())
        return s;
      int64_t block = info.numElements / piece.parts;
      std::copy(whole.begin() + piece.part * block,
                whole.begin() + (piece.part + 1) * block, out + at);
      at += block;
    }
    // A weight that is not a number is a corrupt file: it would train to
    // NaN, or generate from NaN logits, without a word.
    for (int64_t k = 0; k < count; ++k)
      if (!std::isfinite(out[k]))
        return absl::DataLossError(absl::StrCat(
            where, "tensor \"", stored[i].front().name, "\": element ", k,
            " is ", out[k], " (a model's weights are finite numbers)"));
  }
  return absl::OkStatus();
}

} // namespace braid::ckpt
