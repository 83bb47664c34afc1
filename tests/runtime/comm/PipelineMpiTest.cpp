//===- PipelineMpiTest.cpp - Pipeline stages on a 2 x 2 mesh under MPI ----===//
//
// Run by CTest under `mpirun -np 4` on the mesh pp 2 x tp 2: ranks 0 and 1
// are stage 0 (tp 0 and 1), ranks 2 and 3 stage 1. Each rank checks the
// point-to-point messages it receives (from the rank of the other stage with
// its tp coordinate, in the order they were sent), a pipeline plan's SEND,
// RECV and GRAD_NORM on slots against values computed here, and the trainer
// on the two-stage plan of tests/runtime/exec/PipelinePlans.h against the
// whole model trained on the rank alone. Any failing rank fails the job.
//
//===----------------------------------------------------------------------===//

#include "runtime/ckpt/Safetensors.h"
#include "runtime/comm/MpiCommunicator.h"
#include "tests/runtime/comm/MpiTestMain.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Trainer.h"
#include "runtime/plan/PlanLoader.h"

#include "tests/runtime/exec/PipelinePlans.h"
#include "tests/runtime/exec/PlanBuilder.h"

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>

using namespace braid;
using namespace braid::plan;

namespace {

using braid::exec_test::values;

std::unique_ptr<comm::MpiCommunicator> theComm;

/// The job's mesh; its one instruction makes the communicator create the
/// group of both axes at start-up.
Plan meshPlan() {
  exec_test::PlanBuilder b;
  b.plan.mutable_mesh()->set_axes(0, "pp");
  b.plan.mutable_mesh()->set_sizes(0, 2);
  b.plan.mutable_mesh()->add_axes("tp");
  b.plan.mutable_mesh()->add_sizes(2);
  int x = b.buffer("x", F64, {1}, ACTIVATION);
  Instruction *sum = b.add(b.function("sum"), ALL_REDUCE, {x}, {x});
  sum->add_group("pp");
  sum->add_group("tp");
  return b.plan;
}

// Stage 0's rank (0, t) sends three messages to stage 1's rank (1, t), which
// receives them in order and answers with one; a message of another size
// is refused without being consumed; a peer outside the axis is an error.
TEST(PipelineMpi, SendAndRecvAlongPp) {
  int64_t r = theComm->Rank(), p = theComm->Coordinates()[0],
          t = theComm->Coordinates()[1];
  ASSERT_EQ(r, 2 * p + t);
  if (p == 0) {
    std::vector<double> first = {100.0 * r, 100.0 * r + 1};
    std::vector<float> second = {float(r) + 0.5f};
    std::vector<int32_t> third = {int32_t(r), -7, 1 << 30};
    std::vector<double> sized = {1, 2, 3};
    ASSERT_TRUE(theComm->Send("pp", 1, first.data(), 2, F64).ok());
    ASSERT_TRUE(theComm->Send("pp", 1, second.data(), 1, F32).ok());
    ASSERT_TRUE(theComm->Send("pp", 1, third.data(), 3, I32).ok());
    ASSERT_TRUE(theComm->Send("pp", 1, sized.data(), 3, F64).ok());
    // The buffers stay alive until here.
    ASSERT_TRUE(theComm->WaitSends().ok());
    std::vector<double> answer(2);
    ASSERT_TRUE(theComm->Recv("pp", 1, answer.data(), 2, F64).ok());
    EXPECT_EQ(answer, std::vector<double>({-1.0 * (r + 2), 42.0}));
    absl::Status s = theComm->Recv("pp", -1, answer.data(), 2, F64);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(s.message(), "a receive at offset -1 along 'pp' from coordinate "
                           "0: there is no such rank (the axis has 2, expected "
                           "a peer in [0, 2))");
  } else {
    int64_t from = r - 2;
    std::vector<double> first(2);
    std::vector<float> second(1);
    std::vector<int32_t> third(3);
    ASSERT_TRUE(theComm->Recv("pp", -1, first.data(), 2, F64).ok());
    ASSERT_TRUE(theComm->Recv("pp", -1, second.data(), 1, F32).ok());
    ASSERT_TRUE(theComm->Recv("pp", -1, third.data(), 3, I32).ok());
    EXPECT_EQ(first, std::vector<double>({100.0 * from, 100.0 * from + 1}));
    EXPECT_EQ(second[0], float(from) + 0.5f);
    EXPECT_EQ(third, std::vector<int32_t>({int32_t(from), -7, 1 << 30}));
    std::vector<double> sized(3, -1);
    absl::Status s = theComm->Recv("pp", -1, sized.data(), 2, F64);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "the message from offset -1 along 'pp' holds 3 "
                           "elements of F64, expected 2 (the ranks' plans "
                           "disagree)");
    ASSERT_TRUE(theComm->Recv("pp", -1, sized.data(), 3, F64).ok());
    EXPECT_EQ(sized, std::vector<double>({1, 2, 3}));
    std::vector<double> answer = {-1.0 * r, 42.0};
    ASSERT_TRUE(theComm->Send("pp", -1, answer.data(), 2, F64).ok());
    ASSERT_TRUE(theComm->WaitSends().ok());
    s = theComm->Send("pp", 1, answer.data(), 2, F64);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(s.message(), "a send at offset 1 along 'pp' from coordinate 1: "
                           "there is no such rank (the axis has 2, expected "
                           "a peer in [0, 2))");
  }
  absl::Status s = theComm->Send("dp", 1, nullptr, 0, F64);
  EXPECT_EQ(s.message(), "a send along 'dp', which is not a mesh axis");
}

void addCall(Stage *stage, ScheduleStep::Kind kind, int64_t micro,
             int64_t slot) {
  ScheduleStep *s = stage->add_schedule();
  s->set_kind(kind);
  s->set_micro_batch(micro);
  s->set_slot(slot);
}

// A pipeline plan of two stages and two micro-batches on two slots: stage 0
// computes y = x·W0 and sends it; stage 1 receives it, computes z = y·W1
// and sends z back, which stage 0 receives. Then GRAD_NORM over pp x tp:
// each rank's slice g and its stage's replicated r (the same on the stage's
// two tp ranks: replicated_copies = 2).
TEST(PipelineMpi, ExecutorRunsAPipelinePlan) {
  int64_t p = theComm->Coordinates()[0], t = theComm->Coordinates()[1];
  exec_test::PlanBuilder b;
  b.plan = meshPlan();
  b.plan.clear_buffers();
  b.plan.clear_functions();
  auto p2p = [](Instruction *inst, int64_t peer) {
    inst->set_rank_axis("pp");
    (*inst->mutable_int_attrs())["peer"] = peer;
  };
  auto linear = [&](Function *f, int x, int w, int y) {
    (*b.add(f, LINEAR, {x, w}, {y})->mutable_int_attrs())["transpose_w"] = 0;
  };
  int ids[2][7];
  for (int s = 0; s < 2; ++s) {
    // x [2, 3] (s0) / y [2, 4] (s1), W, the result, what comes back.
    int in = b.buffer(s ? "y.received" : "x", F64, {2, s ? 4 : 3}, ACTIVATION,
                      2, s);
    int w = b.buffer(s ? "w1" : "w0", F64, {s ? 4 : 3, s ? 2 : 4}, PARAMETER,
                     0, s);
    int out = b.buffer(s ? "z" : "y", F64, {2, s ? 2 : 4}, ACTIVATION, 2, s);
    int back = b.buffer("z.received", F64, {2, 2}, ACTIVATION, 2, s);
    int g = b.buffer("g", F64, {3}, GRADIENT, 0, s);
    int r = b.buffer("r", F64, {2}, GRADIENT, 0, s);
    int norm = b.buffer("grad_norm", F64, {}, WORKSPACE, 0, s);
    int scale = b.buffer("scale", F64, {}, WORKSPACE, 0, s);
    int id[7] = {in, w, out, back, g, r, norm};
    std::copy(id, id + 7, ids[s]);
    std::string prefix = s ? "s1." : "s0.";
    Function *f = b.function((prefix + "forward").c_str());
    if (s == 0) {
      linear(f, in, w, out);
      p2p(b.add(f, SEND, {out}, {}), +1);
    } else {
      p2p(b.add(f, RECV, {}, {in}), -1);
      linear(f, in, w, out);
    }
    f = b.function((prefix + "backward").c_str());
    if (s == 0)
      p2p(b.add(f, RECV, {}, {back}), +1);
    else
      p2p(b.add(f, SEND, {out}, {}), -1);
    f = b.function((prefix + "update").c_str());
    Instruction *gn = b.add(f, GRAD_NORM, {g, r}, {norm, scale});
    gn->add_group("pp");
    gn->add_group("tp");
    (*gn->mutable_int_attrs())["split_inputs"] = 1;
    (*gn->mutable_int_attrs())["replicated_copies"] = 2;
    (*gn->mutable_float_attrs())["max_norm"] = 1.0;
    Stage *stage = b.plan.mutable_pipeline()->add_stages();
    stage->set_forward(prefix + "forward");
    stage->set_backward(prefix + "backward");
    stage->set_update(prefix + "update");
    stage->set_slots(2);
    // The buffers are laid out one after the other over both stages: each
    // stage's arena ends with its last buffer.
    stage->set_arena_bytes(b.offset);
    for (int64_t m : {0, 1})
      addCall(stage, ScheduleStep::FORWARD, m, m);
    for (int64_t m : {0, 1})
      addCall(stage, ScheduleStep::BACKWARD, m, m);
  }
  Training *training = b.plan.mutable_training();
  training->set_steps(1);
  training->set_micro_batch_size(2);
  training->set_seq_length(1);
  training->set_micro_batches(2);
  absl::StatusOr<Plan> loaded =
      ParsePlanFile(SerializePlanFile(b.plan), "pipeline.plan");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto created = exec::Executor::Create(*loaded, theComm.get());
  ASSERT_TRUE(created.ok()) << created.status();
  exec::Executor &e = **created;
  ASSERT_EQ(exec::StageOf(e), p);

  // Every rank computes every value: x of micro-batch m (per tp rank), W0
  // and W1 (per tp rank too: the tp ranks are independent pipelines here).
  auto x = [&](int64_t m) { return values(6, 100 + 10 * t + m); };
  std::vector<double> w0 = values(12, 200 + t), w1 = values(8, 300 + t);
  auto matmul = [](const std::vector<double> &a, const std::vector<double> &w,
                   int64_t rows, int64_t in, int64_t out) {
    std::vector<double> y(rows * out, 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < out; ++j)
        for (int64_t k = 0; k < in; ++k)
          y[i * out + j] += a[i * in + k] * w[k * out + j];
    return y;
  };
  const int *id = ids[p];
  if (p == 0) {
    ASSERT_TRUE(e.Write(id[1], w0).ok());
    for (int64_t m : {0, 1})
      ASSERT_TRUE(e.Write(id[0], x(m), m).ok());
  } else {
    ASSERT_TRUE(e.Write(id[1], w1).ok());
  }
  ASSERT_TRUE(e.Write(id[4], values(3, 400 + 2 * p + t)).ok());
  ASSERT_TRUE(e.Write(id[5], values(2, 500 + p)).ok());
  const Stage &stage = loaded->pipeline().stages(int(p));
  for (const ScheduleStep &call : stage.schedule()) {
    absl::Status s =
        e.Run(call.kind() == ScheduleStep::FORWARD ? stage.forward()
                                                   : stage.backward(),
              {}, call.slot());
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_TRUE(e.WaitSends().ok());
  absl::Status s = e.Run(stage.update(), {});
  ASSERT_TRUE(s.ok()) << s;

  for (int64_t m : {0, 1}) {
    std::vector<double> y = matmul(x(m), w0, 2, 3, 4);
    std::vector<double> z = matmul(y, w1, 2, 4, 2);
    auto near = [](const std::vector<double> &got,
                   const std::vector<double> &want) {
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::fabs(want[i])));
    };
    if (p == 0) {
      near(*e.Read(id[2], m), y);
      near(*e.Read(id[3], m), z); // came back from stage 1
    } else {
      // Stage 1 received exactly what its stage-0 peer computed.
      near(*e.Read(id[0], m), y);
      near(*e.Read(id[2], m), z);
    }
  }
  double total = 0;
  for (int64_t rank = 0; rank < 4; ++rank)
    for (double v : values(3, 400 + rank))
      total += v * v;
  for (int64_t stage = 0; stage < 2; ++stage)
    for (double v : values(2, 500 + stage))
      total += v * v;
  double want = std::sqrt(total);
  EXPECT_NEAR((*e.Read(id[6]))[0], want, 1e-12 * want);
}

// The trainer on the two-stage plan (pp 2, with tp 2 replicas of each
// stage): every rank's losses and gradient norms are those of the whole
// model trained alone, and rank 0's file holds both stages' parameters.
TEST(PipelineMpi, TrainerMatchesTheWholeModel) {
  int64_t r = theComm->Rank();
  std::string dir = absl::StrCat(::testing::TempDir(), "/braid-pp-mpi-", r);
  std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  ASSERT_EQ(std::system(command.c_str()), 0);
  exec_test::TinyModel model;
  ASSERT_TRUE(exec_test::writeTinyDataset(dir + "/data", model.vocab).ok());
  exec::TrainerOptions options;
  options.dataPrefix = dir + "/data";
  options.threads = 1;
  options.saveParams = dir + "/serial.safetensors";
  std::vector<exec::StepRecord> want, got;
  absl::Status s =
      exec::Train(exec_test::tinySerialPlan(model), options, &want);
  ASSERT_TRUE(s.ok()) << s;
  options.comm = theComm.get();
  options.saveParams = dir + "/pipeline.safetensors";
  s = exec::Train(exec_test::tinyPipelinePlan(model, "1f1b", "tp", 2), options,
                  &got);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k].loss, want[k].loss, 1e-5 * want[k].loss) << k;
    EXPECT_NEAR(got[k].gradNorm, want[k].gradNorm, 1e-5 * want[k].gradNorm)
        << k;
  }
  EXPECT_EQ(got[0].loss, want[0].loss);
  if (r != 0) {
    EXPECT_FALSE(std::ifstream(options.saveParams).good());
    return;
  }
  absl::StatusOr<ckpt::SafetensorsFile> a =
      ckpt::SafetensorsFile::Open(dir + "/serial.safetensors");
  absl::StatusOr<ckpt::SafetensorsFile> b =
      ckpt::SafetensorsFile::Open(options.saveParams);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->names(), b->names());
  ASSERT_EQ(a->names().size(), 2u);
  for (const std::string &name : a->names()) {
    std::vector<float> va(a->Info(name)->numElements),
        vb(b->Info(name)->numElements);
    ASSERT_EQ(va.size(), vb.size());
    ASSERT_TRUE(a->ReadAsFloat32(name, absl::MakeSpan(va)).ok());
    ASSERT_TRUE(b->ReadAsFloat32(name, absl::MakeSpan(vb)).ok());
    for (size_t i = 0; i < va.size(); ++i)
      EXPECT_NEAR(vb[i], va[i], 1e-5 * std::max(1.0f, std::fabs(va[i])))
          << name << " " << i;
  }
}

} // namespace

int main(int argc, char **argv) {
  return braid::comm_test::RunMpiTests(argc, argv, meshPlan(), theComm);
}
