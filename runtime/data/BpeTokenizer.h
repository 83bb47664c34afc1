//===- BpeTokenizer.h - GPT-2-style byte-level BPE --------------*- C++ -*-===//
//
// The byte-level BPE tokenizer of GPT-2 and of the Hugging Face models that
// ship one (tokenizer.json, or vocab.json + merges.txt), with the semantics
// of Hugging Face's `tokenizers` library:
//
//  1. Added tokens (tokenizer.json's "added_tokens") are cut out of the text
//     first, verbatim, leftmost-longest: those with "normalized": false in a
//     first pass over the text, the others in a second pass over what is
//     left. Each becomes its own id.
//  2. The rest is pre-tokenized: optionally split by a pattern (GPT-2's, or
//     BLOOM's Split pre-tokenizer), a space prepended to each piece that
//     does not start with one (ByteLevel's add_prefix_space), and split by
//     GPT-2's pattern (ByteLevel's use_regex),
//
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
//     matched by hand over code points (\p{L}, \p{N}: UnicodeTables.inc; \s:
//     Unicode's White_Space).
//  3. Each piece's UTF-8 bytes become GPT-2's byte characters (printable
//     bytes stand for themselves, the others for U+0100 onwards), one
//     symbol each, and are merged pair by pair, the pair of lowest merge
//     rank first (the leftmost among equals), until no adjacent pair has a
//     merge. With ignore_merges, a piece that is a token is that token. A
//     byte whose character has no token becomes unk_token (one for a run,
//     with fuse_unk), or, without an unk_token, nothing: as `tokenizers`.
//
// decode maps each token's characters back to bytes (a token with a
// character outside GPT-2's byte characters, such as an added token with a
// space, stands for its own UTF-8), and makes text of the bytes as
// `tokenizers` does: a malformed UTF-8 sequence becomes U+FFFD.
//
// Text that is not valid UTF-8 (which `tokenizers` cannot be given) is
// encoded all the same: each malformed byte counts as one character that is
// neither letter, number nor space, and round-trips through decodeBytes.
//
// Whatever in a tokenizer.json this class does not implement (another model
// type, a normalizer, another pre-tokenizer or split pattern, BPE dropout,
// byte fallback, single-word added tokens, another decoder or
// post-processor) is refused with InvalidArgument naming the field and its
// value, never ignored. "truncation" and "padding" are accepted and not
// applied: they are per-call options in transformers, off unless asked for.
//
// Immutable once loaded; encode and decode are const and thread-safe.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_BPETOKENIZER_H
#define BRAID_RUNTIME_DATA_BPETOKENIZER_H

#include "runtime/data/Tokenizer.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid::data {

/// A token cut out of the text before pre-tokenization, as tokenizer.json's
/// "added_tokens" (or transformers' added_tokens_decoder) describes it.
struct BpeAddedToken {
  int32_t id = -1;
  std::string content;
  /// Skipped by decode(ids, /*skipSpecialTokens=*/true).
  bool special = false;
  /// Whitespace before (lstrip) / after (rstrip) a match belongs to the
  /// match, and so is not encoded.
  bool lstrip = false;
  bool rstrip = false;
  /// Matched in the second pass (after the tokens with normalized false).
  bool normalized = false;
};

/// What the loaders do not find in the files themselves.
struct ByteLevelBpeOptions {
  /// LoadFromFiles only (tokenizer.json says it itself): ByteLevel's
  /// add_prefix_space, and the added tokens.
  bool addPrefixSpace = false;
  std::vector<BpeAddedToken> addedTokens;
  /// The end-of-document id (eodId()): this id when not negative, else the
  /// id of the token eodToken. Loading fails with FailedPrecondition (and
  /// so never with InvalidArgument, which is about the files) when the one
  /// used names no token.
  int32_t eodId = -1;
  std::string eodToken = "<|endoftext|>";
};

/// The special tokens tokenizer.json's post-processor (TemplateProcessing)
/// puts around a single sequence: "<s> $A" is prefix {id of <s>}.
struct BpeSequenceTemplate {
  /// Whether tokenizer.json has a TemplateProcessing at all.
  bool present = false;
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

class ByteLevelBpeTokenizer final : public Tokenizer {
public:
  /// GPT-2's files: vocab.json (an object token -> id) and merges.txt (one
  /// merge "a b" per line, by rank; a first line "#version..." is skipped).
  /// NotFound naming a missing file; InvalidArgument naming the file and
  /// line or token for a malformed one, a merge whose tokens (or their
  /// concatenation) are not in the vocabulary, an id given twice.
  static absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>>
  LoadFromFiles(const std::string &vocabJsonPath,
                const std::string &mergesTxtPath,
                const ByteLevelBpeOptions &options = {});
  /// A tokenizer.json whose model is BPE, pre-tokenizer ByteLevel (alone or
  /// in a Sequence after Splits by GPT-2's or BLOOM's pattern), decoder
  /// ByteLevel. Only options.eodId / eodToken are used.
  static absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>>
  LoadFromTokenizerJson(const std::string &path,
                        const ByteLevelBpeOptions &options = {});

  /// The ids of `text`, without the post-processor's special tokens (as
  /// `tokenizers`' encode(text, add_special_tokens=False)).
  absl::StatusOr<std::vector<int32_t>>
  encode(absl::string_view text) const override;
  /// The text of `ids`, special tokens as their content (transformers'
  /// default, skip_special_tokens=False). InvalidArgument naming the first
  /// id that has no token, and its position.
  absl::StatusOr<std::string>
  decode(absl::Span<const int32_t> ids) const override;
  absl::StatusOr<std::string> decode(absl::Span<const int32_t> ids,
                                     bool skipSpecialTokens) const;
  /// The bytes of `ids`, malformed UTF-8 left as it is: for output printed a
  /// token at a time, where one character's bytes may span tokens.
  absl::StatusOr<std::string> decodeBytes(absl::Span<const int32_t> ids,
                                          bool skipSpecialTokens = false) const;

  /// One more than the largest id of the vocabulary and the added tokens.
  int64_t vocabSize() const override { return vocabSize_; }
  int32_t eodId() const override { return eodId_; }
  /// "bpe:PATH" (tokenizer.json) or "bpe:VOCAB+MERGES".
  std::string name() const override { return "bpe:" + source_; }

  /// The id of a token (an added token's content, or a vocabulary entry in
  /// GPT-2's byte characters), -1 if there is none.
  int32_t tokenToId(absl::string_view token) const;
  /// Whether `id` is a special added token.
  bool isSpecial(int32_t id) const;
  const BpeSequenceTemplate &sequenceTemplate() const { return template_; }

private:
  friend class BpeBuilder;
  ByteLevelBpeTokenizer() = default;

  /// The pre-tokenizer's steps, in order.
  enum class SplitStep : uint8_t {
    kGpt2Pattern,  // Split by GPT-2's pattern (or ByteLevel's use_regex)
    kBloomPattern, // Split by BLOOM's ` ?[^(\s|[.,!?…。，、।۔،])]+`
    kPrefixSpace,  // ByteLevel's add_prefix_space
  };

  /// Appends the ids of one pre-tokenized piece (raw UTF-8 bytes).
  absl::Status encodePiece(absl::string_view piece,
                           std::vector<int32_t> *ids) const;
  /// Appends the ids of a stretch of text without added tokens.
  absl::Status encodeSegment(absl::string_view segment,
                             std::vector<int32_t> *ids) const;

  /// A set of added tokens matched in one pass, with the candidates for
  /// each first byte, longest first.
  struct AddedTokenSet {
    std::vector<BpeAddedToken> tokens;
    std::array<std::vector<uint32_t>, 256> byFirstByte;
  };
  /// Splits `text` at the matches of `set`, appending (text, -1) for the
  /// text between them and (match, id) for each match.
  static void
  splitAdded(absl::string_view text, const AddedTokenSet &set,
             std::vector<std::pair<absl::string_view, int32_t>> *out);

  std::string source_;
  /// Token -> id, of the vocabulary (GPT-2's byte characters).
  absl::flat_hash_map<std::string, int32_t> vocab_;
  /// Content -> id, of the added tokens.
  absl::flat_hash_map<std::string, int32_t> addedIds_;
  /// Id -> the bytes it decodes to; kHasToken / kSpecial.
  std::vector<std::string> idBytes_;
  std::vector<uint8_t> idFlags_;
  static constexpr uint8_t kHasToken = 1, kSpecial = 2;
  /// (left id << 32 | right id) -> (rank, merged id).
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  /// The vocabulary id of each byte's character, -1 where there is none.
  std::array<int32_t, 256> byteIds_{};
  std::vector<SplitStep> steps_;
  /// First pass (normalized false), second pass (normalized true).
  AddedTokenSet addedRaw_, addedNormalized_;
  int32_t unkId_ = -1;
  std::string unkToken_;
  bool fuseUnk_ = false;
  bool ignoreMerges_ = false;
  BpeSequenceTemplate template_;
  int64_t vocabSize_ = 0;
  int32_t eodId_ = -1;
};

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_BPETOKENIZER_H
