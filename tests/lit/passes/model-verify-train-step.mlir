// RUN: braid-opt %s -split-input-file -model-verify-train-step -verify-diagnostics --allow-unregistered-dialect | FileCheck %s
// RUN: braidc --preset tiny-llama --seq-len 8 --compile-to=autodiff | braid-opt -model-verify-train-step | FileCheck %s --check-prefix=AUTODIFF

// Tests that model-autodiff's output meets the contract.
// AUTODIFF-LABEL: func.func @train_step(
// AUTODIFF: model.layer 1 backward
// AUTODIFF: model.layer 0 backward

// Tests that a minimal train step (a tied embedding and output layer) passes.
// CHECK-LABEL: func.func @train_step(
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<1x3xi32> {model.input = "tokens"}, %y: tensor<1x3xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %e = model.embedding %w[%t] : (tensor<4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
  %z = model.linear %e, %w transpose_w : (tensor<1x3x2xf32>, tensor<4x2xf32>) -> tensor<1x3x4xf32>
  %l = model.cross_entropy %z, %y ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>) -> tensor<f32>
  %dz = model.cross_entropy_grad %z, %y, %dl ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>, tensor<f32>) -> tensor<1x3x4xf32>
  %gw = model.linear_grad_weight %e, %dz transpose_w : (tensor<1x3x2xf32>, tensor<1x3x4xf32>) -> tensor<4x2xf32>
  // CHECK: return
  return %l, %gw : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests T1: a second function is refused.
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<4x2xf32>
}
// expected-error @+1 {{may hold only model.mesh and one func.func @train_step}}
func.func @t1_helper() {
  return
}

// -----

// Tests T2: a train step without a loss_grad input is refused.
// expected-error @+1 {{@train_step has no "loss_grad" input}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests T3: a gradient marked for another parameter is refused.
// expected-error @+1 {{result 1 must be the gradient of "w"}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "v"}) {
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests T4: a backward layer without its forward layer is refused.
// expected-error @+1 {{@train_step has 0 forward and 1 backward layers}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %b = model.layer 0 backward(%w) : (tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%a: tensor<4x2xf32>):
    model.yield %a : tensor<4x2xf32>
  }
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %b : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests T5: an op of another dialect is refused.
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  // expected-error @+1 {{the train step may hold only model ops, found test.op}}
  %g = "test.op"(%w) : (tensor<4x2xf32>) -> tensor<4x2xf32>
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %g : tensor<f32>, tensor<4x2xf32>
}
