//===- TensorParallelTest.cpp - Plans on tensor-parallel ranks ------------===//
//
// The runtime side of tensor parallelism as a plan drives it: the
// vocabulary-parallel embedding and cross-entropy (CROSS_ENTROPY_MAX,
// CROSS_ENTROPY_PARTIAL, CROSS_ENTROPY_FINISH and CROSS_ENTROPY_GRAD with the
// global lse) and GRAD_NORM over a group. Two tp ranks run as two executors
// on two threads whose all-reduces meet in a shared exchange; what they
// compute must equal the whole-vocabulary (whole-tensor) kernels of
// Kernels.h run on the concatenated slices, or sums written out here.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include "PlanBuilder.h"

#include "gtest/gtest.h"

#include <algorithm>
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

//===-- Two ranks in one process ------------------------------------------===//

/// Where the all-reduces of two ranks running on two threads meet: each call
/// waits (at most 30 s) for the other rank's matching call, and both leave
/// with the sum or the maximum of the two ranks' values.
class PairExchange {
public:
  absl::Status reduce(int rank, void *data, int64_t count, DType dtype,
                      exec::Reduction op) {
    if (dtype != F32 && dtype != F64)
      return absl::UnimplementedError("the exchange takes F32 and F64");
    std::unique_lock<std::mutex> lock(mutex_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    if (!cv_.wait_until(lock, deadline, [&] { return !distributing_; }))
      return absl::DeadlineExceededError("the previous all-reduce never ended");
    std::vector<double> &mine = values_[rank];
    mine.resize(count);
    for (int64_t i = 0; i < count; ++i)
      mine[i] = dtype == F32 ? double(static_cast<float *>(data)[i])
                             : static_cast<double *>(data)[i];
    ops_[rank] = op;
    if (++arrived_ == 2) {
      mismatch_ = values_[0].size() != values_[1].size() || ops_[0] != ops_[1];
      result_.assign(values_[0].size(), 0.0);
      for (size_t i = 0; !mismatch_ && i < result_.size(); ++i)
        result_[i] = op == exec::Reduction::kMax
                         ? std::max(values_[0][i], values_[1][i])
                         : values_[0][i] + values_[1][i];
      distributing_ = true;
      cv_.notify_all();
    } else if (!cv_.wait_until(lock, deadline, [&] { return distributing_; })) {
      return absl::DeadlineExceededError("the other rank never joined");
    }
    bool mismatch = mismatch_;
    std::vector<double> result = result_;
    if (++left_ == 2) {
      arrived_ = left_ = 0;
      distributing_ = false;
      cv_.notify_all();
    }
    if (mismatch)
      return absl::InvalidArgumentError("the ranks' all-reduces differ");
    for (int64_t i = 0; i < count; ++i) {
      if (dtype == F32)
        static_cast<float *>(data)[i] = float(result[i]);
      else
        static_cast<double *>(data)[i] = result[i];
    }
    return absl::OkStatus();
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<double> values_[2], result_;
  exec::Reduction ops_[2] = {};
  int arrived_ = 0, left_ = 0;
  bool distributing_ = false, mismatch_ = false;
};

/// One rank of a mesh with the single axis "tp" of size 2.
class PairCommunicator : public exec::Communicator {
public:
  struct Call {
    std::vector<std::string> axes;
    int64_t count;
    DType dtype;
    exec::Reduction op;
  };
  PairCommunicator(PairExchange &exchange, int rank)
      : exchange(exchange), rank(rank), coords{rank} {}
  int64_t Rank() const override { return rank; }
  const std::vector<int64_t> &Coordinates() const override { return coords; }
  absl::Status AllReduce(absl::Span<const std::string> axes, void *data,
                         int64_t count, DType dtype,
                         exec::Reduction op) override {
    calls.push_back({{axes.begin(), axes.end()}, count, dtype, op});
    return exchange.reduce(rank, data, count, dtype, op);
  }
  absl::Status AllGather(absl::Span<const std::string>, const void *, void *,
                         int64_t, DType) override {
    return absl::UnimplementedError("not used here");
  }

  PairExchange &exchange;
  int rank;
  std::vector<int64_t> coords;
  std::vector<Call> calls;
};

/// Two executors of the same plan, tp ranks 0 and 1.
struct TwoRanks {
  PairExchange exchange;
  PairCommunicator comm0{exchange, 0}, comm1{exchange, 1};
  std::unique_ptr<exec::Executor> rank[2];

  /// Loads `plan` through the file format, as braid-run would.
  absl::Status create(const Plan &plan) {
    absl::StatusOr<Plan> loaded =
        ParsePlanFile(SerializePlanFile(plan), "tp.plan");
    if (!loaded.ok())
      return loaded.status();
    for (int r = 0; r < 2; ++r) {
      auto e = exec::Executor::Create(*loaded, r ? &comm1 : &comm0);
      if (!e.ok())
        return e.status();
      rank[r] = std::move(*e);
    }
    return absl::OkStatus();
  }
  /// Runs function `name` on both ranks at once (rank 1 on another thread).
  std::pair<absl::Status, absl::Status> run(const char *name) {
    absl::Status second;
    std::thread other([&] { second = rank[1]->Run(name, {}); });
    absl::Status first = rank[0]->Run(name, {});
    other.join();
    return {first, second};
  }
};

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

} // namespace
