//===- JsonString.h - Strings as JSON string literals -----------*- C++ -*-===//
//
// What the runtime and its tools write as JSON (safetensors headers, index
// files, evaluation results, traces, JSONL records) quotes its strings the
// one way RFC 8259 (section 7) requires and no more: the bytes that must be
// escaped are, everything else is copied as is. The same way as serde_json,
// so that a safetensors header reads byte for byte as the Rust library's.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_COMMON_JSONSTRING_H
#define BRAID_RUNTIME_COMMON_JSONSTRING_H

#include "absl/strings/string_view.h"

#include <string>

namespace braid::common {

/// Appends `s` to `out` as a JSON string literal: in double quotes, with a
/// quotation mark written \", a backslash \\, and each control character
/// below 0x20 as \b, \f, \n, \r or \t where it has a short form, else as
/// \u00xx (lower-case hex). Every other byte is copied as is: '/' is not
/// escaped, and neither is DEL (0x7f) nor any byte of a multi-byte UTF-8
/// sequence. The result is JSON text when `s` is UTF-8; ill-formed UTF-8 is
/// copied unchanged, so a caller whose text may hold it repairs it first
/// (ValidUtf8).
void AppendJsonString(std::string &out, absl::string_view s);

/// `s` as a JSON string literal (AppendJsonString to an empty string).
std::string JsonString(absl::string_view s);

/// `text` with each ill-formed UTF-8 sequence (a byte that starts none, or
/// the maximal prefix of one that is cut short) replaced by U+FFFD, as
/// Unicode recommends and Python's "replace" does: a model's text cut at any
/// token (a byte tokenizer's, a byte fallback) is still text JSON can hold.
std::string ValidUtf8(absl::string_view text);

/// `text` for an error message: printable ASCII as it is, a newline as
/// \n, every other byte (control characters such as a terminal's escape,
/// DEL, any byte of UTF-8, well-formed or not) as \xNN. A corrupt file's
/// bytes quoted in a message must not reach the terminal as they are.
std::string PrintableText(absl::string_view text);

} // namespace braid::common

#endif // BRAID_RUNTIME_COMMON_JSONSTRING_H
