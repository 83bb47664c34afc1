//===- GptSamples.cpp - GPT-style samples over an indexed dataset ---------===//
//
// The indices are built up front in Create for every epoch the run touches,
// so GetSample only looks them up and reads the mapped tokens: it has no
// state to mutate and can be called from any thread in any order.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/GptSamples.h"

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <utility>

namespace braid::data {
namespace {

/// Streams drawn from one (seed, epoch): keeping them apart makes the
/// document order and the sample order independent.
enum Stream : uint64_t { kDocumentStream = 0, kSampleStream = 1 };

/// The seed of one stream: two SplitMix64 steps, so that neighbouring seeds
/// and epochs give unrelated generators.
uint64_t streamSeed(uint64_t seed, uint64_t epoch, Stream stream) {
  SplitMix64 outer(seed);
  SplitMix64 inner(outer.next() ^ (epoch * 2 + stream));
  return inner.next();
}

/// The seed of kPacked's bin order of one epoch. Not a Stream of streamSeed:
/// its key is the epoch with bit 63 set, which no epoch * 2 + stream of the
/// streams above reaches (epochs stay far below 2^62), so the bin order is
/// unrelated to the document order the same (seed, epoch) would give
/// kDocuments, even where the bins are as many as the documents.
uint64_t binSeed(uint64_t seed, uint64_t epoch) {
  SplitMix64 outer(seed);
  SplitMix64 inner(outer.next() ^ (epoch | (uint64_t(1) << 63)));
  return inner.next();
}

/// Stream positions are kept below 2^62 so that the products and sums of
/// positions, seq_length and tokens per epoch below cannot overflow 64 bits.
constexpr uint64_t kMaxStreamTokens = uint64_t(1) << 62;

/// The most memory the indices may take; a request beyond it is almost
/// certainly a mistake (num_samples far larger than intended), and failing
/// with a message beats being killed for memory on every rank at once.
constexpr uint64_t kMaxIndexBytes = uint64_t(1) << 36;

/// "[first, first + count)", computed in 128 bits so that a range asked for
/// with a count near 2^64 prints what was asked.
std::string rangeString(uint64_t first, uint64_t count) {
  std::ostringstream os;
  os << "[" << first << ", " << absl::uint128(first) + count << ")";
  return os.str();
}

/// kPacked's bins: documents of `tokens` tokens each, counting min(tokens,
/// capacity), packed by best-fit decreasing (GptSamples.h) into bins of
/// `capacity`. Sets `starts` (bins + 1 entries) and `documents` so that bin
/// b holds documents[starts[b], starts[b + 1]) in placement order. Empty
/// documents are left out.
void packDocuments(const std::vector<uint32_t> &tokens, uint64_t capacity,
                   std::vector<uint32_t> *documents,
                   std::vector<uint32_t> *starts) {
  auto counted = [&](uint32_t d) {
    return std::min<uint64_t>(tokens[d], capacity);
  };
  std::vector<uint32_t> sorted;
  for (uint32_t d = 0; d < tokens.size(); ++d)
    if (tokens[d] > 0)
      sorted.push_back(d);
  std::sort(sorted.begin(), sorted.end(), [&](uint32_t a, uint32_t b) {
    const uint64_t ca = counted(a), cb = counted(b);
    return ca != cb ? ca > cb : a < b;
  });
  // The open bins that have room left, as (room, bin): the first at or
  // after (need, 0) is the one with the least room that holds `need`, the
  // lowest numbered of those that tie. A full bin holds no further
  // (nonempty) document and leaves the set.
  std::set<std::pair<uint64_t, uint32_t>> open;
  std::vector<uint32_t> binOf(sorted.size());
  uint32_t bins = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const uint64_t need = counted(sorted[i]);
    auto fit = open.lower_bound({need, 0});
    uint64_t room;
    if (fit != open.end()) {
      room = fit->first;
      binOf[i] = fit->second;
      open.erase(fit);
    } else {
      room = capacity;
      binOf[i] = bins++;
    }
    if (room > need)
      open.insert({room - need, binOf[i]});
  }
  // Group the documents by bin, keeping placement order inside each.
  starts->assign(bins + 1, 0);
  for (uint32_t b : binOf)
    ++(*starts)[b + 1];
  std::partial_sum(starts->begin(), starts->end(), starts->begin());
  documents->resize(sorted.size());
  std::vector<uint32_t> next(starts->begin(), starts->end() - 1);
  for (size_t i = 0; i < sorted.size(); ++i)
    (*documents)[next[binOf[i]]++] = sorted[i];
}

} // namespace

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::uniform(uint64_t n) {
  // Values below 2^64 mod n would make the small residues more likely than
  // the others; drawing again removes the bias.
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t r = next();
    if (r >= threshold)
      return r % n;
  }
}

void fisherYatesShuffle(std::vector<uint32_t> &values, SplitMix64 &rng) {
  for (size_t i = values.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.uniform(i));
    std::swap(values[i - 1], values[j]);
  }
}

absl::StatusOr<GptSamples> GptSamples::Create(const IndexedDataset *dataset,
                                              const GptSampleOptions &options) {
  if (!dataset)
    return absl::InvalidArgumentError("GptSamples needs a dataset, got null");
  const std::string &prefix = dataset->prefix();
  if (options.seqLength < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("seq_length is ", options.seqLength, ", expected >= 1"));
  if (options.numSamples < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples is ", options.numSamples, ", expected >= 1"));
  if (!isIntegerDtype(dataset->dtype()))
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": the dataset holds ", dtypeName(dataset->dtype()),
        " values, expected token ids (an integer dtype)"));
  const uint64_t L = static_cast<uint64_t>(options.seqLength);

  // The document range, checked before first + count is formed so that it
  // cannot wrap.
  const uint64_t datasetDocuments = dataset->numDocuments();
  const uint64_t first = options.firstDocument;
  if (options.numDocuments &&
      (first > datasetDocuments ||
       *options.numDocuments > datasetDocuments - first))
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": documents ", rangeString(first, *options.numDocuments),
        " reach past the dataset's ", datasetDocuments, " documents"));
  if (first > datasetDocuments)
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": the document range starts at document ", first,
                     ", past the dataset's ", datasetDocuments, " documents"));
  const uint64_t numDocuments =
      options.numDocuments ? *options.numDocuments : datasetDocuments - first;
  const std::string range = rangeString(first, numDocuments);
  // An empty dataset read whole is refused below for having no tokens.
  if (numDocuments == 0 && (first != 0 || options.numDocuments))
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": the document range ", range, " is empty"));
  // DocumentOrder reports dataset ids as uint32.
  if (first + numDocuments > std::numeric_limits<uint32_t>::max())
    return absl::ResourceExhaustedError(
        absl::StrCat(prefix, ": documents ", range,
                     " end past 2^32 - 1, GptSamples numbers documents in "
                     "32 bits"));

  GptSamples samples;
  samples.dataset_ = dataset;
  samples.options_ = options;
  samples.firstDocument_ = first;
  const std::vector<int64_t> &documentIndex = dataset->documentIndex();
  samples.documentTokens_.resize(numDocuments);
  uint64_t T = 0;
  for (uint64_t d = 0; d < numDocuments; ++d) {
    uint64_t tokens = 0;
    for (int64_t s = documentIndex[first + d]; s < documentIndex[first + d + 1];
         ++s)
      tokens += static_cast<uint64_t>(dataset->sequenceLength(s));
    if (tokens > std::numeric_limits<uint32_t>::max())
      return absl::ResourceExhaustedError(absl::StrCat(
          prefix, ": document ", first + d, " has ", tokens,
          " tokens, GptSamples supports up to 2^32 - 1 per document"));
    samples.documentTokens_[d] = static_cast<uint32_t>(tokens);
    T += tokens;
  }
  if (options.lossMask &&
      (options.lossMask->numDocuments() != datasetDocuments ||
       !isIntegerDtype(options.lossMask->dtype())))
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": its loss mask ", options.lossMask->prefix(), " holds ",
        options.lossMask->numDocuments(), " documents of ",
        dtypeName(options.lossMask->dtype()), ", expected ", datasetDocuments,
        " of an integer dtype"));
  if (options.layout == SampleLayout::kDocuments) {
    // A sample per document: the order is the documents' of each epoch.
    if (numDocuments == 0)
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ": the dataset has no documents"));
    samples.tokensPerEpoch_ = T;
    const uint64_t numEpochs =
        (options.numSamples - 1) / numDocuments + 1;
    const bool shuffled = options.order == SampleOrder::kShuffled;
    if (shuffled &&
        absl::uint128(numEpochs) * numDocuments * 4 > kMaxIndexBytes)
      return absl::ResourceExhaustedError(absl::StrCat(
          prefix, ": num_samples ", options.numSamples, " of one document each",
          " spans ", numEpochs, " epochs of ", numDocuments,
          " documents, whose shuffled orders would take more than 2^36 "
          "bytes"));
    samples.numEpochs_ = numEpochs;
    if (shuffled)
      samples.buildDocumentOrders();
    return samples;
  }
  if (options.layout == SampleLayout::kPacked) {
    // A sample per bin: the order is the bins' of each epoch.
    if (numDocuments == 0 || T == 0)
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ": ",
                       first == 0 && numDocuments == datasetDocuments
                           ? "the dataset has "
                           : absl::StrCat("documents ", range, " hold "),
                       "no tokens to pack"));
    samples.tokensPerEpoch_ = T;
    packDocuments(samples.documentTokens_, L + 1, &samples.binDocuments_,
                  &samples.binStarts_);
    const uint64_t numBins = samples.binStarts_.size() - 1;
    const uint64_t numEpochs = (options.numSamples - 1) / numBins + 1;
    const bool shuffled = options.order == SampleOrder::kShuffled;
    if (shuffled && absl::uint128(numEpochs) * numBins * 4 > kMaxIndexBytes)
      return absl::ResourceExhaustedError(absl::StrCat(
          prefix, ": num_samples ", options.numSamples, " of packed documents",
          " spans ", numEpochs, " epochs of ", numBins,
          " samples, whose shuffled orders would take more than 2^36 bytes"));
    samples.numEpochs_ = numEpochs;
    if (shuffled) {
      samples.binOrders_.reserve(numEpochs * numBins);
      for (uint64_t e = 0; e < numEpochs; ++e) {
        std::vector<uint32_t> order = samples.binOrder(e);
        samples.binOrders_.insert(samples.binOrders_.end(), order.begin(),
                                  order.end());
      }
    }
    return samples;
  }
  if (T < L + 1)
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": ",
                     first == 0 && numDocuments == datasetDocuments
                         ? "the dataset has "
                         : absl::StrCat("documents ", range, " hold "),
                     T, " tokens, fewer than the seq_length + 1 = ", L + 1,
                     " tokens of one sample"));
  samples.tokensPerEpoch_ = T;

  // The windows to index: the first num_samples in sequential order; in
  // shuffled order every window of each epoch a sample can come from, since
  // sample k may read any window that starts in the epoch where window k
  // starts.
  const bool shuffled = options.order == SampleOrder::kShuffled;
  const absl::uint128 lastSampleStart =
      absl::uint128(options.numSamples - 1) * L;
  if (lastSampleStart + 2 * absl::uint128(T) + 2 * L > kMaxStreamTokens)
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples ", options.numSamples, " at seq_length ", L,
                     " needs more than 2^62 tokens of stream"));
  const uint64_t lastBlock = static_cast<uint64_t>(lastSampleStart) / T;
  const uint64_t numWindows =
      shuffled ? samples.firstWindow(lastBlock + 1) : options.numSamples;
  if (shuffled && T / L + 1 > std::numeric_limits<uint32_t>::max())
    return absl::ResourceExhaustedError(absl::StrCat(
        prefix, ": ", T, " tokens per epoch at seq_length ", L,
        " make more than 2^32 - 1 windows per epoch, too many to shuffle"));
  // The last indexed window ends at stream token (numWindows - 1) * L + L.
  const uint64_t numEpochs = (numWindows * L) / T + 1;
  const absl::uint128 indexBytes =
      absl::uint128(numWindows) * (shuffled ? 12 : 8) +
      (shuffled ? absl::uint128(numEpochs) * numDocuments * 4 : 0);
  if (indexBytes > kMaxIndexBytes)
    return absl::ResourceExhaustedError(absl::StrCat(
        prefix, ": num_samples ", options.numSamples, " at seq_length ", L,
        " spans ", numEpochs, " epochs of ", T,
        " tokens, whose sample indices would take more than 2^36 bytes"));
  samples.numEpochs_ = numEpochs;

  if (shuffled) {
    samples.buildDocumentOrders();
    samples.shuffle_.reserve(numWindows);
  }
  samples.starts_.reserve(numWindows);
  for (uint64_t e = 0; e < numEpochs; ++e) {
    const uint64_t begin = std::min(samples.firstWindow(e), numWindows);
    const uint64_t end = std::min(samples.firstWindow(e + 1), numWindows);
    // Walk the epoch's documents once; `before` counts the tokens of the
    // documents ahead of `position`. Empty documents are stepped over. The
    // walk stops inside the epoch because a window in [begin, end) starts
    // before its last token.
    uint64_t position = 0, before = 0;
    for (uint64_t w = begin; w < end; ++w) {
      const uint64_t local = w * L - e * T;
      while (before +
                 samples.documentTokens_[samples.documentAt(e, position)] <=
             local)
        before += samples.documentTokens_[samples.documentAt(e, position++)];
      samples.starts_.push_back({static_cast<uint32_t>(position),
                                 static_cast<uint32_t>(local - before)});
    }
    if (shuffled && end > begin) {
      std::vector<uint32_t> block(end - begin);
      std::iota(block.begin(), block.end(), 0u);
      SplitMix64 rng(streamSeed(options.seed, e, kSampleStream));
      fisherYatesShuffle(block, rng);
      samples.shuffle_.insert(samples.shuffle_.end(), block.begin(),
                              block.end());
    }
  }
  return samples;
}

void GptSamples::buildDocumentOrders() {
  documents_.reserve(numEpochs_ * documentTokens_.size());
  for (uint64_t e = 0; e < numEpochs_; ++e) {
    std::vector<uint32_t> order = rangeOrder(e);
    documents_.insert(documents_.end(), order.begin(), order.end());
  }
}

uint64_t GptSamples::firstWindow(uint64_t epoch) const {
  // The first window whose start w * L is at or after epoch * T.
  const uint64_t L = static_cast<uint64_t>(options_.seqLength);
  return (epoch * tokensPerEpoch_ + L - 1) / L;
}

uint32_t GptSamples::documentAt(uint64_t epoch, uint64_t position) const {
  return documents_.empty()
             ? static_cast<uint32_t>(position)
             : documents_[epoch * documentTokens_.size() + position];
}

std::vector<uint32_t> GptSamples::rangeOrder(uint64_t epoch) const {
  std::vector<uint32_t> order(documentTokens_.size());
  std::iota(order.begin(), order.end(), 0u);
  if (options_.order == SampleOrder::kShuffled) {
    SplitMix64 rng(streamSeed(options_.seed, epoch, kDocumentStream));
    fisherYatesShuffle(order, rng);
  }
  return order;
}

std::vector<uint32_t> GptSamples::binOrder(uint64_t epoch) const {
  std::vector<uint32_t> order(binStarts_.empty() ? 0 : binStarts_.size() - 1);
  std::iota(order.begin(), order.end(), 0u);
  if (options_.order == SampleOrder::kShuffled) {
    SplitMix64 rng(binSeed(options_.seed, epoch));
    fisherYatesShuffle(order, rng);
  }
  return order;
}

uint32_t GptSamples::binAt(uint64_t epoch, uint64_t position) const {
  return binOrders_.empty()
             ? static_cast<uint32_t>(position)
             : binOrders_[epoch * (binStarts_.size() - 1) + position];
}

std::vector<uint32_t> GptSamples::BinOrder(uint64_t epoch) const {
  return binOrder(epoch);
}

std::vector<uint32_t> GptSamples::BinDocuments(uint64_t bin) const {
  std::vector<uint32_t> documents;
  if (bin + 1 >= binStarts_.size())
    return documents;
  for (uint32_t p = binStarts_[bin]; p < binStarts_[bin + 1]; ++p)
    documents.push_back(binDocuments_[p] +
                        static_cast<uint32_t>(firstDocument_));
  return documents;
}

std::vector<uint32_t> GptSamples::DocumentOrder(uint64_t epoch) const {
  if (options_.layout == SampleLayout::kPacked) {
    std::vector<uint32_t> order;
    for (uint32_t bin : binOrder(epoch)) {
      std::vector<uint32_t> documents = BinDocuments(bin);
      order.insert(order.end(), documents.begin(), documents.end());
    }
    for (uint64_t d = 0; d < documentTokens_.size(); ++d)
      if (documentTokens_[d] == 0)
        order.push_back(static_cast<uint32_t>(firstDocument_ + d));
    return order;
  }
  std::vector<uint32_t> order = rangeOrder(epoch);
  // Create checked that the range ends at or below 2^32 - 1.
  for (uint32_t &document : order)
    document += static_cast<uint32_t>(firstDocument_);
  return order;
}

uint64_t GptSamples::samplesPerEpoch() const {
  if (options_.layout == SampleLayout::kDocuments)
    return documentTokens_.size();
  if (options_.layout == SampleLayout::kPacked)
    return binStarts_.size() - 1;
  return (tokensPerEpoch_ - 1) / static_cast<uint64_t>(options_.seqLength);
}

GptSamples::PackingStats GptSamples::packingStats() const {
  const uint64_t capacity = static_cast<uint64_t>(options_.seqLength) + 1;
  PackingStats stats;
  stats.documents = documentTokens_.size();
  stats.tokens = 0;
  for (uint32_t tokens : documentTokens_)
    stats.tokens += std::min<uint64_t>(tokens, capacity);
  if (options_.layout == SampleLayout::kPacked) {
    stats.packedSamples = binStarts_.size() - 1;
  } else {
    std::vector<uint32_t> documents, starts;
    packDocuments(documentTokens_, capacity, &documents, &starts);
    stats.packedSamples = starts.size() - 1;
  }
  const double tokens = static_cast<double>(stats.tokens);
  const double sample = static_cast<double>(capacity);
  // No bins: every document is empty (kDocuments), no sample to pad.
  stats.packedPadding =
      stats.packedSamples == 0
          ? 0.0
          : 1.0 - tokens / (static_cast<double>(stats.packedSamples) * sample);
  // Create refuses a range without documents.
  stats.paddedPadding =
      1.0 - tokens / (static_cast<double>(stats.documents) * sample);
  return stats;
}

uint64_t GptSamples::truncatedDocuments() const {
  if (options_.layout == SampleLayout::kWindows)
    return 0;
  const uint64_t limit = static_cast<uint64_t>(options_.seqLength) + 1;
  return static_cast<uint64_t>(
      std::count_if(documentTokens_.begin(), documentTokens_.end(),
                    [&](uint32_t tokens) { return tokens > limit; }));
}

absl::StatusOr<uint64_t> GptSamples::WindowOf(uint64_t globalIndex) const {
  if (globalIndex >= options_.numSamples)
    return absl::OutOfRangeError(absl::StrCat("sample ", globalIndex,
                                              " does not exist, the run has ",
                                              options_.numSamples, " samples"));
  if (options_.layout == SampleLayout::kDocuments)
    return absl::FailedPreconditionError(
        "samples of one document each read no window of the token stream");
  if (options_.layout == SampleLayout::kPacked)
    return absl::FailedPreconditionError(
        "samples of packed documents read no window of the token stream");
  const uint64_t L = static_cast<uint64_t>(options_.seqLength);
  const uint64_t epoch = globalIndex * L / tokensPerEpoch_;
  const uint64_t first = firstWindow(epoch);
  uint64_t local = globalIndex - first;
  if (options_.order == SampleOrder::kShuffled)
    local = shuffle_[globalIndex];
  return first + local;
}

absl::Status GptSamples::readDocument(const IndexedDataset &dataset,
                                      uint32_t document, uint64_t offset,
                                      uint64_t count, int32_t *out) const {
  const std::vector<int64_t> &documentIndex = dataset.documentIndex();
  const uint64_t id = firstDocument_ + document;
  for (int64_t s = documentIndex[id]; count > 0 && s < documentIndex[id + 1];
       ++s) {
    const uint64_t length = static_cast<uint64_t>(dataset.sequenceLength(s));
    if (offset >= length) {
      offset -= length;
      continue;
    }
    const uint64_t take = std::min(count, length - offset);
    if (absl::Status st = dataset.ReadTokens(s, offset, take, out); !st.ok())
      return st;
    out += take;
    count -= take;
    offset = 0;
  }
  if (count != 0)
    return absl::InternalError(
        absl::StrCat(dataset.prefix(), ": document ", id, " ended ", count,
                     " tokens early (index and document lengths disagree)"));
  return absl::OkStatus();
}

absl::Status GptSamples::GetSample(uint64_t globalIndex,
                                   std::vector<int32_t> *out) const {
  return GetSample(globalIndex, out, nullptr);
}

absl::Status GptSamples::GetSample(uint64_t globalIndex,
                                   std::vector<int32_t> *out,
                                   std::vector<uint8_t> *mask) const {
  return GetSample(globalIndex, out, mask, nullptr);
}

absl::Status GptSamples::GetSample(uint64_t globalIndex,
                                   std::vector<int32_t> *out,
                                   std::vector<uint8_t> *mask,
                                   std::vector<int32_t> *positions) const {
  if (globalIndex >= options_.numSamples)
    return absl::OutOfRangeError(absl::StrCat("sample ", globalIndex,
                                              " does not exist, the run has ",
                                              options_.numSamples, " samples"));
  const uint64_t L = static_cast<uint64_t>(options_.seqLength);
  if (positions &&
      L > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    return absl::InvalidArgumentError(
        absl::StrCat("seq_length ", L, " has positions past int32's range"));
  out->resize(L + 1);
  // The mask values of tokens [at, at + count) of `document` from `offset`.
  std::vector<int32_t> maskValues;
  auto readMask = [&](uint32_t document, uint64_t offset, uint64_t count,
                      uint64_t at) -> absl::Status {
    if (!mask)
      return absl::OkStatus();
    if (!options_.lossMask) {
      std::fill_n(mask->begin() + static_cast<int64_t>(at), count, 1);
      return absl::OkStatus();
    }
    maskValues.resize(count);
    if (absl::Status s = readDocument(*options_.lossMask, document, offset,
                                      count, maskValues.data());
        !s.ok())
      return s;
    for (uint64_t i = 0; i < count; ++i)
      (*mask)[at + i] = static_cast<uint8_t>(maskValues[i]);
    return absl::OkStatus();
  };
  if (mask)
    mask->assign(L + 1, 0);
  if (positions) {
    // One sequence; kPacked restarts the positions below.
    positions->resize(L + 1);
    std::iota(positions->begin(), positions->end(), 0);
  }
  if (options_.layout == SampleLayout::kPacked) {
    const uint64_t B = binStarts_.size() - 1;
    const uint32_t bin = binAt(globalIndex / B, globalIndex % B);
    // The packing keeps a bin's counted tokens within L + 1.
    uint64_t written = 0;
    for (uint32_t p = binStarts_[bin]; p < binStarts_[bin + 1]; ++p) {
      const uint32_t document = binDocuments_[p];
      const uint64_t take =
          std::min<uint64_t>(L + 1, documentTokens_[document]);
      if (absl::Status s =
              readDocument(*dataset_, document, 0, take, out->data() + written);
          !s.ok())
        return s;
      if (absl::Status s = readMask(document, 0, take, written); !s.ok())
        return s;
      // The previous document's last token never predicts this one's first.
      if (mask)
        (*mask)[written] = 0;
      if (positions)
        std::iota(positions->begin() + static_cast<int64_t>(written),
                  positions->begin() + static_cast<int64_t>(written + take), 0);
      written += take;
    }
    std::fill(out->begin() + static_cast<int64_t>(written), out->end(),
              kPaddingToken);
    if (positions)
      std::iota(positions->begin() + static_cast<int64_t>(written),
                positions->end(), 0);
    return absl::OkStatus();
  }
  if (options_.layout == SampleLayout::kDocuments) {
    const uint64_t D = documentTokens_.size();
    const uint32_t document = documentAt(globalIndex / D, globalIndex % D);
    const uint64_t take = std::min<uint64_t>(L + 1, documentTokens_[document]);
    if (absl::Status s = readDocument(*dataset_, document, 0, take, out->data());
        !s.ok())
      return s;
    std::fill(out->begin() + static_cast<int64_t>(take), out->end(),
              kPaddingToken);
    return readMask(document, 0, take, 0);
  }
  absl::StatusOr<uint64_t> window = WindowOf(globalIndex);
  if (!window.ok())
    return window.status();
  uint64_t epoch = globalIndex * L / tokensPerEpoch_;
  const WindowStart start = starts_[*window];
  uint64_t position = start.docPosition, offset = start.offset, written = 0;
  while (written < L + 1) {
    // Create built every epoch the indexed windows reach.
    if (epoch >= numEpochs_)
      return absl::InternalError(absl::StrCat("sample ", globalIndex,
                                              " reads past the ", numEpochs_,
                                              " indexed epochs"));
    const uint32_t document = documentAt(epoch, position);
    const uint64_t take =
        std::min<uint64_t>(L + 1 - written, documentTokens_[document] - offset);
    if (absl::Status s = readDocument(*dataset_, document, offset, take,
                                      out->data() + written);
        !s.ok())
      return s;
    if (absl::Status s = readMask(document, offset, take, written); !s.ok())
      return s;
    written += take;
    offset = 0;
    if (++position == documentTokens_.size()) {
      position = 0;
      ++epoch;
    }
  }
  return absl::OkStatus();
}

} // namespace braid::data
