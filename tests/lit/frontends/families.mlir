// RUN: braidc %inputs/jobs/tiny-bloom.textproto | FileCheck %s --check-prefix=BLOOM
// RUN: braidc %inputs/jobs/tiny-baichuan-13b.textproto | FileCheck %s --check-prefix=BAICHUAN
// RUN: braidc %inputs/jobs/tiny-internlm.textproto | FileCheck %s --check-prefix=INTERNLM
// RUN: braidc %inputs/jobs/tiny-gpt2-dropout.textproto | FileCheck %s --check-prefix=DROPOUT
// RUN: braidc --hf-config %inputs/hf/llama2-70b.json --seq-len 8 | FileCheck %s --check-prefix=LLAMA70B

// What each family changes in the forward graph, on one-layer models with
// hidden h = 64, 4 heads (head_dim 16), batch 1 and sequence 8 unless said
// otherwise. Shapes are derived from the Hugging Face modules, not from
// braidc's output.

//===----------------------------------------------------------------------===//
// Bloom (tiny-bloom.textproto): vocab 256, ffn 4h = 256, LayerNorm eps 1e-5.
//   word_embeddings [256, 64], then word_embeddings_layernorm (w, b [64]);
//   query_key_value: nn.Linear(h, 3h) -> weight [192, 64], bias [192], its
//   output viewed as [.., heads, 3, head_dim] (q, k, v interleaved per head);
//   dense [64, 64] + [64]; dense_h_to_4h [256, 64] + [256];
//   dense_4h_to_h [64, 256] + [64]; ln_f; lm_head tied to word_embeddings.
//   ALiBi instead of rotary or learned positions.
//===----------------------------------------------------------------------===//

// Tests that Bloom's parameters have the checkpoint names and shapes, with the
// word_embeddings_layernorm and no lm_head (tied).
// BLOOM-LABEL: func.func @forward(
// BLOOM-SAME: %[[EMB:.+]]: tensor<256x64xf32> {model.param = "transformer.word_embeddings.weight"},
// BLOOM-SAME: %[[ELNW:.+]]: tensor<64xf32> {model.param = "transformer.word_embeddings_layernorm.weight"},
// BLOOM-SAME: %[[ELNB:.+]]: tensor<64xf32> {model.param = "transformer.word_embeddings_layernorm.bias"},
// BLOOM-SAME: tensor<64xf32> {model.param = "transformer.h.0.input_layernorm.weight"},
// BLOOM-SAME: tensor<64xf32> {model.param = "transformer.h.0.input_layernorm.bias"},
// BLOOM-SAME: tensor<192x64xf32> {model.param = "transformer.h.0.self_attention.query_key_value.weight"},
// BLOOM-SAME: tensor<192xf32> {model.param = "transformer.h.0.self_attention.query_key_value.bias"},
// BLOOM-SAME: tensor<64x64xf32> {model.param = "transformer.h.0.self_attention.dense.weight"},
// BLOOM-SAME: tensor<64xf32> {model.param = "transformer.h.0.self_attention.dense.bias"},
// BLOOM-SAME: tensor<64xf32> {model.param = "transformer.h.0.post_attention_layernorm.weight"},
// BLOOM-SAME: tensor<64xf32> {model.param = "transformer.h.0.post_attention_layernorm.bias"},
// BLOOM-SAME: tensor<256x64xf32> {model.param = "transformer.h.0.mlp.dense_h_to_4h.weight"},
// BLOOM-SAME: tensor<256xf32> {model.param = "transformer.h.0.mlp.dense_h_to_4h.bias"},
// BLOOM-SAME: tensor<64x256xf32> {model.param = "transformer.h.0.mlp.dense_4h_to_h.weight"},
// BLOOM-SAME: tensor<64xf32> {model.param = "transformer.h.0.mlp.dense_4h_to_h.bias"},
// BLOOM-SAME: tensor<64xf32> {model.param = "transformer.ln_f.weight"},
// BLOOM-SAME: tensor<64xf32> {model.param = "transformer.ln_f.bias"},
// BLOOM-NOT: lm_head
// BLOOM-SAME: %[[TOKENS:.+]]: tensor<1x8xi32> {model.input = "tokens"},

// Tests that Bloom normalizes the embedding (word_embeddings_layernorm) before
// the first layer, and adds no positions.
// BLOOM-NEXT: %[[E:.+]] = model.embedding %[[EMB]][%[[TOKENS]]] : (tensor<256x64xf32>, tensor<1x8xi32>) -> tensor<1x8x64xf32>
// BLOOM-NEXT: %[[EN:.+]] = model.layer_norm %[[E]], %[[ELNW]], %[[ELNB]] eps = 1.000000e-05
// BLOOM-NEXT: model.layer 0(%[[EN]],

// Tests that Bloom's fused query_key_value is an nn.Linear ([3h, h], transposed)
// with a bias, split per head, that attention uses ALiBi, and that there is no
// RoPE.
// BLOOM-NEXT: ^bb0(%[[X:.+]]: tensor<1x8x64xf32>, %[[LNW:.+]]: tensor<64xf32>, %[[LNB:.+]]: tensor<64xf32>, %[[QKVW:.+]]: tensor<192x64xf32>, %[[QKVB:.+]]: tensor<192xf32>, %{{.+}}: tensor<64x64xf32>, %{{.+}}: tensor<64xf32>, %{{.+}}: tensor<64xf32>, %{{.+}}: tensor<64xf32>, %{{.+}}: tensor<256x64xf32>, %{{.+}}: tensor<256xf32>, %{{.+}}: tensor<64x256xf32>, %{{.+}}: tensor<64xf32>):
// BLOOM-NEXT: %[[A:.+]] = model.layer_norm %[[X]], %[[LNW]], %[[LNB]] eps = 1.000000e-05
// BLOOM-NEXT: %[[QKV:.+]] = model.linear %[[A]], %[[QKVW]], %[[QKVB]] transpose_w : (tensor<1x8x64xf32>, tensor<192x64xf32>, tensor<192xf32>) -> tensor<1x8x192xf32>
// BLOOM-NEXT: %[[Q:.+]], %[[K:.+]], %[[V:.+]] = model.qkv_split %[[QKV]] heads = 4 kv_heads = 4 head_dim = 16 layout = per_head : (tensor<1x8x192xf32>) -> (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>)
// BLOOM-NEXT: model.attention %[[Q]], %[[K]], %[[V]] heads = 4 kv_heads = 4 scale = 2.500000e-01 causal alibi :
// BLOOM-NOT: model.rope
// BLOOM: model.gelu %{{.+}} tanh
// BLOOM-NOT: model.rope
// BLOOM: model.yield

// Tests that Bloom's output layer is the word embedding table, transposed.
// BLOOM: model.linear %{{.+}}, %[[EMB]] transpose_w : (tensor<1x8x64xf32>, tensor<256x64xf32>) -> tensor<1x8x256xf32>

//===----------------------------------------------------------------------===//
// Baichuan-13B (tiny-baichuan-13b.textproto): LLaMA names and RMSNorm
// (eps 1e-6 by default), ffn 176, vocab 256, untied lm_head, ALiBi.
//   self_attn.W_pack: nn.Linear(h, 3h, bias=False) -> weight [192, 64], its
//   output [q | k | v] (unflatten(-1, (3, h))): the grouped layout.
//===----------------------------------------------------------------------===//

// Tests that Baichuan stores Q, K and V in one W_pack [3h, h] with no bias and
// no separate q/k/v_proj.
// BAICHUAN-LABEL: func.func @forward(
// BAICHUAN-SAME: tensor<256x64xf32> {model.param = "model.embed_tokens.weight"},
// BAICHUAN-SAME: tensor<64xf32> {model.param = "model.layers.0.input_layernorm.weight"},
// BAICHUAN-NOT: q_proj
// BAICHUAN-SAME: tensor<192x64xf32> {model.param = "model.layers.0.self_attn.W_pack.weight"},
// BAICHUAN-NOT: W_pack.bias
// BAICHUAN-SAME: tensor<64x64xf32> {model.param = "model.layers.0.self_attn.o_proj.weight"},
// BAICHUAN-SAME: tensor<64xf32> {model.param = "model.norm.weight"},
// BAICHUAN-SAME: tensor<256x64xf32> {model.param = "lm_head.weight"},

// Tests that W_pack is an nn.Linear (transpose_w) split in the grouped layout,
// and that attention uses ALiBi with no RoPE.
// BAICHUAN: ^bb0(%[[X:.+]]: tensor<1x8x64xf32>, %[[NW:.+]]: tensor<64xf32>, %[[WPACK:.+]]: tensor<192x64xf32>, %{{.+}}: tensor<64x64xf32>, %{{.+}}: tensor<64xf32>, %{{.+}}: tensor<176x64xf32>, %{{.+}}: tensor<176x64xf32>, %{{.+}}: tensor<64x176xf32>):
// BAICHUAN-NEXT: %[[A:.+]] = model.rms_norm %[[X]], %[[NW]] eps = 9.9999999999999995E-7
// BAICHUAN-NEXT: %[[QKV:.+]] = model.linear %[[A]], %[[WPACK]] transpose_w : (tensor<1x8x64xf32>, tensor<192x64xf32>) -> tensor<1x8x192xf32>
// BAICHUAN-NEXT: %[[Q:.+]], %[[K:.+]], %[[V:.+]] = model.qkv_split %[[QKV]] heads = 4 kv_heads = 4 head_dim = 16 layout = grouped : (tensor<1x8x192xf32>) -> (tensor<1x8x64xf32>, tensor<1x8x64xf32>, tensor<1x8x64xf32>)
// BAICHUAN-NEXT: model.attention %[[Q]], %[[K]], %[[V]] heads = 4 kv_heads = 4 scale = 2.500000e-01 causal alibi :
// BAICHUAN-NOT: model.rope
// BAICHUAN: model.swiglu
// BAICHUAN-NOT: model.rope
// BAICHUAN: return

//===----------------------------------------------------------------------===//
// InternLM (tiny-internlm.textproto): LLaMA names, RMSNorm, RoPE, ffn 176,
// vocab 256, and (config.json `bias: true`) biases on q/k/v/o_proj only:
//   q/k/v_proj: weight [64, 64], bias [64]; o_proj: weight [64, 64], bias [64];
//   gate/up_proj [176, 64] and down_proj [64, 176] without bias.
//===----------------------------------------------------------------------===//

// Tests that InternLM has a bias after each of q/k/v/o_proj and none on the MLP.
// INTERNLM-LABEL: func.func @forward(
// INTERNLM-SAME: tensor<64x64xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
// INTERNLM-SAME: tensor<64xf32> {model.param = "model.layers.0.self_attn.q_proj.bias"},
// INTERNLM-SAME: tensor<64x64xf32> {model.param = "model.layers.0.self_attn.k_proj.weight"},
// INTERNLM-SAME: tensor<64xf32> {model.param = "model.layers.0.self_attn.k_proj.bias"},
// INTERNLM-SAME: tensor<64x64xf32> {model.param = "model.layers.0.self_attn.v_proj.weight"},
// INTERNLM-SAME: tensor<64xf32> {model.param = "model.layers.0.self_attn.v_proj.bias"},
// INTERNLM-SAME: tensor<64x64xf32> {model.param = "model.layers.0.self_attn.o_proj.weight"},
// INTERNLM-SAME: tensor<64xf32> {model.param = "model.layers.0.self_attn.o_proj.bias"},
// INTERNLM-SAME: tensor<64xf32> {model.param = "model.layers.0.post_attention_layernorm.weight"},
// INTERNLM-SAME: tensor<176x64xf32> {model.param = "model.layers.0.mlp.gate_proj.weight"},
// INTERNLM-NOT: mlp.{{.*}}.bias
// INTERNLM-SAME: tensor<176x64xf32> {model.param = "model.layers.0.mlp.up_proj.weight"},
// INTERNLM-NOT: mlp.{{.*}}.bias
// INTERNLM-SAME: tensor<64x176xf32> {model.param = "model.layers.0.mlp.down_proj.weight"},
// INTERNLM-NOT: mlp.{{.*}}.bias
// INTERNLM-SAME: tensor<64xf32> {model.param = "model.norm.weight"},

// Tests that the biases reach the projections, and that q and k get RoPE.
// INTERNLM: ^bb0(%[[X:.+]]: tensor<1x8x64xf32>, %[[NW:.+]]: tensor<64xf32>, %[[WQ:.+]]: tensor<64x64xf32>, %[[LBQ:.+]]: tensor<64xf32>, %[[WK:.+]]: tensor<64x64xf32>, %[[LBK:.+]]: tensor<64xf32>, %[[WV:.+]]: tensor<64x64xf32>, %[[LBV:.+]]: tensor<64xf32>, %[[WO:.+]]: tensor<64x64xf32>, %[[LBO:.+]]: tensor<64xf32>, %{{.+}}: tensor<64xf32>, %{{.+}}: tensor<176x64xf32>, %{{.+}}: tensor<176x64xf32>, %{{.+}}: tensor<64x176xf32>):
// INTERNLM-NEXT: %[[A:.+]] = model.rms_norm %[[X]], %[[NW]]
// INTERNLM-NEXT: %[[Q:.+]] = model.linear %[[A]], %[[WQ]], %[[LBQ]] transpose_w : (tensor<1x8x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>
// INTERNLM-NEXT: %[[K:.+]] = model.linear %[[A]], %[[WK]], %[[LBK]] transpose_w : (tensor<1x8x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>
// INTERNLM-NEXT: %[[V:.+]] = model.linear %[[A]], %[[WV]], %[[LBV]] transpose_w : (tensor<1x8x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>
// INTERNLM-NEXT: %[[RQ:.+]] = model.rope %[[Q]] head_dim = 16
// INTERNLM-NEXT: %[[RK:.+]] = model.rope %[[K]] head_dim = 16
// INTERNLM-NEXT: %[[ATT:.+]] = model.attention %[[RQ]], %[[RK]], %[[V]] heads = 4 kv_heads = 4 scale = 2.500000e-01 causal :
// INTERNLM-NEXT: model.linear %[[ATT]], %[[WO]], %[[LBO]] transpose_w : (tensor<1x8x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>
// INTERNLM: model.linear %{{[^,]+}}, %{{[^,]+}} transpose_w : (tensor<1x8x64xf32>, tensor<176x64xf32>) -> tensor<1x8x176xf32>
// INTERNLM-NEXT: model.linear %{{[^,]+}}, %{{[^,]+}} transpose_w : (tensor<1x8x64xf32>, tensor<176x64xf32>) -> tensor<1x8x176xf32>
// INTERNLM-NEXT: model.swiglu
// INTERNLM-NEXT: model.linear %{{[^,]+}}, %{{[^,]+}} transpose_w : (tensor<1x8x176xf32>, tensor<64x176xf32>) -> tensor<1x8x64xf32>

//===----------------------------------------------------------------------===//
// GPT-2 with dropout 0.1 (tiny-gpt2-dropout.textproto): as GPT2Model, dropout
// after the embedding sum (embd_pdrop), on the attention probabilities
// (attn_pdrop), after attn.c_proj and after mlp.c_proj (resid_pdrop), each
// before its residual add.
//===----------------------------------------------------------------------===//

// Tests that dropout follows the embedding sum and feeds layer 0.
// DROPOUT-LABEL: func.func @forward(
// DROPOUT: %[[E:.+]] = model.add
// Each dropout has its own rng_id, in program order (embedding, then per layer the attention and MLP branches).
// DROPOUT-NEXT: %[[ED:.+]] = model.dropout %[[E]] rate = 1.000000e-01 {rng_id = 0 : i64} : (tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
// DROPOUT-NEXT: model.layer 0(%[[ED]],

// Tests that attention carries its dropout rate and that both residual
// branches are dropped out before their add.
// DROPOUT: ^bb0(%[[X:[^:]+]]:
// DROPOUT: %[[ATT:.+]] = model.attention %{{.+}} causal {dropout = 1.000000e-01 : f64} :
// DROPOUT-NEXT: %[[O:.+]] = model.linear %[[ATT]],
// DROPOUT-NEXT: %[[OD:.+]] = model.dropout %[[O]] rate = 1.000000e-01 {rng_id = 1 : i64} : (tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
// DROPOUT-NEXT: %[[R1:.+]] = model.add %[[X]], %[[OD]]
// DROPOUT: %[[ACT:.+]] = model.gelu
// DROPOUT-NEXT: %[[P:.+]] = model.linear %[[ACT]],
// DROPOUT-NEXT: %[[PD:.+]] = model.dropout %[[P]] rate = 1.000000e-01 {rng_id = 2 : i64} : (tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
// DROPOUT-NEXT: %[[R2:.+]] = model.add %[[R1]], %[[PD]]
// DROPOUT-NEXT: model.yield %[[R2]]

//===----------------------------------------------------------------------===//
// LLaMA-2 70B (hf/llama2-70b.json): 80 layers, h = 8192, 64 heads, 8 kv heads,
// head_dim = 8192 / 64 = 128, intermediate 28672, vocab 32000.
//   q_proj [64 * 128, 8192] = [8192, 8192]; k_proj, v_proj [8 * 128, 8192] =
//   [1024, 8192]; o_proj [8192, 8192]; gate/up_proj [28672, 8192];
//   down_proj [8192, 28672]; scale 1 / sqrt(128) = 0.0883883...
//===----------------------------------------------------------------------===//

// Tests the GQA shapes of the first layer's parameters.
// LLAMA70B-LABEL: func.func @forward(
// LLAMA70B-SAME: tensor<32000x8192xf32> {model.param = "model.embed_tokens.weight"},
// LLAMA70B-SAME: tensor<8192xf32> {model.param = "model.layers.0.input_layernorm.weight"},
// LLAMA70B-SAME: tensor<8192x8192xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
// LLAMA70B-SAME: tensor<1024x8192xf32> {model.param = "model.layers.0.self_attn.k_proj.weight"},
// LLAMA70B-SAME: tensor<1024x8192xf32> {model.param = "model.layers.0.self_attn.v_proj.weight"},
// LLAMA70B-SAME: tensor<8192x8192xf32> {model.param = "model.layers.0.self_attn.o_proj.weight"},
// LLAMA70B-SAME: tensor<8192xf32> {model.param = "model.layers.0.post_attention_layernorm.weight"},
// LLAMA70B-SAME: tensor<28672x8192xf32> {model.param = "model.layers.0.mlp.gate_proj.weight"},
// LLAMA70B-SAME: tensor<28672x8192xf32> {model.param = "model.layers.0.mlp.up_proj.weight"},
// LLAMA70B-SAME: tensor<8192x28672xf32> {model.param = "model.layers.0.mlp.down_proj.weight"},

// Tests that layer 0's attention is GQA with 64 query and 8 kv heads.
// LLAMA70B: model.layer 0(
// LLAMA70B: model.linear %{{.+}} transpose_w : (tensor<1x8x8192xf32>, tensor<1024x8192xf32>) -> tensor<1x8x1024xf32>
// LLAMA70B: model.attention %{{.+}} heads = 64 kv_heads = 8 scale = 0.0883883{{[0-9]*}} causal : (tensor<1x8x8192xf32>, tensor<1x8x1024xf32>, tensor<1x8x1024xf32>) -> tensor<1x8x8192xf32>

// Tests that there are 80 layers, numbered 0 to 79.
// LLAMA70B: model.layer 79(
// LLAMA70B-NOT: model.layer
// LLAMA70B: return
