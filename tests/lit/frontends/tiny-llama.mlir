// RUN: braidc --preset tiny-llama --seq-len 16 --micro-batch-size 2 | FileCheck %s
// RUN: braidc --preset tiny-llama --seq-len 16 --micro-batch-size 2 | FileCheck %s --check-prefix=PARAMS
// RUN: braidc --preset tiny-llama --seq-len 16 --micro-batch-size 2 --fuse-mlp | FileCheck %s --check-prefix=FUSED

// Tests the whole forward graph that the LLaMA frontend builds for the
// tiny-llama preset, against the layout of a Hugging Face LlamaForCausalLM
// checkpoint.
//
// The shapes, derived from the architecture (not from braidc's output):
//   2 layers, hidden h = 64, 4 heads, 2 kv heads (GQA), head_dim = 64 / 4 = 16,
//   ffn 176, vocab 512 (no padding), RMSNorm eps 1e-5, RoPE theta 1e4, untied.
//   q_proj:  nn.Linear(h, heads * head_dim)    -> weight [64, 64]
//   k_proj:  nn.Linear(h, kv_heads * head_dim) -> weight [2 * 16, 64] = [32, 64]
//   v_proj:  same as k_proj                    -> weight [32, 64]
//   o_proj:  nn.Linear(heads * head_dim, h)    -> weight [64, 64]
//   gate_proj, up_proj: nn.Linear(h, ffn)      -> weight [176, 64]
//   down_proj: nn.Linear(ffn, h)               -> weight [64, 176]
//   lm_head: nn.Linear(h, vocab)               -> weight [512, 64]
//   nn.Linear stores [out, in], so every linear uses transpose_w.
//   Activations are [batch, seq, features] = [2, 16, .]; the attention scale is
//   1 / sqrt(head_dim) = 1 / 4 = 0.25.

// Tests that @forward has exactly the parameters of the checkpoint:
// embed_tokens, 9 per layer (2 norms, q/k/v/o_proj, gate/up/down_proj),
// model.norm and lm_head: 1 + 2 * 9 + 1 + 1 = 21.
// PARAMS-COUNT-21: {model.param = "
// PARAMS-NOT: model.param

// Tests that @forward takes every parameter under its checkpoint name and
// shape, then the tokens and targets, and returns a scalar f32 loss.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[EMBED:.+]]: tensor<512x64xf32> {model.param = "model.embed_tokens.weight"},
// CHECK-SAME: %[[L0_N1:.+]]: tensor<64xf32> {model.param = "model.layers.0.input_layernorm.weight"},
// CHECK-SAME: %[[L0_WQ:.+]]: tensor<64x64xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
// CHECK-SAME: %[[L0_WK:.+]]: tensor<32x64xf32> {model.param = "model.layers.0.self_attn.k_proj.weight"},
// CHECK-SAME: %[[L0_WV:.+]]: tensor<32x64xf32> {model.param = "model.layers.0.self_attn.v_proj.weight"},
// CHECK-SAME: %[[L0_WO:.+]]: tensor<64x64xf32> {model.param = "model.layers.0.self_attn.o_proj.weight"},
// CHECK-SAME: %[[L0_N2:.+]]: tensor<64xf32> {model.param = "model.layers.0.post_attention_layernorm.weight"},
// CHECK-SAME: %[[L0_WG:.+]]: tensor<176x64xf32> {model.param = "model.layers.0.mlp.gate_proj.weight"},
// CHECK-SAME: %[[L0_WU:.+]]: tensor<176x64xf32> {model.param = "model.layers.0.mlp.up_proj.weight"},
// CHECK-SAME: %[[L0_WD:.+]]: tensor<64x176xf32> {model.param = "model.layers.0.mlp.down_proj.weight"},
// CHECK-SAME: %[[L1_N1:.+]]: tensor<64xf32> {model.param = "model.layers.1.input_layernorm.weight"},
// CHECK-SAME: %[[L1_WQ:.+]]: tensor<64x64xf32> {model.param = "model.layers.1.self_attn.q_proj.weight"},
// CHECK-SAME: %[[L1_WK:.+]]: tensor<32x64xf32> {model.param = "model.layers.1.self_attn.k_proj.weight"},
// CHECK-SAME: %[[L1_WV:.+]]: tensor<32x64xf32> {model.param = "model.layers.1.self_attn.v_proj.weight"},
// CHECK-SAME: %[[L1_WO:.+]]: tensor<64x64xf32> {model.param = "model.layers.1.self_attn.o_proj.weight"},
// CHECK-SAME: %[[L1_N2:.+]]: tensor<64xf32> {model.param = "model.layers.1.post_attention_layernorm.weight"},
// CHECK-SAME: %[[L1_WG:.+]]: tensor<176x64xf32> {model.param = "model.layers.1.mlp.gate_proj.weight"},
// CHECK-SAME: %[[L1_WU:.+]]: tensor<176x64xf32> {model.param = "model.layers.1.mlp.up_proj.weight"},
// CHECK-SAME: %[[L1_WD:.+]]: tensor<64x176xf32> {model.param = "model.layers.1.mlp.down_proj.weight"},
// CHECK-SAME: %[[NORM:.+]]: tensor<64xf32> {model.param = "model.norm.weight"},
// CHECK-SAME: %[[HEAD:.+]]: tensor<512x64xf32> {model.param = "lm_head.weight"},
// CHECK-SAME: %[[TOKENS:.+]]: tensor<2x16xi32> {model.input = "tokens"},
// CHECK-SAME: %[[TARGETS:.+]]: tensor<2x16xi32> {model.input = "targets"})
// CHECK-SAME: -> tensor<f32> {

// Tests that the tokens are embedded, with no positions added (RoPE instead).
// CHECK-NEXT: %[[E:.+]] = model.embedding %[[EMBED]][%[[TOKENS]]] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>

// Tests that layer 0 takes the embedding and its ten parameters, in order.
// CHECK-NEXT: %[[H0:.+]] = model.layer 0(%[[E]], %[[L0_N1]], %[[L0_WQ]], %[[L0_WK]], %[[L0_WV]], %[[L0_WO]], %[[L0_N2]], %[[L0_WG]], %[[L0_WU]], %[[L0_WD]])
// CHECK-SAME: : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<176x64xf32>, tensor<176x64xf32>, tensor<64x176xf32>) -> tensor<2x16x64xf32> {
// CHECK-NEXT: ^bb0(%[[X:.+]]: tensor<2x16x64xf32>, %[[N1:.+]]: tensor<64xf32>, %[[WQ:.+]]: tensor<64x64xf32>, %[[WK:.+]]: tensor<32x64xf32>, %[[WV:.+]]: tensor<32x64xf32>, %[[WO:.+]]: tensor<64x64xf32>, %[[N2:.+]]: tensor<64xf32>, %[[WG:.+]]: tensor<176x64xf32>, %[[WU:.+]]: tensor<176x64xf32>, %[[WD:.+]]: tensor<64x176xf32>):

// Tests the attention half of layer 0: pre-norm, separate q/k/v projections
// (k and v with 2 kv heads x 16 = 32 columns), RoPE on q and k only, causal
// GQA attention, o_proj and the residual add of the layer input.
// CHECK-NEXT: %[[A:.+]] = model.rms_norm %[[X]], %[[N1]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[Q:.+]] = model.linear %[[A]], %[[WQ]] transpose_w : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[K:.+]] = model.linear %[[A]], %[[WK]] transpose_w : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
// CHECK-NEXT: %[[V:.+]] = model.linear %[[A]], %[[WV]] transpose_w : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
// CHECK-NEXT: %[[RQ:.+]] = model.rope %[[Q]] head_dim = 16 theta = 1.000000e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[RK:.+]] = model.rope %[[K]] head_dim = 16 theta = 1.000000e+04 : (tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
// CHECK-NEXT: %[[ATT:.+]] = model.attention %[[RQ]], %[[RK]], %[[V]] heads = 4 kv_heads = 2 scale = 2.500000e-01 causal : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[O:.+]] = model.linear %[[ATT]], %[[WO]] transpose_w : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[R1:.+]] = model.add %[[X]], %[[O]] : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>

// Tests the MLP half of layer 0: pre-norm of the first residual, SwiGLU of
// gate_proj and up_proj, down_proj, and the residual add.
// CHECK-NEXT: %[[M:.+]] = model.rms_norm %[[R1]], %[[N2]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[G:.+]] = model.linear %[[M]], %[[WG]] transpose_w : (tensor<2x16x64xf32>, tensor<176x64xf32>) -> tensor<2x16x176xf32>
// CHECK-NEXT: %[[U:.+]] = model.linear %[[M]], %[[WU]] transpose_w : (tensor<2x16x64xf32>, tensor<176x64xf32>) -> tensor<2x16x176xf32>
// CHECK-NEXT: %[[S:.+]] = model.swiglu %[[G]], %[[U]] : (tensor<2x16x176xf32>, tensor<2x16x176xf32>) -> tensor<2x16x176xf32>
// CHECK-NEXT: %[[D:.+]] = model.linear %[[S]], %[[WD]] transpose_w : (tensor<2x16x176xf32>, tensor<64x176xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[R2:.+]] = model.add %[[R1]], %[[D]] : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: model.yield %[[R2]] : tensor<2x16x64xf32>
// CHECK-NEXT: }

// Tests that layer 1 takes layer 0's result and its own ten parameters.
// CHECK-NEXT: %[[H1:.+]] = model.layer 1(%[[H0]], %[[L1_N1]], %[[L1_WQ]], %[[L1_WK]], %[[L1_WV]], %[[L1_WO]], %[[L1_N2]], %[[L1_WG]], %[[L1_WU]], %[[L1_WD]])
// CHECK-SAME: -> tensor<2x16x64xf32> {
// CHECK: model.yield
// CHECK-NEXT: }

// Tests the final norm, the untied lm_head ([512, 64], transposed) and the
// loss against the targets.
// CHECK-NEXT: %[[F:.+]] = model.rms_norm %[[H1]], %[[NORM]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
// CHECK-NEXT: %[[LOGITS:.+]] = model.linear %[[F]], %[[HEAD]] transpose_w : (tensor<2x16x64xf32>, tensor<512x64xf32>) -> tensor<2x16x512xf32>
// CHECK-NEXT: %[[LOSS:.+]] = model.cross_entropy %[[LOGITS]], %[[TARGETS]] ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// CHECK-NEXT: }


// Tests the fused MLP (--fuse-mlp): one gate_up_proj [gate; up] of 2 x 176
// rows in place of gate_proj and up_proj, one linear, and a SwiGLU on its
// packed output.
// FUSED-LABEL: func.func @forward(
// FUSED-SAME: {model.param = "model.layers.0.post_attention_layernorm.weight"}, %[[WGU:[^:]+]]: tensor<352x64xf32> {model.param = "model.layers.0.mlp.gate_up_proj.weight"}, %{{[^:]+}}: tensor<64x176xf32> {model.param = "model.layers.0.mlp.down_proj.weight"}
// FUSED-NOT: gate_proj
// FUSED: %[[M:.+]] = model.rms_norm
// FUSED: %[[M2:.+]] = model.rms_norm
// FUSED-NEXT: %[[GU:.+]] = model.linear %[[M2]], %{{.+}} transpose_w : (tensor<2x16x64xf32>, tensor<352x64xf32>) -> tensor<2x16x352xf32>
// FUSED-NEXT: %[[S:.+]] = model.swiglu %[[GU]] : (tensor<2x16x352xf32>) -> tensor<2x16x176xf32>
// FUSED-NEXT: model.linear %[[S]], %{{.+}} transpose_w : (tensor<2x16x176xf32>, tensor<64x176xf32>) -> tensor<2x16x64xf32>
