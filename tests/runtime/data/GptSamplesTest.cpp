//===- GptSamplesTest.cpp - GPT-style samples over an indexed dataset -----===//
//
// Token values encode their place (document d, position k -> 100 (d + 1) +
// k), so the expected samples are computed here directly from the document
// lists: sample k is a window of the stream of documents in epoch order, and
// every such window can be checked token by token. The shuffled order is
// pinned by values computed with an independent Python implementation of the
// SplitMix64 / Fisher-Yates definition in GptSamples.h, so a change of the
// generator, of the seeding or of the shuffle shows up here.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/GptSamples.h"

#include "tests/runtime/data/DataTestUtil.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

using namespace braid::data;
using braid::data::testing::options;

namespace {

/// Document lengths of the irregular dataset: an empty document, a
/// one-token one, and document 5 stored as two sequences (4 + 8).
const std::vector<int64_t> kLengths = {5, 1, 0, 7, 3, 12, 2}; // T = 30

int64_t tokenOf(size_t document, size_t position) {
  return 100 * static_cast<int64_t>(document + 1) +
         static_cast<int64_t>(position);
}

class GptSamplesTest : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-samples-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Writes documents of `lengths` (document 5, when long enough, split in
  /// two sequences) and opens them.
  IndexedDataset makeDataset(const std::string &name,
                             const std::vector<int64_t> &lengths,
                             DType dtype = DType::kUInt16) {
    const std::string prefix = dir_ + "/" + name;
    absl::StatusOr<IndexedDatasetWriter> writer =
        IndexedDatasetWriter::Create(prefix, dtype);
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (size_t d = 0; d < lengths.size(); ++d) {
      std::vector<int64_t> tokens(lengths[d]);
      for (size_t k = 0; k < tokens.size(); ++k)
        tokens[k] = tokenOf(d, k);
      if (d == 5 && tokens.size() > 4) {
        std::vector<int64_t> head(tokens.begin(), tokens.begin() + 4);
        std::vector<int64_t> tail(tokens.begin() + 4, tokens.end());
        EXPECT_TRUE(writer->AddSequence(head).ok());
        EXPECT_TRUE(writer->AddSequence(tail).ok());
      } else {
        EXPECT_TRUE(writer->AddSequence(tokens).ok());
      }
      EXPECT_TRUE(writer->EndDocument().ok());
    }
    EXPECT_TRUE(writer->Finish().ok());
    absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(prefix);
    EXPECT_TRUE(ds.ok()) << ds.status();
    return std::move(*ds);
  }

  std::string dir_;
};

/// The token stream of `epochs` epochs, epoch e listing the documents in
/// orders[e].
std::vector<int64_t>
streamOf(const std::vector<int64_t> &lengths,
         const std::vector<std::vector<uint32_t>> &orders) {
  std::vector<int64_t> stream;
  for (const std::vector<uint32_t> &order : orders)
    for (uint32_t d : order)
      for (int64_t k = 0; k < lengths[d]; ++k)
        stream.push_back(tokenOf(d, k));
  return stream;
}

std::vector<int64_t> fileOrderStream(const std::vector<int64_t> &lengths,
                                     size_t epochs) {
  std::vector<uint32_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0u);
  return streamOf(lengths, std::vector<std::vector<uint32_t>>(epochs, order));
}

std::vector<int32_t> window(const std::vector<int64_t> &stream, uint64_t w,
                            uint64_t L) {
  EXPECT_LE(w * L + L + 1, stream.size());
  return std::vector<int32_t>(stream.begin() + w * L,
                              stream.begin() + w * L + L + 1);
}

std::vector<int32_t> sample(const GptSamples &samples, uint64_t k) {
  std::vector<int32_t> out;
  absl::Status s = samples.GetSample(k, &out);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

//===----------------------------------------------------------------------===//
// Sequential order
//===----------------------------------------------------------------------===//

TEST_F(GptSamplesTest, SequentialSamplesAreStreamWindows) {
  IndexedDataset ds = makeDataset("seq", kLengths);
  ASSERT_EQ(ds.numTokens(), 30u);
  const std::vector<int64_t> stream = fileOrderStream(kLengths, 40);
  // Seq lengths that divide T, that do not, 1, and the largest allowed.
  for (int64_t L : {1, 2, 3, 4, 7, 16, 29}) {
    const uint64_t numSamples = 100 / L + 3; // a few epochs
    absl::StatusOr<GptSamples> samples = GptSamples::Create(
        &ds, options(L, numSamples, SampleOrder::kSequential));
    ASSERT_TRUE(samples.ok()) << samples.status();
    EXPECT_EQ(samples->tokensPerEpoch(), 30u);
    EXPECT_EQ(samples->numEpochs(), (numSamples * L) / 30 + 1) << L;
    for (uint64_t k = 0; k < numSamples; ++k) {
      std::vector<int32_t> got = sample(*samples, k);
      ASSERT_EQ(got.size(), static_cast<size_t>(L + 1));
      EXPECT_EQ(got, window(stream, k, L)) << "L " << L << " sample " << k;
      EXPECT_EQ(*samples->WindowOf(k), k);
    }
  }
}

TEST_F(GptSamplesTest, SequentialSamplesByHand) {
  IndexedDataset ds = makeDataset("hand", kLengths);
  absl::StatusOr<GptSamples> samples =
      GptSamples::Create(&ds, options(4, 30, SampleOrder::kSequential));
  ASSERT_TRUE(samples.ok()) << samples.status();
  // Inside document 0.
  EXPECT_EQ(sample(*samples, 0),
            (std::vector<int32_t>{100, 101, 102, 103, 104}));
  // Across documents 0, 1, the empty 2, and 3.
  EXPECT_EQ(sample(*samples, 1),
            (std::vector<int32_t>{104, 200, 400, 401, 402}));
  // Across documents 3, 4 and 5.
  EXPECT_EQ(sample(*samples, 3),
            (std::vector<int32_t>{406, 500, 501, 502, 600}));
  // Across the two sequences (4 + 8 tokens) of document 5.
  EXPECT_EQ(sample(*samples, 4),
            (std::vector<int32_t>{600, 601, 602, 603, 604}));
  EXPECT_EQ(sample(*samples, 5),
            (std::vector<int32_t>{604, 605, 606, 607, 608}));
  // Across the end of epoch 0 into epoch 1.
  EXPECT_EQ(sample(*samples, 7),
            (std::vector<int32_t>{700, 701, 100, 101, 102}));
  // Epoch 1 continues where the windows left off (token 32 of the stream).
  EXPECT_EQ(sample(*samples, 8),
            (std::vector<int32_t>{102, 103, 104, 200, 400}));
}

TEST_F(GptSamplesTest, ConsecutiveSamplesShareTheBoundaryToken) {
  IndexedDataset ds = makeDataset("share", kLengths);
  for (int64_t L : {1, 4, 13}) {
    absl::StatusOr<GptSamples> samples =
        GptSamples::Create(&ds, options(L, 50, SampleOrder::kSequential));
    ASSERT_TRUE(samples.ok());
    for (uint64_t k = 0; k + 1 < 50; ++k)
      EXPECT_EQ(sample(*samples, k).back(), sample(*samples, k + 1).front());
  }
}

TEST_F(GptSamplesTest, SmallestDatasetWrapsEveryEpoch) {
  // T = seq_length + 1: one sample fits an epoch, every next one wraps.
  const std::vector<int64_t> lengths = {3, 2};
  IndexedDataset ds = makeDataset("tiny", lengths);
  absl::StatusOr<GptSamples> samples =
      GptSamples::Create(&ds, options(4, 6, SampleOrder::kSequential));
  ASSERT_TRUE(samples.ok()) << samples.status();
  const std::vector<int64_t> stream = fileOrderStream(lengths, 7);
  for (uint64_t k = 0; k < 6; ++k)
    EXPECT_EQ(sample(*samples, k), window(stream, k, 4));
  EXPECT_EQ(sample(*samples, 1),
            (std::vector<int32_t>{201, 100, 101, 102, 200}));
}

TEST_F(GptSamplesTest, Int32StorageGivesTheSameSamples) {
  IndexedDataset ds = makeDataset("i32", kLengths, DType::kInt32);
  absl::StatusOr<GptSamples> samples =
      GptSamples::Create(&ds, options(5, 10, SampleOrder::kSequential));
  ASSERT_TRUE(samples.ok());
  const std::vector<int64_t> stream = fileOrderStream(kLengths, 3);
  for (uint64_t k = 0; k < 10; ++k)
    EXPECT_EQ(sample(*samples, k), window(stream, k, 5));
}

//===----------------------------------------------------------------------===//
// Shuffled order
//===----------------------------------------------------------------------===//

TEST(SplitMix64Test, MatchesTheReferenceOutputs) {
  // The published SplitMix64 outputs for seed 0, and for another seed from
  // an independent implementation.
  SplitMix64 zero(0);
  EXPECT_EQ(zero.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(zero.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(zero.next(), 0x06c45d188009454fULL);
  SplitMix64 other(1234567);
  EXPECT_EQ(other.next(), 0x599ed017fb08fc85ULL);
  EXPECT_EQ(other.next(), 0x2c73f08458540fa5ULL);
}

TEST(SplitMix64Test, UniformStaysInRange) {
  SplitMix64 rng(7);
  std::vector<int> counts(3);
  for (int i = 0; i < 3000; ++i) {
    uint64_t v = rng.uniform(3);
    ASSERT_LT(v, 3u);
    ++counts[v];
  }
  for (int c : counts)
    EXPECT_GT(c, 900);
  EXPECT_EQ(rng.uniform(1), 0u);
  // n close to 2^64 exercises the rejection path.
  for (int i = 0; i < 100; ++i)
    EXPECT_LT(rng.uniform(~uint64_t(0) - 5), ~uint64_t(0) - 5);
}

TEST_F(GptSamplesTest, ShuffledOrderIsPinned) {
  // Ten documents of 4 tokens: T = 40, L = 4, ten windows per epoch.
  const std::vector<int64_t> lengths(10, 4);
  IndexedDataset ds = makeDataset("pinned", lengths);
  absl::StatusOr<GptSamples> samples =
      GptSamples::Create(&ds, options(4, 20, SampleOrder::kShuffled, 1234));
  ASSERT_TRUE(samples.ok()) << samples.status();
  const std::vector<std::vector<uint32_t>> orders = {
      {4, 5, 0, 8, 3, 6, 7, 9, 1, 2}, {0, 3, 5, 7, 9, 1, 6, 2, 8, 4}};
  EXPECT_EQ(samples->DocumentOrder(0), orders[0]);
  EXPECT_EQ(samples->DocumentOrder(1), orders[1]);
  const uint64_t windows[20] = {1,  9,  0,  2,  6,  3,  8,  4,  5,  7,
                                18, 14, 15, 17, 10, 19, 11, 12, 13, 16};
  std::vector<std::vector<uint32_t>> streamOrders = orders;
  streamOrders.push_back(samples->DocumentOrder(2));
  const std::vector<int64_t> stream = streamOf(lengths, streamOrders);
  for (uint64_t k = 0; k < 20; ++k) {
    EXPECT_EQ(*samples->WindowOf(k), windows[k]) << k;
    EXPECT_EQ(sample(*samples, k), window(stream, windows[k], 4)) << k;
  }
  // Sample 0 reads window 1: document 5 of epoch 0.
  EXPECT_EQ(sample(*samples, 0),
            (std::vector<int32_t>{600, 601, 602, 603, 100}));
}

TEST_F(GptSamplesTest, ShuffledSamplesAreWindowsOfTheShuffledStream) {
  IndexedDataset ds = makeDataset("shuf", kLengths);
  for (int64_t L : {1, 3, 4, 7, 29}) {
    const uint64_t numSamples = 120 / L + 2;
    absl::StatusOr<GptSamples> samples = GptSamples::Create(
        &ds, options(L, numSamples, SampleOrder::kShuffled, 99));
    ASSERT_TRUE(samples.ok()) << samples.status();
    std::vector<std::vector<uint32_t>> orders;
    std::set<std::vector<uint32_t>> distinct;
    for (uint64_t e = 0; e <= samples->numEpochs(); ++e) {
      std::vector<uint32_t> order = samples->DocumentOrder(e);
      std::vector<uint32_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      std::vector<uint32_t> all(kLengths.size());
      std::iota(all.begin(), all.end(), 0u);
      ASSERT_EQ(sorted, all) << "epoch " << e << " is not a permutation";
      distinct.insert(order);
      orders.push_back(order);
    }
    // Each epoch is reshuffled (7! orders: a repeat among 5+ is unlikely, and
    // the generator is fixed, so this cannot flake).
    EXPECT_GT(distinct.size(), orders.size() / 2);
    const std::vector<int64_t> stream = streamOf(kLengths, orders);
    std::set<uint64_t> seen;
    for (uint64_t k = 0; k < numSamples; ++k) {
      const uint64_t w = *samples->WindowOf(k);
      // A sample comes from the epoch where window k starts.
      EXPECT_EQ(w * L / 30, k * L / 30) << "L " << L << " sample " << k;
      EXPECT_TRUE(seen.insert(w).second) << "window " << w << " twice";
      EXPECT_EQ(sample(*samples, k), window(stream, w, L))
          << "L " << L << " sample " << k;
    }
  }
}

TEST_F(GptSamplesTest, ShuffledWindowsOfAnEpochAreAPermutation) {
  IndexedDataset ds = makeDataset("perm", kLengths);
  // T = 30, L = 4: epochs hold windows [0, 8), [8, 15), [15, 23), [23, 30)
  // (the windows that start in them); 23 samples are exactly three epochs.
  absl::StatusOr<GptSamples> samples =
      GptSamples::Create(&ds, options(4, 23, SampleOrder::kShuffled, 5));
  ASSERT_TRUE(samples.ok());
  std::vector<uint64_t> windows;
  for (uint64_t k = 0; k < 23; ++k)
    windows.push_back(*samples->WindowOf(k));
  for (auto [begin, end] :
       {std::pair<uint64_t, uint64_t>{0, 8}, {8, 15}, {15, 23}}) {
    std::vector<uint64_t> block(windows.begin() + begin, windows.begin() + end);
    std::vector<uint64_t> expected(end - begin);
    std::iota(expected.begin(), expected.end(), begin);
    EXPECT_NE(block, expected) << "block " << begin << " not shuffled";
    std::sort(block.begin(), block.end());
    EXPECT_EQ(block, expected);
  }
  // Samples of consecutive windows still share their boundary token.
  std::vector<uint64_t> sampleOfWindow(23);
  for (uint64_t k = 0; k < 23; ++k)
    sampleOfWindow[windows[k]] = k;
  for (uint64_t w = 0; w + 1 < 23; ++w)
    EXPECT_EQ(sample(*samples, sampleOfWindow[w]).back(),
              sample(*samples, sampleOfWindow[w + 1]).front());
}

TEST_F(GptSamplesTest, SameSeedSameSamplesOtherSeedOtherOrder) {
  IndexedDataset ds = makeDataset("seed", kLengths);
  // A second mapping of the same files: nothing depends on the object.
  absl::StatusOr<IndexedDataset> again = IndexedDataset::Open(dir_ + "/seed");
  ASSERT_TRUE(again.ok());
  absl::StatusOr<GptSamples> a =
      GptSamples::Create(&ds, options(4, 40, SampleOrder::kShuffled, 7));
  absl::StatusOr<GptSamples> b =
      GptSamples::Create(&*again, options(4, 40, SampleOrder::kShuffled, 7));
  absl::StatusOr<GptSamples> c =
      GptSamples::Create(&ds, options(4, 40, SampleOrder::kShuffled, 8));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<uint64_t> windowsA, windowsC;
  for (uint64_t k = 0; k < 40; ++k) {
    EXPECT_EQ(sample(*a, k), sample(*b, k)) << k;
    windowsA.push_back(*a->WindowOf(k));
    windowsC.push_back(*c->WindowOf(k));
  }
  EXPECT_NE(windowsA, windowsC);
  EXPECT_NE(a->DocumentOrder(0), c->DocumentOrder(0));
}

TEST_F(GptSamplesTest, ResumingGivesTheSameSamples) {
  IndexedDataset ds = makeDataset("resume", kLengths);
  for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kShuffled}) {
    absl::StatusOr<GptSamples> run =
        GptSamples::Create(&ds, options(3, 60, order, 11));
    ASSERT_TRUE(run.ok());
    std::vector<std::vector<int32_t>> uninterrupted;
    for (uint64_t k = 0; k < 60; ++k)
      uninterrupted.push_back(sample(*run, k));

    // A fresh builder that starts at sample 37, reads backwards, then jumps.
    absl::StatusOr<GptSamples> resumed =
        GptSamples::Create(&ds, options(3, 60, order, 11));
    ASSERT_TRUE(resumed.ok());
    for (uint64_t k = 37; k < 60; ++k)
      EXPECT_EQ(sample(*resumed, k), uninterrupted[k]) << k;
    for (uint64_t k = 37; k-- > 0;)
      EXPECT_EQ(sample(*resumed, k), uninterrupted[k]) << k;

    // A longer run (more samples indexed) starts with the same samples.
    absl::StatusOr<GptSamples> longer =
        GptSamples::Create(&ds, options(3, 500, order, 11));
    ASSERT_TRUE(longer.ok());
    for (uint64_t k = 0; k < 60; ++k)
      EXPECT_EQ(sample(*longer, k), uninterrupted[k]) << k;
  }
}

//===----------------------------------------------------------------------===//
// Refused requests
//===----------------------------------------------------------------------===//

void expectError(const absl::Status &status, absl::StatusCode code,
                 const std::string &part) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(part), std::string::npos)
      << "'" << part << "' not in: " << status.message();
}

TEST_F(GptSamplesTest, BadOptionsAreRefused) {
  IndexedDataset ds = makeDataset("bad", kLengths);
  expectError(
      GptSamples::Create(&ds, options(0, 10, SampleOrder::kShuffled)).status(),
      absl::StatusCode::kInvalidArgument, "seq_length is 0, expected >= 1");
  expectError(
      GptSamples::Create(&ds, options(-4, 10, SampleOrder::kShuffled)).status(),
      absl::StatusCode::kInvalidArgument, "seq_length is -4");
  expectError(
      GptSamples::Create(&ds, options(4, 0, SampleOrder::kShuffled)).status(),
      absl::StatusCode::kInvalidArgument, "num_samples is 0, expected >= 1");
  // T = 30 tokens hold one sample of seq_length 29, none of 30.
  EXPECT_TRUE(
      GptSamples::Create(&ds, options(29, 1, SampleOrder::kShuffled)).ok());
  expectError(
      GptSamples::Create(&ds, options(30, 1, SampleOrder::kShuffled)).status(),
      absl::StatusCode::kInvalidArgument,
      "has 30 tokens, fewer than the seq_length + 1 = 31");
  expectError(GptSamples::Create(nullptr, options(4, 1, SampleOrder::kShuffled))
                  .status(),
              absl::StatusCode::kInvalidArgument, "null");
}

TEST_F(GptSamplesTest, HugeRequestsAreRefusedWithoutAllocating) {
  IndexedDataset ds = makeDataset("huge", kLengths);
  expectError(GptSamples::Create(
                  &ds, options(4, uint64_t(1) << 61, SampleOrder::kShuffled))
                  .status(),
              absl::StatusCode::kInvalidArgument, "2^62");
  expectError(GptSamples::Create(
                  &ds, options(1, uint64_t(1) << 40, SampleOrder::kSequential))
                  .status(),
              absl::StatusCode::kResourceExhausted, "2^36 bytes");
}

TEST_F(GptSamplesTest, EmptyAndFloatDatasetsAreRefused) {
  IndexedDataset empty = makeDataset("empty", {});
  expectError(GptSamples::Create(&empty, options(1, 1, SampleOrder::kShuffled))
                  .status(),
              absl::StatusCode::kInvalidArgument, "has 0 tokens");

  // A float32 dataset, written field by field (the writer takes token ids).
  const std::string prefix = dir_ + "/float";
  std::FILE *idx = std::fopen((prefix + ".idx").c_str(), "wb");
  ASSERT_NE(idx, nullptr);
  const uint64_t version = 1, S = 1, D = 2;
  const uint8_t code = 7;
  const int32_t length = 4;
  const int64_t pointer = 0, documents[2] = {0, 1};
  std::fwrite("MMIDIDX\0\0", 1, 9, idx);
  std::fwrite(&version, 8, 1, idx);
  std::fwrite(&code, 1, 1, idx);
  std::fwrite(&S, 8, 1, idx);
  std::fwrite(&D, 8, 1, idx);
  std::fwrite(&length, 4, 1, idx);
  std::fwrite(&pointer, 8, 1, idx);
  std::fwrite(documents, 8, 2, idx);
  std::fclose(idx);
  std::FILE *bin = std::fopen((prefix + ".bin").c_str(), "wb");
  const float values[4] = {1, 2, 3, 4};
  std::fwrite(values, 4, 4, bin);
  std::fclose(bin);
  absl::StatusOr<IndexedDataset> floats = IndexedDataset::Open(prefix);
  ASSERT_TRUE(floats.ok()) << floats.status();
  expectError(
      GptSamples::Create(&*floats, options(1, 1, SampleOrder::kShuffled))
          .status(),
      absl::StatusCode::kInvalidArgument, "float32");
}

TEST_F(GptSamplesTest, SampleIndexPastTheRunIsOutOfRange) {
  IndexedDataset ds = makeDataset("range", kLengths);
  for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kShuffled}) {
    absl::StatusOr<GptSamples> samples =
        GptSamples::Create(&ds, options(4, 10, order));
    ASSERT_TRUE(samples.ok());
    std::vector<int32_t> out;
    EXPECT_TRUE(samples->GetSample(9, &out).ok());
    expectError(samples->GetSample(10, &out), absl::StatusCode::kOutOfRange,
                "sample 10 does not exist, the run has 10 samples");
    EXPECT_EQ(samples->WindowOf(~uint64_t(0)).status().code(),
              absl::StatusCode::kOutOfRange);
  }
}

} // namespace
