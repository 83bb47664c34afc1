//===- PipelinePlans.h - A tiny model, whole and in two stages --*- C++ -*-===//
//
// Hand-written plans of one small language model (an embedding, then an
// untied output projection and the cross-entropy), for the trainer's tests:
// the whole model on one rank, and the same model as a pipeline of two
// stages (the embedding on stage 0, the head and the loss on stage 1) that
// exchange the activations and their gradient with SEND and RECV. Both
// clip the gradients to one global norm: over "pp" in the pipeline, each
// stage adding its own gradient's squares. Trained on the same data, the two
// must agree.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TESTS_RUNTIME_EXEC_PIPELINEPLANS_H
#define BRAID_TESTS_RUNTIME_EXEC_PIPELINEPLANS_H

#include "runtime/data/IndexedDataset.h"
#include "runtime/plan/PlanLoader.h"

#include "PlanBuilder.h"

#include "absl/status/status.h"

#include <random>
#include <string>
#include <vector>

namespace braid::exec_test {

/// n values in [-2, 2), the same for the same seed.
inline std::vector<double> values(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> v(n);
  for (double &x : v)
    x = u(gen);
  return v;
}

struct TinyModel {
  int64_t vocab = 8, hidden = 4, batch = 2, seq = 4, micros = 4;
  /// Small enough that the gradients are clipped.
  double maxNorm = 0.05;
};

inline plan::Training tinyTraining(const TinyModel &m) {
  plan::Training t;
  t.set_steps(3);
  t.set_seed(7);
  t.set_lr(0.05);
  t.set_min_lr(0.005);
  t.set_warmup_steps(0);
  t.set_lr_decay("cosine");
  t.set_micro_batch_size(m.batch);
  t.set_seq_length(m.seq);
  t.set_micro_batches(m.micros);
  t.set_init_std(0.5);
  t.set_num_layers(1);
  t.set_data_order("sequential");
  return t;
}

/// The optimizer of one parameter: GRAD_NORM over `group` (empty: none) of
/// `grads`, then AdamW on each parameter with the clipping scale.
inline void addUpdate(PlanBuilder &b, plan::Function *fn,
                      const std::vector<int> &params,
                      const std::vector<int> &grads,
                      const std::vector<int> &moments, int lr, int step,
                      int norm, int scale, const std::string &group) {
  plan::Instruction *gn = b.add(fn, plan::GRAD_NORM, grads, {norm, scale});
  (*gn->mutable_float_attrs())["max_norm"] = 0; // set by the caller's model
  if (!group.empty()) {
    gn->add_group(group);
    (*gn->mutable_int_attrs())["split_inputs"] = int64_t(grads.size());
  }
  for (size_t k = 0; k < params.size(); ++k) {
    plan::Instruction *adam = b.add(
        fn, plan::ADAMW,
        {params[k], grads[k], moments[2 * k], moments[2 * k + 1], lr, step,
         scale},
        {params[k], moments[2 * k], moments[2 * k + 1]});
    auto &f = *adam->mutable_float_attrs();
    f["beta1"] = 0.9;
    f["beta2"] = 0.95;
    f["eps"] = 1e-8;
    f["weight_decay"] = 0.1;
  }
}

inline void setMaxNorm(plan::Plan &plan, double maxNorm) {
  for (plan::Function &fn : *plan.mutable_functions())
    for (plan::Instruction &inst : *fn.mutable_body())
      if (inst.kernel() == plan::GRAD_NORM)
        (*inst.mutable_float_attrs())["max_norm"] = maxNorm;
}

/// The whole model on one rank: micro_step is the forward and backward.
inline plan::Plan tinySerialPlan(const TinyModel &m) {
  using namespace braid::plan;
  PlanBuilder b;
  int64_t V = m.vocab, H = m.hidden, B = m.batch, S = m.seq;
  int tokens = b.buffer("tokens", I32, {B, S}, INPUT);
  int targets = b.buffer("targets", I32, {B, S}, INPUT);
  int emb = b.buffer("embed.weight", F32, {V, H}, PARAMETER);
  int head = b.buffer("lm_head.weight", F32, {V, H}, PARAMETER);
  int h = b.buffer("h", F32, {B, S, H}, ACTIVATION);
  int logits = b.buffer("logits", F32, {B, S, V}, ACTIVATION);
  int loss = b.buffer("loss", F32, {}, ACTIVATION);
  int lossGrad = b.buffer("loss_grad", F32, {}, INPUT);
  int dlogits = b.buffer("dlogits", F32, {B, S, V}, ACTIVATION);
  int dh = b.buffer("dh", F32, {B, S, H}, ACTIVATION);
  int demb = b.buffer("embed.weight.grad", F32, {V, H}, GRADIENT);
  int dhead = b.buffer("lm_head.weight.grad", F32, {V, H}, GRADIENT);
  std::vector<int> moments;
  for (const char *name : {"embed.m", "embed.v", "head.m", "head.v"})
    moments.push_back(b.buffer(name, F32, {V, H}, OPTIMIZER_STATE));
  int lr = b.buffer("lr", F32, {}, INPUT);
  int step = b.buffer("step", I64, {}, INPUT);
  int norm = b.buffer("grad_norm", F32, {}, WORKSPACE);
  int scale = b.buffer("scale", F32, {}, WORKSPACE);
  auto t1 = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["transpose_w"] = 1;
  };
  auto ignore = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["ignore_index"] = -100;
  };
  Function *zero = b.function("zero_grads");
  b.add(zero, ZERO, {}, {demb});
  b.add(zero, ZERO, {}, {dhead});
  Function *micro = b.function("micro_step");
  b.add(micro, EMBEDDING, {emb, tokens}, {h});
  t1(b.add(micro, LINEAR, {h, head}, {logits}));
  ignore(b.add(micro, CROSS_ENTROPY, {logits, targets}, {loss}));
  ignore(b.add(micro, CROSS_ENTROPY_GRAD, {logits, targets, lossGrad},
               {dlogits}));
  t1(b.add(micro, LINEAR_GRAD_WEIGHT, {h, dlogits}, {dhead}));
  t1(b.add(micro, LINEAR_GRAD_INPUT, {dlogits, head}, {dh}));
  b.add(micro, EMBEDDING_GRAD, {dh, tokens}, {demb});
  Function *update = b.function("update");
  addUpdate(b, update, {emb, head}, {demb, dhead}, moments, lr, step, norm,
            scale, "");
  setMaxNorm(b.plan, m.maxNorm);
  *b.plan.mutable_training() = tinyTraining(m);
  plan::StepFunctions *fns = b.plan.mutable_training()->mutable_step();
  fns->set_zero_grads("zero_grads");
  fns->set_micro_step("micro_step");
  fns->set_update("update");
  return b.plan;
}

/// The model in two stages, on a mesh whose axis "pp" has 2 ranks (and
/// `extraAxis` of `extraSize` ranks after it, when given: replicas that
/// compute the same). `schedule` is "gpipe" (every forward, then every
/// backward: stage 0 and 1 hold all micro-batches, one slot each) or "1f1b"
/// (stage 0 holds 2 micro-batches, stage 1 one). The stages' buffers share
/// the arena's bytes: each starts at 0, and each has its own arena.
inline plan::Plan tinyPipelinePlan(const TinyModel &m,
                                   const std::string &schedule,
                                   const std::string &extraAxis = "",
                                   int64_t extraSize = 1) {
  using namespace braid::plan;
  PlanBuilder b;
  b.plan.mutable_mesh()->set_axes(0, "pp");
  b.plan.mutable_mesh()->set_sizes(0, 2);
  if (!extraAxis.empty()) {
    b.plan.mutable_mesh()->add_axes(extraAxis);
    b.plan.mutable_mesh()->add_sizes(extraSize);
  }
  bool gpipe = schedule == "gpipe";
  int64_t slots0 = gpipe ? m.micros : std::min<int64_t>(2, m.micros);
  int64_t slots1 = gpipe ? m.micros : 1;
  int64_t V = m.vocab, H = m.hidden, B = m.batch, S = m.seq;
  auto t1 = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["transpose_w"] = 1;
  };
  auto ignore = [](Instruction *inst) {
    (*inst->mutable_int_attrs())["ignore_index"] = -100;
  };
  auto p2p = [](Instruction *inst, int64_t peer) {
    inst->set_rank_axis("pp");
    (*inst->mutable_int_attrs())["peer"] = peer;
  };
  auto scalars = [&](int stage, int *lr, int *step, int *norm, int *scale) {
    *lr = b.buffer("lr", F32, {}, INPUT, 0, stage);
    *step = b.buffer("step", I64, {}, INPUT, 0, stage);
    *norm = b.buffer("grad_norm", F32, {}, WORKSPACE, 0, stage);
    *scale = b.buffer("scale", F32, {}, WORKSPACE, 0, stage);
  };
  int lr, step, norm, scale;

  // Stage 0: the embedding.
  int tokens = b.buffer("tokens", I32, {B, S}, INPUT, slots0, 0);
  int emb = b.buffer("embed.weight", F32, {V, H}, PARAMETER, 0, 0);
  int h = b.buffer("h", F32, {B, S, H}, ACTIVATION, slots0, 0);
  int dh = b.buffer("dh", F32, {B, S, H}, ACTIVATION, slots0, 0);
  int demb = b.buffer("embed.weight.grad", F32, {V, H}, GRADIENT, 0, 0);
  std::vector<int> moments0 = {
      b.buffer("embed.m", F32, {V, H}, OPTIMIZER_STATE, 0, 0),
      b.buffer("embed.v", F32, {V, H}, OPTIMIZER_STATE, 0, 0)};
  scalars(0, &lr, &step, &norm, &scale);
  Function *f = b.function("s0.zero_grads");
  b.add(f, ZERO, {}, {demb});
  f = b.function("s0.forward");
  b.add(f, EMBEDDING, {emb, tokens}, {h});
  p2p(b.add(f, SEND, {h}, {}), +1);
  f = b.function("s0.backward");
  p2p(b.add(f, RECV, {}, {dh}), +1);
  b.add(f, EMBEDDING_GRAD, {dh, tokens}, {demb});
  f = b.function("s0.update");
  addUpdate(b, f, {emb}, {demb}, moments0, lr, step, norm, scale, "pp");
  int64_t arena0 = b.offset;

  // Stage 1: the head and the loss, from byte 0 again.
  b.offset = 0;
  int targets = b.buffer("targets", I32, {B, S}, INPUT, slots1, 1);
  int head = b.buffer("lm_head.weight", F32, {V, H}, PARAMETER, 0, 1);
  int h1 = b.buffer("h.received", F32, {B, S, H}, ACTIVATION, slots1, 1);
  int logits = b.buffer("logits", F32, {B, S, V}, ACTIVATION, slots1, 1);
  int loss = b.buffer("loss", F32, {}, ACTIVATION, slots1, 1);
  int lossGrad = b.buffer("loss_grad", F32, {}, INPUT, 0, 1);
  int dlogits = b.buffer("dlogits", F32, {B, S, V}, ACTIVATION, 0, 1);
  int dh1 = b.buffer("dh.sent", F32, {B, S, H}, ACTIVATION, slots1, 1);
  int dhead = b.buffer("lm_head.weight.grad", F32, {V, H}, GRADIENT, 0, 1);
  std::vector<int> moments1 = {
      b.buffer("head.m", F32, {V, H}, OPTIMIZER_STATE, 0, 1),
      b.buffer("head.v", F32, {V, H}, OPTIMIZER_STATE, 0, 1)};
  scalars(1, &lr, &step, &norm, &scale);
  f = b.function("s1.zero_grads");
  b.add(f, ZERO, {}, {dhead});
  f = b.function("s1.forward");
  p2p(b.add(f, RECV, {}, {h1}), -1);
  t1(b.add(f, LINEAR, {h1, head}, {logits}));
  ignore(b.add(f, CROSS_ENTROPY, {logits, targets}, {loss}));
  f = b.function("s1.backward");
  ignore(b.add(f, CROSS_ENTROPY_GRAD, {logits, targets, lossGrad}, {dlogits}));
  t1(b.add(f, LINEAR_GRAD_WEIGHT, {h1, dlogits}, {dhead}));
  t1(b.add(f, LINEAR_GRAD_INPUT, {dlogits, head}, {dh1}));
  p2p(b.add(f, SEND, {dh1}, {}), -1);
  f = b.function("s1.update");
  addUpdate(b, f, {head}, {dhead}, moments1, lr, step, norm, scale, "pp");
  int64_t arena1 = b.offset;
  b.plan.set_arena_bytes(std::max(arena0, arena1));
  setMaxNorm(b.plan, m.maxNorm);

  *b.plan.mutable_training() = tinyTraining(m);
  Pipeline *p = b.plan.mutable_pipeline();
  p->set_schedule(schedule);
  auto call = [](Stage *stage, ScheduleStep::Kind kind, int64_t micro,
                 int64_t slot) {
    ScheduleStep *s = stage->add_schedule();
    s->set_kind(kind);
    s->set_micro_batch(micro);
    s->set_slot(slot);
  };
  for (int s = 0; s < 2; ++s) {
    Stage *stage = p->add_stages();
    std::string prefix = s ? "s1." : "s0.";
    stage->set_first_layer(0);
    stage->set_num_layers(s);
    stage->set_zero_grads(prefix + "zero_grads");
    stage->set_forward(prefix + "forward");
    stage->set_backward(prefix + "backward");
    stage->set_update(prefix + "update");
    int64_t slots = s ? slots1 : slots0;
    stage->set_slots(slots);
    stage->set_arena_bytes(s ? arena1 : arena0);
    if (gpipe) {
      for (int64_t k = 0; k < m.micros; ++k)
        call(stage, ScheduleStep::FORWARD, k, k);
      for (int64_t k = 0; k < m.micros; ++k)
        call(stage, ScheduleStep::BACKWARD, k, k);
      continue;
    }
    // 1F1B: stage s runs (2 - s) - 1 extra forwards first, then alternates;
    // micro-batch k is on slot k mod slots.
    int64_t warmup = std::min<int64_t>(1 - s, m.micros), next = 0;
    for (; next < warmup; ++next)
      call(stage, ScheduleStep::FORWARD, next, next % slots);
    for (int64_t k = 0; k < m.micros; ++k) {
      if (next < m.micros) {
        call(stage, ScheduleStep::FORWARD, next, next % slots);
        ++next;
      }
      call(stage, ScheduleStep::BACKWARD, k, k % slots);
    }
  }
  return b.plan;
}

/// A dataset of one document of `n` tokens below `vocab`, at `prefix`.
inline absl::Status writeTinyDataset(const std::string &prefix, int64_t vocab,
                                     int64_t n = 600) {
  absl::StatusOr<data::IndexedDatasetWriter> writer =
      data::IndexedDatasetWriter::Create(prefix, data::DType::kUInt16);
  if (!writer.ok())
    return writer.status();
  std::vector<int64_t> tokens(n);
  for (int64_t i = 0; i < n; ++i)
    tokens[i] = (i * 5 + i / 7 + (i * i) % 3) % vocab;
  if (absl::Status s = writer->AddSequence(tokens); !s.ok())
    return s;
  if (absl::Status s = writer->EndDocument(); !s.ok())
    return s;
  return writer->Finish();
}

} // namespace braid::exec_test

#endif // BRAID_TESTS_RUNTIME_EXEC_PIPELINEPLANS_H
