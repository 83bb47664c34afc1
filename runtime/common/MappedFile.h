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

} // namespace braid::common

#endif // BRAID_RUNTIME_COMMON_MAPPEDFILE_H
