//===- Passes.td - Passes on the `model` dialect -------------*- tablegen -*-===//

#ifndef BRAID_PASSES_MODEL_PASSES_TD
#define BRAID_PASSES_MODEL_PASSES_TD

include "mlir/Pass/PassBase.td"

def ModelVerifyForward : Pass<"model-verify-forward", "mlir::ModuleOp"> {
  let summary = "Checks the contract of the forward phase (frontend output)";
  let description = [{
    The boundary check after the frontend: the module holds the forward graph
    of one training step in the form every later pass relies on.

    Contract:
    - F1: the module holds exactly one function, `@forward`, besides meshes.
    - F2: every argument is either a parameter (`model.param`, names unique)
      or a data input (`model.input`); there is exactly one `tokens` and one
      `targets` input, integer tensors of one shape `[batch, seq]`.
    - F3: the function returns one value, the rank-0 float loss.
    - F4: `model.layer` ops appear in program order with indices 0, 1, ...,
      and each layer's first operand is the previous layer's result.
    - F5: the body holds only `model` ops and the final `func.return`.
    - F6: every parameter is used.
  }];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

#endif // BRAID_PASSES_MODEL_PASSES_TD
