//===- ModelOps.td - Ops of the `model` dialect --------------*- tablegen -*-===//
//
// Every op's description ends with a Constraints list; the verifier checks each
// item and names it in a comment, and tests/lit/dialects/model/invalid.mlir has
// one negative case per item, named after its id.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_MODEL_OPS_TD
#define BRAID_MODEL_OPS_TD

include "dialects/model/ModelBase.td"
include "dialects/model/ModelAttrs.td"
include "dialects/model/ModelInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

/// A pure op with a cost that lowers to one call of plan kernel `kernel` (a
/// row of runtime/plan/Kernels.def; by default the mnemonic in capitals).
/// `costMethods` lists the CostOpInterface methods with defaults that the
/// op overrides (matrix products: getMatmulFlops).
class Model_ComputeOp<string mnemonic, list<Trait> traits = [],
                      list<string> costMethods = [],
                      string kernel = !toupper(mnemonic)>
    : Model_Op<mnemonic, !listconcat(traits,
          [Pure, DeclareOpInterfaceMethods<Model_CostOpInterface,
                                           costMethods>,
           Model_PlanKernel<kernel>, Model_PlanKernelOpInterface])> {
  let hasVerifier = 1;
}

/// A forward op: a compute op with a vector-Jacobian product.
class Model_ForwardOp<string mnemonic, list<Trait> traits = [],
                      list<string> costMethods = [],
                      string kernel = !toupper(mnemonic)>
    : Model_ComputeOp<mnemonic, !listconcat(traits,
          [DeclareOpInterfaceMethods<Model_GradientOpInterface>]),
          costMethods, kernel>;

//===----------------------------------------------------------------------===//
// Structure: mesh, layer, yield
//===----------------------------------------------------------------------===//

def Model_MeshOp : Model_Op<"mesh", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "A named device mesh with named axes";
  let description = [{
    Declares the logical device mesh that shardings refer to. Axes are named
    (`dp`, `pp`, `tp`, later `cp`, `ep`) and sized; the product of the sizes
    is the number of ranks.

    Example:

    ```mlir
    model.mesh @mesh axes = ["dp", "pp", "tp"] sizes = [2, 1, 4]
    ```

    Constraints:
    - M1: `axes` and `sizes` have the same number of entries.
    - M2: axis names are non-empty and unique.
    - M3: every size is at least 1.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$axes,
                       DenseI64ArrayAttr:$sizes);
  let assemblyFormat = "$sym_name `axes` `=` $axes `sizes` `=` $sizes attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The size of axis `name`, or std::nullopt when the mesh has no such axis.
    std::optional<int64_t> getAxisSize(llvm::StringRef name);
    /// The number of ranks: the product of the axis sizes.
    int64_t getNumRanks();
  }];
}

def Model_LayerOp : Model_Op<"layer", [IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "One transformer layer as a unit";
  let description = [{
    A transformer layer: its body takes the hidden state and the layer's
    parameters as block arguments and yields the new hidden state. The op is
    isolated from above, so everything a layer uses is an operand: pipeline
    partitioning and recompute see a layer's inputs, parameters and outputs
    without looking inside.

    `backward` marks the backward of layer `index` (made by
    `model-autodiff`): its operands are the gradient of the forward layer's
    result, the forward layer's operands and the activations the forward
    layer saved for it (its extra results); it yields the gradients of the
    forward layer's float operands, in order: of those whose gradient
    something reads (all of them, unless parameters are `model.frozen`:
    then `model-autodiff` drops the gradients nothing reads, and the
    activations saved only for them). Index operands (the positions of
    packed documents, which every layer reads) have no gradient.

    Example:

    ```mlir
    %h1 = model.layer 0 (%h0, %w) : (tensor<2x16x64xf32>, tensor<64xf32>)
        -> tensor<2x16x64xf32> {
    ^bb0(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>):
      %n = model.rms_norm %x, %g eps = 1.0e-05
          : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
      model.yield %n : tensor<2x16x64xf32>
    }
    ```

    Constraints:
    - L1: `index` is at least 0.
    - L2: the body's block has one argument per operand, of the operand's type.
    - L3: the body yields one value per result, of the result's type.
  }];
  let arguments = (ins I64Attr:$index, Variadic<AnyType>:$inputs,
                       UnitAttr:$backward);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $index (`backward` $backward^)? `(` $inputs `)` attr-dict `:`
    functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    /// Creates a layer whose body block has one argument per input; the
    /// caller fills the body and ends it with model.yield.
    OpBuilder<(ins "int64_t":$index, "::mlir::TypeRange":$resultTypes,
                   "::mlir::ValueRange":$inputs)>
  ];
}

def Model_YieldOp : Model_Op<"yield", [Pure, Terminator, ReturnLike,
                                       HasParent<"LayerOp">]> {
  let summary = "Ends a layer and gives its results";
  let description = [{
    The terminator of a `model.layer` body.

    Example:

    ```mlir
    model.yield %h : tensor<2x16x64xf32>
    ```

    Constraints: those of its parent (L3).
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

def Model_EmbeddingOp : Model_ForwardOp<"embedding"> {
  let summary = "Looks up token ids in an embedding table";
  let description = [{
    `result[b, s, :] = table[ids[b, s], :]`. The table is `[vocab, hidden]`
    (vocab possibly padded); ids are i32 or i64.

    Example:

    ```mlir
    %e = model.embedding %table[%ids]
        : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
    ```

    With `vocab_axis` (`model-shard`'s vocab-parallel embedding), the table is
    this rank's slice of the vocabulary rows along that mesh axis: rank `c`
    of the axis holds rows `[c·V, (c+1)·V)`, `V` the table's dimension 0.
    Ids outside the slice give zero rows, so the sum of the ranks' results
    (an all-reduce over the axis) is the lookup in the whole table.

    ```mlir
    %e = model.embedding %table[%ids] vocab_axis = "tp"
        : (tensor<256x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
    ```

    Constraints:
    - E1: the table has rank 2.
    - E2: the result's shape is the ids' shape followed by the table's
      dimension 1.
    - E3: the result's element type is the table's.
    - E4: `vocab_axis`, when present, is an axis of the module's mesh.
  }];
  let arguments = (ins Model_FloatTensor:$table, Model_IndexTensor:$ids,
                       OptionalAttr<StrAttr>:$vocab_axis);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $table `[` $ids `]` (`vocab_axis` `=` $vocab_axis^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$table, "::mlir::Value":$ids)>];
}

def Model_PositionEmbeddingOp : Model_ForwardOp<"position_embedding"> {
  let summary = "Learned absolute position embeddings for a token batch";
  let description = [{
    `result[b, s, :] = table[s, :]` for the positions `0 .. S-1` of the token
    batch `tokens` (only its shape is used). The table is
    `[max_positions, hidden]`, as in GPT-2's `wpe`.

    Example:

    ```mlir
    %p = model.position_embedding %wpe for %ids
        : (tensor<128x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
    ```

    With `seq_axis` (sequence parallelism) the result is this rank's slice
    of the sequence along that mesh axis: rank `c` of `n` gets positions
    `[c·S/n, (c+1)·S/n)`.

    With `positions` (`[batch, seq]`, documents packed in one sequence,
    each token's position in its document) row `(b, s)` is
    `table[positions[b, s]]` instead of `table[s]`; under `seq_axis` the
    positions are the whole sequence's and the result the rank's slice.

    ```mlir
    %p = model.position_embedding %wpe for %ids at %pos
        : (tensor<128x64xf32>, tensor<2x16xi32>, tensor<2x16xi32>)
        -> tensor<2x16x64xf32>
    ```

    Constraints:
    - PE1: the table has rank 2 and the tokens rank 2.
    - PE2: the sequence length (tokens dimension 1) is at most the table's
      dimension 0.
    - PE3: the result is `[batch, seq, hidden]` of the table's element type
      (`[batch, seq / n, hidden]` with `seq_axis` of size `n`).
    - PE4: `seq_axis`, when present, is an axis of the module's mesh whose
      size divides the sequence length.
    - PE5: `positions`, when present, has the tokens' shape.
  }];
  let arguments = (ins Model_FloatTensor:$table, Model_IndexTensor:$tokens,
                       Optional<Model_IndexTensor>:$positions,
                       OptionalAttr<StrAttr>:$seq_axis);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $table `for` $tokens (`at` $positions^)? (`seq_axis` `=` $seq_axis^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$table, "::mlir::Value":$tokens,
      CArg<"::mlir::Value", "{}">:$positions)>];
}

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

def Model_LinearOp : Model_ForwardOp<"linear", [], ["getMatmulFlops"]> {
  let summary = "A matrix product with an optional bias";
  let description = [{
    `result = x · W + bias` over the last dimension of `x`. The weight is
    stored `[in, out]` (GPT-2's Conv1D), or `[out, in]` with `transpose_w`
    (PyTorch's `nn.Linear`, LLaMA and Bloom), so that parameters keep the
    layout of the family's checkpoints.

    Example:

    ```mlir
    %q = model.linear %x, %wq transpose_w
        : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
    %h = model.linear %x, %w, %b
        : (tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>)
        -> tensor<2x16x256xf32>
    ```

    Constraints:
    - LIN1: `x` has rank at least 1 and the weight rank 2.
    - LIN2: the last dimension of `x` equals the weight's input dimension
      (dimension 1 with `transpose_w`, else 0).
    - LIN3: the bias, when present, is `[out]`.
    - LIN4: the result is `x`'s shape with the last dimension replaced by
      the weight's output dimension.
    - LIN5: `x`, the weight, the bias and the result have one element type.
    - LIN6: `bias_scale`, when present, is in (0, 1] and the op has a bias.

    `bias_scale` multiplies the bias. `model-shard` sets it to `1/tp` on a
    row-parallel linear, whose outputs are partial sums: every rank adds
    its share of the bias, so the all-reduced sum holds it once.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_FloatTensor:$weight,
                       Optional<Model_FloatTensor>:$bias,
                       UnitAttr:$transpose_w,
                       OptionalAttr<F64Attr>:$bias_scale);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $weight (`,` $bias^)? (`transpose_w` $transpose_w^)?
    (`bias_scale` `=` $bias_scale^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$weight,
                                 "::mlir::Value":$bias, "bool":$transposeW)>];
  let extraClassDeclaration = [{
    /// The weight's input and output dimensions, in that order.
    std::pair<int64_t, int64_t> getWeightInOut();
  }];
}

def Model_AttentionOp : Model_ForwardOp<"attention", [],
                                         ["getMatmulFlops"]> {
  let summary = "Multi-head (grouped-query) scaled dot-product attention";
  let description = [{
    `softmax(q kᵀ · scale + bias) v`, per head, with flash-attention
    semantics: no `[seq, seq]` tensor is part of the op's contract. Heads are
    packed in the last dimension (`[batch, seq, heads × head_dim]`). With
    grouped-query attention (`num_kv_heads < num_heads`) query head `i` uses
    key/value head `i / (num_heads / num_kv_heads)`.

    `causal` masks keys after the query position. `alibi` adds ALiBi's
    linear position bias, `-slope_h · (i - j)`, with the slopes of Press et
    al. (geometric in the head index, extended for head counts that are not
    a power of two as in Bloom). `dropout` is the rate applied to the
    attention probabilities.

    `positions` (causal only; `[batch, seq]`) packs documents in each
    sequence, as Megatron's `reset_attention_mask`: token `i` is at position
    `positions[b, i]` of its document, the documents contiguous (positions
    restart at 0 where one starts), and query `i` attends to keys
    `[i - positions[b, i], i]`, those of its document up to itself.

    ```mlir
    %o = model.attention %q, %k, %v positions %pos heads = 4 kv_heads = 2
        scale = 0.25 causal
        : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>,
           tensor<2x16xi32>) -> tensor<2x16x64xf32>
    ```

    Example:

    ```mlir
    %o = model.attention %q, %k, %v heads = 4 kv_heads = 2 scale = 0.25 causal
        : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
        -> tensor<2x16x64xf32>
    ```

    Constraints:
    - A1: `q`, `k` and `v` have rank 3 and one batch size; `k` and `v` have
      one sequence length, which equals `q`'s when `causal`.
    - A2: `num_heads` and `num_kv_heads` are at least 1 and `num_kv_heads`
      divides `num_heads`.
    - A3: `num_heads` divides `q`'s last dimension (the head size is the
      quotient) and `k` and `v` have `num_kv_heads × head_size` columns.
    - A4: `scale` is positive and `dropout` is in [0, 1).
    - A5: the result has `q`'s type, and `q`, `k`, `v` one element type.
    - A6: `head_axis`, `global_heads` and `global_kv_heads` are present
      together; `head_axis` is then an axis of the module's mesh, of size
      `n`, `global_heads = num_heads · n`, `global_kv_heads` is
      `num_kv_heads · n` (kv heads split) or `num_kv_heads` (replicated) and
      divides `global_heads`, and A2's divisibility is that of the global
      counts.
    - A7: `positions`, when present, is `[batch, seq]` of `q` and the
      attention is causal.

    With `head_axis` (`model-shard`'s tensor parallelism), `q` holds query
    heads `[c·num_heads, (c+1)·num_heads)` of `global_heads` on rank `c` of
    the axis, and `k`, `v` its kv heads (all of them when they are
    replicated); head `g` keeps its global kv group and ALiBi slope.

    ```mlir
    %o = model.attention %q, %k, %v heads = 2 kv_heads = 1 scale = 0.25 causal
        head_axis = "tp" global_heads = 4 global_kv_heads = 2
        : (tensor<2x16x32xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>)
        -> tensor<2x16x32xf32>
    ```
  }];
  let arguments = (ins Model_FloatTensor:$q, Model_FloatTensor:$k,
                       Model_FloatTensor:$v,
                       Optional<Model_IndexTensor>:$positions,
                       I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, F64Attr:$scale,
                       UnitAttr:$causal, UnitAttr:$alibi,
                       DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                       OptionalAttr<StrAttr>:$head_axis,
                       OptionalAttr<I64Attr>:$global_heads,
                       OptionalAttr<I64Attr>:$global_kv_heads);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v (`positions` $positions^)? `heads` `=` $num_heads `kv_heads` `=` $num_kv_heads
    `scale` `=` $scale (`causal` $causal^)? (`alibi` $alibi^)?
    (`head_axis` `=` $head_axis^)? (`global_heads` `=` $global_heads^)?
    (`global_kv_heads` `=` $global_kv_heads^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$q, "::mlir::Value":$k,
      "::mlir::Value":$v, "int64_t":$numHeads, "int64_t":$numKvHeads,
      "double":$scale, "bool":$causal, "bool":$alibi, "double":$dropout,
      CArg<"::mlir::Value", "{}">:$positions)>];
  let extraClassDeclaration = [{
    int64_t getHeadDim();
  }];
}

def Model_QkvSplitOp : Model_ForwardOp<"qkv_split"> {
  let summary = "Splits a fused QKV projection into queries, keys and values";
  let description = [{
    Splits the output of a fused QKV projection (`[batch, seq,
    (num_heads + 2 num_kv_heads) × head_dim]`) into `q`, `k` and `v`, each
    with heads packed in the last dimension. `layout` says how the fused
    columns are ordered:
    - `grouped`: all of Q, then all of K, then all of V (GPT-2's `c_attn`,
      Baichuan's `W_pack`);
    - `per_head`: for each head its q, k and v (Bloom's and Megatron's
      `query_key_value`); it requires `num_kv_heads = num_heads`.

    Example:

    ```mlir
    %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 4 head_dim = 16
        layout = per_head
        : (tensor<2x16x192xf32>)
        -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
    ```

    Constraints:
    - QS1: the input has rank 3 and `(num_heads + 2 num_kv_heads) × head_dim`
      columns.
    - QS2: `num_heads`, `num_kv_heads` and `head_dim` are at least 1,
      `num_kv_heads` divides `num_heads`, and `per_head` has equal counts.
    - QS3: `q` is `[batch, seq, num_heads × head_dim]`, `k` and `v` are
      `[batch, seq, num_kv_heads × head_dim]`, all of the input's element
      type.
  }];
  let arguments = (ins Model_FloatTensor:$qkv, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       Model_QkvLayoutAttr:$layout);
  let results = (outs Model_FloatTensor:$q, Model_FloatTensor:$k,
                      Model_FloatTensor:$v);
  let assemblyFormat = [{
    $qkv `heads` `=` $num_heads `kv_heads` `=` $num_kv_heads `head_dim` `=`
    $head_dim `layout` `=` $layout attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$qkv, "int64_t":$numHeads,
      "int64_t":$numKvHeads, "int64_t":$headDim, "QkvLayout":$layout)>];
}

//===----------------------------------------------------------------------===//
// Normalisation and position encodings
//===----------------------------------------------------------------------===//

def Model_RmsNormOp : Model_ForwardOp<"rms_norm"> {
  let summary = "Root-mean-square normalisation over the last dimension";
  let description = [{
    `x / sqrt(mean(x²) + eps) · weight` over the last dimension (LLaMA),
    the mean taken in fp32 or wider.

    Example:

    ```mlir
    %n = model.rms_norm %x, %g eps = 1.0e-05
        : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    ```

    Constraints:
    - RN1: the weight is `[d]` where `d` is `x`'s last dimension.
    - RN2: `eps` is positive.
    - RN3: the result has `x`'s type and the weight `x`'s element type.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_FloatTensor:$weight,
                       F64Attr:$eps);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $weight `eps` `=` $eps attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$weight,
                                 "double":$eps)>];
}

def Model_LayerNormOp : Model_ForwardOp<"layer_norm"> {
  let summary = "Layer normalisation over the last dimension";
  let description = [{
    `(x - mean(x)) / sqrt(var(x) + eps) · weight + bias` over the last
    dimension (GPT-2, Bloom), statistics in fp32 or wider.

    Example:

    ```mlir
    %n = model.layer_norm %x, %g, %b eps = 1.0e-05
        : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
        -> tensor<2x16x64xf32>
    ```

    Constraints:
    - LN1: the weight and the bias are `[d]` where `d` is `x`'s last
      dimension.
    - LN2: `eps` is positive.
    - LN3: the result has `x`'s type, and the weight and bias `x`'s element
      type.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_FloatTensor:$weight,
                       Model_FloatTensor:$bias, F64Attr:$eps);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $weight `,` $bias `eps` `=` $eps attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$weight,
                                 "::mlir::Value":$bias, "double":$eps)>];
}

def Model_RopeOp : Model_ForwardOp<"rope"> {
  let summary = "Rotary position embedding of packed heads";
  let description = [{
    Rotates each head of `x` (`[batch, seq, heads × head_dim]`) by the
    position-dependent angles `pos · theta^(-2i / head_dim)`, in the
    rotate-half convention of Hugging Face's LLaMA (the first and second
    halves of each head form the pairs). Positions are `0 .. seq-1`, or
    with `positions` (`[batch, seq]`: documents packed in each sequence)
    row `(b, s)` is at `positions[b, s]`, as `model.rope_at`.

    Example:

    ```mlir
    %r = model.rope %q head_dim = 16 theta = 1.0e+04
        : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```

    Constraints:
    - R1: `x` has rank 3.
    - R2: `head_dim` is even, at least 2, and divides `x`'s last dimension.
    - R3: `theta` is positive.
    - R4: the result has `x`'s type.
    - R5: `positions`, when present, is `[batch, seq]` of `x`.
  }];
  let arguments = (ins Model_FloatTensor:$x,
                       Optional<Model_IndexTensor>:$positions,
                       I64Attr:$head_dim, F64Attr:$theta);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x (`at` $positions^)? `head_dim` `=` $head_dim `theta` `=` $theta
    attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "int64_t":$headDim,
                                 "double":$theta,
                                 CArg<"::mlir::Value", "{}">:$positions)>];
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def Model_SwigluOp : Model_ForwardOp<"swiglu"> {
  let summary = "SwiGLU gating: silu(gate) · up";
  let description = [{
    `gate / (1 + exp(-gate)) · up`, LLaMA's MLP activation. With one
    operand, gate and up are packed in it: its last dimension is
    `[gate | up]`, twice the result's (the output of a fused gate/up
    projection, `--fuse-mlp`; under tensor parallelism each rank's slice is
    its gate columns then its up columns).

    Example:

    ```mlir
    %a = model.swiglu %gate, %up
        : (tensor<2x16x176xf32>, tensor<2x16x176xf32>) -> tensor<2x16x176xf32>
    %b = model.swiglu %gate_up
        : (tensor<2x16x352xf32>) -> tensor<2x16x176xf32>
    ```

    Constraints:
    - SW1: with two operands, `gate`, `up` and the result have one type.
    - SW2: with one, the result is `gate`'s type with the last dimension
      halved (an even last dimension).
  }];
  let arguments = (ins Model_FloatTensor:$gate,
                       Optional<Model_FloatTensor>:$up);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    operands attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$gate, "::mlir::Value":$up)>];
  let extraClassDeclaration = [{
    /// True when gate and up are packed in one operand.
    bool isPacked() { return !getUp(); }
  }];
}

def Model_GeluOp : Model_ForwardOp<"gelu"> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `x · Φ(x)`; with `tanh`, the approximation
    `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))` of GPT-2 (`gelu_new`) and
    Bloom.

    Example:

    ```mlir
    %a = model.gelu %h tanh : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
    ```

    Constraints:
    - G1: the result has `x`'s type.
  }];
  let arguments = (ins Model_FloatTensor:$x, UnitAttr:$tanh);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x (`tanh` $tanh^)? attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "bool":$tanh)>];
}

def Model_AddOp : Model_ForwardOp<"add"> {
  let summary = "Elementwise sum (the residual connection)";
  let description = [{
    `lhs + rhs`, no broadcasting.

    Example:

    ```mlir
    %s = model.add %x, %y
        : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```

    Constraints:
    - AD1: `lhs`, `rhs` and the result have one type.
  }];
  let arguments = (ins Model_FloatTensor:$lhs, Model_FloatTensor:$rhs);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$lhs, "::mlir::Value":$rhs)>];
}

def Model_ScaleOp : Model_ForwardOp<"scale"> {
  let summary = "Elementwise product with a constant";
  let description = [{
    `x · scale`, `scale` a compile-time constant: a LoRA adapter's
    `alpha / rank` on its low-rank activations. Linear, so its gradient is
    a `model.scale` of the output gradient by the same factor, and under
    tensor parallelism it keeps its operand's layout, partial sums
    included.

    Example:

    ```mlir
    %s = model.scale %h scale = 2.0
        : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
    ```

    Constraints:
    - SC1: the result has `x`'s type.
    - SC2: `scale` is finite and nonzero.
  }];
  let arguments = (ins Model_FloatTensor:$x, F64Attr:$scale);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x `scale` `=` $scale attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "double":$scale)>];
}

def Model_DropoutOp : Model_ForwardOp<"dropout"> {
  let summary = "Inverted dropout";
  let description = [{
    Zeroes each element with probability `rate` and scales the others by
    `1 / (1 - rate)`. The mask comes from a counter-based generator keyed by
    the seed, the step, `rng_id` and the element's global index, so it does
    not depend on how the tensor is sharded. The frontend gives every dropout
    a distinct `rng_id`; its gradient is a `model.dropout` of the output
    gradient with the same `rng_id` (the same mask).

    Example:

    ```mlir
    %d = model.dropout %x rate = 1.0e-01
        : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```

    With `seq_axis` (sequence parallelism) `x` is this rank's slice of the
    sequence (dimension 1) along that mesh axis, and each element keeps the
    mask of its place in the whole sequence.

    With `feature_axis` `x` is this rank's slice of its last dimension along
    that mesh axis (a LoRA adapter's input beside a row-parallel linear),
    and each element keeps the mask of its place in the whole tensor.

    Constraints:
    - D1: `rate` is in [0, 1).
    - D2: the result has `x`'s type.
    - D3: with `seq_axis`, `x` has rank at least 2 and the axis is an axis
      of the module's mesh.
    - D4: with `feature_axis`, `x` has rank at least 2, the axis is an axis
      of the module's mesh, and there is no `seq_axis`.
  }];
  let arguments = (ins Model_FloatTensor:$x, F64Attr:$rate,
                       OptionalAttr<I64Attr>:$rng_id,
                       OptionalAttr<StrAttr>:$seq_axis,
                       OptionalAttr<StrAttr>:$feature_axis);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x `rate` `=` $rate (`seq_axis` `=` $seq_axis^)?
    (`feature_axis` `=` $feature_axis^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "double":$rate,
                                 "int64_t":$rngId)>];
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def Model_CrossEntropyOp : Model_ForwardOp<"cross_entropy"> {
  let summary = "Mean softmax cross-entropy over the last dimension";
  let description = [{
    The mean over all positions whose target is not `ignore_index` of
    `logsumexp(logits[..., :]) - logits[..., target]`, fused (no softmax
    tensor is part of the contract). The loss is f32 (f64 when the logits
    are f64).

    Example:

    ```mlir
    %l = model.cross_entropy %logits, %targets ignore_index = -100
        : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
    ```

    Constraints:
    - CE1: the logits have rank at least 2 and the targets are the logits'
      shape without the last dimension.
    - CE2: the result is a rank-0 tensor of f64 when the logits are f64, of
      f32 otherwise.
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_IndexTensor:$targets,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Model_FloatTensor:$loss);
  let assemblyFormat = [{
    $logits `,` $targets `ignore_index` `=` $ignore_index attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$logits,
                                 "::mlir::Value":$targets,
                                 "int64_t":$ignoreIndex)>];
}

//===----------------------------------------------------------------------===//
// Vocab-parallel loss
//===----------------------------------------------------------------------===//

// `model-shard` replaces `model.cross_entropy` on logits split by vocabulary
// columns with these three steps and two all-reduces between them, so that
// no rank ever holds full-vocabulary logits:
//   max = cross_entropy_max(logits); all_reduce max
//   partial = cross_entropy_partial(logits, targets, max); all_reduce sum
//   loss, lse = cross_entropy_finish(partial, max, targets)
// and `model.cross_entropy_grad` then reads the global `lse`. They come after
// autodiff, so they have no gradient of their own.

def Model_CrossEntropyMaxOp : Model_ComputeOp<"cross_entropy_max"> {
  let summary = "Row maxima of logits, the first step of a split cross-entropy";
  let description = [{
    `row_max[...] = max over c of logits[..., c]` over this rank's columns.

    Example:

    ```mlir
    %m = model.cross_entropy_max %logits
        : (tensor<2x16x256xf32>) -> tensor<2x16xf32>
    ```

    Constraints:
    - CEM1: the logits have rank at least 2 and the result is their shape
      without the last dimension, of their element type.
  }];
  let arguments = (ins Model_FloatTensor:$logits);
  let results = (outs Model_FloatTensor:$row_max);
  let assemblyFormat = "$logits attr-dict `:` functional-type(operands, results)";
}

def Model_CrossEntropyPartialOp : Model_ComputeOp<"cross_entropy_partial"> {
  let summary = "This rank's share of the softmax denominator and target logit";
  let description = [{
    With `row_max` the maximum over every rank's columns:
    `partial[..., 0] = sum over c of exp(logits[..., c] - row_max[...])` and
    `partial[..., 1] = logits[..., target - start]` when the target is one of
    this rank's columns `[start, start + V)`, else 0; both 0 on rows whose
    target is `ignore_index`. `start` is `c·V` on rank `c` of `vocab_axis`
    (0 without it), `V` the logits' last dimension. The ranks' partials are
    then summed by one all-reduce.

    Example:

    ```mlir
    %p = model.cross_entropy_partial %logits, %targets, %m ignore_index = -100
        vocab_axis = "tp"
        : (tensor<2x16x256xf32>, tensor<2x16xi32>, tensor<2x16xf32>)
        -> tensor<2x16x2xf32>
    ```

    Constraints:
    - CEP1: CE1 of `model.cross_entropy` holds for the logits and targets.
    - CEP2: `row_max` is the logits' shape without the last dimension, of
      their element type.
    - CEP3: the result is the logits' shape with the last dimension 2, of
      the loss's element type (CE2: f32 for bf16, f16 and f32 logits, f64
      for f64), so that sums of exponentials keep float's precision.
    - CEP4: `vocab_axis`, when present, is an axis of the module's mesh.
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_IndexTensor:$targets,
                       Model_FloatTensor:$row_max,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       OptionalAttr<StrAttr>:$vocab_axis);
  let results = (outs Model_FloatTensor:$partial);
  let assemblyFormat = [{
    $logits `,` $targets `,` $row_max `ignore_index` `=` $ignore_index
    (`vocab_axis` `=` $vocab_axis^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_CrossEntropyFinishOp : Model_ComputeOp<"cross_entropy_finish"> {
  let summary = "The loss and log-sum-exp from the summed partials";
  let description = [{
    `lse[...] = row_max[...] + log(sums[..., 0])`, and the loss is the mean
    over the rows whose target is not `ignore_index` of
    `lse - sums[..., 1]` (0 when there is none), as `model.cross_entropy`.
    On ignored rows `lse` is `row_max`. The same on every rank.

    Example:

    ```mlir
    %loss, %lse = model.cross_entropy_finish %sums, %m, %targets
        ignore_index = -100
        : (tensor<2x16x2xf32>, tensor<2x16xf32>, tensor<2x16xi32>)
        -> (tensor<f32>, tensor<2x16xf32>)
    ```

    Constraints:
    - CEF1: `sums` has rank at least 2 and last dimension 2; `row_max`
      and the targets are its shape without the last dimension; `sums`'
      element type is the loss type (CE2) of `row_max`'s (the logits').
    - CEF2: the loss is the rank-0 loss type of `sums`' element type (as
      CE2) and `lse` is `row_max`'s shape of the loss's element type.
  }];
  let arguments = (ins Model_FloatTensor:$sums, Model_FloatTensor:$row_max,
                       Model_IndexTensor:$targets,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Model_FloatTensor:$loss, Model_FloatTensor:$lse);
  let assemblyFormat = [{
    $sums `,` $row_max `,` $targets `ignore_index` `=` $ignore_index attr-dict
    `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

include "dialects/model/ModelGradOps.td"
include "dialects/model/ModelOptimizerOps.td"
include "dialects/model/ModelCollectiveOps.td"
include "dialects/model/ModelGenerationOps.td"

#endif // BRAID_MODEL_OPS_TD
