// RUN: printf 'model { preset: "tiny-llama" num_layers: 4 }\nparallel { pp: 4 micro_batch_size: 1 global_batch_size: 6 }\ndata { seq_length: 8 }\n' > %t.job
// RUN: braidc %t.job --compile-to=plan | FileCheck %s --check-prefix=ONEF
// RUN: braidc %t.job --compile-to=plan --schedule gpipe | FileCheck %s --check-prefix=GPIPE
// RUN: braidc %t.job --compile-to=plan | FileCheck %s --check-prefix=SLOTS

// Tests 1F1B on 4 stages and 6 micro-batches: stage s starts with
// min(4 - s - 1, 6) forwards, then alternates one forward and one backward,
// then finishes the backwards; it holds at most 4 - s micro-batches, each
// taking the lowest free slot at its forward and freeing it at its backward.
// ONEF: plan.stage 0 {{.*}}schedule = ["F0:0", "F1:1", "F2:2", "F3:3", "B0:0", "F4:0", "B1:1", "F5:1", "B2:2", "B3:3", "B4:0", "B5:1"], slots = 4 : i64
// ONEF: plan.stage 1 {{.*}}schedule = ["F0:0", "F1:1", "F2:2", "B0:0", "F3:0", "B1:1", "F4:1", "B2:2", "F5:2", "B3:0", "B4:1", "B5:2"], slots = 3 : i64
// ONEF: plan.stage 2 {{.*}}schedule = ["F0:0", "F1:1", "B0:0", "F2:0", "B1:1", "F3:1", "B2:0", "F4:0", "B3:1", "F5:1", "B4:0", "B5:1"], slots = 2 : i64
// ONEF: plan.stage 3 {{.*}}schedule = ["F0:0", "B0:0", "F1:0", "B1:0", "F2:0", "B2:0", "F3:0", "B3:0", "F4:0", "B4:0", "F5:0", "B5:0"], slots = 1 : i64

// Tests GPipe: every forward, then every backward; all 6 in flight.
// GPIPE: plan.stage 2 {{.*}}schedule = ["F0:0", "F1:1", "F2:2", "F3:3", "F4:4", "F5:5", "B0:0", "B1:1", "B2:2", "B3:3", "B4:4", "B5:5"], slots = 6 : i64

// Tests that what a stage keeps from a micro-batch's forward to its backward
// (here the tokens) has one copy per slot, and that values cross stages as
// SEND/RECV pairs along pp.
// SLOTS: plan.buffer @{{.+}} : tensor<1x8xi32> role = "input" name = "tokens" stage = 0 slots = 4
// SLOTS: plan.kernel "SEND" [@{{.+}}] -> [] {peer = 1 : i64} {provenance = "pipeline: activation to stage 1", rank_axis = "pp"}
// SLOTS: plan.kernel "RECV" [] -> [@{{.+}}] {peer = 1 : i64} {provenance = "pipeline: gradient from stage 1", rank_axis = "pp"}

// Tests the report's pipeline section: each stage's layers and slots, and
// the predicted peak micro-batches in flight of 1F1B, min(4 - s, 6).
// RUN: braidc %t.job --compile-to=plan --report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT < %t.json
// REPORT: "pipeline": {
// REPORT: "predicted": {
// REPORT: "peak_in_flight_micro_batches": [
// REPORT-NEXT: 4,
// REPORT-NEXT: 3,
// REPORT-NEXT: 2,
// REPORT-NEXT: 1
// REPORT: "schedule": "1f1b",
// REPORT: "first_layer": 0,
// REPORT: "num_layers": 1,
// REPORT: "rank_arena_bytes": {{[1-9][0-9]*}},
// REPORT: "slots": 4,
// REPORT: "stage": 0

// Tests a tied embedding across stages (tiny-gpt2, 2 layers on 2 stages):
// the last stage accumulates its output-layer half of the table's gradient
// and sends it to stage 0 at the start of its update; stage 0 adds it to
// its own before reducing and clipping, updates the table and sends it
// back; the last stage receives it at the end of its update. The last
// stage's norm does not count the table again.
// RUN: braidc --preset tiny-gpt2 --seq-len 8 --pp 2 --compile-to=plan | FileCheck %s --check-prefix=TIED
// TIED-LABEL: plan.func @stage0_update
// TIED-NEXT: plan.kernel "RECV" [] -> [@[[PART:.+]]] {peer = 1 : i64} {provenance = "pipeline: stage 1's part of the gradient of transformer.wte.weight", rank_axis = "pp"}
// TIED-NEXT: plan.kernel "ADD" [@[[G:.+]], @[[PART]]] -> [@[[G]]] {} {provenance = "pipeline: the gradient of transformer.wte.weight from both stages"}
// TIED: plan.kernel "GRAD_NORM"
// TIED: plan.kernel "ADAMW" [@[[W:[a-z0-9]+]], @[[G]],
// TIED: plan.kernel "SEND" [@[[W]]] -> [] {peer = 1 : i64} {provenance = "pipeline: the updated transformer.wte.weight to stage 1", rank_axis = "pp"}
// TIED-LABEL: plan.func @stage1_update
// TIED-NEXT: plan.kernel "SEND" [@{{.+}}] -> [] {peer = -1 : i64} {provenance = "pipeline: this stage's part of the gradient of transformer.wte.weight to stage 0, which updates it", rank_axis = "pp"}
// TIED: plan.kernel "RECV" [] -> [@{{.+}}] {peer = -1 : i64} {provenance = "pipeline: the updated transformer.wte.weight from stage 0", rank_axis = "pp"}

// Tests ZB-H1: each backward is split into B (what the previous stage waits
// for) and W (the weight gradients, in @stageN_backward_weight); W follows
// its B except on stage s, which defers the W of its first s micro-batches
// into its cooldown bubble. A micro-batch keeps its slot until its W.
// RUN: braidc %t.job --compile-to=plan --schedule zb-h1 | FileCheck %s --check-prefix=ZB
// ZB: plan.func @stage0_backward_weight
// ZB: plan.kernel "LINEAR_GRAD_WEIGHT"
// ZB: plan.stage 0 {backward = @stage0_backward, backward_weight = @stage0_backward_weight, {{.*}}schedule = ["F0:0", "F1:1", "F2:2", "F3:3", "B0:0", "W0:0", "F4:0", "B1:1", "W1:1", "F5:1", "B2:2", "W2:2", "B3:3", "W3:3", "B4:0", "W4:0", "B5:1", "W5:1"]
// ZB: plan.stage 3 {{.*}}schedule = ["F0:0", "B0:0", "F1:1", "B1:1", "F2:2", "B2:2", "F3:3", "B3:3", "W3:3", "F4:3", "B4:3", "W4:3", "F5:3", "B5:3", "W5:3", "W0:0", "W1:1", "W2:2"], slots = 4

// Tests the interleaved schedule (Megatron's virtual stages): 4 layers on 2
// ranks as 4 chunks of one layer, chunk c on rank c % 2, so rank 0 holds
// layers 0 and 2 and rank 1 layers 1 and 3; 4 micro-batches. Rank r warms
// up with (2 - r - 1)·2 + (2 - 1)·2 forwards in Megatron's order (the k-th
// forward runs micro-batch (k / 4)·2 + k % 2 on chunk (k % 4) / 2: 0, 1 on
// chunk 0, then 0, 1 on chunk 1, then 2, 3 on chunk 0, ...; the backwards
// the same micro-batches on the chunks in reverse), then alternates one
// forward and one backward, then finishes the backwards:
//   rank 0: F0 F1 F0.1 F1.1 | F2 B0.1 | F3 B1.1 | F2.1 B0 | F3.1 B1 |
//           B2.1 B3.1 B2 B3
//   rank 1: F0 F1 | F0.1 B0.1 | F1.1 B1.1 | F2 B0 | F3 B1 | F2.1 B2.1 |
//           F3.1 B3.1 | B2 B3
// Each chunk has slots of its own ("F0.1:0": chunk 1's forward of
// micro-batch 0 on chunk 1's slot 0, not chunk 0's): a micro-batch takes its
// chunk's lowest free slot at its forward there and frees it at its
// backward there.
//   rank 0, chunk 0: F0, F1, F2, F3 take 0, 1, 2, 3 before B0 frees one:
//           4 slots. Chunk 1: F0.1, F1.1 take 0, 1; B0.1, B1.1 free them
//           before F2.1, F3.1 take 0, 1 again: 2 slots.
//   rank 1, chunk 0: F0, F1, F2 take 0, 1, 2; B0 frees 0 for F3; B1 frees
//           1: 3 slots. Chunk 1: each forward is followed by its backward:
//           1 slot.
// So chunk_slots = [4, 2] and slots = 4 on rank 0, [3, 1] and 3 on rank 1
// (one pool for the rank would need 5 and 3, for every chunk). Chunk 1's
// functions are listed in `chunks`; the last chunk of the last rank sends
// to the first rank's next chunk (peer -1 on 2 ranks).
// RUN: printf 'model { preset: "tiny-llama" num_layers: 4 }\nparallel { pp: 2 vpp: 2 micro_batch_size: 1 global_batch_size: 4 }\ndata { seq_length: 8 }\n' > %t.vpp.job
// RUN: braidc %t.vpp.job --compile-to=plan | FileCheck %s --check-prefix=VPP
// The tokens are chunk 0's on rank 0 (4 copies), chunk 1's buffers there
// have 2, the targets are chunk 1's on rank 1 (one copy; each rank's
// buffers come before its stage).
// VPP: plan.buffer @{{.+}} : tensor<1x8xi32> role = "input" name = "tokens" stage = 0 slots = 4
// VPP: plan.buffer @{{.+}} role = "activation" stage = 0 slots = 2
// VPP: plan.stage 0 {backward = @stage0_backward, chunk_slots = array<i64: 4, 2>, chunks = [{backward = @stage0_chunk1_backward, eval_forward = @stage0_chunk1_forward_eval, forward = @stage0_chunk1_forward}], eval_forward = @stage0_forward_eval, first_layer = 0 : i64, forward = @stage0_forward, num_layers = 2 : i64, {{.*}}schedule = ["F0:0", "F1:1", "F0.1:0", "F1.1:1", "F2:2", "B0.1:0", "F3:3", "B1.1:1", "F2.1:0", "B0:0", "F3.1:1", "B1:1", "B2.1:0", "B3.1:1", "B2:2", "B3:3"], slots = 4 : i64
// VPP: plan.buffer @{{.+}} : tensor<1x8xi32> role = "input" name = "targets" stage = 1 slots = 1
// VPP: plan.stage 1 {{.*}}chunk_slots = array<i64: 3, 1>, {{.*}}schedule = ["F0:0", "F1:1", "F0.1:0", "B0.1:0", "F1.1:0", "B1.1:0", "F2:2", "B0:0", "F3:0", "B1:1", "F2.1:0", "B2.1:0", "F3.1:0", "B3.1:0", "B2:2", "B3:0"], slots = 3 : i64

// Tests the report's slots of each model stage: its chunk's own (model
// stage c is rank c % 2's chunk c / 2), and the peak of (micro-batch,
// chunk) pairs in flight on each rank, counted from the orders above: 5 on
// rank 0 (F0 F1 F0.1 F1.1 F2 before B0.1), 3 on rank 1 (F0 F1 F0.1).
// RUN: braidc %t.vpp.job --compile-to=plan --report=%t.vpp.json -o /dev/null
// RUN: FileCheck %s --check-prefix=VREPORT < %t.vpp.json
// VREPORT: "peak_in_flight_micro_batches": [
// VREPORT-NEXT: 5,
// VREPORT-NEXT: 3
// VREPORT: "chunk": 0,
// VREPORT: "slots": 4,
// VREPORT-NEXT: "stage": 0
// VREPORT: "chunk": 0,
// VREPORT: "slots": 3,
// VREPORT-NEXT: "stage": 1
// VREPORT: "chunk": 1,
// VREPORT: "slots": 2,
// VREPORT-NEXT: "stage": 0
// VREPORT: "chunk": 1,
// VREPORT: "slots": 1,
// VREPORT-NEXT: "stage": 1
