//===- Generate.h - Compiling an inference plan -----------------*- C++ -*-===//
//
// braidc --mode generate and braid generate: a job's model compiled to an
// inference plan (prefill and decode over a KV cache; plan.proto's
// Generation) instead of a training step.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_GENERATE_H
#define BRAID_COMPILER_GENERATE_H

#include "frontends/ModelBuilder.h"
#include "frontends/spec/braid_spec.pb.h"
#include "runtime/plan/plan.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <string>

namespace braid {

/// The shapes of the job's inference plan: its `generate` section, each
/// field defaulted (max_batch 1, max_seq_len the model's, prefill_chunk
/// min(max_seq_len, 512)), checked against the model (checkGenerateConfig).
llvm::Expected<GenerateConfig> resolveGenerate(const spec::JobSpec &job,
                                               const ModelConfig &model);

/// A compiled inference plan, and the module it was exported from (for the
/// report).
struct GeneratePlan {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  plan::Plan plan;
};

/// Compiles the job's model to an inference plan on one rank: the model's
/// graph (buildGenerateModule), plan-lower, plan-memory and plan-verify,
/// exported with the training settings braid-run reads (the model, the
/// seed). A layout other than one rank is refused, naming it. With
/// `dumpIrDir`, the IR before and after each pass goes there.
llvm::Expected<GeneratePlan> compileGeneratePlan(mlir::MLIRContext &context,
                                                 const spec::JobSpec &job,
                                                 const std::string &dumpIrDir = {});

/// The report's `generation` section of an inference plan: its shapes, the
/// KV cache (2 · layers · max_batch · max_seq_len · kv_heads · head_dim ·
/// dtype bytes, each factor stated), the parameters' bytes, and the bytes
/// one decode call reads at least (every parameter, and every sequence's
/// cache when full).
llvm::json::Object generationReport(const plan::Plan &plan);

} // namespace braid

#endif // BRAID_COMPILER_GENERATE_H
