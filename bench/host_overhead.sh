#!/usr/bin/env bash
# What the host's part of a training step costs on one GPU: braid-run (the
# trainer: each micro-batch's tokens written to the GPU, its loss read back,
# the step's gradient norm read, the metrics written) against
# braid-gpu-bench (the same plan's functions back to back from the same
# executor, no data), and optionally against another braid-run (a baseline
# build) in the same script.
#
#   [STEPS=200] [WARMUP=20] [ROUNDS=3]
#   bench/host_overhead.sh PLAN DATA_PREFIX [BASELINE_BIN_DIR]
#
# (on the GPU machine, braid-run and braid-gpu-bench built or in
# BRAID_BIN_DIR) runs, ROUNDS times alternating, braid-gpu-bench PLAN, then
# braid-run PLAN --data DATA_PREFIX (and BASELINE_BIN_DIR's braid-run) for
# WARMUP + STEPS steps, and prints the median over rounds of each one's
# median tokens/s over its last STEPS steps and the ratios. A small plan
# shows what a large one hides: bench/cuda_graphs.sh compile writes
# tiny-llama's (tiny.plan), bench/gpu_train.sh compile a dataset
# (DIR/data).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
plan="${1:-}"
data="${2:-}"
baseline="${3:-}"
if [ -z "$plan" ] || [ -z "$data" ]; then
  echo "usage: bench/host_overhead.sh PLAN DATA_PREFIX [BASELINE_BIN_DIR]" >&2
  exit 2
fi
bin="${BRAID_BIN_DIR:-$build/bin}"
steps="${STEPS:-200}"
warmup="${WARMUP:-20}"
rounds="${ROUNDS:-3}"
for tool in "$bin/braid-run" "$bin/braid-gpu-bench" \
            ${baseline:+"$baseline/braid-run"}; do
  if [ ! -x "$tool" ]; then
    echo "bench/host_overhead.sh: no $tool" >&2
    exit 1
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# median tokens/s of a braid-run's metrics after the warm-up steps
trained() {
  python3 - "$1" "$warmup" <<'PY'
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1])]
print(statistics.median(r["tokens_per_s"] for r in records[int(sys.argv[2]):]))
PY
}
: > "$work/results"
for ((r = 1; r <= rounds; r++)); do
  line=$("$bin/braid-gpu-bench" "$plan" --steps "$steps" --warmup "$warmup" |
    grep '^median step')
  echo "bench $(echo "$line" | sed -E 's/.* ([0-9.]+) tokens\/s.*/\1/')" >> "$work/results"
  for which in run ${baseline:+baseline}; do
    tool="$bin/braid-run"
    [ "$which" = baseline ] && tool="$baseline/braid-run"
    rm -f "$work/m.jsonl"
    "$tool" "$plan" --data "$data" --device cuda --steps $((warmup + steps)) \
      --log-every $((warmup + steps)) --metrics-out "$work/m.jsonl" > /dev/null
    echo "$which $(trained "$work/m.jsonl")" >> "$work/results"
  done
done
python3 - "$work/results" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    name, value = line.split()
    by.setdefault(name, []).append(float(value))
median = {name: statistics.median(v) for name, v in by.items()}
labels = {"bench": "braid-gpu-bench", "run": "braid-run",
          "baseline": "baseline braid-run"}
for name, v in by.items():
    print(f"{labels[name]:20s} {median[name]:12.1f} tokens/s  (rounds: "
          + ", ".join(f"{x:.1f}" for x in v) + ")")
print(f"braid-run / braid-gpu-bench: {median['run'] / median['bench']:.3f}")
if "baseline" in median:
    print(f"braid-run / baseline braid-run: "
          f"{median['run'] / median['baseline']:.3f}")
PY
