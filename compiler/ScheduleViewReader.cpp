//===- ScheduleViewReader.cpp - The plan's lanes and their timeline -------===//
//
// readView: the lanes read off the plan (each stage's functions, what they
// cost and which messages and collectives they hold), then the plan's own
// schedule simulated with those costs.
//
//===----------------------------------------------------------------------===//

#include "compiler/ScheduleViewInternal.h"

#include "runtime/plan/KernelRegistry.h"
#include "runtime/plan/PlanLoader.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace braid::scheduleview {

namespace {

FunctionSummary summarize(const bp::Plan &plan, const bp::Function &fn,
                          int begin, int end) {
  FunctionSummary s;
  s.name = fn.name();
  s.instructions = end - begin;
  for (int i = begin; i < end; ++i) {
    const bp::Instruction &inst = fn.body(i);
    s.flops += matmulFlops(plan, inst);
    auto peer = inst.int_attrs().find("peer");
    int64_t direction = peer == inst.int_attrs().end() ? 0 : peer->second;
    // A transfer's message is SEND's input, RECV's output.
    if (bp::IsPointToPoint(inst.kernel()))
      (inst.inputs_size() ? (direction > 0 ? s.sendsNext : s.sendsPrevious)
                          : (direction > 0 ? s.receivesNext
                                           : s.receivesPrevious)) += 1;
    if (inst.group_size() == 0)
      continue;
    std::string what =
        bp::Kernel_Name(inst.kernel()) + " over " +
        llvm::join(inst.group().begin(), inst.group().end(), " \u00d7 ");
    auto it = llvm::find_if(s.collectives,
                            [&](const auto &c) { return c.first == what; });
    if (it == s.collectives.end())
      s.collectives.push_back({what, 1});
    else
      ++it->second;
    s.collectivePositions.push_back(double(i - begin) /
                                    std::max(end - begin, 1));
  }
  return s;
}

std::string layerText(int64_t first, int64_t count) {
  if (count <= 0)
    return "no layers";
  if (count == 1)
    return "layer " + std::to_string(first);
  return "layers " + std::to_string(first) + "\u2013" +
         std::to_string(first + count - 1);
}

/// The most micro-batches per step the view draws.
constexpr int64_t kMaxMicroBatches = 1 << 14;

} // namespace

std::string collectiveList(const FunctionSummary &s,
                           llvm::StringRef separator) {
  if (s.collectives.empty())
    return "none";
  std::string out;
  for (const auto &[what, count] : s.collectives) {
    if (!out.empty())
      out += separator;
    out += (count > 1 ? std::to_string(count) + " \u00d7 " : "") + what;
  }
  return out;
}

llvm::Expected<View> readView(const bp::Plan &plan) {
  View view;
  std::map<std::string, const bp::Function *> functions;
  for (const bp::Function &fn : plan.functions())
    functions.emplace(fn.name(), &fn);
  auto function =
      [&](llvm::StringRef what,
          const std::string &name) -> llvm::Expected<const bp::Function *> {
    auto it = functions.find(name);
    if (it == functions.end())
      return error(what + " names function '" + name +
                   "', which the plan does not have");
    return it->second;
  };

  // The ranks of each lane: those whose pp coordinate is the lane's index.
  const bp::Mesh &mesh = plan.mesh();
  int ppAxis = -1;
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) == "pp")
      ppAxis = i;
  const bp::Pipeline &pipe = plan.pipeline();
  view.pipelined = pipe.stages_size() > 0;
  view.p = view.pipelined ? pipe.stages_size() : 1;
  std::vector<std::vector<int64_t>> ranks(view.p);
  int64_t world = bp::WorldSize(plan);
  for (int64_t r = 0; r < world; ++r) {
    int64_t lane = 0;
    if (view.pipelined && ppAxis >= 0)
      lane = bp::MeshCoordinates(mesh, r)[ppAxis];
    if (lane >= 0 && lane < view.p)
      ranks[lane].push_back(r);
  }
  auto laneTitle = [&](llvm::StringRef what, int64_t lane) {
    const std::vector<int64_t> &list = ranks[lane];
    return what.str() + " \u00b7 " + (list.size() == 1 ? "rank " : "ranks ") +
           rankList(list);
  };

  // Without a pipeline, micro_step runs once per micro-batch (at least once).
  view.m = plan.training().micro_batches();
  if (!view.pipelined)
    view.m = std::max<int64_t>(view.m, 1);
  if (view.m < 1 || view.m > kMaxMicroBatches)
    return error("the plan's training.micro_batches is " + llvm::Twine(view.m) +
                 ", expected 1 to " + llvm::Twine(kMaxMicroBatches) +
                 " (the most the view draws)");

  if (view.pipelined) {
    view.scheme = pipe.schedule();
    for (int s = 0; s < pipe.stages_size(); ++s)
      if (pipe.stages(s).chunks_size())
        return error("pipeline stage " + llvm::Twine(s) + " holds " +
                     llvm::Twine(pipe.stages(s).chunks_size() + 1) +
                     " model chunks (the interleaved schedule), which the "
                     "view does not draw yet");
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const bp::Stage &stage = pipe.stages(s);
      std::string where = "pipeline stage " + std::to_string(s);
      Lane lane;
      lane.title = laneTitle("stage " + std::to_string(s), s);
      lane.ranks = ranks[s];
      lane.layers = layerText(stage.first_layer(), stage.num_layers());
      lane.slots = std::max<int64_t>(stage.slots(), 1);
      for (auto [field, name, summary] :
           {std::make_tuple("forward", &stage.forward(), &lane.forward),
            std::make_tuple("backward", &stage.backward(), &lane.backward)}) {
        llvm::Expected<const bp::Function *> fn =
            function(where + "'s " + field, *name);
        if (!fn)
          return fn.takeError();
        *summary = summarize(plan, **fn, 0, (*fn)->body_size());
      }
      if (std::string name = stage.backward_weight(); !name.empty()) {
        llvm::Expected<const bp::Function *> fn =
            function(where + "'s backward_weight", name);
        if (!fn)
          return fn.takeError();
        lane.weight = summarize(plan, **fn, 0, (*fn)->body_size());
        lane.split = true;
      }
      if (!stage.update().empty()) {
        llvm::Expected<const bp::Function *> fn =
            function(where + "'s update", stage.update());
        if (!fn)
          return fn.takeError();
        lane.update = summarize(plan, **fn, 0, (*fn)->body_size());
        lane.hasUpdate = true;
      }
      std::vector<pipeline::Step> steps;
      for (const bp::ScheduleStep &step : stage.schedule()) {
        pipeline::Work work;
        if (step.kind() == bp::ScheduleStep::FORWARD)
          work = pipeline::Work::Forward;
        else if (step.kind() == bp::ScheduleStep::BACKWARD)
          work = lane.split ? pipeline::Work::BackwardInput
                            : pipeline::Work::Backward;
        else if (lane.split && step.kind() == bp::ScheduleStep::BACKWARD_WEIGHT)
          work = pipeline::Work::BackwardWeight;
        else
          return error(
              where + "'s schedule has a step of kind " +
              llvm::Twine(int(step.kind())) + ", expected FORWARD" +
              (lane.split ? ", BACKWARD or BACKWARD_WEIGHT" : " or BACKWARD"));
        steps.push_back({work, step.micro_batch(), 0});
        lane.stepSlots.push_back(step.slot());
        if (!step.function().empty()) {
          llvm::Expected<const bp::Function *> fn =
              function(where + "'s schedule step", step.function());
          if (!fn)
            return fn.takeError();
          lane.ownCalls[{work, step.micro_batch()}] =
              summarize(plan, **fn, 0, (*fn)->body_size());
        }
      }
      view.schedules.push_back(std::move(steps));
      view.lanes.push_back(std::move(lane));
    }
  } else {
    const bp::StepFunctions &step = plan.training().step();
    if (step.micro_step().empty())
      return error("the plan has no pipeline and no training.step.micro_step, "
                   "expected one of them to draw");
    llvm::Expected<const bp::Function *> micro =
        function("training.step.micro_step", step.micro_step());
    if (!micro)
      return micro.takeError();
    // The backward starts at the first instruction that reads the loss
    // gradient (the compiler's rule: backward work depends on loss_grad).
    std::set<int32_t> lossGrad;
    for (int i = 0; i < plan.buffers_size(); ++i)
      if (plan.buffers(i).role() == bp::INPUT &&
          plan.buffers(i).name() == "loss_grad")
        lossGrad.insert(i);
    auto backwardStart = [&](const bp::Function &fn) {
      const int size = fn.body_size();
      for (int i = 0; i < size; ++i)
        for (int32_t id : fn.body(i).inputs())
          if (lossGrad.count(id))
            return i;
      return size;
    };
    const int size = (*micro)->body_size();
    Lane lane;
    lane.title = laneTitle("micro_step", 0);
    lane.ranks = ranks[0];
    int64_t layers = plan.training().num_layers();
    lane.layers = layers > 0 ? layerText(0, layers) : "the whole model";
    lane.forward = summarize(plan, **micro, 0, backwardStart(**micro));
    lane.backward = summarize(plan, **micro, backwardStart(**micro), size);
    for (int64_t m = 0; m < view.m; ++m) {
      const std::string &name = bp::MicroStepFunction(step, m, view.m);
      if (name == step.micro_step())
        continue;
      llvm::Expected<const bp::Function *> own =
          function(m == 0 && name == step.first_micro_step()
                       ? "training.step.first_micro_step"
                       : "training.step.last_micro_step",
                   name);
      if (!own)
        return own.takeError();
      // Each part where it differs from micro_step's.
      int start = backwardStart(**own);
      for (auto [work, part, mine] :
           {std::tuple(pipeline::Work::Forward, &lane.forward,
                       summarize(plan, **own, 0, start)),
            std::tuple(pipeline::Work::Backward, &lane.backward,
                       summarize(plan, **own, start, (*own)->body_size()))})
        if (mine.instructions != part->instructions ||
            collectiveList(mine) != collectiveList(*part))
          lane.ownCalls[{work, m}] = mine;
    }
    if (!step.update().empty()) {
      llvm::Expected<const bp::Function *> fn =
          function("training.step.update", step.update());
      if (!fn)
        return fn.takeError();
      lane.update = summarize(plan, **fn, 0, (*fn)->body_size());
      lane.hasUpdate = true;
    }
    std::vector<pipeline::Step> steps;
    for (int64_t i = 0; i < view.m; ++i) {
      steps.push_back({pipeline::Work::Forward, i, 0});
      steps.push_back({pipeline::Work::Backward, i, 0});
      lane.stepSlots.push_back(0);
      lane.stepSlots.push_back(0);
    }
    view.schedules.push_back(std::move(steps));
    view.lanes.push_back(std::move(lane));
  }

  // The cost proxy: FLOPs when every forward and backward has some.
  bool split = false;
  for (const Lane &lane : view.lanes) {
    split |= lane.split;
    if (lane.forward.flops <= 0 || lane.backward.flops <= 0 ||
        (lane.split && lane.weight.flops <= 0))
      view.flops = false;
  }
  pipeline::Costs costs;
  for (const Lane &lane : view.lanes) {
    auto cost = [&](const FunctionSummary &s) {
      return view.flops ? s.flops : double(s.instructions);
    };
    double weight = lane.split ? cost(lane.weight) : 0;
    costs.forward.push_back({cost(lane.forward)});
    costs.backward.push_back({cost(lane.backward) + weight});
    if (split) {
      costs.backwardInput.push_back({cost(lane.backward)});
      costs.backwardWeight.push_back({weight});
    }
  }
  llvm::Expected<pipeline::Timeline> timeline =
      pipeline::simulate(view.schedules, view.p, view.m, 1, costs);
  if (!timeline)
    return error("cannot simulate the plan's schedule: " +
                 llvm::toString(timeline.takeError()));
  view.timeline = std::move(*timeline);
  return view;
}

} // namespace braid::scheduleview
