//===- PlanLowerPipeline.cpp - `plan-lower` with pipeline stages ----------===//
//
// The part of `plan-lower` (see Passes.td and Lowering.h) that lowers a step
// that model-pipeline-partition cut into stages: each pipeline rank's
// functions over its own buffers, the SEND/RECV of the values that cross
// stages, the parameters that several stages use (a tied embedding), the
// buffers kept per micro-batch in flight (`slots`), the `plan.stage` ops,
// and the zero-bubble split of each backward into backward and
// backward_weight.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Lowering.h"

#include <map>
#include <set>

using namespace mlir;
using namespace braid;
using namespace braid::plan_ir;
using namespace braid::plan_ir::lowering;

/// The weight gradient, which nothing in the pipeline waits for: to the
/// stage's backward_weight function (zero-bubble schedules defer it into
/// the bubbles).
LogicalResult Lowering::lowerIntoWeightFunction(Operation *op) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(&weightFn.getBody().front());
  FuncOp saved = weightFn;
  weightFn = FuncOp();
  LogicalResult result = lowerOp(op, saved.getSymName());
  weightFn = saved;
  return result;
}

/// With pipeline parallelism each stage gets its own functions, over its
/// own buffers: zero_grads, forward (the ops that do not depend on the
/// loss gradient), backward (those that do) and update (the optimizer).
/// A value made on one stage and used on another is sent by the stage that
/// makes it right after its op, and received by the other at the start of
/// its function of the same phase, in the order the values are made, so
/// both ends agree on the order of the messages.
LogicalResult Lowering::runPipeline(ArrayAttr stages) {
  Block &entry = func.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  // Ops that depend on the loss gradient make the backward.
  DenseSet<Value> dependsOnLossGrad;
  for (BlockArgument arg : func.getArguments())
    if (auto in = func.getArgAttrOfType<StringAttr>(
            arg.getArgNumber(), model::ModelDialect::kInputAttrName);
        in && in.getValue() == "loss_grad")
      dependsOnLossGrad.insert(arg);
  DenseSet<Operation *> backward;
  for (Operation &op : entry.without_terminator()) {
    if (isOptimizerOp(&op) || stageOf(&op) < 0)
      continue;
    if (llvm::any_of(op.getOperands(), [&](Value v) {
          return dependsOnLossGrad.contains(v);
        })) {
      backward.insert(&op);
      for (Value r : op.getResults())
        dependsOnLossGrad.insert(r);
    }
  }
  // The stages other than its own that use a value (the optimizer's
  // reading of its stage's gradients is not a transfer).
  // Parameters used on several stages (tied embeddings) are updated by the
  // first stage that uses them (model-pipeline-partition puts their AdamW
  // there). Each other stage accumulates its own contribution to the
  // gradient over the micro-batches, sends it to the owner at the start of
  // update (before any reduction, so the owner's data-parallel sum covers
  // both), and receives the updated parameter at the end; the owner adds the
  // contributions, reduces, clips (counting the parameter once), updates and
  // sends the parameter back.
  for (auto adamw : entry.getOps<model::AdamWOp>()) {
    Value grad = adamw.getGrad();
    if (auto reduce = grad.getDefiningOp<model::AllReduceOp>())
      grad = reduce.getInputs()[cast<OpResult>(grad).getResultNumber()];
    SmallVector<Value> worklist{grad};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      Operation *def = v.getDefiningOp();
      if (auto sum = dyn_cast_or_null<model::AddOp>(def);
          sum && stageOf(sum) == stageOf(adamw)) {
        worklist.append({sum.getLhs(), sum.getRhs()});
        continue;
      }
      if (def && stageOf(def) >= 0 && stageOf(def) != stageOf(adamw))
        remoteContributions[v] = adamw.getParam();
    }
  }
  auto consumers = [&](Value v) {
    std::set<int64_t> out;
    if (remoteContributions.count(v))
      return out; // sent in update, not as a transfer
    for (Operation *user : v.getUsers())
      if (!isa<func::ReturnOp>(user) && !isOptimizerOp(user) &&
          stageOf(user) >= 0)
        out.insert(stageOf(user));
    return out;
  };
  StringAttr pp = b.getStringAttr("pp");

  // The model's stages (virtual stages) by pipeline rank: rank r runs the
  // stages whose "rank" is r, as its chunks 0, 1, ... in order.
  int64_t ranks = 0;
  std::map<int64_t, std::map<int64_t, int64_t>> chunksOfRank;
  rankOfStage.clear();
  for (auto [c, attr] : llvm::enumerate(stages)) {
    auto info = cast<DictionaryAttr>(attr);
    auto rank = info.getAs<IntegerAttr>("rank");
    auto chunk = info.getAs<IntegerAttr>("chunk");
    int64_t r = rank ? rank.getInt() : int64_t(c);
    rankOfStage.push_back(r);
    chunksOfRank[r][chunk ? chunk.getInt() : 0] = c;
    ranks = std::max(ranks, r + 1);
  }

  for (int64_t s = 0; s < ranks; ++s) {
    const std::map<int64_t, int64_t> &myChunks = chunksOfRank[s];
    auto info = cast<DictionaryAttr>(stages[myChunks.begin()->second]);
    stage = s;
    buffers.clear();
    accumulateInto.clear();
    addInto.clear();
    absorbed.clear();
    stepReductions.clear();
    remoteInto.clear();
    auto inStage = [&](Operation *op) { return rankOf(stageOf(op)) == s; };
    auto isUpdate = [&](Operation *op) {
      return isUpdateOp(op) || isa<model::GradNormOp>(op);
    };

    b.setInsertionPointToEnd(module.getBody());
    std::string prefix = "stage" + std::to_string(s) + "_";
    FuncOp zeroGrads = newFunc(prefix + "zero_grads");
    // Each chunk's forward, backward (and weight gradients).
    struct ChunkFns {
      int64_t virtualStage;
      FuncOp forward, backward, weight;
    };
    SmallVector<ChunkFns> chunkFns;
    for (auto [k, c] : myChunks) {
      std::string chunkPrefix =
          k == 0 ? prefix : prefix + "chunk" + std::to_string(k) + "_";
      chunkFns.push_back(
          {c, newFunc(chunkPrefix + "forward"), newFunc(chunkPrefix + "backward"),
           splitBackward ? newFunc(chunkPrefix + "backward_weight") : FuncOp()});
    }
    FuncOp forwardFn = chunkFns.front().forward;
    FuncOp backwardFn = chunkFns.front().backward;
    FuncOp weightFnOfStage = chunkFns.front().weight;
    FuncOp update = newFunc(prefix + "update");
    firstFunc = zeroGrads;

    for (Operation &op : entry.without_terminator())
      if (inStage(&op))
        for (Value operand : op.getOperands())
          if (auto arg = dyn_cast<BlockArgument>(operand);
              arg && arg.getOwner() == &entry && !buffers.count(arg))
            if (failed(argBuffer(arg)))
              return failure();

    FailureOr<SmallVector<std::pair<Value, BufferOp>>> gradients =
        planGradients(inStage, zeroGrads);
    if (failed(gradients))
      return failure();
    // This stage's contributions to parameters another stage updates: a
    // gradient buffer of its own each, zeroed with the others.
    SmallVector<std::tuple<BufferOp, BufferOp, int64_t>> contributions;
    for (auto [v, param] : remoteContributions) {
      if (rankOf(stageOf(v.getDefiningOp())) != s)
        continue;
      BufferOp paramBuffer = buffers.lookup(param);
      if (!paramBuffer)
        return v.getDefiningOp()->emitOpError(
            "contributes to the gradient of a parameter its stage does not "
            "hold");
      BufferOp buffer = newBuffer(v.getLoc(), storageType(v), "gradient",
                                  paramBuffer.getName().value_or(""));
      copySlicing(paramBuffer, buffer);
      if (failed(planAccumulation(v, buffer, /*top=*/false)))
        return failure();
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToEnd(&zeroGrads.getBody().front());
      kernel(plan::KernelId::ZERO, {}, {buffer}, b.getDictionaryAttr({}), v.getLoc(),
             ("zero_grads: " + *buffer.getName()).str());
      int64_t owner = -1;
      for (auto adamw : entry.getOps<model::AdamWOp>())
        if (adamw.getParam() == param)
          owner = rankOf(stageOf(adamw));
      contributions.push_back({buffer, paramBuffer, owner - s});
    }

    // Data inputs that several model chunks read (packed documents'
    // positions, which every layer reads) get a buffer per chunk: each
    // chunk keeps a micro-batch in slots of its own. The first chunk keeps
    // the input's name; chunk k's copy is "<name>.chunk<k>".
    SmallVector<BlockArgument> chunkInputs;
    if (chunkFns.size() > 1)
      for (BlockArgument arg : func.getArguments())
        if (auto in = func.getArgAttrOfType<StringAttr>(
                arg.getArgNumber(), model::ModelDialect::kInputAttrName);
            in && in.getValue() == "positions" && buffers.count(arg))
          chunkInputs.push_back(arg);
    for (auto [k, chunk] : llvm::enumerate(chunkFns)) {
      for (BlockArgument arg : chunkInputs) {
        bool read = llvm::any_of(arg.getUsers(), [&](Operation *user) {
          return stageOf(user) == chunk.virtualStage;
        });
        if (k > 0 && read)
          newBuffer(arg, "input",
                    (func.getArgAttrOfType<StringAttr>(
                         arg.getArgNumber(), model::ModelDialect::kInputAttrName)
                         .getValue() +
                     ".chunk" + Twine(k))
                        .str());
      }
      for (auto [fn, isBackward] : {std::pair(chunk.forward, false),
                                    std::pair(chunk.backward, true)}) {
        int64_t c = chunk.virtualStage;
        b.setInsertionPointToEnd(&fn.getBody().front());
        auto inPhase = [&](Operation *op) {
          return !isUpdate(op) && backward.contains(op) == isBackward;
        };
        // Receive what other stages make in this phase for this one.
        for (Operation &op : entry.without_terminator()) {
          if (stageOf(&op) == c || !inPhase(&op) || stageOf(&op) < 0)
            continue;
          for (Value r : op.getResults()) {
            if (!consumers(r).count(c))
              continue;
            if (std::abs(stageOf(&op) - c) != 1)
              return op.emitOpError("makes a value that pipeline stage ")
                     << c << " uses, " << std::abs(stageOf(&op) - c)
                     << " stages away: values move between neighbouring "
                     << "stages only";
            BufferOp recv = newBuffer(r, "activation");
            kernel(plan::KernelId::RECV, {}, {recv},
                   b.getDictionaryAttr(b.getNamedAttr(
                       "peer", b.getI64IntegerAttr(rankOf(stageOf(&op)) - s))),
                   op.getLoc(),
                   "pipeline: " +
                       std::string(isBackward ? "gradient" : "activation") +
                       " from stage " + std::to_string(stageOf(&op)),
                   ArrayAttr(), pp);
          }
        }
        weightFn = isBackward ? chunk.weight : FuncOp();
        for (Operation &op : entry.without_terminator()) {
          if (stageOf(&op) != c || !inPhase(&op))
            continue;
          if (failed(lowerOp(&op, fn.getSymName())))
            return failure();
          for (Value r : op.getResults())
            for (int64_t to : consumers(r)) {
              if (to == c)
                continue;
              kernel(plan::KernelId::SEND, {buffers.lookup(r)}, {},
                     b.getDictionaryAttr(b.getNamedAttr(
                         "peer", b.getI64IntegerAttr(rankOf(to) - s))),
                     op.getLoc(),
                     "pipeline: " +
                         std::string(isBackward ? "gradient" : "activation") +
                         " to stage " + std::to_string(to),
                     ArrayAttr(), pp);
            }
        }
      }
    }
    weightFn = FuncOp();
    for (auto [grad, buffer] : *gradients)
      buffers[grad] = buffer;
    b.setInsertionPointToEnd(&update.getBody().front());
    auto peerAttr = [&](int64_t peer) {
      return b.getDictionaryAttr(
          b.getNamedAttr("peer", b.getI64IntegerAttr(peer)));
    };
    // Shared parameters: contributions go to their owner first...
    for (auto [buffer, param, peer] : contributions)
      kernel(plan::KernelId::SEND, {buffer}, {}, peerAttr(peer), buffer.getLoc(),
             "pipeline: this stage's part of the gradient of " +
                 buffer.getName().value_or("").str() + " to stage " +
                 std::to_string(s + peer) + ", which updates it",
             ArrayAttr(), pp);
    // ...which adds them to its own before reducing.
    SmallVector<std::pair<BufferOp, int64_t>> shared;
    for (auto [v, grad] : remoteInto) {
      int64_t from = rankOf(stageOf(v.getDefiningOp()));
      BufferOp part = newBuffer(v.getLoc(), storageType(v), "activation");
      std::string name = grad.getName().value_or("").str();
      kernel(plan::KernelId::RECV, {}, {part}, peerAttr(from - s), v.getLoc(),
             "pipeline: stage " + std::to_string(from) +
                 "'s part of the gradient of " + name,
             ArrayAttr(), pp);
      kernel(plan::KernelId::ADD, {grad, part}, {grad}, b.getDictionaryAttr({}), v.getLoc(),
             "pipeline: the gradient of " + name + " from both stages");
      for (auto [param, paramBuffer] : buffers)
        if (remoteContributions.lookup(v) == param)
          shared.push_back({paramBuffer, from});
    }
    for (Operation &op : entry.without_terminator())
      if (isUpdate(&op) && (inStage(&op) || stageOf(&op) < 0) &&
          failed(lowerOp(&op, update.getSymName())))
        return failure();
    // The updated shared parameters go back to the stages that use them.
    for (auto [paramBuffer, to] : shared)
      kernel(plan::KernelId::SEND, {paramBuffer}, {}, peerAttr(to - s), paramBuffer.getLoc(),
             "pipeline: the updated " + paramBuffer.getName().value_or("").str() +
                 " to stage " + std::to_string(to),
             ArrayAttr(), pp);
    for (auto [buffer, param, peer] : contributions)
      kernel(plan::KernelId::RECV, {}, {param}, peerAttr(peer), param.getLoc(),
             "pipeline: the updated " + param.getName().value_or("").str() +
                 " from stage " + std::to_string(s + peer),
             ArrayAttr(), pp);

    // The loss and the norm the trainer reads.
    if (BufferOp loss = buffers.lookup(ret.getOperand(0));
        loss && loss.getRole() == "activation")
      loss.setName("loss");
    for (auto norm : entry.getOps<model::GradNormOp>())
      if (BufferOp b = buffers.lookup(norm.getNorm()))
        b.setName("grad_norm");
    // What one of a micro-batch's calls keeps for another (the forward's
    // saved activations, the backward's output gradients for the weight
    // gradients): one copy per micro-batch in flight (plan-schedule sets
    // how many).
    llvm::DenseMap<StringRef, unsigned> callsUsing;
    SmallVector<FuncOp> calls;
    for (ChunkFns chunk : chunkFns)
      calls.append({chunk.forward, chunk.backward, chunk.weight});
    for (FuncOp fn : calls) {
      if (!fn)
        continue;
      llvm::DenseSet<StringRef> used;
      for (KernelOp k : fn.getBody().getOps<KernelOp>())
        for (ArrayAttr list : {k.getInputs(), k.getOutputs()})
          for (Attribute ref : list)
            used.insert(cast<SymbolRefAttr>(ref).getRootReference().getValue());
      for (StringRef name : used)
        ++callsUsing[name];
    }
    for (BufferOp buffer : module.getOps<BufferOp>())
      if (buffer.getStage() == std::optional<int64_t>(s) &&
          (buffer.getRole() == "activation" || buffer.getRole() == "input") &&
          callsUsing.lookup(buffer.getSymName()) >= 2)
        buffer.setSlotsAttr(b.getI64IntegerAttr(1));

    bool hasZero = !zeroGrads.getBody().front().empty();
    bool hasUpdate = !update.getBody().front().empty();
    b.setInsertionPointToEnd(module.getBody());
    // The further chunks' functions (interleaved schedule).
    SmallVector<Attribute> more;
    for (ChunkFns chunk : ArrayRef(chunkFns).drop_front()) {
      SmallVector<NamedAttribute> fns{
          b.getNamedAttr("forward",
                         FlatSymbolRefAttr::get(chunk.forward.getSymNameAttr())),
          b.getNamedAttr("backward", FlatSymbolRefAttr::get(
                                         chunk.backward.getSymNameAttr()))};
      if (chunk.weight)
        fns.push_back(b.getNamedAttr(
            "backward_weight",
            FlatSymbolRefAttr::get(chunk.weight.getSymNameAttr())));
      more.push_back(b.getDictionaryAttr(fns));
    }
    int64_t layersOfRank = 0;
    for (auto [k, c] : myChunks)
      layersOfRank += cast<IntegerAttr>(
                          cast<DictionaryAttr>(stages[c]).get("num_layers"))
                          .getInt();
    auto stageOp = b.create<StageOp>(
        func.getLoc(), b.getI64IntegerAttr(s),
        cast<IntegerAttr>(info.get("first_layer")),
        b.getI64IntegerAttr(layersOfRank),
        hasZero ? FlatSymbolRefAttr::get(zeroGrads.getSymNameAttr())
                : FlatSymbolRefAttr(),
        FlatSymbolRefAttr::get(forwardFn.getSymNameAttr()),
        FlatSymbolRefAttr::get(backwardFn.getSymNameAttr()),
        weightFnOfStage ? FlatSymbolRefAttr::get(weightFnOfStage.getSymNameAttr())
                        : FlatSymbolRefAttr(),
        hasUpdate ? FlatSymbolRefAttr::get(update.getSymNameAttr())
                  : FlatSymbolRefAttr(),
        IntegerAttr(), ArrayAttr(), ArrayAttr(), DenseI64ArrayAttr(),
        FlatSymbolRefAttr());
    if (!more.empty())
      stageOp.setChunksAttr(b.getArrayAttr(more));
    if (!hasZero)
      zeroGrads.erase();
    if (!hasUpdate)
      update.erase();
  }
  func.erase();
  return success();
}
