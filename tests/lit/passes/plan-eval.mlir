// RUN: split-file %s %t
// RUN: braid-opt %t/copies.mlir -split-input-file --plan-eval | FileCheck %s
// RUN: braid-opt %t/errors.mlir -split-input-file --plan-eval -verify-diagnostics
// RUN: braid-opt %t/memory.mlir --plan-memory | FileCheck %s --check-prefix=MEM
// RUN: braid-opt %t/memory.mlir --plan-eval --plan-memory | FileCheck %s --check-prefixes=MEM,EVALMEM

// The checks of copies.mlir and memory.mlir are beside their inputs, below.

//--- copies.mlir
// Tests a micro-step without a pipeline: the forward (an embedding, a
// dropout with a provenance and one without, the output layer, the loss
// with its log-sum-exp), then the backward (the loss's gradient, the
// output layer's accumulating weight gradient and its input gradient, the
// dropouts' gradients, which are dropouts of the gradients with the same
// rng_id, and the embedding's gradient). @eval_step, placed right after
// @micro_step, is the forward, each kernel with its index in @micro_step;
// each forward dropout is a COPY of its input into its output, without
// parameters; no gradient kernel and no dropout of a gradient is left.
// micro_step and update stay as they were.
// CHECK-LABEL: {{^}}module {
// CHECK: plan.func @micro_step {
// CHECK-NEXT: plan.kernel "EMBEDDING" [@wte, @tok] -> [@x] {} {provenance = "wte"}
// CHECK-NEXT: plan.kernel "DROPOUT" [@x] -> [@xd] {rate = 1.000000e-01 : f64, rng_id = 0 : i64} {provenance = "embedding dropout"}
// CHECK-NEXT: plan.kernel "LINEAR" [@xd, @w] -> [@h] {transpose_w = 0 : i64} {provenance = "h.0"}
// CHECK-NEXT: plan.kernel "DROPOUT" [@h] -> [@hd] {rate = 1.000000e-01 : f64, rng_id = 1 : i64}{{$}}
// CHECK-NEXT: plan.kernel "LINEAR" [@hd, @wte] -> [@logits] {transpose_w = 1 : i64} {provenance = "lm_head"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY" [@logits, @tgt] -> [@loss, @lse] {} {provenance = "loss"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY_GRAD"
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" [@hd, @dlogits] -> [@dwte]
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_INPUT"
// CHECK-NEXT: plan.kernel "DROPOUT" [@dhd] -> [@dh]
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" [@xd, @dh] -> [@dw]
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_INPUT"
// CHECK-NEXT: plan.kernel "DROPOUT" [@dxd] -> [@dx]
// CHECK-NEXT: plan.kernel "EMBEDDING_GRAD"
// CHECK-NEXT: {{^ *}}}{{$}}
// CHECK-NEXT: plan.func @eval_step attributes {plan.eval_of = @micro_step} {
// CHECK-NEXT: plan.kernel "EMBEDDING" [@wte, @tok] -> [@x] {} {plan.eval_index = 0 : i64, provenance = "wte"}
// CHECK-NEXT: plan.kernel "COPY" [@x] -> [@xd] {} {plan.eval_index = 1 : i64, provenance = "embedding dropout (evaluation: no dropout)"}
// CHECK-NEXT: plan.kernel "LINEAR" [@xd, @w] -> [@h] {transpose_w = 0 : i64} {plan.eval_index = 2 : i64, provenance = "h.0"}
// CHECK-NEXT: plan.kernel "COPY" [@h] -> [@hd] {} {plan.eval_index = 3 : i64, provenance = "model.dropout (evaluation: no dropout)"}
// CHECK-NEXT: plan.kernel "LINEAR" [@hd, @wte] -> [@logits] {transpose_w = 1 : i64} {plan.eval_index = 4 : i64, provenance = "lm_head"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY" [@logits, @tgt] -> [@loss, @lse] {} {plan.eval_index = 5 : i64, provenance = "loss"}
// CHECK-NEXT: {{^ *}}}{{$}}
// CHECK-NEXT: plan.func @update {
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@dwte, @dw] -> [@dwte, @dw] {} {group = ["dp"], provenance = "sum"}
// CHECK-NEXT: {{^ *}}}{{$}}
// CHECK-NOT: plan.func
plan.buffer @tok : tensor<2x4xi32> role = "input" name = "tokens"
plan.buffer @tgt : tensor<2x4xi32> role = "input" name = "targets"
plan.buffer @lg : tensor<f32> role = "input" name = "loss_grad"
plan.buffer @wte : tensor<16x8xf32> role = "parameter" name = "wte"
plan.buffer @w : tensor<8x8xf32> role = "parameter" name = "h.0.w"
plan.buffer @dwte : tensor<16x8xf32> role = "gradient" name = "wte"
plan.buffer @dw : tensor<8x8xf32> role = "gradient" name = "h.0.w"
plan.buffer @x : tensor<2x4x8xf32> role = "activation"
plan.buffer @xd : tensor<2x4x8xf32> role = "activation"
plan.buffer @h : tensor<2x4x8xf32> role = "activation"
plan.buffer @hd : tensor<2x4x8xf32> role = "activation"
plan.buffer @logits : tensor<2x4x16xf32> role = "activation"
plan.buffer @loss : tensor<f32> role = "activation" name = "loss"
plan.buffer @lse : tensor<2x4xf32> role = "activation"
plan.buffer @dlogits : tensor<2x4x16xf32> role = "activation"
plan.buffer @dhd : tensor<2x4x8xf32> role = "activation"
plan.buffer @dh : tensor<2x4x8xf32> role = "activation"
plan.buffer @dxd : tensor<2x4x8xf32> role = "activation"
plan.buffer @dx : tensor<2x4x8xf32> role = "activation"
plan.func @micro_step {
  plan.kernel "EMBEDDING" [@wte, @tok] -> [@x] {} {provenance = "wte"}
  plan.kernel "DROPOUT" [@x] -> [@xd] {rate = 0.1 : f64, rng_id = 0 : i64} {provenance = "embedding dropout"}
  plan.kernel "LINEAR" [@xd, @w] -> [@h] {transpose_w = 0 : i64} {provenance = "h.0"}
  plan.kernel "DROPOUT" [@h] -> [@hd] {rate = 0.1 : f64, rng_id = 1 : i64}
  plan.kernel "LINEAR" [@hd, @wte] -> [@logits] {transpose_w = 1 : i64} {provenance = "lm_head"}
  plan.kernel "CROSS_ENTROPY" [@logits, @tgt] -> [@loss, @lse] {} {provenance = "loss"}
  plan.kernel "CROSS_ENTROPY_GRAD" [@logits, @tgt, @lg, @lse] -> [@dlogits] {} {provenance = "loss grad"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@hd, @dlogits] -> [@dwte] {transpose_w = 1 : i64} {provenance = "lm_head dw"}
  plan.kernel "LINEAR_GRAD_INPUT" [@dlogits, @wte] -> [@dhd] {transpose_w = 1 : i64} {provenance = "lm_head dx"}
  plan.kernel "DROPOUT" [@dhd] -> [@dh] {rate = 0.1 : f64, rng_id = 1 : i64} {provenance = "dropout grad"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@xd, @dh] -> [@dw] {transpose_w = 0 : i64} {provenance = "h.0 dw"}
  plan.kernel "LINEAR_GRAD_INPUT" [@dh, @w] -> [@dxd] {transpose_w = 0 : i64} {provenance = "h.0 dx"}
  plan.kernel "DROPOUT" [@dxd] -> [@dx] {rate = 0.1 : f64, rng_id = 0 : i64} {provenance = "embedding dropout grad"}
  plan.kernel "EMBEDDING_GRAD" [@dx, @tok] -> [@dwte] {} {provenance = "wte dw"}
}
plan.func @update {
  plan.kernel "ALL_REDUCE" [@dwte, @dw] -> [@dwte, @dw] {} {group = ["dp"], provenance = "sum"}
}

// -----

// Tests the slice's rules on their own. Walking back from the loss (k5):
// k4 writes b, which nothing kept reads: dropped. k3 writes a (k5 reads
// it): kept, a's need ends, t's begins. k2 adds into t (an accumulating
// output): kept, and t is still needed, so k1, which sets t, is kept too
// and ends t's need: k0, whose t k1 overwrites, is dropped. So the copy is
// a slice of the data flow whatever the kernels are (k2 is a gradient
// kernel), and the indices are the originals'.
// CHECK-LABEL: {{^}}module {
// CHECK: plan.func @eval_step attributes {plan.eval_of = @micro_step} {
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@t] {} {plan.eval_index = 1 : i64, provenance = "k1"}
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" [@x, @x] -> [@t] {} {plan.eval_index = 2 : i64, provenance = "k2"}
// CHECK-NEXT: plan.kernel "ADD" [@t, @x] -> [@a] {} {plan.eval_index = 3 : i64, provenance = "k3"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY" [@a, @y] -> [@l] {} {plan.eval_index = 5 : i64, provenance = "k5"}
// CHECK-NEXT: {{^ *}}}{{$}}
plan.buffer @x : tensor<4x4xf32> role = "input" name = "x"
plan.buffer @y : tensor<4xi32> role = "input" name = "targets"
plan.buffer @t : tensor<4x4xf32> role = "activation"
plan.buffer @a : tensor<4x4xf32> role = "activation"
plan.buffer @b : tensor<4x4xf32> role = "activation"
plan.buffer @l : tensor<f32> role = "activation" name = "loss"
plan.func @micro_step {
  plan.kernel "COPY" [@x] -> [@t] {} {provenance = "k0"}
  plan.kernel "ZERO" [] -> [@t] {} {provenance = "k1"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@x, @x] -> [@t] {} {provenance = "k2"}
  plan.kernel "ADD" [@t, @x] -> [@a] {} {provenance = "k3"}
  plan.kernel "COPY" [@a] -> [@b] {} {provenance = "k4"}
  plan.kernel "CROSS_ENTROPY" [@a, @y] -> [@l] {} {provenance = "k5"}
}

// -----

// Tests asynchronous collectives: the tensor-parallel sum of h (k1) is
// kept, the data-parallel sums of the gradients g (k3) and g2 (k5) are
// not. The WAIT that finishes h's and g's (k6) is kept naming only h; the
// one that finishes only g2's (k7) is dropped.
// CHECK-LABEL: {{^}}module {
// CHECK: plan.func @eval_step attributes {plan.eval_of = @micro_step} {
// CHECK-NEXT: plan.kernel "LINEAR" [@x, @w] -> [@h] {} {plan.eval_index = 0 : i64, provenance = "k0"}
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@h] -> [@h] {async = 1 : i64} {group = ["tp"], plan.eval_index = 1 : i64, provenance = "k1"}
// CHECK-NEXT: plan.kernel "WAIT" [@h] -> [] {} {plan.eval_index = 6 : i64, provenance = "k6"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY" [@h, @y] -> [@l] {} {plan.eval_index = 8 : i64, provenance = "k8"}
// CHECK-NEXT: {{^ *}}}{{$}}
plan.buffer @x : tensor<4x4xf32> role = "input" name = "x"
plan.buffer @y : tensor<4xi32> role = "input" name = "targets"
plan.buffer @dy : tensor<4x4xf32> role = "input" name = "dy"
plan.buffer @w : tensor<4x4xf32> role = "parameter" name = "w"
plan.buffer @g : tensor<4x4xf32> role = "gradient" name = "w"
plan.buffer @w2 : tensor<4x4xf32> role = "parameter" name = "w2"
plan.buffer @g2 : tensor<4x4xf32> role = "gradient" name = "w2"
plan.buffer @h : tensor<4x4xf32> role = "activation"
plan.buffer @l : tensor<f32> role = "activation" name = "loss"
plan.func @micro_step {
  plan.kernel "LINEAR" [@x, @w] -> [@h] {} {provenance = "k0"}
  plan.kernel "ALL_REDUCE" [@h] -> [@h] {async = 1 : i64} {group = ["tp"], provenance = "k1"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@x, @dy] -> [@g] {} {provenance = "k2"}
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {async = 1 : i64} {group = ["dp"], provenance = "k3"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@x, @dy] -> [@g2] {} {provenance = "k4"}
  plan.kernel "ALL_REDUCE" [@g2] -> [@g2] {async = 1 : i64} {group = ["dp"], provenance = "k5"}
  plan.kernel "WAIT" [@h, @g] -> [] {} {provenance = "k6"}
  plan.kernel "WAIT" [@g2] -> [] {} {provenance = "k7"}
  plan.kernel "CROSS_ENTROPY" [@h, @y] -> [@l] {} {provenance = "k8"}
}

// -----

// Tests ZeRO-3's gathers (as plan-lower makes them): the forward gathers
// the rank's block of the parameters (blk) into the flat buffer F, whose
// views p0 and p1 its LINEARs read; the backward gathers again into Fb.
// The forward's gather is kept (the LINEARs need F, through its views):
// the COPY of the block, the asynchronous ALL_GATHER and its WAIT. The
// backward's, whose Fb nothing kept reads, is not.
// CHECK-LABEL: {{^}}module {
// CHECK: plan.func @eval_step attributes {plan.eval_of = @micro_step} {
// CHECK-NEXT: plan.kernel "COPY" [@blk] -> [@F] {} {plan.eval_index = 0 : i64, provenance = "k0", rank_axis = "dp"}
// CHECK-NEXT: plan.kernel "ALL_GATHER" [@F] -> [@F] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], plan.eval_index = 1 : i64, provenance = "k1"}
// CHECK-NEXT: plan.kernel "WAIT" [@F] -> [] {} {plan.eval_index = 2 : i64, provenance = "k2"}
// CHECK-NEXT: plan.kernel "LINEAR" [@x, @p0] -> [@h] {} {plan.eval_index = 3 : i64, provenance = "k3"}
// CHECK-NEXT: plan.kernel "LINEAR" [@h, @p1] -> [@z] {} {plan.eval_index = 4 : i64, provenance = "k4"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY" [@z, @y] -> [@l] {} {plan.eval_index = 5 : i64, provenance = "k5"}
// CHECK-NEXT: {{^ *}}}{{$}}
plan.buffer @F : tensor<32xf32> role = "activation"
plan.buffer @p0 : tensor<4x4xf32> role = "parameter" name = "w0" view_of = @F view_offset = 0
plan.buffer @p1 : tensor<4x4xf32> role = "parameter" name = "w1" view_of = @F view_offset = 64
plan.buffer @blk : tensor<16xf32> role = "parameter" name = "zero bucket 0" block_of = @F
plan.buffer @Fb : tensor<32xf32> role = "activation"
plan.buffer @q1 : tensor<4x4xf32> role = "parameter" name = "w1" view_of = @Fb view_offset = 64
plan.buffer @x : tensor<4x4xf32> role = "input" name = "x"
plan.buffer @y : tensor<4xi32> role = "input" name = "targets"
plan.buffer @lg : tensor<f32> role = "input" name = "loss_grad"
plan.buffer @h : tensor<4x4xf32> role = "activation"
plan.buffer @z : tensor<4x4xf32> role = "activation"
plan.buffer @l : tensor<f32> role = "activation" name = "loss"
plan.buffer @dz : tensor<4x4xf32> role = "activation"
plan.buffer @dh : tensor<4x4xf32> role = "activation"
plan.buffer @g1 : tensor<4x4xf32> role = "gradient" name = "w1"
plan.func @micro_step {
  plan.kernel "COPY" [@blk] -> [@F] {} {provenance = "k0", rank_axis = "dp"}
  plan.kernel "ALL_GATHER" [@F] -> [@F] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "k1"}
  plan.kernel "WAIT" [@F] -> [] {} {provenance = "k2"}
  plan.kernel "LINEAR" [@x, @p0] -> [@h] {} {provenance = "k3"}
  plan.kernel "LINEAR" [@h, @p1] -> [@z] {} {provenance = "k4"}
  plan.kernel "CROSS_ENTROPY" [@z, @y] -> [@l] {} {provenance = "k5"}
  plan.kernel "CROSS_ENTROPY_GRAD" [@z, @y, @lg] -> [@dz] {} {provenance = "k6"}
  plan.kernel "COPY" [@blk] -> [@Fb] {} {provenance = "k7", rank_axis = "dp"}
  plan.kernel "ALL_GATHER" [@Fb] -> [@Fb] {async = 1 : i64, dim = 0 : i64} {group = ["dp"], provenance = "k8"}
  plan.kernel "WAIT" [@Fb] -> [] {} {provenance = "k9"}
  plan.kernel "LINEAR_GRAD_INPUT" [@dz, @q1] -> [@dh] {} {provenance = "k10"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@h, @dz] -> [@g1] {} {provenance = "k11"}
}

// -----

// Tests views of a bucket (ZeRO-1's parameters): the LINEAR reads p0, a
// view of B, so the ALL_GATHER of B (k0) is needed. A write into another
// view of B (k1, into p1) does not end that need: the need is the whole
// bucket's, so k1 is kept and so is the gather before it.
// CHECK-LABEL: {{^}}module {
// CHECK: plan.func @eval_step attributes {plan.eval_of = @micro_step} {
// CHECK-NEXT: plan.kernel "ALL_GATHER" [@B] -> [@B] {dim = 0 : i64} {group = ["dp"], plan.eval_index = 0 : i64, provenance = "k0"}
// CHECK-NEXT: plan.kernel "COPY" [@x] -> [@p1] {} {plan.eval_index = 1 : i64, provenance = "k1"}
// CHECK-NEXT: plan.kernel "LINEAR" [@x, @p0] -> [@z] {} {plan.eval_index = 2 : i64, provenance = "k2"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY" [@z, @y] -> [@l] {} {plan.eval_index = 3 : i64, provenance = "k3"}
// CHECK-NEXT: {{^ *}}}{{$}}
plan.buffer @B : tensor<32xf32> role = "bucket"
plan.buffer @p0 : tensor<4x4xf32> role = "parameter" name = "w0" view_of = @B view_offset = 0
plan.buffer @p1 : tensor<4x4xf32> role = "parameter" name = "w1" view_of = @B view_offset = 64
plan.buffer @x : tensor<4x4xf32> role = "input" name = "x"
plan.buffer @y : tensor<4xi32> role = "input" name = "targets"
plan.buffer @z : tensor<4x4xf32> role = "activation"
plan.buffer @l : tensor<f32> role = "activation" name = "loss"
plan.func @micro_step {
  plan.kernel "ALL_GATHER" [@B] -> [@B] {dim = 0 : i64} {group = ["dp"], provenance = "k0"}
  plan.kernel "COPY" [@x] -> [@p1] {} {provenance = "k1"}
  plan.kernel "LINEAR" [@x, @p0] -> [@z] {} {provenance = "k2"}
  plan.kernel "CROSS_ENTROPY" [@z, @y] -> [@l] {} {provenance = "k3"}
}

// -----

// Tests pipeline stages with two model chunks each (pp = 2, interleaved):
// layer 0 (with the embedding) and layer 2 on stage 0, layers 1 and 3 (with
// the loss) on stage 1. Each stage gets eval_forward and each chunk's
// dictionary its own, the copies placed right after their originals. The
// copies of the functions that send (all but stage 1's chunk 1) keep their
// SEND and what it reads; stage 1's chunk 1 computes its stage's loss.
// Each drops the stash (a COPY only the backward reads); stage 0's
// dropout becomes a COPY. The backward functions get no copy.
// CHECK-LABEL: {{^}}module {
// CHECK: plan.func @stage0_forward {
// CHECK: plan.func @stage0_forward_eval attributes {plan.eval_of = @stage0_forward} {
// CHECK-NEXT: plan.kernel "EMBEDDING" [@wte, @tok] -> [@a0] {} {plan.eval_index = 0 : i64, provenance = "wte"}
// CHECK-NEXT: plan.kernel "COPY" [@a0] -> [@a0d] {} {plan.eval_index = 1 : i64, provenance = "dropout (evaluation: no dropout)"}
// CHECK-NEXT: plan.kernel "SEND" [@a0d] -> [] {} {plan.eval_index = 3 : i64, provenance = "to stage 1", rank_axis = "pp"}
// CHECK-NEXT: {{^ *}}}{{$}}
// CHECK-NEXT: plan.func @stage0_backward {
// CHECK-NOT: _eval
// CHECK: plan.func @stage0_chunk1_forward {
// CHECK: plan.func @stage0_chunk1_forward_eval attributes {plan.eval_of = @stage0_chunk1_forward} {
// CHECK-NEXT: plan.kernel "RECV" [] -> [@r2] {} {plan.eval_index = 0 : i64, provenance = "from stage 1", rank_axis = "pp"}
// CHECK-NEXT: plan.kernel "LINEAR" [@r2, @w2] -> [@a2] {} {plan.eval_index = 1 : i64, provenance = "h.2"}
// CHECK-NEXT: plan.kernel "SEND" [@a2] -> [] {} {plan.eval_index = 3 : i64, provenance = "to stage 1", rank_axis = "pp"}
// CHECK-NEXT: {{^ *}}}{{$}}
// CHECK-NEXT: plan.func @stage0_chunk1_backward {
// CHECK-NOT: _eval
// CHECK: plan.func @stage1_forward {
// CHECK: plan.func @stage1_forward_eval attributes {plan.eval_of = @stage1_forward} {
// CHECK-NEXT: plan.kernel "RECV" [] -> [@r1] {} {plan.eval_index = 0 : i64, provenance = "from stage 0", rank_axis = "pp"}
// CHECK-NEXT: plan.kernel "LINEAR" [@r1, @w1] -> [@a1] {} {plan.eval_index = 1 : i64, provenance = "h.1"}
// CHECK-NEXT: plan.kernel "SEND" [@a1] -> [] {} {plan.eval_index = 3 : i64, provenance = "to stage 0", rank_axis = "pp"}
// CHECK-NEXT: {{^ *}}}{{$}}
// CHECK-NEXT: plan.func @stage1_backward {
// CHECK-NOT: _eval
// CHECK: plan.func @stage1_chunk1_forward {
// CHECK: plan.func @stage1_chunk1_forward_eval attributes {plan.eval_of = @stage1_chunk1_forward} {
// CHECK-NEXT: plan.kernel "RECV" [] -> [@r3] {} {plan.eval_index = 0 : i64, provenance = "from stage 0", rank_axis = "pp"}
// CHECK-NEXT: plan.kernel "LINEAR" [@r3, @w3] -> [@logits] {} {plan.eval_index = 1 : i64, provenance = "lm_head"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY" [@logits, @tgt] -> [@loss, @lse] {} {plan.eval_index = 2 : i64, provenance = "loss"}
// CHECK-NEXT: {{^ *}}}{{$}}
// CHECK-NEXT: plan.func @stage1_chunk1_backward {
// CHECK-NOT: _eval
// CHECK: plan.stage 0 {backward = @stage0_backward, chunks = [{backward = @stage0_chunk1_backward, eval_forward = @stage0_chunk1_forward_eval, forward = @stage0_chunk1_forward}], eval_forward = @stage0_forward_eval, first_layer = 0 : i64, forward = @stage0_forward,
// CHECK-NEXT: plan.stage 1 {backward = @stage1_backward, chunks = [{backward = @stage1_chunk1_backward, eval_forward = @stage1_chunk1_forward_eval, forward = @stage1_chunk1_forward}], eval_forward = @stage1_forward_eval, first_layer = 1 : i64, forward = @stage1_forward,
plan.buffer @tok : tensor<2x4xi32> role = "input" name = "tokens" stage = 0
plan.buffer @wte : tensor<16x8xf32> role = "parameter" name = "wte" stage = 0
plan.buffer @w2 : tensor<8x8xf32> role = "parameter" name = "h.2.w" stage = 0
plan.buffer @a0 : tensor<2x4x8xf32> role = "activation" stage = 0
plan.buffer @a0d : tensor<2x4x8xf32> role = "activation" stage = 0 slots = 1
plan.buffer @s0 : tensor<2x4x8xf32> role = "activation" stage = 0 slots = 1
plan.buffer @r2 : tensor<2x4x8xf32> role = "activation" stage = 0 slots = 1
plan.buffer @a2 : tensor<2x4x8xf32> role = "activation" stage = 0
plan.buffer @s2 : tensor<2x4x8xf32> role = "activation" stage = 0 slots = 1
plan.buffer @dw2 : tensor<8x8xf32> role = "gradient" name = "h.2.w" stage = 0
plan.buffer @w1 : tensor<8x8xf32> role = "parameter" name = "h.1.w" stage = 1
plan.buffer @w3 : tensor<8x16xf32> role = "parameter" name = "lm_head" stage = 1
plan.buffer @tgt : tensor<2x4xi32> role = "input" name = "targets" stage = 1
plan.buffer @r1 : tensor<2x4x8xf32> role = "activation" stage = 1 slots = 1
plan.buffer @a1 : tensor<2x4x8xf32> role = "activation" stage = 1
plan.buffer @s1 : tensor<2x4x8xf32> role = "activation" stage = 1 slots = 1
plan.buffer @r3 : tensor<2x4x8xf32> role = "activation" stage = 1 slots = 1
plan.buffer @logits : tensor<2x4x16xf32> role = "activation" stage = 1
plan.buffer @loss : tensor<f32> role = "activation" name = "loss" stage = 1
plan.buffer @lse : tensor<2x4xf32> role = "activation" stage = 1 slots = 1
plan.buffer @s3 : tensor<2x4x16xf32> role = "activation" stage = 1 slots = 1
plan.buffer @dw1 : tensor<8x8xf32> role = "gradient" name = "h.1.w" stage = 1
plan.func @stage0_forward {
  plan.kernel "EMBEDDING" [@wte, @tok] -> [@a0] {} {provenance = "wte"}
  plan.kernel "DROPOUT" [@a0] -> [@a0d] {rate = 0.1 : f64, rng_id = 0 : i64} {provenance = "dropout"}
  plan.kernel "COPY" [@a0d] -> [@s0] {} {provenance = "stash"}
  plan.kernel "SEND" [@a0d] -> [] {} {provenance = "to stage 1", rank_axis = "pp"}
}
plan.func @stage0_backward {
  plan.kernel "ZERO" [] -> [@s0] {} {provenance = "b0"}
}
plan.func @stage0_chunk1_forward {
  plan.kernel "RECV" [] -> [@r2] {} {provenance = "from stage 1", rank_axis = "pp"}
  plan.kernel "LINEAR" [@r2, @w2] -> [@a2] {} {provenance = "h.2"}
  plan.kernel "COPY" [@a2] -> [@s2] {} {provenance = "stash"}
  plan.kernel "SEND" [@a2] -> [] {} {provenance = "to stage 1", rank_axis = "pp"}
}
plan.func @stage0_chunk1_backward {
  plan.kernel "LINEAR_GRAD_WEIGHT" [@r2, @s2] -> [@dw2] {} {provenance = "h.2 dw"}
  plan.kernel "SEND" [@s2] -> [] {} {provenance = "grad to stage 1", rank_axis = "pp"}
}
plan.func @stage1_forward {
  plan.kernel "RECV" [] -> [@r1] {} {provenance = "from stage 0", rank_axis = "pp"}
  plan.kernel "LINEAR" [@r1, @w1] -> [@a1] {} {provenance = "h.1"}
  plan.kernel "COPY" [@a1] -> [@s1] {} {provenance = "stash"}
  plan.kernel "SEND" [@a1] -> [] {} {provenance = "to stage 0", rank_axis = "pp"}
}
plan.func @stage1_backward {
  plan.kernel "LINEAR_GRAD_WEIGHT" [@r1, @s1] -> [@dw1] {} {provenance = "h.1 dw"}
}
plan.func @stage1_chunk1_forward {
  plan.kernel "RECV" [] -> [@r3] {} {provenance = "from stage 0", rank_axis = "pp"}
  plan.kernel "LINEAR" [@r3, @w3] -> [@logits] {} {provenance = "lm_head"}
  plan.kernel "CROSS_ENTROPY" [@logits, @tgt] -> [@loss, @lse] {} {provenance = "loss"}
  plan.kernel "COPY" [@logits] -> [@s3] {} {provenance = "stash"}
}
plan.func @stage1_chunk1_backward {
  plan.kernel "ZERO" [] -> [@s3] {} {provenance = "b3"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 2 : i64, forward = @stage0_forward, backward = @stage0_backward, chunks = [{forward = @stage0_chunk1_forward, backward = @stage0_chunk1_backward}], slots = 1 : i64}
plan.stage 1 {first_layer = 1 : i64, num_layers = 2 : i64, forward = @stage1_forward, backward = @stage1_backward, chunks = [{forward = @stage1_chunk1_forward, backward = @stage1_chunk1_backward}], slots = 1 : i64}

// -----

// Tests a module without micro_step or stages (no training step): the
// pass adds nothing.
// CHECK-LABEL: {{^}}module {
// CHECK: plan.func @update {
// CHECK-NOT: _eval
// CHECK-NOT: eval_
plan.buffer @g : tensor<4xf32> role = "gradient" name = "w"
plan.buffer @loss : tensor<f32> role = "activation" name = "loss"
plan.func @update {
  plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"], provenance = "sum"}
}

//--- errors.mlir
// Tests a plan that has @eval_step already (the pass ran).
// expected-error @below {{plan-eval: the module already has @eval_step}}
module {
  plan.buffer @l : tensor<f32> role = "activation" name = "loss"
  plan.func @micro_step {
    plan.kernel "ZERO" [] -> [@l] {} {provenance = "k0"}
  }
  plan.func @eval_step {
  }
}

// -----

// Tests a micro-step without a buffer named "loss".
plan.buffer @l : tensor<f32> role = "activation" name = "lm_loss"
// expected-error @below {{plan-eval: the plan has no buffer named "loss"}}
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@l] {} {provenance = "k0"}
}

// -----

// Tests a micro-step that never writes its loss.
plan.buffer @l : tensor<f32> role = "activation" name = "loss"
plan.buffer @t : tensor<f32> role = "activation"
// expected-error @below {{plan-eval: @micro_step computes neither the loss nor a send: nothing to evaluate}}
plan.func @micro_step {
  plan.kernel "ZERO" [] -> [@t] {} {provenance = "k0"}
}

// -----

// Tests a stage whose forward's copy exists already.
// expected-error @below {{plan-eval: the module already has @f_eval}}
module {
  plan.buffer @x : tensor<4xf32> role = "activation" stage = 0
  plan.func @f {
    plan.kernel "SEND" [@x] -> [] {} {provenance = "f0", rank_axis = "pp"}
  }
  plan.func @f_eval {
  }
  plan.func @b {
  }
  plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b}
}

// -----

// Tests a chunk without a forward function.
plan.buffer @x : tensor<4xf32> role = "activation" stage = 0
plan.func @f {
  plan.kernel "SEND" [@x] -> [] {} {provenance = "f0", rank_axis = "pp"}
}
plan.func @b {
}
// expected-error @below {{'plan.stage' op plan-eval: a chunk has no forward function}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b, chunks = [{backward = @b}]}

// -----

// Tests a stage whose forward neither sends nor writes the stage's loss
// (the plan's loss is another stage's).
plan.buffer @x : tensor<4xf32> role = "activation" stage = 0
plan.buffer @l : tensor<f32> role = "activation" name = "loss" stage = 1
// expected-error @below {{plan-eval: @f computes neither the loss nor a send: nothing to evaluate}}
plan.func @f {
  plan.kernel "ZERO" [] -> [@x] {} {provenance = "f0"}
}
plan.func @b {
}
plan.func @f1 {
  plan.kernel "ZERO" [] -> [@l] {} {provenance = "f1"}
}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @b}
plan.stage 1 {first_layer = 1 : i64, num_layers = 1 : i64, forward = @f1, backward = @b}

//--- memory.mlir
// Tests that the copy changes no offset: its kernels take their
// originals' positions (plan.eval_index). The persistent buffers come
// first (w, y, l, g: 64 bytes each after alignment); a lives over k0-k1
// at 256, b over k1-k2 beside it at 320 (k1 reads a and writes b), c over
// k3-k4 in a's space, dead since k1. Were the copy's kernels (k0, k1, k2)
// placed after micro_step's, a and b would live on to them and c would go
// to 384.
// MEM-LABEL: module attributes {plan.arena_bytes = 384 : i64}
// MEM-NEXT: plan.buffer @w : {{.*}} offset = 0
// MEM-NEXT: plan.buffer @y : {{.*}} offset = 64
// MEM-NEXT: plan.buffer @l : {{.*}} offset = 128
// MEM-NEXT: plan.buffer @g : {{.*}} offset = 192
// MEM-NEXT: plan.buffer @a : {{.*}} offset = 256
// MEM-NEXT: plan.buffer @b : {{.*}} offset = 320
// MEM-NEXT: plan.buffer @c : {{.*}} offset = 256
// EVALMEM: plan.func @eval_step attributes {plan.eval_of = @micro_step} {
// EVALMEM-NEXT: plan.kernel "ADD" [@w, @w] -> [@a] {} {plan.eval_index = 0 : i64, provenance = "k0"}
// EVALMEM-NEXT: plan.kernel "COPY" [@a] -> [@b] {} {plan.eval_index = 1 : i64, provenance = "k1 (evaluation: no dropout)"}
// EVALMEM-NEXT: plan.kernel "CROSS_ENTROPY" [@b, @y] -> [@l] {} {plan.eval_index = 2 : i64, provenance = "k2"}
// EVALMEM-NEXT: {{^ *}}}{{$}}
plan.buffer @w : tensor<16xf32> role = "parameter" name = "w"
plan.buffer @y : tensor<4xi32> role = "input" name = "targets"
plan.buffer @l : tensor<f32> role = "activation" name = "loss"
plan.buffer @g : tensor<16xf32> role = "gradient" name = "w"
plan.buffer @a : tensor<16xf32> role = "activation"
plan.buffer @b : tensor<16xf32> role = "activation"
plan.buffer @c : tensor<16xf32> role = "activation"
plan.func @micro_step {
  plan.kernel "ADD" [@w, @w] -> [@a] {} {provenance = "k0"}
  plan.kernel "DROPOUT" [@a] -> [@b] {rate = 0.1 : f64, rng_id = 0 : i64} {provenance = "k1"}
  plan.kernel "CROSS_ENTROPY" [@b, @y] -> [@l] {} {provenance = "k2"}
  plan.kernel "ZERO" [] -> [@c] {} {provenance = "k3"}
  plan.kernel "LINEAR_GRAD_WEIGHT" [@c, @c] -> [@g] {} {provenance = "k4"}
}
