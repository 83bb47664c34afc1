//===- JsonStringTest.cpp - Strings as JSON string literals ---------------===//
//
// The expectations are written from RFC 8259, section 7: a string is quoted
// with '"'; the quotation mark, the backslash and the control characters
// U+0000 to U+001F must be escaped; the two-character escapes are \" \\ \/
// \b \f \n \r \t, and any character may be written \uXXXX. JsonString.h
// picks, of what the RFC allows, the short escape where one exists for a
// control character, \u00xx in lower-case hex for the rest, and no escape
// for anything else ('/' and non-ASCII UTF-8 included).
//
//===----------------------------------------------------------------------===//

#include "runtime/common/JsonString.h"

#include <gtest/gtest.h>

#include <string>

namespace braid::common {
namespace {

TEST(JsonString, EmptyString) { EXPECT_EQ(JsonString(""), "\"\""); }

TEST(JsonString, PlainAsciiIsQuoted) {
  EXPECT_EQ(JsonString("abc XYZ 019"), "\"abc XYZ 019\"");
  // '/' may be escaped (\/) but need not be; DEL (0x7f) is no control
  // character of JSON's.
  EXPECT_EQ(JsonString("a/b~\x7f"), "\"a/b~\x7f\"");
}

TEST(JsonString, QuotationMarkAndReverseSolidus) {
  EXPECT_EQ(JsonString("\""), R"("\"")");
  EXPECT_EQ(JsonString("\\"), R"("\\")");
  EXPECT_EQ(JsonString(R"(say "hi" \o/)"), R"("say \"hi\" \\o/")");
}

TEST(JsonString, ShortEscapes) {
  // U+0008 backspace, U+000C form feed, U+000A line feed, U+000D carriage
  // return, U+0009 tab.
  EXPECT_EQ(JsonString("\b"), R"("\b")");
  EXPECT_EQ(JsonString("\f"), R"("\f")");
  EXPECT_EQ(JsonString("\n"), R"("\n")");
  EXPECT_EQ(JsonString("\r"), R"("\r")");
  EXPECT_EQ(JsonString("\t"), R"("\t")");
  EXPECT_EQ(JsonString("a\r\nb\tc"), R"("a\r\nb\tc")");
}

TEST(JsonString, EveryControlCharacter) {
  // U+0000 to U+001F, in order: those with a short escape as above, the
  // others as \u00 and two lower-case hex digits.
  const char *const kExpected[32] = {
      R"(\u0000)", R"(\u0001)", R"(\u0002)", R"(\u0003)", // 0x00-0x03
      R"(\u0004)", R"(\u0005)", R"(\u0006)", R"(\u0007)", // 0x04-0x07
      R"(\b)",     R"(\t)",     R"(\n)",     R"(\u000b)", // 0x08-0x0b
      R"(\f)",     R"(\r)",     R"(\u000e)", R"(\u000f)", // 0x0c-0x0f
      R"(\u0010)", R"(\u0011)", R"(\u0012)", R"(\u0013)", // 0x10-0x13
      R"(\u0014)", R"(\u0015)", R"(\u0016)", R"(\u0017)", // 0x14-0x17
      R"(\u0018)", R"(\u0019)", R"(\u001a)", R"(\u001b)", // 0x18-0x1b
      R"(\u001c)", R"(\u001d)", R"(\u001e)", R"(\u001f)", // 0x1c-0x1f
  };
  std::string all, expected = "\"";
  for (int c = 0; c < 32; ++c) {
    SCOPED_TRACE(c);
    EXPECT_EQ(JsonString(std::string(1, char(c))),
              "\"" + std::string(kExpected[c]) + "\"");
    all.push_back(char(c));
    expected += kExpected[c];
  }
  expected += "\"";
  EXPECT_EQ(JsonString(all), expected);
  // The space (U+0020) is the first character copied as is.
  EXPECT_EQ(JsonString(" "), "\" \"");
}

TEST(JsonString, NulInsideTheText) {
  EXPECT_EQ(JsonString(std::string("a\0b", 3)), R"("a\u0000b")");
}

TEST(JsonString, MultiByteUtf8IsCopied) {
  // U+00E9 (2 bytes), U+20AC (3 bytes), U+1F600 (4 bytes): no \u escapes.
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
  EXPECT_EQ(JsonString(text), "\"" + text + "\"");
  // Next to characters that are escaped.
  EXPECT_EQ(JsonString("\xC3\xA9\n\"\xE2\x82\xAC"),
            "\"\xC3\xA9\\n\\\"\xE2\x82\xAC\"");
}

TEST(JsonString, AppendKeepsWhatIsThere) {
  std::string out = "{\"k\": ";
  AppendJsonString(out, "v\n");
  out += ", ";
  AppendJsonString(out, "");
  EXPECT_EQ(out, R"({"k": "v\n", "")");
}

TEST(PrintableText, EscapesAllButPrintableAscii) {
  // A terminal escape, UTF-8 of é, DEL, an ill-formed byte, a newline; the
  // quotes and the backslash are printable and stay.
  EXPECT_EQ(PrintableText("a\x1b[31m\xc3\xa9\x7f\xff\n'\"\\ z"),
            "a\\x1b[31m\\xc3\\xa9\\x7f\\xff\\n'\"\\ z");
  EXPECT_EQ(PrintableText(std::string("\0\t", 2)), "\\x00\\x09");
  EXPECT_EQ(PrintableText(""), "");
}

TEST(ValidUtf8, KeepsWellFormedText) {
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 a\n";
  EXPECT_EQ(ValidUtf8(text), text);
  EXPECT_EQ(ValidUtf8(""), "");
}

TEST(ValidUtf8, ReplacesEachMaximalIllFormedPrefix) {
  // Expected strings from Python's bytes.decode("utf-8", "replace"), which
  // follows Unicode's "maximal subpart" practice (The Unicode Standard,
  // section 3.9, U+FFFD substitution). "?" below stands for U+FFFD.
  auto replaced = [](std::string s) {
    std::string out;
    for (char c : s)
      out += c == '?' ? std::string("\xEF\xBF\xBD") : std::string(1, c);
    return out;
  };
  // A lone continuation byte; a byte that starts nothing (C0, F5, FF).
  EXPECT_EQ(ValidUtf8("a\x80" "b"), replaced("a?b"));
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), replaced("??"));
  EXPECT_EQ(ValidUtf8("\xF5\xFF"), replaced("??"));
  // A character cut short (a completion ending mid-character) is one
  // replacement, whatever its length so far.
  EXPECT_EQ(ValidUtf8("x\xE2\x82"), replaced("x?"));
  EXPECT_EQ(ValidUtf8("x\xF0\x9F\x98"), replaced("x?"));
  // Surrogates (ED A0..BF) and overlong forms (E0 80..9F, F0 80..8F) are
  // ill-formed from their second byte; beyond U+10FFFF (F4 90..) too.
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), replaced("???"));
  EXPECT_EQ(ValidUtf8("\xE0\x80\x80"), replaced("???"));
  EXPECT_EQ(ValidUtf8("\xF4\x90\x80\x80"), replaced("????"));
  // Unicode's own example (Table 3-8).
  EXPECT_EQ(ValidUtf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            replaced("a???b?c??d"));
}

} // namespace
} // namespace braid::common
