//===- TensorBoardTest.cpp - TensorBoard's event files --------------------===//
//
// CRC32C against published vectors (RFC 3720, B.4, and the "123456789"
// check value) and against a bit-at-a-time CRC written here; one scalar
// event's bytes written out by hand from the protobuf wire format; written
// files read back by a small TFRecord reader here that checks both CRCs of
// every record and decodes each Event; and the errors: a directory below a
// regular file, a read-only one, a full file (RLIMIT_FSIZE), an empty tag.
//
// With BRAID_TENSORBOARD_TEST_DIR set, WritesEventsTensorBoardReads writes
// its file there (steps 1..5 of train/loss, train/lr, train/grad_norm) and
// keeps it, for tests/e2e/tensorboard_check.py to read with TensorBoard.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TensorBoard.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

using namespace braid;
namespace fs = std::filesystem;

namespace {

using Scalars = std::vector<std::pair<std::string, double>>;

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values)
    out.push_back(char(uint8_t(v)));
  return out;
}

/// CRC32C one bit at a time, straight from the definition (reflected
/// polynomial 0x82F63B78, register preset to and finally xored with ~0).
uint32_t bitwiseCrc32c(absl::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (char c : data) {
    crc ^= uint8_t(c);
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

uint32_t bitwiseMasked(absl::string_view data) {
  uint32_t crc = bitwiseCrc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint64_t littleEndian(absl::string_view b) {
  uint64_t v = 0;
  for (size_t i = 0; i < b.size(); ++i)
    v |= uint64_t(uint8_t(b[i])) << (8 * i);
  return v;
}

/// The records of a TFRecord file, or an error saying which record is
/// broken and how.
struct Records {
  std::vector<std::string> data;
  std::string error;
};

Records readRecords(const std::string &file) {
  std::ifstream in(file, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)),
                  std::istreambuf_iterator<char>());
  Records out;
  size_t at = 0;
  while (at < all.size()) {
    const std::string where =
        absl::StrCat("record ", out.data.size(), " at byte ", at);
    if (all.size() - at < 12) {
      out.error = where + ": header cut short";
      return out;
    }
    absl::string_view header(all.data() + at, 8);
    if (littleEndian(absl::string_view(all.data() + at + 8, 4)) !=
        bitwiseMasked(header)) {
      out.error = where + ": length CRC mismatch";
      return out;
    }
    uint64_t length = littleEndian(header);
    at += 12;
    if (all.size() - at < length + 4) {
      out.error = where + ": data cut short";
      return out;
    }
    absl::string_view data(all.data() + at, length);
    if (littleEndian(absl::string_view(all.data() + at + length, 4)) !=
        bitwiseMasked(data)) {
      out.error = where + ": data CRC mismatch";
      return out;
    }
    out.data.emplace_back(data);
    at += length + 4;
  }
  return out;
}

/// One protobuf field as read: its number, wire type and value (a varint or
/// fixed value in `number`, a length-delimited one in `bytes`).
struct Field {
  uint32_t field;
  int type;
  uint64_t number = 0;
  std::string bytes;
};

std::optional<uint64_t> readVarint(absl::string_view in, size_t &at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && at < in.size(); shift += 7) {
    uint8_t b = uint8_t(in[at++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80))
      return v;
  }
  return std::nullopt;
}

/// The fields of a message; fails the test on malformed input.
std::vector<Field> parseMessage(absl::string_view in) {
  std::vector<Field> fields;
  size_t at = 0;
  while (at < in.size()) {
    std::optional<uint64_t> key = readVarint(in, at);
    EXPECT_TRUE(key.has_value()) << "bad key at byte " << at;
    if (!key)
      return fields;
    Field f{uint32_t(*key >> 3), int(*key & 7)};
    if (f.type == 0) {
      std::optional<uint64_t> v = readVarint(in, at);
      EXPECT_TRUE(v.has_value());
      f.number = v.value_or(0);
    } else if (f.type == 1 || f.type == 5) {
      size_t width = f.type == 1 ? 8 : 4;
      EXPECT_LE(at + width, in.size());
      if (at + width > in.size())
        return fields;
      f.number = littleEndian(in.substr(at, width));
      at += width;
    } else if (f.type == 2) {
      std::optional<uint64_t> length = readVarint(in, at);
      EXPECT_TRUE(length && at + *length <= in.size());
      if (!length || at + *length > in.size())
        return fields;
      f.bytes = std::string(in.substr(at, *length));
      at += *length;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.type;
      return fields;
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

double asDouble(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

float asFloat(uint64_t bits) {
  uint32_t b = uint32_t(bits);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

/// A decoded Event: its wall time, step, file version and scalars.
struct Event {
  double wallTime = -1;
  std::optional<int64_t> step;
  std::optional<std::string> fileVersion;
  std::vector<std::pair<std::string, float>> scalars;
  /// SessionLog's status, when the event has one.
  std::optional<uint64_t> sessionStatus;
};

Event decodeEvent(absl::string_view data) {
  Event e;
  for (const Field &f : parseMessage(data)) {
    if (f.field == 1 && f.type == 1) {
      e.wallTime = asDouble(f.number);
    } else if (f.field == 2 && f.type == 0) {
      e.step = int64_t(f.number);
    } else if (f.field == 3 && f.type == 2) {
      e.fileVersion = f.bytes;
    } else if (f.field == 7 && f.type == 2) {
      for (const Field &part : parseMessage(f.bytes)) {
        EXPECT_TRUE(part.field == 1 && part.type == 0)
            << "unexpected SessionLog field " << part.field;
        e.sessionStatus = part.number;
      }
    } else if (f.field == 5 && f.type == 2) {
      for (const Field &value : parseMessage(f.bytes)) {
        EXPECT_EQ(value.field, 1u);
        EXPECT_EQ(value.type, 2);
        std::string tag;
        std::optional<float> simple;
        for (const Field &part : parseMessage(value.bytes)) {
          if (part.field == 1 && part.type == 2)
            tag = part.bytes;
          else if (part.field == 2 && part.type == 5)
            simple = asFloat(part.number);
          else
            ADD_FAILURE() << "unexpected Value field " << part.field;
        }
        EXPECT_TRUE(simple.has_value()) << tag << " has no simple_value";
        e.scalars.emplace_back(tag, simple.value_or(0));
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << f.field << " of type "
                    << f.type;
    }
  }
  return e;
}

double unixSecondsNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string freshDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "/braid-tensorboard-" + name;
  std::error_code ec;
  fs::remove_all(dir, ec);
  return dir;
}

std::vector<std::string> filesIn(const std::string &dir) {
  std::vector<std::string> files;
  for (const auto &entry : fs::directory_iterator(dir))
    files.push_back(entry.path().string());
  return files;
}

TEST(Crc32c, PublishedVectors) {
  // RFC 3720, appendix B.4 (iSCSI's CRC32C examples).
  EXPECT_EQ(exec::Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(exec::Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(char(i));
    descending.push_back(char(31 - i));
  }
  EXPECT_EQ(exec::Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(exec::Crc32c(descending), 0x113FDB5Cu);
  // The check value of the CRC catalogue (CRC-32/ISCSI).
  EXPECT_EQ(exec::Crc32c("123456789"), 0xE3069283u);
  // Preset and final xor cancel on no data.
  EXPECT_EQ(exec::Crc32c(""), 0u);
}

TEST(Crc32c, TableAgreesWithBitwise) {
  std::mt19937 rng(7);
  for (int length : {1, 2, 3, 7, 8, 63, 64, 255, 1000}) {
    std::string data(length, '\0');
    for (char &c : data)
      c = char(rng());
    EXPECT_EQ(exec::Crc32c(data), bitwiseCrc32c(data)) << length;
  }
}

TEST(Crc32c, Masked) {
  // 0xE3069283 >> 15 = 0x0001C60D; its low 15 bits 0x1283 << 17 =
  // 0x25060000; their or 0x2507C60D + 0xA282EAD8 = 0xC78AB0E5.
  EXPECT_EQ(exec::MaskedCrc32c("123456789"), 0xC78AB0E5u);
  // The addition wraps: CRC 0 masks to the constant itself.
  EXPECT_EQ(exec::MaskedCrc32c(""), 0xA282EAD8u);
}

TEST(EncodeScalarEvent, ByteLayout) {
  // wall_time 1.5 = 0x3FF8000000000000; step 300 = varint AC 02; loss 0.25 =
  // 0x3E800000, lr -2 = 0xC0000000 (floats).
  Scalars scalars = {{"loss", 0.25}, {"lr", -2.0}};
  std::string expected =
      // field 1, fixed64: key 0x09, the double's bytes, little-endian.
      bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F}) +
      // field 2, varint: key 0x10.
      bytes({0x10, 0xAC, 0x02}) +
      // field 5, length-delimited: key 0x2A, the Summary's 24 bytes.
      bytes({0x2A, 24}) +
      // Summary.value (field 1: key 0x0A) of 11 bytes: tag (key 0x0A,
      // length 4, "loss"), simple_value (field 2, fixed32: key 0x15).
      bytes({0x0A, 11, 0x0A, 4}) + "loss" +
      bytes({0x15, 0x00, 0x00, 0x80, 0x3E}) +
      // The second value, 9 bytes: "lr", -2.
      bytes({0x0A, 9, 0x0A, 2}) + "lr" + bytes({0x15, 0x00, 0x00, 0x00, 0xC0});
  EXPECT_EQ(exec::EncodeScalarEvent(1.5, 300, scalars), expected);
}

TEST(EncodeScalarEvent, ZeroNegativeAndNonFinite) {
  // Step -1 is the two's complement's ten-byte varint; step 0 and a value 0
  // are written all the same (simple_value is in a oneof).
  std::string negative = exec::EncodeScalarEvent(0, -1, {});
  EXPECT_EQ(negative.substr(9), bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                       0xFF, 0xFF, 0xFF, 0x01, 0x2A, 0x00}));
  const std::string zeroDouble(8, '\0'), zeroFloat(4, '\0');
  EXPECT_EQ(exec::EncodeScalarEvent(0, 0, {{{"z", 0.0}}}),
            bytes({0x09}) + zeroDouble + bytes({0x10, 0x00}) +
                bytes({0x2A, 10, 0x0A, 8, 0x0A, 1, 'z', 0x15}) + zeroFloat);

  const double inf = std::numeric_limits<double>::infinity();
  Scalars scalars = {{"nan", std::nan("")},
                     {"inf", inf},
                     {"-inf", -inf},
                     {"big", 1e300}}; // beyond float: +inf
  Event e = decodeEvent(exec::EncodeScalarEvent(2, 9, scalars));
  ASSERT_EQ(e.scalars.size(), 4u);
  EXPECT_EQ(e.step, 9);
  EXPECT_EQ(e.wallTime, 2.0);
  EXPECT_TRUE(std::isnan(e.scalars[0].second));
  EXPECT_EQ(e.scalars[1].second, std::numeric_limits<float>::infinity());
  EXPECT_EQ(e.scalars[2].second, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(e.scalars[3].second, std::numeric_limits<float>::infinity());
}

TEST(EncodeSessionStartEvent, ByteLayout) {
  // wall_time 1.5, step 7, then session_log (field 7, length-delimited: key
  // 0x3A) holding status (field 1, varint: key 0x08) START = 1.
  EXPECT_EQ(exec::EncodeSessionStartEvent(1.5, 7),
            bytes({0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F, 0x10,
                   0x07, 0x3A, 0x02, 0x08, 0x01}));
}

TEST(TensorBoardWriter, ReaderRejectsABrokenRecord) {
  // The reader below must be able to fail: a file with one flipped bit in
  // each place a CRC guards.
  const std::string dir = freshDir("broken");
  auto writer = exec::TensorBoardWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddScalars(1, {{{"loss", 1.0}}}).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  std::ifstream in((*writer)->path(), std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  ASSERT_EQ(readRecords((*writer)->path()).error, "");
  const std::string broken = dir + "/broken";
  auto flipped = [&](size_t at) {
    std::string copy = good;
    copy[at] ^= 0x01;
    std::ofstream(broken, std::ios::binary) << copy;
    return readRecords(broken).error;
  };
  EXPECT_TRUE(absl::StrContains(flipped(0), "length CRC mismatch"));
  EXPECT_TRUE(absl::StrContains(flipped(12), "data CRC mismatch"));
  EXPECT_TRUE(absl::StrContains(flipped(good.size() - 1), "record 1 at byte"));
}

TEST(TensorBoardWriter, WritesEventsTensorBoardReads) {
  const char *keep = std::getenv("BRAID_TENSORBOARD_TEST_DIR");
  // A directory whose parents are missing too.
  const std::string dir =
      keep && *keep ? std::string(keep) : freshDir("reads") + "/a/b";
  const double before = unixSecondsNow();
  auto opened = exec::TensorBoardWriter::Open(dir);
  ASSERT_TRUE(opened.ok()) << opened.status();
  exec::TensorBoardWriter &writer = **opened;
  const std::string name = fs::path(writer.path()).filename().string();
  EXPECT_EQ(fs::path(writer.path()).parent_path(), fs::path(dir));
  EXPECT_TRUE(absl::StartsWith(name, "events.out.tfevents.")) << name;
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_TRUE(
      absl::EndsWith(name, absl::StrCat(".", host, ".", ::getpid(), ".braid")))
      << name;
  // The file_version event is there as soon as Open returns.
  Records records = readRecords(writer.path());
  ASSERT_EQ(records.error, "");
  ASSERT_EQ(records.data.size(), 1u);

  auto valuesAt = [](int64_t step) {
    return Scalars{{"train/loss", 10.0 / double(step)},
                   {"train/lr", 1e-4 * double(step)},
                   {"train/grad_norm", 0.5 + double(step)}};
  };
  for (int64_t step = 1; step <= 5; ++step) {
    Scalars scalars = valuesAt(step);
    ASSERT_TRUE(writer.AddScalars(step, scalars).ok());
    ASSERT_TRUE(writer.Flush().ok());
    // Flushed: a reader sees every step so far, whole.
    records = readRecords(writer.path());
    ASSERT_EQ(records.error, "") << "after step " << step;
    EXPECT_EQ(records.data.size(), size_t(step) + 1);
  }
  const double after = unixSecondsNow();

  Event first = decodeEvent(records.data[0]);
  EXPECT_EQ(first.fileVersion, "brain.Event:2");
  EXPECT_GE(first.wallTime, before - 1);
  EXPECT_LE(first.wallTime, after + 1);
  EXPECT_TRUE(first.scalars.empty());
  for (int64_t step = 1; step <= 5; ++step) {
    Event e = decodeEvent(records.data[step]);
    EXPECT_EQ(e.step, step);
    EXPECT_FALSE(e.fileVersion.has_value());
    EXPECT_GE(e.wallTime, first.wallTime);
    EXPECT_LE(e.wallTime, after + 1);
    Scalars expected = valuesAt(step);
    ASSERT_EQ(e.scalars.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(e.scalars[i].first, expected[i].first);
      EXPECT_EQ(e.scalars[i].second, float(expected[i].second));
    }
  }
  ASSERT_TRUE(writer.Close().ok());
  absl::Status late = writer.AddScalars(6, valuesAt(6));
  EXPECT_FALSE(late.ok());
  EXPECT_TRUE(absl::StrContains(late.message(), "already closed"));
}

TEST(TensorBoardWriter, TwoWritersInOneDirectory) {
  const std::string dir = freshDir("two");
  auto a = exec::TensorBoardWriter::Open(dir);
  auto b = exec::TensorBoardWriter::Open(dir);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_EQ(filesIn(dir).size(), 2u);
  ASSERT_TRUE((*a)->AddScalars(1, {{{"x", 1.0}}}).ok());
  ASSERT_TRUE((*b)->AddScalars(1, {{{"x", 2.0}}}).ok());
  ASSERT_TRUE((*a)->Close().ok());
  ASSERT_TRUE((*b)->Close().ok());
  for (const std::string &path : {(*a)->path(), (*b)->path()}) {
    Records records = readRecords(path);
    EXPECT_EQ(records.error, "") << path;
    EXPECT_EQ(records.data.size(), 2u) << path;
  }
}

TEST(TensorBoardWriter, ResumedRunMarksItsFirstStep) {
  // A run that wrote steps 1..4, resumed from step 2's checkpoint: the new
  // file starts with file_version, then START at step 3, then step 3.
  const std::string dir = freshDir("resumed");
  auto before = exec::TensorBoardWriter::Open(dir);
  ASSERT_TRUE(before.ok());
  for (int64_t step = 1; step <= 4; ++step)
    ASSERT_TRUE((*before)->AddScalars(step, {{{"loss", 1.0}}}).ok());
  ASSERT_TRUE((*before)->Close().ok());
  auto resumed = exec::TensorBoardWriter::Open(dir);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->AddSessionStart(3).ok());
  ASSERT_TRUE((*resumed)->AddScalars(3, {{{"loss", 2.0}}}).ok());
  ASSERT_TRUE((*resumed)->Close().ok());
  Records records = readRecords((*resumed)->path());
  ASSERT_EQ(records.error, "");
  ASSERT_EQ(records.data.size(), 3u);
  EXPECT_EQ(decodeEvent(records.data[0]).fileVersion, "brain.Event:2");
  Event start = decodeEvent(records.data[1]);
  EXPECT_EQ(start.step, 3);
  EXPECT_EQ(start.sessionStatus, 1u);
  EXPECT_TRUE(start.scalars.empty());
  Event three = decodeEvent(records.data[2]);
  EXPECT_EQ(three.step, 3);
  EXPECT_FALSE(three.sessionStatus.has_value());
  ASSERT_EQ(three.scalars.size(), 1u);
  EXPECT_EQ(three.scalars[0].second, 2.0f);
}

TEST(TensorBoardWriter, OpenFailsBelowARegularFile) {
  const std::string dir = freshDir("file");
  fs::create_directories(dir);
  const std::string file = dir + "/plain";
  std::ofstream(file) << "not a directory";
  const std::string below = file + "/tb";
  auto opened = exec::TensorBoardWriter::Open(below);
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(absl::StrContains(opened.status().message(), below))
      << opened.status();
  EXPECT_TRUE(absl::StrContains(opened.status().message(), "Not a directory"))
      << opened.status();
  // The regular file itself.
  opened = exec::TensorBoardWriter::Open(file);
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(absl::StrContains(opened.status().message(), file))
      << opened.status();
  opened = exec::TensorBoardWriter::Open("");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(filesIn(dir).size(), 1u);
}

TEST(TensorBoardWriter, OpenFailsInAReadOnlyDirectory) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root writes into read-only directories";
  const std::string dir = freshDir("readonly");
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  auto opened = exec::TensorBoardWriter::Open(dir);
  fs::permissions(dir, fs::perms::owner_all);
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(absl::StrContains(opened.status().message(), dir))
      << opened.status();
  EXPECT_TRUE(absl::StrContains(opened.status().message(), "Permission denied"))
      << opened.status();
}

TEST(TensorBoardWriter, EmptyTagIsAnError) {
  auto opened = exec::TensorBoardWriter::Open(freshDir("tag"));
  ASSERT_TRUE(opened.ok());
  absl::Status s = (*opened)->AddScalars(3, {{{"loss", 1.0}, {"", 2.0}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "without a tag at step 3")) << s;
  // Nothing of it was written.
  ASSERT_TRUE((*opened)->Close().ok());
  EXPECT_EQ(readRecords((*opened)->path()).data.size(), 1u);
}

TEST(TensorBoardWriterDeathTest, FullFileNamesItAndStaysFailed) {
  // A file size limit makes writes beyond it fail (EFBIG, as a full disk
  // fails them with ENOSPC); in a child process, so that the limit does not
  // reach the rest of the tests.
  const std::string dir = freshDir("full");
  EXPECT_EXIT(
      {
        auto opened = exec::TensorBoardWriter::Open(dir);
        if (!opened.ok())
          std::_Exit(2);
        std::signal(SIGXFSZ, SIG_IGN);
        struct rlimit limit;
        ::getrlimit(RLIMIT_FSIZE, &limit);
        limit.rlim_cur = 512;
        ::setrlimit(RLIMIT_FSIZE, &limit);
        absl::Status s;
        int64_t step = 1;
        for (; step <= 100 && s.ok(); ++step) {
          s = (*opened)->AddScalars(step, {{{"train/loss", 1.0}}});
          if (s.ok())
            s = (*opened)->Flush();
        }
        // The first failure stays: later steps write nothing.
        absl::Status later = (*opened)->AddScalars(step, {{{"x", 1.0}}});
        std::cerr << s.message() << "|" << later.message() << std::endl;
        std::_Exit(!s.ok() && later == s ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "cannot write .*/events\\.out\\.tfevents\\..*\\.braid: File too "
      "large");
}

} // namespace
