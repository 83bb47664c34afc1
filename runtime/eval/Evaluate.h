//===- Evaluate.h - Benchmark accuracy through model callbacks --*- C++ -*-===//
//
// braid eval's library: the requests a benchmark's items make of a model,
// and the scores of its answers, as lm-evaluation-harness computes them.
// The model is two callbacks that work on strings (the model side
// tokenizes): log-likelihoods of continuations (multiple-choice tasks) and
// greedy generation (bbh, gsm8k, humaneval); HumanEval's programs are run
// by a third (a sandbox).
//
// Prompts (the harness's plain-text rendering, api/task.py
// fewshot_context): the subtask's description, then K shots, each its
// query, " ", its answer and "\n\n", then the item's query. K is the
// task's numFewshot: the first K shots of the subtask's shot file, in file
// order (the harness's first_n sampler; its boolq and gsm8k sample at
// random by default); the shots come from another split than the items, so
// an item is never its own shot.
//  - Multiple choice: one request per choice, continuation " " + choice;
//    acc and acc_norm (Metrics.h ScoreChoices).
//  - bbh: stop "</s>", "Q", "\n\n" (bbh/fewshot/_fewshot_template_yaml),
//    256 new tokens (the harness's default); exact_match (BbhExactMatch).
//  - gsm8k: stop "Question:", "</s>", "<|im_end|>", 256 new tokens;
//    exact_match_strict and exact_match_flexible (the strict-match and
//    flexible-extract filters).
//  - humaneval: the prompt alone, stop "\nclass", "\ndef", "\n#", "\nif",
//    "\nprint", 1024 new tokens; pass@1 (one greedy completion: the
//    fraction of programs that pass).
// Generations are cut at their stop strings here too, so a model side that
// returns the stop string (or more) is scored as one that does not.
//
// Results: per subtask, per category (mmlu, ceval) and overall. A group's
// value is the mean weighted by size (the harness's weight_by_size: the
// micro average over all its questions) and its standard error the
// harness's pooled one (Metrics.h PooledMetric).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EVAL_EVALUATE_H
#define BRAID_RUNTIME_EVAL_EVALUATE_H

#include "runtime/eval/Benchmarks.h"
#include "runtime/eval/Metrics.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace braid::eval {

/// The log-likelihood of `continuation` after `context`.
struct LoglikelihoodRequest {
  std::string context;
  std::string continuation;
};

/// The model side's answer to a LoglikelihoodRequest: the sum of the
/// continuation tokens' log-probabilities, and whether greedy decoding from
/// the context would produce exactly those tokens (reported, not scored by
/// these tasks).
struct Loglikelihood {
  double logprob = 0;
  bool greedy = false;
};

/// Answers a batch: one Loglikelihood per request, in order.
using LoglikelihoodFn =
    std::function<absl::StatusOr<std::vector<Loglikelihood>>(
        const std::vector<LoglikelihoodRequest> &)>;

/// Greedy generation after `context`, at most maxNewTokens tokens,
/// stopping at (and leaving out) the first of `stop`.
struct GenerateRequest {
  std::string context;
  std::vector<std::string> stop;
  int64_t maxNewTokens = 0;
};

/// Answers a batch: one generated text per request, in order.
using GenerateFn = std::function<absl::StatusOr<std::vector<std::string>>(
    const std::vector<GenerateRequest> &)>;

/// Runs a HumanEval program (Python); true when it exits normally (its
/// asserts pass). An error is a failure to run it at all, and stops the
/// evaluation.
using RunProgram =
    std::function<absl::StatusOr<bool>(const std::string &program)>;

/// Called when a task starts (before its requests go to the model), after
/// each batch the model answers and each program run: the requests (and
/// programs) done and the total of all tasks.
using EvalProgressFn = std::function<void(int64_t done, int64_t total)>;

struct EvalCallbacks {
  LoglikelihoodFn loglikelihood;
  GenerateFn generate;
  RunProgram runProgram;
  /// Optional.
  EvalProgressFn progress;
};

struct TaskSpec {
  Benchmark benchmark = Benchmark::kMmlu;
  /// The benchmark's directory, in its published layout (Benchmarks.h).
  std::string dir;
  /// -1: DefaultFewshot(benchmark).
  int64_t numFewshot = -1;
  /// The first `limit` items of each subtask; -1: all.
  int64_t limit = -1;
  /// Generative tasks' token budget; -1: the task's default.
  int64_t maxNewTokens = -1;
  /// The subtasks (subjects, tasks) to evaluate by name; empty: all.
  std::vector<std::string> subtasks;
};

/// The default stop strings and token budget of a generative benchmark.
std::vector<std::string> DefaultStop(Benchmark benchmark);
int64_t DefaultMaxNewTokens(Benchmark benchmark);

/// The context of `item` after the description and the first `numFewshot`
/// shots of `subtask`. FailedPrecondition naming subtask.shotSource when it
/// has fewer shots.
absl::StatusOr<std::string> BuildContext(const Subtask &subtask,
                                         const Item &item, int64_t numFewshot);

/// The metrics a benchmark reports, in order: acc, acc_norm (multiple
/// choice); exact_match (bbh); exact_match_strict, exact_match_flexible
/// (gsm8k); pass@1 (humaneval).
std::vector<std::string> MetricNames(Benchmark benchmark);

/// One item's outcome.
struct ItemResult {
  std::string where;
  /// One score (0 or 1) per metric, MetricNames' order.
  std::vector<double> scores;
  /// Multiple choice: each choice's log-likelihood.
  std::vector<double> logprobs;
  /// Generative: the generation, cut at the stop strings.
  std::string generation;
};

/// Metrics over a set of items.
struct GroupResult {
  std::string name;
  std::string displayName;
  int64_t count = 0;
  std::vector<MetricValue> metrics;
};

struct TaskResult {
  Benchmark benchmark = Benchmark::kMmlu;
  int64_t numFewshot = 0;
  /// The benchmark as a whole (named after it).
  GroupResult overall;
  /// mmlu, ceval: per category, in name order; empty for the rest.
  std::vector<GroupResult> categories;
  /// Per subtask, in name order.
  std::vector<GroupResult> subtasks;
  /// Per item, subtask by subtask.
  std::vector<ItemResult> items;
};

/// Evaluates one benchmark already read: all its requests go to one call
/// of the callback (the model side batches them as it likes), then
/// HumanEval's programs run one by one. `progressBase` and `progressTotal`
/// place this task's progress among others'. Errors: a callback missing for
/// the benchmark, an unknown subtask name, too few shots, a callback's
/// error, an answer count that is not the request count.
absl::StatusOr<TaskResult> EvaluateBenchmark(const BenchmarkData &data,
                                             const TaskSpec &spec,
                                             const EvalCallbacks &callbacks,
                                             int64_t progressBase = 0,
                                             int64_t progressTotal = -1);

/// Reads and checks every task (subtask names, shots) before the model is
/// called, so that a bad file fails fast and the progress total is known,
/// then evaluates them in order.
absl::StatusOr<std::vector<TaskResult>>
Evaluate(const std::vector<TaskSpec> &tasks, const EvalCallbacks &callbacks);

/// The results as a JSON object:
/// {"results": [{"task", "num_fewshot", "count", "metrics": {NAME: {"value",
/// "stderr"}}, "categories": [GROUP...], "subtasks": [GROUP...]}...]},
/// a GROUP being {"name", "display_name", "count", "metrics"}; a standard
/// error that is not known (fewer than 2 items) is null. With `withItems`,
/// each task also has "items": [{"where", "scores": {NAME: 0|1},
/// "logprobs"|"generation"}].
std::string ResultsJson(const std::vector<TaskResult> &results,
                        bool withItems = false);

/// The results as a plain text table, one row per task, category and
/// subtask and metric: task, group, n, metric, value, stderr.
std::string ResultsTable(const std::vector<TaskResult> &results);

} // namespace braid::eval

#endif // BRAID_RUNTIME_EVAL_EVALUATE_H
