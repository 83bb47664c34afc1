//===- braidc.cpp - The Braid compiler driver -----------------------------===//
//
// braidc JOB.textproto [--preset NAME | --hf-config FILE] [--compile-to=PHASE]
//        [-o FILE] [--dump-ir-after-all=DIR] [--report=FILE.json]
//
//===----------------------------------------------------------------------===//

#include "compiler/Compile.h"
#include "compiler/CostModel.h"
#include "compiler/Generate.h"
#include "compiler/PlanExport.h"
#include "compiler/Registration.h"
#include "compiler/Report.h"
#include "compiler/Search.h"
#include "frontends/ModelBuilder.h"
#include "frontends/ParallelConfig.h"
#include "frontends/Spec.h"
#include "runtime/common/Format.h"
#include "runtime/common/OutputFile.h"
#include "runtime/plan/PlanLoader.h"

#include "google/protobuf/text_format.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace cl = llvm::cl;
using namespace braid;

static cl::OptionCategory category("braidc options");

static cl::opt<std::string> jobFile(cl::Positional, cl::desc("[JOB.textproto]"),
                                    cl::init(""), cl::cat(category));
static cl::opt<std::string>
    preset("preset", cl::desc("Model preset (overrides the job's model source)"),
           cl::value_desc("NAME"), cl::cat(category));
static cl::opt<std::string>
    hfConfig("hf-config",
             cl::desc("Hugging Face config.json (overrides the job's model "
                      "source)"),
             cl::value_desc("FILE"), cl::cat(category));
static cl::opt<std::string>
    compileTo("compile-to", cl::desc("Stop after this phase and print its IR"),
              cl::value_desc("PHASE"), cl::init("model"), cl::cat(category));
static cl::opt<std::string>
    emit("emit",
         cl::desc("What to write: mlir (the IR, default), plan (the plan "
                  "file braid-run reads; needs -o) or plan-text (its "
                  "readable form); plan and plan-text compile to the plan "
                  "phase"),
         cl::value_desc("mlir|plan|plan-text"), cl::init("mlir"),
         cl::cat(category));
static cl::opt<std::string> outputFile("o", cl::desc("Output file"),
                                       cl::value_desc("FILE"), cl::init("-"),
                                       cl::cat(category));
static cl::opt<std::string>
    dumpDir("dump-ir-after-all",
            cl::desc("Write the IR before the first pass and after each pass "
                     "to DIR"),
            cl::value_desc("DIR"), cl::cat(category));
static cl::opt<std::string>
    reportFile("report", cl::desc("Write the compile report (JSON) to FILE "
                                  "(- for standard output)"),
               cl::value_desc("FILE"), cl::cat(category));
static cl::opt<int64_t> seqLen("seq-len",
                               cl::desc("Tokens per sample (data.seq_length)"),
                               cl::cat(category));
static cl::opt<int64_t>
    microBatch("micro-batch-size",
               cl::desc("Samples per micro-batch (parallel.micro_batch_size)"),
               cl::cat(category));
static cl::opt<int64_t> dpFlag("dp", cl::desc("Data-parallel degree (parallel.dp)"),
                              cl::cat(category));
static cl::opt<int64_t> tpFlag("tp",
                              cl::desc("Tensor-parallel degree (parallel.tp)"),
                              cl::cat(category));
static cl::opt<bool> spFlag(
    "sp", cl::desc("Sequence parallelism over the tp ranks (parallel.sp)"),
    cl::cat(category));
static cl::opt<std::string> scheduleFlag(
    "schedule",
    cl::desc("Pipeline schedule: gpipe | 1f1b | interleaved | zb-h1 "
             "(parallel.schedule)"),
    cl::cat(category));
static cl::list<int64_t> stageLayersFlag(
    "stage-layers",
    cl::desc("Layers of each pipeline stage, e.g. 1,2,1 (parallel.stage_layers)"),
    cl::CommaSeparated, cl::cat(category));
static cl::opt<int64_t> ppFlag("pp",
                              cl::desc("Pipeline-parallel degree (parallel.pp)"),
                              cl::cat(category));
static cl::opt<std::string> recomputeFlag(
    "recompute",
    cl::desc("Activation recomputation: none | selective | full | auto "
             "(parallel.recompute)"),
    cl::cat(category));
static cl::opt<int64_t> zeroFlag(
    "zero", cl::desc("ZeRO stage: 1 shards the optimizer state over dp, 2 "
                     "the gradients too, 3 the parameters too (parallel.zero)"),
    cl::cat(category));
static cl::opt<int64_t>
    zeroBucketBytes("zero-bucket-bytes",
                    cl::desc("Most gradient bytes in one ZeRO bucket "
                             "(parallel.zero_bucket_bytes, default 25000000)"),
                    cl::cat(category));
static cl::opt<int64_t> gradBucketBytes(
    "grad-bucket-bytes",
    cl::desc("Most gradient bytes in one data-parallel all-reduce started "
             "during the last micro-batch's backward; 0 sums after the "
             "backward (parallel.grad_bucket_bytes, default 25000000)"),
    cl::cat(category));
static cl::opt<bool> overlapParamGather(
    "overlap-param-gather",
    cl::desc("With ZeRO 1 or 2 and no pipeline, gather the updated "
             "parameters during the next step's first forward "
             "(parallel.overlap_param_gather, default true; =false gathers "
             "them at the end of the update)"),
    cl::cat(category));
static cl::opt<int64_t> memoryBudget(
    "memory-budget",
    cl::desc("Most arena bytes per device; recompute auto fits it "
             "(parallel.memory_budget_bytes)"),
    cl::cat(category));
static cl::opt<std::string> clusterFlag(
    "cluster",
    cl::desc("Price the plan on this cluster: a preset (dgx-h100, dgx-a100) "
             "or a cluster file (braid calibrate writes one); the report's "
             "predicted_step"),
    cl::cat(category));
static cl::opt<int64_t> nodesFlag(
    "nodes", cl::desc("Nodes of the --cluster (overrides its count)"),
    cl::init(0), cl::cat(category));
static cl::opt<bool> autoFlag(
    "auto",
    cl::desc("Choose the layout (tp, pp, vpp, dp, sp, micro-batch, schedule, "
             "recompute, zero) that the cost model finds fastest among those "
             "that fit the --cluster, and compile it"),
    cl::cat(category));
static cl::opt<int64_t> topFlag(
    "top", cl::desc("With --auto: print the best K layouts (and why others "
                    "were rejected)"),
    cl::init(0), cl::cat(category));
static cl::opt<int64_t> maxCompilesFlag(
    "max-compiles",
    cl::desc("With --auto: evaluate at most N candidates (each from two "
             "proxy compiles, or one whole compile), those of the shortest "
             "rough step estimate first (0: all; default 64)"),
    cl::init(64), cl::cat(category));
static cl::opt<int64_t> searchThreadsFlag(
    "search-threads",
    cl::desc("With --auto: threads that evaluate candidates (0: one per "
             "hardware thread; the pick does not depend on it)"),
    cl::init(0), cl::cat(category));
static cl::opt<bool> exactSearchFlag(
    "exact-search",
    cl::desc("With --auto: compile every candidate whole instead of "
             "estimating it from two proxies with fewer layers (slower; the "
             "best --top K are compiled whole either way)"),
    cl::cat(category));
static cl::opt<bool> fuseMlpFlag(
    "fuse-mlp",
    cl::desc("One fused gate/up projection in SwiGLU MLPs (model.fuse_mlp)"),
    cl::cat(category));
static cl::opt<int64_t> globalBatch(
    "global-batch-size",
    cl::desc("Samples per optimizer step (parallel.global_batch_size)"),
    cl::cat(category));
static cl::opt<std::string>
    precision("precision", cl::desc("fp32 | bf16 | fp16 | fp64 (train.precision)"),
              cl::cat(category));

static cl::opt<std::string> modeFlag(
    "mode",
    cl::desc("train (a training step, the default) | generate (an inference "
             "plan: prefill and decode over a KV cache; docs/generation.md)"),
    cl::init("train"), cl::cat(category));
static cl::opt<int64_t> maxBatchFlag(
    "max-batch", cl::desc("--mode generate: sequences per call "
                          "(generate.max_batch)"),
    cl::cat(category));
static cl::opt<int64_t> maxSeqLenFlag(
    "max-seq-len",
    cl::desc("--mode generate: positions of each sequence's KV cache "
             "(generate.max_seq_len)"),
    cl::cat(category));
static cl::opt<int64_t> prefillChunkFlag(
    "prefill-chunk",
    cl::desc("--mode generate: prompt tokens per sequence per prefill call "
             "(generate.prefill_chunk)"),
    cl::cat(category));
static cl::opt<int64_t> drawCandidatesFlag(
    "draw-candidates",
    cl::desc("--mode generate under --tp: the best tokens each rank gives "
             "the draw (generate.draw_candidates; default 64)"),
    cl::cat(category));

static cl::opt<bool> scoreFlag(
    "score",
    cl::desc("--mode generate: also a scoring function, each position's "
             "log-probability of a given next token (generate.score; braid "
             "eval)"),
    cl::cat(category));

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "braidc") << message << "\n";
  return 1;
}

static int fail(llvm::Error error) {
  return fail(llvm::toString(std::move(error)));
}

/// Flushes `output` and keeps it: 0, or 1 after an error naming `path` when
/// a write failed (a full disk), which the stream would otherwise turn into
/// a fatal error at exit.
static int keepOutput(llvm::ToolOutputFile &output, llvm::StringRef path) {
  output.os().flush();
  if (output.os().has_error()) {
    std::string why = output.os().error().message();
    output.os().clear_error();
    return fail("cannot write " + path + ": " + why);
  }
  output.keep();
  return 0;
}

/// The job: the file (if any) with the command-line overrides applied.
static llvm::Expected<spec::JobSpec> loadJob() {
  spec::JobSpec job;
  if (!jobFile.empty()) {
    llvm::Expected<spec::JobSpec> loaded = loadJobFile(jobFile);
    if (!loaded)
      return loaded.takeError();
    job = std::move(*loaded);
  }
  spec::ModelSpec *model = job.mutable_model();
  if (!preset.empty() && !hfConfig.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--preset=" + preset + " and --hf-config=" + hfConfig +
            " are both given; give one of them");
  if (!preset.empty()) {
    model->clear_hf_config();
    model->set_preset(preset);
  }
  if (!hfConfig.empty()) {
    model->clear_preset();
    model->set_hf_config(hfConfig);
  }
  if (jobFile.empty() && !model->has_preset() && !model->has_hf_config())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "no model: give a job file, --preset NAME or --hf-config FILE");
  // A job file without a model source: say what it lacks.
  if (llvm::Error error = checkModelSource(
          job, jobFile, ", or give --preset NAME or --hf-config FILE"))
    return std::move(error);
  if (seqLen.getNumOccurrences())
    job.mutable_data()->set_seq_length(seqLen);
  if (microBatch.getNumOccurrences())
    job.mutable_parallel()->set_micro_batch_size(microBatch);
  if (dpFlag.getNumOccurrences())
    job.mutable_parallel()->set_dp(dpFlag);
  if (tpFlag.getNumOccurrences())
    job.mutable_parallel()->set_tp(tpFlag);
  if (ppFlag.getNumOccurrences())
    job.mutable_parallel()->set_pp(ppFlag);
  if (spFlag.getNumOccurrences())
    job.mutable_parallel()->set_sp(spFlag);
  if (scheduleFlag.getNumOccurrences())
    job.mutable_parallel()->set_schedule(scheduleFlag);
  if (stageLayersFlag.getNumOccurrences()) {
    job.mutable_parallel()->clear_stage_layers();
    for (int64_t n : stageLayersFlag)
      job.mutable_parallel()->add_stage_layers(n);
  }
  if (recomputeFlag.getNumOccurrences())
    job.mutable_parallel()->set_recompute(recomputeFlag);
  if (zeroFlag.getNumOccurrences())
    job.mutable_parallel()->set_zero(zeroFlag);
  if (gradBucketBytes.getNumOccurrences())
    job.mutable_parallel()->set_grad_bucket_bytes(gradBucketBytes);
  if (zeroBucketBytes.getNumOccurrences())
    job.mutable_parallel()->set_zero_bucket_bytes(zeroBucketBytes);
  if (overlapParamGather.getNumOccurrences())
    job.mutable_parallel()->set_overlap_param_gather(overlapParamGather);
  if (memoryBudget.getNumOccurrences())
    job.mutable_parallel()->set_memory_budget_bytes(memoryBudget);
  if (globalBatch.getNumOccurrences())
    job.mutable_parallel()->set_global_batch_size(globalBatch);
  if (fuseMlpFlag.getNumOccurrences())
    model->set_fuse_mlp(fuseMlpFlag);
  if (maxBatchFlag.getNumOccurrences())
    job.mutable_generate()->set_max_batch(maxBatchFlag);
  if (maxSeqLenFlag.getNumOccurrences())
    job.mutable_generate()->set_max_seq_len(maxSeqLenFlag);
  if (prefillChunkFlag.getNumOccurrences())
    job.mutable_generate()->set_prefill_chunk(prefillChunkFlag);
  if (drawCandidatesFlag.getNumOccurrences())
    job.mutable_generate()->set_draw_candidates(drawCandidatesFlag);
  if (scoreFlag.getNumOccurrences())
    job.mutable_generate()->set_score(scoreFlag);
  if (precision.getNumOccurrences()) {
    spec::DType dtype;
    std::string upper = llvm::StringRef(precision).upper();
    if (!spec::DType_Parse(upper, &dtype) || dtype == spec::DTYPE_UNSPECIFIED)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--precision=" + precision + " is not one of fp32, bf16, fp16, fp64");
    job.mutable_train()->set_precision(dtype);
  }
  return job;
}

/// braidc --mode generate: the inference plan, its IR or its report.
static int compileGenerate(mlir::MLIRContext &context,
                           const spec::JobSpec &job) {
  for (cl::Option *flag : {static_cast<cl::Option *>(&autoFlag),
                           static_cast<cl::Option *>(&clusterFlag)})
    if (flag->getNumOccurrences())
      return fail("--" + flag->ArgStr + " prices training steps; it does not "
                  "apply to --mode generate");
  if (compileTo.getNumOccurrences() && compileTo != "plan")
    return fail("--mode generate compiles to the plan; --compile-to=" +
                compileTo + " has no inference graph to stop at");
  llvm::Expected<GeneratePlan> compiled =
      compileGeneratePlan(context, job, dumpDir);
  if (!compiled)
    return fail(compiled.takeError());
  std::string errorMessage;
  if (emit == "plan") {
    if (absl::Status s = plan::WritePlanFile(compiled->plan, outputFile);
        !s.ok())
      return fail(std::string(s.message()));
  } else {
    auto output = mlir::openOutputFile(outputFile, &errorMessage);
    if (!output)
      return fail(errorMessage);
    if (emit == "plan-text") {
      std::string text;
      google::protobuf::TextFormat::PrintToString(compiled->plan, &text);
      output->os() << text;
    } else {
      compiled->module->print(output->os());
      output->os() << "\n";
    }
    if (int rc = keepOutput(*output, outputFile))
      return rc;
  }
  if (!reportFile.empty()) {
    auto report = mlir::openOutputFile(reportFile, &errorMessage);
    if (!report)
      return fail(errorMessage);
    llvm::json::Object json;
    json["mode"] = "generate";
    json["memory"] = planMemoryReport(*compiled->module);
    json["generation"] = generationReport(compiled->plan);
    report->os() << llvm::formatv("{0:2}", llvm::json::Value(std::move(json)))
                 << "\n";
    if (int rc = keepOutput(*report, reportFile))
      return rc;
  }
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  // --help lists braidc's options and MLIR's (--mlir-*); LLVM's code
  // generation options stay behind --help-hidden.
  for (auto &entry : cl::getRegisteredOptions()) {
    cl::Option *option = entry.getValue();
    if (!entry.getKey().starts_with("mlir-") &&
        !llvm::is_contained(option->Categories, &category))
      option->setHiddenFlag(cl::Hidden);
  }
  cl::ParseCommandLineOptions(argc, argv,
                              "braidc: compiles a Braid job to a plan\n");

  if (emit != "mlir" && emit != "plan" && emit != "plan-text")
    return fail("--emit=" + emit + " is not one of mlir, plan, plan-text");
  bool emitPlan = emit != "mlir";
  if (emitPlan && compileTo.getNumOccurrences() && compileTo != "plan")
    return fail("--emit=" + emit + " needs --compile-to=plan, not " + compileTo);
  if (emit == "plan" && outputFile == "-")
    return fail("--emit=plan writes a binary file: give it with -o FILE");
  // The files are written after the compile: one that cannot be written
  // fails now, before another output is written.
  for (const std::string &path : {std::string(outputFile),
                                   std::string(reportFile)})
    if (!path.empty() && path != "-")
      if (absl::Status s = common::CheckWritable(path); !s.ok())
        return fail(std::string(s.message()));
  llvm::Expected<Phase> phase =
      parsePhase(emitPlan ? std::string("plan") : std::string(compileTo));
  if (!phase)
    return fail(phase.takeError());
  llvm::Expected<spec::JobSpec> job = loadJob();
  if (!job)
    return fail(job.takeError());

  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry);

  if (modeFlag != "train" && modeFlag != "generate")
    return fail("--mode=" + modeFlag + " is not one of train, generate");
  for (cl::Option *flag : {static_cast<cl::Option *>(&maxBatchFlag),
                           static_cast<cl::Option *>(&maxSeqLenFlag),
                           static_cast<cl::Option *>(&prefillChunkFlag),
                           static_cast<cl::Option *>(&drawCandidatesFlag),
                           static_cast<cl::Option *>(&scoreFlag)})
    if (flag->getNumOccurrences() && modeFlag != "generate")
      return fail("--" + flag->ArgStr + " shapes an inference plan: give "
                  "--mode generate");
  if (modeFlag == "generate")
    return compileGenerate(context, *job);

  // The search's own flags.
  for (cl::Option *flag : {static_cast<cl::Option *>(&topFlag),
                           static_cast<cl::Option *>(&maxCompilesFlag),
                           static_cast<cl::Option *>(&searchThreadsFlag),
                           static_cast<cl::Option *>(&exactSearchFlag)})
    if (flag->getNumOccurrences() && !autoFlag)
      return fail("--" + flag->ArgStr + " tunes the layout search: give --auto");
  if (topFlag < 0)
    return fail("--top=" + llvm::Twine(topFlag) +
                " must be at least 0 (layouts to list)");
  if (searchThreadsFlag < 0)
    return fail("--search-threads=" + llvm::Twine(searchThreadsFlag) +
                " must be at least 0 (0: one per hardware thread)");
  if (maxCompilesFlag < 0)
    return fail("--max-compiles=" + llvm::Twine(maxCompilesFlag) +
                " must be at least 0 (0: evaluate every candidate)");
  if (nodesFlag.getNumOccurrences() && nodesFlag < 1)
    return fail("--nodes=" + llvm::Twine(nodesFlag) +
                " must be at least 1 (the cluster's nodes)");
  if (autoFlag) {
    if (clusterFlag.empty())
      return fail("--auto plans for a cluster: give --cluster PRESET|FILE");
    if (!emitPlan)
      return fail("--auto compiles the layout it picks: give --emit=plan");
    llvm::Expected<spec::Cluster> cluster = loadCluster(clusterFlag, nodesFlag);
    if (!cluster)
      return fail(cluster.takeError());
    SearchOptions search;
    search.cluster = *cluster;
    search.maxCompiles = maxCompilesFlag;
    search.threads = searchThreadsFlag;
    search.proxies = !exactSearchFlag;
    search.confirm = std::max<int64_t>(topFlag, 1);
    llvm::Expected<std::vector<Candidate>> candidates =
        searchLayouts(*job, search, context);
    if (!candidates)
      return fail(candidates.takeError());
    llvm::raw_ostream &os = outputFile == "-" ? llvm::errs() : llvm::outs();
    if (topFlag > 0)
      os << candidateTable(*candidates, topFlag);
    if (candidates->empty() || !candidates->front().feasible) {
      const Candidate *least = nullptr;
      for (const Candidate &c : *candidates)
        if (c.peakBytes > 0 && (!least || c.peakBytes < least->peakBytes))
          least = &c;
      if (!least)
        return fail("no layout of the model fits " + cluster->name() +
                    ": " + (candidates->empty()
                                ? std::string("none was found")
                                : candidates->front().rejected));
      int64_t compiled = llvm::count_if(
          *candidates, [](const Candidate &c) { return c.peakBytes > 0; });
      bool capped = llvm::any_of(*candidates, [](const Candidate &c) {
        return !c.compiled && llvm::StringRef(c.rejected).starts_with(
                                  "not compiled: --auto compiles at most");
      });
      // Sizes in binary units with the exact bytes beside them, as the
      // cluster file's memory_bytes and a memory budget are written.
      auto exact = [](int64_t bytes) {
        return common::FormatBytes(bytes) + " (" + std::to_string(bytes) +
               " B)";
      };
      if (capped)
        return fail(llvm::formatv(
                        "none of the {0} layouts compiled (--max-compiles) "
                        "fits {1} x {2} devices of {3}; the least memory "
                        "among them is {4} per device ({5}): raise "
                        "--max-compiles to try more of the {6} candidates",
                        compiled, cluster->nodes(), cluster->devices_per_node(),
                        exact(cluster->memory_bytes()), exact(least->peakBytes),
                        least->layout, candidates->size())
                        .str());
      return fail(llvm::formatv(
                      "no layout fits {0} x {1} devices of {2}: the least "
                      "memory any layout needs is {3} per device ({4})",
                      cluster->nodes(), cluster->devices_per_node(),
                      exact(cluster->memory_bytes()), exact(least->peakBytes),
                      least->layout)
                      .str());
    }
    const Candidate &best = candidates->front();
    os << "auto: " << best.layout << ", predicted "
       << llvm::formatv("{0:F4}", best.prediction.stepTime) << " s per step, "
       << common::FormatBytes(best.peakBytes) << " per device (of "
       << llvm::count_if(*candidates,
                         [](const Candidate &c) { return c.feasible; })
       << " layouts that fit, " << candidates->size() << " considered)\n";
    // How far the proxies' estimates were from the whole compiles.
    int64_t checked = 0, peakOff = 0;
    double stepOff = 0;
    std::string worst;
    for (const Candidate &c : *candidates)
      if (c.compiled && c.estimatedPeakBytes > 0) {
        ++checked;
        if (worst.empty() ||
            std::abs(c.peakBytes - c.estimatedPeakBytes) > peakOff) {
          peakOff = std::abs(c.peakBytes - c.estimatedPeakBytes);
          worst = " (" + c.layout + ")";
        }
        stepOff = std::max(stepOff, std::abs(c.prediction.stepTime -
                                             c.estimatedStepTime) /
                                        c.prediction.stepTime);
      }
    if (checked > 0)
      os << "estimates: " << checked
         << " of the best compiled whole; their peak differs from the "
            "proxies' estimate by at most "
         << common::FormatBytes(peakOff) << worst
         << ", their step time by at most "
         << llvm::formatv("{0:P3}", stepOff) << "\n";
    *job->mutable_parallel() = best.parallel;
  }

  llvm::Expected<ModelConfig> config = resolveModel(*job);
  if (!config)
    return fail(config.takeError());
  llvm::Expected<ParallelConfig> parallel = resolveParallel(*job, *config);
  if (!parallel)
    return fail(parallel.takeError());
  // The whole job is checked before any IR is built.
  llvm::Expected<TrainConfig> train = resolveTrain(*job);
  if (!train)
    return fail(train.takeError());

  mlir::OwningOpRef<mlir::ModuleOp> module =
      buildForwardModule(context, *config);

  // The report describes the model graph; a clone keeps it when the phases
  // lower the module to a plan.
  mlir::OwningOpRef<mlir::ModuleOp> graph = module->clone();

  CompileOptions options;
  options.compileTo = *phase;
  options.train = *train;
  options.parallel = *parallel;
  options.dumpIrDir = dumpDir;
  if (llvm::Error error = runPhases(*module, options))
    return fail(std::move(error));
  // The model graph of the report is the model phase's: with LoRA, its
  // adapters too (model-lora).
  if (config->lora.enabled) {
    CompileOptions modelPhase;
    modelPhase.compileTo = Phase::Model;
    if (llvm::Error error = runPhases(*graph, modelPhase))
      return fail(std::move(error));
  }

  if (!clusterFlag.empty() && !emitPlan)
    return fail("--cluster prices a plan: give --emit=plan (or plan-text)");
  if (nodesFlag.getNumOccurrences() && clusterFlag.empty())
    return fail("--nodes=" + llvm::Twine(nodesFlag) + " needs --cluster");
  std::optional<llvm::json::Object> predicted;
  std::string errorMessage;
  if (emitPlan) {
    llvm::Expected<plan::Plan> exported = exportPlan(*module);
    if (!exported)
      return fail(exported.takeError());
    exported->mutable_training()->MergeFrom(
        trainingSettings(*config, *train, *parallel, job->data()));
    if (!clusterFlag.empty()) {
      llvm::Expected<spec::Cluster> cluster = loadCluster(clusterFlag, nodesFlag);
      if (!cluster)
        return fail(cluster.takeError());
      llvm::Expected<StepPrediction> prediction = predictStep(*exported, *cluster);
      if (!prediction)
        return fail(prediction.takeError());
      exported->mutable_training()->set_predicted_step_time_s(
          prediction->stepTime);
      exported->mutable_training()->set_predicted_cluster(cluster->name());
      FlopCount flops = countFlops(*graph);
      double perStep = flops.trainingPerToken() * double(config->microBatchSize) *
                       double(config->seqLength) *
                       double(parallel->microBatches) * double(parallel->dp);
      predicted = predictionReport(*prediction, *cluster, *exported, perStep);
      // braid-run's MFU: the model's FLOPs of a step over the step time and
      // the devices' peak in the plan's dtype (bf16/fp16 parameters: the
      // low-precision peak), as the report's prediction counts them.
      bool low = false;
      for (const plan::Buffer &b : exported->buffers())
        low = low || (b.role() == plan::PARAMETER &&
                      (b.dtype() == plan::BF16 || b.dtype() == plan::F16));
      exported->mutable_training()->set_device_peak_flops(
          low ? cluster->peak_flops_bf16() : cluster->peak_flops_fp32());
      exported->mutable_training()->set_model_flops_per_step(perStep);
    }
    if (emit == "plan") {
      if (absl::Status s = plan::WritePlanFile(*exported, outputFile); !s.ok())
        return fail(std::string(s.message()));
    } else {
      std::string text;
      google::protobuf::TextFormat::PrintToString(*exported, &text);
      auto output = mlir::openOutputFile(outputFile, &errorMessage);
      if (!output)
        return fail(errorMessage);
      output->os() << text;
      if (int rc = keepOutput(*output, outputFile))
        return rc;
    }
  } else {
    auto output = mlir::openOutputFile(outputFile, &errorMessage);
    if (!output)
      return fail(errorMessage);
    module->print(output->os());
    output->os() << "\n";
    if (int rc = keepOutput(*output, outputFile))
      return rc;
  }

  if (!reportFile.empty()) {
    auto report = mlir::openOutputFile(reportFile, &errorMessage);
    if (!report)
      return fail(errorMessage);
    llvm::json::Value json = buildReport(*graph, *config);
    llvm::json::Object recompute =
        recomputeReport(*module, parallel->microBatches);
    if (!recompute.empty())
      json.getAsObject()->try_emplace("recompute", std::move(recompute));
    if ((*module)->hasAttr("plan.arena_bytes")) {
      json.getAsObject()->try_emplace("memory", planMemoryReport(*module));
      json.getAsObject()->try_emplace(
          "communication_bytes_per_step",
          planCommunicationReport(*module, parallel->microBatches));
      llvm::json::Object pipeline =
          planPipelineReport(*module, parallel->microBatches);
      if (!pipeline.empty())
        json.getAsObject()->try_emplace("pipeline", std::move(pipeline));
    }
    if (predicted)
      json.getAsObject()->try_emplace("predicted_step", std::move(*predicted));
    report->os() << llvm::formatv("{0:2}", std::move(json)) << "\n";
    if (int rc = keepOutput(*report, reportFile))
      return rc;
  }
  return 0;
}
