//===- Benchmarks.h - Benchmarks in their published layouts -----*- C++ -*-===//
//
// The benchmarks braid eval scores, read from the files their authors
// publish, and the prompts lm-evaluation-harness builds from them (the
// harness's task file each follows is named below and in
// docs/evaluation.md). Everything here works on strings: the model side
// tokenizes.
//
// Layouts (DIR is the directory given for the benchmark):
//  - mmlu: DIR/test/<subject>_test.csv evaluated, DIR/dev/<subject>_dev.csv
//    the shots; no header, columns question,A,B,C,D,answer (a letter A-D).
//  - ceval: DIR/val/<subject>_val.csv evaluated (the test split publishes no
//    answers), DIR/dev/<subject>_dev.csv the shots; a header row naming
//    id,question,A,B,C,D,answer (dev adds explanation), read by name.
//  - boolq: DIR/dev.jsonl (or SuperGLUE's DIR/val.jsonl) evaluated,
//    DIR/train.jsonl the shots; {question, passage, answer: true|false}, or
//    SuperGLUE's label (true|false or 1|0) in place of answer.
//  - agieval: DIR/<task>.jsonl for AGIEval's English multiple-choice tasks
//    (aqua-rat, gaokao-english, logiqa-en, lsat-ar, lsat-lr, lsat-rc,
//    sat-en, sat-en-without-passage, sat-math); {passage: string|null,
//    question, options: ["(A)...", ...], label: "A"}; zero-shot.
//  - bbh: DIR/<task>.json, {"examples": [{input, target}, ...]}, BIG-Bench
//    Hard's layout. Shots: DIR/<task>_fewshot.json, {"description"?,
//    "examples": [{input, target}, ...]} (the description is followed by
//    "\n\n" in the prompt), when present; else the task's
//    chain-of-thought prompt file as BIG-Bench Hard publishes it,
//    DIR/../cot-prompts/<task>.txt, with the reasoning taken out as the
//    harness's bbh/_generate_configs.py does; else none (zero-shot).
//  - gsm8k: DIR/test.jsonl evaluated, DIR/train.jsonl the shots;
//    {question, answer}, the answer's final number after "#### ".
//  - humaneval: DIR/HumanEval.jsonl, {task_id, prompt, canonical_solution,
//    test, entry_point}.
// A file of shots is read only when it exists; asking for more shots than
// it holds (or than a benchmark without one has) is an error when the
// requests are built. Errors name the file, the 1-based line (or "example
// N" in a .json array) and the field.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EVAL_BENCHMARKS_H
#define BRAID_RUNTIME_EVAL_BENCHMARKS_H

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::eval {

enum class Benchmark {
  kMmlu,
  kCeval,
  kBoolq,
  kAgieval,
  kBbh,
  kGsm8k,
  kHumanEval,
};

/// "mmlu", "ceval", "boolq", "agieval", "bbh", "gsm8k", "humaneval";
/// InvalidArgument naming anything else and the names taken.
absl::StatusOr<Benchmark> ParseBenchmark(absl::string_view name);
absl::string_view BenchmarkName(Benchmark benchmark);

/// Whether items are scored by the log-likelihoods of their choices (else
/// by a generated text).
bool IsMultipleChoice(Benchmark benchmark);

/// The shots used when none are asked for: mmlu 5, ceval 5, boolq 0,
/// agieval 0, bbh 3, gsm8k 5, humaneval 0.
int64_t DefaultFewshot(Benchmark benchmark);

/// A solved example put before the item: `query`, " ", `answer`, "\n\n".
struct Shot {
  std::string query;
  std::string answer;
};

/// One question. Multiple-choice items have choices and gold; generative
/// ones target (bbh: the answer; gsm8k: the full solution; humaneval: the
/// test code) and, for humaneval, taskId and entryPoint.
struct Item {
  /// Where it was read: "FILE:LINE" or "FILE: example N".
  std::string where;
  /// The item's text as the harness's doc_to_text renders it; the model
  /// continues it (after " " for a choice).
  std::string query;
  std::vector<std::string> choices;
  int64_t gold = -1;
  std::string target;
  std::string taskId;
  std::string entryPoint;
};

/// A subject (mmlu, ceval) or task (agieval, bbh) of a benchmark; the
/// single-file benchmarks have one.
struct Subtask {
  /// The file stem: "abstract_algebra", "lsat-ar", "boolean_expressions";
  /// for boolq, gsm8k and humaneval the benchmark's name.
  std::string name;
  /// For people: the name with underscores as spaces.
  std::string displayName;
  /// mmlu: stem, humanities, social_sciences or other (the harness's
  /// grouping); ceval: STEM, Social Science, Humanities or Other (C-Eval's
  /// subject_mapping.json); "" for the rest and for unknown subjects.
  std::string category;
  /// Put before the shots ("" for none).
  std::string description;
  /// The shots available, in file order; the first K are used.
  std::vector<Shot> shots;
  /// Where shots come from (the file read, or the file that was looked
  /// for), for messages.
  std::string shotSource;
  std::vector<Item> items;
};

struct BenchmarkData {
  Benchmark benchmark;
  std::string dir;
  /// Sorted by name.
  std::vector<Subtask> subtasks;
};

absl::StatusOr<BenchmarkData> ReadMmlu(const std::string &dir);
absl::StatusOr<BenchmarkData> ReadCeval(const std::string &dir);
absl::StatusOr<BenchmarkData> ReadBoolq(const std::string &dir);
absl::StatusOr<BenchmarkData> ReadAgieval(const std::string &dir);
absl::StatusOr<BenchmarkData> ReadBbh(const std::string &dir);
absl::StatusOr<BenchmarkData> ReadGsm8k(const std::string &dir);
absl::StatusOr<BenchmarkData> ReadHumanEval(const std::string &dir);
/// The reader of `benchmark`.
absl::StatusOr<BenchmarkData> ReadBenchmark(Benchmark benchmark,
                                            const std::string &dir);

/// The shots of a BIG-Bench Hard cot-prompts/<task>.txt (`text`, read from
/// `path`): after the last "\n-----\n", blocks separated by "\n\n"; the
/// first is the description, each other "Q: ...\nA: Let's think step by
/// step. ... So the answer is X." a shot whose query is the block up to
/// "\nA:" and whose answer is X (the text after the last "answer is " on
/// that line, its final character dropped), as the harness's
/// bbh/_generate_configs.py derives its bbh/fewshot samples.
/// InvalidArgument naming the path and block for a block without an
/// answer.
absl::Status ParseBbhCotPrompt(absl::string_view text, absl::string_view path,
                               std::string *description,
                               std::vector<Shot> *shots);

/// `text` without the leading and trailing characters Python's str.strip()
/// removes (its str.isspace() characters: ASCII whitespace, U+001C-U+001F,
/// U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F,
/// U+3000), as the harness's templates strip questions.
absl::string_view PythonStrip(absl::string_view text);

/// The harness's MMLU query (mmlu/default/_default_template_yaml):
/// question.strip(), "\nA. ", A, "\nB. ", B, "\nC. ", C, "\nD. ", D,
/// "\nAnswer:".
std::string MmluQuery(absl::string_view question,
                      const std::vector<std::string> &options);
/// The harness's MMLU description for a subject file stem:
/// "The following are multiple choice questions (with answers) about " +
/// the stem with underscores as spaces + ".\n\n".
std::string MmluDescription(absl::string_view subject);

} // namespace braid::eval

#endif // BRAID_RUNTIME_EVAL_BENCHMARKS_H
