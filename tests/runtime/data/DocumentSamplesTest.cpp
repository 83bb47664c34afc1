//===- DocumentSamplesTest.cpp - One document per sample, loss masks ------===//
//
// GptSamples' kDocuments layout (a conversation per sample, truncated or
// padded) and the loss mask read beside the tokens in both layouts. The
// expected samples are written from the layout's definition: document k mod
// D of epoch k / D's order, its first L + 1 tokens, then padding. The masks
// are a function of each token's value (its parity), so every mask value
// read can be checked against the token read beside it.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/BlendedSamples.h"
#include "runtime/data/GptSamples.h"

#include "DataTestUtil.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <set>

namespace braid::data {
namespace {

using testing::countingDocument;
using testing::DataTest;
using testing::Document;
using testing::expectError;
using testing::options;

/// Documents of 3, 9, 1, 6 and 12 tokens; each token's value is unique
/// (document d counts from 100 d), the last document is stored as two
/// sequences.
std::vector<Document> documents() {
  std::vector<Document> docs;
  const int64_t lengths[] = {3, 9, 1, 6};
  for (int64_t d = 0; d < 4; ++d)
    docs.push_back(countingDocument(100 * d, lengths[d]));
  Document last = countingDocument(400, 12);
  docs.push_back({std::vector<int64_t>(last[0].begin(), last[0].begin() + 5),
                  std::vector<int64_t>(last[0].begin() + 5, last[0].end())});
  return docs;
}

/// The mask of `docs`: 1 on the odd tokens, 0 on the even ones, in the same
/// sequences.
std::vector<Document> parityMasks(const std::vector<Document> &docs) {
  std::vector<Document> masks = docs;
  for (Document &doc : masks)
    for (std::vector<int64_t> &sequence : doc)
      for (int64_t &v : sequence)
        v = v % 2;
  return masks;
}

/// Document d's tokens, concatenated.
std::vector<int32_t> tokensOf(const Document &doc) {
  std::vector<int32_t> out;
  for (const std::vector<int64_t> &sequence : doc)
    out.insert(out.end(), sequence.begin(), sequence.end());
  return out;
}

class DocumentSamplesTest : public DataTest {};

TEST_F(DocumentSamplesTest, SequentialSamplesAreDocumentsTruncatedOrPadded) {
  const std::vector<Document> docs = documents();
  IndexedDataset ds = makeDataset("docs", docs);
  for (int64_t L : {1, 4, 8, 11, 20}) {
    GptSampleOptions o = options(L, 13, SampleOrder::kSequential);
    o.layout = SampleLayout::kDocuments;
    absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
    ASSERT_TRUE(samples.ok()) << samples.status();
    EXPECT_EQ(samples->samplesPerEpoch(), 5u);
    // Of 3, 9, 1, 6 and 12 tokens, those longer than L + 1.
    EXPECT_EQ(samples->truncatedDocuments(),
              uint64_t((3 > L + 1) + (9 > L + 1) + (6 > L + 1) + (12 > L + 1)));
    EXPECT_EQ(samples->numEpochs(), 3u); // 13 samples of 5 documents
    for (uint64_t k = 0; k < 13; ++k) {
      std::vector<int32_t> want = tokensOf(docs[k % 5]);
      const size_t real = std::min<size_t>(want.size(), size_t(L + 1));
      want.resize(real);
      want.resize(size_t(L + 1), kPaddingToken);
      std::vector<int32_t> got;
      std::vector<uint8_t> mask;
      ASSERT_TRUE(samples->GetSample(k, &got, &mask).ok());
      EXPECT_EQ(got, want) << "L " << L << " sample " << k;
      // Without a mask dataset: 1 on the document's tokens, 0 on padding.
      std::vector<uint8_t> wantMask(size_t(L + 1), 0);
      std::fill_n(wantMask.begin(), real, 1);
      EXPECT_EQ(mask, wantMask) << "L " << L << " sample " << k;
    }
    EXPECT_EQ(samples->WindowOf(0).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

TEST_F(DocumentSamplesTest, ShuffledEpochsVisitEveryDocumentOnce) {
  const std::vector<Document> docs = documents();
  IndexedDataset ds = makeDataset("docs", docs);
  GptSampleOptions o = options(16, 5 * 6, SampleOrder::kShuffled, 77);
  o.layout = SampleLayout::kDocuments;
  absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
  ASSERT_TRUE(samples.ok()) << samples.status();
  std::set<std::vector<uint32_t>> orders;
  for (uint64_t e = 0; e < 6; ++e) {
    std::vector<uint32_t> order = samples->DocumentOrder(e);
    orders.insert(order);
    std::set<uint32_t> seen;
    for (uint64_t p = 0; p < 5; ++p) {
      std::vector<int32_t> got;
      ASSERT_TRUE(samples->GetSample(e * 5 + p, &got).ok());
      // The sample is the document the epoch's order puts at p (every
      // document fits 17 tokens).
      std::vector<int32_t> want = tokensOf(docs[order[p]]);
      want.resize(17, kPaddingToken);
      EXPECT_EQ(got, want) << "epoch " << e << " position " << p;
      seen.insert(order[p]);
    }
    EXPECT_EQ(seen.size(), 5u);
  }
  // Six epochs of five documents do not all share one order.
  EXPECT_GT(orders.size(), 1u);
}

TEST_F(DocumentSamplesTest, MaskIsReadBesideTheTokensInBothLayouts) {
  const std::vector<Document> docs = documents();
  IndexedDataset ds = makeDataset("docs", docs);
  IndexedDataset masks = makeDataset("docs_mask", parityMasks(docs),
                                     DType::kUInt8);
  for (SampleLayout layout : {SampleLayout::kWindows, SampleLayout::kDocuments})
    for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kShuffled})
      for (int64_t L : {2, 5, 7}) {
        GptSampleOptions o = options(L, 20, order, 5);
        o.layout = layout;
        o.lossMask = &masks;
        absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
        ASSERT_TRUE(samples.ok()) << samples.status();
        for (uint64_t k = 0; k < 20; ++k) {
          std::vector<int32_t> got;
          std::vector<uint8_t> mask;
          ASSERT_TRUE(samples->GetSample(k, &got, &mask).ok());
          std::vector<int32_t> plain;
          ASSERT_TRUE(samples->GetSample(k, &plain).ok());
          EXPECT_EQ(plain, got);
          ASSERT_EQ(mask.size(), got.size());
          // Padding follows the tokens of a document sample: count them.
          size_t real = got.size();
          if (layout == SampleLayout::kDocuments) {
            const uint32_t doc =
                samples->DocumentOrder(k / 5)[k % 5];
            real = std::min(real, tokensOf(docs[doc]).size());
          }
          for (size_t i = 0; i < got.size(); ++i)
            EXPECT_EQ(int(mask[i]), i < real ? got[i] % 2 : 0)
                << "sample " << k << " token " << i;
        }
      }
}

TEST_F(DocumentSamplesTest, BlendPassesEachSourcesMask) {
  const std::vector<Document> docs = documents();
  IndexedDataset a = makeDataset("a", docs);
  IndexedDataset b = makeDataset("b", docs);
  IndexedDataset aMask = makeDataset("a_mask", parityMasks(docs), DType::kUInt8);
  // b's mask: every token counts.
  std::vector<Document> ones = docs;
  for (Document &doc : ones)
    for (std::vector<int64_t> &sequence : doc)
      std::fill(sequence.begin(), sequence.end(), 1);
  IndexedDataset bMask = makeDataset("b_mask", ones, DType::kUInt8);
  GptSampleOptions base = options(6, 40, SampleOrder::kShuffled, 3);
  base.layout = SampleLayout::kDocuments;
  absl::StatusOr<BlendedSamples> blend = BlendedSamples::Create(
      {{&a, 1, 0, std::nullopt, &aMask}, {&b, 1, 0, std::nullopt, &bMask}},
      base);
  ASSERT_TRUE(blend.ok()) << blend.status();
  for (uint64_t k = 0; k < 40; ++k) {
    std::vector<int32_t> got;
    std::vector<uint8_t> mask;
    ASSERT_TRUE(blend->GetSample(k, &got, &mask).ok());
    auto [source, index] = blend->SourceOf(k);
    const GptSamples &s = blend->source(source);
    const uint32_t doc = s.DocumentOrder(index / 5)[index % 5];
    const size_t real = std::min<size_t>(7, tokensOf(docs[doc]).size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(int(mask[i]), i >= real ? 0 : source == 0 ? got[i] % 2 : 1)
          << "sample " << k << " token " << i;
  }
  // A mask in the blend's own options is refused: masks are per source.
  GptSampleOptions withMask = base;
  withMask.lossMask = &aMask;
  expectError(BlendedSamples::Create({{&a, 1}}, withMask).status(),
              absl::StatusCode::kInvalidArgument, "loss masks are its sources'");
}

TEST_F(DocumentSamplesTest, BadInputsAreRefused) {
  const std::vector<Document> docs = documents();
  IndexedDataset ds = makeDataset("docs", docs);
  // A mask of another dataset: fewer documents.
  IndexedDataset shortMask = makeDataset(
      "short_mask", {docs[0], docs[1]}, DType::kUInt8);
  GptSampleOptions o = options(4, 3, SampleOrder::kSequential);
  o.layout = SampleLayout::kDocuments;
  o.lossMask = &shortMask;
  expectError(GptSamples::Create(&ds, o).status(),
              absl::StatusCode::kInvalidArgument,
              "holds 2 documents of uint8, expected 5");
  // An empty document range has no samples to give.
  o.lossMask = nullptr;
  o.firstDocument = 2;
  o.numDocuments = 0;
  expectError(GptSamples::Create(&ds, o).status(),
              absl::StatusCode::kInvalidArgument, "is empty");
  // Past the run's samples.
  o.firstDocument = 0;
  o.numDocuments.reset();
  absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
  ASSERT_TRUE(samples.ok());
  std::vector<int32_t> out;
  expectError(samples->GetSample(3, &out), absl::StatusCode::kOutOfRange,
              "sample 3 does not exist");
}

} // namespace
} // namespace braid::data
