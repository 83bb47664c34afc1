// RUN: split-file %s %t
// RUN: braid-opt %t/buckets.mlir -model-grad-reduce | FileCheck %s --check-prefix=BUCKETS
// RUN: braid-opt %t/buckets.mlir -model-grad-reduce=bucket-bytes=64 | FileCheck %s --check-prefix=SMALL
// RUN: braid-opt %t/partial.mlir -model-grad-reduce | FileCheck %s --check-prefix=PARTIAL
// RUN: braid-opt %t/sp.mlir -model-shard="tp=2 sp=true" | FileCheck %s --check-prefix=MARK
// RUN: braid-opt %t/sp.mlir -model-shard="tp=2 sp=true" -model-grad-reduce | FileCheck %s --check-prefix=TPONLY
// RUN: braid-opt %t/refusals.mlir -split-input-file -model-grad-reduce -verify-diagnostics
// RUN: braid-opt %t/bucket-bytes.mlir -model-grad-reduce=bucket-bytes=0 -verify-diagnostics

//--- buckets.mlir
// Tests the sums over dp (mesh dp = 2): one bucket of all three gradients,
// in the order backward makes them (w2's, w1's, v's), not the optimizer's;
// the all-reduce comes right before the norm, and only the optimizer (norm
// and AdamW) reads the sums: the returned gradient stays this rank's.
// BUCKETS: %[[G2:.+]] = model.linear_grad_weight
// BUCKETS-NEXT: %[[G1:.+]] = model.linear_grad_weight
// BUCKETS-NEXT: %[[GV:.+]] = model.bias_grad
// BUCKETS-NEXT: %[[SUM:.+]]:3 = model.all_reduce %[[G2]], %[[G1]], %[[GV]] over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradients of w2 .. v (3 tensors, 192 bytes)"
// BUCKETS-NEXT: model.grad_norm %[[SUM]]#1, %[[SUM]]#0, %[[SUM]]#2
// BUCKETS-NEXT: model.adamw %{{.+}}, %[[SUM]]#1,
// BUCKETS-NEXT: model.adamw %{{.+}}, %[[SUM]]#0,
// BUCKETS-NEXT: model.adamw %{{.+}}, %[[SUM]]#2,
// BUCKETS-NEXT: return %{{.+}}, %[[G1]] :
// BUCKETS-NOT: model.all_reduce

// Tests buckets of at most 64 bytes: each 64-byte gradient alone, in
// backward's order.
// SMALL: model.all_reduce %{{.+}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradient of w2"
// SMALL-NEXT: model.all_reduce %{{.+}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradient of w1"
// SMALL-NEXT: model.all_reduce %{{.+}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradient of v"
// SMALL-NEXT: model.grad_norm
module {
  model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
  func.func @train_step(%w1: tensor<4x4xf32> {model.param = "w1"},
                        %w2: tensor<4x4xf32> {model.param = "w2"},
                        %v: tensor<16xf32> {model.param = "v"},
                        %x: tensor<1x2x4xf32> {model.input = "loss_grad"},
                        %dy: tensor<1x2x4xf32> {model.input = "loss_grad"},
                        %d16: tensor<1x2x16xf32> {model.input = "loss_grad"},
                        %m1: tensor<4x4xf32> {model.opt_state = "exp_avg:w1"},
                        %s1: tensor<4x4xf32> {model.opt_state = "exp_avg_sq:w1"},
                        %m2: tensor<4x4xf32> {model.opt_state = "exp_avg:w2"},
                        %s2: tensor<4x4xf32> {model.opt_state = "exp_avg_sq:w2"},
                        %mv: tensor<16xf32> {model.opt_state = "exp_avg:v"},
                        %sv: tensor<16xf32> {model.opt_state = "exp_avg_sq:v"},
                        %lr: tensor<f32> {model.input = "lr"},
                        %step: tensor<i64> {model.input = "step"}) -> (tensor<f32>, tensor<4x4xf32>) {
    %g2 = model.linear_grad_weight %x, %dy : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32>
    %g1 = model.linear_grad_weight %dy, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32>
    %gv = model.bias_grad %d16 : (tensor<1x2x16xf32>) -> tensor<16xf32>
    %n, %s = model.grad_norm %g1, %g2, %gv max_norm = 1.0 : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<16xf32>) -> (tensor<f32>, tensor<f32>)
    %p1, %n1, %q1 = model.adamw %w1, %g1, %m1, %s1, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
    %p2, %n2, %q2 = model.adamw %w2, %g2, %m2, %s2, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
    %p3, %n3, %q3 = model.adamw %v, %gv, %mv, %sv, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.0 : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
    return %n, %g1 : tensor<f32>, tensor<4x4xf32>
  }
}

//--- partial.mlir
// Tests a layer whose second gradient model-shard marked partial over tp
// (mesh dp = 2, tp = 2): wq's is summed over dp alone, wk's over dp and tp,
// in buckets apart; the layer's model.sharding, read, is gone.
// PARTIAL: %[[B:.+]]:2 = model.layer 0 backward(%{{.+}}, %{{.+}}) : (
// PARTIAL: %[[SQ:.+]] = model.all_reduce %[[B]]#0 over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradient of wq"
// PARTIAL-NEXT: %[[SK:.+]] = model.all_reduce %[[B]]#1 over @mesh ["dp", "tp"] reason = "model-shard: data- and tensor-parallel sum of the gradient of wk; partial over tp: replicated, used by split computations"
// PARTIAL-NEXT: model.grad_norm %[[SQ]], %[[SK]]
// PARTIAL-NOT: model.sharding
module {
  model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 2]
  func.func @train_step(%wq: tensor<4x4xf32> {model.param = "wq"},
                        %wk: tensor<4x4xf32> {model.param = "wk"},
                        %x: tensor<1x2x4xf32> {model.input = "loss_grad"},
                        %dy: tensor<1x2x4xf32> {model.input = "loss_grad"},
                        %m1: tensor<4x4xf32> {model.opt_state = "exp_avg:wq"},
                        %s1: tensor<4x4xf32> {model.opt_state = "exp_avg_sq:wq"},
                        %m2: tensor<4x4xf32> {model.opt_state = "exp_avg:wk"},
                        %s2: tensor<4x4xf32> {model.opt_state = "exp_avg_sq:wk"},
                        %lr: tensor<f32> {model.input = "lr"},
                        %step: tensor<i64> {model.input = "step"}) -> tensor<f32> {
    %b:2 = model.layer 0 backward(%x, %dy) {model.sharding = [#model.sharding<@mesh, [{}, {"tp"}]>, #model.sharding<@mesh, [{}, {}], partial = {"tp"}>]} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
    ^bb0(%a: tensor<1x2x4xf32>, %d: tensor<1x2x4xf32>):
      %gq = model.linear_grad_weight %a, %d : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32>
      %gk = model.linear_grad_weight %d, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32>
      model.yield %gq, %gk : tensor<4x4xf32>, tensor<4x4xf32>
    }
    %n, %s = model.grad_norm %b#0, %b#1 max_norm = 1.0 : (tensor<4x4xf32>, tensor<4x4xf32>) -> (tensor<f32>, tensor<f32>)
    %p1, %n1, %q1 = model.adamw %wq, %b#0, %m1, %s1, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
    %p2, %n2, %q2 = model.adamw %wk, %b#1, %m2, %s2, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
    return %n : tensor<f32>
  }
}

//--- sp.mlir
// Tests what model-shard hands over: with sequence parallelism (tp = 2) the
// bias gradient of this rank's sequence slice is partial over tp; the op
// that makes it says so, and the sum is left to model-grad-reduce.
// MARK: %[[GB:.+]] = model.bias_grad %{{.+}} {model.sharding = #model.sharding<@mesh, [{}], partial = {"tp"}>}
// MARK-NOT: model.all_reduce %[[GB]]
// MARK: model.grad_norm %[[GB]]

// Tests that with dp = 1 the partial gradient alone is summed, over tp, and
// the mark is gone.
// TPONLY: %[[GB:.+]] = model.bias_grad %{{.+}} : (
// TPONLY-NEXT: %[[S:.+]] = model.all_reduce %[[GB]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the gradient of bias; partial over tp: replicated, used by split computations"
// TPONLY-NEXT: model.grad_norm %[[S]]
// TPONLY-NOT: model.sharding
module {
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"},
                        %g: tensor<4xf32> {model.param = "norm"},
                        %b: tensor<4xf32> {model.param = "bias"},
                        %tokens: tensor<1x2xi32> {model.input = "tokens"},
                        %mb: tensor<4xf32> {model.opt_state = "exp_avg:bias"},
                        %vb: tensor<4xf32> {model.opt_state = "exp_avg_sq:bias"},
                        %lr: tensor<f32> {model.input = "lr"},
                        %step: tensor<i64> {model.input = "step"}) -> (tensor<f32>, tensor<4xf32>) {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %n = model.rms_norm %e, %g eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
    %gb = model.bias_grad %n : (tensor<1x2x4xf32>) -> tensor<4xf32>
    %norm, %scale = model.grad_norm %gb max_norm = 1.0 : (tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
    %p, %m, %v = model.adamw %b, %gb, %mb, %vb, %lr, %step, %scale beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.0 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    return %norm, %p : tensor<f32>, tensor<4xf32>
  }
}

//--- refusals.mlir
// expected-error @below {{model-grad-reduce needs a func.func @train_step (run model-shard first)}}
module {
  model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
}

// -----

// expected-error @below {{model-grad-reduce needs the model.mesh @mesh that model-shard declares}}
module {
  func.func @train_step(%x: tensor<4xf32> {model.param = "x"}) {
    return
  }
}

// -----

module {
  model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
  // expected-error @below {{model-grad-reduce needs the optimizer's model.grad_norm}}
  func.func @train_step(%x: tensor<4xf32> {model.param = "x"}) {
    return
  }
}

//--- bucket-bytes.mlir
// expected-error @below {{model-grad-reduce: bucket-bytes = 0 must be at least 1}}
module {
  model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
}
