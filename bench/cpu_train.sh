#!/usr/bin/env bash
# CPU training throughput: trains tiny-gpt2 and a GPT-2-small-sized model
# (12 layers, hidden 768, 12 heads, vocab 50304, seq 256, micro-batch 4) for a
# few steps on the bundled corpus (bytes as tokens) and reports tokens/s
# (steps after the first), the share of kernel time spent in GEMM, and the
# speedup of the threaded kernels over a one-thread run of the same plan in
# this script (the baseline).
#   bench/cpu_train.sh [TINY_STEPS] [MID_STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench"
mkdir -p "$out"
tiny_steps="${1:-50}"
mid_steps="${2:-3}"

cat > "$out/tiny-gpt2.textproto" <<JOB
model { preset: "tiny-gpt2" }
parallel { micro_batch_size: 4 }
train { steps: $tiny_steps lr: 3e-3 seed: 1 }
data { seq_length: 64 path: "$build/demo/austen-bytes"
       corpus: "$root/examples/data/pride-and-prejudice.txt"
       corpus: "$root/examples/data/sense-and-sensibility.txt"
       corpus: "$root/examples/data/persuasion.txt" }
JOB
cat > "$out/gpt2-mid.textproto" <<JOB
model { family: GPT2 num_layers: 12 hidden_size: 768 num_heads: 12
        vocab_size: 50304 max_seq_len: 1024 }
parallel { micro_batch_size: 4 }
train { steps: $mid_steps lr: 3e-4 seed: 1 }
data { seq_length: 256 path: "$build/demo/austen-bytes"
       corpus: "$root/examples/data/pride-and-prejudice.txt"
       corpus: "$root/examples/data/sense-and-sensibility.txt"
       corpus: "$root/examples/data/persuasion.txt" }
JOB

for job in tiny-gpt2 gpt2-mid; do
  "$build/bin/braidc" "$out/$job.textproto" --emit=plan -o "$out/$job.plan"
  # braid train prepares the dataset on first use; braid-run profiles.
  if [ ! -f "$build/demo/austen-bytes.idx" ]; then
    "$build/bin/braid" train "$out/$job.textproto" --steps 1 > /dev/null
  fi
  for threads in 1 "$(nproc)"; do
    "$build/bin/braid-run" "$out/$job.plan" --log-every 1000000 --profile \
      --threads "$threads" --metrics-out "$out/$job.t$threads.jsonl" \
      > "$out/$job.t$threads.log"
  done
  python3 - "$out/$job" "$job" "$(nproc)" <<'PY'
import json, re, sys
prefix, job, cores = sys.argv[1:4]
def measure(threads):
    rows = [json.loads(l) for l in open(f"{prefix}.t{threads}.jsonl")]
    steady = rows[1:] or rows
    tokens = sum(r["tokens"] for r in steady)
    seconds = sum(r["step_time_s"] for r in steady)
    gemm = re.search(r"GEMM ([0-9.]+) %", open(f"{prefix}.t{threads}.log").read()).group(1)
    return tokens / seconds, seconds / len(steady), gemm
base, _, _ = measure(1)
rate, step, gemm = measure(cores)
print(f"{job:10s} {rate:10.1f} tokens/s  {step:8.3f} s/step  GEMM {gemm} % of kernel time  "
      f"{rate / base:.2f}x the 1-thread run ({base:.1f} tokens/s) on {cores} cores")
PY
done
