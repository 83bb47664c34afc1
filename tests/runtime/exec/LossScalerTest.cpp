//===- LossScalerTest.cpp - fp16's loss scale over a run's steps ----------===//
//
// The dynamic scale against Megatron's DynamicGradScaler rules, step by step
// (expected values written out from the rules: halving once the hysteresis
// is used up, never below the minimum, doubling after a window of finite
// steps, which restores the hysteresis), and the static scale.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/LossScaler.h"

#include "gtest/gtest.h"

#include <vector>

using namespace braid;

namespace {

plan::LossScaling dynamic(double initial, double min, int64_t window,
                          int64_t hysteresis) {
  plan::LossScaling s;
  s.set_initial(initial);
  s.set_min(min);
  s.set_window(window);
  s.set_hysteresis(hysteresis);
  return s;
}

TEST(LossScaler, DynamicFollowsMegatronsRules) {
  exec::LossScaler scaler(dynamic(1024, 256, 3, 2));
  EXPECT_EQ(scaler.scale(), 1024);
  // Overflow 1 uses the hysteresis (2 -> 1): no change; overflow 2 halves.
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 512);
  // With the hysteresis used up, each overflow halves, down to the minimum.
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 256);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 256);
  EXPECT_EQ(scaler.skipped(), 4);
  // Three finite steps in a row double it and restore the hysteresis.
  for (int i = 0; i < 2; ++i) {
    scaler.Update(true);
    EXPECT_EQ(scaler.scale(), 256);
  }
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.Update(false); // hysteresis 2 -> 1: kept
  EXPECT_EQ(scaler.scale(), 512);
  // An overflow restarts the window: two finite steps do not double.
  scaler.Update(true);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_EQ(scaler.skipped(), 5);
}

TEST(LossScaler, StaticNeverMoves) {
  plan::LossScaling s = dynamic(1024, 1, 1, 1);
  s.set_static_scale(128);
  exec::LossScaler scaler(s);
  for (bool finite : {false, false, true, true, false}) {
    scaler.Update(finite);
    EXPECT_EQ(scaler.scale(), 128);
  }
  EXPECT_EQ(scaler.skipped(), 3);
}

} // namespace
