// RUN: braidc --preset tiny-gpt2 --seq-len 8 --dp 2 --compile-to=shard | FileCheck %s
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --compile-to=shard | FileCheck %s --check-prefix=ONE
// RUN: braid-opt %s --model-shard=dp=2 -split-input-file | FileCheck %s --check-prefix=BUCKETS
// RUN: braid-opt %s --model-shard="dp=2 bucket-bytes=64" -split-input-file | FileCheck %s --check-prefix=SMALL
// RUN: braid-opt %s --model-shard=tp=2 -split-input-file | FileCheck %s --check-prefix=TP

// Tests data parallelism on a GPT-2 step: the mesh, tokens and targets split
// along dp on the batch, and one all-reduce over dp of all 28 gradients (they
// fit one 25 MB bucket), in the order backward makes them (the final norm's
// first, the tied embedding's last: its embedding-gradient half comes last),
// read by the clipping norm and by every AdamW update.
// CHECK: model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: tensor<1x8xi32> {model.input = "tokens", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>}
// CHECK-SAME: tensor<1x8xi32> {model.input = "targets", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>}
// CHECK: %[[SUM:.+]]:28 = model.all_reduce {{.*}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradients of transformer.ln_f.weight .. transformer.wte.weight (28 tensors, 564224 bytes)"
// CHECK-NEXT: model.grad_norm %[[SUM]]#27, %[[SUM]]#26,
// CHECK: model.adamw %arg0, %[[SUM]]#27,

// Tests that one rank needs no collective; the mesh is still declared.
// ONE: model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 1]
// ONE-NOT: model.all_reduce

// Tests buckets: with room for 64 bytes, the 16-float gradient and the
// 16-float one go in a bucket each; by default, in one.
module {
  func.func @train_step(%w: tensor<4x4xf32> {model.param = "w"},
                        %v: tensor<16xf32> {model.param = "v"},
                        %tokens: tensor<1x4xi32> {model.input = "tokens"},
                        %gw: tensor<4x4xf32> {model.input = "loss_grad"},
                        %gv: tensor<16xf32> {model.input = "lr"},
                        %mw: tensor<4x4xf32> {model.opt_state = "exp_avg:w"},
                        %vw: tensor<4x4xf32> {model.opt_state = "exp_avg_sq:w"},
                        %mv: tensor<16xf32> {model.opt_state = "exp_avg:v"},
                        %vv: tensor<16xf32> {model.opt_state = "exp_avg_sq:v"},
                        %lr: tensor<f32> {model.input = "lr"},
                        %step: tensor<i64> {model.input = "step"}) -> (tensor<f32>, tensor<4x4xf32>, tensor<16xf32>) {
    %n, %s = model.grad_norm %gw, %gv max_norm = 1.0 : (tensor<4x4xf32>, tensor<16xf32>) -> (tensor<f32>, tensor<f32>)
    %p1, %m1, %v1 = model.adamw %w, %gw, %mw, %vw, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
    %p2, %m2, %v2 = model.adamw %v, %gv, %mv, %vv, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.0 : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
    return %n, %p1, %p2 : tensor<f32>, tensor<4x4xf32>, tensor<16xf32>
  }
}
// BUCKETS: model.all_reduce %{{.+}}, %{{.+}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradients of w .. v (2 tensors, 128 bytes)"
// BUCKETS-NOT: model.all_reduce
// SMALL: model.all_reduce %{{.+}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradient of w"
// SMALL: model.all_reduce %{{.+}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradient of v"
// Tests that with tp = 2 parameters read only by the optimizer stay whole:
// no collective, and the norm sums whole gradients as on one rank.
// TP: model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 2]
// TP-NOT: model.all_reduce
// TP: model.grad_norm %{{.+}}, %{{.+}} max_norm = 1.000000e+00 :

// Tests the report's communication: with dp, each rank all-reduces every
// gradient once per step, whatever the micro-batches: tiny-gpt2's 141,056
// parameters (wte 512·64 + wpe 128·64 + 2 layers of (2·128 norms + 64·192 +
// 192 + 64·64 + 64 + 64·256 + 256 + 256·64 + 64) + 128 for ln_f) in f32 are
// 564,224 bytes.
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --dp 4 --micro-batch-size 1 --global-batch-size 8 --compile-to=plan --report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t.json
// REPORT: "communication_bytes_per_step": {
// REPORT-NEXT: "all_reduce": {
// REPORT-NEXT: "dp": 564224
