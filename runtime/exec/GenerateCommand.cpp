//===- GenerateCommand.cpp - braid-run on an inference plan ---------------===//

#include "runtime/exec/GenerateCommand.h"

#include "runtime/exec/Generate.h"
#include "runtime/common/Json.h"
#include "runtime/common/OutputFile.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <optional>
#include <utility>

namespace braid::exec {

const char kGenerateFlagsUsage[] =
    "[--init-from DIR] [--device cpu|cuda] (--prompt-ids 1,2,3 "
    "[--prompt-ids ...] [--max-new-tokens N] [--greedy | --temperature T "
    "--top-k K --top-p P] [--seed S] [--beam-width W [--length-penalty A]] "
    "[--eos-id ID]... [--logits-out FILE] | --score FILE.jsonl "
    "[--no-shared-prefixes]) [--stats] [--profile]";

namespace {

/// The integer ids of `value` (a JSON list of numbers that are token ids),
/// or an error naming `where` and `field`.
absl::StatusOr<std::vector<int32_t>> idsOf(const google::protobuf::Value &value,
                                           const std::string &where,
                                           const std::string &field) {
  if (value.kind_case() != google::protobuf::Value::kListValue)
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"", field, "\" is ",
                     common::JsonKindName(value), ", not a list of token ids"));
  std::vector<int32_t> ids;
  for (const google::protobuf::Value &v : value.list_value().values()) {
    const double d = v.number_value();
    if (v.kind_case() != google::protobuf::Value::kNumberValue || d < 0 ||
        d > 2147483647.0 || d != double(int64_t(d)))
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": \"", field, "\" holds ",
          v.kind_case() == google::protobuf::Value::kNumberValue
              ? absl::StrCat(d)
              : std::string(common::JsonKindName(v)),
          ", not a token id (an integer >= 0)"));
    ids.push_back(int32_t(d));
  }
  return ids;
}

/// The scoring requests of a JSONL file: one object a line with
/// "context_ids" and "continuation_ids" (braid eval --log-samples writes
/// them; other fields are left alone); blank lines skipped.
absl::StatusOr<std::vector<Generator::ScoreRequest>>
readScoreRequests(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<Generator::ScoreRequest> requests;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    const std::string where = absl::StrCat(path, ":", number);
    absl::StatusOr<google::protobuf::Struct> object =
        common::ParseJsonObject(where, line);
    if (!object.ok())
      return object.status();
    Generator::ScoreRequest r;
    for (auto [field, ids] :
         {std::pair{"context_ids", &r.context},
          std::pair{"continuation_ids", &r.continuation}}) {
      auto at = object->fields().find(field);
      if (at == object->fields().end())
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": no \"", field, "\""));
      absl::StatusOr<std::vector<int32_t>> parsed = idsOf(at->second, where, field);
      if (!parsed.ok())
        return parsed.status();
      *ids = std::move(*parsed);
    }
    if (r.continuation.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"continuation_ids\" is empty"));
    if (r.context.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": \"context_ids\" is empty: ",
                       Generator::kEmptyContextWhy));
    requests.push_back(std::move(r));
  }
  if (requests.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no request (one JSON object a line)"));
  return requests;
}

} // namespace

int RunGenerateCommand(
    const plan::Plan &plan, const std::vector<std::string> &args,
    const std::function<absl::StatusOr<BackendFactory>(const std::string &)>
        &backendFor,
    Communicator *comm, std::ostream &out, std::ostream &err) {
  auto usage = [&](const std::string &message) {
    err << "braid-run: error: " << message << "\nusage: braid-run PLAN "
        << kGenerateFlagsUsage << "\n";
    return 2;
  };
  auto fail = [&](absl::string_view message) {
    err << "braid-run: error: " << message << "\n";
    return 1;
  };
  GeneratorOptions options;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> eosIds;
  int64_t maxNewTokens = 64, beamWidth = 1;
  double lengthPenalty = 1.0;
  SamplingOptions sampling;
  bool greedy = false, stats = false, sampled = false, profile = false;
  bool sharePrefixes = true;
  std::string logitsOut, scoreFile;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--greedy") {
      greedy = true;
      continue;
    }
    if (arg == "--stats") {
      stats = true;
      continue;
    }
    if (arg == "--profile") {
      profile = true;
      continue;
    }
    if (arg == "--no-shared-prefixes") {
      sharePrefixes = false;
      continue;
    }
    if (i + 1 >= args.size())
      return usage(arg + " needs a value");
    const std::string &value = args[++i];
    auto integer = [&](int64_t &v, int64_t lo) {
      return absl::SimpleAtoi(value, &v) && v >= lo;
    };
    auto real = [&](double &v) { return absl::SimpleAtod(value, &v); };
    int64_t n = 0;
    if (arg == "--init-from") {
      options.weights = value;
    } else if (arg == "--device") {
      options.device = value;
    } else if (arg == "--prompt-ids") {
      std::vector<int32_t> ids;
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        int32_t id;
        if (!absl::SimpleAtoi(part, &id) || id < 0)
          return usage(absl::StrCat("--prompt-ids ", value, ": '", part,
                                    "' is not a token id"));
        ids.push_back(id);
      }
      prompts.push_back(std::move(ids));
    } else if (arg == "--max-new-tokens") {
      if (!integer(maxNewTokens, 1))
        return usage("--max-new-tokens " + value + ": expected an integer >= 1");
    } else if (arg == "--beam-width") {
      if (!integer(beamWidth, 1))
        return usage("--beam-width " + value + ": expected an integer >= 1");
    } else if (arg == "--eos-id") {
      if (!integer(n, 0))
        return usage("--eos-id " + value + ": expected a token id");
      eosIds.push_back(int32_t(n));
    } else if (arg == "--seed") {
      if (!integer(n, 0))
        return usage("--seed " + value + ": expected an integer >= 0");
      sampling.seed = uint64_t(n);
    } else if (arg == "--top-k") {
      if (!integer(sampling.topK, 0))
        return usage("--top-k " + value + ": expected an integer >= 0");
      sampled = true;
    } else if (arg == "--temperature") {
      if (!real(sampling.temperature) || !(sampling.temperature > 0))
        return usage("--temperature " + value + ": expected a number > 0");
      sampled = true;
    } else if (arg == "--top-p") {
      if (!real(sampling.topP))
        return usage("--top-p " + value + ": expected a number");
      sampled = true;
    } else if (arg == "--length-penalty") {
      if (!real(lengthPenalty))
        return usage("--length-penalty " + value + ": expected a number");
    } else if (arg == "--logits-out") {
      logitsOut = value;
    } else if (arg == "--score") {
      scoreFile = value;
    } else {
      return usage("unknown flag " + arg + " for an inference plan");
    }
  }
  std::vector<Generator::ScoreRequest> scoreRequests;
  if (!scoreFile.empty()) {
    if (!prompts.empty() || greedy || sampled || beamWidth > 1 ||
        !logitsOut.empty() || !eosIds.empty())
      return usage("--score scores the file's requests: it does not go with "
                   "--prompt-ids, sampling, beams, --eos-id or --logits-out");
    absl::StatusOr<std::vector<Generator::ScoreRequest>> read =
        readScoreRequests(scoreFile);
    if (!read.ok())
      return fail(read.status().message());
    scoreRequests = std::move(*read);
  } else if (!sharePrefixes) {
    return usage("--no-shared-prefixes goes with --score");
  } else if (prompts.empty()) {
    return usage("no prompt: give --prompt-ids 1,2,3 (once per prompt), or "
                 "--score FILE.jsonl");
  }
  if (greedy && sampled)
    return usage("--greedy does not go with --temperature, --top-k or --top-p");
  if (sampled && sampling.temperature == 0)
    sampling.temperature = 1.0;
  if (absl::Status s = Generator::CheckSampling(sampling); !s.ok())
    return usage(std::string(s.message()));
  absl::StatusOr<BackendFactory> backend = backendFor(options.device);
  if (!backend.ok())
    return fail(backend.status().message());
  options.backend = *backend;
  options.log = &err;
  options.comm = comm;
  // Rank 0 speaks for the job.
  const bool writer = !comm || comm->Rank() == 0;
  absl::StatusOr<std::unique_ptr<Generator>> created =
      Generator::Create(plan, options);
  if (!created.ok())
    return fail(created.status().message());
  Generator &gen = **created;
  if (writer)
    for (const std::string &note : gen.backend().KernelNotes())
      err << "kernels: " << note << "\n";
  // --profile: every kernel timed (on the GPU without graphs), the table
  // after the last group.
  if (profile)
    gen.backend().EnableProfile();

  // --score: each request's log-likelihood and greedy flag, a JSON object
  // a line in the file's order.
  if (!scoreRequests.empty()) {
    const auto began = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<Generator::ScoreResult>> scored =
        gen.Score(scoreRequests, {}, sharePrefixes);
    if (!scored.ok())
      return fail(scored.status().message());
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - began)
                               .count();
    if (writer) {
      for (const Generator::ScoreResult &r : *scored)
        out << absl::StrFormat("{\"logprob\": %.9e, \"greedy\": %s}\n",
                               r.logprob, r.greedy ? "true" : "false");
      out.flush();
      if (stats) {
        int64_t tokens = 0;
        for (const Generator::ScoreRequest &r : scoreRequests)
          tokens += int64_t(r.context.size() + r.continuation.size());
        err << absl::StrFormat(
            "stats: scored %d requests (%d tokens) in %.6f s, %.2f "
            "requests/s%s; arena %d bytes\n",
            scoreRequests.size(), tokens, seconds,
            seconds > 0 ? double(scoreRequests.size()) / seconds : 0.0,
            sharePrefixes ? ", shared contexts once" : "",
            plan.arena_bytes());
      }
    }
    if (!profile)
      return 0;
    prompts.clear();
  }

  // Every rank reads its logits (split over tp, they are gathered on
  // each); rank 0 writes them.
  // Opened before the work, put in place after it (common::OutputStream):
  // a run that fails on the way leaves an old file as it was.
  common::OutputStream logits;
  if (!logitsOut.empty() && writer)
    if (absl::Status s = logits.Open(logitsOut); !s.ok())
      return fail(s.message());
  logits << std::setprecision(9);
  const LogitsCallback onLogits = LogitsWriter(logits);
  const size_t batch = beamWidth > 1 ? 1 : size_t(gen.maxBatch());
  for (size_t first = 0; first < prompts.size(); first += batch) {
    std::vector<std::vector<int32_t>> group(
        prompts.begin() + first,
        prompts.begin() + std::min(prompts.size(), first + batch));
    std::vector<Completion> done;
    if (beamWidth > 1) {
      absl::StatusOr<Completion> best = gen.BeamSearch(
          group[0], maxNewTokens,
          Generator::BeamOptions{beamWidth, lengthPenalty, false}, eosIds);
      if (!best.ok())
        return fail(best.status().message());
      done.push_back(*best);
    } else {
      absl::StatusOr<std::vector<Completion>> made = gen.Generate(
          group, maxNewTokens, sampling, eosIds, {},
          logitsOut.empty() ? LogitsCallback() : onLogits);
      if (!made.ok())
        return fail(made.status().message());
      done = std::move(*made);
    }
    for (size_t k = 0; k < group.size() && writer; ++k) {
      std::string line;
      for (int32_t id : group[k])
        absl::StrAppend(&line, id, " ");
      for (int32_t id : done[k].tokens)
        absl::StrAppend(&line, id, " ");
      line.pop_back();
      out << line << "\n";
    }
    if (stats && writer) {
      const Generator::Timings &t = gen.lastTimings();
      err << "stats: " << group.size() << " sequences; prefill "
          << t.prefillCalls << " calls in " << t.prefillSeconds
          << " s; decode " << t.decodeCalls << " calls in " << t.decodeSeconds
          << " s, "
          << (t.decodeSeconds > 0 ? double(t.decodeCalls) / t.decodeSeconds
                                  : 0.0)
          << " calls/s; arena " << plan.arena_bytes() << " bytes\n";
    }
  }
  out.flush();
  if (logits.is_open())
    if (absl::Status s = logits.Commit(); !s.ok())
      return fail(s.message());
  if (profile && writer) {
    const std::vector<Backend::KernelProfile> &kernels =
        gen.backend().KernelProfiles();
    double total = 0;
    std::vector<std::pair<double, int>> order;
    for (int k = 0; k < int(kernels.size()); ++k)
      if (kernels[k].calls > 0) {
        total += kernels[k].seconds;
        order.push_back({kernels[k].seconds, k});
      }
    std::sort(order.rbegin(), order.rend());
    err << absl::StrFormat("profile: %.6f s in kernels (every group)\n", total);
    err << absl::StrFormat("  %-22s %10s %7s %8s %9s %9s\n", "kernel", "s",
                           "share", "calls", "TFLOP/s", "GB/s");
    for (auto [seconds, k] : order) {
      const Backend::KernelProfile &p = kernels[k];
      err << absl::StrFormat(
          "  %-22s %10.6f %6.1f%% %8d %9.2f %9.1f\n",
          plan::Kernel_Name(plan::Kernel(k)), seconds,
          total > 0 ? 100 * seconds / total : 0.0, p.calls,
          seconds > 0 ? p.flops / seconds / 1e12 : 0.0,
          seconds > 0 ? p.bytes / seconds / 1e9 : 0.0);
    }
  }
  return 0;
}

} // namespace braid::exec
