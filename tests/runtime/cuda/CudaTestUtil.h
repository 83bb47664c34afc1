//===- CudaTestUtil.h - Device buffers and comparisons for GPU tests ------===//
//
// What the CUDA kernel tests share: a fixture that skips without a device,
// device copies of host vectors, random inputs rounded to the kernel's
// type, and an element-wise comparison that reports the worst element.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TESTS_RUNTIME_CUDA_CUDATESTUTIL_H
#define BRAID_TESTS_RUNTIME_CUDA_CUDATESTUTIL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace braid::cudatest {

using bf16 = __nv_bfloat16;
using f16 = __half;

inline bool haveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

class CudaKernels : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveDevice())
      GTEST_SKIP() << "no CUDA device";
  }
};

/// A device copy of a host vector, freed on scope exit.
template <typename T> class Device {
public:
  explicit Device(const std::vector<T> &host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&data_),
                         std::max<size_t>(n_, 1) * sizeof(T)),
              cudaSuccess);
    if (n_) {
      EXPECT_EQ(cudaMemcpy(data_, host.data(), n_ * sizeof(T),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  explicit Device(size_t n) : Device(std::vector<T>(n)) {}
  ~Device() { cudaFree(data_); }
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;

  T *get() const { return data_; }
  size_t size() const { return n_; }
  /// The contents, after the device has finished all work.
  std::vector<T> host() const {
    std::vector<T> out(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_) {
      EXPECT_EQ(
          cudaMemcpy(out.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
          cudaSuccess);
    }
    return out;
  }

private:
  T *data_ = nullptr;
  size_t n_;
};

inline std::vector<float> randomValues(size_t n, uint32_t seed,
                                       float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = normal(rng);
  return v;
}

inline float toFloat(float x) { return x; }
inline float toFloat(bf16 x) { return __bfloat162float(x); }
inline float toFloat(f16 x) { return __half2float(x); }

template <typename T> std::vector<T> as(const std::vector<float> &v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = T(v[i]);
  return out;
}

template <> inline std::vector<bf16> as<bf16>(const std::vector<float> &v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

template <> inline std::vector<f16> as<f16>(const std::vector<float> &v) {
  std::vector<f16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = __float2half_rn(v[i]);
  return out;
}

/// The values the kernel of type T reads: rounded to T.
template <typename T> std::vector<float> rounded(const std::vector<float> &v) {
  std::vector<T> r = as<T>(v);
  std::vector<float> out(r.size());
  for (size_t i = 0; i < r.size(); ++i)
    out[i] = toFloat(r[i]);
  return out;
}

/// Four of T's roundings (at most half a unit in the last place each):
/// bf16 keeps 8 significant bits, fp16 11.
template <typename T> double relativeTolerance() {
  return std::is_same_v<T, float> ? 1e-5
         : std::is_same_v<T, f16> ? 1.0 / 1024
                                  : 1.0 / 128;
}
template <typename T> double absoluteTolerance() {
  return std::is_same_v<T, float> ? 1e-6 : std::is_same_v<T, f16> ? 1e-4 : 1e-3;
}

/// Every element of `got` within rel·|want| + abs of `want`; reports the
/// worst one.
template <typename G>
void expectClose(const std::vector<G> &got, const std::vector<float> &want,
                 double rel, double abs, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double excess = std::abs(double(toFloat(got[i])) - want[i]) -
                    (rel * std::abs(want[i]) + abs);
    if (!(excess <= worst)) { // NaN counts
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  EXPECT_EQ(worst, 0) << what << ": element " << at << " is "
                      << toFloat(got[at]) << ", the reference " << want[at];
}

} // namespace braid::cudatest

#endif // BRAID_TESTS_RUNTIME_CUDA_CUDATESTUTIL_H
