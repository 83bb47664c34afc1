// RUN: not braid-opt %s --plan-overlap-param-gather=micro-batches=2 2>&1 | FileCheck %s
// RUN: not braid-opt %s --plan-overlap-param-gather=micro-batches=-1 2>&1 | FileCheck %s --check-prefix=NEG

// Tests a module that already has first_micro_step: refused.
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
// CHECK: error: plan-overlap-param-gather: the module already has @first_micro_step
// NEG: error: plan-overlap-param-gather: micro-batches is -1, expected 1 or more (0: unknown)
