//===- ExecutorBase.cpp - What the CPU and CUDA executors share -----------===//

#include "runtime/exec/ExecutorBase.h"

#include "runtime/plan/InstructionDType.h"
#include "runtime/plan/KernelParams.h"
#include "runtime/plan/Mesh.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/Work.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace braid::exec {
namespace {

using plan::Buffer;
using plan::Instruction;


/// A linear layer of `rows` rows from `inDim` features to `outDim`, with the
/// instruction's transpose_w and bias_scale.
cpu::LinearShape linearShape(const Instruction &inst, int64_t rows,
                             int64_t inDim, int64_t outDim) {
  const plan::LinearParams p = plan::DecodeLinear(inst);
  return {rows, inDim, outDim, p.transposeW, p.biasScale};
}

} // namespace

absl::Status ExecutorBase::CheckCoordinates(const plan::Plan &plan,
                                            const Communicator *comm) {
  if (!comm)
    return absl::OkStatus();
  return plan::CheckMeshCoordinates(plan.mesh(), comm->Coordinates());
}

void ExecutorBase::placeRank(Communicator *comm) {
  comm_ = comm;
  // The rank's arena: its stage's (the loader checked that the stage's
  // buffers lie inside it), or the plan's.
  arenaBytes_ = plan_.arena_bytes();
  if (plan_.pipeline().stages_size() > 0) {
    stage_ = coordinate("pp");
    arenaBytes_ = plan_.pipeline().stages(int(stage_)).arena_bytes();
  }
  bytes_.clear();
  for (const Buffer &b : plan_.buffers())
    bytes_.push_back(plan::NumElements(b) * plan::DTypeBytes(b.dtype()));
  // Each instruction's dtype, once (it depends only on the plan).
  mixed_ = plan::MixedPrecisionDType(plan_);
  dtypes_.clear();
  for (const plan::Function &fn : plan_.functions()) {
    std::vector<plan::DType> &dtypes = dtypes_.emplace_back();
    for (const Instruction &inst : fn.body())
      dtypes.push_back(plan::InstructionDType(plan_, inst, mixed_));
  }
}

absl::Status ExecutorBase::WaitSends() {
  if (!comm_)
    return absl::OkStatus();
  return comm_->WaitSends();
}

//===--- Functions and buffers --------------------------------------------===//

absl::StatusOr<int> ExecutorBase::findFunction(absl::string_view name) const {
  int index = -1;
  for (int i = 0; i < plan_.functions_size(); ++i)
    if (plan_.functions(i).name() == name)
      index = i;
  if (index < 0)
    return absl::NotFoundError(
        absl::StrCat("the plan has no function '", name, "'"));
  return index;
}

absl::Status ExecutorBase::checkFunctionBuffers(int function,
                                                int64_t slot) const {
  const plan::Function &fn = plan_.functions(function);
  for (const Instruction &inst : fn.body())
    for (const auto *ids : {&inst.inputs(), &inst.outputs()})
      for (int32_t id : *ids)
        if (absl::Status s = checkCopy(id, slot); !s.ok())
          return inFunction(s, fn.name());
  return absl::OkStatus();
}

absl::Status ExecutorBase::inFunction(const absl::Status &s,
                                      absl::string_view function,
                                      const Instruction *inst) {
  if (!inst)
    return absl::Status(
        s.code(), absl::StrCat("function '", function, "': ", s.message()));
  return absl::Status(s.code(),
                      absl::StrCat("function '", function, "', ",
                                   inst->provenance(), ": ", s.message()));
}

absl::Status ExecutorBase::checkOwned(int id) const {
  return plan::CheckBufferOnStage(plan_, id, stage_);
}

bool ExecutorBase::isCopy(int id, int64_t slot) const {
  const Buffer &b = plan_.buffers(id);
  return slot >= 0 && (b.slots() < 2 || slot < b.slots());
}

//===--- Profile and trace ------------------------------------------------===//

void ExecutorBase::EnableProfile() {
  profile_.assign(plan::Kernel_ARRAYSIZE, 0.0);
  kernelProfiles_.assign(plan::Kernel_ARRAYSIZE, KernelProfile());
  // The work of an instruction depends only on the plan, so it is computed
  // once here rather than on every call of a kernel that takes microseconds.
  work_.clear();
  for (const plan::Function &fn : plan_.functions()) {
    std::vector<std::pair<double, double>> &work = work_.emplace_back();
    for (const Instruction &inst : fn.body()) {
      plan::Work w = plan::InstructionWork(plan_, inst);
      work.push_back({w.flops, w.bytes});
    }
  }
}

void ExecutorBase::ResetProfile() {
  if (profile_.empty())
    return; // not profiling: nothing to reset, and no work to count with
  profile_.assign(plan::Kernel_ARRAYSIZE, 0.0);
  kernelProfiles_.assign(plan::Kernel_ARRAYSIZE, KernelProfile());
}

void ExecutorBase::addProfile(int function, int i, double seconds) {
  const plan::Kernel kernel = plan_.functions(function).body(i).kernel();
  const std::pair<double, double> &work = work_[size_t(function)][size_t(i)];
  profile_[kernel] += seconds;
  KernelProfile &k = kernelProfiles_[kernel];
  k.seconds += seconds;
  k.calls += 1;
  k.flops += work.first;
  k.bytes += work.second;
}

absl::Status ExecutorBase::SetTrace(Trace *trace) {
  trace_ = trace;
  tracePhases_.clear();
  if (trace)
    tracePhases_ = KernelPhases(plan_);
  return absl::OkStatus();
}

//===--- The rank's coordinates -------------------------------------------===//

int64_t ExecutorBase::coordinate(absl::string_view axis) const {
  return comm_ ? plan::AxisCoordinate(plan_.mesh(), comm_->Coordinates(), axis)
               : 0;
}

int64_t ExecutorBase::rankCoordinate(const Instruction &inst) const {
  return inst.rank_axis().empty() ? 0 : coordinate(inst.rank_axis());
}

int64_t ExecutorBase::groupPlace(const Instruction &inst) const {
  return comm_ ? plan::GroupPlace(plan_, inst, comm_->Coordinates()) : 0;
}

//===--- What the handlers decode -----------------------------------------===//

int64_t ExecutorBase::sliceStart(const Instruction &inst,
                                 const char *strideAttr) const {
  return rankCoordinate(inst) * plan::SliceStride(inst, strideAttr);
}

cpu::LinearShape
ExecutorBase::linearForwardShape(const Instruction &inst) const {
  const Buffer &x = plan_.buffers(inst.inputs(0)),
               &w = plan_.buffers(inst.inputs(1));
  bool t = plan::DecodeLinear(inst).transposeW;
  return linearShape(inst, plan::RowsOf(x), t ? w.shape(1) : w.shape(0),
                     t ? w.shape(0) : w.shape(1));
}

cpu::LinearShape
ExecutorBase::linearGradInputShape(const Instruction &inst) const {
  const Buffer &dy = plan_.buffers(inst.inputs(0));
  return linearShape(inst, plan::RowsOf(dy),
                     plan::LastDim(plan_.buffers(inst.outputs(0))),
                     plan::LastDim(dy));
}

cpu::LinearShape
ExecutorBase::linearGradWeightShape(const Instruction &inst) const {
  const Buffer &x = plan_.buffers(inst.inputs(0));
  return linearShape(inst, plan::RowsOf(x), plan::LastDim(x),
                     plan::LastDim(plan_.buffers(inst.inputs(1))));
}

cpu::AttentionShape
ExecutorBase::attentionShape(const Instruction &inst) const {
  const Buffer &q = plan_.buffers(inst.inputs(0));
  const plan::AttentionParams p = plan::DecodeAttention(inst);
  cpu::AttentionShape s{};
  s.batch = q.shape(0);
  s.seq = q.shape(1);
  s.heads = p.heads;
  s.kvHeads = p.kvHeads;
  s.headDim = q.shape(2) / p.heads;
  s.scale = p.scale;
  s.causal = p.causal;
  s.alibi = p.alibi;
  if (p.sliced) {
    // This rank's slice of the heads (validated by the loader), at its
    // coordinate along the rank_axis.
    int64_t coordinate = rankCoordinate(inst);
    s.globalHeads = p.globalHeads;
    s.globalKvHeads = p.globalKvHeads;
    s.headOffset = coordinate * p.headOffsetStride;
    s.kvHeadOffset = coordinate * p.kvHeadOffsetStride;
  }
  return s;
}

cpu::QkvShape ExecutorBase::qkvShape(const Instruction &inst,
                                     const Buffer &fused) {
  const plan::QkvParams p = plan::DecodeQkv(inst);
  return {plan::RowsOf(fused), p.heads, p.kvHeads, p.headDim, p.perHead};
}

cpu::GlobalIndexing ExecutorBase::dropoutIndexing(const Instruction &inst,
                                                  int64_t rowOffset) const {
  const Buffer &x = plan_.buffers(inst.inputs(0));
  int64_t n = plan::NumElements(x), samples = x.shape_size() ? x.shape(0) : 1;
  int64_t perSample = n / std::max<int64_t>(samples, 1);
  cpu::GlobalIndexing at{samples, perSample, perSample, rowOffset, 0};
  if (!inst.rank_axis().empty() && plan::DecodeDropout(inst).featureSplit) {
    // The rank's slice of the last dimension: a row per token, whose
    // elements start at col_offset_stride x the rank's coordinate.
    const int64_t last = x.shape_size() ? x.shape(x.shape_size() - 1) : 1;
    at.rows = n / std::max<int64_t>(last, 1);
    at.cols = last;
    at.globalCols = last * plan::AxisSize(plan_.mesh(), inst.rank_axis());
    at.rowsPerSample = at.rows / std::max<int64_t>(samples, 1);
    at.rowOffset = rowOffset * at.rowsPerSample;
    at.colOffset = sliceStart(inst, "col_offset_stride");
  } else if (!inst.rank_axis().empty()) {
    at.globalCols = perSample * plan::AxisSize(plan_.mesh(), inst.rank_axis());
    at.colOffset = sliceStart(inst, "col_offset_stride");
  }
  return at;
}

//===--- Collectives in flight --------------------------------------------===//

void ExecutorBase::startInFlight(int64_t handle, std::vector<int32_t> buffers,
                                 const Instruction &inst, TracePhase phase) {
  inFlight_.push_back({handle, std::move(buffers), &inst, phase,
                       std::chrono::steady_clock::now(), {}, false});
}

absl::Status ExecutorBase::pollInFlight() {
  for (InFlight &f : inFlight_) {
    if (f.done)
      continue;
    absl::StatusOr<bool> done = comm_->Test(f.handle);
    if (!done.ok())
      return done.status();
    if (*done) {
      f.done = true;
      f.end = std::chrono::steady_clock::now();
    }
  }
  return absl::OkStatus();
}

absl::Status ExecutorBase::finishInFlight(const Instruction *wait) {
  for (auto it = inFlight_.begin(); it != inFlight_.end();) {
    bool named = !wait;
    if (wait)
      for (int32_t id : wait->inputs())
        named |= std::find(it->buffers.begin(), it->buffers.end(), id) !=
                 it->buffers.end();
    if (!named) {
      ++it;
      continue;
    }
    if (!it->done) {
      if (absl::Status s = comm_->Wait(it->handle); !s.ok())
        return s;
      it->end = std::chrono::steady_clock::now();
    }
    finishedInFlight(*it);
    it = inFlight_.erase(it);
  }
  return absl::OkStatus();
}

} // namespace braid::exec
