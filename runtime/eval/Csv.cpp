//===- Csv.cpp - RFC 4180 comma-separated records -------------------------===//

#include "runtime/eval/Csv.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include <cerrno>
#include <fstream>
#include <iterator>
#include <sys/stat.h>

namespace braid::eval {

absl::StatusOr<std::vector<CsvRecord>> ParseCsv(absl::string_view text,
                                                absl::string_view path) {
  if (absl::StartsWith(text, "\xEF\xBB\xBF"))
    text.remove_prefix(3);
  std::vector<CsvRecord> records;
  CsvRecord record;
  std::string field;
  int64_t line = 1;
  // Whether the current record has any character or separator yet: an
  // empty line is no record.
  bool recordStarted = false;
  size_t i = 0;
  const size_t n = text.size();

  auto endRecord = [&]() {
    if (recordStarted) {
      record.fields.push_back(std::move(field));
      records.push_back(std::move(record));
    }
    record = CsvRecord();
    field.clear();
    recordStarted = false;
  };

  while (i < n) {
    if (!recordStarted)
      record.line = line;
    char c = text[i];
    if (c == '"' && field.empty() && (!recordStarted || text[i - 1] == ',')) {
      // A quoted field: up to the quote that is not doubled.
      const int64_t opened = line;
      recordStarted = true;
      ++i;
      bool closed = false;
      while (i < n) {
        char q = text[i];
        if (q == '"') {
          if (i + 1 < n && text[i + 1] == '"') {
            field.push_back('"');
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        if (q == '\n')
          ++line;
        field.push_back(q);
        ++i;
      }
      if (!closed)
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":", opened, ": a quoted field is not closed (field ",
            record.fields.size() + 1, " of the record)"));
      // Only a separator or the end of the record may follow.
      if (i < n && text[i] != ',' && text[i] != '\n' &&
          !(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n') &&
          !(text[i] == '\r' && i + 1 == n))
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", line, ": field ", record.fields.size() + 1,
                         " has characters after its closing quote"));
      continue;
    }
    if (c == ',') {
      recordStarted = true;
      record.fields.push_back(std::move(field));
      field.clear();
      ++i;
      continue;
    }
    if (c == '\r' && (i + 1 == n || text[i + 1] == '\n')) {
      ++i;
      continue;
    }
    if (c == '\n') {
      endRecord();
      ++line;
      ++i;
      continue;
    }
    recordStarted = true;
    field.push_back(c);
    ++i;
  }
  endRecord();
  return records;
}

absl::StatusOr<std::string> ReadTextFile(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  if (S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not a file"));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad())
    return absl::DataLossError(absl::StrCat("error reading ", path));
  return text;
}

absl::StatusOr<std::vector<CsvRecord>> ReadCsvFile(const std::string &path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok())
    return text.status();
  return ParseCsv(*text, path);
}

} // namespace braid::eval
