#!/usr/bin/env bash
# CPU training throughput: trains tiny-gpt2 and tiny-llama (the examples'
# models) and a GPT-2-small-sized model (12 layers, hidden 768, 12 heads,
# vocab 50304, seq 256, micro-batch 4) for a few steps on the bundled corpus
# (bytes as tokens) and reports, from braid-run --profile:
#   - tokens/s and seconds per step (the steps after the first);
#   - the share of kernel time in the matrix products (LINEAR,
#     LINEAR_GRAD_INPUT, LINEAR_GRAD_WEIGHT) and in everything else;
#   - the matrix products' rate against OpenBLAS's sgemm on the same shapes
#     in a loop of its own (bench/sgemm_loop.py: same library, kernels and
#     threads), run in this script;
#   - the speedup of the threaded kernels over a one-thread run of the plan;
#   - with BASE_BIN=DIR (the bin/ of a build before a change, e.g. a
#     worktree of the previous commit), the same plan run by DIR/braid-run
#     alternately with this build's, and the ratio of their median steps.
#   bench/cpu_train.sh [TINY_STEPS] [MID_STEPS]
# ROUNDS (default 1) alternations of this build and the base per model.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench"
mkdir -p "$out"
tiny_steps="${1:-50}"
mid_steps="${2:-3}"
rounds="${ROUNDS:-1}"
base_bin="${BASE_BIN:-}"
cores="$(nproc)"
corpus="corpus: \"$root/examples/data/pride-and-prejudice.txt\"
       corpus: \"$root/examples/data/sense-and-sensibility.txt\"
       corpus: \"$root/examples/data/persuasion.txt\""

for preset in tiny-gpt2 tiny-llama; do
  cat > "$out/$preset.textproto" <<JOB
model { preset: "$preset" }
parallel { micro_batch_size: 4 }
train { steps: $tiny_steps lr: 3e-3 seed: 1 }
data { seq_length: 64 path: "$build/demo/austen-bytes"
       $corpus }
JOB
done
cat > "$out/gpt2-mid.textproto" <<JOB
model { family: GPT2 num_layers: 12 hidden_size: 768 num_heads: 12
        vocab_size: 50304 max_seq_len: 1024 }
parallel { micro_batch_size: 4 }
train { steps: $mid_steps lr: 3e-4 seed: 1 }
data { seq_length: 256 path: "$build/demo/austen-bytes"
       $corpus }
JOB

# The BLAS library braid-run loads (sgemm_loop.py calls the same one).
blas_lib="$(ldd "$build/bin/braid-run" | awk '/libopenblas/ {print $3; exit}')"

for job in tiny-gpt2 tiny-llama gpt2-mid; do
  "$build/bin/braidc" "$out/$job.textproto" --emit=plan -o "$out/$job.plan"
  "$build/bin/braidc" "$out/$job.textproto" --emit=plan-text \
    -o "$out/$job.plan.txt"
  # braid train prepares the dataset on first use; braid-run profiles.
  if [ ! -f "$build/demo/austen-bytes.idx" ]; then
    "$build/bin/braid" train "$out/$job.textproto" --steps 1 > /dev/null
  fi
  run() { # BIN THREADS TAG
    "$1/braid-run" "$out/$job.plan" --log-every 1000000 --profile \
      --threads "$2" --metrics-out "$out/$job.$3.jsonl" > "$out/$job.$3.log"
  }
  run "$build/bin" 1 t1
  for r in $(seq 1 "$rounds"); do
    run "$build/bin" "$cores" "new$r"
    if [ -n "$base_bin" ]; then run "$base_bin" "$cores" "base$r"; fi
  done
  kernels="$(sed -n 's/.*(OpenBLAS \([A-Za-z0-9_]*\) kernels).*/\1/p' \
    "$out/$job.new1.log")"
  OMP_NUM_THREADS="$cores" OPENBLAS_CORETYPE="$kernels" \
    python3 "$root/bench/sgemm_loop.py" "$out/$job.plan.txt" \
    --library "$blas_lib" > "$out/$job.sgemm.json"
  python3 - "$out/$job" "$job" "$cores" "$rounds" "${base_bin:+1}" <<'PY'
import json, re, statistics, sys
prefix, job, cores, rounds, has_base = sys.argv[1:6]
rounds = int(rounds)
def steps(tag):
    rows = [json.loads(l) for l in open(f"{prefix}.{tag}.jsonl")]
    return rows[1:] or rows
def profile(tag):
    log = open(f"{prefix}.{tag}.log").read()
    head = re.search(r"profile: ([0-9.]+) s in kernels over (\d+) step", log)
    total, n = float(head.group(1)), int(head.group(2))
    gemm = sum(float(s) for s in re.findall(
        r"^  LINEAR(?:_GRAD_INPUT|_GRAD_WEIGHT)?\s+([0-9.]+) s", log, re.M))
    return total / n, gemm / n
def median_step(tags):
    return statistics.median(r["step_time_s"] for t in tags for r in steps(t))
new = [f"new{r}" for r in range(1, rounds + 1)]
# The profile of the round with the least kernel time (the least disturbed
# by whatever else ran on the machine).
kernel_s, gemm_s = min(profile(t) for t in new)
loop = json.load(open(f"{prefix}.sgemm.json"))
step = median_step(new)
one = median_step(["t1"])
tokens = steps("t1")[0]["tokens"]
print(f"{job}: {tokens / step:.1f} tokens/s, {step:.4f} s/step (median), "
      f"{one / step:.2f}x the 1-thread run on {cores} cores")
print(f"  kernels {kernel_s:.4f} s/step: matrix products "
      f"{100 * gemm_s / kernel_s:.1f} %, the rest {100 - 100 * gemm_s / kernel_s:.1f} %")
print(f"  matrix products {loop['flops_per_step'] / gemm_s / 1e9:.1f} GFLOP/s, "
      f"sgemm alone on the same {loop['products']} products "
      f"{loop['flops_per_step'] / loop['seconds_per_step'] / 1e9:.1f} GFLOP/s "
      f"(OpenBLAS {loop['kernels']}): {loop['seconds_per_step'] / gemm_s:.2f} of it")
if has_base:
    base = median_step([f"base{r}" for r in range(1, rounds + 1)])
    bk, bg = min(profile(f"base{r}") for r in range(1, rounds + 1))
    print(f"  base build: {base:.4f} s/step (median), kernels {bk:.4f} s/step "
          f"(products {100 * bg / bk:.1f} %); this build's step "
          f"{step / base:.3f}x the base's")
PY
done
