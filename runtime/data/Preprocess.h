//===- Preprocess.h - Corpus files to an indexed dataset ---------*- C++ -*-===//
//
// What braid-data does, as a library: tokenize a corpus into Megatron's
// indexed dataset (the counterpart of Megatron-LM's
// tools/preprocess_data.py), and train the SentencePiece BPE tokenizer to do
// it with.
//
// Inputs are read in the order given; the documents of a file keep their
// order, so the same inputs always give the same dataset, byte for byte.
//  - JSONL: one JSON object per line, the document under a top-level key
//    (default "text"). Lines that are empty or only whitespace are skipped
//    (a trailing blank line is common); anything else must be an object with
//    that key holding a string.
//  - Text: the whole file is one document, or, with split_lines, every line
//    that is not blank is one (without its "\n" or "\r\n").
// An input that yields no document at all is an error: it is almost always
// a wrong path or a wrong format, not an intended empty corpus. A JSONL
// document whose text is "" is kept as an empty document (no sequence, no
// EOD), as Megatron's preprocessor does.
//
// Every document is one sequence; with append_eod the tokenizer's EOD id
// ends it. The dtype is BestDtypeForVocab(vocab size), as Megatron picks it.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_PREPROCESS_H
#define BRAID_RUNTIME_DATA_PREPROCESS_H

#include "runtime/data/IndexedDataset.h"
#include "runtime/data/Tokenizer.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace braid::data {

enum class InputFormat {
  /// By extension, per file: .jsonl and .json are JSONL, anything else text.
  kAuto,
  kJsonl,
  kText,
};

/// The format `path` is read as under `format` (kAuto resolved).
InputFormat ResolveInputFormat(const std::string &path, InputFormat format);
/// "jsonl" or "text" -> the format; InvalidArgument naming anything else.
absl::StatusOr<InputFormat> ParseInputFormat(absl::string_view name);

struct PreprocessOptions {
  std::vector<std::string> inputs;
  /// Writes PREFIX.bin and PREFIX.idx.
  std::string outputPrefix;
  InputFormat format = InputFormat::kAuto;
  std::string jsonKey = "text";
  /// Text inputs: every non-blank line is a document.
  bool splitLines = false;
  /// A SentencePiece .model; empty means the byte tokenizer.
  std::string tokenizerModel;
  bool appendEod = false;
  /// The least time between two progress reports.
  double progressIntervalSeconds = 0.5;
};

struct PreprocessProgress {
  uint64_t documents = 0;
  uint64_t tokens = 0;
  /// Bytes of the input files consumed so far.
  uint64_t bytesRead = 0;
  double elapsedSeconds = 0;
};

/// Called at most every progressIntervalSeconds while the inputs are read,
/// and once more at the end with the totals.
using ProgressFn = std::function<void(const PreprocessProgress &)>;

struct PreprocessSummary {
  uint64_t documents = 0;
  uint64_t sequences = 0;
  uint64_t tokens = 0;
  uint64_t bytesRead = 0;
  double elapsedSeconds = 0;
  DType dtype = DType::kUInt16;
  std::string tokenizer;
  int64_t vocabSize = 0;
  std::string binPath;
  std::string idxPath;
};

/// Tokenizes the inputs into OUTPUT_PREFIX.{bin,idx} with the tokenizer the
/// options name. Errors name the file and, for a bad line, its 1-based
/// number: a file that cannot be read, malformed JSON, a line that is not an
/// object, a missing key, a key that is not a string, an input with no
/// document. On any error no output file is left (and an existing dataset
/// at the prefix is left as it was). `summary`, if not null, receives the
/// totals on success.
absl::Status Preprocess(const PreprocessOptions &options,
                        ProgressFn progress = nullptr,
                        PreprocessSummary *summary = nullptr);

/// As above, with a tokenizer the caller built (options.tokenizerModel is
/// ignored).
absl::Status Preprocess(const PreprocessOptions &options,
                        const Tokenizer &tokenizer, ProgressFn progress,
                        PreprocessSummary *summary);

struct TrainTokenizerOptions {
  std::vector<std::string> inputs;
  InputFormat format = InputFormat::kAuto;
  std::string jsonKey = "text";
  /// Writes PREFIX.model and PREFIX.vocab.
  std::string modelPrefix;
  int64_t vocabSize = 0;
  /// The share of characters the vocabulary must cover; 1.0 suits English
  /// (and any corpus with a small alphabet), CJK corpora use ~0.9995.
  double characterCoverage = 1.0;
  /// Characters outside the vocabulary become their UTF-8 bytes (256 pieces
  /// <0x00>..<0xFF>) instead of <unk>, so no text is lost.
  bool byteFallback = true;
  /// One thread, no sampling of the input, a fixed seed: two runs on the
  /// same inputs and options write identical .model files.
  bool deterministic = true;
  /// At most this many lines (sentences) are used; 0 means all. Keeps
  /// training fast on large corpora.
  int64_t inputSentenceSize = 2000000;
};

/// Trains a SentencePiece BPE model with ids unk=0, bos=1, eos=2 and no pad.
/// JSONL inputs are first extracted, text only, to MODEL_PREFIX.train.txt.tmp,
/// which is removed afterwards whatever happens. Errors name the input (file
/// and line for JSONL) or carry SentencePiece's message (a vocabulary too
/// small for the characters of the corpus, say).
absl::Status TrainTokenizer(const TrainTokenizerOptions &options);

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_PREPROCESS_H
