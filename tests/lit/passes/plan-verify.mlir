// RUN: braid-opt %s -split-input-file --plan-verify -verify-diagnostics | FileCheck %s

// Tests a plan that verifies, left as it is: stage 0 sends in its forward
// what stage 1 receives in its forward, and the reverse in the backward,
// micro-batch by micro-batch under 1F1B; both stages meet at the clipping
// norm over pp in update.
// CHECK-LABEL: plan.func @u1 {
// CHECK-NEXT: plan.kernel "GRAD_NORM"
// CHECK: plan.stage 0 {{{.*}}schedule = ["F0:0", "F1:1", "B0:0", "B1:1"]
// CHECK-NEXT: plan.stage 1 {{{.*}}schedule = ["F0:0", "B0:0", "F1:0", "B1:0"]
plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0 slots = 2
plan.buffer @g0 : tensor<4xf32> role = "activation" stage = 0
plan.buffer @w0 : tensor<4xf32> role = "gradient" name = "w0" stage = 0
plan.buffer @n0 : tensor<f32> role = "activation" stage = 0
plan.buffer @s0 : tensor<f32> role = "activation" stage = 0
plan.buffer @x1 : tensor<4xf32> role = "activation" stage = 1 slots = 1
plan.buffer @w1 : tensor<4xf32> role = "gradient" name = "w1" stage = 1
plan.buffer @n1 : tensor<f32> role = "activation" stage = 1
plan.buffer @s1 : tensor<f32> role = "activation" stage = 1
plan.func @f0 {
  plan.kernel "ZERO" [] -> [@x0] {} {provenance = "f0"}
  plan.kernel "SEND" [@x0] -> [] {peer = 1 : i64} {provenance = "activation", rank_axis = "pp"}
}
plan.func @b0 {
  plan.kernel "RECV" [] -> [@g0] {peer = 1 : i64} {provenance = "gradient", rank_axis = "pp"}
  plan.kernel "ADD" [@w0, @g0] -> [@w0] {} {provenance = "b0"}
}
plan.func @u0 {
  plan.kernel "GRAD_NORM" [@w0] -> [@n0, @s0] {max_norm = 1.0 : f64, split_inputs = 1 : i64} {group = ["pp"]}
}
plan.func @f1 {
  plan.kernel "RECV" [] -> [@x1] {peer = -1 : i64} {provenance = "activation", rank_axis = "pp"}
}
plan.func @b1 {
  plan.kernel "ADD" [@w1, @x1] -> [@w1] {} {provenance = "b1"}
  plan.kernel "SEND" [@x1] -> [] {peer = -1 : i64} {provenance = "gradient", rank_axis = "pp"}
}
plan.func @u1 {
  plan.kernel "GRAD_NORM" [@w1] -> [@n1, @s1] {max_norm = 1.0 : f64, split_inputs = 1 : i64} {group = ["pp"]}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, update = @u0, slots = 2 : i64, schedule = ["F0:0", "F1:1", "B0:0", "B1:1"]}
plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1, update = @u1, slots = 1 : i64, schedule = ["F0:0", "B0:0", "F1:0", "B1:0"]}

// -----

// Tests a collective in flight beside kernels that touch other bytes, or
// only read what it only reads: accepted.
// CHECK-LABEL: plan.func @f {
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@g] -> [@g] {async = 1 : i64}
plan.buffer @g : tensor<16xf32> role = "gradient" offset = 0
plan.buffer @x : tensor<16xf32> role = "activation" offset = 64
plan.buffer @r : tensor<16xf32> role = "bucket" offset = 128
plan.buffer @k : tensor<4xf32> role = "activation" offset = 192
plan.func @f {
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {async = 1 : i64} {group = ["dp"], provenance = "sum"}
  plan.kernel "REDUCE_SCATTER" [@r] -> [@k] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "rs"}
  plan.kernel "ADD" [@x, @r] -> [@x] {} {provenance = "reads what rs only reads"}
  plan.kernel "WAIT" [@g] -> [] {} {provenance = "sum: done"}
  plan.kernel "WAIT" [@r, @k] -> [] {} {provenance = "rs: done"}
  plan.kernel "ADD" [@g, @g] -> [@g] {} {provenance = "after"}
}

// -----

// Tests that a stage waiting for a message its peer never sends is a
// deadlock, named with both stages and the operations they wait in: stage
// 1 receives twice in its forward, stage 0 sends once, then waits for the
// gradient stage 1 never gets to send.
// expected-error @below {{plan-verify: the pipeline deadlocks: stage 0 waits in 'RECV' (gradient) in the backward of micro-batch 0 for stage 1; stage 1 waits in 'RECV' (second activation) in the forward of micro-batch 0 for stage 0}}
module {
  plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0
  plan.buffer @g0 : tensor<4xf32> role = "activation" stage = 0
  plan.buffer @x1 : tensor<4xf32> role = "activation" stage = 1
  plan.buffer @y1 : tensor<4xf32> role = "activation" stage = 1
  plan.func @f0 {
    plan.kernel "SEND" [@x0] -> [] {peer = 1 : i64} {provenance = "activation", rank_axis = "pp"}
  }
  plan.func @b0 {
    plan.kernel "RECV" [] -> [@g0] {peer = 1 : i64} {provenance = "gradient", rank_axis = "pp"}
  }
  plan.func @f1 {
    plan.kernel "RECV" [] -> [@x1] {peer = -1 : i64} {provenance = "activation", rank_axis = "pp"}
    plan.kernel "RECV" [] -> [@y1] {peer = -1 : i64} {provenance = "second activation", rank_axis = "pp"}
  }
  plan.func @b1 {
    plan.kernel "SEND" [@x1] -> [] {peer = -1 : i64} {provenance = "gradient", rank_axis = "pp"}
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
  plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
}

// -----

// Tests that a message received into a buffer of another type is refused,
// naming both ends.
// expected-error @below {{plan-verify: stage 0 sends 'SEND' (activation) in the forward of micro-batch 0 of 16 bytes (tensor<4xf32>) but stage 1 receives it in 'RECV' (activation) in the forward of micro-batch 0 into tensor<8xf32>}}
module {
  plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0
  plan.buffer @x1 : tensor<8xf32> role = "activation" stage = 1
  plan.func @f0 {
    plan.kernel "SEND" [@x0] -> [] {peer = 1 : i64} {provenance = "activation", rank_axis = "pp"}
  }
  plan.func @b0 {
  }
  plan.func @f1 {
    plan.kernel "RECV" [] -> [@x1] {peer = -1 : i64} {provenance = "activation", rank_axis = "pp"}
  }
  plan.func @b1 {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
  plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
}

// -----

// Tests that two stages meeting at different collectives over pp are
// refused, and that a message nobody receives is reported.
// expected-error @below {{plan-verify: stages 0 and 1 meet at different collectives: 'GRAD_NORM' in update and 'ALL_REDUCE' in update}}
module {
  plan.buffer @g0 : tensor<4xf32> role = "gradient" stage = 0
  plan.buffer @n0 : tensor<f32> role = "activation" stage = 0
  plan.buffer @s0 : tensor<f32> role = "activation" stage = 0
  plan.buffer @g1 : tensor<4xf32> role = "gradient" stage = 1
  plan.func @f0 {
  }
  plan.func @b0 {
  }
  plan.func @u0 {
    plan.kernel "GRAD_NORM" [@g0] -> [@n0, @s0] {max_norm = 1.0 : f64, split_inputs = 1 : i64} {group = ["pp"]}
  }
  plan.func @f1 {
  }
  plan.func @b1 {
  }
  plan.func @u1 {
    plan.kernel "ALL_REDUCE" [@g1] -> [@g1] {} {group = ["pp"]}
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, update = @u0, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
  plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1, update = @u1, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
}

// -----

// Tests a message that is never received.
// expected-error @below {{plan-verify: stage 0 sends 'SEND' (activation) in the forward of micro-batch 0 that stage 1 never receives}}
module {
  plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0
  plan.func @f0 {
    plan.kernel "SEND" [@x0] -> [] {peer = 1 : i64} {provenance = "activation", rank_axis = "pp"}
  }
  plan.func @b0 {
  }
  plan.func @f1 {
  }
  plan.func @b1 {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
  plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
}

// -----

// Tests that a kernel writing bytes a reduce-scatter in flight writes is
// refused (t shares k's bytes 64..96), naming both and the bytes.
plan.buffer @g : tensor<16xf32> role = "bucket" offset = 0
plan.buffer @k : tensor<8xf32> role = "activation" offset = 64
plan.buffer @t : tensor<4xf32> role = "activation" offset = 80
plan.func @last_micro_step {
  plan.kernel "REDUCE_SCATTER" [@g] -> [@k] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "rs"}
  // expected-error @below {{plan-verify: 'ZERO' (backward) in @last_micro_step touches @t (bytes 80..96 of the arena) while 'REDUCE_SCATTER' (rs), in flight, uses @k (bytes 64..96)}}
  plan.kernel "ZERO" [] -> [@t] {} {provenance = "backward"}
  plan.kernel "WAIT" [@g, @k] -> [] {} {provenance = "rs: done"}
}

// -----

// Tests that reading what a collective in flight writes is refused too,
// and writing what it reads (here the in-place sum's own buffer), while
// reading what it only reads is not: the first clash is the ADD's output.
plan.buffer @g : tensor<16xf32> role = "bucket" offset = 0
plan.buffer @k : tensor<8xf32> role = "activation" offset = 64
plan.buffer @x : tensor<8xf32> role = "activation" offset = 128
plan.func @f {
  plan.kernel "REDUCE_SCATTER" [@g] -> [@k] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "rs"}
  plan.kernel "ADD" [@g, @g] -> [@x] {} {provenance = "reads the input"}
  // expected-error @below {{plan-verify: 'ADD' (reads the block) in @f touches @k (bytes 64..96 of the arena) while 'REDUCE_SCATTER' (rs), in flight, uses @k (bytes 64..96)}}
  plan.kernel "ADD" [@k, @x] -> [@x] {} {provenance = "reads the block"}
  plan.kernel "WAIT" [@k] -> [] {} {provenance = "rs: done"}
}

// -----

// Tests that the in-place sum's own buffer is not written while in flight.
plan.buffer @g : tensor<16xf32> role = "gradient" offset = 0
plan.func @f {
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {async = 1 : i64} {group = ["dp"], provenance = "sum"}
  // expected-error @below {{plan-verify: 'ZERO' (overwrites) in @f touches @g (bytes 0..64 of the arena) while 'ALL_REDUCE' (sum), in flight, uses @g (bytes 0..64)}}
  plan.kernel "ZERO" [] -> [@g] {} {provenance = "overwrites"}
  plan.kernel "WAIT" [@g] -> [] {} {provenance = "sum: done"}
}

// -----

// Tests a collective started and never waited for.
plan.buffer @g : tensor<16xf32> role = "gradient" offset = 0
plan.buffer @h : tensor<16xf32> role = "gradient" offset = 64
plan.func @f {
  // expected-error @below {{plan-verify: 'ALL_REDUCE' (sum) in @f is never waited for (no WAIT names its buffers before the function ends)}}
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {async = 1 : i64} {group = ["dp"], provenance = "sum"}
  plan.kernel "WAIT" [@h] -> [] {} {provenance = "another"}
}

// -----

// Tests a message to a stage that does not exist.
// expected-error @below {{plan-verify: stage 0 has 'SEND' (activation) in the forward of micro-batch 0 with stage 5, which is not a stage}}
module {
  plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0
  plan.func @f0 {
    plan.kernel "SEND" [@x0] -> [] {peer = 5 : i64} {provenance = "activation", rank_axis = "pp"}
  }
  plan.func @b0 {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
}

// -----

// Tests a SEND without its peer.
plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0
plan.func @f0 {
  // expected-error @below {{'plan.kernel' op has no peer}}
  plan.kernel "SEND" [@x0] -> [] {} {provenance = "activation", rank_axis = "pp"}
}
plan.func @b0 {
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}

// -----

// Tests a schedule call that does not parse.
plan.func @f0 {
}
plan.func @b0 {
}
// expected-error @below {{'plan.stage' op schedule call "F0" is malformed}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0", "B0:0"]}

// -----

// Tests a call on a chunk the stage does not have.
plan.func @f0 {
}
plan.func @b0 {
}
// expected-error @below {{'plan.stage' op schedule call "F0.1:0" names a chunk the stage does not have}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0.1:0", "B0:0"]}

// -----

// Tests a weight-gradient call on a stage without backward_weight.
plan.func @f0 {
}
plan.func @b0 {
}
// expected-error @below {{'plan.stage' op schedule call "W0:0" is not F, B or W (W needs a backward_weight)}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0:0", "B0:0", "W0:0"]}

// -----

// Tests a call of another kind.
plan.func @f0 {
}
plan.func @b0 {
}
// expected-error @below {{'plan.stage' op schedule call "X0:0" is not F, B or W (W needs a backward_weight)}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, slots = 1 : i64, schedule = ["F0:0", "X0:0"]}

// -----

// Tests that the evaluation is proved too: braid-run runs each stage's
// eval_forward on every micro-batch and waits for its sends after each
// call. The step's schedule is sound, but stage 1's evaluation copy receives
// twice where stage 0's sends once: stage 1's second receive of micro-batch
// 0 takes micro-batch 1's activation, and its first receive of micro-batch
// 1 waits for a send that never comes (stage 0 has finished).
// expected-error @below {{plan-verify: the evaluation deadlocks: stage 0 has finished; stage 1 waits in 'RECV' (activation) in the evaluation of micro-batch 1 for stage 0}}
module {
  plan.buffer @x0 : tensor<4xf32> role = "activation" stage = 0
  plan.buffer @x1 : tensor<4xf32> role = "activation" stage = 1
  plan.buffer @y1 : tensor<4xf32> role = "activation" stage = 1
  plan.func @f0 {
    plan.kernel "SEND" [@x0] -> [] {peer = 1 : i64} {provenance = "activation", rank_axis = "pp"}
  }
  plan.func @b0 {
    plan.kernel "RECV" [] -> [@x0] {peer = 1 : i64} {provenance = "gradient", rank_axis = "pp"}
  }
  plan.func @f1 {
    plan.kernel "RECV" [] -> [@x1] {peer = -1 : i64} {provenance = "activation", rank_axis = "pp"}
  }
  plan.func @b1 {
    plan.kernel "SEND" [@x1] -> [] {peer = -1 : i64} {provenance = "gradient", rank_axis = "pp"}
  }
  plan.func @e0 {
    plan.kernel "SEND" [@x0] -> [] {peer = 1 : i64} {provenance = "activation", rank_axis = "pp"}
  }
  plan.func @e1 {
    plan.kernel "RECV" [] -> [@x1] {peer = -1 : i64} {provenance = "activation", rank_axis = "pp"}
    plan.kernel "RECV" [] -> [@y1] {peer = -1 : i64} {provenance = "second activation", rank_axis = "pp"}
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f0, backward = @b0, eval_forward = @e0, slots = 1 : i64, schedule = ["F0:0", "B0:0", "F1:0", "B1:0"]}
  plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b1, eval_forward = @e1, slots = 1 : i64, schedule = ["F0:0", "B0:0", "F1:0", "B1:0"]}
}
