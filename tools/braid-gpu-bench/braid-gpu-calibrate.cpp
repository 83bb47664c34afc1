//===- braid-gpu-calibrate.cpp - Measures one GPU for the cost model ------===//
//
// braid-gpu-calibrate [--max-size N] [--repeats R] [-o FILE]
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
//   - a tiny kernel's call time, 1000 calls one after another.
// Each time is the median of R (default 5) runs between CUDA events after
// one to warm up (cuBLASLt's tuning included there). What it does not
// measure: attention by shape (the cost model prices attention's products
// on the same curve) and the collectives between GPUs (the cluster's
// links keep BASE's figures).
//
//===----------------------------------------------------------------------===//

#include "frontends/spec/cluster.pb.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/cuda/Kernels.h"
#include "tools/braid-gpu-bench/CountFlag.h"

#include "google/protobuf/text_format.h"

#include <cuda_runtime_api.h>

#include <algorithm>
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

} // namespace

int main(int argc, char **argv) {
  int64_t maxSize = 16384, repeats = 5;
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
        countFlag(argc, argv, i, "--repeats", repeats, error)) {
      if (!error.empty())
        return fail(error);
      continue;
    }
    return fail(std::string("unexpected argument ") + argv[i] +
                "; usage: braid-gpu-calibrate [--max-size N] [--repeats R] "
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
