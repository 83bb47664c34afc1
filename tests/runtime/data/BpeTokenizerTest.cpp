//===- BpeTokenizerTest.cpp - Byte-level BPE, model directories -----------===//
//
// The expected ids are derived by hand from the definition of byte-level BPE
// (GPT-2's pattern splits the text; each piece's bytes become GPT-2's byte
// characters; the adjacent pair of lowest merge rank is merged first, the
// leftmost among equals), on vocabularies of a few tokens written here. The
// comparison with Hugging Face's own tokenizers on trained vocabularies is
// tests/e2e/tokenizer_check.py.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/BpeTokenizer.h"

#include "runtime/data/ModelTokenizer.h"
#include "runtime/data/Preprocess.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace braid::data;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;

namespace {

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Ten tokens, three merges. "Ġ" (U+0120) is GPT-2's character for the
// space byte. The merge "b c" outranks "a b", so "abcd" is a bc d, not
// ab cd.
constexpr char kVocab[] = R"({"a": 0, "b": 1, "c": 2, "d": 3, "\u0120": 4,
  "bc": 5, "ab": 6, "cd": 7, "!": 8, "<|endoftext|>": 9})";
constexpr char kMerges[] = "#version: 0.2\nb c\na b\nc d\n";

constexpr char kByteLevel[] = R"({"type": "ByteLevel",
    "add_prefix_space": false, "trim_offsets": true, "use_regex": true})";

/// A tokenizer.json of kVocab and kMerges, "<|endoftext|>" a special added
/// token, with the pre-tokenizer, post-processor and merges given.
std::string tokenizerJson(const std::string &preTokenizer = kByteLevel,
                          const std::string &postProcessor = kByteLevel,
                          const std::string &merges =
                              R"(["b c", "a b", "c d"])") {
  return R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 9, "content": "<|endoftext|>",
      "single_word": false, "lstrip": false, "rstrip": false,
      "normalized": false, "special": true}],
    "normalizer": null, "pre_tokenizer": )" +
         preTokenizer + R"(, "post_processor": )" + postProcessor + R"(,
    "decoder": {"type": "ByteLevel", "add_prefix_space": true,
      "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null,
      "continuing_subword_prefix": "", "end_of_word_suffix": "",
      "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
      "vocab": )" +
         kVocab + R"(, "merges": )" + merges + "}}";
}

/// "<|endoftext|> $A" as TemplateProcessing.
constexpr char kEotTemplate[] = R"({"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
               {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [9],
                                         "tokens": ["<|endoftext|>"]}}})";

void expectError(const absl::Status &status, absl::StatusCode code,
                 const std::string &part) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(part));
}

class BpeTest : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-bpe-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  std::unique_ptr<ByteLevelBpeTokenizer>
  fromJson(const std::string &json, const ByteLevelBpeOptions &options = {}) {
    writeFile(path("tokenizer.json"), json);
    auto t = ByteLevelBpeTokenizer::LoadFromTokenizerJson(
        path("tokenizer.json"), options);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  absl::Status jsonError(const std::string &json) {
    writeFile(path("tokenizer.json"), json);
    return ByteLevelBpeTokenizer::LoadFromTokenizerJson(path("tokenizer.json"))
        .status();
  }
  std::unique_ptr<ByteLevelBpeTokenizer>
  fromFiles(const ByteLevelBpeOptions &options = {}) {
    writeFile(path("vocab.json"), kVocab);
    writeFile(path("merges.txt"), kMerges);
    auto t = ByteLevelBpeTokenizer::LoadFromFiles(path("vocab.json"),
                                                  path("merges.txt"), options);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }

  std::string dir_;
};

Ids encode(const Tokenizer &t, const std::string &text) {
  absl::StatusOr<Ids> ids = t.encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{-1};
}

std::string decode(const ByteLevelBpeTokenizer &t, const Ids &ids,
                   bool skipSpecial = false) {
  absl::StatusOr<std::string> text = t.decode(ids, skipSpecial);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "<error>";
}

TEST_F(BpeTest, MergesByRankNotLeftToRight) {
  for (const auto &t : {fromFiles(), fromJson(tokenizerJson())}) {
    ASSERT_NE(t, nullptr);
    // a b c d: (b c) has rank 0 -> a bc d; neither (a bc) nor (bc d) merges.
    EXPECT_EQ(encode(*t, "abcd"), (Ids{0, 5, 3}));
    // a b a b: two (a b) of rank 1, the leftmost first, then the other.
    EXPECT_EQ(encode(*t, "abab"), (Ids{6, 6}));
    EXPECT_EQ(encode(*t, "cdcd"), (Ids{7, 7}));
    // d a b c: (b c) before (a b), which it consumes.
    EXPECT_EQ(encode(*t, "dabc"), (Ids{3, 0, 5}));
    // " ab" is one piece: Ġ a b -> Ġ ab.
    EXPECT_EQ(encode(*t, " ab"), (Ids{4, 6}));
    // Letters and punctuation are separate pieces.
    EXPECT_EQ(encode(*t, "ab!!"), (Ids{6, 8, 8}));
    // Two spaces before a word: the first alone, the second with the word.
    EXPECT_EQ(encode(*t, "a  b"), (Ids{0, 4, 4, 1}));
    // Trailing whitespace is one piece (\s+(?!\S) at the end).
    EXPECT_EQ(encode(*t, "ab  "), (Ids{6, 4, 4}));
    EXPECT_EQ(encode(*t, ""), Ids{});
    EXPECT_EQ(t->vocabSize(), 10);
    EXPECT_EQ(t->eodId(), 9);
  }
}

TEST_F(BpeTest, PiecesDoNotMergeAcrossTheSplit) {
  auto t = fromFiles();
  ASSERT_NE(t, nullptr);
  // "b" and "c" in different pieces never merge: b, then " c" (Ġ c).
  EXPECT_EQ(encode(*t, "b c"), (Ids{1, 4, 2}));
  // An apostrophe-d is a contraction piece: "'d" has no token for "'", and
  // without an unk_token `tokenizers` leaves a byte without a token out.
  EXPECT_EQ(encode(*t, "a'd"), (Ids{0, 3}));
  // The same goes inside a piece: a e b is the piece "aeb", whose "e" is
  // left out, and a b then merge.
  EXPECT_EQ(encode(*t, "aeb"), (Ids{6}));
}

TEST_F(BpeTest, SpecialTokensAreCutOutFirst) {
  auto t = fromJson(tokenizerJson());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(encode(*t, "ab<|endoftext|>cd"), (Ids{6, 9, 7}));
  EXPECT_EQ(encode(*t, "<|endoftext|><|endoftext|>"), (Ids{9, 9}));
  EXPECT_TRUE(t->isSpecial(9));
  EXPECT_FALSE(t->isSpecial(6));
  EXPECT_EQ(t->tokenToId("<|endoftext|>"), 9);
  EXPECT_EQ(t->tokenToId("\xC4\xA0"), 4); // "Ġ"
  EXPECT_EQ(t->tokenToId("zz"), -1);
  // vocab.json + merges.txt: added tokens only as given.
  auto files = fromFiles();
  ASSERT_NE(files, nullptr);
  // Without: "<|" "endoftext" "|>", of whose bytes only "d" has a token.
  EXPECT_EQ(encode(*files, "<|endoftext|>"), Ids{3});
  ByteLevelBpeOptions options;
  options.addedTokens.push_back({9, "<|endoftext|>", true});
  files = fromFiles(options);
  ASSERT_NE(files, nullptr);
  EXPECT_EQ(encode(*files, "ab<|endoftext|>"), (Ids{6, 9}));
}

TEST_F(BpeTest, DecodesBytesAndSpecialTokens) {
  auto t = fromJson(tokenizerJson());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(decode(*t, {0, 5, 3}), "abcd");
  EXPECT_EQ(decode(*t, {4, 6, 4, 4}), " ab  ");
  EXPECT_EQ(decode(*t, {6, 9, 7}), "ab<|endoftext|>cd");
  EXPECT_EQ(decode(*t, {6, 9, 7}, /*skipSpecial=*/true), "abcd");
  absl::StatusOr<std::string> base = t->decode(Ids{9});
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(*base, "<|endoftext|>");
  expectError(t->decode(Ids{6, 10}).status(),
              absl::StatusCode::kInvalidArgument, "id 10 at position 1");
  expectError(t->decode(Ids{-1}).status(), absl::StatusCode::kInvalidArgument,
              "id -1");
}

TEST_F(BpeTest, CutCharactersDecodeToReplacementCharacters) {
  // 日 is E6 97 A5. GPT-2's characters: E6 and A5 are printable ('æ', '¥');
  // 97 is the 58th non-printable byte (after 0x00-0x20, 33 of them, and
  // 0x7F-0x96, 24), so U+0100 + 57 = U+0139 'Ĺ'.
  writeFile(path("v.json"),
            R"({"\u00e6": 0, "\u0139": 1, "\u00a5": 2, "x": 3})");
  writeFile(path("m.txt"), "");
  ByteLevelBpeOptions options;
  options.eodId = 3;
  auto t = ByteLevelBpeTokenizer::LoadFromFiles(path("v.json"), path("m.txt"),
                                                options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(encode(**t, "日"), (Ids{0, 1, 2}));
  EXPECT_EQ(decode(**t, {0, 1, 2}), "日");
  // E6 97 is the start of a sequence: one U+FFFD. 97 E6: two.
  EXPECT_EQ(decode(**t, {0, 1}), "\xEF\xBF\xBD");
  EXPECT_EQ(decode(**t, {1, 0}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  absl::StatusOr<std::string> bytes = (*t)->decodeBytes(Ids{0, 1});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, "\xE6\x97");
  // Malformed input is encoded byte by byte and comes back as it was.
  absl::StatusOr<Ids> ids = (*t)->encode("\xE6\x97");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (Ids{0, 1}));
}

TEST_F(BpeTest, PrefixSpaceAndStrippingAddedTokens) {
  std::string json = tokenizerJson(
      R"({"type": "ByteLevel", "add_prefix_space": true,
          "trim_offsets": true, "use_regex": true})");
  // A tenth id: "[M]", special, taking the whitespace around it.
  json.replace(json.find("\"added_tokens\": ["), 17,
               R"("added_tokens": [{"id": 10, "content": "[M]",
      "single_word": false, "lstrip": true, "rstrip": true,
      "normalized": false, "special": true}, )");
  auto t = fromJson(json);
  ASSERT_NE(t, nullptr);
  // "ab" -> " ab" -> Ġ ab.
  EXPECT_EQ(encode(*t, "ab"), (Ids{4, 6}));
  // Each stretch around an added token gets its own prefix space; the
  // spaces beside "[M]" are its own.
  EXPECT_EQ(encode(*t, "a [M] b"), (Ids{4, 0, 10, 4, 1}));
  EXPECT_EQ(encode(*t, "a[M]b"), (Ids{4, 0, 10, 4, 1}));
  EXPECT_EQ(t->vocabSize(), 11);
  EXPECT_EQ(decode(*t, {4, 0, 10, 4, 1}), " a[M] b");
}

TEST_F(BpeTest, BloomSplit) {
  // BLOOM: Split by ` ?[^(\s|[.,!?…。，、।۔،])]+`, then ByteLevel without
  // its regex: letters and "-" stay together, "!" stands apart.
  const std::string vocab = R"({"a": 0, "b": 1, "-": 2, "\u0120": 3, "!": 4,
      "a-": 5, "a-b": 6, "<|endoftext|>": 7})";
  std::string json = R"({"added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex":
        " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
       "use_regex": false}]},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": )" +
                     vocab + R"(, "merges": [["a", "-"], ["a-", "b"]]}})";
  auto bloom = fromJson(json);
  ASSERT_NE(bloom, nullptr);
  EXPECT_EQ(encode(*bloom, "a-b!a-b"), (Ids{6, 4, 6}));
  EXPECT_EQ(encode(*bloom, "a-b a-b"), (Ids{6, 3, 6}));
  // GPT-2's pattern splits letters from "-": no merge applies.
  std::string gpt2 = json;
  gpt2.replace(gpt2.find("\"use_regex\": false"), 18, "\"use_regex\": true");
  gpt2.replace(gpt2.find("{\"type\": \"Split\""),
               gpt2.find("{\"type\": \"ByteLevel\"") -
                   gpt2.find("{\"type\": \"Split\""),
               "");
  auto split = fromJson(gpt2);
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(encode(*split, "a-b!a-b"), (Ids{0, 2, 1, 4, 0, 2, 1}));
}

TEST_F(BpeTest, MergesAsPairsOrStrings) {
  auto pairs = fromJson(tokenizerJson(kByteLevel, kByteLevel,
                                      R"([["b", "c"], ["a", "b"], ["c", "d"]])"));
  ASSERT_NE(pairs, nullptr);
  EXPECT_EQ(encode(*pairs, "abcd dabc"), (Ids{0, 5, 3, 4, 3, 0, 5}));
}

TEST_F(BpeTest, TemplateProcessing) {
  auto t = fromJson(tokenizerJson());
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->sequenceTemplate().present);
  t = fromJson(tokenizerJson(
      kByteLevel, std::string(R"({"type": "Sequence", "processors": [)") +
                      kByteLevel + ", " + kEotTemplate + "]}"));
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->sequenceTemplate().present);
  EXPECT_EQ(t->sequenceTemplate().prefix, Ids{9});
  EXPECT_TRUE(t->sequenceTemplate().suffix.empty());
  // encode gives the text's ids only.
  EXPECT_EQ(encode(*t, "ab"), Ids{6});
}

TEST_F(BpeTest, RefusesWhatItDoesNotImplement) {
  const auto refuse = [&](std::string json, const std::string &from,
                          const std::string &to, const std::string &field) {
    size_t at = json.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    json.replace(at, from.size(), to);
    expectError(jsonError(json), absl::StatusCode::kInvalidArgument, field);
  };
  const std::string json = tokenizerJson();
  refuse(json, "\"type\": \"BPE\"", "\"type\": \"WordPiece\"",
         "model.type: \"WordPiece\" is not supported");
  refuse(json, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}",
         "normalizer.type: \"NFC\" is not supported");
  refuse(json, "\"dropout\": null", "\"dropout\": 0.1", "model.dropout");
  refuse(json, "\"byte_fallback\": false", "\"byte_fallback\": true",
         "model.byte_fallback");
  refuse(json, "\"continuing_subword_prefix\": \"\"",
         "\"continuing_subword_prefix\": \"##\"",
         "model.continuing_subword_prefix");
  refuse(json, "\"single_word\": false", "\"single_word\": true",
         "added_tokens[0].single_word");
  refuse(json, "\"decoder\": {\"type\": \"ByteLevel\"",
         "\"decoder\": {\"type\": \"WordPiece\"", "decoder.type");
  refuse(json, "\"post_processor\": {\"type\": \"ByteLevel\"",
         "\"post_processor\": {\"type\": \"RobertaProcessing\"",
         "post_processor.type: \"RobertaProcessing\"");
  expectError(jsonError(tokenizerJson(R"({"type": "Whitespace"})")),
              absl::StatusCode::kInvalidArgument,
              "pre_tokenizer.type: \"Whitespace\" is not supported");
  // LLaMA 3's pattern is not GPT-2's or BLOOM's.
  const std::string llama3 =
      tokenizerJson(R"({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"},
         "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  expectError(jsonError(llama3), absl::StatusCode::kInvalidArgument,
              "pre_tokenizer.pretokenizers[0].pattern.Regex: \"\\p{N}{1,3}\" "
              "is not supported");
  // GPT-2's pattern, but its matches removed.
  expectError(
      jsonError(tokenizerJson(R"({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Removed", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})")),
      absl::StatusCode::kInvalidArgument,
      "pre_tokenizer.pretokenizers[0].behavior: \"Removed\" is not supported");
  // No ByteLevel at all, or something after it.
  expectError(jsonError(tokenizerJson(R"({"type": "Sequence",
      "pretokenizers": []})")),
              absl::StatusCode::kInvalidArgument, "no ByteLevel");
  expectError(jsonError(tokenizerJson(R"({"type": "Sequence",
      "pretokenizers": [{"type": "ByteLevel"}, {"type": "ByteLevel"}]})")),
              absl::StatusCode::kInvalidArgument,
              "pre_tokenizer.pretokenizers[1].type");
  expectError(jsonError("{\"model\": "), absl::StatusCode::kInvalidArgument,
              "malformed JSON");
  expectError(jsonError("[1]"), absl::StatusCode::kInvalidArgument,
              "not a JSON object");
}

TEST_F(BpeTest, MalformedVocabularyAndMerges) {
  const auto load = [&](const std::string &vocab, const std::string &merges) {
    writeFile(path("vocab.json"), vocab);
    writeFile(path("merges.txt"), merges);
    return ByteLevelBpeTokenizer::LoadFromFiles(path("vocab.json"),
                                                path("merges.txt"))
        .status();
  };
  expectError(load(kVocab, "b c\na b c\n"), absl::StatusCode::kInvalidArgument,
              path("merges.txt") + ":2: \"a b c\" is not a merge");
  expectError(load(kVocab, "a x\n"), absl::StatusCode::kInvalidArgument,
              "token \"x\" is not in the vocabulary");
  expectError(load(kVocab, "a c\n"), absl::StatusCode::kInvalidArgument,
              "the merged token \"ac\" is not in the vocabulary");
  expectError(load(R"({"a": 0, "b": 0})", ""),
              absl::StatusCode::kInvalidArgument,
              "id 0 is given to both \"a\" and \"b\"");
  expectError(load(R"({"a": 1.5})", ""), absl::StatusCode::kInvalidArgument,
              "the id of token \"a\" is 1.5");
  expectError(load(R"({"a": 0})", ""), absl::StatusCode::kFailedPrecondition,
              "no token \"<|endoftext|>\"");
  std::filesystem::remove(path("merges.txt"));
  expectError(ByteLevelBpeTokenizer::LoadFromFiles(path("vocab.json"),
                                                   path("merges.txt"))
                  .status(),
              absl::StatusCode::kNotFound, path("merges.txt"));
  // "\r\n" line ends and a merges file without a version line.
  EXPECT_TRUE(load(kVocab, "b c\r\na b\r\n").ok());
}

//===----------------------------------------------------------------------===//
// Model directories
//===----------------------------------------------------------------------===//

TEST_F(BpeTest, ModelDirectoryWithoutTokenizer) {
  expectError(LoadModelTokenizer(path("missing")).status(),
              absl::StatusCode::kNotFound, "does not exist");
  expectError(LoadModelTokenizer(dir_).status(), absl::StatusCode::kNotFound,
              dir_ + " holds no tokenizer: tokenizer.json, vocab.json + "
                     "merges.txt or tokenizer.model");
  writeFile(path("vocab.json"), kVocab);
  expectError(LoadModelTokenizer(dir_).status(), absl::StatusCode::kNotFound,
              "vocab.json but no merges.txt");
}

TEST_F(BpeTest, Gpt2FilesDirectory) {
  writeFile(path("vocab.json"), kVocab);
  writeFile(path("merges.txt"), kMerges);
  absl::StatusOr<ModelTokenizer> m = LoadModelTokenizer(dir_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->source, "vocab.json + merges.txt");
  // GPT2Tokenizer's defaults: "<|endoftext|>" is BOS and EOS, as a special
  // added token; no BOS added.
  EXPECT_FALSE(m->addBos);
  EXPECT_EQ(m->bosId, 9);
  EXPECT_EQ(m->eosId, 9);
  EXPECT_THAT(m->eosIds, ElementsAre(9));
  absl::StatusOr<Ids> prompt = EncodePrompt(*m, "ab<|endoftext|>");
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, (Ids{6, 9}));

  // add_bos_token, generation_config.json's list over config.json's id.
  writeFile(path("tokenizer_config.json"),
            R"({"add_bos_token": true, "bos_token": {"content": "!"},
                "eos_token": "<|endoftext|>", "add_prefix_space": true})");
  writeFile(path("config.json"), R"({"bos_token_id": 0, "eos_token_id": 7})");
  writeFile(path("generation_config.json"), R"({"eos_token_id": [9, 8]})");
  m = LoadModelTokenizer(dir_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->addBos);
  EXPECT_EQ(m->bosId, 8); // bos_token "!" before bos_token_id
  EXPECT_THAT(m->eosIds, ElementsAre(9, 8));
  EXPECT_EQ(m->eosId, 9);
  prompt = EncodePrompt(*m, "ab");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, (Ids{8, 4, 6})); // BOS, then " ab" (add_prefix_space)

  writeFile(path("generation_config.json"), R"({"eos_token_id": 10})");
  expectError(LoadModelTokenizer(dir_).status(),
              absl::StatusCode::kInvalidArgument,
              "the EOS id 10 is outside the tokenizer's vocabulary [0, 10)");
  writeFile(path("generation_config.json"), R"({"eos_token_id": "x"})");
  expectError(LoadModelTokenizer(dir_).status(),
              absl::StatusCode::kInvalidArgument,
              "generation_config.json: eos_token_id: expected a token id");
  writeFile(path("generation_config.json"), "{");
  expectError(LoadModelTokenizer(dir_).status(),
              absl::StatusCode::kInvalidArgument,
              "generation_config.json: malformed JSON");
}

TEST_F(BpeTest, TokenizerJsonDirectoryWithTemplate) {
  writeFile(path("tokenizer.json"), tokenizerJson(kByteLevel, kEotTemplate));
  // The template decides, whatever tokenizer_config.json says.
  writeFile(path("tokenizer_config.json"), R"({"add_bos_token": false})");
  absl::StatusOr<ModelTokenizer> m = LoadModelTokenizer(dir_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->source, "tokenizer.json");
  EXPECT_TRUE(m->addBos);
  EXPECT_EQ(m->bosId, 9);
  EXPECT_THAT(m->eosIds, ElementsAre(9)); // "<|endoftext|>", the default
  absl::StatusOr<Ids> prompt = EncodePrompt(*m, "abcd");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, (Ids{9, 0, 5, 3}));
}

TEST_F(BpeTest, SentencePieceDirectory) {
  std::string corpus;
  for (int i = 0; i < 200; ++i)
    corpus += "the quick brown fox jumps over the lazy dog number " +
              std::to_string(i) + "\n";
  writeFile(path("corpus.txt"), corpus);
  TrainTokenizerOptions options;
  options.inputs = {path("corpus.txt")};
  options.modelPrefix = path("sp");
  options.vocabSize = 300;
  ASSERT_TRUE(TrainTokenizer(options).ok());
  std::filesystem::create_directory(path("model"));
  std::filesystem::copy_file(path("sp.model"), path("model/tokenizer.model"));
  // TrainTokenizer's ids: unk 0, bos 1 ("<s>"), eos 2 ("</s>"). The BOS is
  // found by its piece, read from the model file.
  absl::StatusOr<ModelTokenizer> m = LoadModelTokenizer(path("model"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->source, "tokenizer.model");
  EXPECT_TRUE(m->addBos); // LlamaTokenizer's default
  EXPECT_EQ(m->bosId, 1);
  EXPECT_THAT(m->eosIds, ElementsAre(2));
  absl::StatusOr<Ids> plain = m->tokenizer->encode("the fox");
  absl::StatusOr<Ids> prompt = EncodePrompt(*m, "the fox");
  ASSERT_TRUE(plain.ok() && prompt.ok());
  Ids want = {1};
  want.insert(want.end(), plain->begin(), plain->end());
  EXPECT_EQ(*prompt, want);
  writeFile(path("model/tokenizer_config.json"),
            R"({"add_bos_token": false, "add_eos_token": true})");
  m = LoadModelTokenizer(path("model"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->addBos);
  EXPECT_THAT(m->promptSuffix, ElementsAre(2));
  // A tokenizer.json Braid does not implement is set aside for it.
  writeFile(path("model/tokenizer.json"),
            R"({"model": {"type": "Unigram", "vocab": []}})");
  m = LoadModelTokenizer(path("model"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->source, "tokenizer.model");
  EXPECT_THAT(m->note, HasSubstr("model.type: \"Unigram\" is not supported"));
}

} // namespace
