//===- TrainConfig.h - The resolved `train` section of a job ----*- C++ -*-===//

#ifndef BRAID_FRONTENDS_TRAINCONFIG_H
#define BRAID_FRONTENDS_TRAINCONFIG_H

#include "frontends/spec/braid_spec.pb.h"

#include "llvm/Support/Error.h"

#include <string>

namespace braid {

/// The optimizer settings of a job, every field decided (defaults in
/// docs/spec.md) and validated.
struct TrainConfig {
  double adamBeta1 = 0.9, adamBeta2 = 0.95, adamEps = 1e-8;
  double weightDecay = 0.1;
  double clipGrad = 1.0; ///< 0 disables clipping
  int64_t steps = 100;
  int64_t seed = 1234;
  double lr = 3e-4, minLr = 3e-5;
  int64_t warmupSteps = 0;
  std::string lrDecay = "cosine";
  /// fp16's loss scaling (used with precision FP16): static when
  /// lossScale > 0, else dynamic (Megatron's defaults but the initial
  /// scale, 2^16 as PyTorch's GradScaler rather than 2^32, which costs a
  /// run its first 17 steps).
  double lossScale = 0, initialLossScale = 65536, minLossScale = 1;
  int64_t lossScaleWindow = 1000, hysteresis = 2;
  /// Validation every evalInterval steps (0: never) over evalIters global
  /// batches (Megatron's default 100 when an interval is given).
  int64_t evalInterval = 0, evalIters = 0;
};

/// Resolves `job.train`; errors name the field, its value and the rule.
llvm::Expected<TrainConfig> resolveTrain(const spec::JobSpec &job);

} // namespace braid

#endif // BRAID_FRONTENDS_TRAINCONFIG_H
