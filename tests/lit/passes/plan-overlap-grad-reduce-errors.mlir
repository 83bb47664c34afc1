// RUN: not braid-opt %s --plan-overlap-grad-reduce -split-input-file 2>&1 | FileCheck %s
// RUN: not braid-opt %s --plan-overlap-grad-reduce=bucket-bytes=-1 2>&1 | FileCheck %s --check-prefix=NEG

// Tests that a plan with a function of that name already is refused.
plan.buffer @g : tensor<4xf32> role = "gradient" name = "w"
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@g] {} {provenance = "k0"}
}
plan.func @last_micro_step {
}
plan.func @update {
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}
}
// CHECK: error: plan-overlap-grad-reduce: the module already has @last_micro_step

// NEG: error: plan-overlap-grad-reduce: bucket-bytes is -1, expected 0 (off) or more
