// RUN: braidc --preset tiny-gpt2 --seq-len 8 --compile-to=optimizer | FileCheck %s

// Tests that the optimizer phase adds the moments, lr and step as inputs,
// clips with the job's default max norm, decays rank-2 weights only, and
// returns loss, gradient norm, new parameters and new moments.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: {model.opt_state = "exp_avg:transformer.wte.weight"}
// CHECK-SAME: {model.opt_state = "exp_avg_sq:transformer.ln_f.bias"}
// CHECK-SAME: %[[LR:[^:]+]]: tensor<f32> {model.input = "lr"}, %[[STEP:[^:]+]]: tensor<i64> {model.input = "step"})
// CHECK-SAME: -> (tensor<f32>, tensor<f32>, tensor<512x64xf32> {model.param = "transformer.wte.weight"}
// CHECK-SAME: {model.opt_state = "exp_avg_sq:transformer.ln_f.bias"})
// CHECK: %[[NORM:[^,]+]], %[[SCALE:[^ ]+]] = model.grad_norm {{.*}} max_norm = 1.000000e+00
// CHECK: model.adamw %arg0, {{.*}}, %[[LR]], %[[STEP]], %[[SCALE]] beta1 = 9.000000e-01 beta2 = 0.9499{{[0-9]+}} eps = 1.000000e-08 weight_decay = 1.000000e-01 : (tensor<512x64xf32>
// CHECK: model.adamw %arg2, {{.*}} weight_decay = 0.000000e+00 : (tensor<64xf32>
// CHECK: return %{{[^,]+}}, %[[NORM]],
