// RUN: braid-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// model.mesh
//===----------------------------------------------------------------------===//

// Tests M1: a mesh needs as many sizes as axes.
// expected-error @+1 {{'model.mesh' op has 2 axes but 1 sizes}}
model.mesh @m1_axes_sizes_mismatch axes = ["dp", "tp"] sizes = [2]

// -----

// Tests M2: a mesh may not name an axis twice.
// expected-error @+1 {{'model.mesh' op has axis "tp" more than once}}
model.mesh @m2_duplicate_axis axes = ["tp", "tp"] sizes = [2, 2]

// -----

// Tests M3: every mesh axis has size at least 1.
// expected-error @+1 {{'model.mesh' op axis "dp" has size 0 but sizes must be >= 1}}
model.mesh @m3_zero_size axes = ["dp"] sizes = [0]

// -----

//===----------------------------------------------------------------------===//
// model.layer
//===----------------------------------------------------------------------===//

// Tests L1: a layer's index may not be negative.
func.func @l1_negative_index(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'model.layer' op index is -1 but must be >= 0}}
  %h = model.layer -1 (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    model.yield %a : tensor<4xf32>
  }
  return %h : tensor<4xf32>
}

// -----

// Tests L2: the body needs one block argument per operand.
func.func @l2_body_argument_mismatch(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'model.layer' op body has 1 arguments but the layer has 2 operands}}
  %h = model.layer 0 (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    model.yield %a : tensor<4xf32>
  }
  return %h : tensor<4xf32>
}

// -----

// Tests L3: the body yields a value of each result's type.
func.func @l3_yield_type_mismatch(%x: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{'model.layer' op body yields 'tensor<4xf32>' as value 0 but result 0 is 'tensor<4xf16>'}}
  %h = model.layer 0 (%x) : (tensor<4xf32>) -> tensor<4xf16> {
  ^bb0(%a: tensor<4xf32>):
    // expected-note @+1 {{yield here}}
    model.yield %a : tensor<4xf32>
  }
  return %h : tensor<4xf16>
}

// -----

//===----------------------------------------------------------------------===//
// model.embedding
//===----------------------------------------------------------------------===//

// Tests E1: the embedding table has rank 2.
func.func @e1_table_rank(%table: tensor<512xf32>, %ids: tensor<2x16xi32>) -> tensor<2x16x512xf32> {
  // expected-error @+1 {{'model.embedding' op table has rank 1 but must have rank 2}}
  %e = model.embedding %table[%ids] : (tensor<512xf32>, tensor<2x16xi32>) -> tensor<2x16x512xf32>
  return %e : tensor<2x16x512xf32>
}

// -----

// Tests E2: the result is the ids' shape followed by the hidden size.
func.func @e2_result_shape(%table: tensor<512x64xf32>, %ids: tensor<2x16xi32>) -> tensor<2x16x32xf32> {
  // expected-error @+1 {{'model.embedding' op result shape is [2, 16, 32] but ids and table give [2, 16, 64]}}
  %e = model.embedding %table[%ids] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x32xf32>
  return %e : tensor<2x16x32xf32>
}

// -----

// Tests E3: the result has the table's element type.
func.func @e3_result_element_type(%table: tensor<512x64xf32>, %ids: tensor<2x16xi32>) -> tensor<2x16x64xbf16> {
  // expected-error @+1 {{'model.embedding' op result element type 'bf16' differs from the table's 'f32'}}
  %e = model.embedding %table[%ids] : (tensor<512x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xbf16>
  return %e : tensor<2x16x64xbf16>
}

// -----

//===----------------------------------------------------------------------===//
// model.position_embedding
//===----------------------------------------------------------------------===//

// Tests PE1: the tokens of a position embedding have rank 2.
func.func @pe1_tokens_rank(%wpe: tensor<128x64xf32>, %ids: tensor<16xi32>) -> tensor<16x64xf32> {
  // expected-error @+1 {{'model.position_embedding' op table and tokens must have rank 2, found ranks 2 and 1}}
  %p = model.position_embedding %wpe for %ids : (tensor<128x64xf32>, tensor<16xi32>) -> tensor<16x64xf32>
  return %p : tensor<16x64xf32>
}

// -----

// Tests PE2: the sequence may not be longer than the position table.
func.func @pe2_sequence_too_long(%wpe: tensor<8x64xf32>, %ids: tensor<2x16xi32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.position_embedding' op sequence length 16 exceeds the table's 8 positions}}
  %p = model.position_embedding %wpe for %ids : (tensor<8x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  return %p : tensor<2x16x64xf32>
}

// -----

// Tests PE3: the result is [batch, seq, hidden] of the table's element type.
func.func @pe3_result_type(%wpe: tensor<128x64xf32>, %ids: tensor<2x16xi32>) -> tensor<2x16x32xf32> {
  // expected-error @+1 {{'model.position_embedding' op result is 'tensor<2x16x32xf32>' but must be [2, 16, 64] of 'f32'}}
  %p = model.position_embedding %wpe for %ids : (tensor<128x64xf32>, tensor<2x16xi32>) -> tensor<2x16x32xf32>
  return %p : tensor<2x16x32xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.linear
//===----------------------------------------------------------------------===//

// Tests LIN1: the weight of a linear has rank 2.
func.func @lin1_weight_rank(%x: tensor<2x64xf32>, %w: tensor<64xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'model.linear' op x must have rank >= 1 and the weight rank 2, found ranks 2 and 1}}
  %y = model.linear %x, %w : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

// Tests LIN2: x's columns match the weight's input dimension, which is dimension 1 with transpose_w.
func.func @lin2_input_dim_mismatch(%x: tensor<2x64xf32>, %w: tensor<64x128xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'model.linear' op x has 64 columns but the weight [64, 128] takes 128 inputs (transpose_w: weight is [out, in])}}
  %y = model.linear %x, %w transpose_w : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

// Tests LIN3: the bias is [out].
func.func @lin3_bias_shape(%x: tensor<2x64xf32>, %w: tensor<64x128xf32>, %b: tensor<64xf32>) -> tensor<2x128xf32> {
  // expected-error @+1 {{'model.linear' op bias is [64] but the output dimension is 128}}
  %y = model.linear %x, %w, %b : (tensor<2x64xf32>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<2x128xf32>
  return %y : tensor<2x128xf32>
}

// -----

// Tests LIN4: the result replaces x's last dimension by the weight's output dimension.
func.func @lin4_result_shape(%x: tensor<2x64xf32>, %w: tensor<64x128xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'model.linear' op result shape is [2, 64] but must be [2, 128]}}
  %y = model.linear %x, %w : (tensor<2x64xf32>, tensor<64x128xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

// Tests LIN5: x and the weight have one element type.
func.func @lin5_element_type_mix(%x: tensor<2x64xf32>, %w: tensor<64x128xbf16>) -> tensor<2x128xf32> {
  // expected-error @+1 {{'model.linear' op operands mix element types 'f32' and 'bf16'}}
  %y = model.linear %x, %w : (tensor<2x64xf32>, tensor<64x128xbf16>) -> tensor<2x128xf32>
  return %y : tensor<2x128xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.attention
//===----------------------------------------------------------------------===//

// Tests A1: causal attention needs as many query positions as key positions.
func.func @a1_causal_sequence_mismatch(%q: tensor<2x16x64xf32>, %k: tensor<2x8x64xf32>, %v: tensor<2x8x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.attention' op causal attention needs as many query positions as key positions, found 16 and 8}}
  %o = model.attention %q, %k, %v heads = 4 kv_heads = 4 scale = 0.25 causal : (tensor<2x16x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x16x64xf32>
  return %o : tensor<2x16x64xf32>
}

// -----

// Tests A2: kv_heads divides heads.
func.func @a2_kv_heads_not_divisor(%q: tensor<2x16x64xf32>, %k: tensor<2x16x48xf32>, %v: tensor<2x16x48xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.attention' op kv_heads = 3 does not divide heads = 4}}
  %o = model.attention %q, %k, %v heads = 4 kv_heads = 3 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>) -> tensor<2x16x64xf32>
  return %o : tensor<2x16x64xf32>
}

// -----

// Tests A3: k and v have kv_heads x head_dim columns.
func.func @a3_kv_columns(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.attention' op k and v must have kv_heads x head_dim = 2 x 16 = 32 columns, found 64 and 64}}
  %o = model.attention %q, %k, %v heads = 4 kv_heads = 2 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %o : tensor<2x16x64xf32>
}

// -----

// Tests A4: the attention dropout rate is below 1.
func.func @a4_dropout_out_of_range(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.attention' op dropout is 1.000000e+00 but must be in [0, 1)}}
  %o = model.attention %q, %k, %v heads = 4 kv_heads = 4 scale = 0.25 {dropout = 1.0 : f64} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %o : tensor<2x16x64xf32>
}

// -----

// Tests A5: q, k and v have one element type.
func.func @a5_element_type_mix(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xbf16>, %v: tensor<2x16x64xbf16>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.attention' op q, k and v mix element types 'f32', 'bf16' and 'bf16'}}
  %o = model.attention %q, %k, %v heads = 4 kv_heads = 4 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x16x64xbf16>, tensor<2x16x64xbf16>) -> tensor<2x16x64xf32>
  return %o : tensor<2x16x64xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.qkv_split
//===----------------------------------------------------------------------===//

// Tests QS1: the fused input has (heads + 2 kv_heads) x head_dim columns.
func.func @qs1_input_columns(%qkv: tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  // expected-error @+1 {{'model.qkv_split' op fused qkv must be [batch, seq, 192] for (4 + 2 x 4) x 16 columns, found [2, 16, 128]}}
  %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 4 head_dim = 16 layout = grouped : (tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  return %q, %k, %v : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// -----

// Tests QS2: the per_head layout needs as many kv heads as query heads.
func.func @qs2_per_head_needs_equal_heads(%qkv: tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) {
  // expected-error @+1 {{'model.qkv_split' op per_head layout needs kv_heads = heads, found 2 and 4}}
  %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 2 head_dim = 16 layout = per_head : (tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
  return %q, %k, %v : tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>
}

// -----

// Tests QS3: k is [batch, seq, kv_heads x head_dim].
func.func @qs3_result_shape(%qkv: tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x32xf32>) {
  // expected-error @+1 {{'model.qkv_split' op k is 'tensor<2x16x64xf32>' but must be [2, 16, 32] of 'f32'}}
  %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 2 head_dim = 16 layout = grouped : (tensor<2x16x128xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x32xf32>)
  return %q, %k, %v : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x32xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.rms_norm
//===----------------------------------------------------------------------===//

// Tests RN1: the rms_norm weight is [d] for x's last dimension d.
func.func @rn1_weight_shape(%x: tensor<2x16x64xf32>, %g: tensor<32xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.rms_norm' op weight is [32] but x's last dimension is 64}}
  %n = model.rms_norm %x, %g eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<32xf32>) -> tensor<2x16x64xf32>
  return %n : tensor<2x16x64xf32>
}

// -----

// Tests RN2: the rms_norm eps is positive.
func.func @rn2_eps_not_positive(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.rms_norm' op eps is 0.000000e+00 but must be positive}}
  %n = model.rms_norm %x, %g eps = 0.0 : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  return %n : tensor<2x16x64xf32>
}

// -----

// Tests RN3: the rms_norm weight has x's element type.
func.func @rn3_weight_element_type(%x: tensor<2x16x64xf32>, %g: tensor<64xbf16>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.rms_norm' op weight element type 'bf16' differs from x's 'f32'}}
  %n = model.rms_norm %x, %g eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xbf16>) -> tensor<2x16x64xf32>
  return %n : tensor<2x16x64xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.layer_norm
//===----------------------------------------------------------------------===//

// Tests LN1: the layer_norm bias is [d] for x's last dimension d.
func.func @ln1_bias_shape(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %b: tensor<32xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.layer_norm' op bias is [32] but x's last dimension is 64}}
  %n = model.layer_norm %x, %g, %b eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<32xf32>) -> tensor<2x16x64xf32>
  return %n : tensor<2x16x64xf32>
}

// -----

// Tests LN2: the layer_norm eps is positive.
func.func @ln2_eps_not_positive(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.layer_norm' op eps is -1.000000e-05 but must be positive}}
  %n = model.layer_norm %x, %g, %b eps = -1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  return %n : tensor<2x16x64xf32>
}

// -----

// Tests LN3: the layer_norm result has x's type.
func.func @ln3_result_type(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<2x16x64xf16> {
  // expected-error @+1 {{'model.layer_norm' op result is 'tensor<2x16x64xf16>' but must be x's type 'tensor<2x16x64xf32>'}}
  %n = model.layer_norm %x, %g, %b eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf16>
  return %n : tensor<2x16x64xf16>
}

// -----

//===----------------------------------------------------------------------===//
// model.rope
//===----------------------------------------------------------------------===//

// Tests R1: rope takes x of rank 3.
func.func @r1_rank(%x: tensor<16x64xf32>) -> tensor<16x64xf32> {
  // expected-error @+1 {{'model.rope' op x has rank 2 but must have rank 3}}
  %r = model.rope %x head_dim = 16 theta = 1.0e+04 : (tensor<16x64xf32>) -> tensor<16x64xf32>
  return %r : tensor<16x64xf32>
}

// -----

// Tests R2: the rope head_dim is even.
func.func @r2_odd_head_dim(%x: tensor<2x16x63xf32>) -> tensor<2x16x63xf32> {
  // expected-error @+1 {{'model.rope' op head_dim is 7 but must be even and >= 2}}
  %r = model.rope %x head_dim = 7 theta = 1.0e+04 : (tensor<2x16x63xf32>) -> tensor<2x16x63xf32>
  return %r : tensor<2x16x63xf32>
}

// -----

// Tests R3: the rope theta is positive.
func.func @r3_theta_not_positive(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.rope' op theta is 0.000000e+00 but must be positive}}
  %r = model.rope %x head_dim = 16 theta = 0.0 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}

// -----

// Tests R4: the rope result has x's type.
func.func @r4_result_type(%x: tensor<2x16x64xf32>) -> tensor<2x16x32xf32> {
  // expected-error @+1 {{'model.rope' op result is 'tensor<2x16x32xf32>' but must be x's type 'tensor<2x16x64xf32>'}}
  %r = model.rope %x head_dim = 16 theta = 1.0e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x32xf32>
  return %r : tensor<2x16x32xf32>
}

// -----

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

// Tests SW1: swiglu's gate and up have one type.
func.func @sw1_operand_type_mismatch(%gate: tensor<2x16x176xf32>, %up: tensor<2x16x88xf32>) -> tensor<2x16x176xf32> {
  // expected-error @+1 {{'model.swiglu' op up is 'tensor<2x16x88xf32>' but gate is 'tensor<2x16x176xf32>'}}
  %a = model.swiglu %gate, %up : (tensor<2x16x176xf32>, tensor<2x16x88xf32>) -> tensor<2x16x176xf32>
  return %a : tensor<2x16x176xf32>
}

// -----

// Tests SW2: a packed [gate | up] operand has an even last dimension.
func.func @sw2_odd(%x: tensor<2x16x351xf32>) -> tensor<2x16x175xf32> {
  // expected-error @+1 {{'model.swiglu' op packed [gate | up] operand 'tensor<2x16x351xf32>' needs an even last dimension}}
  %a = model.swiglu %x : (tensor<2x16x351xf32>) -> tensor<2x16x175xf32>
  return %a : tensor<2x16x175xf32>
}

// -----

// Tests SW2: the result of a packed swiglu is half its operand.
func.func @sw2_result(%x: tensor<2x16x352xf32>) -> tensor<2x16x352xf32> {
  // expected-error @+1 {{'model.swiglu' op result is 'tensor<2x16x352xf32>' but must be the packed operand's type halved 'tensor<2x16x176xf32>'}}
  %a = model.swiglu %x : (tensor<2x16x352xf32>) -> tensor<2x16x352xf32>
  return %a : tensor<2x16x352xf32>
}

// -----

// Tests G1: the gelu result has x's type.
func.func @g1_result_type(%x: tensor<2x16x256xf32>) -> tensor<2x16x256xbf16> {
  // expected-error @+1 {{'model.gelu' op result is 'tensor<2x16x256xbf16>' but must be x's type 'tensor<2x16x256xf32>'}}
  %a = model.gelu %x tanh : (tensor<2x16x256xf32>) -> tensor<2x16x256xbf16>
  return %a : tensor<2x16x256xbf16>
}

// -----

// Tests AD1: add does not broadcast; lhs and rhs have one type.
func.func @ad1_operand_type_mismatch(%x: tensor<2x16x64xf32>, %y: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.add' op rhs is 'tensor<64xf32>' but lhs is 'tensor<2x16x64xf32>'}}
  %s = model.add %x, %y : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  return %s : tensor<2x16x64xf32>
}

// -----

// Tests SC1: the scale result has x's type.
func.func @sc1_result_type(%x: tensor<2x16x8xf32>) -> tensor<2x16x8xbf16> {
  // expected-error @+1 {{'model.scale' op result is 'tensor<2x16x8xbf16>' but must be x's type 'tensor<2x16x8xf32>'}}
  %s = model.scale %x scale = 2.0 : (tensor<2x16x8xf32>) -> tensor<2x16x8xbf16>
  return %s : tensor<2x16x8xbf16>
}

// -----

// Tests SC2: the scale factor is nonzero.
func.func @sc2_zero(%x: tensor<2x16x8xf32>) -> tensor<2x16x8xf32> {
  // expected-error @+1 {{'model.scale' op scale is 0.000000e+00 but must be finite and nonzero}}
  %s = model.scale %x scale = 0.0 : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %s : tensor<2x16x8xf32>
}

// -----

// Tests SC2: the scale factor is finite.
func.func @sc2_infinite(%x: tensor<2x16x8xf32>) -> tensor<2x16x8xf32> {
  // expected-error @+1 {{'model.scale' op scale is INF but must be finite and nonzero}}
  %s = model.scale %x scale = 0x7FF0000000000000 : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %s : tensor<2x16x8xf32>
}

// -----

// Tests SC2: a NaN scale factor is refused.
func.func @sc2_nan(%x: tensor<2x16x8xf32>) -> tensor<2x16x8xf32> {
  // expected-error @+1 {{'model.scale' op scale is nan but must be finite and nonzero}}
  %s = model.scale %x scale = 0x7FF8000000000000 : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %s : tensor<2x16x8xf32>
}

// -----

// Tests D1: the dropout rate is in [0, 1).
func.func @d1_rate_out_of_range(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.dropout' op rate is -5.000000e-01 but must be in [0, 1)}}
  %d = model.dropout %x rate = -0.5 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %d : tensor<2x16x64xf32>
}

// -----

// Tests D2: the dropout result has x's type.
func.func @d2_result_type(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf16> {
  // expected-error @+1 {{'model.dropout' op result is 'tensor<2x16x64xf16>' but must be x's type 'tensor<2x16x64xf32>'}}
  %d = model.dropout %x rate = 0.1 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf16>
  return %d : tensor<2x16x64xf16>
}

// -----

//===----------------------------------------------------------------------===//
// model.cross_entropy
//===----------------------------------------------------------------------===//

// Tests CE1: the targets are the logits' shape without the last dimension.
func.func @ce1_targets_shape(%logits: tensor<2x16x512xf32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
  // expected-error @+1 {{'model.cross_entropy' op targets are [2, 8] but the logits [2, 16, 512] need [2, 16]}}
  %l = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests CE2: the loss of bf16 logits is a rank-0 f32 tensor.
func.func @ce2_loss_type(%logits: tensor<2x16x512xbf16>, %targets: tensor<2x16xi32>) -> tensor<bf16> {
  // expected-error @+1 {{'model.cross_entropy' op result is 'tensor<bf16>' but must be 'tensor<f32>'}}
  %l = model.cross_entropy %logits, %targets ignore_index = -100 : (tensor<2x16x512xbf16>, tensor<2x16xi32>) -> tensor<bf16>
  return %l : tensor<bf16>
}

// -----

//===----------------------------------------------------------------------===//
// #model.sharding
//===----------------------------------------------------------------------===//

model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// Tests S1: an axis name may not be empty.
// expected-error @+1 {{dimension 1 has an axis that is not a non-empty string: ""}}
func.func @s1_empty_axis_name(%x: tensor<4x8xf32> {model.sharding = #model.sharding<@mesh, [{}, {""}]>}) {
  return
}

// -----

model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// Tests S2: an axis may not appear both in a dimension and in partial.
// expected-error @+1 {{axis "tp" appears more than once in the sharding}}
func.func @s2_axis_twice(%x: tensor<4x8xf32> {model.sharding = #model.sharding<@mesh, [{}, {"tp"}], partial = {"tp"}>}) {
  return
}

// -----

// Tests S3: the sharding's mesh symbol names a model.mesh of the module.
func.func @s3_unknown_mesh(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.gelu' op sharding refers to @nomesh, which is not a model.mesh of the module}}
  %y = model.gelu %x {model.sharding = #model.sharding<@nomesh, [{}, {}, {}]>} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// -----

model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// Tests S4: every axis the sharding names is an axis of its mesh.
func.func @s4_unknown_axis(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.gelu' op sharding names axis "pp", which mesh @mesh does not have}}
  %y = model.gelu %x {model.sharding = #model.sharding<@mesh, [{"dp"}, {}, {"pp"}]>} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// -----

model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// Tests S5: the sharding has one dimension entry per dimension of the tensor.
// expected-error @+1 {{'func.func' op argument 0: sharding has 2 dims but the tensor has rank 3}}
func.func @s5_rank_mismatch(%x: tensor<2x16x64xf32> {model.sharding = #model.sharding<@mesh, [{"dp"}, {}]>}) {
  return
}

// -----

//===----------------------------------------------------------------------===//
// Discardable attributes of the dialect
//===----------------------------------------------------------------------===//

model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// Tests that a multi-result op takes a list of shardings, one per result, not fewer.
func.func @sharding_list_wrong_length(%qkv: tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  // expected-error @+1 {{'model.qkv_split' op has 3 results but 2 shardings}}
  %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 4 head_dim = 16 layout = per_head {model.sharding = [#model.sharding<@mesh, [{}, {}, {}]>, #model.sharding<@mesh, [{}, {}, {}]>]} : (tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  return %q, %k, %v : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// -----

model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// Tests that a multi-result op does not take a single sharding.
func.func @sharding_single_on_multi_result(%qkv: tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  // expected-error @+1 {{'model.qkv_split' op has 3 results but one model.sharding; give a list with one sharding per result}}
  %q, %k, %v = model.qkv_split %qkv heads = 4 kv_heads = 4 head_dim = 16 layout = per_head {model.sharding = #model.sharding<@mesh, [{}, {}, {}]>} : (tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  return %q, %k, %v : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// -----

// Tests that model.sharding on an op holds a #model.sharding, not another attribute.
func.func @sharding_not_a_sharding(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'model.gelu' op model.sharding must be a #model.sharding or a list of them, found "tp"}}
  %y = model.gelu %x {model.sharding = "tp"} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that model.input is "tokens" or "targets".
// expected-error @+1 {{'func.func' op argument 0: model.input must be "tokens", "targets", "positions", "loss_grad", "lr", "step" or an input of an inference graph, found "labels"}}
func.func @input_bad_value(%x: tensor<2x16xi32> {model.input = "labels"}) {
  return
}

// -----

// Tests that model.param names its parameter with a non-empty string.
// expected-error @+1 {{'func.func' op argument 1: model.param must be a non-empty string, found ""}}
func.func @param_empty(%x: tensor<2x16xi32> {model.input = "tokens"}, %w: tensor<64xf32> {model.param = ""}) {
  return
}

// -----

// Tests that an unknown model.* argument attribute is rejected.
// expected-error @+1 {{'func.func' op argument 0: unknown model dialect argument attribute "model.weight"}}
func.func @unknown_argument_attribute(%w: tensor<64xf32> {model.weight = "w"}) {
  return
}

// -----

// Tests that an unknown model.* attribute on an op is rejected.
func.func @unknown_op_attribute(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'model.gelu' op has unknown model dialect attribute "model.shard"}}
  %y = model.gelu %x {model.shard = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that a function result takes only the model.* attributes the dialect
// defines for results (sharding, grad, param, opt_state).
// expected-error @+1 {{'func.func' op result 0: unknown model dialect result attribute "model.input"}}
func.func @unknown_result_attribute(%x: tensor<4xf32>) -> (tensor<4xf32> {model.input = "y"}) {
  return %x : tensor<4xf32>
}

// -----

model.mesh @mesh axes = ["dp", "tp"] sizes = [2, 4]
// Tests that S3 to S5 are checked for an argument of a function declaration too, as they are for its results.
// expected-error @+1 {{'func.func' op argument 0: sharding names axis "pp", which mesh @mesh does not have}}
func.func private @sharding_on_declaration_argument(tensor<4x8xf32> {model.sharding = #model.sharding<@mesh, [{"pp"}, {}]>})

// -----

// Tests that model.config is only accepted on the module.
func.func @config_not_on_module(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'model.gelu' op model.config must be a dictionary on the module}}
  %y = model.gelu %x {model.config = {hidden = 64 : i64}} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.embedding_grad
//===----------------------------------------------------------------------===//

// Tests EG1: the embedding table gradient has rank 2.
func.func @eg1_result_rank(%dy: tensor<2x16x64xf32>, %ids: tensor<2x16xi32>) -> tensor<512xf32> {
  // expected-error @+1 {{'model.embedding_grad' op result has rank 1 but must have rank 2}}
  %dt = model.embedding_grad %dy[%ids] : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<512xf32>
  return %dt : tensor<512xf32>
}

// -----

// Tests EG2: dy is the ids' shape followed by the table's hidden size.
func.func @eg2_dy_shape(%dy: tensor<2x16x32xf32>, %ids: tensor<2x16xi32>) -> tensor<512x64xf32> {
  // expected-error @+1 {{'model.embedding_grad' op dy is [2, 16, 32] but ids and table give [2, 16, 64]}}
  %dt = model.embedding_grad %dy[%ids] : (tensor<2x16x32xf32>, tensor<2x16xi32>) -> tensor<512x64xf32>
  return %dt : tensor<512x64xf32>
}

// -----

// Tests EG3: dy and the table gradient have one element type.
func.func @eg3_element_type(%dy: tensor<2x16x64xbf16>, %ids: tensor<2x16xi32>) -> tensor<512x64xf32> {
  // expected-error @+1 {{'model.embedding_grad' op dy element type 'bf16' differs from the result's 'f32'}}
  %dt = model.embedding_grad %dy[%ids] : (tensor<2x16x64xbf16>, tensor<2x16xi32>) -> tensor<512x64xf32>
  return %dt : tensor<512x64xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.position_embedding_grad
//===----------------------------------------------------------------------===//

// Tests PEG1: the position table gradient has dy's hidden size.
func.func @peg1_hidden_mismatch(%dy: tensor<2x16x64xf32>) -> tensor<128x32xf32> {
  // expected-error @+1 {{'model.position_embedding_grad' op dy must be [batch, seq, hidden] and the result [positions, hidden], found [2, 16, 64] and [128, 32]}}
  %dt = model.position_embedding_grad %dy : (tensor<2x16x64xf32>) -> tensor<128x32xf32>
  return %dt : tensor<128x32xf32>
}

// -----

// Tests PEG2: dy's sequence may not be longer than the position table.
func.func @peg2_sequence_too_long(%dy: tensor<2x16x64xf32>) -> tensor<8x64xf32> {
  // expected-error @+1 {{'model.position_embedding_grad' op sequence length 16 exceeds the table's 8 positions}}
  %dt = model.position_embedding_grad %dy : (tensor<2x16x64xf32>) -> tensor<8x64xf32>
  return %dt : tensor<8x64xf32>
}

// -----

// Tests PEG3: dy and the position table gradient have one element type.
func.func @peg3_element_type(%dy: tensor<2x16x64xf32>) -> tensor<128x64xf16> {
  // expected-error @+1 {{'model.position_embedding_grad' op dy element type 'f32' differs from the result's 'f16'}}
  %dt = model.position_embedding_grad %dy : (tensor<2x16x64xf32>) -> tensor<128x64xf16>
  return %dt : tensor<128x64xf16>
}

// -----

//===----------------------------------------------------------------------===//
// model.linear_grad_input
//===----------------------------------------------------------------------===//

// Tests LGI1: the weight of linear_grad_input has rank 2.
func.func @lgi1_weight_rank(%dy: tensor<2x64xf32>, %w: tensor<64xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'model.linear_grad_input' op dy must have rank >= 1 and the weight rank 2, found ranks 2 and 1}}
  %dx = model.linear_grad_input %dy, %w : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return %dx : tensor<2x64xf32>
}

// -----

// Tests LGI2: dy's columns match the weight's output dimension, which is dimension 0 with transpose_w.
func.func @lgi2_output_dim_mismatch(%dy: tensor<2x16x64xf32>, %w: tensor<128x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.linear_grad_input' op dy has 64 columns but the weight [128, 64] has 128 outputs}}
  %dx = model.linear_grad_input %dy, %w transpose_w : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x64xf32>
  return %dx : tensor<2x16x64xf32>
}

// -----

// Tests LGI3: dx replaces dy's last dimension by the weight's input dimension.
func.func @lgi3_result_shape(%dy: tensor<2x16x256xf32>, %w: tensor<64x256xf32>) -> tensor<2x16x256xf32> {
  // expected-error @+1 {{'model.linear_grad_input' op result shape is [2, 16, 256] but must be [2, 16, 64]}}
  %dx = model.linear_grad_input %dy, %w : (tensor<2x16x256xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32>
  return %dx : tensor<2x16x256xf32>
}

// -----

// Tests LGI4: dy, the weight and dx have one element type.
func.func @lgi4_element_type_mix(%dy: tensor<2x16x256xf32>, %w: tensor<64x256xbf16>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.linear_grad_input' op dy, weight and result must have one element type}}
  %dx = model.linear_grad_input %dy, %w : (tensor<2x16x256xf32>, tensor<64x256xbf16>) -> tensor<2x16x64xf32>
  return %dx : tensor<2x16x64xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.linear_grad_weight
//===----------------------------------------------------------------------===//

// Tests LGW1: x and dy agree in every dimension but the last.
func.func @lgw1_leading_dims_mismatch(%x: tensor<2x16x64xf32>, %dy: tensor<2x8x256xf32>) -> tensor<64x256xf32> {
  // expected-error @+1 {{'model.linear_grad_weight' op x [2, 16, 64] and dy [2, 8, 256] must agree in every dimension but the last}}
  %dw = model.linear_grad_weight %x, %dy : (tensor<2x16x64xf32>, tensor<2x8x256xf32>) -> tensor<64x256xf32>
  return %dw : tensor<64x256xf32>
}

// -----

// Tests LGW2: with transpose_w the weight gradient is [out, in].
func.func @lgw2_result_layout(%x: tensor<2x16x64xf32>, %dy: tensor<2x16x128xf32>) -> tensor<64x128xf32> {
  // expected-error @+1 {{'model.linear_grad_weight' op result shape is [64, 128] but must be [128, 64] ([out, in])}}
  %dw = model.linear_grad_weight %x, %dy transpose_w : (tensor<2x16x64xf32>, tensor<2x16x128xf32>) -> tensor<64x128xf32>
  return %dw : tensor<64x128xf32>
}

// -----

// Tests LGW3: x, dy and the weight gradient have one element type.
func.func @lgw3_element_type_mix(%x: tensor<2x16x64xf32>, %dy: tensor<2x16x256xf32>) -> tensor<64x256xbf16> {
  // expected-error @+1 {{'model.linear_grad_weight' op x, dy and result must have one element type}}
  %dw = model.linear_grad_weight %x, %dy : (tensor<2x16x64xf32>, tensor<2x16x256xf32>) -> tensor<64x256xbf16>
  return %dw : tensor<64x256xbf16>
}

// -----

//===----------------------------------------------------------------------===//
// model.bias_grad
//===----------------------------------------------------------------------===//

// Tests BG1: the bias gradient is [d] for dy's last dimension d.
func.func @bg1_result_shape(%dy: tensor<2x16x128xf32>) -> tensor<64xf32> {
  // expected-error @+1 {{'model.bias_grad' op result must be [d] for dy [2, 16, 128], found [64]}}
  %db = model.bias_grad %dy : (tensor<2x16x128xf32>) -> tensor<64xf32>
  return %db : tensor<64xf32>
}

// -----

// Tests BG2: the bias gradient has dy's element type.
func.func @bg2_element_type(%dy: tensor<2x16x128xbf16>) -> tensor<128xf32> {
  // expected-error @+1 {{'model.bias_grad' op result element type 'f32' differs from dy's 'bf16'}}
  %db = model.bias_grad %dy : (tensor<2x16x128xbf16>) -> tensor<128xf32>
  return %db : tensor<128xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.rms_norm_grad
//===----------------------------------------------------------------------===//

// Tests RNG1: the rms_norm_grad weight is [d] for x's last dimension d.
func.func @rng1_weight_shape(%x: tensor<2x16x64xf32>, %g: tensor<32xf32>, %dy: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<32xf32>) {
  // expected-error @+1 {{'model.rms_norm_grad' op weight is [32] but x's last dimension is 64}}
  %dx, %dg = model.rms_norm_grad %x, %g, %dy eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<32xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<32xf32>)
  return %dx, %dg : tensor<2x16x64xf32>, tensor<32xf32>
}

// -----

// Tests RNG2: dx has x's type.
func.func @rng2_dx_type(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %dy: tensor<2x16x64xf32>) -> (tensor<2x16x64xf16>, tensor<64xf32>) {
  // expected-error @+1 {{'model.rms_norm_grad' op dx is 'tensor<2x16x64xf16>' but x is 'tensor<2x16x64xf32>'}}
  %dx, %dg = model.rms_norm_grad %x, %g, %dy eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf16>, tensor<64xf32>)
  return %dx, %dg : tensor<2x16x64xf16>, tensor<64xf32>
}

// -----

// Tests RNG3: the rms_norm_grad eps is positive.
func.func @rng3_eps_not_positive(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %dy: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>) {
  // expected-error @+1 {{'model.rms_norm_grad' op eps is 0.000000e+00 but must be positive}}
  %dx, %dg = model.rms_norm_grad %x, %g, %dy eps = 0.0 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
  return %dx, %dg : tensor<2x16x64xf32>, tensor<64xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.layer_norm_grad
//===----------------------------------------------------------------------===//

// Tests LNG1: the layer_norm_grad weight has x's element type.
func.func @lng1_weight_element_type(%x: tensor<2x16x64xf32>, %g: tensor<64xbf16>, %dy: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xbf16>, tensor<64xbf16>) {
  // expected-error @+1 {{'model.layer_norm_grad' op weight element type 'bf16' differs from x's 'f32'}}
  %dx, %dg, %db = model.layer_norm_grad %x, %g, %dy eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xbf16>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xbf16>, tensor<64xbf16>)
  return %dx, %dg, %db : tensor<2x16x64xf32>, tensor<64xbf16>, tensor<64xbf16>
}

// -----

// Tests LNG2: dbias has the weight's type.
func.func @lng2_dbias_type(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %dy: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<32xf32>) {
  // expected-error @+1 {{'model.layer_norm_grad' op dbias is 'tensor<32xf32>' but the weight is 'tensor<64xf32>'}}
  %dx, %dg, %db = model.layer_norm_grad %x, %g, %dy eps = 1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<32xf32>)
  return %dx, %dg, %db : tensor<2x16x64xf32>, tensor<64xf32>, tensor<32xf32>
}

// -----

// Tests LNG3: the layer_norm_grad eps is positive.
func.func @lng3_eps_not_positive(%x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %dy: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) {
  // expected-error @+1 {{'model.layer_norm_grad' op eps is -1.000000e-05 but must be positive}}
  %dx, %dg, %db = model.layer_norm_grad %x, %g, %dy eps = -1.0e-05 : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
  return %dx, %dg, %db : tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.rope_grad
//===----------------------------------------------------------------------===//

// Tests R1 through rope_grad: dy has rank 3.
func.func @ropeg_r1_rank(%dy: tensor<16x64xf32>) -> tensor<16x64xf32> {
  // expected-error @+1 {{'model.rope_grad' op dy has rank 2 but must have rank 3}}
  %dx = model.rope_grad %dy head_dim = 16 theta = 1.0e+04 : (tensor<16x64xf32>) -> tensor<16x64xf32>
  return %dx : tensor<16x64xf32>
}

// -----

// Tests R2 through rope_grad: head_dim divides dy's last dimension.
func.func @ropeg_r2_head_dim_not_divisor(%dy: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.rope_grad' op head_dim = 48 does not divide dy's 64 columns}}
  %dx = model.rope_grad %dy head_dim = 48 theta = 1.0e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %dx : tensor<2x16x64xf32>
}

// -----

// Tests R3 through rope_grad: theta is positive.
func.func @ropeg_r3_theta_not_positive(%dy: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.rope_grad' op theta is -1.000000e+04 but must be positive}}
  %dx = model.rope_grad %dy head_dim = 16 theta = -1.0e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %dx : tensor<2x16x64xf32>
}

// -----

// Tests R4 through rope_grad: dx has dy's type.
func.func @ropeg_r4_result_type(%dy: tensor<2x16x64xf32>) -> tensor<2x16x64xbf16> {
  // expected-error @+1 {{'model.rope_grad' op result is 'tensor<2x16x64xbf16>' but must be dy's type 'tensor<2x16x64xf32>'}}
  %dx = model.rope_grad %dy head_dim = 16 theta = 1.0e+04 : (tensor<2x16x64xf32>) -> tensor<2x16x64xbf16>
  return %dx : tensor<2x16x64xbf16>
}

// -----

//===----------------------------------------------------------------------===//
// model.attention_grad
//===----------------------------------------------------------------------===//

// Tests AG1 (A1): causal attention_grad needs as many query positions as key positions.
func.func @ag1_a1_causal_sequence_mismatch(%q: tensor<2x16x64xf32>, %k: tensor<2x8x64xf32>, %v: tensor<2x8x64xf32>, %o: tensor<2x16x64xf32>, %do: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  // expected-error @+1 {{'model.attention_grad' op causal attention needs as many query positions as key positions, found 16 and 8}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 4 kv_heads = 4 scale = 0.25 causal : (tensor<2x16x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>)
  return %dq, %dk, %dv : tensor<2x16x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// -----

// Tests AG1 (A2): kv_heads divides heads in attention_grad.
func.func @ag1_a2_kv_heads_not_divisor(%q: tensor<2x16x64xf32>, %k: tensor<2x16x48xf32>, %v: tensor<2x16x48xf32>, %o: tensor<2x16x64xf32>, %do: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>) {
  // expected-error @+1 {{'model.attention_grad' op kv_heads = 3 does not divide heads = 4}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 4 kv_heads = 3 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>)
  return %dq, %dk, %dv : tensor<2x16x64xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>
}

// -----

// Tests AG1 (A3): k and v of attention_grad have kv_heads x head_dim columns.
func.func @ag1_a3_kv_columns(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x16x64xf32>, %o: tensor<2x16x64xf32>, %do: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  // expected-error @+1 {{'model.attention_grad' op k and v must have kv_heads x head_dim = 2 x 16 = 32 columns, found 64 and 64}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 4 kv_heads = 2 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  return %dq, %dk, %dv : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// -----

// Tests AG1 (A4): the attention_grad dropout rate is below 1.
func.func @ag1_a4_dropout_out_of_range(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x16x64xf32>, %o: tensor<2x16x64xf32>, %do: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  // expected-error @+1 {{'model.attention_grad' op dropout is 1.000000e+00 but must be in [0, 1)}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 4 kv_heads = 4 scale = 0.25 {dropout = 1.0 : f64} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  return %dq, %dk, %dv : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// -----

// Tests AG2: out and dout have q's type.
func.func @ag2_dout_type(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x16x64xf32>, %o: tensor<2x16x64xf32>, %do: tensor<2x16x64xbf16>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) {
  // expected-error @+1 {{'model.attention_grad' op out and dout must have q's type 'tensor<2x16x64xf32>', found 'tensor<2x16x64xf32>' and 'tensor<2x16x64xbf16>'}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 4 kv_heads = 4 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xbf16>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  return %dq, %dk, %dv : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
}

// -----

// Tests AG3: dk has k's type.
func.func @ag3_dk_type(%q: tensor<2x16x64xf32>, %k: tensor<2x16x32xf32>, %v: tensor<2x16x32xf32>, %o: tensor<2x16x64xf32>, %do: tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x32xf32>) {
  // expected-error @+1 {{'model.attention_grad' op dq, dk and dv must have the types of q, k and v}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %v, %o, %do heads = 4 kv_heads = 2 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x32xf32>)
  return %dq, %dk, %dv : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x32xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.qkv_concat
//===----------------------------------------------------------------------===//

// Tests QS1 through qkv_concat: the fused result has (heads + 2 kv_heads) x head_dim columns.
func.func @qc_qs1_result_columns(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x16x64xf32>) -> tensor<2x16x128xf32> {
  // expected-error @+1 {{'model.qkv_concat' op fused qkv must be [batch, seq, 192] for (4 + 2 x 4) x 16 columns, found [2, 16, 128]}}
  %qkv = model.qkv_concat %q, %k, %v heads = 4 kv_heads = 4 head_dim = 16 layout = grouped : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x128xf32>
  return %qkv : tensor<2x16x128xf32>
}

// -----

// Tests QS2 through qkv_concat: the per_head layout needs as many kv heads as query heads.
func.func @qc_qs2_per_head_needs_equal_heads(%q: tensor<2x16x64xf32>, %k: tensor<2x16x32xf32>, %v: tensor<2x16x32xf32>) -> tensor<2x16x128xf32> {
  // expected-error @+1 {{'model.qkv_concat' op per_head layout needs kv_heads = heads, found 2 and 4}}
  %qkv = model.qkv_concat %q, %k, %v heads = 4 kv_heads = 2 head_dim = 16 layout = per_head : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> tensor<2x16x128xf32>
  return %qkv : tensor<2x16x128xf32>
}

// -----

// Tests QS3 through qkv_concat: v is [batch, seq, kv_heads x head_dim] of the fused element type.
func.func @qc_qs3_operand_shape(%q: tensor<2x16x64xf32>, %k: tensor<2x16x32xf32>, %v: tensor<2x16x64xf32>) -> tensor<2x16x128xf32> {
  // expected-error @+1 {{'model.qkv_concat' op v is 'tensor<2x16x64xf32>' but must be [2, 16, 32] of 'f32'}}
  %qkv = model.qkv_concat %q, %k, %v heads = 4 kv_heads = 2 head_dim = 16 layout = grouped : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<2x16x64xf32>) -> tensor<2x16x128xf32>
  return %qkv : tensor<2x16x128xf32>
}

// -----

//===----------------------------------------------------------------------===//
// Elementwise gradient ops
//===----------------------------------------------------------------------===//

// Tests SWG1: swiglu_grad's operands and results have one type.
func.func @swg1_result_type(%gate: tensor<2x16x176xf32>, %up: tensor<2x16x176xf32>, %dy: tensor<2x16x176xf32>) -> (tensor<2x16x176xf32>, tensor<2x16x88xf32>) {
  // expected-error @+1 {{'model.swiglu_grad' op operands and results must all be 'tensor<2x16x176xf32>', found 'tensor<2x16x88xf32>'}}
  %dg, %du = model.swiglu_grad %gate, %up, %dy : (tensor<2x16x176xf32>, tensor<2x16x176xf32>, tensor<2x16x176xf32>) -> (tensor<2x16x176xf32>, tensor<2x16x88xf32>)
  return %dg, %du : tensor<2x16x176xf32>, tensor<2x16x88xf32>
}

// -----

// Tests SWG2: the packed gradient's dy is the operand with the last
// dimension halved.
func.func @swg2_dy(%x: tensor<2x16x352xf32>, %dy: tensor<2x16x352xf32>) -> tensor<2x16x352xf32> {
  // expected-error @+1 {{'model.swiglu_grad' op dy is 'tensor<2x16x352xf32>' but must be 'tensor<2x16x176xf32>'}}
  %dx = model.swiglu_grad %x, %dy : (tensor<2x16x352xf32>, tensor<2x16x352xf32>) -> tensor<2x16x352xf32>
  return %dx : tensor<2x16x352xf32>
}

// -----

// Tests SWG2: a packed operand has one gradient.
func.func @swg2_two_results(%x: tensor<2x16x352xf32>, %dy: tensor<2x16x176xf32>) -> (tensor<2x16x352xf32>, tensor<2x16x352xf32>) {
  // expected-error @+1 {{'model.swiglu_grad' op with a packed operand has one result, not two}}
  %a, %b = model.swiglu_grad %x, %dy : (tensor<2x16x352xf32>, tensor<2x16x176xf32>) -> (tensor<2x16x352xf32>, tensor<2x16x352xf32>)
  return %a, %b : tensor<2x16x352xf32>, tensor<2x16x352xf32>
}

// -----

// Tests GG1: gelu_grad's dy has x's type.
func.func @gg1_dy_type(%x: tensor<2x16x256xf32>, %dy: tensor<2x16x256xbf16>) -> tensor<2x16x256xf32> {
  // expected-error @+1 {{'model.gelu_grad' op dy is 'tensor<2x16x256xbf16>' but x is 'tensor<2x16x256xf32>'}}
  %dx = model.gelu_grad %x, %dy tanh : (tensor<2x16x256xf32>, tensor<2x16x256xbf16>) -> tensor<2x16x256xf32>
  return %dx : tensor<2x16x256xf32>
}

// -----

//===----------------------------------------------------------------------===//
// model.cross_entropy_grad
//===----------------------------------------------------------------------===//

// Tests CEG1: the targets are the logits' shape without the last dimension.
func.func @ceg1_targets_shape(%logits: tensor<2x16x512xf32>, %targets: tensor<2x8xi32>, %dloss: tensor<f32>) -> tensor<2x16x512xf32> {
  // expected-error @+1 {{'model.cross_entropy_grad' op targets are [2, 8] but the logits [2, 16, 512] need [2, 16]}}
  %d = model.cross_entropy_grad %logits, %targets, %dloss ignore_index = -100 : (tensor<2x16x512xf32>, tensor<2x8xi32>, tensor<f32>) -> tensor<2x16x512xf32>
  return %d : tensor<2x16x512xf32>
}

// -----

// Tests CEG2: dloss of bf16 logits is a rank-0 f32 tensor.
func.func @ceg2_dloss_type(%logits: tensor<2x16x512xbf16>, %targets: tensor<2x16xi32>, %dloss: tensor<bf16>) -> tensor<2x16x512xbf16> {
  // expected-error @+1 {{'model.cross_entropy_grad' op dloss is 'tensor<bf16>' but the loss of these logits is 'tensor<f32>'}}
  %d = model.cross_entropy_grad %logits, %targets, %dloss ignore_index = -100 : (tensor<2x16x512xbf16>, tensor<2x16xi32>, tensor<bf16>) -> tensor<2x16x512xbf16>
  return %d : tensor<2x16x512xbf16>
}

// -----

// Tests CEG3: the logits' gradient has the logits' type.
func.func @ceg3_result_type(%logits: tensor<2x16x512xbf16>, %targets: tensor<2x16xi32>, %dloss: tensor<f32>) -> tensor<2x16x512xf32> {
  // expected-error @+1 {{'model.cross_entropy_grad' op result is 'tensor<2x16x512xf32>' but must be the logits' type 'tensor<2x16x512xbf16>'}}
  %d = model.cross_entropy_grad %logits, %targets, %dloss ignore_index = -100 : (tensor<2x16x512xbf16>, tensor<2x16xi32>, tensor<f32>) -> tensor<2x16x512xf32>
  return %d : tensor<2x16x512xf32>
}

// -----

// Tests GN1: grad_norm needs at least one gradient.
func.func @gn1_no_gradients() {
  // expected-error @+1 {{'model.grad_norm' op needs at least one gradient}}
  %n, %s = model.grad_norm max_norm = 1.0 : () -> (tensor<f32>, tensor<f32>)
  return
}

// -----

// Tests GN2: max_norm must be finite and non-negative.
func.func @gn2_negative_max_norm(%g: tensor<4xf32>) {
  // expected-error @+1 {{'model.grad_norm' op max_norm is -1.000000e+00 but must be finite and >= 0}}
  %n, %s = model.grad_norm %g max_norm = -1.0 : (tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
  return
}

// -----

// Tests AW1: the moments must have the parameter's type.
func.func @aw1_moment_type(%p: tensor<4xf32>, %m: tensor<8xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{'model.adamw' op parameter, gradient, moments and results must all be 'tensor<4xf32>', found 'tensor<8xf32>'}}
  %a:3 = model.adamw %p, %p, %m, %p, %lr, %t, %lr beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4xf32>, tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// Tests AW2: the step must be a rank-0 i64.
func.func @aw2_step_type(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<f32>) {
  // expected-error @+1 {{'model.adamw' op operand #5 must be ranked tensor of 64-bit signless integer values, but got 'tensor<f32>'}}
  %a:3 = model.adamw %p, %p, %p, %p, %lr, %t, %lr beta1 = 0.9 beta2 = 0.95 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// Tests AW3: beta2 must be below 1.
func.func @aw3_beta2(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{'model.adamw' op beta1 = 9.000000e-01 and beta2 = 1.000000e+00 must be in [0, 1)}}
  %a:3 = model.adamw %p, %p, %p, %p, %lr, %t, %lr beta1 = 0.9 beta2 = 1.0 eps = 1.0e-08 weight_decay = 0.1 : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// Tests QS3 via qkv_concat: with a dynamic fused shape, q and k must still
// agree in batch and sequence length.
func.func @qc_qs3_dynamic_parts_disagree(%q: tensor<2x16x64xf32>, %k: tensor<3x8x32xf32>) {
  // expected-error @+1 {{'model.qkv_concat' op q [2, 16, 64] and [3, 8, 32] disagree in batch or sequence length}}
  %f = model.qkv_concat %q, %k, %k heads = 4 kv_heads = 2 head_dim = 16 layout = grouped : (tensor<2x16x64xf32>, tensor<3x8x32xf32>, tensor<3x8x32xf32>) -> tensor<?x?x128xf32>
  return
}

// -----

// Tests LGW1: rank-0 operands are named as such.
func.func @lgw1_rank0(%x: tensor<f32>) {
  // expected-error @+1 {{'model.linear_grad_weight' op x must have rank >= 1, found rank 0}}
  %w = model.linear_grad_weight %x, %x : (tensor<f32>, tensor<f32>) -> tensor<1x1xf32>
  return
}

// -----

// Tests CL1: an all-reduce needs at least one operand.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @cl1_no_operand() {
  // expected-error @+1 {{'model.all_reduce' op needs at least one operand}}
  model.all_reduce over @mesh ["dp"] reason = "r" : () -> ()
  return
}

// -----

// Tests CL1: each result has its operand's type.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @cl1_result_type(%a: tensor<4xf32>) {
  // expected-error @+1 {{'model.all_reduce' op result 0 is 'tensor<8xf32>' but its operand is 'tensor<4xf32>'}}
  %r = model.all_reduce %a over @mesh ["dp"] reason = "r" : (tensor<4xf32>) -> tensor<8xf32>
  return
}

// -----

// Tests CL1: as many results as operands.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @cl1_result_count(%a: tensor<4xf32>) {
  // expected-error @+1 {{'model.all_reduce' op has 2 results for 1 operands}}
  %r:2 = model.all_reduce %a over @mesh ["dp"] reason = "r" : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// Tests CL2: the mesh must exist.
func.func @cl2_no_mesh(%a: tensor<4xf32>) {
  // expected-error @+1 {{'model.all_reduce' op mesh @nowhere is not a model.mesh of the module}}
  %r = model.all_reduce %a over @nowhere ["dp"] reason = "r" : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests CL2: the axes must be axes of the mesh.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @cl2_unknown_axis(%a: tensor<4xf32>) {
  // expected-error @+1 {{'model.all_reduce' op axis "tp" is not an axis of mesh @mesh}}
  %r = model.all_reduce %a over @mesh ["tp"] reason = "r" : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests CL2: an axis appears once.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @cl2_repeated_axis(%a: tensor<4xf32>) {
  // expected-error @+1 {{'model.all_reduce' op names axis "dp" twice}}
  %r = model.all_reduce %a over @mesh ["dp", "dp"] reason = "r" : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests CL2: at least one axis.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @cl2_no_axis(%a: tensor<4xf32>) {
  // expected-error @+1 {{'model.all_reduce' op needs at least one mesh axis}}
  %r = model.all_reduce %a over @mesh [] reason = "r" : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests CL3: a collective says why it is there.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @cl3_no_reason(%a: tensor<4xf32>) {
  // expected-error @+1 {{'model.all_reduce' op needs a reason (why the collective is there)}}
  %r = model.all_reduce %a over @mesh ["dp"] reason = "" : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Tensor-parallel slices
//===----------------------------------------------------------------------===//

// Tests E4: an embedding's vocab_axis is an axis of the module's mesh.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @e4_unknown_vocab_axis(%t: tensor<8x4xf32>, %ids: tensor<2x3xi32>) {
  // expected-error @+1 {{'model.embedding' op vocab_axis = "tp" is not an axis of the module's model.mesh}}
  %e = model.embedding %t[%ids] vocab_axis = "tp" : (tensor<8x4xf32>, tensor<2x3xi32>) -> tensor<2x3x4xf32>
  return
}

// -----

// Tests EG4: an embedding gradient's vocab_axis is an axis of the mesh.
func.func @eg4_no_mesh(%dy: tensor<2x3x4xf32>, %ids: tensor<2x3xi32>) {
  // expected-error @+1 {{'model.embedding_grad' op vocab_axis = "tp" is not an axis of the module's model.mesh}}
  %g = model.embedding_grad %dy[%ids] vocab_axis = "tp" : (tensor<2x3x4xf32>, tensor<2x3xi32>) -> tensor<8x4xf32>
  return
}

// -----

// Tests LIN6: bias_scale is in (0, 1].
func.func @lin6_scale_range(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'model.linear' op bias_scale is 2.000000e+00 but must be in (0, 1]}}
  %y = model.linear %x, %w, %b bias_scale = 2.0 : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests LIN6: bias_scale needs a bias.
func.func @lin6_scale_without_bias(%x: tensor<2x4xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{'model.linear' op has a bias_scale but no bias}}
  %y = model.linear %x, %w bias_scale = 0.5 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests A6: head_axis, global_heads and global_kv_heads come together.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @a6_partial_slice(%q: tensor<1x4x32xf32>, %k: tensor<1x4x16xf32>) {
  // expected-error @+1 {{'model.attention' op head_axis, global_heads and global_kv_heads must be given together}}
  %o = model.attention %q, %k, %k heads = 2 kv_heads = 1 scale = 0.25 head_axis = "tp" : (tensor<1x4x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x32xf32>
  return
}

// -----

// Tests A6: the global heads are the local ones times the axis size.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @a6_global_heads(%q: tensor<1x4x32xf32>, %k: tensor<1x4x16xf32>) {
  // expected-error @+1 {{'model.attention' op global_heads = 8 but heads = 2 on each of the 2 ranks of "tp" make 4}}
  %o = model.attention %q, %k, %k heads = 2 kv_heads = 1 scale = 0.25 head_axis = "tp" global_heads = 8 global_kv_heads = 2 : (tensor<1x4x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x32xf32>
  return
}

// -----

// Tests A6: kv heads are split over the axis or replicated.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @a6_global_kv_heads(%q: tensor<1x4x32xf32>, %k: tensor<1x4x16xf32>) {
  // expected-error @+1 {{'model.attention' op global_kv_heads = 4 but kv_heads = 1 must be split over the 2 ranks of "tp" (2) or replicated (1)}}
  %o = model.attention %q, %k, %k heads = 2 kv_heads = 1 scale = 0.25 head_axis = "tp" global_heads = 4 global_kv_heads = 4 : (tensor<1x4x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x32xf32>
  return
}

// -----

// Tests A6: with a slice, A2's divisibility is that of the global counts
// (1 local query head with 2 replicated kv heads is fine; 4 of 3 is not).
model.mesh @mesh axes = ["tp"] sizes = [4]
func.func @a6_global_divisibility(%q: tensor<1x4x16xf32>, %k: tensor<1x4x48xf32>) {
  // expected-error @+1 {{'model.attention' op global_kv_heads = 3 does not divide global_heads = 4}}
  %o = model.attention %q, %k, %k heads = 1 kv_heads = 3 scale = 0.25 head_axis = "tp" global_heads = 4 global_kv_heads = 3 : (tensor<1x4x16xf32>, tensor<1x4x48xf32>, tensor<1x4x48xf32>) -> tensor<1x4x16xf32>
  return
}

// -----

// Tests AG4: the gradient checks A6 too.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @ag4_global_heads(%q: tensor<1x4x32xf32>, %k: tensor<1x4x16xf32>) {
  // expected-error @+1 {{'model.attention_grad' op global_heads = 2 but heads = 2 on each of the 2 ranks of "tp" make 4}}
  %dq, %dk, %dv = model.attention_grad %q, %k, %k, %q, %q heads = 2 kv_heads = 1 scale = 0.25 head_axis = "tp" global_heads = 2 global_kv_heads = 2 : (tensor<1x4x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16xf32>, tensor<1x4x32xf32>, tensor<1x4x32xf32>) -> (tensor<1x4x32xf32>, tensor<1x4x16xf32>, tensor<1x4x16xf32>)
  return
}

// -----

// Tests CEM1: the row maxima drop the logits' last dimension.
func.func @cem1_shape(%l: tensor<2x3x8xf32>) {
  // expected-error @+1 {{'model.cross_entropy_max' op row_max is 'tensor<2x3x8xf32>' but must be 'tensor<2x3xf32>'}}
  %m = model.cross_entropy_max %l : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

// Tests CEP1: the targets are the logits' rows.
func.func @cep1_targets(%l: tensor<2x3x8xf32>, %t: tensor<2x4xi32>, %m: tensor<2x3xf32>) {
  // expected-error @+1 {{'model.cross_entropy_partial' op targets are [2, 4] but the logits [2, 3, 8] need [2, 3]}}
  %p = model.cross_entropy_partial %l, %t, %m ignore_index = -100 : (tensor<2x3x8xf32>, tensor<2x4xi32>, tensor<2x3xf32>) -> tensor<2x3x2xf32>
  return
}

// -----

// Tests CEP2: row_max has the rows' shape and the logits' element type.
func.func @cep2_row_max(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>, %m: tensor<2x3xf64>) {
  // expected-error @+1 {{'model.cross_entropy_partial' op row_max is 'tensor<2x3xf64>' but must be 'tensor<2x3xf32>'}}
  %p = model.cross_entropy_partial %l, %t, %m ignore_index = -100 : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<2x3xf64>) -> tensor<2x3x2xf32>
  return
}

// -----

// Tests CEP3: the partials are pairs per row.
func.func @cep3_pairs(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>, %m: tensor<2x3xf32>) {
  // expected-error @+1 {{'model.cross_entropy_partial' op the result is 'tensor<2x3x3xf32>' but must be 'tensor<2x3x2xf32>'}}
  %p = model.cross_entropy_partial %l, %t, %m ignore_index = -100 : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<2x3xf32>) -> tensor<2x3x3xf32>
  return
}

// -----

// Tests CEP3: the partials of bf16 logits are f32, the loss's type.
func.func @cep3_bf16(%l: tensor<2x3x8xbf16>, %t: tensor<2x3xi32>, %m: tensor<2x3xbf16>) {
  // expected-error @+1 {{'model.cross_entropy_partial' op the result is 'tensor<2x3x2xbf16>' but must be 'tensor<2x3x2xf32>'}}
  %p = model.cross_entropy_partial %l, %t, %m ignore_index = -100 : (tensor<2x3x8xbf16>, tensor<2x3xi32>, tensor<2x3xbf16>) -> tensor<2x3x2xbf16>
  return
}

// -----

// Tests CEF1: the sums of bf16 logits are f32, the loss type of bf16.
func.func @cef1_bf16_sums(%s: tensor<2x3x2xbf16>, %m: tensor<2x3xbf16>, %t: tensor<2x3xi32>) {
  // expected-error @+1 {{'model.cross_entropy_finish' op the sums' tensor is 'tensor<2x3x2xbf16>' but must be 'tensor<2x3x2xf32>'}}
  %loss, %lse = model.cross_entropy_finish %s, %m, %t ignore_index = -100 : (tensor<2x3x2xbf16>, tensor<2x3xbf16>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3xf32>)
  return
}

// -----

// Tests CEP4: vocab_axis is an axis of the mesh.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @cep4_axis(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>, %m: tensor<2x3xf32>) {
  // expected-error @+1 {{'model.cross_entropy_partial' op vocab_axis = "tp" is not an axis of the module's model.mesh}}
  %p = model.cross_entropy_partial %l, %t, %m ignore_index = -100 vocab_axis = "tp" : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<2x3xf32>) -> tensor<2x3x2xf32>
  return
}

// -----

// Tests CEF1: the sums are pairs per row.
func.func @cef1_sums(%s: tensor<2x3x4xf32>, %m: tensor<2x3xf32>, %t: tensor<2x3xi32>) {
  // expected-error @+1 {{'model.cross_entropy_finish' op sums are [2, 3, 4] but need rank >= 2 and a last dimension of 2}}
  %loss, %lse = model.cross_entropy_finish %s, %m, %t ignore_index = -100 : (tensor<2x3x4xf32>, tensor<2x3xf32>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3xf32>)
  return
}

// -----

// Tests CEF2: the log-sum-exp of bf16 logits' (f32) sums is f32, as the loss.
func.func @cef2_lse(%s: tensor<2x3x2xf32>, %m: tensor<2x3xbf16>, %t: tensor<2x3xi32>) {
  // expected-error @+1 {{'model.cross_entropy_finish' op lse is 'tensor<2x3xbf16>' but must be 'tensor<2x3xf32>'}}
  %loss, %lse = model.cross_entropy_finish %s, %m, %t ignore_index = -100 : (tensor<2x3x2xf32>, tensor<2x3xbf16>, tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3xbf16>)
  return
}

// -----

// Tests CEG4: lse has the rows' shape.
func.func @ceg4_lse(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>, %d: tensor<f32>, %lse: tensor<2xf32>) {
  // expected-error @+1 {{'model.cross_entropy_grad' op lse is 'tensor<2xf32>' but must be 'tensor<2x3xf32>'}}
  %g = model.cross_entropy_grad %l, %t, %d lse %lse ignore_index = -100 : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<f32>, tensor<2xf32>) -> tensor<2x3x8xf32>
  return
}

// -----

// Tests CEG5: a vocabulary slice needs the global log-sum-exp.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @ceg5_no_lse(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>, %d: tensor<f32>) {
  // expected-error @+1 {{'model.cross_entropy_grad' op vocab_axis needs the global lse operand}}
  %g = model.cross_entropy_grad %l, %t, %d ignore_index = -100 vocab_axis = "tp" : (tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<f32>) -> tensor<2x3x8xf32>
  return
}

// -----

// Tests GN3: mesh, axes and replicated come together (a pretty form cannot
// omit one, so the generic form does).
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @gn3_partial(%g: tensor<4xf32>) {
  // expected-error @+1 {{'model.grad_norm' op mesh, axes and replicated must be given together}}
  %n, %s = "model.grad_norm"(%g) {max_norm = 1.0 : f64, mesh = @mesh, axes = ["tp"]} : (tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
  return
}

// -----

// Tests GN3: one replicated entry per gradient.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @gn3_entries(%g: tensor<4xf32>) {
  // expected-error @+1 {{'model.grad_norm' op replicated has 2 entries for 1 gradients}}
  %n, %s = model.grad_norm %g max_norm = 1.0 over @mesh ["tp"] replicated = [true, false] : (tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
  return
}

// -----

// Tests GN3: the axes are axes of the mesh.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @gn3_axis(%g: tensor<4xf32>) {
  // expected-error @+1 {{'model.grad_norm' op axis "dp" is not an axis of mesh @mesh}}
  %n, %s = model.grad_norm %g max_norm = 1.0 over @mesh ["dp"] replicated = [false] : (tensor<4xf32>) -> (tensor<f32>, tensor<f32>)
  return
}

// -----

// Tests CG1: a gather keeps the element type.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @cg1_element_type(%x: tensor<1x4x8xf32>) {
  // expected-error @+1 {{'model.all_gather' op operand 'tensor<1x4x8xf32>' and result 'tensor<1x8x8xf64>' must have one element type and rank}}
  %g = model.all_gather %x over @mesh ["tp"] dim = 1 reason = "r" : (tensor<1x4x8xf32>) -> tensor<1x8x8xf64>
  return
}

// -----

// Tests CG1: dim is a dimension.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @cg1_dim(%x: tensor<1x4x8xf32>) {
  // expected-error @+1 {{'model.all_gather' op dim = 3 is not a dimension of 'tensor<1x4x8xf32>'}}
  %g = model.all_gather %x over @mesh ["tp"] dim = 3 reason = "r" : (tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  return
}

// -----

// Tests CG2: the axes are axes of the mesh.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @cg2_axis(%x: tensor<1x4x8xf32>) {
  // expected-error @+1 {{'model.all_gather' op axis "dp" is not an axis of mesh @mesh}}
  %g = model.all_gather %x over @mesh ["dp"] dim = 1 reason = "r" : (tensor<1x4x8xf32>) -> tensor<1x8x8xf32>
  return
}

// -----

// Tests CG3: the gathered dimension is the slices' times the group.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @cg3_size(%x: tensor<1x4x8xf32>) {
  // expected-error @+1 {{'model.all_gather' op result is [1, 12, 8] but 2 ranks' slices of [1, 4, 8] along dim 1 make [1, 8, 8]}}
  %g = model.all_gather %x over @mesh ["tp"] dim = 1 reason = "r" : (tensor<1x4x8xf32>) -> tensor<1x12x8xf32>
  return
}

// -----

// Tests CG4: a gather says why it is there.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @cg4_reason(%x: tensor<1x4x8xf32>) {
  // expected-error @+1 {{'model.all_gather' op needs a reason (why the collective is there)}}
  %g = model.all_gather %x over @mesh ["tp"] dim = 1 reason = "" : (tensor<1x4x8xf32>) -> tensor<1x8x8xf32>
  return
}

// -----

// Tests RS1: a reduce-scatter keeps the rank.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @rs1_rank(%x: tensor<1x8x8xf32>) {
  // expected-error @+1 {{'model.reduce_scatter' op operand 'tensor<1x8x8xf32>' and result 'tensor<4x8xf32>' must have one element type and rank}}
  %s = model.reduce_scatter %x over @mesh ["tp"] dim = 1 reason = "r" : (tensor<1x8x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests RS2: the mesh exists.
func.func @rs2_mesh(%x: tensor<1x8x8xf32>) {
  // expected-error @+1 {{'model.reduce_scatter' op mesh @mesh is not a model.mesh of the module}}
  %s = model.reduce_scatter %x over @mesh ["tp"] dim = 1 reason = "r" : (tensor<1x8x8xf32>) -> tensor<1x4x8xf32>
  return
}

// -----

// Tests RS3: each rank keeps a 1/group part along dim.
model.mesh @mesh axes = ["tp"] sizes = [4]
func.func @rs3_size(%x: tensor<1x8x8xf32>) {
  // expected-error @+1 {{'model.reduce_scatter' op operand is [1, 8, 8] but 4 ranks' slices of [1, 4, 8] along dim 1 make [1, 16, 8]}}
  %s = model.reduce_scatter %x over @mesh ["tp"] dim = 1 reason = "r" : (tensor<1x8x8xf32>) -> tensor<1x4x8xf32>
  return
}

// -----

// Tests RS4: a reduce-scatter says why it is there.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @rs4_reason(%x: tensor<1x8x8xf32>) {
  // expected-error @+1 {{'model.reduce_scatter' op needs a reason (why the collective is there)}}
  %s = model.reduce_scatter %x over @mesh ["tp"] dim = 1 reason = "" : (tensor<1x8x8xf32>) -> tensor<1x4x8xf32>
  return
}

// -----

// Tests PE4: the sequence axis divides the sequence.
model.mesh @mesh axes = ["tp"] sizes = [4]
func.func @pe4_divides(%t: tensor<16x8xf32>, %ids: tensor<1x6xi32>) {
  // expected-error @+1 {{'model.position_embedding' op seq_axis "tp" of 4 ranks does not divide the sequence length 6}}
  %p = model.position_embedding %t for %ids seq_axis = "tp" : (tensor<16x8xf32>, tensor<1x6xi32>) -> tensor<1x2x8xf32>
  return
}

// -----

// Tests PE3: with seq_axis, the result is this rank's slice of the sequence.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @pe3_slice(%t: tensor<16x8xf32>, %ids: tensor<1x6xi32>) {
  // expected-error @+1 {{'model.position_embedding' op result is 'tensor<1x6x8xf32>' but must be [1, 3, 8] of 'f32'}}
  %p = model.position_embedding %t for %ids seq_axis = "tp" : (tensor<16x8xf32>, tensor<1x6xi32>) -> tensor<1x6x8xf32>
  return
}

// -----

// Tests PEG2 and PEG4: with seq_axis, the whole sequence fits the table.
model.mesh @mesh axes = ["tp"] sizes = [4]
func.func @peg2_slices(%dy: tensor<1x6x8xf32>) {
  // expected-error @+1 {{'model.position_embedding_grad' op sequence length 24 exceeds the table's 16 positions}}
  %g = model.position_embedding_grad %dy seq_axis = "tp" : (tensor<1x6x8xf32>) -> tensor<16x8xf32>
  return
}

// -----

// Tests D3: a sequence slice has a sequence.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @d3_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{'model.dropout' op seq_axis needs x of rank >= 2, found 'tensor<8xf32>'}}
  %d = model.dropout %x rate = 0.1 seq_axis = "tp" : (tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

// Tests D3: the sequence axis is an axis of the mesh.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @d3_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'model.dropout' op seq_axis = "tp" is not an axis of the module's model.mesh}}
  %d = model.dropout %x rate = 0.1 seq_axis = "tp" : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// Tests D4: a slice of the last dimension has a rank of at least 2.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @d4_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{'model.dropout' op feature_axis needs x of rank >= 2, found 'tensor<8xf32>'}}
  %d = model.dropout %x rate = 0.1 feature_axis = "tp" : (tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

// Tests D4: a slice of the last dimension is not also a sequence slice.
model.mesh @mesh axes = ["tp"] sizes = [2]
func.func @d4_both(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'model.dropout' op has both seq_axis and feature_axis: x is a slice of one or the other}}
  %d = model.dropout %x rate = 0.1 seq_axis = "tp" feature_axis = "tp" : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

// Tests D4: the feature axis is an axis of the mesh.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @d4_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'model.dropout' op feature_axis = "tp" is not an axis of the module's model.mesh}}
  %d = model.dropout %x rate = 0.1 feature_axis = "tp" : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Inference ops: model.rope_at, model.attention_cached, model.take_rows,
// model.sample
//===----------------------------------------------------------------------===//

// Tests RA1: rope_at's positions are [batch, seq] of x.
func.func @ra1_positions(%x: tensor<2x4x64xf32>, %p: tensor<2x3xi32>) -> tensor<2x4x64xf32> {
  // expected-error @+1 {{'model.rope_at' op positions are [2, 3] but must be [batch, seq] of x, [2, 4]}}
  %r = model.rope_at %x, %p head_dim = 16 theta = 1.0e+04 : (tensor<2x4x64xf32>, tensor<2x3xi32>) -> tensor<2x4x64xf32>
  return %r : tensor<2x4x64xf32>
}

// -----

// Tests RA2: rope_at's head_dim is even.
func.func @ra2_odd_head_dim(%x: tensor<2x4x63xf32>, %p: tensor<2x4xi32>) -> tensor<2x4x63xf32> {
  // expected-error @+1 {{'model.rope_at' op head_dim is 7 but must be even and >= 2}}
  %r = model.rope_at %x, %p head_dim = 7 theta = 1.0e+04 : (tensor<2x4x63xf32>, tensor<2x4xi32>) -> tensor<2x4x63xf32>
  return %r : tensor<2x4x63xf32>
}

// -----

// Tests RA3: rope_at's theta is positive.
func.func @ra3_theta(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) -> tensor<2x4x64xf32> {
  // expected-error @+1 {{'model.rope_at' op theta is 0.000000e+00 but must be positive}}
  %r = model.rope_at %x, %p head_dim = 16 theta = 0.0 : (tensor<2x4x64xf32>, tensor<2x4xi32>) -> tensor<2x4x64xf32>
  return %r : tensor<2x4x64xf32>
}

// -----

// Tests RA4: rope_at's result has x's type.
func.func @ra4_result(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) -> tensor<2x4x64xf16> {
  // expected-error @+1 {{'model.rope_at' op result is 'tensor<2x4x64xf16>' but must be x's type 'tensor<2x4x64xf32>'}}
  %r = model.rope_at %x, %p head_dim = 16 theta = 1.0e+04 : (tensor<2x4x64xf32>, tensor<2x4xi32>) -> tensor<2x4x64xf16>
  return %r : tensor<2x4x64xf16>
}

// -----

// Tests AC1: attention_cached's positions are [batch, seq] of q.
func.func @ac1_positions(%q: tensor<2x1x64xf32>, %k: tensor<2x1x32xf32>, %p: tensor<2x2xi32>, %c: tensor<2x16x32xf32>) {
  // expected-error @+1 {{'model.attention_cached' op positions are [2, 2] but must be [batch, seq] of q, [2, 1]}}
  %o, %ck, %cv = model.attention_cached %q, %k, %k, %p, %c, %c heads = 4 kv_heads = 2 scale = 0.25 : (tensor<2x1x64xf32>, tensor<2x1x32xf32>, tensor<2x1x32xf32>, tensor<2x2xi32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> (tensor<2x1x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
  return
}

// -----

// Tests AC2: attention_cached's kv heads divide its heads.
func.func @ac2_heads(%q: tensor<2x1x64xf32>, %k: tensor<2x1x48xf32>, %p: tensor<2x1xi32>, %c: tensor<2x16x48xf32>) {
  // expected-error @+1 {{'model.attention_cached' op kv_heads = 3 does not divide heads = 4}}
  %o, %ck, %cv = model.attention_cached %q, %k, %k, %p, %c, %c heads = 4 kv_heads = 3 scale = 0.25 : (tensor<2x1x64xf32>, tensor<2x1x48xf32>, tensor<2x1x48xf32>, tensor<2x1xi32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>) -> (tensor<2x1x64xf32>, tensor<2x16x48xf32>, tensor<2x16x48xf32>)
  return
}

// -----

// Tests AC3: the caches have k's columns.
func.func @ac3_cache_columns(%q: tensor<2x1x64xf32>, %k: tensor<2x1x32xf32>, %p: tensor<2x1xi32>, %c: tensor<2x16x16xf32>) {
  // expected-error @+1 {{'model.attention_cached' op the caches have 16 columns but k has 32}}
  %o, %ck, %cv = model.attention_cached %q, %k, %k, %p, %c, %c heads = 4 kv_heads = 2 scale = 0.25 : (tensor<2x1x64xf32>, tensor<2x1x32xf32>, tensor<2x1x32xf32>, tensor<2x1xi32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>) -> (tensor<2x1x64xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>)
  return
}

// -----

// Tests AC4: the caches hold at least the positions written.
func.func @ac4_short_cache(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %p: tensor<2x8xi32>, %c: tensor<2x4x32xf32>) {
  // expected-error @+1 {{'model.attention_cached' op the caches hold 4 positions, fewer than the 8 written}}
  %o, %ck, %cv = model.attention_cached %q, %k, %k, %p, %c, %c heads = 4 kv_heads = 2 scale = 0.25 : (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8xi32>, tensor<2x4x32xf32>, tensor<2x4x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x4x32xf32>, tensor<2x4x32xf32>)
  return
}

// -----

// Tests AC5: attention_cached's scale is positive.
func.func @ac5_scale(%q: tensor<2x1x64xf32>, %k: tensor<2x1x32xf32>, %p: tensor<2x1xi32>, %c: tensor<2x16x32xf32>) {
  // expected-error @+1 {{'model.attention_cached' op scale is 0.000000e+00 but must be positive}}
  %o, %ck, %cv = model.attention_cached %q, %k, %k, %p, %c, %c heads = 4 kv_heads = 2 scale = 0.0 : (tensor<2x1x64xf32>, tensor<2x1x32xf32>, tensor<2x1x32xf32>, tensor<2x1xi32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> (tensor<2x1x64xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>)
  return
}

// -----

// Tests AC6: the new caches have the caches' type.
func.func @ac6_new_cache(%q: tensor<2x1x64xf32>, %k: tensor<2x1x32xf32>, %p: tensor<2x1xi32>, %c: tensor<2x16x32xf32>) {
  // expected-error @+1 {{'model.attention_cached' op the new caches must have the caches' type}}
  %o, %ck, %cv = model.attention_cached %q, %k, %k, %p, %c, %c heads = 4 kv_heads = 2 scale = 0.25 : (tensor<2x1x64xf32>, tensor<2x1x32xf32>, tensor<2x1x32xf32>, tensor<2x1xi32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>) -> (tensor<2x1x64xf32>, tensor<2x8x32xf32>, tensor<2x16x32xf32>)
  return
}

// -----

// Tests TR1: take_rows' index is [batch].
func.func @tr1_index(%x: tensor<2x4x64xf32>, %i: tensor<3xi32>) -> tensor<2x1x64xf32> {
  // expected-error @+1 {{'model.take_rows' op index is [3] but must be [batch] of x, [2]}}
  %r = model.take_rows %x[%i] : (tensor<2x4x64xf32>, tensor<3xi32>) -> tensor<2x1x64xf32>
  return %r : tensor<2x1x64xf32>
}

// -----

// Tests TR2: take_rows' result is one row per sequence.
func.func @tr2_result(%x: tensor<2x4x64xf32>, %i: tensor<2xi32>) -> tensor<2x2x64xf32> {
  // expected-error @+1 {{'model.take_rows' op result is 'tensor<2x2x64xf32>' but must be 'tensor<2x1x64xf32>'}}
  %r = model.take_rows %x[%i] : (tensor<2x4x64xf32>, tensor<2xi32>) -> tensor<2x2x64xf32>
  return %r : tensor<2x2x64xf32>
}

// -----

// Tests S1: sample's settings are three f32.
func.func @s1_settings(%l: tensor<2x1x64xf32>, %s: tensor<2xf32>, %seed: tensor<2xi32>, %c: tensor<2xi32>) -> tensor<2xi32> {
  // expected-error @+1 {{'model.sample' op settings are 'tensor<2xf32>' but must be 3xf32}}
  %ids = model.sample %l, %s, %seed, %c vocab_size = 60 : (tensor<2x1x64xf32>, tensor<2xf32>, tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  return %ids : tensor<2xi32>
}

// -----

// Tests S2: sample's vocab_size is at most the logits' columns.
func.func @s2_vocab(%l: tensor<2x1x64xf32>, %s: tensor<3xf32>, %seed: tensor<2xi32>, %c: tensor<2xi32>) -> tensor<2xi32> {
  // expected-error @+1 {{'model.sample' op vocab_size = 65 must be in [1, 64]}}
  %ids = model.sample %l, %s, %seed, %c vocab_size = 65 : (tensor<2x1x64xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  return %ids : tensor<2xi32>
}

// -----

// Tests S3: sample's ids are [batch] of i32.
func.func @s3_ids(%l: tensor<2x1x64xf32>, %s: tensor<3xf32>, %seed: tensor<2xi32>, %c: tensor<2xi32>) -> tensor<2xi64> {
  // expected-error @+1 {{'model.sample' op ids are 'tensor<2xi64>' but must be [batch] of i32}}
  %ids = model.sample %l, %s, %seed, %c vocab_size = 60 : (tensor<2x1x64xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>) -> tensor<2xi64>
  return %ids : tensor<2xi64>
}

// -----

// Tests S4: sample's candidate ids are [batch, vocab] of the logits.
func.func @s4_candidates(%l: tensor<2x1x16xf32>, %s: tensor<3xf32>, %seed: tensor<2xi32>, %c: tensor<2xi32>, %ids: tensor<2x8xi32>) -> tensor<2xi32> {
  // expected-error @+1 {{'model.sample' op candidates are 'tensor<2x8xi32>' but must be [batch, vocab] = [2, 16]}}
  %r = model.sample %l, %s, %seed, %c candidates %ids vocab_size = 60 : (tensor<2x1x16xf32>, tensor<3xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2x8xi32>) -> tensor<2xi32>
  return %r : tensor<2xi32>
}

// -----

// Tests TL1: top_logprobs' logits are [batch, 1, vocab].
func.func @tl1_logits(%l: tensor<2x2x64xf32>) {
  // expected-error @+1 {{'model.top_logprobs' op logits are 'tensor<2x2x64xf32>' but must be [batch, 1, vocab]}}
  %v, %i = model.top_logprobs %l k = 4 vocab_size = 60 : (tensor<2x2x64xf32>) -> (tensor<2x4xf32>, tensor<2x4xi32>)
  return
}

// -----

// Tests TL2: top_logprobs' k is at most vocab_size.
func.func @tl2_k(%l: tensor<2x1x64xf32>) {
  // expected-error @+1 {{'model.top_logprobs' op k = 61 must be in [1, vocab_size = 60]}}
  %v, %i = model.top_logprobs %l k = 61 vocab_size = 60 : (tensor<2x1x64xf32>) -> (tensor<2x61xf32>, tensor<2x61xi32>)
  return
}

// -----

// Tests TL2: from candidates, top_logprobs' k is at most the candidates.
func.func @tl2_k_candidates(%l: tensor<2x1x8xf32>, %ids: tensor<2x8xi32>, %lse: tensor<2x1x2xf32>) {
  // expected-error @+1 {{'model.top_logprobs' op k = 9 must be in [1, candidates = 8]}}
  %v, %i = model.top_logprobs %l candidates(%ids, %lse) k = 9 vocab_size = 60 : (tensor<2x1x8xf32>, tensor<2x8xi32>, tensor<2x1x2xf32>) -> (tensor<2x9xf32>, tensor<2x9xi32>)
  return
}

// -----

// Tests TL3: top_logprobs' results are [batch, k].
func.func @tl3_results(%l: tensor<2x1x64xf32>) {
  // expected-error @+1 {{'model.top_logprobs' op results are 'tensor<2x4xf32>' and 'tensor<2x3xi32>' but must be [batch, k] of f32 and of i32}}
  %v, %i = model.top_logprobs %l k = 4 vocab_size = 60 : (tensor<2x1x64xf32>) -> (tensor<2x4xf32>, tensor<2x3xi32>)
  return
}

// -----

// Tests TL4: top_logprobs' candidates are the ids and the ranks' lse.
func.func @tl4_count(%l: tensor<2x1x8xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{'model.top_logprobs' op takes 1 candidate operands but needs 2 (the ids and the ranks' log-sum-exps)}}
  %v, %i = model.top_logprobs %l candidates(%ids) k = 4 vocab_size = 60 : (tensor<2x1x8xf32>, tensor<2x8xi32>) -> (tensor<2x4xf32>, tensor<2x4xi32>)
  return
}

// -----

// Tests TL4: the ranks' lse are [batch, 1, ranks] of the logits' type.
func.func @tl4_lse(%l: tensor<2x1x8xf32>, %ids: tensor<2x8xi32>, %lse: tensor<2x1x2xf64>) {
  // expected-error @+1 {{'model.top_logprobs' op lse is 'tensor<2x1x2xf64>' but must be [batch, 1, ranks] of 'f32'}}
  %v, %i = model.top_logprobs %l candidates(%ids, %lse) k = 4 vocab_size = 60 : (tensor<2x1x8xf32>, tensor<2x8xi32>, tensor<2x1x2xf64>) -> (tensor<2x4xf32>, tensor<2x4xi32>)
  return
}

// -----

// Tests TC1: top_candidates' logits are [batch, 1, vocab].
func.func @tc1_logits(%l: tensor<2x3x64xf32>) {
  // expected-error @+1 {{'model.top_candidates' op logits are 'tensor<2x3x64xf32>' but must be [batch, 1, vocab]}}
  %v, %i, %s = model.top_candidates %l k = 4 vocab_size = 60 : (tensor<2x3x64xf32>) -> (tensor<2x1x4xf32>, tensor<2x4xi32>, tensor<2x1x1xf32>)
  return
}

// -----

// Tests TC2: top_candidates' k is at least 1.
func.func @tc2_k(%l: tensor<2x1x64xf32>) {
  // expected-error @+1 {{'model.top_candidates' op k = 0 and vocab_size = 60 must be at least 1}}
  %v, %i, %s = model.top_candidates %l k = 0 vocab_size = 60 : (tensor<2x1x64xf32>) -> (tensor<2x1x0xf32>, tensor<2x0xi32>, tensor<2x1x1xf32>)
  return
}

// -----

// Tests TC3: top_candidates' values are [batch, 1, k] of the logits' type.
func.func @tc3_values(%l: tensor<2x1x64xf32>) {
  // expected-error @+1 {{'model.top_candidates' op result is 'tensor<2x1x5xf32>' but must be (values) 'tensor<2x1x4xf32>'}}
  %v, %i, %s = model.top_candidates %l k = 4 vocab_size = 60 : (tensor<2x1x64xf32>) -> (tensor<2x1x5xf32>, tensor<2x4xi32>, tensor<2x1x1xf32>)
  return
}

// -----

// Tests TC3: top_candidates' ids are [batch, k].
func.func @tc3_ids(%l: tensor<2x1x64xf32>) {
  // expected-error @+1 {{'model.top_candidates' op ids are 'tensor<2x5xi32>' but must be [batch, k] of i32}}
  %v, %i, %s = model.top_candidates %l k = 4 vocab_size = 60 : (tensor<2x1x64xf32>) -> (tensor<2x1x4xf32>, tensor<2x5xi32>, tensor<2x1x1xf32>)
  return
}

// -----

// Tests TC4: top_candidates' vocab_axis is an axis of the module's mesh.
model.mesh @mesh axes = ["dp"] sizes = [2]
func.func @tc4_axis(%l: tensor<2x1x64xf32>) {
  // expected-error @+1 {{'model.top_candidates' op vocab_axis = "tp" is not an axis of the module's model.mesh}}
  %v, %i, %s = model.top_candidates %l k = 4 vocab_size = 60 vocab_axis = "tp" : (tensor<2x1x64xf32>) -> (tensor<2x1x4xf32>, tensor<2x4xi32>, tensor<2x1x1xf32>)
  return
}

// -----

// Tests RR1: reorder_rows' parents are [rows] of x.
func.func @rr1_parents(%x: tensor<4x8xf32>, %p: tensor<3xi32>) {
  // expected-error @+1 {{'model.reorder_rows' op parents are [3] but must be [rows] of x, [4]}}
  %r = model.reorder_rows %x[%p] : (tensor<4x8xf32>, tensor<3xi32>) -> tensor<4x8xf32>
  return
}

// -----

// Tests A7: packed documents need causal attention.
func.func @a7_documents_not_causal(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x16x64xf32>, %pos: tensor<2x16xi32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.attention' op packed documents (positions) need causal attention}}
  %o = model.attention %q, %k, %v positions %pos heads = 4 kv_heads = 4 scale = 0.25 : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  return %o : tensor<2x16x64xf32>
}

// -----

// Tests A7: the positions are [batch, seq] of q.
func.func @a7_positions_shape(%q: tensor<2x16x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x16x64xf32>, %pos: tensor<2x8xi32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.attention' op positions are [2, 8] but must be [batch, seq] of q, [2, 16]}}
  %o = model.attention %q, %k, %v positions %pos heads = 4 kv_heads = 4 scale = 0.25 causal : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x8xi32>) -> tensor<2x16x64xf32>
  return %o : tensor<2x16x64xf32>
}

// -----

// Tests AG5: attention_grad's positions as the forward's.
func.func @ag5_positions_shape(%q: tensor<2x16x64xf32>, %pos: tensor<1x16xi32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.attention_grad' op positions are [1, 16] but must be [batch, seq] of q, [2, 16]}}
  %dq, %dk, %dv = model.attention_grad %q, %q, %q, %q, %q positions %pos heads = 4 kv_heads = 4 scale = 0.25 causal : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<1x16xi32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  return %dq : tensor<2x16x64xf32>
}

// -----

// Tests R5: rope's positions are [batch, seq] of x.
func.func @r5_positions_shape(%x: tensor<2x16x64xf32>, %pos: tensor<2x15xi32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.rope' op positions are [2, 15] but must be [batch, seq] of x, [2, 16]}}
  %r = model.rope %x at %pos head_dim = 16 theta = 1.0e+04 : (tensor<2x16x64xf32>, tensor<2x15xi32>) -> tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}

// -----

// Tests PE5: the position table's positions have the tokens' shape.
func.func @pe5_positions_shape(%wpe: tensor<128x64xf32>, %ids: tensor<2x16xi32>, %pos: tensor<2x8xi32>) -> tensor<2x16x64xf32> {
  // expected-error @+1 {{'model.position_embedding' op positions are [2, 8] but must have the tokens' shape [2, 16]}}
  %p = model.position_embedding %wpe for %ids at %pos : (tensor<128x64xf32>, tensor<2x16xi32>, tensor<2x8xi32>) -> tensor<2x16x64xf32>
  return %p : tensor<2x16x64xf32>
}

// -----

// Tests PEG5: the gradient's positions cover the whole sequence.
func.func @peg5_positions_shape(%dy: tensor<2x16x64xf32>, %pos: tensor<2x8xi32>) -> tensor<128x64xf32> {
  // expected-error @+1 {{'model.position_embedding_grad' op positions are [2, 8] but must be [batch, seq] of the whole sequence, [2, 16]}}
  %dt = model.position_embedding_grad %dy at %pos : (tensor<2x16x64xf32>, tensor<2x8xi32>) -> tensor<128x64xf32>
  return %dt : tensor<128x64xf32>
}
