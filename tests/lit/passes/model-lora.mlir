// RUN: braid-opt %s -split-input-file -model-lora -verify-diagnostics | FileCheck %s
// RUN: braid-opt %s -split-input-file -model-lora -model-autodiff -verify-diagnostics | FileCheck %s --check-prefix=GRAD

// A one-layer LLaMA-style model (embedding, a layer of q_proj, v_proj with a
// bias and o_proj, the final norm, an untied lm_head) with rank 2 and alpha 8
// (scale alpha / rank = 4, exact in binary), no dropout, targets q_proj (a
// short name) and self_attn.v_proj (a dotted one: PEFT's rule matches the
// end of the path after a dot), and lm_head trained whole.
// Tests the parameters: each target's A [r, in] and B [out, r] right after
// its base weight (v_proj's before its bias), named after the module; every
// other parameter marked model.frozen (v_proj's bias too) but lm_head's; the
// data inputs unmarked.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<8x4xf32> {model.frozen, model.param = "model.embed_tokens.weight"}, %[[WQ:[^:]+]]: tensor<4x4xf32> {model.frozen, model.param = "model.layers.0.self_attn.q_proj.weight"}, %[[QA:[^:]+]]: tensor<2x4xf32> {model.param = "model.layers.0.self_attn.q_proj.lora_A.weight"}, %[[QB:[^:]+]]: tensor<4x2xf32> {model.param = "model.layers.0.self_attn.q_proj.lora_B.weight"}, %[[WV:[^:]+]]: tensor<2x4xf32> {model.frozen, model.param = "model.layers.0.self_attn.v_proj.weight"}, %[[VA:[^:]+]]: tensor<2x4xf32> {model.param = "model.layers.0.self_attn.v_proj.lora_A.weight"}, %[[VB:[^:]+]]: tensor<2x2xf32> {model.param = "model.layers.0.self_attn.v_proj.lora_B.weight"}, %[[BV:[^:]+]]: tensor<2xf32> {model.frozen, model.param = "model.layers.0.self_attn.v_proj.bias"}, %[[WO:[^:]+]]: tensor<4x2xf32> {model.frozen, model.param = "model.layers.0.self_attn.o_proj.weight"}, %[[G:[^:]+]]: tensor<4xf32> {model.frozen, model.param = "model.norm.weight"}, %[[HEAD:[^:]+]]: tensor<8x4xf32> {model.param = "lm_head.weight"}, %[[TOK:[^:]+]]: tensor<1x2xi32> {model.input = "tokens"}, %[[TGT:[^:]+]]: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32>
// Tests the layer: the adapters become its last operands and block
// arguments, in parameter order (q_proj's, then v_proj's).
// CHECK-NEXT: %[[E:.+]] = model.embedding %[[WTE]][%[[TOK]]]
// CHECK-NEXT: %[[H:.+]] = model.layer 0(%[[E]], %[[WQ]], %[[WV]], %[[BV]], %[[WO]], %[[QA]], %[[QB]], %[[VA]], %[[VB]]) : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>, tensor<2xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x2xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: ^bb0(%[[X:[^:]+]]: tensor<1x2x4xf32>, %[[LWQ:[^:]+]]: tensor<4x4xf32>, %[[LWV:[^:]+]]: tensor<2x4xf32>, %[[LBV:[^:]+]]: tensor<2xf32>, %[[LWO:[^:]+]]: tensor<4x2xf32>, %[[LQA:[^:]+]]: tensor<2x4xf32>, %[[LQB:[^:]+]]: tensor<4x2xf32>, %[[LVA:[^:]+]]: tensor<2x4xf32>, %[[LVB:[^:]+]]: tensor<2x2xf32>):
// Tests each adapter: right after its base linear, x through A (the down
// projection, "A"), scaled by alpha / rank, through B (the up projection,
// "B"), added to the base's output ("sum"), which takes the base's place for
// its users (o_proj reads v_proj's sum, the residual q_proj's).
// CHECK-NEXT: %[[Q:.+]] = model.linear %[[X]], %[[LWQ]] transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[QD:.+]] = model.linear %[[X]], %[[LQA]] transpose_w {model.lora = "A"} : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2xf32>
// CHECK-NEXT: %[[QS:.+]] = model.scale %[[QD]] scale = 4.000000e+00 : (tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
// CHECK-NEXT: %[[QU:.+]] = model.linear %[[QS]], %[[LQB]] transpose_w {model.lora = "B"} : (tensor<1x2x2xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[QSUM:.+]] = model.add %[[Q]], %[[QU]] {model.lora = "sum"} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[V:.+]] = model.linear %[[X]], %[[LWV]], %[[LBV]] transpose_w : (tensor<1x2x4xf32>, tensor<2x4xf32>, tensor<2xf32>) -> tensor<1x2x2xf32>
// CHECK-NEXT: %[[VD:.+]] = model.linear %[[X]], %[[LVA]] transpose_w {model.lora = "A"} : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2xf32>
// CHECK-NEXT: %[[VS:.+]] = model.scale %[[VD]] scale = 4.000000e+00 : (tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
// CHECK-NEXT: %[[VU:.+]] = model.linear %[[VS]], %[[LVB]] transpose_w {model.lora = "B"} : (tensor<1x2x2xf32>, tensor<2x2xf32>) -> tensor<1x2x2xf32>
// CHECK-NEXT: %[[VSUM:.+]] = model.add %[[V]], %[[VU]] {model.lora = "sum"} : (tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2xf32>
// CHECK-NEXT: %[[O:.+]] = model.linear %[[VSUM]], %[[LWO]] transpose_w : (tensor<1x2x2xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[S:.+]] = model.add %[[QSUM]], %[[O]] : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[R:.+]] = model.add %[[X]], %[[S]] :
// CHECK-NEXT: model.yield %[[R]] : tensor<1x2x4xf32>
// CHECK-NEXT: }
// Tests that what is outside the layer and not targeted is left as it was.
// CHECK-NEXT: %[[N:.+]] = model.rms_norm %[[H]], %[[G]]
// CHECK-NEXT: %[[LOGITS:.+]] = model.linear %[[N]], %[[HEAD]] transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
// CHECK-NEXT: %[[LOSS:.+]] = model.cross_entropy %[[LOGITS]], %[[TGT]]
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// Tests that the result differentiates to gradients of the adapters and of
// the module to save only, in parameter order.
// GRAD-LABEL: func.func @train_step(
// GRAD-SAME: -> (tensor<f32>, tensor<2x4xf32> {model.grad = "model.layers.0.self_attn.q_proj.lora_A.weight"}, tensor<4x2xf32> {model.grad = "model.layers.0.self_attn.q_proj.lora_B.weight"}, tensor<2x4xf32> {model.grad = "model.layers.0.self_attn.v_proj.lora_A.weight"}, tensor<2x2xf32> {model.grad = "model.layers.0.self_attn.v_proj.lora_B.weight"}, tensor<8x4xf32> {model.grad = "lm_head.weight"})
module attributes {model.lora = {rank = 2 : i64, alpha = 8.0 : f64, dropout = 0.0 : f64, target_modules = ["q_proj", "self_attn.v_proj"], modules_to_save = ["lm_head"]}} {
  func.func @forward(%wte: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"},
                     %wq: tensor<4x4xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
                     %wv: tensor<2x4xf32> {model.param = "model.layers.0.self_attn.v_proj.weight"},
                     %bv: tensor<2xf32> {model.param = "model.layers.0.self_attn.v_proj.bias"},
                     %wo: tensor<4x2xf32> {model.param = "model.layers.0.self_attn.o_proj.weight"},
                     %g: tensor<4xf32> {model.param = "model.norm.weight"},
                     %head: tensor<8x4xf32> {model.param = "lm_head.weight"},
                     %tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h = model.layer 0 (%e, %wq, %wv, %bv, %wo) : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>, tensor<2xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>, %q_w: tensor<4x4xf32>, %v_w: tensor<2x4xf32>, %v_b: tensor<2xf32>, %o_w: tensor<4x2xf32>):
      %q = model.linear %x, %q_w transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
      %v = model.linear %x, %v_w, %v_b transpose_w : (tensor<1x2x4xf32>, tensor<2x4xf32>, tensor<2xf32>) -> tensor<1x2x2xf32>
      %o = model.linear %v, %o_w transpose_w : (tensor<1x2x2xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32>
      %s = model.add %q, %o : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %s : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %n = model.rms_norm %h, %g eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
    %logits = model.linear %n, %head transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A two-layer GPT-2-style model: Conv1D projections (weight [in, out], no
// transpose_w), c_attn 4 -> 12 and c_proj 12 -> 4, a tied output layer, and
// dropouts of rng_id 0 (embedding), 1 and 3 (the layers: ids need not be
// contiguous). Rank 2, alpha 1 (scale 0.5), dropout 0.25, target c_attn.
// Tests that the adapters keep nn.Linear's layout whatever the base's: A
// [r, in] = [2, 4] and B [out, r] = [12, 2], read with transpose_w.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<8x4xf32> {model.frozen, model.param = "transformer.wte.weight"}, %[[A0W:[^:]+]]: tensor<4x12xf32> {model.frozen, model.param = "transformer.h.0.attn.c_attn.weight"}, %[[A0A:[^:]+]]: tensor<2x4xf32> {model.param = "transformer.h.0.attn.c_attn.lora_A.weight"}, %[[A0B:[^:]+]]: tensor<12x2xf32> {model.param = "transformer.h.0.attn.c_attn.lora_B.weight"}, %[[P0W:[^:]+]]: tensor<12x4xf32> {model.frozen, model.param = "transformer.h.0.attn.c_proj.weight"}, %[[A1W:[^:]+]]: tensor<4x12xf32> {model.frozen, model.param = "transformer.h.1.attn.c_attn.weight"}, %[[A1A:[^:]+]]: tensor<2x4xf32> {model.param = "transformer.h.1.attn.c_attn.lora_A.weight"}, %[[A1B:[^:]+]]: tensor<12x2xf32> {model.param = "transformer.h.1.attn.c_attn.lora_B.weight"}, %[[P1W:[^:]+]]: tensor<12x4xf32> {model.frozen, model.param = "transformer.h.1.attn.c_proj.weight"},
// CHECK-NEXT: %[[E:.+]] = model.embedding
// CHECK-NEXT: model.dropout %[[E]] rate = 1.000000e-01 {rng_id = 0 : i64}
// Tests that each layer gets its own adapter as operands, and that the
// adapter's dropout reads the layer's input (the base linear reads it
// undropped) and takes the next rng_id after the model's largest, one per
// adapter in parameter order: 4 in layer 0, 5 in layer 1.
// CHECK-NEXT: %[[H0:.+]] = model.layer 0(%{{[^,]+}}, %[[A0W]], %[[P0W]], %[[A0A]], %[[A0B]]) :
// CHECK-NEXT: ^bb0(%[[X0:[^:]+]]: tensor<1x2x4xf32>, %[[LA0W:[^:]+]]: tensor<4x12xf32>, %{{[^:]+}}: tensor<12x4xf32>, %[[LA0A:[^:]+]]: tensor<2x4xf32>, %[[LA0B:[^:]+]]: tensor<12x2xf32>):
// CHECK-NEXT: %[[C0:.+]] = model.linear %[[X0]], %[[LA0W]] : (tensor<1x2x4xf32>, tensor<4x12xf32>) -> tensor<1x2x12xf32>
// CHECK-NEXT: %[[D0:.+]] = model.dropout %[[X0]] rate = 2.500000e-01 {rng_id = 4 : i64} : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[DN0:.+]] = model.linear %[[D0]], %[[LA0A]] transpose_w {model.lora = "A"} : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2xf32>
// CHECK-NEXT: %[[S0:.+]] = model.scale %[[DN0]] scale = 5.000000e-01 :
// CHECK-NEXT: %[[UP0:.+]] = model.linear %[[S0]], %[[LA0B]] transpose_w {model.lora = "B"} : (tensor<1x2x2xf32>, tensor<12x2xf32>) -> tensor<1x2x12xf32>
// CHECK-NEXT: %[[SUM0:.+]] = model.add %[[C0]], %[[UP0]] {model.lora = "sum"} :
// CHECK-NEXT: model.linear %[[SUM0]], %{{[^ ]+}} : (tensor<1x2x12xf32>, tensor<12x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: model.dropout %{{[^ ]+}} rate = 1.000000e-01 {rng_id = 1 : i64}
// CHECK: model.layer 1(%[[H0]], %[[A1W]], %[[P1W]], %[[A1A]], %[[A1B]]) :
// CHECK-NEXT: ^bb0(%[[X1:[^:]+]]: tensor<1x2x4xf32>, %[[LA1W:[^:]+]]: tensor<4x12xf32>, %{{[^:]+}}: tensor<12x4xf32>, %[[LA1A:[^:]+]]: tensor<2x4xf32>, %[[LA1B:[^:]+]]: tensor<12x2xf32>):
// CHECK-NEXT: %[[C1:.+]] = model.linear %[[X1]], %[[LA1W]] :
// CHECK-NEXT: %[[D1:.+]] = model.dropout %[[X1]] rate = 2.500000e-01 {rng_id = 5 : i64}
// CHECK-NEXT: %[[DN1:.+]] = model.linear %[[D1]], %[[LA1A]] transpose_w {model.lora = "A"}
// CHECK-NEXT: %[[S1:.+]] = model.scale %[[DN1]] scale = 5.000000e-01 :
// CHECK-NEXT: %[[UP1:.+]] = model.linear %[[S1]], %[[LA1B]] transpose_w {model.lora = "B"}
// CHECK-NEXT: %[[SUM1:.+]] = model.add %[[C1]], %[[UP1]] {model.lora = "sum"}
// CHECK-NEXT: model.linear %[[SUM1]],
// CHECK-NEXT: model.dropout %{{[^ ]+}} rate = 1.000000e-01 {rng_id = 3 : i64}
// Tests that the tied output layer, whose weight is not "<module>.weight"
// of a target, gets no adapter.
// CHECK: model.linear %{{[^,]+}}, %[[WTE]] transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
// CHECK-NEXT: model.cross_entropy
// GRAD-LABEL: func.func @train_step(
// GRAD-SAME: -> (tensor<f32>, tensor<2x4xf32> {model.grad = "transformer.h.0.attn.c_attn.lora_A.weight"}, tensor<12x2xf32> {model.grad = "transformer.h.0.attn.c_attn.lora_B.weight"}, tensor<2x4xf32> {model.grad = "transformer.h.1.attn.c_attn.lora_A.weight"}, tensor<12x2xf32> {model.grad = "transformer.h.1.attn.c_attn.lora_B.weight"})
module attributes {model.lora = {rank = 2 : i64, alpha = 1.0 : f64, dropout = 0.25 : f64, target_modules = ["c_attn"], modules_to_save = []}} {
  func.func @forward(%wte: tensor<8x4xf32> {model.param = "transformer.wte.weight"},
                     %a0: tensor<4x12xf32> {model.param = "transformer.h.0.attn.c_attn.weight"},
                     %p0: tensor<12x4xf32> {model.param = "transformer.h.0.attn.c_proj.weight"},
                     %a1: tensor<4x12xf32> {model.param = "transformer.h.1.attn.c_attn.weight"},
                     %p1: tensor<12x4xf32> {model.param = "transformer.h.1.attn.c_proj.weight"},
                     %tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %ed = model.dropout %e rate = 0.1 {rng_id = 0 : i64} : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    %h0 = model.layer 0 (%ed, %a0, %p0) : (tensor<1x2x4xf32>, tensor<4x12xf32>, tensor<12x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>, %wa: tensor<4x12xf32>, %wp: tensor<12x4xf32>):
      %c = model.linear %x, %wa : (tensor<1x2x4xf32>, tensor<4x12xf32>) -> tensor<1x2x12xf32>
      %p = model.linear %c, %wp : (tensor<1x2x12xf32>, tensor<12x4xf32>) -> tensor<1x2x4xf32>
      %d = model.dropout %p rate = 0.1 {rng_id = 1 : i64} : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %d : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h1 = model.layer 1 (%h0, %a1, %p1) : (tensor<1x2x4xf32>, tensor<4x12xf32>, tensor<12x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>, %wa: tensor<4x12xf32>, %wp: tensor<12x4xf32>):
      %c = model.linear %x, %wa : (tensor<1x2x4xf32>, tensor<4x12xf32>) -> tensor<1x2x12xf32>
      %p = model.linear %c, %wp : (tensor<1x2x12xf32>, tensor<12x4xf32>) -> tensor<1x2x4xf32>
      %d = model.dropout %p rate = 0.1 {rng_id = 3 : i64} : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %d : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %logits = model.linear %h1, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests a target outside any layer (lm_head, data inputs first): the
// adapter reads the new arguments directly. The rank may equal the
// target's smaller dimension (4 = min(4 inputs, 8 outputs)): A [4, 4],
// B [8, 4].
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[TOK:[^:]+]]: tensor<1x2xi32> {model.input = "tokens"}, %[[TGT:[^:]+]]: tensor<1x2xi32> {model.input = "targets"}, %[[WTE:[^:]+]]: tensor<8x4xf32> {model.frozen, model.param = "model.embed_tokens.weight"}, %[[HEAD:[^:]+]]: tensor<8x4xf32> {model.frozen, model.param = "lm_head.weight"}, %[[A:[^:]+]]: tensor<4x4xf32> {model.param = "lm_head.lora_A.weight"}, %[[B:[^:]+]]: tensor<8x4xf32> {model.param = "lm_head.lora_B.weight"}) -> tensor<f32>
// CHECK-NEXT: %[[E:.+]] = model.embedding %[[WTE]][%[[TOK]]]
// CHECK-NEXT: %[[Y:.+]] = model.linear %[[E]], %[[HEAD]] transpose_w :
// CHECK-NEXT: %[[D:.+]] = model.linear %[[E]], %[[A]] transpose_w {model.lora = "A"} : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[S:.+]] = model.scale %[[D]] scale = 4.000000e+00 :
// CHECK-NEXT: %[[U:.+]] = model.linear %[[S]], %[[B]] transpose_w {model.lora = "B"} : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
// CHECK-NEXT: %[[SUM:.+]] = model.add %[[Y]], %[[U]] {model.lora = "sum"} :
// CHECK-NEXT: %[[LOSS:.+]] = model.cross_entropy %[[SUM]], %[[TGT]]
// CHECK-NEXT: return %[[LOSS]]
// GRAD-LABEL: func.func @train_step(
// GRAD-SAME: -> (tensor<f32>, tensor<4x4xf32> {model.grad = "lm_head.lora_A.weight"}, tensor<8x4xf32> {model.grad = "lm_head.lora_B.weight"})
module attributes {model.lora = {rank = 4 : i64, alpha = 16.0 : f64, dropout = 0.0 : f64, target_modules = ["lm_head"], modules_to_save = []}} {
  func.func @forward(%tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"},
                     %wte: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"},
                     %head: tensor<8x4xf32> {model.param = "lm_head.weight"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %logits = model.linear %e, %head transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that a module without model.lora is left unchanged: no adapter,
// nothing frozen (the arguments' attributes and every op are matched
// whole).
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"}, %[[WQ:[^:]+]]: tensor<4x4xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"}, %[[TOK:[^:]+]]: tensor<1x2xi32> {model.input = "tokens"}, %[[TGT:[^:]+]]: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32>
// CHECK-NEXT: %[[E:.+]] = model.embedding %[[WTE]][%[[TOK]]]
// CHECK-NEXT: %[[H:.+]] = model.layer 0(%[[E]], %[[WQ]]) : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: ^bb0(%[[X:[^:]+]]: tensor<1x2x4xf32>, %[[W:[^:]+]]: tensor<4x4xf32>):
// CHECK-NEXT: %[[Q:.+]] = model.linear %[[X]], %[[W]] transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[R:.+]] = model.add %[[X]], %[[Q]] : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: model.yield %[[R]]
// CHECK-NEXT: }
// CHECK-NEXT: %[[LOGITS:.+]] = model.linear %[[H]], %[[WTE]] transpose_w :
// CHECK-NEXT: %[[LOSS:.+]] = model.cross_entropy %[[LOGITS]], %[[TGT]]
// CHECK-NEXT: return %[[LOSS]]
// GRAD-LABEL: func.func @train_step(
// GRAD-SAME: -> (tensor<f32>, tensor<8x4xf32> {model.grad = "model.embed_tokens.weight"}, tensor<4x4xf32> {model.grad = "model.layers.0.self_attn.q_proj.weight"})
func.func @forward(%wte: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"},
                   %wq: tensor<4x4xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
                   %tokens: tensor<1x2xi32> {model.input = "tokens"},
                   %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
  %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
  %h = model.layer 0 (%e, %wq) : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<4x4xf32>):
    %q = model.linear %x, %w transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
    %r = model.add %x, %q : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    model.yield %r : tensor<1x2x4xf32>
  }
  %logits = model.linear %h, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests a target that names no linear: "proj" is no module's name (PEFT's
// rule wants the whole last names, q_proj does not end in ".proj"). The
// message lists the linears' short names once each, in program order,
// though two layers have them.
// expected-error @below {{lora.target_modules: "proj" names no linear of the model; its linears are q_proj, k_proj, o_proj, lm_head}}
module attributes {model.lora = {rank = 1 : i64, alpha = 1.0 : f64, dropout = 0.0 : f64, target_modules = ["q_proj", "proj"], modules_to_save = []}} {
  func.func @forward(%wte: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"},
                     %wq0: tensor<4x4xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
                     %wk0: tensor<2x4xf32> {model.param = "model.layers.0.self_attn.k_proj.weight"},
                     %wo0: tensor<4x2xf32> {model.param = "model.layers.0.self_attn.o_proj.weight"},
                     %wq1: tensor<4x4xf32> {model.param = "model.layers.1.self_attn.q_proj.weight"},
                     %wk1: tensor<2x4xf32> {model.param = "model.layers.1.self_attn.k_proj.weight"},
                     %wo1: tensor<4x2xf32> {model.param = "model.layers.1.self_attn.o_proj.weight"},
                     %head: tensor<8x4xf32> {model.param = "lm_head.weight"},
                     %tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h0 = model.layer 0 (%e, %wq0, %wk0, %wo0) : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>, %q_w: tensor<4x4xf32>, %k_w: tensor<2x4xf32>, %o_w: tensor<4x2xf32>):
      %q = model.linear %x, %q_w transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
      %k = model.linear %q, %k_w transpose_w : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2xf32>
      %o = model.linear %k, %o_w transpose_w : (tensor<1x2x2xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %o : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %h1 = model.layer 1 (%h0, %wq1, %wk1, %wo1) : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>, %q_w: tensor<4x4xf32>, %k_w: tensor<2x4xf32>, %o_w: tensor<4x2xf32>):
      %q = model.linear %x, %q_w transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
      %k = model.linear %q, %k_w transpose_w : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2xf32>
      %o = model.linear %k, %o_w transpose_w : (tensor<1x2x2xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %o : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %logits = model.linear %h1, %head transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests a module to save that names no module: the message lists the
// modules of the parameters (the norm's too), in parameter order.
// expected-error @below {{lora.modules_to_save: "head" names no module of the model; its modules are embed_tokens, q_proj, k_proj, o_proj, norm, lm_head}}
module attributes {model.lora = {rank = 1 : i64, alpha = 1.0 : f64, dropout = 0.0 : f64, target_modules = ["q_proj"], modules_to_save = ["head"]}} {
  func.func @forward(%wte: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"},
                     %wq: tensor<4x4xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
                     %wk: tensor<2x4xf32> {model.param = "model.layers.0.self_attn.k_proj.weight"},
                     %wo: tensor<4x2xf32> {model.param = "model.layers.0.self_attn.o_proj.weight"},
                     %g: tensor<4xf32> {model.param = "model.norm.weight"},
                     %head: tensor<8x4xf32> {model.param = "lm_head.weight"},
                     %tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h = model.layer 0 (%e, %wq, %wk, %wo) : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>, %q_w: tensor<4x4xf32>, %k_w: tensor<2x4xf32>, %o_w: tensor<4x2xf32>):
      %q = model.linear %x, %q_w transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
      %k = model.linear %q, %k_w transpose_w : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2xf32>
      %o = model.linear %k, %o_w transpose_w : (tensor<1x2x2xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %o : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %n = model.rms_norm %h, %g eps = 1.0e-05 : (tensor<1x2x4xf32>, tensor<4xf32>) -> tensor<1x2x4xf32>
    %logits = model.linear %n, %head transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests a rank above a target's smaller dimension, on each target it
// exceeds: k_proj's outputs (4 -> 2) and o_proj's inputs (2 -> 4) are fewer
// than 3; q_proj (4 -> 4) takes rank 3.
module attributes {model.lora = {rank = 3 : i64, alpha = 1.0 : f64, dropout = 0.0 : f64, target_modules = ["q_proj", "k_proj", "o_proj"], modules_to_save = []}} {
  func.func @forward(%wte: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"},
                     %wq: tensor<4x4xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
                     %wk: tensor<2x4xf32> {model.param = "model.layers.0.self_attn.k_proj.weight"},
                     %wo: tensor<4x2xf32> {model.param = "model.layers.0.self_attn.o_proj.weight"},
                     %tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h = model.layer 0 (%e, %wq, %wk, %wo) : (tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>, %q_w: tensor<4x4xf32>, %k_w: tensor<2x4xf32>, %o_w: tensor<4x2xf32>):
      %q = model.linear %x, %q_w transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
      // expected-error @below {{lora.rank = 3 exceeds the width of model.layers.0.self_attn.k_proj (4 inputs, 2 outputs)}}
      %k = model.linear %q, %k_w transpose_w : (tensor<1x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2xf32>
      // expected-error @below {{lora.rank = 3 exceeds the width of model.layers.0.self_attn.o_proj (2 inputs, 4 outputs)}}
      %o = model.linear %k, %o_w transpose_w : (tensor<1x2x2xf32>, tensor<4x2xf32>) -> tensor<1x2x4xf32>
      %r = model.add %x, %o : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
      model.yield %r : tensor<1x2x4xf32>
    }
    %logits = model.linear %h, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests a module both targeted (q_proj) and saved (self_attn.q_proj names
// the same module).
// expected-error @below {{lora: model.layers.0.self_attn.q_proj is both a target module (it gets an adapter) and a module to save (it is trained whole): give it once}}
module attributes {model.lora = {rank = 1 : i64, alpha = 1.0 : f64, dropout = 0.0 : f64, target_modules = ["q_proj"], modules_to_save = ["self_attn.q_proj"]}} {
  func.func @forward(%wte: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"},
                     %wq: tensor<4x4xf32> {model.param = "model.layers.0.self_attn.q_proj.weight"},
                     %tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %h = model.layer 0 (%e, %wq) : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32> {
    ^bb0(%x: tensor<1x2x4xf32>, %w: tensor<4x4xf32>):
      %q = model.linear %x, %w transpose_w : (tensor<1x2x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4xf32>
      model.yield %q : tensor<1x2x4xf32>
    }
    %logits = model.linear %h, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests a graph that has adapters already (model-lora run twice).
module attributes {model.lora = {rank = 1 : i64, alpha = 1.0 : f64, dropout = 0.0 : f64, target_modules = ["lm_head"], modules_to_save = []}} {
  // expected-error @below {{@forward already has LoRA adapters ("lm_head.lora_A.weight"): model-lora runs once}}
  func.func @forward(%wte: tensor<8x4xf32> {model.frozen, model.param = "model.embed_tokens.weight"},
                     %head: tensor<8x4xf32> {model.frozen, model.param = "lm_head.weight"},
                     %a: tensor<1x4xf32> {model.param = "lm_head.lora_A.weight"},
                     %b: tensor<8x1xf32> {model.param = "lm_head.lora_B.weight"},
                     %tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %y = model.linear %e, %head transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %d = model.linear %e, %a transpose_w {model.lora = "A"} : (tensor<1x2x4xf32>, tensor<1x4xf32>) -> tensor<1x2x1xf32>
    %u = model.linear %d, %b transpose_w {model.lora = "B"} : (tensor<1x2x1xf32>, tensor<8x1xf32>) -> tensor<1x2x8xf32>
    %logits = model.add %y, %u {model.lora = "sum"} : (tensor<1x2x8xf32>, tensor<1x2x8xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests settings that name no target module.
// expected-error @below {{model.lora names no target module}}
module attributes {model.lora = {rank = 1 : i64, alpha = 1.0 : f64, dropout = 0.0 : f64, target_modules = [], modules_to_save = []}} {
  func.func @forward(%wte: tensor<8x4xf32> {model.param = "model.embed_tokens.weight"},
                     %tokens: tensor<1x2xi32> {model.input = "tokens"},
                     %targets: tensor<1x2xi32> {model.input = "targets"}) -> tensor<f32> {
    %e = model.embedding %wte[%tokens] : (tensor<8x4xf32>, tensor<1x2xi32>) -> tensor<1x2x4xf32>
    %logits = model.linear %e, %wte transpose_w : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
    %loss = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<1x2x8xf32>, tensor<1x2xi32>) -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that settings without a @forward body to apply them to are
// refused.
// expected-error @below {{model-lora needs a func.func @forward with a body}}
module attributes {model.lora = {rank = 1 : i64, alpha = 1.0 : f64, dropout = 0.0 : f64, target_modules = ["q_proj"], modules_to_save = []}} {
  func.func private @forward(tensor<1x2xi32>) -> tensor<f32>
}
