//===- LossScaler.cpp - fp16's loss scale, static or dynamic --------------===//

#include "runtime/exec/LossScaler.h"

#include <algorithm>

namespace braid::exec {

LossScaler::LossScaler(const plan::LossScaling &settings)
    : settings_(settings),
      scale_(settings.static_scale() > 0 ? settings.static_scale()
                                         : settings.initial()),
      hysteresisTracker_(settings.hysteresis()) {}

void LossScaler::Update(bool finite) {
  if (!finite)
    ++skipped_;
  if (settings_.static_scale() > 0)
    return;
  if (!finite) {
    growthTracker_ = 0;
    if (--hysteresisTracker_ <= 0)
      scale_ = std::max(scale_ / 2, settings_.min());
    return;
  }
  if (++growthTracker_ == settings_.window()) {
    growthTracker_ = 0;
    hysteresisTracker_ = settings_.hysteresis();
    scale_ *= 2;
  }
}

} // namespace braid::exec
