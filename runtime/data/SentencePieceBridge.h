//===- SentencePieceBridge.h - libsentencepiece, isolated --------*- C++ -*-===//
//
// Debian's libsentencepiece carries its own copy of protobuf-lite 3.14 and
// exports its symbols (google::protobuf::...). A process that also links the
// system libprotobuf (3.21; Preprocess's JSON parser, the plan loader) gets
// one of the two copies for both, and aborts at start-up in protobuf's
// version check (or worse, mixes the two ABIs). So libsentencepiece is never
// linked into a Braid binary: SentencePiecePlugin.cpp, built as the module
// libBraidSentencePiece.so that links it, is loaded on first use with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND), which binds the module and
// libsentencepiece to their own protobuf and keeps them out of the global
// symbol scope.
//
// The SentencePiece headers also declare `namespace absl { using
// std::string_view; }`, which collides with Abseil's absl::string_view, so
// this interface uses std types only and errors come back as strings (empty
// on success); Tokenizer.cpp and Preprocess.cpp make absl::Status of them.
//
// Internal to runtime/data.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_SENTENCEPIECEBRIDGE_H
#define BRAID_RUNTIME_DATA_SENTENCEPIECEBRIDGE_H

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace braid::data::spbridge {

/// A SentencePieceProcessor. Fallible calls return "" or the message.
class Processor {
public:
  virtual ~Processor() = default;
  virtual std::string load(const std::string &path) = 0;
  virtual std::string encode(std::string_view text,
                             std::vector<int> *ids) const = 0;
  virtual std::string decode(const std::vector<int> &ids,
                             std::string *text) const = 0;
  virtual int pieceSize() const = 0;
  /// -1 when the model has no end-of-sentence piece.
  virtual int eosId() const = 0;
};

/// What the module offers.
class Library {
public:
  virtual ~Library() = default;
  virtual std::unique_ptr<Processor> newProcessor() const = 0;
  /// SentencePieceTrainer::Train with these flags (spm_train's flag names,
  /// without "--"); "" or the message. `seed`, when not negative, seeds
  /// SentencePiece's random generator first.
  virtual std::string train(const std::map<std::string, std::string> &flags,
                            long long seed) const = 0;
};

/// Loads the module once per process (thread-safe) and returns it, or null
/// with *error set to a message naming every path tried. Where it looks, in
/// order: $BRAID_SENTENCEPIECE_PLUGIN; libBraidSentencePiece.so next to the
/// executable and in ../lib from it; the path the build compiled in
/// (BRAID_SENTENCEPIECE_PLUGIN_PATH).
const Library *GetLibrary(std::string *error);

} // namespace braid::data::spbridge

/// The module's one exported symbol.
extern "C" const braid::data::spbridge::Library *braid_sentencepiece_library();

#endif // BRAID_RUNTIME_DATA_SENTENCEPIECEBRIDGE_H
