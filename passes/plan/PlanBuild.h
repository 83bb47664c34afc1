//===- PlanBuild.h - Making buffers and kernels -----------------*- C++ -*-===//
//
// The two ops that the passes making plan programs create, with their
// optional attributes left out: `plan-lower` and `plan-zero` build with them.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_PLAN_PLANBUILD_H
#define BRAID_PASSES_PLAN_PLANBUILD_H

#include "dialects/plan/PlanDialect.h"

#include "mlir/IR/Builders.h"

#include <optional>

namespace braid::plan_ir {

/// A `plan.buffer` @`symbol` of `type`, `role` and (unless empty) `name`, on
/// the pipeline stage `stage` (if any), at the insertion point of `b`.
inline BufferOp createBuffer(mlir::OpBuilder &b, mlir::Location loc,
                             llvm::StringRef symbol, mlir::Type type,
                             llvm::StringRef role, llvm::StringRef name,
                             std::optional<int64_t> stage) {
  return b.create<BufferOp>(
      loc, b.getStringAttr(symbol), mlir::TypeAttr::get(type),
      b.getStringAttr(role),
      name.empty() ? mlir::StringAttr() : b.getStringAttr(name),
      mlir::IntegerAttr(), mlir::StringAttr(), mlir::IntegerAttr(),
      mlir::DenseI64ArrayAttr(),
      stage ? b.getI64IntegerAttr(*stage) : mlir::IntegerAttr(),
      mlir::IntegerAttr(), mlir::FlatSymbolRefAttr(), mlir::IntegerAttr(),
      mlir::FlatSymbolRefAttr(), mlir::UnitAttr());
}

/// A `plan.kernel` `name` reading `inputs` and writing `outputs`, at the
/// insertion point of `b`.
inline KernelOp createKernel(mlir::OpBuilder &b, braid::plan::KernelId kernel,
                             llvm::ArrayRef<BufferOp> inputs,
                             llvm::ArrayRef<BufferOp> outputs,
                             mlir::DictionaryAttr params, mlir::Location loc,
                             llvm::StringRef provenance,
                             mlir::ArrayAttr group = {},
                             mlir::StringAttr rankAxis = {}) {
  llvm::SmallVector<mlir::Attribute> ins, outs;
  for (BufferOp v : inputs)
    ins.push_back(mlir::FlatSymbolRefAttr::get(v.getSymNameAttr()));
  for (BufferOp v : outputs)
    outs.push_back(mlir::FlatSymbolRefAttr::get(v.getSymNameAttr()));
  return b.create<KernelOp>(loc, kernel, b.getArrayAttr(ins),
                            b.getArrayAttr(outs), params,
                            b.getStringAttr(provenance), group, rankAxis);
}

} // namespace braid::plan_ir

#endif // BRAID_PASSES_PLAN_PLANBUILD_H
