//===- GenerateCommand.h - braid-run on an inference plan --------*- C++ -*-===//
//
// braid-run PLAN for a plan of braidc --mode generate: token ids in and
// out, with no tokenizer and no compiler, so that a GPU node with only
// braid-run generates (and is measured) as the CPU does:
//
//   braid-run gen.plan [--init-from DIR] [--device cpu|cuda]
//       --prompt-ids 1,2,3 [--prompt-ids ...] [--max-new-tokens N]
//       [--greedy | --temperature T --top-k K --top-p P] [--seed S]
//       [--beam-width W [--length-penalty A]] [--eos-id ID]...
//       [--logits-out FILE] [--stats]
//   braid-run score.plan [--init-from DIR] [--device cpu|cuda]
//       --score FILE.jsonl [--no-shared-prefixes] [--stats]
//
// Each prompt's ids and its completion's print on one line. --score (a
// plan compiled with --score) reads one request a line, {"context_ids":
// [...], "continuation_ids": [...]} (braid eval --log-samples writes them),
// and prints each one's {"logprob": L, "greedy": G} in the file's order:
// braid eval's log-likelihood scoring on a node without the compiler or
// the tokenizer. A plan split
// over tensor parallelism runs as `mpirun -np N braid-run gen.plan ...`,
// rank 0 printing. `braid generate` (tools/braid) adds tokenizers and
// compiles the plan itself.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_GENERATECOMMAND_H
#define BRAID_RUNTIME_EXEC_GENERATECOMMAND_H

#include "runtime/exec/Trainer.h"
#include "runtime/plan/plan.pb.h"

#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace braid::exec {

/// The flags of braid-run on an inference plan (the file comment).
extern const char kGenerateFlagsUsage[];

/// Runs the inference plan `plan` as `args` (the flags after the plan)
/// say, with the backends `backendFor` makes per device ("cpu": null).
/// Prints the ids to `out`, errors to `err`; returns the exit status (2
/// for a bad flag).
/// `comm`: the job's other ranks (a plan split over tp, under mpirun), or
/// null; rank 0 alone prints.
int RunGenerateCommand(
    const plan::Plan &plan, const std::vector<std::string> &args,
    const std::function<absl::StatusOr<BackendFactory>(const std::string &)>
        &backendFor,
    Communicator *comm, std::ostream &out, std::ostream &err);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_GENERATECOMMAND_H
