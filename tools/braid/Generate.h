//===- Generate.h - braid generate ------------------------------*- C++ -*-===//

#ifndef BRAID_TOOLS_BRAID_GENERATE_H
#define BRAID_TOOLS_BRAID_GENERATE_H

/// `braid generate MODEL ...` (argv[1] is "generate"): compiles the model's
/// inference plan and continues the prompts; the exit status.
int generateCommand(int argc, char **argv);

/// `braid chat MODEL ...`: a conversation read from standard input, one
/// turn per line, kept in the KV cache between turns; the exit status.
int chatCommand(int argc, char **argv);

/// The usage lines of `braid generate` and `braid chat`.
extern const char kGenerateUsage[];
extern const char kChatUsage[];

#endif // BRAID_TOOLS_BRAID_GENERATE_H
