// RUN: braidc --preset tiny-gpt2 --seq-len 16 --micro-batch-size 2 | FileCheck %s
// RUN: braidc --preset tiny-gpt2 --seq-len 16 --micro-batch-size 2 | FileCheck %s --check-prefix=PARAMS

// Tests the whole forward graph that the GPT-2 frontend builds for the
// tiny-gpt2 preset, against the layout of a Hugging Face GPT2LMHeadModel
// checkpoint.
//
// The shapes, derived from the architecture (not from braidc's output):
//   2 layers, n_embd h = 64, 4 heads, head_dim = 64 / 4 = 16, n_inner = 4h = 256,
//   vocab 512, n_positions 128, LayerNorm (weight and bias) eps 1e-5,
//   gelu_new (tanh), biases everywhere, lm_head tied to wte, no dropout.
//   wte: [vocab, h] = [512, 64]; wpe: [n_positions, h] = [128, 64].
//   GPT-2 uses Conv1D, which stores its weight [in, out] (y = x W + b), so no
//   linear of a layer uses transpose_w:
//   attn.c_attn: Conv1D(3h, h) -> weight [64, 3 * 64] = [64, 192], bias [192]
//   attn.c_proj: Conv1D(h, h)  -> weight [64, 64], bias [64]
//   mlp.c_fc:    Conv1D(4h, h) -> weight [64, 256], bias [256]
//   mlp.c_proj:  Conv1D(h, 4h) -> weight [256, 64], bias [64]
//   c_attn's output is [q | k | v] (split(n_embd, dim=2)): the grouped layout.
//   The tied output layer multiplies by wte [512, 64] transposed.
//   Attention scale: 1 / sqrt(16) = 0.25.

// Tests that @forward has exactly the parameters of the checkpoint: wte, wpe,
// 12 per layer (ln_1 w/b, c_attn w/b, attn.c_proj w/b, ln_2 w/b, c_fc w/b,
// mlp.c_proj w/b) and ln_f w/b: 2 + 2 * 12 + 2 = 28, and no lm_head.weight.
// PARAMS-COUNT-28: {model.param = "transformer.
// PARAMS-NOT: model.param

// Tests that @forward takes every parameter under its checkpoint name and
// shape, then the tokens and targets.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:.+]]: tensor<512x64xf32> {model.param = "transformer.wte.weight"},
// CHECK-SAME: %[[WPE:.+]]: tensor<128x64xf32> {model.param = "transformer.wpe.weight"},
// CHECK-SAME: %[[L0_LN1W:.+]]: tensor<64xf32> {model.param = "transformer.h.0.ln_1.weight"},
// CHECK-SAME: %[[L0_LN1B:.+]]: tensor<64xf32> {model.param = "transformer.h.0.ln_1.bias"},
// CHECK-SAME: %[[L0_QKVW:.+]]: tensor<64x192xf32> {model.param = "transformer.h.0.attn.c_attn.weight"},
// CHECK-SAME: %[[L0_QKVB:.+]]: tensor<192xf32> {model.param = "transformer.h.0.attn.c_attn.bias"},
// CHECK-SAME: %[[L0_OW:.+]]: tensor<64x64xf32> {model.param = "transformer.h.0.attn.c_proj.weight"},
// CHECK-SAME: %[[L0_OB:.+]]: tensor<64xf32> {model.param = "transformer.h.0.attn.c_proj.bias"},
// CHECK-SAME: %[[L0_LN2W:.+]]: tensor<64xf32> {model.param = "transformer.h.0.ln_2.weight"},
// CHECK-SAME: %[[L0_LN2B:.+]]: tensor<64xf32> {model.param = "transformer.h.0.ln_2.bias"},
// CHECK-SAME: %[[L0_FCW:.+]]: tensor<64x256xf32> {model.param = "transformer.h.0.mlp.c_fc.weight"},
// CHECK-SAME: %[[L0_FCB:.+]]: tensor<256xf32> {model.param = "transformer.h.0.mlp.c_fc.bias"},
// CHECK-SAME: %[[L0_PW:.+]]: tensor<256x64xf32> {model.param = "transformer.h.0.mlp.c_proj.weight"},
// CHECK-SAME: %[[L0_PB:.+]]: tensor<64xf32> {model.param = "transformer.h.0.mlp.c_proj.bias"},
// CHECK-SAME: %[[L1_LN1W:.+]]: tensor<64xf32> {model.param = "transformer.h.1.ln_1.weight"},
// CHECK-SAME: %[[L1_LN1B:.+]]: tensor<64xf32> {model.param = "transformer.h.1.ln_1.bias"},
// CHECK-SAME: %[[L1_QKVW:.+]]: tensor<64x192xf32> {model.param = "transformer.h.1.attn.c_attn.weight"},
// CHECK-SAME: %[[L1_QKVB:.+]]: tensor<192xf32> {model.param = "transformer.h.1.attn.c_attn.bias"},
// CHECK-SAME: %[[L1_OW:.+]]: tensor<64x64xf32> {model.param = "transformer.h.1.attn.c_proj.weight"},
// CHECK-SAME: %[[L1_OB:.+]]: tensor<64xf32> {model.param = "transformer.h.1.attn.c_proj.bias"},
// CHECK-SAME: %[[L1_LN2W:.+]]: tensor<64xf32> {model.param = "transformer.h.1.ln_2.weight"},
// CHECK-SAME: %[[L1_LN2B:.+]]: tensor<64xf32> {model.param = "transformer.h.1.ln_2.bias"},
// CHECK-SAME: %[[L1_FCW:.+]]: tensor<64x256xf32> {model.param = "transformer.h.1.mlp.c_fc.weight"},
// CHECK-SAME: %[[L1_FCB:.+]]: tensor<256xf32> {model.param = "transformer.h.1.mlp.c_fc.bias"},
// CHECK-SAME: %[[L1_PW:.+]]: tensor<256x64xf32> {model.param = "transformer.h.1.mlp.c_proj.weight"},
// CHECK-SAME: %[[L1_PB:.+]]: tensor<64xf32> {model.param = "transformer.h.1.mlp.c_proj.bias"},
// CHECK-SAME: %[[LNFW:.+]]: tensor<64xf32> {model.param = "transformer.ln_f.weight"},
// CHECK-SAME: %[[LNFB:.+]]: tensor<64xf32> {model.param = "transformer.ln_f.bias"},
// CHECK-NOT: lm_head.weight
// CHECK-SAME: %[[TOKENS:.+]]: tensor<2x16xi32> {model.input = "tokens"},
// CHECK-SAME: %[[TARGETS:.+]]: tensor<2x16xi32> {model.input = "targets"})
// CHECK-SAME: -> tensor<f32> {

// Tests that learned positions (wpe, indexed by position) are added to the
// token embedding, with no dropout after them.
// CHECK-NEXT: %[[TOK:.+]] = model.embedding %[[WTE]][%[[TOKENS]]] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[POS:.+]] = model.position_embedding %[[WPE]] for %[[TOKENS]] : (tensor<128x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[E:.+]] = model.add %[[TOK]], %[[POS]] : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>

// Tests that layer 0 takes the embedding and its twelve parameters, in order.
// CHECK-NEXT: %[[H0:.+]] = model.layer 0(%[[E]], %[[L0_LN1W]], %[[L0_LN1B]], %[[L0_QKVW]], %[[L0_QKVB]], %[[L0_OW]], %[[L0_OB]], %[[L0_LN2W]], %[[L0_LN2B]], %[[L0_FCW]], %[[L0_FCB]], %[[L0_PW]], %[[L0_PB]])
// CHECK-SAME: -> tensor<2x16x64xf32> {
// CHECK-NEXT: ^bb0(%[[X:.+]]: tensor<2x16x64xf32>, %[[LN1W:.+]]: tensor<64xf32>, %[[LN1B:.+]]: tensor<64xf32>, %[[QKVW:.+]]: tensor<64x192xf32>, %[[QKVB:.+]]: tensor<192xf32>, %[[OW:.+]]: tensor<64x64xf32>, %[[OB:.+]]: tensor<64xf32>, %[[LN2W:.+]]: tensor<64xf32>, %[[LN2B:.+]]: tensor<64xf32>, %[[FCW:.+]]: tensor<64x256xf32>, %[[FCB:.+]]: tensor<256xf32>, %[[PW:.+]]: tensor<256x64xf32>, %[[PB:.+]]: tensor<64xf32>):

// Tests the attention half of layer 0: ln_1 with its bias, the fused c_attn
// Conv1D (no transpose_w) with its bias, the grouped q|k|v split, causal
// attention with no ALiBi and no attention dropout, c_proj with its bias, and
// the residual add of the layer input with no dropout.
// CHECK-NEXT: %[[A:.+]] = model.layer_norm %[[X]], %[[LN1W]], %[[LN1B]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[QKV:.+]] = model.linear %[[A]], %[[QKVW]], %[[QKVB]] : (tensor<2x16x64xf32>, tensor<64x192xf32>, tensor<192xf32>) -> tensor<2x16x192xf32>
// CHECK-NEXT: %[[Q:.+]], %[[K:.+]], %[[V:.+]] = model.qkv_split %[[QKV]] heads = 4 kv_heads = 4 head_dim = 16 layout = grouped : (tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
// CHECK-NEXT: %[[ATT:.+]] = model.attention %[[Q]], %[[K]], %[[V]] heads = 4 kv_heads = 4 scale = 2.500000e-01 causal : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[O:.+]] = model.linear %[[ATT]], %[[OW]], %[[OB]] : (tensor<2x16x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[R1:.+]] = model.add %[[X]], %[[O]] : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>

// Tests the MLP half of layer 0: ln_2, c_fc (Conv1D, [64, 256]), tanh GeLU,
// c_proj (Conv1D, [256, 64]) and the residual add, with no dropout.
// CHECK-NEXT: %[[M:.+]] = model.layer_norm %[[R1]], %[[LN2W]], %[[LN2B]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[FC:.+]] = model.linear %[[M]], %[[FCW]], %[[FCB]] : (tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32>
// CHECK-NEXT: %[[ACT:.+]] = model.gelu %[[FC]] tanh : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
// CHECK-NEXT: %[[P:.+]] = model.linear %[[ACT]], %[[PW]], %[[PB]] : (tensor<2x16x256xf32>, tensor<256x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[R2:.+]] = model.add %[[R1]], %[[P]] : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: model.yield %[[R2]] : tensor<2x16x64xf32>
// CHECK-NEXT: }

// Tests that layer 1 takes layer 0's result and its own twelve parameters.
// CHECK-NEXT: %[[H1:.+]] = model.layer 1(%[[H0]], %[[L1_LN1W]], %[[L1_LN1B]], %[[L1_QKVW]], %[[L1_QKVB]], %[[L1_OW]], %[[L1_OB]], %[[L1_LN2W]], %[[L1_LN2B]], %[[L1_FCW]], %[[L1_FCB]], %[[L1_PW]], %[[L1_PB]])
// CHECK-SAME: -> tensor<2x16x64xf32> {
// CHECK-NOT: model.dropout
// CHECK: model.yield
// CHECK-NEXT: }

// Tests ln_f and the tied output layer: the wte table, [512, 64], transposed
// (it is stored [vocab, hidden] like an nn.Linear weight), and the loss.
// CHECK-NEXT: %[[F:.+]] = model.layer_norm %[[H1]], %[[LNFW]], %[[LNFB]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[LOGITS:.+]] = model.linear %[[F]], %[[WTE]] transpose_w : (tensor<2x16x64xf32>, tensor<512x64xf32>) -> tensor<2x16x512xf32>
// CHECK-NEXT: %[[LOSS:.+]] = model.cross_entropy %[[LOGITS]], %[[TARGETS]] ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// CHECK-NEXT: }
