#!/usr/bin/env python3
"""Parallel runs against the serial run: the central test of Braid.

Trains tiny models for a few steps serially and under each parallel layout
(mpirun -np N braid-run), on the same samples, and checks that every step's
loss is within --loss-rtol of the serial run's and every final parameter
within --param-rtol (relative to the tensor's largest magnitude). Prints the
largest differences seen.

Validation: every run holds out documents (data.split 90,5,5) and evaluates
every 10 steps. With dropout, each layout then evaluates the serial run's
final checkpoint (braid-run --load, nothing left to train): its validation
and test losses must be the serial run's to --eval-rtol, the weights being
the same; and the serial plan of the model without dropout, given the same
checkpoint, must find the same losses (evaluation runs without dropout). Also checks the errors of a job whose world size
does not match the plan and of a rank that dies mid-run.

Instruction data (data.instruction, instruction_runs): conversations with a
loss mask, one per sample, the loss per counted token over the global batch;
and LoRA (the job's lora section) on them: the serial LoRA run starts at
the base model's loss and leaves the frozen weights as imported, and its
layouts (accumulation, dp with ZeRO-3, pp with dp, interleaved pp, tp, tp
with sp and dp) train what it trains.
LLaMA and GPT-2 models imported from random Hugging Face weights train
under accumulation, dp with ZeRO, tp with sp and pipelines (with dp, and
interleaved) against their serial run; and the serial run's first loss and
last validation loss are checked against a float64 reference of the model
(hf_reference) on the conversations rendered from the records by their
definition (instruction_reference), not read from Braid's files.

Packed conversations (data.pack, packed_runs): pairs of conversations made
to fill a sample of 121 tokens (or to leave 1-2 tokens of padding) and to
be packed by best-fit decreasing into exactly the pairs, in file order, so
a packed run of global batch 2 reads the conversations a padded run of
global batch 4 reads, step by step: every layout of the packed run must
train what the padded serial run trains (positions restarting per
conversation, attention inside each).

  parity.py --bin BUILD/bin --work DIR --corpus TEXT [--steps N]
"""

import json
import re
import math
import os
import shutil
import signal
import subprocess
import sys
import time

from harness import Setup, mpirun, read_safetensors, run

import numpy as np


def noise_only(name, values):
    """The element range of a parameter whose gradient is zero in exact
    arithmetic, or None. GPT-2's key bias (the middle third of c_attn.bias)
    adds q.b_k to every score of a query, a shift softmax ignores: its float
    gradient is round-off, which Adam turns into steps of up to lr, in the
    serial run as in any other. Such elements are checked to stay small, not
    to agree."""
    if name.endswith("attn.c_attn.bias"):
        h = len(values) // 3
        return range(h, 2 * h)
    return None


def train_run(setup, name, ranks, model, parallel, data, flags, save=None,
              extra=""):
    """Compiles the job of the given sections (args.steps steps of lr 3e-3,
    validation every 10 over 2 global batches; `extra` sections after)
    into NAME.plan and trains it on `ranks` ranks with `flags`, saving to
    `save` when given; returns the metrics file and the final parameters'
    file."""
    args, b, w = setup.args, setup.b, setup.w
    job = w(f"{name}.textproto")
    with open(job, "w") as f:
        f.write(f"model {{ {model} }}\nparallel {{ {parallel} }}\n"
                f"train {{ steps: {args.steps} lr: 3e-3 warmup_steps: 2 seed: 7 "
                f"eval_interval: 10 eval_iters: 2 }}\ndata {{ {data} }}\n{extra}")
    plan = w(f"{name}.plan")
    run([b("braidc"), job, "--emit=plan", "-o", plan])
    metrics, params = w(f"{name}.jsonl"), w(f"{name}.safetensors")
    cmd = [b("braid-run"), plan, *flags, "--metrics-out", metrics,
           "--save-params", params, "--log-every", "1000"]
    if save:
        cmd += ["--save", save, "--overwrite"]
    run((mpirun(ranks) if ranks > 1 else []) + cmd)
    return metrics, params


def param_difference(params, serial_params, start=None):
    """The largest difference of `params` from `serial_params`, relative to
    each tensor's largest magnitude, leaving out noise_only's elements
    (which must stay within 1e-3 of where they started, `start`'s values or
    else 0: 20 steps of lr 3e-3, far less in fact)."""
    dp = 0.0
    for pname, ref in serial_params.items():
        got = params[pname]
        scale = max(max(abs(x) for x in ref), 1e-12)
        noise = noise_only(pname, ref) or range(0)
        origin = np.ravel(start[pname]) if start and pname in start else None
        for i in noise:
            o = 0.0 if origin is None else float(origin[i])
            if abs(got[i] - o) > 1e-3 or abs(ref[i] - o) > 1e-3:
                sys.exit(f"FAILED: {pname}[{i}] = {got[i]}, {ref[i]}: a "
                         f"zero-gradient element moved far from {o}")
        diffs = [abs(x - y) for i, (x, y) in enumerate(zip(got, ref))
                 if i not in noise]
        dp = max(dp, max(diffs, default=0.0) / scale)
    return dp


def unfuse_mlp(params, reference):
    """`params` with each fused "P.mlp.gate_up_proj.S" ([gate; up] rows) as
    the "P.mlp.gate_proj.S" and "P.mlp.up_proj.S" that `reference` has."""
    out = {}
    for name, values in params.items():
        if ".mlp.gate_up_proj." not in name:
            out[name] = values
            continue
        gate = name.replace(".mlp.gate_up_proj.", ".mlp.gate_proj.")
        up = name.replace(".mlp.gate_up_proj.", ".mlp.up_proj.")
        half = len(values) // 2
        assert len(reference[gate]) == half and len(reference[up]) == half, name
        out[gate], out[up] = values[:half], values[half:]
    assert out.keys() == reference.keys(), sorted(out.keys() ^ reference.keys())
    return out


def main():
    def options(ap):
        ap.add_argument("--steps", type=int, default=20)
        ap.add_argument("--loss-rtol", type=float, default=1e-5)
        ap.add_argument("--param-rtol", type=float, default=1e-4)
        ap.add_argument("--eval-rtol", type=float, default=1e-6)
        ap.add_argument("--only", default="",
                        help="run only the layouts whose name matches this regular expression")
    setup = Setup(options)
    args, b, w = setup.args, setup.b, setup.w
    # 200 KB of real text, bytes as tokens, a document per line (the splits
    # divide documents).
    setup.dataset(200_000, split_lines=True)

    # (name, mpirun ranks, extra parallel fields): global batch 4 throughout.
    layouts = [
        # The gradients' sums start during the last micro-batch's backward
        # (one bucket of tiny-llama's 632 KB by default; several of 20 KB
        # with accumulation), or run after it (grad_bucket_bytes 0).
        ("dp2", 2, "dp: 2 micro_batch_size: 2"),
        ("dp4", 4, "dp: 4 micro_batch_size: 1 grad_bucket_bytes: 0"),
        ("dp2-accumulate2", 2,
         "dp: 2 micro_batch_size: 1 global_batch_size: 4 grad_bucket_bytes: 20000"),
        ("tp2", 2, "tp: 2 micro_batch_size: 4"),
        # tiny-llama's 2 kv heads are replicated at tp 4 (tiny-gpt2's 4 split).
        ("tp4", 4, "tp: 4 micro_batch_size: 4"),
        ("tp2-dp2", 4, "tp: 2 dp: 2 micro_batch_size: 2"),
        ("tp2-sp", 2, "tp: 2 sp: true micro_batch_size: 4"),
        ("tp2-dp2-sp", 4, "tp: 2 dp: 2 sp: true micro_batch_size: 2"),
        # ZeRO-1: the optimizer state sharded over dp; the reduce-scatters
        # start during the last micro-batch's backward (several buckets of
        # 40 KB with accumulation), or run after it (grad_bucket_bytes 0).
        ("dp2-zero1", 2, "dp: 2 micro_batch_size: 2 zero: 1"),
        ("dp2-accumulate2-zero1", 2, "dp: 2 micro_batch_size: 1 global_batch_size: 4 "
         "zero: 1 zero_bucket_bytes: 40000"),
        ("tp4-dp2-zero1", 8, "tp: 4 dp: 2 micro_batch_size: 2 zero: 1 grad_bucket_bytes: 0"),
        # ZeRO-2: gradients too, reduce-scattered during backward.
        ("dp2-accumulate2-zero2", 2, "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 2"),
        ("tp4-dp2-zero2", 8, "tp: 4 dp: 2 micro_batch_size: 2 zero: 2"),
        # ZeRO-3: parameters too, gathered before each use.
        ("dp2-accumulate2-zero3", 2, "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
        ("tp4-dp2-zero3", 8, "tp: 4 dp: 2 micro_batch_size: 2 zero: 3"),
        # SwiGLU's gate and up projections fused (model.fuse_mlp), against the
        # serial run of the model without: the fused weight starts as, and
        # must stay, the gate rows over the up rows.
        ("fuse-mlp", 1, "micro_batch_size: 4", "fuse_mlp: true"),
        ("tp2-fuse-mlp", 2, "tp: 2 micro_batch_size: 4", "fuse_mlp: true"),
        ("tp2-dp2-sp-zero2-fuse-mlp", 4,
         "tp: 2 dp: 2 sp: true micro_batch_size: 2 zero: 2", "fuse_mlp: true"),
    ]
    # Pipelines, on 4-layer models: each schedule with several micro-batches
    # in flight, with tp and dp (8 ranks), and an uneven cut. tiny-gpt2 ties
    # its embeddings: the first and last stages both hold the table.
    pipeline_layouts = [
        ("pp2-1f1b", 2, "pp: 2 micro_batch_size: 1 global_batch_size: 4"),
        ("pp2-gpipe", 2, 'pp: 2 micro_batch_size: 1 global_batch_size: 4 schedule: "gpipe"'),
        ("pp4-1f1b", 4, "pp: 4 micro_batch_size: 1 global_batch_size: 4"),
        ("pp4-gpipe", 4, 'pp: 4 micro_batch_size: 2 global_batch_size: 4 schedule: "gpipe"'),
        ("pp2-zbh1", 2, 'pp: 2 micro_batch_size: 1 global_batch_size: 4 schedule: "zb-h1"'),
        ("pp4-zbh1", 4, 'pp: 4 micro_batch_size: 1 global_batch_size: 4 schedule: "zb-h1"'),
        ("pp2-vpp2", 2, "pp: 2 vpp: 2 micro_batch_size: 1 global_batch_size: 4"),
        ("pp2-uneven", 2, "pp: 2 micro_batch_size: 1 global_batch_size: 4 stage_layers: 3 stage_layers: 1"),
        # Each stage's last backward call starts its gradients' sums, in
        # buckets of 20 KB: with 1F1B, ZB-H1 (the weight gradients' last
        # call) and the interleaved schedule (each chunk's last call).
        ("pp2-tp2-dp2", 8, "pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 "
         "grad_bucket_bytes: 20000"),
        ("pp2-zbh1-dp2", 4, 'pp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 '
         'schedule: "zb-h1" grad_bucket_bytes: 20000'),
        ("pp2-vpp2-dp2", 4, "pp: 2 vpp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 "
         "grad_bucket_bytes: 20000"),
        ("pp2-tp2-sp-dp2", 8, "pp: 2 tp: 2 sp: true dp: 2 micro_batch_size: 1 global_batch_size: 4"),
        # Recomputation: each mode on tp 2 x pp 2 x dp 2; auto with a budget
        # halfway between what full recompute and none need ({budget}).
        ("pp2-tp2-dp2-selective", 8,
         'pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 recompute: "selective"'),
        ("pp2-tp2-dp2-full", 8,
         'pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 recompute: "full"'),
        ("pp2-tp2-sp-dp2-auto", 8,
         'pp: 2 tp: 2 sp: true dp: 2 micro_batch_size: 1 global_batch_size: 4 '
         'recompute: "auto" memory_budget_bytes: {budget}'),
        # ZeRO-1 on tp 2 x pp 2 x dp 2, alone (the reduce-scatters of 20 KB
        # buckets started in each stage's last backward) and with full
        # recompute; on the interleaved schedule, a bucket's gradients come
        # from both chunks of the stage.
        ("pp2-tp2-dp2-zero1", 8,
         "pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 1 "
         "zero_bucket_bytes: 20000"),
        ("pp2-vpp2-dp2-zero1", 4,
         "pp: 2 vpp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 1"),
        ("pp2-tp2-sp-dp2-full-zero1", 8,
         'pp: 2 tp: 2 sp: true dp: 2 micro_batch_size: 1 global_batch_size: 4 '
         'recompute: "full" zero: 1'),
        ("pp2-tp2-dp2-zero2", 8,
         "pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 2"),
        ("pp2-tp2-dp2-zbh1-selective-zero2", 8,
         'pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 '
         'schedule: "zb-h1" recompute: "selective" zero: 2'),
        ("pp2-tp2-dp2-zero3", 8,
         "pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
        ("pp2-tp2-sp-dp2-full-zero3", 8,
         'pp: 2 tp: 2 sp: true dp: 2 micro_batch_size: 1 global_batch_size: 4 '
         'recompute: "full" zero: 3'),
        ("pp2-vpp2-dp2-zero3", 4,
         "pp: 2 vpp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
        ("pp2-tp2-dp2-zero3-fuse-mlp", 8,
         "pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3",
         "fuse_mlp: true"),
    ]
    models = [(m, f'preset: "{m}"', layouts) for m in ("tiny-llama", "tiny-gpt2")]
    for m in ("tiny-llama", "tiny-gpt2"):
        models.append((f"{m}-4layers", f'preset: "{m}" num_layers: 4',
                       pipeline_layouts))
    # Interleaved on 4 ranks: 2 chunks each need 8 layers.
    for m in ("tiny-llama", "tiny-gpt2"):
        models.append((f"{m}-8layers", f'preset: "{m}" num_layers: 8',
                       [("pp4-vpp2", 4, "pp: 4 vpp: 2 micro_batch_size: 1 global_batch_size: 4")]))
    worst_loss = worst_param = worst_eval = 0.0
    for model, base_fields, model_layouts in models:
        for dropout in (0.0, 0.1):
            tag = f"{model}-dropout{dropout}"
            model_fields = f"{base_fields} hidden_dropout: {dropout}"
            if model.startswith("tiny-gpt2"):
                model_fields += f" embedding_dropout: {dropout}"

            def largest_arena(name, parallel):
                """The largest rank's arena of the plan `parallel` makes."""
                job, report = w(f"{tag}-{name}.textproto"), w(f"{tag}-{name}.json")
                with open(job, "w") as f:
                    f.write(f"model {{ {model_fields} }}\nparallel {{ {parallel} }}\n"
                            f"data {{ seq_length: 32 }}\n")
                run([b("braidc"), job, "--emit=plan", "-o", w(f"{tag}-{name}.plan"),
                     "--report", report])
                with open(report) as f:
                    r = json.load(f)
                stages = r.get("pipeline", {}).get("stages", [])
                return max([s["rank_arena_bytes"] for s in stages] or [r["memory"]["arena_bytes"]])

            def evaluate(name, ranks, checkpoint, fields=None, allow=None):
                """The validation and test loss of `checkpoint` in the layout
                `name` (already compiled by train), or in the serial plan of
                the model with `fields`."""
                plan = w(f"{tag}-{name}.plan")
                if fields is not None:
                    job = w(f"{tag}-{name}.textproto")
                    with open(job, "w") as f:
                        f.write(f"model {{ {fields} }}\nparallel {{ micro_batch_size: 4 }}\n"
                                f"train {{ steps: {args.steps} lr: 3e-3 warmup_steps: 2 "
                                f"seed: 7 eval_interval: 10 eval_iters: 2 }}\n"
                                f'data {{ seq_length: 32 split: "90,5,5" }}\n')
                    run([b("braidc"), job, "--emit=plan", "-o", plan])
                metrics = w(f"{tag}-{name}-eval.jsonl")
                cmd = [b("braid-run"), plan, "--data", w("data"), "--load", checkpoint,
                       "--metrics-out", metrics]
                if allow:
                    cmd += ["--allow-model-change", allow]
                run((mpirun(ranks) if ranks > 1 else []) + cmd)
                (line,) = [json.loads(l) for l in open(metrics)]
                assert line["step"] == args.steps and "loss" not in line, line
                return line["valid_loss"], line["test_loss"]

            def train(name, ranks, parallel, extra_model_fields="", save=None):
                if "{budget}" in parallel:
                    base = parallel.split("recompute:")[0]
                    low = largest_arena(name + "-full", base + 'recompute: "full"')
                    high = largest_arena(name + "-none", base)
                    parallel = parallel.replace("{budget}", str((low + high) // 2))
                metrics, params = train_run(
                    setup, f"{tag}-{name}", ranks,
                    f"{model_fields} {extra_model_fields}", parallel,
                    'seq_length: 32 split: "90,5,5"', ["--data", w("data")], save)
                lines = [json.loads(l) for l in open(metrics)]
                losses = [l["loss"] for l in lines]
                assert len(losses) == args.steps, (name, len(losses))
                # Validation after every 10th step and the last, the test
                # split after the last.
                evaluated = [l["step"] for l in lines if "valid_loss" in l]
                want = sorted({s for s in range(10, args.steps + 1, 10)} | {args.steps})
                assert evaluated == want and "test_loss" in lines[-1], (name, evaluated)
                return losses, read_safetensors(params), lines[-1]

            chosen = [l for l in model_layouts if re.search(args.only, l[0])]
            if model.startswith("tiny-gpt2"):  # a GeLU MLP: nothing to fuse
                chosen = [l for l in chosen if "fuse_mlp" not in "".join(l[3:])]
            if not chosen:
                continue
            checkpoint = w(f"{tag}-serial-ckpt")
            serial_losses, serial_params, serial_last = train(
                "serial", 1, "micro_batch_size: 4", save=checkpoint)
            serial_eval = (serial_last["valid_loss"], serial_last["test_loss"])
            if dropout:
                # The same weights in the model without dropout: the same
                # losses, evaluation having none.
                plain = evaluate("serial-nodropout", 1, checkpoint,
                                 fields=model_fields.replace(f": {dropout}", ": 0.0"),
                                 allow="hidden_dropout,embedding_dropout")
                de = max(abs(a - s) / abs(s) for a, s in zip(plain, serial_eval))
                print(f"{tag:24s} {'no dropout':16s} eval rel diff {de:.2e}")
                if de > args.eval_rtol:
                    sys.exit(f"FAILED: {tag}: evaluation depends on dropout: {plain} "
                             f"without, {serial_eval} with")
            for name, ranks, parallel, *extra in chosen:
                losses, params, _ = train(name, ranks, parallel, *extra)
                params = unfuse_mlp(params, serial_params)
                dl = max(abs(a - s) / abs(s) for a, s in zip(losses, serial_losses))
                dp = param_difference(params, serial_params)
                de = 0.0
                # (A layout of another model, fuse_mlp's, cannot load the
                # serial checkpoint: a Braid checkpoint keeps its layout of
                # the MLP.)
                evaluates = dropout and not extra
                if evaluates:
                    got = evaluate(name, ranks, checkpoint)
                    de = max(abs(a - s) / abs(s) for a, s in zip(got, serial_eval))
                print(f"{tag:24s} {name:16s} loss rel diff {dl:.2e}  param rel diff {dp:.2e}"
                      + (f"  eval rel diff {de:.2e}" if evaluates else ""))
                if dl > args.loss_rtol or dp > args.param_rtol or math.isnan(dl + dp):
                    sys.exit(f"FAILED: {tag} {name} differs from the serial run")
                if de > args.eval_rtol or math.isnan(de):
                    sys.exit(f"FAILED: {tag} {name}: the serial checkpoint's validation "
                             f"and test losses differ from the serial run's")
                worst_loss, worst_param = max(worst_loss, dl), max(worst_param, dp)
                worst_eval = max(worst_eval, de)
    if re.search(args.only, "instruction"):
        instruction_runs(setup)
    if re.search(args.only, "packed"):
        packed_runs(setup)
    print(f"largest loss difference {worst_loss:.2e} (limit {args.loss_rtol}), "
          f"largest parameter difference {worst_param:.2e} (limit {args.param_rtol}), "
          f"largest evaluation difference {worst_eval:.2e} (limit {args.eval_rtol})")

    if args.only:
        return  # the checks below use the dp2 plan of the whole run
    # A job whose size does not match the plan is refused, naming both.
    plan = w("tiny-llama-dropout0.0-dp2.plan")
    p = subprocess.run(mpirun(3) + [b("braid-run"), plan, "--data", w("data")],
                       capture_output=True, text=True, timeout=120)
    want = "the plan is for 2 ranks (dp 2 x tp 1) but the job has 3: start it with mpirun -np 2"
    if p.returncode == 0 or want not in p.stderr:
        sys.exit(f"FAILED: world size mismatch: rc {p.returncode}\n{p.stderr}")
    # So is a multi-rank plan started without mpirun.
    p = subprocess.run([b("braid-run"), plan, "--data", w("data")], capture_output=True, text=True)
    if p.returncode == 0 or "start it with mpirun -np 2" not in p.stderr:
        sys.exit(f"FAILED: multi-rank plan without mpirun: rc {p.returncode}\n{p.stderr}")

    # A rank that dies mid-run: the job ends with an error, it does not hang.
    # Output to a file: a pipe nobody reads would fill and block mpirun.
    log = open(w("killed-rank.log"), "w")
    proc = subprocess.Popen(mpirun(2) + [b("braid-run"), plan, "--data", w("data"),
                                         "--steps", "1000000", "--log-every", "1"],
                            stdout=log, stderr=subprocess.STDOUT)
    time.sleep(3)  # training by now
    victims = subprocess.run(["pgrep", "-f", f"braid-run {plan}"], capture_output=True,
                             text=True).stdout.split()
    victims = [v for v in victims if int(v) != proc.pid]
    if not victims:
        proc.kill()
        sys.exit("FAILED: no braid-run rank to kill")
    killed = time.monotonic()
    os.kill(int(victims[-1]), signal.SIGKILL)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        sys.exit("FAILED: the job still runs 60 s after one of its ranks was killed")
    if proc.returncode == 0:
        sys.exit("FAILED: the job with a killed rank exited 0")
    print(f"a killed rank ended the job in {time.monotonic() - killed:.1f} s "
          f"(mpirun exit {proc.returncode})")
    print("parity: 1 passed, 0 failed")


def instruction_records(count, seed):
    """Alpaca records with exact answers: sums, reversed words and words
    spelled out (whose answers run past a sample of 61 tokens)."""
    rng = np.random.default_rng(seed)
    words = ["apple", "river", "stone", "cloud", "garden", "music", "paper",
             "window", "silver", "orange"]
    records = []
    for i in range(count):
        if i % 3 == 1:
            a, b = (int(x) for x in rng.integers(0, 1000, 2))
            records.append({"instruction": f"What is {a} plus {b}?",
                            "output": str(a + b)})
        elif i % 3 == 2:
            word = words[int(rng.integers(0, len(words)))]
            records.append({"instruction": "Spell it.", "input": word,
                            "output": " ".join(word.upper())})
        else:
            word = words[int(rng.integers(0, len(words)))]
            records.append({"instruction": "Reverse the word.", "input": word,
                            "output": word[::-1]})
    return records


def per_token_loss(reference, conversations, seq):
    """Megatron's per-token loss of `conversations` ((ids, mask) each), one
    a sample: each truncated to seq + 1 tokens, token t + 1 predicted from
    tokens 0..t where its mask is 1; the sum of those tokens' cross-entropy
    over their number. Also the mean of each conversation's own mean, the
    convention it must differ from."""
    total, counted, means = 0.0, 0, []
    for ids, mask in conversations:
        ids, mask = ids[:seq + 1], mask[:seq + 1]
        logits = reference.logits(ids[:-1])
        lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + \
            logits.max(-1)
        losses = [lse[t] - logits[t, ids[t + 1]] for t in range(len(ids) - 1)
                  if mask[t + 1]]
        total += sum(losses)
        counted += len(losses)
        means.append(sum(losses) / len(losses))
    return total / counted, sum(means) / len(means)


def check_peft_export(setup, family, config, weights, root, targets, dropout,
                      valid_loss, valid_conversations, seq):
    """braid-ckpt export --peft of a LoRA run's checkpoint, read back with
    the safetensors package: PEFT's names (base_model.model.<module>.lora_A
    / lora_B.weight) for exactly the target modules' linears, their shapes
    ([r, in], [out, r]), adapter_config.json's fields; and the base model
    with the adapters merged by PEFT's definition (W + alpha/r B A; for
    GPT-2's Conv1D, fan_in_fan_out, its transpose) gives the run's last
    validation loss; braid-ckpt merge of the export and of the checkpoint
    into the base directory writes those merged weights."""
    from safetensors.numpy import load_file
    import hf_reference as ref
    out = setup.w(f"{os.path.basename(root)}-peft")
    shutil.rmtree(out, ignore_errors=True)
    run([setup.b("braid-ckpt"), "export", root, "--peft", out])
    with open(os.path.join(out, "adapter_config.json")) as f:
        cfg = json.load(f)
    want_cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4,
                "lora_alpha": 8, "lora_dropout": dropout, "target_modules": targets,
                "fan_in_fan_out": family == "gpt2", "bias": "none"}
    for key, value in want_cfg.items():
        if cfg.get(key) != value:
            sys.exit(f"FAILED: PEFT export of {family}: adapter_config.json's "
                     f"{key} is {cfg.get(key)!r}, expected {value!r}")
    adapters = load_file(os.path.join(out, "adapter_model.safetensors"))
    conv1d = family == "gpt2"
    want = {}
    for name, w in weights.items():
        module = name.rsplit(".", 1)[0]
        if not name.endswith(".weight") or np.ndim(w) != 2 or \
                module.rsplit(".", 1)[-1] not in targets:
            continue
        out_dim, in_dim = (w.shape[1], w.shape[0]) if conv1d else w.shape
        want[f"base_model.model.{module}.lora_A.weight"] = (4, in_dim)
        want[f"base_model.model.{module}.lora_B.weight"] = (out_dim, 4)
    got = {k: tuple(v.shape) for k, v in adapters.items()}
    if got != want:
        sys.exit(f"FAILED: PEFT export of {family}: tensors {sorted(got.items())}, "
                 f"expected {sorted(want.items())}")
    merged = {k: np.array(v, dtype=np.float64) for k, v in weights.items()}
    for key in want:
        if ".lora_A." not in key:
            continue
        module = key[len("base_model.model."):-len(".lora_A.weight")]
        a = adapters[key].astype(np.float64)
        b = adapters[key.replace(".lora_A.", ".lora_B.")].astype(np.float64)
        delta = (8 / 4) * b @ a  # [out, in]
        merged[module + ".weight"] += delta.T if conv1d else delta
    # braid-ckpt merge of the PEFT export, and of the run's checkpoint
    # itself, into the base directory: the merged weights, each within
    # float32's rounding of the float64 merge.
    model_dir = setup.w(f"instruction-{family}")
    for source, tag in ((out, "peft"), (root, "checkpoint")):
        merged_dir = setup.w(f"{os.path.basename(root)}-merged-{tag}")
        shutil.rmtree(merged_dir, ignore_errors=True)
        run([setup.b("braid-ckpt"), "merge", "--base", model_dir, "--lora", source,
             "--out", merged_dir])
        _, got_weights = ref.load_hf_dir(merged_dir)
        if sorted(got_weights) != sorted(merged):
            sys.exit(f"FAILED: merge of {family} ({tag}): tensors differ from the base's")
        for name, want_w in merged.items():
            got_w = np.asarray(got_weights[name], dtype=np.float64).reshape(want_w.shape)
            if np.max(np.abs(got_w - want_w)) > 1e-6 * max(np.max(np.abs(want_w)), 1e-12):
                sys.exit(f"FAILED: merge of {family} ({tag}): {name} is not W + "
                         "alpha/r B A")
    want_loss, _ = per_token_loss(ref.Reference(config, merged),
                                  valid_conversations, seq)
    print(f"instruction-{family:5s} PEFT export: {len(adapters)} tensors; the "
          f"merged model's validation loss {want_loss:.7f}, the run's {valid_loss:.7f}")
    if abs(want_loss - valid_loss) > 1e-5 * want_loss:
        sys.exit(f"FAILED: PEFT export of {family}: the base with the exported "
                 f"adapters merged gives {want_loss}, the run {valid_loss}")


def instruction_runs(setup):
    """Instruction data in every kind of layout against the serial run, and
    the serial run against a float64 reference (module docstring)."""
    import hf_reference as ref
    import instruction_reference as iref
    args, b, w = setup.args, setup.b, setup.w
    records = instruction_records(200, seed=3)
    with open(w("qa.json"), "w") as f:
        json.dump(records, f)
    run([b("braid-data"), "preprocess", "--handler", "alpaca", "--input",
         w("qa.json"), "--output-prefix", w("qa"), "--tokenizer", "byte"])
    # The byte tokenizer: a token per UTF-8 byte, 256 ending each answer.
    conversations = [iref.render("alpaca", *iref.conversation("alpaca", r),
                                 lambda t: list(t.encode("utf-8")), None, 256)
                     for r in records]
    seq, steps = 60, args.steps
    # Some conversations are longer than a sample: truncated.
    assert any(len(ids) > seq + 1 for ids, _ in conversations)
    layouts = [
        ("accumulate4", 1, "micro_batch_size: 1 global_batch_size: 4"),
        ("dp2-accumulate2-zero1", 2,
         "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 1"),
        ("dp2-accumulate2-zero3", 2,
         "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
        ("tp2-sp", 2, "tp: 2 sp: true micro_batch_size: 4"),
        ("pp2-dp2", 4, "pp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4"),
        ("pp2-vpp2", 2, "pp: 2 vpp: 2 micro_batch_size: 1 global_batch_size: 4"),
    ]
    worst = 0.0
    for family in ("llama", "gpt2"):
        config, weights = ref.random_model(
            family, {"vocab_size": 512, ("num_hidden_layers" if family == "llama"
                                         else "n_layer"): 4}, seed=11, std=0.05)
        model_dir = w(f"instruction-{family}")
        ref.save_hf_dir(model_dir, config, weights)

        def train(name, ranks, parallel, save=None, extra=""):
            metrics, params = train_run(
                setup, f"instruction-{family}-{name}", ranks,
                f'hf_config: "{model_dir}/config.json"', parallel,
                f'seq_length: {seq} split: "90,5,5" data_order: "sequential" '
                "instruction: true",
                ["--data", w("qa"), "--init-from", model_dir], save, extra)
            lines = [json.loads(l) for l in open(metrics)]
            assert len(lines) == steps, (name, len(lines))
            return lines, read_safetensors(params)

        root = w(f"instruction-{family}-serial-ckpt")
        serial, serial_params = train("serial", 1, "micro_batch_size: 4", save=root)
        # Step 1 is the imported weights' loss on conversations 0-3 (the
        # split's first, in order).
        want, mean_of_means = per_token_loss(ref.Reference(config, weights),
                                             conversations[:4], seq)
        got = serial[0]["loss"]
        print(f"instruction-{family:5s} step 1 loss {got:.7f}, reference "
              f"{want:.7f} (mean of the conversations' means {mean_of_means:.7f})")
        if abs(got - want) > 1e-5 * want:
            sys.exit(f"FAILED: instruction {family}: step 1's loss {got} is not "
                     f"the per-token loss {want} of the first global batch")
        if abs(mean_of_means - want) < 1e-3 * want:
            sys.exit("FAILED: the first batch cannot tell the conventions apart")
        # The last validation loss: the final weights (exported to Hugging
        # Face) on the validation split's first 2 global batches,
        # conversations 180-187, per token over all of them.
        hf = w(f"instruction-{family}-final-hf")
        shutil.rmtree(hf, ignore_errors=True)
        run([b("braid-ckpt"), "export", root, "--hf", hf])
        final = ref.Reference(*ref.load_hf_dir(hf))
        want_valid, _ = per_token_loss(final, conversations[180:188], seq)
        got_valid = serial[-1]["valid_loss"]
        print(f"instruction-{family:5s} validation loss {got_valid:.7f}, "
              f"reference {want_valid:.7f}")
        if abs(got_valid - want_valid) > 1e-5 * want_valid:
            sys.exit(f"FAILED: instruction {family}: the validation loss "
                     f"{got_valid} is not the reference's {want_valid}")
        for name, ranks, parallel in layouts:
            lines, params = train(name, ranks, parallel)
            dl = max(abs(a["loss"] - s["loss"]) / s["loss"]
                     for a, s in zip(lines, serial))
            de = max(abs(lines[-1][k] - serial[-1][k]) / serial[-1][k]
                     for k in ("valid_loss", "test_loss"))
            dp = param_difference(params, serial_params, weights)
            print(f"instruction-{family:5s} {name:22s} loss rel diff {dl:.2e}  "
                  f"param rel diff {dp:.2e}  eval rel diff {de:.2e}")
            if dl > args.loss_rtol or dp > args.param_rtol or de > args.loss_rtol \
                    or math.isnan(dl + dp + de):
                sys.exit(f"FAILED: instruction {family} {name} differs from the "
                         "serial run")
            worst = max(worst, dl)

        # LoRA on the imported model: adapters on the attention and MLP
        # projections, the rest frozen. Step 1 is the base model's loss (B
        # starts at 0); the frozen weights end as they were imported; every
        # layout trains what the serial run trains, with the adapters'
        # dropout (each element's mask that of its place in the whole
        # tensor, also where tensor parallelism splits the adapter's input).
        targets = {"llama": ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"],
                   "gpt2": ["c_attn", "c_proj", "c_fc"]}[family]
        def lora(dropout):
            return ("lora { rank: 4 alpha: 8 dropout: %g %s }\n" %
                    (dropout, " ".join(f'target_modules: "{t}"' for t in targets)))
        for dropout, lora_layouts in (
                (0.1, [("lora-accumulate4", 1, "micro_batch_size: 1 global_batch_size: 4"),
                       ("lora-dp2-zero3", 2,
                        "dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
                       ("lora-pp2-dp2", 4,
                        "pp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 1"),
                       ("lora-pp2-vpp2", 2,
                        "pp: 2 vpp: 2 micro_batch_size: 1 global_batch_size: 4"),
                       ("lora-tp2", 2, "tp: 2 micro_batch_size: 4"),
                       ("lora-tp2-sp-dp2-zero1", 4,
                        "tp: 2 sp: true dp: 2 micro_batch_size: 2 zero: 1")]),):
            tag = f"lora-serial-dropout{dropout}"
            lora_root = w(f"instruction-{family}-{tag}-ckpt")
            base, base_params = train(tag, 1, "micro_batch_size: 4",
                                      save=lora_root, extra=lora(dropout))
            check_peft_export(setup, family, config, weights, lora_root, targets,
                              dropout, base[-1]["valid_loss"],
                              conversations[180:188], seq)
            if abs(base[0]["loss"] - want) > 1e-5 * want:
                sys.exit(f"FAILED: instruction {family} {tag}: step 1's loss "
                         f"{base[0]['loss']} is not the base model's {want}")
            moved = [p for p, v in base_params.items() if ".lora_" in p and
                     any(x != 0 for x in v)]
            if len(moved) != 2 * len([p for p in base_params if ".lora_A." in p]):
                sys.exit(f"FAILED: instruction {family} {tag}: adapters did not train")
            for p, v in base_params.items():
                if ".lora_" not in p and list(np.ravel(weights[p])) != list(v):
                    sys.exit(f"FAILED: instruction {family} {tag}: the frozen {p} "
                             "changed")
            for name, ranks, parallel in lora_layouts:
                lines, params = train(name, ranks, parallel, extra=lora(dropout))
                dl = max(abs(a["loss"] - s["loss"]) / s["loss"]
                         for a, s in zip(lines, base))
                dp = param_difference(params, base_params, weights)
                print(f"instruction-{family:5s} {name:22s} loss rel diff {dl:.2e}  "
                      f"param rel diff {dp:.2e}")
                if dl > args.loss_rtol or dp > args.param_rtol or math.isnan(dl + dp):
                    sys.exit(f"FAILED: instruction {family} {name} differs from "
                             "the serial LoRA run")
                worst = max(worst, dl)
    print(f"instruction data: largest loss difference {worst:.2e}")


def packed_records(pairs, seq):
    """Records of the plain handler (plain template, byte tokenizer) whose
    conversations come in pairs: pair i is a long conversation of seq - 22 -
    3i - (i mod 3) tokens and a short one of 23 + 3i, together seq + 1 - (i
    mod 3) tokens. Best-fit decreasing (the longs open the bins in file order,
    each short then fits its own partner's bin best) packs each pair into a
    sample in file order, the long first."""
    import instruction_reference as iref

    def record(length, i):
        # A plain conversation of prompt p and response r is "User: p" +
        # "\nAssistant:" + " r" + the end token: 19 + len(p) + len(r).
        prompt = f"q{i}"
        response = "a" * (length - 19 - len(prompt))
        assert len(response) >= 1
        rec = {"prompt": prompt, "response": response}
        ids, _ = iref.render("plain", *iref.conversation("plain", rec),
                             lambda t: list(t.encode("utf-8")), None, 256)
        assert len(ids) == length, (len(ids), length)
        return rec

    records = []
    for i in range(pairs):
        short = 23 + 3 * i
        long = seq + 1 - short - i % 3
        assert long > 23 + 3 * (pairs - 1)
        records += [record(long, 2 * i), record(short, 2 * i + 1)]
    return records


def packed_runs(setup):
    """Packed conversations against the same conversations one per padded
    sample (module docstring), LLaMA (RoPE at the positions) and GPT-2
    (learned positions at them, also under sp)."""
    import hf_reference as ref
    args, b, w = setup.args, setup.b, setup.w
    seq = 120
    # Training 10 pairs, validation and test 4 each: documents 20, 8, 8.
    records = packed_records(10, seq) + packed_records(4, seq) + \
        packed_records(4, seq)
    with open(w("packed.json"), "w") as f:
        json.dump(records, f)
    run([b("braid-data"), "preprocess", "--handler", "plain", "--template",
         "plain", "--input", w("packed.json"), "--output-prefix", w("packed"),
         "--tokenizer", "byte"])
    layouts = [
        ("accumulate2", 1, "micro_batch_size: 1 global_batch_size: 2"),
        ("dp2-zero1", 2, "dp: 2 micro_batch_size: 1 zero: 1"),
        ("dp2-zero3", 2, "dp: 2 micro_batch_size: 1 zero: 3"),
        ("tp2-sp", 2, "tp: 2 sp: true micro_batch_size: 2"),
        ("pp2", 2, "pp: 2 micro_batch_size: 1 global_batch_size: 2"),
        ("pp2-vpp2", 2, "pp: 2 vpp: 2 micro_batch_size: 1 global_batch_size: 2"),
        ("pp2-zb-recompute", 2, 'pp: 2 schedule: "zb-h1" recompute: "full" '
         "micro_batch_size: 1 global_batch_size: 2"),
    ]
    worst = 0.0
    for family in ("llama", "gpt2"):
        config, weights = ref.random_model(
            family, {"vocab_size": 512, ("num_hidden_layers" if family == "llama"
                                         else "n_layer"): 4}, seed=13, std=0.05)
        model_dir = w(f"packed-{family}")
        ref.save_hf_dir(model_dir, config, weights)

        def train(name, ranks, parallel, pack):
            metrics, params = train_run(
                setup, f"packed-{family}-{name}", ranks,
                f'hf_config: "{model_dir}/config.json"', parallel,
                f'seq_length: {seq} split: "20,8,8" data_order: "sequential" '
                "instruction: true" + (" pack: true" if pack else ""),
                ["--data", w("packed"), "--init-from", model_dir])
            lines = [json.loads(l) for l in open(metrics)]
            assert len(lines) == args.steps, (name, len(lines))
            return lines, read_safetensors(params)

        padded, padded_params = train("padded-serial", 1, "micro_batch_size: 4",
                                      pack=False)
        for name, ranks, parallel in [("serial", 1, "micro_batch_size: 2")] + \
                (layouts if family == "llama" else
                 [l for l in layouts if l[0] in ("tp2-sp", "pp2")]):
            lines, params = train(name, ranks, parallel, pack=True)
            dl = max(abs(a["loss"] - s["loss"]) / s["loss"]
                     for a, s in zip(lines, padded))
            de = max(abs(lines[-1][k] - padded[-1][k]) / padded[-1][k]
                     for k in ("valid_loss", "test_loss"))
            dp = param_difference(params, padded_params, weights)
            print(f"packed-{family:5s} {name:12s} against padded: loss rel diff "
                  f"{dl:.2e}  param rel diff {dp:.2e}  eval rel diff {de:.2e}")
            if dl > 1e-6 or dp > args.param_rtol or de > 1e-6 or \
                    math.isnan(dl + dp + de):
                sys.exit(f"FAILED: packed {family} {name} does not train what "
                         "the padded serial run trains")
            worst = max(worst, dl, de)
    print(f"packed conversations: largest loss difference from padded {worst:.2e}")


if __name__ == "__main__":
    main()
