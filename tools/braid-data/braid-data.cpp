//===- braid-data.cpp - Tokenize corpora into Megatron datasets -----------===//
//
//   braid-data preprocess --input F [--input F ...] --output-prefix P ...
//   braid-data preprocess --handler H --input F [...] --output-prefix P ...
//   braid-data train-tokenizer --input F [...] --model-prefix P --vocab-size N
//   braid-data tokenize --tokenizer-dir DIR (--text S | --decode --ids 1,2)
//
// A thin main() over runtime/data/Preprocess.h, Instruction.h and
// ModelTokenizer.h. Flags are parsed here by hand (no LLVM in runtime tools).
// Exit codes: 0 success, 1 the work failed, 2 a bad command line.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Format.h"
#include "runtime/common/Json.h"
#include "runtime/common/JsonString.h"
#include "runtime/data/BpeTokenizer.h"
#include "runtime/data/Instruction.h"
#include "runtime/data/ModelTokenizer.h"
#include "runtime/data/Preprocess.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

using namespace braid::data;

namespace {

constexpr char kUsage[] = R"(usage:
  braid-data preprocess --input FILE [--input FILE ...] --output-prefix PREFIX
      [--format jsonl|text] [--json-key KEY] [--split-lines]
      [--tokenizer-model MODEL.model | --tokenizer byte] [--append-eod]
  braid-data preprocess --handler alpaca|sharegpt|belle|moss|plain
      --input FILE [--input FILE ...] --output-prefix PREFIX
      [--template alpaca|llama2|plain]
      [--tokenizer-model MODEL.model | --tokenizer byte | --tokenizer-dir DIR]
  braid-data train-tokenizer --input FILE [--input FILE ...]
      --model-prefix PREFIX --vocab-size N [--format jsonl|text]
      [--json-key KEY] [--character-coverage X] [--no-byte-fallback]
      [--input-sentence-size N] [--nondeterministic]
  braid-data tokenize --tokenizer-dir DIR
      (--text TEXT | --text-file FILE | --jsonl FILE) [--no-special]
      | --decode (--ids ID,ID,... | --jsonl FILE) [--skip-special]
      | --info

preprocess writes PREFIX.bin and PREFIX.idx (Megatron's indexed dataset), one
document per JSONL line (the string under KEY, default "text") or per text
file (per non-blank line with --split-lines). --format defaults by extension:
.jsonl and .json are JSONL, anything else text. The tokenizer is the byte
tokenizer (ids 0-255, EOD 256) unless --tokenizer-model names a SentencePiece
model; --append-eod ends every document with the tokenizer's EOD id.

preprocess --handler writes instruction data: each record of a .json (one
array of objects) or .jsonl (one object a line) file, read as the handler's
dataset has it (alpaca {instruction, input?, output, system?, history?},
sharegpt {conversations: [{from, value}], system?}, belle {instruction,
input?, output} with "Human:"/"Assistant:" turns, moss {meta_instruction?,
chat: {turn_N: {Human, MOSS}}}, plain {prompt, response}), is rendered by
the chat template (default alpaca; those of braid chat --template) as one
document of PREFIX.bin/.idx, and PREFIX_loss_mask.bin/.idx (uint8) marks
with 1 the tokens of the answers, whose loss is trained. --tokenizer-dir
takes a Hugging Face model directory's tokenizer, as tokenize does.

train-tokenizer trains a SentencePiece BPE model (PREFIX.model, PREFIX.vocab)
with unk=0, bos=1, eos=2, byte fallback, and, unless --nondeterministic, the
same model on every run.

tokenize uses the tokenizer of a Hugging Face model directory: tokenizer.json
(byte-level BPE), vocab.json + merges.txt (GPT-2's) or tokenizer.model
(SentencePiece), with the BOS and EOS ids of its tokenizer_config.json,
special_tokens_map.json, config.json and generation_config.json. With --text
(or --text-file, its bytes as they are) it prints the ids, space-separated,
on one line: the prompt a generation starts from, with the BOS where the
model's tokenizer adds one (transformers' tokenizer(text)); --no-special
leaves out what the tokenizer adds around the text. With --decode it prints
the text of the ids (separated by commas or spaces) as it is, with no
newline added; special tokens appear as their text unless --skip-special
(SentencePiece's control tokens, such as <s>, decode to nothing either way).
--jsonl does either for many texts, one JSON object a line: {"text": S}
prints a line of ids; with --decode, {"ids": [...]} prints {"text": S}.
--info prints the tokenizer, its vocabulary size and the BOS and EOS ids.
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

/// preprocess --handler: instruction data with its loss mask.
int preprocessInstructions(const FlagParser &flags) {
  const std::pair<const char *, const char *> refused[] = {
      {"append-eod", "every answer already ends with the end id"},
      {"split-lines", "the inputs are .json or .jsonl, one record a document"},
      {"json-key", "the handler names the fields it reads"},
      {"format", "the inputs are .json or .jsonl, read by their extension"}};
  for (const auto &[flag, why] : refused)
    if (flags.has(flag))
      usageError(
          absl::StrCat("--", flag, " does not go with --handler (", why, ")"));
  InstructionOptions options;
  absl::StatusOr<InstructionHandler> handler =
      ParseInstructionHandler(flags.single("handler", true));
  if (!handler.ok())
    usageError(absl::StrCat("flag --handler: ", handler.status().message()));
  options.handler = *handler;
  if (flags.has("template")) {
    absl::StatusOr<ChatTemplate> chatTemplate =
        ChatTemplate::Parse(flags.single("template", true));
    if (!chatTemplate.ok())
      usageError(
          absl::StrCat("flag --template: ", chatTemplate.status().message()));
    options.chatTemplate = chatTemplate->kind();
  }
  options.inputs = inputFlags(flags);
  options.outputPrefix = flags.single("output-prefix", true);
  if (flags.has("tokenizer-model") + flags.has("tokenizer") +
          flags.has("tokenizer-dir") >
      1)
    usageError("give one of --tokenizer-model, --tokenizer byte and "
               "--tokenizer-dir");
  if (flags.has("tokenizer") && flags.single("tokenizer", true) != "byte")
    usageError(absl::StrCat("unknown tokenizer '",
                            flags.single("tokenizer", true),
                            "' (byte is the one built in; for SentencePiece "
                            "use --tokenizer-model, for a model directory "
                            "--tokenizer-dir)"));
  (void)integerFlag(flags, "workers", false, 1);

  absl::StatusOr<InstructionTokenizer> tokenizer = ByteInstructionTokenizer();
  if (flags.has("tokenizer-model"))
    tokenizer = LoadSentencePieceInstructionTokenizer(
        flags.single("tokenizer-model", true));
  else if (flags.has("tokenizer-dir"))
    tokenizer =
        LoadModelInstructionTokenizer(flags.single("tokenizer-dir", true));
  if (!tokenizer.ok())
    return runFailed(tokenizer.status());

  auto progress = [](const PreprocessProgress &p) {
    progressShown = true;
    std::fprintf(stderr, "\r%llu conversations, %llu tokens, %s   ",
                 static_cast<unsigned long long>(p.documents),
                 static_cast<unsigned long long>(p.tokens),
                 braid::common::FormatBytes(int64_t(p.bytesRead)).c_str());
  };
  InstructionSummary summary;
  if (absl::Status s =
          PreprocessInstructions(options, *tokenizer, progress, &summary);
      !s.ok())
    return runFailed(s);
  if (progressShown)
    std::fputc('\n', stderr);
  const double share =
      summary.tokens == 0
          ? 0.0
          : 100.0 * double(summary.trainedTokens) / double(summary.tokens);
  std::printf(
      "conversations: %llu\nturns: %llu\ntokens: %llu\n"
      "trained tokens: %llu (%.2f%%)\n"
      "handler: %s\ntemplate: %s\n"
      "tokenizer: %s (vocabulary %lld)\ndtype: %s\n"
      "read: %s in %.2f s\noutput: %s %s\nloss mask: %s %s\n",
      static_cast<unsigned long long>(summary.documents),
      static_cast<unsigned long long>(summary.turns),
      static_cast<unsigned long long>(summary.tokens),
      static_cast<unsigned long long>(summary.trainedTokens), share,
      std::string(InstructionHandlerName(options.handler)).c_str(),
      std::string(ChatTemplate(options.chatTemplate).name()).c_str(),
      summary.tokenizer.c_str(), static_cast<long long>(summary.vocabSize),
      std::string(dtypeName(summary.dtype)).c_str(),
      braid::common::FormatBytes(int64_t(summary.bytesRead)).c_str(),
      summary.elapsedSeconds, summary.binPath.c_str(), summary.idxPath.c_str(),
      summary.maskBinPath.c_str(), summary.maskIdxPath.c_str());
  return 0;
}

int preprocess(int argc, char **argv) {
  FlagParser flags;
  flags.known = {
      {"input", true},     {"output-prefix", true}, {"json-key", true},
      {"format", true},    {"split-lines", false},  {"tokenizer-model", true},
      {"tokenizer", true}, {"append-eod", false},   {"workers", true},
      {"handler", true},   {"template", true},      {"tokenizer-dir", true}};
  flags.parse(argc, argv, 2);
  if (flags.has("handler"))
    return preprocessInstructions(flags);
  for (const char *flag : {"template", "tokenizer-dir"})
    if (flags.has(flag))
      usageError(
          absl::StrCat("--", flag, " goes with --handler (instruction data)"));
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

/// Comma- or space-separated token ids.
std::vector<int32_t> idsFlag(const FlagParser &flags) {
  std::vector<std::string> given = flags.all("ids");
  if (given.size() > 1)
    usageError("flag --ids given more than once");
  std::vector<int32_t> ids;
  if (absl::StripAsciiWhitespace(given[0]).empty())
    usageError("flag --ids is empty: give the ids, e.g. --ids 286,287");
  // Commas, or spaces, between the ids; nothing between two commas is a
  // mistake, not an id to skip.
  for (absl::string_view group : absl::StrSplit(given[0], ',')) {
    if (absl::StripAsciiWhitespace(group).empty())
      usageError(absl::StrCat("flag --ids: '", given[0],
                              "' has no id between two commas"));
    for (absl::string_view part :
         absl::StrSplit(group, ' ', absl::SkipEmpty())) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id))
        usageError(absl::StrCat("flag --ids: '", part, "' is not a token id"));
      ids.push_back(id);
    }
  }
  return ids;
}

/// The text of `ids`; special tokens as their text unless `skipSpecial`.
absl::StatusOr<std::string> decodeIds(const Tokenizer &tokenizer,
                                      absl::Span<const int32_t> ids,
                                      bool skipSpecial) {
  if (const auto *bpe = dynamic_cast<const ByteLevelBpeTokenizer *>(&tokenizer))
    return bpe->decode(ids, skipSpecial);
  return tokenizer.decode(ids);
}

/// --jsonl: one JSON object a line, {"text": ...} to encode (one line of
/// ids out) or, with --decode, {"ids": [...]} (one line {"text": ...} out).
int tokenizeJsonl(const ModelTokenizer &model, const std::string &path,
                  bool decode, bool noSpecial, bool skipSpecial) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return runFailed(
        absl::NotFoundError(absl::StrCat("cannot open JSONL file ", path)));
  google::protobuf::util::JsonParseOptions jsonOptions;
  std::string line;
  for (uint64_t lineNumber = 1; std::getline(in, line); ++lineNumber) {
    const std::string where = absl::StrCat(path, ":", lineNumber, ": ");
    google::protobuf::Struct object;
    if (absl::Status s =
            braid::common::JsonToMessage(line, &object, jsonOptions);
        !s.ok())
      return runFailed(absl::InvalidArgumentError(
          absl::StrCat(where, "expected a JSON object: ", s.message())));
    const char *key = decode ? "ids" : "text";
    auto field = object.fields().find(key);
    if (decode) {
      std::vector<int32_t> ids;
      bool ok =
          field != object.fields().end() &&
          field->second.kind_case() == google::protobuf::Value::kListValue;
      if (ok)
        for (const google::protobuf::Value &v :
             field->second.list_value().values()) {
          double d = v.number_value();
          if (v.kind_case() != google::protobuf::Value::kNumberValue ||
              d != static_cast<int32_t>(d)) {
            ok = false;
            break;
          }
          ids.push_back(static_cast<int32_t>(d));
        }
      if (!ok)
        return runFailed(absl::InvalidArgumentError(
            absl::StrCat(where, "expected \"ids\", a list of token ids")));
      absl::StatusOr<std::string> text =
          decodeIds(*model.tokenizer, ids, skipSpecial);
      if (!text.ok())
        return runFailed(
            absl::Status(text.status().code(),
                         where + std::string(text.status().message())));
      std::printf("{\"text\": %s}\n", braid::common::JsonString(*text).c_str());
      continue;
    }
    if (field == object.fields().end() ||
        field->second.kind_case() != google::protobuf::Value::kStringValue)
      return runFailed(absl::InvalidArgumentError(
          absl::StrCat(where, "expected \"text\", a string")));
    const std::string &text = field->second.string_value();
    absl::StatusOr<std::vector<int32_t>> ids =
        noSpecial ? model.tokenizer->encode(text) : EncodePrompt(model, text);
    if (!ids.ok())
      return runFailed(absl::Status(
          ids.status().code(), where + std::string(ids.status().message())));
    std::printf("%s\n", absl::StrJoin(*ids, " ").c_str());
  }
  if (in.bad())
    return runFailed(
        absl::DataLossError(absl::StrCat("error reading JSONL file ", path)));
  return 0;
}

int tokenize(int argc, char **argv) {
  FlagParser flags;
  flags.known = {
      {"tokenizer-dir", true}, {"text", true},          {"text-file", true},
      {"ids", true},           {"jsonl", true},         {"decode", false},
      {"no-special", false},   {"skip-special", false}, {"info", false}};
  flags.parse(argc, argv, 2);
  const std::string dir = flags.single("tokenizer-dir", true);
  const bool decode = flags.has("decode");
  const bool info = flags.has("info");
  const bool jsonl = flags.has("jsonl");
  const int texts = flags.has("text") + flags.has("text-file");
  if (info + jsonl + texts + flags.has("ids") != 1)
    usageError("give one of --text, --text-file, --ids (with --decode), "
               "--jsonl or --info");
  if (decode && !(flags.has("ids") || jsonl))
    usageError("--decode goes with --ids or --jsonl");
  if (flags.has("ids") && !decode)
    usageError("--ids goes with --decode");
  if (flags.has("no-special") && (decode || info))
    usageError("--no-special is for encoding (--text, --text-file, --jsonl)");
  if (flags.has("skip-special") && !decode)
    usageError("--skip-special goes with --decode");
  const bool noSpecial = flags.has("no-special");
  const bool skipSpecial = flags.has("skip-special");

  absl::StatusOr<ModelTokenizer> model = LoadModelTokenizer(dir);
  if (!model.ok())
    return runFailed(model.status());
  const Tokenizer &tokenizer = *model->tokenizer;

  if (info) {
    std::printf("tokenizer: %s (from %s)\n", tokenizer.name().c_str(),
                model->source.c_str());
    if (!model->note.empty())
      std::printf("note: %s\n", model->note.c_str());
    std::printf("vocabulary: %lld\n",
                static_cast<long long>(tokenizer.vocabSize()));
    std::printf("bos: %d (%s)\n", model->bosId,
                model->addBos ? "added to prompts" : "not added");
    std::printf("eos: %s\n", absl::StrJoin(model->eosIds, " ").c_str());
    if (!model->promptSuffix.empty())
      std::printf("prompt suffix: %s\n",
                  absl::StrJoin(model->promptSuffix, " ").c_str());
    return 0;
  }
  if (jsonl)
    return tokenizeJsonl(*model, flags.single("jsonl", true), decode, noSpecial,
                         skipSpecial);

  if (decode) {
    absl::StatusOr<std::string> text =
        decodeIds(tokenizer, idsFlag(flags), skipSpecial);
    if (!text.ok())
      return runFailed(text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
    return 0;
  }

  std::string text;
  if (flags.has("text")) {
    if (flags.all("text").size() > 1)
      usageError("flag --text given more than once");
    text = flags.all("text")[0];
  } else {
    std::string path = flags.single("text-file", true);
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return runFailed(
          absl::NotFoundError(absl::StrCat("cannot open text file ", path)));
    text.assign(std::istreambuf_iterator<char>(in),
                std::istreambuf_iterator<char>());
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      noSpecial ? tokenizer.encode(text) : EncodePrompt(*model, text);
  if (!ids.ok())
    return runFailed(ids.status());
  std::printf("%s\n", absl::StrJoin(*ids, " ").c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    usageError("missing subcommand (preprocess, train-tokenizer or tokenize; "
               "see --help)");
  std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "preprocess")
    return preprocess(argc, argv);
  if (command == "train-tokenizer")
    return trainTokenizer(argc, argv);
  if (command == "tokenize")
    return tokenize(argc, argv);
  usageError(absl::StrCat("unknown subcommand '", command,
                          "' (preprocess, train-tokenizer or tokenize; see "
                          "--help)"));
}
