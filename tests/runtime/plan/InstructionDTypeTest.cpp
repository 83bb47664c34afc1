//===- InstructionDTypeTest.cpp - The dtype an instruction computes in ----===//
//
// InstructionDType on small plans built by hand (each one the loader
// accepts): the expected dtypes follow the rule's three cases as
// runtime/plan/InstructionDType.h states them, and on every instruction the
// rule agrees with the rule each backend used before it (the CPU's on F32
// and F64 plans, the CUDA's on mixed-precision plans), written out here.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/InstructionDType.h"

#include "runtime/plan/PlanLoader.h"

#include "PlanBuilders.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

using namespace braid::plan;
using namespace braid::plan::testing;

namespace {

/// A plan being built: one function, "f", and buffers one after the other.
struct Builder {
  Plan plan;
  int64_t offset = 0;
  Function *fn;
  explicit Builder(const std::string &axis = "dp", int64_t size = 1) {
    plan.set_version(SCHEMA_VERSION_CURRENT);
    plan.mutable_mesh()->add_axes(axis);
    plan.mutable_mesh()->add_sizes(size);
    fn = plan.add_functions();
    fn->set_name("f");
  }
  int buffer(const char *name, DType dtype, const std::vector<int64_t> &shape,
             BufferRole role = ACTIVATION) {
    return addBuffer(plan, offset, name, dtype, shape, role);
  }
  Instruction *add(Kernel kernel, const std::vector<int> &ins,
                   const std::vector<int> &outs) {
    return addInstruction(fn, kernel, ins, outs);
  }
  /// The plan, its arena set and validated.
  Plan done() {
    plan.set_arena_bytes(offset);
    absl::Status s = ValidatePlan(plan);
    EXPECT_TRUE(s.ok()) << s;
    return plan;
  }
};

void setInt(Instruction *inst, const char *name, int64_t value) {
  (*inst->mutable_int_attrs())[name] = value;
}
void setFloat(Instruction *inst, const char *name, double value) {
  (*inst->mutable_float_attrs())[name] = value;
}

/// A model in one dtype `t` (F32 or F64), with I32 token ids. The dtypes
/// the rule gives, instruction by instruction, are in `expected`.
Plan uniformPlan(DType t, std::vector<DType> *expected) {
  Builder b;
  int x = b.buffer("x", t, {4, 3}, INPUT);
  int w = b.buffer("w", t, {3, 2}, PARAMETER);
  int y = b.buffer("y", t, {4, 2});
  int dw = b.buffer("dw", t, {3, 2}, GRADIENT);
  int ids = b.buffer("ids", I32, {4}, INPUT);
  int table = b.buffer("table", t, {5, 3}, PARAMETER);
  int emb = b.buffer("emb", t, {4, 3});
  int loss = b.buffer("loss", t, {});
  int norm = b.buffer("norm", t, {});
  int scale = b.buffer("scale", t, {});
  int y2 = b.buffer("y2", t, {4, 2});
  int kept = b.buffer("kept", I32, {4});
  // Case 3: the dtype of the float operands; the ids never decide it.
  b.add(EMBEDDING, {table, ids}, {emb});
  setInt(b.add(LINEAR, {x, w}, {y}), "transpose_w", 0);
  setInt(b.add(CROSS_ENTROPY, {y, ids}, {loss}), "ignore_index", -100);
  setInt(b.add(LINEAR_GRAD_WEIGHT, {x, y}, {dw}), "transpose_w", 0);
  setFloat(b.add(GRAD_NORM, {dw}, {norm, scale}), "max_norm", 1.0);
  // Case 1: output 0's dtype, or none for an integer one.
  b.add(ADD, {y, y}, {y2});
  b.add(ZERO, {}, {dw});
  b.add(ZERO, {}, {kept});
  *expected = {t, t, t, t, t, t, t, DTYPE_UNSPECIFIED};
  return b.done();
}

/// A mixed-precision plan in `low` (BF16 or F16): F32 parameter gradients,
/// loss, norm and master weights beside `low` weights and activations.
Plan mixedPlan(DType low, std::vector<DType> *expected) {
  Builder b;
  int x = b.buffer("x", low, {4, 3}, INPUT);
  int w = b.buffer("w", low, {3, 2}, PARAMETER);
  int y = b.buffer("y", low, {4, 2});
  int dw = b.buffer("dw", F32, {3, 2}, GRADIENT);
  int dw2 = b.buffer("dw2", F32, {3, 2}, GRADIENT);
  int ids = b.buffer("ids", I32, {4}, INPUT);
  int table = b.buffer("table", low, {5, 3}, PARAMETER);
  int emb = b.buffer("emb", low, {4, 3});
  int dtable = b.buffer("dtable", F32, {5, 3}, GRADIENT);
  int loss = b.buffer("loss", F32, {});
  int norm = b.buffer("norm", F32, {});
  int scale = b.buffer("scale", F32, {});
  int y2 = b.buffer("y2", low, {4, 2});
  int master = b.buffer("master:w", F32, {3, 2}, OPTIMIZER_STATE);
  int m = b.buffer("m", F32, {3, 2}, OPTIMIZER_STATE);
  int v = b.buffer("v", F32, {3, 2}, OPTIMIZER_STATE);
  int lr = b.buffer("lr", F32, {}, INPUT);
  int step = b.buffer("step", I64, {}, INPUT);
  // Case 2: the plan's low dtype, whatever the wide operands' (the F32
  // gradient, loss and norm), also where every float operand is F32.
  b.add(EMBEDDING, {table, ids}, {emb});
  setInt(b.add(LINEAR, {x, w}, {y}), "transpose_w", 0);
  setInt(b.add(LINEAR_GRAD_WEIGHT, {x, y}, {dw}), "transpose_w", 0);
  setInt(b.add(CROSS_ENTROPY, {y, ids}, {loss}), "ignore_index", -100);
  b.add(EMBEDDING_GRAD, {emb, ids}, {dtable});
  setFloat(b.add(GRAD_NORM, {dw, dtable}, {norm, scale}), "max_norm", 1.0);
  Instruction *adamw =
      b.add(ADAMW, {master, dw, m, v, lr, step, scale}, {master, m, v, w});
  for (const char *attr : {"beta1", "beta2", "eps", "weight_decay"})
    setFloat(adamw, attr, 0.01);
  // Case 1: output 0's dtype, F32 for the gradients' sums and copies.
  b.add(ADD, {dw, dw2}, {dw});
  b.add(ADD, {y, y}, {y2});
  b.add(ZERO, {}, {dw});
  b.add(ZERO, {}, {y});
  b.add(ZERO, {}, {ids});
  b.add(COPY, {dw}, {dw2});
  b.add(ALL_REDUCE, {dw}, {dw})->add_group("dp");
  *expected = {low, low, low, low, low, low, low,               // case 2
               F32, low, F32, low, DTYPE_UNSPECIFIED, F32, F32}; // case 1
  return b.done();
}

/// The CPU executor's rule before InstructionDType: the dtype of the
/// instruction's last output that is not I32.
DType cpuRuleBefore(const Plan &plan, const Instruction &inst) {
  DType dtype = DTYPE_UNSPECIFIED;
  for (int32_t id : inst.outputs())
    if (plan.buffers(id).dtype() != I32)
      dtype = plan.buffers(id).dtype();
  return dtype;
}

/// The CUDA executor's rule before InstructionDType: output 0's dtype for
/// ZERO, ADD, ALL_REDUCE and COPY; the plan's compute dtype (its last BF16
/// or F16 buffer's, else F32) for every other kernel.
DType cudaRuleBefore(const Plan &plan, const Instruction &inst) {
  Kernel k = inst.kernel();
  if (k == ZERO || k == ADD || k == ALL_REDUCE || k == COPY)
    return plan.buffers(inst.outputs(0)).dtype();
  DType compute = F32;
  for (const Buffer &b : plan.buffers())
    if (b.dtype() == BF16 || b.dtype() == F16)
      compute = b.dtype();
  return compute;
}

std::string where(const Instruction &inst, int i) {
  return "instruction " + std::to_string(i) + " (" + Kernel_Name(inst.kernel()) +
         ")";
}

TEST(InstructionDType, F32AndF64PlansComputeInTheirOperandsDType) {
  for (DType t : {F32, F64}) {
    std::vector<DType> expected;
    Plan plan = uniformPlan(t, &expected);
    ASSERT_EQ(plan.functions(0).body_size(), int(expected.size()));
    EXPECT_EQ(MixedPrecisionDType(plan), DTYPE_UNSPECIFIED);
    for (int i = 0; i < plan.functions(0).body_size(); ++i) {
      const Instruction &inst = plan.functions(0).body(i);
      EXPECT_EQ(InstructionDType(plan, inst), expected[i])
          << DType_Name(t) << " plan, " << where(inst, i);
      EXPECT_EQ(InstructionDType(plan, inst), cpuRuleBefore(plan, inst))
          << DType_Name(t) << " plan, " << where(inst, i);
    }
  }
}

TEST(InstructionDType, MixedPrecisionPlansComputeInTheirLowDType) {
  for (DType low : {BF16, F16}) {
    std::vector<DType> expected;
    Plan plan = mixedPlan(low, &expected);
    ASSERT_EQ(plan.functions(0).body_size(), int(expected.size()));
    EXPECT_EQ(MixedPrecisionDType(plan), low);
    for (int i = 0; i < plan.functions(0).body_size(); ++i) {
      const Instruction &inst = plan.functions(0).body(i);
      DType dtype = InstructionDType(plan, inst);
      EXPECT_EQ(dtype, expected[i]) << DType_Name(low) << " plan, " << where(inst, i);
      // The CUDA executor's rule, except for a ZERO of integer ids (a
      // memset either way), which the rule leaves without a dtype.
      if (dtype != DTYPE_UNSPECIFIED)
        EXPECT_EQ(dtype, cudaRuleBefore(plan, inst))
            << DType_Name(low) << " plan, " << where(inst, i);
      else
        EXPECT_EQ(plan.buffers(inst.outputs(0)).dtype(), I32) << where(inst, i);
    }
  }
}

// Where the CPU's rule and the CUDA's disagreed: the F32 gradient of a BF16
// matrix product (the CPU's rule said F32, the output's) and a norm of F32
// gradients in a BF16 plan (the CPU's rule said F32, the CUDA's BF16).
TEST(InstructionDType, WideOutputsDoNotDecide) {
  std::vector<DType> expected;
  Plan plan = mixedPlan(BF16, &expected);
  const Instruction &gradWeight = plan.functions(0).body(2);
  const Instruction &gradNorm = plan.functions(0).body(5);
  ASSERT_EQ(gradWeight.kernel(), LINEAR_GRAD_WEIGHT);
  ASSERT_EQ(gradNorm.kernel(), GRAD_NORM);
  EXPECT_EQ(cpuRuleBefore(plan, gradWeight), F32);
  EXPECT_EQ(InstructionDType(plan, gradWeight), BF16);
  EXPECT_EQ(cpuRuleBefore(plan, gradNorm), F32);
  EXPECT_EQ(InstructionDType(plan, gradNorm), BF16);
}

TEST(InstructionDType, OverloadTakesTheMixedPrecisionDType) {
  for (DType t : {F32, F64, BF16, F16}) {
    std::vector<DType> expected;
    Plan plan = t == F32 || t == F64 ? uniformPlan(t, &expected)
                                     : mixedPlan(t, &expected);
    DType mixed = MixedPrecisionDType(plan);
    for (const Instruction &inst : plan.functions(0).body())
      EXPECT_EQ(InstructionDType(plan, inst, mixed),
                InstructionDType(plan, inst));
  }
}

// Transfers and WAIT: the float dtype of the buffer they move or finish,
// none for I32 ids.
TEST(InstructionDType, TransfersAndWait) {
  Builder b("pp", 2);
  int h = b.buffer("h", F64, {2, 4});
  int ids = b.buffer("ids", I32, {2});
  int g = b.buffer("g", F64, {8}, GRADIENT);
  int gs = b.buffer("gs", F64, {4}, GRADIENT);
  for (int id : {h, ids}) {
    Instruction *send = b.add(SEND, {id}, {});
    send->set_rank_axis("pp");
    setInt(send, "peer", 1);
  }
  Instruction *recv = b.add(RECV, {}, {ids});
  recv->set_rank_axis("pp");
  setInt(recv, "peer", -1);
  Instruction *scatter = b.add(REDUCE_SCATTER, {g}, {gs});
  scatter->add_group("pp");
  setInt(scatter, "dim", 0);
  setInt(scatter, "async", 1);
  b.add(WAIT, {gs}, {});
  Plan plan = b.done();
  std::vector<DType> expected = {F64, DTYPE_UNSPECIFIED, DTYPE_UNSPECIFIED,
                                 F64, F64};
  for (int i = 0; i < plan.functions(0).body_size(); ++i)
    EXPECT_EQ(InstructionDType(plan, plan.functions(0).body(i)), expected[i])
        << where(plan.functions(0).body(i), i);
}

// A plan with both BF16 and F16 buffers has no single low dtype: the last
// one's, as the CUDA executor took it.
TEST(InstructionDType, MixedPrecisionDTypeIsTheLastLowBuffers) {
  Plan plan;
  plan.add_buffers()->set_dtype(F32);
  EXPECT_EQ(MixedPrecisionDType(plan), DTYPE_UNSPECIFIED);
  plan.add_buffers()->set_dtype(F16);
  plan.add_buffers()->set_dtype(F32);
  EXPECT_EQ(MixedPrecisionDType(plan), F16);
  plan.add_buffers()->set_dtype(BF16);
  EXPECT_EQ(MixedPrecisionDType(plan), BF16);
}

} // namespace
