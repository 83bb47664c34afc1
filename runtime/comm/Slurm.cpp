//===- Slurm.cpp - What srun tells the tasks it starts --------------------===//

#include "runtime/comm/Slurm.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include <cstdint>
#include <cstdlib>
#include <optional>

namespace braid::comm {
namespace {

/// The numbers lo..hi of a bracket, written `width` digits wide.
struct Range {
  uint64_t lo = 0, hi = 0;
  int width = 0;
};

/// A piece of an entry: literal text, or (when `ranges` is not empty) the
/// numbers of one bracket.
struct Piece {
  std::string text;
  std::vector<Range> ranges;
  uint64_t count() const {
    if (ranges.empty())
      return 1;
    // Saturating: many huge ranges must not wrap around to a small count.
    uint64_t n = 0;
    for (const Range &r : ranges)
      n = r.hi - r.lo + 1 > UINT64_MAX - n ? UINT64_MAX : n + r.hi - r.lo + 1;
    return n;
  }
};

absl::Status badEntry(absl::string_view entry, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("the hostlist entry '", entry, "' ", why));
}

/// A number of a bracket: digits only, few enough for 64 bits.
bool parseNumber(absl::string_view s, uint64_t *v) {
  if (s.empty() || s.size() > 18)
    return false;
  for (char c : s)
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)))
      return false;
  return absl::SimpleAtoi(s, v);
}

/// The ranges of a bracket's contents, "01-04,07".
absl::StatusOr<std::vector<Range>> parseBracket(absl::string_view entry,
                                                absl::string_view inside) {
  std::vector<Range> ranges;
  for (absl::string_view part : absl::StrSplit(inside, ',')) {
    std::pair<absl::string_view, absl::string_view> bounds =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    Range r;
    bool single = part.find('-') == absl::string_view::npos;
    if (!parseNumber(bounds.first, &r.lo) ||
        !parseNumber(single ? bounds.first : bounds.second, &r.hi))
      return badEntry(entry,
                      absl::StrCat("has the range '", part,
                                   "' (expected N or N-M, in decimal digits)"));
    if (r.hi < r.lo)
      return badEntry(entry, absl::StrCat("has the range '", part,
                                          "', which ends before it starts"));
    r.width = int(bounds.first.size());
    ranges.push_back(r);
  }
  return ranges;
}

/// Appends every name of `pieces` (their combinations, the first bracket
/// varying slowest) to `out`, each after `prefix`.
void expand(const std::vector<Piece> &pieces, size_t i,
            const std::string &prefix, std::vector<std::string> &out) {
  if (i == pieces.size()) {
    out.push_back(prefix);
    return;
  }
  const Piece &p = pieces[i];
  if (p.ranges.empty()) {
    expand(pieces, i + 1, prefix + p.text, out);
    return;
  }
  for (const Range &r : p.ranges)
    for (uint64_t v = r.lo;; ++v) {
      expand(pieces, i + 1, prefix + absl::StrFormat("%0*d", r.width, v), out);
      if (v == r.hi)
        break;
    }
}

} // namespace

bool InSlurmStep() {
  return std::getenv("SLURM_PROCID") &&
         (std::getenv("SLURM_STEP_ID") || std::getenv("SLURM_STEPID"));
}

absl::StatusOr<std::vector<std::string>>
ExpandSlurmHostlist(absl::string_view hostlist, int64_t maxHosts) {
  // The entries: split at the commas outside brackets.
  std::vector<absl::string_view> entries;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= hostlist.size(); ++i) {
    char c = i < hostlist.size() ? hostlist[i] : ',';
    if (c == '[' && ++depth > 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "the hostlist '", hostlist, "' has a bracket inside a bracket"));
    if (c == ']' && --depth < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "the hostlist '", hostlist, "' closes a bracket it did not open"));
    if (c == ',' && depth == 0) {
      if (i > start)
        entries.push_back(hostlist.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("the hostlist '", hostlist, "' has an unclosed bracket"));
  std::vector<std::string> hosts;
  for (absl::string_view entry : entries) {
    std::vector<Piece> pieces;
    uint64_t names = 1;
    for (size_t i = 0; i < entry.size();) {
      size_t open = entry.find('[', i);
      if (open != i) {
        size_t end = open == absl::string_view::npos ? entry.size() : open;
        pieces.push_back({std::string(entry.substr(i, end - i)), {}});
        i = end;
        continue;
      }
      size_t close = entry.find(']', open);
      absl::StatusOr<std::vector<Range>> ranges =
          parseBracket(entry, entry.substr(open + 1, close - open - 1));
      if (!ranges.ok())
        return ranges.status();
      pieces.push_back({"", std::move(*ranges)});
      i = close + 1;
      // Counted as they come, so that a huge range is refused before it
      // is written out.
      uint64_t count = pieces.back().count();
      if (count > uint64_t(maxHosts) || names > uint64_t(maxHosts) / count)
        return badEntry(entry,
                        absl::StrCat("names more than ", maxHosts, " hosts"));
      names *= count;
    }
    if (names > uint64_t(maxHosts) - hosts.size())
      return badEntry(
          entry, absl::StrCat("brings the hostlist past ", maxHosts, " hosts"));
    expand(pieces, 0, "", hosts);
  }
  if (hosts.empty())
    return absl::InvalidArgumentError("the hostlist names no host");
  return hosts;
}

absl::StatusOr<int64_t> SlurmTasksOnNode(absl::string_view tasksPerNode,
                                         int64_t node) {
  auto bad = [&](absl::string_view part) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tasks per node '", tasksPerNode, "' has '", part,
        "' (expected a count C or C(xK) for K nodes, as \"4(x2),2\")"));
  };
  // Every part is read (a malformed list is refused whichever node is
  // asked for).
  int64_t first = 0; // The first node of the current part.
  std::optional<int64_t> found;
  for (absl::string_view part : absl::StrSplit(tasksPerNode, ',')) {
    absl::string_view count = part;
    int64_t nodes = 1;
    if (size_t paren = part.find('('); paren != absl::string_view::npos) {
      absl::string_view repeat = part.substr(paren);
      if (repeat.size() < 4 || repeat.substr(0, 2) != "(x" ||
          repeat.back() != ')' ||
          !absl::SimpleAtoi(repeat.substr(2, repeat.size() - 3), &nodes) ||
          nodes < 1)
        return bad(part);
      count = part.substr(0, paren);
    }
    int64_t tasks = 0;
    if (!absl::SimpleAtoi(count, &tasks) || tasks < 0)
      return bad(part);
    if (!found && node >= first && node - first < nodes)
      found = tasks;
    first = nodes > INT64_MAX - first ? INT64_MAX : first + nodes;
  }
  if (found)
    return *found;
  return absl::InvalidArgumentError(
      absl::StrCat("the tasks per node '", tasksPerNode, "' lists ", first,
                   " nodes, not node ", node));
}

} // namespace braid::comm
