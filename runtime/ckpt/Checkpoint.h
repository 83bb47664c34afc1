//===- Checkpoint.h - Braid checkpoint directories --------------*- C++ -*-===//
//
// A checkpoint root (braid-run --save ROOT) holds one directory per saved
// step and a pointer to the newest:
//
//   ROOT/step-00000010/manifest.json       what is where (manifest.proto)
//   ROOT/step-00000010/rank-00000.safetensors   each rank's pieces
//   ROOT/latest                            "step-00000010\n"
//
// A save writes into ROOT/.step-00000010.tmp; once every rank's file is
// synced, rank 0 writes the manifest, renames the directory into place and
// then rewrites `latest` (each by rename, so atomically). A crash at any
// point leaves either the new complete checkpoint or only a .tmp directory
// that nothing reads: `latest` and the step directories name complete
// checkpoints only.
//
// Files are safetensors (no pickle); the manifest records a CRC-32 of every
// file and of every piece, checked by VerifyCheckpoint and, for the pieces
// a rank reads, by CheckpointReader.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CKPT_CHECKPOINT_H
#define BRAID_RUNTIME_CKPT_CHECKPOINT_H

#include "runtime/ckpt/Safetensors.h"
#include "runtime/ckpt/manifest.pb.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace braid::ckpt {

inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kLatestFile[] = "latest";
inline constexpr char kCheckpointFormat[] = "braid-checkpoint";
inline constexpr int kCheckpointVersion = 1;

/// "step-00000010".
std::string StepDirName(int64_t step);
/// ROOT/.step-00000010.tmp: where a save of `step` is written.
std::string TempDirOf(const std::string &root, int64_t step);
/// "rank-00003.safetensors".
std::string RankFileName(int64_t rank);
/// "1a2b3c4d".
std::string CrcHex(uint32_t crc);

/// Reads DIR/manifest.json and checks it: format and version, shapes,
/// shardings, that every piece names a listed file and lies inside its
/// slice, that pieces of one state of one slice do not overlap. Errors name
/// the file and the tensor.
absl::StatusOr<Manifest> ReadManifest(const std::string &dir);

/// Writes DIR/manifest.json (by way of a synced temporary, renamed).
absl::Status WriteManifest(const std::string &dir, const Manifest &manifest);

/// The checkpoint directory that DIR names: DIR itself when it has a
/// manifest, else ROOT/latest's step directory when DIR is a root. NotFound
/// (saying what was looked for) otherwise; a `latest` that names a missing
/// or incomplete directory is DataLoss.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string &dir);

/// Makes ROOT/.step-N.tmp (empty; an older one of a crashed save is
/// removed first) and ROOT if needed.
absl::Status PrepareTempDir(const std::string &root, int64_t step);

/// Renames ROOT/.step-N.tmp (with its manifest) to ROOT/step-N (replacing
/// an existing one), syncs ROOT, and points ROOT/latest at it.
absl::Status CommitCheckpoint(const std::string &root, int64_t step);

/// After the commit of step `committed` of lineage `lineage` (Manifest's
/// lineage): removes the complete checkpoints of ROOT of that lineage older
/// than `committed` but the newest `keep` counting `committed`, and the
/// temporaries of crashed saves of steps before `committed`. It never
/// removes the checkpoint ROOT/latest names, a checkpoint of another lineage
/// (another run's, which shares the root), one whose manifest cannot be
/// read, nor a newer checkpoint of the lineage (a run resumed from an
/// earlier step saves below those). keep >= 1.
absl::Status PruneCheckpoints(const std::string &root, int64_t keep,
                              absl::string_view lineage, int64_t committed);

/// The steps of ROOT's complete checkpoints (directories step-N with a
/// manifest), ascending.
std::vector<int64_t> ListCheckpoints(const std::string &root);

/// A complete checkpoint of a root and the lineage its manifest records
/// (`readable` false when the manifest does not read: its lineage is then
/// unknown).
struct ListedCheckpoint {
  int64_t step = 0;
  std::string lineage;
  bool readable = false;
};
std::vector<ListedCheckpoint> ListCheckpointLineages(const std::string &root);

/// A new lineage: 16 hex digits, different for every call (time, process,
/// the system's random source).
std::string NewLineage();

/// The advisory lock (flock) of a checkpoint root, ROOT/.lock: one run at a
/// time saves into a root. The file records the holder ("pid N on host H
/// since T") for the error another run gets. Released when destroyed (or
/// when the holding process ends, however it ends).
class RootLock {
public:
  /// Creates ROOT (and its parents) if needed and takes the lock (a ROOT it
  /// created and that holds only the lock when it is released is removed);
  /// FailedPrecondition naming the root and the holder when another process
  /// holds it, or naming the root and why when it cannot be created or
  /// written.
  static absl::StatusOr<std::unique_ptr<RootLock>>
  Acquire(const std::string &root);
  ~RootLock();
  RootLock(const RootLock &) = delete;
  RootLock &operator=(const RootLock &) = delete;

private:
  RootLock() = default;
  int fd_ = -1;
  /// The root when Acquire created it (removed with the lock when it holds
  /// nothing else by then).
  std::string createdRoot_;
};

/// The lock file's name in a root.
inline constexpr char kLockFile[] = ".lock";

/// Checks every file of the checkpoint in DIR against the manifest: its
/// size and CRC-32, that it is a valid safetensors file, and that each piece
/// is there with its size and CRC-32. The first problem found is the error,
/// naming the file (and the tensor).
absl::Status VerifyCheckpoint(const std::string &dir, const Manifest &manifest);

/// A checkpoint opened for reading global elements of its tensors,
/// whichever layout saved them. Files are opened (mapped) when first read;
/// each piece's CRC-32 is checked the first time it is read.
class CheckpointReader {
public:
  static absl::StatusOr<std::unique_ptr<CheckpointReader>>
  Open(const std::string &dir);

  const std::string &dir() const { return dir_; }
  const Manifest &manifest() const { return manifest_; }
  /// The tensor named `name`, or null.
  const Tensor *Find(absl::string_view name) const;

  /// Copies the global elements [begin, begin + count) (row-major) of
  /// `state` ("param", "exp_avg", "exp_avg_sq") of tensor `name` to `out`.
  /// Errors name the tensor and what is missing or corrupt.
  absl::Status Read(absl::string_view name, absl::string_view state,
                    int64_t begin, int64_t count, float *out);

private:
  CheckpointReader() = default;
  /// A run of global elements stored contiguously in a piece.
  struct Segment {
    int64_t global, length;
    int piece;      ///< index into pieces_
    int64_t offset; ///< elements into the piece
  };
  struct PieceRef {
    const Tensor *tensor;
    const Piece *piece;
    bool checked = false;
  };
  absl::StatusOr<const SafetensorsFile *> fileOf(const std::string &name);
  absl::Status checkPiece(PieceRef &ref, absl::Span<const uint8_t> bytes);

  std::string dir_;
  Manifest manifest_;
  std::map<std::string, const Tensor *, std::less<>> byName_;
  std::vector<PieceRef> pieces_;
  /// Per "state/name", the segments sorted by global index.
  std::map<std::string, std::vector<Segment>, std::less<>> segments_;
  std::map<std::string, SafetensorsFile> files_;
};

/// The global runs of the elements [begin, end) of the slice at
/// `coordinate` of a tensor of global `shape` split by `sharding` over a
/// mesh of `axisSize` ranks along its axis (in slice order): pairs of
/// (global index, length), in the order of the slice's elements.
std::vector<std::pair<int64_t, int64_t>>
SliceRuns(const std::vector<int64_t> &shape, const Sharding &sharding,
          int64_t axisSize, int64_t coordinate, int64_t begin, int64_t end);

} // namespace braid::ckpt

#endif // BRAID_RUNTIME_CKPT_CHECKPOINT_H
