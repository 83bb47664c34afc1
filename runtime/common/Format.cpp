//===- Format.cpp - Sizes as people read them -----------------------------===//

#include "runtime/common/Format.h"

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"

namespace braid::common {

std::string FormatBytes(int64_t bytes) {
  static constexpr const char *kUnits[] = {"KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  constexpr int kLargest = 6; // EiB: 2^60, and int64_t ends below 2^63
  // The magnitude as unsigned, so that INT64_MIN (whose negation does not
  // fit an int64_t) is no special case.
  uint64_t magnitude =
      bytes < 0 ? uint64_t(0) - static_cast<uint64_t>(bytes) : uint64_t(bytes);
  const char *sign = bytes < 0 ? "-" : "";
  if (magnitude < 1024)
    return absl::StrCat(sign, magnitude, " B");
  int unit = 1; // in powers of 1024
  while (unit < kLargest && (magnitude >> (10 * (unit + 1))) != 0)
    ++unit;
  // Hundredths of the unit, rounded half up: in 128 bits, since the
  // magnitude times 100 leaves 64 above 1.8e17 B.
  auto hundredths = [&](int u) {
    int shift = 10 * u;
    absl::uint128 scaled = absl::uint128(magnitude) * 100 +
                           (absl::uint128(1) << (shift - 1));
    return absl::Uint128Low64(scaled >> shift);
  };
  uint64_t h = hundredths(unit);
  if (h >= 1024 * 100 && unit < kLargest)
    h = hundredths(++unit);
  uint64_t fraction = h % 100;
  return absl::StrCat(sign, h / 100, fraction < 10 ? ".0" : ".", fraction,
                      " ", kUnits[unit - 1]);
}

} // namespace braid::common
