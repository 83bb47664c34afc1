// RUN: braid-opt %s --plan-overlap-grad-reduce=bucket-bytes=40 -split-input-file | FileCheck %s
// RUN: braid-opt %s --plan-overlap-grad-reduce=bucket-bytes=0 -split-input-file | FileCheck %s --check-prefix=OFF
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

// Tests the buckets of a backward that finishes its gradients in the order
// g3 (16 bytes, by the first kernel), g1 (16, by the second), g2 (32, by
// the fourth, which reads it last), g0 (never written: first). At most 40
// bytes a bucket, in that order: [g0 (8), g3 (16), g1 (16)] is 40 bytes,
// then g2 (32) alone. Each bucket starts right after the last kernel that
// touches one of its gradients (g1's: the second kernel), the big one after
// the fourth; a WAIT per bucket at the end, in the order they started.
// update keeps its other kernels; the max all-reduce and the non-gradient
// one stay there.
plan.buffer @x : tensor<4xf32> role = "activation"
plan.buffer @s : tensor<1xf32> role = "activation" name = "loss_scale_sum"
plan.buffer @g0 : tensor<2xf32> role = "gradient" name = "b"
plan.buffer @g1 : tensor<4xf32> role = "gradient" name = "w1"
plan.buffer @g2 : tensor<8xf32> role = "gradient" name = "w2"
plan.buffer @g3 : tensor<4xf32> role = "gradient" name = "w3"
plan.func @zero_grads {
  plan.kernel "ZERO" [] -> [@g1] {} {provenance = "zero_grads"}
}
plan.func @micro_step {
  plan.kernel "ADD" [@g3, @x] -> [@g3] {} {provenance = "k0"}
  plan.kernel "ADD" [@g1, @x] -> [@g1] {} {provenance = "k1"}
  plan.kernel "ZERO" [] -> [@g2] {} {provenance = "k2"}
  plan.kernel "COPY" [@g2] -> [@s] {} {provenance = "k3"}
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "k4"}
}
plan.func @update {
  plan.kernel "ALL_REDUCE" [@g1, @g2, @g3, @g0] -> [@g1, @g2, @g3, @g0] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "ALL_REDUCE" [@s] -> [@s] {max = 1 : i64} {group = ["dp"], provenance = "max"}
  plan.kernel "ALL_REDUCE" [@x] -> [@x] {} {group = ["dp"], provenance = "activation"}
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "u0"}
}
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NOT: ALL_REDUCE
// CHECK-NOT: WAIT
// CHECK: plan.func @last_micro_step {
// CHECK-NEXT: plan.kernel "ADD" [@g3, @x] -> [@g3] {} {provenance = "k0"}
// CHECK-NEXT: plan.kernel "ADD" [@g1, @x] -> [@g1] {} {provenance = "k1"}
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@g0, @g3, @g1] -> [@g0, @g3, @g1] {async = 1 : i64} {group = ["dp"], provenance = "sum (bucket 1 of 2, 40 bytes): started on the step's last micro-batch
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@g2] {} {provenance = "k2"}
// CHECK-NEXT: plan.kernel "COPY" [@g2] -> [@s] {} {provenance = "k3"}
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@g2] -> [@g2] {async = 1 : i64} {group = ["dp"], provenance = "sum (bucket 2 of 2, 32 bytes)
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@x] {} {provenance = "k4"}
// CHECK-NEXT: plan.kernel "WAIT" [@g0, @g3, @g1] -> [] {} {provenance = "sum (bucket 1 of 2, 40 bytes) is done"}
// CHECK-NEXT: plan.kernel "WAIT" [@g2] -> [] {} {provenance = "sum (bucket 2 of 2, 32 bytes) is done"}
// CHECK-NEXT: }
// CHECK-NEXT: plan.func @update {
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@s] -> [@s] {max = 1 : i64}
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@x] -> [@x] {}
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@x] {} {provenance = "u0"}
// CHECK-NEXT: }

// OFF-NOT: last_micro_step
// OFF: plan.func @update {
// OFF-NEXT: plan.kernel "ALL_REDUCE" [@g1, @g2, @g3, @g0]

// -----

// Tests that a sum of gradients update touches first (here scaled before
// it) stays in update, and that nothing else happens then: no
// last_micro_step.
plan.buffer @g : tensor<4xf32> role = "gradient" name = "w"
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@g] {} {provenance = "k0"}
}
plan.func @update {
  plan.kernel "ADD" [@g, @g] -> [@g] {} {provenance = "first"}
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}
}
// CHECK-NOT: last_micro_step
// CHECK: plan.func @update {
// CHECK-NEXT: plan.kernel "ADD" [@g, @g] -> [@g] {} {provenance = "first"}
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}

// -----

// Tests a pipeline stage with split backwards: each gradient's sum starts
// in the copy of the function whose call comes last among those touching
// it (gb: the backward only, B1; gw and gbw: the weight gradients', W1,
// after B1), named by that call after an "@"; a gradient no backward
// touches (another stage's contribution) stays in update, and so does the
// maximum. Earlier calls keep their functions.
plan.buffer @x : tensor<4xf32> role = "activation" stage = 0
plan.buffer @gb : tensor<4xf32> role = "gradient" name = "b" stage = 0
plan.buffer @gw : tensor<4xf32> role = "gradient" name = "w" stage = 0
plan.buffer @gbw : tensor<4xf32> role = "gradient" name = "bw" stage = 0
plan.buffer @gx : tensor<4xf32> role = "gradient" name = "x" stage = 0
plan.func @f {
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "f"}
}
plan.func @b {
  plan.kernel "ADD" [@gb, @x] -> [@gb] {} {provenance = "b0"}
  plan.kernel "ADD" [@gbw, @x] -> [@gbw] {} {provenance = "b1"}
}
plan.func @w {
  plan.kernel "ADD" [@gbw, @x] -> [@gbw] {} {provenance = "w0"}
  plan.kernel "ADD" [@gw, @x] -> [@gw] {} {provenance = "w1"}
}
plan.func @u {
  plan.kernel "ALL_REDUCE" [@gb, @gw, @gbw, @gx] -> [@gb, @gw, @gbw, @gx] {} {group = ["dp"], provenance = "sum"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, backward_weight = @w, update = @u, slots = 1 : i64, schedule = ["F0:0", "B0:0", "W0:0", "F1:0", "B1:0", "W1:0"]}
// CHECK-LABEL: plan.func @b_last {
// CHECK-NEXT: plan.kernel "ADD" [@gb, @x] -> [@gb] {} {provenance = "b0"}
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@gb] -> [@gb] {async = 1 : i64} {group = ["dp"], provenance = "sum (bucket 1 of 1, 16 bytes): started
// CHECK-NEXT: plan.kernel "ADD" [@gbw, @x] -> [@gbw] {} {provenance = "b1"}
// CHECK-NEXT: plan.kernel "WAIT" [@gb] -> [] {} {provenance = "sum (bucket 1 of 1, 16 bytes) is done"}
// CHECK-NEXT: }
// CHECK-LABEL: plan.func @w_last {
// CHECK-NEXT: plan.kernel "ADD" [@gbw, @x] -> [@gbw] {} {provenance = "w0"}
// CHECK-NEXT: plan.kernel "ADD" [@gw, @x] -> [@gw] {} {provenance = "w1"}
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@gbw, @gw] -> [@gbw, @gw] {async = 1 : i64} {group = ["dp"], provenance = "sum (bucket 1 of 1, 32 bytes): started
// CHECK-NEXT: plan.kernel "WAIT" [@gbw, @gw] -> [] {} {provenance = "sum (bucket 1 of 1, 32 bytes) is done"}
// CHECK-NEXT: }
// CHECK-NEXT: plan.func @u {
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@gx] -> [@gx] {} {group = ["dp"], provenance = "sum"}
// CHECK-NEXT: }
// CHECK-NEXT: plan.stage 0 {{{.*}}schedule = ["F0:0", "B0:0", "W0:0", "F1:0", "B1:0@b_last", "W1:0@w_last"]

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
