//===- Trainer.h - The step loop of braid-run -------------------*- C++ -*-===//
//
// Runs a plan's training: initial weights (seeded, per family), then for
// each step the micro-batch of GPT samples, the learning rate of the
// schedule and one call of the plan's step function; one line per logged
// step for people and one JSON object per step for tools.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_EXEC_TRAINER_H
#define BRAID_RUNTIME_EXEC_TRAINER_H

#include "runtime/plan/plan.pb.h"

#include "absl/status/status.h"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace braid::exec {

struct TrainerOptions {
  std::string dataPrefix;             ///< overrides the plan's data_path
  std::optional<int64_t> steps;       ///< overrides the plan's steps
  std::optional<uint64_t> seed;       ///< overrides the plan's seed
  /// A Hugging Face checkpoint directory (config.json + *.safetensors) to
  /// start from instead of the seeded initialisation.
  std::string initFrom;
  int64_t logEvery = 1;
  std::string metricsOut;             ///< JSON lines, one per step
  std::ostream *log = nullptr;        ///< the human-readable lines
  /// Print, at the end, the share of step time per kernel (to `log`).
  bool profile = false;
};

struct StepRecord {
  int64_t step;
  double loss, lr, gradNorm, stepTimeS;
};

/// Trains; returns the per-step records through `records` when given.
absl::Status Train(const plan::Plan &plan, const TrainerOptions &options,
                   std::vector<StepRecord> *records = nullptr);

} // namespace braid::exec

#endif // BRAID_RUNTIME_EXEC_TRAINER_H
