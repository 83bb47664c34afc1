#!/usr/bin/env bash
# The default demo: sets up and builds, then trains the 2-layer LLaMA-style
# model of examples/tiny-llama.textproto on the bundled corpus (tokenized on
# first use into build/demo/), printing one line per 25 steps, and saves
# the weights for braid generate.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"
# The trained weights go to build/demo/ckpt (replaced on every run), which
# `braid generate build/demo/ckpt --tokenizer bytes --prompt TEXT` continues.
"$build/bin/braid" train "$root/examples/tiny-llama.textproto" --log-every 25 \
  --save "$build/demo/ckpt" --overwrite "$@"
