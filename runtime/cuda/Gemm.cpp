//===- Gemm.cpp - Linear layers through cuBLASLt --------------------------===//

#include "runtime/cuda/Gemm.h"

#include "runtime/cuda/Check.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace braid::cuda {
namespace {

template <typename T> cudaDataType_t dataType() {
  return std::is_same_v<T, float>  ? CUDA_R_32F
         : std::is_same_v<T, bf16> ? CUDA_R_16BF
                                   : CUDA_R_16F;
}

/// The largest power of two up to 256 that divides every address.
int alignmentOf(std::initializer_list<const void *> pointers) {
  int align = 256;
  for (const void *p : pointers)
    if (p)
      while (align > 1 && reinterpret_cast<uintptr_t>(p) % uintptr_t(align))
        align /= 2;
  return align;
}

} // namespace

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(size_t workspaceBytes) {
  std::unique_ptr<Gemm> gemm(new Gemm());
  BRAID_CUBLAS_CHECK(cublasLtCreate(&gemm->handle_));
  if (workspaceBytes > 0)
    BRAID_CUDA_CHECK(cudaMalloc(&gemm->workspace_, workspaceBytes));
  gemm->workspaceBytes_ = workspaceBytes;
  return gemm;
}

Gemm::~Gemm() {
  for (auto &[key, p] : prepared_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (workspace_)
    cudaFree(workspace_);
  if (scaledBias_)
    cudaFree(scaledBias_);
  if (handle_)
    cublasLtDestroy(handle_);
}

absl::StatusOr<Gemm::Prepared *> Gemm::prepare(const Problem &p) {
  auto key = p.key();
  if (auto it = prepared_.find(key); it != prepared_.end())
    return &it->second;
  // Made whole before it is kept, so that a failure keeps nothing half made
  // (the destructor frees what is kept).
  Prepared made;
  auto release = [&] {
    cublasLtMatrixLayoutDestroy(made.a);
    cublasLtMatrixLayoutDestroy(made.b);
    cublasLtMatrixLayoutDestroy(made.d);
    cublasLtMatmulDescDestroy(made.op);
  };
  absl::Status status = [&]() -> absl::Status {
    BRAID_CUBLAS_CHECK(
        cublasLtMatmulDescCreate(&made.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        made.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        made.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (p.bias) {
      cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          made.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    }
    // Stored (column-major) shapes: op(A) is m x k, op(B) k x n, D m x n.
    BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
        &made.a, p.ab, p.transA ? p.k : p.m, p.transA ? p.m : p.k, p.lda));
    BRAID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
        &made.b, p.ab, p.transB ? p.n : p.k, p.transB ? p.k : p.n, p.ldb));
    BRAID_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&made.d, p.d, p.m, p.n, p.ldd));

    cublasLtMatmulPreference_t preference = nullptr;
    BRAID_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    cublasStatus_t set = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes_,
        sizeof(workspaceBytes_));
    uint32_t align = uint32_t(p.align);
    for (cublasLtMatmulPreferenceAttributes_t attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (set == CUBLAS_STATUS_SUCCESS)
        set = cublasLtMatmulPreferenceSetAttribute(preference, attr, &align,
                                                   sizeof(align));
    cublasLtMatmulHeuristicResult_t results[kTuningCandidates] = {};
    int found = 0;
    const int wanted = tuningScratch_ ? kTuningCandidates : 1;
    cublasStatus_t asked =
        set != CUBLAS_STATUS_SUCCESS
            ? set
            : cublasLtMatmulAlgoGetHeuristic(handle_, made.op, made.a, made.b,
                                             made.d, made.d, preference, wanted,
                                             results, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    BRAID_CUBLAS_CHECK(asked);
    if (found == 0)
      return absl::UnimplementedError(
          absl::StrCat("cuBLASLt has no algorithm for a ", p.m, " x ", p.n,
                       " x ", p.k, " product (", p.transA ? "T" : "N",
                       p.transB ? "T" : "N", p.bias ? ", bias" : "", ")"));
    made.algo = results[0].algo;
    float cublasMs = INFINITY;
    if (found > 1) {
      absl::StatusOr<cublasLtMatmulAlgo_t> best =
          fastest(p, made, results, found, &cublasMs);
      if (!best.ok())
        return best.status();
      made.algo = *best;
    }
    if (FewRowsCandidate(p)) {
      // Braid's own product where it is faster, or where nothing was
      // timed (a product of a few rows, on which cuBLASLt's algorithms read
      // the weight at a third of a copy's rate on an H200).
      std::string shape =
          absl::StrCat("linear ", p.n, " x ", p.k, " -> ", p.m,
                       p.ab == CUDA_R_16BF ? " bf16" : " fp16",
                       p.bias ? " (bias)" : "", ": ");
      if (tuningScratch_) {
        if (cublasMs == INFINITY) {
          absl::StatusOr<cublasLtMatmulAlgo_t> best =
              fastest(p, made, results, 1, &cublasMs);
          if (!best.ok())
            return best.status();
        }
        absl::StatusOr<float> ownMs = timeFewRows(p);
        if (!ownMs.ok())
          return ownMs.status();
        made.fewRows = *ownMs <= cublasMs;
        notes_.push_back(
            *ownMs == INFINITY
                ? shape + "Braid's few-rows product (not timed: the operands "
                          "do not fit the scratch)"
                : absl::StrCat(shape,
                               made.fewRows ? "Braid's few-rows product"
                                            : "cuBLASLt",
                               " (Braid's ", absl::StrFormat("%.4f", *ownMs),
                               " ms, cuBLASLt ",
                               absl::StrFormat("%.4f", cublasMs), " ms)"));
      } else {
        made.fewRows = true;
        notes_.push_back(shape + "Braid's few-rows product (not timed)");
      }
      fewRowsChosen_ += made.fewRows;
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    release();
    return status;
  }
  return &(prepared_[key] = made);
}

namespace {

int64_t bytesOf(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/// n rounded up to a multiple of 256.
int64_t padded(int64_t n) { return (n + 255) / 256 * 256; }

} // namespace

bool Gemm::FewRowsCandidate(const Problem &p) {
  return (p.ab == CUDA_R_16BF || p.ab == CUDA_R_16F) && p.d == p.ab &&
         p.transA && !p.transB && p.n >= 1 &&
         p.n <= kFewRowsLinearMaxRows && p.k % 8 == 0 && p.lda == p.k &&
         p.ldb == p.k && p.ldd == p.m && p.align >= 16;
}

cudaError_t Gemm::runFewRows(const Problem &p, const void *a, const void *b,
                             void *d, const void *bias, cudaStream_t stream) {
  // a is W [out, in] (column-major [in, out]), b is x [rows, in].
  const cpu::LinearShape s{p.n, p.k, p.m, true, 1.0};
  if (p.ab == CUDA_R_16BF)
    return fewRowsLinear(static_cast<const bf16 *>(b),
                         static_cast<const bf16 *>(a),
                         static_cast<const bf16 *>(bias), s,
                         static_cast<bf16 *>(d), stream);
  return fewRowsLinear(static_cast<const f16 *>(b),
                       static_cast<const f16 *>(a),
                       static_cast<const f16 *>(bias), s, static_cast<f16 *>(d),
                       stream);
}

namespace {

/// Milliseconds per call of `run` (true where the call was enqueued) on
/// `stream`: once to warm up, then kTimedRuns calls between two events;
/// INFINITY where a call fails.
template <typename Run>
absl::StatusOr<float> timeCalls(cudaStream_t stream, Run run) {
  constexpr int kTimedRuns = 3;
  if (!run())
    return INFINITY;
  cudaEvent_t begin = nullptr, end = nullptr;
  BRAID_CUDA_CHECK(cudaEventCreate(&begin));
  if (cudaError_t e = cudaEventCreate(&end); e != cudaSuccess) {
    cudaEventDestroy(begin);
    BRAID_CUDA_CHECK(e);
  }
  cudaError_t error = cudaEventRecord(begin, stream);
  bool ran = true;
  for (int r = 0; r < kTimedRuns && ran && error == cudaSuccess; ++r)
    ran = run();
  if (error == cudaSuccess)
    error = cudaEventRecord(end, stream);
  if (error == cudaSuccess)
    error = cudaEventSynchronize(end);
  float ms = 0;
  if (error == cudaSuccess)
    error = cudaEventElapsedTime(&ms, begin, end);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  BRAID_CUDA_CHECK(error);
  return ran ? ms / kTimedRuns : INFINITY;
}

} // namespace

absl::StatusOr<bool> Gemm::tuningOperands(const Problem &p, Operands &o) {
  // The stored (column-major) matrices: A has lda-element columns, as many
  // as op(A)'s k (transposed) or m; B likewise; D n columns of ldd.
  const int64_t aBytes = p.lda * (p.transA ? p.m : p.k) * bytesOf(p.ab);
  const int64_t bBytes = p.ldb * (p.transB ? p.k : p.n) * bytesOf(p.ab);
  const int64_t dBytes = p.ldd * p.n * bytesOf(p.d);
  const int64_t biasBytes = p.bias ? p.m * bytesOf(p.ab) : 0;
  const int64_t total =
      padded(aBytes) + padded(bBytes) + padded(dBytes) + padded(biasBytes);
  if (total > int64_t(tuningBytes_))
    return false;
  auto *base = static_cast<uint8_t *>(tuningScratch_);
  o.a = base;
  o.b = base + padded(aBytes);
  o.d = base + padded(aBytes) + padded(bBytes);
  o.bias = p.bias ? base + padded(aBytes) + padded(bBytes) + padded(dBytes)
                  : nullptr;
  BRAID_CUDA_CHECK(
      fillRandomHalves(base, total / 2, uint64_t(tuned_) + 1, tuningStream_));
  return true;
}

absl::StatusOr<float> Gemm::timeFewRows(const Problem &p) {
  Operands o;
  absl::StatusOr<bool> fits = tuningOperands(p, o);
  if (!fits.ok())
    return fits.status();
  if (!*fits)
    return INFINITY;
  return timeCalls(tuningStream_, [&] {
    return runFewRows(p, o.a, o.b, o.d, o.bias, tuningStream_) == cudaSuccess;
  });
}

absl::StatusOr<cublasLtMatmulAlgo_t>
Gemm::fastest(const Problem &p, const Prepared &made,
              const cublasLtMatmulHeuristicResult_t *candidates, int found,
              float *bestMsOut) {
  Operands o;
  absl::StatusOr<bool> fits = tuningOperands(p, o);
  if (!fits.ok())
    return fits.status();
  if (!*fits)
    return candidates[0].algo;
  if (p.bias)
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        made.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &o.bias, sizeof(o.bias)));
  // The weight gradient's product accumulates (beta 1) as it will run.
  const float alpha = 1.0f, beta = p.d == CUDA_R_32F ? 1.0f : 0.0f;
  // Each candidate timed (one that fails is passed over).
  int best = 0;
  float bestMs = INFINITY;
  for (int c = 0; c < found; ++c) {
    if (candidates[c].state != CUBLAS_STATUS_SUCCESS ||
        candidates[c].workspaceSize > workspaceBytes_)
      continue;
    absl::StatusOr<float> ms = timeCalls(tuningStream_, [&] {
      return cublasLtMatmul(handle_, made.op, &alpha, o.a, made.a, o.b, made.b,
                            &beta, o.d, made.d, o.d, made.d,
                            &candidates[c].algo, workspace_, workspaceBytes_,
                            tuningStream_) == CUBLAS_STATUS_SUCCESS;
    });
    if (!ms.ok())
      return ms.status();
    if (*ms < bestMs) {
      bestMs = *ms;
      best = c;
    }
  }
  ++tuned_;
  *bestMsOut = bestMs;
  return candidates[best].algo;
}

absl::Status Gemm::run(Problem p, const void *a, const void *b, void *d,
                       float beta, const void *bias, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0)
    return absl::OkStatus();
  p.align = alignmentOf({a, b, d, bias});
  absl::StatusOr<Prepared *> prepared = prepare(p);
  if (!prepared.ok())
    return prepared.status();
  Prepared &q = **prepared;
  if (q.fewRows) {
    BRAID_CUDA_CHECK(runFewRows(p, a, b, d, bias, stream));
    return absl::OkStatus();
  }
  if (p.bias)
    BRAID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        q.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.0f;
  BRAID_CUBLAS_CHECK(cublasLtMatmul(handle_, q.op, &alpha, a, q.a, b, q.b,
                                    &beta, d, q.d, d, q.d, &q.algo, workspace_,
                                    workspaceBytes_, stream));
  return absl::OkStatus();
}

// Row-major [r, c] is column-major [c, r] with leading dimension c. With W
// stored [in, out] (column-major [out, in], ld out) or [out, in] (column-
// major [in, out], ld in):
//   yᵀ [out, rows]  = op(W) xᵀ,   op(W) = Wstored or its transpose;
//   dxᵀ [in, rows]  = op(W) dyᵀ;
//   dW += xᵀ dy as its column-major self: [out, in] = dyᵀ x for W stored
//   [in, out], [in, out] = xᵀ dy for W stored [out, in].
template <typename T>
Gemm::Problem Gemm::forwardProblem(const cpu::LinearShape &s, bool epilogue) {
  return {s.out,         s.rows,  s.in,
          s.transposeW,  false,   s.transposeW ? s.in : s.out,
          s.in,          s.out,   dataType<T>(),
          dataType<T>(), epilogue};
}

template <typename T>
Gemm::Problem Gemm::inputGradProblem(const cpu::LinearShape &s) {
  return {s.in,          s.rows, s.out,
          !s.transposeW, false,  s.transposeW ? s.in : s.out,
          s.out,         s.in,   dataType<T>(),
          dataType<T>(), false};
}

template <typename T>
Gemm::Problem Gemm::weightGradProblem(const cpu::LinearShape &s) {
  // A is dy (stored [in, out]) or x (stored [out, in]), B the other,
  // transposed.
  return s.transposeW
             ? Problem{s.in,  s.out, s.rows,        false,      true, s.in,
                       s.out, s.in,  dataType<T>(), CUDA_R_32F, false}
             : Problem{s.out, s.in,  s.rows,        false,      true, s.out,
                       s.in,  s.out, dataType<T>(), CUDA_R_32F, false};
}

template <typename T>
absl::Status Gemm::LinearForward(const T *x, const T *w, const T *bias,
                                 const cpu::LinearShape &s, T *y,
                                 cudaStream_t stream) {
  // The bias through the epilogue, which adds it to the float product before
  // y is rounded to T, once. A scaled bias is scaled into scaledBias_ first
  // (rounded to T: exact for the powers of two 1 / tp is in practice).
  // Adding it as C with beta 1 instead rounded twice on an H100 (the
  // product to bf16, then the sum: 1.4 units in the last place off).
  if (bias && s.biasScale != 1.0) {
    if (scaledBiasBytes_ < size_t(s.out) * sizeof(T))
      return absl::FailedPreconditionError(
          "a linear with a scaled bias that was not prepared (Gemm::Prepare)");
    T *scaled = static_cast<T *>(scaledBias_);
    BRAID_CUDA_CHECK(scaleVector(bias, s.biasScale, s.out, scaled, stream));
    bias = scaled;
  }
  return run(forwardProblem<T>(s, bias != nullptr), w, x, y, 0.0f, bias,
             stream);
}

template <typename T>
absl::Status Gemm::LinearBackward(const T *x, const T *w, const T *dy,
                                  const cpu::LinearShape &s, T *dx, float *dw,
                                  float *dbias, cudaStream_t stream) {
  if (dx)
    if (absl::Status st =
            run(inputGradProblem<T>(s), w, dy, dx, 0.0f, nullptr, stream);
        !st.ok())
      return st;
  if (dw) {
    const T *a = s.transposeW ? x : dy, *b = s.transposeW ? dy : x;
    if (absl::Status st =
            run(weightGradProblem<T>(s), a, b, dw, 1.0f, nullptr, stream);
        !st.ok())
      return st;
  }
  if (dbias)
    BRAID_CUDA_CHECK(addColumnSums(dy, s.rows, s.out, dbias, stream));
  return absl::OkStatus();
}

template <typename T>
absl::Status Gemm::Prepare(const cpu::LinearShape &s, bool bias) {
  if (bias && s.biasScale != 1.0 &&
      scaledBiasBytes_ < size_t(s.out) * sizeof(T)) {
    if (scaledBias_)
      BRAID_CUDA_CHECK(cudaFree(scaledBias_));
    scaledBias_ = nullptr;
    scaledBiasBytes_ = 0;
    BRAID_CUDA_CHECK(cudaMalloc(&scaledBias_, size_t(s.out) * sizeof(T)));
    scaledBiasBytes_ = size_t(s.out) * sizeof(T);
  }
  for (const Problem &p : {forwardProblem<T>(s, bias),
                           inputGradProblem<T>(s), weightGradProblem<T>(s)})
    if (p.m > 0 && p.n > 0)
      if (absl::StatusOr<Prepared *> q = prepare(p); !q.ok())
        return q.status();
  return absl::OkStatus();
}

#define BRAID_INSTANTIATE_GEMM(T)                                              \
  template absl::Status Gemm::LinearForward<T>(                                \
      const T *, const T *, const T *, const cpu::LinearShape &, T *,          \
      cudaStream_t);                                                           \
  template absl::Status Gemm::LinearBackward<T>(                               \
      const T *, const T *, const T *, const cpu::LinearShape &, T *, float *, \
      float *, cudaStream_t);                                                  \
  template absl::Status Gemm::Prepare<T>(const cpu::LinearShape &, bool);
BRAID_INSTANTIATE_GEMM(float)
BRAID_INSTANTIATE_GEMM(bf16)
BRAID_INSTANTIATE_GEMM(f16)
#undef BRAID_INSTANTIATE_GEMM

} // namespace braid::cuda
