//===- Json.h - A JSON file's object, through Protobuf ----------*- C++ -*-===//
//
// The runtime reads JSON (config.json, safetensors indexes, tokenizer
// files) with Protobuf's JSON parser into a google.protobuf.Struct: no
// other dependency. Its own library (BraidJson), so that the readers that
// need no JSON (datasets) link no Protobuf.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMMON_JSON_H
#define BRAID_RUNTIME_COMMON_JSON_H

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "runtime/common/JsonString.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <string>

namespace braid::common {

/// Parses `text`, the contents of `path`, as a JSON object. InvalidArgument
/// naming the path when it is not an object or not JSON.
absl::StatusOr<google::protobuf::Struct>
ParseJsonObject(const std::string &path, const std::string &text);

/// A failed parse's message from Protobuf's JSON parser (its util::Status or
/// absl::Status, by Protobuf's version), for an error: its first 200 bytes,
/// PrintableText (the parser quotes the input around the fault).
template <typename ProtobufStatus>
std::string JsonParseMessage(const ProtobufStatus &status) {
  return PrintableText(absl::ClippedSubstr(
      absl::string_view(status.message().data(), status.message().size()), 0,
      200));
}

/// The deepest nesting of objects and arrays in a JSON text that Braid
/// reads. Protobuf's parser refuses about 50 levels with a message that
/// names no cause, and before it does takes a time that grows steeply with
/// the depth (a minute for a 40 KB line 20 000 deep): CheckJsonDepth
/// refuses deeper texts first, in one pass. The files Braid reads nest a
/// few levels.
inline constexpr int kMaxJsonDepth = 32;

/// OK when `text` nests objects and arrays at most kMaxJsonDepth deep
/// (brackets inside strings do not count); else InvalidArgument "JSON
/// nested more than 32 levels deep (byte N)". Other faults are the
/// parser's to find.
inline absl::Status CheckJsonDepth(absl::string_view text) {
  int depth = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth)
        return absl::InvalidArgumentError(
            absl::StrCat("JSON nested more than ", kMaxJsonDepth,
                         " levels deep (byte ", i + 1, ")"));
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return absl::OkStatus();
}

/// Protobuf's JsonStringToMessage after CheckJsonDepth: OK, or
/// InvalidArgument saying what is wrong, "malformed JSON: " and
/// JsonParseMessage's text, or CheckJsonDepth's.
template <typename Message>
absl::Status JsonToMessage(
    absl::string_view text, Message *message,
    const google::protobuf::util::JsonParseOptions &options = {}) {
  if (absl::Status s = CheckJsonDepth(text); !s.ok())
    return s;
  auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), message,
      options);
  if (!parsed.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON: ", JsonParseMessage(parsed)));
  return absl::OkStatus();
}

/// What a JSON value is, for messages: "null", "a number", "a boolean",
/// "an object", "an array", "a string" ("nothing" for an unset Value).
absl::string_view JsonKindName(const google::protobuf::Value &value);

} // namespace braid::common

#endif // BRAID_RUNTIME_COMMON_JSON_H
