// RUN: braid-opt %s -split-input-file -model-verify-forward -verify-diagnostics --allow-unregistered-dialect | FileCheck %s

// Tests that a minimal forward module (mesh, embedding, two chained layers, tied head, loss) passes unchanged.
// CHECK: model.mesh @mesh axes = ["dp"] sizes = [1]
model.mesh @mesh axes = ["dp"] sizes = [1]
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[TOKENS:.+]]: tensor<2x16xi32> {model.input = "tokens"}, %[[TARGETS:.+]]: tensor<2x16xi32> {model.input = "targets"}, %[[WTE:.+]]: tensor<512x64xf32> {model.param = "wte"}, %[[G0:.+]]: tensor<64xf32> {model.param = "h.0.ln"}, %[[G1:.+]]: tensor<64xf32> {model.param = "h.1.ln"})
// CHECK-SAME: -> tensor<f32>
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"},
                   %g0: tensor<64xf32> {model.param = "h.0.ln"},
                   %g1: tensor<64xf32> {model.param = "h.1.ln"}) -> tensor<f32> {
  // CHECK: %[[E:.+]] = model.embedding %[[WTE]][%[[TOKENS]]]
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // CHECK: %[[H0:.+]] = model.layer 0(%[[E]], %[[G0]])
  %h0 = model.layer 0 (%e, %g0) : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32> {
  ^bb0(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>):
    %n = model.rms_norm %x, %w eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    model.yield %n : tensor<2x16x64xf32>
  }
  // CHECK: %[[H1:.+]] = model.layer 1(%[[H0]], %[[G1]])
  %h1 = model.layer 1 (%h0, %g1) : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32> {
  ^bb0(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>):
    %n = model.rms_norm %x, %w eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    model.yield %n : tensor<2x16x64xf32>
  }
  // CHECK: %[[LOGITS:.+]] = model.linear %[[H1]], %[[WTE]] transpose_w
  %logits = model.linear %h1, %wte transpose_w : (tensor<2x16x64xf32>, tensor<512x64xf32>) -> tensor<2x16x512xf32>
  // CHECK: %[[LOSS:.+]] = model.cross_entropy %[[LOGITS]], %[[TARGETS]] ignore_index = -100
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
  // CHECK: return %[[LOSS]] : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F1: the module holds no function besides @forward.
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %logits = model.linear %e, %wte transpose_w : (tensor<2x16x64xf32>, tensor<512x64xf32>) -> tensor<2x16x512xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
// expected-error @+1 {{the forward module must hold exactly one function, @forward, with a body; found @f1_extra_function}}
func.func @f1_extra_function() {
  return
}

// -----

// Tests F2: tokens and targets are integer tensors of one shape [batch, seq].
// expected-error @+1 {{tokens and targets must be integer tensors of one shape [batch, seq], found 'tensor<2x16xi32>' and 'tensor<2x8xi32>'}}
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x8xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%targets] : (tensor<512x64xf32>, tensor<2x8xi32>) -> tensor<2x8x64xf32>
  %loss = model.cross_entropy %e, %targets ignore_index = -100 : (tensor<2x8x64xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F3: @forward returns the loss as a rank-0 tensor, not per-position losses.
// expected-error @+1 {{@forward must return one rank-0 float loss, found '(tensor<2x16xi32>, tensor<2x16xi32>, tensor<512x64xf32>) -> tensor<2x16x64xf32>'}}
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<2x16x64xf32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  return %e : tensor<2x16x64xf32>
}

// -----

// Tests F4: each layer's first operand is the previous layer's result.
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // expected-note @+1 {{previous layer}}
  %h0 = model.layer 0 (%e) : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  ^bb0(%x: tensor<2x16x64xf32>):
    model.yield %x : tensor<2x16x64xf32>
  }
  // expected-error @+1 {{layer 1 must take the previous layer's result as its first operand}}
  %h1 = model.layer 1 (%e, %h0) : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  ^bb0(%x: tensor<2x16x64xf32>, %y: tensor<2x16x64xf32>):
    model.yield %y : tensor<2x16x64xf32>
  }
  %logits = model.linear %h1, %wte transpose_w : (tensor<2x16x64xf32>, tensor<512x64xf32>) -> tensor<2x16x512xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F5: the forward graph holds only model ops (and the final func.return).
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // expected-error @+1 {{the forward graph may hold only model ops, found builtin.unrealized_conversion_cast}}
  %loss = builtin.unrealized_conversion_cast %e : tensor<2x16x64xf32> to tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F5 on an op of an unregistered dialect, which has no dialect object (regression: the pass crashed).
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // expected-error @+1 {{the forward graph may hold only model ops, found torch.mean}}
  %loss = "torch.mean"(%e) : (tensor<2x16x64xf32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F6: every parameter is used.
// expected-error @+1 {{parameter "h.0.ln" (argument 3) is unused}}
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"},
                   %g0: tensor<64xf32> {model.param = "h.0.ln"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %logits = model.linear %e, %wte transpose_w : (tensor<2x16x64xf32>, tensor<512x64xf32>) -> tensor<2x16x512xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F1: a declaration of @forward (no body) is not a forward graph.
// expected-error @+1 {{with a body; found @forward without a body}}
func.func private @forward(tensor<2x8xi32> {model.input = "tokens"}, tensor<2x8xi32> {model.input = "targets"}) -> tensor<f32>

// -----

// Tests F1: an op other than a function or a mesh at the top of the module.
// expected-error @below {{the forward module may hold only model.mesh and func.func @forward, found test.global}}
"test.global"() : () -> ()
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %loss = model.cross_entropy %e, %targets ignore_index = -100 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F1: a module of a mesh only.
// expected-error @below {{the forward module has no func.func @forward}}
module {
  model.mesh @mesh axes = ["dp"] sizes = [1]
}

// -----

// Tests F2: an argument that is neither a parameter nor an input.
// expected-error @below {{argument 2 must carry exactly one of model.param and model.input}}
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32>) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %loss = model.cross_entropy %e, %targets ignore_index = -100 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F2: an argument that claims to be both.
// expected-error @below {{argument 2 must carry exactly one of model.param and model.input}}
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte", model.input = "lr"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %loss = model.cross_entropy %e, %targets ignore_index = -100 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F2: parameter names are unique.
// expected-error @below {{parameter "wte" is an argument more than once}}
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"},
                   %head: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %logits = model.linear %e, %head transpose_w : (tensor<2x16x64xf32>, tensor<512x64xf32>) -> tensor<2x16x512xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F2: one tokens input only.
// expected-error @below {{more than one argument is the "tokens" input}}
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %more: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %loss = model.cross_entropy %e, %targets ignore_index = -100 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F2: the targets input is required.
// expected-error @below {{@forward needs one "tokens" and one "targets" input}}
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %loss = model.cross_entropy %e, %tokens ignore_index = -100 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests F4: layer indices follow program order from 0.
func.func @forward(%tokens: tensor<2x16xi32> {model.input = "tokens"},
                   %targets: tensor<2x16xi32> {model.input = "targets"},
                   %wte: tensor<512x64xf32> {model.param = "wte"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // expected-error @below {{layer index is 1 but layer 0 comes next in program order}}
  %h = model.layer 1 (%e) : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  ^bb0(%x: tensor<2x16x64xf32>):
    model.yield %x : tensor<2x16x64xf32>
  }
  %loss = model.cross_entropy %h, %targets ignore_index = -100 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
