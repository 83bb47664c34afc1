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
  /// The inference graph of braidc --mode generate (buildGenerateModule).
  OwningOpRef<ModuleOp> buildGenerate(const GenerateConfig &g);

private:
  /// The architecture, as the module's `model.config` dictionary.
  void setConfig(ModuleOp module) {
  module->setAttr("model.config", b.getDictionaryAttr({
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
  }
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
  /// A layer on `hidden`; with packed documents `positions` (the graph's
  /// input) is its last operand.
  Value emitLayer(OpBuilder &ob, int64_t index, Value hidden,
                  ArrayRef<Value> params, Value positions);
  /// A layer's key and value caches and the positions of the tokens of an
  /// inference graph; emitLayerBody replaces the caches with the extended
  /// ones.
  struct LayerCache {
    Value positions, k, v;
  };
  /// The ops of one layer on `x` with its parameters `params` (in the order
  /// declareParams gives them): the training forward without `cache`, the
  /// inference one (attention over the cache, no dropout) with it.
  /// `positions`: the training forward's packed documents (or null).
  Value emitLayerBody(OpBuilder &lb, Value x, ValueRange params,
                      LayerCache *cache, Value positions = {});

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
                                ArrayRef<Value> params, Value positions) {
  // The layer's operands: the hidden state, then its parameters (then the
  // positions of packed documents).
  SmallVector<Value> inputs = {hidden};
  llvm::append_range(inputs, params);
  if (positions)
    inputs.push_back(positions);
  auto layer =
      ob.create<LayerOp>(loc, index, TypeRange{hidden.getType()}, inputs);
  OpBuilder lb = OpBuilder::atBlockEnd(&layer.getBody().front());
  Block &block = layer.getBody().front();
  ValueRange blockParams = block.getArguments().drop_front();
  Value blockPositions;
  if (positions) {
    blockPositions = blockParams.back();
    blockParams = blockParams.drop_back();
  }
  Value x = emitLayerBody(lb, block.getArgument(0), blockParams, nullptr,
                          blockPositions);
  lb.create<YieldOp>(loc, x);
  return layer.getResult(0);
}

Value ForwardBuilder::emitLayerBody(OpBuilder &lb, Value x,
                                    ValueRange params, LayerCache *cache,
                                    Value positions) {
  unsigned next = 0;
  auto take = [&]() { return params[next++]; };
  bool ln = c.norm == spec::LAYER_NORM;
  auto takeLinear = [&](bool bias) -> std::pair<Value, Value> {
    Value w = take();
    return {w, bias ? take() : Value()};
  };
  // Inference has no dropout.
  auto dropout = [&](Value v, double rate) {
    return cache || rate <= 0
               ? v
               : Value(lb.create<DropoutOp>(loc, v, rate, nextRngId++));
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
  double scale = 1.0 / std::sqrt(static_cast<double>(c.headDim));
  bool alibi = c.positionEmbedding == spec::ALIBI;
  Value attn;
  if (cache) {
    // Generation: the tokens are at the given positions of their
    // sequences, and attend to the cache, which they extend.
    if (c.positionEmbedding == spec::ROPE) {
      q = lb.create<RopeAtOp>(loc, q, cache->positions, c.headDim, c.ropeTheta);
      k = lb.create<RopeAtOp>(loc, k, cache->positions, c.headDim, c.ropeTheta);
    }
    auto cached = lb.create<AttentionCachedOp>(
        loc, q, k, v, cache->positions, cache->k, cache->v, c.numHeads,
        c.numKvHeads, scale, alibi);
    attn = cached.getResult();
    cache->k = cached.getNewCacheK();
    cache->v = cached.getNewCacheV();
  } else {
    // With packed documents, each token at its position in its document,
    // attending to its document only.
    if (c.positionEmbedding == spec::ROPE) {
      q = lb.create<RopeOp>(loc, q, c.headDim, c.ropeTheta, positions);
      k = lb.create<RopeOp>(loc, k, c.headDim, c.ropeTheta, positions);
    }
    attn = lb.create<AttentionOp>(loc, q, k, v, c.numHeads, c.numKvHeads,
                                  scale, /*causal=*/true, alibi,
                                  c.attentionDropout, positions);
  }
  auto [wo, bo] = takeLinear(c.attentionBias);
  Value o = dropout(emitLinear(lb, attn, wo, bo), c.hiddenDropout);
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
  Value down = dropout(emitLinear(lb, act, wd, bd), c.hiddenDropout);
  return lb.create<AddOp>(loc, x, down);
}

OwningOpRef<ModuleOp> ForwardBuilder::build() {
  declareParams();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  setConfig(*module);
  if (c.lora.enabled) {
    // What model-lora adds (passes/model/ModelLora.cpp).
    auto strings = [&](const std::vector<std::string> &names) {
      SmallVector<Attribute> out;
      for (const std::string &name : names)
        out.push_back(b.getStringAttr(name));
      return b.getArrayAttr(out);
    };
    (*module)->setAttr(
        "model.lora",
        b.getDictionaryAttr(
            {b.getNamedAttr("rank", b.getI64IntegerAttr(c.lora.rank)),
             b.getNamedAttr("alpha", b.getF64FloatAttr(c.lora.alpha)),
             b.getNamedAttr("dropout", b.getF64FloatAttr(c.lora.dropout)),
             b.getNamedAttr("target_modules", strings(c.lora.targetModules)),
             b.getNamedAttr("modules_to_save",
                            strings(c.lora.modulesToSave))}));
  }

  auto tokenType = RankedTensorType::get({c.microBatchSize, c.seqLength},
                                         b.getI32Type());
  SmallVector<Type> argTypes(paramTypes);
  argTypes.push_back(tokenType);
  argTypes.push_back(tokenType);
  if (c.packedDocuments)
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
  if (c.packedDocuments)
    argAttrs.push_back(named(ModelDialect::kInputAttrName, "positions"));
  func.setAllArgAttrs(argAttrs);

  Block *entry = func.addEntryBlock();
  OpBuilder fb = OpBuilder::atBlockEnd(entry);
  auto arg = [&](int index) {
    return index < 0 ? Value() : Value(entry->getArgument(index));
  };
  Value tokens = entry->getArgument(tokensArg);
  Value targets = entry->getArgument(tokensArg + 1);
  Value docPositions =
      c.packedDocuments ? Value(entry->getArgument(tokensArg + 2)) : Value();

  Value x = fb.create<EmbeddingOp>(loc, arg(embed), tokens);
  if (positions >= 0)
    x = fb.create<AddOp>(loc, x,
                         fb.create<PositionEmbeddingOp>(loc, arg(positions),
                                                        tokens, docPositions));
  if (c.embeddingNorm)
    x = fb.create<LayerNormOp>(loc, x, arg(embedNormW), arg(embedNormB),
                               c.normEps);
  if (c.embeddingDropout > 0)
    x = fb.create<DropoutOp>(loc, x, c.embeddingDropout, nextRngId++);
  for (auto [i, indices] : llvm::enumerate(layerParams)) {
    SmallVector<Value> params;
    for (unsigned index : indices)
      params.push_back(entry->getArgument(index));
    x = emitLayer(fb, i, x, params, docPositions);
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


OwningOpRef<ModuleOp> ForwardBuilder::buildGenerate(const GenerateConfig &g) {
  declareParams();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  setConfig(*module);
  Builder &mb = b;
  // The ids a new token may take: the model's, or fewer (a tokenizer's).
  const int64_t vocab = g.vocabLimit > 0 ? g.vocabLimit : c.vocabSize;
  (*module)->setAttr("model.generate", mb.getDictionaryAttr({
      mb.getNamedAttr("max_batch", mb.getI64IntegerAttr(g.maxBatch)),
      mb.getNamedAttr("max_seq_len", mb.getI64IntegerAttr(g.maxSeqLen)),
      mb.getNamedAttr("prefill_chunk", mb.getI64IntegerAttr(g.prefillChunk)),
      mb.getNamedAttr("vocab_size", mb.getI64IntegerAttr(vocab)),
      mb.getNamedAttr("draw_candidates",
                      mb.getI64IntegerAttr(g.drawCandidates)),
  }));

  // The arguments: the parameters, the inputs of both functions, the
  // sampling settings they share, then each layer's caches.
  Type i32 = b.getI32Type();
  int64_t batch = g.maxBatch, chunk = g.prefillChunk;
  auto ids = [&](ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, i32);
  };
  struct Input {
    const char *name;
    Type type;
  };
  SmallVector<Input> inputs = {
      {"prefill_tokens", ids({batch, chunk})},
      {"prefill_positions", ids({batch, chunk})},
      {"prefill_last", ids({batch})},
      {"decode_tokens", ids({batch, 1})},
      {"decode_positions", ids({batch, 1})},
      {"sampling", RankedTensorType::get({3}, b.getF32Type())},
      {"seed", ids({2})},
      {"draw_positions", ids({batch})},
      {"beam_parents", ids({batch})},
  };
  // Scoring's: a chunk's tokens at their positions, and the ids whose
  // log-probabilities it asks for.
  const unsigned firstScoreInput = inputs.size();
  if (g.score)
    inputs.append({{"score_tokens", ids({batch, chunk})},
                   {"score_positions", ids({batch, chunk})},
                   {"score_targets", ids({batch, chunk})}});
  auto cacheType = RankedTensorType::get(
      {batch, g.maxSeqLen, c.numKvHeads * c.headDim}, element);
  SmallVector<Type> argTypes(paramTypes);
  SmallVector<DictionaryAttr> argAttrs;
  auto named = [&](StringRef attr, StringRef value) {
    return b.getDictionaryAttr(b.getNamedAttr(attr, b.getStringAttr(value)));
  };
  for (const std::string &name : paramNames)
    argAttrs.push_back(named(ModelDialect::kParamAttrName, name));
  unsigned firstInput = argTypes.size();
  for (const Input &in : inputs) {
    argTypes.push_back(in.type);
    argAttrs.push_back(named(ModelDialect::kInputAttrName, in.name));
  }
  unsigned firstCache = argTypes.size();
  for (int64_t i = 0; i < c.numLayers; ++i)
    for (const char *kv : {"k", "v"}) {
      argTypes.push_back(cacheType);
      argAttrs.push_back(named(ModelDialect::kCacheAttrName,
                               ("cache." + std::string(kv) + "." +
                                std::to_string(i))));
    }

  auto logitsType =
      RankedTensorType::get({batch, 1, c.paddedVocabSize}, element);
  // Beam search's candidates per row: enough for every beam's best when
  // the beams fill the batch and up to two ids end a sequence ((1 + ends)
  // x beams), within the vocabulary.
  int64_t candidates = std::min<int64_t>(3 * batch, vocab);
  auto topType = [&](Type element) {
    return RankedTensorType::get({batch, candidates}, element);
  };
  SmallVector<Type> resultTypes = {
      ids({batch}), logitsType, topType(b.getF32Type()), topType(i32),
      ids({batch}), logitsType, topType(b.getF32Type()), topType(i32)};
  for (int64_t i = 0; i < 2 * c.numLayers; ++i)
    resultTypes.push_back(cacheType);
  if (g.score)
    resultTypes.append({RankedTensorType::get({batch, chunk}, b.getF32Type()),
                        ids({batch, chunk})});
  b.setInsertionPointToEnd(module->getBody());
  auto func = b.create<func::FuncOp>(
      loc, "generate", b.getFunctionType(argTypes, resultTypes));
  func.setAllArgAttrs(argAttrs);
  SmallVector<DictionaryAttr> resultAttrs;
  for (const char *name :
       {"prefill_ids", "prefill_logits", "prefill_top_logprobs",
        "prefill_top_ids", "decode_ids", "decode_logits",
        "decode_top_logprobs", "decode_top_ids"})
    resultAttrs.push_back(named(ModelDialect::kResultAttrName, name));
  // The reordered caches: the cache buffers themselves.
  for (int64_t i = 0; i < c.numLayers; ++i)
    for (const char *kv : {"k", "v"})
      resultAttrs.push_back(named(
          ModelDialect::kResultAttrName,
          "cache." + std::string(kv) + "." + std::to_string(i)));
  if (g.score)
    for (const char *name : {"score_logprobs", "score_greedy"})
      resultAttrs.push_back(named(ModelDialect::kResultAttrName, name));
  func.setAllResultAttrs(resultAttrs);

  Block *entry = func.addEntryBlock();
  OpBuilder fb = OpBuilder::atBlockEnd(entry);
  auto arg = [&](int index) {
    return index < 0 ? Value() : Value(entry->getArgument(index));
  };
  auto input = [&](unsigned i) { return entry->getArgument(firstInput + i); };
  Value sampling = input(5), seed = input(6), draw = input(7),
        parents = input(8);

  // One function's ops: its tokens through the model into the caches, and
  // the next token of each sequence from the row `last` names (the only
  // row without it). Every op is marked with the function it runs in.
  auto markPhase = [&](Operation *before, StringRef phase) {
    auto phaseAttr = b.getStringAttr(phase);
    for (Operation &op : llvm::make_range(
             before ? std::next(before->getIterator()) : entry->begin(),
             entry->end()))
      op.setAttr(ModelDialect::kPhaseAttrName, phaseAttr);
  };
  // The model on a chunk of tokens at their positions, into the caches: the
  // final norm's output.
  auto emitModel = [&](Value tokens, Value positions) -> Value {
    Value x = fb.create<EmbeddingOp>(loc, arg(embed), tokens);
    if (this->positions >= 0)
      x = fb.create<AddOp>(
          loc, x, fb.create<EmbeddingOp>(loc, arg(this->positions), positions));
    if (c.embeddingNorm)
      x = fb.create<LayerNormOp>(loc, x, arg(embedNormW), arg(embedNormB),
                                 c.normEps);
    for (auto [i, indices] : llvm::enumerate(layerParams)) {
      SmallVector<Value> params;
      for (unsigned index : indices)
        params.push_back(entry->getArgument(index));
      LayerCache cache{positions, entry->getArgument(firstCache + 2 * i),
                       entry->getArgument(firstCache + 2 * i + 1)};
      x = emitLayerBody(fb, x, params, &cache);
    }
    return x;
  };
  auto emitPhase = [&](StringRef phase, Value tokens, Value positions,
                       Value last) -> SmallVector<Value> {
    Operation *before = entry->empty() ? nullptr : &entry->back();
    Value x = emitModel(tokens, positions);
    if (last)
      x = fb.create<TakeRowsOp>(loc, x, last);
    x = emitNorm(fb, x, arg(finalNormW), arg(finalNormB));
    Value head = lmHead >= 0 ? arg(lmHead) : arg(embed);
    Value logits =
        fb.create<LinearOp>(loc, x, head, Value(), /*transposeW=*/true);
    Value next =
        fb.create<SampleOp>(loc, logits, sampling, seed, draw, vocab);
    auto top = fb.create<TopLogprobsOp>(loc, logits, candidates, vocab);
    markPhase(before, phase);
    return {next, logits, top.getLogprobs(), top.getIds()};
  };
  SmallVector<Value> results =
      emitPhase("prefill", input(0), input(1), input(2));
  llvm::append_range(results, emitPhase("decode", input(3), input(4), Value()));
  // Beam search's reorder: every cache's rows taken from the parent beams.
  Operation *before = &entry->back();
  for (int64_t i = 0; i < 2 * c.numLayers; ++i)
    results.push_back(fb.create<ReorderRowsOp>(
        loc, entry->getArgument(firstCache + i), parents));
  markPhase(before, "reorder");
  // Scoring: the chunk into the caches, as prefill puts it, and every
  // position's log-probability of its target.
  if (g.score) {
    before = &entry->back();
    Value x = emitModel(input(firstScoreInput), input(firstScoreInput + 1));
    x = emitNorm(fb, x, arg(finalNormW), arg(finalNormB));
    Value head = lmHead >= 0 ? arg(lmHead) : arg(embed);
    Value logits =
        fb.create<LinearOp>(loc, x, head, Value(), /*transposeW=*/true);
    // Over the model's whole vocabulary (a tokenizer's smaller one limits
    // only what is drawn): Hugging Face's log_softmax of the logits.
    auto scored = fb.create<TokenLogprobsOp>(
        loc, logits, input(firstScoreInput + 2), c.vocabSize);
    markPhase(before, "score");
    results.append({scored.getLogprobs(), scored.getGreedy()});
  }
  fb.create<func::ReturnOp>(loc, results);
  return module;
}

} // namespace

OwningOpRef<ModuleOp> braid::buildForwardModule(MLIRContext &context,
                                                const ModelConfig &config) {
  context.loadDialect<ModelDialect, func::FuncDialect>();
  return ForwardBuilder(context, config).build();
}

llvm::Error braid::checkGenerateConfig(const ModelConfig &config,
                                       const GenerateConfig &g) {
  auto error = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   message.str());
  };
  if (g.maxBatch < 1 || g.maxBatch > (int64_t(1) << 20))
    return error("generate: max_batch = " + llvm::Twine(g.maxBatch) +
                 " must be in [1, 1048576]");
  if (g.maxSeqLen < 2 || g.maxSeqLen > (int64_t(1) << 24))
    return error("generate: max_seq_len = " + llvm::Twine(g.maxSeqLen) +
                 " must be in [2, 16777216] (a prompt token and a new one)");
  if (g.prefillChunk < 1 || g.prefillChunk > g.maxSeqLen)
    return error("generate: prefill_chunk = " + llvm::Twine(g.prefillChunk) +
                 " must be in [1, max_seq_len = " + llvm::Twine(g.maxSeqLen) +
                 "]");
  if (g.vocabLimit < 0 || g.vocabLimit > config.vocabSize)
    return error("generate: vocab_size = " + llvm::Twine(g.vocabLimit) +
                 " must be in [1, the model's " +
                 llvm::Twine(config.vocabSize) + " ids] (0: all of them)");
  if (g.drawCandidates < 1 || g.drawCandidates > (int64_t(1) << 12))
    return error("generate: draw_candidates = " +
                 llvm::Twine(g.drawCandidates) +
                 " must be in [1, 4096] (the best tokens each tensor-parallel "
                 "rank gives the draw)");
  if (config.positionEmbedding == spec::LEARNED &&
      g.maxSeqLen > config.maxSeqLen)
    return error("generate: max_seq_len = " + llvm::Twine(g.maxSeqLen) +
                 " is beyond the model's " + llvm::Twine(config.maxSeqLen) +
                 " learned positions (model.max_seq_len)");
  return llvm::Error::success();
}

OwningOpRef<ModuleOp> braid::buildGenerateModule(MLIRContext &context,
                                                 const ModelConfig &config,
                                                 const GenerateConfig &g) {
  context.loadDialect<ModelDialect, func::FuncDialect>();
  return ForwardBuilder(context, config).buildGenerate(g);
}
