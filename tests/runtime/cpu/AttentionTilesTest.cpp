//===- AttentionTilesTest.cpp - The attention blocks' matrix products -----===//
//
// tileProduct and tileProductPacked against products summed in double by
// plain loops, on every instruction set this CPU runs: shapes with partial
// register tiles and partial panels, left operands read through both
// orientations, right operands in place and packed, accumulation, and the
// bands of causal attention (terms well outside the band must not even be
// read: they hold NaN here; outputs outside a column band are not checked).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionTiles.h"
#include "runtime/cpu/Blas.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {
using braid::cpu::ProductBand;
using braid::cpu::StridedMatrix;

/// The instruction sets to test: those this CPU runs.
std::vector<std::string> runnableIsas() {
  std::vector<std::string> isas;
  for (const char *isa : {"sse2", "avx2", "avx512"})
    if (braid::cpu::setVectorIsa(isa))
      isas.push_back(isa);
  braid::cpu::setVectorIsa("");
  return isas;
}

struct Product {
  int64_t m, n, k;
  bool transposeA, transposeB, accumulate;
  ProductBand band;
};

/// Runs one product on the current instruction set and checks every needed
/// element against the double sum.
void check(const Product &p, std::mt19937 &rng, bool packed) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float nan = std::nanf("");
  // A m × k, stored either way. Outside the band its terms are zero: the
  // ones next to it (a register tile's rows, up to 6, take the band of all
  // of them) 0, the others NaN, which a product that read them would show.
  std::vector<float> a(p.m * p.k), b(p.k * p.n), c(p.m * p.n), c0;
  auto aAt = [&](int64_t i, int64_t kk) -> float & {
    return p.transposeA ? a[kk * p.m + i] : a[i * p.k + kk];
  };
  auto bAt = [&](int64_t kk, int64_t j) -> float & {
    return p.transposeB ? b[j * p.k + kk] : b[kk * p.n + j];
  };
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t kk = 0; kk < p.k; ++kk) {
      bool inBand = kk >= i + p.band.termsFrom && kk < i + p.band.termsBefore;
      bool near = kk >= i + p.band.termsFrom - 8 &&
                  kk < i + p.band.termsBefore + 8;
      aAt(i, kk) = inBand ? u(rng) : (near ? 0.0f : nan);
    }
  for (float &x : b)
    x = u(rng);
  for (float &x : c)
    x = u(rng);
  c0 = c;
  StridedMatrix am = p.transposeA ? StridedMatrix{a.data(), 1, p.m}
                                  : StridedMatrix{a.data(), p.k, 1};
  StridedMatrix bm = p.transposeB ? StridedMatrix{b.data(), 1, p.k}
                                  : StridedMatrix{b.data(), p.n, 1};
  const float alpha = 0.75f;
  if (packed) {
    std::vector<float> panels(braid::cpu::packedFloats(p.n, p.k));
    braid::cpu::packRight(p.n, p.k, bm, panels.data());
    braid::cpu::tileProductPacked(p.m, p.n, p.k, alpha, am, panels.data(), p.k,
                                  0, 0, p.accumulate, c.data(), p.n, p.band);
  } else {
    braid::cpu::tileProduct(p.m, p.n, p.k, alpha, am, bm, p.accumulate,
                            c.data(), p.n, p.band);
  }
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n && j < i + p.band.columnsBefore; ++j) {
      double sum = 0, size = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        float x = aAt(i, kk);
        if (std::isnan(x))
          continue;
        sum += double(x) * bAt(kk, j);
        size += std::fabs(double(x) * bAt(kk, j));
      }
      double want = alpha * sum + (p.accumulate ? c0[i * p.n + j] : 0.0);
      // Float sums of k terms: within k roundings of the terms' size.
      double tol = 1e-6 * (double(p.k) * size + 1.0);
      ASSERT_NEAR(c[i * p.n + j], want, tol)
          << "element (" << i << ", " << j << ") of " << p.m << " x " << p.n
          << " x " << p.k << (packed ? " packed" : "");
    }
}

TEST(AttentionTiles, ProductsOfEveryShapeAndOrientation) {
  std::mt19937 rng(7);
  for (const std::string &isa : runnableIsas()) {
    SCOPED_TRACE(isa);
    ASSERT_TRUE(braid::cpu::setVectorIsa(isa.c_str()));
    for (int64_t m : {1, 5, 6, 7, 13, 64})
      for (int64_t n : {1, 7, 16, 17, 32, 33, 64})
        for (int64_t k : {0, 1, 9, 64})
          for (int flags = 0; flags < 8; ++flags) {
            Product p{m, n, k, bool(flags & 1), bool(flags & 2),
                      bool(flags & 4), {}};
            check(p, rng, false);
            check(p, rng, true);
          }
  }
  braid::cpu::setVectorIsa("");
}

TEST(AttentionTiles, CausalBandsSkipTermsAndColumns) {
  std::mt19937 rng(8);
  for (const std::string &isa : runnableIsas()) {
    SCOPED_TRACE(isa);
    ASSERT_TRUE(braid::cpu::setVectorIsa(isa.c_str()));
    for (int64_t offset : {-40, -3, 0, 1, 5, 64}) {
      // Scores: row i needs columns j < i + offset.
      Product scores{64, 80, 64, false, true, false, {}};
      scores.band.columnsBefore = offset;
      check(scores, rng, false);
      // P V and dS K: row i's terms stop at i + offset (NaN after).
      Product rows{64, 64, 80, false, false, false, {}};
      rows.band.termsBefore = offset;
      check(rows, rng, false);
      check(rows, rng, true);
      // dSᵀ Q and Pᵀ dO, accumulated: key i's terms start at i + offset.
      Product cols{80, 64, 64, true, false, true, {}};
      cols.band.termsFrom = offset;
      check(cols, rng, false);
      check(cols, rng, true);
    }
  }
  braid::cpu::setVectorIsa("");
}

TEST(AttentionTiles, PackedOperandAtAnOffset) {
  // A block's keys [32, 96) of a head's 100 packed once: the same as the
  // product of those rows or columns alone.
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t seq = 100, d = 24, rows = 10, first = 32, keys = 64;
  static_assert(first % braid::cpu::kTileColumnsAll == 0);
  std::vector<float> kmat(seq * d), q(rows * d), p(rows * keys);
  for (auto *v : {&kmat, &q, &p})
    for (float &x : *v)
      x = u(rng);
  for (const std::string &isa : runnableIsas()) {
    SCOPED_TRACE(isa);
    ASSERT_TRUE(braid::cpu::setVectorIsa(isa.c_str()));
    // Scores: q kᵀ over columns [first, first + keys) of kᵀ (d × seq).
    std::vector<float> kt(braid::cpu::packedFloats(seq, d));
    braid::cpu::packRight(seq, d, {kmat.data(), 1, d}, kt.data());
    std::vector<float> s1(rows * keys), s2(rows * keys);
    braid::cpu::tileProductPacked(rows, keys, d, 1.0f, {q.data(), d, 1},
                                  kt.data(), d, 0, first, false, s1.data(),
                                  keys);
    braid::cpu::tileProduct(rows, keys, d, 1.0f, {q.data(), d, 1},
                            {kmat.data() + first * d, 1, d}, false, s2.data(),
                            keys);
    EXPECT_EQ(s1, s2);
    // p k over rows [first, first + keys) of k (seq × d).
    std::vector<float> kp(braid::cpu::packedFloats(d, seq));
    braid::cpu::packRight(d, seq, {kmat.data(), d, 1}, kp.data());
    std::vector<float> o1(rows * d), o2(rows * d);
    braid::cpu::tileProductPacked(rows, d, keys, 1.0f, {p.data(), keys, 1},
                                  kp.data(), seq, first, 0, false, o1.data(),
                                  d);
    braid::cpu::tileProduct(rows, d, keys, 1.0f, {p.data(), keys, 1},
                            {kmat.data() + first * d, d, 1}, false, o2.data(),
                            d);
    EXPECT_EQ(o1, o2);
  }
  braid::cpu::setVectorIsa("");
}

TEST(AttentionTiles, UnknownInstructionSetIsRefused) {
  EXPECT_FALSE(braid::cpu::setVectorIsa("neon"));
  EXPECT_TRUE(braid::cpu::setVectorIsa("sse2"));
  EXPECT_STREQ(braid::cpu::vectorIsaName(), "sse2");
  EXPECT_TRUE(braid::cpu::setVectorIsa(""));
}

} // namespace
