//===- ChatTemplate.cpp - Conversations as prompt and answer tokens -------===//

#include "runtime/data/ChatTemplate.h"

#include "absl/strings/str_cat.h"

namespace braid::data {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(absl::string_view name) {
  if (name == "alpaca")
    return ChatTemplate(Kind::kAlpaca);
  if (name == "llama2")
    return ChatTemplate(Kind::kLlama2);
  if (name == "plain")
    return ChatTemplate(Kind::kPlain);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown chat template \"", name,
                   "\" (expected alpaca, llama2 or plain)"));
}

absl::string_view ChatTemplate::name() const {
  switch (kind_) {
  case Kind::kAlpaca:
    return "alpaca";
  case Kind::kLlama2:
    return "llama2";
  case Kind::kPlain:
    return "plain";
  }
  return "unknown";
}

std::string ChatTemplate::promptText(int64_t turn, absl::string_view system,
                                     absl::string_view user) const {
  const bool first = turn == 1;
  switch (kind_) {
  case Kind::kLlama2:
    if (first && !system.empty())
      return absl::StrCat("[INST] <<SYS>>\n", system, "\n<</SYS>>\n\n", user,
                          " [/INST]");
    return absl::StrCat("[INST] ", user, " [/INST]");
  case Kind::kAlpaca: {
    std::string lead =
        first ? (system.empty() ? std::string() : absl::StrCat(system, "\n\n"))
              : std::string("\n\n");
    return absl::StrCat(lead, "### Instruction:\n", user,
                        "\n\n### Response:\n");
  }
  case Kind::kPlain: {
    std::string lead =
        first ? (system.empty() ? std::string() : absl::StrCat(system, "\n"))
              : std::string("\n");
    return absl::StrCat(lead, "User: ", user, "\nAssistant:");
  }
  }
  return std::string();
}

bool ChatTemplate::promptHasBos(int64_t turn) const {
  return kind_ == Kind::kLlama2 || turn == 1;
}

std::string ChatTemplate::answerText(absl::string_view answer) const {
  if (kind_ == Kind::kPlain)
    return absl::StrCat(" ", answer);
  return std::string(answer);
}

absl::StatusOr<std::vector<int32_t>> ChatTemplate::encodePrompt(
    const Tokenizer &tokenizer, const ChatSpecialIds &ids, int64_t turn,
    absl::string_view system, absl::string_view user) const {
  std::vector<int32_t> out;
  if (promptHasBos(turn) && ids.bos >= 0)
    out.push_back(ids.bos);
  absl::StatusOr<std::vector<int32_t>> encoded =
      tokenizer.encode(promptText(turn, system, user));
  if (!encoded.ok())
    return encoded.status();
  out.insert(out.end(), encoded->begin(), encoded->end());
  return out;
}

absl::StatusOr<std::vector<int32_t>>
ChatTemplate::encodeAnswer(const Tokenizer &tokenizer,
                           const ChatSpecialIds &ids,
                           absl::string_view answer) const {
  if (ids.eos < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("the ", name(),
                     " template ends an answer with the "
                     "end id, and tokenizer ",
                     tokenizer.name(), " has none"));
  absl::StatusOr<std::vector<int32_t>> out =
      tokenizer.encode(answerText(answer));
  if (!out.ok())
    return out.status();
  out->push_back(ids.eos);
  return out;
}

absl::StatusOr<std::vector<ChatSegment>>
ChatTemplate::encodeConversation(const Tokenizer &tokenizer,
                                 const ChatSpecialIds &ids,
                                 const Conversation &conversation) const {
  if (conversation.turns.empty())
    return absl::InvalidArgumentError(
        "empty conversation: no user turn answered by the assistant");
  std::vector<ChatSegment> segments;
  segments.reserve(2 * conversation.turns.size());
  for (size_t i = 0; i < conversation.turns.size(); ++i) {
    const ChatTurn &turn = conversation.turns[i];
    absl::StatusOr<std::vector<int32_t>> prompt =
        encodePrompt(tokenizer, ids, static_cast<int64_t>(i) + 1,
                     conversation.system, turn.user);
    if (!prompt.ok())
      return prompt.status();
    absl::StatusOr<std::vector<int32_t>> answer =
        encodeAnswer(tokenizer, ids, turn.assistant);
    if (!answer.ok())
      return answer.status();
    segments.push_back({std::move(*prompt), false});
    segments.push_back({std::move(*answer), true});
  }
  return segments;
}

} // namespace braid::data
