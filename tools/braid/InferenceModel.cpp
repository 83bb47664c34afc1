//===- InferenceModel.cpp - A model opened for inference ------------------===//

#include "tools/braid/InferenceModel.h"
#include "tools/braid/ChildProcess.h"

#include "compiler/Registration.h"
#include "frontends/HFConfig.h"
#include "runtime/ckpt/Checkpoint.h"
#include "runtime/ckpt/ModelIdentity.h"
#include "runtime/exec/Devices.h"

#include "mlir/IR/DialectRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace braid::tool {

int fail(const std::string &message, int code) {
  llvm::errs() << "braid: error: " << message << "\n";
  return code;
}

llvm::Error integerFlag(const std::string &flag, const std::string &value,
                        int64_t lo, int64_t &out) {
  if (!llvm::to_integer(value, out) || out < lo)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   flag + " '" + value +
                                       "': expected an integer >= " +
                                       std::to_string(lo));
  return llvm::Error::success();
}

llvm::Error numberFlag(const std::string &flag, const std::string &value,
                       double &out) {
  // to_float takes "" for 0.
  if (llvm::StringRef(value).trim().empty() || !llvm::to_float(value, out))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   flag + " '" + value +
                                       "': expected a number");
  return llvm::Error::success();
}

llvm::Error modelFlag(ModelFlags &f, const std::string &flag,
                      const std::string &value, bool &taken) {
  taken = true;
  if (flag == "--tokenizer")
    f.tokenizer = value;
  else if (flag == "--device")
    f.device = value;
  else if (flag == "--precision")
    f.precision = value;
  else if (flag == "--max-batch")
    return integerFlag(flag, value, 1, f.maxBatch);
  else if (flag == "--max-seq-len")
    return integerFlag(flag, value, 2, f.maxSeqLen);
  else if (flag == "--prefill-chunk")
    return integerFlag(flag, value, 1, f.prefillChunk);
  else if (flag == "--tp")
    return integerFlag(flag, value, 1, f.tp);
  else
    taken = false;
  return llvm::Error::success();
}

/// The model spec of MODEL: a Braid checkpoint's manifest, or a Hugging
/// Face directory's config.json.
llvm::Expected<spec::ModelSpec> modelOf(const std::string &model,
                                        bool &braidCheckpoint) {
  auto error = [](const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  if (!llvm::sys::fs::is_directory(model))
    return error(model + " is not a directory (a Hugging Face model "
                         "directory or a Braid checkpoint)");
  absl::StatusOr<std::string> dir = ckpt::ResolveCheckpoint(model);
  braidCheckpoint = dir.ok();
  if (braidCheckpoint) {
    absl::StatusOr<ckpt::Manifest> manifest = ckpt::ReadManifest(*dir);
    if (!manifest.ok())
      return error(std::string(manifest.status().message()));
    if (manifest->model_spec().empty())
      return error("the checkpoint " + *dir +
                   " does not record its model (an older writer's)");
    absl::StatusOr<spec::ModelSpec> spec =
        ckpt::ParseModelSpec(manifest->model_spec(), "the manifest's model");
    if (!spec.ok())
      return error(std::string(spec.status().message()));
    return *spec;
  }
  llvm::SmallString<256> config(model);
  llvm::sys::path::append(config, "config.json");
  if (!llvm::sys::fs::exists(config))
    return error(model + " has neither a Braid checkpoint's manifest nor a "
                         "Hugging Face config.json");
  return importHFConfig(config);
}

/// Loads the tokenizer: --tokenizer (a directory, or "bytes": the byte
/// tokenizer the demo trains with), else the model directory's. Without
/// one, an error when `required`.
llvm::Error loadTokenizer(const ModelFlags &f, bool braidCheckpoint, bool required,
                          std::optional<data::ModelTokenizer> &tokenizer,
                          const std::string &alternative) {
  auto error = [](const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  std::string dir =
      !f.tokenizer.empty() ? f.tokenizer : (braidCheckpoint ? "" : f.model);
  if (f.tokenizer == "bytes") {
    tokenizer.emplace();
    tokenizer->tokenizer = std::make_unique<data::ByteTokenizer>();
    tokenizer->eosId = data::ByteTokenizer::kEodId;
    tokenizer->eosIds = {data::ByteTokenizer::kEodId};
    tokenizer->source = "bytes";
  } else if (!dir.empty()) {
    absl::StatusOr<data::ModelTokenizer> loaded = data::LoadModelTokenizer(dir);
    if (loaded.ok())
      tokenizer.emplace(std::move(*loaded));
    else if (!f.tokenizer.empty())
      return error("--tokenizer " + f.tokenizer + ": " +
                   std::string(loaded.status().message()) +
                   " (give a tokenizer's directory, or bytes)");
    else if (required)
      return error(std::string(loaded.status().message()));
  }
  if (!tokenizer && required)
    return error(f.model + " comes without a tokenizer: give --tokenizer DIR "
                           "(or bytes)" +
                 (alternative.empty() ? "" : ", or " + alternative));
  return llvm::Error::success();
}

/// Compiles MODEL's inference plan for `defaultBatch` sequences (unless
/// --max-batch) and loads its weights on --device.
llvm::Expected<Opened>
openGenerator(const ModelFlags &f, const spec::ModelSpec &model,
              int64_t defaultBatch,
              const std::optional<data::ModelTokenizer> &tokenizer,
              bool compileOnly) {
  auto error = [](const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  spec::JobSpec job;
  *job.mutable_model() = model;
  if (!f.precision.empty()) {
    spec::DType dtype;
    if (!spec::DType_Parse(llvm::StringRef(f.precision).upper(), &dtype) ||
        dtype == spec::DTYPE_UNSPECIFIED || dtype == spec::FP64)
      return error("--precision " + f.precision +
                   " is not one of fp32, bf16, fp16");
    job.mutable_train()->set_precision(dtype);
  }
  if (f.tp > 1)
    job.mutable_parallel()->set_tp(f.tp);
  spec::GenerateSpec &g = *job.mutable_generate();
  g.set_max_batch(f.maxBatch > 0 ? f.maxBatch : defaultBatch);
  if (f.maxSeqLen > 0)
    g.set_max_seq_len(f.maxSeqLen);
  if (f.prefillChunk > 0)
    g.set_prefill_chunk(f.prefillChunk);
  if (f.score)
    g.set_score(true);
  // Only ids the tokenizer decodes are drawn (the demo's byte tokenizer has
  // 257 of the model's 512).
  if (tokenizer && model.has_vocab_size() &&
      tokenizer->tokenizer->vocabSize() < model.vocab_size())
    g.set_vocab_size(tokenizer->tokenizer->vocabSize());
  Opened out;
  mlir::DialectRegistry registry;
  registerDialects(registry);
  out.context = std::make_unique<mlir::MLIRContext>(registry);
  llvm::Expected<GeneratePlan> compiled = compileGeneratePlan(*out.context, job);
  if (!compiled)
    return compiled.takeError();
  out.compiled = std::move(*compiled);
  if (compileOnly)
    return out;
  exec::GeneratorOptions options;
  options.weights = f.model;
  options.device = f.device;
  absl::StatusOr<exec::BackendFactory> backend = exec::BackendFor(f.device);
  if (!backend.ok())
    return error(std::string(backend.status().message()));
  options.backend = *backend;
  if (f.tp > 1) {
#ifdef BRAID_HAVE_MPI
    absl::StatusOr<std::unique_ptr<comm::MpiCommunicator>> created =
        comm::MpiCommunicator::Create(out.compiled.plan);
    if (!created.ok())
      return error(std::string(created.status().message()));
    out.comm = std::move(*created);
    options.comm = out.comm.get();
    out.writer = out.comm->Rank() == 0;
#else
    return error("--tp needs MPI, and this braid was built without it "
                 "(BRAID_WITH_MPI=OFF)");
#endif
  }
  absl::StatusOr<std::unique_ptr<exec::Generator>> generator =
      exec::Generator::Create(out.compiled.plan, options);
  if (!generator.ok())
    return error(std::string(generator.status().message()));
  out.generator = std::move(*generator);
  return out;
}

/// braid generate --tp N outside an MPI job: the same command on N ranks,
/// started by mpirun on this machine; mpirun's exit status.
int launchTensorParallel(const ModelFlags &f, int argc, char **argv) {
  llvm::ErrorOr<std::string> mpirun = llvm::sys::findProgramByName("mpirun");
  if (!mpirun)
    return fail("--tp " + std::to_string(f.tp) + " runs " +
                std::to_string(f.tp) + " ranks and mpirun is not on the PATH "
                "(scripts/setup.sh installs Open MPI)");
  std::string self = llvm::sys::fs::getMainExecutable(
      argv[0], reinterpret_cast<void *>(&launchTensorParallel));
  std::vector<std::string> args = {*mpirun, "-np", std::to_string(f.tp),
                                   "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0)
    args.push_back("--allow-run-as-root");
  args.push_back(self);
  args.insert(args.end(), argv + 1, argv + argc);
  llvm::Expected<tools::ChildExit> ended = tools::RunChild(args);
  if (!ended)
    return fail(llvm::toString(ended.takeError()));
  return ended->code;
}

std::optional<int>
runOnRanks(const ModelFlags &f, const spec::ModelSpec &model,
           int64_t defaultBatch,
           const std::optional<data::ModelTokenizer> &tokenizer, int argc,
           char **argv) {
#ifdef BRAID_HAVE_MPI
  if (f.tp > 1 && !comm::LaunchedByMpi()) {
    llvm::Expected<Opened> checked =
        openGenerator(f, model, defaultBatch, tokenizer, /*compileOnly=*/true);
    if (!checked)
      return fail(llvm::toString(checked.takeError()));
    return launchTensorParallel(f, argc, argv);
  }
#endif
  return std::nullopt;
}

} // namespace braid::tool
