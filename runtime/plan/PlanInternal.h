//===- PlanInternal.h - What the loader's files share -----------*- C++ -*-===//
//
// Small helpers of the plan file's reader, validator and kernel checks
// (runtime/plan/PlanFile.cpp, PlanValidation.cpp, KernelChecks.cpp); not for
// use outside runtime/plan.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_PLAN_PLANINTERNAL_H
#define BRAID_RUNTIME_PLAN_PLANINTERNAL_H

#include "runtime/common/Status.h"
#include "runtime/plan/plan.pb.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cstdint>
#include <string>

namespace braid::plan::internal {

/// "[2, 3]": a buffer's shape, for messages.
inline std::string shapeStr(const Buffer &b) {
  return absl::StrCat("[", absl::StrJoin(b.shape(), ", "), "]");
}

inline bool isFloat(DType d) {
  return d == F32 || d == F64 || d == BF16 || d == F16;
}

/// The element count of a validated buffer.
inline int64_t numel(const Buffer &b) {
  int64_t n = 1;
  for (int64_t d : b.shape())
    n *= d;
  return n;
}

} // namespace braid::plan::internal

#endif // BRAID_RUNTIME_PLAN_PLANINTERNAL_H
