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

std::string ValidUtf8(absl::string_view text) {
  std::string out;
  const auto *s = reinterpret_cast<const unsigned char *>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    int length = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2
                 : c >= 0xE0 && c <= 0xEF            ? 3
                 : c >= 0xF0 && c <= 0xF4            ? 4
                                                     : 0;
    size_t j = i + 1;
    for (int k = 1; k < length && j < n; ++k, ++j) {
      // The second byte's range is narrower after E0, ED, F0 and F4.
      unsigned char lo = 0x80, hi = 0xBF;
      if (k == 1) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
      }
      if (s[j] < lo || s[j] > hi)
        break;
    }
    if (length > 0 && int(j - i) == length)
      out.append(text.data() + i, j - i);
    else
      out += "\xEF\xBF\xBD"; // U+FFFD
    i = length > 0 ? j : i + 1;
  }
  return out;
}

std::string PrintableText(absl::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

} // namespace braid::common
