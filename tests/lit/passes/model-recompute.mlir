// RUN: split-file %s %t
// RUN: braid-opt %t/step.mlir -model-recompute | FileCheck %s --check-prefix=NONE
// RUN: braid-opt %t/step.mlir -model-recompute=mode=selective | FileCheck %s --check-prefix=SEL
// RUN: braid-opt %t/step.mlir -model-recompute=mode=full | FileCheck %s --check-prefix=FULL
// RUN: braid-opt %t/step.mlir -model-recompute="mode=levels levels=1" | FileCheck %s --check-prefix=LEVEL1
// RUN: braid-opt %t/step.mlir -model-recompute="mode=levels levels=2" | FileCheck %s --check-prefix=LEVEL2
// RUN: braid-opt %t/bad-mode.mlir -model-recompute=mode=some -verify-diagnostics
// RUN: braid-opt %t/levels-count.mlir -model-recompute="mode=levels levels=0,0" -verify-diagnostics
// RUN: braid-opt %t/levels-range.mlir -model-recompute="mode=levels levels=2" -verify-diagnostics
// RUN: braid-opt %t/pairs.mlir -split-input-file -model-recompute -verify-diagnostics | FileCheck %s --check-prefix=PAIRS

// step.mlir: one layer after model-autodiff, on a one-stage pipeline. The
// forward layer (norm n, linear y, gelu, residual add) saves y (for
// gelu_grad) and n (for the weight gradient), 32 bytes each; its input x
// is 32 bytes too (the parameters are not counted).

// Tests mode none: everything is kept, nothing recomputed, and the module
// reports it (the kept values by the op that makes them); the stage's
// recomputation is 0.
// NONE: module attributes {model.pipeline = [{{{.*}}recompute_flops = 0.000000e+00 : f64}], model.recompute = [{choice = "none", input_bytes = 32 : i64, kept = ["model.linear", "model.rms_norm"], kept_bytes = 64 : i64, layer = 0 : i64, recompute_flops = 0.000000e+00 : f64, recomputed = [], saved_bytes = 64 : i64}]}
// NONE: model.layer 0({{.*}} -> ({{.*}}, {{.*}}, {{.*}})
// NONE-NOT: model.recomputed

// Tests mode selective: the norm's output needs no matrix product to be
// made again, the linear's does. The forward layer stops yielding n; the
// backward layer loses that operand and starts by recomputing n from its
// own copies of x and the norm weight.
// SEL: model.recompute = [{choice = "selective", input_bytes = 32 : i64, kept = ["model.linear"], kept_bytes = 32 : i64, layer = 0 : i64, recompute_flops = {{[1-9].*}}, recomputed = ["model.rms_norm"], saved_bytes = 64 : i64}]
// SEL: %[[F:.+]]:2 = model.layer 0(%[[X:[^,]+]], %[[G:[^,]+]], %[[U:[^)]+]])
// SEL: %[[N:.+]] = model.rms_norm
// SEL-NEXT: %[[Y:.+]] = model.linear %[[N]],
// SEL: model.yield %{{[^,]+}}, %[[Y]] :
// SEL: model.layer 0 backward(%{{[^,]+}}, %[[X]], %[[G]], %[[U]], %[[F]]#1) {model.stage = 0 : i64} :
// SEL-NEXT: ^bb0(%[[DY:[^:]+]]: {{[^,]+}}, %[[BX:[^:]+]]: {{[^,]+}}, %[[BG:[^:]+]]: {{[^,]+}}, %[[BU:[^:]+]]: {{[^,]+}}, %[[BY:[^:]+]]: {{[^)]+}}):
// SEL-NEXT: %[[RN:.+]] = model.rms_norm %[[BX]], %[[BG]] {{.*}} {model.recomputed}
// SEL-NEXT: %[[DA:.+]] = model.gelu_grad %[[BY]], %[[DY]]
// SEL-NOT: model.recomputed
// SEL: model.linear_grad_weight %[[RN]], %[[DA]]
// SEL-NOT: model.recomputed

// Tests mode full: only the layer's inputs are kept; the backward
// recomputes the norm and the linear, in program order, from its inputs.
// The stage's cost grows by the layer's recomputation.
// FULL: module attributes {model.pipeline = [{{{.*}}recompute_flops = [[FLOPS:[0-9.e+]+]] : f64}], model.recompute = [{choice = "full", input_bytes = 32 : i64, kept = [], kept_bytes = 0 : i64, layer = 0 : i64, recompute_flops = [[FLOPS]] : f64, recomputed = ["model.linear", "model.rms_norm"], saved_bytes = 64 : i64}]}
// FULL: %{{.+}} = model.layer 0({{.*}}) {model.stage = 0 : i64} : ({{.*}}) -> tensor<1x2x4xf32> {
// FULL: model.layer 0 backward(%{{[^,]+}}, %{{[^,]+}}, %{{[^,]+}}, %{{[^,)]+}}) {model.stage = 0 : i64} :
// FULL-NEXT: ^bb0(%{{[^:]+}}: {{[^,]+}}, %[[BX:[^:]+]]: {{[^,]+}}, %[[BG:[^:]+]]: {{[^,]+}}, %[[BU:[^:]+]]: {{[^)]+}}):
// FULL-NEXT: %[[RN:.+]] = model.rms_norm %[[BX]], %[[BG]] {{.*}} {model.recomputed}
// FULL-NEXT: %[[RY:.+]] = model.linear %[[RN]], %[[BU]] transpose_w {model.recomputed}
// FULL-NEXT: model.gelu_grad %[[RY]],
// FULL-NOT: model.recomputed

// Tests mode levels: level 0 keeps both values, the last (2) neither; level
// 1 drops the one whose recomputation costs the fewest FLOPs per byte
// freed, the norm's (a few FLOPs an element against a 4-wide dot product).
// LEVEL1: model.recompute = [{choice = "level 1 of 2", {{.*}} kept = ["model.linear"], kept_bytes = 32 : i64, {{.*}} recomputed = ["model.rms_norm"],
// LEVEL1: model.rms_norm {{.*}} {model.recomputed}
// LEVEL1-NOT: model.recomputed
// LEVEL2: model.recompute = [{choice = "level 2 of 2", {{.*}} kept = [], kept_bytes = 0 : i64, {{.*}} recomputed = ["model.linear", "model.rms_norm"],

//--- step.mlir
module attributes {model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = 1.000000e+03 : f64, num_layers = 1 : i64, rank = 0 : i64}]} {
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"}, %g: tensor<4xf32> {model.param = "norm"}, %u: tensor<4x4xf32> {model.param = "up"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %targets: tensor<1x2xi32> {model.input = "targets"}, %dl: tensor<f32> {model.input = "loss_grad"}) -> (tensor<f32>, tensor<8x4xf32> {model.grad = "wte"}, tensor<4xf32> {model.grad = "norm"}, tensor<4x4xf32> {model.grad = "up"}) {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %f:3 = model.layer 0 (%e, %g, %u) {model.stage = 0 : i64} : (tensor<1x2x4xf32>, tensor<4xf32>, tensor<4x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
    ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<4xf32>, %wu: tensor<4x4xf32>):
      %n = model.rms_norm %x, %w eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
      %y = model.linear %n, %wu transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
      %a = model.gelu %y : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r, %y, %n : tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>
    }
    %logits = model.linear %f#0, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    %dlogits = model.cross_entropy_grad %logits, %targets, %dl ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>, tensor<f32>) -> tensor<1x2x8xf32>
    %dh = model.linear_grad_input %dlogits, %wte transpose_w : (tensor<1x2x8xf32>, tensor<8x4xf32>) -> tensor<1x2x4xf32>
    %ghead = model.linear_grad_weight %f#0, %dlogits transpose_w : (tensor<1x2x4xf32>, tensor<1x2x8xf32>) -> tensor<8x4xf32>
    %b:3 = model.layer 0 backward(%dh, %e, %g, %u, %f#1, %f#2) {model.stage = 0 : i64} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<4xf32>, tensor<4x4xf32>) {
    ^bb0(%dy: tensor<1x2x4xf32>, %x: tensor<1x2x4xf32>, %w: tensor<4xf32>, %wu: tensor<4x4xf32>, %y: tensor<1x2x4xf32>, %n: tensor<1x2x4xf32>):
      %da = model.gelu_grad %y, %dy : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      %dn = model.linear_grad_input %da, %wu transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
      %gu = model.linear_grad_weight %n, %da transpose_w : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<4x4xf32>
      %dx, %gw = model.rms_norm_grad %x, %w, %dn eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<4xf32>)
      %dsum = model.add %dy, %dx : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %dsum, %gw, %gu : tensor<1x2x4xf32>, tensor<4xf32>, tensor<4x4xf32>
    }
    %glookup = model.embedding_grad %b#0[%tokens] : (tensor<1x2x4xf32>, tensor<1x2xi32>) -> tensor<8x4xf32>
    %gwte = model.add %ghead, %glookup : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    return %loss, %gwte, %b#1, %b#2 : tensor<f32>, tensor<8x4xf32>, tensor<4xf32>, tensor<4x4xf32>
  }
}

//--- bad-mode.mlir
// Tests a mode that is not one of the four.
// expected-error @below {{model-recompute: mode "some" is not one of none, selective, full, levels}}
module {
  func.func @train_step() {
    return
  }
}

//--- levels-count.mlir
// Tests levels for two layers on a step of one differentiated layer.
// expected-error @below {{model-recompute: levels has 2 entries but the step has 1 differentiated layers}}
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
    %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %f:2 = model.layer 0 (%x) : (tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
    ^bb0(%a: tensor<1x2x4xf32>):
      %s = model.add %a, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %s, %s : tensor<1x2x4xf32>, tensor<1x2x4xf32>
    }
    %b = model.layer 0 backward(%f#0, %x, %f#1) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%arg0: tensor<1x2x4xf32>, %arg1: tensor<1x2x4xf32>, %arg2: tensor<1x2x4xf32>):
      model.yield %arg0 : tensor<1x2x4xf32>
    }
    return %b : tensor<1x2x4xf32>
  }
}

//--- levels-range.mlir
// Tests a level past the last (one saved value: levels 0 and 1).
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
    %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    // expected-error @below {{'model.layer' op model-recompute: level 2 is not in [0, 2)}}
    %f:2 = model.layer 0 (%x) : (tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
    ^bb0(%a: tensor<1x2x4xf32>):
      %s = model.add %a, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %s, %s : tensor<1x2x4xf32>, tensor<1x2x4xf32>
    }
    %b = model.layer 0 backward(%f#0, %x, %f#1) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%arg0: tensor<1x2x4xf32>, %arg1: tensor<1x2x4xf32>, %arg2: tensor<1x2x4xf32>):
      model.yield %arg0 : tensor<1x2x4xf32>
    }
    return %b : tensor<1x2x4xf32>
  }
}

//--- pairs.mlir
// Tests the layout model-autodiff makes, which the pass relies on: the
// backward layer of index i takes dy, the forward layer's operands and its
// saved activations (its results after the first).

// Tests a module without @train_step.
// expected-error @below {{model-recompute needs func.func @train_step (after model-autodiff)}}
module {
  func.func @forward() {
    return
  }
}

// -----

// Tests a backward layer that does not take the saved activation.
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
    %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %f:2 = model.layer 0 (%x) : (tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
    ^bb0(%a: tensor<1x2x4xf32>):
      %s = model.add %a, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %s, %s : tensor<1x2x4xf32>, tensor<1x2x4xf32>
    }
    // expected-error @below {{'model.layer' op has 2 operands; model-recompute expects dy, the forward layer's 1 operands and its 1 saved activations}}
    %b = model.layer 0 backward(%f#0, %x) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%arg0: tensor<1x2x4xf32>, %arg1: tensor<1x2x4xf32>):
      model.yield %arg0 : tensor<1x2x4xf32>
    }
    return %b : tensor<1x2x4xf32>
  }
}

// -----

// Tests a backward layer whose second operand is not the forward layer's
// first.
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
    %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %f:2 = model.layer 0 (%x) : (tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
    ^bb0(%a: tensor<1x2x4xf32>):
      %s = model.add %a, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %s, %s : tensor<1x2x4xf32>, tensor<1x2x4xf32>
    }
    // expected-error @below {{'model.layer' op operand 1 is not operand 0 of forward layer 0}}
    %b = model.layer 0 backward(%f#0, %f#0, %f#1) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%arg0: tensor<1x2x4xf32>, %arg1: tensor<1x2x4xf32>, %arg2: tensor<1x2x4xf32>):
      model.yield %arg0 : tensor<1x2x4xf32>
    }
    return %b : tensor<1x2x4xf32>
  }
}

// -----

// Tests a backward layer whose last operand is not the saved activation.
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
    %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %f:2 = model.layer 0 (%x) : (tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
    ^bb0(%a: tensor<1x2x4xf32>):
      %s = model.add %a, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %s, %s : tensor<1x2x4xf32>, tensor<1x2x4xf32>
    }
    // expected-error @below {{'model.layer' op operand 2 is not result 1 of forward layer 0}}
    %b = model.layer 0 backward(%f#0, %x, %x) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%arg0: tensor<1x2x4xf32>, %arg1: tensor<1x2x4xf32>, %arg2: tensor<1x2x4xf32>):
      model.yield %arg0 : tensor<1x2x4xf32>
    }
    return %b : tensor<1x2x4xf32>
  }
}

// -----

// Tests that a forward layer without a backward layer (never
// differentiated) saves nothing and is left alone.
// PAIRS: module attributes {model.recompute = []}
// PAIRS: model.layer 0(
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
    %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %f = model.layer 0 (%x) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%a: tensor<1x2x4xf32>):
      model.yield %a : tensor<1x2x4xf32>
    }
    return %f : tensor<1x2x4xf32>
  }
}
