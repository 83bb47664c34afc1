// RUN: braidc --preset tiny-gpt2 --seq-len 8 --dp 2 --compile-to=shard | FileCheck %s
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --compile-to=shard | FileCheck %s --check-prefix=ONE

// Tests data parallelism on a GPT-2 step: the mesh, tokens and targets split
// along dp on the batch, and one all-reduce over dp of all 28 gradients (they
// fit one 25 MB bucket), in the order backward makes them (the final norm's
// first, the tied embedding's last: its embedding-gradient half comes last),
// read by the clipping norm and by every AdamW update.
// CHECK: model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: tensor<1x8xi32> {model.input = "tokens", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>}
// CHECK-SAME: tensor<1x8xi32> {model.input = "targets", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>}
// CHECK: %[[SUM:.+]]:28 = model.all_reduce {{.*}} over @mesh ["dp"] reason = "model-shard: data-parallel sum of the gradients of transformer.ln_f.weight .. transformer.wte.weight (28 tensors, 564224 bytes)"
// CHECK-NEXT: model.grad_norm %[[SUM]]#27, %[[SUM]]#26,
// CHECK: model.adamw %arg0, %[[SUM]]#27,

// Tests that one rank needs no collective; the mesh is still declared.
// ONE: model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 1]
// ONE-NOT: model.all_reduce

// Tests the report's communication: with dp, each rank all-reduces every
// gradient once per step, whatever the micro-batches: tiny-gpt2's 141,056
// parameters (wte 512·64 + wpe 128·64 + 2 layers of (2·128 norms + 64·192 +
// 192 + 64·64 + 64 + 64·256 + 256 + 256·64 + 64) + 128 for ln_f) in f32 are
// 564,224 bytes.
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --dp 4 --micro-batch-size 1 --global-batch-size 8 --compile-to=plan --report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t.json
// REPORT: "communication_bytes_per_step": {
// REPORT-NEXT: "all_reduce": {
// REPORT-NEXT: "dp": 564224

// Tests the same sums in the plan, however the passes that make them are
// arranged: with the overlap off, the update begins by summing the 28
// accumulated gradient buffers over dp, in place, in one bucket of the
// default size, before the clipping norm reads them.
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --dp 2 --grad-bucket-bytes 0 --compile-to=plan | FileCheck %s --check-prefix=PLAN
// PLAN-LABEL: plan.func @update {
// PLAN-NEXT: plan.kernel "ALL_REDUCE" [[[GRADS:(@b[0-9]+, ){27}@b[0-9]+]]] -> [[[GRADS]]] {} {group = ["dp"], provenance = "{{.*}}data-parallel sum of the gradients of {{.*}}(28 tensors, 564224 bytes)"}
// PLAN-NEXT: plan.kernel "GRAD_NORM"
// PLAN-NOT: "ALL_REDUCE"
