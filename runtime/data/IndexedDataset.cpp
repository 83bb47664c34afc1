//===- IndexedDataset.cpp - Megatron's MMIDIDX .bin/.idx dataset ----------===//
//
// Open validates the whole index against the published layout before any
// accessor can run, so the accessors need no checks beyond their arguments:
// a malformed file is refused with a message, never read past its end.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/IndexedDataset.h"

#include "runtime/common/MappedFile.h"

#include "absl/numeric/int128.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <cstring>
#include <limits>
#include <sstream>
#include <unistd.h>
#include <utility>

// The format is little endian and the accessors load fields with memcpy; a
// big-endian host would need byte swaps everywhere, which nobody needs yet.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the indexed dataset reader assumes a little-endian host"
#endif

namespace braid::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
// magic + version + dtype code + sequence count + document count.
constexpr size_t kHeaderSize = 9 + 8 + 1 + 8 + 8;

/// Loads a T from a possibly unaligned address (the .idx arrays start at byte
/// 34, so dereferencing a T* there would be undefined behaviour).
template <typename T> T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

std::string toString(absl::uint128 value) {
  std::ostringstream os;
  os << value;
  return os.str();
}



/// Widens `count` elements of type T at `src` into `dst`.
template <typename T, typename Out>
void widen(const uint8_t *src, size_t count, Out *dst) {
  for (size_t k = 0; k < count; ++k)
    dst[k] = static_cast<Out>(load<T>(src + k * sizeof(T)));
}

/// The inclusive range of token ids a dtype can store.
void dtypeRange(DType dtype, int64_t *lo, int64_t *hi) {
  switch (dtype) {
  case DType::kUInt8:
    *lo = 0, *hi = std::numeric_limits<uint8_t>::max();
    return;
  case DType::kInt8:
    *lo = std::numeric_limits<int8_t>::min();
    *hi = std::numeric_limits<int8_t>::max();
    return;
  case DType::kInt16:
    *lo = std::numeric_limits<int16_t>::min();
    *hi = std::numeric_limits<int16_t>::max();
    return;
  case DType::kUInt16:
    *lo = 0, *hi = std::numeric_limits<uint16_t>::max();
    return;
  case DType::kInt32:
    *lo = std::numeric_limits<int32_t>::min();
    *hi = std::numeric_limits<int32_t>::max();
    return;
  default:
    *lo = std::numeric_limits<int64_t>::min();
    *hi = std::numeric_limits<int64_t>::max();
    return;
  }
}

/// Stores `value` (already range-checked) as `dtype` at `dst`.
void store(DType dtype, int64_t value, uint8_t *dst) {
  switch (dtype) {
  case DType::kUInt8: {
    uint8_t v = static_cast<uint8_t>(value);
    std::memcpy(dst, &v, 1);
    return;
  }
  case DType::kInt8: {
    int8_t v = static_cast<int8_t>(value);
    std::memcpy(dst, &v, 1);
    return;
  }
  case DType::kInt16: {
    int16_t v = static_cast<int16_t>(value);
    std::memcpy(dst, &v, 2);
    return;
  }
  case DType::kUInt16: {
    uint16_t v = static_cast<uint16_t>(value);
    std::memcpy(dst, &v, 2);
    return;
  }
  case DType::kInt32: {
    int32_t v = static_cast<int32_t>(value);
    std::memcpy(dst, &v, 4);
    return;
  }
  default:
    std::memcpy(dst, &value, 8);
    return;
  }
}

/// Writes all of `size` bytes or returns the errno as a status.
absl::Status writeAll(std::FILE *f, const void *data, size_t size,
                      const std::string &path) {
  if (size == 0)
    return absl::OkStatus();
  if (std::fwrite(data, 1, size, f) != size)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

template <typename T>
absl::Status writeValue(std::FILE *f, T value, const std::string &path) {
  return writeAll(f, &value, sizeof(T), path);
}

/// Flushes, fsyncs and closes `f`; the data must be on disk before the
/// rename that publishes it, or a crash could publish an empty file.
absl::Status syncAndClose(std::FILE *f, const std::string &path) {
  bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  int err = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok)
    return absl::ErrnoToStatus(err, absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

} // namespace

//===----------------------------------------------------------------------===//
// DType
//===----------------------------------------------------------------------===//

absl::StatusOr<DType> dtypeFromCode(uint8_t code) {
  if (code < 1 || code > 8)
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype code ", static_cast<int>(code),
        " is not one of Megatron's codes 1 (uint8), 2 (int8), 3 (int16), "
        "4 (int32), 5 (int64), 6 (float64), 7 (float32), 8 (uint16)"));
  return static_cast<DType>(code);
}

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::kUInt8:
  case DType::kInt8:
    return 1;
  case DType::kInt16:
  case DType::kUInt16:
    return 2;
  case DType::kInt32:
  case DType::kFloat32:
    return 4;
  case DType::kInt64:
  case DType::kFloat64:
    return 8;
  }
  return 0;
}

absl::string_view dtypeName(DType dtype) {
  switch (dtype) {
  case DType::kUInt8:
    return "uint8";
  case DType::kInt8:
    return "int8";
  case DType::kInt16:
    return "int16";
  case DType::kInt32:
    return "int32";
  case DType::kInt64:
    return "int64";
  case DType::kFloat64:
    return "float64";
  case DType::kFloat32:
    return "float32";
  case DType::kUInt16:
    return "uint16";
  }
  return "unknown";
}

bool isIntegerDtype(DType dtype) {
  return dtype != DType::kFloat32 && dtype != DType::kFloat64;
}

DType BestDtypeForVocab(int64_t vocabSize) {
  return vocabSize < 65500 ? DType::kUInt16 : DType::kInt32;
}

//===----------------------------------------------------------------------===//
// IndexedDataset
//===----------------------------------------------------------------------===//

absl::StatusOr<IndexedDataset> IndexedDataset::Open(const std::string &prefix) {
  const std::string idxPath = prefix + ".idx";
  const std::string binPath = prefix + ".bin";
  IndexedDataset ds;
  ds.prefix_ = prefix;
  // From here on `ds` owns the mappings, so every early return unmaps them.
  if (absl::Status s = common::mapFile(idxPath, &ds.idxMap_, &ds.idxSize_); !s.ok())
    return s;
  const uint8_t *idx = ds.idxMap_;
  const size_t fileSize = ds.idxSize_;

  auto truncated = [&](absl::string_view field, size_t need) {
    return absl::DataLossError(absl::StrCat(
        idxPath, ": truncated: the file is ", fileSize,
        " bytes, too short for ", field, ", which ends at byte ", need));
  };

  // A file that does not start with the magic is some other format; one
  // that starts with part of it and stops is a truncated index.
  size_t magicBytes = std::min(fileSize, sizeof(kMagic));
  if (magicBytes > 0 && std::memcmp(idx, kMagic, magicBytes) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        idxPath, ": bad magic: expected \"MMIDIDX\\x00\\x00\", found \"",
        absl::CHexEscape(
            absl::string_view(reinterpret_cast<const char *>(idx), magicBytes)),
        "\" (not a Megatron MMIDIDX index)"));
  if (fileSize < 9)
    return truncated("the 9-byte magic", 9);
  if (fileSize < 17)
    return truncated("the version", 17);
  uint64_t version = load<uint64_t>(idx + 9);
  if (version != kVersion)
    return absl::InvalidArgumentError(absl::StrCat(
        idxPath, ": unsupported version ", version, ", expected ", kVersion));
  if (fileSize < 18)
    return truncated("the dtype code", 18);
  absl::StatusOr<DType> dtype = dtypeFromCode(idx[17]);
  if (!dtype.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(idxPath, ": ", dtype.status().message()));
  ds.dtype_ = *dtype;
  if (fileSize < kHeaderSize)
    return truncated("the sequence and document counts", kHeaderSize);
  const uint64_t S = load<uint64_t>(idx + 18);
  const uint64_t D = load<uint64_t>(idx + 26);

  // The array ends, in 128 bits so that absurd counts cannot wrap around
  // and pass the size check.
  const absl::uint128 lengthsEnd =
      absl::uint128(kHeaderSize) + absl::uint128(S) * 4;
  const absl::uint128 pointersEnd = lengthsEnd + absl::uint128(S) * 8;
  const absl::uint128 documentsEnd = pointersEnd + absl::uint128(D) * 8;
  auto truncatedArray = [&](absl::string_view field, absl::uint128 end) {
    return absl::DataLossError(
        absl::StrCat(idxPath, ": truncated in ", field, ": sequence_count ", S,
                     " and document_count ", D, " need ", toString(end),
                     " bytes but the file has ", fileSize));
  };
  if (lengthsEnd > fileSize)
    return truncatedArray("sequence_lengths", documentsEnd);
  if (pointersEnd > fileSize)
    return truncatedArray("sequence_pointers", documentsEnd);
  if (documentsEnd > fileSize)
    return truncatedArray("document_indices", documentsEnd);
  // Megatron's multimodal datasets append one int8 mode per sequence; the
  // modes do not matter for GPT samples, anything else after the arrays
  // means the counts are wrong.
  const absl::uint128 trailing = absl::uint128(fileSize) - documentsEnd;
  if (trailing != 0 && trailing != S)
    return absl::DataLossError(absl::StrCat(
        idxPath, ": ", toString(trailing),
        " bytes follow the document indices, expected 0 (or sequence_count = ",
        S, " sequence modes); sequence_count ", S, " and document_count ", D,
        " need ", toString(documentsEnd), " bytes, the file has ", fileSize));
  if (D == 0)
    return absl::DataLossError(absl::StrCat(
        idxPath, ": document_count is 0, expected at least 1 (the leading 0 "
                 "of document_indices)"));

  ds.numSequences_ = static_cast<size_t>(S);
  ds.lengths_ = idx + kHeaderSize;
  ds.pointers_ = ds.lengths_ + 4 * S;
  const uint8_t *documents = ds.pointers_ + 8 * S;

  if (absl::Status s = common::mapFile(binPath, &ds.binMap_, &ds.binSize_); !s.ok())
    return s;

  // Each sequence must start where the previous one ends and the last must
  // end at the end of the .bin: then every [pointer, pointer + length *
  // size) lies inside the mapping. The running end never exceeds binSize_
  // by more than one sequence, so it cannot overflow.
  const uint64_t itemSize = dtypeSize(ds.dtype_);
  uint64_t end = 0;
  for (uint64_t i = 0; i < S; ++i) {
    int32_t length = ds.sequenceLength(i);
    if (length < 0)
      return absl::DataLossError(absl::StrCat(idxPath, ": sequence_lengths[", i,
                                              "] is ", length,
                                              ", expected >= 0"));
    int64_t pointer = ds.sequencePointer(i);
    if (pointer < 0 || static_cast<uint64_t>(pointer) != end) {
      if (i == 0)
        return absl::DataLossError(absl::StrCat(
            idxPath, ": sequence_pointers[0] is ", pointer, ", expected 0"));
      return absl::DataLossError(absl::StrCat(
          idxPath, ": sequence_pointers[", i, "] is ", pointer, ", expected ",
          end, " (sequence_pointers[", i - 1, "] + sequence_lengths[", i - 1,
          "] * ", itemSize, " bytes per ", dtypeName(ds.dtype_), ")"));
    }
    end += static_cast<uint64_t>(length) * itemSize;
    if (end > ds.binSize_)
      return absl::DataLossError(absl::StrCat(
          binPath, ": the file is ", ds.binSize_, " bytes but sequence ", i,
          " of ", idxPath, " ends at byte ", end, " (.bin too short)"));
  }
  if (end != ds.binSize_)
    return absl::DataLossError(
        absl::StrCat(binPath, ": the file is ", ds.binSize_, " bytes but the ",
                     S, " sequences of ", idxPath, " end at byte ", end,
                     " (.bin size must equal the sum of the sequences)"));
  ds.numTokens_ = end / itemSize;

  ds.documentIndex_.resize(static_cast<size_t>(D));
  for (uint64_t j = 0; j < D; ++j) {
    int64_t value = load<int64_t>(documents + 8 * j);
    ds.documentIndex_[j] = value;
    if (j == 0 && value != 0)
      return absl::DataLossError(absl::StrCat(
          idxPath, ": document_indices[0] is ", value, ", expected 0"));
    if (j > 0 && value < ds.documentIndex_[j - 1])
      return absl::DataLossError(absl::StrCat(
          idxPath, ": document_indices[", j, "] is ", value,
          ", less than document_indices[", j - 1,
          "] = ", ds.documentIndex_[j - 1], " (must be non-decreasing)"));
  }
  if (static_cast<uint64_t>(ds.documentIndex_.back()) != S)
    return absl::DataLossError(absl::StrCat(
        idxPath, ": document_indices[", D - 1, "] is ",
        ds.documentIndex_.back(), ", expected sequence_count ", S));
  return ds;
}

IndexedDataset::IndexedDataset(IndexedDataset &&other) noexcept {
  *this = std::move(other);
}

IndexedDataset &IndexedDataset::operator=(IndexedDataset &&other) noexcept {
  if (this == &other)
    return *this;
  release();
  prefix_ = std::move(other.prefix_);
  dtype_ = other.dtype_;
  numSequences_ = std::exchange(other.numSequences_, 0);
  numTokens_ = std::exchange(other.numTokens_, 0);
  idxMap_ = std::exchange(other.idxMap_, nullptr);
  idxSize_ = std::exchange(other.idxSize_, 0);
  lengths_ = std::exchange(other.lengths_, nullptr);
  pointers_ = std::exchange(other.pointers_, nullptr);
  binMap_ = std::exchange(other.binMap_, nullptr);
  binSize_ = std::exchange(other.binSize_, 0);
  documentIndex_ = std::exchange(other.documentIndex_, {0});
  return *this;
}

IndexedDataset::~IndexedDataset() { release(); }

void IndexedDataset::release() {
  common::unmapFile(idxMap_, idxSize_);
  common::unmapFile(binMap_, binSize_);
  idxMap_ = binMap_ = lengths_ = pointers_ = nullptr;
  idxSize_ = binSize_ = 0;
  numSequences_ = 0;
}

int32_t IndexedDataset::sequenceLength(size_t i) const {
  return load<int32_t>(lengths_ + 4 * i);
}

int64_t IndexedDataset::sequencePointer(size_t i) const {
  return load<int64_t>(pointers_ + 8 * i);
}

absl::Status IndexedDataset::checkRange(size_t i, size_t offset,
                                        size_t count) const {
  if (i >= numSequences_)
    return absl::OutOfRangeError(absl::StrCat(
        prefix_, ": sequence ", i, " does not exist, the dataset has ",
        numSequences_, " sequences"));
  size_t length = static_cast<size_t>(sequenceLength(i));
  if (offset > length || count > length - offset)
    return absl::OutOfRangeError(
        absl::StrCat(prefix_, ": elements [", offset, ", ",
                     toString(absl::uint128(offset) + count),
                     ") are outside sequence ", i, ", which has ", length));
  if (!isIntegerDtype(dtype_))
    return absl::FailedPreconditionError(
        absl::StrCat(prefix_, ": the dataset holds ", dtypeName(dtype_),
                     " values, not token ids; read them with SequenceBytes"));
  return absl::OkStatus();
}

absl::Status IndexedDataset::ReadSequence(size_t i, size_t offset, size_t count,
                                          std::vector<int64_t> *out) const {
  if (absl::Status s = checkRange(i, offset, count); !s.ok())
    return s;
  out->resize(count);
  if (count == 0)
    return absl::OkStatus();
  const size_t itemSize = dtypeSize(dtype_);
  const uint8_t *src = binMap_ + sequencePointer(i) + offset * itemSize;
  switch (dtype_) {
  case DType::kUInt8:
    widen<uint8_t>(src, count, out->data());
    break;
  case DType::kInt8:
    widen<int8_t>(src, count, out->data());
    break;
  case DType::kInt16:
    widen<int16_t>(src, count, out->data());
    break;
  case DType::kUInt16:
    widen<uint16_t>(src, count, out->data());
    break;
  case DType::kInt32:
    widen<int32_t>(src, count, out->data());
    break;
  case DType::kInt64:
    widen<int64_t>(src, count, out->data());
    break;
  case DType::kFloat32:
  case DType::kFloat64:
    break; // Refused by checkRange.
  }
  return absl::OkStatus();
}

absl::Status IndexedDataset::ReadTokens(size_t i, size_t offset, size_t count,
                                        int32_t *out) const {
  if (absl::Status s = checkRange(i, offset, count); !s.ok())
    return s;
  if (count == 0)
    return absl::OkStatus();
  const size_t itemSize = dtypeSize(dtype_);
  const uint8_t *src = binMap_ + sequencePointer(i) + offset * itemSize;
  switch (dtype_) {
  case DType::kUInt8:
    widen<uint8_t>(src, count, out);
    break;
  case DType::kInt8:
    widen<int8_t>(src, count, out);
    break;
  case DType::kInt16:
    widen<int16_t>(src, count, out);
    break;
  case DType::kUInt16:
    widen<uint16_t>(src, count, out);
    break;
  case DType::kInt32:
    widen<int32_t>(src, count, out);
    break;
  case DType::kInt64:
    for (size_t k = 0; k < count; ++k) {
      int64_t v = load<int64_t>(src + 8 * k);
      if (v < std::numeric_limits<int32_t>::min() ||
          v > std::numeric_limits<int32_t>::max())
        return absl::OutOfRangeError(absl::StrCat(
            prefix_, ".bin: token ", offset + k, " of sequence ", i, " is ", v,
            ", outside the int32 range of token ids"));
      out[k] = static_cast<int32_t>(v);
    }
    break;
  case DType::kFloat32:
  case DType::kFloat64:
    break; // Refused by checkRange.
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const uint8_t>>
IndexedDataset::SequenceBytes(size_t i) const {
  if (i >= numSequences_)
    return absl::OutOfRangeError(absl::StrCat(
        prefix_, ": sequence ", i, " does not exist, the dataset has ",
        numSequences_, " sequences"));
  size_t bytes = static_cast<size_t>(sequenceLength(i)) * dtypeSize(dtype_);
  if (bytes == 0)
    return absl::Span<const uint8_t>();
  return absl::Span<const uint8_t>(binMap_ + sequencePointer(i), bytes);
}

namespace {
/// The largest of `largest` and the T values in `bytes`.
template <typename T>
int64_t largestOf(absl::Span<const uint8_t> bytes, int64_t largest) {
  for (size_t k = 0; k + sizeof(T) <= bytes.size(); k += sizeof(T))
    largest = std::max<int64_t>(largest, load<T>(bytes.data() + k));
  return largest;
}
} // namespace

absl::StatusOr<int64_t> LargestTokenId(const IndexedDataset &dataset) {
  if (!isIntegerDtype(dataset.dtype()))
    return absl::InvalidArgumentError(
        absl::StrCat(dataset.prefix(), ": the dataset holds ",
                     dtypeName(dataset.dtype()), " values, not token ids"));
  if (dataset.numTokens() == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        dataset.prefix(), ": the dataset has no tokens, so no largest id"));
  int64_t largest = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < dataset.numSequences(); ++i) {
    absl::StatusOr<absl::Span<const uint8_t>> bytes = dataset.SequenceBytes(i);
    if (!bytes.ok())
      return bytes.status();
    switch (dataset.dtype()) {
    case DType::kUInt8:
      largest = largestOf<uint8_t>(*bytes, largest);
      break;
    case DType::kInt8:
      largest = largestOf<int8_t>(*bytes, largest);
      break;
    case DType::kInt16:
      largest = largestOf<int16_t>(*bytes, largest);
      break;
    case DType::kUInt16:
      largest = largestOf<uint16_t>(*bytes, largest);
      break;
    case DType::kInt32:
      largest = largestOf<int32_t>(*bytes, largest);
      break;
    case DType::kInt64:
      largest = largestOf<int64_t>(*bytes, largest);
      break;
    case DType::kFloat32:
    case DType::kFloat64:
      break; // Refused above.
    }
  }
  return largest;
}

//===----------------------------------------------------------------------===//
// IndexedDatasetWriter
//===----------------------------------------------------------------------===//

absl::StatusOr<IndexedDatasetWriter>
IndexedDatasetWriter::Create(const std::string &prefix, DType dtype) {
  if (!isIntegerDtype(dtype))
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ": the writer stores token ids; dtype ",
                     dtypeName(dtype), " is not an integer dtype"));
  IndexedDatasetWriter writer;
  writer.prefix_ = prefix;
  writer.dtype_ = dtype;
  const std::string binTmp = prefix + ".bin.tmp";
  writer.bin_ = std::fopen(binTmp.c_str(), "wb");
  if (!writer.bin_)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", binTmp));
  return writer;
}

IndexedDatasetWriter::IndexedDatasetWriter(
    IndexedDatasetWriter &&other) noexcept {
  *this = std::move(other);
}

IndexedDatasetWriter &
IndexedDatasetWriter::operator=(IndexedDatasetWriter &&other) noexcept {
  if (this == &other)
    return *this;
  abandon();
  prefix_ = std::move(other.prefix_);
  dtype_ = other.dtype_;
  bin_ = std::exchange(other.bin_, nullptr);
  binBytes_ = std::exchange(other.binBytes_, 0);
  lengths_ = std::move(other.lengths_);
  documentIndex_ = std::exchange(other.documentIndex_, {0});
  scratch_ = std::move(other.scratch_);
  return *this;
}

IndexedDatasetWriter::~IndexedDatasetWriter() { abandon(); }

void IndexedDatasetWriter::abandon() {
  // An unfinished writer leaves nothing behind: its .tmp files are partial.
  if (bin_) {
    std::fclose(bin_);
    bin_ = nullptr;
    std::remove((prefix_ + ".bin.tmp").c_str());
    std::remove((prefix_ + ".idx.tmp").c_str());
  }
}

absl::Status
IndexedDatasetWriter::AddSequence(absl::Span<const int64_t> tokens) {
  if (!bin_)
    return absl::FailedPreconditionError(absl::StrCat(
        prefix_, ": AddSequence on a writer that is finished or failed"));
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return absl::OutOfRangeError(
        absl::StrCat(prefix_, ": a sequence of ", tokens.size(),
                     " tokens does not fit the int32 sequence_lengths field"));
  int64_t lo, hi;
  dtypeRange(dtype_, &lo, &hi);
  for (size_t k = 0; k < tokens.size(); ++k)
    if (tokens[k] < lo || tokens[k] > hi)
      return absl::OutOfRangeError(
          absl::StrCat(prefix_, ": token ", k, " of sequence ", lengths_.size(),
                       " is ", tokens[k], ", outside the ", dtypeName(dtype_),
                       " range [", lo, ", ", hi, "]"));
  const size_t itemSize = dtypeSize(dtype_);
  scratch_.resize(tokens.size() * itemSize);
  for (size_t k = 0; k < tokens.size(); ++k)
    store(dtype_, tokens[k], scratch_.data() + k * itemSize);
  if (absl::Status s = writeAll(bin_, scratch_.data(), scratch_.size(),
                                prefix_ + ".bin.tmp");
      !s.ok()) {
    // The .bin may now hold part of the sequence: the writer cannot go on.
    abandon();
    return s;
  }
  binBytes_ += scratch_.size();
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::EndDocument() {
  if (!bin_)
    return absl::FailedPreconditionError(absl::StrCat(
        prefix_, ": EndDocument on a writer that is finished or failed"));
  documentIndex_.push_back(static_cast<int64_t>(lengths_.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Finish() {
  if (!bin_)
    return absl::FailedPreconditionError(absl::StrCat(
        prefix_, ": Finish on a writer that is finished or failed"));
  // Megatron's reader asserts document_indices[-1] == sequence_count; a
  // trailing open document would produce a file that it (and we) refuse.
  if (static_cast<size_t>(documentIndex_.back()) != lengths_.size())
    return absl::FailedPreconditionError(absl::StrCat(
        prefix_, ": ", lengths_.size() - documentIndex_.back(),
        " sequences were added after the last EndDocument; end the document "
        "before Finish"));
  const std::string binTmp = prefix_ + ".bin.tmp";
  const std::string idxTmp = prefix_ + ".idx.tmp";
  std::FILE *bin = std::exchange(bin_, nullptr);
  absl::Status status = syncAndClose(bin, binTmp);
  std::FILE *idx = nullptr;
  if (status.ok()) {
    idx = std::fopen(idxTmp.c_str(), "wb");
    if (!idx)
      status =
          absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", idxTmp));
  }
  if (status.ok()) {
    // Megatron's _IndexWriter, field by field.
    const uint64_t S = lengths_.size(), D = documentIndex_.size();
    std::vector<int64_t> pointers(lengths_.size());
    int64_t pointer = 0;
    for (size_t i = 0; i < lengths_.size(); ++i) {
      pointers[i] = pointer;
      pointer += static_cast<int64_t>(lengths_[i]) *
                 static_cast<int64_t>(dtypeSize(dtype_));
    }
    const uint8_t code = static_cast<uint8_t>(dtype_);
    for (absl::Status s : {writeAll(idx, kMagic, sizeof(kMagic), idxTmp),
                           writeValue<uint64_t>(idx, kVersion, idxTmp),
                           writeValue<uint8_t>(idx, code, idxTmp),
                           writeValue<uint64_t>(idx, S, idxTmp),
                           writeValue<uint64_t>(idx, D, idxTmp),
                           writeAll(idx, lengths_.data(), 4 * S, idxTmp),
                           writeAll(idx, pointers.data(), 8 * S, idxTmp),
                           writeAll(idx, documentIndex_.data(), 8 * D, idxTmp)})
      if (status.ok() && !s.ok())
        status = s;
    absl::Status closed = syncAndClose(std::exchange(idx, nullptr), idxTmp);
    if (status.ok())
      status = closed;
  }
  if (status.ok()) {
    // Publish: drop an older index first, so that a crash between the two
    // renames leaves a .bin without an .idx (visibly incomplete) rather than
    // a new .bin beside a stale .idx; the .idx goes last and marks the
    // dataset complete.
    const std::string binPath = prefix_ + ".bin", idxPath = prefix_ + ".idx";
    if (std::remove(idxPath.c_str()) != 0 && errno != ENOENT)
      status =
          absl::ErrnoToStatus(errno, absl::StrCat("cannot remove ", idxPath));
    else if (std::rename(binTmp.c_str(), binPath.c_str()) != 0)
      status = absl::ErrnoToStatus(
          errno, absl::StrCat("cannot rename ", binTmp, " to ", binPath));
    else if (std::rename(idxTmp.c_str(), idxPath.c_str()) != 0)
      status = absl::ErrnoToStatus(
          errno, absl::StrCat("cannot rename ", idxTmp, " to ", idxPath));
  }
  if (!status.ok()) {
    std::remove(binTmp.c_str());
    std::remove(idxTmp.c_str());
    return status;
  }
  // The renames are durable only once the directory is synced.
  std::string dir = ".";
  if (size_t slash = prefix_.rfind('/'); slash != std::string::npos)
    dir = slash == 0 ? "/" : prefix_.substr(0, slash);
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
  return absl::OkStatus();
}

} // namespace braid::data
