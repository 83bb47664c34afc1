//===- Generate.cpp - braid generate --------------------------------------===//
//
// MODEL is a Hugging Face directory (config.json, safetensors, a tokenizer)
// or a Braid checkpoint (its manifest records the model). The model's
// inference plan is compiled in-process (compiler/Generate.h) and run by
// exec::Generator; tokens are printed as they are drawn.
//
//===----------------------------------------------------------------------===//

#include "tools/braid/Generate.h"
#include "tools/braid/InferenceModel.h"

#include "compiler/Generate.h"
#include "compiler/Registration.h"
#include "frontends/HFConfig.h"
#include "runtime/ckpt/Checkpoint.h"
#include "runtime/ckpt/ModelIdentity.h"
#include "runtime/common/Json.h"
#include "runtime/common/JsonString.h"
#include "runtime/common/OutputFile.h"
#include "runtime/data/ChatTemplate.h"
#include "runtime/data/ModelTokenizer.h"
#include "runtime/exec/Devices.h"
#ifdef BRAID_HAVE_MPI
#include "runtime/comm/MpiCommunicator.h"
#endif
#include "runtime/exec/Generate.h"

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>

#include <unistd.h>

using namespace braid;
using namespace braid::tool;

const char kChatUsage[] =
    "       braid chat MODEL [--template llama2|alpaca|plain] "
    "[--tokenizer DIR|bytes] [--max-new-tokens N]\n"
    "           [--greedy | --temperature T --top-k K --top-p P] [--seed S] "
    "[--max-seq-len S] [--device cpu|cuda] [--print-ids]\n";

const char kGenerateUsage[] =
    "       braid generate MODEL (--prompt TEXT | --prompts FILE.jsonl | "
    "--prompt-ids 1,2,3)\n"
    "           [--max-new-tokens N] [--greedy | --temperature T --top-k K "
    "--top-p P] [--seed S]\n"
    "           [--stop STRING]... [--tokenizer DIR|bytes] [--print-ids] "
    "[-o OUT.jsonl]\n"
    "           [--device cpu|cuda] [--precision fp32|bf16|fp16] "
    "[--max-batch B] [--max-seq-len S] [--prefill-chunk P]\n"
    "           [--tp N] [--beam-width W [--length-penalty A]] "
    "[--eos-id ID]... [--logits-out FILE] [--stats]\n";

namespace {

/// Where `text` can be cut for printing as it grows: before a last
/// character whose bytes have not all come yet (a lead byte and valid
/// continuations, fewer than it needs), else its end.
size_t printableEnd(const std::string &text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80)
      continue; // a continuation: look further back for its lead
    size_t need = c >= 0xF0 && c <= 0xF4   ? 4
                  : c >= 0xE0 && c <= 0xEF ? 3
                  : c >= 0xC2 && c <= 0xDF ? 2
                                           : 1;
    return need > back ? n - back : n;
  }
  return n;
}

/// Prints what `text` (the decoded completion so far) adds past `shown`
/// bytes, as valid UTF-8, holding back a character still arriving;
/// `final`: all of it.
void printGrowing(const std::string &text, size_t &shown, bool final) {
  size_t end = final ? text.size() : printableEnd(text);
  if (end > shown) {
    std::cout << common::ValidUtf8(text.substr(shown, end - shown)) << std::flush;
    shown = end;
  }
}

/// One prompt: its text (empty for ids given as ids) and its ids.
struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
};

/// The flags of braid generate (those that open the model: ModelFlags).
struct Flags : tool::ModelFlags {
  std::string prompt, promptsFile, output;
  /// --prompt-ids, once per prompt.
  std::vector<std::string> promptIds;
  std::string logitsOut;
  std::string chatTemplate = "plain"; ///< braid chat --template
  std::vector<std::string> stops;
  /// --eos-id: the ids that end a sequence, instead of the tokenizer's.
  std::vector<int32_t> eosIds;
  int64_t maxNewTokens = 64;
  int64_t beamWidth = 1;
  double lengthPenalty = 1.0;
  bool greedy = false, printIds = false, stats = false;
  std::optional<double> temperature, topP;
  std::optional<int64_t> topK;
  uint64_t seed = 0;
};

llvm::Expected<Flags> parseFlags(int argc, char **argv, bool chat = false) {
  Flags f;
  auto error = [](const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("-", 0) != 0) {
      if (!f.model.empty())
        return error("more than one model: " + f.model + " and " + arg);
      f.model = arg;
      continue;
    }
    if (arg == "--greedy") {
      f.greedy = true;
      continue;
    }
    if (arg == "--print-ids") {
      f.printIds = true;
      continue;
    }
    if (arg == "--stats") {
      f.stats = true;
      continue;
    }
    if (i + 1 >= argc)
      return error(arg + " needs a value");
    std::string value = argv[++i];
    bool taken = false;
    if (llvm::Error e = modelFlag(f, arg, value, taken))
      return std::move(e);
    if (taken)
      continue;
    auto integer = [&](int64_t &out, int64_t lo) {
      return integerFlag(arg, value, lo, out);
    };
    auto real = [&](double &out) { return numberFlag(arg, value, out); };
    if (arg == "--prompt" && value.empty())
      return error("--prompt is empty: give the prompt's text");
    else if (arg == "--prompt") f.prompt = value;
    else if (arg == "--prompts") f.promptsFile = value;
    else if (arg == "--prompt-ids") f.promptIds.push_back(value);
    else if (arg == "-o") f.output = value;
    else if (arg == "--logits-out") f.logitsOut = value;
    else if (arg == "--stop" && value.empty())
      return error("--stop is empty: an empty string would stop at once");
    else if (arg == "--stop") f.stops.push_back(value);
    else if (arg == "--template" && chat) f.chatTemplate = value;
    else if (arg == "--max-new-tokens") {
      if (llvm::Error e = integer(f.maxNewTokens, 1)) return std::move(e);
    } else if (arg == "--beam-width") {
      if (llvm::Error e = integer(f.beamWidth, 1)) return std::move(e);
    } else if (arg == "--eos-id") {
      int64_t id;
      if (llvm::Error e = integer(id, 0)) return std::move(e);
      if (id > INT32_MAX)
        return error(arg + " " + value + ": not a token id (at most " +
                     std::to_string(INT32_MAX) + ")");
      f.eosIds.push_back(int32_t(id));
    } else if (arg == "--top-k") {
      int64_t k;
      if (llvm::Error e = integer(k, 0)) return std::move(e);
      f.topK = k;
    } else if (arg == "--seed") {
      int64_t s;
      if (llvm::Error e = integer(s, 0)) return std::move(e);
      f.seed = uint64_t(s);
    } else if (arg == "--temperature") {
      double t;
      if (llvm::Error e = real(t)) return std::move(e);
      f.temperature = t;
    } else if (arg == "--top-p") {
      double p;
      if (llvm::Error e = real(p)) return std::move(e);
      f.topP = p;
    } else if (arg == "--length-penalty") {
      if (llvm::Error e = real(f.lengthPenalty)) return std::move(e);
    } else {
      return error("unknown flag " + arg);
    }
  }
  if (f.model.empty())
    return error("no MODEL: give a Hugging Face directory or a Braid "
                 "checkpoint");
  int given = !f.prompt.empty() + !f.promptsFile.empty() + !f.promptIds.empty();
  if (chat) {
    if (given != 0)
      return error("braid chat reads its turns from the terminal (standard "
                   "input); --prompt, --prompts and --prompt-ids are braid "
                   "generate's");
    if (f.chatTemplate != "llama2" && f.chatTemplate != "alpaca" &&
        f.chatTemplate != "plain")
      return error("--template " + f.chatTemplate +
                   " is not one of llama2, alpaca, plain");
    if (f.beamWidth > 1)
      return error("braid chat samples or takes the most likely token; "
                   "--beam-width is braid generate's");
  } else if (given != 1)
    return error("give exactly one of --prompt TEXT, --prompts FILE.jsonl "
                 "and --prompt-ids 1,2,3 (once per prompt)");
  if (f.greedy && (f.temperature || f.topK || f.topP))
    return error("--greedy takes the most likely token: it does not go with "
                 "--temperature, --top-k or --top-p");
  if (f.topP && !(*f.topP > 0 && *f.topP <= 1))
    return error("--top-p " + std::to_string(*f.topP) +
                 " must be in (0, 1]");
  if (f.temperature && !(*f.temperature > 0))
    return error("--temperature must be > 0 (use --greedy for the most "
                 "likely token)");
  if (f.beamWidth > 1 && (f.temperature || f.topK || f.topP))
    return error("--beam-width searches the most likely continuation: it "
                 "does not go with --temperature, --top-k or --top-p");
  if (f.beamWidth > 1 && f.maxBatch > 0 && f.beamWidth > f.maxBatch)
    return error("--beam-width " + std::to_string(f.beamWidth) +
                 " is above --max-batch " + std::to_string(f.maxBatch) +
                 ": the beams are rows of the batch");
  if (f.lengthPenalty != 1.0 && f.beamWidth == 1)
    return error("--length-penalty scores beam search's hypotheses: give "
                 "--beam-width W");
  if (f.tp > 1 && chat)
    return error("--tp " + std::to_string(f.tp) +
                 ": braid chat runs on one rank (its turns come from one "
                 "terminal)");
  if (f.device != "cpu" && f.device != "cuda")
    return error("--device " + f.device + " is not one of cpu, cuda");
  return f;
}

llvm::Expected<std::vector<int32_t>> parseIds(const std::string &text) {
  std::vector<int32_t> ids;
  for (llvm::StringRef part : llvm::split(text, ',')) {
    int64_t id;
    if (!llvm::to_integer(part.trim(), id) || id < 0 || id > INT32_MAX)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "--prompt-ids " + text + ": '" + part.str() +
              "' is not a token id (non-negative integers, comma-separated)");
    ids.push_back(int32_t(id));
  }
  return ids;
}


/// The sampling options of the flags (sampling when --top-k or --top-p is
/// given without a temperature: Hugging Face's default of 1).
exec::SamplingOptions samplingOf(const Flags &f) {
  exec::SamplingOptions sampling;
  sampling.temperature = f.greedy ? 0.0 : f.temperature.value_or(0.0);
  sampling.topK = f.topK.value_or(0);
  sampling.topP = f.topP.value_or(1.0);
  sampling.seed = f.seed;
  if ((f.topK || f.topP) && !f.temperature)
    sampling.temperature = 1.0;
  return sampling;
}

} // namespace

int generateCommand(int argc, char **argv) {
  llvm::Expected<Flags> parsed = parseFlags(argc, argv);
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()), 2);
  Flags &f = *parsed;

  bool braidCheckpoint = false;
  llvm::Expected<spec::ModelSpec> model = modelOf(f.model, braidCheckpoint);
  if (!model)
    return fail(llvm::toString(model.takeError()));

  std::optional<data::ModelTokenizer> tokenizer;
  if (llvm::Error e = loadTokenizer(f, braidCheckpoint,
                                    /*required=*/f.promptIds.empty(),
                                    tokenizer, "the prompt as --prompt-ids"))
    return fail(llvm::toString(std::move(e)));
  if (!tokenizer && f.promptIds.empty())
    return fail(f.model + " comes without a tokenizer: give --tokenizer DIR "
                          "(or bytes), or the prompt as --prompt-ids");
  if (!tokenizer && !f.stops.empty())
    return fail("--stop needs a tokenizer to match text");
  // Without a tokenizer there is no text to show on the terminal (it
  // printed an empty line): the ids are what it prints. -o keeps its JSONL.
  if (!tokenizer && f.output.empty())
    f.printIds = true;

  // The prompts.
  std::vector<Prompt> prompts;
  auto encode = [&](const std::string &text) -> absl::StatusOr<Prompt> {
    absl::StatusOr<std::vector<int32_t>> ids =
        tokenizer->tokenizer->encode(text);
    if (!ids.ok())
      return ids.status();
    Prompt p{text, {}};
    if (tokenizer->addBos)
      p.ids.push_back(tokenizer->bosId);
    p.ids.insert(p.ids.end(), ids->begin(), ids->end());
    p.ids.insert(p.ids.end(), tokenizer->promptSuffix.begin(),
                 tokenizer->promptSuffix.end());
    return p;
  };
  if (!f.promptIds.empty()) {
    for (const std::string &text : f.promptIds) {
      llvm::Expected<std::vector<int32_t>> ids = parseIds(text);
      if (!ids)
        return fail(llvm::toString(ids.takeError()), 2);
      prompts.push_back({"", *ids});
    }
  } else if (!f.prompt.empty()) {
    absl::StatusOr<Prompt> p = encode(f.prompt);
    if (!p.ok())
      return fail(std::string(p.status().message()));
    prompts.push_back(*p);
  } else {
    if (llvm::sys::fs::is_directory(f.promptsFile))
      return fail("--prompts " + f.promptsFile +
                  " is a directory: give a JSONL file, one {\"prompt\": ...} "
                  "a line");
    std::ifstream in(f.promptsFile);
    if (!in)
      return fail("cannot read " + f.promptsFile);
    std::string line;
    for (int64_t number = 1; std::getline(in, line); ++number) {
      if (llvm::StringRef(line).trim().empty())
        continue;
      google::protobuf::Struct object;
      if (absl::Status s = common::JsonToMessage(line, &object); !s.ok())
        return fail(f.promptsFile + ":" + std::to_string(number) + ": " +
                    std::string(s.message()));
      if (!object.fields().count("prompt") ||
          object.fields().at("prompt").kind_case() !=
              google::protobuf::Value::kStringValue)
        return fail(f.promptsFile + ":" + std::to_string(number) +
                    ": expected a JSON object with a string \"prompt\"");
      absl::StatusOr<Prompt> p =
          encode(object.fields().at("prompt").string_value());
      if (!p.ok())
        return fail(f.promptsFile + ":" + std::to_string(number) + ": " +
                    std::string(p.status().message()));
      prompts.push_back(*p);
    }
    if (prompts.empty())
      return fail(f.promptsFile + " holds no prompt");
  }

  // Each step of a beam search ranks 2 x the width candidates (a beam's
  // next tokens, kept past the ones that end): more than the vocabulary
  // cannot be, and the plan's batch is the width.
  if (f.beamWidth > 1 && model->vocab_size() > 0 &&
      2 * f.beamWidth > model->vocab_size())
    return fail("--beam-width " + std::to_string(f.beamWidth) +
                " ranks " + std::to_string(2 * f.beamWidth) +
                " candidates a step, more than the model's " +
                std::to_string(model->vocab_size()) + " token ids");
  const int64_t defaultBatch = std::max<int64_t>(
      f.beamWidth, std::min<int64_t>(int64_t(prompts.size()), 8));
  if (std::optional<int> ranks =
          runOnRanks(f, *model, defaultBatch, tokenizer, argc, argv))
    return *ranks;
  llvm::Expected<Opened> opened =
      openGenerator(f, *model, defaultBatch, tokenizer);
  if (!opened)
    return fail(llvm::toString(opened.takeError()));
  const GeneratePlan *compiled = &opened->compiled;
  exec::Generator &gen = *opened->generator;
  // Under --tp every rank runs the same calls on the same inputs; rank 0
  // prints.
  const bool writer = opened->writer;
  if (!writer)
    std::cout.setstate(std::ios::badbit);

  exec::SamplingOptions sampling = samplingOf(f);
  std::vector<int32_t> eosIds =
      !f.eosIds.empty() ? f.eosIds
      : tokenizer       ? tokenizer->eosIds
                        : std::vector<int32_t>{};

  // The outputs are opened before the work and put in place when it is
  // done: a run that fails on the way leaves the files there were as they
  // were (common::OutputStream).
  common::OutputStream logits, out;
  if (writer)
    if (absl::Status s = common::OpenOutputs(
            {{&logits, f.logitsOut}, {&out, f.output}});
        !s.ok())
      return fail(std::string(s.message()));
  logits << std::setprecision(9);
  // Streams one prompt's text as it grows when there is one prompt and no
  // -o; the text of the ids so far, printed past what is already out.
  const bool stream = prompts.size() == 1 && f.output.empty() &&
                      tokenizer && !f.printIds;
  // Beam search takes the prompts one at a time, its beams in the rows.
  const int64_t batch = f.beamWidth > 1 ? 1 : gen.maxBatch();
  for (size_t first = 0; first < prompts.size(); first += size_t(batch)) {
    size_t count = std::min(prompts.size() - first, size_t(batch));
    std::vector<std::vector<int32_t>> ids;
    for (size_t k = 0; k < count; ++k)
      ids.push_back(prompts[first + k].ids);
    std::vector<std::vector<int32_t>> made(count);
    std::vector<size_t> shown(count, 0);
    if (stream) {
      std::cout << prompts[first].text << std::flush;
    }
    // The text of a row's tokens so far, without an end-of-sequence token
    // (which ends it, and which a BPE would spell out).
    auto textOf = [&](int64_t row) -> absl::StatusOr<std::string> {
      std::vector<int32_t> visible = made[row];
      if (!visible.empty() && std::find(eosIds.begin(), eosIds.end(),
                                        visible.back()) != eosIds.end())
        visible.pop_back();
      return tokenizer->tokenizer->decode(visible);
    };
    auto onToken = [&](int64_t row, int32_t token) {
      made[row].push_back(token);
      if (!tokenizer)
        return false;
      absl::StatusOr<std::string> text = textOf(row);
      if (!text.ok())
        return false;
      if (stream)
        printGrowing(*text, shown[row], /*final=*/false);
      for (const std::string &stop : f.stops)
        if (text->find(stop) != std::string::npos)
          return true;
      return false;
    };
    const exec::LogitsCallback onLogits = exec::LogitsWriter(logits);
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<exec::Completion>> done;
    if (f.beamWidth > 1) {
      exec::Generator::BeamOptions beam;
      beam.width = f.beamWidth;
      beam.lengthPenalty = f.lengthPenalty;
      absl::StatusOr<exec::Completion> best =
          gen.BeamSearch(ids[0], f.maxNewTokens, beam, eosIds);
      if (!best.ok())
        return fail(std::string(best.status().message()));
      done = std::vector<exec::Completion>{*best};
      if (stream)
        for (int32_t token : best->tokens)
          onToken(0, token);
    } else {
      done = gen.Generate(ids, f.maxNewTokens, sampling, eosIds, onToken,
                          f.logitsOut.empty() ? exec::LogitsCallback()
                                              : onLogits);
    }
    if (!done.ok())
      return fail(std::string(done.status().message()));
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (stream) {
      if (absl::StatusOr<std::string> text = textOf(0); text.ok())
        printGrowing(*text, shown[0], /*final=*/true);
      std::cout << "\n";
    }
    if (f.stats && writer) {
      const exec::Generator::Timings &t = gen.lastTimings();
      // Decode calls make one token per sequence each.
      llvm::errs() << llvm::formatv(
          "stats: {0} sequences; prefill {1} calls in {2:F4} s; decode {3} "
          "calls in {4:F4} s, {5:F2} calls/s; arena {6} bytes\n",
          count, t.prefillCalls, t.prefillSeconds, t.decodeCalls,
          t.decodeSeconds,
          t.decodeSeconds > 0 ? double(t.decodeCalls) / t.decodeSeconds : 0.0,
          compiled->plan.arena_bytes());
    }
    for (size_t k = 0; k < count; ++k) {
      const exec::Completion &c = (*done)[k];
      const Prompt &p = prompts[first + k];
      if (f.printIds) {
        std::string line;
        for (int32_t id : p.ids)
          line += std::to_string(id) + " ";
        for (int32_t id : c.tokens)
          line += std::to_string(id) + " ";
        if (!line.empty())
          line.pop_back();
        (f.output.empty() ? std::cout : out) << line << "\n";
        continue;
      }
      std::string text;
      if (tokenizer) {
        // The completion without its end-of-sequence token.
        std::vector<int32_t> shown = c.tokens;
        if (c.finish == "eos" && !shown.empty())
          shown.pop_back();
        absl::StatusOr<std::string> decoded =
            tokenizer->tokenizer->decode(shown);
        if (!decoded.ok())
          return fail(std::string(decoded.status().message()));
        text = *decoded;
      }
      if (!f.output.empty() || prompts.size() > 1) {
        std::ostream &os = f.output.empty() ? std::cout : out;
        os << "{\"prompt\": " << common::JsonString(common::ValidUtf8(p.text))
           << ", \"completion\": " << common::JsonString(common::ValidUtf8(text))
           << ", \"tokens\": " << c.tokens.size()
           << ", \"finish_reason\": " << common::JsonString(c.finish)
           << ", \"tokens_per_s\": "
           << (seconds > 0 ? double(c.tokens.size()) / seconds : 0.0)
           << "}\n";
      } else if (!stream) {
        std::cout << text << "\n";
      }
      if (c.finish == "context" && writer)
        llvm::errs() << "braid generate: prompt " << first + k
                     << " stopped: the context is full ("
                     << gen.maxSeqLen() << " positions, --max-seq-len)\n";
    }
  }
  if (absl::Status s = common::CommitOutputs({&logits, &out}); !s.ok())
    return fail(std::string(s.message()));
  return 0;
}

namespace {

/// The tokens of one turn of `chatTemplate` around the user's `text`: the
/// template's prompt segment (runtime/data/ChatTemplate.h) of a conversation
/// without a system text, as instruction data is rendered with it. llama2
/// "[INST] text [/INST]" after the beginning-of-sequence id (and, after the
/// first turn, the end id that closed the answer before); alpaca
/// "### Instruction:\ntext\n\n### Response:\n"; plain
/// "User: text\nAssistant:". `first`: the conversation's first turn.
absl::StatusOr<std::vector<int32_t>>
chatTurn(const data::ModelTokenizer &t, const std::string &chatTemplate,
         const std::string &text, bool first) {
  absl::StatusOr<data::ChatTemplate> wrap =
      data::ChatTemplate::Parse(chatTemplate);
  if (!wrap.ok())
    return wrap.status();
  const bool llama2 = wrap->kind() == data::ChatTemplate::Kind::kLlama2;
  std::vector<int32_t> ids;
  if (llama2 && !first && t.eosId >= 0)
    ids.push_back(t.eosId);
  // llama2 starts every turn with the beginning-of-sequence id where the
  // tokenizer has one, the others only a first turn where it adds one.
  data::ChatSpecialIds special;
  special.bos = llama2 || t.addBos ? t.bosId : -1;
  absl::StatusOr<std::vector<int32_t>> prompt = wrap->encodePrompt(
      *t.tokenizer, special, first ? 1 : 2, /*system=*/"", text);
  if (!prompt.ok())
    return prompt.status();
  ids.insert(ids.end(), prompt->begin(), prompt->end());
  return ids;
}

} // namespace

int chatCommand(int argc, char **argv) {
  llvm::Expected<Flags> parsed = parseFlags(argc, argv, /*chat=*/true);
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()), 2);
  Flags &f = *parsed;
  bool braidCheckpoint = false;
  llvm::Expected<spec::ModelSpec> model = modelOf(f.model, braidCheckpoint);
  if (!model)
    return fail(llvm::toString(model.takeError()));
  std::optional<data::ModelTokenizer> tokenizer;
  if (llvm::Error e =
          loadTokenizer(f, braidCheckpoint, /*required=*/true, tokenizer))
    return fail(llvm::toString(std::move(e)));
  llvm::Expected<Opened> opened = openGenerator(f, *model, 1, tokenizer);
  if (!opened)
    return fail(llvm::toString(opened.takeError()));
  exec::Generator &gen = *opened->generator;
  exec::SamplingOptions sampling = samplingOf(f);
  std::vector<int32_t> eosIds =
      !f.eosIds.empty() ? f.eosIds : tokenizer->eosIds;
  const bool interactive = isatty(0);
  const int64_t seqLen = gen.maxSeqLen();
  // The conversation: the positions its cache holds, and the answer's last
  // token, drawn but not yet fed (the next turn starts with it).
  int64_t cached = 0;
  std::vector<int32_t> pending;
  std::string line;
  while (true) {
    if (interactive)
      std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line))
      break;
    if (llvm::StringRef(line).trim().empty())
      continue;
    absl::StatusOr<std::vector<int32_t>> turn =
        chatTurn(*tokenizer, f.chatTemplate, line, cached == 0);
    if (!turn.ok())
      return fail(std::string(turn.status().message()));
    std::vector<int32_t> ids = pending;
    // The llama2 template closes an answer with the end id: one that ended
    // on it has it pending already.
    if (f.chatTemplate == "llama2" && !pending.empty() && !turn->empty() &&
        std::find(eosIds.begin(), eosIds.end(), pending.back()) !=
            eosIds.end() &&
        turn->front() == tokenizer->eosId)
      turn->erase(turn->begin());
    ids.insert(ids.end(), turn->begin(), turn->end());
    if (cached + int64_t(ids.size()) > seqLen - 1) {
      // Full: the turn starts a new conversation.
      std::cout << "[the context is full: " << seqLen
                << " positions (--max-seq-len); a new conversation starts "
                   "with this turn]\n";
      cached = 0;
      pending.clear();
      turn = chatTurn(*tokenizer, f.chatTemplate, line, true);
      if (!turn.ok())
        return fail(std::string(turn.status().message()));
      ids = *turn;
      if (int64_t(ids.size()) > seqLen - 1) {
        std::cout << "[this turn alone has " << ids.size()
                  << " tokens, more than the " << seqLen - 1
                  << " the context holds]\n";
        continue;
      }
    }
    std::vector<int32_t> answer;
    size_t shown = 0;
    auto onToken = [&](int64_t, int32_t token) {
      answer.push_back(token);
      std::vector<int32_t> visible = answer;
      if (std::find(eosIds.begin(), eosIds.end(), token) != eosIds.end())
        visible.pop_back();
      absl::StatusOr<std::string> text = tokenizer->tokenizer->decode(visible);
      if (text.ok() && !f.printIds)
        printGrowing(*text, shown, /*final=*/false);
      return false;
    };
    absl::StatusOr<std::vector<exec::Completion>> done =
        gen.Generate({ids}, f.maxNewTokens, sampling, eosIds, onToken, {},
                     {cached});
    if (!done.ok())
      return fail(std::string(done.status().message()));
    if (!f.printIds) {
      std::vector<int32_t> visible = answer;
      if (!visible.empty() && std::find(eosIds.begin(), eosIds.end(),
                                        visible.back()) != eosIds.end())
        visible.pop_back();
      if (absl::StatusOr<std::string> text =
              tokenizer->tokenizer->decode(visible);
          text.ok())
        printGrowing(*text, shown, /*final=*/true);
    }
    const exec::Completion &c = (*done)[0];
    if (f.printIds) {
      std::string out;
      for (int32_t id : c.tokens)
        out += std::to_string(id) + " ";
      if (!out.empty())
        out.pop_back();
      std::cout << out;
    }
    std::cout << "\n";
    // Everything but the answer's last token is in the cache now.
    cached += int64_t(ids.size()) + int64_t(c.tokens.size()) - 1;
    pending = {c.tokens.back()};
    if (c.finish == "context") {
      std::cout << "[the context is full: " << seqLen
                << " positions (--max-seq-len); the next turn starts a new "
                   "conversation]\n";
      cached = 0;
      pending.clear();
    }
  }
  return 0;
}
