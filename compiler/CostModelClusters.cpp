//===- CostModelClusters.cpp - The cluster presets and files --------------===//
//
// loadCluster: a preset (dgx-h100, dgx-a100) or a text proto file (a
// `braid calibrate` profile), checked.
//
//===----------------------------------------------------------------------===//

#include "compiler/CostModel.h"
#include "compiler/CostModelInternal.h"
#include "runtime/plan/Work.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <google/protobuf/text_format.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

using namespace braid;
using braid::costmodel::error;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// `x` as printf's %g writes it.
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", x);
  return text;
}

/// A point of `c`'s bf16 matmul curve: one product of b x (m x k) · (k x n)
/// measured at `flopsPerS` (docs/cost-model.md gives the sources).
void addMatmulPoint(spec::Cluster &c, double b, double m, double n, double k,
                    double flopsPerS) {
  spec::MatmulEfficiency *point = c.add_matmul_curve();
  point->set_flops(2 * b * m * n * k);
  point->set_efficiency(flopsPerS / c.peak_flops_bf16());
}

/// DGX H100: 8 H100 SXM5 80 GB per node. Peaks from NVIDIA's data sheet
/// (dense bf16 989 TFLOP/s, fp32 67 TFLOP/s, HBM3 3.35 TB/s); links as
/// NCCL's all-reduce bus bandwidth reaches them (NVLink 4: 900 GB/s both
/// ways, about 360 GB/s of bus bandwidth; 8 x 400 Gb/s InfiniBand per node,
/// about 45 GB/s per GPU).
spec::Cluster dgxH100() {
  spec::Cluster c;
  c.set_name("dgx-h100");
  c.set_nodes(1);
  c.set_devices_per_node(8);
  c.set_memory_bytes(int64_t(80 * kGiB));
  c.set_peak_flops_bf16(989e12);
  c.set_peak_flops_fp32(67e12);
  c.set_memory_bandwidth(3.35e12);
  c.mutable_intra_node()->set_bandwidth(360e9);
  c.mutable_intra_node()->set_latency(5e-6);
  c.mutable_inter_node()->set_bandwidth(45e9);
  c.mutable_inter_node()->set_latency(10e-6);
  c.mutable_intra_node()->set_tree_all_reduce(true);
  c.mutable_inter_node()->set_tree_all_reduce(true);
  c.set_matmul_efficiency(0.6); // fp32 products: no curve
  c.set_vector_efficiency(0.7);
  c.set_kernel_overhead_s(4e-6);
  // bf16 products: OpenXLA's measured GEMM table for sm_90
  // (matmul_interpolator_data.h), its bf16 square products and its largest
  // (4 x 4096^3), in TFLOP/s.
  addMatmulPoint(c, 1, 256, 256, 256, 6.453e12);
  addMatmulPoint(c, 1, 512, 512, 512, 40.72e12);
  addMatmulPoint(c, 1, 1024, 1024, 1024, 236.3e12);
  addMatmulPoint(c, 1, 2048, 2048, 2048, 632.0e12);
  addMatmulPoint(c, 1, 4096, 4096, 4096, 783.3e12);
  addMatmulPoint(c, 4, 4096, 4096, 4096, 793.1e12);
  return c;
}

/// DGX A100: 8 A100 SXM4 80 GB per node (dense bf16 312 TFLOP/s, fp32
/// 19.5 TFLOP/s, HBM2e 2.04 TB/s; NVLink 3 600 GB/s both ways, about
/// 230 GB/s of bus bandwidth; 8 x 200 Gb/s HDR InfiniBand, about 22 GB/s per
/// GPU).
spec::Cluster dgxA100() {
  spec::Cluster c;
  c.set_name("dgx-a100");
  c.set_nodes(1);
  c.set_devices_per_node(8);
  c.set_memory_bytes(int64_t(80 * kGiB));
  c.set_peak_flops_bf16(312e12);
  c.set_peak_flops_fp32(19.5e12);
  c.set_memory_bandwidth(2.04e12);
  c.mutable_intra_node()->set_bandwidth(230e9);
  c.mutable_intra_node()->set_latency(6e-6);
  c.mutable_inter_node()->set_bandwidth(22e9);
  c.mutable_inter_node()->set_latency(12e-6);
  c.mutable_intra_node()->set_tree_all_reduce(true);
  c.mutable_inter_node()->set_tree_all_reduce(true);
  c.set_matmul_efficiency(0.6); // fp32 products: no curve
  c.set_vector_efficiency(0.7);
  c.set_kernel_overhead_s(5e-6);
  // bf16 products: Vidur's A100 profile of Llama-2-7B (fp16, PyTorch on
  // cuBLAS), the attention output projection (t x 4096) · (4096 x 4096) at t
  // tokens, its median milliseconds.
  for (auto [tokens, ms] : {std::pair{128.0, 0.032}, std::pair{256.0, 0.052},
                            std::pair{512.0, 0.088}, std::pair{1024.0, 0.176},
                            std::pair{2048.0, 0.301}, std::pair{4096.0, 0.611}})
    addMatmulPoint(c, 1, tokens, 4096, 4096,
                   2 * tokens * 4096 * 4096 / (ms * 1e-3));
  return c;
}

} // namespace

std::vector<std::string> braid::clusterPresets() {
  return {"dgx-h100", "dgx-a100"};
}

llvm::Expected<spec::Cluster> braid::loadCluster(llvm::StringRef nameOrPath,
                                                 int64_t nodes) {
  spec::Cluster c;
  if (nameOrPath == "dgx-h100") {
    c = dgxH100();
  } else if (nameOrPath == "dgx-a100") {
    c = dgxA100();
  } else {
    auto buffer = llvm::MemoryBuffer::getFile(nameOrPath);
    if (!buffer)
      return error("--cluster " + nameOrPath +
                   " is neither a preset (" +
                   llvm::join(clusterPresets(), ", ") +
                   ") nor a readable cluster file: " +
                   buffer.getError().message());
    if (!google::protobuf::TextFormat::ParseFromString(
            (*buffer)->getBuffer().str(), &c))
      return error(nameOrPath +
                   ": not a cluster description (text format of "
                   "braid.spec.Cluster)");
  }
  if (nodes > 0)
    c.set_nodes(nodes);
  if (c.nodes() < 1 || c.devices_per_node() < 1)
    return error("cluster " + c.name() + ": nodes = " + llvm::Twine(c.nodes()) +
                 " and devices_per_node = " +
                 llvm::Twine(c.devices_per_node()) + " must be >= 1");
  if (c.memory_bytes() < 1)
    return error("cluster " + c.name() + ": memory_bytes must be >= 1");
  for (auto [field, curve] :
       {std::pair{"matmul_curve", &c.matmul_curve()},
        std::pair{"matmul_curve_fp32", &c.matmul_curve_fp32()}})
    for (int i = 0; i < curve->size(); ++i) {
      const spec::MatmulEfficiency &point = (*curve)[i];
      if (!(point.flops() > 0) ||
          (i > 0 && !(point.flops() > (*curve)[i - 1].flops())) ||
          !(point.efficiency() > 0 && point.efficiency() <= 1))
        return error("cluster " + c.name() + ": " + field + " point " +
                     llvm::Twine(i) + " (flops " + number(point.flops()) +
                     ", efficiency " + number(point.efficiency()) +
                     "): flops must be > 0 and ascend, efficiency in (0, 1]");
    }
  for (auto [field, curve] :
       {std::pair{"attention_curve", &c.attention_curve()},
        std::pair{"attention_grad_curve", &c.attention_grad_curve()}})
    for (int i = 0; i < curve->size(); ++i) {
      const spec::AttentionEfficiency &point = (*curve)[i];
      const spec::AttentionEfficiency *before = i ? &(*curve)[i - 1] : nullptr;
      if (point.head_dim() < 1 || !(point.flops() > 0) ||
          !(point.efficiency() > 0 && point.efficiency() <= 1) ||
          (before && (point.head_dim() < before->head_dim() ||
                      (point.head_dim() == before->head_dim() &&
                       !(point.flops() > before->flops())))))
        return error("cluster " + c.name() + ": " + field + " point " +
                     llvm::Twine(i) + " (head_dim " +
                     llvm::Twine(point.head_dim()) + ", flops " +
                     number(point.flops()) + ", efficiency " +
                     number(point.efficiency()) +
                     "): head_dim must be >= 1 and ascend, flops > 0 and "
                     "ascend within a head_dim, efficiency in (0, 1]");
    }
  return c;
}

llvm::Expected<spec::Cluster>
braid::clusterFromGpuMeasurement(const spec::Cluster &base,
                                 const spec::GpuMeasurement &measured) {
  const std::string where = "the GPU measurement (" +
                            (measured.device().empty()
                                 ? std::string("no device named")
                                 : measured.device()) +
                            ")";
  spec::Cluster c = base;
  c.set_name(base.name() + "-measured");
  // Each precision's products: (flops, efficiency) by ascending flops,
  // products of equal flops (another aspect of the same size) averaged.
  struct Curve {
    const char *name;
    const google::protobuf::RepeatedPtrField<spec::GpuMeasurement::Product>
        &products;
    double peak;
    google::protobuf::RepeatedPtrField<spec::MatmulEfficiency> *out;
  };
  for (const Curve &curve :
       {Curve{"bf16", measured.bf16(), base.peak_flops_bf16(),
              c.mutable_matmul_curve()},
        Curve{"fp32", measured.fp32(), base.peak_flops_fp32(),
              c.mutable_matmul_curve_fp32()}}) {
    if (curve.products.empty())
      continue;
    if (!(curve.peak > 0))
      return error("cluster " + base.name() + " has no peak " + curve.name +
                   " FLOP/s to measure " + where + "'s " + curve.name +
                   " products against");
    std::map<double, std::pair<double, int>> byFlops;
    for (const spec::GpuMeasurement::Product &p : curve.products) {
      const double flops = 2.0 * double(p.m()) * double(p.n()) * double(p.k());
      if (p.m() < 1 || p.n() < 1 || p.k() < 1 || !(p.seconds() > 0) ||
          !std::isfinite(p.seconds()))
        return error(where + ": the " + curve.name + " product " +
                     llvm::Twine(p.m()) + " x " + llvm::Twine(p.n()) + " x " +
                     llvm::Twine(p.k()) + " in " + number(p.seconds()) +
                     " s: every size must be >= 1 and the time positive");
      const double efficiency = flops / p.seconds() / curve.peak;
      if (efficiency > 1)
        return error(where + ": the " + curve.name + " product " +
                     llvm::Twine(p.m()) + " x " + llvm::Twine(p.n()) + " x " +
                     llvm::Twine(p.k()) + " ran at " +
                     number(flops / p.seconds()) + " FLOP/s, above cluster " +
                     base.name() + "'s peak of " + number(curve.peak) +
                     ": give a cluster of this GPU's kind (--cluster)");
      auto &[sum, count] = byFlops[flops];
      sum += efficiency;
      ++count;
    }
    curve.out->Clear();
    for (const auto &[flops, entry] : byFlops) {
      spec::MatmulEfficiency *point = curve.out->Add();
      point->set_flops(flops);
      point->set_efficiency(entry.first / entry.second);
    }
  }
  // Attention: each shape's forward and backward as (head_dim, flops,
  // efficiency), equal (head_dim, flops) averaged, against the bf16 peak.
  if (!measured.attention().empty()) {
    if (!(base.peak_flops_bf16() > 0))
      return error("cluster " + base.name() +
                   " has no peak bf16 FLOP/s to measure " + where +
                   "'s attention against");
    std::map<std::pair<int64_t, double>, std::pair<double, int>> byShape[2];
    for (const spec::GpuMeasurement::Attention &a : measured.attention()) {
      const std::string shape =
          "attention batch " + std::to_string(a.batch()) + ", seq " +
          std::to_string(a.seq()) + ", heads " + std::to_string(a.heads()) +
          "/" + std::to_string(a.kv_heads()) + " of " +
          std::to_string(a.head_dim());
      if (a.batch() < 1 || a.seq() < 1 || a.heads() < 1 ||
          a.kv_heads() < 1 || a.head_dim() < 1)
        return error(where + ": the " + shape +
                     ": every size must be >= 1");
      for (bool backward : {false, true}) {
        const double seconds =
            backward ? a.backward_seconds() : a.forward_seconds();
        if (!(seconds > 0) || !std::isfinite(seconds))
          return error(where + ": the " + shape + (backward ? " backward" : "") +
                       " in " + number(seconds) +
                       " s: the time must be positive");
        const double flops = plan::AttentionFlops(
            double(a.batch()), double(a.heads()), double(a.seq()),
            double(a.seq()), double(a.head_dim()), a.causal(), backward);
        const double efficiency = flops / seconds / base.peak_flops_bf16();
        if (efficiency > 1)
          return error(where + ": the " + shape +
                       (backward ? " backward" : "") + " ran at " +
                       number(flops / seconds) + " FLOP/s, above cluster " +
                       base.name() + "'s peak of " +
                       number(base.peak_flops_bf16()) +
                       ": give a cluster of this GPU's kind (--cluster)");
        auto &[sum, count] = byShape[backward][{a.head_dim(), flops}];
        sum += efficiency;
        ++count;
      }
    }
    for (bool backward : {false, true}) {
      auto *out = backward ? c.mutable_attention_grad_curve()
                           : c.mutable_attention_curve();
      out->Clear();
      for (const auto &[key, entry] : byShape[backward]) {
        spec::AttentionEfficiency *point = out->Add();
        point->set_head_dim(key.first);
        point->set_flops(key.second);
        point->set_efficiency(entry.first / entry.second);
      }
    }
  }
  if (measured.vector_bytes_per_s() > 0) {
    if (!(base.memory_bandwidth() > 0))
      return error("cluster " + base.name() +
                   " has no memory_bandwidth to measure " + where +
                   "'s elementwise kernel against");
    const double share = measured.vector_bytes_per_s() / base.memory_bandwidth();
    if (share > 1)
      return error(where + ": the elementwise kernel moved " +
                   number(measured.vector_bytes_per_s()) +
                   " bytes/s, above cluster " + base.name() +
                   "'s memory_bandwidth of " +
                   number(base.memory_bandwidth()) +
                   ": give a cluster of this GPU's kind (--cluster)");
    c.set_vector_efficiency(share);
  }
  if (measured.kernel_call_s() > 0)
    c.set_kernel_overhead_s(measured.kernel_call_s());
  return c;
}
