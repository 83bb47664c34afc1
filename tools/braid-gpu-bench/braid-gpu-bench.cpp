//===- braid-gpu-bench.cpp - Times a plan's training steps on one GPU -----===//
//
// braid-gpu-bench PLAN [--steps N] [--warmup W] [--seed S] [--profile P]
//                 [--cuda-graphs on|off]
//
// Runs a one-rank plan on the CUDA executor from random parameters (normal,
// std 0.02; vectors 1) and random tokens, W steps to warm up (cuBLASLt's
// algorithms, the caches), then N steps timed with CUDA events around each
// step (zero_grads, every micro-batch, update), and prints one line per
// timed step and a summary: the median seconds per step, tokens per step
// and tokens/s, the loss of the last step, and the arena and workspace
// bytes. FLOPs, TFLOP/s and MFU are the caller's (bench/gpu_train.sh reads
// the model's FLOPs per token from braidc's report). With --profile P, it
// then runs P more steps with the executor's profiling on (each kernel
// between a pair of CUDA events, so those steps run slower than the timed
// ones) and prints the time per step of each kernel kind, its share, its
// calls and the rate of the work it did (runtime/plan/Work.h's count):
// the per-kernel breakdown of the step. --cuda-graphs off runs the plan's
// functions kernel by kernel rather than as captured graphs (the default:
// cuda::Executor::SetGraphs); the summary says how many were captured.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Executor.h"
#include "runtime/plan/PlanLoader.h"
#include "tools/braid-gpu-bench/CountFlag.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace braid;

namespace {

int fail(const std::string &message) {
  std::cerr << "braid-gpu-bench: error: " << message << "\n";
  return 1;
}

/// Fills `values` with normal(0, 0.02) draws, in chunks of 2^20 over the
/// host's threads, each chunk from its own generator seeded by (seed,
/// stream, chunk): the values depend on neither the thread count nor the
/// order (a 1B-parameter model's billion draws take seconds, not a minute).
void fillNormal(std::vector<double> &values, int64_t seed, int64_t stream) {
  constexpr size_t kChunk = size_t(1) << 20;
  const size_t chunks = (values.size() + kChunk - 1) / kChunk;
  const size_t threads = std::max<size_t>(
      1, std::min<size_t>(chunks, std::thread::hardware_concurrency()));
  auto work = [&](size_t first) {
    for (size_t c = first; c < chunks; c += threads) {
      std::seed_seq seq{uint64_t(seed), uint64_t(stream), uint64_t(c)};
      std::mt19937_64 gen(seq);
      std::normal_distribution<double> normal(0.0, 0.02);
      for (size_t i = c * kChunk; i < std::min(values.size(), (c + 1) * kChunk);
           ++i)
        values[i] = normal(gen);
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t)
    pool.emplace_back(work, t);
  work(0);
  for (std::thread &t : pool)
    t.join();
}

} // namespace

int main(int argc, char **argv) {
  std::string planPath;
  int64_t steps = 20, warmup = 3, seed = 1, profileSteps = 0;
  bool graphs = true;
  const char *usage = "usage: braid-gpu-bench PLAN [--steps N] [--warmup W] "
                      "[--seed S] [--profile P] [--cuda-graphs on|off]";
  for (int i = 1; i < argc; ++i) {
    std::string error;
    if (std::string(argv[i]) == "--cuda-graphs") {
      std::string value = i + 1 < argc ? argv[++i] : "";
      if (value != "on" && value != "off")
        return fail("--cuda-graphs takes on or off, not '" + value + "'");
      graphs = value == "on";
      continue;
    }
    if (countFlag(argc, argv, i, "--steps", steps, error) ||
        countFlag(argc, argv, i, "--warmup", warmup, error) ||
        countFlag(argc, argv, i, "--seed", seed, error) ||
        countFlag(argc, argv, i, "--profile", profileSteps, error)) {
      if (!error.empty())
        return fail(error);
      continue;
    }
    if (argv[i][0] == '-' || !planPath.empty())
      return fail(std::string("unexpected argument ") + argv[i] + "; " + usage);
    planPath = argv[i];
  }
  if (planPath.empty())
    return fail(usage);
  if (steps < 1)
    return fail("--steps must be at least 1");
  absl::StatusOr<plan::Plan> plan = plan::LoadPlanFile(planPath);
  if (!plan.ok())
    return fail(std::string(plan.status().message()));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return fail("no CUDA device");
  absl::StatusOr<std::unique_ptr<cuda::Executor>> created =
      cuda::Executor::Create(*plan);
  if (!created.ok())
    return fail(std::string(created.status().message()));
  cuda::Executor &e = **created;
  e.SetGraphs(graphs);
  // What it chose at load: attention's kernels.
  for (const std::string &note : e.KernelNotes())
    std::printf("kernels: %s\n", note.c_str());

  // Parameters (and their master weights) and a batch of tokens.
  std::mt19937_64 gen{uint64_t(seed)};
  int64_t vocab = 1;
  for (int id = 0; id < plan->buffers_size(); ++id) {
    const plan::Buffer &b = plan->buffers(id);
    if (b.role() != plan::PARAMETER || b.view_of() || b.block_of())
      continue;
    std::vector<double> values(size_t(plan::NumElements(b)), 1.0);
    if (b.shape_size() != 1)
      fillNormal(values, seed, id);
    if (b.name().find("embed_tokens") != std::string::npos)
      vocab = b.shape(0);
    for (int target : {id, e.FindBuffer("master:" + b.name())})
      if (target >= 0)
        if (absl::Status s = e.Write(target, values); !s.ok())
          return fail(std::string(s.message()));
  }
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  for (const char *name : {"tokens", "targets"}) {
    int id = e.FindBuffer(name);
    if (id < 0)
      return fail(std::string("the plan has no buffer '") + name + "'");
    std::vector<double> ids(size_t(plan::NumElements(plan->buffers(id))));
    for (double &t : ids)
      t = double(token(gen));
    if (absl::Status s = e.Write(id, ids); !s.ok())
      return fail(std::string(s.message()));
  }
  const plan::Training &t = plan->training();
  int64_t micros = std::max<int64_t>(t.micro_batches(), 1);
  int lossGrad = e.FindBuffer("loss_grad"), lr = e.FindBuffer("lr"),
      step = e.FindBuffer("step"), loss = e.FindBuffer("loss");
  if (lossGrad < 0 || lr < 0 || step < 0 || loss < 0)
    return fail("the plan lacks loss_grad, lr, step or loss");
  if (absl::Status s = e.Write(lossGrad, {1.0 / double(micros)}); !s.ok())
    return fail(std::string(s.message()));
  if (absl::Status s = e.Write(lr, {1e-4}); !s.ok())
    return fail(std::string(s.message()));
  int64_t tokensPerStep =
      plan::NumElements(plan->buffers(e.FindBuffer("tokens"))) * micros;

  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  // One training step: zero_grads, every micro-batch (the first and last
  // ones' functions when the plan has them), update.
  auto runStep = [&](int64_t k) -> absl::Status {
    if (absl::Status s = e.Write(step, {double(k)}); !s.ok())
      return s;
    exec::StepContext context{uint64_t(seed), uint32_t(k), 0};
    absl::Status s = e.Run(t.step().zero_grads(), context);
    for (int64_t m = 0; s.ok() && m < micros; ++m)
      s = e.Run(plan::MicroStepFunction(t.step(), m, micros), context);
    if (s.ok())
      s = e.Run(t.step().update(), context);
    return s;
  };
  std::vector<double> seconds;
  double lastLoss = 0;
  for (int64_t k = 1; k <= warmup + steps; ++k) {
    cudaEventRecord(begin, e.stream());
    if (absl::Status s = runStep(k); !s.ok())
      return fail(std::string(s.message()));
    cudaEventRecord(end, e.stream());
    if (cudaEventSynchronize(end) != cudaSuccess)
      return fail(std::string("step ") + std::to_string(k) + ": " +
                  cudaGetErrorString(cudaGetLastError()));
    float ms = 0;
    cudaEventElapsedTime(&ms, begin, end);
    absl::StatusOr<std::vector<double>> l = e.Read(loss);
    if (!l.ok())
      return fail(std::string(l.status().message()));
    lastLoss = (*l)[0];
    if (k > warmup) {
      seconds.push_back(ms / 1e3);
      std::printf("step %lld: %.6f s, loss %.5f\n", (long long)(k - warmup),
                  ms / 1e3, lastLoss);
    }
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  if (sorted.size() % 2 == 0)
    median = (median + sorted[sorted.size() / 2 - 1]) / 2;
  std::printf("median step: %.6f s over %zu steps, %lld tokens per step, "
              "%.1f tokens/s, last loss %.5f, arena %lld B, workspace %lld B, "
              "%lld graphs\n",
              median, seconds.size(), (long long)tokensPerStep,
              double(tokensPerStep) / median, lastLoss,
              (long long)e.ArenaBytes(), (long long)e.WorkspaceBytes(),
              (long long)e.GraphsCaptured());
  if (profileSteps == 0)
    return 0;

  e.EnableProfile();
  for (int64_t k = 1; k <= profileSteps; ++k)
    if (absl::Status s = runStep(warmup + steps + k); !s.ok())
      return fail(std::string(s.message()));
  if (absl::Status s = e.Synchronize(); !s.ok())
    return fail(std::string(s.message()));
  const std::vector<exec::Backend::KernelProfile> &profile = e.KernelProfiles();
  if (profile.empty())
    return fail("the executor could not profile (no CUDA events)");
  std::vector<int> kinds;
  double total = 0;
  for (int k = 0; k < int(profile.size()); ++k)
    if (profile[k].calls > 0) {
      kinds.push_back(k);
      total += profile[k].seconds;
    }
  std::sort(kinds.begin(), kinds.end(), [&](int a, int b) {
    return profile[a].seconds > profile[b].seconds;
  });
  double perStep = 1.0 / double(profileSteps);
  std::printf("kernels per step, over %lld profiled steps (%.6f s of "
              "kernels per step):\n",
              (long long)profileSteps, total * perStep);
  std::printf("%-28s %10s %7s %7s %10s %9s\n", "kernel", "ms/step", "share",
              "calls", "TFLOP/s", "GB/s");
  for (int k : kinds) {
    const exec::Backend::KernelProfile &p = profile[k];
    std::string name = plan::Kernel_IsValid(k)
                           ? plan::Kernel_Name(plan::Kernel(k))
                           : "kernel " + std::to_string(k);
    double s = p.seconds > 0 ? p.seconds : 1e-30;
    std::printf("%-28s %10.3f %6.1f%% %7lld %10.1f %9.1f\n", name.c_str(),
                1e3 * p.seconds * perStep, 100 * p.seconds / total,
                (long long)(p.calls / profileSteps), p.flops / s / 1e12,
                p.bytes / s / 1e9);
  }
  return 0;
}
