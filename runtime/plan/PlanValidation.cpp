//===- PlanValidation.cpp - What a plan must be to run --------------------===//
//
// ValidatePlan: the mesh, the buffers and their shards, the functions (each
// instruction by its kernel's check, runtime/plan/KernelChecks.cpp), the
// pipeline's stages and schedules and the training section.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/KernelChecks.h"
#include "runtime/plan/PlanInternal.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace braid::plan {
namespace {

/// Limits far above any real plan that keep every size computation in int64.
constexpr int64_t kMaxArenaBytes = int64_t(1) << 50;
constexpr int64_t kMaxWorldSize = int64_t(1) << 20;
constexpr int kMaxRank = 8;

using internal::isFloat;
using internal::numel;
using internal::shapeStr;

} // namespace

int64_t DTypeBytes(DType dtype) {
  switch (dtype) {
  case F32:
  case I32:
    return 4;
  case F64:
  case I64:
    return 8;
  case BF16:
  case F16:
    return 2;
  default:
    return 0;
  }
}

int64_t NumElements(const Buffer &b) { return numel(b); }

const std::string &MicroStepFunction(const StepFunctions &fns, int64_t m,
                                     int64_t micros) {
  if (m == 0 && !fns.first_micro_step().empty())
    return fns.first_micro_step();
  if (m + 1 == micros && !fns.last_micro_step().empty())
    return fns.last_micro_step();
  return fns.micro_step();
}

namespace {

/// A shard names an axis of the mesh and a dimension of the buffer, and its
/// blocks, split over the axis, add up to that dimension.
absl::Status validateShard(const Plan &plan, const Buffer &b,
                           const std::string &name) {
  const Shard &s = b.shard();
  int64_t ranks = 0;
  for (int i = 0; i < plan.mesh().axes_size(); ++i)
    if (plan.mesh().axes(i) == s.axis())
      ranks = plan.mesh().sizes(i);
  if (ranks == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is split along '", s.axis(), "', which is not a mesh axis"));
  if (s.dim() < 0 || s.dim() >= b.shape_size())
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is split along dimension ", s.dim(), " but has rank ",
        b.shape_size()));
  int64_t local = 0;
  for (int64_t block : s.blocks()) {
    if (block < 1 || block % ranks != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has a block of ", block, " that does not split into ",
          ranks, " equal parts"));
    local += block / ranks;
  }
  if (s.blocks_size() && local != b.shape(s.dim()))
    return absl::InvalidArgumentError(absl::StrCat(
        name, "'s blocks make ", local, " elements per rank along dimension ",
        s.dim(), ", not its ", b.shape(s.dim())));
  return absl::OkStatus();
}

/// The training section, when there is one: sizes the step loop multiplies
/// and step functions that exist.
absl::Status validateTraining(const Plan &plan,
                              const std::set<std::string> &functions) {
  if (!plan.has_training())
    return absl::OkStatus();
  const Training &t = plan.training();
  for (auto [field, value] :
       {std::pair<const char *, int64_t>{"steps", t.steps()},
        {"micro_batch_size", t.micro_batch_size()},
        {"seq_length", t.seq_length()},
        {"micro_batches", t.micro_batches()}})
    if (value < 1 || value > (int64_t(1) << 40))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.", field, " = ", value, " must be in [1, 2^40]"));
  for (auto [field, value] :
       {std::pair<const char *, int64_t>{"eval_interval", t.eval_interval()},
        {"eval_iters", t.eval_iters()}})
    if (value < 0 || value > (int64_t(1) << 40))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.", field, " = ", value, " must be in [0, 2^40]"));
  for (auto [field, value] :
       {std::pair<const char *, double>{"device_peak_flops",
                                        t.device_peak_flops()},
        {"model_flops_per_step", t.model_flops_per_step()}})
    if (!(value >= 0) || !std::isfinite(value))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.", field, " = ", value, " must be >= 0 and finite"));
  if (t.micro_batch_size() * t.micro_batches() > (int64_t(1) << 40) ||
      t.micro_batch_size() * t.seq_length() > (int64_t(1) << 40))
    return absl::InvalidArgumentError(
        "training: micro_batch_size x micro_batches x seq_length is too large");
  if (t.has_loss_scaling()) {
    const LossScaling &s = t.loss_scaling();
    auto finite = [](double v) { return std::isfinite(v); };
    if (!(s.static_scale() >= 0) || !finite(s.static_scale()))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.loss_scaling.static_scale = ", s.static_scale(),
          " must be >= 0 and finite (0: dynamic)"));
    if (s.static_scale() == 0 &&
        (!(s.min() > 0) || !(s.initial() >= s.min()) || !finite(s.initial()) ||
         s.window() < 1 || s.hysteresis() < 1))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.loss_scaling: a dynamic scale needs 0 < min <= initial "
          "(finite), window >= 1 and hysteresis >= 1; the plan has min ",
          s.min(), ", initial ", s.initial(), ", window ", s.window(),
          ", hysteresis ", s.hysteresis()));
  }
  // With a pipeline, the stages' functions make the step; an inference plan
  // has none (validateGeneration).
  if (plan.pipeline().stages_size() || plan.has_generation())
    return absl::OkStatus();
  const StepFunctions &step = t.step();
  if (step.micro_step().empty())
    return absl::InvalidArgumentError(
        "training.step.micro_step names no function");
  for (auto [field, name] : {std::pair<const char *, const std::string &>{
                                 "zero_grads", step.zero_grads()},
                             {"micro_step", step.micro_step()},
                             {"last_micro_step", step.last_micro_step()},
                             {"first_micro_step", step.first_micro_step()},
                             {"gather_params", step.gather_params()},
                             {"update", step.update()},
                             {"eval_step", step.eval_step()}})
    if (!name.empty() && !functions.count(name))
      return absl::InvalidArgumentError(absl::StrCat(
          "training.step.", field, " names function '", name,
          "', which the plan does not have"));
  return absl::OkStatus();
}

/// An inference plan: its shapes, its two functions, and the buffers the
/// host writes and reads (plan.proto's Generation), each of its shape.
absl::Status validateGeneration(const Plan &plan,
                                const std::set<std::string> &functions) {
  if (!plan.has_generation())
    return absl::OkStatus();
  const Generation &g = plan.generation();
  if (plan.pipeline().stages_size())
    return absl::InvalidArgumentError(
        "an inference plan (generation) cannot have pipeline stages");
  const int64_t b = g.max_batch(), s = g.max_seq_len(), p = g.prefill_chunk();
  if (b < 1 || b > (int64_t(1) << 20) || s < 2 || s > (int64_t(1) << 24) ||
      p < 1 || p > s)
    return absl::InvalidArgumentError(absl::StrCat(
        "generation: max_batch = ", b, ", max_seq_len = ", s,
        ", prefill_chunk = ", p, " must be in [1, 2^20], [2, 2^24] and [1, "
        "max_seq_len]"));
  for (auto [field, name] :
       {std::pair<const char *, const std::string &>{"prefill", g.prefill()},
        {"decode", g.decode()},
        {"reorder", g.reorder()}})
    if (!functions.count(name))
      return absl::InvalidArgumentError(absl::StrCat(
          "generation.", field, " names function '", name,
          "', which the plan does not have"));
  // The host's buffers, each once.
  std::map<std::string, const Buffer *> named;
  int64_t cacheBytes = 0;
  for (const Buffer &buffer : plan.buffers()) {
    if (buffer.role() == KV_CACHE)
      cacheBytes += numel(buffer) * DTypeBytes(buffer.dtype());
    if (!buffer.name().empty())
      named.emplace(buffer.name(), &buffer);
  }
  int64_t vocab = 0;
  for (const char *logits : {"prefill_logits", "decode_logits"}) {
    auto it = named.find(logits);
    if (it == named.end() || it->second->shape_size() != 3 ||
        it->second->shape(0) != b || it->second->shape(1) != 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "generation: the plan has no buffer '", logits, "' [", b,
          ", 1, vocab]"));
    vocab = it->second->shape(2);
  }
  // Split by vocabulary: the logits' columns are a rank's.
  if (!g.logits_axis().empty()) {
    int64_t ranks = 0;
    for (int i = 0; i < plan.mesh().axes_size(); ++i)
      if (plan.mesh().axes(i) == g.logits_axis())
        ranks = plan.mesh().sizes(i);
    if (ranks < 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "generation.logits_axis '", g.logits_axis(),
          "' is not an axis of the plan's mesh"));
    if (g.draw_candidates() < 1 || g.draw_candidates() > vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          "generation.draw_candidates = ", g.draw_candidates(),
          " must be in [1, ", vocab, "] (a rank's logits' columns)"));
    vocab *= ranks;
  } else if (g.draw_candidates() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generation.draw_candidates = ", g.draw_candidates(),
        " needs a logits_axis (the draw sees the whole logits)"));
  }
  struct Want {
    const char *name;
    std::vector<int64_t> shape;
    DType dtype;
  };
  for (const Want &w : std::initializer_list<Want>{
           {"prefill_tokens", {b, p}, I32},
           {"prefill_positions", {b, p}, I32},
           {"prefill_last", {b}, I32},
           {"decode_tokens", {b, 1}, I32},
           {"decode_positions", {b, 1}, I32},
           {"sampling", {3}, F32},
           {"seed", {2}, I32},
           {"draw_positions", {b}, I32},
           {"prefill_ids", {b}, I32},
           {"decode_ids", {b}, I32},
           {"beam_parents", {b}, I32}}) {
    auto it = named.find(w.name);
    if (it == named.end() || it->second->dtype() != w.dtype ||
        std::vector<int64_t>(it->second->shape().begin(),
                             it->second->shape().end()) != w.shape)
      return absl::InvalidArgumentError(absl::StrCat(
          "generation: the plan has no buffer '", w.name, "' [",
          absl::StrJoin(w.shape, ", "), "] of ", DType_Name(w.dtype)));
  }
  // Beam search's candidates: [B, K] of each function, one K.
  int64_t candidates = -1;
  for (auto [values, ids] :
       {std::pair<const char *, const char *>{"prefill_top_logprobs",
                                              "prefill_top_ids"},
        {"decode_top_logprobs", "decode_top_ids"}}) {
    auto v = named.find(values), i = named.find(ids);
    if (v == named.end() || i == named.end() ||
        v->second->dtype() != F32 || i->second->dtype() != I32 ||
        v->second->shape_size() != 2 || v->second->shape(0) != b ||
        i->second->shape_size() != 2 || i->second->shape(0) != b ||
        v->second->shape(1) != i->second->shape(1) ||
        (candidates >= 0 && v->second->shape(1) != candidates))
      return absl::InvalidArgumentError(absl::StrCat(
          "generation: the plan has no buffers '", values, "' [", b,
          ", K] F32 and '", ids, "' [", b, ", K] I32 of one K"));
    candidates = v->second->shape(1);
  }
  if (g.vocab_size() < 1 || g.vocab_size() > vocab)
    return absl::InvalidArgumentError(absl::StrCat(
        "generation.vocab_size = ", g.vocab_size(), " must be in [1, ", vocab,
        "] (the logits' columns)"));
  if (g.kv_cache_bytes() != cacheBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "generation.kv_cache_bytes = ", g.kv_cache_bytes(), " but the plan's "
        "KV_CACHE buffers hold ", cacheBytes, " bytes"));
  return absl::OkStatus();
}

/// The pipeline's shape: one "pp" rank per stage, stage functions that exist
/// and belong to one stage. Fills `stageOf` with each stage function's stage.
absl::Status validatePipeline(const Plan &plan,
                              const std::set<std::string> &functions,
                              std::map<std::string, int> *stageOf) {
  const Pipeline &p = plan.pipeline();
  int stages = p.stages_size();
  if (stages == 0)
    return absl::OkStatus();
  const Mesh &mesh = plan.mesh();
  auto axis = std::find(mesh.axes().begin(), mesh.axes().end(), "pp");
  if (axis == mesh.axes().end())
    return absl::InvalidArgumentError(absl::StrCat(
        "the pipeline has ", stages, " stages but the mesh has no axis 'pp' "
        "(expected one of size ", stages, ")"));
  int64_t ppSize = mesh.sizes(int(axis - mesh.axes().begin()));
  if (ppSize != stages)
    return absl::InvalidArgumentError(absl::StrCat(
        "the pipeline has ", stages, " stages but mesh axis 'pp' has size ",
        ppSize, " (expected one rank per stage)"));
  if (!plan.has_training())
    return absl::InvalidArgumentError(
        "the pipeline has no training section (its micro_batches size the "
        "stages' schedules)");
  for (int s = 0; s < stages; ++s) {
    const Stage &stage = p.stages(s);
    if (stage.chunks_size() != p.stages(0).chunks_size())
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", s, " has ", stage.chunks_size() + 1,
          " model chunks but stage 0 has ", p.stages(0).chunks_size() + 1,
          " (expected the same on every stage)"));
    std::vector<std::tuple<std::string, const std::string &, bool>> fields{
        {"zero_grads", stage.zero_grads(), false},
        {"forward", stage.forward(), true},
        {"backward", stage.backward(), true},
        {"backward_weight", stage.backward_weight(), false},
        {"update", stage.update(), false},
        {"eval_forward", stage.eval_forward(), false}};
    for (int k = 0; k < stage.chunks_size(); ++k) {
      const Chunk &chunk = stage.chunks(k);
      std::string at = absl::StrCat("chunk ", k + 1, "'s ");
      fields.push_back({at + "forward", chunk.forward(), true});
      fields.push_back({at + "backward", chunk.backward(), true});
      // Evaluation needs every chunk's copy, or none.
      fields.push_back({at + "eval_forward", chunk.eval_forward(),
                        !stage.eval_forward().empty()});
      // A chunk splits its backward exactly when chunk 0 does.
      fields.push_back({at + "backward_weight", chunk.backward_weight(),
                        !stage.backward_weight().empty()});
      if (stage.backward_weight().empty() != chunk.backward_weight().empty())
        return absl::InvalidArgumentError(absl::StrCat(
            "pipeline stage ", s, "'s chunk ", k + 1,
            stage.backward_weight().empty() ? " has" : " has no",
            " backward_weight function but chunk 0 ",
            stage.backward_weight().empty() ? "has none" : "has one",
            " (expected every chunk to split its backward alike)"));
    }
    // A backward call may run a function of its own (its chunk's last,
    // which starts the gradients' sums): one of the stage's.
    for (int i = 0; i < stage.schedule_size(); ++i) {
      const ScheduleStep &step = stage.schedule(i);
      if (step.function().empty())
        continue;
      if (step.kind() != ScheduleStep::BACKWARD &&
          step.kind() != ScheduleStep::BACKWARD_WEIGHT)
        return absl::InvalidArgumentError(
            absl::StrCat("pipeline stage ", s, "'s schedule step ", i,
                         " names function '", step.function(),
                         "' but only a BACKWARD or BACKWARD_WEIGHT may "
                         "run a function other than its chunk's"));
      fields.push_back(
          {absl::StrCat("schedule step ", i), step.function(), true});
    }
    for (const auto &[field, name, required] : fields) {
      if (name.empty()) {
        if (required)
          return absl::InvalidArgumentError(absl::StrCat(
              "pipeline stage ", s, " names no ", field, " function"));
        continue;
      }
      if (!functions.count(name))
        return absl::InvalidArgumentError(absl::StrCat(
            "pipeline stage ", s, "'s ", field, " names function '", name,
            "', which the plan does not have"));
      auto [it, inserted] = stageOf->emplace(name, s);
      if (!inserted && it->second != s)
        return absl::InvalidArgumentError(absl::StrCat(
            "function '", name, "' belongs to pipeline stages ", it->second,
            " and ", s, " (a function is the program of one stage)"));
    }
  }
  return absl::OkStatus();
}

/// The slots of model chunk `chunk` of `stage` (validated chunk_slots).
int64_t chunkSlots(const Stage &stage, int64_t chunk) {
  return stage.chunk_slots_size() ? stage.chunk_slots(int(chunk))
                                  : stage.slots();
}

/// The functions of model chunk `chunk`'s calls on `stage` (those it has).
std::vector<const std::string *> chunkCalls(const Stage &stage, int chunk) {
  std::vector<const std::string *> out;
  if (chunk == 0) {
    out = {&stage.forward(), &stage.backward(), &stage.backward_weight(),
           &stage.eval_forward()};
  } else {
    const Chunk &c = stage.chunks(chunk - 1);
    out = {&c.forward(), &c.backward(), &c.backward_weight(),
           &c.eval_forward()};
  }
  for (const ScheduleStep &step : stage.schedule())
    if (step.chunk() == chunk && !step.function().empty())
      out.push_back(&step.function());
  return out;
}

/// Buffers of the pipeline's stages: a stage's functions name only its
/// buffers; each chunk has its own slots (Stage.chunk_slots), a slotted
/// buffer is named by the calls of one chunk and has one copy per slot of
/// it; every copy lies inside the stage's own arena (Stage.arena_bytes,
/// which is what its ranks allocate). The buffers have been validated
/// against Plan.arena_bytes, so their ends cannot overflow.
absl::Status validateStageBuffers(const Plan &plan,
                                  const std::map<std::string, int> &stageOf) {
  const Pipeline &p = plan.pipeline();
  if (p.stages_size() == 0)
    return absl::OkStatus();
  for (int s = 0; s < p.stages_size(); ++s) {
    const Stage &stage = p.stages(s);
    if (stage.slots() < 1)
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline stage ", s, " has slots = ",
                       stage.slots(), ", expected at least 1"));
    int chunks = 1 + stage.chunks_size();
    if (chunks > 1 && stage.chunk_slots_size() != chunks)
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", s, " has ", chunks, " model chunks but ",
          stage.chunk_slots_size(), " chunk_slots (expected the slots of "
          "each chunk)"));
    if (chunks == 1 && stage.chunk_slots_size() > 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", s, " has one model chunk but ",
          stage.chunk_slots_size(), " chunk_slots (expected at most one)"));
    int64_t most = 0;
    for (int k = 0; k < stage.chunk_slots_size(); ++k) {
      if (stage.chunk_slots(k) < 1)
        return absl::InvalidArgumentError(absl::StrCat(
            "pipeline stage ", s, "'s chunk ", k, " has chunk_slots = ",
            stage.chunk_slots(k), ", expected at least 1"));
      most = std::max(most, stage.chunk_slots(k));
    }
    if (stage.chunk_slots_size() && most != stage.slots())
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline stage ", s, " has slots = ", stage.slots(),
          " but the largest of its chunk_slots is ", most,
          " (expected them equal)"));
    int64_t arena = p.stages(s).arena_bytes();
    if (arena < 0 || arena > plan.arena_bytes())
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline stage ", s, " has arena_bytes = ", arena,
                       ", outside [0, ", plan.arena_bytes(),
                       "] (the plan's arena_bytes, the largest stage's)"));
  }
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const Buffer &b = plan.buffers(i);
    const Stage &stage = p.stages(b.stage());
    int64_t bytes = numel(b) * DTypeBytes(b.dtype());
    int64_t copies = std::max<int64_t>(b.slots(), 1);
    int64_t end = b.offset() + bytes * copies;
    if (end > stage.arena_bytes())
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer ", i, " ('", b.name(), "') of stage ", b.stage(),
          " occupies bytes [", b.offset(), ", ", end, ")",
          copies > 1
              ? absl::StrCat(" (", copies, " slots of ", bytes, " bytes)")
              : "",
          ", which leave stage ", b.stage(), "'s arena of ",
          stage.arena_bytes(), " bytes",
          stage.arena_bytes() == 0
              ? " (the stage states no arena_bytes: compile the plan again)"
              : ""));
  }
  for (const Function &fn : plan.functions()) {
    auto it = stageOf.find(fn.name());
    if (it == stageOf.end())
      continue;
    int s = it->second;
    for (int k = 0; k < fn.body_size(); ++k) {
      const Instruction &inst = fn.body(k);
      for (const auto *ids : {&inst.inputs(), &inst.outputs()})
        for (int32_t id : *ids) {
          const Buffer &b = plan.buffers(id);
          if (b.stage() != s)
            return absl::InvalidArgumentError(absl::StrCat(
                "function '", fn.name(), "' instruction ", k, " (",
                Kernel_Name(inst.kernel()),
                inst.provenance().empty() ? "" : ", from ", inst.provenance(),
                "): buffer ", id, " ('", b.name(), "') belongs to stage ",
                b.stage(), ", but the function is the program of stage ", s));
        }
    }
  }
  // The chunk whose calls name each slotted buffer (-1: none).
  std::map<std::string, const Function *> functions;
  for (const Function &fn : plan.functions())
    functions[fn.name()] = &fn;
  std::vector<int> chunkOf(plan.buffers_size(), -1);
  for (int s = 0; s < p.stages_size(); ++s) {
    const Stage &stage = p.stages(s);
    for (int k = 0; k <= stage.chunks_size(); ++k)
      for (const std::string *name : chunkCalls(stage, k)) {
        auto fn = functions.find(*name);
        if (fn == functions.end())
          continue;
        for (const Instruction &inst : fn->second->body())
          for (const auto *ids : {&inst.inputs(), &inst.outputs()})
            for (int32_t id : *ids) {
              const Buffer &b = plan.buffers(id);
              if (b.slots() < 2 || chunkOf[id] == k)
                continue;
              if (chunkOf[id] >= 0)
                return absl::InvalidArgumentError(absl::StrCat(
                    "buffer ", id, " ('", b.name(), "') of stage ", s,
                    " has ", b.slots(), " slots and is named by the calls of "
                    "chunks ", chunkOf[id], " and ", k, " (function '", *name,
                    "'), but each chunk has slots of its own (expected one "
                    "chunk, or 0 or 1 for a single copy)"));
              chunkOf[id] = k;
            }
      }
  }
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const Buffer &b = plan.buffers(i);
    const Stage &stage = p.stages(b.stage());
    int k = chunkOf[i];
    int64_t slots = k >= 0 ? chunkSlots(stage, k) : stage.slots();
    if (b.slots() >= 2 && b.slots() != slots)
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer ", i, " ('", b.name(), "') of stage ", b.stage(), " has ",
          b.slots(), " slots but ",
          k >= 0 && stage.chunks_size()
              ? absl::StrCat("chunk ", k, " of the stage, whose calls name "
                             "it, has ")
              : std::string("the stage has "),
          slots, " (expected ", slots,
          " slots, or 0 or 1 for a single copy)"));
  }
  return absl::OkStatus();
}

/// Each stage's schedule: every micro-batch of the step has one FORWARD,
/// then one BACKWARD (then one BACKWARD_WEIGHT when the stage has a
/// backward_weight function), all on one slot of its chunk (below the
/// chunk's slots), and a slot of a chunk holds one micro-batch at a time
/// (from its FORWARD to its last backward step on the chunk).
/// Training has been validated.
absl::Status validateSchedules(const Plan &plan) {
  const Pipeline &p = plan.pipeline();
  int64_t micros = plan.training().micro_batches();
  for (int s = 0; s < p.stages_size(); ++s) {
    const Stage &stage = p.stages(s);
    bool split = !stage.backward_weight().empty();
    int64_t perMicro = split ? 3 : 2;
    int64_t chunks = 1 + stage.chunks_size();
    std::string where = absl::StrCat("pipeline stage ", s, "'s schedule");
    if (stage.schedule_size() != perMicro * micros * chunks)
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has ", stage.schedule_size(), " steps, expected ",
          perMicro * micros * chunks,
          split ? " (a FORWARD, a BACKWARD and a BACKWARD_WEIGHT"
                : " (a FORWARD and a BACKWARD",
          " for each of the ", micros, " micro-batches",
          chunks > 1 ? absl::StrCat(" on each of the ", chunks, " chunks")
                     : std::string(),
          ")"));
    // Per (micro-batch, chunk), as micro-batch x chunks + chunk; sized by
    // the schedule's length, which is perMicro x micros x chunks.
    std::vector<int64_t> forwardSlot(micros * chunks, -1);
    std::vector<bool> backwardDone(micros * chunks, false),
        weightDone(micros * chunks, false);
    // (chunk, slot) -> micro-batch: each chunk has slots of its own.
    std::map<std::pair<int64_t, int64_t>, int64_t> holder;
    for (int i = 0; i < stage.schedule_size(); ++i) {
      const ScheduleStep &step = stage.schedule(i);
      std::string at = absl::StrCat(where, " step ", i, ": ");
      ScheduleStep::Kind kind = step.kind();
      if (kind != ScheduleStep::FORWARD && kind != ScheduleStep::BACKWARD &&
          !(split && kind == ScheduleStep::BACKWARD_WEIGHT))
        return absl::InvalidArgumentError(absl::StrCat(
            at, "kind ", int(kind),
            split ? " is not FORWARD, BACKWARD or BACKWARD_WEIGHT"
                  : " is not FORWARD or BACKWARD (BACKWARD_WEIGHT needs the "
                    "stage's backward_weight function)"));
      int64_t mb = step.micro_batch(), slot = step.slot();
      if (mb < 0 || mb >= micros)
        return absl::InvalidArgumentError(
            absl::StrCat(at, "micro-batch ", mb, " is outside [0, ", micros,
                         ") (training.micro_batches = ", micros, ")"));
      if (step.chunk() < 0 || step.chunk() >= chunks)
        return absl::InvalidArgumentError(
            absl::StrCat(at, "chunk ", step.chunk(), " is outside the stage's ",
                         chunks, " model chunks [0, ", chunks, ")"));
      int64_t m = mb * chunks + step.chunk();
      // A (micro-batch, chunk) in words.
      auto name = [&](int64_t id) {
        return chunks > 1 ? absl::StrCat(id / chunks, " on chunk ", id % chunks)
                          : absl::StrCat(id);
      };
      int64_t slots = chunkSlots(stage, step.chunk());
      if (slot < 0 || slot >= slots)
        return absl::InvalidArgumentError(absl::StrCat(
            at, "slot ", slot, " is outside ",
            chunks > 1 ? absl::StrCat("chunk ", step.chunk(), "'s ")
                       : std::string("the stage's "),
            slots, " slots [0, ", slots, ")"));
      if (kind == ScheduleStep::FORWARD) {
        if (forwardSlot[m] >= 0)
          return absl::InvalidArgumentError(absl::StrCat(
              at, "a second FORWARD of micro-batch ", name(m),
              " (expected one per micro-batch)"));
        auto held = holder.find({step.chunk(), slot});
        if (held != holder.end())
          return absl::InvalidArgumentError(absl::StrCat(
              at, "the FORWARD of micro-batch ", name(m), " reuses slot ", slot,
              ", which micro-batch ", name(held->second), " holds until its ",
              split ? "BACKWARD_WEIGHT" : "BACKWARD",
              " (expected a free slot)"));
        forwardSlot[m] = slot;
        holder[{step.chunk(), slot}] = m;
        continue;
      }
      bool weight = kind == ScheduleStep::BACKWARD_WEIGHT;
      const char *kindName = weight ? "BACKWARD_WEIGHT" : "BACKWARD";
      if (weight ? weightDone[m] : backwardDone[m])
        return absl::InvalidArgumentError(absl::StrCat(
            at, "a second ", kindName, " of micro-batch ", name(m),
            " (expected one per micro-batch)"));
      if (forwardSlot[m] < 0 || (weight && !backwardDone[m]))
        return absl::InvalidArgumentError(absl::StrCat(
            at, "the ", kindName, " of micro-batch ", name(m), " comes before its ",
            weight ? "BACKWARD" : "FORWARD"));
      if (forwardSlot[m] != slot)
        return absl::InvalidArgumentError(absl::StrCat(
            at, "the ", kindName, " of micro-batch ", name(m), " uses slot ", slot,
            " but its FORWARD used slot ", forwardSlot[m],
            " (expected the same slot)"));
      (weight ? weightDone : backwardDone)[m] = true;
      if (weight || !split)
        holder.erase({step.chunk(), slot});
    }
  }
  return absl::OkStatus();
}

} // namespace

absl::Status CheckBufferOnStage(const Plan &plan, int id, int64_t stage) {
  const Buffer &b = plan.buffers(id);
  if (plan.pipeline().stages_size() == 0 || b.stage() == stage)
    return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("buffer '", b.name(), "' belongs to pipeline stage ",
                   b.stage(), ", which other ranks run; this rank runs stage ",
                   stage, " and holds only its arena"));
}

absl::Status ValidatePlan(const Plan &plan) {
  if (plan.version() != SCHEMA_VERSION_CURRENT)
    return absl::FailedPreconditionError(absl::StrCat(
        "plan schema version ", int(plan.version()), " is not the version ",
        int(SCHEMA_VERSION_CURRENT), " this braid-run reads; recompile the "
        "plan with the matching braidc"));
  // The mesh: named, unique axes with sizes >= 1.
  const Mesh &mesh = plan.mesh();
  if (mesh.axes_size() != mesh.sizes_size() || mesh.axes_size() == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh has ", mesh.axes_size(), " axes and ", mesh.sizes_size(),
        " sizes; it needs one size per axis and at least one axis"));
  std::set<std::string> axes;
  int64_t world = 1;
  for (int i = 0; i < mesh.axes_size(); ++i) {
    if (mesh.axes(i).empty() || !axes.insert(mesh.axes(i)).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh axis ", i, " ('", mesh.axes(i), "') is empty or repeated"));
    if (mesh.sizes(i) < 1 || mesh.sizes(i) > kMaxWorldSize ||
        world * mesh.sizes(i) > kMaxWorldSize)
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh axis '", mesh.axes(i), "' has size ", mesh.sizes(i),
          "; sizes must be >= 1 and the world at most ", kMaxWorldSize));
    world *= mesh.sizes(i);
  }
  if (plan.arena_bytes() < 0 || plan.arena_bytes() > kMaxArenaBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "arena_bytes = ", plan.arena_bytes(), " is outside [0, ",
        kMaxArenaBytes, "]"));
  // Buffers: known dtype and role, sane shapes, inside the arena (every
  // slot), of a stage of the pipeline.
  int stages = plan.pipeline().stages_size();
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const Buffer &b = plan.buffers(i);
    std::string name = absl::StrCat("buffer ", i, " ('", b.name(), "')");
    if (DTypeBytes(b.dtype()) == 0)
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has unknown dtype ", int(b.dtype())));
    if (!BufferRole_IsValid(b.role()) || b.role() == ROLE_UNSPECIFIED)
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has unknown role ", int(b.role())));
    if (b.shape_size() > kMaxRank)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has rank ", b.shape_size(), "; at most ", kMaxRank));
    int64_t bytes = DTypeBytes(b.dtype());
    for (int64_t d : b.shape()) {
      if (d < 0 || (d > 0 && bytes > kMaxArenaBytes / d))
        return absl::InvalidArgumentError(absl::StrCat(
            name, " has shape ", shapeStr(b), ", which is negative or larger "
            "than any arena"));
      bytes *= d;
    }
    if (b.offset() % DTypeBytes(b.dtype()) != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " starts at byte ", b.offset(), ", which is not a multiple of "
          "its element size ", DTypeBytes(b.dtype())));
    if (b.offset() < 0 || b.offset() > plan.arena_bytes() - bytes)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " occupies bytes [", b.offset(), ", ", b.offset() + bytes,
          ") which leave the arena of ", plan.arena_bytes(), " bytes"));
    // Slots: copy k at offset + k x bytes, every copy inside the arena.
    if (b.slots() < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has slots = ", b.slots(), ", expected at least 0"));
    if (b.slots() >= 2 && bytes > 0 &&
        b.slots() > (plan.arena_bytes() - b.offset()) / bytes)
      return absl::InvalidArgumentError(absl::StrCat(
          name, "'s ", b.slots(), " slots of ", bytes, " bytes from byte ",
          b.offset(), " leave the arena of ", plan.arena_bytes(), " bytes"));
    if (b.stage() < 0 || b.stage() >= std::max(stages, 1))
      return absl::InvalidArgumentError(
          stages ? absl::StrCat(name, " belongs to stage ", b.stage(),
                                ", outside the pipeline's ", stages,
                                " stages [0, ", stages, ")")
                 : absl::StrCat(name, " belongs to stage ", b.stage(),
                                " but the plan has no pipeline (expected 0)"));
    if (b.has_shard())
      if (absl::Status s = validateShard(plan, b, name); !s.ok())
        return s;
  }
  // Views lie inside their bucket, of their stage, at the place they say;
  // a ZeRO-3 block is the dp-th part of a one-dimensional flat buffer.
  auto bytesOf = [&](const Buffer &b) {
    int64_t n = DTypeBytes(b.dtype());
    for (int64_t d : b.shape())
      n *= d;
    return n;
  };
  for (int i = 0; i < plan.buffers_size(); ++i) {
    const Buffer &b = plan.buffers(i);
    std::string name = absl::StrCat("buffer ", i, " ('", b.name(), "')");
    if (b.view_of() < 0 || b.view_of() > plan.buffers_size() ||
        b.view_of() == i + 1 || b.block_of() < 0 ||
        b.block_of() > plan.buffers_size() || b.block_of() == i + 1)
      return absl::InvalidArgumentError(absl::StrCat(
          name, " has view_of = ", b.view_of(), " and block_of = ",
          b.block_of(), ": each is 0 or 1 + the index of another buffer of the ",
          plan.buffers_size()));
    if (b.view_of() > 0) {
      const Buffer &parent = plan.buffers(b.view_of() - 1);
      if (b.view_offset() < 0 || b.slots() >= 2 || parent.slots() >= 2 ||
          parent.stage() != b.stage() ||
          b.offset() != parent.offset() + b.view_offset() ||
          b.view_offset() > bytesOf(parent) - bytesOf(b))
        return absl::InvalidArgumentError(absl::StrCat(
            name, " is a view of buffer ", b.view_of() - 1, " ('", parent.name(),
            "', ", bytesOf(parent), " bytes at ", parent.offset(), ") at ",
            b.view_offset(), " bytes in, but occupies ", bytesOf(b),
            " bytes at ", b.offset(),
            " (expected inside it, at its offset + view_offset, one copy, "
            "one stage)"));
    } else if (b.view_offset() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has a view_offset but is not a view"));
    }
    if (b.block_of() > 0) {
      const Buffer &whole = plan.buffers(b.block_of() - 1);
      int64_t dp = AxisSize(plan.mesh(), "dp");
      if (b.role() != PARAMETER || b.shape_size() != 1 ||
          whole.shape_size() != 1 || whole.dtype() != b.dtype() ||
          whole.stage() != b.stage() || dp < 1 ||
          whole.shape(0) != b.shape(0) * dp)
        return absl::InvalidArgumentError(absl::StrCat(
            name, " is a block of buffer ", b.block_of() - 1, " ('",
            whole.name(), "' ", shapeStr(whole), ") but is ", shapeStr(b),
            " (expected one-dimensional parameters, 1/dp of it)"));
    }
  }
  // Functions: unique names; the pipeline's stages; valid instructions,
  // each function of a stage on that stage's buffers.
  std::set<std::string> names;
  for (const Function &fn : plan.functions())
    if (fn.name().empty() || !names.insert(fn.name()).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "function name '", fn.name(), "' is empty or repeated"));
  std::map<std::string, int> stageOf;
  if (absl::Status s = validatePipeline(plan, names, &stageOf); !s.ok())
    return s;
  for (const Function &fn : plan.functions()) {
    auto it = stageOf.find(fn.name());
    int stage = it == stageOf.end() ? -1 : it->second;
    for (int i = 0; i < fn.body_size(); ++i)
      if (absl::Status s =
              CheckInstruction(plan, fn, i, fn.body(i), stage);
          !s.ok())
        return s;
  }
  if (absl::Status s = validateStageBuffers(plan, stageOf); !s.ok())
    return s;
  if (absl::Status s = validateTraining(plan, names); !s.ok())
    return s;
  if (absl::Status s = validateGeneration(plan, names); !s.ok())
    return s;
  return validateSchedules(plan);
}

} // namespace braid::plan
