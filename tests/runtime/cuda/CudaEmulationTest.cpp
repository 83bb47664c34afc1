//===- CudaEmulationTest.cpp - The CUDA emulation against CUDA's rules ----===//
//
// The emulation (runtime/cuda/emu) is what the CUDA tests run on without a
// GPU, so its own semantics are checked here against what the CUDA
// programming guide and the PTX ISA state, with expectations derived
// independently of it: shuffles, the fragments of mma.sync.m16n8k16 and
// ldmatrix (the layouts Mma.cuh documents, element by element, against a
// plain product of small integers, which float sums exactly), the launch
// checks, shared memory, cp.async's copies and the two schedules of a
// block's warps, and the barrier and copy errors it must report rather
// than hide. Built under the emulation only.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Device.cuh"
#include "runtime/cuda/Mma.cuh"

#include "tests/runtime/cuda/CudaTestUtil.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace braid::cuda {
namespace {

using cudatest::Device;

__global__ void shuffleKernel(int *xorOut, int *fromOut, int *downOut) {
  const int t = int(threadIdx.x), lane = t % 32;
  const int v = 100 * (t / 32) + lane;
  xorOut[t] = __shfl_xor_sync(0xffffffffu, v, 5);
  fromOut[t] = __shfl_sync(0xffffffffu, v, 7);
  downOut[t] = __shfl_down_sync(0xffffffffu, v, 3);
}

TEST(CudaEmulation, ShufflesFollowTheirLanes) {
  Device<int> x(64), f(64), d(64);
  BRAID_LAUNCH(1, 64, 0, nullptr, shuffleKernel)(x.get(), f.get(), d.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> xs = x.host(), fs = f.host(), ds = d.host();
  for (int t = 0; t < 64; ++t) {
    const int warp = t / 32, lane = t % 32;
    EXPECT_EQ(xs[t], 100 * warp + (lane ^ 5)) << t;
    EXPECT_EQ(fs[t], 100 * warp + 7) << t;
    // A source past the warp's end gives the lane's own value.
    EXPECT_EQ(ds[t], 100 * warp + (lane + 3 < 32 ? lane + 3 : lane)) << t;
  }
}

__global__ void blockSumKernel(const float *in, float *out) {
  __shared__ float partial[4];
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0)
    partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    out[blockIdx.x] = partial[0] + partial[1] + partial[2] + partial[3];
}

TEST(CudaEmulation, SharedMemoryAndBarriersPerBlock) {
  std::vector<float> in(3 * 128);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = float(i % 7);
  Device<float> gin(in), gout(3);
  BRAID_LAUNCH(3, 128, 0, nullptr, blockSumKernel)(gin.get(), gout.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> out = gout.host();
  for (int b = 0; b < 3; ++b) {
    float want = 0;
    for (int i = 0; i < 128; ++i)
      want += in[b * 128 + i];
    EXPECT_EQ(out[b], want) << b;
  }
}

/// Small integers as bf16: products and their sums are exact in float.
float smallValue(int i, int salt) { return float((i * 7 + salt * 3) % 9 - 4); }

/// Two 16-bit elements of a row-major matrix as one fragment register (lo
/// first).
template <typename E>
uint32_t pair(const E *m, int stride, int r, int c, int dr = 0, int dc = 1) {
  uint16_t lo, hi;
  std::memcpy(&lo, &m[r * stride + c], 2);
  std::memcpy(&hi, &m[(r + dr) * stride + c + dc], 2);
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

// A (16 x 16) and B (16 x 8, given as Bᵀ rows: bt[n][k]) row-major in
// global memory; fragments built from the PTX layouts; C row-major.
template <typename E>
__global__ void mmaKernel(const E *a, const E *bt, float *c) {
  const int l = int(threadIdx.x), g = l / 4, t = l % 4;
  uint32_t af[4] = {pair(a, 16, g, 2 * t), pair(a, 16, g + 8, 2 * t),
                    pair(a, 16, g, 2 * t + 8), pair(a, 16, g + 8, 2 * t + 8)};
  // B[k][n] = bt[n][k]: b0 holds B[2t][g], B[2t+1][g].
  const uint32_t b0 = pair(bt, 16, g, 2 * t), b1 = pair(bt, 16, g, 2 * t + 8);
  float acc[4] = {1, 1, 1, 1};
  mma16816<E>(acc, af, b0, b1);
  c[g * 8 + 2 * t] = acc[0];
  c[g * 8 + 2 * t + 1] = acc[1];
  c[(g + 8) * 8 + 2 * t] = acc[2];
  c[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

/// mma.sync with E inputs: each element of C against a plain product.
template <typename E> void checkMma(E (*convert)(float)) {
  std::vector<E> a(16 * 16), bt(8 * 16);
  for (int i = 0; i < 256; ++i)
    a[i] = convert(smallValue(i, 1));
  for (int i = 0; i < 128; ++i)
    bt[i] = convert(smallValue(i, 2));
  Device<E> ga(a), gbt(bt);
  Device<float> gc(16 * 8);
  BRAID_LAUNCH(1, 32, 0, nullptr, mmaKernel<E>)(ga.get(), gbt.get(), gc.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> c = gc.host();
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      float want = 1; // the accumulator's start
      for (int k = 0; k < 16; ++k)
        want += smallValue(m * 16 + k, 1) * smallValue(n * 16 + k, 2);
      EXPECT_EQ(c[m * 8 + n], want) << m << ", " << n;
    }
}

TEST(CudaEmulation, MmaComputesTheProductInPtxLayouts) {
  checkMma<__nv_bfloat16>([](float x) { return __float2bfloat16_rn(x); });
  checkMma<__half>([](float x) { return __float2half_rn(x); });
}

// Four 8 x 8 matrices side by side in a 16 x 16 shared tile (matrix i at
// rows 8 (i % 2), columns 8 (i / 2): the A operand's order); every lane
// writes what ldmatrix gave it, and what .trans gave it.
__global__ void ldmatrixKernel(const __nv_bfloat16 *m, uint32_t *plain,
                               uint32_t *trans) {
  __shared__ __align__(16) __nv_bfloat16 tile[16 * 24]; // pitch 24
  const int l = int(threadIdx.x);
  for (int i = l; i < 256; i += 32)
    tile[(i / 16) * 24 + i % 16] = m[i];
  __syncwarp();
  const int matrix = l / 8, row = l % 8;
  const __nv_bfloat16 *addr =
      tile + ((matrix % 2) * 8 + row) * 24 + (matrix / 2) * 8;
  uint32_t r[4], rt[4];
  ldmatrixX4(r, addr);
  ldmatrixX4Trans(rt, addr);
  for (int i = 0; i < 4; ++i) {
    plain[l * 4 + i] = r[i];
    trans[l * 4 + i] = rt[i];
  }
}

TEST(CudaEmulation, LdmatrixGivesEachLaneItsElements) {
  std::vector<__nv_bfloat16> m(256);
  for (int i = 0; i < 256; ++i)
    m[i] = __float2bfloat16_rn(float(i)); // exact up to 256
  Device<__nv_bfloat16> gm(m);
  Device<uint32_t> gplain(128), gtrans(128);
  BRAID_LAUNCH(1, 32, 0, nullptr, ldmatrixKernel)(gm.get(), gplain.get(),
                                                  gtrans.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<uint32_t> plain = gplain.host(), trans = gtrans.host();
  auto element = [](int matrix, int r, int c) {
    return float(((matrix % 2) * 8 + r) * 16 + (matrix / 2) * 8 + c);
  };
  auto half = [](uint32_t v, int i) {
    return __bfloat162float(
        __ushort_as_bfloat16(uint16_t(i ? v >> 16 : v & 0xffffu)));
  };
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(half(plain[l * 4 + i], 0), element(i, g, 2 * t));
      EXPECT_EQ(half(plain[l * 4 + i], 1), element(i, g, 2 * t + 1));
      EXPECT_EQ(half(trans[l * 4 + i], 0), element(i, 2 * t, g));
      EXPECT_EQ(half(trans[l * 4 + i], 1), element(i, 2 * t + 1, g));
    }
  }
}

__global__ void dynamicSharedKernel(int *out) {
  BRAID_DYNAMIC_SHARED(int, values);
  values[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = values[blockDim.x - 1 - threadIdx.x];
}

TEST(CudaEmulation, LaunchesAreCheckedAsADeviceChecksThem) {
  Device<int> out(1024);
  BRAID_LAUNCH(1, 1025, 0, nullptr, dynamicSharedKernel)(out.get());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  BRAID_LAUNCH(0, 32, 0, nullptr, dynamicSharedKernel)(out.get());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // More than 48 KiB of dynamic shared memory needs the kernel's attribute.
  const int big = 64 << 10;
  BRAID_LAUNCH(1, 32, big, nullptr, dynamicSharedKernel)(out.get());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(dynamicSharedKernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 big),
            cudaSuccess);
  BRAID_LAUNCH(1, 32, big, nullptr, dynamicSharedKernel)(out.get());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaFuncSetAttribute(dynamicSharedKernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 << 10),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue); // and it is the last
  BRAID_LAUNCH(1, 1024, 1024 * sizeof(int), nullptr,
               dynamicSharedKernel)(out.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> got = out.host();
  for (int t = 0; t < 1024; ++t)
    EXPECT_EQ(got[t], 1023 - t);
}

__global__ void divergentBarrierKernel() {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    __syncwarp();
}

__global__ void exitedLaneKernel(int *out) {
  if (threadIdx.x == 5)
    return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

__global__ void exitedThreadsCountAtBarriers(int *out) {
  if (threadIdx.x >= 32)
    return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaEmulationDeathTest, DivergentBarriersAreReported) {
  EXPECT_DEATH(
      BRAID_LAUNCH(1, 32, 0, nullptr, divergentBarrierKernel)(),
      "wait at different barriers");
  Device<int> out(64);
  EXPECT_DEATH(
      BRAID_LAUNCH(1, 32, 0, nullptr, exitedLaneKernel)(out.get()),
      "exited before reaching it");
  // Threads that have exited do not hold a barrier up.
  BRAID_LAUNCH(1, 64, 0, nullptr, exitedThreadsCountAtBarriers)(out.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.host()[31], 1);
}

/// Whether this run has the threads in reverse order (and cp.async's
/// copies landing when issued, one warp at a time): ctest runs this binary
/// both ways.
bool reverseOrder() {
  const char *order = std::getenv("BRAID_CUDA_EMULATION_ORDER");
  return order && std::string(order) == "reverse";
}

/// Each thread copies 16 bytes into its slot of shared memory with
/// cp.async (odd threads zeros), reads its slot before and after waiting,
/// then, after a barrier, its neighbour's.
__global__ void cpAsyncKernel(const uint32_t *src, uint32_t *before,
                              uint32_t *after, uint32_t *neighbour) {
  BRAID_DYNAMIC_SHARED(uint32_t, slots);
  const int t = int(threadIdx.x), n = int(blockDim.x);
  const bool valid = t % 2 == 0;
  cpAsync<16>(slots + 4 * t, src + 4 * t, valid);
  cpAsyncCommit();
  before[t] = slots[4 * t];
  cpAsyncWait<0>();
  after[t] = slots[4 * t + 3];
  __syncthreads();
  neighbour[t] = slots[4 * ((t + 1) % n) + 1];
}

TEST(CudaEmulation, CpAsyncLandsByItsWaitAndZeroFills) {
  const int threads = 64;
  std::vector<uint32_t> values(4 * threads);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = uint32_t(1000 + i);
  Device<uint32_t> src(values), before(threads), after(threads),
      neighbour(threads);
  BRAID_LAUNCH(1, threads, 16 * threads, nullptr, cpAsyncKernel)(
      src.get(), before.get(), after.get(), neighbour.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<uint32_t> b = before.host(), a = after.host(),
                        nb = neighbour.host();
  for (int t = 0; t < threads; ++t) {
    const uint32_t mine = t % 2 == 0 ? 1000 + 4 * t : 0;
    // Before the wait: the old bytes (the emulation's pattern for
    // undefined shared memory), or with copies that land when issued the
    // new ones.
    EXPECT_EQ(b[t], reverseOrder() ? mine : 0xa5a5a5a5u) << t;
    EXPECT_EQ(a[t], t % 2 == 0 ? 1000 + 4 * t + 3 : 0) << t;
    const int u = (t + 1) % threads;
    EXPECT_EQ(nb[t], u % 2 == 0 ? uint32_t(1000 + 4 * u + 1) : 0u) << t;
  }
}

/// Each thread takes a ticket before and after a warp-collective operation
/// (no barrier between).
__global__ void ticketKernel(int *counter, int *first, int *second) {
  const int t = int(threadIdx.x);
  first[t] = atomicAdd(counter, 1);
  __syncwarp();
  second[t] = atomicAdd(counter, 1);
}

TEST(CudaEmulation, WarpsRunTogetherOrOneAtATime) {
  const int threads = 64;
  Device<int> counter(std::vector<int>{0}), first(threads), second(threads);
  BRAID_LAUNCH(1, threads, 0, nullptr, ticketKernel)(counter.get(),
                                                     first.get(), second.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> f = first.host(), s = second.host();
  for (int t = 0; t < threads; ++t) {
    if (reverseOrder()) {
      // Warp 1 (threads 63..32) to its end, then warp 0 (31..0).
      const int k = threads - 1 - t, warpBase = 64 * (1 - t / 32);
      EXPECT_EQ(f[t], warpBase + (k % 32)) << t;
      EXPECT_EQ(s[t], warpBase + 32 + (k % 32)) << t;
    } else {
      // Every thread's first ticket before any second one.
      EXPECT_EQ(f[t], t) << t;
      EXPECT_EQ(s[t], threads + t) << t;
    }
  }
}

__global__ void unwaitedCopyKernel(const uint32_t *src) {
  BRAID_DYNAMIC_SHARED(uint32_t, slots);
  cpAsync<16>(slots, src, true);
  cpAsyncCommit();
}

__global__ void misalignedCopyKernel(const uint32_t *src) {
  BRAID_DYNAMIC_SHARED(uint32_t, slots);
  cpAsync<16>(slots + 1, src, true);
  cpAsyncCommit();
  cpAsyncWait<0>();
}

TEST(CudaEmulationDeathTest, CpAsyncMisuseIsReported) {
  Device<uint32_t> src(std::vector<uint32_t>(8, 1));
  EXPECT_DEATH(
      BRAID_LAUNCH(1, 1, 32, nullptr, unwaitedCopyKernel)(src.get()),
      "cp.async copies it never waited for");
  EXPECT_DEATH(
      BRAID_LAUNCH(1, 1, 32, nullptr, misalignedCopyKernel)(src.get()),
      "not aligned");
}

__global__ void writeOneKernel(int *out) { out[threadIdx.x] = 1; }

// A stream's work after cudaStreamDestroy is undefined on a device (the
// driver crashed in braid-run's NCCL communicator, which waited for the
// executor's stream after the executor had destroyed it): the emulation
// stops there, naming the call.
TEST(CudaEmulationDeathTest, DestroyedStreamsAreReported) {
  Device<int> out(32);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  BRAID_LAUNCH(1, 32, 0, stream, writeOneKernel)(out.get());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(out.host()[31], 1);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_DEATH(cudaStreamSynchronize(stream),
               "cudaStreamSynchronize on a stream that was destroyed");
  EXPECT_DEATH(BRAID_LAUNCH(1, 32, 0, stream, writeOneKernel)(out.get()),
               "a kernel launch on a stream that was destroyed");
  EXPECT_DEATH(cudaStreamDestroy(stream),
               "cudaStreamDestroy on a stream that was destroyed");
  // The legacy default stream is always there.
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
}

__global__ void addValueKernel(int *out, int value) {
  out[threadIdx.x] += value;
}

// What a capture records runs when its graph is launched, each time, with
// the arguments of its capture; a stream that joined the capture through an
// event is part of it, and must be joined back before the capture ends.
TEST(CudaEmulation, CapturedWorkRunsWhenTheGraphIsLaunched) {
  Device<int> out(32), copy(32);
  cudaStream_t stream = nullptr, side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&side), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&fork), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&join), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(out.get(), 0, 32 * sizeof(int), stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  int value = 5;
  BRAID_LAUNCH(1, 32, 0, stream, addValueKernel)(out.get(), value);
  value = 100; // a graph keeps the argument of its capture
  ASSERT_EQ(cudaEventRecord(fork, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(copy.get(), out.get(), 32 * sizeof(int),
                            cudaMemcpyDeviceToDevice, side),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(stream, join, 0), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  // Nothing ran.
  EXPECT_EQ(out.host()[7], 0);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  for (int launch = 1; launch <= 3; ++launch) {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(out.host()[7], 5 * launch);
    EXPECT_EQ(copy.host()[31], 5 * launch);
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);

  // A stream that joined and was not joined back.
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  BRAID_LAUNCH(1, 32, 0, side, addValueKernel)(out.get(), 1);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph),
            cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(graph, nullptr);
  (void)cudaGetLastError();
  // The side stream left the capture with it: its work runs at once again.
  BRAID_LAUNCH(1, 32, 0, side, addValueKernel)(out.get(), 1);
  EXPECT_EQ(out.host()[0], 16);

  // What a capture forbids invalidates it.
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph),
            cudaErrorStreamCaptureInvalidated);
  int host[32] = {};
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host, out.get(), sizeof(host), cudaMemcpyDeviceToHost),
            cudaErrorStreamCaptureImplicit);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph),
            cudaErrorStreamCaptureInvalidated);
  // An event recorded before the capture is outside it.
  ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(stream, join, 0),
            cudaErrorStreamCaptureIsolation);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph),
            cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  // The legacy stream cannot be captured.
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeThreadLocal),
            cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  for (cudaEvent_t e : {fork, join})
    cudaEventDestroy(e);
  cudaStreamDestroy(side);
  cudaStreamDestroy(stream);
}

} // namespace
} // namespace braid::cuda
