//===- Metrics.cpp - Scores as lm-evaluation-harness gives them -----------===//

#include "runtime/eval/Metrics.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

#include <cmath>
#include <limits>

namespace braid::eval {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// numpy's argmax: the first of the largest values.
int64_t argmax(const std::vector<double> &values) {
  int64_t best = -1;
  for (size_t i = 0; i < values.size(); ++i)
    if (best < 0 || values[i] > values[static_cast<size_t>(best)])
      best = static_cast<int64_t>(i);
  return best;
}

bool isDigit(char c) { return c >= '0' && c <= '9'; }

/// The length of the run of characters `in` accepts from `pos`.
template <typename Pred>
size_t runLength(absl::string_view text, size_t pos, Pred in) {
  size_t end = pos;
  while (end < text.size() && in(text[end]))
    ++end;
  return end - pos;
}

/// Python's str.strip() of ASCII text (the extracted answers are digits,
/// signs and punctuation).
std::string strip(absl::string_view text) {
  return std::string(absl::StripAsciiWhitespace(text));
}

} // namespace

int64_t CodePointCount(absl::string_view text) {
  int64_t count = 0;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    size_t n = lead < 0x80           ? 1
               : (lead >> 5) == 0x6  ? 2
               : (lead >> 4) == 0xE  ? 3
               : (lead >> 3) == 0x1E ? 4
                                     : 1;
    if (i + n > text.size())
      n = 1;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) {
        n = 1;
        break;
      }
    i += n;
    ++count;
  }
  return count;
}

ChoiceScore ScoreChoices(const std::vector<double> &logprobs,
                         const std::vector<std::string> &choices,
                         int64_t gold) {
  std::vector<double> normalized(logprobs.size());
  for (size_t i = 0; i < logprobs.size(); ++i)
    normalized[i] =
        logprobs[i] / static_cast<double>(CodePointCount(choices[i]));
  ChoiceScore score;
  score.pick = argmax(logprobs);
  score.pickNorm = argmax(normalized);
  score.acc = score.pick == gold;
  score.accNorm = score.pickNorm == gold;
  return score;
}

std::string TruncateAtStop(absl::string_view text,
                           const std::vector<std::string> &stop) {
  size_t cut = text.size();
  for (const std::string &s : stop) {
    if (s.empty())
      continue;
    size_t at = text.find(s);
    if (at != absl::string_view::npos && at < cut)
      cut = at;
  }
  return std::string(text.substr(0, cut));
}

std::string Gsm8kStrictAnswer(absl::string_view generation) {
  // "#### (\-?[0-9\.\,]+)": the first place it matches.
  auto numeric = [](char c) { return isDigit(c) || c == '.' || c == ','; };
  for (size_t at = generation.find("#### "); at != absl::string_view::npos;
       at = generation.find("#### ", at + 1)) {
    const size_t start = at + 5;
    if (start < generation.size() && generation[start] == '-') {
      if (size_t n = runLength(generation, start + 1, numeric); n > 0)
        return strip(generation.substr(start, n + 1));
    }
    if (size_t n = runLength(generation, start, numeric); n > 0)
      return strip(generation.substr(start, n));
  }
  return std::string(kInvalidAnswer);
}

std::string Gsm8kFlexibleAnswer(absl::string_view generation) {
  // findall of "(-?[$0-9.,]{2,})|(-?[0-9]+)", the last match.
  auto money = [](char c) {
    return isDigit(c) || c == '$' || c == '.' || c == ',';
  };
  absl::string_view last;
  bool found = false;
  size_t pos = 0;
  while (pos < generation.size()) {
    size_t length = 0;
    const bool minus = generation[pos] == '-';
    // The first alternative, with the sign and then without it (a '-' is
    // not in the class, so without the sign it fails at a '-').
    if (minus && runLength(generation, pos + 1, money) >= 2)
      length = 1 + runLength(generation, pos + 1, money);
    else if (!minus && runLength(generation, pos, money) >= 2)
      length = runLength(generation, pos, money);
    // The second alternative.
    else if (minus && runLength(generation, pos + 1, isDigit) >= 1)
      length = 1 + runLength(generation, pos + 1, isDigit);
    else if (!minus && runLength(generation, pos, isDigit) >= 1)
      length = runLength(generation, pos, isDigit);
    if (length == 0) {
      ++pos;
      continue;
    }
    last = generation.substr(pos, length);
    found = true;
    pos += length;
  }
  if (!found)
    return std::string(kInvalidAnswer);
  return strip(last);
}

std::string Gsm8kNormalize(absl::string_view text) {
  // regexes_to_ignore: ",", "\$", "(?s).*#### ", "\.$", each re.sub in
  // turn.
  std::string s;
  for (char c : text)
    if (c != ',')
      s.push_back(c);
  std::string t;
  for (char c : s)
    if (c != '$')
      t.push_back(c);
  if (size_t at = t.rfind("#### "); at != std::string::npos)
    t.erase(0, at + 5);
  if (!t.empty() && t.back() == '.')
    t.pop_back();
  else if (t.size() >= 2 && t[t.size() - 1] == '\n' && t[t.size() - 2] == '.')
    t.erase(t.size() - 2, 1);
  // ignore_case.
  return absl::AsciiStrToLower(t);
}

bool Gsm8kMatch(absl::string_view extracted, absl::string_view reference) {
  return Gsm8kNormalize(extracted) == Gsm8kNormalize(reference);
}

bool BbhExactMatch(absl::string_view generation, absl::string_view target,
                   const std::vector<std::string> &stop) {
  const std::string cut = TruncateAtStop(generation, stop);
  return absl::StripLeadingAsciiWhitespace(cut) == target;
}

std::string HumanEvalProgram(absl::string_view prompt,
                             absl::string_view completion,
                             absl::string_view test,
                             absl::string_view entryPoint) {
  return absl::StrCat(prompt, completion, "\n", test, "\n", "check(",
                      entryPoint, ")\n");
}

MetricValue MeanWithStderr(absl::string_view name,
                           const std::vector<double> &scores) {
  MetricValue metric;
  metric.name = std::string(name);
  const size_t n = scores.size();
  if (n == 0) {
    metric.value = kNaN;
    metric.standardError = kNaN;
    return metric;
  }
  double sum = 0;
  for (double x : scores)
    sum += x;
  const double mean = sum / static_cast<double>(n);
  metric.value = mean;
  if (n < 2) {
    metric.standardError = kNaN;
    return metric;
  }
  double squares = 0;
  for (double x : scores)
    squares += (x - mean) * (x - mean);
  const double stddev = std::sqrt(squares / static_cast<double>(n - 1));
  metric.standardError = stddev / std::sqrt(static_cast<double>(n));
  return metric;
}

MetricValue PooledMetric(absl::string_view name,
                         const std::vector<MetricValue> &members,
                         const std::vector<int64_t> &sizes) {
  MetricValue metric;
  metric.name = std::string(name);
  double weighted = 0, pooled = 0;
  int64_t total = 0;
  bool stderrKnown = true;
  for (size_t i = 0; i < members.size(); ++i) {
    const double n = static_cast<double>(sizes[i]);
    weighted += members[i].value * n;
    total += sizes[i];
    if (std::isnan(members[i].standardError))
      stderrKnown = false;
    else
      pooled +=
          (n - 1) * members[i].standardError * members[i].standardError * n;
  }
  const int64_t k = static_cast<int64_t>(members.size());
  metric.value = total > 0 ? weighted / static_cast<double>(total) : kNaN;
  metric.standardError =
      stderrKnown && total > k
          ? std::sqrt(pooled / static_cast<double>(total - k) /
                      static_cast<double>(total))
          : kNaN;
  return metric;
}

} // namespace braid::eval
