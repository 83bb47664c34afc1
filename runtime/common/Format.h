//===- Format.h - Sizes as people read them ---------------------*- C++ -*-===//
//
// The tables and lines the tools print for people show sizes in binary
// units (a peak of 73333659968 B reads as 68.30 GiB); what they write for
// programs (JSON, textproto, plan and report fields) keeps exact bytes.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMMON_FORMAT_H
#define BRAID_RUNTIME_COMMON_FORMAT_H

#include <cstdint>
#include <string>

namespace braid::common {

/// `bytes` in binary units: below 1024 the exact count ("0 B", "512 B");
/// otherwise in the largest of KiB, MiB, GiB, TiB, PiB, EiB (powers of 1024)
/// that the size reaches, with two decimals rounded half up ("1.50 KiB",
/// "64.00 MiB", "68.30 GiB"). A size that rounds to 1024.00 of a unit is
/// shown as 1.00 of the next ("1.00 MiB" for 1048575 B). A negative size
/// (a difference) is its magnitude's text after a '-'. Exact for every
/// int64_t, INT64_MIN included (-8.00 EiB).
std::string FormatBytes(int64_t bytes);

} // namespace braid::common

#endif // BRAID_RUNTIME_COMMON_FORMAT_H
