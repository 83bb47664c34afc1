#!/usr/bin/env bash
# Installs Braid's build dependencies from Debian's packages (idempotent), then
# configures and builds. CUDA is optional: the CUDA backend is built when nvcc
# is found under /usr/local/cuda and the machine has a GPU (or
# BRAID_ENABLE_CUDA=ON), the CUDA emulation whenever CUDA's headers are there.
#
#   scripts/setup.sh            install what is missing, configure, build
#   BRAID_SKIP_BUILD=1 scripts/setup.sh   install only
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"

packages=(
  build-essential cmake ninja-build ccache pkg-config python3 python3-pip
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  libabsl-dev libprotobuf-dev protobuf-compiler zlib1g-dev
  libgtest-dev libgmock-dev
  libopenmpi-dev openmpi-bin
  # tests/e2e/slurm.py starts a one-node Slurm of its own (srun --mpi=pmix).
  slurmctld slurmd slurm-client munge
  libopenblas-dev libopenblas0-openmp
  libsentencepiece-dev sentencepiece
  # braid eval runs model-written programs in bwrap (runtime/eval/Sandbox.h).
  bubblewrap
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all Debian packages present"
fi

# Python test oracles from PyPI: TensorBoard's own reader checks the event
# files braid-run writes (tests/e2e/tensorboard_check.py); numpy runs the
# reference models of tests/e2e/hf_reference.py; Hugging Face's tokenizers
# and transformers (without PyTorch) and sentencepiece are the reference
# tokenizers of tests/e2e/tokenizer_check.py; safetensors reads the PEFT
# adapters braid-ckpt exports (tests/e2e/parity.py).
oracles=(tensorboard numpy tokenizers transformers sentencepiece protobuf safetensors)
modules=(tensorboard numpy tokenizers transformers sentencepiece google.protobuf safetensors)
missing_oracles=()
for i in "${!oracles[@]}"; do
  python3 -c "import ${modules[$i]}" 2>/dev/null || missing_oracles+=("${oracles[$i]}")
done
if [ "${#missing_oracles[@]}" -gt 0 ]; then
  echo "setup: installing ${missing_oracles[*]} from PyPI (test oracles)"
  python3 -m pip install --quiet "${missing_oracles[@]}" 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages "${missing_oracles[@]}"
fi

# cuDNN's frontend (runtime/cuda/CudnnAttention.h: attention through
# cuDNN's graph API): NVIDIA's header-only C++ library, whose headers PyPI's
# nvidia-cudnn-frontend carries; wanted where the CUDA install has cuDNN 9.
if [ -f /usr/local/cuda/include/cudnn.h ] &&
   ! python3 -m pip show nvidia-cudnn-frontend >/dev/null 2>&1; then
  echo "setup: installing nvidia-cudnn-frontend from PyPI (cuDNN's C++ headers)"
  python3 -m pip install --quiet nvidia-cudnn-frontend==1.32.0 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages \
      nvidia-cudnn-frontend==1.32.0
fi

if [ "${BRAID_SKIP_BUILD:-0}" = "1" ]; then exit 0; fi

# The CUDA backend (nvcc's device code, cuDNN, the GPU's tests) is built into
# build/ where there is a GPU to run it, or when BRAID_ENABLE_CUDA=ON asks.
# Without a GPU, CUDA's headers still give the CUDA emulation (its kernels
# and tests on the CPU), and scripts/test.sh compiles the device code in the
# GPU machine's bundle, once, rather than here too.
cuda_flag="-DBRAID_ENABLE_CUDA=OFF"
if [ -x /usr/local/cuda/bin/nvcc ]; then
  case "${BRAID_ENABLE_CUDA:-auto}" in
    ON) cuda_flag="-DBRAID_ENABLE_CUDA=ON" ;;
    auto)
      if [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; then
        cuda_flag="-DBRAID_ENABLE_CUDA=ON"
      fi ;;
  esac
fi

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths under the checkout as relative ones in ccache's keys: the GPU
  # machine's bundle (scripts/device_build.sh, a build directory as deep as
  # this one) then finds the runtime's objects that its flags share with
  # this build's.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
fi

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE="${BRAID_BUILD_TYPE:-Release}" \
    -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
    "$cuda_flag" "${launcher[@]}"
fi
cmake --build "$build" -j "${BRAID_JOBS:-$(nproc)}"
