#!/usr/bin/env bash
# Parallel throughput on CPU ranks: trains one model with the same global
# batch on 1 rank (every core) and on N ranks split along one mesh axis
# (cores shared), and reports tokens/s of each and their ratio (the 1-rank
# run is the baseline, in this script). On a machine with fewer cores than
# ranks the ratio measures the layout's overhead, not its scaling.
#   bench/cpu_parallel.sh [MODEL] [N] [STEPS] [LAYOUT]
#     (defaults: gpt2-mid 2 4 dp)
# MODEL: tiny-gpt2, or gpt2-mid (12 layers, hidden 768, 12 heads, vocab
# 50304, seq 256, global batch 8). LAYOUT: dp (data parallelism), tp
# (tensor parallelism), tp-sp (tensor with sequence parallelism), or pp
# (1F1B pipeline, micro-batches of 1; tiny-gpt2 then has 4 layers).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench"
mkdir -p "$out"
model="${1:-gpt2-mid}"
n="${2:-2}"
steps="${3:-4}"
layout="${4:-dp}"

case "$model" in
  tiny-gpt2) spec='preset: "tiny-gpt2"'; seq=64 ;;
  gpt2-mid) spec='family: GPT2 num_layers: 12 hidden_size: 768 num_heads: 12
                  vocab_size: 50304 max_seq_len: 1024'; seq=256 ;;
  *) echo "cpu_parallel: unknown model $model (tiny-gpt2 | gpt2-mid)" >&2; exit 2 ;;
esac
global=8
case "$layout" in
  dp) flags=(--dp "$n"); micro=$(( global / n ))
      if (( global % n != 0 )); then
        echo "cpu_parallel: dp = $n does not divide the global batch of $global" >&2
        exit 2
      fi ;;
  tp) flags=(--tp "$n"); micro=$global ;;
  tp-sp) flags=(--tp "$n" --sp); micro=$global ;;
  pp) flags=(--pp "$n"); micro=1
      if [[ $model == tiny-gpt2 ]]; then spec='preset: "tiny-gpt2" num_layers: 4'; fi ;;
  *) echo "cpu_parallel: unknown layout $layout (dp | tp | tp-sp | pp)" >&2; exit 2 ;;
esac
for ranks in 1 "$n"; do
  run_flags=("${flags[@]}")
  mb=$micro
  # The baseline: one rank, the whole batch at once (a pipeline's baseline
  # keeps its micro-batches, so the ratio is the pipeline's alone).
  if (( ranks == 1 )); then
    run_flags=()
    [[ $layout == pp ]] || mb=$global
  fi
  cat > "$out/$layout$ranks.textproto" <<JOB
model { $spec }
parallel { micro_batch_size: $mb global_batch_size: $global }
train { steps: $steps lr: 3e-4 seed: 1 }
data { seq_length: $seq path: "$build/demo/austen-bytes"
       corpus: "$root/examples/data/pride-and-prejudice.txt"
       corpus: "$root/examples/data/sense-and-sensibility.txt"
       corpus: "$root/examples/data/persuasion.txt" }
JOB
  "$build/bin/braid" train "$out/$layout$ranks.textproto" "${run_flags[@]}" \
    --log-every 1000000 --metrics-out "$out/$layout$ranks.jsonl" > /dev/null
done
python3 - "$out" "$n" "$model" "$(nproc)" "$layout" <<'PY'
import json, sys
out, n, model, cores, layout = sys.argv[1:6]
def rate(ranks):
    rows = [json.loads(l) for l in open(f"{out}/{layout}{ranks}.jsonl")][1:]
    return sum(r["tokens"] for r in rows) / sum(r["step_time_s"] for r in rows)
one, many = rate(1), rate(n)
print(f"{model}: 1 rank {one:.1f} tokens/s, {layout} {n} {many:.1f} tokens/s "
      f"({many / one:.2f}x) on {cores} cores")
PY
