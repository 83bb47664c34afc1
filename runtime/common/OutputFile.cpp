//===- OutputFile.cpp - Files the tools write -----------------------------===//

#include "runtime/common/OutputFile.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace braid::common {

absl::StatusOr<std::unique_ptr<OutputFile>>
OutputFile::Open(const std::string &path, Options options) {
  if (path.empty())
    return absl::InvalidArgumentError("no output file named (an empty path)");
  std::unique_ptr<OutputFile> out(new OutputFile());
  out->path_ = path;
  out->target_ = path;
  out->sync_ = options.sync;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // A link: replace what it names. realpath follows every link on the
    // way; a link to nothing (ENOENT) is written through, creating its
    // target.
    char resolved[PATH_MAX];
    if (::realpath(path.c_str(), resolved))
      out->target_ = resolved;
    else if (errno == ENOENT)
      options.inPlace = true;
    else
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot follow the link ", path));
  }
  if (::stat(out->target_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", path, ": it is a directory"));
    out->regular_ = S_ISREG(st.st_mode);
  } else if (errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  if (out->regular_ && !options.inPlace)
    out->tmp_ = absl::StrCat(out->target_, ".", ::getpid(), ".tmp");
  // A copy: the temporary's name is cleared below when nothing was created.
  const std::string opened = out->tmp_.empty() ? out->target_ : out->tmp_;
  out->file_ = std::fopen(opened.c_str(), "wb");
  if (!out->file_) {
    int err = errno;
    out->tmp_.clear(); // nothing was created
    return absl::ErrnoToStatus(
        err, absl::StrCat("cannot write ", path,
                          opened == path ? "" : absl::StrCat(" (", opened, ")")));
  }
  return out;
}

OutputFile::~OutputFile() {
  if (file_)
    std::fclose(file_);
  if (!tmp_.empty())
    std::remove(tmp_.c_str());
}

absl::Status OutputFile::fail(int err, absl::string_view what) {
  if (error_.ok())
    error_ = absl::ErrnoToStatus(
        err ? err : EIO, absl::StrCat("cannot ", what, " ", path_));
  return error_;
}

absl::Status OutputFile::Write(absl::string_view bytes) {
  if (!error_.ok())
    return error_;
  if (!file_)
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " is already closed"));
  if (!bytes.empty() &&
      std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    return fail(errno, "write");
  return absl::OkStatus();
}

absl::Status OutputFile::Flush() {
  if (!error_.ok())
    return error_;
  if (file_ && std::fflush(file_) != 0)
    return fail(errno, "write");
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  if (!file_)
    return error_.ok() ? absl::FailedPreconditionError(absl::StrCat(
                             path_, " is already closed"))
                       : error_;
  if (error_.ok() && std::fflush(file_) != 0)
    (void)fail(errno, "write");
  if (error_.ok() && sync_ && regular_ && ::fsync(::fileno(file_)) != 0)
    (void)fail(errno, "sync");
  int closed = std::fclose(file_);
  int err = errno;
  file_ = nullptr;
  if (error_.ok() && closed != 0)
    (void)fail(err, "write");
  if (!error_.ok())
    return error_; // the destructor removes the temporary
  if (!tmp_.empty()) {
    if (std::rename(tmp_.c_str(), target_.c_str()) != 0)
      return fail(errno, absl::StrCat("rename ", tmp_, " to"));
    tmp_.clear();
  }
  return absl::OkStatus();
}

absl::Status OpenOutputs(
    std::initializer_list<std::pair<OutputStream *, std::string>> outputs) {
  for (const auto &[stream, path] : outputs)
    if (!path.empty())
      if (absl::Status s = stream->Open(path); !s.ok())
        return s;
  return absl::OkStatus();
}

absl::Status CommitOutputs(std::initializer_list<OutputStream *> outputs) {
  for (OutputStream *stream : outputs)
    if (stream->is_open())
      if (absl::Status s = stream->Commit(); !s.ok())
        return s;
  return absl::OkStatus();
}

absl::Status CheckWritable(const std::string &path) {
  if (path.empty())
    return absl::InvalidArgumentError("no output file named (an empty path)");
  std::string target = path;
  char resolved[PATH_MAX];
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode) &&
      ::realpath(path.c_str(), resolved))
    target = resolved;
  if (::stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", path, ": it is a directory"));
    if (!S_ISREG(st.st_mode)) // written in place
      return ::access(target.c_str(), W_OK) == 0
                 ? absl::OkStatus()
                 : absl::ErrnoToStatus(errno, absl::StrCat("cannot write ",
                                                           path));
  } else if (errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  }
  // A regular file is written to a temporary beside it: its directory must
  // take new files.
  size_t slash = target.rfind('/');
  std::string dir = slash == std::string::npos ? "."
                    : slash == 0               ? "/"
                                               : target.substr(0, slash);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot write ", path, " (in ", dir, ")"));
  return absl::OkStatus();
}

absl::Status WriteOutputFile(const std::string &path, absl::string_view bytes,
                             OutputFile::Options options) {
  absl::StatusOr<std::unique_ptr<OutputFile>> out =
      OutputFile::Open(path, options);
  if (!out.ok())
    return out.status();
  if (absl::Status s = (*out)->Write(bytes); !s.ok())
    return s;
  return (*out)->Commit();
}

//===-- OutputStream ------------------------------------------------------===//

std::streambuf::int_type OutputStream::Buffer::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof()))
    return traits_type::not_eof(c);
  char ch = traits_type::to_char_type(c);
  if (!file || !file->Write(&ch, 1).ok())
    return traits_type::eof();
  return c;
}

std::streamsize OutputStream::Buffer::xsputn(const char *s, std::streamsize n) {
  if (!file || !file->Write(s, size_t(n)).ok())
    return 0;
  return n;
}

int OutputStream::Buffer::sync() {
  return file && file->Flush().ok() ? 0 : -1;
}

OutputStream::OutputStream() : std::ostream(&buffer_) {
  setstate(std::ios::badbit); // until Open
}

OutputStream::~OutputStream() = default;

absl::Status OutputStream::Open(const std::string &path,
                                OutputFile::Options options) {
  absl::StatusOr<std::unique_ptr<OutputFile>> opened =
      OutputFile::Open(path, options);
  if (!opened.ok())
    return opened.status();
  file_ = std::move(*opened);
  buffer_.file = file_.get();
  clear();
  return absl::OkStatus();
}

absl::Status OutputStream::Commit() {
  if (!file_)
    return absl::FailedPreconditionError("no output file is open");
  absl::Status s = file_->Commit();
  buffer_.file = nullptr;
  file_.reset();
  setstate(std::ios::badbit);
  return s;
}

} // namespace braid::common
