//===- ModelBuilder.h - Model spec to `model` IR ----------------*- C++ -*-===//

#ifndef BRAID_FRONTENDS_MODELBUILDER_H
#define BRAID_FRONTENDS_MODELBUILDER_H

#include "frontends/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

namespace braid {

/// Builds the forward graph of one training step for `config`: a module with
/// `func.func @forward(params..., tokens, targets) -> loss`. Parameters are
/// named (model.param) and shaped as in the family's Hugging Face checkpoint;
/// each transformer layer is one `model.layer`. The module carries the
/// architecture as the `model.config` dictionary.
mlir::OwningOpRef<mlir::ModuleOp> buildForwardModule(mlir::MLIRContext &context,
                                                     const ModelConfig &config);

/// The static shapes of an inference plan (braidc --mode generate).
struct GenerateConfig {
  int64_t maxBatch = 1;     ///< sequences per call
  int64_t maxSeqLen = 0;    ///< positions each sequence's KV cache holds
  int64_t prefillChunk = 0; ///< prompt tokens per sequence per prefill call
  /// The ids a new token may take, [0, vocabLimit): a tokenizer's
  /// vocabulary when it is smaller than the model's (0: the model's).
  int64_t vocabLimit = 0;
  /// Under tensor parallelism, the best tokens each rank gives the draw
  /// (model-shard's draw from candidates): greedy decoding and top_k up to
  /// it never gather the whole logits.
  int64_t drawCandidates = 64;
  /// Whether the graph also scores (phase "score": the log-probability of
  /// given tokens at every position of a chunk, braid eval's).
  bool score = false;
};

/// Checks `g` against the model: sizes in range, and no position beyond a
/// learned position table.
llvm::Error checkGenerateConfig(const ModelConfig &config,
                                const GenerateConfig &g);

/// Builds the inference graph of `config`: `func.func @generate` whose ops
/// carry the plan function they run in (model.phase "prefill" or
/// "decode"). Its arguments are the parameters (named as for training), the
/// inputs of both functions (model.input: prefill_tokens, prefill_positions,
/// prefill_last, decode_tokens, decode_positions, sampling, seed,
/// draw_positions; their shapes are plan.proto's Generation) and each
/// layer's caches (model.cache "cache.k.N", "cache.v.N": [max_batch,
/// max_seq_len, kv_heads x head_dim]); its results are each function's next
/// tokens and logits (model.result). Both functions read the same cache
/// arguments: they are two programs over one state, which plan-lower makes
/// one set of buffers. The module carries `model.config` and
/// `model.generate` (the shapes, and the vocabulary size).
mlir::OwningOpRef<mlir::ModuleOp>
buildGenerateModule(mlir::MLIRContext &context, const ModelConfig &config,
                    const GenerateConfig &g);

} // namespace braid

#endif // BRAID_FRONTENDS_MODELBUILDER_H
