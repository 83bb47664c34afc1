//===- Check.h - CUDA and cuBLAS errors as statuses -------------*- C++ -*-===//
//
// The runtime returns statuses, never throws: these macros return an
// Internal status naming the failed call, the library's name for the error
// and the file and line, from a function that returns absl::Status (or a
// StatusOr).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_CHECK_H
#define BRAID_RUNTIME_CUDA_CHECK_H

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#define BRAID_CUDA_CHECK(expr)                                                 \
  do {                                                                         \
    cudaError_t braidError_ = (expr);                                          \
    if (braidError_ != cudaSuccess)                                            \
      return absl::InternalError(absl::StrCat(                                 \
          #expr, ": ", cudaGetErrorName(braidError_), " (",                    \
          cudaGetErrorString(braidError_), ") at ", __FILE__, ":", __LINE__)); \
  } while (0)

#define BRAID_CUBLAS_CHECK(expr)                                               \
  do {                                                                         \
    cublasStatus_t braidStatus_ = (expr);                                      \
    if (braidStatus_ != CUBLAS_STATUS_SUCCESS)                                 \
      return absl::InternalError(                                              \
          absl::StrCat(#expr, ": ", cublasLtGetStatusName(braidStatus_), " (", \
                       cublasLtGetStatusString(braidStatus_), ") at ",         \
                       __FILE__, ":", __LINE__));                              \
  } while (0)

#endif // BRAID_RUNTIME_CUDA_CHECK_H
