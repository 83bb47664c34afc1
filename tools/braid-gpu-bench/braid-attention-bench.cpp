//===- braid-attention-bench.cpp - Times attention's tilings -----------===//
//
// braid-attention-bench [--batch B] [--seq S] [--heads H] [--kv-heads G]
//                       [--head-dim D] [--causal 0|1] [--reps N] [--seed S]
//
// Times every tiling of the tensor-core attention (Attention.h's
// attentionForwardTilings and attentionBackwardTilings) in bf16 on one GPU,
// at the 1B benchmark's attention by default (batch 4, sequence 2048, 16
// heads of 128, causal). Each tiling is checked first: its outputs, written
// over a poisoned buffer, against the CUDA-core kernels (float arithmetic
// on the same bf16 inputs) as ||x - ref|| / ||ref||, and a tiling whose
// error passes 1e-2 (bf16 operands land near 3e-3) or leaves an element
// unwritten is marked WRONG. Then it runs `reps` times between CUDA events
// after 3 warm-up runs; the median gives ms and TFLOP/s, with the FLOPs
// the executor's profile counts (runtime/plan/Work.cpp: 4d per score
// forward, 10d per score and 2d per row backward; causal scores are the
// lower triangle's). Then cuDNN's fused attention (CudnnAttention.h), the
// executor's other candidate, the same way where it can be loaded (a line
// says why not). Prints one table; exits 1 on a CUDA error or a wrong
// result.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Attention.h"
#include "runtime/cuda/CudnnAttention.h"
#include "tools/braid-gpu-bench/CountFlag.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace braid;

namespace {

using bf16 = __nv_bfloat16;

int fail(const std::string &message) {
  std::fprintf(stderr, "braid-attention-bench: error: %s\n", message.c_str());
  return 1;
}

/// Stops the program with `what` and the error where a CUDA call failed.
void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "braid-attention-bench: error: %s: %s\n", what,
                 cudaGetErrorString(e));
    std::exit(1);
  }
}

/// A device buffer of n T.
template <typename T> struct DeviceBuffer {
  T *ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    check(cudaMalloc(reinterpret_cast<void **>(&ptr), n * sizeof(T)),
          "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  /// Every byte 0xff: NaN in bf16 and float, which a written element is not.
  void poison() { check(cudaMemset(ptr, 0xff, n * sizeof(T)), "cudaMemset"); }
  std::vector<float> host() const {
    std::vector<T> h(n);
    check(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, bf16>)
        out[i] = __bfloat162float(h[i]);
      else
        out[i] = float(h[i]);
    }
    return out;
  }
};

/// Uniform values in [-1, 1) from a counter hash (splitmix64), rounded to
/// bf16, copied to a new device buffer.
void fillUniform(DeviceBuffer<bf16> &b, uint64_t seed) {
  std::vector<bf16> h(b.n);
  for (size_t i = 0; i < b.n; ++i) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    h[i] = __float2bfloat16(float(double(z >> 11) * 0x1.0p-52 - 1.0));
  }
  check(cudaMemcpy(b.ptr, h.data(), b.n * sizeof(bf16), cudaMemcpyHostToDevice),
        "cudaMemcpy");
}

/// ||x - ref|| / ||ref||, or infinity where x has a NaN (an unwritten
/// element of a poisoned buffer).
double relativeError(const std::vector<float> &x,
                     const std::vector<float> &ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]))
      return INFINITY;
    diff += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

/// The median milliseconds of `reps` runs of `run` after 3 warm-up runs,
/// each between two events on the default stream.
double medianMs(int reps, const std::function<cudaError_t()> &run) {
  for (int k = 0; k < 3; ++k)
    check(run(), "warm-up launch");
  cudaEvent_t begin, end;
  check(cudaEventCreate(&begin), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  std::vector<float> ms(static_cast<size_t>(reps));
  for (float &t : ms) {
    check(cudaEventRecord(begin, nullptr), "cudaEventRecord");
    check(run(), "timed launch");
    check(cudaEventRecord(end, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(end), "the timed run");
    check(cudaEventElapsedTime(&t, begin, end), "cudaEventElapsedTime");
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int64_t batch = 4, seq = 2048, heads = 16, kvHeads = 16, headDim = 128,
          causal = 1, reps = 20, seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string error;
    if (countFlag(argc, argv, i, "--batch", batch, error) ||
        countFlag(argc, argv, i, "--seq", seq, error) ||
        countFlag(argc, argv, i, "--heads", heads, error) ||
        countFlag(argc, argv, i, "--kv-heads", kvHeads, error) ||
        countFlag(argc, argv, i, "--head-dim", headDim, error) ||
        countFlag(argc, argv, i, "--causal", causal, error) ||
        countFlag(argc, argv, i, "--reps", reps, error) ||
        countFlag(argc, argv, i, "--seed", seed, error)) {
      if (!error.empty())
        return fail(error);
      continue;
    }
    return fail(std::string("unexpected argument ") + argv[i]);
  }
  if (batch < 1 || seq < 1 || heads < 1 || kvHeads < 1 || reps < 1 ||
      heads % kvHeads != 0)
    return fail("batch, seq, heads, kv-heads and reps must be at least 1, "
                "heads a multiple of kv-heads");
  if (causal > 1)
    return fail("--causal is 0 or 1");
  cuda::AttentionShape s{};
  s.batch = batch;
  s.seq = seq;
  s.heads = heads;
  s.kvHeads = kvHeads;
  s.headDim = headDim;
  s.scale = 1.0 / std::sqrt(double(headDim));
  s.causal = causal != 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return fail("no CUDA device");

  const size_t qn = size_t(batch * seq * heads * headDim);
  const size_t kvn = size_t(batch * seq * kvHeads * headDim);
  const size_t rows = size_t(batch * heads * seq);
  DeviceBuffer<bf16> q(qn), k(kvn), v(kvn), dout(qn), out(qn), dq(qn), dk(kvn),
      dv(kvn);
  DeviceBuffer<float> lse(rows),
      workspace(size_t(cuda::attentionBackwardWorkspaceBytes(s)) /
                sizeof(float));
  fillUniform(q, uint64_t(seed) * 4);
  fillUniform(k, uint64_t(seed) * 4 + 1);
  fillUniform(v, uint64_t(seed) * 4 + 2);
  fillUniform(dout, uint64_t(seed) * 4 + 3);
  if (!cuda::attentionBackwardOnTensorCores(
          q.ptr, k.ptr, v.ptr, out.ptr, dout.ptr, dq.ptr, dk.ptr, dv.ptr, s))
    return fail("the tensor-core kernels do not take head dimension " +
                std::to_string(headDim));

  // The references: the CUDA-core kernels, in float on the bf16 inputs.
  check(cuda::attentionForward<bf16>(q.ptr, k.ptr, v.ptr, s, out.ptr, lse.ptr,
                                     nullptr),
        "the CUDA-core forward");
  check(cudaDeviceSynchronize(), "the CUDA-core forward");
  const std::vector<float> refOut = out.host(), refLse = lse.host();
  check(cuda::attentionBackward<bf16>(q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr,
                                      dout.ptr, s, dq.ptr, dk.ptr, dv.ptr,
                                      workspace.ptr, nullptr),
        "the CUDA-core backward");
  check(cudaDeviceSynchronize(), "the CUDA-core backward");
  const std::vector<float> refDq = dq.host(), refDk = dk.host(),
                           refDv = dv.host();

  double scores =
      double(batch) * double(heads) *
      (causal ? double(seq) * double(seq + 1) / 2 : double(seq) * double(seq));
  const double forwardFlops = 4 * double(headDim) * scores;
  const double backwardFlops =
      10 * double(headDim) * scores + 2 * double(headDim) * double(rows);
  constexpr double kTolerance = 1e-2;
  bool wrong = false;

  std::printf("attention bf16: batch %lld, seq %lld, heads %lld/%lld, head "
              "dim %lld, %s; median of %lld runs\n",
              (long long)batch, (long long)seq, (long long)heads,
              (long long)kvHeads, (long long)headDim,
              causal ? "causal" : "not causal", (long long)reps);
  std::printf("%-9s %-6s %-48s %10s %9s %10s\n", "pass", "tiling", "shape",
              "ms", "TFLOP/s", "rel.error");
  const std::vector<cuda::AttentionForwardTiling> forward =
      cuda::attentionForwardTilings();
  for (int t = 0; t < int(forward.size()); ++t) {
    out.poison();
    lse.poison();
    check(cuda::attentionForwardTensorCores(q.ptr, k.ptr, v.ptr, s, out.ptr,
                                            lse.ptr, nullptr, t),
          "the forward");
    check(cudaDeviceSynchronize(), "the forward");
    const double error = std::max(relativeError(out.host(), refOut),
                                  relativeError(lse.host(), refLse));
    const bool ok = error <= kTolerance;
    wrong |= !ok;
    const double ms = medianMs(int(reps), [&] {
      return cuda::attentionForwardTensorCores(q.ptr, k.ptr, v.ptr, s, out.ptr,
                                               lse.ptr, nullptr, t);
    });
    const std::string shape =
        std::to_string(forward[t].rowsPerWarp) + " rows/warp, " +
        std::to_string(forward[t].keysPerTile) + " keys/tile";
    std::printf("%-9s %-6d %-48s %10.3f %9.1f %10.2e%s\n", "forward", t,
                shape.c_str(), ms, forwardFlops / (ms * 1e-3) / 1e12, error,
                ok ? "" : " WRONG");
  }
  // The backward reads the reference forward's output and log-sum-exp.
  check(cuda::attentionForward<bf16>(q.ptr, k.ptr, v.ptr, s, out.ptr, lse.ptr,
                                     nullptr),
        "the CUDA-core forward");
  const std::vector<cuda::AttentionBackwardTiling> backward =
      cuda::attentionBackwardTilings();
  for (int t = 0; t < int(backward.size()); ++t) {
    dq.poison();
    dk.poison();
    dv.poison();
    auto run = [&] {
      return cuda::attentionBackwardTensorCores(
          q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, dout.ptr, s, dq.ptr, dk.ptr,
          dv.ptr, workspace.ptr, nullptr, t);
    };
    check(run(), "the backward");
    check(cudaDeviceSynchronize(), "the backward");
    const double error = std::max({relativeError(dq.host(), refDq),
                                   relativeError(dk.host(), refDk),
                                   relativeError(dv.host(), refDv)});
    const bool ok = error <= kTolerance;
    wrong |= !ok;
    const double ms = medianMs(int(reps), run);
    const std::string shape =
        std::to_string(backward[t].keysPerBlock) + " keys/block, " +
        std::to_string(backward[t].queryTileAt(headDim)) + " query rows/tile" +
        (backward[t].dqByAtomics ? ", dq atomic" : "");
    std::printf("%-9s %-6d %-48s %10.3f %9.1f %10.2e%s\n", "backward", t,
                shape.c_str(), ms, backwardFlops / (ms * 1e-3) / 1e12, error,
                ok ? "" : " WRONG");
  }
  // cuDNN's fused attention, checked and timed the same way.
  absl::StatusOr<std::unique_ptr<cuda::CudnnAttention>> cudnn =
      cuda::CudnnAttention::Create();
  if (!cudnn.ok()) {
    std::printf("cudnn: not timed (%s)\n",
                std::string(cudnn.status().message()).c_str());
    return wrong ? 1 : 0;
  }
  const auto type = cuda::CudnnAttention::Type::BF16;
  absl::StatusOr<int64_t> forwardBytes = (*cudnn)->Prepare(s, type, false);
  absl::StatusOr<int64_t> backwardBytes = (*cudnn)->Prepare(s, type, true);
  if (!forwardBytes.ok() || !backwardBytes.ok())
    return fail("cuDNN's attention graphs: " +
                std::string((forwardBytes.ok() ? backwardBytes.status()
                                               : forwardBytes.status())
                                .message()));
  DeviceBuffer<uint8_t> cudnnWorkspace(
      size_t(std::max<int64_t>({*forwardBytes, *backwardBytes, 1})));
  const std::string version = (*cudnn)->Version();
  auto cudnnStatus = [](const absl::Status &st) {
    if (!st.ok())
      fail("cuDNN: " + std::string(st.message()));
    return st.ok() ? cudaSuccess : cudaErrorUnknown;
  };
  auto cudnnForward = [&] {
    return cudnnStatus((*cudnn)->Forward(q.ptr, k.ptr, v.ptr, s, type, out.ptr,
                                         lse.ptr, cudnnWorkspace.ptr, nullptr));
  };
  out.poison();
  lse.poison();
  check(cudnnForward(), "cuDNN's forward");
  check(cudaDeviceSynchronize(), "cuDNN's forward");
  double error = std::max(relativeError(out.host(), refOut),
                          relativeError(lse.host(), refLse));
  bool ok = error <= kTolerance;
  wrong |= !ok;
  double ms = medianMs(int(reps), cudnnForward);
  std::printf("%-9s %-6s %-48s %10.3f %9.1f %10.2e%s\n", "forward", "cudnn",
              version.c_str(), ms, forwardFlops / (ms * 1e-3) / 1e12, error,
              ok ? "" : " WRONG");
  // The backward from the reference forward's output and log-sum-exp.
  check(cuda::attentionForward<bf16>(q.ptr, k.ptr, v.ptr, s, out.ptr, lse.ptr,
                                     nullptr),
        "the CUDA-core forward");
  auto cudnnBackward = [&] {
    return cudnnStatus((*cudnn)->Backward(q.ptr, k.ptr, v.ptr, out.ptr,
                                          lse.ptr, dout.ptr, s, type, dq.ptr,
                                          dk.ptr, dv.ptr, cudnnWorkspace.ptr,
                                          nullptr));
  };
  dq.poison();
  dk.poison();
  dv.poison();
  check(cudnnBackward(), "cuDNN's backward");
  check(cudaDeviceSynchronize(), "cuDNN's backward");
  error = std::max({relativeError(dq.host(), refDq),
                    relativeError(dk.host(), refDk),
                    relativeError(dv.host(), refDv)});
  ok = error <= kTolerance;
  wrong |= !ok;
  ms = medianMs(int(reps), cudnnBackward);
  std::printf("%-9s %-6s %-48s %10.3f %9.1f %10.2e%s\n", "backward", "cudnn",
              version.c_str(), ms, backwardFlops / (ms * 1e-3) / 1e12, error,
              ok ? "" : " WRONG");
  return wrong ? 1 : 0;
}
