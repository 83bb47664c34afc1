// RUN: braidc --preset tiny-llama --seq-len 8 --compile-to=autodiff | FileCheck %s

// Tests that @forward becomes @train_step: a loss_grad input, the loss and one
// gradient per parameter out, each naming its parameter; every forward layer
// yields its hidden state plus the activations its backward uses, and the
// backward layers run in reverse layer order, each fed the previous one's
// hidden-state gradient.

// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: model.param = "model.embed_tokens.weight"
// CHECK-SAME: {model.input = "tokens"}
// CHECK-SAME: {model.input = "targets"}
// CHECK-SAME: %[[DLOSS:[^:]+]]: tensor<f32> {model.input = "loss_grad"})
// CHECK-SAME: -> (tensor<f32>, tensor<512x64xf32> {model.grad = "model.embed_tokens.weight"}
// CHECK-SAME: tensor<64x176xf32> {model.grad = "model.layers.1.mlp.down_proj.weight"}
// CHECK-SAME: tensor<64xf32> {model.grad = "model.norm.weight"}, tensor<512x64xf32> {model.grad = "lm_head.weight"})
// CHECK: %[[E:.+]] = model.embedding
// CHECK: %[[L0:.+]]:[[N0:[0-9]+]] = model.layer 0(%[[E]],
// CHECK: %[[L1:.+]]:{{[0-9]+}} = model.layer 1(%[[L0]]#0,
// CHECK: %[[LOSS:.+]] = model.cross_entropy
// CHECK: model.cross_entropy_grad {{.*}}, %[[DLOSS]] ignore_index = -100
// CHECK: %[[B1:.+]]:10 = model.layer 1 backward(%{{[^,]+}}, %[[L0]]#0, {{.*}}, %[[L1]]#1,
// CHECK: model.attention_grad
// CHECK: model.rms_norm_grad
// CHECK: model.yield
// CHECK: %[[B0:.+]]:10 = model.layer 0 backward(%[[B1]]#0, %[[E]], {{.*}}, %[[L0]]#1,
// CHECK: %[[DE:.+]] = model.embedding_grad %[[B0]]#0[
// CHECK: return %[[LOSS]], %[[DE]], %[[B0]]#1,

// RUN: braidc --preset tiny-gpt2 --seq-len 8 --compile-to=autodiff | FileCheck %s --check-prefix=TIED

// Tests that a tied embedding gets one gradient, the sum of the output
// layer's weight gradient and the lookup's gradient.
// TIED-LABEL: func.func @train_step(
// TIED: %[[HEAD:.+]] = model.linear_grad_weight {{.*}} transpose_w : {{.*}} -> tensor<512x64xf32>
// TIED: %[[LOOKUP:.+]] = model.embedding_grad
// TIED: %[[SUM:.+]] = model.add %[[HEAD]], %[[LOOKUP]]
// TIED: return %{{[^,]+}}, %[[SUM]],

// Tests that model-autodiff's output for a whole model meets the contract
// model-verify-train-step checks.
// RUN: braidc --preset tiny-llama --seq-len 8 --compile-to=autodiff | braid-opt -model-verify-train-step | FileCheck %s --check-prefix=VERIFIED
// VERIFIED-LABEL: func.func @train_step(
// VERIFIED: model.layer 1 backward
// VERIFIED: model.layer 0 backward
