// RUN: braid-opt %s -split-input-file -plan-lower -verify-diagnostics | FileCheck %s
// RUN: braid-opt %s -split-input-file -plan-lower=split-backward=true -verify-diagnostics | FileCheck %s --check-prefix=SPLIT

// ZeRO (the zero and zero-bucket-bytes options) is tested through braidc
// by ../pipeline/plan-lower-zero.mlir.

// Tests the lowering of one training step after the optimizer and
// model-shard (dp = 2): an embedding tied to the output layer, a one-op
// layer (gelu), the loss, their gradients, the step's all-reduce of the
// gradient over dp, the clipping norm and AdamW.
// Every argument is a buffer of its role named as the argument; the
// parameter's gradient gets a gradient buffer named as the parameter; the
// loss and the gradient norm are named.
// CHECK-DAG: plan.buffer @[[W:b[0-9]+]] : tensor<4x2xf32> role = "parameter" name = "w"
// CHECK-DAG: plan.buffer @[[TOK:b[0-9]+]] : tensor<1x3xi32> role = "input" name = "tokens"
// CHECK-DAG: plan.buffer @[[TGT:b[0-9]+]] : tensor<1x3xi32> role = "input" name = "targets"
// CHECK-DAG: plan.buffer @[[DL:b[0-9]+]] : tensor<f32> role = "input" name = "loss_grad"
// CHECK-DAG: plan.buffer @[[M:b[0-9]+]] : tensor<4x2xf32> role = "optimizer_state" name = "exp_avg:w"
// CHECK-DAG: plan.buffer @[[V:b[0-9]+]] : tensor<4x2xf32> role = "optimizer_state" name = "exp_avg_sq:w"
// CHECK-DAG: plan.buffer @[[LR:b[0-9]+]] : tensor<f32> role = "input" name = "lr"
// CHECK-DAG: plan.buffer @[[STEP:b[0-9]+]] : tensor<i64> role = "input" name = "step"
// CHECK-DAG: plan.buffer @[[G:b[0-9]+]] : tensor<4x2xf32> role = "gradient" name = "w"
// CHECK-DAG: plan.buffer @[[LOSS:b[0-9]+]] : tensor<f32> role = "activation" name = "loss"
// CHECK-DAG: plan.buffer @[[NORM:b[0-9]+]] : tensor<f32> role = "activation" name = "grad_norm"
// zero_grads zeroes the gradient buffer once per step.
// CHECK-LABEL: plan.func @zero_grads {
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@[[G]]] {} {provenance = "zero_grads: w"}
// CHECK-NEXT: {{^ *}}}
// micro_step: one kernel per op, named as the op, its attributes as
// parameters (absent flags 0), its place as provenance; the layer inlined.
// Both halves of the tied gradient accumulate straight into the gradient
// buffer: no ADD, no ZERO. The loss keeps its log-sum-exp (a second
// output) for its gradient, which overwrites the logits (nothing reads
// them after it).
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NEXT: plan.kernel "EMBEDDING" [@[[W]], @[[TOK]]] -> [@[[E:b[0-9]+]]] {} {provenance = "model.embedding in train_step"}
// CHECK-NEXT: plan.kernel "GELU" [@[[E]]] -> [@[[H:b[0-9]+]]] {tanh = 0 : i64} {provenance = "model.gelu in layer 0"}
// CHECK-NEXT: plan.kernel "LINEAR" [@[[H]], @[[W]]] -> [@[[Z:b[0-9]+]]] {transpose_w = 1 : i64} {provenance = "model.linear in train_step"}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY" [@[[Z]], @[[TGT]]] -> [@[[LOSS]], @[[LSE:b[0-9]+]]] {ignore_index = -100 : i64}
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY_GRAD" [@[[Z]], @[[TGT]], @[[DL]], @[[LSE]]] -> [@[[Z]]] {ignore_index = -100 : i64}
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" [@[[H]], @[[Z]]] -> [@[[G]]] {transpose_w = 1 : i64}
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_INPUT" [@[[Z]], @[[W]]] -> [@[[DH:b[0-9]+]]] {transpose_w = 1 : i64}
// CHECK-NEXT: plan.kernel "GELU_GRAD" [@[[E]], @[[DH]]] -> [@[[DE:b[0-9]+]]] {tanh = 0 : i64} {provenance = "model.gelu_grad in layer 0 backward"}
// CHECK-NEXT: plan.kernel "EMBEDDING_GRAD" [@[[DE]], @[[TOK]]] -> [@[[G]]] {}
// CHECK-NEXT: {{^ *}}}
// update: the sum over dp in place on the accumulated gradient (its group
// the mesh axes, its reason the provenance), the norm, AdamW in place.
// CHECK-LABEL: plan.func @update {
// CHECK-NEXT: plan.kernel "ALL_REDUCE" [@[[G]]] -> [@[[G]]] {} {group = ["dp"], provenance = "sum of the gradient of w"}
// CHECK-NEXT: plan.kernel "GRAD_NORM" [@[[G]]] -> [@[[NORM]], @[[SCALE:b[0-9]+]]] {max_norm = 1.000000e+00 : f64}
// CHECK-NEXT: plan.kernel "ADAMW" [@[[W]], @[[G]], @[[M]], @[[V]], @[[LR]], @[[STEP]], @[[SCALE]]] -> [@[[W]], @[[M]], @[[V]]] {beta1 = 9.000000e-01 : f64, {{.*}}, weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: {{^ *}}}
// CHECK-NOT: func.func
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"},
                      %t: tensor<1x3xi32> {model.input = "tokens"},
                      %y: tensor<1x3xi32> {model.input = "targets"},
                      %dl: tensor<f32> {model.input = "loss_grad"},
                      %m: tensor<4x2xf32> {model.opt_state = "exp_avg:w"},
                      %v: tensor<4x2xf32> {model.opt_state = "exp_avg_sq:w"},
                      %lr: tensor<f32> {model.input = "lr"},
                      %step: tensor<i64> {model.input = "step"})
    -> (tensor<f32>, tensor<f32>, tensor<4x2xf32> {model.param = "w"}, tensor<4x2xf32> {model.opt_state = "exp_avg:w"}, tensor<4x2xf32> {model.opt_state = "exp_avg_sq:w"}) {
  %e = model.embedding %w[%t] : (tensor<4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
  %h = model.layer 0 (%e) : (tensor<1x3x2xf32>) -> tensor<1x3x2xf32> {
  ^bb0(%x: tensor<1x3x2xf32>):
    %a = model.gelu %x : (tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
    model.yield %a : tensor<1x3x2xf32>
  }
  %z = model.linear %h, %w transpose_w : (tensor<1x3x2xf32>, tensor<4x2xf32>) -> tensor<1x3x4xf32>
  %l = model.cross_entropy %z, %y ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>) -> tensor<f32>
  %dz = model.cross_entropy_grad %z, %y, %dl ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>, tensor<f32>) -> tensor<1x3x4xf32>
  %gh = model.linear_grad_weight %h, %dz transpose_w : (tensor<1x3x2xf32>, tensor<1x3x4xf32>) -> tensor<4x2xf32>
  %dh = model.linear_grad_input %dz, %w transpose_w : (tensor<1x3x4xf32>, tensor<4x2xf32>) -> tensor<1x3x2xf32>
  %de = model.layer 0 backward(%dh, %e) : (tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2xf32> {
  ^bb0(%dy: tensor<1x3x2xf32>, %x: tensor<1x3x2xf32>):
    %dx = model.gelu_grad %x, %dy : (tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
    model.yield %dx : tensor<1x3x2xf32>
  }
  %ge = model.embedding_grad %de[%t] : (tensor<1x3x2xf32>, tensor<1x3xi32>) -> tensor<4x2xf32>
  %g = model.add %gh, %ge : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  %sum = model.all_reduce %g over @mesh ["dp"] reason = "sum of the gradient of w" : (tensor<4x2xf32>) -> tensor<4x2xf32>
  %norm, %scale = model.grad_norm %sum max_norm = 1.0 : (tensor<4x2xf32>) -> (tensor<f32>, tensor<f32>)
  %p, %m1, %v1 = model.adamw %w, %sum, %m, %v, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
  return %l, %norm, %p, %m1, %v1 : tensor<f32>, tensor<f32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}

// -----

// Tests that the cross-entropy's gradient keeps a buffer of its own when
// the logits are read after it: here a result of the step.
// CHECK-LABEL: plan.func @micro_step {
// CHECK: plan.kernel "CROSS_ENTROPY" [@[[Z:b[0-9]+]], @{{b[0-9]+}}] -> [@{{b[0-9]+}}, @[[LSE:b[0-9]+]]]
// CHECK-NEXT: plan.kernel "CROSS_ENTROPY_GRAD" [@[[Z]], @{{b[0-9]+}}, @{{b[0-9]+}}, @[[LSE]]] -> [@[[DZ:b[0-9]+]]]
// CHECK-NOT: -> [@[[Z]]]
// CHECK: plan.kernel "LINEAR_GRAD_WEIGHT" [@{{b[0-9]+}}, @[[DZ]]]
model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 1]
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"},
                      %t: tensor<1x3xi32> {model.input = "tokens"},
                      %y: tensor<1x3xi32> {model.input = "targets"},
                      %dl: tensor<f32> {model.input = "loss_grad"})
    -> (tensor<f32>, tensor<1x3x4xf32>, tensor<4x2xf32> {model.grad = "w"}) {
  %h = model.embedding %w[%t] : (tensor<4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
  %z = model.linear %h, %w transpose_w : (tensor<1x3x2xf32>, tensor<4x2xf32>) -> tensor<1x3x4xf32>
  %l = model.cross_entropy %z, %y ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>) -> tensor<f32>
  %dz = model.cross_entropy_grad %z, %y, %dl ignore_index = -100 : (tensor<1x3x4xf32>, tensor<1x3xi32>, tensor<f32>) -> tensor<1x3x4xf32>
  %gw = model.linear_grad_weight %h, %dz transpose_w : (tensor<1x3x2xf32>, tensor<1x3x4xf32>) -> tensor<4x2xf32>
  return %l, %z, %gw : tensor<f32>, tensor<1x3x4xf32>, tensor<4x2xf32>
}

// -----

// Tests the kernels that may write over an input (Kernels.def's
// kOverwritesInput flags): the result takes the buffer of an input that an
// op of the same block made and that nothing reads after. GELU_GRAD's x (e)
// is read after it, by the ADD, so it writes over its gradient input (s);
// the ADD then writes over its first input, the GELU_GRAD's result.
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NEXT: plan.kernel "EMBEDDING" [@{{b[0-9]+}}, @[[T:b[0-9]+]]] -> [@[[E:b[0-9]+]]]
// CHECK-NEXT: plan.kernel "GELU" [@[[E]]] -> [@[[A:b[0-9]+]]]
// CHECK-NEXT: plan.kernel "SCALE" [@[[A]]] -> [@[[S:b[0-9]+]]]
// CHECK-NEXT: plan.kernel "GELU_GRAD" [@[[E]], @[[S]]] -> [@[[S]]]
// CHECK-NEXT: plan.kernel "ADD" [@[[S]], @[[E]]] -> [@[[S]]]
// CHECK-NEXT: plan.kernel "EMBEDDING_GRAD" [@[[S]], @[[T]]]
model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 1]
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"},
                      %t: tensor<1x3xi32> {model.input = "tokens"})
    -> (tensor<4x2xf32> {model.grad = "w"}) {
  %e = model.embedding %w[%t] : (tensor<4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
  %a = model.gelu %e : (tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
  %s = model.scale %a scale = 0.5 : (tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
  %d = model.gelu_grad %e, %s : (tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
  %sum = model.add %d, %e : (tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
  %g = model.embedding_grad %sum[%t] : (tensor<1x3x2xf32>, tensor<1x3xi32>) -> tensor<4x2xf32>
  return %g : tensor<4x2xf32>
}

// -----

// Tests that a value a weight gradient reads is written over only without
// split-backward, which moves the weight gradients into a function that
// runs later: there the ADD writes over its other input.
// CHECK-LABEL: plan.func @micro_step {
// CHECK: plan.kernel "SCALE" [@{{b[0-9]+}}] -> [@[[DZ2:b[0-9]+]]] {scale = 2.500000e-01 : f64}
// CHECK-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" [@{{b[0-9]+}}, @[[DZ:b[0-9]+]]]
// CHECK-NEXT: plan.kernel "ADD" [@[[DZ]], @[[DZ2]]] -> [@[[DZ]]]
// SPLIT: plan.kernel "SCALE" [@{{b[0-9]+}}] -> [@[[DZ2:b[0-9]+]]] {scale = 2.500000e-01 : f64}
// SPLIT-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" [@{{b[0-9]+}}, @[[DZ:b[0-9]+]]]
// SPLIT-NEXT: plan.kernel "ADD" [@[[DZ]], @[[DZ2]]] -> [@[[DZ2]]]
model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 1]
func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"},
                      %t: tensor<1x3xi32> {model.input = "tokens"})
    -> (tensor<4x2xf32> {model.grad = "w"}) {
  %h = model.embedding %w[%t] : (tensor<4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
  %z = model.linear %h, %w transpose_w : (tensor<1x3x2xf32>, tensor<4x2xf32>) -> tensor<1x3x4xf32>
  %dz = model.scale %z scale = 0.5 : (tensor<1x3x4xf32>) -> tensor<1x3x4xf32>
  %dz2 = model.scale %z scale = 0.25 : (tensor<1x3x4xf32>) -> tensor<1x3x4xf32>
  %gw = model.linear_grad_weight %h, %dz transpose_w : (tensor<1x3x2xf32>, tensor<1x3x4xf32>) -> tensor<4x2xf32>
  %sum = model.add %dz, %dz2 : (tensor<1x3x4xf32>, tensor<1x3x4xf32>) -> tensor<1x3x4xf32>
  %dh = model.linear_grad_input %sum, %w transpose_w : (tensor<1x3x4xf32>, tensor<4x2xf32>) -> tensor<1x3x2xf32>
  %ge = model.embedding_grad %dh[%t] : (tensor<1x3x2xf32>, tensor<1x3xi32>) -> tensor<4x2xf32>
  %g = model.add %gw, %ge : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  return %g : tensor<4x2xf32>
}

// -----

// Tests a step before the optimizer (its gradients are the results marked
// model.grad), on tp ranks: the table split by vocabulary rows is a buffer
// marked with its shard axis and dimension; the lookup and its gradient on
// a vocabulary slice name the axis (rank_axis) and the stride of the slice's
// first row (vocab_start_stride, the local rows). Attention keeps each
// query row's log-sum-exp, [batch, heads, queries], as a second output,
// which its gradient reads as a sixth input; num_heads and num_kv_heads
// become heads and kv_heads, causal and alibi flags 1 and 0. Without an
// optimizer there is no update function.
// CHECK-LABEL: module {
// CHECK: plan.buffer @[[WTE:b[0-9]+]] : tensor<4x4xf32> role = "parameter" name = "wte" shard = "tp" dim = 0
// CHECK: plan.buffer @[[G:b[0-9]+]] : tensor<4x4xf32> role = "gradient" name = "wte"
// CHECK: plan.buffer @[[LSE:b[0-9]+]] : tensor<1x2x2xf32> role = "activation"
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NEXT: plan.kernel "EMBEDDING" [@[[WTE]], @[[TOK:b[0-9]+]]] -> [@[[E:b[0-9]+]]] {vocab_start_stride = 4 : i64} {provenance = "model.embedding in train_step", rank_axis = "tp"}
// CHECK-NEXT: plan.kernel "ATTENTION" [@[[E]], @[[E]], @[[E]]] -> [@[[O:b[0-9]+]], @[[LSE]]] {alibi = 0 : i64, causal = 1 : i64, heads = 2 : i64, kv_heads = 2 : i64, scale = 5.000000e-01 : f64}
// CHECK-NEXT: plan.kernel "ATTENTION_GRAD" [@[[E]], @[[E]], @[[E]], @[[O]], @[[O]], @[[LSE]]] -> [@[[DQ:b[0-9]+]], @{{b[0-9]+}}, @{{b[0-9]+}}] {alibi = 0 : i64, causal = 1 : i64, heads = 2 : i64, kv_heads = 2 : i64, scale = 5.000000e-01 : f64}
// CHECK-NEXT: plan.kernel "EMBEDDING_GRAD" [@[[DQ]], @[[TOK]]] -> [@[[G]]] {vocab_start_stride = 4 : i64} {provenance = "model.embedding_grad in train_step", rank_axis = "tp"}
// CHECK-NEXT: {{^ *}}}
// CHECK-NOT: plan.func @update
model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 2]
func.func @train_step(%wte: tensor<4x4xf32> {model.param = "wte", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>},
                      %t: tensor<1x2xi32> {model.input = "tokens"})
    -> (tensor<4x4xf32> {model.grad = "wte"}) {
  %e = model.embedding %wte[%t] vocab_axis = "tp" : (tensor<4x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %o = model.attention %e, %e, %e heads = 2 kv_heads = 2 scale = 0.5 causal : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  %dq, %dk, %dv = model.attention_grad %e, %e, %e, %o, %o heads = 2 kv_heads = 2 scale = 0.5 causal : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>)
  %g = model.embedding_grad %dq[%t] vocab_axis = "tp" : (tensor<1x2x4xf32>, tensor<1x2xi32>) -> tensor<4x4xf32>
  return %g : tensor<4x4xf32>
}

// -----

// Tests a pipeline of two stages (model.pipeline, model.stage), each with
// its own buffers (stage = s) and functions, named by the stage: zero_grads,
// forward (what does not depend on the loss gradient), backward, update,
// and a plan.stage naming them. A value made on one stage and used on the
// other is sent right after its op (SEND, peer +1 or -1 over pp) and
// received at the start of the other stage's function of the same phase.
// The tied table w, updated by stage 0 (its AdamW's), is read on both: stage
// 1 accumulates its own part of w's gradient in a gradient buffer of its
// own, sends it to stage 0 at the start of update, which adds it before
// clipping and sends the updated w back; stage 1 receives it last. The
// clipping norm (stage -1) runs on every stage over its own gradients,
// summed over pp. What a micro-batch's forward keeps for its backward gets
// slots (plan-schedule sizes them).
// CHECK-LABEL: plan.buffer @{{b[0-9]+}} : tensor<4x2xf32> role = "parameter" name = "w" stage = 0
// CHECK: plan.buffer @[[G0:b[0-9]+]] : tensor<4x2xf32> role = "gradient" name = "w" stage = 0
// CHECK: plan.buffer @[[E0:b[0-9]+]] : tensor<1x3x2xf32> role = "activation" stage = 0 slots = 1
// CHECK-LABEL: plan.func @stage0_zero_grads {
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@[[G0]]]
// CHECK-LABEL: plan.func @stage0_forward {
// CHECK-NEXT: plan.kernel "EMBEDDING" {{.*}} -> [@[[E0]]]
// CHECK-NEXT: plan.kernel "GELU" [@[[E0]]] -> [@[[H0:b[0-9]+]]]
// CHECK-NEXT: plan.kernel "SEND" [@[[H0]]] -> [] {peer = 1 : i64} {provenance = "pipeline: activation to stage 1", rank_axis = "pp"}
// CHECK-NEXT: {{^ *}}}
// CHECK-NEXT: plan.func @stage0_backward {
// CHECK-NEXT: plan.kernel "RECV" [] -> [@[[DH0:b[0-9]+]]] {peer = 1 : i64} {provenance = "pipeline: gradient from stage 1", rank_axis = "pp"}
// CHECK-NEXT: plan.kernel "GELU_GRAD" [@[[E0]], @[[DH0]]]
// CHECK-NEXT: plan.kernel "EMBEDDING_GRAD" {{.*}} -> [@[[G0]]]
// CHECK-NEXT: {{^ *}}}
// CHECK-NEXT: plan.func @stage0_update {
// CHECK-NEXT: plan.kernel "RECV" [] -> [@[[PART:b[0-9]+]]] {peer = 1 : i64} {provenance = "pipeline: stage 1's part of the gradient of w", rank_axis = "pp"}
// CHECK-NEXT: plan.kernel "ADD" [@[[G0]], @[[PART]]] -> [@[[G0]]]
// CHECK-NEXT: plan.kernel "GRAD_NORM" [@[[G0]]] -> {{.*}} {group = ["pp"]
// CHECK-NEXT: plan.kernel "ADAMW" [@[[W0:b[0-9]+]], @[[G0]], {{.*}}] -> [@[[W0]],
// CHECK-NEXT: plan.kernel "SEND" [@[[W0]]] -> [] {peer = 1 : i64} {provenance = "pipeline: the updated w to stage 1", rank_axis = "pp"}
// CHECK-NEXT: {{^ *}}}
// CHECK-NEXT: plan.stage 0 {backward = @stage0_backward, first_layer = 0 : i64, forward = @stage0_forward, num_layers = 1 : i64, update = @stage0_update, zero_grads = @stage0_zero_grads}
// CHECK: plan.buffer @[[U1:b[0-9]+]] : tensor<2xf32> role = "parameter" name = "u" stage = 1
// CHECK: plan.buffer @[[W1:b[0-9]+]] : tensor<4x2xf32> role = "parameter" name = "w" stage = 1
// CHECK: plan.buffer @[[GU1:b[0-9]+]] : tensor<2xf32> role = "gradient" name = "u" stage = 1
// CHECK: plan.buffer @[[GW1:b[0-9]+]] : tensor<4x2xf32> role = "gradient" name = "w" stage = 1
// CHECK: plan.buffer @{{b[0-9]+}} : tensor<f32> role = "activation" name = "loss" stage = 1
// CHECK-LABEL: plan.func @stage1_zero_grads {
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@[[GU1]]]
// CHECK-NEXT: plan.kernel "ZERO" [] -> [@[[GW1]]]
// CHECK-LABEL: plan.func @stage1_forward {
// CHECK-NEXT: plan.kernel "RECV" [] -> [@[[X1:b[0-9]+]]] {peer = -1 : i64} {provenance = "pipeline: activation from stage 0", rank_axis = "pp"}
// CHECK-NEXT: plan.kernel "RMS_NORM" [@[[X1]], @[[U1]]]
// CHECK-LABEL: plan.func @stage1_backward {
// CHECK: plan.kernel "LINEAR_GRAD_WEIGHT" {{.*}} -> [@[[GW1]]]
// CHECK: plan.kernel "RMS_NORM_GRAD" {{.*}} -> [@[[DX1:b[0-9]+]], @[[GU1]]]
// CHECK-NEXT: plan.kernel "SEND" [@[[DX1]]] -> [] {peer = -1 : i64} {provenance = "pipeline: gradient to stage 0", rank_axis = "pp"}
// CHECK-LABEL: plan.func @stage1_update {
// CHECK-NEXT: plan.kernel "SEND" [@[[GW1]]] -> [] {peer = -1 : i64} {provenance = "pipeline: this stage's part of the gradient of w to stage 0, which updates it", rank_axis = "pp"}
// CHECK-NEXT: plan.kernel "GRAD_NORM" [@[[GU1]]] -> {{.*}} {group = ["pp"]
// CHECK-NEXT: plan.kernel "ADAMW" [@[[U1]], @[[GU1]],
// CHECK-NEXT: plan.kernel "RECV" [] -> [@[[W1]]] {peer = -1 : i64} {provenance = "pipeline: the updated w from stage 0", rank_axis = "pp"}
// CHECK-NEXT: {{^ *}}}
// CHECK-NEXT: plan.stage 1 {
// Tests split-backward (zero-bubble schedules): each stage's weight
// gradients (linear_grad_weight) move into a backward_weight function the
// plan.stage names.
// SPLIT-LABEL: plan.func @stage1_backward {
// SPLIT-NOT: LINEAR_GRAD_WEIGHT
// SPLIT: plan.kernel "SEND"
// SPLIT-NEXT: {{^ *}}}
// SPLIT-NEXT: plan.func @stage1_backward_weight {
// SPLIT-NEXT: plan.kernel "LINEAR_GRAD_WEIGHT" {{.*}} {provenance = "model.linear_grad_weight in stage1_backward_weight"}
// SPLIT-NEXT: {{^ *}}}
// SPLIT: plan.stage 1 {backward = @stage1_backward, backward_weight = @stage1_backward_weight,
module attributes {model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = 1.0 : f64, num_layers = 1 : i64, rank = 0 : i64}, {chunk = 0 : i64, first_layer = 1 : i64, flops = 1.0 : f64, num_layers = 1 : i64, rank = 1 : i64}]} {
  model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 1, 1]
  func.func @train_step(%w: tensor<4x2xf32> {model.param = "w"},
                        %u: tensor<2xf32> {model.param = "u"},
                        %t: tensor<1x3xi32> {model.input = "tokens"},
                        %y: tensor<1x3xi32> {model.input = "targets"},
                        %dl: tensor<f32> {model.input = "loss_grad"},
                        %mw: tensor<4x2xf32> {model.opt_state = "exp_avg:w"},
                        %mu: tensor<2xf32> {model.opt_state = "exp_avg:u"},
                        %vw: tensor<4x2xf32> {model.opt_state = "exp_avg_sq:w"},
                        %vu: tensor<2xf32> {model.opt_state = "exp_avg_sq:u"},
                        %lr: tensor<f32> {model.input = "lr"},
                        %step: tensor<i64> {model.input = "step"}) -> (tensor<f32>, tensor<f32>) {
    %e = model.embedding %w[%t] {model.stage = 0 : i64} : (tensor<4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
    %h0 = model.layer 0 (%e) {model.stage = 0 : i64} : (tensor<1x3x2xf32>) -> tensor<1x3x2xf32> {
    ^bb0(%x: tensor<1x3x2xf32>):
      %a = model.gelu %x : (tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
      model.yield %a : tensor<1x3x2xf32>
    }
    %h1 = model.layer 1 (%h0, %u) {model.stage = 1 : i64} : (tensor<1x3x2xf32>, tensor<2xf32>) -> tensor<1x3x2xf32> {
    ^bb0(%x: tensor<1x3x2xf32>, %g: tensor<2xf32>):
      %n = model.rms_norm %x, %g eps = 1.0e-05 : (tensor<1x3x2xf32>, tensor<2xf32>) -> tensor<1x3x2xf32>
      model.yield %n : tensor<1x3x2xf32>
    }
    %z = model.linear %h1, %w transpose_w {model.stage = 1 : i64} : (tensor<1x3x2xf32>, tensor<4x2xf32>) -> tensor<1x3x4xf32>
    %l = model.cross_entropy %z, %y ignore_index = -100 {model.stage = 1 : i64} : (tensor<1x3x4xf32>, tensor<1x3xi32>) -> tensor<f32>
    %dz = model.cross_entropy_grad %z, %y, %dl ignore_index = -100 {model.stage = 1 : i64} : (tensor<1x3x4xf32>, tensor<1x3xi32>, tensor<f32>) -> tensor<1x3x4xf32>
    %gh = model.linear_grad_weight %h1, %dz transpose_w {model.stage = 1 : i64} : (tensor<1x3x2xf32>, tensor<1x3x4xf32>) -> tensor<4x2xf32>
    %dh1 = model.linear_grad_input %dz, %w transpose_w {model.stage = 1 : i64} : (tensor<1x3x4xf32>, tensor<4x2xf32>) -> tensor<1x3x2xf32>
    %b1:2 = model.layer 1 backward(%dh1, %h0, %u) {model.stage = 1 : i64} : (tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<2xf32>) -> (tensor<1x3x2xf32>, tensor<2xf32>) {
    ^bb0(%dy: tensor<1x3x2xf32>, %x: tensor<1x3x2xf32>, %g: tensor<2xf32>):
      %dx, %dg = model.rms_norm_grad %x, %g, %dy eps = 1.0e-05 : (tensor<1x3x2xf32>, tensor<2xf32>, tensor<1x3x2xf32>) -> (tensor<1x3x2xf32>, tensor<2xf32>)
      model.yield %dx, %dg : tensor<1x3x2xf32>, tensor<2xf32>
    }
    %b0 = model.layer 0 backward(%b1#0, %e) {model.stage = 0 : i64} : (tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2xf32> {
    ^bb0(%dy: tensor<1x3x2xf32>, %x: tensor<1x3x2xf32>):
      %dx = model.gelu_grad %x, %dy : (tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
      model.yield %dx : tensor<1x3x2xf32>
    }
    %ge = model.embedding_grad %b0[%t] {model.stage = 0 : i64} : (tensor<1x3x2xf32>, tensor<1x3xi32>) -> tensor<4x2xf32>
    %gw = model.add %gh, %ge {model.stage = 0 : i64} : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
    %norm, %scale = model.grad_norm %gw, %b1#1 max_norm = 1.0 {model.stage = -1 : i64} : (tensor<4x2xf32>, tensor<2xf32>) -> (tensor<f32>, tensor<f32>)
    %pw, %mw1, %vw1 = model.adamw %w, %gw, %mw, %vw, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 {model.stage = 0 : i64} : (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
    %pu, %mu1, %vu1 = model.adamw %u, %b1#1, %mu, %vu, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 {model.stage = 1 : i64} : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>)
    return %l, %norm : tensor<f32>, tensor<f32>
  }
}

// -----

// Tests model.scale: it lowers to the kernel SCALE, its factor the float
// parameter `scale`.
// CHECK-LABEL: plan.func @micro_step {
// CHECK-NEXT: plan.kernel "EMBEDDING" [{{.*}}] -> [@[[E:b[0-9]+]]]
// CHECK-NEXT: plan.kernel "SCALE" [@[[E]]] -> [@{{b[0-9]+}}] {scale = 1.250000e-01 : f64} {provenance = "model.scale in train_step"}
// CHECK-NEXT: {{^ *}}}
func.func @train_step(%t: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
  %e = model.embedding %wte[%t] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %s = model.scale %e scale = 0.125 : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %s : tensor<1x2x4xf32>
}

// -----

// Tests a module of two model functions.
// expected-error @below {{plan-lower needs exactly one model function, found 2}}
module {
  func.func @train_step() {
    return
  }
  func.func @forward() {
    return
  }
}

// -----

// Tests an argument of no role.
// expected-error @below {{argument 0 is neither a parameter, an input, optimizer state nor a cache}}
func.func @train_step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// Tests a tensor split over two mesh axes on one dimension, which a plan
// buffer cannot state.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 2]
// expected-error @below {{argument 0 is split over several mesh axes, which the plan file cannot state yet}}
func.func @train_step(%w: tensor<4x4xf32> {model.param = "w", model.sharding = #model.sharding<@mesh, [{"dp", "tp"}, {}]>}) -> tensor<4x4xf32> {
  return %w : tensor<4x4xf32>
}

// -----

// Tests attention with dropout of the probabilities.
func.func @train_step(%t: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
  %e = model.embedding %wte[%t] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'model.attention' op attention dropout has no kernel yet}}
  %o = model.attention %e, %e, %e heads = 1 kv_heads = 1 scale = 0.5 causal {dropout = 1.000000e-01 : f64} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %o : tensor<1x2x4xf32>
}

// -----

// Tests its gradient likewise.
func.func @train_step(%t: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
  %e = model.embedding %wte[%t] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'model.attention_grad' op attention dropout has no kernel yet}}
  %dq, %dk, %dv = model.attention_grad %e, %e, %e, %e, %e heads = 1 kv_heads = 1 scale = 0.5 causal {dropout = 1.000000e-01 : f64} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32>)
  return %dq : tensor<1x2x4xf32>
}

// -----

// Tests a dropout without the rng_id that keys its mask.
func.func @train_step(%t: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
  %e = model.embedding %wte[%t] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'model.dropout' op needs an rng_id to be lowered}}
  %d = model.dropout %e rate = 1.000000e-01 : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %d : tensor<1x2x4xf32>
}

// -----

// Tests an attribute that is not a number or a flag.
func.func @train_step(%t: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
  %e = model.embedding %wte[%t] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'model.gelu' op attribute note has no kernel parameter form}}
  %g = model.gelu %e {note = "fast"} : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %g : tensor<1x2x4xf32>
}

// -----

// Tests an op of another dialect.
func.func @train_step(%t: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<2x4xf32> {
  %e = model.embedding %wte[%t] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'builtin.unrealized_conversion_cast' op cannot be lowered to a plan kernel}}
  %g = builtin.unrealized_conversion_cast %e : tensor<1x2x4xf32> to tensor<2x4xf32>
  return %g : tensor<2x4xf32>
}

// -----

// Tests a gradient that is an argument rather than computed.
// expected-error @below {{the gradient of w is an argument, not computed}}
func.func @train_step(%w: tensor<4xf32> {model.param = "w"}) -> (tensor<4xf32> {model.grad = "w"}) {
  return %w : tensor<4xf32>
}

// -----

// Tests one value returned as the gradient of two parameters.
func.func @train_step(%a: tensor<4x2xf32> {model.param = "a"}, %b: tensor<4x2xf32> {model.param = "b"}, %x: tensor<1x3x2xf32> {model.input = "tokens"}, %dy: tensor<1x3x4xf32> {model.input = "loss_grad"}) -> (tensor<4x2xf32> {model.grad = "a"}, tensor<4x2xf32> {model.grad = "b"}) {
  // expected-error @below {{'model.linear_grad_weight' op result is the gradient of two parameters}}
  %g = model.linear_grad_weight %x, %dy transpose_w : (tensor<1x3x2xf32>, tensor<1x3x4xf32>) -> tensor<4x2xf32>
  return %g, %g : tensor<4x2xf32>, tensor<4x2xf32>
}

// -----

// Tests a value that skips a pipeline stage (made on stage 0, read on 2):
// stages exchange values with their neighbours only.
module attributes {model.pipeline = [{chunk = 0 : i64, first_layer = 0 : i64, flops = 1.0 : f64, num_layers = 1 : i64, rank = 0 : i64}, {chunk = 0 : i64, first_layer = 1 : i64, flops = 1.0 : f64, num_layers = 1 : i64, rank = 1 : i64}, {chunk = 0 : i64, first_layer = 2 : i64, flops = 1.0 : f64, num_layers = 1 : i64, rank = 2 : i64}]} {
  model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [3, 1, 1]
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"}, %t: tensor<1x2xi32> {model.input = "tokens"}) -> tensor<1x2x4xf32> {
    // expected-error @below {{'model.embedding' op makes a value that pipeline stage 2 uses, 2 stages away: values move between neighbouring stages only}}
    %e = model.embedding %wte[%t] {model.stage = 0 : i64} : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %g = model.gelu %e {model.stage = 1 : i64} : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    %s = model.add %e, %g {model.stage = 2 : i64} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    return %s : tensor<1x2x4xf32>
  }
}
