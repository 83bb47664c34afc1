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

#endif // BRAID_MODEL_COLLECTIVE_OPS_TD
