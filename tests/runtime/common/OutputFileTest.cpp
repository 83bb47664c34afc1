//===- OutputFileTest.cpp - How the tools write their files ---------------===//
//
// Each case checks the file system after the write with lstat/stat and
// reads the bytes back: a regular file is replaced whole, a link keeps being
// a link to the new contents, a device or a pipe is written in place (and
// stays what it was), and a full disk (/dev/full) is an error naming the
// file rather than a silent empty result.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/OutputFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace braid::common {
namespace {

namespace fs = std::filesystem;

OutputFile::Options synced() {
  OutputFile::Options o;
  o.sync = true;
  return o;
}

OutputFile::Options inPlace() {
  OutputFile::Options o;
  o.inPlace = true;
  return o;
}

class OutputFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/braid-output-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir = pattern;
  }
  void TearDown() override { fs::remove_all(dir); }

  static std::string read(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  /// Names in the directory other than `keep` (temporaries left behind).
  std::vector<std::string> others(const std::vector<std::string> &keep) {
    std::vector<std::string> out;
    for (const auto &entry : fs::directory_iterator(dir)) {
      std::string name = entry.path().filename().string();
      if (std::find(keep.begin(), keep.end(), name) == keep.end())
        out.push_back(name);
    }
    return out;
  }

  std::string dir;
};

TEST_F(OutputFileTest, ReplacesARegularFileWhole) {
  std::string path = dir + "/out.bin";
  std::ofstream(path) << "old contents";
  auto out = OutputFile::Open(path, synced());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE((*out)->Write("new").ok());
  // Until the commit, the old file is what a reader sees.
  EXPECT_EQ(read(path), "old contents");
  ASSERT_TRUE((*out)->Commit().ok());
  EXPECT_EQ(read(path), "new");
  EXPECT_TRUE(others({"out.bin"}).empty());
}

TEST_F(OutputFileTest, AnAbandonedWriteLeavesTheOldFileAndNoTemporary) {
  std::string path = dir + "/out.bin";
  std::ofstream(path) << "old";
  {
    auto out = OutputFile::Open(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE((*out)->Write("partial").ok());
  }
  EXPECT_EQ(read(path), "old");
  EXPECT_TRUE(others({"out.bin"}).empty());
}

TEST_F(OutputFileTest, FollowsALinkAndKeepsIt) {
  std::string target = dir + "/target.txt", link = dir + "/link.txt";
  std::ofstream(target) << "old";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_TRUE(WriteOutputFile(link, "through the link").ok());
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced by a file";
  EXPECT_EQ(read(target), "through the link");
  EXPECT_TRUE(others({"target.txt", "link.txt"}).empty());
}

TEST_F(OutputFileTest, ALinkToNothingCreatesItsTarget) {
  std::string target = dir + "/made.txt", link = dir + "/dangling";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_TRUE(WriteOutputFile(link, "made").ok());
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(read(target), "made");
}

TEST_F(OutputFileTest, WritesADeviceInPlace) {
  // /dev/null stays a character device (as root, a rename over it would
  // have made it a regular file).
  ASSERT_TRUE(WriteOutputFile("/dev/null", "discarded", synced()).ok());
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(OutputFileTest, WritesAPipeInPlace) {
  std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = read(fifo); });
  absl::Status written = WriteOutputFile(fifo, "down the pipe");
  reader.join();
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_EQ(received, "down the pipe");
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(OutputFileTest, AFullDiskIsAnErrorNamingTheFile) {
  // /dev/full accepts the open and fails every write with ENOSPC: the
  // buffered bytes fail at the flush, which Commit checks.
  auto out = OutputFile::Open("/dev/full");
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE((*out)->Write(std::string(100, 'x')).ok()); // buffered
  absl::Status committed = (*out)->Commit();
  ASSERT_FALSE(committed.ok());
  EXPECT_NE(committed.message().find("/dev/full"), std::string::npos)
      << committed;
  EXPECT_NE(committed.message().find("space"), std::string::npos)
      << committed;
  // A write larger than the buffer fails at once.
  auto big = OutputFile::Open("/dev/full");
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE((*big)->Write(std::string(1 << 20, 'x')).ok());
  EXPECT_FALSE((*big)->Commit().ok());
}

TEST_F(OutputFileTest, FlushReportsAFullDisk) {
  auto out = OutputFile::Open("/dev/full", inPlace());
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE((*out)->Write("a line\n").ok());
  absl::Status flushed = (*out)->Flush();
  EXPECT_FALSE(flushed.ok());
  EXPECT_NE(flushed.message().find("/dev/full"), std::string::npos);
}

TEST_F(OutputFileTest, RefusesADirectoryAndAMissingParent) {
  absl::StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Open(dir);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("is a directory"), std::string::npos)
      << out.status();
  out = OutputFile::Open(dir + "/no/such/dir/file");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find(dir + "/no/such/dir/file"),
            std::string::npos)
      << out.status();
  EXPECT_TRUE(others({}).empty());
}

TEST_F(OutputFileTest, InPlaceWritesTheRegularFileAsItGrows) {
  std::string path = dir + "/metrics.jsonl";
  std::ofstream(path) << "an older run's lines\n";
  auto out = OutputFile::Open(path, inPlace());
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(read(path), ""); // truncated at open
  ASSERT_TRUE((*out)->Write("{\"step\": 1}\n").ok());
  ASSERT_TRUE((*out)->Flush().ok());
  EXPECT_EQ(read(path), "{\"step\": 1}\n");
  ASSERT_TRUE((*out)->Commit().ok());
  EXPECT_TRUE(others({"metrics.jsonl"}).empty());
}

TEST_F(OutputFileTest, AnOpenFailureNamesTheTemporaryItTried) {
  // The temporary's name is part of the message (it once printed "()").
  auto out = OutputFile::Open(dir + "/missing/p.bin");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("(" + dir + "/missing/p.bin."),
            std::string::npos)
      << out.status();
  EXPECT_EQ(out.status().message().find("()"), std::string::npos)
      << out.status();
}

TEST_F(OutputFileTest, OutputStreamReplacesTheFileOnlyAtCommit) {
  std::string path = dir + "/samples.jsonl";
  std::ofstream(path) << "old";
  {
    OutputStream out;
    EXPECT_FALSE(out.is_open());
    out << "nothing"; // not open: bad, writes nothing
    EXPECT_FALSE(out.good());
    ASSERT_TRUE(out.Open(path).ok());
    EXPECT_TRUE(out.good());
    out << "line " << 1 << "\n";
    EXPECT_EQ(read(path), "old"); // not yet
    // Abandoned (a run that failed on the way): the old file stays.
  }
  EXPECT_EQ(read(path), "old");
  EXPECT_TRUE(others({"samples.jsonl"}).empty());
  OutputStream out;
  ASSERT_TRUE(out.Open(path).ok());
  out << "line " << 2 << "\n";
  ASSERT_TRUE(out.Commit().ok());
  EXPECT_EQ(read(path), "line 2\n");
  EXPECT_FALSE(out.is_open());
  EXPECT_TRUE(others({"samples.jsonl"}).empty());
}

TEST_F(OutputFileTest, OutputStreamReportsAFullDiskAtCommit) {
  OutputStream out;
  ASSERT_TRUE(out.Open("/dev/full").ok());
  out << std::string(100, 'x') << "\n"; // buffered
  absl::Status committed = out.Commit();
  ASSERT_FALSE(committed.ok());
  EXPECT_NE(committed.message().find("/dev/full"), std::string::npos)
      << committed;
  // Open fails as OutputFile::Open does, naming the path.
  OutputStream refused;
  absl::Status s = refused.Open(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is a directory"), std::string::npos) << s;
}

TEST_F(OutputFileTest, CheckWritableCreatesNothing) {
  EXPECT_TRUE(CheckWritable(dir + "/new.safetensors").ok());
  EXPECT_TRUE(CheckWritable("/dev/null").ok());
  absl::Status s = CheckWritable(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is a directory"), std::string::npos) << s;
  s = CheckWritable(dir + "/no/such/dir/file");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/no/such/dir/file"), std::string::npos)
      << s;
  EXPECT_FALSE(CheckWritable("").ok());
  if (::geteuid() != 0) {
    ASSERT_EQ(::chmod(dir.c_str(), 0500), 0);
    s = CheckWritable(dir + "/p.safetensors");
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("ermission"), std::string::npos) << s;
  }
  EXPECT_TRUE(others({}).empty());
}

} // namespace
} // namespace braid::common
