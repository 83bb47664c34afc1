//===- CudaExecutorTest.cpp - A plan's steps on the GPU against the CPU ---===//
//
// tiny-llama's plan (compiled by braidc at build time) trained for a few
// steps on the CPU executor and on the CUDA executor from the same
// parameters and data: in fp32 the losses agree within 1e-4 relative and
// the parameters after the last step within 1e-4 of their largest
// magnitude; the mixed-precision (bf16) plan's losses agree with the fp32
// CPU run within 2e-2 relative (the acceptance of the CUDA backend).
//
// What the executor refuses (several ranks without a communicator, an
// invalid plan) is checked without a device; the rest skips without one.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/Executor.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include "CudaTestUtil.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace braid;
using namespace braid::cudatest;

namespace {

/// The compiled plan `name` (fp32, bf16, fp16, dp2, fp32-hd64, bf16-hd64,
/// fp16-hd64, gpt2-dropout): from the directory
/// $BRAID_TEST_PLANS when set, else from the build's.
plan::Plan load(const std::string &name) {
  std::string dir;
  if (const char *env = std::getenv("BRAID_TEST_PLANS"))
    dir = env;
#ifdef BRAID_TINY_PLANS
  if (dir.empty())
    dir = BRAID_TINY_PLANS;
#endif
  if (dir.empty()) {
    ADD_FAILURE() << "no plans: set BRAID_TEST_PLANS to the directory of "
                     "fp32.plan, bf16.plan and dp2.plan";
    return plan::Plan();
  }
  std::string path = dir + "/" + name + ".plan";
  absl::StatusOr<plan::Plan> plan = plan::LoadPlanFile(path);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : plan::Plan();
}

/// The parameters' initial values, by name (normal, std 0.02; norm weights
/// 1), and a micro-batch of tokens and targets in the vocabulary.
struct Start {
  std::map<std::string, std::vector<double>> params;
  std::vector<double> tokens, targets;
};

Start startOf(const plan::Plan &plan, uint32_t seed) {
  Start start;
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 0.02);
  int64_t vocab = 0;
  for (const plan::Buffer &b : plan.buffers()) {
    int64_t n = 1;
    for (int64_t d : b.shape())
      n *= d;
    if (b.role() == plan::PARAMETER) {
      std::vector<double> &v = start.params[b.name()];
      v.resize(n);
      for (double &x : v)
        x = b.shape_size() == 1 ? 1.0 + normal(gen) : normal(gen);
      if (b.name().find("embed_tokens") != std::string::npos)
        vocab = b.shape(0);
    }
    if (b.name() == "tokens" || b.name() == "targets")
      (b.name() == "tokens" ? start.tokens : start.targets).resize(n);
  }
  std::uniform_int_distribution<int> token(0, int(std::max<int64_t>(vocab, 1)) -
                                                  1);
  for (auto *v : {&start.tokens, &start.targets})
    for (double &t : *v)
      t = token(gen);
  return start;
}

/// Runs `steps` steps of one micro-batch on `e` (either executor) and
/// returns the losses; `masters` also writes each parameter's values into
/// its master weights (mixed precision); `lossScale` seeds the backward and
/// is divided out by the update (fp16).
template <typename E>
std::vector<double> train(E &e, const Start &start, int steps, bool masters,
                          double lossScale = 1.0) {
  const plan::Plan &plan = e.plan();
  for (const auto &[name, values] : start.params) {
    EXPECT_TRUE(e.Write(e.FindBuffer(name), values).ok()) << name;
    if (masters) {
      EXPECT_TRUE(e.Write(e.FindBuffer("master:" + name), values).ok()) << name;
    }
  }
  EXPECT_TRUE(e.Write(e.FindBuffer("tokens"), start.tokens).ok());
  EXPECT_TRUE(e.Write(e.FindBuffer("targets"), start.targets).ok());
  EXPECT_TRUE(
      e.Write(e.FindBuffer("loss_grad"), std::vector<double>{lossScale}).ok());
  e.SetLossScale(lossScale);
  const plan::StepFunctions &fns = plan.training().step();
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    EXPECT_TRUE(e.Write(e.FindBuffer("lr"), std::vector<double>{1e-3}).ok());
    EXPECT_TRUE(
        e.Write(e.FindBuffer("step"), std::vector<double>{double(step)}).ok());
    exec::StepContext context{1234, uint32_t(step), 0};
    for (const std::string &fn :
         {fns.zero_grads(), fns.micro_step(), fns.update()}) {
      absl::Status s = e.Run(fn, context);
      EXPECT_TRUE(s.ok()) << fn << ": " << s;
    }
    absl::StatusOr<std::vector<double>> loss = e.Read(e.FindBuffer("loss"));
    EXPECT_TRUE(loss.ok()) << loss.status();
    losses.push_back(loss.ok() ? (*loss)[0] : NAN);
  }
  return losses;
}

/// Every parameter of `start` in `got` within `tolerance` of the largest
/// magnitude of its values in `want`.
template <typename A, typename B>
void expectParametersClose(A &want, B &got, const Start &start,
                           double tolerance) {
  for (const auto &[name, values] : start.params) {
    std::vector<double> a = *want.Read(want.FindBuffer(name));
    std::vector<double> b = *got.Read(got.FindBuffer(name));
    double scale = 0;
    for (double v : a)
      scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(b[i], a[i], tolerance * scale) << name << "[" << i << "]";
  }
}

/// Steps in which what a call reads besides the buffers changes from call
/// to call: step s has learning rate 1e-3 / s and loss scale 2^(s mod 3),
/// and micro-batch m of it the samples from 4m (dropout's rows). Returns
/// the losses of each step's last micro-batch.
template <typename E>
std::vector<double> trainChanging(E &e, const Start &start, int steps) {
  const plan::Plan &plan = e.plan();
  for (const auto &[name, values] : start.params)
    EXPECT_TRUE(e.Write(e.FindBuffer(name), values).ok()) << name;
  EXPECT_TRUE(e.Write(e.FindBuffer("tokens"), start.tokens).ok());
  EXPECT_TRUE(e.Write(e.FindBuffer("targets"), start.targets).ok());
  const plan::StepFunctions &fns = plan.training().step();
  const int64_t micros = plan.training().micro_batches();
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    const double scale = std::ldexp(1.0, step % 3);
    EXPECT_TRUE(
        e.Write(e.FindBuffer("lr"), std::vector<double>{1e-3 / step}).ok());
    EXPECT_TRUE(
        e.Write(e.FindBuffer("step"), std::vector<double>{double(step)}).ok());
    EXPECT_TRUE(
        e.Write(e.FindBuffer("loss_grad"), std::vector<double>{scale}).ok());
    e.SetLossScale(scale);
    EXPECT_TRUE(e.Run(fns.zero_grads(), {77, uint32_t(step), 0}).ok());
    for (int64_t m = 0; m < micros; ++m) {
      const std::string &fn = plan::MicroStepFunction(fns, m, micros);
      absl::Status s = e.Run(fn, {77, uint32_t(step), 4 * m});
      EXPECT_TRUE(s.ok()) << fn << ": " << s;
    }
    absl::Status s = e.Run(fns.update(), {77, uint32_t(step), 0});
    EXPECT_TRUE(s.ok()) << s;
    absl::StatusOr<std::vector<double>> loss = e.Read(e.FindBuffer("loss"));
    EXPECT_TRUE(loss.ok()) << loss.status();
    losses.push_back(loss.ok() ? (*loss)[0] : NAN);
  }
  return losses;
}

// Captured graphs replay their kernels with the arguments of the capture:
// what changes between calls (the learning rate, the step, the loss scale,
// dropout's seed, step and rows) is read on the device. tiny-gpt2 with
// dropout, two micro-batches a step, trained with graphs and without: the
// same losses and weights, and the CPU's.
TEST_F(CudaKernels, GraphsReplayWhatChangesFromCallToCall) {
  plan::Plan plan = load("gpt2-dropout");
  ASSERT_EQ(plan.training().micro_batches(), 2);
  Start start = startOf(plan, 11);
  auto cpuExec = exec::Executor::Create(plan);
  ASSERT_TRUE(cpuExec.ok()) << cpuExec.status();
  auto graphs = cuda::Executor::Create(plan);
  ASSERT_TRUE(graphs.ok()) << graphs.status();
  auto eager = cuda::Executor::Create(plan);
  ASSERT_TRUE(eager.ok()) << eager.status();
  (*eager)->SetGraphs(false);
  const int steps = 4;
  std::vector<double> want = trainChanging(**cpuExec, start, steps);
  std::vector<double> got = trainChanging(**graphs, start, steps);
  std::vector<double> without = trainChanging(**eager, start, steps);
  // zero_grads, micro_step and update, each with slot 0.
  EXPECT_EQ((*graphs)->GraphsCaptured(), 3);
  EXPECT_EQ((*eager)->GraphsCaptured(), 0);
  for (int i = 0; i < steps; ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i])) << "step " << i + 1;
    EXPECT_NEAR(got[i], without[i], 1e-6 * std::abs(without[i]))
        << "step " << i + 1;
  }
  expectParametersClose(**eager, **graphs, start, 1e-6);
  std::cout << "gpt2 with dropout, losses (CPU / graphs / without):";
  for (int i = 0; i < steps; ++i)
    std::cout << " " << want[i] << " / " << got[i] << " / " << without[i];
  std::cout << "\n";
}

// Writes of a step's inputs return before their copies run, and ReadLater
// before its copy does: 40 micro-batches of different tokens enqueued
// without the host waiting (more than the executor's staging buffers, so
// on a GPU that lags the host they are reused as their copies finish),
// each one's loss read later, give the losses of the same micro-batches run
// one at a time with Read.
TEST_F(CudaKernels, WritesAndReadsLaterKeepStreamOrder) {
  plan::Plan plan = load("fp32");
  auto e = cuda::Executor::Create(plan);
  ASSERT_TRUE(e.ok()) << e.status();
  cuda::Executor &x = **e;
  Start start = startOf(plan, 13);
  for (const auto &[name, values] : start.params)
    ASSERT_TRUE(x.Write(x.FindBuffer(name), values).ok()) << name;
  ASSERT_TRUE(x.Write(x.FindBuffer("loss_grad"), {1.0}).ok());
  const plan::StepFunctions &fns = plan.training().step();
  const int batches = 40;
  auto inputsOf = [&](int k) {
    Start s = startOf(plan, 100 + uint32_t(k));
    return std::make_pair(s.tokens, s.targets);
  };
  auto enqueue = [&](int k) {
    auto [tokens, targets] = inputsOf(k);
    EXPECT_TRUE(x.Write(x.FindBuffer("tokens"), tokens).ok());
    EXPECT_TRUE(x.Write(x.FindBuffer("targets"), targets).ok());
    EXPECT_TRUE(x.Run(fns.zero_grads(), {1, 1, 0}).ok());
    EXPECT_TRUE(x.Run(fns.micro_step(), {1, 1, 0}).ok());
  };
  std::vector<double> later(batches, NAN);
  for (int k = 0; k < batches; ++k) {
    enqueue(k);
    ASSERT_TRUE(x.ReadLater(x.FindBuffer("loss"), &later[size_t(k)]).ok());
  }
  ASSERT_TRUE(x.Settle().ok());
  for (int k = 0; k < batches; ++k) {
    enqueue(k);
    absl::StatusOr<std::vector<double>> now = x.Read(x.FindBuffer("loss"));
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_EQ(later[size_t(k)], (*now)[0]) << "micro-batch " << k;
  }
  // Micro-batches differ: their losses do too.
  EXPECT_NE(later[0], later[1]);
}

// Profiled or traced calls time each kernel: they run without graphs.
TEST_F(CudaKernels, ProfiledCallsRunWithoutGraphs) {
  plan::Plan plan = load("fp32");
  Start start = startOf(plan, 12);
  auto e = cuda::Executor::Create(plan);
  ASSERT_TRUE(e.ok()) << e.status();
  (*e)->EnableProfile();
  train(**e, start, 2, false);
  EXPECT_EQ((*e)->GraphsCaptured(), 0);
  EXPECT_GT((*e)->KernelProfiles()[plan::LINEAR].calls, 0);
}

TEST_F(CudaKernels, Fp32StepsMatchTheCpu) {
  plan::Plan plan = load("fp32");
  Start start = startOf(plan, 5);
  auto cpuExec = exec::Executor::Create(plan);
  ASSERT_TRUE(cpuExec.ok()) << cpuExec.status();
  auto gpuExec = cuda::Executor::Create(plan);
  ASSERT_TRUE(gpuExec.ok()) << gpuExec.status();
  const int steps = 5;
  std::vector<double> want = train(**cpuExec, start, steps, false);
  std::vector<double> got = train(**gpuExec, start, steps, false);
  for (int i = 0; i < steps; ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i])) << "step " << i + 1;
  // Both sides compute in float, in different orders (the CPU's attention
  // by query blocks through sgemm, the GPU's by tiles): gradients agree to
  // about 1e-6 relative, but AdamW divides each element's moment by its
  // own scale, so an element whose gradient is small against that rounding
  // moves by up to lr a step either way. Measured worst: 1.14e-4 of its
  // tensor's largest value (gate_proj), every other tensor below 0.16e-4.
  expectParametersClose(**cpuExec, **gpuExec, start, 2e-4);
  std::cout << "fp32 losses (CPU / GPU):";
  for (int i = 0; i < steps; ++i)
    std::cout << " " << want[i] << " / " << got[i];
  std::cout << "\n";
}

/// Trains the bf16 or fp16 plan `mixed` on the GPU (with the loss scaled by
/// `lossScale`) and the fp32 plan `fp32` on the CPU from the same start for
/// 5 steps: the losses agree within 2e-2.
void expectMixedFollowsFp32(const std::string &fp32Name,
                            const std::string &mixedName, uint32_t seed,
                            double lossScale = 1.0) {
  plan::Plan fp32 = load(fp32Name);
  plan::Plan mixed = load(mixedName);
  Start start = startOf(fp32, seed);
  auto cpuExec = exec::Executor::Create(fp32);
  ASSERT_TRUE(cpuExec.ok()) << cpuExec.status();
  auto gpuExec = cuda::Executor::Create(mixed);
  ASSERT_TRUE(gpuExec.ok()) << gpuExec.status();
  const int steps = 5;
  std::vector<double> want = train(**cpuExec, start, steps, false);
  std::vector<double> got = train(**gpuExec, start, steps, true, lossScale);
  for (int i = 0; i < steps; ++i)
    EXPECT_NEAR(got[i], want[i], 2e-2 * std::abs(want[i])) << "step " << i + 1;
  std::cout << mixedName << " on the GPU against " << fp32Name
            << " on the CPU, losses:";
  for (int i = 0; i < steps; ++i)
    std::cout << " " << got[i] << " / " << want[i];
  std::cout << "\n";
}

TEST_F(CudaKernels, MixedPrecisionStepsFollowFp32) {
  expectMixedFollowsFp32("fp32", "bf16", 6);
}

TEST_F(CudaKernels, Fp16StepsWithLossScalingFollowFp32) {
  // fp16 weights and activations, the loss scaled by 1024 in backward and
  // divided out by the update.
  expectMixedFollowsFp32("fp32", "fp16", 8, 1024.0);
}

TEST_F(CudaKernels, Fp16OverflowSkipsTheStep) {
  // A loss scale of 2^48 overflows fp16's gradients: the gradient norm is
  // not finite and the update leaves every master weight and moment as it
  // was (the trainer's LossScaler then lowers the scale).
  plan::Plan fp16 = load("fp16");
  Start start = startOf(fp16, 9);
  auto e = cuda::Executor::Create(fp16);
  ASSERT_TRUE(e.ok()) << e.status();
  train(**e, start, 2, true, std::ldexp(1.0, 48));
  absl::StatusOr<std::vector<double>> norm =
      (*e)->Read((*e)->FindBuffer("grad_norm"));
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_FALSE(std::isfinite((*norm)[0])) << (*norm)[0];
  for (const auto &[name, values] : start.params) {
    absl::StatusOr<std::vector<double>> master =
        (*e)->Read((*e)->FindBuffer("master:" + name));
    ASSERT_TRUE(master.ok()) << master.status();
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ((*master)[i], float(values[i])) << name << "[" << i << "]";
    absl::StatusOr<std::vector<double>> m =
        (*e)->Read((*e)->FindBuffer("exp_avg:" + name));
    ASSERT_TRUE(m.ok()) << m.status();
    for (double x : *m)
      ASSERT_EQ(x, 0.0) << name;
  }
}

TEST_F(CudaKernels, TensorCoreAttentionStepsFollowFp32) {
  // Heads of 64 dimensions: the bf16 and fp16 plans' attention runs on
  // tensor cores (forward and backward), over sequences of 80 (a partial
  // tile).
  expectMixedFollowsFp32("fp32-hd64", "bf16-hd64", 7);
  expectMixedFollowsFp32("fp32-hd64", "fp16-hd64", 7, 1024.0);
}

/// Sets BRAID_ATTENTION for the scope, restoring it after.
class AttentionMode {
public:
  explicit AttentionMode(const char *mode) {
    if (const char *old = std::getenv("BRAID_ATTENTION"))
      old_ = old;
    setenv("BRAID_ATTENTION", mode, 1);
  }
  ~AttentionMode() {
    if (old_.empty())
      unsetenv("BRAID_ATTENTION");
    else
      setenv("BRAID_ATTENTION", old_.c_str(), 1);
  }

private:
  std::string old_;
};

std::string notesOf(const cuda::Executor &e) {
  std::string all;
  for (const std::string &line : e.KernelNotes())
    all += line + "\n";
  return all;
}

TEST_F(CudaKernels, CudnnAttentionStepsFollowFp32) {
  // BRAID_ATTENTION=cudnn: cuDNN's fused attention forward and backward in
  // every step, where the build and the machine have cuDNN.
  absl::StatusOr<std::unique_ptr<cuda::CudnnAttention>> cudnn =
      cuda::CudnnAttention::Create();
  if (!cudnn.ok())
    GTEST_SKIP() << cudnn.status().message();
  AttentionMode mode("cudnn");
  auto e = cuda::Executor::Create(load("bf16-hd64"));
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string notes = notesOf(**e);
  std::cout << notes;
  EXPECT_NE(notes.find((*cudnn)->Version()), std::string::npos) << notes;
  expectMixedFollowsFp32("fp32-hd64", "bf16-hd64", 7);
  expectMixedFollowsFp32("fp32-hd64", "fp16-hd64", 7, 1024.0);
}

TEST_F(CudaKernels, AttentionModeIsChecked) {
  {
    AttentionMode mode("fastest");
    auto e = cuda::Executor::Create(load("bf16-hd64"));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("BRAID_ATTENTION"), std::string::npos)
        << e.status();
  }
  {
    AttentionMode mode("braid");
    auto e = cuda::Executor::Create(load("bf16-hd64"));
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_NE(notesOf(**e).find("Braid's kernels (BRAID_ATTENTION=braid)"),
              std::string::npos)
        << notesOf(**e);
  }
  if (!cuda::CudnnAttention::Create().ok()) {
    // Asked for and absent: refused, saying why.
    AttentionMode mode("cudnn");
    auto e = cuda::Executor::Create(load("bf16-hd64"));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("BRAID_ATTENTION=cudnn"),
              std::string::npos)
        << e.status();
  }
  // fp32 plans keep Braid's exact kernels and say nothing.
  AttentionMode mode("cudnn");
  auto e = cuda::Executor::Create(load("fp32-hd64"));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(notesOf(**e), "");
}

#ifdef BRAID_CUDA_EMULATION
TEST_F(CudaKernels, APlanLargerThanTheGpuIsRefused) {
  // The emulated device with 2 MB: the plan's arena alone is larger.
  plan::Plan fp32 = load("fp32");
  ASSERT_GT(fp32.arena_bytes(), 2000000);
  setenv("BRAID_CUDA_EMULATION_MEMORY", "2000000", 1);
  auto e = cuda::Executor::Create(fp32);
  unsetenv("BRAID_CUDA_EMULATION_MEMORY");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(e.status().message().find("and the device has 0.002 GB free of "
                                      "0.002 GB: compile it for a smaller "
                                      "micro-batch"),
            std::string::npos)
      << e.status();
}
#endif

// Checked before any device call, so these run without a GPU.
TEST(CudaExecutor, RefusesWhatItCannotRun) {
  // A plan for several ranks without their communicator.
  plan::Plan plan = load("dp2");
  auto e = cuda::Executor::Create(plan);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  const char *why = "the plan is for 2 ranks and the CUDA executor was given "
                    "no communicator on device memory (NCCL's)";
  EXPECT_NE(e.status().message().find(why), std::string::npos) << e.status();
  // An invalid plan gets the loader's error.
  plan::Plan invalid = load("fp32");
  invalid.mutable_functions(0)->mutable_body(0)->add_inputs(0);
  e = cuda::Executor::Create(invalid);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("(ZERO, from zero_grads: "
                                      "model.embed_tokens.weight): has 1 "
                                      "inputs and 1 outputs"),
            std::string::npos)
      << e.status();
}

} // namespace
