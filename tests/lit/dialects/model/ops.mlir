// RUN: braid-opt %s -split-input-file | FileCheck %s
// RUN: braid-opt %s -split-input-file | braid-opt -split-input-file | FileCheck %s
// RUN: braid-opt %s -split-input-file --mlir-print-op-generic | braid-opt -split-input-file | FileCheck %s

// Tests that model.mesh round-trips its name, axes and sizes.
// CHECK: model.mesh @mesh axes = ["dp", "pp", "tp"] sizes = [2, 1, 4]
model.mesh @mesh axes = ["dp", "pp", "tp"] sizes = [2, 1, 4]
// CHECK-LABEL: func.func @mesh_user
func.func @mesh_user() {
  return
}

// -----

// Tests that a model.layer round-trips its index, operands, body and yield.
// CHECK-LABEL: func.func @layer
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[W:.+]]: tensor<64xf32>)
func.func @layer(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[H:.+]] = model.layer 3(%[[X]], %[[W]]) : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32> {
  // CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<2x16x64xf32>, %[[G:.+]]: tensor<64xf32>):
  // CHECK-NEXT: %[[N:.+]] = model.rms_norm %[[A]], %[[G]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  // CHECK-NEXT: model.yield %[[N]] : tensor<2x16x64xf32>
  // CHECK-NEXT: }
  %h = model.layer 3 (%x, %w) : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32> {
  ^bb0(%a: tensor<2x16x64xf32>, %g: tensor<64xf32>):
    %n = model.rms_norm %a, %g eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    model.yield %n : tensor<2x16x64xf32>
  }
  // CHECK: return %[[H]]
  return %h : tensor<2x16x64xf32>
}

// -----

// Tests that a model.layer with several results yields them all.
// CHECK-LABEL: func.func @layer_two_results
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>, %[[Y:.+]]: tensor<4xf16>)
func.func @layer_two_results(%x: tensor<4xf32>, %y: tensor<4xf16>) -> (tensor<4xf32>, tensor<4xf16>) {
  // CHECK: %[[R:.+]]:2 = model.layer 0(%[[X]], %[[Y]]) : (tensor<4xf32>, tensor<4xf16>) -> (tensor<4xf32>, tensor<4xf16>) {
  // CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<4xf32>, %[[B:.+]]: tensor<4xf16>):
  // CHECK-NEXT: model.yield %[[A]], %[[B]] : tensor<4xf32>, tensor<4xf16>
  %r:2 = model.layer 0 (%x, %y) : (tensor<4xf32>, tensor<4xf16>) -> (tensor<4xf32>, tensor<4xf16>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf16>):
    model.yield %a, %b : tensor<4xf32>, tensor<4xf16>
  }
  // CHECK: return %[[R]]#0, %[[R]]#1
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf16>
}

// -----

// Tests that a model.layer without results gets its empty model.yield.
// CHECK-LABEL: func.func @layer_no_results
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
func.func @layer_no_results(%x: tensor<4xf32>) {
  // CHECK: model.layer 1(%[[X]]) : (tensor<4xf32>) -> () {
  // CHECK-NEXT: ^bb0(%{{.+}}: tensor<4xf32>):
  // CHECK-NEXT: }
  model.layer 1 (%x) : (tensor<4xf32>) -> () {
  ^bb0(%a: tensor<4xf32>):
    model.yield
  }
  return
}

// -----

// Tests that model.embedding round-trips a table lookup with i32 ids.
// CHECK-LABEL: func.func @embedding
// CHECK-SAME: (%[[T:.+]]: tensor<512x64xbf16>, %[[IDS:.+]]: tensor<2x16xi32>)
func.func @embedding(%table: tensor<512x64xbf16>, %ids: tensor<2x16xi32>) -> tensor<2x16x64xbf16> {
  // CHECK: %[[E:.+]] = model.embedding %[[T]][%[[IDS]]] : (tensor<512x64xbf16>, tensor<2x16xi32>) -> tensor<2x16x64xbf16>
  %e = model.embedding %table[%ids] : (tensor<512x64xbf16>, tensor<2x16xi32>) -> tensor<2x16x64xbf16>
  // CHECK: return %[[E]]
  return %e : tensor<2x16x64xbf16>
}

// -----

// Tests that model.embedding accepts i64 ids and dynamic dimensions.
// CHECK-LABEL: func.func @embedding_i64_dynamic
// CHECK-SAME: (%[[T:.+]]: tensor<?x64xf32>, %[[IDS:.+]]: tensor<?x?xi64>)
func.func @embedding_i64_dynamic(%table: tensor<?x64xf32>, %ids: tensor<?x?xi64>) -> tensor<?x?x64xf32> {
  // CHECK: model.embedding %[[T]][%[[IDS]]] : (tensor<?x64xf32>, tensor<?x?xi64>) -> tensor<?x?x64xf32>
  %e = model.embedding %table[%ids] : (tensor<?x64xf32>, tensor<?x?xi64>) -> tensor<?x?x64xf32>
  return %e : tensor<?x?x64xf32>
}

// -----

// Tests that model.position_embedding round-trips a learned position table.
// CHECK-LABEL: func.func @position_embedding
// CHECK-SAME: (%[[WPE:.+]]: tensor<128x64xf32>, %[[IDS:.+]]: tensor<2x16xi32>)
func.func @position_embedding(%wpe: tensor<128x64xf32>, %ids: tensor<2x16xi32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[P:.+]] = model.position_embedding %[[WPE]] for %[[IDS]] : (tensor<128x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %p = model.position_embedding %wpe for %ids : (tensor<128x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[P]]
  return %p : tensor<2x16x64xf32>
}

// -----

// Tests that model.linear round-trips without bias and without transpose_w.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[W:.+]]: tensor<64x256xf32>)
func.func @linear(%x: tensor<2x16x64xf32>, %w: tensor<64x256xf32>) -> tensor<2x16x256xf32> {
  // CHECK: %[[Y:.+]] = model.linear %[[X]], %[[W]] : (tensor<2x16x64xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32>
  %y = model.linear %x, %w : (tensor<2x16x64xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x16x256xf32>
}

// -----

// Tests that model.linear round-trips with a bias and without transpose_w.
// CHECK-LABEL: func.func @linear_bias
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[W:.+]]: tensor<64x256xf32>, %[[B:.+]]: tensor<256xf32>)
func.func @linear_bias(%x: tensor<2x16x64xf32>, %w: tensor<64x256xf32>, %b: tensor<256xf32>) -> tensor<2x16x256xf32> {
  // CHECK: %[[Y:.+]] = model.linear %[[X]], %[[W]], %[[B]] : (tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32>
  %y = model.linear %x, %w, %b : (tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x16x256xf32>
}

// -----

// Tests that model.linear round-trips transpose_w without a bias.
// CHECK-LABEL: func.func @linear_transpose_w
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf16>, %[[W:.+]]: tensor<128x64xf16>)
func.func @linear_transpose_w(%x: tensor<2x16x64xf16>, %w: tensor<128x64xf16>) -> tensor<2x16x128xf16> {
  // CHECK: %[[Y:.+]] = model.linear %[[X]], %[[W]] transpose_w : (tensor<2x16x64xf16>, tensor<128x64xf16>) -> tensor<2x16x128xf16>
  %y = model.linear %x, %w transpose_w : (tensor<2x16x64xf16>, tensor<128x64xf16>) -> tensor<2x16x128xf16>
  // CHECK: return %[[Y]]
  return %y : tensor<2x16x128xf16>
}

// -----

// Tests that model.linear round-trips a bias together with transpose_w.
// CHECK-LABEL: func.func @linear_bias_transpose_w
// CHECK-SAME: (%[[X:.+]]: tensor<8x64xf64>, %[[W:.+]]: tensor<32x64xf64>, %[[B:.+]]: tensor<32xf64>)
func.func @linear_bias_transpose_w(%x: tensor<8x64xf64>, %w: tensor<32x64xf64>, %b: tensor<32xf64>) -> tensor<8x32xf64> {
  // CHECK: %[[Y:.+]] = model.linear %[[X]], %[[W]], %[[B]] transpose_w : (tensor<8x64xf64>, tensor<32x64xf64>, tensor<32xf64>) -> tensor<8x32xf64>
  %y = model.linear %x, %w, %b transpose_w : (tensor<8x64xf64>, tensor<32x64xf64>, tensor<32xf64>) -> tensor<8x32xf64>
  // CHECK: return %[[Y]]
  return %y : tensor<8x32xf64>
}

// -----

// Tests that model.attention round-trips plain multi-head attention.
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:.+]]: tensor<2x16x64xf32>, %[[K:.+]]: tensor<2x8x64xf32>, %[[V:.+]]: tensor<2x8x64xf32>)
func.func @attention(%q: tensor<2x16x64xf32>, %k: tensor<2x8x64xf32>, %v: tensor<2x8x64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[O:.+]] = model.attention %[[Q]], %[[K]], %[[V]] heads = 4 kv_heads = 4 scale = 2.500000e-01 : (tensor<2x16x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x16x64xf32>
  %o = model.attention %q, %k, %v heads = 4 kv_heads = 4 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[O]]
  return %o : tensor<2x16x64xf32>
}

// -----

// Tests that model.attention round-trips causal grouped-query attention.
// CHECK-LABEL: func.func @attention_causal_gqa
// CHECK-SAME: (%[[Q:.+]]: tensor<2x16x64xbf16>, %[[K:.+]]: tensor<2x16x32xbf16>, %[[V:.+]]: tensor<2x16x32xbf16>)
func.func @attention_causal_gqa(%q: tensor<2x16x64xbf16>, %k: tensor<2x16x32xbf16>, %v: tensor<2x16x32xbf16>) -> tensor<2x16x64xbf16> {
  // CHECK: %[[O:.+]] = model.attention %[[Q]], %[[K]], %[[V]] heads = 4 kv_heads = 2 scale = 2.500000e-01 causal : (tensor<2x16x64xbf16>, tensor<2x16x32xbf16>, tensor<2x16x32xbf16>) -> tensor<2x16x64xbf16>
  %o = model.attention %q, %k, %v heads = 4 kv_heads = 2 scale = 0.25 causal : (tensor<2x16x64xbf16>, tensor<2x16x32xbf16>, tensor<2x16x32xbf16>) -> tensor<2x16x64xbf16>
  // CHECK: return %[[O]]
  return %o : tensor<2x16x64xbf16>
}

// -----

// Tests that model.attention round-trips ALiBi with causal masking and dropout.
// CHECK-LABEL: func.func @attention_alibi_dropout
// CHECK-SAME: (%[[Q:.+]]: tensor<2x16x48xf32>, %[[K:.+]]: tensor<2x16x48xf32>, %[[V:.+]]: tensor<2x16x48xf32>)
func.func @attention_alibi_dropout(%q: tensor<2x16x48xf32>, %k: tensor<2x16x48xf32>, %v: tensor<2x16x48xf32>) -> tensor<2x16x48xf32> {
  // CHECK: %[[O:.+]] = model.attention %[[Q]], %[[K]], %[[V]] heads = 3 kv_heads = 3 scale = 2.500000e-01 causal alibi {dropout = 1.000000e-01 : f64} : (tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>) -> tensor<2x16x48xf32>
  %o = model.attention %q, %k, %v heads = 3 kv_heads = 3 scale = 0.25 causal alibi {dropout = 0.1 : f64} : (tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>) -> tensor<2x16x48xf32>
  // CHECK: return %[[O]]
  return %o : tensor<2x16x48xf32>
}

// -----

// Tests that model.attention round-trips multi-query attention (one kv head) with ALiBi alone.
// CHECK-LABEL: func.func @attention_mqa_alibi
// CHECK-SAME: (%[[Q:.+]]: tensor<1x8x64xf16>, %[[K:.+]]: tensor<1x8x16xf16>, %[[V:.+]]: tensor<1x8x16xf16>)
func.func @attention_mqa_alibi(%q: tensor<1x8x64xf16>, %k: tensor<1x8x16xf16>, %v: tensor<1x8x16xf16>) -> tensor<1x8x64xf16> {
  // CHECK: %[[O:.+]] = model.attention %[[Q]], %[[K]], %[[V]] heads = 4 kv_heads = 1 scale = 2.500000e-01 alibi : (tensor<1x8x64xf16>, tensor<1x8x16xf16>, tensor<1x8x16xf16>) -> tensor<1x8x64xf16>
  %o = model.attention %q, %k, %v heads = 4 kv_heads = 1 scale = 0.25 alibi : (tensor<1x8x64xf16>, tensor<1x8x16xf16>, tensor<1x8x16xf16>) -> tensor<1x8x64xf16>
  // CHECK: return %[[O]]
  return %o : tensor<1x8x64xf16>
}

// -----

// Tests that model.qkv_split round-trips the grouped layout with grouped-query heads.
// CHECK-LABEL: func.func @qkv_split_grouped
// CHECK-SAME: (%[[QKV:.+]]: tensor<2x16x128xf32>)
func.func @qkv_split_grouped(%qkv: tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) {
  // CHECK: %[[Q:.+]], %[[K:.+]], %[[V:.+]] = model.qkv_split %[[QKV]] heads = 4 kv_heads = 2 head_dim = 16 layout = grouped : (tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
  %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 2 head_dim = 16 layout = grouped : (tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
  // CHECK: return %[[Q]], %[[K]], %[[V]]
  return %q, %k, %v : tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>
}

// -----

// Tests that model.qkv_split round-trips the per_head layout.
// CHECK-LABEL: func.func @qkv_split_per_head
// CHECK-SAME: (%[[QKV:.+]]: tensor<2x16x192xbf16>)
func.func @qkv_split_per_head(%qkv: tensor<2x16x192xbf16>) -> (tensor<2x16x64xbf16>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>) {
  // CHECK: %[[Q:.+]], %[[K:.+]], %[[V:.+]] = model.qkv_split %[[QKV]] heads = 4 kv_heads = 4 head_dim = 16 layout = per_head : (tensor<2x16x192xbf16>) -> (tensor<2x16x64xbf16>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>)
  %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 4 head_dim = 16 layout = per_head : (tensor<2x16x192xbf16>) -> (tensor<2x16x64xbf16>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>)
  // CHECK: return %[[Q]], %[[K]], %[[V]]
  return %q, %k, %v : tensor<2x16x64xbf16>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>
}

// -----

// Tests that model.rms_norm round-trips its weight and eps.
// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[G:.+]]: tensor<64xf32>)
func.func @rms_norm(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[N:.+]] = model.rms_norm %[[X]], %[[G]] eps = 9.9999999999999995E-7 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %n = model.rms_norm %x, %g eps = 1.0e-06 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[N]]
  return %n : tensor<2x16x64xf32>
}

// -----

// Tests that model.layer_norm round-trips its weight, bias and eps.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[G:.+]]: tensor<64xf32>, %[[B:.+]]: tensor<64xf32>)
func.func @layer_norm(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[N:.+]] = model.layer_norm %[[X]], %[[G]], %[[B]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %n = model.layer_norm %x, %g, %b eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[N]]
  return %n : tensor<2x16x64xf32>
}

// -----

// Tests that model.rope round-trips its head size and theta.
// CHECK-LABEL: func.func @rope
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>)
func.func @rope(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[R:.+]] = model.rope %[[X]] head_dim = 16 theta = 1.000000e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %r = model.rope %x head_dim = 16 theta = 1.0e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[R]]
  return %r : tensor<2x16x64xf32>
}

// -----

// Tests that model.swiglu round-trips its gate and up operands.
// CHECK-LABEL: func.func @swiglu
// CHECK-SAME: (%[[GATE:.+]]: tensor<2x16x176xf32>, %[[UP:.+]]: tensor<2x16x176xf32>)
func.func @swiglu(%gate: tensor<2x16x176xf32>, %up: tensor<2x16x176xf32>) -> tensor<2x16x176xf32> {
  // CHECK: %[[A:.+]] = model.swiglu %[[GATE]], %[[UP]] : (tensor<2x16x176xf32>, tensor<2x16x176xf32>) -> tensor<2x16x176xf32>
  %a = model.swiglu %gate, %up : (tensor<2x16x176xf32>, tensor<2x16x176xf32>) -> tensor<2x16x176xf32>
  // CHECK: return %[[A]]
  return %a : tensor<2x16x176xf32>
}

// -----

// Tests that model.gelu round-trips both the exact form and the tanh approximation.
// CHECK-LABEL: func.func @gelu
// CHECK-SAME: (%[[H:.+]]: tensor<2x16x256xf32>)
func.func @gelu(%h: tensor<2x16x256xf32>) -> (tensor<2x16x256xf32>, tensor<2x16x256xf32>) {
  // CHECK: %[[EXACT:.+]] = model.gelu %[[H]] : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %exact = model.gelu %h : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  // CHECK: %[[TANH:.+]] = model.gelu %[[H]] tanh : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %approx = model.gelu %h tanh : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  // CHECK: return %[[EXACT]], %[[TANH]]
  return %exact, %approx : tensor<2x16x256xf32>, tensor<2x16x256xf32>
}

// -----

// Tests that model.add round-trips a residual sum.
// CHECK-LABEL: func.func @add
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[Y:.+]]: tensor<2x16x64xf32>)
func.func @add(%x: tensor<2x16x64xf32>, %y: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[S:.+]] = model.add %[[X]], %[[Y]] : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %s = model.add %x, %y : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[S]]
  return %s : tensor<2x16x64xf32>
}

// -----

// Tests that model.scale round-trips its factor, negative or fractional.
// CHECK-LABEL: func.func @scale
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x8xf32>)
func.func @scale(%x: tensor<2x16x8xf32>) -> (tensor<2x16x8xf32>, tensor<2x16x8xf32>) {
  // CHECK: %[[S:.+]] = model.scale %[[X]] scale = 2.000000e+00 : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  %s = model.scale %x scale = 2.0 : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  // CHECK: %[[N:.+]] = model.scale %[[S]] scale = -1.250000e-01 : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  %n = model.scale %s scale = -0.125 : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  // CHECK: return %[[S]], %[[N]]
  return %s, %n : tensor<2x16x8xf32>, tensor<2x16x8xf32>
}

// -----

// Tests that model.dropout round-trips its rate.
// CHECK-LABEL: func.func @dropout
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>)
func.func @dropout(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[D:.+]] = model.dropout %[[X]] rate = 1.000000e-01 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %d = model.dropout %x rate = 1.0e-01 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[D]]
  return %d : tensor<2x16x64xf32>
}

// -----

// Tests that model.dropout round-trips a slice of the last dimension.
model.mesh @mesh axes = ["tp"] sizes = [2]
// CHECK-LABEL: func.func @dropout_feature_slice
func.func @dropout_feature_slice(%x: tensor<2x16x32xf32>) -> tensor<2x16x32xf32> {
  // CHECK: model.dropout %{{.+}} rate = 1.000000e-01 feature_axis = "tp" {rng_id = 3 : i64} : (tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
  %d = model.dropout %x rate = 1.0e-01 feature_axis = "tp" {rng_id = 3 : i64} : (tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
  return %d : tensor<2x16x32xf32>
}

// -----

// Tests that model.cross_entropy round-trips an f32 loss from bf16 logits.
// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: (%[[LOGITS:.+]]: tensor<2x16x512xbf16>, %[[T:.+]]: tensor<2x16xi32>)
func.func @cross_entropy(%logits: tensor<2x16x512xbf16>, %targets: tensor<2x16xi32>) -> tensor<f32> {
  // CHECK: %[[L:.+]] = model.cross_entropy %[[LOGITS]], %[[T]] ignore_index = -100 : (tensor<2x16x512xbf16>, tensor<2x16xi32>) -> tensor<f32>
  %l = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<2x16x512xbf16>, tensor<2x16xi32>) -> tensor<f32>
  // CHECK: return %[[L]]
  return %l : tensor<f32>
}

// -----

// Tests that model.cross_entropy round-trips an f64 loss and another ignore_index.
// CHECK-LABEL: func.func @cross_entropy_f64
// CHECK-SAME: (%[[LOGITS:.+]]: tensor<32x512xf64>, %[[T:.+]]: tensor<32xi64>)
func.func @cross_entropy_f64(%logits: tensor<32x512xf64>, %targets: tensor<32xi64>) -> tensor<f64> {
  // CHECK: %[[L:.+]] = model.cross_entropy %[[LOGITS]], %[[T]] ignore_index = 0 : (tensor<32x512xf64>, tensor<32xi64>) -> tensor<f64>
  %l = model.cross_entropy %logits, %targets ignore_index = 0 : (tensor<32x512xf64>, tensor<32xi64>) -> tensor<f64>
  // CHECK: return %[[L]]
  return %l : tensor<f64>
}

// -----

// Tests that #model.sharding round-trips on an op result, with a dimension split over two axes.
// CHECK: model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// CHECK-LABEL: func.func @sharding_on_result
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[W:.+]]: tensor<128x64xf32>)
func.func @sharding_on_result(%x: tensor<2x16x64xf32>, %w: tensor<128x64xf32>) -> tensor<2x16x128xf32> {
  // CHECK: %[[Y:.+]] = model.linear %[[X]], %[[W]] transpose_w {model.sharding = #model.sharding<@mesh, [{"dp", "tp"}, {}, {}]>} : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
  %y = model.linear %x, %w transpose_w {model.sharding = #model.sharding<@mesh, [{"dp", "tp"}, {}, {}]>} : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x16x128xf32>
}

// -----

// Tests that #model.sharding round-trips partial axes on the output of a row-parallel matmul.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// CHECK-LABEL: func.func @sharding_partial
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[W:.+]]: tensor<64x64xf32>)
func.func @sharding_partial(%x: tensor<2x16x64xf32>, %w: tensor<64x64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[Y:.+]] = model.linear %[[X]], %[[W]] {model.sharding = #model.sharding<@mesh, [{"dp"}, {}, {}], partial = {"tp"}>} : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
  %y = model.linear %x, %w {model.sharding = #model.sharding<@mesh, [{"dp"}, {}, {}], partial = {"tp"}>} : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[Y]]
  return %y : tensor<2x16x64xf32>
}

// -----

// Tests that #model.sharding round-trips on function arguments and results, with model.param and model.input.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// CHECK-LABEL: func.func @sharding_on_arguments
// CHECK-SAME: (%[[IDS:.+]]: tensor<2x16xi32> {model.input = "tokens", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>},
// CHECK-SAME: %[[T:.+]]: tensor<2x16xi64> {model.input = "targets"},
// CHECK-SAME: %[[W:.+]]: tensor<512x64xf32> {model.param = "transformer.wte.weight", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>})
// CHECK-SAME: -> (tensor<2x16x64xf32> {model.sharding = #model.sharding<@mesh, [{"dp"}, {}, {}]>})
func.func @sharding_on_arguments(
    %ids: tensor<2x16xi32> {model.input = "tokens", model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>},
    %targets: tensor<2x16xi64> {model.input = "targets"},
    %wte: tensor<512x64xf32> {model.param = "transformer.wte.weight", model.sharding = #model.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<2x16x64xf32> {model.sharding = #model.sharding<@mesh, [{"dp"}, {}, {}]>}) {
  // CHECK: %[[E:.+]] = model.embedding %[[W]][%[[IDS]]]
  %e = model.embedding %wte[%ids] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[E]]
  return %e : tensor<2x16x64xf32>
}

// -----

// Tests that a list of #model.sharding, one per result, round-trips on a multi-result op.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// CHECK-LABEL: func.func @sharding_list
// CHECK-SAME: (%[[QKV:.+]]: tensor<2x16x192xf32>)
func.func @sharding_list(%qkv: tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  // CHECK: %[[Q:.+]], %[[K:.+]], %[[V:.+]] = model.qkv_split %[[QKV]] heads = 4 kv_heads = 4 head_dim = 16 layout = per_head
  // CHECK-SAME: {model.sharding = [#model.sharding<@mesh, [{"dp"}, {}, {"tp"}]>, #model.sharding<@mesh, [{"dp"}, {}, {"tp"}]>, #model.sharding<@mesh, [{}, {}, {}]>]}
  %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 4 head_dim = 16 layout = per_head {model.sharding = [#model.sharding<@mesh, [{"dp"}, {}, {"tp"}]>, #model.sharding<@mesh, [{"dp"}, {}, {"tp"}]>, #model.sharding<@mesh, [{}, {}, {}]>]} : (tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  // CHECK: return %[[Q]], %[[K]], %[[V]]
  return %q, %k, %v : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// -----

// Tests that a fully replicated rank-0 value takes a #model.sharding with no dimension entries.
model.mesh @mesh axes = ["dp"] sizes = [2]
// CHECK-LABEL: func.func @sharding_rank0
// CHECK-SAME: (%[[LOGITS:.+]]: tensor<2x16x512xf32>, %[[T:.+]]: tensor<2x16xi32>)
func.func @sharding_rank0(%logits: tensor<2x16x512xf32>, %targets: tensor<2x16xi32>) -> tensor<f32> {
  // CHECK: %[[L:.+]] = model.cross_entropy %[[LOGITS]], %[[T]] ignore_index = -100 {model.sharding = #model.sharding<@mesh, []>}
  %l = model.cross_entropy %logits, %targets ignore_index = -100 {model.sharding = #model.sharding<@mesh, []>} : (tensor<2x16x512xf32>, tensor<2x16xi32>) -> tensor<f32>
  // CHECK: return %[[L]]
  return %l : tensor<f32>
}

// -----

// Tests that #model.sharding resolves its mesh from inside a model.layer, which is isolated from above.
model.mesh @mesh axes = ["tp"] sizes = [4]
// CHECK-LABEL: func.func @sharding_in_layer
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>)
func.func @sharding_in_layer(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[H:.+]] = model.layer 0(%[[X]])
  // CHECK: %[[G:.+]] = model.gelu %{{.+}} {model.sharding = #model.sharding<@mesh, [{}, {}, {"tp"}]>}
  // CHECK-NEXT: model.yield %[[G]]
  %h = model.layer 0 (%x) : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  ^bb0(%a: tensor<2x16x64xf32>):
    %g = model.gelu %a {model.sharding = #model.sharding<@mesh, [{}, {}, {"tp"}]>} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    model.yield %g : tensor<2x16x64xf32>
  }
  // CHECK: return %[[H]]
  return %h : tensor<2x16x64xf32>
}

// -----

// Tests that axis names with a quote or a backslash round-trip escaped, in the mesh and in #model.sharding.
// CHECK: model.mesh @mesh axes = ["a\22b", "c\\d"] sizes = [2, 2]
model.mesh @mesh axes = ["a\"b", "c\\d"] sizes = [2, 2]
// CHECK-LABEL: func.func @sharding_escaped_axis_names
// CHECK-SAME: (%{{.+}}: tensor<4x4xf32> {model.sharding = #model.sharding<@mesh, [{"a\22b"}, {}], partial = {"c\\d"}>})
func.func @sharding_escaped_axis_names(%x: tensor<4x4xf32> {model.sharding = #model.sharding<@mesh, [{"a\"b"}, {}], partial = {"c\\d"}>}) {
  return
}

// -----

// Tests that model.config, a dictionary on the module, round-trips.
// CHECK: module attributes {model.config = {hidden = 64 : i64, layers = 2 : i64}}
module attributes {model.config = {hidden = 64 : i64, layers = 2 : i64}} {
  // CHECK-LABEL: func.func @config
  func.func @config() {
    return
  }
}

// -----

// Tests that model.embedding_grad round-trips the gradient of an embedding table.
// CHECK-LABEL: func.func @embedding_grad
// CHECK-SAME: (%[[DY:.+]]: tensor<2x16x64xf32>, %[[IDS:.+]]: tensor<2x16xi32>)
func.func @embedding_grad(%dy: tensor<2x16x64xf32>, %ids: tensor<2x16xi32>) -> tensor<512x64xf32> {
  // CHECK: %[[DT:.+]] = model.embedding_grad %[[DY]][%[[IDS]]] : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<512x64xf32>
  %dt = model.embedding_grad %dy[%ids] : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<512x64xf32>
  // CHECK: return %[[DT]]
  return %dt : tensor<512x64xf32>
}

// -----

// Tests that model.position_embedding_grad round-trips a table longer than the sequence.
// CHECK-LABEL: func.func @position_embedding_grad
// CHECK-SAME: (%[[DY:.+]]: tensor<2x16x64xbf16>)
func.func @position_embedding_grad(%dy: tensor<2x16x64xbf16>) -> tensor<128x64xbf16> {
  // CHECK: %[[DT:.+]] = model.position_embedding_grad %[[DY]] : (tensor<2x16x64xbf16>) -> tensor<128x64xbf16>
  %dt = model.position_embedding_grad %dy : (tensor<2x16x64xbf16>) -> tensor<128x64xbf16>
  // CHECK: return %[[DT]]
  return %dt : tensor<128x64xbf16>
}

// -----

// Tests that model.linear_grad_input round-trips without transpose_w.
// CHECK-LABEL: func.func @linear_grad_input
// CHECK-SAME: (%[[DY:.+]]: tensor<2x16x256xf32>, %[[W:.+]]: tensor<64x256xf32>)
func.func @linear_grad_input(%dy: tensor<2x16x256xf32>, %w: tensor<64x256xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[DX:.+]] = model.linear_grad_input %[[DY]], %[[W]] : (tensor<2x16x256xf32>, tensor<64x256xf32>) -> tensor<2x16x64xf32>
  %dx = model.linear_grad_input %dy, %w : (tensor<2x16x256xf32>, tensor<64x256xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[DX]]
  return %dx : tensor<2x16x64xf32>
}

// -----

// Tests that model.linear_grad_input round-trips transpose_w.
// CHECK-LABEL: func.func @linear_grad_input_transpose_w
// CHECK-SAME: (%[[DY:.+]]: tensor<2x16x128xf16>, %[[W:.+]]: tensor<128x64xf16>)
func.func @linear_grad_input_transpose_w(%dy: tensor<2x16x128xf16>, %w: tensor<128x64xf16>) -> tensor<2x16x64xf16> {
  // CHECK: %[[DX:.+]] = model.linear_grad_input %[[DY]], %[[W]] transpose_w : (tensor<2x16x128xf16>, tensor<128x64xf16>) -> tensor<2x16x64xf16>
  %dx = model.linear_grad_input %dy, %w transpose_w : (tensor<2x16x128xf16>, tensor<128x64xf16>) -> tensor<2x16x64xf16>
  // CHECK: return %[[DX]]
  return %dx : tensor<2x16x64xf16>
}

// -----

// Tests that model.linear_grad_weight round-trips without transpose_w, giving an [in, out] gradient.
// CHECK-LABEL: func.func @linear_grad_weight
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[DY:.+]]: tensor<2x16x256xf32>)
func.func @linear_grad_weight(%x: tensor<2x16x64xf32>, %dy: tensor<2x16x256xf32>) -> tensor<64x256xf32> {
  // CHECK: %[[DW:.+]] = model.linear_grad_weight %[[X]], %[[DY]] : (tensor<2x16x64xf32>, tensor<2x16x256xf32>) -> tensor<64x256xf32>
  %dw = model.linear_grad_weight %x, %dy : (tensor<2x16x64xf32>, tensor<2x16x256xf32>) -> tensor<64x256xf32>
  // CHECK: return %[[DW]]
  return %dw : tensor<64x256xf32>
}

// -----

// Tests that model.linear_grad_weight round-trips transpose_w, giving an [out, in] gradient.
// CHECK-LABEL: func.func @linear_grad_weight_transpose_w
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xbf16>, %[[DY:.+]]: tensor<2x16x128xbf16>)
func.func @linear_grad_weight_transpose_w(%x: tensor<2x16x64xbf16>, %dy: tensor<2x16x128xbf16>) -> tensor<128x64xbf16> {
  // CHECK: %[[DW:.+]] = model.linear_grad_weight %[[X]], %[[DY]] transpose_w : (tensor<2x16x64xbf16>, tensor<2x16x128xbf16>) -> tensor<128x64xbf16>
  %dw = model.linear_grad_weight %x, %dy transpose_w : (tensor<2x16x64xbf16>, tensor<2x16x128xbf16>) -> tensor<128x64xbf16>
  // CHECK: return %[[DW]]
  return %dw : tensor<128x64xbf16>
}

// -----

// Tests that model.bias_grad round-trips the sum of dy down to its last dimension.
// CHECK-LABEL: func.func @bias_grad
// CHECK-SAME: (%[[DY:.+]]: tensor<2x16x128xf32>)
func.func @bias_grad(%dy: tensor<2x16x128xf32>) -> tensor<128xf32> {
  // CHECK: %[[DB:.+]] = model.bias_grad %[[DY]] : (tensor<2x16x128xf32>) -> tensor<128xf32>
  %db = model.bias_grad %dy : (tensor<2x16x128xf32>) -> tensor<128xf32>
  // CHECK: return %[[DB]]
  return %db : tensor<128xf32>
}

// -----

// Tests that model.rms_norm_grad round-trips its operands, eps and both gradients.
// CHECK-LABEL: func.func @rms_norm_grad
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[G:.+]]: tensor<64xf32>, %[[DY:.+]]: tensor<2x16x64xf32>)
func.func @rms_norm_grad(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %dy: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>) {
  // CHECK: %[[DX:.+]], %[[DG:.+]] = model.rms_norm_grad %[[X]], %[[G]], %[[DY]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
  %dx, %dg = model.rms_norm_grad %x, %g, %dy eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
  // CHECK: return %[[DX]], %[[DG]]
  return %dx, %dg : tensor<2x16x64xf32>, tensor<64xf32>
}

// -----

// Tests that model.layer_norm_grad round-trips its operands, eps and its three gradients.
// CHECK-LABEL: func.func @layer_norm_grad
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x64xf32>, %[[G:.+]]: tensor<64xf32>, %[[DY:.+]]: tensor<2x16x64xf32>)
func.func @layer_norm_grad(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %dy: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) {
  // CHECK: %[[DX:.+]], %[[DG:.+]], %[[DB:.+]] = model.layer_norm_grad %[[X]], %[[G]], %[[DY]] eps = 1.000000e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
  %dx, %dg, %db = model.layer_norm_grad %x, %g, %dy eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
  // CHECK: return %[[DX]], %[[DG]], %[[DB]]
  return %dx, %dg, %db : tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>
}

// -----

// Tests that model.rope_grad round-trips its head size and theta.
// CHECK-LABEL: func.func @rope_grad
// CHECK-SAME: (%[[DY:.+]]: tensor<2x16x64xf32>)
func.func @rope_grad(%dy: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[DX:.+]] = model.rope_grad %[[DY]] head_dim = 16 theta = 1.000000e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %dx = model.rope_grad %dy head_dim = 16 theta = 1.0e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: return %[[DX]]
  return %dx : tensor<2x16x64xf32>
}

// -----

// Tests that model.attention_grad round-trips causal ALiBi attention with dropout.
// CHECK-LABEL: func.func @attention_grad_causal_alibi
// CHECK-SAME: (%[[Q:.+]]: tensor<2x16x48xf32>, %[[K:.+]]: tensor<2x16x48xf32>, %[[V:.+]]: tensor<2x16x48xf32>, %[[O:.+]]: tensor<2x16x48xf32>, %[[DO:.+]]: tensor<2x16x48xf32>)
func.func @attention_grad_causal_alibi(%q: tensor<2x16x48xf32>, %k: tensor<2x16x48xf32>, %v: tensor<2x16x48xf32>, %o: tensor<2x16x48xf32>, %do: tensor<2x16x48xf32>) -> (tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>) {
  // CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = model.attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[DO]] heads = 3 kv_heads = 3 scale = 2.500000e-01 causal alibi {dropout = 1.000000e-01 : f64} : (tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>) -> (tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>)
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 3 kv_heads = 3 scale = 0.25 causal alibi {dropout = 0.1 : f64} : (tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>) -> (tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>)
  // CHECK: return %[[DQ]], %[[DK]], %[[DV]]
  return %dq, %dk, %dv : tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>
}

// -----

// Tests that model.attention_grad round-trips grouped-query attention, dk and dv of k's and v's narrower type.
// CHECK-LABEL: func.func @attention_grad_gqa
// CHECK-SAME: (%[[Q:.+]]: tensor<2x16x64xbf16>, %[[K:.+]]: tensor<2x8x32xbf16>, %[[V:.+]]: tensor<2x8x32xbf16>, %[[O:.+]]: tensor<2x16x64xbf16>, %[[DO:.+]]: tensor<2x16x64xbf16>)
func.func @attention_grad_gqa(%q: tensor<2x16x64xbf16>, %k: tensor<2x8x32xbf16>, %v: tensor<2x8x32xbf16>, %o: tensor<2x16x64xbf16>, %do: tensor<2x16x64xbf16>) -> (tensor<2x16x64xbf16>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>) {
  // CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = model.attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[DO]] heads = 4 kv_heads = 2 scale = 2.500000e-01 : (tensor<2x16x64xbf16>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>) -> (tensor<2x16x64xbf16>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>)
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 4 kv_heads = 2 scale = 0.25 : (tensor<2x16x64xbf16>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>) -> (tensor<2x16x64xbf16>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>)
  // CHECK: return %[[DQ]], %[[DK]], %[[DV]]
  return %dq, %dk, %dv : tensor<2x16x64xbf16>, tensor<2x8x32xbf16>, tensor<2x8x32xbf16>
}

// -----

// Tests that model.qkv_concat round-trips the grouped layout with grouped-query heads.
// CHECK-LABEL: func.func @qkv_concat_grouped
// CHECK-SAME: (%[[Q:.+]]: tensor<2x16x64xf32>, %[[K:.+]]: tensor<2x16x32xf32>, %[[V:.+]]: tensor<2x16x32xf32>)
func.func @qkv_concat_grouped(%q: tensor<2x16x64xf32>, %k: tensor<2x16x32xf32>, %v: tensor<2x16x32xf32>) -> tensor<2x16x128xf32> {
  // CHECK: %[[QKV:.+]] = model.qkv_concat %[[Q]], %[[K]], %[[V]] heads = 4 kv_heads = 2 head_dim = 16 layout = grouped : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x128xf32>
  %qkv = model.qkv_concat %q, %k, %v heads = 4 kv_heads = 2 head_dim = 16 layout = grouped : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x128xf32>
  // CHECK: return %[[QKV]]
  return %qkv : tensor<2x16x128xf32>
}

// -----

// Tests that model.qkv_concat round-trips the per_head layout.
// CHECK-LABEL: func.func @qkv_concat_per_head
// CHECK-SAME: (%[[Q:.+]]: tensor<2x16x64xbf16>, %[[K:.+]]: tensor<2x16x64xbf16>, %[[V:.+]]: tensor<2x16x64xbf16>)
func.func @qkv_concat_per_head(%q: tensor<2x16x64xbf16>, %k: tensor<2x16x64xbf16>, %v: tensor<2x16x64xbf16>) -> tensor<2x16x192xbf16> {
  // CHECK: %[[QKV:.+]] = model.qkv_concat %[[Q]], %[[K]], %[[V]] heads = 4 kv_heads = 4 head_dim = 16 layout = per_head : (tensor<2x16x64xbf16>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>) -> tensor<2x16x192xbf16>
  %qkv = model.qkv_concat %q, %k, %v heads = 4 kv_heads = 4 head_dim = 16 layout = per_head : (tensor<2x16x64xbf16>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>) -> tensor<2x16x192xbf16>
  // CHECK: return %[[QKV]]
  return %qkv : tensor<2x16x192xbf16>
}

// -----

// Tests that model.swiglu round-trips one packed [gate | up] operand, the
// result half its last dimension.
// CHECK-LABEL: func.func @swiglu_packed
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x352xf32>)
func.func @swiglu_packed(%x: tensor<2x16x352xf32>) -> tensor<2x16x176xf32> {
  // CHECK: %[[A:.+]] = model.swiglu %[[X]] : (tensor<2x16x352xf32>) -> tensor<2x16x176xf32>
  %a = model.swiglu %x : (tensor<2x16x352xf32>) -> tensor<2x16x176xf32>
  return %a : tensor<2x16x176xf32>
}

// -----

// Tests that model.swiglu_grad of a packed operand round-trips, with one
// packed gradient.
// CHECK-LABEL: func.func @swiglu_grad_packed
func.func @swiglu_grad_packed(%x: tensor<2x16x352xf32>, %dy: tensor<2x16x176xf32>) -> tensor<2x16x352xf32> {
  // CHECK: model.swiglu_grad %{{.+}}, %{{.+}} : (tensor<2x16x352xf32>, tensor<2x16x176xf32>) -> tensor<2x16x352xf32>
  %dx = model.swiglu_grad %x, %dy : (tensor<2x16x352xf32>, tensor<2x16x176xf32>) -> tensor<2x16x352xf32>
  return %dx : tensor<2x16x352xf32>
}

// -----

// Tests that model.swiglu_grad round-trips its operands and both gradients.
// CHECK-LABEL: func.func @swiglu_grad
// CHECK-SAME: (%[[GATE:.+]]: tensor<2x16x176xf32>, %[[UP:.+]]: tensor<2x16x176xf32>, %[[DY:.+]]: tensor<2x16x176xf32>)
func.func @swiglu_grad(%gate: tensor<2x16x176xf32>, %up: tensor<2x16x176xf32>, %dy: tensor<2x16x176xf32>) -> (tensor<2x16x176xf32>, tensor<2x16x176xf32>) {
  // CHECK: %[[DG:.+]], %[[DU:.+]] = model.swiglu_grad %[[GATE]], %[[UP]], %[[DY]] : (tensor<2x16x176xf32>, tensor<2x16x176xf32>, tensor<2x16x176xf32>) -> (tensor<2x16x176xf32>, tensor<2x16x176xf32>)
  %dg, %du = model.swiglu_grad %gate, %up, %dy : (tensor<2x16x176xf32>, tensor<2x16x176xf32>, tensor<2x16x176xf32>) -> (tensor<2x16x176xf32>, tensor<2x16x176xf32>)
  // CHECK: return %[[DG]], %[[DU]]
  return %dg, %du : tensor<2x16x176xf32>, tensor<2x16x176xf32>
}

// -----

// Tests that model.gelu_grad round-trips both the exact form and the tanh approximation.
// CHECK-LABEL: func.func @gelu_grad
// CHECK-SAME: (%[[X:.+]]: tensor<2x16x256xf32>, %[[DY:.+]]: tensor<2x16x256xf32>)
func.func @gelu_grad(%x: tensor<2x16x256xf32>, %dy: tensor<2x16x256xf32>) -> (tensor<2x16x256xf32>, tensor<2x16x256xf32>) {
  // CHECK: %[[EXACT:.+]] = model.gelu_grad %[[X]], %[[DY]] : (tensor<2x16x256xf32>, tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %exact = model.gelu_grad %x, %dy : (tensor<2x16x256xf32>, tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  // CHECK: %[[TANH:.+]] = model.gelu_grad %[[X]], %[[DY]] tanh : (tensor<2x16x256xf32>, tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  %approx = model.gelu_grad %x, %dy tanh : (tensor<2x16x256xf32>, tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
  // CHECK: return %[[EXACT]], %[[TANH]]
  return %exact, %approx : tensor<2x16x256xf32>, tensor<2x16x256xf32>
}

// -----

// Tests that model.cross_entropy_grad round-trips bf16 logits with an f32 dloss.
// CHECK-LABEL: func.func @cross_entropy_grad
// CHECK-SAME: (%[[LOGITS:.+]]: tensor<2x16x512xbf16>, %[[T:.+]]: tensor<2x16xi32>, %[[DL:.+]]: tensor<f32>)
func.func @cross_entropy_grad(%logits: tensor<2x16x512xbf16>, %targets: tensor<2x16xi32>, %dloss: tensor<f32>) -> tensor<2x16x512xbf16> {
  // CHECK: %[[D:.+]] = model.cross_entropy_grad %[[LOGITS]], %[[T]], %[[DL]] ignore_index = -100 : (tensor<2x16x512xbf16>, tensor<2x16xi32>, tensor<f32>) -> tensor<2x16x512xbf16>
  %d = model.cross_entropy_grad %logits, %targets, %dloss ignore_index = -100 : (tensor<2x16x512xbf16>, tensor<2x16xi32>, tensor<f32>) -> tensor<2x16x512xbf16>
  // CHECK: return %[[D]]
  return %d : tensor<2x16x512xbf16>
}

// -----

// Tests that model.cross_entropy_grad round-trips f64 logits with an f64 dloss and another ignore_index.
// CHECK-LABEL: func.func @cross_entropy_grad_f64
// CHECK-SAME: (%[[LOGITS:.+]]: tensor<32x512xf64>, %[[T:.+]]: tensor<32xi64>, %[[DL:.+]]: tensor<f64>)
func.func @cross_entropy_grad_f64(%logits: tensor<32x512xf64>, %targets: tensor<32xi64>, %dloss: tensor<f64>) -> tensor<32x512xf64> {
  // CHECK: %[[D:.+]] = model.cross_entropy_grad %[[LOGITS]], %[[T]], %[[DL]] ignore_index = 0 : (tensor<32x512xf64>, tensor<32xi64>, tensor<f64>) -> tensor<32x512xf64>
  %d = model.cross_entropy_grad %logits, %targets, %dloss ignore_index = 0 : (tensor<32x512xf64>, tensor<32xi64>, tensor<f64>) -> tensor<32x512xf64>
  // CHECK: return %[[D]]
  return %d : tensor<32x512xf64>
}

// -----

// Tests that model.all_reduce round-trips a bucket of two tensors, its mesh
// axes and its reason.
model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 1]
// CHECK-LABEL: func.func @all_reduce
// CHECK-SAME: (%[[A:.+]]: tensor<4x8xf32>, %[[B:.+]]: tensor<8xf32>)
func.func @all_reduce(%a: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  // CHECK: %[[R:.+]]:2 = model.all_reduce %[[A]], %[[B]] over @mesh ["dp"] reason = "data-parallel gradients" : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  %r:2 = model.all_reduce %a, %b over @mesh ["dp"] reason = "data-parallel gradients" : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  // CHECK: return %[[R]]#0, %[[R]]#1
  return %r#0, %r#1 : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// Tests that the ops of a tensor-parallel rank round-trip their slice
// attributes: a vocab-parallel embedding and its gradient, a row-parallel
// linear's bias_scale, attention on a slice of the heads, the vocab-parallel
// loss (max all-reduce included) with the gradient reading the global
// log-sum-exp, and a norm over shards.
model.mesh @mesh axes = ["dp", "tp"] sizes = [1, 2]
// CHECK-LABEL: func.func @tensor_parallel
func.func @tensor_parallel(%table: tensor<8x4xf32>, %ids: tensor<2x3xi32>,
                           %x: tensor<2x3x2xf32>, %w: tensor<4x2xf32>, %b: tensor<4xf32>,
                           %q: tensor<2x3x4xf32>, %k: tensor<2x3x4xf32>,
                           %logits: tensor<2x3x8xf32>, %dloss: tensor<f32>,
                           %lb: tensor<2x3x8xbf16>) {
  // CHECK: model.embedding %{{.+}}[%{{.+}}] vocab_axis = "tp" : (tensor<8x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  %e = model.embedding %table[%ids] vocab_axis = "tp" : (tensor<8x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  // CHECK: model.embedding_grad %{{.+}}[%{{.+}}] vocab_axis = "tp" : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<8x4xf32>
  %de = model.embedding_grad %e[%ids] vocab_axis = "tp" : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<8x4xf32>
  // CHECK: model.linear %{{.+}}, %{{.+}}, %{{.+}} transpose_w bias_scale = 5.000000e-01 :
  %y = model.linear %x, %w, %b transpose_w bias_scale = 0.5 : (tensor<2x3x2xf32>, tensor<4x2xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: model.attention %{{.+}}, %{{.+}}, %{{.+}} heads = 1 kv_heads = 1 scale = 5.000000e-01 causal head_axis = "tp" global_heads = 2 global_kv_heads = 1 :
  %o = model.attention %q, %k, %k heads = 1 kv_heads = 1 scale = 0.5 causal head_axis = "tp" global_heads = 2 global_kv_heads = 1 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // CHECK: model.attention_grad {{.*}} head_axis = "tp" global_heads = 2 global_kv_heads = 1 :
  %dq, %dk, %dv = model.attention_grad %q, %k, %k, %o, %o heads = 1 kv_heads = 1 scale = 0.5 causal head_axis = "tp" global_heads = 2 global_kv_heads = 1 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>)
  // CHECK: %[[M:.+]] = model.cross_entropy_max %{{.+}} : (tensor<2x3x8xf32>) -> tensor<2x3xf32>
  %m = model.cross_entropy_max %logits : (tensor<2x3x8xf32>) -> tensor<2x3xf32>
  // CHECK: %[[GM:.+]] = model.all_reduce max %[[M]] over @mesh ["tp"] reason = "row maxima"
  %gm = model.all_reduce max %m over @mesh ["tp"] reason = "row maxima" : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: %[[P:.+]] = model.cross_entropy_partial %{{.+}}, %{{.+}}, %[[GM]] ignore_index = -100 vocab_axis = "tp" : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<2x3xf32>) -> tensor<2x3x2xf32>
  %p = model.cross_entropy_partial %logits, %ids, %gm ignore_index = -100 vocab_axis = "tp" : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<2x3xf32>) -> tensor<2x3x2xf32>
  // CHECK: %{{.+}}, %[[LSE:.+]] = model.cross_entropy_finish %[[P]], %[[GM]], %{{.+}} ignore_index = -100 : (tensor<2x3x2xf32>, tensor<2x3xf32>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3xf32>)
  %loss, %lse = model.cross_entropy_finish %p, %gm, %ids ignore_index = -100 : (tensor<2x3x2xf32>, tensor<2x3xf32>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3xf32>)
  // bf16 logits: the partials and the log-sum-exp in f32.
  %mb = model.cross_entropy_max %lb : (tensor<2x3x8xbf16>) -> tensor<2x3xbf16>
  // CHECK: model.cross_entropy_partial {{.+}} -> tensor<2x3x2xf32>
  %pb = model.cross_entropy_partial %lb, %ids, %mb ignore_index = -100 vocab_axis = "tp" : (tensor<2x3x8xbf16>, tensor<2x3xi32>, tensor<2x3xbf16>) -> tensor<2x3x2xf32>
  // CHECK: model.cross_entropy_finish {{.+}} : (tensor<2x3x2xf32>, tensor<2x3xbf16>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3xf32>)
  %lossb, %lseb = model.cross_entropy_finish %pb, %mb, %ids ignore_index = -100 : (tensor<2x3x2xf32>, tensor<2x3xbf16>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3xf32>)
  // CHECK: model.cross_entropy_grad %{{.+}}, %{{.+}}, %{{.+}} lse %[[LSE]] ignore_index = -100 vocab_axis = "tp" :
  %dl = model.cross_entropy_grad %logits, %ids, %dloss lse %lse ignore_index = -100 vocab_axis = "tp" : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<f32>, tensor<2x3xf32>) -> tensor<2x3x8xf32>
  // CHECK: model.grad_norm %{{.+}}, %{{.+}} max_norm = 1.000000e+00 over @mesh ["tp"] replicated = [false, true] :
  %n, %s = model.grad_norm %de, %b max_norm = 1.0 over @mesh ["tp"] replicated = [false, true] : (tensor<8x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
  return
}

// -----

// Tests that the sequence-parallel collectives and slices round-trip.
model.mesh @mesh axes = ["tp"] sizes = [2]
// CHECK-LABEL: func.func @sequence_parallel
func.func @sequence_parallel(%x: tensor<1x4x8xf32>, %wpe: tensor<16x8xf32>, %ids: tensor<1x8xi32>) {
  // CHECK: %[[G:.+]] = model.all_gather %{{.+}} over @mesh ["tp"] dim = 1 reason = "gather" : (tensor<1x4x8xf32>) -> tensor<1x8x8xf32>
  %g = model.all_gather %x over @mesh ["tp"] dim = 1 reason = "gather" : (tensor<1x4x8xf32>) -> tensor<1x8x8xf32>
  // CHECK: model.reduce_scatter %[[G]] over @mesh ["tp"] dim = 1 reason = "scatter" : (tensor<1x8x8xf32>) -> tensor<1x4x8xf32>
  %s = model.reduce_scatter %g over @mesh ["tp"] dim = 1 reason = "scatter" : (tensor<1x8x8xf32>) -> tensor<1x4x8xf32>
  // CHECK: model.position_embedding %{{.+}} for %{{.+}} seq_axis = "tp" : (tensor<16x8xf32>, tensor<1x8xi32>) -> tensor<1x4x8xf32>
  %p = model.position_embedding %wpe for %ids seq_axis = "tp" : (tensor<16x8xf32>, tensor<1x8xi32>) -> tensor<1x4x8xf32>
  // CHECK: model.position_embedding_grad %{{.+}} seq_axis = "tp" : (tensor<1x4x8xf32>) -> tensor<16x8xf32>
  %dp = model.position_embedding_grad %p seq_axis = "tp" : (tensor<1x4x8xf32>) -> tensor<16x8xf32>
  // CHECK: model.dropout %{{.+}} rate = 1.000000e-01 seq_axis = "tp" {rng_id = 3 : i64}
  %d = model.dropout %s rate = 0.1 seq_axis = "tp" {rng_id = 3 : i64} : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  return
}

// -----

// Tests that the inference ops round-trip: rope_at, attention_cached (with
// ALiBi), take_rows and sample.
// CHECK-LABEL: func.func @generation
func.func @generation(%q: tensor<2x4x64xf32>, %k: tensor<2x4x32xf32>, %v: tensor<2x4x32xf32>, %pos: tensor<2x4xi32>, %ck: tensor<2x16x32xf32>, %cv: tensor<2x16x32xf32>, %last: tensor<2xi32>, %settings: tensor<3xf32>, %seed: tensor<2xi32>, %draw: tensor<2xi32>) -> tensor<2xi32> {
  // CHECK: model.rope_at %{{.+}}, %{{.+}} head_dim = 16 theta = 1.000000e+04 : (tensor<2x4x64xf32>, tensor<2x4xi32>) -> tensor<2x4x64xf32>
  %r = model.rope_at %q, %pos head_dim = 16 theta = 1.0e+04 : (tensor<2x4x64xf32>, tensor<2x4xi32>) -> tensor<2x4x64xf32>
  // CHECK: model.attention_cached %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} heads = 4 kv_heads = 2 scale = 2.500000e-01 alibi
  %o, %ck2, %cv2 = model.attention_cached %r, %k, %v, %pos, %ck, %cv heads = 4 kv_heads = 2 scale = 0.25 alibi : (tensor<2x4x64xf32>, tensor<2x4x32xf32>, tensor<2x4x32xf32>, tensor<2x4xi32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> (tensor<2x4x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
  // CHECK: model.take_rows %{{.+}}[%{{.+}}] : (tensor<2x4x64xf32>, tensor<2xi32>) -> tensor<2x1x64xf32>
  %h = model.take_rows %o[%last] : (tensor<2x4x64xf32>, tensor<2xi32>) -> tensor<2x1x64xf32>
  // CHECK: model.sample %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} vocab_size = 60 : (tensor<2x1x64xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  %ids = model.sample %h, %settings, %seed, %draw vocab_size = 60 : (tensor<2x1x64xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  return %ids : tensor<2xi32>
}

// -----

// Tests that the draw from tensor-parallel ranks' candidates round-trips:
// top_candidates on a rank's slice, the i32 ids gathered, sample and
// top_logprobs from candidates, and reorder_rows.
model.mesh @mesh axes = ["tp"] sizes = [2]
// CHECK-LABEL: func.func @draw_from_candidates
func.func @draw_from_candidates(%l: tensor<2x1x32xf32>, %settings: tensor<3xf32>, %seed: tensor<2xi32>, %draw: tensor<2xi32>, %cache: tensor<2x16x8xf32>, %parents: tensor<2xi32>) {
  // CHECK: model.top_candidates %{{.+}} k = 4 vocab_size = 60 vocab_axis = "tp" : (tensor<2x1x32xf32>) -> (tensor<2x1x4xf32>, tensor<2x4xi32>, tensor<2x1x1xf32>)
  %v, %i, %s = model.top_candidates %l k = 4 vocab_size = 60 vocab_axis = "tp" : (tensor<2x1x32xf32>) -> (tensor<2x1x4xf32>, tensor<2x4xi32>, tensor<2x1x1xf32>)
  %gv = model.all_gather %v over @mesh ["tp"] dim = 2 reason = "values" : (tensor<2x1x4xf32>) -> tensor<2x1x8xf32>
  // CHECK: model.all_gather %{{.+}} over @mesh ["tp"] dim = 1 reason = "ids" : (tensor<2x4xi32>) -> tensor<2x8xi32>
  %gi = model.all_gather %i over @mesh ["tp"] dim = 1 reason = "ids" : (tensor<2x4xi32>) -> tensor<2x8xi32>
  %gs = model.all_gather %s over @mesh ["tp"] dim = 2 reason = "lse" : (tensor<2x1x1xf32>) -> tensor<2x1x2xf32>
  // CHECK: model.sample %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} candidates %{{.+}} vocab_size = 60 : (tensor<2x1x8xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2x8xi32>) -> tensor<2xi32>
  %ids = model.sample %gv, %settings, %seed, %draw candidates %gi vocab_size = 60 : (tensor<2x1x8xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2x8xi32>) -> tensor<2xi32>
  // CHECK: model.top_logprobs %{{.+}} candidates(%{{.+}}, %{{.+}}) k = 6 vocab_size = 60 : (tensor<2x1x8xf32>, tensor<2x8xi32>, tensor<2x1x2xf32>) -> (tensor<2x6xf32>, tensor<2x6xi32>)
  %lp, %li = model.top_logprobs %gv candidates(%gi, %gs) k = 6 vocab_size = 60 : (tensor<2x1x8xf32>, tensor<2x8xi32>, tensor<2x1x2xf32>) -> (tensor<2x6xf32>, tensor<2x6xi32>)
  // CHECK: model.reorder_rows %{{.+}}[%{{.+}}] : (tensor<2x16x8xf32>, tensor<2xi32>) -> tensor<2x16x8xf32>
  %c = model.reorder_rows %cache[%parents] : (tensor<2x16x8xf32>, tensor<2xi32>) -> tensor<2x16x8xf32>
  return
}

// -----

// Tests that packed documents' positions round-trip on attention, rope,
// the position table and their gradients.
// CHECK-LABEL: func.func @packed_documents
func.func @packed_documents(%q: tensor<2x16x64xf32>, %k: tensor<2x16x32xf32>, %v: tensor<2x16x32xf32>, %pos: tensor<2x16xi32>, %wpe: tensor<128x64xf32>, %ids: tensor<2x16xi32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<128x64xf32>) {
  // CHECK: model.rope %{{.+}} at %{{.+}} head_dim = 16 theta = 1.000000e+04 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %r = model.rope %q at %pos head_dim = 16 theta = 1.0e+04 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // CHECK: model.attention %{{.+}}, %{{.+}}, %{{.+}} positions %{{.+}} heads = 4 kv_heads = 2 scale = 2.500000e-01 causal : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %o = model.attention %r, %k, %v positions %pos heads = 4 kv_heads = 2 scale = 0.25 causal : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // CHECK: model.attention_grad %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} positions %{{.+}} heads = 4 kv_heads = 2 scale = 2.500000e-01 causal
  %dq, %dk, %dv = model.attention_grad %r, %k, %v, %o, %o positions %pos heads = 4 kv_heads = 2 scale = 0.25 causal : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16xi32>) -> (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
  // CHECK: model.rope_grad %{{.+}} at %{{.+}} head_dim = 16
  %dr = model.rope_grad %dq at %pos head_dim = 16 theta = 1.0e+04 : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // CHECK: model.position_embedding %{{.+}} for %{{.+}} at %{{.+}} : (tensor<128x64xf32>, tensor<2x16xi32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  %p = model.position_embedding %wpe for %ids at %pos : (tensor<128x64xf32>, tensor<2x16xi32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  // CHECK: model.position_embedding_grad %{{.+}} at %{{.+}} : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<128x64xf32>
  %dt = model.position_embedding_grad %p at %pos : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<128x64xf32>
  return %o, %dq, %dr, %p, %dt : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<128x64xf32>
}
