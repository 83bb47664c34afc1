//===- FormatTest.cpp - Sizes as people read them -------------------------===//
//
// Every expectation is worked out by hand from the rule in Format.h (binary
// units, two decimals rounded half up); the arithmetic is in the comments.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Format.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace braid::common {
namespace {

TEST(FormatBytes, BelowOneKibibyteIsExact) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1), "1 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
}

TEST(FormatBytes, EachUnitFromItsFirstByte) {
  EXPECT_EQ(FormatBytes(1024), "1.00 KiB");
  EXPECT_EQ(FormatBytes(int64_t(1) << 20), "1.00 MiB");
  EXPECT_EQ(FormatBytes(int64_t(1) << 30), "1.00 GiB");
  EXPECT_EQ(FormatBytes(int64_t(1) << 40), "1.00 TiB");
  EXPECT_EQ(FormatBytes(int64_t(1) << 50), "1.00 PiB");
  EXPECT_EQ(FormatBytes(int64_t(1) << 60), "1.00 EiB");
}

TEST(FormatBytes, TwoDecimals) {
  // 1536 / 1024 = 1.5.
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  // 64 * 2^20 = 67108864.
  EXPECT_EQ(FormatBytes(67108864), "64.00 MiB");
  // 1000000 / 1024 = 976.5625.
  EXPECT_EQ(FormatBytes(1000000), "976.56 KiB");
  // 1034 / 1024 = 1.00976...: the second decimal rounds up; 1029 / 1024 =
  // 1.00488... rounds down.
  EXPECT_EQ(FormatBytes(1034), "1.01 KiB");
  EXPECT_EQ(FormatBytes(1029), "1.00 KiB");
  // 73333659968 = 68 * 2^30 (73014444032) + 319215936, and 319215936 / 2^30
  // = 0.2973: 68.2973 GiB.
  EXPECT_EQ(FormatBytes(73333659968), "68.30 GiB");
  // 1.2 * 2^40 = 1319413953331.2: one byte less than 1.2 TiB still rounds
  // to 1.20.
  EXPECT_EQ(FormatBytes(1319413953331), "1.20 TiB");
}

TEST(FormatBytes, HalfRoundsUp) {
  // 1152 / 1024 = 1.125 exactly: a tie, rounded up (printf's "%.2f" would
  // give 1.12, rounding to even).
  EXPECT_EQ(FormatBytes(1152), "1.13 KiB");
  EXPECT_EQ(FormatBytes(1151), "1.12 KiB"); // 1.12402...
  // The same tie far above 2^64 / 100, where the hundredths need more than
  // 64 bits: 9 * 2^47 = 1.125 PiB, 9 * 2^57 = 1.125 EiB, and one byte less
  // is below the tie.
  EXPECT_EQ(FormatBytes(int64_t(9) << 47), "1.13 PiB");
  EXPECT_EQ(FormatBytes((int64_t(9) << 47) - 1), "1.12 PiB");
  EXPECT_EQ(FormatBytes(int64_t(9) << 57), "1.13 EiB");
  EXPECT_EQ(FormatBytes((int64_t(9) << 57) - 1), "1.12 EiB");
}

TEST(FormatBytes, RoundingToTheNextUnit) {
  // 1048064 / 1024 = 1023.5 KiB stays in KiB; 1048570 / 1024 = 1023.9941
  // rounds to 1023.99; 1048571 / 1024 = 1023.9951 would round to 1024.00
  // KiB, which is 1.00 MiB (1048571 / 2^20 = 0.99999905).
  EXPECT_EQ(FormatBytes(1048064), "1023.50 KiB");
  EXPECT_EQ(FormatBytes(1048570), "1023.99 KiB");
  EXPECT_EQ(FormatBytes(1048571), "1.00 MiB");
  EXPECT_EQ(FormatBytes((int64_t(1) << 20) - 1), "1.00 MiB");
  EXPECT_EQ(FormatBytes((int64_t(1) << 40) - 1), "1.00 TiB");
  // EiB is the largest unit: int64_t ends at 8 EiB - 1 B, which rounds to
  // 8.00 EiB.
  EXPECT_EQ(FormatBytes(std::numeric_limits<int64_t>::max()), "8.00 EiB");
}

TEST(FormatBytes, NegativeSizesAreMagnitudesAfterAMinus) {
  EXPECT_EQ(FormatBytes(-1), "-1 B");
  EXPECT_EQ(FormatBytes(-1023), "-1023 B");
  EXPECT_EQ(FormatBytes(-1536), "-1.50 KiB");
  EXPECT_EQ(FormatBytes(-73333659968), "-68.30 GiB");
  // INT64_MIN = -2^63 = -8 * 2^60, whose magnitude no int64_t holds.
  EXPECT_EQ(FormatBytes(std::numeric_limits<int64_t>::min()), "-8.00 EiB");
}

} // namespace
} // namespace braid::common
