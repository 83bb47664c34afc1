// RUN: braidc --preset tiny-llama --seq-len 8 --compile-to=plan | FileCheck %s
// RUN: braidc --preset tiny-llama --seq-len 8 --emit=plan-text | FileCheck %s --check-prefix=TEXT
// RUN: braidc --preset tiny-llama --seq-len 8 --emit=plan -o %t.plan && test -s %t.plan
// RUN: not braidc --preset tiny-llama --compile-to=model --emit=plan -o %t.plan 2>&1 | FileCheck %s --check-prefix=PHASE
// RUN: not braidc --preset tiny-llama --emit=binary 2>&1 | FileCheck %s --check-prefix=EMIT

// Tests the plan of one tiny-llama training step: named parameter, input,
// optimizer-state and gradient buffers at static offsets; the step as
// zero_grads (every gradient buffer zeroed once), micro_step (one kernel per
// op, layers inlined, weight gradients accumulated straight into their
// gradient buffers) and update (clipping, AdamW in place).
// CHECK: module attributes {{{.*}}plan.arena_bytes = [[ARENA:[0-9]+]] : i64
// CHECK: plan.buffer @[[EMB:b[0-9]+]] : tensor<512x64xf32> role = "parameter" name = "model.embed_tokens.weight" offset = 0
// CHECK: plan.buffer @{{b[0-9]+}} : tensor<1x8xi32> role = "input" name = "tokens" offset =
// CHECK: plan.buffer @[[M:b[0-9]+]] : tensor<512x64xf32> role = "optimizer_state" name = "exp_avg:model.embed_tokens.weight"
// CHECK: plan.buffer @[[V:b[0-9]+]] : tensor<512x64xf32> role = "optimizer_state" name = "exp_avg_sq:model.embed_tokens.weight"
// CHECK: plan.buffer @[[G:b[0-9]+]] : tensor<512x64xf32> role = "gradient" name = "model.embed_tokens.weight"
// CHECK: plan.buffer @[[GQ:b[0-9]+]] : tensor<64x64xf32> role = "gradient" name = "model.layers.0.self_attn.q_proj.weight"
// CHECK: plan.buffer @{{b[0-9]+}} : tensor<f32> role = "activation" name = "loss"
// CHECK-LABEL: plan.func @zero_grads {
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@[[G]]] {} {provenance = "zero_grads: model.embed_tokens.weight"}
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NOT: "ZERO"
// CHECK: plan.kernel "EMBEDDING" [@[[EMB]],
// Attention keeps its log-sum-exp (a second output), which its backward
// reads (a sixth input) instead of computing the forward again.
// CHECK: plan.kernel "ATTENTION" [@{{b[0-9]+}}, @{{b[0-9]+}}, @{{b[0-9]+}}] -> [@[[OUT0:b[0-9]+]], @[[LSE0:b[0-9]+]]] {alibi = 0 : i64, causal = 1 : i64, heads = 4 : i64, kv_heads = 2 : i64, scale = 2.500000e-01 : f64} {provenance = "model.attention in layer 0"}
// So does cross-entropy, for its gradient.
// CHECK: plan.kernel "CROSS_ENTROPY" [@[[LOGITS:b[0-9]+]], @{{b[0-9]+}}] -> [@{{b[0-9]+}}, @[[CELSE:b[0-9]+]]]
// CHECK: plan.kernel "CROSS_ENTROPY_GRAD" [@[[LOGITS]], @{{b[0-9]+}}, @{{b[0-9]+}}, @[[CELSE]]] ->
// CHECK: plan.kernel "ATTENTION_GRAD" [@{{b[0-9]+}}, @{{b[0-9]+}}, @{{b[0-9]+}}, @[[OUT0]], @{{b[0-9]+}}, @[[LSE0]]] -> [{{.*}}] {{.*}} {provenance = "model.attention_grad in layer 0 backward"}
// CHECK: plan.kernel "LINEAR_GRAD_WEIGHT" {{.*}} -> [@[[GQ]]] {transpose_w = 1 : i64} {provenance = "model.linear_grad_weight in layer 0 backward"}
// CHECK: plan.kernel "EMBEDDING_GRAD" {{.*}} -> [@[[G]]]
// CHECK-NOT: "GRAD_NORM"
// CHECK-LABEL: plan.func @update {
// CHECK-NEXT: plan.kernel "GRAD_NORM"
// CHECK: plan.kernel "ADAMW" [@[[EMB]], @[[G]], @[[M]], @[[V]], {{.*}}] -> [@[[EMB]], @[[M]], @[[V]]]

// TEXT: version: SCHEMA_VERSION_CURRENT
// TEXT: kernel: ADAMW
// TEXT: training {
// TEXT: micro_batches: 1
// TEXT: step {
// TEXT-NEXT: zero_grads: "zero_grads"
// TEXT-NEXT: micro_step: "micro_step"
// TEXT-NEXT: update: "update"
// PHASE: braidc: error: --emit=plan needs --compile-to=plan, not model
// EMIT: braidc: error: --emit=binary is not one of mlir, plan, plan-text

// The report of a planned compile states the arena and the bytes by role:
// tiny-llama has 158,016 parameters (tests/lit/tools/braidc-dump-and-report.test
// derives the count), f32: 632,064 bytes of parameters and as many of
// gradients, twice that of AdamW moments.
// RUN: braidc --preset tiny-llama --seq-len 8 --compile-to=plan --report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t.json
// REPORT: "memory": {
// REPORT-NEXT: "arena_bytes": {{[1-9][0-9]*}},
// REPORT-NEXT: "buffer_bytes_by_role": {
// REPORT: "gradient": 632064,
// REPORT: "optimizer_state": 1264128,
// REPORT-NEXT: "parameter": 632064
// REPORT: "total": 158016
