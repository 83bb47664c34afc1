//===- ModelConfig.h - A fully resolved model and batch shape ---*- C++ -*-===//

#ifndef BRAID_FRONTENDS_MODELCONFIG_H
#define BRAID_FRONTENDS_MODELCONFIG_H

#include "frontends/spec/braid_spec.pb.h"

#include "llvm/Support/Error.h"

#include <string>

namespace braid {

/// The architecture and the batch shape of one compile, every field decided:
/// the source (preset or config.json), then the job's inline fields, then the
/// family defaults (docs/spec.md), validated.
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

  /// True when Q, K and V come from one fused projection in this family.
  bool fusedQkv() const;
};

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
