//===- SplitTest.cpp - Train, validation and test document splits ---------===//
//
// The expected ranges are worked out by hand from Megatron's arithmetic
// (Split.h): index[i + 1] = index[i] + round(f_i * N), then every index
// after the first shifted by index[3] - N. The exact-half cases tell
// Python's round (halves to even) from rounding halves away from zero.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/Split.h"

#include "tests/runtime/data/DataTestUtil.h"

#include "runtime/data/GptSamples.h"

#include "gtest/gtest.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

using namespace braid::data;
using namespace braid::data::testing;

namespace {

using Ranges = std::array<std::pair<uint64_t, uint64_t>, 3>;

std::array<double, 3> parsed(absl::string_view s) {
  absl::StatusOr<std::array<double, 3>> f = ParseSplit(s);
  EXPECT_TRUE(f.ok()) << s << ": " << f.status();
  return f.ok() ? *f : std::array<double, 3>{-1, -1, -1};
}

TEST(ParseSplitTest, NormalizesByTheSum) {
  const std::array<double, 3> megatron = {969.0 / 1000, 30.0 / 1000,
                                          1.0 / 1000};
  EXPECT_EQ(parsed("969,30,1"), megatron);
  EXPECT_EQ(parsed("969/30/1"), megatron);
  EXPECT_EQ(parsed("99,1"), (std::array<double, 3>{0.99, 0.01, 0}));
  EXPECT_EQ(parsed("1"), (std::array<double, 3>{1, 0, 0}));
  EXPECT_EQ(parsed("7"), (std::array<double, 3>{1, 0, 0}));
  EXPECT_EQ(parsed("0,1"), (std::array<double, 3>{0, 1, 0}));
  EXPECT_EQ(parsed("0.5,0.25,0.25"), (std::array<double, 3>{0.5, 0.25, 0.25}));
  EXPECT_EQ(parsed("2,1,1"), (std::array<double, 3>{0.5, 0.25, 0.25}));
  // Spaces around a number are allowed, as Python's float() allows them.
  EXPECT_EQ(parsed(" 8 , 1 ,1"), (std::array<double, 3>{0.8, 0.1, 0.1}));
}

TEST(ParseSplitTest, BadStringsAreRefusedNamingThem) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  expectError(ParseSplit("").status(), kInvalid, "the split string is empty");
  expectError(ParseSplit("969,x,1").status(), kInvalid,
              "split \"969,x,1\": part 2 \"x\" is not a finite number");
  expectError(ParseSplit("969,,1").status(), kInvalid,
              "part 2 \"\" is not a finite number");
  expectError(ParseSplit("969,30,").status(), kInvalid,
              "part 3 \"\" is not a finite number");
  // Megatron splits on ',' when there is one: "30/1" is then one part.
  expectError(ParseSplit("969,30/1").status(), kInvalid,
              "part 2 \"30/1\" is not a finite number");
  expectError(ParseSplit("inf,1").status(), kInvalid,
              "part 1 \"inf\" is not a finite number");
  expectError(ParseSplit("nan").status(), kInvalid, "not a finite number");
  expectError(ParseSplit("969,-30,1").status(), kInvalid,
              "part 2 is negative (-30)");
  expectError(ParseSplit("1,2,3,4").status(), kInvalid,
              "split \"1,2,3,4\" has 4 parts, expected at most 3");
  expectError(ParseSplit("1/1/1/1/1").status(), kInvalid, "has 5 parts");
  expectError(ParseSplit("0,0,0").status(), kInvalid,
              "split \"0,0,0\" sums to 0");
  expectError(ParseSplit("0").status(), kInvalid, "sums to 0");
  expectError(ParseSplit("1e308,1e308").status(), kInvalid,
              "sums past the largest double");
}

TEST(RoundHalfToEvenTest, IsPythonsRound) {
  EXPECT_EQ(RoundHalfToEven(0.5), 0.0);
  EXPECT_EQ(RoundHalfToEven(1.5), 2.0);
  EXPECT_EQ(RoundHalfToEven(2.5), 2.0);
  EXPECT_EQ(RoundHalfToEven(3.5), 4.0);
  EXPECT_EQ(RoundHalfToEven(-1.5), -2.0);
  EXPECT_EQ(RoundHalfToEven(-2.5), -2.0);
  EXPECT_EQ(RoundHalfToEven(2.4999999999999996), 2.0);
  EXPECT_EQ(RoundHalfToEven(2.5000000000000004), 3.0);
  EXPECT_EQ(RoundHalfToEven(968.9999999999999), 969.0);
  EXPECT_EQ(RoundHalfToEven(0.0), 0.0);
  // From 2^52 on every double is an integer.
  EXPECT_EQ(RoundHalfToEven(4503599627370497.0), 4503599627370497.0);
  EXPECT_EQ(RoundHalfToEven(1e20), 1e20);
}

Ranges split(uint64_t documents, absl::string_view s) {
  return SplitDocuments(documents, parsed(s));
}

TEST(SplitDocumentsTest, MegatronsArithmeticByHand) {
  // round(969) = 969, round(30) = 30, round(1) = 1: [0, 969, 999, 1000].
  EXPECT_EQ(split(1000, "969,30,1"),
            (Ranges{{{0, 969}, {969, 999}, {999, 1000}}}));
  EXPECT_EQ(split(1000000, "969,30,1"),
            (Ranges{{{0, 969000}, {969000, 999000}, {999000, 1000000}}}));
  EXPECT_EQ(split(10, "8,1,1"), (Ranges{{{0, 8}, {8, 9}, {9, 10}}}));
  EXPECT_EQ(split(3, "1,1,1"), (Ranges{{{0, 1}, {1, 2}, {2, 3}}}));
  // 10/3 rounds to 3 three times: [0, 3, 6, 9], shifted by 9 - 10 = -1.
  EXPECT_EQ(split(10, "1,1,1"), (Ranges{{{0, 4}, {4, 7}, {7, 10}}}));
  // 100 * 0.99 and 100 * 0.01 round to 99 and 1; the test split is empty.
  EXPECT_EQ(split(100, "99,1"), (Ranges{{{0, 99}, {99, 100}, {100, 100}}}));
  EXPECT_EQ(split(7, "1"), (Ranges{{{0, 7}, {7, 7}, {7, 7}}}));
  EXPECT_EQ(split(0, "969,30,1"), (Ranges{{{0, 0}, {0, 0}, {0, 0}}}));
}

TEST(SplitDocumentsTest, ExactHalvesRoundToEven) {
  // 5 * 0.5 = 2.5 rounds to 2 twice: [0, 2, 4, 4], shifted by -1. Rounding
  // halves away from zero would give [0, 3, 6, 6] - 1 = [0, 2, 5, 5].
  EXPECT_EQ(split(5, "1,1"), (Ranges{{{0, 3}, {3, 5}, {5, 5}}}));
  // 2 * 0.25 = 0.5 rounds to 0 twice, 2 * 0.5 = 1: [0, 0, 1, 1], shifted by
  // -1 (away from zero: [0, 1, 2, 3] - 1 = [0, 0, 1, 2]).
  EXPECT_EQ(split(2, "1,2,1"), (Ranges{{{0, 1}, {1, 2}, {2, 2}}}));
  // 1.5 rounds up to the even 2, as away from zero would: [0, 2, 4, 4] - 1.
  EXPECT_EQ(split(3, "1,1"), (Ranges{{{0, 1}, {1, 3}, {3, 3}}}));
  EXPECT_EQ(split(6, "1,1"), (Ranges{{{0, 3}, {3, 6}, {6, 6}}}));
}

TEST(SplitDocumentsTest, TrainEndBelowZeroIsClampedToZero) {
  // 0, 1.5 -> 2, 1.5 -> 2: [0, 0, 2, 4] - 1 = [0, -1, 1, 3] in Megatron.
  EXPECT_EQ(split(3, "0,1,1"), (Ranges{{{0, 0}, {0, 1}, {1, 3}}}));
}

TEST(SplitDocumentsTest, RangesAlwaysPartitionTheDocuments) {
  for (const char *s :
       {"969,30,1", "1,1,1", "0,1,1", "1,2,1", "3,3,1", "0,0,1", "5", "1,0,1"})
    for (uint64_t n = 0; n < 200; ++n) {
      const Ranges r = split(n, s);
      EXPECT_EQ(r[0].first, 0u) << s << " " << n;
      EXPECT_EQ(r[2].second, n) << s << " " << n;
      for (int i = 0; i < 3; ++i)
        EXPECT_LE(r[i].first, r[i].second) << s << " " << n;
      EXPECT_EQ(r[0].second, r[1].first);
      EXPECT_EQ(r[1].second, r[2].first);
    }
}

class SplitSamplesTest : public DataTest {};

TEST_F(SplitSamplesTest, EachSplitReadsOnlyItsDocuments) {
  // Ten documents of 6 tokens, document d holding 100 (d + 1) + k.
  std::vector<Document> documents;
  for (int64_t d = 0; d < 10; ++d)
    documents.push_back(countingDocument(100 * (d + 1), 6));
  IndexedDataset ds = makeDataset("split", documents);
  const Ranges ranges = split(ds.numDocuments(), "8,1,1");
  ASSERT_EQ(ranges, (Ranges{{{0, 8}, {8, 9}, {9, 10}}}));
  for (int i = 0; i < 3; ++i) {
    GptSampleOptions o;
    o.seqLength = 4;
    o.numSamples = 30;
    o.seed = 3;
    o.firstDocument = ranges[i].first;
    o.numDocuments = ranges[i].second - ranges[i].first;
    absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
    ASSERT_TRUE(samples.ok()) << samples.status();
    for (uint64_t k = 0; k < 30; ++k) {
      std::vector<int32_t> out;
      ASSERT_TRUE(samples->GetSample(k, &out).ok());
      for (int32_t token : out) {
        const int64_t document = token / 100 - 1;
        EXPECT_GE(document, int64_t(ranges[i].first)) << "split " << i;
        EXPECT_LT(document, int64_t(ranges[i].second)) << "split " << i;
      }
    }
  }
}

} // namespace
