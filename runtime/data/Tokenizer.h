//===- Tokenizer.h - Text to token ids for preprocessing ---------*- C++ -*-===//
//
// The tokenizers that braid-data uses to turn documents into the token ids an
// indexed dataset stores. A tokenizer is immutable once built; encode and
// decode are const and may be called from several threads.
//
//  - ByteTokenizer: the UTF-8 bytes of the text, ids 0..255, and one extra id
//    (256) for end-of-document. Needs no model file, so it is what tests and
//    first runs use.
//  - SentencePieceTokenizer: a SentencePiece model (.model), as trained by
//    TrainTokenizer or by anyone else (LLaMA's tokenizer.model loads as is).
//
// The SentencePiece headers are not included here or in Tokenizer.cpp: they
// declare their own `absl` namespace, which collides with Abseil's (see
// SentencePieceBridge.h).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_TOKENIZER_H
#define BRAID_RUNTIME_DATA_TOKENIZER_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid::data {

namespace spbridge {
class Processor;
} // namespace spbridge

class Tokenizer {
public:
  virtual ~Tokenizer();
  /// The ids of `text`, without end-of-document (the caller appends eodId()
  /// where a document ends).
  virtual absl::StatusOr<std::vector<int32_t>>
  encode(absl::string_view text) const = 0;
  /// The text of `ids`. InvalidArgument naming the first id outside
  /// [0, vocabSize()).
  virtual absl::StatusOr<std::string>
  decode(absl::Span<const int32_t> ids) const = 0;
  /// The number of ids; every id encode returns, and eodId(), is below it.
  virtual int64_t vocabSize() const = 0;
  /// The id that marks the end of a document.
  virtual int32_t eodId() const = 0;
  /// A short description for messages and summaries ("byte",
  /// "sentencepiece:PATH").
  virtual std::string name() const = 0;
};

/// Ids 0..255 are the bytes of the text; 256 is end-of-document.
class ByteTokenizer final : public Tokenizer {
public:
  static constexpr int32_t kEodId = 256;
  static constexpr int64_t kVocabSize = 257;

  absl::StatusOr<std::vector<int32_t>>
  encode(absl::string_view text) const override;
  /// Concatenates the bytes of the ids; the EOD id decodes to nothing, so
  /// that a stored document with its EOD decodes to its text.
  absl::StatusOr<std::string>
  decode(absl::Span<const int32_t> ids) const override;
  int64_t vocabSize() const override { return kVocabSize; }
  int32_t eodId() const override { return kEodId; }
  std::string name() const override { return "byte"; }
};

class SentencePieceTokenizer final : public Tokenizer {
public:
  /// Loads the model at `path`. NotFound / InvalidArgument naming the file if
  /// it is missing or not a SentencePiece model; FailedPrecondition if the
  /// model has no end-of-sentence piece (eos_id -1), since a dataset needs
  /// one to mark where documents end.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>>
  Load(const std::string &path);
  ~SentencePieceTokenizer() override;

  absl::StatusOr<std::vector<int32_t>>
  encode(absl::string_view text) const override;
  /// Control pieces (bos, eos) decode to nothing, as SentencePiece does.
  absl::StatusOr<std::string>
  decode(absl::Span<const int32_t> ids) const override;
  int64_t vocabSize() const override { return vocabSize_; }
  int32_t eodId() const override { return eodId_; }
  std::string name() const override { return "sentencepiece:" + path_; }

private:
  SentencePieceTokenizer() = default;

  std::string path_;
  std::unique_ptr<spbridge::Processor> processor_;
  int64_t vocabSize_ = 0;
  int32_t eodId_ = -1;
};

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_TOKENIZER_H
