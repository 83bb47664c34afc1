//===- Evaluate.cpp - Benchmark accuracy through model callbacks ----------===//

#include "runtime/eval/Evaluate.h"

#include "runtime/common/JsonString.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

namespace braid::eval {
namespace {

/// The subtasks `spec` selects, each cut to its first `limit` items.
absl::StatusOr<std::vector<Subtask>> selectSubtasks(const BenchmarkData &data,
                                                    const TaskSpec &spec) {
  std::vector<Subtask> selected;
  if (spec.subtasks.empty()) {
    selected = data.subtasks;
  } else {
    for (const std::string &name : spec.subtasks) {
      auto it = std::find_if(
          data.subtasks.begin(), data.subtasks.end(),
          [&](const Subtask &subtask) { return subtask.name == name; });
      if (it == data.subtasks.end()) {
        std::vector<std::string> names;
        for (const Subtask &subtask : data.subtasks)
          names.push_back(subtask.name);
        return absl::NotFoundError(absl::StrCat(
            BenchmarkName(data.benchmark), ": no subtask \"", name, "\" in ",
            data.dir, " (it has ", absl::StrJoin(names, ", "), ")"));
      }
      if (std::none_of(selected.begin(), selected.end(),
                       [&](const Subtask &s) { return s.name == name; }))
        selected.push_back(*it);
    }
    std::sort(
        selected.begin(), selected.end(),
        [](const Subtask &a, const Subtask &b) { return a.name < b.name; });
  }
  if (spec.limit >= 0)
    for (Subtask &subtask : selected)
      if (static_cast<int64_t>(subtask.items.size()) > spec.limit)
        subtask.items.resize(static_cast<size_t>(spec.limit));
  return selected;
}

int64_t numFewshotOf(const TaskSpec &spec) {
  return spec.numFewshot >= 0 ? spec.numFewshot
                              : DefaultFewshot(spec.benchmark);
}

/// The requests (and programs) a task makes, for progress.
int64_t workOf(Benchmark benchmark, const std::vector<Subtask> &subtasks) {
  int64_t work = 0;
  for (const Subtask &subtask : subtasks)
    for (const Item &item : subtask.items)
      work += IsMultipleChoice(benchmark)
                  ? static_cast<int64_t>(item.choices.size())
              : benchmark == Benchmark::kHumanEval ? 2
                                                   : 1;
  return work;
}

/// Checks a task before the model is called: the callbacks it needs and
/// its shots.
absl::Status checkTask(const TaskSpec &spec,
                       const std::vector<Subtask> &subtasks,
                       const EvalCallbacks &callbacks) {
  const absl::string_view name = BenchmarkName(spec.benchmark);
  if (IsMultipleChoice(spec.benchmark) && !callbacks.loglikelihood)
    return absl::FailedPreconditionError(
        absl::StrCat(name, " needs log-likelihoods: no callback for them"));
  if (!IsMultipleChoice(spec.benchmark) && !callbacks.generate)
    return absl::FailedPreconditionError(
        absl::StrCat(name, " needs generation: no callback for it"));
  if (spec.benchmark == Benchmark::kHumanEval && !callbacks.runProgram)
    return absl::FailedPreconditionError(
        "humaneval needs a sandbox to run its programs: no callback for it");
  const int64_t k = numFewshotOf(spec);
  for (const Subtask &subtask : subtasks)
    if (static_cast<int64_t>(subtask.shots.size()) < k)
      return absl::FailedPreconditionError(
          absl::StrCat(name, " ", subtask.name, ": ", k, " shots asked for, ",
                       subtask.shotSource, " has ", subtask.shots.size()));
  return absl::OkStatus();
}

GroupResult groupOf(const std::string &name, const std::string &displayName,
                    const std::vector<std::string> &metrics,
                    const std::vector<const GroupResult *> &members) {
  GroupResult group;
  group.name = name;
  group.displayName = displayName;
  std::vector<int64_t> sizes;
  for (const GroupResult *member : members) {
    sizes.push_back(member->count);
    group.count += member->count;
  }
  for (size_t m = 0; m < metrics.size(); ++m) {
    std::vector<MetricValue> values;
    for (const GroupResult *member : members)
      values.push_back(member->metrics[m]);
    group.metrics.push_back(PooledMetric(metrics[m], values, sizes));
  }
  return group;
}

/// The shortest of %.15g, %.16g and %.17g that reads back as `x`; null for
/// a NaN or an infinity (JSON has neither).
std::string jsonNumber(double x) {
  if (!std::isfinite(x))
    return "null";
  for (int precision = 15; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, x);
    if (std::strtod(text.c_str(), nullptr) == x)
      return text;
  }
  return absl::StrFormat("%.17g", x);
}

void appendMetrics(std::string &out, const std::vector<MetricValue> &metrics,
                   absl::string_view indent) {
  out += "{";
  for (size_t m = 0; m < metrics.size(); ++m) {
    out += m ? ",\n" : "\n";
    out.append(indent.data(), indent.size());
    out += "  ";
    common::AppendJsonString(out, metrics[m].name);
    out += absl::StrCat(": {\"value\": ", jsonNumber(metrics[m].value),
                        ", \"stderr\": ", jsonNumber(metrics[m].standardError),
                        "}");
  }
  out += absl::StrCat("\n", indent, "}");
}

void appendGroups(std::string &out, const std::vector<GroupResult> &groups) {
  out += "[";
  for (size_t g = 0; g < groups.size(); ++g) {
    out += g ? ",\n" : "\n";
    out += "        {\"name\": ";
    common::AppendJsonString(out, groups[g].name);
    out += ", \"display_name\": ";
    common::AppendJsonString(out, groups[g].displayName);
    out += absl::StrCat(", \"count\": ", groups[g].count, ",\n");
    out += "         \"metrics\": ";
    appendMetrics(out, groups[g].metrics, "         ");
    out += "}";
  }
  out += groups.empty() ? "]" : "\n      ]";
}

std::string formatValue(double x) {
  return std::isfinite(x) ? absl::StrFormat("%.4f", x) : std::string("N/A");
}

} // namespace

std::vector<std::string> DefaultStop(Benchmark benchmark) {
  switch (benchmark) {
  case Benchmark::kBbh:
    return {"</s>", "Q", "\n\n"};
  case Benchmark::kGsm8k:
    return {"Question:", "</s>", "<|im_end|>"};
  case Benchmark::kHumanEval:
    return {"\nclass", "\ndef", "\n#", "\nif", "\nprint"};
  default:
    return {};
  }
}

int64_t DefaultMaxNewTokens(Benchmark benchmark) {
  return benchmark == Benchmark::kHumanEval ? 1024 : 256;
}

absl::StatusOr<std::string> BuildContext(const Subtask &subtask,
                                         const Item &item, int64_t numFewshot) {
  if (static_cast<int64_t>(subtask.shots.size()) < numFewshot)
    return absl::FailedPreconditionError(
        absl::StrCat(subtask.name, ": ", numFewshot, " shots asked for, ",
                     subtask.shotSource, " has ", subtask.shots.size()));
  std::string context = subtask.description;
  for (int64_t k = 0; k < numFewshot; ++k) {
    const Shot &shot = subtask.shots[static_cast<size_t>(k)];
    absl::StrAppend(&context, shot.query, " ", shot.answer, "\n\n");
  }
  context += item.query;
  return context;
}

std::vector<std::string> MetricNames(Benchmark benchmark) {
  switch (benchmark) {
  case Benchmark::kBbh:
    return {"exact_match"};
  case Benchmark::kGsm8k:
    return {"exact_match_strict", "exact_match_flexible"};
  case Benchmark::kHumanEval:
    return {"pass@1"};
  default:
    return {"acc", "acc_norm"};
  }
}

absl::StatusOr<TaskResult> EvaluateBenchmark(const BenchmarkData &data,
                                             const TaskSpec &spec,
                                             const EvalCallbacks &callbacks,
                                             int64_t progressBase,
                                             int64_t progressTotal) {
  absl::StatusOr<std::vector<Subtask>> selected = selectSubtasks(data, spec);
  if (!selected.ok())
    return selected.status();
  const std::vector<Subtask> &subtasks = *selected;
  if (absl::Status s = checkTask(spec, subtasks, callbacks); !s.ok())
    return s;
  const Benchmark benchmark = data.benchmark;
  const int64_t k = numFewshotOf(spec);
  if (progressTotal < 0)
    progressTotal = workOf(benchmark, subtasks);
  int64_t done = progressBase;
  auto report = [&]() {
    if (callbacks.progress)
      callbacks.progress(done, progressTotal);
  };

  // Where this task starts, before its requests go to the model (whose
  // side may report its batches within the call).
  report();

  TaskResult result;
  result.benchmark = benchmark;
  result.numFewshot = k;
  const std::vector<std::string> metrics = MetricNames(benchmark);

  if (IsMultipleChoice(benchmark)) {
    std::vector<LoglikelihoodRequest> requests;
    for (const Subtask &subtask : subtasks)
      for (const Item &item : subtask.items) {
        absl::StatusOr<std::string> context = BuildContext(subtask, item, k);
        if (!context.ok())
          return context.status();
        for (const std::string &choice : item.choices)
          requests.push_back(
              LoglikelihoodRequest{*context, absl::StrCat(" ", choice)});
      }
    absl::StatusOr<std::vector<Loglikelihood>> answers =
        callbacks.loglikelihood(requests);
    if (!answers.ok())
      return answers.status();
    if (answers->size() != requests.size())
      return absl::InternalError(absl::StrCat(
          BenchmarkName(benchmark), ": ", requests.size(),
          " log-likelihoods asked for, ", answers->size(), " answered"));
    done += static_cast<int64_t>(requests.size());
    report();
    size_t next = 0;
    for (const Subtask &subtask : subtasks)
      for (const Item &item : subtask.items) {
        ItemResult itemResult;
        itemResult.where = item.where;
        for (size_t c = 0; c < item.choices.size(); ++c)
          itemResult.logprobs.push_back((*answers)[next++].logprob);
        ChoiceScore score =
            ScoreChoices(itemResult.logprobs, item.choices, item.gold);
        itemResult.scores = {score.acc ? 1.0 : 0.0, score.accNorm ? 1.0 : 0.0};
        result.items.push_back(std::move(itemResult));
      }
  } else {
    const std::vector<std::string> stop = DefaultStop(benchmark);
    const int64_t maxNewTokens = spec.maxNewTokens > 0
                                     ? spec.maxNewTokens
                                     : DefaultMaxNewTokens(benchmark);
    std::vector<GenerateRequest> requests;
    for (const Subtask &subtask : subtasks)
      for (const Item &item : subtask.items) {
        absl::StatusOr<std::string> context = BuildContext(subtask, item, k);
        if (!context.ok())
          return context.status();
        requests.push_back(GenerateRequest{*context, stop, maxNewTokens});
      }
    absl::StatusOr<std::vector<std::string>> answers =
        callbacks.generate(requests);
    if (!answers.ok())
      return answers.status();
    if (answers->size() != requests.size())
      return absl::InternalError(absl::StrCat(
          BenchmarkName(benchmark), ": ", requests.size(),
          " generations asked for, ", answers->size(), " answered"));
    done += static_cast<int64_t>(requests.size());
    report();
    size_t next = 0;
    for (const Subtask &subtask : subtasks)
      for (const Item &item : subtask.items) {
        ItemResult itemResult;
        itemResult.where = item.where;
        itemResult.generation = TruncateAtStop((*answers)[next++], stop);
        const std::string &generation = itemResult.generation;
        switch (benchmark) {
        case Benchmark::kBbh:
          itemResult.scores = {
              BbhExactMatch(generation, item.target, stop) ? 1.0 : 0.0};
          break;
        case Benchmark::kGsm8k:
          itemResult.scores = {
              Gsm8kMatch(Gsm8kStrictAnswer(generation), item.target) ? 1.0
                                                                     : 0.0,
              Gsm8kMatch(Gsm8kFlexibleAnswer(generation), item.target) ? 1.0
                                                                       : 0.0};
          break;
        default: {
          absl::StatusOr<bool> passed = callbacks.runProgram(HumanEvalProgram(
              item.query, generation, item.target, item.entryPoint));
          if (!passed.ok())
            return absl::Status(passed.status().code(),
                                absl::StrCat(item.where, " (", item.taskId,
                                             "): running the program: ",
                                             passed.status().message()));
          itemResult.scores = {*passed ? 1.0 : 0.0};
          ++done;
          report();
          break;
        }
        }
        result.items.push_back(std::move(itemResult));
      }
  }

  // Subtasks, categories, the whole.
  size_t next = 0;
  for (const Subtask &subtask : subtasks) {
    GroupResult group;
    group.name = subtask.name;
    group.displayName = subtask.displayName;
    group.count = static_cast<int64_t>(subtask.items.size());
    for (size_t m = 0; m < metrics.size(); ++m) {
      std::vector<double> scores;
      for (size_t i = 0; i < subtask.items.size(); ++i)
        scores.push_back(result.items[next + i].scores[m]);
      group.metrics.push_back(MeanWithStderr(metrics[m], scores));
    }
    next += subtask.items.size();
    result.subtasks.push_back(std::move(group));
  }
  std::map<std::string, std::vector<const GroupResult *>> byCategory;
  std::vector<const GroupResult *> all;
  for (size_t s = 0; s < subtasks.size(); ++s) {
    all.push_back(&result.subtasks[s]);
    if (!subtasks[s].category.empty())
      byCategory[subtasks[s].category].push_back(&result.subtasks[s]);
  }
  for (const auto &[category, members] : byCategory)
    result.categories.push_back(groupOf(category, category, metrics, members));
  const std::string name(BenchmarkName(benchmark));
  result.overall = groupOf(name, name, metrics, all);
  return result;
}

absl::StatusOr<std::vector<TaskResult>>
Evaluate(const std::vector<TaskSpec> &tasks, const EvalCallbacks &callbacks) {
  std::vector<BenchmarkData> data;
  std::vector<int64_t> work;
  int64_t total = 0;
  for (const TaskSpec &spec : tasks) {
    absl::StatusOr<BenchmarkData> read =
        ReadBenchmark(spec.benchmark, spec.dir);
    if (!read.ok())
      return read.status();
    absl::StatusOr<std::vector<Subtask>> selected = selectSubtasks(*read, spec);
    if (!selected.ok())
      return selected.status();
    if (absl::Status s = checkTask(spec, *selected, callbacks); !s.ok())
      return s;
    work.push_back(workOf(spec.benchmark, *selected));
    total += work.back();
    data.push_back(std::move(*read));
  }
  std::vector<TaskResult> results;
  int64_t done = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    absl::StatusOr<TaskResult> result =
        EvaluateBenchmark(data[t], tasks[t], callbacks, done, total);
    if (!result.ok())
      return result.status();
    done += work[t];
    results.push_back(std::move(*result));
  }
  return results;
}

std::string ResultsJson(const std::vector<TaskResult> &results,
                        bool withItems) {
  std::string out = "{\n  \"results\": [";
  for (size_t t = 0; t < results.size(); ++t) {
    const TaskResult &task = results[t];
    const std::vector<std::string> metrics = MetricNames(task.benchmark);
    out += t ? ",\n" : "\n";
    out += "    {\"task\": ";
    common::AppendJsonString(out, BenchmarkName(task.benchmark));
    out += absl::StrCat(", \"num_fewshot\": ", task.numFewshot,
                        ", \"count\": ", task.overall.count, ",\n");
    out += "      \"metrics\": ";
    appendMetrics(out, task.overall.metrics, "      ");
    out += ",\n      \"categories\": ";
    appendGroups(out, task.categories);
    out += ",\n      \"subtasks\": ";
    appendGroups(out, task.subtasks);
    if (withItems) {
      out += ",\n      \"items\": [";
      for (size_t i = 0; i < task.items.size(); ++i) {
        const ItemResult &item = task.items[i];
        out += i ? ",\n" : "\n";
        out += "        {\"where\": ";
        common::AppendJsonString(out, item.where);
        out += ", \"scores\": {";
        for (size_t m = 0; m < item.scores.size(); ++m) {
          if (m)
            out += ", ";
          common::AppendJsonString(out, metrics[m]);
          out += absl::StrCat(": ", jsonNumber(item.scores[m]));
        }
        out += "}";
        if (IsMultipleChoice(task.benchmark)) {
          out += ", \"logprobs\": [";
          for (size_t c = 0; c < item.logprobs.size(); ++c)
            out += absl::StrCat(c ? ", " : "", jsonNumber(item.logprobs[c]));
          out += "]";
        } else {
          out += ", \"generation\": ";
          // A model's text may end inside a character (a byte tokenizer's).
          common::AppendJsonString(out, common::ValidUtf8(item.generation));
        }
        out += "}";
      }
      out += task.items.empty() ? "]" : "\n      ]";
    }
    out += "}";
  }
  out += results.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::string ResultsTable(const std::vector<TaskResult> &results) {
  struct Row {
    std::string task, group, count, metric, value, stderrText;
  };
  std::vector<Row> rows;
  auto addGroup = [&](absl::string_view task, const std::string &group,
                      const GroupResult &result) {
    for (const MetricValue &metric : result.metrics) {
      const std::string se = std::isfinite(metric.standardError)
                                 ? formatValue(metric.standardError)
                                 : std::string("N/A");
      rows.push_back(Row{std::string(task), group, absl::StrCat(result.count),
                         metric.name, formatValue(metric.value), se});
    }
  };
  for (const TaskResult &task : results) {
    const absl::string_view name = BenchmarkName(task.benchmark);
    addGroup(name, "(all)", task.overall);
    for (const GroupResult &group : task.categories)
      addGroup(name, absl::StrCat("[", group.displayName, "]"), group);
    if (task.subtasks.size() > 1 ||
        (task.subtasks.size() == 1 && task.subtasks[0].name != name))
      for (const GroupResult &group : task.subtasks)
        addGroup(name, group.displayName, group);
  }
  Row header{"task", "group", "n", "metric", "value", "stderr"};
  size_t width[6] = {};
  auto widen = [&](const Row &row) {
    const std::string *cells[6] = {&row.task,   &row.group, &row.count,
                                   &row.metric, &row.value, &row.stderrText};
    for (int c = 0; c < 6; ++c)
      width[c] = std::max(width[c], cells[c]->size());
  };
  widen(header);
  for (const Row &row : rows)
    widen(row);
  std::string out;
  auto line = [&](const Row &row) {
    const std::string *cells[6] = {&row.task,   &row.group, &row.count,
                                   &row.metric, &row.value, &row.stderrText};
    std::string text;
    for (int c = 0; c < 6; ++c) {
      // Text left-aligned, numbers right-aligned.
      const bool right = c == 2 || c >= 4;
      const std::string pad(width[c] - cells[c]->size(), ' ');
      text += c ? " | " : "";
      text += right ? pad + *cells[c] : *cells[c] + pad;
    }
    while (!text.empty() && text.back() == ' ')
      text.pop_back();
    out += text + "\n";
  };
  line(header);
  std::string rule;
  for (int c = 0; c < 6; ++c)
    rule += (c ? "-|-" : "") + std::string(width[c], '-');
  out += rule + "\n";
  for (const Row &row : rows)
    line(row);
  return out;
}

} // namespace braid::eval
