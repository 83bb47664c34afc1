//===- Eval.cpp - braid eval ----------------------------------------------===//
//
// braid eval MODEL --task T[,T...] --data DIR: a model's accuracy on
// benchmarks in their published layouts (runtime/eval/Evaluate.h, which
// builds the prompts and scores the answers as lm-evaluation-harness
// does). The model is opened as braid generate opens it, its inference plan
// compiled with scoring (generate.score): multiple-choice options are
// scored by the log-likelihood of their continuation through the plan's
// score function (exec::Generator::Score, batched by length), generative
// tasks decode greedily, and HumanEval's programs run in the sandbox
// (runtime/eval/Sandbox.h). docs/evaluation.md.
//
//===----------------------------------------------------------------------===//

#include "tools/braid/Eval.h"
#include "tools/braid/InferenceModel.h"

#include "runtime/common/JsonString.h"
#include "runtime/common/OutputFile.h"
#include "runtime/eval/Evaluate.h"
#include "runtime/eval/Sandbox.h"
#ifdef BRAID_HAVE_MPI
#include "runtime/comm/MpiCommunicator.h"
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

using namespace braid;
using namespace braid::tool;

const char kEvalUsage[] =
    "       braid eval MODEL --task mmlu|ceval|boolq|agieval|bbh|gsm8k|"
    "humaneval[,...] --data DIR\n"
    "           [--shots K] [--limit N] [--subtask NAME]... "
    "[--max-new-tokens N] [-o RESULTS.json] [--log-samples FILE.jsonl]\n"
    "           [--tokenizer DIR|bytes] [--device cpu|cuda] "
    "[--precision fp32|bf16|fp16] [--tp N]\n"
    "           [--max-batch B] [--max-seq-len S] [--prefill-chunk P] "
    "[--python PATH] [--timeout SECONDS] [--no-shared-prefixes]\n";

namespace {

struct EvalFlags : ModelFlags {
  std::vector<std::string> tasks, subtasks;
  std::string data, output, logSamples, python = "/usr/bin/python3";
  int64_t shots = -1, limit = -1, maxNewTokens = -1;
  double timeout = 10;
  /// Whether requests that share a context compute it once (Score's
  /// sharePrefixes); --no-shared-prefixes scores each whole.
  bool sharePrefixes = true;
};

llvm::Expected<EvalFlags> parseEvalFlags(int argc, char **argv) {
  EvalFlags f;
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
    if (arg == "--no-shared-prefixes") {
      f.sharePrefixes = false;
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
    if (arg == "--task") {
      for (absl::string_view t : absl::StrSplit(value, ',', absl::SkipEmpty()))
        f.tasks.emplace_back(t);
    } else if (arg == "--data") f.data = value;
    else if (arg == "--subtask") f.subtasks.push_back(value);
    else if (arg == "-o") f.output = value;
    else if (arg == "--log-samples") f.logSamples = value;
    else if (arg == "--python") f.python = value;
    else if (arg == "--timeout") {
      if (llvm::Error e = numberFlag(arg, value, f.timeout))
        return std::move(e);
      if (!(f.timeout > 0) || f.timeout > eval::kMaxSandboxSeconds)
        return error("--timeout '" + value + "': expected seconds > 0, at most " +
                     std::to_string(int64_t(eval::kMaxSandboxSeconds)) +
                     " (a day)");
    } else if (arg == "--shots") {
      if (llvm::Error e = integerFlag(arg, value, 0, f.shots))
        return std::move(e);
    } else if (arg == "--limit") {
      if (llvm::Error e = integerFlag(arg, value, 1, f.limit))
        return std::move(e);
    } else if (arg == "--max-new-tokens") {
      if (llvm::Error e = integerFlag(arg, value, 1, f.maxNewTokens))
        return std::move(e);
    } else {
      return error("unknown flag " + arg);
    }
  }
  if (f.model.empty())
    return error("no MODEL: give a Hugging Face directory or a Braid "
                 "checkpoint");
  if (f.tasks.empty())
    return error("no --task: give one or more of mmlu, ceval, boolq, "
                 "agieval, bbh, gsm8k, humaneval (comma-separated)");
  if (f.data.empty())
    return error("no --data DIR: the benchmark's files in its published "
                 "layout (with several tasks, DIR/<task> each)");
  if (f.device != "cpu" && f.device != "cuda")
    return error("--device " + f.device + " is not one of cpu, cuda");
  f.score = true;
  return f;
}

/// The ids of `context` and of `continuation` after it, as the harness
/// makes them (HFLM._encode_pair): the context's trailing spaces move to
/// the continuation, the whole is encoded and the continuation is what
/// follows the context's own ids; an empty context is the beginning (or
/// end) of sequence id. With a tokenizer that adds a BOS, the context
/// starts with it.
absl::Status encodePair(const data::ModelTokenizer &t, std::string context,
                        std::string continuation, std::vector<int32_t> &ctx,
                        std::vector<int32_t> &cont) {
  size_t spaces = context.size();
  while (spaces > 0 && context[spaces - 1] == ' ')
    --spaces;
  continuation = context.substr(spaces) + continuation;
  context.resize(spaces);
  absl::StatusOr<std::vector<int32_t>> whole =
      t.tokenizer->encode(context + continuation);
  if (!whole.ok())
    return whole.status();
  absl::StatusOr<std::vector<int32_t>> head = t.tokenizer->encode(context);
  if (!head.ok())
    return head.status();
  ctx.clear();
  if (t.addBos)
    ctx.push_back(t.bosId);
  else if (context.empty())
    ctx.push_back(t.eosId >= 0 ? t.eosId : t.tokenizer->eodId());
  ctx.insert(ctx.end(), head->begin(), head->end());
  cont.assign(whole->begin() + std::min(head->size(), whole->size()),
              whole->end());
  if (cont.empty())
    return absl::InvalidArgumentError(
        "a continuation encodes to no token (its text merges into the "
        "context's last token)");
  return absl::OkStatus();
}

/// The JSON array of `ids`.
std::string idList(const std::vector<int32_t> &ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i)
    out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]";
}

} // namespace

int evalCommand(int argc, char **argv) {
  llvm::Expected<EvalFlags> parsed = parseEvalFlags(argc, argv);
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()), 2);
  EvalFlags &f = *parsed;

  // The tasks, read and checked before the model is opened: a bad file
  // fails at once.
  std::vector<eval::TaskSpec> specs;
  for (const std::string &name : f.tasks) {
    absl::StatusOr<eval::Benchmark> benchmark = eval::ParseBenchmark(name);
    if (!benchmark.ok())
      return fail("--task " + name + ": " +
                      std::string(benchmark.status().message()),
                  2);
    eval::TaskSpec spec;
    spec.benchmark = *benchmark;
    spec.dir = f.tasks.size() == 1 ? f.data : f.data + "/" + name;
    spec.numFewshot = f.shots;
    spec.limit = f.limit;
    spec.maxNewTokens = f.maxNewTokens;
    spec.subtasks = f.subtasks;
    if (absl::StatusOr<eval::BenchmarkData> read =
            eval::ReadBenchmark(spec.benchmark, spec.dir);
        !read.ok())
      return fail(std::string(read.status().message()));
    specs.push_back(spec);
  }
  const bool humaneval =
      std::any_of(specs.begin(), specs.end(), [](const eval::TaskSpec &s) {
        return s.benchmark == eval::Benchmark::kHumanEval;
      });
  // Model-written code runs only in a sandbox: none, no HumanEval.
  if (humaneval) {
    if (absl::Status sandbox = eval::CheckSandbox(); !sandbox.ok())
      return fail("humaneval runs the model's programs in a sandbox, and " +
                  std::string(sandbox.message()));
    if (absl::Status python = eval::CheckInterpreter(f.python); !python.ok())
      return fail("--python: " + std::string(python.message()));
  }

  bool braidCheckpoint = false;
  llvm::Expected<spec::ModelSpec> model = modelOf(f.model, braidCheckpoint);
  if (!model)
    return fail(llvm::toString(model.takeError()));
  std::optional<data::ModelTokenizer> tokenizer;
  if (llvm::Error e =
          loadTokenizer(f, braidCheckpoint, /*required=*/true, tokenizer))
    return fail(llvm::toString(std::move(e)));
  const int64_t defaultBatch = 8;
  if (std::optional<int> ranks =
          runOnRanks(f, *model, defaultBatch, tokenizer, argc, argv))
    return *ranks;
  llvm::Expected<Opened> opened =
      openGenerator(f, *model, defaultBatch, tokenizer);
  if (!opened)
    return fail(llvm::toString(opened.takeError()));
  exec::Generator &gen = *opened->generator;
  const bool writer = opened->writer;

  // The outputs are opened now, so that one that cannot be written ends
  // the run before its work, and put in place only when it succeeded: a
  // run that fails on the way leaves the files there were as they were.
  common::OutputStream samples, resultsFile;
  if (writer)
    if (absl::Status s = common::OpenOutputs(
            {{&samples, f.logSamples}, {&resultsFile, f.output}});
        !s.ok())
      return fail(std::string(s.message()));
  const auto began = std::chrono::steady_clock::now();
  // Progress with an ETA, over every task's requests (and programs): the
  // library reports after each call of a callback, and within a call the
  // batches done are added to what it reported last.
  int64_t lastShown = -1, reported = 0, total = 0;
  auto report = [&](int64_t done) {
    if (!writer || total <= 0)
      return;
    const int64_t percent = done * 100 / total;
    if (percent == lastShown && done != total)
      return;
    lastShown = percent;
    const double elapsed = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - began)
                               .count();
    const double eta = done > 0 ? elapsed * double(total - done) / double(done)
                                : 0.0;
    llvm::errs() << llvm::formatv("eval: {0}/{1} ({2}%), {3:F1} s, ETA "
                                  "{4:F1} s\n",
                                  done, total, percent, elapsed, eta);
  };
  auto within = [&](int64_t doneInCall) { report(reported + doneInCall); };
  eval::EvalCallbacks callbacks;
  callbacks.loglikelihood =
      [&](const std::vector<eval::LoglikelihoodRequest> &requests)
      -> absl::StatusOr<std::vector<eval::Loglikelihood>> {
    std::vector<exec::Generator::ScoreRequest> scored(requests.size());
    for (size_t i = 0; i < requests.size(); ++i)
      if (absl::Status s = encodePair(*tokenizer, requests[i].context,
                                      requests[i].continuation,
                                      scored[i].context,
                                      scored[i].continuation);
          !s.ok())
        return absl::InvalidArgumentError(absl::StrCat(
            "request ", i, " (continuation ",
            common::JsonString(common::ValidUtf8(requests[i].continuation)),
            "): ", s.message()));
    absl::StatusOr<std::vector<exec::Generator::ScoreResult>> results =
        gen.Score(scored, [&](int64_t done, int64_t) { within(done); },
                  f.sharePrefixes);
    if (!results.ok())
      return results.status();
    std::vector<eval::Loglikelihood> out(results->size());
    for (size_t i = 0; i < results->size(); ++i) {
      out[i] = {(*results)[i].logprob, (*results)[i].greedy};
      if (samples)
        samples << "{\"context\": "
                << common::JsonString(common::ValidUtf8(requests[i].context))
                << ", \"continuation\": "
                << common::JsonString(common::ValidUtf8(requests[i].continuation))
                << ", \"context_ids\": " << idList(scored[i].context)
                << ", \"continuation_ids\": " << idList(scored[i].continuation)
                << ", \"logprob\": " << llvm::formatv("{0:E9}", out[i].logprob)
                       .str()
                << ", \"greedy\": " << (out[i].greedy ? "true" : "false")
                << "}\n";
    }
    return out;
  };
  callbacks.generate = [&](const std::vector<eval::GenerateRequest> &requests)
      -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> out(requests.size());
    const int64_t batch = gen.maxBatch();
    for (size_t first = 0; first < requests.size(); first += size_t(batch)) {
      const size_t count = std::min(requests.size() - first, size_t(batch));
      std::vector<std::vector<int32_t>> prompts(count);
      int64_t budget = 1;
      for (size_t k = 0; k < count; ++k) {
        const eval::GenerateRequest &r = requests[first + k];
        absl::StatusOr<std::vector<int32_t>> ids =
            data::EncodePrompt(*tokenizer, r.context);
        if (!ids.ok())
          return ids.status();
        // The context's last max_seq_len - budget ids (left truncation, as
        // the harness), so that the budget fits after it.
        const int64_t room =
            std::max<int64_t>(1, gen.maxSeqLen() - r.maxNewTokens);
        if (int64_t(ids->size()) > room)
          ids->erase(ids->begin(), ids->end() - room);
        prompts[k] = std::move(*ids);
        budget = std::max(budget, r.maxNewTokens);
      }
      std::vector<std::vector<int32_t>> made(count);
      // A row stops at its own budget or at one of its stop strings.
      auto onToken = [&](int64_t row, int32_t token) {
        made[size_t(row)].push_back(token);
        const eval::GenerateRequest &r = requests[first + size_t(row)];
        if (int64_t(made[size_t(row)].size()) >= r.maxNewTokens)
          return true;
        absl::StatusOr<std::string> text =
            tokenizer->tokenizer->decode(made[size_t(row)]);
        if (!text.ok())
          return false;
        for (const std::string &stop : r.stop)
          if (text->find(stop) != std::string::npos)
            return true;
        return false;
      };
      exec::SamplingOptions greedy; // temperature 0: the most likely token
      absl::StatusOr<std::vector<exec::Completion>> done = gen.Generate(
          prompts, budget, greedy, tokenizer->eosIds, onToken);
      if (!done.ok())
        return done.status();
      for (size_t k = 0; k < count; ++k) {
        std::vector<int32_t> tokens = (*done)[k].tokens;
        if ((*done)[k].finish == "eos" && !tokens.empty())
          tokens.pop_back();
        absl::StatusOr<std::string> text = tokenizer->tokenizer->decode(tokens);
        if (!text.ok())
          return text.status();
        out[first + k] = *text;
        if (samples)
          samples << "{\"context\": "
                  << common::JsonString(
                         common::ValidUtf8(requests[first + k].context))
                  << ", \"context_ids\": " << idList(prompts[k])
                  << ", \"generation\": "
                  << common::JsonString(common::ValidUtf8(*text))
                  << ", \"generation_ids\": " << idList(tokens)
                  << ", \"finish\": "
                  << common::JsonString((*done)[k].finish) << "}\n";
      }
      within(int64_t(first + count));
    }
    return out;
  };
  eval::SandboxLimits limits;
  limits.wallSeconds = f.timeout;
  limits.cpuSeconds = f.timeout;
  callbacks.runProgram =
      [&](const std::string &program) -> absl::StatusOr<bool> {
    // Every rank of a --tp job runs the same programs; rank 0's count.
    absl::StatusOr<eval::SandboxResult> ran =
        eval::RunPython(program, limits, f.python);
    if (!ran.ok())
      return ran.status();
    return ran->exitCode == 0 && ran->signal == 0 && !ran->timedOut;
  };
  callbacks.progress = [&](int64_t done, int64_t all) {
    reported = done;
    total = all;
    report(done);
  };

  absl::StatusOr<std::vector<eval::TaskResult>> results =
      eval::Evaluate(specs, callbacks);
  if (!results.ok())
    return fail(std::string(results.status().message()));
  if (!writer)
    return 0;
  std::cout << eval::ResultsTable(*results);
  if (resultsFile.is_open())
    resultsFile << eval::ResultsJson(*results, /*withItems=*/true) << "\n";
  if (absl::Status s = common::CommitOutputs({&resultsFile, &samples});
      !s.ok())
    return fail(std::string(s.message()));
  return 0;
}
