//===- TensorParallelRules.td - Per-op tensor-parallel rules -*- tablegen -*-===//
//
// The interface through which model-shard's engine (TensorParallel.h) asks
// an op how it splits over tp. The `model` dialect does not declare it: the
// rules are model-shard's, attached to the ops as external models by
// registerTensorParallelRules (TensorParallelRules.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_MODEL_TENSORPARALLELRULES_TD
#define BRAID_PASSES_MODEL_TENSORPARALLELRULES_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/Interfaces.td"

def TensorParallelOpInterface : OpInterface<"TensorParallelOpInterface"> {
  let cppNamespace = "::braid::model";
  let description = [{
    How an op runs on one rank of the tensor-parallel axis `tp`, Megatron's
    way (docs/Rationale-Parallelism.md), as MLIR's ShardingInterface and
    Shardy's per-op rules say it for their ops: given the layouts of its
    operands (whole, split along a dimension, or partial sums), the op's
    rule gives its results their layouts and local types, sets the op's
    attributes for its slice (`head_axis`, `vocab_axis`, `seq_axis`, the
    local head counts), makes operands whole or sequence slices where it
    needs them, and may replace the op (the vocab-parallel loss).
  }];
  let methods = [
    InterfaceMethod<[{
        Splits the op over tp. The engine calls it once per op, in program
        order, after the layouts of the operands are set; a refusal is an
        error on the op naming why (`engine.unsupported`).
      }],
      "::mlir::LogicalResult", "shardOverTp",
      (ins "::braid::model::TensorParallel &":$engine)>,
    InterfaceMethod<[{
        Whether the rule decides the layout of the parameters among its
        operands (a linear's weight and bias, an embedding's table). If
        not, the engine makes every parameter operand not decided yet whole
        before calling shardOverTp.
      }],
      "bool", "decidesParameters", (ins), "", [{ return false; }]>
  ];
}

#endif // BRAID_PASSES_MODEL_TENSORPARALLELRULES_TD
