//===- ParallelConfig.h - The resolved `parallel` section of a job -*- C++ -*-===//

#ifndef BRAID_FRONTENDS_PARALLELCONFIG_H
#define BRAID_FRONTENDS_PARALLELCONFIG_H

#include "frontends/ModelConfig.h"
#include "frontends/spec/braid_spec.pb.h"

#include <string>
#include <vector>

#include "llvm/Support/Error.h"

namespace braid {

/// How one optimizer step is split: the degrees of the mesh axes and the
/// batch arithmetic of Megatron (global batch = micro batch x micro-batches
/// x dp), every field decided and validated.
struct ParallelConfig {
  int64_t tp = 1, pp = 1, dp = 1;
  /// Sequence parallelism: the regions between tensor-parallel blocks work
  /// on sequence slices over tp.
  bool sp = false;
  /// Pipeline parallelism: the schedule (gpipe | 1f1b) and the layers of
  /// each stage, first to last (empty: balanced by the compiler).
  std::string schedule = "1f1b";
  /// Model chunks per pipeline rank (Megatron's virtual stages, the
  /// interleaved schedule): 1 without.
  int64_t vpp = 1;
  std::vector<int64_t> stageLayers;
  /// Samples per optimizer step over all data-parallel ranks.
  int64_t globalBatchSize = 1;
  /// Micro-batches per step on each data-parallel rank (gradient
  /// accumulation steps).
  int64_t microBatches = 1;

  /// Activation recomputation (model-recompute): none | selective | full |
  /// auto (the least recomputation whose plan fits memoryBudgetBytes).
  std::string recompute = "none";
  /// The most arena bytes any rank may use (0: no budget). With recompute
  /// auto it steers the choice; otherwise a plan over it is refused.
  int64_t memoryBudgetBytes = 0;
  /// ZeRO stage: 1 shards the optimizer state over dp, 2 the gradients too,
  /// 3 the parameters too.
  int64_t zero = 0;
  /// Most gradient bytes in one ZeRO bucket (parallel.zero_bucket_bytes,
  /// braidc --zero-bucket-bytes).
  int64_t zeroBucketBytes = 25000000;
  /// Most gradient bytes in one data-parallel all-reduce started during the
  /// last micro-batch's backward (plan-overlap-grad-reduce); 0: the sums run
  /// in update, after the backward (parallel.grad_bucket_bytes, braidc
  /// --grad-bucket-bytes).
  int64_t gradBucketBytes = 25000000;
  /// ZeRO's parameter gathers during the next step's first forward
  /// (parallel.overlap_param_gather, braidc --overlap-param-gather).
  bool overlapParamGather = true;

  int64_t worldSize() const { return tp * pp * dp; }
};

/// Resolves `job.parallel` against the resolved model (whose microBatchSize
/// is the batch of one forward pass). The global batch defaults to one
/// micro-batch per data-parallel rank. Errors name the field, its value and
/// the rule; features the compiler does not build yet are refused by name
/// rather than ignored.
llvm::Expected<ParallelConfig> resolveParallel(const spec::JobSpec &job,
                                               const ModelConfig &model);

} // namespace braid

#endif // BRAID_FRONTENDS_PARALLELCONFIG_H
