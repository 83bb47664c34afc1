//===- ExecutorTest.cpp - Running plans on the CPU ------------------------===//
//
// A hand-written plan with a forward function (linear, RMSNorm,
// cross-entropy) and its backward: the weight gradients the backward
// function leaves in the arena must match central finite differences of the
// loss that the forward function computes (f64), which checks the dispatch
// and the buffer wiring of every instruction involved.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include "PipelinePlans.h"
#include "PlanBuilder.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

#include <unistd.h>

using namespace braid;
using namespace braid::plan;

namespace {

using Builder = exec_test::PlanBuilder;

TEST(Executor, BackwardMatchesFiniteDifferencesOfForward) {
  Builder b;
  const DType f = F64;
  int x = b.buffer("x", f, {2, 3, 4}, INPUT);
  int w = b.buffer("w", f, {6, 4}, PARAMETER);
  int g = b.buffer("g", f, {6}, PARAMETER);
  int t = b.buffer("t", I32, {2, 3}, INPUT);
  int y = b.buffer("y", f, {2, 3, 6}, ACTIVATION);
  int z = b.buffer("z", f, {2, 3, 6}, ACTIVATION);
  int loss = b.buffer("loss", f, {}, ACTIVATION);
  int dloss = b.buffer("dloss", f, {}, INPUT);
  int dz = b.buffer("dz", f, {2, 3, 6}, ACTIVATION);
  int dy = b.buffer("dy", f, {2, 3, 6}, ACTIVATION);
  int dg = b.buffer("dg", f, {6}, GRADIENT);
  int dw = b.buffer("dw", f, {6, 4}, GRADIENT);
  Function *fwd = b.plan.add_functions();
  fwd->set_name("forward");
  (*b.add(fwd, LINEAR, {x, w}, {y})->mutable_int_attrs())["transpose_w"] = 1;
  (*b.add(fwd, RMS_NORM, {y, g}, {z})->mutable_float_attrs())["eps"] = 1e-5;
  (*b.add(fwd, CROSS_ENTROPY, {z, t}, {loss})->mutable_int_attrs())["ignore_index"] = -100;
  Function *bwd = b.plan.add_functions();
  bwd->set_name("backward");
  b.add(bwd, ZERO, {}, {dg});
  b.add(bwd, ZERO, {}, {dw});
  (*b.add(bwd, CROSS_ENTROPY_GRAD, {z, t, dloss}, {dz})->mutable_int_attrs())["ignore_index"] = -100;
  (*b.add(bwd, RMS_NORM_GRAD, {y, g, dz}, {dy, dg})->mutable_float_attrs())["eps"] = 1e-5;
  (*b.add(bwd, LINEAR_GRAD_WEIGHT, {x, dy}, {dw})->mutable_int_attrs())["transpose_w"] = 1;

  // Through the file format, as braid-run would receive it.
  absl::StatusOr<Plan> loaded = ParsePlanFile(SerializePlanFile(b.plan), "t.plan");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto executor = exec::Executor::Create(*loaded);
  ASSERT_TRUE(executor.ok()) << executor.status();
  exec::Executor &e = **executor;

  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-1, 1);
  auto fill = [&](int id, int64_t n, double base, double scale) {
    std::vector<double> v(n);
    for (double &x : v)
      x = base + scale * u(gen);
    ASSERT_TRUE(e.Write(id, v).ok());
  };
  fill(x, 24, 0, 1);
  fill(w, 24, 0, 0.5);
  fill(g, 6, 1, 0.2);
  ASSERT_TRUE(e.Write(t, std::vector<double>{0, 5, 3, -100, 2, 1}).ok());
  ASSERT_TRUE(e.Write(dloss, std::vector<double>{1.0}).ok());
  ASSERT_TRUE(e.Run("forward", {}).ok());
  ASSERT_TRUE(e.Run("backward", {}).ok());
  std::vector<double> dwValues = *e.Read(dw), dgValues = *e.Read(dg);

  auto lossAt = [&]() {
    EXPECT_TRUE(e.Run("forward", {}).ok());
    return (*e.Read(loss))[0];
  };
  auto check = [&](int param, const std::vector<double> &grad) {
    std::vector<double> p = *e.Read(param);
    for (size_t i = 0; i < p.size(); ++i) {
      std::vector<double> q = p;
      q[i] = p[i] + 1e-5;
      ASSERT_TRUE(e.Write(param, q).ok());
      double up = lossAt();
      q[i] = p[i] - 1e-5;
      ASSERT_TRUE(e.Write(param, q).ok());
      double down = lossAt();
      ASSERT_TRUE(e.Write(param, p).ok());
      double numeric = (up - down) / 2e-5;
      EXPECT_NEAR(grad[i], numeric,
                  1e-6 * std::max({std::fabs(numeric), std::fabs(grad[i]), 1e-3}))
          << "element " << i;
    }
  };
  check(w, dwValues);
  check(g, dgValues);

  // Running backward twice re-zeroes: the gradients do not double.
  ASSERT_TRUE(e.Run("forward", {}).ok());
  ASSERT_TRUE(e.Run("backward", {}).ok());
  EXPECT_EQ(*e.Read(dw), dwValues);
}

TEST(Executor, RefusesBadTokensAndUnsupportedDtypes) {
  Builder b;
  int table = b.buffer("table", F32, {5, 2}, PARAMETER);
  int ids = b.buffer("ids", I32, {3}, INPUT);
  int out = b.buffer("out", F32, {3, 2}, ACTIVATION);
  Function *fn = b.plan.add_functions();
  fn->set_name("f");
  b.add(fn, EMBEDDING, {table, ids}, {out});
  auto e = exec::Executor::Create(b.plan);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE((*e)->Write(ids, std::vector<double>{0, 7, 1}).ok());
  absl::Status s = (*e)->Run("f", {});
  EXPECT_NE(s.message().find("token id 7 at position 1"), absl::string_view::npos) << s;
  EXPECT_FALSE((*e)->Run("g", {}).ok());

  Builder h;
  int t16 = h.buffer("table", BF16, {5, 2}, PARAMETER);
  int i16 = h.buffer("ids", I32, {3}, INPUT);
  int o16 = h.buffer("out", BF16, {3, 2}, ACTIVATION);
  Function *fn16 = h.plan.add_functions();
  fn16->set_name("f");
  h.add(fn16, EMBEDDING, {t16, i16}, {o16});
  // A BF16 plan is refused when the executor is made, before anything runs.
  auto e16 = exec::Executor::Create(h.plan);
  ASSERT_FALSE(e16.ok());
  EXPECT_EQ(e16.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(e16.status().message().find(
                "the plan computes in BF16 (mixed precision; buffer 'table'): "
                "the CPU backend runs F32 and F64 plans, and BF16 needs the "
                "CUDA backend"),
            absl::string_view::npos)
      << e16.status();
}

// Attention's backward with the log-sum-exp its forward kept (a second
// output, a sixth input) gives exactly what it gives when it computes the
// forward again for it: the same function of the same inputs.
TEST(Executor, AttentionBackwardReadsTheKeptLogSumExp) {
  Builder b;
  const DType f = F64;
  // 2 query heads over 1 kv head of 4 columns, 5 positions, causal.
  int q = b.buffer("q", f, {2, 5, 8}, INPUT);
  int k = b.buffer("k", f, {2, 5, 4}, INPUT);
  int v = b.buffer("v", f, {2, 5, 4}, INPUT);
  int dout = b.buffer("dout", f, {2, 5, 8}, INPUT);
  int out = b.buffer("out", f, {2, 5, 8}, ACTIVATION);
  int lse = b.buffer("lse", f, {2, 2, 5}, ACTIVATION);
  std::vector<int> grads;
  for (const char *name : {"dq", "dk", "dv", "dq'", "dk'", "dv'"})
    grads.push_back(
        b.buffer(name, f, {2, 5, name[1] == 'q' ? 8 : 4}, ACTIVATION));
  auto attrs = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["heads"] = 2;
    (*inst->mutable_int_attrs())["kv_heads"] = 1;
    (*inst->mutable_int_attrs())["causal"] = 1;
    (*inst->mutable_int_attrs())["alibi"] = 1;
    (*inst->mutable_float_attrs())["scale"] = 0.5;
  };
  Function *again = b.plan.add_functions();
  again->set_name("again");
  attrs(b.add(again, ATTENTION, {q, k, v}, {out}));
  attrs(b.add(again, ATTENTION_GRAD, {q, k, v, out, dout},
              {grads[0], grads[1], grads[2]}));
  Function *keeps = b.plan.add_functions();
  keeps->set_name("keeps");
  attrs(b.add(keeps, ATTENTION, {q, k, v}, {out, lse}));
  attrs(b.add(keeps, ATTENTION_GRAD, {q, k, v, out, dout, lse},
              {grads[3], grads[4], grads[5]}));
  auto executor = exec::Executor::Create(b.plan);
  ASSERT_TRUE(executor.ok()) << executor.status();
  exec::Executor &e = **executor;
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto [id, n] : {std::pair{q, 80}, {k, 40}, {v, 40}, {dout, 80}}) {
    std::vector<double> values(n);
    for (double &x : values)
      x = u(gen);
    ASSERT_TRUE(e.Write(id, values).ok());
  }
  ASSERT_TRUE(e.Run("again", {}).ok());
  ASSERT_TRUE(e.Run("keeps", {}).ok());
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(*e.Read(grads[i]), *e.Read(grads[i + 3])) << i;
  // The kept log-sum-exp is the CPU kernel's.
  std::vector<double> qs = *e.Read(q), ks = *e.Read(k), vs = *e.Read(v);
  std::vector<double> o(80), l(20);
  cpu::AttentionShape shape{2, 5, 2, 1, 4, 0.5, true, true};
  cpu::attentionForward(qs.data(), ks.data(), vs.data(), shape, o.data(),
                        l.data());
  EXPECT_EQ(*e.Read(lse), l);
}

// Likewise cross-entropy: its gradient from the kept log-sum-exp (a second
// output, a fourth input) is exactly its gradient from one computed again.
TEST(Executor, CrossEntropyGradientReadsTheKeptLogSumExp) {
  Builder b;
  const DType f = F64;
  int logits = b.buffer("logits", f, {2, 3, 7}, INPUT);
  int targets = b.buffer("targets", I32, {2, 3}, INPUT);
  int dloss = b.buffer("dloss", f, {}, INPUT);
  int loss = b.buffer("loss", f, {}, ACTIVATION);
  int lse = b.buffer("lse", f, {2, 3}, ACTIVATION);
  int again = b.buffer("again", f, {2, 3, 7}, ACTIVATION);
  int kept = b.buffer("kept", f, {2, 3, 7}, ACTIVATION);
  auto ignore = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["ignore_index"] = -100;
  };
  Function *fn = b.plan.add_functions();
  fn->set_name("f");
  ignore(b.add(fn, CROSS_ENTROPY, {logits, targets}, {loss, lse}));
  ignore(b.add(fn, CROSS_ENTROPY_GRAD, {logits, targets, dloss}, {again}));
  ignore(b.add(fn, CROSS_ENTROPY_GRAD, {logits, targets, dloss, lse}, {kept}));
  auto executor = exec::Executor::Create(b.plan);
  ASSERT_TRUE(executor.ok()) << executor.status();
  exec::Executor &e = **executor;
  std::mt19937 gen(13);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> values(42);
  for (double &x : values)
    x = u(gen);
  ASSERT_TRUE(e.Write(logits, values).ok());
  ASSERT_TRUE(e.Write(targets, std::vector<double>{0, 6, -100, 3, 3, 1}).ok());
  ASSERT_TRUE(e.Write(dloss, std::vector<double>{1.0}).ok());
  ASSERT_TRUE(e.Run("f", {}).ok());
  EXPECT_EQ(*e.Read(again), *e.Read(kept));
  // The kept values are each row's log-sum-exp.
  std::vector<double> l = *e.Read(lse);
  for (int r = 0; r < 6; ++r) {
    double sum = 0;
    for (int c = 0; c < 7; ++c)
      sum += std::exp(values[r * 7 + c]);
    EXPECT_NEAR(l[r], std::log(sum), 1e-12) << r;
  }
}

// The arena is allocated untouched, and TouchedArenaBytes counts the pages
// the run has read or written (the operating system's count), the last page
// only up to the arena's end: three buffers of a page each, then one of 64
// bytes on a fourth page.
TEST(Executor, TouchedArenaBytesCountsThePagesTheRunUsed) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  Builder b;
  int x = b.buffer("x", F32, {page / 4}, INPUT);
  int y = b.buffer("y", F32, {page / 4}, ACTIVATION);
  int z = b.buffer("z", F32, {page / 4}, ACTIVATION);
  int t = b.buffer("t", F32, {16}, ACTIVATION);
  ASSERT_EQ(b.plan.arena_bytes(), 3 * page + 64);
  Function *fn = b.function("f");
  b.add(fn, ADD, {x, y}, {z});
  b.add(fn, ZERO, {}, {t});
  auto created = exec::Executor::Create(b.plan);
  ASSERT_TRUE(created.ok()) << created.status();
  exec::Executor &e = **created;
  EXPECT_EQ(e.ArenaBytes(), 3 * page + 64);
  EXPECT_EQ(e.TouchedArenaBytes(), 0);
  ASSERT_TRUE(e.Write(x, std::vector<double>(page / 4, 1.0)).ok());
  EXPECT_EQ(e.TouchedArenaBytes(), page);
  // A page that is only read counts too (it maps the zero page).
  EXPECT_EQ((*e.Read(y))[0], 0.0);
  EXPECT_EQ(e.TouchedArenaBytes(), 2 * page);
  // z = x + y and t = 0 write the last two pages, the last one counted only
  // up to the arena's end.
  ASSERT_TRUE(e.Run("f", {}).ok());
  EXPECT_EQ(e.TouchedArenaBytes(), 3 * page + 64);
  EXPECT_EQ((*e.Read(z))[page / 4 - 1], 1.0);
}

// The profile counts, per kernel kind, the calls Run made and their work as
// runtime/plan/Work.h counts it (what braid calibrate divides by the time);
// ResetProfile starts it again, and it is off until enabled.
TEST(Executor, ProfileCountsCallsAndWork) {
  Builder b;
  int x = b.buffer("x", F32, {4, 8}, INPUT);
  int w = b.buffer("w", F32, {8, 16}, PARAMETER);
  int y = b.buffer("y", F32, {4, 16}, ACTIVATION);
  int z = b.buffer("z", F32, {4, 16}, ACTIVATION);
  Function *fn = b.function("f");
  b.add(fn, LINEAR, {x, w}, {y})->mutable_int_attrs()->insert(
      {"transpose_w", 0});
  b.add(fn, ADD, {y, y}, {z});
  b.add(fn, ADD, {z, y}, {z});
  auto created = exec::Executor::Create(b.plan);
  ASSERT_TRUE(created.ok()) << created.status();
  exec::Executor &e = **created;
  ASSERT_TRUE(e.Run("f", {}).ok());
  EXPECT_TRUE(e.Profile().empty());
  EXPECT_TRUE(e.KernelProfiles().empty());
  e.EnableProfile();
  ASSERT_TRUE(e.Run("f", {}).ok());
  ASSERT_TRUE(e.Run("f", {}).ok());
  const auto &p = e.KernelProfiles();
  ASSERT_EQ(p.size(), size_t(Kernel_ARRAYSIZE));
  EXPECT_EQ(p[LINEAR].calls, 2);
  EXPECT_EQ(p[LINEAR].flops, 2 * (2.0 * 4 * 8 * 16));
  EXPECT_EQ(p[LINEAR].bytes, 2 * 4.0 * (4 * 8 + 8 * 16 + 4 * 16));
  EXPECT_EQ(p[ADD].calls, 4);
  EXPECT_EQ(p[ADD].flops, 4 * 64.0);
  // y + y reads y once; z + y writes z in place: two buffers each.
  EXPECT_EQ(p[ADD].bytes, 4 * 2 * 4.0 * 64);
  EXPECT_EQ(p[ZERO].calls, 0);
  EXPECT_GE(p[LINEAR].seconds, 0);
  EXPECT_EQ(e.Profile()[LINEAR], p[LINEAR].seconds);
  e.ResetProfile();
  EXPECT_EQ(e.KernelProfiles()[LINEAR].calls, 0);
  EXPECT_EQ(e.Profile()[LINEAR], 0);
  ASSERT_TRUE(e.Run("f", {}).ok());
  EXPECT_EQ(e.KernelProfiles()[ADD].calls, 2);
}

// With pipeline stages, a rank allocates its own stage's arena and refuses
// the buffers and functions of the other stages, which lie outside it.
TEST(Executor, ARankHoldsItsStagesArena) {
  exec_test::TinyModel model;
  Plan plan = exec_test::tinyPipelinePlan(model, "1f1b");
  ASSERT_NE(plan.pipeline().stages(0).arena_bytes(),
            plan.pipeline().stages(1).arena_bytes());
  auto created = exec::Executor::Create(plan); // no other ranks: stage 0
  ASSERT_TRUE(created.ok()) << created.status();
  exec::Executor &e = **created;
  EXPECT_EQ(e.Stage(), 0);
  EXPECT_EQ(e.ArenaBytes(), plan.pipeline().stages(0).arena_bytes());
  int head = e.FindBuffer("lm_head.weight", 1);
  ASSERT_GE(head, 0);
  absl::Status s =
      e.Write(head, std::vector<double>(model.vocab * model.hidden));
  EXPECT_EQ(s.message(),
            "buffer 'lm_head.weight' belongs to pipeline stage 1, which other "
            "ranks run; this rank runs stage 0 and holds only its arena");
  EXPECT_FALSE(e.Read(head).ok());
  s = e.Run("s1.zero_grads", {});
  EXPECT_EQ(s.message(),
            "function 's1.zero_grads': buffer 'lm_head.weight.grad' belongs to "
            "pipeline stage 1, which other ranks run; this rank runs stage 0 "
            "and holds only its arena");
  EXPECT_TRUE(e.Run("s0.zero_grads", {}).ok());
}

} // namespace

namespace {

/// Sums into the buffer what it would receive from `ranks - 1` more ranks
/// holding the same values: a stand-in for the job's other ranks.
class FakeCommunicator : public exec::Communicator {
public:
  explicit FakeCommunicator(int64_t ranks) : ranks(ranks) {}
  int64_t Rank() const override { return 0; }
  const std::vector<int64_t> &Coordinates() const override { return coords; }
  absl::Status AllReduce(absl::Span<const std::string> axes, void *data,
                         int64_t count, DType dtype,
                         exec::Reduction op) override {
    if (op == exec::Reduction::kMax) // the same values everywhere
      return absl::OkStatus();
    groups.push_back(std::vector<std::string>(axes.begin(), axes.end()));
    for (int64_t i = 0; i < count; ++i)
      static_cast<double *>(data)[i] *= double(ranks);
    return absl::OkStatus();
  }
  absl::Status AllGather(absl::Span<const std::string>, const void *, void *,
                         int64_t, DType) override {
    return absl::UnimplementedError("not used here");
  }
  absl::Status ReduceScatter(absl::Span<const std::string>, const void *,
                             void *, int64_t, DType) override {
    return absl::UnimplementedError("not used here");
  }
  int64_t ranks;
  std::vector<int64_t> coords = {0};
  std::vector<std::vector<std::string>> groups;
};

// ALL_REDUCE: a copy when its group is one rank, a sum through the
// communicator over the group it names otherwise, and an error when a
// multi-rank group has no communicator.
TEST(Executor, AllReduce) {
  for (int64_t dp : {1, 2}) {
    Builder b;
    b.plan.mutable_mesh()->set_sizes(0, dp);
    int x = b.buffer("x", F64, {3}, GRADIENT);
    int y = b.buffer("y", F64, {3}, ACTIVATION);
    Function *fn = b.plan.add_functions();
    fn->set_name("f");
    b.add(fn, ALL_REDUCE, {x, x}, {x, y})->add_group("dp");
    FakeCommunicator comm(dp);
    auto e = exec::Executor::Create(b.plan, &comm);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE((*e)->Write(x, {1, 2, 3}).ok());
    ASSERT_TRUE((*e)->Run("f", {}).ok());
    EXPECT_EQ(*(*e)->Read(x), std::vector<double>({1. * dp, 2. * dp, 3. * dp}));
    // y is the copy of x summed again: the second pair reads x after the first.
    EXPECT_EQ(*(*e)->Read(y), std::vector<double>({1. * dp * dp, 2. * dp * dp,
                                                   3. * dp * dp}));
    EXPECT_EQ(comm.groups.size(), dp > 1 ? 2u : 0u);
    if (dp > 1) {
      EXPECT_EQ(comm.groups[0], std::vector<std::string>({"dp"}));
      auto alone = exec::Executor::Create(b.plan);
      ASSERT_TRUE(alone.ok());
      absl::Status s = (*alone)->Run("f", {});
      EXPECT_NE(s.message().find("an all-reduce over 2 ranks needs the job's "
                                 "other ranks"),
                absl::string_view::npos)
          << s;
    }
  }
}

} // namespace

namespace {

// A kernel on one rank's slice reads the rank's coordinate along its
// rank_axis: the attention of tp rank 1 of 2 takes query heads 2-3 of 4
// (ALiBi slopes of those heads, the one kv head replicated), and a
// row-parallel linear adds half its bias.
TEST(Executor, SlicesTakeTheRanksCoordinate) {
  Builder b;
  b.plan.mutable_mesh()->set_axes(0, "tp");
  b.plan.mutable_mesh()->set_sizes(0, 2);
  int q = b.buffer("q", F64, {1, 3, 8}, ACTIVATION);
  int k = b.buffer("k", F64, {1, 3, 4}, ACTIVATION);
  int v = b.buffer("v", F64, {1, 3, 4}, ACTIVATION);
  int out = b.buffer("out", F64, {1, 3, 8}, ACTIVATION);
  int w = b.buffer("w", F64, {2, 8}, PARAMETER);
  int bias = b.buffer("bias", F64, {2}, PARAMETER);
  int y = b.buffer("y", F64, {1, 3, 2}, ACTIVATION);
  Function *fn = b.plan.add_functions();
  fn->set_name("f");
  Instruction *a = b.add(fn, ATTENTION, {q, k, v}, {out});
  a->set_rank_axis("tp");
  auto &ints = *a->mutable_int_attrs();
  ints["heads"] = 2;
  ints["kv_heads"] = 1;
  ints["causal"] = 1;
  ints["alibi"] = 1;
  ints["global_heads"] = 4;
  ints["global_kv_heads"] = 1;
  ints["head_offset_stride"] = 2;
  ints["kv_head_offset_stride"] = 0;
  (*a->mutable_float_attrs())["scale"] = 0.5;
  Instruction *lin = b.add(fn, LINEAR, {out, w, bias}, {y});
  (*lin->mutable_int_attrs())["transpose_w"] = 1;
  (*lin->mutable_float_attrs())["bias_scale"] = 0.5;

  FakeCommunicator comm(2);
  comm.coords = {1};
  auto e = exec::Executor::Create(b.plan, &comm);
  ASSERT_TRUE(e.ok()) << e.status();
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<std::vector<double>> in;
  for (int id : {q, k, v, w, bias}) {
    std::vector<double> x((*e)->Read(id)->size());
    for (double &z : x)
      z = u(gen);
    ASSERT_TRUE((*e)->Write(id, x).ok());
    in.push_back(x);
  }
  ASSERT_TRUE((*e)->Run("f", {}).ok());

  cpu::AttentionShape s{1, 3, 2, 1, 4, 0.5, true, true};
  s.headOffset = 2;
  s.globalHeads = 4;
  s.globalKvHeads = 1;
  std::vector<double> want(24), lse(6);
  cpu::attentionForward(in[0].data(), in[1].data(), in[2].data(), s,
                        want.data(), lse.data());
  EXPECT_EQ(*(*e)->Read(out), want);
  // With rank 0's heads the result differs: the slopes are others.
  s.headOffset = 0;
  std::vector<double> rank0(24);
  cpu::attentionForward(in[0].data(), in[1].data(), in[2].data(), s,
                        rank0.data(), lse.data());
  EXPECT_NE(rank0, want);
  std::vector<double> yWant(6);
  for (int r = 0; r < 3; ++r)
    for (int o = 0; o < 2; ++o) {
      double acc = 0;
      for (int c = 0; c < 8; ++c)
        acc += want[r * 8 + c] * in[3][o * 8 + c];
      yWant[r * 2 + o] = acc + 0.5 * in[4][o];
    }
  std::vector<double> yGot = *(*e)->Read(y);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(yGot[i], yWant[i], 1e-12);

  // Slices are offsets by the coordinates: a communicator whose coordinates
  // are not a rank of the plan's mesh is refused.
  for (std::vector<int64_t> coords :
       {std::vector<int64_t>{2}, {-1}, {0, 0}, {}}) {
    comm.coords = coords;
    auto bad = exec::Executor::Create(b.plan, &comm);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(
                  ") are not a rank of the plan's mesh (sizes 2)"),
              absl::string_view::npos)
        << bad.status();
  }
}

} // namespace
