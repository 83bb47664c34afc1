//===- TrainConfig.cpp - The resolved `train` section of a job ------------===//

#include "frontends/TrainConfig.h"

#include "frontends/Format.h"

#include <cmath>

using namespace braid;

llvm::Expected<TrainConfig> braid::resolveTrain(const spec::JobSpec &job) {
  const spec::TrainSpec &t = job.train();
  TrainConfig c;
  if (t.has_adam_beta1())
    c.adamBeta1 = t.adam_beta1();
  if (t.has_adam_beta2())
    c.adamBeta2 = t.adam_beta2();
  if (t.has_adam_eps())
    c.adamEps = t.adam_eps();
  if (t.has_weight_decay())
    c.weightDecay = t.weight_decay();
  if (t.has_clip_grad())
    c.clipGrad = t.clip_grad();
  if (t.has_steps())
    c.steps = t.steps();
  if (t.has_seed())
    c.seed = t.seed();
  if (t.has_lr())
    c.lr = t.lr();
  c.minLr = t.has_min_lr() ? t.min_lr() : c.lr / 10;
  if (t.has_warmup_steps())
    c.warmupSteps = t.warmup_steps();
  if (t.has_lr_decay())
    c.lrDecay = t.lr_decay();
  if (t.has_loss_scale())
    c.lossScale = t.loss_scale();
  if (t.has_initial_loss_scale())
    c.initialLossScale = t.initial_loss_scale();
  if (t.has_min_loss_scale())
    c.minLossScale = t.min_loss_scale();
  if (t.has_loss_scale_window())
    c.lossScaleWindow = t.loss_scale_window();
  if (t.has_hysteresis())
    c.hysteresis = t.hysteresis();
  if (t.has_eval_interval())
    c.evalInterval = t.eval_interval();
  c.evalIters = t.has_eval_iters() ? t.eval_iters()
                : c.evalInterval > 0 ? 100
                                     : 0;
  // Integer fields print as integers, the others as their shortest digits.
  auto failWith = [](const char *field, const std::string &value,
                     const char *rule) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   std::string("train.") + field + " = " +
                                       value + " must be " + rule);
  };
  auto fail = [&](const char *field, double value, const char *rule) {
    return failWith(field, formatNumber(value), rule);
  };
  auto failInt = [&](const char *field, int64_t value, const char *rule) {
    return failWith(field, std::to_string(value), rule);
  };
  if (!(c.adamBeta1 >= 0 && c.adamBeta1 < 1))
    return fail("adam_beta1", c.adamBeta1, "in [0, 1)");
  if (!(c.adamBeta2 >= 0 && c.adamBeta2 < 1))
    return fail("adam_beta2", c.adamBeta2, "in [0, 1)");
  if (!(c.adamEps > 0) || std::isinf(c.adamEps))
    return fail("adam_eps", c.adamEps, "> 0");
  if (!(c.weightDecay >= 0) || std::isinf(c.weightDecay))
    return fail("weight_decay", c.weightDecay, ">= 0");
  if (!(c.clipGrad >= 0) || std::isinf(c.clipGrad))
    return fail("clip_grad", c.clipGrad, ">= 0 (0 disables clipping)");
  if (c.steps < 1)
    return failInt("steps", c.steps, ">= 1");
  if (c.seed < 0)
    return failInt("seed", c.seed, ">= 0");
  if (!(c.lr >= 0) || std::isinf(c.lr))
    return fail("lr", c.lr, ">= 0");
  if (!(c.minLr >= 0 && c.minLr <= c.lr))
    return fail("min_lr", c.minLr, "in [0, lr]");
  if (c.warmupSteps < 0 || c.warmupSteps > c.steps)
    return failInt("warmup_steps", c.warmupSteps, "in [0, steps]");
  const bool fp16 = t.has_precision() && t.precision() == spec::FP16;
  for (auto [set, field] :
       {std::pair<bool, const char *>{t.has_loss_scale(), "loss_scale"},
        {t.has_initial_loss_scale(), "initial_loss_scale"},
        {t.has_min_loss_scale(), "min_loss_scale"},
        {t.has_loss_scale_window(), "loss_scale_window"},
        {t.has_hysteresis(), "hysteresis"}})
    if (set && !fp16)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          std::string("train.") + field +
              " scales the loss of fp16 training: it needs train.precision "
              "FP16");
  if (!(c.lossScale >= 0) || std::isinf(c.lossScale))
    return fail("loss_scale", c.lossScale, ">= 0 (0: dynamic)");
  if (!(c.minLossScale > 0) || std::isinf(c.minLossScale))
    return fail("min_loss_scale", c.minLossScale, "> 0");
  if (!(c.initialLossScale >= c.minLossScale) ||
      std::isinf(c.initialLossScale))
    return fail("initial_loss_scale", c.initialLossScale,
                ">= min_loss_scale and finite");
  if (c.lossScaleWindow < 1)
    return failInt("loss_scale_window", c.lossScaleWindow, ">= 1");
  if (c.hysteresis < 1)
    return failInt("hysteresis", c.hysteresis, ">= 1");
  if (c.evalInterval < 0)
    return failInt("eval_interval", c.evalInterval, ">= 0 (0: no validation)");
  if (c.evalIters < 0 || (c.evalInterval > 0 && c.evalIters < 1))
    return failInt("eval_iters", c.evalIters,
                   c.evalInterval > 0 ? ">= 1 with an eval_interval" : ">= 0");
  if (c.lrDecay != "constant" && c.lrDecay != "linear" && c.lrDecay != "cosine")
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "train.lr_decay = \"" + c.lrDecay +
            "\" must be one of constant, linear, cosine");
  return c;
}
