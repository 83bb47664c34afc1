//===- HFConfig.cpp - Hugging Face config.json import and export ----------===//
//
// Fields are mapped by name. A field an architecture needs and the file lacks,
// a field of the wrong JSON type, and an architecture outside the supported
// list are errors that name the file and the field.
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
#include <cstdio>
#include <cstdlib>

using namespace braid;
using llvm::json::Object;

namespace {

llvm::Error fail(llvm::StringRef source, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (source + ": " + message).str());
}

/// Typed access to the fields of one config.json, errors naming the field.
class Fields {
public:
  Fields(const Object &object, llvm::StringRef source)
      : object(object), source(source) {}

  /// The field `key` read by `extract`; none when it is absent or null, an
  /// error when it is required and absent, or not of the `kind` expected.
  template <typename T, typename Extract>
  llvm::Expected<std::optional<T>> get(llvm::StringRef key, bool required,
                                       const char *kind,
                                       Extract extract) const {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null) {
      if (required)
        return fail(source, "missing required field \"" + key + "\"");
      return std::optional<T>();
    }
    if (auto v = extract(*value))
      return std::optional<T>(T(*v));
    return fail(source, "field \"" + key + "\" must be " + kind +
                            ", found " + describe(*value));
  }

  llvm::Expected<std::optional<int64_t>> integer(llvm::StringRef key,
                                                 bool required) const {
    return get<int64_t>(key, required, "an integer",
                        [](const llvm::json::Value &v) { return v.getAsInteger(); });
  }
  llvm::Expected<std::optional<double>> number(llvm::StringRef key) const {
    return get<double>(key, false, "a number",
                       [](const llvm::json::Value &v) { return v.getAsNumber(); });
  }
  llvm::Expected<std::optional<bool>> boolean(llvm::StringRef key) const {
    return get<bool>(key, false, "true or false",
                     [](const llvm::json::Value &v) { return v.getAsBoolean(); });
  }
  llvm::Expected<std::optional<std::string>> string(llvm::StringRef key) const {
    return get<std::string>(
        key, false, "a string",
        [](const llvm::json::Value &v) { return v.getAsString(); });
  }

  /// The first of `keys` that is present (for fields with aliases).
  llvm::StringRef firstPresent(std::initializer_list<llvm::StringRef> keys) const {
    for (llvm::StringRef key : keys)
      if (object.get(key))
        return key;
    return *keys.begin();
  }

  bool has(llvm::StringRef key) const { return object.get(key) != nullptr; }
  const llvm::json::Value *raw(llvm::StringRef key) const {
    return object.get(key);
  }

private:
  static std::string describe(const llvm::json::Value &value) {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << value;
    return s;
  }

  const Object &object;
  llvm::StringRef source;
};

const llvm::StringLiteral kArchitectures[] = {
    "LlamaForCausalLM",    "GPT2LMHeadModel",     "BloomForCausalLM",
    "BaichuanForCausalLM", "BaiChuanForCausalLM", "InternLMForCausalLM",
    "AquilaForCausalLM"};

// Assigns an optional field of a spec from an Expected<optional<T>>.
#define BRAID_SET_OPT(expr, setter)                                            \
  do {                                                                         \
    auto braidValue = (expr);                                                  \
    if (!braidValue)                                                           \
      return braidValue.takeError();                                           \
    if (*braidValue)                                                           \
      m.setter(**braidValue);                                                  \
  } while (false)

/// LLaMA, InternLM, Aquila and Baichuan share the LLaMA field names.
llvm::Error importLlamaLike(const Fields &f, spec::ModelSpec &m,
                            llvm::StringRef source) {
  BRAID_SET_OPT(f.integer("hidden_size", true), set_hidden_size);
  BRAID_SET_OPT(f.integer("intermediate_size", true), set_ffn_hidden_size);
  BRAID_SET_OPT(f.integer("num_attention_heads", true), set_num_heads);
  BRAID_SET_OPT(f.integer("num_hidden_layers", true), set_num_layers);
  BRAID_SET_OPT(f.integer("vocab_size", true), set_vocab_size);
  BRAID_SET_OPT(f.integer("num_key_value_heads", false), set_num_kv_heads);
  BRAID_SET_OPT(
      f.integer(f.firstPresent({"max_position_embeddings", "model_max_length"}),
                false),
      set_max_seq_len);
  BRAID_SET_OPT(f.number("rms_norm_eps"), set_norm_eps);
  BRAID_SET_OPT(f.number("rope_theta"), set_rope_theta);
  BRAID_SET_OPT(f.boolean("tie_word_embeddings"), set_tie_embeddings);
  BRAID_SET_OPT(f.number("initializer_range"), set_init_std);
  BRAID_SET_OPT(f.number("attention_dropout"), set_attention_dropout);
  m.set_tie_embeddings(m.has_tie_embeddings() && m.tie_embeddings());
  auto act = f.string("hidden_act");
  if (!act)
    return act.takeError();
  if (*act && **act != "silu")
    return fail(source, "field \"hidden_act\" is \"" + **act +
                            "\" but this architecture supports only \"silu\" "
                            "(SwiGLU)");
  m.set_activation(spec::SWIGLU);
  // RoPE scaling (linear, dynamic NTK, YaRN, ...) changes the model's math;
  // refuse it rather than train a different model.
  if (const llvm::json::Value *scaling = f.raw("rope_scaling");
      scaling && scaling->kind() != llvm::json::Value::Null)
    return fail(source, "field \"rope_scaling\" is set, but RoPE scaling is "
                        "not supported; remove it or set it to null");
  if (m.family() == spec::INTERNLM) {
    // InternLM's `bias` puts biases on the Q, K, V and output projections.
    auto bias = f.boolean("bias");
    if (!bias)
      return bias.takeError();
    m.set_attention_bias(bias->value_or(true));
  } else {
    BRAID_SET_OPT(f.boolean("attention_bias"), set_attention_bias);
    BRAID_SET_OPT(f.boolean("mlp_bias"), set_mlp_bias);
  }
  if (m.family() == spec::BAICHUAN) {
    // Baichuan's 7B models use RoPE and have max_position_embeddings; its
    // 13B models use ALiBi and state only model_max_length.
    m.set_position_embedding(f.has("max_position_embeddings") ? spec::ROPE
                                                               : spec::ALIBI);
  }
  return llvm::Error::success();
}

llvm::Error importGpt2(const Fields &f, spec::ModelSpec &m,
                       llvm::StringRef source) {
  BRAID_SET_OPT(f.integer("n_embd", true), set_hidden_size);
  BRAID_SET_OPT(f.integer("n_layer", true), set_num_layers);
  BRAID_SET_OPT(f.integer("n_head", true), set_num_heads);
  BRAID_SET_OPT(f.integer("vocab_size", true), set_vocab_size);
  BRAID_SET_OPT(f.integer("n_positions", true), set_max_seq_len);
  BRAID_SET_OPT(f.integer("n_inner", false), set_ffn_hidden_size);
  BRAID_SET_OPT(f.number("layer_norm_epsilon"), set_norm_eps);
  BRAID_SET_OPT(f.number("initializer_range"), set_init_std);
  BRAID_SET_OPT(f.number("resid_pdrop"), set_hidden_dropout);
  BRAID_SET_OPT(f.number("attn_pdrop"), set_attention_dropout);
  BRAID_SET_OPT(f.number("embd_pdrop"), set_embedding_dropout);
  BRAID_SET_OPT(f.boolean("tie_word_embeddings"), set_tie_embeddings);
  auto act = f.string("activation_function");
  if (!act)
    return act.takeError();
  std::string activation = act->value_or("gelu_new");
  if (activation == "gelu_new" || activation == "gelu_pytorch_tanh")
    m.set_activation(spec::GELU_TANH);
  else if (activation == "gelu")
    m.set_activation(spec::GELU);
  else
    return fail(source, "field \"activation_function\" is \"" + activation +
                            "\" but only \"gelu_new\", \"gelu_pytorch_tanh\" "
                            "and \"gelu\" are supported");
  return llvm::Error::success();
}

llvm::Error importBloom(const Fields &f, spec::ModelSpec &m,
                        llvm::StringRef) {
  BRAID_SET_OPT(f.integer(f.firstPresent({"hidden_size", "n_embed"}), true),
                set_hidden_size);
  BRAID_SET_OPT(f.integer(f.firstPresent({"n_layer", "num_hidden_layers"}), true),
                set_num_layers);
  BRAID_SET_OPT(f.integer(f.firstPresent({"n_head", "num_attention_heads"}), true),
                set_num_heads);
  BRAID_SET_OPT(f.integer("vocab_size", true), set_vocab_size);
  BRAID_SET_OPT(f.number("layer_norm_epsilon"), set_norm_eps);
  BRAID_SET_OPT(f.number("initializer_range"), set_init_std);
  BRAID_SET_OPT(f.number("hidden_dropout"), set_hidden_dropout);
  BRAID_SET_OPT(f.number("attention_dropout"), set_attention_dropout);
  BRAID_SET_OPT(f.boolean("tie_word_embeddings"), set_tie_embeddings);
  return llvm::Error::success();
}

#undef BRAID_SET_OPT

} // namespace

llvm::ArrayRef<llvm::StringLiteral> braid::supportedHFArchitectures() {
  return kArchitectures;
}

llvm::Expected<spec::ModelSpec>
braid::importHFConfigText(llvm::StringRef text, llvm::StringRef source) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return fail(source, "not valid JSON: " + llvm::toString(parsed.takeError()));
  const Object *object = parsed->getAsObject();
  if (!object)
    return fail(source, "a config.json must be a JSON object");
  const llvm::json::Array *architectures = object->getArray("architectures");
  if (!architectures || architectures->empty() ||
      !(*architectures)[0].getAsString())
    return fail(source, "missing required field \"architectures\" (a list "
                        "naming the model class, e.g. [\"LlamaForCausalLM\"])");
  llvm::StringRef arch = *(*architectures)[0].getAsString();

  spec::ModelSpec m;
  m.set_hf_config(source.str());
  Fields fields(*object, source);
  llvm::Error error = llvm::Error::success();
  if (arch == "LlamaForCausalLM") {
    m.set_family(spec::LLAMA);
    error = importLlamaLike(fields, m, source);
  } else if (arch == "AquilaForCausalLM") {
    m.set_family(spec::AQUILA);
    error = importLlamaLike(fields, m, source);
  } else if (arch == "InternLMForCausalLM") {
    m.set_family(spec::INTERNLM);
    error = importLlamaLike(fields, m, source);
  } else if (arch == "BaichuanForCausalLM" || arch == "BaiChuanForCausalLM") {
    m.set_family(spec::BAICHUAN);
    error = importLlamaLike(fields, m, source);
  } else if (arch == "GPT2LMHeadModel") {
    m.set_family(spec::GPT2);
    error = importGpt2(fields, m, source);
  } else if (arch == "BloomForCausalLM") {
    m.set_family(spec::BLOOM);
    error = importBloom(fields, m, source);
  } else {
    consumeError(std::move(error));
    std::string known;
    llvm::raw_string_ostream os(known);
    llvm::interleaveComma(kArchitectures, os);
    return fail(source, "unknown architecture \"" + arch +
                            "\" in \"architectures\"; supported: " + known);
  }
  if (error)
    return std::move(error);
  return m;
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
constexpr int64_t kDefaultMaxSeqLen = 2048;

/// `v` as Python's json module writes a float (its repr): the shortest
/// digits that read back as `v`, positional for exponents in [-4, 16), and
/// ".0" on integral values. The file then reads as one Hugging Face wrote
/// (1e-05 rather than 1.0000000000000001e-05, 10000.0 rather than 10000),
/// and it still reads back as exactly `v`.
std::string pythonFloat(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  char buffer[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", digits - 1, v);
    if (std::strtod(buffer, nullptr) == v)
      break;
  }
  llvm::StringRef text(buffer);
  std::string out = text.consume_front("-") ? "-" : "";
  auto [mantissa, exponentText] = text.split('e');
  int exponent = std::atoi(exponentText.str().c_str());
  std::string digits;
  for (char ch : mantissa)
    if (ch != '.')
      digits += ch;
  while (digits.size() > 1 && digits.back() == '0')
    digits.pop_back();
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char suffix[16];
    std::snprintf(suffix, sizeof(suffix), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + suffix;
  }
  if (exponent < 0)
    return out + "0." + std::string(-exponent - 1, '0') + digits;
  size_t whole = exponent + 1;
  if (digits.size() < whole)
    digits.append(whole - digits.size(), '0');
  std::string fraction = digits.size() > whole ? digits.substr(whole) : "0";
  return out + digits.substr(0, whole) + "." + fraction;
}

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
  HFObject(llvm::StringRef architecture, llvm::StringRef modelType) {
    set("architectures", llvm::json::Array{architecture});
    set("model_type", modelType);
    // Braid's parameters are fp32; the checkpoint exporter writes them so.
    set("torch_dtype", "float32");
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
                                            llvm::StringRef modelType) {
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

  HFObject o(cls, modelType);
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
                                       llvm::StringRef modelType) {
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

  HFObject o(cls, modelType);
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
                                        llvm::StringRef modelType) {
  if (llvm::Error e = checkGptLike(c, cls))
    return std::move(e);
  if (c.ffnHiddenSize != 4 * c.hiddenSize)
    return cannotExpress(cls, "ffn_hidden_size", llvm::Twine(c.ffnHiddenSize),
                         "its MLP width is always 4 * hidden_size = " +
                             llvm::Twine(4 * c.hiddenSize));
  if (c.maxSeqLen != kDefaultMaxSeqLen)
    return cannotExpress(cls, "max_seq_len", llvm::Twine(c.maxSeqLen),
                         "it has no position limit (ALiBi), so only the "
                         "default " +
                             llvm::Twine(kDefaultMaxSeqLen) + " reads back");
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

  HFObject o(cls, modelType);
  o.set("hidden_size", c.hiddenSize);
  o.set("n_head", c.numHeads);
  o.set("n_layer", c.numLayers);
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

llvm::Expected<std::string> braid::exportHFConfig(const ModelConfig &config) {
  switch (config.family) {
  case spec::LLAMA:
    return exportLlamaLike(config, "LlamaForCausalLM", "llama");
  case spec::AQUILA:
    return exportLlamaLike(config, "AquilaForCausalLM", "aquila");
  case spec::INTERNLM:
    return exportLlamaLike(config, "InternLMForCausalLM", "internlm");
  case spec::BAICHUAN:
    return exportLlamaLike(config, "BaichuanForCausalLM", "baichuan");
  case spec::GPT2:
    return exportGpt2(config, "GPT2LMHeadModel", "gpt2");
  case spec::BLOOM:
    return exportBloom(config, "BloomForCausalLM", "bloom");
  default:
    return exportError("model.family = " + familyName(config.family) +
                       " has no Hugging Face model class");
  }
}
