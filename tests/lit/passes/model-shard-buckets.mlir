// RUN: braid-opt %s --model-shard=dp=2 --model-grad-reduce -split-input-file | FileCheck %s --check-prefix=BUCKETS
// RUN: braid-opt %s --model-shard=dp=2 --model-grad-reduce=bucket-bytes=64 -split-input-file | FileCheck %s --check-prefix=SMALL

// The data-parallel sums of the gradients after model-shard, made by
// model-grad-reduce, in buckets of at most bucket-bytes (see also
// model-grad-reduce.mlir; ../pipeline/model-shard-dp.mlir checks the same
// sums through braidc).

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
