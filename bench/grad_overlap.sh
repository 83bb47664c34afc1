#!/usr/bin/env bash
# The data-parallel gradient sums started during the last micro-batch's
# backward (plan-overlap-grad-reduce, buckets of BUCKET bytes) against the
# same plan with the sums after the backward (--grad-bucket-bytes 0, the
# baseline, run in this script): a LLaMA-shaped model (4 layers, hidden 512,
# ffn 1408, seq 256, micro-batch 2, 2 micro-batches a rank) on 2 CPU ranks
# under mpirun. Prints the median seconds per step over the steps after the
# first (three alternating runs each), the cost model's prediction of each
# (`--cluster`, default dgx-h100: what the overlap hides on that machine),
# and the largest loss difference (expected 0: the same sums). With ZERO=1
# the plans are ZeRO-1's (buckets of BUCKET bytes), whose reduce-scatters
# start in the last backward and parameter gathers in the next step's
# first forward, against both in update (--overlap-param-gather=false too);
# the arenas are printed too (the blocks a reduce-scatter writes live from
# its start).
#   bench/grad_overlap.sh [STEPS]   (BUCKET, default 4000000; CLUSTER; ZERO)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench"
mkdir -p "$out"
steps="${1:-6}"
bucket="${BUCKET:-4000000}"
cluster="${CLUSTER:-dgx-h100}"
zero="${ZERO:-0}"
zero_fields=""
if [ "$zero" != 0 ]; then
  zero_fields="zero: $zero zero_bucket_bytes: $bucket"
fi
mpirun=(mpirun -np 2 --oversubscribe --bind-to none)

cat > "$out/llama-mid-dp2-z$zero.textproto" <<JOB
model { family: LLAMA num_layers: 4 hidden_size: 512 num_heads: 8
        ffn_hidden_size: 1408 vocab_size: 257 max_seq_len: 256 }
parallel { dp: 2 micro_batch_size: 2 global_batch_size: 8 $zero_fields }
train { steps: $steps lr: 3e-4 seed: 1 warmup_steps: 1 }
data { seq_length: 256 path: "$build/demo/austen-bytes"
       corpus: "$root/examples/data/pride-and-prejudice.txt"
       corpus: "$root/examples/data/sense-and-sensibility.txt"
       corpus: "$root/examples/data/persuasion.txt" }
JOB
if [ ! -f "$build/demo/austen-bytes.idx" ]; then
  "$build/bin/braid" train "$out/llama-mid-dp2-z$zero.textproto" --dp 1 --zero 0 \
    --steps 1 > /dev/null
fi
for b in 0 "$bucket"; do
  gather=true
  if [ "$b" = 0 ]; then gather=false; fi
  "$build/bin/braidc" "$out/llama-mid-dp2-z$zero.textproto" --grad-bucket-bytes "$b" \
    --overlap-param-gather="$gather" --emit=plan -o "$out/llama-mid-dp2-z$zero-b$b.plan" --cluster "$cluster" \
    --report "$out/llama-mid-dp2-z$zero-b$b.json"
done
# Alternate the two so that neither gets a quieter machine.
for round in 1 2 3; do
  for b in 0 "$bucket"; do
    "${mpirun[@]}" "$build/bin/braid-run" "$out/llama-mid-dp2-z$zero-b$b.plan" \
      --data "$build/demo/austen-bytes" --log-every 1000000 \
      --metrics-out "$out/llama-mid-dp2-z$zero-b$b.r$round.jsonl" > /dev/null
  done
done
python3 - "$out" "$bucket" "llama-mid-dp2-z$zero" <<'PY'
import json, sys
out, bucket, name = sys.argv[1], sys.argv[2], sys.argv[3]
def measure(b):
    steps = []
    for r in (1, 2, 3):
        rows = [json.loads(l) for l in open(f"{out}/{name}-b{b}.r{r}.jsonl")]
        steps += [x["step_time_s"] for x in rows[1:] or rows]
    report = json.load(open(f"{out}/{name}-b{b}.json"))
    predicted = dict(report["predicted_step"], arena=report["memory"]["arena_bytes"])
    losses = [json.loads(l)["loss"] for l in open(f"{out}/{name}-b{b}.r1.jsonl")]
    return sorted(steps)[len(steps) // 2], predicted, losses
base, base_p, base_loss = measure("0")
over, over_p, loss = measure(bucket)
for what, s, p in (("sums (and gathers) in update", base, base_p),
                   (f"sums in the last backward ({bucket} B buckets)", over, over_p)):
    print(f"{what}: {s:.3f} s/step measured; predicted on {p['cluster']}: "
          f"{p['step_time_s'] * 1e3:.3f} ms, exposed dp communication "
          f"{p['exposed_communication_s'].get('dp', 0) * 1e3:.3f} ms, hidden "
          f"{p['hidden_communication_s'] * 1e3:.3f} ms; arena {p['arena']} bytes")
print(f"overlapped / after: measured {over / base:.3f}x, predicted "
      f"{over_p['step_time_s'] / base_p['step_time_s']:.3f}x; largest loss "
      f"difference {max(abs(a - b) / abs(b) for a, b in zip(loss, base_loss)):.1e}")
PY
