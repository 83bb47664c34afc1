//===- Instruction.cpp - Instruction data with a loss mask ----------------===//
//
// Records are parsed with protobuf's JSON parser into google.protobuf.Struct
// (a .json array into a ListValue), as Preprocess.cpp parses JSONL.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Json.h"
#include "runtime/data/Instruction.h"

#include "runtime/data/ModelTokenizer.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <sys/stat.h>

namespace braid::data {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;
using Clock = std::chrono::steady_clock;

/// The record each handler reads, for messages.
absl::string_view recordShape(InstructionHandler handler) {
  switch (handler) {
  case InstructionHandler::kAlpaca:
    return "{instruction, input?, output, system?, history?}";
  case InstructionHandler::kShareGpt:
    return "{conversations: [{from, value}, ...], system?}";
  case InstructionHandler::kBelle:
    return "{instruction, input?, output}";
  case InstructionHandler::kMoss:
    return "{meta_instruction?, chat: {turn_1: {Human, MOSS}, ...}}";
  case InstructionHandler::kPlain:
    return "{prompt, response}";
  }
  return "";
}

/// Reads the fields of one record and words its errors.
class RecordReader {
public:
  RecordReader(InstructionHandler handler, absl::string_view where)
      : handler_(handler), where_(where) {}

  absl::Status error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", message));
  }

  /// The field `key` of `object` (`path` names it in messages); null and
  /// an error when it is absent or JSON null.
  absl::StatusOr<const Value *> required(const Struct &object,
                                         absl::string_view key,
                                         absl::string_view path) const {
    auto it = object.fields().find(std::string(key));
    if (it == object.fields().end() ||
        it->second.kind_case() == Value::kNullValue) {
      std::vector<std::string> keys;
      for (const auto &entry : object.fields())
        keys.push_back(absl::StrCat("\"", entry.first, "\""));
      std::sort(keys.begin(), keys.end());
      return error(absl::StrCat(
          it == object.fields().end() ? "missing field \""
                                      : "null in required field \"",
          path, "\" (the ", InstructionHandlerName(handler_), " handler reads ",
          recordShape(handler_), "; the object's keys: ",
          keys.empty() ? "none" : absl::StrJoin(keys, ", "), ")"));
    }
    return &it->second;
  }

  /// The field, or null when it is absent or JSON null.
  static const Value *optional(const Struct &object, absl::string_view key) {
    auto it = object.fields().find(std::string(key));
    if (it == object.fields().end() ||
        it->second.kind_case() == Value::kNullValue)
      return nullptr;
    return &it->second;
  }

  absl::StatusOr<std::string> string(const Value &value,
                                     absl::string_view path) const {
    if (value.kind_case() != Value::kStringValue)
      return error(absl::StrCat("field \"", path, "\" is ",
                                common::JsonKindName(value), ", not a string"));
    return value.string_value();
  }

  absl::StatusOr<std::string> requiredString(const Struct &object,
                                             absl::string_view key,
                                             absl::string_view path) const {
    absl::StatusOr<const Value *> value = required(object, key, path);
    if (!value.ok())
      return value.status();
    return string(**value, path);
  }
  absl::StatusOr<std::string> requiredString(const Struct &object,
                                             absl::string_view key) const {
    return requiredString(object, key, key);
  }

  /// "" when the field is absent or null.
  absl::StatusOr<std::string> optionalString(const Struct &object,
                                             absl::string_view key) const {
    const Value *value = optional(object, key);
    if (!value)
      return std::string();
    return string(*value, key);
  }

private:
  InstructionHandler handler_;
  std::string where_;
};

/// Declares `lhs`, the string `expr` gives, or returns its error.
#define BRAID_ASSIGN_OR_RETURN_STRING(lhs, expr)                               \
  absl::StatusOr<std::string> lhs##_or = (expr);                               \
  if (!lhs##_or.ok())                                                          \
    return lhs##_or.status();                                                  \
  std::string lhs = std::move(*lhs##_or)

/// instruction, and "\n\n" input after it when input is not empty.
std::string withInput(const std::string &instruction,
                      const std::string &input) {
  return input.empty() ? instruction : absl::StrCat(instruction, "\n\n", input);
}

absl::StatusOr<Conversation> alpacaRecord(const RecordReader &r,
                                          const Struct &record) {
  BRAID_ASSIGN_OR_RETURN_STRING(instruction,
                                r.requiredString(record, "instruction"));
  BRAID_ASSIGN_OR_RETURN_STRING(input, r.optionalString(record, "input"));
  BRAID_ASSIGN_OR_RETURN_STRING(output, r.requiredString(record, "output"));
  BRAID_ASSIGN_OR_RETURN_STRING(system, r.optionalString(record, "system"));
  Conversation conversation;
  conversation.system = std::move(system);
  if (const Value *history = RecordReader::optional(record, "history")) {
    if (history->kind_case() != Value::kListValue)
      return r.error(absl::StrCat("field \"history\" is ",
                                  common::JsonKindName(*history),
                                  ", not an array of [user, assistant] "
                                  "pairs"));
    const auto &pairs = history->list_value().values();
    for (int i = 0; i < pairs.size(); ++i) {
      const std::string path = absl::StrCat("history[", i, "]");
      if (pairs[i].kind_case() != Value::kListValue ||
          pairs[i].list_value().values_size() != 2)
        return r.error(
            absl::StrCat("field \"", path, "\" is ",
                         pairs[i].kind_case() == Value::kListValue
                             ? absl::StrCat("an array of ",
                                            pairs[i].list_value().values_size())
                             : std::string(common::JsonKindName(pairs[i])),
                         ", not a [user, assistant] pair of strings"));
      ChatTurn turn;
      for (int k = 0; k < 2; ++k) {
        absl::StatusOr<std::string> text = r.string(
            pairs[i].list_value().values(k), absl::StrCat(path, "[", k, "]"));
        if (!text.ok())
          return text.status();
        (k == 0 ? turn.user : turn.assistant) = std::move(*text);
      }
      conversation.turns.push_back(std::move(turn));
    }
  }
  conversation.turns.push_back({withInput(instruction, input), output});
  return conversation;
}

enum class Role { kUser, kAssistant };

absl::string_view roleName(Role role) {
  return role == Role::kUser ? "user" : "assistant";
}

/// The conversation of turns that must alternate user, assistant, ...,
/// starting with the user and ending with the assistant. `names[k]` names
/// turn k in messages.
absl::StatusOr<Conversation>
alternating(const RecordReader &r, std::string system,
            const std::vector<std::pair<Role, std::string>> &turns,
            const std::vector<std::string> &names, absl::string_view field) {
  if (turns.empty())
    return r.error(absl::StrCat("empty conversation: field \"", field,
                                "\" holds no user or assistant turn"));
  for (size_t k = 0; k < turns.size(); ++k) {
    const Role due = k % 2 == 0 ? Role::kUser : Role::kAssistant;
    if (turns[k].first != due)
      return r.error(absl::StrCat(names[k], " is the ",
                                  roleName(turns[k].first), "'s where the ",
                                  roleName(due),
                                  "'s turn is due: turns must alternate user, "
                                  "assistant, ..., starting with the user"));
  }
  if (turns.size() % 2 != 0)
    return r.error(absl::StrCat("the conversation ends with the user's ",
                                names.back(),
                                ": it must end with the assistant's answer"));
  Conversation conversation;
  conversation.system = std::move(system);
  for (size_t k = 0; k < turns.size(); k += 2)
    conversation.turns.push_back({turns[k].second, turns[k + 1].second});
  return conversation;
}

absl::StatusOr<Conversation> shareGptRecord(const RecordReader &r,
                                            const Struct &record) {
  BRAID_ASSIGN_OR_RETURN_STRING(system, r.optionalString(record, "system"));
  absl::StatusOr<const Value *> messages =
      r.required(record, "conversations", "conversations");
  if (!messages.ok())
    return messages.status();
  if ((*messages)->kind_case() != Value::kListValue)
    return r.error(absl::StrCat("field \"conversations\" is ",
                                common::JsonKindName(**messages),
                                ", not an array of {from, value} messages"));
  const auto &list = (*messages)->list_value().values();
  std::vector<std::pair<Role, std::string>> turns;
  std::vector<std::string> names;
  for (int i = 0; i < list.size(); ++i) {
    const std::string path = absl::StrCat("conversations[", i, "]");
    if (list[i].kind_case() != Value::kStructValue)
      return r.error(absl::StrCat("field \"", path, "\" is ",
                                  common::JsonKindName(list[i]),
                                  ", not a {from, value} object"));
    const Struct &message = list[i].struct_value();
    BRAID_ASSIGN_OR_RETURN_STRING(
        from, r.requiredString(message, "from", path + ".from"));
    BRAID_ASSIGN_OR_RETURN_STRING(
        value, r.requiredString(message, "value", path + ".value"));
    if (from == "system") {
      if (i != 0)
        return r.error(absl::StrCat(
            "field \"", path,
            ".from\" is \"system\": only the first message may be the "
            "system's"));
      system = std::move(value);
      continue;
    }
    Role role;
    if (from == "human" || from == "user")
      role = Role::kUser;
    else if (from == "gpt" || from == "assistant")
      role = Role::kAssistant;
    else
      return r.error(absl::StrCat(
          "field \"", path, ".from\" is \"", absl::CHexEscape(from),
          "\", expected human, user, gpt, assistant or system"));
    turns.emplace_back(role, std::move(value));
    names.push_back(path);
  }
  return alternating(r, std::move(system), turns, names, "conversations");
}

/// BELLE's record: its instruction in the multi-turn form "Human: q1\n
/// Assistant: a1\nHuman: q2\nAssistant:", or, without markers, as alpaca's.
absl::StatusOr<Conversation> belleRecord(const RecordReader &r,
                                         const Struct &record) {
  BRAID_ASSIGN_OR_RETURN_STRING(instruction,
                                r.requiredString(record, "instruction"));
  BRAID_ASSIGN_OR_RETURN_STRING(input, r.optionalString(record, "input"));
  BRAID_ASSIGN_OR_RETURN_STRING(output, r.requiredString(record, "output"));

  // The turns: where each marker's line starts, its role, and the text
  // from after the marker to the start of the next marker's line.
  struct Marked {
    Role role;
    size_t textBegin;
    size_t lineBegin;
  };
  std::vector<Marked> marks;
  for (size_t line = 0; line <= instruction.size();) {
    absl::string_view rest = absl::string_view(instruction).substr(line);
    if (absl::StartsWith(rest, "Human:"))
      marks.push_back({Role::kUser, line + 6, line});
    else if (absl::StartsWith(rest, "Assistant:"))
      marks.push_back({Role::kAssistant, line + 10, line});
    size_t newline = instruction.find('\n', line);
    if (newline == std::string::npos)
      break;
    line = newline + 1;
  }
  if (marks.empty()) {
    Conversation conversation;
    conversation.turns.push_back({withInput(instruction, input), output});
    return conversation;
  }
  if (!absl::StripAsciiWhitespace(
           absl::string_view(instruction).substr(0, marks[0].lineBegin))
           .empty())
    return r.error(
        "field \"instruction\" has \"Human:\" / \"Assistant:\" lines but "
        "does not start with \"Human:\" (BELLE's multi-turn form is "
        "\"Human: ...\\nAssistant: ...\\nHuman: ...\\nAssistant:\")");
  std::vector<std::pair<Role, std::string>> turns;
  std::vector<std::string> names;
  for (size_t k = 0; k < marks.size(); ++k) {
    size_t end =
        k + 1 < marks.size() ? marks[k + 1].lineBegin : instruction.size();
    absl::string_view text =
        absl::string_view(instruction)
            .substr(marks[k].textBegin, end - marks[k].textBegin);
    absl::ConsumePrefix(&text, " ");
    absl::ConsumeSuffix(&text, "\n");
    turns.emplace_back(marks[k].role, std::string(text));
    names.push_back(absl::StrCat(
        "the ", marks[k].role == Role::kUser ? "\"Human:\"" : "\"Assistant:\"",
        " of line ",
        1 + std::count(instruction.begin(),
                       instruction.begin() + marks[k].lineBegin, '\n'),
        " of field \"instruction\""));
  }
  if (turns.back().first != Role::kAssistant)
    return r.error(
        "field \"instruction\" ends with a \"Human:\" turn: BELLE's "
        "multi-turn form ends with an empty \"Assistant:\", answered by "
        "\"output\"");
  if (!turns.back().second.empty())
    return r.error(absl::StrCat(
        "field \"instruction\" ends with an \"Assistant:\" that holds text (\"",
        absl::CHexEscape(absl::ClippedSubstr(turns.back().second, 0, 40)),
        "\"): the last \"Assistant:\" must be empty, its answer is "
        "\"output\""));
  turns.back().second = output;
  // The user text before the last answer gets the input, as alpaca's does.
  if (turns.size() >= 2 && turns[turns.size() - 2].first == Role::kUser)
    turns[turns.size() - 2].second =
        withInput(turns[turns.size() - 2].second, input);
  return alternating(r, "", turns, names, "instruction");
}

/// A MOSS text without its prefix and its suffix (and what follows it).
std::string stripMoss(absl::string_view text, absl::string_view prefix,
                      absl::string_view suffix) {
  text = absl::StripTrailingAsciiWhitespace(text);
  absl::ConsumeSuffix(&text, suffix);
  absl::ConsumePrefix(&text, prefix);
  return std::string(text);
}

absl::StatusOr<Conversation> mossRecord(const RecordReader &r,
                                        const Struct &record) {
  BRAID_ASSIGN_OR_RETURN_STRING(system,
                                r.optionalString(record, "meta_instruction"));
  absl::StatusOr<const Value *> chat = r.required(record, "chat", "chat");
  if (!chat.ok())
    return chat.status();
  if ((*chat)->kind_case() != Value::kStructValue)
    return r.error(absl::StrCat("field \"chat\" is ",
                                common::JsonKindName(**chat),
                                ", not an object of turn_1, turn_2, ..."));
  std::map<uint64_t, std::string> order;
  for (const auto &entry : (*chat)->struct_value().fields()) {
    absl::string_view key = entry.first;
    uint64_t number;
    if (!absl::ConsumePrefix(&key, "turn_") || key.empty() ||
        !std::all_of(key.begin(), key.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(key, &number))
      return r.error(absl::StrCat("field \"chat.", entry.first,
                                  "\": expected keys turn_1, turn_2, ..."));
    if (!order.emplace(number, entry.first).second)
      return r.error(absl::StrCat("fields \"chat.", order[number],
                                  "\" and \"chat.", entry.first,
                                  "\" are the same turn"));
  }
  std::vector<std::pair<Role, std::string>> turns;
  std::vector<std::string> names;
  for (const auto &[number, key] : order) {
    const std::string path = absl::StrCat("chat.", key);
    const Value &turn = (*chat)->struct_value().fields().at(key);
    if (turn.kind_case() != Value::kStructValue)
      return r.error(absl::StrCat("field \"", path, "\" is ",
                                  common::JsonKindName(turn),
                                  ", not a {Human, MOSS} object"));
    BRAID_ASSIGN_OR_RETURN_STRING(
        human, r.requiredString(turn.struct_value(), "Human", path + ".Human"));
    BRAID_ASSIGN_OR_RETURN_STRING(
        moss, r.requiredString(turn.struct_value(), "MOSS", path + ".MOSS"));
    turns.emplace_back(Role::kUser, stripMoss(human, "<|Human|>: ", "<eoh>"));
    names.push_back(path + ".Human");
    turns.emplace_back(Role::kAssistant,
                       stripMoss(moss, "<|MOSS|>: ", "<eom>"));
    names.push_back(path + ".MOSS");
  }
  return alternating(r, std::move(system), turns, names, "chat");
}

absl::StatusOr<Conversation> plainRecord(const RecordReader &r,
                                         const Struct &record) {
  BRAID_ASSIGN_OR_RETURN_STRING(prompt, r.requiredString(record, "prompt"));
  BRAID_ASSIGN_OR_RETURN_STRING(response, r.requiredString(record, "response"));
  Conversation conversation;
  conversation.turns.push_back({std::move(prompt), std::move(response)});
  return conversation;
}

#undef BRAID_ASSIGN_OR_RETURN_STRING

absl::StatusOr<Conversation> conversationOf(InstructionHandler handler,
                                            const Struct &record,
                                            absl::string_view where) {
  RecordReader r(handler, where);
  switch (handler) {
  case InstructionHandler::kAlpaca:
    return alpacaRecord(r, record);
  case InstructionHandler::kShareGpt:
    return shareGptRecord(r, record);
  case InstructionHandler::kBelle:
    return belleRecord(r, record);
  case InstructionHandler::kMoss:
    return mossRecord(r, record);
  case InstructionHandler::kPlain:
    return plainRecord(r, record);
  }
  return r.error("unknown handler");
}

/// The beginning of a line that is not a JSON object, for messages.
std::string quoteStart(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  return absl::StrCat("\"", absl::CHexEscape(absl::ClippedSubstr(text, 0, 40)),
                      text.size() > 40 ? "\"..." : "\"");
}

/// OK if `path` can be read as a file; else an error naming it.
absl::Status checkInputFile(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open input ", path));
  if (S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat("input ", path, " is a directory, not a file"));
  return absl::OkStatus();
}

enum class RecordFormat { kJson, kJsonl };

/// The format of `path` by its extension, or an error naming the file.
absl::StatusOr<RecordFormat> recordFormat(const std::string &path) {
  if (absl::EndsWithIgnoreCase(path, ".jsonl"))
    return RecordFormat::kJsonl;
  if (absl::EndsWithIgnoreCase(path, ".json"))
    return RecordFormat::kJson;
  absl::string_view name = path;
  if (size_t slash = name.rfind('/'); slash != absl::string_view::npos)
    name.remove_prefix(slash + 1);
  size_t dot = name.rfind('.');
  const std::string what =
      dot == absl::string_view::npos || dot == 0
          ? std::string("files without a .json or .jsonl extension are")
          : absl::StrCat(name.substr(dot), " files are");
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", what,
                   " not read: give JSON (an array of objects) or JSONL (one "
                   "object a line)"));
}

/// The SentencePiece model's bos id as SentencePieceProcessor::bos_id()
/// gives it: the id of its trainer spec's bos_piece (default "<s>") when
/// that piece is a control piece, else -1. Read from the ModelProto's wire
/// format (pieces: field 1, each with piece 1 and type 3, CONTROL = 3;
/// trainer_spec: field 2, with bos_piece 46), since Braid does not compile
/// SentencePiece's .proto.
absl::StatusOr<int32_t> sentencePieceBosId(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  using google::protobuf::UnknownField;
  using google::protobuf::UnknownFieldSet;
  auto malformed = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece model ", path, ": cannot read its pieces"));
  };
  UnknownFieldSet model;
  if (in.bad() || bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromString(bytes))
    return malformed();
  std::string bosPiece = "<s>";
  std::vector<std::pair<std::string, uint64_t>> pieces;
  for (int i = 0; i < model.field_count(); ++i) {
    const UnknownField &f = model.field(i);
    if (f.number() != 1 && f.number() != 2)
      continue;
    if (f.type() != UnknownField::TYPE_LENGTH_DELIMITED)
      return malformed();
    UnknownFieldSet message;
    if (!message.ParseFromString(f.length_delimited()))
      return malformed();
    if (f.number() == 2) {
      for (int k = 0; k < message.field_count(); ++k)
        if (message.field(k).number() == 46 &&
            message.field(k).type() == UnknownField::TYPE_LENGTH_DELIMITED &&
            !message.field(k).length_delimited().empty())
          bosPiece = message.field(k).length_delimited();
      continue;
    }
    std::pair<std::string, uint64_t> piece = {"", 1}; // NORMAL by default.
    for (int k = 0; k < message.field_count(); ++k) {
      const UnknownField &p = message.field(k);
      if (p.number() == 1 && p.type() == UnknownField::TYPE_LENGTH_DELIMITED)
        piece.first = p.length_delimited();
      else if (p.number() == 3 && p.type() == UnknownField::TYPE_VARINT)
        piece.second = p.varint();
    }
    pieces.push_back(std::move(piece));
  }
  for (size_t id = 0; id < pieces.size(); ++id)
    if (pieces[id].first == bosPiece)
      return pieces[id].second == 3 ? static_cast<int32_t>(id) : -1;
  return -1;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

absl::StatusOr<InstructionHandler>
ParseInstructionHandler(absl::string_view name) {
  for (InstructionHandler handler :
       {InstructionHandler::kAlpaca, InstructionHandler::kShareGpt,
        InstructionHandler::kBelle, InstructionHandler::kMoss,
        InstructionHandler::kPlain})
    if (name == InstructionHandlerName(handler))
      return handler;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown handler \"", name,
                   "\" (expected alpaca, sharegpt, belle, moss or plain)"));
}

absl::string_view InstructionHandlerName(InstructionHandler handler) {
  switch (handler) {
  case InstructionHandler::kAlpaca:
    return "alpaca";
  case InstructionHandler::kShareGpt:
    return "sharegpt";
  case InstructionHandler::kBelle:
    return "belle";
  case InstructionHandler::kMoss:
    return "moss";
  case InstructionHandler::kPlain:
    return "plain";
  }
  return "unknown";
}

absl::StatusOr<Conversation> ParseInstructionRecord(InstructionHandler handler,
                                                    absl::string_view json,
                                                    absl::string_view where) {
  if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(json), "{"))
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": expected a JSON object, got: ", quoteStart(json)));
  Struct record;
  if (absl::Status s = common::JsonToMessage(json, &record); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  return conversationOf(handler, record, where);
}

absl::Status ForEachInstructionRecord(const std::string &path,
                                      InstructionHandler handler,
                                      uint64_t *bytesRead,
                                      const ConversationFn &onConversation) {
  absl::StatusOr<RecordFormat> format = recordFormat(path);
  if (!format.ok())
    return format.status();
  if (absl::Status s = checkInputFile(path); !s.ok())
    return s;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open input ", path));

  if (*format == RecordFormat::kJson) {
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    if (in.bad())
      return absl::DataLossError(absl::StrCat("error reading input ", path));
    *bytesRead += text.size();
    absl::string_view body = absl::StripAsciiWhitespace(text);
    if (!absl::StartsWith(body, "["))
      return absl::InvalidArgumentError(absl::StrCat(
          path,
          ": a .json input holds one JSON array of objects, this one "
          "starts with ",
          body.empty() ? std::string("nothing (an empty file)")
                       : quoteStart(body),
          absl::StartsWith(body, "{")
              ? " (one object a line is JSONL: name the file .jsonl)"
              : ""));
    ListValue records;
    if (absl::Status s = common::JsonToMessage(text, &records); !s.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
    if (records.values_size() == 0)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": empty input: the array holds no record"));
    for (int i = 0; i < records.values_size(); ++i) {
      const std::string where = absl::StrCat(path, ": record ", i + 1);
      const Value &record = records.values(i);
      if (record.kind_case() != Value::kStructValue)
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": expected a JSON object, got ",
                         common::JsonKindName(record)));
      absl::StatusOr<Conversation> conversation =
          conversationOf(handler, record.struct_value(), where);
      if (!conversation.ok())
        return conversation.status();
      if (absl::Status s = onConversation(*conversation, where); !s.ok())
        return s;
    }
    return absl::OkStatus();
  }

  std::string line;
  uint64_t lineNumber = 0, records = 0;
  while (std::getline(in, line)) {
    ++lineNumber;
    *bytesRead += line.size() + (in.eof() ? 0 : 1);
    if (absl::StripAsciiWhitespace(line).empty())
      continue;
    const std::string where = absl::StrCat(path, ":", lineNumber);
    absl::StatusOr<Conversation> conversation =
        ParseInstructionRecord(handler, line, where);
    if (!conversation.ok())
      return conversation.status();
    if (absl::Status s = onConversation(*conversation, where); !s.ok())
      return s;
    ++records;
  }
  if (in.bad())
    return absl::DataLossError(absl::StrCat("error reading input ", path));
  if (records == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": empty input: no record in ", lineNumber,
        lineNumber == 1 ? " line" : " lines", " (blank lines are skipped)"));
  return absl::OkStatus();
}

InstructionTokenizer ByteInstructionTokenizer() {
  InstructionTokenizer result;
  result.tokenizer = std::make_unique<ByteTokenizer>();
  result.ids.bos = -1;
  result.ids.eos = ByteTokenizer::kEodId;
  return result;
}

absl::StatusOr<InstructionTokenizer>
LoadSentencePieceInstructionTokenizer(const std::string &path) {
  // Load refuses a model without an eos piece.
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> tokenizer =
      SentencePieceTokenizer::Load(path);
  if (!tokenizer.ok())
    return tokenizer.status();
  absl::StatusOr<int32_t> bos = sentencePieceBosId(path);
  if (!bos.ok())
    return bos.status();
  InstructionTokenizer result;
  result.ids.bos = *bos;
  result.ids.eos = (*tokenizer)->eodId();
  result.tokenizer = std::move(*tokenizer);
  return result;
}

absl::StatusOr<InstructionTokenizer>
LoadModelInstructionTokenizer(const std::string &dir) {
  absl::StatusOr<ModelTokenizer> model = LoadModelTokenizer(dir);
  if (!model.ok())
    return model.status();
  if (model->eosId < 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "tokenizer ", dir, " (", model->tokenizer->name(), ", from ",
        model->source,
        ") has no end id (no eos_token or eos_token_id): instruction data "
        "ends every answer with it"));
  InstructionTokenizer result;
  result.ids.bos = model->addBos && model->bosId >= 0 ? model->bosId : -1;
  result.ids.eos = model->eosId;
  result.tokenizer = std::move(model->tokenizer);
  return result;
}

absl::StatusOr<EncodedConversation>
EncodeConversation(const ChatTemplate &chatTemplate,
                   const InstructionTokenizer &tokenizer,
                   const Conversation &conversation) {
  if (!tokenizer.tokenizer)
    return absl::FailedPreconditionError("EncodeConversation: no tokenizer");
  absl::StatusOr<std::vector<ChatSegment>> segments =
      chatTemplate.encodeConversation(*tokenizer.tokenizer, tokenizer.ids,
                                      conversation);
  if (!segments.ok())
    return segments.status();
  EncodedConversation out;
  for (const ChatSegment &segment : *segments) {
    out.ids.insert(out.ids.end(), segment.ids.begin(), segment.ids.end());
    out.lossMask.insert(out.lossMask.end(), segment.ids.size(),
                        segment.trained ? 1 : 0);
    if (segment.trained)
      out.trained += segment.ids.size();
  }
  return out;
}

absl::Status PreprocessInstructions(const InstructionOptions &options,
                                    const InstructionTokenizer &tokenizer,
                                    ProgressFn progress,
                                    InstructionSummary *summary) {
  if (options.inputs.empty())
    return absl::InvalidArgumentError("preprocess: no input file");
  if (options.outputPrefix.empty())
    return absl::InvalidArgumentError("preprocess: no output prefix");
  if (!tokenizer.tokenizer)
    return absl::InvalidArgumentError("preprocess: no tokenizer");
  if (tokenizer.ids.eos < 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "tokenizer ", tokenizer.tokenizer->name(),
        " has no end id: instruction data ends every answer with it"));
  // Check every input before reading any, so that a wrong file last in the
  // list fails at once.
  for (const std::string &input : options.inputs) {
    if (absl::StatusOr<RecordFormat> f = recordFormat(input); !f.ok())
      return f.status();
    if (absl::Status s = checkInputFile(input); !s.ok())
      return s;
  }

  const Clock::time_point start = Clock::now();
  const ChatTemplate chatTemplate(options.chatTemplate);
  const DType dtype = BestDtypeForVocab(tokenizer.tokenizer->vocabSize());
  const std::string maskPrefix = LossMaskPrefix(options.outputPrefix);
  // On every early return the writers' destructors remove their .tmp
  // files: a failed run leaves no output.
  absl::StatusOr<IndexedDatasetWriter> tokens =
      IndexedDatasetWriter::Create(options.outputPrefix, dtype);
  if (!tokens.ok())
    return tokens.status();
  absl::StatusOr<IndexedDatasetWriter> mask =
      IndexedDatasetWriter::Create(maskPrefix, DType::kUInt8);
  if (!mask.ok())
    return mask.status();

  PreprocessProgress state;
  InstructionSummary totals;
  Clock::time_point lastReport = start;
  auto onConversation = [&](const Conversation &conversation,
                            absl::string_view where) -> absl::Status {
    absl::StatusOr<EncodedConversation> encoded =
        EncodeConversation(chatTemplate, tokenizer, conversation);
    if (!encoded.ok())
      return absl::Status(
          encoded.status().code(),
          absl::StrCat(where, ": ", encoded.status().message()));
    for (absl::Status s :
         {tokens->AddSequence(encoded->ids), tokens->EndDocument(),
          mask->AddSequence(encoded->lossMask), mask->EndDocument()})
      if (!s.ok())
        return s;
    ++totals.documents;
    ++totals.sequences;
    totals.turns += conversation.turns.size();
    totals.tokens += encoded->ids.size();
    totals.trainedTokens += encoded->trained;
    state.documents = totals.documents;
    state.tokens = totals.tokens;
    if (progress &&
        secondsSince(lastReport) >= options.progressIntervalSeconds) {
      lastReport = Clock::now();
      state.elapsedSeconds = secondsSince(start);
      progress(state);
    }
    return absl::OkStatus();
  };
  for (const std::string &input : options.inputs)
    if (absl::Status s = ForEachInstructionRecord(
            input, options.handler, &state.bytesRead, onConversation);
        !s.ok())
      return s;

  // The mask first and the ids last: the ids' .idx marks the dataset
  // complete. A failure to publish the ids takes the new mask away again.
  if (absl::Status s = mask->Finish(); !s.ok())
    return s;
  if (absl::Status s = tokens->Finish(); !s.ok()) {
    std::remove((maskPrefix + ".idx").c_str());
    std::remove((maskPrefix + ".bin").c_str());
    return s;
  }

  state.elapsedSeconds = secondsSince(start);
  if (progress)
    progress(state);
  if (summary) {
    totals.bytesRead = state.bytesRead;
    totals.elapsedSeconds = state.elapsedSeconds;
    totals.dtype = dtype;
    totals.tokenizer = tokenizer.tokenizer->name();
    totals.vocabSize = tokenizer.tokenizer->vocabSize();
    totals.binPath = options.outputPrefix + ".bin";
    totals.idxPath = options.outputPrefix + ".idx";
    totals.maskBinPath = maskPrefix + ".bin";
    totals.maskIdxPath = maskPrefix + ".idx";
    *summary = std::move(totals);
  }
  return absl::OkStatus();
}

} // namespace braid::data
