//===- Safetensors.h - Hugging Face safetensors reader and writer -*- C++ -*-===//
//
// The safetensors format (https://github.com/huggingface/safetensors), all
// little endian:
//   uint64     N, the length of the header in bytes
//   char[N]    a UTF-8 JSON object:
//                {"__metadata__": {"key": "value", ...},      (optional)
//                 "<name>": {"dtype": "F32", "shape": [2, 3],
//                            "data_offsets": [begin, end]}, ...}
//              possibly followed by spaces (writers pad it to 8 bytes)
//   bytes      the data buffer; tensor <name> is bytes [begin, end) of it,
//              row major, little endian.
// The tensors must cover the buffer exactly: sorted by offset, each starts
// where the previous one ends, the first at 0 and the last at the end of the
// file; end - begin == product(shape) * dtype size (an empty shape is a
// scalar, one element).
//
// The file is mapped read only and the whole header is validated in Open, so
// no later read can leave the mapping whatever the file contains.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CKPT_SAFETENSORS_H
#define BRAID_RUNTIME_CKPT_SAFETENSORS_H

#include "runtime/common/Float16.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace braid::ckpt {

/// The element types of safetensors, in the order of the reference
/// implementation's `Dtype` enum (increasing alignment): the writer sorts
/// tensors by this order, descending, as the reference does, so the values
/// must keep this order.
enum class Dtype : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

/// The Dtype of a header name ("F32", "BF16", ...), or InvalidArgument
/// naming the name and the known ones.
absl::StatusOr<Dtype> dtypeFromName(absl::string_view name);
/// The header name: "F32", "BF16", ...
absl::string_view dtypeName(Dtype dtype);
/// Bytes per element.
size_t dtypeSize(Dtype dtype);
/// Whether ReadAsFloat32/ReadAsFloat64 convert from this dtype (F16, BF16,
/// F32, F64).
bool isConvertibleToFloat(Dtype dtype);

// halfToFloat and bfloat16ToFloat: runtime/common/Float16.h.
using braid::bfloat16ToFloat;
using braid::halfToFloat;

/// One tensor of a file, as its header describes it (validated).
struct TensorInfo {
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  /// product(shape); 1 for a scalar.
  uint64_t numElements = 1;
  /// Byte offsets in the data buffer, [begin, end).
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// "[4096, 1024]", as messages print shapes.
std::string shapeToString(absl::Span<const int64_t> shape);

/// A read-only, memory-mapped safetensors file. Movable, not copyable; the
/// mapping lives as long as the object.
class SafetensorsFile {
public:
  /// The reference reader's limit on the header length.
  static constexpr uint64_t kMaxHeaderSize = 100'000'000;

  /// Maps `path` and validates its header completely. Errors: NotFound (or
  /// the errno's code) for a file that cannot be opened; DataLoss for a
  /// truncated file (shorter than 8 bytes, header or data beyond its end,
  /// bytes after the last tensor); InvalidArgument for everything else a
  /// well-formed file cannot hold (malformed JSON, unknown dtype, bad shape,
  /// bad offsets, size mismatch, overlaps, holes, duplicate names). Every
  /// message starts with the path and names the tensor.
  static absl::StatusOr<SafetensorsFile> Open(const std::string &path);

  SafetensorsFile(SafetensorsFile &&other) noexcept;
  SafetensorsFile &operator=(SafetensorsFile &&other) noexcept;
  SafetensorsFile(const SafetensorsFile &) = delete;
  SafetensorsFile &operator=(const SafetensorsFile &) = delete;
  ~SafetensorsFile();

  const std::string &path() const { return path_; }
  /// The tensor names, sorted.
  const std::vector<std::string> &names() const { return names_; }
  bool contains(absl::string_view name) const;
  /// The "__metadata__" object (empty if the file has none).
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }

  /// The dtype, shape and offsets of `name`; NotFound naming the file.
  absl::StatusOr<TensorInfo> Info(absl::string_view name) const;
  /// The raw little-endian bytes of `name`, pointing into the mapping (not
  /// necessarily aligned: read them with memcpy).
  absl::StatusOr<absl::Span<const uint8_t>> Bytes(absl::string_view name) const;

  /// Converts tensor `name` (F32, F16, BF16 or F64) to float32 into `out`,
  /// whose size must be the tensor's element count. Errors: NotFound,
  /// InvalidArgument for a size mismatch or a dtype that is not a float
  /// dtype, OutOfRange for a finite F64 value beyond the float32 range.
  absl::Status ReadAsFloat32(absl::string_view name, absl::Span<float> out) const;
  /// As ReadAsFloat32, to float64 (exact for every dtype).
  absl::Status ReadAsFloat64(absl::string_view name,
                             absl::Span<double> out) const;

private:
  SafetensorsFile() = default;
  absl::StatusOr<const TensorInfo *> find(absl::string_view name) const;
  void release();

  std::string path_;
  const uint8_t *map_ = nullptr;
  size_t size_ = 0;
  /// Offset of the data buffer in the file: 8 + N.
  uint64_t dataStart_ = 0;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

/// One tensor to write: `data` holds product(shape) * dtypeSize(dtype)
/// little-endian bytes, row major.
struct TensorToWrite {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> data;
};

/// Writes a safetensors file byte-identical to what the reference
/// implementation (safetensors' `serialize_to_file`, used by
/// `safetensors.torch.save_file`) writes for the same tensors: tensors sorted
/// by dtype alignment, descending, then by name (so, within one dtype, by
/// name); compact JSON with "__metadata__" first (omitted when `metadata` is
/// empty; its keys sorted, where the reference's order is a hash map's),
/// then the tensors as {"dtype":..,"shape":..,"data_offsets":[b,e]}; the
/// header padded with spaces to a multiple of 8 bytes. The bytes go to
/// PATH.tmp, which is synced and renamed to PATH, so an interrupted write
/// never leaves a PATH that looks complete. InvalidArgument (and nothing
/// written) for a duplicate or reserved ("__metadata__") name, a negative
/// dimension, or data whose size does not match the shape and dtype.
/// `written`, when given, receives the file's size and CRC-32.
struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};
absl::Status WriteSafetensors(const std::string &path,
                              absl::Span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string> &metadata,
                              WrittenFile *written = nullptr);

/// The CRC-32 (zlib's, as Python's zlib.crc32) of `bytes`, continuing `crc`.
uint32_t Crc32(absl::Span<const uint8_t> bytes, uint32_t crc = 0);

} // namespace braid::ckpt

#endif // BRAID_RUNTIME_CKPT_SAFETENSORS_H
