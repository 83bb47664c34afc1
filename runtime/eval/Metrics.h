//===- Metrics.h - Scores as lm-evaluation-harness gives them ---*- C++ -*-===//
//
// The per-item scores and their aggregation, from lm-evaluation-harness's
// api/task.py (multiple choice), api/metrics.py (exact match, standard
// errors, groups), filters/extraction.py (GSM8K's answer extraction) and
// its gsm8k, bbh/fewshot and humaneval task files.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EVAL_METRICS_H
#define BRAID_RUNTIME_EVAL_METRICS_H

#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::eval {

/// The number of Unicode code points of the UTF-8 `text` (Python's len of
/// the string; a byte that starts no valid sequence counts as one).
int64_t CodePointCount(absl::string_view text);

/// A multiple-choice item's scores.
struct ChoiceScore {
  /// The choice of the highest log-likelihood is the gold one.
  bool acc = false;
  /// The choice of the highest log-likelihood per character of the choice
  /// (CodePointCount of the choice string, without the " " before it) is.
  bool accNorm = false;
  /// The choices the two pick (the first of equal values, as numpy's
  /// argmax).
  int64_t pick = -1;
  int64_t pickNorm = -1;
};

/// The scores of an item whose choices have the log-likelihoods `logprobs`
/// (one each, same order) and whose gold choice is `gold`.
ChoiceScore ScoreChoices(const std::vector<double> &logprobs,
                         const std::vector<std::string> &choices, int64_t gold);

/// `text` cut at the first place any of `stop` occurs (empty stops are
/// ignored), as the harness cuts a generation at its "until" strings.
std::string TruncateAtStop(absl::string_view text,
                           const std::vector<std::string> &stop);

/// What the harness's RegexFilter gives when nothing matches.
inline constexpr absl::string_view kInvalidAnswer = "[invalid]";

/// GSM8K's strict-match filter: the first "#### (\-?[0-9\.\,]+)" of the
/// generation, its group, stripped; kInvalidAnswer when there is none.
std::string Gsm8kStrictAnswer(absl::string_view generation);
/// GSM8K's flexible-extract filter: the last match of
/// "(-?[$0-9.,]{2,})|(-?[0-9]+)", stripped; kInvalidAnswer when there is
/// none.
std::string Gsm8kFlexibleAnswer(absl::string_view generation);
/// The normalization gsm8k.yaml's exact_match applies to both sides, in
/// order: every "," and "$" removed, everything up to the last "#### "
/// removed, a "." at the end (or before a final "\n", as Python's "$")
/// removed, then lower case.
std::string Gsm8kNormalize(absl::string_view text);
/// Whether an extracted answer matches the reference solution (its final
/// "#### N"): their Gsm8kNormalize are equal.
bool Gsm8kMatch(absl::string_view extracted, absl::string_view reference);

/// BIG-Bench Hard's exact match (bbh/fewshot: no case folding, nothing
/// ignored): the generation, cut at `stop` and without leading whitespace,
/// equals the target. The harness compares the decoded continuation as it
/// is; a tokenizer that decodes the continuation alone with the space after
/// "A:" (byte-level BPE) would never match there, one that drops it
/// (SentencePiece) would: dropping it here makes the score independent of
/// how the model side decodes.
bool BbhExactMatch(absl::string_view generation, absl::string_view target,
                   const std::vector<std::string> &stop);

/// The program that checks a HumanEval completion: prompt, completion,
/// "\n", test, "\n", "check(" entry_point ")\n" (HumanEval's execution.py;
/// the harness's humaneval.yaml builds the same).
std::string HumanEvalProgram(absl::string_view prompt,
                             absl::string_view completion,
                             absl::string_view test,
                             absl::string_view entryPoint);

/// A metric's value over items and its standard error.
struct MetricValue {
  std::string name;
  double value = 0;
  /// The sample standard error of the mean, sqrt(sum (x - mean)^2 /
  /// (n - 1)) / sqrt(n) (for 0/1 scores sqrt(p (1 - p) / (n - 1))); NaN
  /// (the harness's "N/A") for fewer than 2 items.
  double standardError = 0;
};

/// The mean of `scores` and its standard error; value NaN when empty.
MetricValue MeanWithStderr(absl::string_view name,
                           const std::vector<double> &scores);

/// A group's value from its members' (values and sizes): the mean weighted
/// by size (a micro average over the items), and the harness's pooled
/// standard error sqrt(sum (n_i - 1) n_i se_i^2 / (N - k) / N) over the k
/// members of N items in all (api/metrics.py pooled_sample_stderr); NaN
/// when a member's is (or N <= k).
MetricValue PooledMetric(absl::string_view name,
                         const std::vector<MetricValue> &members,
                         const std::vector<int64_t> &sizes);

} // namespace braid::eval

#endif // BRAID_RUNTIME_EVAL_METRICS_H
