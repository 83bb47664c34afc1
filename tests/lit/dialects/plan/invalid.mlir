// RUN: braid-opt %s -split-input-file -verify-diagnostics

// Tests B1: an unknown role is refused.
// expected-error @+1 {{'plan.buffer' op role "scratchpad" is not one of parameter, gradient, optimizer_state, activation, input, workspace, bucket}}
plan.buffer @b1_role : tensor<4xf32> role = "scratchpad"

// -----

// Tests B2: a buffer needs a static shape.
// expected-error @+1 {{'plan.buffer' op type 'tensor<?xf32>' is not a statically shaped tensor}}
plan.buffer @b2_dynamic : tensor<?xf32> role = "activation"

// -----

// Tests B3: offsets are aligned to the element size.
// expected-error @+1 {{'plan.buffer' op offset 6 is negative or not a multiple of the element size 4}}
plan.buffer @b3_misaligned : tensor<4xf32> role = "activation" offset = 6

// -----

// Tests K1: a kernel may name only buffers of the module.
plan.buffer @x : tensor<4xf32> role = "activation"
plan.func @k1_missing_buffer {
  // expected-error @+1 {{'plan.kernel' op names @nowhere, which is not a plan.buffer}}
  plan.kernel "ADD" [@x, @x] -> [@nowhere] {}
}

// -----

// Tests K2: kernel parameters are numbers.
plan.buffer @x : tensor<4xf32> role = "activation"
plan.func @k2_string_param {
  // expected-error @+1 {{'plan.kernel' op parameter "rate" is "high" but must be an integer or a float}}
  plan.kernel "DROPOUT" [@x] -> [@x] {rate = "high"}
}

// -----

// Tests K1: a function is not a buffer.
plan.buffer @x : tensor<4xf32> role = "activation"
plan.func @k1_function_as_buffer {
  // expected-error @+1 {{'plan.kernel' op names @k1_function_as_buffer, which is not a plan.buffer}}
  plan.kernel "ADD" [@x, @x] -> [@k1_function_as_buffer] {}
}

// -----

// Tests B4: a shard names its dimension.
// expected-error @+1 {{'plan.buffer' op shard and dim must be given together (and blocks only with them)}}
plan.buffer @b4_no_dim : tensor<4x8xf32> role = "parameter" shard = "tp"

// -----

// Tests B4: the split dimension is one of the buffer's.
// expected-error @+1 {{'plan.buffer' op shard "tp" dim 2 does not name a mesh axis and a dimension of 'tensor<4x8xf32>'}}
plan.buffer @b4_dim_range : tensor<4x8xf32> role = "parameter" shard = "tp" dim = 2

// -----

// Tests B4: blocks are positive sizes.
// expected-error @+1 {{'plan.buffer' op blocks must be positive sizes}}
plan.buffer @b4_blocks : tensor<4x8xf32> role = "parameter" shard = "tp" dim = 1 blocks = [8, 0]

// -----

// Tests K4: a rank axis has a name.
plan.buffer @x : tensor<4xf32> role = "activation"
plan.func @k4_empty_rank_axis {
  // expected-error @+1 {{'plan.kernel' op rank_axis is empty}}
  plan.kernel "EMBEDDING" [@x, @x] -> [@x] {} {rank_axis = ""}
}

// -----

// Tests B5: a buffer has at least one slot.
// expected-error @+1 {{'plan.buffer' op slots = 0 must be at least 1}}
plan.buffer @b5_slots : tensor<4xf32> role = "activation" stage = 0 slots = 0

// -----

// Tests B6: a view names its bucket and its offset together.
plan.buffer @b6_bucket : tensor<64xf32> role = "bucket"
// expected-error @+1 {{'plan.buffer' op view_of and view_offset must be given together}}
plan.buffer @b6_view : tensor<4xf32> role = "gradient" view_of = @b6_bucket

// -----

// Tests B6: a view's offset is a multiple of its element size.
plan.buffer @b6_bucket : tensor<64xf32> role = "bucket"
// expected-error @+1 {{'plan.buffer' op view_offset 6 is negative or not a multiple of the element size 4}}
plan.buffer @b6_view : tensor<4xf32> role = "gradient" view_of = @b6_bucket view_offset = 6

// -----

// Tests B6: a view has no slots.
plan.buffer @b6_bucket : tensor<64xf32> role = "bucket"
// expected-error @+1 {{'plan.buffer' op a view has no slots and is not a bucket}}
plan.buffer @b6_view : tensor<4xf32> role = "activation" stage = 0 slots = 2 view_of = @b6_bucket view_offset = 0

// -----

// Tests ST1: a stage holds at least one slot.
plan.func @f {
}
// expected-error @+1 {{'plan.stage' op index, first_layer and num_layers must be >= 0 and slots >= 1}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @f, slots = 0 : i64}

// -----

// Tests ST1: a negative layer count is refused (not read as a huge one).
plan.func @f {
}
// expected-error @+1 {{'plan.stage' op index, first_layer and num_layers must be >= 0 and slots >= 1}}
plan.stage 0 {first_layer = 0 : i64, num_layers = -1 : i64, forward = @f, backward = @f}

// -----

// Tests ST1: a negative slot count is refused.
plan.func @f {
}
// expected-error @+1 {{'plan.stage' op index, first_layer and num_layers must be >= 0 and slots >= 1}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @f, slots = -2 : i64}

// -----

// Tests B5: a negative stage is refused.
// expected-error @+1 {{'plan.buffer' op stage -1 is negative}}
plan.buffer @b5_stage : tensor<4xf32> role = "activation" stage = -1

// -----

// Tests ST1: chunk_slots has one count per chunk.
plan.func @f {
}
// expected-error @+1 {{'plan.stage' op chunk_slots must have one entry of at least 1 per chunk (2), the largest equal to slots = 2}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @f, chunks = [{forward = @f, backward = @f}], slots = 2 : i64, chunk_slots = array<i64: 2>}

// -----

// Tests ST1: each chunk's count is at least 1.
plan.func @f {
}
// expected-error @+1 {{'plan.stage' op chunk_slots must have one entry of at least 1 per chunk (2), the largest equal to slots = 2}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @f, chunks = [{forward = @f, backward = @f}], slots = 2 : i64, chunk_slots = array<i64: 2, 0>}

// -----

// Tests ST1: the stage's slots is the largest chunk's.
plan.func @f {
}
// expected-error @+1 {{'plan.stage' op chunk_slots must have one entry of at least 1 per chunk (2), the largest equal to slots = 3}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @f, chunks = [{forward = @f, backward = @f}], slots = 3 : i64, chunk_slots = array<i64: 2, 1>}

// -----

// Tests ST2: a stage's functions exist.
plan.func @f {
}
// expected-error @+1 {{'plan.stage' op names @missing, which is not a plan.func}}
plan.stage 0 {first_layer = 0 : i64, num_layers = 1 : i64, forward = @f, backward = @missing}
