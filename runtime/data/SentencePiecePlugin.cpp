//===- SentencePiecePlugin.cpp - The libBraidSentencePiece.so module ------===//
//
// The only code that includes the SentencePiece headers or links
// libsentencepiece; built as a module and loaded by SentencePieceBridge.cpp
// (see SentencePieceBridge.h for why). Must not include any Abseil header.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/SentencePieceBridge.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

namespace braid::data::spbridge {
namespace {

std::string message(const sentencepiece::util::Status &status) {
  return status.ok() ? std::string() : status.ToString();
}

class ProcessorImpl final : public Processor {
public:
  std::string load(const std::string &path) override {
    return message(processor_.Load(path));
  }
  std::string encode(std::string_view text,
                     std::vector<int> *ids) const override {
    return message(processor_.Encode(text, ids));
  }
  std::string decode(const std::vector<int> &ids,
                     std::string *text) const override {
    return message(processor_.Decode(ids, text));
  }
  int pieceSize() const override { return processor_.GetPieceSize(); }
  int eosId() const override { return processor_.eos_id(); }

private:
  sentencepiece::SentencePieceProcessor processor_;
};

class LibraryImpl final : public Library {
public:
  std::unique_ptr<Processor> newProcessor() const override {
    return std::make_unique<ProcessorImpl>();
  }
  std::string train(const std::map<std::string, std::string> &flags,
                    long long seed) const override {
    if (seed >= 0)
      sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(seed));
    std::unordered_map<std::string, std::string> kwargs(flags.begin(),
                                                        flags.end());
    return message(sentencepiece::SentencePieceTrainer::Train(kwargs));
  }
};

} // namespace
} // namespace braid::data::spbridge

extern "C" __attribute__((visibility("default"))) const
    braid::data::spbridge::Library *
    braid_sentencepiece_library() {
  static const braid::data::spbridge::LibraryImpl library;
  return &library;
}
