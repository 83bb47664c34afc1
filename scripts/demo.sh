#!/usr/bin/env bash
# The default demo: sets up and builds, then trains the 2-layer LLaMA-style
# model of examples/tiny-llama.textproto on the bundled corpus (tokenized on
# first use into build/demo/), printing one line per 25 steps.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"
"$build/bin/braid" train "$root/examples/tiny-llama.textproto" --log-every 25 "$@"
