#!/usr/bin/env bash
# The fine-tuning example: instruction data made here (make_data.py), the
# demo's model (scripts/demo.sh trains it into build/demo/ckpt) LoRA-tuned
# on it (finetune.textproto), the adapters exported in PEFT's format and
# merged into the base, and the exact-match accuracy before and after
# (evaluate.py, with braid generate) on held-out questions (test.json) and
# on questions of the training set (seen.json).
#   examples/finetune/run.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
bin="$build/bin"
out="$build/finetune"
if [ ! -d "$build/demo/ckpt" ]; then
  echo "run scripts/demo.sh first: the example tunes the demo's model" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out"
python3 "$here/make_data.py" "$out"
"$bin/braid-data" preprocess --handler alpaca --input "$out/train.json" \
  --output-prefix "$out/train" --tokenizer byte | grep -E "conversations|trained"
"$bin/braid" train "$here/finetune.textproto" --init-from "$build/demo/ckpt" \
  --save "$out/ckpt" --log-every 100
"$bin/braid-ckpt" export "$build/demo/ckpt" --hf "$out/base" > /dev/null
"$bin/braid-ckpt" export "$out/ckpt" --peft "$out/adapters"
"$bin/braid-ckpt" merge --base "$out/base" --lora "$out/ckpt" --out "$out/merged"
for set in test seen; do
  echo "$set questions, before tuning:"
  python3 "$here/evaluate.py" "$bin/braid" "$out/base" "$out/$set.json" "$out/eval-base-$set"
  echo "$set questions, after tuning:"
  python3 "$here/evaluate.py" "$bin/braid" "$out/merged" "$out/$set.json" "$out/eval-merged-$set"
done
