//===- TestData.h - Inputs for the CPU kernel tests -------------*- C++ -*-===//

#ifndef BRAID_TESTS_RUNTIME_CPU_TESTDATA_H
#define BRAID_TESTS_RUNTIME_CPU_TESTDATA_H

#include "runtime/cpu/Kernels.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <functional>
#include <cstring>
#include <random>
#include <vector>

namespace braid::test {

/// n values uniform in [-scale, scale), from `seed`.
template <typename T>
std::vector<T> randomVec(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  std::vector<T> v(n);
  for (T &x : v)
    x = T(dist(gen));
  return v;
}

/// n ids uniform in [0, bound), from `seed`.
inline std::vector<int32_t> randomIds(size_t n, int32_t bound, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, bound - 1);
  std::vector<int32_t> v(n);
  for (int32_t &x : v)
    x = dist(gen);
  return v;
}

/// Each token's position in its document, for sequences of packed
/// documents of the given lengths (sequence after sequence).
inline std::vector<int32_t>
packedPositions(const std::vector<std::vector<int>> &documentLengths) {
  std::vector<int32_t> positions;
  for (const std::vector<int> &docs : documentLengths)
    for (int len : docs)
      for (int t = 0; t < len; ++t)
        positions.push_back(t);
  return positions;
}

/// Whether a and b hold the same bits.
template <typename T>
bool sameBits(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// Runs `kernel`, which fills `outputs` (from the state `reset` sets up), on
/// 1 and on 4 threads, and expects every output to be bit-identical.
template <typename T>
void expectSameOnOneAndFour(std::vector<std::vector<T> *> outputs,
                            const std::function<void()> &reset,
                            const std::function<void()> &kernel) {
  std::vector<std::vector<T>> single;
  for (int threads : {1, 4}) {
    cpu::setNumThreads(threads);
    ASSERT_EQ(cpu::numThreads(), threads);
    reset();
    kernel();
    if (threads == 1) {
      for (std::vector<T> *out : outputs)
        single.push_back(*out);
      continue;
    }
    for (size_t i = 0; i < outputs.size(); ++i)
      EXPECT_TRUE(sameBits(single[i], *outputs[i]))
          << "output " << i << " differs between 1 and 4 threads";
  }
}

} // namespace braid::test

#endif // BRAID_TESTS_RUNTIME_CPU_TESTDATA_H
