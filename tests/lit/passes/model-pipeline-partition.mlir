// RUN: split-file %s %t
// RUN: braid-opt %t/step.mlir -model-pipeline-partition=pp=2 | FileCheck %s
// RUN: braid-opt %t/step.mlir -model-pipeline-partition="pp=2 stage-layers=2,1" | FileCheck %s --check-prefix=GIVEN
// RUN: braid-opt %t/chunks.mlir -model-pipeline-partition="pp=2 vpp=2" | FileCheck %s --check-prefix=VPP
// RUN: braid-opt %t/no-step.mlir -model-pipeline-partition=pp=2 -verify-diagnostics
// RUN: braid-opt %t/pp-zero.mlir -model-pipeline-partition=pp=0 -verify-diagnostics
// RUN: braid-opt %t/no-mesh.mlir -model-pipeline-partition=pp=2 -verify-diagnostics
// RUN: braid-opt %t/vpp-zero.mlir -model-pipeline-partition="pp=2 vpp=0" -verify-diagnostics
// RUN: braid-opt %t/too-many-stages.mlir -model-pipeline-partition="pp=2 vpp=2" -verify-diagnostics
// RUN: braid-opt %t/empty-stage.mlir -model-pipeline-partition="pp=2 stage-layers=3,0" -verify-diagnostics
// RUN: braid-opt %t/wrong-stages.mlir -model-pipeline-partition="pp=2 stage-layers=1,1" -verify-diagnostics

// step.mlir: a training step of three layers on a pp = 2 mesh, as
// model-shard leaves it (after autodiff and the optimizer). Layer 0 holds
// two 256 x 4 matrix products each way, thousands of FLOPs; layers 1 and 2
// (an add, a norm) and the embedding, output layer and loss cost tens to
// hundreds. The tied table wte is read by the embedding (stage 0) and the
// output layer (the last stage).
//
// Tests the balanced cut: the split that minimises the largest stage's
// cost puts layer 0 alone on stage 0 and layers 1 and 2 on stage 1 (an even
// split, 2 + 1, would leave stage 0 the dearer). Every top-level op is
// marked: the embedding with stage 0, each forward layer and its backward
// with the layer's stage, the output layer, loss and their gradients
// (between the last forward and backward layers) with the last stage, the
// embedding's gradient and the tied sum (after layer 0's backward) with
// stage 0, the clipping norm with -1, each AdamW with its parameter's
// first stage (wte: 0). The step's all-reduce of gradients is split into
// one per stage, each holding the gradients of that stage's parameters.
// CHECK: module attributes {model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 0 : i64}, {chunk = 0 : i64, first_layer = 1 : i64, flops = {{.+}} : f64, num_layers = 2 : i64, rank = 1 : i64}]}
// CHECK: model.embedding {{.*}} {model.stage = 0 : i64}
// CHECK: model.layer 0({{.*}} {model.stage = 0 : i64}
// CHECK: model.layer 1({{.*}} {model.stage = 1 : i64}
// CHECK: model.layer 2({{.*}} {model.stage = 1 : i64}
// CHECK: model.linear {{.*}} {model.stage = 1 : i64}
// CHECK-NEXT: model.cross_entropy {{.*}} {model.stage = 1 : i64}
// CHECK-NEXT: model.cross_entropy_grad {{.*}} {model.stage = 1 : i64}
// CHECK-NEXT: model.linear_grad_input {{.*}} {model.stage = 1 : i64}
// CHECK-NEXT: %[[HEAD:.+]] = model.linear_grad_weight {{.*}} {model.stage = 1 : i64}
// CHECK-NEXT: %[[B2:.+]]:2 = model.layer 2 backward({{.*}} {model.stage = 1 : i64}
// CHECK: model.layer 1 backward({{.*}} {model.stage = 1 : i64}
// CHECK: %[[B0:.+]]:2 = model.layer 0 backward({{.*}} {model.stage = 0 : i64}
// CHECK: %[[LOOKUP:.+]] = model.embedding_grad {{.*}} {model.stage = 0 : i64}
// CHECK-NEXT: %[[TIED:.+]] = model.add %[[HEAD]], %[[LOOKUP]] {model.stage = 0 : i64}
// CHECK-NEXT: %[[S0:.+]]:2 = model.all_reduce %[[B0]]#1, %[[TIED]] over @mesh ["dp"] reason = "sum (pipeline stage 0's part)" {model.stage = 0 : i64}
// CHECK-NEXT: %[[S1:.+]] = model.all_reduce %[[B2]]#1 over @mesh ["dp"] reason = "sum (pipeline stage 1's part)" {model.stage = 1 : i64}
// CHECK-NOT: model.all_reduce
// CHECK: model.grad_norm %[[S0]]#1, %[[S0]]#0, %[[S1]] {{.*}} {model.stage = -1 : i64}
// CHECK-NEXT: model.adamw %arg0, %[[S0]]#1, {{.*}} {model.stage = 0 : i64}
// CHECK-NEXT: model.adamw %arg1, %[[S0]]#0, {{.*}} {model.stage = 0 : i64}
// CHECK-NEXT: model.adamw %arg2, %[[S1]], {{.*}} {model.stage = 1 : i64}

// Tests the cut a user gives (ModelLink's uneven pipeline): layers 0 and 1
// on stage 0, against the balance; the norm's gradient is still summed on
// stage 1, alone.
// GIVEN: module attributes {model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = {{.+}} : f64, num_layers = 2 : i64, rank = 0 : i64}, {chunk = 0 : i64, first_layer = 2 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 1 : i64}]}
// GIVEN: model.layer 1({{.*}} {model.stage = 0 : i64}
// GIVEN: model.layer 2({{.*}} {model.stage = 1 : i64}
// GIVEN: model.layer 1 backward({{.*}} {model.stage = 0 : i64}
// GIVEN: model.all_reduce {{.*}} reason = "sum (pipeline stage 1's part)" {model.stage = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>

//--- step.mlir
model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 2, 1]
func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"},
                      %u: tensor<256x4xf32> {model.param = "up"},
                      %g: tensor<4xf32> {model.param = "norm"},
                      %tokens: tensor<1x2xi32> {model.input = "tokens"},
                      %targets: tensor<1x2xi32> {model.input = "targets"},
                      %dl: tensor<f32> {model.input = "loss_grad"},
                      %m0: tensor<8x4xf32> {model.opt_state = "exp_avg:wte"},
                      %m1: tensor<256x4xf32> {model.opt_state = "exp_avg:up"},
                      %m2: tensor<4xf32> {model.opt_state = "exp_avg:norm"},
                      %v0: tensor<8x4xf32> {model.opt_state = "exp_avg_sq:wte"},
                      %v1: tensor<256x4xf32> {model.opt_state = "exp_avg_sq:up"},
                      %v2: tensor<4xf32> {model.opt_state = "exp_avg_sq:norm"},
                      %lr: tensor<f32> {model.input = "lr"},
                      %step: tensor<i64> {model.input = "step"}) -> (tensor<f32>, tensor<f32>) {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %h0:2 = model.layer 0 (%e, %u) : (tensor<1x2x4xf32>, tensor<256x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x256xf32>) {
  ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<256x4xf32>):
    %y = model.linear %x, %w transpose_w : (tensor<1x2x4xf32>, tensor<256x4xf32>) -> tensor<1x2x256xf32>
    %z = model.linear %y, %w : (tensor<1x2x256xf32>, tensor<256x4xf32>) -> tensor<1x2x4xf32>
    model.yield %z, %y : tensor<1x2x4xf32>, tensor<1x2x256xf32>
  }
  %h1 = model.layer 1 (%h0#0) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>):
    %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    model.yield %r : tensor<1x2x4xf32>
  }
  %h2 = model.layer 2 (%h1, %g) : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<4xf32>):
    %n = model.rms_norm %x, %w eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
    model.yield %n : tensor<1x2x4xf32>
  }
  %logits = model.linear %h2, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  %dlogits = model.cross_entropy_grad %logits, %targets, %dl ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>, tensor<f32>) -> tensor<1x2x8xf32>
  %dh2 = model.linear_grad_input %dlogits, %wte transpose_w : (tensor<1x2x8xf32>, tensor<8x4xf32>) -> tensor<1x2x4xf32>
  %ghead = model.linear_grad_weight %h2, %dlogits transpose_w : (tensor<1x2x4xf32>, tensor<1x2x8xf32>) -> tensor<8x4xf32>
  %b2:2 = model.layer 2 backward(%dh2, %h1, %g) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<4xf32>) -> (tensor<1x2x4xf32>, tensor<4xf32>) {
  ^bb0(%dy: tensor<1x2x4xf32>, %x: tensor<1x2x4xf32>, %w: tensor<4xf32>):
    %dx, %dw = model.rms_norm_grad %x, %w, %dy eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<4xf32>)
    model.yield %dx, %dw : tensor<1x2x4xf32>, tensor<4xf32>
  }
  %b1 = model.layer 1 backward(%b2#0, %h0#0) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%dy: tensor<1x2x4xf32>, %x: tensor<1x2x4xf32>):
    %dx = model.add %dy, %dy : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    model.yield %dx : tensor<1x2x4xf32>
  }
  %b0:2 = model.layer 0 backward(%b1, %e, %u, %h0#1) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<256x4xf32>, tensor<1x2x256xf32>) -> (tensor<1x2x4xf32>, tensor<256x4xf32>) {
  ^bb0(%dz: tensor<1x2x4xf32>, %x: tensor<1x2x4xf32>, %w: tensor<256x4xf32>, %y: tensor<1x2x256xf32>):
    %dy = model.linear_grad_input %dz, %w : (tensor<1x2x4xf32>, tensor<256x4xf32>) -> tensor<1x2x256xf32>
    %g1 = model.linear_grad_weight %y, %dz : (tensor<1x2x256xf32>, tensor<1x2x4xf32>) -> tensor<256x4xf32>
    %dx = model.linear_grad_input %dy, %w transpose_w : (tensor<1x2x256xf32>, tensor<256x4xf32>) -> tensor<1x2x4xf32>
    %g2 = model.linear_grad_weight %x, %dy transpose_w : (tensor<1x2x4xf32>, tensor<1x2x256xf32>) -> tensor<256x4xf32>
    %gw = model.add %g1, %g2 : (tensor<256x4xf32>, tensor<256x4xf32>) -> tensor<256x4xf32>
    model.yield %dx, %gw : tensor<1x2x4xf32>, tensor<256x4xf32>
  }
  %glookup = model.embedding_grad %b0#0[%tokens] : (tensor<1x2x4xf32>, tensor<1x2xi32>) -> tensor<8x4xf32>
  %gwte = model.add %ghead, %glookup : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %sum:3 = model.all_reduce %b2#1, %b0#1, %gwte over @mesh ["dp"] reason = "sum" : (tensor<4xf32>, tensor<256x4xf32>, tensor<8x4xf32>) -> (tensor<4xf32>, tensor<256x4xf32>, tensor<8x4xf32>)
  %norm, %scale = model.grad_norm %sum#2, %sum#1, %sum#0 max_norm = 1.0 : (tensor<8x4xf32>, tensor<256x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
  %p0, %n0, %s0 = model.adamw %wte, %sum#2, %m0, %v0, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>)
  %p1, %n1, %s1 = model.adamw %u, %sum#1, %m1, %v1, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : (tensor<256x4xf32>, tensor<256x4xf32>, tensor<256x4xf32>, tensor<256x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<256x4xf32>, tensor<256x4xf32>, tensor<256x4xf32>)
  %p2, %n2, %s2 = model.adamw %g, %sum#0, %m2, %v2, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %loss, %norm : tensor<f32>, tensor<f32>
}

//--- chunks.mlir
// Tests virtual stages: pp = 2 ranks of vpp = 2 chunks make 4 stages of
// one layer each; stage c runs on rank c % 2 as its chunk c / 2.
// VPP: module attributes {model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 0 : i64}, {chunk = 0 : i64, first_layer = 1 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 1 : i64}, {chunk = 1 : i64, first_layer = 2 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 0 : i64}, {chunk = 1 : i64, first_layer = 3 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 1 : i64}]}
// VPP: model.layer 0({{.*}} {model.stage = 0 : i64}
// VPP: model.layer 1({{.*}} {model.stage = 1 : i64}
// VPP: model.layer 2({{.*}} {model.stage = 2 : i64}
// VPP: model.layer 3({{.*}} {model.stage = 3 : i64}
// VPP: model.linear {{.*}} {model.stage = 3 : i64}
module {
  model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 1, 1]
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h0 = model.layer 0 (%e) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h1 = model.layer 1 (%h0) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h2 = model.layer 2 (%h1) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h3 = model.layer 3 (%h2) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %logits = model.linear %h3, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

//--- no-step.mlir
// Tests a module without @train_step.
// expected-error @below {{model-pipeline-partition needs a func.func @train_step (run model-shard first)}}
module {
  func.func @forward() {
    return
  }
}

//--- pp-zero.mlir
// Tests pp = 0.
// expected-error @below {{model-pipeline-partition: pp = 0 must be at least 1}}
module {
  model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 1, 1]
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}) {
    return
  }
}

//--- no-mesh.mlir
// Tests pp = 2 on a mesh without a pp axis (model-shard ran without pp).
// expected-error @below {{model-pipeline-partition: pp = 2 needs a model.mesh @mesh with an axis "pp" of that size (run model-shard with pp)}}
module {
  model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}) {
    return
  }
}

//--- vpp-zero.mlir
// Tests vpp = 0.
// expected-error @below {{model-pipeline-partition: vpp = 0 must be at least 1}}
module {
  model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 1, 1]
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}) {
    return
  }
}

//--- too-many-stages.mlir
// Tests more stages (pp x vpp = 4) than layers (3).
module {
  model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 1, 1]
  // expected-error @below {{model-pipeline-partition: pp x vpp = 4 is more than the 3 layers: each stage needs at least one}}
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h0 = model.layer 0 (%e) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h1 = model.layer 1 (%h0) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h2 = model.layer 2 (%h1) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %logits = model.linear %h2, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

//--- empty-stage.mlir
// Tests a given cut with an empty stage.
module {
  model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 1, 1]
  // expected-error @below {{model-pipeline-partition: stage-layers has a stage of 0 layers; each needs at least one}}
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h0 = model.layer 0 (%e) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h1 = model.layer 1 (%h0) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h2 = model.layer 2 (%h1) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %logits = model.linear %h2, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

//--- wrong-stages.mlir
// Tests a given cut that does not cover the layers.
module {
  model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 1, 1]
  // expected-error @below {{model-pipeline-partition: stage-layers lists 2 stages of 2 layers but there are 2 stages and 3 layers}}
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h0 = model.layer 0 (%e) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h1 = model.layer 1 (%h0) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h2 = model.layer 2 (%h1) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>):
      %r = model.add %x, %x : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %logits = model.linear %h2, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}
