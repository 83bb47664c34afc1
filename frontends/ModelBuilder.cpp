//===- ModelBuilder.cpp - Model spec to `model` IR ------------------------===//
//
// One builder for every family: the structure (norm, activation, position
// encoding, biases, tying) comes from the ModelConfig, and the family only
// decides the parameter names and how Q, K and V are stored.
//
//===----------------------------------------------------------------------===//

#include "frontends/ModelBuilder.h"

#include "dialects/model/ModelDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace braid;
using namespace braid::model;

namespace {

/// Parameter names of one family, as in its Hugging Face checkpoints. `{}`
/// stands for the layer index.
struct Naming {
  const char *embed, *positions, *embedNorm, *layerPrefix;
  const char *norm1, *qkv, *q, *k, *v, *out, *norm2;
  const char *gate, *up, *down; // SwiGLU MLP; up/down also name a GeLU MLP
  const char *gateUp;           // SwiGLU's fused gate/up projection
  const char *finalNorm;
};

const Naming &namingFor(spec::Family family) {
  static const Naming gpt2 = {
      "transformer.wte", "transformer.wpe", nullptr, "transformer.h.",
      "ln_1", "attn.c_attn", nullptr, nullptr, nullptr, "attn.c_proj", "ln_2",
      nullptr, "mlp.c_fc", "mlp.c_proj", nullptr, "transformer.ln_f"};
  static const Naming bloom = {
      "transformer.word_embeddings", nullptr,
      "transformer.word_embeddings_layernorm", "transformer.h.",
      "input_layernorm", "self_attention.query_key_value", nullptr, nullptr,
      nullptr, "self_attention.dense", "post_attention_layernorm", nullptr,
      "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", nullptr, "transformer.ln_f"};
  static const Naming llama = {
      "model.embed_tokens", nullptr, nullptr, "model.layers.",
      "input_layernorm", "self_attn.W_pack", "self_attn.q_proj",
      "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
      "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
      "mlp.down_proj", "mlp.gate_up_proj", "model.norm"};
  switch (family) {
  case spec::GPT2: return gpt2;
  case spec::BLOOM: return bloom;
  default: return llama; // LLaMA, Baichuan (W_pack), InternLM, Aquila
  }
}

class ForwardBuilder {
public:
  ForwardBuilder(MLIRContext &context, const ModelConfig &config)
      : c(config), naming(namingFor(config.family)), b(&context),
        loc(b.getUnknownLoc()) {
    switch (config.dtype) {
    case spec::BF16: element = b.getBF16Type(); break;
    case spec::FP16: element = b.getF16Type(); break;
    case spec::FP64: element = b.getF64Type(); break;
    default: element = b.getF32Type(); break;
    }
    // GPT-2's Conv1D stores weights [in, out]; nn.Linear stores [out, in].
    conv1d = config.family == spec::GPT2;
  }

  OwningOpRef<ModuleOp> build();

private:
  /// Declares a parameter: the next argument of @forward, named `name`.
  void param(const std::string &name, ArrayRef<int64_t> shape) {
    paramTypes.push_back(RankedTensorType::get(shape, element));
    paramNames.push_back(name);
  }

  std::string layerName(int64_t layer, const char *suffix) const {
    return std::string(naming.layerPrefix) + std::to_string(layer) + "." +
           suffix;
  }

  /// Declares the parameters (in checkpoint order) and records which belong
  /// to which layer.
  void declareParams();
  Value emitNorm(OpBuilder &ob, Value x, Value weight, Value bias);
  Value emitLinear(OpBuilder &ob, Value x, Value weight, Value bias) {
    return ob.create<LinearOp>(loc, x, weight, bias, /*transposeW=*/!conv1d);
  }
  Value emitLayer(OpBuilder &ob, int64_t index, Value hidden,
                  ArrayRef<Value> params);

  const ModelConfig &c;
  const Naming &naming;
  OpBuilder b;
  Location loc;
  Type element;
  bool conv1d = false;
  /// The next dropout's rng_id: distinct per dropout op, in program order.
  int64_t nextRngId = 0;

  SmallVector<Type> paramTypes;
  SmallVector<std::string> paramNames;
  /// Per layer, the indices (into paramTypes) of its parameters, in order.
  SmallVector<SmallVector<unsigned>> layerParams;
  /// Indices of the parameters outside the layers, by role.
  int embed = -1, positions = -1, embedNormW = -1, embedNormB = -1;
  int finalNormW = -1, finalNormB = -1, lmHead = -1;
};

void ForwardBuilder::declareParams() {
  int64_t h = c.hiddenSize, v = c.paddedVocabSize;
  int64_t qCols = c.numHeads * c.headDim, kvCols = c.numKvHeads * c.headDim;
  bool ln = c.norm == spec::LAYER_NORM;
  auto next = [&] { return static_cast<int>(paramTypes.size()); };
  auto linearParams = [&](SmallVector<unsigned> &list, int64_t layer,
                          const char *name, int64_t in, int64_t out,
                          bool bias) {
    list.push_back(next());
    param(layerName(layer, name) + ".weight",
          conv1d ? ArrayRef<int64_t>{in, out} : ArrayRef<int64_t>{out, in});
    if (bias) {
      list.push_back(next());
      param(layerName(layer, name) + ".bias", {out});
    }
  };
  auto normParams = [&](SmallVector<unsigned> &list, const std::string &name) {
    list.push_back(next());
    param(name + ".weight", {h});
    if (ln) {
      list.push_back(next());
      param(name + ".bias", {h});
    }
  };

  embed = next();
  param(std::string(naming.embed) + ".weight", {v, h});
  if (c.positionEmbedding == spec::LEARNED) {
    positions = next();
    param(std::string(naming.positions ? naming.positions : "model.embed_positions") +
              ".weight",
          {c.maxSeqLen, h});
  }
  if (c.embeddingNorm) {
    std::string name = naming.embedNorm ? naming.embedNorm : "model.embed_norm";
    embedNormW = next();
    param(name + ".weight", {h});
    embedNormB = next();
    param(name + ".bias", {h});
  }
  for (int64_t i = 0; i < c.numLayers; ++i) {
    SmallVector<unsigned> &list = layerParams.emplace_back();
    normParams(list, layerName(i, naming.norm1));
    if (c.fusedQkv()) {
      linearParams(list, i, naming.qkv, h, qCols + 2 * kvCols, c.attentionBias);
    } else {
      linearParams(list, i, naming.q, h, qCols, c.attentionBias);
      linearParams(list, i, naming.k, h, kvCols, c.attentionBias);
      linearParams(list, i, naming.v, h, kvCols, c.attentionBias);
    }
    linearParams(list, i, naming.out, qCols, h, c.attentionBias);
    normParams(list, layerName(i, naming.norm2));
    if (c.fuseMlp) {
      linearParams(list, i, naming.gateUp, h, 2 * c.ffnHiddenSize, c.mlpBias);
    } else {
      if (c.activation == spec::SWIGLU)
        linearParams(list, i, naming.gate, h, c.ffnHiddenSize, c.mlpBias);
      linearParams(list, i, naming.up, h, c.ffnHiddenSize, c.mlpBias);
    }
    linearParams(list, i, naming.down, c.ffnHiddenSize, h, c.mlpBias);
  }
  finalNormW = next();
  param(std::string(naming.finalNorm) + ".weight", {h});
  if (ln) {
    finalNormB = next();
    param(std::string(naming.finalNorm) + ".bias", {h});
  }
  if (!c.tieEmbeddings) {
    lmHead = next();
    // lm_head is an nn.Linear in every family: [vocab, hidden].
    param("lm_head.weight", {v, h});
  }
}

Value ForwardBuilder::emitNorm(OpBuilder &ob, Value x, Value weight,
                               Value bias) {
  if (c.norm == spec::LAYER_NORM)
    return ob.create<LayerNormOp>(loc, x, weight, bias, c.normEps);
  return ob.create<RmsNormOp>(loc, x, weight, c.normEps);
}

Value ForwardBuilder::emitLayer(OpBuilder &ob, int64_t index, Value hidden,
                                ArrayRef<Value> params) {
  // The layer's operands: the hidden state, then its parameters.
  SmallVector<Value> inputs = {hidden};
  llvm::append_range(inputs, params);
  auto layer =
      ob.create<LayerOp>(loc, index, TypeRange{hidden.getType()}, inputs);
  OpBuilder lb = OpBuilder::atBlockEnd(&layer.getBody().front());
  Block &block = layer.getBody().front();
  Value x = block.getArgument(0);
  unsigned next = 1;
  auto take = [&]() { return block.getArgument(next++); };
  bool ln = c.norm == spec::LAYER_NORM;
  auto takeLinear = [&](bool bias) -> std::pair<Value, Value> {
    Value w = take();
    return {w, bias ? take() : Value()};
  };

  // Attention half.
  Value n1w = take(), n1b = ln ? take() : Value();
  Value n1 = emitNorm(lb, x, n1w, n1b);
  Value q, k, v;
  if (c.fusedQkv()) {
    auto [w, bias] = takeLinear(c.attentionBias);
    Value qkv = emitLinear(lb, n1, w, bias);
    auto split = lb.create<QkvSplitOp>(
        loc, qkv, c.numHeads, c.numKvHeads, c.headDim,
        c.family == spec::BLOOM ? QkvLayout::per_head : QkvLayout::grouped);
    q = split.getQ();
    k = split.getK();
    v = split.getV();
  } else {
    auto [wq, bq] = takeLinear(c.attentionBias);
    auto [wk, bk] = takeLinear(c.attentionBias);
    auto [wv, bv] = takeLinear(c.attentionBias);
    q = emitLinear(lb, n1, wq, bq);
    k = emitLinear(lb, n1, wk, bk);
    v = emitLinear(lb, n1, wv, bv);
  }
  if (c.positionEmbedding == spec::ROPE) {
    q = lb.create<RopeOp>(loc, q, c.headDim, c.ropeTheta);
    k = lb.create<RopeOp>(loc, k, c.headDim, c.ropeTheta);
  }
  Value attn = lb.create<AttentionOp>(
      loc, q, k, v, c.numHeads, c.numKvHeads,
      1.0 / std::sqrt(static_cast<double>(c.headDim)), /*causal=*/true,
      /*alibi=*/c.positionEmbedding == spec::ALIBI, c.attentionDropout);
  auto [wo, bo] = takeLinear(c.attentionBias);
  Value o = emitLinear(lb, attn, wo, bo);
  if (c.hiddenDropout > 0)
    o = lb.create<DropoutOp>(loc, o, c.hiddenDropout, nextRngId++);
  x = lb.create<AddOp>(loc, x, o);

  // MLP half.
  Value n2w = take(), n2b = ln ? take() : Value();
  Value n2 = emitNorm(lb, x, n2w, n2b);
  Value act;
  if (c.fuseMlp) {
    auto [w, bias] = takeLinear(c.mlpBias);
    act = lb.create<SwigluOp>(loc, emitLinear(lb, n2, w, bias), Value());
  } else if (c.activation == spec::SWIGLU) {
    auto [wg, bg] = takeLinear(c.mlpBias);
    auto [wu, bu] = takeLinear(c.mlpBias);
    Value gate = emitLinear(lb, n2, wg, bg);
    Value up = emitLinear(lb, n2, wu, bu);
    act = lb.create<SwigluOp>(loc, gate, up);
  } else {
    auto [wu, bu] = takeLinear(c.mlpBias);
    Value up = emitLinear(lb, n2, wu, bu);
    act = lb.create<GeluOp>(loc, up, c.activation == spec::GELU_TANH);
  }
  auto [wd, bd] = takeLinear(c.mlpBias);
  Value down = emitLinear(lb, act, wd, bd);
  if (c.hiddenDropout > 0)
    down = lb.create<DropoutOp>(loc, down, c.hiddenDropout, nextRngId++);
  x = lb.create<AddOp>(loc, x, down);
  lb.create<YieldOp>(loc, x);
  return layer.getResult(0);
}

OwningOpRef<ModuleOp> ForwardBuilder::build() {
  declareParams();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  (*module)->setAttr("model.config", b.getDictionaryAttr({
      b.getNamedAttr("source", b.getStringAttr(c.source)),
      b.getNamedAttr("family", b.getStringAttr(familyName(c.family))),
      b.getNamedAttr("num_layers", b.getI64IntegerAttr(c.numLayers)),
      b.getNamedAttr("hidden_size", b.getI64IntegerAttr(c.hiddenSize)),
      b.getNamedAttr("num_heads", b.getI64IntegerAttr(c.numHeads)),
      b.getNamedAttr("num_kv_heads", b.getI64IntegerAttr(c.numKvHeads)),
      b.getNamedAttr("ffn_hidden_size", b.getI64IntegerAttr(c.ffnHiddenSize)),
      b.getNamedAttr("vocab_size", b.getI64IntegerAttr(c.vocabSize)),
      b.getNamedAttr("padded_vocab_size",
                     b.getI64IntegerAttr(c.paddedVocabSize)),
  }));

  auto tokenType = RankedTensorType::get({c.microBatchSize, c.seqLength},
                                         b.getI32Type());
  SmallVector<Type> argTypes(paramTypes);
  argTypes.push_back(tokenType);
  argTypes.push_back(tokenType);
  Type lossType = RankedTensorType::get(
      {}, element.isF64() ? element : Type(b.getF32Type()));
  b.setInsertionPointToEnd(module->getBody());
  auto func = b.create<func::FuncOp>(loc, "forward",
                                     b.getFunctionType(argTypes, {lossType}));
  // Every argument's attributes at once: setArgAttr per argument would
  // make (and keep, uniqued in the context) a new array of all of them each
  // time, memory quadratic in the parameters.
  SmallVector<DictionaryAttr> argAttrs;
  auto named = [&](StringRef attr, StringRef value) {
    return b.getDictionaryAttr(
        b.getNamedAttr(attr, b.getStringAttr(value)));
  };
  for (const std::string &name : paramNames)
    argAttrs.push_back(named(ModelDialect::kParamAttrName, name));
  unsigned tokensArg = paramNames.size();
  argAttrs.push_back(named(ModelDialect::kInputAttrName, "tokens"));
  argAttrs.push_back(named(ModelDialect::kInputAttrName, "targets"));
  func.setAllArgAttrs(argAttrs);

  Block *entry = func.addEntryBlock();
  OpBuilder fb = OpBuilder::atBlockEnd(entry);
  auto arg = [&](int index) {
    return index < 0 ? Value() : Value(entry->getArgument(index));
  };
  Value tokens = entry->getArgument(tokensArg);
  Value targets = entry->getArgument(tokensArg + 1);

  Value x = fb.create<EmbeddingOp>(loc, arg(embed), tokens);
  if (positions >= 0)
    x = fb.create<AddOp>(loc, x,
                         fb.create<PositionEmbeddingOp>(loc, arg(positions),
                                                        tokens));
  if (c.embeddingNorm)
    x = fb.create<LayerNormOp>(loc, x, arg(embedNormW), arg(embedNormB),
                               c.normEps);
  if (c.embeddingDropout > 0)
    x = fb.create<DropoutOp>(loc, x, c.embeddingDropout, nextRngId++);
  for (auto [i, indices] : llvm::enumerate(layerParams)) {
    SmallVector<Value> params;
    for (unsigned index : indices)
      params.push_back(entry->getArgument(index));
    x = emitLayer(fb, i, x, params);
  }
  x = emitNorm(fb, x, arg(finalNormW), arg(finalNormB));
  // The output layer: lm_head, or the embedding table when tied; both are
  // [vocab, hidden].
  Value head = lmHead >= 0 ? arg(lmHead) : arg(embed);
  Value logits = fb.create<LinearOp>(loc, x, head, Value(), /*transposeW=*/true);
  Value loss = fb.create<CrossEntropyOp>(loc, logits, targets, -100);
  fb.create<func::ReturnOp>(loc, loss);
  return module;
}

} // namespace

OwningOpRef<ModuleOp> braid::buildForwardModule(MLIRContext &context,
                                                const ModelConfig &config) {
  context.loadDialect<ModelDialect, func::FuncDialect>();
  return ForwardBuilder(context, config).build();
}
