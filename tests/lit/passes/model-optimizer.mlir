// RUN: braid-opt %s -split-input-file -model-optimizer -verify-diagnostics | FileCheck %s
// RUN: braid-opt %s -split-input-file -verify-diagnostics -model-optimizer="beta1=0.75 beta2=0.875 eps=0.0078125 weight-decay=0.25 max-grad-norm=0.5" | FileCheck %s --check-prefix=OPTS

// A train step of two parameters, a matrix w and a vector b (a bias: no
// weight decay), whose gradients are gw and gb.
// Tests the arguments the optimizer adds after the step's own: the first
// moments of every parameter, then the second moments (each of its
// parameter's type, named after it), then lr and the 1-based step; and the
// results: loss, gradient norm, new parameters, new first and new second
// moments, each named as the argument it replaces.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x2xf32> {model.param = "w"}, %[[B:[^:]+]]: tensor<2xf32> {model.param = "b"}
// CHECK-SAME: {model.input = "loss_grad"}
// CHECK-SAME: %[[MW:[^:]+]]: tensor<4x2xf32> {model.opt_state = "exp_avg:w"}, %[[MB:[^:]+]]: tensor<2xf32> {model.opt_state = "exp_avg:b"}
// CHECK-SAME: %[[VW:[^:]+]]: tensor<4x2xf32> {model.opt_state = "exp_avg_sq:w"}, %[[VB:[^:]+]]: tensor<2xf32> {model.opt_state = "exp_avg_sq:b"}
// CHECK-SAME: %[[LR:[^:]+]]: tensor<f32> {model.input = "lr"}, %[[STEP:[^:]+]]: tensor<i64> {model.input = "step"})
// CHECK-SAME: -> (tensor<f32>, tensor<f32>, tensor<4x2xf32> {model.param = "w"}, tensor<2xf32> {model.param = "b"}, tensor<4x2xf32> {model.opt_state = "exp_avg:w"}, tensor<2xf32> {model.opt_state = "exp_avg:b"}, tensor<4x2xf32> {model.opt_state = "exp_avg_sq:w"}, tensor<2xf32> {model.opt_state = "exp_avg_sq:b"})
// Tests the update: the norm of both gradients, clipped at the default
// max-grad-norm 1, then AdamW per parameter with the default betas and eps,
// reading its gradient, moments, lr, step and the clipping scale; weight
// decay 0.01 on the matrix, none on the vector.
// CHECK: %[[LOSS:.+]] = model.cross_entropy
// CHECK: %[[GW:.+]] = model.linear_grad_weight
// CHECK: %[[GB:.+]] = model.bias_grad
// CHECK-NEXT: %[[NORM:.+]], %[[SCALE:.+]] = model.grad_norm %[[GW]], %[[GB]] max_norm = 1.000000e+00 :
// CHECK-NEXT: %[[NW:.+]], %[[NMW:.+]], %[[NVW:.+]] = model.adamw %[[W]], %[[GW]], %[[MW]], %[[VW]], %[[LR]], %[[STEP]], %[[SCALE]] beta1 = 9.000000e-01 beta2 = 0.99899{{9+}} eps = 1.000000e-08 weight_decay = 1.000000e-02 :
// CHECK-NEXT: %[[NB:.+]], %[[NMB:.+]], %[[NVB:.+]] = model.adamw %[[B]], %[[GB]], %[[MB]], %[[VB]], %[[LR]], %[[STEP]], %[[SCALE]] {{.*}} weight_decay = 0.000000e+00 :
// CHECK-NEXT: return %[[LOSS]], %[[NORM]], %[[NW]], %[[NB]], %[[NMW]], %[[NMB]], %[[NVW]], %[[NVB]] :
// Tests that the options reach the ops (values exact in binary).
// OPTS: model.grad_norm {{.*}} max_norm = 5.000000e-01 :
// OPTS-NEXT: model.adamw {{.*}} beta1 = 7.500000e-01 beta2 = 8.750000e-01 eps = 7.812500e-03 weight_decay = 2.500000e-01 :
// OPTS-NEXT: model.adamw {{.*}} weight_decay = 0.000000e+00 :
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"},
                      %b: tensor<2xf32> {model.param = "b"},
                      %t: tensor<1x3xi32> {model.input = "tokens"},
                      %y: tensor<1x3xi32> {model.input = "targets"},
                      %dl: tensor<f32> {model.input = "loss_grad"})
    -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}, tensor<2xf32> {model.grad = "b"}) {
  %e = model.embedding %w[%t] : (tensor<4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
  %z = model.linear %e, %w transpose_w : (tensor<1x3x2xf32>, tensor<4x2xf32>) -> tensor<1x3x4xf32>
  %l = model.cross_entropy %z, %y ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>) -> tensor<f32>
  %dz = model.cross_entropy_grad %z, %y, %dl ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>, tensor<f32>) -> tensor<1x3x4xf32>
  %gw = model.linear_grad_weight %e, %dz transpose_w : (tensor<1x3x2xf32>, tensor<1x3x4xf32>) -> tensor<4x2xf32>
  %gb = model.bias_grad %e : (tensor<1x3x2xf32>) -> tensor<2xf32>
  return %l, %gw, %gb : tensor<f32>, tensor<4x2xf32>, tensor<2xf32>
}

// -----

// Tests that a model in f64 gets its learning rate, norm and scale in f64
// (the step stays an i64).
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: tensor<f64> {model.input = "lr"}, %{{[^:]+}}: tensor<i64> {model.input = "step"})
// CHECK-SAME: -> (tensor<f64>, tensor<f64>, tensor<3xf64> {model.param = "v"}
// CHECK: model.grad_norm {{.*}} : (tensor<3xf64>) -> (tensor<f64>, tensor<f64>)
func.func @train_step(%v: tensor<3xf64> {model.param = "v"},
                      %t: tensor<1x3xi32> {model.input = "tokens"},
                      %y: tensor<1x3xi32> {model.input = "targets"},
                      %dl: tensor<f64> {model.input = "loss_grad"})
    -> (tensor<f64>, tensor<3xf64> {model.grad = "v"}) {
  return %dl, %v : tensor<f64>, tensor<3xf64>
}

// -----

// Tests that a module without @train_step is refused.
// expected-error @below {{model-optimizer needs a func.func @train_step (run model-autodiff first)}}
module {
  func.func @forward(%t: tensor<1x3xi32> {model.input = "tokens"}) {
    return
  }
}

// -----

// Tests a step that returns fewer gradients than it has parameters.
// expected-error @below {{@train_step must return the loss and one gradient per parameter not model.frozen before model-optimizer}}
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"},
                      %b: tensor<2xf32> {model.param = "b"},
                      %dl: tensor<f32> {model.input = "loss_grad"})
    -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}) {
  return %dl, %w : tensor<f32>, tensor<4x2xf32>
}

// -----

// Tests a step without parameters: nothing to optimize.
// expected-error @below {{@train_step has no trainable parameters (arguments marked model.param and not model.frozen): there is nothing to optimize}}
func.func @train_step(%dl: tensor<f32> {model.input = "loss_grad"})
    -> tensor<f32> {
  return %dl : tensor<f32>
}

// -----

// A train step whose matrix w is frozen (model.frozen): it returns the
// gradient of the bias b alone.
// Tests that a frozen parameter gets no optimizer state (no exp_avg or
// exp_avg_sq argument or result), no new value among the results and no
// model.adamw: the norm and the one update read b's gradient only.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x2xf32> {model.frozen, model.param = "w"}, %[[B:[^:]+]]: tensor<4xf32> {model.param = "b"}
// CHECK-SAME: {model.input = "loss_grad"}, %[[MB:[^:]+]]: tensor<4xf32> {model.opt_state = "exp_avg:b"}, %[[VB:[^:]+]]: tensor<4xf32> {model.opt_state = "exp_avg_sq:b"}, %[[LR:[^:]+]]: tensor<f32> {model.input = "lr"}, %[[STEP:[^:]+]]: tensor<i64> {model.input = "step"})
// CHECK-SAME: -> (tensor<f32>, tensor<f32>, tensor<4xf32> {model.param = "b"}, tensor<4xf32> {model.opt_state = "exp_avg:b"}, tensor<4xf32> {model.opt_state = "exp_avg_sq:b"})
// CHECK: %[[LOSS:.+]] = model.cross_entropy
// CHECK: %[[GB:.+]] = model.bias_grad
// CHECK-NEXT: %[[NORM:.+]], %[[SCALE:.+]] = model.grad_norm %[[GB]] max_norm = 1.000000e+00 : (tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
// CHECK-NEXT: %[[NB:.+]], %[[NMB:.+]], %[[NVB:.+]] = model.adamw %[[B]], %[[GB]], %[[MB]], %[[VB]], %[[LR]], %[[STEP]], %[[SCALE]]
// CHECK-NEXT: return %[[LOSS]], %[[NORM]], %[[NB]], %[[NMB]], %[[NVB]] :
func.func @train_step(%w: tensor<4x2xf32> {model.frozen, model.param = "w"},
                      %b: tensor<4xf32> {model.param = "b"},
                      %t: tensor<1x3xi32> {model.input = "tokens"},
                      %y: tensor<1x3xi32> {model.input = "targets"},
                      %dl: tensor<f32> {model.input = "loss_grad"})
    -> (tensor<f32>, tensor<4xf32> {model.grad = "b"}) {
  %e = model.embedding %w[%t] : (tensor<4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
  %z = model.linear %e, %w, %b transpose_w : (tensor<1x3x2xf32>, tensor<4x2xf32>, tensor<4xf32>) -> tensor<1x3x4xf32>
  %l = model.cross_entropy %z, %y ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>) -> tensor<f32>
  %dz = model.cross_entropy_grad %z, %y, %dl ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>, tensor<f32>) -> tensor<1x3x4xf32>
  %gb = model.bias_grad %dz : (tensor<1x3x4xf32>) -> tensor<4xf32>
  return %l, %gb : tensor<f32>, tensor<4xf32>
}

// -----

// Tests a step that still returns a gradient for its frozen parameter.
// expected-error @below {{@train_step must return the loss and one gradient per parameter not model.frozen before model-optimizer}}
func.func @train_step(%w: tensor<4x2xf32> {model.frozen, model.param = "w"},
                      %b: tensor<2xf32> {model.param = "b"},
                      %dl: tensor<f32> {model.input = "loss_grad"})
    -> (tensor<f32>, tensor<4x2xf32> {model.grad = "w"}, tensor<2xf32> {model.grad = "b"}) {
  return %dl, %w, %b : tensor<f32>, tensor<4x2xf32>, tensor<2xf32>
}

// -----

// Tests a step whose parameters are all frozen: nothing to optimize.
// expected-error @below {{@train_step has no trainable parameters (arguments marked model.param and not model.frozen): there is nothing to optimize}}
func.func @train_step(%w: tensor<4x2xf32> {model.frozen, model.param = "w"},
                      %dl: tensor<f32> {model.input = "loss_grad"})
    -> tensor<f32> {
  return %dl : tensor<f32>
}
