//===- ModelCollectiveOps.td - Collectives of `model` --------*- tablegen -*-===//
//
// The communication that `model-shard` inserts: collectives over the ranks
// of named mesh axes. Each carries the reason it is there, so that a user can
// answer "why is this all-reduce here?" from the IR and the plan.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_MODEL_COLLECTIVE_OPS_TD
#define BRAID_MODEL_COLLECTIVE_OPS_TD

def Model_AllReduceOp : Model_ComputeOp<"all_reduce"> {
  let summary = "Sums tensors over the ranks of mesh axes";
  let description = [{
    Each result is the elementwise sum, over the ranks of the group, of the
    operand in the same position: the group is the ranks whose coordinates
    differ only along `axes` of `mesh`. Several operands make one bucket,
    reduced by one collective call where the runtime can.

    With `max`, each result is the elementwise maximum instead of the sum
    (the row maxima of a vocab-parallel cross-entropy).

    `reason` says why the collective is there (the pass, the value and the
    rule that made it), for people reading the IR, the plan and the trace.

    Example:

    ```mlir
    %g0r, %g1r = model.all_reduce %g0, %g1 over @mesh ["dp"]
        reason = "data-parallel gradients"
        : (tensor<64x64xf32>, tensor<64xf32>) -> (tensor<64x64xf32>, tensor<64xf32>)
    ```

    Constraints:
    - CL1: there is at least one operand, and as many results as operands,
      each of its operand's type.
    - CL2: `mesh` names a `model.mesh` of the module; `axes` is a non-empty
      list of distinct axes of that mesh.
    - CL3: `reason` is not empty.
  }];
  let arguments = (ins Variadic<Model_FloatTensor>:$inputs,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       StrAttr:$reason, UnitAttr:$max);
  let results = (outs Variadic<Model_FloatTensor>:$results);
  let assemblyFormat = [{
    (`max` $max^)? $inputs `over` $mesh $axes `reason` `=` $reason attr-dict
    `:` functional-type(operands, results)
  }];
}

def Model_AllGatherOp : Model_ComputeOp<"all_gather"> {
  let summary = "Concatenates the ranks' slices of a tensor along a dimension";
  let description = [{
    The result is the operand of every rank of the group (the ranks whose
    coordinates differ only along `axes` of `mesh`), concatenated along
    dimension `dim` in the ranks' order (row-major over the axes). With
    sequence parallelism it turns the sequence slices that norms and
    residuals work on back into whole sequences before a column-parallel
    linear (and, in backward, before a row-parallel one's input gradient).
    Under tensor parallelism an inference graph gathers each rank's best
    tokens, their logits and their ids (i32), for the draw.

    Example:

    ```mlir
    %x = model.all_gather %xs over @mesh ["tp"] dim = 1
        reason = "sequence-parallel input of q_proj"
        : (tensor<2x8x64xf32>) -> tensor<2x16x64xf32>
    ```

    Constraints:
    - CG1: one operand and one result, of one element type and rank, and
      `dim` is a dimension of them.
    - CG2: CL2 of `model.all_reduce` holds for `mesh` and `axes`.
    - CG3: the result's dimension `dim` is the operand's times the number
      of ranks in the group; the others are the operand's.
    - CG4: `reason` is not empty.
  }];
  let arguments = (ins AnyTypeOf<[Model_FloatTensor, Model_IndexTensor]>:$input,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$dim, StrAttr:$reason);
  let results = (outs AnyTypeOf<[Model_FloatTensor, Model_IndexTensor]>:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `dim` `=` $dim `reason` `=` $reason attr-dict
    `:` functional-type(operands, results)
  }];
}

def Model_ReduceScatterOp : Model_ComputeOp<"reduce_scatter"> {
  let summary = "Sums a tensor over the ranks and keeps this rank's slice";
  let description = [{
    The elementwise sum over the group (as `model.all_reduce`) of which each
    rank keeps its slice along dimension `dim`: rank `c` of the group the
    `c`-th of equal parts. With sequence parallelism it replaces the
    all-reduce after a row-parallel linear: the same sum, each rank keeping
    its part of the sequence.

    Example:

    ```mlir
    %ys = model.reduce_scatter %y over @mesh ["tp"] dim = 1
        reason = "row-parallel o_proj outputs"
        : (tensor<2x16x64xf32>) -> tensor<2x8x64xf32>
    ```

    Constraints:
    - RS1: CG1 of `model.all_gather`.
    - RS2: CL2 of `model.all_reduce` holds for `mesh` and `axes`.
    - RS3: the operand's dimension `dim` is the result's times the number
      of ranks in the group; the others are the result's.
    - RS4: `reason` is not empty.
  }];
  let arguments = (ins Model_FloatTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim, StrAttr:$reason);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $input `over` $mesh $axes `dim` `=` $dim `reason` `=` $reason attr-dict
    `:` functional-type(operands, results)
  }];
}

#endif // BRAID_MODEL_COLLECTIVE_OPS_TD
