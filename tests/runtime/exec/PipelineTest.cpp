//===- PipelineTest.cpp - Slots, SEND and RECV, and pipelined training ----===//
//
// The runtime side of pipeline parallelism: functions run on a slot of the
// slotted buffers; SEND and RECV between two executors on two threads (the
// fake communicator of TwoRanks.h, whose sends read their data late, as
// MPI's may); GRAD_NORM's replicated_copies; and the trainer, which must
// train the two-stage plan of PipelinePlans.h to the same losses, gradient
// norms and parameters as the whole model on one rank.
//
//===----------------------------------------------------------------------===//

#include "runtime/ckpt/Safetensors.h"
#include "runtime/common/Format.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/PlanLoader.h"

#include "PipelinePlans.h"
#include "PlanBuilder.h"
#include "TwoRanks.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace braid;
using namespace braid::plan;

namespace {

using braid::exec_test::values;

using exec_test::PairCommunicator;
using exec_test::PairExchange;
using exec_test::PlanBuilder;
using exec_test::TwoRanks;

/// A mesh of one axis "pp" of 2 ranks (no pipeline: the functions below
/// belong to no stage).
PlanBuilder ppBuilder() {
  PlanBuilder b;
  b.plan.mutable_mesh()->set_axes(0, "pp");
  b.plan.mutable_mesh()->set_sizes(0, 2);
  return b;
}

Instruction *p2p(Instruction *inst, int64_t peer) {
  inst->set_rank_axis("pp");
  (*inst->mutable_int_attrs())["peer"] = peer;
  return inst;
}

/// Runs `fn0` on rank 0 and `fn1` on rank 1 at once, each on its slot.
std::pair<absl::Status, absl::Status> runBoth(TwoRanks &ranks, const char *fn0,
                                              const char *fn1,
                                              int64_t slot0 = 0,
                                              int64_t slot1 = 0) {
  absl::Status second;
  std::thread other([&] { second = ranks.rank[1]->Run(fn1, {}, slot1); });
  absl::Status first = ranks.rank[0]->Run(fn0, {}, slot0);
  other.join();
  return {first, second};
}

//===-- Slots -------------------------------------------------------------===//

// A function run on slot k reads and writes copy k of the slotted buffers,
// at offset + k x bytes, and the one copy of the others.
TEST(PipelineExecutor, FunctionsRunOnSlots) {
  PlanBuilder b;
  int x = b.buffer("x", F64, {3}, ACTIVATION, 2);
  int w = b.buffer("w", F64, {3}, PARAMETER);
  int y = b.buffer("y", F64, {3}, ACTIVATION, 2);
  // Both copies of x, seen as one buffer.
  int whole = b.buffer("x.copies", F64, {6}, WORKSPACE);
  b.plan.mutable_buffers(whole)->set_offset(b.plan.buffers(x).offset());
  b.add(b.function("add"), ADD, {x, w}, {y});
  auto created = exec::Executor::Create(b.plan);
  ASSERT_TRUE(created.ok()) << created.status();
  exec::Executor &e = **created;
  ASSERT_TRUE(e.Write(x, {1, 2, 3}, 0).ok());
  ASSERT_TRUE(e.Write(x, {10, 20, 30}, 1).ok());
  ASSERT_TRUE(e.Write(w, {100, 200, 300}).ok());
  EXPECT_EQ(*e.Read(whole), std::vector<double>({1, 2, 3, 10, 20, 30}));
  ASSERT_TRUE(e.Run("add", {}, 0).ok());
  EXPECT_EQ(*e.Read(y, 0), std::vector<double>({101, 202, 303}));
  EXPECT_EQ(*e.Read(y, 1), std::vector<double>({0, 0, 0}));
  absl::Status s = e.Run("add", {}, 1);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(*e.Read(y, 0), std::vector<double>({101, 202, 303}));
  EXPECT_EQ(*e.Read(y, 1), std::vector<double>({110, 220, 330}));
  EXPECT_EQ(*e.Read(x, 0), std::vector<double>({1, 2, 3}));
  // A buffer of one copy has it for every slot.
  EXPECT_EQ(*e.Read(w, 1), *e.Read(w, 0));
  ASSERT_TRUE(e.Write(w, {1, 1, 1}, 5).ok());
  EXPECT_EQ(*e.Read(w, 0), std::vector<double>({1, 1, 1}));

  // Slots the buffers do not have are refused before anything runs.
  s = e.Run("add", {}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "function 'add': slot 2 is not a copy of buffer 'x', "
                         "which has 2 slots [0, 2)");
  s = e.Run("add", {}, -1);
  EXPECT_EQ(s.message(), "function 'add': slot -1 is not a copy of buffer "
                         "'x', which has 2 slots [0, 2)");
  EXPECT_EQ(e.Write(y, {0, 0, 0}, 2).message(),
            "slot 2 is not a copy of buffer 'y', which has 2 slots [0, 2)");
  EXPECT_EQ(e.Read(w, -1).status().message(),
            "slot -1 is not a copy of buffer 'w', which has one copy for "
            "every slot >= 0");
  EXPECT_EQ(*e.Read(y, 1), std::vector<double>({110, 220, 330}));
}

//===-- SEND and RECV -----------------------------------------------------===//

TEST(PipelineExecutor, PointToPointNeedsOtherRanks) {
  PlanBuilder b = ppBuilder();
  int x = b.buffer("x", F32, {2}, ACTIVATION);
  p2p(b.add(b.function("send"), SEND, {x}, {}), +1);
  p2p(b.add(b.function("recv"), RECV, {}, {x}), -1);
  auto created = exec::Executor::Create(b.plan);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::Status s = (*created)->Run("send", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "function 'send', SEND: a send to the next rank "
                         "along 'pp' needs the job's other ranks (run the plan "
                         "under mpirun)");
  s = (*created)->Run("recv", {});
  EXPECT_EQ(s.message(), "function 'recv', RECV: a receive from the previous "
                         "rank along 'pp' needs the job's other ranks (run the "
                         "plan under mpirun)");
}

// Rank 0 sends three buffers (two F64, one I32), rank 1 receives them in
// that order; rank 0 then overwrites the first at once (a send is a copy,
// so nothing waits: two ranks waiting for each other to receive would
// deadlock), and rank 1 still gets what was sent.
TEST(PipelineExecutor, SendAndRecvBetweenTwoRanks) {
  PlanBuilder b = ppBuilder();
  int a = b.buffer("a", F64, {3}, ACTIVATION);
  int a2 = b.buffer("a2", F64, {3}, ACTIVATION);
  int ids = b.buffer("ids", I32, {2}, INPUT);
  int q = b.buffer("q", F64, {3}, ACTIVATION);
  int q2 = b.buffer("q2", F64, {2}, ACTIVATION);
  int got = b.buffer("got", F64, {3}, ACTIVATION);
  int got2 = b.buffer("got2", F64, {3}, ACTIVATION);
  int gotIds = b.buffer("got.ids", I32, {2}, INPUT);
  // Bytes of a under another name.
  int alias = b.buffer("a.alias", F64, {2}, ACTIVATION);
  b.plan.mutable_buffers(alias)->set_offset(b.plan.buffers(a).offset() + 8);
  Function *f = b.function("send");
  p2p(b.add(f, SEND, {a}, {}), +1);
  p2p(b.add(f, SEND, {a2}, {}), +1);
  p2p(b.add(f, SEND, {ids}, {}), +1);
  b.add(f, ADD, {q, q}, {q}); // no send reads q
  b.add(f, ZERO, {}, {a});    // the first send reads a
  f = b.function("recv");
  p2p(b.add(f, RECV, {}, {got}), -1);
  p2p(b.add(f, RECV, {}, {got2}), -1);
  p2p(b.add(f, RECV, {}, {gotIds}), -1);
  f = b.function("send.alias");
  p2p(b.add(f, SEND, {a}, {}), +1);
  b.add(f, ADD, {q2, q2}, {alias});
  f = b.function("recv.one");
  p2p(b.add(f, RECV, {}, {got}), -1);

  TwoRanks ranks;
  ASSERT_TRUE(ranks.create(b.plan).ok());
  exec::Executor &e0 = *ranks.rank[0], &e1 = *ranks.rank[1];
  ASSERT_TRUE(e0.Write(a, {1.5, -2, 3}).ok());
  ASSERT_TRUE(e0.Write(a2, {4, 5, 6.25}).ok());
  ASSERT_TRUE(e0.Write(ids, {7, 123456}).ok());
  ASSERT_TRUE(e0.Write(q, {1, 1, 1}).ok());
  ASSERT_TRUE(e0.Write(q2, {1, 1}).ok());
  auto [s0, s1] = runBoth(ranks, "send", "recv");
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  EXPECT_EQ(*e1.Read(got), std::vector<double>({1.5, -2, 3}));
  EXPECT_EQ(*e1.Read(got2), std::vector<double>({4, 5, 6.25}));
  EXPECT_EQ(*e1.Read(gotIds), std::vector<double>({7, 123456}));
  EXPECT_EQ(*e0.Read(a), std::vector<double>({0, 0, 0}));
  EXPECT_EQ(*e0.Read(q), std::vector<double>({2, 2, 2}));
  EXPECT_EQ(ranks.comm0.sends, 3);
  // A send is a copy: writing its bytes right after (the ZERO of a) does not
  // wait for the receiver, and the receiver gets what was sent.
  EXPECT_EQ(ranks.comm0.waits, 0);
  EXPECT_EQ(ranks.comm1.receives, 3);

  // So is a write to the sent bytes under another buffer's name.
  ASSERT_TRUE(e0.Write(a, {9, 8, 7}).ok());
  std::tie(s0, s1) = runBoth(ranks, "send.alias", "recv.one");
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  EXPECT_EQ(*e1.Read(got), std::vector<double>({9, 8, 7}));
  EXPECT_EQ(*e0.Read(a), std::vector<double>({9, 2, 2}));
  EXPECT_EQ(ranks.comm0.waits, 0);
  ASSERT_TRUE(e0.WaitSends().ok());
  EXPECT_EQ(ranks.comm0.waits, 1);

  // A peer outside the axis is the communicator's error.
  std::tie(s0, s1) = runBoth(ranks, "recv.one", "send.alias");
  EXPECT_EQ(s0.code(), absl::StatusCode::kOutOfRange) << s0;
  EXPECT_NE(s0.message().find("no rank at offset -1 along 'pp' from rank 0"),
            absl::string_view::npos)
      << s0;
}

// A send from a slot sends that slot's copy, as it was when sent, whatever
// is written to either copy afterwards.
TEST(PipelineExecutor, SendsFromSlots) {
  PlanBuilder b = ppBuilder();
  int h = b.buffer("h", F32, {2}, ACTIVATION, 2);
  int got = b.buffer("got", F32, {2}, ACTIVATION);
  p2p(b.add(b.function("send"), SEND, {h}, {}), +1);
  p2p(b.add(b.function("recv"), RECV, {}, {got}), -1);
  TwoRanks ranks;
  ASSERT_TRUE(ranks.create(b.plan).ok());
  exec::Executor &e0 = *ranks.rank[0], &e1 = *ranks.rank[1];
  ASSERT_TRUE(e0.Write(h, {1, 2}, 0).ok());
  ASSERT_TRUE(e0.Write(h, {3, 4}, 1).ok());
  std::thread receiver([&] { ASSERT_TRUE(e1.Run("recv", {}).ok()); });
  ASSERT_TRUE(e0.Run("send", {}, 1).ok());
  ASSERT_TRUE(e0.Write(h, {5, 6}, 0).ok());
  ASSERT_TRUE(e0.Write(h, {7, 8}, 1).ok());
  EXPECT_EQ(ranks.comm0.waits, 0); // the message is a copy
  ASSERT_TRUE(e0.WaitSends().ok());
  receiver.join();
  EXPECT_EQ(*e1.Read(got), std::vector<double>({3, 4}));
}

//===-- GRAD_NORM's replicated copies -------------------------------------===//

// Over the group "pp" of two ranks: each rank's split gradient counts whole;
// a replicated one counts / replicated_copies (default: the group's size).
TEST(PipelineExecutor, GradNormReplicatedCopies) {
  PlanBuilder b = ppBuilder();
  int g = b.buffer("g", F64, {3}, GRADIENT);
  int r = b.buffer("r", F64, {2}, GRADIENT);
  int norms[3], scales[3];
  for (int k = 0; k < 3; ++k) {
    norms[k] = b.buffer("norm", F64, {}, WORKSPACE);
    scales[k] = b.buffer("scale", F64, {}, WORKSPACE);
  }
  Function *f = b.function("norms");
  for (int k = 0; k < 3; ++k) {
    Instruction *gn = b.add(f, GRAD_NORM, {g, r}, {norms[k], scales[k]});
    gn->add_group("pp");
    (*gn->mutable_int_attrs())["split_inputs"] = 1;
    (*gn->mutable_float_attrs())["max_norm"] = 1.0;
    if (k > 0)
      (*gn->mutable_int_attrs())["replicated_copies"] = k;
  }
  TwoRanks ranks;
  ASSERT_TRUE(ranks.create(b.plan).ok());
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(ranks.rank[k]->Write(g, values(3, 10 + k)).ok());
    ASSERT_TRUE(ranks.rank[k]->Write(r, values(2, 20 + k)).ok());
  }
  auto [s0, s1] = ranks.run("norms");
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  double split = 0, replicated = 0;
  for (int k = 0; k < 2; ++k) {
    for (double x : values(3, 10 + k))
      split += x * x;
    for (double x : values(2, 20 + k))
      replicated += x * x;
  }
  // Default: the group's 2 ranks; then 1 copy, then 2 copies.
  double want[3] = {std::sqrt(split + replicated / 2),
                    std::sqrt(split + replicated),
                    std::sqrt(split + replicated / 2)};
  for (int rank = 0; rank < 2; ++rank)
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR((*ranks.rank[rank]->Read(norms[k]))[0], want[k],
                  1e-12 * want[k])
          << "rank " << rank << " norm " << k;
      absl::StatusOr<cpu::GradClip> clip = cpu::computeGradClip(want[k], 1.0);
      ASSERT_TRUE(clip.ok());
      EXPECT_NEAR((*ranks.rank[rank]->Read(scales[k]))[0], clip->scale, 1e-12);
    }
}

//===-- The trainer -------------------------------------------------------===//

std::string tempDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "/braid-pipeline-" + name;
  std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

struct TrainRun {
  absl::Status status;
  std::vector<exec::StepRecord> records;
  std::string log;
};

TrainRun trainSerial(const Plan &plan, exec::TrainerOptions options) {
  TrainRun run;
  std::ostringstream log;
  options.log = &log;
  run.status = exec::Train(plan, options, &run.records);
  run.log = log.str();
  return run;
}

/// Trains `plan` on two ranks, two threads; rank 0 logs.
std::array<TrainRun, 2> trainOnTwoRanks(const Plan &plan,
                                   exec::TrainerOptions options) {
  PairExchange exchange;
  PairCommunicator comm0(exchange, 0), comm1(exchange, 1);
  std::array<TrainRun, 2> runs;
  std::ostringstream log;
  std::thread other([&] {
    exec::TrainerOptions o = options;
    o.comm = &comm1;
    runs[1].status = exec::Train(plan, o, &runs[1].records);
  });
  exec::TrainerOptions o = options;
  o.comm = &comm0;
  o.log = &log;
  runs[0].status = exec::Train(plan, o, &runs[0].records);
  other.join();
  runs[0].log = log.str();
  return runs;
}

/// The tensors of a safetensors file, by name.
std::map<std::string, std::vector<float>> readTensors(const std::string &path) {
  std::map<std::string, std::vector<float>> out;
  absl::StatusOr<ckpt::SafetensorsFile> file =
      ckpt::SafetensorsFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok())
    return out;
  for (const std::string &name : file->names()) {
    absl::StatusOr<ckpt::TensorInfo> info = file->Info(name);
    std::vector<float> &v = out[name];
    v.resize(info->numElements);
    EXPECT_TRUE(file->ReadAsFloat32(name, absl::MakeSpan(v)).ok());
  }
  return out;
}

void expectSameParameters(const std::string &want, const std::string &got) {
  std::map<std::string, std::vector<float>> a = readTensors(want),
                                            b = readTensors(got);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), a.size());
  for (const auto &[name, values] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    ASSERT_EQ(b[name].size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(b[name][i], values[i], 1e-5 * std::max(1.0f, std::fabs(values[i])))
          << name << " element " << i;
  }
}

class PipelineTrainer : public ::testing::TestWithParam<const char *> {};

// The two-stage plan, trained by two ranks, is the whole model: the same
// losses and gradient norms (the norm's squares are summed in another
// order, and the clipping scale follows it), and the same parameters, which
// rank 0 writes in one file with the other stage's.
TEST_P(PipelineTrainer, TrainsLikeTheWholeModel) {
  std::string schedule = GetParam();
  std::string dir = tempDir(schedule);
  exec_test::TinyModel model;
  ASSERT_TRUE(exec_test::writeTinyDataset(dir + "/data", model.vocab).ok());
  Plan serial = exec_test::tinySerialPlan(model);
  Plan pipelined = exec_test::tinyPipelinePlan(model, schedule);
  ASSERT_EQ(ValidatePlan(serial).message(), "");
  ASSERT_EQ(ValidatePlan(pipelined).message(), "");

  exec::TrainerOptions options;
  options.dataPrefix = dir + "/data";
  options.saveParams = dir + "/serial.safetensors";
  TrainRun want = trainSerial(serial, options);
  ASSERT_TRUE(want.status.ok()) << want.status;
  ASSERT_EQ(want.records.size(), 3u);
  options.saveParams = dir + "/pipeline.safetensors";
  std::array<TrainRun, 2> got = trainOnTwoRanks(pipelined, options);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  ASSERT_TRUE(got[1].status.ok()) << got[1].status;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[r].records.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      const exec::StepRecord &w = want.records[k], &g = got[r].records[k];
      // The first step's loss is the same computation; later ones follow
      // parameters clipped by a norm rounded differently.
      if (k == 0) {
        EXPECT_EQ(g.loss, w.loss) << "rank " << r;
      }
      EXPECT_NEAR(g.loss, w.loss, 1e-5 * w.loss) << "rank " << r << " step " << k;
      EXPECT_NEAR(g.gradNorm, w.gradNorm, 1e-5 * w.gradNorm)
          << "rank " << r << " step " << k;
      EXPECT_EQ(g.lr, w.lr);
    }
    // Both ranks report the same values.
    EXPECT_EQ(got[r].records[2].loss, got[0].records[2].loss);
    EXPECT_EQ(got[r].records[2].gradNorm, got[0].records[2].gradNorm);
    // The arena, the largest over the ranks: the largest stage's, touched
    // whole (each stage's fits in one page).
    EXPECT_EQ(got[r].records[2].predictedMemBytes, pipelined.arena_bytes());
    EXPECT_EQ(got[r].records[2].peakMemBytes, pipelined.arena_bytes());
  }
  // Rank 0 reports every rank's own arena.
  for (int s = 0; s < 2; ++s) {
    const int64_t arena = pipelined.pipeline().stages(s).arena_bytes();
    std::string bytes = common::FormatBytes(arena) + " (" +
                        std::to_string(arena) + " B)";
    std::string line = "memory: rank " + std::to_string(s) + " (pp " +
                       std::to_string(s) + ", dp 0, tp 0): predicted " + bytes +
                       ", touched " + bytes + " (100.00 %)\n";
    EXPECT_NE(got[0].log.find(line), std::string::npos) << got[0].log;
  }
  // The norm was clipped, and training moved the loss.
  EXPECT_GT(want.records[0].gradNorm, model.maxNorm);
  EXPECT_LT(want.records[2].loss, want.records[0].loss);
  EXPECT_NE(got[0].log.find("step 3/3"), std::string::npos) << got[0].log;
  expectSameParameters(dir + "/serial.safetensors",
                       dir + "/pipeline.safetensors");

  // Starting from those parameters (--init-from), each stage loads its own.
  std::string ckpt = dir + "/ckpt";
  std::string copy = "mkdir -p '" + ckpt + "' && cp '" + dir +
                     "/serial.safetensors' '" + ckpt + "/model.safetensors'";
  ASSERT_EQ(std::system(copy.c_str()), 0);
  // The config.json is read as braidc reads one; these hand-written plans
  // record no model to compare it with (a warning says so).
  std::ofstream(ckpt + "/config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4,
             "intermediate_size": 16, "num_attention_heads": 1,
             "num_hidden_layers": 1, "vocab_size": 8})";
  options.initFrom = ckpt;
  options.steps = 1;
  options.saveParams = dir + "/serial2.safetensors";
  want = trainSerial(serial, options);
  ASSERT_TRUE(want.status.ok()) << want.status;
  EXPECT_NE(want.log.find("warning: the model of checkpoint " + ckpt +
                          " (config.json) cannot be checked: the plan does "
                          "not record its model"),
            std::string::npos)
      << want.log;
  options.saveParams = dir + "/pipeline2.safetensors";
  got = trainOnTwoRanks(pipelined, options);
  ASSERT_TRUE(got[0].status.ok()) << got[0].status;
  ASSERT_TRUE(got[1].status.ok()) << got[1].status;
  EXPECT_EQ(got[0].records[0].loss, want.records[0].loss);
  EXPECT_EQ(got[1].records[0].loss, want.records[0].loss);
  expectSameParameters(dir + "/serial2.safetensors",
                       dir + "/pipeline2.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineTrainer,
                         ::testing::Values("gpipe", "1f1b"));

// What the trainer refuses: a pipeline without the job's other ranks, a
// stage count that is not the mesh's, a "pp" axis without stages, and
// RunStep on a pipeline.
TEST(PipelineTrainerErrors, Refusals) {
  std::string dir = tempDir("errors");
  exec_test::TinyModel model;
  ASSERT_TRUE(exec_test::writeTinyDataset(dir + "/data", model.vocab).ok());
  exec::TrainerOptions options;
  options.dataPrefix = dir + "/data";
  Plan pipelined = exec_test::tinyPipelinePlan(model, "1f1b");
  absl::Status s = exec::Train(pipelined, options);
  EXPECT_EQ(s.message(), "the plan is for 2 ranks: start it with mpirun -np 2 "
                         "braid-run ... (braid train does)");

  PairExchange exchange;
  PairCommunicator comm(exchange, 0);
  options.comm = &comm;
  Plan wrong = pipelined;
  wrong.mutable_mesh()->set_sizes(0, 3);
  s = exec::Train(wrong, options);
  EXPECT_EQ(s.message(), "the pipeline has 2 stages but mesh axis 'pp' has "
                         "size 3 (expected one rank per stage)");
  wrong = pipelined;
  wrong.mutable_mesh()->set_axes(0, "dp");
  s = exec::Train(wrong, options);
  EXPECT_EQ(s.message(), "the pipeline has 2 stages but the mesh has no axis "
                         "'pp' (expected one of size 2)");

  Plan serial = exec_test::tinySerialPlan(model);
  serial.mutable_mesh()->set_axes(0, "pp");
  serial.mutable_mesh()->set_sizes(0, 2);
  s = exec::Train(serial, options);
  EXPECT_EQ(s.message(), "the mesh has an axis 'pp' of 2 ranks but the plan "
                         "has no pipeline stages for them");

  auto created = exec::Executor::Create(pipelined, &comm);
  ASSERT_TRUE(created.ok()) << created.status();
  absl::StatusOr<double> loss = exec::RunStep(
      **created, 0, 1, [](int64_t) { return absl::OkStatus(); });
  EXPECT_EQ(loss.status().message(),
            "the plan has a pipeline of 2 stages, whose steps RunPipelineStep "
            "runs (not RunStep)");
  // A stage without the buffers the trainer writes.
  Plan noLoss = pipelined;
  for (Buffer &b : *noLoss.mutable_buffers())
    if (b.name() == "loss_grad")
      b.set_name("dloss");
  PairCommunicator last(exchange, 1);
  created = exec::Executor::Create(noLoss, &last);
  ASSERT_TRUE(created.ok()) << created.status();
  loss = exec::RunPipelineStep(**created, 0, 1, [](int64_t, int64_t, int64_t) {
    return absl::OkStatus();
  });
  EXPECT_EQ(loss.status().message(),
            "pipeline stage 1 has no 'loss_grad' buffer to train with");
}

} // namespace
