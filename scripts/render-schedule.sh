#!/usr/bin/env bash
# Renders the schedule view (braid view) of an 8-stage pipeline to a PNG:
# tiny-llama cut to 8 layers, one per stage, 32 micro-batches of 1 x 32
# tokens per step. braidc compiles the job to a plan, braid view draws it,
# headless Chromium takes the screenshot.
#
# usage: scripts/render-schedule.sh [--schedule 1f1b|gpipe|zb-h1] [--html FILE.html] [OUT.png]
#
# OUT.png defaults to docs/schedule-SCHEDULE-8x32.png. Needs a build
# (BRAID_BUILD_DIR, default build/) with braidc and braid, and Debian's
# chromium, which this script does not install.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
me="render-schedule.sh"

schedule=1f1b
html=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --schedule) [ $# -ge 2 ] || { echo "$me: error: --schedule needs a value (1f1b, gpipe or zb-h1)" >&2; exit 2; }
                schedule="$2"; shift 2 ;;
    --schedule=*) schedule="${1#*=}"; shift ;;
    --html) [ $# -ge 2 ] || { echo "$me: error: --html needs a value (the HTML file to keep)" >&2; exit 2; }
            html="$2"; shift 2 ;;
    --html=*) html="${1#*=}"; shift ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "$me: error: unknown flag $1 (expected --schedule, --html or OUT.png)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "$me: error: more than one output: $out and $1" >&2; exit 2; }
       out="$1"; shift ;;
  esac
done
case "$schedule" in
  1f1b|gpipe|zb-h1) ;;
  *) echo "$me: error: --schedule $schedule is not one of 1f1b, gpipe, zb-h1" >&2; exit 2 ;;
esac
out="${out:-$root/docs/schedule-$schedule-8x32.png}"

chromium="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$chromium" ]; then
  echo "$me: error: chromium is not installed; install it (Debian: apt-get install chromium) and run this again" >&2
  exit 1
fi
for tool in braidc braid; do
  if [ ! -x "$build/bin/$tool" ]; then
    echo "$me: error: no $build/bin/$tool; build it first (ninja -C $build braidc braid)" >&2
    exit 1
  fi
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
plan="$work/tiny-llama-pp8-$schedule.plan"
cat > "$work/job.textproto" <<EOF
model { preset: "tiny-llama" num_layers: 8 }
parallel { pp: 8 schedule: "$schedule" micro_batch_size: 1 global_batch_size: 32 }
data { seq_length: 32 }
EOF
"$build/bin/braidc" "$work/job.textproto" --emit=plan -o "$plan"
"$build/bin/braid" view "$plan" -o "$work/schedule.html"
[ -z "$html" ] || cp "$work/schedule.html" "$html"

# The page states the window it needs to show everything at once.
size="$(sed -n 's/.*braid-view-size: \([0-9]*\)x\([0-9]*\).*/\1,\2/p' "$work/schedule.html" | head -n 1)"
size="${size:-2400,1000}"
mkdir -p "$(dirname "$out")"
rm -f "$out"
if ! "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --screenshot="$out" --window-size="$size" "file://$work/schedule.html" \
    > "$work/chromium.log" 2>&1 || [ ! -s "$out" ]; then
  cat "$work/chromium.log" >&2
  echo "$me: error: chromium did not write $out" >&2
  exit 1
fi
echo "$me: wrote $out ($schedule, 8 stages x 32 micro-batches, window ${size/,/x})"
