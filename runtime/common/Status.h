//===- Status.h - Early returns on absl::Status ----------------*- C++ -*-===//

#ifndef BRAID_RUNTIME_COMMON_STATUS_H
#define BRAID_RUNTIME_COMMON_STATUS_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

/// Returns the status of `expr` from the enclosing function unless it is OK.
#define BRAID_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    if (absl::Status braidStatus = (expr); !braidStatus.ok())                  \
      return braidStatus;                                                      \
  } while (false)

/// `auto lhs = *expr` for an absl::StatusOr `expr`; returns its status from
/// the enclosing function when it holds none.
#define BRAID_ASSIGN_OR_RETURN(lhs, expr)                                      \
  auto lhs##OrError = (expr);                                                  \
  if (!lhs##OrError.ok())                                                      \
    return lhs##OrError.status();                                              \
  auto lhs = *lhs##OrError

#endif // BRAID_RUNTIME_COMMON_STATUS_H
