//===- PlanBuilder.h - Hand-written plans for the executor tests -*- C++ -*-===//

#ifndef BRAID_TESTS_RUNTIME_EXEC_PLANBUILDER_H
#define BRAID_TESTS_RUNTIME_EXEC_PLANBUILDER_H

#include "runtime/plan/PlanLoader.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace braid::exec_test {

/// A plan on a one-axis mesh ("dp" of size 1 unless changed) whose buffers
/// are laid out one after the other, 64-byte aligned.
struct PlanBuilder {
  plan::Plan plan;
  int64_t offset = 0;
  PlanBuilder() {
    plan.set_version(plan::SCHEMA_VERSION_CURRENT);
    plan.mutable_mesh()->add_axes("dp");
    plan.mutable_mesh()->add_sizes(1);
  }
  /// A buffer of pipeline stage `stage` with `slots` copies (Buffer.slots),
  /// each of which gets its room.
  int buffer(const char *name, plan::DType dtype, std::vector<int64_t> shape,
             plan::BufferRole role, int64_t slots = 0, int32_t stage = 0) {
    plan::Buffer *b = plan.add_buffers();
    b->set_name(name);
    b->set_dtype(dtype);
    int64_t bytes = plan::DTypeBytes(dtype);
    for (int64_t d : shape) {
      b->add_shape(d);
      bytes *= d;
    }
    b->set_offset(offset);
    b->set_role(role);
    b->set_slots(slots);
    b->set_stage(stage);
    offset += (bytes * std::max<int64_t>(slots, 1) + 63) / 64 * 64;
    plan.set_arena_bytes(offset);
    return plan.buffers_size() - 1;
  }
  plan::Function *function(const char *name) {
    plan::Function *fn = plan.add_functions();
    fn->set_name(name);
    return fn;
  }
  plan::Instruction *add(plan::Function *fn, plan::Kernel kernel,
                         std::vector<int> ins, std::vector<int> outs) {
    plan::Instruction *inst = fn->add_body();
    inst->set_kernel(kernel);
    for (int i : ins)
      inst->add_inputs(i);
    for (int o : outs)
      inst->add_outputs(o);
    inst->set_provenance(plan::Kernel_Name(kernel));
    return inst;
  }
};

} // namespace braid::exec_test

#endif // BRAID_TESTS_RUNTIME_EXEC_PLANBUILDER_H
