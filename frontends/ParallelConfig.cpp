//===- ParallelConfig.cpp - The resolved `parallel` section of a job ------===//

#include "frontends/ParallelConfig.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>

using namespace braid;

namespace {

llvm::Error invalid(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

} // namespace

llvm::Expected<ParallelConfig>
braid::resolveParallel(const spec::JobSpec &job, const ModelConfig &model) {
  const spec::ParallelSpec &p = job.parallel();
  ParallelConfig c;
  c.tp = p.has_tp() ? p.tp() : 1;
  c.pp = p.has_pp() ? p.pp() : 1;
  c.dp = p.has_dp() ? p.dp() : 1;
  for (auto [field, value] : {std::pair<const char *, int64_t>{"tp", c.tp},
                              {"pp", c.pp},
                              {"dp", c.dp}})
    if (value < 1 || value > (int64_t(1) << 20))
      return invalid(llvm::Twine("parallel.") + field + " = " +
                     llvm::Twine(value) + " must be in [1, 2^20]");
  if (c.tp > 1) {
    // Megatron's split: heads, the feed-forward width and the (padded)
    // vocabulary are divided among the tp ranks.
    auto divides = [&](const char *field, int64_t value,
                       const char *why) -> llvm::Error {
      if (value % c.tp == 0)
        return llvm::Error::success();
      return invalid(llvm::Twine("parallel.tp = ") + llvm::Twine(c.tp) +
                     " does not divide " + field + " = " + llvm::Twine(value) +
                     " (" + why + ")");
    };
    if (llvm::Error e = divides("model.num_heads", model.numHeads,
                                "each tensor-parallel rank takes "
                                "num_heads / tp attention heads"))
      return std::move(e);
    if (llvm::Error e = divides("model.ffn_hidden_size", model.ffnHiddenSize,
                                "the MLP is split by its hidden columns"))
      return std::move(e);
    if (llvm::Error e = divides(
            "the padded vocabulary", model.paddedVocabSize,
            "the embedding and the output layer are split by vocabulary "
            "rows; set model.make_vocab_size_divisible_by to a multiple of "
            "tp"))
      return std::move(e);
    if (model.fusedQkv())
      if (llvm::Error e = divides("model.num_kv_heads", model.numKvHeads,
                                  "a fused QKV projection is split by heads; "
                                  "kv heads are replicated only when "
                                  "projected separately"))
        return std::move(e);
  }
  if (c.pp > model.numLayers)
    return invalid("parallel.pp = " + llvm::Twine(c.pp) + " is more than the " +
                   llvm::Twine(model.numLayers) +
                   " layers of the model (model.num_layers): each pipeline "
                   "stage needs at least one layer");
  c.vpp = p.has_vpp() ? p.vpp() : 1;
  if (c.vpp < 1 || c.vpp > (int64_t(1) << 20))
    return invalid("parallel.vpp = " + llvm::Twine(c.vpp) +
                   " must be in [1, 2^20]");
  if (c.vpp > 1) {
    // Megatron's interleaving: each rank holds vpp chunks of equal layers.
    if (c.pp < 2)
      return invalid("parallel.vpp = " + llvm::Twine(c.vpp) +
                     " (model chunks per pipeline rank) needs parallel.pp > "
                     "1, found pp = " +
                     llvm::Twine(c.pp));
    if (model.numLayers % (c.pp * c.vpp) != 0)
      return invalid("parallel.vpp = " + llvm::Twine(c.vpp) +
                     " does not divide the " +
                     llvm::Twine(model.numLayers / c.pp) +
                     " layers per pipeline rank (model.num_layers = " +
                     llvm::Twine(model.numLayers) + ", parallel.pp = " +
                     llvm::Twine(c.pp) +
                     "): each rank holds vpp chunks of equal layers");
    if (p.stage_layers_size())
      return invalid("parallel.stage_layers cannot be given with "
                     "parallel.vpp = " +
                     llvm::Twine(c.vpp) + " (chunks are of equal layers)");
    c.schedule = "interleaved";
  }
  if (p.stage_layers_size()) {
    if (p.stage_layers_size() != c.pp)
      return invalid("parallel.stage_layers lists " +
                     llvm::Twine(p.stage_layers_size()) +
                     " stages but parallel.pp = " + llvm::Twine(c.pp));
    int64_t sum = 0;
    for (int64_t n : p.stage_layers()) {
      if (n < 1)
        return invalid("parallel.stage_layers has a stage of " +
                       llvm::Twine(n) + " layers: each needs at least one");
      sum += n;
      c.stageLayers.push_back(n);
    }
    if (sum != model.numLayers)
      return invalid("parallel.stage_layers add up to " + llvm::Twine(sum) +
                     " layers but the model has " +
                     llvm::Twine(model.numLayers) + " (model.num_layers)");
  }
  if (p.has_schedule()) {
    if (p.schedule() != "gpipe" && p.schedule() != "1f1b" &&
        p.schedule() != "zb-h1" && p.schedule() != "interleaved")
      return invalid("parallel.schedule = \"" + p.schedule() +
                     "\" is not one of gpipe, 1f1b, interleaved, zb-h1");
    if ((p.schedule() == "interleaved") != (c.vpp > 1))
      return invalid("parallel.schedule = \"" + p.schedule() +
                     "\" with parallel.vpp = " + llvm::Twine(c.vpp) +
                     ": the interleaved schedule is the one for vpp > 1");
    c.schedule = p.schedule();
  }
  c.sp = p.sp();
  if (c.sp && c.tp < 2)
    return invalid("parallel.sp (sequence parallelism) splits the sequence "
                   "across the tensor-parallel ranks: it needs parallel.tp > "
                   "1, found tp = " +
                   llvm::Twine(c.tp));
  if (c.sp && model.seqLength % c.tp != 0)
    return invalid("parallel.tp = " + llvm::Twine(c.tp) +
                   " does not divide data.seq_length = " +
                   llvm::Twine(model.seqLength) +
                   " (sequence parallelism splits the sequence among the tp "
                   "ranks)");
  if (p.has_recompute()) {
    if (p.recompute() != "none" && p.recompute() != "selective" &&
        p.recompute() != "full" && p.recompute() != "auto")
      return invalid("parallel.recompute = \"" + p.recompute() +
                     "\" is not one of none, selective, full, auto");
    c.recompute = p.recompute();
  }
  if (p.has_memory_budget_bytes()) {
    if (p.memory_budget_bytes() < 1)
      return invalid("parallel.memory_budget_bytes = " +
                     llvm::Twine(p.memory_budget_bytes()) +
                     " must be at least 1 (bytes per device)");
    c.memoryBudgetBytes = p.memory_budget_bytes();
  }
  if (c.recompute == "auto" && c.memoryBudgetBytes == 0)
    return invalid("parallel.recompute = \"auto\" chooses what to recompute "
                   "to fit a memory budget: give parallel.memory_budget_bytes "
                   "(--memory-budget BYTES)");
  if (p.has_zero()) {
    if (p.zero() < 0 || p.zero() > 3)
      return invalid("parallel.zero = " + llvm::Twine(p.zero()) +
                     " is not a ZeRO stage (0, 1, 2 or 3)");
    if (p.zero() > 0 && c.dp < 2)
      return invalid("parallel.zero = " + llvm::Twine(p.zero()) +
                     " shards the optimizer over the data-parallel ranks: it "
                     "needs parallel.dp > 1, found dp = " +
                     llvm::Twine(c.dp));
    c.zero = p.zero();
  }
  if (p.has_grad_bucket_bytes()) {
    if (p.grad_bucket_bytes() < 0)
      return invalid(
          "parallel.grad_bucket_bytes = " + llvm::Twine(p.grad_bucket_bytes()) +
          " must be 0 (the gradients' sums after the backward) or "
          "more (bytes of one bucket)");
    c.gradBucketBytes = p.grad_bucket_bytes();
  }
  if (p.has_overlap_param_gather())
    c.overlapParamGather = p.overlap_param_gather();
  if (p.has_zero_bucket_bytes()) {
    if (p.zero_bucket_bytes() < 1)
      return invalid(
          "parallel.zero_bucket_bytes = " + llvm::Twine(p.zero_bucket_bytes()) +
          " must be at least 1 (bytes of one ZeRO bucket)");
    c.zeroBucketBytes = p.zero_bucket_bytes();
  }

  int64_t perStep = model.microBatchSize * c.dp;
  c.globalBatchSize = p.has_global_batch_size() ? p.global_batch_size() : perStep;
  if (c.globalBatchSize < 1 || c.globalBatchSize > (int64_t(1) << 40))
    return invalid("parallel.global_batch_size = " +
                   llvm::Twine(c.globalBatchSize) + " must be in [1, 2^40]");
  if (c.globalBatchSize % perStep != 0)
    return invalid("parallel.global_batch_size = " +
                   llvm::Twine(c.globalBatchSize) +
                   " must be a multiple of micro_batch_size x dp = " +
                   llvm::Twine(model.microBatchSize) + " x " +
                   llvm::Twine(c.dp) + " = " + llvm::Twine(perStep));
  c.microBatches = c.globalBatchSize / perStep;
  // resolveModel checked the size limits with one micro-batch's activations;
  // a pipeline keeps several micro-batches' at once: GPipe all of a step's,
  // the other schedules at most pp x (vpp + 1) (1F1B's first stage pp,
  // Megatron's interleaved pp x vpp + pp - 1). Without a pipeline one
  // micro-batch's backward ends before the next forward.
  if (c.pp > 1 && c.microBatches > 1) {
    bool gpipe = c.schedule == "gpipe";
    int64_t kept = gpipe ? c.microBatches
                         : std::min(c.microBatches, c.pp * (c.vpp + 1));
    std::string why =
        gpipe ? "parallel.schedule = \"gpipe\" keeps all of a step's, "
                "parallel.global_batch_size / (parallel.micro_batch_size x "
                "parallel.dp)"
              : "parallel.schedule = \"" + c.schedule +
                    "\" keeps at most parallel.pp x (parallel.vpp + 1)";
    if (llvm::Error e = checkSizeLimits(model, kept, why))
      return std::move(e);
  }
  if (c.vpp > 1 && c.microBatches % c.pp != 0)
    return invalid("the interleaved schedule (parallel.vpp = " +
                   llvm::Twine(c.vpp) + ") needs micro-batches per step (" +
                   llvm::Twine(c.microBatches) +
                   " = global_batch_size / (micro_batch_size x dp)) to be a "
                   "multiple of parallel.pp = " +
                   llvm::Twine(c.pp));
  return c;
}
