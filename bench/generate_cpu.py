#!/usr/bin/env python3
"""CPU decode bandwidth of `braid generate` against this machine's memory
bandwidth, both measured here (bench/generate_cpu.sh runs it).

Decoding one sequence reads every weight the decode function uses once per
token, so tokens/s × bytes read per token is the memory bandwidth decode
achieves; the target is at least 50 % of what a copy loop achieves on the
same machine in the same script.

  generate_cpu.py --braid BIN --work DIR [--new-tokens N] [--prompt-len P]
                  [--max-seq-len S] [--repeats R] [--tied] [--one-thread]
                  [--copy-mib M]

The model is a random LLaMA-shaped Hugging Face directory in float32 (hidden
768, 12 layers, 12 heads, 4 kv heads, ffn 2048, vocabulary 32000), made once
with tests/e2e/hf_reference.py and kept under DIR. Untied (LLaMA's
convention), it has 124.7 M parameters of which decode reads 100.1 M: the
embedding table is gathered, one row a token. With --tied the output layer
is the embedding table (100.1 M parameters, all read).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import hf_reference  # noqa: E402  (numpy only)

# The shape: Hugging Face keys over hf_reference.default_config("llama").
SHAPE = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "intermediate_size": 2048,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
FLOAT_BYTES = 4

STATS = re.compile(
    r"stats: (\d+) sequences; prefill (\d+) calls in ([0-9.]+) s; "
    r"decode (\d+) calls in ([0-9.]+) s, ([0-9.]+) calls/s")


def make_model(work, tied):
    """The model directory under `work` (made on first use) and its config."""
    overrides = dict(SHAPE, tie_word_embeddings=bool(tied))
    directory = os.path.join(work, "llama-100m-f32" + ("-tied" if tied else ""))
    config_path = os.path.join(directory, "config.json")
    weights_path = os.path.join(directory, "model.safetensors")
    if os.path.exists(config_path) and os.path.exists(weights_path):
        with open(config_path) as f:
            config = json.load(f)
        if all(config.get(k) == v for k, v in overrides.items()):
            return directory, config
    print(f"making {directory} (random weights, once)", flush=True)
    config, weights = hf_reference.random_model("llama", overrides, seed=1)
    hf_reference.save_hf_dir(directory, config, weights)
    return directory, config


def weight_bytes(config):
    """(parameters in the model, parameters one decode call reads): every
    tensor once, but the embedding table only for the token's row, unless
    the output layer is that table (tied), which reads it whole."""
    shapes = hf_reference.param_shapes(config)
    total = sum(int(np.prod(s)) for s in shapes.values())
    tied = "lm_head.weight" not in shapes
    embed = shapes["model.embed_tokens.weight"]
    read = total if tied else total - int(np.prod(embed)) + embed[1]
    return total, read


def kv_bytes_per_call(config, prompt_len, calls):
    """The KV cache bytes one decode call reads, averaged over a run of
    `calls` calls after a prompt of `prompt_len`: the call at position p
    attends to positions 0..p, keys and values, in every layer."""
    layers = config["num_hidden_layers"]
    kv_cols = (config["num_key_value_heads"] * config["hidden_size"] //
               config["num_attention_heads"])
    mean_rows = prompt_len + (calls - 1) / 2 + 1  # positions prompt_len.. + 1
    return 2 * layers * mean_rows * kv_cols * FLOAT_BYTES


def _threaded(fn, n, threads):
    """Seconds `fn(begin, end)` takes over [0, n) split among `threads`
    Python threads (numpy releases the GIL in these loops)."""
    parts = [(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    workers = [threading.Thread(target=fn, args=p) for p in parts]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


def bandwidth(mib, cores, repeats=5):
    """Bytes/s: {"copy T": (read + written) / s of np.copyto between two
    `mib`-MiB float32 arrays on T threads, "read": the matrix bytes / s of
    numpy's sgemv (its BLAS's threads) over a `mib`-MiB matrix}, best of
    `repeats`."""
    n = mib * 2**20 // FLOAT_BYTES
    src = np.ones(n, np.float32)
    dst = np.zeros(n, np.float32)  # touched: no page faults in the timing
    out = {}
    for threads in sorted({1, cores}):
        def copy(a, b):
            np.copyto(dst[a:b], src[a:b])
        best = min(_threaded(copy, n, threads) for _ in range(repeats))
        out[f"copy {threads}"] = 2 * src.nbytes / best
    matrix = src.reshape(-1, 1024)
    vector = np.ones(1024, np.float32)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matrix @ vector
        times.append(time.perf_counter() - start)
    out["read"] = src.nbytes / min(times)
    return out


def gemv_reference(model, repeats=5, tokens=10):
    """(tokens/s, bytes of the matrices): numpy's BLAS sgemv (its own
    threads) over every weight matrix a decode call multiplies by, in the
    model's order, one vector each, best of `repeats` rounds of `tokens`:
    the matrix products of decode alone, done by a tuned library, on this
    machine (no norms, attention or sampling)."""
    weights = hf_reference.read_safetensors(model)
    mats = [weights[k] for k in sorted(weights)
            if weights[k].ndim == 2 and k != "model.embed_tokens.weight"]
    if "lm_head.weight" not in weights:  # tied: the table is the output layer
        mats.append(weights["model.embed_tokens.weight"])
    del weights
    vectors = {m.shape[1]: np.ones(m.shape[1], np.float32) for m in mats}
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(tokens):
            for m in mats:
                m @ vectors[m.shape[1]]
        best = min(best, (time.perf_counter() - start) / tokens)
    return 1 / best, sum(m.nbytes for m in mats)


def run_braid(braid, model, args, env_extra=None):
    """One `braid generate` run: (stats dict, stderr). The prefill chunk is
    the prompt's length: a shorter prompt is padded to the chunk, and the
    default (512 here) would compute 512 rows for 8 tokens."""
    prompt = ",".join(str(3 + i) for i in range(args.prompt_len))
    cmd = [braid, "generate", model, "--prompt-ids", prompt,
           "--max-new-tokens", str(args.new_tokens), "--greedy", "--print-ids",
           "--stats", "--max-batch", "1", "--max-seq-len", str(args.max_seq_len),
           "--prefill-chunk", str(args.prompt_len)]
    env = dict(os.environ, **(env_extra or {}))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"generate_cpu: {' '.join(cmd)} failed "
                 f"({done.returncode}):\n{done.stderr}")
    m = STATS.search(done.stderr)
    if not m:
        sys.exit(f"generate_cpu: no stats line in:\n{done.stderr}")
    stats = {"prefill_s": float(m.group(3)), "calls": int(m.group(4)),
             "decode_s": float(m.group(5)), "rate": float(m.group(6))}
    return stats, done.stderr


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--gemv-only":
        # gemv_reference in a process of its own, so that the environment
        # sets its BLAS's threads.
        print(*gemv_reference(sys.argv[2]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--braid", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--max-seq-len", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--copy-mib", type=int, default=512)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--one-thread", action="store_true",
                   help="also run decode on one thread")
    args = p.parse_args()
    if args.prompt_len + args.new_tokens > args.max_seq_len:
        sys.exit("generate_cpu: prompt + new tokens exceed --max-seq-len")

    os.makedirs(args.work, exist_ok=True)
    cores = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", f"unset (= {cores})")
    model, config = make_model(args.work, args.tied)
    total, read = weight_bytes(config)
    print(f"machine: {cores} cores ({os.uname().machine}), OMP_NUM_THREADS "
          f"{omp}, load average {load_average()} at the start")
    print(f"model: {model}\n  LLaMA hidden {config['hidden_size']}, "
          f"{config['num_hidden_layers']} layers, "
          f"{config['num_attention_heads']} heads, "
          f"{config['num_key_value_heads']} kv heads, ffn "
          f"{config['intermediate_size']}, vocab {config['vocab_size']}, "
          f"{'tied' if args.tied else 'untied'}, float32")
    print(f"  {total} parameters ({total * FLOAT_BYTES} bytes); a decode call "
          f"reads {read} of them ({read * FLOAT_BYTES} bytes)")

    before = bandwidth(args.copy_mib, cores)
    runs = []
    blas_core = None
    for i in range(args.repeats):
        stats, err = run_braid(args.braid, model, args,
                               {"OPENBLAS_VERBOSE": "2"} if i == 0 else None)
        if i == 0:
            m = re.search(r"Core: (\S+)", err)
            blas_core = m.group(1) if m else "not reported"
        runs.append(stats)
        print(f"  run {i + 1}: prefill {stats['prefill_s']:.3f} s, decode "
              f"{stats['calls']} calls in {stats['decode_s']:.3f} s = "
              f"{stats['rate']:.2f} tokens/s (load average then "
              f"{load_average()})", flush=True)
    one = None
    single = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    if args.one_thread:
        one, _ = run_braid(args.braid, model, args, single)
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--gemv-only", model],
            env=dict(os.environ, **single), capture_output=True, text=True,
            check=True)
        one_gemv_rate = float(done.stdout.split()[0])
    gemv_rate, gemv_bytes = gemv_reference(model)
    after = bandwidth(args.copy_mib, cores)
    print(f"load average {load_average()} at the end; OpenBLAS kernels: "
          f"{blas_core}")

    bw = {k: max(before[k], after[k]) for k in before}
    copy_key = max((k for k in bw if k.startswith("copy")), key=bw.get)
    copy = bw[copy_key]
    calls = runs[0]["calls"]
    if calls != args.new_tokens - 1:
        print(f"note: {calls} decode calls, not {args.new_tokens - 1} "
              f"(a sequence stopped early)")
    kv = kv_bytes_per_call(config, args.prompt_len, calls)
    weights = read * FLOAT_BYTES
    rates = sorted(r["rate"] for r in runs)
    best, median = rates[-1], statistics.median(rates)
    gb = 1e9

    print()
    print("memory bandwidth (numpy, %d MiB arrays, best of 5, before and "
          "after the runs):" % args.copy_mib)
    for k in sorted(k for k in bw if k.startswith("copy")):
        threads = k.split()[1]
        print(f"  copy loop, {threads} thread(s): {bw[k] / gb:7.2f} GB/s "
              f"(read + written; before {before[k] / gb:.2f}, after "
              f"{after[k] / gb:.2f})")
    print(f"  read only (sgemv, numpy's BLAS): {bw['read'] / gb:7.2f} GB/s")
    print(f"decode, batch 1, {calls} calls after a {args.prompt_len}-token "
          f"prompt, {args.repeats} runs:")
    print(f"  tokens/s: best {best:.2f}, median {median:.2f} "
          f"(all: {', '.join(f'{r:.2f}' for r in rates)})")
    print(f"  bytes read per token: weights {weights} + KV cache {kv:.0f} "
          f"(mean over the run) = {weights + kv:.0f}")
    for name, rate in (("best", best), ("median", median)):
        achieved = rate * (weights + kv)
        print(f"  {name:6s}: {achieved / gb:6.2f} GB/s achieved "
              f"(weights alone {rate * weights / gb:.2f}) = "
              f"{achieved / copy:6.1%} of the copy loop ({copy / gb:.2f} GB/s, "
              f"{copy_key.split()[1]} threads), "
              f"{achieved / bw['read']:6.1%} of the read-only figure")
    print(f"  the decode's matrix products alone as numpy sgemv: "
          f"{gemv_rate:.2f} tokens/s, {gemv_rate * gemv_bytes / gb:.2f} GB/s "
          f"({gemv_rate * gemv_bytes / copy:.1%} of the copy loop); braid's "
          f"best is {best / gemv_rate:.2f}x that")
    if one:
        one_bw = one["rate"] * (weights + kv)
        print(f"  1 thread: {one['rate']:.2f} tokens/s = {one_bw / gb:.2f} "
              f"GB/s = {one_bw / bw['copy 1']:.1%} of the 1-thread copy loop "
              f"({bw['copy 1'] / gb:.2f} GB/s); numpy sgemv on 1 thread: "
              f"{one_gemv_rate:.2f} tokens/s "
              f"({one_gemv_rate * gemv_bytes / bw['copy 1']:.1%}); "
              f"{cores} threads are {best / one['rate']:.2f}x the 1-thread run")
    ratio = best * (weights + kv) / copy
    print(f"target (decode >= 50 % of the copy loop): "
          f"{'met' if ratio >= 0.5 else 'not met'} ({ratio:.1%}, best run)")


if __name__ == "__main__":
    main()
