#!/usr/bin/env bash
# The fused gate/up projection (model.fuse_mlp, --fuse-mlp) against the same
# LLaMA-shaped model with gate_proj and up_proj apart (the baseline, run in
# this script): seconds per step over the steps after the first (median of
# three alternating runs each), the time in the kernels the fusion changes
# (LINEAR, LINEAR_GRAD_INPUT, LINEAR_GRAD_WEIGHT, and the ADD of the two
# input gradients the separate projections make; `braid-run --profile`), and
# the arena.
#   bench/fuse_mlp.sh [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench"
mkdir -p "$out"
steps="${1:-6}"

for fused in false true; do
  cat > "$out/llama-mid-fuse-$fused.textproto" <<JOB
model { family: LLAMA num_layers: 4 hidden_size: 512 num_heads: 8
        ffn_hidden_size: 1408 vocab_size: 257 max_seq_len: 256
        fuse_mlp: $fused }
parallel { micro_batch_size: 4 }
train { steps: $steps lr: 3e-4 seed: 1 }
data { seq_length: 256 path: "$build/demo/austen-bytes"
       corpus: "$root/examples/data/pride-and-prejudice.txt"
       corpus: "$root/examples/data/sense-and-sensibility.txt"
       corpus: "$root/examples/data/persuasion.txt" }
JOB
  "$build/bin/braidc" "$out/llama-mid-fuse-$fused.textproto" --emit=plan \
    -o "$out/llama-mid-fuse-$fused.plan" --report "$out/llama-mid-fuse-$fused.json"
  if [ ! -f "$build/demo/austen-bytes.idx" ]; then
    "$build/bin/braid" train "$out/llama-mid-fuse-$fused.textproto" --steps 1 > /dev/null
  fi
done
# Alternate the two so that neither gets a quieter machine.
for round in 1 2 3; do
  for fused in false true; do
    "$build/bin/braid-run" "$out/llama-mid-fuse-$fused.plan" --log-every 1000000 \
      --profile --metrics-out "$out/llama-mid-fuse-$fused.r$round.jsonl" \
      > "$out/llama-mid-fuse-$fused.r$round.log"
  done
done
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
KERNELS = ("LINEAR", "LINEAR_GRAD_INPUT", "LINEAR_GRAD_WEIGHT", "ADD")
def measure(fused):
    steps, kernel_s = [], []
    for r in (1, 2, 3):
        rows = [json.loads(l) for l in open(f"{out}/llama-mid-fuse-{fused}.r{r}.jsonl")]
        steps += [x["step_time_s"] for x in rows[1:] or rows]
        log = open(f"{out}/llama-mid-fuse-{fused}.r{r}.log").read()
        kernel_s.append(sum(float(m.group(2)) for m in
                            re.finditer(r"^  (\w+)\s+([0-9.]+) s", log, re.M)
                            if m.group(1) in KERNELS))
    arena = json.load(open(f"{out}/llama-mid-fuse-{fused}.json"))["memory"]["arena_bytes"]
    losses = [json.loads(l)["loss"] for l in open(f"{out}/llama-mid-fuse-{fused}.r1.jsonl")]
    median = lambda v: sorted(v)[len(v) // 2]
    return median(steps), median(kernel_s), arena, losses
base, base_k, base_arena, base_loss = measure("false")
fused, fused_k, arena, loss = measure("true")
print(f"apart: {base:.3f} s/step, {base_k:.2f} s in {'/'.join(KERNELS)}, arena {base_arena} B")
print(f"fused: {fused:.3f} s/step, {fused_k:.2f} s in {'/'.join(KERNELS)}, arena {arena} B")
print(f"fused / apart: step time {fused / base:.3f}x, those kernels {fused_k / base_k:.3f}x, "
      f"arena {arena / base_arena:.4f}x; largest loss difference "
      f"{max(abs(a - b) / abs(b) for a, b in zip(loss, base_loss)):.1e}")
PY
