#!/usr/bin/env python3
"""Checks a Chrome trace that braid-run --trace wrote.

  check_trace.py TRACE.json --ranks N --steps S --micro-batches M [--pipeline]

The file must be the JSON object form of Chrome's trace event format, with
one process per rank (named "rank R (pp p, dp d, tp t)"), the threads step,
calls, compute and communication, and for every rank: the steps "step 1" ..
"step S"; in each step the calls (zero_grads, "micro_step mb m" and update,
or with --pipeline "forward mb m" and "backward mb m" with their slot and
function, the stage's or its last backward's copy, "..._last"), each inside
its step; the kernels, each inside a call and in the
category of the part of the step it computes; the communication kernels on
their own thread (with --pipeline, SEND and RECV on every rank). Exits
non-zero with the first problem found. tests/e2e/trace.py imports check().
"""

import argparse
import collections
import json
import re
import sys

THREADS = {0: "step", 1: "calls", 2: "compute", 3: "communication"}
COMMUNICATION = {"ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "GRAD_NORM",
                 "SEND", "RECV", "WAIT_SENDS", "WAIT"}
# A call's category -> the categories of the kernels it may run.
KERNEL_CATEGORIES = {
    "zero_grads": {"zero_grads"},
    "micro_step": {"forward", "backward", "update"},
    "forward": {"forward"},
    "backward": {"backward"},
    "update": {"update"},
}
EPS = 0.002  # microseconds: times are written to the nanosecond


class TraceError(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise TraceError(message)


def inside(inner, outer):
    return (inner["ts"] >= outer["ts"] - EPS and
            inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + EPS)


def check(path, ranks, steps, micro_batches, pipeline=False):
    """Returns a summary line; raises TraceError."""
    with open(path) as f:
        trace = json.load(f)
    expect(isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list),
           "expected a JSON object with a list 'traceEvents'")
    expect(trace.get("displayTimeUnit") == "ms",
           f"displayTimeUnit is {trace.get('displayTimeUnit')!r}, expected 'ms'")
    events = trace["traceEvents"]
    by_pid = collections.defaultdict(list)
    for e in events:
        expect(e.get("ph") in ("M", "X"), f"event of phase {e.get('ph')!r}: {e}")
        expect(isinstance(e.get("pid"), int), f"event without a pid: {e}")
        by_pid[e["pid"]].append(e)
    expect(sorted(by_pid) == list(range(ranks)),
           f"processes {sorted(by_pid)}, expected ranks 0..{ranks - 1}")
    categories = collections.Counter()
    for pid, mine in by_pid.items():
        meta = [e for e in mine if e["ph"] == "M"]
        names = [e["args"]["name"] for e in meta if e["name"] == "process_name"]
        expect(len(names) == 1 and
               re.fullmatch(rf"rank {pid} \(pp \d+, dp \d+, tp \d+(, \w+ \d+)*\)", names[0]),
               f"rank {pid}'s process names: {names}")
        threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
        expect(threads == THREADS, f"rank {pid}'s threads: {threads}")
        spans = [e for e in mine if e["ph"] == "X"]
        for e in spans:
            expect(isinstance(e.get("name"), str) and isinstance(e.get("cat"), str) and
                   isinstance(e.get("args"), dict) and e.get("tid") in THREADS,
                   f"rank {pid}: a malformed event: {e}")
            expect(e["ts"] >= 0 and e["dur"] >= 0, f"rank {pid}: a negative time: {e}")
            categories[e["cat"]] += 1
        thread = lambda tid: sorted((e for e in spans if e["tid"] == tid),
                                    key=lambda e: e["ts"])
        step_events, calls, compute, communication = (thread(t) for t in range(4))

        # The steps, in order, each with its loss.
        expect([e["name"] for e in step_events] == [f"step {s}" for s in range(1, steps + 1)],
               f"rank {pid}'s steps: {[e['name'] for e in step_events]}")
        for s, e in enumerate(step_events, 1):
            expect(e["cat"] == "step" and e["args"].get("step") == s and
                   isinstance(e["args"].get("loss"), (int, float)),
                   f"rank {pid}: step event {e}")

        # The calls of each step.
        functions = [e for e in calls if e["cat"] != "data"]
        for e in functions:
            expect(e["cat"] in KERNEL_CATEGORIES, f"rank {pid}: a call of category {e['cat']}: {e}")
            expect(isinstance(e["args"].get("function"), str),
                   f"rank {pid}: a call without its function: {e}")
        for s, step in enumerate(step_events, 1):
            mine_calls = [e for e in functions if inside(e, step)]
            names = collections.Counter(e["name"] for e in mine_calls)
            if pipeline:
                for m in range(micro_batches):
                    for kind in ("forward", "backward"):
                        call = [e for e in mine_calls if e["name"] == f"{kind} mb {m}"]
                        expect(len(call) == 1, f"rank {pid}, step {s}: {len(call)} '{kind} mb {m}'")
                        args = call[0]["args"]
                        expect(call[0]["cat"] == kind and args.get("micro_batch") == m and
                               isinstance(args.get("slot"), int) and
                               # the chunk's function, or the copy of it
                               # the last backward runs (its gradients' sums)
                               args["function"].endswith((f"_{kind}", f"_{kind}_last")),
                               f"rank {pid}, step {s}: {call[0]}")
            else:
                want = {"zero_grads": 1, "update": 1}
                want.update({f"micro_step mb {m}": 1 for m in range(micro_batches)})
                expect(names == collections.Counter(want),
                       f"rank {pid}, step {s}: calls {dict(names)}, expected {want}")
            expect(len(mine_calls) == sum(1 for e in functions
                                          if e["ts"] >= step["ts"] - EPS and
                                          e["ts"] <= step["ts"] + step["dur"]),
                   f"rank {pid}, step {s}: a call overlaps the step's end")

        # Every kernel inside a call, in a category that call computes.
        expect(compute, f"rank {pid}: no compute kernels")
        seen = set()
        for kernel in compute + communication:
            if kernel["tid"] == 2:
                expect(re.fullmatch(r"[A-Z_]+", kernel["name"]) and
                       kernel["name"] not in COMMUNICATION - {"GRAD_NORM"},
                       f"rank {pid}: compute event {kernel}")
            else:
                expect(kernel["name"] in COMMUNICATION and kernel["cat"] == "communication",
                       f"rank {pid}: communication event {kernel}")
            expect(isinstance(kernel["args"].get("provenance"), str),
                   f"rank {pid}: a kernel without its provenance: {kernel}")
            if kernel["args"]["provenance"].startswith("braid-run:"):
                continue  # the trainer's own (the loss's all-reduce, the wait for sends)
            owner = [c for c in functions if inside(kernel, c)]
            expect(len(owner) == 1, f"rank {pid}: kernel {kernel} is inside {len(owner)} calls")
            if kernel["tid"] == 2:
                expect(kernel["cat"] in KERNEL_CATEGORIES[owner[0]["cat"]],
                       f"rank {pid}: a {kernel['cat']} kernel in a {owner[0]['cat']} call: {kernel}")
                seen.add(kernel["cat"])
            else:
                expect(kernel["args"].get("phase") in KERNEL_CATEGORIES[owner[0]["cat"]],
                       f"rank {pid}: communication in a {owner[0]['cat']} call: {kernel}")
        expect({"forward", "backward", "update", "zero_grads"} <= seen,
               f"rank {pid}: kernels only of {sorted(seen)}")
        if pipeline:
            kinds = {e["name"] for e in communication}
            expect({"SEND", "RECV"} <= kinds, f"rank {pid}: communication {sorted(kinds)}")
            for e in communication:
                if e["name"] in ("SEND", "RECV"):
                    expect(e["args"].get("axis") == "pp" and e["args"].get("peer") in (-1, 1),
                           f"rank {pid}: {e}")
        elif ranks > 1:
            expect(communication, f"rank {pid}: no communication")
    return (f"{path}: {len(events)} events of {ranks} ranks, " +
            ", ".join(f"{n} {c}" for c, n in sorted(categories.items())))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--micro-batches", type=int, required=True)
    ap.add_argument("--pipeline", action="store_true")
    args = ap.parse_args()
    try:
        print(check(args.trace, args.ranks, args.steps, args.micro_batches, args.pipeline))
    except TraceError as e:
        sys.exit(f"check_trace.py: {args.trace}: {e}")


if __name__ == "__main__":
    main()
