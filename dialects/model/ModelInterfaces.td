//===- ModelInterfaces.td - Interfaces of `model` ops --------*- tablegen -*-===//

#ifndef BRAID_MODEL_INTERFACES_TD
#define BRAID_MODEL_INTERFACES_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/Interfaces.td"

def Model_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::braid::model";
  let description = [{
    The cost of one `model` op (a forward op or a gradient op alike), read
    by the planner and the compile report. Costs count what the op does on
    its operand shapes as written (on a sharded value: per shard).

    FLOPs are split in two: `matmul` FLOPs (2 per multiply-add of a matrix
    product, what tensor cores do, the numerator of MFU) and `vector` FLOPs
    (everything elementwise or reduced: norms, activations, bias adds).
    Their sum is the FLOPs of the kernel the op lowers to, as its row of
    runtime/plan/Kernels.def counts them (docs/report.md, "One FLOP
    convention"; tests/unit/FlopAgreementTest.cpp holds them equal). Bytes
    are the bytes the op must read and write at least once.
  }];
  let methods = [
    InterfaceMethod<"FLOPs of the op's matrix products",
      "int64_t", "getMatmulFlops", (ins), "", [{ return 0; }]>,
    InterfaceMethod<"The op's elementwise and reduction FLOPs",
      "int64_t", "getVectorFlops", (ins)>,
    InterfaceMethod<"Bytes the op reads and writes at least once",
      "int64_t", "getBytesAccessed", (ins), "",
      [{ return ::braid::model::detail::defaultBytesAccessed($_op); }]>
  ];
}

def Model_PlanKernelOpInterface : OpInterface<"PlanKernelOpInterface"> {
  let cppNamespace = "::braid::model";
  let description = [{
    The `plan` kernel an op lowers to (a row of runtime/plan/Kernels.def,
    which also says the outputs the kernel adds into): plan-lower emits one
    call of it for the op. Ops declare it with `Model_ComputeOp`'s `kernel`
    parameter (by default the op's mnemonic in capitals), which the C++
    compiler checks against Kernels.def's rows.
  }];
  let methods = [
    StaticInterfaceMethod<"The kernel this op lowers to",
      "::braid::plan::KernelId", "getPlanKernel", (ins), "",
      [{ return ConcreteOp::kPlanKernel; }]>,
  ];
  let extraSharedClassDeclaration = [{
    /// The kernel's name, as plan.kernel and the plan file spell it.
    ::llvm::StringRef getPlanKernelName() {
      return ::braid::plan::KernelIdName($_op.getPlanKernel());
    }
  }];
}

/// The kernel an op lowers to: `kernel` names a row of Kernels.def.
class Model_PlanKernel<string kernel>
    : NativeOpTrait<"PlanKernelTrait", [],
        "static constexpr ::braid::plan::KernelId kPlanKernel = "
        "::braid::plan::KernelId::" # kernel # ";"> {
  let cppNamespace = "::braid::model";
}

def Model_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::braid::model";
  let description = [{
    The vector-Jacobian product of a forward op, used by `model-autodiff`:
    given the gradients of the op's results, build (at the builder's
    insertion point) the ops that compute the gradients of its operands.
    The backward ops are those of docs/Rationale-Training.md, one per
    backward kernel of the runtime.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds the operand gradients from `resultGrads` (one per result, none
        null). `operandGrads` receives one value per operand; it is null for
        operands that have no gradient (token ids, targets). Fails, with a
        diagnostic on the op, when the op cannot be differentiated.
      }],
      "::mlir::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // BRAID_MODEL_INTERFACES_TD
