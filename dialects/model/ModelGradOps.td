//===- ModelGradOps.td - Gradient ops of the `model` dialect -*- tablegen -*-===//
//
// One backward op per backward kernel of the runtime (docs/Rationale-
// Training.md). They are what `model-autodiff` emits; like the forward ops,
// each description ends with a Constraints list that its verifier checks.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_MODEL_GRAD_OPS_TD
#define BRAID_MODEL_GRAD_OPS_TD

def Model_EmbeddingGradOp : Model_ComputeOp<"embedding_grad"> {
  let summary = "Gradient of an embedding table";
  let description = [{
    `dtable[v, :] = sum over positions p with ids[p] = v of dy[p, :]`: the
    gradient of `model.embedding` with respect to its table. The result type
    is the table's.

    Example:

    ```mlir
    %dt = model.embedding_grad %dy[%ids]
        : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<512x64xf32>
    ```

    With `vocab_axis`, the result is this rank's slice of the vocabulary
    rows, as for `model.embedding`: positions whose id is outside it add
    nothing.

    Constraints:
    - EG1: the result has rank 2.
    - EG2: `dy`'s shape is the ids' shape followed by the result's
      dimension 1.
    - EG3: `dy` and the result have one element type.
    - EG4: `vocab_axis`, when present, is an axis of the module's mesh.
  }];
  let arguments = (ins Model_FloatTensor:$dy, Model_IndexTensor:$ids,
                       OptionalAttr<StrAttr>:$vocab_axis);
  let results = (outs Model_FloatTensor:$dtable);
  let assemblyFormat = [{
    $dy `[` $ids `]` (`vocab_axis` `=` $vocab_axis^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_PositionEmbeddingGradOp : Model_ComputeOp<"position_embedding_grad"> {
  let summary = "Gradient of a learned position table";
  let description = [{
    `dtable[s, :] = sum over b of dy[b, s, :]` for `s < seq`, zero for the
    positions the batch does not reach.

    Example:

    ```mlir
    %dt = model.position_embedding_grad %dy
        : (tensor<2x16x64xf32>) -> tensor<128x64xf32>
    ```

    With `seq_axis`, `dy` holds this rank's slice of the sequence, as for
    `model.position_embedding`, and only its positions get a gradient.
    With `positions` (the forward's, `[batch, seq]` of the whole sequence)
    `dtable[positions[b, s], :]` gathers `dy[b, s, :]`.

    Constraints:
    - PEG1: `dy` has rank 3 and the result rank 2, with `dy`'s last
      dimension.
    - PEG2: `dy`'s sequence length (times the size of `seq_axis`) is at
      most the result's dimension 0.
    - PEG3: `dy` and the result have one element type.
    - PEG4: `seq_axis`, when present, is an axis of the module's mesh.
    - PEG5: `positions`, when present, is `[batch, seq]` with `dy`'s batch
      and the whole sequence (PEG2's).
  }];
  let arguments = (ins Model_FloatTensor:$dy,
                       Optional<Model_IndexTensor>:$positions,
                       OptionalAttr<StrAttr>:$seq_axis);
  let results = (outs Model_FloatTensor:$dtable);
  let assemblyFormat = [{
    $dy (`at` $positions^)? (`seq_axis` `=` $seq_axis^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_LinearGradInputOp : Model_ComputeOp<"linear_grad_input", [],
                                              ["getMatmulFlops"]> {
  let summary = "Input gradient of a matrix product";
  let description = [{
    `dx = dy · Wᵀ` for `model.linear` (`W` the effective `[in, out]`
    weight). Input and weight gradients are separate ops so that pipeline
    schedules (zero-bubble) can place them apart.

    Example:

    ```mlir
    %dx = model.linear_grad_input %dy, %w transpose_w
        : (tensor<2x16x128xf32>, tensor<128x64xf32>) -> tensor<2x16x64xf32>
    ```

    Constraints:
    - LGI1: `dy` has rank at least 1 and the weight rank 2.
    - LGI2: `dy`'s last dimension is the weight's output dimension.
    - LGI3: the result is `dy`'s shape with the last dimension replaced by
      the weight's input dimension.
    - LGI4: `dy`, the weight and the result have one element type.
  }];
  let arguments = (ins Model_FloatTensor:$dy, Model_FloatTensor:$weight,
                       UnitAttr:$transpose_w);
  let results = (outs Model_FloatTensor:$dx);
  let assemblyFormat = [{
    $dy `,` $weight (`transpose_w` $transpose_w^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_LinearGradWeightOp : Model_ComputeOp<"linear_grad_weight", [],
                                               ["getMatmulFlops"]> {
  let summary = "Weight gradient of a matrix product";
  let description = [{
    `dW = xᵀ · dy` over all leading dimensions, in the weight's layout
    (`[out, in]` with `transpose_w`, else `[in, out]`).

    Example:

    ```mlir
    %dw = model.linear_grad_weight %x, %dy transpose_w
        : (tensor<2x16x64xf32>, tensor<2x16x128xf32>) -> tensor<128x64xf32>
    ```

    Constraints:
    - LGW1: `x` and `dy` have one rank, at least 1, and agree in every
      dimension but the last.
    - LGW2: the result is `[in, out]` (`[out, in]` with `transpose_w`),
      `in` and `out` the last dimensions of `x` and `dy`.
    - LGW3: `x`, `dy` and the result have one element type.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_FloatTensor:$dy,
                       UnitAttr:$transpose_w);
  let results = (outs Model_FloatTensor:$dweight);
  let assemblyFormat = [{
    $x `,` $dy (`transpose_w` $transpose_w^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_BiasGradOp : Model_ComputeOp<"bias_grad"> {
  let summary = "Gradient of a bias: the sum of dy over all but the last dim";
  let description = [{
    Example:

    ```mlir
    %db = model.bias_grad %dy : (tensor<2x16x128xf32>) -> tensor<128xf32>
    ```

    Constraints:
    - BG1: `dy` has rank at least 1 and the result is `[d]`, `d` its last
      dimension.
    - BG2: `dy` and the result have one element type.
  }];
  let arguments = (ins Model_FloatTensor:$dy);
  let results = (outs Model_FloatTensor:$dbias);
  let assemblyFormat = "$dy attr-dict `:` functional-type(operands, results)";
}

def Model_RmsNormGradOp : Model_ComputeOp<"rms_norm_grad"> {
  let summary = "Gradients of RMS normalisation";
  let description = [{
    The gradients of `model.rms_norm` with respect to `x` and the weight;
    the statistics are recomputed from `x`.

    Example:

    ```mlir
    %dx, %dw = model.rms_norm_grad %x, %w, %dy eps = 1.0e-05
        : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>)
        -> (tensor<2x16x64xf32>, tensor<64xf32>)
    ```

    Constraints:
    - RNG1: `x` has rank at least 1 and the weight is `[d]`, `d` its last
      dimension, of its element type.
    - RNG2: `dy` and `dx` have `x`'s type, `dweight` the weight's.
    - RNG3: `eps` is positive.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_FloatTensor:$weight,
                       Model_FloatTensor:$dy, F64Attr:$eps);
  let results = (outs Model_FloatTensor:$dx, Model_FloatTensor:$dweight);
  let assemblyFormat = [{
    $x `,` $weight `,` $dy `eps` `=` $eps attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_LayerNormGradOp : Model_ComputeOp<"layer_norm_grad"> {
  let summary = "Gradients of layer normalisation";
  let description = [{
    The gradients of `model.layer_norm` with respect to `x`, the weight and
    the bias (the bias itself is not needed); statistics recomputed from `x`.

    Example:

    ```mlir
    %dx, %dw, %db = model.layer_norm_grad %x, %w, %dy eps = 1.0e-05
        : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>)
        -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
    ```

    Constraints:
    - LNG1: `x` has rank at least 1 and the weight is `[d]`, `d` its last
      dimension, of its element type.
    - LNG2: `dy` and `dx` have `x`'s type, `dweight` and `dbias` the
      weight's.
    - LNG3: `eps` is positive.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_FloatTensor:$weight,
                       Model_FloatTensor:$dy, F64Attr:$eps);
  let results = (outs Model_FloatTensor:$dx, Model_FloatTensor:$dweight,
                      Model_FloatTensor:$dbias);
  let assemblyFormat = [{
    $x `,` $weight `,` $dy `eps` `=` $eps attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_RopeGradOp : Model_ComputeOp<"rope_grad"> {
  let summary = "Gradient of the rotary embedding: the inverse rotation";
  let description = [{
    `dx = R(-angle) · dy`, head by head, with the angles of `model.rope`
    (at `positions` when the forward has them).

    Example:

    ```mlir
    %dx = model.rope_grad %dy head_dim = 16 theta = 1.0e+04
        : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```

    Constraints: R1 to R5 of `model.rope`, with `dy` in place of `x`.
  }];
  let arguments = (ins Model_FloatTensor:$dy,
                       Optional<Model_IndexTensor>:$positions,
                       I64Attr:$head_dim, F64Attr:$theta);
  let results = (outs Model_FloatTensor:$dx);
  let assemblyFormat = [{
    $dy (`at` $positions^)? `head_dim` `=` $head_dim `theta` `=` $theta
    attr-dict `:` functional-type(operands, results)
  }];
}

def Model_AttentionGradOp : Model_ComputeOp<"attention_grad", [],
                                            ["getMatmulFlops"]> {
  let summary = "Gradients of attention with respect to q, k and v";
  let description = [{
    Flash-attention backward: from `q`, `k`, `v`, the forward output `out`
    and its gradient `dout`, the gradients of q, k and v (for grouped-query
    attention, `dk` and `dv` sum over the query heads of each group). The
    attributes are those of the forward `model.attention`.

    Example:

    ```mlir
    %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 4
        kv_heads = 2 scale = 0.25 causal
        : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>,
           tensor<2x16x64xf32>, tensor<2x16x64xf32>)
        -> (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
    ```

    Constraints:
    - AG1: A1 to A4 of `model.attention` hold for `q`, `k`, `v` and the
      attributes.
    - AG2: `out` and `dout` have `q`'s type, and `q`, `k`, `v` one element
      type.
    - AG3: `dq`, `dk` and `dv` have the types of `q`, `k` and `v`.
    - AG4: A6 of `model.attention` holds. With replicated kv heads, `dk`
      and `dv` hold only the contributions of this rank's query heads
      (partial sums over `head_axis`).
    - AG5: A7 of `model.attention` holds for `positions` (the forward's).
  }];
  let arguments = (ins Model_FloatTensor:$q, Model_FloatTensor:$k,
                       Model_FloatTensor:$v, Model_FloatTensor:$out,
                       Model_FloatTensor:$dout,
                       Optional<Model_IndexTensor>:$positions,
                       I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, F64Attr:$scale,
                       UnitAttr:$causal, UnitAttr:$alibi,
                       DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                       OptionalAttr<StrAttr>:$head_axis,
                       OptionalAttr<I64Attr>:$global_heads,
                       OptionalAttr<I64Attr>:$global_kv_heads);
  let results = (outs Model_FloatTensor:$dq, Model_FloatTensor:$dk,
                      Model_FloatTensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $out `,` $dout (`positions` $positions^)? `heads` `=`
    $num_heads `kv_heads` `=`
    $num_kv_heads `scale` `=` $scale (`causal` $causal^)? (`alibi` $alibi^)?
    (`head_axis` `=` $head_axis^)? (`global_heads` `=` $global_heads^)?
    (`global_kv_heads` `=` $global_kv_heads^)?
    attr-dict `:` functional-type(operands, results)
  }];
}

def Model_QkvConcatOp : Model_ComputeOp<"qkv_concat"> {
  let summary = "Packs q, k and v into a fused QKV tensor (qkv_split's inverse)";
  let description = [{
    The inverse of `model.qkv_split` with the same attributes; it is the
    gradient of `qkv_split`.

    Example:

    ```mlir
    %qkv = model.qkv_concat %dq, %dk, %dv heads = 4 kv_heads = 4 head_dim = 16
        layout = per_head
        : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
        -> tensor<2x16x192xf32>
    ```

    Constraints: QS1 to QS3 of `model.qkv_split`, with the operands and the
    result exchanged.
  }];
  let arguments = (ins Model_FloatTensor:$q, Model_FloatTensor:$k,
                       Model_FloatTensor:$v, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       Model_QkvLayoutAttr:$layout);
  let results = (outs Model_FloatTensor:$qkv);
  let assemblyFormat = [{
    $q `,` $k `,` $v `heads` `=` $num_heads `kv_heads` `=` $num_kv_heads
    `head_dim` `=` $head_dim `layout` `=` $layout attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_SwigluGradOp : Model_ComputeOp<"swiglu_grad"> {
  let summary = "Gradients of SwiGLU with respect to gate and up";
  let description = [{
    With `up`, the gradients of gate and up; without, of the packed
    `[gate | up]` operand, in one tensor of its type.

    Example:

    ```mlir
    %dg, %du = model.swiglu_grad %gate, %up, %dy
        : (tensor<2x16x176xf32>, tensor<2x16x176xf32>, tensor<2x16x176xf32>)
        -> (tensor<2x16x176xf32>, tensor<2x16x176xf32>)
    %dgu = model.swiglu_grad %gate_up, %dy
        : (tensor<2x16x352xf32>, tensor<2x16x176xf32>) -> tensor<2x16x352xf32>
    ```

    Constraints:
    - SWG1: with `up`, the operands and the results have one type.
    - SWG2: without, one result of `gate`'s type, and `dy` is that type with
      the last dimension halved.
  }];
  let arguments = (ins Model_FloatTensor:$gate,
                       Optional<Model_FloatTensor>:$up, Model_FloatTensor:$dy);
  let results = (outs Model_FloatTensor:$dgate,
                      Optional<Model_FloatTensor>:$dup);
  let assemblyFormat = [{
    operands attr-dict `:` functional-type(operands, results)
  }];
}

def Model_GeluGradOp : Model_ComputeOp<"gelu_grad"> {
  let summary = "Gradient of GeLU";
  let description = [{
    `dx = dy · gelu'(x)`, exact or with the tanh approximation.

    Example:

    ```mlir
    %dx = model.gelu_grad %x, %dy tanh
        : (tensor<2x16x256xf32>, tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
    ```

    Constraints:
    - GG1: `x`, `dy` and the result have one type.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_FloatTensor:$dy,
                       UnitAttr:$tanh);
  let results = (outs Model_FloatTensor:$dx);
  let assemblyFormat = [{
    $x `,` $dy (`tanh` $tanh^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Model_CrossEntropyGradOp : Model_ComputeOp<"cross_entropy_grad"> {
  let summary = "Gradient of the mean cross-entropy with respect to the logits";
  let description = [{
    `dlogits = dloss · (softmax(logits) - onehot(targets)) / n` on the `n`
    rows whose target is not `ignore_index`, zero on the others.

    Example:

    ```mlir
    %dl = model.cross_entropy_grad %logits, %targets, %dloss
        ignore_index = -100
        : (tensor<2x16x512xf32>, tensor<2x16xi32>, tensor<f32>)
        -> tensor<2x16x512xf32>
    ```

    Constraints:
    - CEG1: CE1 of `model.cross_entropy` holds for the logits and targets.
    - CEG2: `dloss` is the loss type of the logits (rank 0; f64 for f64
      logits, else f32).
    - CEG3: the result has the logits' type.
    - CEG4: `lse`, when present, is the logits' shape without the last
      dimension, of the loss's element type.
    - CEG5: `vocab_axis`, when present, is an axis of the module's mesh, and
      `lse` is present.

    With `lse` (the global log-sum-exp of `model.cross_entropy_finish`) the
    softmax is not recomputed; with `vocab_axis` the logits are this rank's
    vocabulary columns, as for `model.cross_entropy_partial`.
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_IndexTensor:$targets,
                       Model_FloatTensor:$dloss,
                       Optional<Model_FloatTensor>:$lse,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       OptionalAttr<StrAttr>:$vocab_axis);
  let results = (outs Model_FloatTensor:$dlogits);
  let assemblyFormat = [{
    $logits `,` $targets `,` $dloss (`lse` $lse^)? `ignore_index` `=`
    $ignore_index (`vocab_axis` `=` $vocab_axis^)? attr-dict
    `:` functional-type(operands, results)
  }];
}

#endif // BRAID_MODEL_GRAD_OPS_TD
