//===- ModelLora.cpp - LoRA adapters beside the target linears ------------===//
//
// Implements `model-lora` (see Passes.td): with the module's `model.lora`
// settings, each linear of a target module gets PEFT's adapter beside it,
//
//   y = linear(x, W, b) + linear(scale(linear(dropout(x), A), alpha / r), B)
//
// A `[r, in]` and B `[out, r]` (nn.Linear's layout whatever the base's),
// named `<module>.lora_A.weight` and `<module>.lora_B.weight` after the
// base weight `<module>.weight`, and every other parameter but those of
// modules_to_save is marked `model.frozen`. The two linears and the add
// carry `model.lora = "A" | "B" | "sum"`, by which model-shard splits an
// adapter as its base is split.
//
//===----------------------------------------------------------------------===//

#include "passes/model/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace braid::model {
#define GEN_PASS_DEF_MODELLORA
#include "passes/model/Passes.h.inc"
} // namespace braid::model

using namespace mlir;
using namespace braid::model;

namespace {

/// The attribute of an adapter's ops: "A" (its down projection), "B" (its
/// up projection), "sum" (the add of the base's output and the adapter's).
constexpr llvm::StringLiteral kLoraAttr = "model.lora";

/// PEFT's rule: `name` names the module at `path` when it is the path or
/// ends it after a dot.
bool names(StringRef path, StringRef name) {
  return path == name ||
         (path.size() > name.size() && path.ends_with(name) &&
          path[path.size() - name.size() - 1] == '.');
}

/// The module path of parameter `param` ("a.b.weight" -> "a.b").
StringRef moduleOf(StringRef param) { return param.rsplit('.').first; }

/// A linear that gets an adapter.
struct Target {
  LinearOp op;
  unsigned paramArg; ///< the base weight's argument of @forward
  std::string module;
  int64_t in, out;
};

struct ModelLoraPass
    : public braid::model::impl::ModelLoraBase<ModelLoraPass> {
  void runOnOperation() override;
};

void ModelLoraPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto lora = module->getAttrOfType<DictionaryAttr>("model.lora");
  if (!lora)
    return; // no adapters asked for
  auto func = module.lookupSymbol<func::FuncOp>("forward");
  if (!func || func.isExternal()) {
    module.emitError("model-lora needs a func.func @forward with a body "
                     "(the forward graph, before model-autodiff)");
    return signalPassFailure();
  }
  // model-verify-forward checked model.lora's fields (the dialect's
  // attribute verifier).
  const int64_t rank = lora.getAs<IntegerAttr>("rank").getInt();
  const double alpha = lora.getAs<FloatAttr>("alpha").getValueAsDouble();
  const double dropout = lora.getAs<FloatAttr>("dropout").getValueAsDouble();
  SmallVector<StringRef> targetNames, saveNames;
  for (Attribute a : lora.getAs<ArrayAttr>("target_modules"))
    targetNames.push_back(cast<StringAttr>(a).getValue());
  for (Attribute a : lora.getAs<ArrayAttr>("modules_to_save"))
    saveNames.push_back(cast<StringAttr>(a).getValue());
  if (targetNames.empty()) {
    module.emitError("model.lora names no target module");
    return signalPassFailure();
  }

  auto paramName = [&](unsigned arg) -> StringRef {
    auto name =
        func.getArgAttrOfType<StringAttr>(arg, ModelDialect::kParamAttrName);
    return name ? name.getValue() : StringRef();
  };
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (paramName(i).ends_with(".lora_A.weight")) {
      func.emitError("@forward already has LoRA adapters (\"")
          << paramName(i) << "\"): model-lora runs once";
      return signalPassFailure();
    }

  // The @forward argument behind a value: itself, or a layer's operand.
  auto argumentOf = [&](Value v) -> std::optional<unsigned> {
    for (int depth = 0; depth < 2; ++depth) {
      auto arg = dyn_cast<BlockArgument>(v);
      if (!arg)
        return std::nullopt;
      Operation *owner = arg.getOwner()->getParentOp();
      if (owner == func.getOperation())
        return arg.getArgNumber();
      auto layer = dyn_cast<LayerOp>(owner);
      if (!layer)
        return std::nullopt;
      v = layer.getInputs()[arg.getArgNumber()];
    }
    return std::nullopt;
  };

  // The parameters an embedding looks up: a linear reading one (a tied
  // output layer) is the embedding's module, which gets no linear adapter.
  llvm::DenseSet<unsigned> tables;
  func.walk([&](EmbeddingOp op) {
    if (std::optional<unsigned> arg = argumentOf(op.getTable()))
      tables.insert(*arg);
  });
  // The linears of parameters "<module>.weight", in program order.
  SmallVector<Target> targets;
  SmallVector<std::string> linearModules; // every linear's, in order
  std::vector<bool> matched(targetNames.size(), false);
  bool failedCheck = false;
  func.walk([&](LinearOp op) {
    std::optional<unsigned> arg = argumentOf(op.getWeight());
    if (!arg || tables.contains(*arg))
      return;
    StringRef name = paramName(*arg);
    if (!name.ends_with(".weight"))
      return;
    std::string path = moduleOf(name).str();
    linearModules.push_back(path);
    bool hit = false;
    for (auto [k, target] : llvm::enumerate(targetNames))
      if (names(path, target)) {
        matched[k] = true;
        hit = true;
      }
    if (!hit)
      return;
    auto [in, out] = op.getWeightInOut();
    if (rank > std::min(in, out)) {
      op.emitError("lora.rank = ")
          << rank << " exceeds the width of " << path << " (" << in
          << " inputs, " << out << " outputs)";
      failedCheck = true;
    }
    targets.push_back({op, *arg, path, in, out});
  });
  if (failedCheck)
    return signalPassFailure();

  // Every name must name something: the linears' short names listed.
  auto listOf = [](ArrayRef<std::string> paths) {
    SmallVector<std::string> shortNames;
    for (const std::string &path : paths) {
      std::string last = StringRef(path).rsplit('.').second.str();
      if (last.empty())
        last = path;
      if (!llvm::is_contained(shortNames, last))
        shortNames.push_back(last);
    }
    return llvm::join(shortNames, ", ");
  };
  for (auto [k, target] : llvm::enumerate(targetNames))
    if (!matched[k]) {
      module.emitError("lora.target_modules: \"")
          << target << "\" names no linear of the model; its linears are "
          << listOf(linearModules);
      return signalPassFailure();
    }
  SmallVector<std::string> paramModules;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (StringRef name = paramName(i); !name.empty())
      paramModules.push_back(moduleOf(name).str());
  auto saved = [&](StringRef path) {
    return llvm::any_of(saveNames,
                        [&](StringRef name) { return names(path, name); });
  };
  for (StringRef name : saveNames) {
    if (!llvm::any_of(paramModules, [&](const std::string &path) {
          return names(path, name);
        })) {
      module.emitError("lora.modules_to_save: \"")
          << name << "\" names no module of the model; its modules are "
          << listOf(paramModules);
      return signalPassFailure();
    }
    for (const Target &t : targets)
      if (names(t.module, name)) {
        module.emitError("lora: ")
            << t.module << " is both a target module (it gets an adapter) "
            << "and a module to save (it is trained whole): give it once";
        return signalPassFailure();
      }
  }

  // The adapters' parameters, right after each base weight (a layer's
  // parameters stay together), inserted at once.
  OpBuilder b(func.getContext());
  llvm::stable_sort(targets, [](const Target &x, const Target &y) {
    return x.paramArg < y.paramArg;
  });
  SmallVector<unsigned> indices;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> attrs;
  SmallVector<Location> locs;
  for (Target &t : targets) {
    Type element = cast<ShapedType>(t.op.getWeight().getType()).getElementType();
    for (auto [suffix, shape] :
         {std::pair<const char *, SmallVector<int64_t>>{".lora_A.weight",
                                                        {rank, t.in}},
          {".lora_B.weight", {t.out, rank}}}) {
      indices.push_back(t.paramArg + 1);
      types.push_back(RankedTensorType::get(shape, element));
      attrs.push_back(b.getDictionaryAttr(b.getNamedAttr(
          ModelDialect::kParamAttrName, b.getStringAttr(t.module + suffix))));
      locs.push_back(t.op.getLoc());
    }
  }
  func.insertArguments(indices, types, attrs, locs);

  // Freeze every parameter but the adapters and modules_to_save's.
  Block &entry = func.getBody().front();
  llvm::StringMap<BlockArgument> byName;
  SmallVector<DictionaryAttr> argAttrs;
  for (BlockArgument arg : entry.getArguments()) {
    unsigned i = arg.getArgNumber();
    NamedAttrList list(func.getArgAttrDict(i));
    StringRef name = paramName(i);
    if (!name.empty()) {
      byName[name] = arg;
      bool adapter = name.ends_with(".lora_A.weight") ||
                     name.ends_with(".lora_B.weight");
      if (!adapter && !saved(moduleOf(name)))
        list.set(ModelDialect::kFrozenAttrName, b.getUnitAttr());
    }
    argAttrs.push_back(list.getDictionary(func.getContext()));
  }
  func.setAllArgAttrs(argAttrs);

  // Each adapter's rng_id follows the model's dropouts'.
  int64_t nextRngId = 0;
  module.walk([&](DropoutOp op) {
    if (auto id = op.getRngId())
      nextRngId = std::max<int64_t>(nextRngId, int64_t(*id) + 1);
  });
  const double scale = alpha / double(rank);
  for (Target &t : targets) {
    Value a = byName.lookup(t.module + ".lora_A.weight");
    Value bw = byName.lookup(t.module + ".lora_B.weight");
    // Inside a layer, the adapters become operands of the layer.
    if (auto layer = dyn_cast<LayerOp>(t.op->getParentOp())) {
      Block &body = layer.getBody().front();
      layer.getInputsMutable().append(ValueRange{a, bw});
      a = body.addArgument(a.getType(), t.op.getLoc());
      bw = body.addArgument(bw.getType(), t.op.getLoc());
    }
    OpBuilder ob(t.op->getContext());
    ob.setInsertionPointAfter(t.op);
    Location loc = t.op.getLoc();
    Value x = t.op.getX();
    if (dropout > 0)
      x = ob.create<DropoutOp>(loc, x, dropout, nextRngId++);
    // Each op says its part (model-shard splits an adapter as its base).
    auto role = [&](Operation *op, StringRef part) {
      op->setAttr(kLoraAttr, ob.getStringAttr(part));
    };
    auto down = ob.create<LinearOp>(loc, x, a, Value(), /*transposeW=*/true);
    role(down, "A");
    Value scaled = ob.create<ScaleOp>(loc, down, scale);
    auto up = ob.create<LinearOp>(loc, scaled, bw, Value(),
                                  /*transposeW=*/true);
    role(up, "B");
    auto sum = ob.create<AddOp>(loc, t.op.getResult(), up);
    role(sum, "sum");
    t.op.getResult().replaceAllUsesExcept(sum, sum);
  }
}

} // namespace
