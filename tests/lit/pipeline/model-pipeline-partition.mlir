// RUN: printf 'model { preset: "tiny-llama" num_layers: 4 }\nparallel { pp: 2 }\ndata { seq_length: 8 }\n' > %t.job
// RUN: braidc %t.job --compile-to=partition | FileCheck %s
// RUN: braidc %t.job --compile-to=partition --stage-layers 3,1 | FileCheck %s --check-prefix=UNEVEN
// RUN: braidc %t.job --compile-to=partition --pp 4 | FileCheck %s --check-prefix=FOUR
// RUN: printf 'model { preset: "tiny-llama" num_layers: 4 }\nparallel { pp: 2 vpp: 2 global_batch_size: 2 }\ndata { seq_length: 8 }\n' > %t.vpp.job
// RUN: braidc %t.vpp.job --compile-to=partition | FileCheck %s --check-prefix=VPP

// Tests the balanced cut of a 4-layer tiny-llama into 2 stages. Every layer
// costs the same L (forward and backward FLOPs), the embedding costs ~0 and
// the output layer and loss P, with P < L (2·8·64·512 FLOPs of lm_head
// forward against a layer's ~4·2·8·64·(64+32+32+64+3·176)): 2 + 2 layers
// cost max(2L, 2L + P), 3 + 1 layers max(3L, L + P) > 2L + P, so the cut
// is after layer 1. Each forward layer and its backward share a stage; the
// embedding and its gradient are on stage 0, the final norm, output layer
// and loss (and their gradients) on stage 1; each AdamW on its parameter's
// stage; the clipping norm on every stage (-1).
// CHECK: model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = {{.+}} : f64, num_layers = 2 : i64, rank = 0 : i64}, {chunk = 0 : i64, first_layer = 2 : i64, flops = {{.+}} : f64, num_layers = 2 : i64, rank = 1 : i64}]
// CHECK: model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 1, 1]
// CHECK-LABEL: func.func @train_step(
// CHECK: model.embedding {{.*}} {model.stage = 0 : i64}
// CHECK: model.layer 0({{.*}} {model.stage = 0 : i64}
// CHECK: model.layer 1({{.*}} {model.stage = 0 : i64}
// CHECK: model.layer 2({{.*}} {model.stage = 1 : i64}
// CHECK: model.layer 3({{.*}} {model.stage = 1 : i64}
// CHECK: model.rms_norm {{.*}} {model.stage = 1 : i64}
// CHECK: model.cross_entropy {{.*}} {model.stage = 1 : i64}
// CHECK: model.layer 3 backward({{.*}} {model.stage = 1 : i64}
// CHECK: model.layer 2 backward({{.*}} {model.stage = 1 : i64}
// CHECK: model.layer 1 backward({{.*}} {model.stage = 0 : i64}
// CHECK: model.layer 0 backward({{.*}} {model.stage = 0 : i64}
// CHECK: model.embedding_grad {{.*}} {model.stage = 0 : i64}
// CHECK: model.grad_norm {{.*}} {model.stage = -1 : i64}
// CHECK: model.adamw %arg0, {{.*}} {model.stage = 0 : i64}
// CHECK: model.adamw %arg{{.*}} {model.stage = 1 : i64}

// Tests the cut a user gives (ModelLink's uneven pipeline).
// UNEVEN: model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = {{.+}} : f64, num_layers = 3 : i64, rank = 0 : i64}, {chunk = 0 : i64, first_layer = 3 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 1 : i64}]
// UNEVEN: model.layer 2({{.*}} {model.stage = 0 : i64}
// UNEVEN: model.layer 3({{.*}} {model.stage = 1 : i64}

// Tests one layer per stage.
// FOUR: model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [4, 1, 1]
// FOUR: model.layer 1({{.*}} {model.stage = 1 : i64}
// FOUR: model.layer 3({{.*}} {model.stage = 3 : i64}
// FOUR: model.cross_entropy {{.*}} {model.stage = 3 : i64}

// Tests virtual stages: 2 ranks × 2 chunks make 4 stages of one layer, stage
// c on rank c % 2 as its chunk c / 2.
// VPP: model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 0 : i64}, {chunk = 0 : i64, first_layer = 1 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 1 : i64}, {chunk = 1 : i64, first_layer = 2 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 0 : i64}, {chunk = 1 : i64, first_layer = 3 : i64, flops = {{.+}} : f64, num_layers = 1 : i64, rank = 1 : i64}]
// VPP: model.layer 2({{.*}} {model.stage = 2 : i64}
