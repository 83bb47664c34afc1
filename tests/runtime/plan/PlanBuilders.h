//===- PlanBuilders.h - Small plans built by hand in tests ------*- C++ -*-===//

#ifndef BRAID_TESTS_RUNTIME_PLAN_PLANBUILDERS_H
#define BRAID_TESTS_RUNTIME_PLAN_PLANBUILDERS_H

#include "runtime/plan/PlanLoader.h"

#include <vector>

namespace braid::plan::testing {

/// Appends an instruction of `kernel` on buffers `ins` -> `outs` to `fn`.
inline Instruction *addInstruction(Function *fn, Kernel kernel,
                                   const std::vector<int> &ins,
                                   const std::vector<int> &outs) {
  Instruction *inst = fn->add_body();
  inst->set_kernel(kernel);
  for (int i : ins)
    inst->add_inputs(i);
  for (int o : outs)
    inst->add_outputs(o);
  return inst;
}

/// Appends a buffer at `offset` (then moved past it, 8-byte aligned so that
/// F64 buffers stay aligned) and returns its index.
inline int addBuffer(Plan &plan, int64_t &offset, const char *name,
                     DType dtype, const std::vector<int64_t> &shape,
                     BufferRole role) {
  Buffer *b = plan.add_buffers();
  b->set_name(name);
  b->set_dtype(dtype);
  int64_t bytes = DTypeBytes(dtype);
  for (int64_t d : shape) {
    b->add_shape(d);
    bytes *= d;
  }
  b->set_offset(offset);
  b->set_role(role);
  offset += (bytes + 7) / 8 * 8;
  return plan.buffers_size() - 1;
}

} // namespace braid::plan::testing

#endif // BRAID_TESTS_RUNTIME_PLAN_PLANBUILDERS_H
