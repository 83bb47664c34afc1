//===- ModelTokenizer.cpp - A model directory's tokenizer -----------------===//

#include "runtime/data/ModelTokenizer.h"

#include "runtime/data/BpeTokenizer.h"

#include "runtime/common/Json.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <system_error>

namespace braid::data {
namespace {

namespace fs = std::filesystem;
using google::protobuf::Struct;
using google::protobuf::Value;

bool isRegularFile(const fs::path &path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

absl::StatusOr<std::string> readWholeFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad())
    return absl::DataLossError(absl::StrCat("error reading ", path));
  return text;
}

/// The JSON object in `dir`/`name`, or nullopt when there is no such file.
absl::StatusOr<std::optional<Struct>> readOptionalJson(const fs::path &dir,
                                                       const char *name) {
  fs::path path = dir / name;
  if (!isRegularFile(path))
    return std::optional<Struct>();
  absl::StatusOr<std::string> text = readWholeFile(path.string());
  if (!text.ok())
    return text.status();
  absl::StatusOr<Struct> object = common::ParseJsonObject(path.string(), *text);
  if (!object.ok())
    return object.status();
  return std::optional<Struct>(std::move(*object));
}

/// The field `key` of `object` (null when absent or JSON null).
const Value *field(const std::optional<Struct> &object, absl::string_view key) {
  if (!object)
    return nullptr;
  auto it = object->fields().find(std::string(key));
  if (it == object->fields().end() ||
      it->second.kind_case() == Value::kNullValue)
    return nullptr;
  return &it->second;
}

absl::Status fieldError(const fs::path &dir, const char *file,
                        absl::string_view key, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat((dir / file).string(), ": ", key, ": ", message));
}

bool integerOf(const Value &v, int32_t *out) {
  if (v.kind_case() != Value::kNumberValue)
    return false;
  double d = v.number_value();
  if (!(d >= 0 && d < 2147483648.0) || d != std::floor(d))
    return false;
  *out = static_cast<int32_t>(d);
  return true;
}

/// An id or a list of ids (generation_config.json's eos_token_id may be
/// either); empty when the field is absent or null.
absl::StatusOr<std::vector<int32_t>> idsField(const fs::path &dir,
                                              const char *file,
                                              const std::optional<Struct> &obj,
                                              const char *key) {
  std::vector<int32_t> ids;
  const Value *v = field(obj, key);
  if (!v)
    return ids;
  auto bad = [&] {
    return fieldError(dir, file, key,
                      "expected a token id or a list of token ids");
  };
  int32_t id;
  if (integerOf(*v, &id)) {
    ids.push_back(id);
  } else if (v->kind_case() == Value::kListValue) {
    for (const Value &item : v->list_value().values()) {
      if (!integerOf(item, &id))
        return bad();
      ids.push_back(id);
    }
  } else {
    return bad();
  }
  return ids;
}

/// A special token as tokenizer_config.json and special_tokens_map.json
/// write one: a string, or an object with "content". Empty when absent.
absl::StatusOr<std::string> tokenField(const fs::path &dir, const char *file,
                                       const std::optional<Struct> &obj,
                                       const char *key) {
  const Value *v = field(obj, key);
  if (!v)
    return std::string();
  if (v->kind_case() == Value::kStringValue)
    return v->string_value();
  if (v->kind_case() == Value::kStructValue) {
    auto it = v->struct_value().fields().find("content");
    if (it != v->struct_value().fields().end() &&
        it->second.kind_case() == Value::kStringValue)
      return it->second.string_value();
  }
  return fieldError(dir, file, key,
                    "expected a token: a string or an object with \"content\"");
}

absl::StatusOr<std::optional<bool>> boolField(const fs::path &dir,
                                              const char *file,
                                              const std::optional<Struct> &obj,
                                              const char *key) {
  const Value *v = field(obj, key);
  if (!v)
    return std::optional<bool>();
  if (v->kind_case() != Value::kBoolValue)
    return fieldError(dir, file, key, "expected true or false");
  return std::optional<bool>(v->bool_value());
}

/// The pieces of a SentencePiece model, by id: ModelProto's field 1
/// (repeated SentencePiece, whose field 1 is the piece), read with
/// protobuf's wire-format parser, since Braid does not compile
/// SentencePiece's .proto (and never links libsentencepiece: see
/// SentencePieceBridge.h).
absl::StatusOr<std::vector<std::string>>
sentencePiecePieces(const std::string &path) {
  absl::StatusOr<std::string> bytes = readWholeFile(path);
  if (!bytes.ok())
    return bytes.status();
  using google::protobuf::UnknownField;
  using google::protobuf::UnknownFieldSet;
  UnknownFieldSet model;
  auto malformed = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece model ", path, ": cannot read its pieces"));
  };
  if (bytes->size() > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromString(*bytes))
    return malformed();
  std::vector<std::string> pieces;
  for (int i = 0; i < model.field_count(); ++i) {
    const UnknownField &f = model.field(i);
    if (f.number() != 1)
      continue;
    if (f.type() != UnknownField::TYPE_LENGTH_DELIMITED)
      return malformed();
    UnknownFieldSet piece;
    if (!piece.ParseFromString(f.length_delimited()))
      return malformed();
    std::string text;
    for (int k = 0; k < piece.field_count(); ++k)
      if (piece.field(k).number() == 1 &&
          piece.field(k).type() == UnknownField::TYPE_LENGTH_DELIMITED)
        text = piece.field(k).length_delimited();
    pieces.push_back(std::move(text));
  }
  return pieces;
}

/// The named special tokens.
struct SpecialNames {
  std::string bos, eos, unk, pad;
};

absl::StatusOr<SpecialNames>
readSpecialNames(const fs::path &dir, const std::optional<Struct> &config,
                 const std::optional<Struct> &map) {
  SpecialNames names;
  struct Slot {
    const char *key;
    std::string *value;
  };
  const Slot slots[] = {{"bos_token", &names.bos},
                        {"eos_token", &names.eos},
                        {"unk_token", &names.unk},
                        {"pad_token", &names.pad}};
  for (const Slot &slot : slots) {
    absl::StatusOr<std::string> v =
        tokenField(dir, "tokenizer_config.json", config, slot.key);
    if (!v.ok())
      return v.status();
    *slot.value = *v;
  }
  // transformers 5 reads special_tokens_map.json only for a
  // tokenizer_config.json without added_tokens_decoder, and lets it
  // override.
  if (!field(config, "added_tokens_decoder"))
    for (const Slot &slot : slots) {
      absl::StatusOr<std::string> v =
          tokenField(dir, "special_tokens_map.json", map, slot.key);
      if (!v.ok())
        return v.status();
      if (!v->empty())
        *slot.value = *v;
    }
  return names;
}

/// GPT-2's files: the added tokens transformers gives GPT2Tokenizer.
/// `vocab` is vocab.json.
absl::StatusOr<std::vector<BpeAddedToken>>
filesAddedTokens(const fs::path &dir, const std::optional<Struct> &config,
                 const SpecialNames &names, const std::string &vocabPath,
                 const Struct &vocab) {
  std::vector<BpeAddedToken> tokens;
  absl::flat_hash_map<std::string, size_t> byContent;
  auto add = [&](BpeAddedToken token) {
    auto [it, inserted] = byContent.emplace(token.content, tokens.size());
    if (inserted)
      tokens.push_back(std::move(token));
    else
      tokens[it->second].special |= token.special;
  };
  if (const Value *decoder = field(config, "added_tokens_decoder")) {
    if (decoder->kind_case() != Value::kStructValue)
      return fieldError(dir, "tokenizer_config.json", "added_tokens_decoder",
                        "expected an object id -> token");
    for (const auto &entry : decoder->struct_value().fields()) {
      std::string key = absl::StrCat("added_tokens_decoder.", entry.first);
      BpeAddedToken token;
      if (!absl::SimpleAtoi(entry.first, &token.id) || token.id < 0)
        return fieldError(dir, "tokenizer_config.json", key,
                          "the key is not a token id");
      if (entry.second.kind_case() != Value::kStructValue)
        return fieldError(dir, "tokenizer_config.json", key,
                          "expected an object");
      const auto &f = entry.second.struct_value().fields();
      auto flag = [&](const char *name, bool fallback) {
        auto it = f.find(name);
        return it != f.end() && it->second.kind_case() == Value::kBoolValue
                   ? it->second.bool_value()
                   : fallback;
      };
      auto content = f.find("content");
      if (content == f.end() ||
          content->second.kind_case() != Value::kStringValue)
        return fieldError(dir, "tokenizer_config.json", key,
                          "expected \"content\", a string");
      token.content = content->second.string_value();
      token.special = flag("special", false);
      token.lstrip = flag("lstrip", false);
      token.rstrip = flag("rstrip", false);
      token.normalized = flag("normalized", !token.special);
      if (flag("single_word", false))
        return fieldError(dir, "tokenizer_config.json",
                          absl::StrCat(key, ".single_word"),
                          "true is not supported (Braid implements false)");
      add(std::move(token));
    }
  }
  absl::StatusOr<std::optional<Struct>> legacy =
      readOptionalJson(dir, "added_tokens.json");
  if (!legacy.ok())
    return legacy.status();
  if (*legacy)
    for (const auto &entry : (*legacy)->fields()) {
      BpeAddedToken token;
      token.content = entry.first;
      if (!integerOf(entry.second, &token.id))
        return fieldError(dir, "added_tokens.json", entry.first,
                          "expected a token id");
      token.normalized = true;
      add(std::move(token));
    }
  // The named special tokens, where they are not added tokens already, are
  // added with their vocabulary ids (transformers adds them, special and not
  // normalized).
  for (const std::string *name :
       {&names.bos, &names.eos, &names.unk, &names.pad}) {
    if (name->empty())
      continue;
    BpeAddedToken token;
    token.content = *name;
    token.special = true;
    if (auto it = byContent.find(*name); it != byContent.end()) {
      tokens[it->second].special = true;
      continue;
    }
    auto it = vocab.fields().find(*name);
    if (it == vocab.fields().end() || !integerOf(it->second, &token.id))
      return absl::InvalidArgumentError(absl::StrCat(
          (dir / "tokenizer_config.json").string(), ": special token \"", *name,
          "\" is neither in ", vocabPath, " nor an added token"));
    add(std::move(token));
  }
  return tokens;
}

/// `id` as a token of `tokenizer`, or InvalidArgument naming `what`.
absl::Status checkId(const Tokenizer &tokenizer, int32_t id,
                     absl::string_view what) {
  if (id < 0 || id >= tokenizer.vocabSize())
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", id, " is outside the tokenizer's vocabulary ",
                     "[0, ", tokenizer.vocabSize(), ")"));
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<ModelTokenizer> LoadModelTokenizer(const std::string &dirName) {
  const fs::path dir(dirName);
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return absl::NotFoundError(
        absl::StrCat("model directory ", dirName, " does not exist"));
  if (!fs::is_directory(dir, ec))
    return absl::InvalidArgumentError(
        absl::StrCat("model directory ", dirName, " is not a directory"));

  absl::StatusOr<std::optional<Struct>> tokenizerConfig =
      readOptionalJson(dir, "tokenizer_config.json");
  if (!tokenizerConfig.ok())
    return tokenizerConfig.status();
  absl::StatusOr<std::optional<Struct>> specialMap =
      readOptionalJson(dir, "special_tokens_map.json");
  if (!specialMap.ok())
    return specialMap.status();
  absl::StatusOr<std::optional<Struct>> config =
      readOptionalJson(dir, "config.json");
  if (!config.ok())
    return config.status();
  absl::StatusOr<std::optional<Struct>> generation =
      readOptionalJson(dir, "generation_config.json");
  if (!generation.ok())
    return generation.status();

  absl::StatusOr<SpecialNames> names =
      readSpecialNames(dir, *tokenizerConfig, *specialMap);
  if (!names.ok())
    return names.status();
  absl::StatusOr<std::optional<bool>> addBosConfig = boolField(
      dir, "tokenizer_config.json", *tokenizerConfig, "add_bos_token");
  absl::StatusOr<std::optional<bool>> addEosConfig = boolField(
      dir, "tokenizer_config.json", *tokenizerConfig, "add_eos_token");
  absl::StatusOr<std::optional<bool>> addPrefixSpace = boolField(
      dir, "tokenizer_config.json", *tokenizerConfig, "add_prefix_space");
  for (const absl::Status &s :
       {addBosConfig.status(), addEosConfig.status(), addPrefixSpace.status()})
    if (!s.ok())
      return s;

  // The ids the model's configuration gives: generation_config.json's,
  // else config.json's.
  std::vector<int32_t> configEos, configBos;
  for (const auto &[file, json] :
       {std::pair<const char *, const std::optional<Struct> *>{
            "generation_config.json", &*generation},
        {"config.json", &*config}}) {
    if (configEos.empty()) {
      absl::StatusOr<std::vector<int32_t>> ids =
          idsField(dir, file, *json, "eos_token_id");
      if (!ids.ok())
        return ids.status();
      configEos = *ids;
    }
    if (configBos.empty()) {
      absl::StatusOr<std::vector<int32_t>> ids =
          idsField(dir, file, *json, "bos_token_id");
      if (!ids.ok())
        return ids.status();
      configBos = *ids;
    }
  }

  ModelTokenizer result;
  // The id of a token string, -1 when there is none.
  std::function<int32_t(const std::string &)> idOf;
  const BpeSequenceTemplate *sequenceTemplate = nullptr;
  bool sentencePiece = false;

  const fs::path jsonPath = dir / "tokenizer.json";
  const fs::path vocabPath = dir / "vocab.json";
  const fs::path mergesPath = dir / "merges.txt";
  const fs::path spmPath = dir / "tokenizer.model";
  const bool hasSpm = isRegularFile(spmPath);
  bool useSpm = false;

  // A BPE's end-of-document: eos_token ("<|endoftext|>" unset), else the
  // configuration's first EOS id.
  ByteLevelBpeOptions bpeOptions;
  if (!names->eos.empty())
    bpeOptions.eodToken = names->eos;
  auto loadBpe =
      [&](auto load) -> absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> {
    absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> bpe =
        load(bpeOptions);
    if (absl::IsFailedPrecondition(bpe.status()) && !configEos.empty()) {
      ByteLevelBpeOptions byId = bpeOptions;
      byId.eodId = configEos[0];
      return load(byId);
    }
    return bpe;
  };

  if (isRegularFile(jsonPath)) {
    absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> bpe =
        loadBpe([&](const ByteLevelBpeOptions &options) {
          return ByteLevelBpeTokenizer::LoadFromTokenizerJson(jsonPath.string(),
                                                              options);
        });
    if (bpe.ok()) {
      const ByteLevelBpeTokenizer *raw = bpe->get();
      idOf = [raw](const std::string &t) { return raw->tokenToId(t); };
      sequenceTemplate = &raw->sequenceTemplate();
      result.tokenizer = std::move(*bpe);
      result.source = "tokenizer.json";
    } else if (hasSpm && absl::IsInvalidArgument(bpe.status())) {
      useSpm = true;
      result.note =
          absl::StrCat("tokenizer.json set aside for tokenizer.model: ",
                       bpe.status().message());
    } else {
      return bpe.status();
    }
  } else if (isRegularFile(vocabPath) && isRegularFile(mergesPath)) {
    // LoadFromFiles reads vocab.json again, and says what is wrong with it.
    absl::StatusOr<std::optional<Struct>> vocab =
        readOptionalJson(dir, "vocab.json");
    if (!vocab.ok())
      return vocab.status();
    if (!*vocab)
      return absl::NotFoundError(
          absl::StrCat("cannot read ", vocabPath.string()));
    // GPT2Tokenizer's defaults, where the vocabulary has the token.
    if (names->bos.empty() && names->eos.empty() &&
        (*vocab)->fields().contains("<|endoftext|>"))
      names->bos = names->eos = "<|endoftext|>";
    absl::StatusOr<std::vector<BpeAddedToken>> added = filesAddedTokens(
        dir, *tokenizerConfig, *names, vocabPath.string(), **vocab);
    if (!added.ok())
      return added.status();
    bpeOptions.addedTokens = std::move(*added);
    bpeOptions.addPrefixSpace = addPrefixSpace->value_or(false);
    if (!names->eos.empty())
      bpeOptions.eodToken = names->eos;
    absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> bpe =
        loadBpe([&](const ByteLevelBpeOptions &options) {
          return ByteLevelBpeTokenizer::LoadFromFiles(
              vocabPath.string(), mergesPath.string(), options);
        });
    if (!bpe.ok())
      return bpe.status();
    const ByteLevelBpeTokenizer *raw = bpe->get();
    idOf = [raw](const std::string &t) { return raw->tokenToId(t); };
    result.tokenizer = std::move(*bpe);
    result.source = "vocab.json + merges.txt";
  } else if (hasSpm) {
    useSpm = true;
  } else {
    std::string half;
    if (isRegularFile(vocabPath) != isRegularFile(mergesPath))
      half = isRegularFile(vocabPath)
                 ? " (it has vocab.json but no merges.txt)"
                 : " (it has merges.txt but no vocab.json)";
    return absl::NotFoundError(absl::StrCat(
        "model directory ", dirName,
        " holds no tokenizer: tokenizer.json, vocab.json + merges.txt or "
        "tokenizer.model",
        half));
  }

  if (useSpm) {
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> sp =
        SentencePieceTokenizer::Load(spmPath.string());
    if (!sp.ok())
      return sp.status();
    absl::StatusOr<std::vector<std::string>> pieces =
        sentencePiecePieces(spmPath.string());
    if (!pieces.ok())
      return pieces.status();
    auto table = std::make_shared<absl::flat_hash_map<std::string, int32_t>>();
    for (size_t i = 0; i < pieces->size(); ++i)
      table->emplace((*pieces)[i], static_cast<int32_t>(i));
    idOf = [table](const std::string &t) {
      auto it = table->find(t);
      return it == table->end() ? -1 : it->second;
    };
    // LlamaTokenizer's defaults, where the model has the piece.
    if (names->bos.empty() && idOf("<s>") >= 0)
      names->bos = "<s>";
    if (names->eos.empty() && idOf("</s>") >= 0)
      names->eos = "</s>";
    result.tokenizer = std::move(*sp);
    result.source = "tokenizer.model";
    sentencePiece = true;
  }
  const Tokenizer &tokenizer = *result.tokenizer;
  // GPT2Tokenizer's defaults (vocab.json + merges.txt had them above).
  if (!sentencePiece && names->bos.empty() && names->eos.empty() &&
      idOf("<|endoftext|>") >= 0)
    names->bos = names->eos = "<|endoftext|>";

  // What goes around a prompt.
  int32_t templateBos = -1;
  if (sequenceTemplate && sequenceTemplate->present) {
    if (sequenceTemplate->prefix.size() > 1)
      return absl::InvalidArgumentError(absl::StrCat(
          jsonPath.string(), ": post_processor: the template puts ",
          sequenceTemplate->prefix.size(),
          " tokens before a sequence; Braid implements one (BOS) or none"));
    result.addBos = !sequenceTemplate->prefix.empty();
    if (result.addBos)
      templateBos = sequenceTemplate->prefix[0];
    result.promptSuffix = sequenceTemplate->suffix;
  } else {
    result.addBos = addBosConfig->value_or(sentencePiece);
    if (addEosConfig->value_or(false)) {
      int32_t eos = names->eos.empty() ? -1 : idOf(names->eos);
      if (eos < 0 && !configEos.empty())
        eos = configEos[0];
      if (eos < 0)
        return absl::FailedPreconditionError(
            absl::StrCat((dir / "tokenizer_config.json").string(),
                         ": add_eos_token is true but no EOS token resolves"));
      result.promptSuffix.push_back(eos);
    }
  }

  // bosId: the template's, else bos_token's, else the configuration's.
  std::string bosFrom;
  if (templateBos >= 0) {
    result.bosId = templateBos;
    bosFrom = "tokenizer.json's post_processor";
  } else if (!names->bos.empty() && idOf(names->bos) >= 0) {
    result.bosId = idOf(names->bos);
    bosFrom = absl::StrCat("bos_token \"", names->bos, "\"");
  } else if (!configBos.empty()) {
    result.bosId = configBos[0];
    bosFrom = "bos_token_id";
  }
  if (result.addBos && result.bosId < 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "model directory ", dirName,
        ": the tokenizer adds a BOS token but none resolves (",
        names->bos.empty() ? std::string("no bos_token")
                           : absl::StrCat("bos_token \"", names->bos,
                                          "\" is not in the vocabulary"),
        ", no bos_token_id in generation_config.json or config.json)"));
  if (result.bosId >= 0)
    if (absl::Status s = checkId(tokenizer, result.bosId,
                                 absl::StrCat("the BOS id (", bosFrom, ")"));
        !s.ok())
      return s;

  // eosIds: the configuration's, else eos_token's, else the tokenizer's.
  result.eosIds = configEos;
  if (result.eosIds.empty() && !names->eos.empty() && idOf(names->eos) >= 0)
    result.eosIds.push_back(idOf(names->eos));
  if (result.eosIds.empty() && tokenizer.eodId() >= 0)
    result.eosIds.push_back(tokenizer.eodId());
  for (int32_t id : result.eosIds)
    if (absl::Status s = checkId(tokenizer, id, "the EOS id"); !s.ok())
      return s;
  for (int32_t id : result.promptSuffix)
    if (absl::Status s = checkId(tokenizer, id, "the prompt's closing id");
        !s.ok())
      return s;
  result.eosId = result.eosIds.empty() ? -1 : result.eosIds[0];
  return result;
}

absl::StatusOr<std::vector<int32_t>> EncodePrompt(const ModelTokenizer &model,
                                                  absl::string_view text) {
  if (!model.tokenizer)
    return absl::FailedPreconditionError("EncodePrompt: no tokenizer loaded");
  absl::StatusOr<std::vector<int32_t>> ids = model.tokenizer->encode(text);
  if (!ids.ok())
    return ids.status();
  std::vector<int32_t> prompt;
  prompt.reserve(ids->size() + 1 + model.promptSuffix.size());
  if (model.addBos)
    prompt.push_back(model.bosId);
  prompt.insert(prompt.end(), ids->begin(), ids->end());
  prompt.insert(prompt.end(), model.promptSuffix.begin(),
                model.promptSuffix.end());
  return prompt;
}

} // namespace braid::data
