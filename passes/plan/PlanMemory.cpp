//===- PlanMemory.cpp - Static arena offsets ------------------------------===//
//
// Implements `plan-memory` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <map>

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid::plan_ir;

namespace {

constexpr int64_t kAlign = 64;

int64_t alignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

struct PlanMemoryPass : public braid::plan_ir::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override;
};

/// Places the buffers of one pipeline stage (all of them without a
/// pipeline): returns the arena bytes they need.
int64_t placeStage(ModuleOp module, MutableArrayRef<BufferOp> all) {
  llvm::StringMap<unsigned> index;
  for (auto [i, b] : llvm::enumerate(all))
    index[b.getSymName()] = i;
  // A view lives where its bucket is: its uses are the bucket's, and it is
  // placed with it.
  for (BufferOp b : all)
    if (std::optional<StringRef> parent = b.getViewOf())
      if (auto it = index.find(*parent); it != index.end())
        index[b.getSymName()] = it->second;

  // Live ranges over the kernels of all functions, in order (a stage's
  // functions name only its buffers).
  const int64_t kNever = -1;
  SmallVector<int64_t> first(all.size(), kNever), last(all.size(), kNever);
  int64_t position = 0;
  for (FuncOp fn : module.getOps<FuncOp>())
    for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
      for (ArrayAttr list : {kernel.getInputs(), kernel.getOutputs()})
        for (Attribute ref : list) {
          auto it = index.find(
              cast<SymbolRefAttr>(ref).getRootReference().getValue());
          if (it == index.end())
            continue; // another stage's
          unsigned i = it->second;
          if (first[i] == kNever)
            first[i] = position;
          last[i] = position;
        }
      ++position;
    }

  // Whole-program buffers first, one after the other: parameters, state,
  // inputs, named results, and what a stage keeps from a micro-batch's
  // forward to its backward (one copy per slot).
  int64_t offset = 0;
  SmallVector<unsigned> scoped;
  for (auto [i, b] : llvm::enumerate(all)) {
    if (b.getViewOf())
      continue;
    bool persistent = b.getRole() != "activation" || b.getName().has_value() ||
                      b.getSlots().has_value();
    if (persistent || first[i] == kNever) {
      b.setOffset(offset);
      offset = alignUp(offset + b.getBytes() * b.getSlots().value_or(1));
    } else {
      scoped.push_back(i);
    }
  }
  const int64_t base = offset;
  int64_t top = base;

  // The rest by first fit in order of birth; a buffer's space is free once
  // the kernel of its last use has run (not during it).
  llvm::sort(scoped, [&](unsigned a, unsigned c) { return first[a] < first[c]; });
  struct Placed {
    int64_t begin, end, last;
  };
  std::vector<Placed> live;
  for (unsigned i : scoped) {
    llvm::erase_if(live, [&](const Placed &p) { return p.last < first[i]; });
    std::sort(live.begin(), live.end(),
              [](const Placed &a, const Placed &c) { return a.begin < c.begin; });
    int64_t size = alignUp(all[i].getBytes());
    int64_t at = base;
    for (const Placed &p : live) {
      if (p.begin - at >= size)
        break;
      at = std::max(at, p.end);
    }
    all[i].setOffset(at);
    live.push_back({at, at + size, last[i]});
    top = std::max(top, at + size);
  }
  for (BufferOp b : all)
    if (std::optional<StringRef> parent = b.getViewOf())
      b.setOffset(*all[index[*parent]].getOffset() + *b.getViewOffset());
  return top;
}

void PlanMemoryPass::runOnOperation() {
  ModuleOp module = getOperation();
  // Each view lies inside a bucket of its stage.
  SymbolTable symbols(module);
  for (BufferOp b : module.getOps<BufferOp>()) {
    std::optional<StringRef> parent = b.getViewOf();
    if (!parent)
      continue;
    auto bucket = symbols.lookup<BufferOp>(*parent);
    if (!bucket ||
        (bucket.getRole() != "bucket" && bucket.getRole() != "activation") ||
        bucket.getStage() != b.getStage() ||
        int64_t(*b.getViewOffset() + b.getBytes()) >
            int64_t(bucket.getBytes())) {
      b.emitOpError("is a view of @")
          << *parent
          << ", which is not a bucket (or temporary) of its stage it fits in";
      return signalPassFailure();
    }
  }
  // Each pipeline stage's buffers live on its own ranks: one arena each,
  // the plan's the largest.
  std::map<int64_t, SmallVector<BufferOp>> byStage;
  for (BufferOp b : module.getOps<BufferOp>())
    byStage[b.getStage().value_or(0)].push_back(b);
  int64_t arena = 0;
  OpBuilder b(module.getContext());
  std::map<int64_t, int64_t> stageArena;
  for (auto &[stage, buffers] : byStage) {
    stageArena[stage] = placeStage(module, buffers);
    arena = std::max(arena, stageArena[stage]);
  }
  // Each pipeline stage's own arena, for the report.
  for (StageOp stage : module.getOps<StageOp>())
    stage->setAttr("plan.arena_bytes",
                   b.getI64IntegerAttr(stageArena[stage.getIndex()]));
  module->setAttr("plan.arena_bytes",
                  OpBuilder(module.getContext()).getI64IntegerAttr(arena));
}

} // namespace
