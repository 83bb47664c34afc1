//===- Emu.h - CUDA device code run on the host, for testing ----*- C++ -*-===//
//
// The CUDA emulation: the subset of CUDA C++ that runtime/cuda's sources use,
// implemented on the host so that the same sources, compiled by the host
// compiler with this header forced in front (-include), run on the CPU. It
// exists to test the CUDA backend where there is no GPU: every kernel, the
// tensor-core fragments of mma.sync and ldmatrix, cuBLASLt's products and the
// executor run as they would on a device, and the CUDA tests run against the
// CPU reference in the CPU-only test run.
//
// - A launch (BRAID_LAUNCH, Device.cuh) runs the grid's blocks one after
//   another; a block's threads are fibers on the calling thread, switched at
//   __syncthreads and at every warp-collective operation (shuffles,
//   __syncwarp, ldmatrix, mma), so the order of a block's threads between
//   barriers is the only freedom taken: by thread index, all warps a
//   warp-collective operation at a time, or reversed with
//   BRAID_CUDA_EMULATION_ORDER=reverse, one warp at a time (the last first)
//   as far as the block's next barrier (a barrier missing between a write
//   and another thread's read shows in one order or the other; the tests
//   run in both). Launch configurations are checked as
//   a device checks them (threads per block, grid extents, dynamic shared
//   memory against 48 KiB or the kernel's cudaFuncSetAttribute); a failed
//   check is the launch's error (cudaGetLastError).
// - Barriers are checked: a block whose threads wait at different barriers
//   (a __syncthreads in divergent code) or a warp-collective operation that
//   a lane of its mask exited before reaching stops the program with a
//   message, as the compute sanitizer would report it.
// - __shared__ variables are static (blocks run one at a time); dynamic
//   shared memory is a buffer of the launch's size (BRAID_DYNAMIC_SHARED).
// - cp.async (Mma.cuh) reads its source when it is issued and writes shared
//   memory, in the forward order, when the issuing thread's
//   cp.async.wait_group lets its group complete (a read before that wait
//   sees the old bytes), and in the reverse order at once (a copy into a
//   buffer that other threads still read, without a barrier between, shows
//   in their reads); a thread that ends with copies it never waited for
//   stops the program.
// - Device memory is host memory (cudaMalloc), filled with ones (NaN as
//   floats) as it is undefined on a device, out of a capacity of 80 GiB
//   (BRAID_CUDA_EMULATION_MEMORY bytes) that cudaMemGetInfo reports; streams
//   and events are synchronous, events record the host's clock.
// - Stream capture (cudaStreamBeginCapture, cudaStreamEndCapture) records
//   the work enqueued on the capturing stream, and on the streams that join
//   the capture by waiting for an event recorded in it, instead of running
//   it; kernels keep the arguments of their launch, as a graph's nodes do.
//   cudaGraphLaunch runs the recorded work in order. As on a device, a
//   capture ends with cudaErrorStreamCaptureUnjoined when a stream that
//   joined has work the capturing stream did not wait for, and is
//   invalidated by what a capture forbids: synchronizing a capturing stream
//   or an event recorded in the capture, a synchronous copy or memset while
//   the capture (global, or this thread's) is open, waiting for an event
//   recorded outside the capture.
// - mma.sync.m16n8k16 (bf16 or fp16 in, float accumulation) and ldmatrix (x4,
//   optionally transposed) gather the warp's fragments with PTX's layouts
//   and compute each lane's own elements (products in float, summed in the
//   order of k).
// - cuBLASLt (CublasLt.cpp): the descriptors, layouts, preferences and the
//   matmul with the bias epilogue that runtime/cuda/Gemm.cpp uses, with the
//   chosen algorithm's operand alignment checked when it runs.
//
// What it does not model: concurrency between blocks and streams (races
// between blocks go unseen), the device's memory model, timing, and the
// approximate rounding of the device's math functions.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_EMU_EMU_H
#define BRAID_RUNTIME_CUDA_EMU_EMU_H

#ifdef __CUDACC__
#error "runtime/cuda/emu/Emu.h is for the host compiler; nvcc builds for a GPU"
#endif

#define BRAID_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// The device qualifiers mean nothing on the host; shared memory is one copy
// per kernel (blocks run one at a time).
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

// Device code calls the classification functions unqualified.
using std::isfinite;
using std::isinf;
using std::isnan;

namespace braid::cuda::emu {

/// The running thread's built-in variables.
extern thread_local uint3 threadIdx_;
extern thread_local uint3 blockIdx_;
extern thread_local dim3 blockDim_;
extern thread_local dim3 gridDim_;

/// The bytes each lane may contribute to one warp-collective operation.
constexpr size_t kSlotBytes = 32;

/// Waits for every thread of the block (__syncthreads).
void syncThreads();
/// Waits for the lanes of `mask` (__syncwarp).
void syncWarp(unsigned mask);
/// Contributes `bytes` (at most kSlotBytes) at `value` to a warp-collective
/// operation over the lanes of `mask`, waits for them, and returns the
/// lanes' contributions: lane l's at result + l * kSlotBytes (valid until
/// this lane's next warp-collective operation).
const unsigned char *exchange(unsigned mask, const void *value, size_t bytes);
/// This thread's lane, and the number of lanes its warp has.
int lane();
int warpLanes();
/// The launch's dynamic shared memory.
void *dynamicShared();
/// Records cudaFuncAttributeMaxDynamicSharedMemorySize for `kernel`; false
/// beyond the device's limit.
bool setMaxDynamicShared(const void *kernel, int bytes);
/// Stops the program with `message` and the running thread's coordinates.
[[noreturn]] void fail(const char *message);
/// Stops the program, naming `call`, unless `stream` is the legacy default
/// stream (null, cudaStreamLegacy, cudaStreamPerThread) or one created and
/// not yet destroyed: on a device, work on a destroyed stream is undefined
/// (a crash in the driver, at best).
void checkStream(cudaStream_t stream, const char *call);
/// When `stream` is being captured (cudaStreamBeginCapture): records `work`
/// into the capture, to run when the graph is launched, and returns true;
/// else returns false (the caller runs the work now).
bool captured(cudaStream_t stream, std::function<void()> work);
/// Runs `work` now, or records it where `stream` is being captured.
inline void runOrRecord(cudaStream_t stream,
                        const std::function<void()> &work) {
  if (!captured(stream, work))
    work();
}
/// As captured(), for a kernel launch: the configuration is checked now, as
/// a device checks it at the launch (a failed check is the launch's error
/// and nothing is recorded), and the grid runs when the graph is launched.
bool capturedLaunch(cudaStream_t stream, const struct LaunchConfig &config,
                    std::function<void()> body);

/// One lane's part of mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.
/// {bf16,f16}.f32: c += a b over the warp, with PTX's fragment layouts; the
/// inputs are fp16 when `f16`, else bf16.
void mmaM16N8K16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                 uint32_t b1, bool f16);
/// One lane's part of ldmatrix.sync.aligned.m8n8.x{count}[.trans].b16:
/// `row` is the row this lane addresses (lanes 8i..8i+7 address matrix i's
/// rows), r[i] this lane's elements of matrix i.
void ldmatrix(uint32_t *r, int count, const void *row, bool trans);

/// One thread's cp.async.{ca,cg}.shared.global of `bytes` (4, 8 or 16) to
/// `dst` (shared memory) from `src`, of which the first `srcBytes` are read
/// (the rest zeros). The source is read now; the shared memory is written
/// when this thread's cpAsyncWait lets the copy's group complete (threads
/// run in index order) or now (in reverse order): the two ends of the time
/// a device may take.
void cpAsync(void *dst, const void *src, int bytes, int srcBytes);
/// cp.async.commit_group: this thread's copies since the last commit
/// become a group.
void cpAsyncCommit();
/// cp.async.wait_group `pending`: completes this thread's oldest groups
/// until at most `pending` are left.
void cpAsyncWait(int pending);

struct LaunchConfig {
  dim3 grid, block;
  size_t sharedBytes;
  const void *kernel;
};
/// Runs `body` as every thread of the grid; the configuration's error, if
/// any, becomes the last error and nothing runs.
void runGrid(const LaunchConfig &config, const std::function<void()> &body);

template <typename... P> class Launcher {
public:
  Launcher(LaunchConfig config, cudaStream_t stream, void (*kernel)(P...))
      : config_(config), stream_(stream), kernel_(kernel) {}
  template <typename... A> void operator()(A &&...args) const {
    static_assert(sizeof...(A) == sizeof...(P),
                  "a kernel launch with the wrong number of arguments");
    // Converted once, as a launch copies its arguments (a captured launch
    // keeps them for every replay); each thread then gets its own copies.
    auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(
        std::forward<A>(args)...);
    void (*kernel)(P...) = kernel_;
    std::function<void()> body = [params, kernel] {
      std::apply(kernel, *params);
    };
    if (capturedLaunch(stream_, config_, body))
      return;
    runGrid(config_, body);
  }

private:
  LaunchConfig config_;
  cudaStream_t stream_;
  void (*kernel_)(P...);
};

template <typename... P>
Launcher<P...> launch(dim3 grid, dim3 block, size_t sharedBytes,
                      cudaStream_t stream, void (*kernel)(P...)) {
  checkStream(stream, "a kernel launch");
  return Launcher<P...>(LaunchConfig{grid, block, sharedBytes,
                                     reinterpret_cast<const void *>(kernel)},
                        stream, kernel);
}

} // namespace braid::cuda::emu

#define threadIdx ::braid::cuda::emu::threadIdx_
#define blockIdx ::braid::cuda::emu::blockIdx_
#define blockDim ::braid::cuda::emu::blockDim_
#define gridDim ::braid::cuda::emu::gridDim_

inline void __syncthreads() { ::braid::cuda::emu::syncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::braid::cuda::emu::syncWarp(mask);
}

namespace braid::cuda::emu {
template <typename T> T shuffleFrom(unsigned mask, T v, int src, bool valid) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kSlotBytes);
  const unsigned char *slots = exchange(mask, &v, sizeof(T));
  if (!valid || src < 0 || src >= warpLanes() || !((mask >> src) & 1u))
    return v;
  T out;
  std::memcpy(&out, slots + size_t(src) * kSlotBytes, sizeof(T));
  return out;
}
} // namespace braid::cuda::emu

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
  const int lane = ::braid::cuda::emu::lane();
  const int src = lane ^ laneMask;
  // A source outside the lane's segment of `width` lanes gives its own.
  return ::braid::cuda::emu::shuffleFrom(mask, v, src,
                                         src / width == lane / width);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int srcLane, int width = 32) {
  const int lane = ::braid::cuda::emu::lane();
  return ::braid::cuda::emu::shuffleFrom(
      mask, v, (lane / width) * width + srcLane % width, true);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::braid::cuda::emu::lane();
  const int src = lane + int(delta);
  return ::braid::cuda::emu::shuffleFrom(mask, v, src,
                                         src / width == lane / width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::braid::cuda::emu::lane();
  const int src = lane - int(delta);
  return ::braid::cuda::emu::shuffleFrom(
      mask, v, src, src >= 0 && src / width == lane / width);
}

// Atomics: a block's threads never run at once, and blocks run one after
// another, so a read-modify-write is atomic.
template <typename T, typename U> T atomicAdd(T *address, U value) {
  T old = *address;
  *address = T(old + T(value));
  return old;
}
template <typename T, typename U> T atomicMax(T *address, U value) {
  T old = *address;
  *address = old < T(value) ? T(value) : old;
  return old;
}
template <typename T, typename U> T atomicExch(T *address, U value) {
  T old = *address;
  *address = T(value);
  return old;
}
template <typename T, typename U, typename V>
T atomicCAS(T *address, U compare, V value) {
  T old = *address;
  if (old == T(compare))
    *address = T(value);
  return old;
}

// cuda_runtime.h's overload for a kernel's address (nvcc includes it).
template <typename T>
cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(entry), attr,
                                value);
}

#endif // BRAID_RUNTIME_CUDA_EMU_EMU_H
