//===- TrainerReport.cpp - The end of a run and its reports ---------------===//
//
// FinishRun (TrainerInternal.h): the trace (--trace), the metrics file
// committed, the parameters (--save-params), the measured step time against
// the plan's prediction, every rank's arena, and the kernel profile
// (--profile-out, --profile).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TrainerInternal.h"

#include "runtime/common/Format.h"

#include "runtime/cpu/Blas.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/plan/PlanLoader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace braid::exec::trainer {
namespace {

/// Every rank's arena, predicted (what the rank allocated, as the plan sized
/// it) and touched (the operating system's count of the pages the run used),
/// gathered onto rank 0, which writes one line per rank to `log`.
absl::Status reportMemory(const Backend &e, std::ostream *log) {
  const plan::Plan &plan = e.plan();
  Communicator *comm = e.communicator();
  int64_t ranks = plan::WorldSize(plan);
  int64_t touched = e.TouchedArenaBytes();
  if (touched < 0)
    return absl::InternalError(
        absl::StrCat("cannot count the arena's touched pages (mincore): ",
                     std::strerror(errno)));
  std::vector<double> mine = {double(e.ArenaBytes()), double(touched),
                              double(e.WorkspaceBytes())};
  const int64_t fields = int64_t(mine.size());
  std::vector<double> all = mine;
  if (comm && ranks > 1) {
    std::vector<std::string> axes(plan.mesh().axes().begin(),
                                  plan.mesh().axes().end());
    all.resize(fields * ranks);
    if (absl::Status s =
            comm->AllGather(axes, mine.data(), all.data(), fields, plan::F64);
        !s.ok())
      return absl::Status(s.code(), absl::StrCat("gathering the ranks' arena "
                                                 "bytes: ",
                                                 s.message()));
  } else {
    ranks = 1;
  }
  if (!log)
    return absl::OkStatus();
  // The all-gather over every axis orders the ranks row-major over the
  // mesh's axes: place r is rank r.
  // A GPU's arena is committed when it is allocated: its count is the
  // allocation, not pages touched.
  const char *used = std::string(e.Device()) == "cpu" ? "touched" : "allocated";
  for (int64_t r = 0; r < ranks; ++r) {
    const double *f = &all[size_t(r * fields)];
    int64_t predicted = int64_t(f[0]), arena = int64_t(f[1]),
            workspaces = int64_t(f[2]);
    *log << absl::StrFormat(
        "memory: %s: predicted %s (%d B), %s %s (%d B) (%s)%s\n",
        RankName(plan.mesh(), r, plan::MeshCoordinates(plan.mesh(), r)),
        common::FormatBytes(predicted), predicted, used,
        common::FormatBytes(arena), arena,
        predicted > 0 ? absl::StrFormat("%.2f %%", 100.0 * double(arena) /
                                                       double(predicted))
                      : std::string("nothing predicted"),
        workspaces > 0
            ? absl::StrFormat(", and %s of the kernels' workspaces",
                              common::FormatBytes(workspaces))
            : std::string());
  }
  return absl::OkStatus();
}

/// The kernel profile of every rank (Backend::KernelProfiles), gathered
/// onto rank 0, which writes it to `out` (null on the other ranks) with the
/// step times `stepTimes` (rank 0's, of the profiled steps) as one JSON
/// object:
///   {"world_size": W, "threads": T, "steps": N, "step_time_s": [...],
///    "ranks": [{"rank": r, "kernels": {"LINEAR": {"seconds": s,
///    "calls": c, "flops": f, "bytes": b}, ...}}, ...]}
/// with only the kernels a rank called. Every rank must call it.
absl::Status writeProfile(const Backend &e,
                          const std::vector<double> &stepTimes,
                          Communicator *comm, std::ostream *out) {
  const plan::Plan &plan = e.plan();
  const std::vector<Backend::KernelProfile> &profile = e.KernelProfiles();
  constexpr int kFields = 4;
  const int kinds = plan::Kernel_ARRAYSIZE;
  std::vector<double> mine(kinds * kFields, 0.0);
  for (int k = 0; k < int(profile.size()) && k < kinds; ++k) {
    mine[k * kFields + 0] = profile[k].seconds;
    mine[k * kFields + 1] = double(profile[k].calls);
    mine[k * kFields + 2] = profile[k].flops;
    mine[k * kFields + 3] = profile[k].bytes;
  }
  int64_t ranks = plan::WorldSize(plan);
  std::vector<double> all = mine;
  if (comm && ranks > 1) {
    // Over every axis, in the mesh's order: place r is rank r.
    std::vector<std::string> axes(plan.mesh().axes().begin(),
                                  plan.mesh().axes().end());
    all.resize(size_t(ranks) * mine.size());
    if (absl::Status s = comm->AllGather(axes, mine.data(), all.data(),
                                         int64_t(mine.size()), plan::F64);
        !s.ok())
      return absl::Status(s.code(), absl::StrCat("gathering the ranks' "
                                                 "profiles: ",
                                                 s.message()));
  } else {
    ranks = 1;
  }
  if (!out)
    return absl::OkStatus();
  std::string json = absl::StrFormat(
      "{\"world_size\": %d, \"threads\": %d, \"steps\": %d, "
      "\"step_time_s\": [%s],\n \"ranks\": [",
      ranks, cpu::numThreads(), int64_t(stepTimes.size()),
      absl::StrJoin(stepTimes, ", ", [](std::string *o, double t) {
        absl::StrAppend(o, absl::StrFormat("%.9g", t));
      }));
  for (int64_t r = 0; r < ranks; ++r) {
    absl::StrAppend(&json, r ? ",\n  " : "\n  ", "{\"rank\": ", r,
                    ", \"kernels\": {");
    bool first = true;
    for (int k = 0; k < kinds; ++k) {
      const double *f = &all[size_t(r) * mine.size() + size_t(k) * kFields];
      if (f[1] <= 0 || !plan::Kernel_IsValid(k))
        continue;
      absl::StrAppend(
          &json, first ? "" : ", ",
          absl::StrFormat("\"%s\": {\"seconds\": %.9g, \"calls\": %d, "
                          "\"flops\": %.9g, \"bytes\": %.9g}",
                          plan::Kernel_Name(plan::Kernel(k)), f[0],
                          int64_t(f[1]), f[2], f[3]));
      first = false;
    }
    absl::StrAppend(&json, "}}");
  }
  absl::StrAppend(&json, "\n]}\n");
  *out << json;
  out->flush();
  if (!*out)
    return absl::InternalError("the file cannot be written");
  return absl::OkStatus();
}

} // namespace

absl::Status FinishRun(TrainingRun &run) {
  const plan::Plan &plan = run.plan;
  const TrainerOptions &options = run.options;
  const plan::Training &t = run.t;
  const bool writer = run.writer;
  const std::vector<double> &stepTimes = run.stepTimes;
  Backend &e = *run.backend;
  if (Trace *trace = run.trace.get()) {
    (void)e.SetTrace(nullptr); // stopping cannot fail
    if (absl::Status s = WriteTrace(*trace, plan.mesh(), options.comm,
                                    writer ? &run.traceFile : nullptr);
        !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("writing the trace to ", options.trace,
                                       ": ", s.message()));
    if (writer)
      if (absl::Status s = run.traceFile.Commit(); !s.ok())
        return absl::Status(s.code(), absl::StrCat("--trace: ", s.message()));
    if (options.log)
      *options.log << "trace: " << options.trace
                   << " (open it in ui.perfetto.dev or chrome://tracing)\n";
  }
  if (run.metrics)
    if (absl::Status s = run.metrics->Commit(); !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("--metrics-out: ", s.message()));
  if (absl::Status s = GatherParams(run); !s.ok())
    return s;
  if (!options.saveParams.empty())
    if (absl::Status s = saveParameters(e, options.saveParams); !s.ok())
      return s;
  if (options.log)
    for (const std::string &note : e.RunNotes())
      *options.log << note << "\n";
  // Measured against predicted: the median step after the first (which
  // pays for first touches of the arena and warm-up).
  if (options.log && t.predicted_step_time_s() > 0 && !stepTimes.empty()) {
    std::vector<double> steady(stepTimes.begin() + (stepTimes.size() > 1),
                               stepTimes.end());
    std::sort(steady.begin(), steady.end());
    double measured = steady[steady.size() / 2];
    double predicted = t.predicted_step_time_s();
    *options.log << absl::StrFormat(
        "step time: measured %.4g s (median of %d steps), predicted %.4g s on "
        "%s (%+.1f %%)\n",
        measured, int(steady.size()), predicted, t.predicted_cluster(),
        100 * (predicted - measured) / measured);
  }
  if (absl::Status s = reportMemory(e, options.log); !s.ok())
    return s;
  if (!options.profileOut.empty()) {
    std::vector<double> measured(stepTimes.begin() + (stepTimes.size() > 1),
                                 stepTimes.end());
    if (absl::Status s = writeProfile(e, measured, options.comm,
                                      writer ? &run.profileFile : nullptr);
        !s.ok())
      return absl::Status(s.code(),
                          absl::StrCat("writing the profile to ",
                                       options.profileOut, ": ", s.message()));
    if (writer)
      if (absl::Status s = run.profileFile.Commit(); !s.ok())
        return absl::Status(s.code(),
                            absl::StrCat("--profile-out: ", s.message()));
    if (options.log)
      *options.log << absl::StrFormat(
          "profile: %s (kernels of every rank over %d step%s)\n",
          options.profileOut, int64_t(measured.size()),
          measured.size() == 1 ? "" : "s");
  }
  if (options.profile && options.log) {
    const std::vector<double> &p = e.Profile();
    double total = 0, gemm = 0;
    for (int k = 0; k < int(p.size()); ++k) {
      total += p[k];
      if (k == plan::LINEAR || k == plan::LINEAR_GRAD_INPUT ||
          k == plan::LINEAR_GRAD_WEIGHT)
        gemm += p[k];
    }
    int64_t profiled = int64_t(stepTimes.size()) - (stepTimes.size() > 1);
    *options.log << absl::StrFormat(
        "profile: %.3f s in kernels over %d step%s%s, GEMM %.1f %%%s\n", total,
        profiled, profiled == 1 ? "" : "s",
        stepTimes.size() > 1 ? " (the first left out)" : "",
        total > 0 ? 100 * gemm / total : 0.0,
        options.device == "cpu"
            ? absl::StrCat(" (OpenBLAS ", cpu::blasCoreName(), " kernels)")
            : std::string());
    std::vector<std::pair<double, int>> order;
    for (int k = 0; k < int(p.size()); ++k)
      if (p[k] > 0)
        order.push_back({p[k], k});
    std::sort(order.rbegin(), order.rend());
    for (auto [seconds, k] : order)
      *options.log << absl::StrFormat("  %-24s %8.3f s  %5.1f %%\n",
                                      plan::Kernel_Name(plan::Kernel(k)),
                                      seconds, 100 * seconds / total);
  }
  return absl::OkStatus();
}

} // namespace braid::exec::trainer
