//===- IndexedDatasetTest.cpp - MMIDIDX reader and writer -----------------===//
//
// The files here are written field by field from the published layout of
// Megatron's .idx/.bin (the RawDataset writer below), not through
// IndexedDatasetWriter, so that the reader is checked against the format and
// not against our own writer; the writer is then checked byte for byte
// against the same independent files. Every corruption of the index must be
// refused with a message that names the file and the field, and no byte
// sequence may make Open or the reads crash (run under ASan/UBSan or
// valgrind to see that no read leaves the mappings).
//
//===----------------------------------------------------------------------===//

#include "runtime/data/IndexedDataset.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace braid::data;

namespace {

/// A document is a list of sequences (Megatron's --split-sentences writes
/// several per document, the default one).
using Document = std::vector<std::vector<int64_t>>;

/// An .idx/.bin pair as raw fields, written with plain fwrite from the
/// layout in IndexedDataset.h. Fields can be corrupted before writing.
struct RawDataset {
  std::string magic = std::string("MMIDIDX\0\0", 9);
  uint64_t version = 1;
  uint8_t code = 8;
  uint64_t sequenceCount = 0;
  uint64_t documentCount = 0;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> documentIndices;
  std::string trailing; // bytes after the document indices
  std::string bin;
};

size_t elementSize(uint8_t code) {
  switch (code) {
  case 1:
  case 2:
    return 1;
  case 3:
  case 8:
    return 2;
  case 4:
  case 7:
    return 4;
  default:
    return 8;
  }
}

/// Appends `value` to `bin` as the `code` dtype, little endian, through a
/// variable of exactly that type.
void appendElement(std::string &bin, uint8_t code, int64_t value) {
  auto put = [&](auto v) {
    bin.append(reinterpret_cast<const char *>(&v), sizeof(v));
  };
  switch (code) {
  case 1:
    put(static_cast<uint8_t>(value));
    break;
  case 2:
    put(static_cast<int8_t>(value));
    break;
  case 3:
    put(static_cast<int16_t>(value));
    break;
  case 4:
    put(static_cast<int32_t>(value));
    break;
  case 5:
    put(static_cast<int64_t>(value));
    break;
  case 6:
    put(static_cast<double>(value));
    break;
  case 7:
    put(static_cast<float>(value));
    break;
  case 8:
    put(static_cast<uint16_t>(value));
    break;
  }
}

/// The fields Megatron's IndexedDatasetBuilder would write for `documents`.
RawDataset buildRaw(const std::vector<Document> &documents, uint8_t code) {
  RawDataset raw;
  raw.code = code;
  raw.documentIndices.push_back(0);
  int64_t pointer = 0;
  for (const Document &document : documents) {
    for (const std::vector<int64_t> &sequence : document) {
      raw.lengths.push_back(static_cast<int32_t>(sequence.size()));
      raw.pointers.push_back(pointer);
      pointer += static_cast<int64_t>(sequence.size() * elementSize(code));
      for (int64_t token : sequence)
        appendElement(raw.bin, code, token);
    }
    raw.documentIndices.push_back(static_cast<int64_t>(raw.lengths.size()));
  }
  raw.sequenceCount = raw.lengths.size();
  raw.documentCount = raw.documentIndices.size();
  return raw;
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
}

/// Writes PREFIX.idx with plain fwrite calls, one per field, and PREFIX.bin.
void writeRaw(const std::string &prefix, const RawDataset &raw) {
  std::FILE *f = std::fopen((prefix + ".idx").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(raw.magic.data(), 1, raw.magic.size(), f);
  std::fwrite(&raw.version, sizeof(uint64_t), 1, f);
  std::fwrite(&raw.code, sizeof(uint8_t), 1, f);
  std::fwrite(&raw.sequenceCount, sizeof(uint64_t), 1, f);
  std::fwrite(&raw.documentCount, sizeof(uint64_t), 1, f);
  // (fwrite of an empty vector's null data() would be undefined.)
  if (!raw.lengths.empty())
    std::fwrite(raw.lengths.data(), sizeof(int32_t), raw.lengths.size(), f);
  if (!raw.pointers.empty())
    std::fwrite(raw.pointers.data(), sizeof(int64_t), raw.pointers.size(), f);
  if (!raw.documentIndices.empty())
    std::fwrite(raw.documentIndices.data(), sizeof(int64_t),
                raw.documentIndices.size(), f);
  std::fwrite(raw.trailing.data(), 1, raw.trailing.size(), f);
  ASSERT_EQ(std::fclose(f), 0);
  writeFile(prefix + ".bin", raw.bin);
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

class IndexedDatasetTest : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-data-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  /// Opens a dataset that must be refused and returns the status.
  absl::Status openStatus(const std::string &prefix) {
    absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(prefix);
    return ds.status();
  }

  std::string dir_;
};

/// Three documents: one of two sequences (a split document), one empty (no
/// sequences: Megatron's end_document after nothing), one of one sequence,
/// and a sequence of length 0 inside the last.
std::vector<Document> sampleDocuments(int64_t base) {
  return {
      {{base + 1, base + 2, base + 3}, {base + 4, base + 5}},
      {},
      {{base + 6}, {}, {base + 7, base + 8, base + 9, base + 10}},
  };
}

void expectMatches(const IndexedDataset &ds, const RawDataset &raw,
                   const std::vector<Document> &documents) {
  EXPECT_EQ(static_cast<uint8_t>(ds.dtype()), raw.code);
  ASSERT_EQ(ds.numSequences(), raw.sequenceCount);
  EXPECT_EQ(ds.numDocuments(), raw.documentCount - 1);
  EXPECT_EQ(ds.documentIndex(), raw.documentIndices);
  for (size_t i = 0; i < raw.sequenceCount; ++i) {
    EXPECT_EQ(ds.sequenceLength(i), raw.lengths[i]) << i;
    EXPECT_EQ(ds.sequencePointer(i), raw.pointers[i]) << i;
  }
  uint64_t tokens = 0;
  size_t sequence = 0;
  for (const Document &document : documents) {
    for (const std::vector<int64_t> &expected : document) {
      std::vector<int64_t> got = {-99};
      ASSERT_TRUE(ds.ReadSequence(sequence, 0, expected.size(), &got).ok());
      EXPECT_EQ(got, expected) << "sequence " << sequence;
      std::vector<int32_t> narrow(expected.size());
      ASSERT_TRUE(
          ds.ReadTokens(sequence, 0, expected.size(), narrow.data()).ok());
      for (size_t k = 0; k < expected.size(); ++k)
        EXPECT_EQ(narrow[k], expected[k]);
      // A part of the sequence, from the middle.
      if (expected.size() >= 2) {
        ASSERT_TRUE(
            ds.ReadSequence(sequence, 1, expected.size() - 1, &got).ok());
        EXPECT_EQ(got,
                  std::vector<int64_t>(expected.begin() + 1, expected.end()));
      }
      tokens += expected.size();
      ++sequence;
    }
  }
  EXPECT_EQ(ds.numTokens(), tokens);
}

TEST_F(IndexedDatasetTest, ReadsIndependentlyWrittenUint16) {
  const std::vector<Document> documents = sampleDocuments(65000);
  RawDataset raw = buildRaw(documents, 8);
  writeRaw(path("u16"), raw);
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("u16"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->dtype(), DType::kUInt16);
  EXPECT_EQ(ds->numSequences(), 5u);
  EXPECT_EQ(ds->numDocuments(), 3u);
  EXPECT_EQ(ds->documentIndex(), (std::vector<int64_t>{0, 2, 2, 5}));
  EXPECT_EQ(ds->prefix(), path("u16"));
  expectMatches(*ds, raw, documents);
}

TEST_F(IndexedDatasetTest, ReadsIndependentlyWrittenInt32) {
  // Ids above the uint16 range and a negative one (the format allows it).
  std::vector<Document> documents = sampleDocuments(128000);
  documents.push_back({{-5, 2147483647, 0}});
  RawDataset raw = buildRaw(documents, 4);
  writeRaw(path("i32"), raw);
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("i32"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->dtype(), DType::kInt32);
  expectMatches(*ds, raw, documents);
}

TEST_F(IndexedDatasetTest, ReadsEverySmallIntegerDtype) {
  struct Case {
    uint8_t code;
    DType dtype;
    std::vector<Document> documents;
  };
  const Case cases[] = {
      {1, DType::kUInt8, {{{0, 255, 7}}, {{1}}}},
      {2, DType::kInt8, {{{-128, 127, -1}}, {{0}}}},
      {3, DType::kInt16, {{{-32768, 32767}}, {{5, 6}}}},
      {5, DType::kInt64, {{{-3, 2147483647}}, {{9}}}},
  };
  for (const Case &c : cases) {
    const std::string prefix = path("small" + std::to_string(c.code));
    RawDataset raw = buildRaw(c.documents, c.code);
    writeRaw(prefix, raw);
    absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(prefix);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(ds->dtype(), c.dtype);
    expectMatches(*ds, raw, c.documents);
  }
}

TEST_F(IndexedDatasetTest, Int64TokenOutsideInt32IsRefusedByReadTokens) {
  const int64_t big = int64_t(1) << 40;
  writeRaw(path("i64"), buildRaw({{{1, big, 2}}}, 5));
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("i64"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<int64_t> wide;
  ASSERT_TRUE(ds->ReadSequence(0, 0, 3, &wide).ok());
  EXPECT_EQ(wide, (std::vector<int64_t>{1, big, 2}));
  int32_t narrow[3];
  absl::Status s = ds->ReadTokens(0, 0, 3, narrow);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("1099511627776"), std::string::npos) << s;
}

TEST_F(IndexedDatasetTest, FloatDatasetIsReadableAsBytesButNotAsTokens) {
  RawDataset raw = buildRaw({{{1, 2, 3}}, {{4}}}, 7);
  writeRaw(path("f32"), raw);
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("f32"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->dtype(), DType::kFloat32);
  std::vector<int64_t> out;
  absl::Status s = ds->ReadSequence(0, 0, 3, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("float32"), std::string::npos) << s;
  absl::StatusOr<absl::Span<const uint8_t>> bytes = ds->SequenceBytes(1);
  ASSERT_TRUE(bytes.ok());
  ASSERT_EQ(bytes->size(), 4u);
  float value;
  std::memcpy(&value, bytes->data(), 4);
  EXPECT_EQ(value, 4.0f);
}

TEST_F(IndexedDatasetTest, LargestTokenIdReadsEveryToken) {
  struct Case {
    uint8_t code;
    std::vector<Document> documents;
    int64_t largest;
  };
  const std::vector<Case> cases = {
      // In a split document, after an empty sequence; an empty document.
      {8, {{{5, 9}, {}, {65534, 3}}, {}, {{7}}}, 65534},
      // The very last token.
      {1, {{{1, 2}}, {{255}}}, 255},
      // Every id negative.
      {2, {{{-5, -3}}, {{-9}}}, -3},
      {3, {{{-32768, 12}}}, 12},
      {4, {{{-7, 2147483647}}, {{0}}}, 2147483647},
      // Beyond the int32 range.
      {5, {{{1, int64_t(1) << 40}}, {{2}}}, int64_t(1) << 40},
  };
  for (const Case &c : cases) {
    const std::string prefix = path("largest" + std::to_string(c.code));
    writeRaw(prefix, buildRaw(c.documents, c.code));
    absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(prefix);
    ASSERT_TRUE(ds.ok()) << ds.status();
    absl::StatusOr<int64_t> largest = LargestTokenId(*ds);
    ASSERT_TRUE(largest.ok()) << largest.status();
    EXPECT_EQ(*largest, c.largest) << "dtype code " << int(c.code);
  }

  for (const std::vector<Document> &none :
       {std::vector<Document>{}, std::vector<Document>{{{}}, {}}}) {
    writeRaw(path("none"), buildRaw(none, 8));
    absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("none"));
    ASSERT_TRUE(ds.ok()) << ds.status();
    absl::Status s = LargestTokenId(*ds).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("has no tokens"), std::string::npos) << s;
  }

  writeRaw(path("floats"), buildRaw({{{1, 2, 3}}}, 7));
  absl::StatusOr<IndexedDataset> floats = IndexedDataset::Open(path("floats"));
  ASSERT_TRUE(floats.ok()) << floats.status();
  absl::Status s = LargestTokenId(*floats).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("float32 values, not token ids"),
            std::string::npos)
      << s;
}

TEST_F(IndexedDatasetTest, ReadOutsideASequenceIsOutOfRange) {
  writeRaw(path("r"), buildRaw(sampleDocuments(0), 8));
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("r"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<int64_t> out;
  EXPECT_EQ(ds->ReadSequence(5, 0, 0, &out).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ds->ReadSequence(0, 2, 2, &out).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ds->ReadSequence(0, 4, 0, &out).code(),
            absl::StatusCode::kOutOfRange);
  // An offset + count that wraps around size_t must not pass the check.
  EXPECT_EQ(ds->ReadSequence(0, 1, SIZE_MAX, &out).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(ds->ReadSequence(0, 3, 0, &out).ok());
  EXPECT_EQ(ds->SequenceBytes(99).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(IndexedDatasetTest, EmptyDatasetOpens) {
  writeRaw(path("empty"), buildRaw({}, 8));
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("empty"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->numSequences(), 0u);
  EXPECT_EQ(ds->numDocuments(), 0u);
  EXPECT_EQ(ds->numTokens(), 0u);
}

TEST_F(IndexedDatasetTest, MultimodalSequenceModesAreAccepted) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.trailing = std::string(raw.sequenceCount, '\0');
  writeRaw(path("mm"), raw);
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("mm"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->numSequences(), raw.sequenceCount);
}

TEST_F(IndexedDatasetTest, MoveKeepsTheMappings) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  writeRaw(path("mv"), raw);
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("mv"));
  ASSERT_TRUE(ds.ok());
  IndexedDataset moved = std::move(*ds);
  IndexedDataset assigned = std::move(moved);
  expectMatches(assigned, raw, sampleDocuments(0));
}

//===----------------------------------------------------------------------===//
// Refused files
//===----------------------------------------------------------------------===//

/// Expects `status` to have `code` and a message containing each of
/// `parts`.
void expectError(const absl::Status &status, absl::StatusCode code,
                 const std::vector<std::string> &parts) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string &part : parts)
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "'" << part << "' not in: " << status.message();
}

TEST_F(IndexedDatasetTest, WrongMagicIsRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.magic = std::string("MMIDIDY\0\0", 9);
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kInvalidArgument,
              {path("bad.idx"), "bad magic", "MMIDIDY"});
}

TEST_F(IndexedDatasetTest, UnsupportedVersionIsRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.version = 2;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kInvalidArgument,
              {path("bad.idx"), "version 2", "expected 1"});
}

TEST_F(IndexedDatasetTest, UnknownDtypeCodeIsRefused) {
  for (uint8_t code : {0, 9, 255}) {
    RawDataset raw = buildRaw(sampleDocuments(0), 8);
    raw.code = code;
    writeRaw(path("bad"), raw);
    expectError(openStatus(path("bad")), absl::StatusCode::kInvalidArgument,
                {path("bad.idx"), "dtype code " + std::to_string(code)});
  }
}

TEST_F(IndexedDatasetTest, TruncatedIndexIsRefusedAtEveryLength) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  writeRaw(path("ok"), raw);
  const std::string full = readFile(path("ok.idx"));
  ASSERT_EQ(full.size(), 34 + 12 * raw.sequenceCount + 8 * raw.documentCount);
  writeFile(path("bad.bin"), raw.bin);
  for (size_t size = 0; size < full.size(); ++size) {
    writeFile(path("bad.idx"), full.substr(0, size));
    absl::Status s = openStatus(path("bad"));
    expectError(s, absl::StatusCode::kDataLoss, {path("bad.idx"), "truncated"});
  }
  // Cut in the middle of each array; the message names it.
  const size_t lengthsAt = 34 + 2, pointersAt = 34 + 4 * 5 + 3,
               documentsAt = 34 + 12 * 5 + 9;
  writeFile(path("bad.idx"), full.substr(0, lengthsAt));
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"truncated in sequence_lengths", "sequence_count 5",
               "document_count 4", "need 126 bytes", "has 36"});
  writeFile(path("bad.idx"), full.substr(0, pointersAt));
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"truncated in sequence_pointers"});
  writeFile(path("bad.idx"), full.substr(0, documentsAt));
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"truncated in document_indices"});
}

TEST_F(IndexedDatasetTest, CountsThatWouldOverflowAreRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.sequenceCount = uint64_t(1) << 62; // 12 * S wraps 64 bits
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"truncated in sequence_lengths", "4611686018427387904"});
  raw = buildRaw(sampleDocuments(0), 8);
  raw.documentCount = ~uint64_t(0);
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"truncated in document_indices"});
}

TEST_F(IndexedDatasetTest, TrailingBytesAreRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.trailing = "xyz";
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {path("bad.idx"), "3 bytes follow the document indices"});
}

TEST_F(IndexedDatasetTest, InconsistentPointersAreRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.pointers[1] += 2;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {path("bad.idx"), "sequence_pointers[1] is 8, expected 6",
               "sequence_lengths[0]"});

  raw = buildRaw(sampleDocuments(0), 8);
  raw.pointers[0] = 4;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"sequence_pointers[0] is 4, expected 0"});

  // A pointer far past the .bin must not be followed.
  raw = buildRaw(sampleDocuments(0), 8);
  raw.pointers[4] = int64_t(1) << 60;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"sequence_pointers[4] is 1152921504606846976"});
}

TEST_F(IndexedDatasetTest, NegativeLengthIsRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.lengths[1] = -3;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {path("bad.idx"), "sequence_lengths[1] is -3"});
}

TEST_F(IndexedDatasetTest, LengthPastTheBinIsRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.lengths.back() = 2147483647;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {path("bad.bin"), "sequence 4", ".bin too short"});
}

TEST_F(IndexedDatasetTest, BinOfTheWrongSizeIsRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  ASSERT_EQ(raw.bin.size(), 20u);
  raw.bin.resize(18);
  writeRaw(path("short"), raw);
  expectError(
      openStatus(path("short")), absl::StatusCode::kDataLoss,
      {path("short.bin"), "is 18 bytes", "ends at byte 20", ".bin too short"});
  raw.bin.resize(23);
  writeRaw(path("long"), raw);
  expectError(openStatus(path("long")), absl::StatusCode::kDataLoss,
              {path("long.bin"), "is 23 bytes", "end at byte 20"});
}

TEST_F(IndexedDatasetTest, BadDocumentIndicesAreRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  raw.documentIndices.back() = 4;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {path("bad.idx"), "document_indices[3] is 4",
               "expected sequence_count 5"});

  raw = buildRaw(sampleDocuments(0), 8);
  raw.documentIndices[0] = 1;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"document_indices[0] is 1, expected 0"});

  raw = buildRaw(sampleDocuments(0), 8);
  raw.documentIndices[2] = 1; // 0, 2, 1, 5
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"document_indices[2] is 1", "document_indices[1] = 2",
               "non-decreasing"});

  raw = buildRaw(sampleDocuments(0), 8);
  raw.documentIndices[1] = 7; // 0, 7, 2, 5: past S, then decreasing
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"document_indices[2] is 2"});

  raw = buildRaw(sampleDocuments(0), 8);
  raw.documentIndices.clear();
  raw.documentCount = 0;
  writeRaw(path("bad"), raw);
  expectError(openStatus(path("bad")), absl::StatusCode::kDataLoss,
              {"document_count is 0"});
}

TEST_F(IndexedDatasetTest, MissingFilesAreRefused) {
  RawDataset raw = buildRaw(sampleDocuments(0), 8);
  writeRaw(path("nobin"), raw);
  std::filesystem::remove(path("nobin.bin"));
  expectError(openStatus(path("nobin")), absl::StatusCode::kNotFound,
              {path("nobin.bin")});
  writeRaw(path("noidx"), raw);
  std::filesystem::remove(path("noidx.idx"));
  expectError(openStatus(path("noidx")), absl::StatusCode::kNotFound,
              {path("noidx.idx")});
  std::filesystem::create_directory(path("dir.idx"));
  expectError(openStatus(path("dir")), absl::StatusCode::kInvalidArgument,
              {path("dir.idx"), "not a regular file"});
}

/// Every single-byte corruption of the index is either refused or yields a
/// dataset whose every sequence reads without leaving the mapping.
TEST_F(IndexedDatasetTest, NoByteFlipCrashes) {
  RawDataset raw = buildRaw(sampleDocuments(0), 4);
  writeRaw(path("ok"), raw);
  const std::string full = readFile(path("ok.idx"));
  writeFile(path("flip.bin"), raw.bin);
  int accepted = 0;
  for (size_t at = 0; at < full.size(); ++at) {
    for (uint8_t value : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::string bytes = full;
      if (static_cast<uint8_t>(bytes[at]) == value)
        continue;
      bytes[at] = static_cast<char>(value);
      writeFile(path("flip.idx"), bytes);
      absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("flip"));
      if (!ds.ok()) {
        EXPECT_NE(ds.status().message().find(path("flip")), std::string::npos)
            << ds.status();
        continue;
      }
      ++accepted;
      for (size_t i = 0; i < ds->numSequences(); ++i) {
        std::vector<int64_t> out;
        if (isIntegerDtype(ds->dtype())) {
          EXPECT_TRUE(ds->ReadSequence(i, 0, ds->sequenceLength(i), &out).ok());
        }
        EXPECT_TRUE(ds->SequenceBytes(i).ok());
      }
    }
  }
  // Every field is checked exactly, so only flips that give another valid
  // file pass: document_indices[1] = 2 becoming 0 or 1 (0, 0|1, 2, 5 is
  // still non-decreasing from 0 to S; only the document boundaries move).
  EXPECT_EQ(accepted, 2);
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

/// Writes `documents` through IndexedDatasetWriter.
absl::Status writeWithWriter(const std::string &prefix, DType dtype,
                             const std::vector<Document> &documents) {
  absl::StatusOr<IndexedDatasetWriter> writer =
      IndexedDatasetWriter::Create(prefix, dtype);
  if (!writer.ok())
    return writer.status();
  for (const Document &document : documents) {
    for (const std::vector<int64_t> &sequence : document)
      if (absl::Status s = writer->AddSequence(sequence); !s.ok())
        return s;
    if (absl::Status s = writer->EndDocument(); !s.ok())
      return s;
  }
  return writer->Finish();
}

TEST_F(IndexedDatasetTest, WriterIsByteIdenticalToTheIndependentWriter) {
  struct Case {
    uint8_t code;
    DType dtype;
    int64_t base;
  };
  for (const Case &c :
       {Case{8, DType::kUInt16, 65000}, Case{4, DType::kInt32, 1 << 20},
        Case{1, DType::kUInt8, 200},
        Case{5, DType::kInt64, int64_t(1) << 40}}) {
    const std::vector<Document> documents = sampleDocuments(c.base);
    const std::string independent = path("ref" + std::to_string(c.code));
    const std::string ours = path("ours" + std::to_string(c.code));
    writeRaw(independent, buildRaw(documents, c.code));
    ASSERT_TRUE(writeWithWriter(ours, c.dtype, documents).ok());
    EXPECT_EQ(readFile(ours + ".idx"), readFile(independent + ".idx"))
        << dtypeName(c.dtype);
    EXPECT_EQ(readFile(ours + ".bin"), readFile(independent + ".bin"))
        << dtypeName(c.dtype);
    EXPECT_FALSE(std::filesystem::exists(ours + ".idx.tmp"));
    EXPECT_FALSE(std::filesystem::exists(ours + ".bin.tmp"));
  }
}

TEST_F(IndexedDatasetTest, WriterRoundTripsThroughTheReader) {
  const std::vector<Document> documents = sampleDocuments(100);
  ASSERT_TRUE(writeWithWriter(path("rt"), DType::kUInt16, documents).ok());
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("rt"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  expectMatches(*ds, buildRaw(documents, 8), documents);
}

TEST_F(IndexedDatasetTest, WriterRefusesTokensOutsideTheDtype) {
  absl::StatusOr<IndexedDatasetWriter> writer =
      IndexedDatasetWriter::Create(path("w"), DType::kUInt16);
  ASSERT_TRUE(writer.ok());
  std::vector<int64_t> tooBig = {1, 65536};
  expectError(writer->AddSequence(tooBig), absl::StatusCode::kOutOfRange,
              {"token 1", "65536", "uint16", "[0, 65535]"});
  std::vector<int64_t> negative = {-1};
  EXPECT_EQ(writer->AddSequence(negative).code(),
            absl::StatusCode::kOutOfRange);
  // The refused sequences left nothing behind.
  std::vector<int64_t> fine = {0, 65535};
  ASSERT_TRUE(writer->AddSequence(fine).ok());
  ASSERT_TRUE(writer->EndDocument().ok());
  ASSERT_TRUE(writer->Finish().ok());
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("w"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  expectMatches(*ds, buildRaw({{fine}}, 8), {{fine}});

  absl::StatusOr<IndexedDatasetWriter> i8 =
      IndexedDatasetWriter::Create(path("w8"), DType::kInt8);
  ASSERT_TRUE(i8.ok());
  std::vector<int64_t> under = {-129};
  expectError(i8->AddSequence(under), absl::StatusCode::kOutOfRange,
              {"-129", "int8", "[-128, 127]"});
}

TEST_F(IndexedDatasetTest, WriterNeedsTheLastDocumentEnded) {
  absl::StatusOr<IndexedDatasetWriter> writer =
      IndexedDatasetWriter::Create(path("open"), DType::kInt32);
  ASSERT_TRUE(writer.ok());
  std::vector<int64_t> tokens = {1, 2};
  ASSERT_TRUE(writer->AddSequence(tokens).ok());
  expectError(writer->Finish(), absl::StatusCode::kFailedPrecondition,
              {"1 sequences were added after the last EndDocument"});
  EXPECT_FALSE(std::filesystem::exists(path("open.idx")));
  ASSERT_TRUE(writer->EndDocument().ok());
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_TRUE(IndexedDataset::Open(path("open")).ok());
  // A finished writer takes nothing more.
  EXPECT_EQ(writer->AddSequence(tokens).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(writer->Finish().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(IndexedDatasetTest, UnfinishedWriterLeavesNothing) {
  {
    absl::StatusOr<IndexedDatasetWriter> writer =
        IndexedDatasetWriter::Create(path("half"), DType::kUInt16);
    ASSERT_TRUE(writer.ok());
    std::vector<int64_t> tokens = {1, 2, 3};
    ASSERT_TRUE(writer->AddSequence(tokens).ok());
    ASSERT_TRUE(writer->EndDocument().ok());
    // Until Finish only the temporary .bin exists.
    EXPECT_TRUE(std::filesystem::exists(path("half.bin.tmp")));
    EXPECT_FALSE(std::filesystem::exists(path("half.bin")));
    EXPECT_FALSE(std::filesystem::exists(path("half.idx")));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(IndexedDatasetTest, WriterReplacesAnOlderDataset) {
  ASSERT_TRUE(
      writeWithWriter(path("re"), DType::kUInt16, sampleDocuments(0)).ok());
  const std::vector<Document> second = {{{7, 8, 9}}};
  ASSERT_TRUE(writeWithWriter(path("re"), DType::kUInt16, second).ok());
  absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path("re"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  expectMatches(*ds, buildRaw(second, 8), second);
}

TEST_F(IndexedDatasetTest, WriterErrors) {
  expectError(IndexedDatasetWriter::Create(path("f"), DType::kFloat32).status(),
              absl::StatusCode::kInvalidArgument, {"float32"});
  absl::Status s =
      IndexedDatasetWriter::Create(path("no/such/dir/x"), DType::kInt32)
          .status();
  expectError(s, absl::StatusCode::kNotFound, {path("no/such/dir/x.bin.tmp")});
}

TEST(DtypeTest, BestDtypeForVocabFollowsMegatron) {
  EXPECT_EQ(BestDtypeForVocab(32000), DType::kUInt16);
  EXPECT_EQ(BestDtypeForVocab(50257), DType::kUInt16);
  EXPECT_EQ(BestDtypeForVocab(65499), DType::kUInt16);
  // Megatron switches at 65500, not at the uint16 limit.
  EXPECT_EQ(BestDtypeForVocab(65500), DType::kInt32);
  EXPECT_EQ(BestDtypeForVocab(128256), DType::kInt32);
}

TEST(DtypeTest, CodesAndSizes) {
  const std::pair<uint8_t, size_t> expected[] = {
      {1, 1}, {2, 1}, {3, 2}, {4, 4}, {5, 8}, {6, 8}, {7, 4}, {8, 2}};
  for (auto [code, size] : expected) {
    absl::StatusOr<DType> dtype = dtypeFromCode(code);
    ASSERT_TRUE(dtype.ok());
    EXPECT_EQ(static_cast<uint8_t>(*dtype), code);
    EXPECT_EQ(dtypeSize(*dtype), size);
  }
  EXPECT_FALSE(dtypeFromCode(0).ok());
  EXPECT_FALSE(dtypeFromCode(9).ok());
  EXPECT_EQ(dtypeName(DType::kUInt16), "uint16");
  EXPECT_FALSE(isIntegerDtype(DType::kFloat64));
  EXPECT_TRUE(isIntegerDtype(DType::kInt64));
}

} // namespace
