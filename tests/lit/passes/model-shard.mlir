// RUN: split-file %s %t
// RUN: braid-opt %t/step.mlir -model-shard=tp=2 | FileCheck %s --check-prefix=TP
// RUN: braid-opt %t/step.mlir -model-shard="tp=2 sp=true" | FileCheck %s --check-prefix=SP
// RUN: braid-opt %t/step.mlir -model-shard="pp=2 dp=2" | FileCheck %s --check-prefix=MESH
// RUN: braid-opt %t/optimizer-only.mlir -model-shard=tp=2 | FileCheck %s --check-prefix=WHOLE
// RUN: braid-opt %t/zero-degree.mlir -model-shard=dp=0 -verify-diagnostics
// RUN: braid-opt %t/no-step.mlir -model-shard=tp=2 -verify-diagnostics
// RUN: braid-opt %t/has-mesh.mlir -model-shard=tp=2 -verify-diagnostics
// RUN: braid-opt %t/pp-zero.mlir -model-shard=pp=0 -verify-diagnostics
// RUN: braid-opt %t/sp-without-tp.mlir -model-shard=sp=true -verify-diagnostics
// RUN: braid-opt %t/scale.mlir -model-shard=tp=2 | FileCheck %s --check-prefix=SCALE
// RUN: braid-opt %t/scale.mlir -model-shard="tp=2 sp=true" | FileCheck %s --check-prefix=SCALE-SP
// RUN: braid-opt %t/tp-refusals.mlir -split-input-file -model-shard=tp=2 -verify-diagnostics --allow-unregistered-dialect

// The data-parallel sums of the gradients (buckets, bucket-bytes, the
// optimizer's model.grad_norm they go before) are tested by
// model-shard-buckets.mlir and, through braidc, by
// ../pipeline/model-shard-dp.mlir; here only what the mesh and tensor
// parallelism decide.

// step.mlir: a training step (after model-optimizer) of one block, a tied
// 8 x 4 embedding, a norm, an MLP fc1 (8 x 4, transpose_w) -> gelu -> fc2
// (4 x 8, transpose_w, with a bias), the residual add, the tied output
// layer and the loss.

// Tests Megatron's split at tp = 2, decided on the graph. The table is
// split by vocabulary rows (4 of 8 a rank), fc1 (its input whole) is
// column-parallel, split on its output dimension, fc2 (its input split)
// row-parallel, split on its input dimension, its bias added at 1/tp; the
// norm weight and the bias stay whole. The moments follow their parameter.
// tokens and targets are marked split along dp on the batch.
// TP: model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 2]
// TP-LABEL: func.func @train_step(
// TP-SAME: tensor<4x4xf32> {model.param = "wte", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// TP-SAME: tensor<4xf32> {model.param = "norm"}
// TP-SAME: tensor<4x4xf32> {model.param = "fc1", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>}
// TP-SAME: tensor<4x4xf32> {model.param = "fc2", model.sharding = #model.sharding<@mesh, [{}, {"tp"}]>}
// TP-SAME: tensor<4xf32> {model.param = "fc2.bias"}
// TP-SAME: tensor<1x2xi32> {model.input = "tokens", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>}
// TP-SAME: tensor<1x2xi32> {model.input = "targets", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>}
// TP-SAME: tensor<4x4xf32> {model.opt_state = "exp_avg:fc2", model.sharding = #model.sharding<@mesh, [{}, {"tp"}]>}
// TP-SAME: tensor<4xf32> {model.opt_state = "exp_avg:fc2.bias"}
// The forward's partial sums (the vocab-parallel lookup, the row-parallel
// output) are all-reduced at once, each with a reason naming op and rule.
// TP: %[[E:.+]] = model.embedding %{{.+}} vocab_axis = "tp" : (tensor<4x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
// TP-NEXT: %[[X:.+]] = model.all_reduce %[[E]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the vocab-parallel model.embedding lookups
// TP-NEXT: model.layer 0(%[[X]],
// TP: model.rms_norm {{.*}} -> tensor<1x2x4xf32>
// TP-NEXT: model.linear {{.*}} transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
// TP-NEXT: model.gelu {{.*}} -> tensor<1x2x4xf32>
// TP-NEXT: %[[Z:.+]] = model.linear {{.*}} transpose_w bias_scale = 5.000000e-01 : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
// TP-NEXT: %[[ZR:.+]] = model.all_reduce %[[Z]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the row-parallel model.linear outputs (fc2 split on its input dimension)"
// TP-NEXT: model.add %{{.+}}, %[[ZR]]
// The tied output layer is column-parallel (wte is split on its output
// dimension): the loss becomes the vocab-parallel max / partial / finish,
// its gradient reads the global log-sum-exp.
// TP: %[[LOGITS:.+]] = model.linear {{.*}} -> tensor<1x2x4xf32>
// TP-NEXT: %[[M:.+]] = model.cross_entropy_max %[[LOGITS]] : (tensor<1x2x4xf32>) -> tensor<1x2xf32>
// TP-NEXT: %[[GM:.+]] = model.all_reduce max %[[M]] over @mesh ["tp"]
// TP-NEXT: %[[P:.+]] = model.cross_entropy_partial %[[LOGITS]], %{{.+}}, %[[GM]] ignore_index = -100 vocab_axis = "tp"
// TP-NEXT: %[[S:.+]] = model.all_reduce %[[P]] over @mesh ["tp"]
// TP-NEXT: %{{.+}}, %[[LSE:.+]] = model.cross_entropy_finish %[[S]], %[[GM]],
// TP-NEXT: model.cross_entropy_grad %[[LOGITS]], {{.*}} lse %[[LSE]] ignore_index = -100 vocab_axis = "tp"
// The backward's partial sums (input gradients of column-parallel linears)
// are all-reduced where a consumer needs the whole value: fc2's backward,
// the norm's gradient.
// TP: model.layer 0 backward(
// TP-NEXT: ^bb0(%[[DR:[^:]+]]:
// TP-NEXT: %[[DRW:.+]] = model.all_reduce %[[DR]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the partial model.linear_grad_input input gradients of the column-parallel wte, for model.linear_grad_input"
// TP-NEXT: model.linear_grad_input %[[DRW]],
// TP: %[[DN:.+]] = model.linear_grad_input {{.*}} -> tensor<1x2x4xf32>
// TP-NEXT: model.linear_grad_weight
// TP-NEXT: %[[DNW:.+]] = model.all_reduce %[[DN]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the partial model.linear_grad_input input gradients of the column-parallel fc1, for model.rms_norm_grad"
// TP-NEXT: model.rms_norm_grad %{{.+}}, %{{.+}}, %[[DNW]]
// TP: model.embedding_grad {{.*}} vocab_axis = "tp" : {{.*}} -> tensor<4x4xf32>
// The clipping norm sums over tp, counting the whole gradients once.
// TP: model.grad_norm {{.*}} over @mesh ["tp"] replicated = [false, true, false, false, true] :

// Tests sequence parallelism: between the blocks the stream is a sequence
// slice (1 of 2 positions a rank); the forward's partial sums are
// reduce-scattered into slices, the norm works on its slice, and the
// column-parallel fc1 gathers the whole sequence first.
// SP: model.embedding {{.*}} vocab_axis = "tp"
// SP-NEXT: model.reduce_scatter %{{.+}} over @mesh ["tp"] dim = 1 reason = "model-shard: sequence-parallel sum of the vocab-parallel model.embedding lookups {{.*}}, each rank keeping its sequence slice" : (tensor<1x2x4xf32>) -> tensor<1x1x4xf32>
// SP-NEXT: model.layer 0(
// SP-NEXT: ^bb0(%[[X:[^:]+]]: tensor<1x1x4xf32>,
// SP-NEXT: %[[N:.+]] = model.rms_norm %[[X]], {{.*}} -> tensor<1x1x4xf32>
// SP-NEXT: %[[NW:.+]] = model.all_gather %[[N]] over @mesh ["tp"] dim = 1 reason = "model-shard: sequence-parallel gather of the sequence slices, for model.linear" : (tensor<1x1x4xf32>) -> tensor<1x2x4xf32>
// SP-NEXT: model.linear %[[NW]],
// SP-NEXT: model.gelu
// SP-NEXT: %[[Z:.+]] = model.linear
// SP-NEXT: %[[ZS:.+]] = model.reduce_scatter %[[Z]] over @mesh ["tp"] dim = 1 {{.*}} -> tensor<1x1x4xf32>
// SP-NEXT: model.add %[[X]], %[[ZS]] : (tensor<1x1x4xf32>, tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
// In backward, the reverse: fc1's partial input gradient is
// reduce-scattered into the norm gradient's slice.
// SP: model.layer 0 backward(
// SP: %[[DN:.+]] = model.reduce_scatter %{{.+}} over @mesh ["tp"] dim = 1 reason = "model-shard: sequence-parallel sum of the partial model.linear_grad_input input gradients of the column-parallel fc1, each rank keeping its sequence slice, for model.rms_norm_grad"
// SP-NEXT: model.rms_norm_grad %{{.+}}, %{{.+}}, %[[DN]] {{.*}} -> (tensor<1x1x4xf32>, tensor<4xf32>)

// Tests the mesh with pipeline stages: pp is the major axis; without tp
// nothing is split over tp.
// MESH: model.mesh @mesh axes = ["pp", "dp", "tp"] sizes = [2, 2, 1]
// MESH-SAME: {{$}}
// MESH: tensor<8x4xf32> {model.param = "wte"}
// MESH-SAME: tensor<1x2xi32> {model.input = "tokens", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>}
// MESH-NOT: "tp"]

//--- step.mlir
module {
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"},
                        %g: tensor<4xf32> {model.param = "norm"},
                        %w1: tensor<8x4xf32> {model.param = "fc1"},
                        %w2: tensor<4x8xf32> {model.param = "fc2"},
                        %b2: tensor<4xf32> {model.param = "fc2.bias"},
                        %tokens: tensor<1x2xi32> {model.input = "tokens"},
                        %targets: tensor<1x2xi32> {model.input = "targets"},
                        %dl: tensor<f32> {model.input = "loss_grad"},
                        %m0: tensor<8x4xf32> {model.opt_state = "exp_avg:wte"},
                        %m1: tensor<4xf32> {model.opt_state = "exp_avg:norm"},
                        %m2: tensor<8x4xf32> {model.opt_state = "exp_avg:fc1"},
                        %m3: tensor<4x8xf32> {model.opt_state = "exp_avg:fc2"},
                        %m4: tensor<4xf32> {model.opt_state = "exp_avg:fc2.bias"},
                        %v0: tensor<8x4xf32> {model.opt_state = "exp_avg_sq:wte"},
                        %v1: tensor<4xf32> {model.opt_state = "exp_avg_sq:norm"},
                        %v2: tensor<8x4xf32> {model.opt_state = "exp_avg_sq:fc1"},
                        %v3: tensor<4x8xf32> {model.opt_state = "exp_avg_sq:fc2"},
                        %v4: tensor<4xf32> {model.opt_state = "exp_avg_sq:fc2.bias"},
                        %lr: tensor<f32> {model.input = "lr"},
                        %step: tensor<i64> {model.input = "step"})
      -> (tensor<f32>, tensor<f32>, tensor<8x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4xf32>) {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h:4 = model.layer 0 (%e, %g, %w1, %w2, %b2) : (tensor<1x2x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x4xf32>) {
    ^bb0(%x: tensor<1x2x4xf32>, %gn: tensor<4xf32>, %a1: tensor<8x4xf32>, %a2: tensor<4x8xf32>, %bb: tensor<4xf32>):
      %n = model.rms_norm %x, %gn eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
      %y = model.linear %n, %a1 transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
      %a = model.gelu %y : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
      %z = model.linear %a, %a2, %bb transpose_w : (tensor<1x2x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %z : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r, %a, %y, %n : tensor<1x2x4xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x4xf32>
    }
    %logits = model.linear %h#0, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    %dlogits = model.cross_entropy_grad %logits, %targets, %dl ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>, tensor<f32>) -> tensor<1x2x8xf32>
    %dh = model.linear_grad_input %dlogits, %wte transpose_w : (tensor<1x2x8xf32>, tensor<8x4xf32>) -> tensor<1x2x4xf32>
    %ghead = model.linear_grad_weight %h#0, %dlogits transpose_w : (tensor<1x2x4xf32>, tensor<1x2x8xf32>) -> tensor<8x4xf32>
    %b:5 = model.layer 0 backward(%dh, %e, %g, %w1, %w2, %b2, %h#1, %h#2, %h#3) : (tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4xf32>) {
    ^bb0(%dr: tensor<1x2x4xf32>, %x: tensor<1x2x4xf32>, %gn: tensor<4xf32>, %a1: tensor<8x4xf32>, %a2: tensor<4x8xf32>, %bb: tensor<4xf32>, %a: tensor<1x2x8xf32>, %y: tensor<1x2x8xf32>, %n: tensor<1x2x4xf32>):
      %da = model.linear_grad_input %dr, %a2 transpose_w : (tensor<1x2x4xf32>, tensor<4x8xf32>) -> tensor<1x2x8xf32>
      %g2 = model.linear_grad_weight %a, %dr transpose_w : (tensor<1x2x8xf32>, tensor<1x2x4xf32>) -> tensor<4x8xf32>
      %gb = model.bias_grad %dr : (tensor<1x2x4xf32>) -> tensor<4xf32>
      %dy = model.gelu_grad %y, %da : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
      %dn = model.linear_grad_input %dy, %a1 transpose_w : (tensor<1x2x8xf32>, tensor<8x4xf32>) -> tensor<1x2x4xf32>
      %g1 = model.linear_grad_weight %n, %dy transpose_w : (tensor<1x2x4xf32>, tensor<1x2x8xf32>) -> tensor<8x4xf32>
      %dx, %gg = model.rms_norm_grad %x, %gn, %dn eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>, tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<4xf32>)
      %dsum = model.add %dr, %dx : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %dsum, %gg, %g1, %g2, %gb : tensor<1x2x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4xf32>
    }
    %glookup = model.embedding_grad %b#0[%tokens] : (tensor<1x2x4xf32>, tensor<1x2xi32>) -> tensor<8x4xf32>
    %gwte = model.add %ghead, %glookup : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %norm, %scale = model.grad_norm %gwte, %b#1, %b#2, %b#3, %b#4 max_norm = 1.0 : (tensor<8x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
    %p0, %n0, %s0 = model.adamw %wte, %gwte, %m0, %v0, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.01 : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>)
    %p1, %n1, %s1 = model.adamw %g, %b#1, %m1, %v1, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    %p2, %n2, %s2 = model.adamw %w1, %b#2, %m2, %v2, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.01 : (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>)
    %p3, %n3, %s3 = model.adamw %w2, %b#3, %m3, %v3, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.01 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
    %p4, %n4, %s4 = model.adamw %b2, %b#4, %m4, %v4, %lr, %step, %scale beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.0 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    return %loss, %norm, %p0, %p1, %p2, %p3, %p4 : tensor<f32>, tensor<f32>, tensor<8x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4xf32>
  }
}

//--- optimizer-only.mlir
// Tests that with tp = 2 parameters read only by the optimizer stay whole:
// no collective, and the norm sums whole gradients as on one rank.
// WHOLE: model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 2]
// WHOLE-NOT: model.all_reduce
// WHOLE: model.grad_norm %{{.+}}, %{{.+}} max_norm = 1.000000e+00 :
module {
  func.func @train_step(%w: tensor<4x4xf32> {model.param = "w"},
                        %v: tensor<16xf32> {model.param = "v"},
                        %tokens: tensor<1x4xi32> {model.input = "tokens"},
                        %gw: tensor<4x4xf32> {model.input = "loss_grad"},
                        %gv: tensor<16xf32> {model.input = "lr"},
                        %mw: tensor<4x4xf32> {model.opt_state = "exp_avg:w"},
                        %vw: tensor<4x4xf32> {model.opt_state = "exp_avg_sq:w"},
                        %mv: tensor<16xf32> {model.opt_state = "exp_avg:v"},
                        %vv: tensor<16xf32> {model.opt_state = "exp_avg_sq:v"},
                        %lr: tensor<f32> {model.input = "lr"},
                        %step: tensor<i64> {model.input = "step"}) -> (tensor<f32>, tensor<4x4xf32>, tensor<16xf32>) {
    %n, %s = model.grad_norm %gw, %gv max_norm = 1.0 : (tensor<4x4xf32>, tensor<16xf32>) -> (tensor<f32>, tensor<f32>)
    %p1, %m1, %v1 = model.adamw %w, %gw, %mw, %vw, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
    %p2, %m2, %v2 = model.adamw %v, %gv, %mv, %vv, %lr, %step, %s beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.0 : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
    return %n, %p1, %p2 : tensor<f32>, tensor<4x4xf32>, tensor<16xf32>
  }
}

//--- zero-degree.mlir
// Tests dp = 0.
// expected-error @below {{model-shard: dp = 0 and tp = 1 must be at least 1}}
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}) {
    return
  }
}

//--- no-step.mlir
// Tests a module without @train_step.
// expected-error @below {{model-shard needs a func.func @train_step (run model-optimizer first)}}
module {
  func.func @forward() {
    return
  }
}

//--- has-mesh.mlir
// Tests a module that has its mesh already (model-shard ran).
// expected-error @below {{model-shard: the module already has a symbol @mesh}}
module {
  model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 2]
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}) {
    return
  }
}

//--- pp-zero.mlir
// Tests pp = 0.
// expected-error @below {{model-shard: pp = 0 must be at least 1}}
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}) {
    return
  }
}

//--- sp-without-tp.mlir
// Tests sequence parallelism without tensor parallelism.
// expected-error @below {{model-shard: sequence parallelism splits the sequence over tp, which needs tp > 1 (tp = 1)}}
module {
  func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}) {
    return
  }
}

//--- scale.mlir
// Tests that model.scale keeps its operand's layout: whole (the reduced
// lookup), split (a column-parallel output, 4 of 8 columns a rank) and
// partial (a column-parallel linear's input gradient), which is scaled
// before its all-reduce, not after.
// SCALE-LABEL: func.func @train_step(
// SCALE: %[[E:.+]] = model.all_reduce
// SCALE-NEXT: %[[X:.+]] = model.scale %[[E]] scale = 5.000000e-01 : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
// SCALE-NEXT: %[[Y:.+]] = model.linear %[[X]],
// SCALE-NEXT: %[[SY:.+]] = model.scale %[[Y]] scale = 2.000000e+00 : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
// SCALE-NEXT: %[[DX:.+]] = model.linear_grad_input %[[SY]],
// SCALE-NEXT: %[[SDX:.+]] = model.scale %[[DX]] scale = 4.000000e+00 : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
// SCALE-NEXT: %[[R:.+]] = model.all_reduce %[[SDX]] over @mesh ["tp"] reason = "model-shard: tensor-parallel sum of the partial model.linear_grad_input input gradients of the column-parallel w, for model.gelu"
// SCALE-NEXT: model.gelu %[[R]]
// With sequence parallelism the whole stream is a sequence slice, scaled
// as such (1 of 2 positions a rank).
// SCALE-SP: %[[E:.+]] = model.reduce_scatter
// SCALE-SP-NEXT: %[[X:.+]] = model.scale %[[E]] scale = 5.000000e-01 : (tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
// SCALE-SP-NEXT: model.all_gather %[[X]]
module {
  func.func @train_step(%wte: tensor<8x4xf32> {model.param = "wte"},
                        %w: tensor<8x4xf32> {model.param = "w"},
                        %tokens: tensor<1x2xi32> {model.input = "tokens"})
      -> (tensor<1x2x8xf32>, tensor<1x2x4xf32>) {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %x = model.scale %e scale = 0.5 : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    %y = model.linear %x, %w transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %sy = model.scale %y scale = 2.0 : (tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
    %dx = model.linear_grad_input %sy, %w transpose_w : (tensor<1x2x8xf32>, tensor<8x4xf32>) -> tensor<1x2x4xf32>
    %sdx = model.scale %dx scale = 4.0 : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    %g = model.gelu %sdx : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    return %sy, %g : tensor<1x2x8xf32>, tensor<1x2x4xf32>
  }
}

//--- tp-refusals.mlir
// Tests a column-parallel weight whose output dimension (3) does not
// divide by tp.
func.func @train_step(%w: tensor<3x4xf32> {model.param = "w"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x3xf32> {
  %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'model.linear' op cannot split parameter w 'tensor<3x4xf32>' over tp = 2: dimension 0 is 3, not a multiple of 2}}
  %y = model.linear %x, %w transpose_w : (tensor<1x2x4xf32>, tensor<3x4xf32>) -> tensor<1x2x3xf32>
  return %y : tensor<1x2x3xf32>
}

// -----

// Tests an attention whose 3 query heads do not divide by tp (its kv heads
// neither: keys and values stay whole).
func.func @train_step(%wq: tensor<6x4xf32> {model.param = "q"}, %wk: tensor<6x4xf32> {model.param = "k"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x6xf32> {
  %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %q = model.linear %x, %wq transpose_w : (tensor<1x2x4xf32>, tensor<6x4xf32>) -> tensor<1x2x6xf32>
  %k = model.linear %x, %wk transpose_w : (tensor<1x2x4xf32>, tensor<6x4xf32>) -> tensor<1x2x6xf32>
  // expected-error @below {{'model.attention' op cannot be split over tp = 2: 3 heads}}
  %o = model.attention %q, %k, %k heads = 3 kv_heads = 3 scale = 0.5 causal : (tensor<1x2x6xf32>, tensor<1x2x6xf32>, tensor<1x2x6xf32>) -> tensor<1x2x6xf32>
  return %o : tensor<1x2x6xf32>
}

// -----

// Tests a parameter read whole by one op (a norm) and split by another:
// as the bias of a column-parallel linear it would be split like the
// linear's outputs.
func.func @train_step(%w: tensor<8x8xf32> {model.param = "w"}, %b: tensor<8xf32> {model.param = "b"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x8xf32> {model.param = "wte"}) -> tensor<1x2x8xf32> {
  %t = model.embedding %wte[%tokens] : (tensor<8x8xf32>, tensor<1x2xi32>) -> tensor<1x2x8xf32>
  %n = model.rms_norm %t, %b eps = 1.0e-05 : (tensor<1x2x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  // expected-error @below {{'model.linear' op cannot be split over tp = 2: parameter b is used with two different splits}}
  %y = model.linear %n, %w, %b transpose_w : (tensor<1x2x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  return %y : tensor<1x2x8xf32>
}

// -----

// Tests a sum of a column-parallel output (split on its last dimension)
// and a whole value.
func.func @train_step(%w: tensor<8x4xf32> {model.param = "w"}, %tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}, %table: tensor<8x8xf32> {model.param = "table"}) -> tensor<1x2x8xf32> {
  %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %y = model.linear %x, %w transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %whole = model.embedding %table[%tokens] : (tensor<8x8xf32>, tensor<1x2xi32>) -> tensor<1x2x8xf32>
  // expected-error @below {{'model.add' op cannot be split over tp = 2: its operands are split differently}}
  %s = model.add %y, %whole : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
  return %s : tensor<1x2x8xf32>
}

// -----

// Tests an op without a tensor-parallel rule (of another dialect).
func.func @train_step(%tokens: tensor<1x2xi32> {model.input = "tokens"}, %wte: tensor<8x4xf32> {model.param = "wte"}) -> tensor<1x2x4xf32> {
  %x = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  // expected-error @below {{'test.op' op cannot be split over tp = 2: model-shard has no tensor-parallel rule for it}}
  %y = "test.op"(%x) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}
