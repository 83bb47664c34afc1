//===- BpeTokenizer.cpp - GPT-2-style byte-level BPE ----------------------===//
//
// JSON (tokenizer.json, vocab.json) is parsed with protobuf's JSON parser
// into a google.protobuf.Struct, as elsewhere in the runtime.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/BpeTokenizer.h"

#include "runtime/common/Json.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <iterator>
#include <queue>
#include <sys/stat.h>

namespace braid::data {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

//===----------------------------------------------------------------------===//
// Unicode: code points, classes, UTF-8
//===----------------------------------------------------------------------===//

struct CodePointRange {
  uint32_t first, last;
};

#include "runtime/data/UnicodeTables.inc"

bool inRanges(uint32_t cp, const CodePointRange *begin,
              const CodePointRange *end) {
  const CodePointRange *it =
      std::upper_bound(begin, end, cp, [](uint32_t c, const CodePointRange &r) {
        return c < r.first;
      });
  return it != begin && cp <= (it - 1)->last;
}

/// Stands for a byte that is not part of a well-formed UTF-8 sequence.
constexpr uint32_t kMalformed = 0x110000;

/// \p{L}.
bool isLetter(uint32_t cp) {
  if (cp < 0x80)
    return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return inRanges(cp, std::begin(kLetterRanges), std::end(kLetterRanges));
}

/// \p{N}.
bool isNumber(uint32_t cp) {
  if (cp < 0x80)
    return cp >= '0' && cp <= '9';
  return inRanges(cp, std::begin(kNumberRanges), std::end(kNumberRanges));
}

/// \s, as Oniguruma and Rust's regex define it: Unicode's White_Space.
bool isSpace(uint32_t cp) {
  if (cp < 0x80)
    return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/// The length of the well-formed UTF-8 sequence at s[i] (Unicode's table
/// 3-7), or, when there is none, minus the length of its maximal prefix (at
/// least 1): what one U+FFFD replaces.
int utf8SequenceAt(absl::string_view s, size_t i, uint32_t *cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int need;
  uint8_t lo = 0x80, hi = 0xBF;
  uint32_t value;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    value = b0 & 0x0F;
    if (b0 == 0xE0)
      lo = 0xA0;
    if (b0 == 0xED)
      hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    value = b0 & 0x07;
    if (b0 == 0xF0)
      lo = 0x90;
    if (b0 == 0xF4)
      hi = 0x8F;
  } else {
    return -1;
  }
  size_t j = i + 1;
  for (int k = 0; k < need; ++k, ++j) {
    if (j >= s.size() || byte(j) < lo || byte(j) > hi)
      return -static_cast<int>(j - i);
    value = (value << 6) | (byte(j) & 0x3F);
    lo = 0x80;
    hi = 0xBF;
  }
  *cp = value;
  return need + 1;
}

/// Appends the text of `bytes` as Rust's String::from_utf8_lossy (and
/// Python's errors="replace") make it: each maximal malformed prefix becomes
/// U+FFFD.
void appendUtf8Lossy(absl::string_view bytes, std::string *out) {
  for (size_t i = 0; i < bytes.size();) {
    uint32_t cp;
    int n = utf8SequenceAt(bytes, i, &cp);
    if (n > 0) {
      out->append(bytes.data() + i, n);
      i += n;
    } else {
      out->append("\xEF\xBF\xBD");
      i += -n;
    }
  }
}

void appendUtf8(uint32_t cp, std::string *out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// One character of a piece: its code point (kMalformed for a byte outside
/// well-formed UTF-8) and its bytes [begin, end).
struct Char {
  uint32_t cp;
  uint32_t begin, end;
};

std::vector<Char> decodeChars(absl::string_view s) {
  std::vector<Char> chars;
  chars.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    int n = utf8SequenceAt(s, i, &cp);
    if (n < 0) {
      cp = kMalformed;
      n = 1;
    }
    chars.push_back(
        {cp, static_cast<uint32_t>(i), static_cast<uint32_t>(i + n)});
    i += n;
  }
  return chars;
}

//===----------------------------------------------------------------------===//
// GPT-2's byte characters
//===----------------------------------------------------------------------===//

/// GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC and
/// 0xAE..0xFF stand for themselves; the others, in increasing order, for
/// U+0100, U+0101, ...
struct ByteCharacters {
  std::array<uint32_t, 256> charOf{};
  std::array<std::string, 256> utf8Of;
  /// Code point -> byte, for the code points below 0x144.
  std::array<int16_t, 0x144> byteOf{};

  ByteCharacters() {
    byteOf.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                       (b >= 0xAE && b <= 0xFF);
      charOf[b] = printable ? static_cast<uint32_t>(b) : next++;
      appendUtf8(charOf[b], &utf8Of[b]);
      byteOf[charOf[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteCharacters &byteCharacters() {
  static const ByteCharacters *table = new ByteCharacters();
  return *table;
}

/// The bytes a token stands for: each character's byte when all of its
/// characters are byte characters, else its own UTF-8 (as `tokenizers`'
/// ByteLevel decoder does, for added tokens such as "<|im start|>").
std::string tokenBytes(absl::string_view token) {
  const ByteCharacters &bc = byteCharacters();
  std::string bytes;
  for (const Char &c : decodeChars(token)) {
    if (c.cp >= bc.byteOf.size() || bc.byteOf[c.cp] < 0)
      return std::string(token);
    bytes.push_back(static_cast<char>(bc.byteOf[c.cp]));
  }
  return bytes;
}

//===----------------------------------------------------------------------===//
// Pre-tokenization patterns
//===----------------------------------------------------------------------===//

constexpr absl::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr absl::string_view kBloomPattern = R"( ?[^(\s|[.,!?…。，、।۔،])]+)";

/// The end (a character index) of the GPT-2 pattern's match at chars[i].
/// Every character starts a match, so the matches tile the piece. At one
/// position the pattern's alternatives are tried in order and the first
/// that matches wins; each is written out below.
size_t gpt2MatchEnd(const std::vector<Char> &chars, size_t i) {
  const size_t n = chars.size();
  const uint32_t c = chars[i].cp;
  // 's|'t|'re|'ve|'m|'ll|'d (lower case only, as GPT-2's pattern).
  if (c == '\'' && i + 1 < n) {
    uint32_t d = chars[i + 1].cp;
    if (d == 's' || d == 't' || d == 'm' || d == 'd')
      return i + 2;
    if (i + 2 < n) {
      uint32_t e = chars[i + 2].cp;
      if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') ||
          (d == 'l' && e == 'l'))
        return i + 3;
    }
  }
  const auto isOther = [](uint32_t cp) {
    return !isSpace(cp) && !isLetter(cp) && !isNumber(cp);
  };
  const auto runEnd = [&](size_t k, auto pred) {
    while (k < n && pred(chars[k].cp))
      ++k;
    return k;
  };
  const bool spaceBefore = c == ' ' && i + 1 < n;
  const uint32_t next = spaceBefore ? chars[i + 1].cp : 0;
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a character of the class,
  // or a space before one, then the rest of the class's run.
  if (isLetter(c))
    return runEnd(i + 1, isLetter);
  if (spaceBefore && isLetter(next))
    return runEnd(i + 2, isLetter);
  if (isNumber(c))
    return runEnd(i + 1, isNumber);
  if (spaceBefore && isNumber(next))
    return runEnd(i + 2, isNumber);
  if (isOther(c))
    return runEnd(i + 1, isOther);
  if (spaceBefore && isOther(next))
    return runEnd(i + 2, isOther);
  // c is whitespace. `\s+(?!\S)`: the whole run when it ends the piece;
  // else all but its last character, which then goes with what follows,
  // when that leaves at least one. Otherwise `\s+`: the run (of one).
  size_t end = runEnd(i, isSpace);
  if (end == n)
    return n;
  if (end - i >= 2)
    return end - 1;
  return end;
}

/// BLOOM's Split pattern ` ?[^(\s|[.,!?…。，、।۔،])]+`: the outer class
/// holds '(', \s, '|', the nested class's characters and ')'.
bool isBloomWordChar(uint32_t cp) {
  switch (cp) {
  case '(':
  case ')':
  case '|':
  case '.':
  case ',':
  case '!':
  case '?':
  case 0x2026: // …
  case 0x3002: // 。
  case 0xFF0C: // ，
  case 0x3001: // 、
  case 0x0964: // ।
  case 0x06D4: // ۔
  case 0x060C: // ،
    return false;
  default:
    return !isSpace(cp);
  }
}

/// Appends the pieces of `piece` split by `step`'s pattern with
/// `tokenizers`' "Isolated" behaviour: each match is a piece, and so is
/// each stretch between matches.
void splitByPattern(absl::string_view piece, bool bloom,
                    std::vector<std::string> *out) {
  std::vector<Char> chars = decodeChars(piece);
  const size_t n = chars.size();
  const auto emit = [&](size_t from, size_t to) {
    if (from < to)
      out->emplace_back(piece.substr(chars[from].begin,
                                     chars[to - 1].end - chars[from].begin));
  };
  if (!bloom) {
    for (size_t i = 0; i < n;) {
      size_t end = gpt2MatchEnd(chars, i);
      emit(i, end);
      i = end;
    }
    return;
  }
  size_t gapStart = 0;
  for (size_t i = 0; i < n;) {
    size_t end = i;
    if (chars[i].cp == ' ' && i + 1 < n && isBloomWordChar(chars[i + 1].cp))
      end = i + 2;
    else if (isBloomWordChar(chars[i].cp))
      end = i + 1;
    if (end == i) {
      ++i;
      continue;
    }
    while (end < n && isBloomWordChar(chars[end].cp))
      ++end;
    emit(gapStart, i);
    emit(i, end);
    i = gapStart = end;
  }
  emit(gapStart, n);
}

/// Where the whitespace that ends `s` starts.
size_t trailingSpaceStart(absl::string_view s) {
  size_t start = 0;
  for (const Char &c : decodeChars(s))
    if (!isSpace(c.cp))
      start = c.end;
  return start;
}

/// The length of the whitespace that starts `s`.
size_t leadingSpaceLength(absl::string_view s) {
  size_t length = 0;
  for (const Char &c : decodeChars(s)) {
    if (!isSpace(c.cp))
      break;
    length = c.end;
  }
  return length;
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

absl::StatusOr<std::string> readFile(const std::string &path,
                                     absl::string_view what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot open ", what, " ", path));
  if (S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " is a directory, not a file"));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot open ", what, " ", path));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad())
    return absl::DataLossError(absl::StrCat("error reading ", what, " ", path));
  return text;
}

using common::ParseJsonObject;

/// `s` in double quotes, quotes and control characters escaped (and
/// backslashes not, so that a pattern reads as written).
std::string quoted(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(
          &out, "\\x",
          absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

/// A JSON value, short, for messages.
std::string describe(const Value &v) {
  switch (v.kind_case()) {
  case Value::kNullValue:
    return "null";
  case Value::kBoolValue:
    return v.bool_value() ? "true" : "false";
  case Value::kNumberValue:
    return absl::StrCat(v.number_value());
  case Value::kStringValue:
    return quoted(v.string_value().size() > 80
                      ? v.string_value().substr(0, 80) + "..."
                      : v.string_value());
  case Value::kStructValue:
    return "an object";
  case Value::kListValue:
    return "a list";
  default:
    return "nothing";
  }
}

/// Reads the fields of one JSON object of a file, naming the file and the
/// field's path in every message.
class JsonReader {
public:
  JsonReader(std::string file, const Struct &object, std::string where)
      : file_(std::move(file)), object_(object), where_(std::move(where)) {}

  /// The field, or null when it is absent or JSON null.
  const Value *get(absl::string_view key) const {
    auto it = object_.fields().find(std::string(key));
    if (it == object_.fields().end() ||
        it->second.kind_case() == Value::kNullValue)
      return nullptr;
    return &it->second;
  }
  std::string path(absl::string_view key) const {
    return where_.empty() ? std::string(key) : absl::StrCat(where_, ".", key);
  }
  absl::Status error(absl::string_view key, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": ", path(key), ": ", message));
  }
  absl::Status wrongType(absl::string_view key, absl::string_view expected,
                         const Value &v) const {
    return error(key,
                 absl::StrCat("expected ", expected, ", got ", describe(v)));
  }
  /// An unimplemented setting: the field, its value, what Braid does.
  absl::Status unsupported(absl::string_view key, const Value &v,
                           absl::string_view supported) const {
    return error(
        key, absl::StrCat(describe(v), " is not supported (", supported, ")"));
  }

  absl::StatusOr<bool> boolean(absl::string_view key, bool fallback) const {
    const Value *v = get(key);
    if (!v)
      return fallback;
    if (v->kind_case() != Value::kBoolValue)
      return wrongType(key, "true or false", *v);
    return v->bool_value();
  }
  /// A string field; `fallback` when absent or null.
  absl::StatusOr<std::string> str(absl::string_view key,
                                  std::string fallback = "") const {
    const Value *v = get(key);
    if (!v)
      return fallback;
    if (v->kind_case() != Value::kStringValue)
      return wrongType(key, "a string", *v);
    return v->string_value();
  }
  absl::StatusOr<const Struct *> object(absl::string_view key) const {
    const Value *v = get(key);
    if (!v)
      return error(key, "missing");
    if (v->kind_case() != Value::kStructValue)
      return wrongType(key, "an object", *v);
    return &v->struct_value();
  }
  absl::StatusOr<const ListValue *> list(absl::string_view key) const {
    const Value *v = get(key);
    if (!v)
      return error(key, "missing");
    if (v->kind_case() != Value::kListValue)
      return wrongType(key, "a list", *v);
    return &v->list_value();
  }
  JsonReader child(const Struct &object, absl::string_view key) const {
    return JsonReader(file_, object, path(key));
  }
  const std::string &file() const { return file_; }

private:
  std::string file_;
  const Struct &object_;
  std::string where_;
};

/// The largest id accepted: the id -> token tables are indexed by id.
constexpr int64_t kMaxId = (int64_t(1) << 22) - 1;

/// A token id from JSON: an integer in [0, kMaxId].
bool jsonId(const Value &v, int32_t *id) {
  if (v.kind_case() != Value::kNumberValue)
    return false;
  double d = v.number_value();
  if (!(d >= 0 && d <= kMaxId) || d != std::floor(d))
    return false;
  *id = static_cast<int32_t>(d);
  return true;
}

uint64_t pairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
         static_cast<uint32_t>(right);
}

} // namespace

//===----------------------------------------------------------------------===//
// Building
//===----------------------------------------------------------------------===//

/// Assembles a tokenizer from the parts the loaders read, checking each.
class BpeBuilder {
public:
  using SplitStep = ByteLevelBpeTokenizer::SplitStep;

  explicit BpeBuilder(std::string source) : t_(new ByteLevelBpeTokenizer()) {
    t_->source_ = std::move(source);
  }

  /// The vocabulary: an object token -> id. `where` prefixes messages.
  absl::Status setVocab(const Struct &vocab, absl::string_view where) {
    t_->vocab_.reserve(vocab.fields().size());
    absl::flat_hash_map<int32_t, std::string> byId;
    byId.reserve(vocab.fields().size());
    for (const auto &entry : vocab.fields()) {
      const std::string &token = entry.first;
      const Value &value = entry.second;
      int32_t id;
      if (!jsonId(value, &id))
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": the id of token ", quoted(token), " is ", describe(value),
            ", not an integer in [0, ", kMaxId, "]"));
      auto [it, inserted] = byId.emplace(id, token);
      if (!inserted)
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": id ", id, " is given to both ",
                         quoted(std::min(it->second, token)), " and ",
                         quoted(std::max(it->second, token))));
      t_->vocab_.emplace(token, id);
      maxId_ = std::max<int64_t>(maxId_, id);
    }
    if (t_->vocab_.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the vocabulary is empty"));
    return absl::OkStatus();
  }

  /// The merge of rank `rank`. `label` names it in messages.
  absl::Status addMerge(absl::string_view left, absl::string_view right,
                        int32_t rank, absl::FunctionRef<std::string()> label) {
    int32_t ids[3];
    std::string merged = absl::StrCat(left, right);
    absl::string_view parts[3] = {left, right, merged};
    for (int k = 0; k < 3; ++k) {
      auto it = t_->vocab_.find(parts[k]);
      if (it == t_->vocab_.end())
        return absl::InvalidArgumentError(
            absl::StrCat(label(), ": ", k == 2 ? "the merged token " : "token ",
                         quoted(parts[k]), " is not in the vocabulary"));
      ids[k] = it->second;
    }
    // As in `tokenizers`, a pair given twice keeps its last rank.
    t_->merges_[pairKey(ids[0], ids[1])] = {rank, ids[2]};
    return absl::OkStatus();
  }

  /// Merges as merges.txt and tokenizer.json's legacy form write them:
  /// "a b", one space; "#version..." lines are skipped. `label(i)` names the
  /// i-th line or entry given.
  absl::Status addMergeLine(absl::string_view line, int32_t *rank,
                            absl::FunctionRef<std::string()> label) {
    if (absl::StartsWith(line, "#version"))
      return absl::OkStatus();
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2)
      return absl::InvalidArgumentError(
          absl::StrCat(label(), ": ", quoted(line),
                       " is not a merge (two tokens separated by one space)"));
    return addMerge(parts[0], parts[1], (*rank)++, label);
  }

  absl::Status addAddedToken(const BpeAddedToken &token,
                             absl::string_view where) {
    if (token.id < 0 || token.id > kMaxId)
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": id ", token.id, " of added token ",
                       quoted(token.content), " is outside [0, ", kMaxId, "]"));
    // `tokenizers` ignores an added token without content.
    if (token.content.empty())
      return absl::OkStatus();
    t_->addedIds_[token.content] = token.id;
    maxId_ = std::max<int64_t>(maxId_, token.id);
    (token.normalized ? t_->addedNormalized_ : t_->addedRaw_)
        .tokens.push_back(token);
    return absl::OkStatus();
  }

  void setSteps(std::vector<SplitStep> steps) { t_->steps_ = std::move(steps); }
  void setModelOptions(std::string unkToken, bool fuseUnk, bool ignoreMerges) {
    t_->unkToken_ = std::move(unkToken);
    t_->fuseUnk_ = fuseUnk;
    t_->ignoreMerges_ = ignoreMerges;
  }
  BpeSequenceTemplate *sequenceTemplate() { return &t_->template_; }

  absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>>
  finish(const ByteLevelBpeOptions &options, absl::string_view where) {
    ByteLevelBpeTokenizer &t = *t_;
    t.vocabSize_ = maxId_ + 1;
    t.idBytes_.assign(t.vocabSize_, std::string());
    t.idFlags_.assign(t.vocabSize_, 0);
    for (const auto &[token, id] : t.vocab_) {
      t.idBytes_[id] = tokenBytes(token);
      t.idFlags_[id] = ByteLevelBpeTokenizer::kHasToken;
    }
    // An added token decodes to its content, even where the vocabulary has
    // its id too (`tokenizers` looks the added tokens up first).
    absl::flat_hash_set<std::string> specialContents;
    for (const auto *set : {&t.addedRaw_, &t.addedNormalized_})
      for (const BpeAddedToken &a : set->tokens) {
        t.idBytes_[a.id] = tokenBytes(a.content);
        t.idFlags_[a.id] = ByteLevelBpeTokenizer::kHasToken;
        if (a.special)
          specialContents.insert(a.content);
      }
    // Decoding skips special tokens by content, as `tokenizers` does.
    for (const auto *set : {&t.addedRaw_, &t.addedNormalized_})
      for (const BpeAddedToken &a : set->tokens)
        if (specialContents.contains(a.content))
          t.idFlags_[a.id] |= ByteLevelBpeTokenizer::kSpecial;
    for (const std::string &content : specialContents)
      if (auto it = t.vocab_.find(content); it != t.vocab_.end())
        t.idFlags_[it->second] |= ByteLevelBpeTokenizer::kSpecial;
    for (auto *set : {&t.addedRaw_, &t.addedNormalized_}) {
      // Longest first, so that the first candidate that matches is the
      // longest match at its position.
      std::stable_sort(set->tokens.begin(), set->tokens.end(),
                       [](const BpeAddedToken &a, const BpeAddedToken &b) {
                         return a.content.size() > b.content.size();
                       });
      for (size_t k = 0; k < set->tokens.size(); ++k)
        set->byFirstByte[static_cast<uint8_t>(set->tokens[k].content[0])]
            .push_back(static_cast<uint32_t>(k));
    }

    const ByteCharacters &bc = byteCharacters();
    for (int b = 0; b < 256; ++b) {
      auto it = t.vocab_.find(bc.utf8Of[b]);
      t.byteIds_[b] = it == t.vocab_.end() ? -1 : it->second;
    }
    // `tokenizers` looks unk_token up in the model's vocabulary only.
    if (!t.unkToken_.empty())
      if (auto it = t.vocab_.find(t.unkToken_); it != t.vocab_.end())
        t.unkId_ = it->second;

    for (const std::vector<int32_t> *ids :
         {&t.template_.prefix, &t.template_.suffix})
      for (int32_t id : *ids)
        if (id < 0 || id >= t.vocabSize_ ||
            !(t.idFlags_[id] & ByteLevelBpeTokenizer::kHasToken))
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": post_processor: special token id ", id,
                           " is not in the vocabulary"));

    if (options.eodId >= 0) {
      if (options.eodId >= t.vocabSize_ ||
          !(t.idFlags_[options.eodId] & ByteLevelBpeTokenizer::kHasToken))
        return absl::FailedPreconditionError(absl::StrCat(
            where, ": the end-of-document id ", options.eodId,
            " is not in the vocabulary (ids below ", t.vocabSize_, ")"));
      t.eodId_ = options.eodId;
    } else {
      t.eodId_ = t.tokenToId(options.eodToken);
      if (t.eodId_ < 0)
        return absl::FailedPreconditionError(absl::StrCat(
            where, ": no token ", quoted(options.eodToken),
            " to end documents with; name the end-of-document token or id"));
    }
    return std::move(t_);
  }

private:
  std::unique_ptr<ByteLevelBpeTokenizer> t_;
  int64_t maxId_ = -1;
};

namespace {

/// Reads merges.txt into `builder`.
absl::Status readMergesTxt(const std::string &path, BpeBuilder *builder) {
  absl::StatusOr<std::string> text = readFile(path, "BPE merges file");
  if (!text.ok())
    return text.status();
  std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
  // A final newline ends the last line; it does not start an empty one.
  if (!lines.empty() && lines.back().empty())
    lines.pop_back();
  int32_t rank = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view line = absl::StripSuffix(lines[i], "\r");
    if (absl::Status s = builder->addMergeLine(
            line, &rank, [&] { return absl::StrCat(path, ":", i + 1); });
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

/// tokenizer.json's "model": BPE, with the settings of a byte-level BPE.
absl::Status readModel(const JsonReader &top, BpeBuilder *builder) {
  absl::StatusOr<const Struct *> model = top.object("model");
  if (!model.ok())
    return model.status();
  JsonReader m = top.child(**model, "model");
  // `tokenizers` reads a model without "type" as the first kind whose
  // fields it has; with vocab and merges that is BPE.
  if (const Value *type = m.get("type")) {
    if (type->kind_case() != Value::kStringValue ||
        type->string_value() != "BPE")
      return m.unsupported("type", *type, "Braid implements \"BPE\"");
  } else if (!m.get("merges")) {
    return m.error("type", "missing (Braid implements \"BPE\")");
  }
  if (const Value *dropout = m.get("dropout");
      dropout && !(dropout->kind_case() == Value::kNumberValue &&
                   dropout->number_value() == 0))
    return m.unsupported("dropout", *dropout,
                         "BPE dropout is for training; Braid implements null");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    absl::StatusOr<std::string> affix = m.str(key);
    if (!affix.ok())
      return affix.status();
    if (!affix->empty())
      return m.unsupported(key, *m.get(key), "Braid implements null or \"\"");
  }
  absl::StatusOr<bool> byteFallback = m.boolean("byte_fallback", false);
  if (!byteFallback.ok())
    return byteFallback.status();
  if (*byteFallback)
    return m.unsupported("byte_fallback", *m.get("byte_fallback"),
                         "a byte-level BPE needs no byte fallback; Braid "
                         "implements false");
  absl::StatusOr<bool> fuseUnk = m.boolean("fuse_unk", false);
  absl::StatusOr<bool> ignoreMerges = m.boolean("ignore_merges", false);
  absl::StatusOr<std::string> unk = m.str("unk_token");
  for (const absl::Status &s :
       {fuseUnk.status(), ignoreMerges.status(), unk.status()})
    if (!s.ok())
      return s;
  builder->setModelOptions(*unk, *fuseUnk, *ignoreMerges);

  absl::StatusOr<const Struct *> vocab = m.object("vocab");
  if (!vocab.ok())
    return vocab.status();
  if (absl::Status s = builder->setVocab(
          **vocab, absl::StrCat(top.file(), ": ", m.path("vocab")));
      !s.ok())
    return s;
  absl::StatusOr<const ListValue *> merges = m.list("merges");
  if (!merges.ok())
    return merges.status();
  int32_t rank = 0;
  for (int i = 0; i < (*merges)->values_size(); ++i) {
    const Value &merge = (*merges)->values(i);
    auto label = [&] {
      return absl::StrCat(top.file(), ": ", m.path("merges"), "[", i, "]");
    };
    absl::Status s;
    if (merge.kind_case() == Value::kStringValue) {
      s = builder->addMergeLine(merge.string_value(), &rank, label);
    } else if (merge.kind_case() == Value::kListValue &&
               merge.list_value().values_size() == 2 &&
               merge.list_value().values(0).kind_case() ==
                   Value::kStringValue &&
               merge.list_value().values(1).kind_case() ==
                   Value::kStringValue) {
      s = builder->addMerge(merge.list_value().values(0).string_value(),
                            merge.list_value().values(1).string_value(), rank++,
                            label);
    } else {
      s = absl::InvalidArgumentError(
          absl::StrCat(label(), ": expected \"a b\" or [\"a\", \"b\"], got ",
                       describe(merge)));
    }
    if (!s.ok())
      return s;
  }
  return absl::OkStatus();
}

/// tokenizer.json's "added_tokens".
absl::Status readAddedTokens(const JsonReader &top, BpeBuilder *builder) {
  const Value *added = top.get("added_tokens");
  if (!added)
    return absl::OkStatus();
  if (added->kind_case() != Value::kListValue)
    return top.wrongType("added_tokens", "a list", *added);
  for (int i = 0; i < added->list_value().values_size(); ++i) {
    const Value &entry = added->list_value().values(i);
    std::string key = absl::StrCat("added_tokens[", i, "]");
    if (entry.kind_case() != Value::kStructValue)
      return top.wrongType(key, "an object", entry);
    JsonReader a = top.child(entry.struct_value(), key);
    BpeAddedToken token;
    const Value *id = a.get("id");
    if (!id || !jsonId(*id, &token.id))
      return a.error("id",
                     absl::StrCat("expected an integer in [0, ", kMaxId,
                                  "], got ", id ? describe(*id) : "nothing"));
    absl::StatusOr<std::string> content = a.str("content");
    absl::StatusOr<bool> special = a.boolean("special", false);
    absl::StatusOr<bool> singleWord = a.boolean("single_word", false);
    absl::StatusOr<bool> lstrip = a.boolean("lstrip", false);
    absl::StatusOr<bool> rstrip = a.boolean("rstrip", false);
    for (const absl::Status &s :
         {content.status(), special.status(), singleWord.status(),
          lstrip.status(), rstrip.status()})
      if (!s.ok())
        return s;
    // tokenizers' default: special tokens are matched before normalization.
    absl::StatusOr<bool> normalized = a.boolean("normalized", !*special);
    if (!normalized.ok())
      return normalized.status();
    if (*singleWord)
      return a.unsupported("single_word", *a.get("single_word"),
                           "Braid implements false");
    token.content = *content;
    token.special = *special;
    token.lstrip = *lstrip;
    token.rstrip = *rstrip;
    token.normalized = *normalized;
    if (absl::Status s =
            builder->addAddedToken(token, absl::StrCat(top.file(), ": ", key));
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

constexpr absl::string_view kPreTokenizersSupported =
    "Braid implements ByteLevel, alone or in a Sequence after Splits by "
    "GPT-2's or BLOOM's pattern";

/// One pre-tokenizer (recursively for a Sequence), appending its steps.
absl::Status readPreTokenizer(const JsonReader &parent, absl::string_view key,
                              const Value &value,
                              std::vector<BpeBuilder::SplitStep> *steps,
                              int *byteLevels) {
  using SplitStep = BpeBuilder::SplitStep;
  if (value.kind_case() != Value::kStructValue)
    return parent.wrongType(key, "an object", value);
  JsonReader p = parent.child(value.struct_value(), key);
  const Value *type = p.get("type");
  if (!type || type->kind_case() != Value::kStringValue)
    return p.error("type", "missing");
  const std::string &kind = type->string_value();
  if (*byteLevels > 0)
    return p.unsupported("type", *type,
                         "a pre-tokenizer after ByteLevel sees its byte "
                         "characters; Braid implements ByteLevel last");
  if (kind == "Sequence") {
    absl::StatusOr<const ListValue *> list = p.list("pretokenizers");
    if (!list.ok())
      return list.status();
    for (int i = 0; i < (*list)->values_size(); ++i)
      if (absl::Status s =
              readPreTokenizer(p, absl::StrCat("pretokenizers[", i, "]"),
                               (*list)->values(i), steps, byteLevels);
          !s.ok())
        return s;
    return absl::OkStatus();
  }
  if (kind == "ByteLevel") {
    // ByteLevel's defaults in `tokenizers`: a prefix space, the regex.
    absl::StatusOr<bool> prefix = p.boolean("add_prefix_space", true);
    absl::StatusOr<bool> useRegex = p.boolean("use_regex", true);
    if (!prefix.ok())
      return prefix.status();
    if (!useRegex.ok())
      return useRegex.status();
    if (*prefix)
      steps->push_back(SplitStep::kPrefixSpace);
    if (*useRegex)
      steps->push_back(SplitStep::kGpt2Pattern);
    ++*byteLevels;
    return absl::OkStatus();
  }
  if (kind == "Split") {
    absl::StatusOr<const Struct *> pattern = p.object("pattern");
    if (!pattern.ok())
      return pattern.status();
    JsonReader pat = p.child(**pattern, "pattern");
    const Value *regex = pat.get("Regex");
    if (!regex) {
      if (!(*pattern)->fields().empty()) {
        const auto &first = *(*pattern)->fields().begin();
        return pat.unsupported(first.first, first.second,
                               "Braid implements a Regex pattern");
      }
      return pat.error("Regex", "missing");
    }
    SplitStep step;
    if (regex->kind_case() == Value::kStringValue &&
        regex->string_value() == kGpt2Pattern) {
      step = SplitStep::kGpt2Pattern;
    } else if (regex->kind_case() == Value::kStringValue &&
               regex->string_value() == kBloomPattern) {
      step = SplitStep::kBloomPattern;
    } else {
      return pat.unsupported("Regex", *regex,
                             absl::StrCat("Braid implements GPT-2's pattern ",
                                          quoted(kGpt2Pattern), " and BLOOM's ",
                                          quoted(kBloomPattern)));
    }
    absl::StatusOr<std::string> behavior = p.str("behavior");
    if (!behavior.ok())
      return behavior.status();
    if (*behavior != "Isolated")
      return p.error("behavior", absl::StrCat(quoted(*behavior),
                                              " is not supported (Braid "
                                              "implements \"Isolated\")"));
    absl::StatusOr<bool> invert = p.boolean("invert", false);
    if (!invert.ok())
      return invert.status();
    if (*invert)
      return p.unsupported("invert", *p.get("invert"),
                           "Braid implements false");
    steps->push_back(step);
    return absl::OkStatus();
  }
  return p.unsupported("type", *type, kPreTokenizersSupported);
}

/// tokenizer.json's "post_processor": TemplateProcessing (whose single
/// template gives the special tokens around a sequence), ByteLevel (offsets
/// only), or a Sequence of those.
absl::Status readPostProcessor(const JsonReader &parent, absl::string_view key,
                               const Value &value,
                               BpeSequenceTemplate *result) {
  if (value.kind_case() != Value::kStructValue)
    return parent.wrongType(key, "an object", value);
  JsonReader p = parent.child(value.struct_value(), key);
  const Value *type = p.get("type");
  if (!type || type->kind_case() != Value::kStringValue)
    return p.error("type", "missing");
  const std::string &kind = type->string_value();
  if (kind == "ByteLevel")
    return absl::OkStatus();
  if (kind == "Sequence") {
    absl::StatusOr<const ListValue *> list = p.list("processors");
    if (!list.ok())
      return list.status();
    for (int i = 0; i < (*list)->values_size(); ++i)
      if (absl::Status s =
              readPostProcessor(p, absl::StrCat("processors[", i, "]"),
                                (*list)->values(i), result);
          !s.ok())
        return s;
    return absl::OkStatus();
  }
  if (kind != "TemplateProcessing")
    return p.unsupported("type", *type,
                         "Braid implements TemplateProcessing, ByteLevel "
                         "and a Sequence of them");
  if (result->present)
    return p.error("type", "a second TemplateProcessing is not supported");
  result->present = true;
  absl::StatusOr<const Struct *> specials = p.object("special_tokens");
  absl::StatusOr<const ListValue *> single = p.list("single");
  if (!specials.ok())
    return specials.status();
  if (!single.ok())
    return single.status();
  bool seenSequence = false;
  for (int i = 0; i < (*single)->values_size(); ++i) {
    std::string itemKey = absl::StrCat("single[", i, "]");
    const Value &item = (*single)->values(i);
    if (item.kind_case() != Value::kStructValue)
      return p.wrongType(itemKey, "an object", item);
    JsonReader it = p.child(item.struct_value(), itemKey);
    if (const Value *seq = it.get("Sequence")) {
      if (seq->kind_case() != Value::kStructValue)
        return it.wrongType("Sequence", "an object", *seq);
      JsonReader s = it.child(seq->struct_value(), "Sequence");
      absl::StatusOr<std::string> id = s.str("id");
      if (!id.ok())
        return id.status();
      if (*id != "A" || seenSequence)
        return s.error("id", absl::StrCat(quoted(*id),
                                          ": a single sequence's template "
                                          "holds sequence \"A\" once"));
      seenSequence = true;
      continue;
    }
    const Value *special = it.get("SpecialToken");
    if (!special || special->kind_case() != Value::kStructValue)
      return it.error("SpecialToken", "expected SpecialToken or Sequence");
    absl::StatusOr<std::string> name =
        it.child(special->struct_value(), "SpecialToken").str("id");
    if (!name.ok())
      return name.status();
    JsonReader sp = p.child(**specials, "special_tokens");
    const Value *entry = sp.get(*name);
    if (!entry || entry->kind_case() != Value::kStructValue)
      return sp.error(*name, "missing: the template names it");
    JsonReader e = sp.child(entry->struct_value(), *name);
    absl::StatusOr<const ListValue *> ids = e.list("ids");
    if (!ids.ok())
      return ids.status();
    for (const Value &idValue : (*ids)->values()) {
      int32_t id;
      if (!jsonId(idValue, &id))
        return e.wrongType("ids", "a list of token ids", idValue);
      (seenSequence ? result->suffix : result->prefix).push_back(id);
    }
  }
  if (!seenSequence)
    return p.error("single", "holds no sequence \"A\"");
  return absl::OkStatus();
}

/// tokenizer.json's "decoder": ByteLevel, alone or as a Sequence of one.
absl::Status readDecoder(const JsonReader &top) {
  const Value *decoder = top.get("decoder");
  if (!decoder)
    return top.error("decoder",
                     "missing: a byte-level BPE needs the ByteLevel decoder");
  if (decoder->kind_case() != Value::kStructValue)
    return top.wrongType("decoder", "an object", *decoder);
  JsonReader d = top.child(decoder->struct_value(), "decoder");
  const Value *type = d.get("type");
  if (!type || type->kind_case() != Value::kStringValue)
    return d.error("type", "missing");
  if (type->string_value() == "ByteLevel")
    return absl::OkStatus();
  if (type->string_value() == "Sequence") {
    absl::StatusOr<const ListValue *> list = d.list("decoders");
    if (!list.ok())
      return list.status();
    if ((*list)->values_size() == 1 &&
        (*list)->values(0).kind_case() == Value::kStructValue) {
      JsonReader only =
          d.child((*list)->values(0).struct_value(), "decoders[0]");
      const Value *inner = only.get("type");
      if (inner && inner->kind_case() == Value::kStringValue &&
          inner->string_value() == "ByteLevel")
        return absl::OkStatus();
      if (inner)
        return only.unsupported("type", *inner, "Braid implements ByteLevel");
    }
    return d.error("decoders", "Braid implements a Sequence of one "
                               "ByteLevel decoder");
  }
  return d.unsupported("type", *type, "Braid implements ByteLevel");
}

} // namespace

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>>
ByteLevelBpeTokenizer::LoadFromFiles(const std::string &vocabJsonPath,
                                     const std::string &mergesTxtPath,
                                     const ByteLevelBpeOptions &options) {
  absl::StatusOr<std::string> vocabText =
      readFile(vocabJsonPath, "BPE vocabulary");
  if (!vocabText.ok())
    return vocabText.status();
  absl::StatusOr<Struct> vocab = ParseJsonObject(vocabJsonPath, *vocabText);
  if (!vocab.ok())
    return vocab.status();
  BpeBuilder builder(absl::StrCat(vocabJsonPath, "+", mergesTxtPath));
  if (absl::Status s = builder.setVocab(*vocab, vocabJsonPath); !s.ok())
    return s;
  if (absl::Status s = readMergesTxt(mergesTxtPath, &builder); !s.ok())
    return s;
  for (const BpeAddedToken &token : options.addedTokens)
    if (absl::Status s = builder.addAddedToken(token, "added tokens"); !s.ok())
      return s;
  std::vector<SplitStep> steps;
  if (options.addPrefixSpace)
    steps.push_back(SplitStep::kPrefixSpace);
  steps.push_back(SplitStep::kGpt2Pattern);
  builder.setSteps(std::move(steps));
  return builder.finish(options, vocabJsonPath);
}

absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>>
ByteLevelBpeTokenizer::LoadFromTokenizerJson(
    const std::string &path, const ByteLevelBpeOptions &options) {
  absl::StatusOr<std::string> text = readFile(path, "tokenizer");
  if (!text.ok())
    return text.status();
  absl::StatusOr<Struct> json = ParseJsonObject(path, *text);
  if (!json.ok())
    return json.status();
  JsonReader top(path, *json, "");
  BpeBuilder builder(path);

  if (const Value *normalizer = top.get("normalizer")) {
    // An empty Sequence changes nothing.
    bool identity = false;
    if (normalizer->kind_case() == Value::kStructValue) {
      JsonReader n = top.child(normalizer->struct_value(), "normalizer");
      const Value *type = n.get("type");
      const Value *list = n.get("normalizers");
      identity = type && type->kind_case() == Value::kStringValue &&
                 type->string_value() == "Sequence" && list &&
                 list->kind_case() == Value::kListValue &&
                 list->list_value().values_size() == 0;
      if (!identity && type)
        return n.unsupported("type", *type,
                             "Braid implements no normalizer (null)");
    }
    if (!identity)
      return top.unsupported("normalizer", *normalizer,
                             "Braid implements no normalizer (null)");
  }

  if (absl::Status s = readModel(top, &builder); !s.ok())
    return s;
  if (absl::Status s = readAddedTokens(top, &builder); !s.ok())
    return s;

  const Value *pre = top.get("pre_tokenizer");
  if (!pre)
    return top.error("pre_tokenizer",
                     absl::StrCat("missing (", kPreTokenizersSupported, ")"));
  std::vector<SplitStep> steps;
  int byteLevels = 0;
  if (absl::Status s =
          readPreTokenizer(top, "pre_tokenizer", *pre, &steps, &byteLevels);
      !s.ok())
    return s;
  if (byteLevels != 1)
    return top.error("pre_tokenizer",
                     absl::StrCat("has no ByteLevel pre-tokenizer: this is "
                                  "not a byte-level BPE (",
                                  kPreTokenizersSupported, ")"));
  builder.setSteps(std::move(steps));

  if (const Value *post = top.get("post_processor"))
    if (absl::Status s = readPostProcessor(top, "post_processor", *post,
                                           builder.sequenceTemplate());
        !s.ok())
      return s;
  if (absl::Status s = readDecoder(top); !s.ok())
    return s;
  return builder.finish(options, path);
}

//===----------------------------------------------------------------------===//
// Encoding and decoding
//===----------------------------------------------------------------------===//

int32_t ByteLevelBpeTokenizer::tokenToId(absl::string_view token) const {
  if (auto it = addedIds_.find(token); it != addedIds_.end())
    return it->second;
  if (auto it = vocab_.find(token); it != vocab_.end())
    return it->second;
  return -1;
}

bool ByteLevelBpeTokenizer::isSpecial(int32_t id) const {
  return id >= 0 && id < vocabSize_ && (idFlags_[id] & kSpecial);
}

void ByteLevelBpeTokenizer::splitAdded(
    absl::string_view text, const AddedTokenSet &set,
    std::vector<std::pair<absl::string_view, int32_t>> *out) {
  size_t done = 0; // text[0, done) is split already
  for (size_t i = 0; i < text.size(); ++i) {
    const BpeAddedToken *match = nullptr;
    for (uint32_t k : set.byFirstByte[static_cast<uint8_t>(text[i])])
      if (absl::StartsWith(text.substr(i), set.tokens[k].content)) {
        match = &set.tokens[k];
        break;
      }
    if (!match)
      continue;
    size_t start = i, stop = i + match->content.size();
    if (match->lstrip)
      start = done + trailingSpaceStart(text.substr(done, start - done));
    if (match->rstrip)
      stop += leadingSpaceLength(text.substr(stop));
    if (done < start)
      out->emplace_back(text.substr(done, start - done), -1);
    out->emplace_back(text.substr(start, stop - start), match->id);
    // The search goes on after the whitespace an rstrip took (`tokenizers`
    // goes on at the token's end; they differ only for an added token that
    // starts with whitespace right after one that strips it).
    done = stop;
    i = stop - 1;
  }
  if (done < text.size())
    out->emplace_back(text.substr(done), -1);
}

absl::StatusOr<std::vector<int32_t>>
ByteLevelBpeTokenizer::encode(absl::string_view text) const {
  // Added tokens first: those matched on the raw text, then the others on
  // what is left between them.
  std::vector<std::pair<absl::string_view, int32_t>> segments, next;
  segments.emplace_back(text, -1);
  for (const AddedTokenSet *set : {&addedRaw_, &addedNormalized_}) {
    if (set->tokens.empty())
      continue;
    next.clear();
    for (const auto &[segment, id] : segments) {
      if (id >= 0)
        next.emplace_back(segment, id);
      else
        splitAdded(segment, *set, &next);
    }
    segments.swap(next);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  for (const auto &[segment, id] : segments) {
    if (id >= 0) {
      ids.push_back(id);
    } else if (!segment.empty()) {
      if (absl::Status s = encodeSegment(segment, &ids); !s.ok())
        return s;
    }
  }
  return ids;
}

absl::Status
ByteLevelBpeTokenizer::encodeSegment(absl::string_view segment,
                                     std::vector<int32_t> *ids) const {
  std::vector<std::string> pieces{std::string(segment)}, next;
  for (SplitStep step : steps_) {
    next.clear();
    for (std::string &piece : pieces) {
      if (step == SplitStep::kPrefixSpace) {
        if (piece[0] != ' ')
          piece.insert(0, " ");
        next.push_back(std::move(piece));
      } else {
        splitByPattern(piece, step == SplitStep::kBloomPattern, &next);
      }
    }
    pieces.swap(next);
  }
  for (const std::string &piece : pieces)
    if (absl::Status s = encodePiece(piece, ids); !s.ok())
      return s;
  return absl::OkStatus();
}

absl::Status
ByteLevelBpeTokenizer::encodePiece(absl::string_view piece,
                                   std::vector<int32_t> *ids) const {
  const ByteCharacters &bc = byteCharacters();
  if (ignoreMerges_) {
    std::string mapped;
    for (char c : piece)
      mapped += bc.utf8Of[static_cast<uint8_t>(c)];
    if (auto it = vocab_.find(mapped); it != vocab_.end()) {
      ids->push_back(it->second);
      return absl::OkStatus();
    }
  }
  // One symbol per byte. A byte whose character is not in the vocabulary
  // becomes unk_token (consecutive ones one unk with fuse_unk), or, without
  // an unk_token, nothing: both as `tokenizers` does.
  struct Symbol {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  bool lastWasUnk = false;
  for (char c : piece) {
    int32_t id = byteIds_[static_cast<uint8_t>(c)];
    if (id < 0) {
      if (unkToken_.empty())
        continue;
      if (unkId_ < 0)
        return absl::InvalidArgumentError(absl::StrCat(
            name(), ": byte ", static_cast<int>(static_cast<uint8_t>(c)),
            " has no token and unk_token ", quoted(unkToken_),
            " is not in the vocabulary"));
      if (fuseUnk_ && lastWasUnk)
        continue;
      id = unkId_;
      lastWasUnk = true;
    } else {
      lastWasUnk = false;
    }
    int32_t k = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, k - 1, k + 1});
  }
  if (symbols.empty())
    return absl::OkStatus();
  symbols.back().next = -1;

  // Merge the pair of lowest rank, the leftmost among equals, until no
  // adjacent pair has a merge. The queue holds candidate merges; one whose
  // symbols have changed since it was queued is stale and dropped.
  struct Candidate {
    int32_t rank, pos, merged;
    bool operator>(const Candidate &o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>,
                      std::greater<Candidate>>
      queue;
  const auto consider = [&](int32_t pos) {
    if (pos < 0 || symbols[pos].next < 0)
      return;
    auto it =
        merges_.find(pairKey(symbols[pos].id, symbols[symbols[pos].next].id));
    if (it != merges_.end())
      queue.push({it->second.first, pos, it->second.second});
  };
  std::vector<bool> removed(symbols.size(), false);
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(symbols.size()); ++k)
    consider(k);
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol &left = symbols[top.pos];
    if (removed[top.pos] || left.next < 0)
      continue;
    auto it = merges_.find(pairKey(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.first != top.rank ||
        it->second.second != top.merged)
      continue;
    int32_t right = left.next;
    left.id = top.merged;
    left.next = symbols[right].next;
    removed[right] = true;
    if (left.next >= 0)
      symbols[left.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int32_t k = 0; k >= 0; k = symbols[k].next)
    ids->push_back(symbols[k].id);
  return absl::OkStatus();
}

absl::StatusOr<std::string>
ByteLevelBpeTokenizer::decodeBytes(absl::Span<const int32_t> ids,
                                   bool skipSpecialTokens) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= vocabSize_ || !(idFlags_[id] & kHasToken))
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": id ", id, " at position ", i,
          id < 0 || id >= vocabSize_
              ? absl::StrCat(" is outside the vocabulary [0, ", vocabSize_, ")")
              : std::string(" has no token")));
    if (skipSpecialTokens && (idFlags_[id] & kSpecial))
      continue;
    bytes += idBytes_[id];
  }
  return bytes;
}

absl::StatusOr<std::string>
ByteLevelBpeTokenizer::decode(absl::Span<const int32_t> ids,
                              bool skipSpecialTokens) const {
  absl::StatusOr<std::string> bytes = decodeBytes(ids, skipSpecialTokens);
  if (!bytes.ok())
    return bytes.status();
  std::string text;
  text.reserve(bytes->size());
  appendUtf8Lossy(*bytes, &text);
  return text;
}

absl::StatusOr<std::string>
ByteLevelBpeTokenizer::decode(absl::Span<const int32_t> ids) const {
  return decode(ids, /*skipSpecialTokens=*/false);
}

} // namespace braid::data
