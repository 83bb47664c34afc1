//===- CostModel.h - Predicted step time of a plan on a cluster -*- C++ -*-===//
//
// Prices a compiled plan (the plan file's message) on a cluster
// (frontends/spec/cluster.proto):
//   - each kernel call: overhead + max(FLOPs / FLOP rate, bytes / byte
//     rate), the rates measured (a calibration for the plan's ranks per
//     node) or from the roofline (peak x efficiency, a matrix product's
//     efficiency by its size: matmulEfficiency);
//   - each collective: ring costs over its group, 2 (n-1)/n bytes / bus
//     bandwidth + 2 (n-1) latency for an all-reduce, half that for an
//     all-gather or reduce-scatter, on the link class its group spans
//     (within a node when every rank of the group is on one node: ranks are
//     numbered row-major over the mesh axes and filled node by node);
//   - each function of a rank: its instructions in order, asynchronous
//     collectives on a second stream that a WAIT joins;
//   - the step: zero_grads, the micro-batches (or the pipeline schedule,
//     simulated by compiler/Schedule.h with the stages' function times and
//     the transfers between stages), then update, on the slowest stage.
// Ranks of one stage run the same program on the same shapes, so one rank
// per stage is priced: collectives find their group ready.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_COMPILER_COSTMODEL_H
#define BRAID_COMPILER_COSTMODEL_H

#include "frontends/spec/cluster.pb.h"
#include "runtime/plan/plan.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <string>
#include <vector>

namespace braid {

/// The cluster `nameOrPath` names: a preset (dgx-h100, dgx-a100) or a text
/// proto file (a `braid calibrate` profile). `nodes` > 0 overrides its node
/// count. Errors name the file or list the presets.
llvm::Expected<spec::Cluster> loadCluster(llvm::StringRef nameOrPath,
                                          int64_t nodes = 0);

/// The preset names.
std::vector<std::string> clusterPresets();

/// `base` with what braid-gpu-calibrate measured on one of its GPUs
/// (`braid calibrate --device cuda`), named base's name + "-measured":
/// matmul_curve (bf16 products) and matmul_curve_fp32 (fp32 ones) become
/// the measured points, each product's FLOPs (2·m·n·k) at its FLOP/s over
/// base's peak for the precision (products of equal FLOPs averaged);
/// vector_efficiency the elementwise kernel's bytes/s over base's
/// memory_bandwidth; kernel_overhead_s a tiny kernel's call. The links keep
/// base's figures. Errors name a measurement that is not a time, or one
/// above base's peaks (a cluster of another GPU).
llvm::Expected<spec::Cluster>
clusterFromGpuMeasurement(const spec::Cluster &base,
                          const spec::GpuMeasurement &measured);

/// The share of peak FLOP/s one matrix product of `flops` FLOPs (2·m·n·k)
/// reaches on `cluster` where no calibration gives its kernel's speed: the
/// cluster's matmul curve for the product's precision (`lowPrecision`:
/// bf16 or f16, else fp32), linear in log(flops) between its two points
/// around `flops` and clamped to its first and last point beyond them;
/// without a curve, matmul_efficiency (0.6 when unset), for fp32 products
/// no more than the bf16 curve's FLOP/s at that size allow (an fp32
/// product is no faster than the same product in bf16).
double matmulEfficiency(const spec::Cluster &cluster, double flops,
                        bool lowPrecision);

/// The share of peak bf16 FLOP/s one bf16/f16 fused attention call of
/// `flops` FLOPs (AttentionFlops) at head dimension `headDim` reaches on
/// `cluster`: its attention_grad_curve (`backward`) or attention_curve, the
/// points of the head dimension nearest `headDim` (by ratio; the smaller
/// of two as near), linear in log(flops) between two points and clamped
/// beyond them. 0 when the curve is empty (attention is then priced as
/// its products, matmulEfficiency).
double attentionEfficiency(const spec::Cluster &cluster, int64_t headDim,
                           double flops, bool backward);

/// Where a step's time goes, in seconds (one rank of the slowest stage).
struct StepPrediction {
  double stepTime = 0;
  /// Kernel time other than communication, over the step (the stage's).
  double compute = 0;
  /// Of `compute`: the kernels that recompute forward values (recompute
  /// selective, full or auto).
  double recompute = 0;
  /// Communication time by mesh axes ("tp", "dp", "tp,dp", "pp" for
  /// transfers between stages), exposed on the compute stream.
  std::map<std::string, double> communication;
  /// Communication that ran on the second stream, hidden behind compute.
  double hiddenCommunication = 0;
  /// The pipeline's idle time on the slowest stage.
  double bubble = 0;
  /// Time outside the plan's kernels (a calibration's step_overhead_s).
  double overhead = 0;
  /// The all-reduce, all-gather and reduce-scatter calls of the step: the
  /// peers each waits for (its group's ranks but one), summed (what a
  /// calibration's collective_wait_s multiplies), and their priced seconds,
  /// that wait included (the slowest stage's rank; hidden ones too).
  double collectivePeers = 0, collectiveSeconds = 0;
  /// Of those collectives: the compute each one's group ran since it last
  /// synchronised, summed (what a calibration's collective_gap_share
  /// multiplies). A pipeline stage's forward and backward functions are
  /// each priced as starting synchronised (their collectives are the tensor
  /// group's); its update follows all of the stage's compute in the step.
  double collectiveGaps = 0;
  /// Seconds by kernel kind (plan::Kernel_Name; SEND and RECV, which the
  /// pipeline's transfers price, left out), over the step: where `compute`
  /// and the collectives' time go.
  std::map<std::string, double> kernels;
  /// Per pipeline stage: one step's busy time.
  std::vector<double> stageBusy;
};

/// The prediction as the compile report's `predicted_step` (docs/report.md):
/// seconds and where they go, tokens/s, and with `trainingFlopsPerStep`
/// (model FLOPs of one step) TFLOP/s per device and MFU.
llvm::json::Object predictionReport(const StepPrediction &prediction,
                                    const spec::Cluster &cluster,
                                    const plan::Plan &plan,
                                    double trainingFlopsPerStep);

/// The predicted step of `plan` on `cluster`. Errors: a plan the model
/// cannot follow (a function the schedule names that does not exist), a
/// plan that needs more devices than the cluster has.
llvm::Expected<StepPrediction> predictStep(const plan::Plan &plan,
                                           const spec::Cluster &cluster);

} // namespace braid

#endif // BRAID_COMPILER_COSTMODEL_H
