//===- HFConfig.cpp - Hugging Face config.json import ---------------------===//
//
// Fields are mapped by name. A field an architecture needs and the file lacks,
// a field of the wrong JSON type, and an architecture outside the supported
// list are errors that name the file and the field.
//
//===----------------------------------------------------------------------===//

#include "frontends/HFConfig.h"

#include "frontends/Spec.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/JSON.h"

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
