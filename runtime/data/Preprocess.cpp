//===- Preprocess.cpp - Corpus files to an indexed dataset ----------------===//
//
// JSON is parsed with protobuf's JSON parser into a google.protobuf.Struct,
// so any valid JSON object is accepted as the JSON spec defines it (escapes,
// surrogate pairs, nesting) without a parser of our own.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Json.h"
#include "runtime/data/Preprocess.h"

#include "runtime/data/SentencePieceBridge.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cerrno>
#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sys/stat.h>
#include <thread>

namespace braid::data {
namespace {

using Clock = std::chrono::steady_clock;

/// OK if `path` names something that can be read as a file; else an error
/// that names it and says why (the usual mistake is a typo).
absl::Status checkInputFile(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open input ", path));
  if (S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat("input ", path, " is a directory, not a file"));
  return absl::OkStatus();
}

absl::string_view trimTrailingCr(absl::string_view line) {
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  return line;
}

bool isBlank(absl::string_view line) {
  return absl::StripAsciiWhitespace(line).empty();
}

/// Whether `bytes` holds control characters other than whitespace (a NUL,
/// an escape): what a binary file has and text does not.
bool looksBinary(absl::string_view bytes) {
  for (char c : bytes)
    if ((unsigned char)c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return true;
  return false;
}

using DocumentFn = std::function<absl::Status(absl::string_view text)>;

/// Calls `onDocument` with each document of one input, in order, and adds
/// the bytes it consumes to *bytesRead as it goes (for progress). An error
/// of onDocument stops the reading and is returned as it is.
absl::Status forEachDocument(const std::string &path, InputFormat format,
                             const std::string &jsonKey, bool splitLines,
                             uint64_t *bytesRead,
                             const DocumentFn &onDocument) {
  if (absl::Status s = checkInputFile(path); !s.ok())
    return s;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open input ", path));
  format = ResolveInputFormat(path, format);
  uint64_t documents = 0;

  if (format == InputFormat::kText && !splitLines) {
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    if (in.bad())
      return absl::DataLossError(absl::StrCat("error reading input ", path));
    *bytesRead += text.size();
    if (text.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": empty input: the file is empty, so it holds no document"));
    return onDocument(text);
  }

  google::protobuf::util::JsonParseOptions jsonOptions;
  google::protobuf::Struct object;
  std::string line;
  uint64_t lineNumber = 0;
  while (std::getline(in, line)) {
    ++lineNumber;
    *bytesRead += line.size() + (in.eof() ? 0 : 1);
    if (isBlank(line))
      continue;
    if (format == InputFormat::kText) {
      if (absl::Status s = onDocument(trimTrailingCr(line)); !s.ok())
        return s;
      ++documents;
      continue;
    }
    const std::string where = absl::StrCat(path, ":", lineNumber, ": ");
    // Protobuf's message for a top-level array or string is about a
    // Struct; say what the file must hold instead.
    if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "{"))
      return absl::InvalidArgumentError(absl::StrCat(
          where, "expected a JSON object (one per line, JSONL), got: \"",
          absl::CHexEscape(
              absl::ClippedSubstr(absl::StripAsciiWhitespace(line), 0, 40)),
          line.size() > 40 ? "\"..." : "\"",
          looksBinary(line) ? " (binary data: is this a text or JSONL file?)"
                            : ""));
    object.Clear();
    if (absl::Status s = common::JsonToMessage(line, &object, jsonOptions);
        !s.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
    auto field = object.fields().find(jsonKey);
    if (field == object.fields().end()) {
      std::vector<std::string> keys;
      for (const auto &entry : object.fields())
        keys.push_back(absl::StrCat("\"", entry.first, "\""));
      std::sort(keys.begin(), keys.end());
      return absl::InvalidArgumentError(absl::StrCat(
          where, "no key \"", jsonKey, "\" in the object (its keys: ",
          keys.empty() ? "none" : absl::StrJoin(keys, ", "),
          "); choose the key with --json-key"));
    }
    if (field->second.kind_case() != google::protobuf::Value::kStringValue)
      return absl::InvalidArgumentError(
          absl::StrCat(where, "key \"", jsonKey, "\" is ",
                       common::JsonKindName(field->second), ", not a string"));
    if (absl::Status s = onDocument(field->second.string_value()); !s.ok())
      return s;
    ++documents;
  }
  if (in.bad())
    return absl::DataLossError(absl::StrCat("error reading input ", path));
  if (documents == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": empty input: no document in ", lineNumber,
        lineNumber == 1 ? " line" : " lines", " (blank lines are skipped)"));
  return absl::OkStatus();
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Removes a file when it goes out of scope (the JSONL text extract).
class RemoveOnExit {
public:
  explicit RemoveOnExit(std::string path) : path_(std::move(path)) {}
  ~RemoveOnExit() { std::remove(path_.c_str()); }
  RemoveOnExit(const RemoveOnExit &) = delete;
  RemoveOnExit &operator=(const RemoveOnExit &) = delete;

private:
  std::string path_;
};

} // namespace

InputFormat ResolveInputFormat(const std::string &path, InputFormat format) {
  if (format != InputFormat::kAuto)
    return format;
  return absl::EndsWithIgnoreCase(path, ".jsonl") ||
                 absl::EndsWithIgnoreCase(path, ".json")
             ? InputFormat::kJsonl
             : InputFormat::kText;
}

absl::StatusOr<InputFormat> ParseInputFormat(absl::string_view name) {
  if (name == "jsonl")
    return InputFormat::kJsonl;
  if (name == "text")
    return InputFormat::kText;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown input format \"", name, "\" (expected jsonl or text)"));
}

absl::Status Preprocess(const PreprocessOptions &options, ProgressFn progress,
                        PreprocessSummary *summary) {
  if (options.tokenizerModel.empty())
    return Preprocess(options, ByteTokenizer(), std::move(progress), summary);
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Load(options.tokenizerModel);
  if (!tokenizer.ok())
    return tokenizer.status();
  return Preprocess(options, **tokenizer, std::move(progress), summary);
}

absl::Status Preprocess(const PreprocessOptions &options,
                        const Tokenizer &tokenizer, ProgressFn progress,
                        PreprocessSummary *summary) {
  if (options.inputs.empty())
    return absl::InvalidArgumentError("preprocess: no input file");
  if (options.outputPrefix.empty())
    return absl::InvalidArgumentError("preprocess: no output prefix");
  // PREFIX.bin and PREFIX.idx: a prefix that ends in a directory would
  // make the hidden files DIR/.bin and DIR/.idx.
  if (options.outputPrefix.back() == '/' ||
      std::filesystem::is_directory(options.outputPrefix))
    return absl::InvalidArgumentError(absl::StrCat(
        "preprocess: the output prefix ", options.outputPrefix,
        " is a directory: give DIR/NAME, which makes DIR/NAME.bin and "
        "DIR/NAME.idx"));
  if (options.jsonKey.empty())
    return absl::InvalidArgumentError("preprocess: the JSON key is empty");
  // Check every input before reading any, so that a typo in the last one
  // fails at once rather than after the others were tokenized.
  for (const std::string &input : options.inputs)
    if (absl::Status s = checkInputFile(input); !s.ok())
      return s;

  const Clock::time_point start = Clock::now();
  const DType dtype = BestDtypeForVocab(tokenizer.vocabSize());
  // On every early return the writer's destructor removes its .tmp files:
  // a failed run leaves no output.
  absl::StatusOr<IndexedDatasetWriter> writer =
      IndexedDatasetWriter::Create(options.outputPrefix, dtype);
  if (!writer.ok())
    return writer.status();

  PreprocessProgress state;
  Clock::time_point lastReport = start;
  std::vector<int64_t> sequence;
  auto onDocument = [&](absl::string_view text) -> absl::Status {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.encode(text);
    if (!ids.ok())
      return ids.status();
    // As Megatron: an empty document is kept, without a sequence or an EOD.
    if (!ids->empty()) {
      sequence.assign(ids->begin(), ids->end());
      if (options.appendEod)
        sequence.push_back(tokenizer.eodId());
      if (absl::Status s = writer->AddSequence(sequence); !s.ok())
        return s;
      state.tokens += sequence.size();
    }
    if (absl::Status s = writer->EndDocument(); !s.ok())
      return s;
    ++state.documents;
    if (progress &&
        std::chrono::duration<double>(Clock::now() - lastReport).count() >=
            options.progressIntervalSeconds) {
      lastReport = Clock::now();
      state.elapsedSeconds = secondsSince(start);
      progress(state);
    }
    return absl::OkStatus();
  };

  for (const std::string &input : options.inputs)
    if (absl::Status s =
            forEachDocument(input, options.format, options.jsonKey,
                            options.splitLines, &state.bytesRead, onDocument);
        !s.ok())
      return s;
  const uint64_t sequences = writer->numSequences();
  if (absl::Status s = writer->Finish(); !s.ok())
    return s;

  state.elapsedSeconds = secondsSince(start);
  if (progress)
    progress(state);
  if (summary) {
    summary->documents = state.documents;
    summary->sequences = sequences;
    summary->tokens = state.tokens;
    summary->bytesRead = state.bytesRead;
    summary->elapsedSeconds = state.elapsedSeconds;
    summary->dtype = dtype;
    summary->tokenizer = tokenizer.name();
    summary->vocabSize = tokenizer.vocabSize();
    summary->binPath = options.outputPrefix + ".bin";
    summary->idxPath = options.outputPrefix + ".idx";
  }
  return absl::OkStatus();
}

absl::Status TrainTokenizer(const TrainTokenizerOptions &options) {
  if (options.inputs.empty())
    return absl::InvalidArgumentError("train-tokenizer: no input file");
  if (options.modelPrefix.empty())
    return absl::InvalidArgumentError("train-tokenizer: no model prefix");
  if (options.vocabSize <= 3 ||
      options.vocabSize > std::numeric_limits<int32_t>::max())
    return absl::InvalidArgumentError(
        absl::StrCat("train-tokenizer: vocabulary size ", options.vocabSize,
                     " is out of range (4 to 2^31-1)"));
  if (!(options.characterCoverage > 0 && options.characterCoverage <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("train-tokenizer: character coverage ",
                     options.characterCoverage, " is not in (0, 1]"));
  if (options.inputSentenceSize < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("train-tokenizer: input sentence size ",
                     options.inputSentenceSize, " is negative"));

  std::vector<std::string> jsonlInputs;
  std::vector<std::string> trainerInputs;
  for (const std::string &input : options.inputs) {
    if (absl::Status s = checkInputFile(input); !s.ok())
      return s;
    // SentencePiece takes its inputs as one comma-separated flag.
    if (absl::StrContains(input, ','))
      return absl::InvalidArgumentError(absl::StrCat(
          "train-tokenizer: input ", input,
          " has a comma in its name, which SentencePiece cannot take"));
    if (ResolveInputFormat(input, options.format) == InputFormat::kJsonl) {
      jsonlInputs.push_back(input);
      continue;
    }
    struct stat st;
    if (::stat(input.c_str(), &st) == 0 && st.st_size == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          input, ": empty input: the file is empty, so it holds no text"));
    trainerInputs.push_back(input);
  }

  // SentencePiece reads text files, one sentence per line: the texts of the
  // JSONL documents go to a temporary file next to the model (same file
  // system, and a name that does not vary, so that deterministic runs embed
  // the same input path in the model).
  const std::string extractPath = options.modelPrefix + ".train.txt.tmp";
  std::unique_ptr<RemoveOnExit> removeExtract;
  if (!jsonlInputs.empty()) {
    std::ofstream extract(extractPath, std::ios::binary | std::ios::trunc);
    if (!extract)
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot create temporary file ", extractPath));
    removeExtract = std::make_unique<RemoveOnExit>(extractPath);
    uint64_t bytes = 0;
    for (const std::string &input : jsonlInputs) {
      absl::Status s = forEachDocument(
          input, InputFormat::kJsonl, options.jsonKey, /*splitLines=*/false,
          &bytes, [&](absl::string_view text) {
            extract.write(text.data(), text.size());
            extract.put('\n');
            return absl::OkStatus();
          });
      if (!s.ok())
        return s;
    }
    extract.close();
    if (!extract)
      return absl::DataLossError(
          absl::StrCat("cannot write temporary file ", extractPath));
    trainerInputs.push_back(extractPath);
  }

  std::map<std::string, std::string> flags = {
      {"input", absl::StrJoin(trainerInputs, ",")},
      {"model_prefix", options.modelPrefix},
      {"model_type", "bpe"},
      {"vocab_size", absl::StrCat(options.vocabSize)},
      {"character_coverage", absl::StrCat(options.characterCoverage)},
      {"byte_fallback", options.byteFallback ? "true" : "false"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      // Lossless: the text is not NFKC-normalized and runs of spaces are
      // kept, so decode(encode(text)) == text, as for LLaMA's tokenizer.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"input_sentence_size", absl::StrCat(options.inputSentenceSize)},
      // Several threads split the pair counting differently from run to
      // run; one thread makes the merges, and so the model, reproducible.
      {"num_threads",
       options.deterministic
           ? "1"
           : absl::StrCat(std::max(1u, std::thread::hardware_concurrency()))},
      {"shuffle_input_sentence", options.deterministic ? "false" : "true"},
      {"minloglevel", "1"},
  };
  std::string error;
  const spbridge::Library *library = spbridge::GetLibrary(&error);
  if (!library)
    return absl::FailedPreconditionError(
        absl::StrCat("train-tokenizer: ", error));
  error = library->train(flags, options.deterministic ? 1234 : -1);
  if (!error.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "train-tokenizer: SentencePiece failed to train ",
        options.modelPrefix, ".model: ", error));
  return absl::OkStatus();
}

} // namespace braid::data
