//===- IndexedDataset.h - Megatron's MMIDIDX .bin/.idx dataset --*- C++ -*-===//
//
// Reader and writer of the indexed dataset that Megatron-LM's preprocessor
// (tools/preprocess_data.py, megatron/core/datasets/indexed_dataset.py)
// writes, so that a corpus tokenized for Megatron trains under Braid as it is.
//
// PREFIX.idx, all little endian:
//   char[9]    magic "MMIDIDX\0\0"
//   uint64     version, 1
//   uint8      dtype code of the tokens (see DType)
//   uint64     S, the number of sequences
//   uint64     D, the number of document indices (documents + 1)
//   int32[S]   sequence lengths, in elements
//   int64[S]   sequence pointers, byte offsets into PREFIX.bin
//   int64[D]   document indices: the sequence where each document starts;
//              the first is 0 and the last is S
//   (int8[S]   sequence modes, only in Megatron's multimodal datasets)
// PREFIX.bin holds the sequences back to back, nothing else.
//
// Both files are mapped read only and every field is validated once in Open,
// so that no later access can read outside the mapping, whatever the files
// contain.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_INDEXEDDATASET_H
#define BRAID_RUNTIME_DATA_INDEXEDDATASET_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace braid::data {

/// The element type of a dataset, with Megatron's numeric codes (the values
/// are what the .idx stores, so they must never change).
enum class DType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

/// The DType of a Megatron dtype code, or InvalidArgument naming the code.
absl::StatusOr<DType> dtypeFromCode(uint8_t code);
/// Bytes per element.
size_t dtypeSize(DType dtype);
/// The NumPy name ("uint16", ...), as Megatron's messages use it.
absl::string_view dtypeName(DType dtype);
/// Whether the dtype can hold token ids (every dtype but the float ones).
bool isIntegerDtype(DType dtype);

/// The dtype Megatron's preprocessor picks for a vocabulary of `vocabSize`
/// ids (DType.optimal_dtype): uint16 below 65500, else int32. Matching it
/// (rather than using the exact uint16 range) keeps our preprocessed files
/// byte-identical to Megatron's.
DType BestDtypeForVocab(int64_t vocabSize);

/// A read-only, memory-mapped Megatron indexed dataset. Movable, not
/// copyable; the mappings live as long as the object.
class IndexedDataset {
public:
  /// Maps PREFIX.idx and PREFIX.bin and validates them completely. Errors:
  /// NotFound (or the errno's code) for a file that cannot be opened,
  /// InvalidArgument for a header this reader does not support (magic,
  /// version, dtype code), DataLoss for a truncated or inconsistent file.
  /// Every message names the file, the field and the values.
  static absl::StatusOr<IndexedDataset> Open(const std::string &prefix);

  IndexedDataset(IndexedDataset &&other) noexcept;
  IndexedDataset &operator=(IndexedDataset &&other) noexcept;
  IndexedDataset(const IndexedDataset &) = delete;
  IndexedDataset &operator=(const IndexedDataset &) = delete;
  ~IndexedDataset();

  const std::string &prefix() const { return prefix_; }
  DType dtype() const { return dtype_; }
  /// S, the number of sequences.
  size_t numSequences() const { return numSequences_; }
  /// The number of documents, D - 1.
  size_t numDocuments() const { return documentIndex_.size() - 1; }
  /// The total number of elements in the .bin.
  uint64_t numTokens() const { return numTokens_; }

  /// The length (in elements) of sequence `i`; requires i < numSequences().
  int32_t sequenceLength(size_t i) const;
  /// The byte offset of sequence `i` in the .bin; requires i < numSequences().
  int64_t sequencePointer(size_t i) const;
  /// The D document indices: documentIndex()[d] is the first sequence of
  /// document d, documentIndex()[numDocuments()] == numSequences(). Copied
  /// out of the mapping at Open because the .idx stores it unaligned.
  const std::vector<int64_t> &documentIndex() const { return documentIndex_; }

  /// Sets `out` to elements [offset, offset + count) of sequence `i`, widened
  /// to int64. OutOfRange if the range is not inside the sequence,
  /// FailedPrecondition if the dtype is a float dtype (not token ids).
  absl::Status ReadSequence(size_t i, size_t offset, size_t count,
                            std::vector<int64_t> *out) const;
  /// Writes elements [offset, offset + count) of sequence `i` to
  /// out[0..count) as int32 (what the embedding consumes). As ReadSequence,
  /// plus OutOfRange for an int64 token outside the int32 range.
  absl::Status ReadTokens(size_t i, size_t offset, size_t count,
                          int32_t *out) const;
  /// The raw little-endian bytes of sequence `i`, for any dtype (the way to
  /// read a float dataset). The span points into the mapping.
  absl::StatusOr<absl::Span<const uint8_t>> SequenceBytes(size_t i) const;

private:
  IndexedDataset() = default;
  absl::Status checkRange(size_t i, size_t offset, size_t count) const;
  void release();

  std::string prefix_;
  DType dtype_ = DType::kInt32;
  size_t numSequences_ = 0;
  uint64_t numTokens_ = 0;
  // The .idx mapping; lengths_ and pointers_ point into it, unaligned (the
  // arrays start at byte 34), so they are only read through memcpy.
  const uint8_t *idxMap_ = nullptr;
  size_t idxSize_ = 0;
  const uint8_t *lengths_ = nullptr;
  const uint8_t *pointers_ = nullptr;
  // The .bin mapping; null when the .bin is empty (mmap refuses length 0).
  const uint8_t *binMap_ = nullptr;
  size_t binSize_ = 0;
  std::vector<int64_t> documentIndex_ = {0};
};

/// The largest token id in `dataset`, reading every token once (to refuse,
/// before training, a dataset whose ids do not fit the model's vocabulary).
/// InvalidArgument for a float dataset or one without tokens.
absl::StatusOr<int64_t> LargestTokenId(const IndexedDataset &dataset);

/// Writes an indexed dataset byte-identical to Megatron's
/// IndexedDatasetBuilder: add the sequences of a document with AddSequence,
/// close it with EndDocument, and call Finish once. The data goes to
/// PREFIX.bin.tmp and PREFIX.idx.tmp, which Finish renames (.bin first, .idx
/// last), so an interrupted run never leaves a PREFIX.idx that looks
/// complete; an unfinished writer removes its temporary files.
class IndexedDatasetWriter {
public:
  /// Opens PREFIX.bin.tmp for writing. InvalidArgument for a float dtype
  /// (the writer takes token ids).
  static absl::StatusOr<IndexedDatasetWriter> Create(const std::string &prefix,
                                                     DType dtype);

  IndexedDatasetWriter(IndexedDatasetWriter &&other) noexcept;
  IndexedDatasetWriter &operator=(IndexedDatasetWriter &&other) noexcept;
  IndexedDatasetWriter(const IndexedDatasetWriter &) = delete;
  IndexedDatasetWriter &operator=(const IndexedDatasetWriter &) = delete;
  ~IndexedDatasetWriter();

  /// Appends one sequence. OutOfRange (and nothing written) if a token does
  /// not fit the dtype or the sequence has more than INT32_MAX tokens.
  absl::Status AddSequence(absl::Span<const int64_t> tokens);
  /// Ends the current document (the sequences added since the last call; an
  /// empty document is allowed, as in Megatron).
  absl::Status EndDocument();
  /// Writes PREFIX.idx.tmp, syncs both files and renames them into place.
  /// FailedPrecondition if sequences were added after the last EndDocument.
  absl::Status Finish();

  size_t numSequences() const { return lengths_.size(); }
  size_t numDocuments() const { return documentIndex_.size() - 1; }

private:
  IndexedDatasetWriter() = default;
  void abandon();

  std::string prefix_;
  DType dtype_ = DType::kInt32;
  std::FILE *bin_ = nullptr;
  uint64_t binBytes_ = 0;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> documentIndex_ = {0};
  std::vector<uint8_t> scratch_;
};

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_INDEXEDDATASET_H
