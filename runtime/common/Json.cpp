//===- Json.cpp - A JSON file's object, through Protobuf ------------------===//

#include "runtime/common/Json.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#include <google/protobuf/util/json_util.h>

namespace braid::common {

absl::StatusOr<google::protobuf::Struct>
ParseJsonObject(const std::string &path, const std::string &text) {
  if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "{"))
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a JSON object"));
  google::protobuf::Struct object;
  if (absl::Status s = JsonToMessage(text, &object); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  return object;
}

absl::string_view JsonKindName(const google::protobuf::Value &value) {
  using google::protobuf::Value;
  switch (value.kind_case()) {
  case Value::kNullValue:
    return "null";
  case Value::kNumberValue:
    return "a number";
  case Value::kBoolValue:
    return "a boolean";
  case Value::kStructValue:
    return "an object";
  case Value::kListValue:
    return "an array";
  case Value::kStringValue:
    return "a string";
  default:
    return "nothing";
  }
}

} // namespace braid::common
