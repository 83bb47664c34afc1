// RUN: braid-opt %s -allow-unregistered-dialect -plan-lower -verify-diagnostics

// Tests an op of a dialect braid-opt does not know: refused by name, as an
// op of another registered dialect is (plan-lower.mlir).
func.func @train_step(%t: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
  %e = model.embedding %wte[%t] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'mystery.op' op cannot be lowered to a plan kernel}}
  %g = "mystery.op"(%e) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %g : tensor<1x2x4xf32>
}
