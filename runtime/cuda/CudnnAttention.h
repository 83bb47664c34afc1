//===- CudnnAttention.h - Fused attention through cuDNN's graph API -*- C++
//-*-===//
//
// The second candidate for bf16 and fp16 attention on the GPU, beside
// Braid's own kernels (Attention.h): cuDNN 9's fused scaled-dot-product
// attention, forward and backward, built through NVIDIA's header-only
// cuDNN frontend (its graph API: one graph per shape, dtype and direction,
// built once and executed with the operands' addresses).
//
// Operands are those of attentionForward and attentionBackward: q, out, dq
// [batch, seq, heads * headDim], k, v, dk, dv [batch, seq, kvHeads *
// headDim] (handed to cuDNN as [batch, heads, seq, headDim] with strides
// over that layout), and lse [batch, heads, seq] in float, cuDNN's softmax
// statistics, which are the same quantity as Braid's (the natural log of
// each row's sum of exp(score)): a forward of either kind feeds a backward
// of either kind. The GPU tests check both against the CPU.
//
// cuDNN is not linked: libcudnn.so.9 is opened (dlopen) by Create, so a
// binary built with it runs where it is missing, with Braid's kernels, and
// says why. Built without the frontend's headers (BRAID_HAVE_CUDNN unset,
// CMake's BRAID_WITH_CUDNN) this file declares what the executor asks and
// Create says the build has no cuDNN.
//
// What cuDNN takes here (CudnnAttentionRefusal): head dimension a multiple
// of 8 up to 128, no ALiBi (its slopes of a tensor-parallel shard are not
// cuDNN's), no packed documents, and query head h on kv head h / (heads /
// kvHeads) (grouped queries as the shard holds them). Its backward adds dq
// up by atomics in float, as the tensor-core backward's default tiling does.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_CUDNNATTENTION_H
#define BRAID_RUNTIME_CUDA_CUDNNATTENTION_H

#include "runtime/cpu/Kernels.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

namespace braid::cuda {

/// Why cuDNN's fused attention does not take shape `s` (the empty string
/// when it does).
std::string CudnnAttentionRefusal(const cpu::AttentionShape &s);

/// Whether this binary was built with cuDNN's frontend.
bool CudnnAttentionBuilt();

class CudnnAttention {
public:
  /// The element type of q, k, v and the results.
  enum class Type { BF16, F16 };

  /// Opens libcudnn.so.9 (once per process) and creates a handle on the
  /// current device; an error names why not (not built with it, the library
  /// not found, a version before 9).
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// "cuDNN 9.19.0": the library's version.
  std::string Version() const;

  /// Builds the graph of shape `s`, type `t` and direction (`backward`)
  /// once; returns the bytes of workspace its execution needs. An error
  /// when CudnnAttentionRefusal(s) is not empty or cuDNN has no engine for
  /// it (its message).
  absl::StatusOr<int64_t> Prepare(const cpu::AttentionShape &s, Type t,
                                  bool backward);

  /// out, lse = attention(q, k, v) with the graph Prepare built, on
  /// `stream`; `workspace` holds Prepare's bytes.
  absl::Status Forward(const void *q, const void *k, const void *v,
                       const cpu::AttentionShape &s, Type t, void *out,
                       float *lse, void *workspace, cudaStream_t stream);
  /// dq, dk, dv (overwritten) from the forward's out and lse and dout.
  absl::Status Backward(const void *q, const void *k, const void *v,
                        const void *out, const float *lse, const void *dout,
                        const cpu::AttentionShape &s, Type t, void *dq,
                        void *dk, void *dv, void *workspace,
                        cudaStream_t stream);

private:
  CudnnAttention() = default;
  struct Graph;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, double,
                         bool, int, bool>;
  static Key keyOf(const cpu::AttentionShape &s, Type t, bool backward);
  /// Runs the prepared graph of (s, t, backward) on `stream` with the
  /// operands `pack` (by the graph's uids).
  absl::Status execute(const cpu::AttentionShape &s, Type t, bool backward,
                       std::unordered_map<int64_t, void *> &pack,
                       void *workspace, cudaStream_t stream);
  void *handle_ = nullptr;
  std::map<Key, std::unique_ptr<Graph>> graphs_;
};

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_CUDNNATTENTION_H
