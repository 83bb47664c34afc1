//===- Tokenizer.cpp - Text to token ids for preprocessing ----------------===//

#include "runtime/data/Tokenizer.h"

#include "absl/strings/str_cat.h"

#include "runtime/data/SentencePieceBridge.h"

#include <sys/stat.h>

namespace braid::data {

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::vector<int32_t>>
ByteTokenizer::encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (char c : text)
    ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

absl::StatusOr<std::string>
ByteTokenizer::decode(absl::Span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == kEodId)
      continue;
    if (ids[i] < 0 || ids[i] > 255)
      return absl::InvalidArgumentError(
          absl::StrCat("byte tokenizer: id ", ids[i], " at position ", i,
                       " is outside the vocabulary [0, ", kVocabSize, ")"));
    text.push_back(static_cast<char>(ids[i]));
  }
  return text;
}

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>>
SentencePieceTokenizer::Load(const std::string &path) {
  // SentencePiece's own message for a missing file does not say that it was
  // looking for a tokenizer model; check first so the message is ours.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot open SentencePiece model ", path));
  if (S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(
        "SentencePiece model ", path, " is a directory, not a .model file"));

  std::unique_ptr<SentencePieceTokenizer> tokenizer(
      new SentencePieceTokenizer());
  tokenizer->path_ = path;
  std::string error;
  const spbridge::Library *library = spbridge::GetLibrary(&error);
  if (!library)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load SentencePiece model ", path, ": ", error));
  tokenizer->processor_ = library->newProcessor();
  error = tokenizer->processor_->load(path);
  if (!error.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load SentencePiece model ", path,
                     " (not a valid .model file?): ", error));
  tokenizer->vocabSize_ = tokenizer->processor_->pieceSize();
  tokenizer->eodId_ = tokenizer->processor_->eosId();
  if (tokenizer->eodId_ < 0 || tokenizer->eodId_ >= tokenizer->vocabSize_)
    return absl::FailedPreconditionError(absl::StrCat(
        "SentencePiece model ", path,
        " has no end-of-sentence piece (eos_id ", tokenizer->eodId_,
        "); a dataset needs one to mark where documents end"));
  return tokenizer;
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::vector<int32_t>>
SentencePieceTokenizer::encode(absl::string_view text) const {
  std::vector<int> ids;
  std::string error =
      processor_->encode(std::string_view(text.data(), text.size()), &ids);
  if (!error.empty())
    return absl::InternalError(absl::StrCat(
        "SentencePiece model ", path_, ": encode failed: ", error));
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::string>
SentencePieceTokenizer::decode(absl::Span<const int32_t> ids) const {
  // SentencePiece checks the range itself, but its message does not say
  // which position was wrong.
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocabSize_)
      return absl::InvalidArgumentError(absl::StrCat(
          "SentencePiece model ", path_, ": id ", ids[i], " at position ", i,
          " is outside the vocabulary [0, ", vocabSize_, ")"));
  std::string text;
  std::string error =
      processor_->decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!error.empty())
    return absl::InternalError(absl::StrCat(
        "SentencePiece model ", path_, ": decode failed: ", error));
  return text;
}

} // namespace braid::data
