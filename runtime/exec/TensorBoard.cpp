//===- TensorBoard.cpp - Scalars in TensorBoard's event files -------------===//

#include "runtime/exec/TensorBoard.h"

#include "runtime/common/OutputFile.h"

#include "absl/strings/str_cat.h"

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace braid::exec {
namespace {

namespace fs = std::filesystem;

/// The file_version of the first event: TensorBoard reads version 2 files
/// as written by tf.summary.
constexpr absl::string_view kFileVersion = "brain.Event:2";

/// CRC32C's byte table: entry i is the CRC of the byte i (reflected, so the
/// register shifts right and the polynomial is 0x82F63B78).
constexpr std::array<uint32_t, 256> makeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = makeCrcTable();

// The protobuf wire format: a field is its key (field number << 3 | wire
// type) as a varint, then its value: a varint (type 0), 8 little-endian
// bytes (type 1), a varint length and that many bytes (type 2) or 4
// little-endian bytes (type 5).
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kBytes = 2,
  kFixed32 = 5
};

void putVarint(std::string &out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char(uint8_t(value) | 0x80));
    value >>= 7;
  }
  out.push_back(char(uint8_t(value)));
}

void putKey(std::string &out, uint32_t field, WireType type) {
  putVarint(out, uint64_t(field) << 3 | type);
}

/// Little-endian whatever the host's byte order.
void putLittleEndian(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(char(uint8_t(value >> (8 * i))));
}

void putDouble(std::string &out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  putKey(out, field, kFixed64);
  putLittleEndian(out, bits, 8);
}

void putFloat(std::string &out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  putKey(out, field, kFixed32);
  putLittleEndian(out, bits, 4);
}

/// int64 is a varint of the two's complement (ten bytes when negative).
void putInt64(std::string &out, uint32_t field, int64_t value) {
  putKey(out, field, kVarint);
  putVarint(out, uint64_t(value));
}

void putBytes(std::string &out, uint32_t field, absl::string_view bytes) {
  putKey(out, field, kBytes);
  putVarint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

// tensorflow.Event's fields, Summary's and Summary.Value's.
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3,
                   kEventSummary = 5, kEventSessionLog = 7;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;
// tensorflow.SessionLog's status field and its START value.
constexpr uint32_t kSessionLogStatus = 1;
constexpr uint64_t kSessionLogStart = 1;

double wallTimeNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0')
    return "localhost";
  return name;
}

} // namespace

uint32_t Crc32c(absl::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (char c : data)
    crc = kCrcTable[(crc ^ uint8_t(c)) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string
EncodeScalarEvent(double wallTime, int64_t step,
                  absl::Span<const std::pair<std::string, double>> scalars) {
  std::string summary;
  for (const auto &[tag, value] : scalars) {
    std::string entry;
    putBytes(entry, kValueTag, tag);
    // simple_value sits in a oneof: written even when 0, so that readers
    // see which kind of value it is.
    putFloat(entry, kValueSimpleValue, float(value));
    putBytes(summary, kSummaryValue, entry);
  }
  std::string event;
  putDouble(event, kEventWallTime, wallTime);
  putInt64(event, kEventStep, step);
  putBytes(event, kEventSummary, summary);
  return event;
}

std::string EncodeSessionStartEvent(double wallTime, int64_t step) {
  std::string sessionLog;
  putKey(sessionLog, kSessionLogStatus, kVarint);
  putVarint(sessionLog, kSessionLogStart);
  std::string event;
  putDouble(event, kEventWallTime, wallTime);
  putInt64(event, kEventStep, step);
  putBytes(event, kEventSessionLog, sessionLog);
  return event;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>>
TensorBoardWriter::Open(const std::string &dir) {
  if (dir.empty())
    return absl::InvalidArgumentError(
        "no TensorBoard directory named (an empty path)");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return absl::FailedPreconditionError(
        absl::StrCat("the TensorBoard directory ", dir, " is not a directory"));
  fs::create_directories(dir, ec);
  if (ec)
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the TensorBoard directory ", dir, ": ", ec.message()));
  if (!fs::is_directory(dir, ec))
    return absl::FailedPreconditionError(
        absl::StrCat("cannot use ", dir, " as the TensorBoard directory: ",
                     ec ? ec.message() : std::string("it is not a directory")));
  // Unique per host and process; within a process (a second writer in the
  // same second) a counter tells the files apart. TensorBoard reads the
  // files of a directory in name order, which the leading time keeps in
  // the order they were written.
  const std::string stem =
      absl::StrCat("events.out.tfevents.",
                   std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count(),
                   ".", hostName(), ".", ::getpid());
  std::string path;
  for (int n = 0;; ++n) {
    path = (fs::path(dir) / (n == 0 ? absl::StrCat(stem, ".braid")
                                    : absl::StrCat(stem, ".", n, ".braid")))
               .string();
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0)
      break;
  }
  // In place, not through a temporary renamed at the end: TensorBoard reads
  // the file while it grows.
  common::OutputFile::Options options;
  options.inPlace = true;
  absl::StatusOr<std::unique_ptr<common::OutputFile>> file =
      common::OutputFile::Open(path, options);
  if (!file.ok())
    return absl::Status(
        file.status().code(),
        absl::StrCat("cannot create an events file in the TensorBoard "
                     "directory ",
                     dir, ": ", file.status().message()));
  std::unique_ptr<TensorBoardWriter> writer(
      new TensorBoardWriter(path, std::move(*file)));
  std::string first;
  putDouble(first, kEventWallTime, wallTimeNow());
  putBytes(first, kEventFileVersion, kFileVersion);
  absl::Status written = writer->writeRecord(first);
  if (written.ok())
    written = writer->Flush();
  if (!written.ok()) {
    // A file without its version event is no events file: leave none.
    writer.reset();
    std::remove(path.c_str());
    return absl::Status(
        written.code(),
        absl::StrCat("cannot write into the TensorBoard directory ", dir, ": ",
                     written.message()));
  }
  return writer;
}

TensorBoardWriter::TensorBoardWriter(std::string path,
                                     std::unique_ptr<common::OutputFile> file)
    : path_(std::move(path)), file_(std::move(file)) {}

TensorBoardWriter::~TensorBoardWriter() = default;

absl::Status TensorBoardWriter::writeRecord(absl::string_view data) {
  if (!file_)
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " is already closed"));
  std::string record;
  record.reserve(data.size() + 16);
  putLittleEndian(record, data.size(), 8);
  putLittleEndian(record, MaskedCrc32c(record), 4);
  record.append(data.data(), data.size());
  putLittleEndian(record, MaskedCrc32c(data), 4);
  return file_->Write(record);
}

absl::Status TensorBoardWriter::AddScalars(
    int64_t step, absl::Span<const std::pair<std::string, double>> scalars) {
  for (const auto &scalar : scalars)
    if (scalar.first.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "a scalar without a tag at step ", step, " for ", path_));
  return writeRecord(EncodeScalarEvent(wallTimeNow(), step, scalars));
}

absl::Status TensorBoardWriter::AddSessionStart(int64_t step) {
  return writeRecord(EncodeSessionStartEvent(wallTimeNow(), step));
}

absl::Status TensorBoardWriter::Flush() {
  if (!file_)
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " is already closed"));
  return file_->Flush();
}

absl::Status TensorBoardWriter::Close() {
  if (!file_)
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " is already closed"));
  absl::Status committed = file_->Commit();
  file_.reset();
  return committed;
}

} // namespace braid::exec
