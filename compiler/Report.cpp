//===- Report.cpp - The compile report ------------------------------------===//

#include "compiler/Report.h"

#include "dialects/model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

#include <limits>
#include <map>

using namespace mlir;
using namespace braid;
using namespace braid::model;

namespace {
func::FuncOp getForward(ModuleOp module) {
  return module.lookupSymbol<func::FuncOp>("forward");
}

/// True when `value` is an argument of `func` marked model.param.
bool isParam(func::FuncOp func, Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  return arg && arg.getOwner()->getParentOp() == func.getOperation() &&
         func.getArgAttr(arg.getArgNumber(), ModelDialect::kParamAttrName);
}
} // namespace

ParameterCount braid::countParameters(ModuleOp module) {
  ParameterCount count;
  func::FuncOp func = getForward(module);
  if (!func)
    return count;
  for (BlockArgument arg : func.getArguments())
    if (isParam(func, arg))
      count.total += getNumElements(arg.getType());
  int64_t inLayers = 0;
  for (auto layer : func.getBody().getOps<LayerOp>()) {
    llvm::DenseSet<Value> seen;
    int64_t n = 0;
    for (Value input : layer.getInputs())
      if (isParam(func, input) && seen.insert(input).second)
        n += getNumElements(input.getType());
    count.perLayer.push_back(n);
    inLayers += n;
  }
  count.outsideLayers = count.total - inLayers;
  llvm::DenseSet<Value> tables;
  func.walk([&](Operation *op) {
    Value table;
    if (auto e = dyn_cast<EmbeddingOp>(op))
      table = e.getTable();
    else if (auto p = dyn_cast<PositionEmbeddingOp>(op))
      table = p.getTable();
    if (table && isParam(func, table) && tables.insert(table).second)
      count.embedding += getNumElements(table.getType());
  });
  return count;
}

FlopCount braid::countFlops(ModuleOp module) {
  FlopCount count;
  func::FuncOp func = getForward(module);
  if (!func)
    return count;
  // Costs saturate at INT64_MAX; so do their sums.
  auto add = [](int64_t &sum, int64_t value) {
    if (__builtin_add_overflow(sum, value, &sum))
      sum = std::numeric_limits<int64_t>::max();
  };
  func.walk([&](CostOpInterface op) {
    add(count.forwardMatmul, op.getMatmulFlops());
    add(count.forwardVector, op.getVectorFlops());
    if (isa<AttentionOp>(op.getOperation()))
      add(count.attentionMatmul, op.getMatmulFlops());
  });
  for (BlockArgument arg : func.getArguments())
    if (auto input = func.getArgAttrOfType<StringAttr>(
            arg.getArgNumber(), ModelDialect::kInputAttrName))
      if (input.getValue() == "tokens")
        count.tokens = getNumElements(arg.getType());
  return count;
}

llvm::json::Object braid::planMemoryReport(ModuleOp module) {
  llvm::json::Object byRole;
  std::map<std::string, int64_t> bytes;
  for (Operation &op : module.getBody()->getOperations()) {
    if (op.getName().getStringRef() != "plan.buffer")
      continue;
    auto type = cast<RankedTensorType>(
        cast<TypeAttr>(op.getAttr("type")).getValue());
    bytes[cast<StringAttr>(op.getAttr("role")).getValue().str()] +=
        type.getNumElements() * getElementBytes(type.getElementType());
  }
  for (auto &[role, n] : bytes)
    byRole[role] = n;
  auto arena = module->getAttrOfType<IntegerAttr>("plan.arena_bytes");
  return llvm::json::Object{{"arena_bytes", arena ? arena.getInt() : 0},
                            {"buffer_bytes_by_role", std::move(byRole)}};
}

llvm::json::Object braid::planCommunicationReport(ModuleOp module,
                                                  int64_t microBatches) {
  // Bytes each rank contributes per step, by collective kind and group: a
  // collective in the micro-step runs once per micro-batch, the others once.
  std::map<std::string, std::map<std::string, int64_t>> bytes;
  llvm::StringMap<Operation *> buffers;
  for (Operation &op : module.getBody()->getOperations())
    if (op.getName().getStringRef() == "plan.buffer")
      buffers[cast<StringAttr>(op.getAttr("sym_name")).getValue()] = &op;
  module.walk([&](Operation *op) {
    auto group = op->getAttrOfType<ArrayAttr>("group");
    if (op->getName().getStringRef() != "plan.kernel" || !group)
      return;
    std::string axes;
    for (Attribute axis : group)
      axes += (axes.empty() ? "" : ",") + cast<StringAttr>(axis).getValue().str();
    int64_t times = 1;
    if (auto fn = op->getParentOp()->getAttrOfType<StringAttr>("sym_name"))
      if (fn.getValue() == "micro_step")
        times = microBatches;
    std::string kind =
        StringRef(cast<StringAttr>(op->getAttr("kernel")).getValue()).lower();
    int64_t n = 0;
    if (kind == "grad_norm") {
      // The norm sums one double per rank: its inputs stay local.
      bytes[kind][axes] += 8 * times;
      return;
    }
    for (Attribute ref : op->getAttrOfType<ArrayAttr>("inputs")) {
      Operation *buffer =
          buffers.lookup(cast<SymbolRefAttr>(ref).getRootReference().getValue());
      auto type = cast<RankedTensorType>(
          cast<TypeAttr>(buffer->getAttr("type")).getValue());
      n += type.getNumElements() * getElementBytes(type.getElementType());
    }
    bytes[kind][axes] += n * times;
  });
  llvm::json::Object out;
  for (auto &[kind, byGroup] : bytes) {
    llvm::json::Object groups;
    for (auto &[axes, n] : byGroup)
      groups[axes] = n;
    out[kind] = std::move(groups);
  }
  return out;
}

llvm::json::Value braid::buildReport(ModuleOp module,
                                     const ModelConfig &c) {

  ParameterCount params = countParameters(module);
  FlopCount flops = countFlops(module);
  llvm::json::Array perLayer;
  for (int64_t n : params.perLayer)
    perLayer.push_back(n);
  double perToken = flops.trainingPerToken();
  double attentionPerToken =
      flops.tokens ? 3.0 * flops.attentionMatmul / flops.tokens : 0.0;
  return llvm::json::Object{
      {"model",
       llvm::json::Object{
           {"source", c.source},
           {"family", familyName(c.family)},
           {"num_layers", c.numLayers},
           {"hidden_size", c.hiddenSize},
           {"num_heads", c.numHeads},
           {"num_kv_heads", c.numKvHeads},
           {"head_dim", c.headDim},
           {"ffn_hidden_size", c.ffnHiddenSize},
           {"vocab_size", c.vocabSize},
           {"padded_vocab_size", c.paddedVocabSize},
           {"max_seq_len", c.maxSeqLen},
           {"norm", normName(c.norm)},
           {"norm_eps", c.normEps},
           {"activation", activationName(c.activation)},
           {"position_embedding", positionName(c.positionEmbedding)},
           {"rope_theta", c.ropeTheta},
           {"tie_embeddings", c.tieEmbeddings},
           {"attention_bias", c.attentionBias},
           {"mlp_bias", c.mlpBias},
           {"embedding_norm", c.embeddingNorm},
           {"fused_qkv", c.fusedQkv()},
           {"init_std", c.initStd},
           {"hidden_dropout", c.hiddenDropout},
           {"attention_dropout", c.attentionDropout},
           {"embedding_dropout", c.embeddingDropout},
       }},
      {"batch",
       llvm::json::Object{
           {"micro_batch_size", c.microBatchSize},
           {"seq_length", c.seqLength},
           {"tokens", flops.tokens},
           {"dtype", dtypeName(c.dtype)},
       }},
      {"parameters",
       llvm::json::Object{
           {"total", params.total},
           {"embedding", params.embedding},
           {"outside_layers", params.outsideLayers},
           {"per_layer", std::move(perLayer)},
           {"non_embedding", params.total - params.embedding},
       }},
      {"flops",
       llvm::json::Object{
           {"forward_matmul", flops.forwardMatmul},
           {"forward_vector", flops.forwardVector},
           {"forward_attention_matmul", flops.attentionMatmul},
           {"training_per_token", perToken},
           {"training_per_token_attention", attentionPerToken},
           {"training_per_step", perToken * flops.tokens},
           {"formula", "training_per_token = 3 * forward_matmul / tokens = "
                       "6 * N_matmul + 12 * L * s * h_attn (docs/report.md)"},
       }},
  };
}
