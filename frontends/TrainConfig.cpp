//===- TrainConfig.cpp - The resolved `train` section of a job ------------===//

#include "frontends/TrainConfig.h"

#include "llvm/Support/raw_ostream.h"

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
  auto fail = [](const char *field, double value, const char *rule) {
    std::string s;
    llvm::raw_string_ostream(s) << "train." << field << " = " << value
                                << " must be " << rule;
    return llvm::createStringError(llvm::inconvertibleErrorCode(), s);
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
  return c;
}
