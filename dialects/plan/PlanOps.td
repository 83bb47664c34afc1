//===- PlanOps.td - The `plan` dialect -----------------------*- tablegen -*-===//
//
// The per-rank program over buffers: buffers at static arena offsets and
// functions that are straight lists of kernel calls. It mirrors the plan
// file (runtime/plan/plan.proto), which compiler/PlanExport.cpp writes from
// it.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PLAN_OPS_TD
#define BRAID_PLAN_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/SymbolInterfaces.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let cppNamespace = "::braid::plan_ir";
  let summary = "Per-rank programs of kernel calls on arena buffers";
  let description = [{
    A module of the `plan` dialect is one rank's program: `plan.buffer`
    symbols (a tensor type, a role, and after `plan-memory` an offset in the
    rank's arena) and `plan.func` symbols whose bodies are `plan.kernel`
    calls naming their input and output buffers. The module attribute
    `plan.arena_bytes` states the arena size once `plan-memory` has run.
  }];
}

class Plan_Op<string mnemonic, list<Trait> traits = []>
    : Op<Plan_Dialect, mnemonic, traits>;

def Plan_BufferOp : Plan_Op<"buffer", [Symbol]> {
  let summary = "A tensor at a static place in the arena";
  let description = [{
    Example:

    ```mlir
    plan.buffer @w : tensor<64x64xf32> role = "parameter" name = "lm_head.weight" offset = 0
    ```

    A buffer that holds one rank's slice of a tensor split across the ranks
    of a mesh axis (a tensor-parallel parameter, its gradient and moments)
    names the axis and the split dimension of the global tensor, and the
    global sizes of the blocks that dimension is made of when there are
    several (a fused `[Q | K | V]`), each split evenly:

    ```mlir
    plan.buffer @w : tensor<64x96xf32> role = "parameter"
        name = "transformer.h.0.attn.c_attn.weight" shard = "tp" dim = 1
        blocks = [64, 64, 64] offset = 0
    ```

    Constraints:
    - B1: `role` is one of parameter, gradient, optimizer_state, activation,
      input, workspace, bucket, kv_cache.
    - B2: the type is a statically shaped tensor.
    - B3: `offset`, when present, is a non-negative multiple of the element
      size.
    - B4: `shard` and `dim` are present together, `dim` is a dimension of
      the type, and `blocks`, only with them, are positive.
    - B5: `stage` is at least 0 and `slots` at least 1.
    - B6: `view_of` and `view_offset` are present together, the offset a
      non-negative multiple of the element size; a view has no `slots`
      and is not a `bucket`.

    A `frozen` parameter is one the step does not update (a LoRA run's base
    weight, `model.frozen`): it has no gradient or optimizer state, and a
    checkpoint does not hold it.

    With ZeRO-3 a rank keeps only its block of a bucket's flat parameters:
    a one-dimensional `parameter` buffer with `block_of` naming the flat
    buffer (a temporary the parameters are gathered into before use) whose
    block, along the mesh axis dp, it is.

    A `bucket` (ZeRO's flat gradients, parameters) is one run of bytes for a
    single collective: the buffers of its members are views of it
    (`view_of`), `view_offset` bytes from its start, and plan-memory places
    them there.

    ```mlir
    plan.buffer @flat : tensor<8192xf32> role = "bucket"
    plan.buffer @g0 : tensor<64x64xf32> role = "gradient" name = "w"
        view_of = @flat view_offset = 0
    ```

    With pipeline parallelism a buffer belongs to one `stage` (only that
    stage's functions name it); a buffer that holds one micro-batch's value
    from the stage's forward to its backward has `slots` copies, one per
    micro-batch in flight (plan-lower marks it with 1, plan-schedule sets
    the count of the stage's chunk whose functions name it).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type,
                       StrAttr:$role, OptionalAttr<StrAttr>:$name,
                       OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<StrAttr>:$shard,
                       OptionalAttr<I64Attr>:$dim,
                       OptionalAttr<DenseI64ArrayAttr>:$blocks,
                       OptionalAttr<I64Attr>:$stage,
                       OptionalAttr<I64Attr>:$slots,
                       OptionalAttr<FlatSymbolRefAttr>:$view_of,
                       OptionalAttr<I64Attr>:$view_offset,
                       OptionalAttr<FlatSymbolRefAttr>:$block_of,
                       UnitAttr:$frozen);
  let assemblyFormat = [{
    $sym_name `:` $type `role` `=` $role (`name` `=` $name^)?
    (`shard` `=` $shard^)? (`dim` `=` $dim^)? (`blocks` `=` $blocks^)?
    (`stage` `=` $stage^)? (`slots` `=` $slots^)?
    (`view_of` `=` $view_of^)? (`view_offset` `=` $view_offset^)?
    (`block_of` `=` $block_of^)? (`frozen` $frozen^)?
    (`offset` `=` $offset^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The bytes of one copy (a slotted buffer has `slots` of them).
    int64_t getBytes() {
      auto type = ::llvm::cast<::mlir::RankedTensorType>(getType());
      return type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
    }
  }];
}

def Plan_FuncOp : Plan_Op<"func", [Symbol, SingleBlock, NoTerminator]> {
  let summary = "A straight-line list of kernel calls";
  let description = [{
    Example:

    ```mlir
    plan.func @train_step {
      plan.kernel "LINEAR" [@x, @w] -> [@y] {transpose_w = 1 : i64}
    }
    ```

    Constraints: those of its kernels.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
}

def Plan_KernelOp : Plan_Op<"kernel", [HasParent<"FuncOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "One kernel call on buffers";
  let description = [{
    `kernel` names a kernel of the plan file schema (`LINEAR`, `ZERO`, ...);
    `params` are its attributes (integers and floats); `provenance` says
    which `model` op it came from (for a collective, why it is there).
    A collective names its `group`: the mesh axes along which its ranks
    differ. A kernel that works on one rank's slice of a split value names
    the mesh axis of the slices in `rank_axis`; its `*_stride` parameters,
    times the rank's coordinate along that axis, are the slice's offsets.

    Example:

    ```mlir
    plan.kernel "RMS_NORM" [@x, @g] -> [@y] {eps = 1.0e-05 : f64}
    plan.kernel "ALL_REDUCE" [@g] -> [@g] {} {group = ["dp"]}
    ```

    Constraints:
    - K1: every input and output names a `plan.buffer` of the module.
    - K2: every entry of `params` is an integer or a float attribute.
    - K3: `group`, when present, is a non-empty list of distinct, non-empty
      axis names.
    - K4: `rank_axis`, when present, is not empty.
    - K5: `kernel` is a row of runtime/plan/Kernels.def, the inputs and
      outputs are as many as the row allows, and `group` is present
      exactly when the row requires one (collectives) or allows one
      (GRAD_NORM).
  }];
  let arguments = (ins StrAttr:$kernel, SymbolRefArrayAttr:$inputs,
                       SymbolRefArrayAttr:$outputs,
                       DefaultValuedAttr<DictionaryAttr, "{}">:$params,
                       OptionalAttr<StrAttr>:$provenance,
                       OptionalAttr<StrArrayAttr>:$group,
                       OptionalAttr<StrAttr>:$rank_axis);
  let assemblyFormat = [{
    $kernel $inputs `->` $outputs $params attr-dict
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::braid::plan::KernelId":$kernel,
                   "::mlir::ArrayAttr":$inputs, "::mlir::ArrayAttr":$outputs,
                   "::mlir::DictionaryAttr":$params,
                   "::mlir::StringAttr":$provenance, "::mlir::ArrayAttr":$group,
                   "::mlir::StringAttr":$rank_axis), [{
      build($_builder, $_state,
            $_builder.getStringAttr(::braid::plan::KernelIdName(kernel)),
            inputs, outputs, params, provenance, group, rank_axis);
    }]>,
  ];
  let extraClassDeclaration = [{
    /// The kernel's row of runtime/plan/Kernels.def (nullptr for a name
    /// that has none, which the verifier refuses).
    const ::braid::plan::KernelRow *getKernelRow();
    /// The kernel, of a verified op.
    ::braid::plan::KernelId getKernelId();
    bool is(::braid::plan::KernelId kernel) { return getKernelId() == kernel; }
  }];
}

def Plan_StageOp : Plan_Op<"stage", [HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A pipeline stage: its functions and its schedule";
  let description = [{
    The program of the ranks whose `pp` coordinate is `index`: each step they
    run `zero_grads`, then `forward` and `backward` on micro-batches in the
    order of `schedule` (`"F3:1"`: the forward of micro-batch 3 on slot 1;
    `"B3:1"` its backward; `"W3:1"` its `backward_weight`, the weight
    gradients a zero-bubble schedule runs apart), then `update`. With the
    interleaved schedule the rank holds several model chunks: `forward` and
    `backward` are chunk 0's, `chunks` lists the functions of chunks 1, 2,
    ... (`{forward, backward[, backward_weight]}`), and a call names its
    chunk after the micro-batch (`"F3.1:2"`: chunk 1's forward of
    micro-batch 3 on slot 2). A backward call may name the function it runs
    instead of its chunk's after an `@` (`"B7:0@stage1_backward_last"`:
    `plan-overlap-grad-reduce`'s copy that starts the gradients' sums).
    `plan-eval` sets `eval_forward` (and a chunk's `eval_forward`): the
    forward-only copy of the forward function that evaluation runs.
    `plan-schedule` sets `schedule` and `slots`
    (micro-batches in flight). Each chunk has slots of its own (chunk 1's
    slot 2 is not chunk 0's): with several chunks `chunk_slots` says how
    many each has, chunk 0 first, and `slots` is the largest of them.

    Example:

    ```mlir
    plan.stage 1 {first_layer = 2 : i64, num_layers = 2 : i64,
                  forward = @stage1_forward, backward = @stage1_backward,
                  slots = 1 : i64, schedule = ["F0:0", "B0:0"]}
    ```

    Constraints:
    - ST1: `index`, `first_layer` and `num_layers` are at least 0, `slots`
      at least 1; `chunk_slots`, when present, has one entry per chunk
      (1 + `chunks`), each at least 1, the largest equal to `slots`.
    - ST2: the functions (the chunks' too, and those schedule calls name)
      name `plan.func` symbols of the module.
  }];
  let arguments = (ins I64Attr:$index, I64Attr:$first_layer,
                       I64Attr:$num_layers,
                       OptionalAttr<FlatSymbolRefAttr>:$zero_grads,
                       FlatSymbolRefAttr:$forward, FlatSymbolRefAttr:$backward,
                       OptionalAttr<FlatSymbolRefAttr>:$backward_weight,
                       OptionalAttr<FlatSymbolRefAttr>:$update,
                       OptionalAttr<I64Attr>:$slots,
                       OptionalAttr<StrArrayAttr>:$schedule,
                       OptionalAttr<DictArrayAttr>:$chunks,
                       OptionalAttr<DenseI64ArrayAttr>:$chunk_slots,
                       OptionalAttr<FlatSymbolRefAttr>:$eval_forward);
  let assemblyFormat = "$index attr-dict";
  let hasVerifier = 1;
}

#endif // BRAID_PLAN_OPS_TD
