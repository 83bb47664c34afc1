#!/usr/bin/env python3
"""--trace under mpirun: every rank's timeline in the one file rank 0 writes.

Trains tiny models for two steps under data parallelism (dp 2), a pipeline
(pp 2, 1F1B over 4 micro-batches) and both (pp 2 x dp 2) with
mpirun -np N braid-run --trace, and checks each trace with
tests/lit/tools/Inputs/check_trace.py: one process per rank named by its
coordinates, each rank's steps, calls and kernels, the collectives on the
thread "communication", and on the pipelines each stage's SENDs and RECVs.
The collectives started in backward (ZeRO-2's reduce-scatters, dp 2's
gradient all-reduces in its last micro-batch) run while backward kernels
do. The ranks' clocks start together (a barrier before the first step): the
last stage's first RECV cannot end before the first stage's first SEND
began (up to --skew-ms).

  trace.py --bin BUILD/bin --work DIR --corpus TEXT
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lit", "tools", "Inputs"))
import check_trace  # noqa: E402
from harness import Setup, mpirun, run  # noqa: E402






def main():
    setup = Setup(lambda ap: ap.add_argument("--skew-ms", type=float, default=20.0))
    args, b, w = setup.args, setup.b, setup.w
    setup.dataset(100_000)

    # (name, ranks, model fields, parallel fields, micro-batches per rank,
    # pipeline): global batch 4 throughout.
    layouts = [
        ("dp2", 2, 'preset: "tiny-llama"', "dp: 2 micro_batch_size: 1 global_batch_size: 4", 2, False),
        ("pp2", 2, 'preset: "tiny-llama" num_layers: 2',
         "pp: 2 micro_batch_size: 1 global_batch_size: 4", 4, True),
        ("pp2-dp2", 4, 'preset: "tiny-llama" num_layers: 2',
         "pp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4", 2, True),
        # ZeRO-1 with small buckets: each bucket's reduce-scatter starts in
        # the last micro-batch's backward when its last gradient is written.
        ("dp2-zero1", 2, 'preset: "tiny-llama"',
         "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 1", 2, False),
        # ZeRO-2 with small buckets: each bucket's reduce-scatter starts when
        # its last gradient is written and runs while backward goes on.
        ("dp2-zero2", 2, 'preset: "tiny-llama"',
         "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 2", 2, False),
        # ZeRO-3: each part's parameters are gathered while the part before
        # it computes.
        ("dp2-zero3", 2, 'preset: "tiny-llama"',
         "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3", 2, False),
    ]
    flags = {"dp2": ["--grad-bucket-bytes", "40000"],
             "dp2-zero1": ["--zero-bucket-bytes", "40000"],
             "dp2-zero2": ["--zero-bucket-bytes", "40000"],
             "dp2-zero3": ["--zero-bucket-bytes", "40000"]}
    for name, ranks, model, parallel, micro_batches, pipeline in layouts:
        job = w(f"{name}.textproto")
        with open(job, "w") as f:
            f.write(f"model {{ {model} }}\nparallel {{ {parallel} }}\n"
                    "train { steps: 10 lr: 3e-3 seed: 7 }\ndata { seq_length: 32 }\n")
        plan, trace = w(f"{name}.plan"), w(f"{name}.json")
        run([b("braidc"), job, "--emit=plan", "-o", plan, *flags.get(name, [])])
        if os.path.exists(trace):
            os.remove(trace)
        p = run(mpirun(ranks) + [b("braid-run"), plan, "--data", w("data"), "--steps", "2",
                                 "--trace", trace])
        if f"trace: {trace}" not in p.stdout:
            sys.exit(f"FAILED: {name}: no 'trace: {trace}' line in\n{p.stdout}")
        try:
            print(f"{name:8s} " + check_trace.check(trace, ranks, 2, micro_batches, pipeline))
        except check_trace.TraceError as e:
            sys.exit(f"FAILED: {name}: {trace}: {e}")

        with open(trace) as f:
            events = json.load(f)["traceEvents"]
        names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        if "zero3" in name:
            # Every rank: most parameter gathers (all but where two parts'
            # first uses are next to each other, or a part is its half's
            # first) contain compute kernels that ran while they were in
            # flight.
            for pid in names:
                spans = [e for e in events if e["pid"] == pid and e["ph"] == "X"]
                started = [e for e in spans if e["name"] == "ALL_GATHER" and
                           "one part ahead" in e["args"]["provenance"]]
                compute = [e for e in spans if e["tid"] == 2]
                overlapped = [g for g in started if any(
                    g["ts"] <= k["ts"] and k["ts"] + k["dur"] <= g["ts"] + g["dur"]
                    for k in compute)]
                print(f"{name:8s} rank {pid}: {len(overlapped)} of {len(started)} "
                      "parameter gathers overlap compute kernels")
                if not started or 2 * len(overlapped) < len(started):
                    sys.exit(f"FAILED: {name}: rank {pid}: {len(overlapped)} of "
                             f"{len(started)} parameter gathers overlap compute")
        # Collectives started in backward (traced from their start to their
        # completion) contain whole backward compute kernels that ran
        # meanwhile, on every rank. ZeRO-2's reduce-scatters, every
        # micro-batch: all but the last bucket's of each (nothing of the
        # backward is left after it). Without ZeRO, the gradients'
        # all-reduces in the last micro-batch of each step (traced per
        # gradient): at least half, since a small sum whose peer is ahead
        # may complete as it starts; so for ZeRO-1's reduce-scatters, in
        # the same place.
        overlaps = {"dp2-zero2": ("REDUCE_SCATTER", "overlapping the rest of backward",
                                  lambda n: n - 2 * micro_batches),
                    "dp2-zero1": ("REDUCE_SCATTER", "overlapping the rest of its backward",
                                  lambda n: (n + 1) // 2),
                    "dp2": ("ALL_REDUCE", "overlapping the rest of its backward",
                            lambda n: (n + 1) // 2)}
        if name in overlaps:
            kernel, marker, least = overlaps[name]
            for pid in names:
                spans = [e for e in events if e["pid"] == pid and e["ph"] == "X"]
                started = [e for e in spans if e["name"] == kernel and
                           marker in e["args"]["provenance"]]
                compute = [e for e in spans if e["tid"] == 2 and e["cat"] == "backward"]
                overlapped = [c for c in started if any(
                    c["ts"] <= k["ts"] and k["ts"] + k["dur"] <= c["ts"] + c["dur"]
                    for k in compute)]
                print(f"{name:8s} rank {pid}: {len(overlapped)} of {len(started)} "
                      f"{kernel} started in backward overlap backward kernels")
                if not started or len(overlapped) < least(len(started)):
                    sys.exit(f"FAILED: {name}: rank {pid}: {len(overlapped)} of "
                             f"{len(started)} {kernel} overlap backward compute")
        if pipeline:
            # Rank 0 is on the first stage, its peer on the second has the
            # same other coordinates.
            peer = [pid for pid, n in names.items() if n.endswith("(pp 1, dp 0, tp 0)")]
            if not names[0].endswith("(pp 0, dp 0, tp 0)") or len(peer) != 1:
                sys.exit(f"FAILED: {name}: process names {names}")
            first = lambda pid, kind: min((e for e in events if e["pid"] == pid and
                                           e["name"] == kind and e["ph"] == "X"),
                                          key=lambda e: e["ts"])
            send, recv = first(0, "SEND"), first(peer[0], "RECV")
            gap = (recv["ts"] + recv["dur"] - send["ts"]) / 1000
            print(f"{name:8s} stage 1's first RECV ends {gap:.3f} ms after stage 0's "
                  "first SEND begins")
            if gap < -args.skew_ms:
                sys.exit(f"FAILED: {name}: a RECV ends {-gap:.3f} ms before its SEND "
                         "begins: the ranks' clocks are not aligned")
    print("trace: 1 passed, 0 failed")


if __name__ == "__main__":
    main()
