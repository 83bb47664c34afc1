//===- Init.h - Seeded initial weights --------------------------*- C++ -*-===//
//
// Each family's initialisation, from a counter-based generator keyed by the
// seed, the parameter's name and the element's global index: the value of
// every element is the same whether the parameter is whole or sharded, and
// whatever order ranks initialise in.
//
// Rules (by parameter name and rank, as the family's checkpoints name them):
//   - biases (".bias"): 0;
//   - norm weights (rank 1, name containing "norm", "ln_" or "layernorm"): 1;
//   - every other weight: normal(0, std);
//   - GPT-2's residual output projections ("attn.c_proj.weight",
//     "mlp.c_proj.weight"): normal(0, std / sqrt(2 · num_layers)), the scaled
//     initialisation of the GPT-2 paper (and of Megatron's
//     scaled_init_method_normal);
//   - LoRA adapters (initParameterOfShape): A ("….lora_A.weight", [r, in])
//     uniform in ±1/sqrt(in), PEFT's kaiming_uniform_(a = sqrt(5)); B
//     ("….lora_B.weight") 0, so that the adapted model starts as the base.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_INIT_H
#define BRAID_RUNTIME_EXEC_INIT_H

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>

namespace braid::exec {

struct InitConfig {
  uint64_t seed = 0;
  double std = 0.02;
  int64_t numLayers = 1;
  /// GPT-2's scaled residual projections.
  bool scaledResidual = false;
};

/// Whether `name` is a LoRA adapter's matrix ("….lora_A.weight",
/// "….lora_B.weight"; passes/model/ModelLora.cpp names them).
bool IsLoraAdapter(absl::string_view name);
/// The standard deviation the rules above give `name` (0 for constants).
double initStd(absl::string_view name, int64_t rank, const InitConfig &config);

/// Fills `out` with elements [begin, begin + count) of parameter `name`
/// (rank `rank`, in row-major global order) by the rules above.
absl::Status initParameter(absl::string_view name, int64_t rank,
                           const InitConfig &config, uint64_t begin,
                           uint64_t count, float *out);

/// As initParameter, for a parameter of global shape `shape`. A SwiGLU
/// projection stored fused, "P.mlp.gate_up_proj.S" ([gate; up] rows), takes
/// its first half of rows from "P.mlp.gate_proj.S" and its second from
/// "P.mlp.up_proj.S": a model with the MLP fused starts from the weights of
/// the same model without.
absl::Status initParameterOfShape(absl::string_view name,
                                  absl::Span<const int64_t> shape,
                                  const InitConfig &config, uint64_t begin,
                                  uint64_t count, float *out);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_INIT_H
