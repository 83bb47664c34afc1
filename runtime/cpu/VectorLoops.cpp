//===- VectorLoops.cpp - The float kernels' loops, for the CPU's vectors --===//
//
// VectorLoops.inc three times: for the baseline (SSE2) with FastMath.h's
// unfused form, for AVX2 and for AVX-512 with its fused one, the set
// vectorIsa (Blas.h) says. Compiled with -ffp-contract=off
// (runtime/cpu/CMakeLists.txt): the only fused multiply-adds are the
// written ones (mulAdd), so a form's bits do not depend on what the
// compiler chose to contract.
//
// The loops are bound by their arithmetic (the vector units issue about two
// operations a cycle). On an AMD EPYC (AVX2), one core, 4096 elements in
// the cache, ns an element, the unfused AVX2 loops before and the fused
// ones: exp 0.98-1.46 / 0.79-0.92, the tanh GeLU 1.63-2.08 / 1.05-1.07
// (with geluTanhFast's one exp and division), its gradient 2.18-2.52 /
// 1.75-2.04; the SSE2 loops took about twice the unfused AVX2 ones' time.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/VectorLoops.h"

#include "runtime/cpu/Blas.h"
#include "runtime/cpu/FastMath.h"

#include <algorithm>
#include <cmath>

namespace braid::cpu {

namespace loops_sse2 {
constexpr bool kFused = false;
#include "runtime/cpu/VectorLoops.inc"
} // namespace loops_sse2

#ifdef BRAID_CPU_X86_CLONES
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace loops_avx2 {
constexpr bool kFused = true;
#include "runtime/cpu/VectorLoops.inc"
} // namespace loops_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
namespace loops_avx512 {
constexpr bool kFused = true;
#include "runtime/cpu/VectorLoops.inc"
} // namespace loops_avx512
#pragma GCC pop_options
#endif

bool vectorLoopsFused() { BRAID_VECTOR_DISPATCH(loops, return isa::kFused); }

void geluLoop(const float *x, int64_t n, bool tanhApprox, float *y) {
  BRAID_VECTOR_DISPATCH(loops, return isa::geluLoop(x, n, tanhApprox, y));
}

void geluGradLoop(const float *x, const float *dy, int64_t n, bool tanhApprox,
                  float *dx) {
  BRAID_VECTOR_DISPATCH(loops,
                        return isa::geluGradLoop(x, dy, n, tanhApprox, dx));
}

void swigluLoop(const float *g, const float *u, int64_t n, float *y) {
  BRAID_VECTOR_DISPATCH(loops, return isa::swigluLoop(g, u, n, y));
}

void swigluGradLoop(const float *g, const float *u, const float *dy, int64_t n,
                    float *dg, float *du) {
  BRAID_VECTOR_DISPATCH(loops, return isa::swigluGradLoop(g, u, dy, n, dg, du));
}

float maxOf(const float *x, int64_t n) {
  BRAID_VECTOR_DISPATCH(loops, return isa::maxOf(x, n));
}

double sumExpShifted(const float *x, int64_t n, float shift) {
  BRAID_VECTOR_DISPATCH(loops, return isa::sumExpShifted(x, n, shift));
}

namespace {
/// sumExpShifted asking for ahead[0, n) as it goes (null: nothing; a
/// prefetch past an array's end does no harm).
double sumExpShiftedAhead(const float *x, int64_t n, float shift,
                          const float *ahead) {
  BRAID_VECTOR_DISPATCH(loops, return isa::sumExpShifted(x, n, shift, ahead));
}
} // namespace

void maxAndSumExp(const float *x, int64_t n, float &m, double &sum) {
  // Two passes over a whole row (its max, then its exps) read a row longer
  // than the caches twice, the first time waiting on memory with the
  // arithmetic idle; a block's two passes read it from the cache while its
  // exps ask for the next block, a line every 16 floats (a burst of
  // prefetches at the block's start stalled instead). A vocabulary row of
  // 50304 floats on one core: 63 us against 72-76 for the two passes.
  m = -__builtin_inff();
  sum = 0;
  for (int64_t c0 = 0; c0 < n; c0 += kSoftmaxBlock) {
    const int64_t len = std::min(kSoftmaxBlock, n - c0);
    const float *block = x + c0;
    float blockMax = maxOf(block, len);
    if (blockMax > m) {
      if (sum != 0)
        sum *= std::exp(double(m) - double(blockMax));
      m = blockMax;
    }
    sum +=
        sumExpShiftedAhead(block, len, m, c0 + len < n ? block + len : nullptr);
  }
}

void expTimes(const float *x, int64_t n, float shift, float scale, float *out) {
  BRAID_VECTOR_DISPATCH(loops, return isa::expTimes(x, n, shift, scale, out));
}

} // namespace braid::cpu
