//===- ModelConfig.cpp - Resolving and validating a model -----------------===//

#include "frontends/ModelConfig.h"

#include "frontends/Format.h"
#include "frontends/HFConfig.h"
#include "frontends/Presets.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <optional>

using namespace braid;

namespace {

llvm::Error invalid(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 message.str());
}

/// The largest size any field may have: token ids are int32, and every
/// tensor size and cost product stays far inside int64.
constexpr int64_t kMaxSize = int64_t(1) << 30;

/// Checks `value` in [1, kMaxSize] for the field `name`.
llvm::Error checkSize(const char *name, int64_t value) {
  if (value < 1 || value > kMaxSize)
    return invalid(llvm::Twine(name) + " = " + llvm::Twine(value) +
                   " must be in [1, " + llvm::Twine(kMaxSize) + "]");
  return llvm::Error::success();
}

bool isGptStyle(spec::Family f) { return f == spec::GPT2 || f == spec::BLOOM; }

std::string str(double v) { return formatNumber(v); }

/// The base architecture: a preset or a config.json (at most one).
llvm::Expected<spec::ModelSpec> loadBase(const spec::ModelSpec &m) {
  if (m.has_preset() && m.has_hf_config())
    return invalid("model.preset = \"" + m.preset() + "\" and model.hf_config = \"" +
                   m.hf_config() + "\" are both set; give one of them");
  if (m.has_preset()) {
    std::optional<spec::ModelSpec> preset = lookupPreset(m.preset());
    if (!preset) {
      std::string names;
      llvm::raw_string_ostream os(names);
      llvm::interleaveComma(presetNames(), os);
      return invalid("model.preset = \"" + m.preset() +
                     "\" is not a known preset; known presets: " + names);
    }
    return *preset;
  }
  if (m.has_hf_config())
    return importHFConfig(m.hf_config());
  return spec::ModelSpec();
}

/// Where the fields of a job's model come from: its base (a preset or a
/// config.json) or its inline fields, which replace the base's.
class Provenance {
public:
  Provenance(const spec::ModelSpec &base, const spec::ModelSpec &given)
      : base(base), given(given) {
    if (given.has_preset())
      baseName = "preset \"" + given.preset() + "\"";
    else if (given.has_hf_config())
      baseName = "config.json " + given.hf_config();
  }

  /// True when the job sets `field` to another value than its base's.
  bool replaced(const char *field) const {
    const google::protobuf::FieldDescriptor *f = descriptor(field);
    if (!reflection()->HasField(given, f) || !reflection()->HasField(base, f))
      return false;
    return text(given, f) != text(base, f);
  }

  /// True when `field`'s value is the base's: the job does not set it.
  bool inherited(const char *field) const {
    const google::protobuf::FieldDescriptor *f = descriptor(field);
    return !reflection()->HasField(given, f) && reflection()->HasField(base, f);
  }

  /// "model.hidden_size = 64 replaces the 4096 of preset "bloom-7b1"".
  std::string replacement(const char *field) const {
    const google::protobuf::FieldDescriptor *f = descriptor(field);
    return std::string("model.") + field + " = " + text(given, f) +
           " replaces the " + text(base, f) + " of " + baseName;
  }

  /// For a check of `field` that failed: when the base set `field` and the
  /// job replaced `dependsOn`, the value the base made for another
  /// `dependsOn` is stale, which the message says (empty otherwise).
  std::string staleNote(const char *field, const char *dependsOn) const {
    if (!inherited(field) || !replaced(dependsOn))
      return "";
    const google::protobuf::FieldDescriptor *d = descriptor(dependsOn);
    return std::string("; model.") + field + " comes from " + baseName +
           ", made for its model." + dependsOn + " = " + text(base, d) +
           ", not the job's " + text(given, d) + ": set model." + field +
           " in the job";
  }

private:
  static const google::protobuf::Reflection *reflection() {
    return spec::ModelSpec::GetReflection();
  }
  static const google::protobuf::FieldDescriptor *descriptor(const char *name) {
    const google::protobuf::FieldDescriptor *f =
        spec::ModelSpec::descriptor()->FindFieldByName(name);
    assert(f && "not a ModelSpec field");
    return f;
  }
  /// A field's value as a job file states it (enums by their family name).
  static std::string text(const spec::ModelSpec &m,
                          const google::protobuf::FieldDescriptor *f) {
    using google::protobuf::FieldDescriptor;
    switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
      return std::to_string(reflection()->GetInt64(m, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return str(reflection()->GetDouble(m, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return reflection()->GetBool(m, f) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return f->name() == "family"
                 ? familyName(spec::Family(reflection()->GetEnumValue(m, f)))
                 : reflection()->GetEnum(m, f)->name();
    default:
      return "\"" + reflection()->GetString(m, f) + "\"";
    }
  }

  const spec::ModelSpec &base, &given;
  std::string baseName;
};

} // namespace

bool ModelConfig::fusedQkv() const {
  return family == spec::GPT2 || family == spec::BLOOM ||
         family == spec::BAICHUAN;
}

llvm::Expected<ModelConfig> braid::resolveModel(const spec::JobSpec &job) {
  const spec::ModelSpec &given = job.model();
  llvm::Expected<spec::ModelSpec> base = loadBase(given);
  if (!base)
    return base.takeError();
  // Inline fields override the preset or config.json: MergeFrom copies only
  // the fields that are set.
  spec::ModelSpec m = *base;
  m.MergeFrom(given);

  ModelConfig c;
  c.source = m.has_preset() ? m.preset()
             : m.has_hf_config() ? m.hf_config()
                                 : std::string("inline");
  if (!m.has_family() || m.family() == spec::FAMILY_UNSPECIFIED)
    return invalid("model.family is not set; name a preset (model.preset), a "
                   "config.json (model.hf_config), or set model.family");
  c.family = m.family();

  // Required sizes.
  struct Required {
    const char *name;
    bool has;
    int64_t value;
    int64_t *out;
  };
  for (Required r : {Required{"num_layers", m.has_num_layers(), m.num_layers(),
                              &c.numLayers},
                     Required{"hidden_size", m.has_hidden_size(),
                              m.hidden_size(), &c.hiddenSize},
                     Required{"num_heads", m.has_num_heads(), m.num_heads(),
                              &c.numHeads},
                     Required{"vocab_size", m.has_vocab_size(), m.vocab_size(),
                              &c.vocabSize}}) {
    if (!r.has)
      return invalid(llvm::Twine("model.") + r.name + " is not set");
    if (r.value < 1 || r.value > kMaxSize)
      return invalid(llvm::Twine("model.") + r.name + " = " +
                     llvm::Twine(r.value) + " must be in [1, " +
                     llvm::Twine(kMaxSize) + "]");
    *r.out = r.value;
  }

  // Fields derived from others: from their family's rule when unset, and
  // also when the job replaced the field the base's value was made for (a
  // preset's MLP width belongs to its hidden size).
  Provenance from(*base, given);
  bool gpt = isGptStyle(c.family);
  if (given.has_num_kv_heads() ||
      (m.has_num_kv_heads() && !from.replaced("num_heads"))) {
    c.numKvHeads = m.num_kv_heads();
  } else if (m.has_num_kv_heads()) {
    // The base's grouping kept: as many query heads per kv head (one in a
    // model without GQA), when that many divide the new heads.
    int64_t baseHeads = base->num_heads(), baseKv = base->num_kv_heads();
    int64_t group = baseKv >= 1 && baseHeads % baseKv == 0 ? baseHeads / baseKv
                                                            : 0;
    if (group == 0 || c.numHeads % group != 0)
      return invalid(from.replacement("num_heads") + ", whose " +
                     std::to_string(baseKv) +
                     " kv heads (model.num_kv_heads) cannot be derived for " +
                     std::to_string(c.numHeads) + " heads: " +
                     (group == 0 ? std::string("its heads are not groups of "
                                               "kv heads")
                                 : "its groups of " + std::to_string(group) +
                                       " query heads per kv head do not "
                                       "divide them") +
                     "; set model.num_kv_heads in the job");
    c.numKvHeads = c.numHeads / group;
    c.derivedFields.push_back(
        {"num_kv_heads", c.numKvHeads,
         group == 1 ? std::string("num_heads (one kv head per query head)")
                    : "num_heads / " + std::to_string(group) + " (" +
                          std::to_string(group) +
                          " query heads per kv head, as the base's)",
         from.replacement("num_heads")});
  } else {
    c.numKvHeads = c.numHeads;
    c.derivedFields.push_back({"num_kv_heads", c.numKvHeads,
                               "num_heads (one kv head per query head)",
                               "not set"});
  }
  if (llvm::Error e = checkSize("model.num_kv_heads", c.numKvHeads))
    return std::move(e);
  if (c.hiddenSize % c.numHeads != 0)
    return invalid("model.num_heads = " + llvm::Twine(c.numHeads) +
                   " does not divide model.hidden_size = " +
                   llvm::Twine(c.hiddenSize) +
                   from.staleNote("num_heads", "hidden_size"));
  if (c.numHeads % c.numKvHeads != 0)
    return invalid("model.num_kv_heads = " + llvm::Twine(c.numKvHeads) +
                   " does not divide model.num_heads = " +
                   llvm::Twine(c.numHeads));
  c.headDim = c.hiddenSize / c.numHeads;

  const char *ffnStaleBy = from.replaced("hidden_size") ? "hidden_size"
                           : from.replaced("family")    ? "family"
                                                        : nullptr;
  if (given.has_ffn_hidden_size() || (m.has_ffn_hidden_size() && !ffnStaleBy)) {
    c.ffnHiddenSize = m.ffn_hidden_size();
  } else {
    c.ffnHiddenSize = familyFfnHiddenSize(c.family, c.hiddenSize);
    std::string rule = gpt ? "4 * hidden_size"
                           : "ceil(2/3 * 4 * hidden_size / 256) * 256";
    if (c.ffnHiddenSize > kMaxSize)
      return invalid("model.ffn_hidden_size = " +
                     llvm::Twine(c.ffnHiddenSize) + ", derived as " + rule +
                     " from model.hidden_size = " +
                     llvm::Twine(c.hiddenSize) + ", must be in [1, " +
                     llvm::Twine(kMaxSize) + "]");
    c.derivedFields.push_back(
        {"ffn_hidden_size", c.ffnHiddenSize, rule,
         ffnStaleBy ? from.replacement(ffnStaleBy) : "not set"});
  }
  if (llvm::Error e = checkSize("model.ffn_hidden_size", c.ffnHiddenSize))
    return std::move(e);

  int64_t divisor =
      m.has_make_vocab_size_divisible_by() ? m.make_vocab_size_divisible_by() : 1;
  if (llvm::Error e = checkSize("model.make_vocab_size_divisible_by", divisor))
    return std::move(e);
  c.paddedVocabSize = (c.vocabSize + divisor - 1) / divisor * divisor;

  c.norm = m.has_norm() && m.norm() != spec::NORM_UNSPECIFIED
               ? m.norm()
               : (gpt ? spec::LAYER_NORM : spec::RMS_NORM);
  c.normEps = m.has_norm_eps() ? m.norm_eps()
                               : (c.norm == spec::LAYER_NORM ? 1e-5 : 1e-6);
  if (!(c.normEps > 0))
    return invalid("model.norm_eps = " + str(c.normEps) + " must be > 0");
  c.activation = m.has_activation() && m.activation() != spec::ACTIVATION_UNSPECIFIED
                     ? m.activation()
                     : (gpt ? spec::GELU_TANH : spec::SWIGLU);
  if (gpt && c.activation == spec::SWIGLU)
    return invalid("model.activation = swiglu is not available for family " +
                   familyName(c.family) +
                   ", whose checkpoints name a GeLU MLP (c_fc/dense_h_to_4h)");
  c.positionEmbedding =
      m.has_position_embedding() && m.position_embedding() != spec::POSITION_UNSPECIFIED
          ? m.position_embedding()
          : (c.family == spec::GPT2    ? spec::LEARNED
             : c.family == spec::BLOOM ? spec::ALIBI
                                       : spec::ROPE);
  c.ropeTheta = m.has_rope_theta() ? m.rope_theta() : 10000.0;
  if (c.positionEmbedding == spec::ROPE) {
    if (!(c.ropeTheta > 0))
      return invalid("model.rope_theta = " + str(c.ropeTheta) + " must be > 0");
    if (c.headDim % 2 != 0)
      return invalid("RoPE needs an even head size, but model.hidden_size / "
                     "model.num_heads = " +
                     llvm::Twine(c.headDim) +
                     from.staleNote("num_heads", "hidden_size"));
  }
  if (c.family == spec::BLOOM && c.numKvHeads != c.numHeads)
    return invalid("model.num_kv_heads = " + llvm::Twine(c.numKvHeads) +
                   " must equal model.num_heads = " + llvm::Twine(c.numHeads) +
                   " for family bloom, whose fused QKV is stored per head" +
                   from.staleNote("num_kv_heads", "family"));

  c.tieEmbeddings = m.has_tie_embeddings() ? m.tie_embeddings() : gpt;
  c.attentionBias = m.has_attention_bias()
                        ? m.attention_bias()
                        : (gpt || c.family == spec::INTERNLM);
  c.mlpBias = m.has_mlp_bias() ? m.mlp_bias() : gpt;
  c.embeddingNorm =
      m.has_embedding_norm() ? m.embedding_norm() : c.family == spec::BLOOM;
  c.fuseMlp = m.fuse_mlp();
  if (c.fuseMlp && c.activation != spec::SWIGLU)
    return invalid("model.fuse_mlp fuses SwiGLU's gate and up projections, "
                   "but model.activation = " +
                   activationName(c.activation) + " has one projection");
  c.initStd = m.has_init_std() ? m.init_std() : 0.02;
  if (!(c.initStd > 0) || !std::isfinite(c.initStd))
    return invalid("model.init_std = " + str(c.initStd) +
                   " must be finite and > 0");
  c.hiddenDropout = m.hidden_dropout();
  c.attentionDropout = m.attention_dropout();
  c.embeddingDropout = m.embedding_dropout();
  for (auto [name, rate] : {std::pair<const char *, double>{"hidden_dropout",
                                                            c.hiddenDropout},
                            {"attention_dropout", c.attentionDropout},
                            {"embedding_dropout", c.embeddingDropout}})
    if (!(rate >= 0 && rate < 1))
      return invalid(llvm::Twine("model.") + name + " = " + str(rate) +
                     " must be in [0, 1)");

  c.maxSeqLen = m.has_max_seq_len() ? m.max_seq_len() : 2048;
  if (llvm::Error e = checkSize("model.max_seq_len", c.maxSeqLen))
    return std::move(e);

  // The batch of one forward pass.
  c.microBatchSize = job.parallel().has_micro_batch_size()
                         ? job.parallel().micro_batch_size()
                         : 1;
  if (llvm::Error e = checkSize("parallel.micro_batch_size", c.microBatchSize))
    return std::move(e);
  c.seqLength =
      job.data().has_seq_length() ? job.data().seq_length() : c.maxSeqLen;
  if (llvm::Error e = checkSize("data.seq_length", c.seqLength))
    return std::move(e);
  if (c.positionEmbedding == spec::LEARNED && c.seqLength > c.maxSeqLen)
    return invalid("data.seq_length = " + llvm::Twine(c.seqLength) +
                   " exceeds model.max_seq_len = " + llvm::Twine(c.maxSeqLen) +
                   ", the number of learned positions");
  c.dtype = job.train().has_precision() &&
                    job.train().precision() != spec::DTYPE_UNSPECIFIED
                ? job.train().precision()
                : spec::FP32;
  // What would not fit int64 or the IR budget is refused here, before any
  // IR is built.
  if (llvm::Error e = checkSizeLimits(c))
    return std::move(e);
  c.packedDocuments = job.data().pack();
  if (job.has_lora()) {
    const spec::LoraSpec &l = job.lora();
    LoraConfig &lora = c.lora;
    lora.enabled = true;
    if (l.has_rank())
      lora.rank = l.rank();
    if (lora.rank < 1)
      return invalid("lora.rank = " + llvm::Twine(lora.rank) +
                     " must be at least 1");
    if (l.has_alpha())
      lora.alpha = l.alpha();
    if (!(std::isfinite(lora.alpha) && lora.alpha > 0))
      return invalid("lora.alpha = " + str(lora.alpha) +
                     " must be a number > 0");
    if (l.has_dropout())
      lora.dropout = l.dropout();
    if (!(lora.dropout >= 0 && lora.dropout < 1))
      return invalid("lora.dropout = " + str(lora.dropout) +
                     " must be in [0, 1)");
    lora.targetModules.assign(l.target_modules().begin(),
                              l.target_modules().end());
    if (lora.targetModules.empty()) {
      // PEFT's defaults (its TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES).
      if (c.family == spec::GPT2)
        lora.targetModules = {"c_attn"};
      else if (c.family == spec::BLOOM)
        lora.targetModules = {"query_key_value"};
      else if (c.fusedQkv())
        lora.targetModules = {"W_pack"};
      else
        lora.targetModules = {"q_proj", "v_proj"};
    }
    lora.modulesToSave.assign(l.modules_to_save().begin(),
                              l.modules_to_save().end());
    for (const auto *names : {&lora.targetModules, &lora.modulesToSave})
      for (const std::string &name : *names)
        if (name.empty() || name.front() == '.' || name.back() == '.')
          return invalid("lora: \"" + name +
                         "\" is not a module name (e.g. q_proj, "
                         "self_attn.q_proj)");
  }
  return c;
}

namespace {

/// An int64 size computed with overflow checks: empty once a product or a
/// sum of it left int64.
struct Checked {
  std::optional<int64_t> value;
  Checked(int64_t v) : value(v) {}
  Checked(std::optional<int64_t> v) : value(v) {}
  bool under(int64_t limit) const { return value && *value < limit; }
  std::string text() const {
    return value ? std::to_string(*value) : std::string("more than 2^63");
  }
};

Checked operator*(Checked a, Checked b) {
  int64_t r;
  if (!a.value || !b.value || __builtin_mul_overflow(*a.value, *b.value, &r))
    return Checked(std::nullopt);
  return r;
}

Checked operator+(Checked a, Checked b) {
  int64_t r;
  if (!a.value || !b.value || __builtin_add_overflow(*a.value, *b.value, &r))
    return Checked(std::nullopt);
  return r;
}

/// Columns of a layer's QKV projection(s) and of its MLP input
/// projection(s) (gate and up for SwiGLU).
Checked qkvColumns(const ModelConfig &c) {
  return (Checked(c.numHeads) + Checked(2) * c.numKvHeads) * c.headDim;
}
Checked mlpColumns(const ModelConfig &c) {
  return Checked(c.ffnHiddenSize) * (c.activation == spec::SWIGLU ? 2 : 1);
}

/// The weights of one layer's matrix products.
Checked matmulWeightsPerLayer(const ModelConfig &c) {
  const Checked h = c.hiddenSize;
  return h * qkvColumns(c) + Checked(c.numHeads * c.headDim) * h +
         h * mlpColumns(c) + Checked(c.ffnHiddenSize) * h;
}

/// The parameters as ModelBuilder declares them.
Checked modelParameters(const ModelConfig &c) {
  const Checked h = c.hiddenSize, vocab = c.paddedVocabSize;
  const Checked norm = h * (c.norm == spec::LAYER_NORM ? 2 : 1);
  const Checked perLayer =
      matmulWeightsPerLayer(c) + Checked(2) * norm +
      (c.attentionBias ? qkvColumns(c) + h : Checked(0)) +
      (c.mlpBias ? mlpColumns(c) + h : Checked(0));
  const Checked outsideLayers =
      vocab * h * (c.tieEmbeddings ? 1 : 2) +
      (c.positionEmbedding == spec::LEARNED ? Checked(c.maxSeqLen) * h
                                            : Checked(0)) +
      (c.embeddingNorm ? Checked(2) * h : Checked(0)) + norm;
  return Checked(c.numLayers) * perLayer + outsideLayers;
}

int64_t elementBytes(spec::DType dtype) {
  switch (dtype) {
  case spec::BF16:
  case spec::FP16: return 2;
  case spec::FP64: return 8;
  default: return 4;
  }
}

} // namespace

std::optional<int64_t> braid::parameterCount(const ModelConfig &config) {
  return modelParameters(config).value;
}

llvm::Error braid::checkSizeLimits(const ModelConfig &c, int64_t microBatches,
                                    llvm::StringRef keptWhy) {
  const std::string where = " (docs/spec.md, \"Size limits\")";
  // The IR budget: the ops a compile builds grow with the layers alone.
  if (c.numLayers > kIrOpBudget / kIrOpsPerLayer)
    return invalid("model.num_layers = " + llvm::Twine(c.numLayers) +
                   " is over the compiler's IR budget: about " +
                   llvm::Twine(kIrOpsPerLayer) + " ops per layer make " +
                   llvm::Twine(c.numLayers * kIrOpsPerLayer) +
                   " ops, more than " + llvm::Twine(kIrOpBudget) +
                   " (at most " + llvm::Twine(kIrOpBudget / kIrOpsPerLayer) +
                   " layers)" + where);

  auto field = [](const char *name, int64_t value) {
    return std::string(name) + " = " + std::to_string(value);
  };
  // Parameters are stored in the dtype (e bytes); gradients, moments,
  // activations and logits are counted at 4 bytes at least (f32 in mixed
  // precision).
  const int64_t e = elementBytes(c.dtype), w = std::max<int64_t>(e, 4);
  const bool swiglu = c.activation == spec::SWIGLU;
  const Checked h = c.hiddenSize, vocab = c.paddedVocabSize;
  const Checked tokens = Checked(c.microBatchSize) * c.seqLength;
  const Checked qkvCols = qkvColumns(c), mlpCols = mlpColumns(c);
  const std::string hField = field("model.hidden_size", c.hiddenSize);
  const std::string vocabText =
      "the padded vocabulary " + std::to_string(c.paddedVocabSize) + " (" +
      field("model.vocab_size", c.vocabSize) + ")";
  const std::string tokensText =
      field("parallel.micro_batch_size", c.microBatchSize) + " x " +
      field("data.seq_length", c.seqLength);
  const std::string qkvText =
      "(" + field("model.num_heads", c.numHeads) + " + 2 x " +
      field("model.num_kv_heads", c.numKvHeads) + ") x head size " +
      std::to_string(c.headDim);
  const std::string mlpText =
      field("model.ffn_hidden_size", c.ffnHiddenSize) + (swiglu ? " x 2" : "");

  // Every tensor, in elements of w bytes.
  struct Tensor {
    std::string what;
    Checked elements;
  };
  std::vector<Tensor> tensors = {
      {"the token embedding, " + vocabText + " x " + hField, vocab * h},
      {"a layer's QKV weights, " + hField + " x " + qkvText, h * qkvCols},
      {"a layer's MLP weights, " + hField + " x " + mlpText, h * mlpCols},
      {"the hidden states, " + tokensText + " x " + hField, tokens * h},
      {"a layer's QKV activations, " + tokensText + " x " + qkvText,
       tokens * qkvCols},
      {"a layer's MLP activations, " + tokensText + " x " + mlpText,
       tokens * mlpCols},
      {"a layer's attention scores, " +
           field("parallel.micro_batch_size", c.microBatchSize) + " x " +
           field("model.num_heads", c.numHeads) + " x (" +
           field("data.seq_length", c.seqLength) + ")^2",
       Checked(c.microBatchSize) * c.numHeads * c.seqLength * c.seqLength},
      {"the logits, " + tokensText + " x " + vocabText, tokens * vocab},
  };
  if (c.positionEmbedding == spec::LEARNED)
    tensors.push_back({"the position table, " +
                           field("model.max_seq_len", c.maxSeqLen) + " x " +
                           hField,
                       Checked(c.maxSeqLen) * h});
  for (const Tensor &t : tensors) {
    Checked bytes = t.elements * w;
    if (!bytes.under(kMaxSizeBytes))
      return invalid(t.what + ", is " + t.elements.text() + " elements of " +
                     llvm::Twine(w) + " B = " + bytes.text() +
                     " B, over the limit of 2^62 B" + where);
  }

  // The parameters, with their gradients, AdamW's two moments and, below
  // 4-byte parameters, an f32 master copy: 16 B each in fp32, 18 in bf16
  // and fp16, 32 in fp64 (docs/memory.md).
  const Checked matmulPerLayer = matmulWeightsPerLayer(c);
  const Checked parameters = modelParameters(c);
  const int64_t stateBytes = e + 3 * w + (e < 4 ? 4 : 0);
  const std::string sizesText =
      field("model.num_layers", c.numLayers) + ", " + hField + ", " +
      field("model.num_heads", c.numHeads) + ", " +
      field("model.num_kv_heads", c.numKvHeads) + ", " +
      field("model.ffn_hidden_size", c.ffnHiddenSize) + ", " + vocabText;
  const Checked state = parameters * stateBytes;
  if (!state.under(kMaxSizeBytes))
    return invalid("the parameters with their gradients and optimizer "
                   "state, " +
                   parameters.text() + " parameters (" + sizesText + ") x " +
                   llvm::Twine(stateBytes) + " B = " + state.text() +
                   " B, are over the limit of 2^62 B" + where);

  // The activations a step keeps: per layer at most 64 tensors of its
  // widest activation (31 to 57 were measured, fp32 and bf16, with and
  // without tp, sp and recompute), and the logits with their gradients,
  // for each micro-batch kept at once.
  Checked widest = std::max({*h.value, qkvCols.value.value_or(INT64_MAX),
                             mlpCols.value.value_or(INT64_MAX)});
  const Checked perMicroBatch =
      (Checked(c.numLayers) * 64 * tokens * widest + Checked(4) * tokens * vocab) *
      w;
  const Checked activations = perMicroBatch * microBatches;
  if (!(state + activations).under(kMaxSizeBytes))
    return invalid(
        "the activations of " +
        (microBatches == 1 ? std::string("a micro-batch")
                           : std::to_string(microBatches) + " micro-batches" +
                                 (keptWhy.empty() ? "" : " (" + keptWhy.str() + ")")) +
        " (" + tokensText + ", " + sizesText + "), at most " +
        activations.text() + " B, with the parameters' " + state.text() +
        " B of state, are over the limit of 2^62 B" + where);

  // The FLOPs of one micro-batch's forward: 2 per multiply-add of the matrix
  // products, and attention's q.k^T and p.v.
  const Checked flops =
      Checked(2) * tokens * (Checked(c.numLayers) * matmulPerLayer + vocab * h) +
      Checked(4) * c.numLayers * c.microBatchSize * c.seqLength * c.seqLength *
          (c.numHeads * c.headDim);
  if (!flops.under(kMaxSizeBytes))
    return invalid("one micro-batch's forward, " + tokensText + " tokens of " +
                   parameters.text() + " parameters (" + sizesText + "), is " +
                   flops.text() + " FLOPs, over the limit of 2^62" + where);
  return llvm::Error::success();
}

spec::ModelSpec braid::inlineModelSpec(const ModelConfig &c) {
  spec::ModelSpec m;
  m.set_family(c.family);
  m.set_num_layers(c.numLayers);
  m.set_hidden_size(c.hiddenSize);
  m.set_num_heads(c.numHeads);
  m.set_num_kv_heads(c.numKvHeads);
  m.set_ffn_hidden_size(c.ffnHiddenSize);
  m.set_vocab_size(c.vocabSize);
  // The padded rows as a divisor only when they are not the vocabulary:
  // resolving rounds vocab_size up to a multiple of it, which gives them.
  m.set_make_vocab_size_divisible_by(
      c.paddedVocabSize == c.vocabSize ? 1 : c.paddedVocabSize);
  m.set_max_seq_len(c.maxSeqLen);
  m.set_norm(c.norm);
  m.set_norm_eps(c.normEps);
  m.set_activation(c.activation);
  m.set_position_embedding(c.positionEmbedding);
  m.set_rope_theta(c.ropeTheta);
  m.set_tie_embeddings(c.tieEmbeddings);
  m.set_attention_bias(c.attentionBias);
  m.set_mlp_bias(c.mlpBias);
  m.set_embedding_norm(c.embeddingNorm);
  m.set_init_std(c.initStd);
  m.set_hidden_dropout(c.hiddenDropout);
  m.set_attention_dropout(c.attentionDropout);
  m.set_embedding_dropout(c.embeddingDropout);
  m.set_fuse_mlp(c.fuseMlp);
  return m;
}

std::string braid::familyName(spec::Family family) {
  switch (family) {
  case spec::GPT2: return "gpt2";
  case spec::LLAMA: return "llama";
  case spec::BLOOM: return "bloom";
  case spec::BAICHUAN: return "baichuan";
  case spec::INTERNLM: return "internlm";
  case spec::AQUILA: return "aquila";
  default: return "unspecified";
  }
}

std::string braid::normName(spec::Norm norm) {
  return norm == spec::LAYER_NORM ? "layer_norm"
         : norm == spec::RMS_NORM ? "rms_norm"
                                  : "unspecified";
}

std::string braid::activationName(spec::Activation activation) {
  switch (activation) {
  case spec::GELU_TANH: return "gelu_tanh";
  case spec::GELU: return "gelu";
  case spec::SWIGLU: return "swiglu";
  default: return "unspecified";
  }
}

std::string braid::positionName(spec::PositionEmbedding position) {
  switch (position) {
  case spec::LEARNED: return "learned";
  case spec::ROPE: return "rope";
  case spec::ALIBI: return "alibi";
  default: return "unspecified";
  }
}

std::string braid::dtypeName(spec::DType dtype) {
  switch (dtype) {
  case spec::FP32: return "fp32";
  case spec::BF16: return "bf16";
  case spec::FP16: return "fp16";
  case spec::FP64: return "fp64";
  default: return "unspecified";
  }
}
