//===- ModelTokenizer.h - A model directory's tokenizer ---------*- C++ -*-===//
//
// The tokenizer of a Hugging Face model directory and the special ids that
// generating from the model needs, resolved as transformers resolves them.
//
// The tokenizer, the first of:
//  1. tokenizer.json: a byte-level BPE (ByteLevelBpeTokenizer). When Braid
//     does not implement it (InvalidArgument: LLaMA's, a SentencePiece model
//     converted to BPE with byte fallback, is one) and tokenizer.model is
//     there too, tokenizer.model is used instead, and `note` says why;
//  2. vocab.json + merges.txt: GPT-2's files. The added tokens are
//     tokenizer_config.json's added_tokens_decoder, added_tokens.json's and
//     the named special tokens (below) that are in the vocabulary;
//     add_prefix_space is tokenizer_config.json's (default false);
//  3. tokenizer.model: SentencePiece (SentencePieceTokenizer), encoding as
//     the SentencePiece library does. That is transformers' LlamaTokenizer
//     with legacy=True (the "▁" before the first word, byte-fallback pieces
//     <0xNN> decoding to their bytes, whitespace runs kept); transformers 5
//     (and legacy=False) puts no "▁" before a text that starts with a space,
//     and cuts special tokens such as "<s>" out of the text, which Braid
//     encodes as text.
//
// The named special tokens (bos_token, eos_token) are tokenizer_config.json's
// (a string, or an object with "content"); special_tokens_map.json's
// override them unless tokenizer_config.json has added_tokens_decoder
// (transformers 5's rule). Unset, they are "<|endoftext|>" for a BPE and
// "<s>" / "</s>" for SentencePiece (GPT2Tokenizer's and LlamaTokenizer's
// defaults) where the vocabulary has them.
//
// addBos, and what goes around a prompt: tokenizer.json's post-processor,
// where it has a TemplateProcessing ("<s> $A": BOS); otherwise
// tokenizer_config.json's add_bos_token / add_eos_token, by default true /
// false for SentencePiece and false / false for a BPE (LlamaTokenizer's and
// GPT2Tokenizer's defaults).
//
// bosId: the template's token; else the id of bos_token; else
// generation_config.json's bos_token_id; else config.json's.
//
// eosIds (generation stops at any of them): generation_config.json's
// eos_token_id (an id or a list, as transformers' generate reads it); else
// config.json's; else the id of eos_token; else the tokenizer's eodId().
//
// Every id is checked against the tokenizer's vocabulary.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_MODELTOKENIZER_H
#define BRAID_RUNTIME_DATA_MODELTOKENIZER_H

#include "runtime/data/Tokenizer.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace braid::data {

struct ModelTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  /// The beginning-of-sequence id, -1 when none resolves.
  int32_t bosId = -1;
  /// The first of eosIds, -1 when there is none.
  int32_t eosId = -1;
  /// The ids that end generation.
  std::vector<int32_t> eosIds;
  /// Whether a prompt starts with bosId (bosId >= 0 then).
  bool addBos = false;
  /// The ids the tokenizer appends to a prompt (a template "$A </s>", or
  /// add_eos_token); almost always none.
  std::vector<int32_t> promptSuffix;
  /// The files the tokenizer came from: "tokenizer.json",
  /// "vocab.json + merges.txt" or "tokenizer.model".
  std::string source;
  /// Why tokenizer.json was set aside for tokenizer.model; usually empty.
  std::string note;
};

/// Loads the tokenizer of the model directory `dir` (see above). NotFound
/// naming the directory when it is missing or holds no tokenizer;
/// InvalidArgument naming the file and field of anything malformed or not
/// implemented; FailedPrecondition when the tokenizer adds a BOS that does
/// not resolve to an id.
absl::StatusOr<ModelTokenizer> LoadModelTokenizer(const std::string &dir);

/// The ids of a prompt as the model's tokenizer makes them (transformers'
/// tokenizer(text) with add_special_tokens=True): bosId first when addBos,
/// then the text's ids, then promptSuffix.
absl::StatusOr<std::vector<int32_t>> EncodePrompt(const ModelTokenizer &model,
                                                  absl::string_view text);

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_MODELTOKENIZER_H
