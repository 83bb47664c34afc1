#!/usr/bin/env python3
"""Checks that TensorBoard reads a run's scalars: every tag at every step.

Loads DIR (the directory braid-run --tensorboard-dir wrote) with
TensorBoard's own EventAccumulator, keeping every scalar, and fails (exit 1)
with one line per problem unless each tag given has a finite value at every
step from --min-step to --steps. TensorBoard's reader checks both CRCs of
every record and stops at the first broken one, so a broken record shows as
missing steps. On success, prints one line and exits 0.

  tensorboard_check.py DIR --tags loss,lr --steps N [--min-step S] [--every K]

check() does the same for scripts that import this one.
"""

import argparse
import math
import os
import sys


def _ranges(steps):
    """'1-3, 7' for [1, 2, 3, 7]: missing steps, short."""
    out = []
    for s in sorted(steps):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def scalars(directory):
    """tag -> {step: value}, as TensorBoard reads `directory` (a step written
    twice keeps its last value, as TensorBoard shows it)."""
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(
        directory, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)}
            for tag in acc.Tags().get(event_accumulator.SCALARS, [])}


def check(directory, tags, last_step, first_step=1, every=1):
    """Returns (problems, summary): problems is a list of lines, empty when
    every tag has a finite scalar at every step first_step..last_step (with
    `every` > 1: at the multiples of it among them, and at last_step)."""
    if not os.path.isdir(directory):
        return [f"{directory} is not a directory"], ""
    files = sorted(f for f in os.listdir(directory) if "tfevents" in f)
    if not files:
        return [f"{directory} holds no events file (no name contains "
                "'tfevents')"], ""
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        return [f"cannot import TensorBoard's event reader ({e}); "
                "install it with: python3 -m pip install tensorboard"], ""
    acc = event_accumulator.EventAccumulator(
        directory, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    found = sorted(acc.Tags().get(event_accumulator.SCALARS, []))
    problems = []
    wanted = [s for s in range(first_step, last_step + 1)
              if s % every == 0 or s == last_step]
    for tag in tags:
        if tag not in found:
            problems.append(f"tag {tag!r}: no scalars (the scalar tags in "
                            f"{directory}: {', '.join(found) or 'none'})")
            continue
        # A step written twice (a resumed run's new file) keeps its last
        # value, as TensorBoard shows it.
        values = {e.step: e.value for e in acc.Scalars(tag)}
        missing = [s for s in wanted if s not in values]
        if missing:
            problems.append(f"tag {tag!r}: no value at step(s) "
                            f"{_ranges(missing)} of {first_step}..{last_step}")
        bad = [s for s in wanted if s in values and not math.isfinite(values[s])]
        if bad:
            problems.append(f"tag {tag!r}: non-finite value at step(s) "
                            f"{_ranges(bad)} (first: step {bad[0]} = "
                            f"{values[bad[0]]})")
    summary = (f"{directory}: {len(tags)} tag(s) ({', '.join(tags)}) finite "
               f"at every {'' if every == 1 else f'{every}th '}step "
               f"{first_step}..{last_step}, read by TensorBoard "
               f"from {len(files)} events file(s)")
    return problems, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="the directory of the events files")
    ap.add_argument("--tags", required=True,
                    help="comma-separated scalar tags that must be there")
    ap.add_argument("--steps", type=int, required=True,
                    help="the last step each tag must have")
    ap.add_argument("--min-step", type=int, default=1,
                    help="the first step each tag must have (default 1)")
    ap.add_argument("--every", type=int, default=1,
                    help="only the steps that are multiples of this, and the "
                         "last (default 1: every step)")
    args = ap.parse_args()
    tags = [t.strip() for t in args.tags.split(",") if t.strip()]
    if not tags:
        ap.error("--tags names no tag")
    if args.steps < args.min_step:
        ap.error(f"--steps {args.steps} is below --min-step {args.min_step}")
    if args.every < 1:
        ap.error(f"--every {args.every} is below 1")
    problems, summary = check(args.dir, tags, args.steps, args.min_step,
                              args.every)
    if problems:
        print(f"FAILED: TensorBoard's view of {args.dir}:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        sys.exit(1)
    print(summary)


if __name__ == "__main__":
    main()
