//===- Eval.h - braid eval --------------------------------------*- C++ -*-===//

#ifndef BRAID_TOOLS_BRAID_EVAL_H
#define BRAID_TOOLS_BRAID_EVAL_H

/// `braid eval MODEL --task T --data DIR ...` (argv[1] is "eval"): the
/// model's accuracy on benchmarks in their published layouts; the exit
/// status.
int evalCommand(int argc, char **argv);

/// The usage lines of `braid eval`.
extern const char kEvalUsage[];

#endif // BRAID_TOOLS_BRAID_EVAL_H
