//===- Passes.td - Passes on the `model` dialect -------------*- tablegen -*-===//

#ifndef BRAID_PASSES_MODEL_PASSES_TD
#define BRAID_PASSES_MODEL_PASSES_TD

include "mlir/Pass/PassBase.td"

def ModelVerifyForward : Pass<"model-verify-forward", "mlir::ModuleOp"> {
  let summary = "Checks the contract of the forward phase (frontend output)";
  let description = [{
    The boundary check after the frontend: the module holds the forward graph
    of one training step in the form every later pass relies on.

    Contract:
    - F1: the module holds exactly one function, `@forward`, besides meshes.
    - F2: every argument is either a parameter (`model.param`, names unique)
      or a data input (`model.input`); there is exactly one `tokens` and one
      `targets` input, integer tensors of one shape `[batch, seq]`, and at
      most one `positions` input (packed documents) of that type too; no
      other input.
    - F3: the function returns one value, the rank-0 float loss.
    - F4: `model.layer` ops appear in program order with indices 0, 1, ...,
      and each layer's first operand is the previous layer's result.
    - F5: the body holds only `model` ops and the final `func.return`.
    - F6: every parameter is used.
  }];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

def ModelLora : Pass<"model-lora", "mlir::ModuleOp"> {
  let summary = "Adds LoRA adapters beside the target linears and freezes "
                "the rest";
  let description = [{
    With the module's `model.lora` settings (the job's `lora` section:
    rank r, alpha, dropout, target_modules, modules_to_save), each linear
    of @forward whose weight is a parameter `<module>.weight` of a target
    module (the name is the module's path or ends it after a dot, PEFT's
    rule) gets PEFT's adapter added to its output:
    `linear(scale(linear(dropout(x), A), alpha / r), B)`, with the new
    parameters `<module>.lora_A.weight` `[r, in]` and
    `<module>.lora_B.weight` `[out, r]` (nn.Linear's layout, whatever the
    base's) right after the base weight; inside a layer they become
    operands of the layer. The adapter's dropout takes the next `rng_id`.
    Every other parameter, but those of modules_to_save, is marked
    `model.frozen`: `model-autodiff` gives it no gradient and
    `model-optimizer` no state.
    Refused: a target or module to save that names nothing (the message
    lists the model's), a rank above a target's smaller dimension, a module
    both targeted and saved, a graph that has adapters already.
    Without `model.lora` it does nothing.
  }];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

def ModelAutodiff : Pass<"model-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of the forward graph";
  let description = [{
    Turns `@forward(params..., tokens, targets) -> loss` into
    `@train_step(params..., tokens, targets, loss_grad) -> (loss, grads...)`:
    the forward graph followed by its backward, one gradient per parameter
    in parameter order (result attribute `model.grad = "<param name>"`),
    except the parameters marked `model.frozen`, which get none: what
    computes only their gradients (a frozen linear's weight gradient, the
    backward layers' results for them, the activations saved only for
    those) is removed.
    `loss_grad` (`model.input = "loss_grad"`) seeds the backward: 1 for plain
    training, the loss scale under fp16.

    Every forward op contributes its vector-Jacobian product through
    `GradientOpInterface`; gradients of a value used several times are
    summed with `model.add`. Each `model.layer` gets a `model.layer backward`
    of the same index: the forward layer gains one extra result per
    activation its backward uses, and the backward layer takes them as
    operands, so both stay isolated units for pipeline partitioning and
    recompute (which may later trade saved activations for recomputation).

    Expects the contract of `model-verify-forward`.
  }];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

def ModelVerifyTrainStep : Pass<"model-verify-train-step", "mlir::ModuleOp"> {
  let summary = "Checks the contract of the autodiff phase";
  let description = [{
    The boundary check after `model-autodiff`: the module holds one training
    step in the form the later phases (optimizer, partitioning, lowering to
    `plan`) rely on.

    Contract:
    - T1: the module holds exactly one function, `@train_step`, besides
      meshes.
    - T2: its arguments are parameters (`model.param`), one `tokens`, one
      `targets` and one `loss_grad` input, the latter a rank-0 float.
    - T3: it returns the rank-0 loss, then one gradient per parameter not
      marked `model.frozen`, in parameter order, each marked `model.grad`
      with that parameter's name and of that parameter's type.
    - T4: every forward layer `i` has exactly one `model.layer backward` of
      index `i`; forward layers come in increasing, backward layers in
      decreasing index order, and every backward layer follows all forward
      layers.
    - T5: the body holds only `model` ops and the final `func.return`.
  }];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

def ModelOptimizer : Pass<"model-optimizer", "mlir::ModuleOp"> {
  let summary = "Appends gradient clipping and AdamW updates to @train_step";
  let description = [{
    Completes the training step: after the gradients, the global gradient
    norm and its clipping scale (`model.grad_norm`), then one `model.adamw`
    per parameter not marked `model.frozen` (a frozen one has no moments
    and is not updated). @train_step gains the optimizer state as arguments (the
    first and second moments of each parameter, `model.opt_state =
    "exp_avg:<name>"` / `"exp_avg_sq:<name>"`), the learning rate
    (`model.input = "lr"`, from the schedule) and the 1-based step
    (`model.input = "step"`), and returns the loss, the gradient norm, the
    new parameters (`model.param`), then the new moments.

    Weight decay skips parameters of rank 1 (biases and norm weights), as
    Megatron's default does.

    Expects the contract of `model-verify-train-step`.
  }];
  let options = [
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", "1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.01",
           "decoupled weight decay of tensors of rank >= 2">,
    Option<"maxGradNorm", "max-grad-norm", "double", "1.0",
           "clip the global gradient norm to this (0: no clipping)">
  ];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

def ModelShard : Pass<"model-shard", "mlir::ModuleOp"> {
  let summary = "Splits the training step over the ranks of a device mesh";
  let description = [{
    Makes `@train_step` (after `model-optimizer`) the program of one rank of
    a `dp × tp` mesh, declared as `model.mesh @mesh axes = ["dp", "tp"]`
    (tp the minor axis: ranks `dp·tp + t`, as Megatron numbers them); with
    `pp > 1` the mesh is `["pp", "dp", "tp"]` and `model-pipeline-partition`
    then cuts the step into stages.

    Data parallelism (`dp`): every rank holds the whole model and runs the
    step on its own share of the global batch. `tokens` and `targets` are
    marked split along `dp` on the batch dimension
    (`#model.sharding<@mesh, [{"dp"}, {} ]>`); the gradients, partial sums
    over `dp`, are summed by `model-grad-reduce`, which runs next.

    Tensor parallelism (`tp`), Megatron's split decided on the graph: every
    value gets a layout over `tp` (whole, split along a dimension, or
    partial sums). An embedding table is split by vocabulary rows; a linear
    whose input is whole is column-parallel (its weight split on the output
    dimension, a fused `[Q | K | V]` as three blocks, `model.shard_blocks`),
    unless it makes the keys or values of an attention whose kv heads do not
    divide by tp (then it stays whole); a linear whose input is split is
    row-parallel (bias added at `1/tp`). Attention works on a slice of the
    heads (`head_axis`); the loss becomes the vocab-parallel
    `cross_entropy_max` / `_partial` / `_finish` with a `max` and a sum
    all-reduce. The forward's partial sums (row-parallel linears,
    vocab-parallel embedding) are all-reduced at once; the backward's
    (column-parallel input gradients) where a consumer needs the whole
    value, so the Q/K/V (gate/up) contributions are summed then reduced
    once. Split parameters carry `model.sharding` on their argument; the
    gradient norm sums over tp (`model.grad_norm ... over`). The op that
    makes a gradient left partial (whole K/V weights) gets the
    `model.sharding` of its results, with `partial = {"tp"}` on that
    gradient: `model-grad-reduce` sums it over tp with the step's
    reductions. Each op's rule is its TensorParallelOpInterface
    (registered by `braid::model::registerTensorParallelRules`); an op
    without one is refused.

    Sequence parallelism (`sp`, with tp > 1): norms, dropout, residuals and
    position embeddings work on sequence slices; the forward's partial sums
    are reduce-scattered (`model.reduce_scatter`) and the inputs of
    column-parallel linears all-gathered (`model.all_gather`), and in
    backward the reverse; norm weight gradients are partial over tp.

    Every inserted collective's `reason` names the op and the rule.

    Expects the contract of `model-verify-train-step` plus the optimizer.
  }];
  let options = [
    Option<"dp", "dp", "int64_t", "1", "data-parallel degree">,
    Option<"tp", "tp", "int64_t", "1", "tensor-parallel degree">,
    Option<"pp", "pp", "int64_t", "1",
           "pipeline stages: with pp > 1 the mesh is [pp, dp, tp] (the stages "
           "themselves are made by model-pipeline-partition)">,
    Option<"sp", "sp", "bool", "false",
           "sequence parallelism: norms, dropout and residuals on sequence "
           "slices over tp (needs tp > 1)">
  ];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

def ModelGradReduce : Pass<"model-grad-reduce", "mlir::ModuleOp"> {
  let summary = "Sums the gradients over the mesh before the optimizer reads "
                "them";
  let description = [{
    Runs right after `model-shard`, on `@train_step` and its `model.mesh
    @mesh`. The gradients the optimizer (`model.grad_norm`, `model.adamw`)
    reads are partial sums over `dp` (each rank's share of the batch) and,
    those that `model-shard` marked (the `model.sharding` of the op that
    makes them has `partial = {"tp"}`), over `tp`. Each is summed by a
    `model.all_reduce` over those axes (`["dp"]`, `["dp", "tp"]` or
    `["tp"]`) just before the optimizer, which reads the sums: in buckets
    of gradients summed over the same axes, at most `bucket-bytes` each (a
    larger gradient alone), in the order backward makes the gradients, each
    with the reason naming its parameters. The marks it read are removed.
    The runtime seeds each rank's backward with 1 / (micro-batches × dp),
    so the sums are the gradients of the global batch's mean loss.

    Refused: no `@train_step`, no `@mesh`, no `model.grad_norm`,
    `bucket-bytes` below 1.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", "25000000",
           "most bytes of gradients one all-reduce carries (Megatron's "
           "default bucket is 40 M parameters; 25 MB as PyTorch DDP)">
  ];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

def ModelPipelinePartition : Pass<"model-pipeline-partition", "mlir::ModuleOp"> {
  let summary = "Assigns the training step's ops to pipeline stages";
  let description = [{
    Cuts `@train_step` (after `model-shard` with `pp`) into `pp × vpp`
    pipeline stages of consecutive transformer layers (with `vpp > 1`,
    Megatron's virtual stages: stage `c` runs on pipeline rank `c % pp` as
    its chunk `c / pp`), and marks every top-level op with the stage that
    runs it (`model.stage = s`): a forward layer and its
    backward layer go together; the ops before the first layer (embeddings)
    and after the backward of layer 0 (their gradients) to stage 0, those
    between the last forward and backward layers (final norm, output layer,
    loss and their gradients) to the last stage, each other op to the stage
    of the layer before it; each optimizer update to its parameter's stage,
    and the gradient sums of the step split so that each stays in one stage.
    The clipping norm gets `model.stage = -1`: every stage computes its part
    over its own gradients, summed over `pp` (plan-lower).

    The layers per stage are `stage-layers` when given (ModelLink's uneven
    pipeline), else the split of consecutive layers that minimises the
    largest stage cost: a layer's cost is the FLOPs of its forward and
    backward ops (`CostOpInterface`), the first stage also pays for the
    embeddings and the last for the output layer and the loss. Each stage
    gets its first layer, number of layers and cost in the module attribute
    `model.pipeline`.

    A value made on one stage and used on another is sent between them by
    the plan (plan-lower); a parameter used on several stages (a tied
    embedding) is updated by the first, as plan-lower describes.
  }];
  let options = [
    Option<"pp", "pp", "int64_t", "1", "pipeline stages">,
    Option<"vpp", "vpp", "int64_t", "1",
           "model chunks per pipeline rank (interleaved schedule): the "
           "layers are cut into pp x vpp chunks, chunk c on rank c % pp">,
    ListOption<"stageLayers", "stage-layers", "int64_t",
               "layers of each stage, first to last (default: balanced)">
  ];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

def ModelRecompute : Pass<"model-recompute", "mlir::ModuleOp"> {
  let summary = "Recomputes saved activations in backward instead of keeping them";
  let description = [{
    Each forward layer of `@train_step` keeps, for its backward layer, its
    inputs (the residual stream, the parameters) and the values autodiff
    saved (its extra results). This pass drops some saved values: the forward
    ops that make a dropped value from the layer's inputs and the saved
    values still kept are cloned at the start of the backward layer (marked
    `model.recomputed`), so the value lives only while the backward needs it.

    `mode`:
    - `none`: keep everything;
    - `selective`: drop each saved value whose recomputation needs no matrix
      product and no collective (norm outputs, activation functions, rotary
      embeddings of kept inputs, ...). The attention core of Korthikanti et
      al. 2022 (scores, softmax, dropout of the probabilities) is never kept:
      `model.attention` recomputes it in `model.attention_grad`, as flash
      attention does.
    - `full`: drop every saved value (Megatron's full recompute: only the
      layer's inputs are kept);
    - `levels`: layer `i` (in layer order) takes level `levels[i]` of its
      nested choices (Recompute.h): level 0 keeps everything, the last keeps
      nothing, each level in between drops one more value, the one whose
      recomputation costs the fewest FLOPs per byte freed. `braidc
      --recompute auto` picks the levels that fit a memory budget.

    Dropout recomputes the same mask: it is keyed by the seed, the step,
    the op's `rng_id` and the element's index, never by how often it ran.
    Recomputed collectives (tensor and sequence parallelism) run again on
    every rank of their group, so the ranks stay in step.

    The module gets `model.recompute`, one entry per layer: the choice, the
    bytes of its inputs, the saved bytes it keeps, the FLOPs it recomputes,
    and which saved values (by the op that makes them) it keeps and
    recomputes. With a pipeline, each stage's `flops` in `model.pipeline`
    grows by its recomputation.
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"none\"",
           "none | selective | full | levels">,
    ListOption<"levels", "levels", "int64_t",
               "with mode=levels: the level of each layer, in layer order">
  ];
  let dependentDialects = ["::braid::model::ModelDialect"];
}

#endif // BRAID_PASSES_MODEL_PASSES_TD
