// The CUDA source Attention.cu compiled by the host compiler under the CUDA
// emulation (Emu.h, forced in front by CMake).
#include "runtime/cuda/Attention.cu"
