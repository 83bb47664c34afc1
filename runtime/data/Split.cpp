//===- Split.cpp - Train, validation and test document splits ------------===//
//
// A transcription of Megatron's get_train_valid_test_split_: the parse, the
// normalization and the index arithmetic follow its Python statement by
// statement (sums left to right, products and quotients in double), so that
// the ranges agree with Megatron's to the document, rounding included.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/Split.h"

#include "absl/numeric/int128.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace braid::data {

absl::StatusOr<std::array<double, 3>> ParseSplit(absl::string_view s) {
  if (s.empty())
    return absl::InvalidArgumentError(
        "the split string is empty, expected 1 to 3 numbers such as "
        "\"969,30,1\"");
  // Megatron splits on ',' when the string has one, else on '/'; a string
  // that mixes them has a part that is not a number.
  const char separator = s.find(',') != absl::string_view::npos ? ',' : '/';
  const std::vector<absl::string_view> parts = absl::StrSplit(s, separator);
  if (parts.size() > 3)
    return absl::InvalidArgumentError(
        absl::StrCat("split \"", s, "\" has ", parts.size(),
                     " parts, expected at most 3 (train, validation, test)"));
  std::array<double, 3> values = {0, 0, 0};
  for (size_t i = 0; i < parts.size(); ++i) {
    double value;
    if (!absl::SimpleAtod(parts[i], &value) || !std::isfinite(value))
      return absl::InvalidArgumentError(
          absl::StrCat("split \"", s, "\": part ", i + 1, " \"", parts[i],
                       "\" is not a finite number"));
    if (value < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "split \"", s, "\": part ", i + 1, " is negative (", parts[i], ")"));
    values[i] = value;
  }
  const double sum = values[0] + values[1] + values[2];
  if (sum == 0)
    return absl::InvalidArgumentError(
        absl::StrCat("split \"", s, "\" sums to 0, expected a positive sum"));
  if (!std::isfinite(sum))
    return absl::InvalidArgumentError(
        absl::StrCat("split \"", s, "\" sums past the largest double"));
  for (double &value : values)
    value /= sum;
  return values;
}

double RoundHalfToEven(double x) {
  const double below = std::floor(x);
  // Exact: x and floor(x) are within 1 of each other (and equal from 2^52
  // on, where every double is an integer).
  const double fraction = x - below;
  if (fraction > 0.5)
    return below + 1;
  if (fraction < 0.5)
    return below;
  return std::fmod(below, 2) == 0 ? below : below + 1;
}

std::array<std::pair<uint64_t, uint64_t>, 3>
SplitDocuments(uint64_t numDocuments, const std::array<double, 3> &fractions) {
  // In 128 bits: a product rounded up at numDocuments near 2^64 (or a
  // fraction outside [0, 1] from a caller that did not normalize) must not
  // wrap.
  const absl::int128 n = numDocuments;
  const double size = static_cast<double>(numDocuments);
  std::array<absl::int128, 4> index = {0, 0, 0, 0};
  for (size_t i = 0; i < 3; ++i) {
    double rounded = RoundHalfToEven(fractions[i] * size);
    // NaN or beyond 2^100 only from fractions that are not ParseSplit's;
    // the clamp below then keeps the ranges inside the dataset.
    if (!(std::fabs(rounded) < 0x1p100))
      rounded = 0;
    index[i + 1] = index[i] + absl::int128(rounded);
  }
  const absl::int128 diff = index[3] - n;
  for (size_t i = 1; i < 4; ++i)
    index[i] -= diff;
  // Megatron's index[1] can be -1 (see Split.h); clamping every bound into
  // [previous bound, numDocuments] leaves its other results unchanged.
  std::array<std::pair<uint64_t, uint64_t>, 3> ranges;
  absl::int128 previous = 0;
  for (size_t i = 0; i < 3; ++i) {
    absl::int128 end = std::min(std::max(index[i + 1], previous), n);
    ranges[i] = {static_cast<uint64_t>(previous), static_cast<uint64_t>(end)};
    previous = end;
  }
  return ranges;
}

} // namespace braid::data
