//===- Safetensors.cpp - Hugging Face safetensors reader and writer -------===//
//
// Open parses the JSON header with protobuf's JSON parser into a
// google.protobuf.Struct (as the rest of the runtime parses JSON), then checks
// every entry against the format before any accessor can run: the accessors
// need no checks beyond their arguments.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Json.h"
#include "runtime/ckpt/Safetensors.h"

#include "runtime/common/JsonString.h"
#include "runtime/common/OutputFile.h"

#include "runtime/common/MappedFile.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <utility>

// The format is little endian and the reader loads elements with memcpy; a
// big-endian host would need byte swaps everywhere.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the safetensors reader assumes a little-endian host"
#endif

namespace braid::ckpt {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

struct DtypeEntry {
  Dtype dtype;
  const char *name;
  size_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {Dtype::kBool, "BOOL", 1},     {Dtype::kU8, "U8", 1},
    {Dtype::kI8, "I8", 1},         {Dtype::kF8E5M2, "F8_E5M2", 1},
    {Dtype::kF8E4M3, "F8_E4M3", 1}, {Dtype::kI16, "I16", 2},
    {Dtype::kU16, "U16", 2},       {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},     {Dtype::kI32, "I32", 4},
    {Dtype::kU32, "U32", 4},       {Dtype::kF32, "F32", 4},
    {Dtype::kF64, "F64", 8},       {Dtype::kI64, "I64", 8},
    {Dtype::kU64, "U64", 8},
};

/// The largest integer a JSON number (a double in a Struct) holds exactly.
constexpr double kMaxExactInteger = 9007199254740992.0; // 2^53

template <typename T> T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

/// A JSON number as the file spells it: integers in full, others with 17
/// significant digits.
std::string numberString(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e21)
    return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.17g", v);
}

/// A JSON number that must be a non-negative integer, exactly representable.
absl::StatusOr<uint64_t> nonNegativeInteger(const Value &value,
                                            absl::string_view what) {
  if (value.kind_case() != Value::kNumberValue)
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", common::JsonKindName(value), ", not an integer"));
  double v = value.number_value();
  if (!std::isfinite(v) || v != std::floor(v))
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", numberString(v), ", not an integer"));
  if (v < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is negative (", numberString(v), ")"));
  if (v > kMaxExactInteger)
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", numberString(v),
        ", beyond 2^53 (not a plausible size or offset)"));
  return static_cast<uint64_t>(v);
}


/// Parses one tensor entry of the header into `info` (everything but the
/// checks that need the other tensors or the file size).
absl::Status parseTensorEntry(const std::string &name, const Value &entry,
                              TensorInfo *info) {
  const std::string where = absl::StrCat("tensor \"", name, "\": ");
  if (entry.kind_case() != Value::kStructValue)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "its entry is ", common::JsonKindName(entry),
        ", not an object with dtype, shape and data_offsets"));
  const auto &fields = entry.struct_value().fields();
  for (const char *key : {"dtype", "shape", "data_offsets"})
    if (fields.find(key) == fields.end())
      return absl::InvalidArgumentError(
          absl::StrCat(where, "its entry has no \"", key, "\""));

  const Value &dtype = fields.at("dtype");
  if (dtype.kind_case() != Value::kStringValue)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "dtype is ", common::JsonKindName(dtype), ", not a string"));
  absl::StatusOr<Dtype> parsed = dtypeFromName(dtype.string_value());
  if (!parsed.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(where, parsed.status().message()));
  info->dtype = *parsed;

  const Value &shape = fields.at("shape");
  if (shape.kind_case() != Value::kListValue)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "shape is ", common::JsonKindName(shape), ", not an array"));
  info->shape.clear();
  uint64_t elements = 1;
  bool overflow = false;
  for (int d = 0; d < shape.list_value().values_size(); ++d) {
    absl::StatusOr<uint64_t> dim = nonNegativeInteger(
        shape.list_value().values(d), absl::StrCat("shape[", d, "]"));
    if (!dim.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(where, dim.status().message()));
    info->shape.push_back(static_cast<int64_t>(*dim));
    overflow |= __builtin_mul_overflow(elements, *dim, &elements);
  }
  uint64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(elements, dtypeSize(info->dtype),
                                         &bytes))
    return absl::InvalidArgumentError(
        absl::StrCat(where, "shape ", shapeToString(info->shape), " of ",
                     dtypeName(info->dtype),
                     " overflows 64 bits when multiplied out"));
  info->numElements = elements;

  const Value &offsets = fields.at("data_offsets");
  if (offsets.kind_case() != Value::kListValue ||
      offsets.list_value().values_size() != 2)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "data_offsets must be an array [begin, end], got ",
        offsets.kind_case() == Value::kListValue
            ? absl::StrCat("an array of ", offsets.list_value().values_size(),
                           " values")
            : std::string(common::JsonKindName(offsets))));
  absl::StatusOr<uint64_t> begin =
      nonNegativeInteger(offsets.list_value().values(0), "data_offsets[0]");
  if (!begin.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(where, begin.status().message()));
  absl::StatusOr<uint64_t> end =
      nonNegativeInteger(offsets.list_value().values(1), "data_offsets[1]");
  if (!end.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(where, end.status().message()));
  if (*begin > *end)
    return absl::InvalidArgumentError(
        absl::StrCat(where, "data_offsets [", *begin, ", ", *end,
                     "] end before they begin"));
  if (*end - *begin != bytes)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "data_offsets [", *begin, ", ", *end, "] span ",
        *end - *begin, " bytes but shape ", shapeToString(info->shape),
        " of ", dtypeName(info->dtype), " needs ", bytes, " bytes"));
  info->begin = *begin;
  info->end = *end;
  return absl::OkStatus();
}

} // namespace

//===----------------------------------------------------------------------===//
// Dtypes and conversions
//===----------------------------------------------------------------------===//

absl::StatusOr<Dtype> dtypeFromName(absl::string_view name) {
  for (const DtypeEntry &e : kDtypes)
    if (name == e.name)
      return e.dtype;
  std::vector<std::string> known;
  for (const DtypeEntry &e : kDtypes)
    known.push_back(e.name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name,
                   "\" (known: ", absl::StrJoin(known, ", "), ")"));
}

absl::string_view dtypeName(Dtype dtype) {
  return kDtypes[static_cast<size_t>(dtype)].name;
}

size_t dtypeSize(Dtype dtype) {
  return kDtypes[static_cast<size_t>(dtype)].size;
}

bool isConvertibleToFloat(Dtype dtype) {
  return dtype == Dtype::kF16 || dtype == Dtype::kBF16 ||
         dtype == Dtype::kF32 || dtype == Dtype::kF64;
}

std::string shapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

//===----------------------------------------------------------------------===//
// SafetensorsFile
//===----------------------------------------------------------------------===//

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string &path) {
  SafetensorsFile file;
  file.path_ = path;
  if (absl::Status s = common::mapFile(path, &file.map_, &file.size_); !s.ok())
    return s;
  const std::string where = absl::StrCat(path, ": ");
  if (file.size_ < 8)
    return absl::DataLossError(absl::StrCat(
        where, "the file is ", file.size_,
        " bytes, too short for the 8-byte header length of a safetensors "
        "file"));
  const uint64_t headerSize = load<uint64_t>(file.map_);
  if (headerSize > kMaxHeaderSize)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "header length ", headerSize, " exceeds the format's limit of ",
        kMaxHeaderSize, " bytes (not a safetensors file, or a corrupt one)"));
  if (headerSize > file.size_ - 8)
    return absl::DataLossError(absl::StrCat(
        where, "header length ", headerSize,
        " goes beyond the end of the file (", file.size_, " bytes, so at most ",
        file.size_ - 8, " bytes of header): truncated file?"));
  file.dataStart_ = 8 + headerSize;
  const uint64_t bufferSize = file.size_ - file.dataStart_;

  const std::string header(reinterpret_cast<const char *>(file.map_ + 8),
                           headerSize);
  if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(header), "{"))
    return absl::InvalidArgumentError(absl::StrCat(
        where, "the header is not a JSON object (it starts with \"",
        absl::CHexEscape(absl::ClippedSubstr(header, 0, 16)), "\")"));
  Struct root;
  if (absl::Status parsed = common::JsonToMessage(header, &root);
      !parsed.ok()) {
    std::string message(parsed.message());
    if (absl::StrContains(message, "Repeated map key"))
      return absl::InvalidArgumentError(absl::StrCat(
          where, "a key appears twice in the JSON header (a duplicate "
                 "tensor name?): ",
          message));
    return absl::InvalidArgumentError(
        absl::StrCat(where, "malformed JSON header: ", message));
  }

  for (const auto &[key, value] : root.fields()) {
    if (key == "__metadata__") {
      if (value.kind_case() != Value::kStructValue)
        return absl::InvalidArgumentError(absl::StrCat(
            where, "__metadata__ is ", common::JsonKindName(value),
            ", not an object of strings"));
      for (const auto &[mk, mv] : value.struct_value().fields()) {
        if (mv.kind_case() != Value::kStringValue)
          return absl::InvalidArgumentError(
              absl::StrCat(where, "__metadata__ key \"", mk, "\" is ",
                           common::JsonKindName(mv), ", not a string"));
        file.metadata_[mk] = mv.string_value();
      }
      continue;
    }
    TensorInfo info;
    if (absl::Status s = parseTensorEntry(key, value, &info); !s.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
    if (info.end > bufferSize)
      return absl::DataLossError(absl::StrCat(
          where, "tensor \"", key, "\": data_offsets [", info.begin, ", ",
          info.end, "] go beyond the end of the file (the data buffer is ",
          bufferSize, " bytes): truncated file?"));
    file.tensors_.emplace(key, std::move(info));
  }

  // The tensors must tile the buffer: sorted by offset, each starts where the
  // previous one ends, and the last one ends at the end of the file.
  std::vector<std::pair<const std::string *, const TensorInfo *>> byOffset;
  for (const auto &[name, info] : file.tensors_) {
    byOffset.emplace_back(&name, &info);
    file.names_.push_back(name);
  }
  std::sort(byOffset.begin(), byOffset.end(), [](const auto &a, const auto &b) {
    if (a.second->begin != b.second->begin)
      return a.second->begin < b.second->begin;
    if (a.second->end != b.second->end)
      return a.second->end < b.second->end;
    return *a.first < *b.first;
  });
  uint64_t covered = 0;
  const std::string *previous = nullptr;
  for (const auto &[name, info] : byOffset) {
    if (info->begin < covered)
      return absl::InvalidArgumentError(absl::StrCat(
          where, "tensor \"", *name, "\" (bytes [", info->begin, ", ",
          info->end, ")) overlaps tensor \"", *previous,
          "\" (which ends at byte ", covered, ")"));
    if (info->begin > covered)
      return absl::InvalidArgumentError(absl::StrCat(
          where, "bytes [", covered, ", ", info->begin,
          ") of the data buffer belong to no tensor (a hole before tensor \"",
          *name, "\")"));
    covered = info->end;
    previous = name;
  }
  if (covered != bufferSize)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "bytes [", covered, ", ", bufferSize,
        ") of the data buffer belong to no tensor (",
        bufferSize - covered, " bytes after the last tensor)"));
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile &&other) noexcept {
  *this = std::move(other);
}

SafetensorsFile &SafetensorsFile::operator=(SafetensorsFile &&other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
    dataStart_ = other.dataStart_;
    tensors_ = std::move(other.tensors_);
    names_ = std::move(other.names_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() {
  if (map_)
    common::unmapFile(map_, size_);
  map_ = nullptr;
  size_ = 0;
}

bool SafetensorsFile::contains(absl::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

absl::StatusOr<const TensorInfo *>
SafetensorsFile::find(absl::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    return absl::NotFoundError(
        absl::StrCat(path_, ": no tensor \"", name, "\" in the file"));
  return &it->second;
}

absl::StatusOr<TensorInfo> SafetensorsFile::Info(absl::string_view name) const {
  absl::StatusOr<const TensorInfo *> info = find(name);
  if (!info.ok())
    return info.status();
  return **info;
}

absl::StatusOr<absl::Span<const uint8_t>>
SafetensorsFile::Bytes(absl::string_view name) const {
  absl::StatusOr<const TensorInfo *> info = find(name);
  if (!info.ok())
    return info.status();
  const TensorInfo &t = **info;
  if (t.end == t.begin)
    return absl::Span<const uint8_t>();
  return absl::Span<const uint8_t>(map_ + dataStart_ + t.begin,
                                   t.end - t.begin);
}

namespace {

absl::Status checkReadable(const std::string &path, absl::string_view name,
                           const TensorInfo &info, size_t outSize,
                           absl::string_view to) {
  if (!isConvertibleToFloat(info.dtype))
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor \"", name, "\" has dtype ", dtypeName(info.dtype),
        ", which cannot be read as ", to, " (only F16, BF16, F32, F64 can)"));
  if (outSize != info.numElements)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor \"", name, "\" has ", info.numElements,
        " elements (shape ", shapeToString(info.shape),
        ") but the destination holds ", outSize));
  return absl::OkStatus();
}

} // namespace

absl::Status SafetensorsFile::ReadAsFloat32(absl::string_view name,
                                            absl::Span<float> out) const {
  absl::StatusOr<const TensorInfo *> found = find(name);
  if (!found.ok())
    return found.status();
  const TensorInfo &info = **found;
  if (absl::Status s = checkReadable(path_, name, info, out.size(), "float32");
      !s.ok())
    return s;
  const uint8_t *src = map_ + dataStart_ + info.begin;
  const size_t n = out.size();
  switch (info.dtype) {
  case Dtype::kF32:
    if (n)
      std::memcpy(out.data(), src, n * 4);
    return absl::OkStatus();
  case Dtype::kF16:
    for (size_t i = 0; i < n; ++i)
      out[i] = halfToFloat(load<uint16_t>(src + 2 * i));
    return absl::OkStatus();
  case Dtype::kBF16:
    for (size_t i = 0; i < n; ++i)
      out[i] = bfloat16ToFloat(load<uint16_t>(src + 2 * i));
    return absl::OkStatus();
  case Dtype::kF64:
    for (size_t i = 0; i < n; ++i) {
      double v = load<double>(src + 8 * i);
      // Converting a finite double beyond the float range is undefined
      // behaviour in C++, and such a weight is corrupt anyway.
      if (std::isfinite(v) && std::fabs(v) > FLT_MAX)
        return absl::OutOfRangeError(absl::StrCat(
            path_, ": tensor \"", name, "\": element ", i, " (", v,
            ") is beyond the float32 range"));
      out[i] = static_cast<float>(v);
    }
    return absl::OkStatus();
  default:
    return absl::InternalError("unreachable dtype");
  }
}

absl::Status SafetensorsFile::ReadAsFloat64(absl::string_view name,
                                            absl::Span<double> out) const {
  absl::StatusOr<const TensorInfo *> found = find(name);
  if (!found.ok())
    return found.status();
  const TensorInfo &info = **found;
  if (absl::Status s = checkReadable(path_, name, info, out.size(), "float64");
      !s.ok())
    return s;
  const uint8_t *src = map_ + dataStart_ + info.begin;
  const size_t n = out.size();
  switch (info.dtype) {
  case Dtype::kF64:
    if (n)
      std::memcpy(out.data(), src, n * 8);
    return absl::OkStatus();
  case Dtype::kF32:
    for (size_t i = 0; i < n; ++i)
      out[i] = load<float>(src + 4 * i);
    return absl::OkStatus();
  case Dtype::kF16:
    for (size_t i = 0; i < n; ++i)
      out[i] = halfToFloat(load<uint16_t>(src + 2 * i));
    return absl::OkStatus();
  case Dtype::kBF16:
    for (size_t i = 0; i < n; ++i)
      out[i] = bfloat16ToFloat(load<uint16_t>(src + 2 * i));
    return absl::OkStatus();
  default:
    return absl::InternalError("unreachable dtype");
  }
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

uint32_t Crc32(absl::Span<const uint8_t> bytes, uint32_t crc) {
  return uint32_t(crc32_z(crc, bytes.data(), bytes.size()));
}

absl::Status WriteSafetensors(
    const std::string &path, absl::Span<const TensorToWrite> tensors,
    const std::map<std::string, std::string> &metadata, WrittenFile *written) {
  const std::string where = absl::StrCat("cannot write ", path, ": ");
  std::vector<const TensorToWrite *> order;
  for (const TensorToWrite &t : tensors) {
    if (t.name == "__metadata__")
      return absl::InvalidArgumentError(absl::StrCat(
          where, "\"__metadata__\" is reserved and cannot name a tensor"));
    uint64_t elements = 1;
    bool overflow = false;
    for (int64_t d : t.shape) {
      if (d < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(where, "tensor \"", t.name, "\" has shape ",
                         shapeToString(t.shape), " with a negative dimension"));
      overflow |= __builtin_mul_overflow(elements, static_cast<uint64_t>(d),
                                         &elements);
    }
    uint64_t bytes = 0;
    if (overflow ||
        __builtin_mul_overflow(elements, dtypeSize(t.dtype), &bytes) ||
        bytes != t.data.size())
      return absl::InvalidArgumentError(absl::StrCat(
          where, "tensor \"", t.name, "\" has ", t.data.size(),
          " bytes of data but shape ", shapeToString(t.shape), " of ",
          dtypeName(t.dtype), " needs ",
          overflow ? std::string("more than 2^64") : absl::StrCat(bytes)));
    order.push_back(&t);
  }
  // The reference's order: dtype alignment descending, then name.
  std::sort(order.begin(), order.end(),
            [](const TensorToWrite *a, const TensorToWrite *b) {
              if (a->dtype != b->dtype)
                return a->dtype > b->dtype;
              return a->name < b->name;
            });
  {
    std::vector<absl::string_view> names;
    for (const TensorToWrite &t : tensors)
      names.push_back(t.name);
    std::sort(names.begin(), names.end());
    auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup != names.end())
      return absl::InvalidArgumentError(
          absl::StrCat(where, "two tensors are named \"", *dup, "\""));
  }

  std::string header = "{";
  bool first = true;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool firstKey = true;
    for (const auto &[key, value] : metadata) {
      if (!firstKey)
        header.push_back(',');
      firstKey = false;
      common::AppendJsonString(header, key);
      header.push_back(':');
      common::AppendJsonString(header, value);
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const TensorToWrite *t : order) {
    if (!first)
      header.push_back(',');
    first = false;
    common::AppendJsonString(header, t->name);
    absl::StrAppend(&header, ":{\"dtype\":\"", dtypeName(t->dtype),
                    "\",\"shape\":[", absl::StrJoin(t->shape, ","),
                    "],\"data_offsets\":[", offset, ",",
                    offset + t->data.size(), "]}");
    offset += t->data.size();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  // Synced before it is renamed into place: a checkpoint's commit counts
  // on its files being on disk.
  common::OutputFile::Options options;
  options.sync = true;
  absl::StatusOr<std::unique_ptr<common::OutputFile>> f =
      common::OutputFile::Open(path, options);
  if (!f.ok())
    return f.status();
  const uint64_t n = header.size();
  if (absl::Status s = (*f)->Write(&n, 8); !s.ok())
    return s;
  if (absl::Status s = (*f)->Write(header); !s.ok())
    return s;
  uint32_t crc = 0;
  if (written) {
    crc = Crc32(absl::Span<const uint8_t>(
        reinterpret_cast<const uint8_t *>(&n), 8));
    crc = Crc32(absl::Span<const uint8_t>(
                    reinterpret_cast<const uint8_t *>(header.data()),
                    header.size()),
                crc);
  }
  for (const TensorToWrite *t : order) {
    if (absl::Status s = (*f)->Write(t->data.data(), t->data.size()); !s.ok())
      return s;
    if (written)
      crc = Crc32(t->data, crc);
  }
  if (absl::Status s = (*f)->Commit(); !s.ok())
    return s;
  if (written)
    *written = {8 + n + offset, crc};
  return absl::OkStatus();
}

} // namespace braid::ckpt
