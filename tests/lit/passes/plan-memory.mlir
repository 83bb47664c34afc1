// RUN: braid-opt %s --plan-memory --plan-verify -split-input-file -verify-diagnostics | FileCheck %s

// Tests that last_micro_step, a copy of micro_step with a reduce-scatter
// started in it, is placed as micro_step's alternative: its kernels take
// micro_step's positions, so t1 (dead after k1) and t2 share their space
// as they would without the copy, and the block k lives from the kernel
// the reduce-scatter follows (k1) to update, apart from t2 and t3, which
// the backward writes while it is in flight. H (a bucket) is placed first.
plan.buffer @H : tensor<16xf32> role = "bucket"
plan.buffer @h : tensor<16xf32> role = "gradient" name = "w" view_of = @H view_offset = 0
plan.buffer @k : tensor<8xf32> role = "activation"
plan.buffer @t1 : tensor<16xf32> role = "activation"
plan.buffer @t2 : tensor<16xf32> role = "activation"
plan.buffer @t3 : tensor<16xf32> role = "activation"
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@t1] {} {provenance = "k0"}
  plan.kernel "ADD" [@h, @t1] -> [@h] {} {provenance = "k1"}
  plan.kernel "ZERO" [] -> [@t2] {} {provenance = "k2"}
  plan.kernel "COPY" [@t2] -> [@t3] {} {provenance = "k3"}
}
plan.func @last_micro_step {
  plan.kernel "ZERO" [] -> [@t1] {} {provenance = "k0"}
  plan.kernel "ADD" [@h, @t1] -> [@h] {} {provenance = "k1"}
  plan.kernel "REDUCE_SCATTER" [@H] -> [@k] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "rs"}
  plan.kernel "ZERO" [] -> [@t2] {} {provenance = "k2"}
  plan.kernel "COPY" [@t2] -> [@t3] {} {provenance = "k3"}
  plan.kernel "WAIT" [@H, @k] -> [] {} {provenance = "rs: done"}
}
plan.func @update {
  plan.kernel "ADD" [@k, @k] -> [@k] {} {provenance = "u0"}
}
// CHECK-LABEL: module attributes {plan.arena_bytes = 256 : i64}
// CHECK-NEXT: plan.buffer @H : {{.*}} offset = 0
// CHECK-NEXT: plan.buffer @h : {{.*}} offset = 0
// CHECK-NEXT: plan.buffer @k : {{.*}} offset = 128
// CHECK-NEXT: plan.buffer @t1 : {{.*}} offset = 64
// CHECK-NEXT: plan.buffer @t2 : {{.*}} offset = 64
// CHECK-NEXT: plan.buffer @t3 : {{.*}} offset = 192

// -----

// Tests a pipeline stage's copy (b_last, named by the call B1 after "@"):
// the block k its reduce-scatter writes lives on through the calls after
// it (W1, whose function w comes first in the module) until update reads
// it, so w's temporary tw does not share k's space.
plan.buffer @H : tensor<16xf32> role = "bucket" stage = 0
plan.buffer @h : tensor<16xf32> role = "gradient" name = "w" stage = 0 view_of = @H view_offset = 0
plan.buffer @k : tensor<16xf32> role = "activation" stage = 0
plan.buffer @x : tensor<16xf32> role = "activation" stage = 0
plan.buffer @tw : tensor<16xf32> role = "activation" stage = 0
plan.buffer @tb : tensor<16xf32> role = "activation" stage = 0
plan.func @w {
  plan.kernel "ZERO" [] -> [@tw] {} {provenance = "w0"}
  plan.kernel "ADD" [@tw, @tw] -> [@tw] {} {provenance = "w1"}
}
plan.func @f {
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "f0"}
}
plan.func @b {
  plan.kernel "ZERO" [] -> [@tb] {} {provenance = "b0"}
  plan.kernel "ADD" [@h, @tb] -> [@h] {} {provenance = "b1"}
  plan.kernel "ADD" [@h, @h] -> [@h] {} {provenance = "b2"}
}
plan.func @b_last {
  plan.kernel "ZERO" [] -> [@tb] {} {provenance = "b0"}
  plan.kernel "ADD" [@h, @tb] -> [@h] {} {provenance = "b1"}
  plan.kernel "ADD" [@h, @h] -> [@h] {} {provenance = "b2"}
  plan.kernel "REDUCE_SCATTER" [@H] -> [@k] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "rs"}
  plan.kernel "WAIT" [@H, @k] -> [] {} {provenance = "rs: done"}
}
plan.func @u {
  plan.kernel "ADD" [@k, @k] -> [@k] {} {provenance = "u0"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, backward_weight = @w, update = @u, slots = 1 : i64, schedule = ["F0:0", "B0:0", "W0:0", "F1:0", "B1:0@b_last", "W1:0"]}
// CHECK-LABEL: module attributes {plan.arena_bytes = 192 : i64}
// CHECK-NEXT: plan.buffer @H : {{.*}} offset = 0
// CHECK-NEXT: plan.buffer @h : {{.*}} offset = 0
// CHECK-NEXT: plan.buffer @k : {{.*}} offset = 64
// CHECK-NEXT: plan.buffer @x : {{.*}} offset = 128
// CHECK-NEXT: plan.buffer @tw : {{.*}} offset = 128
// CHECK-NEXT: plan.buffer @tb : {{.*}} offset = 128

// -----

// The same stage with the copy's call last: nothing runs after it but
// update, and tb is dead when the reduce-scatter starts, so k takes the
// space of the temporaries.
plan.buffer @H : tensor<16xf32> role = "bucket" stage = 0
plan.buffer @h : tensor<16xf32> role = "gradient" name = "w" stage = 0 view_of = @H view_offset = 0
plan.buffer @k : tensor<16xf32> role = "activation" stage = 0
plan.buffer @x : tensor<16xf32> role = "activation" stage = 0
plan.buffer @tw : tensor<16xf32> role = "activation" stage = 0
plan.buffer @tb : tensor<16xf32> role = "activation" stage = 0
plan.func @w {
  plan.kernel "ZERO" [] -> [@tw] {} {provenance = "w0"}
  plan.kernel "ADD" [@tw, @tw] -> [@tw] {} {provenance = "w1"}
}
plan.func @f {
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "f0"}
}
plan.func @b {
  plan.kernel "ZERO" [] -> [@tb] {} {provenance = "b0"}
  plan.kernel "ADD" [@h, @tb] -> [@h] {} {provenance = "b1"}
  plan.kernel "ADD" [@h, @h] -> [@h] {} {provenance = "b2"}
}
plan.func @b_last {
  plan.kernel "ZERO" [] -> [@tb] {} {provenance = "b0"}
  plan.kernel "ADD" [@h, @tb] -> [@h] {} {provenance = "b1"}
  plan.kernel "ADD" [@h, @h] -> [@h] {} {provenance = "b2"}
  plan.kernel "REDUCE_SCATTER" [@H] -> [@k] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "rs"}
  plan.kernel "WAIT" [@H, @k] -> [] {} {provenance = "rs: done"}
}
plan.func @u {
  plan.kernel "ADD" [@k, @k] -> [@k] {} {provenance = "u0"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, backward_weight = @w, update = @u, slots = 1 : i64, schedule = ["F0:0", "B0:0", "W0:0", "F1:0", "W1:0", "B1:0@b_last"]}
// CHECK-LABEL: module attributes {plan.arena_bytes = 128 : i64}
// CHECK-NEXT: plan.buffer @H : {{.*}} offset = 0
// CHECK-NEXT: plan.buffer @h : {{.*}} offset = 0
// CHECK-NEXT: plan.buffer @k : {{.*}} offset = 64
// CHECK-NEXT: plan.buffer @x : {{.*}} offset = 64
// CHECK-NEXT: plan.buffer @tw : {{.*}} offset = 64
// CHECK-NEXT: plan.buffer @tb : {{.*}} offset = 64

// -----

// Tests the placement of one function's buffers: the parameter and the
// named loss live for the whole program and come first, one after the
// other at 64-byte alignment; each other buffer lives from its first
// kernel to its last and takes the first free space. b cannot share a's
// bytes (k1 reads a and writes b), nor c b's (k2); c reuses a's, dead since
// k1. The module's arena is the top.
// CHECK-LABEL: module attributes {plan.arena_bytes = 256 : i64}
// CHECK-NEXT: plan.buffer @p : {{.*}} offset = 0
// CHECK-NEXT: plan.buffer @a : {{.*}} offset = 128
// CHECK-NEXT: plan.buffer @b : {{.*}} offset = 192
// CHECK-NEXT: plan.buffer @c : {{.*}} offset = 128
// CHECK-NEXT: plan.buffer @l : {{.*}} offset = 64
plan.buffer @p : tensor<16xf32> role = "parameter" name = "w"
plan.buffer @a : tensor<4xf32> role = "activation"
plan.buffer @b : tensor<4xf32> role = "activation"
plan.buffer @c : tensor<4xf32> role = "activation"
plan.buffer @l : tensor<f32> role = "activation" name = "loss"
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@a] {} {provenance = "k0"}
  plan.kernel "ADD" [@a, @p] -> [@b] {} {provenance = "k1"}
  plan.kernel "ADD" [@b, @b] -> [@c] {} {provenance = "k2"}
  plan.kernel "COPY" [@c] -> [@l] {} {provenance = "k3"}
}

// -----

// Tests views: they take no space of their own but lie view_offset bytes
// into their bucket.
// CHECK-LABEL: module attributes {plan.arena_bytes = 192 : i64}
// CHECK-NEXT: plan.buffer @B : {{.*}} offset = 0
// CHECK-NEXT: plan.buffer @p0 : {{.*}} view_of = @B view_offset = 0 offset = 0
// CHECK-NEXT: plan.buffer @p1 : {{.*}} view_of = @B view_offset = 64 offset = 64
// CHECK-NEXT: plan.buffer @t : {{.*}} offset = 128
plan.buffer @B : tensor<32xf32> role = "bucket"
plan.buffer @p0 : tensor<8xf32> role = "parameter" name = "w0" view_of = @B view_offset = 0
plan.buffer @p1 : tensor<16xf32> role = "parameter" name = "w1" view_of = @B view_offset = 64
plan.buffer @t : tensor<4xf32> role = "activation"
plan.func @micro_step {
  plan.kernel "ADD" [@p0, @p0] -> [@t] {} {provenance = "k0"}
}

// -----

// Tests pipeline stages: each stage's buffers get an arena of their own,
// named on its plan.stage; the module's is the largest. A slotted buffer
// takes one copy per slot (x0: 2 x 64 bytes) for the whole step.
// CHECK-LABEL: module attributes {plan.arena_bytes = 192 : i64}
// CHECK-NEXT: plan.buffer @x0 : {{.*}} stage = 0 slots = 2 offset = 0
// CHECK-NEXT: plan.buffer @t0 : {{.*}} stage = 0 offset = 128
// CHECK-NEXT: plan.buffer @x1 : {{.*}} stage = 1 slots = 1 offset = 0
// CHECK: plan.stage 0 {{{.*}}plan.arena_bytes = 192 : i64
// CHECK: plan.stage 1 {{{.*}}plan.arena_bytes = 64 : i64
plan.buffer @x0 : tensor<16xf32> role = "activation" stage = 0 slots = 2
plan.buffer @t0 : tensor<16xf32> role = "activation" stage = 0
plan.buffer @x1 : tensor<4xf32> role = "activation" stage = 1 slots = 1
plan.func @f0 {
  plan.kernel "ZERO" [] -> [@x0] {} {provenance = "f0"}
  plan.kernel "ADD" [@x0, @x0] -> [@t0] {} {provenance = "f0 temp"}
}
plan.func @b0 {
  plan.kernel "ADD" [@x0, @x0] -> [@x0] {} {provenance = "b0"}
}
plan.func @f1 {
  plan.kernel "ZERO" [] -> [@x1] {} {provenance = "f1"}
}
plan.func @b1 {
  plan.kernel "ADD" [@x1, @x1] -> [@x1] {} {provenance = "b1"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 2 : i64, schedule = ["F0:0", "F1:1", "B0:0", "B1:1"]}
plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1, slots = 1 : i64, schedule = ["F0:0", "B0:0", "F1:0", "B1:0"]}

// -----

// Tests a view of a buffer that is not a bucket or a temporary.
plan.buffer @w : tensor<8xf32> role = "parameter" name = "w"
// expected-error @below {{'plan.buffer' op is a view of @w, which is not a bucket (or temporary) of its stage it fits in}}
plan.buffer @v : tensor<4xf32> role = "gradient" name = "v" view_of = @w view_offset = 0

// -----

// Tests a view past its bucket's end (16 + 32 bytes into 32).
plan.buffer @B : tensor<8xf32> role = "bucket"
// expected-error @below {{'plan.buffer' op is a view of @B, which is not a bucket (or temporary) of its stage it fits in}}
plan.buffer @v : tensor<8xf32> role = "gradient" name = "v" view_of = @B view_offset = 16

// -----

// Tests a view of another stage's bucket.
plan.buffer @B : tensor<8xf32> role = "bucket" stage = 0
// expected-error @below {{'plan.buffer' op is a view of @B, which is not a bucket (or temporary) of its stage it fits in}}
plan.buffer @v : tensor<8xf32> role = "gradient" name = "v" stage = 1 view_of = @B view_offset = 0
