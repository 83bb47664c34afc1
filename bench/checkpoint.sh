#!/usr/bin/env bash
# The cost of a checkpoint: saves a LLaMA-shaped model (4 layers, hidden 512,
# ffn 1408: 13.1 M parameters, 157 MB with the AdamW moments) from 2
# data-parallel ranks with --save-every 1, and compares each save's time
# with writing the same bytes with dd (2 writers, synced) in this script, the
# baseline: how long training waits beyond what writing the bytes takes.
#   bench/checkpoint.sh [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench/checkpoint"
rm -rf "$out"
mkdir -p "$out"
steps="${1:-3}"
mpi=(mpirun -np 2 --oversubscribe --bind-to none)
if [ "$(id -u)" -eq 0 ]; then mpi+=(--allow-run-as-root); fi

cat > "$out/job.textproto" <<JOB
model { family: LLAMA num_layers: 4 hidden_size: 512 num_heads: 8
        ffn_hidden_size: 1408 vocab_size: 257 max_seq_len: 256 }
parallel { dp: 2 micro_batch_size: 1 }
train { steps: $steps lr: 3e-4 seed: 1 }
data { seq_length: 128 path: "$build/demo/austen-bytes"
       corpus: "$root/examples/data/pride-and-prejudice.txt" }
JOB
"$build/bin/braidc" "$out/job.textproto" --emit=plan -o "$out/job.plan"
if [ ! -f "$build/demo/austen-bytes.idx" ]; then
  "$build/bin/braid" train "$out/job.textproto" --steps 1 > /dev/null
fi
"${mpi[@]}" "$build/bin/braid-run" "$out/job.plan" --save "$out/ckpt" \
  --save-every 1 --keep-last 1 --log-every 1 > "$out/run.log"
bytes=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(int(f['bytes']) for f in m['files']))" \
  "$out/ckpt/$(cat "$out/ckpt/latest")/manifest.json")
half=$(( (bytes + 1048575) / 1048576 / 2 ))
start=$(date +%s.%N)
dd if=/dev/zero of="$out/dd0" bs=1M count="$half" conv=fsync status=none &
dd if=/dev/zero of="$out/dd1" bs=1M count="$half" conv=fsync status=none &
wait
end=$(date +%s.%N)
python3 - "$out/run.log" "$bytes" "$start" "$end" "$half" <<'PY'
import re, sys
log, total, start, end, half = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
saves = [(float(m.group(1)), float(m.group(2))) for m in
         re.finditer(r"checkpoint: step \d+ saved to \S+ \(([0-9.]+) MB in ([0-9.]+) s", open(log).read())]
dd_s = end - start
dd_rate = 2 * half * 1.048576 / dd_s
seconds = sorted(s for _, s in saves)
median = seconds[len(seconds) // 2]
mb = saves[0][0]
print(f"checkpoint: {mb:.1f} MB from 2 ranks, {len(saves)} saves, median {median:.2f} s "
      f"({mb / median:.0f} MB/s)")
print(f"dd, same bytes, 2 synced writers: {dd_s:.2f} s ({dd_rate:.0f} MB/s)")
print(f"save time / dd time for the same bytes: {median / (mb / dd_rate):.2f}x")
PY
rm -f "$out/dd0" "$out/dd1"
