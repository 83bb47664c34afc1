//===- Device.cuh - Kernel launches and dynamic shared memory ---*- CUDA -*-===//
//
// The two pieces of CUDA syntax a host compiler cannot read, written so that
// runtime/cuda's sources compile both with nvcc (for a GPU) and with the
// host compiler under the CUDA emulation (emu/Emu.h, for testing without
// one):
//
//   BRAID_LAUNCH(grid, block, sharedBytes, stream, kernel)(args...)
//     is kernel<<<grid, block, sharedBytes, stream>>>(args...) (the kernel
//     last, since a template's arguments may hold commas);
//   BRAID_DYNAMIC_SHARED(type, name);
//     declares `name`, the launch's dynamic shared memory as `type`s,
//     16-byte aligned.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_DEVICE_CUH
#define BRAID_RUNTIME_CUDA_DEVICE_CUH

#ifdef BRAID_CUDA_EMULATION
#define BRAID_LAUNCH(grid, block, sharedBytes, stream, ...)                    \
  ::braid::cuda::emu::launch(grid, block, sharedBytes, stream, __VA_ARGS__)
#define BRAID_DYNAMIC_SHARED(type, name)                                       \
  type *name = static_cast<type *>(::braid::cuda::emu::dynamicShared())
#else
#define BRAID_LAUNCH(grid, block, sharedBytes, stream, ...)                    \
  __VA_ARGS__<<<grid, block, sharedBytes, stream>>>
#define BRAID_DYNAMIC_SHARED(type, name)                                       \
  extern __shared__ __align__(16) type name[]
#endif

#endif // BRAID_RUNTIME_CUDA_DEVICE_CUH
