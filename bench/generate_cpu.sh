#!/usr/bin/env bash
# CPU decode bandwidth: `braid generate`, batch 1, greedy, on a random
# ~100M-parameter LLaMA-shaped Hugging Face model in float32 (hidden 768, 12
# layers, 12 heads, 4 kv heads, ffn 2048, vocab 32000), made once under the
# work directory. Reports decode tokens/s, the bytes each decode call reads
# (the weights it uses, the embedding's one row, the KV cache) and their
# product against the memory bandwidth of a numpy copy loop measured in this
# script (the baseline; also a read-only sgemv figure). The target: decode at
# least 50 % of the copy loop. Logic: bench/generate_cpu.py.
#   bench/generate_cpu.sh [NEW_TOKENS] [REPEATS]   (defaults 256 3)
#   env: WORK (default build/bench), TIED=1 (tied output layer: 100.1 M
#   parameters, all read), ONE_THREAD=0 (skip the 1-thread run),
#   COPY_MIB (default 512). OMP_NUM_THREADS and OPENBLAS_CORETYPE pass through.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
work="${WORK:-$build/bench}"
new_tokens="${1:-256}"
repeats="${2:-3}"
flags=(--braid "$build/bin/braid" --work "$work" --new-tokens "$new_tokens"
       --repeats "$repeats" --copy-mib "${COPY_MIB:-512}")
[[ "${TIED:-0}" == 1 ]] && flags+=(--tied)
[[ "${ONE_THREAD:-1}" == 1 ]] && flags+=(--one-thread)
if [ ! -x "$build/bin/braid" ]; then
  echo "generate_cpu: $build/bin/braid is not built (ninja -C $build braid)" >&2
  exit 2
fi
echo "host: $(nproc) cores available, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
exec python3 "$root/bench/generate_cpu.py" "${flags[@]}"
