//===- ModelOptimizerOps.td - Optimizer ops of `model` -------*- tablegen -*-===//
//
// What `model-optimizer` appends to a training step: the gradient-clipping
// scale and one AdamW update per parameter (runtime/cpu/Optimizer.h has the
// kernels and the exact formulas).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_MODEL_OPTIMIZER_OPS_TD
#define BRAID_MODEL_OPTIMIZER_OPS_TD

def Model_RankZeroFloat : RankedTensorOf<[F32, F64], [HasAnyRankOfPred<[0]>]>;
def Model_RankZeroInt : RankedTensorOf<[I64], [HasAnyRankOfPred<[0]>]>;

def Model_GradNormOp : Model_ComputeOp<"grad_norm"> {
  let summary = "Global L2 norm of gradients and the clipping scale";
  let description = [{
    `norm = sqrt(sum over every element of every gradient of g²)`, summed in
    double; `scale = max_norm / (norm + 1e-6)` when that is below 1, else 1
    (PyTorch's `clip_grad_norm_`, Megatron's `clip_grad_norm_fp32`);
    `max_norm = 0` disables clipping (scale 1). A non-finite norm gives a
    NaN scale, which the AdamW update refuses.

    Example:

    ```mlir
    %norm, %scale = model.grad_norm %g0, %g1 max_norm = 1.0
        : (tensor<64x64xf32>, tensor<64xf32>) -> (tensor<f32>, tensor<f32>)
    ```

    Over a mesh (`model-shard`'s tensor parallelism) the gradients are this
    rank's shards: `over @mesh axes` names the ranks that hold the shards of
    one model, and `replicated` says, per gradient, whether every rank of
    that group holds the same values. The squares are then summed over the
    group, a replicated gradient's counted once (each rank adds its sum
    divided by the group's size), so every rank gets the norm of the whole
    model. This is a collective over the group.

    ```mlir
    %norm, %scale = model.grad_norm %g0, %g1 max_norm = 1.0
        over @mesh ["tp"] replicated = [false, true]
        : (tensor<32x64xf32>, tensor<64xf32>) -> (tensor<f32>, tensor<f32>)
    ```

    Constraints:
    - GN1: there is at least one gradient, and all have one element type.
    - GN2: `max_norm` is finite and at least 0.
    - GN3: `mesh`, `axes` and `replicated` are present together; then the
      mesh is a `model.mesh` of the module, the axes are distinct axes of
      it, and `replicated` has one entry per gradient.
  }];
  let arguments = (ins Variadic<Model_FloatTensor>:$grads, F64Attr:$max_norm,
                       OptionalAttr<FlatSymbolRefAttr>:$mesh,
                       OptionalAttr<StrArrayAttr>:$axes,
                       OptionalAttr<DenseBoolArrayAttr>:$replicated);
  let results = (outs Model_RankZeroFloat:$norm, Model_RankZeroFloat:$scale);
  let assemblyFormat = [{
    $grads `max_norm` `=` $max_norm (`over` $mesh^ $axes `replicated` `=`
    $replicated)? attr-dict `:` functional-type(operands, results)
  }];
}

def Model_AdamWOp : Model_ComputeOp<"adamw"> {
  let summary = "One AdamW update of a parameter (decoupled weight decay)";
  let description = [{
    With `g = grad · grad_scale` and the 1-based `step` t:
    `p ← p − lr·wd·p`, `m ← β1·m + (1−β1)·g`, `v ← β2·v + (1−β2)·g²`,
    `p ← p − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)`, as
    PyTorch's `AdamW`. Results: the new parameter, first and second moments.

    Example:

    ```mlir
    %p1, %m1, %v1 = model.adamw %p, %g, %m, %v, %lr, %step, %scale
        beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1
        : (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>,
           tensor<64x64xf32>, tensor<f32>, tensor<i64>, tensor<f32>)
        -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>)
    ```

    Constraints:
    - AW1: the parameter, gradient, moments and results have one type.
    - AW2: `lr` and `grad_scale` are rank-0 floats; `step` a rank-0 i64.
    - AW3: `beta1` and `beta2` are in [0, 1), `eps` > 0, `weight_decay` ≥ 0.
  }];
  let arguments = (ins Model_FloatTensor:$param, Model_FloatTensor:$grad,
                       Model_FloatTensor:$m, Model_FloatTensor:$v,
                       Model_RankZeroFloat:$lr, Model_RankZeroInt:$step,
                       Model_RankZeroFloat:$grad_scale, F64Attr:$beta1,
                       F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay);
  let results = (outs Model_FloatTensor:$new_param, Model_FloatTensor:$new_m,
                      Model_FloatTensor:$new_v);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $lr `,` $step `,` $grad_scale
    `beta1` `=` $beta1 `beta2` `=` $beta2 `eps` `=` $eps `weight_decay` `=`
    $weight_decay attr-dict `:` functional-type(operands, results)
  }];
}

#endif // BRAID_MODEL_OPTIMIZER_OPS_TD
