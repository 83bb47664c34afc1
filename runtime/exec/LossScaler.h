//===- LossScaler.h - fp16's loss scale, static or dynamic ------*- C++ -*-===//
//
// The scale the trainer multiplies the loss by before backward in fp16
// training, so that small gradients do not flush to zero in fp16, and that
// the update divides out again (Backend::SetLossScale). Static, or dynamic
// as Megatron's DynamicGradScaler: a step whose gradients overflowed (a
// non-finite gradient norm: the update skipped it) counts down the
// hysteresis, and once it is used up every such step halves the scale (not
// below the minimum); `window` steps in a row without overflow double it
// and restore the hysteresis.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_LOSSSCALER_H
#define BRAID_RUNTIME_EXEC_LOSSSCALER_H

#include "runtime/plan/plan.pb.h"

#include <cstdint>

namespace braid::exec {

class LossScaler {
public:
  /// From a plan's settings (validated by the plan loader).
  explicit LossScaler(const plan::LossScaling &settings);

  double scale() const { return scale_; }
  /// After a step: whether its gradients were finite (else the update
  /// skipped it). Moves the scale as the file comment says.
  void Update(bool finite);
  /// Steps skipped for overflow so far.
  int64_t skipped() const { return skipped_; }

private:
  plan::LossScaling settings_;
  double scale_;
  int64_t growthTracker_ = 0, hysteresisTracker_;
  int64_t skipped_ = 0;
};

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_LOSSSCALER_H
