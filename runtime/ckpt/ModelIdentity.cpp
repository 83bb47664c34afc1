//===- ModelIdentity.cpp - Is a checkpoint of the plan's model? -----------===//

#include "runtime/ckpt/ModelIdentity.h"

#include "frontends/spec/HFImport.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <functional>

namespace braid::ckpt {
namespace {

constexpr absl::string_view kAllowable[] = {
    "hidden_dropout", "attention_dropout", "embedding_dropout", "init_std",
    "max_seq_len"};

bool isAllowable(absl::string_view field) {
  return std::find(std::begin(kAllowable), std::end(kAllowable), field) !=
         std::end(kAllowable);
}

/// What --allow-model-change takes, for messages.
std::string allowableList() {
  return "hidden_dropout, attention_dropout, embedding_dropout, init_std and "
         "max_seq_len (of a RoPE or ALiBi model)";
}

/// Keeps the first error of the text-format parser, with its position
/// (rather than letting Protobuf print it).
class FirstError : public google::protobuf::io::ErrorCollector {
public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string &message) override {
    if (text.empty())
      text = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber,
                  const std::string &) override {}
  std::string text;
};

/// An enum value's name as messages and job files spell it: "rms_norm".
std::string enumText(const google::protobuf::EnumDescriptor *type, int value) {
  const google::protobuf::EnumValueDescriptor *v = type->FindValueByNumber(value);
  return v ? absl::AsciiStrToLower(v->name()) : absl::StrCat(value);
}

/// A double as Python writes it, without the ".0" of an integral value:
/// 10000, 500000, 1e-05, 0.1.
std::string number(double v) {
  std::string s = pythonFloat(v);
  if (absl::EndsWith(s, ".0"))
    s.resize(s.size() - 2);
  return s;
}

std::string boolText(bool b) { return b ? "true" : "false"; }

/// The rows of the embedding and output layer: vocab_size rounded up to a
/// multiple of make_vocab_size_divisible_by (1 when unset).
int64_t paddedVocab(const spec::ModelSpec &m) {
  int64_t d = m.has_make_vocab_size_divisible_by() &&
                      m.make_vocab_size_divisible_by() > 0
                  ? m.make_vocab_size_divisible_by()
                  : 1;
  return (m.vocab_size() + d - 1) / d * d;
}

int64_t headDim(const spec::ModelSpec &m) {
  return m.num_heads() > 0 ? m.hidden_size() / m.num_heads() : 0;
}

} // namespace

absl::StatusOr<spec::ModelSpec> ParseModelSpec(const std::string &text,
                                               absl::string_view what) {
  spec::ModelSpec m;
  google::protobuf::TextFormat::Parser parser;
  parser.AllowUnknownField(true);
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  google::protobuf::io::ArrayInputStream input(text.data(), int(text.size()));
  if (!parser.Parse(&input, &m) || !errors.text.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is not a braid.spec.ModelSpec in text format",
        errors.text.empty() ? "" : absl::StrCat(" (", errors.text, ")")));
  std::vector<std::string> lacking;
  if (!m.has_family() || m.family() == spec::FAMILY_UNSPECIFIED)
    lacking.push_back("family");
  if (!m.has_num_layers())
    lacking.push_back("num_layers");
  if (!m.has_hidden_size())
    lacking.push_back("hidden_size");
  if (!m.has_num_heads())
    lacking.push_back("num_heads");
  if (!m.has_vocab_size())
    lacking.push_back("vocab_size");
  if (!lacking.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        what, " does not state the model's ", absl::StrJoin(lacking, ", ")));
  return m;
}

std::vector<ModelDifference> CompareModels(const spec::ModelSpec &there,
                                           const spec::ModelSpec &here,
                                           ModelOrigin origin) {
  const bool hf = origin == ModelOrigin::kHFConfig;
  std::vector<ModelDifference> out;
  auto differ = [&](absl::string_view field, std::string a, std::string b,
                    std::string fixed = "") {
    if (a != b)
      out.push_back({std::string(field), std::move(a), std::move(b),
                     std::move(fixed)});
  };
  auto integer = [&](absl::string_view field,
                     const std::function<int64_t(const spec::ModelSpec &)> &get) {
    differ(field, absl::StrCat(get(there)), absl::StrCat(get(here)));
  };
  // Doubles compare exactly; pythonFloat's shortest round-trip digits are
  // one text per value.
  auto real = [&](absl::string_view field, double a, double b,
                  std::string fixed = "") {
    if (a != b)
      out.push_back({std::string(field), number(a), number(b),
                     std::move(fixed)});
  };

  differ("family", enumText(spec::Family_descriptor(), there.family()),
         enumText(spec::Family_descriptor(), here.family()));
  integer("num_layers", [](const spec::ModelSpec &m) { return m.num_layers(); });
  integer("hidden_size",
          [](const spec::ModelSpec &m) { return m.hidden_size(); });
  integer("num_heads", [](const spec::ModelSpec &m) { return m.num_heads(); });
  integer("num_kv_heads",
          [](const spec::ModelSpec &m) { return m.num_kv_heads(); });
  integer("head_dim", headDim);
  integer("ffn_hidden_size",
          [](const spec::ModelSpec &m) { return m.ffn_hidden_size(); });
  if (hf) {
    // Hugging Face's vocab_size counts the embedding's rows (Bloom's 250880
    // does); the plan's are its vocabulary padded.
    std::string why;
    if (paddedVocab(here) != here.vocab_size())
      why = absl::StrCat("the rows of this model's embedding: its ",
                         here.vocab_size(), " padded");
    differ("vocab_size", absl::StrCat(there.vocab_size()),
           absl::StrCat(paddedVocab(here)), why);
  } else {
    integer("vocab_size",
            [](const spec::ModelSpec &m) { return m.vocab_size(); });
    integer("padded_vocab_size", paddedVocab);
  }
  // max_seq_len: the rows of learned positions' table; RoPE and ALiBi have
  // no table, and a run may train at another length. A config.json that
  // states no limit (Bloom's) has nothing to compare.
  if (!hf || there.has_max_seq_len()) {
    bool learned = there.position_embedding() == spec::LEARNED ||
                   here.position_embedding() == spec::LEARNED;
    differ("max_seq_len", absl::StrCat(there.max_seq_len()),
           absl::StrCat(here.max_seq_len()),
           learned ? "learned positions: the position table has max_seq_len "
                     "rows"
                   : "");
  }
  differ("norm", enumText(spec::Norm_descriptor(), there.norm()),
         enumText(spec::Norm_descriptor(), here.norm()));
  real("norm_eps", there.norm_eps(), here.norm_eps());
  differ("activation", enumText(spec::Activation_descriptor(), there.activation()),
         enumText(spec::Activation_descriptor(), here.activation()));
  differ("position_embedding",
         enumText(spec::PositionEmbedding_descriptor(), there.position_embedding()),
         enumText(spec::PositionEmbedding_descriptor(), here.position_embedding()));
  // Only RoPE reads theta.
  if (there.position_embedding() == spec::ROPE ||
      here.position_embedding() == spec::ROPE)
    real("rope_theta", there.rope_theta(), here.rope_theta());
  differ("tie_embeddings", boolText(there.tie_embeddings()),
         boolText(here.tie_embeddings()));
  differ("attention_bias", boolText(there.attention_bias()),
         boolText(here.attention_bias()));
  differ("mlp_bias", boolText(there.mlp_bias()), boolText(here.mlp_bias()));
  differ("embedding_norm", boolText(there.embedding_norm()),
         boolText(here.embedding_norm()));
  real("init_std", there.init_std(), here.init_std());
  real("hidden_dropout", there.hidden_dropout(), here.hidden_dropout());
  real("attention_dropout", there.attention_dropout(),
       here.attention_dropout());
  real("embedding_dropout", there.embedding_dropout(),
       here.embedding_dropout());
  if (!hf)
    differ("fuse_mlp", boolText(there.fuse_mlp()), boolText(here.fuse_mlp()),
           "a Braid checkpoint loads in the layout it was saved with "
           "(mlp.gate_up_proj, or mlp.gate_proj and mlp.up_proj): export it "
           "(braid-ckpt export CKPT --hf DIR) and --init-from DIR, which reads "
           "either");
  for (ModelDifference &d : out)
    if (d.fixed.empty() && !isAllowable(d.field))
      d.fixed = "architectural";
  return out;
}

absl::Status CheckSameModel(absl::string_view what,
                            const spec::ModelSpec &there,
                            const spec::ModelSpec &here, ModelOrigin origin,
                            const std::set<std::string> &allowed,
                            std::vector<std::string> *notes) {
  std::vector<std::string> refused, accepted, couldAllow;
  for (const ModelDifference &d : CompareModels(there, here, origin)) {
    std::string line = absl::StrCat(d.field, " is ", d.there, " there but ",
                                    d.here, " here");
    if (d.fixed.empty() && allowed.count(d.field)) {
      accepted.push_back(absl::StrCat(d.field, " (", d.there, " there, ",
                                      d.here, " here)"));
      continue;
    }
    if (d.fixed.empty())
      couldAllow.push_back(d.field);
    else if (d.fixed != "architectural")
      absl::StrAppend(&line, " (", d.fixed, ")");
    refused.push_back(std::move(line));
  }
  if (!refused.empty()) {
    std::string message = absl::StrCat(what, " is of another model: ",
                                       absl::StrJoin(refused, "; "));
    if (!couldAllow.empty())
      absl::StrAppend(
          &message, " (--allow-model-change ", absl::StrJoin(couldAllow, ","),
          " would accept ",
          couldAllow.size() < refused.size()
              ? absl::StrCat("the difference in ",
                             absl::StrJoin(couldAllow, ", "),
                             ", not the others")
          : couldAllow.size() == 1 ? std::string("that difference")
                                   : std::string("those differences"),
          ")");
    return absl::InvalidArgumentError(message);
  }
  if (notes && !accepted.empty())
    notes->push_back(absl::StrCat("note: ", what,
                                  " differs from this model in ",
                                  absl::StrJoin(accepted, ", "),
                                  ", as --allow-model-change accepts"));
  return absl::OkStatus();
}

absl::Status CheckCheckpointModel(absl::string_view what,
                                  const std::string &checkpointSpec,
                                  const std::string &planSpec,
                                  const std::set<std::string> &allowed,
                                  std::vector<std::string> *notes) {
  if (checkpointSpec.empty() || planSpec.empty()) {
    if (notes)
      notes->push_back(absl::StrCat(
          "warning: the model of ", what, " cannot be checked: ",
          checkpointSpec.empty()
              ? "its manifest does not record it (saved before checkpoints "
                "did)"
              : "the plan does not record its model (compiled before plans "
                "did)",
          "; only its parameters' names and shapes are compared"));
    return absl::OkStatus();
  }
  absl::StatusOr<spec::ModelSpec> there = ParseModelSpec(
      checkpointSpec, absl::StrCat(what, ": the manifest's model_spec"));
  if (!there.ok())
    return there.status();
  absl::StatusOr<spec::ModelSpec> here =
      ParseModelSpec(planSpec, "the plan's model_spec");
  if (!here.ok())
    return here.status();
  return CheckSameModel(what, *there, *here, ModelOrigin::kBraidCheckpoint,
                        allowed, notes);
}

absl::Span<const absl::string_view> AllowableModelChanges() {
  return kAllowable;
}

absl::Status CheckAllowableModelChange(absl::string_view field) {
  if (isAllowable(field))
    return absl::OkStatus();
  std::string why;
  if (field == "fuse_mlp") {
    why = "a Braid checkpoint loads only in the layout it was saved with, "
          "and --init-from of a Hugging Face directory reads fused and "
          "unfused projections alike without it";
  } else if (field == "head_dim" || field == "padded_vocab_size") {
    why = absl::StrCat(field, " follows from ",
                       field == "head_dim"
                           ? "hidden_size and num_heads"
                           : "vocab_size and make_vocab_size_divisible_by",
                       ", which are architectural");
  } else if (field == "preset" || field == "hf_config") {
    why = "it names where a model comes from, which is not compared";
  } else if (spec::ModelSpec::descriptor()->FindFieldByName(
                 std::string(field))) {
    why = absl::StrCat(field,
                       " is architectural: weights trained with another ",
                       field, " are of another model");
  } else {
    why = "no model field has that name";
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--allow-model-change ", field, ": ", why, " (it takes ",
      allowableList(), ")"));
}

} // namespace braid::ckpt
