#!/usr/bin/env bash
# One-GPU generation with a LLaMA-style model of about 1B parameters in bf16
# (16 layers, hidden 2048, 16 heads, ffn 5632, vocab 32000: bench/
# gpu_train.sh's shape, 953 M parameters), greedy, random weights: Braid's
# decode at batch 1 against the GPU's memory bandwidth, and Braid at batch
# 32 against PyTorch, both measured in the same script.
#
#   [TINY=1] [KV_HEADS=16] bench/generate_gpu.sh compile DIR
#     (where braidc is built) compiles two inference plans into DIR with
#     their reports: b1.plan (batch 1, prompt 512 + 256 new tokens: cache
#     of 768 positions, prefill chunk 512) and bn.plan (batch 32, prompts of
#     128 + 256 new tokens: 384 positions, chunk 128), and bench.json (the
#     shape and the runs, which `run` reads). KV_HEADS=4: grouped-query
#     attention. TINY=1: a 2-layer shape (hidden 128, 2 heads, 1 kv head,
#     vocab 512; batch 1 with 16 + 8 tokens, batch 4 with 8 + 8) for
#     checking the plumbing under the emulation.
#   [ROUNDS=3] [WARMUP=1] [COPY_GIB=4] [TORCH_IMPL=auto|hf|own] [EMULATED=1]
#   [STEP_TIMEOUT=600] bench/generate_gpu.sh run DIR
#     (on the GPU machine, braid-run built with CUDA here or in the
#     directory BRAID_BIN_DIR names: scripts/device_build.sh)
#     (a) the baseline bandwidth: a device-to-device copy of COPY_GIB GiB
#         with PyTorch (CUDA events, best of 10, bytes read + written);
#     (b) braid-run on b1.plan (CUDA graphs on, its default): WARMUP runs
#         (the graphs' capture) then ROUNDS timed, each prefill then 255
#         decode calls; decode time per token (braid-run --stats) against
#         parameter bytes / bandwidth. Target: at most 1.3x;
#     (c) braid-run on bn.plan the same way: 32 x 256 new tokens over
#         prefill + decode time, against PyTorch in this script on the same
#         shape, prompts and token count (bench/generate_gpu.py torch:
#         LlamaForCausalLM.generate with cache_implementation="static" and
#         torch.compile where transformers is installed, else a LLaMA with a
#         preallocated cache written there, decode step compiled with
#         mode="reduce-overhead"; its median over ROUNDS calls after 2).
#         Target: at least 1.5x PyTorch's tokens/s.
#     Logs and results in DIR (b1.out/.err, bn.out/.err, bandwidth.json,
#     torch.json, summary.txt). EMULATED=1 runs braid-run-emulated (the
#     CUDA backend on the CPU, TINY plans only) and measures nothing of a
#     GPU: no copy, no PyTorch, and says what stays unmeasured.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
helper="$root/bench/generate_gpu.py"
mode="${1:-}"
dir="${2:-}"
if [ -z "$mode" ] || [ -z "$dir" ]; then
  echo "usage: bench/generate_gpu.sh compile|run DIR" >&2
  exit 2
fi
fail() {
  echo "bench/generate_gpu.sh: $*" >&2
  exit 1
}

if [ "$mode" = compile ]; then
  braidc="$build/bin/braidc"
  [ -x "$braidc" ] || fail "no $braidc: build braidc first (scripts/setup.sh)"
  kv_heads="${KV_HEADS:-16}"
  if [ "${TINY:-0}" = 1 ]; then
    shape=(2 128 2 "${KV_HEADS:-1}" 352 512)
    b1=(16 8 32 16)          # prompt, new tokens, cache positions, chunk
    bn=(4 8 8 16 8)          # batch, prompt, new tokens, positions, chunk
  else
    shape=(16 2048 16 "$kv_heads" 5632 32000)
    b1=(512 256 768 512)
    bn=(32 128 256 384 128)
  fi
  mkdir -p "$dir"
  rm -f "$dir"/b1.* "$dir"/bn.* "$dir/bench.json"
  cat > "$dir/model.textproto" <<JOB
model {
  family: LLAMA
  num_layers: ${shape[0]}
  hidden_size: ${shape[1]}
  num_heads: ${shape[2]}
  num_kv_heads: ${shape[3]}
  ffn_hidden_size: ${shape[4]}
  vocab_size: ${shape[5]}
  max_seq_len: 2048
}
JOB
  "$braidc" "$dir/model.textproto" --mode generate --precision bf16 \
    --max-batch 1 --max-seq-len "${b1[2]}" --prefill-chunk "${b1[3]}" \
    --emit=plan -o "$dir/b1.plan" --report="$dir/b1.json"
  "$braidc" "$dir/model.textproto" --mode generate --precision bf16 \
    --max-batch "${bn[0]}" --max-seq-len "${bn[3]}" --prefill-chunk "${bn[4]}" \
    --emit=plan -o "$dir/bn.plan" --report="$dir/bn.json"
  tiny=()
  [ "${TINY:-0}" = 1 ] && tiny=(--tiny)
  python3 "$helper" setup --out "$dir/bench.json" "${tiny[@]}" \
    --layers "${shape[0]}" --hidden "${shape[1]}" --heads "${shape[2]}" \
    --kv-heads "${shape[3]}" --ffn "${shape[4]}" --vocab "${shape[5]}" \
    --b1-prompt "${b1[0]}" --b1-new "${b1[1]}" --b1-seq "${b1[2]}" \
    --batch "${bn[0]}" --prompt "${bn[1]}" --new "${bn[2]}" --seq "${bn[3]}" \
    --seed 1
  python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
for name in ("b1", "bn"):
    g = json.load(open(os.path.join(d, name + ".json")))["generation"]
    print(f"{name}.plan: batch {g['max_batch']}, {g['max_seq_len']} positions, "
          f"chunk {g['prefill_chunk']}; parameters {g['parameter_bytes']} B, "
          f"KV cache {g['kv_cache']['bytes']} B, arena {g['arena_bytes']} B")
PY
  echo "compiled b1.plan and bn.plan into $dir"
  exit 0
fi
if [ "$mode" != run ]; then
  echo "bench/generate_gpu.sh: unknown mode '$mode' (compile or run)" >&2
  exit 2
fi

rounds="${ROUNDS:-3}"
warmup="${WARMUP:-1}"
emulated="${EMULATED:-0}"
for f in bench.json b1.plan b1.json bn.plan bn.json; do
  [ -f "$dir/$f" ] || fail "no $dir/$f: run 'bench/generate_gpu.sh compile $dir' first (where braidc is built)"
done
case "$rounds$warmup" in
  *[!0-9]*) fail "ROUNDS and WARMUP are counts, not '$rounds' and '$warmup'" ;;
esac
[ "$rounds" -ge 1 ] && [ "$warmup" -ge 1 ] ||
  fail "ROUNDS and WARMUP must be at least 1 (the first run captures the graphs)"
# Reads a field of bench.json: field PATH.TO.IT
field() {
  python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(int(v) if isinstance(v, bool) else v)' "$dir/bench.json" "$1"
}
bins="${BRAID_BIN_DIR:-$build/bin}"
if [ "$emulated" = 1 ]; then
  [ "$(field tiny)" = 1 ] ||
    fail "EMULATED=1 runs TINY=1 plans only (the emulation would take hours on the 1B model): TINY=1 bench/generate_gpu.sh compile $dir"
  run_bin="$bins/braid-run-emulated"
  [ -x "$run_bin" ] || fail "no $run_bin: build braid-run-emulated (a build where CUDA's headers are)"
else
  run_bin="$bins/braid-run"
  [ -x "$run_bin" ] || fail "no $run_bin: build braid-run with CUDA (scripts/device_build.sh) or set BRAID_BIN_DIR"
  command -v nvidia-smi > /dev/null || fail "no nvidia-smi: no GPU here (EMULATED=1 checks the plumbing on the CPU)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  # cuBLASLt: CUDA's own, else the copy PyTorch's wheels carry (as the
  # device bundle's check.sh finds it).
  wheels=$(python3 -c 'import glob, os, site
print(":".join(d for p in site.getsitepackages() for d in
      sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")))))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$run_bin" | grep 'not found'; then
    fail "$run_bin cannot find the libraries above"
  fi
  python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    fail "PyTorch with CUDA is needed for the bandwidth and the baseline"
fi
vocab=$(field shape.vocab)
seed=$(field seed)

# braid_run NAME: braid-run on DIR/NAME.plan, WARMUP + ROUNDS groups of the
# plan's batch of prompts (each group a separate generation: --stats prints
# one line each), token ids to NAME.out, the stats to NAME.err.
braid_run() {
  local name=$1 key=$2
  local batch prompt new
  batch=$(field "runs.$key.batch")
  prompt=$(field "runs.$key.prompt")
  new=$(field "runs.$key.new")
  local prompts=() args=() line
  while IFS= read -r line; do
    prompts+=(--prompt-ids "$line")
  done < <(python3 "$helper" prompts --count "$batch" --length "$prompt" \
             --vocab "$vocab" --seed "$seed")
  for _ in $(seq $((warmup + rounds))); do
    args+=("${prompts[@]}")
  done
  echo "== braid-run $name.plan: batch $batch, prompt $prompt, $new new tokens, $warmup warm-up + $rounds timed"
  local began status
  began=$(date +%s.%N)
  set +e
  timeout "${STEP_TIMEOUT:-600}" "$run_bin" "$dir/$name.plan" --device cuda \
    "${args[@]}" --max-new-tokens "$new" --greedy --stats \
    > "$dir/$name.out" 2> "$dir/$name.err"
  status=$?
  set -e
  if [ $status -ne 0 ]; then
    tail -5 "$dir/$name.err" >&2
    fail "braid-run on $name.plan failed (status $status; log $dir/$name.err)"
  fi
  grep '^stats:' "$dir/$name.err"
  echo "braid-run: $(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s in all (plan load, weights, every run)"
}

if [ "$emulated" != 1 ]; then
  echo "== baseline bandwidth"
  python3 "$helper" bandwidth --out "$dir/bandwidth.json" \
    --gib "${COPY_GIB:-4}" --repeats 10
fi
braid_run b1 b1
braid_run bn bn
emulated_flag=()
if [ "$emulated" = 1 ]; then
  emulated_flag=(--emulated)
else
  echo "== pytorch"
  timeout "${STEP_TIMEOUT:-600}" python3 "$helper" torch \
    --bench "$dir/bench.json" --out "$dir/torch.json" \
    --impl "${TORCH_IMPL:-auto}" --warmup 2 --rounds "$rounds" ||
    fail "the PyTorch baseline did not run"
fi
python3 "$helper" summary --dir "$dir" --warmup "$warmup" "${emulated_flag[@]}" |
  tee "$dir/summary.txt"
