//===- Passes.td - Passes producing and planning `plan` IR ---*- tablegen -*-===//

#ifndef BRAID_PASSES_PLAN_PASSES_TD
#define BRAID_PASSES_PLAN_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanLower : Pass<"plan-lower", "mlir::ModuleOp"> {
  let summary = "Lowers a `model` function to a `plan` program";
  let description = [{
    Replaces the module's single `model` function (`@train_step`) with the
    `plan.func`s of one optimizer step, run by braid-run in this order:

    - `@zero_grads`: a `ZERO` of every gradient buffer, once per step;
    - `@micro_step`: the forward and backward of one micro-batch, run once
      per micro-batch: one `plan.buffer` per value, one `plan.kernel` per op
      (the kernel of the op's name, its attributes as kernel parameters),
      layers inlined in program order;
    - `@update`: once per step, the data-parallel sums of the accumulated
      gradients (`ALL_REDUCE` in place on the gradient buffers, the
      `model.all_reduce` ops whose results the optimizer reads) and the
      optimizer ops (`GRAD_NORM`, `ADAMW`).

    Gradients accumulate over micro-batches in place: each parameter's
    gradient is a `gradient` buffer named as the parameter, into which the
    weight-gradient kernels that make it accumulate directly; the
    `model.add` ops autodiff made to sum several contributions (a tied
    embedding) are dropped, and a contribution of any other kernel is added
    into the buffer by an `ADD`. A function with nothing to do (no
    optimizer) is left out.

    - Arguments become `parameter`, `input` or `optimizer_state` buffers
      named as the argument; the loss and the gradient norm are named too.
    - Other accumulating kernels get a `ZERO` of their output first.
    - A collective keeps its mesh axes as the kernel's `group` and its
      reason as the provenance.
    - `model.adamw` updates in place: its results are its operands' buffers.
    - A kernel whose row in `runtime/plan/Kernels.def` has
      `kOverwritesInput0`/`1` (ADD, GELU_GRAD, CROSS_ENTROPY_GRAD) writes
      its result over that input when the input is an activation of the
      result's storage type, made in the same block, that nothing reads
      after it (no later op of the block, the terminator, another stage or
      inference phase, or with split-backward a weight gradient).

    ZeRO is `plan-zero`'s, on the update made here.
  }];
  let dependentDialects = ["::braid::plan_ir::PlanDialect"];
  let options = [
    Option<"splitBackward", "split-backward", "bool", "false",
           "with pipeline stages, move the weight gradients (linear_grad_weight) "
           "of each stage's backward into a backward_weight function, for "
           "zero-bubble schedules">
  ];
}

def PlanZero : Pass<"plan-zero", "mlir::ModuleOp"> {
  let summary = "Shards the optimizer over the data-parallel ranks (ZeRO)";
  let description = [{
    Rewrites the optimizer of each update function that `plan-lower` made
    (in place ALL_REDUCEs of the accumulated gradients, GRAD_NORM, an ADAMW
    per parameter; per pipeline stage with stages) into ZeRO's; run right
    after `plan-lower`. `zero = 0` leaves the plan as it is.

    With `zero = 1` (and a dp axis), each rank's gradients that are summed
    over dp are grouped into buckets of one kind (the same reduction axes,
    weight decay, and replication over tp), at most `bucket-bytes` each.
    A bucket's gradients and its parameters are views of two flat `bucket`
    buffers (contiguous, padded to a multiple of dp x 16 elements), and
    `update` runs per bucket: a reduce-scatter over dp of
    the flat gradients (after their all-reduce over tp when they are
    partial over tp), the clipping norm over the ranks' blocks, AdamW on
    this rank's block of the flat parameters with moments that hold only
    that block, and an all-gather of the parameters in place. Each rank
    keeps 4 + 4 + 8/dp bytes per fp32 parameter instead of 16.

    With `zero = 2` the flat gradients are a temporary of each
    micro-batch's backward: zeroed before their first contribution,
    reduce-scattered (async) as soon as the last one is written, finished
    (WAIT) just before the next bucket's starts, the rank's block added to
    an accumulated block (4 + 12/dp bytes per parameter). With `zero = 3`
    the rank keeps only its block of the parameters too (`block_of`), and
    each part of a function that reads a bucket's parameters gathers them
    into a temporary of its own, started one part ahead (16/dp). A
    gradient another pipeline stage adds to in update (a tied embedding)
    is handled as with zero = 1.

    The new buffers take the numbers (`b<n>`) of the norm's results and
    master weights they replace, and the numbers of later buffers move up
    after them. Refused, naming the kernel: an update without one
    GRAD_NORM; a gradient not summed over dp; an update whose ALL_REDUCE,
    GRAD_NORM and ADAMW kernels are not one run (not plan-lower's); a
    buffer of the optimizer (the norm's results, the master weights, the
    moments) used outside it.
  }];
  let options = [
    Option<"zero", "zero", "int64_t", "0",
           "ZeRO stage: 1 shards the optimizer state over dp (Megatron's "
           "distributed optimizer), 2 the gradients too, 3 the parameters too "
           "(0: none)">,
    Option<"bucketBytes", "bucket-bytes", "int64_t", "25000000",
           "most bytes of gradients in one ZeRO bucket (one reduce-scatter, "
           "one all-gather)">
  ];
}

def PlanMemory : Pass<"plan-memory", "mlir::ModuleOp"> {
  let summary = "Places every buffer at a static offset of one arena";
  let description = [{
    Parameters, gradients, optimizer state, inputs and named results live for
    the whole program; every other buffer lives from the kernel that writes
    it first to the last kernel that touches it, and reuses the space of
    buffers that are dead by then (first fit, 64-byte alignment). A kernel's
    outputs never share memory with the buffers it reads. Sets
    `plan.arena_bytes` on the module.

    Positions follow the module's kernels in order, but for the copies
    `plan-overlap-grad-reduce` and `plan-overlap-param-gather` make
    (`last_micro_step`, `first_micro_step`, and a stage's functions a
    schedule call names after an `@`): a copy runs instead of
    its original, so its kernels take the original's positions and a
    kernel it adds (a collective started early, a `WAIT`) the position of
    the kernel before it. What such a kernel touches in a stage's copy
    lives from the first position of every function the schedule calls
    after the copy's call (a reduce-scatter's block lives on until update
    reads it). `plan-eval`'s copies add no position either: each of their
    kernels takes its original's (`plan.eval_index`), so they change no
    live range.

    With pipeline stages, each stage's buffers get their own arena (they
    live on other ranks; the plan's arena is the largest, and each
    `plan.stage` gets its own as `plan.arena_bytes`), and a buffer with
    `slots` takes that many copies, live for the whole step.

    A view (`view_of`, ZeRO's buckets) takes no space of its own: it lies
    `view_offset` bytes into its bucket, and its uses count as the
    bucket's, so a temporary bucket lives from the first use of any of its
    views to the last. A view must fit inside a bucket (or temporary) of
    its stage.
  }];
}

def PlanEval : Pass<"plan-eval", "mlir::ModuleOp"> {
  let summary = "Adds the forward-only functions that compute a validation loss";
  let description = [{
    Without pipeline stages, adds `@eval_step`: the kernels of `@micro_step`
    that the buffer named `loss` depends on, in their order, with each
    `DROPOUT` replaced by a `COPY` of its input (evaluation runs without
    dropout) and no gradient. With stages, adds to each `plan.stage` an
    `eval_forward` (and to each of its `chunks` one), the copy of its
    forward function that computes only the stage's loss and sends.

    A kernel is kept when it writes a buffer that a kept kernel reads
    later (or the loss, or it is a `SEND`); a `WAIT` is kept with the
    asynchronous kernels it finishes, naming only their buffers. Each kept
    kernel carries `plan.eval_index`, its original's index, and the copy
    `plan.eval_of`, its original: `plan-memory` places them at their
    originals' positions, so evaluation needs no memory beyond the step's.
  }];
}

def PlanSchedule : Pass<"plan-schedule", "mlir::ModuleOp"> {
  let summary = "Orders each pipeline stage's forward and backward calls";
  let description = [{
    For a plan with `plan.stage` ops (pipeline parallelism), sets each
    stage's `schedule`, the order of its forward and backward calls on the
    step's `micro-batches` (`scheme`: `gpipe`, all forwards then all
    backwards; `1f1b`, Megatron's one-forward-one-backward, which keeps at
    most `pp - s` micro-batches in flight on stage `s`; `zb-h1`, 1F1B with
    the weight gradients deferred into the bubbles, which needs the stages'
    `backward_weight`; `interleaved`, Megatron's over the stage's
    `chunks`), and gives each call a slot: a micro-batch takes a free copy
    of its chunk's slotted buffers at its forward on the chunk and frees it
    after its backward there (its weight gradients). Each chunk has slots of
    its own, as many as it holds micro-batches at once: they size the
    slotted buffers its functions name, the stage's `chunk_slots` (with
    several chunks) and, the largest, its `slots`. No-op without stages.
  }];
  let options = [
    Option<"scheme", "scheme", "std::string", "\"1f1b\"",
           "gpipe | 1f1b | interleaved | zb-h1">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "micro-batches per step on each data-parallel rank">
  ];
}

def PlanOverlapGradReduce : Pass<"plan-overlap-grad-reduce", "mlir::ModuleOp"> {
  let summary = "Starts the gradients' data-parallel sums during the last "
                "micro-batch's backward";
  let description = [{
    Megatron's overlapped gradient reduction (and, with ZeRO-1, the
    distributed optimizer's overlapped reduce-scatter). The update begins
    with the sums of the accumulated gradients over dp (in-place
    `ALL_REDUCE`s of `gradient` buffers, or ZeRO-1's `REDUCE_SCATTER`s of
    each bucket into the rank's block); run there, they wait for the whole
    backward of the step's last micro-batch, though only that backward
    still writes the gradients. This pass moves them into a copy of the
    function that finishes them, which runs instead of it for that last
    call:

    - Without a pipeline, `@last_micro_step`, a copy of `@micro_step` that
      braid-run runs for the step's last micro-batch.
    - With pipeline stages, per stage and per model chunk, a copy of the
      backward (and of `backward_weight`, with split backwards) named
      `<function>_last`, which the chunk's last call of that kind in the
      stage's schedule names after an `@` (`"B7:0@stage1_backward_last"`).
      A gradient's sum goes to the copy of the function whose call comes
      last among those that touch it; one that no backward touches (a tied
      embedding's other part, added in update) stays in update.

    Each sum's gradients are cut into buckets of at most `bucket-bytes`, in
    the order the copy last touches them (a gradient larger than that is a
    bucket of its own); a bucket's `ALL_REDUCE` (`async = 1`) starts right
    after the last kernel that touches any of its gradients and runs beside
    the rest of the backward, and a `WAIT` per bucket at the copy's end
    finishes it. A ZeRO-1 reduce-scatter is a bucket already: it starts
    (`async = 1`) right after the last kernel touching one of its bucket's
    views, and a `WAIT` naming the bucket and the block finishes it at the
    copy's end. The other calls run the functions unchanged.

    It runs before `plan-memory`, which places a copy as its original's
    alternative (the same positions, so the same offsets: the two never
    run at once) and a reduce-scatter's block from its start to the
    update. Summed gradients live for the whole program, so the all-reduces
    leave the arena unchanged; a block alive during the rest of the
    backward may grow it. Sums of anything but whole gradient buffers in
    place (views, maxima), reduce-scatters of a bucket that the update
    touches first (summed over tp first, or a tied embedding's, to which
    the update adds another stage's part), stay in the update.
    `bucket-bytes = 0` leaves the plan as it is.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", "25000000",
           "most bytes of gradients in one overlapped all-reduce (0: no "
           "overlap, the sums stay in update)">
  ];
}

def PlanOverlapParamGather : Pass<"plan-overlap-param-gather", "mlir::ModuleOp"> {
  let summary = "Gathers ZeRO's updated parameters during the next step's "
                "first forward";
  let description = [{
    Megatron's overlapped parameter gather, for ZeRO-1 and 2 plans without a
    pipeline. Their update ends by all-gathering each flat bucket of
    parameters over dp in place (each rank updated its block); run there,
    nothing overlaps them. This pass moves them into `@first_micro_step`, a
    copy of the function the step's first micro-batch runs (`@micro_step`,
    or `@last_micro_step` when `micro-batches` is 1), which braid-run runs
    for that micro-batch instead: each gather starts (`async = 1`) at its
    beginning, in the order of first use, and a `WAIT` right before the
    first kernel touching one of its bucket's parameters finishes it, so
    each bucket's gather runs beside the forward of the layers before.

    Between the update and the next step's first micro-batch the rank's
    other blocks of those parameters are stale, so the pass also adds
    `@gather_params` (the same gathers, blocking), which braid-run runs
    before anything outside a step reads the parameters (a checkpoint,
    `--save-params`) and after the last step. A gather that a later kernel
    of update touches, or of a bucket no view of which is a parameter,
    stays. With pipeline stages, or `micro-batches = 0` (unknown), the pass
    does nothing.
  }];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", "0",
           "micro-batches per step and rank (0: unknown, no change)">,
    Option<"enabled", "enabled", "bool", "true",
           "move the gathers (false: they stay in update)">
  ];
}

def PlanVerify : Pass<"plan-verify", "mlir::ModuleOp"> {
  let summary = "Proves that a plan's ranks cannot wait on each other forever "
                "and that no kernel touches what a collective in flight uses";
  let description = [{
    The contract of the plan phase. Ranks of one pipeline stage run the same
    program, so their collectives (over dp and tp) come in the same order by
    construction. Between stages, the pass runs every stage's step (zero
    grads, its schedule's calls, update) symbolically: a SEND queues a
    message on the channel to its peer and goes on, a RECV waits for the
    first message of the channel from its peer, and a collective whose group
    spans `pp` waits until every stage reaches one. The plan is refused when
    some stage can never go on (naming the stages and the operations they
    wait in), when a RECV gets a message of another size or type than its
    buffer (naming both ends), when two stages meet at different
    collectives, or when a message is never received. The evaluation is
    run the same way: every stage's `eval_forward` (and its chunks', in
    order) on each micro-batch, each call followed by a wait until every
    message the stage sent has been received, as braid-run runs it.

    In every function, with the offsets `plan-memory` placed: between a
    collective started with `async = 1` and the `WAIT` that finishes it
    (one naming any of its buffers), no kernel writes bytes it reads or
    writes, nor reads bytes it writes; and every such collective is waited
    for before its function ends. The plan is refused naming the kernel,
    the collective, both buffers and their bytes.
  }];
}

#endif // BRAID_PASSES_PLAN_PASSES_TD
