//===- InstructionTest.cpp - Instruction data, chat templates, loss masks -===//
//
// Expected conversations are written out from the handlers' definitions
// (Instruction.h), and expected token ids from the templates' definitions
// (ChatTemplate.h) as the UTF-8 bytes of the strings they spell, with 256
// (the byte tokenizer's end id) closing each answer; datasets are read back
// through IndexedDataset. braid chat's turns are checked against the code
// braid chat used before the templates were shared (chatReference).
//
//===----------------------------------------------------------------------===//

#include "runtime/data/Instruction.h"

#include "runtime/data/ChatTemplate.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/data/SentencePieceBridge.h"
#include "runtime/data/Tokenizer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace braid::data;
using ::testing::HasSubstr;

namespace {

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

/// The UTF-8 bytes of `text`: the byte tokenizer's ids, computed without it.
std::vector<int64_t> utf8(const std::string &text) {
  std::vector<int64_t> ids;
  for (unsigned char c : text)
    ids.push_back(c);
  return ids;
}

std::vector<int64_t> concat(std::vector<int64_t> a,
                            const std::vector<int64_t> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Token ids and mask built segment by segment.
struct Expected {
  std::vector<int64_t> ids;
  std::vector<int64_t> mask;
  Expected &prompt(const std::vector<int64_t> &segment) {
    ids.insert(ids.end(), segment.begin(), segment.end());
    mask.insert(mask.end(), segment.size(), 0);
    return *this;
  }
  Expected &answer(const std::vector<int64_t> &segment) {
    ids.insert(ids.end(), segment.begin(), segment.end());
    mask.insert(mask.end(), segment.size(), 1);
    return *this;
  }
};

constexpr int64_t kEos = 256;

Conversation parse(InstructionHandler handler, const std::string &json) {
  absl::StatusOr<Conversation> c = ParseInstructionRecord(handler, json, "R");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Conversation();
}

void expectConversation(
    const Conversation &c, const std::string &system,
    const std::vector<std::pair<std::string, std::string>> &turns) {
  EXPECT_EQ(c.system, system);
  ASSERT_EQ(c.turns.size(), turns.size());
  for (size_t i = 0; i < turns.size(); ++i) {
    EXPECT_EQ(c.turns[i].user, turns[i].first) << "turn " << i;
    EXPECT_EQ(c.turns[i].assistant, turns[i].second) << "turn " << i;
  }
}

/// Expects ParseInstructionRecord to refuse `json` with a message that
/// starts with "R: " and holds `part`.
void expectRefused(InstructionHandler handler, const std::string &json,
                   const std::string &part) {
  absl::StatusOr<Conversation> c = ParseInstructionRecord(handler, json, "R");
  ASSERT_FALSE(c.ok()) << json;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message().substr(0, 3), "R: ") << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(part)) << json;
}

//===----------------------------------------------------------------------===//
// Handlers
//===----------------------------------------------------------------------===//

TEST(InstructionHandlerTest, ParsesNames) {
  for (const char *name : {"alpaca", "sharegpt", "belle", "moss", "plain"}) {
    absl::StatusOr<InstructionHandler> h = ParseInstructionHandler(name);
    ASSERT_TRUE(h.ok()) << name;
    EXPECT_EQ(InstructionHandlerName(*h), name);
  }
  EXPECT_FALSE(ParseInstructionHandler("gpt4").ok());
}

TEST(InstructionHandlerTest, Alpaca) {
  expectConversation(parse(InstructionHandler::kAlpaca,
                           R"({"instruction": "Add 2 and 3.", "output": "5"})"),
                     "", {{"Add 2 and 3.", "5"}});
  // An empty input adds nothing; a non-empty one follows a blank line.
  expectConversation(parse(InstructionHandler::kAlpaca,
                           R"({"instruction": "Sum", "input": "",
                               "output": "0"})"),
                     "", {{"Sum", "0"}});
  expectConversation(
      parse(InstructionHandler::kAlpaca,
            R"({"instruction": "Translate", "input": "good morning",
                "output": "bonjour", "system": "You translate.",
                "history": [["Spell cat", "c a t"], ["Reverse", "t a c"]]})"),
      "You translate.",
      {{"Spell cat", "c a t"},
       {"Reverse", "t a c"},
       {"Translate\n\ngood morning", "bonjour"}});
  // Optional fields may be null.
  expectConversation(parse(InstructionHandler::kAlpaca,
                           R"({"instruction": "a", "input": null, "output": "b",
                "system": null, "history": null})"),
                     "", {{"a", "b"}});
}

TEST(InstructionHandlerTest, AlpacaErrors) {
  expectRefused(InstructionHandler::kAlpaca, R"({"output": "x"})",
                "missing field \"instruction\"");
  expectRefused(InstructionHandler::kAlpaca, R"({"instruction": "x"})",
                "missing field \"output\"");
  expectRefused(InstructionHandler::kAlpaca,
                R"({"instruction": "a", "output": 3})",
                "field \"output\" is a number, not a string");
  expectRefused(InstructionHandler::kAlpaca,
                R"({"instruction": ["a"], "output": "b"})",
                "field \"instruction\" is an array, not a string");
  expectRefused(InstructionHandler::kAlpaca,
                R"({"instruction": "a", "output": "b", "input": 1})",
                "field \"input\" is a number");
  expectRefused(InstructionHandler::kAlpaca,
                R"({"instruction": "a", "output": "b", "history": {}})",
                "field \"history\" is an object");
  expectRefused(InstructionHandler::kAlpaca,
                R"({"instruction": "a", "output": "b", "history": [["q"]]})",
                "field \"history[0]\" is an array of 1, not a [user, "
                "assistant] pair");
  expectRefused(InstructionHandler::kAlpaca,
                R"({"instruction": "a", "output": "b",
                    "history": [["q", "r"], ["s", 4]]})",
                "field \"history[1][1]\" is a number");
  expectRefused(InstructionHandler::kAlpaca, R"([{"instruction": "a"}])",
                "expected a JSON object");
  expectRefused(InstructionHandler::kAlpaca, R"({"instruction": )",
                "malformed JSON");
}

TEST(InstructionHandlerTest, ShareGpt) {
  expectConversation(
      parse(InstructionHandler::kShareGpt,
            R"({"conversations": [
                  {"from": "system", "value": "Be brief."},
                  {"from": "human", "value": "Capital of Japan?"},
                  {"from": "gpt", "value": "Tokyo."},
                  {"from": "user", "value": "And France?"},
                  {"from": "assistant", "value": "Paris."}]})"),
      "Be brief.",
      {{"Capital of Japan?", "Tokyo."}, {"And France?", "Paris."}});
  // The record's system text, unless a first system message replaces it.
  expectConversation(parse(InstructionHandler::kShareGpt,
                           R"({"system": "sys", "conversations": [
                  {"from": "human", "value": "hi"},
                  {"from": "gpt", "value": "hello"}]})"),
                     "sys", {{"hi", "hello"}});
  expectConversation(parse(InstructionHandler::kShareGpt,
                           R"({"system": "sys", "conversations": [
                  {"from": "system", "value": "first"},
                  {"from": "human", "value": "hi"},
                  {"from": "gpt", "value": "hello"}]})"),
                     "first", {{"hi", "hello"}});
}

TEST(InstructionHandlerTest, ShareGptErrors) {
  const auto h = InstructionHandler::kShareGpt;
  expectRefused(h, R"({"system": "s"})", "missing field \"conversations\"");
  expectRefused(h, R"({"conversations": "hi"})",
                "field \"conversations\" is a string");
  expectRefused(h, R"({"conversations": []})", "empty conversation");
  expectRefused(h, R"({"conversations": [{"from": "system", "value": "s"}]})",
                "empty conversation");
  expectRefused(h, R"({"conversations": [{"from": "bot", "value": "x"}]})",
                "field \"conversations[0].from\" is \"bot\", expected human, "
                "user, gpt, assistant or system");
  expectRefused(h, R"({"conversations": [{"from": "human"}]})",
                "missing field \"conversations[0].value\"");
  expectRefused(h, R"({"conversations": [{"from": "human", "value": 1}]})",
                "field \"conversations[0].value\" is a number");
  expectRefused(h, R"({"conversations": [3]})",
                "field \"conversations[0]\" is a number");
  expectRefused(h,
                R"({"conversations": [{"from": "gpt", "value": "x"},
                                      {"from": "human", "value": "y"}]})",
                "conversations[0] is the assistant's where the user's turn "
                "is due");
  expectRefused(h,
                R"({"conversations": [{"from": "human", "value": "x"},
                                      {"from": "human", "value": "y"}]})",
                "conversations[1] is the user's where the assistant's turn "
                "is due");
  expectRefused(h,
                R"({"conversations": [{"from": "human", "value": "x"},
                                      {"from": "gpt", "value": "y"},
                                      {"from": "human", "value": "z"}]})",
                "the conversation ends with the user's conversations[2]: it "
                "must end with the assistant's answer");
  expectRefused(h,
                R"({"conversations": [{"from": "human", "value": "x"},
                                      {"from": "system", "value": "y"}]})",
                "field \"conversations[1].from\" is \"system\": only the "
                "first message");
}

TEST(InstructionHandlerTest, Belle) {
  // BELLE's multi-turn form: one space after a marker is dropped, and the
  // newline before the next marker.
  expectConversation(parse(InstructionHandler::kBelle,
                           R"({"instruction":
                  "Human: 1+1?\nAssistant: 2\nHuman: times 3?\nAssistant:",
                "input": "", "output": "6"})"),
                     "", {{"1+1?", "2"}, {"times 3?", "6"}});
  // A turn over several lines keeps its inner newlines; a second space
  // after the marker stays; a marker not at the start of a line is text.
  expectConversation(
      parse(InstructionHandler::kBelle,
            R"({"instruction": "Human:  two\nlines\nAssistant: said Human: )"
            R"(no\nHuman:x\nAssistant: \n", "output": "y"})"),
      "", {{" two\nlines", "said Human: no"}, {"x", "y"}});
  // Blank lines before the first marker are not a turn.
  expectConversation(parse(InstructionHandler::kBelle,
                           R"({"instruction": "\n \nHuman: q\nAssistant:",
                               "output": "a"})"),
                     "", {{"q", "a"}});
  // Without markers, as alpaca.
  expectConversation(parse(InstructionHandler::kBelle,
                           R"({"instruction": "Name a colour",
                               "input": "warm", "output": "red"})"),
                     "", {{"Name a colour\n\nwarm", "red"}});
  // With markers, a non-empty input joins the last user text.
  expectConversation(parse(InstructionHandler::kBelle,
                           R"({"instruction": "Human: Sum\nAssistant:",
                               "input": "1 2", "output": "3"})"),
                     "", {{"Sum\n\n1 2", "3"}});
}

TEST(InstructionHandlerTest, BelleErrors) {
  const auto h = InstructionHandler::kBelle;
  expectRefused(h, R"({"instruction": "Human: a\nAssistant:"})",
                "missing field \"output\"");
  expectRefused(h,
                R"({"instruction": "Human: a\nAssistant: b", "output": "c"})",
                "the last \"Assistant:\" must be empty");
  expectRefused(
      h, R"({"instruction": "Human: a\nAssistant:\nHuman: b", "output": "c"})",
      "ends with a \"Human:\" turn");
  expectRefused(h, R"({"instruction": "Intro\nHuman: a\nAssistant:",
                       "output": "c"})",
                "does not start with \"Human:\"");
  expectRefused(
      h, R"({"instruction": "Human: a\nHuman: b\nAssistant:", "output": "c"})",
      "the \"Human:\" of line 2 of field \"instruction\" is the user's where "
      "the assistant's turn is due");
}

TEST(InstructionHandlerTest, Moss) {
  // Turns in numeric order (turn_10 after turn_2); prefixes and suffixes
  // stripped; the other keys of a turn ignored.
  expectConversation(parse(InstructionHandler::kMoss,
                           R"({"meta_instruction": "You are MOSS.", "chat": {
                  "turn_10": {"Human": "<|Human|>: third<eoh>\n",
                              "MOSS": "<|MOSS|>: c<eom>\n"},
                  "turn_2": {"Human": "<|Human|>: second<eoh>\n",
                             "MOSS": "<|MOSS|>: b<eom> \n"},
                  "turn_1": {"Human": "<|Human|>: 2*3?<eoh>\n",
                             "Inner Thoughts":
                               "<|Inner Thoughts|>: None<eot>\n",
                             "Commands": "<|Commands|>: None<eoc>\n",
                             "Tool Responses": "<|Results|>: None<eor>\n",
                             "MOSS": "<|MOSS|>: 6<eom>\n"}}})"),
                     "You are MOSS.",
                     {{"2*3?", "6"}, {"second", "b"}, {"third", "c"}});
  expectConversation(
      parse(InstructionHandler::kMoss,
            R"({"chat": {"turn_1": {"Human": "plain", "MOSS": "text"}}})"),
      "", {{"plain", "text"}});
}

TEST(InstructionHandlerTest, MossErrors) {
  const auto h = InstructionHandler::kMoss;
  expectRefused(h, R"({"meta_instruction": "m"})", "missing field \"chat\"");
  expectRefused(h, R"({"chat": []})", "field \"chat\" is an array");
  expectRefused(h, R"({"chat": {}})", "empty conversation");
  expectRefused(h, R"({"chat": {"round_1": {}}})",
                "field \"chat.round_1\": expected keys turn_1, turn_2");
  expectRefused(h, R"({"chat": {"turn_1": "x"}})",
                "field \"chat.turn_1\" is a string");
  expectRefused(h, R"({"chat": {"turn_1": {"Human": "<|Human|>: a<eoh>"}}})",
                "missing field \"chat.turn_1.MOSS\"");
  expectRefused(h, R"({"chat": {"turn_1": {"Human": 1, "MOSS": "b"}}})",
                "field \"chat.turn_1.Human\" is a number");
  expectRefused(h,
                R"({"chat": {"turn_1": {"Human": "a", "MOSS": "b"},
                             "turn_01": {"Human": "c", "MOSS": "d"}}})",
                "are the same turn");
}

TEST(InstructionHandlerTest, Plain) {
  expectConversation(parse(InstructionHandler::kPlain,
                           R"({"prompt": "The sky is", "response": "blue."})"),
                     "", {{"The sky is", "blue."}});
  expectRefused(InstructionHandler::kPlain, R"({"prompt": "a"})",
                "missing field \"response\"");
  expectRefused(InstructionHandler::kPlain,
                R"({"prompt": null, "response": "b"})",
                "null in required field \"prompt\"");
}

//===----------------------------------------------------------------------===//
// Templates
//===----------------------------------------------------------------------===//

Conversation twoTurns(const std::string &system) {
  Conversation c;
  c.system = system;
  c.turns = {{"Hi", "Hello"}, {"2+2?", "4"}};
  return c;
}

EncodedConversation encode(ChatTemplate::Kind kind, const Conversation &c,
                           ChatSpecialIds ids = {-1, 256}) {
  InstructionTokenizer tokenizer;
  tokenizer.tokenizer = std::make_unique<ByteTokenizer>();
  tokenizer.ids = ids;
  absl::StatusOr<EncodedConversation> e =
      EncodeConversation(ChatTemplate(kind), tokenizer, c);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : EncodedConversation();
}

void expectEncoded(const EncodedConversation &got, const Expected &want) {
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.lossMask, want.mask);
  EXPECT_EQ(got.trained, static_cast<uint64_t>(std::count(want.mask.begin(),
                                                          want.mask.end(), 1)));
}

TEST(ChatTemplateTest, ParsesNames) {
  for (const char *name : {"alpaca", "llama2", "plain"}) {
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(t->name(), name);
  }
  EXPECT_FALSE(ChatTemplate::Parse("chatml").ok());
}

TEST(ChatTemplateTest, PlainIdsWrittenOut) {
  // "User: a\nAssistant:" and " b", byte by byte, then the end id.
  Conversation c;
  c.turns = {{"a", "b"}};
  EncodedConversation e = encode(ChatTemplate::Kind::kPlain, c);
  EXPECT_EQ(e.ids, (std::vector<int64_t>{85, 115, 101, 114, 58,  32,  97,
                                         10, 65,  115, 115, 105, 115, 116,
                                         97, 110, 116, 58,  32,  98,  256}));
  EXPECT_EQ(e.lossMask, (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                              0, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(e.trained, 3u);
}

TEST(ChatTemplateTest, Utf8IsEncodedByteByByte) {
  // "été ☀" is c3 a9 74 c3 a9 20 e2 98 80.
  Conversation c;
  c.turns = {{"x", "\xc3\xa9t\xc3\xa9 \xe2\x98\x80"}};
  EncodedConversation e = encode(ChatTemplate::Kind::kAlpaca, c);
  std::vector<int64_t> answer = {0xc3, 0xa9, 0x74, 0xc3, 0xa9,
                                 0x20, 0xe2, 0x98, 0x80, 256};
  ASSERT_GE(e.ids.size(), answer.size());
  EXPECT_EQ(std::vector<int64_t>(e.ids.end() - answer.size(), e.ids.end()),
            answer);
}

TEST(ChatTemplateTest, Llama2) {
  Expected withSystem;
  withSystem.prompt(utf8("[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\nHi [/INST]"))
      .answer(concat(utf8("Hello"), {kEos}))
      .prompt(utf8("[INST] 2+2? [/INST]"))
      .answer(concat(utf8("4"), {kEos}));
  expectEncoded(encode(ChatTemplate::Kind::kLlama2, twoTurns("Be nice.")),
                withSystem);
  Expected without;
  without.prompt(utf8("[INST] Hi [/INST]"))
      .answer(concat(utf8("Hello"), {kEos}))
      .prompt(utf8("[INST] 2+2? [/INST]"))
      .answer(concat(utf8("4"), {kEos}));
  expectEncoded(encode(ChatTemplate::Kind::kLlama2, twoTurns("")), without);
  // A BOS starts every turn's prompt; the end id is the caller's.
  Expected bos;
  bos.prompt(concat({1}, utf8("[INST] Hi [/INST]")))
      .answer(concat(utf8("Hello"), {2}))
      .prompt(concat({1}, utf8("[INST] 2+2? [/INST]")))
      .answer(concat(utf8("4"), {2}));
  expectEncoded(encode(ChatTemplate::Kind::kLlama2, twoTurns(""), {1, 2}), bos);
}

TEST(ChatTemplateTest, Alpaca) {
  Expected withSystem;
  withSystem.prompt(utf8("Be nice.\n\n### Instruction:\nHi\n\n### Response:\n"))
      .answer(concat(utf8("Hello"), {kEos}))
      .prompt(utf8("\n\n### Instruction:\n2+2?\n\n### Response:\n"))
      .answer(concat(utf8("4"), {kEos}));
  expectEncoded(encode(ChatTemplate::Kind::kAlpaca, twoTurns("Be nice.")),
                withSystem);
  // BOS only before the first turn.
  Expected bos;
  bos.prompt(concat({1}, utf8("### Instruction:\nHi\n\n### Response:\n")))
      .answer(concat(utf8("Hello"), {2}))
      .prompt(utf8("\n\n### Instruction:\n2+2?\n\n### Response:\n"))
      .answer(concat(utf8("4"), {2}));
  expectEncoded(encode(ChatTemplate::Kind::kAlpaca, twoTurns(""), {1, 2}), bos);
}

TEST(ChatTemplateTest, Plain) {
  Expected withSystem;
  withSystem.prompt(utf8("Be nice.\nUser: Hi\nAssistant:"))
      .answer(concat(utf8(" Hello"), {kEos}))
      .prompt(utf8("\nUser: 2+2?\nAssistant:"))
      .answer(concat(utf8(" 4"), {kEos}));
  expectEncoded(encode(ChatTemplate::Kind::kPlain, twoTurns("Be nice.")),
                withSystem);
  Expected bos;
  bos.prompt(concat({1}, utf8("User: Hi\nAssistant:")))
      .answer(concat(utf8(" Hello"), {2}))
      .prompt(utf8("\nUser: 2+2?\nAssistant:"))
      .answer(concat(utf8(" 4"), {2}));
  expectEncoded(encode(ChatTemplate::Kind::kPlain, twoTurns(""), {1, 2}), bos);
}

TEST(ChatTemplateTest, RefusesNoEndIdAndNoTurns) {
  ByteTokenizer bytes;
  ChatTemplate t(ChatTemplate::Kind::kAlpaca);
  EXPECT_FALSE(t.encodeAnswer(bytes, {-1, -1}, "a").ok());
  EXPECT_FALSE(t.encodeConversation(bytes, {-1, 256}, Conversation()).ok());
}

/// braid chat's turn as it was written before the templates were shared
/// (tools/braid/Generate.cpp's chatTurn), on a tokenizer with these ids.
std::vector<int32_t> chatReference(const Tokenizer &tokenizer, int32_t bosId,
                                   int32_t eosId, bool addBos,
                                   const std::string &chatTemplate,
                                   const std::string &text, bool first) {
  std::vector<int32_t> ids;
  std::string wrapped;
  if (chatTemplate == "llama2") {
    if (!first && eosId >= 0)
      ids.push_back(eosId);
    if (bosId >= 0)
      ids.push_back(bosId);
    wrapped = "[INST] " + text + " [/INST]";
  } else {
    if (first && addBos && bosId >= 0)
      ids.push_back(bosId);
    wrapped = chatTemplate == "alpaca"
                  ? (first ? "" : "\n\n") + std::string("### Instruction:\n") +
                        text + "\n\n### Response:\n"
                  : (first ? "" : "\n") + std::string("User: ") + text +
                        "\nAssistant:";
  }
  std::vector<int32_t> encoded = *tokenizer.encode(wrapped);
  ids.insert(ids.end(), encoded.begin(), encoded.end());
  return ids;
}

TEST(ChatTemplateTest, ChatTurnsAreThePromptSegments) {
  ByteTokenizer bytes;
  // (bos, eos) of a tokenizer that adds a BOS, and of one without.
  for (const ChatSpecialIds &ids :
       {ChatSpecialIds{1, 2}, ChatSpecialIds{-1, 256}}) {
    for (const char *name : {"llama2", "alpaca", "plain"}) {
      ChatTemplate t = *ChatTemplate::Parse(name);
      const bool llama2 = t.kind() == ChatTemplate::Kind::kLlama2;
      Conversation c = twoTurns("");
      c.turns.push_back({"Bye", "Ciao"});
      // Each chat turn is the prompt segment (llama2's later turns after the
      // end id, which closes the answer before in training data).
      for (int64_t turn = 1; turn <= 3; ++turn) {
        const std::string &user = c.turns[turn - 1].user;
        std::vector<int32_t> segment =
            *t.encodePrompt(bytes, ids, turn, "", user);
        if (llama2 && turn > 1)
          segment.insert(segment.begin(), ids.eos);
        EXPECT_EQ(chatReference(bytes, ids.bos, ids.eos, ids.bos >= 0, name,
                                user, turn == 1),
                  segment)
            << name << " turn " << turn;
      }
      // A chat whose model answers as trained (the answer, then the end id,
      // which the next turn starts from) feeds the training sequence.
      std::vector<int64_t> fed;
      std::vector<int32_t> pending;
      for (size_t i = 0; i < c.turns.size(); ++i) {
        std::vector<int32_t> turn =
            chatReference(bytes, ids.bos, ids.eos, ids.bos >= 0, name,
                          c.turns[i].user, i == 0);
        if (llama2 && !pending.empty() && pending.back() == ids.eos &&
            turn.front() == ids.eos)
          turn.erase(turn.begin());
        fed.insert(fed.end(), pending.begin(), pending.end());
        fed.insert(fed.end(), turn.begin(), turn.end());
        std::vector<int32_t> answer =
            *bytes.encode(t.answerText(c.turns[i].assistant));
        fed.insert(fed.end(), answer.begin(), answer.end());
        pending = {ids.eos};
      }
      fed.insert(fed.end(), pending.begin(), pending.end());
      EXPECT_EQ(fed, encode(t.kind(), c, ids).ids) << name;
    }
  }
}

//===----------------------------------------------------------------------===//
// Files, preprocessing and the reader
//===----------------------------------------------------------------------===//

class InstructionTest : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-instruction-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto &entry : std::filesystem::directory_iterator(dir_))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  /// The records of `file` as (where, conversation), or the error.
  absl::Status read(const std::string &file, InstructionHandler handler,
                    std::vector<std::string> *wheres) {
    uint64_t bytes = 0;
    return ForEachInstructionRecord(
        path(file), handler, &bytes,
        [&](const Conversation &, absl::string_view where) {
          wheres->push_back(std::string(where));
          return absl::OkStatus();
        });
  }

  /// Writes one-sequence documents with IndexedDatasetWriter.
  void writeDataset(const std::string &prefix,
                    const std::vector<std::vector<int64_t>> &documents,
                    DType dtype) {
    absl::StatusOr<IndexedDatasetWriter> writer =
        IndexedDatasetWriter::Create(prefix, dtype);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const std::vector<int64_t> &document : documents) {
      ASSERT_TRUE(writer->AddSequence(document).ok());
      ASSERT_TRUE(writer->EndDocument().ok());
    }
    ASSERT_TRUE(writer->Finish().ok());
  }

  std::string dir_;
};

TEST_F(InstructionTest, ReadsJsonArraysAndJsonl) {
  writeFile(path("a.json"),
            "[\n {\"instruction\": \"a\", \"output\": \"b\"},\n"
            " {\"instruction\": \"c\", \"output\": \"d\"}\n]\n");
  std::vector<std::string> wheres;
  ASSERT_TRUE(read("a.json", InstructionHandler::kAlpaca, &wheres).ok());
  EXPECT_EQ(wheres, (std::vector<std::string>{path("a.json") + ": record 1",
                                              path("a.json") + ": record 2"}));
  // Blank lines are skipped and count in the line numbers.
  writeFile(path("a.JSONL"), "{\"prompt\": \"a\", \"response\": \"b\"}\n\n"
                             "  \n{\"prompt\": \"c\", \"response\": \"d\"}");
  wheres.clear();
  ASSERT_TRUE(read("a.JSONL", InstructionHandler::kPlain, &wheres).ok());
  EXPECT_EQ(wheres, (std::vector<std::string>{path("a.JSONL") + ":1",
                                              path("a.JSONL") + ":4"}));
}

TEST_F(InstructionTest, FileErrorsNameTheFileAndTheRecord) {
  std::vector<std::string> wheres;
  writeFile(path("data.parquet"), "");
  absl::Status s = read("data.parquet", InstructionHandler::kAlpaca, &wheres);
  EXPECT_EQ(s.message(),
            path("data.parquet") +
                ": .parquet files are not read: give JSON (an array of "
                "objects) or JSONL (one object a line)");
  EXPECT_THAT(
      std::string(
          read("none.jsonl", InstructionHandler::kAlpaca, &wheres).message()),
      HasSubstr(path("none.jsonl")));

  writeFile(path("bad.json"), R"([{"instruction": "a", "output": "b"},
                                  {"instruction": "c", "output": "d"},
                                  {"instruction": "e"}])");
  s = read("bad.json", InstructionHandler::kAlpaca, &wheres);
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr(path("bad.json") + ": record 3: missing field \"output\""));
  writeFile(path("bad.jsonl"), "{\"instruction\": \"a\", \"output\": \"b\"}\n"
                               "\n{\"instruction\": \"c\"}\n");
  s = read("bad.jsonl", InstructionHandler::kAlpaca, &wheres);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(path("bad.jsonl") + ":3: missing field \"output\""));
  writeFile(path("lines.json"),
            "{\"instruction\": \"a\", \"output\": \"b\"}\n");
  s = read("lines.json", InstructionHandler::kAlpaca, &wheres);
  EXPECT_THAT(std::string(s.message()), HasSubstr("name the file .jsonl"));
  writeFile(path("numbers.json"), "[1]");
  s = read("numbers.json", InstructionHandler::kAlpaca, &wheres);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(": record 1: expected a JSON object, got a number"));
  writeFile(path("empty.json"), "[]");
  s = read("empty.json", InstructionHandler::kAlpaca, &wheres);
  EXPECT_THAT(std::string(s.message()), HasSubstr("empty input"));
  writeFile(path("blank.jsonl"), "\n\n");
  s = read("blank.jsonl", InstructionHandler::kAlpaca, &wheres);
  EXPECT_THAT(std::string(s.message()), HasSubstr("empty input"));
}

TEST_F(InstructionTest, PreprocessWritesIdsAndLossMask) {
  writeFile(path("alpaca.json"),
            R"([{"instruction": "Hi", "output": "Hello", "system": "S"},
                {"instruction": "Sum", "input": "1 2", "output": "3",
                 "history": [["a", "b"]]}])");
  InstructionOptions options;
  options.inputs = {path("alpaca.json")};
  options.outputPrefix = path("out");
  options.handler = InstructionHandler::kAlpaca;
  options.chatTemplate = ChatTemplate::Kind::kAlpaca;
  InstructionSummary summary;
  absl::Status s = PreprocessInstructions(options, ByteInstructionTokenizer(),
                                          nullptr, &summary);
  ASSERT_TRUE(s.ok()) << s;

  Expected first;
  first.prompt(utf8("S\n\n### Instruction:\nHi\n\n### Response:\n"))
      .answer(concat(utf8("Hello"), {kEos}));
  Expected second;
  second.prompt(utf8("### Instruction:\na\n\n### Response:\n"))
      .answer(concat(utf8("b"), {kEos}))
      .prompt(utf8("\n\n### Instruction:\nSum\n\n1 2\n\n### Response:\n"))
      .answer(concat(utf8("3"), {kEos}));

  absl::StatusOr<InstructionDataset> ds = OpenInstructionDataset(path("out"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->tokens.dtype(), DType::kUInt16);
  EXPECT_EQ(ds->lossMask.dtype(), DType::kUInt8);
  ASSERT_EQ(ds->tokens.numDocuments(), 2u);
  ASSERT_EQ(ds->tokens.numSequences(), 2u);
  const Expected *want[] = {&first, &second};
  for (size_t d = 0; d < 2; ++d) {
    std::vector<int64_t> ids, mask;
    ASSERT_TRUE(
        ds->tokens.ReadSequence(d, 0, ds->tokens.sequenceLength(d), &ids).ok());
    ASSERT_TRUE(
        ds->lossMask.ReadSequence(d, 0, ds->lossMask.sequenceLength(d), &mask)
            .ok());
    EXPECT_EQ(ids, want[d]->ids) << "document " << d;
    EXPECT_EQ(mask, want[d]->mask) << "document " << d;
  }
  EXPECT_EQ(summary.documents, 2u);
  EXPECT_EQ(summary.turns, 3u);
  EXPECT_EQ(summary.tokens, first.ids.size() + second.ids.size());
  EXPECT_EQ(summary.trainedTokens, 6u + 2u + 2u);
  EXPECT_EQ(summary.maskBinPath, path("out_loss_mask.bin"));
  EXPECT_EQ(files(), (std::vector<std::string>{"alpaca.json", "out.bin",
                                               "out.idx", "out_loss_mask.bin",
                                               "out_loss_mask.idx"}));
}

TEST_F(InstructionTest, FailureInALaterFileLeavesNoOutput) {
  writeFile(path("good.jsonl"), "{\"prompt\": \"a\", \"response\": \"b\"}\n");
  writeFile(path("bad.jsonl"), "{\"prompt\": \"a\", \"response\": \"b\"}\n"
                               "{\"prompt\": \"a\", \"answer\": \"b\"}\n");
  InstructionOptions options;
  options.inputs = {path("good.jsonl"), path("bad.jsonl")};
  options.outputPrefix = path("out");
  options.handler = InstructionHandler::kPlain;
  absl::Status s = PreprocessInstructions(options, ByteInstructionTokenizer(),
                                          nullptr, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(path("bad.jsonl") + ":2: missing field \"response\""));
  EXPECT_EQ(files(), (std::vector<std::string>{"bad.jsonl", "good.jsonl"}));
  // Another extension is refused before anything is read or written.
  options.inputs = {path("good.jsonl"), path("more.csv")};
  s = PreprocessInstructions(options, ByteInstructionTokenizer(), nullptr,
                             nullptr);
  EXPECT_THAT(std::string(s.message()), HasSubstr(".csv files are not read"));
  EXPECT_EQ(files(), (std::vector<std::string>{"bad.jsonl", "good.jsonl"}));
}

TEST_F(InstructionTest, ReaderRefusesDatasetsThatDisagree) {
  const std::string tokens = path("t");
  writeDataset(tokens, {{1, 2, 3}, {4, 5}}, DType::kUInt16);
  // No mask at all: a pretraining dataset.
  absl::StatusOr<InstructionDataset> ds = OpenInstructionDataset(tokens);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("no loss mask"));
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("--handler"));

  // The second document one mask value short.
  writeDataset(tokens + "_loss_mask", {{0, 1, 1}, {1}}, DType::kUInt8);
  ds = OpenInstructionDataset(tokens);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  for (const std::string &part :
       {std::string("document 1 has 2 tokens in ") + tokens + ".idx",
        std::string("1 mask values in ") + tokens + "_loss_mask.idx"})
    EXPECT_THAT(std::string(ds.status().message()), HasSubstr(part));

  // A value that is not 0 or 1.
  writeDataset(tokens + "_loss_mask", {{0, 1, 1}, {0, 2}}, DType::kUInt8);
  ds = OpenInstructionDataset(tokens);
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()),
              HasSubstr("document 1 holds the value 2 at token 1"));

  // Another number of documents.
  writeDataset(tokens + "_loss_mask", {{0, 1, 1}}, DType::kUInt8);
  ds = OpenInstructionDataset(tokens);
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()),
              HasSubstr(tokens + ".idx has 2 documents but its loss mask " +
                        tokens + "_loss_mask.idx has 1"));

  // A mask of another dtype.
  writeDataset(tokens + "_loss_mask", {{0, 1, 1}, {0, 1}}, DType::kUInt16);
  ds = OpenInstructionDataset(tokens);
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("uint16"));

  // Agreeing datasets open.
  writeDataset(tokens + "_loss_mask", {{0, 1, 1}, {0, 1}}, DType::kUInt8);
  ds = OpenInstructionDataset(tokens);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->lossMask.numTokens(), 5u);
}

/// A small corpus over a few words, for a SentencePiece model of 300 pieces
/// (256 byte pieces, the specials and the corpus' characters fit).
std::string smallCorpus() {
  const char *words[] = {"the", "cat", "sat", "on",    "a",    "mat",  "and",
                         "dog", "ran", "to",  "house", "very", "quick"};
  std::string text;
  uint64_t state = 7;
  for (int line = 0; line < 2000; ++line) {
    for (int w = 0; w < 8; ++w) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      text += words[(state >> 33) % 13];
      text += w == 7 ? ".\n" : " ";
    }
  }
  return text;
}

TEST_F(InstructionTest, SentencePieceBosAndEos) {
  writeFile(path("corpus.txt"), smallCorpus());
  // braid-data train-tokenizer's ids: bos 1, eos 2.
  TrainTokenizerOptions train;
  train.inputs = {path("corpus.txt")};
  train.modelPrefix = path("m");
  train.vocabSize = 300;
  ASSERT_TRUE(TrainTokenizer(train).ok());
  absl::StatusOr<InstructionTokenizer> t =
      LoadSentencePieceInstructionTokenizer(path("m.model"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ids.bos, 1);
  EXPECT_EQ(t->ids.eos, 2);

  // A model trained without a bos piece has none.
  std::string error;
  const spbridge::Library *library = spbridge::GetLibrary(&error);
  ASSERT_NE(library, nullptr) << error;
  error = library->train({{"input", path("corpus.txt")},
                          {"model_prefix", path("nobos")},
                          {"model_type", "bpe"},
                          {"vocab_size", "300"},
                          {"character_coverage", "1"},
                          {"byte_fallback", "true"},
                          {"unk_id", "0"},
                          {"bos_id", "-1"},
                          {"eos_id", "1"},
                          {"pad_id", "-1"},
                          {"num_threads", "1"},
                          {"minloglevel", "1"}},
                         1234);
  ASSERT_EQ(error, "");
  t = LoadSentencePieceInstructionTokenizer(path("nobos.model"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ids.bos, -1);
  EXPECT_EQ(t->ids.eos, 1);
}

} // namespace
