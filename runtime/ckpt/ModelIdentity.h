//===- ModelIdentity.h - Is a checkpoint of the plan's model? ---*- C++ -*-===//
//
// A checkpoint whose tensors have the plan's names and shapes may still be
// of another model: tiny-llama with 8 heads of 8 and 4 kv heads has the
// tensors of tiny-llama with 4 heads of 16 and 2 kv heads, and RoPE's theta,
// the norms' eps or the activation leave no trace in the shapes at all. So
// every load compares the models themselves, field by field: the plan's
// (plan.proto Training.model_spec) with the checkpoint's (a Braid
// manifest's model_spec, or a Hugging Face config.json read by the same
// importer braidc uses, frontends/spec/HFImport.h). Both are
// braid.spec.ModelSpec (frontends/spec/braid_spec.proto) with every field
// set.
//
// A difference is refused, naming each field with both values, unless the
// run accepts it (--allow-model-change FIELD), which it may only for a
// field that changes how the model trains but not what its weights mean:
// the dropouts, init_std, and max_seq_len of a RoPE or ALiBi model (learned
// positions have a table of max_seq_len rows).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CKPT_MODELIDENTITY_H
#define BRAID_RUNTIME_CKPT_MODELIDENTITY_H

#include "frontends/spec/braid_spec.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <set>
#include <string>
#include <vector>

namespace braid::ckpt {

/// What the other model is, which decides what is compared.
enum class ModelOrigin {
  /// A Braid checkpoint's manifest: every field.
  kBraidCheckpoint,
  /// A Hugging Face config.json (imported, its class's defaults for what it
  /// does not state): every field but fuse_mlp (the loader reads fused and
  /// unfused SwiGLU projections either way), vocab_size as the rows of the
  /// embedding (the plan's padded vocabulary: Hugging Face counts rows), and
  /// max_seq_len only when the file states it (BloomForCausalLM has no
  /// position limit).
  kHFConfig,
};

/// Parses a model spec in text format (a plan's or a manifest's
/// model_spec); fields this build does not know (a newer writer's) are
/// skipped. InvalidArgument, naming `what` and the line, for text that does
/// not parse or lacks family, num_layers, hidden_size, num_heads or
/// vocab_size.
absl::StatusOr<spec::ModelSpec> ParseModelSpec(const std::string &text,
                                               absl::string_view what);

/// One field in which two models differ, with both values as text.
struct ModelDifference {
  /// A ModelSpec field, or head_dim (hidden_size / num_heads) or
  /// padded_vocab_size (the embedding's rows).
  std::string field;
  std::string there, here;
  /// Why --allow-model-change cannot accept this difference ("" when it
  /// can, i.e. for an allowable field whose change is meaningful here).
  std::string fixed;
};

/// The fields in which `there` (the checkpoint's model) and `here` (the
/// plan's) differ, in ModelSpec's order.
std::vector<ModelDifference> CompareModels(const spec::ModelSpec &there,
                                           const spec::ModelSpec &here,
                                           ModelOrigin origin);

/// OK when `there` is `here`'s model, or differs from it only in fields
/// named in `allowed` whose change is meaningful (a note for each, "note:
/// ...", is appended to `notes`). Else InvalidArgument "WHAT is of another
/// model: num_heads is 4 there but 8 here; rope_theta is 10000 there but
/// 500000 here", every refused field named, and which of them
/// --allow-model-change would accept.
absl::Status CheckSameModel(absl::string_view what,
                            const spec::ModelSpec &there,
                            const spec::ModelSpec &here, ModelOrigin origin,
                            const std::set<std::string> &allowed,
                            std::vector<std::string> *notes);

/// The check of a Braid checkpoint `what` whose manifest's model_spec is
/// `checkpointSpec`, loaded by a plan whose Training.model_spec is
/// `planSpec` (both text format): CheckSameModel of the two. When either is
/// empty (a checkpoint or a plan from before they recorded the model) the
/// model cannot be compared: OK, with a "warning: ..." in `notes` saying so
/// (the caller still compares the parameters' names and shapes). A
/// model_spec that does not parse is InvalidArgument naming it.
absl::Status CheckCheckpointModel(absl::string_view what,
                                  const std::string &checkpointSpec,
                                  const std::string &planSpec,
                                  const std::set<std::string> &allowed,
                                  std::vector<std::string> *notes);

/// The fields --allow-model-change may name: hidden_dropout,
/// attention_dropout, embedding_dropout, init_std, max_seq_len.
absl::Span<const absl::string_view> AllowableModelChanges();

/// OK when --allow-model-change may name `field`; else InvalidArgument
/// saying why not (an architectural field, a derived one, fuse_mlp, or no
/// model field of that name) and which fields it takes.
absl::Status CheckAllowableModelChange(absl::string_view field);

} // namespace braid::ckpt

#endif // BRAID_RUNTIME_CKPT_MODELIDENTITY_H
