//===- JsonString.cpp - Strings as JSON string literals -------------------===//

#include "runtime/common/JsonString.h"

namespace braid::common {

void AppendJsonString(std::string &out, absl::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (u < 0x20) {
        out += "\\u00";
        out.push_back(kHex[u >> 4]);
        out.push_back(kHex[u & 15]);
      } else {
        out.push_back(c);
      }
    }
  }
  out.push_back('"');
}

std::string JsonString(absl::string_view s) {
  std::string out;
  AppendJsonString(out, s);
  return out;
}

} // namespace braid::common
