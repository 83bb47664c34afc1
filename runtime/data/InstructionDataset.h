//===- InstructionDataset.h - Token ids with their loss mask ----*- C++ -*-===//
//
// The reader of instruction data (Instruction.h writes it: braid-data
// preprocess --handler): PREFIX.{bin,idx}, the token ids of one document
// per conversation, and PREFIX_loss_mask.{bin,idx}, a uint8 per token, 1
// where the token's loss counts. In BraidData, beside IndexedDataset, so
// that a training run reads it without the tokenizers' libraries.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_INSTRUCTIONDATASET_H
#define BRAID_RUNTIME_DATA_INSTRUCTIONDATASET_H

#include "runtime/data/IndexedDataset.h"

#include "absl/status/statusor.h"

#include <string>

namespace braid::data {

/// PREFIX "_loss_mask", where a dataset's loss mask is.
std::string LossMaskPrefix(const std::string &prefix);

/// An instruction dataset: the token ids and their loss mask, which agree
/// document by document and sequence by sequence.
struct InstructionDataset {
  IndexedDataset tokens;
  IndexedDataset lossMask;
};

/// Opens PREFIX.{bin,idx} and PREFIX_loss_mask.{bin,idx} and checks that
/// they agree: the same number of documents, the same sequences (and so
/// lengths) in each, a mask of dtype uint8 holding only 0 and 1. NotFound
/// for a prefix without loss mask files (a dataset preprocessed without
/// --handler); IndexedDataset::Open's errors for either dataset;
/// InvalidArgument for a mask of another dtype or a token dataset of a
/// float dtype; DataLoss for datasets that disagree, naming both files and
/// the first document that differs, or a mask value other than 0 and 1.
absl::StatusOr<InstructionDataset>
OpenInstructionDataset(const std::string &prefix);

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_INSTRUCTIONDATASET_H
