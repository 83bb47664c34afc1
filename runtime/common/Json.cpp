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
  google::protobuf::util::JsonParseOptions options;
  auto parsed =
      google::protobuf::util::JsonStringToMessage(text, &object, options);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": malformed JSON: ",
        absl::string_view(parsed.message().data(), parsed.message().size())));
  return object;
}

} // namespace braid::common
