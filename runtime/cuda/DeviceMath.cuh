//===- DeviceMath.cuh - Conversions and warp reductions ---------*- CUDA
//-*-===//
//
// What the CUDA kernels share on the device: loading T as float and storing
// float as T (rounded to nearest), sums and maxima over a warp (every lane
// gets the result; the lanes add in a fixed butterfly order, so the result
// does not vary between launches), and ALiBi's slopes.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_DEVICEMATH_CUH
#define BRAID_RUNTIME_CUDA_DEVICEMATH_CUH

#include "runtime/cuda/Device.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

namespace braid::cuda {

__device__ __forceinline__ float toFloat(float x) { return x; }
__device__ __forceinline__ float toFloat(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float toFloat(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T fromFloat(float x);
template <> __device__ __forceinline__ float fromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half fromFloat<__half>(float x) {
  return __float2half_rn(x);
}

template <typename V> __device__ __forceinline__ V warpSum(V v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// ALiBi's slope of head `g` of `allHeads` (as cpu::alibiSlopes: the
/// geometric sequence of the largest power of two p <= allHeads, then the
/// odd terms of the sequence for 2p).
__device__ __forceinline__ float alibiSlope(int64_t allHeads, int64_t g) {
  int64_t p = 1;
  while (p * 2 <= allHeads)
    p *= 2;
  double e = g < p ? -8.0 * double(g + 1) / double(p)
                   : -4.0 * double(2 * (g - p) + 1) / double(p);
  return float(exp2(e));
}

/// The sum of `v` over the block, returned to every thread. `shared` holds
/// 32 values; the block's size is a multiple of 32. The same threads add in
/// the same order at every launch, so the result does not vary.
template <typename V> __device__ __forceinline__ V blockSum(V v, V *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : V(0);
  if (warp == 0)
    v = warpSum(v);
  if (threadIdx.x == 0)
    shared[0] = v;
  __syncthreads();
  V total = shared[0];
  __syncthreads(); // `shared` may be reused at once
  return total;
}

__device__ __forceinline__ float blockMax(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpMax(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : -INFINITY;
  if (warp == 0)
    v = warpMax(v);
  if (threadIdx.x == 0)
    shared[0] = v;
  __syncthreads();
  float total = shared[0];
  __syncthreads();
  return total;
}

/// Blocks of `threads` for a grid-stride loop over n elements.
inline unsigned gridFor(int64_t n, int64_t threads = 256) {
  int64_t blocks = (n + threads - 1) / threads;
  return unsigned(std::min<int64_t>(std::max<int64_t>(blocks, 1), 1 << 20));
}

#define BRAID_GRID_STRIDE(i, n)                                                \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_DEVICEMATH_CUH
