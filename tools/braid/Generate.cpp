//===- Generate.cpp - braid generate --------------------------------------===//
//
// MODEL is a Hugging Face directory (config.json, safetensors, a tokenizer)
// or a Braid checkpoint (its manifest records the model). The model's
// inference plan is compiled in-process (compiler/Generate.h) and run by
// exec::Generator; tokens are printed as they are drawn.
//
//===----------------------------------------------------------------------===//

#include "tools/braid/Generate.h"

#include "compiler/Generate.h"
#include "compiler/Registration.h"
#include "frontends/HFConfig.h"
#include "runtime/ckpt/Checkpoint.h"
#include "runtime/ckpt/ModelIdentity.h"
#include "runtime/data/ChatTemplate.h"
#include "runtime/data/ModelTokenizer.h"
#include "runtime/exec/Devices.h"
#ifdef BRAID_HAVE_MPI
#include "runtime/comm/MpiCommunicator.h"
#endif
#include "runtime/exec/Generate.h"

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>

#include <unistd.h>

using namespace braid;

const char kChatUsage[] =
    "       braid chat MODEL [--template llama2|alpaca|plain] "
    "[--tokenizer DIR|bytes] [--max-new-tokens N]\n"
    "           [--greedy | --temperature T --top-k K --top-p P] [--seed S] "
    "[--max-seq-len S] [--device cpu|cuda] [--print-ids]\n";

const char kGenerateUsage[] =
    "       braid generate MODEL (--prompt TEXT | --prompts FILE.jsonl | "
    "--prompt-ids 1,2,3)\n"
    "           [--max-new-tokens N] [--greedy | --temperature T --top-k K "
    "--top-p P] [--seed S]\n"
    "           [--stop STRING]... [--tokenizer DIR|bytes] [--print-ids] "
    "[-o OUT.jsonl]\n"
    "           [--device cpu|cuda] [--precision fp32|bf16|fp16] "
    "[--max-batch B] [--max-seq-len S] [--prefill-chunk P]\n"
    "           [--tp N] [--beam-width W [--length-penalty A]] "
    "[--eos-id ID]... [--logits-out FILE] [--stats]\n";

namespace {

int fail(const std::string &message, int code = 1) {
  llvm::errs() << "braid: error: " << message << "\n";
  return code;
}

/// `text` with each ill-formed UTF-8 sequence (a byte that starts none, or
/// the maximal prefix of one that is cut short) replaced by U+FFFD, as
/// Unicode recommends and Python's "replace" does: a completion cut at any
/// token is still text JSON can hold.
std::string validUtf8(const std::string &text) {
  std::string out;
  const auto *s = reinterpret_cast<const unsigned char *>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    int length = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2
                 : c >= 0xE0 && c <= 0xEF            ? 3
                 : c >= 0xF0 && c <= 0xF4            ? 4
                                                     : 0;
    size_t j = i + 1;
    for (int k = 1; k < length && j < n; ++k, ++j) {
      // The second byte's range is narrower after E0, ED, F0 and F4.
      unsigned char lo = 0x80, hi = 0xBF;
      if (k == 1) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
      }
      if (s[j] < lo || s[j] > hi)
        break;
    }
    if (length > 0 && int(j - i) == length)
      out.append(text, i, j - i);
    else
      out += "\xEF\xBF\xBD"; // U+FFFD
    i = length > 0 ? j : i + 1;
  }
  return out;
}

/// Where `text` can be cut for printing as it grows: before a last
/// character whose bytes have not all come yet (a lead byte and valid
/// continuations, fewer than it needs), else its end.
size_t printableEnd(const std::string &text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80)
      continue; // a continuation: look further back for its lead
    size_t need = c >= 0xF0 && c <= 0xF4   ? 4
                  : c >= 0xE0 && c <= 0xEF ? 3
                  : c >= 0xC2 && c <= 0xDF ? 2
                                           : 1;
    return need > back ? n - back : n;
  }
  return n;
}

/// Prints what `text` (the decoded completion so far) adds past `shown`
/// bytes, as valid UTF-8, holding back a character still arriving;
/// `final`: all of it.
void printGrowing(const std::string &text, size_t &shown, bool final) {
  size_t end = final ? text.size() : printableEnd(text);
  if (end > shown) {
    std::cout << validUtf8(text.substr(shown, end - shown)) << std::flush;
    shown = end;
  }
}

/// A JSON string literal of `text` (UTF-8, ill-formed sequences replaced;
/// control characters escaped).
std::string jsonString(const std::string &raw) {
  std::string text = validUtf8(raw);
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        char buf[8];
        snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += char(c);
      }
    }
  }
  return out + "\"";
}

/// One prompt: its text (empty for ids given as ids) and its ids.
struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
};

/// The flags of braid generate.
struct Flags {
  std::string model, prompt, promptsFile, tokenizer, output;
  /// --prompt-ids, once per prompt.
  std::vector<std::string> promptIds;
  std::string device = "cpu", precision, logitsOut;
  std::string chatTemplate = "plain"; ///< braid chat --template
  std::vector<std::string> stops;
  /// --eos-id: the ids that end a sequence, instead of the tokenizer's.
  std::vector<int32_t> eosIds;
  int64_t maxNewTokens = 64, maxBatch = 0, maxSeqLen = 0, prefillChunk = 0;
  int64_t tp = 1, beamWidth = 1;
  double lengthPenalty = 1.0;
  bool greedy = false, printIds = false, stats = false;
  std::optional<double> temperature, topP;
  std::optional<int64_t> topK;
  uint64_t seed = 0;
};

llvm::Expected<Flags> parseFlags(int argc, char **argv, bool chat = false) {
  Flags f;
  auto error = [](const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("-", 0) != 0) {
      if (!f.model.empty())
        return error("more than one model: " + f.model + " and " + arg);
      f.model = arg;
      continue;
    }
    if (arg == "--greedy") {
      f.greedy = true;
      continue;
    }
    if (arg == "--print-ids") {
      f.printIds = true;
      continue;
    }
    if (arg == "--stats") {
      f.stats = true;
      continue;
    }
    if (i + 1 >= argc)
      return error(arg + " needs a value");
    std::string value = argv[++i];
    auto integer = [&](int64_t &out, int64_t lo) -> llvm::Error {
      if (!llvm::to_integer(value, out) || out < lo)
        return error(arg + " " + value + ": expected an integer >= " +
                     std::to_string(lo));
      return llvm::Error::success();
    };
    auto real = [&](double &out) -> llvm::Error {
      if (!llvm::to_float(value, out))
        return error(arg + " " + value + ": expected a number");
      return llvm::Error::success();
    };
    if (arg == "--prompt") f.prompt = value;
    else if (arg == "--prompts") f.promptsFile = value;
    else if (arg == "--prompt-ids") f.promptIds.push_back(value);
    else if (arg == "--tokenizer") f.tokenizer = value;
    else if (arg == "-o") f.output = value;
    else if (arg == "--device") f.device = value;
    else if (arg == "--precision") f.precision = value;
    else if (arg == "--logits-out") f.logitsOut = value;
    else if (arg == "--stop") f.stops.push_back(value);
    else if (arg == "--template" && chat) f.chatTemplate = value;
    else if (arg == "--max-new-tokens") {
      if (llvm::Error e = integer(f.maxNewTokens, 1)) return std::move(e);
    } else if (arg == "--max-batch") {
      if (llvm::Error e = integer(f.maxBatch, 1)) return std::move(e);
    } else if (arg == "--max-seq-len") {
      if (llvm::Error e = integer(f.maxSeqLen, 2)) return std::move(e);
    } else if (arg == "--prefill-chunk") {
      if (llvm::Error e = integer(f.prefillChunk, 1)) return std::move(e);
    } else if (arg == "--tp") {
      if (llvm::Error e = integer(f.tp, 1)) return std::move(e);
    } else if (arg == "--beam-width") {
      if (llvm::Error e = integer(f.beamWidth, 1)) return std::move(e);
    } else if (arg == "--eos-id") {
      int64_t id;
      if (llvm::Error e = integer(id, 0)) return std::move(e);
      f.eosIds.push_back(int32_t(id));
    } else if (arg == "--top-k") {
      int64_t k;
      if (llvm::Error e = integer(k, 0)) return std::move(e);
      f.topK = k;
    } else if (arg == "--seed") {
      int64_t s;
      if (llvm::Error e = integer(s, 0)) return std::move(e);
      f.seed = uint64_t(s);
    } else if (arg == "--temperature") {
      double t;
      if (llvm::Error e = real(t)) return std::move(e);
      f.temperature = t;
    } else if (arg == "--top-p") {
      double p;
      if (llvm::Error e = real(p)) return std::move(e);
      f.topP = p;
    } else if (arg == "--length-penalty") {
      if (llvm::Error e = real(f.lengthPenalty)) return std::move(e);
    } else {
      return error("unknown flag " + arg);
    }
  }
  if (f.model.empty())
    return error("no MODEL: give a Hugging Face directory or a Braid "
                 "checkpoint");
  int given = !f.prompt.empty() + !f.promptsFile.empty() + !f.promptIds.empty();
  if (chat) {
    if (given != 0)
      return error("braid chat reads its turns from the terminal (standard "
                   "input); --prompt, --prompts and --prompt-ids are braid "
                   "generate's");
    if (f.chatTemplate != "llama2" && f.chatTemplate != "alpaca" &&
        f.chatTemplate != "plain")
      return error("--template " + f.chatTemplate +
                   " is not one of llama2, alpaca, plain");
    if (f.beamWidth > 1)
      return error("braid chat samples or takes the most likely token; "
                   "--beam-width is braid generate's");
  } else if (given != 1)
    return error("give exactly one of --prompt TEXT, --prompts FILE.jsonl "
                 "and --prompt-ids 1,2,3 (once per prompt)");
  if (f.greedy && (f.temperature || f.topK || f.topP))
    return error("--greedy takes the most likely token: it does not go with "
                 "--temperature, --top-k or --top-p");
  if (f.topP && !(*f.topP > 0 && *f.topP <= 1))
    return error("--top-p " + std::to_string(*f.topP) +
                 " must be in (0, 1]");
  if (f.temperature && !(*f.temperature > 0))
    return error("--temperature must be > 0 (use --greedy for the most "
                 "likely token)");
  if (f.beamWidth > 1 && (f.temperature || f.topK || f.topP))
    return error("--beam-width searches the most likely continuation: it "
                 "does not go with --temperature, --top-k or --top-p");
  if (f.beamWidth > 1 && f.maxBatch > 0 && f.beamWidth > f.maxBatch)
    return error("--beam-width " + std::to_string(f.beamWidth) +
                 " is above --max-batch " + std::to_string(f.maxBatch) +
                 ": the beams are rows of the batch");
  if (f.lengthPenalty != 1.0 && f.beamWidth == 1)
    return error("--length-penalty scores beam search's hypotheses: give "
                 "--beam-width W");
  if (f.tp > 1 && chat)
    return error("--tp " + std::to_string(f.tp) +
                 ": braid chat runs on one rank (its turns come from one "
                 "terminal)");
  if (f.device != "cpu" && f.device != "cuda")
    return error("--device " + f.device + " is not one of cpu, cuda");
  return f;
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

llvm::Expected<std::vector<int32_t>> parseIds(const std::string &text) {
  std::vector<int32_t> ids;
  for (llvm::StringRef part : llvm::split(text, ',')) {
    int64_t id;
    if (!llvm::to_integer(part.trim(), id) || id < 0 || id > INT32_MAX)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--prompt-ids " + text + ": '" + part.str() +
              "' is not a token id (non-negative integers, comma-separated)");
    ids.push_back(int32_t(id));
  }
  return ids;
}


/// Loads the tokenizer: --tokenizer (a directory, or "bytes": the byte
/// tokenizer the demo trains with), else the model directory's. Without
/// one, an error when `required`.
llvm::Error loadTokenizer(const Flags &f, bool braidCheckpoint, bool required,
                          std::optional<data::ModelTokenizer> &tokenizer) {
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
    else if (required || !f.tokenizer.empty())
      return error(std::string(loaded.status().message()));
  }
  if (!tokenizer && required)
    return error(f.model + " comes without a tokenizer: give --tokenizer DIR "
                           "(or bytes), or the prompt as --prompt-ids");
  return llvm::Error::success();
}

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
/// --max-batch) and loads its weights on --device.
llvm::Expected<Opened>
openGenerator(const Flags &f, const spec::ModelSpec &model,
              int64_t defaultBatch,
              const std::optional<data::ModelTokenizer> &tokenizer,
              bool compileOnly = false) {
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

/// The sampling options of the flags (sampling when --top-k or --top-p is
/// given without a temperature: Hugging Face's default of 1).
exec::SamplingOptions samplingOf(const Flags &f) {
  exec::SamplingOptions sampling;
  sampling.temperature = f.greedy ? 0.0 : f.temperature.value_or(0.0);
  sampling.topK = f.topK.value_or(0);
  sampling.topP = f.topP.value_or(1.0);
  sampling.seed = f.seed;
  if ((f.topK || f.topP) && !f.temperature)
    sampling.temperature = 1.0;
  return sampling;
}

} // namespace

/// braid generate --tp N outside an MPI job: the same command on N ranks,
/// started by mpirun on this machine; mpirun's exit status.
int launchTensorParallel(const Flags &f, int argc, char **argv) {
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
  std::vector<llvm::StringRef> refs(args.begin(), args.end());
  std::string why;
  int rc = llvm::sys::ExecuteAndWait(*mpirun, refs, std::nullopt, {}, 0, 0,
                                     &why);
  if (rc < 0)
    return fail("cannot run mpirun: " + why);
  return rc;
}

int generateCommand(int argc, char **argv) {
  llvm::Expected<Flags> parsed = parseFlags(argc, argv);
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()), 2);
  Flags &f = *parsed;

  bool braidCheckpoint = false;
  llvm::Expected<spec::ModelSpec> model = modelOf(f.model, braidCheckpoint);
  if (!model)
    return fail(llvm::toString(model.takeError()));

  std::optional<data::ModelTokenizer> tokenizer;
  if (llvm::Error e = loadTokenizer(f, braidCheckpoint,
                                    /*required=*/f.promptIds.empty(),
                                    tokenizer))
    return fail(llvm::toString(std::move(e)));
  if (!tokenizer && f.promptIds.empty())
    return fail(f.model + " comes without a tokenizer: give --tokenizer DIR "
                          "(or bytes), or the prompt as --prompt-ids");
  if (!tokenizer && !f.stops.empty())
    return fail("--stop needs a tokenizer to match text");

  // The prompts.
  std::vector<Prompt> prompts;
  auto encode = [&](const std::string &text) -> absl::StatusOr<Prompt> {
    absl::StatusOr<std::vector<int32_t>> ids =
        tokenizer->tokenizer->encode(text);
    if (!ids.ok())
      return ids.status();
    Prompt p{text, {}};
    if (tokenizer->addBos)
      p.ids.push_back(tokenizer->bosId);
    p.ids.insert(p.ids.end(), ids->begin(), ids->end());
    p.ids.insert(p.ids.end(), tokenizer->promptSuffix.begin(),
                 tokenizer->promptSuffix.end());
    return p;
  };
  if (!f.promptIds.empty()) {
    for (const std::string &text : f.promptIds) {
      llvm::Expected<std::vector<int32_t>> ids = parseIds(text);
      if (!ids)
        return fail(llvm::toString(ids.takeError()), 2);
      prompts.push_back({"", *ids});
    }
  } else if (!f.prompt.empty()) {
    absl::StatusOr<Prompt> p = encode(f.prompt);
    if (!p.ok())
      return fail(std::string(p.status().message()));
    prompts.push_back(*p);
  } else {
    std::ifstream in(f.promptsFile);
    if (!in)
      return fail("cannot read " + f.promptsFile);
    std::string line;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      if (llvm::StringRef(line).trim().empty())
        continue;
      google::protobuf::Struct object;
      if (!google::protobuf::util::JsonStringToMessage(line, &object).ok() ||
          !object.fields().count("prompt") ||
          object.fields().at("prompt").kind_case() !=
              google::protobuf::Value::kStringValue)
        return fail(f.promptsFile + ":" + std::to_string(number) +
                    ": expected a JSON object with a string \"prompt\"");
      absl::StatusOr<Prompt> p =
          encode(object.fields().at("prompt").string_value());
      if (!p.ok())
        return fail(f.promptsFile + ":" + std::to_string(number) + ": " +
                    std::string(p.status().message()));
      prompts.push_back(*p);
    }
    if (prompts.empty())
      return fail(f.promptsFile + " holds no prompt");
  }

  const int64_t defaultBatch = std::max<int64_t>(
      f.beamWidth, std::min<int64_t>(int64_t(prompts.size()), 8));
#ifdef BRAID_HAVE_MPI
  // --tp outside an MPI job: the plan compiled here first, so that a job
  // that cannot be split fails once, then the ranks started.
  if (f.tp > 1 && !comm::LaunchedByMpi()) {
    llvm::Expected<Opened> checked =
        openGenerator(f, *model, defaultBatch, tokenizer, /*compileOnly=*/true);
    if (!checked)
      return fail(llvm::toString(checked.takeError()));
    return launchTensorParallel(f, argc, argv);
  }
#endif
  llvm::Expected<Opened> opened =
      openGenerator(f, *model, defaultBatch, tokenizer);
  if (!opened)
    return fail(llvm::toString(opened.takeError()));
  const GeneratePlan *compiled = &opened->compiled;
  exec::Generator &gen = *opened->generator;
  // Under --tp every rank runs the same calls on the same inputs; rank 0
  // prints.
  const bool writer = opened->writer;
  if (!writer)
    std::cout.setstate(std::ios::badbit);

  exec::SamplingOptions sampling = samplingOf(f);
  std::vector<int32_t> eosIds =
      !f.eosIds.empty() ? f.eosIds
      : tokenizer       ? tokenizer->eosIds
                        : std::vector<int32_t>{};

  std::ofstream logits;
  if (!f.logitsOut.empty() && writer) {
    logits.open(f.logitsOut, std::ios::trunc);
    if (!logits)
      return fail("cannot write " + f.logitsOut);
    logits << std::setprecision(9);
  }
  std::ofstream out;
  if (!f.output.empty() && writer) {
    out.open(f.output, std::ios::trunc);
    if (!out)
      return fail("cannot write " + f.output);
  }
  // Streams one prompt's text as it grows when there is one prompt and no
  // -o; the text of the ids so far, printed past what is already out.
  const bool stream = prompts.size() == 1 && f.output.empty() &&
                      tokenizer && !f.printIds;
  // Beam search takes the prompts one at a time, its beams in the rows.
  const int64_t batch = f.beamWidth > 1 ? 1 : gen.maxBatch();
  for (size_t first = 0; first < prompts.size(); first += size_t(batch)) {
    size_t count = std::min(prompts.size() - first, size_t(batch));
    std::vector<std::vector<int32_t>> ids;
    for (size_t k = 0; k < count; ++k)
      ids.push_back(prompts[first + k].ids);
    std::vector<std::vector<int32_t>> made(count);
    std::vector<size_t> shown(count, 0);
    if (stream) {
      std::cout << prompts[first].text << std::flush;
    }
    // The text of a row's tokens so far, without an end-of-sequence token
    // (which ends it, and which a BPE would spell out).
    auto textOf = [&](int64_t row) -> absl::StatusOr<std::string> {
      std::vector<int32_t> visible = made[row];
      if (!visible.empty() && std::find(eosIds.begin(), eosIds.end(),
                                        visible.back()) != eosIds.end())
        visible.pop_back();
      return tokenizer->tokenizer->decode(visible);
    };
    auto onToken = [&](int64_t row, int32_t token) {
      made[row].push_back(token);
      if (!tokenizer)
        return false;
      absl::StatusOr<std::string> text = textOf(row);
      if (!text.ok())
        return false;
      if (stream)
        printGrowing(*text, shown[row], /*final=*/false);
      for (const std::string &stop : f.stops)
        if (text->find(stop) != std::string::npos)
          return true;
      return false;
    };
    const exec::LogitsCallback onLogits = exec::LogitsWriter(logits);
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<exec::Completion>> done;
    if (f.beamWidth > 1) {
      exec::Generator::BeamOptions beam;
      beam.width = f.beamWidth;
      beam.lengthPenalty = f.lengthPenalty;
      absl::StatusOr<exec::Completion> best =
          gen.BeamSearch(ids[0], f.maxNewTokens, beam, eosIds);
      if (!best.ok())
        return fail(std::string(best.status().message()));
      done = std::vector<exec::Completion>{*best};
      if (stream)
        for (int32_t token : best->tokens)
          onToken(0, token);
    } else {
      done = gen.Generate(ids, f.maxNewTokens, sampling, eosIds, onToken,
                          f.logitsOut.empty() ? exec::LogitsCallback()
                                              : onLogits);
    }
    if (!done.ok())
      return fail(std::string(done.status().message()));
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (stream) {
      if (absl::StatusOr<std::string> text = textOf(0); text.ok())
        printGrowing(*text, shown[0], /*final=*/true);
      std::cout << "\n";
    }
    if (f.stats && writer) {
      const exec::Generator::Timings &t = gen.lastTimings();
      // Decode calls make one token per sequence each.
      llvm::errs() << llvm::formatv(
          "stats: {0} sequences; prefill {1} calls in {2:F4} s; decode {3} "
          "calls in {4:F4} s, {5:F2} calls/s; arena {6} bytes\n",
          count, t.prefillCalls, t.prefillSeconds, t.decodeCalls,
          t.decodeSeconds,
          t.decodeSeconds > 0 ? double(t.decodeCalls) / t.decodeSeconds : 0.0,
          compiled->plan.arena_bytes());
    }
    for (size_t k = 0; k < count; ++k) {
      const exec::Completion &c = (*done)[k];
      const Prompt &p = prompts[first + k];
      if (f.printIds) {
        std::string line;
        for (int32_t id : p.ids)
          line += std::to_string(id) + " ";
        for (int32_t id : c.tokens)
          line += std::to_string(id) + " ";
        if (!line.empty())
          line.pop_back();
        (f.output.empty() ? std::cout : out) << line << "\n";
        continue;
      }
      std::string text;
      if (tokenizer) {
        // The completion without its end-of-sequence token.
        std::vector<int32_t> shown = c.tokens;
        if (c.finish == "eos" && !shown.empty())
          shown.pop_back();
        absl::StatusOr<std::string> decoded =
            tokenizer->tokenizer->decode(shown);
        if (!decoded.ok())
          return fail(std::string(decoded.status().message()));
        text = *decoded;
      }
      if (!f.output.empty() || prompts.size() > 1) {
        std::ostream &os = f.output.empty() ? std::cout : out;
        os << "{\"prompt\": " << jsonString(p.text)
           << ", \"completion\": " << jsonString(text)
           << ", \"tokens\": " << c.tokens.size()
           << ", \"finish_reason\": " << jsonString(c.finish)
           << ", \"tokens_per_s\": "
           << (seconds > 0 ? double(c.tokens.size()) / seconds : 0.0)
           << "}\n";
      } else if (!stream) {
        std::cout << text << "\n";
      }
      if (c.finish == "context" && writer)
        llvm::errs() << "braid generate: prompt " << first + k
                     << " stopped: the context is full ("
                     << gen.maxSeqLen() << " positions, --max-seq-len)\n";
    }
  }
  if (out) {
    out.flush();
    if (!out)
      return fail("cannot write " + f.output);
  }
  return 0;
}

namespace {

/// The tokens of one turn of `chatTemplate` around the user's `text`: the
/// template's prompt segment (runtime/data/ChatTemplate.h) of a conversation
/// without a system text, as instruction data is rendered with it. llama2
/// "[INST] text [/INST]" after the beginning-of-sequence id (and, after the
/// first turn, the end id that closed the answer before); alpaca
/// "### Instruction:\ntext\n\n### Response:\n"; plain
/// "User: text\nAssistant:". `first`: the conversation's first turn.
absl::StatusOr<std::vector<int32_t>>
chatTurn(const data::ModelTokenizer &t, const std::string &chatTemplate,
         const std::string &text, bool first) {
  absl::StatusOr<data::ChatTemplate> wrap =
      data::ChatTemplate::Parse(chatTemplate);
  if (!wrap.ok())
    return wrap.status();
  const bool llama2 = wrap->kind() == data::ChatTemplate::Kind::kLlama2;
  std::vector<int32_t> ids;
  if (llama2 && !first && t.eosId >= 0)
    ids.push_back(t.eosId);
  // llama2 starts every turn with the beginning-of-sequence id where the
  // tokenizer has one, the others only a first turn where it adds one.
  data::ChatSpecialIds special;
  special.bos = llama2 || t.addBos ? t.bosId : -1;
  absl::StatusOr<std::vector<int32_t>> prompt = wrap->encodePrompt(
      *t.tokenizer, special, first ? 1 : 2, /*system=*/"", text);
  if (!prompt.ok())
    return prompt.status();
  ids.insert(ids.end(), prompt->begin(), prompt->end());
  return ids;
}

} // namespace

int chatCommand(int argc, char **argv) {
  llvm::Expected<Flags> parsed = parseFlags(argc, argv, /*chat=*/true);
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()), 2);
  Flags &f = *parsed;
  bool braidCheckpoint = false;
  llvm::Expected<spec::ModelSpec> model = modelOf(f.model, braidCheckpoint);
  if (!model)
    return fail(llvm::toString(model.takeError()));
  std::optional<data::ModelTokenizer> tokenizer;
  if (llvm::Error e =
          loadTokenizer(f, braidCheckpoint, /*required=*/true, tokenizer))
    return fail(llvm::toString(std::move(e)));
  llvm::Expected<Opened> opened = openGenerator(f, *model, 1, tokenizer);
  if (!opened)
    return fail(llvm::toString(opened.takeError()));
  exec::Generator &gen = *opened->generator;
  exec::SamplingOptions sampling = samplingOf(f);
  std::vector<int32_t> eosIds =
      !f.eosIds.empty() ? f.eosIds : tokenizer->eosIds;
  const bool interactive = isatty(0);
  const int64_t seqLen = gen.maxSeqLen();
  // The conversation: the positions its cache holds, and the answer's last
  // token, drawn but not yet fed (the next turn starts with it).
  int64_t cached = 0;
  std::vector<int32_t> pending;
  std::string line;
  while (true) {
    if (interactive)
      std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line))
      break;
    if (llvm::StringRef(line).trim().empty())
      continue;
    absl::StatusOr<std::vector<int32_t>> turn =
        chatTurn(*tokenizer, f.chatTemplate, line, cached == 0);
    if (!turn.ok())
      return fail(std::string(turn.status().message()));
    std::vector<int32_t> ids = pending;
    // The llama2 template closes an answer with the end id: one that ended
    // on it has it pending already.
    if (f.chatTemplate == "llama2" && !pending.empty() && !turn->empty() &&
        std::find(eosIds.begin(), eosIds.end(), pending.back()) !=
            eosIds.end() &&
        turn->front() == tokenizer->eosId)
      turn->erase(turn->begin());
    ids.insert(ids.end(), turn->begin(), turn->end());
    if (cached + int64_t(ids.size()) > seqLen - 1) {
      // Full: the turn starts a new conversation.
      std::cout << "[the context is full: " << seqLen
                << " positions (--max-seq-len); a new conversation starts "
                   "with this turn]\n";
      cached = 0;
      pending.clear();
      turn = chatTurn(*tokenizer, f.chatTemplate, line, true);
      if (!turn.ok())
        return fail(std::string(turn.status().message()));
      ids = *turn;
      if (int64_t(ids.size()) > seqLen - 1) {
        std::cout << "[this turn alone has " << ids.size()
                  << " tokens, more than the " << seqLen - 1
                  << " the context holds]\n";
        continue;
      }
    }
    std::vector<int32_t> answer;
    size_t shown = 0;
    auto onToken = [&](int64_t, int32_t token) {
      answer.push_back(token);
      std::vector<int32_t> visible = answer;
      if (std::find(eosIds.begin(), eosIds.end(), token) != eosIds.end())
        visible.pop_back();
      absl::StatusOr<std::string> text = tokenizer->tokenizer->decode(visible);
      if (text.ok() && !f.printIds)
        printGrowing(*text, shown, /*final=*/false);
      return false;
    };
    absl::StatusOr<std::vector<exec::Completion>> done =
        gen.Generate({ids}, f.maxNewTokens, sampling, eosIds, onToken, {},
                     {cached});
    if (!done.ok())
      return fail(std::string(done.status().message()));
    if (!f.printIds) {
      std::vector<int32_t> visible = answer;
      if (!visible.empty() && std::find(eosIds.begin(), eosIds.end(),
                                        visible.back()) != eosIds.end())
        visible.pop_back();
      if (absl::StatusOr<std::string> text =
              tokenizer->tokenizer->decode(visible);
          text.ok())
        printGrowing(*text, shown, /*final=*/true);
    }
    const exec::Completion &c = (*done)[0];
    if (f.printIds) {
      std::string out;
      for (int32_t id : c.tokens)
        out += std::to_string(id) + " ";
      if (!out.empty())
        out.pop_back();
      std::cout << out;
    }
    std::cout << "\n";
    // Everything but the answer's last token is in the cache now.
    cached += int64_t(ids.size()) + int64_t(c.tokens.size()) - 1;
    pending = {c.tokens.back()};
    if (c.finish == "context") {
      std::cout << "[the context is full: " << seqLen
                << " positions (--max-seq-len); the next turn starts a new "
                   "conversation]\n";
      cached = 0;
      pending.clear();
    }
  }
  return 0;
}
