//===- Optimizer.h - AdamW, clipping and the lr schedule --------*- C++ -*-===//
//
// The optimizer side of a training step on the CPU, in the order the
// training loop uses it:
//
//   1. globalGradNorm over every gradient the step will apply (after the
//      data-parallel reduction; see gradSumOfSquares for sharded tensors);
//   2. computeGradClip turns that norm into the gradScale of the step, or
//      reports that the norm is not finite, in which case the step is
//      skipped (as Megatron skips an update whose gradients overflowed);
//   3. adamwStep / adamwStepMulti with lr = LrSchedule::lrForUpdate(t).
//
// Numerics follow torch.optim.AdamW (and Megatron's fused Adam with
// adam_w_mode), clip_grad_norm_ and Megatron's OptimizerParamScheduler, so a
// Braid run can be compared with a Megatron run step by step.
//
// Like the kernels of Kernels.h these work on raw buffers (arena addresses)
// and are instantiated for float and double. Unlike them they validate their
// scalar arguments and return a status: a wrong learning rate or a NaN clip
// scale must stop the run with a message rather than silently turn every
// parameter into NaN.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CPU_OPTIMIZER_H
#define BRAID_RUNTIME_CPU_OPTIMIZER_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include <cstdint>

namespace braid::cpu {

//===-- AdamW -------------------------------------------------------------===//

/// The hyper-parameters of AdamW that do not change during a run (the
/// learning rate does and is an argument of the step). Defaults are
/// PyTorch's and Megatron's.
struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  /// Added to sqrt(v̂), not to v̂ (as PyTorch and apex do). Must be > 0, a
  /// stricter rule than PyTorch's >= 0: with eps = 0 an element whose
  /// gradient has been 0 so far divides 0 by 0.
  double eps = 1e-8;
  /// Decoupled weight decay of adamwStep. adamwStepMulti takes one per
  /// tensor instead (0 for norms and biases) and ignores this field.
  double weightDecay = 0.01;
};

/// Checks 0 <= beta1, beta2 < 1, eps > 0 and weightDecay >= 0, all finite.
absl::Status validateAdamWConfig(const AdamWConfig &c);

/// One AdamW update of n elements at step `step` (1-based: the first update
/// of a run is step 1; bias correction needs step >= 1). With
/// g = grad * gradScale (gradScale carries clipping and any averaging over
/// micro-batches the gradients have not had yet), in this order:
///   param ← param − lr·wd·param                       (decoupled decay)
///   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
///   param ← param − (lr / (1−β1^t)) · m / (√v / √(1−β2^t) + eps)
/// which is p − lr·m̂/(√v̂ + eps) written as PyTorch evaluates it. Each
/// element is computed in double and rounded once when stored, so the float
/// kernel differs from the double one by the rounding of its state only.
///
/// Errors (nothing is written): invalid config, lr negative or not finite,
/// step < 1, gradScale negative or not finite (a non-finite gradient norm
/// must skip the step, see computeGradClip), n < 0, a null buffer with
/// n > 0. The four buffers must not overlap. Non-finite gradient elements
/// are not looked for here (that would cost a pass): globalGradNorm finds
/// them.
template <typename T>
absl::Status adamwStep(T *param, const T *grad, T *m, T *v, int64_t n,
                       const AdamWConfig &c, double lr, int64_t step,
                       double gradScale);

/// One parameter tensor of a multi-tensor update, with its own decay.
template <typename T> struct AdamWTensor {
  T *param;
  const T *grad;
  T *m;
  T *v;
  int64_t n;
  double weightDecay;
};

/// adamwStep on every tensor, each with its own weightDecay (c.weightDecay
/// is ignored). Every entry is validated before any is updated, so an error
/// leaves all parameters and moments as they were; an error names the index
/// of the entry at fault.
template <typename T>
absl::Status adamwStepMulti(absl::Span<const AdamWTensor<T>> tensors,
                            const AdamWConfig &c, double lr, int64_t step,
                            double gradScale);

//===-- Gradient norm and clipping ----------------------------------------===//

/// A gradient buffer to measure.
template <typename T> struct GradView {
  const T *data;
  int64_t n;
};

/// Σ g² over every element of every buffer, accumulated in double. This is
/// the quantity to all-reduce when the gradients are sharded (tensor or
/// pipeline parallel, ZeRO): each rank sums its shards — counting a tensor
/// replicated across tensor-parallel ranks once in all, on one rank only (as
/// Megatron's clip_grad_norm_fp32 does) or as 1/tp of it on each (as the
/// plan's GRAD_NORM over a group does) — and the norm is the square root of
/// the reduced sum. NaN if any element is NaN, +inf if any is infinite
/// (or the sum overflows). Errors: n < 0, a null buffer with n > 0.
template <typename T>
absl::StatusOr<double> gradSumOfSquares(absl::Span<const GradView<T>> grads);

/// sqrt(gradSumOfSquares(grads)): the global L2 norm of unsharded
/// gradients; 0 for no elements.
template <typename T>
absl::StatusOr<double> globalGradNorm(absl::Span<const GradView<T>> grads);

/// What clipping makes of a global gradient norm.
struct GradClip {
  /// The norm of the gradient the update applies: rawNorm · preScale. This
  /// is the grad_norm the step reports.
  double norm;
  /// The gradScale to pass to adamwStep: preScale · min(1, coef) with
  /// coef = maxNorm / (norm + 1e-6). NaN when !finite, so a training loop
  /// that ignores the flag gets an error from adamwStep instead of NaN
  /// parameters.
  double scale;
  /// Whether coef < 1 scaled the gradient down.
  bool clipped;
  /// False when the norm is NaN or infinite: the step must be skipped (and
  /// the lr schedule not advanced, as Megatron does).
  bool finite;
};

/// The clip coefficient of PyTorch's clip_grad_norm_ and Megatron's
/// clip_grad_norm_fp32: coef = maxNorm / (norm + 1e-6), applied only when
/// coef < 1 (so a norm equal to maxNorm is scaled by 1/(1 + 1e-6/maxNorm)).
/// maxNorm = 0 turns clipping off (Megatron's clip_grad 0); the norm is still
/// checked. preScale is a factor the gradients still need before they are
/// the gradient of the loss (1/micro-batches when they were summed), so
/// that the clip acts on the true gradient's norm.
/// Errors: rawNorm negative, maxNorm negative or not finite, preScale <= 0
/// or not finite. A non-finite rawNorm is not an error but finite = false.
absl::StatusOr<GradClip> computeGradClip(double rawNorm, double maxNorm,
                                         double preScale = 1.0);

//===-- Learning-rate schedule --------------------------------------------===//

/// How the lr goes from lr to min_lr after warmup (the job's lr_decay).
/// Megatron's inverse-square-root and WSD styles are not implemented.
enum class LrDecayStyle { kConstant, kLinear, kCosine };

/// "constant", "linear" or "cosine" (Megatron's names), anything else is an
/// error that lists them.
absl::StatusOr<LrDecayStyle> parseLrDecayStyle(absl::string_view name);
absl::string_view lrDecayStyleName(LrDecayStyle style);

struct LrScheduleConfig {
  /// The peak lr, reached at the end of warmup (the job's lr, Megatron's
  /// max_lr).
  double lr = 0.0;
  /// The floor after decay_steps (min_lr); unused by kConstant.
  double minLr = 0.0;
  /// The lr at step 0 that warmup starts from (Megatron's lr_warmup_init).
  double initLr = 0.0;
  int64_t warmupSteps = 0;
  /// Where decay ends (Megatron's lr_decay_iters, which defaults to the
  /// run's steps). Unused by kConstant.
  int64_t decaySteps = 0;
  LrDecayStyle style = LrDecayStyle::kLinear;
};

/// Checks 0 <= min_lr <= lr, 0 <= init_lr <= lr (all finite),
/// warmup_steps >= 0 and, for linear and cosine, 1 <= decay_steps and
/// warmup_steps <= decay_steps. Megatron asserts warmup < decay even for
/// constant; Braid does not ask for a decay length a constant schedule does
/// not use, and allows warmup == decay (the lr falls to min_lr right after
/// warmup); every config Megatron accepts gives the same values here.
absl::Status validateLrScheduleConfig(const LrScheduleConfig &c);

/// Megatron's OptimizerParamScheduler, counted in optimizer steps.
class LrSchedule {
public:
  static absl::StatusOr<LrSchedule> create(const LrScheduleConfig &config);

  /// Megatron's get_lr() when its num_steps is `numSteps` (negative is read
  /// as 0):
  ///   warmup_steps > 0 and s <= warmup_steps:
  ///       init_lr + (lr − init_lr) · s / warmup_steps
  ///   constant:               lr
  ///   s > decay_steps:        min_lr
  ///   otherwise, with r = (s − warmup) / (decay − warmup):
  ///     linear:  min_lr + (lr − min_lr) · (1 − r)
  ///     cosine:  min_lr + (lr − min_lr) · 0.5 · (1 + cos(π r))
  /// evaluated in Megatron's order, so the values are bit-identical to its
  /// Python doubles when the counts are in the same unit. Megatron turns
  /// --lr-warmup-iters and --lr-decay-iters into samples (× global batch)
  /// and steps by the global batch; counting in steps here gives the same
  /// values to the last bit or two.
  double lrAt(int64_t numSteps) const;

  /// The lr of update t (1-based) in Megatron's training loop. Megatron's
  /// scheduler is constructed with step(0) and stepped after each
  /// successful optimizer.step(), so update t runs with num_steps = t − 1:
  /// with a warmup, update 1 uses init_lr (0 by default, so the first update
  /// moves no parameter, only the moments) and update warmup_steps + 1 is
  /// the first at the peak lr. Skipped updates (non-finite gradients) do not
  /// count. Use lrAt(t) instead for the "first update already at
  /// lr/warmup_steps" convention.
  double lrForUpdate(int64_t update) const { return lrAt(update - 1); }

  const LrScheduleConfig &config() const { return config_; }

private:
  explicit LrSchedule(const LrScheduleConfig &config) : config_(config) {}

  LrScheduleConfig config_;
};

} // namespace braid::cpu

#endif // BRAID_RUNTIME_CPU_OPTIMIZER_H
