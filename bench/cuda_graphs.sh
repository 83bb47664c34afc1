#!/usr/bin/env bash
# One GPU: the plan's functions replayed as captured CUDA graphs (the CUDA
# executor's default) against the same functions launched kernel by kernel
# (--cuda-graphs off), where launches cost the most (small kernels) and
# where they should not matter.
#
#   bench/cuda_graphs.sh compile DIR
#     (where braidc is built) compiles, in bf16: tiny-llama (seq 64,
#     micro-batch 4: a step of a few hundred small kernels) and a 150M
#     LLaMA shape (8 layers, hidden 1024, 8 heads of 128, ffn 2816, vocab
#     32000, seq 1024, micro-batch 4) into DIR.
#   [STEPS=20] [WARMUP=5] [ROUNDS=3] bench/cuda_graphs.sh run DIR [PLAN...]
#     (on the GPU machine, braid-gpu-bench built or in BRAID_BIN_DIR) times
#     DIR's two plans (or the PLANs given, e.g. bench/gpu_train.sh's 1B
#     plan) with graphs and without, alternating, ROUNDS times each, and
#     prints the median over rounds of each one's median step, its tokens/s
#     and the ratio of the two (results in DIR/results.txt).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
mode="${1:-}"
dir="${2:-}"
if [ -z "$mode" ] || [ -z "$dir" ]; then
  echo "usage: bench/cuda_graphs.sh compile|run DIR" >&2
  exit 2
fi

if [ "$mode" = compile ]; then
  mkdir -p "$dir"
  "$build/bin/braidc" --preset tiny-llama --seq-len 64 --micro-batch-size 4 \
    --global-batch-size 4 --precision bf16 --emit=plan -o "$dir/tiny.plan"
  cat > "$dir/small.textproto" <<'JOB'
model {
  family: LLAMA
  num_layers: 8
  hidden_size: 1024
  num_heads: 8
  num_kv_heads: 8
  ffn_hidden_size: 2816
  vocab_size: 32000
  max_seq_len: 1024
}
parallel { micro_batch_size: 4 global_batch_size: 4 }
train { precision: BF16 }
data { seq_length: 1024 }
JOB
  "$build/bin/braidc" "$dir/small.textproto" --emit=plan -o "$dir/small.plan"
  echo "compiled tiny.plan and small.plan into $dir"
  exit 0
fi
if [ "$mode" != run ]; then
  echo "bench/cuda_graphs.sh: unknown mode '$mode' (compile or run)" >&2
  exit 2
fi

steps="${STEPS:-20}"
warmup="${WARMUP:-5}"
rounds="${ROUNDS:-3}"
bench="${BRAID_BIN_DIR:-$build/bin}/braid-gpu-bench"
plans=("${@:3}")
if [ ${#plans[@]} -eq 0 ]; then
  plans=("$dir/tiny.plan" "$dir/small.plan")
fi
for plan in "${plans[@]}"; do
  if [ ! -f "$plan" ]; then
    echo "bench/cuda_graphs.sh: no plan $plan (run compile first)" >&2
    exit 1
  fi
done
mkdir -p "$dir"
results="$dir/results.txt"
: > "$results"
for plan in "${plans[@]}"; do
  for ((r = 1; r <= rounds; r++)); do
    for graphs in on off; do
      line=$("$bench" "$plan" --steps "$steps" --warmup "$warmup" \
        --cuda-graphs "$graphs" | grep '^median step')
      echo "$(basename "$plan") $graphs $line"
      echo "$(basename "$plan") $graphs $line" >> "$results"
    done
  done
done
python3 - "$results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    plan, graphs = line.split()[:2]
    seconds = float(re.search(r"median step: ([0-9.]+) s", line).group(1))
    tokens = int(re.search(r"(\d+) tokens per step", line).group(1))
    loss = float(re.search(r"last loss ([0-9.na-]+)", line).group(1))
    rows.setdefault(plan, {}).setdefault(graphs, []).append((seconds, tokens, loss))
print(f"{'plan':24s} {'graphs s/step':>14s} {'without':>12s} {'tokens/s':>12s} {'without':>12s} {'speedup':>8s}")
for plan, by in rows.items():
    on = statistics.median(s for s, _, _ in by["on"])
    off = statistics.median(s for s, _, _ in by["off"])
    tokens = by["on"][0][1]
    print(f"{plan:24s} {on:14.6f} {off:12.6f} {tokens / on:12.1f} "
          f"{tokens / off:12.1f} {off / on:7.3f}x")
    print(f"{'':24s} last losses: graphs {[l for _, _, l in by['on']]}, "
          f"without {[l for _, _, l in by['off']]}")
PY
