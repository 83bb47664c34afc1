//===- LoraAdapters.h - LoRA adapters read from PEFT or Braid ----*- C++ -*-===//
//
// The adapters of a LoRA run, as braid-ckpt merge folds them into a base and
// braid-run --lora-load starts a run from them: a PEFT adapter directory
// (adapter_config.json and adapter_model.safetensors, tensors named
// base_model.model.<name>) or a Braid LoRA run's checkpoint (or root).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CKPT_LORAADAPTERS_H
#define BRAID_RUNTIME_CKPT_LORAADAPTERS_H

#include "absl/status/statusor.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace braid::ckpt {

struct LoraAdapters {
  int64_t rank = 0;
  double alpha = 0;
  /// PEFT's fan_in_fan_out (the base stores its weights [in, out]); unset
  /// for a Braid checkpoint, whose model (modelSpec) says it.
  std::optional<bool> fanInFanOut;
  /// A Braid checkpoint's model (its manifest's model_spec); empty for PEFT.
  std::string modelSpec;
  /// By the model's parameter names (PEFT's base_model.model. prefix
  /// removed): <module>.lora_A.weight, <module>.lora_B.weight and the
  /// modules to save's weights; global shape and values.
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>>
      tensors;
};

/// Reads the adapters of `source`: a directory with adapter_config.json (a
/// LORA config with r >= 1 and lora_alpha; rsLoRA and DoRA adapters are
/// refused) and adapter_model.safetensors, or a Braid checkpoint whose run
/// had a lora section. Errors name the file and what is wrong; NotFound
/// when `source` is neither.
absl::StatusOr<LoraAdapters> ReadLoraAdapters(const std::string &source);

} // namespace braid::ckpt

#endif // BRAID_RUNTIME_CKPT_LORAADAPTERS_H
