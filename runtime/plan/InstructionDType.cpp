//===- InstructionDType.cpp - The dtype an instruction computes in --------===//

#include "runtime/plan/InstructionDType.h"

#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/PlanInternal.h"

namespace braid::plan {

using internal::isFloat;

DType MixedPrecisionDType(const Plan &plan) {
  DType low = DTYPE_UNSPECIFIED;
  for (const Buffer &b : plan.buffers())
    if (b.dtype() == BF16 || b.dtype() == F16)
      low = b.dtype();
  return low;
}

DType InstructionDType(const Plan &plan, const Instruction &inst) {
  return InstructionDType(plan, inst, MixedPrecisionDType(plan));
}

DType InstructionDType(const Plan &plan, const Instruction &inst,
                       DType mixed) {
  auto dtypeOf = [&](int32_t id) { return plan.buffers(id).dtype(); };
  // 1. One dtype throughout: output 0's.
  if (KernelInfoOf(inst.kernel()).has(kOperandDType)) {
    if (inst.outputs_size() == 0)
      return DTYPE_UNSPECIFIED;
    DType d = dtypeOf(inst.outputs(0));
    return isFloat(d) ? d : DTYPE_UNSPECIFIED;
  }
  // 2. Mixed precision: the plan's low-precision dtype.
  if (mixed == BF16 || mixed == F16)
    return mixed;
  // 3. F32 or F64: the one dtype of the instruction's float operands.
  for (int32_t id : inst.outputs())
    if (isFloat(dtypeOf(id)))
      return dtypeOf(id);
  for (int32_t id : inst.inputs())
    if (isFloat(dtypeOf(id)))
      return dtypeOf(id);
  return DTYPE_UNSPECIFIED;
}

} // namespace braid::plan
