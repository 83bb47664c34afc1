#!/usr/bin/env python3
"""braid eval against independent references.

- Log-likelihoods: `braid eval --task mmlu` (2 shots) on random Hugging Face
  models, LLaMA (grouped-query attention, RoPE) and GPT-2 (learned
  positions), with the byte tokenizer, on one rank (each item's context
  computed once for its options, and with --no-shared-prefixes each
  request whole through the score function) and split over tp 2:
  every option's log-likelihood (--log-samples: its context and
  continuation ids) equals the sum of the continuation tokens'
  log-softmax under hf_reference.py (a numpy forward written from the
  models' definitions, in float64) to 1e-5 relative, and its greedy flag
  whether each continuation token is the reference's argmax; tp 2 scores
  what one rank scores. The results' accuracy is the mean of the items'.
- Bad input: a task that does not exist and a malformed benchmark file get
  one error line naming them.

  evaluate.py --bin BUILD/bin --work DIR --corpus TEXT
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import hf_reference as ref  # noqa: E402

TOLERANCE = 1e-5
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                    "eval")


def braid_eval(s, model, extra, check=True):
    cmd = [s.b("braid"), "eval", model] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def log_softmax(row):
    m = row.max()
    return row - (m + np.log(np.exp(row - m).sum()))


def check_loglikelihoods(s, family, seed):
    overrides = {"vocab_size": 512}
    overrides.update({"max_position_embeddings": 1024} if family == "llama"
                     else {"n_positions": 1024, "n_ctx": 1024})
    config, weights = ref.random_model(family, overrides, seed=seed)
    model_dir = s.w(f"{family}-model")
    ref.save_hf_dir(model_dir, config, weights)
    truth = ref.Reference(config, weights)
    runs = {}
    for tp, mode in ((1, "shared"), (1, "whole"), (2, "shared")):
        samples = s.w(f"{family}-tp{tp}-{mode}-samples.jsonl")
        results = s.w(f"{family}-tp{tp}-{mode}-results.json")
        braid_eval(s, model_dir, [
            "--task", "mmlu", "--data", os.path.join(DATA, "mmlu"), "--shots",
            "2", "--limit", "2", "--tokenizer", "bytes", "--max-seq-len",
            "1024", "--max-batch", "4", "--prefill-chunk", "96", "--tp",
            str(tp), "--log-samples", samples, "-o", results] +
            (["--no-shared-prefixes"] if mode == "whole" else []))
        with open(samples) as f:
            lines = [json.loads(l) for l in f]
        with open(results) as f:
            runs[tp, mode] = (lines, json.load(f))
    lines, results = runs[1, "shared"]
    if not lines:
        sys.exit(f"FAILED: {family}: no log-likelihood requests logged")
    worst = 0.0
    # Each option's context computed once (shared) and each request whole.
    for k, line in enumerate(lines + runs[1, "whole"][0]):
        ctx, cont = line["context_ids"], line["continuation_ids"]
        ids = ctx + cont
        logits = truth.logits(ids[:-1])
        want, greedy = 0.0, True
        for j, token in enumerate(cont):
            row = logits[len(ctx) - 1 + j]
            want += log_softmax(row)[token]
            greedy = greedy and int(np.argmax(row)) == token
        got = line["logprob"]
        err = abs(got - want) / max(abs(want), 1e-12)
        worst = max(worst, err)
        if err > TOLERANCE:
            sys.exit(f"FAILED: {family} request {k}: log-likelihood {got}, "
                     f"the reference's {want}")
        if line["greedy"] != greedy:
            sys.exit(f"FAILED: {family} request {k}: greedy {line['greedy']}, "
                     f"the reference's {greedy}")
    # The byte tokenizer: the ids are the texts' bytes.
    first = lines[0]
    if bytes(first["continuation_ids"]).decode() != \
            first["continuation"] or not first["continuation"].startswith(" "):
        sys.exit(f"FAILED: {family}: continuation ids {first['continuation_ids']} "
                 f"are not the bytes of {first['continuation']!r}")
    # tp 2 scores what one rank scores.
    tp_lines, _ = runs[2, "shared"]
    if [(l["context_ids"], l["continuation_ids"]) for l in tp_lines] != \
            [(l["context_ids"], l["continuation_ids"]) for l in lines]:
        sys.exit(f"FAILED: {family}: tp 2 made other requests")
    tp_worst = max(abs(a["logprob"] - b["logprob"]) / max(abs(b["logprob"]), 1e-12)
                   for a, b in zip(tp_lines, lines))
    if tp_worst > TOLERANCE:
        sys.exit(f"FAILED: {family}: tp 2's log-likelihoods differ from one "
                 f"rank's by {tp_worst:.2e}")
    # The reported accuracy: the mean of the items' scores.
    task = results["results"][0]
    items = task["items"]
    acc = sum(i["scores"]["acc"] for i in items) / len(items)
    if abs(task["metrics"]["acc"]["value"] - acc) > 1e-12:
        sys.exit(f"FAILED: {family}: reported acc {task['metrics']['acc']} is "
                 f"not the items' mean {acc}")
    print(f"{family}: {len(lines)} log-likelihoods within {worst:.1e} of the "
          f"reference (tp 2 within {tp_worst:.1e}); acc {acc:.3f} over "
          f"{len(items)} items")


def check_errors(s):
    model_dir = s.w("llama-model")
    p = braid_eval(s, model_dir, ["--task", "trivia", "--data", DATA,
                                  "--tokenizer", "bytes"], check=False)
    if p.returncode == 0 or "trivia" not in p.stderr:
        sys.exit(f"FAILED: an unknown task: rc {p.returncode}\n{p.stderr}")
    bad = s.w("bad-mmlu")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(os.path.join(DATA, "mmlu"), bad)
    test_dir = os.path.join(bad, "test")
    name = sorted(os.listdir(test_dir))[0]
    with open(os.path.join(test_dir, name), "a") as f:
        f.write("What is 2+2?,3,4,5,6,E\n")
    p = braid_eval(s, model_dir, ["--task", "mmlu", "--data", bad,
                                  "--tokenizer", "bytes"], check=False)
    if p.returncode == 0 or name not in p.stderr:
        sys.exit(f"FAILED: a bad answer letter: rc {p.returncode}\n{p.stderr}")
    print("errors: an unknown task and a bad answer letter are named")


def main():
    s = harness.Setup()
    check_loglikelihoods(s, "llama", 51)
    check_loglikelihoods(s, "gpt2", 52)
    check_errors(s)
    print("PASSED")


if __name__ == "__main__":
    main()
