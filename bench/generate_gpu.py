#!/usr/bin/env python3
"""The logic of bench/generate_gpu.sh: one GPU generating with a LLaMA-shaped
model in bf16, Braid (braid-run on an inference plan, CUDA graphs on)
against the GPU's memory bandwidth and against PyTorch in the same script.

  generate_gpu.py setup --out FILE.json SHAPE AND RUN FIELDS
      records what compile compiled (run reads it back).
  generate_gpu.py prompts --count N --length L --vocab V --seed S
      prints N prompts of L token ids, one comma-separated line each; the
      same seed gives the same prompts to braid-run and to PyTorch.
  generate_gpu.py bandwidth --out FILE.json [--gib G] [--repeats R]
      the baseline: a device-to-device copy of G GiB (torch.Tensor.copy_),
      timed with CUDA events, best of R; bytes read + bytes written over the
      copy's time.
  generate_gpu.py torch --bench FILE.json --out FILE.json [--impl auto|hf|own]
      PyTorch's greedy generation of the batch plan's shape: Hugging Face's
      LlamaForCausalLM.generate with a static cache compiled by
      torch.compile where transformers is installed (impl hf), else a LLaMA
      decoder written here with a preallocated KV cache, its decode step
      compiled with mode="reduce-overhead" (impl own). Random bf16 weights.
  generate_gpu.py summary --dir DIR [--emulated]
      reads braid-run's --stats lines and the files above and prints the
      figures and the targets.

Only `bandwidth` and `torch` import torch; the rest needs Python alone.
"""

import argparse
import json
import os
import random
import re
import statistics
import sys
import time

# braid-run --stats, one line per group of prompts (runtime/exec/
# GenerateCommand.cpp); numbers as C++ streams print doubles.
NUMBER = r"([0-9.]+(?:e[-+]?[0-9]+)?)"
STATS = re.compile(
    r"stats: (\d+) sequences; prefill (\d+) calls in " + NUMBER +
    r" s; decode (\d+) calls in " + NUMBER + r" s, " + NUMBER + r" calls/s")

# The targets.
DECODE_TARGET = 1.3   # batch 1: seconds per token / (weight bytes / bandwidth)
BATCH_TARGET = 1.5    # batch B: Braid tokens/s / PyTorch tokens/s


def prompt_ids(count, length, vocab, seed):
    """`count` prompts of `length` ids in [0, vocab), each row from its own
    generator seeded by (seed, row)."""
    return [[random.Random(seed * 1000003 + row).randrange(vocab)
             for _ in range(length)] for row in range(count)]


def cmd_setup(a):
    bench = {
        "tiny": bool(a.tiny),
        "seed": a.seed,
        "shape": {"layers": a.layers, "hidden": a.hidden, "heads": a.heads,
                  "kv_heads": a.kv_heads, "ffn": a.ffn, "vocab": a.vocab},
        "dtype_bytes": 2,
        "runs": {
            "b1": {"batch": 1, "prompt": a.b1_prompt, "new": a.b1_new,
                   "max_seq_len": a.b1_seq},
            "bn": {"batch": a.batch, "prompt": a.prompt, "new": a.new,
                   "max_seq_len": a.seq},
        },
    }
    with open(a.out, "w") as f:
        json.dump(bench, f, indent=1)
    return 0


def cmd_prompts(a):
    for row in prompt_ids(a.count, a.length, a.vocab, a.seed):
        print(",".join(map(str, row)))
    return 0


def need_cuda():
    import torch
    if not torch.cuda.is_available():
        sys.exit("generate_gpu.py: PyTorch sees no CUDA device")
    return torch


def cmd_bandwidth(a):
    torch = need_cuda()
    n = int(a.gib * (1 << 30))
    src = torch.ones(n, dtype=torch.uint8, device="cuda")
    dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
    for _ in range(2):
        dst.copy_(src)
    begin = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    seconds = []
    for _ in range(a.repeats):
        begin.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        seconds.append(begin.elapsed_time(end) / 1e3)
    moved = 2 * n  # each byte read once and written once
    best = min(seconds)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "bytes_copied": n,
        "repeats": a.repeats,
        "best_s": best,
        "median_s": statistics.median(seconds),
        "bytes_per_s": moved / best,
        "median_bytes_per_s": moved / statistics.median(seconds),
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"device: {result['device']} (torch {result['torch']})")
    print(f"device copy of {a.gib:g} GiB (torch copy_, CUDA events, read + "
          f"written bytes): best of {a.repeats} {moved / best / 1e9:.1f} GB/s"
          f", median {result['median_bytes_per_s'] / 1e9:.1f} GB/s")
    return 0


# --- PyTorch's generation --------------------------------------------------


def hf_generator(torch, shape, batch, prompt_len, new):
    """Hugging Face's LlamaForCausalLM with random weights in bf16 and a
    function generating greedily with a static cache under torch.compile,
    as Hugging Face documents it: where generate compiles the decode step
    itself (transformers with CompileConfig), through generation_config;
    before that, by compiling model.forward (mode "reduce-overhead",
    fullgraph). Returns (generate(ids) -> ids, description)."""
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"],
        intermediate_size=shape["ffn"], num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=max(2048, prompt_len + new),
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=None, pad_token_id=0, attn_implementation="sdpa")
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16).eval()
    gc = model.generation_config
    gc.cache_implementation = "static"
    gc.do_sample = False
    gc.num_beams = 1
    gc.eos_token_id = None  # no early end: every row makes `new` tokens
    gc.pad_token_id = 0
    gc.max_new_tokens = new
    try:
        from transformers import CompileConfig
    except ImportError:
        CompileConfig = None
    if CompileConfig is not None:
        gc.compile_config = CompileConfig(mode="reduce-overhead")
        how = "generate's own torch.compile (CompileConfig mode=reduce-overhead)"
    else:
        model.forward = torch.compile(model.forward, mode="reduce-overhead",
                                      fullgraph=True)
        how = "torch.compile(model.forward, mode=reduce-overhead, fullgraph)"

    def generate(ids):
        mask = torch.ones_like(ids)
        return model.generate(input_ids=ids, attention_mask=mask,
                              max_new_tokens=new, do_sample=False)

    what = (f"transformers {transformers.__version__} LlamaForCausalLM "
            f"(sdpa), generate with cache_implementation=static, {how}")
    return generate, what, model


def own_generator(torch, shape, batch, prompt_len, new):
    """A LLaMA decoder (RMSNorm, rotary embeddings, SwiGLU, no biases,
    untied output layer, Hugging Face's LLaMA definition) in bf16 with a
    KV cache preallocated for prompt_len + new positions, as Hugging Face's
    static cache: each call writes its keys and values at its positions
    (index_copy_) and attends to every position with a mask of those after
    it. The prefill is compiled for the prompt's shape, the one-token
    decode step with mode="reduce-overhead" (CUDA graphs), greedy argmax in
    the compiled step. Returns (generate(ids) -> ids, description)."""
    import torch.nn as nn
    import torch.nn.functional as F
    h, heads, kv = shape["hidden"], shape["heads"], shape["kv_heads"]
    hd = h // heads
    length = prompt_len + new
    version = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    gqa_in_sdpa = version >= (2, 5)

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h))

        def forward(self, x):
            x32 = x.float()
            y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)
            return self.weight * y.to(x.dtype)

    def rotate(x, cos, sin):
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = RMSNorm(), RMSNorm()
            self.q = nn.Linear(h, heads * hd, bias=False)
            self.k = nn.Linear(h, kv * hd, bias=False)
            self.v = nn.Linear(h, kv * hd, bias=False)
            self.o = nn.Linear(heads * hd, h, bias=False)
            self.gate = nn.Linear(h, shape["ffn"], bias=False)
            self.up = nn.Linear(h, shape["ffn"], bias=False)
            self.down = nn.Linear(shape["ffn"], h, bias=False)
            self.register_buffer("k_cache", torch.zeros(batch, kv, length, hd))
            self.register_buffer("v_cache", torch.zeros(batch, kv, length, hd))

        def forward(self, x, cos, sin, mask, pos):
            b, t, _ = x.shape
            y = self.norm1(x)
            q = self.q(y).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(y).view(b, t, kv, hd).transpose(1, 2)
            v = self.v(y).view(b, t, kv, hd).transpose(1, 2)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            self.k_cache.index_copy_(2, pos, k)
            self.v_cache.index_copy_(2, pos, v)
            keys, values = self.k_cache, self.v_cache
            if kv != heads and gqa_in_sdpa:
                a = F.scaled_dot_product_attention(q, keys, values,
                                                   attn_mask=mask,
                                                   enable_gqa=True)
            else:
                if kv != heads:
                    keys = keys.repeat_interleave(heads // kv, dim=1)
                    values = values.repeat_interleave(heads // kv, dim=1)
                a = F.scaled_dot_product_attention(q, keys, values,
                                                   attn_mask=mask)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, heads * hd))
            y = self.norm2(x)
            return x + self.down(F.silu(self.gate(y)) * self.up(y))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(shape["vocab"], h)
            self.layers = nn.ModuleList(Block() for _ in range(shape["layers"]))
            self.norm = RMSNorm()
            self.head = nn.Linear(h, shape["vocab"], bias=False)
            inv = 10000.0 ** (-torch.arange(0, hd, 2).float() / hd)
            angles = torch.outer(torch.arange(length).float(), inv)
            angles = torch.cat((angles, angles), dim=-1)
            self.register_buffer("cos", angles.cos())
            self.register_buffer("sin", angles.sin())
            self.register_buffer("key_positions", torch.arange(length))

        def forward(self, tokens, pos):
            """tokens [B, T] at positions pos [T]: the next id of each row
            after its last token, [B, 1]."""
            x = self.embed(tokens)
            cos = self.cos[pos].to(x.dtype)
            sin = self.sin[pos].to(x.dtype)
            mask = self.key_positions[None, :] <= pos[:, None]  # [T, S]
            for layer in self.layers:
                x = layer(x, cos, sin, mask, pos)
            logits = self.head(self.norm(x[:, -1:, :]))
            return logits.argmax(dim=-1)

    with torch.device("cuda"):
        model = Llama()
    model = model.to(torch.bfloat16).eval()
    if hasattr(torch, "_dynamo") and hasattr(torch._dynamo,
                                             "mark_static_address"):
        for layer in model.layers:
            torch._dynamo.mark_static_address(layer.k_cache)
            torch._dynamo.mark_static_address(layer.v_cache)

    def prefill_step(tokens, pos):
        return model(tokens, pos)

    def decode_step(tokens, pos):
        return model(tokens, pos)

    prefill = torch.compile(prefill_step, fullgraph=True, dynamic=False)
    decode = torch.compile(decode_step, mode="reduce-overhead", fullgraph=True,
                           dynamic=False)
    step_begin = getattr(getattr(torch, "compiler", None),
                         "cudagraph_mark_step_begin", None)

    @torch.no_grad()
    def generate(ids):
        pos = torch.arange(prompt_len, device="cuda")
        token = prefill(ids, pos)
        out = [ids, token]
        at = torch.tensor([prompt_len], device="cuda")
        for _ in range(new - 1):
            if step_begin is not None:
                step_begin()
            # The graph's output is overwritten by its next replay.
            token = decode(token, at).clone()
            out.append(token)
            at += 1
        return torch.cat(out, dim=1)

    what = (f"a LLaMA decoder written here (transformers not used), static KV "
            f"cache, torch.compile: prefill fullgraph, decode step "
            f"mode=reduce-overhead fullgraph; torch {torch.__version__}")
    return generate, what, model


def cmd_torch(a):
    if a.warmup < 1 or a.rounds < 1:
        sys.exit("generate_gpu.py: --warmup and --rounds must be at least 1")
    torch = need_cuda()
    with open(a.bench) as f:
        bench = json.load(f)
    shape, run = bench["shape"], bench["runs"]["bn"]
    batch, prompt_len, new = run["batch"], run["prompt"], run["new"]
    ids = torch.tensor(prompt_ids(batch, prompt_len, shape["vocab"],
                                  bench["seed"]), device="cuda")
    torch.manual_seed(0)
    impl = a.impl
    if impl == "auto":
        try:
            import transformers  # noqa: F401
            from transformers import LlamaForCausalLM  # noqa: F401
            impl = "hf"
        except ImportError:
            impl = "own"
    makers = {"hf": hf_generator, "own": own_generator}
    fell_back = None
    while True:
        try:
            generate, what, model = makers[impl](torch, shape, batch,
                                                 prompt_len, new)
            began = time.perf_counter()
            for _ in range(a.warmup):
                out = generate(ids)
            torch.cuda.synchronize()
            warm_s = time.perf_counter() - began
            break
        except Exception as e:  # a transformers version this cannot drive
            if impl != "hf" or a.impl == "hf":
                raise
            fell_back = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            print(f"pytorch: the transformers path failed ({fell_back}); "
                  f"the LLaMA written here instead", flush=True)
            model = generate = None
            torch.cuda.empty_cache()
            impl = "own"
    if tuple(out.shape) != (batch, prompt_len + new):
        sys.exit(f"generate_gpu.py: PyTorch made {tuple(out.shape)} ids, "
                 f"not ({batch}, {prompt_len + new})")
    graphs = breaks = None
    try:
        from torch._dynamo.utils import counters
        graphs = counters["stats"]["unique_graphs"]
        breaks = sum(counters["graph_break"].values())
    except Exception:
        pass
    seconds = []
    for _ in range(a.rounds):
        torch.cuda.synchronize()
        began = time.perf_counter()
        out = generate(ids)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - began)
    median = statistics.median(seconds)
    made = batch * new
    result = {
        "impl": impl, "what": what, "fell_back": fell_back,
        "batch": batch, "prompt": prompt_len, "new": new,
        "warmup_calls": a.warmup, "warmup_s": warm_s,
        "seconds": seconds, "median_s": median,
        "tokens_per_s": made / median, "best_tokens_per_s": made / min(seconds),
        "compiled_graphs": graphs, "graph_breaks": breaks,
        "parameters": sum(p.numel() for p in model.parameters()),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
        "device": torch.cuda.get_device_name(),
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"pytorch: {what}")
    print(f"pytorch: {result['parameters']} parameters; {a.warmup} warm-up "
          f"calls in {warm_s:.1f} s; dynamo graphs {graphs}, graph breaks "
          f"{breaks}; peak memory {result['peak_memory_bytes']} B")
    print(f"pytorch: batch {batch}, prompt {prompt_len}, {new} new tokens: "
          f"median {median:.4f} s over {a.rounds} calls "
          f"({', '.join(f'{s:.4f}' for s in seconds)}), "
          f"{made / median:.1f} tokens/s")
    return 0


# --- The summary -----------------------------------------------------------


def braid_rounds(directory, name, run, warmup):
    """The timed groups of braid-run's log `name` (the first `warmup` groups
    captured the graphs and are left out), after checking that every row
    came back with its prompt and `new` tokens."""
    with open(os.path.join(directory, name + ".err")) as f:
        stats = [m for m in map(STATS.search, f) if m]
    with open(os.path.join(directory, name + ".out")) as f:
        rows = [line.split() for line in f if line.strip()]
    want = run["prompt"] + run["new"]
    short = [len(r) for r in rows if len(r) != want]
    if short:
        sys.exit(f"generate_gpu.py: {name}: rows of {short[:4]} ids, not "
                 f"{run['prompt']} + {run['new']} (an end id, or a full cache?)")
    groups = [{"sequences": int(m[1]), "prefill_calls": int(m[2]),
               "prefill_s": float(m[3]), "decode_calls": int(m[4]),
               "decode_s": float(m[5])} for m in stats]
    if len(groups) <= warmup:
        sys.exit(f"generate_gpu.py: {name}: {len(groups)} --stats lines, "
                 f"not more than the {warmup} warm-up groups")
    for g in groups:
        if g["sequences"] != run["batch"] or g["decode_calls"] != run["new"] - 1:
            sys.exit(f"generate_gpu.py: {name}: a group of {g['sequences']} "
                     f"sequences with {g['decode_calls']} decode calls, not "
                     f"{run['batch']} with {run['new'] - 1}")
    return groups[warmup:]


def decode_bytes(bench, run, report):
    """The bytes a decode call reads at least, averaged over the run's decode
    calls: every weight once but the embedding table (one row per
    sequence: it is gathered), and each sequence's cached keys and values
    up to the call's position (ATTENTION_CACHED reads positions [0, p])."""
    s, d = bench["shape"], bench["dtype_bytes"]
    embed = s["vocab"] * s["hidden"] * d
    weights = report["parameter_bytes"] - embed + run["batch"] * s["hidden"] * d
    kv_cols = s["kv_heads"] * (s["hidden"] // s["heads"])
    per_position = 2 * s["layers"] * kv_cols * d * run["batch"]
    calls = run["new"] - 1
    positions = sum(run["prompt"] + k + 1 for k in range(calls)) / calls
    return weights + per_position * positions, weights


def cmd_summary(a):
    directory = a.dir
    with open(os.path.join(directory, "bench.json")) as f:
        bench = json.load(f)
    reports = {}
    for key in ("b1", "bn"):
        with open(os.path.join(directory, key + ".json")) as f:
            reports[key] = json.load(f)["generation"]
    bandwidth = torch_result = None
    if not a.emulated:
        with open(os.path.join(directory, "bandwidth.json")) as f:
            bandwidth = json.load(f)
        with open(os.path.join(directory, "torch.json")) as f:
            torch_result = json.load(f)
    where = "emulated CUDA on the CPU" if a.emulated else bandwidth["device"]
    s = bench["shape"]
    print(f"== summary ({where})")
    print(f"model: {s['layers']} layers, hidden {s['hidden']}, {s['heads']} "
          f"heads ({s['kv_heads']} kv), ffn {s['ffn']}, vocab {s['vocab']}, "
          f"bf16: {reports['b1']['parameter_bytes']} parameter bytes")
    if bandwidth:
        bw = bandwidth["bytes_per_s"]
        print(f"baseline bandwidth: device copy, best of "
              f"{bandwidth['repeats']}: {bw / 1e9:.1f} GB/s (read + written "
              f"bytes over the copy's time)")

    # Batch 1: decode.
    run, report = bench["runs"]["b1"], reports["b1"]
    timed = braid_rounds(directory, "b1", run, a.warmup)
    per_token = [g["decode_s"] / g["decode_calls"] for g in timed]
    t = statistics.median(per_token)
    read, weights = decode_bytes(bench, run, report)
    print(f"batch 1 (prompt {run['prompt']}, {run['new']} new tokens, "
          f"{len(timed)} timed runs after {a.warmup}): decode "
          f"{t * 1e3:.4f} ms a token (median; best {min(per_token) * 1e3:.4f})"
          f" = {1 / t:.1f} tokens/s; prefill "
          f"{statistics.median(g['prefill_s'] for g in timed) * 1e3:.3f} ms")
    verdicts = []
    if bandwidth:
        ideal = report["parameter_bytes"] / bw
        ratio = t / ideal
        met = ratio <= DECODE_TARGET
        verdicts.append(("batch-1 decode", met))
        print(f"  weight bytes / bandwidth = {report['parameter_bytes']} B / "
              f"{bw / 1e9:.1f} GB/s = {ideal * 1e3:.4f} ms; decode / that = "
              f"{ratio:.3f} (target <= {DECODE_TARGET}: "
              f"{'met' if met else 'not met'})")
        print(f"  bytes a decode call reads at least: {read:.0f} (weights "
              f"{weights}, the embedding's row only, and the cache to the "
              f"call's position, averaged) = {read / t / 1e9:.1f} GB/s, "
              f"{100 * read / t / bw:.1f} % of the copy")

    # Batch B: prefill + decode against PyTorch.
    run = bench["runs"]["bn"]
    timed = braid_rounds(directory, "bn", run, a.warmup)
    made = run["batch"] * run["new"]
    totals = [g["prefill_s"] + g["decode_s"] for g in timed]
    total = statistics.median(totals)
    mid = timed[totals.index(sorted(totals)[(len(totals) - 1) // 2])]
    print(f"batch {run['batch']} (prompts of {run['prompt']}, {run['new']} new "
          f"tokens each, {len(timed)} timed runs after {a.warmup}): braid "
          f"{made / total:.1f} tokens/s (median; best "
          f"{made / min(totals):.1f}): prefill {mid['prefill_s']:.4f} s "
          f"({mid['prefill_calls']} calls), decode {mid['decode_s']:.4f} s "
          f"({mid['decode_calls']} calls, "
          f"{mid['decode_calls'] / mid['decode_s']:.1f} calls/s)")
    if torch_result:
        ratio = (made / total) / torch_result["tokens_per_s"]
        met = ratio >= BATCH_TARGET
        verdicts.append((f"batch-{run['batch']} against PyTorch", met))
        print(f"  pytorch {torch_result['tokens_per_s']:.1f} tokens/s (median "
              f"of {len(torch_result['seconds'])} generate calls; "
              f"{torch_result['impl']}{', after the transformers path failed' if torch_result['fell_back'] else ''})")
        print(f"  braid / pytorch tokens/s: {ratio:.3f} (target >= "
              f"{BATCH_TARGET}: {'met' if met else 'not met'})")
    if a.emulated:
        print("unmeasured without a GPU: the HBM bandwidth (device copy), "
              "batch-1 decode time against weight bytes / bandwidth (target "
              f"<= {DECODE_TARGET}x), and batch {run['batch']} tokens/s "
              "against PyTorch's generate with a static cache and "
              f"torch.compile (target >= {BATCH_TARGET}x). The emulation's "
              "timings above are the CPU's, not a GPU's.")
    for name, met in verdicts:
        print(f"target {name}: {'met' if met else 'not met'}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--out", required=True)
    s.add_argument("--tiny", action="store_true")
    for name in ("layers", "hidden", "heads", "kv-heads", "ffn", "vocab",
                 "b1-prompt", "b1-new", "b1-seq", "batch", "prompt", "new",
                 "seq", "seed"):
        s.add_argument("--" + name, type=int, required=True)
    s = sub.add_parser("prompts")
    for name in ("count", "length", "vocab", "seed"):
        s.add_argument("--" + name, type=int, required=True)
    s = sub.add_parser("bandwidth")
    s.add_argument("--out", required=True)
    s.add_argument("--gib", type=float, default=4.0)
    s.add_argument("--repeats", type=int, default=10)
    s = sub.add_parser("torch")
    s.add_argument("--bench", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--impl", choices=["auto", "hf", "own"], default="auto")
    s.add_argument("--warmup", type=int, default=2)
    s.add_argument("--rounds", type=int, default=3)
    s = sub.add_parser("summary")
    s.add_argument("--dir", required=True)
    s.add_argument("--warmup", type=int, default=1)
    s.add_argument("--emulated", action="store_true")
    a = p.parse_args()
    return {"setup": cmd_setup, "prompts": cmd_prompts,
            "bandwidth": cmd_bandwidth, "torch": cmd_torch,
            "summary": cmd_summary}[a.command](a)


if __name__ == "__main__":
    sys.exit(main())
