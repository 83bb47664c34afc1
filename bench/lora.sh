#!/usr/bin/env bash
# LoRA (the job's lora section: rank 16 on every projection of attention and
# MLP, the rest frozen) against full fine-tuning of the same LLaMA-shaped
# model (the baseline, run in this script): seconds per step over the steps
# after the first (median of three alternating runs each), the time in the
# GEMM kernels (LINEAR, LINEAR_GRAD_INPUT, LINEAR_GRAD_WEIGHT; `braid-run
# --profile`), the trainable parameters and the arena from the report.
#   bench/lora.sh [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench"
mkdir -p "$out"
steps="${1:-6}"

for mode in full lora; do
  lora=""
  if [ "$mode" = lora ]; then
    lora='lora { rank: 16 alpha: 32 target_modules: "q_proj" target_modules: "k_proj"
       target_modules: "v_proj" target_modules: "o_proj" target_modules: "gate_proj"
       target_modules: "up_proj" target_modules: "down_proj" }'
  fi
  cat > "$out/llama-mid-$mode.textproto" <<JOB
model { family: LLAMA num_layers: 4 hidden_size: 512 num_heads: 8
        ffn_hidden_size: 1408 vocab_size: 257 max_seq_len: 256 }
parallel { micro_batch_size: 4 }
train { steps: $steps lr: 3e-4 seed: 1 }
data { seq_length: 256 path: "$build/demo/austen-bytes"
       corpus: "$root/examples/data/pride-and-prejudice.txt"
       corpus: "$root/examples/data/sense-and-sensibility.txt"
       corpus: "$root/examples/data/persuasion.txt" }
$lora
JOB
  "$build/bin/braidc" "$out/llama-mid-$mode.textproto" --emit=plan \
    -o "$out/llama-mid-$mode.plan" --report "$out/llama-mid-$mode.json"
  if [ ! -f "$build/demo/austen-bytes.idx" ]; then
    "$build/bin/braid" train "$out/llama-mid-$mode.textproto" --steps 1 > /dev/null
  fi
done
# Alternate the two so that neither gets a quieter machine.
for round in 1 2 3; do
  for mode in full lora; do
    "$build/bin/braid-run" "$out/llama-mid-$mode.plan" --log-every 1000000 \
      --profile --metrics-out "$out/llama-mid-$mode.r$round.jsonl" \
      > "$out/llama-mid-$mode.r$round.log"
  done
done
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
GEMM = ("LINEAR", "LINEAR_GRAD_INPUT", "LINEAR_GRAD_WEIGHT")
def measure(mode):
    steps, gemm_s = [], []
    for r in (1, 2, 3):
        rows = [json.loads(l) for l in open(f"{out}/llama-mid-{mode}.r{r}.jsonl")]
        steps += [x["step_time_s"] for x in rows[1:] or rows]
        log = open(f"{out}/llama-mid-{mode}.r{r}.log").read()
        gemm_s.append(sum(float(m.group(2)) for m in
                          re.finditer(r"^  (\w+)\s+([0-9.]+) s", log, re.M)
                          if m.group(1) in GEMM))
    report = json.load(open(f"{out}/llama-mid-{mode}.json"))
    rank = report["memory"]["persistent_by_rank"][0]
    median = lambda v: sorted(v)[len(v) // 2]
    return median(steps), median(gemm_s), rank["trainable_parameters"], \
        rank["arena_bytes"]
full, full_g, full_p, full_a = measure("full")
lora, lora_g, lora_p, lora_a = measure("lora")
for name, t, g, p, a in (("full", full, full_g, full_p, full_a),
                         ("lora", lora, lora_g, lora_p, lora_a)):
    print(f"{name}: {t:.3f} s/step, {g:.2f} s in GEMMs, {p} trainable "
          f"parameters, arena {a} B")
print(f"lora / full: step time {lora / full:.3f}x, GEMMs {lora_g / full_g:.3f}x, "
      f"trainable parameters {lora_p / full_p:.4f}x, arena {lora_a / full_a:.3f}x")
PY
