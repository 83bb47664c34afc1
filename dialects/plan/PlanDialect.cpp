//===- PlanDialect.cpp - The `plan` dialect -------------------------------===//

#include "dialects/plan/PlanDialect.h"

#include "runtime/plan/KernelFlags.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace braid::plan_ir;

#include "dialects/plan/PlanDialect.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/plan/PlanOps.cpp.inc"

void PlanDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/plan/PlanOps.cpp.inc"
      >();
}

LogicalResult BufferOp::verify() {
  // B1: a known role.
  if (!llvm::is_contained({"parameter", "gradient", "optimizer_state",
                           "activation", "input", "workspace", "bucket",
                           "kv_cache"},
                          getRole()))
    return emitOpError("role \"") << getRole() << "\" is not one of parameter, "
                                  << "gradient, optimizer_state, activation, "
                                  << "input, workspace, bucket, kv_cache";
  // B2: a statically shaped tensor.
  auto type = dyn_cast<RankedTensorType>(getType());
  if (!type || !type.hasStaticShape())
    return emitOpError("type ") << getType()
                                << " is not a statically shaped tensor";
  // B3: offset >= 0 and aligned to the element.
  if (std::optional<int64_t> offset = getOffset()) {
    int64_t align = (type.getElementTypeBitWidth() + 7) / 8;
    if (*offset < 0 || *offset % align != 0)
      return emitOpError("offset ") << *offset << " is negative or not a "
                                    << "multiple of the element size " << align;
  }
  // B4: shard and dim together, dim in range, positive blocks.
  if (bool(getShard()) != bool(getDim()) || (getBlocks() && !getShard()))
    return emitOpError("shard and dim must be given together (and blocks "
                       "only with them)");
  if (std::optional<int64_t> dim = getDim()) {
    if (getShard()->empty() || *dim < 0 || *dim >= type.getRank())
      return emitOpError("shard \"")
             << *getShard() << "\" dim " << *dim
             << " does not name a mesh axis and a dimension of " << type;
    if (std::optional<ArrayRef<int64_t>> blocks = getBlocks())
      if (blocks->empty() ||
          llvm::any_of(*blocks, [](int64_t n) { return n < 1; }))
        return emitOpError("blocks must be positive sizes");
  }
  // B6: a view names its bucket and where in it it lies.
  if (bool(getViewOf()) != bool(getViewOffset()))
    return emitOpError("view_of and view_offset must be given together");
  if (std::optional<int64_t> at = getViewOffset()) {
    int64_t align = (type.getElementTypeBitWidth() + 7) / 8;
    if (*at < 0 || *at % align != 0)
      return emitOpError("view_offset ")
             << *at << " is negative or not a multiple of the element size "
             << align;
    if (getSlots() || getRole() == "bucket")
      return emitOpError("a view has no slots and is not a bucket");
  }
  // B5: stage >= 0, slots >= 1. (I64Attr's getters return the value
  // unsigned: a negative one is read back signed here.)
  if (std::optional<int64_t> stage = getStage(); stage && *stage < 0)
    return emitOpError("stage ") << *stage << " is negative";
  if (std::optional<int64_t> slots = getSlots(); slots && *slots < 1)
    return emitOpError("slots = ") << *slots << " must be at least 1";
  return success();
}

LogicalResult StageOp::verify() {
  // ST1: counts (read back signed: I64Attr's getters are unsigned).
  const std::optional<int64_t> slots = getSlots();
  if (int64_t(getIndex()) < 0 || int64_t(getFirstLayer()) < 0 ||
      int64_t(getNumLayers()) < 0 || (slots && *slots < 1))
    return emitOpError("index, first_layer and num_layers must be >= 0 and "
                       "slots >= 1");
  if (std::optional<ArrayRef<int64_t>> pools = getChunkSlots()) {
    size_t chunks = 1 + (getChunks() ? getChunks()->size() : 0);
    int64_t slots = getSlots().value_or(1);
    if (pools->size() != chunks ||
        llvm::any_of(*pools, [](int64_t n) { return n < 1; }) ||
        *std::max_element(pools->begin(), pools->end()) != slots)
      return emitOpError("chunk_slots must have one entry of at least 1 per "
                         "chunk (")
             << chunks << "), the largest equal to slots = " << slots;
  }
  return success();
}

// ST2 is checked with the module's symbol table (see K1).
LogicalResult StageOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  // ST2: the functions exist.
  auto module = (*this)->getParentOfType<ModuleOp>();
  for (std::optional<StringRef> name :
       {getZeroGrads(), std::optional<StringRef>(getForward()),
        std::optional<StringRef>(getBackward()), getBackwardWeight(),
        getUpdate(), getEvalForward()})
    if (name && !symbolTable.lookupSymbolIn<FuncOp>(
                    module, StringAttr::get(getContext(), *name)))
      return emitOpError("names @") << *name << ", which is not a plan.func";
  if (std::optional<ArrayAttr> chunks = getChunks())
    for (Attribute chunk : *chunks)
      for (NamedAttribute fn : cast<DictionaryAttr>(chunk)) {
        auto ref = dyn_cast<FlatSymbolRefAttr>(fn.getValue());
        if (!ref || !symbolTable.lookupSymbolIn<FuncOp>(module, ref.getAttr()))
          return emitOpError("chunk function ")
                 << fn.getName() << " = " << fn.getValue()
                 << " is not a plan.func";
      }
  if (std::optional<ArrayAttr> schedule = getSchedule())
    for (Attribute call : *schedule) {
      StringRef name = cast<StringAttr>(call).getValue().split('@').second;
      if (!name.empty() && !symbolTable.lookupSymbolIn<FuncOp>(
                               module, StringAttr::get(getContext(), name)))
        return emitOpError("schedule call \"")
               << cast<StringAttr>(call).getValue() << "\" names @" << name
               << ", which is not a plan.func";
    }
  return success();
}

// K1 is checked with the module's symbol table, built once for all kernels
// (a lookup per kernel would scan the module: quadratic in the plan's size).
LogicalResult
KernelOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  // K1: buffers exist.
  auto module = (*this)->getParentOfType<ModuleOp>();
  for (ArrayAttr list : {getInputs(), getOutputs()})
    for (Attribute ref : list)
      if (!module || !isa_and_nonnull<BufferOp>(symbolTable.lookupSymbolIn(
                         module, cast<SymbolRefAttr>(ref).getRootReference())))
        return emitOpError("names ") << ref << ", which is not a plan.buffer";
  return success();
}

const braid::plan::KernelRow *KernelOp::getKernelRow() {
  StringRef name = getKernel();
  return braid::plan::FindKernelRow(name.data(), name.size());
}

braid::plan::KernelId KernelOp::getKernelId() {
  const braid::plan::KernelRow *row = getKernelRow();
  assert(row && "a verified plan.kernel names a row of Kernels.def");
  return row->id;
}

LogicalResult KernelOp::verify() {
  // K2: integer or float parameters.
  for (NamedAttribute param : getParams())
    if (!isa<IntegerAttr, FloatAttr>(param.getValue()))
      return emitOpError("parameter ")
             << param.getName() << " is " << param.getValue()
             << " but must be an integer or a float";
  // K3: a group of distinct, named axes.
  if (std::optional<ArrayAttr> group = getGroup()) {
    if (group->empty())
      return emitOpError("group names no mesh axis");
    llvm::SmallDenseSet<StringRef> seen;
    for (Attribute axis : *group) {
      StringRef name = cast<StringAttr>(axis).getValue();
      if (name.empty() || !seen.insert(name).second)
        return emitOpError("group axis \"") << name << "\" is empty or repeated";
    }
  }
  // K4: a named rank axis.
  if (std::optional<StringRef> axis = getRankAxis(); axis && axis->empty())
    return emitOpError("rank_axis is empty");
  // K5: a kernel of runtime/plan/Kernels.def, with as many operands as its
  // row allows, and a group exactly when the row has or may have one.
  const braid::plan::KernelRow *kernel = getKernelRow();
  if (!kernel)
    return emitOpError("kernel \"")
           << getKernel() << "\" is not a kernel of runtime/plan/Kernels.def";
  auto count = [](int min, int max) {
    if (min == max)
      return std::to_string(min);
    if (max == plan::kMany)
      return "at least " + std::to_string(min);
    return std::to_string(min) + "-" + std::to_string(max);
  };
  int ins = getInputs().size(), outs = getOutputs().size();
  if (ins < kernel->minInputs || ins > kernel->maxInputs ||
      outs < kernel->minOutputs || outs > kernel->maxOutputs)
    return emitOpError() << getKernel() << " has " << ins << " inputs and "
                         << outs << " outputs; the kernel takes "
                         << count(kernel->minInputs, kernel->maxInputs)
                         << " inputs and "
                         << count(kernel->minOutputs, kernel->maxOutputs)
                         << " outputs";
  bool grouped = getGroup().has_value();
  if (grouped && !kernel->has(plan::kGroupRequired) &&
      !kernel->has(plan::kGroupOptional))
    return emitOpError() << getKernel()
                         << " names a group but is not a collective";
  if (!grouped && kernel->has(plan::kGroupRequired))
    return emitOpError() << getKernel()
                         << " names no group (the mesh axes it communicates "
                            "along)";
  return success();
}

FailureOr<ScheduleCall> braid::plan_ir::parseScheduleCall(StringRef text) {
  ScheduleCall call;
  auto [body, function] = text.split('@');
  if (body.empty() || (text.contains('@') && function.empty()))
    return failure();
  call.kind = body.front();
  call.function = function;
  auto [where, slot] = body.drop_front().split(':');
  auto [micro, chunk] = where.split('.');
  if (micro.getAsInteger(10, call.microBatch) ||
      slot.getAsInteger(10, call.slot) ||
      (!chunk.empty() && chunk.getAsInteger(10, call.chunk)))
    return failure();
  return call;
}

std::optional<StringRef>
braid::plan_ir::functionOfCall(StageOp stage, const ScheduleCall &call) {
  if (!call.function.empty())
    return call.function;
  if (call.chunk == 0)
    return call.kind == 'F'   ? std::optional<StringRef>(stage.getForward())
           : call.kind == 'B' ? std::optional<StringRef>(stage.getBackward())
           : call.kind == 'W' ? stage.getBackwardWeight()
                              : std::nullopt;
  std::optional<ArrayAttr> chunks = stage.getChunks();
  if (!chunks || call.chunk < 0 || call.chunk > int64_t(chunks->size()) ||
      (call.kind != 'F' && call.kind != 'B' && call.kind != 'W'))
    return std::nullopt;
  StringRef key = call.kind == 'F'   ? "forward"
                  : call.kind == 'B' ? "backward"
                                     : "backward_weight";
  auto ref = cast<DictionaryAttr>((*chunks)[call.chunk - 1])
                 .getAs<FlatSymbolRefAttr>(key);
  return ref ? std::optional<StringRef>(ref.getValue()) : std::nullopt;
}

SmallVector<StageOp> braid::plan_ir::getStages(ModuleOp module) {
  SmallVector<StageOp> stages(module.getOps<StageOp>());
  llvm::sort(stages, [](StageOp a, StageOp c) {
    return a.getIndex() < c.getIndex();
  });
  return stages;
}
