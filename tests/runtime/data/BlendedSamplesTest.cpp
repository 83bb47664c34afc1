//===- BlendedSamplesTest.cpp - Samples blended from several datasets -----===//
//
// The source order is checked by hand against Megatron's rule (sample i
// from the largest w_d * max(i, 1) - taken_d, ties to the lowest d), the
// counts against the bounds proved in BlendedSamples.cpp at every prefix of
// a thousand random blends, and the samples against GptSamples built
// independently for each source with the documented seed.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/BlendedSamples.h"

#include "tests/runtime/data/DataTestUtil.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

using namespace braid::data;
using namespace braid::data::testing;

namespace {

std::vector<double> normalized(const std::vector<double> &weights) {
  absl::StatusOr<std::vector<double>> w = NormalizeBlendWeights(weights);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *w : std::vector<double>();
}

/// The largest deficit w_d n - c_d(n) of `source` over the first
/// `numSamples` samples.
double largestDeficit(const std::vector<double> &weights, size_t source,
                      uint64_t numSamples) {
  const std::vector<uint16_t> sources = BlendingSources(weights, numSamples);
  double largest = 0;
  uint64_t count = 0;
  for (uint64_t n = 1; n <= numSamples; ++n) {
    count += sources[n - 1] == source;
    largest = std::max(largest, weights[source] * double(n) - double(count));
  }
  return largest;
}

//===----------------------------------------------------------------------===//
// The blending rule
//===----------------------------------------------------------------------===//

TEST(BlendingSourcesTest, ThirtySeventyByHand) {
  // Normalized weights 0.3 and 0.7; e_d = w_d * max(i, 1) - taken_d:
  //  i=0: 0.3, 0.7 -> 1    i=1: 0.3, -0.3 -> 0   i=2: -0.4, 0.4 -> 1
  //  i=3: -0.1, 0.1 -> 1   i=4: 0.2, -0.2 -> 0   i=5: -0.5, 0.5 -> 1
  //  i=6: -0.2, 0.2 -> 1   i=7: 0.1, -0.1 -> 0   i=8: -0.6, 0.6 -> 1
  //  i=9: -0.3, 0.3 -> 1
  const std::vector<double> w = normalized({0.3, 0.7});
  EXPECT_EQ(w, (std::vector<double>{0.3, 0.7}));
  EXPECT_EQ(BlendingSources(w, 10),
            (std::vector<uint16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1}));
  // Weights need not be normalized by the caller: 3 and 7 are the same.
  EXPECT_EQ(BlendingSources(normalized({3, 7}), 10),
            (std::vector<uint16_t>{1, 0, 1, 1, 0, 1, 1, 0, 1, 1}));
}

TEST(BlendingSourcesTest, TiesGoToTheLowestSource) {
  // 0.5, 0.5 tie at i = 0 (0.5 each) and at every even i (0 each).
  EXPECT_EQ(BlendingSources(normalized({1, 1}), 6),
            (std::vector<uint16_t>{0, 1, 0, 1, 0, 1}));
  // One source takes every sample.
  EXPECT_EQ(BlendingSources(normalized({5}), 4),
            (std::vector<uint16_t>{0, 0, 0, 0}));
}

TEST(BlendingSourcesTest, CountsStayWithinTheProvedBounds) {
  // 1000 blends of 2 to 6 sources, weights uniform or spread over four
  // decades, every prefix of 20000 samples: c_d - w_d n <= 1 - w_d and
  // w_d n - c_d < H_{k-1} (BlendedSamples.cpp).
  SplitMix64 rng(20240531);
  const uint64_t kSamples = 20000;
  const double kSlack = 1e-9; // w_d n in double
  for (int trial = 0; trial < 1000; ++trial) {
    const size_t k = 2 + rng.uniform(5);
    std::vector<double> raw(k);
    for (double &w : raw) {
      const double u = double(rng.next() >> 11) * 0x1p-53;
      w = trial % 2 ? 1e-6 + u : std::pow(10.0, -4 * u);
    }
    const std::vector<double> w = normalized(raw);
    double harmonic = 0; // H_{k-1}
    for (size_t j = 1; j < k; ++j)
      harmonic += 1.0 / double(j);
    const std::vector<uint16_t> sources = BlendingSources(w, kSamples);
    std::vector<uint64_t> count(k, 0);
    for (uint64_t n = 1; n <= kSamples; ++n) {
      ASSERT_LT(sources[n - 1], k);
      ++count[sources[n - 1]];
      for (size_t d = 0; d < k; ++d) {
        const double ahead = double(count[d]) - w[d] * double(n);
        ASSERT_LE(ahead, 1 - w[d] + kSlack)
            << "trial " << trial << " source " << d << " n " << n;
        ASSERT_LT(-ahead, harmonic + kSlack)
            << "trial " << trial << " source " << d << " n " << n;
      }
    }
  }
}

TEST(BlendingSourcesTest, TheBehindBoundIsApproached) {
  // (1 - e, e): sample 0 from source 0 (the larger weight), sample 1 from
  // source 1 (e > -e), leaving source 0 at 2 (1 - e) - 1 = 1 - 2e behind.
  const std::vector<double> w = normalized({0.9998, 0.0002});
  EXPECT_EQ(BlendingSources(w, 2), (std::vector<uint16_t>{0, 1}));
  EXPECT_NEAR(largestDeficit(w, 0, 2), 1 - 2 * 0.0002, 1e-12);
  // Three sources can leave one more than a whole sample behind (the bound
  // is 1.5): weights 10000, 100, 1 leave source 0 1.48 behind after 152
  // samples (found with an independent simulation of Megatron's loop).
  const std::vector<double> three = normalized({10000, 100, 1});
  EXPECT_GT(largestDeficit(three, 0, 200), 1.45);
  EXPECT_LT(largestDeficit(three, 0, 200), 1.5);
}

TEST(BlendingSourcesTest, SeedsOfSources) {
  EXPECT_EQ(BlendSourceSeed(7, 0), 7u);
  EXPECT_EQ(BlendSourceSeed(7, 2), 7u + 2 * 1000003u);
  EXPECT_EQ(BlendSourceSeed(~uint64_t(0), 1), 1000002u); // wraps mod 2^64
}

//===----------------------------------------------------------------------===//
// BlendedSamples
//===----------------------------------------------------------------------===//

class BlendedSamplesTest : public DataTest {
protected:
  /// `count` documents of varied lengths, tokens base + 100 d + k.
  IndexedDataset corpus(const std::string &name, int64_t base, int count) {
    std::vector<Document> documents;
    for (int d = 0; d < count; ++d)
      documents.push_back(countingDocument(base + 100 * d, 3 + (d * 7) % 11));
    return makeDataset(name, documents);
  }
};

std::vector<int32_t> sample(const GptSamples &samples, uint64_t k) {
  std::vector<int32_t> out;
  absl::Status s = samples.GetSample(k, &out);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

std::vector<int32_t> sample(const BlendedSamples &samples, uint64_t k) {
  std::vector<int32_t> out;
  absl::Status s = samples.GetSample(k, &out);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST_F(BlendedSamplesTest, OneSourceReadsTheSamplesOfGptSamples) {
  IndexedDataset ds = corpus("one", 1000, 12);
  for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kShuffled})
    for (uint64_t seed : {uint64_t(0), uint64_t(1234)})
      for (auto [first, count] :
           {std::pair<uint64_t, std::optional<uint64_t>>{0, std::nullopt},
            {3, 5}}) {
        GptSampleOptions base = options(5, 60, order, seed);
        absl::StatusOr<BlendedSamples> blend =
            BlendedSamples::Create({{&ds, 2.5, first, count}}, base);
        ASSERT_TRUE(blend.ok()) << blend.status();
        GptSampleOptions alone = base;
        alone.firstDocument = first;
        alone.numDocuments = count;
        absl::StatusOr<GptSamples> plain = GptSamples::Create(&ds, alone);
        ASSERT_TRUE(plain.ok());
        ASSERT_EQ(blend->numSources(), 1u);
        EXPECT_EQ(blend->weight(0), 1.0);
        EXPECT_EQ(blend->source(0).numSamples(), 60u);
        for (uint64_t k = 0; k < 60; ++k) {
          EXPECT_EQ(blend->SourceOf(k), (std::pair<size_t, uint64_t>{0, k}));
          EXPECT_EQ(sample(*blend, k), sample(*plain, k)) << k;
        }
      }
}

TEST_F(BlendedSamplesTest, ThirtySeventyReadsTheSourcesByHand) {
  IndexedDataset a = corpus("a", 1000, 6); // tokens 1000 .. 1513
  IndexedDataset b = corpus("b", 5000, 6); // tokens 5000 .. 5513
  absl::StatusOr<BlendedSamples> blend = BlendedSamples::Create(
      {{&a, 0.3}, {&b, 0.7}}, options(4, 10, SampleOrder::kShuffled));
  ASSERT_TRUE(blend.ok()) << blend.status();
  const size_t sources[10] = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1};
  const uint64_t indices[10] = {0, 0, 1, 2, 1, 3, 4, 2, 5, 6};
  for (uint64_t k = 0; k < 10; ++k) {
    EXPECT_EQ(blend->SourceOf(k),
              (std::pair<size_t, uint64_t>{sources[k], indices[k]}));
    for (int32_t token : sample(*blend, k))
      EXPECT_EQ(token / 4000, sources[k] == 0 ? 0 : 1) << k;
  }
  EXPECT_EQ(blend->source(0).numSamples(), 3u);
  EXPECT_EQ(blend->source(1).numSamples(), 7u);
}

TEST_F(BlendedSamplesTest, SamplesAreEachSourcesOwnSamples) {
  IndexedDataset x = corpus("x", 1000, 20);
  IndexedDataset y = corpus("y", 5000, 9);
  // Dataset x twice: its first 12 documents and the rest, with weights in
  // no particular proportion.
  const std::vector<BlendSource> sources = {
      {&x, 2.0, 0, 12}, {&y, 1.0}, {&x, 0.5, 12, std::nullopt}};
  for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kShuffled}) {
    const GptSampleOptions base = options(6, 300, order, 42);
    absl::StatusOr<BlendedSamples> blend =
        BlendedSamples::Create(sources, base);
    ASSERT_TRUE(blend.ok()) << blend.status();
    std::vector<uint64_t> taken(3, 0);
    for (uint64_t k = 0; k < 300; ++k) {
      auto [d, index] = blend->SourceOf(k);
      ASSERT_LT(d, 3u);
      EXPECT_EQ(index, taken[d]++) << k;
    }
    for (size_t d = 0; d < 3; ++d) {
      GptSampleOptions o = base;
      o.numSamples = taken[d];
      o.seed = 42 + d * 1000003;
      o.firstDocument = sources[d].firstDocument;
      o.numDocuments = sources[d].numDocuments;
      absl::StatusOr<GptSamples> own =
          GptSamples::Create(sources[d].dataset, o);
      ASSERT_TRUE(own.ok()) << own.status();
      EXPECT_EQ(blend->source(d).numSamples(), taken[d]);
      EXPECT_EQ(blend->source(d).firstDocument(), sources[d].firstDocument);
      for (uint64_t k = 0; k < 300; ++k) {
        if (blend->SourceOf(k).first != d)
          continue;
        EXPECT_EQ(sample(*blend, k), sample(*own, blend->SourceOf(k).second))
            << "source " << d << " sample " << k;
      }
    }
    // 2 : 1 : 0.5 of 300 samples, each within the bounds of 3 sources.
    EXPECT_NEAR(double(taken[0]), 300 * 2 / 3.5, 1.5);
    EXPECT_NEAR(double(taken[1]), 300 * 1 / 3.5, 1.5);
    EXPECT_NEAR(double(taken[2]), 300 * 0.5 / 3.5, 1.5);
  }
}

TEST_F(BlendedSamplesTest, DeterministicAndResumable) {
  IndexedDataset x = corpus("dx", 1000, 10);
  IndexedDataset y = corpus("dy", 5000, 7);
  const std::vector<BlendSource> sources = {{&x, 0.25}, {&y, 0.75}};
  const GptSampleOptions base = options(3, 400, SampleOrder::kShuffled, 9);
  absl::StatusOr<BlendedSamples> run = BlendedSamples::Create(sources, base);
  absl::StatusOr<BlendedSamples> again = BlendedSamples::Create(sources, base);
  GptSampleOptions longer = base;
  longer.numSamples = 5000;
  absl::StatusOr<BlendedSamples> longRun =
      BlendedSamples::Create(sources, longer);
  ASSERT_TRUE(run.ok() && again.ok() && longRun.ok());
  // Read from sample 250 on, then backwards, as a resumed run would.
  for (uint64_t k = 250; k < 400; ++k) {
    EXPECT_EQ(again->SourceOf(k), run->SourceOf(k));
    EXPECT_EQ(sample(*again, k), sample(*run, k)) << k;
  }
  for (uint64_t k = 400; k-- > 0;) {
    EXPECT_EQ(longRun->SourceOf(k), run->SourceOf(k));
    EXPECT_EQ(sample(*longRun, k), sample(*run, k)) << k;
  }
}

TEST_F(BlendedSamplesTest, ASourceTheBlendNeverReadsIndexesOneSample) {
  IndexedDataset x = corpus("nx", 1000, 5);
  IndexedDataset y = corpus("ny", 5000, 5);
  // Sample 0 from source 0; sample 1 (t = 1 again) from the largest of
  // 1 - 1, 1e-9 and 1e-9, source 1; then source 0, whose error is near
  // i - (i - 1) = 1, until the light ones' errors grow to 1.
  absl::StatusOr<BlendedSamples> blend =
      BlendedSamples::Create({{&x, 1.0}, {&y, 1e-9}, {&y, 1e-9}},
                             options(4, 100, SampleOrder::kShuffled));
  ASSERT_TRUE(blend.ok()) << blend.status();
  for (uint64_t k = 0; k < 100; ++k)
    EXPECT_EQ(blend->SourceOf(k).first, k == 1 ? 1u : 0u) << k;
  EXPECT_EQ(blend->source(0).numSamples(), 99u);
  EXPECT_EQ(blend->source(1).numSamples(), 1u);
  EXPECT_EQ(blend->source(2).numSamples(), 1u);
}

TEST_F(BlendedSamplesTest, BadBlendsAreRefused) {
  IndexedDataset x = corpus("bx", 1000, 5);
  const std::string prefix = path("bx");
  const GptSampleOptions base = options(4, 10, SampleOrder::kShuffled);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  expectError(BlendedSamples::Create({}, base).status(), kInvalid,
              "a blend needs at least one source");
  expectError(
      BlendedSamples::Create({{&x, 1.0}, {nullptr, 1.0}}, base).status(),
      kInvalid, "blend source 1 has no dataset (null)");
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL})
    expectError(BlendedSamples::Create({{&x, 1.0}, {&x, bad}}, base).status(),
                kInvalid,
                "blend source 1 (" + prefix + ") has weight " +
                    absl::StrCat(bad) + ", expected a finite number > 0");
  expectError(BlendedSamples::Create({{&x, 1e308}, {&x, 1e308}}, base).status(),
              kInvalid, "the blend's weights sum past the largest double");
  GptSampleOptions ranged = base;
  ranged.firstDocument = 1;
  expectError(BlendedSamples::Create({{&x, 1.0}}, ranged).status(), kInvalid,
              "a blend's document ranges are its sources'");
  ranged = base;
  ranged.numDocuments = 2;
  expectError(BlendedSamples::Create({{&x, 1.0}}, ranged).status(), kInvalid,
              "document ranges are its sources'");
  GptSampleOptions none = base;
  none.numSamples = 0;
  expectError(BlendedSamples::Create({{&x, 1.0}}, none).status(), kInvalid,
              "num_samples is 0, expected >= 1");
  // A source GptSamples refuses, named with its index and dataset.
  expectError(
      BlendedSamples::Create({{&x, 1.0}, {&x, 1.0, 3, 4}}, base).status(),
      kInvalid,
      "blend source 1: " + prefix +
          ": documents [3, 7) reach past the dataset's 5 documents");
  GptSampleOptions longSequences = base;
  longSequences.seqLength = 1000;
  expectError(BlendedSamples::Create({{&x, 1.0}}, longSequences).status(),
              kInvalid, "blend source 0: " + prefix + ": the dataset has");
  std::vector<BlendSource> many(65536, BlendSource{&x, 1.0});
  expectError(BlendedSamples::Create(many, base).status(), kInvalid,
              "a blend of 65536 sources, expected at most 65535");
}

TEST_F(BlendedSamplesTest, HugeBlendsAreRefusedWithoutAllocating) {
  IndexedDataset x = corpus("hx", 1000, 5);
  GptSampleOptions huge = options(4, uint64_t(1) << 40, SampleOrder::kShuffled);
  expectError(BlendedSamples::Create({{&x, 1.0}, {&x, 2.0}}, huge).status(),
              absl::StatusCode::kResourceExhausted,
              "a blend of 1099511627776 samples needs 10 bytes of index a "
              "sample, more than 2^36");
}

TEST_F(BlendedSamplesTest, SampleIndexPastTheBlendIsOutOfRange) {
  IndexedDataset x = corpus("rx", 1000, 5);
  absl::StatusOr<BlendedSamples> blend = BlendedSamples::Create(
      {{&x, 1.0}, {&x, 1.0}}, options(4, 10, SampleOrder::kShuffled));
  ASSERT_TRUE(blend.ok());
  std::vector<int32_t> out;
  EXPECT_TRUE(blend->GetSample(9, &out).ok());
  expectError(blend->GetSample(10, &out), absl::StatusCode::kOutOfRange,
              "sample 10 does not exist, the blend has 10 samples");
}

} // namespace
