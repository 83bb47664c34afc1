#!/usr/bin/env bash
# The cost model against measurement, on this machine's CPU ranks: calibrates
# (braid calibrate), then for 9 layouts of a 4-layer tiny-llama on 4 ranks
# compiles the plan with the calibrated cluster, runs it, and compares the
# predicted step time with the measured one (median of the steps after the
# first, braid-run's "step time:" line). Then lets braidc --auto pick a
# layout for the same job and 4 devices, measures the pick, and compares it
# with the fastest measured; and compares the layout of the 9 that the cost
# model predicts fastest with the fastest measured of them. Every layout and
# the pick run ROUNDS times (default 3), round by round; a layout's time is
# the median of its runs.
# The calibration itself runs CALIBRATE_REPEATS rounds (default 3) and fits
# their medians.
#   [ROUNDS=3] [CALIBRATE_STEPS=20] [CALIBRATE_REPEATS=3] bench/cost_model.sh [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench/cost-model"
mkdir -p "$out"
steps="${1:-12}"
mpi=(mpirun -np 4 --oversubscribe --bind-to none)
if [ "$(id -u)" -eq 0 ]; then mpi+=(--allow-run-as-root); fi
bin="$build/bin"

"$bin/braid" calibrate --ranks 1,2,4 --threads 1 --steps "${CALIBRATE_STEPS:-20}" \
  --repeats "${CALIBRATE_REPEATS:-3}" -o "$out/local-cpu.textproto" \
  > "$out/calibrate.log"
"$bin/braid-data" preprocess --input "$root/examples/data/pride-and-prejudice.txt" \
  --output-prefix "$out/data" > /dev/null

layouts=(
  "dp4|dp: 4 micro_batch_size: 2"
  "tp2-dp2|tp: 2 dp: 2 micro_batch_size: 4"
  "tp2-dp2-sp|tp: 2 dp: 2 sp: true micro_batch_size: 4"
  "tp4|tp: 4 micro_batch_size: 8"
  "pp2-dp2|pp: 2 dp: 2 micro_batch_size: 2"
  "pp4|pp: 4 micro_batch_size: 2"
  "pp2-tp2|pp: 2 tp: 2 micro_batch_size: 2"
  "dp4-zero2|dp: 4 micro_batch_size: 1 zero: 2"
  "pp2-dp2-zero1|pp: 2 dp: 2 micro_batch_size: 1 zero: 1"
)
model='preset: "tiny-llama" num_layers: 4'
write_job() { # name, parallel fields
  cat > "$out/$1.textproto" <<JOB
model { $model }
parallel { $2 global_batch_size: 8 }
train { steps: $steps lr: 3e-3 seed: 1 }
data { seq_length: 64 }
JOB
}
for entry in "${layouts[@]}"; do
  name="${entry%%|*}"
  write_job "$name" "${entry#*|}"
  "$bin/braidc" "$out/$name.textproto" --emit=plan -o "$out/$name.plan" \
    --cluster "$out/local-cpu.textproto"
done

# The search's pick for the same job on 4 devices.
write_job auto ""
start=$(date +%s.%N)
"$bin/braidc" "$out/auto.textproto" --auto --cluster "$out/local-cpu.textproto" \
  --top 10 --emit=plan -o "$out/auto.plan" > "$out/auto.log"
end=$(date +%s.%N)

# Each layout and the pick run `rounds` times, round by round, so that a
# slow spell of the machine touches every layout alike; each layout's time
# is the median of its runs' medians.
rounds="${ROUNDS:-3}"
: > "$out/measured.txt"
for round in $(seq "$rounds"); do
  for name in "${layouts[@]%%|*}" auto; do
    "${mpi[@]}" "$bin/braid-run" "$out/$name.plan" --data "$out/data" --threads 1 \
      --log-every 1000000 > "$out/$name.run.log" 2>&1
    grep "^step time:" "$out/$name.run.log" | sed "s/^/$name: /" >> "$out/measured.txt"
  done
done
python3 - "$out" "$start" "$end" <<'PY'
import re, statistics, sys
out, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
line = re.compile(r"^(\S+): step time: measured ([0-9.e+-]+) s .* predicted ([0-9.e+-]+) s")
runs, predicted = {}, {}
for m in map(line.match, open(f"{out}/measured.txt")):
    if m:
        runs.setdefault(m.group(1), []).append(float(m.group(2)))
        predicted[m.group(1)] = float(m.group(3))
print(f"{'layout':16s} {'measured (ms)':>14s} {'runs (ms)':>24s} {'predicted (ms)':>15s} {'error':>8s}")
rows = []
for name, times in runs.items():
    measured = statistics.median(times)
    spread = " ".join(f"{1e3 * t:.1f}" for t in times)
    error = (predicted[name] - measured) / measured
    print(f"{name:16s} {1e3 * measured:14.2f} {spread:>24s} {1e3 * predicted[name]:15.2f} "
          f"{100 * error:+7.1f}%")
    if name != "auto":
        rows.append((name, measured, predicted[name]))
worst = max(abs(p - m) / m for _, m, p in rows)
within = sum(abs(p - m) / m <= 0.15 for _, m, p in rows)
print(f"largest error {100 * worst:.1f}% over {len(rows)} layouts; {within} within 15%")
# The cost model's pick among the measured layouts: the least predicted.
among = min(rows, key=lambda r: r[2])
fastest = min(rows, key=lambda r: r[1])
print(f"pick among the {len(rows)} layouts: {among[0]} (predicted {1e3 * among[2]:.2f} ms), "
      f"measured {1e3 * among[1]:.2f} ms; fastest measured: {fastest[0]} at "
      f"{1e3 * fastest[1]:.2f} ms (pick / fastest = {among[1] / fastest[1]:.3f})")
pick = re.search(r"^auto: (.*), predicted", open(f"{out}/auto.log").read(), re.M).group(1)
picked = statistics.median(runs["auto"])
print(f"search ({end - start:.1f} s): picked {pick}, measured {1e3 * picked:.2f} ms; "
      f"fastest of the {len(rows)} measured: {fastest[0]} at {1e3 * fastest[1]:.2f} ms "
      f"(pick / fastest = {picked / fastest[1]:.3f})")
PY
