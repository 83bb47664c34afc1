// RUN: braid-opt %s --plan-overlap-grad-reduce=bucket-bytes=40 -split-input-file | FileCheck %s
// RUN: braid-opt %s --plan-overlap-grad-reduce=bucket-bytes=0 -split-input-file | FileCheck %s --check-prefix=OFF

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

// -----

// Tests ZeRO-1's reduce-scatters, each of a whole bucket: H's starts
// (async) right after k1, the last kernel that touches one of its views,
// and a WAIT naming the bucket and the block finishes it at the copy's end;
// G's stays in update, which adds to G's view before summing it.
// CHECK-LABEL: plan.func @last_micro_step {
// CHECK-NEXT: plan.kernel "ADD" [@h2, @x] -> [@h2] {} {provenance = "k0"}
// CHECK-NEXT: plan.kernel "ADD" [@h1, @x] -> [@h1] {} {provenance = "k1"}
// CHECK-NEXT: plan.kernel "REDUCE_SCATTER" [@H] -> [@k] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "zero: sum of H (started on the step's last micro-batch
// CHECK-NEXT: plan.kernel "ADD" [@g1, @g1] -> [@g1] {} {provenance = "k2"}
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@x] {} {provenance = "k3"}
// CHECK-NEXT: plan.kernel "WAIT" [@H, @k] -> [] {} {provenance = "zero: sum of H: done"}
// CHECK-NEXT: {{^ *}}}
// CHECK-NEXT: plan.func @update {
// CHECK-NEXT: plan.kernel "ADD" [@g1, @g1] -> [@g1]
// CHECK-NEXT: plan.kernel "REDUCE_SCATTER" [@G] -> [@j] {dim = 0 : i64} {group = ["dp"], provenance = "zero: sum of G"}
// CHECK-NEXT: plan.kernel "GRAD_NORM"
// CHECK-NEXT: {{^ *}}}
// With bucket-bytes = 0 both stay.
// OFF: plan.kernel "ADD" [@g1, @g1] -> [@g1] {} {provenance = "another stage's part"}
// OFF-NEXT: plan.kernel "REDUCE_SCATTER" [@H] -> [@k] {dim = 0 : i64}
plan.buffer @H : tensor<8xf32> role = "bucket"
plan.buffer @h1 : tensor<4xf32> role = "gradient" name = "w1" view_of = @H view_offset = 0
plan.buffer @h2 : tensor<4xf32> role = "gradient" name = "w2" view_of = @H view_offset = 16
plan.buffer @k : tensor<4xf32> role = "activation"
plan.buffer @G : tensor<8xf32> role = "bucket"
plan.buffer @g1 : tensor<8xf32> role = "gradient" name = "w3" view_of = @G view_offset = 0
plan.buffer @j : tensor<4xf32> role = "activation"
plan.buffer @x : tensor<4xf32> role = "activation"
plan.buffer @n : tensor<f32> role = "activation"
plan.buffer @s : tensor<f32> role = "activation"
plan.func @micro_step {
  plan.kernel "ADD" [@h2, @x] -> [@h2] {} {provenance = "k0"}
  plan.kernel "ADD" [@h1, @x] -> [@h1] {} {provenance = "k1"}
  plan.kernel "ADD" [@g1, @g1] -> [@g1] {} {provenance = "k2"}
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "k3"}
}
plan.func @update {
  plan.kernel "ADD" [@g1, @g1] -> [@g1] {} {provenance = "another stage's part"}
  plan.kernel "REDUCE_SCATTER" [@H] -> [@k] {dim = 0 : i64} {group = ["dp"], provenance = "zero: sum of H"}
  plan.kernel "REDUCE_SCATTER" [@G] -> [@j] {dim = 0 : i64} {group = ["dp"], provenance = "zero: sum of G"}
  plan.kernel "GRAD_NORM" [@k, @j] -> [@n, @s] {max_norm = 1.0 : f64, split_inputs = 2 : i64} {group = ["dp"]}
}
