//===- Partition.h - Consecutive layers into balanced stages ----*- C++ -*-===//
//
// The split of n layers into consecutive runs, one per stage, each of at
// least one layer, that minimises the largest stage's cost: the classic
// linear partition, by dynamic programming over (stages, layers). Used by
// model-pipeline-partition (stages balanced by FLOPs) and by the layout
// search (stages balanced by memory, compiler/Search.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_PASSES_MODEL_PARTITION_H
#define BRAID_PASSES_MODEL_PARTITION_H

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace braid::model {

/// Layers per stage for `layers` layers in `stages` stages (at most one
/// stage per layer), minimising the largest `cost(stage, begin, end)`: the
/// cost of stage `stage` (0-based) holding layers [begin, end).
template <typename Cost>
llvm::SmallVector<int64_t> balanceStages(int64_t layers, int64_t stages,
                                         Cost cost) {
  const double kInf = std::numeric_limits<double>::infinity();
  // best[s][i]: the least largest cost of layers [0, i) in stages [0, s).
  std::vector<std::vector<double>> best(stages + 1,
                                        std::vector<double>(layers + 1, kInf));
  std::vector<std::vector<int64_t>> cut(stages + 1,
                                        std::vector<int64_t>(layers + 1, 0));
  best[0][0] = 0;
  for (int64_t s = 1; s <= stages; ++s)
    for (int64_t i = s; i <= layers - (stages - s); ++i)
      for (int64_t j = s - 1; j < i; ++j) {
        double worst = std::max(best[s - 1][j], double(cost(s - 1, j, i)));
        if (worst < best[s][i]) {
          best[s][i] = worst;
          cut[s][i] = j;
        }
      }
  llvm::SmallVector<int64_t> out(stages);
  for (int64_t s = stages, i = layers; s >= 1; --s) {
    out[s - 1] = i - cut[s][i];
    i = cut[s][i];
  }
  return out;
}

} // namespace braid::model

#endif // BRAID_PASSES_MODEL_PARTITION_H
