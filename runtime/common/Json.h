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
#include "absl/strings/string_view.h"
#include "runtime/common/JsonString.h"

#include <google/protobuf/struct.pb.h>

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

/// What a JSON value is, for messages: "null", "a number", "a boolean",
/// "an object", "an array", "a string" ("nothing" for an unset Value).
absl::string_view JsonKindName(const google::protobuf::Value &value);

} // namespace braid::common

#endif // BRAID_RUNTIME_COMMON_JSON_H
