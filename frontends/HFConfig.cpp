//===- HFConfig.cpp - Hugging Face config.json import and export ----------===//
//
// Import maps fields by name (frontends/spec/HFImport.cpp). A field an
// architecture needs and the file lacks, a field of the wrong JSON type, and
// an architecture outside the supported list are errors that name the file
// and the field.
//
// Export writes the fields import reads, in the family's class layout; what
// import would not read back (a field the class lacks, or a value import
// would replace by a family default) is an error naming the model field.
//
//===----------------------------------------------------------------------===//

#include "frontends/HFConfig.h"

#include "frontends/ModelConfig.h"
#include "frontends/Spec.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"

#include <cmath>

using namespace braid;

// The import itself is frontends/spec/HFImport.cpp (no LLVM, so that the
// runtime reads a config.json as braidc does); this is its LLVM face.

llvm::Expected<spec::ModelSpec>
braid::importHFConfigText(llvm::StringRef text, llvm::StringRef source) {
  // llvm::json's syntax errors say where (line, column, byte): checked
  // here first, for the message.
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        (source + ": not valid JSON: " + llvm::toString(parsed.takeError()))
            .str());
  absl::StatusOr<spec::ModelSpec> m = importHFConfigJson(
      absl::string_view(text.data(), text.size()),
      absl::string_view(source.data(), source.size()));
  if (!m.ok())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   std::string(m.status().message()));
  return std::move(*m);
}

llvm::Expected<spec::ModelSpec> braid::importHFConfig(llvm::StringRef path) {
  llvm::Expected<std::string> text = readFile(path);
  if (!text)
    return text.takeError();
  return importHFConfigText(*text, path);
}

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

namespace {

/// The values resolveModel gives a field the config.json does not state
/// (ModelConfig.cpp); a class without the field reads back only these.
constexpr double kDefaultRopeTheta = 10000.0;

llvm::Error exportError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

/// model.`field` = `value` has no place in the Hugging Face class `cls`.
llvm::Error cannotExpress(llvm::StringRef cls, llvm::StringRef field,
                          const llvm::Twine &value, const llvm::Twine &why) {
  return exportError("model." + field + " = " + value +
                     " cannot be expressed by " + cls + ": " + why);
}

/// A config.json being built. llvm::json stores 10000.0 and 10000 alike, so
/// the keys holding floats are kept aside to be written as Python would.
class HFObject {
public:
  /// `torchDtype`: the dtype the checkpoint exporter writes the weights in
  /// ("float32", "bfloat16" or "float16").
  HFObject(llvm::StringRef architecture, llvm::StringRef modelType,
           llvm::StringRef torchDtype) {
    set("architectures", llvm::json::Array{architecture});
    set("model_type", modelType);
    set("torch_dtype", torchDtype);
  }

  void set(llvm::StringRef key, llvm::json::Value value) {
    object[key] = std::move(value);
  }

  /// Sets the float `key` from the model field `field`; JSON has no
  /// infinity or NaN to hold a non-finite value.
  llvm::Error setFloat(llvm::StringRef key, double value,
                       llvm::StringRef field) {
    if (!std::isfinite(value))
      return exportError("model." + field + " = " + pythonFloat(value) +
                         " cannot be written to a config.json: JSON has no "
                         "infinity or NaN");
    set(key, value);
    floats.insert(key);
    return llvm::Error::success();
  }

  /// Keys sorted, 2-space indent, trailing newline: what transformers'
  /// save_pretrained writes (json.dumps(indent=2, sort_keys=True)).
  std::string text() const {
    std::vector<llvm::StringRef> keys;
    for (const auto &entry : object)
      keys.push_back(entry.first);
    llvm::sort(keys);
    std::string out;
    llvm::raw_string_ostream os(out);
    {
      llvm::json::OStream json(os, /*IndentSize=*/2);
      json.object([&] {
        for (llvm::StringRef key : keys) {
          const llvm::json::Value &value = *object.get(key);
          if (!floats.contains(key)) {
            json.attribute(key, value);
            continue;
          }
          json.attributeBegin(key);
          json.rawValue(pythonFloat(*value.getAsNumber()));
          json.attributeEnd();
        }
      });
    }
    os << '\n';
    return out;
  }

private:
  llvm::json::Object object;
  llvm::StringSet<> floats;
};

// Returns from the enclosing function on an error.
#define BRAID_TRY(expr)                                                        \
  do {                                                                         \
    if (llvm::Error braidError = (expr))                                       \
      return std::move(braidError);                                            \
  } while (false)

llvm::Expected<std::string> exportLlamaLike(const ModelConfig &c,
                                            llvm::StringRef cls,
                                            llvm::StringRef modelType,
    llvm::StringRef torchDtype) {
  bool baichuan = c.family == spec::BAICHUAN;
  bool internlm = c.family == spec::INTERNLM;
  if (c.norm != spec::RMS_NORM)
    return cannotExpress(cls, "norm", normName(c.norm),
                         "its only norm is RMSNorm (rms_norm_eps)");
  if (c.activation != spec::SWIGLU)
    return cannotExpress(cls, "activation", activationName(c.activation),
                         "its only MLP is SwiGLU (hidden_act \"silu\")");
  // Import gives Baichuan RoPE exactly when max_position_embeddings is
  // present and ALiBi otherwise; the other classes are RoPE only.
  bool alibi = baichuan && c.positionEmbedding == spec::ALIBI;
  if (c.positionEmbedding != spec::ROPE && !alibi)
    return cannotExpress(
        cls, "position_embedding", positionName(c.positionEmbedding),
        baichuan ? "it has RoPE (the 7B layout, max_position_embeddings) or "
                   "ALiBi (the 13B layout, model_max_length) only"
                 : "its only position embedding is RoPE");
  if (internlm && c.mlpBias)
    return cannotExpress(cls, "mlp_bias", "true",
                         "its `bias` puts biases on the attention "
                         "projections only");
  if (c.embeddingNorm)
    return cannotExpress(cls, "embedding_norm", "true",
                         "it has no norm after the embedding");
  if (c.hiddenDropout != 0)
    return cannotExpress(cls, "hidden_dropout", pythonFloat(c.hiddenDropout),
                         "it has no residual dropout (only attention_dropout)");
  if (c.embeddingDropout != 0)
    return cannotExpress(cls, "embedding_dropout",
                         pythonFloat(c.embeddingDropout),
                         "it has no embedding dropout");

  HFObject o(cls, modelType, torchDtype);
  o.set("hidden_act", "silu");
  o.set("hidden_size", c.hiddenSize);
  // A fused MLP (fuseMlp) is written as the unfused model: the same math,
  // and the checkpoint exporter splits gate_up_proj into gate_proj and
  // up_proj, the only layout these classes load.
  o.set("intermediate_size", c.ffnHiddenSize);
  o.set("num_attention_heads", c.numHeads);
  o.set("num_hidden_layers", c.numLayers);
  o.set("num_key_value_heads", c.numKvHeads);
  o.set("vocab_size", c.paddedVocabSize);
  o.set(alibi ? "model_max_length" : "max_position_embeddings", c.maxSeqLen);
  o.set("tie_word_embeddings", c.tieEmbeddings);
  if (internlm) {
    o.set("bias", c.attentionBias);
  } else {
    o.set("attention_bias", c.attentionBias);
    o.set("mlp_bias", c.mlpBias);
  }
  BRAID_TRY(o.setFloat("rms_norm_eps", c.normEps, "norm_eps"));
  BRAID_TRY(o.setFloat("initializer_range", c.initStd, "init_std"));
  BRAID_TRY(
      o.setFloat("attention_dropout", c.attentionDropout, "attention_dropout"));
  // An ALiBi model does not use rope_theta; it is written only when it is
  // not the default import would give back anyway.
  if (!alibi || c.ropeTheta != kDefaultRopeTheta)
    BRAID_TRY(o.setFloat("rope_theta", c.ropeTheta, "rope_theta"));
  return o.text();
}

/// What GPT-2 and Bloom share: a key/value head per query head, LayerNorm,
/// no RoPE, biases on every projection.
llvm::Error checkGptLike(const ModelConfig &c, llvm::StringRef cls) {
  if (c.numKvHeads != c.numHeads)
    return cannotExpress(cls, "num_kv_heads", llvm::Twine(c.numKvHeads),
                         "it has one key/value head per query head (n_head = " +
                             llvm::Twine(c.numHeads) + ")");
  if (c.norm != spec::LAYER_NORM)
    return cannotExpress(cls, "norm", normName(c.norm),
                         "its only norm is LayerNorm (layer_norm_epsilon)");
  if (c.ropeTheta != kDefaultRopeTheta)
    return cannotExpress(cls, "rope_theta", pythonFloat(c.ropeTheta),
                         "it has no RoPE, so only the default " +
                             pythonFloat(kDefaultRopeTheta) + " reads back");
  if (!c.attentionBias)
    return cannotExpress(cls, "attention_bias", "false",
                         "its attention projections always have biases");
  if (!c.mlpBias)
    return cannotExpress(cls, "mlp_bias", "false",
                         "its MLP projections always have biases");
  return llvm::Error::success();
}

llvm::Expected<std::string> exportGpt2(const ModelConfig &c,
                                       llvm::StringRef cls,
                                       llvm::StringRef modelType,
    llvm::StringRef torchDtype) {
  if (llvm::Error e = checkGptLike(c, cls))
    return std::move(e);
  const char *activation = c.activation == spec::GELU_TANH ? "gelu_new"
                           : c.activation == spec::GELU    ? "gelu"
                                                           : nullptr;
  if (!activation)
    return cannotExpress(cls, "activation", activationName(c.activation),
                         "its activation_function is gelu_new (gelu_tanh) "
                         "or gelu");
  if (c.positionEmbedding != spec::LEARNED)
    return cannotExpress(cls, "position_embedding",
                         positionName(c.positionEmbedding),
                         "its only position embedding is learned "
                         "(n_positions)");
  if (c.embeddingNorm)
    return cannotExpress(cls, "embedding_norm", "true",
                         "it has no norm after the embedding");

  HFObject o(cls, modelType, torchDtype);
  o.set("activation_function", activation);
  o.set("n_embd", c.hiddenSize);
  o.set("n_head", c.numHeads);
  o.set("n_inner", c.ffnHiddenSize);
  o.set("n_layer", c.numLayers);
  o.set("n_positions", c.maxSeqLen);
  o.set("vocab_size", c.paddedVocabSize);
  o.set("tie_word_embeddings", c.tieEmbeddings);
  BRAID_TRY(o.setFloat("layer_norm_epsilon", c.normEps, "norm_eps"));
  BRAID_TRY(o.setFloat("initializer_range", c.initStd, "init_std"));
  BRAID_TRY(o.setFloat("resid_pdrop", c.hiddenDropout, "hidden_dropout"));
  BRAID_TRY(o.setFloat("attn_pdrop", c.attentionDropout, "attention_dropout"));
  BRAID_TRY(o.setFloat("embd_pdrop", c.embeddingDropout, "embedding_dropout"));
  return o.text();
}

llvm::Expected<std::string> exportBloom(const ModelConfig &c,
                                        llvm::StringRef cls,
                                        llvm::StringRef modelType,
    llvm::StringRef torchDtype) {
  if (llvm::Error e = checkGptLike(c, cls))
    return std::move(e);
  if (c.ffnHiddenSize != 4 * c.hiddenSize)
    return cannotExpress(cls, "ffn_hidden_size", llvm::Twine(c.ffnHiddenSize),
                         "its MLP width is always 4 * hidden_size = " +
                             llvm::Twine(4 * c.hiddenSize));
  if (c.activation != spec::GELU_TANH)
    return cannotExpress(cls, "activation", activationName(c.activation),
                         "its only activation is bloom_gelu (gelu_tanh)");
  if (c.positionEmbedding != spec::ALIBI)
    return cannotExpress(cls, "position_embedding",
                         positionName(c.positionEmbedding),
                         "its only position embedding is ALiBi");
  if (!c.embeddingNorm)
    return cannotExpress(cls, "embedding_norm", "false",
                         "it always has a LayerNorm after the embedding "
                         "(word_embeddings_layernorm)");
  if (c.embeddingDropout != 0)
    return cannotExpress(cls, "embedding_dropout",
                         pythonFloat(c.embeddingDropout),
                         "it has no embedding dropout");

  HFObject o(cls, modelType, torchDtype);
  o.set("hidden_size", c.hiddenSize);
  o.set("n_head", c.numHeads);
  o.set("n_layer", c.numLayers);
  // BloomForCausalLM has no position limit (ALiBi); the length the model
  // was trained at goes where BigScience's configs keep it, which the
  // importer reads back (transformers ignores it).
  o.set("seq_length", c.maxSeqLen);
  o.set("vocab_size", c.paddedVocabSize);
  o.set("tie_word_embeddings", c.tieEmbeddings);
  BRAID_TRY(o.setFloat("layer_norm_epsilon", c.normEps, "norm_eps"));
  BRAID_TRY(o.setFloat("initializer_range", c.initStd, "init_std"));
  BRAID_TRY(o.setFloat("hidden_dropout", c.hiddenDropout, "hidden_dropout"));
  BRAID_TRY(
      o.setFloat("attention_dropout", c.attentionDropout, "attention_dropout"));
  return o.text();
}

#undef BRAID_TRY

} // namespace

llvm::Expected<std::string>
braid::exportHFConfig(const ModelConfig &config, llvm::StringRef torchDtype) {
  switch (config.family) {
  case spec::LLAMA:
    return exportLlamaLike(config, "LlamaForCausalLM", "llama", torchDtype);
  case spec::AQUILA:
    return exportLlamaLike(config, "AquilaForCausalLM", "aquila",
                           torchDtype);
  case spec::INTERNLM:
    return exportLlamaLike(config, "InternLMForCausalLM", "internlm",
                           torchDtype);
  case spec::BAICHUAN:
    return exportLlamaLike(config, "BaichuanForCausalLM", "baichuan",
                           torchDtype);
  case spec::GPT2:
    return exportGpt2(config, "GPT2LMHeadModel", "gpt2", torchDtype);
  case spec::BLOOM:
    return exportBloom(config, "BloomForCausalLM", "bloom", torchDtype);
  default:
    return exportError("model.family = " + familyName(config.family) +
                       " has no Hugging Face model class");
  }
}
