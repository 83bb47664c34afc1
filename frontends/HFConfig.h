//===- HFConfig.h - Hugging Face config.json import and export --*- C++ -*-===//

#ifndef BRAID_FRONTENDS_HFCONFIG_H
#define BRAID_FRONTENDS_HFCONFIG_H

#include "frontends/spec/HFImport.h"
#include "frontends/spec/braid_spec.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace braid {

struct ModelConfig;

/// Maps the fields of a Hugging Face config.json (given as text) to a model
/// spec, by name, for LlamaForCausalLM, GPT2LMHeadModel, BloomForCausalLM,
/// BaichuanForCausalLM (and BaiChuanForCausalLM), InternLMForCausalLM and
/// AquilaForCausalLM: importHFConfigJson (frontends/spec/HFImport.h, which
/// the runtime shares), with llvm::json's messages for malformed JSON.
/// `source` names the file in error messages.
llvm::Expected<spec::ModelSpec> importHFConfigText(llvm::StringRef text,
                                                   llvm::StringRef source);

/// Reads `path` and imports it as above.
llvm::Expected<spec::ModelSpec> importHFConfig(llvm::StringRef path);

/// The Hugging Face config.json (text: a JSON object, keys sorted, 2-space
/// indent, trailing newline, floats as Python writes them) of the model
/// `config`, in the layout of its family's Hugging Face model class, such
/// that importHFConfigText() of it followed by resolveModel() gives back
/// `config`'s architecture: every field except source, microBatchSize,
/// seqLength and dtype, with two deliberate differences:
///  - `vocab_size` is paddedVocabSize, the rows of the embedding and output
///    layer, because a checkpoint's tensors have that many rows and Hugging
///    Face's vocab_size counts them (as Bloom's 250880 does); it reads back
///    as vocabSize = paddedVocabSize, the same tensors and the same math.
///  - a fused MLP (fuseMlp) is written as the unfused model, whose
///    checkpoint has gate_proj and up_proj (the checkpoint exporter splits
///    gate_up_proj); it reads back with fuseMlp = false, the same math.
/// Errors, each naming the field and its value, for what the family's class
/// cannot express in fields the importer reads back (docs/spec.md lists
/// them), rather than a config.json that reads back as another model.
/// `torchDtype` is the dtype the weights are written in ("float32",
/// "bfloat16" or "float16"), the file's torch_dtype.
llvm::Expected<std::string> exportHFConfig(const ModelConfig &config,
                                           llvm::StringRef torchDtype =
                                               "float32");

} // namespace braid

#endif // BRAID_FRONTENDS_HFCONFIG_H
