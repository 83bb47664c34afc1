// RUN: braidc --preset tiny-llama --seq-len 8 --compile-to=recompute | FileCheck %s --check-prefix=NONE
// RUN: braidc --preset tiny-llama --seq-len 8 --recompute selective --compile-to=recompute | FileCheck %s --check-prefix=SEL
// RUN: braidc --preset tiny-llama --seq-len 8 --recompute full --compile-to=recompute | FileCheck %s --check-prefix=FULL
// RUN: braidc --preset tiny-llama --seq-len 8 --tp 2 --recompute full --compile-to=recompute | FileCheck %s --check-prefix=TP
// RUN: braidc --preset tiny-llama --seq-len 8 --compile-to=partition > %t.mlir
// RUN: braid-opt %t.mlir --model-recompute="mode=levels levels=0,10" | FileCheck %s --check-prefix=LEVELS
// RUN: printf 'model { preset: "tiny-llama" num_layers: 4 }\nparallel { pp: 2 recompute: "full" global_batch_size: 2 }\ndata { seq_length: 8 }\n' > %t.job
// RUN: braidc %t.job --compile-to=recompute | FileCheck %s --check-prefix=PP

// tiny-llama at seq 8, micro-batch 1, fp32: hidden 64, ffn 176, 4 heads of
// 16, 2 kv heads (k and v are 32 wide). A layer saves for its backward:
//   gate, up, swiglu output       3 x 8 x 176 x 4 = 16896 B
//   q (roped), residual sum, attention output, the two norm outputs
//                                 5 x 8 x  64 x 4 = 10240 B
//   k (roped), v                  2 x 8 x  32 x 4 =  2048 B
//   the attention output's log-sum-exp, kept with it by plan-lower
//                                 4 heads x 8 x 4 =   128 B
// in all 29312 B, besides its input, the residual stream (8 x 64 x 4 = 2048 B).

// NONE: model.recompute = [{choice = "none", input_bytes = 2048 : i64, kept = [{{.*}}], kept_bytes = 29312 : i64, layer = 0 : i64, recompute_flops = 0.000000e+00 : f64, recomputed = [], saved_bytes = 29312 : i64}
// NONE-NOT: model.recomputed

// Selective: the norms' outputs and the SwiGLU output (2 x 2048 + 5632 B)
// are made again from kept values, without a matrix product; the attention
// output, kept, keeps its log-sum-exp: 19456 + 128 B.
// SEL: model.recompute = [{choice = "selective", input_bytes = 2048 : i64, kept = ["model.linear", "model.linear", "model.add", "model.attention", "model.rope", "model.rope", "model.linear"], kept_bytes = 19584 : i64, layer = 0 : i64, recompute_flops = {{.*}}, recomputed = ["model.swiglu", "model.rms_norm", "model.rms_norm"], saved_bytes = 29312 : i64}
// SEL: %{{.*}}:8 = model.layer 0(
// SEL: model.layer 0 backward(
// SEL-NEXT: ^bb0(
// SEL-NEXT: model.rms_norm %[[X:arg[0-9]+]], {{.*}} {model.recomputed}
// SEL-NEXT: model.rms_norm {{.*}} {model.recomputed}
// SEL-NEXT: model.swiglu {{.*}} {model.recomputed}
// SEL-NOT: {model.recomputed}
// SEL: model.yield

// Full: the forward layer yields only its output; its backward starts by
// running the layer's forward again, up to the last value it reads (the
// SwiGLU output, the input of down_proj's weight gradient).
// FULL: kept = [], kept_bytes = 0 : i64, layer = 0 : i64
// FULL: %[[Y:[0-9]+]] = model.layer 0(
// FULL: model.layer 0 backward(%{{[0-9#]+}}, %{{[0-9]+}}, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9) {model.stage = 0 : i64}
// FULL-NEXT: ^bb0(
// FULL-NEXT: model.rms_norm {{.*}} {model.recomputed}
// FULL-NEXT: model.linear {{.*}} {model.recomputed}
// FULL-NEXT: model.linear {{.*}} {model.recomputed}
// FULL-NEXT: model.linear {{.*}} {model.recomputed}
// FULL-NEXT: model.rope {{.*}} {model.recomputed}
// FULL-NEXT: model.rope {{.*}} {model.recomputed}
// FULL-NEXT: model.attention {{.*}} {model.recomputed}
// FULL-NEXT: model.linear {{.*}} {model.recomputed}
// FULL-NEXT: model.add {{.*}} {model.recomputed}
// FULL-NEXT: model.rms_norm {{.*}} {model.recomputed}
// FULL-NEXT: model.linear {{.*}} {model.recomputed}
// FULL-NEXT: model.linear {{.*}} {model.recomputed}
// FULL-NEXT: model.swiglu {{.*}} {model.recomputed}
// FULL-NOT: {model.recomputed}
// FULL: model.yield

// Under tensor parallelism the recomputed attention block sums its
// row-parallel output again over tp, as the forward did.
// TP: model.layer 0 backward(
// TP: model.attention {{.*}} head_axis = "tp" {{.*}} {model.recomputed}
// TP-NEXT: model.linear {{.*}} {model.recomputed}
// TP-NEXT: model.all_reduce {{.*}} over @mesh ["tp"] {{.*}} {model.recomputed}
// TP-NEXT: model.add {{.*}} {model.recomputed}

// Levels: layer 0 keeps everything, layer 1 (level 10 of its ten saved
// values) nothing.
// LEVELS: model.recompute = [{choice = "level 0 of 10", {{.*}} kept_bytes = 29312 : i64, layer = 0 : i64{{.*}}}, {choice = "level 10 of 10", {{.*}} kept_bytes = 0 : i64, layer = 1 : i64

// With a pipeline, each stage's recomputation per micro-batch is part of
// its cost (2 layers of full recompute each, the same FLOPs).
// PP: model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = {{.*}}, num_layers = 2 : i64, rank = 0 : i64, recompute_flops = [[F:[0-9A-Fx.e+]+]] : f64}, {chunk = 0 : i64, first_layer = 2 : i64, flops = {{.*}}, num_layers = 2 : i64, rank = 1 : i64, recompute_flops = [[F]] : f64}]
