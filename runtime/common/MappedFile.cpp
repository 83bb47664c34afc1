//===- MappedFile.cpp - Read-only file mappings ---------------------------===//

#include "runtime/common/MappedFile.h"

#include "absl/strings/str_cat.h"

#include <cerrno>
#include <fstream>
#include <iterator>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace braid::common {

absl::Status mapFile(const std::string &path, const uint8_t **data,
                     size_t *size) {
  *data = nullptr;
  *size = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  if (st.st_size > 0) {
    void *p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                     MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return absl::ErrnoToStatus(err, absl::StrCat("cannot mmap ", path));
    }
    *data = static_cast<const uint8_t *>(p);
    *size = static_cast<size_t>(st.st_size);
  }
  // The mapping keeps the file alive; the descriptor is no longer needed.
  ::close(fd);
  return absl::OkStatus();
}

void unmapFile(const uint8_t *data, size_t size) {
  if (data)
    ::munmap(const_cast<uint8_t *>(data), size);
}

absl::StatusOr<std::string> readWholeFile(const std::string &path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // Why, from errno (ifstream keeps it): "does not exist" is NotFound,
    // anything else (no permission, a directory) says so.
    int err = errno;
    if (err == 0 || err == ENOENT)
      return absl::NotFoundError(absl::StrCat("cannot open ", path));
    return absl::ErrnoToStatus(err, absl::StrCat("cannot open ", path));
  }
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad())
    return absl::DataLossError(absl::StrCat("error reading ", path));
  return text;
}

} // namespace braid::common
