//===- ChatTemplate.h - Conversations as prompt and answers -----*- C++ -*-===//
//
// The chat templates that `braid chat --template` wraps a user's turn in and
// that `braid-data preprocess --handler` renders instruction data with, so
// that a model tuned on the data sees at inference the text it was trained
// on. One definition serves both.
//
// A conversation is an optional system text s and turns i = 1, 2, ... of a
// user text u and an assistant text a. It is rendered as segments, each
// encoded by the tokenizer on its own and concatenated, so that where one
// segment ends is a token boundary: for each turn a prompt segment (not
// trained) and an answer segment (trained):
//  - llama2: prompt [bos] + encode("[INST] <<SYS>>\n" s "\n<</SYS>>\n\n" u
//    " [/INST]") in turn 1 when s is not empty, else [bos] + encode("[INST] "
//    u " [/INST]"); answer encode(a) + [eos].
//  - alpaca: prompt (turn 1: [bos] + encode(s "\n\n" when s is not empty,
//    then "### Instruction:\n" u "\n\n### Response:\n"); later turns:
//    encode("\n\n### Instruction:\n" u "\n\n### Response:\n")); answer
//    encode(a) + [eos].
//  - plain: prompt (turn 1: [bos] + encode(s "\n" when s is not empty, then
//    "User: " u "\nAssistant:"); later turns encode("\nUser: " u
//    "\nAssistant:")); answer encode(" " a) + [eos].
// [bos] is left out where the caller gives no BOS id (bos < 0).
//
// braid chat sends the prompt segments of a conversation without a system
// text; with llama2 it also puts the end id before a later turn's prompt,
// which in training data is the last token of the answer before.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_CHATTEMPLATE_H
#define BRAID_RUNTIME_DATA_CHATTEMPLATE_H

#include "runtime/data/Tokenizer.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::data {

/// One exchange: the user's text and the assistant's answer.
struct ChatTurn {
  std::string user;
  std::string assistant;
};

/// A conversation as the templates take it.
struct Conversation {
  /// Empty when there is none.
  std::string system;
  std::vector<ChatTurn> turns;
};

/// The special ids a template puts around the text; -1 for none.
struct ChatSpecialIds {
  /// Put before a prompt where the template has [bos].
  int32_t bos = -1;
  /// Ends every answer; required by encodeAnswer.
  int32_t eos = -1;
};

/// A run of tokens that is trained (an answer) or not (a prompt).
struct ChatSegment {
  std::vector<int32_t> ids;
  bool trained = false;
};

class ChatTemplate {
public:
  enum class Kind { kAlpaca, kLlama2, kPlain };

  explicit ChatTemplate(Kind kind) : kind_(kind) {}

  /// "alpaca", "llama2" or "plain"; InvalidArgument naming anything else.
  static absl::StatusOr<ChatTemplate> Parse(absl::string_view name);

  Kind kind() const { return kind_; }
  /// The template's name, as Parse takes it.
  absl::string_view name() const;

  /// The text of turn `turn`'s (1-based) prompt segment, without [bos];
  /// `system` counts only in turn 1.
  std::string promptText(int64_t turn, absl::string_view system,
                         absl::string_view user) const;
  /// Whether turn `turn`'s prompt segment starts with [bos].
  bool promptHasBos(int64_t turn) const;
  /// The text of an answer segment, without [eos].
  std::string answerText(absl::string_view answer) const;

  /// The ids of turn `turn`'s prompt segment: ids.bos (when the turn has
  /// [bos] and ids.bos >= 0), then the encoded promptText.
  absl::StatusOr<std::vector<int32_t>>
  encodePrompt(const Tokenizer &tokenizer, const ChatSpecialIds &ids,
               int64_t turn, absl::string_view system,
               absl::string_view user) const;
  /// The ids of an answer segment: the encoded answerText, then ids.eos.
  /// InvalidArgument when ids.eos < 0.
  absl::StatusOr<std::vector<int32_t>>
  encodeAnswer(const Tokenizer &tokenizer, const ChatSpecialIds &ids,
               absl::string_view answer) const;
  /// The segments of `conversation`: prompt, answer, prompt, answer, ...
  /// InvalidArgument for a conversation without turns.
  absl::StatusOr<std::vector<ChatSegment>>
  encodeConversation(const Tokenizer &tokenizer, const ChatSpecialIds &ids,
                     const Conversation &conversation) const;

private:
  Kind kind_;
};

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_CHATTEMPLATE_H
