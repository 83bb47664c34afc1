//===- Trainer.cpp - The step loop of braid-run ---------------------------===//

#include "runtime/exec/Trainer.h"

#include "runtime/ckpt/HFCheckpoint.h"
#include "runtime/ckpt/Safetensors.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"
#include "runtime/data/GptSamples.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Init.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Shards.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>

namespace braid::exec {
namespace {

int64_t numel(const plan::Buffer &b) {
  int64_t n = 1;
  for (int64_t d : b.shape())
    n *= d;
  return n;
}

absl::StatusOr<int> need(const Executor &e, const char *name) {
  int id = e.FindBuffer(name);
  if (id < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("the plan has no '", name, "' buffer to train with"));
  return id;
}

/// This rank's coordinate along the axis `b` is split over (0 when whole).
int64_t shardCoordinate(const Executor &e, const plan::Buffer &b) {
  if (!b.has_shard() || !e.communicator())
    return 0;
  const plan::Mesh &mesh = e.plan().mesh();
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) == b.shard().axis())
      return e.communicator()->Coordinates()[i];
  return 0;
}

/// Writes every parameter of the plan, whole and as float32, to a
/// safetensors file. Every rank must call it: the slices of split parameters
/// are gathered; rank 0 writes.
absl::Status saveParameters(const Executor &e, const std::string &path) {
  std::vector<std::vector<float>> values;
  std::vector<ckpt::TensorToWrite> tensors;
  const plan::Plan &plan = e.plan();
  bool writer = !e.communicator() || e.communicator()->Rank() == 0;
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const plan::Buffer &b = plan.buffers(i);
    if (b.role() != plan::PARAMETER)
      continue;
    absl::StatusOr<std::vector<double>> read = e.Read(i);
    if (!read.ok())
      return read.status();
    std::vector<int64_t> shape = plan::GlobalShape(b, plan.mesh());
    std::vector<double> whole = std::move(*read);
    if (b.has_shard()) {
      int64_t ranks = plan::AxisSize(plan.mesh(), b.shard().axis());
      int64_t n = int64_t(whole.size());
      std::vector<double> all(n * ranks);
      if (ranks > 1) {
        if (!e.communicator())
          return absl::FailedPreconditionError(absl::StrCat(
              "parameter '", b.name(), "' is split over ", ranks,
              " ranks: gathering it needs the job's other ranks"));
        if (absl::Status s = e.communicator()->AllGather(
                {b.shard().axis()}, whole.data(), all.data(), n, plan::F64);
            !s.ok())
          return s;
      } else {
        all = whole;
      }
      int64_t total = 1;
      for (int64_t d : shape)
        total *= d;
      whole.assign(total, 0.0);
      for (int64_t c = 0; c < ranks; ++c)
        for (const plan::ShardRun &run : plan::ShardRuns(b, plan.mesh(), c))
          std::copy_n(all.begin() + c * n + run.local, run.length,
                      whole.begin() + run.global);
    }
    values.emplace_back(whole.begin(), whole.end());
    tensors.push_back({b.name(), ckpt::Dtype::kF32, shape, {}});
  }
  if (!writer)
    return absl::OkStatus();
  for (size_t k = 0; k < tensors.size(); ++k)
    tensors[k].data = absl::Span<const uint8_t>(
        reinterpret_cast<const uint8_t *>(values[k].data()),
        values[k].size() * sizeof(float));
  return ckpt::WriteSafetensors(path, tensors, {});
}

} // namespace

const char kTrainerFlagsUsage[] =
    "[--data PREFIX] [--steps N] [--seed N] [--data-order shuffled|sequential] "
    "[--init-from HF_DIR] [--threads N] [--log-every N] [--metrics-out FILE] "
    "[--save-params FILE.safetensors]";

absl::StatusOr<bool> ParseTrainerFlag(const std::string &flag,
                                      const std::string &value,
                                      TrainerOptions *options) {
  if (flag == "--data") {
    options->dataPrefix = value;
  } else if (flag == "--init-from") {
    options->initFrom = value;
  } else if (flag == "--metrics-out") {
    options->metricsOut = value;
  } else if (flag == "--save-params") {
    options->saveParams = value;
  } else if (flag == "--data-order") {
    if (value != "shuffled" && value != "sequential")
      return absl::InvalidArgumentError(absl::StrCat(
          "--data-order=", value, " is not one of shuffled, sequential"));
    options->dataOrder = value;
  } else if (flag == "--steps" || flag == "--seed" || flag == "--log-every" ||
             flag == "--threads") {
    bool seed = flag == "--seed";
    char *end = nullptr;
    errno = 0;
    long long n = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno != 0 || n < (seed ? 0 : 1))
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "=", value, " is not a ",
                       seed ? "non-negative" : "positive", " integer"));
    if (flag == "--steps")
      options->steps = n;
    else if (seed)
      options->seed = uint64_t(n);
    else if (flag == "--threads")
      options->threads = n;
    else
      options->logEvery = n;
  } else {
    return false;
  }
  return true;
}

DataShare DataShareOf(const Executor &e) {
  const plan::Mesh &mesh = e.plan().mesh();
  DataShare share;
  share.ranks = plan::AxisSize(mesh, "dp");
  if (Communicator *comm = e.communicator())
    for (int i = 0; i < mesh.axes_size(); ++i)
      if (mesh.axes(i) == "dp")
        share.rank = comm->Coordinates()[i];
  return share;
}

absl::StatusOr<double> RunStep(Executor &e, uint64_t seed, int64_t step,
                               const FeedMicroBatch &feed) {
  const plan::Training &t = e.plan().training();
  const plan::StepFunctions &fns = t.step();
  int64_t micros = std::max<int64_t>(t.micro_batches(), 1);
  DataShare share = DataShareOf(e);
  if (share.ranks > 1 && !e.communicator())
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan splits the batch over ", share.ranks,
        " data-parallel ranks: run it under mpirun"));
  // This rank's samples start at its slice of the global batch.
  int64_t firstSample = share.rank * micros * t.micro_batch_size();
  absl::StatusOr<int> lossGrad = need(e, "loss_grad"), loss = need(e, "loss");
  for (const auto *s : {&lossGrad, &loss})
    if (!s->ok())
      return s->status();
  auto run = [&](const std::string &function, int64_t micro) -> absl::Status {
    absl::Status s = e.Run(function, {seed, uint32_t(step),
                                      firstSample + micro * t.micro_batch_size()});
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("step ", step, ": ", s.message()));
    return s;
  };
  if (!fns.zero_grads().empty())
    if (absl::Status s = run(fns.zero_grads(), 0); !s.ok())
      return s;
  if (absl::Status s = e.Write(*lossGrad, {1.0 / double(micros * share.ranks)});
      !s.ok())
    return s;
  double sum = 0;
  for (int64_t m = 0; m < micros; ++m) {
    if (absl::Status s = feed(m); !s.ok())
      return s;
    if (absl::Status s = run(fns.micro_step(), m); !s.ok())
      return s;
    sum += (*e.Read(*loss))[0];
  }
  if (!fns.update().empty())
    if (absl::Status s = run(fns.update(), 0); !s.ok())
      return s;
  if (share.ranks > 1)
    if (absl::Status s = e.communicator()->AllReduce({"dp"}, &sum, 1, plan::F64);
        !s.ok())
      return s;
  return sum / double(micros * share.ranks);
}

absl::Status Train(const plan::Plan &plan, const TrainerOptions &options,
                   std::vector<StepRecord> *records) {
  const plan::Training &t = plan.training();
  int64_t steps = options.steps.value_or(t.steps());
  uint64_t seed = options.seed.value_or(t.seed());
  std::string dataPath = options.dataPrefix.empty() ? t.data_path()
                                                    : options.dataPrefix;
  if (steps < 1)
    return absl::InvalidArgumentError(absl::StrCat("steps = ", steps, " must be >= 1"));
  if (dataPath.empty())
    return absl::InvalidArgumentError(
        "no data: give --data PREFIX (a .bin/.idx pair) or data.path in the job");
  if (options.threads > 0)
    cpu::setNumThreads(int(std::min<int64_t>(options.threads, 1 << 12)));
  if (plan::WorldSize(plan) > 1 && !options.comm)
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan is for ", plan::WorldSize(plan),
        " ranks: start it with mpirun -np ", plan::WorldSize(plan),
        " braid-run ... (braid train does)"));
  absl::StatusOr<std::unique_ptr<Executor>> created =
      Executor::Create(plan, options.comm);
  if (!created.ok())
    return created.status();
  Executor &e = **created;

  // Initial weights: a checkpoint, or the family's seeded scheme.
  if (!options.initFrom.empty()) {
    absl::StatusOr<ckpt::HFCheckpoint> checkpoint =
        ckpt::OpenHFCheckpoint(options.initFrom);
    if (!checkpoint.ok())
      return checkpoint.status();
    std::vector<ckpt::ParamSpec> specs;
    std::vector<int> ids;
    for (int i = 0; i < plan.buffers_size(); ++i)
      if (plan.buffers(i).role() == plan::PARAMETER) {
        const plan::Buffer &b = plan.buffers(i);
        specs.push_back({b.name(), plan::GlobalShape(b, plan.mesh())});
        ids.push_back(i);
      }
    std::vector<std::vector<float>> values(specs.size());
    for (size_t k = 0; k < specs.size(); ++k) {
      int64_t n = 1;
      for (int64_t d : specs[k].shape)
        n *= d;
      values[k].resize(n);
    }
    if (absl::Status s = ckpt::LoadParameters(
            *checkpoint, specs, [&](size_t k) { return values[k].data(); });
        !s.ok())
      return s;
    // Each rank keeps its slice of the whole tensors.
    for (size_t k = 0; k < specs.size(); ++k) {
      const plan::Buffer &b = plan.buffers(ids[k]);
      std::vector<double> local(numel(b));
      for (const plan::ShardRun &run :
           plan::ShardRuns(b, plan.mesh(), shardCoordinate(e, b)))
        std::copy_n(values[k].begin() + run.global, run.length,
                    local.begin() + run.local);
      if (absl::Status s = e.Write(ids[k], local); !s.ok())
        return s;
    }
  }
  InitConfig init{seed, t.init_std() > 0 ? t.init_std() : 0.02,
                  std::max<int64_t>(t.num_layers(), 1), t.scaled_residual_init()};
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const plan::Buffer &b = plan.buffers(i);
    if (b.role() != plan::PARAMETER || !options.initFrom.empty())
      continue;
    // Values by global element index: a slice holds what the whole tensor
    // holds there.
    std::vector<float> values(numel(b));
    for (const plan::ShardRun &run :
         plan::ShardRuns(b, plan.mesh(), shardCoordinate(e, b)))
      if (absl::Status s = initParameter(b.name(), b.shape_size(), init,
                                         uint64_t(run.global), uint64_t(run.length),
                                         values.data() + run.local);
          !s.ok())
        return s;
    if (absl::Status s = e.Write(i, std::vector<double>(values.begin(), values.end()));
        !s.ok())
      return s;
  }

  // Data.
  absl::StatusOr<data::IndexedDataset> dataset = data::IndexedDataset::Open(dataPath);
  if (!dataset.ok())
    return dataset.status();
  int64_t batch = t.micro_batch_size(), seq = t.seq_length();
  int64_t micros = std::max<int64_t>(t.micro_batches(), 1);
  DataShare share = DataShareOf(e);
  int64_t globalBatch = batch * micros * share.ranks;
  data::GptSampleOptions sampleOptions;
  sampleOptions.seqLength = seq;
  sampleOptions.numSamples = uint64_t(steps * globalBatch);
  sampleOptions.seed = seed;
  std::string order = options.dataOrder.empty() ? t.data_order() : options.dataOrder;
  if (order.empty())
    order = "shuffled";
  if (order != "shuffled" && order != "sequential")
    return absl::InvalidArgumentError(absl::StrCat(
        "data order \"", order, "\" is not one of shuffled, sequential"));
  sampleOptions.order = order == "sequential" ? data::SampleOrder::kSequential
                                              : data::SampleOrder::kShuffled;
  absl::StatusOr<data::GptSamples> samples =
      data::GptSamples::Create(&*dataset, sampleOptions);
  if (!samples.ok())
    return samples.status();

  // The schedule.
  cpu::LrScheduleConfig lrConfig;
  lrConfig.lr = t.lr();
  lrConfig.minLr = t.min_lr();
  lrConfig.warmupSteps = t.warmup_steps();
  lrConfig.decaySteps = steps;
  absl::StatusOr<cpu::LrDecayStyle> style =
      cpu::parseLrDecayStyle(t.lr_decay().empty() ? "constant" : t.lr_decay());
  if (!style.ok())
    return style.status();
  lrConfig.style = *style;
  absl::StatusOr<cpu::LrSchedule> schedule = cpu::LrSchedule::create(lrConfig);
  if (!schedule.ok())
    return schedule.status();

  absl::StatusOr<int> tokens = need(e, "tokens"), targets = need(e, "targets"),
                      lr = need(e, "lr"), step = need(e, "step"),
                      gradNorm = need(e, "grad_norm");
  for (const auto *s : {&tokens, &targets, &lr, &step, &gradNorm})
    if (!s->ok())
      return s->status();

  std::ofstream metrics;
  if (!options.metricsOut.empty()) {
    metrics.open(options.metricsOut, std::ios::trunc);
    if (!metrics)
      return absl::InternalError(absl::StrCat("cannot write ", options.metricsOut));
  }
  if (options.profile)
    e.EnableProfile();
  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> sample;
  std::vector<double> tokenValues(batch * seq), targetValues(batch * seq);
  for (int64_t s = 1; s <= steps; ++s) {
    auto stepStart = std::chrono::steady_clock::now();
    double rate = schedule->lrForUpdate(s);
    for (auto [id, values] :
         {std::pair<int, std::vector<double>>{*lr, {rate}}, {*step, {double(s)}}})
      if (absl::Status st = e.Write(id, values); !st.ok())
        return st;
    // Micro-batch m of step s on data-parallel rank d holds the samples that
    // follow those of the earlier micro-batches, ranks and steps: the global
    // order of samples does not depend on the dp degree.
    auto feed = [&](int64_t m) -> absl::Status {
      for (int64_t b = 0; b < batch; ++b) {
        uint64_t index = uint64_t((s - 1) * globalBatch +
                                  share.rank * micros * batch + m * batch + b);
        if (absl::Status st = samples->GetSample(index, &sample); !st.ok())
          return st;
        for (int64_t i = 0; i < seq; ++i) {
          tokenValues[b * seq + i] = sample[i];
          targetValues[b * seq + i] = sample[i + 1];
        }
      }
      if (absl::Status st = e.Write(*tokens, tokenValues); !st.ok())
        return st;
      return e.Write(*targets, targetValues);
    };
    absl::StatusOr<double> stepLoss = RunStep(e, seed, s, feed);
    if (!stepLoss.ok())
      return stepLoss.status();
    double lossValue = *stepLoss, norm = (*e.Read(*gradNorm))[0];
    auto now = std::chrono::steady_clock::now();
    double stepTime = std::chrono::duration<double>(now - stepStart).count();
    double elapsed = std::chrono::duration<double>(now - start).count();
    if (!std::isfinite(lossValue))
      return absl::InternalError(absl::StrCat("step ", s, ": the loss is ", lossValue));
    double tokensPerS = double(globalBatch * seq) / std::max(stepTime, 1e-9);
    if (records)
      records->push_back({s, lossValue, rate, norm, stepTime});
    if (options.log && (s % std::max<int64_t>(options.logEvery, 1) == 0 || s == steps))
      *options.log << absl::StrFormat(
          "step %*d/%d  loss %.4f  lr %.3e  grad norm %.3f  %.0f tokens/s  "
          "elapsed %.1fs  eta %.1fs\n",
          int(std::to_string(steps).size()), s, steps, lossValue, rate, norm,
          tokensPerS, elapsed, elapsed / s * (steps - s));
    if (metrics)
      metrics << absl::StrFormat(
          "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
          "\"tokens\": %d, \"step_time_s\": %.6f, \"tokens_per_s\": %.3f, "
          "\"peak_mem_bytes\": %d}\n",
          s, lossValue, rate, norm, globalBatch * seq, stepTime, tokensPerS,
          plan.arena_bytes());
  }
  if (!options.saveParams.empty())
    if (absl::Status s = saveParameters(e, options.saveParams); !s.ok())
      return s;
  if (options.profile && options.log) {
    const std::vector<double> &p = e.Profile();
    double total = 0, gemm = 0;
    for (int k = 0; k < int(p.size()); ++k) {
      total += p[k];
      if (k == plan::LINEAR || k == plan::LINEAR_GRAD_INPUT ||
          k == plan::LINEAR_GRAD_WEIGHT)
        gemm += p[k];
    }
    *options.log << absl::StrFormat("profile: %.3f s in kernels, GEMM %.1f %%\n",
                                    total, total > 0 ? 100 * gemm / total : 0.0);
    std::vector<std::pair<double, int>> order;
    for (int k = 0; k < int(p.size()); ++k)
      if (p[k] > 0)
        order.push_back({p[k], k});
    std::sort(order.rbegin(), order.rend());
    for (auto [seconds, k] : order)
      *options.log << absl::StrFormat("  %-24s %8.3f s  %5.1f %%\n",
                                      plan::Kernel_Name(plan::Kernel(k)),
                                      seconds, 100 * seconds / total);
  }
  return absl::OkStatus();
}

} // namespace braid::exec
