//===- ModelAttrs.td - Attributes of the `model` dialect -----*- tablegen -*-===//

#ifndef BRAID_MODEL_ATTRS_TD
#define BRAID_MODEL_ATTRS_TD

include "dialects/model/ModelBase.td"

def Model_QkvLayout : I32EnumAttr<"QkvLayout",
    "how a fused QKV projection stores the heads", [
      I32EnumAttrCase<"grouped", 0>,
      I32EnumAttrCase<"per_head", 1>
    ]> {
  let cppNamespace = "::braid::model";
  let genSpecializedAttr = 0;
}

def Model_QkvLayoutAttr : EnumAttr<Model_Dialect, Model_QkvLayout, "qkv_layout">;

def Model_ShardingAttr : Model_Attr<"Sharding", "sharding"> {
  let summary = "How a tensor is split over the axes of a device mesh";
  let description = [{
    `#model.sharding<@mesh, [{"dp"}, {}, {"tp"} ]>` says that dimension 0 of
    the tensor is split across the mesh axis `dp`, dimension 1 is replicated,
    and dimension 2 is split across `tp`. A dimension may be split across
    several axes, major to minor: `{"dp", "tp"}`. Axes of the mesh that name
    no dimension replicate the tensor.

    `partial = {"tp"}` marks a value whose shards along `tp` are partial sums
    that still await a reduction (the output of a row-parallel matmul before
    its all-reduce).

    Example:

    ```mlir
    %y = model.linear %x, %w transpose_w
        {model.sharding = #model.sharding<@mesh, [{}, {}, {"tp"} ]>}
        : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
    ```

    Constraints:
    - S1: every dimension entry is a list of non-empty axis names.
    - S2: an axis appears at most once across all dimensions and `partial`.
    - S3: the mesh symbol names a `model.mesh` in the enclosing module.
    - S4: every axis named is an axis of that mesh.
    - S5: the number of dimension entries equals the rank of the tensor the
      attribute annotates.

    S1 and S2 are checked when the attribute is built; S3 to S5 where it is
    attached to a value (they need the module and the tensor type).
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$mesh,
    "::mlir::ArrayAttr":$dims,
    "::mlir::ArrayAttr":$partial
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The axis names that split dimension `dim`, major to minor.
    llvm::SmallVector<llvm::StringRef> getDimAxes(unsigned dim) const;
    /// Every axis named by the attribute, in dimension order then `partial`.
    llvm::SmallVector<llvm::StringRef> getAllAxes() const;
    /// Checks S3 to S5 against `type`, for a value inside `scope`.
    mlir::LogicalResult verifyFor(mlir::Type type, mlir::Operation *scope,
        llvm::function_ref<mlir::InFlightDiagnostic()> emitError) const;
  }];
}

#endif // BRAID_MODEL_ATTRS_TD
