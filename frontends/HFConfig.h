//===- HFConfig.h - Hugging Face config.json import -------------*- C++ -*-===//

#ifndef BRAID_FRONTENDS_HFCONFIG_H
#define BRAID_FRONTENDS_HFCONFIG_H

#include "frontends/spec/braid_spec.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace braid {

/// Maps the fields of a Hugging Face config.json (given as text) to a model
/// spec, by name, for LlamaForCausalLM, GPT2LMHeadModel, BloomForCausalLM,
/// BaichuanForCausalLM (and BaiChuanForCausalLM), InternLMForCausalLM and
/// AquilaForCausalLM. `source` names the file in error messages.
llvm::Expected<spec::ModelSpec> importHFConfigText(llvm::StringRef text,
                                                   llvm::StringRef source);

/// Reads `path` and imports it as above.
llvm::Expected<spec::ModelSpec> importHFConfig(llvm::StringRef path);

/// The architectures importHFConfig accepts.
llvm::ArrayRef<llvm::StringLiteral> supportedHFArchitectures();

} // namespace braid

#endif // BRAID_FRONTENDS_HFCONFIG_H
