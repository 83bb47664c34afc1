//===- BlendedSamples.cpp - Samples blended from several datasets --------===//
//
// The blending index is built once in Create, like GptSamples' indices, so
// that GetSample only looks it up.
//
// Why the counts stay near w_d n (BlendedSamples.h states the bounds). Let
// D_d(n) = w_d n - c_d(n), the deficit of source d after n samples; the
// deficits sum to 0 (the weights sum to 1). At sample n >= 1 the rule picks
// the largest w_d n - c_d(n) = D_d(n); at sample 0 every deficit is 0, so
// whatever it picks has the largest deficit too. Then D_d(n + 1) = D_d(n) +
// w_d - [d is picked].
//
// Ahead: the picked source's deficit is the largest of numbers that sum to
// 0, so it is >= 0 and becomes >= w_d - 1; the other deficits grow. So
// D_d(n) >= w_d - 1 always: c_d(n) - w_d n <= 1 - w_d, met by the heaviest
// source at n = 1.
//
// Behind: let G_m(n) be the largest sum of the deficits of m of the k
// sources, and B_m = m (1/m + 1/(m+1) + ... + 1/(k-1)), which satisfies
// B_k = 0 and B_m = m/(m+1) B_{m+1} + 1. Take a set S of m sources at
// n + 1. If S holds the picked source p, its sum changed by w_S - 1 <= 0,
// so it is <= G_m(n). If not, every deficit in S is <= D_p(n), so
// sum_S D(n) <= m/(m+1) sum_{S+p} D(n) <= m/(m+1) G_{m+1}(n), and
// sum_S D(n+1) = sum_S D(n) + w_S < m/(m+1) G_{m+1}(n) + 1. With G_k = 0
// and G_m(0) = 0, induction on n (for m from k - 1 down) gives G_m(n) <
// B_m; G_1 is the largest deficit, so w_d n - c_d(n) < B_1 = H_{k-1}.
// The induction is tight where the picked source ties the others of S and
// w_S is near 1, which weights of very different sizes reach: (1 - e, e)
// picks sources 0 and 1 first, leaving source 0 behind by 1 - 2e; 10000,
// 100, 1 leave source 0 behind by 1.48 after 152 samples (the tests check
// both).
//
//===----------------------------------------------------------------------===//

#include "runtime/data/BlendedSamples.h"

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace braid::data {
namespace {

/// The most sources: the index stores a source in 16 bits.
constexpr size_t kMaxSources = std::numeric_limits<uint16_t>::max();

/// Index bytes per sample: the source and the index in it.
constexpr uint64_t kIndexBytesPerSample = sizeof(uint16_t) + sizeof(uint64_t);

/// As GptSamples: beyond this the request is almost certainly a mistake.
constexpr uint64_t kMaxIndexBytes = uint64_t(1) << 36;

/// The message part that names source d.
std::string sourceName(size_t d, const IndexedDataset *dataset) {
  return dataset
             ? absl::StrCat("blend source ", d, " (", dataset->prefix(), ")")
             : absl::StrCat("blend source ", d);
}

absl::Status checkWeight(size_t d, double weight,
                         const IndexedDataset *dataset) {
  if (!(weight > 0) || !std::isfinite(weight))
    return absl::InvalidArgumentError(
        absl::StrCat(sourceName(d, dataset), " has weight ", weight,
                     ", expected a finite number > 0"));
  return absl::OkStatus();
}

/// Megatron's normalize(): each weight divided by the sum.
absl::StatusOr<std::vector<double>> divideBySum(std::vector<double> weights) {
  double sum = 0;
  for (double w : weights)
    sum += w;
  if (!std::isfinite(sum))
    return absl::InvalidArgumentError(
        "the blend's weights sum past the largest double");
  for (double &w : weights)
    w /= sum;
  return weights;
}

} // namespace

absl::StatusOr<std::vector<double>>
NormalizeBlendWeights(const std::vector<double> &weights) {
  if (weights.empty())
    return absl::InvalidArgumentError("a blend needs at least one source");
  for (size_t d = 0; d < weights.size(); ++d)
    if (absl::Status s = checkWeight(d, weights[d], nullptr); !s.ok())
      return s;
  // Megatron's builder normalizes the weights and its BlendedDataset does so
  // again; the second division can move a weight by an ulp.
  absl::StatusOr<std::vector<double>> once = divideBySum(weights);
  if (!once.ok())
    return once.status();
  return divideBySum(*std::move(once));
}

std::vector<uint16_t> BlendingSources(const std::vector<double> &weights,
                                      uint64_t numSamples) {
  std::vector<uint16_t> sources(numSamples);
  std::vector<uint64_t> taken(weights.size(), 0);
  for (uint64_t i = 0; i < numSamples; ++i) {
    // Megatron's loop, expression for expression.
    const double t = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double bestError = weights[0] * t - static_cast<double>(taken[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * t - static_cast<double>(taken[d]);
      if (error > bestError) {
        bestError = error;
        best = d;
      }
    }
    sources[i] = static_cast<uint16_t>(best);
    ++taken[best];
  }
  return sources;
}

uint64_t BlendSourceSeed(uint64_t seed, size_t source) {
  return seed + static_cast<uint64_t>(source) * 1000003u;
}

absl::StatusOr<BlendedSamples>
BlendedSamples::Create(std::vector<BlendSource> sources,
                       const GptSampleOptions &base) {
  if (sources.empty())
    return absl::InvalidArgumentError("a blend needs at least one source");
  if (sources.size() > kMaxSources)
    return absl::InvalidArgumentError(
        absl::StrCat("a blend of ", sources.size(),
                     " sources, expected at most ", kMaxSources));
  if (base.firstDocument != 0 || base.numDocuments)
    return absl::InvalidArgumentError(
        "a blend's document ranges are its sources' (BlendSource), but the "
        "blend's options set one");
  if (base.numSamples < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples is ", base.numSamples, ", expected >= 1"));
  if (base.lossMask)
    return absl::InvalidArgumentError(
        "a blend's loss masks are its sources' (BlendSource), but the blend's "
        "options set one");
  std::vector<double> raw;
  for (size_t d = 0; d < sources.size(); ++d) {
    if (!sources[d].dataset)
      return absl::InvalidArgumentError(
          absl::StrCat(sourceName(d, nullptr), " has no dataset (null)"));
    if (absl::Status s = checkWeight(d, sources[d].weight, sources[d].dataset);
        !s.ok())
      return s;
    raw.push_back(sources[d].weight);
  }
  const absl::uint128 indexBytes =
      absl::uint128(base.numSamples) * kIndexBytesPerSample;
  if (indexBytes > kMaxIndexBytes)
    return absl::ResourceExhaustedError(absl::StrCat(
        "a blend of ", base.numSamples, " samples needs ", kIndexBytesPerSample,
        " bytes of index a sample, more than 2^36 = ", kMaxIndexBytes,
        " bytes in all"));
  absl::StatusOr<std::vector<double>> weights = NormalizeBlendWeights(raw);
  if (!weights.ok())
    return weights.status();

  BlendedSamples blend;
  blend.numSamples_ = base.numSamples;
  blend.weights_ = *std::move(weights);
  blend.sourceOf_ = BlendingSources(blend.weights_, base.numSamples);
  blend.indexInSource_.resize(base.numSamples);
  std::vector<uint64_t> taken(sources.size(), 0);
  for (uint64_t i = 0; i < base.numSamples; ++i)
    blend.indexInSource_[i] = taken[blend.sourceOf_[i]]++;

  blend.sources_.reserve(sources.size());
  for (size_t d = 0; d < sources.size(); ++d) {
    GptSampleOptions options = base;
    // A source the blend never reads still indexes one sample, so that
    // every source is checked and source(d) can be read.
    options.numSamples = std::max<uint64_t>(taken[d], 1);
    options.seed = BlendSourceSeed(base.seed, d);
    options.firstDocument = sources[d].firstDocument;
    options.numDocuments = sources[d].numDocuments;
    options.lossMask = sources[d].lossMask;
    absl::StatusOr<GptSamples> samples =
        GptSamples::Create(sources[d].dataset, options);
    if (!samples.ok())
      // GptSamples' message names the dataset.
      return absl::Status(
          samples.status().code(),
          absl::StrCat("blend source ", d, ": ", samples.status().message()));
    blend.sources_.push_back(*std::move(samples));
  }
  return blend;
}

absl::Status BlendedSamples::GetSample(uint64_t globalIndex,
                                       std::vector<int32_t> *out) const {
  if (globalIndex >= numSamples_)
    return absl::OutOfRangeError(absl::StrCat("sample ", globalIndex,
                                              " does not exist, the blend has ",
                                              numSamples_, " samples"));
  return sources_[sourceOf_[globalIndex]].GetSample(indexInSource_[globalIndex],
                                                    out);
}

absl::Status BlendedSamples::GetSample(uint64_t globalIndex,
                                       std::vector<int32_t> *out,
                                       std::vector<uint8_t> *mask) const {
  return GetSample(globalIndex, out, mask, nullptr);
}

absl::Status BlendedSamples::GetSample(uint64_t globalIndex,
                                       std::vector<int32_t> *out,
                                       std::vector<uint8_t> *mask,
                                       std::vector<int32_t> *positions) const {
  if (globalIndex >= numSamples_)
    return absl::OutOfRangeError(absl::StrCat("sample ", globalIndex,
                                              " does not exist, the blend has ",
                                              numSamples_, " samples"));
  return sources_[sourceOf_[globalIndex]].GetSample(indexInSource_[globalIndex],
                                                    out, mask, positions);
}

} // namespace braid::data
