//===- Compile.h - The phases of a compile ----------------------*- C++ -*-===//

#ifndef BRAID_COMPILER_COMPILE_H
#define BRAID_COMPILER_COMPILE_H

#include "frontends/ParallelConfig.h"
#include "frontends/TrainConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace braid {

/// The phases a compile can stop after (`braidc --compile-to=PHASE`), in
/// order. Each ends with the verify pass that states its contract.
enum class Phase {
  Model,    ///< the forward graph from the frontend, verified
  Autodiff,  ///< forward and backward: @train_step returns loss and gradients
  Optimizer, ///< + clipping and AdamW: @train_step returns the new state
  Shard,     ///< the step of one rank of the mesh, with its collectives
  Partition, ///< its ops assigned to pipeline stages
  Recompute, ///< saved activations dropped and recomputed in backward
  Plan,      ///< the `plan` program, every buffer placed in the arena
};

/// The phase named `name`, or an error that lists the known phases.
llvm::Expected<Phase> parsePhase(llvm::StringRef name);
std::vector<std::string> phaseNames();

struct CompileOptions {
  Phase compileTo = Phase::Model;
  /// When not empty, the IR is written to this directory before the first
  /// pass (00-frontend.mlir) and after every pass (NN-<pass flag>.mlir).
  std::string dumpIrDir;
  /// The optimizer's settings (the job's `train` section).
  TrainConfig train;
  /// The mesh (the job's `parallel` section).
  ParallelConfig parallel;
  /// With parallel.recompute = auto: the model-recompute level of each layer
  /// (set by the search in runPhases).
  std::vector<int64_t> recomputeLevels;
  /// Run MLIR's verifier after every pass (the passes' own checks, and
  /// plan-verify at the end, run either way). The layout search turns it
  /// off for the proxies it compiles only to estimate.
  bool verifyEachPass = true;
  /// The module is an inference graph (buildGenerateModule): of the phases
  /// only the plan's passes run (plan-lower, plan-memory, plan-verify).
  bool generate = false;
};

/// Runs the passes of every phase up to `options.compileTo` on `module`.
/// Diagnostics go to the context's handler; the returned error says which
/// phase failed.
///
/// With `parallel.recompute = auto` the recompute phase is a search: the
/// plan is compiled with full recompute and with none (each rank's arena
/// measured by plan-memory), then with the per-layer levels of
/// model-recompute that cost the fewest recompute FLOPs while every rank's
/// predicted growth over full recompute fits the budget (a multiple-choice
/// knapsack per rank), and tightened until the compiled arenas fit. A
/// budget that full recompute does not meet is an error that states what
/// full recompute needs.
llvm::Error runPhases(mlir::ModuleOp module, const CompileOptions &options);

} // namespace braid

#endif // BRAID_COMPILER_COMPILE_H
