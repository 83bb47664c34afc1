//===- ZeroBuckets.cpp - ZeRO's buckets and their kernels -----------------===//
//
// The part of `plan-zero` (see Passes.td and Zero.h) that makes the buckets
// of one update's parameters and the kernels that reduce, clip, update and
// gather them.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Zero.h"

#include <map>

using namespace mlir;
using namespace braid;
using namespace braid::plan_ir;
using namespace braid::plan_ir::zero;

std::string ZeroUpdate::describe(const Bucket &bucket) {
  std::string s = bucket.members.front().param.getName().value_or("?").str();
  if (bucket.members.size() > 1)
    s += " .. " + bucket.members.back().param.getName().value_or("?").str() +
         " (" + std::to_string(bucket.members.size()) + " tensors)";
  return s;
}

void ZeroUpdate::indexKernels() {
  for (auto [f, fn] : llvm::enumerate(module.getOps<FuncOp>())) {
    int64_t at = 0;
    for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
      kernelPosition[kernel] = {int64_t(f), at++};
      for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
        for (Attribute ref : list)
          if (Operation *buffer = bufferOf(ref))
            firstTouchOf.try_emplace({fn.getOperation(), buffer}, kernel);
      for (Attribute ref : kernel.getOutputs())
        if (Operation *buffer = bufferOf(ref))
          lastWrite[buffer] = kernel;
    }
  }
}

// Where each gradient is complete: the function and kernel that write it
// last (its micro-batch's backward). With ZeRO-2 its bucket is
// reduce-scattered right there, once per micro-batch, into a block that
// accumulates; a gradient that another stage adds to in update (a tied
// embedding) waits for update as with ZeRO-1.
void ZeroUpdate::makeBuckets() {
  auto early = [&](const Member &member) -> KernelOp {
    if (zero < 2 || sharedGrads.contains(member.grad))
      return KernelOp();
    return lastWrite.lookup(member.grad);
  };

  // Buckets of one kind (and, when reduced in backward, one function), at
  // most bucketBytes (a larger tensor alone), in the order the gradients
  // are complete.
  for (auto &[kind, members] : kinds) {
    SmallVector<Member> order(members.begin(), members.end());
    // (function, kernel) of the last write; (-1, 0) for update.
    auto position = [&](const Member &m) -> std::pair<int64_t, int64_t> {
      KernelOp k = early(m);
      return k ? kernelPosition.lookup(k) : std::pair<int64_t, int64_t>(-1, 0);
    };
    llvm::stable_sort(order, [&](const Member &a, const Member &c) {
      return position(a) < position(c);
    });
    int64_t bytes = 0;
    for (const Member &member : order) {
      int64_t size = member.grad.getBytes();
      KernelOp mine = early(member);
      Operation *where = mine ? mine->getParentOp() : nullptr;
      if (buckets.empty() || buckets.back().kind != &kind ||
          (buckets.back().last ? buckets.back().last->getParentOp() : nullptr) !=
              where ||
          bytes + size > bucketBytes) {
        buckets.push_back({&kind, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}});
        bytes = 0;
      }
      buckets.back().members.push_back(member);
      if (KernelOp k = early(member);
          k && (!buckets.back().last ||
                buckets.back().last->isBeforeInBlock(k)))
        buckets.back().last = k;
      bytes += size;
    }
  }
}

void ZeroUpdate::reduceBuckets() {
  const int64_t d = axisSize("dp");
  ArrayAttr dpGroup = b.getStrArrayAttr({"dp"});
  auto dim0 = b.getDictionaryAttr(b.getNamedAttr("dim", b.getI64IntegerAttr(0)));
  // Gradients partial over tp are summed over tp first, the whole bucket at
  // once, at the insertion point.
  auto sumOverTp = [&](const Bucket &bucket) {
    if (llvm::is_contained(bucket.kind->axes, "tp"))
      kernel(plan::KernelId::ALL_REDUCE, {bucket.flatGrad}, {bucket.flatGrad},
             b.getDictionaryAttr({}), bucket.members.front().loc,
             "zero: tensor-parallel sum of the gradients of " +
                 describe(bucket) + " (partial over tp)",
             b.getStrArrayAttr({"tp"}));
  };
  if (insertBefore)
    b.setInsertionPoint(insertBefore);
  else
    b.setInsertionPointToEnd(&update.getBody().front());
  updateAt = b.saveInsertionPoint();
  // zero_grads' kernels that zero one buffer, by that buffer.
  DenseMap<Operation *, SmallVector<KernelOp, 1>> zeroing;
  if (zeroGradsFn)
    for (KernelOp z : zeroGradsFn.getBody().getOps<KernelOp>())
      if (z.getOutputs().size() == 1)
        if (Operation *buffer = bufferOf(z.getOutputs()[0]))
          zeroing[buffer].push_back(z);
  for (auto [k, bucket] : llvm::enumerate(buckets)) {
    Location loc = bucket.members.front().loc;
    auto gradType = cast<RankedTensorType>(bucket.members.front().grad.getType());
    Type element = gradType.getElementType();
    int64_t elementBytes = (gradType.getElementTypeBitWidth() + 7) / 8;
    // The parameters' own type (with mixed precision, narrower than their
    // f32 gradients).
    auto paramType =
        cast<RankedTensorType>(bucket.members.front().param.getType());
    int64_t paramBytes = (paramType.getElementTypeBitWidth() + 7) / 8;
    int64_t total = 0;
    for (const Member &member : bucket.members)
      total += cast<RankedTensorType>(member.grad.getType()).getNumElements();
    int64_t quantum = d * 16;
    int64_t padded = (total + quantum - 1) / quantum * quantum;
    auto flat = RankedTensorType::get({padded}, element);
    auto shard = RankedTensorType::get({padded / d}, element);
    std::string name = "zero bucket " + std::to_string(k);
    // With ZeRO-2 the flat gradients live through one micro-batch's
    // backward; the rank keeps only its accumulated block.
    bucket.flatGrad = newBuffer(loc, flat, bucket.last ? "activation" : "bucket");
    bucket.flatParam = newBuffer(
        loc, RankedTensorType::get({padded}, paramType.getElementType()),
        "bucket");
    bucket.m = newBuffer(loc, shard, "optimizer_state", "exp_avg:" + name);
    bucket.v = newBuffer(loc, shard, "optimizer_state", "exp_avg_sq:" + name);
    if (mixed)
      bucket.master =
          newBuffer(loc, shard, "optimizer_state", "master:" + name);
    bucket.block = newBuffer(loc, shard, "activation");
    int64_t at = 0;
    for (const Member &member : bucket.members) {
      member.grad.setViewOfAttr(
          FlatSymbolRefAttr::get(bucket.flatGrad.getSymNameAttr()));
      member.grad.setViewOffsetAttr(b.getI64IntegerAttr(at * elementBytes));
      member.param.setViewOfAttr(
          FlatSymbolRefAttr::get(bucket.flatParam.getSymNameAttr()));
      member.param.setViewOffsetAttr(b.getI64IntegerAttr(at * paramBytes));
      at += cast<RankedTensorType>(member.grad.getType()).getNumElements();
    }
    std::string reason =
        "zero: data-parallel sum of the gradients of " + describe(bucket) +
        ", each rank keeping its block of " + std::to_string(padded / d) +
        " of its " + std::to_string(padded) + " elements";
    if (bucket.last) {
      // Zeroed before the micro-batch's first contribution instead of once
      // per step; reduce-scattered as soon as the last one is written.
      // The kernels added for earlier buckets touch only their own new
      // buffers, so the first kernel touching this bucket's gradients is
      // one of the function's original kernels.
      Operation *fn = bucket.last->getParentOp();
      KernelOp firstTouch;
      std::pair<int64_t, int64_t> firstAt;
      for (const Member &member : bucket.members) {
        for (KernelOp z : zeroing.lookup(member.grad))
          z.erase();
        KernelOp k = firstTouchOf.lookup({fn, member.grad});
        if (k && (!firstTouch || kernelPosition.lookup(k) < firstAt)) {
          firstTouch = k;
          firstAt = kernelPosition.lookup(k);
        }
      }
      b.setInsertionPoint(firstTouch);
      kernel(plan::KernelId::ZERO, {}, {bucket.flatGrad}, b.getDictionaryAttr({}), loc,
             "zero: the gradients of " + describe(bucket) +
                 " start from zero each micro-batch");
      b.setInsertionPointAfter(bucket.last);
      sumOverTp(bucket);
      kernel(plan::KernelId::REDUCE_SCATTER, {bucket.flatGrad}, {bucket.block},
             b.getDictionaryAttr({b.getNamedAttr("dim", b.getI64IntegerAttr(0)),
                                  b.getNamedAttr("async", b.getI64IntegerAttr(1))}),
             loc,
             reason + " (started as soon as its last gradient is written, "
                      "overlapping the rest of backward)",
             dpGroup);
      bucket.start = cast<KernelOp>(&*std::prev(b.getInsertionPoint()));
      bucket.accumulated = newBuffer(loc, shard, "gradient", "grad:" + name);
      if (zeroGradsFn) {
        b.setInsertionPointToEnd(&zeroGradsFn.getBody().front());
        kernel(plan::KernelId::ZERO, {}, {bucket.accumulated}, b.getDictionaryAttr({}), loc,
               "zero_grads: " + name);
      }
      continue;
    }
    b.restoreInsertionPoint(updateAt);
    sumOverTp(bucket);
    kernel(plan::KernelId::REDUCE_SCATTER, {bucket.flatGrad}, {bucket.block}, dim0, loc,
           reason, dpGroup);
    updateAt = b.saveInsertionPoint();
  }
  // ZeRO-2: each bucket's reduce-scatter runs while the backward goes on,
  // until the next bucket of its function is about to start (one in flight
  // at a time, so at most two buckets' flat gradients are alive), or the
  // function's end; then its block accumulates over the micro-batches.
  for (auto [k, bucket] : llvm::enumerate(buckets)) {
    if (!bucket.start)
      continue;
    Operation *fn = bucket.start->getParentOp();
    KernelOp next;
    for (const Bucket &later : ArrayRef(buckets).drop_front(k + 1))
      if (later.start && later.start->getParentOp() == fn &&
          bucket.start->isBeforeInBlock(later.start) &&
          (!next || later.start->isBeforeInBlock(next)))
        next = later.start;
    if (next)
      b.setInsertionPoint(next);
    else
      b.setInsertionPointToEnd(&cast<FuncOp>(fn).getBody().front());
    Location loc = bucket.members.front().loc;
    kernel(plan::KernelId::WAIT, {bucket.flatGrad, bucket.block}, {}, b.getDictionaryAttr({}),
           loc, "zero: the reduce-scatter of " + describe(bucket) + " is done");
    kernel(plan::KernelId::ADD, {bucket.accumulated, bucket.block}, {bucket.accumulated},
           b.getDictionaryAttr({}), loc,
           "zero: accumulate this micro-batch's block of " + describe(bucket));
  }
  b.restoreInsertionPoint(updateAt);
  // What the optimizer reads: the accumulated block (ZeRO-2) or this step's.
  for (Bucket &bucket : buckets)
    if (bucket.accumulated)
      bucket.block = bucket.accumulated;
}

BufferOp ZeroUpdate::clipNorm() {
  StringAttr dpAxis = b.getStringAttr("dp");
  // The clipping norm over the ranks' blocks: split over dp (and over the
  // norm's axes unless replicated there), each replicated block counted once.
  SmallVector<BufferOp> split, whole;
  for (const Bucket &bucket : buckets)
    (bucket.kind->replicated ? whole : split).push_back(bucket.block);
  SmallVector<Attribute> group;
  if (stage)
    group.push_back(b.getStringAttr("pp"));
  group.push_back(dpAxis);
  int64_t copies = 1;
  if (normGroup)
    for (Attribute axis : normGroup)
      if (cast<StringAttr>(axis).getValue() != "dp" &&
          cast<StringAttr>(axis).getValue() != "pp") {
        group.push_back(axis);
        copies *= axisSize(cast<StringAttr>(axis).getValue());
      }
  BufferOp normBuffer = newBuffer(normResults[0].loc, normResults[0].type,
                                  "activation");
  BufferOp scale = newBuffer(normResults[1].loc, normResults[1].type,
                             "activation");
  // The names plan-lower gave them (the trainer reads `grad_norm`).
  if (normResults[0].name)
    normBuffer.setNameAttr(normResults[0].name);
  if (normResults[1].name)
    scale.setNameAttr(normResults[1].name);
  SmallVector<BufferOp> normInputs = split;
  normInputs.append(whole);
  kernel(plan::KernelId::GRAD_NORM, normInputs, {normBuffer, scale},
         b.getDictionaryAttr(
             {b.getNamedAttr("max_norm", normParams.get("max_norm")),
              b.getNamedAttr("split_inputs", b.getI64IntegerAttr(split.size())),
              b.getNamedAttr("replicated_copies", b.getI64IntegerAttr(copies))}),
         *normLoc,
         "zero: gradient norm over the data-parallel ranks' blocks",
         b.getArrayAttr(group));
  return scale;
}

DenseMap<Operation *, BufferOp> ZeroUpdate::gatherParameters() {
  StringAttr dpAxis = b.getStringAttr("dp");
  ArrayAttr dpGroup = b.getStrArrayAttr({"dp"});
  // ZeRO-3: a bucket reduced in backward keeps only its block of the
  // parameters. Each part of a function that reads its parameters (a
  // function's forward and backward halves apart: those of a micro-step are
  // split at the first kernel reading the loss gradient) gathers them
  // first into a temporary flat buffer of its own, whose views stand for
  // the parameters there.
  DenseMap<Operation *, BufferOp> paramBlock;
  struct Gather {
    std::pair<int64_t, int64_t> where; // (function, half)
    KernelOp firstUse;
    BufferOp gathered, block;
    std::string what;
    Location loc;
  };
  SmallVector<Gather> gathers;
  if (zero >= 3) {
    Operation *updateFn = update;
    BufferOp lossGrad;
    for (BufferOp buffer : module.getOps<BufferOp>())
      if (buffer.getStage() == stage && buffer.getRole() == "input" &&
          buffer.getName() == "loss_grad")
        lossGrad = buffer;
    // Every kernel outside update that reads or writes each buffer, in
    // program order, with its (function, half). The views made below for a
    // bucket replace only that bucket's parameters, so the users of the
    // other buckets' parameters stay as listed.
    struct Use {
      std::pair<int64_t, int64_t> where;
      int64_t at;
      KernelOp kernel;
    };
    DenseMap<Operation *, SmallVector<Use>> usesOf;
    for (auto [f, fn] : llvm::enumerate(module.getOps<FuncOp>())) {
      if (fn.getOperation() == updateFn)
        continue;
      int64_t half = 0, at = 0;
      for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
        for (Attribute ref : kernel.getInputs())
          if (lossGrad && bufferOf(ref) == lossGrad)
            half = 1;
        for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
          for (Attribute ref : list)
            if (Operation *buffer = bufferOf(ref)) {
              SmallVector<Use> &uses = usesOf[buffer];
              if (uses.empty() || uses.back().kernel != kernel)
                uses.push_back({{int64_t(f), half}, at, kernel});
            }
        ++at;
      }
    }
    for (auto [k, bucket] : llvm::enumerate(buckets)) {
      if (!bucket.last)
        continue; // a tied embedding's: whole until update, as ZeRO-1
      Location loc = bucket.members.front().loc;
      auto shard = RankedTensorType::get(
          cast<RankedTensorType>(bucket.m.getType()).getShape(),
          cast<RankedTensorType>(bucket.flatParam.getType()).getElementType());
      BufferOp blockOfParams = newBuffer(loc, shard, "parameter",
                                         "zero bucket " + std::to_string(k));
      blockOfParams.setBlockOfAttr(
          FlatSymbolRefAttr::get(bucket.flatParam.getSymNameAttr()));
      bucket.flatParam.setRole("activation");
      paramBlock[bucket.flatParam] = blockOfParams;
      // The kernels reading the bucket's parameters, by (function, half),
      // in program order.
      SmallVector<Use> uses;
      for (const Member &member : bucket.members)
        llvm::append_range(uses, usesOf.lookup(member.param));
      llvm::sort(uses, [](const Use &x, const Use &y) {
        return std::tie(x.where.first, x.at) < std::tie(y.where.first, y.at);
      });
      std::map<std::pair<int64_t, int64_t>, SmallVector<KernelOp>> parts;
      for (const Use &use : uses) {
        SmallVector<KernelOp> &part = parts[use.where];
        if (part.empty() || part.back() != use.kernel)
          part.push_back(use.kernel);
      }
      bool firstPart = true;
      for (auto &[where, kernels] : parts) {
        BufferOp gathered = bucket.flatParam;
        DenseMap<Operation *, BufferOp> viewOf;
        if (!firstPart) {
          gathered = newBuffer(loc, bucket.flatParam.getType(), "activation");
          for (const Member &member : bucket.members)
            viewOf[member.param] = copyView(member.param, gathered);
          for (KernelOp kernel : kernels)
            for (bool outputs : {false, true}) {
              SmallVector<Attribute> refs;
              for (Attribute ref : outputs ? kernel.getOutputs() : kernel.getInputs()) {
                BufferOp to = viewOf.lookup(bufferOf(ref));
                refs.push_back(to ? FlatSymbolRefAttr::get(to.getSymNameAttr()) : ref);
              }
              if (outputs)
                kernel.setOutputsAttr(b.getArrayAttr(refs));
              else
                kernel.setInputsAttr(b.getArrayAttr(refs));
            }
        }
        firstPart = false;
        gathers.push_back({where, kernels.front(), gathered, blockOfParams,
                           describe(bucket), loc});
      }
    }
    // Each part's gather starts (async) where the part before it in its
    // function's half first uses its own parameters, so it runs while that
    // part computes (the first part of a half gathers just before its use);
    // a WAIT finishes it right before its own first use.
    llvm::stable_sort(gathers, [](const Gather &x, const Gather &y) {
      return x.where != y.where ? x.where < y.where
                                : x.firstUse->isBeforeInBlock(y.firstUse);
    });
    for (auto [i, g] : llvm::enumerate(gathers)) {
      KernelOp start = i > 0 && gathers[i - 1].where == g.where
                           ? gathers[i - 1].firstUse
                           : g.firstUse;
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(start);
      kernel(plan::KernelId::COPY, {g.block}, {g.gathered}, b.getDictionaryAttr({}), g.loc,
             "zero: this rank's block of the parameters " + g.what, ArrayAttr(),
             dpAxis);
      kernel(plan::KernelId::ALL_GATHER, {g.gathered}, {g.gathered},
             b.getDictionaryAttr({b.getNamedAttr("dim", b.getI64IntegerAttr(0)),
                                  b.getNamedAttr("async", b.getI64IntegerAttr(1))}),
             g.loc,
             "zero: the parameters " + g.what +
                 " from every data-parallel rank (started one part ahead of "
                 "their first use here)",
             dpGroup);
      b.setInsertionPoint(g.firstUse);
      kernel(plan::KernelId::WAIT, {g.gathered}, {}, b.getDictionaryAttr({}), g.loc,
             "zero: the parameters " + g.what + " are gathered");
    }
  }
  return paramBlock;
}

void ZeroUpdate::updateBuckets(BufferOp scale,
                               const DenseMap<Operation *, BufferOp> &paramBlock) {
  StringAttr dpAxis = b.getStringAttr("dp");
  ArrayAttr dpGroup = b.getStrArrayAttr({"dp"});
  auto dim0 = b.getDictionaryAttr(b.getNamedAttr("dim", b.getI64IntegerAttr(0)));
  // AdamW on this rank's block, then every rank's blocks gathered back
  // (ZeRO-3: the block is the parameters the rank keeps).
  for (Bucket &bucket : buckets) {
    const Member &first = bucket.members.front();
    BufferOp kept = paramBlock.lookup(bucket.flatParam);
    BufferOp target = kept ? kept : bucket.flatParam;
    // Mixed precision: on the rank's block of the f32 masters, rounded
    // into its block of the weights (the kept block, or of the flat ones).
    BufferOp updated = bucket.master ? bucket.master : target;
    SmallVector<BufferOp> outs = {updated, bucket.m, bucket.v};
    if (bucket.master)
      outs.push_back(target);
    kernel(plan::KernelId::ADAMW,
           {updated, bucket.block, bucket.m, bucket.v,
            first.lr, first.step, scale},
           outs, first.params, first.loc,
           "zero: AdamW on this rank's block of " + describe(bucket),
           ArrayAttr(), kept ? StringAttr() : dpAxis);
  }
  for (Bucket &bucket : buckets)
    if (!paramBlock.count(bucket.flatParam))
      kernel(plan::KernelId::ALL_GATHER, {bucket.flatParam}, {bucket.flatParam}, dim0,
             bucket.members.front().loc,
             "zero: the updated parameters " + describe(bucket) +
                 " from every data-parallel rank",
             dpGroup);

  // The per-parameter moments are gone: the buckets' hold them.
  for (BufferOp moment : moments)
    moment.erase();
}
