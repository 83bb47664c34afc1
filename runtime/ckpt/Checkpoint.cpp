//===- Checkpoint.cpp - Braid checkpoint directories ----------------------===//

#include "runtime/ckpt/Checkpoint.h"

#include "runtime/common/Json.h"
#include "runtime/common/MappedFile.h"
#include "runtime/common/OutputFile.h"
#include "runtime/plan/Shards.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <ctime>
#include <sys/file.h>
#include <unistd.h>
#include <chrono>
#include <stdio.h> // renameat2
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <system_error>
#include <unistd.h>

namespace braid::ckpt {
namespace {

namespace fs = std::filesystem;

absl::Status errnoStatus(int err, absl::string_view what) {
  return absl::ErrnoToStatus(err, what);
}

/// fsync of a directory (its entries: a rename into it is durable after).
absl::Status syncDir(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return errnoStatus(errno, absl::StrCat("cannot open directory ", dir));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return errnoStatus(err, absl::StrCat("cannot sync directory ", dir));
  return absl::OkStatus();
}

/// Writes `text` to PATH by way of a temporary beside it, synced and
/// renamed (common::OutputFile).
absl::Status writeFileAtomically(const std::string &path,
                                 absl::string_view text) {
  common::OutputFile::Options options;
  options.sync = true;
  return common::WriteOutputFile(path, text, options);
}

bool isDir(const std::string &path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool isFile(const std::string &path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

/// The step of a directory name as StepDirName writes it ("step-00000010"),
/// or -1 for any other name.
int64_t stepOfName(absl::string_view name) {
  absl::string_view digits = name;
  int64_t step = -1;
  if (!absl::ConsumePrefix(&digits, "step-") || digits.empty() ||
      !absl::SimpleAtoi(digits, &step) || step < 0 ||
      StepDirName(step) != name)
    return -1;
  return step;
}

int64_t product(const google::protobuf::RepeatedField<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// The number of elements of one rank's slice of `t` in a mesh whose
/// `t.sharding().axis()` has `ranks` ranks.
int64_t sliceElements(const Tensor &t, int64_t ranks) {
  return product(t.shape()) / std::max<int64_t>(ranks, 1);
}

int64_t axisSize(const Mesh &mesh, absl::string_view axis) {
  for (int i = 0; i < mesh.axes_size() && i < mesh.sizes_size(); ++i)
    if (mesh.axes(i) == axis)
      return mesh.sizes(i);
  return 0;
}

bool isState(absl::string_view state) {
  return state == "param" || state == "exp_avg" || state == "exp_avg_sq";
}

} // namespace

std::string StepDirName(int64_t step) {
  return absl::StrFormat("step-%08d", step);
}

std::string TempDirOf(const std::string &root, int64_t step) {
  return (fs::path(root) / absl::StrCat(".", StepDirName(step), ".tmp")).string();
}

std::string RankFileName(int64_t rank) {
  return absl::StrFormat("rank-%05d.safetensors", rank);
}

std::string CrcHex(uint32_t crc) { return absl::StrFormat("%08x", crc); }

std::vector<std::pair<int64_t, int64_t>>
SliceRuns(const std::vector<int64_t> &shape, const Sharding &sharding,
          int64_t axisSize, int64_t coordinate, int64_t begin, int64_t end) {
  plan::Buffer buffer;
  plan::Mesh mesh;
  for (int64_t d : shape)
    buffer.add_shape(d);
  if (!sharding.axis().empty()) {
    buffer.mutable_shard()->set_axis(sharding.axis());
    buffer.mutable_shard()->set_dim(sharding.dim());
    for (int64_t b : sharding.blocks())
      buffer.mutable_shard()->add_blocks(b);
    buffer.set_shape(sharding.dim(), shape[sharding.dim()] / axisSize);
    mesh.add_axes(sharding.axis());
    mesh.add_sizes(axisSize);
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const plan::ShardRun &run : plan::ShardRuns(buffer, mesh, coordinate)) {
    int64_t lo = std::max(begin, run.local);
    int64_t hi = std::min(end, run.local + run.length);
    if (lo < hi)
      out.push_back({run.global + (lo - run.local), hi - lo});
  }
  return out;
}

absl::StatusOr<Manifest> ReadManifest(const std::string &dir) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  absl::StatusOr<std::string> text = common::readWholeFile(path);
  if (absl::IsNotFound(text.status()))
    return absl::NotFoundError(absl::StrCat(
        path, " does not exist: ", dir,
        " is not a complete Braid checkpoint"));
  if (!text.ok())
    return text.status();
  Manifest m;
  if (absl::Status s = common::JsonToMessage(*text, &m); !s.ok())
    return absl::DataLossError(
        absl::StrCat(path, ": not a checkpoint manifest: ", s.message()));
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  if (m.format() != kCheckpointFormat)
    return bad(absl::StrCat("format \"", m.format(), "\" is not \"",
                            kCheckpointFormat, "\""));
  if (m.version() != kCheckpointVersion)
    return bad(absl::StrCat("version ", m.version(), " is not ",
                            kCheckpointVersion, ", the one this build reads"));
  if (m.step() < 0 || m.consumed_samples() < 0)
    return bad("a negative step or sample count");
  if (m.has_loss_scaler()) {
    const LossScaler &ls = m.loss_scaler();
    if (!(std::isfinite(ls.scale()) && ls.scale() > 0) ||
        ls.growth_tracker() < 0 || ls.skipped_steps() < 0 ||
        ls.skipped_steps() > m.step())
      return bad(absl::StrCat(
          "a loss scaler's state out of range (scale ", ls.scale(),
          ", growth tracker ", ls.growth_tracker(), ", ", ls.skipped_steps(),
          " steps skipped of ", m.step(), ")"));
  }
  if (m.mesh().axes_size() != m.mesh().sizes_size())
    return bad("the mesh's axes and sizes differ in number");
  for (int64_t size : m.mesh().sizes())
    if (size < 1)
      return bad("a mesh axis of no ranks");
  std::set<std::string> files;
  for (const File &f : m.files()) {
    if (f.name().empty() || absl::StrContains(f.name(), "/") ||
        f.name() == "." || f.name() == "..")
      return bad(absl::StrCat("file name \"", f.name(),
                              "\" is not a name inside the directory"));
    if (!files.insert(f.name()).second)
      return bad(absl::StrCat("file ", f.name(), " is listed twice"));
  }
  std::set<std::string> names;
  for (const Tensor &t : m.tensors()) {
    auto badTensor = [&](absl::string_view what) {
      return bad(absl::StrCat("tensor ", t.name(), ": ", what));
    };
    if (!names.insert(t.name()).second)
      return badTensor("listed twice");
    if (t.dtype() != "F32")
      return badTensor(absl::StrCat("dtype \"", t.dtype(), "\" is not F32"));
    for (int64_t d : t.shape())
      if (d < 0)
        return badTensor("a negative dimension");
    int64_t ranks = 1;
    if (!t.sharding().axis().empty()) {
      ranks = axisSize(m.mesh(), t.sharding().axis());
      int dim = t.sharding().dim();
      if (ranks < 1)
        return badTensor(absl::StrCat("split over \"", t.sharding().axis(),
                                      "\", which is no axis of the mesh"));
      if (dim < 0 || dim >= t.shape_size())
        return badTensor(absl::StrCat("split on dimension ", dim,
                                      ", which it does not have"));
      int64_t total = 0;
      for (int64_t b : t.sharding().blocks()) {
        if (b < 0 || b % ranks != 0)
          return badTensor("a block that does not split evenly");
        total += b;
      }
      if (t.shape(dim) % ranks != 0 ||
          (t.sharding().blocks_size() && total != t.shape(dim)))
        return badTensor("its split dimension does not divide evenly");
    }
    int64_t slice = sliceElements(t, ranks);
    // (state, coordinate) -> [begin, end) of its pieces, for overlaps.
    std::map<std::pair<std::string, int64_t>,
             std::vector<std::pair<int64_t, int64_t>>>
        ranges;
    for (const Piece &p : t.pieces()) {
      if (!isState(p.state()))
        return badTensor(absl::StrCat("state \"", p.state(),
                                      "\" is not param, exp_avg or exp_avg_sq"));
      if (!files.count(p.file()))
        return badTensor(absl::StrCat("a piece is in file ", p.file(),
                                      ", which the manifest does not list"));
      if (p.coordinate() < 0 || p.coordinate() >= ranks || p.begin() < 0 ||
          p.begin() > p.end() || p.end() > slice)
        return badTensor(absl::StrCat("piece ", p.key(), " of ", p.file(),
                                      " lies outside the tensor"));
      ranges[{p.state(), p.coordinate()}].push_back({p.begin(), p.end()});
    }
    for (auto &[key, list] : ranges) {
      std::sort(list.begin(), list.end());
      for (size_t i = 1; i < list.size(); ++i)
        if (list[i].first < list[i - 1].second)
          return badTensor(absl::StrCat(
              "pieces of ", key.first, " of slice ", key.second,
              " overlap: elements [", list[i - 1].first, ", ",
              list[i - 1].second, ") and [", list[i].first, ", ",
              list[i].second, ")"));
    }
    // Whole states: each state it has (its parameter, AdamW's moments) in
    // pieces that cover every slice, so that a checkpoint missing a piece
    // is refused when read, not when a load comes to that piece.
    if (slice == 0)
      continue;
    std::set<std::string> states;
    for (const auto &entry : ranges)
      states.insert(entry.first.first);
    if (states.count("exp_avg") != states.count("exp_avg_sq"))
      return badTensor(absl::StrCat(
          "it has AdamW's ",
          states.count("exp_avg") ? "exp_avg but not its exp_avg_sq"
                                  : "exp_avg_sq but not its exp_avg",
          " (a piece is missing from the manifest)"));
    for (const std::string &state : states)
      for (int64_t c = 0; c < ranks; ++c) {
        const auto &list = ranges[{state, c}];
        // The elements from 0 that the pieces (sorted) cover, and the end
        // of the first gap.
        int64_t covered = 0, gapEnd = slice;
        for (const auto &[begin, end] : list) {
          if (begin > covered) {
            gapEnd = begin;
            break;
          }
          covered = std::max(covered, end);
        }
        if (covered < slice)
          return badTensor(absl::StrCat(
              "no piece holds elements [", covered, ", ", gapEnd, ") of its ",
              state, ranks > 1 ? absl::StrCat(" in slice ", c) : std::string(),
              " (a piece is missing from the manifest)"));
      }
  }
  return m;
}

absl::Status WriteManifest(const std::string &dir, const Manifest &manifest) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  auto printed =
      google::protobuf::util::MessageToJsonString(manifest, &json, options);
  if (!printed.ok())
    return absl::InternalError(absl::StrCat(
        "cannot print the manifest: ",
        absl::string_view(printed.message().data(), printed.message().size())));
  return writeFileAtomically((fs::path(dir) / kManifestFile).string(), json);
}

std::vector<int64_t> ListCheckpoints(const std::string &root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry &entry : fs::directory_iterator(root, ec)) {
    int64_t step = stepOfName(entry.path().filename().string());
    if (step >= 0 && isFile((entry.path() / kManifestFile).string()))
      steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::string> ResolveCheckpoint(const std::string &dir) {
  if (isFile((fs::path(dir) / kManifestFile).string()))
    return dir;
  if (!isDir(dir)) {
    std::error_code ec;
    if (fs::exists(dir, ec))
      return absl::InvalidArgumentError(absl::StrCat(
          dir, " is a file, not a checkpoint: a checkpoint is a directory "
               "holding ", kManifestFile, ", or a root whose ", kLatestFile,
          " file names one"));
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir,
                                            " does not exist"));
  }
  const std::string latest = (fs::path(dir) / kLatestFile).string();
  if (!isFile(latest))
    return absl::NotFoundError(absl::StrCat(
        dir, " is no checkpoint: it has neither a ", kManifestFile,
        " nor a ", kLatestFile, " file naming one"));
  absl::StatusOr<std::string> text = common::readWholeFile(latest);
  if (!text.ok())
    return text.status();
  std::string name(absl::StripAsciiWhitespace(*text));
  if (stepOfName(name) < 0)
    return absl::DataLossError(absl::StrCat(
        latest, " holds \"", name, "\", not the name of a step directory"));
  const std::string resolved = (fs::path(dir) / name).string();
  if (!isFile((fs::path(resolved) / kManifestFile).string()))
    return absl::DataLossError(absl::StrCat(
        latest, " names ", name, ", which is not a complete checkpoint"));
  return resolved;
}

absl::Status PrepareTempDir(const std::string &root, int64_t step) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the checkpoint directory ", root, ": ", ec.message()));
  const std::string tmp = TempDirOf(root, step);
  fs::remove_all(tmp, ec);
  if (ec)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove ", tmp, ": ", ec.message()));
  fs::create_directory(tmp, ec);
  if (ec)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", tmp, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status CommitCheckpoint(const std::string &root, int64_t step) {
  const std::string tmp = TempDirOf(root, step);
  if (absl::Status s = syncDir(tmp); !s.ok())
    return s;
  const std::string dest = (fs::path(root) / StepDirName(step)).string();
  std::error_code ec;
  if (fs::exists(dest, ec)) {
    // A checkpoint of this step from an earlier run (which `latest` may
    // name): the two directories trade places in one atomic rename, so
    // dest is a complete checkpoint at every instant; the old one, now at
    // tmp, is removed after.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dest.c_str(),
                    RENAME_EXCHANGE) != 0)
      return errnoStatus(errno, absl::StrCat("cannot replace ", dest,
                                             " with ", tmp));
    fs::remove_all(tmp, ec);
    if (ec)
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot remove the replaced checkpoint, now ", tmp, ": ",
          ec.message()));
  } else {
    fs::rename(tmp, dest, ec);
    if (ec)
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot rename ", tmp, " to ", dest, ": ", ec.message()));
  }
  if (absl::Status s = syncDir(root); !s.ok())
    return s;
  if (absl::Status s = writeFileAtomically(
          (fs::path(root) / kLatestFile).string(),
          absl::StrCat(StepDirName(step), "\n"));
      !s.ok())
    return s;
  return syncDir(root);
}

std::vector<ListedCheckpoint> ListCheckpointLineages(const std::string &root) {
  std::vector<ListedCheckpoint> out;
  for (int64_t step : ListCheckpoints(root)) {
    ListedCheckpoint c;
    c.step = step;
    absl::StatusOr<Manifest> m =
        ReadManifest((fs::path(root) / StepDirName(step)).string());
    if (m.ok()) {
      c.readable = true;
      c.lineage = m->lineage();
    }
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status PruneCheckpoints(const std::string &root, int64_t keep,
                              absl::string_view lineage, int64_t committed) {
  if (keep < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("keeping ", keep, " checkpoints: keep at least 1"));
  // What `latest` names stays, whatever else holds.
  int64_t latest = -1;
  if (absl::StatusOr<std::string> named = ResolveCheckpoint(root); named.ok())
    latest = stepOfName(fs::path(*named).filename().string());
  // The lineage's checkpoints up to the committed one, newest first.
  std::vector<int64_t> ours;
  for (const ListedCheckpoint &c : ListCheckpointLineages(root))
    if (c.readable && c.lineage == lineage && c.step <= committed)
      ours.push_back(c.step);
  std::sort(ours.rbegin(), ours.rend());
  std::error_code ec;
  for (size_t i = size_t(keep); i < ours.size(); ++i) {
    if (ours[i] == latest || ours[i] == committed)
      continue;
    fs::remove_all(fs::path(root) / StepDirName(ours[i]), ec);
    if (ec)
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot remove ", (fs::path(root) / StepDirName(ours[i])).string(),
          ": ", ec.message()));
  }
  // Temporaries of crashed saves of earlier steps (the root's lock keeps
  // other runs' saves out, so none of them is being written).
  for (const fs::directory_entry &entry : fs::directory_iterator(root, ec)) {
    std::string name = entry.path().filename().string();
    absl::string_view rest = name;
    if (absl::ConsumePrefix(&rest, ".") && absl::ConsumeSuffix(&rest, ".tmp")) {
      int64_t step = stepOfName(rest);
      if (step >= 0 && step < committed)
        fs::remove_all(entry.path(), ec);
    }
  }
  return absl::OkStatus();
}

std::string NewLineage() {
  std::random_device device;
  uint64_t bits = (uint64_t(device()) << 32) ^ uint64_t(device());
  bits ^= uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  bits ^= uint64_t(::getpid()) << 20;
  // splitmix64's finaliser: every input bit moves every output bit.
  bits += 0x9e3779b97f4a7c15ULL;
  bits = (bits ^ (bits >> 30)) * 0xbf58476d1ce4e5b9ULL;
  bits = (bits ^ (bits >> 27)) * 0x94d049bb133111ebULL;
  bits ^= bits >> 31;
  return absl::StrFormat("%016x", bits);
}

absl::StatusOr<std::unique_ptr<RootLock>>
RootLock::Acquire(const std::string &root) {
  std::error_code ec;
  const bool existed = fs::exists(root, ec);
  fs::create_directories(root, ec);
  if (ec)
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the checkpoint root ", root, ": ", ec.message()));
  if (!isDir(root))
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint root ", root, " is not a directory"));
  const std::string path = (fs::path(root) / kLockFile).string();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write into the checkpoint root ", root, ": ",
                     std::strerror(errno), " (creating ", path, ")"));
  std::unique_ptr<RootLock> lock(new RootLock());
  lock->fd_ = fd;
  if (!existed)
    lock->createdRoot_ = root;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string holder;
    char buffer[512];
    ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
    if (n > 0)
      holder = std::string(absl::StripAsciiWhitespace(
          absl::string_view(buffer, size_t(n))));
    if (err == EWOULDBLOCK)
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint root ", root, " is in use by another run (",
          holder.empty() ? "its holder is not recorded" : holder,
          "; lock ", path, "): one run at a time saves into a root; give "
          "this run another --save directory"));
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot lock the checkpoint root ", root, ": ", std::strerror(err)));
  }
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  char since[64] = "";
  std::time_t now = std::time(nullptr);
  std::tm utc;
  if (::gmtime_r(&now, &utc))
    std::strftime(since, sizeof(since), "%Y-%m-%d %H:%M:%S UTC", &utc);
  std::string who =
      absl::StrCat("pid ", ::getpid(), " on host ", host, " since ", since, "\n");
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, who.data(), who.size(), 0) != ssize_t(who.size()))
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write into the checkpoint root ", root, ": ",
                     std::strerror(errno), " (writing ", path, ")"));
  return lock;
}

RootLock::~RootLock() {
  // A root this run made and left with nothing but the lock (it failed
  // before its first save) goes with it: --save DIR must not leave an
  // empty DIR behind. Removed while the lock is held, so that no other run
  // can have taken it.
  if (!createdRoot_.empty() && fd_ >= 0) {
    std::error_code ec;
    bool onlyLock = true;
    for (const fs::directory_entry &e :
         fs::directory_iterator(createdRoot_, ec))
      onlyLock = onlyLock && e.path().filename() == kLockFile;
    if (!ec && onlyLock) {
      fs::remove(fs::path(createdRoot_) / kLockFile, ec);
      fs::remove(createdRoot_, ec);
    }
  }
  if (fd_ >= 0)
    ::close(fd_); // releases the flock
}

absl::Status VerifyCheckpoint(const std::string &dir, const Manifest &m) {
  std::map<std::string, std::vector<std::pair<const Tensor *, const Piece *>>>
      byFile;
  for (const Tensor &t : m.tensors())
    for (const Piece &p : t.pieces())
      byFile[p.file()].push_back({&t, &p});
  for (const File &f : m.files()) {
    const std::string path = (fs::path(dir) / f.name()).string();
    if (!isFile(path))
      return absl::DataLossError(absl::StrCat(
          path, " is missing (written by rank ", f.rank(), ")"));
    absl::StatusOr<std::string> bytes = common::readWholeFile(path);
    if (!bytes.ok())
      return bytes.status();
    if (int64_t(bytes->size()) != f.bytes())
      return absl::DataLossError(absl::StrCat(
          path, " has ", bytes->size(), " bytes, but the manifest says ",
          f.bytes(), " (truncated or replaced)"));
    // The pieces first, so that a corrupt value is named by its tensor; the
    // whole file's CRC-32 then covers the header and padding too.
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    if (!file.ok())
      return file.status();
    for (auto [t, p] : byFile[f.name()]) {
      absl::StatusOr<TensorInfo> info = file->Info(p->key());
      if (!info.ok())
        return absl::DataLossError(absl::StrCat(
            path, " lacks ", p->key(), " (", p->state(), " of tensor ",
            t->name(), ")"));
      if (info->dtype != Dtype::kF32 ||
          int64_t(info->numElements) != p->end() - p->begin())
        return absl::DataLossError(absl::StrCat(
            path, ": ", p->key(), " (", p->state(), " of tensor ", t->name(),
            ") is not ", p->end() - p->begin(), " F32 elements"));
      absl::Span<const uint8_t> data = *file->Bytes(p->key());
      if (CrcHex(Crc32(data)) != p->crc32())
        return absl::DataLossError(absl::StrCat(
            path, ": ", p->key(), " (", p->state(), " of tensor ", t->name(),
            ") does not match its CRC-32 (corrupt)"));
    }
    uint32_t crc = Crc32(absl::Span<const uint8_t>(
        reinterpret_cast<const uint8_t *>(bytes->data()), bytes->size()));
    if (CrcHex(crc) != f.crc32())
      return absl::DataLossError(absl::StrCat(
          path, ": CRC-32 ", CrcHex(crc), " does not match the manifest's ",
          f.crc32(), " (the file is corrupt)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointReader>>
CheckpointReader::Open(const std::string &dir) {
  absl::StatusOr<Manifest> manifest = ReadManifest(dir);
  if (!manifest.ok())
    return manifest.status();
  std::unique_ptr<CheckpointReader> r(new CheckpointReader());
  r->dir_ = dir;
  r->manifest_ = std::move(*manifest);
  for (const Tensor &t : r->manifest_.tensors()) {
    r->byName_[t.name()] = &t;
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    int64_t ranks = t.sharding().axis().empty()
                        ? 1
                        : axisSize(r->manifest_.mesh(), t.sharding().axis());
    for (const Piece &p : t.pieces()) {
      int index = int(r->pieces_.size());
      r->pieces_.push_back({&t, &p});
      std::vector<Segment> &segments =
          r->segments_[absl::StrCat(p.state(), "/", t.name())];
      int64_t offset = 0;
      for (auto [global, length] : SliceRuns(shape, t.sharding(), ranks,
                                             p.coordinate(), p.begin(),
                                             p.end())) {
        segments.push_back({global, length, index, offset});
        offset += length;
      }
    }
  }
  for (auto &[key, segments] : r->segments_)
    std::sort(segments.begin(), segments.end(),
              [](const Segment &a, const Segment &b) {
                return a.global < b.global;
              });
  return r;
}

const Tensor *CheckpointReader::Find(absl::string_view name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : it->second;
}

absl::StatusOr<const SafetensorsFile *>
CheckpointReader::fileOf(const std::string &name) {
  auto it = files_.find(name);
  if (it != files_.end())
    return &it->second;
  const std::string path = (fs::path(dir_) / name).string();
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  if (!file.ok())
    return absl::DataLossError(absl::StrCat("checkpoint ", dir_, ": ",
                                            file.status().message()));
  for (const File &f : manifest_.files())
    if (f.name() == name && int64_t(std::filesystem::file_size(path)) != f.bytes())
      return absl::DataLossError(absl::StrCat(
          path, " has ", std::filesystem::file_size(path),
          " bytes, but the manifest says ", f.bytes(),
          " (truncated or replaced)"));
  return &files_.emplace(name, std::move(*file)).first->second;
}

absl::Status CheckpointReader::checkPiece(PieceRef &ref,
                                          absl::Span<const uint8_t> bytes) {
  if (ref.checked)
    return absl::OkStatus();
  if (CrcHex(Crc32(bytes)) != ref.piece->crc32())
    return absl::DataLossError(absl::StrCat(
        (fs::path(dir_) / ref.piece->file()).string(), ": ", ref.piece->key(),
        " (", ref.piece->state(), " of tensor ", ref.tensor->name(),
        ") does not match its CRC-32 (corrupt)"));
  ref.checked = true;
  return absl::OkStatus();
}

absl::Status CheckpointReader::Read(absl::string_view name,
                                    absl::string_view state, int64_t begin,
                                    int64_t count, float *out) {
  auto it = segments_.find(absl::StrCat(state, "/", name));
  if (it == segments_.end())
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", dir_, " has no ", state, " of tensor ", name));
  const std::vector<Segment> &segments = it->second;
  int64_t at = begin, end = begin + count;
  // The last segment that starts at or before `at`.
  auto next = std::upper_bound(
      segments.begin(), segments.end(), at,
      [](int64_t g, const Segment &s) { return g < s.global; });
  if (next != segments.begin())
    --next;
  while (at < end) {
    while (next != segments.end() && next->global + next->length <= at)
      ++next;
    if (next == segments.end() || next->global > at)
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", dir_, ": element ", at, " of ", state, " of tensor ",
          name, " is in no piece (a shard file or piece is missing)"));
    PieceRef &ref = pieces_[next->piece];
    absl::StatusOr<const SafetensorsFile *> file = fileOf(ref.piece->file());
    if (!file.ok())
      return absl::Status(file.status().code(),
                          absl::StrCat("reading ", state, " of tensor ", name,
                                       ": ", file.status().message()));
    absl::StatusOr<TensorInfo> info = (*file)->Info(ref.piece->key());
    if (!info.ok() || info->dtype != Dtype::kF32 ||
        int64_t(info->numElements) != ref.piece->end() - ref.piece->begin())
      return absl::DataLossError(absl::StrCat(
          (*file)->path(), " lacks ", ref.piece->key(), " (", state,
          " of tensor ", name, ") as ",
          ref.piece->end() - ref.piece->begin(), " F32 elements"));
    absl::Span<const uint8_t> bytes = *(*file)->Bytes(ref.piece->key());
    if (absl::Status s = checkPiece(ref, bytes); !s.ok())
      return s;
    int64_t from = at - next->global;
    int64_t n = std::min(end, next->global + next->length) - at;
    std::memcpy(out + (at - begin),
                bytes.data() + (next->offset + from) * sizeof(float),
                n * sizeof(float));
    at += n;
  }
  return absl::OkStatus();
}

} // namespace braid::ckpt
