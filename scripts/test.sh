#!/usr/bin/env bash
# Sets up (Debian packages), builds and runs every test: the lit suite and the
# GoogleTest units, through CTest. Where nvcc is installed, then builds the
# GPU machine's bundle (scripts/device_build.sh: the statically linked
# runtime and its inputs), which checks that it links nothing the GPU machine
# lacks. Ends with CTest's summary.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
start=$(date +%s)

"$root/scripts/setup.sh"
echo "test.sh: set up and built in $(( $(date +%s) - start )) s; testing"
status=0
ctest --test-dir "$build" --output-on-failure -j "${BRAID_JOBS:-$(nproc)}" ||
  status=$?
if [ -x /usr/local/cuda/bin/nvcc ] && [ "${BRAID_ENABLE_CUDA:-auto}" != "OFF" ]; then
  bundle_start=$(date +%s)
  if BRAID_BUILD_DIR="$build" "$root/scripts/device_build.sh" \
      > "$build/device_build.log" 2>&1; then
    echo "test.sh: GPU machine's bundle built in $(( $(date +%s) - bundle_start )) s"
  else
    tail -20 "$build/device_build.log"
    echo "test.sh: scripts/device_build.sh failed (log: $build/device_build.log)"
    status=1
  fi
fi
exit $status
