//===- ModelConfig.cpp - Resolving and validating a model -----------------===//

#include "frontends/ModelConfig.h"

#include "frontends/HFConfig.h"
#include "frontends/Presets.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

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

std::string str(double v) {
  std::string s;
  llvm::raw_string_ostream(s) << v;
  return s;
}

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

  // Family defaults for what is still unset.
  bool gpt = isGptStyle(c.family);
  c.numKvHeads = m.has_num_kv_heads() ? m.num_kv_heads() : c.numHeads;
  if (llvm::Error e = checkSize("model.num_kv_heads", c.numKvHeads))
    return std::move(e);
  if (c.hiddenSize % c.numHeads != 0)
    return invalid("model.num_heads = " + llvm::Twine(c.numHeads) +
                   " does not divide model.hidden_size = " +
                   llvm::Twine(c.hiddenSize));
  if (c.numHeads % c.numKvHeads != 0)
    return invalid("model.num_kv_heads = " + llvm::Twine(c.numKvHeads) +
                   " does not divide model.num_heads = " +
                   llvm::Twine(c.numHeads));
  c.headDim = c.hiddenSize / c.numHeads;

  if (m.has_ffn_hidden_size()) {
    c.ffnHiddenSize = m.ffn_hidden_size();
  } else if (gpt) {
    c.ffnHiddenSize = 4 * c.hiddenSize;
  } else {
    // LLaMA's rule: 2/3 of 4h, rounded up to a multiple of 256.
    int64_t ffn = 2 * (4 * c.hiddenSize) / 3;
    c.ffnHiddenSize = (ffn + 255) / 256 * 256;
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
                     llvm::Twine(c.headDim));
  }
  if (c.family == spec::BLOOM && c.numKvHeads != c.numHeads)
    return invalid("model.num_kv_heads = " + llvm::Twine(c.numKvHeads) +
                   " must equal model.num_heads = " + llvm::Twine(c.numHeads) +
                   " for family bloom, whose fused QKV is stored per head");

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
  if (!(c.initStd > 0))
    return invalid("model.init_std = " + str(c.initStd) + " must be > 0");
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
  return c;
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
