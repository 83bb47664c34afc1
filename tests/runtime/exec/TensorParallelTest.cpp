//===- TensorParallelTest.cpp - Plans on tensor-parallel ranks ------------===//
//
// The runtime side of tensor parallelism as a plan drives it: the
// vocabulary-parallel embedding and cross-entropy (CROSS_ENTROPY_MAX,
// CROSS_ENTROPY_PARTIAL, CROSS_ENTROPY_FINISH and CROSS_ENTROPY_GRAD with the
// global lse), GRAD_NORM over a group, and sequence parallelism (ALL_GATHER,
// REDUCE_SCATTER, position embedding and dropout on a slice of the
// sequence). Two tp ranks run as two executors on two threads whose
// collectives meet in a shared exchange; what they
// compute must equal the whole-vocabulary (whole-tensor) kernels of
// Kernels.h run on the concatenated slices, or sums written out here.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include "PlanBuilder.h"
#include "TwoRanks.h"

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

using namespace braid;
using namespace braid::plan;

namespace {

using Builder = exec_test::PlanBuilder;
constexpr int64_t kIgnore = -100;

using exec_test::PairCommunicator;
using exec_test::PairExchange;
using exec_test::TwoRanks;

Plan tpMesh(Plan plan) {
  plan.mutable_mesh()->set_axes(0, "tp");
  plan.mutable_mesh()->set_sizes(0, 2);
  return plan;
}

/// n values drawn from [lo, hi), rounded to T (so that the plan's buffers
/// hold them exactly).
template <typename T>
std::vector<double> randomValues(int64_t n, double lo, double hi,
                                 unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double &x : v)
    x = double(T(u(gen)));
  return v;
}

template <typename T> std::vector<T> as(const std::vector<double> &v) {
  return std::vector<T>(v.begin(), v.end());
}

/// Columns [c0, c0 + n) of the [rows, cols] matrix m.
std::vector<double> columns(const std::vector<double> &m, int64_t rows,
                            int64_t cols, int64_t c0, int64_t n) {
  std::vector<double> out(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(m.data() + r * cols + c0, n, out.data() + r * n);
  return out;
}

template <typename T> constexpr DType dtypeOf() {
  return std::is_same_v<T, double> ? F64 : F32;
}
/// Relative tolerance against the whole-tensor kernels: the two ranks' sums
/// of exponentials are rounded to T and added, which the whole kernel does
/// not do.
template <typename T> constexpr double tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-6;
}

template <typename T> class TensorParallel : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(TensorParallel, Types);

//===-- Cross-entropy on one rank -----------------------------------------===//

// On one rank (no communicator, identity all-reduces over a group of one),
// MAX -> ALL_REDUCE(max) -> PARTIAL -> ALL_REDUCE -> FINISH is CROSS_ENTROPY,
// and CROSS_ENTROPY_GRAD with that lse is the 3-input gradient; with the lse
// of crossEntropyForward it is the same bits. Ignored targets included, and
// the results are the same on 1 and 4 threads.
TYPED_TEST(TensorParallel, CrossEntropyPipelineOnOneRank) {
  using T = TypeParam;
  const DType f = dtypeOf<T>();
  const int64_t rows = 6, vocab = 7;
  Builder b;
  int logits = b.buffer("logits", f, {2, 3, vocab}, ACTIVATION);
  int targets = b.buffer("targets", I32, {2, 3}, INPUT);
  int rowMax = b.buffer("row_max", f, {2, 3}, WORKSPACE);
  int globalMax = b.buffer("global_max", f, {2, 3}, WORKSPACE);
  int partial = b.buffer("partial", f, {2, 3, 2}, WORKSPACE);
  int summed = b.buffer("summed", f, {2, 3, 2}, WORKSPACE);
  int loss = b.buffer("loss", f, {}, ACTIVATION);
  int lse = b.buffer("lse", f, {2, 3}, WORKSPACE);
  int dloss = b.buffer("dloss", f, {}, INPUT);
  int dlogits = b.buffer("dlogits", f, {2, 3, vocab}, ACTIVATION);
  int refLoss = b.buffer("ref_loss", f, {}, ACTIVATION);
  int refDlogits = b.buffer("ref_dlogits", f, {2, 3, vocab}, ACTIVATION);
  int givenLse = b.buffer("given_lse", f, {2, 3}, INPUT);
  int givenDlogits = b.buffer("given_dlogits", f, {2, 3, vocab}, ACTIVATION);
  auto ignore = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["ignore_index"] = kIgnore;
  };
  Function *fn = b.function("split");
  b.add(fn, CROSS_ENTROPY_MAX, {logits}, {rowMax});
  Instruction *max = b.add(fn, ALL_REDUCE, {rowMax}, {globalMax});
  max->add_group("dp");
  (*max->mutable_int_attrs())["max"] = 1;
  ignore(b.add(fn, CROSS_ENTROPY_PARTIAL, {logits, targets, globalMax},
               {partial}));
  b.add(fn, ALL_REDUCE, {partial}, {summed})->add_group("dp");
  ignore(b.add(fn, CROSS_ENTROPY_FINISH, {summed, globalMax, targets},
               {loss, lse}));
  ignore(b.add(fn, CROSS_ENTROPY_GRAD, {logits, targets, dloss, lse},
               {dlogits}));
  Function *ref = b.function("whole");
  ignore(b.add(ref, CROSS_ENTROPY, {logits, targets}, {refLoss}));
  ignore(b.add(ref, CROSS_ENTROPY_GRAD, {logits, targets, dloss}, {refDlogits}));
  ignore(b.add(ref, CROSS_ENTROPY_GRAD, {logits, targets, dloss, givenLse},
               {givenDlogits}));

  absl::StatusOr<Plan> loaded = ParsePlanFile(SerializePlanFile(b.plan), "p");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto created = exec::Executor::Create(*loaded);
  ASSERT_TRUE(created.ok()) << created.status();
  exec::Executor &e = **created;

  std::vector<double> x = randomValues<T>(rows * vocab, -4, 4, 11);
  std::vector<double> t = {3, double(kIgnore), 0, 6, double(kIgnore), 2};
  ASSERT_TRUE(e.Write(logits, x).ok());
  ASSERT_TRUE(e.Write(targets, t).ok());
  ASSERT_TRUE(e.Write(dloss, {0.75}).ok());
  // The lse of the whole-row kernel, for the 4-input gradient.
  std::vector<int32_t> ti(t.begin(), t.end());
  std::vector<T> wholeLse(rows);
  int64_t counted = 0;
  cpu::crossEntropyForward(as<T>(x).data(), ti.data(), rows, vocab, kIgnore,
                           wholeLse.data(), &counted);
  ASSERT_EQ(counted, 4);
  ASSERT_TRUE(
      e.Write(givenLse, std::vector<double>(wholeLse.begin(), wholeLse.end()))
          .ok());

  std::vector<double> single[3];
  for (int threads : {1, 4}) {
    cpu::setNumThreads(threads);
    ASSERT_TRUE(e.Run("split", {}).ok());
    ASSERT_TRUE(e.Run("whole", {}).ok());
    double got = (*e.Read(loss))[0], want = (*e.Read(refLoss))[0];
    EXPECT_NEAR(got, want, tolerance<T>() * std::fabs(want));
    std::vector<double> g = *e.Read(dlogits), w = *e.Read(refDlogits);
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], w[i], tolerance<T>() * std::max(std::fabs(w[i]), 1e-3))
          << "element " << i;
    // Rows with an ignored target have no gradient.
    for (int64_t c = 0; c < vocab; ++c)
      EXPECT_EQ(g[1 * vocab + c], 0.0);
    std::vector<double> l = *e.Read(lse);
    for (int64_t r = 0; r < rows; ++r) {
      if (t[r] != kIgnore) {
        EXPECT_NEAR(l[r], double(wholeLse[r]),
                    tolerance<T>() * std::fabs(double(wholeLse[r])));
      }
    }
    // Given the same lse, the 4-input gradient is the 3-input one.
    EXPECT_EQ(*e.Read(givenDlogits), w);
    if (threads == 1) {
      single[0] = {got};
      single[1] = g;
      single[2] = l;
    } else {
      EXPECT_EQ(single[0], std::vector<double>{got});
      EXPECT_EQ(single[1], g);
      EXPECT_EQ(single[2], l);
    }
  }
  cpu::setNumThreads(1);

  // A target outside the vocabulary is refused before any kernel reads it.
  t[0] = vocab;
  ASSERT_TRUE(e.Write(targets, t).ok());
  absl::Status s = e.Run("split", {});
  EXPECT_NE(s.message().find("token id 7 at position 0 of 'targets' is outside "
                             "the vocabulary of 7"),
            absl::string_view::npos)
      << s;
}

//===-- Cross-entropy over two ranks --------------------------------------===//

// Two tp ranks each hold 4 of the 8 vocabulary columns; the plan's
// all-reduces combine their maxima and partial sums. Loss, lse and the
// concatenated logit gradients equal the whole-vocabulary kernels.
TYPED_TEST(TensorParallel, CrossEntropyOverTwoRanks) {
  using T = TypeParam;
  const DType f = dtypeOf<T>();
  const int64_t rows = 6, vocab = 8, local = 4;
  Builder b;
  int logits = b.buffer("logits", f, {2, 3, local}, ACTIVATION);
  int targets = b.buffer("targets", I32, {2, 3}, INPUT);
  int rowMax = b.buffer("row_max", f, {2, 3}, WORKSPACE);
  int globalMax = b.buffer("global_max", f, {2, 3}, WORKSPACE);
  int partial = b.buffer("partial", f, {2, 3, 2}, WORKSPACE);
  int summed = b.buffer("summed", f, {2, 3, 2}, WORKSPACE);
  int loss = b.buffer("loss", f, {}, ACTIVATION);
  int lse = b.buffer("lse", f, {2, 3}, WORKSPACE);
  int dloss = b.buffer("dloss", f, {}, INPUT);
  int dlogits = b.buffer("dlogits", f, {2, 3, local}, ACTIVATION);
  auto slice = [](Instruction *inst) {
    inst->set_rank_axis("tp");
    (*inst->mutable_int_attrs())["vocab_start_stride"] = 4;
    return inst;
  };
  auto ignore = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["ignore_index"] = kIgnore;
    return inst;
  };
  Function *fn = b.function("loss");
  b.add(fn, CROSS_ENTROPY_MAX, {logits}, {rowMax});
  Instruction *max = b.add(fn, ALL_REDUCE, {rowMax}, {globalMax});
  max->add_group("tp");
  (*max->mutable_int_attrs())["max"] = 1;
  slice(ignore(b.add(fn, CROSS_ENTROPY_PARTIAL, {logits, targets, globalMax},
                     {partial})));
  b.add(fn, ALL_REDUCE, {partial}, {summed})->add_group("tp");
  ignore(b.add(fn, CROSS_ENTROPY_FINISH, {summed, globalMax, targets},
               {loss, lse}));
  slice(ignore(b.add(fn, CROSS_ENTROPY_GRAD, {logits, targets, dloss, lse},
                     {dlogits})));

  TwoRanks ranks;
  ASSERT_TRUE(ranks.create(tpMesh(b.plan)).ok());
  // Row 0's largest logit is on rank 1, so that the maxima differ.
  std::vector<double> whole = randomValues<T>(rows * vocab, -4, 4, 5);
  whole[6] = 5;
  std::vector<double> t = {1, 6, double(kIgnore), 4, double(kIgnore), 7};
  for (int r = 0; r < 2; ++r) {
    exec::Executor &e = *ranks.rank[r];
    ASSERT_TRUE(e.Write(logits, columns(whole, rows, vocab, r * local, local)).ok());
    ASSERT_TRUE(e.Write(targets, t).ok());
    ASSERT_TRUE(e.Write(dloss, {1.5}).ok());
  }
  auto [s0, s1] = ranks.run("loss");
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;

  std::vector<int32_t> ti(t.begin(), t.end());
  std::vector<T> wantLse(rows), wantGrad(rows * vocab);
  int64_t counted = 0;
  std::vector<T> wholeT = as<T>(whole);
  double wantLoss = cpu::crossEntropyForward(wholeT.data(), ti.data(), rows,
                                             vocab, kIgnore, wantLse.data(),
                                             &counted);
  cpu::crossEntropyBackward(wholeT.data(), ti.data(), wantLse.data(), T(1.5),
                            rows, vocab, kIgnore, counted, wantGrad.data());
  std::vector<double> wantGradD(wantGrad.begin(), wantGrad.end());
  for (int r = 0; r < 2; ++r) {
    exec::Executor &e = *ranks.rank[r];
    double got = (*e.Read(loss))[0];
    EXPECT_NEAR(got, wantLoss, tolerance<T>() * std::fabs(wantLoss)) << "rank " << r;
    std::vector<double> l = *e.Read(lse);
    for (int64_t i = 0; i < rows; ++i) {
      if (t[i] != kIgnore) {
        EXPECT_NEAR(l[i], double(wantLse[i]),
                    tolerance<T>() * std::fabs(double(wantLse[i])))
            << "rank " << r << " row " << i;
      }
    }
    std::vector<double> g = *e.Read(dlogits);
    std::vector<double> w = columns(wantGradD, rows, vocab, r * local, local);
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], w[i], tolerance<T>() * std::max(std::fabs(w[i]), 1e-3))
          << "rank " << r << " element " << i;
    // The global maximum reached both ranks through the max all-reduce.
    EXPECT_EQ((*e.Read(globalMax))[0], 5.0);
    const PairCommunicator &comm = r ? ranks.comm1 : ranks.comm0;
    ASSERT_EQ(comm.calls.size(), 2u);
    EXPECT_EQ(comm.calls[0].axes, std::vector<std::string>{"tp"});
    EXPECT_EQ(comm.calls[0].op, exec::Reduction::kMax);
    EXPECT_EQ(comm.calls[0].count, rows);
    EXPECT_EQ(comm.calls[1].op, exec::Reduction::kSum);
    EXPECT_EQ(comm.calls[1].count, 2 * rows);
    EXPECT_EQ(comm.calls[1].dtype, f);
  }

  // Targets are checked against the global vocabulary (8), not the 4 local
  // columns: 7 was accepted above, 8 is refused on both ranks.
  t[0] = 8;
  for (int r = 0; r < 2; ++r)
    ASSERT_TRUE(ranks.rank[r]->Write(targets, t).ok());
  auto [bad0, bad1] = ranks.run("loss");
  for (const absl::Status &s : {bad0, bad1})
    EXPECT_NE(s.message().find("token id 8 at position 0 of 'targets' is "
                               "outside the vocabulary of 8"),
              absl::string_view::npos)
        << s;
}

//===-- Embedding over two ranks ------------------------------------------===//

// Two tp ranks hold 4 of the table's 8 rows each: the summed outputs are the
// whole table's embedding, and the two dtable slices, each accumulating into
// what it held, are the whole table's gradient, bit for bit.
TYPED_TEST(TensorParallel, EmbeddingOverTwoRanks) {
  using T = TypeParam;
  const DType f = dtypeOf<T>();
  const int64_t vocab = 8, local = 4, hidden = 5, rows = 6;
  Builder b;
  int table = b.buffer("table", f, {local, hidden}, PARAMETER);
  int ids = b.buffer("ids", I32, {2, 3}, INPUT);
  int part = b.buffer("part", f, {2, 3, hidden}, ACTIVATION);
  int out = b.buffer("out", f, {2, 3, hidden}, ACTIVATION);
  int dy = b.buffer("dy", f, {2, 3, hidden}, ACTIVATION);
  int dtable = b.buffer("dtable", f, {local, hidden}, GRADIENT);
  auto slice = [](Instruction *inst) {
    inst->set_rank_axis("tp");
    (*inst->mutable_int_attrs())["vocab_start_stride"] = 4;
  };
  Function *fwd = b.function("forward");
  slice(b.add(fwd, EMBEDDING, {table, ids}, {part}));
  b.add(fwd, ALL_REDUCE, {part}, {out})->add_group("tp");
  Function *bwd = b.function("backward");
  slice(b.add(bwd, EMBEDDING_GRAD, {dy, ids}, {dtable}));

  TwoRanks ranks;
  ASSERT_TRUE(ranks.create(tpMesh(b.plan)).ok());
  std::vector<double> wholeTable = randomValues<T>(vocab * hidden, -1, 1, 21);
  std::vector<double> wholeDtable = randomValues<T>(vocab * hidden, -1, 1, 22);
  std::vector<double> g = randomValues<T>(rows * hidden, -1, 1, 23);
  std::vector<double> idValues = {0, 5, 3, 7, 5, 4};
  for (int r = 0; r < 2; ++r) {
    exec::Executor &e = *ranks.rank[r];
    auto rowsOf = [&](const std::vector<double> &m) {
      return std::vector<double>(m.begin() + r * local * hidden,
                                 m.begin() + (r + 1) * local * hidden);
    };
    ASSERT_TRUE(e.Write(table, rowsOf(wholeTable)).ok());
    ASSERT_TRUE(e.Write(dtable, rowsOf(wholeDtable)).ok());
    ASSERT_TRUE(e.Write(ids, idValues).ok());
    ASSERT_TRUE(e.Write(dy, g).ok());
  }
  auto [f0, f1] = ranks.run("forward");
  ASSERT_TRUE(f0.ok()) << f0;
  ASSERT_TRUE(f1.ok()) << f1;
  auto [b0, b1] = ranks.run("backward");
  ASSERT_TRUE(b0.ok()) << b0;
  ASSERT_TRUE(b1.ok()) << b1;

  std::vector<int32_t> idv(idValues.begin(), idValues.end());
  std::vector<T> wantOut(rows * hidden), wantDtable = as<T>(wholeDtable);
  cpu::embeddingForward(as<T>(wholeTable).data(), idv.data(), rows, hidden,
                        wantOut.data());
  cpu::embeddingBackward(as<T>(g).data(), idv.data(), rows, hidden,
                         wantDtable.data());
  std::vector<double> gotDtable;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(*ranks.rank[r]->Read(out),
              std::vector<double>(wantOut.begin(), wantOut.end()))
        << "rank " << r;
    std::vector<double> slice = *ranks.rank[r]->Read(dtable);
    gotDtable.insert(gotDtable.end(), slice.begin(), slice.end());
  }
  EXPECT_EQ(gotDtable, std::vector<double>(wantDtable.begin(), wantDtable.end()));

  // Ids are checked against the global vocabulary of 8.
  idValues[2] = 8;
  for (int r = 0; r < 2; ++r)
    ASSERT_TRUE(ranks.rank[r]->Write(ids, idValues).ok());
  auto [bad0, bad1] = ranks.run("forward");
  for (const absl::Status &s : {bad0, bad1})
    EXPECT_NE(s.message().find("token id 8 at position 2 of 'ids' is outside "
                               "the vocabulary of 8"),
              absl::string_view::npos)
        << s;
}

//===-- Gradient norm over a group ----------------------------------------===//

// GRAD_NORM over the tp group: a [3] and b [2, 2] are split across the two
// ranks, r [4] is replicated. Both ranks get the norm of the whole gradient
// (sum of squares written out here) and its clip scale; a NaN or infinity on
// one rank makes both ranks' norms non-finite.
TYPED_TEST(TensorParallel, GradNormOverAGroup) {
  using T = TypeParam;
  const DType f = dtypeOf<T>();
  Builder b;
  int a = b.buffer("a", f, {3}, GRADIENT);
  int bb = b.buffer("b", f, {2, 2}, GRADIENT);
  int r = b.buffer("r", f, {4}, GRADIENT);
  int norm = b.buffer("grad_norm", f, {}, WORKSPACE);
  int scale = b.buffer("scale", f, {}, WORKSPACE);
  Function *fn = b.function("norm");
  Instruction *gn = b.add(fn, GRAD_NORM, {a, bb, r}, {norm, scale});
  gn->add_group("tp");
  (*gn->mutable_int_attrs())["split_inputs"] = 2;
  (*gn->mutable_float_attrs())["max_norm"] = 1.0;

  TwoRanks ranks;
  ASSERT_TRUE(ranks.create(tpMesh(b.plan)).ok());
  std::vector<double> av[2] = {randomValues<T>(3, -1, 1, 31),
                               randomValues<T>(3, -1, 1, 32)};
  std::vector<double> bv[2] = {randomValues<T>(4, -1, 1, 33),
                               randomValues<T>(4, -1, 1, 34)};
  std::vector<double> rv = randomValues<T>(4, -1, 1, 35);
  double total = 0;
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(ranks.rank[k]->Write(a, av[k]).ok());
    ASSERT_TRUE(ranks.rank[k]->Write(bb, bv[k]).ok());
    ASSERT_TRUE(ranks.rank[k]->Write(r, rv).ok());
    for (double x : av[k])
      total += x * x;
    for (double x : bv[k])
      total += x * x;
  }
  for (double x : rv)
    total += x * x;
  double want = std::sqrt(total);
  ASSERT_GT(want, 1.0); // so that the clip scales down
  absl::StatusOr<cpu::GradClip> clip = cpu::computeGradClip(want, 1.0);
  ASSERT_TRUE(clip.ok());

  auto [s0, s1] = ranks.run("norm");
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  for (int k = 0; k < 2; ++k) {
    double got = (*ranks.rank[k]->Read(norm))[0];
    EXPECT_NEAR(got, want, tolerance<T>() * want) << "rank " << k;
    EXPECT_NEAR((*ranks.rank[k]->Read(scale))[0], clip->scale,
                tolerance<T>() * clip->scale)
        << "rank " << k;
    const PairCommunicator &comm = k ? ranks.comm1 : ranks.comm0;
    ASSERT_EQ(comm.calls.size(), 1u);
    EXPECT_EQ(comm.calls[0].axes, std::vector<std::string>{"tp"});
    EXPECT_EQ(comm.calls[0].count, 1);
    EXPECT_EQ(comm.calls[0].dtype, F64); // the sum travels in double
    EXPECT_EQ(comm.calls[0].op, exec::Reduction::kSum);
  }

  // A NaN in rank 1's slice reaches rank 0's norm through the sum.
  std::vector<double> withNan = av[1];
  withNan[1] = std::numeric_limits<double>::quiet_NaN();
  ASSERT_TRUE(ranks.rank[1]->Write(a, withNan).ok());
  auto [n0, n1] = ranks.run("norm");
  ASSERT_TRUE(n0.ok()) << n0;
  ASSERT_TRUE(n1.ok()) << n1;
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(std::isnan((*ranks.rank[k]->Read(norm))[0])) << "rank " << k;
    EXPECT_TRUE(std::isnan((*ranks.rank[k]->Read(scale))[0])) << "rank " << k;
  }
  // An infinite replicated gradient stays infinite after the division by
  // the group's size.
  ASSERT_TRUE(ranks.rank[1]->Write(a, av[1]).ok());
  std::vector<double> withInf = rv;
  withInf[0] = std::numeric_limits<double>::infinity();
  for (int k = 0; k < 2; ++k)
    ASSERT_TRUE(ranks.rank[k]->Write(r, withInf).ok());
  auto [i0, i1] = ranks.run("norm");
  ASSERT_TRUE(i0.ok()) << i0;
  ASSERT_TRUE(i1.ok()) << i1;
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ((*ranks.rank[k]->Read(norm))[0],
              std::numeric_limits<double>::infinity());
    EXPECT_TRUE(std::isnan((*ranks.rank[k]->Read(scale))[0]));
  }
}

// Over a group of one rank, GRAD_NORM needs no communicator and is the norm
// without a group; over two ranks without a communicator it is an error.
TEST(TensorParallel, GradNormGroupWithoutCommunicator) {
  for (int64_t tp : {1, 2}) {
    Builder b;
    b.plan.mutable_mesh()->set_axes(0, "tp");
    b.plan.mutable_mesh()->set_sizes(0, tp);
    int a = b.buffer("a", F64, {5}, GRADIENT);
    int r = b.buffer("r", F64, {3}, GRADIENT);
    int norm = b.buffer("norm", F64, {}, WORKSPACE);
    int scale = b.buffer("scale", F64, {}, WORKSPACE);
    int plainNorm = b.buffer("plain_norm", F64, {}, WORKSPACE);
    int plainScale = b.buffer("plain_scale", F64, {}, WORKSPACE);
    Instruction *grouped =
        b.add(b.function("grouped"), GRAD_NORM, {a, r}, {norm, scale});
    grouped->add_group("tp");
    (*grouped->mutable_int_attrs())["split_inputs"] = 1;
    (*grouped->mutable_float_attrs())["max_norm"] = 0.5;
    Instruction *plain =
        b.add(b.function("plain"), GRAD_NORM, {a, r}, {plainNorm, plainScale});
    (*plain->mutable_float_attrs())["max_norm"] = 0.5;
    auto e = exec::Executor::Create(b.plan);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE((*e)->Write(a, randomValues<double>(5, -1, 1, 41)).ok());
    ASSERT_TRUE((*e)->Write(r, randomValues<double>(3, -1, 1, 42)).ok());
    absl::Status s = (*e)->Run("grouped", {});
    if (tp == 2) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(s.message().find("a gradient norm over 2 ranks needs the job's "
                                 "other ranks"),
                absl::string_view::npos)
          << s;
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE((*e)->Run("plain", {}).ok());
    EXPECT_DOUBLE_EQ((*(*e)->Read(norm))[0], (*(*e)->Read(plainNorm))[0]);
    EXPECT_DOUBLE_EQ((*(*e)->Read(scale))[0], (*(*e)->Read(plainScale))[0]);
  }
}

//===-- Sequence parallelism ----------------------------------------------===//

/// Calls f(i0, i1, i2) for every index of a 3-D shape, in row-major order,
/// and returns the values it gives.
template <typename F>
std::vector<double> tabulate(const std::vector<int64_t> &shape, F f) {
  std::vector<double> v;
  for (int64_t i0 = 0; i0 < shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < shape[2]; ++i2)
        v.push_back(f(i0, i1, i2));
  return v;
}

// ALL_GATHER then REDUCE_SCATTER along each dimension of a rank's [2, 3, 4]
// slice of a [2, 3, 4] tensor doubled along that dimension. Rank r's slice
// holds 1000 r + 100 a + 10 b + c at (a, b, c): the gathered tensor holds,
// at global index g, the value of the rank that owns g along `dim` at the
// local index; reduce-scattering the (replicated) gathered tensor gives
// each rank twice its own slice; reduce-scattering rank r's w = (r + 1) x
// (100 g0 + 10 g1 + g2) + 1000 r gives 3 x (100 g0 + 10 g1 + g2) + 1000 on
// the rank's slice.
TYPED_TEST(TensorParallel, AllGatherThenReduceScatter) {
  using T = TypeParam;
  const DType f = dtypeOf<T>();
  const std::vector<int64_t> local = {2, 3, 4};
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(testing::Message() << "dim " << dim);
    std::vector<int64_t> whole = local;
    whole[dim] *= 2;
    Builder b;
    int x = b.buffer("x", f, local, ACTIVATION);
    int y = b.buffer("y", f, whole, ACTIVATION);
    int z = b.buffer("z", f, local, ACTIVATION);
    int w = b.buffer("w", f, whole, ACTIVATION);
    int v = b.buffer("v", f, local, ACTIVATION);
    Function *fn = b.function("sp");
    auto collective = [&](Kernel k, int in, int out) {
      Instruction *inst = b.add(fn, k, {in}, {out});
      inst->add_group("tp");
      (*inst->mutable_int_attrs())["dim"] = dim;
    };
    collective(ALL_GATHER, x, y);
    collective(REDUCE_SCATTER, y, z);
    collective(REDUCE_SCATTER, w, v);

    TwoRanks ranks;
    absl::Status created = ranks.create(tpMesh(b.plan));
    ASSERT_TRUE(created.ok()) << created;
    auto slice = [](int64_t r) {
      return [r](int64_t a, int64_t bb, int64_t c) {
        return 1000.0 * r + 100.0 * a + 10.0 * bb + c;
      };
    };
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(ranks.rank[r]->Write(x, tabulate(local, slice(r))).ok());
      ASSERT_TRUE(
          ranks.rank[r]
              ->Write(w, tabulate(whole,
                                  [r](int64_t a, int64_t bb, int64_t c) {
                                    return (r + 1) *
                                               (100.0 * a + 10.0 * bb + c) +
                                           1000.0 * r;
                                  }))
              .ok());
    }
    auto [s0, s1] = ranks.run("sp");
    ASSERT_TRUE(s0.ok()) << s0;
    ASSERT_TRUE(s1.ok()) << s1;

    std::vector<double> wantY =
        tabulate(whole, [&](int64_t a, int64_t bb, int64_t c) {
          int64_t g[3] = {a, bb, c};
          int64_t owner = g[dim] / local[dim];
          g[dim] %= local[dim];
          return slice(owner)(g[0], g[1], g[2]);
        });
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(testing::Message() << "rank " << r);
      exec::Executor &e = *ranks.rank[r];
      EXPECT_EQ(*e.Read(y), wantY);
      EXPECT_EQ(*e.Read(z),
                tabulate(local, [&](int64_t a, int64_t bb, int64_t c) {
                  return 2 * slice(r)(a, bb, c);
                }));
      EXPECT_EQ(*e.Read(v),
                tabulate(local, [&](int64_t a, int64_t bb, int64_t c) {
                  int64_t g[3] = {a, bb, c};
                  g[dim] += r * local[dim];
                  return 3 * (100.0 * g[0] + 10.0 * g[1] + g[2]) + 1000;
                }));
      const PairCommunicator &comm = r ? ranks.comm1 : ranks.comm0;
      ASSERT_EQ(comm.calls.size(), 3u);
      EXPECT_EQ(comm.calls[0].kind, "all-gather");
      EXPECT_EQ(comm.calls[1].kind, "reduce-scatter");
      EXPECT_EQ(comm.calls[2].kind, "reduce-scatter");
      for (const PairCommunicator::Call &call : comm.calls) {
        EXPECT_EQ(call.axes, std::vector<std::string>{"tp"});
        EXPECT_EQ(call.count, 24); // one rank's slice
        EXPECT_EQ(call.dtype, f);
      }
    }
  }
}

// Over a group of one rank ALL_GATHER and REDUCE_SCATTER are copies that
// need no communicator; over two ranks without one they are errors.
TEST(TensorParallel, GatherAndScatterWithoutCommunicator) {
  for (int64_t tp : {1, 2}) {
    for (Kernel k : {ALL_GATHER, REDUCE_SCATTER}) {
      Builder b;
      b.plan.mutable_mesh()->set_axes(0, "tp");
      b.plan.mutable_mesh()->set_sizes(0, tp);
      bool gather = k == ALL_GATHER;
      int x = b.buffer("x", F64, {2, gather ? 3 : 3 * tp, 2}, ACTIVATION);
      int y = b.buffer("y", F64, {2, gather ? 3 * tp : 3, 2}, ACTIVATION);
      Instruction *inst = b.add(b.function("f"), k, {x}, {y});
      inst->add_group("tp");
      (*inst->mutable_int_attrs())["dim"] = 1;
      auto e = exec::Executor::Create(b.plan);
      ASSERT_TRUE(e.ok()) << e.status();
      std::vector<double> values =
          randomValues<double>(gather ? 12 : 12 * tp, -1, 1, 51);
      ASSERT_TRUE((*e)->Write(x, values).ok());
      absl::Status s = (*e)->Run("f", {});
      if (tp == 2) {
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_NE(s.message().find(absl::StrCat(
                      gather ? "an all-gather" : "a reduce-scatter",
                      " over 2 ranks needs the job's other ranks")),
                  absl::string_view::npos)
            << s;
        continue;
      }
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(*(*e)->Read(y), values);
    }
  }
}

// POSITION_EMBEDDING on a slice of the sequence: each of two ranks holds 3
// of the 6 positions of [2, 6] tokens (seq_start_stride 3); their outputs,
// concatenated along the sequence, are the whole sequence's, bit for bit.
// The gradient: each rank adds its positions' sums into its dtable and
// leaves the other rows as they were, so that from zeros the two ranks'
// dtables sum to the whole sequence's gradient.
TYPED_TEST(TensorParallel, SequenceParallelPositionEmbedding) {
  using T = TypeParam;
  const DType f = dtypeOf<T>();
  const int64_t batch = 2, seq = 6, local = 3, hidden = 5, positions = 8;
  Builder b;
  int table = b.buffer("table", f, {positions, hidden}, PARAMETER);
  int ids = b.buffer("ids", I32, {batch, seq}, INPUT);
  int out = b.buffer("out", f, {batch, local, hidden}, ACTIVATION);
  int dy = b.buffer("dy", f, {batch, local, hidden}, ACTIVATION);
  int dtable = b.buffer("dtable", f, {positions, hidden}, GRADIENT);
  auto slice = [](Instruction *inst) {
    inst->set_rank_axis("tp");
    (*inst->mutable_int_attrs())["seq_start_stride"] = 3;
  };
  slice(b.add(b.function("forward"), POSITION_EMBEDDING, {table, ids}, {out}));
  slice(b.add(b.function("backward"), POSITION_EMBEDDING_GRAD, {dy}, {dtable}));

  TwoRanks ranks;
  absl::Status created = ranks.create(tpMesh(b.plan));
  ASSERT_TRUE(created.ok()) << created;
  std::vector<double> tableValues =
      randomValues<T>(positions * hidden, -1, 1, 61);
  std::vector<double> wholeDy =
      randomValues<T>(batch * seq * hidden, -1, 1, 62);
  // Rank r's dy: positions [3r, 3r + 3) of every sample.
  auto sequenceSlice = [&](const std::vector<double> &m, int r) {
    return columns(m, batch, seq * hidden, r * local * hidden, local * hidden);
  };
  for (int r = 0; r < 2; ++r) {
    exec::Executor &e = *ranks.rank[r];
    ASSERT_TRUE(e.Write(table, tableValues).ok());
    ASSERT_TRUE(e.Write(ids, std::vector<double>(batch * seq, 1)).ok());
    ASSERT_TRUE(e.Write(dy, sequenceSlice(wholeDy, r)).ok());
  }
  auto [f0, f1] = ranks.run("forward");
  ASSERT_TRUE(f0.ok()) << f0;
  ASSERT_TRUE(f1.ok()) << f1;
  auto [b0, b1] = ranks.run("backward");
  ASSERT_TRUE(b0.ok()) << b0;
  ASSERT_TRUE(b1.ok()) << b1;

  std::vector<T> wantOut(batch * seq * hidden), wantDtable(positions * hidden);
  cpu::positionEmbeddingForward(as<T>(tableValues).data(), batch, seq, hidden,
                                wantOut.data());
  cpu::positionEmbeddingBackward(as<T>(wholeDy).data(), batch, seq, hidden,
                                 wantDtable.data());
  std::vector<double> wantOutD(wantOut.begin(), wantOut.end());
  std::vector<double> summed(positions * hidden, 0.0);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    EXPECT_EQ(*ranks.rank[r]->Read(out), sequenceSlice(wantOutD, r));
    std::vector<double> got = *ranks.rank[r]->Read(dtable);
    for (int64_t i = 0; i < positions * hidden; ++i) {
      // Rows outside the rank's positions stay zero.
      int64_t row = i / hidden;
      if (row < r * local || row >= (r + 1) * local) {
        EXPECT_EQ(got[i], 0.0) << "row " << row;
      }
      summed[i] += got[i];
    }
  }
  EXPECT_EQ(summed, std::vector<double>(wantDtable.begin(), wantDtable.end()));

  // The gradient accumulates: from the table's values, rank 1's rows 3-5
  // are the whole kernel's from the same start, the others untouched.
  std::vector<T> fromTable = as<T>(tableValues);
  cpu::positionEmbeddingBackward(as<T>(wholeDy).data(), batch, seq, hidden,
                                 fromTable.data());
  ASSERT_TRUE(ranks.rank[1]->Write(dtable, tableValues).ok());
  ASSERT_TRUE(ranks.rank[1]->Run("backward", {}).ok());
  std::vector<double> got = *ranks.rank[1]->Read(dtable);
  for (int64_t i = 0; i < positions * hidden; ++i) {
    int64_t row = i / hidden;
    EXPECT_EQ(got[i],
              row >= 3 && row < 6 ? double(fromTable[i]) : tableValues[i])
        << "row " << row;
  }
}

// DROPOUT on a slice of the sequence: each of two ranks holds positions
// [3r, 3r + 3) of x [2, 6, 4] (col_offset_stride = 3 x 4); their outputs,
// concatenated along the sequence, are the one-rank output bit for bit,
// for the same seed, step, rng_id and sample offset. So is the gradient,
// a DROPOUT of dy with the same attributes.
TYPED_TEST(TensorParallel, SequenceParallelDropout) {
  using T = TypeParam;
  const DType f = dtypeOf<T>();
  const int64_t batch = 2, seq = 6, local = 3, hidden = 4;
  auto dropout = [](Builder &b, Function *fn, int in, int out, bool sliced) {
    Instruction *inst = b.add(fn, DROPOUT, {in}, {out});
    (*inst->mutable_float_attrs())["rate"] = 0.4;
    (*inst->mutable_int_attrs())["rng_id"] = 7;
    if (sliced) {
      inst->set_rank_axis("tp");
      (*inst->mutable_int_attrs())["col_offset_stride"] = local * hidden;
    }
  };
  Builder sp;
  int x = sp.buffer("x", f, {batch, local, hidden}, ACTIVATION);
  int y = sp.buffer("y", f, {batch, local, hidden}, ACTIVATION);
  int dy = sp.buffer("dy", f, {batch, local, hidden}, ACTIVATION);
  int dx = sp.buffer("dx", f, {batch, local, hidden}, ACTIVATION);
  Function *fn = sp.function("f");
  dropout(sp, fn, x, y, true);
  dropout(sp, fn, dy, dx, true);
  Builder one;
  int wx = one.buffer("x", f, {batch, seq, hidden}, ACTIVATION);
  int wy = one.buffer("y", f, {batch, seq, hidden}, ACTIVATION);
  int wdy = one.buffer("dy", f, {batch, seq, hidden}, ACTIVATION);
  int wdx = one.buffer("dx", f, {batch, seq, hidden}, ACTIVATION);
  Function *wfn = one.function("f");
  dropout(one, wfn, wx, wy, false);
  dropout(one, wfn, wdy, wdx, false);

  TwoRanks ranks;
  absl::Status created = ranks.create(tpMesh(sp.plan));
  ASSERT_TRUE(created.ok()) << created;
  auto whole = exec::Executor::Create(one.plan);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::vector<double> xs = randomValues<T>(batch * seq * hidden, 0.5, 1, 71);
  std::vector<double> dys = randomValues<T>(batch * seq * hidden, 0.5, 1, 72);
  auto sequenceSlice = [&](const std::vector<double> &m, int r) {
    return columns(m, batch, seq * hidden, r * local * hidden, local * hidden);
  };
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ranks.rank[r]->Write(x, sequenceSlice(xs, r)).ok());
    ASSERT_TRUE(ranks.rank[r]->Write(dy, sequenceSlice(dys, r)).ok());
  }
  ASSERT_TRUE((*whole)->Write(wx, xs).ok());
  ASSERT_TRUE((*whole)->Write(wdy, dys).ok());
  exec::StepContext context{1234, 3, 5};
  auto [s0, s1] = ranks.run("f", context);
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  ASSERT_TRUE((*whole)->Run("f", context).ok());

  std::vector<double> wantY = *(*whole)->Read(wy),
                      wantDx = *(*whole)->Read(wdx);
  // The mask drops some elements and keeps others, the same in both.
  int64_t dropped = std::count(wantY.begin(), wantY.end(), 0.0);
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, int64_t(wantY.size()));
  for (size_t i = 0; i < wantY.size(); ++i)
    EXPECT_EQ(wantY[i] == 0, wantDx[i] == 0) << "element " << i;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    EXPECT_EQ(*ranks.rank[r]->Read(y), sequenceSlice(wantY, r));
    EXPECT_EQ(*ranks.rank[r]->Read(dx), sequenceSlice(wantDx, r));
  }
  // Without the slice, rank 1 would draw the mask of positions 0-2.
  ASSERT_TRUE((*whole)->Run("f", {1234, 3, 6}).ok());
  EXPECT_NE(*ranks.rank[1]->Read(y), sequenceSlice(*(*whole)->Read(wy), 1));
}

} // namespace
