#!/usr/bin/env python3
"""bench/eval_gpu.sh's helper: the requests, PyTorch's scoring, the summary.

  eval_gpu.py requests --out DIR --items N --vocab V --seed S
      writes DIR/requests.jsonl: N MMLU-shaped items of random token ids,
      each a context of 400 to 700 tokens (a 5-shot MMLU prompt's length
      under LLaMA's tokenizer) followed by four one-token options, one
      request per option ({"context_ids", "continuation_ids"}: what
      braid-run --score and braid eval --log-samples read and write);
  eval_gpu.py torch --bench DIR/bench.json --requests DIR/requests.jsonl
      --out FILE [--batch B] [--warmup W]
      scores the requests with PyTorch as lm-evaluation-harness's Hugging
      Face backend does: each request whole (context + continuation less
      its last token), the longest first, B a forward (right-padded, a
      causal model so padding after a row changes nothing before it), the
      continuation's log-softmax gathered and summed; LlamaForCausalLM in
      bf16 (sdpa) where transformers is installed, else the same decoder
      (bench/torch_llama.py's); random weights. Writes requests/s (and the
      log-likelihoods) to FILE;
  eval_gpu.py summary --dir DIR
      Braid's requests/s (braid-run --score --stats: each item's context
      once, and each request whole) against PyTorch's.
"""

import argparse
import json
import os
import random
import re
import sys
import time


def cmd_requests(a):
    rng = random.Random(a.seed)
    with open(f"{a.out}/requests.jsonl", "w") as f:
        for _ in range(a.items):
            context = [rng.randrange(3, a.vocab) for _ in range(rng.randint(400, 700))]
            for option in rng.sample(range(3, a.vocab), 4):
                f.write(json.dumps({"context_ids": context,
                                    "continuation_ids": [option]}) + "\n")


def read_requests(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def own_model(torch, s):
    """bench/torch_llama.py's LLaMA decoder (Hugging Face's definition:
    RMSNorm, rotary embeddings, SwiGLU, no biases, untied output layer),
    logits of every position of a [B, T] batch."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_llama
    shape = argparse.Namespace(hidden=s["hidden"], ffn=s["ffn"],
                               heads=s["heads"], kv_heads=s["kv_heads"],
                               layers=s["layers"], vocab=s["vocab"], seq=2048)
    with torch.device("cuda"):
        model = torch_llama.Llama(shape)
    model = model.to(torch.bfloat16).eval()

    def forward(tokens):
        x = model.embed(tokens)
        t = tokens.shape[1]
        cos, sin = model.cos[:t].to(x.dtype), model.sin[:t].to(x.dtype)
        for layer in model.layers:
            x = layer(x, cos, sin)
        return model.head(model.norm(x))

    return forward, "bench/torch_llama.py's LLaMA decoder (sdpa, causal)"


def hf_model(torch, s):
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(
        vocab_size=s["vocab"], hidden_size=s["hidden"],
        intermediate_size=s["ffn"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
        max_position_embeddings=2048, rms_norm_eps=1e-5,
        tie_word_embeddings=False, attn_implementation="sdpa")
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16).eval()
    return (lambda ids: model(input_ids=ids).logits), \
        f"transformers {transformers.__version__} LlamaForCausalLM (sdpa)"


def cmd_torch(a):
    import torch
    if not torch.cuda.is_available():
        sys.exit("eval_gpu.py: PyTorch has no CUDA device")
    shape = json.load(open(a.bench))["shape"]
    requests = read_requests(a.requests)
    try:
        forward, what = hf_model(torch, shape)
    except ImportError:
        forward, what = own_model(torch, shape)
    # The harness's order: the longest first; its inputs: context +
    # continuation less the last token.
    order = sorted(range(len(requests)),
                   key=lambda i: -(len(requests[i]["context_ids"]) +
                                   len(requests[i]["continuation_ids"])))
    batches = [order[i:i + a.batch] for i in range(0, len(order), a.batch)]

    @torch.no_grad()
    def score(batch):
        rows = [requests[i]["context_ids"] + requests[i]["continuation_ids"]
                for i in batch]
        width = max(len(r) for r in rows) - 1
        ids = torch.zeros((len(rows), width), dtype=torch.long, device="cuda")
        for k, r in enumerate(rows):
            ids[k, :len(r) - 1] = torch.tensor(r[:-1], device="cuda")
        logp = torch.log_softmax(forward(ids).float(), dim=-1)
        out = []
        for k, i in enumerate(batch):
            ctx = len(requests[i]["context_ids"])
            cont = requests[i]["continuation_ids"]
            at = torch.arange(ctx - 1, ctx - 1 + len(cont), device="cuda")
            out.append(float(logp[k, at, torch.tensor(cont, device="cuda")].sum()))
        return out

    for _ in range(a.warmup):
        score(batches[0])
    torch.cuda.synchronize()
    began = time.perf_counter()
    logprobs = [0.0] * len(requests)
    for batch in batches:
        for i, lp in zip(batch, score(batch)):
            logprobs[i] = lp
    torch.cuda.synchronize()
    seconds = time.perf_counter() - began
    json.dump({"what": f"{what}, torch {torch.__version__}, batch {a.batch}",
               "requests": len(requests), "seconds": seconds,
               "requests_per_s": len(requests) / seconds,
               "logprobs": logprobs}, open(a.out, "w"))
    print(f"pytorch: {len(requests)} requests in {seconds:.3f} s, "
          f"{len(requests) / seconds:.1f} requests/s ({what})")


def braid_rate(path):
    """requests/s and seconds of braid-run --score --stats's line."""
    m = re.search(r"^stats: scored (\d+) requests \((\d+) tokens\) in "
                  r"([0-9.]+) s, ([0-9.]+) requests/s", open(path).read(), re.M)
    if not m:
        sys.exit(f"eval_gpu.py: no 'stats: scored' line in {path}")
    return float(m.group(4)), float(m.group(3))


def cmd_summary(a):
    d = a.dir
    torch = json.load(open(f"{d}/torch.json"))
    print(f"pytorch  {torch['requests_per_s']:10.1f} requests/s  ({torch['what']})")
    for name, what in (("shared", "each item's context once"),
                       ("whole", "each request whole, as PyTorch")):
        rate, seconds = braid_rate(f"{d}/{name}.err")
        print(f"braid    {rate:10.1f} requests/s  {rate / torch['requests_per_s']:6.2f}x "
              f"pytorch  ({what}; {seconds:.3f} s, CUDA graphs captured in it)")
    answered = sum(1 for _ in open(f"{d}/shared.out"))
    if answered != torch["requests"]:
        sys.exit(f"eval_gpu.py: braid-run answered {answered} of "
                 f"{torch['requests']} requests")
    print("target: braid >= 2x pytorch's requests/s")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("requests")
    r.add_argument("--out", required=True)
    r.add_argument("--items", type=int, default=128)
    r.add_argument("--vocab", type=int, required=True)
    r.add_argument("--seed", type=int, default=1)
    t = sub.add_parser("torch")
    t.add_argument("--bench", required=True)
    t.add_argument("--requests", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--warmup", type=int, default=2)
    s = sub.add_parser("summary")
    s.add_argument("--dir", required=True)
    a = p.parse_args()
    {"requests": cmd_requests, "torch": cmd_torch, "summary": cmd_summary}[a.cmd](a)


if __name__ == "__main__":
    main()
