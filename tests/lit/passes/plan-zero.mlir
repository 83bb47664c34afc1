// RUN: split-file %s %t
// RUN: braid-opt %t/step.mlir -plan-zero=zero=1 | FileCheck %s --check-prefix=ZERO1
// RUN: braid-opt %t/step.mlir -plan-zero="zero=1 bucket-bytes=64" | FileCheck %s --check-prefix=SMALL
// RUN: braid-opt %t/step.mlir -plan-zero=zero=2 | FileCheck %s --check-prefix=ZERO2
// RUN: braid-opt %t/step.mlir -plan-zero | FileCheck %s --check-prefix=NONE
// RUN: braid-opt %t/mixed.mlir -plan-zero=zero=1 | FileCheck %s --check-prefix=MIXED
// RUN: braid-opt %t/params.mlir -plan-zero=zero=3 | FileCheck %s --check-prefix=ZERO3
// RUN: braid-opt %t/stages.mlir -plan-zero=zero=1 | FileCheck %s --check-prefix=STAGES
// RUN: braid-opt %t/refusals.mlir -split-input-file -plan-zero=zero=1 -verify-diagnostics
// RUN: braid-opt %t/options.mlir -plan-zero=zero=4 -verify-diagnostics
// RUN: braid-opt %t/bucket-bytes.mlir -plan-zero="zero=1 bucket-bytes=0" -verify-diagnostics

// plan-zero on updates as plan-lower makes them: in place ALL_REDUCEs of
// the gradients, a GRAD_NORM, an ADAMW per parameter; buffers numbered in
// the order of making, the optimizer's last.

//--- step.mlir
// A data-parallel step (dp = 2) with two 16-float weights (weight decay
// 0.1) and a 4-float bias (no decay); backward makes w2's gradient, then
// w1's, then the bias's.
//
// Tests ZeRO-1: a bucket per kind (w1 and w2; the bias), each a flat
// gradient and a flat parameter buffer of 32 floats (padded to a multiple
// of dp x 16), whose views the gradients and parameters become (at their
// byte offsets), moments and a block of 16 floats (32 / dp); the
// per-parameter moments are gone. The new buffers take the numbers from the
// norm's first (b15) on, in the order made; the norm's result keeps its
// name. update: a reduce-scatter per bucket, the norm over the blocks, AdamW
// on this rank's block (rank_axis dp), an all-gather of each flat parameter
// buffer in place.
// ZERO1-NOT: exp_avg:w
// ZERO1: plan.buffer @b0 : tensor<4x4xf32> role = "parameter" name = "w1" view_of = @b16 view_offset = 0
// ZERO1-NEXT: plan.buffer @b1 : tensor<4x4xf32> role = "parameter" name = "w2" view_of = @b16 view_offset = 64
// ZERO1-NEXT: plan.buffer @b2 : tensor<4xf32> role = "parameter" name = "bias" view_of = @b21 view_offset = 0
// ZERO1: plan.buffer @b11 : tensor<4x4xf32> role = "gradient" name = "w1" view_of = @b15 view_offset = 0
// ZERO1-NEXT: plan.buffer @b12 : tensor<4x4xf32> role = "gradient" name = "w2" view_of = @b15 view_offset = 64
// ZERO1-NEXT: plan.buffer @b13 : tensor<4xf32> role = "gradient" name = "bias" view_of = @b20 view_offset = 0
// ZERO1-NEXT: plan.buffer @b14 : tensor<4x4xf32> role = "activation"
// ZERO1-NEXT: plan.buffer @b15 : tensor<32xf32> role = "bucket"
// ZERO1-NEXT: plan.buffer @b16 : tensor<32xf32> role = "bucket"
// ZERO1-NEXT: plan.buffer @b17 : tensor<16xf32> role = "optimizer_state" name = "exp_avg:zero bucket 0"
// ZERO1-NEXT: plan.buffer @b18 : tensor<16xf32> role = "optimizer_state" name = "exp_avg_sq:zero bucket 0"
// ZERO1-NEXT: plan.buffer @b19 : tensor<16xf32> role = "activation"
// ZERO1-NEXT: plan.buffer @b20 : tensor<32xf32> role = "bucket"
// ZERO1-NEXT: plan.buffer @b21 : tensor<32xf32> role = "bucket"
// ZERO1-NEXT: plan.buffer @b22 : tensor<16xf32> role = "optimizer_state" name = "exp_avg:zero bucket 1"
// ZERO1-NEXT: plan.buffer @b23 : tensor<16xf32> role = "optimizer_state" name = "exp_avg_sq:zero bucket 1"
// ZERO1-NEXT: plan.buffer @b24 : tensor<16xf32> role = "activation"
// ZERO1-NEXT: plan.buffer @b25 : tensor<f32> role = "activation" name = "grad_norm"
// ZERO1-NEXT: plan.buffer @b26 : tensor<f32> role = "activation"
// ZERO1-NEXT: plan.func @zero_grads {
// ZERO1: plan.func @update {
// ZERO1-NEXT: plan.kernel "REDUCE_SCATTER" [@b15] -> [@b19] {dim = 0 : i64} {group = ["dp"], provenance = "zero: data-parallel sum of the gradients of w1 .. w2 (2 tensors), each rank keeping its block of 16 of its 32 elements"}
// ZERO1-NEXT: plan.kernel "REDUCE_SCATTER" [@b20] -> [@b24] {dim = 0 : i64} {group = ["dp"], provenance = "zero: data-parallel sum of the gradients of bias, each rank keeping its block of 16 of its 32 elements"}
// ZERO1-NEXT: plan.kernel "GRAD_NORM" [@b19, @b24] -> [@b25, @b26] {max_norm = 1.000000e+00 : f64, replicated_copies = 1 : i64, split_inputs = 2 : i64} {group = ["dp"],
// ZERO1-NEXT: plan.kernel "ADAMW" [@b16, @b19, @b17, @b18, @b9, @b10, @b26] -> [@b16, @b17, @b18] {{.*}}weight_decay = 1.000000e-01 : f64} {{.*}}rank_axis = "dp"}
// ZERO1-NEXT: plan.kernel "ADAMW" [@b21, @b24, @b22, @b23, @b9, @b10, @b26] -> [@b21, @b22, @b23] {{.*}}weight_decay = 0.000000e+00 : f64} {{.*}}rank_axis = "dp"}
// ZERO1-NEXT: plan.kernel "ALL_GATHER" [@b16] -> [@b16] {dim = 0 : i64} {group = ["dp"],
// ZERO1-NEXT: plan.kernel "ALL_GATHER" [@b21] -> [@b21] {dim = 0 : i64} {group = ["dp"],
// ZERO1-NEXT: {{^ *}}}{{$}}

// Tests buckets of at most 64 bytes: w1 and w2 (64 bytes each) apart.
// SMALL: plan.func @update {
// SMALL-NEXT: "REDUCE_SCATTER" {{.*}} provenance = "zero: data-parallel sum of the gradients of w1, each rank keeping its block of 16 of its 32 elements"
// SMALL-NEXT: "REDUCE_SCATTER" {{.*}} provenance = "zero: data-parallel sum of the gradients of w2,
// SMALL-NEXT: "REDUCE_SCATTER" {{.*}} provenance = "zero: data-parallel sum of the gradients of bias,
// SMALL-NEXT: "GRAD_NORM" {{.*}} split_inputs = 3 : i64

// Tests ZeRO-2: the buckets follow backward's order (w2's gradient is
// complete first), and each is reduced in the micro-step: its flat
// gradients (a temporary) zeroed right before the first kernel writing one
// of them, reduce-scattered (async) right after the last, finished (WAIT)
// right before the next bucket's starts or at the end, and the block added
// to the accumulated one (a gradient buffer) that zero_grads zeroes instead
// of the per-parameter gradients, and that update reads.
// ZERO2: plan.buffer @b15 : tensor<32xf32> role = "activation"
// ZERO2: plan.buffer @b20 : tensor<16xf32> role = "gradient" name = "grad:zero bucket 0"
// ZERO2: plan.func @zero_grads {
// ZERO2-NEXT: plan.kernel "ZERO" [] -> [@b20] {} {provenance = "zero_grads: zero bucket 0"}
// ZERO2-NEXT: plan.kernel "ZERO" [] -> [@b26] {} {provenance = "zero_grads: zero bucket 1"}
// ZERO2-NEXT: {{^ *}}}{{$}}
// ZERO2-NEXT: plan.func @micro_step {
// ZERO2-NEXT: plan.kernel "LINEAR"
// ZERO2-NEXT: plan.kernel "ZERO" [] -> [@b15] {} {provenance = "zero: the gradients of w2 .. w1 (2 tensors) start from zero each micro-batch"}
// ZERO2-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" [@b14, @b14] -> [@b12]
// ZERO2-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" [@b14, @b14] -> [@b11]
// ZERO2-NEXT: plan.kernel "REDUCE_SCATTER" [@b15] -> [@b19] {async = 1 : i64, dim = 0 : i64} {group = ["dp"],
// ZERO2-NEXT: plan.kernel "ZERO" [] -> [@b21]
// ZERO2-NEXT: plan.kernel "BIAS_GRAD" [@b14] -> [@b13]
// ZERO2-NEXT: plan.kernel "WAIT" [@b15, @b19] -> []
// ZERO2-NEXT: plan.kernel "ADD" [@b20, @b19] -> [@b20]
// ZERO2-NEXT: plan.kernel "REDUCE_SCATTER" [@b21] -> [@b25] {async = 1 : i64, dim = 0 : i64}
// ZERO2-NEXT: plan.kernel "WAIT" [@b21, @b25] -> []
// ZERO2-NEXT: plan.kernel "ADD" [@b26, @b25] -> [@b26]
// ZERO2-NEXT: {{^ *}}}{{$}}
// ZERO2-NEXT: plan.func @update {
// ZERO2-NEXT: plan.kernel "GRAD_NORM" [@b20, @b26] -> [@b27, @b28]
// ZERO2-NEXT: plan.kernel "ADAMW" [@b16, @b20,
// ZERO2-NEXT: plan.kernel "ADAMW" [@b22, @b26,

// Tests zero = 0: the plan as it was.
// NONE: plan.buffer @b3 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg:w1"
// NONE: plan.func @update {
// NONE-NEXT: plan.kernel "ALL_REDUCE" [@b12, @b11, @b13]
// NONE-NEXT: plan.kernel "GRAD_NORM" [@b11, @b12, @b13] -> [@b15, @b16]
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4x4xf32> role = "parameter" name = "w1"
plan.buffer @b1 : tensor<4x4xf32> role = "parameter" name = "w2"
plan.buffer @b2 : tensor<4xf32> role = "parameter" name = "bias"
plan.buffer @b3 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg:w1"
plan.buffer @b4 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg_sq:w1"
plan.buffer @b5 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg:w2"
plan.buffer @b6 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg_sq:w2"
plan.buffer @b7 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:bias"
plan.buffer @b8 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:bias"
plan.buffer @b9 : tensor<f32> role = "input" name = "lr"
plan.buffer @b10 : tensor<i64> role = "input" name = "step"
plan.buffer @b11 : tensor<4x4xf32> role = "gradient" name = "w1"
plan.buffer @b12 : tensor<4x4xf32> role = "gradient" name = "w2"
plan.buffer @b13 : tensor<4xf32> role = "gradient" name = "bias"
plan.buffer @b14 : tensor<4x4xf32> role = "activation"
plan.buffer @b15 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b16 : tensor<f32> role = "activation"
plan.func @zero_grads {
  plan.kernel "ZERO" [] -> [@b11] {} {provenance = "zero_grads: w1"}
  plan.kernel "ZERO" [] -> [@b12] {} {provenance = "zero_grads: w2"}
  plan.kernel "ZERO" [] -> [@b13] {} {provenance = "zero_grads: bias"}
}
plan.func @micro_step {
  plan.kernel "LINEAR" [@b14, @b0] -> [@b14] {transpose_w = 0 : i64} {provenance = "forward"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@b14, @b14] -> [@b12] {transpose_w = 0 : i64} {provenance = "w2's gradient"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@b14, @b14] -> [@b11] {transpose_w = 0 : i64} {provenance = "w1's gradient"}
  plan.kernel "BIAS_GRAD" [@b14] -> [@b13] {} {provenance = "bias's gradient"}
}
plan.func @update {
  plan.kernel "ALL_REDUCE" [@b12, @b11, @b13] -> [@b12, @b11, @b13] {} {group = ["dp"], provenance = "sums"}
  plan.kernel "GRAD_NORM" [@b11, @b12, @b13] -> [@b15, @b16] {max_norm = 1.0 : f64} {provenance = "norm"}
  plan.kernel "ADAMW" [@b0, @b11, @b3, @b4, @b9, @b10, @b16] -> [@b0, @b3, @b4] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw w1"}
  plan.kernel "ADAMW" [@b1, @b12, @b5, @b6, @b9, @b10, @b16] -> [@b1, @b5, @b6] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw w2"}
  plan.kernel "ADAMW" [@b2, @b13, @b7, @b8, @b9, @b10, @b16] -> [@b2, @b7, @b8] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64} {provenance = "adamw bias"}
}

//--- mixed.mlir
// Tests mixed precision (bf16 weights, f32 gradients and master weights; dp
// = 4): the flat parameters are bf16, the bucket's master weights an f32
// block, which AdamW updates and rounds into the rank's block of the flat
// parameters; the per-parameter master weights are gone (their number
// taken).
// MIXED-NOT: "master:w"
// MIXED: plan.buffer @b6 : tensor<64xf32> role = "bucket"
// MIXED-NEXT: plan.buffer @b7 : tensor<64xbf16> role = "bucket"
// MIXED-NEXT: plan.buffer @b8 : tensor<16xf32> role = "optimizer_state" name = "exp_avg:zero bucket 0"
// MIXED-NEXT: plan.buffer @b9 : tensor<16xf32> role = "optimizer_state" name = "exp_avg_sq:zero bucket 0"
// MIXED-NEXT: plan.buffer @b10 : tensor<16xf32> role = "optimizer_state" name = "master:zero bucket 0"
// MIXED-NEXT: plan.buffer @b11 : tensor<16xf32> role = "activation"
// MIXED-NEXT: plan.buffer @b12 : tensor<f32> role = "activation" name = "grad_norm"
// MIXED-NEXT: plan.buffer @b13 : tensor<f32> role = "activation"
// MIXED-NOT: plan.buffer
// MIXED: plan.kernel "ADAMW" [@b10, @b11, @b8, @b9, @b3, @b4, @b13] -> [@b10, @b8, @b9, @b7]
// MIXED-NEXT: plan.kernel "ALL_GATHER" [@b7] -> [@b7]
model.mesh @mesh axes = ["dp", "tp"] sizes = [4, 1]
plan.buffer @b0 : tensor<8xbf16> role = "parameter" name = "w"
plan.buffer @b1 : tensor<8xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<8xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<8xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.buffer @b8 : tensor<8xf32> role = "optimizer_state" name = "master:w"
plan.func @zero_grads {
  plan.kernel "ZERO" [] -> [@b5] {} {provenance = "zero_grads: w"}
}
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@b5] {} {provenance = "w's gradient"}
}
plan.func @update {
  plan.kernel "ALL_REDUCE" [@b5] -> [@b5] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64} {provenance = "norm"}
  plan.kernel "ADAMW" [@b8, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b8, @b1, @b2, @b0] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw w"}
}

//--- params.mlir
// Tests ZeRO-3: the rank keeps only its block of the parameters (b16,
// block_of the flat buffer, which becomes a temporary). The micro-step's
// forward and its backward (from the first kernel reading loss_grad) each
// gather w before their first use of it: the forward into the flat buffer,
// the backward into a temporary of its own (b17), whose view of w (b18)
// the backward's kernel reads instead. AdamW updates the kept block, and
// nothing gathers in update.
// ZERO3: plan.buffer @b0 : tensor<4x4xf32> role = "parameter" name = "w" view_of = @b9 view_offset = 0
// ZERO3-NEXT: plan.buffer @b18 : tensor<4x4xf32> role = "parameter" name = "w" view_of = @b17 view_offset = 0
// ZERO3: plan.buffer @b9 : tensor<32xf32> role = "activation"
// ZERO3: plan.buffer @b16 : tensor<16xf32> role = "parameter" name = "zero bucket 0" block_of = @b9
// ZERO3-NEXT: plan.buffer @b17 : tensor<32xf32> role = "activation"
// ZERO3: plan.func @micro_step {
// ZERO3-NEXT: plan.kernel "COPY" [@b16] -> [@b9] {} {{.*}}rank_axis = "dp"}
// ZERO3-NEXT: plan.kernel "ALL_GATHER" [@b9] -> [@b9] {async = 1 : i64, dim = 0 : i64} {group = ["dp"],
// ZERO3-NEXT: plan.kernel "WAIT" [@b9] -> []
// ZERO3-NEXT: plan.kernel "LINEAR" [@b5, @b0] -> [@b5]
// ZERO3-NEXT: plan.kernel "COPY" [@b16] -> [@b17]
// ZERO3-NEXT: plan.kernel "ALL_GATHER" [@b17] -> [@b17] {async = 1 : i64, dim = 0 : i64}
// ZERO3-NEXT: plan.kernel "WAIT" [@b17] -> []
// ZERO3-NEXT: plan.kernel "LINEAR_GRAD_INPUT" [@b6, @b18] -> [@b5]
// ZERO3: plan.func @update {
// ZERO3-NEXT: plan.kernel "GRAD_NORM"
// ZERO3-NEXT: plan.kernel "ADAMW" [@b16, @b13, @b10, @b11, @b3, @b4, @b15] -> [@b16, @b10, @b11] {{.*}} {provenance = "zero: AdamW on this rank's block of w"}
// ZERO3-NEXT: {{^ *}}}{{$}}
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4x4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<1x4xf32> role = "activation"
plan.buffer @b6 : tensor<1x4xf32> role = "input" name = "loss_grad"
plan.buffer @b7 : tensor<4x4xf32> role = "gradient" name = "w"
plan.buffer @b8 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b9 : tensor<f32> role = "activation"
plan.func @zero_grads {
  plan.kernel "ZERO" [] -> [@b7] {} {provenance = "zero_grads: w"}
}
plan.func @micro_step {
  plan.kernel "LINEAR" [@b5, @b0] -> [@b5] {transpose_w = 0 : i64} {provenance = "forward"}
  plan.kernel "LINEAR_GRAD_INPUT" [@b6, @b0] -> [@b5] {transpose_w = 0 : i64} {provenance = "backward"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@b5, @b6] -> [@b7] {transpose_w = 0 : i64} {provenance = "w's gradient"}
}
plan.func @update {
  plan.kernel "ALL_REDUCE" [@b7] -> [@b7] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "GRAD_NORM" [@b7] -> [@b8, @b9] {max_norm = 1.0 : f64} {provenance = "norm"}
  plan.kernel "ADAMW" [@b0, @b7, @b1, @b2, @b3, @b4, @b9] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw w"}
}

//--- stages.mlir
// Tests two pipeline stages (dp = 2): each stage's update gets its buckets
// (over its own buffers, the norm's group pp and dp); stage 0's new
// buffers take b6 to b12, and stage 1's buffers, made after them, move up
// by the 5 more there are (b8 is b13), before stage 1's own take b19 to
// b25.
// STAGES: plan.buffer @b0 : tensor<4x4xf32> role = "parameter" name = "w0" stage = 0 view_of = @b7 view_offset = 0
// STAGES: plan.buffer @b12 : tensor<f32> role = "activation" stage = 0
// STAGES-NEXT: plan.func @stage0_zero_grads {
// STAGES: plan.kernel "GRAD_NORM" [@b10] -> [@b11, @b12] {{.*}} {group = ["pp", "dp"],
// STAGES: plan.stage 0
// STAGES-NEXT: plan.buffer @b13 : tensor<4xf32> role = "parameter" name = "w1" stage = 1 view_of = @b20 view_offset = 0
// STAGES-NEXT: plan.buffer @b16 : tensor<f32> role = "input" name = "lr" stage = 1
// STAGES-NEXT: plan.buffer @b17 : tensor<i64> role = "input" name = "step" stage = 1
// STAGES-NEXT: plan.buffer @b18 : tensor<4xf32> role = "gradient" name = "w1" stage = 1 view_of = @b19 view_offset = 0
// STAGES: plan.buffer @b25 : tensor<f32> role = "activation" stage = 1
// STAGES-NEXT: plan.func @stage1_zero_grads {
// STAGES-NEXT: plan.kernel "ZERO" [] -> [@b18]
// STAGES: plan.func @stage1_update {
// STAGES-NEXT: plan.kernel "REDUCE_SCATTER" [@b19] -> [@b23]
// STAGES-NEXT: plan.kernel "GRAD_NORM" [@b23] -> [@b24, @b25]
// STAGES-NEXT: plan.kernel "ADAMW" [@b20, @b23, @b21, @b22, @b16, @b17, @b25] -> [@b20, @b21, @b22]
model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 2, 1]
plan.buffer @b0 : tensor<4x4xf32> role = "parameter" name = "w0" stage = 0
plan.buffer @b1 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg:w0" stage = 0
plan.buffer @b2 : tensor<4x4xf32> role = "optimizer_state" name = "exp_avg_sq:w0" stage = 0
plan.buffer @b3 : tensor<f32> role = "input" name = "lr" stage = 0
plan.buffer @b4 : tensor<i64> role = "input" name = "step" stage = 0
plan.buffer @b5 : tensor<4x4xf32> role = "gradient" name = "w0" stage = 0
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm" stage = 0
plan.buffer @b7 : tensor<f32> role = "activation" stage = 0
plan.func @stage0_zero_grads {
  plan.kernel "ZERO" [] -> [@b5] {} {provenance = "zero_grads: w0"}
}
plan.func @stage0_forward {
}
plan.func @stage0_backward {
  plan.kernel "ZERO" [] -> [@b5] {} {provenance = "w0's gradient"}
}
plan.func @stage0_update {
  plan.kernel "ALL_REDUCE" [@b5] -> [@b5] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64, replicated_copies = 1 : i64, split_inputs = 1 : i64} {group = ["pp"], provenance = "norm"}
  plan.kernel "ADAMW" [@b0, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw w0"}
}
plan.stage 0 {backward = @stage0_backward, first_layer = 0 : i64, forward = @stage0_forward, num_layers = 1 : i64, update = @stage0_update, zero_grads = @stage0_zero_grads}
plan.buffer @b8 : tensor<4xf32> role = "parameter" name = "w1" stage = 1
plan.buffer @b9 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w1" stage = 1
plan.buffer @b10 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w1" stage = 1
plan.buffer @b11 : tensor<f32> role = "input" name = "lr" stage = 1
plan.buffer @b12 : tensor<i64> role = "input" name = "step" stage = 1
plan.buffer @b13 : tensor<4xf32> role = "gradient" name = "w1" stage = 1
plan.buffer @b14 : tensor<f32> role = "activation" name = "grad_norm" stage = 1
plan.buffer @b15 : tensor<f32> role = "activation" stage = 1
plan.func @stage1_zero_grads {
  plan.kernel "ZERO" [] -> [@b13] {} {provenance = "zero_grads: w1"}
}
plan.func @stage1_forward {
}
plan.func @stage1_backward {
  plan.kernel "ZERO" [] -> [@b13] {} {provenance = "w1's gradient"}
}
plan.func @stage1_update {
  plan.kernel "ALL_REDUCE" [@b13] -> [@b13] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "GRAD_NORM" [@b13] -> [@b14, @b15] {max_norm = 1.0 : f64, replicated_copies = 1 : i64, split_inputs = 1 : i64} {group = ["pp"], provenance = "norm"}
  plan.kernel "ADAMW" [@b8, @b13, @b9, @b10, @b11, @b12, @b15] -> [@b8, @b9, @b10] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw w1"}
}
plan.stage 1 {backward = @stage1_backward, first_layer = 1 : i64, forward = @stage1_forward, num_layers = 1 : i64, update = @stage1_update, zero_grads = @stage1_zero_grads}

//--- refusals.mlir
// Tests an update without the clipping norm.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
// expected-error @below {{plan-zero: @update has no GRAD_NORM: ZeRO clips the gradients over the ranks' blocks of them}}
plan.func @update {
  plan.kernel "ALL_REDUCE" [@b5] -> [@b5] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "ADAMW" [@b0, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw"}
}

// -----

// Tests a gradient summed over tp only.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.func @update {
  plan.kernel "ALL_REDUCE" [@b5] -> [@b5] {} {group = ["tp"], provenance = "sum"}
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64} {provenance = "norm"}
  // expected-error @below {{plan-zero: the gradient of w is not summed over dp: ZeRO shards over the data-parallel ranks}}
  plan.kernel "ADAMW" [@b0, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw"}
}

// -----

// Tests a gradient that no ALL_REDUCE sums.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.func @update {
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64} {provenance = "norm"}
  // expected-error @below {{plan-zero: the gradient of w is not summed over dp}}
  plan.kernel "ADAMW" [@b0, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw"}
}

// -----

// Tests another kernel between the optimizer's.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.func @update {
  plan.kernel "ALL_REDUCE" [@b5] -> [@b5] {} {group = ["dp"], provenance = "sum"}
  // expected-error @below {{plan-zero: a kernel in the middle of @update's optimizer (expected plan-lower's update: ALL_REDUCE, GRAD_NORM and ADAMW kernels in one run)}}
  plan.kernel "ZERO" [] -> [@b5] {} {provenance = "other"}
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64} {provenance = "norm"}
  plan.kernel "ADAMW" [@b0, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw"}
}

// -----

// Tests an ALL_REDUCE that is not a sum in place.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.buffer @b8 : tensor<4xf32> role = "activation"
plan.func @update {
  // expected-error @below {{plan-zero: an ALL_REDUCE in @update that is not a sum of gradients in place over mesh axes}}
  plan.kernel "ALL_REDUCE" [@b5] -> [@b8] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64} {provenance = "norm"}
  plan.kernel "ADAMW" [@b0, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw"}
}

// -----

// Tests two norms.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.func @update {
  plan.kernel "ALL_REDUCE" [@b5] -> [@b5] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64} {provenance = "norm"}
  // expected-error @below {{plan-zero: @update has two GRAD_NORM kernels}}
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64} {provenance = "norm"}
  plan.kernel "ADAMW" [@b0, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw"}
}

// -----

// Tests the norm's scale read outside the optimizer.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.func @micro_step {
  // expected-error @below {{plan-zero: uses @b7, which the optimizer of @update alone should use}}
  plan.kernel "COPY" [@b7] -> [@b6] {} {provenance = "reads the scale"}
}
plan.func @update {
  plan.kernel "ALL_REDUCE" [@b5] -> [@b5] {} {group = ["dp"], provenance = "sum"}
  plan.kernel "GRAD_NORM" [@b5] -> [@b6, @b7] {max_norm = 1.0 : f64} {provenance = "norm"}
  plan.kernel "ADAMW" [@b0, @b5, @b1, @b2, @b3, @b4, @b7] -> [@b0, @b1, @b2] {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64} {provenance = "adamw"}
}

// -----

// Tests a plan without update.
// expected-error @below {{plan-zero needs the @update function of plan-lower}}
module {
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@b5] {} {provenance = "w's gradient"}
}
}

// -----

// Tests a pipeline stage without update.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
plan.buffer @b0 : tensor<4xf32> role = "parameter" name = "w"
plan.buffer @b1 : tensor<4xf32> role = "optimizer_state" name = "exp_avg:w"
plan.buffer @b2 : tensor<4xf32> role = "optimizer_state" name = "exp_avg_sq:w"
plan.buffer @b3 : tensor<f32> role = "input" name = "lr"
plan.buffer @b4 : tensor<i64> role = "input" name = "step"
plan.buffer @b5 : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @b6 : tensor<f32> role = "activation" name = "grad_norm"
plan.buffer @b7 : tensor<f32> role = "activation"
plan.func @stage0_forward {
}
plan.func @stage0_backward {
}
// expected-error @below {{plan-zero: pipeline stage 0 has no update function}}
plan.stage 0 {backward = @stage0_backward, first_layer = 0 : i64, forward = @stage0_forward, num_layers = 1 : i64}

//--- options.mlir
// expected-error @below {{plan-zero: zero = 4 is not a ZeRO stage (0: none, 1, 2 or 3)}}
module {
}

//--- bucket-bytes.mlir
// expected-error @below {{plan-zero: bucket-bytes = 0 must be at least 1}}
module {
}
