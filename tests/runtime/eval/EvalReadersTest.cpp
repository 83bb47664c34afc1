//===- EvalReadersTest.cpp - Benchmarks read from their published files ---===//
//
// The readers on the files shipped in tests/data/eval (each benchmark's
// layout) and on broken copies, whose errors must name the file, the line
// (or example) and the field. Expected queries are written out from the
// harness's templates (the task files Benchmarks.h names).
//
//===----------------------------------------------------------------------===//

#include "runtime/eval/Benchmarks.h"
#include "runtime/eval/Csv.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace braid::eval;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

const std::string kData = BRAID_EVAL_TEST_DATA;

void writeFile(const std::string &path, const std::string &text) {
  std::filesystem::create_directories(
      std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

/// A fresh directory per test, removed after it.
class EvalFiles : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-eval-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  /// The error of reading `benchmark` from the directory, which must fail
  /// with InvalidArgument.
  std::string errorOf(Benchmark benchmark, const std::string &sub = "") {
    absl::StatusOr<BenchmarkData> data =
        ReadBenchmark(benchmark, sub.empty() ? dir_ : path(sub));
    EXPECT_FALSE(data.ok());
    if (data.ok())
      return "";
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument)
        << data.status();
    return std::string(data.status().message());
  }

  std::string dir_;
};

std::vector<std::string> fieldsOf(const CsvRecord &record) {
  return record.fields;
}

//===----------------------------------------------------------------------===//
// CSV
//===----------------------------------------------------------------------===//

TEST(Csv, QuotedFieldsHoldCommasQuotesAndLineBreaks) {
  absl::StatusOr<std::vector<CsvRecord>> records =
      ParseCsv("a,\"b, c\",\"say \"\"hi\"\"\"\r\n"
               "\n"
               "\"two\nlines\",,x\"y\n"
               "last,\"\"",
               "f.csv");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].line, 1);
  EXPECT_THAT(fieldsOf((*records)[0]), ElementsAre("a", "b, c", "say \"hi\""));
  // The blank line 2 is skipped; the quoted field spans lines 3 and 4.
  EXPECT_EQ((*records)[1].line, 3);
  EXPECT_THAT(fieldsOf((*records)[1]), ElementsAre("two\nlines", "", "x\"y"));
  EXPECT_EQ((*records)[2].line, 5);
  EXPECT_THAT(fieldsOf((*records)[2]), ElementsAre("last", ""));
}

TEST(Csv, ByteOrderMarkIsDropped) {
  absl::StatusOr<std::vector<CsvRecord>> records =
      ParseCsv("\xEF\xBB\xBFid,q\n1,2\n", "f.csv");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_THAT(fieldsOf((*records)[0]), ElementsAre("id", "q"));
}

TEST(Csv, UnclosedQuoteNamesItsLine) {
  absl::StatusOr<std::vector<CsvRecord>> records =
      ParseCsv("a,b\nc,\"open\nstill open\n", "f.csv");
  ASSERT_FALSE(records.ok());
  EXPECT_THAT(records.status().message(), HasSubstr("f.csv:2:"));
  EXPECT_THAT(records.status().message(), HasSubstr("not closed"));
  EXPECT_THAT(records.status().message(), HasSubstr("field 2"));
}

TEST(Csv, TextAfterClosingQuoteIsRefused) {
  absl::StatusOr<std::vector<CsvRecord>> records =
      ParseCsv("a,\"b\"c,d\n", "f.csv");
  ASSERT_FALSE(records.ok());
  EXPECT_THAT(records.status().message(), HasSubstr("f.csv:1: field 2"));
}

TEST(PythonStrip, StripsWhatStrStripStrips) {
  // U+3000 (ideographic space), U+00A0, tab, newline; U+200B (zero width
  // space) is not a space to Python.
  EXPECT_EQ(PythonStrip("\xE3\x80\x80 \t x y\xC2\xA0\n"), "x y");
  EXPECT_EQ(PythonStrip("\xE2\x80\x8Bx"), "\xE2\x80\x8Bx");
  EXPECT_EQ(PythonStrip(" \n "), "");
}

//===----------------------------------------------------------------------===//
// The shipped files
//===----------------------------------------------------------------------===//

TEST(Readers, Mmlu) {
  absl::StatusOr<BenchmarkData> data = ReadMmlu(kData + "/mmlu");
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->subtasks.size(), 2u);
  const Subtask &math = data->subtasks[0];
  EXPECT_EQ(math.name, "elementary_mathematics");
  EXPECT_EQ(math.displayName, "elementary mathematics");
  EXPECT_EQ(math.category, "stem");
  EXPECT_EQ(math.description, "The following are multiple choice questions "
                              "(with answers) about elementary "
                              "mathematics.\n\n");
  ASSERT_EQ(math.shots.size(), 5u);
  EXPECT_EQ(math.shots[3].query,
            "A box holds 4 rows of 6 eggs. How many eggs, in all?\n"
            "A. 10\nB. 20\nC. 24\nD. 28\nAnswer:");
  EXPECT_EQ(math.shots[3].answer, "C");
  ASSERT_EQ(math.items.size(), 4u);
  EXPECT_EQ(math.items[0].where,
            kData + "/mmlu/test/elementary_mathematics_test.csv:1");
  EXPECT_THAT(math.items[0].choices, ElementsAre("A", "B", "C", "D"));
  EXPECT_EQ(math.items[0].gold, 2);
  // The question is stripped, the options are not.
  EXPECT_EQ(math.items[1].query, "Which fraction equals one half?\n"
                                 "A. 1/3\nB. 2/4\nC. 3/5\nD. 2/3\nAnswer:");
  EXPECT_EQ(math.items[1].gold, 1);
  EXPECT_EQ(math.items[3].query,
            "The word \"sum\" names the result of which operation?\n"
            "(Choose one.)\nA. subtraction\nB. multiplication\nC. addition\n"
            "D. division\nAnswer:");
  EXPECT_EQ(math.items[3].where,
            kData + "/mmlu/test/elementary_mathematics_test.csv:4");

  const Subtask &geography = data->subtasks[1];
  EXPECT_EQ(geography.name, "high_school_geography");
  EXPECT_EQ(geography.category, "social_sciences");
  // The dev file has CRLF line ends.
  ASSERT_EQ(geography.shots.size(), 5u);
  EXPECT_EQ(geography.shots[0].query,
            "Which is the largest ocean on Earth?\nA. Atlantic\nB. Indian\n"
            "C. Arctic\nD. Pacific\nAnswer:");
  EXPECT_EQ(geography.shots[0].answer, "D");
  ASSERT_EQ(geography.items.size(), 4u);
  std::vector<int64_t> golds;
  for (const Item &item : geography.items)
    golds.push_back(item.gold);
  EXPECT_THAT(golds, ElementsAre(1, 2, 2, 0));
}

TEST(Readers, Ceval) {
  absl::StatusOr<BenchmarkData> data = ReadCeval(kData + "/ceval");
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->subtasks.size(), 1u);
  const Subtask &subject = data->subtasks[0];
  EXPECT_EQ(subject.name, "middle_school_mathematics");
  EXPECT_EQ(subject.category, "STEM");
  EXPECT_EQ(subject.description,
            "以下是中国关于初中数学的单项选择题，请选出其中的正确答案。\n\n");
  ASSERT_EQ(subject.shots.size(), 5u);
  EXPECT_EQ(subject.shots[1].query,
            "下列哪个数是偶数？\nA. 3\nB. 5\nC. 8\nD. 11\n答案：");
  EXPECT_EQ(subject.shots[1].answer, "C");
  ASSERT_EQ(subject.items.size(), 4u);
  EXPECT_EQ(subject.items[0].query,
            "2+2等于多少？\nA. 4\nB. 3\nC. 5\nD. 6\n答案：");
  EXPECT_EQ(subject.items[0].where,
            kData + "/ceval/val/middle_school_mathematics_val.csv:2");
  std::vector<int64_t> golds;
  for (const Item &item : subject.items)
    golds.push_back(item.gold);
  EXPECT_THAT(golds, ElementsAre(0, 3, 1, 2));
}

TEST(Readers, Boolq) {
  absl::StatusOr<BenchmarkData> data = ReadBoolq(kData + "/boolq");
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->subtasks.size(), 1u);
  const Subtask &boolq = data->subtasks[0];
  EXPECT_EQ(boolq.name, "boolq");
  EXPECT_EQ(boolq.description, "");
  ASSERT_EQ(boolq.shots.size(), 4u);
  EXPECT_EQ(boolq.shots[1].answer, "no");
  EXPECT_EQ(boolq.shots[2].answer, "yes");
  ASSERT_EQ(boolq.items.size(), 6u);
  EXPECT_EQ(boolq.items[0].query,
            "Botanically, a tomato is a fruit: it grows from the flower of "
            "the plant and holds its seeds.\nQuestion: is a tomato a fruit?\n"
            "Answer:");
  EXPECT_THAT(boolq.items[0].choices, ElementsAre("no", "yes"));
  std::vector<int64_t> golds;
  for (const Item &item : boolq.items)
    golds.push_back(item.gold);
  EXPECT_THAT(golds, ElementsAre(1, 0, 1, 0, 1, 0));
}

TEST(Readers, Agieval) {
  absl::StatusOr<BenchmarkData> data = ReadAgieval(kData + "/agieval");
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->subtasks.size(), 1u);
  const Subtask &task = data->subtasks[0];
  EXPECT_EQ(task.name, "sat-math");
  ASSERT_EQ(task.items.size(), 4u);
  EXPECT_EQ(task.items[0].query,
            "Q: If 3x = 12, what is the value of x? Answer Choices: (A)3 "
            "(B)4 (C)9 (D)36\nA: Among A through D, the answer is");
  EXPECT_THAT(task.items[0].choices,
              ElementsAre("(A)3", "(B)4", "(C)9", "(D)36"));
  EXPECT_EQ(task.items[0].gold, 1);
  EXPECT_EQ(task.items[3].gold, 0);
  EXPECT_TRUE(task.shots.empty());
}

TEST(Readers, Bbh) {
  absl::StatusOr<BenchmarkData> data = ReadBbh(kData + "/bbh");
  ASSERT_TRUE(data.ok()) << data.status();
  // The _fewshot.json file is the task's shots, not a task.
  ASSERT_EQ(data->subtasks.size(), 1u);
  const Subtask &task = data->subtasks[0];
  EXPECT_EQ(task.name, "object_counting");
  EXPECT_EQ(task.description, "Count the things a question lists.\n\n");
  ASSERT_EQ(task.shots.size(), 3u);
  EXPECT_EQ(task.shots[0].query,
            "Q: I have a banana and a kiwi. How many fruits do I have?\nA:");
  EXPECT_EQ(task.shots[0].answer, "2");
  ASSERT_EQ(task.items.size(), 5u);
  EXPECT_EQ(task.items[1].query, "Q: I have a chair, a table, and three "
                                 "lamps. How many objects do I have?\nA:");
  EXPECT_EQ(task.items[1].target, "5");
  EXPECT_EQ(task.items[1].where,
            kData + "/bbh/object_counting.json: example 2");
}

TEST(Readers, Gsm8k) {
  absl::StatusOr<BenchmarkData> data = ReadGsm8k(kData + "/gsm8k");
  ASSERT_TRUE(data.ok()) << data.status();
  const Subtask &gsm8k = data->subtasks[0];
  ASSERT_EQ(gsm8k.shots.size(), 3u);
  EXPECT_EQ(gsm8k.shots[2].query, "Question: A train travels 60 miles each "
                                  "hour. How far does it go in 4 hours?\n"
                                  "Answer:");
  EXPECT_EQ(gsm8k.shots[2].answer,
            "In 4 hours it goes 60*4=<<60*4=240>>240 miles.\n#### 240");
  ASSERT_EQ(gsm8k.items.size(), 4u);
  EXPECT_EQ(gsm8k.items[3].target,
            "It is now 4-9=<<4-9=-5>>-5 degrees.\n#### -5");
  EXPECT_EQ(gsm8k.items[3].where, kData + "/gsm8k/test.jsonl:4");
}

TEST(Readers, HumanEval) {
  absl::StatusOr<BenchmarkData> data = ReadHumanEval(kData + "/humaneval");
  ASSERT_TRUE(data.ok()) << data.status();
  const Subtask &humaneval = data->subtasks[0];
  ASSERT_EQ(humaneval.items.size(), 3u);
  const Item &item = humaneval.items[0];
  EXPECT_EQ(item.taskId, "HumanEval/0");
  EXPECT_EQ(item.entryPoint, "add_two");
  EXPECT_EQ(item.query, "\n\ndef add_two(a: int, b: int):\n"
                        "    \"\"\" Return the sum of a and b.\n"
                        "    >>> add_two(2, 3)\n    5\n    \"\"\"\n");
  EXPECT_EQ(item.target, "\n\nMETADATA = {}\n\n\ndef check(candidate):\n"
                         "    assert candidate(2, 3) == 5\n"
                         "    assert candidate(-1, 1) == 0\n");
}

TEST(Readers, ByName) {
  EXPECT_EQ(*ParseBenchmark("gsm8k"), Benchmark::kGsm8k);
  EXPECT_EQ(BenchmarkName(Benchmark::kHumanEval), "humaneval");
  absl::StatusOr<Benchmark> unknown = ParseBenchmark("arc");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("\"arc\""));
}

//===----------------------------------------------------------------------===//
// Broken files
//===----------------------------------------------------------------------===//

TEST_F(EvalFiles, MmluMissingColumn) {
  writeFile(path("test/anatomy_test.csv"), "Q1?,a,b,c,d,A\nQ2?,a,b,c,d\n");
  const std::string message = errorOf(Benchmark::kMmlu);
  EXPECT_THAT(message, HasSubstr(path("test/anatomy_test.csv") + ":2:"));
  EXPECT_THAT(message, HasSubstr("missing field 6 (answer)"));
}

TEST_F(EvalFiles, MmluBadAnswerLetter) {
  writeFile(path("test/anatomy_test.csv"),
            "Q1?,a,b,c,d,A\nQ2?,a,b,c,d,B\nQ3?,a,b,c,d,E\n");
  const std::string message = errorOf(Benchmark::kMmlu);
  EXPECT_THAT(message, HasSubstr(path("test/anatomy_test.csv") + ":3:"));
  EXPECT_THAT(message, HasSubstr("field 6 (answer) is \"E\""));
}

TEST_F(EvalFiles, MmluBadDevFile) {
  writeFile(path("test/anatomy_test.csv"), "Q1?,a,b,c,d,A\n");
  writeFile(path("dev/anatomy_dev.csv"), "Q1?,a,b,c,d,A,extra\n");
  const std::string message = errorOf(Benchmark::kMmlu);
  EXPECT_THAT(message, HasSubstr(path("dev/anatomy_dev.csv") + ":1:"));
  EXPECT_THAT(message, HasSubstr("7 fields"));
}

TEST_F(EvalFiles, MmluWithoutTestDirectory) {
  absl::StatusOr<BenchmarkData> data = ReadMmlu(dir_);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(data.status().message(), HasSubstr(path("test")));
}

TEST_F(EvalFiles, CevalMissingColumn) {
  writeFile(path("val/law_val.csv"), "id,question,A,B,C,D\n0,q,a,b,c,d\n");
  const std::string message = errorOf(Benchmark::kCeval);
  EXPECT_THAT(message, HasSubstr(path("val/law_val.csv") + ":1:"));
  EXPECT_THAT(message, HasSubstr("no column \"answer\""));
}

TEST_F(EvalFiles, CevalMissingField) {
  writeFile(path("val/law_val.csv"),
            "id,question,A,B,C,D,answer\n0,q,a,b,c,d,A\n1,q,a,b,c\n");
  const std::string message = errorOf(Benchmark::kCeval);
  EXPECT_THAT(message, HasSubstr(path("val/law_val.csv") + ":3:"));
  EXPECT_THAT(message, HasSubstr("missing field \"D\""));
}

TEST_F(EvalFiles, CevalBadAnswer) {
  writeFile(path("val/law_val.csv"),
            "id,question,A,B,C,D,answer\n0,q,a,b,c,d,a\n");
  const std::string message = errorOf(Benchmark::kCeval);
  EXPECT_THAT(message, HasSubstr(path("val/law_val.csv") + ":2:"));
  EXPECT_THAT(message, HasSubstr("field \"answer\" is \"a\""));
}

TEST_F(EvalFiles, CevalSubjectOutsideTheHarnessList) {
  writeFile(path("val/quantum_cooking_val.csv"),
            "id,question,A,B,C,D,answer\n0,q,a,b,c,d,A\n");
  absl::StatusOr<BenchmarkData> data = ReadCeval(dir_);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->subtasks[0].category, "");
  EXPECT_EQ(data->subtasks[0].description,
            "以下是中国关于quantum cooking的单项选择题，请选出其中的正确答案。"
            "\n\n");
}

TEST_F(EvalFiles, BoolqBadJson) {
  writeFile(path("dev.jsonl"),
            "{\"question\": \"q\", \"passage\": \"p\", \"answer\": true}\n"
            "{\"question\": \"q\", \"passage\": \"p\", \"answer\": tru}\n");
  const std::string message = errorOf(Benchmark::kBoolq);
  EXPECT_THAT(message, HasSubstr(path("dev.jsonl") + ":2: malformed JSON"));
}

TEST_F(EvalFiles, BoolqMissingField) {
  writeFile(path("dev.jsonl"), "\n{\"question\": \"q\", \"answer\": true}\n");
  const std::string message = errorOf(Benchmark::kBoolq);
  EXPECT_THAT(message,
              HasSubstr(path("dev.jsonl") + ":2: missing field \"passage\""));
}

TEST_F(EvalFiles, BoolqSuperGlueLabels) {
  // SuperGLUE's val.jsonl with label, as a boolean or as 1/0.
  writeFile(path("val.jsonl"),
            "{\"question\": \"q\", \"passage\": \"p\", \"label\": true}\n"
            "{\"question\": \"q\", \"passage\": \"p\", \"label\": 0}\n"
            "{\"question\": \"q\", \"passage\": \"p\", \"label\": 1}\n");
  absl::StatusOr<BenchmarkData> data = ReadBoolq(dir_);
  ASSERT_TRUE(data.ok()) << data.status();
  const std::vector<Item> &items = data->subtasks[0].items;
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].gold, 1);
  EXPECT_EQ(items[1].gold, 0);
  EXPECT_EQ(items[2].gold, 1);

  writeFile(path("val.jsonl"),
            "{\"question\": \"q\", \"passage\": \"p\", \"label\": 2}\n");
  const std::string message = errorOf(Benchmark::kBoolq);
  EXPECT_THAT(message, HasSubstr(path("val.jsonl") + ":1: field \"label\""));
}

TEST_F(EvalFiles, BoolqAnswerOfTheWrongType) {
  writeFile(path("dev.jsonl"),
            "{\"question\": \"q\", \"passage\": \"p\", \"answer\": \"yes\"}\n");
  const std::string message = errorOf(Benchmark::kBoolq);
  EXPECT_THAT(message, HasSubstr(path("dev.jsonl") +
                                 ":1: field \"answer\" is a string"));
}

TEST_F(EvalFiles, AgievalLabelOutsideTheOptions) {
  writeFile(path("lsat-ar.jsonl"),
            "{\"passage\": \"P. \", \"question\": \"q\", \"options\": "
            "[\"(A)x\", \"(B)y\"], \"label\": \"C\"}\n");
  const std::string message = errorOf(Benchmark::kAgieval);
  EXPECT_THAT(message, HasSubstr(path("lsat-ar.jsonl") + ":1:"));
  EXPECT_THAT(message, HasSubstr("field \"label\" is \"C\", not one of A, B"));
}

TEST_F(EvalFiles, AgievalPassageAndOptionTypes) {
  writeFile(path("logiqa-en.jsonl"),
            "{\"passage\": \"A passage.\", \"question\": \"Which?\", "
            "\"options\": [\"(A)x\", \"(B)y\", \"(C)z\"], \"label\": \"C\"}\n");
  absl::StatusOr<BenchmarkData> data = ReadAgieval(dir_);
  ASSERT_TRUE(data.ok()) << data.status();
  // The passage runs into "Q: " as AGIEval's convert_zero_shot joins them.
  EXPECT_EQ(data->subtasks[0].items[0].query,
            "A passage.Q: Which? Answer Choices: (A)x (B)y (C)z\n"
            "A: Among A through C, the answer is");

  writeFile(path("logiqa-en.jsonl"),
            "{\"passage\": null, \"question\": \"Which?\", "
            "\"options\": [\"(A)x\", 2], \"label\": \"A\"}\n");
  const std::string message = errorOf(Benchmark::kAgieval);
  EXPECT_THAT(message, HasSubstr(path("logiqa-en.jsonl") +
                                 ":1: field \"options[1]\" is a number"));
}

TEST_F(EvalFiles, AgievalWithoutTasks) {
  writeFile(path("math.jsonl"), "{}\n");
  absl::StatusOr<BenchmarkData> data = ReadAgieval(dir_);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(data.status().message(), HasSubstr("lsat-ar.jsonl"));
}

TEST_F(EvalFiles, BbhMissingTarget) {
  writeFile(path("navigate.json"),
            "{\"examples\": [{\"input\": \"a\", \"target\": \"Yes\"}, "
            "{\"input\": \"b\"}]}");
  const std::string message = errorOf(Benchmark::kBbh);
  EXPECT_THAT(message, HasSubstr(path("navigate.json") +
                                 ": example 2: missing field \"target\""));
}

TEST_F(EvalFiles, BbhBadJson) {
  writeFile(path("navigate.json"), "{\"examples\": [");
  const std::string message = errorOf(Benchmark::kBbh);
  EXPECT_THAT(message, HasSubstr(path("navigate.json") + ": malformed JSON"));
}

TEST_F(EvalFiles, BbhShotsFromTheChainOfThoughtPrompt) {
  // BIG-Bench Hard's layout: bbh/<task>.json and cot-prompts/<task>.txt.
  writeFile(path("bbh/navigate.json"),
            "{\"examples\": [{\"input\": \"Go.\", \"target\": \"Yes\"}]}");
  writeFile(path("cot-prompts/navigate.txt"),
            "A header line.\n-----\nSay whether you end where you began.\n\n"
            "Q: Take 1 step. Take 1 step back.\n"
            "A: Let's think step by step.\nWe move 1 and back 1.\n"
            "So the answer is Yes.\n\n"
            "Q: Take 2 steps.\nA: Let's think step by step.\n"
            "We move 2. So the answer is No.");
  absl::StatusOr<BenchmarkData> data = ReadBbh(path("bbh"));
  ASSERT_TRUE(data.ok()) << data.status();
  const Subtask &task = data->subtasks[0];
  EXPECT_EQ(task.description, "Say whether you end where you began.\n\n");
  ASSERT_EQ(task.shots.size(), 2u);
  EXPECT_EQ(task.shots[0].query, "Q: Take 1 step. Take 1 step back.\nA:");
  EXPECT_EQ(task.shots[0].answer, "Yes");
  EXPECT_EQ(task.shots[1].query, "Q: Take 2 steps.\nA:");
  EXPECT_EQ(task.shots[1].answer, "No");

  writeFile(path("cot-prompts/navigate.txt"),
            "Describe.\n\nQ: Take 2 steps.\nA: Let's think step by step.\n"
            "We move 2.");
  absl::StatusOr<BenchmarkData> broken = ReadBbh(path("bbh"));
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(),
              HasSubstr(path("bbh/../cot-prompts/navigate.txt") +
                        ": block 2 has no \"answer is \""));
}

TEST_F(EvalFiles, BbhWithoutShots) {
  writeFile(path("navigate.json"),
            "{\"examples\": [{\"input\": \"Go.\", \"target\": \"Yes\"}]}");
  absl::StatusOr<BenchmarkData> data = ReadBbh(dir_);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE(data->subtasks[0].shots.empty());
  EXPECT_EQ(data->subtasks[0].description, "");
}

TEST_F(EvalFiles, Gsm8kMissingAnswer) {
  writeFile(path("test.jsonl"), "{\"question\": \"How many?\"}\n");
  const std::string message = errorOf(Benchmark::kGsm8k);
  EXPECT_THAT(message,
              HasSubstr(path("test.jsonl") + ":1: missing field \"answer\""));
}

TEST_F(EvalFiles, Gsm8kNotAnObject) {
  writeFile(path("test.jsonl"), "[1, 2]\n");
  const std::string message = errorOf(Benchmark::kGsm8k);
  EXPECT_THAT(message, HasSubstr(path("test.jsonl") + ":1: not a JSON object"));
}

TEST_F(EvalFiles, HumanEvalEntryPointOfTheWrongType) {
  writeFile(path("HumanEval.jsonl"),
            "{\"task_id\": \"T/0\", \"prompt\": \"p\", \"test\": \"t\", "
            "\"entry_point\": null}\n");
  const std::string message = errorOf(Benchmark::kHumanEval);
  EXPECT_THAT(message, HasSubstr(path("HumanEval.jsonl") +
                                 ":1: field \"entry_point\" is null"));
}

TEST_F(EvalFiles, EmptyJsonlFile) {
  writeFile(path("HumanEval.jsonl"), "\n\n");
  const std::string message = errorOf(Benchmark::kHumanEval);
  EXPECT_THAT(message, HasSubstr(path("HumanEval.jsonl") + ": no record"));
}

} // namespace
