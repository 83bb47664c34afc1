//===- MappedFile.h - Read-only file mappings -------------------*- C++ -*-===//
//
// The runtime reads datasets and checkpoints by mmap: the kernel pages data
// in on demand and nothing is copied. Shared by runtime/data and
// runtime/ckpt.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMMON_MAPPEDFILE_H
#define BRAID_RUNTIME_COMMON_MAPPEDFILE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace braid::common {

/// Maps the whole regular file `path` read-only. A file of size 0 gives a
/// null pointer, because mmap refuses empty mappings. Errors name the path.
absl::Status mapFile(const std::string &path, const uint8_t **data,
                     size_t *size);

/// Undoes mapFile (a null `data` is a no-op).
void unmapFile(const uint8_t *data, size_t size);

/// Reads the whole of a small file (a JSON header, index or manifest):
/// NotFound naming `path` when it cannot be opened, DataLoss on a read
/// error.
absl::StatusOr<std::string> readWholeFile(const std::string &path);

} // namespace braid::common

#endif // BRAID_RUNTIME_COMMON_MAPPEDFILE_H
