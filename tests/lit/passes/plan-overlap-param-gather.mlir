// RUN: braid-opt %s --plan-overlap-param-gather=micro-batches=2 | FileCheck %s
// RUN: braid-opt %s --plan-overlap-param-gather=micro-batches=0 | FileCheck %s --check-prefix=UNKNOWN
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --global-batch-size 2 --compile-to=plan | FileCheck %s --check-prefix=ONE
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 2 --global-batch-size 4 --overlap-param-gather=false --compile-to=plan | FileCheck %s --check-prefix=OFF
// RUN: braidc --preset tiny-llama --seq-len 8 --pp 2 --dp 2 --zero 1 --global-batch-size 8 --compile-to=plan | FileCheck %s --check-prefix=PIPE
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --global-batch-size 8 --emit=plan -o %t.on.plan --report=- | python3 -c "import json, sys; print(json.load(sys.stdin)['communication_bytes_per_step'])" > %t.on
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --global-batch-size 8 --overlap-param-gather=false --emit=plan -o %t.off.plan --report=- | python3 -c "import json, sys; print(json.load(sys.stdin)['communication_bytes_per_step'])" > %t.off
// RUN: diff %t.on %t.off

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
// The report counts each collective once per step either way (the diff
// above): first_micro_step's gathers once, gather_params' never.
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

// tiny-llama, ZeRO-1 over dp 2 with one micro-batch a rank: that
// micro-batch runs first_micro_step, a copy of last_micro_step, so it both
// gathers the parameters (the default 25 MB: two buckets) before their
// first use and starts the gradients' reduce-scatters; update gathers
// nothing; gather_params gathers both.
// ONE-LABEL: plan.func @first_micro_step {
// ONE-NEXT: plan.kernel "ALL_GATHER" [@[[M:b[0-9]+]]] -> [@[[M]]] {async = 1 : i64, dim = 0 : i64} {group = ["dp"]
// ONE-NEXT: plan.kernel "ALL_GATHER" [@[[N:b[0-9]+]]] -> [@[[N]]] {async = 1 : i64, dim = 0 : i64} {group = ["dp"]
// ONE-NEXT: plan.kernel "WAIT" [@[[M]]] -> []
// ONE-NEXT: plan.kernel "EMBEDDING"
// ONE-NEXT: plan.kernel "WAIT" [@[[N]]] -> []
// ONE-NEXT: plan.kernel "RMS_NORM"
// ONE: plan.kernel "REDUCE_SCATTER" {{.*}} {async = 1 : i64
// ONE-LABEL: plan.func @update {
// ONE-NOT: ALL_GATHER
// ONE: plan.func @gather_params {
// ONE-NEXT: plan.kernel "ALL_GATHER" [@[[M]]] -> [@[[M]]] {dim = 0 : i64} {group = ["dp"]
// ONE-NEXT: plan.kernel "ALL_GATHER" [@[[N]]] -> [@[[N]]] {dim = 0 : i64} {group = ["dp"]

// OFF-NOT: first_micro_step
// OFF-LABEL: plan.func @update {
// OFF: plan.kernel "ALL_GATHER"
// OFF-NOT: gather_params

// PIPE-NOT: first_micro_step
// PIPE-NOT: gather_params
// PIPE: plan.func @stage0_update {
// PIPE: plan.kernel "ALL_GATHER"
