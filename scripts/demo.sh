#!/usr/bin/env bash
# The default demo: sets up, builds, and compiles examples/tiny-llama.textproto,
# printing its compile report. The IR goes to build/demo/tiny-llama.mlir.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"
mkdir -p "$build/demo"
"$build/bin/braidc" "$root/examples/tiny-llama.textproto" \
  -o "$build/demo/tiny-llama.mlir" --report=-
echo "demo: the model IR is in $build/demo/tiny-llama.mlir"
