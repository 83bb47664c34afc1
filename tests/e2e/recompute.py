#!/usr/bin/env python3
"""Recomputation: activation memory against Korthikanti et al. 2022, and
--recompute auto under memory budgets.

1. Activation bytes per layer. Korthikanti et al. ("Reducing Activation
   Recomputation in Large Transformer Models", 2022, section 4) count what a
   GPT layer keeps for backward, per micro-batch of b sequences of s tokens,
   hidden size h, a heads, t tensor-parallel ranks, with 2-byte activations
   and 1-byte dropout masks:

     no parallelism                sbh (34 + 5as/h)
     tensor + sequence parallel    sbh/t (34 + 5as/h)
     ... + selective recompute     34 sbh / t
     full recompute                2 sbh (2 sbh / t with sequence parallel)

   Their terms, with e bytes per activation element and 1 per mask element:
   attention 5e sbh + 1 sbh + (2e + 1) as^2 b, MLP 9e sbh + 1 sbh, the two
   layer norms 2e sbh; at e = 2 that is 34 sbh + 5 as^2 b. Braid trains in
   fp32 here (e = 4), so the bound is sbh (16e + 2) + as^2 b (2e + 1), over
   t with sequence parallelism, without the as^2 b term with selective
   recompute, and e sbh (over t) with full recompute. The compile report
   gives, per layer, the bytes Braid keeps (`recompute.layers[].
   activation_bytes`: the layer's input and the saved values it keeps); each
   must be at most the bound, and with full recompute equal to it.

2. --recompute auto: tiny-llama with 4 layers, alone and as a 2-stage
   pipeline. For budgets between what full recompute and no recompute need,
   the plan's measured peak (braid-run's count of the arena bytes the run
   touched, on every rank) is at most the budget, its recompute FLOPs (and,
   with the pipeline, its predicted step time) at most full recompute's, and
   its losses those of the run without recompute.

  recompute.py --bin BUILD/bin --work DIR --corpus TEXT
"""

import json
import os
import re
import sys

from harness import Setup, mpirun, run






MEMORY_LINE = re.compile(r"^memory: rank (\d+) \([^)]*\): predicted [^(]+ \((\d+) B\), "
                         r"touched [^(]+ \((\d+) B\)")


def main():
    setup = Setup()
    b, w = setup.b, setup.w

    def compile_job(name, text, *flags):
        job, plan, report = w(name + ".textproto"), w(name + ".plan"), w(name + ".json")
        with open(job, "w") as f:
            f.write(text)
        run([b("braidc"), job, "--emit=plan", "-o", plan, "--report", report, *flags])
        with open(report) as f:
            return plan, json.load(f)

    # 1. Activation bytes per layer against the paper's formulas.
    gpt = ('model { preset: "tiny-gpt2" hidden_dropout: 0.1 embedding_dropout: 0.1 }\n'
           "data { seq_length: 64 }\n")
    e, t = 4, 2
    failures = []
    print(f"{'layout':28s} {'layer':>5s} {'Braid B':>10s} {'paper B':>10s}")
    cases = [
        ("none", "parallel { micro_batch_size: 2 }", 1, "full-attention"),
        ("tp2-sp", 'parallel { micro_batch_size: 2 tp: 2 sp: true }', t, "full-attention"),
        ("tp2-sp-selective", 'parallel { micro_batch_size: 2 tp: 2 sp: true recompute: "selective" }',
         t, "selective"),
        ("full", 'parallel { micro_batch_size: 2 recompute: "full" }', 1, "full"),
        ("tp2-sp-full", 'parallel { micro_batch_size: 2 tp: 2 sp: true recompute: "full" }', t, "full"),
    ]
    for name, parallel, tp, kind in cases:
        _, report = compile_job("gpt-" + name, gpt + parallel + "\n")
        m, batch = report["model"], report["batch"]
        s, bsz, h, a = batch["seq_length"], batch["micro_batch_size"], m["hidden_size"], m["num_heads"]
        if kind == "full-attention":
            bound = (s * bsz * h * (16 * e + 2) + a * s * s * bsz * (2 * e + 1)) / tp
        elif kind == "selective":
            bound = s * bsz * h * (16 * e + 2) / tp
        else:
            bound = e * s * bsz * h / tp
        for layer in report["recompute"]["layers"]:
            got = layer["activation_bytes"]
            print(f"{name:28s} {layer['layer']:5d} {got:10d} {int(bound):10d}")
            if got > bound or (kind == "full" and got != bound):
                failures.append(f"{name} layer {layer['layer']}: {got} B against the paper's {bound:.0f} B")
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))

    # 2. --recompute auto under budgets.
    setup.dataset(100_000)
    llama = ('model { preset: "tiny-llama" num_layers: 4 hidden_dropout: 0.1 }\n'
             "train { steps: 3 lr: 3e-3 warmup_steps: 1 seed: 7 }\n"
             "data { seq_length: 32 }\n")
    layouts = [("serial", 1, "parallel { micro_batch_size: 2 }"),
               ("pp2", 2, "parallel { micro_batch_size: 1 pp: 2 global_batch_size: 4 }")]

    def train(name, ranks, plan):
        metrics = w(name + ".jsonl")
        cmd = [b("braid-run"), plan, "--data", w("data"), "--metrics-out", metrics]
        out = run((mpirun(ranks) if ranks > 1 else []) + cmd).stdout
        touched = {}
        for line in out.splitlines():
            hit = MEMORY_LINE.match(line)
            if hit:
                touched[int(hit.group(1))] = int(hit.group(3))
        if len(touched) != ranks:
            sys.exit(f"FAILED: {name}: braid-run printed memory for {len(touched)} of {ranks} ranks\n{out}")
        with open(metrics) as f:
            losses = [json.loads(l)["loss"] for l in f]
        return losses, touched

    def step_time(report):
        return report.get("pipeline", {}).get("predicted", {}).get("step_time")

    tried = 0
    for name, ranks, parallel in layouts:
        job = llama + parallel + "\n"
        none_plan, none_report = compile_job(f"{name}-none", job, "--recompute", "none")
        _, full_report = compile_job(f"{name}-full", job, "--recompute", "full")
        none_losses, _ = train(f"{name}-none", ranks, none_plan)
        search = None
        for fraction in (0.1, 0.35, 0.6, 0.85):
            full_bytes = max(st["rank_arena_bytes"] for st in full_report["pipeline"]["stages"]) \
                if "pipeline" in full_report else full_report["memory"]["arena_bytes"]
            none_bytes = max(st["rank_arena_bytes"] for st in none_report["pipeline"]["stages"]) \
                if "pipeline" in none_report else none_report["memory"]["arena_bytes"]
            budget = int(full_bytes + fraction * (none_bytes - full_bytes))
            tag = f"{name}-auto-{budget}"
            plan, report = compile_job(tag, job, "--recompute", "auto", "--memory-budget", str(budget))
            search = report["recompute"]["budget_search"]
            if (search["full_bytes"], search["none_bytes"]) != (full_bytes, none_bytes):
                sys.exit(f"FAILED: {tag}: the search measured full {search['full_bytes']} and "
                         f"none {search['none_bytes']}, the compiles {full_bytes} and {none_bytes}")
            losses, touched = train(tag, ranks, plan)
            flops = report["recompute"]["recompute_flops_per_step"]
            full_flops = full_report["recompute"]["recompute_flops_per_step"]
            choices = [l["choice"] for l in report["recompute"]["layers"]]
            print(f"{tag:28s} budget {budget:9d} touched {max(touched.values()):9d} "
                  f"recompute {flops:.3e} (full {full_flops:.3e}) "
                  f"step {step_time(report)} (full {step_time(full_report)}) {choices}")
            if max(touched.values()) > budget:
                sys.exit(f"FAILED: {tag}: touched {touched} bytes, over the budget {budget}")
            if flops > full_flops:
                sys.exit(f"FAILED: {tag}: recomputes {flops} FLOPs, more than full's {full_flops}")
            if step_time(report) is not None and step_time(report) > step_time(full_report):
                sys.exit(f"FAILED: {tag}: predicted step {step_time(report)} > full's {step_time(full_report)}")
            dl = max(abs(x - y) / abs(y) for x, y in zip(losses, none_losses))
            if dl > 1e-6:
                sys.exit(f"FAILED: {tag}: losses {losses} differ from no recompute's {none_losses}")
            tried += 1
    print(f"recompute: {tried} budgets fit, the activation bounds hold")


if __name__ == "__main__":
    main()
