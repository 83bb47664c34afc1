#!/usr/bin/env python3
"""The memory the compiler predicts is the memory the run uses, per rank;
persistent bytes per parameter against the closed form for each ZeRO stage.

Compiles tiny models in several parallel layouts (braidc --report) and runs
each for a few steps (mpirun -np N braid-run). braid-run allocates each
rank's arena untouched (an anonymous mapping: the kernel hands out a page
when it is first used) and, at the end, rank 0 prints every rank's arena:
the bytes it allocated and the bytes the run touched, which the operating
system counts (mincore), independently of the plan's offsets. For every
rank the test checks that

  - what braid-run allocated is what the compile report predicts for the
    rank (`pipeline.stages[].rank_arena_bytes` of its stage, or
    `memory.arena_bytes` without a pipeline), and
  - the run touched that many bytes, within --rtol (a page's rounding aside,
    a planned buffer that is never used, or padding, shows up here),

and that the metrics' predicted_mem_bytes and peak_mem_bytes are the largest
rank's. Prints a table of every rank.

  memory.py --bin BUILD/bin --work DIR --corpus TEXT [--steps N] [--rtol R]
"""

import json
import os
import re
import sys

from harness import Setup, mpirun, run






# "memory: rank 1 (pp 1, dp 0, tp 0): predicted 1.18 MiB (1234567 B), touched
# 1.18 MiB (1234000 B) (99.95 %)"
MEMORY_LINE = re.compile(
    r"^memory: rank (\d+) \(([^)]*)\): predicted [^(]+ \((\d+) B\), touched [^(]+ \((\d+) B\)")


def predicted_by_report(report, coords):
    """The arena the compile report gives the rank at `coords`."""
    stages = report.get("pipeline", {}).get("stages", [])
    if not stages:
        return report["memory"]["arena_bytes"]
    # With virtual stages a rank has one entry per chunk, all of its arena.
    arenas = {s["rank_arena_bytes"] for s in stages if s["stage"] == coords.get("pp", 0)}
    if len(arenas) != 1:
        sys.exit(f"FAILED: the report gives stage {coords.get('pp', 0)} the arenas {arenas}")
    return arenas.pop()


def main():
    def options(ap):
        ap.add_argument("--steps", type=int, default=3)
        ap.add_argument("--rtol", type=float, default=0.01)
    setup = Setup(options)
    args, b, w = setup.args, setup.b, setup.w
    # 100 KB of real text, bytes as tokens.
    setup.dataset(100_000)

    # (name, mpirun ranks, parallel fields[, model fields]): global batch 4
    # throughout. The interleaved schedule (vpp) cuts the layers into pp x vpp
    # model stages of equal layers: 8 layers, as in parity.py.
    layouts = [
        ("serial", 1, "micro_batch_size: 4"),
        ("tp2", 2, "tp: 2 micro_batch_size: 4"),
        ("tp2-sp", 2, "tp: 2 sp: true micro_batch_size: 4"),
        ("dp2", 2, "dp: 2 micro_batch_size: 2"),
        ("pp2-1f1b", 2, "pp: 2 micro_batch_size: 1 global_batch_size: 4"),
        ("pp2-zbh1", 2, 'pp: 2 micro_batch_size: 1 global_batch_size: 4 schedule: "zb-h1"'),
        ("tp2-pp2", 4, "tp: 2 pp: 2 micro_batch_size: 1 global_batch_size: 4"),
        ("selective", 1, 'micro_batch_size: 4 recompute: "selective"'),
        ("tp2-sp-full", 2, 'tp: 2 sp: true micro_batch_size: 4 recompute: "full"'),
        ("pp2-full", 2, 'pp: 2 micro_batch_size: 1 global_batch_size: 4 recompute: "full"'),
        # Between full recompute's and none's arena for both models here.
        ("auto", 1, 'micro_batch_size: 4 recompute: "auto" memory_budget_bytes: 3700000'),
        ("pp2-vpp2", 2, "pp: 2 vpp: 2 micro_batch_size: 1 global_batch_size: 4",
         "num_layers: 8"),
        ("pp4-vpp2", 4, "pp: 4 vpp: 2 micro_batch_size: 1 global_batch_size: 4",
         "num_layers: 8"),
        ("pp2-vpp2-dp2-zero3", 4,
         "pp: 2 vpp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3",
         "num_layers: 8"),
        ("dp2-zero1", 2, "dp: 2 micro_batch_size: 2 zero: 1"),
        ("dp4-zero1", 4, "dp: 4 micro_batch_size: 1 zero: 1"),
        ("tp2-pp2-dp2-zero1", 8,
         "tp: 2 pp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 1"),
        ("dp2-zero2", 2, "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 2"),
        ("dp4-zero2", 4, "dp: 4 micro_batch_size: 1 zero: 2"),
        ("tp2-pp2-dp2-zero2", 8,
         "tp: 2 pp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 2"),
        ("dp2-zero3", 2, "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
        ("dp4-zero3", 4, "dp: 4 micro_batch_size: 1 zero: 3"),
        ("tp2-pp2-dp2-zero3", 8,
         "tp: 2 pp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
        # The fused gate/up projection (SwiGLU models only).
        ("tp2-sp-fuse-mlp", 2, "tp: 2 sp: true micro_batch_size: 4", "fuse_mlp: true"),
    ]
    rows, failures, closed = [], [], []
    for model in ("tiny-llama", "tiny-gpt2"):
        for name, ranks, parallel, *model_fields in layouts:
            if model == "tiny-gpt2" and "fuse_mlp: true" in model_fields:
                continue  # a GeLU MLP: nothing to fuse
            tag = f"{model}-{name}"
            job = w(f"{tag}.textproto")
            with open(job, "w") as f:
                f.write(f'model {{ preset: "{model}" {" ".join(model_fields)}}}\n'
                        f"parallel {{ {parallel} }}\n"
                        f"train {{ steps: {args.steps} lr: 3e-3 seed: 7 }}\n"
                        f"data {{ seq_length: 32 }}\n")
            plan, report, metrics = w(f"{tag}.plan"), w(f"{tag}.json"), w(f"{tag}.jsonl")
            run([b("braidc"), job, "--emit=plan", "-o", plan, f"--report={report}"])
            with open(report) as f:
                report = json.load(f)
            # Persistent bytes per fp32 parameter with Adam, d = dp: params 4,
            # gradients 4, moments 8; ZeRO-1 shards the moments over d
            # (8 + 8/d), ZeRO-2 the gradients too (4 + 12/d), ZeRO-3 the
            # parameters too (16/d). Buckets pad to a multiple of 16 d
            # elements: at most 1 % here.
            d = int(re.search(r"dp: (\d+)", parallel).group(1)) if "dp:" in parallel else 1
            zero = int(re.search(r"zero: (\d)", parallel).group(1)) if "zero:" in parallel else 0
            for entry in report["memory"]["persistent_by_rank"]:
                got = entry["persistent_bytes_per_parameter"]
                want = {0: 16, 1: 8 + 8 / d, 2: 4 + 12 / d, 3: 16 / d}[zero]
                if zero >= 2:
                    # A gradient another stage adds to in update (a tied
                    # embedding's) stays whole until then, with its
                    # parameter as under ZeRO-1: 8 + 8/d in all.
                    whole = entry["parameters_with_whole_gradients"] / entry["parameters"]
                    want += (8 + 8 / d - want) * whole
                if entry["parameters_updated_elsewhere"]:
                    # A tied embedding's copy on the last stage: its
                    # parameter and gradient, the moments on the first stage.
                    continue
                closed.append((tag, entry["pipeline_rank"], got, want))
                if not want <= got <= want * 1.01:
                    failures.append(f"{tag} pipeline rank {entry['pipeline_rank']}: "
                                    f"{got:.4f} persistent bytes per parameter, "
                                    f"the closed form gives {want:.4f}")
            cmd = [b("braid-run"), plan, "--data", w("data"), "--metrics-out", metrics,
                   "--log-every", "1000"]
            out = run((mpirun(ranks) if ranks > 1 else []) + cmd).stdout
            seen = {}
            for line in out.splitlines():
                m = MEMORY_LINE.match(line)
                if m:
                    coords = {k: int(v) for k, v in
                              (part.split() for part in m.group(2).split(", "))}
                    seen[int(m.group(1))] = (m.group(2), coords, int(m.group(3)), int(m.group(4)))
            if sorted(seen) != list(range(ranks)):
                sys.exit(f"FAILED: {tag}: braid-run printed the memory of ranks "
                         f"{sorted(seen)}, expected 0 to {ranks - 1}\n{out}")
            for rank in range(ranks):
                where, coords, predicted, touched = seen[rank]
                compiled = predicted_by_report(report, coords)
                # The breakdown's rank arena is the same, its parts
                # non-negative.
                part = [e for e in report["memory"]["persistent_by_rank"]
                        if e["pipeline_rank"] == coords.get("pp", 0)]
                if (len(part) != 1 or part[0]["arena_bytes"] != predicted or
                        part[0]["temporary_peak_bytes"] < 0 or
                        part[0]["other_whole_run_bytes"] < 0):
                    failures.append(f"{tag} rank {rank}: the report's breakdown "
                                    f"{part} does not part the {predicted}-byte arena")
                ratio = touched / predicted if predicted else float("nan")
                rows.append((tag, rank, where, compiled, predicted, touched, ratio))
                if predicted != compiled:
                    failures.append(f"{tag} rank {rank}: braid-run allocated {predicted} B "
                                    f"but the compile report predicts {compiled} B")
                if not abs(touched - predicted) <= args.rtol * predicted:
                    failures.append(f"{tag} rank {rank} ({where}): predicted {predicted} B, "
                                    f"touched {touched} B ({100 * ratio:.2f} %), "
                                    f"outside {100 * args.rtol:g} %")
            records = [json.loads(l) for l in open(metrics)]
            if len(records) != args.steps:
                sys.exit(f"FAILED: {tag}: {len(records)} metrics records, expected {args.steps}")
            last = records[-1]
            most_predicted = max(v[2] for v in seen.values())
            most_touched = max(v[3] for v in seen.values())
            if (last["predicted_mem_bytes"] != most_predicted
                    or last["peak_mem_bytes"] != most_touched):
                failures.append(
                    f"{tag}: the metrics say predicted_mem_bytes {last['predicted_mem_bytes']}, "
                    f"peak_mem_bytes {last['peak_mem_bytes']}; the largest rank's are "
                    f"{most_predicted} and {most_touched}")

    print(f"{'layout':22s} {'rank':>4s}  {'coordinates':22s} {'report B':>10s} "
          f"{'predicted B':>11s} {'touched B':>10s} {'touched':>8s}")
    for tag, rank, where, compiled, predicted, touched, ratio in rows:
        print(f"{tag:22s} {rank:4d}  {where:22s} {compiled:10d} {predicted:11d} "
              f"{touched:10d} {100 * ratio:7.2f}%")
    print(f"{'layout':22s} {'pp rank':>7s} {'bytes/param':>11s} {'closed form':>11s}")
    for tag, rank, got, want in closed:
        print(f"{tag:22s} {rank:7d} {got:11.4f} {want:11.4f}")
    if failures:
        sys.exit("FAILED:\n  " + "\n  ".join(failures))
    print(f"memory: {len(rows)} ranks of {len({r[0] for r in rows})} runs touched "
          f"their predicted arena within {100 * args.rtol:g} %")


if __name__ == "__main__":
    main()
