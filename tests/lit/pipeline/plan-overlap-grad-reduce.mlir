// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --global-batch-size 4 --compile-to=plan | FileCheck %s --check-prefix=LLAMA
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --global-batch-size 4 --grad-bucket-bytes 0 --compile-to=plan | FileCheck %s --check-prefix=LLAMAOFF
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --global-batch-size 4 --compile-to=plan | grep -o 'plan.arena_bytes = [0-9]*' > %t.on
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --global-batch-size 4 --grad-bucket-bytes 0 --compile-to=plan | grep -o 'plan.arena_bytes = [0-9]*' > %t.off
// RUN: diff %t.on %t.off
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 2 --compile-to=plan | FileCheck %s --check-prefix=ZERO
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --pp 2 --dp 2 --global-batch-size 8 --compile-to=plan | FileCheck %s --check-prefix=PIPE
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --global-batch-size 4 --compile-to=plan | FileCheck %s --check-prefix=ZERO1
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --pp 2 --dp 2 --zero 1 --global-batch-size 8 --zero-bucket-bytes 20000 --compile-to=plan | FileCheck %s --check-prefix=ZERO1TIED
// RUN: braidc --preset tiny-llama --seq-len 8 --pp 2 --dp 2 --zero 1 --schedule zb-h1 --global-batch-size 8 --zero-bucket-bytes 20000 --compile-to=plan | FileCheck %s --check-prefix=ZERO1PIPE
// RUN: not braidc --preset tiny-llama --seq-len 8 --dp 2 --grad-bucket-bytes -5 2>&1 | FileCheck %s --check-prefix=BADFLAG

// tiny-gpt2 on pp 2 x dp 2: each stage's last backward call runs a copy
// that starts its gradients' sums; the tied embedding's, which stage 0's
// update adds stage 1's part to first, stays in that update.
// PIPE-LABEL: plan.func @stage0_backward_last {
// PIPE: plan.kernel "ALL_REDUCE" {{.*}} {async = 1 : i64} {group = ["dp"]
// PIPE: plan.kernel "WAIT"
// PIPE-LABEL: plan.func @stage0_update {
// PIPE-NEXT: plan.kernel "RECV"
// PIPE-NEXT: plan.kernel "ADD" [@[[WTE:b[0-9]+]], @{{b[0-9]+}}] -> [@[[WTE]]]
// PIPE-NEXT: plan.kernel "ALL_REDUCE" [@[[WTE]]] -> [@[[WTE]]] {} {group = ["dp"]
// PIPE-NEXT: plan.kernel "GRAD_NORM"
// PIPE: plan.stage 0 {{{.*}}schedule = [{{.*}}"B3:{{[0-9]+}}@stage0_backward_last"]
// PIPE-LABEL: plan.func @stage1_backward_last {
// PIPE: plan.kernel "ALL_REDUCE" {{.*}} {async = 1 : i64} {group = ["dp"]
// PIPE-LABEL: plan.func @stage1_update {
// PIPE-NOT: group = ["dp"]
// PIPE: plan.stage 1 {{{.*}}schedule = [{{.*}}"B3:{{[0-9]+}}@stage1_backward_last"]

// tiny-llama over dp 2, two micro-batches a rank: micro_step has no
// collective over dp, last_micro_step sums every gradient (tiny-llama's
// 632064 bytes of them are one bucket of the default 25 MB) right after the
// embedding's gradient, the backward's last kernel, and waits for it; update
// starts with the clipping norm. The arena is the same as without (the
// diff above).
// LLAMA-LABEL: plan.func @micro_step {
// LLAMA-NOT: group = ["dp"]
// LLAMA: plan.func @last_micro_step {
// LLAMA: plan.kernel "EMBEDDING_GRAD"
// LLAMA-NEXT: plan.kernel "ALL_REDUCE" [{{(@b[0-9]+, )+}}@b{{[0-9]+}}] -> {{.*}} {async = 1 : i64} {group = ["dp"], provenance = "model-shard: data-parallel sum of the gradients of {{.*}} (21 tensors, 632064 bytes) (bucket 1 of 1, 632064 bytes): started on the step's last micro-batch
// LLAMA-NEXT: plan.kernel "WAIT" {{.*}} is done"}
// LLAMA-NEXT: {{^ *[}]$}}
// LLAMA-NEXT: plan.func @update {
// LLAMA-NEXT: plan.kernel "GRAD_NORM"
// LLAMAOFF-NOT: last_micro_step
// LLAMAOFF: plan.func @update {
// LLAMAOFF-NEXT: plan.kernel "ALL_REDUCE"

// ZeRO-2's buckets are reduce-scattered in every micro-batch's backward
// already: no last_micro_step.
// ZERO-NOT: last_micro_step
// ZERO: REDUCE_SCATTER

// ZeRO-1 over dp 2, two micro-batches a rank: last_micro_step starts the
// reduce-scatter of each bucket (the default 25 MB: one for the matrices,
// one for the norm weights) right after the last kernel writing one of its
// gradients, and waits for both at its end; update has none left.
// ZERO1-LABEL: plan.func @micro_step {
// ZERO1-NOT: REDUCE_SCATTER
// ZERO1-LABEL: plan.func @last_micro_step {
// ZERO1: plan.kernel "RMS_NORM_GRAD" {{.*}} {provenance = "model.rms_norm_grad in layer 0 backward"}
// ZERO1: plan.kernel "RMS_NORM_GRAD" {{.*}} {provenance = "model.rms_norm_grad in layer 0 backward"}
// ZERO1-NEXT: plan.kernel "REDUCE_SCATTER" [@[[N:b[0-9]+]]] -> [@[[NB:b[0-9]+]]] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "zero: data-parallel sum of the gradients of model.layers.0.input_layernorm.weight .. model.norm.weight (5 tensors), each rank keeping its block of 160 of its 320 elements (started on the step's last micro-batch
// ZERO1-NEXT: plan.kernel "ADD"
// ZERO1-NEXT: plan.kernel "EMBEDDING_GRAD"
// ZERO1-NEXT: plan.kernel "REDUCE_SCATTER" [@[[M:b[0-9]+]]] -> [@[[MB:b[0-9]+]]] {async = 1 : i64, dim = 0 : i64} {group = ["dp"]
// ZERO1-NEXT: plan.kernel "WAIT" [@[[N]], @[[NB]]] -> []
// ZERO1-NEXT: plan.kernel "WAIT" [@[[M]], @[[MB]]] -> []
// ZERO1-NEXT: {{^ *[}]$}}
// ZERO1-LABEL: plan.func @update {
// ZERO1-NOT: REDUCE_SCATTER
// ZERO1: plan.kernel "GRAD_NORM" [@[[MB]], @[[NB]]]

// tiny-gpt2's tied embedding on pp 2 x dp 2 with ZeRO-1: stage 0's update
// adds stage 1's part to the embedding's gradient, a view of its bucket,
// so that bucket's reduce-scatter stays in the update, after the ADD; the
// other buckets' start in the last backward.
// ZERO1TIED-LABEL: plan.func @stage0_backward_last {
// ZERO1TIED: plan.kernel "REDUCE_SCATTER" {{.*}} {async = 1 : i64
// ZERO1TIED-LABEL: plan.func @stage0_update {
// ZERO1TIED-NEXT: plan.kernel "RECV"
// ZERO1TIED-NEXT: plan.kernel "ADD" [@[[WTE:b[0-9]+]], @{{b[0-9]+}}] -> [@[[WTE]]]
// ZERO1TIED-NEXT: plan.kernel "REDUCE_SCATTER" {{.*}} {dim = 0 : i64} {group = ["dp"], provenance = "zero: data-parallel sum of the gradients of transformer.wte.weight,
// ZERO1TIED-NEXT: plan.kernel "GRAD_NORM"

// ZeRO-1 on pp 2 x dp 2 with ZB-H1 and 20 KB buckets: each stage's
// reduce-scatters start in its last calls' copies (the input gradients'
// backward B, the weight gradients' W), none is left in the updates, and
// the plan verifies (no kernel touches a block while it is in flight).
// ZERO1PIPE-LABEL: plan.func @stage0_backward_weight_last {
// ZERO1PIPE: plan.kernel "REDUCE_SCATTER" {{.*}} {async = 1 : i64, dim = 0 : i64} {group = ["dp"]
// ZERO1PIPE-LABEL: plan.func @stage0_update {
// ZERO1PIPE-NOT: REDUCE_SCATTER
// ZERO1PIPE: plan.stage 0 {{{.*}}"W3:{{[0-9]+}}@stage0_backward_weight_last"
// ZERO1PIPE-LABEL: plan.func @stage1_backward_weight_last {
// ZERO1PIPE: plan.kernel "REDUCE_SCATTER" {{.*}} {async = 1 : i64, dim = 0 : i64} {group = ["dp"]
// ZERO1PIPE-LABEL: plan.func @stage1_update {
// ZERO1PIPE-NOT: REDUCE_SCATTER
// ZERO1PIPE: plan.stage 1

// BADFLAG: parallel.grad_bucket_bytes = -5 must be 0
