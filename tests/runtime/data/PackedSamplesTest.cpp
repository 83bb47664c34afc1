//===- PackedSamplesTest.cpp - Documents packed into samples --------------===//
//
// GptSamples' kPacked layout: the bins of best-fit decreasing, the order the
// samples read them in, and each sample's tokens, mask and positions. The
// bins expected are a reference packing written here from the layout's
// definition (a plain quadratic best-fit decreasing over the documents'
// lengths). Document d's tokens are 100 (d + 1), 100 (d + 1) + 1, ..., so
// no token is the padding token and every token read names its document
// and its offset in it: the tests read each sample back into documents.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/BlendedSamples.h"
#include "runtime/data/GptSamples.h"

#include "DataTestUtil.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace braid::data {
namespace {

using testing::countingDocument;
using testing::DataTest;
using testing::Document;
using testing::expectError;
using testing::options;

/// Bins as lists of document numbers (0 the first of the lengths given).
using Bins = std::vector<std::vector<uint32_t>>;

/// Best-fit decreasing from the definition: documents of length 0 are left
/// out; the others, counting min(length, capacity), are taken most first
/// (ties: the lowest number) and each goes into the bin with the least room
/// that still holds it (ties: the lowest bin), or else into a new last bin.
Bins referenceBins(const std::vector<int64_t> &lengths, int64_t capacity) {
  Bins bins;
  std::vector<int64_t> room;
  std::vector<bool> placed(lengths.size(), false);
  for (;;) {
    int64_t next = -1, need = 0;
    for (size_t d = 0; d < lengths.size(); ++d) {
      const int64_t counted = std::min(lengths[d], capacity);
      if (!placed[d] && counted > 0 && counted > need) {
        next = static_cast<int64_t>(d);
        need = counted;
      }
    }
    if (next < 0)
      return bins;
    placed[static_cast<size_t>(next)] = true;
    int64_t best = -1;
    for (size_t b = 0; b < bins.size(); ++b)
      if (room[b] >= need && (best < 0 || room[b] < room[size_t(best)]))
        best = static_cast<int64_t>(b);
    if (best < 0) {
      bins.emplace_back();
      room.push_back(capacity);
      best = static_cast<int64_t>(bins.size() - 1);
    }
    bins[size_t(best)].push_back(static_cast<uint32_t>(next));
    room[size_t(best)] -= need;
  }
}

/// Documents of `lengths` tokens, document d counting from 100 (d + 1);
/// those of more than 4 tokens are stored as two sequences.
std::vector<Document> documentsOf(const std::vector<int64_t> &lengths) {
  std::vector<Document> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    Document doc = countingDocument(100 * int64_t(d + 1), lengths[d]);
    if (lengths[d] > 4)
      doc = {std::vector<int64_t>(doc[0].begin(), doc[0].begin() + 3),
             std::vector<int64_t>(doc[0].begin() + 3, doc[0].end())};
    if (lengths[d] == 0)
      doc.clear(); // an empty document: no sequence at all
    docs.push_back(doc);
  }
  return docs;
}

/// The loss mask of documentsOf: 1 on the even tokens, 0 on the odd ones, so
/// a document's stored mask is 1 on its first token.
std::vector<Document> evenMasks(const std::vector<Document> &docs) {
  std::vector<Document> masks = docs;
  for (Document &doc : masks)
    for (std::vector<int64_t> &sequence : doc)
      for (int64_t &v : sequence)
        v = 1 - v % 2;
  return masks;
}

/// 40 lengths in [0, 30] from a fixed linear congruential sequence, with
/// repeats (ties) and zeros among them.
std::vector<int64_t> scatteredLengths() {
  std::vector<int64_t> lengths;
  uint32_t x = 12345;
  for (int i = 0; i < 40; ++i) {
    x = x * 1103515245u + 12345u;
    lengths.push_back(int64_t((x >> 16) % 31));
  }
  return lengths;
}

/// A sample read back: its documents in order (numbers inside the range
/// starting at `first`), each checked to be that document's first
/// min(length, L + 1) tokens, and the rest checked to be padding.
struct ReadBack {
  std::vector<uint32_t> documents;
  /// Where each document starts in the sample, and where padding starts.
  std::vector<size_t> starts;
  size_t end = 0;
};

ReadBack readBack(const std::vector<int32_t> &tokens,
                  const std::vector<int64_t> &lengths, uint64_t first,
                  int64_t L) {
  ReadBack r;
  size_t i = 0;
  while (i < tokens.size() && tokens[i] != kPaddingToken) {
    const int64_t d = tokens[i] / 100 - 1 - int64_t(first);
    EXPECT_EQ(tokens[i] % 100, 0) << "token " << i << " starts no document";
    EXPECT_TRUE(d >= 0 && d < int64_t(lengths.size())) << "token " << i;
    if (d < 0 || d >= int64_t(lengths.size()))
      return r;
    const size_t take = size_t(std::min(lengths[size_t(d)], L + 1));
    EXPECT_LE(i + take, tokens.size());
    for (size_t k = 0; k < take && i + k < tokens.size(); ++k)
      EXPECT_EQ(tokens[i + k], 100 * (d + 1 + int64_t(first)) + int64_t(k))
          << "token " << i + k;
    r.documents.push_back(uint32_t(d));
    r.starts.push_back(i);
    i += take;
  }
  r.end = i;
  for (; i < tokens.size(); ++i)
    EXPECT_EQ(tokens[i], kPaddingToken) << "token " << i;
  return r;
}

/// Tokens of a ReadBack's documents: inside each, the position counts from
/// 0 and the mask is `stored` (the mask dataset's value, or 1) except on its
/// first token, 0; then padding: positions from 0 again, mask 0.
void expectMaskAndPositions(const ReadBack &r,
                            const std::vector<int32_t> &tokens,
                            const std::vector<uint8_t> &mask,
                            const std::vector<int32_t> &positions,
                            bool maskDataset) {
  ASSERT_EQ(mask.size(), tokens.size());
  ASSERT_EQ(positions.size(), tokens.size());
  for (size_t j = 0; j < r.starts.size(); ++j) {
    const size_t end = j + 1 < r.starts.size() ? r.starts[j + 1] : r.end;
    for (size_t i = r.starts[j]; i < end; ++i) {
      EXPECT_EQ(positions[i], int32_t(i - r.starts[j])) << "token " << i;
      const int want = i == r.starts[j] ? 0
                       : maskDataset    ? 1 - tokens[i] % 2
                                        : 1;
      EXPECT_EQ(int(mask[i]), want) << "token " << i;
    }
  }
  for (size_t i = r.end; i < tokens.size(); ++i) {
    EXPECT_EQ(positions[i], int32_t(i - r.end)) << "token " << i;
    EXPECT_EQ(int(mask[i]), 0) << "token " << i;
  }
}

GptSampleOptions packed(int64_t L, uint64_t numSamples, SampleOrder order,
                        uint64_t seed = 1234) {
  GptSampleOptions o = options(L, numSamples, order, seed);
  o.layout = SampleLayout::kPacked;
  return o;
}

class PackedSamplesTest : public DataTest {};

TEST_F(PackedSamplesTest, ReferenceMatchesHandPackedBins) {
  // The reference itself against bins packed by hand. Capacity 10, counted
  // 3, 9, 1, 6, 10: 4 opens bin 0 and fills it, 1 opens bin 1 (room 1), 3
  // opens bin 2 (room 4), 0 goes to bin 2 (room 1), 2 ties bins 1 and 2
  // and goes to bin 1.
  EXPECT_EQ(referenceBins({3, 9, 1, 6, 12}, 10), (Bins{{4}, {1, 2}, {3, 0}}));
  // 7 and 8 (6 each) open bins 0 and 1 (room 4 each); 0 and 1 (4 each)
  // fill them, the lower bin first; 2 opens bin 2, 3 joins it (room 2); 4
  // opens bin 3 (room 7), 5 joins it (room 4); 6 (2) fits bin 2 exactly.
  EXPECT_EQ(referenceBins({4, 4, 4, 4, 3, 3, 2, 6, 6}, 10),
            (Bins{{7, 0}, {8, 1}, {2, 3, 6}, {4, 5}}));
}

TEST_F(PackedSamplesTest, SequentialSamplesAreTheReferenceBinsInOrder) {
  const std::vector<std::vector<int64_t>> lists = {
      {3, 9, 1, 6, 12},
      {4, 4, 4, 4, 3, 3, 2, 6, 6},
      {25, 11, 10, 30, 2, 1, 9, 10},
      {0, 5, 0, 5, 5, 0, 1},
      scatteredLengths(),
  };
  for (const std::vector<int64_t> &lengths : lists) {
    const std::vector<Document> docs = documentsOf(lengths);
    IndexedDataset ds = makeDataset("docs", docs);
    IndexedDataset masks =
        makeDataset("docs_mask", evenMasks(docs), DType::kUInt8);
    for (int64_t L : {4, 7, 9, 15})
      for (bool maskDataset : {false, true}) {
        const Bins bins = referenceBins(lengths, L + 1);
        const uint64_t B = bins.size();
        const uint64_t numSamples = 2 * B + 1;
        GptSampleOptions o = packed(L, numSamples, SampleOrder::kSequential);
        o.lossMask = maskDataset ? &masks : nullptr;
        absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
        ASSERT_TRUE(samples.ok()) << samples.status();
        ASSERT_EQ(samples->samplesPerEpoch(), B) << "L " << L;
        EXPECT_EQ(samples->numEpochs(), 3u);
        EXPECT_EQ(samples->truncatedDocuments(),
                  uint64_t(std::count_if(lengths.begin(), lengths.end(),
                                         [&](int64_t n) { return n > L + 1; })))
            << "L " << L;
        for (uint64_t b = 0; b < B; ++b)
          EXPECT_EQ(samples->BinDocuments(b), bins[b]) << "L " << L;
        EXPECT_EQ(samples->WindowOf(0).status().code(),
                  absl::StatusCode::kFailedPrecondition);
        for (uint64_t k = 0; k < numSamples; ++k) {
          std::vector<int32_t> tokens, positions;
          std::vector<uint8_t> mask;
          ASSERT_TRUE(samples->GetSample(k, &tokens, &mask, &positions).ok());
          ASSERT_EQ(tokens.size(), size_t(L + 1));
          const ReadBack r = readBack(tokens, lengths, 0, L);
          // Sample k is bin k mod B, in creation order every epoch.
          EXPECT_EQ(r.documents, bins[k % B]) << "L " << L << " sample " << k;
          expectMaskAndPositions(r, tokens, mask, positions, maskDataset);
        }
      }
  }
}

TEST_F(PackedSamplesTest, ShuffledEpochsArePermutationsOfTheBins) {
  const std::vector<int64_t> lengths = scatteredLengths();
  const std::vector<Document> docs = documentsOf(lengths);
  IndexedDataset ds = makeDataset("docs", docs);
  const int64_t L = 15;
  const Bins bins = referenceBins(lengths, L + 1);
  const uint64_t B = bins.size();
  ASSERT_GE(B, 5u);
  // Which bin a sample read, by its first document.
  std::map<uint32_t, uint32_t> binOfFirst;
  for (uint32_t b = 0; b < B; ++b)
    binOfFirst[bins[b][0]] = b;
  std::set<uint32_t> nonempty;
  for (uint32_t d = 0; d < lengths.size(); ++d)
    if (lengths[d] > 0)
      nonempty.insert(d);
  const uint64_t epochs = 4;
  std::vector<std::vector<std::vector<uint32_t>>> seedOrders;
  for (uint64_t seed : {7u, 8u}) {
    absl::StatusOr<GptSamples> samples = GptSamples::Create(
        &ds, packed(L, epochs * B, SampleOrder::kShuffled, seed));
    ASSERT_TRUE(samples.ok()) << samples.status();
    ASSERT_EQ(samples->samplesPerEpoch(), B);
    std::vector<std::vector<uint32_t>> orders;
    for (uint64_t e = 0; e < epochs; ++e) {
      std::vector<uint32_t> order;
      std::multiset<uint32_t> read;
      std::vector<uint32_t> stream;
      for (uint64_t p = 0; p < B; ++p) {
        std::vector<int32_t> tokens, positions;
        std::vector<uint8_t> mask;
        ASSERT_TRUE(
            samples->GetSample(e * B + p, &tokens, &mask, &positions).ok());
        const ReadBack r = readBack(tokens, lengths, 0, L);
        expectMaskAndPositions(r, tokens, mask, positions, false);
        ASSERT_FALSE(r.documents.empty());
        ASSERT_EQ(binOfFirst.count(r.documents[0]), 1u);
        const uint32_t bin = binOfFirst[r.documents[0]];
        // The bins are the sequential ones; only their order moves.
        EXPECT_EQ(r.documents, bins[bin]) << "epoch " << e << " sample " << p;
        order.push_back(bin);
        read.insert(r.documents.begin(), r.documents.end());
        stream.insert(stream.end(), r.documents.begin(), r.documents.end());
      }
      // Every bin once, so every nonempty document once.
      std::vector<uint32_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      std::vector<uint32_t> all(B);
      std::iota(all.begin(), all.end(), 0u);
      EXPECT_EQ(sorted, all) << "epoch " << e;
      EXPECT_EQ(read, std::multiset<uint32_t>(nonempty.begin(), nonempty.end()))
          << "epoch " << e;
      EXPECT_EQ(samples->BinOrder(e), order) << "epoch " << e;
      // DocumentOrder: the documents as read, then the empty ones.
      for (uint32_t d = 0; d < lengths.size(); ++d)
        if (lengths[d] == 0)
          stream.push_back(d);
      EXPECT_EQ(samples->DocumentOrder(e), stream) << "epoch " << e;
      orders.push_back(order);
    }
    // Consecutive epochs are ordered differently.
    for (uint64_t e = 1; e < epochs; ++e)
      EXPECT_NE(orders[e], orders[e - 1]) << "epoch " << e;
    seedOrders.push_back(orders);
  }
  // Another seed, another order.
  EXPECT_NE(seedOrders[0][0], seedOrders[1][0]);
  EXPECT_NE(seedOrders[0], seedOrders[1]);
}

TEST_F(PackedSamplesTest, BinOrderIsNotTheDocumentOrder) {
  // Every document alone in a bin of its own, bin d holding document d: a
  // bin order drawn as the document order is would repeat it.
  const std::vector<int64_t> lengths(12, 9);
  IndexedDataset ds = makeDataset("docs", documentsOf(lengths));
  GptSampleOptions o = packed(8, 36, SampleOrder::kShuffled, 21);
  absl::StatusOr<GptSamples> pack = GptSamples::Create(&ds, o);
  ASSERT_TRUE(pack.ok()) << pack.status();
  ASSERT_EQ(pack->samplesPerEpoch(), 12u);
  o.layout = SampleLayout::kDocuments;
  absl::StatusOr<GptSamples> single = GptSamples::Create(&ds, o);
  ASSERT_TRUE(single.ok()) << single.status();
  for (uint64_t e = 0; e < 3; ++e) {
    EXPECT_NE(pack->BinOrder(e), single->DocumentOrder(e)) << "epoch " << e;
    for (uint64_t p = 0; p < 12; ++p)
      EXPECT_EQ(pack->BinDocuments(pack->BinOrder(e)[p]),
                std::vector<uint32_t>{pack->BinOrder(e)[p]});
  }
}

TEST_F(PackedSamplesTest, RangeIsPackedAlone) {
  const std::vector<int64_t> lengths = scatteredLengths();
  IndexedDataset ds = makeDataset("docs", documentsOf(lengths));
  const uint64_t first = 5, count = 20;
  const std::vector<int64_t> range(lengths.begin() + first,
                                   lengths.begin() + first + count);
  const int64_t L = 11;
  const Bins bins = referenceBins(range, L + 1);
  GptSampleOptions o = packed(L, bins.size(), SampleOrder::kSequential);
  o.firstDocument = first;
  o.numDocuments = count;
  absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->samplesPerEpoch(), bins.size());
  for (uint64_t b = 0; b < bins.size(); ++b) {
    // BinDocuments names the dataset's documents.
    std::vector<uint32_t> want = bins[b];
    for (uint32_t &d : want)
      d += uint32_t(first);
    EXPECT_EQ(samples->BinDocuments(b), want) << "bin " << b;
    std::vector<int32_t> tokens;
    ASSERT_TRUE(samples->GetSample(b, &tokens).ok());
    EXPECT_EQ(readBack(tokens, range, first, L).documents, bins[b]);
  }
}

TEST_F(PackedSamplesTest, PackingStatsInEveryLayout) {
  const std::vector<std::vector<int64_t>> lists = {
      {3, 9, 1, 6, 12}, {0, 5, 0, 5, 5, 0, 1}, scatteredLengths()};
  for (const std::vector<int64_t> &lengths : lists) {
    IndexedDataset ds = makeDataset("docs", documentsOf(lengths));
    for (int64_t L : {4, 9, 15}) {
      uint64_t tokens = 0;
      for (int64_t n : lengths)
        tokens += uint64_t(std::min(n, L + 1));
      const double B = double(referenceBins(lengths, L + 1).size());
      const double D = double(lengths.size());
      for (SampleLayout layout :
           {SampleLayout::kWindows, SampleLayout::kDocuments,
            SampleLayout::kPacked}) {
        GptSampleOptions o = options(L, 3, SampleOrder::kShuffled);
        o.layout = layout;
        absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
        ASSERT_TRUE(samples.ok()) << samples.status();
        const GptSamples::PackingStats stats = samples->packingStats();
        EXPECT_EQ(stats.documents, lengths.size());
        EXPECT_EQ(stats.tokens, tokens) << "L " << L;
        EXPECT_EQ(double(stats.packedSamples), B) << "L " << L;
        EXPECT_DOUBLE_EQ(stats.packedPadding,
                         1.0 - double(tokens) / (B * double(L + 1)));
        EXPECT_DOUBLE_EQ(stats.paddedPadding,
                         1.0 - double(tokens) / (D * double(L + 1)));
      }
    }
  }
}

TEST_F(PackedSamplesTest, OtherLayoutsGivePositionsOfOneSequence) {
  const std::vector<int64_t> lengths = {3, 9, 1, 6, 12};
  IndexedDataset ds = makeDataset("docs", documentsOf(lengths));
  for (SampleLayout layout :
       {SampleLayout::kWindows, SampleLayout::kDocuments}) {
    GptSampleOptions o = options(7, 6, SampleOrder::kShuffled);
    o.layout = layout;
    absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
    ASSERT_TRUE(samples.ok()) << samples.status();
    for (uint64_t k = 0; k < 6; ++k) {
      std::vector<int32_t> tokens, positions, plain;
      std::vector<uint8_t> mask, plainMask;
      ASSERT_TRUE(samples->GetSample(k, &tokens, &mask, &positions).ok());
      ASSERT_TRUE(samples->GetSample(k, &plain, &plainMask).ok());
      EXPECT_EQ(tokens, plain);
      EXPECT_EQ(mask, plainMask);
      EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    }
  }
}

TEST_F(PackedSamplesTest, BlendGivesTheSourcesSamples) {
  const std::vector<int64_t> lengths = scatteredLengths();
  const std::vector<Document> docs = documentsOf(lengths);
  IndexedDataset a = makeDataset("a", docs);
  IndexedDataset b = makeDataset("b", docs);
  IndexedDataset aMask = makeDataset("a_mask", evenMasks(docs), DType::kUInt8);
  GptSampleOptions base = packed(13, 60, SampleOrder::kShuffled, 3);
  absl::StatusOr<BlendedSamples> blend = BlendedSamples::Create(
      {{&a, 2, 0, std::nullopt, &aMask}, {&b, 1, 4, 30, nullptr}}, base);
  ASSERT_TRUE(blend.ok()) << blend.status();
  for (size_t d = 0; d < 2; ++d)
    EXPECT_EQ(blend->source(d).layout(), SampleLayout::kPacked);
  for (uint64_t k = 0; k < 60; ++k) {
    std::vector<int32_t> tokens, positions, want, wantPositions, plain;
    std::vector<uint8_t> mask, wantMask, plainMask;
    ASSERT_TRUE(blend->GetSample(k, &tokens, &mask, &positions).ok());
    auto [source, index] = blend->SourceOf(k);
    ASSERT_TRUE(blend->source(source)
                    .GetSample(index, &want, &wantMask, &wantPositions)
                    .ok());
    EXPECT_EQ(tokens, want) << "sample " << k;
    EXPECT_EQ(mask, wantMask) << "sample " << k;
    EXPECT_EQ(positions, wantPositions) << "sample " << k;
    ASSERT_TRUE(blend->GetSample(k, &plain, &plainMask).ok());
    EXPECT_EQ(plain, tokens);
    EXPECT_EQ(plainMask, mask);
    // Positions without a mask.
    ASSERT_TRUE(blend->GetSample(k, &plain, nullptr, &positions).ok());
    EXPECT_EQ(positions, wantPositions);
  }
  std::vector<int32_t> out;
  expectError(blend->GetSample(60, &out, nullptr, nullptr),
              absl::StatusCode::kOutOfRange, "sample 60 does not exist");
}

TEST_F(PackedSamplesTest, RangeWithoutTokensIsRefused) {
  IndexedDataset ds = makeDataset("docs", documentsOf({4, 0, 0, 3}));
  GptSampleOptions o = packed(4, 3, SampleOrder::kSequential);
  o.firstDocument = 1;
  o.numDocuments = 2;
  expectError(GptSamples::Create(&ds, o).status(),
              absl::StatusCode::kInvalidArgument,
              "documents [1, 3) hold no tokens to pack");
  // Past the run's samples.
  o.firstDocument = 0;
  o.numDocuments.reset();
  absl::StatusOr<GptSamples> samples = GptSamples::Create(&ds, o);
  ASSERT_TRUE(samples.ok()) << samples.status();
  std::vector<int32_t> out;
  expectError(samples->GetSample(3, &out, nullptr, nullptr),
              absl::StatusCode::kOutOfRange, "sample 3 does not exist");
}

} // namespace
} // namespace braid::data
