// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --grad-bucket-bytes 0 --compile-to=plan | FileCheck %s --check-prefix=ZERO1
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 2 --compile-to=plan | FileCheck %s --check-prefix=ZERO2
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 2 --zero-bucket-bytes 40000 --compile-to=plan | FileCheck %s --check-prefix=SMALL
// RUN: not braidc --preset tiny-llama --seq-len 8 --zero 1 2>&1 | FileCheck %s --check-prefix=NODP
// RUN: braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 3 --compile-to=plan | FileCheck %s --check-prefix=ZERO3
// RUN: not braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 5 2>&1 | FileCheck %s --check-prefix=FIVE
// RUN: not braidc --preset tiny-llama --seq-len 8 --dp 2 --zero 1 --zero-bucket-bytes 0 2>&1 | FileCheck %s --check-prefix=NOBUCKET

// tiny-llama: hidden 64, ffn 176, vocabulary 512, 2 layers, 2 kv heads of
// 16 (k and v 32 x 64). Its matrices (weight decay 0.1): the embedding and
// lm_head 512 x 64 each, per layer q and o 64 x 64, k and v 32 x 64, gate,
// up and down 176 x 64: 2 x 32768 + 2 x (2 x 4096 + 2 x 2048 + 3 x 11264)
// = 157696 elements, a multiple of dp x 16 = 32. Its norm weights (no
// decay): 2 per layer and the final one, 5 x 64 = 320, also a multiple of
// 32. So two buckets, of 157696 and 320 elements, each rank keeping blocks
// of 78848 and 160.

// ZeRO-1: the flat buckets hold the parameters and gradients (views at
// their offsets); the moments are the rank's block only. (With
// --grad-bucket-bytes 0 the reduce-scatters stay in update, where
// plan-lower puts them; plan-overlap-grad-reduce.mlir moves them.)
// ZERO1-DAG: plan.buffer @[[G0:b[0-9]+]] : tensor<157696xf32> role = "bucket"
// ZERO1-DAG: plan.buffer @[[P0:b[0-9]+]] : tensor<157696xf32> role = "bucket"
// ZERO1-DAG: plan.buffer @{{b[0-9]+}} : tensor<78848xf32> role = "optimizer_state" name = "exp_avg:zero bucket 0"
// ZERO1-DAG: plan.buffer @{{b[0-9]+}} : tensor<160xf32> role = "optimizer_state" name = "exp_avg_sq:zero bucket 1"
// ZERO1-DAG: plan.buffer @{{b[0-9]+}} : tensor<512x64xf32> role = "parameter" name = "lm_head.weight" view_of = @[[P0]] view_offset = {{[0-9]+}}
// ZERO1-DAG: plan.buffer @{{b[0-9]+}} : tensor<512x64xf32> role = "gradient" name = "lm_head.weight" view_of = @[[G0]] view_offset = {{[0-9]+}}
// No per-parameter moments are left.
// ZERO1-NOT: name = "exp_avg:model
// ZERO1-LABEL: plan.func @update
// ZERO1: plan.kernel "REDUCE_SCATTER" [@[[G0]]] -> [@[[B0:b[0-9]+]]] {dim = 0 : i64} {group = ["dp"]
// ZERO1: plan.kernel "REDUCE_SCATTER"
// ZERO1: plan.kernel "GRAD_NORM" [@[[B0]], @{{b[0-9]+}}] -> {{.*}} {max_norm = 1.000000e+00 : f64, replicated_copies = 1 : i64, split_inputs = 2 : i64} {group = ["dp"]
// ZERO1: plan.kernel "ADAMW" [@[[P0]], @[[B0]], {{.*}}] -> [@[[P0]], {{.*}}] {{.*}}weight_decay = 1.000000e-01 : f64} {{{.*}}rank_axis = "dp"}
// ZERO1: plan.kernel "ADAMW" {{.*}}weight_decay = 0.000000e+00 : f64} {{{.*}}rank_axis = "dp"}
// ZERO1: plan.kernel "ALL_GATHER" [@[[P0]]] -> [@[[P0]]] {dim = 0 : i64} {group = ["dp"]
// ZERO1: plan.kernel "ALL_GATHER"
// ZERO1-NOT: plan.kernel "ALL_REDUCE"

// ZeRO-2: the flat gradients are a temporary of the micro-step, zeroed
// before the backward writes them, reduce-scattered (started, async) as
// soon as their last gradient is written, waited for at the end, and the
// rank's block accumulated in a gradient of 78848 elements that zero_grads
// zeroes once per step.
// ZERO2-DAG: plan.buffer @[[T0:b[0-9]+]] : tensor<157696xf32> role = "activation"
// ZERO2-DAG: plan.buffer @[[A0:b[0-9]+]] : tensor<78848xf32> role = "gradient" name = "grad:zero bucket 0"
// ZERO2-DAG: plan.buffer @{{b[0-9]+}} : tensor<512x64xf32> role = "gradient" name = "lm_head.weight" view_of = @[[T0]]
// ZERO2-LABEL: plan.func @zero_grads
// ZERO2-NEXT: plan.kernel "ZERO" [] -> [@[[A0]]]
// ZERO2-NEXT: plan.kernel "ZERO" [] -> [@{{b[0-9]+}}] {} {provenance = "zero_grads: zero bucket 1"}
// ZERO2-NEXT: }
// ZERO2-LABEL: plan.func @micro_step
// ZERO2: plan.kernel "ZERO" [] -> [@[[T0]]]
// ZERO2: plan.kernel "REDUCE_SCATTER" [@[[T0]]] -> [@[[K0:b[0-9]+]]] {async = 1 : i64, dim = 0 : i64} {group = ["dp"]
// ZERO2: plan.kernel "WAIT" [@[[T0]], @[[K0]]] -> []
// ZERO2-NEXT: plan.kernel "ADD" [@[[A0]], @[[K0]]] -> [@[[A0]]]
// ZERO2-LABEL: plan.func @update
// ZERO2-NOT: REDUCE_SCATTER
// ZERO2: plan.kernel "GRAD_NORM" [@[[A0]], {{.*}} {group = ["dp"]
// ZERO2: plan.kernel "ADAMW" [@{{b[0-9]+}}, @[[A0]],

// Small buckets: the reduce-scatter of one bucket is waited for just before
// the next one starts, so backward kernels run between each start and its
// wait.
// SMALL-LABEL: plan.func @micro_step
// SMALL: plan.kernel "REDUCE_SCATTER" [@[[F1:b[0-9]+]]] -> [@[[K1:b[0-9]+]]] {async = 1
// SMALL-NEXT: plan.kernel {{"[A-Z_]+"}}
// SMALL: plan.kernel "WAIT" [@[[F1]], @[[K1]]]
// SMALL-NEXT: plan.kernel "ADD"
// SMALL-NEXT: plan.kernel "REDUCE_SCATTER" {{.*}} {async = 1

// NODP: braidc: error: parallel.zero = 1 shards the optimizer over the data-parallel ranks: it needs parallel.dp > 1, found dp = 1
// FIVE: braidc: error: parallel.zero = 5 is not a ZeRO stage (0, 1, 2 or 3)
// NOBUCKET: braidc: error: parallel.zero_bucket_bytes = 0 must be at least 1 (bytes of one ZeRO bucket)

// ZeRO-3: the rank keeps only its blocks of the flat parameters (78848 and
// 160 elements, block_of the flat buffers they are gathered into). The
// micro-step's forward half gathers each bucket (this rank's block copied
// to its place, an all-gather in place, started one bucket ahead, waited
// for before the first use); the backward half gathers again into flat
// buffers of its own, whose views stand for the parameters there. AdamW
// updates the blocks; update gathers nothing.
// ZERO3-DAG: plan.buffer @[[P0:b[0-9]+]] : tensor<78848xf32> role = "parameter" name = "zero bucket 0" block_of = @[[F0:b[0-9]+]]
// ZERO3-DAG: plan.buffer @[[F0]] : tensor<157696xf32> role = "activation"
// ZERO3-DAG: plan.buffer @{{b[0-9]+}} : tensor<512x64xf32> role = "parameter" name = "lm_head.weight" view_of = @[[F0]]
// ZERO3-DAG: plan.buffer @{{b[0-9]+}} : tensor<512x64xf32> role = "parameter" name = "lm_head.weight" view_of = @[[B0:b[0-9]+]]
// ZERO3-LABEL: plan.func @micro_step
// ZERO3: plan.kernel "COPY" [@[[P0]]] -> [@[[F0]]] {} {{{.*}}rank_axis = "dp"}
// ZERO3-NEXT: plan.kernel "ALL_GATHER" [@[[F0]]] -> [@[[F0]]] {async = 1 : i64, dim = 0 : i64} {group = ["dp"]
// ZERO3: plan.kernel "WAIT" [@[[F0]]] -> []
// ZERO3: plan.kernel "COPY" [@[[P0]]] -> [@[[B0]]]
// ZERO3-NEXT: plan.kernel "ALL_GATHER" [@[[B0]]] -> [@[[B0]]] {async = 1
// ZERO3: plan.kernel "WAIT" [@[[B0]]] -> []
// ZERO3-LABEL: plan.func @update
// ZERO3: plan.kernel "ADAMW" [@[[P0]], {{.*}}] -> [@[[P0]], {{.*}}] {{.*}} {provenance = "zero: AdamW on this rank's block of {{[^"]*}}"}{{$}}
// ZERO3-NOT: ALL_GATHER
// ZERO3: }
