//===- Gemm.h - Linear layers through cuBLASLt ------------------*- C++ -*-===//
//
// The matrix products of a linear layer (runtime/cpu/Kernels.h's
// linearForward and linearBackward, same shapes and layouts) on cuBLASLt:
// T inputs (float, bf16 or fp16), float accumulation (CUBLAS_COMPUTE_32F: no
// TF32, so that fp32 mode checks against the CPU), the weight gradient
// accumulated in float (beta = 1). The bias rides cuBLASLt's bias epilogue when
// it is not scaled.
//
// Row-major buffers are cuBLASLt's column-major transposes: y = x W is
// computed as yᵀ = Wᵀ xᵀ, with no copy.
//
// An algorithm is chosen once per problem (shapes, layouts, types,
// epilogue) and kept, so that a plan's step loop, which repeats the same
// problems, never asks again; `Prepare` chooses ahead (at plan load). The
// choice is cuBLASLt's heuristic's first, or, with tuning scratch
// (SetTuning: the executor lends its arena while the plan loads, for bf16
// and fp16), the fastest of the heuristic's first kTuningCandidates timed
// on random operands in the scratch. A forward product of one to
// kFewRowsLinearMaxRows rows with the weight [out, in] in bf16 or fp16
// (generation's decode) has a second candidate, Braid's fewRowsLinear (one
// warp per output, the weight read as a copy reads it), timed against
// cuBLASLt's fastest when tuning and taken untimed otherwise; Notes() says
// which runs. Nothing here allocates after construction or synchronises
// with the host, but Prepare while tuning.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_RUNTIME_CUDA_GEMM_H
#define BRAID_RUNTIME_CUDA_GEMM_H

#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/Kernels.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace braid::cuda {

class Gemm {
public:
  /// cuBLASLt's recommended workspace for Hopper, 32 MiB.
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  /// A cuBLASLt handle and `workspaceBytes` of device workspace.
  static absl::StatusOr<std::unique_ptr<Gemm>>
  Create(size_t workspaceBytes = kWorkspaceBytes);
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  /// y = x W (+ bias · biasScale), overwriting y.
  template <typename T>
  absl::Status LinearForward(const T *x, const T *w, const T *bias,
                             const cpu::LinearShape &s, T *y,
                             cudaStream_t stream);
  /// dx = dy Wᵀ (overwritten; skipped when null); dw += xᵀ dy in the
  /// weight's layout (skipped when null); dbias += the column sums of dy
  /// (skipped when null).
  template <typename T>
  absl::Status LinearBackward(const T *x, const T *w, const T *dy,
                              const cpu::LinearShape &s, T *dx, float *dw,
                              float *dbias, cudaStream_t stream);
  /// Chooses the algorithms of a linear's three products ahead of the
  /// first step (with or without its bias).
  template <typename T>
  absl::Status Prepare(const cpu::LinearShape &s, bool bias);

  /// How many problems have an algorithm chosen.
  size_t ChosenAlgorithms() const { return prepared_.size(); }

  /// The heuristic's candidates Prepare times when tuning.
  static constexpr int kTuningCandidates = 8;
  /// Lets Prepare time candidate algorithms on `stream` with operands laid
  /// out in `scratch` (`bytes` of device memory it overwrites with random
  /// values; a problem whose operands do not fit keeps the heuristic's
  /// first); a null scratch turns tuning off.
  void SetTuning(void *scratch, size_t bytes, cudaStream_t stream) {
    tuningScratch_ = scratch;
    tuningBytes_ = scratch ? bytes : 0;
    tuningStream_ = stream;
  }
  /// How many problems were chosen by timing candidates (cuBLASLt's, more
  /// than one, or cuBLASLt's against Braid's few-rows product).
  size_t TunedProblems() const { return tuned_; }
  /// How many problems run on Braid's own product of a few rows
  /// (fewRowsLinear) instead of cuBLASLt.
  size_t FewRowsProblems() const { return fewRowsChosen_; }
  /// One line per problem that could run on either, with the choice and,
  /// where it was timed, both times: for the run's first lines.
  const std::vector<std::string> &Notes() const { return notes_; }

private:
  Gemm() = default;

  /// One product D = op(A) op(B) (+ beta C = D, + bias), column-major.
  struct Problem {
    int64_t m, n, k;
    bool transA, transB;
    int64_t lda, ldb, ldd;
    cudaDataType_t ab, d;
    bool bias;
    /// The bytes every matrix's address is a multiple of (a power of two,
    /// at most 256, cuBLASLt's default assumption): views into flat buffers
    /// (ZeRO's buckets) may be less aligned than the arena's 64 bytes, and
    /// an algorithm chosen for more alignment must not see them.
    int align = 256;
    using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t,
                           int64_t, int64_t, int, int, bool, int>;
    Key key() const {
      return Key(m, n, k, transA, transB, lda, ldb, ldd, int(ab), int(d), bias,
                 align);
    }
  };
  /// The products of a linear: forward (with the bias epilogue or not),
  /// the input gradient and the weight gradient.
  template <typename T>
  static Problem forwardProblem(const cpu::LinearShape &s, bool epilogue);
  template <typename T>
  static Problem inputGradProblem(const cpu::LinearShape &s);
  template <typename T>
  static Problem weightGradProblem(const cpu::LinearShape &s);
  /// A linear's scaled bias (LinearForward), for the largest one Prepare
  /// saw.
  void *scaledBias_ = nullptr;
  size_t scaledBiasBytes_ = 0;
  /// A problem's descriptors and algorithm, made once.
  struct Prepared {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo;
    /// Runs on fewRowsLinear (FewRowsCandidate) instead.
    bool fewRows = false;
  };
  /// Whether fewRowsLinear computes `p`: a forward product (D = Wᵀ-stored
  /// A times B, no accumulation) of 16-bit operands with at most
  /// kFewRowsLinearMaxRows columns of B (rows of x), packed, 16-byte
  /// aligned.
  static bool FewRowsCandidate(const Problem &p);
  /// Runs `p` on fewRowsLinear.
  static cudaError_t runFewRows(const Problem &p, const void *a, const void *b,
                                void *d, const void *bias,
                                cudaStream_t stream);
  /// `p` prepared (on its first use).
  absl::StatusOr<Prepared *> prepare(const Problem &p);
  /// The fastest of `candidates` for `made`'s problem `p`, timed on random
  /// operands in the tuning scratch; the first where they do not fit.
  absl::StatusOr<cublasLtMatmulAlgo_t>
  fastest(const Problem &p, const Prepared &made,
          const cublasLtMatmulHeuristicResult_t *candidates, int found,
          float *bestMs);
  /// Milliseconds per run of `p` on fewRowsLinear over the operands
  /// fastest laid out (INFINITY where they do not fit).
  absl::StatusOr<float> timeFewRows(const Problem &p);
  /// Operands of a problem in the tuning scratch.
  struct Operands {
    const void *a = nullptr, *b = nullptr;
    void *d = nullptr;
    const void *bias = nullptr;
  };
  /// `p`'s operands laid out in the tuning scratch, filled with random
  /// values; false where they do not fit.
  absl::StatusOr<bool> tuningOperands(const Problem &p, Operands &o);
  /// Runs `p` (with the alignment of these addresses).
  absl::Status run(Problem p, const void *a, const void *b, void *d, float beta,
                   const void *bias, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  std::map<Problem::Key, Prepared> prepared_;
  void *tuningScratch_ = nullptr;
  size_t tuningBytes_ = 0;
  cudaStream_t tuningStream_ = nullptr;
  size_t tuned_ = 0;
  size_t fewRowsChosen_ = 0;
  std::vector<std::string> notes_;
};

} // namespace braid::cuda

#endif // BRAID_RUNTIME_CUDA_GEMM_H
