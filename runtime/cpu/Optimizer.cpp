//===- Optimizer.cpp - AdamW, gradient clipping and the lr schedule -------===//
//
// Scalar arguments are validated once per call, before any buffer is
// touched, so a failed call leaves the training state as it was and the
// loop can report the problem and stop (or skip the step).
//
// Errors name the job-file field where there is one (adam_beta1, lr,
// warmup_steps, ...), so that a message can be traced back to the input.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Optimizer.h"

#include "runtime/cpu/Parallel.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <vector>

namespace braid::cpu {
namespace {

// math.pi, so that the cosine schedule matches Megatron's Python bit for bit.
constexpr double kPi = 3.141592653589793;

// Megatron and PyTorch add this to the norm so that an all-zero gradient
// does not divide by zero; part of the definition of the clip coefficient.
constexpr double kClipNormEps = 1e-6;

absl::Status invalid(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

// The arguments of one step that do not depend on the tensor.
absl::Status validateStepArgs(const AdamWConfig &c, double lr, int64_t step,
                              double gradScale) {
  if (absl::Status s = validateAdamWConfig(c); !s.ok())
    return s;
  if (!std::isfinite(lr) || lr < 0)
    return invalid(
        absl::StrCat("lr is ", lr, ", expected a finite value >= 0"));
  if (step < 1)
    return invalid(
        absl::StrCat("step is ", step,
                     ", expected >= 1 (steps count from 1 for the bias "
                     "correction)"));
  if (!std::isfinite(gradScale) || gradScale < 0)
    return invalid(absl::StrCat(
        "grad_scale is ", gradScale,
        ", expected a finite value >= 0 (a non-finite gradient norm means the "
        "step must be skipped)"));
  return absl::OkStatus();
}

template <typename T>
absl::Status validateTensor(const T *param, const T *grad, const T *m,
                            const T *v, int64_t n, double weightDecay) {
  if (n < 0)
    return invalid(absl::StrCat("n is ", n, ", expected >= 0"));
  if (n > 0 && (!param || !grad || !m || !v))
    return invalid(absl::StrCat(
        "a null buffer for ", n, " elements (param ", param ? "set" : "null",
        ", grad ", grad ? "set" : "null", ", m ", m ? "set" : "null", ", v ",
        v ? "set" : "null", ")"));
  if (!std::isfinite(weightDecay) || weightDecay < 0)
    return invalid(absl::StrCat("weight_decay is ", weightDecay,
                                ", expected a finite value >= 0"));
  return absl::OkStatus();
}

/// The scalars of one tensor's update.
struct AdamWScalars {
  double b1, b2, gradScale, decay, stepSize, invSqrtBc2, eps;
};

/// Elements [i0, i1) of the update, in double whatever T is.
template <typename T>
[[gnu::always_inline]] inline void adamwElements(T *param, const T *grad, T *m,
                                                 T *v, int64_t i0, int64_t i1,
                                                 const AdamWScalars &k) {
  for (int64_t i = i0; i < i1; ++i) {
    const double g = static_cast<double>(grad[i]) * k.gradScale;
    const double mi = k.b1 * static_cast<double>(m[i]) + (1.0 - k.b1) * g;
    const double vi = k.b2 * static_cast<double>(v[i]) + (1.0 - k.b2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    // The decay uses the parameter before this step's update, as both
    // PyTorch (param.mul_ first) and apex (decay * p_old in the update) do.
    const double p = static_cast<double>(param[i]) * k.decay;
    param[i] = static_cast<T>(
        p - k.stepSize * mi / (std::sqrt(vi) * k.invSqrtBc2 + k.eps));
  }
}

// The element loop compiled for AVX-512, AVX2 and the baseline x86-64, the
// one the CPU has chosen when the program loads (an ifunc). The same
// operations in the same order, none contracted into multiply-adds
// (-ffp-contract=off, runtime/cpu/CMakeLists.txt), all of them exactly
// rounded: the same bits whichever runs. AVX2's four doubles a vector
// against SSE2's two: 2.5 against 3.7 ns an element on one core here.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BRAID_ADAMW_CLONES                                                     \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BRAID_ADAMW_CLONES
#endif

BRAID_ADAMW_CLONES
void adamwBlock(float *param, const float *grad, float *m, float *v,
                int64_t i0, int64_t i1, const AdamWScalars &k) {
  adamwElements(param, grad, m, v, i0, i1, k);
}

BRAID_ADAMW_CLONES
void adamwBlock(double *param, const double *grad, double *m, double *v,
                int64_t i0, int64_t i1, const AdamWScalars &k) {
  adamwElements(param, grad, m, v, i0, i1, k);
}

// The update itself; all arguments have been validated.
template <typename T>
void adamwUpdate(T *param, const T *grad, T *m, T *v, int64_t n,
                 const AdamWConfig &c, double weightDecay, double lr,
                 int64_t step, double gradScale) {
  const double b1 = c.beta1, b2 = c.beta2;
  // PyTorch's _single_tensor_adamw: step_size = lr / bias_correction1 and
  // denom = sqrt(v) / sqrt(bias_correction2) + eps. pow(beta, t) underflows
  // to 0 for long runs, which is the correct limit.
  const double decay = 1.0 - lr * weightDecay;
  const double stepSize = lr / (1.0 - std::pow(b1, static_cast<double>(step)));
  const double invSqrtBc2 =
      1.0 / std::sqrt(1.0 - std::pow(b2, static_cast<double>(step)));
  // Each element's update is its own: element blocks on the threads give
  // the serial loop's bits (Parallel.h).
  const AdamWScalars k{b1, b2, gradScale, decay, stepSize, invSqrtBc2, c.eps};
  parallelBlocks(n, kElementBlock, kTranscendentalCost,
                 [&](int64_t i0, int64_t i1) {
                   adamwBlock(param, grad, m, v, i0, i1, k);
                 });
}

} // namespace

//===-- AdamW -------------------------------------------------------------===//

absl::Status validateAdamWConfig(const AdamWConfig &c) {
  // !(x >= 0 && x < 1) also rejects NaN.
  if (!(c.beta1 >= 0 && c.beta1 < 1))
    return invalid(
        absl::StrCat("adam_beta1 is ", c.beta1, ", expected [0, 1)"));
  if (!(c.beta2 >= 0 && c.beta2 < 1))
    return invalid(
        absl::StrCat("adam_beta2 is ", c.beta2, ", expected [0, 1)"));
  if (!std::isfinite(c.eps) || c.eps <= 0)
    return invalid(
        absl::StrCat("adam_eps is ", c.eps, ", expected a finite value > 0"));
  if (!std::isfinite(c.weightDecay) || c.weightDecay < 0)
    return invalid(absl::StrCat("weight_decay is ", c.weightDecay,
                                ", expected a finite value >= 0"));
  return absl::OkStatus();
}

template <typename T>
absl::Status adamwStep(T *param, const T *grad, T *m, T *v, int64_t n,
                       const AdamWConfig &c, double lr, int64_t step,
                       double gradScale) {
  if (absl::Status s = validateStepArgs(c, lr, step, gradScale); !s.ok())
    return s;
  if (absl::Status s = validateTensor(param, grad, m, v, n, c.weightDecay);
      !s.ok())
    return s;
  adamwUpdate(param, grad, m, v, n, c, c.weightDecay, lr, step, gradScale);
  return absl::OkStatus();
}

template <typename T>
absl::Status adamwStepMulti(absl::Span<const AdamWTensor<T>> tensors,
                            const AdamWConfig &c, double lr, int64_t step,
                            double gradScale) {
  // c.weightDecay is replaced per tensor; validate the rest of the config
  // with a decay that is always valid so that an unused field cannot fail.
  AdamWConfig shared = c;
  shared.weightDecay = 0.0;
  if (absl::Status s = validateStepArgs(shared, lr, step, gradScale); !s.ok())
    return s;
  // All entries first: a half-applied step could not be undone.
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamWTensor<T> &t = tensors[i];
    if (absl::Status s =
            validateTensor(t.param, t.grad, t.m, t.v, t.n, t.weightDecay);
        !s.ok())
      return invalid(absl::StrCat("tensor ", i, ": ", s.message()));
  }
  for (const AdamWTensor<T> &t : tensors)
    adamwUpdate(t.param, t.grad, t.m, t.v, t.n, shared, t.weightDecay, lr, step,
                gradScale);
  return absl::OkStatus();
}

//===-- Gradient norm and clipping ----------------------------------------===//

template <typename T>
absl::StatusOr<double> gradSumOfSquares(absl::Span<const GradView<T>> grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].n < 0)
      return invalid(absl::StrCat("gradient ", i, ": n is ", grads[i].n,
                                  ", expected >= 0"));
    if (grads[i].n > 0 && !grads[i].data)
      return invalid(absl::StrCat("gradient ", i, ": null buffer for ",
                                  grads[i].n, " elements"));
  }
  // Sums in double: a float gradient's squares cannot overflow them, and
  // the result does not depend on how the tensors are split into buffers
  // beyond double rounding. NaN and inf propagate, which is how a
  // non-finite gradient is found. Each tensor is taken in blocks of
  // kElementBlock elements on the threads, a block's squares over kLanes
  // interleaved partial sums (so that the loop vectorises), and the blocks'
  // sums added in order: a fixed order, the same for any number of threads.
  constexpr int64_t kLanes = 8;
  double sum = 0.0;
  std::vector<double> blockSums;
  for (const GradView<T> &g : grads) {
    blockSums.assign((g.n + kElementBlock - 1) / kElementBlock, 0.0);
    parallelBlocks(g.n, kElementBlock, 1, [&](int64_t i0, int64_t i1) {
      double lane[kLanes] = {};
      int64_t i = i0;
      for (; i + kLanes <= i1; i += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) {
          const double x = static_cast<double>(g.data[i + l]);
          lane[l] += x * x;
        }
      double block = 0.0;
      for (int64_t l = 0; l < kLanes; ++l)
        block += lane[l];
      for (; i < i1; ++i) {
        const double x = static_cast<double>(g.data[i]);
        block += x * x;
      }
      blockSums[i0 / kElementBlock] = block;
    });
    for (double block : blockSums)
      sum += block;
  }
  return sum;
}

template <typename T>
absl::StatusOr<double> globalGradNorm(absl::Span<const GradView<T>> grads) {
  absl::StatusOr<double> sum = gradSumOfSquares(grads);
  if (!sum.ok())
    return sum.status();
  return std::sqrt(*sum);
}

absl::StatusOr<GradClip> computeGradClip(double rawNorm, double maxNorm,
                                         double preScale) {
  if (rawNorm < 0) // NaN is reported below, not rejected here
    return invalid(
        absl::StrCat("gradient norm is ", rawNorm, ", expected >= 0"));
  if (!std::isfinite(maxNorm) || maxNorm < 0)
    return invalid(absl::StrCat("clip_grad is ", maxNorm,
                                ", expected a finite value >= 0 (0: no "
                                "clipping)"));
  if (!std::isfinite(preScale) || preScale <= 0)
    return invalid(absl::StrCat("gradient pre-scale is ", preScale,
                                ", expected a finite value > 0"));
  GradClip clip;
  clip.norm = rawNorm * preScale;
  clip.finite = std::isfinite(clip.norm);
  clip.clipped = false;
  if (!clip.finite) {
    clip.scale = std::nan("");
    return clip;
  }
  clip.scale = preScale;
  if (maxNorm > 0) {
    const double coef = maxNorm / (clip.norm + kClipNormEps);
    if (coef < 1.0) {
      clip.scale = preScale * coef;
      clip.clipped = true;
    }
  }
  return clip;
}

//===-- Learning-rate schedule --------------------------------------------===//

absl::StatusOr<LrDecayStyle> parseLrDecayStyle(absl::string_view name) {
  if (name == "constant")
    return LrDecayStyle::kConstant;
  if (name == "linear")
    return LrDecayStyle::kLinear;
  if (name == "cosine")
    return LrDecayStyle::kCosine;
  return invalid(absl::StrCat("lr_decay is \"", name,
                              "\", expected one of constant, linear, cosine"));
}

absl::string_view lrDecayStyleName(LrDecayStyle style) {
  switch (style) {
  case LrDecayStyle::kConstant:
    return "constant";
  case LrDecayStyle::kLinear:
    return "linear";
  case LrDecayStyle::kCosine:
    return "cosine";
  }
  return "unknown";
}

absl::Status validateLrScheduleConfig(const LrScheduleConfig &c) {
  if (!std::isfinite(c.lr) || c.lr < 0)
    return invalid(
        absl::StrCat("lr is ", c.lr, ", expected a finite value >= 0"));
  if (!std::isfinite(c.minLr) || c.minLr < 0)
    return invalid(
        absl::StrCat("min_lr is ", c.minLr, ", expected a finite value >= 0"));
  if (c.minLr > c.lr)
    return invalid(
        absl::StrCat("min_lr is ", c.minLr, ", expected <= lr (", c.lr, ")"));
  if (!std::isfinite(c.initLr) || c.initLr < 0 || c.initLr > c.lr)
    return invalid(absl::StrCat("init_lr is ", c.initLr,
                                ", expected in [0, lr (", c.lr, ")]"));
  if (c.warmupSteps < 0)
    return invalid(
        absl::StrCat("warmup_steps is ", c.warmupSteps, ", expected >= 0"));
  if (c.style == LrDecayStyle::kConstant)
    return absl::OkStatus();
  if (c.style != LrDecayStyle::kLinear && c.style != LrDecayStyle::kCosine)
    return invalid(absl::StrCat("lr_decay is ", static_cast<int>(c.style),
                                ", expected constant, linear or cosine"));
  if (c.decaySteps < 1)
    return invalid(absl::StrCat("decay_steps is ", c.decaySteps,
                                ", expected >= 1 for lr_decay ",
                                lrDecayStyleName(c.style)));
  if (c.warmupSteps > c.decaySteps)
    return invalid(absl::StrCat("warmup_steps is ", c.warmupSteps,
                                ", expected <= decay_steps (", c.decaySteps,
                                ")"));
  return absl::OkStatus();
}

absl::StatusOr<LrSchedule> LrSchedule::create(const LrScheduleConfig &config) {
  if (absl::Status s = validateLrScheduleConfig(config); !s.ok())
    return s;
  return LrSchedule(config);
}

double LrSchedule::lrAt(int64_t numSteps) const {
  const LrScheduleConfig &c = config_;
  const int64_t s = numSteps < 0 ? 0 : numSteps;
  // The branches and the order of the arithmetic are get_lr()'s.
  if (c.warmupSteps > 0 && s <= c.warmupSteps)
    return c.initLr + (c.lr - c.initLr) * static_cast<double>(s) /
                          static_cast<double>(c.warmupSteps);
  if (c.style == LrDecayStyle::kConstant)
    return c.lr;
  if (s > c.decaySteps)
    return c.minLr;
  // warmup <= s <= decay here and warmup < decay (warmup == decay has
  // returned above for every s), so the ratio is in [0, 1].
  const double ratio = static_cast<double>(s - c.warmupSteps) /
                       static_cast<double>(c.decaySteps - c.warmupSteps);
  const double delta = c.lr - c.minLr;
  const double coeff = c.style == LrDecayStyle::kLinear
                           ? 1.0 - ratio
                           : 0.5 * (std::cos(kPi * ratio) + 1.0);
  return c.minLr + coeff * delta;
}

//===-- Instantiations ----------------------------------------------------===//

#define BRAID_INSTANTIATE(T)                                                   \
  template absl::Status adamwStep<T>(T *, const T *, T *, T *, int64_t,        \
                                     const AdamWConfig &, double, int64_t,     \
                                     double);                                  \
  template absl::Status adamwStepMulti<T>(absl::Span<const AdamWTensor<T>>,    \
                                          const AdamWConfig &, double,         \
                                          int64_t, double);                    \
  template absl::StatusOr<double> gradSumOfSquares<T>(                         \
      absl::Span<const GradView<T>>);                                          \
  template absl::StatusOr<double> globalGradNorm<T>(                           \
      absl::Span<const GradView<T>>);

BRAID_INSTANTIATE(float)
BRAID_INSTANTIATE(double)
#undef BRAID_INSTANTIATE

} // namespace braid::cpu
