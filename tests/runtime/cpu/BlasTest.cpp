//===- BlasTest.cpp - OpenBLAS's kernels chosen for the CPU ---------------===//
//
// This binary's main() calls useNativeBlasKernels first, as braid and
// braid-run do, so the test sees the library after the choice: unless the
// environment named kernels itself, OpenBLAS runs kernels at least as new as
// the CPU's feature flags allow (on a CPU the library does not know, that
// means the program was started again with OPENBLAS_CORETYPE set).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Blas.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <string>

namespace {

/// OPENBLAS_CORETYPE as the user set it, before main's choice; null if not.
const char *userCoreType = nullptr;

TEST(Blas, CoreLevels) {
  EXPECT_EQ(braid::cpu::blasCoreLevel("Prescott"), 1);
  EXPECT_EQ(braid::cpu::blasCoreLevel("Nehalem"), 1);
  EXPECT_EQ(braid::cpu::blasCoreLevel("Sandybridge"), 2);
  EXPECT_EQ(braid::cpu::blasCoreLevel("Haswell"), 3);
  EXPECT_EQ(braid::cpu::blasCoreLevel("Zen"), 3);
  EXPECT_EQ(braid::cpu::blasCoreLevel("SkylakeX"), 4);
  EXPECT_EQ(braid::cpu::blasCoreLevel("skylakex"), 4); // case aside
  EXPECT_EQ(braid::cpu::blasCoreLevel("Cooperlake"), 4);
  EXPECT_EQ(braid::cpu::blasCoreLevel("SapphireRapids"), 4);
  EXPECT_EQ(braid::cpu::blasCoreLevel("NotACore"), 0);
  EXPECT_EQ(braid::cpu::blasCoreLevel(""), 0);
}

TEST(Blas, NativeCoreIsOneOpenBlasKnows) {
  std::string native = braid::cpu::nativeBlasCore();
  if (native.empty())
    GTEST_SKIP() << "no AVX on this CPU: no preference";
  EXPECT_GE(braid::cpu::blasCoreLevel(native), 2) << native;
}

TEST(Blas, KernelsAtLeastTheNativeOnes) {
  if (userCoreType)
    GTEST_SKIP() << "OPENBLAS_CORETYPE=" << userCoreType
                 << " was set before the program started";
  std::string native = braid::cpu::nativeBlasCore();
  std::string running = braid::cpu::blasCoreName();
  int level = braid::cpu::blasCoreLevel(running);
  if (native.empty() || level == 0)
    GTEST_SKIP() << "OpenBLAS runs " << running << ", the CPU's best is "
                 << (native.empty() ? "unknown" : native);
  EXPECT_GE(level, braid::cpu::blasCoreLevel(native))
      << "OpenBLAS runs " << running << " kernels on a CPU that runs "
      << native << "'s";
}

} // namespace

int main(int argc, char **argv) {
  // Read before the call, which sets it when it starts the program again;
  // the started program then sees it set by that call, which it records
  // through BRAID_BLAS_TEST_CHOSEN (set here before the first start).
  const char *chosenByUs = std::getenv("BRAID_BLAS_TEST_CHOSEN");
  if (!chosenByUs) {
    userCoreType = std::getenv("OPENBLAS_CORETYPE");
    ::setenv("BRAID_BLAS_TEST_CHOSEN", "1", 1);
  }
  braid::cpu::useNativeBlasKernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
