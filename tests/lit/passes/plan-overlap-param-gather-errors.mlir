// RUN: split-file %s %t
// RUN: braid-opt %t/existing.mlir -split-input-file --plan-overlap-param-gather=micro-batches=2 -verify-diagnostics
// RUN: braid-opt %t/negative.mlir --plan-overlap-param-gather=micro-batches=-1 -verify-diagnostics

//--- existing.mlir
// Tests a module that already has first_micro_step: refused.
// expected-error @below {{plan-overlap-param-gather: the module already has @first_micro_step}}
module {
  plan.buffer @A : tensor<8xf32> role = "bucket"
  plan.buffer @p0 : tensor<8xf32> role = "parameter" name = "w0" view_of = @A view_offset = 0
  plan.func @micro_step {
    plan.kernel "ZERO" [] -> [@p0] {} {provenance = "k0"}
  }
  plan.func @first_micro_step {
  }
  plan.func @update {
    plan.kernel "ALL_GATHER" [@A] -> [@A] {dim = 0 : i64} {group = ["dp"], provenance = "gather A"}
  }
}

// -----

// Tests a module that already has gather_params (the pass ran).
// expected-error @below {{plan-overlap-param-gather: the module already has @gather_params}}
module {
  plan.buffer @A : tensor<8xf32> role = "bucket"
  plan.buffer @p0 : tensor<8xf32> role = "parameter" name = "w0" view_of = @A view_offset = 0
  plan.func @micro_step {
    plan.kernel "ZERO" [] -> [@p0] {} {provenance = "k0"}
  }
  plan.func @update {
    plan.kernel "ALL_GATHER" [@A] -> [@A] {dim = 0 : i64} {group = ["dp"], provenance = "gather A"}
  }
  plan.func @gather_params {
  }
}

//--- negative.mlir
// Tests a negative micro-batch count.
// expected-error @below {{plan-overlap-param-gather: micro-batches is -1, expected 1 or more (0: unknown)}}
module {
}
