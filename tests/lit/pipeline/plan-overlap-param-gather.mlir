// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --global-batch-size 2 --compile-to=plan | FileCheck %s --check-prefix=ONE
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 2 --global-batch-size 4 --overlap-param-gather=false --compile-to=plan | FileCheck %s --check-prefix=OFF
// RUN: braidc --preset tiny-llama --seq-len 8 --pp 2 --dp 2 --zero 1 --global-batch-size 8 --compile-to=plan | FileCheck %s --check-prefix=PIPE
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --global-batch-size 8 --emit=plan -o %t.on.plan --report=- | python3 -c "import json, sys; print(json.load(sys.stdin)['communication_bytes_per_step'])" > %t.on
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --global-batch-size 8 --overlap-param-gather=false --emit=plan -o %t.off.plan --report=- | python3 -c "import json, sys; print(json.load(sys.stdin)['communication_bytes_per_step'])" > %t.off
// RUN: diff %t.on %t.off

// plan-overlap-param-gather in braidc's pipeline, on ZeRO plans. The report
// counts each collective once per step either way (the diff above):
// first_micro_step's gathers once, gather_params' never.

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
