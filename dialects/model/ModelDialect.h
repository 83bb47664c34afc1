//===- ModelDialect.h - The `model` dialect ---------------------*- C++ -*-===//
//
// Include this header to use the `model` dialect: its ops, attributes, enums
// and interfaces.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_DIALECTS_MODEL_MODELDIALECT_H
#define BRAID_DIALECTS_MODEL_MODELDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/model/ModelDialect.h.inc"
#include "dialects/model/ModelEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/model/ModelAttrs.h.inc"

namespace braid::model::detail {
/// The bytes of every tensor operand and result of `op`, each counted once.
int64_t defaultBytesAccessed(mlir::Operation *op);
} // namespace braid::model::detail

#include "runtime/plan/KernelFlags.h"

namespace braid::model {
/// Marks an op that lowers to one plan kernel; the kernel itself is the
/// op's kPlanKernel (Model_PlanKernel in ModelInterfaces.td).
template <typename ConcreteType>
class PlanKernelTrait
    : public mlir::OpTrait::TraitBase<ConcreteType, PlanKernelTrait> {};
} // namespace braid::model

#include "dialects/model/ModelInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/model/ModelOps.h.inc"

namespace braid::model {
/// The number of elements of a statically shaped tensor type (1 for rank 0).
int64_t getNumElements(mlir::Type type);
/// The bytes of one element of a float or integer type.
int64_t getElementBytes(mlir::Type elementType);
} // namespace braid::model

#endif // BRAID_DIALECTS_MODEL_MODELDIALECT_H
