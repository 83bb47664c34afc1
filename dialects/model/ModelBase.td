//===- ModelBase.td - The `model` dialect --------------------*- tablegen -*-===//
//
// The tensor-level dialect in which Braid represents a transformer's training
// step: ops at the grain where expert kernels exist, transformer layers as
// region ops, and sharding as an attribute over a named device mesh.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_MODEL_BASE_TD
#define BRAID_MODEL_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Model_Dialect : Dialect {
  let name = "model";
  let cppNamespace = "::braid::model";
  let summary = "Tensor-level ops of transformer training";
  let description = [{
    The `model` dialect holds a transformer's training step as a graph of
    tensor ops with value semantics on builtin `tensor` types (f32, bf16,
    f16; f64 for gradient checks on CPU). The ops sit at the grain where
    expert kernels exist (`linear`, `rms_norm`, `attention`, ...), so that
    every op maps to one kernel call of the runtime.

    Transformer layers are `model.layer` region ops: pipeline partitioning and
    recompute reason per layer. Sharding is the `#model.sharding` attribute
    over a `model.mesh` symbol with named axes, attached to values through the
    `model.sharding` discardable attribute (on ops, one per result, and on
    function arguments and results).

    Function arguments carry `model.param = "<name>"` (a parameter, named as
    in the family's Hugging Face checkpoint) or `model.input = "tokens" |
    "targets"`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The discardable attribute that carries a value's sharding.
    static constexpr llvm::StringLiteral kShardingAttrName = "model.sharding";
    /// The argument attribute naming a parameter.
    static constexpr llvm::StringLiteral kParamAttrName = "model.param";
    /// The unit argument attribute of a parameter the training step does
    /// not update (a LoRA run's base weights, `model-lora`): it gets no
    /// gradient, no optimizer state and no update.
    static constexpr llvm::StringLiteral kFrozenAttrName = "model.frozen";
    /// The argument attribute naming a data input (tokens, targets,
    /// loss_grad).
    static constexpr llvm::StringLiteral kInputAttrName = "model.input";
    /// The result attribute naming the parameter a gradient belongs to.
    static constexpr llvm::StringLiteral kGradAttrName = "model.grad";
    /// The argument/result attribute of optimizer state:
    /// "exp_avg:<param>" or "exp_avg_sq:<param>".
    static constexpr llvm::StringLiteral kOptStateAttrName = "model.opt_state";
    /// On an argument of an inference graph: a layer's key or value cache,
    /// kept between calls (its name, e.g. "cache.k.0").
    static constexpr llvm::StringLiteral kCacheAttrName = "model.cache";
    /// On an op of an inference graph: the plan function it runs in
    /// ("prefill" or "decode").
    static constexpr llvm::StringLiteral kPhaseAttrName = "model.phase";
    /// On a result of an inference graph: the name of its buffer.
    static constexpr llvm::StringLiteral kResultAttrName = "model.result";
    /// The argument attribute of a tensor-parallel parameter (or its
    /// optimizer state) whose split dimension is made of blocks that are
    /// each split evenly, as a fused [Q | K | V] projection: the blocks'
    /// global sizes.
    static constexpr llvm::StringLiteral kShardBlocksAttrName =
        "model.shard_blocks";

  private:
    void registerAttributes();
  public:
  }];
}

class Model_Op<string mnemonic, list<Trait> traits = []>
    : Op<Model_Dialect, mnemonic, traits>;

class Model_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Model_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

/// Floating-point element types the dialect computes in.
def Model_Float : AnyTypeOf<[F32, BF16, F16, F64]>;
def Model_FloatTensor : RankedTensorOf<[F32, BF16, F16, F64]>;
def Model_IndexTensor : RankedTensorOf<[I32, I64]>;

#endif // BRAID_MODEL_BASE_TD
