//===- CostModelClusters.cpp - The cluster presets and files --------------===//
//
// loadCluster: a preset (dgx-h100, dgx-a100) or a text proto file (a
// `braid calibrate` profile), checked.
//
//===----------------------------------------------------------------------===//

#include "compiler/CostModel.h"
#include "compiler/CostModelInternal.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <google/protobuf/text_format.h>

using namespace braid;
using braid::costmodel::error;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

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
  c.set_matmul_efficiency(0.6);
  c.set_vector_efficiency(0.7);
  c.set_kernel_overhead_s(4e-6);
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
  c.set_matmul_efficiency(0.6);
  c.set_vector_efficiency(0.7);
  c.set_kernel_overhead_s(5e-6);
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
  return c;
}
