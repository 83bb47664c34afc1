//===- OutputFile.h - Files the tools write ---------------------*- C++ -*-===//
//
// Every file a Braid tool writes for the user (a plan, parameters, a
// checkpoint's files, a dataset, a report) goes through OutputFile, so that
// each is written the same careful way:
//
//  - A regular file (or a path that does not exist yet) is written to a
//    temporary beside it and renamed over it once complete: a reader sees the
//    old file or the whole new one, never a part.
//  - A symbolic link is followed: the file it names is replaced (the link
//    stays a link). A link to nothing creates the file it names.
//  - Anything else (/dev/null, a terminal, a named pipe) is written in place:
//    renaming over it would replace a device node with a regular file.
//  - Every write, flush, sync and close is checked; a failure (a full disk,
//    a lost mount) is an error naming the file, and the temporary is removed.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMMON_OUTPUTFILE_H
#define BRAID_RUNTIME_COMMON_OUTPUTFILE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdio>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <utility>

namespace braid::common {

class OutputFile {
public:
  struct Options {
    /// fsync the file before it is renamed into place (checkpoints, plans:
    /// what must survive a crash once the tool said it was written).
    bool sync = false;
    /// Write straight into `path` (truncated), without a temporary, also
    /// when it is a regular file: for files read while they grow (metrics
    /// one line a step, which `tail -f` follows).
    bool inPlace = false;
  };

  /// Opens `path` for writing as above. Errors name the path and why.
  static absl::StatusOr<std::unique_ptr<OutputFile>>
  Open(const std::string &path, Options options);
  static absl::StatusOr<std::unique_ptr<OutputFile>>
  Open(const std::string &path) {
    return Open(path, Options());
  }

  /// Removes the temporary when Commit was not reached (an error on the way
  /// leaves the old file as it was).
  ~OutputFile();
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;

  /// Appends `bytes`. A failed write is an error naming the file.
  absl::Status Write(absl::string_view bytes);
  absl::Status Write(const void *data, size_t size) {
    return Write(absl::string_view(static_cast<const char *>(data), size));
  }
  /// Pushes what was written so far to the operating system (for a file
  /// that others read while it grows); an error names the file.
  absl::Status Flush();
  /// Flushes, syncs (Options::sync), closes and renames the temporary into
  /// place. The first error of any write before it is reported here too.
  absl::Status Commit();

  /// The path given to Open.
  const std::string &path() const { return path_; }

private:
  OutputFile() = default;
  absl::Status fail(int err, absl::string_view what);

  std::string path_;   ///< as given
  std::string target_; ///< the file replaced (a link's target)
  std::string tmp_;    ///< the temporary, empty when written in place
  std::FILE *file_ = nullptr;
  bool regular_ = true; ///< the target is (or will be) a regular file
  bool sync_ = false;
  absl::Status error_;
};

/// An OutputFile written as a std::ostream, for writers that stream (a
/// generation's lines, logits, samples, a trace): what is inserted goes to
/// the OutputFile; Commit puts the file in place and reports the first
/// error of any write. Destroyed before Commit (a run that failed on the
/// way), it removes its temporary and leaves the old file as it was. Not
/// open, or after Commit, the stream is bad and writes nothing.
class OutputStream : public std::ostream {
public:
  OutputStream();
  ~OutputStream() override;
  OutputStream(const OutputStream &) = delete;
  OutputStream &operator=(const OutputStream &) = delete;

  /// OutputFile::Open; an error names the path and why.
  absl::Status Open(const std::string &path, OutputFile::Options options = {});
  bool is_open() const { return file_ != nullptr; }
  /// OutputFile::Commit.
  absl::Status Commit();

private:
  struct Buffer : std::streambuf {
    OutputFile *file = nullptr;
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char *s, std::streamsize n) override;
    int sync() override;
  };
  Buffer buffer_;
  std::unique_ptr<OutputFile> file_;
};

/// Opens the stream of each pair whose path is not empty (an optional
/// output's flag not given): the first error, naming its path.
absl::Status OpenOutputs(
    std::initializer_list<std::pair<OutputStream *, std::string>> outputs);
/// Commits each stream that is open: the first error.
absl::Status CommitOutputs(std::initializer_list<OutputStream *> outputs);

/// Whether OutputFile::Open(path) could write `path` now, without creating
/// anything: for an output made at the end of long work (parameters after
/// training), checked before the work. Errors as Open's.
absl::Status CheckWritable(const std::string &path);

/// Writes `bytes` to `path` through OutputFile.
absl::Status WriteOutputFile(const std::string &path, absl::string_view bytes,
                             OutputFile::Options options = {});

} // namespace braid::common

#endif // BRAID_RUNTIME_COMMON_OUTPUTFILE_H
