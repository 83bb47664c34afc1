//===- TrainerFlags.cpp - The flags of braid-run and braid train ----------===//
//
// ParseTrainerFlag, IsTrainerFlag and IsTrainerSwitch (Trainer.h): the flags
// the trainer's options are set from, and their usage text.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Trainer.h"

#include "runtime/ckpt/ModelIdentity.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <thread>

namespace braid::exec {

const char kTrainerFlagsUsage[] =
    "[--data PREFIX] [--steps N] [--seed N] [--data-order shuffled|sequential] "
    "[--init-from HF_DIR|CHECKPOINT] [--load CHECKPOINT] "
    "[--allow-model-change FIELD[,FIELD]] [--save DIR] "
    "[--save-every N] [--keep-last K] [--overwrite] [--threads N] [--log-every N] "
    "[--metrics-out FILE] [--save-params FILE.safetensors] [--trace FILE.json] "
    "[--profile-out FILE.json] [--device cpu|cuda] [--cuda-graphs on|off] "
    "[--collective-timeout SECONDS] [--split TRAIN,VALID,TEST] "
    "[--eval-interval N] [--eval-iters N] [--tensorboard-dir DIR] "
    "[--exit-duration-in-mins M] [--exit-interval N] [--is-instruction-dataset] "
    "[--lora-load ADAPTERS]";

absl::StatusOr<bool> ParseTrainerFlag(const std::string &flag,
                                      const std::string &value,
                                      TrainerOptions *options) {
  if (flag == "--data") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--data= names no dataset (PREFIX of PREFIX.bin and PREFIX.idx)");
    options->dataPrefix = value;
  } else if (flag == "--init-from") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--init-from= names nothing (a Hugging Face directory or a Braid "
          "checkpoint)");
    options->initFrom = value;
  } else if (flag == "--lora-load") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--lora-load= names no adapters (a PEFT directory or a Braid LoRA "
          "checkpoint)");
    options->loraLoad = value;
  } else if (flag == "--allow-model-change") {
    // Repeatable, or a comma-separated list.
    std::vector<std::string> fields = absl::StrSplit(value, ',');
    for (const std::string &field : fields) {
      if (field.empty())
        return absl::InvalidArgumentError(absl::StrCat(
            "--allow-model-change=", value,
            " names no field (expected --allow-model-change FIELD[,FIELD])"));
      if (absl::Status s = ckpt::CheckAllowableModelChange(field); !s.ok())
        return s;
      options->allowModelChange.insert(field);
    }
  } else if (flag == "--load" || flag == "--save") {
    if (value.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "= names no directory"));
    (flag == "--load" ? options->load : options->save) = value;
  } else if (flag == "--overwrite" || flag == "--is-instruction-dataset") {
    if (value != "" && value != "true" && value != "false")
      return absl::InvalidArgumentError(absl::StrCat(
          flag, "=", value, " is not one of true, false (or ", flag,
          " alone)"));
    (flag == "--overwrite" ? options->overwrite : options->instruction.emplace()) =
        value != "false";
  } else if (flag == "--metrics-out") {
    options->metricsOut = value;
  } else if (flag == "--save-params") {
    options->saveParams = value;
  } else if (flag == "--trace") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--trace= names no file (expected --trace FILE.json)");
    options->trace = value;
  } else if (flag == "--profile-out") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--profile-out= names no file (expected --profile-out FILE.json)");
    options->profileOut = value;
  } else if (flag == "--device") {
    if (value != "cpu" && value != "cuda")
      return absl::InvalidArgumentError(
          absl::StrCat("--device=", value, " is not one of cpu, cuda"));
    options->device = value;
  } else if (flag == "--cuda-graphs") {
    if (value != "on" && value != "off")
      return absl::InvalidArgumentError(
          absl::StrCat("--cuda-graphs=", value, " is not one of on, off"));
    options->cudaGraphs = value == "on";
  } else if (flag == "--collective-timeout") {
    char *end = nullptr;
    errno = 0;
    double seconds = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(seconds) ||
        seconds < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--collective-timeout=", value,
          " is not a non-negative number of seconds (0: no deadline)"));
    options->collectiveTimeout = seconds;
  } else if (flag == "--split") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--split= names no split (expected e.g. --split 969,30,1)");
    options->split = value;
  } else if (flag == "--tensorboard-dir") {
    if (value.empty())
      return absl::InvalidArgumentError(
          "--tensorboard-dir= names no directory");
    options->tensorboardDir = value;
  } else if (flag == "--exit-duration-in-mins") {
    char *end = nullptr;
    errno = 0;
    double minutes = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(minutes) ||
        !(minutes > 0))
      return absl::InvalidArgumentError(absl::StrCat(
          "--exit-duration-in-mins=", value,
          " is not a positive number of minutes"));
    options->exitDurationMins = minutes;
  } else if (flag == "--data-order") {
    if (value != "shuffled" && value != "sequential")
      return absl::InvalidArgumentError(absl::StrCat(
          "--data-order=", value, " is not one of shuffled, sequential"));
    options->dataOrder = value;
  } else if (flag == "--steps" || flag == "--seed" || flag == "--log-every" ||
             flag == "--threads" || flag == "--save-every" ||
             flag == "--keep-last" || flag == "--eval-interval" ||
             flag == "--eval-iters" || flag == "--exit-interval") {
    // --steps 0 saves what it loads or initialises, without training;
    // --eval-interval 0 evaluates never.
    bool nonNegative = flag == "--seed" || flag == "--steps" ||
                       flag == "--eval-interval";
    char *end = nullptr;
    errno = 0;
    long long n = std::strtoll(value.c_str(), &end, 10);
    if (errno == ERANGE)
      return absl::InvalidArgumentError(absl::StrCat(
          flag, "=", value, " is out of range (at most ", LLONG_MAX, ")"));
    if (value.empty() || *end != '\0' || errno != 0 || n < (nonNegative ? 0 : 1))
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "=", value, " is not a ",
                       nonNegative ? "non-negative" : "positive", " integer"));
    // More threads than that was capped without a word; each beyond the
    // cores only waits.
    if (flag == "--threads" && n > kMaxThreads)
      return absl::InvalidArgumentError(absl::StrCat(
          "--threads=", value, " is more than ", kMaxThreads,
          " (this machine has ", std::thread::hardware_concurrency(),
          " cores)"));
    if (flag == "--steps")
      options->steps = n;
    else if (flag == "--seed")
      options->seed = uint64_t(n);
    else if (flag == "--threads")
      options->threads = n;
    else if (flag == "--save-every")
      options->saveEvery = n;
    else if (flag == "--keep-last")
      options->keepLast = n;
    else if (flag == "--eval-interval")
      options->evalInterval = n;
    else if (flag == "--eval-iters")
      options->evalIters = n;
    else if (flag == "--exit-interval")
      options->exitInterval = n;
    else
      options->logEvery = n;
  } else {
    return false;
  }
  return true;
}

bool IsTrainerFlag(const std::string &flag) {
  // ParseTrainerFlag knows the flags: an unknown one is (false), a known one
  // true or an error about the (empty) value.
  TrainerOptions scratch;
  absl::StatusOr<bool> known = ParseTrainerFlag(flag, "", &scratch);
  return !known.ok() || *known;
}

bool IsTrainerSwitch(const std::string &flag) {
  return flag == "--overwrite" || flag == "--is-instruction-dataset";
}

} // namespace braid::exec
