//===- CheckpointTest.cpp - Braid checkpoint directories ------------------===//
//
// The expected global indices of SliceRuns are worked out by hand from the
// row-major layout of the global tensor and the slice a rank holds (its part
// of every block along the split dimension). Manifests for the refusals are
// JSON written by hand with manifest.proto's field names; the reader's
// checkpoint is put together by hand (files by WriteSafetensors, pieces
// chosen here) with values that encode their global index, so every read
// says where its elements came from.
//
//===----------------------------------------------------------------------===//

#include "runtime/ckpt/Checkpoint.h"

#include "RawSafetensors.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <unistd.h>
#include <vector>

using namespace braid::ckpt;
using namespace braid::ckpt::testing;

namespace fs = std::filesystem;

namespace {

using Runs = std::vector<std::pair<int64_t, int64_t>>;

Sharding split(const std::string &axis, int dim,
               std::vector<int64_t> blocks = {}) {
  Sharding s;
  s.set_axis(axis);
  s.set_dim(dim);
  for (int64_t b : blocks)
    s.add_blocks(b);
  return s;
}

/// Expects `status` to fail with a message holding every one of `parts`.
void expectMentions(const absl::Status &status,
                    std::initializer_list<std::string> parts) {
  ASSERT_FALSE(status.ok())
      << "expected an error mentioning " << *parts.begin();
  for (const std::string &part : parts)
    EXPECT_TRUE(absl::StrContains(status.message(), part))
        << "\"" << status.message() << "\" does not mention \"" << part << "\"";
}

/// The names in `dir`, so that leftovers (temporaries, .old directories)
/// show up in comparisons.
std::set<std::string> entries(const std::string &dir) {
  std::set<std::string> names;
  for (const fs::directory_entry &e : fs::directory_iterator(dir))
    names.insert(e.path().filename().string());
  return names;
}

absl::Span<const uint8_t> asBytes(const std::string &s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

//===----------------------------------------------------------------------===//
// SliceRuns
//===----------------------------------------------------------------------===//

TEST(SliceRunsTest, SplitOnDimZeroIsOneRunPerRank) {
  // [4, 3] over 2 ranks on dim 0: rank 0 holds rows 0-1 (globals 0..5),
  // rank 1 rows 2-3 (globals 6..11).
  EXPECT_EQ(SliceRuns({4, 3}, split("tp", 0), 2, 0, 0, 6), (Runs{{0, 6}}));
  EXPECT_EQ(SliceRuns({4, 3}, split("tp", 0), 2, 1, 0, 6), (Runs{{6, 6}}));
  // Four ranks: one row each; rank 2 holds row 2, globals 6..8.
  EXPECT_EQ(SliceRuns({4, 3}, split("tp", 0), 4, 2, 0, 3), (Runs{{6, 3}}));
}

TEST(SliceRunsTest, SplitOnDimOneIsOneRunPerRow) {
  // [3, 4] over 2 ranks on dim 1: rank 0 holds columns 0-1, rank 1 columns
  // 2-3 of each row (row r starts at global 4r).
  EXPECT_EQ(SliceRuns({3, 4}, split("tp", 1), 2, 0, 0, 6),
            (Runs{{0, 2}, {4, 2}, {8, 2}}));
  EXPECT_EQ(SliceRuns({3, 4}, split("tp", 1), 2, 1, 0, 6),
            (Runs{{2, 2}, {6, 2}, {10, 2}}));
  // A middle dimension: [2, 4, 2] split on dim 1 over 2; rank 1 holds
  // rows 2-3 of each of the 2 matrices of 8 elements: globals 4..7 and
  // 12..15.
  EXPECT_EQ(SliceRuns({2, 4, 2}, split("tp", 1), 2, 1, 0, 8),
            (Runs{{4, 4}, {12, 4}}));
}

TEST(SliceRunsTest, BlocksAreSplitEachOnItsOwn) {
  // A fused [q|k|v] of [8, 2] with blocks {4, 2, 2} on dim 0 over 2 ranks:
  // q is rows 0-3, k rows 4-5, v rows 6-7; each rank holds half of each.
  // Rank 0: q rows 0-1 (globals 0..3), k row 4 (8, 9), v row 6 (12, 13).
  EXPECT_EQ(SliceRuns({8, 2}, split("tp", 0, {4, 2, 2}), 2, 0, 0, 8),
            (Runs{{0, 4}, {8, 2}, {12, 2}}));
  // Rank 1: q rows 2-3 (4..7), k row 5 (10, 11), v row 7 (14, 15).
  EXPECT_EQ(SliceRuns({8, 2}, split("tp", 0, {4, 2, 2}), 2, 1, 0, 8),
            (Runs{{4, 4}, {10, 2}, {14, 2}}));
  // The same blocks along columns: [2, 8] on dim 1. Rank 1 holds, per row,
  // q columns 2-3, k column 5, v column 7; row 1 starts at 8.
  EXPECT_EQ(SliceRuns({2, 8}, split("tp", 1, {4, 2, 2}), 2, 1, 0, 8),
            (Runs{{2, 2}, {5, 1}, {7, 1}, {10, 2}, {13, 1}, {15, 1}}));
}

TEST(SliceRunsTest, UnsplitTensorIsItself) {
  // An empty axis: the "slice" is the whole tensor, whatever the coordinate
  // and axis size say.
  EXPECT_EQ(SliceRuns({2, 3}, Sharding(), 1, 0, 0, 6), (Runs{{0, 6}}));
  EXPECT_EQ(SliceRuns({2, 3}, Sharding(), 1, 0, 2, 5), (Runs{{2, 3}}));
  EXPECT_EQ(SliceRuns({5}, Sharding(), 1, 0, 4, 5), (Runs{{4, 1}}));
}

TEST(SliceRunsTest, SubRangesCutRunsInTheMiddle) {
  // [3, 4] on dim 1, rank 1: local 0-1 -> globals 2-3, local 2-3 -> 6-7,
  // local 4-5 -> 10-11. Local [1, 5) is global 3, then 6-7, then 10.
  EXPECT_EQ(SliceRuns({3, 4}, split("tp", 1), 2, 1, 1, 5),
            (Runs{{3, 1}, {6, 2}, {10, 1}}));
  // Within a single run.
  EXPECT_EQ(SliceRuns({3, 4}, split("tp", 1), 2, 1, 3, 4), (Runs{{7, 1}}));
  // Blocks, rank 1: local 0-3 -> 4-7, 4-5 -> 10-11, 6-7 -> 14-15; local
  // [2, 5) is 6-7 then 10.
  EXPECT_EQ(SliceRuns({8, 2}, split("tp", 0, {4, 2, 2}), 2, 1, 2, 5),
            (Runs{{6, 2}, {10, 1}}));
  // Dim 0, rank 1 of [4, 3]: local [1, 4) is globals 7..9.
  EXPECT_EQ(SliceRuns({4, 3}, split("tp", 0), 2, 1, 1, 4), (Runs{{7, 3}}));
  // An empty range has no runs.
  EXPECT_EQ(SliceRuns({3, 4}, split("tp", 1), 2, 1, 3, 3), Runs{});
}

//===----------------------------------------------------------------------===//
// ReadManifest and WriteManifest
//===----------------------------------------------------------------------===//

TEST(CrcTest, KnownAnswer) {
  // The CRC-32 check value of "123456789" (zlib/PKZIP polynomial), printed
  // as 8 lowercase hex digits, with leading zeros kept.
  EXPECT_EQ(Crc32(asBytes("123456789")), 0xcbf43926u);
  EXPECT_EQ(CrcHex(0xcbf43926u), "cbf43926");
  EXPECT_EQ(CrcHex(0x1au), "0000001a");
}

TEST(CheckpointNamesTest, Names) {
  EXPECT_EQ(StepDirName(10), "step-00000010");
  EXPECT_EQ(RankFileName(3), "rank-00003.safetensors");
  EXPECT_EQ(TempDirOf("/r", 10), "/r/.step-00000010.tmp");
}

/// A manifest as JSON, valid unless a field is changed: tensor kUp ([4, 3]
/// split on dim 0 over tp = 2, slices of 6 elements) with a param piece per
/// slice, one in each rank's file.
struct ManifestText {
  std::string format = "braid-checkpoint";
  std::string version = "1";
  std::string dtype = "F32";
  std::string axis = "tp";
  /// The file of the second piece, and the second file listed.
  std::string pieceFile = "rank-00001.safetensors";
  std::string listedFile = "rank-00001.safetensors";
  /// The second piece's coordinate and end.
  std::string coordinate = "1";
  std::string end = "6";
  /// JSON appended to the first tensor's pieces / to the tensors.
  std::string extraPieces;
  std::string extraTensors;
  /// JSON fields appended at the top level (after "mesh").
  std::string extraFields;

  static constexpr char kUp[] = "layers.0.mlp.up_proj.weight";

  static std::string piece(const std::string &coordinate,
                           const std::string &begin, const std::string &end,
                           const std::string &file, const std::string &key) {
    return absl::StrCat(R"({"state": "param", "coordinate": ")", coordinate,
                        R"(", "begin": ")", begin, R"(", "end": ")", end,
                        R"(", "file": ")", file, R"(", "key": ")", key,
                        R"(", "crc32": "00000000"})");
  }

  std::string render() const {
    return absl::StrCat(
        R"({"format": ")", format, R"(", "version": )", version,
        R"(, "step": "3", "consumed_samples": "96", "seed": "1234",
  "mesh": {"axes": ["dp", "tp"], "sizes": ["1", "2"]},)",
        extraFields, R"(
  "tensors": [{"name": ")",
        kUp, R"(", "shape": ["4", "3"], "dtype": ")", dtype,
        R"(", "sharding": {"axis": ")", axis, R"(", "dim": 0}, "pieces": [)",
        piece("0", "0", "6", "rank-00000.safetensors", "up/0"), ", ",
        piece(coordinate, "0", end, pieceFile, "up/1"), extraPieces, "]}",
        extraTensors, R"(],
  "files": [{"name": "rank-00000.safetensors", "rank": "0", "bytes": "8",
             "crc32": "00000000"},
            {"name": ")",
        listedFile, R"(", "rank": "1", "bytes": "8", "crc32": "00000000"}]})");
  }
};

class ManifestTest : public ::testing::Test {
protected:
  ManifestTest() : dir_("manifest") {}

  absl::StatusOr<Manifest> read(const ManifestText &text) {
    writeBytes(dir_.file(kManifestFile), text.render());
    return ReadManifest(dir_.path());
  }
  /// Expects `text` to be refused naming the manifest's path and `parts`.
  void expectRefused(const ManifestText &text,
                     std::initializer_list<std::string> parts) {
    absl::StatusOr<Manifest> m = read(text);
    ASSERT_FALSE(m.ok()) << text.render();
    expectMentions(m.status(), {dir_.file(kManifestFile)});
    expectMentions(m.status(), parts);
  }

  TempDir dir_;
};

TEST_F(ManifestTest, ReadsHandWrittenJson) {
  absl::StatusOr<Manifest> m = read(ManifestText());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->step(), 3);
  EXPECT_EQ(m->consumed_samples(), 96);
  EXPECT_EQ(m->seed(), 1234u);
  ASSERT_EQ(m->mesh().sizes_size(), 2);
  EXPECT_EQ(m->mesh().sizes(1), 2);
  ASSERT_EQ(m->tensors_size(), 1);
  const Tensor &t = m->tensors(0);
  EXPECT_EQ(t.name(), ManifestText::kUp);
  EXPECT_EQ(t.sharding().axis(), "tp");
  ASSERT_EQ(t.pieces_size(), 2);
  EXPECT_EQ(t.pieces(1).coordinate(), 1);
  EXPECT_EQ(t.pieces(1).end(), 6);
  EXPECT_EQ(t.pieces(1).file(), "rank-00001.safetensors");
  EXPECT_EQ(m->files(1).rank(), 1);
}

TEST_F(ManifestTest, MissingOrMalformedManifest) {
  absl::StatusOr<Manifest> m = ReadManifest(dir_.path());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  expectMentions(m.status(), {dir_.file(kManifestFile)});

  writeBytes(dir_.file(kManifestFile), R"({"format": "braid-checkpoint",)");
  m = ReadManifest(dir_.path());
  expectMentions(m.status(), {dir_.file(kManifestFile)});
}

// fp16's loss scaler: read back, and refused out of range (the step is 3).
TEST_F(ManifestTest, LossScalerState) {
  ManifestText text;
  text.extraFields = R"("loss_scaler": {"scale": 1024, "growth_tracker": "7",
    "hysteresis_tracker": "-1", "skipped_steps": "2"},)";
  absl::StatusOr<Manifest> m = read(text);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->loss_scaler().scale(), 1024);
  EXPECT_EQ(m->loss_scaler().growth_tracker(), 7);
  EXPECT_EQ(m->loss_scaler().hysteresis_tracker(), -1);
  EXPECT_EQ(m->loss_scaler().skipped_steps(), 2);
  text.extraFields = R"("loss_scaler": {"scale": 1024, "skipped_steps": "4"},)";
  expectRefused(text, {"a loss scaler's state out of range",
                       "4 steps skipped of 3"});
  text.extraFields = R"("loss_scaler": {"scale": 0},)";
  expectRefused(text, {"a loss scaler's state out of range (scale 0"});
}

TEST_F(ManifestTest, RefusesWrongFormat) {
  ManifestText text;
  text.format = "braid-ckpt-v0";
  expectRefused(text, {"braid-ckpt-v0"});
}

TEST_F(ManifestTest, RefusesWrongVersion) {
  ManifestText text;
  text.version = "2";
  expectRefused(text, {"version"});
  // Version 0 is what a manifest without the field reads as.
  text.version = "0";
  expectRefused(text, {"version"});
}

TEST_F(ManifestTest, RefusesDuplicateTensor) {
  ManifestText text;
  text.extraTensors =
      absl::StrCat(R"(, {"name": ")", ManifestText::kUp,
                   R"(", "shape": ["3"], "dtype": "F32", "pieces": []})");
  expectRefused(text, {ManifestText::kUp});
}

TEST_F(ManifestTest, RefusesNonF32) {
  ManifestText text;
  text.dtype = "BF16";
  expectRefused(text, {ManifestText::kUp, "BF16"});
}

TEST_F(ManifestTest, RefusesAxisNotInMesh) {
  ManifestText text;
  text.axis = "pp";
  expectRefused(text, {ManifestText::kUp, "pp"});
}

TEST_F(ManifestTest, RefusesPieceInUnlistedFile) {
  ManifestText text;
  text.pieceFile = "rank-00007.safetensors";
  expectRefused(text, {ManifestText::kUp, "rank-00007.safetensors"});
}

TEST_F(ManifestTest, RefusesPieceBeyondSlice) {
  // A slice of [4, 3] over 2 ranks has 6 elements: end 6 is the last valid
  // (ReadsHandWrittenJson), 7 is one past.
  ManifestText text;
  text.end = "7";
  expectRefused(text, {ManifestText::kUp});
  // Coordinates along tp are 0 and 1.
  text = ManifestText();
  text.coordinate = "2";
  expectRefused(text, {ManifestText::kUp});
  // begin > end.
  text = ManifestText();
  text.extraPieces =
      ", " + ManifestText::piece("0", "4", "2", "rank-00000.safetensors", "x");
  expectRefused(text, {ManifestText::kUp});
}

TEST_F(ManifestTest, RefusesFileNameOutsideDirectory) {
  ManifestText text;
  text.listedFile = text.pieceFile = "sub/rank-00001.safetensors";
  expectRefused(text, {"sub/rank-00001.safetensors"});
  text.listedFile = text.pieceFile = "..";
  expectRefused(text, {"\"..\""});
}

TEST_F(ManifestTest, RefusesOverlappingPieces) {
  // A second param piece of slice 0 covering elements [2, 6), which the
  // first piece [0, 6) already holds: the reader could not tell which to
  // believe.
  ManifestText text;
  text.extraPieces =
      ", " + ManifestText::piece("0", "2", "6", "rank-00001.safetensors", "x");
  expectRefused(text, {ManifestText::kUp});
}

TEST_F(ManifestTest, RefusesStatesThatNoPieceCompletes) {
  // Slice 1's param ends at element 4 of its 6: a piece is missing.
  ManifestText text;
  text.end = "4";
  expectRefused(text, {ManifestText::kUp,
                       "no piece holds elements [4, 6) of its param in slice "
                       "1 (a piece is missing from the manifest)"});
  // A gap inside: [0, 2) and [3, 6).
  text = ManifestText();
  text.end = "2";
  text.extraPieces =
      ", " + ManifestText::piece("1", "3", "6", "rank-00001.safetensors", "x");
  expectRefused(text, {"no piece holds elements [2, 3) of its param in "
                       "slice 1"});
  // Pieces of several files together are whole: [0, 2) and [2, 6).
  text.extraPieces =
      ", " + ManifestText::piece("1", "2", "6", "rank-00000.safetensors", "x");
  EXPECT_TRUE(read(text).ok());
  // AdamW's moments: one without the other, or one missing a slice.
  auto moment = [](const char *state, const char *coordinate) {
    std::string p =
        ManifestText::piece(coordinate, "0", "6", "rank-00000.safetensors",
                            absl::StrCat(state, coordinate));
    return ", " + absl::StrReplaceAll(
                      p, {{R"("state": "param")",
                           absl::StrCat(R"("state": ")", state, "\"")}});
  };
  text = ManifestText();
  text.extraPieces = moment("exp_avg", "0") + moment("exp_avg", "1");
  expectRefused(text, {ManifestText::kUp, "exp_avg but not its exp_avg_sq"});
  text.extraPieces += moment("exp_avg_sq", "0");
  expectRefused(text, {"no piece holds elements [0, 6) of its exp_avg_sq in "
                       "slice 1"});
  text.extraPieces += moment("exp_avg_sq", "1");
  EXPECT_TRUE(read(text).ok());
}

TEST_F(ManifestTest, WriteThenReadRoundTrips) {
  Manifest m;
  m.set_format(kCheckpointFormat);
  m.set_version(kCheckpointVersion);
  m.set_step(12);
  m.set_consumed_samples(384);
  // Beyond int64 and beyond a double's exact integers: the JSON must carry
  // all 64 bits.
  m.set_seed(18446744073709551557ull);
  m.set_planned_steps(1000);
  m.set_global_batch_size(32);
  m.set_data_order("shuffled");
  m.set_model_spec("vocab_size: 128\nname: \"tiny \\\"q\\\"\"\n");
  m.mutable_mesh()->add_axes("dp");
  m.mutable_mesh()->add_sizes(1);
  m.mutable_mesh()->add_axes("tp");
  m.mutable_mesh()->add_sizes(2);
  m.set_layout("tp=2");
  Tensor *qkv = m.add_tensors();
  qkv->set_name("layers.0.attn.qkv");
  qkv->add_shape(8);
  qkv->add_shape(2);
  qkv->set_dtype("F32");
  *qkv->mutable_sharding() = split("tp", 0, {4, 2, 2});
  for (int c = 0; c < 2; ++c)
    for (const char *state : {"param", "exp_avg", "exp_avg_sq"}) {
      Piece *p = qkv->add_pieces();
      p->set_state(state);
      p->set_coordinate(c);
      p->set_begin(0);
      p->set_end(8);
      p->set_file(RankFileName(c));
      p->set_key(absl::StrCat("qkv/", state, "/", c));
      p->set_crc32(CrcHex(0x0badf00du + c));
    }
  Tensor *norm = m.add_tensors();
  norm->set_name("norm.weight");
  norm->add_shape(2);
  norm->set_dtype("F32");
  for (int r = 0; r < 2; ++r) {
    File *f = m.add_files();
    f->set_name(RankFileName(r));
    f->set_rank(r);
    f->set_bytes(4096 + r);
    f->set_crc32(CrcHex(0xffffffffu - r));
  }

  ASSERT_TRUE(WriteManifest(dir_.path(), m).ok());
  // Written by way of a temporary that is renamed away.
  EXPECT_EQ(entries(dir_.path()), std::set<std::string>{kManifestFile});
  absl::StatusOr<Manifest> back = ReadManifest(dir_.path());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(m, *back))
      << back->DebugString();

  // Writing again replaces the manifest.
  m.set_step(13);
  ASSERT_TRUE(WriteManifest(dir_.path(), m).ok());
  back = ReadManifest(dir_.path());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step(), 13);
}

//===----------------------------------------------------------------------===//
// Checkpoint roots
//===----------------------------------------------------------------------===//

class CheckpointRootTest : public ::testing::Test {
protected:
  CheckpointRootTest() : dir_("root"), root_(dir_.file("run")) {}

  std::string stepDir(int64_t step) const {
    return (fs::path(root_) / StepDirName(step)).string();
  }

  /// What a save of `step` does: an empty temporary, a manifest in it, the
  /// commit. `marker`, when given, is a file put beside the manifest.
  absl::Status save(int64_t step, int64_t consumed = 0,
                    const std::string &marker = "",
                    const std::string &lineage = "") {
    if (absl::Status s = PrepareTempDir(root_, step); !s.ok())
      return s;
    Manifest m;
    m.set_format(kCheckpointFormat);
    m.set_version(kCheckpointVersion);
    m.set_step(step);
    m.set_consumed_samples(consumed);
    m.set_lineage(lineage);
    if (absl::Status s = WriteManifest(TempDirOf(root_, step), m); !s.ok())
      return s;
    if (!marker.empty())
      writeBytes((fs::path(TempDirOf(root_, step)) / marker).string(), marker);
    return CommitCheckpoint(root_, step);
  }

  std::string latest() const {
    return readBytes((fs::path(root_) / kLatestFile).string());
  }

  TempDir dir_;
  std::string root_;
};

TEST_F(CheckpointRootTest, ResolvesDirectoryWithManifest) {
  writeBytes(dir_.file(kManifestFile), "{}");
  absl::StatusOr<std::string> dir = ResolveCheckpoint(dir_.path());
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, dir_.path());
}

TEST_F(CheckpointRootTest, ResolvesLatest) {
  fs::create_directories(stepDir(3));
  fs::create_directories(stepDir(5));
  writeBytes((fs::path(stepDir(3)) / kManifestFile).string(), "{}");
  writeBytes((fs::path(stepDir(5)) / kManifestFile).string(), "{}");
  // `latest`, not the highest step, decides.
  writeBytes((fs::path(root_) / kLatestFile).string(), "step-00000003\n");
  absl::StatusOr<std::string> dir = ResolveCheckpoint(root_);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, stepDir(3));
}

TEST_F(CheckpointRootTest, RootWithoutLatestIsNotFound) {
  fs::create_directories(root_);
  // A step directory alone does not make the root resolvable.
  fs::create_directories(stepDir(1));
  writeBytes((fs::path(stepDir(1)) / kManifestFile).string(), "{}");
  absl::StatusOr<std::string> dir = ResolveCheckpoint(root_);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kNotFound);
  expectMentions(dir.status(), {root_, "no checkpoint"});

  dir = ResolveCheckpoint(dir_.file("nowhere"));
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kNotFound);
  expectMentions(dir.status(), {dir_.file("nowhere")});
}

TEST_F(CheckpointRootTest, LatestNamingMissingOrIncompleteIsDataLoss) {
  const std::string latestPath = (fs::path(root_) / kLatestFile).string();
  fs::create_directories(root_);
  writeBytes(latestPath, "step-00000007\n");
  absl::StatusOr<std::string> dir = ResolveCheckpoint(root_);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kDataLoss);
  expectMentions(dir.status(), {latestPath, "step-00000007"});

  // The directory without its manifest is an incomplete save.
  fs::create_directories(stepDir(7));
  dir = ResolveCheckpoint(root_);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kDataLoss);
  expectMentions(dir.status(), {latestPath});

  // Something that is no step directory (it must not escape the root).
  writeBytes(latestPath, "../elsewhere\n");
  dir = ResolveCheckpoint(root_);
  expectMentions(dir.status(), {latestPath});
}

TEST_F(CheckpointRootTest, PrepareTempDirStartsEmpty) {
  // The root is created, nested.
  ASSERT_TRUE(PrepareTempDir(root_, 4).ok());
  EXPECT_TRUE(fs::is_directory(TempDirOf(root_, 4)));
  // A crashed save's leftovers are removed.
  writeBytes(
      (fs::path(TempDirOf(root_, 4)) / "rank-00000.safetensors").string(),
      "partial");
  ASSERT_TRUE(PrepareTempDir(root_, 4).ok());
  EXPECT_TRUE(fs::is_directory(TempDirOf(root_, 4)));
  EXPECT_TRUE(fs::is_empty(TempDirOf(root_, 4)));
  // Nothing is committed by preparing.
  EXPECT_TRUE(ListCheckpoints(root_).empty());
}

TEST_F(CheckpointRootTest, CommitListAndPrune) {
  for (int64_t step : {1, 2, 3}) {
    absl::Status s = save(step);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(latest(), StepDirName(step) + "\n");
  }
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{1, 2, 3}));
  // No temporaries left over, of directories or of `latest`.
  EXPECT_EQ(entries(root_),
            (std::set<std::string>{"latest", "step-00000001", "step-00000002",
                                   "step-00000003"}));
  absl::StatusOr<std::string> dir = ResolveCheckpoint(root_);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, stepDir(3));
  absl::StatusOr<Manifest> m = ReadManifest(*dir);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->step(), 3);

  // A crashed save older than the newest checkpoint, and one of a step after
  // it (a save that may still be going on, or whose data is the newest).
  fs::create_directories(TempDirOf(root_, 1));
  writeBytes(
      (fs::path(TempDirOf(root_, 1)) / "rank-00000.safetensors").string(),
      "partial");
  fs::create_directories(TempDirOf(root_, 9));
  // A step directory without a manifest is no checkpoint: not listed, not
  // counted among those kept.
  fs::create_directories(stepDir(5));
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{1, 2, 3}));

  ASSERT_TRUE(PruneCheckpoints(root_, 2, "", 3).ok());
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(entries(root_),
            (std::set<std::string>{"latest", "step-00000002", "step-00000003",
                                   "step-00000005", ".step-00000009.tmp"}));
  EXPECT_EQ(latest(), "step-00000003\n");

  // Keeping more than there are removes nothing.
  ASSERT_TRUE(PruneCheckpoints(root_, 5, "", 3).ok());
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{2, 3}));

  // Keeping none would delete the checkpoint `latest` names.
  absl::Status s = PruneCheckpoints(root_, 0, "", 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PruneCheckpoints(root_, -1, "", 3).ok());
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{2, 3}));

  ASSERT_TRUE(PruneCheckpoints(root_, 1, "", 3).ok());
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{3}));
}

TEST_F(CheckpointRootTest, OnlyCanonicalStepNamesAreCheckpoints) {
  // Saves name their directories StepDirName(N); "step-5" is something
  // else (a user's copy, say): neither listed nor removed by Prune.
  ASSERT_TRUE(save(6).ok());
  fs::create_directories((fs::path(root_) / "step-5").string());
  writeBytes((fs::path(root_) / "step-5" / kManifestFile).string(), "{}");
  ASSERT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{6}));
  ASSERT_TRUE(PruneCheckpoints(root_, 1, "", 6).ok());
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{6}));
  EXPECT_TRUE(fs::exists(fs::path(root_) / "step-5"));
}

TEST_F(CheckpointRootTest, PruneOfEmptyOrMissingRoot) {
  EXPECT_TRUE(ListCheckpoints(root_).empty());
  EXPECT_TRUE(PruneCheckpoints(root_, 1, "", 0).ok());
}

TEST_F(CheckpointRootTest, PruneAfterAResumeFromAnEarlierStepKeepsLatest) {
  // A run of lineage "a" saves steps 1..6 keeping 4: steps 3..6 remain.
  for (int64_t step = 1; step <= 6; ++step) {
    ASSERT_TRUE(save(step, 0, "", "a").ok());
    ASSERT_TRUE(PruneCheckpoints(root_, 4, "a", step).ok());
  }
  ASSERT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{3, 4, 5, 6}));
  // Resumed from step 3 (it keeps the lineage), it saves step 4 again and
  // keeps 2. Counting by step number over the root (3, 4, 5, 6: keep 5 and
  // 6) would remove step 4, which `latest` now names. The lineage's
  // checkpoints up to step 4 are 3 and 4: both kept; 5 and 6 are newer and
  // not this run's to remove.
  ASSERT_TRUE(save(4, 0, "resumed", "a").ok());
  ASSERT_TRUE(PruneCheckpoints(root_, 2, "a", 4).ok());
  EXPECT_EQ(latest(), "step-00000004\n");
  absl::StatusOr<std::string> dir = ResolveCheckpoint(root_);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, stepDir(4));
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{3, 4, 5, 6}));
  // Its next save (step 5, replacing the old one) keeps 2: 4 and 5.
  ASSERT_TRUE(save(5, 0, "", "a").ok());
  ASSERT_TRUE(PruneCheckpoints(root_, 2, "a", 5).ok());
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(latest(), "step-00000005\n");
}

TEST_F(CheckpointRootTest, PruneLeavesOtherLineagesAndUnreadableManifests) {
  for (int64_t step : {1, 2, 3})
    ASSERT_TRUE(save(step, 0, "", "a").ok());
  // A checkpoint whose manifest does not read: its lineage is unknown.
  fs::create_directories(stepDir(7));
  writeBytes((fs::path(stepDir(7)) / kManifestFile).string(), "not json");
  for (int64_t step : {8, 9, 10}) {
    ASSERT_TRUE(save(step, 0, "", "b").ok());
    ASSERT_TRUE(PruneCheckpoints(root_, 1, "b", step).ok());
  }
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{1, 2, 3, 7, 10}));
  std::vector<ListedCheckpoint> listed = ListCheckpointLineages(root_);
  ASSERT_EQ(listed.size(), 5u);
  EXPECT_EQ(listed[0].lineage, "a");
  EXPECT_FALSE(listed[3].readable);
  EXPECT_EQ(listed[4].lineage, "b");
}

TEST_F(CheckpointRootTest, PruneNeverRemovesWhatLatestNames) {
  for (int64_t step : {1, 2, 3})
    ASSERT_TRUE(save(step, 0, "", "a").ok());
  // `latest` set back to step 1 (by hand, say): a prune after step 3
  // keeping 1 removes step 2 but not step 1.
  writeBytes((fs::path(root_) / kLatestFile).string(), "step-00000001\n");
  ASSERT_TRUE(PruneCheckpoints(root_, 1, "a", 3).ok());
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{1, 3}));
}

TEST_F(CheckpointRootTest, NewLineagesDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string lineage = NewLineage();
    EXPECT_EQ(lineage.size(), 16u);
    EXPECT_EQ(lineage.find_first_not_of("0123456789abcdef"), std::string::npos)
        << lineage;
    seen.insert(lineage);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST_F(CheckpointRootTest, ARootIsLockedByOneHolder) {
  absl::StatusOr<std::unique_ptr<RootLock>> first = RootLock::Acquire(root_);
  ASSERT_TRUE(first.ok()) << first.status();
  // The root was created, with its lock file.
  EXPECT_TRUE(fs::exists(fs::path(root_) / kLockFile));
  // A second holder (flock: another open file, here in the same process)
  // is refused, told who holds it.
  absl::StatusOr<std::unique_ptr<RootLock>> second = RootLock::Acquire(root_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  expectMentions(second.status(),
                 {root_, "in use by another run",
                  absl::StrCat("pid ", ::getpid(), " on host ")});
  // Released with its holder.
  first->reset();
  second = RootLock::Acquire(root_);
  EXPECT_TRUE(second.ok()) << second.status();
  // The lock file is no checkpoint and no temporary: prune and list leave
  // it alone.
  ASSERT_TRUE(save(1, 0, "", "a").ok());
  ASSERT_TRUE(PruneCheckpoints(root_, 1, "a", 1).ok());
  EXPECT_TRUE(fs::exists(fs::path(root_) / kLockFile));
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{1}));
}

TEST_F(CheckpointRootTest, ARootMadeForARunThatSavedNothingGoesWithItsLock) {
  // A run that failed before its first save leaves no empty --save DIR.
  const std::string made = dir_.file("made/for/nothing");
  auto lock = RootLock::Acquire(made);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_TRUE(fs::exists(fs::path(made) / kLockFile));
  lock->reset();
  EXPECT_FALSE(fs::exists(made));
  EXPECT_TRUE(fs::exists(dir_.file("made/for"))); // its parents stay
  // A root that was there stays, and so does one that got a checkpoint.
  fs::create_directories(made);
  lock = RootLock::Acquire(made);
  ASSERT_TRUE(lock.ok());
  lock->reset();
  EXPECT_TRUE(fs::exists(made));
  const std::string saved = dir_.file("saved");
  lock = RootLock::Acquire(saved);
  ASSERT_TRUE(lock.ok());
  writeBytes((fs::path(saved) / "step-00000001").string(), "x");
  lock->reset();
  EXPECT_TRUE(fs::exists(fs::path(saved) / "step-00000001"));
}

TEST_F(CheckpointRootTest, ARootThatCannotBeMadeIsAnErrorNamingIt) {
  // /proc refuses new directories (to root too).
  absl::StatusOr<std::unique_ptr<RootLock>> lock =
      RootLock::Acquire("/proc/braid-checkpoints");
  ASSERT_FALSE(lock.ok());
  expectMentions(lock.status(), {"/proc/braid-checkpoints"});
  // A file where the root should be.
  writeBytes(dir_.file("a-file"), "x");
  lock = RootLock::Acquire(dir_.file("a-file"));
  ASSERT_FALSE(lock.ok());
  expectMentions(lock.status(), {dir_.file("a-file")});
}

TEST_F(CheckpointRootTest, CommitReplacesExistingStep) {
  for (int64_t step : {1, 2, 3})
    ASSERT_TRUE(save(step, /*consumed=*/step * 10, "old-only").ok());
  // A second run saves step 2 again.
  absl::Status s = save(2, /*consumed=*/42, "new-only");
  ASSERT_TRUE(s.ok()) << s;
  absl::StatusOr<Manifest> m = ReadManifest(stepDir(2));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->consumed_samples(), 42);
  // The old directory is gone as a whole, not merged into.
  EXPECT_EQ(entries(stepDir(2)),
            (std::set<std::string>{kManifestFile, "new-only"}));
  EXPECT_EQ(entries(root_),
            (std::set<std::string>{"latest", "step-00000001", "step-00000002",
                                   "step-00000003"}));
  // `latest` names what was just committed.
  EXPECT_EQ(latest(), "step-00000002\n");
  EXPECT_EQ(ListCheckpoints(root_), (std::vector<int64_t>{1, 2, 3}));
  // The others are untouched.
  m = ReadManifest(stepDir(3));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->consumed_samples(), 30);
}

//===----------------------------------------------------------------------===//
// CheckpointReader and VerifyCheckpoint
//===----------------------------------------------------------------------===//

/// A checkpoint of mesh {dp: 1, tp: 2} saved by two ranks:
///  - kUp [4, 3] split on dim 0: rank 0's slice is rows 0-1 (globals 0..5),
///    rank 1's rows 2-3 (globals 6..11), which rank 1 wrote as two pieces,
///    local [0, 2) (globals 6, 7) and [2, 6) (globals 8..11). Its exp_avg
///    and exp_avg_sq are one piece per slice each.
///  - kO [2, 4] split on dim 1: slice 0 is globals {0, 1, 4, 5}, slice 1
///    {2, 3, 6, 7}.
///  - kBias [3] unsplit, written in two pieces: [0, 2) by rank 0 and [2, 3)
///    by rank 1.
/// Values encode the global index: param of kUp is 100 + g, its exp_avg
/// -(100 + g), its exp_avg_sq 1100 + g, kO 200 + g, kBias 300 + g.
class CheckpointReaderTest : public ::testing::Test {
protected:
  static constexpr char kUp[] = "layers.0.mlp.up_proj.weight";
  static constexpr char kO[] = "layers.0.attn.o_proj.weight";
  static constexpr char kBias[] = "final_norm.bias";

  struct PieceData {
    const char *tensor;
    const char *state;
    int64_t coordinate, begin, end;
    int rank;
    std::string key;
    std::vector<float> values;
  };

  CheckpointReaderTest() : dir_("reader") {}

  void SetUp() override {
    // clang-format off
    pieces_ = {
        {kUp, "param", 0, 0, 6, 0, "up/param/0",
         {100, 101, 102, 103, 104, 105}},
        {kUp, "exp_avg", 0, 0, 6, 0, "up/exp_avg/0",
         {-100, -101, -102, -103, -104, -105}},
        {kO, "param", 0, 0, 4, 0, "o/param/0", {200, 201, 204, 205}},
        {kBias, "param", 0, 0, 2, 0, "bias/param/0", {300, 301}},
        {kUp, "param", 1, 0, 2, 1, "up/param/1a", {106, 107}},
        {kUp, "param", 1, 2, 6, 1, "up/param/1b", {108, 109, 110, 111}},
        {kUp, "exp_avg", 1, 0, 6, 1, "up/exp_avg/1",
         {-106, -107, -108, -109, -110, -111}},
        {kUp, "exp_avg_sq", 0, 0, 6, 0, "up/exp_avg_sq/0",
         {1100, 1101, 1102, 1103, 1104, 1105}},
        {kUp, "exp_avg_sq", 1, 0, 6, 1, "up/exp_avg_sq/1",
         {1106, 1107, 1108, 1109, 1110, 1111}},
        {kO, "param", 1, 0, 4, 1, "o/param/1", {202, 203, 206, 207}},
        {kBias, "param", 0, 2, 3, 1, "bias/param/1", {302}},
    };
    // clang-format on

    manifest_.set_format(kCheckpointFormat);
    manifest_.set_version(kCheckpointVersion);
    manifest_.set_step(7);
    manifest_.mutable_mesh()->add_axes("dp");
    manifest_.mutable_mesh()->add_sizes(1);
    manifest_.mutable_mesh()->add_axes("tp");
    manifest_.mutable_mesh()->add_sizes(2);
    Tensor *up = addTensor(kUp, {4, 3});
    *up->mutable_sharding() = split("tp", 0);
    Tensor *o = addTensor(kO, {2, 4});
    *o->mutable_sharding() = split("tp", 1);
    addTensor(kBias, {3});

    for (int rank = 0; rank < 2; ++rank) {
      std::vector<std::string> bytes; // kept alive for the spans
      bytes.reserve(pieces_.size());
      std::vector<TensorToWrite> tensors;
      for (const PieceData &d : pieces_) {
        if (d.rank != rank)
          continue;
        bytes.push_back(f32(d.values));
        tensors.push_back({d.key,
                           Dtype::kF32,
                           {static_cast<int64_t>(d.values.size())},
                           asBytes(bytes.back())});
        Piece *p = tensor(d.tensor)->add_pieces();
        p->set_state(d.state);
        p->set_coordinate(d.coordinate);
        p->set_begin(d.begin);
        p->set_end(d.end);
        p->set_file(RankFileName(rank));
        p->set_key(d.key);
        p->set_crc32(CrcHex(Crc32(asBytes(bytes.back()))));
      }
      WrittenFile written;
      absl::Status s = WriteSafetensors(dir_.file(RankFileName(rank)), tensors,
                                        {}, &written);
      ASSERT_TRUE(s.ok()) << s;
      File *f = manifest_.add_files();
      f->set_name(RankFileName(rank));
      f->set_rank(rank);
      f->set_bytes(static_cast<int64_t>(written.bytes));
      f->set_crc32(CrcHex(written.crc32));
    }
    writeManifest();
  }

  Tensor *addTensor(const std::string &name, std::vector<int64_t> shape) {
    Tensor *t = manifest_.add_tensors();
    t->set_name(name);
    for (int64_t d : shape)
      t->add_shape(d);
    t->set_dtype("F32");
    return t;
  }
  Tensor *tensor(const std::string &name) {
    for (Tensor &t : *manifest_.mutable_tensors())
      if (t.name() == name)
        return &t;
    return nullptr;
  }
  void writeManifest() {
    ASSERT_TRUE(WriteManifest(dir_.path(), manifest_).ok());
  }

  std::string file(int rank) const { return dir_.file(RankFileName(rank)); }

  /// Reads with a fresh reader (so no piece is known good from before) into
  /// `out`, which gets `count` values.
  absl::Status read(const std::string &name, const std::string &state,
                    int64_t begin, int64_t count, std::vector<float> &out) {
    absl::StatusOr<std::unique_ptr<CheckpointReader>> r =
        CheckpointReader::Open(dir_.path());
    if (!r.ok())
      return r.status();
    // One more than asked for: the read must not write past `count`.
    out.assign(count + 1, -999.0f);
    absl::Status s = (*r)->Read(name, state, begin, count, out.data());
    EXPECT_EQ(out.back(), -999.0f) << "wrote past the end";
    out.pop_back();
    return s;
  }
  std::vector<float> readOk(const std::string &name, const std::string &state,
                            int64_t begin, int64_t count) {
    std::vector<float> out;
    absl::Status s = read(name, state, begin, count, out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  /// Flips the low bits of the first byte of `key`'s data in `path`.
  void corrupt(const std::string &path, const std::string &key) {
    uint64_t at;
    {
      absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
      ASSERT_TRUE(f.ok()) << f.status();
      absl::StatusOr<TensorInfo> info = f->Info(key);
      ASSERT_TRUE(info.ok()) << info.status();
      std::string raw = readBytes(path);
      uint64_t headerLength = 0;
      for (int i = 7; i >= 0; --i)
        headerLength = headerLength << 8 | static_cast<uint8_t>(raw[i]);
      at = 8 + headerLength + info->begin;
    }
    std::string raw = readBytes(path);
    ASSERT_LT(at, raw.size());
    raw[at] = static_cast<char>(raw[at] ^ 0x05);
    writeBytes(path, raw);
  }

  TempDir dir_;
  std::vector<PieceData> pieces_;
  Manifest manifest_;
};

TEST_F(CheckpointReaderTest, ReadsWholeTensors) {
  absl::StatusOr<std::unique_ptr<CheckpointReader>> r =
      CheckpointReader::Open(dir_.path());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->dir(), dir_.path());
  EXPECT_EQ((*r)->manifest().step(), 7);
  ASSERT_NE((*r)->Find(kO), nullptr);
  EXPECT_EQ((*r)->Find(kO)->shape(1), 4);
  EXPECT_EQ((*r)->Find("layers.0.attn"), nullptr);

  EXPECT_EQ(readOk(kUp, "param", 0, 12),
            (std::vector<float>{100, 101, 102, 103, 104, 105, 106, 107, 108,
                                109, 110, 111}));
  EXPECT_EQ(readOk(kUp, "exp_avg", 0, 12),
            (std::vector<float>{-100, -101, -102, -103, -104, -105, -106, -107,
                                -108, -109, -110, -111}));
  EXPECT_EQ(readOk(kO, "param", 0, 8),
            (std::vector<float>{200, 201, 202, 203, 204, 205, 206, 207}));
  EXPECT_EQ(readOk(kBias, "param", 0, 3), (std::vector<float>{300, 301, 302}));
}

TEST_F(CheckpointReaderTest, ReadsRangesAcrossPieces) {
  // Globals 5..8: the end of rank 0's piece, all of 1a, the start of 1b.
  EXPECT_EQ(readOk(kUp, "param", 5, 4),
            (std::vector<float>{105, 106, 107, 108}));
  // Inside 1b, which starts at local 2 of its slice: globals 9, 10.
  EXPECT_EQ(readOk(kUp, "param", 9, 2), (std::vector<float>{109, 110}));
  // Column-split: globals 1..6 alternate between the two slices every two
  // elements (1 | 2 3 | 4 5 | 6).
  EXPECT_EQ(readOk(kO, "param", 1, 6),
            (std::vector<float>{201, 202, 203, 204, 205, 206}));
  EXPECT_EQ(readOk(kO, "param", 7, 1), (std::vector<float>{207}));
  EXPECT_EQ(readOk(kBias, "param", 1, 2), (std::vector<float>{301, 302}));
  EXPECT_EQ(readOk(kUp, "exp_avg", 4, 4),
            (std::vector<float>{-104, -105, -106, -107}));
  // One reader, many reads (pieces already checked are read again).
  absl::StatusOr<std::unique_ptr<CheckpointReader>> r =
      CheckpointReader::Open(dir_.path());
  ASSERT_TRUE(r.ok()) << r.status();
  float v[3];
  ASSERT_TRUE((*r)->Read(kUp, "param", 6, 3, v).ok());
  EXPECT_EQ(std::vector<float>(v, v + 3), (std::vector<float>{106, 107, 108}));
  ASSERT_TRUE((*r)->Read(kUp, "param", 7, 3, v).ok());
  EXPECT_EQ(std::vector<float>(v, v + 3), (std::vector<float>{107, 108, 109}));
}

TEST_F(CheckpointReaderTest, AbsentStateOrTensorIsNotFound) {
  std::vector<float> out;
  // kO and kBias have a param only.
  absl::Status s = read(kO, "exp_avg_sq", 0, 1, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  expectMentions(s, {kO, "exp_avg_sq"});
  s = read(kBias, "exp_avg", 0, 1, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  expectMentions(s, {kBias, "exp_avg"});
  s = read("layers.9.missing.weight", "param", 0, 1, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  expectMentions(s, {"layers.9.missing.weight"});
}

TEST_F(CheckpointReaderTest, ElementsBeyondTheTensorAreInNoPiece) {
  std::vector<float> out;
  absl::Status s = read(kUp, "param", 10, 3, out);
  expectMentions(s, {kUp, "is in no piece"});
}

TEST_F(CheckpointReaderTest, MissingPieceIsRefusedWithTheManifest) {
  // Drop piece 1a (globals 6, 7: elements [0, 2) of slice 1).
  Tensor *up = tensor(kUp);
  auto *pieces = up->mutable_pieces();
  for (int i = 0; i < pieces->size(); ++i)
    if (pieces->Get(i).key() == "up/param/1a") {
      pieces->DeleteSubrange(i, 1);
      break;
    }
  // Of param 0, 1a, 1b, exp_avg 0, 1 and exp_avg_sq 0, 1.
  ASSERT_EQ(up->pieces_size(), 6);
  writeManifest();

  // Refused when the manifest is read, before any piece: no read finds a
  // hole half-way through a load.
  std::vector<float> out;
  absl::Status s = read(kUp, "param", 8, 4, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {kUp, "no piece holds elements [0, 2) of its param in "
                          "slice 1 (a piece is missing from the manifest)"});
}

TEST_F(CheckpointReaderTest, VerifiesGoodCheckpoint) {
  absl::Status s = VerifyCheckpoint(dir_.path(), manifest_);
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(CheckpointReaderTest, CorruptPieceIsDataLoss) {
  corrupt(file(1), "up/param/1b");

  std::vector<float> out;
  absl::Status s = read(kUp, "param", 8, 1, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(1), kUp});
  // A read that crosses into it fails too.
  s = read(kUp, "param", 6, 4, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  // The other pieces, in the same file and elsewhere, still read: the check
  // is per piece.
  EXPECT_EQ(readOk(kUp, "param", 0, 8),
            (std::vector<float>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(readOk(kO, "param", 0, 8),
            (std::vector<float>{200, 201, 202, 203, 204, 205, 206, 207}));

  s = VerifyCheckpoint(dir_.path(), manifest_);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(1), kUp});
}

TEST_F(CheckpointReaderTest, WrongPieceCrcInManifestIsDataLoss) {
  // The bytes are intact but the manifest's CRC of kBias's second piece is
  // not theirs.
  for (Piece &p : *tensor(kBias)->mutable_pieces())
    if (p.key() == "bias/param/1")
      p.set_crc32(CrcHex(0x12345678u));
  writeManifest();
  std::vector<float> out;
  absl::Status s = read(kBias, "param", 0, 3, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(1), kBias});
  EXPECT_EQ(readOk(kBias, "param", 0, 2), (std::vector<float>{300, 301}));
  s = VerifyCheckpoint(dir_.path(), manifest_);
  expectMentions(s, {file(1), kBias});
}

TEST_F(CheckpointReaderTest, WrongFileCrcOrSizeFailsVerification) {
  Manifest m = manifest_;
  m.mutable_files(0)->set_crc32(CrcHex(0x12345678u));
  absl::Status s = VerifyCheckpoint(dir_.path(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(0)});

  m = manifest_;
  m.mutable_files(1)->set_bytes(m.files(1).bytes() + 8);
  s = VerifyCheckpoint(dir_.path(), m);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(1)});
}

TEST_F(CheckpointReaderTest, PieceMissingFromFileFailsVerification) {
  for (Piece &p : *tensor(kO)->mutable_pieces())
    if (p.key() == "o/param/1")
      p.set_key("o/param/9");
  absl::Status s = VerifyCheckpoint(dir_.path(), manifest_);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(1), kO, "o/param/9"});

  writeManifest();
  std::vector<float> out;
  s = read(kO, "param", 2, 1, out);
  expectMentions(s, {file(1), kO});
}

TEST_F(CheckpointReaderTest, TruncatedFileIsDataLoss) {
  fs::resize_file(file(1), fs::file_size(file(1)) - 4);
  absl::Status s = VerifyCheckpoint(dir_.path(), manifest_);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(1)});

  // Rank 0's elements still read.
  EXPECT_EQ(readOk(kUp, "param", 0, 6),
            (std::vector<float>{100, 101, 102, 103, 104, 105}));
  std::vector<float> out;
  s = read(kUp, "param", 6, 1, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(1)});
  // The file cannot be opened (truncated): the error names the tensor
  // being read too.
  expectMentions(s, {kUp});
}

TEST_F(CheckpointReaderTest, MissingFileIsDataLoss) {
  fs::remove(file(0));
  absl::Status s = VerifyCheckpoint(dir_.path(), manifest_);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(0)});

  // Rank 1's elements still read.
  EXPECT_EQ(readOk(kUp, "param", 6, 6),
            (std::vector<float>{106, 107, 108, 109, 110, 111}));
  std::vector<float> out;
  s = read(kBias, "param", 0, 3, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  expectMentions(s, {file(0)});
  // As for a truncated file, the tensor being read is named.
  expectMentions(s, {kBias});
}

} // namespace
