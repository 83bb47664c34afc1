//===- Blas.cpp - Which OpenBLAS kernels the CPU backend runs --------------===//

#include "runtime/cpu/Blas.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace braid::cpu {

void runBlasOnOneThread() {
  static const bool once = [] {
    // The OpenMP build's openblas_set_num_threads also sets OpenMP's count
    // on this thread: put it back.
    int threads = omp_get_max_threads();
    openblas_set_num_threads(1);
    omp_set_num_threads(threads);
    return true;
  }();
  (void)once;
}

OneBlasThread::OneBlasThread() : saved(omp_get_max_threads()) {
  runBlasOnOneThread();
  if (saved != 1)
    omp_set_num_threads(1);
}

OneBlasThread::~OneBlasThread() {
  if (saved != 1)
    omp_set_num_threads(saved);
}

std::string blasCoreName() {
  const char *name = openblas_get_corename();
  return name ? name : "";
}

namespace {

#if defined(__x86_64__)
/// The register state the OS saves on a context switch (XCR0): the
/// instruction sets the CPU reports are usable only with their registers.
uint64_t enabledRegisterState() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
    return 0;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

/// setVectorIsa's choice, if any.
int vectorIsaOverride = -1;

VectorIsa nativeVectorIsa() {
  static const VectorIsa isa = [] {
#ifdef BRAID_CPU_X86_CLONES
    std::string core = nativeBlasCore();
    if (core == "SkylakeX")
      return VectorIsa::Avx512;
    if (core == "Haswell")
      return VectorIsa::Avx2;
#endif
    return VectorIsa::Sse2;
  }();
  return isa;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

} // namespace

std::string nativeBlasCore() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  uint64_t state = enabledRegisterState();
  bool avxState = (state & 0x6) == 0x6;            // SSE and AVX registers
  bool avx512State = avxState && (state & 0xe0) == 0xe0; // mask, ZMM
  if (avx512State && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (avxState && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return "Haswell";
  if (avxState && __builtin_cpu_supports("avx"))
    return "Sandybridge";
#endif
  return "";
}

VectorIsa vectorIsa() {
  return vectorIsaOverride >= 0 ? VectorIsa(vectorIsaOverride)
                                : nativeVectorIsa();
}

const char *vectorIsaName() {
  switch (vectorIsa()) {
  case VectorIsa::Avx512:
    return "avx512";
  case VectorIsa::Avx2:
    return "avx2";
  case VectorIsa::Sse2:
    break;
  }
  return "sse2";
}

bool setVectorIsa(const char *name) {
  std::string isa = name;
  if (isa.empty()) {
    vectorIsaOverride = -1;
    return true;
  }
  VectorIsa wanted;
  if (isa == "sse2")
    wanted = VectorIsa::Sse2;
  else if (isa == "avx2")
    wanted = VectorIsa::Avx2;
  else if (isa == "avx512")
    wanted = VectorIsa::Avx512;
  else
    return false;
  // The native set's predecessors run too.
  if (int(wanted) > int(nativeVectorIsa()))
    return false;
  vectorIsaOverride = int(wanted);
  return true;
}

int blasCoreLevel(const std::string &core) {
  // OpenBLAS's x86-64 core names (driver/others/dynamic.c's corename list).
  static const char *const kSse[] = {
      "katmai",  "coppermine", "northwood", "prescott",     "banias",
      "atom",    "core2",      "penryn",    "dunnington",   "nehalem",
      "opteron", "opteron_sse3", "barcelona", "nano",       "bobcat"};
  static const char *const kAvx[] = {"sandybridge", "bulldozer", "piledriver"};
  static const char *const kAvx2[] = {"haswell", "steamroller", "excavator",
                                      "zen"};
  static const char *const kAvx512[] = {"skylakex", "cooperlake",
                                        "sapphirerapids"};
  std::string name = lower(core);
  for (const char *n : kSse)
    if (name == n)
      return 1;
  for (const char *n : kAvx)
    if (name == n)
      return 2;
  for (const char *n : kAvx2)
    if (name == n)
      return 3;
  for (const char *n : kAvx512)
    if (name == n)
      return 4;
  return 0;
}

void useNativeBlasKernels(char **argv) {
  if (std::getenv("OPENBLAS_CORETYPE"))
    return; // the user's choice, or this program already started again
  std::string native = nativeBlasCore();
  int chosen = blasCoreLevel(blasCoreName());
  // An unknown name is a library newer than this table: leave it be.
  if (native.empty() || chosen == 0 || chosen >= blasCoreLevel(native))
    return;
  if (::setenv("OPENBLAS_CORETYPE", native.c_str(), 1) != 0)
    return;
  ::execv("/proc/self/exe", argv);
  // The exec failed (no /proc): run with the library's kernels, and do not
  // let a child believe the choice was made.
  ::unsetenv("OPENBLAS_CORETYPE");
}

} // namespace braid::cpu
