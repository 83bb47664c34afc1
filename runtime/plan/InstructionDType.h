//===- InstructionDType.h - The dtype an instruction computes in -*- C++ -*-===//
//
// Both backends instantiate a kernel for one element type per instruction;
// this is the one rule that picks it, derived from the loader's dtype
// contract (runtime/plan/KernelChecks.h, InstructionChecker::dtypes): an
// instruction's float operands share one dtype T, except that in a
// mixed-precision plan its wide operands (parameter gradients, the loss, the
// kept row statistics, the optimizer's state) may be F32 where T is BF16 or
// F16. I32 and I64 operands (token ids, the step) never decide T.
//
// InstructionDType(plan, inst) is, in this order:
//
//  1. For a kernel flagged kOperandDType (ZERO, ADD, ALL_REDUCE, COPY: one
//     dtype throughout, no wide operand), the dtype of output 0, or
//     DTYPE_UNSPECIFIED when that is not a float type.
//  2. In a mixed-precision plan (one with a BF16 or F16 buffer), the plan's
//     low-precision dtype, MixedPrecisionDType(plan), for every other
//     kernel: its non-wide operands are in it, and a kernel whose float
//     operands are all F32 (GRAD_NORM of F32 gradients, ADAMW of F32 master
//     weights) reads those as F32 whatever T is, while its low-precision
//     outputs (ADAMW's weights) are in it.
//  3. Otherwise (an F32 or F64 plan, where every float operand of an
//     instruction is T): the dtype of its first float output, else of its
//     first float input, else DTYPE_UNSPECIFIED (no float operand: a SEND
//     or RECV of I32 ids).
//
// On the plans the loader accepts this is what each backend used before: on
// F32 and F64 plans the dtype of the instruction's last output that is not
// I32 (the CPU executor's rule: all float outputs share T there); on
// mixed-precision plans the CUDA executor's, output 0's dtype for
// kOperandDType kernels and the plan's compute dtype (its BF16 or F16) for
// all others. The one difference: a ZERO of an integer buffer, which both
// backends run as a memset, had that buffer's dtype (I64; I32 on CUDA) and
// is DTYPE_UNSPECIFIED now. SEND, RECV and WAIT get a dtype like any
// instruction, but move or finish their buffers in the buffers' own dtypes.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_INSTRUCTIONDTYPE_H
#define BRAID_RUNTIME_PLAN_INSTRUCTIONDTYPE_H

#include "runtime/plan/plan.pb.h"

namespace braid::plan {

/// The low-precision dtype a mixed-precision plan computes in: BF16 or F16
/// when the plan has a buffer of that dtype (the last such buffer's, should
/// it have both), DTYPE_UNSPECIFIED for an F32 or F64 plan.
DType MixedPrecisionDType(const Plan &plan);

/// The dtype `inst` (an instruction of the validated plan `plan`) computes
/// in: the rule of the file comment. It scans the plan's buffers; a caller
/// that asks for every instruction passes MixedPrecisionDType(plan),
/// computed once, to the overload below.
DType InstructionDType(const Plan &plan, const Instruction &inst);

/// As above, with `mixed` = MixedPrecisionDType(plan).
DType InstructionDType(const Plan &plan, const Instruction &inst, DType mixed);

} // namespace braid::plan

#endif // BRAID_RUNTIME_PLAN_INSTRUCTIONDTYPE_H
