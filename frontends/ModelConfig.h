//===- ModelConfig.h - A fully resolved model and batch shape ---*- C++ -*-===//

#ifndef BRAID_FRONTENDS_MODELCONFIG_H
#define BRAID_FRONTENDS_MODELCONFIG_H

#include "frontends/spec/HFImport.h"
#include "frontends/spec/braid_spec.pb.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace braid {

/// A model field the resolver computed from other fields instead of taking
/// it from the preset, the config.json or the job: unset, or stale because
/// the job replaced the field it derives from (docs/spec.md, "Derived
/// fields").
struct DerivedField {
  std::string field; ///< the ModelSpec field, e.g. "ffn_hidden_size"
  int64_t value = 0;
  std::string rule;   ///< how, e.g. "4 * hidden_size"
  std::string reason; ///< "not set", or which job field replaced which value
};

/// The architecture and the batch shape of one compile, every field decided:
/// the source (preset or config.json), then the job's inline fields, then the
/// family defaults (docs/spec.md), validated.
/// LoRA (the job's `lora` section): adapters beside the target modules'
/// linears, the other parameters frozen but modules_to_save's. Applied by
/// the model-lora pass, which reads it from the module's `model.lora`.
struct LoraConfig {
  bool enabled = false; ///< the job has a lora section
  int64_t rank = 8;
  double alpha = 8, dropout = 0;
  std::vector<std::string> targetModules, modulesToSave;
};

struct ModelConfig {
  std::string source; ///< preset name, config.json path, or "inline"
  spec::Family family = spec::FAMILY_UNSPECIFIED;
  int64_t numLayers = 0, hiddenSize = 0, numHeads = 0, numKvHeads = 0;
  int64_t headDim = 0, ffnHiddenSize = 0;
  int64_t vocabSize = 0;       ///< the tokenizer's vocabulary
  int64_t paddedVocabSize = 0; ///< rows of the embedding and output layer
  int64_t maxSeqLen = 0;
  spec::Norm norm = spec::NORM_UNSPECIFIED;
  double normEps = 0;
  spec::Activation activation = spec::ACTIVATION_UNSPECIFIED;
  spec::PositionEmbedding positionEmbedding = spec::POSITION_UNSPECIFIED;
  double ropeTheta = 0;
  bool tieEmbeddings = false, attentionBias = false, mlpBias = false;
  bool embeddingNorm = false;
  bool fuseMlp = false; ///< one gate/up projection (SwiGLU only)
  double initStd = 0, hiddenDropout = 0, attentionDropout = 0;
  double embeddingDropout = 0;

  // The batch of one forward pass.
  int64_t microBatchSize = 1;
  int64_t seqLength = 0;
  spec::DType dtype = spec::FP32;
  /// Packed documents (the job's data.pack): the graph takes a "positions"
  /// input, each token's position in its document, which the position
  /// encodings and attention read (documents attend only to themselves).
  bool packedDocuments = false;

  /// The fields derived from others (ffn_hidden_size, num_kv_heads), in
  /// that order; the compile report lists them.
  std::vector<DerivedField> derivedFields;

  LoraConfig lora;

  /// True when Q, K and V come from one fused projection in this family.
  bool fusedQkv() const;
};

// familyFfnHiddenSize (frontends/spec/HFImport.h): the MLP width a family
// gives a hidden size.

/// Size limits (docs/spec.md, "Size limits"), checked before any IR is built.
///
/// The most bytes any tensor, the parameters with their gradients and
/// optimizer state, or the activations a step keeps may take, and the most
/// FLOPs of one micro-batch's forward: 2^62, a quarter of int64's range, so
/// that the compile's sums of such sizes (each buffer's offset in the arena,
/// rounded up to 64 bytes; a rank's totals) and small multiples of them (the
/// cost model's ring factors, backward FLOPs twice the forward's) stay exact.
constexpr int64_t kMaxSizeBytes = int64_t(1) << 62;
/// The IR ops a compile builds per layer, at most: 264 were measured on the
/// `plan` phase of tiny-gpt2 with dropout under tp 2, sp, dp 2, ZeRO-1 and
/// full recompute (131 for one rank without recompute).
constexpr int64_t kIrOpsPerLayer = 264;
/// The most IR ops (kIrOpsPerLayer per layer) a compile may build: 2^18, up
/// to 992 layers. braidc's peak memory at 992 layers of that layout was
/// 7.0 GB (--emit=plan), well inside a 24 GiB machine; it grows faster than
/// the ops (1000000 layers passed 9 GB within a minute of building).
constexpr int64_t kIrOpBudget = int64_t(1) << 18;

/// The parameters of `config`'s model (the tensors ModelBuilder declares),
/// computed before any IR is built; empty when the count overflows int64.
std::optional<int64_t> parameterCount(const ModelConfig &config);

/// Checks `config` against the size limits above, with the activations of
/// `microBatches` micro-batches kept at once (1 in resolveModel; in
/// resolveParallel, as many as the schedule may keep, which `keptWhy` says).
/// Every size is computed with overflow-checked int64 arithmetic; an error
/// names the fields that make the size, their values and the limit.
llvm::Error checkSizeLimits(const ModelConfig &config, int64_t microBatches = 1,
                            llvm::StringRef keptWhy = "");

/// Resolves and validates the model of `job`. Errors name the field (as
/// `model.num_heads`), its value and what is allowed.
llvm::Expected<ModelConfig> resolveModel(const spec::JobSpec &job);

/// `config`'s architecture as a job's inline model fields, every one set
/// (no preset, no config.json): resolveModel() of a job with it gives back
/// `config`'s architecture.
spec::ModelSpec inlineModelSpec(const ModelConfig &config);

/// Lower-case names used in reports and messages.
std::string familyName(spec::Family family);
std::string normName(spec::Norm norm);
std::string activationName(spec::Activation activation);
std::string positionName(spec::PositionEmbedding position);
std::string dtypeName(spec::DType dtype);

} // namespace braid

#endif // BRAID_FRONTENDS_MODELCONFIG_H
