#!/usr/bin/env python3
"""The PyTorch baseline of bench/gpu_train.sh: one GPU trains a LLaMA-style
model with the given shape on random tokens and prints the median seconds
per step over the timed steps (CUDA events around each step) and tokens/s.

The model is Hugging Face's LlamaForCausalLM when `transformers` is
installed, else the same architecture written here (RMSNorm, rotary
embeddings, SwiGLU, no biases, untied head); attention is PyTorch's SDPA
(flash attention), the optimizer fused AdamW, and the model compiled with
torch.compile. --precision autocast (the default) keeps fp32 weights and
computes in bf16 under autocast, as Braid's mixed precision keeps f32 master
weights; --precision bf16 trains bf16 weights directly. Out of GPU memory,
it exits with status 3 (bench/gpu_train.sh then tries a smaller batch).
"""
import argparse
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        h, f = a.hidden, a.ffn
        self.heads, self.kv = a.heads, a.kv_heads
        self.hd = h // a.heads
        self.norm1 = RMSNorm(h, 1e-5)
        self.q = nn.Linear(h, a.heads * self.hd, bias=False)
        self.k = nn.Linear(h, a.kv_heads * self.hd, bias=False)
        self.v = nn.Linear(h, a.kv_heads * self.hd, bias=False)
        self.o = nn.Linear(h, h, bias=False)
        self.norm2 = RMSNorm(h, 1e-5)
        self.gate = nn.Linear(h, f, bias=False)
        self.up = nn.Linear(h, f, bias=False)
        self.down = nn.Linear(f, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        y = self.norm1(x)
        q = self.q(y).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        if self.kv != self.heads:
            k = k.repeat_interleave(self.heads // self.kv, dim=1)
            v = v.repeat_interleave(self.heads // self.kv, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, 1e-5)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)
        hd = a.hidden // a.heads
        inv = 10000.0 ** (-torch.arange(0, hd, 2).float() / hd)
        angles = torch.outer(torch.arange(a.seq).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                               targets.view(-1))


def build(a):
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return Llama(a), "own LLaMA implementation (transformers not installed)"
    config = LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
        num_hidden_layers=a.layers, num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads, max_position_embeddings=a.seq,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
        attn_implementation="sdpa")
    model = LlamaForCausalLM(config)

    class Wrapped(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, tokens, targets):
            return self.m(input_ids=tokens, labels=targets).loss

    return Wrapped(model), "transformers LlamaForCausalLM (sdpa)"


def run(a, step_fn, opt, tokens, targets, seconds):
    """Runs a.warmup + a.steps training steps, appending the seconds of each
    timed one (CUDA events around it) to `seconds`; returns the last loss."""
    begin = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for k in range(a.warmup + a.steps):
        begin.record()
        with torch.autocast("cuda", dtype=torch.bfloat16,
                            enabled=a.precision == "autocast"):
            loss = step_fn(tokens, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        if k >= a.warmup:
            seconds.append(begin.elapsed_time(end) / 1e3)
    return loss


def main():
    p = argparse.ArgumentParser(description=__doc__)
    for name, default in [("layers", 16), ("hidden", 2048), ("heads", 16),
                          ("kv-heads", 16), ("ffn", 5632), ("vocab", 32000),
                          ("seq", 2048), ("micro-batch", 1), ("steps", 20),
                          ("warmup", 5)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--precision", choices=["autocast", "bf16"],
                   default="autocast")
    p.add_argument("--no-compile", action="store_true")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_llama.py: no CUDA device")
    torch.manual_seed(0)
    model, what = build(a)
    model = model.cuda()
    if a.precision == "bf16":
        model = model.to(torch.bfloat16)
    params = sum(x.numel() for x in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step_fn = model if a.no_compile else torch.compile(model)
    tokens = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device="cuda")
    targets = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device="cuda")
    seconds = []
    try:
        loss = run(a, step_fn, opt, tokens, targets, seconds)
    except Exception as e:  # torch.compile wraps what the step raised
        if not (isinstance(e, torch.cuda.OutOfMemoryError) or
                "out of memory" in str(e).lower()):
            raise
        print(f"torch_llama.py: out of memory at micro-batch {a.micro_batch}: "
              f"{e}", file=sys.stderr)
        sys.exit(3)
    median = statistics.median(seconds)
    tokens_per_step = a.micro_batch * a.seq
    print(f"model: {what}, {params} parameters, precision {a.precision}, "
          f"compiled {not a.no_compile}")
    print(f"median step: {median:.6f} s over {len(seconds)} steps, "
          f"{tokens_per_step} tokens per step, "
          f"{tokens_per_step / median:.1f} tokens/s, "
          f"last loss {loss.item():.5f}, peak memory "
          f"{torch.cuda.max_memory_allocated()} B")


if __name__ == "__main__":
    main()
