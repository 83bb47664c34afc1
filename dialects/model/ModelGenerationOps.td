//===- ModelGenerationOps.td - Inference ops of `model` ------*- tablegen -*-===//
//
// The ops of an inference graph (braidc --mode generate): attention over a
// key/value cache, rotary embeddings at given positions, the rows whose
// logits are drawn from, and the draw. They have no gradient: a training
// step never contains them. Every description ends with its Constraints,
// checked item by item in ModelGenerationOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_MODEL_GENERATION_OPS_TD
#define BRAID_MODEL_GENERATION_OPS_TD

def Model_RopeAtOp : Model_ComputeOp<"rope_at", [], [], "ROPE_AT"> {
  let summary = "Rotary position embedding at given positions";
  let description = [{
    `model.rope` with element `(b, t)` of `x` (`[batch, seq, heads ×
    head_dim]`) at position `positions[b, t]` instead of `t`: the positions
    of the tokens of a prompt chunk or of a decoded token in their
    sequences.

    Example:

    ```mlir
    %r = model.rope_at %q, %pos head_dim = 16 theta = 1.0e+04
        : (tensor<2x1x64xf32>, tensor<2x1xi32>) -> tensor<2x1x64xf32>
    ```

    Constraints:
    - RA1: `x` has rank 3 and `positions` is `[batch, seq]` of `x`.
    - RA2: `head_dim` is even, at least 2, and divides `x`'s last dimension.
    - RA3: `theta` is positive.
    - RA4: the result has `x`'s type.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_IndexTensor:$positions,
                       I64Attr:$head_dim, F64Attr:$theta);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $positions `head_dim` `=` $head_dim `theta` `=` $theta attr-dict
    `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$positions,
                                 "int64_t":$headDim, "double":$theta)>];
}

def Model_AttentionCachedOp : Model_ComputeOp<"attention_cached", [],
                                              ["getMatmulFlops"],
                                              "ATTENTION_CACHED"> {
  let summary = "Causal attention over a key/value cache, which it extends";
  let description = [{
    The attention of one step of generation. `k` and `v` (`[batch, seq,
    kv_heads × head_dim]`) are the new rows: row `(b, t)` goes into the
    caches (`[batch, cache_len, kv_heads × head_dim]`) at position
    `positions[b, t]`, giving `new_cache_k` and `new_cache_v`. Then query
    `(b, t)` attends, as `model.attention` does (heads packed, grouped-query,
    ALiBi), to the new caches' positions `0 .. positions[b, t]`. A prompt
    chunk (seq > 1) therefore attends to itself causally, and a decoded
    token (seq = 1) to everything before it.

    The cache results replace the cache operands: the lowering gives them
    the same buffers, updated in place.

    Example:

    ```mlir
    %o, %ck2, %cv2 = model.attention_cached %q, %k, %v, %pos, %ck, %cv
        heads = 4 kv_heads = 2 scale = 0.25
        : (tensor<2x1x64xf32>, tensor<2x1x32xf32>, tensor<2x1x32xf32>,
           tensor<2x1xi32>, tensor<2x128x32xf32>, tensor<2x128x32xf32>)
        -> (tensor<2x1x64xf32>, tensor<2x128x32xf32>, tensor<2x128x32xf32>)
    ```

    Constraints:
    - AC1: `q`, `k`, `v` and the caches have rank 3 and one batch size; `k`
      and `v` have `q`'s sequence length; `positions` is `[batch, seq]`.
    - AC2: `num_heads` and `num_kv_heads` are at least 1 and `num_kv_heads`
      divides `num_heads`.
    - AC3: `num_heads` divides `q`'s last dimension; `k`, `v` and the caches
      have `num_kv_heads × head_size` columns.
    - AC4: the caches have one type, at least `seq` positions, and `q`'s
      element type.
    - AC5: `scale` is positive.
    - AC6: the results have the types of `q` and of the caches.
    - AC7: `head_axis`, `global_heads` and `global_kv_heads` are as
      `model.attention`'s (A6): a slice of the heads under tensor
      parallelism, the caches holding the rank's kv heads (all of them when
      they are replicated).
  }];
  let arguments = (ins Model_FloatTensor:$q, Model_FloatTensor:$k,
                       Model_FloatTensor:$v, Model_IndexTensor:$positions,
                       Model_FloatTensor:$cache_k, Model_FloatTensor:$cache_v,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       F64Attr:$scale, UnitAttr:$alibi,
                       OptionalAttr<StrAttr>:$head_axis,
                       OptionalAttr<I64Attr>:$global_heads,
                       OptionalAttr<I64Attr>:$global_kv_heads);
  let results = (outs Model_FloatTensor:$result,
                      Model_FloatTensor:$new_cache_k,
                      Model_FloatTensor:$new_cache_v);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $positions `,` $cache_k `,` $cache_v
    `heads` `=` $num_heads `kv_heads` `=` $num_kv_heads `scale` `=` $scale
    (`alibi` $alibi^)? (`head_axis` `=` $head_axis^)?
    (`global_heads` `=` $global_heads^)?
    (`global_kv_heads` `=` $global_kv_heads^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$q, "::mlir::Value":$k,
      "::mlir::Value":$v, "::mlir::Value":$positions, "::mlir::Value":$cacheK,
      "::mlir::Value":$cacheV, "int64_t":$numHeads, "int64_t":$numKvHeads,
      "double":$scale, "bool":$alibi)>];
}

def Model_TakeRowsOp : Model_ComputeOp<"take_rows", [], [], "TAKE_ROWS"> {
  let summary = "One row of each sequence";
  let description = [{
    `result[b, 0, :] = x[b, index[b], :]`: the hidden state of each
    sequence's last prompt token, whose logits give its first new token.

    Example:

    ```mlir
    %h = model.take_rows %x[%last]
        : (tensor<2x16x64xf32>, tensor<2xi32>) -> tensor<2x1x64xf32>
    ```

    Constraints:
    - TR1: `x` has rank 3 and `index` is `[batch]` of `x`.
    - TR2: the result is `[batch, 1, hidden]` of `x`'s element type.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_IndexTensor:$index);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x `[` $index `]` attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$index)>];
}

def Model_SampleOp : Model_ComputeOp<"sample"> {
  let summary = "The next token of each sequence, drawn from its logits";
  let description = [{
    Per sequence `b`, a token id from `logits[b, 0, :vocab_size]` (the
    columns past `vocab_size` are the vocabulary's padding): the argmax when
    `settings[0]` (the temperature) is 0, else a draw from the softmax of
    the logits over the temperature, truncated to the `settings[1]` most
    likely ids (0: no limit) and then to the smallest set whose probability
    reaches `settings[2]` (1: no limit), as Hugging Face's logits warpers
    do. The draw is Philox keyed by `seed` (low and high 32 bits) at
    `counter[b]` (the position the token will take), so a seed gives the
    same tokens in every layout.

    Example:

    ```mlir
    %ids = model.sample %logits, %settings, %seed, %counter vocab_size = 97
        : (tensor<2x1x128xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>)
        -> tensor<2xi32>
    ```

    With `candidates` (`[batch, vocab]` of i32), the columns of `logits`
    are candidates rather than the vocabulary: column `i` of row `b` is the
    token `candidates[b, i]`, which ties are ordered by and the result
    takes, and `vocab_size` is the whole vocabulary's size (the scale of
    `top_k`'s limit and of the draw's weights). `model-shard` draws so
    under tensor parallelism from every rank's best tokens
    (`model.top_candidates`, gathered): the same id as the whole row for
    greedy decoding and for `top_k` at most the ranks' candidate count.

    ```mlir
    %ids = model.sample %values, %settings, %seed, %counter
        candidates %cand vocab_size = 97
        : (tensor<2x1x16xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>,
           tensor<2x16xi32>) -> tensor<2xi32>
    ```

    Constraints:
    - S1: `logits` is `[batch, 1, vocab]`; `settings` is `[3]` of f32;
      `seed` is `[2]`; `counter` is `[batch]`.
    - S2: `vocab_size` is in `[1, vocab]`, or with `candidates` at least 1.
    - S3: the result is `[batch]` of i32.
    - S4: `candidates` is `[batch, vocab]`.
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_FloatTensor:$settings,
                       Model_IndexTensor:$seed, Model_IndexTensor:$counter,
                       Optional<Model_IndexTensor>:$candidate_ids,
                       I64Attr:$vocab_size);
  let results = (outs Model_IndexTensor:$ids);
  let assemblyFormat = [{
    $logits `,` $settings `,` $seed `,` $counter
    (`candidates` $candidate_ids^)? `vocab_size` `=` $vocab_size
    attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$logits,
      "::mlir::Value":$settings, "::mlir::Value":$seed,
      "::mlir::Value":$counter, "int64_t":$vocabSize)>];
}

def Model_TopLogprobsOp : Model_ComputeOp<"top_logprobs", [], [],
                                          "TOP_LOGPROBS"> {
  let summary = "Each sequence's most likely next tokens, for beam search";
  let description = [{
    Per sequence `b`, the `k` ids with the largest log-probability under
    `log_softmax(logits[b, 0, :vocab_size])`, most likely first (ties: the
    lower id), and those log-probabilities (f32). Beam search extends its
    beams from them: the best candidates over every beam are among each
    beam's best.

    Example:

    ```mlir
    %lp, %ids = model.top_logprobs %logits k = 8 vocab_size = 97
        : (tensor<4x1x128xf32>) -> (tensor<4x8xf32>, tensor<4x8xi32>)
    ```

    With `candidates (%ids, %lse)`, the columns of `logits` are candidates,
    as `model.sample`'s: column `i` of row `b` is the token `ids[b, i]`
    (`[batch, vocab]` of i32), and the normaliser is the log-sum-exp of the
    row's values of `lse` (`[batch, 1, ranks]`, the logits' element type:
    each rank's log-sum-exp over its columns of the vocabulary).

    Constraints:
    - TL1: `logits` is `[batch, 1, vocab]`.
    - TL2: `k` is in `[1, vocab_size]` and `vocab_size` in `[1, vocab]`;
      with candidates, `k` is in `[1, vocab]` and `vocab_size` at least 1.
    - TL3: the results are `[batch, k]` of f32 and of i32.
    - TL4: `candidates` are none, or `[batch, vocab]` of i32 and `[batch,
      1, ranks]` of the logits' element type.
  }];
  let arguments = (ins Model_FloatTensor:$logits,
                       Variadic<AnyRankedTensor>:$candidates, I64Attr:$k,
                       I64Attr:$vocab_size);
  let results = (outs Model_FloatTensor:$logprobs, Model_IndexTensor:$ids);
  let assemblyFormat = [{
    $logits (`candidates` `(` $candidates^ `)`)? `k` `=` $k `vocab_size` `=`
    $vocab_size attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$logits, "int64_t":$k,
                                 "int64_t":$vocabSize)>];
}

def Model_TokenLogprobsOp : Model_ComputeOp<"token_logprobs", [], [],
                                            "TOKEN_LOGPROBS"> {
  let summary = "Each position's log-probability of a given next token";
  let description = [{
    Scoring (`braid eval`'s log-likelihoods): per row `(b, t)` of `logits`
    (`[batch, seq, vocab]`), `logprobs[b, t] = log_softmax(logits[b, t,
    :vocab_size])[targets[b, t]]` (f32; `vocab_size` the model's
    vocabulary, the logits' columns past it padding) and `greedy[b, t]` 1 when
    `targets[b, t]` is the row's most likely id (the first of the largest,
    as `model.top_logprobs` ranks them), else 0 (i32). A negative target
    (-100) asks nothing: both are 0 there.

    Example:

    ```mlir
    %lp, %greedy = model.token_logprobs %logits, %targets vocab_size = 97
        : (tensor<4x16x128xf32>, tensor<4x16xi32>)
        -> (tensor<4x16xf32>, tensor<4x16xi32>)
    ```

    Constraints:
    - TK1: `logits` has rank 3 and `targets` is `[batch, seq]` of it.
    - TK2: `vocab_size` is in `[1, vocab]`.
    - TK3: the results are `[batch, seq]` of f32 and of i32.
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_IndexTensor:$targets,
                       I64Attr:$vocab_size);
  let results = (outs Model_FloatTensor:$logprobs, Model_IndexTensor:$greedy);
  let assemblyFormat = [{
    $logits `,` $targets `vocab_size` `=` $vocab_size attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$logits,
                                 "::mlir::Value":$targets,
                                 "int64_t":$vocabSize)>];
}

def Model_TokenLogprobsPartialOp
    : Model_ComputeOp<"token_logprobs_partial", [], [],
                      "TOKEN_LOGPROBS_PARTIAL"> {
  let summary = "One rank's share of model.token_logprobs over its slice";
  let description = [{
    Scoring's log-probabilities under tensor parallelism, whose output layer
    leaves each rank the logits of its slice of the vocabulary (`[start,
    start + V)`, `start` = `c·V` on rank `c` of `vocab_axis`): per row `(b,
    t)`, over the slice's ids below `vocab_size`, `partial[b, t, 0]` their
    largest logit `m` (the first most likely id's, as `model.token_logprobs`
    ranks them), `[1]` `sum exp(logits - m)`, `[2]` the target's logit where
    the target is in the slice, else 0, and `[3]` that first most likely id;
    with no such id, -inf, 0, 0 and -1. The ranks' partials are then
    gathered (`model.all_gather` along dimension 2) and
    `model.token_logprobs_finish` combines them: the logits themselves never
    travel.

    Example:

    ```mlir
    %p = model.token_logprobs_partial %logits, %targets vocab_size = 97
        vocab_axis = "tp"
        : (tensor<4x16x64xf32>, tensor<4x16xi32>) -> tensor<4x16x4xf32>
    ```

    Constraints:
    - TKP1: `logits` has rank 3 and `targets` is `[batch, seq]` of it.
    - TKP2: `vocab_size` is in `[1, 2^24]` (ids travel in the partials).
    - TKP3: the result is `[batch, seq, 4]` of f32 (f64 for f64 logits).
    - TKP4: `vocab_axis`, when present, is an axis of the module's mesh.
  }];
  let arguments = (ins Model_FloatTensor:$logits, Model_IndexTensor:$targets,
                       I64Attr:$vocab_size, OptionalAttr<StrAttr>:$vocab_axis);
  let results = (outs Model_FloatTensor:$partial);
  let assemblyFormat = [{
    $logits `,` $targets `vocab_size` `=` $vocab_size
    (`vocab_axis` `=` $vocab_axis^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Model_TokenLogprobsFinishOp
    : Model_ComputeOp<"token_logprobs_finish", [], [],
                      "TOKEN_LOGPROBS_FINISH"> {
  let summary = "model.token_logprobs from the slices' gathered partials";
  let description = [{
    `gathered[b, t, 4·g + i]` is slice `g`'s `partial[b, t, i]` of
    `model.token_logprobs_partial`, the slices in the vocabulary's order:
    `logprobs[b, t]` is the target's logit minus the log-sum-exp of the
    slices' `(m, sum)`, `greedy[b, t]` 1 when the target is the most likely
    id of the first slice whose `m` ranks highest; both 0 where the target
    is negative. The same results as `model.token_logprobs` on the whole
    logits (up to the partials' rounding to f32).

    Example:

    ```mlir
    %lp, %greedy = model.token_logprobs_finish %gathered, %targets
        : (tensor<4x16x8xf32>, tensor<4x16xi32>)
        -> (tensor<4x16xf32>, tensor<4x16xi32>)
    ```

    Constraints:
    - TKF1: `gathered` is `[batch, seq, 4·G]` of f32 or f64, G >= 1, and
      `targets` is `[batch, seq]` of it.
    - TKF2: the results are `[batch, seq]` of f32 and of i32.
  }];
  let arguments = (ins Model_FloatTensor:$gathered,
                       Model_IndexTensor:$targets);
  let results = (outs Model_FloatTensor:$logprobs, Model_IndexTensor:$greedy);
  let assemblyFormat = [{
    $gathered `,` $targets attr-dict `:` functional-type(operands, results)
  }];
}

def Model_TopCandidatesOp : Model_ComputeOp<"top_candidates", [], [],
                                            "TOP_CANDIDATES"> {
  let summary = "A rank's best tokens of its slice of the vocabulary";
  let description = [{
    Per sequence `b`, the `k` best tokens of `logits[b, 0, :]` by
    descending logit, equal logits by ascending id, as `model.sample` and
    `model.top_logprobs` rank them: `values[b, 0, i]` their logits
    (unchanged) and `ids[b, i]` their ids; and `lse[b, 0, 0]`, the
    log-sum-exp of the row's valid logits. The ids are the columns' own,
    or with `vocab_axis` (set by `model-shard`) the rank's columns of the
    vocabulary, whose first id is the rank's coordinate along that axis
    times the columns per rank. Ids at or above
    `vocab_size` are padding, never a candidate; slots no valid column
    fills get -infinity and the id 2^31 - 1.

    Gathered over the ranks, the candidates hold the whole vocabulary's `k`
    best tokens and `lse` its normaliser: what `model.sample` and
    `model.top_logprobs` with `candidates` draw from instead of the whole
    logits.

    Example:

    ```mlir
    %v, %ids, %lse = model.top_candidates %logits k = 16 vocab_size = 97
        : (tensor<2x1x64xf32>)
        -> (tensor<2x1x16xf32>, tensor<2x16xi32>, tensor<2x1x1xf32>)
    ```

    Constraints:
    - TC1: `logits` is `[batch, 1, vocab]`.
    - TC2: `k` and `vocab_size` are at least 1.
    - TC3: `values` is `[batch, 1, k]` and `lse` `[batch, 1, 1]`, of the
      logits' element type; `ids` is `[batch, k]` of i32.
    - TC4: `vocab_axis`, when present, is an axis of the module's mesh.
  }];
  let arguments = (ins Model_FloatTensor:$logits, I64Attr:$k,
                       I64Attr:$vocab_size, OptionalAttr<StrAttr>:$vocab_axis);
  let results = (outs Model_FloatTensor:$values, Model_IndexTensor:$ids,
                      Model_FloatTensor:$lse);
  let assemblyFormat = [{
    $logits `k` `=` $k `vocab_size` `=` $vocab_size
    (`vocab_axis` `=` $vocab_axis^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$logits, "int64_t":$k,
                                 "int64_t":$vocabSize)>];
}

def Model_ReorderRowsOp : Model_ComputeOp<"reorder_rows", [], [],
                                          "REORDER_ROWS"> {
  let summary = "Rows gathered by parent: beam search's cache reordering";
  let description = [{
    `result[b] = x[parents[b]]` for every row `b` of the leading dimension:
    after a step of beam search each beam continues from a parent beam,
    whose keys and values it takes. The lowering updates `x`'s buffer in
    place (a cache).

    Example:

    ```mlir
    %c2 = model.reorder_rows %cache[%parents]
        : (tensor<4x64x32xf32>, tensor<4xi32>) -> tensor<4x64x32xf32>
    ```

    Constraints:
    - RR1: `x` has rank at least 1 and `parents` is `[rows]` of `x`.
    - RR2: the result has `x`'s type.
  }];
  let arguments = (ins Model_FloatTensor:$x, Model_IndexTensor:$parents);
  let results = (outs Model_FloatTensor:$result);
  let assemblyFormat = [{
    $x `[` $parents `]` attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$parents)>];
}

#endif // BRAID_MODEL_GENERATION_OPS_TD
