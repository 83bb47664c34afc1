//===- DeviceMath.cuh - Conversions and warp reductions ---------*- CUDA
//-*-===//
//
// What the CUDA kernels share on the device: loading T as float and storing
// float as T (rounded to nearest), and sums and maxima over a warp (every
// lane gets the result; the lanes add in a fixed butterfly order, so the
// result does not vary between launches).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_DEVICEMATH_CUH
#define BRAID_RUNTIME_CUDA_DEVICEMATH_CUH

#include <cuda_bf16.h>

namespace braid::cuda {

__device__ __forceinline__ float toFloat(float x) { return x; }
__device__ __forceinline__ float toFloat(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T> __device__ __forceinline__ T fromFloat(float x);
template <> __device__ __forceinline__ float fromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
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

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_DEVICEMATH_CUH
