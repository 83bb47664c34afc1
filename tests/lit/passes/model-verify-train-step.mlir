// RUN: braid-opt %s -split-input-file -model-verify-train-step -verify-diagnostics --allow-unregistered-dialect | FileCheck %s

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

// -----

// Tests T1: a module of a mesh only.
// expected-error @below {{the train-step module has no func.func @train_step}}
module {
  model.mesh @mesh axes = ["dp"] sizes = [1]
}

// -----

// Tests T2: an argument that is neither a parameter nor an input.
// expected-error @below {{argument 4 must be a parameter or a distinct data input}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}, %extra: tensor<f32>) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests T2: an input given twice.
// expected-error @below {{argument 2 must be a parameter or a distinct data input}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %t2: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests T2: loss_grad seeds the backward with one float.
// expected-error @below {{the loss_grad input must be a rank-0 float, found 'tensor<4xf32>'}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<4xf32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests T3: one gradient per parameter.
// expected-error @below {{@train_step must return the loss and 1 gradients (one per parameter not model.frozen), found 1 results}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> tensor<f32> {
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests T3: a gradient of another type than its parameter.
// expected-error @below {{the gradient of "w" is 'tensor<2x4xf32>' but the parameter is 'tensor<4x2xf32>'}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}, %g: tensor<2x4xf32> {model.param = "g"}) -> (tensor<f32>, tensor<2x4xf32> {model.grad = "w"}, tensor<2x4xf32> {model.grad = "g"}) {
  %l = model.cross_entropy %w, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %g, %g : tensor<f32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Tests T4: no forward layer after a backward one.
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %f0 = model.layer 0 (%w) : (tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%a: tensor<4x2xf32>):
    model.yield %a : tensor<4x2xf32>
  }
  %b0 = model.layer 0 backward(%f0) : (tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%a: tensor<4x2xf32>):
    model.yield %a : tensor<4x2xf32>
  }
  // expected-error @below {{forward layer 1 comes after a backward layer}}
  %f1 = model.layer 1 (%f0) : (tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%a: tensor<4x2xf32>):
    model.yield %a : tensor<4x2xf32>
  }
  %l = model.cross_entropy %f1, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  return %l, %b0 : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests T4: backward layers come in decreasing index order.
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"}, %t: tensor<4xi32> {model.input = "tokens"}, %y: tensor<4xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  %f0 = model.layer 0 (%w) : (tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%a: tensor<4x2xf32>):
    model.yield %a : tensor<4x2xf32>
  }
  %f1 = model.layer 1 (%f0) : (tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%a: tensor<4x2xf32>):
    model.yield %a : tensor<4x2xf32>
  }
  %l = model.cross_entropy %f1, %y ignore_index = -100 : (tensor<4x2xf32>, tensor<4xi32>) -> tensor<f32>
  %b0 = model.layer 0 backward(%f1) : (tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%a: tensor<4x2xf32>):
    model.yield %a : tensor<4x2xf32>
  }
  // expected-error @below {{backward layer 1 does not pair with forward layer 0 (expected index 0)}}
  %b1 = model.layer 1 backward(%b0) : (tensor<4x2xf32>) -> tensor<4x2xf32> {
  ^bb0(%a: tensor<4x2xf32>):
    model.yield %a : tensor<4x2xf32>
  }
  return %l, %b1 : tensor<f32>, tensor<4x2xf32>
}
