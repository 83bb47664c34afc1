#!/usr/bin/env python3
"""OpenBLAS's sgemm on a training step's matrix products, in a loop of its own.

Reads a plan's readable form (braidc --emit=plan-text), takes every LINEAR,
LINEAR_GRAD_INPUT and LINEAR_GRAD_WEIGHT of its micro-step function (times
the step's micro-batches) and calls cblas_sgemm with the shapes, transposes
and beta the CPU kernels give them (runtime/cpu/Kernels.cpp: linearForward,
linearBackward), on the BLAS library braid-run loads, with the thread count
and OPENBLAS_CORETYPE of the environment. Prints one JSON line: the products'
FLOPs and the best of --repeat timings of the whole set, in seconds per step.

  OMP_NUM_THREADS=2 OPENBLAS_CORETYPE=SkylakeX \\
    bench/sgemm_loop.py PLAN.txt --library LIBOPENBLAS [--repeat 3]
"""
import argparse
import ctypes
import json
import math
import re
import sys
import time

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def parse_plan(path):
    """The buffers' shapes, the functions' bodies and the micro-batch count."""
    buffers, functions, micro_batches = [], {}, 1
    section, current, body = None, None, None
    for line in open(path):
        if not line.startswith(" ") and line.strip().endswith("{"):
            section = line.split()[0]
            if section == "buffers":
                buffers.append([])
            elif section == "functions":
                current = None
            continue
        text = line.strip()
        if section == "buffers" and line.startswith("  shape:"):
            buffers[-1].append(int(text.split()[1]))
        elif section == "functions":
            if line.startswith("  name:"):
                current = text.split('"')[1]
                functions[current] = []
            elif line.startswith("  body {"):
                body = {"inputs": [], "outputs": [], "attrs": {}}
                functions[current].append(body)
            elif line.startswith("    kernel:"):
                body["kernel"] = text.split()[1]
            elif line.startswith("    inputs:"):
                body["inputs"].append(int(text.split()[1]))
            elif line.startswith("    outputs:"):
                body["outputs"].append(int(text.split()[1]))
            elif line.startswith("      key:"):
                body["_key"] = text.split('"')[1]
            elif line.startswith("      value:") and "_key" in body:
                body["attrs"][body.pop("_key")] = text.split()[1]
        elif section == "training" and line.startswith("  micro_batches:"):
            micro_batches = int(text.split()[1])
    return buffers, functions, micro_batches


def gemm_calls(buffers, bodies):
    """(transA, transB, m, n, k, beta) of each product, as the kernels call
    them (row-major, lda/ldb/ldc the rows' widths)."""
    calls = []
    for b in bodies:
        kind = b.get("kernel")
        if kind not in ("LINEAR", "LINEAR_GRAD_INPUT", "LINEAR_GRAD_WEIGHT"):
            continue
        tw = b["attrs"].get("transpose_w", "0") == "1"
        if kind == "LINEAR":  # y[rows, out] = x[rows, in] W
            x, y = buffers[b["inputs"][0]], buffers[b["outputs"][0]]
            rows, inp, out = math.prod(x[:-1]), x[-1], y[-1]
            calls.append((False, tw, rows, out, inp, 0.0))
        elif kind == "LINEAR_GRAD_INPUT":  # dx[rows, in] = dy[rows, out] W^T
            dy, dx = buffers[b["inputs"][0]], buffers[b["outputs"][0]]
            rows, out, inp = math.prod(dy[:-1]), dy[-1], dx[-1]
            calls.append((False, not tw, rows, inp, out, 0.0))
        else:  # dW += x^T dy
            x, dy = buffers[b["inputs"][0]], buffers[b["inputs"][1]]
            rows, inp, out = math.prod(x[:-1]), x[-1], dy[-1]
            if tw:
                calls.append((True, False, out, inp, rows, 1.0))
            else:
                calls.append((True, False, inp, out, rows, 1.0))
    return calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan_text")
    ap.add_argument("--library", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    buffers, functions, micro_batches = parse_plan(args.plan_text)
    calls = gemm_calls(buffers, functions.get("micro_step", []))
    if not calls:
        sys.exit(f"sgemm_loop: no LINEAR kernels in {args.plan_text}'s "
                 "micro_step")
    blas = ctypes.CDLL(args.library)
    blas.openblas_get_corename.restype = ctypes.c_char_p
    f32p = ctypes.POINTER(ctypes.c_float)
    rng = np.random.default_rng(0)
    operands = []
    for ta, tb, m, n, k, beta in calls:
        a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
        c = np.zeros((m, n), dtype=np.float32)
        operands.append((a, b, c))

    def run_all():
        for (ta, tb, m, n, k, beta), (a, b, c) in zip(calls, operands):
            blas.cblas_sgemm(
                ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS,
                m, n, k, ctypes.c_float(1.0), a.ctypes.data_as(f32p),
                a.shape[1], b.ctypes.data_as(f32p), b.shape[1],
                ctypes.c_float(beta), c.ctypes.data_as(f32p), n)

    run_all()  # warm-up: the library's buffers and threads
    best = math.inf
    for _ in range(args.repeat):
        start = time.perf_counter()
        run_all()
        best = min(best, time.perf_counter() - start)
    flops = sum(2.0 * m * n * k for _, _, m, n, k, _ in calls)
    print(json.dumps({
        "kernels": blas.openblas_get_corename().decode(),
        "products": len(calls) * micro_batches,
        "flops_per_step": flops * micro_batches,
        "seconds_per_step": best * micro_batches,
    }))


if __name__ == "__main__":
    main()
