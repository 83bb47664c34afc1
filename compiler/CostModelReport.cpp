//===- CostModelReport.cpp - The prediction in the compile report ---------===//
//
// predictionReport: a StepPrediction as the report's `predicted_step`
// (docs/report.md).
//
//===----------------------------------------------------------------------===//

#include "compiler/CostModel.h"

#include "runtime/plan/PlanLoader.h"

#include <algorithm>

using namespace braid;

llvm::json::Object braid::predictionReport(const StepPrediction &prediction,
                                           const spec::Cluster &cluster,
                                           const plan::Plan &plan,
                                           double trainingFlopsPerStep) {
  const plan::Training &t = plan.training();
  int64_t world = plan::WorldSize(plan);
  double tokens = double(t.micro_batch_size()) * double(t.seq_length()) *
                  double(std::max<int64_t>(t.micro_batches(), 1)) *
                  double(plan::AxisSize(plan.mesh(), "dp"));
  double step = prediction.stepTime;
  llvm::json::Object comm;
  double exposed = 0;
  for (const auto &[axes, seconds] : prediction.communication) {
    comm[axes.empty() ? "local" : axes] = seconds;
    exposed += seconds;
  }
  llvm::json::Array stages;
  for (double busy : prediction.stageBusy)
    stages.push_back(busy);
  llvm::json::Object kernels;
  for (const auto &[kernel, seconds] : prediction.kernels)
    kernels[kernel] = seconds;
  bool low = false;
  for (const plan::Buffer &b : plan.buffers())
    low = low || (b.role() == plan::PARAMETER &&
                  (b.dtype() == plan::BF16 || b.dtype() == plan::F16));
  double peak = low ? cluster.peak_flops_bf16() : cluster.peak_flops_fp32();
  double perDevice = step > 0 ? trainingFlopsPerStep / step / world : 0;
  return llvm::json::Object{
      {"cluster", cluster.name()},
      {"step_time_s", step},
      {"tokens_per_s", step > 0 ? tokens / step : 0.0},
      {"compute_s", prediction.compute},
      {"recompute_s", prediction.recompute},
      {"exposed_communication_s", std::move(comm)},
      {"exposed_communication_total_s", exposed},
      {"hidden_communication_s", prediction.hiddenCommunication},
      {"bubble_s", prediction.bubble},
      {"step_overhead_s", prediction.overhead},
      {"stage_busy_s", std::move(stages)},
      {"kernel_s", std::move(kernels)},
      {"model_tflops_per_device", perDevice / 1e12},
      {"mfu", peak > 0 ? perDevice / peak : 0.0},
  };
}
