// RUN: split-file %s %t
// RUN: braid-opt %t/two-stages.mlir -plan-schedule=micro-batches=3 | FileCheck %s --check-prefix=ONEF
// RUN: braid-opt %t/two-stages.mlir -plan-schedule="scheme=gpipe micro-batches=3" | FileCheck %s --check-prefix=GPIPE
// RUN: braid-opt %t/weight-split.mlir -plan-schedule="scheme=zb-h1 micro-batches=3" | FileCheck %s --check-prefix=ZB
// RUN: braid-opt %t/chunks.mlir -plan-schedule="scheme=interleaved micro-batches=2" | FileCheck %s --check-prefix=CHUNKS
// RUN: braid-opt %t/no-stages.mlir -plan-schedule="scheme=gpipe micro-batches=3" | FileCheck %s --check-prefix=NONE
// RUN: braid-opt %t/stages.mlir -split-input-file -plan-schedule=micro-batches=2 -verify-diagnostics
// RUN: braid-opt %t/unknown-scheme.mlir -plan-schedule=scheme=zigzag -verify-diagnostics
// RUN: braid-opt %t/no-micro-batches.mlir -plan-schedule=micro-batches=0 -verify-diagnostics
// RUN: braid-opt %t/one-chunk.mlir -plan-schedule="scheme=interleaved micro-batches=2" -verify-diagnostics
// RUN: braid-opt %t/uneven-groups.mlir -plan-schedule="scheme=interleaved micro-batches=3" -verify-diagnostics
// RUN: braid-opt %t/chunks-1f1b.mlir -plan-schedule=micro-batches=2 -verify-diagnostics
// RUN: braid-opt %t/no-weight.mlir -plan-schedule="scheme=zb-h1 micro-batches=2" -verify-diagnostics
// RUN: braid-opt %t/shared-slots.mlir -plan-schedule="scheme=interleaved micro-batches=2" -verify-diagnostics

// two-stages.mlir: two pipeline stages of one forward and one backward
// each; x0 and x1, what a micro-batch's forward keeps for its backward, are
// slotted buffers.

// Tests 1F1B on 3 micro-batches: stage 0 runs one forward ahead (at most
// pp - 0 = 2 micro-batches in flight), then alternates; the last stage
// alternates from the start. Each forward takes the lowest free slot, each
// backward frees it: stage 0 needs 2 slots, stage 1 one; a stage's slotted
// buffers get its count, and the module names the scheme.
// ONEF: module attributes {plan.schedule = "1f1b"}
// ONEF: plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0 slots = 2
// ONEF: plan.buffer @w0 : tensor<4xf32> role = "parameter" name = "w0" stage = 0{{$}}
// ONEF: plan.buffer @x1 : tensor<4xf32> role = "activation" stage = 1 slots = 1
// ONEF: plan.stage 0 {{{.*}}schedule = ["F0:0", "F1:1", "B0:0", "F2:0", "B1:1", "B2:0"], slots = 2 : i64}
// ONEF: plan.stage 1 {{{.*}}schedule = ["F0:0", "B0:0", "F1:0", "B1:0", "F2:0", "B2:0"], slots = 1 : i64}

// Tests GPipe: all forwards, then all backwards; every micro-batch holds a
// slot until its backward, so 3 on each stage.
// GPIPE: module attributes {plan.schedule = "gpipe"}
// GPIPE: plan.buffer @x0 : {{.*}} slots = 3
// GPIPE: plan.buffer @x1 : {{.*}} slots = 3
// GPIPE: plan.stage 0 {{{.*}}schedule = ["F0:0", "F1:1", "F2:2", "B0:0", "B1:1", "B2:2"], slots = 3 : i64}
// GPIPE: plan.stage 1 {{{.*}}schedule = ["F0:0", "F1:1", "F2:2", "B0:0", "B1:1", "B2:2"], slots = 3 : i64}

// Tests ZB-H1 on stages with backward_weight: each micro-batch's weight
// gradients (W) come after its input gradients (B), in the same slot,
// which they free; the last stage defers micro-batch 0's W into the bubble
// at the end, so it keeps that slot and needs 2.
// ZB: module attributes {plan.schedule = "zb-h1"}
// ZB: plan.stage 0 {{{.*}}schedule = [{{.*}}"B0:0", "W0:0", {{.*}}"B2:0", "W2:0"], slots = 2 : i64}
// ZB: plan.stage 1 {{{.*}}schedule = ["F0:0", "B0:0", {{.*}}, "W0:0"], slots = 2 : i64}

// Tests the interleaved schedule over 2 chunks a rank: chunk 1's calls are
// named "F<m>.1"; each chunk has slots of its own (chunk_slots), which size
// the slotted buffers its functions name; the stage's slots are the most.
// CHUNKS: module attributes {plan.schedule = "interleaved"}
// CHUNKS: plan.buffer @x1 : {{.*}} stage = 1 slots = 2
// CHUNKS-NEXT: plan.buffer @y1 : {{.*}} stage = 1 slots = 1
// CHUNKS: plan.stage 0 {{{.*}}chunk_slots = array<i64: 2, 2>, {{.*}}schedule = [{{.*}}"F0.1:0"{{.*}}"B0.1:0"{{.*}}], slots = 2 : i64}
// CHUNKS: plan.stage 1 {{{.*}}chunk_slots = array<i64: 2, 1>, {{.*}}slots = 2 : i64}

// Tests a plan without stages: nothing to order.
// NONE-NOT: plan.schedule
// NONE: plan.func @micro_step

//--- two-stages.mlir
plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0 slots = 1
plan.buffer @w0 : tensor<4xf32> role = "parameter" name = "w0" stage = 0
plan.buffer @x1 : tensor<4xf32> role = "activation" stage = 1 slots = 1
plan.func @f0 {
  plan.kernel "ZERO" [] -> [@x0] {} {provenance = "f0"}
}
plan.func @b0 {
  plan.kernel "ADD" [@x0, @w0] -> [@w0] {} {provenance = "b0"}
}
plan.func @f1 {
  plan.kernel "ZERO" [] -> [@x1] {} {provenance = "f1"}
}
plan.func @b1 {
  plan.kernel "ADD" [@x1, @x1] -> [@x1] {} {provenance = "b1"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0}
plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1}

//--- weight-split.mlir
plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0 slots = 1
plan.buffer @x1 : tensor<4xf32> role = "activation" stage = 1 slots = 1
plan.func @f0 {
  plan.kernel "ZERO" [] -> [@x0] {} {provenance = "f0"}
}
plan.func @b0 {
  plan.kernel "ADD" [@x0, @x0] -> [@x0] {} {provenance = "b0"}
}
plan.func @w0 {
  plan.kernel "ADD" [@x0, @x0] -> [@x0] {} {provenance = "w0"}
}
plan.func @f1 {
  plan.kernel "ZERO" [] -> [@x1] {} {provenance = "f1"}
}
plan.func @b1 {
  plan.kernel "ADD" [@x1, @x1] -> [@x1] {} {provenance = "b1"}
}
plan.func @w1 {
  plan.kernel "ADD" [@x1, @x1] -> [@x1] {} {provenance = "w1"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, backward_weight = @w0}
plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1, backward_weight = @w1}

//--- chunks.mlir
plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0 slots = 1
plan.buffer @y0 : tensor<4xf32> role = "activation" stage = 0 slots = 1
plan.buffer @x1 : tensor<4xf32> role = "activation" stage = 1 slots = 1
plan.buffer @y1 : tensor<4xf32> role = "activation" stage = 1 slots = 1
plan.func @f0 {
  plan.kernel "ZERO" [] -> [@x0] {} {provenance = "f0"}
}
plan.func @b0 {
  plan.kernel "ADD" [@x0, @x0] -> [@x0] {} {provenance = "b0"}
}
plan.func @f0c1 {
  plan.kernel "ZERO" [] -> [@y0] {} {provenance = "f0c1"}
}
plan.func @b0c1 {
  plan.kernel "ADD" [@y0, @y0] -> [@y0] {} {provenance = "b0c1"}
}
plan.func @f1 {
  plan.kernel "ZERO" [] -> [@x1] {} {provenance = "f1"}
}
plan.func @b1 {
  plan.kernel "ADD" [@x1, @x1] -> [@x1] {} {provenance = "b1"}
}
plan.func @f1c1 {
  plan.kernel "ZERO" [] -> [@y1] {} {provenance = "f1c1"}
}
plan.func @b1c1 {
  plan.kernel "ADD" [@y1, @y1] -> [@y1] {} {provenance = "b1c1"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 2 : i64, forward = @f0, backward = @b0, chunks = [{forward = @f0c1, backward = @b0c1}]}
plan.stage 1 {first_layer = 1 : i64, num_layers = 2 : i64, forward = @f1, backward = @b1, chunks = [{forward = @f1c1, backward = @b1c1}]}

//--- no-stages.mlir
plan.buffer @x : tensor<4xf32> role = "activation"
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "k"}
}

//--- stages.mlir
// Tests stages numbered with a gap.
plan.func @f {
}
plan.func @b {
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b}
// expected-error @below {{'plan.stage' op stages must be numbered 0 to 1 once each, found 2}}
plan.stage 2 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f, backward = @b}

// -----

// Tests stages with different numbers of model chunks.
plan.func @f {
}
plan.func @b {
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b}
// expected-error @below {{'plan.stage' op has 2 model chunks but stage 0 has 1}}
plan.stage 1 {first_layer = 1 : i64, num_layers = 2 : i64, forward = @f, backward = @b, chunks = [{forward = @f, backward = @b}]}

// -----

// Tests a stage with weight-gradient functions under 1F1B, which would
// never call them.
plan.func @f {
}
plan.func @b {
}
plan.func @w {
}
// expected-error @below {{'plan.stage' op has a backward_weight, which the 1f1b schedule does not run}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, backward_weight = @w}

//--- unknown-scheme.mlir
// Tests a scheme that does not exist.
// expected-error @below {{plan-schedule: unknown pipeline schedule 'zigzag', expected one of gpipe, 1f1b, interleaved, zb-h1}}
module {
  plan.func @f {
  }
  plan.func @b {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b}
}

//--- no-micro-batches.mlir
// Tests micro-batches = 0.
// expected-error @below {{plan-schedule: micro-batches m = 0, expected at least 1}}
module {
  plan.func @f {
  }
  plan.func @b {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b}
}

//--- one-chunk.mlir
// Tests the interleaved schedule on stages of one chunk.
// expected-error @below {{plan-schedule: the interleaved schedule has v = 1 chunks per rank, expected at least 2 (use 1f1b for one)}}
module {
  plan.func @f {
  }
  plan.func @b {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b}
}

//--- uneven-groups.mlir
// Tests the interleaved schedule on 3 micro-batches over 2 ranks.
// expected-error @below {{plan-schedule: the interleaved schedule has m = 3 micro-batches for p = 2 ranks, expected a multiple of p}}
module {
  plan.func @f {
  }
  plan.func @b {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 2 : i64, forward = @f, backward = @b, chunks = [{forward = @f, backward = @b}]}
  plan.stage 1 {first_layer = 2 : i64, num_layers = 2 : i64, forward = @f, backward = @b, chunks = [{forward = @f, backward = @b}]}
}

//--- chunks-1f1b.mlir
// Tests 1F1B on stages of two chunks.
// expected-error @below {{plan-schedule: the 1f1b schedule has v = 2 chunks per rank, expected 1 (use interleaved for virtual chunks)}}
module {
  plan.func @f {
  }
  plan.func @b {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 2 : i64, forward = @f, backward = @b, chunks = [{forward = @f, backward = @b}]}
}

//--- no-weight.mlir
// Tests ZB-H1 on a stage without weight-gradient functions.
plan.func @f {
}
plan.func @b {
}
// expected-error @below {{'plan.stage' op the zb-h1 schedule splits backward work, which needs the stage's backward_weight (plan-lower split-backward)}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b}

//--- shared-slots.mlir
// Tests a slotted buffer that the functions of two chunks name: it cannot
// take the slots of both.
// expected-error @below {{'plan.buffer' op is kept for a micro-batch by chunks 0 and 1 of stage 0, but each chunk has slots of its own}}
plan.buffer @x : tensor<4xf32> role = "activation" stage = 0 slots = 1
plan.func @f {
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "chunk 0"}
}
plan.func @b {
}
plan.func @fc {
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "chunk 1"}
}
plan.func @bc {
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 2 : i64, forward = @f, backward = @b, chunks = [{forward = @fc, backward = @bc}]}
plan.stage 1 {first_layer = 2 : i64, num_layers = 2 : i64, forward = @b, backward = @b, chunks = [{forward = @bc, backward = @bc}]}
