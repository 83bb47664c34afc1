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
# The layouts run twice a round, in an order rotated by one each round and
# then in the reverse of that order, and a layout's time in the round is the
# mean of its two runs (a drift of the machine's speed during the round
# touches every layout alike).
# Each round's calibration runs CALIBRATE_REPEATS rounds of its own (default
# 1) and fits their medians.
# Which layout is fastest is judged across rounds with the machine's speed
# of each round taken out: a layout's time in a round over the median of the
# 9 layouts' times in that round (its relative time), and a layout's score
# the median over rounds of its relative times. Each round's pick among the
# 9 is judged by its score against the best score; the search's pick (its
# layout may not be among the 9) by its relative time in its round.
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
  sequence=()
  for k in $(seq 0 $((count - 1))); do
    sequence+=("${names[$(( (k + round - 1) % count ))]}")
  done
  for k in $(seq $((count - 1)) -1 0); do sequence+=("${sequence[$k]}"); done
  for name in "${sequence[@]}"; do
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
runs = {}  # name -> {round: (measured, predicted)}; measured: the mean of the round's runs
pairs = {}
for m in map(line.match, open(f"{out}/measured.txt")):
    if m:
        pairs.setdefault((m.group(2), int(m.group(1))), []).append(
            (float(m.group(3)), float(m.group(4))))
for (name, r), got in pairs.items():
    runs.setdefault(name, {})[r] = (sum(g[0] for g in got) / len(got), got[0][1])
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
# The round's speed taken out: relative time = time / the round's median of
# the 9; score = the median over rounds of a layout's relative times.
relative = {}
for r in rounds:
    here = {n: v[r][0] for n, v in runs.items() if r in v and n != "auto"}
    speed = med(here.values())
    for n, v in runs.items():
        if r in v:
            relative.setdefault(n, {})[r] = v[r][0] / speed
score = {n: med(v.values()) for n, v in relative.items() if n != "auto"}
best = min(score, key=score.get)
print("scores (median over rounds of the time relative to the round's median of the 9): "
      + ", ".join(f"{n} {score[n]:.3f}" for n in sorted(score, key=score.get)))
among, searched, scored = [], [], []
for r in rounds:
    here = {n: v[r] for n, v in runs.items() if r in v and n != "auto"}
    fastest = min(here, key=lambda n: here[n][0])
    pick = min(here, key=lambda n: here[n][1])
    among.append(here[pick][0] / here[fastest][0])
    scored.append(score[pick] / score[best])
    auto = runs.get("auto", {}).get(r)
    line = (f"round {r}: fastest measured {fastest} {1e3 * here[fastest][0]:.2f} ms; "
            f"predicted fastest of the 9: {pick}, {among[-1]:.3f}x in the round, "
            f"{scored[-1]:.3f}x the best score ({best})")
    if auto:
        pickLog = open(f"{out}/auto-r{r}.compile.log").read()
        chosen = re.search(r"^auto: (.*), predicted", pickLog, re.M)
        searched.append(relative["auto"][r] / score[best])
        line += (f"; the search's pick ({chosen.group(1) if chosen else '?'}) "
                 f"{1e3 * auto[0]:.2f} ms, {searched[-1]:.3f}x the best score")
    print(line)
within = sum(s <= 1.05 for s in scored)
print(f"the pick among the 9: {within} of {len(scored)} rounds within 5 % of the best score "
      f"(median {med(scored):.3f}x; in-round median {med(among):.3f}x the round's fastest)"
      + (f"; the search's pick: median {med(searched):.3f}x the best score" if searched else ""))
PY
