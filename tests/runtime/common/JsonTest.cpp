//===- JsonTest.cpp - Reading JSON text through Protobuf's parser ---------===//
//
// CheckJsonDepth refuses texts nested deeper than kMaxJsonDepth before
// Protobuf's parser sees them (it refuses ~50 levels with a message that
// names no cause, and takes a time growing steeply with the depth first);
// brackets inside strings do not count.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Json.h"

#include <gtest/gtest.h>

#include <string>

namespace braid::common {
namespace {

/// {"text": "t", "x": [[...]]}, nested `depth` levels in all.
std::string nested(int depth) {
  return "{\"text\": \"t\", \"x\": " + std::string(depth - 1, '[') +
         std::string(depth - 1, ']') + "}";
}

TEST(JsonDepth, TheLimitItselfParses) {
  google::protobuf::Struct object;
  absl::Status s = JsonToMessage(nested(kMaxJsonDepth), &object);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(object.fields().at("text").string_value(), "t");
}

TEST(JsonDepth, OneLevelMoreIsRefusedNamingTheDepthAndTheByte) {
  google::protobuf::Struct object;
  absl::Status s = JsonToMessage(nested(kMaxJsonDepth + 1), &object);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // The first bracket past the limit: '{' is byte 1, the arrays start
  // after {"text": "t", "x": (19 bytes).
  EXPECT_EQ(s.message(),
            "JSON nested more than 32 levels deep (byte " +
                std::to_string(19 + kMaxJsonDepth) + ")");
}

TEST(JsonDepth, AVeryDeepLineIsRefusedByTheCheck) {
  // 20 000 levels took Protobuf's parser about a minute; the check's
  // message shows the parser never saw the text.
  google::protobuf::Struct object;
  absl::Status s = JsonToMessage(nested(20000), &object);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("nested more than"), std::string::npos) << s;
}

TEST(JsonDepth, BracketsInStringsDoNotCount) {
  std::string brackets(100, '[');
  std::string text = "{\"a\": \"" + brackets + "\\\"" + brackets +
                     "\", \"b\": \"\\\\\", \"c\": [1]}";
  EXPECT_TRUE(CheckJsonDepth(text).ok()) << text;
  google::protobuf::Struct object;
  absl::Status s = JsonToMessage(text, &object);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(object.fields().at("a").string_value(),
            brackets + "\"" + brackets);
  EXPECT_EQ(object.fields().at("b").string_value(), "\\");
  EXPECT_EQ(object.fields().at("c").list_value().values_size(), 1);
}

TEST(JsonDepth, MalformedTextIsTheParsersToDescribe) {
  google::protobuf::Struct object;
  absl::Status s = JsonToMessage("{\"a\": [1, 2", &object);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().substr(0, 16), "malformed JSON: ") << s;
  s = ParseJsonObject("config.json", "{\"a\": }").status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().substr(0, 29), "config.json: malformed JSON: ") << s;
}

} // namespace
} // namespace braid::common
