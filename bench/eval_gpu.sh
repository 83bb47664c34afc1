#!/usr/bin/env bash
# One-GPU log-likelihood scoring (braid eval's multiple-choice requests) of
# the 1B LLaMA shape of bench/gpu_train.sh (16 layers, hidden 2048, 16
# heads, ffn 5632, vocab 32000) in bf16 with random weights: Braid against
# PyTorch's Hugging Face forward scoring, in the same script.
#
#   bench/eval_gpu.sh compile DIR
#     (where braidc is built) compiles the scoring plan (braidc --mode
#     generate --score: batch 32, 1024 positions, prefill chunk 512) and
#     writes ITEMS (default 128) MMLU-shaped items of random ids, four
#     one-token options each, as DIR/requests.jsonl (bench/eval_gpu.py).
#   bench/eval_gpu.sh run DIR
#     (on the GPU machine; braid-run in BRAID_BIN_DIR or the build) scores
#     them with braid-run --score on the GPU twice, each item's context
#     computed once (braid eval's default) and each request whole
#     (--no-shared-prefixes), then with PyTorch (eval_gpu.py torch: the
#     harness's way, 32 requests a forward, the longest first), and prints
#     each one's requests/s and Braid's ratio to PyTorch's. Target: >= 2x.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
helper="$root/bench/eval_gpu.py"
mode="${1:-}"
dir="${2:-}"
if [ -z "$mode" ] || [ -z "$dir" ]; then
  echo "usage: bench/eval_gpu.sh compile|run DIR" >&2
  exit 2
fi
fail() {
  echo "bench/eval_gpu.sh: $*" >&2
  exit 1
}

if [ "$mode" = compile ]; then
  mkdir -p "$dir"
  cp "$root/bench/llama-1b.textproto" "$dir/model.textproto"
  "$build/bin/braidc" "$dir/model.textproto" --mode generate --score \
    --precision bf16 --max-batch 32 --max-seq-len 1024 --prefill-chunk 512 \
    --emit=plan -o "$dir/score.plan" --report="$dir/score.json"
  cat > "$dir/bench.json" <<'JSON'
{"shape": {"layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 16,
           "ffn": 5632, "vocab": 32000}}
JSON
  python3 "$helper" requests --out "$dir" --items "${ITEMS:-128}" --vocab 32000
  echo "compiled score.plan and $(wc -l < "$dir/requests.jsonl") requests into $dir"
  exit 0
fi
if [ "$mode" != run ]; then
  echo "bench/eval_gpu.sh: unknown mode '$mode' (compile or run)" >&2
  exit 2
fi
for f in score.plan bench.json requests.jsonl; do
  [ -f "$dir/$f" ] || fail "no $dir/$f: run 'bench/eval_gpu.sh compile $dir' first (where braidc is built)"
done
run_bin="${BRAID_BIN_DIR:-$build/bin}/braid-run"
[ -x "$run_bin" ] || fail "no $run_bin: build braid-run with CUDA (scripts/device_build.sh) or set BRAID_BIN_DIR"
command -v nvidia-smi > /dev/null || fail "no nvidia-smi: no GPU here"
# cuBLASLt: CUDA's own, else the copy PyTorch's wheels carry.
wheels=$(python3 -c 'import glob, os, site
print(":".join(d for p in site.getsitepackages() for d in
      sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")))))' 2>/dev/null || true)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for name in shared whole; do
  flags=()
  [ "$name" = whole ] && flags=(--no-shared-prefixes)
  "$run_bin" "$dir/score.plan" --device cuda --score "$dir/requests.jsonl" \
    "${flags[@]}" --stats > "$dir/$name.out" 2> "$dir/$name.err" ||
    { tail -5 "$dir/$name.err" >&2; fail "braid-run --score ($name) failed"; }
  grep '^stats:' "$dir/$name.err"
done
python3 "$helper" torch --bench "$dir/bench.json" \
  --requests "$dir/requests.jsonl" --out "$dir/torch.json" ||
  fail "the PyTorch baseline did not run"
python3 "$helper" summary --dir "$dir" | tee "$dir/summary.txt"
