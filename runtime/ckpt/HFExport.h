//===- HFExport.h - Hugging Face weight files as people ship them -*- C++ -*-===//
//
// What `braid-ckpt export --hf` writes beside config.json: the weights in
// the dtype asked for (float32, bfloat16 or float16, rounded to nearest,
// ties to even, as torch's .to() does), in one model.safetensors or, past
// the largest shard size, in shards model-0000i-of-0000n.safetensors with
// model.safetensors.index.json, as transformers' save_pretrained writes
// them; and the tokenizer files the model was trained with, copied beside
// them, so that the directory loads as it is.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CKPT_HFEXPORT_H
#define BRAID_RUNTIME_CKPT_HFEXPORT_H

#include "runtime/ckpt/Safetensors.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::ckpt {

/// The default largest shard: transformers' max_shard_size "5GB".
constexpr int64_t kDefaultMaxShardBytes = 5000000000;

/// A size as transformers' max_shard_size reads it
/// (convert_file_size_to_int): bytes ("1000000"), or an integer with a
/// unit, KB/MB/GB powers of 1000 and KiB/MiB/GiB powers of 1024, in any
/// case, where a lowercase final "b" (as "5Gb") counts bits. InvalidArgument
/// naming the text for anything else, or a size below 1 or past int64.
absl::StatusOr<int64_t> ParseShardSize(absl::string_view text);

/// The dtypes an export writes, by the names `--dtype` and config.json's
/// torch_dtype give them.
struct ExportDtype {
  Dtype dtype = Dtype::kF32;
  const char *torchName = "float32";
};
/// "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"; InvalidArgument
/// naming the others.
absl::StatusOr<ExportDtype> ParseExportDtype(absl::string_view name);

/// `values` in `dtype`'s bytes: float32 as they are, bfloat16 and float16
/// rounded to nearest, ties to even. float16: InvalidArgument naming
/// `tensor` and its largest magnitude when a finite value rounds past
/// float16's largest (65504), which would be infinity.
absl::StatusOr<std::vector<uint8_t>>
ConvertForExport(absl::Span<const float> values, Dtype dtype,
                 absl::string_view tensor);

/// Tensors into shards as transformers splits a state dict
/// (huggingface_hub's split_state_dict_into_shards): in order, a tensor
/// joins the current shard unless that would take it past `maxBytes` (the
/// shard then closes); a tensor larger than `maxBytes` alone is a shard of
/// its own, placed where it comes. Returns each shard's tensor indices.
std::vector<std::vector<size_t>> PlanShards(absl::Span<const int64_t> bytes,
                                            int64_t maxBytes);

/// Writes `tensors` into directory `dir` (which exists): model.safetensors
/// when they fit in one shard of `maxBytes`, else the shards of PlanShards
/// and model.safetensors.index.json ({"metadata": {"total_size": their
/// bytes}, "weight_map": {tensor: file}}, keys sorted, 2-space indent, as
/// transformers writes it). Each file with metadata {"format": "pt"}.
/// `files` receives the names written.
absl::Status WriteHFWeights(const std::string &dir,
                            absl::Span<const TensorToWrite> tensors,
                            int64_t maxBytes, std::vector<std::string> *files);

/// The tokenizer files of `source` (paths): the file itself, or those of
/// the directory (as CopyTokenizer); NotFound as CopyTokenizer.
absl::StatusOr<std::vector<std::string>>
FindTokenizerFiles(const std::string &source);

/// The tokenizer files of `source`: a file (copied under its own name), or
/// a directory whose Hugging Face tokenizer files (tokenizer.model,
/// tokenizer.json, tokenizer_config.json, special_tokens_map.json,
/// added_tokens.json, vocab.json, merges.txt) are copied. Into `dir`;
/// NotFound naming `source` when it is missing or a directory without any
/// of them. `files` receives the names copied.
absl::Status CopyTokenizer(const std::string &source, const std::string &dir,
                           std::vector<std::string> *files);

} // namespace braid::ckpt

#endif // BRAID_RUNTIME_CKPT_HFEXPORT_H
