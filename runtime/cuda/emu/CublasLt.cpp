//===- CublasLt.cpp - The cuBLASLt subset, emulated on the host -----------===//
//
// What runtime/cuda/Gemm.cpp asks of cuBLASLt, with cuBLASLt's semantics
// (column-major layouts with a leading dimension, op(A) and op(B) by the
// descriptor's TRANSA and TRANSB):
//
//   D = alpha op(A) op(B) + beta C (+ bias, one value per row of D)
//
// A and B in f32, bf16 or fp16 (the same type), C and D in that type or f32,
// accumulation and scale in f32; products summed in the order of k in
// float. The heuristic answers one algorithm that remembers the operand
// alignment the preference promised, and the matmul refuses
// (CUBLAS_STATUS_NOT_SUPPORTED) operands less aligned than that, or a
// workspace smaller than the preference's limit promised, as the library's
// kernels would fail on them.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/emu/Emu.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

struct Handle {
  int magic = 0x4c74;
};

struct MatmulDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
};

struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

struct Preference {
  uint64_t maxWorkspace = 0;
  uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D
};

/// What the emulated algorithm keeps in cublasLtMatmulAlgo_t's words.
enum AlgoWord {
  kMagic,
  kAlignA,
  kAlignB,
  kAlignC,
  kAlignD,
  kWorkspace,
  kIndex
};
constexpr uint64_t kAlgoMagic = 0xb4a1d0e3u;

template <typename T, typename H> T *as(H handle) {
  return reinterpret_cast<T *>(handle);
}

/// An attribute's value, of exactly the field's size, into the field.
template <typename F>
cublasStatus_t setField(F &field, const void *buf, size_t sizeInBytes) {
  if (sizeInBytes != sizeof(field))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(field));
  return CUBLAS_STATUS_SUCCESS;
}

bool known(cudaDataType_t t) {
  return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F;
}

float load(const void *base, cudaDataType_t t, size_t i) {
  if (t == CUDA_R_32F)
    return static_cast<const float *>(base)[i];
  if (t == CUDA_R_16F)
    return __half2float(static_cast<const __half *>(base)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[i]);
}

void store(void *base, cudaDataType_t t, size_t i, float v) {
  if (t == CUDA_R_32F)
    static_cast<float *>(base)[i] = v;
  else if (t == CUDA_R_16F)
    static_cast<__half *>(base)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16 *>(base)[i] = __float2bfloat16_rn(v);
}

bool aligned(const void *p, uint64_t align) {
  return align <= 1 || reinterpret_cast<uintptr_t>(p) % align == 0;
}

/// The problem's m, n, k if the layouts agree with the descriptor.
bool shapeOf(const MatmulDesc &d, const Layout &a, const Layout &b,
             const Layout &c, const Layout &dl, uint64_t &m, uint64_t &n,
             uint64_t &k) {
  const bool ta = d.transA == CUBLAS_OP_T, tb = d.transB == CUBLAS_OP_T;
  m = ta ? a.cols : a.rows;
  k = ta ? a.rows : a.cols;
  const uint64_t kb = tb ? b.cols : b.rows;
  n = tb ? b.rows : b.cols;
  return kb == k && c.rows == m && c.cols == n && dl.rows == m &&
         dl.cols == n && known(a.type) && a.type == b.type &&
         (c.type == a.type || c.type == CUDA_R_32F) && c.type == dl.type &&
         d.compute == CUBLAS_COMPUTE_32F && d.scale == CUDA_R_32F &&
         (d.transA == CUBLAS_OP_N || ta) && (d.transB == CUBLAS_OP_N || tb);
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle)
    return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = reinterpret_cast<cublasLtHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  delete as<Handle>(lightHandle);
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  default:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "the library was not initialized";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an invalid value was used as an argument";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "the functionality requested is not supported";
  default:
    return "an internal operation failed";
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc)
    return CUBLAS_STATUS_INVALID_VALUE;
  auto *d = new MatmulDesc;
  d->compute = computeType;
  d->scale = scaleType;
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete as<MatmulDesc>(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                               cublasLtMatmulDescAttributes_t attr,
                               const void *buf, size_t sizeInBytes) {
  MatmulDesc *d = as<MatmulDesc>(matmulDesc);
  if (!d || !buf)
    return CUBLAS_STATUS_INVALID_VALUE;
  auto take = [&](auto &field) { return setField(field, buf, sizeInBytes); };
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
    return take(d->transA);
  case CUBLASLT_MATMUL_DESC_TRANSB:
    return take(d->transB);
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return take(d->epilogue);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return take(d->bias);
  default:
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!matLayout || !known(type) || ld < int64_t(std::max<uint64_t>(rows, 1)))
    return CUBLAS_STATUS_INVALID_VALUE;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(
      new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete as<Layout>(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref)
    return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete as<Preference>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                     cublasLtMatmulPreferenceAttributes_t attr,
                                     const void *buf, size_t sizeInBytes) {
  Preference *p = as<Preference>(pref);
  if (!p || !buf)
    return CUBLAS_STATUS_INVALID_VALUE;
  auto take = [&](auto &field) { return setField(field, buf, sizeInBytes); };
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    return take(p->maxWorkspace);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    return take(p->align[0]);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    return take(p->align[1]);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    return take(p->align[2]);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    return take(p->align[3]);
  default:
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
    cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int *returnAlgoCount) {
  if (!lightHandle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!operationDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !preference ||
      requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m, n, k;
  *returnAlgoCount = 0;
  if (!shapeOf(*as<MatmulDesc>(operationDesc), *as<Layout>(Adesc),
               *as<Layout>(Bdesc), *as<Layout>(Cdesc), *as<Layout>(Ddesc), m,
               n, k))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const Preference &p = *as<Preference>(preference);
  // Up to kAlgorithms candidates (as cuBLASLt offers several), told apart by
  // their index; all compute the same.
  constexpr int kAlgorithms = 3;
  const int count = std::min(requestedAlgoCount, kAlgorithms);
  for (int c = 0; c < count; ++c) {
    cublasLtMatmulHeuristicResult_t &r = heuristicResultsArray[c];
    r = {};
    r.algo.data[kMagic] = kAlgoMagic;
    for (int i = 0; i < 4; ++i)
      r.algo.data[kAlignA + i] = p.align[i];
    r.algo.data[kWorkspace] = p.maxWorkspace;
    r.algo.data[kIndex] = uint64_t(c);
    r.workspaceSize = 0;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
  }
  *returnAlgoCount = count;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
               const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
               const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
               const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
               cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
               void *workspace, size_t workspaceSizeInBytes,
               cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "cublasLtMatmul");
  if (!lightHandle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!computeDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !alpha ||
      !beta || !A || !B || !D)
    return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc &d = *as<MatmulDesc>(computeDesc);
  const Layout &a = *as<Layout>(Adesc), &b = *as<Layout>(Bdesc),
               &c = *as<Layout>(Cdesc), &dl = *as<Layout>(Ddesc);
  uint64_t m, n, k;
  if (!shapeOf(d, a, b, c, dl, m, n, k))
    return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *static_cast<const float *>(alpha);
  const float be = *static_cast<const float *>(beta);
  if (be != 0 && !C)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool bias = d.epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && !bias)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (bias && !d.bias)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (algo) {
    if (algo->data[kMagic] != kAlgoMagic)
      return CUBLAS_STATUS_INVALID_VALUE;
    if (!aligned(A, algo->data[kAlignA]) || !aligned(B, algo->data[kAlignB]) ||
        (C && !aligned(C, algo->data[kAlignC])) ||
        !aligned(D, algo->data[kAlignD]) ||
        workspaceSizeInBytes < algo->data[kWorkspace] ||
        (workspaceSizeInBytes && !workspace))
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool ta = d.transA == CUBLAS_OP_T, tb = d.transB == CUBLAS_OP_T;
  const void *biasData = d.bias;
  // Run now, or when the graph of a capturing stream is launched (with the
  // descriptors' values of now, as a captured cuBLASLt call keeps them).
  auto product = [=] {
    std::vector<float> column(m);
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        float sum = 0;
        for (uint64_t p = 0; p < k; ++p) {
          const size_t ai = ta ? i * size_t(a.ld) + p : p * size_t(a.ld) + i;
          const size_t bi = tb ? p * size_t(b.ld) + j : j * size_t(b.ld) + p;
          sum += load(A, a.type, ai) * load(B, b.type, bi);
        }
        float v = al * sum;
        if (be != 0)
          v += be * load(C, c.type, j * size_t(c.ld) + i);
        if (bias)
          v += load(biasData, dl.type, i);
        column[i] = v;
      }
      // C may be D: each column is read before it is written.
      for (uint64_t i = 0; i < m; ++i)
        store(D, dl.type, j * size_t(dl.ld) + i, column[i]);
    }
  };
  braid::cuda::emu::runOrRecord(stream, product);
  return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
