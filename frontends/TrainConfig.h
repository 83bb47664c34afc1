//===- TrainConfig.h - The resolved `train` section of a job ----*- C++ -*-===//

#ifndef BRAID_FRONTENDS_TRAINCONFIG_H
#define BRAID_FRONTENDS_TRAINCONFIG_H

#include "frontends/spec/braid_spec.pb.h"

#include "llvm/Support/Error.h"

namespace braid {

/// The optimizer settings of a job, every field decided (defaults in
/// docs/spec.md) and validated.
struct TrainConfig {
  double adamBeta1 = 0.9, adamBeta2 = 0.95, adamEps = 1e-8;
  double weightDecay = 0.1;
  double clipGrad = 1.0; ///< 0 disables clipping
};

/// Resolves `job.train`; errors name the field, its value and the rule.
llvm::Expected<TrainConfig> resolveTrain(const spec::JobSpec &job);

} // namespace braid

#endif // BRAID_FRONTENDS_TRAINCONFIG_H
