// RUN: split-file %s %t
// RUN: braid-opt %t/refusals.mlir -split-input-file -plan-overlap-grad-reduce -verify-diagnostics
// RUN: braid-opt %t/negative.mlir -plan-overlap-grad-reduce=bucket-bytes=-1 -verify-diagnostics

//--- refusals.mlir
// Tests a plan with a function of that name already.
// expected-error @below {{plan-overlap-grad-reduce: the module already has @last_micro_step}}
module {
  plan.buffer @g : tensor<4xf32> role = "gradient" name = "w"
  plan.func @micro_step {
    plan.kernel "ZERO" [] -> [@g] {} {provenance = "k0"}
  }
  plan.func @last_micro_step {
  }
  plan.func @update {
    plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}
  }
}

// -----

// Tests a stage whose backward's copy exists already.
plan.buffer @g : tensor<4xf32> role = "gradient" name = "w" stage = 0
plan.func @f {
}
plan.func @b {
  plan.kernel "ZERO" [] -> [@g] {} {provenance = "b0"}
}
plan.func @b_last {
}
plan.func @u {
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}
}
// expected-error @below {{'plan.stage' op plan-overlap-grad-reduce: the module already has @b_last}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, update = @u, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}

// -----

// Tests a schedule whose last backward names its function already (the
// pass ran).
plan.buffer @g : tensor<4xf32> role = "gradient" name = "w" stage = 0
plan.func @f {
}
plan.func @b {
  plan.kernel "ZERO" [] -> [@g] {} {provenance = "b0"}
}
plan.func @other {
}
plan.func @u {
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}
}
// expected-error @below {{'plan.stage' op plan-overlap-grad-reduce: schedule call "B0:0@other" already names its function}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, update = @u, slots = 1 : i64, schedule = ["F0:0", "B0:0@other"]}

// -----

// Tests a schedule call that does not parse.
plan.buffer @g : tensor<4xf32> role = "gradient" name = "w" stage = 0
plan.func @f {
}
plan.func @b {
  plan.kernel "ZERO" [] -> [@g] {} {provenance = "b0"}
}
plan.func @u {
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}
}
// expected-error @below {{'plan.stage' op schedule call "B0" is malformed}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, update = @u, slots = 1 : i64, schedule = ["F0:0", "B0"]}

// -----

// Tests a weight-gradient call on a stage without backward_weight.
plan.buffer @g : tensor<4xf32> role = "gradient" name = "w" stage = 0
plan.func @f {
}
plan.func @b {
  plan.kernel "ZERO" [] -> [@g] {} {provenance = "b0"}
}
plan.func @u {
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}
}
// expected-error @below {{'plan.stage' op schedule call "W0:0" names no function of the stage}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, update = @u, slots = 1 : i64, schedule = ["F0:0", "B0:0", "W0:0"]}

//--- negative.mlir
// Tests a negative bucket size.
// expected-error @below {{plan-overlap-grad-reduce: bucket-bytes is -1, expected 0 (off) or more}}
module {
}
