//===- Split.h - Train, validation and test document splits -----*- C++ -*-===//
//
// Megatron's split of a dataset's documents into train, validation and test
// ranges (--split "969,30,1"): the arithmetic of Megatron-LM's
// get_train_valid_test_split_ (megatron/data/dataset_utils.py, also the
// first Megatron Core's _get_split_indices), so that a dataset split by
// Braid has the document ranges it has there. Later Megatron Core versions
// round the cumulative fractions instead (begin = round(lo * N), end =
// round(hi * N)), which can move a boundary by one document: 10 documents
// split "1,1,1" are [0, 4), [4, 7), [7, 10) here and [0, 3), [3, 7),
// [7, 10) there.
//
// Each split is a contiguous range of documents in file order; the samples of
// a split are GptSamples over that range (GptSampleOptions::firstDocument and
// numDocuments).
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_DATA_SPLIT_H
#define BRAID_RUNTIME_DATA_SPLIT_H

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <array>
#include <cstdint>
#include <utility>

namespace braid::data {

/// The splits, in the order of a split string.
enum class SplitKind { kTrain = 0, kValidation = 1, kTest = 2 };

/// Parses a split string as Megatron does: 1 to 3 non-negative numbers
/// separated by ',' (or, when the string has no ',', by '/'), the missing
/// ones 0, divided by their sum: "969,30,1" and "969/30/1" give {0.969,
/// 0.03, 0.001}, "99,1" gives {0.99, 0.01, 0}. InvalidArgument, naming the
/// string, for an empty string, a part that is not a finite number, a
/// negative part, more than 3 parts, or parts that sum to 0.
absl::StatusOr<std::array<double, 3>> ParseSplit(absl::string_view s);

/// Python's int(round(x)) on a double: the nearest integer, exact halves to
/// the even one (round(2.5) == 2, round(3.5) == 4), as a double.
double RoundHalfToEven(double x);

/// The [begin, end) document ranges of train, validation and test for
/// `numDocuments` documents and the `fractions` ParseSplit returns:
///   index[0] = 0
///   index[i + 1] = index[i] + int(round(fractions[i] * numDocuments))
///   diff = index[3] - numDocuments; index[1..3] -= diff
/// (round: RoundHalfToEven; the products in double, as Python computes
/// them). The three ranges always cover [0, numDocuments) in order. The one
/// place Megatron's arithmetic leaves that: with a train fraction of 0 and
/// both other products exact odd halves (3 documents split "0,1,1": index
/// [0, 0, 2, 4] - 1), index[1] comes out -1; it is 0 here (Megatron would
/// read validation documents from the end of the dataset).
std::array<std::pair<uint64_t, uint64_t>, 3>
SplitDocuments(uint64_t numDocuments, const std::array<double, 3> &fractions);

} // namespace braid::data

#endif // BRAID_RUNTIME_DATA_SPLIT_H
