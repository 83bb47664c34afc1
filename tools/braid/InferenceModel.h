//===- InferenceModel.h - A model opened for inference ----------*- C++ -*-===//
//
// What braid generate, braid chat and braid eval share: MODEL (a Hugging
// Face directory or a Braid checkpoint) read, its tokenizer loaded, its
// inference plan compiled in-process (compiler/Generate.h) and its
// exec::Generator created, on one rank or, with --tp, on each rank of an
// MPI job that the command starts itself.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TOOLS_BRAID_INFERENCEMODEL_H
#define BRAID_TOOLS_BRAID_INFERENCEMODEL_H

#include "compiler/Generate.h"
#include "frontends/spec/braid_spec.pb.h"
#include "runtime/data/ModelTokenizer.h"
#include "runtime/exec/Generate.h"
#ifdef BRAID_HAVE_MPI
#include "runtime/comm/MpiCommunicator.h"
#endif

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace braid::tool {

/// Prints "braid: error: MESSAGE" and returns `code`.
int fail(const std::string &message, int code = 1);

/// The flags that say which model runs, and how.
struct ModelFlags {
  std::string model, tokenizer;
  std::string device = "cpu", precision;
  int64_t maxBatch = 0, maxSeqLen = 0, prefillChunk = 0;
  int64_t tp = 1;
  /// Whether the plan also scores (generate.score: braid eval).
  bool score = false;
};

/// A flag's value as an integer (decimal, or 0x hexadecimal) of at least
/// `lo`; an error naming the flag otherwise.
llvm::Error integerFlag(const std::string &flag, const std::string &value,
                        int64_t lo, int64_t &out);

/// A flag's value as a number (an empty one is none, not 0); an error naming
/// the flag otherwise.
llvm::Error numberFlag(const std::string &flag, const std::string &value,
                       double &out);

/// Reads `flag` `value` into `f` when it is one of ModelFlags' value flags
/// (--tokenizer, --device, --precision, --max-batch, --max-seq-len,
/// --prefill-chunk, --tp) and sets `taken`; otherwise leaves both alone.
llvm::Error modelFlag(ModelFlags &f, const std::string &flag,
                      const std::string &value, bool &taken);

/// The model spec of MODEL: a Braid checkpoint's manifest, or a Hugging
/// Face directory's config.json. `braidCheckpoint` says which.
llvm::Expected<spec::ModelSpec> modelOf(const std::string &model,
                                        bool &braidCheckpoint);

/// Loads the tokenizer: --tokenizer (a directory, or "bytes": the byte
/// tokenizer the demo trains with), else the model directory's. Without
/// one, an error when `required`, which names `alternative` (what the
/// command takes instead of text, if anything) beside --tokenizer.
llvm::Error loadTokenizer(const ModelFlags &f, bool braidCheckpoint,
                          bool required,
                          std::optional<data::ModelTokenizer> &tokenizer,
                          const std::string &alternative = "");

/// The compiled inference plan and its generator, weights loaded.
struct Opened {
  std::unique_ptr<mlir::MLIRContext> context;
  GeneratePlan compiled;
#ifdef BRAID_HAVE_MPI
  /// With --tp: this rank's place among the job's (mpirun's).
  std::unique_ptr<comm::MpiCommunicator> comm;
#endif
  std::unique_ptr<exec::Generator> generator;
  /// Whether this rank prints (rank 0, or the only one).
  bool writer = true;
};

/// Compiles MODEL's inference plan for `defaultBatch` sequences (unless
/// --max-batch) and loads its weights on --device; with `compileOnly`, only
/// compiles it.
llvm::Expected<Opened>
openGenerator(const ModelFlags &f, const spec::ModelSpec &model,
              int64_t defaultBatch,
              const std::optional<data::ModelTokenizer> &tokenizer,
              bool compileOnly = false);

/// The command of argv run on --tp ranks outside an MPI job: the same
/// command started by mpirun on this machine; mpirun's exit status.
int launchTensorParallel(const ModelFlags &f, int argc, char **argv);

/// --tp outside an MPI job: the plan compiled here first (so that a model
/// that cannot be split fails once), then the command started on the
/// ranks; the exit status. std::nullopt when this process runs the model
/// itself (one rank, or a rank of the job).
std::optional<int>
runOnRanks(const ModelFlags &f, const spec::ModelSpec &model,
           int64_t defaultBatch,
           const std::optional<data::ModelTokenizer> &tokenizer, int argc,
           char **argv);

} // namespace braid::tool

#endif // BRAID_TOOLS_BRAID_INFERENCEMODEL_H
