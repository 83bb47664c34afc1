//===- Report.h - The compile report ----------------------------*- C++ -*-===//
//
// Everything the report states is read off the compiled IR (parameters are
// the @forward arguments marked model.param, FLOPs are the ops' costs), so the
// report describes what will run, not what the spec meant.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_REPORT_H
#define BRAID_COMPILER_REPORT_H

#include "frontends/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

#include <vector>

namespace braid {

struct ParameterCount {
  int64_t total = 0;
  /// Parameters used by each model.layer, in layer order.
  std::vector<int64_t> perLayer;
  /// Parameters outside the layers (embeddings, final norm, output layer).
  int64_t outsideLayers = 0;
  /// Parameters of the embedding tables (tokens and positions).
  int64_t embedding = 0;
};

/// Counts the parameters of the module's @forward.
ParameterCount countParameters(mlir::ModuleOp module);

struct FlopCount {
  int64_t forwardMatmul = 0; ///< FLOPs of matrix products, one forward pass
  int64_t forwardVector = 0; ///< elementwise and reduction FLOPs
  int64_t tokens = 0;        ///< tokens in one forward pass (batch x seq)
  int64_t attentionMatmul = 0; ///< the part of forwardMatmul in attention
  /// Model FLOPs per token of one training step (forward + backward): three
  /// times the forward matrix-product FLOPs, i.e. 6 N_mm + 12 L s h_attn.
  double trainingPerToken() const {
    return tokens ? 3.0 * static_cast<double>(forwardMatmul) / tokens : 0.0;
  }
};

/// Sums the forward cost of every op of the module's @forward.
FlopCount countFlops(mlir::ModuleOp module);

/// The compile report as JSON (its fields are described in docs/report.md),
/// from the `model` IR of a compile.
llvm::json::Value buildReport(mlir::ModuleOp module, const ModelConfig &config);

/// model-recompute's choices (module attribute model.recompute): per layer
/// the choice, the bytes of activations it keeps per micro-batch (its
/// inputs and kept saved values) against keeping everything, the FLOPs it
/// recomputes and which values; with `--recompute auto`, the budget search.
/// Empty before the recompute phase.
llvm::json::Object recomputeReport(mlir::ModuleOp module, int64_t microBatches);

/// The memory plan of a module after plan-memory: the arena size and the
/// bytes of its buffers by role.
llvm::json::Object planMemoryReport(mlir::ModuleOp module);

/// The communication of one step of a module of the `plan` dialect, per
/// rank: bytes each rank contributes, by collective kind (`all_reduce`, ...)
/// and group (its mesh axes, comma-joined). Collectives of `micro_step` count
/// once per micro-batch (but the last, where `last_micro_step` runs).
/// With pipeline stages: each stage's layers, FLOPs, parameters and slots
/// (with model chunks, the chunk's own),
/// and the predicted timeline of the step's schedule (bubble fraction and
/// peak micro-batches in flight per stage). Empty without stages.
llvm::json::Object planPipelineReport(mlir::ModuleOp module,
                                      int64_t microBatches);

llvm::json::Object planCommunicationReport(mlir::ModuleOp module,
                                           int64_t microBatches);

} // namespace braid

#endif // BRAID_COMPILER_REPORT_H
