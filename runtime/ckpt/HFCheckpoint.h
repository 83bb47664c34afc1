//===- HFCheckpoint.h - Hugging Face checkpoint directories ------*- C++ -*-===//
//
// Reading the initial weights of a model (`--init-from DIR`) from a Hugging
// Face checkpoint directory: config.json plus the weights as safetensors,
// either
//   - model.safetensors.index.json ({"weight_map": {tensor: file, ...}}) and
//     the shard files it names (used whenever the index exists; other
//     *.safetensors files next to it, such as Mistral's
//     consolidated.safetensors, are not read), or
//   - model.safetensors alone, or
//   - without either, every *.safetensors file in the directory.
// A tensor may be in one file only.
//
// Braid's parameters have the names and the layouts of the checkpoint's own
// model (Hugging Face's): a linear weight is [out, in] as nn.Linear stores it,
// and GPT-2's Conv1D weights stay [in, out] as the checkpoint stores them
// (the model's `linear` ops carry the transposition), so loading copies each
// tensor as it is, converted to float32, and never transposes.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CKPT_HFCHECKPOINT_H
#define BRAID_RUNTIME_CKPT_HFCHECKPOINT_H

#include "runtime/ckpt/Safetensors.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace braid::ckpt {

/// An opened checkpoint directory: its safetensors files, mapped and
/// validated, and where each tensor is. Movable, not copyable.
class HFCheckpoint {
public:
  HFCheckpoint(HFCheckpoint &&) = default;
  HFCheckpoint &operator=(HFCheckpoint &&) = default;

  const std::string &dir() const { return dir_; }
  /// The text of DIR/config.json (checked to be a JSON object); the
  /// importer braidc uses reads it (CheckHFModel).
  const std::string &configJson() const { return configJson_; }
  /// The files read, sorted by path.
  const std::vector<SafetensorsFile> &files() const { return files_; }
  /// Every tensor name of every file, sorted.
  std::vector<std::string> names() const;
  bool contains(absl::string_view name) const;
  /// The file that holds `name`, or NotFound naming the directory.
  absl::StatusOr<const SafetensorsFile *> fileOf(absl::string_view name) const;

private:
  friend absl::StatusOr<HFCheckpoint> OpenHFCheckpoint(const std::string &dir);
  HFCheckpoint() = default;

  std::string dir_;
  std::string configJson_;
  std::vector<SafetensorsFile> files_;
  /// Tensor name -> index in files_.
  std::map<std::string, size_t, std::less<>> fileIndex_;
};

/// Opens the checkpoint in `dir` (see the file comment for the layouts).
/// Errors, each naming the directory or the file: NotFound for a missing
/// directory, config.json or weights file; InvalidArgument for a malformed
/// config.json or index, an index naming a file outside the directory, a
/// tensor in two files, or an index that disagrees with its shards; and
/// every error of SafetensorsFile::Open.
absl::StatusOr<HFCheckpoint> OpenHFCheckpoint(const std::string &dir);

/// Checks that `checkpoint`'s config.json describes the plan's model, whose
/// braid.spec.ModelSpec (text format, plan.proto Training.model_spec) is
/// `planModelSpec`: the file is imported as braidc imports it
/// (frontends/spec/HFImport.h: its errors, such as a config.json without
/// "architectures", are returned as they are), the fields it does not state
/// take its class's defaults (withHFClassDefaults), and the model is
/// compared with the plan's field by field (ModelIdentity.h, ModelOrigin::
/// kHFConfig): InvalidArgument "checkpoint DIR (config.json) is of another
/// model: ..." naming every field that differs and is not in `allowed`
/// (--allow-model-change), notes for those that are. A plan that does not
/// record its model (empty `planModelSpec`) cannot be compared: OK, with a
/// warning in `notes`.
absl::Status CheckHFModel(const HFCheckpoint &checkpoint,
                          const std::string &planModelSpec,
                          const std::set<std::string> &allowed,
                          std::vector<std::string> *notes);

/// A parameter the model expects: its Hugging Face name and its shape.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
};

/// Loads every expected parameter into the float32 buffer
/// `destination(index)` (of product(shape) floats), where index is its
/// position in `expected`, converting from F32, F16, BF16 or F64.
///
/// Everything is checked before anything is written, so on error no
/// destination has been touched (and `destination` not called):
///   - a parameter is looked up by its name; for GPT-2, whose older
///     checkpoints lack the "transformer." prefix ("h.0.attn.c_attn.weight",
///     "wte.weight"), a name with the prefix is also looked up without it and
///     a name without it also with it;
///   - a SwiGLU MLP's projections may be stored fused or apart, whichever
///     way the model has them: an expected "P.mlp.gate_up_proj.S" that the
///     checkpoint lacks is the rows of "P.mlp.gate_proj.S" then those of
///     "P.mlp.up_proj.S", and an expected "P.mlp.gate_proj.S" (or up_proj)
///     the first (second) half of the rows of "P.mlp.gate_up_proj.S";
///   - missing parameters (all of them, the first 10 named) and checkpoint
///     tensors that are not parameters (likewise) are one InvalidArgument;
///   - a shape that differs is InvalidArgument "tensor NAME: checkpoint has
///     shape [a, b] but the model expects [c, d]" (all of them, the first 10);
///   - a tensor of a non-float dtype is InvalidArgument.
/// Checkpoint tensors that are not parameters but buffers Hugging Face models
/// save are ignored when the model does not expect them:
///   - names ending in "rotary_emb.inv_freq" (LLaMA and its kin: the RoPE
///     frequencies, recomputed from the config),
///   - names ending in ".attn.bias" and ".attn.masked_bias" (GPT-2's causal
///     mask and its fill value),
///   - "lm_head.weight" when the model ties its output layer to the embedding
///     (expects no "lm_head.weight") and the checkpoint's lm_head.weight is
///     byte-identical to a parameter of the same shape and dtype (the
///     embedding); one that differs is InvalidArgument, since ignoring it
///     would drop a trained output layer.
/// A null destination is InvalidArgument; conversion errors (an F64 value
/// beyond float32) are those of ReadAsFloat32 and may leave earlier
/// parameters written.
absl::Status LoadParameters(const HFCheckpoint &checkpoint,
                            const std::vector<ParamSpec> &expected,
                            const std::function<float *(size_t index)> &destination);

} // namespace braid::ckpt

#endif // BRAID_RUNTIME_CKPT_HFCHECKPOINT_H
