//===- BlendedSamples.h - Samples blended from several datasets -*- C++ -*-===//
//
// Megatron's BlendedDataset: the samples of a run drawn from several
// datasets (each a document range of an indexed dataset) in proportion to
// weights. Which source sample k comes from, and which of that source's
// samples it is, is Megatron's build_blending_indices
// (megatron/core/datasets/helpers.cpp), so a blend picks its sources in the
// order Megatron picks them for the same weights:
//
//   weights normalized to sum 1 (divided by their sum twice, as Megatron's
//   builder and its BlendedDataset each do);
//   for sample i = 0, 1, ...: with t = max(i, 1) and taken[d] the samples
//   of source d among samples 0 .. i-1, sample i comes from the source d
//   with the largest weights[d] * t - taken[d] (ties: the lowest d), and is
//   that source's sample taken[d].
//
// The products and differences are IEEE doubles, computed without fused
// multiply-adds (the file is compiled with -ffp-contract=off), so the order
// is the same on every platform.
//
// Proportionality at every prefix (the proof is in BlendedSamples.cpp): with
// k sources of normalized weights w_d, c_d(n) of the first n samples from
// source d, for every n and d
//   c_d(n) - w_d n <= 1 - w_d                  (never a whole sample ahead)
//   w_d n - c_d(n) <  H_{k-1} = 1 + 1/2 + ... + 1/(k-1)
// (behind by less than 1 with 2 sources, 1.5 with 3, 2.28 with 6). Both are
// approached, so with 3 sources or more a count can be more than one sample
// behind w_d n.
//
// Each source reads its own GptSamples (BlendSource's document range, the
// blend's seq_length and order) with the seed BlendSourceSeed(seed, d), so
// one source alone reads exactly the samples GptSamples gives with the
// blend's options. SourceOf(k) and GetSample(k) are pure functions of the
// sources, the options and k, and the first n samples do not depend on
// num_samples: a run resumes at any sample.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_BLENDEDSAMPLES_H
#define BRAID_RUNTIME_DATA_BLENDEDSAMPLES_H

#include "runtime/data/GptSamples.h"
#include "runtime/data/IndexedDataset.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace braid::data {

/// One dataset of a blend: documents [firstDocument, firstDocument +
/// numDocuments) of `dataset` (numDocuments unset: to its last document),
/// drawn from with `weight` relative to the others.
struct BlendSource {
  const IndexedDataset *dataset = nullptr;
  double weight = 0;
  uint64_t firstDocument = 0;
  std::optional<uint64_t> numDocuments;
  /// The loss mask of the dataset's tokens (GptSampleOptions::lossMask);
  /// null: none.
  const IndexedDataset *lossMask = nullptr;
};

/// The weights divided by their sum, twice, as Megatron does: Megatron's to
/// the bit for fewer than 8 sources, which numpy sums left to right as here
/// (it sums 8 or more pairwise, which can differ in the last bit).
/// InvalidArgument for no weights, a weight that is not a finite number > 0,
/// or weights whose sum is not finite.
absl::StatusOr<std::vector<double>>
NormalizeBlendWeights(const std::vector<double> &weights);

/// The source of each of the first `numSamples` samples, by the rule above,
/// for normalized `weights` (at most 65535 of them). Takes 2 bytes per sample.
std::vector<uint16_t> BlendingSources(const std::vector<double> &weights,
                                      uint64_t numSamples);

/// The seed of source d's samples: seed + d * 1000003 (mod 2^64), so source
/// 0, and a blend of one source, uses the blend's seed.
uint64_t BlendSourceSeed(uint64_t seed, size_t source);

/// The samples of a blend. Holds pointers to the datasets, which must
/// outlive it and stay where they are. GetSample is const and thread-safe.
class BlendedSamples {
public:
  /// Builds the blending index and each source's GptSamples. `base` gives
  /// seq_length, num_samples, seed, order and layout; the document ranges
  /// and loss masks are the sources'. InvalidArgument for no sources, more
  /// than 65535, a null dataset, a weight that is not a finite number > 0,
  /// num_samples < 1, a document range or loss mask in `base`, or a source GptSamples refuses (the message
  /// names the source); ResourceExhausted when the index would take more than
  /// 2^36 bytes (10 bytes a sample).
  static absl::StatusOr<BlendedSamples> Create(std::vector<BlendSource> sources,
                                               const GptSampleOptions &base);

  /// Sets `out` to the seq_length + 1 tokens of sample `globalIndex`.
  /// OutOfRange for globalIndex >= numSamples().
  absl::Status GetSample(uint64_t globalIndex, std::vector<int32_t> *out) const;
  /// The same, and `mask` (when not null) to the tokens' loss mask values
  /// (GptSamples::GetSample).
  absl::Status GetSample(uint64_t globalIndex, std::vector<int32_t> *out,
                         std::vector<uint8_t> *mask) const;
  /// The same, and `positions` (when not null) to the tokens' positions in
  /// their sequences (GptSamples::GetSample).
  absl::Status GetSample(uint64_t globalIndex, std::vector<int32_t> *out,
                         std::vector<uint8_t> *mask,
                         std::vector<int32_t> *positions) const;

  uint64_t numSamples() const { return numSamples_; }
  size_t numSources() const { return sources_.size(); }

  /// The source sample `globalIndex` comes from and its index among that
  /// source's samples. Requires globalIndex < numSamples().
  std::pair<size_t, uint64_t> SourceOf(uint64_t globalIndex) const {
    return {sourceOf_[globalIndex], indexInSource_[globalIndex]};
  }

  /// Source d's samples (it indexes as many as the blend takes from it, at
  /// least 1). Requires d < numSources().
  const GptSamples &source(size_t d) const { return sources_[d]; }
  /// Source d's normalized weight. Requires d < numSources().
  double weight(size_t d) const { return weights_[d]; }

private:
  BlendedSamples() = default;

  uint64_t numSamples_ = 0;
  std::vector<double> weights_;
  std::vector<GptSamples> sources_;
  /// For every sample: its source, and its index among the source's samples.
  std::vector<uint16_t> sourceOf_;
  std::vector<uint64_t> indexInSource_;
};

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_BLENDEDSAMPLES_H
