//===- braid-gpu-calibrate.cpp - Measures one GPU for the cost model ------===//
//
// braid-gpu-calibrate [--max-size N] [--attention-tokens T]
//                     [--attention-hidden H] [--repeats R] [-o FILE]
//
// Measures what the cost model prices a GPU's kernels by, on the GPU this
// runs on, and writes it as a spec::GpuMeasurement (protobuf text, default
// gpu-measurement.textproto), which `braid calibrate --device cuda
// --measured FILE --cluster BASE` turns into a cluster file:
//   - matrix products as the linear layers run them (cuda::Gemm: cuBLASLt,
//     its algorithm tuned at first use, or Braid's few-rows product), bf16
//     and fp32, over a grid of shapes: m (rows) and n = k from 64 to
//     --max-size (default 16384; fp32 to a quarter of it) by powers of two,
//     the product of m rows by a square weight, and the shapes of a decode
//     (1 and 8 rows) — the efficiency curve by product size, not one number;
//   - an elementwise kernel's bandwidth: the addition of two bf16 vectors
//     of 2^28 elements (or what fits in a quarter of the free memory);
//   - a tiny kernel's call time, 1000 calls one after another;
//   - bf16 fused attention, causal, forward and backward, by shape: head
//     dimensions 64 and 128, widths (heads x head dimension) H / 4 and H
//     (--attention-hidden, default 4096), sequences from 128 (or T) up to
//     8192 by powers of two, each over T tokens (--attention-tokens,
//     default 16384; batch T / seq), so that the curve spans a small
//     model's attention to a long-context one's; each the faster of Braid's
//     tensor-core kernels and cuDNN's (where cuDNN loads), as the executor
//     picks at plan load. --attention-tokens 0 leaves attention out.
// Each time is the median of R (default 5) runs between CUDA events after
// one to warm up (cuBLASLt's tuning and cuDNN's graph included there).
// What it does not measure: the collectives between GPUs (the cluster's
// links keep BASE's figures).
//
//===----------------------------------------------------------------------===//

#include "frontends/spec/cluster.pb.h"
#include "runtime/cuda/Attention.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/Kernels.h"
#include "tools/braid-gpu-bench/CountFlag.h"

#include "google/protobuf/text_format.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

using namespace braid;

namespace {

int fail(const std::string &message) {
  std::cerr << "braid-gpu-calibrate: error: " << message << "\n";
  return 1;
}

/// Median milliseconds of `repeats` runs of `run` (each returning whether
/// it was enqueued) between two events, after one to warm up; negative
/// where a run failed.
template <typename Run> double medianMs(int64_t repeats, Run run) {
  if (!run())
    return -1;
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  std::vector<double> times;
  for (int64_t r = 0; r < repeats; ++r) {
    cudaEventRecord(begin, nullptr);
    bool ok = run();
    cudaEventRecord(end, nullptr);
    cudaEventSynchronize(end);
    float ms = 0;
    if (!ok || cudaEventElapsedTime(&ms, begin, end) != cudaSuccess) {
      cudaEventDestroy(begin);
      cudaEventDestroy(end);
      return -1;
    }
    times.push_back(ms);
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// Device memory of `bytes`, freed on scope exit, filled with small
/// random 16-bit words (finite as bf16, fp16, or pairs read as floats).
struct Buffer {
  void *p = nullptr;
  explicit Buffer(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess)
      p = nullptr;
    else
      cuda::fillRandomHalves(p, int64_t(std::max<size_t>(bytes, 256) / 2), 1,
                             nullptr);
  }
  ~Buffer() { cudaFree(p); }
};

/// Times y [m, n] = x [m, k] W [k, n] (the weight stored [out, in], as
/// nn.Linear's) in T; appends it to `out` or says why not.
template <typename T>
bool timeProduct(cuda::Gemm &gemm, int64_t m, int64_t n, int64_t k,
                 int64_t repeats,
                 google::protobuf::RepeatedPtrField<spec::GpuMeasurement::Product>
                     *out) {
  Buffer x(size_t(m * k) * sizeof(T)), w(size_t(k * n) * sizeof(T)),
      y(size_t(m * n) * sizeof(T));
  if (!x.p || !w.p || !y.p) {
    cudaGetLastError();
    std::fprintf(stderr, "  %lld x %lld x %lld: does not fit, skipped\n",
                 (long long)m, (long long)n, (long long)k);
    return true;
  }
  const cpu::LinearShape s{m, k, n, true, 1.0};
  if (absl::Status st = gemm.Prepare<T>(s, false); !st.ok()) {
    std::cerr << "braid-gpu-calibrate: " << st << "\n";
    return false;
  }
  double ms = medianMs(repeats, [&] {
    return gemm.LinearForward<T>(static_cast<const T *>(x.p),
                                 static_cast<const T *>(w.p), nullptr, s,
                                 static_cast<T *>(y.p), nullptr)
        .ok();
  });
  if (ms <= 0)
    return false;
  spec::GpuMeasurement::Product *p = out->Add();
  p->set_m(m);
  p->set_n(n);
  p->set_k(k);
  p->set_seconds(ms * 1e-3);
  std::printf("  %6lld x %6lld x %6lld  %10.4f ms  %8.1f TFLOP/s\n",
              (long long)m, (long long)n, (long long)k, ms,
              2.0 * double(m) * double(n) * double(k) / (ms * 1e-3) / 1e12);
  return true;
}

/// Times bf16 causal attention of shape `s`, forward and backward, with
/// Braid's tensor-core kernels and cuDNN's (when `cudnn`), and appends the
/// faster of each direction to `out`; false on a CUDA error.
bool timeAttention(const cuda::AttentionShape &s, cuda::CudnnAttention *cudnn,
                   int64_t repeats, spec::GpuMeasurement &out) {
  using bf16 = cuda::bf16;
  const size_t qBytes = size_t(s.batch * s.seq * s.heads * s.headDim) * 2,
               kvBytes = size_t(s.batch * s.seq * s.kvHeads * s.headDim) * 2;
  Buffer q(qBytes), k(kvBytes), v(kvBytes), o(qBytes), dout(qBytes),
      dq(qBytes), dk(kvBytes), dv(kvBytes),
      lse(size_t(s.batch * s.heads * s.seq) * 4),
      rows(size_t(cuda::attentionBackwardWorkspaceBytes(s)));
  if (!q.p || !k.p || !v.p || !o.p || !dout.p || !dq.p || !dk.p || !dv.p ||
      !lse.p || !rows.p) {
    cudaGetLastError();
    std::printf("  batch %lld seq %lld: does not fit, skipped\n",
                (long long)s.batch, (long long)s.seq);
    return true;
  }
  auto *Q = static_cast<bf16 *>(q.p), *K = static_cast<bf16 *>(k.p),
       *V = static_cast<bf16 *>(v.p), *O = static_cast<bf16 *>(o.p),
       *dO = static_cast<bf16 *>(dout.p), *dQ = static_cast<bf16 *>(dq.p),
       *dK = static_cast<bf16 *>(dk.p), *dV = static_cast<bf16 *>(dv.p);
  auto *L = static_cast<float *>(lse.p), *R = static_cast<float *>(rows.p);
  if (!cuda::attentionBackwardOnTensorCores(Q, K, V, O, dO, dQ, dK, dV, s)) {
    std::printf("  head dimension %lld: not on the tensor-core kernels, "
                "skipped\n",
                (long long)s.headDim);
    return true;
  }
  double forward = medianMs(repeats, [&] {
    return cuda::attentionForwardTensorCores(Q, K, V, s, O, L, nullptr) ==
           cudaSuccess;
  });
  // The backward on the forward's out and log-sum-exp (left by the runs).
  double backward = medianMs(repeats, [&] {
    return cuda::attentionBackwardTensorCores(Q, K, V, O, L, dO, s, dQ, dK,
                                              dV, R, nullptr) == cudaSuccess;
  });
  if (forward <= 0 || backward <= 0)
    return false;
  std::string forwardBy = "braid", backwardBy = "braid";
  if (cudnn && cuda::CudnnAttentionRefusal(s).empty()) {
    const auto type = cuda::CudnnAttention::Type::BF16;
    absl::StatusOr<int64_t> fBytes = cudnn->Prepare(s, type, false),
                            bBytes = cudnn->Prepare(s, type, true);
    if (fBytes.ok() && bBytes.ok()) {
      Buffer workspace(size_t(std::max<int64_t>(*fBytes, *bBytes)));
      if (workspace.p) {
        double f = medianMs(repeats, [&] {
          return cudnn->Forward(Q, K, V, s, type, O, L, workspace.p, nullptr)
              .ok();
        });
        double b = medianMs(repeats, [&] {
          return cudnn
              ->Backward(Q, K, V, O, L, dO, s, type, dQ, dK, dV, workspace.p,
                         nullptr)
              .ok();
        });
        if (f > 0 && f < forward) {
          forward = f;
          forwardBy = cudnn->Version();
        }
        if (b > 0 && b < backward) {
          backward = b;
          backwardBy = cudnn->Version();
        }
      }
      cudaGetLastError();
    }
  }
  spec::GpuMeasurement::Attention *a = out.add_attention();
  a->set_batch(s.batch);
  a->set_seq(s.seq);
  a->set_heads(s.heads);
  a->set_kv_heads(s.kvHeads);
  a->set_head_dim(s.headDim);
  a->set_causal(s.causal);
  a->set_forward_seconds(forward * 1e-3);
  a->set_backward_seconds(backward * 1e-3);
  a->set_forward_by(forwardBy);
  a->set_backward_by(backwardBy);
  const double scores = double(s.batch) * double(s.heads) * double(s.seq) *
                        double(s.seq + 1) / 2;
  std::printf("  batch %3lld seq %5lld heads %3lld of %3lld  forward %9.4f ms "
              "%7.1f TFLOP/s (%s)  backward %9.4f ms %7.1f TFLOP/s (%s)\n",
              (long long)s.batch, (long long)s.seq, (long long)s.heads,
              (long long)s.headDim, forward,
              4 * double(s.headDim) * scores / (forward * 1e-3) / 1e12,
              forwardBy.c_str(), backward,
              (10 * double(s.headDim) * scores +
               2 * double(s.headDim) * double(s.batch * s.heads * s.seq)) /
                  (backward * 1e-3) / 1e12,
              backwardBy.c_str());
  return true;
}

} // namespace

int main(int argc, char **argv) {
  int64_t maxSize = 16384, repeats = 5, attentionTokens = 16384,
          attentionHidden = 4096;
  std::string outPath = "gpu-measurement.textproto";
  for (int i = 1; i < argc; ++i) {
    std::string error;
    if (std::string(argv[i]) == "-o") {
      if (i + 1 >= argc)
        return fail("-o needs a file");
      outPath = argv[++i];
      continue;
    }
    if (countFlag(argc, argv, i, "--max-size", maxSize, error) ||
        countFlag(argc, argv, i, "--attention-tokens", attentionTokens,
                  error) ||
        countFlag(argc, argv, i, "--attention-hidden", attentionHidden,
                  error) ||
        countFlag(argc, argv, i, "--repeats", repeats, error)) {
      if (!error.empty())
        return fail(error);
      continue;
    }
    return fail(std::string("unexpected argument ") + argv[i] +
                "; usage: braid-gpu-calibrate [--max-size N] "
                "[--attention-tokens T] [--attention-hidden H] [--repeats R] "
                "[-o FILE]");
  }
  if (maxSize < 64)
    return fail("--max-size must be at least 64");
  if (repeats < 1)
    return fail("--repeats must be at least 1");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return fail("no CUDA device");
  cudaDeviceProp props{};
  cudaGetDeviceProperties(&props, 0);
  spec::GpuMeasurement m;
  m.set_device(props.name);
  std::printf("braid-gpu-calibrate on %s\n", props.name);

  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm = cuda::Gemm::Create();
  if (!gemm.ok())
    return fail(std::string(gemm.status().message()));
  // cuBLASLt's candidates timed as at plan load, in a scratch of 1 GiB (or
  // a quarter of what is free).
  size_t freeBytes = 0, totalBytes = 0;
  cudaMemGetInfo(&freeBytes, &totalBytes);
  const size_t scratchBytes = std::min<size_t>(size_t(1) << 30, freeBytes / 4);
  Buffer scratch(scratchBytes);
  if (scratch.p)
    (*gemm)->SetTuning(scratch.p, scratchBytes, nullptr);

  // Sizes 64, 128, ..., maxSize; rows the same, and a decode's 1 and 8.
  std::vector<int64_t> sizes;
  for (int64_t s = 64; s <= maxSize; s *= 2)
    sizes.push_back(s);
  std::printf("bf16 products (m x n x k):\n");
  for (int64_t size : sizes)
    for (int64_t rows : {int64_t(1), int64_t(8), size})
      if (!timeProduct<cuda::bf16>(**gemm, rows, size, size, repeats,
                                   m.mutable_bf16()))
        return fail("timing a bf16 product failed");
  std::printf("fp32 products (m x n x k):\n");
  for (int64_t size : sizes)
    if (size * 4 <= maxSize || size == sizes.front())
      if (!timeProduct<float>(**gemm, size, size, size, repeats,
                              m.mutable_fp32()))
        return fail("timing an fp32 product failed");

  // An addition of bf16 vectors: two read, one written.
  int64_t n = int64_t(1) << 28;
  while (n > 1024 && size_t(3 * n * 2) > freeBytes / 4)
    n /= 2;
  if (maxSize < 1024) // small runs (the emulation's test) stay small
    n = std::min<int64_t>(n, maxSize * maxSize);
  {
    Buffer a(size_t(n) * 2), b(size_t(n) * 2), y(size_t(n) * 2);
    if (!a.p || !b.p || !y.p)
      return fail("no memory for the bandwidth's vectors");
    double ms = medianMs(repeats, [&] {
      return cuda::add(static_cast<const cuda::bf16 *>(a.p),
                       static_cast<const cuda::bf16 *>(b.p), n,
                       static_cast<cuda::bf16 *>(y.p), nullptr) == cudaSuccess;
    });
    if (ms <= 0)
      return fail("timing the addition failed");
    m.set_vector_bytes_per_s(double(3 * n * 2) / (ms * 1e-3));
    std::printf("addition of %lld bf16: %.4f ms, %.1f GB/s\n", (long long)n,
                ms, m.vector_bytes_per_s() / 1e9);
    // A tiny kernel's call: 1000 additions of 256 elements in a row.
    constexpr int kCalls = 1000;
    double calls = medianMs(repeats, [&] {
      for (int c = 0; c < kCalls; ++c)
        if (cuda::add(static_cast<const cuda::bf16 *>(a.p),
                      static_cast<const cuda::bf16 *>(b.p), 256,
                      static_cast<cuda::bf16 *>(y.p), nullptr) != cudaSuccess)
          return false;
      return true;
    });
    if (calls <= 0)
      return fail("timing the tiny kernels failed");
    m.set_kernel_call_s(calls * 1e-3 / kCalls);
    std::printf("a tiny kernel's call: %.2f us\n", m.kernel_call_s() * 1e6);
  }

  // Attention by shape (--attention-tokens 0: none).
  if (attentionTokens > 0) {
    absl::StatusOr<std::unique_ptr<cuda::CudnnAttention>> cudnn =
        cuda::CudnnAttention::Create();
    std::printf("bf16 causal attention, %lld tokens a call (%s):\n",
                (long long)attentionTokens,
                cudnn.ok() ? ("Braid's kernels and " + (*cudnn)->Version())
                                 .c_str()
                           : ("Braid's kernels; no cuDNN: " +
                              std::string(cudnn.status().message()))
                                 .c_str());
    const int64_t lowest = std::min<int64_t>(128, attentionTokens),
                  highest = std::min<int64_t>(8192, attentionTokens);
    std::vector<int64_t> widths = {attentionHidden / 4, attentionHidden};
    widths.erase(std::unique(widths.begin(), widths.end()), widths.end());
    for (int64_t headDim : {int64_t(64), int64_t(128)})
      for (int64_t hidden : widths) {
        if (hidden < headDim || hidden % headDim != 0)
          continue;
        for (int64_t seq = lowest; seq <= highest; seq *= 2) {
          cuda::AttentionShape s{};
          s.batch = attentionTokens / seq;
          s.seq = seq;
          s.heads = s.kvHeads = hidden / headDim;
          s.headDim = headDim;
          s.scale = 1.0 / std::sqrt(double(headDim));
          s.causal = true;
          if (!timeAttention(s, cudnn.ok() ? cudnn->get() : nullptr, repeats,
                             m))
            return fail("timing attention failed");
        }
      }
  }

  std::string text;
  google::protobuf::TextFormat::PrintToString(m, &text);
  std::ofstream out(outPath);
  out << "# braid-gpu-calibrate on " << props.name
      << ": braid calibrate --device cuda --measured " << outPath
      << " --cluster BASE -o CLUSTER.textproto\n"
      << text;
  if (!out)
    return fail("cannot write " + outPath);
  std::printf("wrote %s\n", outPath.c_str());
  return 0;
}
