//===- HFImport.cpp - Hugging Face config.json import, without LLVM -------===//
//
// Fields are mapped by name. A field an architecture needs and the file lacks,
// a field of the wrong JSON type, and an architecture outside the supported
// list are errors that name the file and the field. The JSON is parsed by
// Protobuf (into a google.protobuf.Struct), as the runtime parses its other
// JSON files.
//
//===----------------------------------------------------------------------===//

#include "frontends/spec/HFImport.h"

#include "runtime/common/Json.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace braid {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr absl::string_view kArchitectures[] = {
    "LlamaForCausalLM",    "GPT2LMHeadModel",     "BloomForCausalLM",
    "BaichuanForCausalLM", "BaiChuanForCausalLM", "InternLMForCausalLM",
    "AquilaForCausalLM"};

absl::Status fail(absl::string_view source, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", message));
}

/// A JSON value as JSON text, for messages ("768" with its quotes, 64.5).
std::string describe(const Value &value) {
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(value, &out).ok())
    return "(a value)";
  return out;
}

/// Typed access to the fields of one config.json, errors naming the field.
class Fields {
public:
  Fields(const Struct &object, absl::string_view source)
      : object(object), source(source) {}

  /// The field `key`, present even when null; null when absent.
  const Value *raw(absl::string_view key) const {
    auto it = object.fields().find(std::string(key));
    return it == object.fields().end() ? nullptr : &it->second;
  }
  bool has(absl::string_view key) const { return raw(key) != nullptr; }

  /// The field `key` read by `extract`; none when it is absent or null, an
  /// error when it is required and absent, or not of the `kind` expected.
  template <typename T, typename Extract>
  absl::StatusOr<std::optional<T>> get(absl::string_view key, bool required,
                                       absl::string_view kind,
                                       Extract extract) const {
    const Value *value = raw(key);
    if (!value || value->kind_case() == Value::kNullValue) {
      if (required)
        return fail(source, absl::StrCat("missing required field \"", key, "\""));
      return std::optional<T>();
    }
    if (std::optional<T> v = extract(*value))
      return v;
    return fail(source, absl::StrCat("field \"", key, "\" must be ", kind,
                                     ", found ", describe(*value)));
  }

  absl::StatusOr<std::optional<int64_t>> integer(absl::string_view key,
                                                 bool required) const {
    return get<int64_t>(key, required, "an integer",
                        [](const Value &v) -> std::optional<int64_t> {
                          if (v.kind_case() != Value::kNumberValue)
                            return std::nullopt;
                          double d = v.number_value(), whole;
                          // Integral and inside int64 (2^63 is not).
                          if (std::modf(d, &whole) != 0.0 || !(d >= -0x1p63) ||
                              !(d < 0x1p63))
                            return std::nullopt;
                          return int64_t(d);
                        });
  }
  absl::StatusOr<std::optional<double>> number(absl::string_view key) const {
    return get<double>(key, false, "a number",
                       [](const Value &v) -> std::optional<double> {
                         if (v.kind_case() != Value::kNumberValue)
                           return std::nullopt;
                         return v.number_value();
                       });
  }
  absl::StatusOr<std::optional<bool>> boolean(absl::string_view key) const {
    return get<bool>(key, false, "true or false",
                     [](const Value &v) -> std::optional<bool> {
                       if (v.kind_case() != Value::kBoolValue)
                         return std::nullopt;
                       return v.bool_value();
                     });
  }
  absl::StatusOr<std::optional<std::string>>
  string(absl::string_view key) const {
    return get<std::string>(key, false, "a string",
                            [](const Value &v) -> std::optional<std::string> {
                              if (v.kind_case() != Value::kStringValue)
                                return std::nullopt;
                              return v.string_value();
                            });
  }

  /// The first of `keys` that is present (for fields with aliases).
  absl::string_view
  firstPresent(std::initializer_list<absl::string_view> keys) const {
    for (absl::string_view key : keys)
      if (has(key))
        return key;
    return *keys.begin();
  }

private:
  const Struct &object;
  absl::string_view source;
};

// Assigns an optional field of a spec from a StatusOr<optional<T>>.
#define BRAID_SET_OPT(expr, setter)                                            \
  do {                                                                         \
    auto braidValue = (expr);                                                  \
    if (!braidValue.ok())                                                      \
      return braidValue.status();                                              \
    if (*braidValue)                                                           \
      m.setter(**braidValue);                                                  \
  } while (false)

/// LLaMA, InternLM, Aquila and Baichuan share the LLaMA field names.
absl::Status importLlamaLike(const Fields &f, spec::ModelSpec &m,
                             absl::string_view source) {
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
  absl::StatusOr<std::optional<std::string>> act = f.string("hidden_act");
  if (!act.ok())
    return act.status();
  if (*act && **act != "silu")
    return fail(source, absl::StrCat("field \"hidden_act\" is \"", **act,
                                     "\" but this architecture supports only "
                                     "\"silu\" (SwiGLU)"));
  m.set_activation(spec::SWIGLU);
  // RoPE scaling (linear, dynamic NTK, YaRN, ...) changes the model's math;
  // refuse it rather than train a different model.
  if (const Value *scaling = f.raw("rope_scaling");
      scaling && scaling->kind_case() != Value::kNullValue)
    return fail(source, "field \"rope_scaling\" is set, but RoPE scaling is "
                        "not supported; remove it or set it to null");
  if (m.family() == spec::INTERNLM) {
    // InternLM's `bias` puts biases on the Q, K, V and output projections.
    absl::StatusOr<std::optional<bool>> bias = f.boolean("bias");
    if (!bias.ok())
      return bias.status();
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
  return absl::OkStatus();
}

absl::Status importGpt2(const Fields &f, spec::ModelSpec &m,
                        absl::string_view source) {
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
  absl::StatusOr<std::optional<std::string>> act =
      f.string("activation_function");
  if (!act.ok())
    return act.status();
  std::string activation = act->value_or("gelu_new");
  if (activation == "gelu_new" || activation == "gelu_pytorch_tanh")
    m.set_activation(spec::GELU_TANH);
  else if (activation == "gelu")
    m.set_activation(spec::GELU);
  else
    return fail(source, absl::StrCat("field \"activation_function\" is \"",
                                     activation,
                                     "\" but only \"gelu_new\", "
                                     "\"gelu_pytorch_tanh\" and \"gelu\" are "
                                     "supported"));
  return absl::OkStatus();
}

absl::Status importBloom(const Fields &f, spec::ModelSpec &m) {
  BRAID_SET_OPT(f.integer(f.firstPresent({"hidden_size", "n_embed"}), true),
                set_hidden_size);
  BRAID_SET_OPT(
      f.integer(f.firstPresent({"n_layer", "num_hidden_layers"}), true),
      set_num_layers);
  BRAID_SET_OPT(
      f.integer(f.firstPresent({"n_head", "num_attention_heads"}), true),
      set_num_heads);
  BRAID_SET_OPT(f.integer("vocab_size", true), set_vocab_size);
  // No position limit (ALiBi); the trained length where BigScience's
  // configs (and Braid's exports) keep it.
  BRAID_SET_OPT(f.integer("seq_length", false), set_max_seq_len);
  BRAID_SET_OPT(f.number("layer_norm_epsilon"), set_norm_eps);
  BRAID_SET_OPT(f.number("initializer_range"), set_init_std);
  BRAID_SET_OPT(f.number("hidden_dropout"), set_hidden_dropout);
  BRAID_SET_OPT(f.number("attention_dropout"), set_attention_dropout);
  BRAID_SET_OPT(f.boolean("tie_word_embeddings"), set_tie_embeddings);
  return absl::OkStatus();
}

#undef BRAID_SET_OPT

} // namespace

absl::Span<const absl::string_view> supportedHFArchitectures() {
  return kArchitectures;
}

absl::StatusOr<spec::ModelSpec> importHFConfigJson(absl::string_view text,
                                                   absl::string_view source) {
  // Struct parses any JSON object; anything else is refused first, so that
  // the message says what a config.json must be.
  if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "{"))
    return fail(source, "a config.json must be a JSON object");
  Struct object;
  if (absl::Status s = common::JsonToMessage(text, &object); !s.ok())
    return fail(source, s.message());
  Fields fields(object, source);
  const Value *architectures = fields.raw("architectures");
  if (!architectures || architectures->kind_case() != Value::kListValue ||
      architectures->list_value().values_size() == 0 ||
      architectures->list_value().values(0).kind_case() !=
          Value::kStringValue)
    return fail(source, "missing required field \"architectures\" (a list "
                        "naming the model class, e.g. [\"LlamaForCausalLM\"])");
  const std::string &arch = architectures->list_value().values(0).string_value();

  spec::ModelSpec m;
  m.set_hf_config(std::string(source));
  absl::Status status;
  if (arch == "LlamaForCausalLM") {
    m.set_family(spec::LLAMA);
    status = importLlamaLike(fields, m, source);
  } else if (arch == "AquilaForCausalLM") {
    m.set_family(spec::AQUILA);
    status = importLlamaLike(fields, m, source);
  } else if (arch == "InternLMForCausalLM") {
    m.set_family(spec::INTERNLM);
    status = importLlamaLike(fields, m, source);
  } else if (arch == "BaichuanForCausalLM" || arch == "BaiChuanForCausalLM") {
    m.set_family(spec::BAICHUAN);
    status = importLlamaLike(fields, m, source);
  } else if (arch == "GPT2LMHeadModel") {
    m.set_family(spec::GPT2);
    status = importGpt2(fields, m, source);
  } else if (arch == "BloomForCausalLM") {
    m.set_family(spec::BLOOM);
    status = importBloom(fields, m);
  } else {
    return fail(source, absl::StrCat("unknown architecture \"", arch,
                                     "\" in \"architectures\"; supported: ",
                                     absl::StrJoin(kArchitectures, ", ")));
  }
  if (!status.ok())
    return status;
  return m;
}

int64_t familyFfnHiddenSize(spec::Family family, int64_t hiddenSize) {
  if (family == spec::GPT2 || family == spec::BLOOM)
    return 4 * hiddenSize;
  // LLaMA's rule: 2/3 of 4h, rounded up to a multiple of 256.
  int64_t ffn = 2 * (4 * hiddenSize) / 3;
  return (ffn + 255) / 256 * 256;
}

spec::ModelSpec withHFClassDefaults(const spec::ModelSpec &imported) {
  spec::ModelSpec m = imported;
  const spec::Family family = m.family();
  const bool gpt = family == spec::GPT2 || family == spec::BLOOM;
  if (!m.has_num_kv_heads())
    m.set_num_kv_heads(m.num_heads());
  if (!m.has_ffn_hidden_size())
    m.set_ffn_hidden_size(familyFfnHiddenSize(family, m.hidden_size()));
  if (!m.has_make_vocab_size_divisible_by())
    m.set_make_vocab_size_divisible_by(1);
  if (!m.has_max_seq_len())
    m.set_max_seq_len(2048);
  if (!m.has_norm() || m.norm() == spec::NORM_UNSPECIFIED)
    m.set_norm(gpt ? spec::LAYER_NORM : spec::RMS_NORM);
  if (!m.has_norm_eps())
    m.set_norm_eps(m.norm() == spec::LAYER_NORM ? 1e-5 : 1e-6);
  if (!m.has_activation() || m.activation() == spec::ACTIVATION_UNSPECIFIED)
    m.set_activation(gpt ? spec::GELU_TANH : spec::SWIGLU);
  if (!m.has_position_embedding() ||
      m.position_embedding() == spec::POSITION_UNSPECIFIED)
    m.set_position_embedding(family == spec::GPT2    ? spec::LEARNED
                             : family == spec::BLOOM ? spec::ALIBI
                                                     : spec::ROPE);
  if (!m.has_rope_theta())
    m.set_rope_theta(10000.0);
  if (!m.has_tie_embeddings())
    m.set_tie_embeddings(gpt);
  if (!m.has_attention_bias())
    m.set_attention_bias(gpt || family == spec::INTERNLM);
  if (!m.has_mlp_bias())
    m.set_mlp_bias(gpt);
  if (!m.has_embedding_norm())
    m.set_embedding_norm(family == spec::BLOOM);
  if (!m.has_init_std())
    m.set_init_std(0.02);
  m.set_hidden_dropout(m.hidden_dropout());
  m.set_attention_dropout(m.attention_dropout());
  m.set_embedding_dropout(m.embedding_dropout());
  m.set_fuse_mlp(m.fuse_mlp());
  return m;
}

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
  absl::string_view text(buffer);
  std::string out = absl::ConsumePrefix(&text, "-") ? "-" : "";
  size_t e = text.find('e');
  absl::string_view mantissa = text.substr(0, e);
  int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());
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

} // namespace braid
