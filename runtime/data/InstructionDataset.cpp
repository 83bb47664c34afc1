//===- InstructionDataset.cpp - Token ids with their loss mask ------------===//

#include "runtime/data/InstructionDataset.h"

#include "absl/strings/str_cat.h"

#include <sys/stat.h>

namespace braid::data {
namespace {

bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

} // namespace

std::string LossMaskPrefix(const std::string &prefix) {
  return prefix + "_loss_mask";
}

absl::StatusOr<InstructionDataset>
OpenInstructionDataset(const std::string &prefix) {
  const std::string maskPrefix = LossMaskPrefix(prefix);
  const std::string idx = prefix + ".idx", maskIdx = maskPrefix + ".idx";
  const std::string maskBin = maskPrefix + ".bin";
  if (!fileExists(maskIdx) && !fileExists(maskBin))
    return absl::NotFoundError(absl::StrCat(
        "dataset ", prefix, " has no loss mask (no ", maskBin, " or ", maskIdx,
        "): an instruction run needs one; preprocess the data with "
        "braid-data preprocess --handler"));
  absl::StatusOr<IndexedDataset> tokens = IndexedDataset::Open(prefix);
  if (!tokens.ok())
    return tokens.status();
  absl::StatusOr<IndexedDataset> mask = IndexedDataset::Open(maskPrefix);
  if (!mask.ok())
    return mask.status();
  if (!isIntegerDtype(tokens->dtype()))
    return absl::InvalidArgumentError(absl::StrCat(idx, ": the dataset holds ",
                                                   dtypeName(tokens->dtype()),
                                                   " values, not token ids"));
  if (mask->dtype() != DType::kUInt8)
    return absl::InvalidArgumentError(absl::StrCat(
        maskIdx, ": the loss mask's dtype is ", dtypeName(mask->dtype()),
        " (code ", static_cast<int>(mask->dtype()),
        "), expected uint8 (code 1)"));
  if (tokens->numDocuments() != mask->numDocuments())
    return absl::DataLossError(absl::StrCat(
        idx, " has ", tokens->numDocuments(), " documents but its loss mask ",
        maskIdx, " has ", mask->numDocuments(),
        ": the two must have the same documents"));
  const std::vector<int64_t> &tokenDocs = tokens->documentIndex();
  const std::vector<int64_t> &maskDocs = mask->documentIndex();
  auto documentLength = [](const IndexedDataset &ds, size_t d) {
    uint64_t length = 0;
    for (int64_t s = ds.documentIndex()[d]; s < ds.documentIndex()[d + 1]; ++s)
      length += static_cast<uint64_t>(ds.sequenceLength(s));
    return length;
  };
  for (size_t d = 0; d < tokens->numDocuments(); ++d) {
    const uint64_t tokenLength = documentLength(*tokens, d);
    const uint64_t maskLength = documentLength(*mask, d);
    if (tokenLength != maskLength)
      return absl::DataLossError(
          absl::StrCat("document ", d, " has ", tokenLength, " tokens in ", idx,
                       " but ", maskLength, " mask values in ", maskIdx,
                       ": the loss mask must be as long as the tokens"));
    const int64_t sequences = tokenDocs[d + 1] - tokenDocs[d];
    bool same = sequences == maskDocs[d + 1] - maskDocs[d];
    for (int64_t k = 0; same && k < sequences; ++k)
      same = tokens->sequenceLength(tokenDocs[d] + k) ==
             mask->sequenceLength(maskDocs[d] + k);
    if (!same)
      return absl::DataLossError(absl::StrCat(
          "document ", d, " is split into sequences differently in ", idx, " (",
          sequences, ") and ", maskIdx, " (", maskDocs[d + 1] - maskDocs[d],
          "): the loss mask must have the tokens' sequences"));
    uint64_t offset = 0;
    for (int64_t s = maskDocs[d]; s < maskDocs[d + 1]; ++s) {
      absl::StatusOr<absl::Span<const uint8_t>> values =
          mask->SequenceBytes(static_cast<size_t>(s));
      if (!values.ok())
        return values.status();
      for (size_t k = 0; k < values->size(); ++k)
        if ((*values)[k] > 1)
          return absl::DataLossError(absl::StrCat(
              maskBin, ": document ", d, " holds the value ",
              static_cast<int>((*values)[k]), " at token ", offset + k,
              "; the loss mask of ", prefix, ".bin holds only 0 and 1"));
      offset += values->size();
    }
  }
  return InstructionDataset{std::move(*tokens), std::move(*mask)};
}

} // namespace braid::data
