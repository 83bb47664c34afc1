// The CUDA source Generation.cu compiled by the host compiler under the CUDA
// emulation (Emu.h, forced in front by CMake).
#include "runtime/cuda/Generation.cu"
