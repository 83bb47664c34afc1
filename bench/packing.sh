#!/usr/bin/env bash
# Packed instruction data (data.pack) against one conversation per padded
# sample (the baseline, run in this script), on an Alpaca-shaped length
# distribution: the fraction of padding tokens each trains on (from the
# run's own report of the split), and conversations trained per second
# (the median step time over the steps after the first, of three
# alternating runs each; a packed step holds more conversations).
#
# The records are synthetic, Alpaca's fields with a long tail of lengths:
# an instruction of lognormal length (median 60 bytes), an input for 40% of
# them (median 60), an output of median 220 bytes (sigma 0.9, at most
# 3000), rendered by the alpaca template and the byte tokenizer (a token a
# byte), so a conversation is about 350 tokens at the median; samples of
# 1024 tokens.
#   bench/packing.sh [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench/packing"
mkdir -p "$out"
steps="${1:-6}"

python3 - "$out/alpaca-shaped.json" <<'PY'
import json, random, sys
rng = random.Random(2024)
def text(median, sigma, cap):
    n = max(1, min(cap, int(rng.lognormvariate(0, sigma) * median)))
    words = ["the", "a", "model", "answer", "list", "write", "three", "ways",
             "to", "of", "and", "explain", "why", "water", "city", "short"]
    out = ""
    while len(out) < n:
        out += rng.choice(words) + " "
    return out[:n].strip() or "x"
records = []
for _ in range(3000):
    r = {"instruction": text(60, 0.6, 600), "output": text(220, 0.9, 3000)}
    if rng.random() < 0.4:
        r["input"] = text(60, 0.8, 1000)
    records.append(r)
json.dump(records, open(sys.argv[1], "w"))
PY
"$build/bin/braid-data" preprocess --handler alpaca --input \
  "$out/alpaca-shaped.json" --output-prefix "$out/alpaca-shaped" \
  --tokenizer byte > /dev/null

for mode in padded packed; do
  pack=""
  [ "$mode" = packed ] && pack="pack: true"
  cat > "$out/$mode.textproto" <<JOB
model { family: LLAMA num_layers: 2 hidden_size: 256 num_heads: 4
        ffn_hidden_size: 688 vocab_size: 257 max_seq_len: 1024 }
parallel { micro_batch_size: 4 }
train { steps: $steps lr: 3e-4 seed: 1 }
data { seq_length: 1023 path: "$out/alpaca-shaped" instruction: true $pack }
JOB
  "$build/bin/braidc" "$out/$mode.textproto" --emit=plan -o "$out/$mode.plan"
done
# Alternate the two so that neither gets a quieter machine.
for round in 1 2 3; do
  for mode in padded packed; do
    "$build/bin/braid-run" "$out/$mode.plan" --log-every 1000000 \
      --metrics-out "$out/$mode.r$round.jsonl" > "$out/$mode.r$round.log"
  done
done
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
line = open(f"{out}/packed.r1.log").read()
m = re.search(r"packed: (\d+) conversations in (\d+) samples of (\d+) tokens, "
              r"([0-9.]+)% of them padding \(one conversation per sample: "
              r"\d+ samples, ([0-9.]+)% padding\)", line)
if not m:
    sys.exit("the packed run did not report its packing")
docs, samples, tokens, packed_pad, padded_pad = m.groups()
def step_time(mode):
    times = []
    for r in (1, 2, 3):
        rows = [json.loads(l) for l in open(f"{out}/{mode}.r{r}.jsonl")]
        times += [x["step_time_s"] for x in rows[1:] or rows]
    return sorted(times)[len(times) // 2]
# Conversations a step trains: 4 samples, one conversation each padded,
# docs / samples each packed.
per_sample = {"padded": 1.0, "packed": int(docs) / int(samples)}
rate = {mode: 4 * per_sample[mode] / step_time(mode)
        for mode in ("padded", "packed")}
print(f"{docs} training conversations, samples of {tokens} tokens")
print(f"padded: {docs} samples, {padded_pad}% padding, "
      f"{step_time('padded'):.3f} s/step, {rate['padded']:.1f} conversations/s")
print(f"packed: {samples} samples ({per_sample['packed']:.2f} conversations "
      f"each), {packed_pad}% padding, {step_time('packed'):.3f} s/step, "
      f"{rate['packed']:.1f} conversations/s")
print(f"packed / padded: padding {float(packed_pad) / float(padded_pad):.3f}x, "
      f"conversations per second {rate['packed'] / rate['padded']:.2f}x")
PY
