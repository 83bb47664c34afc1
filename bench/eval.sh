#!/usr/bin/env bash
# braid eval's MMLU-format scoring on the CPU: log-likelihood requests per
# second, on a ~100M-parameter LLaMA shape (12 layers, hidden 768, 12
# heads, ffn 2048, bytes as tokens) with random weights, over the shipped
# MMLU-layout files (tests/data/eval/mmlu: 8 questions, 32 requests) with 2
# shots, three ways run alternately in this script:
#   one     one request a call, each whole (--max-batch 1
#           --no-shared-prefixes): the baseline;
#   batched 8 requests a call, sorted by length, each whole;
#   shared  8 items a call, each item's context computed once for its four
#           options (the default).
# The time is the scoring's own (braid eval's last progress line: after the
# model is compiled and loaded); the median of ROUNDS (default 3) runs each.
#   bench/eval.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench/eval"
mkdir -p "$out"

python3 - "$root" "$out/llama-100m" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/tests/e2e")
import hf_reference as ref
config, weights = ref.random_model("llama", {
    "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
    "num_attention_heads": 12, "num_key_value_heads": 12, "vocab_size": 257,
    "max_position_embeddings": 1024}, seed=3)
ref.save_hf_dir(sys.argv[2], config, weights)
print("parameters:", sum(w.size for w in weights.values()))
PY
rounds="${ROUNDS:-3}"
for round in $(seq "$rounds"); do
  for mode in one batched shared; do
    case "$mode" in
      one) flags=(--max-batch 1 --no-shared-prefixes) ;;
      batched) flags=(--max-batch 8 --no-shared-prefixes) ;;
      shared) flags=(--max-batch 8) ;;
    esac
    "$build/bin/braid" eval "$out/llama-100m" --task mmlu \
      --data "$root/tests/data/eval/mmlu" --shots 2 --tokenizer bytes \
      --max-seq-len 1024 --prefill-chunk 512 "${flags[@]}" \
      > /dev/null 2> "$out/$mode.r$round.log"
  done
done
python3 - "$out" "$rounds" <<'PY'
import re, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def seconds(mode):
    times = []
    for r in range(1, rounds + 1):
        lines = re.findall(r"eval: (\d+)/(\d+) \(100%\), ([0-9.]+) s",
                           open(f"{out}/{mode}.r{r}.log").read())
        if not lines:
            sys.exit(f"no final progress line in {mode}.r{r}.log")
        done, total, s = lines[-1]
        times.append(float(s))
    return int(total), sorted(times)[len(times) // 2]
requests, one = seconds("one")
for mode in ("one", "batched", "shared"):
    _, t = seconds(mode)
    print(f"{mode:8s} {requests} requests in {t:.2f} s: "
          f"{requests / t:.2f} requests/s, {one / t:.2f}x the baseline's")
PY
