//===- Benchmarks.cpp - Benchmarks in their published layouts -------------===//
//
// JSON records are parsed with Protobuf's JSON parser into a
// google.protobuf.Struct, as runtime/data reads JSONL (Instruction.cpp);
// CSV with Csv.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/eval/Benchmarks.h"

#include "runtime/common/Json.h"
#include "runtime/eval/Csv.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <system_error>

namespace braid::eval {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

namespace fs = std::filesystem;

/// MMLU's subjects and the harness's grouping of them
/// (mmlu/_generate_configs.py).
const std::map<std::string, std::string> &mmluCategories() {
  static const auto *categories = new std::map<std::string, std::string>{
      {"abstract_algebra", "stem"},
      {"anatomy", "stem"},
      {"astronomy", "stem"},
      {"business_ethics", "other"},
      {"clinical_knowledge", "other"},
      {"college_biology", "stem"},
      {"college_chemistry", "stem"},
      {"college_computer_science", "stem"},
      {"college_mathematics", "stem"},
      {"college_medicine", "other"},
      {"college_physics", "stem"},
      {"computer_security", "stem"},
      {"conceptual_physics", "stem"},
      {"econometrics", "social_sciences"},
      {"electrical_engineering", "stem"},
      {"elementary_mathematics", "stem"},
      {"formal_logic", "humanities"},
      {"global_facts", "other"},
      {"high_school_biology", "stem"},
      {"high_school_chemistry", "stem"},
      {"high_school_computer_science", "stem"},
      {"high_school_european_history", "humanities"},
      {"high_school_geography", "social_sciences"},
      {"high_school_government_and_politics", "social_sciences"},
      {"high_school_macroeconomics", "social_sciences"},
      {"high_school_mathematics", "stem"},
      {"high_school_microeconomics", "social_sciences"},
      {"high_school_physics", "stem"},
      {"high_school_psychology", "social_sciences"},
      {"high_school_statistics", "stem"},
      {"high_school_us_history", "humanities"},
      {"high_school_world_history", "humanities"},
      {"human_aging", "other"},
      {"human_sexuality", "social_sciences"},
      {"international_law", "humanities"},
      {"jurisprudence", "humanities"},
      {"logical_fallacies", "humanities"},
      {"machine_learning", "stem"},
      {"management", "other"},
      {"marketing", "other"},
      {"medical_genetics", "other"},
      {"miscellaneous", "other"},
      {"moral_disputes", "humanities"},
      {"moral_scenarios", "humanities"},
      {"nutrition", "other"},
      {"philosophy", "humanities"},
      {"prehistory", "humanities"},
      {"professional_accounting", "other"},
      {"professional_law", "humanities"},
      {"professional_medicine", "other"},
      {"professional_psychology", "social_sciences"},
      {"public_relations", "social_sciences"},
      {"security_studies", "social_sciences"},
      {"sociology", "social_sciences"},
      {"us_foreign_policy", "social_sciences"},
      {"virology", "other"},
      {"world_religions", "humanities"},
  };
  return *categories;
}

struct CevalSubject {
  /// The Chinese name the harness's description uses
  /// (ceval/_generate_configs.py).
  const char *chinese;
  /// C-Eval's subject_mapping.json (clinical_medicine, which that file
  /// leaves without one, is in Other as the C-Eval paper lists it).
  const char *category;
};

const std::map<std::string, CevalSubject> &cevalSubjects() {
  static const auto *subjects = new std::map<std::string, CevalSubject>{
      {"computer_network", {"计算机网络", "STEM"}},
      {"operating_system", {"操作系统", "STEM"}},
      {"computer_architecture", {"计算机组成", "STEM"}},
      {"college_programming", {"大学编程", "STEM"}},
      {"college_physics", {"大学物理", "STEM"}},
      {"college_chemistry", {"大学化学", "STEM"}},
      {"advanced_mathematics", {"高等数学", "STEM"}},
      {"probability_and_statistics", {"概率统计", "STEM"}},
      {"discrete_mathematics", {"离散数学", "STEM"}},
      {"electrical_engineer", {"注册电气工程师", "STEM"}},
      {"metrology_engineer", {"注册计量师", "STEM"}},
      {"high_school_mathematics", {"高中数学", "STEM"}},
      {"high_school_physics", {"高中物理", "STEM"}},
      {"high_school_chemistry", {"高中化学", "STEM"}},
      {"high_school_biology", {"高中生物", "STEM"}},
      {"middle_school_mathematics", {"初中数学", "STEM"}},
      {"middle_school_biology", {"初中生物", "STEM"}},
      {"middle_school_physics", {"初中物理", "STEM"}},
      {"middle_school_chemistry", {"初中化学", "STEM"}},
      {"veterinary_medicine", {"兽医学", "STEM"}},
      {"college_economics", {"大学经济学", "Social Science"}},
      {"business_administration", {"工商管理", "Social Science"}},
      {"marxism", {"马克思主义基本原理", "Social Science"}},
      {"mao_zedong_thought",
       {"毛泽东思想和中国特色社会主义理论体系概论", "Social Science"}},
      {"education_science", {"教育学", "Social Science"}},
      {"teacher_qualification", {"教师资格", "Social Science"}},
      {"high_school_politics", {"高中政治", "Social Science"}},
      {"high_school_geography", {"高中地理", "Social Science"}},
      {"middle_school_politics", {"初中政治", "Social Science"}},
      {"middle_school_geography", {"初中地理", "Social Science"}},
      {"modern_chinese_history", {"近代史纲要", "Humanities"}},
      {"ideological_and_moral_cultivation",
       {"思想道德修养与法律基础", "Humanities"}},
      {"logic", {"逻辑学", "Humanities"}},
      {"law", {"法学", "Humanities"}},
      {"chinese_language_and_literature", {"中国语言文学", "Humanities"}},
      {"art_studies", {"艺术学", "Humanities"}},
      {"professional_tour_guide", {"导游资格", "Humanities"}},
      {"legal_professional", {"法律职业资格", "Humanities"}},
      {"high_school_chinese", {"高中语文", "Humanities"}},
      {"high_school_history", {"高中历史", "Humanities"}},
      {"middle_school_history", {"初中历史", "Humanities"}},
      {"civil_servant", {"公务员", "Other"}},
      {"sports_science", {"体育学", "Other"}},
      {"plant_protection", {"植物保护", "Other"}},
      {"basic_medicine", {"基础医学", "Other"}},
      {"clinical_medicine", {"临床医学", "Other"}},
      {"urban_and_rural_planner", {"注册城乡规划师", "Other"}},
      {"accountant", {"注册会计师", "Other"}},
      {"fire_engineer", {"注册消防工程师", "Other"}},
      {"environmental_impact_assessment_engineer",
       {"环境影响评价工程师", "Other"}},
      {"tax_accountant", {"税务师", "Other"}},
      {"physician", {"医师资格", "Other"}},
  };
  return *subjects;
}

/// AGIEval's English multiple-choice tasks (english_qa_datasets of its
/// dataset_loader.py), the harness's agieval_en group less math (a cloze
/// task).
const std::vector<std::string> &agievalEnglishTasks() {
  static const auto *tasks = new std::vector<std::string>{
      "aqua-rat", "gaokao-english", "logiqa-en", "lsat-ar",
      "lsat-lr",  "lsat-rc",        "sat-en",    "sat-en-without-passage",
      "sat-math"};
  return *tasks;
}

std::string displayName(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"_", " "}});
}

bool isFile(const std::string &path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

/// The names in `dir` that end with `suffix`, sorted; NotFound naming `dir`
/// and `layout` when it is not a directory.
absl::StatusOr<std::vector<std::string>>
filesEndingWith(const std::string &dir, absl::string_view suffix,
                absl::string_view layout) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(
        absl::StrCat(dir, ": not a directory (", layout, ")"));
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (absl::EndsWith(name, suffix) && name.size() > suffix.size() &&
        it->is_regular_file(ec))
      names.push_back(std::move(name));
  }
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot list ", dir, ": ", ec.message()));
  std::sort(names.begin(), names.end());
  return names;
}

/// Reads the fields of one JSON record and words its errors.
class Fields {
public:
  Fields(const Struct &object, absl::string_view where)
      : object_(object), where_(where) {}

  absl::Status error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", message));
  }

  /// The field, or null when it is absent or JSON null.
  const Value *optional(absl::string_view key) const {
    auto it = object_.fields().find(std::string(key));
    if (it == object_.fields().end() ||
        it->second.kind_case() == Value::kNullValue)
      return nullptr;
    return &it->second;
  }

  absl::StatusOr<const Value *> required(absl::string_view key) const {
    auto it = object_.fields().find(std::string(key));
    if (it == object_.fields().end())
      return error(absl::StrCat("missing field \"", key, "\""));
    if (it->second.kind_case() == Value::kNullValue)
      return error(absl::StrCat("field \"", key, "\" is null"));
    return &it->second;
  }

  absl::StatusOr<std::string> string(absl::string_view key) const {
    absl::StatusOr<const Value *> value = required(key);
    if (!value.ok())
      return value.status();
    return stringOf(**value, key);
  }

  /// "" when the field is absent or null.
  absl::StatusOr<std::string> optionalString(absl::string_view key) const {
    const Value *value = optional(key);
    if (!value)
      return std::string();
    return stringOf(*value, key);
  }

  absl::StatusOr<std::string> stringOf(const Value &value,
                                       absl::string_view path) const {
    if (value.kind_case() != Value::kStringValue)
      return error(absl::StrCat("field \"", path, "\" is ",
                                common::JsonKindName(value), ", not a string"));
    return value.string_value();
  }

  absl::StatusOr<std::vector<std::string>>
  strings(absl::string_view key) const {
    absl::StatusOr<const Value *> value = required(key);
    if (!value.ok())
      return value.status();
    if ((*value)->kind_case() != Value::kListValue)
      return error(absl::StrCat("field \"", key, "\" is ",
                                common::JsonKindName(**value),
                                ", not an array of strings"));
    std::vector<std::string> result;
    const auto &list = (*value)->list_value();
    for (int i = 0; i < list.values_size(); ++i) {
      absl::StatusOr<std::string> s =
          stringOf(list.values(i), absl::StrCat(key, "[", i, "]"));
      if (!s.ok())
        return s.status();
      result.push_back(std::move(*s));
    }
    return result;
  }

private:
  const Struct &object_;
  std::string where_;
};

/// Declares `lhs`, the value `expr` gives, or returns its error.
#define BRAID_EVAL_ASSIGN(lhs, expr)                                           \
  auto lhs##OrError = (expr);                                                  \
  if (!lhs##OrError.ok())                                                      \
    return lhs##OrError.status();                                              \
  auto lhs = std::move(*lhs##OrError)

using RecordFn =
    std::function<absl::Status(const Struct &record, const std::string &where)>;

/// Calls `onRecord` with each object of the JSONL file `path` and where it
/// is ("PATH:LINE"); blank lines are skipped; a file without records is an
/// error.
absl::Status forEachJsonlRecord(const std::string &path,
                                const RecordFn &onRecord) {
  BRAID_EVAL_ASSIGN(text, ReadTextFile(path));
  int64_t lineNumber = 0, records = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++lineNumber;
    absl::string_view body = absl::StripAsciiWhitespace(line);
    if (body.empty())
      continue;
    const std::string where = absl::StrCat(path, ":", lineNumber);
    if (!absl::StartsWith(body, "{"))
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not a JSON object"));
    Struct record;
    if (absl::Status s = common::JsonToMessage(body, &record); !s.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    if (absl::Status s = onRecord(record, where); !s.ok())
      return s;
    ++records;
  }
  if (records == 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no record (one JSON object a line)"));
  return absl::OkStatus();
}

/// The {"examples": [...]} object of a BIG-Bench Hard .json file; each
/// example is passed with "PATH: example N".
absl::Status forEachBbhExample(const std::string &path, const Struct &file,
                               const RecordFn &onExample) {
  Fields fields(file, path);
  BRAID_EVAL_ASSIGN(examples, fields.required("examples"));
  if (examples->kind_case() != Value::kListValue)
    return fields.error(absl::StrCat("field \"examples\" is ",
                                     common::JsonKindName(*examples),
                                     ", not an array"));
  const auto &list = examples->list_value();
  if (list.values_size() == 0)
    return fields.error("field \"examples\" holds no example");
  for (int i = 0; i < list.values_size(); ++i) {
    const std::string where = absl::StrCat(path, ": example ", i + 1);
    if (list.values(i).kind_case() != Value::kStructValue)
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", common::JsonKindName(list.values(i)),
                       ", not an object {input, target}"));
    if (absl::Status s = onExample(list.values(i).struct_value(), where);
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<Struct> readJsonObject(const std::string &path) {
  BRAID_EVAL_ASSIGN(text, ReadTextFile(path));
  return common::ParseJsonObject(path, text);
}

/// The index of the letter `answer` (after stripping) among the first
/// `count` of A, B, C, ...; `field` names it in the message.
absl::StatusOr<int64_t> letterIndex(absl::string_view answer, int64_t count,
                                    absl::string_view where,
                                    absl::string_view field) {
  absl::string_view letter = absl::StripAsciiWhitespace(answer);
  if (letter.size() == 1 && letter[0] >= 'A' && letter[0] < 'A' + count)
    return letter[0] - 'A';
  std::vector<std::string> letters;
  for (int64_t k = 0; k < count; ++k)
    letters.push_back(std::string(1, static_cast<char>('A' + k)));
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": ", field, " is \"", absl::CHexEscape(answer),
                   "\", not one of ", absl::StrJoin(letters, ", ")));
}

const char *const kLetters[] = {"A", "B", "C", "D"};

/// The MMLU rows of `path`: question,A,B,C,D,answer.
absl::Status readMmluCsv(const std::string &path, std::vector<Item> *items) {
  static const char *const kColumns[] = {"question", "A", "B",
                                         "C",        "D", "answer"};
  BRAID_EVAL_ASSIGN(records, ReadCsvFile(path));
  if (records.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": no record"));
  for (const CsvRecord &record : records) {
    const std::string where = absl::StrCat(path, ":", record.line);
    const size_t n = record.fields.size();
    if (n < 6)
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": missing field ", n + 1, " (", kColumns[n],
                       "): the record has ", n, n == 1 ? " field" : " fields",
                       ", MMLU's rows are question,A,B,C,D,answer"));
    if (n > 6)
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", n,
                       " fields, MMLU's rows have 6 "
                       "(question,A,B,C,D,answer)"));
    Item item;
    item.where = where;
    std::vector<std::string> options(record.fields.begin() + 1,
                                     record.fields.begin() + 5);
    item.query = MmluQuery(record.fields[0], options);
    item.choices.assign(std::begin(kLetters), std::end(kLetters));
    BRAID_EVAL_ASSIGN(
        gold, letterIndex(record.fields[5], 4, where, "field 6 (answer)"));
    item.gold = gold;
    items->push_back(std::move(item));
  }
  return absl::OkStatus();
}

/// Shots from items: their query and gold choice.
std::vector<Shot> shotsOf(const std::vector<Item> &items) {
  std::vector<Shot> shots;
  for (const Item &item : items)
    shots.push_back(
        Shot{item.query, item.choices[static_cast<size_t>(item.gold)]});
  return shots;
}

/// C-Eval's query (ceval/_default_ceval_yaml).
std::string cevalQuery(absl::string_view question,
                       const std::vector<std::string> &options) {
  return absl::StrCat(PythonStrip(question), "\nA. ", options[0], "\nB. ",
                      options[1], "\nC. ", options[2], "\nD. ", options[3],
                      "\n答案：");
}

/// The C-Eval rows of `path`, read by the header's column names.
absl::Status readCevalCsv(const std::string &path, std::vector<Item> *items) {
  static const char *const kColumns[] = {"question", "A", "B",
                                         "C",        "D", "answer"};
  BRAID_EVAL_ASSIGN(records, ReadCsvFile(path));
  if (records.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": empty (C-Eval's files start with the header "
                           "id,question,A,B,C,D,answer)"));
  const CsvRecord &header = records[0];
  size_t column[6];
  for (int c = 0; c < 6; ++c) {
    auto it =
        std::find(header.fields.begin(), header.fields.end(), kColumns[c]);
    if (it == header.fields.end())
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", header.line, ": the header has no column \"", kColumns[c],
          "\" (C-Eval's header: id,question,A,B,C,D,answer)"));
    column[c] = static_cast<size_t>(it - header.fields.begin());
  }
  if (records.size() == 1)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no record after the header"));
  for (size_t r = 1; r < records.size(); ++r) {
    const CsvRecord &record = records[r];
    const std::string where = absl::StrCat(path, ":", record.line);
    if (record.fields.size() > header.fields.size())
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", record.fields.size(),
                       " fields, the header has ", header.fields.size()));
    std::string values[6];
    for (int c = 0; c < 6; ++c) {
      if (column[c] >= record.fields.size())
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": missing field \"", kColumns[c], "\" (column ",
            column[c] + 1, " of the header; the record has ",
            record.fields.size(), ")"));
      values[c] = record.fields[column[c]];
    }
    Item item;
    item.where = where;
    item.query =
        cevalQuery(values[0], {values[1], values[2], values[3], values[4]});
    item.choices.assign(std::begin(kLetters), std::end(kLetters));
    BRAID_EVAL_ASSIGN(gold,
                      letterIndex(values[5], 4, where, "field \"answer\""));
    item.gold = gold;
    items->push_back(std::move(item));
  }
  return absl::OkStatus();
}

/// A BoolQ record: {question, passage, answer} or SuperGLUE's label.
absl::StatusOr<Item> boolqItem(const Struct &record, const std::string &where) {
  Fields fields(record, where);
  BRAID_EVAL_ASSIGN(question, fields.string("question"));
  BRAID_EVAL_ASSIGN(passage, fields.string("passage"));
  bool answer = false;
  if (const Value *value = fields.optional("answer")) {
    if (value->kind_case() != Value::kBoolValue)
      return fields.error(absl::StrCat("field \"answer\" is ",
                                       common::JsonKindName(*value),
                                       ", not true or false"));
    answer = value->bool_value();
  } else if (const Value *label = fields.optional("label")) {
    if (label->kind_case() == Value::kBoolValue) {
      answer = label->bool_value();
    } else if (label->kind_case() == Value::kNumberValue &&
               (label->number_value() == 0 || label->number_value() == 1)) {
      answer = label->number_value() == 1;
    } else {
      return fields.error(
          absl::StrCat("field \"label\" is ",
                       label->kind_case() == Value::kNumberValue
                           ? absl::StrCat(label->number_value())
                           : std::string(common::JsonKindName(*label)),
                       ", not true, false, 1 or 0"));
    }
  } else {
    return fields.error("missing field \"answer\" (or SuperGLUE's \"label\")");
  }
  Item item;
  item.where = where;
  // super_glue/boolq/default.yaml.
  item.query = absl::StrCat(passage, "\nQuestion: ", question, "?\nAnswer:");
  item.choices = {"no", "yes"};
  item.gold = answer ? 1 : 0;
  return item;
}

/// An AGIEval record of an English multiple-choice task.
absl::StatusOr<Item> agievalItem(const Struct &record,
                                 const std::string &where) {
  static const char kOptionLetters[] = "ABCDEFG";
  Fields fields(record, where);
  BRAID_EVAL_ASSIGN(passage, fields.optionalString("passage"));
  BRAID_EVAL_ASSIGN(question, fields.string("question"));
  BRAID_EVAL_ASSIGN(options, fields.strings("options"));
  if (options.empty())
    return fields.error("field \"options\" is empty");
  if (options.size() > 7)
    return fields.error(absl::StrCat("field \"options\" has ", options.size(),
                                     " options, AGIEval's have at most 7"));
  BRAID_EVAL_ASSIGN(label, fields.string("label"));
  BRAID_EVAL_ASSIGN(gold,
                    letterIndex(label, static_cast<int64_t>(options.size()),
                                where, "field \"label\""));
  // AGIEval's dataset_loader.py convert_zero_shot, the query of the
  // harness's agieval datasets (hails/agieval-*): a single option reads as
  // five.
  const size_t count = options.size() == 1 ? 5 : options.size();
  Item item;
  item.where = where;
  item.query = absl::StrCat(
      passage, "Q: ", question,
      " Answer Choices: ", absl::StrJoin(options, " "), "\nA: Among A through ",
      absl::string_view(&kOptionLetters[count - 1], 1), ", the answer is");
  item.choices = std::move(options);
  item.gold = gold;
  return item;
}

/// A BIG-Bench Hard example as an item or a shot.
absl::StatusOr<Item> bbhItem(const Struct &example, const std::string &where) {
  Fields fields(example, where);
  BRAID_EVAL_ASSIGN(input, fields.string("input"));
  BRAID_EVAL_ASSIGN(target, fields.string("target"));
  Item item;
  item.where = where;
  // bbh/fewshot/<task>.yaml: doc_to_text.
  item.query = absl::StrCat("Q: ", input, "\nA:");
  item.target = std::move(target);
  return item;
}

/// gsm8k/gsm8k.yaml: doc_to_text; the target is the whole answer.
absl::StatusOr<Item> gsm8kItem(const Struct &record, const std::string &where) {
  Fields fields(record, where);
  BRAID_EVAL_ASSIGN(question, fields.string("question"));
  BRAID_EVAL_ASSIGN(answer, fields.string("answer"));
  Item item;
  item.where = where;
  item.query = absl::StrCat("Question: ", question, "\nAnswer:");
  item.target = std::move(answer);
  return item;
}

absl::StatusOr<Item> humanEvalItem(const Struct &record,
                                   const std::string &where) {
  Fields fields(record, where);
  BRAID_EVAL_ASSIGN(taskId, fields.string("task_id"));
  BRAID_EVAL_ASSIGN(prompt, fields.string("prompt"));
  BRAID_EVAL_ASSIGN(test, fields.string("test"));
  BRAID_EVAL_ASSIGN(entryPoint, fields.string("entry_point"));
  Item item;
  item.where = where;
  item.query = std::move(prompt);
  item.target = std::move(test);
  item.taskId = std::move(taskId);
  item.entryPoint = std::move(entryPoint);
  return item;
}

/// The items of the JSONL file `path`, each made by `make`.
absl::Status readJsonlItems(const std::string &path,
                            const std::function<absl::StatusOr<Item>(
                                const Struct &, const std::string &)> &make,
                            std::vector<Item> *items) {
  return forEachJsonlRecord(
      path, [&](const Struct &record, const std::string &where) {
        absl::StatusOr<Item> item = make(record, where);
        if (!item.ok())
          return item.status();
        items->push_back(std::move(*item));
        return absl::OkStatus();
      });
}

/// A single-subtask benchmark's subtask.
Subtask singleSubtask(Benchmark benchmark) {
  Subtask subtask;
  subtask.name = std::string(BenchmarkName(benchmark));
  subtask.displayName = subtask.name;
  return subtask;
}

size_t utf8Length(unsigned char lead) {
  if (lead < 0x80)
    return 1;
  if ((lead >> 5) == 0x6)
    return 2;
  if ((lead >> 4) == 0xE)
    return 3;
  if ((lead >> 3) == 0x1E)
    return 4;
  return 1;
}

/// The code point at the front of `text` (one byte of invalid UTF-8 reads
/// as a character that is not a space), and its length in *length.
uint32_t frontCodePoint(absl::string_view text, size_t *length) {
  const unsigned char lead = static_cast<unsigned char>(text[0]);
  size_t n = utf8Length(lead);
  if (n > text.size())
    n = 1;
  *length = n;
  if (n == 1)
    return lead;
  uint32_t cp = lead & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char c = static_cast<unsigned char>(text[k]);
    if ((c & 0xC0) != 0x80) {
      *length = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  return cp;
}

/// Python's str.isspace().
bool isPythonSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) ||
         cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

} // namespace

absl::StatusOr<Benchmark> ParseBenchmark(absl::string_view name) {
  for (Benchmark b : {Benchmark::kMmlu, Benchmark::kCeval, Benchmark::kBoolq,
                      Benchmark::kAgieval, Benchmark::kBbh, Benchmark::kGsm8k,
                      Benchmark::kHumanEval})
    if (name == BenchmarkName(b))
      return b;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown benchmark \"", name,
      "\" (mmlu, ceval, boolq, agieval, bbh, gsm8k or humaneval)"));
}

absl::string_view BenchmarkName(Benchmark benchmark) {
  switch (benchmark) {
  case Benchmark::kMmlu:
    return "mmlu";
  case Benchmark::kCeval:
    return "ceval";
  case Benchmark::kBoolq:
    return "boolq";
  case Benchmark::kAgieval:
    return "agieval";
  case Benchmark::kBbh:
    return "bbh";
  case Benchmark::kGsm8k:
    return "gsm8k";
  case Benchmark::kHumanEval:
    return "humaneval";
  }
  return "unknown";
}

bool IsMultipleChoice(Benchmark benchmark) {
  switch (benchmark) {
  case Benchmark::kMmlu:
  case Benchmark::kCeval:
  case Benchmark::kBoolq:
  case Benchmark::kAgieval:
    return true;
  case Benchmark::kBbh:
  case Benchmark::kGsm8k:
  case Benchmark::kHumanEval:
    return false;
  }
  return false;
}

int64_t DefaultFewshot(Benchmark benchmark) {
  switch (benchmark) {
  case Benchmark::kMmlu:
  case Benchmark::kCeval:
  case Benchmark::kGsm8k:
    return 5;
  case Benchmark::kBbh:
    return 3;
  case Benchmark::kBoolq:
  case Benchmark::kAgieval:
  case Benchmark::kHumanEval:
    return 0;
  }
  return 0;
}

absl::string_view PythonStrip(absl::string_view text) {
  while (!text.empty()) {
    size_t length = 0;
    if (!isPythonSpace(frontCodePoint(text, &length)))
      break;
    text.remove_prefix(length);
  }
  while (!text.empty()) {
    // The start of the last character.
    size_t start = text.size() - 1;
    while (start > 0 && text.size() - start < 4 &&
           (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
      --start;
    size_t length = 0;
    const uint32_t cp = frontCodePoint(text.substr(start), &length);
    if (start + length != text.size() || !isPythonSpace(cp))
      break;
    text.remove_suffix(length);
  }
  return text;
}

std::string MmluQuery(absl::string_view question,
                      const std::vector<std::string> &options) {
  return absl::StrCat(PythonStrip(question), "\nA. ", options[0], "\nB. ",
                      options[1], "\nC. ", options[2], "\nD. ", options[3],
                      "\nAnswer:");
}

std::string MmluDescription(absl::string_view subject) {
  return absl::StrCat(
      "The following are multiple choice questions (with answers) about ",
      displayName(subject), ".\n\n");
}

absl::StatusOr<BenchmarkData> ReadMmlu(const std::string &dir) {
  BenchmarkData data{Benchmark::kMmlu, dir, {}};
  BRAID_EVAL_ASSIGN(
      names, filesEndingWith(dir + "/test", "_test.csv",
                             "MMLU's layout: DIR/test/<subject>_test.csv and "
                             "DIR/dev/<subject>_dev.csv"));
  if (names.empty())
    return absl::NotFoundError(
        absl::StrCat(dir, "/test: no <subject>_test.csv file"));
  for (const std::string &name : names) {
    Subtask subtask;
    subtask.name = name.substr(0, name.size() - 9);
    subtask.displayName = displayName(subtask.name);
    auto category = mmluCategories().find(subtask.name);
    if (category != mmluCategories().end())
      subtask.category = category->second;
    subtask.description = MmluDescription(subtask.name);
    if (absl::Status s =
            readMmluCsv(absl::StrCat(dir, "/test/", name), &subtask.items);
        !s.ok())
      return s;
    subtask.shotSource = absl::StrCat(dir, "/dev/", subtask.name, "_dev.csv");
    if (isFile(subtask.shotSource)) {
      std::vector<Item> dev;
      if (absl::Status s = readMmluCsv(subtask.shotSource, &dev); !s.ok())
        return s;
      subtask.shots = shotsOf(dev);
    }
    data.subtasks.push_back(std::move(subtask));
  }
  return data;
}

absl::StatusOr<BenchmarkData> ReadCeval(const std::string &dir) {
  BenchmarkData data{Benchmark::kCeval, dir, {}};
  BRAID_EVAL_ASSIGN(
      names, filesEndingWith(dir + "/val", "_val.csv",
                             "C-Eval's layout: DIR/val/<subject>_val.csv "
                             "and DIR/dev/<subject>_dev.csv"));
  if (names.empty())
    return absl::NotFoundError(
        absl::StrCat(dir, "/val: no <subject>_val.csv file"));
  for (const std::string &name : names) {
    Subtask subtask;
    subtask.name = name.substr(0, name.size() - 8);
    subtask.displayName = displayName(subtask.name);
    auto known = cevalSubjects().find(subtask.name);
    // ceval/_generate_configs.py: the description names the subject in
    // Chinese; a subject the harness does not list is named in English.
    const std::string subject = known != cevalSubjects().end()
                                    ? std::string(known->second.chinese)
                                    : subtask.displayName;
    if (known != cevalSubjects().end())
      subtask.category = known->second.category;
    subtask.description = absl::StrCat(
        "以下是中国关于", subject, "的单项选择题，请选出其中的正确答案。\n\n");
    if (absl::Status s =
            readCevalCsv(absl::StrCat(dir, "/val/", name), &subtask.items);
        !s.ok())
      return s;
    subtask.shotSource = absl::StrCat(dir, "/dev/", subtask.name, "_dev.csv");
    if (isFile(subtask.shotSource)) {
      std::vector<Item> dev;
      if (absl::Status s = readCevalCsv(subtask.shotSource, &dev); !s.ok())
        return s;
      subtask.shots = shotsOf(dev);
    }
    data.subtasks.push_back(std::move(subtask));
  }
  return data;
}

absl::StatusOr<BenchmarkData> ReadBoolq(const std::string &dir) {
  BenchmarkData data{Benchmark::kBoolq, dir, {}};
  Subtask subtask = singleSubtask(Benchmark::kBoolq);
  std::string eval = dir + "/dev.jsonl";
  if (!isFile(eval) && isFile(dir + "/val.jsonl"))
    eval = dir + "/val.jsonl";
  if (!isFile(eval))
    return absl::NotFoundError(absl::StrCat("BoolQ: neither ", dir,
                                            "/dev.jsonl nor SuperGLUE's ", dir,
                                            "/val.jsonl is a file"));
  if (absl::Status s = readJsonlItems(eval, boolqItem, &subtask.items); !s.ok())
    return s;
  subtask.shotSource = dir + "/train.jsonl";
  if (isFile(subtask.shotSource)) {
    std::vector<Item> train;
    if (absl::Status s = readJsonlItems(subtask.shotSource, boolqItem, &train);
        !s.ok())
      return s;
    subtask.shots = shotsOf(train);
  }
  data.subtasks.push_back(std::move(subtask));
  return data;
}

absl::StatusOr<BenchmarkData> ReadAgieval(const std::string &dir) {
  BenchmarkData data{Benchmark::kAgieval, dir, {}};
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat(
        dir, ": not a directory (AGIEval's layout: DIR/<task>.jsonl)"));
  for (const std::string &task : agievalEnglishTasks()) {
    const std::string path = absl::StrCat(dir, "/", task, ".jsonl");
    if (!isFile(path))
      continue;
    Subtask subtask;
    subtask.name = task;
    subtask.displayName = task;
    subtask.shotSource = path + " (AGIEval is read zero-shot)";
    if (absl::Status s = readJsonlItems(path, agievalItem, &subtask.items);
        !s.ok())
      return s;
    data.subtasks.push_back(std::move(subtask));
  }
  if (data.subtasks.empty())
    return absl::NotFoundError(absl::StrCat(
        dir, ": none of AGIEval's English multiple-choice tasks (",
        absl::StrJoin(agievalEnglishTasks(), ".jsonl, "), ".jsonl)"));
  return data;
}

absl::Status ParseBbhCotPrompt(absl::string_view text, absl::string_view path,
                               std::string *description,
                               std::vector<Shot> *shots) {
  static constexpr absl::string_view kStep = "Let's think step by step.";
  static constexpr absl::string_view kAnswerIs = "answer is ";
  if (size_t rule = text.rfind("\n-----\n"); rule != absl::string_view::npos)
    text.remove_prefix(rule + 7);
  std::vector<absl::string_view> blocks = absl::StrSplit(text, "\n\n");
  *description = std::string(blocks[0]);
  shots->clear();
  for (size_t b = 1; b < blocks.size(); ++b) {
    absl::string_view block = blocks[b];
    if (absl::StripAsciiWhitespace(block).empty())
      continue;
    // The answer: after the first "answer is ", up to the line's last
    // character (harness: "(?<=answer is )(.*)(?=.)").
    size_t at = block.find(kAnswerIs);
    size_t step = block.find(kStep);
    if (at == absl::string_view::npos || step == absl::string_view::npos)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": block ", b + 1, " has no \"",
                       at == absl::string_view::npos ? kAnswerIs : kStep,
                       "\" (a chain-of-thought shot: \"Q: ...\\nA: ", kStep,
                       " ... So the answer is X.\")"));
    absl::string_view rest = block.substr(at + kAnswerIs.size());
    rest = rest.substr(0, rest.find('\n'));
    Shot shot;
    shot.answer = rest.empty() ? std::string()
                               : std::string(rest.substr(0, rest.size() - 1));
    // The example before the reasoning, "Q: ...\nA: ", less the space the
    // shot's " " delimiter puts back.
    absl::string_view query = block.substr(0, step);
    absl::ConsumeSuffix(&query, " ");
    shot.query = std::string(query);
    shots->push_back(std::move(shot));
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchmarkData> ReadBbh(const std::string &dir) {
  BenchmarkData data{Benchmark::kBbh, dir, {}};
  BRAID_EVAL_ASSIGN(
      names, filesEndingWith(dir, ".json",
                             "BIG-Bench Hard's layout: DIR/<task>.json"));
  for (const std::string &name : names) {
    if (absl::EndsWith(name, "_fewshot.json"))
      continue;
    Subtask subtask;
    subtask.name = name.substr(0, name.size() - 5);
    subtask.displayName = displayName(subtask.name);
    const std::string path = absl::StrCat(dir, "/", name);
    BRAID_EVAL_ASSIGN(file, readJsonObject(path));
    if (absl::Status s = forEachBbhExample(
            path, file,
            [&](const Struct &example, const std::string &where) {
              absl::StatusOr<Item> item = bbhItem(example, where);
              if (!item.ok())
                return item.status();
              subtask.items.push_back(std::move(*item));
              return absl::OkStatus();
            });
        !s.ok())
      return s;

    const std::string fewshot =
        absl::StrCat(dir, "/", subtask.name, "_fewshot.json");
    const std::string cotPrompt =
        absl::StrCat(dir, "/../cot-prompts/", subtask.name, ".txt");
    if (isFile(fewshot)) {
      subtask.shotSource = fewshot;
      BRAID_EVAL_ASSIGN(shotFile, readJsonObject(fewshot));
      Fields fields(shotFile, fewshot);
      BRAID_EVAL_ASSIGN(description, fields.optionalString("description"));
      // As the harness's bbh/fewshot descriptions: the text, "\n\n".
      if (!description.empty())
        subtask.description = description + "\n\n";
      if (absl::Status s = forEachBbhExample(
              fewshot, shotFile,
              [&](const Struct &example, const std::string &where) {
                absl::StatusOr<Item> item = bbhItem(example, where);
                if (!item.ok())
                  return item.status();
                subtask.shots.push_back(Shot{item->query, item->target});
                return absl::OkStatus();
              });
          !s.ok())
        return s;
    } else if (isFile(cotPrompt)) {
      subtask.shotSource = cotPrompt;
      BRAID_EVAL_ASSIGN(text, ReadTextFile(cotPrompt));
      std::string description;
      if (absl::Status s =
              ParseBbhCotPrompt(text, cotPrompt, &description, &subtask.shots);
          !s.ok())
        return s;
      // bbh/_generate_configs.py: description + "\n\n".
      subtask.description = description + "\n\n";
    } else {
      subtask.shotSource = absl::StrCat(fewshot, " (or ", cotPrompt, ")");
    }
    data.subtasks.push_back(std::move(subtask));
  }
  if (data.subtasks.empty())
    return absl::NotFoundError(
        absl::StrCat(dir, ": no BIG-Bench Hard <task>.json file"));
  return data;
}

absl::StatusOr<BenchmarkData> ReadGsm8k(const std::string &dir) {
  BenchmarkData data{Benchmark::kGsm8k, dir, {}};
  Subtask subtask = singleSubtask(Benchmark::kGsm8k);
  if (absl::Status s =
          readJsonlItems(dir + "/test.jsonl", gsm8kItem, &subtask.items);
      !s.ok())
    return s;
  subtask.shotSource = dir + "/train.jsonl";
  if (isFile(subtask.shotSource)) {
    std::vector<Item> train;
    if (absl::Status s = readJsonlItems(subtask.shotSource, gsm8kItem, &train);
        !s.ok())
      return s;
    for (Item &item : train)
      subtask.shots.push_back(
          Shot{std::move(item.query), std::move(item.target)});
  }
  data.subtasks.push_back(std::move(subtask));
  return data;
}

absl::StatusOr<BenchmarkData> ReadHumanEval(const std::string &dir) {
  BenchmarkData data{Benchmark::kHumanEval, dir, {}};
  Subtask subtask = singleSubtask(Benchmark::kHumanEval);
  subtask.shotSource = dir + "/HumanEval.jsonl (HumanEval is read zero-shot)";
  if (absl::Status s = readJsonlItems(dir + "/HumanEval.jsonl", humanEvalItem,
                                      &subtask.items);
      !s.ok())
    return s;
  data.subtasks.push_back(std::move(subtask));
  return data;
}

absl::StatusOr<BenchmarkData> ReadBenchmark(Benchmark benchmark,
                                            const std::string &dir) {
  switch (benchmark) {
  case Benchmark::kMmlu:
    return ReadMmlu(dir);
  case Benchmark::kCeval:
    return ReadCeval(dir);
  case Benchmark::kBoolq:
    return ReadBoolq(dir);
  case Benchmark::kAgieval:
    return ReadAgieval(dir);
  case Benchmark::kBbh:
    return ReadBbh(dir);
  case Benchmark::kGsm8k:
    return ReadGsm8k(dir);
  case Benchmark::kHumanEval:
    return ReadHumanEval(dir);
  }
  return absl::InvalidArgumentError("unknown benchmark");
}

} // namespace braid::eval
