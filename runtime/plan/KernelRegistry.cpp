//===- KernelRegistry.cpp - Kernels.def as a table ------------------------===//

#include "runtime/plan/KernelRegistry.h"

#include <array>
#include <cstdio>
#include <cstdlib>

namespace braid::plan {

// plan.proto's enum and Kernels.def agree on every row's number: a row whose
// name is not in the enum, or has another number, does not build. The other
// direction (every enum value has a row) is KernelRegistryTest's.
#define BRAID_KERNEL(NAME, NUMBER, ...)                                        \
  static_assert(Kernel::NAME == NUMBER && int(KernelId::NAME) == NUMBER,       \
                "Kernels.def: " #NAME " has another number in plan.proto");
#include "runtime/plan/Kernels.def"

namespace {

constexpr int kCount = int(sizeof(kKernelRows) / sizeof(kKernelRows[0]));

/// kKernelRows with each row's plan-file kernel (the same number).
constexpr std::array<KernelInfo, kCount> kKernels = []() {
  std::array<KernelInfo, kCount> rows{};
  for (int i = 0; i < kCount; ++i)
    rows[i] = KernelInfo{kKernelRows[i], Kernel(int(kKernelRows[i].id))};
  return rows;
}();

constexpr int kMaxNumber = []() {
  int max = 0;
  for (const KernelInfo &k : kKernels)
    max = int(k.kernel) > max ? int(k.kernel) : max;
  return max;
}();

/// Row index by kernel number, -1 for a number without a row.
constexpr std::array<int, kMaxNumber + 1> kIndex = []() {
  std::array<int, kMaxNumber + 1> index{};
  for (int &i : index)
    i = -1;
  for (int i = 0; i < kCount; ++i)
    index[int(kKernels[i].kernel)] = i;
  return index;
}();

constexpr bool noNumberTwice() {
  int rows = 0;
  for (int i : kIndex)
    rows += i >= 0;
  return rows == kCount;
}
static_assert(noNumberTwice(), "Kernels.def: two rows share a number");

} // namespace

int KernelCount() { return kCount; }

const KernelInfo *FindKernel(Kernel kernel) {
  int n = int(kernel);
  if (n < 0 || n > kMaxNumber || kIndex[n] < 0)
    return nullptr;
  return &kKernels[kIndex[n]];
}

const KernelInfo &KernelInfoOf(Kernel kernel) {
  if (const KernelInfo *info = FindKernel(kernel))
    return *info;
  // A validated plan names only kernels with rows; reaching here is a bug
  // in the caller, not bad input.
  std::fprintf(stderr, "braid: kernel %d has no row in Kernels.def\n",
               int(kernel));
  std::abort();
}

const KernelInfo *FindKernel(absl::string_view name) {
  for (const KernelInfo &k : kKernels)
    if (name == k.name)
      return &k;
  return nullptr;
}

const KernelInfo &KernelAt(int index) { return kKernels[index]; }

int KernelIndex(Kernel kernel) {
  return int(&KernelInfoOf(kernel) - kKernels.data());
}

bool IsCommunication(Kernel kernel) {
  const KernelInfo *k = FindKernel(kernel);
  return k && k->has(kCommunication);
}

bool IsCommunicationTime(const Instruction &inst) {
  const KernelInfo *k = FindKernel(inst.kernel());
  return k && (k->has(kCommunication) || k->has(kFinishes) ||
               (k->has(kGroupOptional) && inst.group_size() > 0));
}

bool IsPointToPoint(Kernel kernel) {
  const KernelInfo *k = FindKernel(kernel);
  return k && k->has(kPointToPoint);
}

bool IsMatmul(Kernel kernel) {
  const KernelInfo *k = FindKernel(kernel);
  return k && k->has(kMatmul);
}

bool HasMatrixProducts(Kernel kernel) {
  const KernelInfo *k = FindKernel(kernel);
  return k && k->has(kMatrixProducts);
}

bool IsCollective(Kernel kernel) {
  const KernelInfo *k = FindKernel(kernel);
  return k && k->has(kGroupRequired);
}

bool IsGradient(Kernel kernel) {
  const KernelInfo *k = FindKernel(kernel);
  return k && k->has(kGradient);
}

bool AccumulatesOutput(Kernel kernel, int i) {
  const KernelInfo *k = FindKernel(kernel);
  return k && i >= 0 && i < 32 && (k->accumulatedOutputs >> i) & 1u;
}

} // namespace braid::plan
