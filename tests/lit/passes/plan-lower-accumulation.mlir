// RUN: braid-opt %s --plan-lower -split-input-file | FileCheck %s

// Tests that a gradient summed from two weight-gradient kernels (a tied
// weight) is accumulated by both kernels into the one gradient buffer: the
// sum disappears, and nothing in micro_step zeroes the buffer.
// CHECK: plan.buffer @[[G:b[0-9]+]] : tensor<4x8xf32> role = "gradient" name = "w"
// CHECK-LABEL: plan.func @zero_grads {
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@[[G]]]
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" {{.*}} -> [@[[G]]]
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" {{.*}} -> [@[[G]]]
// CHECK-NEXT: {{^ *}}}
// CHECK-NOT: plan.func @update
func.func @train_step(%w: tensor<4x8xf32> {model.param = "w"},
                      %x: tensor<2x3x4xf32> {model.input = "tokens"},
                      %dy: tensor<2x3x8xf32> {model.input = "targets"},
                      %x2: tensor<2x3x4xf32> {model.input = "lr"})
    -> (tensor<2x3x8xf32>, tensor<4x8xf32> {model.grad = "w"}) {
  %a = model.linear_grad_weight %x, %dy : (tensor<2x3x4xf32>, tensor<2x3x8xf32>) -> tensor<4x8xf32>
  %b = model.linear_grad_weight %x2, %dy : (tensor<2x3x4xf32>, tensor<2x3x8xf32>) -> tensor<4x8xf32>
  %g = model.add %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %dy, %g : tensor<2x3x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that a contribution that is used elsewhere too keeps its own buffer
// (zeroed before its accumulating kernel) and is added into the gradient
// buffer after it, while the other contribution accumulates directly.
// CHECK: plan.buffer @[[G:b[0-9]+]] : tensor<4x8xf32> role = "gradient" name = "w"
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@[[A:b[0-9]+]]]
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" {{.*}} -> [@[[A]]]
// CHECK-NEXT: plan.kernel "ADD" [@[[G]], @[[A]]] -> [@[[G]]] {} {provenance = "model.linear_grad_weight in train_step (gradient accumulation)"}
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" {{.*}} -> [@[[G]]]
// CHECK-NEXT: plan.kernel "ADD" [@[[A]], @[[A]]] -> [@{{b[0-9]+}}]
func.func @train_step(%w: tensor<4x8xf32> {model.param = "w"},
                      %x: tensor<2x3x4xf32> {model.input = "tokens"},
                      %dy: tensor<2x3x8xf32> {model.input = "targets"},
                      %x2: tensor<2x3x4xf32> {model.input = "lr"})
    -> (tensor<4x8xf32>, tensor<4x8xf32> {model.grad = "w"}) {
  %a = model.linear_grad_weight %x, %dy : (tensor<2x3x4xf32>, tensor<2x3x8xf32>) -> tensor<4x8xf32>
  %b = model.linear_grad_weight %x2, %dy : (tensor<2x3x4xf32>, tensor<2x3x8xf32>) -> tensor<4x8xf32>
  %g = model.add %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %other = model.add %a, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %other, %g : tensor<4x8xf32>, tensor<4x8xf32>
}
