//===- Passes.td - Passes producing and planning `plan` IR ---*- tablegen -*-===//

#ifndef BRAID_PASSES_PLAN_PASSES_TD
#define BRAID_PASSES_PLAN_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanLower : Pass<"plan-lower", "mlir::ModuleOp"> {
  let summary = "Lowers a `model` function to a `plan` program";
  let description = [{
    Replaces the module's single `model` function (`@train_step`, or
    `@forward`) with a `plan.func` of the same name: one `plan.buffer` per
    value, one `plan.kernel` per op (the kernel of the op's name, its
    attributes as kernel parameters), layers inlined in program order.

    - Arguments become `parameter`, `input` or `optimizer_state` buffers
      named as the argument; results are named too (`loss`, `grad_norm`, the
      parameter of a gradient), gradients becoming `gradient` buffers.
    - Kernels that accumulate into their output (the weight-gradient
      kernels) get a `ZERO` of that output first.
    - `model.adamw` updates in place: its results are its operands' buffers.
  }];
  let dependentDialects = ["::braid::plan_ir::PlanDialect"];
}

def PlanMemory : Pass<"plan-memory", "mlir::ModuleOp"> {
  let summary = "Places every buffer at a static offset of one arena";
  let description = [{
    Parameters, gradients, optimizer state, inputs and named results live for
    the whole program; every other buffer lives from the kernel that writes
    it first to the last kernel that touches it, and reuses the space of
    buffers that are dead by then (first fit, 64-byte alignment). A kernel's
    outputs never share memory with the buffers it reads. Sets
    `plan.arena_bytes` on the module.
  }];
}

#endif // BRAID_PASSES_PLAN_PASSES_TD
