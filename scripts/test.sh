#!/usr/bin/env bash
# Sets up (Debian packages), builds and runs every test: the lit suite and the
# GoogleTest units, through CTest. Ends with CTest's summary.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
start=$(date +%s)

"$root/scripts/setup.sh"
echo "test.sh: set up and built in $(( $(date +%s) - start )) s; testing"
exec ctest --test-dir "$build" --output-on-failure -j "${BRAID_JOBS:-$(nproc)}"
