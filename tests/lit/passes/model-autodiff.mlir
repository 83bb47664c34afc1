// RUN: braid-opt %s -split-input-file -model-autodiff -verify-diagnostics | FileCheck %s

// Tests the whole rewrite on a one-layer model whose embedding is tied to
// its output layer: @forward becomes @train_step with a loss_grad input
// last, returning the loss then one gradient per parameter in parameter
// order, each named by model.grad. The layer body (norm, linear, gelu,
// residual add) keeps its forward half and yields, besides its output, the
// two values its backward reads: the linear's output (for gelu_grad) and
// the norm's output (for the weight gradient). The backward layer of the
// same index takes dy, the forward operands and those two, in that order,
// and yields one gradient per forward operand. Values used twice get their
// gradients summed by model.add: the residual stream x inside the layer,
// the tied table outside it.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<8x4xf32> {model.param = "wte"}, %[[G:[^:]+]]: tensor<4xf32> {model.param = "norm"}, %[[U:[^:]+]]: tensor<4x4xf32> {model.param = "up"}
// CHECK-SAME: %[[TOK:[^:]+]]: tensor<1x2xi32> {model.input = "tokens"}, %[[TGT:[^:]+]]: tensor<1x2xi32> {model.input = "targets"}, %[[DL:[^:]+]]: tensor<f32> {model.input = "loss_grad"})
// CHECK-SAME: -> (tensor<f32>, tensor<8x4xf32> {model.grad = "wte"}, tensor<4xf32> {model.grad = "norm"}, tensor<4x4xf32> {model.grad = "up"})
// CHECK: %[[E:.+]] = model.embedding %[[WTE]][%[[TOK]]]
// CHECK: %[[L:.+]]:3 = model.layer 0(%[[E]], %[[G]], %[[U]]) : {{.*}} -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>)
// CHECK: %[[N:.+]] = model.rms_norm
// CHECK-NEXT: %[[Y:.+]] = model.linear %[[N]],
// CHECK-NEXT: %[[A:.+]] = model.gelu %[[Y]]
// CHECK-NEXT: %[[R:.+]] = model.add %{{.+}}, %[[A]]
// CHECK-NEXT: model.yield %[[R]], %[[Y]], %[[N]] :
// CHECK-NEXT: }
// CHECK-NEXT: %[[LOGITS:.+]] = model.linear %[[L]]#0, %[[WTE]] transpose_w
// CHECK-NEXT: %[[LOSS:.+]] = model.cross_entropy %[[LOGITS]], %[[TGT]]
// CHECK-NEXT: %[[DLOGITS:.+]] = model.cross_entropy_grad %[[LOGITS]], %[[TGT]], %[[DL]]
// CHECK-DAG: %[[DH:.+]] = model.linear_grad_input %[[DLOGITS]], %[[WTE]] transpose_w
// CHECK-DAG: %[[HEAD:.+]] = model.linear_grad_weight %[[L]]#0, %[[DLOGITS]] transpose_w
// CHECK: %[[B:.+]]:3 = model.layer 0 backward(%[[DH]], %[[E]], %[[G]], %[[U]], %[[L]]#1, %[[L]]#2) : {{.*}} -> (tensor<1x2x4xf32>, tensor<4xf32>, tensor<4x4xf32>)
// CHECK-NEXT: ^bb0(%[[BDY:[^:]+]]: tensor<1x2x4xf32>, %[[BX:[^:]+]]: tensor<1x2x4xf32>, %[[BG:[^:]+]]: tensor<4xf32>, %[[BU:[^:]+]]: tensor<4x4xf32>, %[[BY:[^:]+]]: tensor<1x2x4xf32>, %[[BN:[^:]+]]: tensor<1x2x4xf32>):
// CHECK-NEXT: %[[DA:.+]] = model.gelu_grad %[[BY]], %[[BDY]]
// CHECK-DAG: %[[DN:.+]] = model.linear_grad_input %[[DA]], %[[BU]] transpose_w
// CHECK-DAG: %[[DU:.+]] = model.linear_grad_weight %[[BN]], %[[DA]] transpose_w
// CHECK: %[[DX:.+]], %[[DG:.+]] = model.rms_norm_grad %[[BX]], %[[BG]], %[[DN]]
// CHECK-NEXT: %[[DXSUM:.+]] = model.add %[[BDY]], %[[DX]]
// CHECK-NEXT: model.yield %[[DXSUM]], %[[DG]], %[[DU]] :
// CHECK: %[[LOOKUP:.+]] = model.embedding_grad %[[B]]#0[%[[TOK]]]
// CHECK-NEXT: %[[TIED:.+]] = model.add %[[HEAD]], %[[LOOKUP]]
// CHECK-NEXT: return %[[LOSS]], %[[TIED]], %[[B]]#1, %[[B]]#2 :
func.func @forward(%wte: tensor<8x4xf32> {model.param = "wte"},
                   %g: tensor<4xf32> {model.param = "norm"},
                   %wu: tensor<4x4xf32> {model.param = "up"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %h = model.layer 0 (%e, %g, %wu) : (tensor<1x2x4xf32>, tensor<4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<4xf32>, %u: tensor<4x4xf32>):
    %n = model.rms_norm %x, %w eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
    %y = model.linear %n, %u transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
    %a = model.gelu %y : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    %r = model.add %x, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    model.yield %r : tensor<1x2x4xf32>
  }
  %logits = model.linear %h, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests that a layer whose backward reads nothing of its forward (a norm
// reads x and its weight, both operands) saves nothing: the forward layer
// keeps its one result and the backward layer takes dy and the operands
// only.
// CHECK-LABEL: func.func @train_step(
// CHECK: %[[E:.+]] = model.embedding
// CHECK-NEXT: %[[H:.+]] = model.layer 0(%[[E]], %{{[^)]+}}) : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
// CHECK: model.yield %{{[^,]+}} : tensor<1x2x4xf32>
// CHECK: %[[DH:.+]] = model.linear_grad_input
// CHECK: model.layer 0 backward(%[[DH]], %[[E]], %{{[^,)]+}}) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<4xf32>) -> (tensor<1x2x4xf32>, tensor<4xf32>)
func.func @forward(%wte: tensor<8x4xf32> {model.param = "wte"},
                   %g: tensor<4xf32> {model.param = "norm"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %h = model.layer 0 (%e, %g) : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<4xf32>):
    %n = model.rms_norm %x, %w eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
    model.yield %n : tensor<1x2x4xf32>
  }
  %logits = model.linear %h, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests that a module without a @forward body is refused.
// expected-error @below {{model-autodiff needs a func.func @forward with a body}}
module {
  func.func private @forward(tensor<1x2xi32>) -> tensor<f32>
}

// -----

// Tests a parameter that does not reach the loss: its only use, a norm
// whose result nothing reads, is not differentiated.
// expected-error @below {{parameter "norm" gets no gradient from the loss}}
func.func @forward(%wte: tensor<8x4xf32> {model.param = "wte"},
                   %g: tensor<4xf32> {model.param = "norm"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %unused = model.rms_norm %e, %g eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
  %logits = model.linear %e, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests an op of several results of which only some reach the loss (the
// keys and values of a split QKV projection are unused).
func.func @forward(%wte: tensor<8x12xf32> {model.param = "wte"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x12xf32>, tensor<1x2xi32>) -> tensor<1x2x12xf32>
  // expected-error @below {{'model.qkv_split' op result 1 gets no gradient while the others do; model-autodiff needs all or none}}
  %q, %k, %v = model.qkv_split %e heads = 1 kv_heads = 1 head_dim = 4 layout = grouped : (tensor<1x2x12xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>)
  %loss = model.cross_entropy %q, %targets ignore_index = -100 : (tensor<1x2x4xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests an op on the path to the loss that has no gradient (a gradient op
// used in a forward graph).
func.func @forward(%wte: tensor<8x4xf32> {model.param = "wte"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'model.gelu_grad' op has no gradient (GradientOpInterface)}}
  %d = model.gelu_grad %e, %e : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  %logits = model.linear %d, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests a forward layer of two results: only the hidden state may leave it.
func.func @forward(%wte: tensor<8x4xf32> {model.param = "wte"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'model.layer' op model-autodiff expects a forward layer with one result, found 2}}
  %h:2 = model.layer 0 (%e) : (tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
  ^bb0(%x: tensor<1x2x4xf32>):
    model.yield %x, %x : tensor<1x2x4xf32>, tensor<1x2x4xf32>
  }
  %logits = model.linear %h#0, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests a layer inside a layer.
func.func @forward(%wte: tensor<8x4xf32> {model.param = "wte"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %h = model.layer 0 (%e) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>):
    // expected-error @below {{'model.layer' op layers cannot nest}}
    %inner = model.layer 1 (%x) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%y: tensor<1x2x4xf32>):
      model.yield %y : tensor<1x2x4xf32>
    }
    model.yield %inner : tensor<1x2x4xf32>
  }
  %logits = model.linear %h, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests a layer operand its body never uses on the way to the layer's
// output (the weight w).
func.func @forward(%wte: tensor<8x4xf32> {model.param = "wte"},
                   %g: tensor<4xf32> {model.param = "norm"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'model.layer' op operand 1 gets no gradient from the layer's body}}
  %h = model.layer 0 (%e, %g) : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<4xf32>):
    model.yield %x : tensor<1x2x4xf32>
  }
  %logits = model.linear %h, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The model of the first test with an untied output layer (head) and two
// parameters marked model.frozen: the embedding table (wte) below the first
// layer and the layer's linear weight (up).
// Tests that a frozen parameter gets no gradient result, and that what
// computes only frozen parameters' gradients is gone: up's weight gradient
// (and the norm's output, saved for it alone: the forward layer saves only
// the linear's output, for gelu_grad), wte's embedding_grad, and the
// hidden state's gradient below layer 0 (it reaches only wte), so that the
// backward layer yields the norm's gradient alone (the lines from the
// backward layer to the return are matched one after the other: no
// linear_grad_weight for up, no embedding_grad after the layer).
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<8x4xf32> {model.frozen, model.param = "wte"}, %[[G:[^:]+]]: tensor<4xf32> {model.param = "norm"}, %[[U:[^:]+]]: tensor<4x4xf32> {model.frozen, model.param = "up"}, %[[HEAD:[^:]+]]: tensor<8x4xf32> {model.param = "head"}
// CHECK-SAME: -> (tensor<f32>, tensor<4xf32> {model.grad = "norm"}, tensor<8x4xf32> {model.grad = "head"})
// CHECK: %[[E:.+]] = model.embedding %[[WTE]]
// CHECK-NEXT: %[[L:.+]]:2 = model.layer 0(%[[E]], %[[G]], %[[U]]) : {{.*}} -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>)
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: model.rms_norm
// CHECK-NEXT: %[[Y:.+]] = model.linear
// CHECK-NEXT: model.gelu %[[Y]]
// CHECK-NEXT: %[[R:.+]] = model.add
// CHECK-NEXT: model.yield %[[R]], %[[Y]] :
// CHECK: %[[DLOGITS:.+]] = model.cross_entropy_grad
// CHECK-DAG: %[[DH:.+]] = model.linear_grad_input %[[DLOGITS]], %[[HEAD]] transpose_w
// CHECK-DAG: %[[DHEAD:.+]] = model.linear_grad_weight %[[L]]#0, %[[DLOGITS]] transpose_w
// CHECK: %[[B:.+]] = model.layer 0 backward(%[[DH]], %[[E]], %[[G]], %[[U]], %[[L]]#1) : {{.*}} -> tensor<4xf32>
// CHECK-NEXT: ^bb0(%[[BDY:[^:]+]]: tensor<1x2x4xf32>, %[[BX:[^:]+]]: tensor<1x2x4xf32>, %[[BG:[^:]+]]: tensor<4xf32>, %[[BU:[^:]+]]: tensor<4x4xf32>, %[[BY:[^:]+]]: tensor<1x2x4xf32>):
// CHECK-NEXT: %[[DA:.+]] = model.gelu_grad %[[BY]], %[[BDY]]
// CHECK-NEXT: %[[DN:.+]] = model.linear_grad_input %[[DA]], %[[BU]] transpose_w
// CHECK-NEXT: %{{.+}}, %[[DG:.+]] = model.rms_norm_grad %[[BX]], %[[BG]], %[[DN]]
// CHECK-NEXT: model.yield %[[DG]] : tensor<4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %{{[^,]+}}, %[[B]], %[[DHEAD]] :
func.func @forward(%wte: tensor<8x4xf32> {model.frozen, model.param = "wte"},
                   %g: tensor<4xf32> {model.param = "norm"},
                   %wu: tensor<4x4xf32> {model.frozen, model.param = "up"},
                   %head: tensor<8x4xf32> {model.param = "head"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %h = model.layer 0 (%e, %g, %wu) : (tensor<1x2x4xf32>, tensor<4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<4xf32>, %u: tensor<4x4xf32>):
    %n = model.rms_norm %x, %w eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
    %y = model.linear %n, %u transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
    %a = model.gelu %y : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    %r = model.add %x, %a : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    model.yield %r : tensor<1x2x4xf32>
  }
  %logits = model.linear %h, %head transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}
