//===- CostModelTest.cpp - The cost model against hand counts -------------===//
//
// Each test prices a compiled tiny-llama plan on a cluster where only one
// kind of work costs anything, so the prediction can be checked against a
// count made here from the model's dimensions.

#include "compiler/CostModel.h"

#include "compiler/Compile.h"
#include "compiler/PlanExport.h"
#include "compiler/Registration.h"
#include "runtime/plan/Work.h"

#include "TestUtil.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace braid;
using namespace braid::test;

namespace {

/// One node of `devices`, one calibration for that many ranks in which
/// every kernel is free unless `rates` says otherwise.
spec::Cluster freeCluster(int64_t devices) {
  spec::Cluster c;
  c.set_name("test");
  c.set_nodes(1);
  c.set_devices_per_node(devices);
  c.set_memory_bytes(int64_t(1) << 40);
  spec::Calibration *cal = c.add_calibrations();
  cal->set_ranks_per_node(devices);
  spec::KernelRate *free = cal->add_kernels();
  free->set_kernel("default"); // no rates, no overhead: 0 s
  cal->mutable_intra_node()->set_bandwidth(1e30);
  return c;
}

/// freeCluster with the weight gradients' kernels at 1 GFLOP/s and a link
/// of 1 GB/s without latency: what the gradients' sums hide behind.
spec::Cluster slowLinkCluster(int64_t devices) {
  spec::Cluster cluster = freeCluster(devices);
  spec::Calibration *cal = cluster.mutable_calibrations(0);
  cal->mutable_intra_node()->set_bandwidth(1e9);
  spec::KernelRate *r = cal->add_kernels();
  r->set_kernel("LINEAR_GRAD_WEIGHT");
  r->set_flops_per_s(1e9);
  return cluster;
}

/// tiny-llama (16 tokens a sample) with ZeRO-1 over dp 2, two micro-batches
/// of one sample a rank, ZeRO buckets of 20 KB.
spec::JobSpec zeroOneJob() {
  spec::JobSpec job = presetJob("tiny-llama", 16, 1);
  job.mutable_parallel()->set_dp(2);
  job.mutable_parallel()->set_zero(1);
  job.mutable_parallel()->set_zero_bucket_bytes(20000);
  job.mutable_parallel()->set_global_batch_size(4);
  return job;
}

/// A node of `devices` ranks and one core, calibrated with one rank of one
/// thread (which had the core to itself): LINEAR runs at 1 GFLOP/s, every
/// other kernel and all communication are free.
spec::Cluster sharedCoreCluster(int64_t devices) {
  spec::Cluster cluster = freeCluster(devices);
  spec::Calibration *one = cluster.mutable_calibrations(0);
  one->set_ranks_per_node(1);
  one->set_threads_per_rank(1);
  one->set_cores(1);
  spec::KernelRate *r = one->add_kernels();
  r->set_kernel("LINEAR");
  r->set_flops_per_s(1e9);
  return cluster;
}

// tiny-llama: hidden 64, 4 heads, 2 kv heads of 16, ffn 176, 2 layers,
// vocab 512, untied, no biases. Its linears' in x out, per layer: q 64x64,
// k 64x32, v 64x32, o 64x64, gate, up 64x176, down 176x64; lm_head 64x512.
constexpr double kLayerInOut =
    64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 176;
constexpr double kInOut = 2 * kLayerInOut + 64 * 512;
// Parameters: embedding, per layer two norms and the linears, final norm,
// lm_head.
constexpr double kParameters = 512 * 64 + 2 * (2 * 64 + kLayerInOut) + 64 +
                               64 * 512;

/// A plan of one rank whose step is one micro-batch running one `kernel`
/// call on bf16 buffers of the given shapes (its `attrs` as int attributes).
plan::Plan oneKernelPlan(plan::Kernel kernel,
                         const std::vector<std::vector<int64_t>> &inputs,
                         const std::vector<std::vector<int64_t>> &outputs,
                         const std::map<std::string, int64_t> &attrs = {}) {
  plan::Plan p;
  plan::Function *fn = p.add_functions();
  fn->set_name("micro");
  plan::Instruction *inst = fn->add_body();
  inst->set_kernel(kernel);
  auto buffer = [&](const std::vector<int64_t> &shape) {
    plan::Buffer *b = p.add_buffers();
    b->set_name("b" + std::to_string(p.buffers_size()));
    b->set_dtype(plan::BF16);
    for (int64_t d : shape)
      b->add_shape(d);
    return p.buffers_size() - 1;
  };
  for (const std::vector<int64_t> &shape : inputs)
    inst->add_inputs(buffer(shape));
  for (const std::vector<int64_t> &shape : outputs)
    inst->add_outputs(buffer(shape));
  for (auto [name, value] : attrs)
    (*inst->mutable_int_attrs())[name] = value;
  p.mutable_training()->set_micro_batches(1);
  p.mutable_training()->mutable_step()->set_micro_step("micro");
  return p;
}

/// The roofline's seconds of `kernel` in `plan`'s step (its only call).
double kernelSeconds(const plan::Plan &plan, const spec::Cluster &cluster,
                     const std::string &kernel) {
  llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
  EXPECT_TRUE(bool(p)) << llvm::toString(p.takeError());
  return p ? p->kernels[kernel] : 0.0;
}

/// A cluster of one device that prices bf16 matrix products only: no
/// overhead, memory that takes no time, 1e15 FLOP/s at peak.
spec::Cluster productCluster() {
  spec::Cluster c;
  c.set_name("products");
  c.set_nodes(1);
  c.set_devices_per_node(1);
  c.set_memory_bytes(int64_t(1) << 40);
  c.set_peak_flops_bf16(1e15);
  c.set_peak_flops_fp32(1e14);
  return c;
}

void addPoint(spec::Cluster &c, double flops, double efficiency) {
  spec::MatmulEfficiency *point = c.add_matmul_curve();
  point->set_flops(flops);
  point->set_efficiency(efficiency);
}

/// The curve's efficiency at `flops` from its points, as cluster.proto
/// defines it: linear in log(flops) between the two points around it,
/// the first or last point's beyond them.
double curveAt(
    const google::protobuf::RepeatedPtrField<spec::MatmulEfficiency> &points,
    double flops) {
  if (flops <= points[0].flops())
    return points[0].efficiency();
  for (int i = 1; i < points.size(); ++i)
    if (flops <= points[i].flops()) {
      double x0 = std::log(points[i - 1].flops()),
             x1 = std::log(points[i].flops());
      double y0 = points[i - 1].efficiency(), y1 = points[i].efficiency();
      return y0 + (y1 - y0) * (std::log(flops) - x0) / (x1 - x0);
    }
  return points[points.size() - 1].efficiency();
}

TEST(CostModel, MatmulCurveIsLinearInLogFlopsAndClamped) {
  spec::Cluster c = productCluster();
  // No curve: matmul_efficiency, or 0.6 unset, for every size.
  EXPECT_EQ(matmulEfficiency(c, 1e9, true), 0.6);
  c.set_matmul_efficiency(0.45);
  EXPECT_EQ(matmulEfficiency(c, 1e3, true), 0.45);
  EXPECT_EQ(matmulEfficiency(c, 1e15, false), 0.45);
  addPoint(c, 1e6, 0.1);
  addPoint(c, 1e8, 0.5);
  addPoint(c, 1e10, 0.8);
  // At the points, their efficiency.
  EXPECT_DOUBLE_EQ(matmulEfficiency(c, 1e6, true), 0.1);
  EXPECT_DOUBLE_EQ(matmulEfficiency(c, 1e8, true), 0.5);
  EXPECT_DOUBLE_EQ(matmulEfficiency(c, 1e10, true), 0.8);
  // Halfway in log(flops) between two points: halfway between their
  // efficiencies; a quarter of the way (10^8.5), a quarter.
  EXPECT_NEAR(matmulEfficiency(c, 1e7, true), 0.3, 1e-12);
  EXPECT_NEAR(matmulEfficiency(c, 1e9, true), 0.65, 1e-12);
  EXPECT_NEAR(matmulEfficiency(c, std::pow(10.0, 8.5), true), 0.575, 1e-12);
  // Beyond the points: the nearest point's.
  EXPECT_EQ(matmulEfficiency(c, 10, true), 0.1);
  EXPECT_EQ(matmulEfficiency(c, 0, true), 0.1);
  EXPECT_EQ(matmulEfficiency(c, 1e14, true), 0.8);
  // fp32 products have no curve here: matmul_efficiency, but no faster
  // than the bf16 curve's FLOP/s: 1e15 x 0.65 at 1e9 FLOPs is 6.5 times
  // the fp32 peak's 1e14 (0.45 stands); with an fp32 peak of 5e14, 1e6
  // FLOPs reach 1e15 x 0.1 = 0.2 of it.
  EXPECT_EQ(matmulEfficiency(c, 1e9, false), 0.45);
  c.set_peak_flops_fp32(5e14);
  EXPECT_EQ(matmulEfficiency(c, 1e9, false), 0.45);
  EXPECT_NEAR(matmulEfficiency(c, 1e6, false), 0.2, 1e-12);
  EXPECT_NEAR(matmulEfficiency(c, 1e7, false), 0.45, 1e-12); // 0.3 x 2 = 0.6
  // With an fp32 curve, its own.
  spec::MatmulEfficiency *fp32 = c.add_matmul_curve_fp32();
  fp32->set_flops(1e9);
  fp32->set_efficiency(0.9);
  EXPECT_EQ(matmulEfficiency(c, 1e3, false), 0.9);
  EXPECT_EQ(matmulEfficiency(c, 1e12, false), 0.9);
  EXPECT_NEAR(matmulEfficiency(c, 1e9, true), 0.65, 1e-12);
}

TEST(CostModel, GpuMeasurementBecomesTheCurves) {
  // Against productCluster's peaks (1e15 bf16, 1e14 fp32) and a memory
  // bandwidth of 4e12: 2·1000³ FLOPs in 4 us is 5e14 FLOP/s (0.5);
  // 2·10·100·1000 in 20 ns is 1e14 (0.1); two products of 4e9 FLOPs at 4e14
  // and 8e14 average to 0.6; fp32 2·100³ in 2e-7 s is 1e13 (0.1); 2e12
  // bytes/s of 4e12 is 0.5.
  spec::Cluster base = productCluster();
  base.set_memory_bandwidth(4e12);
  base.mutable_intra_node()->set_bandwidth(1e11);
  spec::GpuMeasurement m;
  m.set_device("test GPU");
  auto add = [](auto *products, int64_t mm, int64_t n, int64_t k, double s) {
    spec::GpuMeasurement::Product *p = products->Add();
    p->set_m(mm);
    p->set_n(n);
    p->set_k(k);
    p->set_seconds(s);
  };
  add(m.mutable_bf16(), 1000, 1000, 1000, 4e-6);
  add(m.mutable_bf16(), 10, 100, 1000, 2e-8);
  add(m.mutable_bf16(), 2000, 1000, 1000, 1e-5);
  add(m.mutable_bf16(), 1000, 2000, 1000, 5e-6);
  add(m.mutable_fp32(), 100, 100, 100, 2e-7);
  m.set_vector_bytes_per_s(2e12);
  m.set_kernel_call_s(3e-6);
  llvm::Expected<spec::Cluster> c = clusterFromGpuMeasurement(base, m);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name(), "products-measured");
  ASSERT_EQ(c->matmul_curve_size(), 3);
  const double flops[] = {2e6, 2e9, 4e9}, efficiency[] = {0.1, 0.5, 0.6};
  for (int i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(c->matmul_curve(i).flops(), flops[i]) << i;
    EXPECT_NEAR(c->matmul_curve(i).efficiency(), efficiency[i], 1e-12) << i;
  }
  ASSERT_EQ(c->matmul_curve_fp32_size(), 1);
  EXPECT_DOUBLE_EQ(c->matmul_curve_fp32(0).flops(), 2e6);
  EXPECT_NEAR(c->matmul_curve_fp32(0).efficiency(), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(c->vector_efficiency(), 0.5);
  EXPECT_DOUBLE_EQ(c->kernel_overhead_s(), 3e-6);
  // The links and peaks are base's.
  EXPECT_EQ(c->intra_node().bandwidth(), 1e11);
  EXPECT_EQ(c->peak_flops_bf16(), 1e15);
  // The cost model reads it as the curve it is.
  EXPECT_NEAR(matmulEfficiency(*c, 2e9, true), 0.5, 1e-12);

  // Attention: a causal shape of batch 2, seq 1024, 16 heads of 128 has
  // 2 x 16 x 1024·1025/2 = 16793600 scores: forward 4·128 FLOPs each
  // (8.6e9 in 40 us: 0.215 of the 1e15 peak), backward 10·128 each and
  // 2·128 per row (2 x 16 x 1024 rows). A second shape of the same FLOPs
  // (batch 1, 32 heads) averages with it: efficiency = FLOPs / seconds /
  // peak, the two shapes' mean.
  spec::GpuMeasurement withAttention = m;
  auto attention = [&](int64_t batch, int64_t heads, double f, double b) {
    spec::GpuMeasurement::Attention *a = withAttention.add_attention();
    a->set_batch(batch);
    a->set_seq(1024);
    a->set_heads(heads);
    a->set_kv_heads(heads);
    a->set_head_dim(128);
    a->set_causal(true);
    a->set_forward_seconds(f);
    a->set_backward_seconds(b);
  };
  attention(2, 16, 4e-5, 2e-4);
  attention(1, 32, 8e-5, 1e-4);
  llvm::Expected<spec::Cluster> ca =
      clusterFromGpuMeasurement(base, withAttention);
  ASSERT_TRUE(bool(ca)) << llvm::toString(ca.takeError());
  const double scores = 2.0 * 16 * 1024 * 1025 / 2;
  const double fFlops = 4 * 128 * scores,
               bFlops = 10 * 128 * scores + 2 * 128 * (2.0 * 16 * 1024);
  ASSERT_EQ(ca->attention_curve_size(), 1);
  EXPECT_EQ(ca->attention_curve(0).head_dim(), 128);
  EXPECT_DOUBLE_EQ(ca->attention_curve(0).flops(), fFlops);
  EXPECT_NEAR(ca->attention_curve(0).efficiency(),
              (fFlops / 4e-5 + fFlops / 8e-5) / 2 / 1e15, 1e-12);
  ASSERT_EQ(ca->attention_grad_curve_size(), 1);
  EXPECT_DOUBLE_EQ(ca->attention_grad_curve(0).flops(), bFlops);
  EXPECT_NEAR(ca->attention_grad_curve(0).efficiency(),
              (bFlops / 2e-4 + bFlops / 1e-4) / 2 / 1e15, 1e-12);
  // Faster than the peak, or no time: errors naming the shape.
  spec::GpuMeasurement tooFast = withAttention;
  tooFast.mutable_attention(0)->set_forward_seconds(1e-6);
  llvm::Expected<spec::Cluster> e4 = clusterFromGpuMeasurement(base, tooFast);
  ASSERT_FALSE(bool(e4));
  EXPECT_NE(llvm::toString(e4.takeError())
                .find("attention batch 2, seq 1024, heads 16/16 of 128 ran at"),
            std::string::npos);
  spec::GpuMeasurement noTime = withAttention;
  noTime.mutable_attention(1)->set_backward_seconds(0);
  llvm::Expected<spec::Cluster> e5 = clusterFromGpuMeasurement(base, noTime);
  ASSERT_FALSE(bool(e5));
  EXPECT_NE(llvm::toString(e5.takeError()).find("backward in 0 s"),
            std::string::npos);

  // A product faster than the peak (another GPU's measurement), a time
  // that is not one, fp32 products without an fp32 peak: errors that say
  // so.
  spec::GpuMeasurement fast = m;
  fast.mutable_bf16(0)->set_seconds(1e-6);
  llvm::Expected<spec::Cluster> e1 = clusterFromGpuMeasurement(base, fast);
  ASSERT_FALSE(bool(e1));
  EXPECT_NE(llvm::toString(e1.takeError()).find("above cluster products"),
            std::string::npos);
  spec::GpuMeasurement zero = m;
  zero.mutable_bf16(1)->set_seconds(0);
  llvm::Expected<spec::Cluster> e2 = clusterFromGpuMeasurement(base, zero);
  ASSERT_FALSE(bool(e2));
  EXPECT_NE(llvm::toString(e2.takeError()).find("10 x 100 x 1000"),
            std::string::npos);
  spec::Cluster noFp32 = base;
  noFp32.clear_peak_flops_fp32();
  llvm::Expected<spec::Cluster> e3 = clusterFromGpuMeasurement(noFp32, m);
  ASSERT_FALSE(bool(e3));
  EXPECT_NE(llvm::toString(e3.takeError()).find("no peak fp32"),
            std::string::npos);
}

TEST(CostModel, SmallProductsReachLessOfThePeakOnDgxH100) {
  // One LINEAR of 4096 tokens, x [4096, n] · w [n, n], bf16, on dgx-h100:
  // 4 us of launch + max(FLOPs / (989 TFLOP/s x the curve's efficiency at
  // its 2·4096·n² FLOPs), bytes / (3.35 TB/s x 0.7)). A 2304-wide model's
  // product (4.35e10 FLOPs, between the curve's 2048^3 and 4096^3 points:
  // about 0.707) reaches less of the peak than a 12288-wide one's (1.24e12,
  // beyond the last point: 793.1 / 989 = 0.802).
  llvm::Expected<spec::Cluster> h100 = loadCluster("dgx-h100");
  ASSERT_TRUE(bool(h100)) << llvm::toString(h100.takeError());
  ASSERT_GE(h100->matmul_curve_size(), 2);
  const double tokens = 4096;
  std::map<int64_t, double> perFlop, efficiency;
  for (int64_t n : {2304, 12288}) {
    SCOPED_TRACE(n);
    plan::Plan plan = oneKernelPlan(
        plan::LINEAR, {{int64_t(tokens), n}, {n, n}}, {{int64_t(tokens), n}});
    double flops = 2 * tokens * double(n) * double(n);
    double bytes = 2 * (2 * tokens * double(n) + double(n) * double(n));
    efficiency[n] = curveAt(h100->matmul_curve(), flops);
    double want = 4e-6 + std::max(flops / (989e12 * efficiency[n]),
                                  bytes / (3.35e12 * 0.7));
    double got = kernelSeconds(plan, *h100, "LINEAR");
    EXPECT_NEAR(got, want, 1e-12 * want);
    perFlop[n] = (got - 4e-6) / flops;
  }
  EXPECT_NEAR(efficiency[2304], 0.707, 1e-3);
  EXPECT_NEAR(efficiency[12288], 793.1 / 989, 1e-12);
  // Both compute-bound: the small product's FLOP costs more, by the ratio
  // of the efficiencies.
  EXPECT_GT(perFlop[2304], perFlop[12288]);
  EXPECT_NEAR(perFlop[2304] / perFlop[12288],
              efficiency[12288] / efficiency[2304], 1e-9);
}

TEST(CostModel, AttentionPricesEachProductAtItsSize) {
  // Attention of one sequence of 64 queries and keys, 2 heads of d = 32,
  // not causal: 1 x 2 x 64 x 64 = 8192 scores, each product (q·kᵀ, p·v and
  // the backward's) 2·32 FLOPs a score, 524288 FLOPs. The curve's
  // efficiency is 0.1 up to 524288 FLOPs and 0.9 from 1048576 on: priced
  // at the product's size, every kernel's FLOPs take 0.1 (at its whole
  // FLOPs, 0.9).
  spec::Cluster c = productCluster();
  addPoint(c, 524288, 0.1);
  addPoint(c, 1048576, 0.9);
  const double product = 2 * 32 * 8192;
  std::vector<int64_t> qkv = {1, 64, 64};
  std::map<std::string, int64_t> attrs = {{"heads", 2}};
  plan::Plan forward =
      oneKernelPlan(plan::ATTENTION, {qkv, qkv, qkv}, {qkv}, attrs);
  // Forward: two products.
  EXPECT_NEAR(kernelSeconds(forward, c, "ATTENTION"),
              2 * product / (1e15 * 0.1), 1e-21);
  // Backward without the forward's log-sum-exp (q, k, v, out, dout): the
  // forward's two products again, its own five (q·kᵀ, dout·vᵀ, dq, dk,
  // dv) and dout·out per query row (2·32 x 2 heads x 64 rows, priced with
  // them).
  plan::Plan backward = oneKernelPlan(
      plan::ATTENTION_GRAD, {qkv, qkv, qkv, qkv, qkv}, {qkv, qkv, qkv}, attrs);
  double flops = 7 * product + 2 * 32 * 2 * 64;
  const plan::Instruction &grad = backward.functions(0).body(0);
  EXPECT_EQ(plan::InstructionWork(backward, grad).flops, flops);
  EXPECT_NEAR(kernelSeconds(backward, c, "ATTENTION_GRAD"),
              flops / (1e15 * 0.1), 1e-21);
}

TEST(CostModel, AttentionCurveByHeadDimensionAndSize) {
  // Forward points at head dimensions 64 (0.2 at 1e9 FLOPs, 0.6 at 1e11)
  // and 128 (0.5 throughout); backward ones at 64 only (0.3).
  spec::Cluster c = productCluster();
  auto point = [](auto *curve, int64_t d, double flops, double e) {
    spec::AttentionEfficiency *p = curve->Add();
    p->set_head_dim(d);
    p->set_flops(flops);
    p->set_efficiency(e);
  };
  EXPECT_EQ(attentionEfficiency(c, 64, 1e10, false), 0.0); // no curve
  point(c.mutable_attention_curve(), 64, 1e9, 0.2);
  point(c.mutable_attention_curve(), 64, 1e11, 0.6);
  point(c.mutable_attention_curve(), 128, 1e10, 0.5);
  point(c.mutable_attention_grad_curve(), 64, 1e10, 0.3);
  // Halfway in log(flops): halfway in efficiency; clamped beyond.
  EXPECT_NEAR(attentionEfficiency(c, 64, 1e10, false), 0.4, 1e-12);
  EXPECT_EQ(attentionEfficiency(c, 64, 1e6, false), 0.2);
  EXPECT_EQ(attentionEfficiency(c, 64, 1e14, false), 0.6);
  EXPECT_EQ(attentionEfficiency(c, 128, 1e9, false), 0.5);
  // The nearest head dimension by ratio: 80 is nearer 64 (1.25) than 128
  // (1.6), 96 nearer 128 (1.33 against 1.5); 256 takes 128, 32 takes 64.
  EXPECT_NEAR(attentionEfficiency(c, 80, 1e10, false), 0.4, 1e-12);
  EXPECT_EQ(attentionEfficiency(c, 96, 1e10, false), 0.5);
  EXPECT_EQ(attentionEfficiency(c, 256, 1e10, false), 0.5);
  EXPECT_NEAR(attentionEfficiency(c, 32, 1e10, false), 0.4, 1e-12);
  // The backward's own curve, whatever the head dimension.
  EXPECT_EQ(attentionEfficiency(c, 128, 1e12, true), 0.3);

  // A bf16 call is priced at its whole FLOPs (Work: 4d per score forward,
  // 10d per score and 2d per row backward) over peak x efficiency: one
  // sequence of 64, 2 heads of 64, causal: 2 x 64·65/2 = 4160 scores.
  std::vector<int64_t> qkv = {1, 64, 128};
  std::map<std::string, int64_t> attrs = {{"heads", 2}, {"causal", 1}};
  plan::Plan forward =
      oneKernelPlan(plan::ATTENTION, {qkv, qkv, qkv}, {qkv}, attrs);
  const double scores = 2 * 64 * 65 / 2.0, fFlops = 4 * 64 * scores;
  EXPECT_EQ(plan::InstructionWork(forward, forward.functions(0).body(0)).flops,
            fFlops);
  EXPECT_NEAR(kernelSeconds(forward, c, "ATTENTION"), fFlops / (1e15 * 0.2),
              1e-21);
  // The backward with the forward's log-sum-exp (q, k, v, out, dout, lse).
  plan::Plan backward =
      oneKernelPlan(plan::ATTENTION_GRAD, {qkv, qkv, qkv, qkv, qkv, {1, 2, 64}},
                    {qkv, qkv, qkv}, attrs);
  const double bFlops = 10 * 64 * scores + 2 * 64 * 2 * 64;
  EXPECT_NEAR(kernelSeconds(backward, c, "ATTENTION_GRAD"),
              bFlops / (1e15 * 0.3), 1e-21);
  // fp32 attention (CUDA cores) keeps the products' pricing: 0.6 without a
  // matmul curve, against the fp32 peak, for all its FLOPs.
  for (plan::Buffer &b : *forward.mutable_buffers())
    b.set_dtype(plan::F32);
  EXPECT_NEAR(kernelSeconds(forward, c, "ATTENTION"), fFlops / (1e14 * 0.6),
              1e-21);
}

TEST(CostModel, MatrixProductsAtMeasuredRates) {
  // Serial, 2 sequences of 16 tokens: each linear runs once forward, and
  // once for its input gradient and once for its weight gradient.
  plan::Plan plan = compilePlan(presetJob("tiny-llama", 16, 2));
  spec::Cluster cluster = freeCluster(1);
  spec::Calibration *cal = cluster.mutable_calibrations(0);
  for (auto [kernel, rate] : {std::pair<const char *, double>{"LINEAR", 1e9},
                              {"LINEAR_GRAD_INPUT", 2e9},
                              {"LINEAR_GRAD_WEIGHT", 4e9}}) {
    spec::KernelRate *r = cal->add_kernels();
    r->set_kernel(kernel);
    r->set_flops_per_s(rate);
  }
  llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  double flops = 2.0 * (2 * 16) * kInOut;
  double want = flops / 1e9 + flops / 2e9 + flops / 4e9;
  EXPECT_NEAR(p->stepTime, want, 1e-12 * want);
  EXPECT_NEAR(p->compute, want, 1e-12 * want);
  EXPECT_TRUE(p->communication.empty());
  // By kernel kind: each at its own rate, the free ones at 0.
  EXPECT_NEAR(p->kernels["LINEAR"], flops / 1e9, 1e-12 * want);
  EXPECT_NEAR(p->kernels["LINEAR_GRAD_INPUT"], flops / 2e9, 1e-12 * want);
  EXPECT_NEAR(p->kernels["LINEAR_GRAD_WEIGHT"], flops / 4e9, 1e-12 * want);
  EXPECT_EQ(p->kernels["ATTENTION"], 0);
}

TEST(CostModel, MeasuredCallsReplaceTheRate) {
  // LINEAR measured at two calls, 1e5 FLOPs in 0.1 ms and 1e6 in 0.5 ms:
  // every call is priced on the line through them (extrapolated beyond
  // 1e6), whatever the rate says. Serial, 2 sequences of 16 tokens: 15
  // forward linears (7 per layer and lm_head), each of 2 x 32 x in x out
  // FLOPs, all of them at least 1e5.
  plan::Plan plan = compilePlan(presetJob("tiny-llama", 16, 2));
  spec::Cluster cluster = freeCluster(1);
  spec::KernelRate *r = cluster.mutable_calibrations(0)->add_kernels();
  r->set_kernel("LINEAR");
  r->set_flops_per_s(1e9); // a FLOP rate: calls count FLOPs
  r->set_overhead_s(1);    // ignored with calls
  for (auto [work, seconds] : {std::pair{1e5, 1e-4}, std::pair{1e6, 5e-4}}) {
    spec::KernelRate::CallTime *call = r->add_calls();
    call->set_work(work);
    call->set_seconds(seconds);
  }
  llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  double slope = 4e-4 / 9e5, intercept = 1e-4 - 1e5 * slope;
  double want = 15 * intercept + slope * 2.0 * (2 * 16) * kInOut;
  EXPECT_NEAR(p->compute, want, 1e-12 * want);
}

TEST(CostModel, CollectivesWaitForTheirGroup) {
  // tp 2 and tp 4 with sequence parallelism on free kernels and links,
  // calibrated with a wait of 1 ms per collective and peer: the step is
  // (tp - 1) ms per all-reduce, all-gather and reduce-scatter the step runs
  // (counted here from the plan's functions: zero_grads, the first
  // micro-batch's micro_step, the last's last_micro_step, update), since
  // ranks that share cores reach a collective
  // one after another.
  for (int64_t tp : {2, 4}) {
    spec::JobSpec job = presetJob("tiny-llama", 16, 2);
    job.mutable_parallel()->set_tp(tp);
    job.mutable_parallel()->set_sp(true);
    job.mutable_parallel()->set_global_batch_size(4); // 2 micro-batches
    plan::Plan plan = compilePlan(job);
    spec::Cluster cluster = freeCluster(tp);
    cluster.mutable_calibrations(0)->set_collective_wait_s(1e-3);
    auto count = [&](const std::string &name) {
      int64_t n = 0;
      for (const plan::Function &fn : plan.functions())
        if (fn.name() == name)
          for (const plan::Instruction &inst : fn.body())
            if ((inst.kernel() == plan::ALL_REDUCE ||
                 inst.kernel() == plan::ALL_GATHER ||
                 inst.kernel() == plan::REDUCE_SCATTER) &&
                inst.group_size() > 0)
              ++n;
      return n;
    };
    const plan::StepFunctions &step = plan.training().step();
    ASSERT_EQ(plan.training().micro_batches(), 2);
    int64_t perMicroBatch = count(step.micro_step());
    // Sequence parallelism's per layer: an all-gather before attention and
    // before the MLP and a reduce-scatter after each, mirrored backward.
    EXPECT_GE(perMicroBatch, 8 * 2);
    // The last micro-batch runs last_micro_step: micro_step's collectives
    // and the gradients' sums over tp (sequence parallelism's norm weights)
    // that update would run otherwise.
    ASSERT_FALSE(step.last_micro_step().empty());
    EXPECT_EQ(count(step.last_micro_step()), perMicroBatch + 1);
    double collectives =
        double(count(step.zero_grads()) + perMicroBatch +
               count(step.last_micro_step()) + count(step.update()));
    double peers = double(tp - 1) * collectives;
    llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    EXPECT_EQ(p->collectivePeers, peers) << tp;
    EXPECT_NEAR(p->collectiveSeconds, peers * 1e-3, 1e-12) << tp;
    // The sums last_micro_step starts early run beside the backward's later
    // collectives: the step is every wait but those hidden, and what hides
    // is at most those sums' own waits.
    EXPECT_NEAR(p->stepTime + p->hiddenCommunication, peers * 1e-3, 1e-12)
        << tp;
    EXPECT_GE(p->hiddenCommunication, 0);
    EXPECT_LE(p->hiddenCommunication, double(tp - 1) * 1e-3 + 1e-12);
    EXPECT_EQ(p->compute, 0);
  }
}

TEST(CostModel, CollectivesWaitForTheComputeSinceTheirGroupMet) {
  // dp 2 on free links, LINEAR at 1 GFLOP/s and every other kernel free,
  // calibrated with a gap share of 0.5: the gradients' all-reduce in update
  // follows every micro-batch's forward linears (the step's only compute),
  // so it waits half of them; the all-reduces after it, with no compute
  // between, and the gradient norm's wait nothing.
  for (int64_t micro : {1, 2}) {
    spec::JobSpec job = presetJob("tiny-llama", 16, 2);
    job.mutable_parallel()->set_dp(2);
    job.mutable_parallel()->set_global_batch_size(2 * 2 * micro);
    plan::Plan plan = compilePlan(job);
    ASSERT_EQ(plan.training().micro_batches(), micro);
    spec::Cluster cluster = freeCluster(2);
    spec::Calibration *cal = cluster.mutable_calibrations(0);
    cal->set_collective_gap_share(0.5);
    spec::KernelRate *r = cal->add_kernels();
    r->set_kernel("LINEAR");
    r->set_flops_per_s(1e9);
    double compute = double(micro) * 2.0 * (2 * 16) * kInOut / 1e9;
    llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    EXPECT_NEAR(p->compute, compute, 1e-12 * compute);
    EXPECT_NEAR(p->collectiveGaps, compute, 1e-12 * compute) << micro;
    EXPECT_NEAR(p->stepTime, 1.5 * compute, 1e-12 * compute) << micro;
    EXPECT_NEAR(p->communication["dp"], 0.5 * compute, 1e-12 * compute);
    // Without the share, the same plan waits nothing.
    cal->set_collective_gap_share(0);
    p = predictStep(plan, cluster);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    EXPECT_NEAR(p->stepTime, compute, 1e-12 * compute);
  }
}

TEST(CostModel, FullRecomputeRunsTheLayersForwardLinearsAgain) {
  // With full recompute each layer's forward runs again before its
  // backward, as far as the backward needs it: its linears once more except
  // down_proj, whose output only joins the residual (the next layer's kept
  // input); lm_head is no layer.
  spec::JobSpec job = presetJob("tiny-llama", 16, 2);
  spec::Cluster cluster = freeCluster(1);
  spec::KernelRate *r = cluster.mutable_calibrations(0)->add_kernels();
  r->set_kernel("LINEAR");
  r->set_flops_per_s(1e9);
  double forward = 2.0 * (2 * 16) * kInOut / 1e9;
  double again = 2.0 * (2 * 16) * 2 * (kLayerInOut - 176 * 64) / 1e9;
  for (const char *recompute : {"none", "full"}) {
    job.mutable_parallel()->set_recompute(recompute);
    llvm::Expected<StepPrediction> p = predictStep(compilePlan(job), cluster);
    ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
    double want = std::string(recompute) == "full" ? again : 0.0;
    EXPECT_NEAR(p->recompute, want, 1e-12 * again) << recompute;
    EXPECT_NEAR(p->compute, forward + want, 1e-12 * forward) << recompute;
  }
}

TEST(CostModel, RanksShareTheCalibratedCores) {
  // dp 2 on a node of one core, calibrated with one rank (which had the
  // core to itself): the two ranks compute at once, each at half the
  // measured rate. Only LINEAR costs; communication is free.
  spec::JobSpec job = presetJob("tiny-llama", 16, 2);
  job.mutable_parallel()->set_dp(2);
  spec::Cluster cluster = sharedCoreCluster(2);
  spec::Calibration *one = cluster.mutable_calibrations(0);
  // Each rank's forward linears: its micro-batch of 2 sequences of 16.
  double alone = 2.0 * (2 * 16) * kInOut / 1e9;
  llvm::Expected<StepPrediction> p = predictStep(compilePlan(job), cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_NEAR(p->compute, 2 * alone, 1e-12 * alone);
  EXPECT_NEAR(p->stepTime, 2 * alone, 1e-12 * alone);
  // Without the cores known, the one calibration prices them as measured.
  one->set_cores(0);
  p = predictStep(compilePlan(job), cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_NEAR(p->stepTime, alone, 1e-12 * alone);
}

/// tiny-llama in 2 pipeline stages, 4 micro-batches of one sequence of 16.
plan::Plan twoStagesOfFourMicroBatches() {
  spec::JobSpec job = presetJob("tiny-llama", 16, 1);
  job.mutable_parallel()->set_pp(2);
  job.mutable_parallel()->set_global_batch_size(4);
  return compilePlan(job);
}

TEST(CostModel, PipelineStagesShareOneCore) {
  // pp 2 on a node of one core: whenever both stages compute they split
  // it, and some stage always can (transfers are free), so the step takes
  // all the work of both stages, one after the other: every forward linear
  // of 4 micro-batches of one sequence of 16, at the measured rate.
  plan::Plan plan = twoStagesOfFourMicroBatches();
  spec::Cluster cluster = sharedCoreCluster(2);
  spec::Calibration *one = cluster.mutable_calibrations(0);
  double work = 2.0 * (4 * 16) * kInOut / 1e9;
  llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_NEAR(p->stepTime, work, 1e-9 * work);
  // With a core per stage the stages overlap: less than all the work, more
  // than the busier stage's.
  one->set_cores(2);
  p = predictStep(plan, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_LT(p->stepTime, 0.99 * work);
  EXPECT_GT(p->stepTime, 0.5 * work);
}

TEST(CostModel, WaitingRanksKeepTheirShareOfTheCores) {
  // pp 2 on a node of one core, a waiting rank taking as much of it as a
  // computing one (waiting_core_share 1): each stage always runs at half
  // speed, whether the other computes or waits, so the schedule takes twice
  // what it takes on two cores, where each stage has a core to itself.
  plan::Plan plan = twoStagesOfFourMicroBatches();
  spec::Cluster cluster = sharedCoreCluster(2);
  spec::Calibration *one = cluster.mutable_calibrations(0);
  one->set_cores(2);
  llvm::Expected<StepPrediction> dedicated = predictStep(plan, cluster);
  ASSERT_TRUE(bool(dedicated)) << llvm::toString(dedicated.takeError());
  one->set_cores(1);
  llvm::Expected<StepPrediction> freed = predictStep(plan, cluster);
  ASSERT_TRUE(bool(freed)) << llvm::toString(freed.takeError());
  one->set_waiting_core_share(1);
  llvm::Expected<StepPrediction> polling = predictStep(plan, cluster);
  ASSERT_TRUE(bool(polling)) << llvm::toString(polling.takeError());
  EXPECT_NEAR(polling->stepTime, 2 * dedicated->stepTime,
              1e-9 * dedicated->stepTime);
  // Halfway: between a waiting rank that frees its core and one that polls.
  one->set_waiting_core_share(0.5);
  llvm::Expected<StepPrediction> half = predictStep(plan, cluster);
  ASSERT_TRUE(bool(half)) << llvm::toString(half.takeError());
  EXPECT_GT(half->stepTime, freed->stepTime * (1 + 1e-6));
  EXPECT_LT(half->stepTime, polling->stepTime * (1 - 1e-6));
}

TEST(CostModel, GradientAllReduceOnARing) {
  // dp 2: the gradients (4 bytes per parameter) are all-reduced over dp, in
  // buckets; a ring of n = 2 moves 2 (n-1)/n of them and pays 2 (n-1)
  // latencies per all-reduce.
  spec::JobSpec job = presetJob("tiny-llama", 16, 2);
  job.mutable_parallel()->set_dp(2);
  plan::Plan plan = compilePlan(job);
  spec::Cluster cluster = freeCluster(2);
  spec::LinkClass *link = cluster.mutable_calibrations(0)->mutable_intra_node();
  link->set_bandwidth(1e9);
  link->set_latency(1e-3);
  double bytes = 0, calls = 0;
  for (const plan::Function &fn : plan.functions())
    for (const plan::Instruction &inst : fn.body())
      if (inst.kernel() == plan::ALL_REDUCE) {
        bytes += plan::InstructionWork(plan, inst).messageBytes;
        ++calls;
      }
  ASSERT_GT(calls, 0);
  EXPECT_EQ(bytes, 4 * kParameters);
  llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  double want = 4 * kParameters / 1e9 + calls * 2 * 1e-3;
  EXPECT_NEAR(p->stepTime, want, 1e-9 * want);
  EXPECT_NEAR(p->communication["dp"], want, 1e-9 * want);
  EXPECT_EQ(p->compute, 0);
}

TEST(CostModel, GradientSumsHideBehindTheLastBackward) {
  // dp 2, two micro-batches, the weight gradients' kernels at 1 GFLOP/s and
  // a link of 1 GB/s without latency: with the sums after the backward
  // (grad_bucket_bytes 0) the step is the compute and then all of them;
  // started in buckets of 20 KB as the last backward goes, all but what
  // runs after its last kernel hide. That is at least the last bucket (the
  // embedding's gradient, 512 x 64 floats, which the backward finishes
  // last), a ring of 2 moving 2 (1/2) of its bytes.
  spec::JobSpec job = presetJob("tiny-llama", 16, 1);
  job.mutable_parallel()->set_dp(2);
  job.mutable_parallel()->set_global_batch_size(4);
  spec::Cluster cluster = slowLinkCluster(2);
  double compute = 2 * 2.0 * 16 * kInOut / 1e9; // 2 micro-batches of 16 tokens
  double sums = 4 * kParameters / 1e9;
  job.mutable_parallel()->set_grad_bucket_bytes(0);
  plan::Plan after = compilePlan(job);
  EXPECT_TRUE(after.training().step().last_micro_step().empty());
  llvm::Expected<StepPrediction> serial = predictStep(after, cluster);
  ASSERT_TRUE(bool(serial)) << llvm::toString(serial.takeError());
  EXPECT_NEAR(serial->compute, compute, 1e-9 * compute);
  EXPECT_NEAR(serial->stepTime, compute + sums, 1e-9 * (compute + sums));
  EXPECT_EQ(serial->hiddenCommunication, 0);

  job.mutable_parallel()->set_grad_bucket_bytes(20000);
  plan::Plan overlapped = compilePlan(job);
  ASSERT_FALSE(overlapped.training().step().last_micro_step().empty());
  llvm::Expected<StepPrediction> p = predictStep(overlapped, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_NEAR(p->compute, compute, 1e-9 * compute);
  double lastBucket = 512 * 64 * 4 / 1e9;
  EXPECT_GT(p->hiddenCommunication, 0);
  EXPECT_NEAR(p->hiddenCommunication + p->communication["dp"], sums,
              1e-9 * sums);
  EXPECT_LT(p->stepTime, serial->stepTime - 1e-9);
  EXPECT_GE(p->stepTime, compute + lastBucket - 1e-12);
}

TEST(CostModel, ZeroOneReduceScattersHideBehindTheLastBackward) {
  // ZeRO-1 over dp 2, two micro-batches, ZeRO buckets of 20 KB, priced as
  // above: each bucket's reduce-scatter (a ring of 2 moves half its bytes)
  // and the parameters' all-gather (half again) take half the all-reduce's
  // time each. In update they follow the backward; started in the last
  // backward the reduce-scatters partly hide, the same seconds of
  // communication in all, while the all-gathers after the AdamW stay
  // exposed.
  spec::JobSpec job = zeroOneJob();
  job.mutable_parallel()->set_overlap_param_gather(false); // below
  spec::Cluster cluster = slowLinkCluster(2);
  double compute = 2 * 2.0 * 16 * kInOut / 1e9;
  double half = 4 * kParameters / 2 / 1e9; // ZeRO pads: at least this
  job.mutable_parallel()->set_grad_bucket_bytes(0);
  plan::Plan after = compilePlan(job);
  EXPECT_TRUE(after.training().step().last_micro_step().empty());
  llvm::Expected<StepPrediction> serial = predictStep(after, cluster);
  ASSERT_TRUE(bool(serial)) << llvm::toString(serial.takeError());
  EXPECT_EQ(serial->hiddenCommunication, 0);
  EXPECT_GE(serial->communication["dp"], 2 * half - 1e-12);
  EXPECT_LT(serial->communication["dp"], 2 * half * 1.01);
  EXPECT_GE(serial->stepTime, compute + 2 * half - 1e-12);

  job.mutable_parallel()->set_grad_bucket_bytes(1);
  plan::Plan overlapped = compilePlan(job);
  ASSERT_FALSE(overlapped.training().step().last_micro_step().empty());
  int scatters = 0;
  for (const plan::Function &fn : overlapped.functions())
    for (const plan::Instruction &inst : fn.body())
      if (inst.kernel() == plan::REDUCE_SCATTER) {
        EXPECT_EQ(fn.name(), "last_micro_step");
        EXPECT_EQ(inst.int_attrs().at("async"), 1);
        ++scatters;
      }
  EXPECT_GT(scatters, 1);
  llvm::Expected<StepPrediction> p = predictStep(overlapped, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_NEAR(p->compute, serial->compute, 1e-9 * serial->compute);
  EXPECT_GT(p->hiddenCommunication, 0);
  EXPECT_NEAR(p->hiddenCommunication + p->communication["dp"],
              serial->communication["dp"], 1e-9 * serial->communication["dp"]);
  EXPECT_LT(p->stepTime, serial->stepTime - 1e-9);
  EXPECT_GE(p->stepTime, compute + half - 1e-12);
}

TEST(CostModel, ZeroParameterGathersHideBehindTheNextForward) {
  // ZeRO-1 over dp 2, two micro-batches, 20 KB ZeRO buckets, the forward's
  // and the weight gradients' linears at 1 GFLOP/s, a 1 GB/s link: at the
  // end of update the parameters' gathers are all exposed; started in the
  // first micro-batch (first_micro_step) those of every bucket but the
  // embedding's (needed by the first kernel) run beside the forward. The
  // communication is the same, and the report-independent check: the
  // step is shorter by what was hidden.
  spec::JobSpec job = zeroOneJob();
  spec::Cluster cluster = slowLinkCluster(2);
  spec::KernelRate *r = cluster.mutable_calibrations(0)->add_kernels();
  r->set_kernel("LINEAR");
  r->set_flops_per_s(1e9);
  job.mutable_parallel()->set_overlap_param_gather(false);
  plan::Plan atUpdate = compilePlan(job);
  EXPECT_TRUE(atUpdate.training().step().first_micro_step().empty());
  job.mutable_parallel()->set_overlap_param_gather(true);
  plan::Plan overlapped = compilePlan(job);
  const plan::StepFunctions &fns = overlapped.training().step();
  ASSERT_FALSE(fns.first_micro_step().empty());
  ASSERT_FALSE(fns.gather_params().empty());
  int inFirst = 0, inGather = 0;
  for (const plan::Function &fn : overlapped.functions())
    for (const plan::Instruction &inst : fn.body())
      if (inst.kernel() == plan::ALL_GATHER) {
        EXPECT_TRUE(fn.name() == fns.first_micro_step() ||
                    fn.name() == fns.gather_params())
            << fn.name();
        (fn.name() == fns.gather_params() ? inGather : inFirst) += 1;
      }
  EXPECT_GT(inFirst, 1);
  EXPECT_EQ(inFirst, inGather);
  llvm::Expected<StepPrediction> before = predictStep(atUpdate, cluster);
  ASSERT_TRUE(bool(before)) << llvm::toString(before.takeError());
  llvm::Expected<StepPrediction> p = predictStep(overlapped, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_NEAR(p->compute, before->compute, 1e-9 * before->compute);
  EXPECT_GT(p->hiddenCommunication, before->hiddenCommunication);
  double all = before->hiddenCommunication + before->communication["dp"];
  EXPECT_NEAR(p->hiddenCommunication + p->communication["dp"], all, 1e-9 * all);
  EXPECT_NEAR(p->stepTime,
              before->stepTime -
                  (p->hiddenCommunication - before->hiddenCommunication),
              1e-6 * before->stepTime);
}

TEST(CostModel, PipelineStagesStartTheirSumsInTheLastBackward) {
  // pp 2 x dp 2, four micro-batches, priced as above: each stage's last
  // backward call runs a copy that starts its gradients' sums (20 KB
  // buckets), which hides part of them behind that backward's compute; the
  // sums all move out of the updates (tiny-llama ties no embedding).
  spec::JobSpec job = presetJob("tiny-llama", 16, 1);
  job.mutable_parallel()->set_pp(2);
  job.mutable_parallel()->set_dp(2);
  job.mutable_parallel()->set_global_batch_size(8);
  spec::Cluster cluster = slowLinkCluster(4);
  job.mutable_parallel()->set_grad_bucket_bytes(0);
  plan::Plan after = compilePlan(job);
  job.mutable_parallel()->set_grad_bucket_bytes(20000);
  plan::Plan overlapped = compilePlan(job);
  for (const plan::Stage &stage : overlapped.pipeline().stages()) {
    int named = 0;
    for (const plan::ScheduleStep &step : stage.schedule())
      named += !step.function().empty();
    EXPECT_EQ(named, 1);
    EXPECT_EQ(stage.schedule(stage.schedule_size() - 1).function(),
              stage.backward() + "_last");
    for (const plan::Function &fn : overlapped.functions())
      if (fn.name() == stage.update())
        for (const plan::Instruction &inst : fn.body())
          EXPECT_NE(inst.kernel(), plan::ALL_REDUCE) << fn.name();
  }
  llvm::Expected<StepPrediction> serial = predictStep(after, cluster);
  ASSERT_TRUE(bool(serial)) << llvm::toString(serial.takeError());
  llvm::Expected<StepPrediction> p = predictStep(overlapped, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_EQ(serial->hiddenCommunication, 0);
  EXPECT_GT(p->hiddenCommunication, 0);
  EXPECT_NEAR(p->compute, serial->compute, 1e-9 * serial->compute);
  EXPECT_LT(p->stepTime, serial->stepTime - 1e-9);
}

TEST(CostModel, AllReduceTakesTheCheaperOfRingAndTree) {
  // dp 8 over one node: each gradient all-reduce costs a ring
  // 2 (7/8) b / bw + 14 latencies, a double binary tree 2 b / bw +
  // 2 log2(8) = 6 latencies; with tree_all_reduce the cheaper is taken.
  spec::JobSpec job = presetJob("tiny-llama", 16, 1);
  job.mutable_parallel()->set_dp(8);
  plan::Plan plan = compilePlan(job);
  std::vector<double> messages;
  for (const plan::Function &fn : plan.functions())
    for (const plan::Instruction &inst : fn.body())
      if (inst.kernel() == plan::ALL_REDUCE)
        messages.push_back(plan::InstructionWork(plan, inst).messageBytes);
  ASSERT_GT(messages.size(), 0u);
  for (auto [bandwidth, latency] : {std::pair{1e12, 1e-3}, std::pair{1e6, 0.0},
                                    std::pair{1e8, 1e-4}})
    for (bool tree : {false, true}) {
      spec::Cluster cluster = freeCluster(8);
      spec::LinkClass *link =
          cluster.mutable_calibrations(0)->mutable_intra_node();
      link->set_bandwidth(bandwidth);
      link->set_latency(latency);
      link->set_tree_all_reduce(tree);
      double want = 0;
      for (double b : messages) {
        double ring = 2 * 7.0 / 8 * b / bandwidth + 14 * latency;
        double binary = 2 * b / bandwidth + 6 * latency;
        want += tree ? std::min(ring, binary) : ring;
      }
      llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
      ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
      EXPECT_NEAR(p->communication["dp"], want, 1e-9 * want)
          << bandwidth << " " << latency << " " << tree;
    }
}

TEST(CostModel, AcrossNodesTheInterNodeLinkPrices) {
  // The same dp 2 plan on two nodes of one device: the ring crosses nodes.
  spec::JobSpec job = presetJob("tiny-llama", 16, 2);
  job.mutable_parallel()->set_dp(2);
  plan::Plan plan = compilePlan(job);
  spec::Cluster cluster = freeCluster(1);
  cluster.set_nodes(2);
  cluster.mutable_calibrations(0)->clear_intra_node();
  cluster.mutable_inter_node()->set_bandwidth(1e8);
  cluster.mutable_intra_node()->set_bandwidth(1e30);
  llvm::Expected<StepPrediction> p = predictStep(plan, cluster);
  ASSERT_TRUE(bool(p)) << llvm::toString(p.takeError());
  EXPECT_NEAR(p->stepTime, 4 * kParameters / 1e8, 1e-9 * p->stepTime);
}

TEST(CostModel, RefusesAPlanLargerThanTheCluster) {
  spec::JobSpec job = presetJob("tiny-llama", 16, 2);
  job.mutable_parallel()->set_dp(2);
  llvm::Expected<StepPrediction> p =
      predictStep(compilePlan(job), freeCluster(1));
  ASSERT_FALSE(bool(p));
  EXPECT_EQ(llvm::toString(p.takeError()),
            "the plan has 2 ranks but cluster test has 1 devices");
}

TEST(CostModel, ClusterPresetsAndFiles) {
  for (const std::string &name : clusterPresets()) {
    llvm::Expected<spec::Cluster> c = loadCluster(name, 16);
    ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
    EXPECT_EQ(c->name(), name);
    EXPECT_EQ(c->nodes(), 16);
    EXPECT_EQ(c->devices_per_node(), 8);
  }
  llvm::Expected<spec::Cluster> missing = loadCluster("dgx-z100");
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(llvm::toString(missing.takeError())
                .find("--cluster dgx-z100 is neither a preset (dgx-h100, "
                      "dgx-a100) nor a readable cluster file"),
            std::string::npos);
  std::string path = ::testing::TempDir() + "/cluster.textproto";
  std::FILE *f = std::fopen(path.c_str(), "w");
  std::fputs("name: \"two\" nodes: 1 devices_per_node: 0 memory_bytes: 1\n", f);
  std::fclose(f);
  llvm::Expected<spec::Cluster> bad = loadCluster(path);
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "cluster two: nodes = 1 and devices_per_node = 0 must be >= 1");
  f = std::fopen(path.c_str(), "w");
  std::fputs("name: \"two\" nodes: one\n", f);
  std::fclose(f);
  llvm::Expected<spec::Cluster> syntax = loadCluster(path);
  ASSERT_FALSE(bool(syntax));
  EXPECT_EQ(llvm::toString(syntax.takeError()),
            path + ": not a cluster description (text format of "
                   "braid.spec.Cluster)");
  // A curve's points ascend in flops, their efficiency in (0, 1].
  f = std::fopen(path.c_str(), "w");
  std::fputs("name: \"two\" nodes: 1 devices_per_node: 1 memory_bytes: 1 "
             "matmul_curve { flops: 1e9 efficiency: 0.5 } "
             "matmul_curve { flops: 1e8 efficiency: 0.6 }\n",
             f);
  std::fclose(f);
  llvm::Expected<spec::Cluster> descending = loadCluster(path);
  ASSERT_FALSE(bool(descending));
  EXPECT_EQ(llvm::toString(descending.takeError()),
            "cluster two: matmul_curve point 1 (flops 1e+08, efficiency 0.6): "
            "flops must be > 0 and ascend, efficiency in (0, 1]");
}

TEST(CostModel, ClusterFileAttentionCurveIsChecked) {
  // Points out of order (a head dimension after a larger one) or with an
  // efficiency above 1 are refused, naming the field and the point.
  for (auto [points, field] :
       {std::pair<std::string, std::string>{
            "attention_curve { head_dim: 128 flops: 1e9 efficiency: 0.5 }\n"
            "attention_curve { head_dim: 64 flops: 1e10 efficiency: 0.5 }\n",
            "attention_curve point 1"},
        {"attention_grad_curve { head_dim: 64 flops: 1e9 efficiency: 1.5 }\n",
         "attention_grad_curve point 0"},
        {"attention_curve { head_dim: 64 flops: 1e10 efficiency: 0.5 }\n"
         "attention_curve { head_dim: 64 flops: 1e9 efficiency: 0.5 }\n",
         "attention_curve point 1"}}) {
    std::string path = ::testing::TempDir() + "/attention-curve.textproto";
    std::FILE *f = std::fopen(path.c_str(), "w");
    std::fputs(("name: \"a\" nodes: 1 devices_per_node: 1 "
                "memory_bytes: 1099511627776 peak_flops_bf16: 1e15\n" +
                points)
                   .c_str(),
               f);
    std::fclose(f);
    llvm::Expected<spec::Cluster> c = loadCluster(path);
    ASSERT_FALSE(bool(c)) << points;
    EXPECT_NE(llvm::toString(c.takeError()).find(field), std::string::npos)
        << points;
  }
}

TEST(CostModel, ClusterFileCurvePricesItsProducts) {
  // A cluster file whose bf16 products reach 25 % of the peak at 1e9 FLOPs
  // and 75 % at 1e12 (fp32 ones 0.5 throughout): a LINEAR of 2·1024·2048·
  // 4096 = 1.7e10 FLOPs takes the efficiency log-linear between the two,
  // 0.25 + 0.5 x log(17.18) / log(1000).
  std::string path = ::testing::TempDir() + "/curve.textproto";
  std::FILE *f = std::fopen(path.c_str(), "w");
  std::fputs("name: \"curve\" nodes: 1 devices_per_node: 1 "
             "memory_bytes: 1099511627776 peak_flops_bf16: 1e15 "
             "peak_flops_fp32: 1e14 matmul_efficiency: 0.5 "
             "kernel_overhead_s: 2e-6\n"
             "matmul_curve { flops: 1e9 efficiency: 0.25 }\n"
             "matmul_curve { flops: 1e12 efficiency: 0.75 }\n",
             f);
  std::fclose(f);
  llvm::Expected<spec::Cluster> c = loadCluster(path);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  ASSERT_EQ(c->matmul_curve_size(), 2);
  plan::Plan plan =
      oneKernelPlan(plan::LINEAR, {{1024, 2048}, {2048, 4096}}, {{1024, 4096}});
  double flops = 2.0 * 1024 * 2048 * 4096;
  double efficiency = 0.25 + 0.5 * std::log(flops / 1e9) / std::log(1000.0);
  double want = 2e-6 + flops / (1e15 * efficiency);
  EXPECT_NEAR(kernelSeconds(plan, *c, "LINEAR"), want, 1e-12 * want);
  // The same product in fp32: no fp32 curve, matmul_efficiency.
  for (plan::Buffer &b : *plan.mutable_buffers())
    b.set_dtype(plan::F32);
  want = 2e-6 + flops / (1e14 * 0.5);
  EXPECT_NEAR(kernelSeconds(plan, *c, "LINEAR"), want, 1e-12 * want);
}

} // namespace
