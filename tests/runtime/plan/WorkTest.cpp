//===- WorkTest.cpp - The FLOPs and bytes of plan instructions ------------===//
//
// Tiny plans built by hand, checked by the loader (so that the shapes and
// attributes are ones the executor runs), and their work computed here from
// the shapes: each expected value is written as its arithmetic.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Work.h"

#include "PlanBuilders.h"

#include "runtime/plan/PlanLoader.h"

#include "gtest/gtest.h"

#include <set>
#include <vector>

using namespace braid::plan;

namespace {

/// A plan being built: buffers laid out one after the other and one
/// function, on a mesh of the given axes.
struct PlanBuilder {
  explicit PlanBuilder(
      const std::vector<std::pair<const char *, int64_t>> &axes = {{"dp", 1}}) {
    plan.set_version(SCHEMA_VERSION_CURRENT);
    for (const auto &[axis, size] : axes) {
      plan.mutable_mesh()->add_axes(axis);
      plan.mutable_mesh()->add_sizes(size);
    }
    fn = plan.add_functions();
    fn->set_name("f");
  }

  /// Appends a buffer (8-byte aligned) and returns its index.
  int addBuffer(const char *name, DType dtype,
                const std::vector<int64_t> &shape,
                BufferRole role = ACTIVATION) {
    int id = braid::plan::testing::addBuffer(plan, offset, name, dtype, shape, role);
    plan.set_arena_bytes(offset);
    return id;
  }

  /// Appends an instruction of `kernel` on `ins` -> `outs`.
  Instruction *addInstruction(Kernel kernel, const std::vector<int> &ins,
                              const std::vector<int> &outs) {
    return braid::plan::testing::addInstruction(fn, kernel, ins, outs);
  }

  /// The work of `inst`, after checking that the loader accepts the plan.
  Work work(const Instruction &inst) const {
    absl::Status valid = ValidatePlan(plan);
    EXPECT_TRUE(valid.ok()) << valid;
    return InstructionWork(plan, inst);
  }

  Plan plan;
  Function *fn = nullptr;
  int64_t offset = 0;
};

void setInt(Instruction *inst, const char *name, int64_t value) {
  (*inst->mutable_int_attrs())[name] = value;
}
void setFloat(Instruction *inst, const char *name, double value) {
  (*inst->mutable_float_attrs())[name] = value;
}

/// Expects no communication in `w`.
void expectLocal(const Work &w) {
  EXPECT_EQ(w.messageBytes, 0);
  EXPECT_EQ(w.groupSize, 1);
}

TEST(Work, Linear) {
  // y [2, 3, 16] = x [2, 3, 8] · Wᵀ, W [16, 8] (nn.Linear's layout): 6 rows.
  PlanBuilder b;
  int x = b.addBuffer("x", F32, {2, 3, 8});
  int w = b.addBuffer("w", F32, {16, 8}, PARAMETER);
  int y = b.addBuffer("y", F32, {2, 3, 16});
  Instruction *lin = b.addInstruction(LINEAR, {x, w}, {y});
  setInt(lin, "transpose_w", 1);
  Work work = b.work(*lin);
  EXPECT_DOUBLE_EQ(work.flops, 2.0 * 6 * 8 * 16);
  EXPECT_DOUBLE_EQ(work.bytes, 4.0 * (2 * 3 * 8 + 16 * 8 + 2 * 3 * 16));
  expectLocal(work);
}

TEST(Work, LinearWithBias) {
  // The weight as [in, out]; the bias add is a multiply by bias_scale and
  // an add per element of y.
  PlanBuilder b;
  int x = b.addBuffer("x", F32, {6, 8});
  int w = b.addBuffer("w", F32, {8, 16}, PARAMETER);
  int bias = b.addBuffer("bias", F32, {16}, PARAMETER);
  int y = b.addBuffer("y", F32, {6, 16});
  Instruction *lin = b.addInstruction(LINEAR, {x, w, bias}, {y});
  setInt(lin, "transpose_w", 0);
  setFloat(lin, "bias_scale", 0.5);
  Work work = b.work(*lin);
  EXPECT_DOUBLE_EQ(work.flops, 2.0 * 6 * 8 * 16 + 2.0 * 6 * 16);
  EXPECT_DOUBLE_EQ(work.bytes, 4.0 * (6 * 8 + 8 * 16 + 16 + 6 * 16));
  expectLocal(work);
}

TEST(Work, LinearGradients) {
  // dW [16, 8] += dyᵀ [16, 6] · x [6, 8]; dx [6, 8] = dy [6, 16] · W.
  PlanBuilder b;
  int x = b.addBuffer("x", F32, {2, 3, 8});
  int dy = b.addBuffer("dy", F32, {2, 3, 16});
  int w = b.addBuffer("w", F32, {16, 8}, PARAMETER);
  int dw = b.addBuffer("dw", F32, {16, 8}, GRADIENT);
  int dx = b.addBuffer("dx", F32, {2, 3, 8});
  Instruction *gw = b.addInstruction(LINEAR_GRAD_WEIGHT, {x, dy}, {dw});
  setInt(gw, "transpose_w", 1);
  Instruction *gx = b.addInstruction(LINEAR_GRAD_INPUT, {dy, w}, {dx});
  setInt(gx, "transpose_w", 1);

  Work weight = b.work(*gw);
  EXPECT_DOUBLE_EQ(weight.flops, 2.0 * 6 * 8 * 16);
  EXPECT_DOUBLE_EQ(weight.bytes, 4.0 * (6 * 8 + 6 * 16 + 16 * 8));
  expectLocal(weight);
  Work input = b.work(*gx);
  EXPECT_DOUBLE_EQ(input.flops, 2.0 * 6 * 8 * 16);
  EXPECT_DOUBLE_EQ(input.bytes, 4.0 * (6 * 16 + 16 * 8 + 6 * 8));
}

/// Attention of q [2, 5, 4 heads x 3] on k and v [2, 5, 2 kv heads x 3].
struct AttentionPlan {
  explicit AttentionPlan(bool causal) {
    int q = b.addBuffer("q", F32, {2, 5, 12});
    int k = b.addBuffer("k", F32, {2, 5, 6});
    int v = b.addBuffer("v", F32, {2, 5, 6});
    int o = b.addBuffer("o", F32, {2, 5, 12});
    int dout = b.addBuffer("dout", F32, {2, 5, 12});
    int dq = b.addBuffer("dq", F32, {2, 5, 12});
    int dk = b.addBuffer("dk", F32, {2, 5, 6});
    int dv = b.addBuffer("dv", F32, {2, 5, 6});
    forward = b.addInstruction(ATTENTION, {q, k, v}, {o});
    backward =
        b.addInstruction(ATTENTION_GRAD, {q, k, v, o, dout}, {dq, dk, dv});
    for (Instruction *inst : {forward, backward}) {
      setInt(inst, "heads", 4);
      setInt(inst, "kv_heads", 2);
      setInt(inst, "causal", causal);
      setInt(inst, "alibi", 0);
      setFloat(inst, "scale", 0.5);
    }
  }
  PlanBuilder b;
  Instruction *forward, *backward;
};

TEST(Work, Attention) {
  // batch 2, 4 heads of dimension 3, 5 queries on 5 keys: q·kᵀ and p·v are
  // 2 x 3 FLOPs each per score.
  AttentionPlan a(/*causal=*/false);
  Work work = a.b.work(*a.forward);
  EXPECT_DOUBLE_EQ(work.flops, (2.0 * 3 + 2.0 * 3) * 2 * 4 * (5 * 5));
  EXPECT_DOUBLE_EQ(work.bytes, 4.0 * (2 * 5 * 12 + 2 * 2 * 5 * 6 + 2 * 5 * 12));
  expectLocal(work);
}

TEST(Work, CausalAttention) {
  // The CPU kernel visits keys 0..i for query i: 1 + 2 + ... + 5 scores per
  // (batch, head).
  AttentionPlan a(/*causal=*/true);
  double scores = 2 * 4 * (1 + 2 + 3 + 4 + 5);
  Work work = a.b.work(*a.forward);
  EXPECT_DOUBLE_EQ(work.flops, (2.0 * 3 + 2.0 * 3) * scores);
  // Backward: the forward again, then per score q·k, dout·v, dq += ds·k,
  // dk += ds·q and dv += p·dout, and per query row dout·out.
  Work grad = a.b.work(*a.backward);
  EXPECT_DOUBLE_EQ(grad.flops, 4.0 * 3 * scores + 5 * 2.0 * 3 * scores +
                                   2.0 * 3 * (2 * 4 * 5));
  EXPECT_DOUBLE_EQ(grad.bytes, 4.0 * (4 * (2 * 5 * 12) + 4 * (2 * 5 * 6)));
  expectLocal(grad);
}

TEST(Work, RmsNorm) {
  // Per element: x², its sum, x · rstd · w.
  PlanBuilder b;
  int x = b.addBuffer("x", F32, {6, 8});
  int w = b.addBuffer("w", F32, {8}, PARAMETER);
  int y = b.addBuffer("y", F32, {6, 8});
  Instruction *norm = b.addInstruction(RMS_NORM, {x, w}, {y});
  setFloat(norm, "eps", 1e-5);
  Work work = b.work(*norm);
  EXPECT_DOUBLE_EQ(work.flops, 4.0 * 6 * 8);
  EXPECT_DOUBLE_EQ(work.bytes, 4.0 * (6 * 8 + 8 + 6 * 8));
  expectLocal(work);
}

TEST(Work, AdamW) {
  // 15 FLOPs per element; the update is in place, so param, m and v count
  // once; lr and scale are F32 scalars, step I64.
  PlanBuilder b;
  int p = b.addBuffer("p", F32, {10}, PARAMETER);
  int g = b.addBuffer("g", F32, {10}, GRADIENT);
  int m = b.addBuffer("m", F32, {10}, OPTIMIZER_STATE);
  int v = b.addBuffer("v", F32, {10}, OPTIMIZER_STATE);
  int lr = b.addBuffer("lr", F32, {}, INPUT);
  int step = b.addBuffer("step", I64, {}, INPUT);
  int scale = b.addBuffer("scale", F32, {}, INPUT);
  Instruction *adam =
      b.addInstruction(ADAMW, {p, g, m, v, lr, step, scale}, {p, m, v});
  setFloat(adam, "beta1", 0.9);
  setFloat(adam, "beta2", 0.95);
  setFloat(adam, "eps", 1e-8);
  setFloat(adam, "weight_decay", 0.1);
  Work work = b.work(*adam);
  EXPECT_DOUBLE_EQ(work.flops, 15.0 * 10);
  EXPECT_DOUBLE_EQ(work.bytes, 4.0 * 10 * 4 + 4 + 8 + 4);
  expectLocal(work);
}

TEST(Work, AdamWOnAZeroBlock) {
  // ZeRO: the rank updates its block of 10 of the 20 flat parameters, and
  // touches only that block of them.
  PlanBuilder b({{"dp", 2}});
  int p = b.addBuffer("p", F32, {20}, PARAMETER);
  int g = b.addBuffer("g", F32, {10}, GRADIENT);
  int m = b.addBuffer("m", F32, {10}, OPTIMIZER_STATE);
  int v = b.addBuffer("v", F32, {10}, OPTIMIZER_STATE);
  int lr = b.addBuffer("lr", F32, {}, INPUT);
  int step = b.addBuffer("step", I64, {}, INPUT);
  int scale = b.addBuffer("scale", F32, {}, INPUT);
  Instruction *adam =
      b.addInstruction(ADAMW, {p, g, m, v, lr, step, scale}, {p, m, v});
  adam->set_rank_axis("dp");
  setFloat(adam, "beta1", 0.9);
  setFloat(adam, "beta2", 0.95);
  setFloat(adam, "eps", 1e-8);
  setFloat(adam, "weight_decay", 0.1);
  Work work = b.work(*adam);
  EXPECT_DOUBLE_EQ(work.flops, 15.0 * 10);
  EXPECT_DOUBLE_EQ(work.bytes, 4.0 * 10 * 4 + 4 + 8 + 4);
}

TEST(Work, AllReduce) {
  // Over "tp" of a 2 x 2 mesh: 2 ranks. One input in place, one not: the
  // message is both inputs, the bytes the three buffers.
  PlanBuilder b({{"dp", 2}, {"tp", 2}});
  int a = b.addBuffer("a", F32, {4, 8});
  int c = b.addBuffer("c", F32, {3});
  int d = b.addBuffer("d", F32, {3});
  Instruction *reduce = b.addInstruction(ALL_REDUCE, {a, c}, {a, d});
  reduce->add_group("tp");
  Work work = b.work(*reduce);
  EXPECT_EQ(work.flops, 0);
  EXPECT_DOUBLE_EQ(work.messageBytes, 4.0 * (4 * 8 + 3));
  EXPECT_EQ(work.groupSize, 2);
  EXPECT_DOUBLE_EQ(work.bytes, 4.0 * (4 * 8 + 3 + 3));

  reduce->add_group("dp");
  EXPECT_EQ(b.work(*reduce).groupSize, 2 * 2);
}

TEST(Work, ReduceScatterAndAllGather) {
  // x [8, 6] summed over the 2 ranks of "tp", each keeping [4, 6]; the
  // message is the whole x. The gather back sends the rank's [4, 6].
  PlanBuilder b({{"dp", 2}, {"tp", 2}});
  int x = b.addBuffer("x", F32, {8, 6});
  int y = b.addBuffer("y", F32, {4, 6});
  int z = b.addBuffer("z", F32, {8, 6});
  Instruction *scatter = b.addInstruction(REDUCE_SCATTER, {x}, {y});
  scatter->add_group("tp");
  setInt(scatter, "dim", 0);
  Instruction *gather = b.addInstruction(ALL_GATHER, {y}, {z});
  gather->add_group("tp");
  setInt(gather, "dim", 0);

  Work rs = b.work(*scatter);
  EXPECT_EQ(rs.flops, 0);
  EXPECT_DOUBLE_EQ(rs.messageBytes, 4.0 * 8 * 6);
  EXPECT_EQ(rs.groupSize, 2);
  EXPECT_DOUBLE_EQ(rs.bytes, 4.0 * (8 * 6 + 4 * 6));
  Work ag = b.work(*gather);
  EXPECT_DOUBLE_EQ(ag.messageBytes, 4.0 * 4 * 6);
  EXPECT_EQ(ag.groupSize, 2);
  EXPECT_DOUBLE_EQ(ag.bytes, 4.0 * (4 * 6 + 8 * 6));
}

TEST(Work, AllGatherInPlace) {
  // ZeRO-3: the flat [16] buffer, each of the 2 ranks of "dp" sending its
  // block of 8.
  PlanBuilder b({{"dp", 2}});
  int flat = b.addBuffer("flat", F32, {16}, PARAMETER);
  Instruction *gather = b.addInstruction(ALL_GATHER, {flat}, {flat});
  gather->add_group("dp");
  setInt(gather, "dim", 0);
  Work work = b.work(*gather);
  EXPECT_DOUBLE_EQ(work.messageBytes, 4.0 * 16 / 2);
  EXPECT_EQ(work.groupSize, 2);
  EXPECT_DOUBLE_EQ(work.bytes, 4.0 * 16);
}

TEST(Work, SendAndRecv) {
  // Point to point between the 2 stages along "pp": the message is the
  // buffer, the group one peer.
  PlanBuilder b({{"pp", 2}});
  int x = b.addBuffer("x", F32, {2, 3, 8});
  int y = b.addBuffer("y", F32, {2, 3, 8});
  Instruction *send = b.addInstruction(SEND, {x}, {});
  send->set_rank_axis("pp");
  setInt(send, "peer", 1);
  Instruction *recv = b.addInstruction(RECV, {}, {y});
  recv->set_rank_axis("pp");
  setInt(recv, "peer", -1);

  for (Instruction *inst : {send, recv}) {
    Work work = b.work(*inst);
    EXPECT_EQ(work.flops, 0);
    EXPECT_DOUBLE_EQ(work.messageBytes, 4.0 * 2 * 3 * 8);
    EXPECT_EQ(work.groupSize, 1);
    EXPECT_DOUBLE_EQ(work.bytes, 4.0 * 2 * 3 * 8);
  }
}

TEST(Work, GradNormOverAGroup) {
  // g² and its sum per element; over "tp" the ranks' sums meet in one F64.
  PlanBuilder b({{"tp", 2}});
  int g1 = b.addBuffer("g1", F32, {4, 8}, GRADIENT);
  int g2 = b.addBuffer("g2", F32, {5}, GRADIENT);
  int norm = b.addBuffer("norm", F32, {});
  int scale = b.addBuffer("scale", F32, {});
  Instruction *gn = b.addInstruction(GRAD_NORM, {g1, g2}, {norm, scale});
  setFloat(gn, "max_norm", 1.0);
  Work local = b.work(*gn);
  EXPECT_DOUBLE_EQ(local.flops, 2.0 * (4 * 8 + 5));
  EXPECT_DOUBLE_EQ(local.bytes, 4.0 * (4 * 8 + 5 + 1 + 1));
  expectLocal(local);

  gn->add_group("tp");
  setInt(gn, "split_inputs", 1);
  Work grouped = b.work(*gn);
  EXPECT_DOUBLE_EQ(grouped.flops, 2.0 * (4 * 8 + 5));
  EXPECT_DOUBLE_EQ(grouped.messageBytes, 8);
  EXPECT_EQ(grouped.groupSize, 2);
}

TEST(Work, BuffersCountOneCopyOfTheirSlots) {
  // A slotted buffer's calls each use one copy.
  PlanBuilder b;
  int x = b.addBuffer("x", F32, {6, 8});
  int w = b.addBuffer("w", F32, {8}, PARAMETER);
  int y = b.addBuffer("y", F32, {6, 8});
  Instruction *norm = b.addInstruction(RMS_NORM, {x, w}, {y});
  setFloat(norm, "eps", 1e-5);
  b.plan.mutable_buffers(x)->set_slots(3);
  EXPECT_DOUBLE_EQ(InstructionWork(b.plan, *norm).bytes,
                   4.0 * (6 * 8 + 8 + 6 * 8));
}

TEST(Work, UnspecifiedKernelHasNone) {
  PlanBuilder b;
  int x = b.addBuffer("x", F32, {6, 8});
  Instruction *inst = b.addInstruction(KERNEL_UNSPECIFIED, {x}, {x});
  Work work = InstructionWork(b.plan, *inst);
  EXPECT_EQ(work.flops, 0);
  EXPECT_EQ(work.bytes, 0);
  expectLocal(work);
  EXPECT_FALSE(IsCommunication(KERNEL_UNSPECIFIED));
}

TEST(Work, EveryKernelIsHandled) {
  // By hand: the kernels that move data between ranks, and those that do no
  // arithmetic at all.
  const std::set<Kernel> communication = {ALL_REDUCE, ALL_GATHER,
                                          REDUCE_SCATTER, SEND, RECV};
  const std::set<Kernel> noFlops = {
      EMBEDDING,  POSITION_EMBEDDING, QKV_SPLIT, QKV_CONCAT, ZERO, ALL_REDUCE,
      ALL_GATHER, REDUCE_SCATTER,     SEND,      RECV,       WAIT, COPY,
      TAKE_ROWS, REORDER_ROWS};
  // Every kernel on operands of [2, 4, 8] floats with the attributes the
  // work reads: a kernel without a case would have no bytes (nor FLOPs).
  PlanBuilder b({{"tp", 2}});
  std::vector<int> ins, outs;
  for (int i = 0; i < 7; ++i)
    ins.push_back(b.addBuffer("in", F32, {2, 4, 8}));
  for (int i = 0; i < 3; ++i)
    outs.push_back(b.addBuffer("out", F32, {2, 4, 8}));
  int kernels = 0;
  for (int k = 1; k <= Kernel_MAX; ++k) {
    ASSERT_TRUE(Kernel_IsValid(k)) << k;
    Kernel kernel = Kernel(k);
    SCOPED_TRACE(Kernel_Name(kernel));
    Instruction *inst = b.addInstruction(kernel, ins, outs);
    setInt(inst, "heads", 2);
    setInt(inst, "kv_heads", 2);
    setInt(inst, "head_dim", 4);
    if (communication.count(kernel) && kernel != SEND && kernel != RECV)
      inst->add_group("tp");
    Work work = InstructionWork(b.plan, *inst);
    EXPECT_EQ(IsCommunication(kernel), communication.count(kernel) > 0);
    EXPECT_EQ(work.flops > 0, noFlops.count(kernel) == 0) << work.flops;
    // WAIT moves nothing itself: its collective is priced where it started.
    EXPECT_EQ(work.bytes > 0, kernel != WAIT) << work.bytes;
    EXPECT_EQ(work.messageBytes > 0, communication.count(kernel) > 0)
        << work.messageBytes;
    EXPECT_EQ(work.groupSize,
              communication.count(kernel) && kernel != SEND && kernel != RECV
                  ? 2
                  : 1);
    ++kernels;
  }
  EXPECT_EQ(kernels, 50);
}

} // namespace
