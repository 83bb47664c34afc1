#!/usr/bin/env bash
# One-GPU training throughput of a LLaMA-style model of about 1B parameters
# (16 layers, hidden 2048, 16 heads, ffn 5632, vocab 32000, seq 2048,
# bf16 mixed precision), Braid against PyTorch on the same GPU.
#
#   bench/gpu_train.sh compile DIR
#     (where braidc is built) compiles a GPT-2 124M-shaped plan (micro-batch
#     32, seq 1024; `run` prints its tokens/s after the comparison) and the
#     model's plan for micro-batches
#     1, 2, 4, ..., 32 into DIR (mbM.plan), with each plan's report, and
#     again with the gate and up projections fused into one (--fuse-mlp, as
#     Megatron's SwiGLU: the same model and arithmetic; mbM-fused.plan);
#   [STEPS=20] [WARMUP=5] [PROFILE=2] [MICRO_BATCH=M] [FUSE_MLP=0|1] [TRAINER=0|1]
#   bench/gpu_train.sh run DIR
#     (on the GPU machine, with braid-gpu-bench built, or in the directory
#     BRAID_BIN_DIR names: scripts/device_build.sh) takes the largest
#     micro-batch whose arena and workspaces fit the GPU's memory (or M), times its
#     steps on the CUDA executor (braid-gpu-bench), and PROFILE steps more
#     with every kernel timed (the per-kernel breakdown), then in the same script
#     PyTorch with the same model and micro-batch (bench/torch_llama.py:
#     LlamaForCausalLM or the same architecture, SDPA flash attention, fused
#     AdamW, torch.compile, bf16 autocast over fp32 weights; at a smaller
#     micro-batch, said so, where PyTorch runs out of memory), and prints
#     tokens/s, model TFLOP/s and MFU (against 989 TFLOP/s dense bf16) of
#     both and Braid's tokens/s over PyTorch's. TRAINER=1 runs braid-run
#     (the trainer: data read, written to the GPU and the loss read back
#     every micro-batch) on the same plan for WARMUP + STEPS steps of the
#     dataset compile prepared (DIR/data: the corpus's bytes as tokens)
#     instead of PyTorch, and prints its median step's tokens/s over
#     braid-gpu-bench's: what the host's part of a step costs. `run` ends
#     with a line "measured step: NAME SECONDS s" for each plan it timed
#     (1b-mbM, gpt2-124m, llama-350m), which `predict` reads.
#   bench/gpu_train.sh predict DIR CLUSTER LOG
#     (where braidc is built, after `run` on the GPU) compiles the same
#     jobs again for CLUSTER (a calibrated cluster file: braid calibrate
#     --device cuda) into DIR/predicted and prints each plan's predicted step (the compile
#     report's) against the step LOG (run's output) measured, and the
#     error: the cost model's check on three model sizes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BRAID_BUILD_DIR:-$root/build}"
mode="${1:-}"
dir="${2:-}"
if [ -z "$mode" ] || [ -z "$dir" ]; then
  echo "usage: bench/gpu_train.sh compile|run DIR" >&2
  exit 2
fi
micro_batches=(1 2 4 8 12 16 24 32)

# The plans' jobs, compiled into DIR by `compile` and again, with the
# cluster `predict` gives, by `predict`: compile_plans DIR [BRAIDC FLAGS...].
compile_plans() {
  local out=$1
  shift
  mkdir -p "$out"
  { cat "$root/bench/llama-1b.textproto"
    printf 'train { precision: BF16 }\ndata { seq_length: 2048 }\n'
  } > "$out/model.textproto"
  for mb in "${micro_batches[@]}"; do
    "$build/bin/braidc" "$out/model.textproto" --micro-batch-size "$mb" \
      --global-batch-size "$mb" --emit=plan -o "$out/mb$mb.plan" \
      --report "$out/mb$mb.json" "$@"
    "$build/bin/braidc" "$out/model.textproto" --micro-batch-size "$mb" \
      --global-batch-size "$mb" --fuse-mlp --emit=plan \
      -o "$out/mb$mb-fused.plan" --report "$out/mb$mb-fused.json" "$@"
  done
  # A GPT-2 124M-shaped plan (the gpt2-124m preset: 12 layers, hidden 768,
  # 12 heads of 64, seq 1024, hidden dropout 0.1; attention dropout 0, which
  # the compiler does not differentiate yet), bf16, whose tokens/s `run`
  # prints beside the 1B figures.
  printf 'model { attention_dropout: 0 }\n' > "$out/gpt2-124m.textproto"
  "$build/bin/braidc" "$out/gpt2-124m.textproto" --preset gpt2-124m \
    --seq-len 1024 --precision bf16 \
    --micro-batch-size 32 --global-batch-size 32 --emit=plan \
    -o "$out/gpt2-124m.plan" --report "$out/gpt2-124m.json" "$@"
  # A LLaMA shape of about 350M parameters (24 layers, hidden 1024, 16
  # heads of 64, ffn 2816, vocab 32000: 374 M), seq 2048, micro-batch 8,
  # bf16: the cost model's middle size.
  cat > "$out/llama-350m.textproto" <<'JOB'
model {
  family: LLAMA
  num_layers: 24
  hidden_size: 1024
  num_heads: 16
  num_kv_heads: 16
  ffn_hidden_size: 2816
  vocab_size: 32000
  max_seq_len: 2048
}
train { precision: BF16 }
data { seq_length: 2048 }
JOB
  "$build/bin/braidc" "$out/llama-350m.textproto" --micro-batch-size 8 \
    --global-batch-size 8 --emit=plan -o "$out/llama-350m.plan" \
    --report "$out/llama-350m.json" "$@"
}

if [ "$mode" = compile ]; then
  compile_plans "$dir"
  # The trainer's dataset (TRAINER=1): the corpus's bytes as token ids.
  "$build/bin/braid-data" preprocess \
    --input "$root/examples/data/pride-and-prejudice.txt" \
    --output-prefix "$dir/data" --tokenizer byte > /dev/null
  echo "compiled $((2 * ${#micro_batches[@]} + 2)) plans into $dir"
  exit 0
fi
if [ "$mode" = predict ]; then
  cluster="${3:-}"
  log="${4:-}"
  if [ -z "$cluster" ] || [ ! -f "$log" ]; then
    echo "usage: bench/gpu_train.sh predict DIR CLUSTER LOG (LOG: run's output)" >&2
    exit 2
  fi
  compile_plans "$dir/predicted" --cluster "$cluster"
  python3 - "$dir/predicted" "$log" <<'PY'
import json, re, sys
directory, log = sys.argv[1], sys.argv[2]
measured = dict(re.findall(r"^measured step: (\S+) ([0-9.eE+-]+) s$",
                           open(log).read(), re.M))
if not measured:
    sys.exit(f"bench/gpu_train.sh: no 'measured step:' line in {log}")
print(f"{'plan':12s} {'measured (ms)':>14s} {'predicted (ms)':>15s} {'error':>8s}")
for name, seconds in measured.items():
    report = {"gpt2-124m": "gpt2-124m", "llama-350m": "llama-350m"}.get(name)
    if report is None:
        m = re.fullmatch(r"1b-mb(\d+)(-fused)?", name)
        if not m:
            continue
        report = f"mb{m.group(1)}{m.group(2) or ''}"
    predicted = json.load(open(f"{directory}/{report}.json"))["predicted_step"]
    p, t = predicted["step_time_s"], float(seconds)
    print(f"{name:12s} {1e3 * t:14.2f} {1e3 * p:15.2f} {100 * (p - t) / t:+7.1f}%"
          f"   ({predicted['cluster']})")
    if name.startswith("1b-"):
        kernels_of_1b = predicted["kernel_s"]
# The 1B plan's profiled kernels (braid-gpu-bench's table in the log)
# against the prediction's, kind by kind: where an error comes from.
text = open(log).read()
table = re.search(r"^kernel +ms/step +share.*\n((?:[A-Z_]+ +[0-9.]+ .*\n)+)",
                  text, re.M)
if table and "kernels_of_1b" in globals():
    print(f"\n1B kernels {'measured (ms)':>17s} {'predicted (ms)':>15s} {'error':>8s}")
    for row in table.group(1).splitlines():
        kind, ms = row.split()[0], float(row.split()[1])
        guess = 1e3 * kernels_of_1b.get(kind, 0.0)
        error = f"{100 * (guess - ms) / ms:+7.1f}%" if ms > 0 else ""
        print(f"{kind:27s} {ms:10.3f} {guess:15.3f} {error:>8s}")
PY
  exit 0
fi
if [ "$mode" != run ]; then
  echo "bench/gpu_train.sh: unknown mode '$mode' (compile, run or predict)" >&2
  exit 2
fi

steps="${STEPS:-20}"
warmup="${WARMUP:-5}"
profile="${PROFILE:-2}"
# FUSE_MLP=1: Braid's plans with the gate and up projections fused.
suffix=""
case "${FUSE_MLP:-0}" in
  0) ;;
  1) suffix="-fused" ;;
  *) echo "bench/gpu_train.sh: FUSE_MLP is 0 or 1, not '$FUSE_MLP'" >&2
     exit 2 ;;
esac
candidates=()
memory=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits |
  head -1)
memory=$((memory * 1024 * 1024))
# The largest micro-batch whose arena, with 1 GiB for the workspaces and
# the CUDA context, fits.
pick=""
for mb in "${micro_batches[@]}"; do
  arena=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['memory']['arena_bytes'])" "$dir/mb$mb$suffix.json")
  if [ $((arena + (1 << 30))) -le "$memory" ]; then pick=$mb; fi
done
if [ -z "$pick" ]; then
  echo "bench/gpu_train.sh: no micro-batch fits $memory B" >&2
  exit 1
fi
if [ -n "${MICRO_BATCH:-}" ]; then
  if [ ! -f "$dir/mb$MICRO_BATCH$suffix.plan" ]; then
    echo "bench/gpu_train.sh: MICRO_BATCH=$MICRO_BATCH is not one of ${micro_batches[*]}" >&2
    exit 2
  fi
  if [ "$MICRO_BATCH" -gt "$pick" ]; then
    echo "bench/gpu_train.sh: micro-batch $MICRO_BATCH does not fit (at most $pick)" >&2
    exit 1
  fi
  echo "micro-batch $MICRO_BATCH as MICRO_BATCH says (the largest that fits: $pick)"
  pick=$MICRO_BATCH
fi
per_token=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['flops']['training_per_token'])" "$dir/mb$pick$suffix.json")
echo "micro-batch $pick; model FLOPs per token $per_token${suffix:+; gate and up fused}"

"${BRAID_BIN_DIR:-$build/bin}/braid-gpu-bench" "$dir/mb$pick$suffix.plan" --steps "$steps" \
  --warmup "$warmup" --profile "$profile" | tee "$dir/braid.log"
braid=$(grep '^median step' "$dir/braid.log")
# "median step: S s over N steps, ...": for `predict`.
measured_line() { # NAME LOG
  sed -n 's/^median step: \([0-9.eE+-]*\) s .*/measured step: '"$1"' \1 s/p' "$2"
}
measured_line "1b-mb$pick$suffix" "$dir/braid.log"
if [ "${TRAINER:-0}" = 1 ]; then
  rm -f "$dir/trainer.jsonl"
  "${BRAID_BIN_DIR:-$build/bin}/braid-run" "$dir/mb$pick$suffix.plan" \
    --data "$dir/data" --device cuda --steps $((warmup + steps)) \
    --log-every 5 --metrics-out "$dir/trainer.jsonl"
  python3 - "$dir/trainer.jsonl" "$warmup" "$braid" <<'PY'
import json, re, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1])]
steady = [r["tokens_per_s"] for r in records[int(sys.argv[2]):]]
trainer = statistics.median(steady)
bench = float(re.search(r"([0-9.]+) tokens/s", sys.argv[3]).group(1))
print(f"braid-run {trainer:12.1f} tokens/s (median of {len(steady)} steps)")
print(f"braid-gpu-bench {bench:12.1f} tokens/s")
print(f"braid-run / braid-gpu-bench tokens/s: {trainer / bench:.3f}")
PY
  exit 0
fi
# PyTorch at the same micro-batch; where it runs out of memory there, at the
# largest smaller one that fits (said in the output).
torch=""
for mb in "${micro_batches[@]}"; do
  if [ "$mb" -le "$pick" ]; then candidates=("$mb" "${candidates[@]}"); fi
done
for mb in "${candidates[@]}"; do
  set +e
  python3 "$root/bench/torch_llama.py" --micro-batch "$mb" --steps "$steps" \
    --warmup "$warmup" > "$dir/torch.log" 2> "$dir/torch.err"
  status=$?
  set -e
  if [ $status -eq 0 ]; then
    torch=$(grep '^median step' "$dir/torch.log")
    break
  fi
  tail -3 "$dir/torch.err" >&2
  if [ $status -ne 3 ]; then break; fi
  echo "pytorch: out of memory at micro-batch $mb"
done
if [ -z "$torch" ]; then
  echo "bench/gpu_train.sh: the PyTorch baseline did not run" >&2
  exit 1
fi
cat "$dir/torch.log"
python3 - "$per_token" "$braid" "$torch" <<'PY'
import re, sys
per_token = float(sys.argv[1])
def tokens_per_s(line):
    return float(re.search(r"([0-9.]+) tokens/s", line).group(1))
rows = [("braid", tokens_per_s(sys.argv[2])), ("pytorch", tokens_per_s(sys.argv[3]))]
for name, tps in rows:
    tflops = tps * per_token / 1e12
    print(f"{name:8s} {tps:12.1f} tokens/s  {tflops:7.1f} TFLOP/s  MFU {100 * tflops / 989:5.1f} %")
print(f"braid / pytorch tokens/s: {rows[0][1] / rows[1][1]:.3f}")
PY
# The GPT-2 124M-shaped plan's tokens/s (Braid alone), beside them.
if [ -f "$dir/gpt2-124m.plan" ]; then
  "${BRAID_BIN_DIR:-$build/bin}/braid-gpu-bench" "$dir/gpt2-124m.plan" \
    --steps "$steps" --warmup "$warmup" --profile 0 > "$dir/gpt2.log"
  grep '^kernels:' "$dir/gpt2.log" || true
  python3 - "$dir/gpt2-124m.json" "$(grep '^median step' "$dir/gpt2.log")" <<'PY'
import json, re, sys
per_token = json.load(open(sys.argv[1]))["flops"]["training_per_token"]
tps = float(re.search(r"([0-9.]+) tokens/s", sys.argv[2]).group(1))
tflops = tps * per_token / 1e12
print(f"gpt2-124m {tps:12.1f} tokens/s  {tflops:7.1f} TFLOP/s  MFU {100 * tflops / 989:5.1f} % "
      "(micro-batch 32, seq 1024, bf16)")
PY
  measured_line gpt2-124m "$dir/gpt2.log"
fi
# The 350M LLaMA shape's step, for the cost model's check (`predict`).
if [ -f "$dir/llama-350m.plan" ]; then
  "${BRAID_BIN_DIR:-$build/bin}/braid-gpu-bench" "$dir/llama-350m.plan" \
    --steps "$steps" --warmup "$warmup" --profile 0 > "$dir/llama-350m.log"
  grep '^median step' "$dir/llama-350m.log" | sed 's/^/llama-350m /'
  measured_line llama-350m "$dir/llama-350m.log"
fi
