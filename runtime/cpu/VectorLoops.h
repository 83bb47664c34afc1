//===- VectorLoops.h - The float kernels' loops, for the CPU's vectors ----===//
//
// Private to runtime/cpu. The float loops of FastMath.h's functions (GeLU,
// SwiGLU, softmax rows), compiled three times: for the baseline x86-64
// (SSE2, 4 floats a vector) with FastMath's unfused form, and for AVX2 (8)
// and AVX-512 (16) with its fused form (a multiply and the add after it
// rounded once, FMA); the set vectorIsa (Blas.h) says runs. The AVX2 and
// AVX-512 loops give the same bits as each other and as FastMath's fused
// functions called one element at a time, the SSE2 loops as its unfused
// ones (FastMathTest); fused and unfused differ in the last bits.
//
// Row reductions run over kLanes interleaved partial results, combined in
// lane order at the end: a fixed order, so the same bits on any thread and
// any vector width, and one the compiler vectorises (a single running max
// or sum cannot be reordered without -ffast-math).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_VECTORLOOPS_H
#define BRAID_RUNTIME_CPU_VECTORLOOPS_H

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace braid::cpu {

inline constexpr int64_t kLanes = 16;

/// Whether the loops that run compute FastMath.h's fused form.
bool vectorLoopsFused();

/// y = GeLU(x) over n elements, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
/// x^3))) or 0.5 x (1 + erf(x / sqrt 2)), with FastMath's tail-exact
/// 1 + tanh and 1 + erf.
void geluLoop(const float *x, int64_t n, bool tanhApprox, float *y);
/// dx = dy GeLU'(x) over n elements.
void geluGradLoop(const float *x, const float *dy, int64_t n, bool tanhApprox,
                  float *dx);
/// y = silu(g) u over n elements.
void swigluLoop(const float *g, const float *u, int64_t n, float *y);
/// dg and du of y = silu(g) u over n elements.
void swigluGradLoop(const float *g, const float *u, const float *dy, int64_t n,
                    float *dg, float *du);

/// The largest of x[0, n); -inf for n = 0.
float maxOf(const float *x, int64_t n);
/// The sum of expFast(x[c] - shift) over x[0, n), added in double.
double sumExpShifted(const float *x, int64_t n, float shift);
/// The largest m of x[0, n) and the sum of expFast(x[c] - m) over it, in
/// double, reading x from memory once: by blocks of kSoftmaxBlock floats,
/// each block's max first and its exps then (both from the cache, the next
/// block prefetched meanwhile), the sum so far multiplied by e^(m' - m) in
/// double where a block raises the max from m' to m. A row of at most one
/// block gives maxOf's and sumExpShifted's values; n = 0 gives -inf and 0.
void maxAndSumExp(const float *x, int64_t n, float &m, double &sum);
inline constexpr int64_t kSoftmaxBlock = 4096;

/// out[c] = expFast(x[c] - shift) · scale over n elements (out may be x).
void expTimes(const float *x, int64_t n, float shift, float scale, float *out);

/// g[c] = e^(row[c] - lse) · scale over n elements: a softmax row times a
/// scale (the cross-entropy's gradient before the target's -scale). Float
/// rows through expTimes; double rows libm's exp, in double throughout.
template <typename T>
inline void softmaxTimes(const T *row, int64_t n, T lse, double scale, T *g) {
  if constexpr (std::is_same_v<T, float>) {
    expTimes(row, n, lse, float(scale), g);
  } else {
    for (int64_t c = 0; c < n; ++c)
      g[c] = T(std::exp(row[c] - double(lse)) * scale);
  }
}

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_VECTORLOOPS_H
