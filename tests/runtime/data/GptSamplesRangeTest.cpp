//===- GptSamplesRangeTest.cpp - GPT samples over a range of documents ----===//
//
// A range's samples are defined as those of a dataset that holds only the
// range's documents, so they are checked against exactly that: a second
// dataset written with those documents. The whole range given explicitly
// must be today's samples bit for bit (GptSamplesTest pins those by hand and
// against an independent implementation); here it is compared with the
// default and pinned by hand once more, and a range's sequential samples are
// pinned by hand from the token values (document d, position k -> 100 (d +
// 1) + k).
//
//===----------------------------------------------------------------------===//

#include "tests/runtime/data/DataTestUtil.h"

#include "runtime/data/GptSamples.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

using namespace braid::data;
using namespace braid::data::testing;

namespace {

/// The irregular dataset of GptSamplesTest: an empty document (2), a
/// one-token one (1), document 5 stored as two sequences (4 + 8 tokens).
std::vector<Document> irregularDocuments() {
  const std::vector<int64_t> lengths = {5, 1, 0, 7, 3, 12, 2}; // T = 30
  std::vector<Document> documents;
  for (size_t d = 0; d < lengths.size(); ++d) {
    Document document = countingDocument(100 * (int64_t(d) + 1), lengths[d]);
    if (d == 5) {
      const std::vector<int64_t> all = document[0];
      document = {{all.begin(), all.begin() + 4}, {all.begin() + 4, all.end()}};
    }
    documents.push_back(document);
  }
  return documents;
}

GptSampleOptions inRange(GptSampleOptions o, uint64_t first,
                         std::optional<uint64_t> count) {
  o.firstDocument = first;
  o.numDocuments = count;
  return o;
}

std::vector<int32_t> sample(const GptSamples &samples, uint64_t k) {
  std::vector<int32_t> out;
  absl::Status s = samples.GetSample(k, &out);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

/// Every observable of `a` and `b` is the same, DocumentOrder up to adding
/// `documentShift` to b's ids.
void expectSameSamples(const GptSamples &a, const GptSamples &b,
                       uint32_t documentShift, const std::string &what) {
  ASSERT_EQ(a.numSamples(), b.numSamples()) << what;
  EXPECT_EQ(a.tokensPerEpoch(), b.tokensPerEpoch()) << what;
  EXPECT_EQ(a.numEpochs(), b.numEpochs()) << what;
  EXPECT_EQ(a.numDocuments(), b.numDocuments()) << what;
  for (uint64_t k = 0; k < a.numSamples(); ++k) {
    EXPECT_EQ(*a.WindowOf(k), *b.WindowOf(k)) << what << " sample " << k;
    EXPECT_EQ(sample(a, k), sample(b, k)) << what << " sample " << k;
  }
  for (uint64_t e = 0; e <= a.numEpochs(); ++e) {
    std::vector<uint32_t> shifted = b.DocumentOrder(e);
    for (uint32_t &d : shifted)
      d += documentShift;
    EXPECT_EQ(a.DocumentOrder(e), shifted) << what << " epoch " << e;
  }
}

class GptSamplesRangeTest : public DataTest {};

TEST_F(GptSamplesRangeTest, WholeRangeGivenExplicitlyIsTheDefault) {
  IndexedDataset ds = makeDataset("whole", irregularDocuments());
  for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kShuffled})
    for (int64_t L : {1, 3, 4, 7, 29})
      for (uint64_t seed : {uint64_t(0), uint64_t(99)}) {
        const GptSampleOptions base = options(L, 150 / L + 5, order, seed);
        absl::StatusOr<GptSamples> plain = GptSamples::Create(&ds, base);
        absl::StatusOr<GptSamples> whole =
            GptSamples::Create(&ds, inRange(base, 0, 7));
        ASSERT_TRUE(plain.ok() && whole.ok());
        EXPECT_EQ(whole->firstDocument(), 0u);
        EXPECT_EQ(whole->numDocuments(), 7u);
        EXPECT_EQ(whole->tokensPerEpoch(), 30u);
        expectSameSamples(*whole, *plain, 0,
                          "L " + std::to_string(L) + " seed " +
                              std::to_string(seed));
      }
  // The samples GptSamplesTest pins by hand, through the explicit range.
  absl::StatusOr<GptSamples> whole = GptSamples::Create(
      &ds, inRange(options(4, 30, SampleOrder::kSequential), 0, 7));
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(sample(*whole, 1), (std::vector<int32_t>{104, 200, 400, 401, 402}));
  EXPECT_EQ(sample(*whole, 5), (std::vector<int32_t>{604, 605, 606, 607, 608}));
  EXPECT_EQ(sample(*whole, 7), (std::vector<int32_t>{700, 701, 100, 101, 102}));
}

TEST_F(GptSamplesRangeTest, RangeSamplesByHand) {
  IndexedDataset ds = makeDataset("hand", irregularDocuments());
  // Documents 3, 4, 5: 400..406, 500..502, 600..611 (5 in two sequences);
  // T = 22, so the stream of epoch 0 is positions 0..21.
  absl::StatusOr<GptSamples> mid = GptSamples::Create(
      &ds, inRange(options(4, 8, SampleOrder::kSequential), 3, 3));
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_EQ(mid->tokensPerEpoch(), 22u);
  EXPECT_EQ(mid->DocumentOrder(0), (std::vector<uint32_t>{3, 4, 5}));
  EXPECT_EQ(sample(*mid, 0), (std::vector<int32_t>{400, 401, 402, 403, 404}));
  EXPECT_EQ(sample(*mid, 1), (std::vector<int32_t>{404, 405, 406, 500, 501}));
  EXPECT_EQ(sample(*mid, 2), (std::vector<int32_t>{501, 502, 600, 601, 602}));
  // Across the two sequences of document 5.
  EXPECT_EQ(sample(*mid, 3), (std::vector<int32_t>{602, 603, 604, 605, 606}));
  // Into epoch 1, which starts again at document 3, not at document 0.
  EXPECT_EQ(sample(*mid, 5), (std::vector<int32_t>{610, 611, 400, 401, 402}));

  // Documents 1 (one token), 2 (empty) and 3 to the end of the dataset
  // (numDocuments unset): 200, 400..406, 500..502, 600..611, 700, 701.
  absl::StatusOr<GptSamples> tail = GptSamples::Create(
      &ds, inRange(options(2, 20, SampleOrder::kSequential), 1, std::nullopt));
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_EQ(tail->numDocuments(), 6u);
  EXPECT_EQ(tail->tokensPerEpoch(), 25u);
  EXPECT_EQ(sample(*tail, 0), (std::vector<int32_t>{200, 400, 401}));
  EXPECT_EQ(sample(*tail, 12), (std::vector<int32_t>{701, 200, 400}));
  EXPECT_EQ(tail->DocumentOrder(3), (std::vector<uint32_t>{1, 2, 3, 4, 5, 6}));
}

TEST_F(GptSamplesRangeTest, RangeIsTheDatasetOfItsDocuments) {
  const std::vector<Document> documents = irregularDocuments();
  IndexedDataset ds = makeDataset("all", documents);
  for (auto [first, count] :
       {std::pair<uint64_t, uint64_t>{3, 3}, {0, 4}, {1, 6}, {5, 2}, {5, 1}}) {
    const std::vector<Document> part(documents.begin() + first,
                                     documents.begin() + first + count);
    IndexedDataset alone = makeDataset(
        "part" + std::to_string(first) + "_" + std::to_string(count), part);
    for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kShuffled})
      for (int64_t L : {1, 2, 5}) {
        const GptSampleOptions base = options(L, 90 / L + 3, order, 7);
        absl::StatusOr<GptSamples> ranged =
            GptSamples::Create(&ds, inRange(base, first, count));
        absl::StatusOr<GptSamples> expected = GptSamples::Create(&alone, base);
        ASSERT_TRUE(ranged.ok()) << ranged.status();
        ASSERT_TRUE(expected.ok()) << expected.status();
        EXPECT_EQ(ranged->firstDocument(), first);
        expectSameSamples(*ranged, *expected, static_cast<uint32_t>(first),
                          "range [" + std::to_string(first) + ", +" +
                              std::to_string(count) + ") L " +
                              std::to_string(L));
      }
  }
}

TEST_F(GptSamplesRangeTest, ShuffledRangeOrdersItsOwnDocuments) {
  IndexedDataset ds = makeDataset("own", irregularDocuments());
  absl::StatusOr<GptSamples> samples = GptSamples::Create(
      &ds, inRange(options(3, 40, SampleOrder::kShuffled, 5), 2, 4));
  ASSERT_TRUE(samples.ok());
  for (uint64_t e = 0; e < 6; ++e) {
    std::vector<uint32_t> order = samples->DocumentOrder(e);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, (std::vector<uint32_t>{2, 3, 4, 5})) << e;
  }
  // Every token read belongs to documents 3..5 (2 is empty): 400..611.
  for (uint64_t k = 0; k < 40; ++k)
    for (int32_t token : sample(*samples, k))
      EXPECT_TRUE(token >= 400 && token <= 611) << token;
}

TEST_F(GptSamplesRangeTest, BadRangesAreRefusedNamingThem) {
  IndexedDataset ds = makeDataset("bad", irregularDocuments());
  const std::string prefix = path("bad");
  const GptSampleOptions base = options(4, 10, SampleOrder::kShuffled);
  auto status = [&](uint64_t first, std::optional<uint64_t> count,
                    int64_t L = 4) {
    GptSampleOptions o = inRange(base, first, count);
    o.seqLength = L;
    absl::Status s = GptSamples::Create(&ds, o).status();
    EXPECT_NE(s.message().find(prefix), std::string::npos) << s;
    return s;
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  expectError(status(2, 0), kInvalid, "the document range [2, 2) is empty");
  expectError(status(7, std::nullopt), kInvalid,
              "the document range [7, 7) is empty");
  expectError(status(8, std::nullopt), kInvalid,
              "starts at document 8, past the dataset's 7 documents");
  expectError(status(5, 3), kInvalid,
              "documents [5, 8) reach past the dataset's 7 documents");
  expectError(status(9, 1), kInvalid,
              "documents [9, 10) reach past the dataset's 7 documents");
  // first + count does not wrap around 2^64.
  expectError(status(1, ~uint64_t(0)), kInvalid,
              "documents [1, 18446744073709551616) reach past");
  // Documents 1 and 2 hold one token; 5 + 2 hold 14.
  expectError(status(1, 2), kInvalid,
              "documents [1, 3) hold 1 tokens, fewer than the seq_length + 1 "
              "= 5 tokens of one sample");
  expectError(status(5, 2, 14), kInvalid, "documents [5, 7) hold 14 tokens");
  EXPECT_TRUE(GptSamples::Create(
                  &ds, inRange(options(13, 1, SampleOrder::kShuffled), 5, 2))
                  .ok());
  // The whole dataset, explicit or not, is still "the dataset".
  expectError(status(0, 7, 30), kInvalid,
              "the dataset has 30 tokens, fewer than the seq_length + 1 = 31");

  IndexedDataset empty = makeDataset("empty", {});
  expectError(GptSamples::Create(&empty, inRange(base, 0, 0)).status(),
              kInvalid, "the document range [0, 0) is empty");
  expectError(GptSamples::Create(&empty, base).status(), kInvalid,
              "has 0 tokens");
}

} // namespace
