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
// A skipped step is not an update: the trainer counts the updates done
// (step - skipped) for AdamW's bias correction and the learning-rate
// schedule, as Megatron advances its optimizer and scheduler only on a
// successful update. The scaler's state is saved in checkpoints, so that a
// resumed run continues with the same scale and count.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_LOSSSCALER_H
#define BRAID_RUNTIME_EXEC_LOSSSCALER_H

#include "runtime/plan/plan.pb.h"

#include <cstdint>

namespace braid::exec {

class LossScaler {
public:
  /// What moves: the scale, the steps since the last overflow or growth,
  /// the hysteresis left, and the steps skipped so far.
  struct State {
    double scale = 0;
    int64_t growthTracker = 0;
    int64_t hysteresisTracker = 0;
    int64_t skipped = 0;
  };

  /// From a plan's settings (validated by the plan loader).
  explicit LossScaler(const plan::LossScaling &settings);

  State state() const {
    return {scale_, growthTracker_, hysteresisTracker_, skipped_};
  }
  /// Continues from `state` (a checkpoint's).
  void Restore(const State &state) {
    scale_ = state.scale;
    growthTracker_ = state.growthTracker;
    hysteresisTracker_ = state.hysteresisTracker;
    skipped_ = state.skipped;
  }

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
