//===- Spec.cpp - Reading job files ---------------------------------------===//

#include "frontends/Spec.h"

#include "frontends/Format.h"
#include "runtime/data/Split.h"

#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>

using namespace braid;

namespace {
/// Keeps the first error of the text-format parser, with its position.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string &message) override {
    if (!hasError) {
      hasError = true;
      errorLine = line;
      errorColumn = column;
      // The parser counts from 0; editors count from 1.
      text = std::to_string(line + 1) + ":" + std::to_string(column + 1) +
             ": " + message;
    }
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber,
                  const std::string &) override {}

  bool hasError = false;
  int errorLine = 0, errorColumn = 0;
  std::string text;
};
/// True when the 0-based (line, column) lies at or past the end of `text`.
bool isAtEnd(llvm::StringRef text, int line, int column) {
  size_t offset = 0;
  for (int i = 0; i < line; ++i) {
    size_t newline = text.find('\n', offset);
    if (newline == llvm::StringRef::npos)
      return true;
    offset = newline + 1;
  }
  size_t at = offset + static_cast<size_t>(column);
  return at >= text.size() || text.substr(at).trim().empty();
}
} // namespace

llvm::Expected<std::string> braid::readFile(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return llvm::createStringError(buffer.getError(), "cannot read %s: %s",
                                   path.str().c_str(),
                                   buffer.getError().message().c_str());
  return (*buffer)->getBuffer().str();
}

llvm::Expected<spec::JobSpec> braid::parseJobText(llvm::StringRef text,
                                                  llvm::StringRef filename) {
  spec::JobSpec job;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  google::protobuf::io::ArrayInputStream input(text.data(),
                                               static_cast<int>(text.size()));
  if (!parser.Parse(&input, &job) || errors.hasError) {
    if (!errors.hasError)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "%s: not a valid job (text-format JobSpec)",
                                     filename.str().c_str());
    // An error past the last character means the file ended too early.
    if (isAtEnd(text, errors.errorLine, errors.errorColumn))
      errors.text += " (the file ends here: is it truncated?)";
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s:%s",
                                   filename.str().c_str(), errors.text.c_str());
  }
  return job;
}

llvm::Expected<spec::JobSpec> braid::loadJobFile(llvm::StringRef path) {
  llvm::Expected<std::string> text = readFile(path);
  if (!text)
    return text.takeError();
  llvm::Expected<spec::JobSpec> job = parseJobText(*text, path);
  if (!job)
    return job.takeError();
  // Paths inside a job (model.hf_config, data.path, data.corpus,
  // data.tokenizer_model) are relative to the job file.
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  auto relative = [&](const std::string &p) {
    if (p.empty() || llvm::sys::path::is_absolute(p))
      return p;
    llvm::SmallString<256> resolved(dir);
    llvm::sys::path::append(resolved, p);
    return std::string(resolved);
  };
  if (job->has_model() && job->model().has_hf_config())
    job->mutable_model()->set_hf_config(relative(job->model().hf_config()));
  spec::DataSpec *data = job->mutable_data();
  if (data->has_path())
    data->set_path(relative(data->path()));
  for (std::string &file : *data->mutable_corpus())
    file = relative(file);
  for (spec::DataSource &source : *data->mutable_blend()) {
    if (!source.has_path() || source.path().empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          path.str() + ": data.blend has a source without a path (weight " +
              formatNumber(source.weight()) + ")");
    if (!source.has_weight() || !(source.weight() > 0) ||
        !std::isfinite(source.weight()))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          path.str() + ": data.blend source \"" + source.path() +
              "\" needs a weight > 0 (finite), got " +
              (source.has_weight() ? formatNumber(source.weight())
                                   : std::string("none")));
    source.set_path(relative(source.path()));
  }
  // The split as braid-run reads it (Megatron's rules, data/Split.h).
  if (data->has_split())
    if (absl::StatusOr<std::array<double, 3>> split =
            data::ParseSplit(data->split());
        !split.ok())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          path.str() + ": data.split: " + std::string(split.status().message()));
  if (data->blend_size() && data->has_path())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        path.str() + ": data.path and data.blend both name the data; give one "
               "(a blend of one source is a path)");
  if (data->instruction() && data->corpus_size())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        path.str() + ": data.instruction reads conversations with a loss mask, "
                     "which braid-data preprocess --handler makes; data.corpus "
                     "makes pretraining documents: give the instruction "
                     "dataset as data.path");
  if (data->pack() && !data->instruction())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        path.str() + ": data.pack packs the conversations of instruction "
                     "data; set data.instruction too (pretraining samples are "
                     "windows over the token stream, with nothing to pack)");
  if (data->has_tokenizer_model())
    data->set_tokenizer_model(relative(data->tokenizer_model()));
  return job;
}

llvm::Error braid::checkModelSource(const spec::JobSpec &job,
                                    llvm::StringRef jobPath,
                                    llvm::StringRef hint) {
  const spec::ModelSpec &m = job.model();
  if (m.has_preset() || m.has_hf_config() ||
      (m.has_family() && m.family() != spec::FAMILY_UNSPECIFIED))
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      jobPath + ": the model names no preset, hf_config or family; set "
                "model.preset, model.hf_config or model.family (with the "
                "inline sizes)" +
          hint);
}
