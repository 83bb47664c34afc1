//===- CudnnAttention.cpp - Fused attention through cuDNN's graph API -----===//

#include "runtime/cuda/CudnnAttention.h"

#include "absl/strings/str_cat.h"

#ifdef BRAID_HAVE_CUDNN
#include <cudnn_frontend.h>
#include <dlfcn.h>
#endif

#include <unordered_map>
#include <utility>
#include <vector>

#ifdef BRAID_HAVE_CUDNN
// The frontend calls cuDNN through this handle (its dynamic loading).
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
} // namespace cudnn_frontend
#endif

namespace braid::cuda {

std::string CudnnAttentionRefusal(const cpu::AttentionShape &s) {
  if (s.alibi)
    return "ALiBi";
  if (s.positions)
    return "packed documents";
  if (s.headDim % 8 != 0 || s.headDim > 128)
    return absl::StrCat("head dimension ", s.headDim,
                        " (cuDNN's: a multiple of 8 up to 128)");
  if (s.kvHeads <= 0 || s.heads % s.kvHeads != 0)
    return absl::StrCat(s.heads, " query heads over ", s.kvHeads, " kv heads");
  const int64_t group = s.heads / s.kvHeads;
  for (int64_t h = 0; h < s.heads; ++h)
    if (s.kvHeadOf(h) != h / group)
      return "a tensor-parallel shard whose query heads are not its kv heads' "
             "groups";
  return "";
}

#ifndef BRAID_HAVE_CUDNN

bool CudnnAttentionBuilt() { return false; }

struct CudnnAttention::Graph {};

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create() {
  return absl::UnimplementedError(
      "this build has no cuDNN (configure with cuDNN's frontend headers: "
      "BRAID_WITH_CUDNN)");
}
CudnnAttention::~CudnnAttention() = default;
std::string CudnnAttention::Version() const { return ""; }
absl::StatusOr<int64_t> CudnnAttention::Prepare(const cpu::AttentionShape &,
                                                Type, bool) {
  return absl::UnimplementedError("this build has no cuDNN");
}
absl::Status CudnnAttention::Forward(const void *, const void *, const void *,
                                     const cpu::AttentionShape &, Type, void *,
                                     float *, void *, cudaStream_t) {
  return absl::UnimplementedError("this build has no cuDNN");
}
absl::Status CudnnAttention::Backward(const void *, const void *, const void *,
                                      const void *, const float *, const void *,
                                      const cpu::AttentionShape &, Type, void *,
                                      void *, void *, void *, cudaStream_t) {
  return absl::UnimplementedError("this build has no cuDNN");
}

#else

namespace fe = cudnn_frontend;

namespace {

// The graphs' tensors, by uid.
enum Uid : int64_t { kQ = 1, kK, kV, kOut, kLse, kDout, kDq, kDk, kDv };

/// libcudnn.so.9, opened once per process: its handle or why not.
struct Library {
  void *handle = nullptr;
  std::string error;
};
const Library &library() {
  static Library lib = [] {
    Library l;
    dlerror();
    l.handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!l.handle) {
      const char *why = dlerror();
      l.error = absl::StrCat("cannot open libcudnn.so.9 (",
                             why ? why : "not found",
                             "): cuDNN 9 is not on the library path");
      return l;
    }
    fe::cudnn_dlhandle = l.handle;
    return l;
  }();
  return lib;
}

std::string message(fe::error_t e) {
  return absl::StrCat("cuDNN frontend error ", int(e.get_code()), ": ",
                      e.get_message());
}

} // namespace

bool CudnnAttentionBuilt() { return true; }

struct CudnnAttention::Graph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create() {
  const Library &lib = library();
  if (!lib.handle)
    return absl::FailedPreconditionError(lib.error);
  // The symbols the frontend looks up as it needs them: one it cannot find
  // would throw there, so check the library's version first.
  if (!dlsym(lib.handle, "cudnnGetVersion") ||
      !dlsym(lib.handle, "cudnnBackendExecute"))
    return absl::FailedPreconditionError(
        "libcudnn.so.9 lacks cuDNN 9's graph API (cudnnBackendExecute)");
  const size_t version = fe::detail::get_backend_version();
  if (version < 90000)
    return absl::FailedPreconditionError(
        absl::StrCat("cuDNN ", version, " is older than 9"));
  std::unique_ptr<CudnnAttention> a(new CudnnAttention());
  cudnnHandle_t handle = nullptr;
  cudnnStatus_t status;
  try {
    status = fe::detail::create_handle(&handle);
  } catch (const std::exception &e) {
    return absl::FailedPreconditionError(
        absl::StrCat("creating a cuDNN handle: ", e.what()));
  }
  if (status != CUDNN_STATUS_SUCCESS)
    return absl::FailedPreconditionError(absl::StrCat(
        "creating a cuDNN handle: status ", int(status),
        " (no device, or a cuDNN built for another CUDA)"));
  a->handle_ = handle;
  return a;
}

CudnnAttention::~CudnnAttention() {
  graphs_.clear();
  if (handle_)
    fe::detail::destroy_handle(static_cast<cudnnHandle_t>(handle_));
}

std::string CudnnAttention::Version() const {
  const size_t v = fe::detail::get_backend_version();
  return absl::StrCat("cuDNN ", v / 10000, ".", (v % 10000) / 100, ".",
                      v % 100);
}

CudnnAttention::Key CudnnAttention::keyOf(const cpu::AttentionShape &s, Type t,
                                          bool backward) {
  return {s.batch, s.seq,     s.heads,  s.kvHeads, s.headDim,
          s.scale, s.causal, int(t), backward};
}

absl::StatusOr<int64_t> CudnnAttention::Prepare(const cpu::AttentionShape &s,
                                                Type t, bool backward) {
  if (std::string why = CudnnAttentionRefusal(s); !why.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN's attention does not take ", why));
  Key key = keyOf(s, t, backward);
  if (auto it = graphs_.find(key); it != graphs_.end())
    return it->second->workspace;
  const int64_t B = s.batch, S = s.seq, H = s.heads, KH = s.kvHeads,
                D = s.headDim;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(t == Type::BF16 ? fe::DataType_t::BFLOAT16
                                      : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  // [batch, seq, heads * headDim] seen as [batch, heads, seq, headDim].
  auto dims = [&](int64_t heads) { return std::vector<int64_t>{B, heads, S, D}; };
  auto strides = [&](int64_t heads) {
    return std::vector<int64_t>{S * heads * D, D, heads * D, 1};
  };
  auto input = [&](const char *name, int64_t uid, int64_t heads) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_dim(dims(heads))
                         .set_stride(strides(heads)));
  };
  const std::vector<int64_t> lseDims = {B, H, S, 1}, lseStrides = {H * S, S, 1, 1};
  auto q = input("q", kQ, H), k = input("k", kK, KH), v = input("v", kV, KH);
  try {
    if (!backward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("attention")
                         .set_generate_stats(true)
                         .set_attn_scale(float(s.scale))
                         .set_causal_mask(s.causal);
      auto [out, lse] = g->sdpa(q, k, v, options);
      out->set_output(true).set_uid(kOut).set_dim(dims(H)).set_stride(
          strides(H));
      lse->set_output(true)
          .set_uid(kLse)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim(lseDims)
          .set_stride(lseStrides);
    } else {
      auto out = input("out", kOut, H), dout = input("dout", kDout, H);
      auto lse = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("lse")
                               .set_uid(kLse)
                               .set_dim(lseDims)
                               .set_stride(lseStrides)
                               .set_data_type(fe::DataType_t::FLOAT));
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("attention_backward")
                         .set_attn_scale(float(s.scale))
                         .set_causal_mask(s.causal);
      auto [dq, dk, dv] = g->sdpa_backward(q, k, v, out, dout, lse, options);
      dq->set_output(true).set_uid(kDq).set_dim(dims(H)).set_stride(strides(H));
      dk->set_output(true).set_uid(kDk).set_dim(dims(KH)).set_stride(
          strides(KH));
      dv->set_output(true).set_uid(kDv).set_dim(dims(KH)).set_stride(
          strides(KH));
    }
    fe::error_t built = g->build(static_cast<cudnnHandle_t>(handle_),
                                 {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
    if (!built.is_good())
      return absl::UnimplementedError(message(built));
    int64_t workspace = 0;
    if (fe::error_t e = g->get_workspace_size(workspace); !e.is_good())
      return absl::InternalError(message(e));
    auto graph = std::make_unique<Graph>();
    graph->graph = std::move(g);
    graph->workspace = workspace;
    graphs_[key] = std::move(graph);
    return workspace;
  } catch (const std::exception &e) {
    return absl::InternalError(
        absl::StrCat("building cuDNN's attention graph: ", e.what()));
  }
}

absl::Status CudnnAttention::execute(const cpu::AttentionShape &s, Type t,
                                     bool backward,
                                     std::unordered_map<int64_t, void *> &pack,
                                     void *workspace, cudaStream_t stream) {
  auto it = graphs_.find(keyOf(s, t, backward));
  if (it == graphs_.end())
    return absl::FailedPreconditionError(
        "cuDNN's attention graph for this shape was not prepared");
  auto handle = static_cast<cudnnHandle_t>(handle_);
  if (fe::detail::set_stream(handle, stream) != CUDNN_STATUS_SUCCESS)
    return absl::InternalError("cudnnSetStream failed");
  fe::error_t e = it->second->graph->execute(handle, pack, workspace);
  return e.is_good() ? absl::OkStatus() : absl::InternalError(message(e));
}

absl::Status CudnnAttention::Forward(const void *q, const void *k,
                                     const void *v,
                                     const cpu::AttentionShape &s, Type t,
                                     void *out, float *lse, void *workspace,
                                     cudaStream_t stream) {
  std::unordered_map<int64_t, void *> pack = {
      {kQ, const_cast<void *>(q)}, {kK, const_cast<void *>(k)},
      {kV, const_cast<void *>(v)}, {kOut, out},
      {kLse, lse}};
  return execute(s, t, /*backward=*/false, pack, workspace, stream);
}

absl::Status CudnnAttention::Backward(const void *q, const void *k,
                                      const void *v, const void *out,
                                      const float *lse, const void *dout,
                                      const cpu::AttentionShape &s, Type t,
                                      void *dq, void *dk, void *dv,
                                      void *workspace, cudaStream_t stream) {
  std::unordered_map<int64_t, void *> pack = {
      {kQ, const_cast<void *>(q)},
      {kK, const_cast<void *>(k)},
      {kV, const_cast<void *>(v)},
      {kOut, const_cast<void *>(out)},
      {kLse, const_cast<float *>(lse)},
      {kDout, const_cast<void *>(dout)},
      {kDq, dq},
      {kDk, dk},
      {kDv, dv}};
  return execute(s, t, /*backward=*/true, pack, workspace, stream);
}

#endif // BRAID_HAVE_CUDNN

} // namespace braid::cuda
