//===- HFImport.h - Hugging Face config.json import, without LLVM -*- C++ -*-===//
//
// The core of the config.json importer that braidc (frontends/HFConfig.h,
// importHFConfigText) and braid-run (--init-from of a Hugging Face
// directory, runtime/ckpt/HFCheckpoint.h) share: it links Protobuf and
// Abseil only, so the runtime, which links no LLVM, reads a config.json as
// braidc does.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_FRONTENDS_SPEC_HFIMPORT_H
#define BRAID_FRONTENDS_SPEC_HFIMPORT_H

#include "frontends/spec/braid_spec.pb.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <string>

namespace braid {

/// The architectures the importer accepts: LlamaForCausalLM,
/// GPT2LMHeadModel, BloomForCausalLM, BaichuanForCausalLM (and
/// BaiChuanForCausalLM), InternLMForCausalLM and AquilaForCausalLM.
absl::Span<const absl::string_view> supportedHFArchitectures();

/// Maps the fields of a Hugging Face config.json (given as text) to a model
/// spec, by name: the fields the file states (and `hf_config` = `source`);
/// resolveModel (frontends/ModelConfig.h) gives the others their family's
/// defaults. Errors are InvalidArgument, "SOURCE: what is wrong", naming the
/// field: text that is not a JSON object, a missing or unknown
/// "architectures", a field the architecture needs and the file lacks, a
/// field of the wrong JSON type, or a value the architecture does not
/// support (another hidden_act, rope_scaling). JSON numbers are read as
/// doubles: an integer field takes an integral number (64 or 64.0), exact up
/// to 2^53.
absl::StatusOr<spec::ModelSpec> importHFConfigJson(absl::string_view text,
                                                   absl::string_view source);

/// The model of an imported config.json with every architectural field set:
/// the fields `imported` states, and for each other field the value
/// resolveModel gives a job whose model is `imported` alone (its family's
/// default: num_kv_heads = num_heads, ffn_hidden_size 4 * hidden_size for
/// GPT-2 and Bloom, no vocabulary padding, LayerNorm (eps 1e-5) for GPT-2
/// and Bloom and RMSNorm (eps 1e-6) otherwise, learned positions for GPT-2,
/// ALiBi for Bloom, RoPE otherwise, rope_theta 10000, max_seq_len 2048,
/// tied embeddings and biases for GPT-2 and Bloom, attention biases for
/// InternLM, Bloom's embedding norm, init_std 0.02, no dropout, an unfused
/// MLP). tests/unit/ModelConfigTest.cpp checks that the two agree for every
/// architecture.
spec::ModelSpec withHFClassDefaults(const spec::ModelSpec &imported);

/// The MLP width `family` gives a hidden size (the ffn_hidden_size default,
/// and the width derived when a job replaces a preset's hidden size): GPT-2
/// and Bloom 4h; the LLaMA-style families 2/3 of 4h rounded up to a multiple
/// of 256, as LLaMA's presets are. The one rule: braidc's resolver
/// (ModelConfig.h), the presets and the defaults above use it.
int64_t familyFfnHiddenSize(spec::Family family, int64_t hiddenSize);

/// `v` as Python's json module writes a float (its repr): the shortest
/// digits that read back as `v`, positional for exponents in [-4, 16), and
/// ".0" on integral values (1e-05, 10000.0, 0.1); "nan", "inf", "-inf".
std::string pythonFloat(double v);

} // namespace braid

#endif // BRAID_FRONTENDS_SPEC_HFIMPORT_H
