#!/usr/bin/env bash
# Builds the bundle a GPU machine runs, here, where LLVM/MLIR, Protobuf,
# Abseil, OpenBLAS and MPI are installed (the GPU machine has CUDA, Python
# and PyTorch, none of those):
#
#   scripts/device_build.sh [BUNDLE]        (default build-device/bundle)
#
# BUNDLE/bin.tar.xz braid-run (--device cuda), braid-gpu-bench and the CUDA
#                   tests, built without LLVM and MPI (BRAID_RUNTIME_ONLY),
#                   Protobuf, Abseil, zlib, OpenBLAS, libgomp and libstdc++
#                   linked in (BRAID_STATIC_RUNTIME), device code for sm_90
#                   and sm_90a only; they need glibc 2.34 or later,
#                   libgcc_s, the CUDA driver and CUDA's libcublasLt
# BUNDLE/plans      the plans the CUDA executor's test reads (BRAID_TEST_PLANS)
# BUNDLE/e2e        tests/e2e/cuda_train.py's plans and dataset (--inputs)
# BUNDLE/bench      bench/gpu_train.sh's 1B-parameter plans (compile)
# BUNDLE/graphs     bench/cuda_graphs.sh's plans (compile)
# BUNDLE/generate   bench/generate_gpu.sh's 1B inference plans (compile)
# BUNDLE/eval       bench/eval_gpu.sh's 1B scoring plan and requests (compile)
# BUNDLE/check.sh   runs all of it on the GPU machine (see its comment)
#
# It needs the main build (scripts/setup.sh) for braidc and braid-data.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
main="${BRAID_BUILD_DIR:-$root/build}"
out="${1:-$root/build-device/bundle}"
# Beside the main build, as deep: with CCACHE_BASEDIR, the compilations whose
# flags match the main build's are ccache's hits (about 240 of its 290).
work="$(dirname "$main")/build-bundle"
rm -rf "$root/build-device/build" # where it was before

for tool in braidc braid-data; do
  if [ ! -x "$main/bin/$tool" ]; then
    echo "device_build: no $main/bin/$tool: run scripts/setup.sh first" >&2
    exit 1
  fi
done
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "device_build: no nvcc in /usr/local/cuda/bin" >&2
  exit 1
fi

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
fi
if [ ! -f "$work/build.ninja" ]; then
  cmake -S "$root" -B "$work" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBRAID_ENABLE_CUDA=ON -DBRAID_RUNTIME_ONLY=ON -DBRAID_STATIC_RUNTIME=ON \
    -DBRAID_WITH_MPI=OFF -DBRAID_CUDA_ARCHS=hopper "${launcher[@]}"
fi
cmake --build "$work" -j "${BRAID_JOBS:-$(nproc)}" --target braid-run \
  braid-gpu-bench braid-attention-bench braid-gpu-calibrate braid-cuda-kernel-tests braid-cuda-attention-tests \
  braid-cuda-executor-tests

rm -rf "$out"
mkdir -p "$out/plans"
bins="$root/build-device/bin"
rm -rf "$bins"
mkdir -p "$bins"
for tool in braid-run braid-gpu-bench braid-attention-bench braid-gpu-calibrate braid-cuda-kernel-tests \
            braid-cuda-attention-tests braid-cuda-executor-tests; do
  cp "$work/bin/$tool" "$bins/"
  strip "$bins/$tool"
  # What it links dynamically: nothing beyond the C library and CUDA's
  # cuBLASLt and NCCL (which the CUDA install has, next to each other).
  extra=$(readelf -d "$bins/$tool" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
    grep -Ev '^(libc|libm|libdl|libpthread|librt|libcublasLt|libnccl|libgcc_s|ld-linux-x86-64)\.so' || true)
  if [ -n "$extra" ]; then
    echo "device_build: $tool still needs" $extra >&2
    exit 1
  fi
  # Nor a C library newer than 2.34 (Ubuntu 22.04 has 2.35).
  newest=$(objdump -T "$bins/$tool" | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1)
  if [ "$(printf '%s\nGLIBC_2.34\n' "$newest" | sort -V | tail -1)" != GLIBC_2.34 ]; then
    echo "device_build: $tool needs $newest:" \
      $(objdump -T "$bins/$tool" | grep "$newest" | awk '{print $NF}') >&2
    exit 1
  fi
done
# Compressed: each binary carries all of OpenBLAS's CPU kernels (~28 MB of
# text), which xz shrinks tenfold; check.sh unpacks them.
tar -C "$root/build-device" -cJf "$out/bin.tar.xz" bin

# The CUDA executor test's plans, as the main build compiles them.
braidc="$main/bin/braidc"
"$braidc" --preset tiny-llama --seq-len 32 --emit=plan -o "$out/plans/fp32.plan"
"$braidc" --preset tiny-llama --seq-len 32 --precision bf16 --emit=plan \
  -o "$out/plans/bf16.plan"
"$braidc" --preset tiny-llama --seq-len 32 --dp 2 --emit=plan \
  -o "$out/plans/dp2.plan"
"$braidc" --preset tiny-llama --seq-len 32 --precision fp16 --emit=plan \
  -o "$out/plans/fp16.plan"
"$braidc" "$root/tests/runtime/cuda/tiny-llama-hd64.textproto" --emit=plan \
  -o "$out/plans/fp32-hd64.plan"
"$braidc" "$root/tests/runtime/cuda/tiny-llama-hd64.textproto" \
  --precision bf16 --emit=plan -o "$out/plans/bf16-hd64.plan"
"$braidc" "$root/tests/runtime/cuda/tiny-llama-hd64.textproto" \
  --precision fp16 --emit=plan -o "$out/plans/fp16-hd64.plan"
"$braidc" "$root/tests/runtime/cuda/tiny-gpt2-dropout.textproto" --emit=plan \
  -o "$out/plans/gpt2-dropout.plan"

# The end-to-end comparison's inputs, and the benchmark's plans.
python3 "$root/tests/e2e/cuda_train.py" --bin "$main/bin" \
  --work "$root/build-device/e2e-work" \
  --corpus "$root/examples/data/pride-and-prejudice.txt" --prepare "$out/e2e"
BRAID_BUILD_DIR="$main" "$root/bench/gpu_train.sh" compile "$out/bench"
BRAID_BUILD_DIR="$main" "$root/bench/cuda_graphs.sh" compile "$out/graphs"
BRAID_BUILD_DIR="$main" "$root/bench/generate_gpu.sh" compile "$out/generate"
BRAID_BUILD_DIR="$main" "$root/bench/eval_gpu.sh" compile "$out/eval"

cat > "$out/check.sh" <<'CHECK'
#!/usr/bin/env bash
# On the GPU machine, from the repository's root (the bundle carried along):
#   [BRAID_CHECK_LOGS=DIR] [BRAID_CHECK_TIMEOUT=S] bash BUNDLE/check.sh [tests|racecheck|attention|train|bench|graphs|generate|eval|calibrate|all]
# tests: the CUDA tests (kernels, attention, executor) against the CPU;
# racecheck: compute-sanitizer's racecheck on the tensor-core attention tests;
# attention: braid-attention-bench (each tensor-core tiling checked, timed);
# train: braid-run --device cuda against --device cpu (tests/e2e/cuda_train.py),
#   and the parallel layouts over 2 ranks on NCCL (sharing the GPU where
#   there is one) against the CPU's losses the bundle keeps;
# bench: bench/gpu_train.sh run (Braid against PyTorch, 1B parameters);
# graphs: bench/cuda_graphs.sh run (captured graphs against launches);
# generate: bench/generate_gpu.sh run (1B bf16 decode against the memory
#   bandwidth, batch 32 against PyTorch's generate);
# eval: bench/eval_gpu.sh run (1B bf16 log-likelihood scoring against
#   PyTorch's Hugging Face forward scoring);
# calibrate: braid-gpu-calibrate (products by size, bandwidth, a kernel's
#   call) into DIR/gpu-measurement.textproto (/tmp without BRAID_CHECK_LOGS).
# Each part stops after BRAID_CHECK_TIMEOUT seconds (default 600) and, with
# BRAID_CHECK_LOGS, writes its output to DIR/PART.log as well.
set -uo pipefail
bundle="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(pwd)"
what="${1:-all}"
logs="${BRAID_CHECK_LOGS:-}"
limit="${BRAID_CHECK_TIMEOUT:-600}"
rc=0
bin=/tmp/braid-device/bin
if [ ! -x "$bin/braid-run" ] || [ "$bundle/bin.tar.xz" -nt "$bin/braid-run" ]; then
  rm -rf /tmp/braid-device && mkdir -p /tmp/braid-device
  tar -C /tmp/braid-device -xJf "$bundle/bin.tar.xz"
fi
# cuBLASLt and NCCL: CUDA's own, else the copies PyTorch's wheels carry.
wheels=$(python3 -c 'import glob, os, site
print(":".join(d for p in site.getsitepackages() for d in
      sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")))))' 2>/dev/null)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ldd "$bin/braid-run" | grep 'not found'; then
  echo "check: braid-run cannot find the libraries above" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader ||
  echo "check: nvidia-smi finds no GPU"
# part NAME COMMAND...: runs COMMAND under the time limit, logged.
part() {
  local name=$1
  shift
  echo "== $name"
  if [ -n "$logs" ]; then
    mkdir -p "$logs"
    timeout "$limit" "$@" 2>&1 | tee "$logs/$name.log"
  else
    timeout "$limit" "$@"
  fi
}
if [ "$what" = tests ] || [ "$what" = all ]; then
  export BRAID_TEST_PLANS="$bundle/plans"
  for t in kernel attention executor; do
    part "$t" "$bin/braid-cuda-$t-tests" --gtest_brief=1 || rc=1
  done
fi
if [ "$what" = racecheck ] || [ "$what" = all ]; then
  export BRAID_TEST_PLANS="$bundle/plans"
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  part racecheck "$sanitizer" --tool racecheck --racecheck-report hazard \
    --error-exitcode 1 "$bin/braid-cuda-attention-tests" \
    --gtest_filter='*TensorCores*' --gtest_brief=1 || rc=1
fi
if [ "$what" = attention ] || [ "$what" = all ]; then
  part attention-bench "$bin/braid-attention-bench" || rc=1
fi
if [ "$what" = train ] || [ "$what" = all ]; then
  # One GPU: the 2 ranks share it, NCCL between them over loopback.
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
  share=()
  [ "$gpus" -lt 2 ] && share=(--share-gpu)
  part train python3 "$root/tests/e2e/cuda_train.py" --bin "$bin" \
    --work /tmp/braid-cuda-train --inputs "$bundle/e2e" --parallel --launcher own "${share[@]}" \
    --corpus "$root/examples/data/pride-and-prejudice.txt"
  status=$?
  if [ $status -eq 77 ]; then
    echo "train: skipped (no GPU)"
  elif [ $status -ne 0 ]; then
    rc=1
  fi
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  export BRAID_BIN_DIR="$bin"
  part bench bash "$root/bench/gpu_train.sh" run "$bundle/bench" || rc=1
fi
if [ "$what" = graphs ] || [ "$what" = all ]; then
  export BRAID_BIN_DIR="$bin"
  part graphs bash "$root/bench/cuda_graphs.sh" run "$bundle/graphs" || rc=1
fi
if [ "$what" = calibrate ] || [ "$what" = all ]; then
  # The cost model's measurement of this GPU (braid calibrate --device cuda
  # turns it into a cluster file where braidc is built).
  part calibrate "$bin/braid-gpu-calibrate" \
    -o "${logs:-/tmp}/gpu-measurement.textproto" || rc=1
fi
if [ "$what" = generate ] || [ "$what" = all ]; then
  export BRAID_BIN_DIR="$bin"
  part generate bash "$root/bench/generate_gpu.sh" run "$bundle/generate" || rc=1
fi
if [ "$what" = eval ] || [ "$what" = all ]; then
  export BRAID_BIN_DIR="$bin"
  part eval bash "$root/bench/eval_gpu.sh" run "$bundle/eval" || rc=1
fi
exit $rc
CHECK
chmod +x "$out/check.sh"
du -sh "$out"
echo "device bundle in $out: carry it and run 'bash ${out#$root/}/check.sh'"
