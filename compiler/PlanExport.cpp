//===- PlanExport.cpp - `plan` IR to the plan file ------------------------===//

#include "compiler/PlanExport.h"

#include <google/protobuf/text_format.h>

#include "dialects/model/ModelDialect.h"
#include "dialects/plan/PlanDialect.h"
#include "passes/plan/Passes.h"
#include "runtime/plan/PlanLoader.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace braid;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

std::optional<plan::DType> dtypeOf(Type element) {
  if (element.isF32())
    return plan::F32;
  if (element.isF64())
    return plan::F64;
  if (element.isBF16())
    return plan::BF16;
  if (element.isF16())
    return plan::F16;
  if (element.isInteger(32))
    return plan::I32;
  if (element.isInteger(64))
    return plan::I64;
  return std::nullopt;
}

plan::BufferRole roleOf(StringRef role) {
  return llvm::StringSwitch<plan::BufferRole>(role)
      .Case("parameter", plan::PARAMETER)
      .Case("gradient", plan::GRADIENT)
      .Case("optimizer_state", plan::OPTIMIZER_STATE)
      .Case("activation", plan::ACTIVATION)
      .Case("input", plan::INPUT)
      .Case("workspace", plan::WORKSPACE)
      .Case("bucket", plan::BUCKET)
      .Case("kv_cache", plan::KV_CACHE)
      .Default(plan::ROLE_UNSPECIFIED);
}

} // namespace

llvm::Expected<plan::Plan> braid::exportPlan(ModuleOp module) {
  plan::Plan out;
  out.set_version(plan::SCHEMA_VERSION_CURRENT);
  // The mesh model-shard declared, or one rank.
  if (auto mesh = module.lookupSymbol<model::MeshOp>("mesh")) {
    for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getSizes())) {
      out.mutable_mesh()->add_axes(cast<StringAttr>(axis).getValue().str());
      out.mutable_mesh()->add_sizes(size);
    }
  } else {
    out.mutable_mesh()->add_axes("dp");
    out.mutable_mesh()->add_sizes(1);
  }
  auto arena = module->getAttrOfType<IntegerAttr>("plan.arena_bytes");
  if (!arena)
    return error("the module has no plan.arena_bytes: run plan-memory first");
  out.set_arena_bytes(arena.getInt());

  llvm::StringMap<int> index;
  // Views name buffers that may come later: every buffer's index first.
  llvm::StringMap<int> indexOf;
  for (auto [i, b] : llvm::enumerate(module.getOps<plan_ir::BufferOp>()))
    indexOf[b.getSymName()] = int(i);
  for (plan_ir::BufferOp b : module.getOps<plan_ir::BufferOp>()) {
    auto type = cast<RankedTensorType>(b.getType());
    std::optional<plan::DType> dtype = dtypeOf(type.getElementType());
    if (!dtype)
      return error("buffer @" + b.getSymName() + " has element type with no "
                   "plan dtype");
    if (!b.getOffset())
      return error("buffer @" + b.getSymName() + " has no offset: run "
                   "plan-memory first");
    plan::Buffer *pb = out.add_buffers();
    pb->set_name(b.getName() ? b.getName()->str() : b.getSymName().str());
    pb->set_dtype(*dtype);
    for (int64_t d : type.getShape())
      pb->add_shape(d);
    pb->set_offset(*b.getOffset());
    pb->set_role(roleOf(b.getRole()));
    if (std::optional<int64_t> stage = b.getStage())
      pb->set_stage(int32_t(*stage));
    if (std::optional<int64_t> slots = b.getSlots())
      pb->set_slots(*slots);
    if (std::optional<StringRef> parent = b.getViewOf()) {
      pb->set_view_of(int32_t(indexOf.lookup(*parent)) + 1);
      pb->set_view_offset(*b.getViewOffset());
    }
    if (std::optional<StringRef> whole = b.getBlockOf())
      pb->set_block_of(int32_t(indexOf.lookup(*whole)) + 1);
    pb->set_frozen(b.getFrozen());
    if (std::optional<StringRef> axis = b.getShard()) {
      pb->mutable_shard()->set_axis(axis->str());
      pb->mutable_shard()->set_dim(int32_t(*b.getDim()));
      if (std::optional<ArrayRef<int64_t>> blocks = b.getBlocks())
        for (int64_t n : *blocks)
          pb->mutable_shard()->add_blocks(n);
    }
    index[b.getSymName()] = out.buffers_size() - 1;
  }
  for (plan_ir::FuncOp fn : module.getOps<plan_ir::FuncOp>()) {
    plan::Function *pf = out.add_functions();
    pf->set_name(fn.getSymName().str());
    for (plan_ir::KernelOp k : fn.getBody().getOps<plan_ir::KernelOp>()) {
      plan::Instruction *inst = pf->add_body();
      plan::Kernel kernel;
      if (!plan::Kernel_Parse(k.getKernel().str(), &kernel))
        return error("kernel \"" + k.getKernel() + "\" is not in the plan "
                     "file schema");
      inst->set_kernel(kernel);
      for (Attribute ref : k.getInputs())
        inst->add_inputs(index.lookup(
            cast<SymbolRefAttr>(ref).getRootReference().getValue()));
      for (Attribute ref : k.getOutputs())
        inst->add_outputs(index.lookup(
            cast<SymbolRefAttr>(ref).getRootReference().getValue()));
      for (NamedAttribute p : k.getParams()) {
        if (auto i = dyn_cast<IntegerAttr>(p.getValue()))
          (*inst->mutable_int_attrs())[p.getName().str()] = i.getInt();
        else
          (*inst->mutable_float_attrs())[p.getName().str()] =
              cast<FloatAttr>(p.getValue()).getValueAsDouble();
      }
      if (k.getProvenance())
        inst->set_provenance(k.getProvenance()->str());
      if (std::optional<ArrayAttr> group = k.getGroup())
        for (Attribute axis : *group)
          inst->add_group(cast<StringAttr>(axis).getValue().str());
      if (std::optional<StringRef> axis = k.getRankAxis())
        inst->set_rank_axis(axis->str());
    }
  }
  // The step functions plan-lower made (those with nothing to do are gone),
  // the last micro-batch's of plan-overlap-grad-reduce, the first's and
  // gather_params of plan-overlap-param-gather.
  plan::StepFunctions *step = out.mutable_training()->mutable_step();
  for (plan_ir::FuncOp fn : module.getOps<plan_ir::FuncOp>()) {
    if (fn.getSymName() == plan_ir::kZeroGradsFunc)
      step->set_zero_grads(fn.getSymName().str());
    else if (fn.getSymName() == plan_ir::kMicroStepFunc)
      step->set_micro_step(fn.getSymName().str());
    else if (fn.getSymName() == plan_ir::kUpdateFunc)
      step->set_update(fn.getSymName().str());
    else if (fn.getSymName() == plan_ir::kLastMicroStepFunc)
      step->set_last_micro_step(fn.getSymName().str());
    else if (fn.getSymName() == plan_ir::kFirstMicroStepFunc)
      step->set_first_micro_step(fn.getSymName().str());
    else if (fn.getSymName() == plan_ir::kGatherParamsFunc)
      step->set_gather_params(fn.getSymName().str());
    else if (fn.getSymName() == plan_ir::kEvalStepFunc)
      step->set_eval_step(fn.getSymName().str());
  }
  // An inference plan: its shapes, functions and cache bytes.
  if (auto generate = module->getAttrOfType<DictionaryAttr>("model.generate")) {
    plan::Generation *g = out.mutable_generation();
    auto field = [&](StringRef name) {
      auto attr = generate.getAs<IntegerAttr>(name);
      return attr ? attr.getInt() : 0;
    };
    g->set_max_batch(field("max_batch"));
    g->set_max_seq_len(field("max_seq_len"));
    g->set_prefill_chunk(field("prefill_chunk"));
    g->set_vocab_size(field("vocab_size"));
    // Set by model-shard's draw over tp (drawFromCandidates).
    if (auto axis = generate.getAs<StringAttr>("logits_axis")) {
      g->set_logits_axis(axis.str());
      g->set_draw_candidates(field("candidates_per_rank"));
    }
    g->set_prefill(plan_ir::kPrefillFunc.str());
    g->set_decode(plan_ir::kDecodeFunc.str());
    g->set_reorder(plan_ir::kReorderFunc.str());
    if (module.lookupSymbol(plan_ir::kScoreFunc))
      g->set_score(plan_ir::kScoreFunc.str());
    int64_t cacheBytes = 0;
    for (plan_ir::BufferOp b : module.getOps<plan_ir::BufferOp>())
      if (b.getRole() == "kv_cache")
        cacheBytes += b.getBytes();
    g->set_kv_cache_bytes(cacheBytes);
  }
  // Pipeline stages, each with its schedule.
  for (plan_ir::StageOp stage : module.getOps<plan_ir::StageOp>()) {
    plan::Stage *ps = out.mutable_pipeline()->add_stages();
    ps->set_first_layer(stage.getFirstLayer());
    ps->set_num_layers(stage.getNumLayers());
    if (std::optional<StringRef> f = stage.getZeroGrads())
      ps->set_zero_grads(f->str());
    ps->set_forward(stage.getForward().str());
    ps->set_backward(stage.getBackward().str());
    if (std::optional<StringRef> f = stage.getBackwardWeight())
      ps->set_backward_weight(f->str());
    if (std::optional<StringRef> f = stage.getUpdate())
      ps->set_update(f->str());
    if (std::optional<StringRef> f = stage.getEvalForward())
      ps->set_eval_forward(f->str());
    ps->set_slots(stage.getSlots().value_or(1));
    if (std::optional<ArrayRef<int64_t>> pools = stage.getChunkSlots())
      for (int64_t n : *pools)
        ps->add_chunk_slots(n);
    // The stage's own arena: its ranks allocate this, not the largest one.
    auto stageArena = stage->getAttrOfType<IntegerAttr>("plan.arena_bytes");
    if (!stageArena)
      return error("pipeline stage " + llvm::Twine(stage.getIndex()) +
                   " has no plan.arena_bytes: run plan-memory first");
    ps->set_arena_bytes(stageArena.getInt());
    std::optional<ArrayAttr> schedule = stage.getSchedule();
    if (!schedule)
      return error("pipeline stage " + llvm::Twine(stage.getIndex()) +
                   " has no schedule: run plan-schedule first");
    if (std::optional<ArrayAttr> chunks = stage.getChunks())
      for (Attribute chunk : *chunks) {
        auto fns = cast<DictionaryAttr>(chunk);
        plan::Chunk *pc = ps->add_chunks();
        pc->set_forward(fns.getAs<FlatSymbolRefAttr>("forward").getValue().str());
        pc->set_backward(
            fns.getAs<FlatSymbolRefAttr>("backward").getValue().str());
        if (auto w = fns.getAs<FlatSymbolRefAttr>("backward_weight"))
          pc->set_backward_weight(w.getValue().str());
        if (auto e = fns.getAs<FlatSymbolRefAttr>("eval_forward"))
          pc->set_eval_forward(e.getValue().str());
      }
    for (Attribute attr : *schedule) {
      StringRef text = cast<StringAttr>(attr).getValue();
      FailureOr<plan_ir::ScheduleCall> call = plan_ir::parseScheduleCall(text);
      if (failed(call))
        return error("schedule call \"" + text + "\" is malformed");
      plan::ScheduleStep *step = ps->add_schedule();
      step->set_kind(call->kind == 'F'   ? plan::ScheduleStep::FORWARD
                     : call->kind == 'W' ? plan::ScheduleStep::BACKWARD_WEIGHT
                                         : plan::ScheduleStep::BACKWARD);
      step->set_micro_batch(call->microBatch);
      step->set_slot(call->slot);
      step->set_chunk(call->chunk);
      // "B3.1:2@fn": a call that runs fn instead of its chunk's function.
      if (!call->function.empty())
        step->set_function(call->function.str());
    }
  }
  if (out.pipeline().stages_size())
    out.mutable_pipeline()->set_schedule(
        module->getAttrOfType<StringAttr>("plan.schedule")
            ? module->getAttrOfType<StringAttr>("plan.schedule").getValue().str()
            : "");
  if (out.has_generation()) {
    // An inference plan has no step; the step loop's sizes stay valid.
    out.mutable_training()->clear_step();
    out.mutable_training()->set_micro_batch_size(out.generation().max_batch());
    out.mutable_training()->set_seq_length(out.generation().max_seq_len());
  } else if (step->micro_step().empty() && !out.pipeline().stages_size())
    return error("the module has no @" + plan_ir::kMicroStepFunc +
                 ": run plan-lower first");
  // The step loop's sizes; trainingSettings() fills them from the job.
  out.mutable_training()->set_steps(1);
  // A pipeline's schedule states how many micro-batches a step has.
  out.mutable_training()->set_micro_batches(
      out.pipeline().stages_size()
          ? std::max(out.pipeline().stages(0).schedule_size() /
                         ((out.pipeline().stages(0).backward_weight().empty()
                               ? 2
                               : 3) *
                          (1 + out.pipeline().stages(0).chunks_size())),
                     1)
          : 1);
  for (plan_ir::BufferOp b : module.getOps<plan_ir::BufferOp>())
    if (b.getName() == "tokens" || b.getName() == "targets") {
      auto shape = cast<RankedTensorType>(b.getType()).getShape();
      if (shape.size() != 2)
        return error("the tokens buffer is not [batch, seq]");
      out.mutable_training()->set_micro_batch_size(shape[0]);
      out.mutable_training()->set_seq_length(shape[1]);
    }
  if (absl::Status s = plan::ValidatePlan(out); !s.ok())
    return error("the exported plan does not validate: " +
                 std::string(s.message()));
  return out;
}

plan::Training braid::trainingSettings(const ModelConfig &model,
                                       const TrainConfig &train,
                                       const ParallelConfig &parallel,
                                       const spec::DataSpec &data) {
  plan::Training t;
  t.set_micro_batches(parallel.microBatches);
  t.set_steps(train.steps);
  t.set_seed(uint64_t(train.seed));
  t.set_lr(train.lr);
  t.set_min_lr(train.minLr);
  t.set_warmup_steps(train.warmupSteps);
  t.set_lr_decay(train.lrDecay);
  t.set_micro_batch_size(model.microBatchSize);
  t.set_seq_length(model.seqLength);
  t.set_init_std(model.initStd);
  t.set_scaled_residual_init(model.family == spec::GPT2);
  t.set_num_layers(model.numLayers);
  t.set_data_path(data.path());
  t.set_tokenizer(data.tokenizer_model());
  t.set_data_order(data.has_data_order() ? data.data_order() : "shuffled");
  t.set_data_split(data.split());
  t.set_data_instruction(data.instruction());
  t.set_data_packed(data.pack());
  if (model.lora.enabled) {
    plan::LoraSettings *lora = t.mutable_lora();
    lora->set_rank(model.lora.rank);
    lora->set_alpha(model.lora.alpha);
    lora->set_dropout(model.lora.dropout);
    for (const std::string &name : model.lora.targetModules)
      lora->add_target_modules(name);
    for (const std::string &name : model.lora.modulesToSave)
      lora->add_modules_to_save(name);
  }
  for (const spec::DataSource &source : data.blend()) {
    plan::DataSource *s = t.add_data_blend();
    s->set_weight(source.weight());
    s->set_path(source.path());
  }
  t.set_eval_interval(train.evalInterval);
  t.set_eval_iters(train.evalIters);
  if (model.dtype == spec::FP16) {
    plan::LossScaling &s = *t.mutable_loss_scaling();
    s.set_static_scale(train.lossScale);
    s.set_initial(train.initialLossScale);
    s.set_min(train.minLossScale);
    s.set_window(train.lossScaleWindow);
    s.set_hysteresis(train.hysteresis);
  }
  std::string spec;
  google::protobuf::TextFormat::PrintToString(inlineModelSpec(model), &spec);
  t.set_model_spec(spec);
  return t;
}
