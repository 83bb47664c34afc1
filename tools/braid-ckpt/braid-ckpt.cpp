//===- braid-ckpt.cpp - Inspect, verify and export checkpoints ------------===//
//
//   braid-ckpt inspect CHECKPOINT [--no-verify]
//   braid-ckpt export CHECKPOINT --hf OUT [--dtype fp32|bf16|fp16]
//                    [--max-shard-size SIZE] [--tokenizer PATH]
//
// CHECKPOINT is a checkpoint directory (step-N) or a root whose `latest`
// names one (runtime/ckpt/Checkpoint.h). Exit codes: 0 success, 1 the
// checkpoint is refused or the work failed, 2 a bad command line.
//
//===----------------------------------------------------------------------===//

#include "frontends/HFConfig.h"
#include "frontends/ModelConfig.h"
#include "runtime/common/Format.h"
#include "runtime/common/JsonString.h"
#include "runtime/common/OutputFile.h"
#include "runtime/ckpt/Checkpoint.h"
#include "runtime/ckpt/HFCheckpoint.h"
#include "runtime/ckpt/HFExport.h"
#include "runtime/ckpt/LoraAdapters.h"
#include "runtime/ckpt/Safetensors.h"
#include "runtime/plan/plan.pb.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <google/protobuf/text_format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <fstream>
#include <map>
#include <string>
#include <variant>
#include <vector>

using namespace braid;

namespace {

namespace fs = std::filesystem;

constexpr char kUsage[] = R"(usage:
  braid-ckpt inspect CHECKPOINT [--no-verify]
  braid-ckpt export CHECKPOINT --hf OUT [--dtype fp32|bf16|fp16]
                   [--max-shard-size SIZE] [--tokenizer PATH]
  braid-ckpt export CHECKPOINT --peft OUT [--dtype fp32|bf16|fp16]
  braid-ckpt merge --base HF_DIR --lora ADAPTERS --out OUT
                   [--dtype fp32|bf16|fp16] [--max-shard-size SIZE]

CHECKPOINT: a checkpoint directory (ROOT/step-N) or a root (braid-run --save
ROOT), whose latest checkpoint is used.

inspect lists the run's step, layout and model, every file with its size and
CRC-32, and every tensor with its shape, how the saving layout split it and
its pieces; then it verifies every file and piece against the manifest's
CRC-32s (unless --no-verify) and exits 1 on the first mismatch.

export writes OUT/config.json and the weights in the Hugging Face layout of
the model's family (SwiGLU's fused gate/up projection split into gate_proj
and up_proj), as transformers' save_pretrained does: in --dtype (default
fp32; bf16 and fp16 rounded to nearest even; config.json's torch_dtype
says which), in OUT/model.safetensors, or past --max-shard-size (default
5GB; KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024) in shards
model-0000i-of-0000n.safetensors with model.safetensors.index.json. The
tokenizer the run's data was made with (data.tokenizer_model), or
--tokenizer PATH (a file, or a directory's Hugging Face tokenizer files),
is copied beside them. OUT must not exist or be empty. A LoRA run's
checkpoint holds its adapters, not the frozen base: export it with --peft.

export --peft writes a LoRA run's adapters as PEFT saves them, for
PeftModel.from_pretrained(base, OUT): OUT/adapter_config.json (r,
lora_alpha, lora_dropout, target_modules, modules_to_save; fan_in_fan_out
for GPT-2's Conv1D) and OUT/adapter_model.safetensors, each tensor named
base_model.model.<its name> (<module>.lora_A.weight, <module>.lora_B.weight,
and the modules to save's own weights).

merge folds LoRA adapters into their base model and writes a Hugging Face
model: ADAPTERS is a LoRA run's checkpoint (or root) or a PEFT adapter
directory (adapter_config.json, adapter_model.safetensors); each target
weight becomes W + (alpha / r) B A (its transpose for GPT-2's Conv1D,
fan_in_fan_out), computed in float64, and the modules to save replace
the base's. The base's config.json (torch_dtype set to --dtype) and
tokenizer files are copied; the weights are written as export --hf writes
them. Adapters of another model (a target the base lacks, or shapes that
disagree) are refused, naming the tensor.
)";

int usageError(const std::string &message) {
  std::fprintf(stderr, "braid-ckpt: error: %s\n%s", message.c_str(), kUsage);
  return 2;
}

int fail(const std::string &message) {
  std::fprintf(stderr, "braid-ckpt: error: %s\n", message.c_str());
  return 1;
}

std::string shapeString(const google::protobuf::RepeatedField<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string shardingString(const ckpt::Tensor &t) {
  if (t.sharding().axis().empty())
    return "whole";
  std::string s = absl::StrCat("dim ", t.sharding().dim(), " over ",
                               t.sharding().axis());
  if (t.sharding().blocks_size())
    absl::StrAppend(&s, " in blocks [",
                    absl::StrJoin(t.sharding().blocks(), ", "), "]");
  return s;
}

/// The model of a manifest, resolved.
llvm::Expected<ModelConfig> modelOf(const ckpt::Manifest &m) {
  if (m.model_spec().empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the manifest does not record the model");
  spec::JobSpec job;
  if (!google::protobuf::TextFormat::ParseFromString(m.model_spec(),
                                                     job.mutable_model()))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the manifest's model_spec is not a model spec in text format");
  return resolveModel(job);
}

int inspect(const std::string &dir, bool verify) {
  absl::StatusOr<std::string> resolved = ckpt::ResolveCheckpoint(dir);
  if (!resolved.ok())
    return fail(std::string(resolved.status().message()));
  absl::StatusOr<ckpt::Manifest> m = ckpt::ReadManifest(*resolved);
  if (!m.ok())
    return fail(std::string(m.status().message()));
  std::printf("checkpoint %s\n", resolved->c_str());
  std::printf("step %lld of %lld, %lld samples consumed (global batch %lld), "
              "seed %llu, data %s\n",
              (long long)m->step(), (long long)m->planned_steps(),
              (long long)m->consumed_samples(),
              (long long)m->global_batch_size(),
              (unsigned long long)m->seed(), m->data_order().c_str());
  std::printf("saved by: %s, run lineage %s\n", m->layout().c_str(),
              m->lineage().empty() ? "(not recorded)" : m->lineage().c_str());
  if (llvm::Expected<ModelConfig> model = modelOf(*m))
    std::printf("model: %s, %lld layers, hidden %lld, %lld heads (%lld kv), "
                "ffn %lld, vocab %lld\n",
                familyName(model->family).c_str(),
                (long long)model->numLayers, (long long)model->hiddenSize,
                (long long)model->numHeads, (long long)model->numKvHeads,
                (long long)model->ffnHiddenSize,
                (long long)model->paddedVocabSize);
  else
    std::printf("model: unknown (%s)\n",
                llvm::toString(model.takeError()).c_str());
  int64_t total = 0;
  std::printf("%zu files:\n", size_t(m->files_size()));
  for (const ckpt::File &f : m->files()) {
    std::printf("  %-24s rank %-4lld %12s  crc32 %s\n", f.name().c_str(),
                (long long)f.rank(), common::FormatBytes(f.bytes()).c_str(),
                f.crc32().c_str());
    total += f.bytes();
  }
  std::printf("%zu tensors (%s in all files):\n", size_t(m->tensors_size()),
              common::FormatBytes(total).c_str());
  for (const ckpt::Tensor &t : m->tensors()) {
    std::map<std::string, int> pieces;
    for (const ckpt::Piece &p : t.pieces())
      ++pieces[p.state()];
    std::vector<std::string> counts;
    for (const auto &[state, n] : pieces)
      counts.push_back(absl::StrCat(state, " ", n));
    std::printf("  %-52s %-14s %s %-28s pieces: %s\n", t.name().c_str(),
                shapeString(t.shape()).c_str(), t.dtype().c_str(),
                shardingString(t).c_str(),
                absl::StrJoin(counts, ", ").c_str());
  }
  if (!verify)
    return 0;
  if (absl::Status s = ckpt::VerifyCheckpoint(*resolved, *m); !s.ok())
    return fail(absl::StrCat("verification failed: ", s.message()));
  size_t pieceCount = 0;
  for (const ckpt::Tensor &t : m->tensors())
    pieceCount += t.pieces_size();
  std::printf("verified: %zu files and %zu pieces match their CRC-32s\n",
              size_t(m->files_size()), pieceCount);
  return 0;
}

struct ExportOptions {
  ckpt::ExportDtype dtype;
  int64_t maxShardBytes = ckpt::kDefaultMaxShardBytes;
  std::string tokenizer; ///< empty: the run's (Training.tokenizer)
};

/// The LoRA settings a checkpoint's run trained with (the manifest's
/// training settings), or none.
std::optional<plan::LoraSettings> loraOf(const ckpt::Manifest &m) {
  plan::Training training;
  if (!google::protobuf::TextFormat::ParseFromString(m.training(), &training) ||
      !training.has_lora())
    return std::nullopt;
  return training.lora();
}

/// Tensor `t`'s values ("param"), whole.
absl::StatusOr<std::vector<float>> wholeTensor(ckpt::CheckpointReader &reader,
                                               const ckpt::Tensor &t) {
  int64_t n = 1;
  for (int64_t d : t.shape())
    n *= d;
  std::vector<float> v(n);
  if (absl::Status s = reader.Read(t.name(), "param", 0, n, v.data()); !s.ok())
    return s;
  return v;
}

/// The checkpoint `dir` names (a root's latest), opened to export: its
/// directory and reader; or the exit code of the failure, reported.
struct Opened {
  std::string dir;
  std::unique_ptr<ckpt::CheckpointReader> reader;
};
std::variant<Opened, int> openToExport(const std::string &dir) {
  absl::StatusOr<std::string> resolved = ckpt::ResolveCheckpoint(dir);
  if (!resolved.ok())
    return fail(std::string(resolved.status().message()));
  absl::StatusOr<std::unique_ptr<ckpt::CheckpointReader>> reader =
      ckpt::CheckpointReader::Open(*resolved);
  if (!reader.ok())
    return fail(std::string(reader.status().message()));
  return Opened{*resolved, std::move(*reader)};
}

int exportPeft(const Opened &opened, const std::string &out,
               const ExportOptions &options) {
  const std::string *resolved = &opened.dir;
  ckpt::CheckpointReader *reader = opened.reader.get();
  const ckpt::Manifest &m = reader->manifest();
  std::optional<plan::LoraSettings> lora = loraOf(m);
  if (!lora)
    return fail(absl::StrCat("cannot export ", *resolved,
                             " as PEFT adapters: it is not a LoRA run's "
                             "checkpoint (its job had no lora section); "
                             "export the model with --hf"));
  llvm::Expected<ModelConfig> model = modelOf(m);
  if (!model)
    return fail(absl::StrCat("cannot export ", *resolved, ": ",
                             llvm::toString(model.takeError())));
  std::error_code ec;
  if (fs::exists(out, ec) &&
      (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
    return fail(absl::StrCat(out, " exists and is not an empty directory: "
                                  "export writes into a new one"));
  // The adapters and the saved modules' weights, as PEFT names them.
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<uint8_t>> bytes;
  for (const ckpt::Tensor &t : m.tensors()) {
    // A fused gate/up projection has no module of the Hugging Face model
    // to adapt or save.
    if (absl::StrContains(t.name(), "mlp.gate_up_proj."))
      return fail(absl::StrCat(
          "cannot export ", *resolved, " as PEFT adapters: ", t.name(),
          " belongs to the fused gate/up projection (model.fuse_mlp), "
          "which the Hugging Face model does not have"));
    absl::StatusOr<std::vector<float>> v = wholeTensor(*reader, t);
    if (!v.ok())
      return fail(std::string(v.status().message()));
    absl::StatusOr<std::vector<uint8_t>> converted =
        ckpt::ConvertForExport(*v, options.dtype.dtype, t.name());
    if (!converted.ok())
      return fail(absl::StrCat("cannot export ", *resolved, ": ",
                               converted.status().message()));
    names.push_back("base_model.model." + t.name());
    shapes.emplace_back(t.shape().begin(), t.shape().end());
    bytes.push_back(std::move(*converted));
  }
  std::vector<ckpt::TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i)
    tensors.push_back({names[i], options.dtype.dtype, shapes[i],
                       absl::Span<const uint8_t>(bytes[i])});
  // adapter_config.json: PEFT's LoraConfig fields, keys sorted as PEFT
  // writes them.
  auto list = [](const auto &names) {
    std::vector<std::string> quoted;
    for (const std::string &name : names)
      quoted.push_back(common::JsonString(name));
    return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
  };
  std::string config = absl::StrCat(
      "{\n"
      "  \"base_model_name_or_path\": null,\n"
      "  \"bias\": \"none\",\n"
      "  \"fan_in_fan_out\": ",
      model->family == spec::GPT2 ? "true" : "false",
      ",\n"
      "  \"inference_mode\": true,\n"
      "  \"init_lora_weights\": true,\n"
      "  \"lora_alpha\": ",
      absl::StrFormat("%.17g", lora->alpha()),
      ",\n"
      "  \"lora_dropout\": ",
      absl::StrFormat("%.17g", lora->dropout()),
      ",\n"
      "  \"modules_to_save\": ",
      lora->modules_to_save().empty() ? std::string("null")
                                      : list(lora->modules_to_save()),
      ",\n"
      "  \"peft_type\": \"LORA\",\n"
      "  \"r\": ",
      lora->rank(),
      ",\n"
      "  \"target_modules\": ", list(lora->target_modules()),
      ",\n"
      "  \"task_type\": \"CAUSAL_LM\",\n"
      "  \"use_dora\": false,\n"
      "  \"use_rslora\": false\n"
      "}\n");
  // Created only now: a refusal above leaves nothing behind.
  fs::create_directories(out, ec);
  if (ec)
    return fail(absl::StrCat("cannot create ", out, ": ", ec.message()));
  if (absl::Status s = ckpt::WriteSafetensors(
          (fs::path(out) / "adapter_model.safetensors").string(), tensors,
          {{"format", "pt"}});
      !s.ok())
    return fail(std::string(s.message()));
  if (absl::Status s = common::WriteOutputFile(
          (fs::path(out) / "adapter_config.json").string(), config);
      !s.ok())
    return fail(std::string(s.message()));
  std::printf("exported the LoRA adapters of %s (step %lld, rank %lld) to "
              "%s in %s: adapter_config.json, adapter_model.safetensors (%zu "
              "tensors)\n",
              resolved->c_str(), (long long)m.step(),
              (long long)lora->rank(), out.c_str(), options.dtype.torchName,
              tensors.size());
  return 0;
}

/// LoRA adapters to merge: the scale alpha / r, whether the base stores
/// its weights [in, out] (fan_in_fan_out), and the tensors by the base's
/// names (<module>.lora_A.weight, ..., and the modules to save's).
struct Adapters {
  double scale = 0;
  bool fanInFanOut = false;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>>
      tensors;
};

/// The adapters of a PEFT directory or a Braid LoRA checkpoint
/// (ckpt::ReadLoraAdapters); a checkpoint's model says fan_in_fan_out.
absl::StatusOr<Adapters> readAdapters(const std::string &source) {
  absl::StatusOr<ckpt::LoraAdapters> read = ckpt::ReadLoraAdapters(source);
  if (!read.ok())
    return read.status();
  Adapters out;
  out.scale = read->alpha / double(read->rank);
  if (read->fanInFanOut) {
    out.fanInFanOut = *read->fanInFanOut;
  } else {
    ckpt::Manifest m;
    m.set_model_spec(read->modelSpec);
    llvm::Expected<ModelConfig> model = modelOf(m);
    if (!model)
      return absl::InvalidArgumentError(llvm::toString(model.takeError()));
    out.fanInFanOut = model->family == spec::GPT2;
  }
  out.tensors = std::move(read->tensors);
  return out;
}

int merge(const std::string &base, const std::string &lora,
          const std::string &out, const ExportOptions &options) {
  auto failMerge = [&](absl::string_view why) {
    return fail(absl::StrCat("cannot merge ", lora, " into ", base, ": ", why));
  };
  absl::StatusOr<ckpt::HFCheckpoint> checkpoint = ckpt::OpenHFCheckpoint(base);
  if (!checkpoint.ok())
    return failMerge(checkpoint.status().message());
  absl::StatusOr<Adapters> adapters = readAdapters(lora);
  if (!adapters.ok())
    return failMerge(adapters.status().message());
  std::error_code ec;
  if (fs::exists(out, ec) &&
      (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
    return fail(absl::StrCat(out, " exists and is not an empty directory: "
                                  "merge writes into a new one"));
  // The base's tensors, in float64.
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>>
      weights;
  for (const std::string &name : checkpoint->names()) {
    absl::StatusOr<const ckpt::SafetensorsFile *> file =
        checkpoint->fileOf(name);
    if (!file.ok())
      return failMerge(file.status().message());
    absl::StatusOr<ckpt::TensorInfo> info = (*file)->Info(name);
    if (!info.ok())
      return failMerge(info.status().message());
    std::vector<double> values(info->numElements);
    if (absl::Status st = (*file)->ReadAsFloat64(name, absl::MakeSpan(values));
        !st.ok())
      return failMerge(st.message());
    weights[name] = {info->shape, std::move(values)};
  }
  // Each adapter into its base weight; the modules to save replace theirs.
  int64_t merged = 0, replaced = 0;
  for (const auto &[name, tensor] : adapters->tensors) {
    const auto &[shape, values] = tensor;
    if (absl::EndsWith(name, ".lora_B.weight"))
      continue; // with its A
    if (!absl::EndsWith(name, ".lora_A.weight")) {
      auto it = weights.find(name);
      if (it == weights.end() || it->second.first != shape)
        return failMerge(absl::StrCat(
            "the module to save's ", name, " ",
            it == weights.end() ? "is not in the base"
                                : absl::StrCat("is ", ckpt::shapeToString(shape),
                                               " but the base's is ",
                                               ckpt::shapeToString(
                                                   it->second.first)),
            " (adapters of another model?)"));
      it->second.second = values;
      ++replaced;
      continue;
    }
    const std::string module =
        name.substr(0, name.size() - std::strlen(".lora_A.weight"));
    auto bIt = adapters->tensors.find(module + ".lora_B.weight");
    auto wIt = weights.find(module + ".weight");
    if (bIt == adapters->tensors.end())
      return failMerge(absl::StrCat(name, " has no ", module,
                                    ".lora_B.weight beside it"));
    if (wIt == weights.end())
      return failMerge(absl::StrCat("the base has no ", module,
                                    ".weight for ", name,
                                    " (adapters of another model?)"));
    const std::vector<int64_t> &a = shape, &b = bIt->second.first,
                               &w = wIt->second.first;
    // A [r, in], B [out, r]; W [out, in], or [in, out] with fan_in_fan_out.
    const bool shapesAgree =
        a.size() == 2 && b.size() == 2 && w.size() == 2 && b[1] == a[0] &&
        (adapters->fanInFanOut ? (w[0] == a[1] && w[1] == b[0])
                               : (w[0] == b[0] && w[1] == a[1]));
    if (!shapesAgree)
      return failMerge(absl::StrCat(
          module, ": A ", ckpt::shapeToString(a), " and B ",
          ckpt::shapeToString(b), " do not adapt the base's ",
          ckpt::shapeToString(w), " (adapters of another model?)"));
    const int64_t r = a[0], in = a[1], outDim = b[0];
    std::vector<double> &target = wIt->second.second;
    const std::vector<double> &av = values, &bv = bIt->second.second;
    for (int64_t o = 0; o < outDim; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double sum = 0;
        for (int64_t k = 0; k < r; ++k)
          sum += bv[size_t(o * r + k)] * av[size_t(k * in + i)];
        size_t at = adapters->fanInFanOut ? size_t(i * outDim + o)
                                          : size_t(o * in + i);
        target[at] += adapters->scale * sum;
      }
    ++merged;
  }
  if (merged == 0)
    return failMerge("it holds no LoRA adapters (no *.lora_A.weight)");
  // In the dtype asked for, every tensor converted before anything is
  // written.
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<uint8_t>> bytes;
  for (const auto &[name, tensor] : weights) {
    std::vector<float> f(tensor.second.begin(), tensor.second.end());
    absl::StatusOr<std::vector<uint8_t>> converted =
        ckpt::ConvertForExport(f, options.dtype.dtype, name);
    if (!converted.ok())
      return failMerge(converted.status().message());
    names.push_back(name);
    shapes.push_back(tensor.first);
    bytes.push_back(std::move(*converted));
  }
  std::vector<ckpt::TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i)
    tensors.push_back({names[i], options.dtype.dtype, shapes[i],
                       absl::Span<const uint8_t>(bytes[i])});
  // config.json: the base's, in the dtype written.
  llvm::Expected<llvm::json::Value> config =
      llvm::json::parse(checkpoint->configJson());
  if (!config || !config->getAsObject())
    return failMerge("the base's config.json is not a JSON object");
  (*config->getAsObject())["torch_dtype"] = options.dtype.torchName;
  fs::create_directories(out, ec);
  if (ec)
    return fail(absl::StrCat("cannot create ", out, ": ", ec.message()));
  std::vector<std::string> files = {"config.json"};
  if (ckpt::FindTokenizerFiles(base).ok())
    if (absl::Status st = ckpt::CopyTokenizer(base, out, &files); !st.ok())
      return failMerge(st.message());
  if (absl::Status st = ckpt::WriteHFWeights(out, tensors,
                                             options.maxShardBytes, &files);
      !st.ok())
    return fail(std::string(st.message()));
  if (absl::Status st = common::WriteOutputFile(
          (fs::path(out) / "config.json").string(),
          llvm::formatv("{0:2}", *config).str() + "\n");
      !st.ok())
    return fail(std::string(st.message()));
  std::printf("merged %lld adapters (scale %g)%s of %s into %s: %s in %s\n",
              (long long)merged, adapters->scale,
              replaced ? absl::StrCat(" and ", replaced, " saved tensors").c_str()
                       : "",
              lora.c_str(), base.c_str(), out.c_str(), options.dtype.torchName);
  return 0;
}

int exportHF(const Opened &opened, const std::string &out,
             const ExportOptions &options) {
  const std::string *resolved = &opened.dir;
  ckpt::CheckpointReader *reader = opened.reader.get();
  const ckpt::Manifest &m = reader->manifest();
  if (std::optional<plan::LoraSettings> lora = loraOf(m))
    return fail(absl::StrCat(
        "cannot export ", *resolved, " as a Hugging Face model: it is a LoRA "
        "run's checkpoint, which holds the adapters (rank ", lora->rank(),
        ") and not the frozen base; export the adapters with --peft"));
  llvm::Expected<ModelConfig> model = modelOf(m);
  if (!model)
    return fail(absl::StrCat("cannot export ", *resolved, ": ",
                             llvm::toString(model.takeError())));
  llvm::Expected<std::string> config =
      exportHFConfig(*model, options.dtype.torchName);
  if (!config)
    return fail(absl::StrCat("cannot export ", *resolved, ": ",
                             llvm::toString(config.takeError())));
  std::error_code ec;
  // The tokenizer: the one given, else the run's, when it is still there.
  std::string tokenizer = options.tokenizer;
  if (!tokenizer.empty())
    if (absl::Status s = ckpt::FindTokenizerFiles(tokenizer).status();
        !s.ok())
      return fail(absl::StrCat("cannot export ", *resolved, ": ",
                               s.message()));
  std::string tokenizerNote;
  if (tokenizer.empty()) {
    plan::Training training;
    if (google::protobuf::TextFormat::ParseFromString(m.training(),
                                                      &training) &&
        !training.tokenizer().empty()) {
      if (fs::exists(training.tokenizer(), ec))
        tokenizer = training.tokenizer();
      else
        tokenizerNote = absl::StrCat("; the run's tokenizer ",
                                     training.tokenizer(),
                                     " is gone: give --tokenizer PATH");
    } else {
      tokenizerNote = "; no tokenizer recorded (the run's data was Braid's "
                      "bytes, or made elsewhere): give --tokenizer PATH";
    }
  }
  if (fs::exists(out, ec) &&
      (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
    return fail(absl::StrCat(out, " exists and is not an empty directory: "
                                  "export writes into a new one"));

  // Every parameter, whole; a fused gate/up projection as its two halves.
  std::vector<std::pair<std::string, std::vector<int64_t>>> names;
  std::vector<std::vector<float>> values;
  for (const ckpt::Tensor &t : m.tensors()) {
    absl::StatusOr<std::vector<float>> whole = wholeTensor(*reader, t);
    if (!whole.ok())
      return fail(std::string(whole.status().message()));
    std::vector<float> &v = *whole;
    const int64_t n = int64_t(v.size());
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    size_t at = t.name().rfind("mlp.gate_up_proj.");
    if (at == std::string::npos) {
      names.push_back({t.name(), shape});
      values.push_back(std::move(v));
      continue;
    }
    std::string prefix = t.name().substr(0, at);
    std::string suffix = t.name().substr(at + std::string("mlp.gate_up_proj.").size());
    shape[0] /= 2;
    names.push_back({absl::StrCat(prefix, "mlp.gate_proj.", suffix), shape});
    values.emplace_back(v.begin(), v.begin() + n / 2);
    names.push_back({absl::StrCat(prefix, "mlp.up_proj.", suffix), shape});
    values.emplace_back(v.begin() + n / 2, v.end());
  }
  // In the dtype asked for; every tensor converted before anything is
  // written, so that a refusal (fp16's range) leaves no partial export.
  std::vector<std::vector<uint8_t>> bytes;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StatusOr<std::vector<uint8_t>> converted = ckpt::ConvertForExport(
        values[i], options.dtype.dtype, names[i].first);
    if (!converted.ok())
      return fail(absl::StrCat("cannot export ", *resolved, ": ",
                               converted.status().message()));
    bytes.push_back(std::move(*converted));
    values[i] = {};
  }
  std::vector<ckpt::TensorToWrite> tensors;
  for (size_t i = 0; i < names.size(); ++i)
    tensors.push_back({names[i].first, options.dtype.dtype, names[i].second,
                       absl::Span<const uint8_t>(bytes[i])});
  // Created only now: a refusal above leaves nothing behind.
  fs::create_directories(out, ec);
  if (ec)
    return fail(absl::StrCat("cannot create ", out, ": ", ec.message()));
  std::vector<std::string> files = {"config.json"};
  if (!tokenizer.empty())
    if (absl::Status s = ckpt::CopyTokenizer(tokenizer, out, &files); !s.ok())
      return fail(absl::StrCat("cannot export ", *resolved, ": ", s.message()));
  if (absl::Status s = ckpt::WriteHFWeights(out, tensors,
                                            options.maxShardBytes, &files);
      !s.ok())
    return fail(std::string(s.message()));
  if (absl::Status s = common::WriteOutputFile(
          (fs::path(out) / "config.json").string(), *config);
      !s.ok())
    return fail(std::string(s.message()));
  std::printf("exported %s (step %lld) to %s in %s: %s (%zu tensors)%s\n",
              resolved->c_str(), (long long)m.step(), out.c_str(),
              options.dtype.torchName, absl::StrJoin(files, ", ").c_str(),
              tensors.size(), tokenizerNote.c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s", kUsage);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  std::string dir, hf, peft, mergeBase, mergeLora, mergeOut;
  bool verify = true;
  ExportOptions exportOptions;
  // An export flag's value: "--flag VALUE" or "--flag=VALUE".
  auto exportValue = [&](size_t &i, const char *flag,
                         std::string &value) -> std::optional<int> {
    const std::string &a = args[i];
    if (a == flag) {
      if (i + 1 == args.size())
        return usageError(absl::StrCat(flag, " needs a value"));
      value = args[++i];
    } else {
      value = a.substr(std::strlen(flag) + 1);
    }
    return std::nullopt;
  };
  auto isFlag = [&](const std::string &a, const char *flag) {
    return (command == "export" || command == "merge") &&
           (a == flag || absl::StartsWith(a, absl::StrCat(flag, "=")));
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string &a = args[i];
    std::string value;
    if (a == "--no-verify" && command == "inspect") {
      verify = false;
    } else if (command == "export" && isFlag(a, "--hf")) {
      if (std::optional<int> rc = exportValue(i, "--hf", hf))
        return *rc;
    } else if (command == "export" && isFlag(a, "--peft")) {
      if (std::optional<int> rc = exportValue(i, "--peft", peft))
        return *rc;
    } else if (command == "merge" && isFlag(a, "--base")) {
      if (std::optional<int> rc = exportValue(i, "--base", mergeBase))
        return *rc;
    } else if (command == "merge" && isFlag(a, "--lora")) {
      if (std::optional<int> rc = exportValue(i, "--lora", mergeLora))
        return *rc;
    } else if (command == "merge" && isFlag(a, "--out")) {
      if (std::optional<int> rc = exportValue(i, "--out", mergeOut))
        return *rc;
    } else if (isFlag(a, "--dtype")) {
      if (std::optional<int> rc = exportValue(i, "--dtype", value))
        return *rc;
      absl::StatusOr<ckpt::ExportDtype> dtype = ckpt::ParseExportDtype(value);
      if (!dtype.ok())
        return usageError(std::string(dtype.status().message()));
      exportOptions.dtype = *dtype;
    } else if (isFlag(a, "--max-shard-size")) {
      if (std::optional<int> rc = exportValue(i, "--max-shard-size", value))
        return *rc;
      absl::StatusOr<int64_t> size = ckpt::ParseShardSize(value);
      if (!size.ok())
        return usageError(absl::StrCat("--max-shard-size: ",
                                       size.status().message()));
      exportOptions.maxShardBytes = *size;
    } else if (command == "export" && isFlag(a, "--tokenizer")) {
      if (std::optional<int> rc =
              exportValue(i, "--tokenizer", exportOptions.tokenizer))
        return *rc;
    } else if (absl::StartsWith(a, "--")) {
      return usageError(absl::StrCat("unknown flag ", a, " for ", command));
    } else if (dir.empty()) {
      dir = a;
    } else {
      return usageError(absl::StrCat("more than one checkpoint: ", dir,
                                     " and ", a));
    }
  }
  if (command != "inspect" && command != "export" && command != "merge")
    return usageError(absl::StrCat("unknown command '", command, "'"));
  if (command == "merge") {
    if (!dir.empty())
      return usageError(absl::StrCat("merge takes --base, --lora and --out, "
                                     "not ", dir));
    if (mergeBase.empty() || mergeLora.empty() || mergeOut.empty())
      return usageError("merge needs --base HF_DIR, --lora ADAPTERS and "
                        "--out OUT");
    return merge(mergeBase, mergeLora, mergeOut, exportOptions);
  }
  if (dir.empty())
    return usageError("no checkpoint given");
  if (command == "inspect")
    return inspect(dir, verify);
  if (hf.empty() == peft.empty())
    return usageError("export needs one of --hf OUT (the model) and --peft "
                      "OUT (a LoRA run's adapters)");
  std::variant<Opened, int> opened = openToExport(dir);
  if (int *rc = std::get_if<int>(&opened))
    return *rc;
  if (!peft.empty())
    return exportPeft(std::get<Opened>(opened), peft, exportOptions);
  return exportHF(std::get<Opened>(opened), hf, exportOptions);
}
