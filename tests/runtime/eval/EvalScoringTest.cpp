//===- EvalScoringTest.cpp - Prompts, requests and scores -----------------===//
//
// Prompts are written out here from the harness's templates (the task files
// Evaluate.h names: description, K shots of query " " answer "\n\n", the
// query); scores from the metrics' definitions (Metrics.h), with fake model
// callbacks whose answers are known.
//
//===----------------------------------------------------------------------===//

#include "runtime/eval/Evaluate.h"

#include "runtime/eval/Benchmarks.h"
#include "runtime/eval/Metrics.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace braid::eval;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

const std::string kData = BRAID_EVAL_TEST_DATA;

TaskSpec spec(Benchmark benchmark, const std::string &sub) {
  TaskSpec task;
  task.benchmark = benchmark;
  task.dir = kData + "/" + sub;
  return task;
}

const MetricValue &metric(const GroupResult &group, const std::string &name) {
  for (const MetricValue &m : group.metrics)
    if (m.name == name)
      return m;
  ADD_FAILURE() << "no metric " << name << " in " << group.name;
  static MetricValue none;
  return none;
}

/// The standard error of a 0/1 metric with mean p over n items, from its
/// definition sqrt(p (1 - p) / (n - 1)).
double binaryStderr(double p, double n) {
  return std::sqrt(p * (1 - p) / (n - 1));
}

//===----------------------------------------------------------------------===//
// Prompts
//===----------------------------------------------------------------------===//

// The harness's MMLU prompt (mmlu/default/_default_template_yaml and the
// subject's description), 5 shots from the dev file in order.
const char kMmluShots[] =
    "The following are multiple choice questions (with answers) about "
    "elementary mathematics.\n\n"
    "What is 7 + 5?\nA. 10\nB. 11\nC. 12\nD. 13\nAnswer: C\n\n"
    "Which number is even?\nA. 7\nB. 9\nC. 14\nD. 15\nAnswer: C\n\n"
    "What is 9 x 3?\nA. 27\nB. 24\nC. 30\nD. 18\nAnswer: A\n\n"
    "A box holds 4 rows of 6 eggs. How many eggs, in all?\nA. 10\nB. 20\n"
    "C. 24\nD. 28\nAnswer: C\n\n"
    "What is 100 - 37?\nA. 73\nB. 63\nC. 67\nD. 53\nAnswer: B\n\n";

TEST(Prompts, MmluFiveShots) {
  absl::StatusOr<BenchmarkData> data = ReadMmlu(kData + "/mmlu");
  ASSERT_TRUE(data.ok()) << data.status();
  const Subtask &math = data->subtasks[0];
  absl::StatusOr<std::string> first = BuildContext(math, math.items[0], 5);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, std::string(kMmluShots) +
                        "What is 8 + 6?\nA. 12\nB. 13\nC. 14\nD. 15\n"
                        "Answer:");
  absl::StatusOr<std::string> fourth = BuildContext(math, math.items[3], 5);
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ(*fourth,
            std::string(kMmluShots) +
                "The word \"sum\" names the result of which operation?\n"
                "(Choose one.)\nA. subtraction\nB. multiplication\n"
                "C. addition\nD. division\nAnswer:");
  // Zero shots: the description and the query.
  absl::StatusOr<std::string> zero = BuildContext(math, math.items[0], 0);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, "The following are multiple choice questions (with "
                   "answers) about elementary mathematics.\n\n"
                   "What is 8 + 6?\nA. 12\nB. 13\nC. 14\nD. 15\nAnswer:");
}

TEST(Prompts, TooFewShotsNameTheShotFile) {
  absl::StatusOr<BenchmarkData> data = ReadMmlu(kData + "/mmlu");
  ASSERT_TRUE(data.ok()) << data.status();
  const Subtask &math = data->subtasks[0];
  absl::StatusOr<std::string> context = BuildContext(math, math.items[0], 6);
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(context.status().message(),
              HasSubstr(kData + "/mmlu/dev/elementary_mathematics_dev.csv"));
}

TEST(Prompts, RequestsOfAMultipleChoiceItem) {
  // A recording scorer: the requests as the model side receives them.
  std::vector<LoglikelihoodRequest> seen;
  EvalCallbacks callbacks;
  callbacks.loglikelihood = [&](const std::vector<LoglikelihoodRequest> &r)
      -> absl::StatusOr<std::vector<Loglikelihood>> {
    seen = r;
    return std::vector<Loglikelihood>(r.size(), Loglikelihood{-1.0, false});
  };
  TaskSpec task = spec(Benchmark::kMmlu, "mmlu");
  task.subtasks = {"elementary_mathematics"};
  task.limit = 1;
  absl::StatusOr<BenchmarkData> data = ReadMmlu(task.dir);
  ASSERT_TRUE(data.ok()) << data.status();
  absl::StatusOr<TaskResult> result = EvaluateBenchmark(*data, task, callbacks);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(seen.size(), 4u);
  const std::string context = std::string(kMmluShots) +
                              "What is 8 + 6?\nA. 12\nB. 13\nC. 14\nD. 15\n"
                              "Answer:";
  const char *const continuations[] = {" A", " B", " C", " D"};
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(seen[static_cast<size_t>(c)].context, context);
    EXPECT_EQ(seen[static_cast<size_t>(c)].continuation, continuations[c]);
  }
  EXPECT_EQ(result->numFewshot, 5);
}

TEST(Prompts, GenerationRequests) {
  std::vector<GenerateRequest> seen;
  EvalCallbacks callbacks;
  callbacks.generate = [&](const std::vector<GenerateRequest> &r)
      -> absl::StatusOr<std::vector<std::string>> {
    seen = r;
    return std::vector<std::string>(r.size(), "");
  };
  TaskSpec bbh = spec(Benchmark::kBbh, "bbh");
  bbh.limit = 1;
  absl::StatusOr<std::vector<TaskResult>> results = Evaluate({bbh}, callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(seen.size(), 1u);
  // bbh/fewshot: description, 3 shots, "Q: input\nA:".
  EXPECT_EQ(seen[0].context,
            "Count the things a question lists.\n\n"
            "Q: I have a banana and a kiwi. How many fruits do I have?\nA: "
            "2\n\n"
            "Q: I have a hammer, two nails, and a saw. How many objects do I "
            "have?\nA: 4\n\n"
            "Q: I have three hens and a goat. How many animals do I have?\n"
            "A: 4\n\n"
            "Q: I have a pear, two apples, and a plum. How many fruits do I "
            "have?\nA:");
  EXPECT_THAT(seen[0].stop, ElementsAre("</s>", "Q", "\n\n"));
  EXPECT_EQ(seen[0].maxNewTokens, 256);

  TaskSpec gsm8k = spec(Benchmark::kGsm8k, "gsm8k");
  gsm8k.numFewshot = 2;
  gsm8k.limit = 1;
  gsm8k.maxNewTokens = 100;
  results = Evaluate({gsm8k}, callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(seen.size(), 1u);
  // gsm8k.yaml: "Question: q\nAnswer:" and the whole answer as target.
  EXPECT_EQ(seen[0].context,
            "Question: Tom has 3 bags with 4 marbles in each. How many "
            "marbles does he have?\nAnswer: Each bag holds 4 marbles, so 3 "
            "bags hold 3*4=<<3*4=12>>12 marbles.\n#### 12\n\n"
            "Question: A shop sells pens for $2 each. Ana buys 5 pens and "
            "pays with a $20 bill. How much change does she get?\nAnswer: "
            "The pens cost 5*2=<<5*2=10>>10 dollars.\nHer change is "
            "20-10=<<20-10=10>>10 dollars.\n#### 10\n\n"
            "Question: Lena reads 12 pages a day. How many pages does she "
            "read in a week?\nAnswer:");
  EXPECT_THAT(seen[0].stop, ElementsAre("Question:", "</s>", "<|im_end|>"));
  EXPECT_EQ(seen[0].maxNewTokens, 100);
}

TEST(Prompts, BoolqAndCevalShots) {
  absl::StatusOr<BenchmarkData> boolq = ReadBoolq(kData + "/boolq");
  ASSERT_TRUE(boolq.ok()) << boolq.status();
  const Subtask &b = boolq->subtasks[0];
  absl::StatusOr<std::string> context = BuildContext(b, b.items[1], 1);
  ASSERT_TRUE(context.ok());
  EXPECT_EQ(*context,
            "Ice is less dense than liquid water, which is why it floats on "
            "lakes and in drinks.\nQuestion: is ice lighter than liquid "
            "water?\nAnswer: yes\n\n"
            "The Moon's diameter is about a quarter of the Earth's, and its "
            "mass about one eightieth.\nQuestion: is the moon bigger than "
            "the earth?\nAnswer:");

  absl::StatusOr<BenchmarkData> ceval = ReadCeval(kData + "/ceval");
  ASSERT_TRUE(ceval.ok()) << ceval.status();
  const Subtask &c = ceval->subtasks[0];
  context = BuildContext(c, c.items[0], 1);
  ASSERT_TRUE(context.ok());
  EXPECT_EQ(*context,
            "以下是中国关于初中数学的单项选择题，请选出其中的正确答案。\n\n"
            "3+4等于多少？\nA. 6\nB. 7\nC. 8\nD. 9\n答案： B\n\n"
            "2+2等于多少？\nA. 4\nB. 3\nC. 5\nD. 6\n答案：");
}

//===----------------------------------------------------------------------===//
// Multiple-choice scores
//===----------------------------------------------------------------------===//

TEST(Scores, AccNormDividesByCharactersNotBytes) {
  EXPECT_EQ(CodePointCount("abc"), 3);
  EXPECT_EQ(CodePointCount("是"), 1);
  EXPECT_EQ(CodePointCount(" (A)是的"), 6);
  // "ab" -3 (per character -1.5) against "abcd" -4 (-1.0).
  ChoiceScore score = ScoreChoices({-3.0, -4.0}, {"ab", "abcd"}, 1);
  EXPECT_EQ(score.pick, 0);
  EXPECT_EQ(score.pickNorm, 1);
  EXPECT_FALSE(score.acc);
  EXPECT_TRUE(score.accNorm);
  // "是" is 1 character (3 bytes): -1.5 per character against -1.25 for
  // "ab"; by bytes it would be -0.5 against -1.25.
  score = ScoreChoices({-1.5, -2.5}, {"是", "ab"}, 0);
  EXPECT_EQ(score.pick, 0);
  EXPECT_EQ(score.pickNorm, 1);
  // Equal log-likelihoods: the first, as numpy's argmax.
  score = ScoreChoices({-2.0, -2.0, -2.0}, {"A", "B", "C"}, 0);
  EXPECT_EQ(score.pick, 0);
  EXPECT_TRUE(score.acc);
}

TEST(Scores, MeanAndStderr) {
  MetricValue m = MeanWithStderr("acc", {1, 0, 1, 1});
  EXPECT_DOUBLE_EQ(m.value, 0.75);
  EXPECT_NEAR(m.standardError, binaryStderr(0.75, 4), 1e-15);
  m = MeanWithStderr("acc", {1});
  EXPECT_DOUBLE_EQ(m.value, 1.0);
  EXPECT_TRUE(std::isnan(m.standardError));
  // Pooled over groups of 4 (p 0.75) and 2 (p 0.5):
  // sqrt(((4-1) 4 se1^2 + (2-1) 2 se2^2) / (6 - 2) / 6).
  MetricValue a = MeanWithStderr("acc", {1, 0, 1, 1});
  MetricValue b = MeanWithStderr("acc", {1, 0});
  MetricValue pooled = PooledMetric("acc", {a, b}, {4, 2});
  EXPECT_DOUBLE_EQ(pooled.value, 4.0 / 6.0);
  const double se1 = binaryStderr(0.75, 4), se2 = binaryStderr(0.5, 2);
  EXPECT_NEAR(pooled.standardError,
              std::sqrt((3 * 4 * se1 * se1 + 1 * 2 * se2 * se2) / 4 / 6),
              1e-15);
}

/// A scorer that gives the gold choice of each request's item log-
/// likelihood 0 and the others -10, knowing the golds by context.
LoglikelihoodFn oracle(const BenchmarkData &data, int64_t numFewshot) {
  std::map<std::string, std::string> goldOf;
  for (const Subtask &subtask : data.subtasks)
    for (const Item &item : subtask.items)
      goldOf[*BuildContext(subtask, item, numFewshot)] =
          " " + item.choices[static_cast<size_t>(item.gold)];
  return [goldOf](const std::vector<LoglikelihoodRequest> &requests)
             -> absl::StatusOr<std::vector<Loglikelihood>> {
    std::vector<Loglikelihood> answers;
    for (const LoglikelihoodRequest &r : requests)
      answers.push_back(Loglikelihood{
          goldOf.at(r.context) == r.continuation ? 0.0 : -10.0, true});
    return answers;
  };
}

TEST(Scores, OracleScoresOne) {
  for (auto [benchmark, sub] : std::vector<std::pair<Benchmark, std::string>>{
           {Benchmark::kMmlu, "mmlu"},
           {Benchmark::kCeval, "ceval"},
           {Benchmark::kBoolq, "boolq"},
           {Benchmark::kAgieval, "agieval"}}) {
    TaskSpec task = spec(benchmark, sub);
    absl::StatusOr<BenchmarkData> data = ReadBenchmark(benchmark, task.dir);
    ASSERT_TRUE(data.ok()) << data.status();
    EvalCallbacks callbacks;
    callbacks.loglikelihood = oracle(*data, DefaultFewshot(benchmark));
    absl::StatusOr<TaskResult> result =
        EvaluateBenchmark(*data, task, callbacks);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_DOUBLE_EQ(metric(result->overall, "acc").value, 1.0) << sub;
    EXPECT_DOUBLE_EQ(metric(result->overall, "acc_norm").value, 1.0) << sub;
    EXPECT_DOUBLE_EQ(metric(result->overall, "acc").standardError, 0.0);
  }
}

TEST(Scores, AlwaysAScoresTheShareOfAGolds) {
  // Prefers " A": log-likelihood -1 for it, -2 for the rest.
  EvalCallbacks callbacks;
  callbacks.loglikelihood = [](const std::vector<LoglikelihoodRequest> &r)
      -> absl::StatusOr<std::vector<Loglikelihood>> {
    std::vector<Loglikelihood> answers;
    for (const LoglikelihoodRequest &request : r)
      answers.push_back(
          Loglikelihood{request.continuation == " A" ? -1.0 : -2.0, false});
    return answers;
  };
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({spec(Benchmark::kMmlu, "mmlu")}, callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  const TaskResult &mmlu = (*results)[0];
  // Golds: elementary_mathematics C B C C, high_school_geography B C C A.
  ASSERT_EQ(mmlu.subtasks.size(), 2u);
  EXPECT_EQ(mmlu.subtasks[0].count, 4);
  EXPECT_DOUBLE_EQ(metric(mmlu.subtasks[0], "acc").value, 0.0);
  EXPECT_DOUBLE_EQ(metric(mmlu.subtasks[0], "acc").standardError, 0.0);
  EXPECT_DOUBLE_EQ(metric(mmlu.subtasks[1], "acc").value, 0.25);
  EXPECT_NEAR(metric(mmlu.subtasks[1], "acc").standardError,
              binaryStderr(0.25, 4), 1e-15);
  // Overall: 1 of 8 questions (the micro average); the pooled standard
  // error sqrt(((4-1) 4 0^2 + (4-1) 4 se^2) / (8 - 2) / 8).
  EXPECT_EQ(mmlu.overall.count, 8);
  EXPECT_DOUBLE_EQ(metric(mmlu.overall, "acc").value, 1.0 / 8);
  const double se = binaryStderr(0.25, 4);
  EXPECT_NEAR(metric(mmlu.overall, "acc").standardError,
              std::sqrt(3 * 4 * se * se / 6 / 8), 1e-15);
  // Categories: stem holds elementary_mathematics, social_sciences
  // high_school_geography.
  ASSERT_EQ(mmlu.categories.size(), 2u);
  EXPECT_EQ(mmlu.categories[0].name, "social_sciences");
  EXPECT_DOUBLE_EQ(metric(mmlu.categories[0], "acc").value, 0.25);
  EXPECT_EQ(mmlu.categories[1].name, "stem");
  EXPECT_DOUBLE_EQ(metric(mmlu.categories[1], "acc").value, 0.0);
  // Single letters: acc_norm is acc.
  EXPECT_DOUBLE_EQ(metric(mmlu.overall, "acc_norm").value, 1.0 / 8);
}

TEST(Scores, AgievalAccNormFromChoiceLengths) {
  // A choice of n characters gets log-likelihood -n, and -n + 0.5 when n
  // is 5: per character -1, or -0.9 for 5 characters.
  EvalCallbacks callbacks;
  callbacks.loglikelihood = [](const std::vector<LoglikelihoodRequest> &r)
      -> absl::StatusOr<std::vector<Loglikelihood>> {
    std::vector<Loglikelihood> answers;
    for (const LoglikelihoodRequest &request : r) {
      // The continuation less its " ": the choice.
      const double length =
          static_cast<double>(CodePointCount(request.continuation) - 1);
      answers.push_back(
          Loglikelihood{-length + (length == 5 ? 0.5 : 0.0), false});
    }
    return answers;
  };
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({spec(Benchmark::kAgieval, "agieval")}, callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  // Items (ties go to the first choice, as numpy's argmax):
  //  1: (A)3 (B)4 (C)9 (D)36, gold B: -4 -4 -4 -4.5, acc picks A; per
  //     character -1 -1 -1 -0.9, acc_norm D. Neither is B.
  //  2: (A)15 (B)20 (C)30 (D)45, gold C: all -4.5: both pick A.
  //  3: (A)7 (B)10 (C)12 (D)14, gold D: -4 -4.5 -4.5 -4.5, acc A; per
  //     character -1 -0.9 -0.9 -0.9, acc_norm B. Neither.
  //  4: (A)-5 (B)5 (C)-9 (D)9, gold A: -4.5 -4 -4.5 -4, acc B; per
  //     character -0.9 -1 -0.9 -1, acc_norm A: acc_norm only.
  const TaskResult &agieval = (*results)[0];
  EXPECT_DOUBLE_EQ(metric(agieval.overall, "acc").value, 0.0);
  EXPECT_DOUBLE_EQ(metric(agieval.overall, "acc_norm").value, 0.25);
  EXPECT_THAT(agieval.items[3].logprobs, ElementsAre(-4.5, -4.0, -4.5, -4.0));
}

//===----------------------------------------------------------------------===//
// Generative scores
//===----------------------------------------------------------------------===//

TEST(Gsm8k, StrictExtraction) {
  EXPECT_EQ(Gsm8kStrictAnswer("12*7=84 pages.\n#### 84"), "84");
  EXPECT_EQ(Gsm8kStrictAnswer("#### -5 degrees"), "-5");
  EXPECT_EQ(Gsm8kStrictAnswer("#### 1,500."), "1,500.");
  // The first one.
  EXPECT_EQ(Gsm8kStrictAnswer("#### 3\n#### 4"), "3");
  // No "#### " before a number: "[invalid]".
  EXPECT_EQ(Gsm8kStrictAnswer("The answer is 84"), "[invalid]");
  EXPECT_EQ(Gsm8kStrictAnswer("#### $5"), "[invalid]");
  EXPECT_EQ(Gsm8kStrictAnswer("####  5"), "[invalid]");
  EXPECT_EQ(Gsm8kStrictAnswer("#### -x #### 7"), "7");
}

TEST(Gsm8k, FlexibleExtraction) {
  // The last of "12", "7", "84", "84." is "84.".
  EXPECT_EQ(Gsm8kFlexibleAnswer("I think 12*7=84 so 84."), "84.");
  EXPECT_EQ(Gsm8kFlexibleAnswer("It is -5 degrees"), "-5");
  EXPECT_EQ(Gsm8kFlexibleAnswer("costs $1,500 in all"), "$1,500");
  EXPECT_EQ(Gsm8kFlexibleAnswer("x 5 y"), "5");
  EXPECT_EQ(Gsm8kFlexibleAnswer("3.5 and then - 2"), "2");
  EXPECT_EQ(Gsm8kFlexibleAnswer("no number"), "[invalid]");
}

TEST(Gsm8k, NormalizationAndMatch) {
  EXPECT_EQ(Gsm8kNormalize("6 boxes hold 1500 nails.\n#### 1,500"), "1500");
  EXPECT_EQ(Gsm8kNormalize("$1,500."), "1500");
  EXPECT_EQ(Gsm8kNormalize("84.\n"), "84\n");
  EXPECT_EQ(Gsm8kNormalize("A #### b #### C"), "c");
  EXPECT_TRUE(Gsm8kMatch("1,500.", "So 1500.\n#### 1500"));
  EXPECT_TRUE(Gsm8kMatch("-5", "It is -5.\n#### -5"));
  EXPECT_FALSE(Gsm8kMatch("[invalid]", "x\n#### 84"));
  EXPECT_FALSE(Gsm8kMatch("8.4", "x\n#### 84"));
}

TEST(Gsm8k, StrictAndFlexibleScores) {
  // Item answers: 84, 18, 1,500, -5.
  const std::vector<std::string> generations = {
      " Lena reads 12*7=84 pages.\n#### 84\n\nQuestion: more",
      " He has 18 cows left.", " 6*250=1500 nails.\n#### 1500",
      " It is 4-9=-5 degrees. #### 5"};
  EvalCallbacks callbacks;
  callbacks.generate = [&](const std::vector<GenerateRequest> &)
      -> absl::StatusOr<std::vector<std::string>> { return generations; };
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({spec(Benchmark::kGsm8k, "gsm8k")}, callbacks);
  // The default is 5 shots; the train file has 3.
  ASSERT_FALSE(results.ok());
  EXPECT_THAT(results.status().message(),
              HasSubstr(kData + "/gsm8k/train.jsonl has 3"));

  TaskSpec task = spec(Benchmark::kGsm8k, "gsm8k");
  task.numFewshot = 3;
  results = Evaluate({task}, callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  const TaskResult &gsm8k = (*results)[0];
  // Strict: 84 yes, [invalid] no, 1500 yes, 5 no.
  // Flexible (last number): 84 yes, 18 yes, 1500 yes, 5 no.
  EXPECT_THAT(gsm8k.items[0].scores, ElementsAre(1.0, 1.0));
  EXPECT_THAT(gsm8k.items[1].scores, ElementsAre(0.0, 1.0));
  EXPECT_THAT(gsm8k.items[2].scores, ElementsAre(1.0, 1.0));
  EXPECT_THAT(gsm8k.items[3].scores, ElementsAre(0.0, 0.0));
  EXPECT_DOUBLE_EQ(metric(gsm8k.overall, "exact_match_strict").value, 0.5);
  EXPECT_DOUBLE_EQ(metric(gsm8k.overall, "exact_match_flexible").value, 0.75);
  EXPECT_NEAR(metric(gsm8k.overall, "exact_match_flexible").standardError,
              binaryStderr(0.75, 4), 1e-15);
  // The generation is kept cut at the stop string.
  EXPECT_EQ(gsm8k.items[0].generation,
            " Lena reads 12*7=84 pages.\n#### 84\n\n");
}

TEST(Bbh, ExactMatch) {
  const std::vector<std::string> stop = DefaultStop(Benchmark::kBbh);
  EXPECT_TRUE(BbhExactMatch("4", "4", stop));
  EXPECT_TRUE(BbhExactMatch(" 4", "4", stop));
  EXPECT_TRUE(BbhExactMatch(" 4\n\nQ: next", "4", stop));
  EXPECT_TRUE(BbhExactMatch("4Q", "4", stop));
  EXPECT_FALSE(BbhExactMatch("4 objects", "4", stop));
  EXPECT_FALSE(BbhExactMatch("four", "4", stop));
  EXPECT_FALSE(BbhExactMatch("4.", "4", stop));
  // No case folding: "Yes" is not "yes".
  EXPECT_FALSE(BbhExactMatch("yes", "Yes", stop));
  EXPECT_EQ(TruncateAtStop("a\nb\n\nc", {"", "\n\n", "b"}), "a\n");
}

TEST(Bbh, Scores) {
  EvalCallbacks callbacks;
  callbacks.generate = [](const std::vector<GenerateRequest> &)
      -> absl::StatusOr<std::vector<std::string>> {
    // Targets 4 5 4 2 4.
    return std::vector<std::string>{" 4", " 5\n\nQ: I have", "3", " 2", "4."};
  };
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({spec(Benchmark::kBbh, "bbh")}, callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  const TaskResult &bbh = (*results)[0];
  EXPECT_EQ(bbh.overall.count, 5);
  EXPECT_DOUBLE_EQ(metric(bbh.overall, "exact_match").value, 0.6);
  EXPECT_NEAR(metric(bbh.overall, "exact_match").standardError,
              binaryStderr(0.6, 5), 1e-15);
}

TEST(HumanEval, ProgramAndPassAtOne) {
  EXPECT_EQ(HumanEvalProgram("def f():\n", "    return 1\n",
                             "def check(c):\n    assert c() == 1\n", "f"),
            "def f():\n    return 1\n\ndef check(c):\n    assert c() == 1\n"
            "\ncheck(f)\n");

  absl::StatusOr<BenchmarkData> data = ReadHumanEval(kData + "/humaneval");
  ASSERT_TRUE(data.ok()) << data.status();
  const std::vector<Item> &items = data->subtasks[0].items;
  // Completions: right, right with a second function after it (cut at
  // "\ndef"), wrong.
  const std::vector<std::string> completions = {
      "    return a + b\n",
      "    return sum(1 for c in text.lower() if c in 'aeiou')\n"
      "\ndef unused():\n    pass\n",
      "    return values[0]\n"};
  std::vector<GenerateRequest> seen;
  std::vector<std::string> programs;
  // The fake sandbox passes the programs of the right completions, built
  // from the definition: prompt + completion + "\n" + test + "\n" +
  // "check(entry_point)\n".
  const std::set<std::string> passing = {
      items[0].query + "    return a + b\n" + "\n" + items[0].target + "\n" +
          "check(add_two)\n",
      items[1].query +
          "    return sum(1 for c in text.lower() if c in 'aeiou')\n" + "\n" +
          items[1].target + "\n" + "check(count_vowels)\n"};
  EvalCallbacks callbacks;
  callbacks.generate = [&](const std::vector<GenerateRequest> &r)
      -> absl::StatusOr<std::vector<std::string>> {
    seen = r;
    return completions;
  };
  callbacks.runProgram =
      [&](const std::string &program) -> absl::StatusOr<bool> {
    programs.push_back(program);
    return passing.count(program) > 0;
  };
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({spec(Benchmark::kHumanEval, "humaneval")}, callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].context, items[0].query);
  EXPECT_THAT(seen[0].stop,
              ElementsAre("\nclass", "\ndef", "\n#", "\nif", "\nprint"));
  EXPECT_EQ(seen[0].maxNewTokens, 1024);
  ASSERT_EQ(programs.size(), 3u);
  EXPECT_EQ(programs[2], items[2].query + "    return values[0]\n" + "\n" +
                             items[2].target + "\n" + "check(largest)\n");
  const TaskResult &humaneval = (*results)[0];
  EXPECT_NEAR(metric(humaneval.overall, "pass@1").value, 2.0 / 3, 1e-15);

  // A sandbox that cannot run the program stops the evaluation.
  callbacks.runProgram = [](const std::string &) -> absl::StatusOr<bool> {
    return absl::UnavailableError("no sandbox");
  };
  results = Evaluate({spec(Benchmark::kHumanEval, "humaneval")}, callbacks);
  ASSERT_FALSE(results.ok());
  EXPECT_EQ(results.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(results.status().message(), HasSubstr("HumanEval/0"));
}

//===----------------------------------------------------------------------===//
// Evaluation of several tasks, results
//===----------------------------------------------------------------------===//

EvalCallbacks allCallbacks() {
  EvalCallbacks callbacks;
  callbacks.loglikelihood = [](const std::vector<LoglikelihoodRequest> &r)
      -> absl::StatusOr<std::vector<Loglikelihood>> {
    std::vector<Loglikelihood> answers;
    for (const LoglikelihoodRequest &request : r)
      answers.push_back(Loglikelihood{
          request.continuation == " A" || request.continuation == " yes" ? -1.0
                                                                         : -2.0,
          false});
    return answers;
  };
  callbacks.generate = [](const std::vector<GenerateRequest> &r)
      -> absl::StatusOr<std::vector<std::string>> {
    return std::vector<std::string>(r.size(), " #### 84");
  };
  callbacks.runProgram = [](const std::string &) -> absl::StatusOr<bool> {
    return false;
  };
  return callbacks;
}

TEST(Evaluate, ProgressCountsEveryRequestAndProgram) {
  std::vector<std::pair<int64_t, int64_t>> progress;
  EvalCallbacks callbacks = allCallbacks();
  callbacks.progress = [&](int64_t done, int64_t total) {
    progress.emplace_back(done, total);
  };
  TaskSpec gsm8k = spec(Benchmark::kGsm8k, "gsm8k");
  gsm8k.numFewshot = 0;
  absl::StatusOr<std::vector<TaskResult>> results = Evaluate(
      {spec(Benchmark::kMmlu, "mmlu"), spec(Benchmark::kBoolq, "boolq"), gsm8k,
       spec(Benchmark::kHumanEval, "humaneval")},
      callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  // 8 MMLU items x 4 choices, 6 BoolQ items x 2, 4 generations, 3
  // generations and 3 programs.
  const int64_t total = 32 + 12 + 4 + 3 + 3;
  ASSERT_FALSE(progress.empty());
  // Each task says where it starts before its requests go to the model
  // (the first at 0), then what each call answered.
  EXPECT_EQ(progress.front().first, 0);
  int64_t last = 0;
  for (const auto &[done, reported] : progress) {
    EXPECT_EQ(reported, total);
    EXPECT_GE(done, last);
    last = done;
  }
  EXPECT_EQ(progress.back().first, total);
  // BoolQ with " yes" preferred: the share of yes answers.
  EXPECT_DOUBLE_EQ(metric((*results)[1].overall, "acc").value, 0.5);
  // GSM8K: only the first item's answer is 84.
  EXPECT_DOUBLE_EQ(metric((*results)[2].overall, "exact_match_strict").value,
                   0.25);
}

TEST(Evaluate, ResultsJsonHoldsAGenerationCutInsideACharacter) {
  // A byte tokenizer's completion may end inside a character or hold bytes
  // that are no UTF-8 at all; the JSON still parses, with U+FFFD for them.
  EvalCallbacks callbacks = allCallbacks();
  callbacks.generate = [](const std::vector<GenerateRequest> &r)
      -> absl::StatusOr<std::vector<std::string>> {
    return std::vector<std::string>(r.size(), "84 \xBC\x9D \xE2\x82");
  };
  TaskSpec gsm8k = spec(Benchmark::kGsm8k, "gsm8k");
  gsm8k.numFewshot = 0;
  gsm8k.limit = 1;
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({gsm8k}, callbacks);
  ASSERT_TRUE(results.ok()) << results.status();
  const std::string json = ResultsJson(*results, /*withItems=*/true);
  google::protobuf::Struct parsed;
  auto status = google::protobuf::util::JsonStringToMessage(json, &parsed);
  ASSERT_TRUE(status.ok()) << status;
  const auto &item = parsed.fields()
                         .at("results")
                         .list_value()
                         .values(0)
                         .struct_value()
                         .fields()
                         .at("items")
                         .list_value()
                         .values(0)
                         .struct_value()
                         .fields();
  EXPECT_EQ(item.at("generation").string_value(),
            "84 \xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD");
}

TEST(Evaluate, LimitAndSubtasks) {
  TaskSpec task = spec(Benchmark::kMmlu, "mmlu");
  task.limit = 2;
  task.subtasks = {"high_school_geography"};
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({task}, allCallbacks());
  ASSERT_TRUE(results.ok()) << results.status();
  const TaskResult &mmlu = (*results)[0];
  ASSERT_EQ(mmlu.subtasks.size(), 1u);
  EXPECT_EQ(mmlu.subtasks[0].count, 2);
  EXPECT_EQ(mmlu.overall.count, 2);
  ASSERT_EQ(mmlu.items.size(), 2u);
  EXPECT_EQ(mmlu.items[1].where,
            kData + "/mmlu/test/high_school_geography_test.csv:2");

  task.subtasks = {"astronomy"};
  results = Evaluate({task}, allCallbacks());
  ASSERT_FALSE(results.ok());
  EXPECT_THAT(results.status().message(),
              HasSubstr("no subtask \"astronomy\""));
  EXPECT_THAT(results.status().message(), HasSubstr("high_school_geography"));
}

TEST(Evaluate, CallbackErrors) {
  EvalCallbacks callbacks;
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({spec(Benchmark::kBoolq, "boolq")}, callbacks);
  ASSERT_FALSE(results.ok());
  EXPECT_EQ(results.status().code(), absl::StatusCode::kFailedPrecondition);

  callbacks.loglikelihood = [](const std::vector<LoglikelihoodRequest> &r)
      -> absl::StatusOr<std::vector<Loglikelihood>> {
    return std::vector<Loglikelihood>(r.size() - 1);
  };
  results = Evaluate({spec(Benchmark::kBoolq, "boolq")}, callbacks);
  ASSERT_FALSE(results.ok());
  EXPECT_THAT(results.status().message(),
              HasSubstr("12 log-likelihoods asked for, 11 answered"));

  callbacks.loglikelihood = [](const std::vector<LoglikelihoodRequest> &)
      -> absl::StatusOr<std::vector<Loglikelihood>> {
    return absl::ResourceExhaustedError("out of memory");
  };
  results = Evaluate({spec(Benchmark::kBoolq, "boolq")}, callbacks);
  ASSERT_FALSE(results.ok());
  EXPECT_EQ(results.status().code(), absl::StatusCode::kResourceExhausted);

  // A bad directory fails before the model is called.
  bool called = false;
  callbacks.loglikelihood = [&](const std::vector<LoglikelihoodRequest> &r)
      -> absl::StatusOr<std::vector<Loglikelihood>> {
    called = true;
    return std::vector<Loglikelihood>(r.size());
  };
  results = Evaluate(
      {spec(Benchmark::kBoolq, "boolq"), spec(Benchmark::kMmlu, "no-such-dir")},
      callbacks);
  ASSERT_FALSE(results.ok());
  EXPECT_FALSE(called);
}

TEST(Results, JsonAndTable) {
  TaskSpec one = spec(Benchmark::kMmlu, "mmlu");
  one.limit = 1;
  absl::StatusOr<std::vector<TaskResult>> results =
      Evaluate({one, spec(Benchmark::kBoolq, "boolq")}, allCallbacks());
  ASSERT_TRUE(results.ok()) << results.status();

  const std::string json = ResultsJson(*results, /*withItems=*/true);
  google::protobuf::Struct parsed;
  auto status = google::protobuf::util::JsonStringToMessage(json, &parsed);
  ASSERT_TRUE(status.ok()) << json;
  const auto &tasks = parsed.fields().at("results").list_value();
  ASSERT_EQ(tasks.values_size(), 2);
  const auto &mmlu = tasks.values(0).struct_value().fields();
  EXPECT_EQ(mmlu.at("task").string_value(), "mmlu");
  EXPECT_EQ(mmlu.at("num_fewshot").number_value(), 5);
  EXPECT_EQ(mmlu.at("count").number_value(), 2);
  // One item per subject: no standard error for them (null); the overall
  // one is the pooled one, also unknown.
  const auto &subjects = mmlu.at("subtasks").list_value();
  ASSERT_EQ(subjects.values_size(), 2);
  const auto &geography = subjects.values(1).struct_value().fields();
  EXPECT_EQ(geography.at("name").string_value(), "high_school_geography");
  EXPECT_EQ(geography.at("display_name").string_value(),
            "high school geography");
  const auto &acc =
      geography.at("metrics").struct_value().fields().at("acc").struct_value();
  EXPECT_EQ(acc.fields().at("value").number_value(), 0.0);
  EXPECT_EQ(acc.fields().at("stderr").kind_case(),
            google::protobuf::Value::kNullValue);
  EXPECT_EQ(mmlu.at("categories").list_value().values_size(), 2);
  const auto &items = mmlu.at("items").list_value();
  ASSERT_EQ(items.values_size(), 2);
  const auto &item = items.values(0).struct_value().fields();
  EXPECT_EQ(item.at("where").string_value(),
            kData + "/mmlu/test/elementary_mathematics_test.csv:1");
  EXPECT_EQ(item.at("logprobs").list_value().values_size(), 4);

  const auto &boolq = tasks.values(1).struct_value().fields();
  const auto &boolqAcc = boolq.at("metrics")
                             .struct_value()
                             .fields()
                             .at("acc")
                             .struct_value()
                             .fields();
  EXPECT_EQ(boolqAcc.at("value").number_value(), 0.5);
  EXPECT_NEAR(boolqAcc.at("stderr").number_value(), binaryStderr(0.5, 6),
              1e-15);

  const std::string table = ResultsTable(*results);
  EXPECT_THAT(table, HasSubstr("task  | group"));
  EXPECT_THAT(table, HasSubstr("boolq | (all)"));
  EXPECT_THAT(table, HasSubstr("| acc      | 0.5000 | 0.2236"));
  EXPECT_THAT(table, HasSubstr("[stem]"));
  EXPECT_THAT(table, HasSubstr("high school geography"));
  EXPECT_THAT(table, HasSubstr("N/A"));
}

} // namespace
