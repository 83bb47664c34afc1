// RUN: braidc --preset tiny-llama --seq-len 8 --tp 2 --compile-to=shard | FileCheck %s --check-prefix=LLAMA
// RUN: braidc --preset tiny-llama --seq-len 8 --tp 4 --compile-to=shard | FileCheck %s --check-prefix=KVREP
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --tp 2 --compile-to=shard | FileCheck %s --check-prefix=GPT2
// RUN: braidc --preset tiny-llama --seq-len 8 --tp 2 --dp 2 --compile-to=shard | FileCheck %s --check-prefix=MESH
// RUN: braidc --preset tiny-llama --seq-len 8 --tp 2 --fuse-mlp --compile-to=shard | FileCheck %s --check-prefix=FUSED

// Tests tensor parallelism on one LLaMA block (tiny-llama: hidden 64, 4
// heads of 16, 2 kv heads, ffn 176, vocab 512; micro-batch 1 x 8 tokens) at
// tp = 2. Each rank holds half of the vocabulary rows (256 x 64), 2 query
// heads (q_proj 32 x 64) and 1 kv head (k_proj, v_proj 16 x 64), the input
// columns of o_proj (64 x 32), half of gate/up (88 x 64) and of down's input
// (64 x 88); norms stay whole. Forward: one all-reduce after the
// vocab-parallel embedding, one after each row-parallel linear (o_proj and
// down_proj), none elsewhere in the block.
// LLAMA: model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 2]
// LLAMA-LABEL: func.func @train_step(
// LLAMA-SAME: tensor<256x64xf32> {model.param = "model.embed_tokens.weight", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// LLAMA-SAME: tensor<64xf32> {model.param = "model.layers.0.input_layernorm.weight"}
// LLAMA-SAME: tensor<32x64xf32> {model.param = "model.layers.0.self_attn.q_proj.weight", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// LLAMA-SAME: tensor<16x64xf32> {model.param = "model.layers.0.self_attn.k_proj.weight", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// LLAMA-SAME: tensor<64x32xf32> {model.param = "model.layers.0.self_attn.o_proj.weight", model.sharding = #model.sharding<@mesh, [{}, {"tp"}]>}
// LLAMA-SAME: tensor<88x64xf32> {model.param = "model.layers.0.mlp.gate_proj.weight", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// LLAMA-SAME: tensor<64x88xf32> {model.param = "model.layers.0.mlp.down_proj.weight", model.sharding = #model.sharding<@mesh, [{}, {"tp"}]>}
// LLAMA: %[[E:.+]] = model.embedding %arg0[%{{.+}}] vocab_axis = "tp" : (tensor<256x64xf32>, tensor<1x8xi32>) -> tensor<1x8x64xf32>
// LLAMA-NEXT: %[[X:.+]] = model.all_reduce %[[E]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the vocab-parallel model.embedding
// LLAMA-NEXT: model.layer 0(%[[X]],
// LLAMA: model.rms_norm
// LLAMA-NEXT: model.linear {{.*}} -> tensor<1x8x32xf32>
// LLAMA-NEXT: model.linear {{.*}} -> tensor<1x8x16xf32>
// LLAMA-NEXT: model.linear {{.*}} -> tensor<1x8x16xf32>
// LLAMA-NEXT: model.rope
// LLAMA-NEXT: model.rope
// LLAMA-NEXT: %[[ATT:.+]] = model.attention {{.*}} heads = 2 kv_heads = 1 scale = 2.500000e-01 causal head_axis = "tp" global_heads = 4 global_kv_heads = 2 : (tensor<1x8x32xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
// LLAMA-NEXT: %[[O:.+]] = model.linear %[[ATT]], %{{.+}} transpose_w : (tensor<1x8x32xf32>, tensor<64x32xf32>) -> tensor<1x8x64xf32>
// LLAMA-NEXT: %[[OR:.+]] = model.all_reduce %[[O]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the row-parallel model.linear outputs (model.layers.0.self_attn.o_proj.weight split on its input dimension)" : (tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
// LLAMA-NEXT: %[[H:.+]] = model.add %{{.+}}, %[[OR]]
// LLAMA-NEXT: model.rms_norm %[[H]]
// LLAMA-NEXT: model.linear {{.*}} -> tensor<1x8x88xf32>
// LLAMA-NEXT: model.linear {{.*}} -> tensor<1x8x88xf32>
// LLAMA-NEXT: model.swiglu {{.*}} -> tensor<1x8x88xf32>
// LLAMA-NEXT: %[[D:.+]] = model.linear {{.*}} : (tensor<1x8x88xf32>, tensor<64x88xf32>) -> tensor<1x8x64xf32>
// LLAMA-NEXT: %[[DR:.+]] = model.all_reduce %[[D]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the row-parallel model.linear outputs (model.layers.0.mlp.down_proj.weight split on its input dimension)"
// LLAMA-NEXT: model.add %[[H]], %[[DR]]
// LLAMA-NEXT: model.yield
// The loss: vocab-parallel, two all-reduces (max, then the pair of sums) on
// [1, 8] rows; the gradient reads the global log-sum-exp.
// LLAMA: %[[LOGITS:.+]] = model.linear {{.*}} -> tensor<1x8x256xf32>
// LLAMA-NEXT: %[[M:.+]] = model.cross_entropy_max %[[LOGITS]] : (tensor<1x8x256xf32>) -> tensor<1x8xf32>
// LLAMA-NEXT: %[[GM:.+]] = model.all_reduce max %[[M]] over @mesh ["tp"]
// LLAMA-NEXT: %[[P:.+]] = model.cross_entropy_partial %[[LOGITS]], %{{.+}}, %[[GM]] ignore_index = -100 vocab_axis = "tp" : (tensor<1x8x256xf32>, tensor<1x8xi32>, tensor<1x8xf32>) -> tensor<1x8x2xf32>
// LLAMA-NEXT: %[[S:.+]] = model.all_reduce %[[P]] over @mesh ["tp"]
// LLAMA-NEXT: %[[LOSS:.+]], %[[LSE:.+]] = model.cross_entropy_finish %[[S]], %[[GM]], %{{.+}} ignore_index = -100
// LLAMA-NEXT: model.cross_entropy_grad %[[LOGITS]], %{{.+}}, %{{.+}} lse %[[LSE]] ignore_index = -100 vocab_axis = "tp"
// Backward of the block: one all-reduce of the summed gate and up input
// gradients, one of the summed q, k and v ones, each before its norm.
// LLAMA: model.layer 0 backward
// LLAMA: model.swiglu_grad
// LLAMA: %[[DU:.+]] = model.linear_grad_input %dup
// LLAMA: %[[DG:.+]] = model.linear_grad_input %dgate
// LLAMA: %[[DSUM:.+]] = model.add %[[DU]], %[[DG]]
// LLAMA-NEXT: %[[DR2:.+]] = model.all_reduce %[[DSUM]] over @mesh ["tp"]
// LLAMA-NEXT: model.rms_norm_grad %{{.+}}, %{{.+}}, %[[DR2]]
// LLAMA-NOT: model.all_reduce
// LLAMA: model.attention_grad {{.*}} head_axis = "tp" global_heads = 4 global_kv_heads = 2
// LLAMA-NOT: model.all_reduce
// LLAMA: %[[KV:.+]] = model.add
// LLAMA-NEXT: %[[DQ:.+]] = model.linear_grad_input
// LLAMA-NEXT: model.linear_grad_weight
// LLAMA-NEXT: %[[QKV:.+]] = model.add %[[KV]], %[[DQ]]
// LLAMA-NEXT: %[[QKVR:.+]] = model.all_reduce %[[QKV]] over @mesh ["tp"]
// LLAMA-NEXT: model.rms_norm_grad %{{.+}}, %{{.+}}, %[[QKVR]]
// LLAMA-NOT: model.all_reduce
// LLAMA: model.embedding_grad {{.*}} vocab_axis = "tp" : (tensor<1x8x64xf32>, tensor<1x8xi32>) -> tensor<256x64xf32>
// The norm counts each rank's split gradients and 1/tp of the whole ones.
// LLAMA-NEXT: model.grad_norm {{.*}} over @mesh ["tp"] replicated = [false, true, false, false, false, false, true, false, false, false,

// Tests tp = 4 with 2 kv heads: k_proj and v_proj stay whole on every rank,
// each rank's one query head reads the kv head of its group, and the key and
// value weight gradients (partial: each rank has its query head's terms)
// are summed over tp once per step, with the optimizer's reductions.
// KVREP-LABEL: func.func @train_step(
// KVREP-SAME: tensor<16x64xf32> {model.param = "model.layers.0.self_attn.q_proj.weight", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// KVREP-SAME: tensor<32x64xf32> {model.param = "model.layers.0.self_attn.k_proj.weight"}
// KVREP-SAME: tensor<32x64xf32> {model.param = "model.layers.0.self_attn.v_proj.weight"}
// KVREP: model.attention {{.*}} heads = 1 kv_heads = 2 {{.*}} head_axis = "tp" global_heads = 4 global_kv_heads = 2 : (tensor<1x8x16xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>) -> tensor<1x8x16xf32>
// KVREP: model.all_reduce {{.*}} over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the gradients of model.layers.1.self_attn.k_proj.weight .. model.layers.0.self_attn.v_proj.weight (4 tensors, 32768 bytes); partial over tp: replicated, used by split computations"
// KVREP-NEXT: model.grad_norm

// Tests one GPT-2 block at tp = 2: the fused c_attn (Conv1D, [in, out] =
// [64, 192]) is split on its output dimension as three blocks [Q | K | V]
// of 64 (each rank 96 columns: its halves of Q, K and V), its bias too; the
// row-parallel c_proj biases are added at 1/2 before the all-reduce, and
// dropout (there is none in tiny-gpt2) would see whole values.
// GPT2-LABEL: func.func @train_step(
// GPT2-SAME: tensor<64x96xf32> {model.param = "transformer.h.0.attn.c_attn.weight", model.shard_blocks = array<i64: 64, 64, 64>, model.sharding = #model.sharding<@mesh, [{}, {"tp"}]>}
// GPT2-SAME: tensor<96xf32> {model.param = "transformer.h.0.attn.c_attn.bias", model.shard_blocks = array<i64: 64, 64, 64>, model.sharding = #model.sharding<@mesh, [{"tp"}]>}
// GPT2-SAME: tensor<32x64xf32> {model.param = "transformer.h.0.attn.c_proj.weight", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// GPT2-SAME: tensor<64xf32> {model.param = "transformer.h.0.attn.c_proj.bias"}
// GPT2: %[[WTE:.+]] = model.embedding {{.*}} vocab_axis = "tp"
// GPT2-NEXT: %[[WTER:.+]] = model.all_reduce %[[WTE]] over @mesh ["tp"]
// GPT2-NEXT: %[[WPE:.+]] = model.position_embedding
// GPT2-NEXT: model.add %[[WTER]], %[[WPE]]
// GPT2: model.layer 0
// GPT2: model.layer_norm
// GPT2-NEXT: %[[QKV:.+]] = model.linear {{.*}} : (tensor<1x8x64xf32>, tensor<64x96xf32>, tensor<96xf32>) -> tensor<1x8x96xf32>
// GPT2-NEXT: model.qkv_split %[[QKV]] heads = 2 kv_heads = 2 head_dim = 16 layout =  grouped : (tensor<1x8x96xf32>) -> (tensor<1x8x32xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>)
// GPT2-NEXT: model.attention {{.*}} heads = 2 kv_heads = 2 {{.*}} head_axis = "tp" global_heads = 4 global_kv_heads = 4
// GPT2-NEXT: %[[PROJ:.+]] = model.linear {{.*}} bias_scale = 5.000000e-01 : (tensor<1x8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>
// GPT2-NEXT: model.all_reduce %[[PROJ]] over @mesh ["tp"]
// GPT2-NEXT: model.add
// GPT2-NEXT: model.layer_norm
// GPT2-NEXT: model.linear {{.*}} -> tensor<1x8x128xf32>
// GPT2-NEXT: model.gelu
// GPT2-NEXT: %[[FC2:.+]] = model.linear {{.*}} bias_scale = 5.000000e-01 : (tensor<1x8x128xf32>, tensor<128x64xf32>, tensor<64xf32>) -> tensor<1x8x64xf32>
// GPT2-NEXT: model.all_reduce %[[FC2]] over @mesh ["tp"]
// GPT2-NEXT: model.add
// GPT2-NEXT: model.yield
// GPT2: model.layer 0 backward
// GPT2: %[[DQKV:.+]] = model.qkv_concat {{.*}} heads = 2 kv_heads = 2 head_dim = 16 layout =  grouped : (tensor<1x8x32xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>) -> tensor<1x8x96xf32>
// GPT2: %[[DX:.+]] = model.linear_grad_input %[[DQKV]]
// GPT2-NEXT: model.linear_grad_weight {{.*}} -> tensor<64x96xf32>
// GPT2-NEXT: model.bias_grad %[[DQKV]] : (tensor<1x8x96xf32>) -> tensor<96xf32>
// GPT2-NEXT: %[[DXR:.+]] = model.all_reduce %[[DX]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the partial model.linear_grad_input input gradients of the column-parallel transformer.h.0.attn.c_attn.weight, for model.layer_norm_grad"
// GPT2-NEXT: model.layer_norm_grad %{{.+}}, %{{.+}}, %[[DXR]]

// Tests tp x dp: the gradients are summed over dp only (tiny-llama at tp 2
// splits every kv head, so no gradient is partial over tp), in one bucket of
// each rank's shards: 256·64 (embedding) + 2 layers of (2·64 norms +
// 32·64 + 2·16·64 + 64·32 + 3·88·64) + 64 (final norm) + 256·64 (lm_head)
// = 79,168 floats = 316,672 bytes; lm_head's gradient comes first in
// backward, the embedding's last.
// MESH: model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 2]
// MESH: model.all_reduce {{.*}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradients of lm_head.weight .. model.embed_tokens.weight (21 tensors, 316672 bytes)"
// MESH-NOT: over @mesh ["dp", "tp"]
// MESH: model.grad_norm

// Tests the report's tensor-parallel communication against the closed form
// (docs/report.md): per micro-batch of b·s·h = 1·8·64 = 512 elements,
// (4 per layer · 2 layers + 2) all-reduces of 512 floats and the loss's
// 8 + 16, i.e. 5,144 floats = 20,576 bytes; 2 micro-batches give 41,152.
// The norm adds one double per step. At tp 4 the step also sums the whole
// K and V weight gradients over tp: 4 · 32·64 floats = 32,768 bytes.
// RUN: braidc --preset tiny-llama --seq-len 8 --tp 2 --micro-batch-size 1 --global-batch-size 2 --compile-to=plan --report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t.json
// REPORT: "communication_bytes_per_step": {
// REPORT-NEXT: "all_reduce": {
// REPORT-NEXT: "tp": 41152
// REPORT-NEXT: },
// REPORT-NEXT: "grad_norm": {
// REPORT-NEXT: "tp": 8
// RUN: braidc --preset tiny-llama --seq-len 8 --tp 4 --micro-batch-size 1 --global-batch-size 2 --compile-to=plan --report=%t4.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT4 < %t4.json
// REPORT4: "all_reduce": {
// REPORT4-NEXT: "tp": 73920

// Tests sequence parallelism on the LLaMA block: the residual stream and the
// norms hold each rank's half of the sequence ([1, 4, 64]); the embedding's
// and each row-parallel linear's partial sums are reduce-scattered into
// sequence slices instead of all-reduced; one all-gather before q/k/v (they
// share it) and one before gate/up.
// RUN: braidc --preset tiny-llama --seq-len 8 --tp 2 --sp --compile-to=shard | FileCheck %s --check-prefix=SP
// SP: %[[E:.+]] = model.embedding {{.*}} vocab_axis = "tp" : (tensor<256x64xf32>, tensor<1x8xi32>) -> tensor<1x8x64xf32>
// SP-NEXT: %[[ES:.+]] = model.reduce_scatter %[[E]] over @mesh ["tp"] dim = 1 reason = "model-shard: sequence-parallel sum of the vocab-parallel model.embedding {{.*}}" : (tensor<1x8x64xf32>) -> tensor<1x4x64xf32>
// SP-NEXT: model.layer 0(%[[ES]],
// SP: %[[N:.+]] = model.rms_norm %{{.+}}, %{{.+}} eps = 1.000000e-05 : (tensor<1x4x64xf32>, tensor<64xf32>) -> tensor<1x4x64xf32>
// SP-NEXT: %[[G:.+]] = model.all_gather %[[N]] over @mesh ["tp"] dim = 1 {{.*}} : (tensor<1x4x64xf32>) -> tensor<1x8x64xf32>
// SP-NEXT: model.linear %[[G]], {{.*}} -> tensor<1x8x32xf32>
// SP-NEXT: model.linear %[[G]], {{.*}} -> tensor<1x8x16xf32>
// SP-NEXT: model.linear %[[G]], {{.*}} -> tensor<1x8x16xf32>
// SP-NOT: model.all_gather
// SP: %[[O:.+]] = model.linear {{.*}} : (tensor<1x8x32xf32>, tensor<64x32xf32>) -> tensor<1x8x64xf32>
// SP-NEXT: %[[OS:.+]] = model.reduce_scatter %[[O]] over @mesh ["tp"] dim = 1 {{.*}} -> tensor<1x4x64xf32>
// SP-NEXT: %[[H:.+]] = model.add %{{.+}}, %[[OS]] : (tensor<1x4x64xf32>, tensor<1x4x64xf32>) -> tensor<1x4x64xf32>
// SP-NEXT: %[[N2:.+]] = model.rms_norm %[[H]]
// SP-NEXT: %[[G2:.+]] = model.all_gather %[[N2]] over @mesh ["tp"] dim = 1
// SP-NEXT: model.linear %[[G2]]
// SP-NEXT: model.linear %[[G2]]
// SP-NEXT: model.swiglu
// SP-NEXT: %[[D:.+]] = model.linear
// SP-NEXT: %[[DS:.+]] = model.reduce_scatter %[[D]] over @mesh ["tp"] dim = 1
// SP-NEXT: model.add %[[H]], %[[DS]]
// SP-NEXT: model.yield
// Backward: the gradients of the norm weights (each rank saw half of the
// tokens) are partial and summed over tp with the step's reductions.
// SP: model.all_reduce {{.*}} over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the gradients of model.norm.weight .. model.layers.0.post_attention_layernorm.weight (5 tensors, 1280 bytes); partial over tp
// SP-NEXT: model.grad_norm

// Tests GPT-2 with sequence parallelism and dropout: the position table is
// read for this rank's positions, and every dropout sees a sequence slice
// whose mask is that of its place in the whole sequence.
// RUN: printf 'model { preset: "tiny-gpt2" hidden_dropout: 0.1 embedding_dropout: 0.1 }\ndata { seq_length: 8 }\n' > %t.gpt2.textproto
// RUN: braidc %t.gpt2.textproto --tp 2 --sp --compile-to=shard | FileCheck %s --check-prefix=SPGPT2
// SPGPT2: %[[WTE:.+]] = model.reduce_scatter {{.*}} -> tensor<1x4x64xf32>
// SPGPT2-NEXT: %[[WPE:.+]] = model.position_embedding %{{.+}} for %{{.+}} seq_axis = "tp" : (tensor<128x64xf32>, tensor<1x8xi32>) -> tensor<1x4x64xf32>
// SPGPT2-NEXT: %[[X:.+]] = model.add %[[WTE]], %[[WPE]]
// SPGPT2-NEXT: model.dropout %[[X]] rate = 1.000000e-01 seq_axis = "tp" {rng_id = 0 : i64} : (tensor<1x4x64xf32>) -> tensor<1x4x64xf32>
// SPGPT2: model.reduce_scatter
// SPGPT2-NEXT: model.dropout {{.*}} seq_axis = "tp" {rng_id = 1 : i64}
// SPGPT2: model.position_embedding_grad %{{.+}} seq_axis = "tp" : (tensor<1x4x64xf32>) -> tensor<128x64xf32>

// Tests the report with sequence parallelism against the closed form
// (docs/report.md): per micro-batch, all-gathers of a 1·4·64 = 256-float
// slice: 2 per layer forward, 4 per layer backward (the row-parallel input
// gradients' dy and the column-parallel weight gradients' x), 1 before the
// output layer and 1 before the embedding gradient: 14 · 256 floats =
// 14,336 bytes; reduce-scatters of 1·8·64 = 512 floats: 2 per layer
// forward, 2 per layer backward, 1 after the embedding, 1 for the output
// layer's input gradient: 10 · 512 floats = 20,480 bytes; the loss's 24
// floats. Two micro-batches double these; once per step the 5 norm weights
// (5 · 64 floats) are summed over tp: 2 · 96 + 1,280 = 1,472 bytes of
// all-reduce.
// RUN: braidc --preset tiny-llama --seq-len 8 --tp 2 --sp --micro-batch-size 1 --global-batch-size 2 --compile-to=plan --report=%tsp.json -o /dev/null
// RUN: FileCheck %s --check-prefix=SPREPORT < %tsp.json
// RUN: braidc --preset llama2-7b --seq-len 8 --tp 2 --compile-to=shard | FileCheck %s --check-prefix=DEEP
// SPREPORT: "communication_bytes_per_step": {
// SPREPORT-NEXT: "all_gather": {
// SPREPORT-NEXT: "tp": 28672
// SPREPORT-NEXT: },
// SPREPORT-NEXT: "all_reduce": {
// SPREPORT-NEXT: "tp": 1472
// SPREPORT-NEXT: },
// SPREPORT-NEXT: "grad_norm": {
// SPREPORT-NEXT: "tp": 8
// SPREPORT-NEXT: },
// SPREPORT-NEXT: "reduce_scatter": {
// SPREPORT-NEXT: "tp": 40960

// A deep model (llama2-7b's 32 layers, more values than the layout map
// first holds): layer 31's q, k and v projections are column-parallel,
// 4096 / 2 rows each (32 heads of 128, halved).
// DEEP: model.layer 31({{.*}}) : (tensor<1x8x4096xf32>, tensor<4096xf32>, tensor<2048x4096xf32>, tensor<2048x4096xf32>, tensor<2048x4096xf32>,

// Tests the fused gate/up projection (--fuse-mlp) at tp = 2: the weight
// [gate; up] (352 x 64) is column-parallel in two blocks of 176 rows, each
// rank holding 88 gate rows then 88 up rows (176 x 64); the packed SwiGLU
// reads its 176 columns and makes this rank's 88; its gradient is one packed
// tensor; down_proj stays row-parallel.
// FUSED-LABEL: func.func @train_step(
// FUSED-SAME: tensor<176x64xf32> {model.param = "model.layers.0.mlp.gate_up_proj.weight", model.shard_blocks = array<i64: 176, 176>, model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// FUSED-SAME: tensor<64x88xf32> {model.param = "model.layers.0.mlp.down_proj.weight", model.sharding = #model.sharding<@mesh, [{}, {"tp"}]>}
// FUSED: %[[GU:.+]] = model.linear {{.*}} : (tensor<1x8x64xf32>, tensor<176x64xf32>) -> tensor<1x8x176xf32>
// FUSED-NEXT: model.swiglu %[[GU]] : (tensor<1x8x176xf32>) -> tensor<1x8x88xf32>
// FUSED: model.swiglu_grad %{{.+}}, %{{.+}} : (tensor<1x8x176xf32>, tensor<1x8x88xf32>) -> tensor<1x8x176xf32>
