//===- Instruction.h - Instruction data with a loss mask --------*- C++ -*-===//
//
// Instruction fine-tuning data, as ModelLink's preprocess_data.py
// --handler-name GeneralInstructionHandler (and its Alpaca, ShareGPT, BELLE
// and MOSS handlers) prepares it: each record of a published dataset is read
// as a conversation (ChatTemplate.h), rendered by a chat template as prompt
// and answer segments, and stored with a loss mask that says which tokens
// are the answers', the only ones whose loss a run counts.
//
// Inputs, by extension (case ignored): .json holds one JSON array of
// objects, one record each; .jsonl one object a line (lines that are blank
// are skipped). Any other file is refused. Errors name the file, the
// 1-based line ("F.jsonl:3: ") or, in a .json array, the 1-based record
// ("F.json: record 3: "), and the field.
//
// Handlers (a field marked ? may be absent or null; every text is a string):
//  - alpaca: {instruction, input?, output, system?, history?}. history is
//    [[user, assistant], ...], the turns before; the last user text is
//    instruction, or instruction "\n\n" input when input is not empty;
//    output answers it.
//  - sharegpt: {conversations: [{from, value}, ...], system?}. from is
//    human or user (the user), gpt or assistant (the assistant), or system
//    (only the first message: the system text, in place of system).
//  - belle: {instruction, input?, output}. An instruction with lines that
//    start with "Human:" or "Assistant:" holds the turns before, as BELLE's
//    multi-turn data writes them ("Human: q1\nAssistant: a1\nHuman: q2\n
//    Assistant:"): a turn's text runs from its marker (one space after the
//    marker dropped) to the next marker's line (the newline before it
//    dropped); the instruction must start with "Human:" (after blank
//    lines, if any) and end with an empty "Assistant:", whose answer is
//    output; a non-empty input is added to the last user text after
//    "\n\n". Without markers, as alpaca.
//  - moss: {meta_instruction?, chat: {turn_1: {Human, MOSS, ...}, ...}}.
//    Turns in the order of their numbers; "<|Human|>: " and "<|MOSS|>: " are
//    taken off the front of the texts and "<eoh>" and "<eom>" (and the
//    whitespace after them) off the end; meta_instruction is the system
//    text; the other keys of a turn (Inner Thoughts, Commands, Tool
//    Responses) are not read.
//  - plain: {prompt, response}: one turn.
// The turns must alternate user, assistant, ..., starting with the user and
// ending with the assistant, and there must be at least one.
//
// Tokens (see ChatTemplate.h): encode(text) is the tokenizer's ids of the
// text with nothing added. bos is the BOS id where the tokenizer starts a
// sequence with one: a model directory's when it adds one (addBos), a
// SentencePiece model's bos piece when it has one, none for the byte
// tokenizer. eos is the end id: a model directory's eosId, a SentencePiece
// model's eos id, 256 for the byte tokenizer; a tokenizer without one is
// refused.
//
// Output, for an output prefix P:
//  - P.bin / P.idx: the token ids, Megatron's indexed dataset
//    (IndexedDataset.h) of one document of one sequence per conversation, in
//    input order; dtype BestDtypeForVocab(vocabulary), as preprocess picks
//    it.
//  - P_loss_mask.bin / P_loss_mask.idx: the same layout with dtype uint8
//    (Megatron's code 1), one document of one sequence per conversation of
//    the same length: 1 for a token of an answer segment (its loss counts:
//    the prediction of that token from the ones before), 0 for the rest.
// Both are written to .tmp files and renamed into place at the end (the
// mask first, the ids last); on any error no output file is left.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_INSTRUCTION_H
#define BRAID_RUNTIME_DATA_INSTRUCTION_H

#include "runtime/data/ChatTemplate.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/data/InstructionDataset.h"
#include "runtime/data/Preprocess.h"
#include "runtime/data/Tokenizer.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace braid::data {

enum class InstructionHandler { kAlpaca, kShareGpt, kBelle, kMoss, kPlain };

/// "alpaca", "sharegpt", "belle", "moss" or "plain"; InvalidArgument naming
/// anything else.
absl::StatusOr<InstructionHandler>
ParseInstructionHandler(absl::string_view name);
/// The handler's name, as ParseInstructionHandler takes it.
absl::string_view InstructionHandlerName(InstructionHandler handler);

/// The conversation of one record, the JSON object `json`, under `handler`.
/// InvalidArgument for malformed JSON, a missing required field, a field of
/// the wrong type, turns that do not alternate or do not end with the
/// assistant, and an empty conversation; each message starts with `where`
/// and ": " and names the field.
absl::StatusOr<Conversation> ParseInstructionRecord(InstructionHandler handler,
                                                    absl::string_view json,
                                                    absl::string_view where);

/// Called with each record's conversation and where the record is ("F:3",
/// "F.json: record 3"); an error stops the reading and is returned as is.
using ConversationFn = std::function<absl::Status(
    const Conversation &conversation, absl::string_view where)>;

/// Reads the records of the .json or .jsonl file `path` in order, adding
/// the bytes read to *bytesRead. Errors: the file cannot be read, another
/// extension, a .json that is not an array, a record that is not an object
/// or that ParseInstructionRecord refuses, a file without records.
absl::Status ForEachInstructionRecord(const std::string &path,
                                      InstructionHandler handler,
                                      uint64_t *bytesRead,
                                      const ConversationFn &onConversation);

/// A tokenizer with the special ids instruction data uses (see above).
struct InstructionTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  ChatSpecialIds ids;
};

/// Braid's byte tokenizer: no bos, eos 256.
InstructionTokenizer ByteInstructionTokenizer();
/// The SentencePiece model at `path`: bos its bos piece's id (-1 where the
/// model has none), eos its eos id (the model is refused without one).
absl::StatusOr<InstructionTokenizer>
LoadSentencePieceInstructionTokenizer(const std::string &path);
/// The tokenizer of the Hugging Face model directory `dir`
/// (LoadModelTokenizer): bos its bosId when it adds one, eos its eosId;
/// FailedPrecondition naming the directory when it has no end id.
absl::StatusOr<InstructionTokenizer>
LoadModelInstructionTokenizer(const std::string &dir);

/// A conversation's tokens and loss mask, as the datasets store them.
struct EncodedConversation {
  std::vector<int64_t> ids;
  /// 1 for the ids of answer segments, else 0; as long as ids.
  std::vector<int64_t> lossMask;
  /// The number of 1s in lossMask.
  uint64_t trained = 0;
};

/// The segments of `conversation` under `chatTemplate`, concatenated.
absl::StatusOr<EncodedConversation>
EncodeConversation(const ChatTemplate &chatTemplate,
                   const InstructionTokenizer &tokenizer,
                   const Conversation &conversation);

struct InstructionOptions {
  std::vector<std::string> inputs;
  /// Writes PREFIX.{bin,idx} and PREFIX_loss_mask.{bin,idx}.
  std::string outputPrefix;
  InstructionHandler handler = InstructionHandler::kAlpaca;
  ChatTemplate::Kind chatTemplate = ChatTemplate::Kind::kAlpaca;
  /// The least time between two progress reports.
  double progressIntervalSeconds = 0.5;
};

/// Preprocess's totals (documents: the conversations, one sequence each),
/// and the turns, the trained tokens and the mask's files.
struct InstructionSummary : PreprocessSummary {
  uint64_t turns = 0;
  /// Tokens whose loss counts (mask 1).
  uint64_t trainedTokens = 0;
  std::string maskBinPath;
  std::string maskIdxPath;
};

/// Tokenizes the inputs' conversations into the two datasets (see above).
/// `progress` (PreprocessProgress's documents are conversations) is called
/// at most every progressIntervalSeconds and once at the end; `summary`, if
/// not null, receives the totals on success. On any error no output file is
/// left.
absl::Status PreprocessInstructions(const InstructionOptions &options,
                                    const InstructionTokenizer &tokenizer,
                                    ProgressFn progress,
                                    InstructionSummary *summary);


} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_INSTRUCTION_H
