//===- ReferenceEvaluator.h - Runs model IR on the CPU kernels --*- C++ -*-===//
//
// A test oracle: evaluates a function of the `model` dialect op by op with
// the runtime's CPU kernels, in double, one buffer per SSA value. It checks
// what the compiler's transformations mean (autodiff against finite
// differences) independently of the plan lowering and the executor.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TESTS_UNIT_REFERENCEEVALUATOR_H
#define BRAID_TESTS_UNIT_REFERENCEEVALUATOR_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <string>
#include <vector>

namespace braid::test {

using Buffer = std::vector<double>;

/// Evaluates `func` on `args` (one buffer per argument; integer tensors hold
/// their values as doubles) and returns one buffer per result, or sets
/// `error` to what it could not evaluate.
std::vector<Buffer> evaluate(mlir::func::FuncOp func,
                             const std::vector<Buffer> &args,
                             std::string &error);

} // namespace braid::test

#endif // BRAID_TESTS_UNIT_REFERENCEEVALUATOR_H
