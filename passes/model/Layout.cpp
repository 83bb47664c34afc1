//===- Layout.cpp - How a value lies over the tensor-parallel ranks -------===//

#include "passes/model/Layout.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace braid::model;

Layout Layout::split(int64_t dim, ArrayRef<int64_t> blocks) {
  Layout l;
  l.kind = Split;
  l.dim = dim;
  l.blocks.assign(blocks.begin(), blocks.end());
  return l;
}

Layout Layout::partial(StringRef why) {
  Layout l;
  l.kind = Partial;
  l.why = why.str();
  return l;
}

bool braid::model::isGateUp(const Layout &l) {
  return l.isSplit() && l.blocks.size() == 2 && l.blocks[0] == l.blocks[1];
}

FailureOr<Type> braid::model::localType(Type type, const Layout &layout,
                                        int64_t tp, Operation *at,
                                        StringRef what) {
  if (!layout.isSplit())
    return type;
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  int64_t &d = shape[layout.dim];
  SmallVector<int64_t> blocks(layout.blocks);
  if (blocks.empty())
    blocks.push_back(d);
  int64_t total = 0;
  for (int64_t block : blocks) {
    if (block % tp != 0)
      return at->emitOpError("cannot split ")
             << what << " " << tensor << " over tp = " << tp << ": dimension "
             << layout.dim << (blocks.size() > 1 ? " has a block of " : " is ")
             << block << ", not a multiple of " << tp;
    total += block;
  }
  if (total != d)
    return at->emitOpError("blocks of ") << what << " do not add up to " << d;
  d /= tp;
  return Type(RankedTensorType::get(shape, tensor.getElementType()));
}

ShardingAttr braid::model::shardingOf(const Layout &layout,
                                      FlatSymbolRefAttr mesh, StringRef axis,
                                      int64_t rank) {
  Builder b(mesh.getContext());
  SmallVector<Attribute> dims(rank, b.getArrayAttr({}));
  if (layout.isSplit())
    dims[layout.dim] = b.getStrArrayAttr({axis});
  return ShardingAttr::get(
      mesh.getContext(), mesh, b.getArrayAttr(dims),
      layout.isPartial() ? b.getStrArrayAttr({axis}) : b.getArrayAttr({}));
}
