//===- Executor.h - Runs the functions of a plan on one GPU -----*- C++ -*-===//
//
// The CUDA counterpart of exec::Executor for one rank: one device arena of
// the plan's size, allocated once, and a plan function run as one kernel
// launch (or cuBLASLt product) per instruction on the executor's stream,
// with no allocation and no host synchronisation inside Run; by default
// captured as a CUDA graph at its first call and replayed after (SetGraphs),
// one launch a call. Buffers of
// plans in fp32 and in mixed precision (bf16 weights and activations, f32
// gradients and optimizer state: docs/memory.md) are supported.
//
// Besides the arena, the executor allocates at Create the workspaces its
// kernels need beyond the plan's buffers, sized from the plan: the norms'
// statistics and cross-entropy's log-sum-exp (recomputed in backward), the
// rows of attention's backward, the gradient norm's sum, the call's values
// (Kernels.h: CallValues), cuBLASLt's workspace. WorkspaceBytes says how
// much.
//
// Scalars the host decides (the learning rate, the step) are written with
// Write; the kernels read them on the device (a replayed graph passes the
// arguments of its capture), and the executor keeps a host copy to check
// them (ADAMW's step >= 1).
//
// It is an exec::Backend, so the trainer drives it as it drives the CPU
// executor (`braid-run --device cuda`). With profiling or a trace on, Run
// times each instruction with a pair of CUDA events and waits for the
// function's end (the only host synchronisation in Run, and only then); a
// trace places the events on the host's clock (SetTrace). Buffers are not
// host memory: Bytes (checkpoints) copies a buffer to the host and
// ReleaseBytes back.
//
// Several ranks: every plan the CPU executor runs over several ranks (data,
// tensor and sequence parallelism, pipeline stages with their stage's arena
// only, ZeRO 1-3, the vocabulary-parallel embedding and loss), through an
// exec::Communicator that takes device memory. NCCL's (StreamCommunicator.h)
// enqueues on the executor's stream: collectives in order, the plan's
// asynchronous ones (ZeRO's) on a stream of its own that the executor's
// waits for at the plan's WAIT, sends on another, each waited for before
// an instruction writes its bytes again; the host waits for none of it.
// Under the CUDA emulation any communicator takes the (host) memory of the
// emulated device, and one that does not enqueue on streams (MPI's) is
// called once the executor's stream has run. A plan for several ranks with
// no such communicator is refused at Create, naming why.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_EXECUTOR_H
#define BRAID_RUNTIME_CUDA_EXECUTOR_H

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/Gemm.h"
#include "runtime/exec/Backend.h"
#include "runtime/exec/ExecutorBase.h"
#include "runtime/exec/Trace.h"
#include "runtime/plan/plan.pb.h"

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace braid::cuda {

class StreamCommunicator;
struct CallValues;

/// The CUDA backend; what it shares with the CPU executor (function lookup,
/// buffer checks, profile, trace, coordinates, collectives in flight) is
/// exec::ExecutorBase's.
class Executor : public exec::ExecutorBase {
public:
  ~Executor() override;
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Validates `plan`, checks that this executor runs every instruction,
  /// and allocates the arena and the workspaces on the current device.
  /// `comm`: the job's other ranks, for a plan of several; it must take
  /// device memory (see the file comment).
  static absl::StatusOr<std::unique_ptr<Executor>>
  Create(plan::Plan plan, exec::Communicator *comm = nullptr);

  const char *Device() const override { return "cuda"; }

  /// Copies `values` into copy `slot` of buffer `id`, converted to its dtype
  /// (rounded to nearest for BF16). Up to kAsyncWriteBytes (a step's tokens
  /// and scalars) the values are staged in pinned host memory and copied in
  /// stream order without waiting; a larger write (parameters, a
  /// checkpoint's) waits until its copy is done.
  absl::Status Write(int id, absl::Span<const double> values,
                     int64_t slot = 0) override;
  /// Enqueues the copy of element 0 into pinned host memory; Settle waits
  /// for the stream and converts it into *out.
  absl::Status ReadLater(int id, double *out, int64_t slot = 0) override;
  absl::Status Settle() override;
  /// The contents of copy `slot` of buffer `id`, converted to double, after
  /// everything enqueued so far has run.
  absl::StatusOr<std::vector<double>> Read(int id,
                                           int64_t slot = 0) const override;
  /// A host copy of (the first copy of) buffer `id`, after everything
  /// enqueued so far has run (checkpoints): kept until ReleaseBytes, or
  /// refreshed by the next Bytes.
  absl::StatusOr<absl::Span<uint8_t>> Bytes(int id) override;
  /// Copies the host copy Bytes(id) gave back into the buffer when
  /// `written` (waiting until the copy is done), and frees it.
  absl::Status ReleaseBytes(int id, bool written) override;

  /// Enqueues function `name` on the executor's stream and returns; a
  /// launch's error is returned at once, an error inside a kernel at the
  /// next Synchronize (or Read). With profiling on, waits for the function's
  /// last kernel. With graphs on (the default), a function that can be is
  /// captured as a CUDA graph at its first call with each slot and replayed
  /// after (see SetGraphs).
  absl::Status Run(absl::string_view name, const exec::StepContext &context,
                   int64_t slot = 0) override;
  /// Whether Run captures functions as CUDA graphs and replays them: one
  /// launch a call instead of one a kernel. A function that sends or
  /// receives (a pipeline stage) is captured as the graphs of its runs of
  /// instructions between those, the sends and receives enqueued between
  /// their launches: a send captured with the kernels would have to be
  /// joined back into the capture, so the call would end only once its
  /// send was received, which in 1F1B deadlocks (a stage's forward would
  /// wait for the next stage's receive, which follows that stage's
  /// backward, which waits for this stage's receive of its send). The
  /// collectives a run leaves in flight are finished at its end (its
  /// graph joins the communicator's stream back), and the sends still in
  /// flight that its instructions overwrite are waited for before its
  /// launch. Nothing is captured where the plan's ranks talk through a
  /// communicator that does not enqueue on streams, or where the call is
  /// profiled or traced (which time each kernel). What changes between calls is read on the device: the
  /// learning rate and the step from their buffers, the seed, the step, the
  /// micro-batch's first sample and the loss scale from the call's values
  /// (Kernels.h: CallValues), written before each call.
  void SetGraphs(bool on) { graphs_ = on; }
  /// The calls captured so far (one per function and slot).
  int64_t GraphsCaptured() const { return int64_t(graphsByCall_.size()); }
  /// Of those, the calls of functions that send or receive, and the graphs
  /// their runs of instructions between the sends and receives make.
  int64_t PointToPointCallsCaptured() const;
  int64_t PointToPointGraphs() const;
  /// The graphs' counts, for the end of a run (exec::Backend).
  std::vector<std::string> RunNotes() const override;
  /// The communicator's sends have left (pipeline stages): on streams,
  /// the executor's stream waits for them.
  absl::Status WaitSends() override;
  /// Waits for everything enqueued.
  absl::Status Synchronize() const;

  cudaStream_t stream() const { return stream_; }
  /// The arena, committed when it was allocated.
  int64_t TouchedArenaBytes() const override { return arenaBytes_; }
  /// Device bytes beyond the arena: the kernels' workspaces and cuBLASLt's
  /// (and cuDNN's, where attention runs there).
  int64_t WorkspaceBytes() const override { return workspaceBytes_; }
  /// Which kernels run attention, one line per shape: Braid's or cuDNN's
  /// (see prepareAttention), with the times that chose them.
  std::vector<std::string> KernelNotes() const override { return notes_; }

  /// Kernel times from CUDA events (see the file comment): profiling stays
  /// off when they cannot be created.
  void EnableProfile() override;
  /// Records every instruction Run runs into `trace` (null: stops), timed
  /// by CUDA events on the executor's stream and placed on the host's clock
  /// through an anchor event: one the host waited for while the stream was
  /// idle (when the trace is set, and again at the end of each traced
  /// function), whose completion the host's clock read. As with profiling,
  /// Run then waits for each function's last kernel. A collective started
  /// asynchronously (on NCCL's stream) shows as its start on the executor's
  /// stream, and the plan's WAIT as the executor's stream waiting for it.
  absl::Status SetTrace(exec::Trace *trace) override;

private:
  explicit Executor(plan::Plan plan) : ExecutorBase(std::move(plan)) {}
  /// Whether this rank runs `inst`: every instruction, or with pipeline
  /// stages those on its stage's buffers.
  bool runsHere(const plan::Instruction &inst) const;
  /// OK when buffer `id` exists and lies in this rank's arena (checkOwned).
  absl::Status checkExists(int id) const;
  /// checkExists, and `slot` is a copy of the buffer (isCopy).
  absl::Status checkCopy(int id, int64_t slot) const override;
  /// The scratch an ALL_GATHER (`gather`) or REDUCE_SCATTER lays the ranks'
  /// blocks out in (0 when its buffers are the communicator's layout
  /// already).
  int64_t collectiveScratchBytes(const plan::Instruction &inst,
                                 bool gather) const;
  /// The communication kernels (ExecutorCommunication.cpp), whatever the
  /// dtype: SEND (`send`) and RECV, ALL_GATHER (`gather`) and
  /// REDUCE_SCATTER, ALL_REDUCE.
  absl::Status runPointToPoint(const plan::Instruction &inst, int64_t slot,
                               bool send);
  absl::Status runGatherScatter(const plan::Instruction &inst, int64_t slot,
                                bool gather);
  absl::Status runAllReduce(const plan::Instruction &inst, int64_t slot);
  /// Each output of `inst` that is not its input gets the input's bytes.
  absl::Status copyInputs(const plan::Instruction &inst, int64_t slot);
  /// Before a call of the communicator: the host waits for the stream,
  /// unless the communicator enqueues on it.
  absl::Status beforeCommunication();
  /// The stream waits for the sends still reading bytes [begin, begin +
  /// bytes), or the outputs of `inst`, before they are written.
  absl::Status waitForSends(uint8_t *begin, int64_t bytes);
  absl::Status waitForSends(const plan::Instruction &inst, int64_t slot);
  /// Enqueues the instructions of function `function` (timing each when
  /// `timed`) and the waits for what they leave in flight (the stream waits
  /// for the collectives a WAIT names: ExecutorBase::finishInFlight).
  absl::Status runBody(int function, const exec::StepContext &context,
                       int64_t slot, bool timed);
  /// Instructions [begin, end) of function `function`, as runBody runs them
  /// all.
  absl::Status runRange(int function, int begin, int end, int64_t slot,
                        bool timed);
  /// Whether calls of `fn` run as captured graphs (SetGraphs).
  bool graphable(const plan::Function &fn) const;
  /// Instructions [begin, end) of function `function` with `slot`
  /// captured as a graph on the executor's stream (what they leave in
  /// flight finished in it).
  absl::StatusOr<cudaGraphExec_t> capture(int function, int begin, int end,
                                          int64_t slot);
  /// Runs function `function` with `slot` as graphs: its runs of
  /// instructions between sends and receives captured at the first call
  /// (into `graphs`, one per non-empty run) or replayed from `graphs`, the
  /// sends and receives enqueued between them.
  absl::Status runGraphed(int function, int64_t slot,
                          std::vector<cudaGraphExec_t> &graphs,
                          bool capturing);
  /// Runs `inst`, whose dtype is `dtype` (plan::InstructionDType), through
  /// the table of its element type (KernelHandlers.cpp).
  absl::Status runInstruction(const plan::Instruction &inst, plan::DType dtype,
                              int64_t slot);

  /// The kernels (KernelHandlers.cpp). An instruction runs in one dtype T,
  /// plan::InstructionDType's (its wide operands f32), through its kernel's
  /// handler in a table per T indexed by plan::KernelIndex: one handler per
  /// row of runtime/plan/Kernels.def, declared here from it. They return
  /// absl::Status, declared `auto` so that the table, which takes their
  /// addresses, does not compile where one is not defined. Call<T>: the
  /// instruction's operands.
  template <typename T> struct Call;
  template <typename T>
  absl::Status runTyped(const plan::Instruction &inst, int64_t slot);
#define BRAID_KERNEL(NAME, ...)                                                \
  template <typename T> auto run_##NAME(const Call<T> &c);
#include "runtime/plan/Kernels.def"
  /// What the handlers use beyond the plan's buffers, gathered at Create
  /// from every instruction this rank runs: the workspaces' sizes (from the
  /// largest instruction of each kind), the token ids to check (idChecks_),
  /// the GEMMs to choose algorithms for.
  struct Needs {
    int64_t statRows = 1, attentionRows = 1, collectiveBytes = 0;
    /// Bytes of cached attention's partial results (Generation.h).
    int64_t cachedAttentionBytes = 0;
    /// Bytes of TOP_LOGPROBS' slices (Generation.h: topLogprobs).
    int64_t topLogprobsBytes = 0;
    /// (shape, bias) of each linear layer, in the plan's order.
    std::vector<std::pair<cpu::LinearShape, bool>> gemms;
    /// (shape, backward) of each attention without packed documents.
    std::vector<std::pair<cpu::AttentionShape, bool>> attentions;
  };
  /// Chooses, for each bf16 or fp16 attention shape of the plan and each
  /// direction, Braid's kernels or cuDNN's (CudnnAttention.h): under
  /// BRAID_ATTENTION=auto (the default) the faster of the two, timed on the
  /// arena's bytes (which nothing holds yet) at Create; =braid Braid's
  /// always; =cudnn cuDNN's wherever it takes the shape (an error where
  /// cuDNN cannot be loaded). Allocates cuDNN's workspace and writes one
  /// line per shape to notes_.
  absl::Status prepareAttention(const Needs &needs);
  /// Which kernels run an attention shape: cuDNN's for its forward, its
  /// backward.
  struct AttentionChoice {
    bool cudnnForward = false, cudnnBackward = false;
  };
  using AttentionKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t,
                                  double, bool, int64_t, int64_t>;
  static AttentionKey attentionKey(const cpu::AttentionShape &s);
  /// The choice for `s`, or null (Braid's kernels).
  const AttentionChoice *attentionChoice(const cpu::AttentionShape &s) const;
  std::map<AttentionKey, AttentionChoice> attentionChoices_;
  std::unique_ptr<CudnnAttention> cudnn_;
  void *cudnnWorkspace_ = nullptr;
  std::vector<std::string> notes_;
  /// Adds what `inst`'s handler needs: need<K> of its kernel K, a table
  /// generated from Kernels.def (nothing for most kernels).
  void gatherNeeds(const plan::Instruction &inst, Needs &needs);
  template <plan::Kernel K>
  void need(const plan::Instruction &inst, Needs &needs);
  /// Records the token ids of `inst`'s input 1 for Write to check against
  /// `table` (an embedding's rows when `embedding`, else a cross-entropy's
  /// logits, whose rows also size the statistics).
  void needTokenIds(const plan::Instruction &inst, const plan::Buffer &table,
                    bool embedding, Needs &needs);
  /// Why the handler of `inst`'s kernel cannot run it (refusal<K>: an
  /// operand the plan may lack), or the empty string; Create refuses such a
  /// plan.
  static std::string refusal(const plan::Instruction &inst);
  template <plan::Kernel K>
  static std::string refusal(const plan::Instruction &inst);

  /// comm_ when it enqueues on streams (NCCL), else null.
  StreamCommunicator *streamComm_ = nullptr;
  /// Sends on the communicator's stream whose bytes must not be written
  /// before `done`; events to reuse for them.
  struct PendingSend {
    uint8_t *begin, *end;
    cudaEvent_t done;
  };
  std::vector<PendingSend> pendingSends_;
  std::vector<cudaEvent_t> sendEvents_;
  cudaStream_t stream_ = nullptr;
  /// Graphs (SetGraphs): on or off, and those captured, by (function
  /// index, slot).
  bool graphs_ = true;
  std::map<std::pair<int, int64_t>, std::vector<cudaGraphExec_t>>
      graphsByCall_;
  std::unique_ptr<Gemm> gemm_;
  /// The plan's compute dtype: its low-precision dtype (mixed_), else F32.
  plan::DType compute_ = plan::F32;

  /// Workspaces (device): per-row statistics (two floats per row of the
  /// largest norm or cross-entropy), the terms of the loss, attention's
  /// backward rows, the rows a cross-entropy counts, the sum of squares.
  float *rowStats_ = nullptr;
  float *lossTerms_ = nullptr;
  float *lossScratch_ = nullptr;
  float *attentionRows_ = nullptr;
  /// Cached attention's partial results (null where it needs none).
  float *cachedAttention_ = nullptr;
  /// TOP_LOGPROBS' slices' candidates (null where it splits no row).
  void *topLogprobs_ = nullptr;
  int64_t *counted_ = nullptr;
  double *sumSquares_ = nullptr;
  /// What changes from call to call (Kernels.h: CallValues), written at
  /// the start of each Run.
  CallValues *callValues_ = nullptr;
  /// The collectives' layout scratch (collectiveScratchBytes, the largest).
  uint8_t *collectiveScratch_ = nullptr;
  int64_t workspaceBytes_ = 0;
  /// Profiling or a trace: the events around a function's instructions
  /// (one more than the longest body).
  std::vector<cudaEvent_t> events_;
  /// Creates events_ for the longest function, if not yet there.
  absl::Status createEvents();
  /// Records traceAnchor_ on the (idle) stream, waits for it and reads the
  /// host's clock into anchorTime_.
  absl::Status anchorTrace();
  /// A trace: the anchor event with the host time of its completion.
  cudaEvent_t traceAnchor_ = nullptr;
  std::chrono::steady_clock::time_point anchorTime_;
  /// Writes of at most kAsyncWriteBytes go through pinned staging buffers,
  /// each reused once the copy from it is done (`copied`); at most
  /// kMaxStagings of them.
  static constexpr size_t kAsyncWriteBytes = size_t(16) << 20;
  static constexpr size_t kMaxStagings = 32;
  struct Staging {
    uint8_t *host = nullptr;
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;
  };
  std::vector<Staging> staging_;
  /// A staging buffer of at least `bytes` whose last copy is done.
  absl::StatusOr<Staging *> staging(size_t bytes);
  /// ReadLater's pinned slots (kReadBackBytes each; Settle first when all
  /// are taken) and the outputs waiting for Settle, in slot order.
  static constexpr size_t kReadBackSlots = 1024, kReadBackBytes = 8;
  uint8_t *readBack_ = nullptr;
  struct Later {
    plan::DType dtype;
    double *out;
  };
  std::vector<Later> later_;
  /// Host copies of the scalars written with Write (lr, step), by buffer.
  std::map<int, double> hostScalars_;
  /// Host copies of buffers handed out by Bytes, by buffer.
  std::map<int, std::vector<uint8_t>> hostBytes_;
  /// The token ids of each buffer that tables read: [0, vocab), or the
  /// cross-entropy's ignore_index.
  struct IdCheck {
    int64_t vocab = 0;
    int64_t ignore = 0;
    bool ignorable = false;
  };
  std::map<int, IdCheck> idChecks_;
};

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_EXECUTOR_H
