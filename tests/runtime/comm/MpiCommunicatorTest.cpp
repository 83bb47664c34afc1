//===- MpiCommunicatorTest.cpp - Collectives on a 2 x 2 mesh --------------===//
//
// Run by CTest under `mpirun -np 4`: each rank checks what it receives from
// the others, group by group, against values derived from the ranks'
// numbers. Any failing rank fails the job.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/MpiCommunicator.h"
#include "tests/runtime/comm/MpiTestMain.h"
#include "runtime/common/Float16.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include "tests/runtime/exec/PlanBuilder.h"

#include "gtest/gtest.h"

#include <cmath>
#include <memory>
#include <random>

using namespace braid;

namespace {

std::unique_ptr<comm::MpiCommunicator> theComm;

plan::Plan meshPlan() {
  plan::Plan plan;
  plan.set_version(plan::SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("dp");
  plan.mutable_mesh()->add_sizes(2);
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(2);
  return plan;
}

// Ranks 0..3 are (dp, tp) = (0,0), (0,1), (1,0), (1,1): tp is the minor axis.
TEST(MpiCommunicator, CoordinatesAreRowMajor) {
  int64_t r = theComm->Rank();
  EXPECT_EQ(theComm->Coordinates(), std::vector<int64_t>({r / 2, r % 2}));
}

// A sum over tp adds the two ranks of a dp coordinate; over dp, the two of a
// tp coordinate; over both, all four.
TEST(MpiCommunicator, AllReducesOverTheNamedAxes) {
  int64_t r = theComm->Rank(), d = r / 2, t = r % 2;
  auto sum = [&](std::vector<std::string> axes) {
    std::vector<double> x = {double(r + 1), 10.0 * (r + 1)};
    EXPECT_TRUE(theComm->AllReduce(axes, x.data(), 2, plan::F64).ok());
    return x;
  };
  // tp group of rank r: ranks 2d and 2d+1.
  EXPECT_EQ(sum({"tp"}), std::vector<double>({double(4 * d + 3), 10.0 * (4 * d + 3)}));
  // dp group: ranks t and t+2.
  EXPECT_EQ(sum({"dp"}), std::vector<double>({double(2 * t + 4), 10.0 * (2 * t + 4)}));
  EXPECT_EQ(sum({"dp", "tp"}), std::vector<double>({10.0, 100.0}));
  // The maximum over tp is the rank with the larger tp coordinate.
  double m = double(r);
  ASSERT_TRUE(theComm->AllReduce({"tp"}, &m, 1, plan::F64, exec::Reduction::kMax).ok());
  EXPECT_EQ(m, double(2 * d + 1));
  std::vector<float> f = {float(r)};
  ASSERT_TRUE(theComm->AllReduce({"tp"}, f.data(), 1, plan::F32).ok());
  EXPECT_EQ(f[0], float(4 * d + 1));
}

// Sums started and left in flight (the gradients' buckets of the last
// micro-batch): two at once over different groups, a blocking sum over tp
// while they run, then waited for in the other order; each as the blocking
// sum would give. A handle is spent once waited for.
TEST(MpiCommunicator, AllReducesInFlight) {
  int64_t r = theComm->Rank(), d = r / 2, t = r % 2;
  std::vector<float> overDp = {float(r + 1), 10.0f * (r + 1)};
  std::vector<double> overBoth = {double(r)};
  absl::StatusOr<int64_t> a =
      theComm->StartAllReduce({"dp"}, overDp.data(), 2, plan::F32);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<int64_t> b =
      theComm->StartAllReduce({"dp", "tp"}, overBoth.data(), 1, plan::F64);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, *b);
  double meanwhile = double(r);
  ASSERT_TRUE(theComm->AllReduce({"tp"}, &meanwhile, 1, plan::F64).ok());
  EXPECT_EQ(meanwhile, double(4 * d + 1));
  ASSERT_TRUE(theComm->Wait(*b).ok());
  ASSERT_TRUE(theComm->Wait(*a).ok());
  EXPECT_EQ(overBoth[0], 6.0);
  EXPECT_EQ(overDp,
            std::vector<float>({float(2 * t + 4), 10.0f * (2 * t + 4)}));
  absl::StatusOr<bool> spent = theComm->Test(*a);
  ASSERT_TRUE(spent.ok());
  EXPECT_TRUE(*spent);
}

// A gather over tp returns the group's contributions in tp order.
TEST(MpiCommunicator, AllGatherIsInAxisOrder) {
  int64_t r = theComm->Rank(), d = r / 2;
  std::vector<double> mine = {double(r), double(100 + r)}, all(4);
  ASSERT_TRUE(theComm->AllGather({"tp"}, mine.data(), all.data(), 2, plan::F64).ok());
  EXPECT_EQ(all, std::vector<double>({double(2 * d), 100.0 + 2 * d,
                                      double(2 * d + 1), 101.0 + 2 * d}));
}

TEST(MpiCommunicator, RefusesIntegerDtypes) {
  int32_t x = 1;
  absl::Status s = theComm->AllReduce({"tp"}, &x, 1, plan::I32);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  int32_t in[2] = {1, 2}, out = 0;
  s = theComm->ReduceScatter({"tp"}, in, &out, 1, plan::I32);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find(
                "collectives on I32 on MPI (expected F32, F64, BF16 or F16)"),
            absl::string_view::npos)
      << s;
}

// BF16 and F16 (the CUDA backend's mixed precision): sums in float rounded
// to the format, maxima, reduce-scatters and gathers of the 16-bit words.
// Rank g contributes 1 + g/256 on tp (group 2d, 2d+1). f16 holds the
// contributions and their sum 2 + (4d + 1)/256 exactly; bf16 (8 significant
// bits) rounds the odd contributions, then the sum, each to nearest even.
TEST(MpiCommunicator, ReducesHalfPrecision) {
  int64_t r = theComm->Rank(), d = r / 2, t = r % 2;
  for (plan::DType dtype : {plan::BF16, plan::F16}) {
    bool bf = dtype == plan::BF16;
    auto enc = [&](float v) { return bf ? floatToBfloat16(v) : floatToHalf(v); };
    auto dec = [&](uint16_t v) {
      return bf ? bfloat16ToFloat(v) : halfToFloat(v);
    };
    uint16_t x = enc(1.0f + float(r) / 256);
    // Each contribution is exact in f16 (11 bits); in bf16 1 + g/256 is a
    // multiple of 2^-7 only for even g, so the operands round first.
    float a = dec(enc(1.0f + float(2 * d) / 256)),
          b = dec(enc(1.0f + float(2 * d + 1) / 256));
    ASSERT_TRUE(theComm->AllReduce({"tp"}, &x, 1, dtype).ok());
    EXPECT_EQ(dec(x), dec(enc(a + b))) << plan::DType_Name(dtype);
    if (!bf) {
      EXPECT_EQ(dec(x), 2.0f + float(4 * d + 1) / 256);
    }
    uint16_t m = enc(-float(r));
    ASSERT_TRUE(
        theComm->AllReduce({"dp", "tp"}, &m, 1, dtype, exec::Reduction::kMax)
            .ok());
    EXPECT_EQ(dec(m), 0.0f);
    uint16_t in[2] = {enc(float(r)), enc(float(10 * r))}, out = 0;
    ASSERT_TRUE(theComm->ReduceScatter({"tp"}, in, &out, 1, dtype).ok());
    EXPECT_EQ(dec(out), t == 0 ? float(4 * d + 1) : float(10 * (4 * d + 1)));
    uint16_t all[2] = {0, 0}, mine = enc(float(r) + 0.5f);
    ASSERT_TRUE(theComm->AllGather({"tp"}, &mine, all, 1, dtype).ok());
    EXPECT_EQ(dec(all[0]), float(2 * d) + 0.5f);
    EXPECT_EQ(dec(all[1]), float(2 * d + 1) + 0.5f);
  }
}

// A reduce-scatter sums the group's inputs and leaves each rank the block
// of its place in the group (row-major over the group's axes). Rank g sends
// 10 g + i as its element i.
TEST(MpiCommunicator, ReduceScattersOverTheNamedAxes) {
  int64_t r = theComm->Rank(), d = r / 2, t = r % 2;
  auto scatter = [&](std::vector<std::string> axes, int64_t perRank) {
    std::vector<double> in(4), out(perRank, -1);
    for (int64_t i = 0; i < 4; ++i)
      in[i] = 10.0 * r + i;
    absl::Status s =
        theComm->ReduceScatter(axes, in.data(), out.data(), perRank, plan::F64);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  };
  // tp: ranks 2d and 2d+1; rank t of the group gets elements 2t and 2t+1.
  EXPECT_EQ(scatter({"tp"}, 2),
            std::vector<double>({10.0 * (4 * d + 1) + 2 * (2 * t),
                                 10.0 * (4 * d + 1) + 2 * (2 * t + 1)}));
  // dp: ranks t and t+2; rank d of the group gets elements 2d and 2d+1.
  EXPECT_EQ(scatter({"dp"}, 2),
            std::vector<double>({10.0 * (2 * t + 2) + 2 * (2 * d),
                                 10.0 * (2 * t + 2) + 2 * (2 * d + 1)}));
  // Both axes: 4 ranks, rank r is place r (dp major) and gets element r.
  EXPECT_EQ(scatter({"tp", "dp"}, 1), std::vector<double>({60.0 + 4 * r}));
  std::vector<float> in = {float(r), float(r) + 0.5f}, out(1);
  ASSERT_TRUE(
      theComm->ReduceScatter({"tp"}, in.data(), out.data(), 1, plan::F32).ok());
  EXPECT_EQ(out[0], t == 0 ? float(4 * d + 1) : float(4 * d + 2));
}

// The executor's tensor-parallel kernels through MPI: each tp rank holds 4
// of the 8 vocabulary columns, and its loss, lse and logit gradients must be
// the whole-vocabulary kernels' on its dp group's logits; GRAD_NORM over tp
// (one split gradient, one replicated) must be the norm of the whole
// gradient. Every rank derives every rank's values from the same seeds.
TEST(MpiCommunicator, ExecutorRunsTensorParallelKernels) {
  using namespace braid::plan;
  const int64_t d = theComm->Coordinates()[0], t = theComm->Coordinates()[1];
  const int64_t rows = 6, vocab = 8, local = 4;
  constexpr int64_t kIgnore = -100;
  exec_test::PlanBuilder b;
  b.plan = meshPlan();
  int logits = b.buffer("logits", F64, {2, 3, local}, ACTIVATION);
  int targets = b.buffer("targets", I32, {2, 3}, INPUT);
  int rowMax = b.buffer("row_max", F64, {2, 3}, WORKSPACE);
  int partial = b.buffer("partial", F64, {2, 3, 2}, WORKSPACE);
  int loss = b.buffer("loss", F64, {}, ACTIVATION);
  int lse = b.buffer("lse", F64, {2, 3}, WORKSPACE);
  int dloss = b.buffer("dloss", F64, {}, INPUT);
  int dlogits = b.buffer("dlogits", F64, {2, 3, local}, ACTIVATION);
  int split = b.buffer("split", F64, {3}, GRADIENT);
  int replicated = b.buffer("replicated", F64, {2}, GRADIENT);
  int norm = b.buffer("norm", F64, {}, WORKSPACE);
  int scale = b.buffer("scale", F64, {}, WORKSPACE);
  auto attrs = [](Instruction *inst, bool slice) {
    (*inst->mutable_int_attrs())["ignore_index"] = kIgnore;
    if (slice) {
      inst->set_rank_axis("tp");
      (*inst->mutable_int_attrs())["vocab_start_stride"] = 4;
    }
  };
  Function *fn = b.function("step");
  b.add(fn, CROSS_ENTROPY_MAX, {logits}, {rowMax});
  Instruction *max = b.add(fn, ALL_REDUCE, {rowMax}, {rowMax});
  max->add_group("tp");
  (*max->mutable_int_attrs())["max"] = 1;
  attrs(b.add(fn, CROSS_ENTROPY_PARTIAL, {logits, targets, rowMax}, {partial}),
        true);
  b.add(fn, ALL_REDUCE, {partial}, {partial})->add_group("tp");
  attrs(b.add(fn, CROSS_ENTROPY_FINISH, {partial, rowMax, targets},
              {loss, lse}),
        false);
  attrs(b.add(fn, CROSS_ENTROPY_GRAD, {logits, targets, dloss, lse},
              {dlogits}),
        true);
  Instruction *gn = b.add(fn, GRAD_NORM, {split, replicated}, {norm, scale});
  gn->add_group("tp");
  (*gn->mutable_int_attrs())["split_inputs"] = 1;
  (*gn->mutable_float_attrs())["max_norm"] = 1.0;
  auto created = exec::Executor::Create(b.plan, theComm.get());
  ASSERT_TRUE(created.ok()) << created.status();
  exec::Executor &e = **created;

  auto values = [](int64_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> u(-3, 3);
    std::vector<double> v(n);
    for (double &x : v)
      x = u(gen);
    return v;
  };
  std::vector<double> whole = values(rows * vocab, 100 + d), mine(rows * local);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < local; ++c)
      mine[r * local + c] = whole[r * vocab + t * local + c];
  std::vector<int32_t> ti = {2, 7, int32_t(kIgnore), 4, 0, int32_t(kIgnore)};
  ASSERT_TRUE(e.Write(logits, mine).ok());
  ASSERT_TRUE(e.Write(targets, std::vector<double>(ti.begin(), ti.end())).ok());
  ASSERT_TRUE(e.Write(dloss, {1.0}).ok());
  ASSERT_TRUE(e.Write(split, values(3, 200 + 2 * d + t)).ok());
  ASSERT_TRUE(e.Write(replicated, values(2, 300 + d)).ok());
  absl::Status s = e.Run("step", {});
  ASSERT_TRUE(s.ok()) << s;

  std::vector<double> wantLse(rows), wantGrad(rows * vocab);
  int64_t counted = 0;
  double wantLoss = cpu::crossEntropyForward(whole.data(), ti.data(), rows,
                                             vocab, kIgnore, wantLse.data(),
                                             &counted);
  cpu::crossEntropyBackward(whole.data(), ti.data(), wantLse.data(), 1.0, rows,
                            vocab, kIgnore, counted, wantGrad.data());
  EXPECT_NEAR((*e.Read(loss))[0], wantLoss, 1e-12 * std::fabs(wantLoss));
  std::vector<double> gotLse = *e.Read(lse), gotGrad = *e.Read(dlogits);
  for (int64_t r = 0; r < rows; ++r) {
    if (ti[r] != kIgnore) {
      EXPECT_NEAR(gotLse[r], wantLse[r], 1e-12 * std::fabs(wantLse[r]));
    }
    for (int64_t c = 0; c < local; ++c)
      EXPECT_NEAR(gotGrad[r * local + c], wantGrad[r * vocab + t * local + c],
                  1e-12);
  }
  double total = 0;
  for (int64_t k = 0; k < 2; ++k)
    for (double x : values(3, 200 + 2 * d + k))
      total += x * x;
  for (double x : values(2, 300 + d))
    total += x * x;
  double want = std::sqrt(total);
  EXPECT_NEAR((*e.Read(norm))[0], want, 1e-12 * want);
  absl::StatusOr<cpu::GradClip> clip = cpu::computeGradClip(want, 1.0);
  ASSERT_TRUE(clip.ok());
  EXPECT_NEAR((*e.Read(scale))[0], clip->scale, 1e-12);
}

// The sequence-parallel kernels through MPI: ALL_GATHER over tp along the
// sequence of [2, 3, 2]; REDUCE_SCATTER over both axes (4 ranks) along the
// sequence of [2, 8, 1]; an ALL_GATHER over dp and a REDUCE_SCATTER over tp
// whose x and y share arena bytes; and, on tp's slice of the sequence,
// POSITION_EMBEDDING, POSITION_EMBEDDING_GRAD and DROPOUT, which must equal
// the whole sequence's kernels. Expected values are written out from the
// ranks' coordinates.
TEST(MpiCommunicator, ExecutorRunsSequenceParallelKernels) {
  using namespace braid::plan;
  const int64_t r = theComm->Rank();
  const int64_t d = theComm->Coordinates()[0], t = theComm->Coordinates()[1];
  exec_test::PlanBuilder b;
  b.plan = meshPlan();
  int xa = b.buffer("xa", F64, {2, 3, 2}, ACTIVATION);
  int ya = b.buffer("ya", F64, {2, 6, 2}, ACTIVATION);
  int wb = b.buffer("wb", F64, {2, 8, 1}, ACTIVATION);
  int vb = b.buffer("vb", F64, {2, 2, 1}, ACTIVATION);
  int xc = b.buffer("xc", F64, {1, 3}, ACTIVATION);
  int yc = b.buffer("yc", F64, {2, 3}, ACTIVATION);
  int xd = b.buffer("xd", F64, {4}, ACTIVATION);
  int yd = b.buffer("yd", F64, {2}, ACTIVATION);
  // yc over xc, yd over the middle of xd: 64-byte slots hold both.
  b.plan.mutable_buffers(yc)->set_offset(b.plan.buffers(xc).offset());
  b.plan.mutable_buffers(yd)->set_offset(b.plan.buffers(xd).offset() + 8);
  int table = b.buffer("table", F64, {8, 2}, PARAMETER);
  int ids = b.buffer("ids", I32, {2, 6}, INPUT);
  int pos = b.buffer("pos", F64, {2, 3, 2}, ACTIVATION);
  int dpos = b.buffer("dpos", F64, {2, 3, 2}, ACTIVATION);
  int dtable = b.buffer("dtable", F64, {8, 2}, GRADIENT);
  int xe = b.buffer("xe", F64, {2, 3, 2}, ACTIVATION);
  int ye = b.buffer("ye", F64, {2, 3, 2}, ACTIVATION);
  Function *fn = b.function("step");
  auto collective = [&](Kernel k, int in, int out,
                        std::vector<std::string> group, int64_t dim) {
    Instruction *inst = b.add(fn, k, {in}, {out});
    for (const std::string &axis : group)
      inst->add_group(axis);
    (*inst->mutable_int_attrs())["dim"] = dim;
  };
  collective(ALL_GATHER, xa, ya, {"tp"}, 1);
  collective(REDUCE_SCATTER, wb, vb, {"dp", "tp"}, 1);
  collective(ALL_GATHER, xc, yc, {"dp"}, 0);
  collective(REDUCE_SCATTER, xd, yd, {"tp"}, 0);
  auto slice = [](Instruction *inst, const char *attr, int64_t stride) {
    inst->set_rank_axis("tp");
    (*inst->mutable_int_attrs())[attr] = stride;
    return inst;
  };
  slice(b.add(fn, POSITION_EMBEDDING, {table, ids}, {pos}), "seq_start_stride",
        3);
  slice(b.add(fn, POSITION_EMBEDDING_GRAD, {dpos}, {dtable}),
        "seq_start_stride", 3);
  Instruction *drop =
      slice(b.add(fn, DROPOUT, {xe}, {ye}), "col_offset_stride", 3 * 2);
  (*drop->mutable_float_attrs())["rate"] = 0.5;
  (*drop->mutable_int_attrs())["rng_id"] = 3;
  absl::StatusOr<Plan> loaded = ParsePlanFile(SerializePlanFile(b.plan), "sp");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto created = exec::Executor::Create(*loaded, theComm.get());
  ASSERT_TRUE(created.ok()) << created.status();
  exec::Executor &e = **created;

  auto values = [](int64_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> u(0.5, 3);
    std::vector<double> v(n);
    for (double &x : v)
      x = u(gen);
    return v;
  };
  std::vector<double> in;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t c = 0; c < 2; ++c)
        in.push_back(10000.0 * d + 1000.0 * t + 100.0 * a + 10.0 * s + c);
  ASSERT_TRUE(e.Write(xa, in).ok());
  in.clear();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t s = 0; s < 8; ++s)
      in.push_back((r + 1) * (100.0 * a + 10.0 * s));
  ASSERT_TRUE(e.Write(wb, in).ok());
  ASSERT_TRUE(e.Write(xc, {10.0 * r, 10.0 * r + 1, 10.0 * r + 2}).ok());
  ASSERT_TRUE(
      e.Write(xd, {10.0 * r, 10.0 * r + 1, 10.0 * r + 2, 10.0 * r + 3}).ok());
  std::vector<double> tableValues = values(16, 7);
  ASSERT_TRUE(e.Write(table, tableValues).ok());
  ASSERT_TRUE(e.Write(ids, std::vector<double>(12, 0)).ok());
  // dp rank d's whole-sequence dy and x, [2, 6, 2]; tp rank t holds
  // positions [3t, 3t + 3).
  std::vector<double> wholeDy = values(24, 20 + d), wholeX = values(24, 30 + d);
  auto sequenceSlice = [&](const std::vector<double> &m) {
    std::vector<double> out;
    for (int64_t a = 0; a < 2; ++a)
      out.insert(out.end(), m.begin() + a * 12 + t * 6,
                 m.begin() + a * 12 + t * 6 + 6);
    return out;
  };
  ASSERT_TRUE(e.Write(dpos, sequenceSlice(wholeDy)).ok());
  ASSERT_TRUE(e.Write(xe, sequenceSlice(wholeX)).ok());
  exec::StepContext context{99, 2, 4};
  absl::Status s = e.Run("step", context);
  ASSERT_TRUE(s.ok()) << s;

  std::vector<double> want;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t s = 0; s < 6; ++s)
      for (int64_t c = 0; c < 2; ++c)
        want.push_back(10000.0 * d + 1000.0 * (s / 3) + 100.0 * a +
                       10.0 * (s % 3) + c);
  EXPECT_EQ(*e.Read(ya), want);
  // The sum over the 4 ranks is 10 x (100 a + 10 s); rank r holds s in
  // [2r, 2r + 2).
  want.clear();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t j = 0; j < 2; ++j)
      want.push_back(10 * (100.0 * a + 10.0 * (2 * r + j)));
  EXPECT_EQ(*e.Read(vb), want);
  // dp group of rank r: ranks t and t + 2.
  EXPECT_EQ(
      *e.Read(yc),
      std::vector<double>({10.0 * t, 10.0 * t + 1, 10.0 * t + 2, 10.0 * (t + 2),
                           10.0 * (t + 2) + 1, 10.0 * (t + 2) + 2}));
  // tp group: ranks 2d and 2d + 1 send 10 g + i; rank t gets i = 2t, 2t + 1.
  EXPECT_EQ(*e.Read(yd),
            std::vector<double>({10.0 * (4 * d + 1) + 2 * (2 * t),
                                 10.0 * (4 * d + 1) + 2 * (2 * t + 1)}));
  // Positions 3t .. 3t + 2 of the table, and their gradient rows.
  want.clear();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t h = 0; h < 2; ++h)
        want.push_back(tableValues[(3 * t + j) * 2 + h]);
  EXPECT_EQ(*e.Read(pos), want);
  std::vector<double> wantDtable(16, 0.0);
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t h = 0; h < 2; ++h)
      wantDtable[(3 * t + j) * 2 + h] =
          wholeDy[(3 * t + j) * 2 + h] + wholeDy[12 + (3 * t + j) * 2 + h];
  EXPECT_EQ(*e.Read(dtable), wantDtable);
  // Dropout: the whole sequence's mask, sliced.
  std::vector<double> wholeY(24);
  cpu::dropoutForward(wholeX.data(), {2, 12, 12, 4, 0}, 0.5, {99, 2, 3},
                      wholeY.data());
  EXPECT_EQ(*e.Read(ye), sequenceSlice(wholeY));
}

} // namespace

int main(int argc, char **argv) {
  return braid::comm_test::RunMpiTests(argc, argv, meshPlan(), theComm);
}
