//===- Generate.cpp - Compiling an inference plan -------------------------===//

#include "compiler/Generate.h"

#include "compiler/Compile.h"
#include "compiler/PlanExport.h"
#include "frontends/ParallelConfig.h"
#include "frontends/TrainConfig.h"

#include "runtime/plan/PlanLoader.h"

#include <algorithm>

using namespace braid;

namespace {
llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}
} // namespace

llvm::Expected<GenerateConfig> braid::resolveGenerate(const spec::JobSpec &job,
                                                      const ModelConfig &model) {
  GenerateConfig g;
  const spec::GenerateSpec &s = job.generate();
  g.maxBatch = s.has_max_batch() ? s.max_batch() : 1;
  g.maxSeqLen = s.has_max_seq_len() ? s.max_seq_len() : model.maxSeqLen;
  g.prefillChunk = s.has_prefill_chunk() ? s.prefill_chunk()
                                         : std::min<int64_t>(g.maxSeqLen, 512);
  g.vocabLimit = s.has_vocab_size() ? s.vocab_size() : 0;
  if (s.has_draw_candidates())
    g.drawCandidates = s.draw_candidates();
  g.score = s.score();
  if (llvm::Error e = checkGenerateConfig(model, g))
    return std::move(e);
  return g;
}

llvm::Expected<GeneratePlan>
braid::compileGeneratePlan(mlir::MLIRContext &context, const spec::JobSpec &job,
                           const std::string &dumpIrDir) {
  llvm::Expected<ModelConfig> config = resolveModel(job);
  if (!config)
    return config.takeError();
  const spec::ParallelSpec &p = job.parallel();
  for (auto [name, value] : {std::pair<const char *, int64_t>{"pp", p.pp()},
                             {"dp", p.dp()}})
    if (value > 1)
      return error(llvm::Twine("generation splits a model over tensor "
                               "parallelism only: parallel.") +
                   name + " = " + llvm::Twine(value) +
                   " (pipeline stages and data parallelism are not built "
                   "for inference plans)");
  if (p.sp())
    return error("generation does not use sequence parallelism (parallel.sp)");
  llvm::Expected<GenerateConfig> g = resolveGenerate(job, *config);
  if (!g)
    return g.takeError();
  llvm::Expected<ParallelConfig> parallel = resolveParallel(job, *config);
  if (!parallel)
    return parallel.takeError();
  llvm::Expected<TrainConfig> train = resolveTrain(job);
  if (!train)
    return train.takeError();

  GeneratePlan out;
  out.module = buildGenerateModule(context, *config, *g);
  CompileOptions options;
  options.compileTo = Phase::Plan;
  options.generate = true;
  options.train = *train;
  options.parallel = *parallel;
  options.dumpIrDir = dumpIrDir;
  if (llvm::Error e = runPhases(*out.module, options))
    return std::move(e);
  llvm::Expected<plan::Plan> exported = exportPlan(*out.module);
  if (!exported)
    return exported.takeError();
  out.plan = std::move(*exported);
  out.plan.mutable_training()->MergeFrom(
      trainingSettings(*config, *train, *parallel, job.data()));
  return out;
}

llvm::json::Object braid::generationReport(const plan::Plan &plan) {
  const plan::Generation &g = plan.generation();
  int64_t caches = 0, cacheBytes = 0, parameterBytes = 0, columns = 0,
          elementBytes = 0;
  for (const plan::Buffer &b : plan.buffers()) {
    int64_t n = plan::DTypeBytes(b.dtype());
    for (int64_t d : b.shape())
      n *= d;
    if (b.role() == plan::PARAMETER)
      parameterBytes += n;
    if (b.role() != plan::KV_CACHE)
      continue;
    ++caches;
    cacheBytes += n;
    columns = b.shape_size() == 3 ? b.shape(2) : 0;
    elementBytes = plan::DTypeBytes(b.dtype());
  }
  llvm::json::Object kv{
      {"bytes", cacheBytes},
      {"layers", caches / 2},
      {"max_batch", g.max_batch()},
      {"max_seq_len", g.max_seq_len()},
      {"kv_columns", columns},
      {"dtype_bytes", elementBytes},
      {"formula", "2 x layers x max_batch x max_seq_len x kv_columns x "
                  "dtype_bytes (kv_columns = kv_heads x head_dim)"},
      {"bytes_per_position", g.max_batch() * g.max_seq_len() > 0
                                 ? cacheBytes / (g.max_batch() * g.max_seq_len())
                                 : 0}};
  return llvm::json::Object{
      {"max_batch", g.max_batch()},
      {"max_seq_len", g.max_seq_len()},
      {"prefill_chunk", g.prefill_chunk()},
      {"vocab_size", g.vocab_size()},
      {"logits_axis", g.logits_axis()},
      {"draw_candidates", g.draw_candidates()},
      {"arena_bytes", plan.arena_bytes()},
      {"parameter_bytes", parameterBytes},
      {"kv_cache", std::move(kv)},
      {"decode_bytes_read_at_least", parameterBytes + cacheBytes},
  };
}
