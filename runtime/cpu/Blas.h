//===- Blas.h - Which OpenBLAS kernels the CPU backend runs ----------------===//
//
// Debian's OpenBLAS is built for every x86 CPU at once (DYNAMIC_ARCH) and
// picks its kernels when it loads, from the CPU's model number. A CPU newer
// than the library is not in its tables: OpenBLAS 0.3.21 takes its SSE3
// "Prescott" kernels on Sapphire Rapids, and its sgemm runs at a quarter of
// the AVX-512 kernels' rate (bench/cpu_train.sh: GPT-2-small's linears 64
// against 300 GFLOP/s on 2 cores). The library reads OPENBLAS_CORETYPE when
// it loads, before main, so the choice is made by starting the program again
// with that variable set.
//
// The backend's own vectorised code (the attention's tiles, the float
// loops) follows the same choice of instruction set: vectorIsa below.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_BLAS_H
#define BRAID_RUNTIME_CPU_BLAS_H

#include <string>

namespace braid::cpu {

/// The kernels OpenBLAS runs (its core name, e.g. "SkylakeX", "Haswell",
/// "Prescott").
std::string blasCoreName();

/// The newest OpenBLAS kernels this CPU and its operating system can run,
/// from the CPU's feature flags rather than its model number: "SkylakeX"
/// (AVX-512 F, BW, DQ and VL, with their registers enabled by the OS),
/// "Haswell" (AVX2 and FMA), "Sandybridge" (AVX), else "" (no preference).
std::string nativeBlasCore();

/// The CPU backend's own vectorised code (AttentionTiles.h's products,
/// VectorLoops.h's loops) is compiled three times, for these instruction
/// sets, where the compiler can (GCC on x86-64: BRAID_CPU_X86_CLONES); else
/// for the baseline alone.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BRAID_CPU_X86_CLONES 1
#endif
enum class VectorIsa { Sse2, Avx2, Avx512 };

/// The set that code runs: the one matching nativeBlasCore ("SkylakeX":
/// AVX-512; "Haswell": AVX2 with FMA; else the baseline's SSE2), chosen
/// once, or setVectorIsa's.
VectorIsa vectorIsa();
/// Its name: "avx512", "avx2" or "sse2".
const char *vectorIsaName();
/// For tests: makes that code run `isa` ("avx512", "avx2", "sse2"; "" for
/// the CPU's choice again) and returns whether it can (the CPU runs it and
/// this build has it). Not thread-safe.
bool setVectorIsa(const char *isa);

/// Runs CALL, a statement that returns, with `isa` the namespace PREFIX_avx512,
/// PREFIX_avx2 or PREFIX_sse2 (each the same code compiled for that set)
/// that vectorIsa() says.
#ifdef BRAID_CPU_X86_CLONES
#define BRAID_VECTOR_DISPATCH(PREFIX, CALL)                                    \
  switch (::braid::cpu::vectorIsa()) {                                         \
  case ::braid::cpu::VectorIsa::Avx512: {                                      \
    namespace isa = PREFIX##_avx512;                                           \
    CALL;                                                                      \
  }                                                                            \
  case ::braid::cpu::VectorIsa::Avx2: {                                        \
    namespace isa = PREFIX##_avx2;                                             \
    CALL;                                                                      \
  }                                                                            \
  case ::braid::cpu::VectorIsa::Sse2:                                          \
    break;                                                                     \
  }                                                                            \
  {                                                                            \
    namespace isa = PREFIX##_sse2;                                             \
    CALL;                                                                      \
  }
#else
#define BRAID_VECTOR_DISPATCH(PREFIX, CALL)                                    \
  {                                                                            \
    namespace isa = PREFIX##_sse2;                                             \
    CALL;                                                                      \
  }
#endif

/// How many instruction-set generations OpenBLAS's kernels `core` use: 1
/// SSE, 2 AVX, 3 AVX2, 4 AVX-512; 0 for a name it does not know.
int blasCoreLevel(const std::string &core);

/// The kernels split their matrix products between the OpenMP threads
/// themselves, by cuts that do not depend on the thread count, and every
/// BLAS call runs on one thread: a product split by OpenBLAS is cut where its
/// thread count says, and the rows or columns at a cut take its edge kernels,
/// which add the terms in another order (tiny-llama after one step on 1 and
/// 2 threads differed in a few elements of every linear weight).
///
/// Where a BLAS call is made decides its threads. OpenBLAS's OpenMP build
/// (the one braid-run links) runs a call made inside an active parallel
/// region on the calling thread, and one made outside on
/// omp_get_max_threads() threads, whatever openblas_set_num_threads said;
/// its pthread build (the static GPU bundle's) runs every call on its own
/// thread count. So: runBlasOnOneThread sets that count to one (once;
/// idempotent; OpenMP's thread count is left as it was), and a call made
/// outside a parallel region holds a OneBlasThread.
void runBlasOnOneThread();

/// While alive, OpenMP's thread count on this thread is one, so that a BLAS
/// call made here outside a parallel region runs on this thread alone.
class OneBlasThread {
public:
  OneBlasThread();
  ~OneBlasThread();
  OneBlasThread(const OneBlasThread &) = delete;
  OneBlasThread &operator=(const OneBlasThread &) = delete;

private:
  int saved;
};

/// Called first thing in main(). Where OpenBLAS chose kernels older than the
/// ones this CPU runs (nativeBlasCore) and OPENBLAS_CORETYPE is not set,
/// sets it to the native ones and executes this program again with the same
/// arguments (/proc/self/exe), so that the library loads with them; returns
/// only when it does not (the kernels are right, the user chose them, or the
/// exec failed, which leaves the library's choice). Must run before MPI
/// starts and before any thread does.
void useNativeBlasKernels(char **argv);

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_BLAS_H
