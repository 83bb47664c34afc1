//===- GptSamples.h - GPT-style samples over an indexed dataset -*- C++ -*-===//
//
// The samples of Megatron's GPTDataset: the documents of a dataset, in epoch
// order, form one token stream; window w is the seq_length + 1 tokens
// stream[w * L, w * L + L] (L = seq_length), so consecutive windows share
// their boundary token (the last label of one is the first input of the
// next) and windows run across document and epoch boundaries. Epoch e holds
// every document once; a run that needs more tokens than one epoch holds
// goes on into further epochs.
//
// Orders:
//  - kSequential: every epoch lists the documents in file order, and sample
//    k is window k. This reproduces a run of a framework that reads the data
//    in order.
//  - kShuffled: epoch e lists the documents in a permutation drawn from
//    (seed, e), and the windows that start in epoch e are visited in a
//    permutation drawn from (seed, e) as well (Megatron shuffles documents
//    and samples the same way; it keeps a document's sentences together only
//    when they are one sequence, we always keep a document's sequences
//    together).
//
// The permutations use SplitMix64 with Fisher-Yates and rejection sampling,
// implemented here, so the order is the same on every platform and standard
// library (std::shuffle and the std distributions are not).
//
// Layouts:
//  - kWindows (above): the windows over the token stream.
//  - kDocuments: one document per sample, as instruction fine-tuning reads
//    conversations (braid-data preprocess --handler): sample k is document
//    k mod D of epoch k / D's order (D the range's documents; the order is
//    the document order above: file order, or the (seed, epoch)
//    permutation), its first seq_length + 1 tokens, the rest of the sample
//    padding (kPaddingToken). A longer document is truncated.
//  - kPacked: several documents per sample, as instruction fine-tuning on
//    packed sequences reads conversations (Megatron's reset_position_ids
//    and reset_attention_mask). A document counts its first seq_length + 1
//    tokens (a longer one is truncated as in kDocuments; an empty one takes
//    no room and no sample reads it). Create packs the range's documents
//    once into bins of seq_length + 1 tokens, by best-fit decreasing: the
//    documents sorted by counted tokens, most first (ties: file order), each
//    goes into the open bin with the least room left that still holds it
//    (ties: the lowest bin), or else into a new bin after the others. Bins
//    are numbered in the order they were opened and list their documents in
//    the order they were placed. With B bins, sample k is bin k mod B of
//    epoch k / B's bin order: bin number order, or with kShuffled a
//    permutation of the bins drawn from (seed, e) with the same generator
//    and shuffle as the document orders but a seed derived apart from
//    theirs (binSeed in GptSamples.cpp), so that it does not repeat the
//    document order kDocuments would draw. The sample is its bin's
//    documents one after another, each its first seq_length + 1 tokens,
//    then padding (kPaddingToken) up to seq_length + 1 tokens. The bins are
//    the same in every epoch; only their order changes.
//
// Loss mask: with one (GptSampleOptions::lossMask, a uint8 dataset of the
// tokens' documents and sequences, InstructionDataset.h), GetSample also
// gives each token's mask value, read where the token is read; without
// one, every token's is 1. Padding's is 0 either way, and so is the first
// token of every document of a kPacked sample, which must never be the
// label of the document before it.
//
// Positions: GetSample can also give each token's position in its
// sequence. In the kWindows and kDocuments layouts a sample is one
// sequence, positions 0, 1, ..., seq_length. In kPacked every document is
// one: its tokens are at 0, 1, ..., restarting at 0 where the next document
// starts, and the padding after the last document is one more run from 0.
// A position 0 marks where attention restarts (reset_attention_mask).
//
// GetSample(k) is a pure function of (dataset, document range, seq_length,
// seed, order, k): there is no iterator, and the order does not depend on
// num_samples (which only says how many samples to index), on the
// data-parallel degree or on which samples were read before, so a run
// resumes at any sample index.
//
// Document range: the samples can be drawn from documents [first, first +
// count) of the dataset alone (a train, validation or test split, Split.h).
// They are then exactly the samples of a dataset that held only those
// documents, in file order: the token stream, the packing, the epochs and
// the shuffles are over the range, and only the document ids DocumentOrder
// and BinDocuments report are the dataset's. The whole dataset is the range
// [0, numDocuments()), and gives the samples of a GptSamples without a
// range.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_GPTSAMPLES_H
#define BRAID_RUNTIME_DATA_GPTSAMPLES_H

#include "runtime/data/IndexedDataset.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace braid::data {

/// The generator the shuffled order is defined by (Steele, Lea and Flood's
/// SplitMix64). Part of the data format: changing it changes every shuffled
/// run, so its outputs are pinned by a test.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  /// A uniform integer in [0, n), n >= 1, unbiased (rejection sampling).
  uint64_t uniform(uint64_t n);

private:
  uint64_t state_;
};

/// Shuffles `values` in place with Fisher-Yates driven by `rng`: for i from
/// n-1 down to 1, swap values[i] with values[rng.uniform(i + 1)].
void fisherYatesShuffle(std::vector<uint32_t> &values, SplitMix64 &rng);

enum class SampleOrder { kSequential, kShuffled };
enum class SampleLayout { kWindows, kDocuments, kPacked };

/// The token id kDocuments and kPacked write after a sample's documents:
/// its mask value is 0, so no loss is computed where it is an input's next
/// token, and causal attention keeps it out of the document's positions.
constexpr int32_t kPaddingToken = 0;

struct GptSampleOptions {
  /// L: a sample holds L + 1 tokens (inputs and shifted labels).
  int64_t seqLength = 0;
  /// How many samples the run reads: GetSample accepts [0, numSamples).
  uint64_t numSamples = 0;
  uint64_t seed = 0;
  SampleOrder order = SampleOrder::kShuffled;
  /// The documents the samples are drawn from: [firstDocument, firstDocument
  /// + numDocuments) in file order; numDocuments unset: to the dataset's
  /// last document.
  uint64_t firstDocument = 0;
  std::optional<uint64_t> numDocuments;
  SampleLayout layout = SampleLayout::kWindows;
  /// The loss mask of the dataset's tokens (null: none). It must have the
  /// dataset's documents and sequences (OpenInstructionDataset checks) and
  /// outlive the samples.
  const IndexedDataset *lossMask = nullptr;
};

/// The sample index of one run over a dataset. Holds a pointer to the
/// dataset, which must outlive it and stay where it is (not be moved from).
/// GetSample is const and thread-safe.
class GptSamples {
public:
  /// Builds the document, sample and shuffle indices of every epoch the run
  /// touches (and kPacked's bins). InvalidArgument for seq_length < 1,
  /// num_samples < 1, a float dataset, a document range that is empty or
  /// reaches past the dataset's documents, or a range (or whole dataset)
  /// with fewer than seq_length + 1 tokens (kWindows) or no tokens
  /// (kPacked), each message naming the dataset's prefix and the range;
  /// ResourceExhausted when the indices would not fit the limits stated in
  /// the message.
  static absl::StatusOr<GptSamples> Create(const IndexedDataset *dataset,
                                           const GptSampleOptions &options);

  /// Sets `out` to the seq_length + 1 tokens of sample `globalIndex`.
  /// OutOfRange for globalIndex >= numSamples().
  absl::Status GetSample(uint64_t globalIndex, std::vector<int32_t> *out) const;
  /// The same, and `mask` (when not null) to the tokens' loss mask values:
  /// the mask dataset's, or 1 without one; 0 on padding and (kPacked) on
  /// every document's first token.
  absl::Status GetSample(uint64_t globalIndex, std::vector<int32_t> *out,
                         std::vector<uint8_t> *mask) const;
  /// The same, and `positions` (when not null) to the tokens' positions in
  /// their sequences (the file comment). InvalidArgument for a seq_length
  /// whose positions do not fit int32.
  absl::Status GetSample(uint64_t globalIndex, std::vector<int32_t> *out,
                         std::vector<uint8_t> *mask,
                         std::vector<int32_t> *positions) const;

  /// The window sample `globalIndex` reads: it is stream tokens
  /// [w * L, w * L + L]. OutOfRange as GetSample; FailedPrecondition in
  /// the kDocuments and kPacked layouts, which have no windows.
  absl::StatusOr<uint64_t> WindowOf(uint64_t globalIndex) const;

  /// The documents of epoch `epoch` in stream order (ids into the dataset's
  /// document index, inside the document range). Any epoch can be asked
  /// for, built or not. kPacked: in the order the epoch's samples read them
  /// (its bins in BinOrder, each bin's documents in BinDocuments' order),
  /// then the empty documents, which no sample reads, in file order.
  std::vector<uint32_t> DocumentOrder(uint64_t epoch) const;

  /// kPacked: the documents of bin `bin` (dataset ids) in the order the
  /// packing placed them, which is the order its samples read them.
  /// Requires bin < samplesPerEpoch(). Empty in the other layouts.
  std::vector<uint32_t> BinDocuments(uint64_t bin) const;
  /// kPacked: the bins of epoch `epoch` in sample order (sample k reads bin
  /// BinOrder(k / B)[k % B], B = samplesPerEpoch()). Any epoch can be asked
  /// for, built or not. Empty in the other layouts.
  std::vector<uint32_t> BinOrder(uint64_t epoch) const;

  /// What packing the range's documents saves, over one epoch, for the
  /// run's report.
  struct PackingStats {
    /// The range's documents, empty ones included (kDocuments' samples).
    uint64_t documents;
    /// The tokens the samples hold: the sum of min(tokens, seq_length + 1)
    /// over the documents.
    uint64_t tokens;
    /// B, the bins kPacked packs the documents into.
    uint64_t packedSamples;
    /// The fraction of kPacked's sample tokens that are padding: 1 - tokens
    /// / (B (seq_length + 1)); 0 when there are no bins.
    double packedPadding;
    /// The same for kDocuments: 1 - tokens / (documents (seq_length + 1)).
    double paddedPadding;
  };
  /// Valid in every layout: kPacked reads its bins, the others pack the
  /// documents again on each call (O(D log D) for D documents).
  PackingStats packingStats() const;

  uint64_t numSamples() const { return options_.numSamples; }
  int64_t seqLength() const { return options_.seqLength; }
  SampleOrder order() const { return options_.order; }
  /// The document range: [firstDocument(), firstDocument() + numDocuments()).
  uint64_t firstDocument() const { return firstDocument_; }
  uint64_t numDocuments() const { return documentTokens_.size(); }
  /// T: the tokens in one epoch (all tokens of the document range).
  uint64_t tokensPerEpoch() const { return tokensPerEpoch_; }
  SampleLayout layout() const { return options_.layout; }
  /// The distinct samples one epoch holds: its whole windows, (T - 1) /
  /// seq_length, its documents (kDocuments) or its bins (kPacked).
  uint64_t samplesPerEpoch() const;
  /// kDocuments and kPacked: the range's documents longer than seq_length +
  /// 1 tokens, which the samples truncate (0 in the kWindows layout).
  uint64_t truncatedDocuments() const;
  /// The epochs whose documents the indexed samples read.
  uint64_t numEpochs() const { return numEpochs_; }

private:
  /// Where a window starts: the position in its epoch's document order and
  /// the token offset inside that document. 32-bit fields keep the index at
  /// 8 bytes per sample, as Megatron's sample_idx; Create checks they fit.
  struct WindowStart {
    uint32_t docPosition;
    uint32_t offset;
  };

  GptSamples() = default;
  uint64_t firstWindow(uint64_t epoch) const;
  /// Documents below are numbered inside the range (0 is firstDocument_).
  std::vector<uint32_t> rangeOrder(uint64_t epoch) const;
  /// Shuffled order: documents_, every epoch's rangeOrder for numEpochs_.
  void buildDocumentOrders();
  uint32_t documentAt(uint64_t epoch, uint64_t position) const;
  /// kPacked: the bins of `epoch` in sample order.
  std::vector<uint32_t> binOrder(uint64_t epoch) const;
  uint32_t binAt(uint64_t epoch, uint64_t position) const;
  absl::Status readDocument(const IndexedDataset &dataset, uint32_t document,
                            uint64_t offset, uint64_t count,
                            int32_t *out) const;

  const IndexedDataset *dataset_ = nullptr;
  GptSampleOptions options_;
  uint64_t firstDocument_ = 0;
  uint64_t tokensPerEpoch_ = 0;
  uint64_t numEpochs_ = 0;
  /// Tokens per document of the range, in file order.
  std::vector<uint32_t> documentTokens_;
  /// Shuffled mode: the document order of every built epoch, epoch after
  /// epoch (numEpochs x range documents). Empty in sequential mode, where
  /// every epoch is in file order.
  std::vector<uint32_t> documents_;
  /// The start of every indexed window, by window number.
  std::vector<WindowStart> starts_;
  /// Shuffled mode: for sample k, the window it reads, counted from the
  /// first window of the epoch where window k starts (the windows that start
  /// in one epoch are shuffled among themselves).
  std::vector<uint32_t> shuffle_;
  /// kPacked: the documents of every bin, bin after bin, in placement
  /// order; bin b's are binDocuments_[binStarts_[b], binStarts_[b + 1]).
  std::vector<uint32_t> binDocuments_;
  std::vector<uint32_t> binStarts_;
  /// kPacked, shuffled mode: the bin order of every built epoch, epoch
  /// after epoch (numEpochs x bins). Empty in sequential mode.
  std::vector<uint32_t> binOrders_;
};

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_GPTSAMPLES_H
