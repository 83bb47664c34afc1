//===- Float16Test.cpp - Host encoding of F16 and BF16 --------------------===//
//
// The expectations come from the formats' definitions, not from the
// encoder: every value of a format decodes to a float the format holds
// exactly, so encoding it must give back its bits; and the encoding of any
// other float must be the nearer of the two format values around it (the
// even one on a tie), found here by searching the decoded values.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Float16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace braid {
namespace {

struct Format {
  const char *name;
  float (*decode)(uint16_t);
  uint16_t (*encode)(float);
};

const Format kFormats[] = {{"f16", halfToFloat, floatToHalf},
                           {"bf16", bfloat16ToFloat, floatToBfloat16}};

TEST(Float16, KnownValues) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001); // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000); // tie to even: 0
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002); // tie to even: 2
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00); // the tie above 65504: infinity
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBfloat16(-3.0f), 0xc040);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even, 1.
  EXPECT_EQ(floatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(halfToFloat(0x7c00), INFINITY);
  EXPECT_EQ(bfloat16ToFloat(0xff80), -INFINITY);
}

TEST(Float16, EveryValueRoundTrips) {
  for (const Format &f : kFormats)
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
      float v = f.decode(uint16_t(bits));
      uint16_t back = f.encode(v);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(f.decode(back))) << f.name << " " << bits;
        EXPECT_EQ(back & 0x8000, bits & 0x8000) << f.name << " " << bits;
        continue;
      }
      ASSERT_EQ(back, bits) << f.name << " value " << v;
    }
}

TEST(Float16, RoundsToNearestEven) {
  for (const Format &f : kFormats) {
    // The format's finite non-negative values in increasing order, with
    // their bits.
    std::vector<std::pair<float, uint16_t>> values;
    for (uint32_t bits = 0; bits < 0x8000; ++bits) {
      float v = f.decode(uint16_t(bits));
      if (std::isfinite(v))
        values.push_back({v, uint16_t(bits)});
    }
    std::sort(values.begin(), values.end());
    const double largest = values.back().first;
    // The step above the largest finite value, as the format would continue
    // (in double: for bf16 it is 2^128).
    const double beyond = largest + (largest - values[values.size() - 2].first);
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> any;
    int checked = 0;
    while (checked < 200000) {
      uint32_t b = any(rng);
      float v;
      std::memcpy(&v, &b, 4);
      if (!std::isfinite(v))
        continue;
      // Mostly values in the format's range: reduce the exponent at random.
      if (checked % 2 == 0) {
        int exponent = 0;
        v = std::ldexp(std::frexp(v, &exponent), int(any(rng) % 48) - 30);
      }
      ++checked;
      float a = std::fabs(v);
      uint16_t got = f.encode(v);
      uint16_t sign = std::signbit(v) ? 0x8000 : 0;
      if (double(a) >= (largest + beyond) / 2) {
        // At or past the midpoint to the next step: infinity.
        ASSERT_TRUE(std::isinf(f.decode(got))) << f.name << " " << v;
        ASSERT_EQ(got & 0x8000, sign);
        continue;
      }
      auto hi = std::lower_bound(values.begin(), values.end(),
                                 std::make_pair(a, uint16_t(0)));
      uint16_t want;
      if (hi == values.end()) {
        want = values.back().second;
      } else if (hi->first == a || hi == values.begin()) {
        want = hi->second;
      } else {
        auto lo = hi - 1;
        double dl = double(a) - lo->first, dh = double(hi->first) - a;
        want = dl < dh   ? lo->second
               : dh < dl ? hi->second
                         : ((lo->second & 1) ? hi->second : lo->second);
      }
      ASSERT_EQ(got, uint16_t(want | sign)) << f.name << " " << v;
    }
  }
}

} // namespace
} // namespace braid
