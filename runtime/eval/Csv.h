//===- Csv.h - RFC 4180 comma-separated records -----------------*- C++ -*-===//
//
// The CSV files benchmarks publish (MMLU, C-Eval): records of fields
// separated by commas, one record a line ending in "\n" or "\r\n"; a field
// in double quotes may hold commas, line breaks and quotes (doubled: "" is
// one "). A quote inside an unquoted field is kept as a character, as
// Python's csv module and pandas read it; after a closing quote only a
// comma or the end of the record may follow. Lines that are empty are
// skipped (pandas' skip_blank_lines), and a UTF-8 byte order mark at the
// start of the file is dropped.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EVAL_CSV_H
#define BRAID_RUNTIME_EVAL_CSV_H

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <string>
#include <vector>

namespace braid::eval {

struct CsvRecord {
  /// The 1-based line the record starts on.
  int64_t line = 0;
  std::vector<std::string> fields;
};

/// The records of `text`, the contents of `path` (which messages name, as
/// "PATH:LINE: "). InvalidArgument for a quoted field that is not closed
/// (naming the line it opens on) and for characters after a closing quote.
absl::StatusOr<std::vector<CsvRecord>> ParseCsv(absl::string_view text,
                                                absl::string_view path);

/// ParseCsv of the file at `path`; NotFound (or the errno's code) naming the
/// path when it cannot be read.
absl::StatusOr<std::vector<CsvRecord>> ReadCsvFile(const std::string &path);

/// The contents of the file at `path`, or an error naming it.
absl::StatusOr<std::string> ReadTextFile(const std::string &path);

} // namespace braid::eval

#endif // BRAID_RUNTIME_EVAL_CSV_H
