//===- Trace.cpp - The measured timeline of a run -------------------------===//

#include "runtime/exec/Trace.h"

#include "runtime/common/JsonString.h"
#include "runtime/plan/KernelRegistry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace braid::exec {
namespace {

/// A colour of Chrome's trace viewer for `phase` (Perfetto picks its own).
const char *colourOf(TracePhase phase) {
  switch (phase) {
  case TracePhase::kStep:
    return "grey";
  case TracePhase::kData:
    return "thread_state_iowait";
  case TracePhase::kZeroGrads:
    return "olive";
  case TracePhase::kForward:
    return "good";
  case TracePhase::kBackward:
    return "bad";
  case TracePhase::kMicroStep:
    return "rail_animation";
  case TracePhase::kUpdate:
    return "rail_load";
  case TracePhase::kCommunication:
    return "yellow";
  }
  return "generic_work";
}

const char *threadName(TraceThread thread) {
  switch (thread) {
  case TraceThread::kStep:
    return "step";
  case TraceThread::kCalls:
    return "calls";
  case TraceThread::kCompute:
    return "compute";
  case TraceThread::kCommunication:
    return "communication";
  }
  return "other";
}

/// Nanoseconds as microseconds, to the nanosecond.
std::string micros(int64_t ns) {
  return absl::StrFormat("%d.%03d", ns / 1000, ns % 1000);
}

} // namespace

std::vector<std::vector<TracePhase>> KernelPhases(const plan::Plan &plan) {
  // The functions the trainer calls, by what they compute.
  std::map<std::string, TracePhase> roles;
  const plan::StepFunctions &step = plan.training().step();
  roles[step.zero_grads()] = TracePhase::kZeroGrads;
  roles[step.update()] = TracePhase::kUpdate;
  // The gathers update leaves to the next step, run at once before a save.
  roles[step.gather_params()] = TracePhase::kUpdate;
  for (const plan::Stage &stage : plan.pipeline().stages()) {
    roles[stage.zero_grads()] = TracePhase::kZeroGrads;
    roles[stage.forward()] = TracePhase::kForward;
    roles[stage.backward()] = TracePhase::kBackward;
    if (!stage.backward_weight().empty())
      roles[stage.backward_weight()] = TracePhase::kBackward;
    for (const plan::Chunk &chunk : stage.chunks()) {
      roles[chunk.forward()] = TracePhase::kForward;
      roles[chunk.backward()] = TracePhase::kBackward;
      roles[chunk.backward_weight()] = TracePhase::kBackward;
    }
    for (const plan::ScheduleStep &step : stage.schedule())
      if (!step.function().empty())
        roles[step.function()] = TracePhase::kBackward;
    roles[stage.update()] = TracePhase::kUpdate;
  }
  roles.erase("");
  std::vector<std::vector<TracePhase>> phases;
  for (const plan::Function &fn : plan.functions()) {
    std::vector<TracePhase> &mine = phases.emplace_back();
    auto role = roles.find(fn.name());
    // micro_step: the forward pass, then the backward pass from the loss's
    // gradient on.
    TracePhase phase =
        role == roles.end() ? TracePhase::kForward : role->second;
    for (const plan::Instruction &inst : fn.body()) {
      if (role == roles.end() && plan::IsGradient(inst.kernel()))
        phase = TracePhase::kBackward;
      mine.push_back(role == roles.end() &&
                             plan::KernelInfoOf(inst.kernel()).has(plan::kOptimizer)
                         ? TracePhase::kUpdate
                         : phase);
    }
  }
  return phases;
}

const char *TracePhaseName(TracePhase phase) {
  switch (phase) {
  case TracePhase::kStep:
    return "step";
  case TracePhase::kData:
    return "data";
  case TracePhase::kZeroGrads:
    return "zero_grads";
  case TracePhase::kForward:
    return "forward";
  case TracePhase::kBackward:
    return "backward";
  case TracePhase::kMicroStep:
    return "micro_step";
  case TracePhase::kUpdate:
    return "update";
  case TracePhase::kCommunication:
    return "communication";
  }
  return "other";
}

void Trace::Add(std::string name, TracePhase phase, TraceThread thread,
                Clock::time_point begin, Clock::time_point end,
                std::string args) {
  using std::chrono::nanoseconds;
  events_.push_back(
      {std::move(name), nullptr, phase, thread,
       std::chrono::duration_cast<nanoseconds>(begin - start_).count(),
       std::chrono::duration_cast<nanoseconds>(end - begin).count(),
       std::move(args)});
}

void Trace::AddKernel(const plan::Instruction &inst, TracePhase phase,
                      Clock::time_point begin, Clock::time_point end) {
  using std::chrono::nanoseconds;
  events_.push_back(
      {std::string(), &inst, phase,
       plan::IsCommunicationTime(inst) ? TraceThread::kCommunication
                             : TraceThread::kCompute,
       std::chrono::duration_cast<nanoseconds>(begin - start_).count(),
       std::chrono::duration_cast<nanoseconds>(end - begin).count(),
       std::string()});
}

std::string Trace::EventsJson(int64_t rank,
                              absl::string_view processName) const {
  std::vector<std::string> lines;
  lines.reserve(events_.size() + 10);
  lines.push_back(absl::StrCat(
      "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": ", rank,
      ", \"args\": {\"name\": ", common::JsonString(processName), "}}"));
  lines.push_back(absl::StrCat(
      "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": ", rank,
      ", \"args\": {\"sort_index\": ", rank, "}}"));
  for (TraceThread thread :
       {TraceThread::kStep, TraceThread::kCalls, TraceThread::kCompute,
        TraceThread::kCommunication}) {
    int tid = int(thread);
    lines.push_back(absl::StrCat(
        "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": ", rank,
        ", \"tid\": ", tid, ", \"args\": {\"name\": \"", threadName(thread),
        "\"}}"));
    lines.push_back(absl::StrCat(
        "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": ", rank,
        ", \"tid\": ", tid, ", \"args\": {\"sort_index\": ", tid, "}}"));
  }
  for (const Event &event : events_) {
    TracePhase category = event.phase;
    std::string name = event.name, args = event.args;
    if (const plan::Instruction *inst = event.inst) {
      name = plan::Kernel_Name(inst->kernel());
      args = absl::StrCat("\"provenance\": ",
                          common::JsonString(inst->provenance()));
      if (plan::IsCommunicationTime(*inst)) {
        category = TracePhase::kCommunication;
        absl::StrAppend(&args, ", \"phase\": ",
                        common::JsonString(TracePhaseName(event.phase)));
        if (inst->group_size())
          absl::StrAppend(
              &args, ", \"group\": ",
              common::JsonString(absl::StrJoin(inst->group(), ",")));
        if (plan::IsPointToPoint(inst->kernel())) {
          auto peer = inst->int_attrs().find("peer");
          absl::StrAppend(&args,
                          ", \"axis\": ", common::JsonString(inst->rank_axis()),
                          ", \"peer\": ",
                          peer == inst->int_attrs().end() ? 0 : peer->second);
        }
      }
    }
    lines.push_back(absl::StrCat(
        "{\"name\": ", common::JsonString(name), ", \"cat\": \"",
        TracePhaseName(category), "\", \"ph\": \"X\", \"pid\": ", rank,
        ", \"tid\": ", int(event.thread), ", \"ts\": ", micros(event.beginNs),
        ", \"dur\": ", micros(std::max<int64_t>(event.durationNs, 0)),
        ", \"cname\": \"", colourOf(category), "\", \"args\": {", args, "}}"));
  }
  return absl::StrJoin(lines, ",\n");
}

std::string TraceProcessName(const plan::Mesh &mesh, const Communicator *comm) {
  return RankName(mesh, comm ? comm->Rank() : 0,
                  comm ? absl::Span<const int64_t>(comm->Coordinates())
                       : absl::Span<const int64_t>());
}

std::string RankName(const plan::Mesh &mesh, int64_t rank,
                     absl::Span<const int64_t> coordinates) {
  auto coordinate = [&](int axis) -> int64_t {
    return axis < int(coordinates.size()) ? coordinates[axis] : 0;
  };
  std::vector<std::string> parts;
  for (const char *axis : {"pp", "dp", "tp"}) {
    int64_t c = 0;
    for (int i = 0; i < mesh.axes_size(); ++i)
      if (mesh.axes(i) == axis)
        c = coordinate(i);
    parts.push_back(absl::StrCat(axis, " ", c));
  }
  for (int i = 0; i < mesh.axes_size(); ++i)
    if (mesh.axes(i) != "pp" && mesh.axes(i) != "dp" && mesh.axes(i) != "tp")
      parts.push_back(absl::StrCat(mesh.axes(i), " ", coordinate(i)));
  return absl::StrCat("rank ", rank, " (", absl::StrJoin(parts, ", "), ")");
}

absl::Status WriteTrace(const Trace &trace, const plan::Mesh &mesh,
                        Communicator *comm, std::ostream *out) {
  int64_t rank = comm ? comm->Rank() : 0;
  std::string mine = trace.EventsJson(rank, TraceProcessName(mesh, comm));
  int64_t ranks = 1;
  for (int64_t size : mesh.sizes())
    ranks *= size;
  std::vector<std::string> all;
  if (comm && ranks > 1) {
    // The sizes, then the bytes, padded to the largest, as F64 elements (the
    // collectives move F32 and F64; the bytes travel unchanged).
    std::vector<std::string> axes(mesh.axes().begin(), mesh.axes().end());
    double size = double(mine.size());
    std::vector<double> sizes(ranks);
    if (absl::Status s =
            comm->AllGather(axes, &size, sizes.data(), 1, plan::F64);
        !s.ok())
      return absl::Status(s.code(), absl::StrCat("gathering the sizes of the "
                                                 "ranks' traces: ",
                                                 s.message()));
    int64_t most = int64_t(*std::max_element(sizes.begin(), sizes.end()));
    int64_t words = std::max<int64_t>((most + 7) / 8, 1);
    std::vector<double> in(words, 0.0), gathered(words * ranks);
    std::memcpy(in.data(), mine.data(), mine.size());
    if (absl::Status s =
            comm->AllGather(axes, in.data(), gathered.data(), words, plan::F64);
        !s.ok())
      return absl::Status(s.code(), absl::StrCat("gathering the ranks' "
                                                 "traces: ",
                                                 s.message()));
    for (int64_t r = 0; r < ranks; ++r) {
      int64_t bytes = int64_t(sizes[r]);
      if (bytes < 0 || bytes > words * 8)
        return absl::InternalError(
            absl::StrCat("the trace of the rank at place ", r, " has ", bytes,
                         " bytes, expected at most ", words * 8));
      all.emplace_back(
          reinterpret_cast<const char *>(gathered.data() + r * words),
          size_t(bytes));
    }
  } else {
    all.push_back(std::move(mine));
  }
  if (!out)
    return absl::OkStatus();
  *out << "{\"traceEvents\": [\n"
       << absl::StrJoin(all, ",\n") << "\n],\n\"displayTimeUnit\": \"ms\"}\n";
  out->flush();
  if (!*out)
    return absl::DataLossError("the trace could not be written whole");
  return absl::OkStatus();
}

} // namespace braid::exec
