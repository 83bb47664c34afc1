//===- Format.h - Numbers in job validation messages ------------*- C++ -*-===//

#ifndef BRAID_FRONTENDS_FORMAT_H
#define BRAID_FRONTENDS_FORMAT_H

#include <cstdio>
#include <cstdlib>
#include <string>

namespace braid {

/// `v` as a job file would state it: the shortest digits that read back as
/// `v` ("0.1", "1e-08", "-1", "1.5"), "nan", "inf" or "-inf". Messages that
/// name a field's value print it this way; integer fields print as integers
/// (llvm::Twine of the int64).
inline std::string formatNumber(double v) {
  char buffer[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", digits, v);
    if (std::strtod(buffer, nullptr) == v)
      break;
  }
  return buffer;
}

} // namespace braid

#endif // BRAID_FRONTENDS_FORMAT_H
