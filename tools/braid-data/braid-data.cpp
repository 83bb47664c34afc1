//===- braid-data.cpp - Tokenize corpora into Megatron datasets -----------===//
//
//   braid-data preprocess --input F [--input F ...] --output-prefix P ...
//   braid-data train-tokenizer --input F [...] --model-prefix P --vocab-size N
//
// A thin main() over runtime/data/Preprocess.h. Flags are parsed here by
// hand (no LLVM in runtime tools). Exit codes: 0 success, 1 the work failed,
// 2 a bad command line.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Format.h"
#include "runtime/data/Preprocess.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using namespace braid::data;

namespace {

constexpr char kUsage[] = R"(usage:
  braid-data preprocess --input FILE [--input FILE ...] --output-prefix PREFIX
      [--format jsonl|text] [--json-key KEY] [--split-lines]
      [--tokenizer-model MODEL.model | --tokenizer byte] [--append-eod]
  braid-data train-tokenizer --input FILE [--input FILE ...]
      --model-prefix PREFIX --vocab-size N [--format jsonl|text]
      [--json-key KEY] [--character-coverage X] [--no-byte-fallback]
      [--input-sentence-size N] [--nondeterministic]

preprocess writes PREFIX.bin and PREFIX.idx (Megatron's indexed dataset), one
document per JSONL line (the string under KEY, default "text") or per text
file (per non-blank line with --split-lines). --format defaults by extension:
.jsonl and .json are JSONL, anything else text. The tokenizer is the byte
tokenizer (ids 0-255, EOD 256) unless --tokenizer-model names a SentencePiece
model; --append-eod ends every document with the tokenizer's EOD id.

train-tokenizer trains a SentencePiece BPE model (PREFIX.model, PREFIX.vocab)
with unk=0, bos=1, eos=2, byte fallback, and, unless --nondeterministic, the
same model on every run.
)";

/// A usage error: one line on stderr, exit 2.
[[noreturn]] void usageError(const std::string &message) {
  std::fprintf(stderr, "braid-data: error: %s\n", message.c_str());
  std::exit(2);
}

/// The flags of one subcommand: name -> takes a value.
struct FlagParser {
  std::map<std::string, bool> known;
  std::map<std::string, std::vector<std::string>> values;

  void parse(int argc, char **argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::fputs(kUsage, stdout);
        std::exit(0);
      }
      if (arg.rfind("--", 0) != 0)
        usageError(absl::StrCat("unexpected argument '", arg,
                                "' (flags start with --; see --help)"));
      std::string name = arg.substr(2), value;
      bool hasInlineValue = false;
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        hasInlineValue = true;
      }
      auto flag = known.find(name);
      if (flag == known.end())
        usageError(absl::StrCat("unknown flag --", name, " (see --help)"));
      if (flag->second && !hasInlineValue) {
        if (i + 1 >= argc)
          usageError(absl::StrCat("flag --", name, " needs a value"));
        value = argv[++i];
      } else if (!flag->second && hasInlineValue) {
        usageError(absl::StrCat("flag --", name, " takes no value"));
      }
      values[name].push_back(value);
    }
  }
  bool has(const std::string &name) const { return values.count(name) != 0; }
  /// The value of a flag given at most once.
  std::string single(const std::string &name, bool required) const {
    auto it = values.find(name);
    if (it == values.end()) {
      if (required)
        usageError(absl::StrCat("missing required flag --", name));
      return "";
    }
    if (it->second.size() > 1)
      usageError(absl::StrCat("flag --", name, " given more than once"));
    if (it->second[0].empty())
      usageError(absl::StrCat("flag --", name, " has an empty value"));
    return it->second[0];
  }
  std::vector<std::string> all(const std::string &name) const {
    auto it = values.find(name);
    return it == values.end() ? std::vector<std::string>() : it->second;
  }
};

InputFormat formatFlag(const FlagParser &flags) {
  if (!flags.has("format"))
    return InputFormat::kAuto;
  absl::StatusOr<InputFormat> format = ParseInputFormat(flags.single("format", true));
  if (!format.ok())
    usageError(std::string(format.status().message()));
  return *format;
}

std::vector<std::string> inputFlags(const FlagParser &flags) {
  std::vector<std::string> inputs = flags.all("input");
  if (inputs.empty())
    usageError("missing required flag --input");
  for (const std::string &input : inputs)
    if (input.empty())
      usageError("flag --input has an empty value");
  return inputs;
}

int64_t integerFlag(const FlagParser &flags, const std::string &name,
                    bool required, int64_t fallback) {
  std::string text = flags.single(name, required);
  if (text.empty())
    return fallback;
  int64_t value;
  if (!absl::SimpleAtoi(text, &value) || value < 0)
    usageError(absl::StrCat("flag --", name, ": '", text,
                            "' is not a non-negative integer"));
  return value;
}

/// Whether a "\r" progress line is on the terminal, to be ended first.
bool progressShown = false;

int runFailed(const absl::Status &status) {
  std::fprintf(stderr, "%sbraid-data: error: %s\n", progressShown ? "\n" : "",
               std::string(status.message()).c_str());
  return 1;
}

int preprocess(int argc, char **argv) {
  FlagParser flags;
  flags.known = {{"input", true},          {"output-prefix", true},
                 {"json-key", true},       {"format", true},
                 {"split-lines", false},   {"tokenizer-model", true},
                 {"tokenizer", true},      {"append-eod", false},
                 {"workers", true}};
  flags.parse(argc, argv, 2);
  PreprocessOptions options;
  options.inputs = inputFlags(flags);
  options.outputPrefix = flags.single("output-prefix", true);
  options.format = formatFlag(flags);
  if (flags.has("json-key"))
    options.jsonKey = flags.single("json-key", true);
  options.splitLines = flags.has("split-lines");
  options.appendEod = flags.has("append-eod");
  if (flags.has("tokenizer-model") && flags.has("tokenizer"))
    usageError("give either --tokenizer-model or --tokenizer byte, not both");
  if (flags.has("tokenizer") && flags.single("tokenizer", true) != "byte")
    usageError(absl::StrCat("unknown tokenizer '", flags.single("tokenizer", true),
                            "' (byte is the one built in; for SentencePiece "
                            "use --tokenizer-model)"));
  if (flags.has("tokenizer-model"))
    options.tokenizerModel = flags.single("tokenizer-model", true);
  // Accepted for Megatron command lines; the work is one thread.
  (void)integerFlag(flags, "workers", false, 1);

  auto progress = [](const PreprocessProgress &p) {
    progressShown = true;
    double rate = p.elapsedSeconds > 0 ? p.bytesRead / p.elapsedSeconds : 0;
    std::fprintf(stderr, "\r%llu docs, %llu tokens, %s, %s/s   ",
                 static_cast<unsigned long long>(p.documents),
                 static_cast<unsigned long long>(p.tokens),
                 braid::common::FormatBytes(int64_t(p.bytesRead)).c_str(),
                 braid::common::FormatBytes(int64_t(rate)).c_str());
  };
  PreprocessSummary summary;
  if (absl::Status s = Preprocess(options, progress, &summary); !s.ok())
    return runFailed(s);
  std::fprintf(stderr,
               "\ndocuments: %llu\nsequences: %llu\ntokens: %llu\n"
               "tokenizer: %s (vocabulary %lld)\ndtype: %s\n"
               "read: %s in %.2f s\noutput: %s %s\n",
               static_cast<unsigned long long>(summary.documents),
               static_cast<unsigned long long>(summary.sequences),
               static_cast<unsigned long long>(summary.tokens),
               summary.tokenizer.c_str(),
               static_cast<long long>(summary.vocabSize),
               std::string(dtypeName(summary.dtype)).c_str(),
               braid::common::FormatBytes(int64_t(summary.bytesRead)).c_str(),
               summary.elapsedSeconds,
               summary.binPath.c_str(), summary.idxPath.c_str());
  return 0;
}

int trainTokenizer(int argc, char **argv) {
  FlagParser flags;
  flags.known = {{"input", true},
                 {"model-prefix", true},
                 {"vocab-size", true},
                 {"json-key", true},
                 {"format", true},
                 {"character-coverage", true},
                 {"no-byte-fallback", false},
                 {"input-sentence-size", true},
                 {"nondeterministic", false}};
  flags.parse(argc, argv, 2);
  TrainTokenizerOptions options;
  options.inputs = inputFlags(flags);
  options.modelPrefix = flags.single("model-prefix", true);
  options.vocabSize = integerFlag(flags, "vocab-size", true, 0);
  if (options.vocabSize < 4)
    usageError(absl::StrCat("flag --vocab-size: ", options.vocabSize,
                            " is too small"));
  options.format = formatFlag(flags);
  if (flags.has("json-key"))
    options.jsonKey = flags.single("json-key", true);
  if (flags.has("character-coverage")) {
    std::string text = flags.single("character-coverage", true);
    if (!absl::SimpleAtod(text, &options.characterCoverage) ||
        !(options.characterCoverage > 0 && options.characterCoverage <= 1))
      usageError(absl::StrCat("flag --character-coverage: '", text,
                              "' is not a number in (0, 1]"));
  }
  options.byteFallback = !flags.has("no-byte-fallback");
  options.inputSentenceSize = integerFlag(flags, "input-sentence-size", false,
                                          options.inputSentenceSize);
  options.deterministic = !flags.has("nondeterministic");
  if (absl::Status s = TrainTokenizer(options); !s.ok())
    return runFailed(s);
  std::fprintf(stderr, "wrote %s.model and %s.vocab (vocabulary %lld)\n",
               options.modelPrefix.c_str(), options.modelPrefix.c_str(),
               static_cast<long long>(options.vocabSize));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    usageError("missing subcommand (preprocess or train-tokenizer; see --help)");
  std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "preprocess")
    return preprocess(argc, argv);
  if (command == "train-tokenizer")
    return trainTokenizer(argc, argv);
  usageError(absl::StrCat("unknown subcommand '", command,
                          "' (preprocess or train-tokenizer; see --help)"));
}
