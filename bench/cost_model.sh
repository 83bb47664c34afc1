#!/usr/bin/env bash
# The cost model against measurement, on this machine's CPU ranks, in paired
# rounds: each round calibrates (braid calibrate, one repeat), compiles 9
# layouts of a 4-layer tiny-llama on 4 ranks and the search's pick
# (braidc --auto) against that calibration, and runs them at once, so that
# the prediction and the measurement see the machine in the same state (its
# speed drifts by a third over minutes: a calibration made before every
# layout's runs priced all of them for the machine of that moment). A
# layout's measured time in a round is braid-run's median step after the
# first ("step time:" line), its error the round's; the summary gives, per
# layout, the median over rounds of the measured time, the predicted time
# and the error, and per round which layout the cost model predicts fastest
# among the 9 and the search picks, each against the fastest measured.
# The layouts run in an order rotated by one each round.
# Each round's calibration runs CALIBRATE_REPEATS rounds of its own (default
# 1) and fits their medians.
#   [ROUNDS=5] [CALIBRATE_STEPS=20] [CALIBRATE_REPEATS=1] bench/cost_model.sh [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
out="$build/bench/cost-model"
rm -rf "$out"
mkdir -p "$out"
steps="${1:-12}"
rounds="${ROUNDS:-5}"
mpi=(mpirun -np 4 --oversubscribe --bind-to none)
if [ "$(id -u)" -eq 0 ]; then mpi+=(--allow-run-as-root); fi
bin="$build/bin"

"$bin/braid-data" preprocess --input "$root/examples/data/pride-and-prejudice.txt" \
  --output-prefix "$out/data" > /dev/null 2>&1

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
names=()
for entry in "${layouts[@]}"; do
  name="${entry%%|*}"
  names+=("$name")
  write_job "$name" "${entry#*|}"
done
write_job auto ""
names+=(auto)

: > "$out/measured.txt"
for round in $(seq "$rounds"); do
  cluster="$out/local-cpu-r$round.textproto"
  "$bin/braid" calibrate --ranks 1,2,4 --threads 1 \
    --steps "${CALIBRATE_STEPS:-20}" --repeats "${CALIBRATE_REPEATS:-1}" -o "$cluster" \
    > "$out/calibrate-r$round.log"
  for name in "${names[@]}"; do
    flags=()
    if [ "$name" = auto ]; then flags=(--auto --top 10); fi
    "$bin/braidc" "$out/$name.textproto" "${flags[@]}" --cluster "$cluster" \
      --emit=plan -o "$out/$name-r$round.plan" > "$out/$name-r$round.compile.log"
  done
  count=${#names[@]}
  for k in $(seq 0 $((count - 1))); do
    name="${names[$(( (k + round - 1) % count ))]}"
    "${mpi[@]}" "$bin/braid-run" "$out/$name-r$round.plan" --data "$out/data" \
      --threads 1 --log-every 1000000 > "$out/$name-r$round.run.log" 2>&1
    grep "^step time:" "$out/$name-r$round.run.log" |
      sed "s/^/$round $name: /" >> "$out/measured.txt"
  done
done
python3 - "$out" <<'PY'
import re, statistics, sys
out = sys.argv[1]
line = re.compile(r"^(\d+) (\S+): step time: measured ([0-9.e+-]+) s .* predicted ([0-9.e+-]+) s")
runs = {}  # name -> {round: (measured, predicted)}
for m in map(line.match, open(f"{out}/measured.txt")):
    if m:
        runs.setdefault(m.group(2), {})[int(m.group(1))] = (float(m.group(3)), float(m.group(4)))
rounds = sorted({r for v in runs.values() for r in v})
med = statistics.median
print(f"{'layout':16s} {'measured (ms)':>14s} {'predicted':>10s} {'error':>8s}   per-round errors (%)")
rows = []
for name, byRound in runs.items():
    measured = med(m for m, _ in byRound.values())
    predicted = med(p for _, p in byRound.values())
    errors = [(p - m) / m for m, p in byRound.values()]
    error = med(errors)
    print(f"{name:16s} {1e3 * measured:14.2f} {1e3 * predicted:10.2f} {100 * error:+7.1f}%   "
          + " ".join(f"{100 * e:+.0f}" for e in errors))
    if name != "auto":
        rows.append((name, error))
within = sum(abs(e) <= 0.15 for _, e in rows)
worst = max(rows, key=lambda r: abs(r[1]))
print(f"{within} of {len(rows)} layouts within 15 % (median of their rounds' errors); "
      f"largest {worst[0]} {100 * worst[1]:+.1f} %")
among, searched = [], []
for r in rounds:
    here = {n: v[r] for n, v in runs.items() if r in v and n != "auto"}
    fastest = min(here, key=lambda n: here[n][0])
    pick = min(here, key=lambda n: here[n][1])
    among.append(here[pick][0] / here[fastest][0])
    auto = runs.get("auto", {}).get(r)
    line = (f"round {r}: fastest measured {fastest} {1e3 * here[fastest][0]:.2f} ms; "
            f"predicted fastest of the 9: {pick}, {among[-1]:.3f}x")
    if auto:
        pickLog = open(f"{out}/auto-r{r}.compile.log").read()
        chosen = re.search(r"^auto: (.*), predicted", pickLog, re.M)
        searched.append(auto[0] / here[fastest][0])
        line += (f"; the search's pick ({chosen.group(1) if chosen else '?'}) "
                 f"{1e3 * auto[0]:.2f} ms, {searched[-1]:.3f}x")
    print(line)
print(f"median over rounds: pick among the 9 {med(among):.3f}x the fastest"
      + (f", the search's pick {med(searched):.3f}x" if searched else ""))
PY
