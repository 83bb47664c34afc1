//===- ModelDialect.cpp - The `model` dialect and its attributes ----------===//
//
// Dialect registration, the #model.sharding attribute (syntax and the checks
// S1-S5 of its Constraints list), and the dialect's verification of the
// discardable attributes it owns: model.sharding, model.param, model.input.
//
//===----------------------------------------------------------------------===//

#include "dialects/model/ModelDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace braid::model;

#include "dialects/model/ModelDialect.cpp.inc"
#include "dialects/model/ModelEnums.cpp.inc"
#include "dialects/model/ModelInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/model/ModelAttrs.cpp.inc"

void ModelDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/model/ModelOps.cpp.inc"
      >();
  registerAttributes();
}

void ModelDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/model/ModelAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

int64_t braid::model::getNumElements(Type type) {
  auto shaped = llvm::dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  return shaped.getNumElements();
}

int64_t braid::model::getElementBytes(Type elementType) {
  if (elementType.isIntOrFloat())
    return (elementType.getIntOrFloatBitWidth() + 7) / 8;
  return 0;
}

int64_t braid::model::detail::defaultBytesAccessed(Operation *op) {
  int64_t bytes = 0;
  auto count = [&](Type type) {
    if (auto shaped = llvm::dyn_cast<ShapedType>(type))
      bytes += getNumElements(shaped) * getElementBytes(shaped.getElementType());
  };
  for (Type type : op->getOperandTypes())
    count(type);
  for (Type type : op->getResultTypes())
    count(type);
  return bytes;
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

/// Parses `{"a", "b"}` into a list of string attributes.
static ParseResult parseAxisList(AsmParser &parser,
                                 SmallVectorImpl<Attribute> &axes) {
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Braces, [&]() -> ParseResult {
        std::string name;
        if (parser.parseString(&name))
          return failure();
        axes.push_back(parser.getBuilder().getStringAttr(name));
        return success();
      });
}

static void printAxisList(AsmPrinter &printer, ArrayAttr axes) {
  printer << "{";
  llvm::interleaveComma(axes, printer, [&](Attribute axis) {
    printer.printString(llvm::cast<StringAttr>(axis).getValue());
  });
  printer << "}";
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  FlatSymbolRefAttr mesh;
  SmallVector<Attribute> dims;
  if (parser.parseLess() || parser.parseAttribute(mesh) || parser.parseComma())
    return {};
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            SmallVector<Attribute> axes;
            if (parseAxisList(parser, axes))
              return failure();
            dims.push_back(parser.getBuilder().getArrayAttr(axes));
            return success();
          }))
    return {};
  SmallVector<Attribute> partial;
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("partial") || parser.parseEqual() ||
        parseAxisList(parser, partial))
      return {};
  }
  if (parser.parseGreater())
    return {};
  Builder &b = parser.getBuilder();
  return parser.getChecked<ShardingAttr>(loc, parser.getContext(), mesh,
                                         b.getArrayAttr(dims),
                                         b.getArrayAttr(partial));
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<" << getMesh() << ", [";
  llvm::interleaveComma(getDims(), printer, [&](Attribute dim) {
    printAxisList(printer, llvm::cast<ArrayAttr>(dim));
  });
  printer << "]";
  if (!getPartial().empty()) {
    printer << ", partial = ";
    printAxisList(printer, getPartial());
  }
  printer << ">";
}

LogicalResult
ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                     FlatSymbolRefAttr mesh, ArrayAttr dims,
                     ArrayAttr partial) {
  if (!mesh)
    return emitError() << "sharding needs a mesh symbol";
  llvm::StringSet<> seen;
  auto checkAxes = [&](Attribute entry, StringRef where) -> LogicalResult {
    // S1: every dimension entry is a list of non-empty axis names.
    auto axes = llvm::dyn_cast<ArrayAttr>(entry);
    if (!axes)
      return emitError() << where << " must be a list of axis names, found "
                         << entry;
    for (Attribute axis : axes) {
      auto name = llvm::dyn_cast<StringAttr>(axis);
      if (!name || name.getValue().empty())
        return emitError() << where << " has an axis that is not a non-empty "
                           << "string: " << axis;
      // S2: an axis appears at most once across dimensions and partial.
      if (!seen.insert(name.getValue()).second)
        return emitError() << "axis \"" << name.getValue()
                           << "\" appears more than once in the sharding";
    }
    return success();
  };
  for (auto [i, dim] : llvm::enumerate(dims))
    if (failed(checkAxes(dim, "dimension " + std::to_string(i))))
      return failure();
  return checkAxes(partial, "partial");
}

SmallVector<StringRef> ShardingAttr::getDimAxes(unsigned dim) const {
  SmallVector<StringRef> axes;
  for (Attribute axis : llvm::cast<ArrayAttr>(getDims()[dim]))
    axes.push_back(llvm::cast<StringAttr>(axis).getValue());
  return axes;
}

SmallVector<StringRef> ShardingAttr::getAllAxes() const {
  SmallVector<StringRef> axes;
  for (unsigned i = 0, e = getDims().size(); i < e; ++i)
    llvm::append_range(axes, getDimAxes(i));
  for (Attribute axis : getPartial())
    axes.push_back(llvm::cast<StringAttr>(axis).getValue());
  return axes;
}

LogicalResult
ShardingAttr::verifyFor(Type type, Operation *scope,
                        function_ref<InFlightDiagnostic()> emitError) const {
  // S5: one dimension entry per tensor dimension.
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return emitError() << "sharding annotates " << type
                       << " but only ranked tensors can be sharded";
  if (static_cast<int64_t>(getDims().size()) != tensor.getRank())
    return emitError() << "sharding has " << getDims().size()
                       << " dims but the tensor has rank " << tensor.getRank();
  // S3: the mesh symbol names a model.mesh of the enclosing module.
  auto module = llvm::dyn_cast<ModuleOp>(scope);
  if (!module)
    module = scope->getParentOfType<ModuleOp>();
  Operation *symbol =
      module ? SymbolTable::lookupSymbolIn(module, getMesh()) : nullptr;
  auto mesh = llvm::dyn_cast_or_null<MeshOp>(symbol);
  if (!mesh)
    return emitError() << "sharding refers to " << getMesh()
                       << ", which is not a model.mesh of the module";
  // S4: every axis is an axis of that mesh.
  for (StringRef axis : getAllAxes())
    if (!mesh.getAxisSize(axis))
      return emitError() << "sharding names axis \"" << axis
                         << "\", which mesh " << getMesh() << " does not have";
  return success();
}

//===----------------------------------------------------------------------===//
// Discardable attributes owned by the dialect
//===----------------------------------------------------------------------===//

LogicalResult ModelDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  auto emitError = [&] { return op->emitOpError(); };
  if (attr.getName() == kShardingAttrName) {
    // One sharding for a single result, or a list with one per result.
    if (auto sharding = llvm::dyn_cast<ShardingAttr>(attr.getValue())) {
      if (op->getNumResults() != 1)
        return op->emitOpError("has ")
               << op->getNumResults()
               << " results but one model.sharding; give a list with one "
                  "sharding per result";
      return sharding.verifyFor(op->getResult(0).getType(), op, emitError);
    }
    auto list = llvm::dyn_cast<ArrayAttr>(attr.getValue());
    if (!list)
      return op->emitOpError("model.sharding must be a #model.sharding or a "
                             "list of them, found ")
             << attr.getValue();
    if (list.size() != op->getNumResults())
      return op->emitOpError("has ")
             << op->getNumResults() << " results but " << list.size()
             << " shardings";
    for (auto [sharding, result] : llvm::zip(list, op->getResults())) {
      auto typed = llvm::dyn_cast<ShardingAttr>(sharding);
      if (!typed)
        return op->emitOpError("model.sharding list holds ")
               << sharding << ", which is not a #model.sharding";
      if (failed(typed.verifyFor(result.getType(), op, emitError)))
        return failure();
    }
    return success();
  }
  if (attr.getName() == "model.stage") {
    // The pipeline stage that runs the op (-1: every stage, its own part).
    auto stage = llvm::dyn_cast<IntegerAttr>(attr.getValue());
    if (!stage || stage.getInt() < -1)
      return op->emitOpError("model.stage must be an integer >= -1, found ")
             << attr.getValue();
    return success();
  }
  if (attr.getName() == "model.pipeline") {
    if (!llvm::isa<ModuleOp>(op) || !llvm::isa<ArrayAttr>(attr.getValue()))
      return op->emitOpError(
          "model.pipeline must be a list of stages on the module");
    return success();
  }
  if (attr.getName() == "model.recomputed") {
    // A forward op cloned into a backward layer by model-recompute.
    if (!llvm::isa<UnitAttr>(attr.getValue()))
      return op->emitOpError("model.recomputed must be a unit attribute");
    return success();
  }
  if (attr.getName() == "model.recompute_budget") {
    // braidc --recompute auto's search: the budget and what it found.
    if (!llvm::isa<ModuleOp>(op) || !llvm::isa<DictionaryAttr>(attr.getValue()))
      return op->emitOpError(
          "model.recompute_budget must be a dictionary on the module");
    return success();
  }
  if (attr.getName() == "model.recompute") {
    // model-recompute's choice per layer, for the report.
    if (!llvm::isa<ModuleOp>(op) || !llvm::isa<ArrayAttr>(attr.getValue()))
      return op->emitOpError(
          "model.recompute must be a list of layers on the module");
    return success();
  }
  if (attr.getName() == "model.lora" && !llvm::isa<ModuleOp>(op)) {
    // An adapter's op (model-lora): its down or up projection, or the sum.
    auto part = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!part || !llvm::is_contained({"A", "B", "sum"}, part.getValue()) ||
        !llvm::isa<LinearOp, AddOp>(op))
      return op->emitOpError("model.lora on an op must be \"A\" or \"B\" on "
                             "a model.linear or \"sum\" on a model.add, "
                             "found ")
             << attr.getValue();
    return success();
  }
  if (attr.getName() == "model.lora") {
    // LoRA's settings, which model-lora applies (frontends/ModelConfig.h).
    auto lora = llvm::dyn_cast<DictionaryAttr>(attr.getValue());
    if (!lora)
      return op->emitOpError("model.lora must be a dictionary on the module");
    auto rank = lora.getAs<IntegerAttr>("rank");
    auto alpha = lora.getAs<FloatAttr>("alpha");
    auto dropout = lora.getAs<FloatAttr>("dropout");
    if (!rank || rank.getInt() < 1 || !alpha ||
        !(alpha.getValueAsDouble() > 0) || !dropout ||
        !(dropout.getValueAsDouble() >= 0 && dropout.getValueAsDouble() < 1))
      return op->emitOpError("model.lora needs rank >= 1, alpha > 0 and "
                             "dropout in [0, 1), found ")
             << lora;
    for (const char *list : {"target_modules", "modules_to_save"}) {
      auto names = lora.getAs<ArrayAttr>(list);
      if (!names || !llvm::all_of(names, [](Attribute a) {
            return llvm::isa<StringAttr>(a);
          }))
        return op->emitOpError("model.lora's ")
               << list << " must be a list of strings";
    }
    return success();
  }
  if (attr.getName() == "model.config") {
    if (!llvm::isa<ModuleOp>(op) || !llvm::isa<DictionaryAttr>(attr.getValue()))
      return op->emitOpError(
          "model.config must be a dictionary on the module");
    return success();
  }
  if (attr.getName() == "model.generate") {
    // An inference graph's shapes (frontends/ModelBuilder.h).
    auto shapes = llvm::dyn_cast<DictionaryAttr>(attr.getValue());
    if (!llvm::isa<ModuleOp>(op) || !shapes)
      return op->emitOpError(
          "model.generate must be a dictionary on the module");
    for (const char *field :
         {"max_batch", "max_seq_len", "prefill_chunk", "vocab_size"}) {
      auto value = shapes.getAs<IntegerAttr>(field);
      if (!value || value.getInt() < 1)
        return op->emitOpError("model.generate needs a positive integer ")
               << field;
    }
    return success();
  }
  if (attr.getName() == kPhaseAttrName) {
    // The plan function an op of an inference graph runs in.
    auto phase = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!phase ||
        !llvm::is_contained({"prefill", "decode", "reorder", "score"},
                            phase.getValue()))
      return op->emitOpError("model.phase must be \"prefill\", \"decode\", "
                             "\"reorder\" or \"score\", found ")
             << attr.getValue();
    return success();
  }
  return op->emitOpError("has unknown model dialect attribute ")
         << attr.getName();
}

LogicalResult ModelDialect::verifyRegionArgAttribute(Operation *op,
                                                     unsigned regionIndex,
                                                     unsigned argIndex,
                                                     NamedAttribute attr) {
  // Function declarations have no region arguments: take the type from the
  // function's signature.
  Type type;
  if (auto func = llvm::dyn_cast<FunctionOpInterface>(op))
    type = func.getArgumentTypes()[argIndex];
  else if (!op->getRegion(regionIndex).empty())
    type = op->getRegion(regionIndex).getArgument(argIndex).getType();
  auto emitError = [&] {
    return op->emitOpError() << "argument " << argIndex << ": ";
  };
  if (attr.getName() == kShardingAttrName) {
    auto sharding = llvm::dyn_cast<ShardingAttr>(attr.getValue());
    if (!sharding)
      return emitError() << "model.sharding must be a #model.sharding, found "
                         << attr.getValue();
    return type ? sharding.verifyFor(type, op, emitError) : success();
  }
  if (attr.getName() == kParamAttrName) {
    auto name = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!name || name.getValue().empty())
      return emitError() << "model.param must be a non-empty string, found "
                         << attr.getValue();
    return success();
  }
  if (attr.getName() == kFrozenAttrName) {
    if (!llvm::isa<UnitAttr>(attr.getValue()))
      return emitError() << "model.frozen is a unit attribute, found "
                         << attr.getValue();
    if (auto func = llvm::dyn_cast<FunctionOpInterface>(op))
      if (!func.getArgAttr(argIndex, kParamAttrName))
        return emitError() << "model.frozen marks a parameter, but the "
                              "argument has no model.param";
    return success();
  }
  if (attr.getName() == kInputAttrName) {
    auto name = llvm::dyn_cast<StringAttr>(attr.getValue());
    // A training step's inputs, and an inference graph's (plan.proto's
    // Generation).
    if (!name ||
        !llvm::is_contained({"tokens", "targets", "positions", "loss_grad",
                             "lr", "step", "prefill_tokens", "prefill_positions",
                             "prefill_last", "decode_tokens",
                             "decode_positions", "sampling", "seed",
                             "draw_positions", "beam_parents",
                             "score_tokens", "score_positions",
                             "score_targets"},
                            name.getValue()))
      return emitError() << "model.input must be \"tokens\", \"targets\", "
                            "\"positions\", \"loss_grad\", \"lr\", \"step\" "
                            "or an input of an inference graph, found "
                         << attr.getValue();
    return success();
  }
  if (attr.getName() == kCacheAttrName) {
    auto name = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!name || !(name.getValue().starts_with("cache.k.") ||
                   name.getValue().starts_with("cache.v.")))
      return emitError() << "model.cache must be \"cache.k.<layer>\" or "
                            "\"cache.v.<layer>\", found "
                         << attr.getValue();
    return success();
  }
  if (attr.getName() == kOptStateAttrName) {
    auto name = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!name || !(name.getValue().starts_with("exp_avg:") ||
                   name.getValue().starts_with("exp_avg_sq:")))
      return emitError() << "model.opt_state must be \"exp_avg:<param>\" or "
                            "\"exp_avg_sq:<param>\", found "
                         << attr.getValue();
    return success();
  }
  if (attr.getName() == kShardBlocksAttrName) {
    auto blocks = llvm::dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!blocks || blocks.empty() ||
        llvm::any_of(blocks.asArrayRef(), [](int64_t n) { return n < 1; }))
      return emitError() << "model.shard_blocks must be a non-empty array of "
                            "positive block sizes, found "
                         << attr.getValue();
    return success();
  }
  return emitError() << "unknown model dialect argument attribute "
                     << attr.getName();
}

LogicalResult ModelDialect::verifyRegionResultAttribute(Operation *op,
                                                        unsigned regionIndex,
                                                        unsigned resultIndex,
                                                        NamedAttribute attr) {
  if (attr.getName() == kOptStateAttrName || attr.getName() == kParamAttrName) {
    auto name = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!name || name.getValue().empty())
      return op->emitOpError("result ")
             << resultIndex << ": " << attr.getName()
             << " must be a non-empty string, found " << attr.getValue();
    return success();
  }
  if (attr.getName() == kResultAttrName) {
    auto name = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!name || name.getValue().empty())
      return op->emitOpError("result ")
             << resultIndex << ": model.result must be a non-empty string, "
             << "found " << attr.getValue();
    return success();
  }
  if (attr.getName() == kGradAttrName) {
    auto name = llvm::dyn_cast<StringAttr>(attr.getValue());
    if (!name || name.getValue().empty())
      return op->emitOpError("result ")
             << resultIndex << ": model.grad must name a parameter, found "
             << attr.getValue();
    return success();
  }
  if (attr.getName() != kShardingAttrName)
    return op->emitOpError("result ")
           << resultIndex << ": unknown model dialect result attribute "
           << attr.getName();
  auto sharding = llvm::dyn_cast<ShardingAttr>(attr.getValue());
  if (!sharding)
    return op->emitOpError("result ")
           << resultIndex << ": model.sharding must be a #model.sharding";
  Type type;
  if (auto func = llvm::dyn_cast<FunctionOpInterface>(op))
    type = func.getResultTypes()[resultIndex];
  if (!type)
    return success();
  return sharding.verifyFor(type, op, [&] {
    return op->emitOpError() << "result " << resultIndex << ": ";
  });
}
