//===- PlanVerify.cpp - No rank of a plan waits forever -------------------===//
//
// Implements `plan-verify` (see Passes.td).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/Support/FormatVariadic.h"

#include <deque>
#include <map>

namespace braid::plan_ir {
#define GEN_PASS_DEF_PLANVERIFY
#include "passes/plan/Passes.h.inc"
} // namespace braid::plan_ir

using namespace mlir;
using namespace braid::plan_ir;
namespace plan = braid::plan;

namespace {

struct PlanVerifyPass
    : public braid::plan_ir::impl::PlanVerifyBase<PlanVerifyPass> {
  void runOnOperation() override;
};

/// What a stage does that another stage takes part in.
struct Event {
  /// WaitSends: the stage goes on once every message it sent was received
  /// (braid-run waits for its sends after each call of an evaluation).
  enum Kind { Send, Recv, Collective, WaitSends } kind;
  mutable KernelOp op;
  int64_t peer = 0;   // Send, Recv: the other stage
  std::string where;  // the function and the schedule's call
};

std::string describe(const Event &e) {
  if (e.kind == Event::WaitSends)
    return "the wait for its sends after " + e.where;
  std::string s = "'" + e.op.getKernel().str() + "'";
  if (std::optional<StringRef> why = e.op.getProvenance())
    s += " (" + why->str() + ")";
  return s + " in " + e.where;
}

/// The stage's step as the events of its kernels, in the order it runs
/// them; with `evaluation`, braid-run's evaluation of as many micro-batches
/// instead: each micro-batch through the stage's chunks in order (their
/// eval_forward), waiting for the sends after each call (none without
/// eval_forward).
FailureOr<std::vector<Event>> eventsOf(SymbolTable &symbols, StageOp stage,
                                       bool evaluation = false) {
  std::vector<Event> events;
  auto add = [&](std::optional<StringRef> name,
                 const std::string &where) -> LogicalResult {
    if (!name)
      return success();
    auto fn = symbols.lookup<FuncOp>(*name);
    if (!fn)
      return stage.emitOpError("names @") << *name << ", which is not a plan.func";
    for (KernelOp k : fn.getBody().getOps<KernelOp>()) {
      const plan::KernelRow *row = k.getKernelRow();
      if (row && row->has(plan::kPointToPoint)) {
        auto peer = k.getParams().getAs<IntegerAttr>("peer");
        if (!peer)
          return k.emitOpError("has no peer");
        // A transfer's message is SEND's input, RECV's output.
        events.push_back({k.getInputs().empty() ? Event::Recv : Event::Send, k,
                          int64_t(stage.getIndex()) + peer.getInt(), where});
      } else if (std::optional<ArrayAttr> group = k.getGroup()) {
        if (llvm::any_of(*group, [](Attribute a) {
              return cast<StringAttr>(a).getValue() == "pp";
            }))
          events.push_back({Event::Collective, k, 0, where});
      }
    }
    return success();
  };
  if (evaluation) {
    std::optional<StringRef> own = stage.getEvalForward();
    if (!own)
      return events;
    SmallVector<StringRef> chunkFns = {*own};
    if (std::optional<ArrayAttr> chunks = stage.getChunks())
      for (Attribute chunk : *chunks) {
        auto fn = cast<DictionaryAttr>(chunk).getAs<FlatSymbolRefAttr>(
            "eval_forward");
        if (!fn)
          return stage.emitOpError("has an eval_forward but a chunk has none");
        chunkFns.push_back(fn.getValue());
      }
    int64_t micros = 0;
    if (std::optional<ArrayAttr> schedule = stage.getSchedule())
      for (Attribute attr : *schedule) {
        FailureOr<ScheduleCall> call =
            parseScheduleCall(cast<StringAttr>(attr).getValue());
        if (succeeded(call) && call->kind == 'F' && call->chunk == 0)
          ++micros;
      }
    for (int64_t m = 0; m < std::max<int64_t>(micros, 1); ++m)
      for (auto [c, fn] : llvm::enumerate(chunkFns)) {
        std::string where = "the evaluation of micro-batch " + std::to_string(m) +
                            (c ? " on chunk " + std::to_string(c) : std::string());
        if (failed(add(fn, where)))
          return failure();
        events.push_back({Event::WaitSends, KernelOp(), 0, where});
      }
    return events;
  }
  if (failed(add(stage.getZeroGrads(), "zero_grads")))
    return failure();
  if (std::optional<ArrayAttr> schedule = stage.getSchedule())
    for (Attribute attr : *schedule) {
      StringRef text = cast<StringAttr>(attr).getValue();
      FailureOr<ScheduleCall> call = parseScheduleCall(text);
      if (failed(call))
        return stage.emitOpError("schedule call \"") << text << "\" is malformed";
      std::string where =
          (call->kind == 'F'   ? "the forward"
           : call->kind == 'B' ? "the backward"
                               : "the weight gradients") +
          (" of micro-batch " + std::to_string(call->microBatch)) +
          (call->chunk ? " on chunk " + std::to_string(call->chunk)
                       : std::string());
      std::optional<ArrayAttr> chunks = stage.getChunks();
      if (call->chunk < 0 ||
          (call->chunk > 0 &&
           (!chunks || call->chunk > int64_t(chunks->size()))))
        return stage.emitOpError("schedule call \"")
               << text << "\" names a chunk the stage does not have";
      // The call's function: its chunk's, or its own (plan-overlap-grad-
      // reduce's last backward).
      std::optional<StringRef> fn = functionOfCall(stage, *call);
      if (call->kind != 'F' && call->kind != 'B' && (call->kind != 'W' || !fn))
        return stage.emitOpError("schedule call \"")
               << text << "\" is not F, B or W (W needs a backward_weight)";
      if (failed(add(fn, where)))
        return failure();
    }
  if (failed(add(stage.getUpdate(), "update")))
    return failure();
  return events;
}

/// The bytes of the arena `buffer` takes, all its slots; none before
/// plan-memory has placed it.
std::optional<std::pair<int64_t, int64_t>> bytesOf(BufferOp buffer) {
  std::optional<uint64_t> offset = buffer.getOffset();
  if (!offset)
    return std::nullopt;
  int64_t begin = int64_t(*offset);
  return std::make_pair(begin,
                        begin + buffer.getBytes() *
                                    int64_t(buffer.getSlots().value_or(1)));
}

/// No kernel of `fn` touches the memory of a collective in flight: between
/// an async collective and the WAIT that finishes it (one naming any of its
/// buffers), no kernel writes the bytes it reads or writes, nor reads the
/// bytes it writes, and the function waits for everything it started.
LogicalResult checkInFlight(FuncOp fn, SymbolTable &symbols) {
  using Range = std::pair<int64_t, int64_t>;
  struct Access {
    Range bytes;
    StringRef buffer;
  };
  auto accesses = [&](ArrayAttr list) {
    SmallVector<Access> out;
    for (Attribute ref : list) {
      StringRef name = cast<SymbolRefAttr>(ref).getRootReference().getValue();
      if (auto buffer = symbols.lookup<BufferOp>(name))
        if (std::optional<Range> bytes = bytesOf(buffer))
          out.push_back({*bytes, name});
    }
    return out;
  };
  using Clash = std::pair<const Access *, const Access *>;
  auto clash = [](ArrayRef<Access> a, ArrayRef<Access> b) -> Clash {
    for (const Access &x : a)
      for (const Access &y : b)
        if (x.bytes.first < y.bytes.second && y.bytes.first < x.bytes.second)
          return {&x, &y};
    return {nullptr, nullptr};
  };
  struct InFlight {
    KernelOp start;
    SmallVector<Access> reads, writes;
  };
  SmallVector<InFlight> inFlight;
  auto describe = [](KernelOp k) {
    std::string s = "'" + k.getKernel().str() + "'";
    if (std::optional<StringRef> why = k.getProvenance())
      s += " (" + why->str() + ")";
    return s;
  };
  for (KernelOp kernel : fn.getBody().getOps<KernelOp>()) {
    if (kernel.is(plan::KernelId::WAIT)) {
      llvm::erase_if(inFlight, [&](InFlight &f) {
        return llvm::any_of(kernel.getInputs(), [&](Attribute ref) {
          return llvm::is_contained(f.start.getInputs(), ref) ||
                 llvm::is_contained(f.start.getOutputs(), ref);
        });
      });
      continue;
    }
    SmallVector<Access> reads = accesses(kernel.getInputs()),
                        writes = accesses(kernel.getOutputs());
    for (InFlight &f : inFlight) {
      Clash hit = clash(writes, f.reads);
      if (!hit.first)
        hit = clash(writes, f.writes);
      if (!hit.first)
        hit = clash(reads, f.writes);
      if (hit.first)
        return kernel.emitError("plan-verify: ")
               << describe(kernel) << " in @" << fn.getSymName() << " touches @"
               << hit.first->buffer << " (bytes " << hit.first->bytes.first
               << ".." << hit.first->bytes.second << " of the arena) while "
               << describe(f.start) << ", in flight, uses @"
               << hit.second->buffer << " (bytes " << hit.second->bytes.first
               << ".." << hit.second->bytes.second << ")";
    }
    auto async = kernel.getParams().getAs<IntegerAttr>("async");
    if (async && async.getInt() != 0)
      inFlight.push_back({kernel, std::move(reads), std::move(writes)});
  }
  if (!inFlight.empty())
    return inFlight.front().start.emitError("plan-verify: ")
           << describe(inFlight.front().start) << " in @" << fn.getSymName()
           << " is never waited for (no WAIT names its buffers before the "
              "function ends)";
  return success();
}

/// Runs the stages' events together (sends buffered, a receive waits for
/// its send, a collective over pp for every stage, a WaitSends for the
/// stage's sends to be received): fails, through `fail`, naming what each
/// stage waits in when `what` (the pipeline's step, the evaluation)
/// deadlocks, or a message of the wrong type or never received.
template <typename BufferOf, typename Fail>
LogicalResult simulate(const std::vector<std::vector<Event>> &events,
                       const std::string &what, BufferOf bufferOf, Fail fail) {
  int64_t p = int64_t(events.size());
  std::vector<size_t> pc(p, 0);
  std::map<std::pair<int64_t, int64_t>, std::deque<const Event *>> channels;
  while (true) {
    bool progress = false;
    for (int64_t s = 0; s < p; ++s)
      while (pc[s] < events[s].size()) {
        const Event &e = events[s][pc[s]];
        if (e.kind == Event::Collective)
          break;
        if (e.kind == Event::WaitSends) {
          // Every message this stage sent has been received.
          bool pending = false;
          for (auto &[ends, queue] : channels)
            pending |= ends.first == s && !queue.empty();
          if (pending)
            break;
          ++pc[s];
          progress = true;
          continue;
        }
        if (e.peer < 0 || e.peer >= p)
          return fail("stage " + Twine(s) + " has " + describe(e) +
                      " with stage " + Twine(e.peer) + ", which is not a stage");
        if (e.kind == Event::Send) {
          channels[{s, e.peer}].push_back(&e);
        } else {
          auto &queue = channels[{e.peer, s}];
          if (queue.empty())
            break;
          const Event &sent = *queue.front();
          queue.pop_front();
          BufferOp from = bufferOf(sent.op, false), to = bufferOf(e.op, true);
          if (from.getType() != to.getType())
            return fail("stage " + Twine(e.peer) + " sends " +
                        describe(sent) + " of " + Twine(from.getBytes()) +
                        " bytes (" + llvm::formatv("{0}", from.getType()).str() +
                        ") but stage " + Twine(s) + " receives it in " +
                        describe(e) + " into " +
                        llvm::formatv("{0}", to.getType()).str());
        }
        ++pc[s];
        progress = true;
      }
    if (progress)
      continue;
    bool done = llvm::all_of(llvm::seq<int64_t>(0, p), [&](int64_t s) {
      return pc[s] == events[s].size();
    });
    if (done)
      break;
    // Every stage that is not done waits. A collective over pp goes on when
    // every stage is at one, the same one.
    bool allAtCollective = llvm::all_of(llvm::seq<int64_t>(0, p), [&](int64_t s) {
      return pc[s] < events[s].size() &&
             events[s][pc[s]].kind == Event::Collective;
    });
    if (allAtCollective) {
      const Event &first = events[0][pc[0]];
      for (int64_t s = 1; s < p; ++s) {
        const Event &e = events[s][pc[s]];
        if (e.op.getKernel() != first.op.getKernel() ||
            e.op.getGroup() != first.op.getGroup())
          return fail("stages 0 and " + Twine(s) +
                      " meet at different collectives: " + describe(first) +
                      " and " + describe(e));
      }
      for (int64_t s = 0; s < p; ++s)
        ++pc[s];
      continue;
    }
    std::string stuck;
    for (int64_t s = 0; s < p; ++s) {
      if (!stuck.empty())
        stuck += "; ";
      if (pc[s] == events[s].size()) {
        stuck += "stage " + std::to_string(s) + " has finished";
        continue;
      }
      const Event &e = events[s][pc[s]];
      stuck += "stage " + std::to_string(s) + " waits in " + describe(e);
      if (e.kind == Event::Recv)
        stuck += " for stage " + std::to_string(e.peer);
      else if (e.kind == Event::WaitSends)
        stuck += " for the stages it sent to";
      else
        stuck += " for every stage";
    }
    return fail(what + " deadlocks: " + stuck);
  }
  for (auto &[ends, queue] : channels)
    if (!queue.empty())
      return fail("stage " + Twine(ends.first) + " sends " +
                  describe(*queue.front()) + " that stage " +
                  Twine(ends.second) + " never receives");
  return success();
}

void PlanVerifyPass::runOnOperation() {
  ModuleOp module = getOperation();
  SymbolTable functions(module);
  for (FuncOp fn : module.getOps<FuncOp>())
    if (failed(checkInFlight(fn, functions)))
      return signalPassFailure();
  SmallVector<StageOp> stages = getStages(module);
  if (stages.empty())
    return;
  SymbolTable symbols(module);
  auto bufferOf = [&](KernelOp k, bool output) {
    ArrayAttr list = output ? k.getOutputs() : k.getInputs();
    return symbols.lookup<BufferOp>(
        cast<SymbolRefAttr>(list[0]).getRootReference());
  };
  auto fail = [&](const Twine &message) {
    module.emitError("plan-verify: ") << message;
    signalPassFailure();
    return failure();
  };
  // The step, then the evaluation: each must end on every stage.
  for (bool evaluation : {false, true}) {
    std::vector<std::vector<Event>> events;
    for (StageOp stage : stages) {
      FailureOr<std::vector<Event>> e = eventsOf(symbols, stage, evaluation);
      if (failed(e))
        return signalPassFailure();
      events.push_back(std::move(*e));
    }
    if (failed(simulate(events, evaluation ? "the evaluation" : "the pipeline",
                        bufferOf, fail)))
      return;
  }
}

} // namespace
