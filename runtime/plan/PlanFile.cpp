//===- PlanFile.cpp - The plan file: its frame, reading and writing -------===//
//
// The frame (runtime/plan/PlanLoader.h) around the serialized Plan; parsing
// ends with ValidatePlan (runtime/plan/PlanValidation.cpp).
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/logging.h"
#include "runtime/common/OutputFile.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <sys/stat.h>

namespace braid::plan {
namespace {

constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'P', 'L', 'N'};
constexpr size_t kHeaderBytes = 20;

/// Routes protobuf's log lines (why a message did not parse) into a string
/// while it lives, and restores the previous handler after. Protobuf's
/// handler is process-wide: loading a plan is not meant to race with other
/// protobuf parsing.
class ProtobufLogCapture {
public:
  explicit ProtobufLogCapture(std::string *into) {
    target() = into;
    previous_ = google::protobuf::SetLogHandler(&handle);
  }
  ~ProtobufLogCapture() {
    google::protobuf::SetLogHandler(previous_);
    target() = nullptr;
  }

private:
  static std::string *&target() {
    static std::string *into = nullptr;
    return into;
  }
  static void handle(google::protobuf::LogLevel, const char *, int,
                     const std::string &message) {
    if (std::string *into = target()) {
      if (!into->empty())
        into->append("; ");
      into->append(message);
    }
  }
  google::protobuf::LogHandler *previous_;
};
void putLE(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(char((value >> (8 * i)) & 0xff));
}

uint64_t getLE(absl::string_view in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= uint64_t(uint8_t(in[at + i])) << (8 * i);
  return value;
}

} // namespace

uint32_t Crc32(absl::string_view data) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (char ch : data)
    crc = table[(crc ^ uint8_t(ch)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::string SerializePlanFile(const Plan &plan) {
  // Deterministic: map fields (an instruction's attributes) in key order,
  // so that one compile gives the same bytes every time.
  std::string payload;
  {
    google::protobuf::io::StringOutputStream stream(&payload);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    plan.SerializeToCodedStream(&coded);
  }
  std::string out(kMagic, sizeof(kMagic));
  putLE(out, payload.size(), 8);
  putLE(out, Crc32(payload), 4);
  out += payload;
  return out;
}

absl::Status WritePlanFile(const Plan &plan, const std::string &path) {
  std::string bytes = SerializePlanFile(plan);
  if (bytes.size() - kHeaderBytes > uint64_t(kMaxPlanPayloadBytes))
    return absl::ResourceExhaustedError(absl::StrCat(
        "the plan for ", path, " serializes to ", bytes.size() - kHeaderBytes,
        " bytes, more than a plan file may hold (", kMaxPlanPayloadBytes,
        ")"));
  common::OutputFile::Options options;
  options.sync = true;
  return common::WriteOutputFile(path, bytes, options);
}

absl::StatusOr<Plan> ParsePlanFile(absl::string_view bytes,
                                   absl::string_view source) {
  if (bytes.size() < kHeaderBytes ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a Braid plan file (no BRAIDPLN header)"));
  uint64_t length = getLE(bytes, 8, 8);
  uint32_t crc = uint32_t(getLE(bytes, 16, 4));
  if (length > uint64_t(kMaxPlanPayloadBytes))
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the plan file's header says its payload is ", length,
        " bytes, more than a plan file may hold (", kMaxPlanPayloadBytes,
        "): a corrupt header"));
  absl::string_view payload = bytes.substr(kHeaderBytes);
  if (payload.size() != length)
    return absl::DataLossError(absl::StrCat(
        source, ": the plan file holds ", payload.size(),
        " payload bytes but its header says ", length,
        payload.size() < length ? " (the file is truncated)" : ""));
  if (Crc32(payload) != crc)
    return absl::DataLossError(
        absl::StrCat(source, ": the plan's checksum does not match (corrupt file)"));
  Plan plan;
  // Protobuf logs why a message does not parse (a string field that is not
  // UTF-8) to stderr; the reason belongs in the error instead.
  std::string why;
  bool parsed;
  {
    ProtobufLogCapture capture(&why);
    parsed = plan.ParseFromArray(payload.data(), int(payload.size()));
  }
  if (!parsed)
    return absl::DataLossError(absl::StrCat(
        source, ": the payload is not a valid plan message",
        why.empty() ? "" : absl::StrCat(" (", why, ")")));
  if (absl::Status s = ValidatePlan(plan); !s.ok())
    return absl::Status(s.code(), absl::StrCat(source, ": ", s.message()));
  return plan;
}

absl::StatusOr<Plan> LoadPlanFile(const std::string &path) {
  // The header first: its magic and payload size are checked before the
  // payload is read, so that a device, a huge file or a stray non-plan
  // costs 20 bytes of reading rather than all of memory.
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> closer(f, &std::fclose);
  struct stat st;
  if (::fstat(::fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not a plan file"));
  std::string bytes(kHeaderBytes, '\0');
  size_t got = std::fread(bytes.data(), 1, kHeaderBytes, f);
  if (std::ferror(f))
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  bytes.resize(got);
  if (got < kHeaderBytes ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return ParsePlanFile(bytes, path); // names what is wrong
  uint64_t length = getLE(bytes, 8, 8);
  if (length > uint64_t(kMaxPlanPayloadBytes))
    return ParsePlanFile(bytes, path);
  if (S_ISREG(st.st_mode) && uint64_t(st.st_size) != kHeaderBytes + length)
    return absl::DataLossError(absl::StrCat(
        path, ": the plan file holds ", int64_t(st.st_size) - int64_t(kHeaderBytes),
        " payload bytes but its header says ", length,
        uint64_t(st.st_size) < kHeaderBytes + length
            ? " (the file is truncated)"
            : " (bytes follow the plan)"));
  // Up to one byte more than the header promises, so that ParsePlanFile
  // sees a stream that goes on (a pipe, a device) as too long.
  bytes.resize(kHeaderBytes + length + 1);
  got = std::fread(bytes.data() + kHeaderBytes, 1, length + 1, f);
  if (std::ferror(f))
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  bytes.resize(kHeaderBytes + got);
  return ParsePlanFile(bytes, path);
}

} // namespace braid::plan

