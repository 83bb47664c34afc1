//===- DataTestUtil.h - Datasets written for the data layer's tests -------===//
//
// A temporary directory per test, a writer of small datasets whose
// documents are given token by token, and sample options, shared by the
// tests of GPT samples, document ranges, splits and blends.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TESTS_RUNTIME_DATA_DATATESTUTIL_H
#define BRAID_TESTS_RUNTIME_DATA_DATATESTUTIL_H

#include "runtime/data/GptSamples.h"
#include "runtime/data/IndexedDataset.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace braid::data::testing {

/// A document as its sequences (a document may be stored as several).
using Document = std::vector<std::vector<int64_t>>;

/// A one-sequence document of `length` tokens base, base + 1, ...
inline Document countingDocument(int64_t base, int64_t length) {
  std::vector<int64_t> tokens(static_cast<size_t>(length));
  for (int64_t k = 0; k < length; ++k)
    tokens[static_cast<size_t>(k)] = base + k;
  return {tokens};
}

/// The options of `numSamples` samples of `seqLength` tokens.
inline GptSampleOptions options(int64_t seqLength, uint64_t numSamples,
                         SampleOrder order, uint64_t seed = 1234) {
  GptSampleOptions o;
  o.seqLength = seqLength;
  o.numSamples = numSamples;
  o.order = order;
  o.seed = seed;
  return o;
}

inline void expectError(const absl::Status &status, absl::StatusCode code,
                        const std::string &part) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(part), std::string::npos)
      << "'" << part << "' not in: " << status.message();
}

/// A fixture with a fresh directory, removed after the test.
class DataTest : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/braid-data-util-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string &name) const { return dir_ + "/" + name; }

  /// Writes `documents` with IndexedDatasetWriter and opens them.
  IndexedDataset makeDataset(const std::string &name,
                             const std::vector<Document> &documents,
                             DType dtype = DType::kUInt16) {
    absl::StatusOr<IndexedDatasetWriter> writer =
        IndexedDatasetWriter::Create(path(name), dtype);
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (const Document &document : documents) {
      for (const std::vector<int64_t> &sequence : document)
        EXPECT_TRUE(writer->AddSequence(sequence).ok());
      EXPECT_TRUE(writer->EndDocument().ok());
    }
    EXPECT_TRUE(writer->Finish().ok());
    absl::StatusOr<IndexedDataset> ds = IndexedDataset::Open(path(name));
    EXPECT_TRUE(ds.ok()) << ds.status();
    return std::move(*ds);
  }

  std::string dir_;
};

} // namespace braid::data::testing

#endif // BRAID_TESTS_RUNTIME_DATA_DATATESTUTIL_H
