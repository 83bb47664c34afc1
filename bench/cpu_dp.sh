#!/usr/bin/env bash
# Data-parallel throughput on CPU ranks: trains one model with the same
# global batch on 1 rank (every core) and on DP ranks (cores shared), and
# reports tokens/s of each and their ratio (the 1-rank run is the baseline,
# in this script).
#   bench/cpu_dp.sh [MODEL] [DP] [STEPS]     (defaults: gpt2-mid 2 4)
# MODEL: tiny-gpt2, or gpt2-mid (12 layers, hidden 768, 12 heads, vocab
# 50304, seq 256, global batch 8).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench"
mkdir -p "$out"
model="${1:-gpt2-mid}"
dp="${2:-2}"
steps="${3:-4}"

case "$model" in
  tiny-gpt2) spec='preset: "tiny-gpt2"'; seq=64 ;;
  gpt2-mid) spec='family: GPT2 num_layers: 12 hidden_size: 768 num_heads: 12
                  vocab_size: 50304 max_seq_len: 1024'; seq=256 ;;
  *) echo "cpu_dp: unknown model $model (tiny-gpt2 | gpt2-mid)" >&2; exit 2 ;;
esac
global=8
if (( global % dp != 0 )); then
  echo "cpu_dp: dp = $dp does not divide the global batch of $global" >&2; exit 2
fi
for ranks in 1 "$dp"; do
  cat > "$out/dp$ranks.textproto" <<JOB
model { $spec }
parallel { micro_batch_size: $(( global / ranks )) global_batch_size: $global }
train { steps: $steps lr: 3e-4 seed: 1 }
data { seq_length: $seq path: "$build/demo/austen-bytes"
       corpus: "$root/examples/data/pride-and-prejudice.txt"
       corpus: "$root/examples/data/sense-and-sensibility.txt"
       corpus: "$root/examples/data/persuasion.txt" }
JOB
  "$build/bin/braid" train "$out/dp$ranks.textproto" --dp "$ranks" \
    --log-every 1000000 --metrics-out "$out/dp$ranks.jsonl" > /dev/null
done
python3 - "$out" "$dp" "$model" "$(nproc)" <<'PY'
import json, sys
out, dp, model, cores = sys.argv[1:5]
def rate(ranks):
    rows = [json.loads(l) for l in open(f"{out}/dp{ranks}.jsonl")][1:]
    return sum(r["tokens"] for r in rows) / sum(r["step_time_s"] for r in rows)
one, many = rate(1), rate(dp)
print(f"{model}: 1 rank {one:.1f} tokens/s, dp {dp} {many:.1f} tokens/s "
      f"({many / one:.2f}x) on {cores} cores")
PY
