// RUN: split-file %s %t
// RUN: braid-opt %t/buckets.mlir --plan-overlap-param-gather=micro-batches=2 | FileCheck %s
// RUN: braid-opt %t/buckets.mlir --plan-overlap-param-gather=micro-batches=0 | FileCheck %s --check-prefix=UNKNOWN
// RUN: braid-opt %t/buckets.mlir --plan-overlap-param-gather="micro-batches=2 enabled=false" | FileCheck %s --check-prefix=DISABLED
// RUN: braid-opt %t/one-micro-batch.mlir --plan-overlap-param-gather=micro-batches=1 | FileCheck %s --check-prefix=ONE
// RUN: braid-opt %t/stages.mlir --plan-overlap-param-gather=micro-batches=2 | FileCheck %s --check-prefix=STAGES

// The checks of buckets.mlir are beside it, below.

// Tests enabled = false: the plan is left as it is.
// DISABLED-NOT: first_micro_step
// DISABLED-NOT: gather_params
// DISABLED: plan.func @update {
// DISABLED-NEXT: plan.kernel "ALL_GATHER" [@B]

// Tests one micro-batch a step: its function is last_micro_step
// (plan-overlap-grad-reduce's copy), which first_micro_step copies.
// ONE-LABEL: plan.func @last_micro_step {
// ONE-NEXT: plan.kernel "ADD" [@p0, @p0] -> [@x] {} {provenance = "k0"}
// ONE-NEXT: plan.kernel "WAIT" [@g] -> []
// ONE-NEXT: {{^ *[}]$}}
// ONE-NEXT: plan.func @first_micro_step {
// ONE-NEXT: plan.kernel "ALL_GATHER" [@A] -> [@A] {async = 1 : i64, dim = 0 : i64}
// ONE-NEXT: plan.kernel "WAIT" [@A] -> []
// ONE-NEXT: plan.kernel "ADD" [@p0, @p0] -> [@x] {} {provenance = "k0"}
// ONE-NEXT: plan.kernel "WAIT" [@g] -> []
// ONE-NEXT: {{^ *[}]$}}
// ONE-NEXT: plan.func @update {
// ONE-NEXT: {{^ *[}]$}}
// ONE-NEXT: plan.func @gather_params {
// ONE-NEXT: plan.kernel "ALL_GATHER" [@A] -> [@A] {dim = 0 : i64}

// Tests a pipeline (plan.stage): the pass does nothing.
// STAGES-NOT: first_micro_step
// STAGES-NOT: gather_params
// STAGES: plan.func @u {
// STAGES-NEXT: plan.kernel "ALL_GATHER" [@A]

//--- buckets.mlir
// Tests two flat buckets of parameters, B (views p1, p2) used by the
// micro-step's second kernel, A (view p0) by its first: the gathers move
// out of update into first_micro_step, a copy of micro_step, started at its
// beginning in the order of first use (A, then B), each waited for right
// before the first kernel touching one of its views; gather_params holds
// them as they were, blocking, in update's order. The gather of C, whose
// view update reads after it, stays; so does D's, of a bucket of
// gradients.
plan.buffer @A : tensor<8xf32> role = "bucket"
plan.buffer @p0 : tensor<8xf32> role = "parameter" name = "w0" view_of = @A view_offset = 0
plan.buffer @B : tensor<8xf32> role = "bucket"
plan.buffer @p1 : tensor<4xf32> role = "parameter" name = "w1" view_of = @B view_offset = 0
plan.buffer @p2 : tensor<4xf32> role = "parameter" name = "w2" view_of = @B view_offset = 16
plan.buffer @C : tensor<8xf32> role = "bucket"
plan.buffer @p3 : tensor<8xf32> role = "parameter" name = "w3" view_of = @C view_offset = 0
plan.buffer @D : tensor<8xf32> role = "bucket"
plan.buffer @g : tensor<8xf32> role = "gradient" name = "w0" view_of = @D view_offset = 0
plan.buffer @x : tensor<8xf32> role = "activation"
plan.func @micro_step {
  plan.kernel "ADD" [@p0, @p0] -> [@x] {} {provenance = "k0"}
  plan.kernel "ADD" [@x, @x] -> [@x] {} {provenance = "k1"}
  plan.kernel "ADD" [@p2, @p1] -> [@g] {} {provenance = "k2"}
}
plan.func @update {
  plan.kernel "ALL_GATHER" [@B] -> [@B] {dim = 0 : i64} {group = ["dp"], provenance = "gather B"}
  plan.kernel "ALL_GATHER" [@C] -> [@C] {dim = 0 : i64} {group = ["dp"], provenance = "gather C"}
  plan.kernel "ALL_GATHER" [@A] -> [@A] {dim = 0 : i64} {group = ["dp"], provenance = "gather A"}
  plan.kernel "ALL_GATHER" [@D] -> [@D] {dim = 0 : i64} {group = ["dp"], provenance = "gather D"}
  plan.kernel "COPY" [@p3] -> [@x] {} {provenance = "reads C"}
}
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NEXT: plan.kernel "ADD" [@p0, @p0] -> [@x] {} {provenance = "k0"}
// CHECK-LABEL: plan.func @first_micro_step {
// CHECK-NEXT: plan.kernel "ALL_GATHER" [@A] -> [@A] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "gather A (started at the step's first micro-batch, overlapping the forward before their first use)"}
// CHECK-NEXT: plan.kernel "ALL_GATHER" [@B] -> [@B] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "gather B (started
// CHECK-NEXT: plan.kernel "WAIT" [@A] -> [] {} {provenance = "gather A: gathered"}
// CHECK-NEXT: plan.kernel "ADD" [@p0, @p0] -> [@x] {} {provenance = "k0"}
// CHECK-NEXT: plan.kernel "ADD" [@x, @x] -> [@x] {} {provenance = "k1"}
// CHECK-NEXT: plan.kernel "WAIT" [@B] -> [] {} {provenance = "gather B: gathered"}
// CHECK-NEXT: plan.kernel "ADD" [@p2, @p1] -> [@g] {} {provenance = "k2"}
// CHECK-NEXT: {{^ *[}]$}}
// CHECK-NEXT: plan.func @update {
// CHECK-NEXT: plan.kernel "ALL_GATHER" [@C] -> [@C] {dim = 0 : i64} {group = ["dp"], provenance = "gather C"}
// CHECK-NEXT: plan.kernel "ALL_GATHER" [@D] -> [@D] {dim = 0 : i64} {group = ["dp"], provenance = "gather D"}
// CHECK-NEXT: plan.kernel "COPY" [@p3] -> [@x] {} {provenance = "reads C"}
// CHECK-NEXT: {{^ *[}]$}}
// CHECK-NEXT: plan.func @gather_params {
// CHECK-NEXT: plan.kernel "ALL_GATHER" [@B] -> [@B] {dim = 0 : i64} {group = ["dp"], provenance = "gather B"}
// CHECK-NEXT: plan.kernel "ALL_GATHER" [@A] -> [@A] {dim = 0 : i64} {group = ["dp"], provenance = "gather A"}
// CHECK-NEXT: {{^ *[}]$}}

// UNKNOWN-NOT: first_micro_step
// UNKNOWN-NOT: gather_params

//--- one-micro-batch.mlir
plan.buffer @A : tensor<8xf32> role = "bucket"
plan.buffer @p0 : tensor<8xf32> role = "parameter" name = "w0" view_of = @A view_offset = 0
plan.buffer @g : tensor<8xf32> role = "gradient" name = "w1"
plan.buffer @x : tensor<8xf32> role = "activation"
plan.func @micro_step {
  plan.kernel "ADD" [@p0, @p0] -> [@x] {} {provenance = "k0"}
}
plan.func @last_micro_step {
  plan.kernel "ADD" [@p0, @p0] -> [@x] {} {provenance = "k0"}
  plan.kernel "WAIT" [@g] -> [] {} {provenance = "an earlier sum: done"}
}
plan.func @update {
  plan.kernel "ALL_GATHER" [@A] -> [@A] {dim = 0 : i64} {group = ["dp"], provenance = "gather A"}
}

//--- stages.mlir
plan.buffer @A : tensor<8xf32> role = "bucket" stage = 0
plan.buffer @p0 : tensor<8xf32> role = "parameter" name = "w0" stage = 0 view_of = @A view_offset = 0
plan.buffer @x : tensor<8xf32> role = "activation" stage = 0
plan.func @f {
  plan.kernel "ADD" [@p0, @p0] -> [@x] {} {provenance = "k0"}
}
plan.func @b {
}
plan.func @u {
  plan.kernel "ALL_GATHER" [@A] -> [@A] {dim = 0 : i64} {group = ["dp"], provenance = "gather A"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, update = @u, slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
