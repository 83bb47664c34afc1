//===- PreprocessTest.cpp - Tokenizers, preprocess, train-tokenizer -------===//
//
// Expected datasets are computed here from the input text itself (its bytes,
// plus 256 where an EOD is asked for) and read back through IndexedDataset,
// so the check does not go through the tokenizer or writer under test. The
// SentencePiece tests train a small model on a corpus generated here.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/Preprocess.h"

#include "runtime/data/IndexedDataset.h"
#include "runtime/data/Tokenizer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace braid::data;
using ::testing::HasSubstr;

namespace {

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

/// The byte tokenizer's ids of `text`, computed without it.
std::vector<int64_t> bytesOf(const std::string &text, bool eod) {
  std::vector<int64_t> ids;
  for (unsigned char c : text)
    ids.push_back(c);
  if (eod)
    ids.push_back(256);
  return ids;
}

/// Every document of the dataset at `prefix`, one sequence each (empty for a
/// document without sequences).
std::vector<std::vector<int64_t>> readDocuments(const std::string &prefix) {
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(prefix);
  EXPECT_TRUE(ds.ok()) << ds.status();
  std::vector<std::vector<int64_t>> docs;
  if (!ds.ok())
    return docs;
  const std::vector<int64_t> &index = ds->documentIndex();
  for (size_t d = 0; d < ds->numDocuments(); ++d) {
    std::vector<int64_t> doc;
    for (int64_t s = index[d]; s < index[d + 1]; ++s) {
      std::vector<int64_t> seq;
      EXPECT_TRUE(ds->ReadSequence(s, 0, ds->sequenceLength(s), &seq).ok());
      doc.insert(doc.end(), seq.begin(), seq.end());
    }
    docs.push_back(doc);
  }
  return docs;
}

class PreprocessTest : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-preprocess-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  /// The names of the files in the test directory, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto &entry : std::filesystem::directory_iterator(dir_))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  /// Runs Preprocess with the byte tokenizer on one input that must fail,
  /// checks that nothing but the input is left, and returns the message.
  std::string failingPreprocess(const std::string &name,
                                const std::string &content,
                                bool splitLines = false) {
    writeFile(path(name), content);
    PreprocessOptions options;
    options.inputs = {path(name)};
    options.outputPrefix = path("out");
    options.splitLines = splitLines;
    absl::Status s = Preprocess(options);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(files(), std::vector<std::string>{name});
    std::filesystem::remove(path(name));
    return std::string(s.message());
  }

  std::string dir_;
};

TEST(ByteTokenizerTest, RoundTripsUtf8) {
  ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.vocabSize(), 257);
  EXPECT_EQ(tokenizer.eodId(), 256);
  // é (2 bytes), € (3 bytes), 𝄞 (4 bytes), written as escapes so the test
  // does not depend on the source encoding.
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC\xF0\x9D\x84\x9E\n\t!";
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  const std::vector<int32_t> expected = {99,  97,  102, 0xC3, 0xA9, 32,
                                         0xE2, 0x82, 0xAC, 0xF0, 0x9D, 0x84,
                                         0x9E, 10,  9,   33};
  EXPECT_EQ(*ids, expected);
  std::vector<int32_t> withEod = *ids;
  withEod.push_back(256);
  absl::StatusOr<std::string> decoded = tokenizer.decode(withEod);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, text);
  absl::StatusOr<std::string> bad = tokenizer.decode({65, 300});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("id 300"));
}

TEST_F(PreprocessTest, JsonlWithByteTokenizerAndEod) {
  // Line 3 is blank (skipped); line 4 holds JSON escapes: \u00e9 is é,
  // \ud834\udd1e is 𝄞 (a surrogate pair), \n a newline.
  writeFile(path("in.jsonl"),
            "{\"text\": \"Hello, world.\", \"id\": 1}\n"
            "{\"meta\": {\"a\": [1, 2]}, \"text\": \"two\"}\n"
            "   \n"
            "{\"text\": \"caf\\u00e9 \\ud834\\udd1e\\nend\"}\n"
            "{\"text\": \"\"}\n");
  PreprocessOptions options;
  options.inputs = {path("in.jsonl")};
  options.outputPrefix = path("out");
  options.appendEod = true;
  PreprocessSummary summary;
  std::vector<PreprocessProgress> reports;
  ASSERT_TRUE(Preprocess(
                  options,
                  [&](const PreprocessProgress &p) { reports.push_back(p); },
                  &summary)
                  .ok());
  const std::vector<std::vector<int64_t>> expected = {
      bytesOf("Hello, world.", true), bytesOf("two", true),
      bytesOf("caf\xC3\xA9 \xF0\x9D\x84\x9E\nend", true),
      {}, // "" is an empty document: no sequence, no EOD
  };
  EXPECT_EQ(readDocuments(path("out")), expected);
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("out"));
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->dtype(), DType::kUInt16);
  EXPECT_EQ(ds->numSequences(), 3u);

  uint64_t tokens = 0;
  for (const auto &doc : expected)
    tokens += doc.size();
  EXPECT_EQ(summary.documents, 4u);
  EXPECT_EQ(summary.sequences, 3u);
  EXPECT_EQ(summary.tokens, tokens);
  EXPECT_EQ(summary.dtype, DType::kUInt16);
  EXPECT_EQ(summary.bytesRead, readFile(path("in.jsonl")).size());
  // The last report is the final one, with the totals.
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().documents, 4u);
  EXPECT_EQ(reports.back().tokens, tokens);
  EXPECT_EQ(reports.back().bytesRead, summary.bytesRead);
  EXPECT_EQ(files(), (std::vector<std::string>{"in.jsonl", "out.bin",
                                                "out.idx"}));
}

TEST_F(PreprocessTest, CustomJsonKey) {
  writeFile(path("in.json"), "{\"text\": 5, \"content\": \"abc\"}\n");
  PreprocessOptions options;
  options.inputs = {path("in.json")};
  options.outputPrefix = path("out");
  options.jsonKey = "content";
  ASSERT_TRUE(Preprocess(options).ok());
  EXPECT_EQ(readDocuments(path("out")),
            (std::vector<std::vector<int64_t>>{bytesOf("abc", false)}));
}

TEST_F(PreprocessTest, TextFilesAreOneDocumentEach) {
  const std::string a = "First file.\n\nSecond paragraph \xC3\xA9.\n";
  const std::string b = "no newline at the end";
  writeFile(path("a.txt"), a);
  writeFile(path("b.md"), b);
  PreprocessOptions options;
  options.inputs = {path("a.txt"), path("b.md")};
  options.outputPrefix = path("out");
  ASSERT_TRUE(Preprocess(options).ok());
  EXPECT_EQ(readDocuments(path("out")),
            (std::vector<std::vector<int64_t>>{bytesOf(a, false),
                                               bytesOf(b, false)}));
}

TEST_F(PreprocessTest, SplitLinesMakesEveryNonBlankLineADocument) {
  writeFile(path("a.txt"), "one\r\n\ntwo two\n  \nthree");
  PreprocessOptions options;
  options.inputs = {path("a.txt")};
  options.outputPrefix = path("out");
  options.splitLines = true;
  options.appendEod = true;
  ASSERT_TRUE(Preprocess(options).ok());
  EXPECT_EQ(readDocuments(path("out")),
            (std::vector<std::vector<int64_t>>{bytesOf("one", true),
                                               bytesOf("two two", true),
                                               bytesOf("three", true)}));
}

TEST_F(PreprocessTest, FormatOverridesTheExtension) {
  writeFile(path("in.txt"), "{\"text\": \"x\"}\n");
  PreprocessOptions options;
  options.inputs = {path("in.txt")};
  options.outputPrefix = path("out");
  options.format = InputFormat::kJsonl;
  ASSERT_TRUE(Preprocess(options).ok());
  EXPECT_EQ(readDocuments(path("out")),
            (std::vector<std::vector<int64_t>>{bytesOf("x", false)}));
}

TEST_F(PreprocessTest, ErrorsNameFileAndLineAndLeaveNoOutput) {
  std::string m = failingPreprocess(
      "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  EXPECT_THAT(m, HasSubstr(path("bad.jsonl") + ":2: malformed JSON"));

  m = failingPreprocess("bad.jsonl",
                        "{\"text\": \"a\"}\n\n{\"body\": \"b\", \"id\": 3}\n");
  EXPECT_THAT(m, HasSubstr(path("bad.jsonl") + ":3: no key \"text\""));
  EXPECT_THAT(m, HasSubstr("\"body\", \"id\""));

  m = failingPreprocess("bad.jsonl", "{\"text\": 42}\n");
  EXPECT_THAT(m, HasSubstr(path("bad.jsonl") +
                           ":1: key \"text\" is a number, not a string"));
  m = failingPreprocess("bad.jsonl", "{\"text\": [\"a\"]}\n");
  EXPECT_THAT(m, HasSubstr(":1: key \"text\" is an array, not a string"));

  m = failingPreprocess("bad.jsonl", "{\"text\": \"a\"}\n[1, 2]\n");
  EXPECT_THAT(m, HasSubstr(path("bad.jsonl") + ":2: expected a JSON object"));

  m = failingPreprocess("empty.jsonl", "");
  EXPECT_THAT(m, HasSubstr(path("empty.jsonl") + ": empty input"));
  m = failingPreprocess("blank.jsonl", "\n  \n\n");
  EXPECT_THAT(m, HasSubstr(path("blank.jsonl") + ": empty input"));
  m = failingPreprocess("empty.txt", "");
  EXPECT_THAT(m, HasSubstr(path("empty.txt") + ": empty input"));
  m = failingPreprocess("blank.txt", "\n\n", /*splitLines=*/true);
  EXPECT_THAT(m, HasSubstr(path("blank.txt") + ": empty input"));
}

TEST_F(PreprocessTest, FailureInALaterFileLeavesNoOutput) {
  // The first file is tokenized and written before the second one fails.
  writeFile(path("good.jsonl"), std::string(100000, '\n') + "{\"text\": \"a\"}\n");
  writeFile(path("bad.jsonl"), "{\"text\": \"b\"}\n{\"text\": null}\n");
  PreprocessOptions options;
  options.inputs = {path("good.jsonl"), path("bad.jsonl")};
  options.outputPrefix = path("out");
  absl::Status s = Preprocess(options);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(path("bad.jsonl") + ":2: key \"text\" is null"));
  EXPECT_EQ(files(), (std::vector<std::string>{"bad.jsonl", "good.jsonl"}));
}

TEST_F(PreprocessTest, MissingInputIsNamedBeforeAnyWork) {
  writeFile(path("good.txt"), "text");
  PreprocessOptions options;
  options.inputs = {path("good.txt"), path("missing.txt")};
  options.outputPrefix = path("out");
  absl::Status s = Preprocess(options);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path("missing.txt")));
  EXPECT_EQ(files(), std::vector<std::string>{"good.txt"});
}

TEST_F(PreprocessTest, SentencePieceLoadErrorsNameTheFile) {
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
      SentencePieceTokenizer::Load(path("none.model"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path("none.model")));

  writeFile(path("corrupt.model"), "this is not a protobuf \xff\xfe\x01");
  t = SentencePieceTokenizer::Load(path("corrupt.model"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr(path("corrupt.model")));

  // Preprocess with a missing model fails before writing anything.
  writeFile(path("in.txt"), "text");
  PreprocessOptions options;
  options.inputs = {path("in.txt")};
  options.outputPrefix = path("out");
  options.tokenizerModel = path("none.model");
  absl::Status s = Preprocess(options);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path("none.model")));
  EXPECT_EQ(files(), (std::vector<std::string>{"corrupt.model", "in.txt"}));
}

/// About 300 KB of sentences over a small alphabet (lowercase, space,
/// period, comma), so that a 300-piece vocabulary fits beside the 256 byte
/// pieces. Generated by a fixed LCG: the same corpus on every run.
std::string generatedCorpus() {
  const std::vector<std::string> words = {
      "the",   "a",      "of",     "and",   "to",     "in",    "was",
      "she",   "her",    "he",     "it",    "that",   "had",   "not",
      "for",   "with",   "his",    "as",    "be",     "but",   "elizabeth",
      "darcy", "sister", "family", "ball",  "letter", "house", "morning",
      "quite", "very",   "said",   "would", "could",  "never", "always"};
  std::string text;
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(state >> 33);
  };
  while (text.size() < 300000) {
    size_t n = 4 + next() % 10;
    for (size_t i = 0; i < n; ++i) {
      text += words[next() % words.size()];
      text += i + 1 == n ? "." : (next() % 7 == 0 ? ", " : " ");
    }
    text += "\n";
  }
  return text;
}

class SentencePieceTest : public PreprocessTest {
protected:
  /// Trains a 300-piece model on the generated corpus into PREFIX.model.
  absl::Status train(const std::string &prefix, const std::string &input) {
    TrainTokenizerOptions options;
    options.inputs = {input};
    options.modelPrefix = prefix;
    options.vocabSize = 300;
    return TrainTokenizer(options);
  }
};

TEST_F(SentencePieceTest, TrainsLoadsAndRoundTrips) {
  writeFile(path("corpus.txt"), generatedCorpus());
  ASSERT_TRUE(train(path("m"), path("corpus.txt")).ok());
  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
      SentencePieceTokenizer::Load(path("m.model"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocabSize(), 300);
  EXPECT_EQ((*t)->eodId(), 2);
  // Words from the corpus, one unseen word, double spaces, a character
  // outside the alphabet (byte fallback) and a newline: all lossless.
  const std::string sentence =
      "elizabeth said  that the letter was zyx, caf\xC3\xA9.\nthe end";
  absl::StatusOr<std::vector<int32_t>> ids = (*t)->encode(sentence);
  ASSERT_TRUE(ids.ok()) << ids.status();
  // BPE merged something: fewer ids than bytes.
  EXPECT_LT(ids->size(), sentence.size());
  for (int32_t id : *ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 300);
  }
  absl::StatusOr<std::string> decoded = (*t)->decode(*ids);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, sentence);
}

TEST_F(SentencePieceTest, TrainingIsDeterministic) {
  writeFile(path("corpus.txt"), generatedCorpus());
  ASSERT_TRUE(train(path("m"), path("corpus.txt")).ok());
  const std::string first = readFile(path("m.model"));
  ASSERT_FALSE(first.empty());
  std::filesystem::remove(path("m.model"));
  ASSERT_TRUE(train(path("m"), path("corpus.txt")).ok());
  EXPECT_TRUE(readFile(path("m.model")) == first)
      << "two trainings on the same input gave different models";
}

TEST_F(SentencePieceTest, TrainsOnJsonlAndRemovesTheExtract) {
  std::string corpus = generatedCorpus();
  std::string jsonl;
  size_t start = 0;
  // Documents of a few lines each; the "\n" inside is a JSON escape.
  for (int doc = 0; start < corpus.size(); ++doc) {
    size_t end = start;
    for (int line = 0; line < 5 && end < corpus.size(); ++line)
      end = corpus.find('\n', end) + 1;
    std::string text = corpus.substr(start, end - start);
    std::string escaped;
    for (char c : text)
      escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
    jsonl += "{\"id\": " + std::to_string(doc) + ", \"text\": \"" + escaped +
             "\"}\n";
    start = end;
  }
  writeFile(path("corpus.jsonl"), jsonl);
  ASSERT_TRUE(train(path("m"), path("corpus.jsonl")).ok());
  EXPECT_EQ(files(), (std::vector<std::string>{"corpus.jsonl", "m.model",
                                                "m.vocab"}));
  EXPECT_TRUE(SentencePieceTokenizer::Load(path("m.model")).ok());

  // A bad JSONL line fails the training, names the line, leaves no extract.
  writeFile(path("bad.jsonl"), "{\"text\": \"a b\"}\n{\"text\": 1}\n");
  absl::Status s = train(path("m2"), path("bad.jsonl"));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path("bad.jsonl") + ":2:"));
  EXPECT_EQ(files(), (std::vector<std::string>{"bad.jsonl", "corpus.jsonl",
                                                "m.model", "m.vocab"}));
}

TEST_F(SentencePieceTest, TrainErrors) {
  writeFile(path("corpus.txt"), generatedCorpus());
  TrainTokenizerOptions options;
  options.inputs = {path("corpus.txt")};
  options.modelPrefix = path("m");
  options.vocabSize = 0;
  EXPECT_FALSE(TrainTokenizer(options).ok());
  // Too small for 256 byte pieces, 3 specials and the corpus' characters:
  // SentencePiece's message comes through.
  options.vocabSize = 100;
  absl::Status s = TrainTokenizer(options);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("Vocabulary size"));
  options.vocabSize = 300;
  options.inputs = {path("missing.txt")};
  s = TrainTokenizer(options);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path("missing.txt")));
  EXPECT_EQ(files(), std::vector<std::string>{"corpus.txt"});
}

TEST_F(SentencePieceTest, PreprocessEndToEnd) {
  writeFile(path("corpus.txt"), generatedCorpus());
  ASSERT_TRUE(train(path("m"), path("corpus.txt")).ok());
  const std::vector<std::string> texts = {
      "the sister said that the ball was very quite.",
      "darcy,  elizabeth and her family.\nnever always.", "x"};
  std::string jsonl;
  for (const std::string &text : texts) {
    std::string escaped;
    for (char c : text)
      escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
    jsonl += "{\"text\": \"" + escaped + "\"}\n";
  }
  writeFile(path("in.jsonl"), jsonl);
  PreprocessOptions options;
  options.inputs = {path("in.jsonl")};
  options.outputPrefix = path("out");
  options.tokenizerModel = path("m.model");
  options.appendEod = true;
  PreprocessSummary summary;
  ASSERT_TRUE(Preprocess(options, nullptr, &summary).ok());
  EXPECT_EQ(summary.dtype, DType::kUInt16);
  EXPECT_EQ(summary.vocabSize, 300);

  absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
      SentencePieceTokenizer::Load(path("m.model"));
  ASSERT_TRUE(t.ok());
  std::vector<std::vector<int64_t>> docs = readDocuments(path("out"));
  ASSERT_EQ(docs.size(), texts.size());
  uint64_t tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    ASSERT_GE(docs[d].size(), 2u);
    // Every document ends with eos (id 2) and has no other.
    EXPECT_EQ(docs[d].back(), 2);
    std::vector<int32_t> ids(docs[d].begin(), docs[d].end() - 1);
    for (int32_t id : ids) {
      EXPECT_NE(id, 2);
      EXPECT_LT(id, 300);
    }
    absl::StatusOr<std::string> text = (*t)->decode(ids);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, texts[d]);
    tokens += docs[d].size();
  }
  EXPECT_EQ(summary.tokens, tokens);
}

} // namespace
