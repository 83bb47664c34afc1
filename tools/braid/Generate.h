//===- Generate.h - braid generate ------------------------------*- C++ -*-===//

#ifndef BRAID_TOOLS_BRAID_GENERATE_H
#define BRAID_TOOLS_BRAID_GENERATE_H

/// `braid generate MODEL ...` (argv[1] is "generate"): compiles the model's
/// inference plan and continues the prompts; the exit status.
int generateCommand(int argc, char **argv);

/// The usage lines of `braid generate`.
extern const char kGenerateUsage[];

#endif // BRAID_TOOLS_BRAID_GENERATE_H
