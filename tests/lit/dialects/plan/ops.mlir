// RUN: braid-opt %s | FileCheck %s
// RUN: braid-opt %s | braid-opt | FileCheck %s
// RUN: braid-opt %s --mlir-print-op-generic | braid-opt | FileCheck %s

// Tests that buffers, functions and kernel calls round-trip.
// CHECK: plan.buffer @x : tensor<2x3x8xf32> role = "activation" offset = 0
plan.buffer @x : tensor<2x3x8xf32> role = "activation" offset = 0
// CHECK: plan.buffer @w : tensor<16x8xf32> role = "parameter" name = "lm_head.weight" offset = 192
plan.buffer @w : tensor<16x8xf32> role = "parameter" name = "lm_head.weight" offset = 192
// CHECK: plan.buffer @y : tensor<2x3x16xf32> role = "activation"
plan.buffer @y : tensor<2x3x16xf32> role = "activation"
// CHECK: plan.buffer @g : tensor<16xf32> role = "parameter"
plan.buffer @g : tensor<16xf32> role = "parameter"
// CHECK-LABEL: plan.func @train_step {
plan.func @train_step {
  // CHECK: plan.kernel "LINEAR" [@x, @w] -> [@y] {transpose_w = 1 : i64} {provenance = "lm_head"}
  plan.kernel "LINEAR" [@x, @w] -> [@y] {transpose_w = 1 : i64} {provenance = "lm_head"}
  // CHECK: plan.kernel "ZERO" [] -> [@g] {}
  plan.kernel "ZERO" [] -> [@g] {}
  // CHECK: plan.kernel "RMS_NORM" [@y, @g] -> [@y] {eps = 1.000000e-05 : f64}
  plan.kernel "RMS_NORM" [@y, @g] -> [@y] {eps = 1.0e-05 : f64}
}

// -----

// Tests that a buffer's shard (axis, dimension, blocks) and a kernel's
// rank_axis round-trip.
// CHECK: plan.buffer @qkv : tensor<64x96xf32> role = "parameter" name = "c_attn.weight" shard = "tp" dim = 1 blocks = [64, 64, 64] offset = 0
plan.buffer @qkv : tensor<64x96xf32> role = "parameter" name = "c_attn.weight" shard = "tp" dim = 1 blocks = [64, 64, 64] offset = 0
plan.buffer @ids : tensor<2x3xi32> role = "input"
plan.buffer @e : tensor<2x3x96xf32> role = "activation"
// CHECK-LABEL: plan.func @sliced
plan.func @sliced {
  // CHECK: plan.kernel "EMBEDDING" [@qkv, @ids] -> [@e] {vocab_start_stride = 64 : i64} {rank_axis = "tp"}
  plan.kernel "EMBEDDING" [@qkv, @ids] -> [@e] {vocab_start_stride = 64 : i64} {rank_axis = "tp"}
}

// -----

// Tests that a pipeline stage round-trips its functions, slots and
// schedule, and a buffer its stage and slots.
// CHECK: plan.buffer @saved : tensor<2x4xf32> role = "activation" stage = 1 slots = 2
plan.buffer @saved : tensor<2x4xf32> role = "activation" stage = 1 slots = 2
// CHECK-LABEL: plan.func @fwd
plan.func @fwd {
  // CHECK: plan.kernel "RECV" [] -> [@saved] {peer = -1 : i64} {rank_axis = "pp"}
  plan.kernel "RECV" [] -> [@saved] {peer = -1 : i64} {rank_axis = "pp"}
}
plan.func @bwd {
}
// CHECK: plan.stage 1 {backward = @bwd, first_layer = 2 : i64, forward = @fwd, num_layers = 2 : i64, schedule = ["F0:0", "F1:1", "B0:0", "B1:1"], slots = 2 : i64}
plan.stage 1 {first_layer = 2 : i64, num_layers = 2 : i64, forward = @fwd, backward = @bwd, slots = 2 : i64, schedule = ["F0:0", "F1:1", "B0:0", "B1:1"]}

// -----

// Tests that an interleaved stage round-trips its chunks and each chunk's
// slots (chunk 1's slot 0 is not chunk 0's).
plan.func @f0 {
}
plan.func @b0 {
}
plan.func @f1 {
}
plan.func @b1 {
}
// CHECK: plan.stage 0 {backward = @b0, chunk_slots = array<i64: 2, 1>, chunks = [{backward = @b1, forward = @f1}], first_layer = 0 : i64, forward = @f0, num_layers = 2 : i64, schedule = ["F0:0", "F1:1", "F0.1:0", "B0.1:0", "F1.1:0", "B1.1:0", "B0:0", "B1:1"], slots = 2 : i64}
plan.stage 0 {first_layer = 0 : i64, num_layers = 2 : i64, forward = @f0, backward = @b0, chunks = [{forward = @f1, backward = @b1}], slots = 2 : i64, chunk_slots = array<i64: 2, 1>, schedule = ["F0:0", "F1:1", "F0.1:0", "B0.1:0", "F1.1:0", "B1.1:0", "B0:0", "B1:1"]}
