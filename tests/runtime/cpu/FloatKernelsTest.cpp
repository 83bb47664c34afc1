//===- FloatKernelsTest.cpp - Float elementwise kernels against double ----===//
//
// The float GeLU, SwiGLU and cross-entropy kernels compute in float with
// FastMath.h's functions. On the same inputs (the float values widened) the
// float results must stay within a few float roundings of double: of the
// double kernels (libm) for SwiGLU and the cross-entropy, of GeLU's
// definition written here in a form exact in its tails. FastMath's bounds
// (2^-22 to 2^-20) plus the float arithmetic around them; each bound below
// is stated per kernel, none looser than 2^-18 of the scale it names.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include "TestData.h"

#include "gtest/gtest.h"

#include <cmath>
#include <vector>

using namespace braid::cpu;
using braid::test::randomIds;
using braid::test::randomVec;

namespace {

std::vector<double> widen(const std::vector<float> &x) {
  return std::vector<double>(x.begin(), x.end());
}

/// The largest |f[i] - d[i]| / scale(i) over i.
template <typename Scale>
double worstError(const std::vector<float> &f, const std::vector<double> &d,
                  Scale scale) {
  double worst = 0;
  for (size_t i = 0; i < f.size(); ++i)
    worst = std::max(worst, std::fabs(f[i] - d[i]) / scale(i));
  return worst;
}

constexpr int64_t kN = 200003; // several element blocks and a partial one
/// Magnitudes this small count as zero (expFast's results stop at e^-86,
/// 4.5e-38, and the terms below multiply several of them).
constexpr double kFloor = 1e-30;

/// GeLU's pieces in double from their definitions, with 1 + tanh u and
/// 1 + erf w in forms without cancellation (the double kernels compute
/// 1 + tanh u as written, which is 0 in double too once tanh u is within
/// 2^-53 of -1, so they cannot judge the float kernels' tails).
struct GeluRef {
  double y, grad, terms; // terms: the magnitudes of grad's two terms, summed
  double headroom;       // 1 + |d(log result) / d(argument)| (see below)
};
GeluRef geluRef(double v, bool tanhApprox) {
  constexpr double kA = 0.7978845608028654, kB = 0.044715;
  GeluRef r;
  double first, second;
  if (tanhApprox) {
    double u = kA * (v + kB * v * v * v);
    double e = std::exp(-2 * std::fabs(u));
    double plus = u < 0 ? 2 * e / (1 + e) : 2 / (1 + e);
    double minus2 = 4 * e / ((1 + e) * (1 + e));
    r.y = 0.5 * v * plus;
    first = 0.5 * plus;
    second = 0.5 * v * minus2 * kA * (1 + 3 * kB * v * v);
    r.headroom = 1 + 2 * std::fabs(u);
  } else {
    double w = v / std::sqrt(2.0);
    double plus = w < 0 ? std::erfc(-w) : 1 + std::erf(w);
    r.y = 0.5 * v * plus;
    first = 0.5 * plus;
    second = v * 0.3989422804014327 * std::exp(-0.5 * v * v);
    r.headroom = 1 + w * w;
  }
  r.grad = first + second;
  r.terms = std::fabs(first) + std::fabs(second);
  return r;
}

TEST(FloatKernels, GeluMatchesItsDefinition) {
  // Inputs over [-10, 10]: both tails (where 1 + tanh and 1 + erf are far
  // below float's resolution near 1) and the curved middle.
  std::vector<float> x = randomVec<float>(kN, 1, 10.0),
                     dy = randomVec<float>(kN, 2);
  for (bool tanhApprox : {false, true}) {
    std::vector<float> y(kN), dx(kN);
    geluForward(x.data(), kN, tanhApprox, y.data());
    geluBackward(x.data(), dy.data(), kN, tanhApprox, dx.data());
    std::vector<double> yRef(kN), dxRef(kN), yScale(kN), dxScale(kN);
    for (int64_t i = 0; i < kN; ++i) {
      GeluRef r = geluRef(x[i], tanhApprox);
      yRef[i] = r.y;
      dxRef[i] = dy[i] * r.grad;
      // The argument w of tanh or erf: in the tails the result is about
      // e^(-2|w|) or e^(-w^2), and the float rounding of w alone moves it
      // by |2w| or w^2 times 2^-24; elsewhere a few roundings. Forward has
      // no cancellation: relative. Backward's two terms cancel near the
      // derivative's zero: relative to their magnitudes' sum. Below
      // kFloor, results are flushed towards 0.
      yScale[i] = (std::fabs(r.y) + kFloor) * r.headroom;
      dxScale[i] = std::fabs(dy[i]) * (r.terms + kFloor) * r.headroom;
    }
    EXPECT_LT(worstError(y, yRef, [&](size_t i) { return yScale[i]; }),
              std::ldexp(1.0, -20))
        << "forward, tanh " << tanhApprox;
    EXPECT_LT(worstError(dx, dxRef, [&](size_t i) { return dxScale[i]; }),
              std::ldexp(1.0, -20))
        << "backward, tanh " << tanhApprox;
  }
}

TEST(FloatKernels, SwigluMatchesDouble) {
  std::vector<float> g = randomVec<float>(kN, 3, 10.0),
                     u = randomVec<float>(kN, 4), dy = randomVec<float>(kN, 5);
  std::vector<double> gd = widen(g), ud = widen(u), dyd = widen(dy);
  std::vector<float> y(kN), dg(kN), du(kN);
  std::vector<double> yd(kN), dgd(kN), dud(kN);
  swigluForward(g.data(), u.data(), kN, y.data());
  swigluForward(gd.data(), ud.data(), kN, yd.data());
  swigluBackward(g.data(), u.data(), dy.data(), kN, dg.data(), du.data());
  swigluBackward(gd.data(), ud.data(), dyd.data(), kN, dgd.data(), dud.data());
  // sigmoid to 2^-21 relative, times two float products.
  auto rel = [&](const std::vector<double> &ref) {
    return [&ref](size_t i) { return std::fabs(ref[i]) + 1e-30; };
  };
  EXPECT_LT(worstError(y, yd, rel(yd)), std::ldexp(1.0, -20));
  EXPECT_LT(worstError(du, dud, rel(dud)), std::ldexp(1.0, -20));
  // dgate = dy u s (1 + g (1 - s)): 1 - s cancels for large g, so the error
  // is relative to dy u (1 + |g|).
  EXPECT_LT(worstError(dg, dgd,
                       [&](size_t i) {
                         return std::fabs(dyd[i] * ud[i]) *
                                    (1 + std::fabs(gd[i])) +
                                1e-30;
                       }),
            std::ldexp(1.0, -20));
}

TEST(FloatKernels, CrossEntropyMatchesDouble) {
  const int64_t rows = 40, vocab = 5003;
  std::vector<float> logits = randomVec<float>(rows * vocab, 6, 12.0);
  std::vector<double> logitsD = widen(logits);
  std::vector<int32_t> targets = randomIds(rows, vocab, 7);
  targets[3] = -100;
  std::vector<float> lse(rows), dlogits(rows * vocab);
  std::vector<double> lseD(rows), dlogitsD(rows * vocab);
  int64_t counted = 0, countedD = 0;
  float loss = crossEntropyForward(logits.data(), targets.data(), rows, vocab,
                                   -100, lse.data(), &counted);
  double lossD = crossEntropyForward(logitsD.data(), targets.data(), rows,
                                     vocab, -100, lseD.data(), &countedD);
  EXPECT_EQ(counted, countedD);
  // The sum of exponentials in double; exp to 2^-22 relative, so lse is
  // off by about 2^-22 absolute, plus its rounding to float (|lse| < 32).
  EXPECT_NEAR(loss, lossD, std::ldexp(1.0, -18));
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_NEAR(lse[r], lseD[r], std::ldexp(1.0, -18)) << r;
  crossEntropyBackward(logits.data(), targets.data(), lse.data(), 1.5f, rows,
                       vocab, -100, counted, dlogits.data());
  crossEntropyBackward(logitsD.data(), targets.data(), lseD.data(), 1.5, rows,
                       vocab, -100, countedD, dlogitsD.data());
  // softmax · scale: exp's error and lse's float rounding (2^-19 relative
  // at |lse| < 32), relative to each element; the target's element also
  // subtracts scale, so it is relative to scale there.
  double scale = 1.5 / counted;
  EXPECT_LT(worstError(dlogits, dlogitsD,
                       [&](size_t i) {
                         return std::fabs(dlogitsD[i]) + scale * 1e-6 + 1e-30;
                       }),
            std::ldexp(1.0, -18));
}

} // namespace
