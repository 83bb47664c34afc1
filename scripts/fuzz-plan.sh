#!/usr/bin/env bash
# Fuzzes the plan loader with libFuzzer (clang, ASan + UBSan) for SECONDS
# (default 600), with the build tree's braid-plan-fuzz:
#   scripts/fuzz-plan.sh [SECONDS]
# Prints libFuzzer's final statistics; a crash leaves crash-* in build/fuzz/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
seconds="${1:-600}"
out="$build/fuzz"
mkdir -p "$out/corpus"

if ! command -v clang++ >/dev/null; then
  echo "fuzz-plan: clang++ is needed (apt-get install clang libclang-rt-dev)" >&2
  exit 1
fi
# CMake defines the target where clang++ is installed (tests/fuzz); it is
# built here, on demand.
ninja -C "$build" braid-plan-fuzz >/dev/null
cp "$build/bin/braid-plan-fuzz" "$out/plan-loader-fuzz"

# Seeds: a valid plan, framed and as a bare payload.
cp -n "$root"/tests/fuzz/seeds/* "$out/corpus/"
cd "$out"
./plan-loader-fuzz -max_total_time="$seconds" -print_final_stats=1 \
  -rss_limit_mb=2048 corpus 2>&1 | tail -n 20
